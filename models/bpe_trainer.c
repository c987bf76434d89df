/* Byte-level BPE training (bpe_trainer.h). Words come from the same
 * pre-tokenizer code that encoding uses, through a skeleton tokenizer.json
 * loaded at create, so training and encoding always split text alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_internal.h"
#include "models/bpe_trainer.h"

typedef struct ty_bt_pair_t {
  int64_t count;
  uint32_t left, right;
  uint32_t *where; /* words that contain (or once contained) the pair */
  uint32_t where_count, where_capacity;
} ty_bt_pair_t;

typedef struct ty_bt_heap_entry_t {
  int64_t count;
  uint32_t pair;
} ty_bt_heap_entry_t;

struct ty_tokenizer_trainer_t {
  uint32_t vocab_size, min_frequency;
  char **specials;
  size_t special_count;
  ty_tokenizer_t *pre; /* pre-tokenizer only */
  /* GPT-2's bytes_to_unicode: each byte's UTF-8 text, and back */
  char byte_char[256][2];
  uint8_t byte_char_size[256];
  int16_t char_byte[324];
  /* counting */
  ty_tok_strmap_t words; /* mapped word text -> word index */
  uint64_t *freq;
  size_t freq_capacity;
  ty_tok_buf_t scratch;
  ty_tok_pieces_t pieces;
  uint64_t bytes, word_total;
  bool trained;
  /* the result: token texts in raw bytes, and the merges */
  ty_tok_buf_t token_text;
  uint32_t *token_offset, *token_size;
  uint32_t token_count, token_capacity;
  uint32_t *merge_left, *merge_right;
  uint32_t merge_count, merge_capacity;
};

static ty_status_t ty_bt_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer trainer: out of memory");
}

static ty_status_t ty_bt_grow(void **data, size_t *capacity, size_t needed, size_t elem) {
  if (needed <= *capacity) return TY_OK;
  size_t cap = *capacity ? *capacity : 16;
  while (cap < needed) cap *= 2;
  void *grown = realloc(*data, cap * elem);
  if (!grown) return ty_bt_oom();
  *data = grown;
  *capacity = cap;
  return TY_OK;
}

/* GPT-2's table: printable Latin-1 bytes stand for themselves, the rest
 * map to U+0100 and up in byte order. */
static void ty_bt_byte_table(ty_tokenizer_trainer_t *t) {
  memset(t->char_byte, 0xFF, sizeof(t->char_byte));
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    uint32_t cp = printable ? b : next++;
    char utf8[4];
    size_t n = ty_tok_utf8_encode(cp, utf8);
    memcpy(t->byte_char[b], utf8, n);
    t->byte_char_size[b] = (uint8_t)n;
    t->char_byte[cp] = (int16_t)b;
  }
}

static char *ty_bt_byte_string(const ty_tokenizer_trainer_t *t, uint32_t b) {
  char *s = malloc(3);
  if (s) {
    memcpy(s, t->byte_char[b], t->byte_char_size[b]);
    s[t->byte_char_size[b]] = '\0';
  }
  return s;
}

/* The ByteLevel pre-tokenizer and decoder with the 256 byte tokens. */
static ty_status_t ty_bt_load_skeleton(ty_tokenizer_trainer_t *t) {
  json_t *vocab = json_object();
  for (uint32_t b = 0; vocab && b < 256; ++b) {
    char *s = ty_bt_byte_string(t, b);
    if (!s || json_object_set_new(vocab, s, json_integer(b)) != 0) {
      free(s);
      json_decref(vocab);
      return ty_bt_oom();
    }
    free(s);
  }
  json_t *root = json_pack(
      "{s:s, s:[], s:n, s:{s:s, s:b, s:b, s:b}, s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:o, "
      "s:[]}}",
      "version", "1.0", "added_tokens", "normalizer", "pre_tokenizer", "type", "ByteLevel",
      "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 1, "post_processor", "decoder", "type",
      "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE",
      "vocab", vocab, "merges");
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!text) return ty_bt_oom();
  ty_status_t status =
      ty_tokenizer_load_json(text, strlen(text), "tokenizer trainer skeleton", &t->pre);
  free(text);
  return status;
}

