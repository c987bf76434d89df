/* The paged KV cache's block pool (models/kv_pool.h): all-or-nothing
 * reservations, prefix sharing of whole blocks, cached blocks kept after a
 * sequence ends and evicted oldest first, copy-on-write after a fork,
 * preemption and cancellation, table allocation failures, forced hash
 * collisions, and a randomized soak. Every test keeps a shadow of the
 * device: per block row, what a real key depends on (a hash of every token
 * up to and including that position), written where a step writes and
 * copied where the pool asks for a copy, so reading a sequence back through
 * its table checks that nobody else wrote its blocks and that a prefix
 * taken from the cache was computed for that prompt's tokens in that
 * context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "models/kv_pool.h"
#include "models/kv_pool_test_hook.h"

enum { MAX_COPIES = 64 };

typedef struct {
  ty_kv_pool_t *pool;
  int64_t blocks, bs;
  int64_t *rows; /* shadow device: blocks * bs token ids, -1 never written */
} fixture_t;

static fixture_t fixture_make(int64_t blocks, int64_t bs, bool sharing) {
  fixture_t f = {.blocks = blocks, .bs = bs};
  ty_kv_pool_options_t o = {.blocks = blocks, .block_size = bs, .prefix_sharing = sharing};
  TY_EXPECT_OK(ty_kv_pool_create(&o, &f.pool));
  f.rows = malloc((size_t)(blocks * bs) * sizeof(int64_t));
  assert_non_null(f.rows);
  for (int64_t i = 0; i < blocks * bs; ++i) f.rows[i] = -1;
  return f;
}

static void fixture_free(fixture_t *f) {
  ty_kv_pool_stats_t s = ty_kv_pool_stats(f->pool);
  assert_int_equal(s.free, f->blocks); /* every test ends its sequences */
  assert_int_equal(s.in_use, 0);
  TY_EXPECT_OK(ty_kv_pool_check_for_test(f->pool));
  ty_kv_pool_destroy(f->pool);
  free(f->rows);
}

/* The shadow of a key at a position: a hash of the tokens up to it, rolled
 * forward from the previous position's (the test's own, not the pool's). */
static int64_t context_next(int64_t previous, int64_t token) {
  uint64_t x = (uint64_t)previous * 0x100000001b3ull + (uint64_t)token + 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  x *= 0xd6e8feb86659fd93ull;
  return (int64_t)((x ^ (x >> 32)) & INT64_MAX); /* >= 0: -1 means never written */
}

static int64_t context_at(const int64_t *toks, int64_t p) {
  int64_t c = 0;
  for (int64_t i = 0; i <= p; ++i) c = context_next(c, toks[i]);
  return c;
}

/* Positions [0, seq->tokens) read back through the table hold the keys of
 * `toks`. */
static void expect_content(const fixture_t *f, const ty_kv_seq_t *seq, const int64_t *toks) {
  int64_t want = 0;
  for (int64_t p = 0; p < seq->tokens; ++p) {
    want = context_next(want, toks[p]);
    int64_t got = f->rows[seq->blocks[p / f->bs] * f->bs + p % f->bs];
    if (got != want) {
      fail_msg("position %lld (token %lld) reads another context through block %d",
               (long long)p, (long long)toks[p], seq->blocks[p / f->bs]);
    }
  }
}

/* One engine step: reserve up to `upto`, do the copies, check that every
 * block the step writes is this sequence's alone, write, commit. */
static ty_status_t step(fixture_t *f, ty_kv_seq_t *seq, const int64_t *toks, int64_t upto,
                        int64_t *out_copies) {
  ty_kv_copy_t copies[MAX_COPIES];
  int64_t n = -1;
  ty_status_t st = ty_kv_pool_seq_reserve(f->pool, seq, upto, copies, MAX_COPIES, &n);
  if (out_copies) *out_copies = n;
  if (st) return st;
  for (int64_t i = 0; i < n; ++i) {
    memcpy(f->rows + copies[i].to * f->bs, f->rows + copies[i].from * f->bs,
           (size_t)f->bs * sizeof(int64_t));
  }
  int64_t c = seq->tokens > 0 ? context_at(toks, seq->tokens - 1) : 0;
  for (int64_t p = seq->tokens; p < upto; ++p) {
    int32_t b = seq->blocks[p / f->bs];
    c = context_next(c, toks[p]);
    if (ty_kv_pool_refs_for_test(f->pool, b) != 1) {
      fail_msg("position %lld writes block %d held by %d tables", (long long)p, b,
               ty_kv_pool_refs_for_test(f->pool, b));
    }
    f->rows[b * f->bs + p % f->bs] = c;
  }
  ty_kv_pool_seq_commit(f->pool, seq, toks, upto);
  assert_int_equal(seq->tokens, upto);
  expect_content(f, seq, toks);
  return TY_OK;
}

static void fill(int64_t *toks, int64_t n, int64_t base) {
  for (int64_t i = 0; i < n; ++i) toks[i] = base + i;
}

