/* Acceptance 2 of issue 31: attention over all keys equals the pairwise
 * attention_merge of attentions over disjoint blocks of them, out and lse,
 * forward and gradients (through attention_merge_backward and the dlse
 * input of attention_backward), at 1e-6, in f64 against the reference.
 *
 * The keys are cut at random points into 2..4 blocks; the partial over a
 * block is the attention of every query over the block's keys under the
 * whole mask (causal with a KV offset, sliding window, GQA), computed by a
 * naive helper that is first checked against the reference on the whole key
 * range. A query that sees no key of a block gets lse = -inf there (causal
 * masks make many), which the merge must weigh 0. Seeded; the seed is
 * printed (TY_TEST_SEED replays it). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/reference/reference.h"
#include "test_util.h"

#define TOL 1e-6
#define MAX_PARTS 4

static void ok(ty_status_t status) {
  if (status) fail_msg("unexpected error: %s", ty_status_message(status));
}

static double *zeros(int64_t n) {
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  assert_non_null(p);
  return p;
}

static double *randoms(int64_t n) {
  double *p = zeros(n);
  ty_test_fill(p, n);
  return p;
}

/* The reference's mask (ref_attention.h), restated for a block of keys. */
static bool visible(const ty_ref_attention_shape_t *s, int64_t t, int64_t key) {
  const int64_t pos = t + s->kv_len - s->q_len;
  return key <= pos && (s->window == 0 || pos - key < s->window);
}

static int64_t qo(const ty_ref_attention_shape_t *s, int64_t b, int64_t t, int64_t h) {
  return ((b * s->q_len + t) * s->q_heads + h) * s->head_dim;
}
static int64_t ko(const ty_ref_attention_shape_t *s, int64_t b, int64_t key, int64_t h) {
  return ((b * s->kv_len + key) * s->kv_heads + h) * s->head_dim;
}
static int64_t lo_(const ty_ref_attention_shape_t *s, int64_t b, int64_t h, int64_t t) {
  return (b * s->q_heads + h) * s->q_len + t;
}
static double dotp(const double *a, const double *b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

/* Attention of every query over keys [k0, k1) only: out and lse (-inf and
 * out 0 where a query sees none of them). */
static void block_forward(const ty_ref_attention_shape_t *s, int64_t k0, int64_t k1,
                          const double *q, const double *k, const double *v, double *out,
                          double *lse) {
  const int64_t G = s->q_heads / s->kv_heads, D = s->head_dim;
  for (int64_t b = 0; b < s->batch; ++b) {
    for (int64_t h = 0; h < s->q_heads; ++h) {
      for (int64_t t = 0; t < s->q_len; ++t) {
        const double *qr = q + qo(s, b, t, h);
        double m = -INFINITY;
        for (int64_t j = k0; j < k1; ++j) {
          if (visible(s, t, j)) m = fmax(m, s->scale * dotp(qr, k + ko(s, b, j, h / G), D));
        }
        double *o = out + qo(s, b, t, h);
        for (int64_t d = 0; d < D; ++d) o[d] = 0.0;
        if (m == -INFINITY) {
          lse[lo_(s, b, h, t)] = -INFINITY;
          continue;
        }
        double z = 0.0;
        for (int64_t j = k0; j < k1; ++j) {
          if (visible(s, t, j)) z += exp(s->scale * dotp(qr, k + ko(s, b, j, h / G), D) - m);
        }
        const double l = m + log(z);
        lse[lo_(s, b, h, t)] = l;
        for (int64_t j = k0; j < k1; ++j) {
          if (!visible(s, t, j)) continue;
          const double p = exp(s->scale * dotp(qr, k + ko(s, b, j, h / G), D) - l);
          for (int64_t d = 0; d < D; ++d) o[d] += p * v[ko(s, b, j, h / G) + d];
        }
      }
    }
  }
}

/* Its backward with dlse, accumulated into dq, dk, dv. */
static void block_backward(const ty_ref_attention_shape_t *s, int64_t k0, int64_t k1,
                           const double *q, const double *k, const double *v, const double *lse,
                           const double *dout, const double *dlse, double *dq, double *dk,
                           double *dv) {
  const int64_t G = s->q_heads / s->kv_heads, D = s->head_dim;
  for (int64_t b = 0; b < s->batch; ++b) {
    for (int64_t h = 0; h < s->q_heads; ++h) {
      for (int64_t t = 0; t < s->q_len; ++t) {
        const double l = lse[lo_(s, b, h, t)];
        if (l == -INFINITY) continue;
        const double *qr = q + qo(s, b, t, h), *g = dout + qo(s, b, t, h);
        double delta = -dlse[lo_(s, b, h, t)];
        for (int64_t j = k0; j < k1; ++j) {
          if (!visible(s, t, j)) continue;
          const int64_t o = ko(s, b, j, h / G);
          delta += exp(s->scale * dotp(qr, k + o, D) - l) * dotp(g, v + o, D);
        }
        for (int64_t j = k0; j < k1; ++j) {
          if (!visible(s, t, j)) continue;
          const int64_t o = ko(s, b, j, h / G);
          const double p = exp(s->scale * dotp(qr, k + o, D) - l);
          const double ds = p * (dotp(g, v + o, D) - delta);
          for (int64_t d = 0; d < D; ++d) {
            dq[qo(s, b, t, h) + d] += s->scale * ds * k[o + d];
            dk[o + d] += s->scale * ds * qr[d];
            dv[o + d] += p * g[d];
          }
        }
      }
    }
  }
}

static void expect_close(const char *what, const double *got, const double *want, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const bool both_inf = isinf(got[i]) && isinf(want[i]) && (got[i] < 0) == (want[i] < 0);
    if (both_inf) continue;
    if (!(fabs(got[i] - want[i]) <= TOL * (1.0 + fabs(want[i])))) {
      fail_msg("%s[%lld]: %.17g, want %.17g", what, (long long)i, got[i], want[i]);
    }
  }
}

