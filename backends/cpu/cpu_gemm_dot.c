/* Few rows against a transposed B as dot products (AVX-512F), for
 * cpu_gemm's non-deterministic path: decode's tied lm_head, 8 x 768 @
 * [50257 x 768]^T, and any linear layer stored [N, K].
 *
 *   C[i, j] (+)= sum_p A[i, p] B[j, p]      A [M, K], B [N, K], row-major f32
 *
 * Each C element is the sum of 16 lane-wise FMA chains over K (lane l takes
 * p = l, l + 16, ...; a K tail past the last multiple of 16 is masked),
 * then the 16 lanes added: not the blocked GEMM's one chain in k order, so
 * its bits differ from it (and a row's bits do not depend on M or the
 * threads, but nothing promises that). Checked against the f64 reference
 * like every cpu_gemm path (matmul conformance, cpu_kernels_test).
 *
 * Why it exists: the streaming path (cpu_gemm_blocked.c) must transpose B
 * into slivers to keep its one-chain order, and the tied lm_head read that
 * way ran at ~10 GB/s from DRAM. Here a thread reads its contiguous run of
 * B's rows in order, six rows at a time, each row once for every four rows
 * of A (kept in L1), and prefetches the next six rows as it goes. AMD EPYC
 * (Zen 4), 2 threads, 8 x 768 @ [50257 x 768]^T from DRAM: 7.6 ms against
 * 9.1 (streaming path) and 15.0 (dnnl_sgemm); more in cpu_gemm. */
#include <stdint.h>
#include <stdlib.h>

#include "cpu_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CPU_DOT_X86 1
#endif

#define CPU_DOT_JB 6 /* rows of B per group */
#define CPU_DOT_R 4  /* rows of A per pass over a group: 24 accumulators */

#ifdef CPU_DOT_X86
/* The accumulators are named (accI_Q), not an array: GCC at -O2 keeps an
 * array of vectors in memory (see cpu_gemm_blocked.c). */
#define CPU_DOT_EACH_Q(X, i) X(i, 0) X(i, 1) X(i, 2) X(i, 3) X(i, 4) X(i, 5)
#define CPU_DOT_EACH(X) \
  CPU_DOT_EACH_Q(X, 0) CPU_DOT_EACH_Q(X, 1) CPU_DOT_EACH_Q(X, 2) CPU_DOT_EACH_Q(X, 3)

/* C rows i0..i0+rows-1, columns j..j+cols-1 (rows <= R, cols <= JB): ar[i]
 * and bj[q] point at A's and B's rows (repeated past rows/cols, whose sums
 * are dropped); pf > 0 prefetches B pf floats ahead of each row's reads. */
__attribute__((target("avx512f"))) static void cpu_dot_group(
    int64_t k, const float *const ar[CPU_DOT_R], const float *const bj[CPU_DOT_JB], float *c,
    int64_t ldc, int64_t rows, int64_t cols, bool add, int64_t pf) {
  const __m512 zero = _mm512_setzero_ps();
#define CPU_DECL(i, q) __m512 acc##i##_##q = zero;
  CPU_DOT_EACH(CPU_DECL)
#undef CPU_DECL
  const int64_t k16 = k - k % 16;
#define CPU_STEP(LOAD)                                                          \
  do {                                                                          \
    const __m512 b0 = LOAD(bj[0]), b1 = LOAD(bj[1]), b2 = LOAD(bj[2]);          \
    const __m512 b3 = LOAD(bj[3]), b4 = LOAD(bj[4]), b5 = LOAD(bj[5]);          \
    const __m512 a0 = LOAD(ar[0]), a1 = LOAD(ar[1]), a2 = LOAD(ar[2]),          \
                 a3 = LOAD(ar[3]);                                              \
    CPU_DOT_EACH(CPU_FMA)                                                       \
  } while (0)
#define CPU_FMA(i, q) acc##i##_##q = _mm512_fmadd_ps(a##i, b##q, acc##i##_##q);
#define CPU_LOAD_FULL(row) _mm512_loadu_ps((row) + p)
  for (int64_t p = 0; p < k16; p += 16) {
    if (pf) {
      for (int q = 0; q < CPU_DOT_JB; ++q) {
        _mm_prefetch((const char *)(bj[q] + p + pf), _MM_HINT_T0);
      }
    }
    CPU_STEP(CPU_LOAD_FULL);
  }
  if (k16 < k) {
    const __mmask16 mask = (__mmask16)((1u << (k - k16)) - 1u);
    const int64_t p = k16;
#define CPU_LOAD_TAIL(row) _mm512_maskz_loadu_ps(mask, (row) + p)
    CPU_STEP(CPU_LOAD_TAIL);
#undef CPU_LOAD_TAIL
  }
#undef CPU_LOAD_FULL
#undef CPU_FMA
#undef CPU_STEP
  float sums[CPU_DOT_R][CPU_DOT_JB];
#define CPU_SUM(i, q) sums[i][q] = _mm512_reduce_add_ps(acc##i##_##q);
  CPU_DOT_EACH(CPU_SUM)
#undef CPU_SUM
  for (int64_t i = 0; i < rows; ++i) {
    float *cr = c + i * ldc;
    for (int64_t q = 0; q < cols; ++q) cr[q] = add ? cr[q] + sums[i][q] : sums[i][q];
  }
}
#endif

bool cpu_gemm_dot_supported(void) {
#ifdef CPU_DOT_X86
  return cpu_gemm_isa_best() == CPU_GEMM_ISA_AVX512;
#else
  return false;
#endif
}

bool cpu_gemm_dot(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float *c, int64_t ldc, bool accumulate, int threads) {
  if (m <= 0 || n <= 0 || k <= 0) return true; /* as cpu_gemm_blocked: C untouched */
#ifdef CPU_DOT_X86
  if (!cpu_gemm_dot_supported()) return false;
  const int64_t groups = (n + CPU_DOT_JB - 1) / CPU_DOT_JB;
  int nt = threads < groups ? threads : (int)groups;
  if (nt < 1) nt = 1;
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    const int64_t tn = omp_get_thread_num(), tc = omp_get_num_threads();
#else
    const int64_t tn = 0, tc = 1;
#endif
    /* A contiguous run of groups per thread: its rows of B are one range. */
    const int64_t g0 = groups * tn / tc, g1 = groups * (tn + 1) / tc;
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t j = g * CPU_DOT_JB, cols = n - j < CPU_DOT_JB ? n - j : CPU_DOT_JB;
      const float *bj[CPU_DOT_JB];
      for (int q = 0; q < CPU_DOT_JB; ++q) bj[q] = b + (j + (q < cols ? q : 0)) * ldb;
      for (int64_t i0 = 0; i0 < m; i0 += CPU_DOT_R) {
        const int64_t rows = m - i0 < CPU_DOT_R ? m - i0 : CPU_DOT_R;
        const float *ar[CPU_DOT_R];
        for (int i = 0; i < CPU_DOT_R; ++i) ar[i] = a + (i0 + (i < rows ? i : 0)) * lda;
        /* The first pass reads B from DRAM: it prefetches the next group's
         * rows (the hint never faults past B's end); later passes find the
         * group in L1/L2. */
        cpu_dot_group(k, ar, bj, c + i0 * ldc + j, ldc, rows, cols, accumulate,
                      i0 == 0 ? CPU_DOT_JB * ldb : 0);
      }
    }
  }
  return true;
#else
  (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)c, (void)ldc;
  (void)accumulate, (void)threads;
  return false;
#endif
}
