/* Finite-difference gradient checks for every differentiable reference
 * kernel: for random inputs x and a random upstream gradient u, each
 * backward kernel's dL/dx of L = <u, forward(x)> must match central
 * differences to TY_GC_TOLERANCE (relative, in f64).
 */
#include <math.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/reference/reference.h"
#include "test_util.h"

/* ---- per-test allocations, freed by the teardown ----------------------- */

static void *g_allocs[256];
static int g_alloc_count;

static double *arr(int64_t n) {
  assert_true(g_alloc_count < 256);
  double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  assert_non_null(p);
  g_allocs[g_alloc_count++] = p;
  return p;
}

static double *rand_arr(int64_t n) {
  double *p = arr(n);
  ty_test_fill(p, n);
  return p;
}

static int free_all(void **state) {
  (void)state;
  while (g_alloc_count > 0) free(g_allocs[--g_alloc_count]);
  return 0;
}

static void ok(ty_status_t status) {
  if (status) {
    fail_msg("unexpected error: %s", ty_status_message(status));
  }
}

#define CHECK(label, fn, ctx, out_n, upstream, ...)                          \
  do {                                                                       \
    const ty_gc_param_t params_[] = {__VA_ARGS__};                           \
    double err_ = ty_gc_check(label, fn, ctx, out_n, upstream, params_,      \
                              (int)(sizeof(params_) / sizeof(params_[0])));  \
    assert_true(err_ <= TY_GC_TOLERANCE);                                    \
  } while (0)

/* ---- embedding ---------------------------------------------------------- */

typedef struct {
  double *table;
  int64_t vocab, dim, count;
  int64_t *ids;
} emb_ctx_t;

static void emb_fwd(void *c, double *out) {
  emb_ctx_t *e = c;
  ok(ty_ref_embedding_forward(e->table, e->vocab, e->dim, e->ids, e->count, out));
}

static void test_grad_embedding(void **state) {
  (void)state;
  int64_t ids[6];
  emb_ctx_t e = {rand_arr(7 * 3), 7, 3, 6, ids};
  for (int i = 0; i < 6; ++i) ids[i] = ty_test_rng_below(7);
  ids[3] = ids[0]; /* a repeated id must sum its gradients */
  double *u = rand_arr(6 * 3), *dtable = arr(7 * 3);
  ok(ty_ref_embedding_backward(u, ids, 6, 7, 3, dtable));
  CHECK("embedding", emb_fwd, &e, 18, u, {"table", e.table, 21, dtable});
}

/* ---- matmul ------------------------------------------------------------- */

typedef struct {
  ty_ref_matmul_shape_t s;
  double *a, *b, *bias;
} mm_ctx_t;

static void mm_fwd(void *c, double *out) {
  mm_ctx_t *m = c;
  ok(ty_ref_matmul_forward(&m->s, m->a, m->b, m->bias, out));
}

static void test_grad_matmul(void **state) {
  (void)state;
  static const int64_t batches[][2] = {{1, 1}, {3, 3}, {1, 3}, {3, 1}};
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (int bi = 0; bi < 4; ++bi) {
        mm_ctx_t m = {{batches[bi][0], batches[bi][1], 3, 4, 5, ta, tb},
                      NULL, NULL, NULL};
        int64_t na = m.s.batch_a * 15, nb = m.s.batch_b * 20;
        int64_t nc = ty_ref_matmul_batch(&m.s) * 12;
        m.a = rand_arr(na);
        m.b = rand_arr(nb);
        m.bias = rand_arr(4);
        double *u = rand_arr(nc), *da = arr(na), *db = arr(nb), *dbias = arr(4);
        ok(ty_ref_matmul_backward(&m.s, m.a, m.b, u, da, db, dbias));
        char label[64];
        snprintf(label, sizeof(label), "matmul ta=%d tb=%d batch=%lldx%lld",
                 ta, tb, (long long)m.s.batch_a, (long long)m.s.batch_b);
        CHECK(label, mm_fwd, &m, nc, u, {"a", m.a, na, da}, {"b", m.b, nb, db},
              {"bias", m.bias, 4, dbias});
        free_all(NULL);
      }
    }
  }
}

