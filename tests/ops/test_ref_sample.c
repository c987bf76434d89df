/* The `sample` and `top_logprobs` reference (ops/reference/ref_sample.h)
 * against values worked out by hand: greedy ties, each penalty, the kept
 * sets of top_k / top_p / min_p, the id-order walk at a known u, the
 * splitmix64 stream, the raw-logit logprob and every invalid parameter. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/common/sample_params.h"
#include "ops/reference/reference.h"

/* params of one row: temperature, top_k, top_p, min_p, rep, presence, frequency */
#define P(t, k, tp, mp, rep, pr, fr) {t, k, tp, mp, rep, pr, fr}

static int64_t pick(const double *x, int64_t vocab, const double *params, uint64_t seed,
                    int64_t counter, const int64_t *history, int64_t len, double *out_lp) {
  void *scratch = malloc(ty_ref_sample_scratch_bytes(vocab));
  assert_non_null(scratch);
  assert_int_equal(ty_ref_sample_check(params, vocab, history, len, 0, NULL), TY_OK);
  int64_t id = ty_ref_sample_row(x, vocab, params, seed, counter, history, len, scratch, out_lp);
  free(scratch);
  return id;
}

static void test_greedy_ties_pick_the_lower_id(void **state) {
  (void)state;
  const double x[5] = {1, 3, 0.5, 3, 2};
  const double p[7] = P(0, 0, 1, 0, 1, 0, 0);
  double lp;
  assert_int_equal(pick(x, 5, p, 7, 0, NULL, 0, &lp), 1);
  double norm = 3 + log(exp(-2) + 1 + exp(-2.5) + 1 + exp(-1));
  assert_true(fabs(lp - (3 - norm)) < 1e-15);
  /* top_k / top_p / min_p do not matter to greedy, nor the seed */
  const double q[7] = P(0, 2, 0.1, 0.5, 1, 0, 0);
  assert_int_equal(pick(x, 5, q, 99, 5, NULL, 0, NULL), 1);
}

static void test_repetition_penalty_divides_positive_multiplies_negative(void **state) {
  (void)state;
  /* positive: 2 / 2 = 1 < 1.9, so 3 wins over the penalized 0 */
  const double x[4] = {2, -1, 0.5, 1.9};
  const double rep2[7] = P(0, 0, 1, 0, 2, 0, 0);
  const int64_t h0[2] = {0, -1};
  assert_int_equal(pick(x, 4, rep2, 0, 0, NULL, 0, NULL), 0);
  assert_int_equal(pick(x, 4, rep2, 0, 0, h0, 2, NULL), 3);
  /* negative: -1 * 2 = -2 < -1.5; dividing instead (-0.5) would keep 0 */
  const double y[3] = {-1, -1.5, -3};
  assert_int_equal(pick(y, 3, rep2, 0, 0, h0, 1, NULL), 1);
  /* rep < 1 raises them: 1.9 < 2 / 0.5 */
  const double rep_half[7] = P(0, 0, 1, 0, 0.5, 0, 0);
  const int64_t h3[1] = {3};
  assert_int_equal(pick(x, 4, rep_half, 0, 0, h3, 1, NULL), 3);
}

static void test_presence_and_frequency_count_occurrences(void **state) {
  (void)state;
  const double x[3] = {1.0, 0.7, 0.0};
  /* token 0 three times, token 1 once, -1 padding between */
  const int64_t h[5] = {0, 0, -1, 1, 0};
  const double freq[7] = P(0, 0, 1, 0, 1, 0, 0.2);
  /* 1 - 3 * 0.2 = 0.4 < 0.7 - 0.2 = 0.5; counted once, 0 would win (0.8) */
  assert_int_equal(pick(x, 3, freq, 0, 0, h, 5, NULL), 1);
  const double presence[7] = P(0, 0, 1, 0, 1, 0.2, 0);
  /* presence once per token, whatever the count: 0.8 > 0.5 */
  assert_int_equal(pick(x, 3, presence, 0, 0, h, 5, NULL), 0);
  const double presence_big[7] = P(0, 0, 1, 0, 1, 0.9, 0);
  const int64_t h0[1] = {0};
  /* 1 - 0.9 = 0.1 < 0.7 */
  assert_int_equal(pick(x, 3, presence_big, 0, 0, h0, 1, NULL), 1);
  /* rep first, then subtract: 1 / 2 - 0.2 = 0.3 < 0.7 - 0 (1 not in h0) */
  const double both[7] = P(0, 0, 1, 0, 2, 0.2, 0);
  assert_int_equal(pick(x, 3, both, 0, 0, h0, 1, NULL), 1);
  /* negative penalties reward: 0.7 + 0.5 > 1 */
  const double reward[7] = P(0, 0, 1, 0, 1, -0.5, 0);
  const int64_t h1[1] = {1};
  assert_int_equal(pick(x, 3, reward, 0, 0, h1, 1, NULL), 1);
}