static void test_bad_options_are_refused(void **state) {
  (void)state;
  ty_kv_pool_t *pool = NULL;
  TY_EXPECT_STATUS(ty_kv_pool_create(&(ty_kv_pool_options_t){.blocks = 0, .block_size = 16}, &pool),
                   TY_CODE_INVALID_ARGUMENT, "0 blocks");
  TY_EXPECT_STATUS(ty_kv_pool_create(&(ty_kv_pool_options_t){.blocks = 4, .block_size = 0}, &pool),
                   TY_CODE_INVALID_ARGUMENT, "block size 0");
  assert_null(pool);
  fixture_t f = fixture_make(4, 4, true);
  ty_kv_seq_t seq = {0};
  int64_t toks[8];
  fill(toks, 8, 1);
  TY_EXPECT_STATUS(ty_kv_pool_seq_begin(f.pool, toks, 0, &seq, NULL), TY_CODE_INVALID_ARGUMENT,
                   "at least one");
  TY_EXPECT_STATUS(ty_kv_pool_seq_reserve(f.pool, &seq, 4, NULL, 0, NULL),
                   TY_CODE_INVALID_ARGUMENT, "never begun");
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, toks, 3, &seq, NULL));
  ty_kv_seq_t again = seq;
  TY_EXPECT_STATUS(ty_kv_pool_seq_begin(f.pool, toks, 3, &again, NULL), TY_CODE_INVALID_ARGUMENT,
                   "end it");
  TY_EXPECT_STATUS(ty_kv_pool_seq_reserve(f.pool, &seq, -1, NULL, 0, NULL),
                   TY_CODE_INVALID_ARGUMENT, "upto >= 0");
  ty_kv_pool_seq_end(f.pool, &seq);
  fixture_free(&f);
}

static void test_blocks_for_and_needed(void **state) {
  (void)state;
  fixture_t f = fixture_make(8, 4, true);
  const int64_t want[] = {0, 1, 1, 1, 1, 2, 2, 2, 2, 3};
  for (int64_t t = 0; t < 10; ++t) assert_int_equal(ty_kv_pool_blocks_for(f.pool, t), want[t]);
  assert_int_equal(ty_kv_pool_blocks_for(f.pool, -3), 0);
  int64_t toks[16];
  fill(toks, 16, 100);
  ty_kv_seq_t seq = {0};
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, toks, 6, &seq, &cached));
  assert_int_equal(cached, 0);
  assert_int_equal(ty_kv_pool_stats(f.pool).in_use, 0); /* begin takes no block */
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &seq, 6), 2);
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &seq, 9), 3);
  TY_EXPECT_OK(step(&f, &seq, toks, 6, NULL));
  assert_int_equal(seq.count, 2);
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &seq, 6), 0);
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &seq, 8), 0);
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &seq, 9), 1);
  ty_kv_pool_stats_t s = ty_kv_pool_stats(f.pool);
  assert_int_equal(s.in_use, 2);
  assert_int_equal(s.free, 6);
  assert_int_equal(seq.registered, 1); /* the one full block */
  ty_kv_pool_seq_end(f.pool, &seq);
  assert_null(seq.blocks);
  assert_int_equal(seq.count, 0);
  fixture_free(&f);
}

static void test_exhaustion_is_all_or_nothing(void **state) {
  (void)state;
  fixture_t f = fixture_make(4, 4, false);
  int64_t a[16], b[16];
  fill(a, 16, 1);
  fill(b, 16, 50);
  ty_kv_seq_t sa = {0}, sb = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 12, &sa, NULL));
  TY_EXPECT_OK(step(&f, &sa, a, 12, NULL));
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, b, 8, &sb, NULL));
  ty_kv_pool_stats_t before = ty_kv_pool_stats(f.pool);
  TY_EXPECT_STATUS(ty_kv_pool_seq_reserve(f.pool, &sb, 8, NULL, 0, NULL),
                   TY_CODE_RESOURCE_EXHAUSTED, "needs 2 more blocks (2 new, 0 copies) but 1 are available of 4");
  ty_kv_pool_stats_t after = ty_kv_pool_stats(f.pool);
  assert_memory_equal(&before, &after, sizeof(before));
  assert_int_equal(sb.count, 0);
  assert_int_equal(sb.tokens, 0);
  /* A growing sequence too: 12 -> 20 needs 2, 1 is there. */
  TY_EXPECT_STATUS(ty_kv_pool_seq_reserve(f.pool, &sa, 20, NULL, 0, NULL),
                   TY_CODE_RESOURCE_EXHAUSTED, "needs 2 more blocks");
  assert_int_equal(sa.count, 3);
  assert_int_equal(ty_kv_pool_stats(f.pool).free, 1);
  TY_EXPECT_OK(step(&f, &sb, b, 4, NULL)); /* one block fits */
  assert_int_equal(ty_kv_pool_stats(f.pool).free, 0);
  expect_content(&f, &sa, a);
  ty_kv_pool_seq_end(f.pool, &sa);
  ty_kv_pool_seq_end(f.pool, &sb);
  fixture_free(&f);
}

