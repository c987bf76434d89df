/* Encoding, in Hugging Face's order: added tokens are cut out of the raw
 * text (non-normalized ones) and out of each normalized segment (normalized
 * ones); what is left is pre-tokenized into words, each word goes through
 * BPE, and the post-processor's template puts BOS/EOS around the result. */
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_internal.h"

/* ---- splitting on a pattern ---- */

/* Match / non-match spans of `text` as HF's find_matches makes them, then
 * regrouped by `behavior`. In `spans`, `added` is 1 for a match, 0 else;
 * empty spans are dropped at the end as HF drops empty splits. */
ty_status_t ty_tok_split_spans(const ty_tok_regex_t *regex, pcre2_match_data *match,
                               const char *text, size_t size, bool invert,
                               ty_tok_split_behavior_t behavior, ty_tok_pieces_t *spans) {
  spans->count = 0;
  size_t prev = 0, search = 0;
  bool have_last_end = false;
  size_t last_end = 0;
  while (search <= size) {
    bool found;
    size_t begin, end;
    TY_RETURN_IF_ERROR(ty_tok_regex_find(regex, match, text, size, search, &found, &begin, &end));
    if (!found) break;
    if (begin == end && have_last_end && last_end == end) {
      /* No empty match right after the previous match: step one character. */
      if (search >= size) break;
      search += ty_tok_utf8_len((unsigned char)text[search]);
      continue;
    }
    search = end;
    have_last_end = true;
    last_end = end;
    if (prev != begin)
      TY_RETURN_IF_ERROR(ty_tok_pieces_push(spans, prev, begin - prev, false, invert));
    TY_RETURN_IF_ERROR(ty_tok_pieces_push(spans, begin, end - begin, false, !invert));
    prev = end;
  }
  if (prev != size) TY_RETURN_IF_ERROR(ty_tok_pieces_push(spans, prev, size - prev, false, invert));

  if (spans->count == 0) return TY_OK;
  /* Regroup in place; `added` ends up 1 for spans to remove. */
  ty_tok_piece_t *s = spans->data;
  size_t n = spans->count, out = 0;
  switch (behavior) {
    case TY_TOK_SPLIT_ISOLATED:
      for (size_t i = 0; i < n; ++i) s[i].added = 0;
      break;
    case TY_TOK_SPLIT_REMOVED: break;
    case TY_TOK_SPLIT_MERGED_WITH_PREVIOUS:
    case TY_TOK_SPLIT_CONTIGUOUS: {
      bool previous_match = false;
      for (size_t i = 0; i < n; ++i) {
        bool is_match = s[i].added != 0;
        bool merge = behavior == TY_TOK_SPLIT_CONTIGUOUS ? is_match == previous_match
                                                         : is_match && !previous_match;
        if (merge && out > 0) {
          s[out - 1].size = s[i].offset + s[i].size - s[out - 1].offset;
        } else {
          s[out] = s[i];
          s[out++].added = 0;
        }
        previous_match = is_match;
      }
      n = out;
      break;
    }
    case TY_TOK_SPLIT_MERGED_WITH_NEXT: {
      /* Walk backwards, as HF does: a match joins the span after it. */
      bool previous_match = false;
      size_t write = n;
      for (size_t i = n; i-- > 0;) {
        bool is_match = s[i].added != 0;
        if (is_match && !previous_match && write < n) {
          s[write].size += s[write].offset - s[i].offset;
          s[write].offset = s[i].offset;
        } else {
          s[--write] = s[i];
          s[write].added = 0;
        }
        previous_match = is_match;
      }
      memmove(s, s + write, (n - write) * sizeof(*s));
      n -= write;
      break;
    }
  }
  out = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i].size && !s[i].added) s[out++] = s[i];
  }
  spans->count = out;
  return TY_OK;
}

/* ---- normalizers ---- */

