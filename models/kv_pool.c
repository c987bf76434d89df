/* The paged KV cache's block pool (models/kv_pool.h): block numbers, per-
 * block reference counts, a LIFO free list, and the prefix cache (a map from
 * a full block's chain to the block, plus an LRU list of cached blocks).
 * Every array is sized at creation, so only block tables allocate later. */
#include "models/kv_pool.h"

#include <stdlib.h>
#include <string.h>

#include "models/kv_pool_test_hook.h"

/* The chain "before block 0". Any constant works; a non-zero one keeps an
 * all-zero first block from hashing like an empty chain. */
static const uint64_t kTyKvChainRoot = 0x6b76706f6f6c2d31ull;

struct ty_kv_pool_t {
  int64_t blocks;
  int64_t block_size;
  bool prefix_sharing;
  int32_t *refs;       /* tables holding each block */
  int32_t *free_stack; /* unregistered blocks nobody holds; top = next out */
  int64_t free_count;
  /* Cached blocks (registered, refs 0), oldest release at the head. */
  int32_t *lru_prev, *lru_next;
  int32_t lru_head, lru_tail;
  int64_t cached_count;
  int64_t shared_count; /* blocks with refs > 1 */
  /* Prefix cache (NULL arrays without prefix_sharing). A block registers
   * under (chain hash, parent block, parent's generation, its tokens); the
   * generation changes when a block is unregistered, so an entry whose
   * parent was evicted and reused can never match again. */
  bool *registered;
  uint64_t *hash;
  int32_t *parent;
  uint64_t *parent_gen;
  uint64_t *gen;
  int64_t *tokens; /* blocks * block_size: each registered block's ids */
  int32_t *slots;  /* open addressing, linear probing, -1 = empty */
  uint64_t slot_mask;
  int64_t registered_count;
  ty_kv_pool_hash_fn_t hash_fn;
  int64_t alloc_budget; /* test hook: table allocations left, < 0 = no limit */
  uint64_t prefix_hits, evictions, copies;
};

static uint64_t ty_kv_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t ty_kv_chain_hash(uint64_t parent, const int64_t *tokens, int64_t count) {
  uint64_t h = ty_kv_mix64(parent ^ 0x9e3779b97f4a7c15ull);
  for (int64_t i = 0; i < count; ++i) h = ty_kv_mix64(h + 0x9e3779b97f4a7c15ull + (uint64_t)tokens[i]);
  return h;
}

static uint64_t ty_kv_hash(const ty_kv_pool_t *pool, uint64_t parent, const int64_t *tokens) {
  return (pool->hash_fn ? pool->hash_fn : ty_kv_chain_hash)(parent, tokens, pool->block_size);
}

/* ---- the map ---------------------------------------------------------- */

static uint64_t ty_kv_home(const ty_kv_pool_t *pool, uint64_t h) {
  return ty_kv_mix64(h) & pool->slot_mask; /* re-mixed: a test hash may be poor */
}

static const int64_t *ty_kv_block_tokens(const ty_kv_pool_t *pool, int32_t b) {
  return pool->tokens + (int64_t)b * pool->block_size;
}

/* The registered block with this chain, parent and tokens, or -1. */
static int32_t ty_kv_map_find(const ty_kv_pool_t *pool, uint64_t h, int32_t parent,
                              uint64_t parent_gen, const int64_t *tokens) {
  for (uint64_t i = ty_kv_home(pool, h);; i = (i + 1) & pool->slot_mask) {
    int32_t b = pool->slots[i];
    if (b < 0) return -1;
    if (pool->hash[b] == h && pool->parent[b] == parent && pool->parent_gen[b] == parent_gen &&
        memcmp(ty_kv_block_tokens(pool, b), tokens,
               (size_t)pool->block_size * sizeof(int64_t)) == 0) {
      return b;
    }
  }
}