/* ---- broadcasting binary ops and scale --------------------------------- */

typedef struct {
  ty_ref_binary_op_t op;
  int ra, rb;
  const int64_t *sa, *sb;
  double *a, *b;
} bin_ctx_t;

static void bin_fwd(void *c, double *out) {
  bin_ctx_t *x = c;
  ok(ty_ref_binary_forward(x->op, x->ra, x->sa, x->a, x->rb, x->sb, x->b, out));
}

static void test_grad_binary(void **state) {
  (void)state;
  static const int64_t s1a[] = {2, 1, 3}, s1b[] = {4, 1};
  static const int64_t s2a[] = {3}, s2b[] = {2, 4, 3};
  static const int64_t s3a[] = {2, 3}, s3b[] = {2, 3};
  static const int64_t s4a[] = {1}, s4b[] = {2, 2};
  static const struct {
    int ra, rb;
    const int64_t *sa, *sb;
  } cases[] = {{3, 2, s1a, s1b}, {1, 3, s2a, s2b}, {2, 2, s3a, s3b},
               {1, 2, s4a, s4b}, {2, 3, s1b, s1a}};
  static const char *names[] = {"add", "sub", "mul", "div"};
  for (int op = 0; op < 4; ++op) {
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
      bin_ctx_t x = {(ty_ref_binary_op_t)op, cases[k].ra, cases[k].rb,
                     cases[k].sa, cases[k].sb, NULL, NULL};
      int rank;
      int64_t shape[TY_REF_MAX_RANK], na, nb, nc;
      ok(ty_ref_shape_broadcast(x.ra, x.sa, x.rb, x.sb, &rank, shape));
      ok(ty_ref_shape_count(rank, shape, &nc));
      ok(ty_ref_shape_count(x.ra, x.sa, &na));
      ok(ty_ref_shape_count(x.rb, x.sb, &nb));
      x.a = rand_arr(na);
      x.b = rand_arr(nb);
      if (x.op == TY_REF_BINARY_DIV) {
        /* keep divisors away from 0, where the quotient is ill-conditioned */
        for (int64_t i = 0; i < nb; ++i) x.b[i] += x.b[i] >= 0 ? 1.5 : -1.5;
      }
      double *u = rand_arr(nc), *da = arr(na), *db = arr(nb);
      ok(ty_ref_binary_backward(x.op, x.ra, x.sa, x.a, x.rb, x.sb, x.b, u, da, db));
      char label[64];
      snprintf(label, sizeof(label), "%s case %zu", names[op], k);
      CHECK(label, bin_fwd, &x, nc, u, {"a", x.a, na, da}, {"b", x.b, nb, db});
      free_all(NULL);
    }
  }
}

typedef struct {
  double *x;
  int64_t n;
  double alpha;
} scale_ctx_t;

static void scale_fwd(void *c, double *out) {
  scale_ctx_t *s = c;
  ty_ref_scale_forward(s->x, s->n, s->alpha, out);
}

static void test_grad_scale(void **state) {
  (void)state;
  scale_ctx_t s = {rand_arr(9), 9, -1.7};
  double *u = rand_arr(9), *dx = arr(9);
  ty_ref_scale_backward(u, 9, s.alpha, dx);
  CHECK("scale", scale_fwd, &s, 9, u, {"x", s.x, 9, dx});
}

/* ---- reductions --------------------------------------------------------- */

typedef struct {
  const int64_t *shape;
  int axis_count;
  const int *axes;
  double *x;
} rs_ctx_t;

static void rs_fwd(void *c, double *out) {
  rs_ctx_t *r = c;
  ok(ty_ref_reduce_sum_forward(3, r->shape, r->x, r->axis_count, r->axes, out));
}