ty_status_t ty_tok_replace_all(const ty_tok_regex_t *pattern, const char *with, size_t with_size,
                               pcre2_match_data *match, const char *text, size_t size,
                               ty_tok_buf_t *out) {
  size_t prev = 0, search = 0;
  while (search <= size) {
    bool found;
    size_t begin, end;
    TY_RETURN_IF_ERROR(ty_tok_regex_find(pattern, match, text, size, search, &found, &begin, &end));
    if (!found) break;
    TY_RETURN_IF_ERROR(ty_tok_buf_append(out, text + prev, begin - prev));
    TY_RETURN_IF_ERROR(ty_tok_buf_append(out, with, with_size));
    prev = end;
    if (end == begin) {
      /* An empty match: keep the next character and search after it. */
      if (end >= size) break;
      size_t n = ty_tok_utf8_len((unsigned char)text[end]);
      TY_RETURN_IF_ERROR(ty_tok_buf_append(out, text + end, n));
      prev = search = end + n;
    } else {
      search = end;
    }
  }
  return ty_tok_buf_append(out, text + prev, size - prev);
}

ty_status_t ty_tok_normalize(const ty_tokenizer_t *tok, pcre2_match_data *match, const char *text,
                             size_t size, ty_tok_buf_t *out) {
  out->size = 0;
  TY_RETURN_IF_ERROR(ty_tok_buf_append(out, text, size));
  if (!tok->norm_count) return TY_OK;
  ty_tok_buf_t next = {0};
  ty_status_t status = TY_OK;
  for (size_t i = 0; i < tok->norm_count && !status; ++i) {
    const ty_tok_norm_t *norm = &tok->norms[i];
    next.size = 0;
    if (norm->kind == TY_TOK_NORM_PREPEND) {
      if (out->size == 0) continue; /* HF prepends nothing to empty text */
      status = ty_tok_buf_append(&next, norm->text, norm->text_size);
      if (!status) status = ty_tok_buf_append(&next, out->data, out->size);
    } else {
      status = ty_tok_replace_all(&norm->pattern, norm->text, norm->text_size, match, out->data,
                                  out->size, &next);
    }
    if (!status) {
      ty_tok_buf_t swap = *out;
      *out = next;
      next = swap;
    }
  }
  ty_tok_buf_free(&next);
  return status;
}

/* ---- added tokens ---- */

static bool ty_tok_char_matches(const ty_tok_regex_t *regex, pcre2_match_data *match,
                                const char *text, size_t size, size_t at) {
  if (!regex->code || at >= size) return false;
  size_t n = ty_tok_utf8_len((unsigned char)text[at]);
  return pcre2_match(regex->code, (PCRE2_SPTR)text, at + n, at, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED,
                     match, NULL) >= 0;
}

static size_t ty_tok_char_before(const char *text, size_t at) {
  size_t i = at - 1;
  while (i > 0 && ((unsigned char)text[i] & 0xC0) == 0x80) --i;
  return i;
}

/* Splits text at the added tokens of `trie` (leftmost-longest, as HF's
 * Aho-Corasick), with HF's single_word, lstrip and rstrip rules. */
static ty_status_t ty_tok_split_added(const ty_tokenizer_t *tok, const ty_tok_trie_t *trie,
                                      pcre2_match_data *match, const char *text, size_t size,
                                      ty_tok_pieces_t *out) {
  out->count = 0;
  size_t start_offset = 0, pos = 0;
  while (trie->count && pos < size) {
    size_t start = pos, stop = 0;
    uint32_t found = TY_TOK_NONE;
    for (; start < size && found == TY_TOK_NONE; ++start) {
      uint32_t node = 0;
      for (size_t i = start; i < size; ++i) {
        uint32_t child = trie->nodes[node].first_child;
        while (child != TY_TOK_NONE && trie->nodes[child].byte != (unsigned char)text[i]) {
          child = trie->nodes[child].next_sibling;
        }
        if (child == TY_TOK_NONE) break;
        node = child;
        if (trie->nodes[node].added != TY_TOK_NONE) {
          found = trie->nodes[node].added;
          stop = i + 1;
        }
      }
    }
    if (found == TY_TOK_NONE) break;
    start--; /* the loop stepped past the match start */
    pos = stop;
    const ty_tok_added_t *a = &tok->added[found];
    if (a->single_word) {
      bool word_before = start > 0 && ty_tok_char_matches(&tok->word_char, match, text, size,
                                                          ty_tok_char_before(text, start));
      bool word_after =
          stop < size && ty_tok_char_matches(&tok->word_char, match, text, size, stop);
      if (word_before || word_after) continue;
    }
    if (a->lstrip) {
      size_t s = start;
      while (s > start_offset && ty_tok_char_matches(&tok->space_char, match, text, size,
                                                     ty_tok_char_before(text, s))) {
        s = ty_tok_char_before(text, s);
      }
      start = s;
    }
    if (a->rstrip) {
      while (stop < size && ty_tok_char_matches(&tok->space_char, match, text, size, stop)) {
        stop += ty_tok_utf8_len((unsigned char)text[stop]);
      }
      /* HF resumes its search at the token's end and may find a token inside
       * the stripped spaces; only a token starting with a space could. */
      pos = stop;
    }
    if (start_offset < start) {
      TY_RETURN_IF_ERROR(
          ty_tok_pieces_push(out, start_offset, start - start_offset, false, TY_TOK_NONE));
    }
    TY_RETURN_IF_ERROR(ty_tok_pieces_push(out, start, stop - start, false, found));
    start_offset = stop;
  }
  if (start_offset < size) {
    TY_RETURN_IF_ERROR(
        ty_tok_pieces_push(out, start_offset, size - start_offset, false, TY_TOK_NONE));
  }
  return TY_OK;
}