static void ty_kv_register(ty_kv_pool_t *pool, int32_t b, uint64_t h, int32_t parent,
                           uint64_t parent_gen, const int64_t *tokens) {
  memcpy(pool->tokens + (int64_t)b * pool->block_size, tokens,
         (size_t)pool->block_size * sizeof(int64_t));
  pool->hash[b] = h;
  pool->parent[b] = parent;
  pool->parent_gen[b] = parent_gen;
  pool->registered[b] = true;
  pool->registered_count++;
  uint64_t i = ty_kv_home(pool, h);
  while (pool->slots[i] >= 0) i = (i + 1) & pool->slot_mask;
  pool->slots[i] = b; /* the map has 2x the blocks' slots: never full */
}

/* Removes `b` from the map by backward shifting (no tombstones), so probe
 * lengths do not grow with churn. */
static void ty_kv_unregister(ty_kv_pool_t *pool, int32_t b) {
  uint64_t mask = pool->slot_mask;
  uint64_t i = ty_kv_home(pool, pool->hash[b]);
  while (pool->slots[i] != b) i = (i + 1) & mask;
  pool->slots[i] = -1;
  for (uint64_t j = (i + 1) & mask; pool->slots[j] >= 0; j = (j + 1) & mask) {
    uint64_t k = ty_kv_home(pool, pool->hash[pool->slots[j]]);
    /* The entry at j may move to the hole at i unless its home lies
     * cyclically in (i, j]. */
    bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    pool->slots[i] = pool->slots[j];
    pool->slots[j] = -1;
    i = j;
  }
  pool->registered[b] = false;
  pool->registered_count--;
  pool->gen[b]++;
}

/* ---- free and cached lists ---------------------------------------------- */

static void ty_kv_lru_remove(ty_kv_pool_t *pool, int32_t b) {
  int32_t p = pool->lru_prev[b], n = pool->lru_next[b];
  if (p >= 0) pool->lru_next[p] = n; else pool->lru_head = n;
  if (n >= 0) pool->lru_prev[n] = p; else pool->lru_tail = p;
  pool->lru_prev[b] = pool->lru_next[b] = -1;
  pool->cached_count--;
}

static void ty_kv_lru_push(ty_kv_pool_t *pool, int32_t b) {
  pool->lru_prev[b] = pool->lru_tail;
  pool->lru_next[b] = -1;
  if (pool->lru_tail >= 0) pool->lru_next[pool->lru_tail] = b; else pool->lru_head = b;
  pool->lru_tail = b;
  pool->cached_count++;
}

/* A block for new data: the free list first, else the oldest cached block.
 * The caller has checked that one is available. */
static int32_t ty_kv_take(ty_kv_pool_t *pool) {
  int32_t b;
  if (pool->free_count > 0) {
    b = pool->free_stack[--pool->free_count];
  } else {
    b = pool->lru_head;
    ty_kv_lru_remove(pool, b);
    ty_kv_unregister(pool, b);
    pool->evictions++;
  }
  pool->refs[b] = 1;
  return b;
}

/* One more table holds `b` (a registered block found by a prompt, or a
 * forked table's block). */
static void ty_kv_acquire(ty_kv_pool_t *pool, int32_t b) {
  if (pool->refs[b] == 0) ty_kv_lru_remove(pool, b);
  if (++pool->refs[b] == 2) pool->shared_count++;
}

static void ty_kv_release(ty_kv_pool_t *pool, int32_t b) {
  int32_t r = --pool->refs[b];
  if (r == 1) pool->shared_count--;
  if (r > 0) return;
  if (pool->registered && pool->registered[b]) {
    ty_kv_lru_push(pool, b);
  } else {
    pool->free_stack[pool->free_count++] = b;
  }
}

/* ---- tables ------------------------------------------------------------- */

static ty_status_t ty_kv_table_grow(ty_kv_pool_t *pool, ty_kv_seq_t *seq, int64_t need) {
  if (need <= seq->capacity) return TY_OK;
  int64_t cap = seq->capacity * 2 > need ? seq->capacity * 2 : need;
  if (cap < 4) cap = 4;
  if (cap > pool->blocks) cap = pool->blocks; /* a table holds a block once */
  if (cap < need) cap = need;
  int32_t *grown = NULL;
  if (pool->alloc_budget != 0) grown = realloc(seq->blocks, (size_t)cap * sizeof(int32_t));
  if (pool->alloc_budget > 0) pool->alloc_budget--;
  if (!grown) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "kv pool: no memory for a block table of %lld entries",
                          (long long)cap);
  }
  seq->blocks = grown;
  seq->capacity = cap;
  return TY_OK;
}

