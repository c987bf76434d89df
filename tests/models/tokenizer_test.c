/* Tests of models/tokenizer: every case of tests/fixtures/tokenizers/cases.json
 * (expected ids and decoded text computed by Hugging Face `tokenizers`) on
 * every fixture tokenizer, then bad files and bad input, each of which must
 * be a clear error and never a crash. */
#include "common/test_util.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer.h"
#include "models/tokenizer_internal.h" /* ty_tok_pre_tokenize, white-box */

#ifndef TY_TEST_TOKENIZER_DIR
#error "TY_TEST_TOKENIZER_DIR must name tests/fixtures/tokenizers"
#endif

static json_t *ty_cases_json(void) {
  static json_t *cases = NULL;
  if (!cases) {
    json_error_t error;
    cases = json_load_file(TY_TEST_TOKENIZER_DIR "/cases.json", JSON_ALLOW_NUL, &error);
    if (!cases) {
      print_error("cannot read cases.json: %s (line %d)\n", error.text, error.line);
    }
  }
  return cases;
}

static ty_tokenizer_t *ty_load_fixture(const char *name) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s/tokenizer.json", TY_TEST_TOKENIZER_DIR, name);
  ty_tokenizer_t *tok = NULL;
  ty_status_t s = ty_tokenizer_load_file(path, &tok);
  if (s) print_error("loading %s: %s\n", path, ty_status_message(s));
  TY_EXPECT_OK(s);
  return tok;
}

/* Compares ids; prints the first difference. */
static bool ty_ids_match(const char *what, const char *case_name, const json_t *expected,
                         const uint32_t *ids, size_t count) {
  size_t n = json_array_size(expected);
  size_t i = 0;
  while (i < n && i < count &&
         (json_int_t)ids[i] == json_integer_value(json_array_get(expected, i))) {
    ++i;
  }
  if (i == n && i == count) return true;
  print_error(
      "  case %s, %s: %zu ids, expected %zu; first difference at %zu: got %lld, "
      "expected %lld\n",
      case_name, what, count, n, i, i < count ? (long long)ids[i] : -1LL,
      i < n ? (long long)json_integer_value(json_array_get(expected, i)) : -1LL);
  return false;
}

static bool ty_text_match(const char *what, const char *case_name, const char *expected,
                          size_t expected_size, const char *text, size_t size) {
  if (size == expected_size && memcmp(text, expected, size) == 0) return true;
  size_t i = 0;
  while (i < size && i < expected_size && text[i] == expected[i]) ++i;
  print_error(
      "  case %s, %s: %zu bytes, expected %zu; first difference at byte %zu "
      "(got \"%.20s\", expected \"%.20s\")\n",
      case_name, what, size, expected_size, i, i < size ? text + i : "",
      i < expected_size ? expected + i : "");
  return false;
}

static bool ty_decode_match(const ty_tokenizer_t *tok, const char *what, const char *case_name,
                            const json_t *ids_json, uint32_t flags, const json_t *expected) {
  size_t n = json_array_size(ids_json);
  uint32_t *ids = malloc((n ? n : 1) * sizeof(uint32_t));
  assert_non_null(ids);
  for (size_t i = 0; i < n; ++i) ids[i] = (uint32_t)json_integer_value(json_array_get(ids_json, i));
  char *text = NULL;
  size_t size = 0;
  ty_status_t s = ty_tokenizer_decode(tok, ids, n, flags, &text, &size);
  free(ids);
  if (s) {
    print_error("  case %s, %s: %s\n", case_name, what, ty_status_message(s));
    ty_status_free(s);
    return false;
  }
  bool ok = ty_text_match(what, case_name, json_string_value(expected),
                          json_string_length(expected), text, size);
  free(text);
  return ok;
}

/* exp[key], or exp[fallback] when the generator left a repeat out. */
static const json_t *ty_exp(const json_t *exp, const char *key, const char *fallback) {
  const json_t *value = json_object_get(exp, key);
  return value ? value : json_object_get(exp, fallback);
}

