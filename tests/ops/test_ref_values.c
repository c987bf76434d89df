/* Spot values for the math reference kernels: numbers worked out by hand (or
 * from properties that hold exactly) and independent re-implementations,
 * so the kernels are checked against more than their own gradients.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hal/philox.h"
#include "ops/reference/reference.h"
#include "test_util.h"

static void ok(ty_status_t status) {
  if (status) fail_msg("unexpected error: %s", ty_status_message(status));
}

static void near(double got, double want, double rel) {
  if (!(ty_test_rel_diff(got, want) <= rel)) {
    fail_msg("got %.17g, want %.17g (rel %.2e > %.2e)", got, want,
             ty_test_rel_diff(got, want), rel);
  }
}

/* For values that may cancel towards zero, where a relative bound is
 * meaningless: inputs here are O(1), so O(1e-13) absolute is ~1000 ulp. */
static void near_abs(double got, double want, double tol) {
  if (!(fabs(got - want) <= tol)) {
    fail_msg("got %.17g, want %.17g (abs diff %.2e > %.2e)", got, want,
             fabs(got - want), tol);
  }
}

/* ---- softmax and cross-entropy ------------------------------------------ */

static void test_softmax_values(void **state) {
  (void)state;
  double x[2] = {0.0, log(3.0)}, y[2];
  ty_ref_softmax_forward(x, 1, 2, y);
  near(y[0], 0.25, 1e-15);
  near(y[1], 0.75, 1e-15);
  /* Rows sum to 1 and large shifts change nothing (the max is subtracted). */
  double r[4 * 9], s[4 * 9], t[4 * 9];
  ty_test_fill_range(r, 36, 0.1, 5.0);
  ty_ref_softmax_forward(r, 4, 9, s);
  for (int i = 0; i < 36; ++i) r[i] += 700.0; /* exp(700+) alone overflows */
  ty_ref_softmax_forward(r, 4, 9, t);
  for (int row = 0; row < 4; ++row) {
    double sum = 0.0;
    for (int c = 0; c < 9; ++c) {
      sum += s[row * 9 + c];
      near(t[row * 9 + c], s[row * 9 + c], 1e-12);
    }
    near(sum, 1.0, 1e-15);
  }
}

static void test_cross_entropy_values(void **state) {
  (void)state;
  /* Uniform logits: loss is log V whatever the target. */
  double z[3 * 50];
  for (int i = 0; i < 150; ++i) z[i] = 0.37;
  int64_t targets[3] = {0, 49, 17};
  double loss[3];
  ok(ty_ref_cross_entropy_forward(z, targets, 3, 50, loss));
  for (int i = 0; i < 3; ++i) near(loss[i], log(50.0), 1e-14);
  /* logits [0, ln 3], target 1: log(1 + 3) - ln 3 = ln(4/3). Target -1 and
   * any negative value are ignored: loss 0 and a zero gradient row. */
  double z2[3 * 2] = {0.0, log(3.0), 5.0, -2.0, 1.0, 1.0};
  int64_t t2[3] = {1, -1, -100};
  double l2[3], d2[6], up[3] = {2.0, 7.0, 7.0};
  ok(ty_ref_cross_entropy_forward(z2, t2, 3, 2, l2));
  near(l2[0], log(4.0 / 3.0), 1e-15);
  assert_true(l2[1] == 0.0 && l2[2] == 0.0);
  ok(ty_ref_cross_entropy_backward(z2, t2, up, 3, 2, d2));
  near(d2[0], 2.0 * 0.25, 1e-15);          /* dloss * (p0 - 0) */
  near(d2[1], 2.0 * (0.75 - 1.0), 1e-15);  /* dloss * (p1 - 1) */
  for (int i = 2; i < 6; ++i) assert_true(d2[i] == 0.0);
}

/* ---- norms -------------------------------------------------------------- */