static bool ty_kv_seq_is_zero(const ty_kv_seq_t *seq) {
  return !seq->blocks && seq->count == 0 && seq->capacity == 0 && seq->tokens == 0;
}

/* ---- the interface -------------------------------------------------------- */

ty_status_t ty_kv_pool_create(const ty_kv_pool_options_t *options, ty_kv_pool_t **out_pool) {
  if (!options || !out_pool) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "kv pool: options and out_pool are required");
  }
  *out_pool = NULL;
  if (options->blocks < 1 || options->blocks >= INT32_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: %lld blocks; give between 1 and %d", (long long)options->blocks,
                          INT32_MAX - 1);
  }
  if (options->block_size < 1 || options->block_size > (int64_t)1 << 20) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: block size %lld; give between 1 and %d tokens (16 is usual)",
                          (long long)options->block_size, 1 << 20);
  }
  ty_kv_pool_t *pool = calloc(1, sizeof(*pool));
  if (!pool) goto oom;
  size_t n = (size_t)options->blocks;
  pool->blocks = options->blocks;
  pool->block_size = options->block_size;
  pool->prefix_sharing = options->prefix_sharing;
  pool->lru_head = pool->lru_tail = -1;
  pool->alloc_budget = -1;
  pool->refs = calloc(n, sizeof(int32_t));
  pool->free_stack = malloc(n * sizeof(int32_t));
  pool->lru_prev = malloc(n * sizeof(int32_t));
  pool->lru_next = malloc(n * sizeof(int32_t));
  if (!pool->refs || !pool->free_stack || !pool->lru_prev || !pool->lru_next) goto oom;
  /* Block 0 on top, so an idle pool hands out 0, 1, 2, ... */
  for (int64_t i = 0; i < pool->blocks; ++i) {
    pool->free_stack[i] = (int32_t)(pool->blocks - 1 - i);
    pool->lru_prev[i] = pool->lru_next[i] = -1;
  }
  pool->free_count = pool->blocks;
  if (pool->prefix_sharing) {
    if ((uint64_t)pool->blocks * (uint64_t)pool->block_size > SIZE_MAX / sizeof(int64_t)) goto oom;
    size_t slots = 2;
    while (slots < 2 * n) slots *= 2;
    pool->slot_mask = slots - 1;
    pool->registered = calloc(n, sizeof(bool));
    pool->hash = calloc(n, sizeof(uint64_t));
    pool->parent = calloc(n, sizeof(int32_t));
    pool->parent_gen = calloc(n, sizeof(uint64_t));
    pool->gen = calloc(n, sizeof(uint64_t));
    pool->tokens = malloc(n * (size_t)pool->block_size * sizeof(int64_t));
    pool->slots = malloc(slots * sizeof(int32_t));
    if (!pool->registered || !pool->hash || !pool->parent || !pool->parent_gen || !pool->gen ||
        !pool->tokens || !pool->slots) {
      goto oom;
    }
    memset(pool->slots, 0xff, slots * sizeof(int32_t)); /* -1 */
  }
  *out_pool = pool;
  return TY_OK;
oom:
  ty_kv_pool_destroy(pool);
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                        "kv pool: no memory for the bookkeeping of %lld blocks of %lld tokens",
                        (long long)options->blocks, (long long)options->block_size);
}

void ty_kv_pool_destroy(ty_kv_pool_t *pool) {
  if (!pool) return;
  free(pool->refs);
  free(pool->free_stack);
  free(pool->lru_prev);
  free(pool->lru_next);
  free(pool->registered);
  free(pool->hash);
  free(pool->parent);
  free(pool->parent_gen);
  free(pool->gen);
  free(pool->tokens);
  free(pool->slots);
  free(pool);
}

