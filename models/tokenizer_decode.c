/* Decoding: ids -> token texts -> the decoder chain (each step maps a list
 * of strings to a list of strings, as in HF) -> the concatenation. The one
 * deliberate difference from HF: the ByteLevel decoder returns the bytes as
 * they are, where HF replaces invalid UTF-8 with U+FFFD. */
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_internal.h"

typedef struct ty_tok_strings_t {
  ty_tok_buf_t text;
  ty_tok_pieces_t items;
} ty_tok_strings_t;

static void ty_tok_strings_free(ty_tok_strings_t *s) {
  ty_tok_buf_free(&s->text);
  ty_tok_pieces_free(&s->items);
}

static ty_status_t ty_tok_strings_push(ty_tok_strings_t *s, const char *text, size_t size) {
  size_t offset = s->text.size;
  TY_RETURN_IF_ERROR(ty_tok_buf_append(&s->text, text, size));
  return ty_tok_pieces_push(&s->items, offset, size, false, TY_TOK_NONE);
}

/* Extends the last string by `size` bytes (there must be one). */
static ty_status_t ty_tok_strings_extend(ty_tok_strings_t *s, const char *text, size_t size) {
  TY_RETURN_IF_ERROR(ty_tok_buf_append(&s->text, text, size));
  s->items.data[s->items.count - 1].size += size;
  return TY_OK;
}

static const char ty_tok_replacement_char[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* "<0xHH>" -> the byte; HF reads the two digits with from_str_radix. */
static bool ty_tok_byte_token(const char *t, size_t size, unsigned char *out) {
  if (size != 6 || memcmp(t, "<0x", 3) != 0 || t[5] != '>') return false;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    char c = t[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) return false;
    value = value * 16 + d;
  }
  *out = (unsigned char)value;
  return true;
}

/* A run of byte tokens becomes its text when it is valid UTF-8, else one
 * U+FFFD per byte, as HF's ByteFallback. */
static ty_status_t ty_tok_flush_bytes(ty_tok_buf_t *bytes, ty_tok_strings_t *out) {
  if (!bytes->size) return TY_OK;
  size_t bad;
  ty_status_t status = TY_OK;
  if (ty_tok_utf8_valid(bytes->data, bytes->size, &bad)) {
    status = ty_tok_strings_push(out, bytes->data, bytes->size);
  } else {
    for (size_t i = 0; i < bytes->size && !status; ++i) {
      status = ty_tok_strings_push(out, ty_tok_replacement_char, 3);
    }
  }
  bytes->size = 0;
  return status;
}

static ty_status_t ty_tok_decode_step(const ty_tokenizer_t *tok, const ty_tok_dec_t *dec,
                                      pcre2_match_data *match, const ty_tok_strings_t *in,
                                      ty_tok_strings_t *out) {
  ty_tok_buf_t bytes = {0};
  /* Allocated even when empty: strings are addressed as text.data + offset. */
  ty_status_t status = ty_tok_buf_reserve(&out->text, 0);
  if (!status && (dec->kind == TY_TOK_DEC_FUSE || dec->kind == TY_TOK_DEC_BYTE_LEVEL)) {
    status = ty_tok_strings_push(out, "", 0);
  }
  for (size_t i = 0; i < in->items.count && !status; ++i) {
    const char *t = in->text.data + in->items.data[i].offset;
    size_t size = in->items.data[i].size;
    switch (dec->kind) {
      case TY_TOK_DEC_FUSE: status = ty_tok_strings_extend(out, t, size); break;
      case TY_TOK_DEC_BYTE_LEVEL: {
        /* Every character back to its byte; a token with a character outside
         * the byte alphabet is taken as it is (HF does the same). */
        size_t start = out->text.size;
        status = ty_tok_buf_reserve(&out->text, size);
        bool mapped = true;
        for (size_t k = 0; k < size && !status;) {
          size_t n;
          uint32_t cp = ty_tok_utf8_decode(t + k, size - k, &n);
          if (cp >= 324 || tok->char_byte[cp] < 0) {
            mapped = false;
            break;
          }
          out->text.data[out->text.size++] = (char)tok->char_byte[cp];
          k += n;
        }
        if (status) break;
        if (!mapped) {
          out->text.size = start;
          status = ty_tok_buf_append(&out->text, t, size);
        }
        out->items.data[0].size += out->text.size - start;
        break;
      }
      case TY_TOK_DEC_BYTE_FALLBACK: {
        unsigned char b;
        if (ty_tok_byte_token(t, size, &b)) {
          status = ty_tok_buf_append(&bytes, &b, 1);
        } else {
          status = ty_tok_flush_bytes(&bytes, out);
          if (!status) status = ty_tok_strings_push(out, t, size);
        }
        break;
      }
      case TY_TOK_DEC_REPLACE: {
        size_t offset = out->text.size;
        status = ty_tok_replace_all(&dec->pattern, dec->text, dec->text_size, match, t, size,
                                    &out->text);
        if (!status) {
          status = ty_tok_pieces_push(&out->items, offset, out->text.size - offset, false, 0);
        }
        break;
      }
      case TY_TOK_DEC_STRIP: {
        /* Up to `start` leading and `stop` trailing copies of the character. */
        size_t c = dec->character_size, begin = 0, end = size;
        for (size_t k = 0;
             k < dec->start && end - begin >= c && memcmp(t + begin, dec->character, c) == 0; ++k) {
          begin += c;
        }
        for (size_t k = 0;
             k < dec->stop && end - begin >= c && memcmp(t + end - c, dec->character, c) == 0;
             ++k) {
          end -= c;
        }
        status = ty_tok_strings_push(out, t + begin, end - begin);
        break;
      }
      case TY_TOK_DEC_METASPACE: {
        /* The replacement becomes a space, except in the first token, where
         * HF drops it (every occurrence) unless prepend_scheme is never. */
        bool drop = i == 0 && dec->prepend != TY_TOK_PREPEND_NEVER;
        size_t offset = out->text.size, c = dec->character_size;
        for (size_t k = 0; k < size && !status;) {
          if (size - k >= c && memcmp(t + k, dec->character, c) == 0) {
            if (!drop) status = ty_tok_buf_append(&out->text, " ", 1);
            k += c;
          } else {
            size_t n = ty_tok_utf8_len((unsigned char)t[k]);
            if (n > size - k) n = size - k;
            status = ty_tok_buf_append(&out->text, t + k, n);
            k += n;
          }
        }
        if (!status) {
          status = ty_tok_pieces_push(&out->items, offset, out->text.size - offset, false, 0);
        }
        break;
      }
    }
  }
  if (!status && dec->kind == TY_TOK_DEC_BYTE_FALLBACK) status = ty_tok_flush_bytes(&bytes, out);
  ty_tok_buf_free(&bytes);
  return status;
}

