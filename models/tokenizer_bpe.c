/* The BPE model: one pre-tokenized word -> ids. Characters become symbols
 * (with byte fallback and unknown-token rules as in HF's BPE::merge_word),
 * then a min-heap of candidate merges ordered by (rank, position) applies
 * merges until none is left: O(n log n) per word. A small direct-mapped
 * cache keeps the ids of recent short words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_internal.h"

/* ---- word cache ---- */

#define TY_TOK_CACHE_SLOTS 8192u   /* power of two */
#define TY_TOK_CACHE_MAX_WORD 256u /* longer words are not cached */

typedef struct ty_tok_cache_slot_t {
  uint64_t hash;
  uint32_t word_size;
  uint32_t id_count;
  uint32_t *data; /* id_count ids, then word_size bytes; NULL when empty */
} ty_tok_cache_slot_t;

struct ty_tok_cache_t {
  pthread_mutex_t lock;
  ty_tok_cache_slot_t slots[TY_TOK_CACHE_SLOTS];
};

ty_status_t ty_tok_cache_create(ty_tok_cache_t **out) {
  ty_tok_cache_t *cache = calloc(1, sizeof(*cache));
  if (!cache) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "tokenizer: out of memory for the word cache");
  }
  if (pthread_mutex_init(&cache->lock, NULL) != 0) {
    free(cache);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: cannot create the cache lock");
  }
  *out = cache;
  return TY_OK;
}

void ty_tok_cache_destroy(ty_tok_cache_t *cache) {
  if (!cache) return;
  for (size_t i = 0; i < TY_TOK_CACHE_SLOTS; ++i) free(cache->slots[i].data);
  pthread_mutex_destroy(&cache->lock);
  free(cache);
}

/* Cache hits append to `out`. A busy lock counts as a miss, so concurrent
 * encoders never wait on each other. */
static ty_status_t ty_tok_cache_get(ty_tok_cache_t *cache, uint64_t hash, const char *word,
                                    size_t size, ty_tok_ids_t *out, bool *out_hit) {
  *out_hit = false;
  if (pthread_mutex_trylock(&cache->lock) != 0) return TY_OK;
  const ty_tok_cache_slot_t *slot = &cache->slots[hash & (TY_TOK_CACHE_SLOTS - 1)];
  ty_status_t status = TY_OK;
  if (slot->data && slot->hash == hash && slot->word_size == size &&
      memcmp(slot->data + slot->id_count, word, size) == 0) {
    status = ty_tok_ids_append(out, slot->data, slot->id_count);
    *out_hit = status == TY_OK;
  }
  pthread_mutex_unlock(&cache->lock);
  return status;
}

static void ty_tok_cache_put(ty_tok_cache_t *cache, uint64_t hash, const char *word, size_t size,
                             const uint32_t *ids, size_t count) {
  if (count > TY_TOK_CACHE_MAX_WORD) return;
  /* Out of memory here only means one word less in the cache. */
  uint32_t *data = malloc(count * sizeof(uint32_t) + size);
  if (!data) return;
  if (count) memcpy(data, ids, count * sizeof(uint32_t));
  memcpy(data + count, word, size);
  if (pthread_mutex_trylock(&cache->lock) != 0) {
    free(data);
    return;
  }
  ty_tok_cache_slot_t *slot = &cache->slots[hash & (TY_TOK_CACHE_SLOTS - 1)];
  free(slot->data);
  *slot = (ty_tok_cache_slot_t){
      .hash = hash, .word_size = (uint32_t)size, .id_count = (uint32_t)count, .data = data};
  pthread_mutex_unlock(&cache->lock);
}

/* ---- merge loop ---- */

typedef struct ty_tok_symbol_t {
  uint32_t id;
  uint32_t prev; /* TY_TOK_NONE at the ends */
  uint32_t next;
  uint32_t removed;
} ty_tok_symbol_t;

typedef struct ty_tok_merge_t {
  uint32_t rank;
  uint32_t pos;
  uint32_t result;
} ty_tok_merge_t;

static inline bool ty_tok_merge_before(const ty_tok_merge_t *a, const ty_tok_merge_t *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void ty_tok_heap_push(ty_tok_merge_t *heap, size_t *count, ty_tok_merge_t m) {
  size_t i = (*count)++;
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!ty_tok_merge_before(&m, &heap[parent])) break;
    heap[i] = heap[parent];
    i = parent;
  }
  heap[i] = m;
}

static ty_tok_merge_t ty_tok_heap_pop(ty_tok_merge_t *heap, size_t *count) {
  ty_tok_merge_t top = heap[0];
  ty_tok_merge_t last = heap[--(*count)];
  size_t n = *count, i = 0;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && ty_tok_merge_before(&heap[child + 1], &heap[child])) ++child;
    if (!ty_tok_merge_before(&heap[child], &last)) break;
    heap[i] = heap[child];
    i = child;
  }
  if (n) heap[i] = last;
  return top;
}