int64_t ty_kv_pool_blocks_for(const ty_kv_pool_t *pool, int64_t tokens) {
  if (!pool || tokens <= 0) return 0;
  return tokens / pool->block_size + (tokens % pool->block_size != 0);
}

ty_status_t ty_kv_pool_seq_begin(ty_kv_pool_t *pool, const int64_t *prompt, int64_t prompt_len,
                                 ty_kv_seq_t *seq, int64_t *out_cached) {
  if (out_cached) *out_cached = 0;
  if (!pool || !seq || !prompt) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "kv pool: begin needs a pool, a prompt and a sequence");
  }
  if (prompt_len < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: a prompt of %lld tokens; a sequence starts with at least one "
                          "(its logits give the first new token)", (long long)prompt_len);
  }
  if (!ty_kv_seq_is_zero(seq)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: begin on a sequence that holds a table; end it "
                          "(ty_kv_pool_seq_end) or zero-initialize it first");
  }
  int64_t want = ty_kv_pool_blocks_for(pool, prompt_len);
  ty_kv_seq_t fresh = {0};
  TY_RETURN_IF_ERROR(ty_kv_table_grow(pool, &fresh, want < pool->blocks ? want : pool->blocks));
  fresh.chain = kTyKvChainRoot;
  fresh.chain_block = -1;
  if (pool->prefix_sharing) {
    /* Whole blocks only, and never the block holding the last prompt token:
     * its logits must be computed. */
    int64_t most = (prompt_len - 1) / pool->block_size;
    while (fresh.count < most) {
      const int64_t *toks = prompt + fresh.count * pool->block_size;
      uint64_t h = ty_kv_hash(pool, fresh.chain, toks);
      int32_t b = ty_kv_map_find(pool, h, fresh.chain_block, fresh.chain_gen, toks);
      if (b < 0) break;
      ty_kv_acquire(pool, b);
      fresh.blocks[fresh.count++] = b;
      fresh.chain = h;
      fresh.chain_block = b;
      fresh.chain_gen = pool->gen[b];
    }
  }
  fresh.registered = fresh.count;
  fresh.tokens = fresh.count * pool->block_size;
  pool->prefix_hits += (uint64_t)fresh.tokens;
  *seq = fresh;
  if (out_cached) *out_cached = fresh.tokens;
  return TY_OK;
}

ty_status_t ty_kv_pool_seq_extend(ty_kv_pool_t *pool, ty_kv_seq_t *seq, const int64_t *tokens,
                                  int64_t len, int64_t *out_more) {
  if (out_more) *out_more = 0;
  if (!pool || !seq || !tokens) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "kv pool: extend needs a pool, tokens and a "
                          "sequence");
  }
  /* Only a sequence whose every block is computed and on the cache's
   * chain can continue along it. */
  if (!pool->prefix_sharing || seq->tokens != seq->count * pool->block_size ||
      seq->registered != seq->count) {
    return TY_OK;
  }
  int64_t most = (len - 1) / pool->block_size, start = seq->count;
  while (seq->count < most) {
    const int64_t *toks = tokens + seq->count * pool->block_size;
    uint64_t h = ty_kv_hash(pool, seq->chain, toks);
    int32_t b = ty_kv_map_find(pool, h, seq->chain_block, seq->chain_gen, toks);
    if (b < 0) break;
    TY_RETURN_IF_ERROR(ty_kv_table_grow(pool, seq, seq->count + 1));
    ty_kv_acquire(pool, b);
    seq->blocks[seq->count++] = b;
    seq->chain = h;
    seq->chain_block = b;
    seq->chain_gen = pool->gen[b];
  }
  int64_t more = (seq->count - start) * pool->block_size;
  seq->registered = seq->count;
  seq->tokens = seq->count * pool->block_size;
  pool->prefix_hits += (uint64_t)more;
  if (out_more) *out_more = more;
  return TY_OK;
}