/* ---- pre-tokenizers ---- */

/* Appends the GPT-2 byte-to-character form of `size` bytes at arena[offset]
 * and pushes it as a piece. */
static ty_status_t ty_tok_push_byte_level(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                          size_t offset, size_t size, bool at_origin) {
  if (size > (SIZE_MAX - work->arena.size) / 2) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: text too large");
  }
  TY_RETURN_IF_ERROR(ty_tok_buf_reserve(&work->arena, 2 * size));
  const unsigned char *src = (const unsigned char *)work->arena.data + offset;
  char *dst = work->arena.data + work->arena.size;
  size_t n = 0;
  for (size_t i = 0; i < size; ++i) {
    dst[n] = tok->byte_char[src[i]][0];
    if (tok->byte_char_size[src[i]] == 2) dst[n + 1] = tok->byte_char[src[i]][1];
    n += tok->byte_char_size[src[i]];
  }
  size_t start = work->arena.size;
  work->arena.size += n;
  return ty_tok_pieces_push(&work->next_pieces, start, n, at_origin, TY_TOK_NONE);
}

/* Copies arena[offset, offset + size) to the arena's end, with `prefix`
 * first and spaces replaced by `space_to` when that is set. */
static ty_status_t ty_tok_arena_copy(ty_tok_work_t *work, size_t offset, size_t size,
                                     const char *prefix, size_t prefix_size, const char *space_to,
                                     size_t space_to_size, size_t *out_offset) {
  size_t grow = space_to_size > 1 ? space_to_size : 1;
  if (size > (SIZE_MAX / 4 - prefix_size) / grow) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: text too large");
  }
  TY_RETURN_IF_ERROR(ty_tok_buf_reserve(&work->arena, prefix_size + size * grow));
  char *base = work->arena.data;
  char *dst = base + work->arena.size;
  *out_offset = work->arena.size;
  memcpy(dst, prefix, prefix_size);
  dst += prefix_size;
  for (size_t i = 0; i < size; ++i) {
    char c = base[offset + i];
    if (space_to && c == ' ') {
      memcpy(dst, space_to, space_to_size);
      dst += space_to_size;
    } else {
      *dst++ = c;
    }
  }
  work->arena.size = (size_t)(dst - base);
  return TY_OK;
}

/* Splits arena[offset, offset + size) with `regex` and pushes the pieces,
 * mapped to byte-level characters when `byte_level`. */
static ty_status_t ty_tok_push_split(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                     const ty_tok_pre_t *pre, size_t offset, size_t size,
                                     bool at_origin, bool byte_level) {
  if (pre->has_pattern) {
    TY_RETURN_IF_ERROR(ty_tok_split_spans(&pre->pattern, work->match, work->arena.data + offset,
                                          size, pre->invert, pre->behavior, &work->spans));
  } else {
    work->spans.count = 0;
    if (size) TY_RETURN_IF_ERROR(ty_tok_pieces_push(&work->spans, 0, size, false, 0));
  }
  for (size_t i = 0; i < work->spans.count; ++i) {
    const ty_tok_piece_t *span = &work->spans.data[i];
    bool origin = at_origin && span->offset == 0;
    if (byte_level) {
      TY_RETURN_IF_ERROR(
          ty_tok_push_byte_level(tok, work, offset + span->offset, span->size, origin));
    } else {
      TY_RETURN_IF_ERROR(ty_tok_pieces_push(&work->next_pieces, offset + span->offset, span->size,
                                            origin, TY_TOK_NONE));
    }
  }
  return TY_OK;
}