/* Prompt A: 3 full blocks and 2 tokens; B the same 3 blocks, another tail. */
static void test_prefix_sharing(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(32, BS, true);
  int64_t a[3 * BS + 2], b[3 * BS + 3], c[3 * BS], d[3 * BS + 1];
  fill(a, 3 * BS + 2, 10);
  memcpy(b, a, 3 * BS * sizeof(int64_t));
  fill(b + 3 * BS, 3, 900);
  memcpy(c, a, sizeof(c));
  memcpy(d, a, 3 * BS * sizeof(int64_t));
  d[3 * BS] = 7;
  d[BS + 1] = 999; /* block 2 (the second) differs */
  ty_kv_seq_t sa = {0}, sb = {0}, sc = {0}, sd = {0};
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 3 * BS + 2, &sa, &cached));
  assert_int_equal(cached, 0);
  TY_EXPECT_OK(step(&f, &sa, a, 3 * BS + 2, NULL));
  assert_int_equal(sa.registered, 3);
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, b, 3 * BS + 3, &sb, &cached));
  assert_int_equal(cached, 3 * BS);
  assert_int_equal(sb.tokens, 3 * BS);
  assert_int_equal(sb.count, 3);
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(sb.blocks[i], sa.blocks[i]);
    assert_int_equal(ty_kv_pool_refs_for_test(f.pool, sa.blocks[i]), 2);
  }
  assert_int_equal(ty_kv_pool_refs_for_test(f.pool, sa.blocks[3]), 1);
  ty_kv_pool_stats_t s = ty_kv_pool_stats(f.pool);
  assert_int_equal(s.shared, 3);
  assert_int_equal(s.in_use, 4);
  assert_int_equal(s.prefix_hits, 3 * BS);
  expect_content(&f, &sb, b);
  int64_t copies = -1;
  TY_EXPECT_OK(step(&f, &sb, b, 3 * BS + 3, &copies));
  assert_int_equal(copies, 0); /* prompt sharing never copies */
  assert_int_equal(ty_kv_pool_stats(f.pool).in_use, 5);
  /* Exactly 3 full blocks: the last is computed again for its logits. */
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, c, 3 * BS, &sc, &cached));
  assert_int_equal(cached, 2 * BS);
  assert_int_equal(sc.count, 2);
  assert_int_equal(ty_kv_pool_refs_for_test(f.pool, sa.blocks[1]), 3);
  assert_int_equal(ty_kv_pool_refs_for_test(f.pool, sa.blocks[2]), 2);
  TY_EXPECT_OK(step(&f, &sc, c, 3 * BS, NULL));
  assert_int_not_equal(sc.blocks[2], sa.blocks[2]);
  /* A different token in block 2 shares block 1 only. */
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, d, 3 * BS + 1, &sd, &cached));
  assert_int_equal(cached, BS);
  assert_int_equal(sd.count, 1);
  assert_int_equal(sd.blocks[0], sa.blocks[0]);
  TY_EXPECT_OK(step(&f, &sd, d, 3 * BS + 1, NULL));
  for (int i = 1; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) assert_int_not_equal(sd.blocks[i], sa.blocks[j]);
  }
  assert_int_equal(ty_kv_pool_stats(f.pool).prefix_hits, 3 * BS + 2 * BS + BS);
  expect_content(&f, &sa, a);
  ty_kv_pool_seq_end(f.pool, &sa);
  ty_kv_pool_seq_end(f.pool, &sb);
  ty_kv_pool_seq_end(f.pool, &sc);
  ty_kv_pool_seq_end(f.pool, &sd);
  fixture_free(&f);
}

static void test_prefix_sharing_off_shares_nothing(void **state) {
  (void)state;
  fixture_t f = fixture_make(16, 4, false);
  int64_t a[10];
  fill(a, 10, 3);
  ty_kv_seq_t s1 = {0}, s2 = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 10, &s1, NULL));
  TY_EXPECT_OK(step(&f, &s1, a, 10, NULL));
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 10, &s2, &cached));
  assert_int_equal(cached, 0);
  assert_int_equal(s1.registered, 0);
  ty_kv_pool_seq_end(f.pool, &s1);
  ty_kv_pool_seq_end(f.pool, &s2);
  assert_int_equal(ty_kv_pool_stats(f.pool).cached, 0);
  fixture_free(&f);
}

static void test_cached_blocks_survive_end(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(16, BS, true);
  int64_t a[3 * BS + 1];
  fill(a, 3 * BS + 1, 40);
  ty_kv_seq_t s = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 3 * BS + 1, &s, NULL));
  TY_EXPECT_OK(step(&f, &s, a, 3 * BS + 1, NULL));
  int32_t had[3] = {s.blocks[0], s.blocks[1], s.blocks[2]};
  int32_t partial = s.blocks[3];
  ty_kv_pool_seq_end(f.pool, &s);
  ty_kv_pool_stats_t st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.cached, 3);
  assert_int_equal(st.free, 16); /* cached blocks count as available */
  assert_int_equal(st.in_use, 0);
  assert_false(ty_kv_pool_registered_for_test(f.pool, partial));
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 3 * BS + 1, &s, &cached));
  assert_int_equal(cached, 3 * BS);
  for (int i = 0; i < 3; ++i) assert_int_equal(s.blocks[i], had[i]);
  st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.cached, 0);
  assert_int_equal(st.in_use, 3);
  expect_content(&f, &s, a);
  ty_kv_pool_seq_end(f.pool, &s);
  fixture_free(&f);
}

/* Runs `toks` (len tokens) to the end as one sequence and ends it. */
static void run_and_end(fixture_t *f, const int64_t *toks, int64_t len) {
  ty_kv_seq_t s = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f->pool, toks, len, &s, NULL));
  TY_EXPECT_OK(step(f, &s, toks, len, NULL));
  ty_kv_pool_seq_end(f->pool, &s);
}

static int64_t cached_for(fixture_t *f, const int64_t *toks, int64_t len) {
  ty_kv_seq_t s = {0};
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f->pool, toks, len, &s, &cached));
  expect_content(f, &s, toks);
  ty_kv_pool_seq_end(f->pool, &s);
  return cached;
}

