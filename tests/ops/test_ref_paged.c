/* The reference paged KV cache kernels against what they must equal:
 * paged_kv_write against slot arithmetic done by hand, paged_attention
 * against the dense reference attention run on each sequence's keys gathered
 * into a contiguous cache (GQA and MHA, windows, padding rows, block tables
 * whose blocks are shuffled), and every data error with its message.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/reference/reference.h"
#include "test_util.h"

static void ok(ty_status_t status) {
  if (status) fail_msg("unexpected error: %s", ty_status_message(status));
}

static void expect_error(ty_status_t status, const char *fragment1, const char *fragment2) {
  if (!status) fail_msg("expected INVALID_ARGUMENT, got OK");
  const char *msg = ty_status_message(status);
  print_message("  expected error: %s\n", msg);
  assert_int_equal(ty_status_code(status), TY_CODE_INVALID_ARGUMENT);
  if (fragment1 && !strstr(msg, fragment1)) fail_msg("'%s' lacks '%s'", msg, fragment1);
  if (fragment2 && !strstr(msg, fragment2)) fail_msg("'%s' lacks '%s'", msg, fragment2);
  ty_status_free(status);
}

static void test_paged_kv_write(void **state) {
  (void)state;
  enum { NB = 4, BS = 5, H = 2, D = 3, N = 4, ROW = H * D, POOL = NB * BS * ROW };
  double pool[POOL], fresh[N * ROW], before[POOL];
  for (int i = 0; i < POOL; ++i) pool[i] = -7.0;
  ty_test_fill(fresh, N * ROW);
  /* Row 1 is padding; the others land in three different blocks. */
  const int64_t slots[N] = {13, -1, 0, NB * BS - 1};
  ok(ty_ref_paged_kv_write(pool, NB, BS, H, D, fresh, N, slots));
  for (int64_t slot = 0; slot < NB * BS; ++slot) {
    int from = -1;
    for (int i = 0; i < N; ++i) from = slots[i] == slot ? i : from;
    for (int e = 0; e < ROW; ++e) {
      double want = from >= 0 ? fresh[from * ROW + e] : -7.0;
      if (pool[slot * ROW + e] != want) {
        fail_msg("slot %lld element %d: got %g, want %g", (long long)slot, e,
                 pool[slot * ROW + e], want);
      }
    }
  }
  memcpy(before, pool, sizeof(pool));
  const int64_t past[N] = {1, 2, NB * BS, 3};
  expect_error(ty_ref_paged_kv_write(pool, NB, BS, H, D, fresh, N, past),
               "row 2 writes slot 20 outside the pool's 20 slots", NULL);
  const int64_t below[N] = {-2, 2, 3, 4};
  expect_error(ty_ref_paged_kv_write(pool, NB, BS, H, D, fresh, N, below),
               "row 0 writes slot -2", NULL);
  const int64_t twice[N] = {6, -1, 9, 6};
  expect_error(ty_ref_paged_kv_write(pool, NB, BS, H, D, fresh, N, twice),
               "rows 0 and 3 both write slot 6", NULL);
  assert_memory_equal(pool, before, sizeof(pool)); /* untouched on error */
}

/* A random step over S sequences: shuffled blocks, one prefill chunk, decode
 * rows, padding rows, rows in a shuffled order. */
typedef struct {
  ty_ref_paged_shape_t shape;
  int64_t len[3];             /* each sequence's length */
  int64_t *table, *seq, *pos; /* [S, MB], [N], [N] */
  double *q, *k, *v, *out;
} paged_case_t;

static void case_free(paged_case_t *c) {
  free(c->table), free(c->seq), free(c->pos);
  free(c->q), free(c->k), free(c->v), free(c->out);
}