void ty_tokenizer_trainer_destroy(ty_tokenizer_trainer_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->special_count; ++i) free(t->specials[i]);
  free(t->specials);
  ty_tokenizer_destroy(t->pre);
  ty_tok_strmap_free(&t->words);
  free(t->freq);
  ty_tok_buf_free(&t->scratch);
  ty_tok_pieces_free(&t->pieces);
  ty_tok_buf_free(&t->token_text);
  free(t->token_offset);
  free(t->token_size);
  free(t->merge_left);
  free(t->merge_right);
  free(t);
}

ty_status_t ty_tokenizer_trainer_create(const ty_tokenizer_trainer_options_t *o,
                                        ty_tokenizer_trainer_t **out_trainer) {
  if (!o) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "tokenizer trainer: no options");
  if (o->special_count > 1024 || o->vocab_size < 256 + o->special_count) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tokenizer trainer: vocab_size %u is below the 256 byte tokens and %zu "
                          "special tokens",
                          o->vocab_size, o->special_count);
  }
  for (size_t i = 0; i < o->special_count; ++i) {
    const char *s = o->special_tokens[i];
    size_t bad = 0;
    if (!s || !*s || !ty_tok_utf8_valid(s, strlen(s), &bad)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "tokenizer trainer: special token %zu is empty or not UTF-8", i);
    }
    for (size_t k = 0; k < i; ++k) {
      if (strcmp(o->special_tokens[k], s) == 0) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "tokenizer trainer: special token \"%s\" is given twice", s);
      }
    }
  }
  ty_tokenizer_trainer_t *t = calloc(1, sizeof(*t));
  if (!t) return ty_bt_oom();
  t->vocab_size = o->vocab_size;
  t->min_frequency = o->min_frequency ? o->min_frequency : 2;
  t->specials = o->special_count ? calloc(o->special_count, sizeof(char *)) : NULL;
  ty_status_t status = (o->special_count && !t->specials) ? ty_bt_oom() : TY_OK;
  for (size_t i = 0; !status && i < o->special_count; ++i) {
    t->specials[i] = strdup(o->special_tokens[i]);
    t->special_count = i + 1;
    if (!t->specials[i]) status = ty_bt_oom();
  }
  ty_bt_byte_table(t);
  if (!status) status = ty_bt_load_skeleton(t);
  if (status) {
    ty_tokenizer_trainer_destroy(t);
    return status;
  }
  *out_trainer = t;
  return TY_OK;
}

ty_status_t ty_tokenizer_trainer_add_text(ty_tokenizer_trainer_t *t, const char *text,
                                          size_t size) {
  if (t->trained) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "tokenizer trainer: already trained");
  }
  size_t bad = 0;
  if (!ty_tok_utf8_valid(text, size, &bad)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "the text is not valid UTF-8 (byte %zu of %zu)", bad, size);
  }
  t->scratch.size = 0;
  t->pieces.count = 0;
  TY_RETURN_IF_ERROR(ty_tok_pre_tokenize(t->pre, text, size, &t->scratch, &t->pieces));
  for (size_t i = 0; i < t->pieces.count; ++i) {
    const ty_tok_piece_t *p = &t->pieces.data[i];
    const char *word = t->scratch.data + p->offset;
    uint32_t entry = ty_tok_strmap_find(&t->words, word, p->size);
    uint32_t index;
    if (entry == TY_TOK_NONE) {
      index = (uint32_t)t->words.count;
      TY_RETURN_IF_ERROR(ty_bt_grow((void **)&t->freq, &t->freq_capacity, (size_t)index + 1,
                                    sizeof(uint64_t)));
      TY_RETURN_IF_ERROR(ty_tok_strmap_put(&t->words, word, p->size, index, NULL));
      t->freq[index] = 0;
    } else {
      index = t->words.entries[entry].value;
    }
    t->freq[index]++;
  }
  t->word_total += t->pieces.count;
  t->bytes += size;
  return TY_OK;
}

