/* The GEMM behind matmul when the plugin is built without oneDNN or a graph
 * is compiled with deterministic=1: cache-blocked, OpenMP, with register-tile
 * micro-kernels picked at run time from the CPU's ISA (AVX-512 8x32,
 * AVX2+FMA 6x16, plain C 4x8; a test may force a family).
 *
 *   C[m, n] (+)= sum_p op(A)[m, p] op(B)[p, n]      row-major f32
 *
 * Packed path (Goto/BLIS): for each MC x NC block of C (one OpenMP task),
 * for each KC slice of K, pack op(B)[KC, NC] into NR-wide slivers and
 * op(A)[MC, KC] into MR-tall slivers (zero-padded at the edges), then run
 * the micro-kernel over the MR x NR tiles. A KC x NR sliver of B stays in L1
 * and the MC x KC block of A in L2.
 *
 * Streaming path, for M <= CPU_GEMM_SMALL_M (decode, prefill chunks): the
 * packed path would copy all of B (the weights) on every call and pad M up
 * to MR; this one reads op(A) in place and op(B) a KC x NB block at a time
 * (in place or through one small sliver), and splits N between threads.
 * Its tiles (AVX2: 1 x 64, 3 x 32, 4 x 24; AVX-512: 1 x 128, 8 x 48) are
 * picked from M. With oneDNN linked, cpu_gemm sends decode's few rows here
 * even without deterministic=1 where this was the faster (cpu_gemm).
 *
 * Both paths give every element the same operations, so its bits never
 * depend on M, N, the path, its tile or the thread count (what
 * deterministic=1 needs): per KC slice anchored at k = 0, acc = +0 and one
 * f32 FMA per k in order (plain C: a mul then an add, -std=c11 contracting
 * nothing), then C = acc for the first slice without accumulate, else
 * C = C + acc. cpu_gemm_stream_test checks the paths bit for bit on each
 * family; matmul is checked against the f64 reference at normalised mean
 * squared error < 1e-10. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

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
/* GCC keeps an array of vector accumulators in memory and stores it on
 * every k (a store per FMA, half the speed), so the hot loops below name
 * each accumulator accN_V, each B vector bV and each broadcast of A aN;
 * `R > i` and `V > v` are constants, so what a tile does not use folds
 * away. */
#define CPU_EACH_V(X, i) X(i, 0) X(i, 1) X(i, 2) X(i, 3) X(i, 4) X(i, 5) X(i, 6) X(i, 7)
#define CPU_EACH_3(X) CPU_EACH_V(X, 0) CPU_EACH_V(X, 1) CPU_EACH_V(X, 2)
#define CPU_EACH_6(X) CPU_EACH_3(X) CPU_EACH_V(X, 3) CPU_EACH_V(X, 4) CPU_EACH_V(X, 5)
#define CPU_EACH_8(X) CPU_EACH_6(X) CPU_EACH_V(X, 6) CPU_EACH_V(X, 7)
#define CPU_EACH_R(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define CPU_ONE_V(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
/* Where the tile leaves room (R V accumulators + V B vectors + one
 * broadcast <= 16 registers), each B vector is loaded once per k into a
 * register: without this GCC, short of registers, folds the load into
 * every FMA that reads it (a 4 x 24 tile then makes 16 loads for 12 FMAs,
 * load-bound at 3/4 of the FMA rate; measured 1.5x slower). Rows go one at
 * a time, one broadcast live. */
#define CPU_IN_REGISTER(x) __asm__("" : "+x"(x))

/* An R x (8 V) tile on AVX2+FMA (R <= 6, R V <= 12: constants at every
 * call), of which the first `rows` rows and `cols` columns reach C. */