/* One case on one tokenizer: encode with and without special tokens, three
 * decodes, and for byte-level files the exact round trip. */
static bool ty_check_case(const ty_tokenizer_t *tok, const json_t *c, const json_t *exp,
                          bool byte_level) {
  const char *name = json_string_value(json_object_get(c, "name"));
  const json_t *text_json = json_object_get(c, "text");
  const char *text = json_string_value(text_json);
  size_t size = json_string_length(text_json);
  bool ok = true;
  uint32_t *ids = NULL, *plain = NULL;
  size_t count = 0, plain_count = 0;
  ty_status_t s = ty_tokenizer_encode(tok, text, size, 0, &ids, &count);
  if (s) {
    print_error("  case %s: encode: %s\n", name, ty_status_message(s));
    ty_status_free(s);
    return false;
  }
  ok = ty_ids_match("ids", name, json_object_get(exp, "ids"), ids, count) && ok;
  s = ty_tokenizer_encode(tok, text, size, TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS, &plain,
                          &plain_count);
  if (s) {
    print_error("  case %s: encode without special tokens: %s\n", name, ty_status_message(s));
    ty_status_free(s);
    free(ids);
    return false;
  }
  ok = ty_ids_match("ids without special tokens", name, ty_exp(exp, "ids_plain", "ids"), plain,
                    plain_count) &&
       ok;
  ok = ty_decode_match(tok, "decode", name, json_object_get(exp, "ids"), 0,
                       json_object_get(exp, "decoded")) &&
       ok;
  ok = ty_decode_match(tok, "decode skipping special tokens", name, json_object_get(exp, "ids"),
                       TY_TOKENIZER_DECODE_SKIP_SPECIAL, ty_exp(exp, "decoded_skip", "decoded")) &&
       ok;
  ok = ty_decode_match(tok, "decode of ids without special tokens", name,
                       ty_exp(exp, "ids_plain", "ids"), 0,
                       ty_exp(exp, "decoded_plain", "decoded")) &&
       ok;
  const json_t *pre_tokens = json_object_get(exp, "pre_tokens");
  if (json_is_array(pre_tokens)) {
    /* The pre-tokenizer alone: BPE could hide a different split when no
     * merge crosses the boundary. */
    ty_tok_buf_t words = {0};
    ty_tok_pieces_t pieces = {0};
    s = ty_tok_pre_tokenize(tok, text, size, &words, &pieces);
    if (s) {
      print_error("  case %s: pre-tokenize: %s\n", name, ty_status_message(s));
      ty_status_free(s);
      ok = false;
    } else if (pieces.count != json_array_size(pre_tokens)) {
      print_error("  case %s: %zu pre-tokens, expected %zu\n", name, pieces.count,
                  json_array_size(pre_tokens));
      ok = false;
    } else {
      for (size_t i = 0; i < pieces.count; ++i) {
        const json_t *want = json_array_get(pre_tokens, i);
        char what[48];
        snprintf(what, sizeof(what), "pre-token %zu", i);
        if (!ty_text_match(what, name, json_string_value(want), json_string_length(want),
                           words.data + pieces.data[i].offset, pieces.data[i].size)) {
          ok = false;
          break;
        }
      }
    }
    ty_tok_buf_free(&words);
    ty_tok_pieces_free(&pieces);
  }
  if (byte_level && json_is_true(json_object_get(exp, "roundtrip"))) {
    /* Our own encode, our own decode: the text comes back byte for byte. */
    char *back = NULL;
    size_t back_size = 0;
    s = ty_tokenizer_decode(tok, plain, plain_count, 0, &back, &back_size);
    if (s) {
      print_error("  case %s: round trip: %s\n", name, ty_status_message(s));
      ty_status_free(s);
      ok = false;
    } else {
      ok = ty_text_match("decode(encode(text))", name, text, size, back, back_size) && ok;
      free(back);
    }
  }
  free(ids);
  free(plain);
  return ok;
}