static ty_status_t ty_tok_work_reserve(ty_tok_work_t *work, size_t symbols) {
  if (symbols <= work->symbol_capacity) return TY_OK;
  if (symbols >= UINT32_MAX / 2) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "tokenizer: a word of %zu characters is too long for BPE", symbols);
  }
  size_t capacity = work->symbol_capacity ? work->symbol_capacity : 64;
  while (capacity < symbols) capacity *= 2;
  ty_tok_symbol_t *sym = realloc(work->symbols, capacity * sizeof(ty_tok_symbol_t));
  if (!sym) goto oom;
  work->symbols = sym;
  /* Each merge pushes at most two entries; the heap never holds more than
   * the initial pairs plus twice the merges, below 3n. */
  ty_tok_merge_t *heap = realloc(work->heap, 3 * capacity * sizeof(ty_tok_merge_t));
  if (!heap) goto oom;
  work->heap = heap;
  work->symbol_capacity = capacity;
  work->heap_capacity = 3 * capacity;
  return TY_OK;
oom:
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                        "tokenizer: out of memory for a word of %zu characters", symbols);
}

void ty_tok_bpe_work_free(ty_tok_work_t *work) {
  free(work->symbols);
  free(work->heap);
  work->symbols = NULL;
  work->heap = NULL;
  work->symbol_capacity = work->heap_capacity = 0;
}

static void ty_tok_symbol_add(ty_tok_symbol_t *sym, size_t *count, uint32_t id) {
  size_t i = (*count)++;
  sym[i] = (ty_tok_symbol_t){
      .id = id, .prev = i ? (uint32_t)(i - 1) : TY_TOK_NONE, .next = TY_TOK_NONE, .removed = 0};
  if (i) sym[i - 1].next = (uint32_t)i;
}

/* Characters -> symbols, as HF's merge_word: a character in the vocabulary
 * is a symbol; else its bytes as <0xHH> tokens (byte_fallback, all bytes or
 * none); else the unknown token (runs fused with fuse_unk); else dropped. */
static ty_status_t ty_tok_symbols_init(const ty_tokenizer_t *tok, const char *word, size_t size,
                                       ty_tok_symbol_t *sym, size_t *out_count) {
  size_t count = 0;
  bool pending_unk = false;
  for (size_t i = 0; i < size;) {
    size_t n = ty_tok_utf8_len((unsigned char)word[i]);
    if (n > size - i) n = size - i;
    uint32_t e = ty_tok_strmap_find(&tok->vocab, word + i, n);
    if (e != TY_TOK_NONE) {
      if (pending_unk) ty_tok_symbol_add(sym, &count, tok->unk_id);
      pending_unk = false;
      ty_tok_symbol_add(sym, &count, tok->vocab.entries[e].value);
      i += n;
      continue;
    }
    if (tok->byte_fallback) {
      bool all = true;
      for (size_t k = 0; k < n; ++k)
        all = all && tok->byte_ids[(unsigned char)word[i + k]] != TY_TOK_NONE;
      if (all) {
        /* HF leaves a pending unknown token pending across byte tokens. */
        for (size_t k = 0; k < n; ++k) {
          ty_tok_symbol_add(sym, &count, tok->byte_ids[(unsigned char)word[i + k]]);
        }
        i += n;
        continue;
      }
    }
    if (tok->has_unk_token) {
      if (tok->unk_id == TY_TOK_NONE) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "tokenizer: model.unk_token '%s' is not in model.vocab, and "
                              "the text has a character ('%.*s') that needs it",
                              tok->unk_token, (int)n, word + i);
      }
      if (pending_unk && !tok->fuse_unk) ty_tok_symbol_add(sym, &count, tok->unk_id);
      pending_unk = true;
    }
    i += n;
  }
  if (pending_unk) ty_tok_symbol_add(sym, &count, tok->unk_id);
  *out_count = count;
  return TY_OK;
}

static void ty_tok_merge_all(const ty_tokenizer_t *tok, ty_tok_symbol_t *sym, size_t count,
                             ty_tok_merge_t *heap) {
  size_t heap_count = 0;
  uint32_t rank, result;
  for (size_t i = 0; i + 1 < count; ++i) {
    if (ty_tok_pairmap_get(&tok->merges, sym[i].id, sym[i + 1].id, &rank, &result)) {
      ty_tok_heap_push(heap, &heap_count,
                       (ty_tok_merge_t){.rank = rank, .pos = (uint32_t)i, .result = result});
    }
  }
  while (heap_count) {
    ty_tok_merge_t top = ty_tok_heap_pop(heap, &heap_count);
    ty_tok_symbol_t *left = &sym[top.pos];
    if (left->removed || left->next == TY_TOK_NONE) continue;
    ty_tok_symbol_t *right = &sym[left->next];
    /* Skip entries made stale by an earlier merge of either side. */
    if (!ty_tok_pairmap_get(&tok->merges, left->id, right->id, &rank, &result) ||
        result != top.result) {
      continue;
    }
    left->id = top.result;
    right->removed = 1;
    left->next = right->next;
    if (right->next != TY_TOK_NONE) sym[right->next].prev = top.pos;
    if (left->prev != TY_TOK_NONE &&
        ty_tok_pairmap_get(&tok->merges, sym[left->prev].id, left->id, &rank, &result)) {
      ty_tok_heap_push(heap, &heap_count,
                       (ty_tok_merge_t){.rank = rank, .pos = left->prev, .result = result});
    }
    if (left->next != TY_TOK_NONE &&
        ty_tok_pairmap_get(&tok->merges, left->id, sym[left->next].id, &rank, &result)) {
      ty_tok_heap_push(heap, &heap_count,
                       (ty_tok_merge_t){.rank = rank, .pos = top.pos, .result = result});
    }
  }
}