static void test_grad_reduce_sum(void **state) {
  (void)state;
  static const int64_t shape[] = {2, 3, 4};
  static const int a0[] = {0}, a12[] = {1, 2}, am1[] = {-1}, a20[] = {2, 0},
                   a012[] = {0, 1, 2};
  static const struct {
    int count;
    const int *axes;
    int64_t out_n;
  } cases[] = {{1, a0, 12}, {2, a12, 2}, {1, am1, 6}, {2, a20, 3}, {0, a0, 24},
               {3, a012, 1}};
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
    rs_ctx_t r = {shape, cases[k].count, cases[k].axes, rand_arr(24)};
    double *u = rand_arr(cases[k].out_n), *dx = arr(24);
    ok(ty_ref_reduce_sum_backward(3, shape, r.axis_count, r.axes, u, dx));
    char label[64];
    snprintf(label, sizeof(label), "reduce_sum case %zu", k);
    CHECK(label, rs_fwd, &r, cases[k].out_n, u, {"x", r.x, 24, dx});
    free_all(NULL);
  }
}

typedef struct {
  int kind; /* 0 sum, 1 mean, 2 sum of squares */
  double *x;
  int64_t rows, cols;
} row_ctx_t;

static void row_fwd(void *c, double *out) {
  row_ctx_t *r = c;
  if (r->kind == 0) ty_ref_sum_forward(r->x, r->rows, r->cols, out);
  if (r->kind == 1) ty_ref_mean_forward(r->x, r->rows, r->cols, out);
  if (r->kind == 2) ty_ref_sum_of_squares_forward(r->x, r->rows, r->cols, out);
}

static void test_grad_row_reductions(void **state) {
  (void)state;
  static const char *names[] = {"sum", "mean", "sum_of_squares"};
  static const int64_t dims[][2] = {{3, 5}, {1, 7}};
  for (int kind = 0; kind < 3; ++kind) {
    for (int d = 0; d < 2; ++d) {
      row_ctx_t r = {kind, rand_arr(dims[d][0] * dims[d][1]), dims[d][0],
                     dims[d][1]};
      int64_t n = r.rows * r.cols;
      double *u = rand_arr(r.rows), *dx = arr(n);
      if (kind == 0) ty_ref_sum_backward(u, r.rows, r.cols, dx);
      if (kind == 1) ty_ref_mean_backward(u, r.rows, r.cols, dx);
      if (kind == 2) ty_ref_sum_of_squares_backward(r.x, u, r.rows, r.cols, dx);
      char label[64];
      snprintf(label, sizeof(label), "%s %lldx%lld", names[kind],
               (long long)r.rows, (long long)r.cols);
      CHECK(label, row_fwd, &r, r.rows, u, {"x", r.x, n, dx});
      free_all(NULL);
    }
  }
}

/* ---- normalisation ------------------------------------------------------ */

typedef struct {
  double *x, *gamma, *beta;
  int64_t rows, dim;
  double eps;
} norm_ctx_t;

static void ln_fwd(void *c, double *out) {
  norm_ctx_t *n = c;
  ty_ref_layernorm_forward(n->x, n->gamma, n->beta, n->rows, n->dim, n->eps,
                           out, NULL, NULL);
}

static void rms_fwd(void *c, double *out) {
  norm_ctx_t *n = c;
  ty_ref_rmsnorm_forward(n->x, n->gamma, n->rows, n->dim, n->eps, out, NULL);
}

static void test_grad_layernorm(void **state) {
  (void)state;
  const int64_t rows = 4, dim = 6, n = rows * dim;
  norm_ctx_t c = {rand_arr(n), rand_arr(dim), rand_arr(dim), rows, dim, 1e-5};
  double *u = rand_arr(n), *y = arr(n), *mean = arr(rows), *rstd = arr(rows);
  double *dx = arr(n), *dg = arr(dim), *db = arr(dim);
  ty_ref_layernorm_forward(c.x, c.gamma, c.beta, rows, dim, c.eps, y, mean, rstd);
  ty_ref_layernorm_backward(u, c.x, c.gamma, mean, rstd, rows, dim, dx, dg, db);
  CHECK("layernorm", ln_fwd, &c, n, u, {"x", c.x, n, dx},
        {"gamma", c.gamma, dim, dg}, {"beta", c.beta, dim, db});
  /* Without the affine part. */
  norm_ctx_t plain = {c.x, NULL, NULL, rows, dim, 1e-5};
  ty_ref_layernorm_forward(c.x, NULL, NULL, rows, dim, c.eps, y, mean, rstd);
  ty_ref_layernorm_backward(u, c.x, NULL, mean, rstd, rows, dim, dx, NULL, NULL);
  CHECK("layernorm (no affine)", ln_fwd, &plain, n, u, {"x", c.x, n, dx});
}