__attribute__((target("avx2,fma"), always_inline)) static inline void cpu_tile_avx2(
    const int R, const int V, int64_t kc, const float *a, int64_t ars, int64_t aps,
    const float *b, int64_t bs, float *c, int64_t ldc, int64_t rows, int64_t cols, bool add,
    int64_t pf) {
  const __m256 zero = _mm256_setzero_ps();
#define CPU_DECL(i, v) __m256 acc##i##_##v = zero;
  CPU_EACH_6(CPU_DECL)
#undef CPU_DECL
  for (int64_t p = 0; p < kc; ++p) {
    const float *bp = b + p * bs;
    if (pf) { /* the lines of the row's next 8 V floats (a hint: never faults) */
      const uintptr_t at = (uintptr_t)bp + (uintptr_t)pf * sizeof(float);
      _mm_prefetch((const char *)at, _MM_HINT_T0);
      _mm_prefetch((const char *)(at + 16 * V - 2), _MM_HINT_T0);
      _mm_prefetch((const char *)(at + 32 * V - 4), _MM_HINT_T0);
    }
#define CPU_LOAD_B(v)                                  \
  __m256 b##v = V > v ? _mm256_loadu_ps(bp + 8 * v) : zero; \
  if (V > v && R * V + V < 16) CPU_IN_REGISTER(b##v);
    CPU_ONE_V(CPU_LOAD_B)
#undef CPU_LOAD_B
#define CPU_FMA(i, v) \
  if (R > i && V > v) acc##i##_##v = _mm256_fmadd_ps(a##i, b##v, acc##i##_##v);
#define CPU_ROW(i)                                                                \
  if (R > i) {                                                                    \
    const __m256 a##i = _mm256_broadcast_ss(a + i * ars + p * aps);               \
    CPU_EACH_V(CPU_FMA, i)                                                        \
  }
    CPU_ROW(0) CPU_ROW(1) CPU_ROW(2) CPU_ROW(3) CPU_ROW(4) CPU_ROW(5)
#undef CPU_ROW
#undef CPU_FMA
  }
  __m256 acc[6][8];
#define CPU_OUT(i, v) acc[i][v] = acc##i##_##v;
  CPU_EACH_6(CPU_OUT)
#undef CPU_OUT
  if (rows == R && cols == 8 * V) {
    for (int i = 0; i < R; ++i) {
      for (int v = 0; v < V; ++v) {
        float *cv = c + i * ldc + 8 * v;
        __m256 r = acc[i][v];
        if (add) r = _mm256_add_ps(r, _mm256_loadu_ps(cv));
        _mm256_storeu_ps(cv, r);
      }
    }
    return;
  }
  float tile[6 * 64];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(tile + i * 8 * V + 8 * v, acc[i][v]);
  }
  cpu_tile_store(tile, 8 * V, c, ldc, rows, cols, add);
}

/* An R x (16 V) tile on AVX-512F (R <= 8, R V <= 24: constants at every
 * call), of which the first `rows` rows and `cols` columns reach C. As the
 * AVX2 tile: B's V vectors are loaded once per k (held in registers where
 * R V + V + 1 <= 32), rows go one at a time with one broadcast live, and
 * pf > 0 prefetches the lines of B pf floats past row p's. */
__attribute__((target("avx512f"), always_inline)) static inline void cpu_tile_avx512(
    const int R, const int V, int64_t kc, const float *a, int64_t ars, int64_t aps,
    const float *b, int64_t bs, float *c, int64_t ldc, int64_t rows, int64_t cols, bool add,
    int64_t pf) {
  const __m512 zero = _mm512_setzero_ps();
#define CPU_DECL(i, v) __m512 acc##i##_##v = zero;
  CPU_EACH_8(CPU_DECL)
#undef CPU_DECL
  for (int64_t p = 0; p < kc; ++p) {
    const float *bp = b + p * bs;
    if (pf) { /* a hint: never faults */
      const uintptr_t at = (uintptr_t)bp + (uintptr_t)pf * sizeof(float);
      for (int l = 0; l < V; ++l) _mm_prefetch((const char *)(at + 64 * l), _MM_HINT_T0);
      _mm_prefetch((const char *)(at + 64 * V - 4), _MM_HINT_T0);
    }
#define CPU_LOAD_B(v)                                        \
  __m512 b##v = V > v ? _mm512_loadu_ps(bp + 16 * v) : zero; \
  if (V > v && R * V + V < 32) CPU_IN_REGISTER(b##v);
    CPU_ONE_V(CPU_LOAD_B)
#undef CPU_LOAD_B
#define CPU_FMA(i, v) \
  if (R > i && V > v) acc##i##_##v = _mm512_fmadd_ps(a##i, b##v, acc##i##_##v);
#define CPU_ROW(i)                                            \
  if (R > i) {                                                \
    const __m512 a##i = _mm512_set1_ps(a[i * ars + p * aps]); \
    CPU_EACH_V(CPU_FMA, i)                                    \
  }
    CPU_EACH_R(CPU_ROW)
#undef CPU_ROW
#undef CPU_FMA
  }
  __m512 acc[8][8];
#define CPU_OUT(i, v) acc[i][v] = acc##i##_##v;
  CPU_EACH_8(CPU_OUT)
#undef CPU_OUT
  if (rows == R && cols == 16 * V) {
    for (int i = 0; i < R; ++i) {
      for (int v = 0; v < V; ++v) {
        float *cv = c + i * ldc + 16 * v;
        __m512 r = acc[i][v];
        if (add) r = _mm512_add_ps(r, _mm512_loadu_ps(cv));
        _mm512_storeu_ps(cv, r);
      }
    }
    return;
  }
  float tile[8 * 128];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(tile + i * 16 * V + 16 * v, acc[i][v]);
  }
  cpu_tile_store(tile, 16 * V, c, ldc, rows, cols, add);
}

