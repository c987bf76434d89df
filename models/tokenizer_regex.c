/* The tokenizer's regular expressions on PCRE2 (8-bit, UTF + UCP, JIT when
 * available). Patterns come from tokenizer.json, written for Oniguruma,
 * which the `tokenizers` library uses; the two agree on what these files use
 * except for a few escapes, which are rewritten here before compiling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_internal.h"

static void ty_tok_pcre2_message(int code, char *out, size_t capacity) {
  if (pcre2_get_error_message(code, (PCRE2_UCHAR *)out, capacity) < 0) {
    snprintf(out, capacity, "PCRE2 error %d", code);
  }
}

static bool ty_tok_is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Oniguruma's Unicode classes, spelled with PCRE2 properties. PCRE2's own
 * \s also matches U+180E (a format character since Unicode 6.3) and its \w
 * leaves out combining marks; Oniguruma's are defined by general category. */
#define TY_TOK_ONIG_SPACE "\\t-\\r\\x{85}\\p{Z}"
#define TY_TOK_ONIG_WORD "\\p{L}\\p{M}\\p{N}\\p{Pc}"
#define TY_TOK_ONIG_HEX "0-9a-fA-F"

/* Rewrites the Oniguruma escapes that PCRE2 reads differently: \s \S \w \W
 * (see above), \h \H (hex digits in Oniguruma, horizontal space in PCRE2) and
 * \uHHHH (a code point in Oniguruma, refused by PCRE2). Character classes are
 * tracked so that \s inside [...] becomes a list of members. Negated escapes
 * inside a class (\S in [...]) are left to PCRE2's meaning. */
static ty_status_t ty_tok_regex_translate(const char *pattern, size_t size, ty_tok_buf_t *out) {
  bool in_class = false;
  size_t class_start = 0; /* output offset just after '[' or '[^' */
  for (size_t i = 0; i < size; ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < size) {
      char e = pattern[i + 1];
      const char *members = e == 's' || e == 'S'   ? TY_TOK_ONIG_SPACE
                            : e == 'w' || e == 'W' ? TY_TOK_ONIG_WORD
                            : e == 'h' || e == 'H' ? TY_TOK_ONIG_HEX
                                                   : NULL;
      bool negated = e == 'S' || e == 'W' || e == 'H';
      if (members && !(in_class && negated)) {
        if (!in_class)
          TY_RETURN_IF_ERROR(ty_tok_buf_append(out, negated ? "[^" : "[", negated ? 2 : 1));
        TY_RETURN_IF_ERROR(ty_tok_buf_append(out, members, strlen(members)));
        if (!in_class) TY_RETURN_IF_ERROR(ty_tok_buf_append(out, "]", 1));
        ++i;
        continue;
      }
      if (e == 'u' && i + 5 < size && ty_tok_is_hex(pattern[i + 2]) &&
          ty_tok_is_hex(pattern[i + 3]) && ty_tok_is_hex(pattern[i + 4]) &&
          ty_tok_is_hex(pattern[i + 5])) {
        char hex[12];
        snprintf(hex, sizeof(hex), "\\x{%.4s}", pattern + i + 2);
        TY_RETURN_IF_ERROR(ty_tok_buf_append(out, hex, strlen(hex)));
        i += 5;
        continue;
      }
      if (e == 'Q') {
        /* Quoted text runs to \E untouched. */
        const char *end = NULL;
        for (size_t k = i + 2; k + 1 < size; ++k) {
          if (pattern[k] == '\\' && pattern[k + 1] == 'E') {
            end = pattern + k + 2;
            break;
          }
        }
        size_t n = end ? (size_t)(end - (pattern + i)) : size - i;
        TY_RETURN_IF_ERROR(ty_tok_buf_append(out, pattern + i, n));
        i += n - 1;
        continue;
      }
      TY_RETURN_IF_ERROR(ty_tok_buf_append(out, pattern + i, 2));
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      TY_RETURN_IF_ERROR(ty_tok_buf_append(out, "[", 1));
      if (i + 1 < size && pattern[i + 1] == '^') {
        TY_RETURN_IF_ERROR(ty_tok_buf_append(out, "^", 1));
        ++i;
      }
      in_class = true;
      class_start = out->size;
      continue;
    }
    if (in_class && c == '[' && i + 1 < size && pattern[i + 1] == ':') {
      /* A POSIX class such as [:alpha:] stays as it is. */
      size_t k = i + 2;
      while (k + 1 < size && !(pattern[k] == ':' && pattern[k + 1] == ']')) ++k;
      size_t n = (k + 1 < size) ? k + 2 - i : size - i;
      TY_RETURN_IF_ERROR(ty_tok_buf_append(out, pattern + i, n));
      i += n - 1;
      continue;
    }
    /* A ']' right after '[' or '[^' is a literal member. */
    if (in_class && c == ']' && out->size != class_start) in_class = false;
    TY_RETURN_IF_ERROR(ty_tok_buf_append(out, &c, 1));
  }
  return TY_OK;
}