static void test_eviction_is_lru(void **state) {
  (void)state;
  fixture_t f = fixture_make(8, 2, true);
  int64_t p1[5], p2[5], q[16];
  fill(p1, 5, 10);
  fill(p2, 5, 20);
  fill(q, 16, 30);
  run_and_end(&f, p1, 5); /* blocks 0 1 cached, 2 free */
  run_and_end(&f, p2, 5); /* 2 3 cached (LIFO gave 2 back), 4 free */
  ty_kv_pool_stats_t st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.cached, 4);
  assert_int_equal(st.free, 8);
  /* Released last-block-first: cached oldest first are p1's 1, 0, p2's 3, 2. */
  ty_kv_seq_t sq = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, q, 16, &sq, NULL));
  TY_EXPECT_OK(step(&f, &sq, q, 10, NULL)); /* 5 blocks: 4 free + 1 evicted */
  st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.evictions, 1);
  assert_int_equal(st.cached, 3);
  assert_int_equal(sq.blocks[4], 1); /* p1's second block, now q's */
  assert_int_equal(cached_for(&f, p1, 5), 2); /* block 0 still matches, 1 does not */
  /* That use made block 0 the newest: 3 2 0. */
  TY_EXPECT_OK(step(&f, &sq, q, 12, NULL));
  assert_int_equal(ty_kv_pool_stats(f.pool).evictions, 2);
  assert_int_equal(sq.blocks[5], 3);
  assert_int_equal(cached_for(&f, p2, 5), 2); /* 0 2 */
  TY_EXPECT_OK(step(&f, &sq, q, 14, NULL));
  assert_int_equal(ty_kv_pool_stats(f.pool).evictions, 3);
  assert_int_equal(sq.blocks[6], 0);
  assert_int_equal(cached_for(&f, p1, 5), 0);
  assert_int_equal(cached_for(&f, p2, 5), 2);
  TY_EXPECT_OK(step(&f, &sq, q, 16, NULL));
  assert_int_equal(ty_kv_pool_stats(f.pool).evictions, 4);
  assert_int_equal(sq.blocks[7], 2);
  assert_int_equal(ty_kv_pool_stats(f.pool).cached, 0);
  assert_int_equal(cached_for(&f, p2, 5), 0);
  expect_content(&f, &sq, q);
  ty_kv_pool_seq_end(f.pool, &sq);
  fixture_free(&f);
}

static void test_copy_on_write_after_fork(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(16, BS, true);
  int64_t pa[12], ch[12];
  fill(pa, 12, 60);
  memcpy(ch, pa, sizeof(ch));
  ch[6] = 500; /* the two samples differ from position 6 on */
  ch[7] = 501;
  ch[8] = 502;
  ty_kv_seq_t parent = {0}, child = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, pa, 6, &parent, NULL));
  TY_EXPECT_OK(step(&f, &parent, pa, 6, NULL)); /* block 1 holds 4 5, half full */
  TY_EXPECT_OK(ty_kv_pool_seq_fork(f.pool, &parent, &child));
  assert_int_equal(child.count, 2);
  assert_int_equal(child.tokens, 6);
  ty_kv_pool_stats_t st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.shared, 2);
  assert_int_equal(st.in_use, 2);
  int32_t b0 = parent.blocks[0], b1 = parent.blocks[1];
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &child, 7), 1); /* the copy */
  assert_int_equal(ty_kv_pool_seq_blocks_needed(f.pool, &child, 9), 2);
  TY_EXPECT_STATUS(ty_kv_pool_seq_reserve(f.pool, &child, 7, NULL, 0, NULL),
                   TY_CODE_INVALID_ARGUMENT, "room for 0");
  assert_int_equal(child.blocks[1], b1);
  ty_kv_copy_t copies[4];
  int64_t n = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_reserve(f.pool, &child, 7, copies, 4, &n));
  assert_int_equal(n, 1);
  assert_int_equal(copies[0].from, b1);
  assert_int_equal(copies[0].to, child.blocks[1]);
  assert_int_not_equal(child.blocks[1], b1);
  assert_int_equal(child.blocks[0], b0);
  assert_int_equal(parent.blocks[1], b1);
  assert_int_equal(ty_kv_pool_refs_for_test(f.pool, b1), 1);
  assert_int_equal(ty_kv_pool_refs_for_test(f.pool, b0), 2);
  st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.copies, 1);
  assert_int_equal(st.shared, 1);
  /* The device copy, then the child's write; commit. */
  memcpy(f.rows + copies[0].to * BS, f.rows + copies[0].from * BS, BS * sizeof(int64_t));
  f.rows[child.blocks[1] * BS + 2] = context_at(ch, 6);
  ty_kv_pool_seq_commit(f.pool, &child, ch, 7);
  expect_content(&f, &child, ch);
  expect_content(&f, &parent, pa);
  /* The parent is now alone on block 1: it writes in place. */
  int64_t made = -1;
  TY_EXPECT_OK(step(&f, &parent, pa, 9, &made));
  assert_int_equal(made, 0);
  assert_int_equal(parent.blocks[1], b1);
  TY_EXPECT_OK(step(&f, &child, ch, 9, &made));
  assert_int_equal(made, 0);
  expect_content(&f, &parent, pa);
  expect_content(&f, &child, ch);
  /* Each completed its own block 1 and registered it: two prefixes. */
  assert_int_equal(cached_for(&f, pa, 9), 2 * BS);
  assert_int_equal(cached_for(&f, ch, 9), 2 * BS);
  ty_kv_pool_seq_end(f.pool, &parent);
  ty_kv_pool_seq_end(f.pool, &child);
  fixture_free(&f);
}

/* A sequence preempted mid-generation comes back as prompt + generated and
 * gets every full block it registered. */