static ty_status_t ty_tok_pre_apply(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                    const ty_tok_pre_t *pre, const ty_tok_piece_t *piece) {
  size_t offset = piece->offset, size = piece->size;
  switch (pre->kind) {
    case TY_TOK_PRE_SPLIT:
      return ty_tok_push_split(tok, work, pre, offset, size, piece->at_origin, false);
    case TY_TOK_PRE_BYTE_LEVEL:
      if (pre->add_prefix_space && size && work->arena.data[offset] != ' ') {
        TY_RETURN_IF_ERROR(ty_tok_arena_copy(work, offset, size, " ", 1, NULL, 0, &offset));
        size += 1;
      }
      return ty_tok_push_split(tok, work, pre, offset, size, piece->at_origin, true);
    case TY_TOK_PRE_METASPACE: {
      /* Spaces become the replacement, then the replacement is prepended
       * unless the piece already starts with it. */
      const char *text = work->arena.data + offset;
      bool starts =
          size && (text[0] == ' ' || (size >= pre->replacement_size &&
                                      memcmp(text, pre->replacement, pre->replacement_size) == 0));
      bool prepend = size && !starts &&
                     (pre->prepend == TY_TOK_PREPEND_ALWAYS ||
                      (pre->prepend == TY_TOK_PREPEND_FIRST && piece->at_origin));
      size_t copied;
      TY_RETURN_IF_ERROR(ty_tok_arena_copy(work, offset, size, pre->replacement,
                                           prepend ? pre->replacement_size : 0, pre->replacement,
                                           pre->replacement_size, &copied));
      return ty_tok_push_split(tok, work, pre, copied, work->arena.size - copied, piece->at_origin,
                               false);
    }
  }
  return TY_OK;
}

/* Runs the pre-tokenizers over one normalized segment: work->pieces are
 * then the words, in work->arena. */
static ty_status_t ty_tok_pre_tokenize_segment(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                               const char *text, size_t size, bool at_origin) {
  work->arena.size = 0;
  TY_RETURN_IF_ERROR(ty_tok_buf_append(&work->arena, text, size));
  work->pieces.count = 0;
  TY_RETURN_IF_ERROR(ty_tok_pieces_push(&work->pieces, 0, size, at_origin, TY_TOK_NONE));
  for (size_t p = 0; p < tok->pre_count; ++p) {
    work->next_pieces.count = 0;
    for (size_t i = 0; i < work->pieces.count; ++i) {
      ty_tok_piece_t piece = work->pieces.data[i];
      TY_RETURN_IF_ERROR(ty_tok_pre_apply(tok, work, &tok->pres[p], &piece));
    }
    ty_tok_pieces_t swap = work->pieces;
    work->pieces = work->next_pieces;
    work->next_pieces = swap;
  }
  return TY_OK;
}

/* Pre-tokenizes one normalized segment and runs BPE on every word. */
static ty_status_t ty_tok_encode_segment(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                         const char *text, size_t size, bool at_origin,
                                         ty_tok_ids_t *out) {
  TY_RETURN_IF_ERROR(ty_tok_pre_tokenize_segment(tok, work, text, size, at_origin));
  for (size_t i = 0; i < work->pieces.count; ++i) {
    const ty_tok_piece_t *piece = &work->pieces.data[i];
    TY_RETURN_IF_ERROR(
        ty_tok_bpe_word(tok, work, work->arena.data + piece->offset, piece->size, out));
  }
  return TY_OK;
}