static void test_norm_values(void **state) {
  (void)state;
  enum { kRows = 3, kDim = 16 };
  double x[kRows * kDim], y[kRows * kDim], mean[kRows], rstd[kRows];
  ty_test_fill_range(x, kRows * kDim, 0.1, 3.0);
  for (int i = 0; i < kDim; ++i) x[i] += 10.0; /* an offset row */
  ty_ref_layernorm_forward(x, NULL, NULL, kRows, kDim, 1e-300, y, mean, rstd);
  for (int r = 0; r < kRows; ++r) {
    double m = 0.0, v = 0.0, xm = 0.0;
    for (int d = 0; d < kDim; ++d) {
      m += y[r * kDim + d];
      xm += x[r * kDim + d];
    }
    m /= kDim;
    for (int d = 0; d < kDim; ++d) v += (y[r * kDim + d] - m) * (y[r * kDim + d] - m);
    near_abs(m, 0.0, 1e-13); /* a sum of 16 O(1) terms: ~16 ulp of error */
    near(v / kDim, 1.0, 1e-14); /* biased variance is 1 */
    near_abs(mean[r], xm / kDim, 1e-15);
  }
  /* The affine part is exactly y * gamma + beta. */
  double gamma[kDim], beta[kDim], ya[kRows * kDim];
  ty_test_fill(gamma, kDim);
  ty_test_fill(beta, kDim);
  ty_ref_layernorm_forward(x, gamma, beta, kRows, kDim, 1e-300, ya, NULL, NULL);
  for (int i = 0; i < kRows * kDim; ++i) {
    near_abs(ya[i], y[i] * gamma[i % kDim] + beta[i % kDim], 1e-14);
  }
  /* Hand: x = [1, 3], eps = 0: mean 2, var 1, y = [-1, 1]. */
  double h[2] = {1.0, 3.0}, hy[2], hm, hr;
  ty_ref_layernorm_forward(h, NULL, NULL, 1, 2, 0.0, hy, &hm, &hr);
  assert_true(hy[0] == -1.0 && hy[1] == 1.0 && hm == 2.0 && hr == 1.0);
  /* rmsnorm: x = [3, 4] -> rms = sqrt(12.5), y = x / rms. mean(y^2) = 1. */
  double rx[2] = {3.0, 4.0}, ry[2], rr;
  ty_ref_rmsnorm_forward(rx, NULL, 1, 2, 0.0, ry, &rr);
  near(rr, 1.0 / sqrt(12.5), 1e-15);
  near(ry[0], 3.0 / sqrt(12.5), 1e-15);
  near(ry[0] * ry[0] + ry[1] * ry[1], 2.0, 1e-15);
  double g2[2] = {2.0, -1.0};
  ty_ref_rmsnorm_forward(rx, g2, 1, 2, 0.5, ry, &rr);
  near(ry[1], -4.0 / sqrt(13.0), 1e-15);
}

/* ---- activations -------------------------------------------------------- */

static void test_activation_values(void **state) {
  (void)state;
  /* References from the formulas evaluated independently (Python math). */
  double x[4] = {1.0, -2.0, 0.0, 30.0}, y[4];
  ty_ref_gelu_forward(x, 4, y);
  near(y[0], 0.8411919906082768, 1e-15);
  near(y[1], -0.04540230591222494, 1e-14);
  assert_true(y[2] == 0.0);
  near(y[3], 30.0, 1e-15);
  ty_ref_silu_forward(x, 4, y);
  near(y[0], 0.7310585786300049, 1e-15);
  near(y[1], -2.0 / (1.0 + exp(2.0)), 1e-15);
  assert_true(y[2] == 0.0);
  double big[2] = {-800.0, 800.0}, by[2], bd[2], ones[2] = {1.0, 1.0};
  ty_ref_silu_forward(big, 2, by); /* exp overflow must give 0 and x */
  assert_true(by[0] == 0.0 && by[1] == 800.0);
  ty_ref_silu_backward(big, ones, 2, bd);
  assert_true(bd[0] == 0.0 && bd[1] == 1.0);
  double gate[2] = {1.0, -2.0}, up[2] = {3.0, 0.5}, out[2];
  ty_ref_swiglu_forward(gate, up, 2, out);
  near(out[0], 3.0 * 0.7310585786300049, 1e-15);
  near(out[1], 0.5 * -2.0 / (1.0 + exp(2.0)), 1e-15);
}