/* New blocks and copies that reserving up to `upto` takes. */
static void ty_kv_count_needs(const ty_kv_pool_t *pool, const ty_kv_seq_t *seq, int64_t upto,
                              int64_t *out_new, int64_t *out_copies) {
  int64_t want = ty_kv_pool_blocks_for(pool, upto);
  *out_new = want > seq->count ? want - seq->count : 0;
  *out_copies = 0;
  if (upto <= seq->tokens) return;
  int64_t end = want < seq->count ? want : seq->count;
  for (int64_t i = seq->tokens / pool->block_size; i < end; ++i) {
    if (pool->refs[seq->blocks[i]] > 1) ++*out_copies;
  }
}

int64_t ty_kv_pool_seq_blocks_needed(const ty_kv_pool_t *pool, const ty_kv_seq_t *seq,
                                     int64_t upto) {
  if (!pool || !seq) return 0;
  int64_t fresh, copies;
  ty_kv_count_needs(pool, seq, upto, &fresh, &copies);
  return fresh + copies;
}

ty_status_t ty_kv_pool_seq_reserve(ty_kv_pool_t *pool, ty_kv_seq_t *seq, int64_t upto,
                                   ty_kv_copy_t *copies, int64_t copy_room, int64_t *out_copies) {
  if (out_copies) *out_copies = 0;
  if (!pool || !seq || upto < 0 || copy_room < 0 || (copy_room > 0 && !copies)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: reserve needs a pool, a sequence, upto >= 0 (got %lld) and a "
                          "copy list for copy_room > 0", (long long)upto);
  }
  if (seq->capacity == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: reserve on a sequence that was never begun; call "
                          "ty_kv_pool_seq_begin (or ty_kv_pool_seq_fork) first");
  }
  int64_t fresh, ncopies;
  ty_kv_count_needs(pool, seq, upto, &fresh, &ncopies);
  if (ncopies > copy_room) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: the step writes into %lld blocks shared with a forked "
                          "sequence but the copy list has room for %lld; pass room for one copy "
                          "per block the step writes", (long long)ncopies, (long long)copy_room);
  }
  int64_t available = pool->free_count + pool->cached_count;
  if (fresh + ncopies > available) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "kv pool: reaching %lld tokens needs %lld more blocks (%lld new, %lld "
                          "copies) but %lld are available of %lld; end or preempt a sequence, or "
                          "give the pool more blocks", (long long)upto,
                          (long long)(fresh + ncopies), (long long)fresh, (long long)ncopies,
                          (long long)available, (long long)pool->blocks);
  }
  TY_RETURN_IF_ERROR(ty_kv_table_grow(pool, seq, seq->count + fresh));
  if (ncopies > 0) {
    int64_t end = seq->count < ty_kv_pool_blocks_for(pool, upto) ? seq->count
                                                                  : ty_kv_pool_blocks_for(pool, upto);
    int64_t n = 0;
    for (int64_t i = seq->tokens / pool->block_size; i < end; ++i) {
      int32_t from = seq->blocks[i];
      if (pool->refs[from] < 2) continue;
      int32_t to = ty_kv_take(pool);
      ty_kv_release(pool, from); /* stays held by the others */
      seq->blocks[i] = to;
      copies[n++] = (ty_kv_copy_t){from, to};
    }
    pool->copies += (uint64_t)n;
    if (out_copies) *out_copies = n;
  }
  for (int64_t i = 0; i < fresh; ++i) seq->blocks[seq->count++] = ty_kv_take(pool);
  return TY_OK;
}

void ty_kv_pool_seq_commit(ty_kv_pool_t *pool, ty_kv_seq_t *seq, const int64_t *tokens,
                           int64_t upto) {
  if (!pool || !seq) return;
  /* Positions past the table were never reserved: nothing there is held. */
  int64_t covered = seq->count * pool->block_size;
  if (upto > covered) upto = covered;
  if (upto <= seq->tokens) return;
  seq->tokens = upto;
  if (!pool->prefix_sharing || !tokens) return;
  int64_t full = upto / pool->block_size;
  while (seq->registered < full) {
    const int64_t *toks = tokens + seq->registered * pool->block_size;
    uint64_t h = ty_kv_hash(pool, seq->chain, toks);
    int32_t b = ty_kv_map_find(pool, h, seq->chain_block, seq->chain_gen, toks);
    if (b < 0) {
      b = seq->blocks[seq->registered];
      /* Only a block registered under another key; the chain cannot
       * continue through it, so stop registering this sequence. */
      if (pool->registered[b]) return;
      ty_kv_register(pool, b, h, seq->chain_block, seq->chain_gen, toks);
    }
    /* else an equal block computed by another sequence is registered: the
     * chain goes on through it and this sequence's copy stays private. */
    seq->chain = h;
    seq->chain_block = b;
    seq->chain_gen = pool->gen[b];
    seq->registered++;
  }
}