ty_status_t ty_tok_regex_compile(const char *pattern, size_t size, bool literal, const char *what,
                                 ty_tok_regex_t *out) {
  memset(out, 0, sizeof(*out));
  if (size == 0 && literal) return TY_OK;
  ty_tok_buf_t translated = {0};
  if (!literal) {
    ty_status_t s = ty_tok_regex_translate(pattern, size, &translated);
    if (s) {
      ty_tok_buf_free(&translated);
      return s;
    }
    pattern = translated.data ? translated.data : "";
    size = translated.size;
  }
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  out->code = pcre2_compile((PCRE2_SPTR)pattern, size, options, &error, &error_offset, NULL);
  ty_tok_buf_free(&translated);
  if (!out->code) {
    char message[256];
    ty_tok_pcre2_message(error, message, sizeof(message));
    if (error == PCRE2_ERROR_NOMEMORY) {
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling the pattern",
                            what);
    }
    return ty_status_make(
        TY_CODE_INVALID_ARGUMENT, "%s: the pattern does not compile: %s (at offset %zu%s)", what,
        message, (size_t)error_offset, literal ? "" : " of the pattern as rewritten for PCRE2");
  }
  /* JIT is an optimization: when it is not available the interpreter runs. */
  out->jit = pcre2_jit_compile(out->code, PCRE2_JIT_COMPLETE) == 0;
  return TY_OK;
}

void ty_tok_regex_free(ty_tok_regex_t *regex) {
  pcre2_code_free(regex->code);
  memset(regex, 0, sizeof(*regex));
}

ty_status_t ty_tok_regex_find(const ty_tok_regex_t *regex, pcre2_match_data *match,
                              const char *subject, size_t size, size_t start, bool *out_found,
                              size_t *out_begin, size_t *out_end) {
  *out_found = false;
  if (!regex->code || start > size) return TY_OK;
  int rc =
      pcre2_match(regex->code, (PCRE2_SPTR)subject, size, start, PCRE2_NO_UTF_CHECK, match, NULL);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
    /* The interpreter keeps its backtracking state on the heap. */
    rc = pcre2_match(regex->code, (PCRE2_SPTR)subject, size, start,
                     PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, NULL);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return TY_OK;
  if (rc < 0) {
    char message[256];
    ty_tok_pcre2_message(rc, message, sizeof(message));
    bool limit = rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
                 rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_NOMEMORY ||
                 rc == PCRE2_ERROR_JIT_STACKLIMIT;
    return ty_status_make(limit ? TY_CODE_RESOURCE_EXHAUSTED : TY_CODE_INTERNAL,
                          "tokenizer: regular expression failed on %zu bytes of text at "
                          "offset %zu: %s",
                          size, start, message);
  }
  PCRE2_SIZE *ovector = pcre2_get_ovector_pointer(match);
  *out_found = true;
  *out_begin = ovector[0];
  *out_end = ovector[1];
  /* \K can move the start past the end; treat it as an empty match. */
  if (*out_end < *out_begin) *out_end = *out_begin;
  return TY_OK;
}