static void ty_check_fixture(const char *fixture) {
  json_t *cases = ty_cases_json();
  assert_non_null(cases);
  const char *kind = json_string_value(json_object_get(json_object_get(cases, "kinds"), fixture));
  assert_non_null(kind);
  bool byte_level = strcmp(kind, "byte-level") == 0;
  ty_tokenizer_t *tok = ty_load_fixture(fixture);
  size_t i, passed = 0, total = 0;
  const json_t *c;
  json_array_foreach(json_object_get(cases, "cases"), i, c) {
    const json_t *exp = json_object_get(json_object_get(c, "expected"), fixture);
    assert_non_null(exp);
    ++total;
    if (ty_check_case(tok, c, exp, byte_level)) ++passed;
  }
  printf("tokenizer %s: %zu/%zu cases passed\n", fixture, passed, total);
  ty_tokenizer_destroy(tok);
  assert_true(total > 40);
  assert_int_equal(passed, total);
}

static void test_gpt2(void **state) {
  (void)state;
  ty_check_fixture("gpt2");
}
static void test_bytelevel_options(void **state) {
  (void)state;
  ty_check_fixture("bytelevel_options");
}
static void test_split_variants(void **state) {
  (void)state;
  ty_check_fixture("split_variants");
}
static void test_llama3(void **state) {
  (void)state;
  ty_check_fixture("llama3");
}
static void test_llama2_legacy(void **state) {
  (void)state;
  ty_check_fixture("llama2_legacy");
}
static void test_llama2_metaspace(void **state) {
  (void)state;
  ty_check_fixture("llama2_metaspace");
}
static void test_metaspace_split(void **state) {
  (void)state;
  ty_check_fixture("metaspace_split");
}

/* ---- small hand-written tokenizers ---- */

static ty_status_t ty_load_text(const char *json, ty_tokenizer_t **out) {
  return ty_tokenizer_load_json(json, strlen(json), "inline.json", out);
}

#define TY_MINI_MODEL "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "

static void test_no_decoder_joins_with_spaces(void **state) {
  (void)state;
  ty_tokenizer_t *tok = NULL;
  TY_EXPECT_OK(ty_load_text("{" TY_MINI_MODEL "\"merges\": [\"a b\"]}}", &tok));
  uint32_t *ids = NULL;
  size_t count = 0;
  /* No pre-tokenizer: the whole text is one word. */
  TY_EXPECT_OK(ty_tokenizer_encode(tok, "abab", 4, 0, &ids, &count));
  assert_int_equal(count, 2);
  assert_int_equal(ids[0], 2);
  assert_int_equal(ids[1], 2);
  free(ids);
  /* A character outside the vocabulary without unk_token is dropped, as in HF. */
  TY_EXPECT_OK(ty_tokenizer_encode(tok, "xa", 2, 0, &ids, &count));
  assert_int_equal(count, 1);
  assert_int_equal(ids[0], 0);
  free(ids);
  uint32_t in[] = {2, 0};
  char *text = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_tokenizer_decode(tok, in, 2, 0, &text, &size));
  assert_string_equal(text, "ab a");
  assert_int_equal(size, 4);
  free(text);
  assert_int_equal(ty_tokenizer_vocab_size(tok), 3);
  uint32_t id = 99;
  assert_true(ty_tokenizer_token_to_id(tok, "ab", 2, &id));
  assert_int_equal(id, 2);
  const char *token = NULL;
  assert_true(ty_tokenizer_id_to_token(tok, 1, &token, &size));
  assert_int_equal(size, 1);
  assert_memory_equal(token, "b", 1);
  assert_false(ty_tokenizer_id_to_token(tok, 3, &token, &size));
  assert_false(ty_tokenizer_is_special(tok, 0));
  ty_tokenizer_destroy(tok);
}