static void test_grad_rmsnorm(void **state) {
  (void)state;
  const int64_t rows = 4, dim = 6, n = rows * dim;
  norm_ctx_t c = {rand_arr(n), rand_arr(dim), NULL, rows, dim, 1e-6};
  double *u = rand_arr(n), *y = arr(n), *rstd = arr(rows);
  double *dx = arr(n), *dg = arr(dim);
  ty_ref_rmsnorm_forward(c.x, c.gamma, rows, dim, c.eps, y, rstd);
  ty_ref_rmsnorm_backward(u, c.x, c.gamma, rstd, rows, dim, dx, dg);
  CHECK("rmsnorm", rms_fwd, &c, n, u, {"x", c.x, n, dx},
        {"gamma", c.gamma, dim, dg});
}

/* ---- activations and softmax ------------------------------------------- */

typedef struct {
  int kind; /* 0 gelu, 1 silu, 2 swiglu, 3 softmax */
  double *x, *up;
  int64_t n, rows;
} act_ctx_t;

static void act_fwd(void *c, double *out) {
  act_ctx_t *a = c;
  if (a->kind == 0) ty_ref_gelu_forward(a->x, a->n, out);
  if (a->kind == 1) ty_ref_silu_forward(a->x, a->n, out);
  if (a->kind == 2) ty_ref_swiglu_forward(a->x, a->up, a->n, out);
  if (a->kind == 3) ty_ref_softmax_forward(a->x, a->rows, a->n / a->rows, out);
}

static void test_grad_activations(void **state) {
  (void)state;
  const int64_t n = 24;
  act_ctx_t a = {0, arr(n), rand_arr(n), n, 4};
  ty_test_fill_range(a.x, n, 0.05, 4.0); /* reach the tails too */
  double *u = rand_arr(n), *dx = arr(n), *dup = arr(n), *y = arr(n);
  ty_ref_gelu_backward(a.x, u, n, dx);
  CHECK("gelu", act_fwd, &a, n, u, {"x", a.x, n, dx});
  a.kind = 1;
  ty_ref_silu_backward(a.x, u, n, dx);
  CHECK("silu", act_fwd, &a, n, u, {"x", a.x, n, dx});
  a.kind = 2;
  ty_ref_swiglu_backward(a.x, a.up, u, n, dx, dup);
  CHECK("swiglu", act_fwd, &a, n, u, {"gate", a.x, n, dx}, {"up", a.up, n, dup});
  a.kind = 3;
  ty_ref_softmax_forward(a.x, 4, n / 4, y);
  ty_ref_softmax_backward(y, u, 4, n / 4, dx);
  CHECK("softmax", act_fwd, &a, n, u, {"x", a.x, n, dx});
}

/* ---- rope --------------------------------------------------------------- */

typedef struct {
  double *x;
  int64_t b, t, h, d;
  const int64_t *pos;
  const double *inv_freq;
} rope_ctx_t;

static void rope_fwd(void *c, double *out) {
  rope_ctx_t *r = c;
  ok(ty_ref_rope_forward(r->x, r->b, r->t, r->h, r->d, r->pos, r->inv_freq, out));
}

static void test_grad_rope(void **state) {
  (void)state;
  const int64_t b = 2, t = 3, h = 2, d = 8, n = b * t * h * d;
  int64_t pos[3];
  for (int i = 0; i < 3; ++i) pos[i] = ty_test_rng_below(200);
  double inv_default[4], inv_llama3[4];
  ok(ty_ref_rope_inv_freq(d, 10000.0, NULL, inv_default));
  /* Small made-up llama3 parameters so the 4 frequencies of D = 8 cover the
   * high (kept), medium (blended) and low (divided) bands. */
  ty_ref_rope_scaling_t sc = {TY_REF_ROPE_LLAMA3, 4.0, 1.0, 4.0, 64.0};
  ok(ty_ref_rope_inv_freq(d, 10000.0, &sc, inv_llama3));
  const double *freqs[] = {inv_default, inv_llama3};
  for (int k = 0; k < 2; ++k) {
    rope_ctx_t r = {rand_arr(n), b, t, h, d, pos, freqs[k]};
    double *u = rand_arr(n), *dx = arr(n);
    ok(ty_ref_rope_backward(u, b, t, h, d, pos, freqs[k], dx));
    CHECK(k ? "rope llama3" : "rope default", rope_fwd, &r, n, u,
          {"x", r.x, n, dx});
  }
}