ty_status_t ty_tok_bpe_prepare_chunks(ty_tokenizer_t *tok) {
  for (size_t e = 0; e < tok->vocab.count; ++e) {
    const char *t = ty_tok_strmap_key(&tok->vocab, (uint32_t)e);
    size_t size = tok->vocab.entries[e].size, n = 0;
    uint32_t prev = ty_tok_utf8_decode(t, size, &n);
    if (n == size) {
      TY_RETURN_IF_ERROR(ty_tok_pairmap_put(&tok->chars, prev, 0, 0, 0));
      continue;
    }
    for (size_t i = n; i < size; i += n) {
      uint32_t cp = ty_tok_utf8_decode(t + i, size - i, &n);
      TY_RETURN_IF_ERROR(ty_tok_pairmap_put(&tok->bigrams, prev, cp, 0, 0));
      prev = cp;
    }
  }
  tok->chunk_words = true;
  return TY_OK;
}

/* BPE on one run of characters, through the cache. */
static ty_status_t ty_tok_bpe_chunk(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                    const char *word, size_t size, ty_tok_ids_t *out) {
  bool cacheable = size <= TY_TOK_CACHE_MAX_WORD;
  uint64_t hash = 0;
  if (cacheable) {
    hash = ty_tok_hash(word, size);
    bool hit = false;
    TY_RETURN_IF_ERROR(ty_tok_cache_get(tok->cache, hash, word, size, out, &hit));
    if (hit) return TY_OK;
  }
  /* At most one symbol per byte (byte fallback gives one per byte). */
  TY_RETURN_IF_ERROR(ty_tok_work_reserve(work, size + 1));
  ty_tok_symbol_t *sym = work->symbols;
  size_t count = 0;
  TY_RETURN_IF_ERROR(ty_tok_symbols_init(tok, word, size, sym, &count));
  ty_tok_merge_all(tok, sym, count, work->heap);
  size_t first = out->count;
  /* Merges keep the left symbol, so the first one is never removed. */
  for (uint32_t i = count ? 0 : TY_TOK_NONE; i != TY_TOK_NONE; i = sym[i].next) {
    TY_RETURN_IF_ERROR(ty_tok_ids_append(out, &sym[i].id, 1));
  }
  if (cacheable) {
    /* A word whose characters were all dropped caches as zero ids. */
    ty_tok_cache_put(tok->cache, hash, word, size, out->count > first ? out->data + first : NULL,
                     out->count - first);
  }
  return TY_OK;
}

/* Words this long are cut where no merge can reach across (see below). */
#define TY_TOK_CHUNK_MIN 32u

ty_status_t ty_tok_bpe_word(const ty_tokenizer_t *tok, ty_tok_work_t *work, const char *word,
                            size_t size, ty_tok_ids_t *out) {
  if (size == 0) return TY_OK;
  if (tok->ignore_merges) {
    uint32_t e = ty_tok_strmap_find(&tok->vocab, word, size);
    if (e != TY_TOK_NONE) return ty_tok_ids_append(out, &tok->vocab.entries[e].value, 1);
  }
  if (!tok->chunk_words || size < TY_TOK_CHUNK_MIN)
    return ty_tok_bpe_chunk(tok, work, word, size, out);
  /* Without a splitting pre-tokenizer (SentencePiece-style files) a whole
   * segment is one word. A merge result is a vocabulary token, so no merge
   * can join characters a and b when no token contains "ab"; if both are
   * tokens of their own (no byte fallback, no unknown token pending), the
   * two sides are independent BPE problems with the same result. Cutting
   * there keeps the heap small and lets the cache see ordinary words. */
  size_t start = 0, n = 0;
  uint32_t prev = ty_tok_utf8_decode(word, size, &n);
  uint32_t rank, result;
  bool prev_known = ty_tok_pairmap_get(&tok->chars, prev, 0, &rank, &result);
  for (size_t i = n; i < size; i += n) {
    uint32_t cp = ty_tok_utf8_decode(word + i, size - i, &n);
    bool known = ty_tok_pairmap_get(&tok->chars, cp, 0, &rank, &result);
    if (prev_known && known && !ty_tok_pairmap_get(&tok->bigrams, prev, cp, &rank, &result)) {
      TY_RETURN_IF_ERROR(ty_tok_bpe_chunk(tok, work, word + start, i - start, out));
      start = i;
    }
    prev = cp;
    prev_known = known;
  }
  return ty_tok_bpe_chunk(tok, work, word + start, size - start, out);
}
