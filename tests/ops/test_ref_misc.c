/* Spot values and bad-data handling for the non-math reference kernels:
 * optimizers, clipping, casts, views, KV-cache writes and embedding, plus
 * the INVALID_ARGUMENT paths of every kernel that can refuse its input.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hal/half.h"
#include "ops/reference/reference.h"
#include "test_util.h"

static void ok(ty_status_t status) {
  if (status) fail_msg("unexpected error: %s", ty_status_message(status));
}

static void near(double got, double want, double rel) {
  if (!(ty_test_rel_diff(got, want) <= rel)) {
    fail_msg("got %.17g, want %.17g", got, want);
  }
}

/* Asserts `status` has `code` and a message containing each fragment. */
static void expect_error(ty_status_t status, ty_code_t code,
                         const char *fragment1, const char *fragment2) {
  if (!status) fail_msg("expected %s, got OK", ty_code_name(code));
  const char *msg = ty_status_message(status);
  print_message("  expected error: %s\n", msg);
  assert_int_equal(ty_status_code(status), code);
  if (fragment1 && !strstr(msg, fragment1)) fail_msg("'%s' lacks '%s'", msg, fragment1);
  if (fragment2 && !strstr(msg, fragment2)) fail_msg("'%s' lacks '%s'", msg, fragment2);
  ty_status_free(status);
}

/* ---- optimizers and clipping ------------------------------------------- */

static void test_adamw(void **state) {
  (void)state;
  /* First step without decay: m_hat = g, v_hat = g^2, so each parameter
   * moves by lr g / (|g| + eps), i.e. lr sign(g) up to eps. */
  enum { N = 64 };
  double p[N], p0[N], g[N], m[N] = {0}, v[N] = {0};
  ty_test_fill(p, N);
  ty_test_fill(g, N);
  memcpy(p0, p, sizeof(p));
  ty_ref_adamw_params_t hp = {1e-3, 0.9, 0.999, 1e-8, 0.0, 1};
  ok(ty_ref_adamw_step(&hp, p, g, m, v, N));
  for (int i = 0; i < N; ++i) {
    double moved = p0[i] - p[i];
    near(moved, 1e-3 * (g[i] > 0 ? 1.0 : -1.0), 1e-7); /* eps / |g| <= 1e-7 */
  }
  /* Two steps with decay, worked by hand: p = 1, g = 0.5 then -0.25,
   * lr 0.1, betas (0.9, 0.999), eps 1e-8, wd 0.01.
   * t=1: p = 0.999; m = 0.05; v = 0.00025; m_hat = 0.5; v_hat = 0.25;
   *      p -= 0.1 * 0.5 / (0.5 + 1e-8)  ->  0.899000002
   * t=2: p = 0.899000002 * 0.999; m = 0.02; v = 0.00031225;
   *      p -= 0.1 * (0.02 / 0.19) / (sqrt(0.00031225 / 0.001999) + 1e-8)
   *      ->  0.8714672987058463 */
  double sp = 1.0, sm = 0.0, sv = 0.0, g1 = 0.5, g2 = -0.25;
  ty_ref_adamw_params_t h2 = {0.1, 0.9, 0.999, 1e-8, 0.01, 1};
  ok(ty_ref_adamw_step(&h2, &sp, &g1, &sm, &sv, 1));
  near(sp, 0.899000002, 1e-15);
  h2.step = 2;
  ok(ty_ref_adamw_step(&h2, &sp, &g2, &sm, &sv, 1));
  near(sp, 0.8714672987058463, 1e-14);
  near(sm, 0.02, 1e-15);
  near(sv, 0.00031225, 1e-14);
  h2.step = 0;
  expect_error(ty_ref_adamw_step(&h2, &sp, &g2, &sm, &sv, 1),
               TY_CODE_INVALID_ARGUMENT, "step 0", NULL);
}