static void test_bad_text_and_ids(void **state) {
  (void)state;
  ty_tokenizer_t *tok = ty_load_fixture("gpt2");
  uint32_t *ids = (uint32_t *)0x1;
  size_t count = 7;
  TY_EXPECT_STATUS(ty_tokenizer_encode(tok, "ab\xff", 3, 0, &ids, &count), TY_CODE_INVALID_ARGUMENT,
                   "not valid UTF-8 (bad byte 0xff at offset 2)");
  TY_EXPECT_STATUS(ty_tokenizer_encode(tok, "\xed\xa0\x80", 3, 0, &ids, &count),
                   TY_CODE_INVALID_ARGUMENT, "offset 0");
  assert_int_equal(count, 7); /* outputs untouched on error */
  uint32_t bad[] = {5, 4000000000u};
  char *text = NULL;
  size_t size = 0;
  TY_EXPECT_STATUS(ty_tokenizer_decode(tok, bad, 2, 0, &text, &size), TY_CODE_INVALID_ARGUMENT,
                   "id 4000000000 (at position 1) is not in the vocabulary");
  TY_EXPECT_STATUS(ty_tokenizer_encode(tok, "a", 1, 0x80, &ids, &count), TY_CODE_INVALID_ARGUMENT,
                   "unknown flags");
  TY_EXPECT_OK(ty_tokenizer_encode(tok, "", 0, 0, &ids, &count));
  assert_int_equal(count, 0);
  assert_null(ids);
  TY_EXPECT_OK(ty_tokenizer_decode(tok, NULL, 0, 0, &text, &size));
  assert_int_equal(size, 0);
  assert_string_equal(text, "");
  free(text);
  ty_tokenizer_destroy(tok);
}

typedef struct ty_bad_case_t {
  const char *json;
  ty_code_t code;
  const char *message;
} ty_bad_case_t;

