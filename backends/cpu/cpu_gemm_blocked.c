/* The GEMM behind matmul when the plugin is built without oneDNN: packed,
 * cache-blocked, OpenMP over blocks of C, with a register-tile micro-kernel
 * picked at run time from the CPU's ISA (AVX-512 8x32, AVX2+FMA 6x16, plain
 * C 4x8).
 *
 *   C[m, n] (+)= sum_p op(A)[m, p] op(B)[p, n]      row-major f32
 *
 * Loop nest (Goto/BLIS): for each MC x NC block of C (one OpenMP task), for
 * each KC slice of K, pack op(B)[KC, NC] into NR-wide slivers and
 * op(A)[MC, KC] into MR-tall slivers (zero-padded at the edges), then run the
 * micro-kernel over the MR x NR tiles. A KC x NR sliver of B stays in L1 and
 * the MC x KC block of A in L2. Accumulation is f32 FMA in the order of K:
 * checked through matmul at normalised mean squared error < 1e-10. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CPU_GEMM_X86 1
#endif

#define CPU_MC 96 /* a multiple of every MR */
/* CPU_KC (cpu_kernels.h): the K slice, which attention anchors at. */
#define CPU_NC 512 /* a multiple of every NR */

/* acc (MR x NR) = packed A sliver x packed B sliver; C tile (+)= acc. */
typedef void (*cpu_micro_fn)(int64_t kc, const float *ap, const float *bp, float *c,
                             int64_t ldc, int64_t mr, int64_t nr, bool add);

/* Writes an MR x NR tile held in `tile` (row stride NR) into C. */
static void cpu_tile_store(const float *tile, int64_t nr_full, float *c, int64_t ldc,
                           int64_t mr, int64_t nr, bool add) {
  for (int64_t i = 0; i < mr; ++i) {
    float *cr = c + i * ldc;
    const float *t = tile + i * nr_full;
    if (add) {
      for (int64_t j = 0; j < nr; ++j) cr[j] += t[j];
    } else {
      for (int64_t j = 0; j < nr; ++j) cr[j] = t[j];
    }
  }
}

static void cpu_micro_4x8(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                          int64_t mr, int64_t nr, bool add) {
  float acc[4 * 8] = {0};
  for (int64_t p = 0; p < kc; ++p) {
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 8; ++j) acc[i * 8 + j] += ap[p * 4 + i] * bp[p * 8 + j];
    }
  }
  cpu_tile_store(acc, 8, c, ldc, mr, nr, add);
}

#ifdef CPU_GEMM_X86
__attribute__((target("avx2,fma"))) static void cpu_micro_6x16(int64_t kc, const float *ap,
                                                               const float *bp, float *c,
                                                               int64_t ldc, int64_t mr,
                                                               int64_t nr, bool add) {
  __m256 acc[6][2];
  for (int i = 0; i < 6; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + p * 16), b1 = _mm256_loadu_ps(bp + p * 16 + 8);
    for (int i = 0; i < 6; ++i) {
      const __m256 a = _mm256_broadcast_ss(ap + p * 6 + i);
      acc[i][0] = _mm256_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(a, b1, acc[i][1]);
    }
  }
  if (mr == 6 && nr == 16) {
    for (int i = 0; i < 6; ++i) {
      float *cr = c + i * ldc;
      __m256 r0 = acc[i][0], r1 = acc[i][1];
      if (add) {
        r0 = _mm256_add_ps(r0, _mm256_loadu_ps(cr));
        r1 = _mm256_add_ps(r1, _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, r0);
      _mm256_storeu_ps(cr + 8, r1);
    }
    return;
  }
  float tile[6 * 16];
  for (int i = 0; i < 6; ++i) {
    _mm256_storeu_ps(tile + i * 16, acc[i][0]);
    _mm256_storeu_ps(tile + i * 16 + 8, acc[i][1]);
  }
  cpu_tile_store(tile, 16, c, ldc, mr, nr, add);
}

__attribute__((target("avx512f"))) static void cpu_micro_8x32(int64_t kc, const float *ap,
                                                              const float *bp, float *c,
                                                              int64_t ldc, int64_t mr,
                                                              int64_t nr, bool add) {
  __m512 acc[8][2];
  for (int i = 0; i < 8; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_loadu_ps(bp + p * 32), b1 = _mm512_loadu_ps(bp + p * 32 + 16);
    for (int i = 0; i < 8; ++i) {
      const __m512 a = _mm512_set1_ps(ap[p * 8 + i]);
      acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
    }
  }
  if (mr == 8 && nr == 32) {
    for (int i = 0; i < 8; ++i) {
      float *cr = c + i * ldc;
      __m512 r0 = acc[i][0], r1 = acc[i][1];
      if (add) {
        r0 = _mm512_add_ps(r0, _mm512_loadu_ps(cr));
        r1 = _mm512_add_ps(r1, _mm512_loadu_ps(cr + 16));
      }
      _mm512_storeu_ps(cr, r0);
      _mm512_storeu_ps(cr + 16, r1);
    }
    return;
  }
  float tile[8 * 32];
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_ps(tile + i * 32, acc[i][0]);
    _mm512_storeu_ps(tile + i * 32 + 16, acc[i][1]);
  }
  cpu_tile_store(tile, 32, c, ldc, mr, nr, add);
}
#endif

