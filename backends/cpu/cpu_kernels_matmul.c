/* Batched matmul with optional bias, on oneDNN's sgemm or, when the plugin
 * is built without oneDNN (TY_CPU_HAVE_ONEDNN undefined) or the graph was
 * compiled with deterministic=1, on the blocked OpenMP GEMM of
 * cpu_gemm_blocked.c (batch-invariant: a row's bits never depend on M; small
 * M takes its streaming path, which does not copy the weights each call).
 * With oneDNN and deterministic=0, a few rows (decode) take that streaming
 * path too, or on AVX-512 with trans_b the dot-product kernel of
 * cpu_gemm_dot.c, where those were the faster (see cpu_gemm).
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

#include "cpu_kernels.h"

#ifdef TY_CPU_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>


/* C = op(A) op(B) (+ C when accumulate), row-major. */
bool cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     bool accumulate, int threads, bool deterministic) {
  if (deterministic) {
    return cpu_gemm_blocked(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
  }
  /* Few rows (decode) where something beat dnnl_sgemm with the weights in
   * DRAM, as in a decode step. M = 1 stays on oneDNN's GEMV (faster or
   * tied everywhere measured).
   * AVX2 (one thread, AMD EPYC, ms): the streaming path won at every shape
   * with trans_b for 2..16 rows (8 rows: [50257 x 768]^T 33.1 vs 43.9,
   * [2048 x 2048]^T 1.84 vs 2.16, [8192 x 2048]^T 11.5 vs 16.7, [2304 x
   * 768]^T 0.79 vs 0.78); without it, it won or tied up to 8 rows where
   * K <= N (8 x 768 @ 768x3072 0.97 vs 1.16, 768x2304 0.63 vs 0.63) but
   * lost at 16 rows and in a decode step at 3072x768.
   * AVX-512 (two threads, AMD EPYC Zen 4, ms for GPT-2 124M's weights read
   * from DRAM, medians of 9-11 runs, load 0.5): the streaming path's 8 x 48
   * tile against dnnl_sgemm over the 12 layers' four plain-B matmuls
   * (768x2304, 768x768, 768x3072, 3072x768) for 2 / 4 / 8 / 16 rows: 14.8
   * vs 14.8, 15.1 vs 15.7, 18.6 vs 20.6, 20.9 vs 24.2 (K > N too: 3072x768
   * alone at 8 rows 6.1 vs 6.7); with trans_b, the tied lm_head
   * x @ [50257 x 768]^T, the dot-product kernel (cpu_gemm_dot.c) / dnnl /
   * the streaming path: 5.9 / 5.9 / 8.2, 5.5 / 11.3 / 8.1, 7.6 / 15.0 /
   * 9.1, 11.0 / 19.5 / 11.6. */
  const cpu_gemm_isa_t isa = cpu_gemm_isa_best();
  if (m >= 2 && isa == CPU_GEMM_ISA_AVX512) {
    if (tb && !ta && m <= CPU_GEMM_STREAM_MAX_M && cpu_gemm_dot_supported()) {
      return cpu_gemm_dot(m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
    }
    if (!tb && m <= CPU_GEMM_STREAM_MAX_M) {
      return cpu_gemm_blocked(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
    }
  }
  const bool few_rows =
      m >= 2 && isa == CPU_GEMM_ISA_AVX2 &&
      (tb ? m <= CPU_GEMM_STREAM_MAX_M : m <= CPU_GEMM_STREAM_MAX_M_NT && k <= n);
  if (few_rows) {
    return cpu_gemm_blocked(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
  }
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

#else

bool cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     bool accumulate, int threads, bool deterministic) {
  (void)deterministic; /* the blocked GEMM is batch-invariant already */
  return cpu_gemm_blocked(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, threads);
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
  const bool ta = ty_desc_node_attr_int(c->node, "trans_a", 0) != 0;
  const bool tb = ty_desc_node_attr_int(c->node, "trans_b", 0) != 0;
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
      gemm_ok = cpu_gemm(false, tb, batches * m, n, k, a, lda, b, ldb, cf, n, acc, threads,
                         c->deterministic);
    } else if (batches >= threads && m * n * k <= (int64_t)1 << 21) {
      int failed = 0;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
      for (int64_t bi = 0; bi < batches; ++bi) {
        bool one = cpu_gemm(ta, tb, m, n, k, a + cpu_batch_of(cv, av, bi) * m * k, lda,
                           b + cpu_batch_of(cv, bv, bi) * k * n, ldb, cf + bi * m * n, n, acc,
                           1, c->deterministic);
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
                           threads, c->deterministic);
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