/* ---- matmul, broadcasting, reductions ---------------------------------- */

static void test_matmul_values(void **state) {
  (void)state;
  double a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, bias[2] = {1, -1}, c[4];
  ty_ref_matmul_shape_t s = {1, 1, 2, 2, 2, false, false};
  ok(ty_ref_matmul_forward(&s, a, b, bias, c));
  assert_true(c[0] == 20 && c[1] == 21 && c[2] == 44 && c[3] == 49);
  /* A^T B with A stored transposed: [[1,3],[2,4]] @ B. */
  s.trans_a = true;
  ok(ty_ref_matmul_forward(&s, a, b, NULL, c));
  assert_true(c[0] == 26 && c[1] == 30 && c[2] == 38 && c[3] == 44);
  /* Random shapes against an independent triple loop over explicit
   * transposed copies, with a broadcast batch. */
  enum { B = 3, M = 4, N = 5, K = 6 };
  double at[B * M * K], bt[K * N], an[B * M * K], bn[K * N], cc[B * M * N];
  ty_test_fill(an, B * M * K);
  ty_test_fill(bn, K * N);
  for (int bi = 0; bi < B; ++bi) {
    for (int i = 0; i < M; ++i) {
      for (int p = 0; p < K; ++p) at[bi * M * K + p * M + i] = an[bi * M * K + i * K + p];
    }
  }
  for (int p = 0; p < K; ++p) {
    for (int j = 0; j < N; ++j) bt[j * K + p] = bn[p * N + j];
  }
  ty_ref_matmul_shape_t t = {B, 1, M, N, K, true, true};
  ok(ty_ref_matmul_forward(&t, at, bt, NULL, cc));
  for (int bi = 0; bi < B; ++bi) {
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        double acc = 0.0;
        for (int p = 0; p < K; ++p) acc += an[bi * M * K + i * K + p] * bn[p * N + j];
        near_abs(cc[(bi * M + i) * N + j], acc, 1e-13);
      }
    }
  }
}