typedef struct {
  int mr, nr;
  cpu_micro_fn fn;
} cpu_micro_t;

static cpu_micro_t cpu_micro_pick(void) {
#ifdef CPU_GEMM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return (cpu_micro_t){8, 32, cpu_micro_8x32};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    return (cpu_micro_t){6, 16, cpu_micro_6x16};
  }
#endif
  return (cpu_micro_t){4, 8, cpu_micro_4x8};
}

/* op(A)[i0.., p0..] as mr-row slivers: ap[sliver][p][ii], zero-padded. */
static void cpu_pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t p0,
                       int64_t kc, int mr, float *ap) {
  for (int64_t is = 0; is < mc; is += mr) {
    float *dst = ap + is * kc;
    const int64_t rows = mc - is < mr ? mc - is : mr;
    for (int64_t p = 0; p < kc; ++p) {
      float *d = dst + p * mr;
      if (ta) {
        const float *src = a + (p0 + p) * lda + i0 + is;
        for (int64_t ii = 0; ii < rows; ++ii) d[ii] = src[ii];
      } else {
        const float *src = a + (i0 + is) * lda + p0 + p;
        for (int64_t ii = 0; ii < rows; ++ii) d[ii] = src[ii * lda];
      }
      for (int64_t ii = rows; ii < mr; ++ii) d[ii] = 0.0f;
    }
  }
}

/* op(B)[p0.., j0..] as nr-column slivers: bp[sliver][p][jj], zero-padded. */
static void cpu_pack_b(bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                       int64_t nc, int nr, float *bp) {
  for (int64_t js = 0; js < nc; js += nr) {
    float *dst = bp + js * kc;
    const int64_t cols = nc - js < nr ? nc - js : nr;
    for (int64_t p = 0; p < kc; ++p) {
      float *d = dst + p * nr;
      if (tb) {
        const float *src = b + (j0 + js) * ldb + p0 + p;
        for (int64_t jj = 0; jj < cols; ++jj) d[jj] = src[jj * ldb];
      } else {
        const float *src = b + (p0 + p) * ldb + j0 + js;
        for (int64_t jj = 0; jj < cols; ++jj) d[jj] = src[jj];
      }
      for (int64_t jj = cols; jj < nr; ++jj) d[jj] = 0.0f;
    }
  }
}

bool cpu_gemm_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                      bool accumulate, int threads) {
  const cpu_micro_t mk = cpu_micro_pick();
  const int64_t mb = (m + CPU_MC - 1) / CPU_MC, nb = (n + CPU_NC - 1) / CPU_NC;
  const int64_t tasks = mb * nb;
  int nt = threads < tasks ? threads : (int)tasks;
  if (nt < 1) nt = 1;
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
  const size_t a_size = (size_t)CPU_MC * CPU_KC, b_size = (size_t)CPU_NC * CPU_KC;
  float *packs = malloc((size_t)nt * (a_size + b_size) * sizeof(float));
  if (!packs) return false;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t t = 0; t < tasks; ++t) {
    float *ap = packs + (size_t)cpu_thread_num() * (a_size + b_size), *bp = ap + a_size;
    const int64_t i0 = (t / nb) * CPU_MC, j0 = (t % nb) * CPU_NC;
    const int64_t mc = m - i0 < CPU_MC ? m - i0 : CPU_MC;
    const int64_t nc = n - j0 < CPU_NC ? n - j0 : CPU_NC;
    for (int64_t p0 = 0; p0 < k; p0 += CPU_KC) {
      const int64_t kc = k - p0 < CPU_KC ? k - p0 : CPU_KC;
      cpu_pack_b(tb, b, ldb, p0, kc, j0, nc, mk.nr, bp);
      cpu_pack_a(ta, a, lda, i0, mc, p0, kc, mk.mr, ap);
      const bool add = accumulate || p0 > 0;
      for (int64_t js = 0; js < nc; js += mk.nr) {
        for (int64_t is = 0; is < mc; is += mk.mr) {
          mk.fn(kc, ap + is * kc, bp + js * kc, c + (i0 + is) * ldc + j0 + js, ldc,
                mc - is < mk.mr ? mc - is : mk.mr, nc - js < mk.nr ? nc - js : mk.nr, add);
        }
      }
    }
  }
  free(packs);
  return true;
}