typedef struct {
  double *out, *lse;
} partial_t;

/* One configuration, its keys cut into `parts` random blocks, merged left
 * to right (tree = false) or as (0+1)+(2+3) (tree = true, parts = 4). */
static void check_split(const ty_ref_attention_shape_t *s, int parts, bool tree) {
  const int64_t nq = s->batch * s->q_len * s->q_heads * s->head_dim;
  const int64_t nkv = s->batch * s->kv_len * s->kv_heads * s->head_dim;
  const int64_t nl = s->batch * s->q_heads * s->q_len;
  const int64_t B = s->batch, H = s->q_heads, T = s->q_len, D = s->head_dim;
  double *q = randoms(nq), *k = randoms(nkv), *v = randoms(nkv);
  double *dout = randoms(nq), *dlse = randoms(nl);
  /* Cut points: distinct, sorted, inside (0, S). */
  int64_t cut[MAX_PARTS + 1] = {0};
  cut[parts] = s->kv_len;
  for (int i = 1; i < parts; ++i) {
    int64_t c;
    bool fresh;
    do {
      c = 1 + ty_test_rng_below(s->kv_len - 1);
      fresh = true;
      for (int j = 1; j < i; ++j) fresh = fresh && cut[j] != c;
    } while (!fresh);
    int j = i;
    while (j > 1 && cut[j - 1] > c) {
      cut[j] = cut[j - 1];
      --j;
    }
    cut[j] = c;
  }
  /* The whole attention, from the reference. */
  double *ref_out = zeros(nq), *ref_lse = zeros(nl);
  double *ref_dq = zeros(nq), *ref_dk = zeros(nkv), *ref_dv = zeros(nkv);
  ok(ty_ref_attention_forward(s, q, k, v, ref_out, ref_lse));
  ok(ty_ref_attention_backward_dlse(s, q, k, v, ref_lse, dout, dlse, ref_dq, ref_dk, ref_dv));
  /* Partials, then merges: m[i] is merge node i's result, in order. */
  partial_t p[MAX_PARTS], m[MAX_PARTS];
  for (int i = 0; i < parts; ++i) {
    p[i].out = zeros(nq);
    p[i].lse = zeros(nl);
    block_forward(s, cut[i], cut[i + 1], q, k, v, p[i].out, p[i].lse);
  }
  /* Merge node i takes operands (a[i], b[i]) from p (index) or m (~index). */
  int a[MAX_PARTS], b_[MAX_PARTS], merges = parts - 1;
  if (tree) {
    a[0] = 0, b_[0] = 1, a[1] = 2, b_[1] = 3, a[2] = ~0, b_[2] = ~1;
  } else {
    for (int i = 0; i < merges; ++i) a[i] = i == 0 ? 0 : ~(i - 1), b_[i] = i + 1;
  }
#define OPND(x) ((x) >= 0 ? &p[(x)] : &m[~(x)])
  for (int i = 0; i < merges; ++i) {
    m[i].out = zeros(nq);
    m[i].lse = zeros(nl);
    const partial_t *x = OPND(a[i]), *y = OPND(b_[i]);
    ty_ref_attention_merge(B, H, T, D, x->out, x->lse, y->out, y->lse, m[i].out, m[i].lse);
  }
  const partial_t *top = &m[merges - 1];
  char what[96];
  snprintf(what, sizeof(what), "%d parts%s out", parts, tree ? " (tree)" : "");
  expect_close(what, top->out, ref_out, nq);
  snprintf(what, sizeof(what), "%d parts%s lse", parts, tree ? " (tree)" : "");
  expect_close(what, top->lse, ref_lse, nl);
  /* Backward: gradients flow down the merges in reverse, then into each
   * block's attention through its dout and dlse. */
  partial_t gp[MAX_PARTS], gm[MAX_PARTS];
  for (int i = 0; i < parts; ++i) gp[i].out = zeros(nq), gp[i].lse = zeros(nl);
  for (int i = 0; i < merges; ++i) gm[i].out = zeros(nq), gm[i].lse = zeros(nl);
  memcpy(gm[merges - 1].out, dout, (size_t)nq * sizeof(double));
  memcpy(gm[merges - 1].lse, dlse, (size_t)nl * sizeof(double));
  double *ga_o = zeros(nq), *ga_l = zeros(nl), *gb_o = zeros(nq), *gb_l = zeros(nl);
  for (int i = merges - 1; i >= 0; --i) {
    const partial_t *x = OPND(a[i]), *y = OPND(b_[i]);
    ty_ref_attention_merge_backward(B, H, T, D, x->out, x->lse, y->out, y->lse, m[i].out,
                                    m[i].lse, gm[i].out, gm[i].lse, ga_o, ga_l, gb_o, gb_l);
    partial_t *gx = a[i] >= 0 ? &gp[a[i]] : &gm[~a[i]], *gy = b_[i] >= 0 ? &gp[b_[i]] : &gm[~b_[i]];
    for (int64_t e = 0; e < nq; ++e) gx->out[e] += ga_o[e], gy->out[e] += gb_o[e];
    for (int64_t e = 0; e < nl; ++e) gx->lse[e] += ga_l[e], gy->lse[e] += gb_l[e];
  }
#undef OPND
  double *dq = zeros(nq), *dk = zeros(nkv), *dv = zeros(nkv);
  for (int i = 0; i < parts; ++i) {
    block_backward(s, cut[i], cut[i + 1], q, k, v, p[i].lse, gp[i].out, gp[i].lse, dq, dk, dv);
  }
  snprintf(what, sizeof(what), "%d parts%s dq", parts, tree ? " (tree)" : "");
  expect_close(what, dq, ref_dq, nq);
  snprintf(what, sizeof(what), "%d parts%s dk", parts, tree ? " (tree)" : "");
  expect_close(what, dk, ref_dk, nkv);
  snprintf(what, sizeof(what), "%d parts%s dv", parts, tree ? " (tree)" : "");
  expect_close(what, dv, ref_dv, nkv);
  double *all[] = {q, k, v, dout, dlse, ref_out, ref_lse, ref_dq, ref_dk, ref_dv,
                   ga_o, ga_l, gb_o, gb_l, dq, dk, dv};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) free(all[i]);
  for (int i = 0; i < parts; ++i) free(p[i].out), free(p[i].lse), free(gp[i].out), free(gp[i].lse);
  for (int i = 0; i < merges; ++i) free(m[i].out), free(m[i].lse), free(gm[i].out), free(gm[i].lse);
}