static void test_preemption_gets_its_prefix_back(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(16, BS, true);
  int64_t t[13];
  fill(t, 13, 70);
  ty_kv_seq_t s = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, t, 6, &s, NULL));
  TY_EXPECT_OK(step(&f, &s, t, 6, NULL));
  for (int64_t p = 7; p <= 13; ++p) TY_EXPECT_OK(step(&f, &s, t, p, NULL)); /* decode */
  assert_int_equal(s.registered, 3);
  int32_t had[3] = {s.blocks[0], s.blocks[1], s.blocks[2]};
  ty_kv_pool_seq_end(f.pool, &s);
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, t, 13, &s, &cached));
  assert_int_equal(cached, 12);
  for (int i = 0; i < 3; ++i) assert_int_equal(s.blocks[i], had[i]);
  TY_EXPECT_OK(step(&f, &s, t, 13, NULL));
  ty_kv_pool_seq_end(f.pool, &s);
  fixture_free(&f);
}

/* A request cancelled during its prefill (reserved, never committed) gives
 * every block back and registers nothing; a sharer keeps its blocks. */
static void test_cancellation(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(16, BS, true);
  int64_t a[12], b[12];
  fill(a, 12, 80);
  memcpy(b, a, sizeof(b));
  b[11] = 5;
  ty_kv_seq_t sa = {0}, sb = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 12, &sa, NULL));
  TY_EXPECT_OK(ty_kv_pool_seq_reserve(f.pool, &sa, 12, NULL, 0, NULL));
  assert_int_equal(ty_kv_pool_stats(f.pool).in_use, 3);
  ty_kv_pool_seq_end(f.pool, &sa); /* cancelled before any compute */
  ty_kv_pool_stats_t st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.in_use, 0);
  assert_int_equal(st.cached, 0);
  assert_int_equal(cached_for(&f, a, 12), 0);
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 12, &sa, NULL));
  TY_EXPECT_OK(step(&f, &sa, a, 12, NULL));
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, b, 12, &sb, NULL));
  assert_int_equal(sb.count, 2);
  ty_kv_pool_seq_end(f.pool, &sb); /* cancelled while sharing */
  assert_int_equal(ty_kv_pool_refs_for_test(f.pool, sa.blocks[0]), 1);
  assert_int_equal(ty_kv_pool_stats(f.pool).shared, 0);
  expect_content(&f, &sa, a);
  ty_kv_pool_seq_end(f.pool, &sa);
  fixture_free(&f);
}

/* A step reserves blocks for drafted tokens (speculative decoding), keeps
 * a few and gives the rest back: trim releases only blocks past the kept
 * positions, never a computed one, and the kept prefix still registers. */
static void test_trim_gives_back_rejected_blocks(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(8, BS, true);
  int64_t a[20];
  fill(a, 20, 300);
  ty_kv_seq_t s = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 6, &s, NULL));
  TY_EXPECT_OK(step(&f, &s, a, 5, NULL)); /* the prompt but its last token */
  /* The last prompt token and 9 drafts: positions 5..14, 4 blocks. */
  TY_EXPECT_OK(ty_kv_pool_seq_reserve(f.pool, &s, 15, NULL, 0, NULL));
  assert_int_equal(s.count, 4);
  assert_int_equal(ty_kv_pool_stats(f.pool).in_use, 4);
  /* Two drafts accepted: positions up to 7 hold keys; the next write is 8. */
  TY_EXPECT_OK(step(&f, &s, a, 8, NULL));
  ty_kv_pool_seq_trim(f.pool, &s, 9);
  assert_int_equal(s.count, 3);
  ty_kv_pool_stats_t st = ty_kv_pool_stats(f.pool);
  assert_int_equal(st.in_use, 3);
  assert_int_equal(st.free, 5);
  TY_EXPECT_OK(ty_kv_pool_check_for_test(f.pool));
  /* Never below the computed positions: asking for less keeps them. */
  ty_kv_pool_seq_trim(f.pool, &s, 0);
  assert_int_equal(s.count, 2); /* positions 0..7: two blocks */
  /* The two full blocks registered: a second sequence shares them. */
  ty_kv_seq_t t2 = {0};
  int64_t got = 0;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 12, &t2, &got));
  assert_int_equal(got, 8);
  expect_content(&f, &t2, a);
  ty_kv_pool_seq_end(f.pool, &t2);
  ty_kv_pool_seq_end(f.pool, &s);
  fixture_free(&f);
}

static void test_table_allocation_failures(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(16, BS, true);
  int64_t a[20];
  fill(a, 20, 90);
  run_and_end(&f, a, 9); /* 2 blocks cached */
  ty_kv_pool_stats_t before = ty_kv_pool_stats(f.pool);
  ty_kv_seq_t s = {0};
  ty_kv_pool_fail_allocs_for_test(f.pool, 0);
  TY_EXPECT_STATUS(ty_kv_pool_seq_begin(f.pool, a, 9, &s, NULL), TY_CODE_RESOURCE_EXHAUSTED,
                   "no memory for a block table");
  assert_null(s.blocks);
  ty_kv_pool_stats_t after = ty_kv_pool_stats(f.pool);
  assert_memory_equal(&before, &after, sizeof(before)); /* no prefix taken */
  TY_EXPECT_OK(ty_kv_pool_check_for_test(f.pool));
  ty_kv_pool_fail_allocs_for_test(f.pool, 1);
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, a, 9, &s, NULL)); /* room for 4 blocks */
  TY_EXPECT_OK(step(&f, &s, a, 9, NULL));
  before = ty_kv_pool_stats(f.pool);
  TY_EXPECT_STATUS(ty_kv_pool_seq_reserve(f.pool, &s, 20, NULL, 0, NULL),
                   TY_CODE_RESOURCE_EXHAUSTED, "no memory for a block table");
  after = ty_kv_pool_stats(f.pool);
  assert_memory_equal(&before, &after, sizeof(before));
  assert_int_equal(s.count, 3);
  ty_kv_seq_t child = {0};
  TY_EXPECT_STATUS(ty_kv_pool_seq_fork(f.pool, &s, &child), TY_CODE_RESOURCE_EXHAUSTED,
                   "no memory");
  assert_null(child.blocks);
  assert_int_equal(ty_kv_pool_stats(f.pool).shared, 0);
  TY_EXPECT_OK(ty_kv_pool_check_for_test(f.pool));
  ty_kv_pool_fail_allocs_for_test(f.pool, -1);
  TY_EXPECT_OK(step(&f, &s, a, 20, NULL));
  ty_kv_pool_seq_end(f.pool, &s);
  fixture_free(&f);
}