/* ---- training state ---- */

typedef struct ty_bt_state_t {
  uint32_t *symbols; /* every word's symbols, word w at offset[w] */
  size_t *offset;
  uint32_t *length;
  uint32_t *stamp; /* the last merge that visited the word */
  size_t word_count;
  ty_bt_pair_t *pairs;
  size_t pair_count, pair_capacity;
  uint64_t *keys; /* pair hash: (left << 32 | right), UINT64_MAX empty */
  uint32_t *slots;
  size_t slot_count;
  ty_bt_heap_entry_t *heap;
  size_t heap_count, heap_capacity;
  uint32_t *touched;
  size_t touched_count, touched_capacity;
  ty_tok_strmap_t token_ids; /* raw token text -> id */
} ty_bt_state_t;

static void ty_bt_state_free(ty_bt_state_t *s) {
  free(s->symbols);
  free(s->offset);
  free(s->length);
  free(s->stamp);
  for (size_t i = 0; i < s->pair_count; ++i) free(s->pairs[i].where);
  free(s->pairs);
  free(s->keys);
  free(s->slots);
  free(s->heap);
  free(s->touched);
  ty_tok_strmap_free(&s->token_ids);
}

static size_t ty_bt_slot(uint64_t key, size_t mask) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdull;
  key ^= key >> 33;
  return (size_t)key & mask;
}

static ty_status_t ty_bt_rehash(ty_bt_state_t *s, size_t slot_count) {
  uint64_t *keys = malloc(slot_count * sizeof(uint64_t));
  uint32_t *slots = malloc(slot_count * sizeof(uint32_t));
  if (!keys || !slots) {
    free(keys);
    free(slots);
    return ty_bt_oom();
  }
  memset(keys, 0xFF, slot_count * sizeof(uint64_t));
  size_t mask = slot_count - 1;
  for (size_t i = 0; i < s->pair_count; ++i) {
    uint64_t key = ((uint64_t)s->pairs[i].left << 32) | s->pairs[i].right;
    size_t slot = ty_bt_slot(key, mask);
    while (keys[slot] != UINT64_MAX) slot = (slot + 1) & mask;
    keys[slot] = key;
    slots[slot] = (uint32_t)i;
  }
  free(s->keys);
  free(s->slots);
  s->keys = keys;
  s->slots = slots;
  s->slot_count = slot_count;
  return TY_OK;
}

/* The pair's index, created with count 0 when it is new. */
static ty_status_t ty_bt_pair(ty_bt_state_t *s, uint32_t left, uint32_t right,
                              uint32_t *out_index) {
  uint64_t key = ((uint64_t)left << 32) | right;
  if (s->slot_count) {
    size_t mask = s->slot_count - 1;
    for (size_t slot = ty_bt_slot(key, mask);; slot = (slot + 1) & mask) {
      if (s->keys[slot] == key) {
        *out_index = s->slots[slot];
        return TY_OK;
      }
      if (s->keys[slot] == UINT64_MAX) break;
    }
  }
  if ((s->pair_count + 1) * 2 > s->slot_count) {
    TY_RETURN_IF_ERROR(ty_bt_rehash(s, s->slot_count ? s->slot_count * 2 : 1024));
  }
  TY_RETURN_IF_ERROR(ty_bt_grow((void **)&s->pairs, &s->pair_capacity, s->pair_count + 1,
                                sizeof(ty_bt_pair_t)));
  uint32_t index = (uint32_t)s->pair_count++;
  s->pairs[index] = (ty_bt_pair_t){.left = left, .right = right};
  size_t mask = s->slot_count - 1, slot = ty_bt_slot(key, mask);
  while (s->keys[slot] != UINT64_MAX) slot = (slot + 1) & mask;
  s->keys[slot] = key;
  s->slots[slot] = index;
  *out_index = index;
  return TY_OK;
}

