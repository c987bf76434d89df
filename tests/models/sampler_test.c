/* models/sampler.c: which tokens survive top-k and top-p, against the
 * semantics of Hugging Face's warpers (transformers' TemperatureLogitsWarper,
 * TopKLogitsWarper, TopPLogitsWarper, applied in that order): top-p keeps the
 * smallest set of most likely tokens whose mass reaches p, so the token whose
 * cumulative probability crosses p is kept and the next one never sampled;
 * top-p's mass is renormalized over the top-k; temperature comes first.
 * On fixed logits, over many seeds, the set of tokens ever sampled must equal
 * the expected set exactly and each frequency must be near its renormalized
 * probability (fixed seeds: the test is deterministic). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/common/sample_params.h"
#include "models/sampler.h"
#include "ops/reference/ref_sample.h"

enum { VOCAB = 6, DRAWS = 20000 };

/* Probabilities, most likely first: 1 (.35), 3 (.25), 4 (.20), 2 (.10), then
 * 0 and 5 (.05 each). Cumulative: .35 .60 .80 .90 .95 1. */
static const double kProbs[VOCAB] = {0.05, 0.35, 0.10, 0.25, 0.20, 0.05};

/* Samples DRAWS times (seeds 0..DRAWS-1, one draw each) and checks that
 * exactly the tokens of `keep` (a 0/1 mask) appear, each at its probability
 * under `temperature` renormalized over the kept set, within 0.02. */
static void ty_expect_kept(double temperature, int64_t top_k, double top_p,
                           const int keep[VOCAB]) {
  float logits[VOCAB];
  for (int v = 0; v < VOCAB; ++v) logits[v] = (float)log(kProbs[v]);
  ty_sampler_t *s = NULL;
  assert_int_equal(ty_sampler_create(VOCAB, &s), TY_OK);
  ty_sampling_t a = {.greedy = false, .temperature = temperature, .top_k = top_k,
                     .top_p = top_p};
  int64_t count[VOCAB] = {0};
  for (uint64_t seed = 0; seed < DRAWS; ++seed) {
    uint64_t rng = seed;
    int64_t id = ty_sampler_pick(s, logits, &a, &rng, NULL, 0);
    assert_true(id >= 0 && id < VOCAB);
    count[id]++;
    assert_int_not_equal(rng, seed); /* one draw advanced the stream */
  }
  ty_sampler_destroy(s);
  double mass = 0;
  for (int v = 0; v < VOCAB; ++v) mass += keep[v] ? pow(kProbs[v], 1.0 / temperature) : 0;
  for (int v = 0; v < VOCAB; ++v) {
    double want = keep[v] ? pow(kProbs[v], 1.0 / temperature) / mass : 0;
    double got = (double)count[v] / DRAWS;
    if (keep[v] ? count[v] == 0 || fabs(got - want) > 0.02 : count[v] != 0) {
      fail_msg("T=%g top_k=%lld top_p=%g: token %d sampled %lld of %d times (%.4f), want %s "
               "%.4f", temperature, (long long)top_k, top_p, v, (long long)count[v], DRAWS, got,
               keep[v] ? "about" : "never, probability", want);
    }
  }
}

static void test_top_p_keeps_the_crossing_token(void **state) {
  (void)state;
  /* .35 < .5 <= .60: token 3 crosses the threshold and is kept; 4 never */
  ty_expect_kept(1.0, 0, 0.5, (const int[VOCAB]){0, 1, 0, 1, 0, 0});
  /* .60 < .65 <= .80: 4 crosses */
  ty_expect_kept(1.0, 0, 0.65, (const int[VOCAB]){0, 1, 0, 1, 1, 0});
  /* .80 < .85 <= .90: 2 crosses; the two .05 tokens never */
  ty_expect_kept(1.0, 0, 0.85, (const int[VOCAB]){0, 1, 1, 1, 1, 0});
  /* below the most likely token's mass: that token alone (min_tokens_to_keep 1) */
  ty_expect_kept(1.0, 0, 0.3, (const int[VOCAB]){0, 1, 0, 0, 0, 0});
  /* 1: everything */
  ty_expect_kept(1.0, 0, 1.0, (const int[VOCAB]){1, 1, 1, 1, 1, 1});
}