static void case_make(paged_case_t *c, int64_t bs, int64_t hq, int64_t hkv, int64_t window) {
  enum { S = 3, D = 8 };
  const int64_t len[S] = {2 * bs + 3, bs, 3 * bs + 1};
  int64_t mb = 0, used = 0;
  for (int s = 0; s < S; ++s) {
    int64_t blocks = (len[s] + bs - 1) / bs;
    mb = blocks > mb ? blocks : mb;
    used += blocks;
    c->len[s] = len[s];
  }
  mb += 1; /* an unused column, filled with -1: never read */
  const int64_t nb = used + 3; /* spare blocks nobody owns */
  /* Rows: sequence 0 prefills its last 4 positions, 1 and 2 decode their
   * last position, sequence 2 also re-reads an early position, plus two
   * padding rows. */
  const int64_t rows_seq[] = {0, 0, 0, 0, 1, 2, 2, -1, -1};
  const int64_t rows_pos[] = {len[0] - 4, len[0] - 3, len[0] - 2, len[0] - 1,
                              len[1] - 1, len[2] - 1, 1, 0, 5};
  const int64_t n = (int64_t)(sizeof(rows_seq) / sizeof(rows_seq[0]));
  c->shape = (ty_ref_paged_shape_t){.rows = n, .q_heads = hq, .kv_heads = hkv,
                                    .head_dim = D, .blocks = nb, .block_size = bs,
                                    .seqs = S, .max_blocks = mb,
                                    .scale = 1.0 / sqrt((double)D), .window = window};
  c->table = malloc((size_t)(S * mb) * sizeof(int64_t));
  c->seq = malloc((size_t)n * sizeof(int64_t));
  c->pos = malloc((size_t)n * sizeof(int64_t));
  c->q = malloc((size_t)(n * hq * D) * sizeof(double));
  c->out = malloc((size_t)(n * hq * D) * sizeof(double));
  c->k = malloc((size_t)(nb * bs * hkv * D) * sizeof(double));
  c->v = malloc((size_t)(nb * bs * hkv * D) * sizeof(double));
  int64_t *perm = malloc((size_t)nb * sizeof(int64_t));
  assert_true(c->table && c->seq && c->pos && c->q && c->out && c->k && c->v && perm);
  /* A random permutation of the pool's blocks, handed out in order. */
  for (int64_t i = 0; i < nb; ++i) perm[i] = i;
  for (int64_t i = nb - 1; i > 0; --i) {
    int64_t j = ty_test_rng_below(i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  int64_t next = 0;
  for (int s = 0; s < S; ++s) {
    for (int64_t b = 0; b < mb; ++b) {
      c->table[s * mb + b] = b * bs < len[s] ? perm[next++] : -1;
    }
  }
  free(perm);
  /* Rows in a shuffled order. */
  int64_t order[sizeof(rows_seq) / sizeof(rows_seq[0])];
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = ty_test_rng_below(i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (int64_t i = 0; i < n; ++i) {
    c->seq[i] = rows_seq[order[i]];
    c->pos[i] = rows_pos[order[i]];
  }
  ty_test_fill(c->q, n * hq * D);
  ty_test_fill(c->k, nb * bs * hkv * D);
  ty_test_fill(c->v, nb * bs * hkv * D);
}

/* Each sequence's keys gathered into a contiguous [1, L, Hkv, D] cache and
 * the dense reference attention run with one query at position p (kv_len
 * input p + 1) must give the paged row's result. */
static void check_against_dense(const paged_case_t *c) {
  const ty_ref_paged_shape_t *s = &c->shape;
  const int64_t hq = s->q_heads, hkv = s->kv_heads, d = s->head_dim, bs = s->block_size;
  const int64_t row = hkv * d;
  ok(ty_ref_paged_attention(s, c->q, c->k, c->v, c->table, c->seq, c->pos, c->out));
  int padding = 0;
  for (int64_t i = 0; i < s->rows; ++i) {
    const double *got = c->out + i * hq * d;
    if (c->seq[i] < 0) {
      for (int64_t e = 0; e < hq * d; ++e) assert_true(got[e] == 0.0);
      ++padding;
      continue;
    }
    const int64_t seq = c->seq[i], len = c->len[seq];
    double *dk = malloc((size_t)(len * row) * sizeof(double));
    double *dv = malloc((size_t)(len * row) * sizeof(double));
    double want[64];
    assert_true(dk && dv && hq * d <= 64);
    for (int64_t j = 0; j < len; ++j) {
      int64_t block = c->table[seq * s->max_blocks + j / bs];
      memcpy(dk + j * row, c->k + (block * bs + j % bs) * row, (size_t)row * sizeof(double));
      memcpy(dv + j * row, c->v + (block * bs + j % bs) * row, (size_t)row * sizeof(double));
    }
    ty_ref_attention_shape_t dense = {
        .batch = 1, .q_len = 1, .kv_len = len, .q_heads = hq, .kv_heads = hkv,
        .head_dim = d, .scale = s->scale, .window = s->window, .valid_len = c->pos[i] + 1};
    ok(ty_ref_attention_forward(&dense, c->q + i * hq * d, dk, dv, want, NULL));
    for (int64_t e = 0; e < hq * d; ++e) {
      if (!(fabs(got[e] - want[e]) <= 1e-12 * (1.0 + fabs(want[e])))) {
        fail_msg("row %lld (seq %lld, pos %lld) element %lld: paged %.17g, dense %.17g",
                 (long long)i, (long long)seq, (long long)c->pos[i], (long long)e, got[e],
                 want[e]);
      }
    }
    free(dk);
    free(dv);
  }
  assert_int_equal(padding, 2);
}

static void test_paged_attention_dense(void **state) {
  (void)state;
  static const struct { int64_t bs, hq, hkv, window; } configs[] = {
      {16, 4, 2, 0}, {5, 4, 2, 0}, {5, 4, 4, 0}, {5, 4, 2, 3}, {16, 2, 1, 7}, {1, 3, 1, 0},
  };
  for (size_t k = 0; k < sizeof(configs) / sizeof(configs[0]); ++k) {
    print_message("  BS=%lld Hq=%lld Hkv=%lld window=%lld\n", (long long)configs[k].bs,
                  (long long)configs[k].hq, (long long)configs[k].hkv,
                  (long long)configs[k].window);
    paged_case_t c;
    case_make(&c, configs[k].bs, configs[k].hq, configs[k].hkv, configs[k].window);
    check_against_dense(&c);
    case_free(&c);
  }
}

/* A row's result depends on its own q, sequence and position only. */
static void test_paged_attention_rows_independent(void **state) {
  (void)state;
  paged_case_t c;
  case_make(&c, 5, 4, 2, 0);
  ok(ty_ref_paged_attention(&c.shape, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out));
  const int64_t w = c.shape.q_heads * c.shape.head_dim;
  for (int64_t i = 0; i < c.shape.rows; ++i) {
    double one[64];
    ty_ref_paged_shape_t single = c.shape;
    single.rows = 1;
    ok(ty_ref_paged_attention(&single, c.q + i * w, c.k, c.v, c.table, c.seq + i, c.pos + i,
                              one));
    assert_memory_equal(one, c.out + i * w, (size_t)w * sizeof(double));
  }
  case_free(&c);
}

static void test_paged_attention_errors(void **state) {
  (void)state;
  paged_case_t c;
  case_make(&c, 5, 4, 2, 0);
  const ty_ref_paged_shape_t *s = &c.shape;
  const int64_t n = s->rows;
  for (int64_t e = 0; e < n * s->q_heads * s->head_dim; ++e) c.out[e] = 3.0;
  int64_t i = 0;
  while (c.seq[i] != 2 || c.pos[i] != 1) ++i; /* sequence 2 at position 1: block 0 */
  const int64_t keep_seq = c.seq[i], keep_pos = c.pos[i];
  c.seq[i] = s->seqs;
  expect_error(ty_ref_paged_attention(s, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out),
               "has row_seq 3 outside [-1, 3)", NULL);
  c.seq[i] = -2;
  expect_error(ty_ref_paged_attention(s, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out),
               "has row_seq -2", NULL);
  c.seq[i] = keep_seq;
  c.pos[i] = s->max_blocks * s->block_size;
  expect_error(ty_ref_paged_attention(s, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out),
               "row_pos 25 outside [0, 25)", NULL);
  c.pos[i] = -1;
  expect_error(ty_ref_paged_attention(s, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out),
               "row_pos -1", NULL);
  c.pos[i] = keep_pos;
  const int64_t keep_block = c.table[2 * s->max_blocks];
  c.table[2 * s->max_blocks] = s->blocks;
  char want[96];
  snprintf(want, sizeof(want), "reads block %lld outside the pool's [0, %lld)",
           (long long)s->blocks, (long long)s->blocks);
  expect_error(ty_ref_paged_attention(s, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out), want,
               "block_table[2, 0]");
  c.table[2 * s->max_blocks] = keep_block;
  for (int64_t e = 0; e < n * s->q_heads * s->head_dim; ++e) assert_true(c.out[e] == 3.0);
  /* A bad number in a column no row reads (the -1 tail) is not an error. */
  assert_true(c.table[s->max_blocks - 1] == -1);
  ok(ty_ref_paged_attention(s, c.q, c.k, c.v, c.table, c.seq, c.pos, c.out));
  case_free(&c);
}

int main(void) {
  ty_test_rng_init("test_ref_paged");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_paged_kv_write),
      cmocka_unit_test(test_paged_attention_dense),
      cmocka_unit_test(test_paged_attention_rows_independent),
      cmocka_unit_test(test_paged_attention_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
