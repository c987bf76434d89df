/* cpu_gemm_dot (backends/cpu/cpu_gemm_dot.c), the AVX-512 dot-product GEMM
 * that cpu_gemm runs for decode's few rows against a transposed B:
 *   - random shapes (M 1..20, N off the 6-row groups, K off 16 and past
 *     several hundred, padded leading dimensions, accumulate or not, 1..3
 *     threads) and decode's own (8 x 768 against [2000 x 768]^T) match an
 *     f64 reference within f32 rounding, element by element, and leave C's
 *     padding columns alone;
 *   - K = 0 (and M = 0, N = 0) writes nothing;
 *   - on a CPU without AVX-512F it refuses (false, C untouched), and says
 *     that the accuracy checks did not run.
 * Random inputs (seed printed; TY_TEST_SEED=<n> replays). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "backends/cpu/cpu_kernels.h"

static ty_test_rng_t g_rng;

static int64_t rand_in(int64_t lo, int64_t hi) { return ty_test_rng_range(&g_rng, lo, hi); }
static float *rand_buf(int64_t n) { return ty_test_rng_floats(&g_rng, n); }

typedef struct {
  int64_t m, n, k, lda, ldb, ldc;
  bool acc;
  int threads;
} dot_case_t;

/* Runs one case and compares with sum_p a[i,p] b[j,p] in f64 (plus the old
 * C with acc): |got - want| <= 1e-5 sum_p |a b| + 1e-30, where f32 rounding
 * of a K-term sum stays orders of magnitude below and a wrong row, column
 * or K range does not. C's padding columns keep their bits. */
static void check_case(const dot_case_t *t) {
  float *a = rand_buf(t->m * t->lda), *b = rand_buf(t->n * t->ldb);
  float *c0 = rand_buf(t->m * t->ldc);
  float *c = malloc((size_t)(t->m * t->ldc) * sizeof(float));
  assert_non_null(c);
  memcpy(c, c0, (size_t)(t->m * t->ldc) * sizeof(float));
  assert_true(cpu_gemm_dot(t->m, t->n, t->k, a, t->lda, b, t->ldb, c, t->ldc, t->acc,
                           t->threads));
  for (int64_t i = 0; i < t->m; ++i) {
    for (int64_t j = 0; j < t->ldc; ++j) {
      const float got = c[i * t->ldc + j];
      if (j >= t->n) {
        if (memcmp(&got, &c0[i * t->ldc + j], sizeof(float)) != 0) {
          fail_msg("M=%lld N=%lld K=%lld: padding C[%lld][%lld] was written",
                   (long long)t->m, (long long)t->n, (long long)t->k, (long long)i,
                   (long long)j);
        }
        continue;
      }
      double want = t->acc ? (double)c0[i * t->ldc + j] : 0.0, mag = fabs(want);
      for (int64_t p = 0; p < t->k; ++p) {
        const double x = (double)a[i * t->lda + p] * (double)b[j * t->ldb + p];
        want += x;
        mag += fabs(x);
      }
      if (!(fabs((double)got - want) <= 1e-5 * mag + 1e-30)) {
        fail_msg("M=%lld N=%lld K=%lld lda=%lld ldb=%lld ldc=%lld acc=%d threads=%d: "
                 "C[%lld][%lld] = %.9g, want %.9g",
                 (long long)t->m, (long long)t->n, (long long)t->k, (long long)t->lda,
                 (long long)t->ldb, (long long)t->ldc, t->acc, t->threads, (long long)i,
                 (long long)j, (double)got, want);
      }
    }
  }
  free(a);
  free(b);
  free(c0);
  free(c);
}

static void test_dot_matches_f64(void **state) {
  (void)state;
  if (!cpu_gemm_dot_supported()) {
    print_message("cpu_gemm_dot_test: no AVX-512F on this CPU: accuracy not checked "
                  "(cpu_gemm does not call it here)\n");
    return;
  }
  static const dot_case_t fixed[] = {
      {8, 2000, 768, 768, 768, 2000, false, 2},  /* decode's lm_head, fewer rows of B */
      {1, 50, 768, 768, 768, 50, true, 1},       /* one row, 4 of A's 4-row pass unused */
      {16, 97, 70, 70, 70, 97, false, 3},        /* K: 4 x 16 and a tail of 6 */
      {5, 7, 15, 16, 17, 9, true, 2},            /* K under 16: the masked tail alone */
      {8, 5, 32, 32, 32, 5, false, 3},           /* fewer B rows than one group */
  };
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; ++i) check_case(&fixed[i]);
  for (int i = 0; i < 200; ++i) {
    dot_case_t t = {.acc = rand_in(0, 1), .threads = (int)rand_in(1, 3)};
    t.m = rand_in(1, 20);
    t.n = rand_in(0, 3) ? rand_in(1, 40) : rand_in(41, 400);
    t.k = rand_in(0, 3) ? rand_in(1, 100) : rand_in(101, 900);
    t.lda = t.k + rand_in(0, 1) * rand_in(1, 5);
    t.ldb = t.k + rand_in(0, 1) * rand_in(1, 5);
    t.ldc = t.n + rand_in(0, 1) * rand_in(1, 5);
    check_case(&t);
  }
}

static void test_dot_empty_and_refused(void **state) {
  (void)state;
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {7, 7, 7, 7};
  /* K = 0, M = 0, N = 0: nothing to write, C untouched (as cpu_gemm_blocked). */
  assert_true(cpu_gemm_dot(2, 2, 0, a, 2, b, 2, c, 2, false, 1));
  assert_true(cpu_gemm_dot(0, 2, 2, a, 2, b, 2, c, 2, false, 1));
  assert_true(cpu_gemm_dot(2, 0, 2, a, 2, b, 2, c, 2, false, 1));
  assert_true(c[0] == 7 && c[1] == 7 && c[2] == 7 && c[3] == 7);
  const bool ran = cpu_gemm_dot(2, 2, 2, a, 2, b, 2, c, 2, false, 2);
  assert_int_equal(ran, cpu_gemm_dot_supported());
  if (ran) assert_true(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
  else assert_true(c[0] == 7 && c[1] == 7 && c[2] == 7 && c[3] == 7);
}

int main(void) {
  ty_test_rng_init(&g_rng, ty_test_seed());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dot_matches_f64),
      cmocka_unit_test(test_dot_empty_and_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