static void test_sgd(void **state) {
  (void)state;
  /* p = 1, g = 0.5 then -0.25, lr 0.1, wd 0.1, momentum 0.9 (by hand):
   * t=1: d = 0.6, buf = 0.6, p = 0.94   (nesterov: d = 1.14, p = 0.886)
   * t=2: d = -0.156, buf = 0.384, p = 0.9016
   *      (nesterov: d = -0.1614, buf = 0.3786, d = 0.17934, p = 0.868066) */
  const double gs[2] = {0.5, -0.25};
  const double want[2][2] = {{0.94, 0.9016}, {0.886, 0.868066}};
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    double p = 1.0, buf = 0.0;
    ty_ref_sgd_params_t hp = {0.1, 0.9, 0.1, nesterov != 0};
    for (int t = 0; t < 2; ++t) {
      ok(ty_ref_sgd_step(&hp, &p, &gs[t], &buf, 1));
      near(p, want[nesterov][t], 1e-14);
    }
  }
  /* No momentum: p -= lr (g + wd p); the buffer may be NULL. */
  double p = 2.0, g = 0.5;
  ty_ref_sgd_params_t plain = {0.1, 0.0, 0.5, false};
  ok(ty_ref_sgd_step(&plain, &p, &g, NULL, 1));
  near(p, 2.0 - 0.1 * (0.5 + 1.0), 1e-15);
  ty_ref_sgd_params_t bad = {0.1, 0.9, 0.0, false};
  expect_error(ty_ref_sgd_step(&bad, &p, &g, NULL, 1), TY_CODE_INVALID_ARGUMENT,
               "buffer", NULL);
  ty_ref_sgd_params_t bad_nesterov = {0.1, 0.0, 0.0, true};
  expect_error(ty_ref_sgd_step(&bad_nesterov, &p, &g, NULL, 1),
               TY_CODE_INVALID_ARGUMENT, "nesterov", NULL);
}

static void test_clip_grad_norm(void **state) {
  (void)state;
  double a[2] = {3.0, 4.0}, b[1] = {12.0};
  double *grads[2] = {a, b};
  const int64_t sizes[2] = {2, 1};
  /* Norm 13: below max_norm nothing changes. */
  near(ty_ref_clip_grad_norm(2, grads, sizes, 100.0), 13.0, 1e-15);
  assert_true(a[0] == 3.0 && b[0] == 12.0);
  /* max_norm <= 0 only measures. */
  near(ty_ref_clip_grad_norm(2, grads, sizes, 0.0), 13.0, 1e-15);
  assert_true(a[1] == 4.0);
  /* Above: everything scales by max_norm / (norm + 1e-6). */
  near(ty_ref_clip_grad_norm(2, grads, sizes, 1.0), 13.0, 1e-15);
  const double coef = 1.0 / (13.0 + 1e-6);
  near(a[0], 3.0 * coef, 1e-15);
  near(b[0], 12.0 * coef, 1e-15);
  near(ty_ref_clip_grad_norm(2, grads, sizes, 0.0), 13.0 * coef, 1e-14);
}

/* ---- casts -------------------------------------------------------------- */