/* A registered block whose parent was evicted and registered again for
 * other tokens must not match under the new parent: its keys were computed
 * after the old one. Blocks of 2: S1 = x c and S2 = x c f run side by side
 * (so S2 finds x and c registered by S1 and registers f under S1's c); S1
 * ends; S3 = x c' takes x and evicts S1's c for c'; then x c' f matches two
 * blocks, not three. With every chain hashing alike too, where only the
 * parent's registration count tells the old c from c'. */
static void orphan_scenario(ty_kv_pool_hash_fn_t hash) {
  fixture_t f = fixture_make(5, 2, true);
  if (hash) TY_EXPECT_OK(ty_kv_pool_set_hash_for_test(f.pool, hash));
  const int64_t s1t[] = {1, 2, 3, 4}, s2t[] = {1, 2, 3, 4, 7, 8}, s3t[] = {1, 2, 5, 6};
  const int64_t probe[] = {1, 2, 5, 6, 7, 8, 0};
  ty_kv_seq_t s1 = {0}, s2 = {0}, s3 = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, s1t, 4, &s1, NULL));
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, s2t, 6, &s2, NULL));
  TY_EXPECT_OK(step(&f, &s1, s1t, 4, NULL));
  TY_EXPECT_OK(step(&f, &s2, s2t, 6, NULL));
  int32_t c1 = s1.blocks[1], f2 = s2.blocks[2];
  assert_false(ty_kv_pool_registered_for_test(f.pool, s2.blocks[1])); /* S1's c holds it */
  assert_true(ty_kv_pool_registered_for_test(f.pool, f2));
  ty_kv_pool_seq_end(f.pool, &s1);
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, s3t, 4, &s3, &cached));
  assert_int_equal(cached, 2);
  TY_EXPECT_OK(step(&f, &s3, s3t, 4, NULL));
  assert_int_equal(s3.blocks[1], c1); /* evicted and registered again as c' */
  assert_int_equal(ty_kv_pool_stats(f.pool).evictions, 1);
  ty_kv_pool_seq_end(f.pool, &s2);
  ty_kv_pool_seq_end(f.pool, &s3);
  assert_true(ty_kv_pool_registered_for_test(f.pool, f2)); /* cached, unreachable */
  assert_int_equal(cached_for(&f, probe, 7), 4);
  fixture_free(&f);
}

static uint64_t same_hash(uint64_t parent, const int64_t *tokens, int64_t count);

static void test_evicted_parent_orphans_its_children(void **state) {
  (void)state;
  orphan_scenario(NULL);
  orphan_scenario(same_hash);
}

static uint64_t same_hash(uint64_t parent, const int64_t *tokens, int64_t count) {
  (void)parent;
  (void)tokens;
  (void)count;
  return 42;
}

/* Every chain hashes alike: only the tokens and the parent block tell
 * prefixes apart. P = [x, y], Q = [z, y]: R = [z, y, t] must get Q's
 * blocks, never P's second block (same tokens, same parent hash, another
 * parent). */
static void test_forced_collisions_never_share(void **state) {
  (void)state;
  enum { BS = 4 };
  fixture_t f = fixture_make(32, BS, true);
  TY_EXPECT_OK(ty_kv_pool_set_hash_for_test(f.pool, same_hash));
  int64_t p[2 * BS + 1], q[2 * BS + 1], r[2 * BS + 2];
  fill(p, BS, 1);
  fill(p + BS, BS + 1, 100);
  fill(q, BS, 50);
  memcpy(q + BS, p + BS, (BS + 1) * sizeof(int64_t));
  memcpy(r, q, sizeof(q));
  r[2 * BS + 1] = 7;
  ty_kv_seq_t sp = {0}, sq = {0}, sr = {0};
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, p, 2 * BS + 1, &sp, NULL));
  TY_EXPECT_OK(step(&f, &sp, p, 2 * BS + 1, NULL));
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, q, 2 * BS + 1, &sq, &cached));
  assert_int_equal(cached, 0);
  TY_EXPECT_OK(step(&f, &sq, q, 2 * BS + 1, NULL));
  assert_int_equal(sq.registered, 2);
  assert_true(ty_kv_pool_registered_for_test(f.pool, sq.blocks[1]));
  int32_t p1 = sp.blocks[1], q0 = sq.blocks[0], q1 = sq.blocks[1];
  ty_kv_pool_seq_end(f.pool, &sp);
  ty_kv_pool_seq_end(f.pool, &sq);
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f.pool, r, 2 * BS + 2, &sr, &cached));
  assert_int_equal(cached, 2 * BS);
  assert_int_equal(sr.blocks[0], q0);
  assert_int_equal(sr.blocks[1], q1);
  assert_int_not_equal(sr.blocks[1], p1);
  expect_content(&f, &sr, r);
  ty_kv_pool_seq_end(f.pool, &sr);
  TY_EXPECT_STATUS(ty_kv_pool_set_hash_for_test(f.pool, NULL), TY_CODE_FAILED_PRECONDITION,
                   "registered");
  fixture_free(&f);
}