ty_status_t ty_kv_pool_seq_fork(ty_kv_pool_t *pool, const ty_kv_seq_t *parent, ty_kv_seq_t *child) {
  if (!pool || !parent || !child) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "kv pool: fork needs a pool, a parent and a child");
  }
  if (!ty_kv_seq_is_zero(child)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv pool: fork into a sequence that holds a table; end it or "
                          "zero-initialize it first");
  }
  ty_kv_seq_t fresh = {0};
  TY_RETURN_IF_ERROR(ty_kv_table_grow(pool, &fresh, parent->count > 0 ? parent->count : 1));
  for (int64_t i = 0; i < parent->count; ++i) {
    ty_kv_acquire(pool, parent->blocks[i]);
    fresh.blocks[i] = parent->blocks[i];
  }
  fresh.count = parent->count;
  fresh.tokens = parent->tokens;
  fresh.registered = parent->registered;
  fresh.chain = parent->chain;
  fresh.chain_block = parent->chain_block;
  fresh.chain_gen = parent->chain_gen;
  *child = fresh;
  return TY_OK;
}

void ty_kv_pool_seq_trim(ty_kv_pool_t *pool, ty_kv_seq_t *seq, int64_t upto) {
  if (!pool || !seq) return;
  if (upto < seq->tokens) upto = seq->tokens;
  int64_t keep = ty_kv_pool_blocks_for(pool, upto);
  while (seq->count > keep) ty_kv_release(pool, seq->blocks[--seq->count]);
}

void ty_kv_pool_seq_end(ty_kv_pool_t *pool, ty_kv_seq_t *seq) {
  if (!pool || !seq) return;
  /* Last block first: it joins the cached list first and so is evicted
   * before the blocks it extends (a chain loses its tail, not its head). */
  for (int64_t i = seq->count - 1; i >= 0; --i) ty_kv_release(pool, seq->blocks[i]);
  free(seq->blocks);
  memset(seq, 0, sizeof(*seq));
}

ty_kv_pool_stats_t ty_kv_pool_stats(const ty_kv_pool_t *pool) {
  ty_kv_pool_stats_t s = {0};
  if (!pool) return s;
  s.blocks = pool->blocks;
  s.block_size = pool->block_size;
  s.free = pool->free_count + pool->cached_count;
  s.cached = pool->cached_count;
  s.in_use = pool->blocks - s.free;
  s.shared = pool->shared_count;
  s.prefix_hits = pool->prefix_hits;
  s.evictions = pool->evictions;
  s.copies = pool->copies;
  return s;
}

/* ---- test hooks (models/kv_pool_test_hook.h) ------------------------------ */

ty_status_t ty_kv_pool_set_hash_for_test(ty_kv_pool_t *pool, ty_kv_pool_hash_fn_t fn) {
  if (pool->registered_count > 0) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "kv pool: %lld blocks are registered under the current hash; set the "
                          "hash before the first commit", (long long)pool->registered_count);
  }
  pool->hash_fn = fn;
  return TY_OK;
}

void ty_kv_pool_fail_allocs_for_test(ty_kv_pool_t *pool, int64_t successes) {
  pool->alloc_budget = successes < 0 ? -1 : successes;
}

int32_t ty_kv_pool_refs_for_test(const ty_kv_pool_t *pool, int32_t block) {
  if (block < 0 || block >= pool->blocks) return -1;
  return pool->refs[block];
}