static ty_status_t ty_bt_where_add(ty_bt_pair_t *p, uint32_t word) {
  if (p->where_count && p->where[p->where_count - 1] == word) return TY_OK;
  if (p->where_count == p->where_capacity) {
    uint32_t capacity = p->where_capacity ? p->where_capacity * 2 : 4;
    uint32_t *grown = realloc(p->where, capacity * sizeof(uint32_t));
    if (!grown) return ty_bt_oom();
    p->where = grown;
    p->where_capacity = capacity;
  }
  p->where[p->where_count++] = word;
  return TY_OK;
}

/* Max-heap order: the larger count, then the smaller (left, right). */
static bool ty_bt_before(const ty_bt_state_t *s, const ty_bt_heap_entry_t *a,
                         const ty_bt_heap_entry_t *b) {
  if (a->count != b->count) return a->count > b->count;
  const ty_bt_pair_t *pa = &s->pairs[a->pair], *pb = &s->pairs[b->pair];
  if (pa->left != pb->left) return pa->left < pb->left;
  return pa->right < pb->right;
}

static ty_status_t ty_bt_heap_push(ty_bt_state_t *s, uint32_t pair) {
  TY_RETURN_IF_ERROR(ty_bt_grow((void **)&s->heap, &s->heap_capacity, s->heap_count + 1,
                                sizeof(ty_bt_heap_entry_t)));
  size_t i = s->heap_count++;
  ty_bt_heap_entry_t e = {s->pairs[pair].count, pair};
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!ty_bt_before(s, &e, &s->heap[parent])) break;
    s->heap[i] = s->heap[parent];
    i = parent;
  }
  s->heap[i] = e;
  return TY_OK;
}

static ty_bt_heap_entry_t ty_bt_heap_pop(ty_bt_state_t *s) {
  ty_bt_heap_entry_t top = s->heap[0];
  ty_bt_heap_entry_t last = s->heap[--s->heap_count];
  size_t i = 0, n = s->heap_count;
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && ty_bt_before(s, &s->heap[child + 1], &s->heap[child])) ++child;
    if (!ty_bt_before(s, &s->heap[child], &last)) break;
    s->heap[i] = s->heap[child];
    i = child;
  }
  if (n) s->heap[i] = last;
  return top;
}

/* Adds (sign +1) or removes (-1) the pairs of word w; on adding, words
 * with a pair that holds `fresh` are listed under it and the pair noted. */
static ty_status_t ty_bt_count_word(ty_bt_state_t *s, uint32_t w, int64_t amount,
                                    uint32_t fresh) {
  const uint32_t *sym = s->symbols + s->offset[w];
  for (uint32_t j = 0; j + 1 < s->length[w]; ++j) {
    uint32_t index;
    TY_RETURN_IF_ERROR(ty_bt_pair(s, sym[j], sym[j + 1], &index));
    ty_bt_pair_t *p = &s->pairs[index];
    p->count += amount;
    if (amount > 0 && (sym[j] == fresh || sym[j + 1] == fresh || fresh == UINT32_MAX)) {
      TY_RETURN_IF_ERROR(ty_bt_where_add(p, w));
      if (fresh != UINT32_MAX) {
        TY_RETURN_IF_ERROR(ty_bt_grow((void **)&s->touched, &s->touched_capacity,
                                      s->touched_count + 1, sizeof(uint32_t)));
        s->touched[s->touched_count++] = index;
      }
    }
  }
  return TY_OK;
}