/* ---- the soak ------------------------------------------------------------ */

enum { SOAK_LIVE = 10, SOAK_MAXLEN = 64, SOAK_PREFIXES = 4 };

typedef struct {
  ty_kv_seq_t seq;
  int64_t toks[SOAK_MAXLEN];
  int64_t len;    /* tokens known (prompt + sampled) */
  int64_t target; /* finish at this length */
  bool live, waiting; /* waiting: preempted, to begin again */
} sim_t;

typedef struct {
  uint64_t begins, preemptions, disconnects, forks, exhausted, finished;
} soak_counts_t;

static uint64_t rnd(ty_test_rng_t *rng, uint64_t n) { return ty_test_rng_next(rng) % n; }

/* The pool's own invariants, and the tables against its counts: every
 * block's refs equal the tables holding it, free + in use = blocks, shared
 * = blocks in two or more tables, and every table reads back its tokens. */
static void soak_check(const fixture_t *f, const sim_t *sims, int n) {
  TY_EXPECT_OK(ty_kv_pool_check_for_test(f->pool));
  int32_t *held = calloc((size_t)f->blocks, sizeof(int32_t));
  assert_non_null(held);
  int64_t entries = 0, refs = 0;
  for (int i = 0; i < n; ++i) {
    if (!sims[i].live) continue;
    for (int64_t j = 0; j < sims[i].seq.count; ++j) held[sims[i].seq.blocks[j]]++;
    entries += sims[i].seq.count;
    expect_content(f, &sims[i].seq, sims[i].toks);
  }
  int64_t in_use = 0, shared = 0;
  for (int32_t b = 0; b < f->blocks; ++b) {
    int32_t r = ty_kv_pool_refs_for_test(f->pool, b);
    if (r != held[b]) fail_msg("block %d: %d refs, %d tables hold it", b, r, held[b]);
    refs += r;
    in_use += r > 0;
    shared += r > 1;
  }
  free(held);
  assert_int_equal(refs, entries);
  ty_kv_pool_stats_t s = ty_kv_pool_stats(f->pool);
  assert_int_equal(s.free + s.in_use, f->blocks);
  assert_int_equal(s.in_use, in_use);
  assert_int_equal(s.shared, shared);
  assert_true(s.cached <= s.free);
}

static void soak_new_prompt(ty_test_rng_t *rng, int64_t prefixes[][SOAK_MAXLEN],
                            const int64_t *prefix_len, sim_t *sim) {
  int k = (int)rnd(rng, SOAK_PREFIXES + 1); /* SOAK_PREFIXES = no shared prefix */
  int64_t n = 0;
  if (k < SOAK_PREFIXES) {
    n = prefix_len[k];
    memcpy(sim->toks, prefixes[k], (size_t)n * sizeof(int64_t));
  }
  int64_t tail = 1 + (int64_t)rnd(rng, 10);
  for (int64_t i = 0; i < tail; ++i) sim->toks[n++] = (int64_t)rnd(rng, 6); /* small vocab: equal blocks happen */
  sim->len = n;
  sim->target = n + (int64_t)rnd(rng, SOAK_MAXLEN - n);
}

static void soak_begin(fixture_t *f, sim_t *sim, soak_counts_t *c) {
  int64_t cached = -1;
  TY_EXPECT_OK(ty_kv_pool_seq_begin(f->pool, sim->toks, sim->len, &sim->seq, &cached));
  assert_true(cached % f->bs == 0 && cached < sim->len);
  sim->live = true;
  sim->waiting = false;
  c->begins++;
}

/* One step of `sims[i]`: a prefill chunk, or a sampled token to compute.
 * When the pool is full, checks that nothing moved and preempts someone. */
static void soak_step(ty_test_rng_t *rng, fixture_t *f, sim_t *sims, int n, int i,
                      soak_counts_t *c) {
  sim_t *s = &sims[i];
  if (s->seq.tokens == s->len) {
    if (s->len == s->target) {
      ty_kv_pool_seq_end(f->pool, &s->seq);
      s->live = false;
      c->finished++;
      return;
    }
    s->toks[s->len++] = (int64_t)rnd(rng, 6);
  }
  int64_t upto = s->seq.tokens + 1 + (int64_t)rnd(rng, 8);
  if (upto > s->len) upto = s->len;
  ty_kv_pool_stats_t before = ty_kv_pool_stats(f->pool);
  ty_kv_seq_t table = s->seq;
  ty_status_t st = step(f, &s->seq, s->toks, upto, NULL);
  if (!st) return;
  assert_int_equal(ty_status_code(st), TY_CODE_RESOURCE_EXHAUSTED);
  ty_status_free(st);
  c->exhausted++;
  ty_kv_pool_stats_t after = ty_kv_pool_stats(f->pool);
  assert_memory_equal(&before, &after, sizeof(before));
  assert_int_equal(s->seq.count, table.count);
  assert_int_equal(s->seq.tokens, table.tokens);
  /* Preempt a random live sequence (maybe this one): it begins again later
   * with everything it knows as its prompt. */
  int victim = (int)rnd(rng, (uint64_t)n);
  while (!sims[victim].live) victim = (victim + 1) % n;
  ty_kv_pool_seq_end(f->pool, &sims[victim].seq);
  sims[victim].live = false;
  sims[victim].waiting = true;
  c->preemptions++;
}