static ty_status_t ty_tok_decode_all(const ty_tokenizer_t *tok, const uint32_t *ids, size_t count,
                                     uint32_t flags, ty_tok_strings_t *a, ty_tok_strings_t *b,
                                     ty_tok_buf_t *result) {
  for (size_t i = 0; i < count; ++i) {
    uint32_t id = ids[i];
    if (id >= tok->id_count || !tok->ids[id].flags) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "tokenizer: id %u (at position %zu) is not in the vocabulary of "
                            "%u ids",
                            id, i, tok->id_count);
    }
    if ((flags & TY_TOKENIZER_DECODE_SKIP_SPECIAL) && (tok->ids[id].flags & TY_TOK_ID_SPECIAL)) {
      continue;
    }
    TY_RETURN_IF_ERROR(ty_tok_strings_push(a, tok->ids[id].text, tok->ids[id].size));
  }
  if (!tok->has_decoder) {
    /* Without a decoder HF joins the tokens with spaces. */
    for (size_t i = 0; i < a->items.count; ++i) {
      if (i) TY_RETURN_IF_ERROR(ty_tok_buf_append(result, " ", 1));
      TY_RETURN_IF_ERROR(
          ty_tok_buf_append(result, a->text.data + a->items.data[i].offset, a->items.data[i].size));
    }
    return TY_OK;
  }
  pcre2_match_data *match = pcre2_match_data_create(1, NULL);
  if (!match) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
  ty_status_t status = TY_OK;
  for (size_t d = 0; d < tok->dec_count && !status; ++d) {
    b->text.size = 0;
    b->items.count = 0;
    status = ty_tok_decode_step(tok, &tok->decs[d], match, a, b);
    ty_tok_strings_t swap = *a;
    *a = *b;
    *b = swap;
  }
  pcre2_match_data_free(match);
  for (size_t i = 0; i < a->items.count && !status; ++i) {
    status =
        ty_tok_buf_append(result, a->text.data + a->items.data[i].offset, a->items.data[i].size);
  }
  return status;
}

ty_status_t ty_tokenizer_decode(const ty_tokenizer_t *tok, const uint32_t *ids, size_t count,
                                uint32_t flags, char **out_text, size_t *out_size) {
  if (!tok || (!ids && count) || !out_text || !out_size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "ty_tokenizer_decode: NULL argument");
  }
  if (flags & ~(uint32_t)TY_TOKENIZER_DECODE_SKIP_SPECIAL) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "ty_tokenizer_decode: unknown flags 0x%x",
                          flags);
  }
  ty_tok_strings_t a = {0}, b = {0};
  ty_tok_buf_t result = {0};
  ty_status_t status = ty_tok_decode_all(tok, ids, count, flags, &a, &b, &result);
  if (!status) status = ty_tok_buf_reserve(&result, 0);
  ty_tok_strings_free(&a);
  ty_tok_strings_free(&b);
  if (status) {
    ty_tok_buf_free(&result);
    return status;
  }
  result.data[result.size] = '\0';
  *out_text = result.data;
  *out_size = result.size;
  return TY_OK;
}
