/* Tests of the BPE trainer (models/bpe_trainer.h): its merges against
 * a naive trainer written here (all pair counts recomputed every step, same
 * tie rule) on random corpora; the written tokenizer.json loads and encodes
 * and decodes text exactly; the result does not depend on input order;
 * min_frequency, special tokens and refusals. */
#include "common/test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer.h"
#include "models/bpe_trainer.h"

/* ---- a naive trainer over words of letters a-e (no pre-tokenizer
 * subtleties: the first word of a text is bare, the others start with a
 * space, which GPT-2's pattern keeps with the word) ---- */

typedef struct ty_naive_t {
  char **tokens; /* token texts, id order */
  size_t token_count;
  uint32_t *words; /* symbols, kMaxWord per word */
  size_t *lengths;
  size_t *freq;
  size_t word_count;
  char merges[4096][2][64];
  size_t merge_count;
} ty_naive_t;

enum { kMaxWord = 16 };

static void ty_naive_add_word(ty_naive_t *n, const char *w, size_t len) {
  for (size_t i = 0; i < n->word_count; ++i) {
    bool same = n->lengths[i] == len;
    for (size_t k = 0; same && k < len; ++k) same = n->words[i * kMaxWord + k] == (uint8_t)w[k];
    if (same) {
      n->freq[i]++;
      return;
    }
  }
  size_t i = n->word_count++;
  n->words = realloc(n->words, n->word_count * kMaxWord * sizeof(uint32_t));
  n->lengths = realloc(n->lengths, n->word_count * sizeof(size_t));
  n->freq = realloc(n->freq, n->word_count * sizeof(size_t));
  for (size_t k = 0; k < len; ++k) n->words[i * kMaxWord + k] = (uint8_t)w[k];
  n->lengths[i] = len;
  n->freq[i] = 1;
}

static void ty_naive_train(ty_naive_t *n, size_t vocab, size_t min_frequency) {
  n->tokens = calloc(vocab, sizeof(char *));
  for (int b = 0; b < 256; ++b) {
    n->tokens[b] = calloc(1, 2);
    n->tokens[b][0] = (char)b;
  }
  n->token_count = 256;
  while (n->token_count < vocab) {
    /* Count every pair, pick the most frequent, ties to smaller ids. */
    size_t best_count = 0;
    uint32_t best_l = 0, best_r = 0;
    for (size_t a = 0; a < n->word_count; ++a) {
      for (size_t k = 0; k + 1 < n->lengths[a]; ++k) {
        uint32_t l = n->words[a * kMaxWord + k], r = n->words[a * kMaxWord + k + 1];
        size_t count = 0;
        for (size_t b = 0; b < n->word_count; ++b) {
          for (size_t j = 0; j + 1 < n->lengths[b]; ++j) {
            if (n->words[b * kMaxWord + j] == l && n->words[b * kMaxWord + j + 1] == r) {
              count += n->freq[b];
              /* Overlapping "x x x" counts each position, as the trainer does. */
            }
          }
        }
        if (count > best_count || (count == best_count && count > 0 &&
                                   (l < best_l || (l == best_l && r < best_r)))) {
          best_count = count;
          best_l = l;
          best_r = r;
        }
      }
    }
    if (best_count < min_frequency || best_count == 0) break;
    char text[64];
    snprintf(text, sizeof(text), "%s%s", n->tokens[best_l], n->tokens[best_r]);
    uint32_t id = (uint32_t)n->token_count;
    for (size_t t = 256; t < n->token_count; ++t) {
      if (strcmp(n->tokens[t], text) == 0) id = (uint32_t)t;
    }
    if (id == n->token_count) n->tokens[n->token_count++] = strdup(text);
    snprintf(n->merges[n->merge_count][0], 64, "%s", n->tokens[best_l]);
    snprintf(n->merges[n->merge_count][1], 64, "%s", n->tokens[best_r]);
    n->merge_count++;
    for (size_t a = 0; a < n->word_count; ++a) {
      uint32_t *w = n->words + a * kMaxWord;
      size_t out = 0;
      for (size_t k = 0; k < n->lengths[a]; ++k) {
        if (k + 1 < n->lengths[a] && w[k] == best_l && w[k + 1] == best_r) {
          w[out++] = id;
          ++k;
        } else {
          w[out++] = w[k];
        }
      }
      n->lengths[a] = out;
    }
  }
}

static void ty_naive_free(ty_naive_t *n) {
  for (size_t i = 0; i < n->token_count; ++i) free(n->tokens[i]);
  free(n->tokens);
  free(n->words);
  free(n->lengths);
  free(n->freq);
}