/* Weights (temperature 1, logits log w): 0 .1, 1 1, 2 .4, 3 .7, 4 .2, 5 .05.
 * Candidate order: 1 3 2 4 0 5; total 2.45. */
static const double kW[6] = {0.1, 1.0, 0.4, 0.7, 0.2, 0.05};

static void ty_logw(double x[6]) {
  for (int v = 0; v < 6; ++v) x[v] = log(kW[v]);
}

/* The set of tokens drawn over counters 0..1999 of seed 11, as a bit mask. */
static unsigned drawn_set(const double params[7]) {
  double x[6];
  ty_logw(x);
  unsigned mask = 0;
  for (int64_t c = 0; c < 2000; ++c) mask |= 1u << pick(x, 6, params, 11, c, NULL, 0, NULL);
  return mask;
}

#define SET(...) ty_set((const int[]){__VA_ARGS__, -1})
static unsigned ty_set(const int *ids) {
  unsigned m = 0;
  for (; *ids >= 0; ++ids) m |= 1u << *ids;
  return m;
}

static void test_kept_sets(void **state) {
  (void)state;
  const double all[7] = P(1, 0, 1, 0, 1, 0, 0);
  assert_int_equal(drawn_set(all), SET(0, 1, 2, 3, 4, 5));
  const double k3[7] = P(1, 3, 1, 0, 1, 0, 0);
  assert_int_equal(drawn_set(k3), SET(1, 2, 3));
  /* top_p .6 of 2.45 = 1.47: 1 (1.0) then 3 (1.7) reaches it */
  const double p6[7] = P(1, 0, 0.6, 0, 1, 0, 0);
  assert_int_equal(drawn_set(p6), SET(1, 3));
  /* below the first's share: the first alone */
  const double p1[7] = P(1, 0, 0.1, 0, 1, 0, 0);
  assert_int_equal(drawn_set(p1), SET(1));
  /* min_p .15: w >= .15 */
  const double m15[7] = P(1, 0, 1, 0.15, 1, 0, 0);
  assert_int_equal(drawn_set(m15), SET(1, 2, 3, 4));
  /* top_k 4 (total 2.3) -> top_p .8 (1.84: 1, 1.7, 2.1) -> {1, 3, 2} -> min_p .5 -> {1, 3} */
  const double chain[7] = P(1, 4, 0.8, 0.5, 1, 0, 0);
  assert_int_equal(drawn_set(chain), SET(1, 3));
  const double chain_no_min[7] = P(1, 4, 0.8, 0, 1, 0, 0);
  assert_int_equal(drawn_set(chain_no_min), SET(1, 2, 3));
  /* top_p's total is over top_k's kept: top_k 2 (1.7), top_p .55 (.935): 1 alone;
   * over all (1.3475) it would keep 3 too */
  const double k2p[7] = P(1, 2, 0.55, 0, 1, 0, 0);
  assert_int_equal(drawn_set(k2p), SET(1));
}

/* The first counter of seed 11 whose u lies in (lo, hi). */
static int64_t counter_with_u(double lo, double hi, double *out_u) {
  for (int64_t c = 0; c < 100000; ++c) {
    double u = ty_ref_sample_uniform(11, c);
    if (u > lo && u < hi) {
      *out_u = u;
      return c;
    }
  }
  fail_msg("no u in (%g, %g)", lo, hi);
  return -1;
}