static void test_casts(void **state) {
  (void)state;
  const double d[5] = {1.0, -2.5, 1.0 + 0x1p-8 + 0x1p-30, 1e6, NAN};
  uint16_t bf[5], hf[5];
  float f[5];
  double back[5];
  ok(ty_ref_cast_forward(d, TY_DTYPE_F64, bf, TY_DTYPE_BF16, 5));
  assert_int_equal(bf[0], 0x3f80);
  assert_int_equal(bf[1], 0xc020);
  assert_int_equal(bf[2], 0x3f80); /* through f32: the tie goes to even */
  assert_int_equal(bf[3], ty_f32_to_bf16(1e6f));
  assert_true((bf[4] & 0x7f80) == 0x7f80 && (bf[4] & 0x7f));
  ok(ty_ref_cast_forward(d, TY_DTYPE_F64, hf, TY_DTYPE_F16, 5));
  assert_int_equal(hf[0], 0x3c00);
  assert_int_equal(hf[3], 0x7c00); /* overflow */
  ok(ty_ref_cast_forward(d, TY_DTYPE_F64, f, TY_DTYPE_F32, 5));
  assert_true(f[1] == -2.5f);
  /* bf16 -> f16 is one rounding: bf16 0x3f81 = 1 + 2^-7 is exact in f16. */
  uint16_t one_bf = 0x3f81, one_hf;
  ok(ty_ref_cast_forward(&one_bf, TY_DTYPE_BF16, &one_hf, TY_DTYPE_F16, 1));
  assert_int_equal(one_hf, 0x3c08);
  ok(ty_ref_cast_forward(hf, TY_DTYPE_F16, back, TY_DTYPE_F64, 5));
  assert_true(back[0] == 1.0 && back[1] == -2.5 && isinf(back[3]) && isnan(back[4]));
  /* Same dtype is a copy, including in place. */
  ok(ty_ref_cast_forward(d, TY_DTYPE_F64, back, TY_DTYPE_F64, 4));
  assert_memory_equal(back, d, 4 * sizeof(double));
  ok(ty_ref_cast_forward(back, TY_DTYPE_F64, back, TY_DTYPE_F64, 4));
  /* Integers: widening is exact, narrowing refuses values that do not fit. */
  const int32_t i32[3] = {-7, INT32_MAX, INT32_MIN};
  int64_t i64[3];
  ok(ty_ref_cast_forward(i32, TY_DTYPE_I32, i64, TY_DTYPE_I64, 3));
  assert_true(i64[0] == -7 && i64[1] == INT32_MAX && i64[2] == INT32_MIN);
  int32_t round_trip[3] = {0, 0, 0};
  ok(ty_ref_cast_forward(i64, TY_DTYPE_I64, round_trip, TY_DTYPE_I32, 3));
  assert_memory_equal(round_trip, i32, sizeof(i32));
  const int64_t too_big[3] = {1, 2, (int64_t)INT32_MAX + 1};
  int32_t untouched[3] = {9, 9, 9};
  expect_error(ty_ref_cast_forward(too_big, TY_DTYPE_I64, untouched,
                                   TY_DTYPE_I32, 3),
               TY_CODE_INVALID_ARGUMENT, "element 2", "2147483648");
  assert_true(untouched[0] == 9 && untouched[1] == 9); /* nothing written */
  expect_error(ty_ref_cast_forward(d, TY_DTYPE_F64, i64, TY_DTYPE_I64, 1),
               TY_CODE_UNIMPLEMENTED, "f64", "i64");
  expect_error(ty_ref_cast_forward(d, TY_DTYPE_INVALID, i64, TY_DTYPE_I64, 1),
               TY_CODE_INVALID_ARGUMENT, "invalid dtype", NULL);
}

/* ---- views -------------------------------------------------------------- */

static void test_views(void **state) {
  (void)state;
  /* 2x3 transpose by hand. */
  const double m[6] = {1, 2, 3, 4, 5, 6};
  const int64_t s23[] = {2, 3};
  const int swap[] = {1, 0};
  double t[6];
  ok(ty_ref_permute_forward(m, 8, 2, s23, swap, t));
  const double want[6] = {1, 4, 2, 5, 3, 6};
  assert_memory_equal(t, want, sizeof(want));
  /* Rank-4 permute on 2-byte elements; backward restores the input. */
  const int64_t s4[] = {2, 3, 1, 4};
  const int perm[] = {3, 0, 2, 1};
  uint16_t src[24], dst[24], restored[24];
  for (int i = 0; i < 24; ++i) src[i] = (uint16_t)(1000 + i);
  ok(ty_ref_permute_forward(src, 2, 4, s4, perm, dst));
  /* dst shape [4, 2, 1, 3]: dst[a, b, 0, c] = src[b, c, 0, a]. */
  assert_int_equal(dst[((3 * 2 + 1) * 1 + 0) * 3 + 2], src[((1 * 3 + 2) * 1 + 0) * 4 + 3]);
  ok(ty_ref_permute_backward(dst, 2, 4, s4, perm, restored));
  assert_memory_equal(restored, src, sizeof(src));
  /* Slice rows 1..2, cols 1..2 of a 3x4 matrix. */
  const double big[12] = {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23};
  const int64_t s34[] = {3, 4}, start[] = {1, 1}, len[] = {2, 2};
  double sl[4];
  ok(ty_ref_slice_forward(big, 8, 2, s34, start, len, sl));
  assert_true(sl[0] == 11 && sl[1] == 12 && sl[2] == 21 && sl[3] == 22);
  /* Concat of the column slices [0,1) [1,3) [3,4) gives the matrix back. */
  double parts[3][12];
  const int64_t starts[3] = {0, 1, 3}, lens[3] = {1, 2, 1};
  for (int k = 0; k < 3; ++k) {
    const int64_t st[] = {0, starts[k]}, ln[] = {3, lens[k]};
    ok(ty_ref_slice_forward(big, 8, 2, s34, st, ln, parts[k]));
  }
  const void *srcs[3] = {parts[0], parts[1], parts[2]};
  double joined[12];
  ok(ty_ref_concat_forward(3, srcs, 8, 2, s34, lens, 1, joined));
  assert_memory_equal(joined, big, sizeof(big));
  /* Bad arguments. */
  const int not_perm[] = {0, 0};
  expect_error(ty_ref_permute_forward(m, 8, 2, s23, not_perm, t),
               TY_CODE_INVALID_ARGUMENT, "perm[1] = 0", NULL);
  const int64_t bad_start[] = {2, 0}, bad_len[] = {2, 1};
  expect_error(ty_ref_slice_forward(big, 8, 2, s34, bad_start, bad_len, sl),
               TY_CODE_INVALID_ARGUMENT, "axis 0", "start 2");
  expect_error(ty_ref_concat_forward(3, srcs, 8, 2, s34, lens, 2, joined),
               TY_CODE_INVALID_ARGUMENT, "axis 2", NULL);
  expect_error(ty_ref_permute_forward(m, 0, 2, s23, swap, t),
               TY_CODE_INVALID_ARGUMENT, "element size", NULL);
}