/* The packed slivers: A(i, p) = ap[p * MR + i], B[p][j] = bp[p * NR + j]. */
__attribute__((target("avx2,fma"))) static void cpu_micro_6x16(int64_t kc, const float *ap,
                                                               const float *bp, float *c,
                                                               int64_t ldc, int64_t mr,
                                                               int64_t nr, bool add) {
  cpu_tile_avx2(6, 2, kc, ap, 1, 6, bp, 16, c, ldc, mr, nr, add, 0);
}

__attribute__((target("avx512f"))) static void cpu_micro_8x32(int64_t kc, const float *ap,
                                                              const float *bp, float *c,
                                                              int64_t ldc, int64_t mr,
                                                              int64_t nr, bool add) {
  cpu_tile_avx512(8, 2, kc, ap, 1, 8, bp, 32, c, ldc, mr, nr, add, 0);
}
#endif

typedef struct {
  int mr, nr;
  cpu_micro_fn fn;
} cpu_micro_t;

cpu_gemm_isa_t cpu_gemm_isa_best(void) {
#ifdef CPU_GEMM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return CPU_GEMM_ISA_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CPU_GEMM_ISA_AVX2;
#endif
  return CPU_GEMM_ISA_PLAIN;
}

bool cpu_gemm_isa_supported(cpu_gemm_isa_t isa) {
  switch (isa) {
    case CPU_GEMM_ISA_AUTO:
    case CPU_GEMM_ISA_PLAIN:
      return true;
    case CPU_GEMM_ISA_AVX2:
      return cpu_gemm_isa_best() != CPU_GEMM_ISA_PLAIN; /* AVX-512 CPUs have AVX2+FMA too */
    case CPU_GEMM_ISA_AVX512:
      return cpu_gemm_isa_best() == CPU_GEMM_ISA_AVX512;
  }
  return false;
}