/* ---- attention ---------------------------------------------------------- */

typedef struct {
  ty_ref_attention_shape_t s;
  double *q, *k, *v;
} attn_ctx_t;

static void attn_fwd(void *c, double *out) {
  attn_ctx_t *a = c;
  ok(ty_ref_attention_forward(&a->s, a->q, a->k, a->v, out, NULL));
}

/* Both outputs, out then lse, so that L = <u, (out, lse)> checks the
 * backward with its dlse input (the lse output's gradient). */
static void attn_fwd_lse(void *c, double *y) {
  attn_ctx_t *a = c;
  const ty_ref_attention_shape_t *s = &a->s;
  ok(ty_ref_attention_forward(s, a->q, a->k, a->v, y,
                              y + s->batch * s->q_len * s->q_heads * s->head_dim));
}

static const ty_ref_attention_shape_t attn_shapes[] = {
    {2, 3, 3, 4, 2, 4, 0.5, 0, 0, 0}, /* GQA, groups of 2 */
    {1, 2, 5, 2, 1, 4, 0.5, 2, 0, 0}, /* KV cache offset + sliding window */
    {1, 4, 4, 3, 3, 2, 0.7, 0, 0, 0}, /* plain MHA, odd scale */
    {2, 4, 6, 4, 1, 3, 0.577, 3, 0, 0},
    {1, 2, 6, 2, 1, 4, 0.5, 0, 4, 0}, /* a cache filled up to 4 of 6 rows */
    {1, 3, 5, 4, 2, 4, 0.5, 0, 0, 1}, /* causal=0: every key visible */
    {2, 5, 2, 2, 1, 3, 0.6, 0, 0, 1}, /* causal=0 with fewer keys than queries */
};

/* with_dlse: the gradient flows into lse too (attention_merge's case). */
static void check_grad_attention(bool with_dlse) {
  for (size_t k = 0; k < sizeof(attn_shapes) / sizeof(attn_shapes[0]); ++k) {
    attn_ctx_t a = {attn_shapes[k], NULL, NULL, NULL};
    const ty_ref_attention_shape_t *s = &a.s;
    int64_t nq = s->batch * s->q_len * s->q_heads * s->head_dim;
    int64_t nkv = s->batch * s->kv_len * s->kv_heads * s->head_dim;
    int64_t nl = s->batch * s->q_heads * s->q_len;
    a.q = rand_arr(nq);
    a.k = rand_arr(nkv);
    a.v = rand_arr(nkv);
    double *u = rand_arr(nq + nl), *out = arr(nq);
    double *lse = arr(nl);
    double *dq = arr(nq), *dk = arr(nkv), *dv = arr(nkv);
    ok(ty_ref_attention_forward(s, a.q, a.k, a.v, out, lse));
    ok(ty_ref_attention_backward_dlse(s, a.q, a.k, a.v, lse, u, with_dlse ? u + nq : NULL, dq,
                                      dk, dv));
    char label[64];
    snprintf(label, sizeof(label), "attention case %zu%s", k, with_dlse ? " with dlse" : "");
    CHECK(label, with_dlse ? attn_fwd_lse : attn_fwd, &a, with_dlse ? nq + nl : nq, u,
          {"q", a.q, nq, dq}, {"k", a.k, nkv, dk}, {"v", a.v, nkv, dv});
    free_all(NULL);
  }
}

static void test_grad_attention(void **state) {
  (void)state;
  check_grad_attention(false);
}

static void test_grad_attention_dlse(void **state) {
  (void)state;
  check_grad_attention(true);
}

/* ---- attention_merge ---------------------------------------------------- */

typedef struct {
  int64_t rows, heads, q_len, dim;
  double *oa, *la, *ob, *lb;
} merge_ctx_t;

