/* Batched matmul with optional bias, on oneDNN's sgemm or, when the plugin
 * is built without oneDNN (TY_CPU_HAVE_ONEDNN undefined), on a packed,
 * blocked OpenMP GEMM of its own.
 *
 *   c[b] = op(a[b_a]) @ op(b[b_b]) + bias,  op(x) = x or x^T (trans_a/trans_b)
 *   a [..., M, K] ([..., K, M] with trans_a), b [..., K, N] ([..., N, K] with
 *   trans_b), c [..., M, N]; batch dimensions broadcast numpy-style.
 *
 * matmul has no backward op: its gradients are matmuls. f32 operands go to
 * the GEMM as they are; bf16/f16 operands are converted to f32 copies and the
 * f32 result is rounded into c. The bias is written into c first and the
 * GEMM accumulates onto it. When b has no batch (a linear layer) and a is not
 * transposed, all batches are one GEMM of (batch*M) rows. Many small batched
 * products run one per thread; large ones one after another, each on every
 * thread.
 *
 * Precision: f32 FMA accumulation over K; checked against the f64 reference
 * at normalised mean squared error < 1e-10 (K up to a few hundred in the
 * test; error grows like sqrt(K) * 2^-24). */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"

#ifdef TY_CPU_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#ifdef TY_CPU_HAVE_ONEDNN

/* C = op(A) op(B) (+ C when accumulate), row-major. */
static bool cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     bool accumulate, int threads) {
#ifdef _OPENMP
  /* oneDNN's OpenMP runtime uses as many threads as the caller's
   * nthreads-var; inside a parallel region it runs on the calling thread. */
  const int saved = omp_get_max_threads();
  if (!omp_in_parallel()) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b,
                                ldb, accumulate ? 1.0f : 0.0f, c, ldc);
#ifdef _OPENMP
  if (!omp_in_parallel()) omp_set_num_threads(saved);
#endif
  return st == dnnl_success;
}

#else /* the blocked OpenMP GEMM */

/* Register tile MR x NR, cache blocks MC x KC of A and KC x NC of B (the A
 * block stays in L2, a KC x NR sliver of B in L1). */
#define CPU_MR 6
#define CPU_NR 16
#define CPU_MC 120
#define CPU_KC 256
#define CPU_NC 512

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

/* acc = sum_p ap[p][0..MR) x bp[p][0..NR); c[0..mr)[0..nr) (+)= acc. */
CPU_CLONES
static void cpu_micro(int64_t kc, const float *restrict ap, const float *restrict bp,
                      float *restrict c, int64_t ldc, int64_t mr, int64_t nr, bool add) {
  float acc[CPU_MR][CPU_NR];
  for (int i = 0; i < CPU_MR; ++i) {
    for (int j = 0; j < CPU_NR; ++j) acc[i][j] = 0.0f;
  }
  for (int64_t p = 0; p < kc; ++p) {
    const float *av = ap + p * CPU_MR, *bv = bp + p * CPU_NR;
    for (int i = 0; i < CPU_MR; ++i) {
      for (int j = 0; j < CPU_NR; ++j) acc[i][j] += av[i] * bv[j];
    }
  }
  for (int64_t i = 0; i < mr; ++i) {
    float *cr = c + i * ldc;
    if (add) {
      for (int64_t j = 0; j < nr; ++j) cr[j] += acc[i][j];
    } else {
      for (int64_t j = 0; j < nr; ++j) cr[j] = acc[i][j];
    }
  }
}

/* op(A)[i0.., p0..] as MR-row slivers: ap[sliver][p][ii], zero-padded. */
static void cpu_pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int64_t mc,
                       int64_t p0, int64_t kc, float *ap) {
  for (int64_t is = 0; is < mc; is += CPU_MR) {
    float *dst = ap + is * kc;
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t ii = 0; ii < CPU_MR; ++ii) {
        int64_t i = is + ii;
        dst[p * CPU_MR + ii] =
            i < mc ? (ta ? a[(p0 + p) * lda + i0 + i] : a[(i0 + i) * lda + p0 + p]) : 0.0f;
      }
    }
  }
}