/* (B, T, S, Hq, Hkv, D, scale, window, valid_len, non_causal) */
static const ty_ref_attention_shape_t shapes[] = {
    {2, 12, 12, 4, 2, 8, 0.35, 0, 0, 0},  /* causal, GQA groups of 2 */
    {1, 7, 19, 6, 2, 4, 0.5, 0, 0, 0},    /* KV offset (S > T), GQA groups of 3 */
    {1, 16, 16, 2, 1, 8, 0.35, 5, 0, 0},  /* sliding window, MQA */
    {2, 9, 14, 4, 4, 6, 0.4, 4, 0, 0},    /* window with a KV offset, MHA */
};

/* The helper is the reference's attention on the whole key range, so that
 * the split checks below test the merge, not a second definition. */
static void test_block_helper_is_the_reference(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); ++c) {
    const ty_ref_attention_shape_t *s = &shapes[c];
    const int64_t nq = s->batch * s->q_len * s->q_heads * s->head_dim;
    const int64_t nkv = s->batch * s->kv_len * s->kv_heads * s->head_dim;
    const int64_t nl = s->batch * s->q_heads * s->q_len;
    double *q = randoms(nq), *k = randoms(nkv), *v = randoms(nkv), *g = randoms(nq);
    double *dl = randoms(nl), *o1 = zeros(nq), *l1 = zeros(nl), *o2 = zeros(nq), *l2 = zeros(nl);
    double *dq1 = zeros(nq), *dk1 = zeros(nkv), *dv1 = zeros(nkv);
    double *dq2 = zeros(nq), *dk2 = zeros(nkv), *dv2 = zeros(nkv);
    ok(ty_ref_attention_forward(s, q, k, v, o1, l1));
    ok(ty_ref_attention_backward_dlse(s, q, k, v, l1, g, dl, dq1, dk1, dv1));
    block_forward(s, 0, s->kv_len, q, k, v, o2, l2);
    block_backward(s, 0, s->kv_len, q, k, v, l2, g, dl, dq2, dk2, dv2);
    expect_close("helper out", o2, o1, nq);
    expect_close("helper lse", l2, l1, nl);
    expect_close("helper dq", dq2, dq1, nq);
    expect_close("helper dk", dk2, dk1, nkv);
    expect_close("helper dv", dv2, dv1, nkv);
    double *all[] = {q, k, v, g, dl, o1, l1, o2, l2, dq1, dk1, dv1, dq2, dk2, dv2};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) free(all[i]);
  }
}