static ty_status_t ty_bt_add_token(ty_tokenizer_trainer_t *t, ty_bt_state_t *s, const char *text,
                                   size_t size, uint32_t *out_id) {
  uint32_t entry = ty_tok_strmap_find(&s->token_ids, text, size);
  if (entry != TY_TOK_NONE) {
    *out_id = s->token_ids.entries[entry].value;
    return TY_OK;
  }
  size_t capacity = t->token_capacity;
  TY_RETURN_IF_ERROR(ty_bt_grow((void **)&t->token_offset, &capacity, t->token_count + 1u,
                                sizeof(uint32_t)));
  capacity = t->token_capacity;
  TY_RETURN_IF_ERROR(ty_bt_grow((void **)&t->token_size, &capacity, t->token_count + 1u,
                                sizeof(uint32_t)));
  t->token_capacity = (uint32_t)capacity;
  uint32_t id = t->token_count;
  t->token_offset[id] = (uint32_t)t->token_text.size;
  t->token_size[id] = (uint32_t)size;
  TY_RETURN_IF_ERROR(ty_tok_buf_append(&t->token_text, text, size));
  TY_RETURN_IF_ERROR(ty_tok_strmap_put(&s->token_ids, text, size, id, NULL));
  t->token_count++;
  *out_id = id;
  return TY_OK;
}

/* Words as byte sequences, pair counts and the heap. */
static ty_status_t ty_bt_setup(ty_tokenizer_trainer_t *t, ty_bt_state_t *s) {
  for (uint32_t b = 0; b < 256; ++b) {
    char byte = (char)b;
    uint32_t id;
    TY_RETURN_IF_ERROR(ty_bt_add_token(t, s, &byte, 1, &id));
  }
  s->word_count = t->words.count;
  size_t total = 0;
  for (size_t w = 0; w < s->word_count; ++w) total += t->words.entries[w].size;
  s->symbols = malloc((total ? total : 1) * sizeof(uint32_t));
  s->offset = malloc((s->word_count ? s->word_count : 1) * sizeof(size_t));
  s->length = malloc((s->word_count ? s->word_count : 1) * sizeof(uint32_t));
  s->stamp = calloc(s->word_count ? s->word_count : 1, sizeof(uint32_t));
  if (!s->symbols || !s->offset || !s->length || !s->stamp) return ty_bt_oom();
  size_t at = 0;
  for (size_t e = 0; e < s->word_count; ++e) {
    const ty_tok_strmap_entry_t *entry = &t->words.entries[e];
    uint32_t w = entry->value;
    const char *text = ty_tok_strmap_key(&t->words, (uint32_t)e);
    s->offset[w] = at;
    uint32_t n = 0;
    for (size_t i = 0; i < entry->size;) {
      size_t len = 0;
      uint32_t cp = ty_tok_utf8_decode(text + i, entry->size - i, &len);
      if (cp >= 324 || t->char_byte[cp] < 0) {
        return ty_status_make(TY_CODE_INTERNAL,
                              "tokenizer trainer: pre-tokenized text holds U+%04X, which is not "
                              "a byte-level character",
                              cp);
      }
      s->symbols[at + n++] = (uint32_t)t->char_byte[cp];
      i += len ? len : 1;
    }
    s->length[w] = n;
    at += n;
  }
  for (uint32_t w = 0; w < s->word_count; ++w) {
    TY_RETURN_IF_ERROR(ty_bt_count_word(s, w, (int64_t)t->freq[w], UINT32_MAX));
  }
  for (uint32_t p = 0; p < s->pair_count; ++p) TY_RETURN_IF_ERROR(ty_bt_heap_push(s, p));
  return TY_OK;
}

