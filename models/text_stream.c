/* Incremental detokenization and stop strings (see text_stream.h). */
#include "models/text_stream.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
  char *data;
  size_t size, capacity;
} ty_bytes_t;

struct ty_text_stream_t {
  const ty_tokenizer_t *tokenizer;
  uint32_t flags;
  uint32_t *ids;
  size_t count, capacity;
  size_t prefix, read; /* the prefix-offset scheme's two marks */
  char **stops;
  size_t stop_count;
  ty_bytes_t pending; /* final as UTF-8, held back as a possible stop string */
  ty_bytes_t out;     /* what the last call returned */
  bool stopped;
  size_t offset;
};

static ty_status_t ty_ts_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory streaming text");
}

static ty_status_t ty_bytes_append(ty_bytes_t *b, const char *data, size_t size) {
  if (b->size + size + 1 > b->capacity) {
    size_t cap = b->capacity ? b->capacity : 64;
    while (cap < b->size + size + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return ty_ts_oom();
    b->data = p;
    b->capacity = cap;
  }
  if (size) memcpy(b->data + b->size, data, size);
  b->size += size;
  b->data[b->size] = '\0';
  return TY_OK;
}

/* The length of the valid sequence starting at s[0] (n bytes available),
 * or the negated length of its maximal valid-looking prefix: -k means the k
 * bytes s[0..k) start a character but it is cut off (k == n) or broken. */
static int ty_utf8_sequence(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing past U+10FFFF */
  } else {
    return -1;
  }
  int j = 1;
  while (j <= need && (size_t)j < n) {
    unsigned char b = s[j];
    if (b < (j == 1 ? lo : 0x80) || b > (j == 1 ? hi : 0xBF)) break;
    ++j;
  }
  return j == need + 1 ? j : -j;
}

ty_status_t ty_utf8_sanitize(const char *bytes, size_t size, bool keep_incomplete_tail,
                             char **out_text, size_t *out_size, size_t *out_tail) {
  ty_bytes_t b = {0};
  const unsigned char *s = (const unsigned char *)bytes;
  size_t i = 0, tail = 0;
  ty_status_t st = ty_bytes_append(&b, "", 0);
  while (!st && i < size) {
    int len = ty_utf8_sequence(s + i, size - i);
    if (len > 0) {
      st = ty_bytes_append(&b, bytes + i, (size_t)len);
      i += (size_t)len;
    } else if (keep_incomplete_tail && i + (size_t)-len == size && s[i] >= 0xC2) {
      tail = size - i;
      break;
    } else {
      st = ty_bytes_append(&b, "\xEF\xBF\xBD", 3); /* U+FFFD */
      i += (size_t)-len;
    }
  }
  if (st) {
    free(b.data);
    return st;
  }
  *out_text = b.data;
  *out_size = b.size;
  if (out_tail) *out_tail = tail;
  return TY_OK;
}

ty_status_t ty_text_stream_create(const ty_tokenizer_t *tokenizer, uint32_t decode_flags,
                                  const char *const *stops, size_t stop_count,
                                  ty_text_stream_t **out_stream) {
  *out_stream = NULL;
  ty_text_stream_t *t = calloc(1, sizeof(*t));
  if (!t) return ty_ts_oom();
  t->tokenizer = tokenizer;
  t->flags = decode_flags;
  t->stops = stop_count ? calloc(stop_count, sizeof(char *)) : NULL;
  ty_status_t s = stop_count && !t->stops ? ty_ts_oom() : TY_OK;
  for (size_t i = 0; i < stop_count && !s; ++i) {
    if (!stops[i][0]) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "stop string %zu is empty", i);
    } else if (!(t->stops[i] = strdup(stops[i]))) {
      s = ty_ts_oom();
    }
    t->stop_count = i + 1;
  }
  if (!s) s = ty_bytes_append(&t->out, "", 0);
  if (s) {
    ty_text_stream_destroy(t);
    return s;
  }
  *out_stream = t;
  return TY_OK;
}

void ty_text_stream_destroy(ty_text_stream_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->stop_count; ++i) free(t->stops[i]);
  free(t->stops);
  free(t->ids);
  free(t->pending.data);
  free(t->out.data);
  free(t);
}

/* Moves final text from `pending` to `out`, cut at the first stop string,
 * holding back a tail that may still become one (unless `flush`). */