static cpu_micro_t cpu_micro_pick(cpu_gemm_isa_t isa) {
#ifdef CPU_GEMM_X86
  if (isa == CPU_GEMM_ISA_AVX512) return (cpu_micro_t){8, 32, cpu_micro_8x32};
  if (isa == CPU_GEMM_ISA_AVX2) return (cpu_micro_t){6, 16, cpu_micro_6x16};
#else
  (void)isa;
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

/* ---- the streaming path (small M: decode) --------------------------------
 * Each C element gets exactly the packed path's operations on the same
 * family: per KC slice from k = 0, acc = +0 and one FMA (plain C: one mul,
 * then one add, the same expression as cpu_micro_4x8) per k in order, then
 * C = acc or C + acc. Only what feeds them differs: op(A) and, when not
 * transposed, op(B) are read where they lie (row p of B is contiguous over
 * N), so the weights are not copied on every call. Vectorised over N (many
 * outputs at once), never over K: a SIMD dot product would reorder the sum.
 * A KC x NB sliver is packed only where B is transposed (its rows run over
 * K), for the last, narrower block of columns, or where many row tiles
 * read the block (see copy_b). Threads split N. */

/* rows (<= the family's rmax) x cols (<= nb) of C from A(i, p) =
 * a[i * ars + p * aps] and op(B)[p][j] = b[p * bs + j] over kc. */
typedef void (*cpu_stream_fn)(int rows, int64_t kc, const float *a, int64_t ars, int64_t aps,
                              const float *b, int64_t bs, float *c, int64_t ldc, int64_t cols,
                              bool add, int64_t pf);

static void cpu_stream_plain(int rows, int64_t kc, const float *a, int64_t ars, int64_t aps,
                             const float *b, int64_t bs, float *c, int64_t ldc, int64_t cols,
                             bool add, int64_t pf) {
  (void)pf;
  float acc[4 * 8] = {0};
  for (int64_t p = 0; p < kc; ++p) {
    const float *bp = b + p * bs;
    for (int i = 0; i < rows; ++i) {
      const float av = a[i * ars + p * aps];
      for (int j = 0; j < 8; ++j) acc[i * 8 + j] += av * bp[j];
    }
  }
  cpu_tile_store(acc, 8, c, ldc, rows, cols, add);
}

#ifdef CPU_GEMM_X86
/* 32 columns, up to 3 rows (12 accumulators of 16 registers). */
__attribute__((target("avx2,fma"))) static void cpu_stream_avx2_n32(
    int rows, int64_t kc, const float *a, int64_t ars, int64_t aps, const float *b, int64_t bs,
    float *c, int64_t ldc, int64_t cols, bool add, int64_t pf) {
  if (rows == 1) cpu_tile_avx2(1, 4, kc, a, ars, aps, b, bs, c, ldc, 1, cols, add, pf);
  else if (rows == 2) cpu_tile_avx2(2, 4, kc, a, ars, aps, b, bs, c, ldc, 2, cols, add, pf);
  else cpu_tile_avx2(3, 4, kc, a, ars, aps, b, bs, c, ldc, 3, cols, add, pf);
}

/* 24 columns, up to 4 rows: 12 accumulators, 3 B vectors and a broadcast
 * fill the 16 registers, and M = 8 (16) is 2 (4) full tiles where 3 x 32
 * ran 3 + 3 + 2 rows. */
__attribute__((target("avx2,fma"))) static void cpu_stream_avx2_n24(
    int rows, int64_t kc, const float *a, int64_t ars, int64_t aps, const float *b, int64_t bs,
    float *c, int64_t ldc, int64_t cols, bool add, int64_t pf) {
  switch (rows) {
    case 1: cpu_tile_avx2(1, 3, kc, a, ars, aps, b, bs, c, ldc, 1, cols, add, pf); break;
    case 2: cpu_tile_avx2(2, 3, kc, a, ars, aps, b, bs, c, ldc, 2, cols, add, pf); break;
    case 3: cpu_tile_avx2(3, 3, kc, a, ars, aps, b, bs, c, ldc, 3, cols, add, pf); break;
    default: cpu_tile_avx2(4, 3, kc, a, ars, aps, b, bs, c, ldc, 4, cols, add, pf); break;
  }
}

/* One row (M = 1), 64 columns: 8 independent FMA chains hide the latency. */
__attribute__((target("avx2,fma"))) static void cpu_stream_avx2_n64(
    int rows, int64_t kc, const float *a, int64_t ars, int64_t aps, const float *b, int64_t bs,
    float *c, int64_t ldc, int64_t cols, bool add, int64_t pf) {
  (void)rows;
  cpu_tile_avx2(1, 8, kc, a, ars, aps, b, bs, c, ldc, 1, cols, add, pf);
}

/* 48 columns, up to 8 rows: 24 accumulators, 3 B vectors and a broadcast
 * of the 32 registers, so decode's 8 rows are one tile and read B once
 * (the 6 x 64 tile this replaced ran them as 6 + 2 rows). */
__attribute__((target("avx512f"))) static void cpu_stream_avx512_n48(
    int rows, int64_t kc, const float *a, int64_t ars, int64_t aps, const float *b, int64_t bs,
    float *c, int64_t ldc, int64_t cols, bool add, int64_t pf) {
  switch (rows) {
    case 1: cpu_tile_avx512(1, 3, kc, a, ars, aps, b, bs, c, ldc, 1, cols, add, pf); break;
    case 2: cpu_tile_avx512(2, 3, kc, a, ars, aps, b, bs, c, ldc, 2, cols, add, pf); break;
    case 3: cpu_tile_avx512(3, 3, kc, a, ars, aps, b, bs, c, ldc, 3, cols, add, pf); break;
    case 4: cpu_tile_avx512(4, 3, kc, a, ars, aps, b, bs, c, ldc, 4, cols, add, pf); break;
    case 5: cpu_tile_avx512(5, 3, kc, a, ars, aps, b, bs, c, ldc, 5, cols, add, pf); break;
    case 6: cpu_tile_avx512(6, 3, kc, a, ars, aps, b, bs, c, ldc, 6, cols, add, pf); break;
    case 7: cpu_tile_avx512(7, 3, kc, a, ars, aps, b, bs, c, ldc, 7, cols, add, pf); break;
    default: cpu_tile_avx512(8, 3, kc, a, ars, aps, b, bs, c, ldc, 8, cols, add, pf); break;
  }
}

/* One row (M = 1), 128 columns. */
__attribute__((target("avx512f"))) static void cpu_stream_avx512_n128(
    int rows, int64_t kc, const float *a, int64_t ars, int64_t aps, const float *b, int64_t bs,
    float *c, int64_t ldc, int64_t cols, bool add, int64_t pf) {
  (void)rows, (void)pf;
  cpu_tile_avx512(1, 8, kc, a, ars, aps, b, bs, c, ldc, 1, cols, add, 0);
}
#endif

/* A KC x nb sliver of a transposed B ([N, K]): sl[p * nb + jj] =
 * b[(j0 + jj) * ldb + p0 + p] for jj in [from, cols), zero past cols. Reads
 * run along B's rows. */
static void cpu_pack_bt_plain(const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                              int64_t from, int64_t cols, int nb, float *sl) {
  for (int64_t jj = from; jj < cols; ++jj) {
    const float *src = b + (j0 + jj) * ldb + p0;
    for (int64_t p = 0; p < kc; ++p) sl[p * nb + jj] = src[p];
  }
  for (int64_t p = 0; p < kc; ++p) {
    for (int64_t jj = cols; jj < nb; ++jj) sl[p * nb + jj] = 0.0f;
  }
}

#ifdef CPU_GEMM_X86
/* The same, 8 rows x 8 k at a time transposed in registers (a copy: the
 * bits are B's whatever the method). */
__attribute__((target("avx2"))) static void cpu_pack_bt_avx2(const float *b, int64_t ldb,
                                                             int64_t p0, int64_t kc, int64_t j0,
                                                             int64_t cols, int nb, float *sl) {
  const int64_t j8 = cols - cols % 8, p8 = kc - kc % 8;
  for (int64_t jj = 0; jj < j8; jj += 8) {
    const float *src = b + (j0 + jj) * ldb + p0;
    for (int64_t p = 0; p < p8; p += 8) {
      __m256 r[8], t[8];
      for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(src + q * ldb + p);
      for (int q = 0; q < 8; q += 2) {
        t[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
        t[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
      }
      for (int h = 0; h < 8; h += 4) {
        r[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        r[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
        r[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        r[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
      }
      for (int q = 0; q < 4; ++q) {
        _mm256_storeu_ps(sl + (p + q) * nb + jj, _mm256_permute2f128_ps(r[q], r[q + 4], 0x20));
        _mm256_storeu_ps(sl + (p + q + 4) * nb + jj,
                         _mm256_permute2f128_ps(r[q], r[q + 4], 0x31));
      }
    }
    for (int64_t p = p8; p < kc; ++p) {
      for (int q = 0; q < 8; ++q) sl[p * nb + jj + q] = src[q * ldb + p];
    }
  }
  cpu_pack_bt_plain(b, ldb, p0, kc, j0, j8, cols, nb, sl);
}
#endif

static void cpu_pack_bt(cpu_gemm_isa_t isa, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                        int64_t j0, int64_t cols, int nb, float *sl) {
#ifdef CPU_GEMM_X86
  if (isa != CPU_GEMM_ISA_PLAIN) {
    cpu_pack_bt_avx2(b, ldb, p0, kc, j0, cols, nb, sl);
    return;
  }
#else
  (void)isa;
#endif
  cpu_pack_bt_plain(b, ldb, p0, kc, j0, 0, cols, nb, sl);
}

/* How far ahead a multi-row tile prefetches B when it reads B in place (a
 * block's rows are ldb apart, a pattern the hardware prefetcher follows
 * poorly from DRAM): the same k row CPU_STREAM_PF blocks ahead (AVX2), or
 * the same block CPU_STREAM_PF_ROWS k rows ahead (AVX-512). */
typedef enum { CPU_PF_NONE = 0, CPU_PF_BLOCKS, CPU_PF_ROWS } cpu_stream_pf_t;

typedef struct {
  int nb, rmax; /* columns per block (a multiple of the vector width), rows per call */
  cpu_stream_fn fn;
  cpu_stream_pf_t pf;
} cpu_stream_t;

static cpu_stream_t cpu_stream_pick(cpu_gemm_isa_t isa, int64_t m) {
#ifdef CPU_GEMM_X86
  if (isa == CPU_GEMM_ISA_AVX512) {
    return m == 1 ? (cpu_stream_t){128, 1, cpu_stream_avx512_n128, CPU_PF_NONE}
                  : (cpu_stream_t){48, 8, cpu_stream_avx512_n48, CPU_PF_ROWS};
  }
  if (isa == CPU_GEMM_ISA_AVX2) {
    if (m == 1) return (cpu_stream_t){64, 1, cpu_stream_avx2_n64, CPU_PF_NONE};
    if (m <= 3) return (cpu_stream_t){32, 3, cpu_stream_avx2_n32, CPU_PF_BLOCKS};
    return (cpu_stream_t){24, 4, cpu_stream_avx2_n24, CPU_PF_BLOCKS};
  }
#else
  (void)isa;
#endif
  (void)m;
  return (cpu_stream_t){8, 4, cpu_stream_plain, CPU_PF_NONE};
}

/* K rows of a transposed B packed at once (a multiple of CPU_KC): 1024 x 24
 * or 64 floats stay in L2. */
#define CPU_STREAM_KT 1024
/* CPU_PF_BLOCKS: measured on AVX2 with B in DRAM, 8 x 768 @ 768x2304: 0.87
 * ms none, 0.70 one block ahead, 0.63 two, 0.67 four (dnnl_sgemm 0.63). The
 * 1 x 64 tile does not prefetch (slower). */
#define CPU_STREAM_PF 2
/* CPU_PF_ROWS: the 8 x 48 AVX-512 tile on an AMD EPYC (Zen 4) with the
 * weights in DRAM, 8 rows through GPT-2's 12 layers of 768x2304, 768x768,
 * 768x3072 and 3072x768, two threads (ms, median of 11): 2 blocks ahead
 * 33-48 (it varied), 8 rows ahead 27.5-29.3, 12 rows 27.8-28.1, 16 rows
 * 28.3-31.6, 24 and 32 rows 29.9-31.3. */
#define CPU_STREAM_PF_ROWS 10

/* Runs every row tile over one KC x cols sliver of op(B) (b, row stride bs). */
static void cpu_stream_rows(const cpu_stream_t *st, int64_t m, int64_t kc, const float *a,
                            int64_t ars, int64_t aps, const float *b, int64_t bs, float *c,
                            int64_t ldc, int64_t cols, bool add, int64_t pf) {
  for (int64_t i0 = 0; i0 < m; i0 += st->rmax) {
    const int rows = (int)(m - i0 < st->rmax ? m - i0 : st->rmax);
    st->fn(rows, kc, a + i0 * ars, ars, aps, b, bs, c + i0 * ldc, ldc, cols, add,
           i0 == 0 ? pf : 0);
  }
}

static bool cpu_gemm_stream(cpu_gemm_isa_t isa, bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                            float *c, int64_t ldc, bool accumulate, int threads) {
  if (m <= 0 || n <= 0 || k <= 0) return true; /* as the packed path: C untouched */
  const cpu_stream_t st = cpu_stream_pick(isa, m);
  const int64_t blocks = (n + st.nb - 1) / st.nb;
  int nt = threads < blocks ? threads : (int)blocks;
  if (nt < 1) nt = 1;
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
  /* Each thread owns a contiguous run of nb-wide column blocks.
   * Not transposed, it walks K slice by slice and, inside a slice, its
   * blocks left to right: a slice's rows of B are read along their length
   * (what the prefetcher follows; block by block down all of K instead ran
   * 8x3072 @ 3072x768 1.6x slower on AVX2). A block is read in place, or
   * copied once into a contiguous sliver when many row tiles read it, or
   * its rows fall 8 KiB apart into one L1 set (measured on AVX2: at M <= 32
   * copying lost at N = 768, 2304 and 3072), or it is the narrow last one.
   * Transposed ([N, K]), a block's nb rows of B are one contiguous run: it
   * is packed up to CPU_STREAM_KT values of K at a time, one sequential
   * read (a KC slice at a time read nb rows 1 KiB each: 1.4x slower at
   * 8 x 768 @ [50257 x 768]^T). The bits are the same in every order: each
   * element still gets, per KC slice from k = 0, its FMAs in k order and
   * then C = acc or C + acc. */
  const int64_t row_tiles = (m + st.rmax - 1) / st.rmax;
  const bool copy_b = row_tiles > 8 || (row_tiles > 1 && ldb % 2048 == 0);
  const int64_t kt = !tb ? CPU_KC : k < CPU_STREAM_KT ? k : CPU_STREAM_KT;
  const size_t sliver_size = (size_t)kt * (size_t)st.nb;
  float *sl_all = malloc((size_t)nt * sliver_size * sizeof(float));
  if (!sl_all) return false;
  const int64_t ars = ta ? 1 : lda, aps = ta ? lda : 1;
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    const int64_t tn = omp_get_thread_num(), tc = omp_get_num_threads();
#else
    const int64_t tn = 0, tc = 1;
#endif
    float *sl = sl_all + (size_t)tn * sliver_size;
    const int64_t b0 = blocks * tn / tc, b1 = blocks * (tn + 1) / tc;
    if (tb) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t j0 = blk * st.nb, cols = n - j0 < st.nb ? n - j0 : st.nb;
        for (int64_t q0 = 0; q0 < k; q0 += kt) {
          const int64_t kq = k - q0 < kt ? k - q0 : kt;
          cpu_pack_bt(isa, b, ldb, q0, kq, j0, cols, st.nb, sl);
          for (int64_t p0 = q0; p0 < q0 + kq; p0 += CPU_KC) {
            const int64_t kc = q0 + kq - p0 < CPU_KC ? q0 + kq - p0 : CPU_KC;
            cpu_stream_rows(&st, m, kc, a + p0 * aps, ars, aps, sl + (p0 - q0) * st.nb, st.nb,
                            c + j0, ldc, cols, accumulate || p0 > 0, 0);
          }
        }
      }
    } else {
      for (int64_t p0 = 0; p0 < k; p0 += CPU_KC) {
        const int64_t kc = k - p0 < CPU_KC ? k - p0 : CPU_KC;
        for (int64_t blk = b0; blk < b1; ++blk) {
          const int64_t j0 = blk * st.nb, cols = n - j0 < st.nb ? n - j0 : st.nb;
          const float *bs = sl;
          int64_t bstride = st.nb, pf = 0;
          if (copy_b || cols < st.nb) { /* the narrow one padded: never read past N */
            cpu_pack_b(false, b, ldb, p0, kc, j0, cols, st.nb, sl);
          } else {
            bs = b + p0 * ldb + j0;
            bstride = ldb;
            pf = st.pf == CPU_PF_BLOCKS ? CPU_STREAM_PF * st.nb
                 : st.pf == CPU_PF_ROWS ? CPU_STREAM_PF_ROWS * ldb
                                        : 0;
          }
          cpu_stream_rows(&st, m, kc, a + p0 * aps, ars, aps, bs, bstride, c + j0, ldc, cols,
                          accumulate || p0 > 0, pf);
        }
      }
    }
  }
  free(sl_all);
  return true;
}


static bool cpu_gemm_packed(cpu_gemm_isa_t isa, bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                            float *c, int64_t ldc, bool accumulate, int threads) {
  const cpu_micro_t mk = cpu_micro_pick(isa);
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

bool cpu_gemm_blocked_with(cpu_gemm_isa_t isa, cpu_gemm_path_t path, bool ta, bool tb,
                           int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float *c, int64_t ldc, bool accumulate,
                           int threads) {
  if (isa == CPU_GEMM_ISA_AUTO) isa = cpu_gemm_isa_best();
  else if (!cpu_gemm_isa_supported(isa)) return false;
  if (path == CPU_GEMM_PATH_AUTO) {
    path = m <= CPU_GEMM_SMALL_M ? CPU_GEMM_PATH_STREAM : CPU_GEMM_PATH_PACKED;
  }
  if (path == CPU_GEMM_PATH_STREAM) {
    return cpu_gemm_stream(isa, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
  }
  return cpu_gemm_packed(isa, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
}

bool cpu_gemm_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                      bool accumulate, int threads) {
  return cpu_gemm_blocked_with(CPU_GEMM_ISA_AUTO, CPU_GEMM_PATH_AUTO, ta, tb, m, n, k, a, lda, b,
                               ldb, c, ldc, accumulate, threads);
}