static void test_bad_files(void **state) {
  (void)state;
  static const ty_bad_case_t cases[] = {
      {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", TY_CODE_UNIMPLEMENTED,
       "model.type 'WordPiece' is not supported"},
      {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", TY_CODE_UNIMPLEMENTED,
       "model.type 'Unigram' is not supported"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", TY_CODE_INVALID_ARGUMENT,
       "model.merges: missing"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}",
       TY_CODE_INVALID_ARGUMENT, "model.merges[0]: token \"c\" is not in model.vocab"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
       TY_CODE_INVALID_ARGUMENT, "merged token \"ab\" is not in model.vocab"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a  a\"]}}",
       TY_CODE_INVALID_ARGUMENT, "model.merges[0]: \"a  a\" is not two tokens"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}}",
       TY_CODE_INVALID_ARGUMENT, "model.merges[0]: expected"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}",
       TY_CODE_INVALID_ARGUMENT, "model.vocab[\"a\"]: the id must be an integer"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}",
       TY_CODE_INVALID_ARGUMENT, "id 0 is given to both"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}",
       TY_CODE_INVALID_ARGUMENT, "ids are too sparse"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], \"dropout\": 0.1}}",
       TY_CODE_UNIMPLEMENTED, "BPE dropout"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], "
       "\"continuing_subword_prefix\": \"##\"}}",
       TY_CODE_UNIMPLEMENTED, "continuing_subword_prefix \"##\""},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
       "\"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
       TY_CODE_UNIMPLEMENTED, "pre_tokenizer: pre-tokenizer type 'Whitespace' is not supported"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": "
       "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": "
       "\"Digits\"}]}}",
       TY_CODE_UNIMPLEMENTED, "pre_tokenizer.pretokenizers[1]: pre-tokenizer type 'Digits'"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
       "\"normalizer\": {\"type\": \"NFC\"}}",
       TY_CODE_UNIMPLEMENTED, "normalizer type 'NFC' is not supported"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
       "\"decoder\": {\"type\": \"WordPiece\"}}",
       TY_CODE_UNIMPLEMENTED, "decoder type 'WordPiece' is not supported"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
       "\"post_processor\": {\"type\": \"RobertaProcessing\"}}",
       TY_CODE_UNIMPLEMENTED, "post-processor type 'RobertaProcessing'"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": "
       "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": \"Isolated\"}}",
       TY_CODE_INVALID_ARGUMENT, "pre_tokenizer.pattern.Regex: the pattern does not compile"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": "
       "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}}",
       TY_CODE_INVALID_ARGUMENT, "behavior: 'Sideways' is not"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": "
       "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}}",
       TY_CODE_INVALID_ARGUMENT, "replacement: expected one character"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": "
       "{\"type\": 7}}",
       TY_CODE_INVALID_ARGUMENT, "pre_tokenizer.type: expected a string"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
       "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
       "{\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": "
       "{\"ids\": [5]}}}}",
       TY_CODE_INVALID_ARGUMENT, "special token id 5 is not in the vocabulary"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
       "\"added_tokens\": [{\"id\": 0, \"content\": \"<s>\"}]}",
       TY_CODE_INVALID_ARGUMENT, "id 0 of \"<s>\" already belongs to \"a\""},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, "
       "\"added_tokens\": [{\"content\": \"<s>\"}]}",
       TY_CODE_INVALID_ARGUMENT, "added_tokens[0].id: missing"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"decoder\": {\"type\": "
       "\"Sequence\", \"decoders\": [{\"type\": \"Sequence\", \"decoders\": [{\"type\": "
       "\"Sequence\", \"decoders\": [{\"type\": \"Sequence\", \"decoders\": [{\"type\": "
       "\"Sequence\", \"decoders\": [{\"type\": \"Sequence\", \"decoders\": [{\"type\": "
       "\"Sequence\", \"decoders\": [{\"type\": \"Sequence\", \"decoders\": [{\"type\": "
       "\"Sequence\", \"decoders\": [{\"type\": \"Sequence\", \"decoders\": []}]}]}]}]}]}]}]}]}]}}",
       TY_CODE_INVALID_ARGUMENT, "nested deeper"},
      {"{\"model\": {\"vocab\": {}}}", TY_CODE_INVALID_ARGUMENT, "model.type: missing"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
       TY_CODE_INVALID_ARGUMENT, "model.vocab is empty"},
      {"{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"added_tokens\": "
       "[{\"id\": 0, \"content\": \"<s>\", \"special\": true}]}",
       TY_CODE_INVALID_ARGUMENT, "model.vocab is empty"},
      {"{\"model\": 3}", TY_CODE_INVALID_ARGUMENT, "model: missing or not an object"},
      {"[1, 2]", TY_CODE_INVALID_ARGUMENT, "top level is not a JSON object"},
      {"{\"model\": {\"type\": \"BPE\", ", TY_CODE_DATA_LOSS, "is not valid JSON"},
      {"", TY_CODE_DATA_LOSS, "is not valid JSON"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    ty_tokenizer_t *tok = (ty_tokenizer_t *)0x1;
    ty_status_t s = ty_load_text(cases[i].json, &tok);
    if (ty_status_code(s) != cases[i].code || !strstr(ty_status_message(s), cases[i].message)) {
      print_error("bad file %zu: %s\n", i, cases[i].json);
    }
    TY_EXPECT_STATUS(s, cases[i].code, cases[i].message);
    assert_ptr_equal(tok, (ty_tokenizer_t *)0x1);
  }
}

static void test_missing_file_and_folder(void **state) {
  (void)state;
  ty_tokenizer_t *tok = NULL;
  TY_EXPECT_STATUS(ty_tokenizer_load_file("/nonexistent/tokenizer.json", &tok), TY_CODE_NOT_FOUND,
                   "cannot read tokenizer file /nonexistent/tokenizer.json");
  TY_EXPECT_STATUS(ty_tokenizer_load_file(TY_TEST_TOKENIZER_DIR "/gpt2", &tok),
                   TY_CODE_INVALID_ARGUMENT, "is a folder; pass the tokenizer.json");
  assert_null(tok);
}