static ty_status_t ty_ts_release(ty_text_stream_t *t, bool flush) {
  size_t cut = t->pending.size, keep_from = t->pending.size;
  const char *p = t->pending.data ? t->pending.data : "";
  for (size_t i = 0; i < t->stop_count; ++i) {
    size_t n = strlen(t->stops[i]);
    for (size_t at = 0; at + n <= t->pending.size && at < cut; ++at) {
      if (memcmp(p + at, t->stops[i], n) == 0) {
        cut = at;
        break;
      }
    }
  }
  if (cut < t->pending.size) {
    t->stopped = true;
    keep_from = cut;
  } else if (!flush) {
    /* The longest tail that begins some stop string. */
    for (size_t at = 0; at < t->pending.size; ++at) {
      bool prefix = false;
      for (size_t i = 0; i < t->stop_count && !prefix; ++i) {
        size_t n = strlen(t->stops[i]), tail = t->pending.size - at;
        prefix = tail < n && memcmp(p + at, t->stops[i], tail) == 0;
      }
      if (prefix) {
        keep_from = at;
        break;
      }
    }
  }
  TY_RETURN_IF_ERROR(ty_bytes_append(&t->out, p, keep_from));
  t->offset += keep_from;
  size_t rest = t->stopped ? 0 : t->pending.size - keep_from;
  if (rest) memmove(t->pending.data, t->pending.data + keep_from, rest);
  t->pending.size = rest;
  return TY_OK;
}

/* Text of ids[from..to) through the tokenizer's decoder (raw bytes). */
static ty_status_t ty_ts_decode(const ty_text_stream_t *t, size_t from, size_t to, char **text,
                                size_t *size) {
  /* no ids yet (a request that ends before its first token): no pointer
   * arithmetic on NULL */
  const uint32_t *ids = t->ids ? t->ids + from : NULL;
  return ty_tokenizer_decode(t->tokenizer, ids, to - from, t->flags, text, size);
}

/* Decodes what came since `prefix`; with `final`, an unfinished character
 * is final too (as U+FFFD). */
static ty_status_t ty_ts_advance(ty_text_stream_t *t, bool final) {
  char *before = NULL, *after = NULL, *clean = NULL;
  size_t before_size = 0, after_size = 0, clean_size = 0, tail = 0;
  ty_status_t s = ty_ts_decode(t, t->prefix, t->read, &before, &before_size);
  if (!s) s = ty_ts_decode(t, t->prefix, t->count, &after, &after_size);
  /* A decoder may rewrite text it already gave when more ids follow:
   * byte fallback turns a run of byte tokens that is not UTF-8 into one
   * U+FFFD per token, valid bytes of the run included. What was streamed
   * stays; the new ids are then decoded on their own. */
  if (!s && (after_size < before_size || memcmp(after, before, before_size) != 0)) {
    free(after);
    after = NULL;
    before_size = 0;
    t->prefix = t->read;
    s = ty_ts_decode(t, t->prefix, t->count, &after, &after_size);
  }
  if (!s && after_size > before_size) {
    s = ty_utf8_sanitize(after + before_size, after_size - before_size, !final, &clean,
                         &clean_size, &tail);
    /* Wait for the rest of a character (TGI: "ends with U+FFFD"). */
    if (!s && tail == 0) {
      s = ty_bytes_append(&t->pending, clean, clean_size);
      t->prefix = t->read;
      t->read = t->count;
    }
  }
  free(before);
  free(after);
  free(clean);
  return s;
}

ty_status_t ty_text_stream_push(ty_text_stream_t *t, uint32_t id, const char **out_text,
                                size_t *out_size, bool *out_stopped) {
  t->out.size = 0;
  t->out.data[0] = '\0';
  *out_text = t->out.data;
  *out_size = 0;
  *out_stopped = t->stopped;
  if (t->stopped) return TY_OK;
  /* A model's vocabulary may be larger than its tokenizer's (padded
   * embeddings): ids without a token make no text, as Hugging Face's
   * decode skips them. */
  const char *token;
  size_t token_size;
  if (!ty_tokenizer_id_to_token(t->tokenizer, id, &token, &token_size)) return TY_OK;
  if (t->count == t->capacity) {
    size_t cap = t->capacity ? t->capacity * 2 : 64;
    uint32_t *ids = realloc(t->ids, cap * sizeof(uint32_t));
    if (!ids) return ty_ts_oom();
    t->ids = ids;
    t->capacity = cap;
  }
  t->ids[t->count++] = id;
  TY_RETURN_IF_ERROR(ty_ts_advance(t, false));
  TY_RETURN_IF_ERROR(ty_ts_release(t, false));
  *out_text = t->out.data;
  *out_size = t->out.size;
  *out_stopped = t->stopped;
  return TY_OK;
}

ty_status_t ty_text_stream_finish(ty_text_stream_t *t, const char **out_text, size_t *out_size) {
  t->out.size = 0;
  t->out.data[0] = '\0';
  *out_text = t->out.data;
  *out_size = 0;
  if (t->stopped) return TY_OK;
  TY_RETURN_IF_ERROR(ty_ts_advance(t, true));
  TY_RETURN_IF_ERROR(ty_ts_release(t, true));
  *out_text = t->out.data;
  *out_size = t->out.size;
  return TY_OK;
}

bool ty_text_stream_stopped(const ty_text_stream_t *t) { return t->stopped; }

size_t ty_text_stream_offset(const ty_text_stream_t *t) { return t->offset; }