/* op(B)[p0.., j0..] as NR-column slivers: bp[sliver][p][jj], zero-padded. */
static void cpu_pack_b(bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                       int64_t j0, int64_t nc, float *bp) {
  for (int64_t js = 0; js < nc; js += CPU_NR) {
    float *dst = bp + js * kc;
    for (int64_t p = 0; p < kc; ++p) {
      for (int64_t jj = 0; jj < CPU_NR; ++jj) {
        int64_t j = js + jj;
        dst[p * CPU_NR + jj] =
            j < nc ? (tb ? b[(j0 + j) * ldb + p0 + p] : b[(p0 + p) * ldb + j0 + j]) : 0.0f;
      }
    }
  }
}

static bool cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     bool accumulate, int threads) {
  const int64_t mb = (m + CPU_MC - 1) / CPU_MC, nb = (n + CPU_NC - 1) / CPU_NC;
  const int64_t tasks = mb * nb;
  int nt = threads < tasks ? threads : (int)tasks;
  if (nt < 1) nt = 1;
#ifdef _OPENMP
  if (omp_in_parallel()) nt = 1;
#endif
  const size_t a_size = (size_t)((CPU_MC + CPU_MR - 1) / CPU_MR * CPU_MR) * CPU_KC;
  const size_t b_size = (size_t)((CPU_NC + CPU_NR - 1) / CPU_NR * CPU_NR) * CPU_KC;
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
      cpu_pack_b(tb, b, ldb, p0, kc, j0, nc, bp);
      cpu_pack_a(ta, a, lda, i0, mc, p0, kc, ap);
      const bool add = accumulate || p0 > 0;
      for (int64_t js = 0; js < nc; js += CPU_NR) {
        for (int64_t is = 0; is < mc; is += CPU_MR) {
          cpu_micro(kc, ap + is * kc, bp + js * kc, c + (i0 + is) * ldc + j0 + js, ldc,
                    mc - is < CPU_MR ? mc - is : CPU_MR, nc - js < CPU_NR ? nc - js : CPU_NR,
                    add);
        }
      }
    }
  }
  free(packs);
  return true;
}

#endif /* TY_CPU_HAVE_ONEDNN */

/* Which batch of a or b output batch `bi` reads (numpy broadcasting). */
static int64_t cpu_batch_of(const ty_abi_value_t *out, const ty_abi_value_t *x, int64_t bi) {
  const int32_t brank = (int32_t)out->rank - 2, xrank = (int32_t)x->rank - 2;
  int64_t off = 0, stride = 1;
  for (int32_t d = brank - 1; d >= 0; --d) {
    int64_t idx = bi % out->dims[d];
    bi /= out->dims[d];
    int32_t xd = d - (brank - xrank);
    if (xd >= 0) {
      if (x->dims[xd] != 1) off += idx * stride;
      stride *= x->dims[xd];
    }
  }
  return off;
}