/* Merges (left, right) into `id` in every word that has it. */
static ty_status_t ty_bt_apply(ty_bt_state_t *s, uint32_t pair_index, uint32_t id,
                               uint32_t merge_number, const uint64_t *freq) {
  ty_bt_pair_t *pair = &s->pairs[pair_index];
  uint32_t left = pair->left, right = pair->right;
  uint32_t *where = pair->where;
  uint32_t where_count = pair->where_count;
  pair->where = NULL;
  pair->where_count = pair->where_capacity = 0;
  s->touched_count = 0;
  ty_status_t status = TY_OK;
  for (uint32_t k = 0; k < where_count && !status; ++k) {
    uint32_t w = where[k];
    if (s->stamp[w] == merge_number) continue;
    s->stamp[w] = merge_number;
    uint32_t *sym = s->symbols + s->offset[w];
    uint32_t n = s->length[w];
    bool found = false;
    for (uint32_t j = 0; j + 1 < n && !found; ++j) found = sym[j] == left && sym[j + 1] == right;
    if (!found) continue;
    status = ty_bt_count_word(s, w, -(int64_t)freq[w], UINT32_MAX);
    uint32_t out = 0;
    for (uint32_t j = 0; j < n; ++j) {
      if (j + 1 < n && sym[j] == left && sym[j + 1] == right) {
        sym[out++] = id;
        ++j;
      } else {
        sym[out++] = sym[j];
      }
    }
    s->length[w] = out;
    if (!status) status = ty_bt_count_word(s, w, (int64_t)freq[w], id);
  }
  free(where);
  /* Only pairs that hold the new token can have grown. */
  for (size_t i = 0; i < s->touched_count && !status; ++i) {
    uint32_t p = s->touched[i];
    if (s->pairs[p].count > 0 && (i == 0 || s->touched[i - 1] != p)) {
      status = ty_bt_heap_push(s, p);
    }
  }
  return status;
}

ty_status_t ty_tokenizer_trainer_train(ty_tokenizer_trainer_t *t,
                                       ty_tokenizer_trainer_progress_fn progress, void *user) {
  if (t->trained) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "tokenizer trainer: already trained");
  }
  t->trained = true;
  ty_bt_state_t s;
  memset(&s, 0, sizeof(s));
  ty_status_t status = ty_bt_setup(t, &s);
  uint32_t target_tokens = t->vocab_size - (uint32_t)t->special_count;
  uint32_t target_merges = target_tokens - 256;
  char *text = NULL;
  size_t text_capacity = 0;
  while (!status && t->token_count < target_tokens && s.heap_count > 0) {
    ty_bt_heap_entry_t top = ty_bt_heap_pop(&s);
    ty_bt_pair_t *pair = &s.pairs[top.pair];
    if (top.count != pair->count) {
      /* Stale: the count fell since this entry was pushed. */
      if (pair->count > 0) status = ty_bt_heap_push(&s, top.pair);
      continue;
    }
    if (pair->count < (int64_t)t->min_frequency) break;
    uint32_t left = pair->left, right = pair->right;
    size_t a = t->token_size[left], b = t->token_size[right];
    status = ty_bt_grow((void **)&text, &text_capacity, a + b, 1);
    if (status) break;
    memcpy(text, t->token_text.data + t->token_offset[left], a);
    memcpy(text + a, t->token_text.data + t->token_offset[right], b);
    uint32_t id = 0;
    status = ty_bt_add_token(t, &s, text, a + b, &id);
    size_t capacity = t->merge_capacity;
    if (!status) {
      status = ty_bt_grow((void **)&t->merge_left, &capacity, t->merge_count + 1u,
                          sizeof(uint32_t));
    }
    capacity = t->merge_capacity;
    if (!status) {
      status = ty_bt_grow((void **)&t->merge_right, &capacity, t->merge_count + 1u,
                          sizeof(uint32_t));
    }
    if (status) break;
    t->merge_capacity = (uint32_t)capacity;
    t->merge_left[t->merge_count] = left;
    t->merge_right[t->merge_count] = right;
    t->merge_count++;
    status = ty_bt_apply(&s, top.pair, id, t->merge_count, t->freq);
    if (progress && (t->merge_count % 64) == 0) progress(user, t->merge_count, target_merges);
  }
  if (!status && progress) progress(user, t->merge_count, target_merges);
  free(text);
  ty_bt_state_free(&s);
  return status;
}