static ty_status_t ty_tok_encode_text(const ty_tokenizer_t *tok, ty_tok_work_t *work,
                                      const char *text, size_t size, ty_tok_ids_t *out) {
  TY_RETURN_IF_ERROR(
      ty_tok_split_added(tok, &tok->raw_trie, work->match, text, size, &work->segments));
  for (size_t s = 0; s < work->segments.count; ++s) {
    const ty_tok_piece_t seg = work->segments.data[s];
    if (seg.added != TY_TOK_NONE) {
      TY_RETURN_IF_ERROR(ty_tok_ids_append(out, &tok->added[seg.added].id, 1));
      continue;
    }
    TY_RETURN_IF_ERROR(
        ty_tok_normalize(tok, work->match, text + seg.offset, seg.size, &work->norm));
    TY_RETURN_IF_ERROR(ty_tok_split_added(tok, &tok->norm_trie, work->match, work->norm.data,
                                          work->norm.size, &work->subsegments));
    for (size_t k = 0; k < work->subsegments.count; ++k) {
      const ty_tok_piece_t sub = work->subsegments.data[k];
      if (sub.added != TY_TOK_NONE) {
        TY_RETURN_IF_ERROR(ty_tok_ids_append(out, &tok->added[sub.added].id, 1));
      } else {
        /* Metaspace's "first" asks whether the piece starts the input. */
        bool at_origin = seg.offset == 0 && sub.offset == 0;
        TY_RETURN_IF_ERROR(ty_tok_encode_segment(tok, work, work->norm.data + sub.offset, sub.size,
                                                 at_origin, out));
      }
    }
  }
  return TY_OK;
}

static void ty_tok_work_free(ty_tok_work_t *work) {
  pcre2_match_data_free(work->match);
  ty_tok_buf_free(&work->norm);
  ty_tok_buf_free(&work->arena);
  ty_tok_pieces_free(&work->segments);
  ty_tok_pieces_free(&work->subsegments);
  ty_tok_pieces_free(&work->pieces);
  ty_tok_pieces_free(&work->next_pieces);
  ty_tok_pieces_free(&work->spans);
  ty_tok_bpe_work_free(work);
}

static ty_status_t ty_tok_work_init(ty_tok_work_t *work) {
  memset(work, 0, sizeof(*work));
  work->match = pcre2_match_data_create(1, NULL);
  if (!work->match) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "tokenizer: out of memory");
  return TY_OK;
}

ty_status_t ty_tok_pre_tokenize(const ty_tokenizer_t *tok, const char *text, size_t size,
                                ty_tok_buf_t *out_text, ty_tok_pieces_t *out_pieces) {
  ty_tok_work_t work;
  ty_status_t status = ty_tok_work_init(&work);
  if (!status) status = ty_tok_pre_tokenize_segment(tok, &work, text, size, true);
  for (size_t i = 0; i < work.pieces.count && !status; ++i) {
    const ty_tok_piece_t *piece = &work.pieces.data[i];
    size_t offset = out_text->size;
    status = ty_tok_buf_append(out_text, work.arena.data + piece->offset, piece->size);
    if (!status) status = ty_tok_pieces_push(out_pieces, offset, piece->size, false, TY_TOK_NONE);
  }
  ty_tok_work_free(&work);
  return status;
}

ty_status_t ty_tokenizer_encode(const ty_tokenizer_t *tok, const char *text, size_t size,
                                uint32_t flags, uint32_t **out_ids, size_t *out_count) {
  if (!tok || (!text && size) || !out_ids || !out_count) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "ty_tokenizer_encode: NULL argument");
  }
  if (flags & ~(uint32_t)TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "ty_tokenizer_encode: unknown flags 0x%x",
                          flags);
  }
  size_t bad = 0;
  if (size && !ty_tok_utf8_valid(text, size, &bad)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tokenizer: the text is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                          (unsigned char)text[bad], bad);
  }
  ty_tok_work_t work;
  ty_tok_ids_t ids = {0};
  ty_status_t status = ty_tok_work_init(&work);
  bool special = !(flags & TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS);
  if (!status && special) status = ty_tok_ids_append(&ids, tok->prefix_ids, tok->prefix_count);
  if (!status && size) status = ty_tok_encode_text(tok, &work, text, size, &ids);
  if (!status && special) status = ty_tok_ids_append(&ids, tok->suffix_ids, tok->suffix_count);
  ty_tok_work_free(&work);
  if (status) {
    ty_tok_ids_free(&ids);
    return status;
  }
  *out_ids = ids.count ? ids.data : NULL;
  if (!ids.count) free(ids.data);
  *out_count = ids.count;
  return TY_OK;
}