static void merge_fwd(void *c, double *y) {
  merge_ctx_t *m = c;
  ty_ref_attention_merge(m->rows, m->heads, m->q_len, m->dim, m->oa, m->la, m->ob, m->lb, y,
                         y + m->rows * m->heads * m->q_len * m->dim);
}

static void test_grad_attention_merge(void **state) {
  (void)state;
  merge_ctx_t m = {2, 3, 4, 5, NULL, NULL, NULL, NULL};
  const int64_t no = m.rows * m.heads * m.q_len * m.dim, nl = m.rows * m.heads * m.q_len;
  m.oa = rand_arr(no);
  m.ob = rand_arr(no);
  m.la = rand_arr(nl);
  m.lb = rand_arr(nl);
  for (int64_t i = 0; i < nl; ++i) m.lb[i] *= 3.0; /* weights far from 1/2 too */
  double *y = arr(no + nl), *u = rand_arr(no + nl);
  double *doa = arr(no), *dla = arr(nl), *dob = arr(no), *dlb = arr(nl);
  merge_fwd(&m, y);
  ty_ref_attention_merge_backward(m.rows, m.heads, m.q_len, m.dim, m.oa, m.la, m.ob, m.lb, y,
                                  y + no, u, u + no, doa, dla, dob, dlb);
  CHECK("attention_merge", merge_fwd, &m, no + nl, u, {"out_a", m.oa, no, doa},
        {"lse_a", m.la, nl, dla}, {"out_b", m.ob, no, dob}, {"lse_b", m.lb, nl, dlb});
}

/* ---- cross-entropy and dropout ----------------------------------------- */

typedef struct {
  double *logits;
  const int64_t *targets;
  int64_t rows, vocab;
} ce_ctx_t;

static void ce_fwd(void *c, double *out) {
  ce_ctx_t *e = c;
  ok(ty_ref_cross_entropy_forward(e->logits, e->targets, e->rows, e->vocab, out));
}

static void test_grad_cross_entropy(void **state) {
  (void)state;
  int64_t targets[5];
  for (int i = 0; i < 5; ++i) targets[i] = ty_test_rng_below(6);
  targets[2] = -1; /* ignored row */
  ce_ctx_t e = {arr(30), targets, 5, 6};
  ty_test_fill_range(e.logits, 30, 0.1, 3.0);
  double *u = rand_arr(5), *dz = arr(30);
  ok(ty_ref_cross_entropy_backward(e.logits, targets, u, 5, 6, dz));
  for (int v = 0; v < 6; ++v) assert_true(dz[2 * 6 + v] == 0.0);
  CHECK("cross_entropy", ce_fwd, &e, 5, u, {"logits", e.logits, 30, dz});
}

typedef struct {
  double *x;
  int64_t n;
  double p;
} drop_ctx_t;

static void drop_fwd(void *c, double *out) {
  drop_ctx_t *d = c;
  ok(ty_ref_dropout_forward(d->x, d->n, d->p, 1234, 56, out));
}

static void test_grad_dropout(void **state) {
  (void)state;
  drop_ctx_t d = {rand_arr(40), 40, 0.3};
  double *u = rand_arr(40), *dx = arr(40);
  ok(ty_ref_dropout_backward(u, 40, 0.3, 1234, 56, dx));
  CHECK("dropout", drop_fwd, &d, 40, u, {"x", d.x, 40, dx});
}

/* ---- views -------------------------------------------------------------- */

typedef struct {
  int kind; /* 0 permute, 1 slice, 2 concat */
  double *x[3];
  const int64_t *shape, *start, *length, *lens;
  const int *perm;
  int rank, axis;
} view_ctx_t;

static void view_fwd(void *c, double *out) {
  view_ctx_t *v = c;
  if (v->kind == 0) {
    ok(ty_ref_permute_forward(v->x[0], 8, v->rank, v->shape, v->perm, out));
  } else if (v->kind == 1) {
    ok(ty_ref_slice_forward(v->x[0], 8, v->rank, v->shape, v->start, v->length,
                            out));
  } else {
    const void *srcs[3] = {v->x[0], v->x[1], v->x[2]};
    ok(ty_ref_concat_forward(3, srcs, 8, v->rank, v->shape, v->lens, v->axis,
                             out));
  }
}