static void test_top_k_keeps_the_k_most_likely(void **state) {
  (void)state;
  ty_expect_kept(1.0, 1, 1.0, (const int[VOCAB]){0, 1, 0, 0, 0, 0});
  ty_expect_kept(1.0, 3, 1.0, (const int[VOCAB]){0, 1, 0, 1, 1, 0});
  ty_expect_kept(1.0, 4, 1.0, (const int[VOCAB]){0, 1, 1, 1, 1, 0});
  ty_expect_kept(1.0, VOCAB + 3, 1.0, (const int[VOCAB]){1, 1, 1, 1, 1, 1});
  /* A tie at the k-th place: the lower id (Hugging Face's TopKLogitsWarper
   * would keep every tied token; ours keeps exactly k, like torch.topk's
   * stable order). */
  ty_expect_kept(1.0, 5, 1.0, (const int[VOCAB]){1, 1, 1, 1, 1, 0});
}

static void test_top_p_is_renormalized_over_top_k(void **state) {
  (void)state;
  /* over the top 3 (.8): .4375 .75 1 */
  ty_expect_kept(1.0, 3, 0.7, (const int[VOCAB]){0, 1, 0, 1, 0, 0});
  ty_expect_kept(1.0, 3, 0.8, (const int[VOCAB]){0, 1, 0, 1, 1, 0});
}

static void test_temperature_comes_before_top_p(void **state) {
  (void)state;
  /* T=1: .35 .60 -> {1, 3} at .55; T=2 flattens it (p^(1/2), normalized:
   * .257 .217 .194 ...; cumulative .257 .474 .669): {1, 3, 4} */
  ty_expect_kept(1.0, 0, 0.55, (const int[VOCAB]){0, 1, 0, 1, 0, 0});
  ty_expect_kept(2.0, 0, 0.55, (const int[VOCAB]){0, 1, 0, 1, 1, 0});
}

/* ty_sampler_logprob (eval's) is bit for bit the chosen and top logprobs of
 * ty_sampler_logprobs (the server's), and the argmax is greedy's token, on
 * peaked random rows (a splitmix-like generator with a printed seed). */
static void test_one_logprob_for_eval_and_server(void **state) {
  (void)state;
  enum { V = 300 };
  const uint64_t seed = 34;
  uint64_t x = seed;
  float logits[V];
  ty_sampler_t *s = NULL;
  assert_int_equal(ty_sampler_create(V, &s), TY_OK);
  for (int row = 0; row < 50; ++row) {
    for (int v = 0; v < V; ++v) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      logits[v] = (float)((double)(x >> 11) / 9007199254740992.0 * 24.0 - 12.0);
    }
    ty_sampling_t greedy = {.greedy = true};
    uint64_t rng = 0;
    int64_t best = ty_sampler_pick(s, logits, &greedy, &rng, NULL, 0);
    int64_t top_ids[3];
    double top[3];
    for (int64_t id = 0; id < V; id += 13) {
      double server;
      int64_t arg = -1;
      ty_sampler_logprobs(s, logits, id, 3, &server, top_ids, top);
      double eval = ty_sampler_logprob(logits, V, id, &arg);
      if (memcmp(&eval, &server, sizeof(double)) != 0 || arg != best ||
          ty_sampler_logprob(logits, V, top_ids[0], NULL) != top[0]) {
        fail_msg("seed %llu row %d id %lld: eval %.17g, server %.17g, argmax %lld vs %lld",
                 (unsigned long long)seed, row, (long long)id, eval, server, (long long)arg,
                 (long long)best);
      }
    }
  }
  ty_sampler_destroy(s);
}

/* The host sampler is the `sample` op's definition: draw c of a stream
 * started at `seed` is the op's row with seeds {seed, c}, with the same
 * params (min_p and the penalties over the history included), token for
 * token, on random rows (a printed seed). Greedy draws nothing. */
