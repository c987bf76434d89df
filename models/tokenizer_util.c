/* Small building blocks of the tokenizer: growable arrays with checked
 * growth, strict UTF-8, a fast byte-string hash and the two open-addressing
 * maps (token -> id, id pair -> merge) that the BPE loop lives on. */
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_internal.h"

static ty_status_t ty_tok_grow(void **data, size_t *capacity, size_t needed, size_t element_size) {
  if (needed <= *capacity) return TY_OK;
  size_t capacity_new = *capacity ? *capacity : 16;
  while (capacity_new < needed) {
    if (capacity_new > SIZE_MAX / 2) {
      capacity_new = needed;
      break;
    }
    capacity_new *= 2;
  }
  if (capacity_new > SIZE_MAX / element_size) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "tokenizer: %zu elements of %zu bytes do not fit in memory", needed,
                          element_size);
  }
  void *grown = realloc(*data, capacity_new * element_size);
  if (!grown) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "tokenizer: out of memory growing a buffer to %zu bytes",
                          capacity_new * element_size);
  }
  *data = grown;
  *capacity = capacity_new;
  return TY_OK;
}

ty_status_t ty_tok_buf_reserve(ty_tok_buf_t *buf, size_t extra) {
  if (extra > SIZE_MAX - buf->size - 1) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: buffer size overflows");
  }
  /* One spare byte so that a buffer can always be NUL-terminated. */
  return ty_tok_grow((void **)&buf->data, &buf->capacity, buf->size + extra + 1, 1);
}

ty_status_t ty_tok_buf_append(ty_tok_buf_t *buf, const void *data, size_t size) {
  TY_RETURN_IF_ERROR(ty_tok_buf_reserve(buf, size));
  if (size) memcpy(buf->data + buf->size, data, size);
  buf->size += size;
  return TY_OK;
}

void ty_tok_buf_free(ty_tok_buf_t *buf) {
  free(buf->data);
  memset(buf, 0, sizeof(*buf));
}

ty_status_t ty_tok_ids_append(ty_tok_ids_t *ids, const uint32_t *data, size_t count) {
  if (count > SIZE_MAX - ids->count) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: id count overflows");
  }
  TY_RETURN_IF_ERROR(
      ty_tok_grow((void **)&ids->data, &ids->capacity, ids->count + count, sizeof(uint32_t)));
  if (count) memcpy(ids->data + ids->count, data, count * sizeof(uint32_t));
  ids->count += count;
  return TY_OK;
}

void ty_tok_ids_free(ty_tok_ids_t *ids) {
  free(ids->data);
  memset(ids, 0, sizeof(*ids));
}

ty_status_t ty_tok_pieces_push(ty_tok_pieces_t *pieces, size_t offset, size_t size, bool at_origin,
                               uint32_t added) {
  TY_RETURN_IF_ERROR(ty_tok_grow((void **)&pieces->data, &pieces->capacity, pieces->count + 1,
                                 sizeof(ty_tok_piece_t)));
  pieces->data[pieces->count++] =
      (ty_tok_piece_t){.offset = offset, .size = size, .at_origin = at_origin, .added = added};
  return TY_OK;
}

void ty_tok_pieces_free(ty_tok_pieces_t *pieces) {
  free(pieces->data);
  memset(pieces, 0, sizeof(*pieces));
}

/* ---- UTF-8 ---- */

size_t ty_tok_utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

bool ty_tok_utf8_valid(const char *text, size_t size, size_t *out_bad) {
  const unsigned char *s = (const unsigned char *)text;
  size_t i = 0;
  while (i < size) {
    unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t min, cp;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2, min = 0x80, cp = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3, min = 0x800, cp = c & 0x0Fu;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4, min = 0x10000, cp = c & 0x07u;
    } else {
      *out_bad = i;
      return false;
    }
    if (size - i < n) {
      *out_bad = i;
      return false;
    }
    for (size_t k = 1; k < n; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        *out_bad = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      *out_bad = i;
      return false;
    }
    i += n;
  }
  return true;
}

