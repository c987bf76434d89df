/* The cpu plugin's blocked GEMM has two paths, packed (Goto/BLIS) and
 * streaming (small M, no packing of B), that must give the same bits for
 * every element: that is what makes a decode row (M = 1, streaming) equal
 * to the same row inside a prefill block (packed) under deterministic=1.
 *   - for random shapes (M 1..70, N and K off every block multiple, K past
 *     two KC slices, all four trans combinations, accumulate or not, padded
 *     leading dimensions, 1..3 threads) and fixed ones (decode's, B rows
 *     4 and 8 KiB apart, trans_b with K past the streaming path's packed
 *     run of K) the two paths are memcmp-equal, on
 *     every micro-kernel family this CPU can run (plain C always; AVX2+FMA
 *     and AVX-512 where present; the families run are printed);
 *   - the families really differ (plain C's mul-then-add is not AVX2's FMA),
 *     so a forced family is the one that ran, and the SIMD register tiles
 *     (shared by both paths, so the check above cannot see them) fuse;
 *   - cpu_gemm_blocked (AUTO) is the best family's packed path's bits;
 *   - a family this CPU lacks is refused, not run.
 * Random inputs (seed printed; TY_TEST_SEED=<n> replays). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "backends/cpu/cpu_kernels.h"

static ty_test_rng_t g_rng;

static int64_t rand_in(int64_t lo, int64_t hi) { return ty_test_rng_range(&g_rng, lo, hi); }
static float *rand_buf(int64_t n) { return ty_test_rng_floats(&g_rng, n); }

typedef struct {
  bool ta, tb, acc;
  int64_t m, n, k, lda, ldb, ldc;
  int threads;
} gemm_case_t;

static const char *isa_name(cpu_gemm_isa_t isa) {
  switch (isa) {
    case CPU_GEMM_ISA_AUTO: return "auto";
    case CPU_GEMM_ISA_PLAIN: return "plain";
    case CPU_GEMM_ISA_AVX2: return "avx2";
    case CPU_GEMM_ISA_AVX512: return "avx512";
  }
  return "?";
}

/* C after path (a) and path (b) from the same inputs and starting C
 * (padding included: a write past N shows up). True when memcmp-equal. */
static bool paths_agree(const gemm_case_t *t, cpu_gemm_isa_t isa_a, cpu_gemm_path_t path_a,
                        cpu_gemm_isa_t isa_b, cpu_gemm_path_t path_b) {
  const int64_t arows = t->ta ? t->k : t->m, brows = t->tb ? t->n : t->k;
  float *a = rand_buf(arows * t->lda), *b = rand_buf(brows * t->ldb);
  float *c0 = rand_buf(t->m * t->ldc);
  float *c1 = malloc((size_t)(t->m * t->ldc) * sizeof(float));
  float *c2 = malloc((size_t)(t->m * t->ldc) * sizeof(float));
  assert_non_null(c1);
  assert_non_null(c2);
  memcpy(c1, c0, (size_t)(t->m * t->ldc) * sizeof(float));
  memcpy(c2, c0, (size_t)(t->m * t->ldc) * sizeof(float));
  assert_true(cpu_gemm_blocked_with(isa_a, path_a, t->ta, t->tb, t->m, t->n, t->k, a, t->lda, b,
                                    t->ldb, c1, t->ldc, t->acc, t->threads));
  assert_true(cpu_gemm_blocked_with(isa_b, path_b, t->ta, t->tb, t->m, t->n, t->k, a, t->lda, b,
                                    t->ldb, c2, t->ldc, t->acc, t->threads));
  const bool same = memcmp(c1, c2, (size_t)(t->m * t->ldc) * sizeof(float)) == 0;
  if (!same && isa_a == isa_b) {
    for (int64_t i = 0; i < t->m * t->ldc; ++i) {
      if (memcmp(&c1[i], &c2[i], sizeof(float)) != 0) {
        print_error("%s: M=%lld N=%lld K=%lld ta=%d tb=%d acc=%d threads=%d: first "
                    "difference at C[%lld][%lld]: %.9g vs %.9g\n",
                    isa_name(isa_a), (long long)t->m, (long long)t->n, (long long)t->k, t->ta,
                    t->tb, t->acc, t->threads, (long long)(i / t->ldc), (long long)(i % t->ldc),
                    (double)c1[i], (double)c2[i]);
        break;
      }
    }
  }
  free(a);
  free(b);
  free(c0);
  free(c1);
  free(c2);
  return same;
}

/* N and K are drawn near the blocks' edges as often as anywhere. */
static int64_t rand_dim(int64_t max) {
  static const int64_t edges[] = {8, 16, 32, 64, 128, 256, 512};
  if (rand_in(0, 1)) return rand_in(1, max);
  const int64_t e = edges[rand_in(0, 6)];
  const int64_t d = e + rand_in(-1, 1) * rand_in(1, 3);
  return d < 1 ? 1 : d;
}

static gemm_case_t rand_case(void) {
  gemm_case_t t = {.ta = rand_in(0, 1), .tb = rand_in(0, 1), .acc = rand_in(0, 1)};
  t.m = rand_in(0, 3) ? rand_in(1, 20) : rand_in(21, 70);
  t.n = rand_dim(300);
  t.k = rand_in(0, 3) == 0 ? rand_in(513, 800) : rand_dim(600);
  t.lda = (t.ta ? t.m : t.k) + rand_in(0, 1) * rand_in(1, 5);
  t.ldb = (t.tb ? t.k : t.n) + rand_in(0, 1) * rand_in(1, 5);
  t.ldc = t.n + rand_in(0, 1) * rand_in(1, 5);
  t.threads = (int)rand_in(1, 3);
  return t;
}