static void test_pick_is_the_sample_op(void **state) {
  (void)state;
  enum { V = 50, PICKS = 300 };
  const uint64_t data_seed = 29;
  uint64_t x = data_seed;
  float logits[V];
  double row[V];
  ty_sampler_t *s = NULL;
  assert_int_equal(ty_sampler_create(V, &s), TY_OK);
  void *scratch = malloc(ty_ref_sample_scratch_bytes(V));
  assert_non_null(scratch);
  const int64_t history[6] = {3, 3, -1, 7, 3, 40};
  ty_sampling_t a = {.temperature = 0.8, .top_k = 20, .top_p = 0.9, .seed = 77,
                     .min_p = 0.05, .repetition_penalty = 1.3, .presence_penalty = 0.4,
                     .frequency_penalty = 0.3};
  assert_int_equal(ty_sampling_check(&a), TY_OK);
  const double params[TY_SAMPLE_P_COUNT] = {0.8, 20, 0.9, 0.05, 1.3, 0.4, 0.3};
  uint64_t rng = a.seed;
  for (int64_t c = 0; c < PICKS; ++c) {
    for (int v = 0; v < V; ++v) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      logits[v] = (float)((double)(x >> 11) / 9007199254740992.0 * 6.0 - 3.0);
      row[v] = logits[v];
    }
    int64_t want = ty_ref_sample_row(row, V, params, a.seed, c, history, 6, scratch, NULL);
    int64_t got = ty_sampler_pick(s, logits, &a, &rng, history, 6);
    if (got != want) {
      fail_msg("data seed %llu draw %lld: host %lld, op %lld", (unsigned long long)data_seed,
               (long long)c, (long long)got, (long long)want);
    }
  }
  assert_true(rng == a.seed + (uint64_t)PICKS * 0x9E3779B97F4A7C15ull);
  ty_sampling_t g = {.greedy = true, .repetition_penalty = 2};
  uint64_t before = rng;
  const double gp[TY_SAMPLE_P_COUNT] = {0, 0, 1, 0, 2, 0, 0};
  assert_int_equal(ty_sampler_pick(s, logits, &g, &rng, history, 6),
                   ty_ref_sample_row(row, V, gp, 0, 0, history, 6, scratch, NULL));
  assert_true(rng == before);
  free(scratch);
  ty_sampler_destroy(s);
}

/* The engine's history penalizes: a repetition penalty turns greedy away
 * from a token already made; zero-initialized penalties are off. */
static void test_penalties_use_the_history(void **state) {
  (void)state;
  const float logits[3] = {2.0f, 1.5f, 0.0f};
  const int64_t made[2] = {0, -1};
  ty_sampler_t *s = NULL;
  assert_int_equal(ty_sampler_create(3, &s), TY_OK);
  uint64_t rng = 0;
  ty_sampling_t plain = {.greedy = true};
  assert_int_equal(ty_sampler_pick(s, logits, &plain, &rng, made, 2), 0);
  ty_sampling_t rep = {.greedy = true, .repetition_penalty = 2};
  assert_int_equal(ty_sampler_pick(s, logits, &rep, &rng, made, 2), 1);
  assert_int_equal(ty_sampler_pick(s, logits, &rep, &rng, NULL, 0), 0);
  ty_sampling_t freq = {.greedy = true, .frequency_penalty = 0.6};
  assert_int_equal(ty_sampler_pick(s, logits, &freq, &rng, made, 2), 1);
  ty_sampler_destroy(s);
}

static void expect_sampling_error(ty_sampling_t a, const char *fragment) {
  ty_status_t st = ty_sampling_check(&a);
  if (!st) fail_msg("expected an error naming '%s'", fragment);
  print_message("  expected error: %s\n", ty_status_message(st));
  if (!strstr(ty_status_message(st), fragment)) {
    fail_msg("'%s' lacks '%s'", ty_status_message(st), fragment);
  }
  ty_status_free(st);
}

static void test_sampling_check_names_the_field(void **state) {
  (void)state;
  ty_sampling_t ok = {.temperature = 1, .top_p = 1};
  assert_int_equal(ty_sampling_check(&ok), TY_OK);
  ty_sampling_t a = ok;
  a.temperature = 0;
  expect_sampling_error(a, "temperature = 0: expected temperature > 0");
  a = ok, a.top_p = 0;
  expect_sampling_error(a, "top_p = 0: expected top_p in (0, 1]");
  a = ok, a.min_p = 1;
  expect_sampling_error(a, "min_p = 1: expected min_p in [0, 1)");
  a = ok, a.repetition_penalty = -1;
  expect_sampling_error(a, "repetition_penalty = -1");
  a = ok, a.presence_penalty = NAN;
  expect_sampling_error(a, "presence_penalty");
  a = ok, a.frequency_penalty = INFINITY;
  expect_sampling_error(a, "frequency_penalty");
  a = ok, a.top_k = -2;
  expect_sampling_error(a, "top_k = -2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_top_p_keeps_the_crossing_token),
      cmocka_unit_test(test_top_k_keeps_the_k_most_likely),
      cmocka_unit_test(test_top_p_is_renormalized_over_top_k),
      cmocka_unit_test(test_temperature_comes_before_top_p),
      cmocka_unit_test(test_one_logprob_for_eval_and_server),
      cmocka_unit_test(test_pick_is_the_sample_op),
      cmocka_unit_test(test_penalties_use_the_history),
      cmocka_unit_test(test_sampling_check_names_the_field),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