static void test_broadcast_and_reduce_values(void **state) {
  (void)state;
  /* [2,1,3] + [4,1] -> [2,4,3]: out[i,j,k] = a[i,0,k] + b[j,0]. */
  const int64_t sa[] = {2, 1, 3}, sb[] = {4, 1};
  double a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {10, 20, 30, 40}, out[24];
  ok(ty_ref_binary_forward(TY_REF_BINARY_ADD, 3, sa, a, 2, sb, b, out));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 3; ++k) {
        assert_true(out[(i * 4 + j) * 3 + k] == a[i * 3 + k] + b[j]);
      }
    }
  }
  ok(ty_ref_binary_forward(TY_REF_BINARY_SUB, 3, sa, a, 2, sb, b, out));
  assert_true(out[23] == 6 - 40);
  ok(ty_ref_binary_forward(TY_REF_BINARY_MUL, 3, sa, a, 2, sb, b, out));
  assert_true(out[17] == 6 * 20); /* [1, 1, 2] */
  /* Rank 0 with anything: a scalar. */
  double sc = 2.0, v3[3] = {1, 2, 3}, o3[3];
  const int64_t s3[] = {3};
  ok(ty_ref_binary_forward(TY_REF_BINARY_MUL, 0, NULL, &sc, 1, s3, v3, o3));
  assert_true(o3[0] == 2 && o3[1] == 4 && o3[2] == 6);

  const int64_t s23[] = {2, 3};
  double m[6] = {1, 2, 3, 4, 5, 6}, r[6];
  const int ax0[] = {0}, ax1[] = {1}, both[] = {1, -2};
  ok(ty_ref_reduce_sum_forward(2, s23, m, 1, ax0, r));
  assert_true(r[0] == 5 && r[1] == 7 && r[2] == 9);
  ok(ty_ref_reduce_sum_forward(2, s23, m, 1, ax1, r));
  assert_true(r[0] == 6 && r[1] == 15);
  ok(ty_ref_reduce_sum_forward(2, s23, m, 2, both, r));
  assert_true(r[0] == 21);
  /* Un-broadcasting is what reduce_sum is for: the gradient of b in the add
   * above is dout summed over axes 0 and 2 (keepdims [1,4,1] = [4,1]). */
  double ones[24], db[4];
  for (int i = 0; i < 24; ++i) ones[i] = 1.0;
  const int unb[] = {0, 2};
  const int64_t s243[] = {2, 4, 3};
  ok(ty_ref_reduce_sum_forward(3, s243, ones, 2, unb, db));
  for (int j = 0; j < 4; ++j) assert_true(db[j] == 6.0);

  double rows[6] = {1, 2, 3, 4, 5, 6}, o[2];
  ty_ref_sum_forward(rows, 2, 3, o);
  assert_true(o[0] == 6 && o[1] == 15);
  ty_ref_mean_forward(rows, 1, 6, o);
  assert_true(o[0] == 3.5);
  ty_ref_sum_of_squares_forward(rows, 2, 3, o);
  assert_true(o[0] == 14 && o[1] == 77);
}

/* ---- rope --------------------------------------------------------------- */

static void test_rope_values(void **state) {
  (void)state;
  /* D = 4, theta = 10000: inv_freq = [1, 1/100]. */
  double inv[2];
  ok(ty_ref_rope_inv_freq(4, 10000.0, NULL, inv));
  assert_true(inv[0] == 1.0);
  near(inv[1], 0.01, 1e-15);
  double x[4] = {1, 2, 3, 4}, y[4];
  int64_t pos3 = 3;
  ok(ty_ref_rope_forward(x, 1, 1, 1, 4, &pos3, inv, y));
  near(y[0], 1 * cos(3.0) - 3 * sin(3.0), 1e-15);
  near(y[2], 3 * cos(3.0) + 1 * sin(3.0), 1e-15);
  near(y[1], 2 * cos(0.03) - 4 * sin(0.03), 1e-15);
  near(y[3], 4 * cos(0.03) + 2 * sin(0.03), 1e-15);
  /* Position 0 is the identity; backward undoes forward; pairs keep norm. */
  enum { B = 2, T = 5, H = 3, D = 8, N = B * T * H * D };
  double xs[N], ys[N], back[N], invs[D / 2];
  int64_t zeros[T] = {0}, pos[T];
  ty_test_fill(xs, N);
  for (int t = 0; t < T; ++t) pos[t] = ty_test_rng_below(4096);
  ok(ty_ref_rope_inv_freq(D, 500000.0, NULL, invs));
  ok(ty_ref_rope_forward(xs, B, T, H, D, zeros, invs, ys));
  for (int i = 0; i < N; ++i) assert_true(ys[i] == xs[i]);
  ok(ty_ref_rope_forward(xs, B, T, H, D, pos, invs, ys));
  ok(ty_ref_rope_backward(ys, B, T, H, D, pos, invs, back));
  for (int i = 0; i < N; ++i) near_abs(back[i], xs[i], 1e-14);
  for (int i = 0; i < N; i += D) {
    for (int j = 0; j < D / 2; ++j) {
      near(hypot(ys[i + j], ys[i + j + D / 2]),
           hypot(xs[i + j], xs[i + j + D / 2]), 1e-14);
    }
  }
}