static void test_merge_equals_whole_attention(void **state) {
  (void)state;
  for (size_t c = 0; c < sizeof(shapes) / sizeof(shapes[0]); ++c) {
    for (int parts = 2; parts <= MAX_PARTS; ++parts) {
      for (int draw = 0; draw < 3; ++draw) check_split(&shapes[c], parts, false);
    }
    check_split(&shapes[c], 4, true);
  }
}

/* Both parts empty (-inf): a defined result, lse -inf and out 0, whatever
 * the parts' out hold; merged on with a non-empty part, that part exactly.
 * Gradients into an empty row are 0. */
static void test_empty_rows(void **state) {
  (void)state;
  const int64_t D = 3;
  double oa[3] = {NAN, 1.0, INFINITY}, ob[3] = {2.0, NAN, -1.0};
  double la[1] = {-INFINITY}, lb[1] = {-INFINITY}, out[3], lse[1];
  ty_ref_attention_merge(1, 1, 1, D, oa, la, ob, lb, out, lse);
  assert_true(isinf(lse[0]) && lse[0] < 0);
  for (int d = 0; d < D; ++d) assert_true(out[d] == 0.0);
  double oc[3] = {0.25, -0.5, 0.75}, lc[1] = {0.3}, out2[3], lse2[1];
  ty_ref_attention_merge(1, 1, 1, D, out, lse, oc, lc, out2, lse2);
  assert_true(lse2[0] == lc[0]);
  for (int d = 0; d < D; ++d) assert_true(out2[d] == oc[d]);
  double g[3] = {1.0, 2.0, 3.0}, gl[1] = {0.5}, d1[3], dl1[1], d2[3], dl2[1];
  ty_ref_attention_merge_backward(1, 1, 1, D, oa, la, ob, lb, out, lse, g, gl, d1, dl1, d2, dl2);
  for (int d = 0; d < D; ++d) assert_true(d1[d] == 0.0 && d2[d] == 0.0);
  assert_true(dl1[0] == 0.0 && dl2[0] == 0.0);
  /* One empty part: all weight on the other, its gradient exactly dout. */
  ty_ref_attention_merge_backward(1, 1, 1, D, out, lse, oc, lc, out2, lse2, g, gl, d1, dl1, d2,
                                  dl2);
  for (int d = 0; d < D; ++d) assert_true(d1[d] == 0.0 && d2[d] == g[d]);
  assert_true(dl1[0] == 0.0 && dl2[0] == gl[0]);
}

int main(void) {
  ty_test_rng_init("test_ref_attention_merge");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_block_helper_is_the_reference),
      cmocka_unit_test(test_merge_equals_whole_attention),
      cmocka_unit_test(test_empty_rows),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