/* GPT-2's byte-level text of a raw token (only a-e and space occur). */
static void ty_mapped(const char *raw, char *out) {
  size_t o = 0;
  for (const char *p = raw; *p; ++p) {
    if (*p == ' ') {
      out[o++] = '\xc4';
      out[o++] = '\xa0'; /* U+0120 */
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

static char *ty_train(const char *const *texts, size_t count, uint32_t vocab, uint32_t min_freq,
                      const char *const *specials, size_t special_count) {
  ty_tokenizer_trainer_options_t o = {vocab, min_freq, specials, special_count};
  ty_tokenizer_trainer_t *t = NULL;
  TY_EXPECT_OK(ty_tokenizer_trainer_create(&o, &t));
  for (size_t i = 0; i < count; ++i) {
    TY_EXPECT_OK(ty_tokenizer_trainer_add_text(t, texts[i], strlen(texts[i])));
  }
  TY_EXPECT_OK(ty_tokenizer_trainer_train(t, NULL, NULL));
  char *json = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_tokenizer_trainer_to_json(t, &json, &size));
  ty_tokenizer_trainer_destroy(t);
  return json;
}

static void test_against_naive(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  for (int round = 0; round < 12; ++round) {
    ty_naive_t naive;
    memset(&naive, 0, sizeof(naive));
    size_t text_count = 5 + ty_test_rng_next(&rng) % 20;
    char **texts = calloc(text_count, sizeof(char *));
    for (size_t i = 0; i < text_count; ++i) {
      texts[i] = calloc(1, 400);
      size_t words = 1 + ty_test_rng_next(&rng) % 30, at = 0;
      for (size_t w = 0; w < words; ++w) {
        char word[kMaxWord];
        size_t len = 0;
        if (w > 0) word[len++] = ' ';
        size_t letters = 1 + ty_test_rng_next(&rng) % 6;
        /* a skewed alphabet so that counts tie and repeat */
        for (size_t k = 0; k < letters; ++k) word[len++] = "aaabbcde"[ty_test_rng_next(&rng) % 8];
        memcpy(texts[i] + at, word, len);
        at += len;
        ty_naive_add_word(&naive, word, len);
      }
    }
    uint32_t vocab = 256 + 5 + (uint32_t)(ty_test_rng_next(&rng) % 60);
    uint32_t min_freq = 1 + (uint32_t)(ty_test_rng_next(&rng) % 3);
    const char *eot = "<|endoftext|>";
    char *json = ty_train((const char *const *)texts, text_count, vocab, min_freq, &eot, 1);
    ty_naive_train(&naive, vocab - 1, min_freq);
    json_error_t error;
    json_t *root = json_loads(json, 0, &error);
    assert_non_null(root);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    if (json_array_size(merges) != naive.merge_count) {
      fail_msg("round %d: %zu merges, the naive trainer made %zu", round,
               json_array_size(merges), naive.merge_count);
    }
    for (size_t m = 0; m < naive.merge_count; ++m) {
      char left[128], right[128];
      ty_mapped(naive.merges[m][0], left);
      ty_mapped(naive.merges[m][1], right);
      const char *a = json_string_value(json_array_get(json_array_get(merges, m), 0));
      const char *b = json_string_value(json_array_get(json_array_get(merges, m), 1));
      if (!a || !b || strcmp(a, left) != 0 || strcmp(b, right) != 0) {
        fail_msg("round %d, merge %zu: (%s, %s), the naive trainer made (%s, %s)", round, m,
                 a ? a : "?", b ? b : "?", left, right);
      }
    }
    /* The special token comes right after the learned tokens. */
    json_t *added = json_array_get(json_object_get(root, "added_tokens"), 0);
    assert_int_equal(json_integer_value(json_object_get(added, "id")), naive.token_count);
    json_decref(root);
    free(json);
    for (size_t i = 0; i < text_count; ++i) free(texts[i]);
    free(texts);
    ty_naive_free(&naive);
  }
}

static const char *const ty_corpus[] = {
    "The quick brown fox jumps over the lazy dog. The dog sleeps.\n",
    "It's 2024; numbers like 12345 and 3.14 stay as they are!\n\n  Indented  text\twith tabs.",
    "Caf\xc3\xa9 br\xc3\xbbl\303\251e \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x8e\211 emoji.",
    "the the the the then there these those thesis theme",
    "Don't stop; they'll see we've done what I'd said.",
};

static void test_json_loads_and_round_trips(void **state) {
  (void)state;
  const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  size_t corpus_count = sizeof(ty_corpus) / sizeof(ty_corpus[0]);
  char *json = ty_train(ty_corpus, corpus_count, 400, 1, specials, 3);
  ty_tokenizer_t *tok = NULL;
  TY_EXPECT_OK(ty_tokenizer_load_json(json, strlen(json), "trained", &tok));
  assert_int_equal(ty_tokenizer_vocab_size(tok), 400);
  uint32_t eos = 0;
  assert_true(ty_tokenizer_token_to_id(tok, "<|endoftext|>", 13, &eos));
  assert_int_equal(eos, 397);
  assert_true(ty_tokenizer_is_special(tok, eos));
  const char *unseen[] = {"Completely unseen words: zebra, quartz, \303\261and\xc3\xba!",
                          "the<|endoftext|>next<|im_start|>user\nhi<|im_end|>\n", "", " ",
                          "\n\n\n"};
  for (size_t i = 0; i < corpus_count + 5; ++i) {
    const char *text = i < corpus_count ? ty_corpus[i] : unseen[i - corpus_count];
    uint32_t *ids = NULL;
    size_t n = 0;
    TY_EXPECT_OK(ty_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n));
    for (size_t k = 0; k < n; ++k) assert_true(ids[k] < 400);
    char *back = NULL;
    size_t size = 0;
    TY_EXPECT_OK(ty_tokenizer_decode(tok, ids, n, 0, &back, &size));
    assert_int_equal(size, strlen(text));
    assert_memory_equal(back, text, size);
    if (i == 3) assert_true(n < strlen(text) / 2); /* frequent words became tokens */
    if (i == corpus_count + 1) {
      size_t specials_seen = 0;
      for (size_t k = 0; k < n; ++k) specials_seen += ids[k] >= 397;
      assert_int_equal(specials_seen, 3); /* <|endoftext|>, <|im_start|>, <|im_end|> */
    }
    free(ids);
    free(back);
  }
  ty_tokenizer_destroy(tok);
  free(json);
}

static void test_order_independent(void **state) {
  (void)state;
  const char *eot = "<|endoftext|>";
  const char *reversed[5];
  size_t n = sizeof(ty_corpus) / sizeof(ty_corpus[0]);
  for (size_t i = 0; i < n; ++i) reversed[i] = ty_corpus[n - 1 - i];
  char *a = ty_train(ty_corpus, n, 330, 2, &eot, 1);
  char *b = ty_train(reversed, n, 330, 2, &eot, 1);
  assert_string_equal(a, b);
  free(a);
  free(b);
}

static void test_min_frequency_and_refusals(void **state) {
  (void)state;
  /* "ab" twice and "cd" once: with min_frequency 2 only (a, b) merges. */
  const char *text[] = {"ab ab cd"};
  const char *eot = "<|endoftext|>";
  ty_tokenizer_trainer_options_t o = {1000, 2, &eot, 1};
  ty_tokenizer_trainer_t *t = NULL;
  TY_EXPECT_OK(ty_tokenizer_trainer_create(&o, &t));
  TY_EXPECT_OK(ty_tokenizer_trainer_add_text(t, text[0], strlen(text[0])));
  TY_EXPECT_STATUS(ty_tokenizer_trainer_add_text(t, "ok\xc3(", 4), TY_CODE_INVALID_ARGUMENT,
                   "not valid UTF-8 (byte 2 of 4)");
  TY_EXPECT_OK(ty_tokenizer_trainer_train(t, NULL, NULL));
  ty_tokenizer_trainer_stats_t st;
  ty_tokenizer_trainer_stats(t, &st);
  /* words "ab", " ab", " cd": (a,b) 2, (space,a) 1, (space,c) 1, (c,d) 1 */
  assert_int_equal(st.words, 3);
  assert_int_equal(st.distinct_words, 3);
  assert_int_equal(st.merges, 1);
  assert_int_equal(st.vocab_size, 258);
  TY_EXPECT_STATUS(ty_tokenizer_trainer_add_text(t, "x", 1), TY_CODE_FAILED_PRECONDITION,
                   "already trained");
  ty_tokenizer_trainer_destroy(t);

  o.vocab_size = 256;
  TY_EXPECT_STATUS(ty_tokenizer_trainer_create(&o, &t), TY_CODE_INVALID_ARGUMENT,
                   "vocab_size 256 is below the 256 byte tokens and 1 special tokens");
  const char *twice[] = {"<a>", "<a>"};
  ty_tokenizer_trainer_options_t o2 = {300, 1, twice, 2};
  TY_EXPECT_STATUS(ty_tokenizer_trainer_create(&o2, &t), TY_CODE_INVALID_ARGUMENT,
                   "special token \"<a>\" is given twice");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_naive),
      cmocka_unit_test(test_json_loads_and_round_trips),
      cmocka_unit_test(test_order_independent),
      cmocka_unit_test(test_min_frequency_and_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