static void test_rope_llama3_inv_freq(void **state) {
  (void)state;
  /* Llama 3.1: D = 128, theta = 500000, factor 8, low 1, high 4, old 8192.
   * Wavelength bands: high_wavelen = 8192 / 4 = 2048, low_wavelen = 8192.
   * j = 0:  inv = 1, wavelen 2 pi < 2048: unchanged.
   * j = 30: inv = 500000^(-60/128) = exp(-0.46875 ln 500000)
   *             = exp(-6.1511...) = 0.00213111953691...
   *         wavelen = 2 pi / inv = 2948.30... in [2048, 8192]: blended with
   *         smooth = (8192 / 2948.30 - 1) / (4 - 1) = 0.592849...
   *         inv' = inv ((1 - smooth) / 8 + smooth) = 0.00137189356776...
   * j = 50: inv = 500000^(-100/128) = 3.5292277...e-05, wavelen 178033 >
   *         8192: inv / 8 = 4.41153467...e-06. */
  double inv[64];
  ty_ref_rope_scaling_t sc = {TY_REF_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192.0};
  ok(ty_ref_rope_inv_freq(128, 500000.0, &sc, inv));
  assert_true(inv[0] == 1.0);
  near(inv[30], 0.0013718935677611381, 1e-13);
  near(inv[50], 4.411534674558404e-06, 1e-13);
  /* Every frequency only ever shrinks, monotonically in j. */
  double plain[64];
  ok(ty_ref_rope_inv_freq(128, 500000.0, NULL, plain));
  for (int j = 0; j < 64; ++j) {
    assert_true(inv[j] <= plain[j]);
    if (j) assert_true(inv[j] < inv[j - 1]);
  }
  /* The default kind through a scaling struct equals NULL. */
  ty_ref_rope_scaling_t def = {TY_REF_ROPE_DEFAULT, 0, 0, 0, 0};
  double d2[64];
  ok(ty_ref_rope_inv_freq(128, 500000.0, &def, d2));
  assert_memory_equal(d2, plain, sizeof(plain));
}

/* ---- attention ---------------------------------------------------------- */

/* Independent multi-head attention over explicit [H][T][S] score matrices
 * with an additive mask, for Hq == Hkv. */
static void plain_mha(int64_t T, int64_t S, int64_t H, int64_t D, double scale,
                      const double *q, const double *k, const double *v,
                      double *out) {
  double scores[8][8];
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < T; ++t) {
      double mx = -INFINITY, z = 0.0;
      for (int64_t s = 0; s < S; ++s) {
        double acc = 0.0;
        for (int64_t d = 0; d < D; ++d) acc += q[(t * H + h) * D + d] * k[(s * H + h) * D + d];
        scores[t][s] = s <= t + (S - T) ? acc * scale : -INFINITY;
        mx = fmax(mx, scores[t][s]);
      }
      for (int64_t s = 0; s < S; ++s) z += exp(scores[t][s] - mx);
      for (int64_t d = 0; d < D; ++d) {
        double acc = 0.0;
        for (int64_t s = 0; s < S; ++s) acc += exp(scores[t][s] - mx) / z * v[(s * H + h) * D + d];
        out[(t * H + h) * D + d] = acc;
      }
    }
  }
}

