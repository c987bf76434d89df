/* Tests of models/text_stream: for random id sequences of a byte-level
 * (GPT-2) and a byte-fallback SentencePiece (Llama-2) tokenizer, the pieces
 * a stream returns, pushed one id at a time, are valid UTF-8 and concatenate
 * to the sanitized decode of the whole sequence cut before the first stop
 * string; a stop string split over several tokens is never streamed in
 * part; the UTF-8 sanitizer replaces maximal invalid subparts as Python's
 * errors="replace" does (cases computed with Python). */
#include "common/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/text_stream.h"
#include "models/tokenizer.h"

static bool valid_utf8(const char *s, size_t n) {
  char *clean = NULL;
  size_t clean_size = 0;
  TY_EXPECT_OK(ty_utf8_sanitize(s, n, false, &clean, &clean_size, NULL));
  bool same = clean_size == n && memcmp(clean, s, n) == 0;
  free(clean);
  return same;
}

static void test_sanitize(void **state) {
  (void)state;
  static const struct {
    const char *in;
    size_t in_size;
    const char *want; /* bytes(in).decode("utf-8", "replace").encode() */
  } cases[] = {
      {"abc", 3, "abc"},
      {"caf\xc3\xa9", 5, "caf\xc3\xa9"},
      {"\xc3", 1, "\xef\xbf\xbd"},
      {"\xe2\x82", 2, "\xef\xbf\xbd"},
      {"\xe2\x82" "a", 3, "\xef\xbf\xbd" "a"},
      {"\x80\x80", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate */
      {"\xf0\x9f\xa6\x80", 4, "\xf0\x9f\xa6\x80"},
      {"\xf0\x9f\xa6", 3, "\xef\xbf\xbd"},
      {"\xf5\x80", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
      {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
      {"a\0b", 3, "a\0b"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    char *out = NULL;
    size_t n = 0, tail = 0;
    TY_EXPECT_OK(ty_utf8_sanitize(cases[i].in, cases[i].in_size, false, &out, &n, &tail));
    size_t want_size = i == 11 ? 3 : strlen(cases[i].want);
    assert_int_equal(n, want_size);
    assert_memory_equal(out, cases[i].want, n);
    assert_int_equal(tail, 0);
    free(out);
  }
  /* An unfinished character at the end is held back when asked. */
  char *out = NULL;
  size_t n = 0, tail = 0;
  TY_EXPECT_OK(ty_utf8_sanitize("ab\xf0\x9f\xa6", 5, true, &out, &n, &tail));
  assert_int_equal(n, 2);
  assert_int_equal(tail, 3);
  free(out);
  TY_EXPECT_OK(ty_utf8_sanitize("ab\x80", 3, true, &out, &n, &tail)); /* not a start */
  assert_int_equal(tail, 0);
  assert_int_equal(n, 5);
  free(out);
}

static ty_tokenizer_t *load(const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s/tokenizer.json", TY_TEST_TOKENIZER_DIR, name);
  ty_tokenizer_t *tok = NULL;
  TY_EXPECT_OK(ty_tokenizer_load_file(path, &tok));
  return tok;
}

/* The expected text: the whole decode, sanitized, cut at the first stop. */
static char *expected(const ty_tokenizer_t *tok, const uint32_t *ids, size_t n,
                      const char *const *stops, size_t stop_count, size_t *out_size,
                      bool *out_stopped) {
  char *raw = NULL, *clean = NULL;
  size_t raw_size = 0, clean_size = 0;
  TY_EXPECT_OK(ty_tokenizer_decode(tok, ids, n, TY_TOKENIZER_DECODE_SKIP_SPECIAL, &raw, &raw_size));
  TY_EXPECT_OK(ty_utf8_sanitize(raw, raw_size, false, &clean, &clean_size, NULL));
  free(raw);
  size_t cut = clean_size;
  for (size_t i = 0; i < stop_count; ++i) {
    size_t m = strlen(stops[i]);
    for (size_t at = 0; at + m <= clean_size && at < cut; ++at) {
      if (!memcmp(clean + at, stops[i], m)) {
        cut = at;
        break;
      }
    }
  }
  *out_stopped = cut < clean_size;
  *out_size = cut;
  return clean;
}

/* Pushes ids[0..n) (until a stop) and finishes: the pieces, joined, into
 * got (NUL-terminated); each piece must be valid UTF-8. */
static size_t stream_all(ty_text_stream_t *ts, const uint32_t *ids, size_t n, char *got) {
  size_t got_size = 0;
  bool stopped = false;
  const char *piece;
  size_t size;
  for (size_t i = 0; i < n && !stopped; ++i) {
    TY_EXPECT_OK(ty_text_stream_push(ts, ids[i], &piece, &size, &stopped));
    assert_true(valid_utf8(piece, size));
    memcpy(got + got_size, piece, size);
    got_size += size;
  }
  TY_EXPECT_OK(ty_text_stream_finish(ts, &piece, &size));
  memcpy(got + got_size, piece, size);
  got_size += size;
  got[got_size] = '\0';
  return got_size;
}

static void stream_case(const ty_tokenizer_t *tok, const uint32_t *ids, size_t n,
                        const char *const *stops, size_t stop_count) {
  ty_text_stream_t *ts = NULL;
  TY_EXPECT_OK(ty_text_stream_create(tok, TY_TOKENIZER_DECODE_SKIP_SPECIAL, stops, stop_count,
                                     &ts));
  char *got = malloc(16 * n + 16);
  size_t got_size = stream_all(ts, ids, n, got);
  assert_int_equal(ty_text_stream_offset(ts), got_size);
  size_t want_size;
  bool want_stopped;
  char *want = expected(tok, ids, n, stops, stop_count, &want_size, &want_stopped);
  if (got_size != want_size || memcmp(got, want, want_size) != 0) {
    for (size_t i = 0; i < n; ++i) fprintf(stderr, "%u ", ids[i]);
    fprintf(stderr, "\n");
    fail_msg("streamed %zu bytes '%.*s', want %zu bytes '%.*s'", got_size, (int)got_size, got,
             want_size, (int)want_size, want);
  }
  assert_int_equal(ty_text_stream_stopped(ts), want_stopped);
  free(want);
  free(got);
  ty_text_stream_destroy(ts);
}

static void test_random_streams(void **state) {
  (void)state;
  const char *names[] = {"gpt2", "llama2_metaspace", "llama2_legacy"};
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  const char *texts[] = {" hello world", " caf\xc3\xa9 au lait", " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                         " \xf0\x9f\xa6\x80 crab", "\n\nThe end.", " it's 42!"};
  for (size_t t = 0; t < sizeof(names) / sizeof(names[0]); ++t) {
    ty_tokenizer_t *tok = load(names[t]);
    uint32_t vocab = ty_tokenizer_vocab_size(tok);
    for (int round = 0; round < 300; ++round) {
      uint32_t ids[64];
      size_t n = 0;
      /* Encoded text (multi-byte characters split over byte tokens) mixed
       * with random ids (bytes that never form a character). */
      while (n < 40) {
        if (ty_test_rng_next(&rng) % 3) {
          const char *text = texts[ty_test_rng_next(&rng) % 6];
          uint32_t *enc = NULL;
          size_t m = 0;
          TY_EXPECT_OK(ty_tokenizer_encode(tok, text, strlen(text),
                                           TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS, &enc, &m));
          for (size_t i = 0; i < m && n < 64; ++i) ids[n++] = enc[i];
          free(enc);
        } else {
          /* Byte-fallback tokens at random make runs that are not UTF-8,
           * which that decoder rewrites (test_byte_fallback_run). */
          uint32_t id = (uint32_t)(ty_test_rng_next(&rng) % vocab);
          const char *token;
          size_t size;
          if (t > 0 && ty_tokenizer_id_to_token(tok, id, &token, &size) && size == 6 &&
              !memcmp(token, "<0x", 3)) {
            continue;
          }
          ids[n++] = id;
        }
      }
      const char *stops[3] = {"lait", " wor", "\xe6\x9c\xac"};
      size_t stop_count = (size_t)(round % 4);
      stream_case(tok, ids, n, stops, stop_count < 3 ? stop_count : 3);
    }
    ty_tokenizer_destroy(tok);
  }
}

/* A stop string spread over tokens: nothing of it is ever streamed. */
static void test_stop_never_leaks(void **state) {
  (void)state;
  ty_tokenizer_t *tok = load("gpt2");
  const char *text = "the cat sat on the mat";
  uint32_t *ids = NULL;
  size_t n = 0;
  TY_EXPECT_OK(ty_tokenizer_encode(tok, text, strlen(text), TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS,
                                   &ids, &n));
  const char *stops[] = {"on the m", "zzz"};
  ty_text_stream_t *ts = NULL;
  TY_EXPECT_OK(ty_text_stream_create(tok, 0, stops, 2, &ts));
  char got[128] = "";
  size_t got_size = 0;
  bool stopped = false;
  for (size_t i = 0; i < n && !stopped; ++i) {
    const char *piece;
    size_t size;
    TY_EXPECT_OK(ty_text_stream_push(ts, ids[i], &piece, &size, &stopped));
    memcpy(got + got_size, piece, size);
    got_size += size;
    got[got_size] = '\0';
    assert_null(strstr(got, "on"));
  }
  assert_true(stopped);
  assert_string_equal(got, "the cat sat ");
  /* Ids past the tokenizer's vocabulary make no text (and no error). */
  ty_text_stream_t *padded = NULL;
  TY_EXPECT_OK(ty_text_stream_create(tok, 0, NULL, 0, &padded));
  const char *none;
  size_t none_size;
  bool none_stopped;
  TY_EXPECT_OK(ty_text_stream_push(padded, ty_tokenizer_vocab_size(tok) + 5, &none, &none_size,
                                   &none_stopped));
  assert_int_equal(none_size, 0);
  TY_EXPECT_OK(ty_text_stream_push(padded, ids[0], &none, &none_size, &none_stopped));
  assert_true(none_size > 0 && strncmp(none, "the", none_size) == 0);
  ty_text_stream_destroy(padded);
  const char *piece;
  size_t size;
  TY_EXPECT_OK(ty_text_stream_finish(ts, &piece, &size));
  assert_int_equal(size, 0);
  ty_text_stream_destroy(ts);
  const char *empty[] = {""};
  TY_EXPECT_STATUS(ty_text_stream_create(tok, 0, empty, 1, &ts), TY_CODE_INVALID_ARGUMENT,
                   "stop string 0 is empty");
  free(ids);
  ty_tokenizer_destroy(tok);
}

/* Llama-2's byte fallback: <0x0A> then <0xAE> <0x87>. Decoded whole, the run
 * is not UTF-8 and becomes three U+FFFD; streamed, the newline has gone out
 * before the invalid bytes came, so it stays and only they are replaced. */
static void test_byte_fallback_run(void **state) {
  (void)state;
  ty_tokenizer_t *tok = load("llama2_metaspace");
  uint32_t ids[3];
  const char *names[3] = {"<0x0A>", "<0xAE>", "<0x87>"};
  for (int i = 0; i < 3; ++i) assert_true(ty_tokenizer_token_to_id(tok, names[i], 6, &ids[i]));
  ty_text_stream_t *ts = NULL;
  TY_EXPECT_OK(ty_text_stream_create(tok, 0, NULL, 0, &ts));
  char got[64];
  size_t got_size = stream_all(ts, ids, 3, got);
  assert_int_equal(got_size, 7);
  assert_memory_equal(got, "\n\xef\xbf\xbd\xef\xbf\xbd", 7);
  ty_text_stream_destroy(ts);
  ty_tokenizer_destroy(tok);
}

/* A stream finished before its first token (a request that ends at once:
 * the fuzzed server found it) gives no text, and touches no id. */
static void test_finish_without_tokens(void **state) {
  (void)state;
  ty_tokenizer_t *tok = load("gpt2");
  ty_text_stream_t *ts = NULL;
  TY_EXPECT_OK(ty_text_stream_create(tok, 0, NULL, 0, &ts));
  const char *piece;
  size_t size = 1;
  TY_EXPECT_OK(ty_text_stream_finish(ts, &piece, &size));
  assert_int_equal(size, 0);
  ty_text_stream_destroy(ts);
  ty_tokenizer_destroy(tok);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sanitize),
      cmocka_unit_test(test_random_streams),
      cmocka_unit_test(test_stop_never_leaks),
      cmocka_unit_test(test_byte_fallback_run),
      cmocka_unit_test(test_finish_without_tokens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