static void test_grad_views(void **state) {
  (void)state;
  static const int64_t pshape[] = {2, 1, 3, 2};
  static const int perm[] = {3, 1, 0, 2};
  view_ctx_t p = {0, {rand_arr(12)}, pshape, NULL, NULL, NULL, perm, 4, 0};
  double *u = rand_arr(12), *dx = arr(12);
  ok(ty_ref_permute_backward(u, 8, 4, pshape, perm, dx));
  CHECK("permute", view_fwd, &p, 12, u, {"x", p.x[0], 12, dx});

  static const int64_t sshape[] = {3, 4, 5}, start[] = {1, 0, 2},
                       length[] = {2, 3, 2};
  view_ctx_t s = {1, {rand_arr(60)}, sshape, start, length, NULL, NULL, 3, 0};
  double *us = rand_arr(12), *dxs = arr(60);
  ok(ty_ref_slice_backward(us, 8, 3, sshape, start, length, dxs));
  CHECK("slice", view_fwd, &s, 12, us, {"x", s.x[0], 60, dxs});

  static const int64_t cshape[] = {2, 0, 3}, lens[] = {1, 3, 2};
  for (int axis = 1; axis >= -2; axis -= 3) { /* axis 1, then -2 (same) */
    view_ctx_t c = {2, {rand_arr(6), rand_arr(18), rand_arr(12)}, cshape, NULL,
                    NULL, lens, NULL, 3, axis};
    double *uc = rand_arr(36);
    double *dxc[3] = {arr(6), arr(18), arr(12)};
    void *const dxs3[3] = {dxc[0], dxc[1], dxc[2]};
    ok(ty_ref_concat_backward(uc, 8, 3, cshape, lens, axis, 3, dxs3));
    CHECK("concat", view_fwd, &c, 36, uc, {"x0", c.x[0], 6, dxc[0]},
          {"x1", c.x[1], 18, dxc[1]}, {"x2", c.x[2], 12, dxc[2]});
  }
  /* Concat on the last axis of [2, 2, *]. */
  static const int64_t lshape[] = {2, 2, 0};
  view_ctx_t l = {2, {rand_arr(4), rand_arr(12), rand_arr(8)}, lshape, NULL,
                  NULL, lens, NULL, 3, -1};
  double *ul = rand_arr(24);
  double *dl[3] = {arr(4), arr(12), arr(8)};
  void *const dls[3] = {dl[0], dl[1], dl[2]};
  ok(ty_ref_concat_backward(ul, 8, 3, lshape, lens, -1, 3, dls));
  CHECK("concat last axis", view_fwd, &l, 24, ul, {"x0", l.x[0], 4, dl[0]},
        {"x1", l.x[1], 12, dl[1]}, {"x2", l.x[2], 8, dl[2]});
}

int main(void) {
  ty_test_rng_init("test_ref_grad");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_grad_embedding, free_all),
      cmocka_unit_test_teardown(test_grad_matmul, free_all),
      cmocka_unit_test_teardown(test_grad_binary, free_all),
      cmocka_unit_test_teardown(test_grad_scale, free_all),
      cmocka_unit_test_teardown(test_grad_reduce_sum, free_all),
      cmocka_unit_test_teardown(test_grad_row_reductions, free_all),
      cmocka_unit_test_teardown(test_grad_layernorm, free_all),
      cmocka_unit_test_teardown(test_grad_rmsnorm, free_all),
      cmocka_unit_test_teardown(test_grad_activations, free_all),
      cmocka_unit_test_teardown(test_grad_rope, free_all),
      cmocka_unit_test_teardown(test_grad_attention, free_all),
      cmocka_unit_test_teardown(test_grad_attention_dlse, free_all),
      cmocka_unit_test_teardown(test_grad_attention_merge, free_all),
      cmocka_unit_test_teardown(test_grad_cross_entropy, free_all),
      cmocka_unit_test_teardown(test_grad_dropout, free_all),
      cmocka_unit_test_teardown(test_grad_views, free_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