static void test_attention_values(void **state) {
  (void)state;
  /* T = 1 with identical keys: uniform weights, so out is the plain mean of
   * the values and lse = score + log S. */
  enum { S = 5, D = 3 };
  double q[D], k[S * D], v[S * D], out[D], lse;
  ty_test_fill(q, D);
  ty_test_fill(v, S * D);
  double key[D];
  ty_test_fill(key, D);
  for (int s = 0; s < S; ++s) memcpy(k + s * D, key, sizeof(key));
  ty_ref_attention_shape_t sh = {1, 1, S, 1, 1, D, 0.5, 0, 0, 0};
  ok(ty_ref_attention_forward(&sh, q, k, v, out, &lse));
  double score = 0.5 * (q[0] * key[0] + q[1] * key[1] + q[2] * key[2]);
  near(lse, score + log((double)S), 1e-14);
  for (int d = 0; d < D; ++d) {
    double mean = 0.0;
    for (int s = 0; s < S; ++s) mean += v[s * D + d] / S;
    near_abs(out[d], mean, 1e-14);
  }
  /* window = 1: each query sees only its own position. */
  enum { T2 = 3, S2 = 4 };
  double q2[T2 * D], k2[S2 * D], v2[S2 * D], o2[T2 * D];
  ty_test_fill(q2, T2 * D);
  ty_test_fill(k2, S2 * D);
  ty_test_fill(v2, S2 * D);
  ty_ref_attention_shape_t w1 = {1, T2, S2, 1, 1, D, 0.5, 1, 0, 0};
  ok(ty_ref_attention_forward(&w1, q2, k2, v2, o2, NULL));
  for (int t = 0; t < T2; ++t) {
    for (int d = 0; d < D; ++d) near(o2[t * D + d], v2[(t + 1) * D + d], 1e-15);
  }
  /* Hq == Hkv against the independent MHA, with a KV-cache offset. */
  enum { T3 = 3, S3 = 6, H = 2, D3 = 4 };
  double q3[T3 * H * D3], k3[S3 * H * D3], v3[S3 * H * D3];
  double o3[T3 * H * D3], want[T3 * H * D3];
  ty_test_fill(q3, T3 * H * D3);
  ty_test_fill(k3, S3 * H * D3);
  ty_test_fill(v3, S3 * H * D3);
  ty_ref_attention_shape_t mha = {1, T3, S3, H, H, D3, 0.5, 0, 0, 0};
  ok(ty_ref_attention_forward(&mha, q3, k3, v3, o3, NULL));
  plain_mha(T3, S3, H, D3, 0.5, q3, k3, v3, want);
  for (int i = 0; i < T3 * H * D3; ++i) near_abs(o3[i], want[i], 1e-13);
  /* T = 1 with distinct keys: the softmax-weighted mean of all S values. */
  double o1[H * D3], w1want[H * D3];
  ty_ref_attention_shape_t one = {1, 1, S3, H, H, D3, 0.5, 0, 0, 0};
  ok(ty_ref_attention_forward(&one, q3, k3, v3, o1, NULL));
  plain_mha(1, S3, H, D3, 0.5, q3, k3, v3, w1want);
  for (int i = 0; i < H * D3; ++i) near_abs(o1[i], w1want[i], 1e-13);
  /* GQA (4 query heads on 2 kv heads) equals MHA on kv heads repeated
   * (Hugging Face's repeat_kv: query head h reads kv head h / 2). */
  enum { HQ = 4, HKV = 2 };
  double qg[T3 * HQ * D3], kg[S3 * HKV * D3], vg[S3 * HKV * D3];
  double kr[S3 * HQ * D3], vr[S3 * HQ * D3], og[T3 * HQ * D3], om[T3 * HQ * D3];
  ty_test_fill(qg, T3 * HQ * D3);
  ty_test_fill(kg, S3 * HKV * D3);
  ty_test_fill(vg, S3 * HKV * D3);
  for (int s = 0; s < S3; ++s) {
    for (int h = 0; h < HQ; ++h) {
      memcpy(kr + (s * HQ + h) * D3, kg + (s * HKV + h / 2) * D3, D3 * sizeof(double));
      memcpy(vr + (s * HQ + h) * D3, vg + (s * HKV + h / 2) * D3, D3 * sizeof(double));
    }
  }
  ty_ref_attention_shape_t gqa = {1, T3, S3, HQ, HKV, D3, 0.5, 0, 0, 0};
  ty_ref_attention_shape_t rep = {1, T3, S3, HQ, HQ, D3, 0.5, 0, 0, 0};
  ok(ty_ref_attention_forward(&gqa, qg, kg, vg, og, NULL));
  ok(ty_ref_attention_forward(&rep, qg, kr, vr, om, NULL));
  for (int i = 0; i < T3 * HQ * D3; ++i) near_abs(og[i], om[i], 1e-15);
}