static void test_walk_in_id_order_at_known_u(void **state) {
  (void)state;
  double x[6], u = 0;
  ty_logw(x);
  /* top_k 3 keeps {1: 1.0, 2: 0.4, 3: 0.7}, total 2.1. In id order the walk
   * passes 1 at r = 1.0 (u = .476) and 2 at 1.4 (u = .667), so:
   * u in (.50, .60) -> 2 (in probability order it would be 3),
   * u < .40 -> 1, u > .75 -> 3. */
  const double k3[7] = P(1, 3, 1, 0, 1, 0, 0);
  int64_t c = counter_with_u(0.50, 0.60, &u);
  print_message("  counter %lld: u = %.6f -> token 2\n", (long long)c, u);
  assert_int_equal(pick(x, 6, k3, 11, c, NULL, 0, NULL), 2);
  c = counter_with_u(0.0, 0.40, &u);
  assert_int_equal(pick(x, 6, k3, 11, c, NULL, 0, NULL), 1);
  c = counter_with_u(0.75, 1.0, &u);
  assert_int_equal(pick(x, 6, k3, 11, c, NULL, 0, NULL), 3);
  /* Everything kept (2.45): 0 .1 | 1 1.1 | 2 1.5 | 3 2.2 | 4 2.4 | 5 2.45.
   * u in (.03, .04) -> r in (.0735, .098) -> 0; u in (.62, .88) -> 3;
   * u in (.99, 1) -> r > 2.4255 -> 5 */
  const double all[7] = P(1, 0, 1, 0, 1, 0, 0);
  c = counter_with_u(0.03, 0.04, &u);
  assert_int_equal(pick(x, 6, all, 11, c, NULL, 0, NULL), 0);
  c = counter_with_u(0.62, 0.88, &u);
  assert_int_equal(pick(x, 6, all, 11, c, NULL, 0, NULL), 3);
  c = counter_with_u(0.99, 1.0, &u);
  assert_int_equal(pick(x, 6, all, 11, c, NULL, 0, NULL), 5);
  /* temperature 0.5 squares the weights: .01 1 .16 .49 .04 .0025 (1.7025),
   * walked 0 .01 | 1 1.01 | 2 1.17 | ...: token 2 for r in (1.01, 1.17],
   * u in (.5932, .6872]; take u in (.60, .68) */
  const double t05[7] = P(0.5, 0, 1, 0, 1, 0, 0);
  c = counter_with_u(0.60, 0.68, &u);
  assert_int_equal(pick(x, 6, t05, 11, c, NULL, 0, NULL), 2);
}

/* splitmix64 with state s: s += golden, then the finalizer. The first output
 * from state 0 is 0xE220A8397B1DCDAF (Vigna's reference splitmix64.c). */
static void test_splitmix_stream(void **state) {
  (void)state;
  assert_true(ty_ref_sample_uniform(0, 0) ==
              (double)(0xE220A8397B1DCDAFull >> 11) / 9007199254740992.0);
  uint64_t s = 123456789;
  for (int64_t c = 0; c < 100; ++c) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    double want = (double)(z >> 11) * (1.0 / 9007199254740992.0);
    assert_true(ty_ref_sample_uniform(123456789, c) == want);
    assert_true(want >= 0 && want < 1);
  }
}

static void test_logprob_is_over_raw_logits(void **state) {
  (void)state;
  const double x[4] = {2, 1, 0.5, 1.9};
  /* penalties and temperature change the pick, not the distribution reported */
  const double p[7] = P(0.7, 0, 1, 0, 3, 1, 0);
  const int64_t h[1] = {0};
  double lp;
  int64_t id = pick(x, 4, p, 5, 3, h, 1, &lp);
  double norm = 2 + log(1 + exp(-1) + exp(-1.5) + exp(-0.1));
  assert_true(fabs(lp - (x[id] - norm)) < 1e-15);
  assert_true(ty_ref_sample_logprob(x, 4, id) == lp);
}

static void test_batch_rows_are_independent(void **state) {
  (void)state;
  double logits[3 * 6], params[3 * 7], ids[3], lps[3];
  int64_t seeds[6] = {11, 4, 11, 4, 99, 0};
  const int64_t history[3 * 2] = {-1, -1, 3, -1, 1, 1};
  for (int r = 0; r < 3; ++r) {
    ty_logw(logits + r * 6);
    const double p[7] = P(1, 0, 1, 0, 1.5, 0.1, 0.2);
    memcpy(params + r * 7, p, sizeof(p));
  }
  assert_int_equal(ty_ref_sample(logits, 3, 6, params, seeds, history, 2, ids, lps), TY_OK);
  for (int r = 0; r < 3; ++r) {
    double lp;
    int64_t want = pick(logits, 6, params, (uint64_t)seeds[2 * r], seeds[2 * r + 1],
                        history + 2 * r, 2, &lp);
    assert_true(ids[r] == (double)want && lps[r] == lp);
  }
}