static void test_unk_token_missing_from_vocab(void **state) {
  (void)state;
  ty_tokenizer_t *tok = NULL;
  TY_EXPECT_OK(ty_load_text("{" TY_MINI_MODEL "\"merges\": [], \"unk_token\": \"<unk>\"}}", &tok));
  uint32_t *ids = NULL;
  size_t count = 0;
  TY_EXPECT_OK(ty_tokenizer_encode(tok, "ab", 2, 0, &ids, &count));
  assert_int_equal(count, 2);
  free(ids);
  TY_EXPECT_STATUS(ty_tokenizer_encode(tok, "az", 2, 0, &ids, &count), TY_CODE_INVALID_ARGUMENT,
                   "model.unk_token '<unk>' is not in model.vocab");
  ty_tokenizer_destroy(tok);
}

/* Several threads encode at once through the shared word cache. */
typedef struct ty_thread_arg_t {
  const ty_tokenizer_t *tok;
  const char *text;
  size_t size;
  const uint32_t *expected;
  size_t expected_count;
  int failures;
} ty_thread_arg_t;

static void *ty_encode_thread(void *p) {
  ty_thread_arg_t *arg = p;
  for (int round = 0; round < 20; ++round) {
    uint32_t *ids = NULL;
    size_t count = 0;
    ty_status_t s = ty_tokenizer_encode(arg->tok, arg->text, arg->size, 0, &ids, &count);
    if (s || count != arg->expected_count ||
        memcmp(ids, arg->expected, count * sizeof(uint32_t)) != 0) {
      arg->failures++;
    }
    ty_status_free(s);
    free(ids);
  }
  return NULL;
}

static void test_concurrent_encode(void **state) {
  (void)state;
  json_t *cases = ty_cases_json();
  assert_non_null(cases);
  const json_t *c = json_array_get(json_object_get(cases, "cases"),
                                   json_array_size(json_object_get(cases, "cases")) - 1);
  assert_string_equal(json_string_value(json_object_get(c, "name")), "long_text");
  ty_tokenizer_t *tok = ty_load_fixture("llama3");
  const json_t *text = json_object_get(c, "text");
  const json_t *exp =
      json_object_get(json_object_get(json_object_get(c, "expected"), "llama3"), "ids");
  size_t n = json_array_size(exp);
  uint32_t *expected = malloc(n * sizeof(uint32_t));
  assert_non_null(expected);
  for (size_t i = 0; i < n; ++i) expected[i] = (uint32_t)json_integer_value(json_array_get(exp, i));
  enum { kThreads = 4 };
  pthread_t threads[kThreads];
  ty_thread_arg_t args[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    args[t] =
        (ty_thread_arg_t){tok, json_string_value(text), json_string_length(text), expected, n, 0};
    assert_int_equal(pthread_create(&threads[t], NULL, ty_encode_thread, &args[t]), 0);
  }
  int failures = 0;
  for (int t = 0; t < kThreads; ++t) {
    pthread_join(threads[t], NULL);
    failures += args[t].failures;
  }
  free(expected);
  ty_tokenizer_destroy(tok);
  assert_int_equal(failures, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpt2),
      cmocka_unit_test(test_bytelevel_options),
      cmocka_unit_test(test_split_variants),
      cmocka_unit_test(test_llama3),
      cmocka_unit_test(test_llama2_legacy),
      cmocka_unit_test(test_llama2_metaspace),
      cmocka_unit_test(test_metaspace_split),
      cmocka_unit_test(test_no_decoder_joins_with_spaces),
      cmocka_unit_test(test_bad_text_and_ids),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_missing_file_and_folder),
      cmocka_unit_test(test_unk_token_missing_from_vocab),
      cmocka_unit_test(test_concurrent_encode),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  json_decref(ty_cases_json());
  return failed;
}