/* ---- dropout ------------------------------------------------------------ */

/* A cache filled up to L of S rows: attention with valid_len L equals
 * attention over the first L keys alone (later rows hold garbage). */
static void test_attention_valid_len(void **state) {
  (void)state;
  enum { T = 2, S = 7, L = 5, H = 2, D = 3 };
  double q[T * H * D], k[S * H * D], v[S * H * D], out1[T * H * D], out2[T * H * D];
  double lse1[H * T], lse2[H * T];
  ty_test_fill(q, T * H * D);
  ty_test_fill(k, S * H * D);
  ty_test_fill(v, S * H * D);
  for (int i = L * H * D; i < S * H * D; ++i) k[i] = v[i] = 1e6; /* unwritten rows */
  ty_ref_attention_shape_t cache = {1, T, S, H, H, D, 0.5, 0, L, 0};
  ty_ref_attention_shape_t cut = {1, T, L, H, H, D, 0.5, 0, 0, 0};
  ok(ty_ref_attention_forward(&cache, q, k, v, out1, lse1));
  ok(ty_ref_attention_forward(&cut, q, k, v, out2, lse2)); /* k, v rows 0..L-1 */
  for (int i = 0; i < T * H * D; ++i) assert_true(out1[i] == out2[i]);
  for (int i = 0; i < H * T; ++i) assert_true(lse1[i] == lse2[i]);
}

static void test_dropout_values(void **state) {
  (void)state;
  enum { N = 32 };
  double x[N], y[N], dy[N], dx[N];
  ty_test_fill(x, N);
  ok(ty_ref_dropout_forward(x, N, 0.0, 5, 6, y));
  assert_memory_equal(x, y, sizeof(x)); /* p = 0 is the identity, exactly */
  /* The golden mask of test_philox (seed 2024, offset 1, p = 0.5). */
  ok(ty_ref_dropout_forward(x, N, 0.5, 2024, 1, y));
  for (int i = 0; i < N; ++i) {
    int kept = (0x0fd0c542u >> i) & 1u;
    assert_true(y[i] == (kept ? x[i] / 0.5 : 0.0));
  }
  ty_test_fill(dy, N);
  ok(ty_ref_dropout_backward(dy, N, 0.5, 2024, 1, dx));
  for (int i = 0; i < N; ++i) assert_true((dx[i] == 0.0) == (y[i] == 0.0));
  /* A different offset gives a different mask. */
  double y2[N];
  ok(ty_ref_dropout_forward(x, N, 0.5, 2024, 2, y2));
  assert_true(memcmp(y, y2, sizeof(y)) != 0);
  assert_int_equal(ty_status_consume_code(ty_ref_dropout_forward(x, N, 1.0, 1, 1, y)),
                   TY_CODE_INVALID_ARGUMENT);
  assert_int_equal(ty_status_consume_code(ty_ref_dropout_forward(x, N, -0.1, 1, 1, y)),
                   TY_CODE_INVALID_ARGUMENT);
  assert_int_equal(ty_status_consume_code(ty_ref_dropout_backward(x, N, NAN, 1, 1, y)),
                   TY_CODE_INVALID_ARGUMENT);
}

int main(void) {
  ty_test_rng_init("test_ref_values");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_softmax_values),
      cmocka_unit_test(test_cross_entropy_values),
      cmocka_unit_test(test_norm_values),
      cmocka_unit_test(test_activation_values),
      cmocka_unit_test(test_matmul_values),
      cmocka_unit_test(test_broadcast_and_reduce_values),
      cmocka_unit_test(test_rope_values),
      cmocka_unit_test(test_rope_llama3_inv_freq),
      cmocka_unit_test(test_attention_values),
      cmocka_unit_test(test_attention_valid_len),
      cmocka_unit_test(test_dropout_values),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