uint32_t ty_tok_utf8_decode(const char *text, size_t size, size_t *out_len) {
  const unsigned char *s = (const unsigned char *)text;
  size_t n = ty_tok_utf8_len(s[0]);
  if (n > size) n = 1;
  *out_len = n;
  switch (n) {
    case 1: return s[0];
    case 2: return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    case 3: return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    default:
      return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) |
             (s[3] & 0x3Fu);
  }
}

size_t ty_tok_utf8_encode(uint32_t cp, char *out) {
  unsigned char *o = (unsigned char *)out;
  if (cp < 0x80) {
    o[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (unsigned char)(0xC0 | (cp >> 6));
    o[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (unsigned char)(0xE0 | (cp >> 12));
    o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (unsigned char)(0xF0 | (cp >> 18));
  o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* ---- hashing ---- */

static inline uint64_t ty_tok_mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

uint64_t ty_tok_hash(const void *data, size_t size) {
  const unsigned char *p = data;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (size * 0xff51afd7ed558ccdull);
  while (size >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    h = ty_tok_mix(h ^ v) * 0x9e3779b97f4a7c15ull;
    p += 8;
    size -= 8;
  }
  uint64_t tail = 0;
  for (size_t i = 0; i < size; ++i) tail |= (uint64_t)p[i] << (8 * i);
  return ty_tok_mix(h ^ tail ^ 0x2545f4914f6cdd1dull);
}

/* ---- string map ---- */

static ty_status_t ty_tok_strmap_rehash(ty_tok_strmap_t *map, size_t slot_count) {
  uint32_t *slots = malloc(slot_count * sizeof(uint32_t));
  if (!slots) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "tokenizer: out of memory for a map of %zu slots", slot_count);
  }
  memset(slots, 0xFF, slot_count * sizeof(uint32_t));
  size_t mask = slot_count - 1;
  for (size_t e = 0; e < map->count; ++e) {
    const ty_tok_strmap_entry_t *entry = &map->entries[e];
    size_t slot = ty_tok_hash(map->keys.data + entry->offset, entry->size) & mask;
    while (slots[slot] != TY_TOK_NONE) slot = (slot + 1) & mask;
    slots[slot] = (uint32_t)e;
  }
  free(map->slots);
  map->slots = slots;
  map->slot_count = slot_count;
  return TY_OK;
}

uint32_t ty_tok_strmap_find(const ty_tok_strmap_t *map, const char *key, size_t size) {
  if (!map->slot_count) return TY_TOK_NONE;
  size_t mask = map->slot_count - 1;
  size_t slot = ty_tok_hash(key, size) & mask;
  for (;;) {
    uint32_t e = map->slots[slot];
    if (e == TY_TOK_NONE) return TY_TOK_NONE;
    const ty_tok_strmap_entry_t *entry = &map->entries[e];
    if (entry->size == size && memcmp(map->keys.data + entry->offset, key, size) == 0) {
      return e;
    }
    slot = (slot + 1) & mask;
  }
}

ty_status_t ty_tok_strmap_put(ty_tok_strmap_t *map, const char *key, size_t size, uint32_t value,
                              uint32_t *out_index) {
  if (size > UINT32_MAX || map->count >= UINT32_MAX - 1) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: map key or map too large");
  }
  uint32_t found = ty_tok_strmap_find(map, key, size);
  if (found != TY_TOK_NONE) {
    map->entries[found].value = value;
    if (out_index) *out_index = found;
    return TY_OK;
  }
  /* Keep the load factor at or below one half. */
  if ((map->count + 1) * 2 > map->slot_count) {
    TY_RETURN_IF_ERROR(ty_tok_strmap_rehash(map, map->slot_count ? map->slot_count * 2 : 64));
  }
  TY_RETURN_IF_ERROR(ty_tok_grow((void **)&map->entries, &map->entry_capacity, map->count + 1,
                                 sizeof(ty_tok_strmap_entry_t)));
  size_t offset = map->keys.size;
  TY_RETURN_IF_ERROR(ty_tok_buf_append(&map->keys, key, size));
  map->keys.data[map->keys.size] = '\0';
  uint32_t e = (uint32_t)map->count++;
  map->entries[e] =
      (ty_tok_strmap_entry_t){.offset = offset, .size = (uint32_t)size, .value = value};
  size_t mask = map->slot_count - 1;
  size_t slot = ty_tok_hash(key, size) & mask;
  while (map->slots[slot] != TY_TOK_NONE) slot = (slot + 1) & mask;
  map->slots[slot] = e;
  if (out_index) *out_index = e;
  return TY_OK;
}

void ty_tok_strmap_free(ty_tok_strmap_t *map) {
  ty_tok_buf_free(&map->keys);
  free(map->entries);
  free(map->slots);
  memset(map, 0, sizeof(*map));
}

/* ---- pair map ---- */

static inline size_t ty_tok_pair_slot(uint64_t key, size_t mask) {
  return (size_t)(ty_tok_mix(key * 0x9e3779b97f4a7c15ull) & mask);
}

static ty_status_t ty_tok_pairmap_rehash(ty_tok_pairmap_t *map, size_t slot_count) {
  uint64_t *keys = malloc(slot_count * sizeof(uint64_t));
  uint32_t *ranks = malloc(slot_count * sizeof(uint32_t));
  uint32_t *results = malloc(slot_count * sizeof(uint32_t));
  if (!keys || !ranks || !results) {
    free(keys);
    free(ranks);
    free(results);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "tokenizer: out of memory for a merge map of %zu slots", slot_count);
  }
  memset(keys, 0xFF, slot_count * sizeof(uint64_t));
  size_t mask = slot_count - 1;
  for (size_t i = 0; i < map->slot_count; ++i) {
    if (map->keys[i] == UINT64_MAX) continue;
    size_t slot = ty_tok_pair_slot(map->keys[i], mask);
    while (keys[slot] != UINT64_MAX) slot = (slot + 1) & mask;
    keys[slot] = map->keys[i];
    ranks[slot] = map->ranks[i];
    results[slot] = map->results[i];
  }
  free(map->keys);
  free(map->ranks);
  free(map->results);
  map->keys = keys;
  map->ranks = ranks;
  map->results = results;
  map->slot_count = slot_count;
  return TY_OK;
}