/* ---- KV cache and embedding -------------------------------------------- */

static void test_kv_cache(void **state) {
  (void)state;
  enum { B = 2, SMAX = 6, H = 2, D = 3, T = 2, P = 3 };
  double cache[B * SMAX * H * D], fresh[B * T * H * D];
  for (int i = 0; i < B * SMAX * H * D; ++i) cache[i] = -1.0;
  ty_test_fill(fresh, B * T * H * D);
  ok(ty_ref_kv_cache_write(cache, B, SMAX, H, D, fresh, T, P));
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < SMAX; ++s) {
      for (int i = 0; i < H * D; ++i) {
        double got = cache[(b * SMAX + s) * H * D + i];
        if (s >= P && s < P + T) {
          assert_true(got == fresh[(b * T + (s - P)) * H * D + i]);
        } else {
          assert_true(got == -1.0);
        }
      }
    }
  }
  double before[B * SMAX * H * D];
  memcpy(before, cache, sizeof(cache));
  ok(ty_ref_kv_cache_write(cache, B, SMAX, H, D, fresh, T, SMAX - T)); /* last fit */
  memcpy(cache, before, sizeof(cache));
  expect_error(ty_ref_kv_cache_write(cache, B, SMAX, H, D, fresh, T, 5),
               TY_CODE_INVALID_ARGUMENT, "position 5", "max_len 6");
  expect_error(ty_ref_kv_cache_write(cache, B, SMAX, H, D, fresh, T, -1),
               TY_CODE_INVALID_ARGUMENT, "position -1", NULL);
  expect_error(ty_ref_kv_cache_write(cache, B, SMAX, H, D, fresh, T, INT64_MAX),
               TY_CODE_INVALID_ARGUMENT, "max_len 6", NULL);
  assert_memory_equal(cache, before, sizeof(cache)); /* untouched on error */
}