bool ty_kv_pool_registered_for_test(const ty_kv_pool_t *pool, int32_t block) {
  return pool->registered && block >= 0 && block < pool->blocks && pool->registered[block];
}

#define TY_KV_BROKEN(...) \
  do {                    \
    status = ty_status_make(TY_CODE_INTERNAL, "kv pool: " __VA_ARGS__); \
    goto done;            \
  } while (0)

ty_status_t ty_kv_pool_check_for_test(const ty_kv_pool_t *pool) {
  ty_status_t status = TY_OK;
  unsigned char *seen = calloc((size_t)pool->blocks, 1);
  if (!seen) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "kv pool: no memory to check");
  int64_t idle = 0, shared = 0, registered = 0;
  for (int64_t b = 0; b < pool->blocks; ++b) {
    if (pool->refs[b] < 0) TY_KV_BROKEN("block %lld has %d refs", (long long)b, pool->refs[b]);
    idle += pool->refs[b] == 0;
    shared += pool->refs[b] > 1;
    registered += pool->registered && pool->registered[b];
  }
  if (shared != pool->shared_count) {
    TY_KV_BROKEN("%lld shared blocks counted, %lld found", (long long)pool->shared_count,
                 (long long)shared);
  }
  if (registered != pool->registered_count) {
    TY_KV_BROKEN("%lld registered blocks counted, %lld found",
                 (long long)pool->registered_count, (long long)registered);
  }
  for (int64_t i = 0; i < pool->free_count; ++i) {
    int32_t b = pool->free_stack[i];
    if (b < 0 || b >= pool->blocks || seen[b]) TY_KV_BROKEN("free list entry %d repeats or is out of range", b);
    seen[b] = 1;
    if (pool->refs[b] != 0) TY_KV_BROKEN("free block %d has %d refs", b, pool->refs[b]);
    if (pool->registered && pool->registered[b]) TY_KV_BROKEN("free block %d is registered", b);
  }
  int64_t cached = 0;
  for (int32_t b = pool->lru_head, prev = -1; b >= 0; prev = b, b = pool->lru_next[b]) {
    if (b >= pool->blocks || seen[b]) TY_KV_BROKEN("cached list entry %d repeats or is out of range", b);
    seen[b] = 1;
    if (pool->lru_prev[b] != prev) TY_KV_BROKEN("cached block %d has a wrong back link", b);
    if (pool->refs[b] != 0) TY_KV_BROKEN("cached block %d has %d refs", b, pool->refs[b]);
    if (!pool->registered || !pool->registered[b]) TY_KV_BROKEN("cached block %d is not registered", b);
    if (pool->lru_next[b] < 0 && pool->lru_tail != b) TY_KV_BROKEN("cached list ends at %d, not its tail", b);
    ++cached;
  }
  if (cached != pool->cached_count) {
    TY_KV_BROKEN("%lld cached blocks counted, %lld listed", (long long)pool->cached_count,
                 (long long)cached);
  }
  if (pool->free_count + cached != idle) {
    TY_KV_BROKEN("%lld blocks have no refs but %lld are free and %lld cached", (long long)idle,
                 (long long)pool->free_count, (long long)cached);
  }
  if (pool->registered) {
    int64_t in_map = 0;
    for (uint64_t i = 0; i <= pool->slot_mask; ++i) {
      int32_t b = pool->slots[i];
      if (b < 0) continue;
      ++in_map;
      if (b >= pool->blocks || !pool->registered[b]) TY_KV_BROKEN("map slot %llu holds unregistered block %d", (unsigned long long)i, b);
    }
    if (in_map != registered) {
      TY_KV_BROKEN("the map holds %lld blocks, %lld are registered", (long long)in_map,
                   (long long)registered);
    }
    for (int32_t b = 0; b < pool->blocks; ++b) {
      if (!pool->registered[b]) continue;
      int32_t found = ty_kv_map_find(pool, pool->hash[b], pool->parent[b], pool->parent_gen[b],
                                     ty_kv_block_tokens(pool, b));
      if (found != b) TY_KV_BROKEN("registered block %d is found as %d", b, found);
    }
  }
done:
  free(seen);
  return status;
}