ty_status_t ty_tok_pairmap_put(ty_tok_pairmap_t *map, uint32_t left, uint32_t right, uint32_t rank,
                               uint32_t result) {
  if ((map->count + 1) * 2 > map->slot_count) {
    TY_RETURN_IF_ERROR(ty_tok_pairmap_rehash(map, map->slot_count ? map->slot_count * 2 : 64));
  }
  uint64_t key = ((uint64_t)left << 32) | right;
  size_t mask = map->slot_count - 1;
  size_t slot = ty_tok_pair_slot(key, mask);
  while (map->keys[slot] != UINT64_MAX && map->keys[slot] != key) slot = (slot + 1) & mask;
  if (map->keys[slot] == UINT64_MAX) {
    map->keys[slot] = key;
    map->count++;
  }
  /* A repeated pair takes the later rank, as a hash map insert does in HF. */
  map->ranks[slot] = rank;
  map->results[slot] = result;
  return TY_OK;
}

bool ty_tok_pairmap_get(const ty_tok_pairmap_t *map, uint32_t left, uint32_t right,
                        uint32_t *out_rank, uint32_t *out_result) {
  if (!map->slot_count) return false;
  uint64_t key = ((uint64_t)left << 32) | right;
  size_t mask = map->slot_count - 1;
  size_t slot = ty_tok_pair_slot(key, mask);
  for (;;) {
    uint64_t k = map->keys[slot];
    if (k == key) {
      *out_rank = map->ranks[slot];
      *out_result = map->results[slot];
      return true;
    }
    if (k == UINT64_MAX) return false;
    slot = (slot + 1) & mask;
  }
}

void ty_tok_pairmap_free(ty_tok_pairmap_t *map) {
  free(map->keys);
  free(map->ranks);
  free(map->results);
  memset(map, 0, sizeof(*map));
}