void ty_tokenizer_trainer_stats(const ty_tokenizer_trainer_t *t,
                                ty_tokenizer_trainer_stats_t *out) {
  memset(out, 0, sizeof(*out));
  out->bytes = t->bytes;
  out->words = t->word_total;
  out->distinct_words = t->words.count;
  out->merges = t->merge_count;
  out->vocab_size = (t->trained ? t->token_count : 256) + (uint32_t)t->special_count;
}

/* A token's text in the byte-level alphabet, NUL-terminated. */
static ty_status_t ty_bt_mapped(const ty_tokenizer_trainer_t *t, uint32_t id, ty_tok_buf_t *out) {
  out->size = 0;
  const unsigned char *raw = (const unsigned char *)t->token_text.data + t->token_offset[id];
  for (uint32_t i = 0; i < t->token_size[id]; ++i) {
    TY_RETURN_IF_ERROR(ty_tok_buf_append(out, t->byte_char[raw[i]], t->byte_char_size[raw[i]]));
  }
  TY_RETURN_IF_ERROR(ty_tok_buf_append(out, "", 1));
  return TY_OK;
}

ty_status_t ty_tokenizer_trainer_to_json(const ty_tokenizer_trainer_t *t, char **out_json,
                                         size_t *out_size) {
  if (!t->trained) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "tokenizer trainer: not trained yet");
  }
  json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
  ty_tok_buf_t a = {0}, b = {0};
  ty_status_t status = vocab && merges && added ? TY_OK : ty_bt_oom();
  for (uint32_t id = 0; !status && id < t->token_count; ++id) {
    status = ty_bt_mapped(t, id, &a);
    if (!status && json_object_set_new(vocab, a.data, json_integer(id)) != 0) status = ty_bt_oom();
  }
  for (size_t i = 0; !status && i < t->special_count; ++i) {
    uint32_t id = t->token_count + (uint32_t)i;
    if (json_object_get(vocab, t->specials[i])) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "tokenizer trainer: special token \"%s\" was also learned as an "
                              "ordinary token; choose another spelling",
                              t->specials[i]);
      break;
    }
    json_t *entry = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)id,
                              "content", t->specials[i], "single_word", 0, "lstrip", 0, "rstrip",
                              0, "normalized", 0, "special", 1);
    if (!entry || json_array_append_new(added, entry) != 0 ||
        json_object_set_new(vocab, t->specials[i], json_integer(id)) != 0) {
      status = ty_bt_oom();
    }
  }
  for (uint32_t m = 0; !status && m < t->merge_count; ++m) {
    status = ty_bt_mapped(t, t->merge_left[m], &a);
    if (!status) status = ty_bt_mapped(t, t->merge_right[m], &b);
    if (!status && json_array_append_new(merges, json_pack("[s, s]", a.data, b.data)) != 0) {
      status = ty_bt_oom();
    }
  }
  ty_tok_buf_free(&a);
  ty_tok_buf_free(&b);
  json_t *root = NULL;
  if (!status) {
    root = json_pack(
        "{s:s, s:n, s:n, s:O, s:n, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b}, "
        "s:{s:s, s:b, s:b, s:b}, s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer",
        "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
        "use_regex", 1, "post_processor", "type", "ByteLevel", "add_prefix_space", 1,
        "trim_offsets", 0, "use_regex", 1, "decoder", "type", "ByteLevel", "add_prefix_space", 1,
        "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout", "unk_token",
        "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
        "ignore_merges", 0, "vocab", vocab, "merges", merges);
    if (!root) status = ty_bt_oom();
  }
  json_decref(vocab);
  json_decref(merges);
  json_decref(added);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!status && !text) status = ty_bt_oom();
  if (status) {
    free(text);
    return status;
  }
  *out_json = text;
  *out_size = strlen(text);
  return TY_OK;
}