static void test_stream_equals_packed_on_every_family(void **state) {
  (void)state;
  static const cpu_gemm_isa_t families[] = {CPU_GEMM_ISA_PLAIN, CPU_GEMM_ISA_AVX2,
                                            CPU_GEMM_ISA_AVX512};
  /* Decode shapes of a real model besides the random ones. */
  static const gemm_case_t fixed[] = {
      {false, false, false, 1, 768, 768, 768, 768, 768, 2},
      {false, true, true, 1, 3072, 768, 768, 768, 3072, 2},
      {false, true, false, 16, 1000, 256, 256, 256, 1000, 3},
      {true, false, true, 5, 257, 1025, 5, 257, 257, 1},
      {false, false, true, 5, 1000, 300, 300, 1024, 1000, 2}, /* B rows 4 KiB apart */
      {false, false, false, 8, 1000, 300, 300, 2048, 1000, 2}, /* 8 KiB apart: copied */
      {false, false, true, 7, 1000, 600, 600, 1000, 1000, 3},  /* 4 + 3 rows, 3 threads */
      /* trans_b past CPU_STREAM_KT (1024): B packed in two runs of K. */
      {false, true, true, 8, 50, 1300, 1300, 1300, 50, 2},
      {false, true, false, 16, 1000, 1100, 1100, 1100, 1000, 3},
  };
  char covered[64] = "";
  for (size_t f = 0; f < sizeof families / sizeof families[0]; ++f) {
    if (!cpu_gemm_isa_supported(families[f])) {
      print_message("cpu_gemm_stream_test: %s: not on this CPU, not checked\n",
                    isa_name(families[f]));
      continue;
    }
    strcat(covered, " ");
    strcat(covered, isa_name(families[f]));
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; ++i) {
      assert_true(paths_agree(&fixed[i], families[f], CPU_GEMM_PATH_PACKED, families[f],
                              CPU_GEMM_PATH_STREAM));
    }
    for (int i = 0; i < 300; ++i) {
      const gemm_case_t t = rand_case();
      assert_true(paths_agree(&t, families[f], CPU_GEMM_PATH_PACKED, families[f],
                              CPU_GEMM_PATH_STREAM));
    }
  }
  print_message("cpu_gemm_stream_test: families checked:%s\n", covered);
  assert_true(strstr(covered, "plain") != NULL);
}

/* Plain C's mul-then-add rounds twice where FMA rounds once: over K = 700
 * some of 64 x 4 outputs differ, so forcing a family changes what runs. */
static void test_families_really_differ(void **state) {
  (void)state;
  const gemm_case_t t = {false, false, false, 4, 64, 700, 700, 64, 64, 1};
  const cpu_gemm_isa_t best = cpu_gemm_isa_best();
  if (best == CPU_GEMM_ISA_PLAIN) {
    print_message("cpu_gemm_stream_test: only plain C here, no second family to tell apart\n");
    assert_false(cpu_gemm_isa_supported(CPU_GEMM_ISA_AVX2));
    return;
  }
  assert_false(paths_agree(&t, CPU_GEMM_ISA_PLAIN, CPU_GEMM_PATH_STREAM, best,
                           CPU_GEMM_PATH_STREAM));
  assert_false(paths_agree(&t, CPU_GEMM_ISA_PLAIN, CPU_GEMM_PATH_PACKED, best,
                           CPU_GEMM_PATH_PACKED));
}

/* What the plugin calls: AUTO family and path, small M and large. */
static void test_auto_is_best_family_packed_bits(void **state) {
  (void)state;
  for (int i = 0; i < 40; ++i) {
    gemm_case_t t = rand_case();
    if (i % 2) t.m = rand_in(CPU_GEMM_SMALL_M + 1, CPU_GEMM_SMALL_M + 40);
    t.lda = t.ta ? t.m : t.k; /* a new M: keep lda consistent */
    assert_true(paths_agree(&t, CPU_GEMM_ISA_AUTO, CPU_GEMM_PATH_AUTO, cpu_gemm_isa_best(),
                            CPU_GEMM_PATH_PACKED));
  }
}

static void test_missing_family_is_refused(void **state) {
  (void)state;
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {9, 9, 9, 9};
  const bool has512 = cpu_gemm_isa_supported(CPU_GEMM_ISA_AVX512);
  const bool ran = cpu_gemm_blocked_with(CPU_GEMM_ISA_AVX512, CPU_GEMM_PATH_STREAM, false, false,
                                         2, 2, 2, a, 2, b, 2, c, 2, false, 1);
  assert_int_equal(ran, has512);
  if (has512) assert_true(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4);
  else assert_true(c[0] == 9 && c[1] == 9 && c[2] == 9 && c[3] == 9); /* not run */
  /* K = 0 writes nothing on the streaming path, as on the packed one. */
  float z[4] = {7, 7, 7, 7};
  assert_true(cpu_gemm_blocked_with(CPU_GEMM_ISA_AUTO, CPU_GEMM_PATH_STREAM, false, false, 2, 2,
                                    0, a, 2, b, 2, z, 2, false, 1));
  assert_true(z[0] == 7 && z[1] == 7 && z[2] == 7 && z[3] == 7);
}

int main(void) {
  ty_test_rng_init(&g_rng, ty_test_seed());
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stream_equals_packed_on_every_family),
      cmocka_unit_test(test_families_really_differ),
      cmocka_unit_test(test_auto_is_best_family_packed_bits),
      cmocka_unit_test(test_missing_family_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