ty_abi_status_t cpu_kernel_matmul(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *av = cpu_in(c, 0), *bv = cpu_in(c, 1), *biasv = cpu_in(c, 2);
  const ty_abi_value_t *cv = cpu_out(c, 0);
  const bool ta = ty_abi_node_attr_int(c->node, "trans_a", 0) != 0;
  const bool tb = ty_abi_node_attr_int(c->node, "trans_b", 0) != 0;
  const int64_t m = cv->dims[cv->rank - 2], n = cv->dims[cv->rank - 1];
  const int64_t k = ta ? av->dims[av->rank - 2] : av->dims[av->rank - 1];
  const int64_t batches = m > 0 && n > 0 ? cpu_numel(cv) / (m * n) : 0;
  if (m == 0 || n == 0 || batches == 0) return NULL;
  const float *a, *b, *bias = NULL;
  float *own_a = NULL, *own_b = NULL, *own_bias = NULL, *cbuf = NULL;
  const int threads = (int)c->threads;
  bool ok = cpu_f32_whole(cpu_in_data(c, 0), av->dtype, cpu_numel(av), threads, &a, &own_a) &&
            cpu_f32_whole(cpu_in_data(c, 1), bv->dtype, cpu_numel(bv), threads, &b, &own_b) &&
            (!biasv ||
             cpu_f32_whole(cpu_in_data(c, 2), biasv->dtype, n, 1, &bias, &own_bias));
  const bool direct = cv->dtype == TY_DTYPE_F32;
  float *cf = direct ? cpu_out_data(c, 0) : NULL;
  if (ok && !direct) {
    cbuf = malloc((size_t)(batches * m * n) * sizeof(float));
    cf = cbuf;
    ok = cbuf != NULL;
  }
  if (!ok) {
    free(own_a);
    free(own_b);
    free(own_bias);
    free(cbuf);
    return cpu_oom(c);
  }
  /* c = bias (or 0 when K = 0); the GEMM then accumulates onto it. */
  const bool acc = bias != NULL || k == 0;
  if (acc) {
    const int64_t rows = batches * m;
    const int nt = cpu_threads(c, rows * n, 65536);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float *cr = cf + r * n;
      if (bias) memcpy(cr, bias, (size_t)n * sizeof(float));
      else memset(cr, 0, (size_t)n * sizeof(float));
    }
  }
  bool gemm_ok = true;
  if (k > 0) {
    const int64_t lda = ta ? m : k, ldb = tb ? k : n;
    const int64_t b_batches = cpu_numel(bv) / (k * n);
    const int64_t a_batches = cpu_numel(av) / (m * k);
    if (b_batches == 1 && a_batches == batches && !ta) {
      gemm_ok = cpu_gemm(false, tb, batches * m, n, k, a, lda, b, ldb, cf, n, acc, threads);
    } else if (batches >= threads && m * n * k <= (int64_t)1 << 21) {
      int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
      for (int64_t bi = 0; bi < batches; ++bi) {
        bool one = cpu_gemm(ta, tb, m, n, k, a + cpu_batch_of(cv, av, bi) * m * k, lda,
                           b + cpu_batch_of(cv, bv, bi) * k * n, ldb, cf + bi * m * n, n, acc,
                           1);
        if (!one) {
#pragma omp atomic write
          failed = 1;
        }
      }
      gemm_ok = failed == 0;
    } else {
      for (int64_t bi = 0; bi < batches && gemm_ok; ++bi) {
        gemm_ok = cpu_gemm(ta, tb, m, n, k, a + cpu_batch_of(cv, av, bi) * m * k, lda,
                           b + cpu_batch_of(cv, bv, bi) * k * n, ldb, cf + bi * m * n, n, acc,
                           threads);
      }
    }
  }
  if (gemm_ok && !direct) {
    const int64_t count = batches * m * n, chunks = (count + CPU_CHUNK - 1) / CPU_CHUNK;
    void *pc = cpu_out_data(c, 0);
    const int nt = cpu_threads(c, count, 65536);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      const int64_t off = ch * CPU_CHUNK;
      cpu_store_f32(pc, cv->dtype, off, count - off < CPU_CHUNK ? count - off : CPU_CHUNK,
                    cf + off);
    }
  }
  free(own_a);
  free(own_b);
  free(own_bias);
  free(cbuf);
  if (!gemm_ok) {
    return ty_plugin_error(TY_CODE_INTERNAL,
                           "cpu: " CPU_NODE_FMT ": the GEMM of [%lld x %lld] @ [%lld x %lld] "
                           "failed (out of memory or a oneDNN error)",
                           CPU_NODE_ARGS(c), (long long)m, (long long)k, (long long)k,
                           (long long)n);
  }
  return NULL;
}