static void test_embedding(void **state) {
  (void)state;
  enum { V = 5, D = 2 };
  const double table[V * D] = {0, 1, 10, 11, 20, 21, 30, 31, 40, 41};
  const int64_t ids[4] = {3, 0, 3, 4};
  double out[4 * D];
  ok(ty_ref_embedding_forward(table, V, D, ids, 4, out));
  const double want[8] = {30, 31, 0, 1, 30, 31, 40, 41};
  assert_memory_equal(out, want, sizeof(want));
  /* Backward accumulates and sums duplicates. */
  double dtable[V * D];
  for (int i = 0; i < V * D; ++i) dtable[i] = 100.0;
  const double dout[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ok(ty_ref_embedding_backward(dout, ids, 4, V, D, dtable));
  assert_true(dtable[3 * D] == 100 + 1 + 5 && dtable[3 * D + 1] == 100 + 2 + 6);
  assert_true(dtable[0] == 103 && dtable[4 * D + 1] == 108 && dtable[1 * D] == 100);
  /* Bad ids: the message names the position and value; nothing is written. */
  const int64_t bad[3] = {1, 2, 9};
  double untouched[3 * D];
  for (int i = 0; i < 3 * D; ++i) untouched[i] = 7.0;
  expect_error(ty_ref_embedding_forward(table, V, D, bad, 3, untouched),
               TY_CODE_INVALID_ARGUMENT, "ids[2] = 9", "[0, 5)");
  for (int i = 0; i < 3 * D; ++i) assert_true(untouched[i] == 7.0);
  const int64_t negative[1] = {-1};
  expect_error(ty_ref_embedding_backward(dout, negative, 1, V, D, dtable),
               TY_CODE_INVALID_ARGUMENT, "ids[0] = -1", NULL);
}

/* ---- shape and argument errors of the math kernels --------------------- */

static void test_argument_errors(void **state) {
  (void)state;
  double buf[64] = {0};
  ty_ref_matmul_shape_t mm = {2, 3, 2, 2, 2, false, false};
  expect_error(ty_ref_matmul_forward(&mm, buf, buf, NULL, buf),
               TY_CODE_INVALID_ARGUMENT, "batch counts 2 (A) and 3 (B)", NULL);
  const int64_t sa[] = {2, 3}, sb[] = {4};
  expect_error(ty_ref_binary_forward(TY_REF_BINARY_ADD, 2, sa, buf, 1, sb, buf, buf),
               TY_CODE_INVALID_ARGUMENT, "add: ", "3 vs 4");
  const int dup[] = {1, -1}, out_of_range[] = {2};
  expect_error(ty_ref_reduce_sum_forward(2, sa, buf, 2, dup, buf),
               TY_CODE_INVALID_ARGUMENT, "twice", NULL);
  expect_error(ty_ref_reduce_sum_forward(2, sa, buf, 1, out_of_range, buf),
               TY_CODE_INVALID_ARGUMENT, "axis 2", NULL);
  ty_ref_attention_shape_t at = {1, 2, 2, 3, 2, 4, 0.5, 0, 0, 0};
  expect_error(ty_ref_attention_forward(&at, buf, buf, buf, buf, NULL),
               TY_CODE_INVALID_ARGUMENT, "not a multiple", NULL);
  ty_ref_attention_shape_t shorter = {1, 3, 2, 2, 2, 4, 0.5, 0, 0, 0};
  expect_error(ty_ref_attention_forward(&shorter, buf, buf, buf, buf, NULL),
               TY_CODE_INVALID_ARGUMENT, "kv_len 2", NULL);
  ty_ref_attention_shape_t unfilled = {1, 2, 4, 2, 2, 2, 0.5, 0, 1, 0};
  expect_error(ty_ref_attention_forward(&unfilled, buf, buf, buf, buf, NULL),
               TY_CODE_INVALID_ARGUMENT, "kv_len input 1 must lie in [2, 4]", NULL);
  int64_t pos[2] = {0, 1};
  expect_error(ty_ref_rope_forward(buf, 1, 2, 1, 5, pos, buf, buf),
               TY_CODE_INVALID_ARGUMENT, "head_dim 5", NULL);
  ty_ref_rope_scaling_t flat = {TY_REF_ROPE_LLAMA3, 8.0, 2.0, 2.0, 8192.0};
  expect_error(ty_ref_rope_inv_freq(8, 10000.0, &flat, buf),
               TY_CODE_INVALID_ARGUMENT, "llama3", NULL);
  const int64_t targets[2] = {1, 7};
  expect_error(ty_ref_cross_entropy_forward(buf, targets, 2, 7, buf),
               TY_CODE_INVALID_ARGUMENT, "targets[1] = 7", NULL);
}

int main(void) {
  ty_test_rng_init("test_ref_misc");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adamw),
      cmocka_unit_test(test_sgd),
      cmocka_unit_test(test_clip_grad_norm),
      cmocka_unit_test(test_casts),
      cmocka_unit_test(test_views),
      cmocka_unit_test(test_kv_cache),
      cmocka_unit_test(test_embedding),
      cmocka_unit_test(test_argument_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