static void expect_bad(const double p[7], const int64_t *history, int64_t len,
                       const char *fragment) {
  double logits[2 * 6], params[2 * 7], ids[2] = {-7, -7}, lps[2] = {-7, -7};
  int64_t seeds[4] = {1, 0, 1, 0}, hist[2 * 2] = {-1, -1, -1, -1};
  ty_logw(logits);
  ty_logw(logits + 6);
  const double good[7] = P(1, 0, 1, 0, 1, 0, 0);
  memcpy(params, good, sizeof(good));
  memcpy(params + 7, p, 7 * sizeof(double));
  if (history) memcpy(hist + 2, history, (size_t)len * sizeof(int64_t));
  ty_status_t s = ty_ref_sample(logits, 2, 6, params, seeds, hist, 2, ids, lps);
  if (!s) fail_msg("expected an error with '%s'", fragment);
  const char *msg = ty_status_message(s);
  print_message("  expected error: %s\n", msg);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  if (!strstr(msg, fragment) || !strstr(msg, "row 1")) fail_msg("'%s' lacks '%s'", msg, fragment);
  assert_true(ids[0] == -7 && lps[0] == -7); /* nothing written */
  ty_status_free(s);
}

static void test_invalid_params(void **state) {
  (void)state;
  expect_bad((const double[7])P(-1, 0, 1, 0, 1, 0, 0), NULL, 0, "temperature = -1");
  expect_bad((const double[7])P(INFINITY, 0, 1, 0, 1, 0, 0), NULL, 0, "temperature = inf");
  expect_bad((const double[7])P(1, -1, 1, 0, 1, 0, 0), NULL, 0, "top_k = -1");
  expect_bad((const double[7])P(1, 1.5, 1, 0, 1, 0, 0), NULL, 0, "top_k = 1.5");
  expect_bad((const double[7])P(1, 0, 0, 0, 1, 0, 0), NULL, 0, "top_p = 0: expected a value in (0, 1]");
  expect_bad((const double[7])P(1, 0, 1.5, 0, 1, 0, 0), NULL, 0, "top_p = 1.5");
  expect_bad((const double[7])P(1, 0, 1, 1, 1, 0, 0), NULL, 0, "min_p = 1");
  expect_bad((const double[7])P(1, 0, 1, -0.1, 1, 0, 0), NULL, 0, "min_p = -0.1");
  expect_bad((const double[7])P(1, 0, 1, 0, 0, 0, 0), NULL, 0, "repetition_penalty = 0");
  expect_bad((const double[7])P(1, 0, 1, 0, 1, NAN, 0), NULL, 0, "presence_penalty");
  expect_bad((const double[7])P(1, 0, 1, 0, 1, 0, INFINITY), NULL, 0, "frequency_penalty");
  const double good[7] = P(1, 0, 1, 0, 1, 0, 0);
  expect_bad(good, (const int64_t[2]){-1, 6}, 2, "history id 6 at index 1, outside [-1, 6)");
  expect_bad(good, (const int64_t[2]){-2, 0}, 2, "history id -2");
}

static void test_top_logprobs(void **state) {
  (void)state;
  const double x[2 * 5] = {0.5, 2, 2, -1, 1, /* row 1 */ 3, 3, 3, 3, 4};
  double ids[2 * 3], lps[2 * 3];
  assert_int_equal(ty_ref_top_logprobs(x, 2, 5, 3, ids, lps), TY_OK);
  const double want_ids[6] = {1, 2, 4, 4, 0, 1};
  for (int i = 0; i < 6; ++i) assert_true(ids[i] == want_ids[i]);
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 3; ++j) {
      double want = ty_ref_sample_logprob(x + 5 * r, 5, (int64_t)ids[3 * r + j]);
      assert_true(fabs(lps[3 * r + j] - want) < 1e-15);
    }
  }
  ty_status_t s = ty_ref_top_logprobs(x, 2, 5, 6, ids, lps);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(ty_status_message(s), "k = 6 must lie in [1, vocab = 5]"));
  ty_status_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy_ties_pick_the_lower_id),
      cmocka_unit_test(test_repetition_penalty_divides_positive_multiplies_negative),
      cmocka_unit_test(test_presence_and_frequency_count_occurrences),
      cmocka_unit_test(test_kept_sets),
      cmocka_unit_test(test_walk_in_id_order_at_known_u),
      cmocka_unit_test(test_splitmix_stream),
      cmocka_unit_test(test_logprob_is_over_raw_logits),
      cmocka_unit_test(test_batch_rows_are_independent),
      cmocka_unit_test(test_invalid_params),
      cmocka_unit_test(test_top_logprobs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