static void soak(ty_kv_pool_hash_fn_t hash, int sequences, uint64_t seed) {
  enum { BS = 4, BLOCKS = 40 };
  fixture_t f = fixture_make(BLOCKS, BS, true);
  if (hash) TY_EXPECT_OK(ty_kv_pool_set_hash_for_test(f.pool, hash));
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, seed);
  int64_t prefixes[SOAK_PREFIXES][SOAK_MAXLEN], prefix_len[SOAK_PREFIXES];
  for (int k = 0; k < SOAK_PREFIXES; ++k) {
    prefix_len[k] = (int64_t)rnd(&rng, 25);
    for (int64_t i = 0; i < prefix_len[k]; ++i) prefixes[k][i] = (int64_t)rnd(&rng, 1000);
  }
  sim_t *sims = calloc(SOAK_LIVE, sizeof(sim_t));
  assert_non_null(sims);
  soak_counts_t c = {0};
  int started = 0;
  for (;;) {
    int live = 0, waiting = -1, idle = -1;
    for (int i = 0; i < SOAK_LIVE; ++i) {
      live += sims[i].live;
      if (sims[i].waiting) waiting = i;
      if (!sims[i].live && !sims[i].waiting) idle = i;
    }
    if (live == 0 && waiting < 0 && started >= sequences) break;
    uint64_t r = rnd(&rng, 100);
    if (waiting >= 0 && (live == 0 || r < 10)) {
      soak_begin(&f, &sims[waiting], &c); /* back from preemption */
    } else if (idle >= 0 && started < sequences && (live == 0 || r < 20)) {
      memset(&sims[idle], 0, sizeof(sim_t));
      soak_new_prompt(&rng, prefixes, prefix_len, &sims[idle]);
      soak_begin(&f, &sims[idle], &c);
      started++;
    } else if (live > 0) {
      int i = (int)rnd(&rng, SOAK_LIVE);
      while (!sims[i].live) i = (i + 1) % SOAK_LIVE;
      r = rnd(&rng, 100);
      if (r < 1) { /* the client went away */
        ty_kv_pool_seq_end(f.pool, &sims[i].seq);
        sims[i].live = false;
        c.disconnects++;
      } else if (r < 4 && idle >= 0 && started < sequences) { /* n > 1 samples */
        sim_t *child = &sims[idle];
        memset(child, 0, sizeof(sim_t));
        TY_EXPECT_OK(ty_kv_pool_seq_fork(f.pool, &sims[i].seq, &child->seq));
        memcpy(child->toks, sims[i].toks, sizeof(child->toks));
        child->len = sims[i].len;
        child->target = child->len + (int64_t)rnd(&rng, (uint64_t)(SOAK_MAXLEN - child->len));
        child->live = true;
        started++;
        c.forks++;
      } else {
        soak_step(&rng, &f, sims, SOAK_LIVE, i, &c);
      }
    }
    soak_check(&f, sims, SOAK_LIVE);
  }
  ty_kv_pool_stats_t s = ty_kv_pool_stats(f.pool);
  printf("soak (%s hash, seed %llu): %d sequences, %llu begins, %llu forks, %llu finished, "
         "%llu disconnects, %llu preemptions, %llu refusals; %llu prefix tokens, %llu "
         "evictions, %llu copies\n",
         hash ? "forced" : "real", (unsigned long long)seed, started,
         (unsigned long long)c.begins, (unsigned long long)c.forks,
         (unsigned long long)c.finished, (unsigned long long)c.disconnects,
         (unsigned long long)c.preemptions, (unsigned long long)c.exhausted,
         (unsigned long long)s.prefix_hits, (unsigned long long)s.evictions,
         (unsigned long long)s.copies);
  assert_int_equal(s.free, BLOCKS);
  assert_int_equal(s.in_use, 0);
  /* The soak reached every path it is there for. */
  assert_true(s.prefix_hits > 0 && s.evictions > 0 && s.copies > 0);
  assert_true(c.preemptions > 0 && c.disconnects > 0 && c.forks > 0 && c.finished > 0);
  free(sims);
  fixture_free(&f);
}

static void test_soak(void **state) {
  (void)state;
  soak(NULL, 1000, ty_test_seed());
}

static void test_soak_forced_collisions(void **state) {
  (void)state;
  soak(same_hash, 300, ty_test_seed() + 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_options_are_refused),
      cmocka_unit_test(test_blocks_for_and_needed),
      cmocka_unit_test(test_exhaustion_is_all_or_nothing),
      cmocka_unit_test(test_prefix_sharing),
      cmocka_unit_test(test_prefix_sharing_off_shares_nothing),
      cmocka_unit_test(test_cached_blocks_survive_end),
      cmocka_unit_test(test_eviction_is_lru),
      cmocka_unit_test(test_copy_on_write_after_fork),
      cmocka_unit_test(test_preemption_gets_its_prefix_back),
      cmocka_unit_test(test_cancellation),
      cmocka_unit_test(test_trim_gives_back_rejected_blocks),
      cmocka_unit_test(test_table_allocation_failures),
      cmocka_unit_test(test_evicted_parent_orphans_its_children),
      cmocka_unit_test(test_forced_collisions_never_share),
      cmocka_unit_test(test_soak),
      cmocka_unit_test(test_soak_forced_collisions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
