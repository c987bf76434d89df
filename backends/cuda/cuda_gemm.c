/* The matmul op on cuBLASLt.
 *
 * Row-major to cuBLASLt's column-major: a row-major [R, C] matrix is a
 * column-major [C, R] one, so C = op(A) op(B) (row-major, M x N) is computed
 * as the column-major product C^T = op(B)^T op(A)^T of shape N x M: cuBLASLt's
 * "A" operand is our b and its "B" operand our a, with m = N, n = M and the
 * transposes carried over. A bias [N] is cuBLASLt's bias epilogue (one value
 * per row of the column-major result = per column of ours).
 *
 * Batches: the batch dimensions of a and b broadcast. Adjacent batch
 * dimensions whose strides chain are merged; the innermost merged group is
 * one strided-batched call (a broadcast operand has stride 0), and the outer
 * groups, if any, become one call each. A linear layer — b a plain matrix
 * under an untransposed, unbroadcast a — folds its batch into M: one GEMM.
 *
 * Precision: f32 runs with CUBLAS_COMPUTE_32F (exact f32 products, matching
 * the cpu backend to the conformance bounds) unless the device was opened
 * with tf32=1; bf16 and f16 accumulate in f32. Checked at the "reduction"
 * conform bound.
 *
 * Deterministic mode (cuda_exec.h): cuBLASLt's heuristic picks kernels by
 * the whole shape, so the same row of a product may be summed by another
 * kernel (another K blocking, or split-K partials) when the batch, our M,
 * changes. Under deterministic=1 the algorithm is chosen from a canonical
 * shape with TY_CU_DET_ROWS rows and the real N, K, layouts, dtypes and
 * epilogue, without workspace (split-K reductions and stream-K fix-ups need
 * it) and without split-K in its configuration, the first candidate that
 * also runs without workspace at a fixed set of probe row counts
 * (ty_cu_det_probe_rows) or, when none does, the first that runs them within
 * the device's workspace; the real shape must then pass
 * cublasLtMatmulAlgoCheck with it, or the compile is refused: a silent
 * second choice for some M would break the promise. */
#include "cuda_gemm.h"

#include "cuda_ops.h"
#include "kernels/gemv_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ty_cu_gemm_t {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our b), B (our a), C = D */
  cublasLtMatmulAlgo_t algo;
  ty_dev_ref_t a, b, c, bias, cin, aux; /* ours; cin: cuBLASLt's C when it is not c */
  CUdeviceptr pa, pb, pc, pbias, pcin, paux;
  bool has_cin;
  ty_cu_gemm_epi_t epilogue;
  uint32_t align; /* bytes every pointer must be aligned to */
  bool has_bias;
  bool has_bgrad; /* bias: the bias gradient the BGRADA/BGRADB epilogue writes */
  float beta; /* 1: accumulate into c */
  char shape[112]; /* for messages */
};

void ty_cu_gemm_free(ty_cu_api_t *api, ty_cu_gemm_t *g) {
  if (!g) return;
  if (g->la) api->cublasLtMatrixLayoutDestroy(g->la);
  if (g->lb) api->cublasLtMatrixLayoutDestroy(g->lb);
  if (g->lc) api->cublasLtMatrixLayoutDestroy(g->lc);
  if (g->desc) api->cublasLtMatmulDescDestroy(g->desc);
  free(g);
}

static cudaDataType_t ty_cu_blas_type(ty_dtype_t d) {
  switch (d) {
    case TY_DTYPE_BF16: return CUDA_R_16BF;
    case TY_DTYPE_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

/* The largest power of two up to 16 dividing x (x = 0 counts as aligned). */
static uint32_t ty_cu_pow2_align(uint64_t x) {
  uint32_t a = 16;
  while (a > 1 && x % a) a /= 2;
  return a;
}

static cublasLtMatrixLayout_t ty_cu_layout(ty_cu_build_t *b, cudaDataType_t t, uint64_t rows,
                                           uint64_t cols, int64_t ld, int32_t batch,
                                           int64_t stride) {
  ty_cu_api_t *api = b->device->api;
  cublasLtMatrixLayout_t l = NULL;
  cublasStatus_t s = api->cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld);
  if (s == CUBLAS_STATUS_SUCCESS && batch > 1) {
    s = api->cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                              sizeof(batch));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = api->cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &stride, sizeof(stride));
    }
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (l) api->cublasLtMatrixLayoutDestroy(l);
    ty_dev_fail(b, TY_CODE_INTERNAL, "cublasLtMatrixLayoutCreate failed: %s",
               ty_cu_blas_status_name(api, s));
    return NULL;
  }
  return l;
}

/* Row lengths in memory (elements) of a, b and c: their last dimensions, or
 * the executor's padded rows (cuda_exec.h, ty_cu_row_stride). */
typedef struct {
  int64_t a, b, c;
} ty_cu_lds_t;

/* The row count (cuBLASLt's n) of the canonical shape whose algorithm every
 * M runs in deterministic mode, and how many heuristic results are read. */
#define TY_CU_DET_ROWS 4096
#define TY_CU_DET_CANDIDATES 16

/* Whether algo splits K (SPLITK_NUM > 1 or any reduction scheme). */
static bool ty_cu_algo_splits_k(ty_cu_api_t *api, const cublasLtMatmulAlgo_t *algo) {
  int32_t splits = 1;
  uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
  size_t wrote = 0;
  if (api->cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                sizeof(splits), &wrote) != CUBLAS_STATUS_SUCCESS ||
      api->cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                &scheme, sizeof(scheme),
                                                &wrote) != CUBLAS_STATUS_SUCCESS) {
    return true; /* unknown: not trusted */
  }
  return splits > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE;
}

/* Row counts every pinned algorithm must run without workspace: a function
 * of nothing, so the pick below stays a function of (N, K, layouts, dtypes,
 * epilogue). cuBLASLt has algorithms that run a canonical M without
 * workspace and ask for some at a smaller one (on an H100, the bf16
 * 768 x 50304 LM head at 1024 rows): a work decomposition that follows the
 * tile count, which a batch-invariant pick must not take. */
static const uint64_t ty_cu_det_probe_rows[] = {1, 8, 64, 256, 1024, 4096};

/* Whether `algo` runs g's matmul at `rows` rows (cuBLASLt's n) within
 * `max_workspace` bytes. */
static bool ty_cu_algo_runs_at(ty_cu_build_t *b, const ty_cu_gemm_spec_t *sp, ty_cu_gemm_t *g,
                               cublasLtMatrixLayout_t la, const cublasLtMatmulAlgo_t *algo,
                               uint64_t rows, uint64_t max_workspace) {
  ty_abi_device_t *d = b->device;
  ty_cu_api_t *api = d->api;
  const cudaDataType_t t = ty_cu_blas_type(sp->ab_dtype), tc = ty_cu_blas_type(sp->c_dtype);
  const uint64_t K = (uint64_t)sp->K;
  const int64_t lda = sp->ta && sp->lda < (int64_t)rows ? (int64_t)rows : sp->lda;
  cublasLtMatrixLayout_t lb = sp->ta ? ty_cu_layout(b, t, rows, K, lda, 1, 0)
                                     : ty_cu_layout(b, t, K, rows, lda, 1, 0);
  cublasLtMatrixLayout_t lc = ty_cu_layout(b, tc, (uint64_t)sp->N, rows, sp->ldc, 1, 0);
  bool ok = false;
  if (lb && lc && !b->status) {
    cublasLtMatmulHeuristicResult_t check;
    memset(&check, 0, sizeof(check));
    ok = api->cublasLtMatmulAlgoCheck(d->blaslt, g->desc, la, lb, lc, lc, algo, &check) ==
             CUBLAS_STATUS_SUCCESS &&
         check.workspaceSize <= max_workspace;
  }
  if (lb) api->cublasLtMatrixLayoutDestroy(lb);
  if (lc) api->cublasLtMatrixLayoutDestroy(lc);
  return ok;
}

/* Deterministic mode's algorithm for g (layouts and descriptor set): see
 * the top of the file. `pref` holds the alignments; its workspace limit is
 * set to 0 here. */
static ty_code_t ty_cu_gemm_pin(ty_cu_build_t *b, const ty_cu_gemm_spec_t *sp, ty_cu_gemm_t *g,
                                cublasLtMatmulPreference_t pref, bool *no_algo, char *why,
                                size_t cap) {
  ty_abi_device_t *d = b->device;
  ty_cu_api_t *api = d->api;
  const cudaDataType_t t = ty_cu_blas_type(sp->ab_dtype), tc = ty_cu_blas_type(sp->c_dtype);
  const uint64_t M = TY_CU_DET_ROWS, N = (uint64_t)sp->N, K = (uint64_t)sp->K;
  /* One matrix of the canonical shape (count 1: a batched matmul's count
   * can follow the batch too); a transposed a is [K, M], rows of M. */
  const int64_t lda = sp->ta && sp->lda < (int64_t)M ? (int64_t)M : sp->lda;
  cublasLtMatrixLayout_t la = sp->tb ? ty_cu_layout(b, t, K, N, sp->ldb, 1, 0)
                                     : ty_cu_layout(b, t, N, K, sp->ldb, 1, 0);
  cublasLtMatrixLayout_t lb = sp->ta ? ty_cu_layout(b, t, M, K, lda, 1, 0)
                                     : ty_cu_layout(b, t, K, M, lda, 1, 0);
  cublasLtMatrixLayout_t lc = ty_cu_layout(b, tc, N, M, sp->ldc, 1, 0);
  ty_code_t code = TY_CODE_OK;
  cublasLtMatmulHeuristicResult_t results[TY_CU_DET_CANDIDATES];
  memset(results, 0, sizeof(results));
  int found = 0;
  cublasStatus_t s = CUBLAS_STATUS_NOT_INITIALIZED;
  if (!b->status) {
    const uint64_t no_workspace = 0;
    s = api->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &no_workspace, sizeof(no_workspace));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = api->cublasLtMatmulAlgoGetHeuristic(d->blaslt, g->desc, la, lb, lc, lc, pref,
                                              TY_CU_DET_CANDIDATES, results, &found);
    }
  }
  /* The first result that does not split K and runs every probe row count
   * without workspace; failing that, the first that runs them within the
   * device's workspace (the device tests check such a pick's rows bit for
   * bit: tests/cuda/device_run.sh deterministic). Chosen from the canonical
   * shape and the probes alone, never from what the real M accepts. */
  int pick = -1;
  const uint64_t limits[2] = {0, d->workspace_bytes};
  for (int tier = 0; tier < 2 && pick < 0; ++tier) {
    for (int i = 0; i < found && pick < 0 && !b->status; ++i) {
      if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize != 0 ||
          ty_cu_algo_splits_k(api, &results[i].algo)) {
        continue;
      }
      bool all = true;
      for (size_t r = 0;
           r < sizeof(ty_cu_det_probe_rows) / sizeof(ty_cu_det_probe_rows[0]) && all; ++r) {
        all = ty_cu_algo_runs_at(b, sp, g, la, &results[i].algo, ty_cu_det_probe_rows[r],
                                 limits[tier]);
      }
      if (all) pick = i;
    }
  }
  if (la) api->cublasLtMatrixLayoutDestroy(la);
  if (lb) api->cublasLtMatrixLayoutDestroy(lb);
  if (lc) api->cublasLtMatrixLayoutDestroy(lc);
  if (b->status) {
    why[0] = '\0';
    return TY_CODE_INTERNAL;
  }
  if (pick < 0) {
    if (sp->has_bgrad && s != CUBLAS_STATUS_ALLOC_FAILED) {
      *no_algo = true;
      return TY_CODE_OK;
    }
    snprintf(why, cap,
             "deterministic mode: cuBLASLt has no algorithm without split-K that runs every "
             "probe row count for the %s matmul (%d candidates at %d rows; %s); run without "
             "--deterministic",
             g->shape, found, TY_CU_DET_ROWS,
             s != CUBLAS_STATUS_SUCCESS ? ty_cu_blas_status_name(api, s)
                                        : "each splits K or fails at some row count");
    return TY_CODE_UNIMPLEMENTED;
  }
  cublasLtMatmulHeuristicResult_t check;
  memset(&check, 0, sizeof(check));
  s = api->cublasLtMatmulAlgoCheck(d->blaslt, g->desc, g->la, g->lb, g->lc, g->lc,
                                   &results[pick].algo, &check);
  if (s != CUBLAS_STATUS_SUCCESS || check.workspaceSize > d->workspace_bytes) {
    snprintf(why, cap,
             "deterministic mode: the algorithm every row count of the %s matmul runs "
             "(chosen at %d rows) fails on it (%s); run without --deterministic",
             g->shape, TY_CU_DET_ROWS,
             s != CUBLAS_STATUS_SUCCESS ? ty_cu_blas_status_name(api, s)
                                        : "needs more workspace than the device keeps");
    code = TY_CODE_UNIMPLEMENTED;
  }
  g->algo = results[pick].algo;
  return code;
}

/* Sets up g for sp: descriptor, layouts and algorithm. TY_CODE_OK when
 * done; else the failure's code with its message in `why` (g partly set;
 * the caller frees it). A bias-gradient epilogue for which cuBLASLt has no
 * algorithm sets *no_algo instead of failing. */
static ty_code_t ty_cu_gemm_setup(ty_cu_build_t *b, const ty_cu_gemm_spec_t *sp,
                                  ty_cu_gemm_t *g, bool *no_algo, char *why, size_t cap) {
  ty_abi_device_t *d = b->device;
  ty_cu_api_t *api = d->api;
  const size_t es = ty_desc_dtype_size(sp->ab_dtype), esc = ty_desc_dtype_size(sp->c_dtype);
  const int64_t M = sp->M, N = sp->N, K = sp->K;
  const bool ta = sp->ta, tb = sp->tb;
  g->a = sp->a;
  g->b = sp->b;
  g->c = sp->c;
  g->has_bias = sp->has_bias;
  g->has_bgrad = sp->has_bgrad;
  g->has_cin = sp->has_cin;
  g->cin = sp->cin;
  g->epilogue = sp->epilogue;
  g->aux = sp->aux;
  g->beta = sp->accumulate || sp->has_cin ? 1.0f : 0.0f;
  if (sp->has_bias) g->bias = sp->bias;
  if (sp->has_bgrad) g->bias = sp->bgrad;
  snprintf(g->shape, sizeof(g->shape), "%lldx%lldx%lld%s%s x%d %s%s%s%s%s", (long long)M,
           (long long)K, (long long)N, ta ? " ta" : "", tb ? " tb" : "", (int)sp->count,
           sp->ab_dtype == TY_DTYPE_BF16 ? "bf16" : sp->ab_dtype == TY_DTYPE_F16 ? "f16" : "f32",
           sp->c_dtype != sp->ab_dtype ? "->f32" : "",
           sp->accumulate ? " +=" : sp->has_cin ? " +c" : "",
           sp->epilogue == TY_CU_EPI_GELU_AUX ? " gelu"
           : sp->epilogue == TY_CU_EPI_DGELU  ? " dgelu"
                                              : "",
           sp->has_bgrad ? " dbias" : "");
  /* Every pointer this command will see is a 256-aligned base (allocations,
   * arena offsets) plus the binding offset plus these offsets and strides. */
  g->align = ty_cu_pow2_align(sp->a.offset | sp->b.offset | sp->c.offset |
                              (sp->has_cin ? sp->cin.offset : 0) |
                              (sp->epilogue ? sp->aux.offset : 0) |
                              (sp->has_bgrad ? sp->bgrad.offset : 0) |
                              (uint64_t)(sp->lda * (int64_t)es) |
                              (uint64_t)(sp->ldb * (int64_t)es) |
                              (uint64_t)(sp->ldc * (int64_t)esc));
  if (sp->count > 1) g->align = ty_cu_pow2_align(g->align | (uint64_t)(sp->sa * (int64_t)es) |
                                                 (uint64_t)(sp->sb * (int64_t)es) |
                                                 (uint64_t)(sp->sc * (int64_t)esc));
  if (g->align < es) g->align = (uint32_t)es;
  if (g->align < esc) g->align = (uint32_t)esc;
  const cudaDataType_t t = ty_cu_blas_type(sp->ab_dtype), tc = ty_cu_blas_type(sp->c_dtype);
  const cublasComputeType_t compute = sp->ab_dtype == TY_DTYPE_F32 && d->options.tf32
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  cublasStatus_t s = api->cublasLtMatmulDescCreate(&g->desc, compute, CUDA_R_32F);
  cublasOperation_t op_x = tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt A = our b */
  cublasOperation_t op_y = ta ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt B = our a */
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_x,
                                            sizeof(op_x));
  }
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_y,
                                            sizeof(op_y));
  }
  cublasLtEpilogue_t epi = sp->has_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (sp->epilogue == TY_CU_EPI_GELU_AUX) {
    epi = sp->has_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  } else if (sp->epilogue == TY_CU_EPI_DGELU) {
    epi = CUBLASLT_EPILOGUE_DGELU;
  } else if (sp->has_bgrad) {
    /* Our a is cuBLASLt's B: its sum over k is one value per column of D
     * (BGRADB); our b is its A: one per row (BGRADA). */
    epi = sp->bgrad_of == 0 ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BGRADA;
  }
  if (s == CUBLAS_STATUS_SUCCESS && epi != CUBLASLT_EPILOGUE_DEFAULT) {
    s = api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                            sizeof(epi));
  }
  /* Pointers set at every patch; the heuristic below sees aligned dummies. */
  void *dummy = (void *)(uintptr_t)256;
  if (s == CUBLAS_STATUS_SUCCESS && sp->has_bgrad) {
    s = api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dummy,
                                            sizeof(dummy));
  }
  if (s == CUBLAS_STATUS_SUCCESS && sp->epilogue != TY_CU_EPI_NONE) {
    /* The aux matrix is laid out as c (its rows are c's ldc). */
    const int64_t aux_ld = sp->ldc;
    s = api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                            &aux_ld, sizeof(aux_ld));
    if (s == CUBLAS_STATUS_SUCCESS) {
      s = api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                              &dummy, sizeof(dummy));
    }
  }
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(why, cap, "cublasLtMatmulDesc setup failed: %s", ty_cu_blas_status_name(api, s));
    return TY_CODE_INTERNAL;
  }
  /* Column-major shapes as stored (see the top of the file). */
  g->la = tb ? ty_cu_layout(b, t, (uint64_t)K, (uint64_t)N, sp->ldb, sp->count, sp->sb)
             : ty_cu_layout(b, t, (uint64_t)N, (uint64_t)K, sp->ldb, sp->count, sp->sb);
  g->lb = ta ? ty_cu_layout(b, t, (uint64_t)M, (uint64_t)K, sp->lda, sp->count, sp->sa)
             : ty_cu_layout(b, t, (uint64_t)K, (uint64_t)M, sp->lda, sp->count, sp->sa);
  g->lc = ty_cu_layout(b, tc, (uint64_t)N, (uint64_t)M, sp->ldc, sp->count, sp->sc);
  if (b->status) { /* ty_cu_layout failed the build with its message */
    why[0] = '\0';
    return TY_CODE_INTERNAL;
  }
  cublasLtMatmulPreference_t pref = NULL;
  s = api->cublasLtMatmulPreferenceCreate(&pref);
  uint64_t ws = d->workspace_bytes;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = api->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws));
  }
  const cublasLtMatmulPreferenceAttributes_t aligns[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; ++i) {
    s = api->cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &g->align, sizeof(g->align));
  }
  if (s == CUBLAS_STATUS_SUCCESS && b->deterministic) {
    const ty_code_t code = ty_cu_gemm_pin(b, sp, g, pref, no_algo, why, cap);
    api->cublasLtMatmulPreferenceDestroy(pref);
    return code;
  }
  cublasLtMatmulHeuristicResult_t result;
  memset(&result, 0, sizeof(result));
  int found = 0;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = api->cublasLtMatmulAlgoGetHeuristic(d->blaslt, g->desc, g->la, g->lb, g->lc, g->lc, pref,
                                            1, &result, &found);
  }
  if (pref) api->cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
    if (sp->has_bgrad && s != CUBLAS_STATUS_ALLOC_FAILED) {
      *no_algo = true;
      return TY_CODE_OK;
    }
    snprintf(why, cap, "cuBLASLt has no algorithm for the %s matmul (%s)", g->shape,
             s != CUBLAS_STATUS_SUCCESS ? ty_cu_blas_status_name(api, s) : "no heuristic result");
    return TY_CODE_UNIMPLEMENTED;
  }
  g->algo = result.algo;
  return TY_CODE_OK;
}

/* TRAINYARD_CUDA_GEMV picks which few-row matmuls take kernels/gemv.cu:
 * "group" (the default) only the GEMV_GROUP fusions (several products of
 * one input in one launch, cuda_fuse.h), "all" also every single matmul
 * the kernels take (both weight layouts), "nk" (or "1") also the single
 * ones with a [N, K] weight, "0" none.
 * Measured through `serve` on an H100 (docs/performance.md): cuBLASLt's
 * few-row kernels beat gemv_kn on GPT-2's [K, N] weights (one stream
 * 1,263-1,308 tok/s with every matmul on the kernels, 1,416-1,504 with
 * none), while one launch for Llama's q/k/v and gate/up (with swiglu)
 * took one Llama-3.2-1B stream from 515-525 to 531-533 tok/s. */
static const char *ty_cu_gemv_mode(void) {
  const char *env = getenv("TRAINYARD_CUDA_GEMV");
  return env && *env ? env : "group";
}

bool ty_cu_gemv_on(void) { return strcmp(ty_cu_gemv_mode(), "0") != 0; }

const char *ty_cu_gemv_bad_setting(void) {
  static const char *const modes[] = {"group", "all", "nk", "1", "0"};
  const char *m = ty_cu_gemv_mode();
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); ++i) {
    if (strcmp(m, modes[i]) == 0) return NULL;
  }
  return m;
}

/* Single matmuls (not only groups): =all or =nk. */
static bool ty_cu_gemv_single(void) {
  const char *m = ty_cu_gemv_mode();
  return strcmp(m, "all") == 0 || strcmp(m, "nk") == 0 || strcmp(m, "1") == 0;
}

/* [K, N] weights (gemv_kn): =all. */
static bool ty_cu_gemv_kn_enabled(void) { return strcmp(ty_cu_gemv_mode(), "all") == 0; }

/* Warps per output column of gemv_nk and gemv_group (1, 2, 4 or 8) for
 * `columns` columns of K (`vec` elements a 16-byte load): doubled until the
 * grid has two blocks an SM, while each warp's part of K stays one or more
 * 32-lane rounds of loads. */
static int32_t ty_cu_gemv_wpc(ty_cu_build_t *b, int64_t columns, int64_t K, int64_t vec) {
  const int64_t want = 2 * ty_cu_sm_count(b), rounds = (K + 32 * vec - 1) / (32 * vec);
  int32_t wpc = 1;
  while (wpc < TY_GEMV_NK_COLS &&
         (columns * wpc + TY_GEMV_NK_COLS - 1) / TY_GEMV_NK_COLS < want && rounds >= 2 * wpc) {
    wpc *= 2;
  }
  return wpc;
}

static const char *const ty_cu_gemv_nk_names[3] = {"ty_gemv_nk_f32", "ty_gemv_nk_bf16",
                                                   "ty_gemv_nk_f16"};
static const char *const ty_cu_gemv_kn_names[3] = {"ty_gemv_kn_f32", "ty_gemv_kn_bf16",
                                                   "ty_gemv_kn_f16"};

/* A decode step's few-row product on kernels/gemv.cu instead of cuBLASLt:
 * at most TY_GEMV_MAX_M rows of an untransposed a, one matrix, plain or
 * with a bias, a residual (cin) or the GELU epilogue, outside deterministic
 * mode (its pinned cuBLASLt algorithm is what keeps a row's bits the same
 * at any M). False when the shape is not one of those (cuBLASLt runs it). */
static bool ty_cu_gemv_emit(ty_cu_build_t *b, const ty_cu_gemm_spec_t *sp) {
  const ty_dtype_t dt = sp->ab_dtype;
  if (b->deterministic || !ty_cu_gemv_single()) return false;
  if (sp->M < 1 || sp->M > TY_GEMV_MAX_M || sp->ta || sp->count != 1 || sp->accumulate ||
      sp->has_bgrad || sp->epilogue == TY_CU_EPI_DGELU)
    return false;
  if (dt != TY_DTYPE_F32 && dt != TY_DTYPE_BF16 && dt != TY_DTYPE_F16) return false;
  if (sp->c_dtype != dt && sp->c_dtype != TY_DTYPE_F32) return false;
  if (!sp->tb && !ty_cu_gemv_kn_enabled()) return false;
  const int64_t vec = 16 / (int64_t)ty_desc_dtype_size(dt);
  if ((sp->tb ? sp->K : sp->N) % vec != 0 || sp->N > INT32_MAX * (int64_t)TY_GEMV_NK_COLS)
    return false;
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_GEMV,
                                ty_cu_typed(sp->tb ? ty_cu_gemv_nk_names : ty_cu_gemv_kn_names, dt));
  /* ty_gemv_<nk|kn>_<dt>(a, b, bias, cin, c, aux, int M, i64 N, i64 K, i64 lda, i64 ldb,
   *   i64 ldc, int dtc, int gelu, then nk: int wpc; kn: f32 *part, i32 *count) */
  ty_dev_arg_ref(b, c, sp->a);
  ty_dev_arg_ref(b, c, sp->b);
  ty_dev_arg_ref(b, c, sp->has_bias ? sp->bias : ty_dev_none());
  ty_dev_arg_ref(b, c, sp->has_cin ? sp->cin : ty_dev_none());
  ty_dev_arg_ref(b, c, sp->c);
  ty_dev_arg_ref(b, c, sp->epilogue == TY_CU_EPI_GELU_AUX ? sp->aux : ty_dev_none());
  ty_dev_arg_i32(b, c, (int32_t)sp->M);
  ty_dev_arg_i64(b, c, sp->N);
  ty_dev_arg_i64(b, c, sp->K);
  ty_dev_arg_i64(b, c, sp->lda);
  ty_dev_arg_i64(b, c, sp->ldb);
  ty_dev_arg_i64(b, c, sp->ldc);
  ty_dev_arg_i32(b, c, (int32_t)sp->c_dtype);
  ty_dev_arg_i32(b, c, sp->epilogue == TY_CU_EPI_GELU_AUX ? 1 : 0);
  int64_t cols = sp->tb ? TY_GEMV_NK_COLS : TY_GEMV_KN_COLS;
  int64_t runs = 1;
  if (sp->tb) {
    const int32_t wpc = ty_cu_gemv_wpc(b, sp->N, sp->K, vec);
    cols = TY_GEMV_NK_COLS / wpc;
    ty_dev_arg_i32(b, c, wpc);
  }
  const int64_t col_blocks = (sp->N + cols - 1) / cols;
  if (!sp->tb) {
    /* gemv_kn's split-K: enough runs of K for two blocks an SM, each
     * thread of a run still walking two or more rows. */
    const int64_t slices = TY_GEMV_THREADS / (TY_GEMV_KN_COLS / vec), want = 2 * ty_cu_sm_count(b);
    runs = (want + col_blocks - 1) / col_blocks;
    if (runs > sp->K / (2 * slices)) runs = sp->K / (2 * slices);
    if (runs > TY_GEMV_KN_MAX_RUNS) runs = TY_GEMV_KN_MAX_RUNS;
    if (runs < 1) runs = 1;
    ty_dev_arg_ref(b, c, runs > 1 ? ty_dev_scratch(b, (uint64_t)(runs * sp->M * sp->N) *
                                                          sizeof(float))
                                   : ty_dev_none());
    ty_dev_arg_ref(b, c, runs > 1 ? ty_dev_aux(b, NULL, (uint64_t)col_blocks * sizeof(int32_t))
                                  : ty_dev_none());
  }
  ty_cu_grid(b, c, (uint32_t)col_blocks, (uint32_t)runs, 1, TY_GEMV_THREADS, 1, 1, 0);
  return true;
}

void ty_cu_gemm_emit(ty_cu_build_t *b, const ty_cu_gemm_spec_t *sp) {
  if (b->status) return;
  if (ty_cu_gemv_emit(b, sp)) return;
  ty_cu_api_t *api = b->device->api;
  ty_cu_gemm_t *g = calloc(1, sizeof(*g));
  if (!g) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  bool no_algo = false;
  char why[512];
  const ty_code_t code = ty_cu_gemm_setup(b, sp, g, &no_algo, why, sizeof(why));
  if (code != TY_CODE_OK || no_algo) {
    ty_cu_gemm_free(api, g);
    if (code != TY_CODE_OK) {
      if (!b->status) ty_dev_fail(b, code, "%s", why);
      return;
    }
    /* No algorithm with the bias-gradient epilogue: the product alone,
     * then the bias gradient as its own column sum of the operand. */
    ty_cu_gemm_spec_t plain = *sp;
    plain.has_bgrad = false;
    ty_cu_gemm_emit(b, &plain);
    if (b->status) return;
    const bool of_a = sp->bgrad_of == 0;
    ty_cu_col_sum(b, of_a ? sp->a : sp->b, sp->ab_dtype, sp->bgrad, sp->c_dtype, sp->K,
                  of_a ? sp->M : sp->N);
    return;
  }
  ty_cu_cmd_t *c = ty_cu_gemm_cmd(b, "cublasLt matmul");
  if (!c) {
    ty_cu_gemm_free(api, g);
    return;
  }
  c->gemm = g;
}

/* One GEMM command of the matmul op: `count` strided batches starting at
 * the given byte offsets of a, b and c (the node's operands). */
/* c_to: where C goes instead of the node's output (+ off_c), or NULL. */
static void ty_cu_gemm_add(ty_cu_build_t *b, ty_dtype_t dt, int64_t M, int64_t N, int64_t K,
                           bool ta, bool tb, ty_cu_lds_t ld, int32_t count, int64_t sa,
                           int64_t sb, int64_t sc, uint64_t off_a, uint64_t off_b,
                           uint64_t off_c, bool bias, const ty_dev_ref_t *c_to) {
  /* A fused matmul (cuda_fuse.h, one-GEMM path only) writes the cast's or
   * the add's output, in its dtype, adding the add's other operand. */
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b) && ty_cu_fuse_of(b)->kind == TY_CU_FUSE_GEMM ? ty_cu_fuse_of(b) : NULL;
  const ty_cu_gemm_spec_t spec = {
      .a = ty_dev_ref_at(ty_dev_in(b, 0), off_a),
      .b = ty_dev_ref_at(ty_dev_in(b, 1), off_b),
      .c = f && f->out != UINT32_MAX ? ty_dev_value(f->out)
           : c_to                    ? *c_to
                                     : ty_dev_ref_at(ty_dev_out(b, 0), off_c),
      .bias = !bias                       ? ty_dev_none()
              : f && f->bias != UINT32_MAX ? ty_dev_value(f->bias)
                                           : ty_dev_in(b, 2),
      .cin = f && f->addend != UINT32_MAX ? ty_dev_value(f->addend) : ty_dev_none(),
      .has_cin = f && f->addend != UINT32_MAX,
      .aux = f && f->epilogue ? ty_dev_value(f->aux) : ty_dev_none(),
      .epilogue = f ? f->epilogue : TY_CU_EPI_NONE,
      .ab_dtype = dt,
      .c_dtype = f && f->out != UINT32_MAX ? b->g->values[f->out].dtype : dt,
      .bgrad = f && f->bgrad != UINT32_MAX ? ty_dev_value(f->bgrad) : ty_dev_none(),
      .has_bgrad = f && f->bgrad != UINT32_MAX,
      .bgrad_of = f ? f->bgrad_of : 0,
      .M = M,
      .N = N,
      .K = K,
      .ta = ta,
      .tb = tb,
      .has_bias = bias,
      .lda = ld.a,
      .ldb = ld.b,
      .ldc = ld.c,
      .count = count,
      .sa = sa,
      .sb = sb,
      .sc = sc,
  };
  ty_cu_gemm_emit(b, &spec);
}

/* A product a @ b^T whose output rows are not a multiple of 16 bytes
 * (GPT-2's logits in serving: 50257 columns, a graph output, so
 * cuda_compile.c cannot pad its layout nor the weight's rows) keeps
 * cuBLASLt on a CUTLASS SIMT kernel: 190 us for 64 rows of GPT-2's head on
 * an H100. A padded ldc alone does not move it (the odd m, our N, does not
 * fit its vector epilogue). So such a one-GEMM product of at least
 * TY_CU_PITCH_MIN columns, not fused and without a bias, runs as two GEMMs
 * into a scratch whose rows are padded to 64 elements: the first N rounded
 * down to 16 bytes of columns (aligned m, aligned ldc), then the few last
 * columns (b's last rows), and one strided copy packs the rows into the
 * output. The same path for every M, so deterministic mode's batch
 * invariance holds. TRAINYARD_CUDA_PAD_ROWS=0 turns it off with the padded
 * layouts. */
#define TY_CU_PITCH_MIN 256
static bool ty_cu_pitched_output(ty_cu_build_t *b, ty_dtype_t dt, int64_t M, int64_t N,
                                 int64_t K, bool ta, bool tb, ty_cu_lds_t ld, bool bias) {
  const size_t es = ty_desc_dtype_size(dt);
  if (ty_cu_fuse_of(b) || ta || !tb || bias || ld.c != N || N < TY_CU_PITCH_MIN ||
      ((uint64_t)N * es) % 16 == 0 || ty_dev_vout(b, 0)->dtype != dt) {
    return false;
  }
  const char *env = getenv("TRAINYARD_CUDA_PAD_ROWS");
  if (env && !strcmp(env, "0")) return false;
  const int64_t pitch = (N + 63) / 64 * 64, unit = (int64_t)(16 / es);
  const int64_t main_n = N / unit * unit, tail = N - main_n;
  const ty_dev_ref_t tmp = ty_dev_scratch(b, (uint64_t)M * (uint64_t)pitch * es);
  const ty_cu_lds_t pl = {ld.a, ld.b, pitch};
  ty_cu_gemm_add(b, dt, M, main_n, K, ta, tb, pl, 1, 0, 0, 0, 0, 0, 0, false, &tmp);
  if (tail > 0) {
    const ty_dev_ref_t last = ty_dev_ref_at(tmp, (uint64_t)main_n * es);
    ty_cu_gemm_add(b, dt, M, tail, K, ta, tb, pl, 1, 0, 0, 0, 0,
                   (uint64_t)main_n * (uint64_t)ld.b * es, 0, false, &last);
  }
  const int64_t dims[2] = {M, N}, xs[2] = {pitch, 1}, ys[2] = {N, 1};
  ty_cu_movers.strided_copy(b, tmp, ty_dev_out(b, 0), es, 2, dims, xs, ys);
  return true;
}

/* Row-major strides (elements) of a value's dims, right-aligned to `rank`
 * batch dims of the output (0 for broadcast or absent dims). */
static void ty_cu_batch_strides(const ty_abi_value_t *v, int64_t matrix, uint32_t out_batch,
                                const int64_t *out_dims, int64_t *strides) {
  uint32_t vb = v->rank - 2;
  int64_t stride = matrix;
  for (int32_t i = (int32_t)out_batch - 1; i >= 0; --i) {
    int32_t vi = (int32_t)vb - ((int32_t)out_batch - i);
    if (vi < 0 || v->dims[vi] == 1 || out_dims[i] == 1) {
      strides[i] = 0;
    } else {
      strides[i] = stride;
    }
    if (vi >= 0) stride *= v->dims[vi];
  }
}

static const char *const ty_cu_gemv_group_names[3] = {"ty_gemv_group_f32", "ty_gemv_group_bf16",
                                                      "ty_gemv_group_f16"};

/* A GEMV_GROUP (cuda_fuse.h): this matmul and the members' in one
 * gemv_group launch, which the fusion rule only forms where the GEMV path
 * runs and the operands are dense [N_i, K] weights of one dtype.
 * ty_gemv_group_<dt>(a, b0, b1, b2, bias0, bias1, bias2, c0, c1, c2, int M,
 *   i64 N0, i64 N1, i64 N2, i64 K, int swiglu, int wpc) */
static void ty_cu_gemv_group_emit(ty_cu_build_t *b, const ty_cu_fuse_t *f) {
  const ty_abi_value_t *a = ty_dev_vin(b, 0);
  const ty_dtype_t dt = a->dtype;
  const int64_t K = a->dims[a->rank - 1], M = ty_dev_numel(a) / K;
  const ty_abi_node_t *nodes[TY_GEMV_GROUP_MAX] = {b->node, NULL, NULL};
  for (uint32_t i = 0; i < f->slice_count; ++i) nodes[i + 1] = &b->g->nodes[f->slices[i]];
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_GEMV, ty_cu_typed(ty_cu_gemv_group_names, dt));
  int64_t N[TY_GEMV_GROUP_MAX] = {0, 0, 0}, total = 0;
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  for (int i = 0; i < TY_GEMV_GROUP_MAX; ++i) {
    ty_dev_arg_ref(b, c, nodes[i] ? ty_dev_value(nodes[i]->inputs[1]) : ty_dev_none());
    if (nodes[i]) N[i] = b->g->values[nodes[i]->inputs[1]].dims[0];
  }
  for (int i = 0; i < TY_GEMV_GROUP_MAX; ++i) {
    const bool has = nodes[i] && nodes[i]->input_count > 2 && nodes[i]->inputs[2] != UINT32_MAX;
    ty_dev_arg_ref(b, c, has ? ty_dev_value(nodes[i]->inputs[2]) : ty_dev_none());
  }
  const bool swiglu = f->swiglu != UINT32_MAX;
  for (int i = 0; i < TY_GEMV_GROUP_MAX; ++i) {
    ty_dev_ref_t out = !nodes[i]           ? ty_dev_none()
                       : swiglu && i == 0  ? ty_dev_value(f->out)
                       : swiglu            ? ty_dev_none()
                                           : ty_dev_value(nodes[i]->outputs[0]);
    ty_dev_arg_ref(b, c, out);
  }
  total = swiglu ? N[0] : N[0] + N[1] + N[2];
  ty_dev_arg_i32(b, c, (int32_t)M);
  for (int i = 0; i < TY_GEMV_GROUP_MAX; ++i) ty_dev_arg_i64(b, c, N[i]);
  ty_dev_arg_i64(b, c, K);
  ty_dev_arg_i32(b, c, swiglu ? 1 : 0);
  const int32_t wpc = ty_cu_gemv_wpc(b, total, K, 16 / (int64_t)ty_desc_dtype_size(dt));
  ty_dev_arg_i32(b, c, wpc);
  const int64_t cols = TY_GEMV_NK_COLS / wpc;
  ty_cu_grid(b, c, (uint32_t)((total + cols - 1) / cols), 1, 1, TY_GEMV_THREADS, 1, 1, 0);
}

void ty_cu_build_matmul(ty_cu_build_t *b) {
  const ty_cu_fuse_t *fz = ty_cu_fuse_of(b);
  if (fz && fz->kind == TY_CU_FUSE_GEMV_GROUP) {
    ty_cu_gemv_group_emit(b, fz);
    return;
  }
  const ty_abi_value_t *a = ty_dev_vin(b, 0), *bm = ty_dev_vin(b, 1), *bias = ty_dev_vin(b, 2);
  const ty_abi_value_t *c = ty_dev_vout(b, 0);
  const ty_dev_matmul_t mm = ty_dev_matmul_of(b);
  const bool ta = mm.ta, tb = mm.tb;
  const int64_t M = mm.M, N = mm.N, K = mm.K;
  const ty_dtype_t dt = c->dtype;
  const size_t es = ty_desc_dtype_size(dt);
  if (ty_dev_numel(c) == 0) return;
  if (K == 0) { /* an empty sum: zeros (plus the bias) */
    if (bias) {
      /* Broadcast the bias over every row with a one-element-K product is
       * not possible; a plain kernel does it. */
      ty_cu_cmd_t *k = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, "ty_bias_rows");
      ty_dev_arg_ref(b, k, ty_dev_in(b, 2));
      ty_dev_arg_out(b, k, 0);
      ty_dev_arg_i64(b, k, ty_dev_numel(c));
      ty_dev_arg_i64(b, k, N);
      ty_cu_grid1(b, k, (uint64_t)ty_dev_numel(c), TY_CU_BLOCK);
    } else {
      ty_cu_fill(b, ty_dev_out(b, 0), (uint64_t)ty_dev_numel(c) * es);
    }
    return;
  }
  const uint32_t nb = c->rank - 2;
  const ty_cu_lds_t ld = {ty_cu_row_stride(b, b->node->inputs[0]),
                          ty_cu_row_stride(b, b->node->inputs[1]),
                          ty_cu_row_stride(b, b->node->outputs[0])};
  int64_t sa[8] = {0}, sb[8] = {0}, sc[8] = {0};
  /* Elements of one matrix in memory: its rows times its row length. */
  ty_cu_batch_strides(a, (ta ? K : M) * ld.a, nb, c->dims, sa);
  ty_cu_batch_strides(bm, (tb ? N : K) * ld.b, nb, c->dims, sb);
  {
    int64_t stride = M * ld.c;
    for (int32_t i = (int32_t)nb - 1; i >= 0; --i) {
      sc[i] = stride;
      stride *= c->dims[i];
    }
  }
  /* The padded LM head (cuda_compile.c): compute over the zero padding so
   * cuBLASLt sees aligned m and k. */
  int64_t N_run = N, K_run = K;
  if (!ta && tb && !bias && ld.c > N && ty_cu_zero_rows(b, b->node->inputs[1]) >= ld.c) {
    N_run = ld.c;
  }
  if (!ta && !tb && ld.a > K && ty_cu_zero_cols(b, b->node->inputs[0]) &&
      ty_cu_zero_rows(b, b->node->inputs[1]) >= ld.a) {
    K_run = ld.a;
  }
  /* Linear layer: b unbatched, a untransposed and not broadcast. */
  bool b_plain = bm->rank == 2, a_full = !ta;
  int64_t batch = 1;
  for (uint32_t i = 0; i < nb; ++i) {
    batch *= c->dims[i];
    if (c->dims[i] > 1 && sa[i] == 0) a_full = false;
  }
  if (nb == 0 || (b_plain && a_full)) {
    if (ty_cu_pitched_output(b, dt, M * batch, N_run, K_run, ta, tb, ld, bias != NULL)) return;
    ty_cu_gemm_add(b, dt, M * batch, N_run, K_run, ta, tb, ld, 1, 0, 0, 0, 0, 0, 0,
                   bias != NULL, NULL);
    return;
  }
  if (ty_cu_fuse_of(b)) { /* cuda_fuse.c only fuses the one-GEMM shapes above */
    ty_dev_fail(b, TY_CODE_INTERNAL, "a fused matmul on the batched path");
    return;
  }
  /* Merge chained batch dims from the inside out. */
  int64_t dims[8], ga[8], gb[8], gc[8];
  int groups = 0;
  for (int32_t i = (int32_t)nb - 1; i >= 0; --i) {
    if (c->dims[i] == 1) continue;
    if (groups > 0) {
      int j = groups - 1;
      bool chain = sa[i] == ga[j] * dims[j] && sb[i] == gb[j] * dims[j] &&
                   sc[i] == gc[j] * dims[j];
      if (chain) {
        dims[j] *= c->dims[i];
        continue;
      }
    }
    dims[groups] = c->dims[i];
    ga[groups] = sa[i];
    gb[groups] = sb[i];
    gc[groups] = sc[i];
    groups++;
  }
  if (groups == 0) {
    ty_cu_gemm_add(b, dt, M, N, K, ta, tb, ld, 1, 0, 0, 0, 0, 0, 0, bias != NULL, NULL);
    return;
  }
  /* groups[0] is the innermost: strided batch; the others loop. */
  int64_t outer = 1;
  for (int j = 1; j < groups; ++j) outer *= dims[j];
  if (dims[0] > INT32_MAX) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "a batch of %lld matrices is above cuBLASLt's limit",
               (long long)dims[0]);
    return;
  }
  if (outer > 4096) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED,
               "a matmul whose broadcast batch needs %lld separate calls (at most 4096)",
               (long long)outer);
    return;
  }
  for (int64_t o = 0; o < outer && !b->status; ++o) {
    int64_t rem = o, oa = 0, ob = 0, oc = 0;
    for (int j = 1; j < groups; ++j) {
      int64_t idx = rem % dims[j];
      rem /= dims[j];
      oa += idx * ga[j];
      ob += idx * gb[j];
      oc += idx * gc[j];
    }
    ty_cu_gemm_add(b, dt, M, N, K, ta, tb, ld, (int32_t)dims[0], ga[0], gb[0], gc[0],
                   (uint64_t)oa * es, (uint64_t)ob * es, (uint64_t)oc * es, bias != NULL, NULL);
  }
}

bool ty_cu_gemm_patch(ty_cu_exec_t *e, ty_cu_gemm_t *g) {
  CUdeviceptr pa = ty_cu_ref_address(e, g->a), pb = ty_cu_ref_address(e, g->b);
  CUdeviceptr pc = ty_cu_ref_address(e, g->c);
  CUdeviceptr pbias = g->has_bias || g->has_bgrad ? ty_cu_ref_address(e, g->bias) : 0;
  CUdeviceptr pcin = g->has_cin ? ty_cu_ref_address(e, g->cin) : pc;
  CUdeviceptr paux = g->epilogue ? ty_cu_ref_address(e, g->aux) : 0;
  bool changed = pa != g->pa || pb != g->pb || pc != g->pc || pbias != g->pbias ||
                 pcin != g->pcin || paux != g->paux;
  if (paux != g->paux) {
    ty_cu_api_t *api = ty_cu_exec_device(e)->api;
    void *p = (void *)(uintptr_t)paux;
    api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p,
                                        sizeof(p));
  }
  if (pbias != g->pbias) {
    ty_cu_api_t *api = ty_cu_exec_device(e)->api;
    void *p = (void *)(uintptr_t)pbias;
    api->cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p,
                                        sizeof(p));
  }
  g->pa = pa;
  g->pb = pb;
  g->pc = pc;
  g->pbias = pbias;
  g->pcin = pcin;
  g->paux = paux;
  return changed;
}

ty_abi_status_t ty_cu_gemm_run(ty_cu_exec_t *e, const ty_cu_cmd_t *c) {
  ty_cu_gemm_t *g = c->gemm;
  ty_abi_device_t *d = ty_cu_exec_device(e);
  ty_cu_api_t *api = d->api;
  if ((g->pa | g->pb | g->pc | g->pbias | g->pcin | g->paux) % g->align) {
    return ty_plugin_error(TY_CODE_INTERNAL,
                       "%s: node %u (matmul %s): an operand is not aligned to the %u bytes the "
                       "compiled matmul assumed (a=%#llx b=%#llx c=%#llx)",
                       d->label, c->node, g->shape, g->align, (unsigned long long)g->pa,
                       (unsigned long long)g->pb, (unsigned long long)g->pc);
  }
  const float one = 1.0f;
  cublasStatus_t s = api->cublasLtMatmul(
      d->blaslt, g->desc, &one, (const void *)(uintptr_t)g->pb, g->la,
      (const void *)(uintptr_t)g->pa, g->lb, &g->beta, (const void *)(uintptr_t)g->pcin, g->lc,
      (void *)(uintptr_t)g->pc, g->lc, &g->algo, (void *)(uintptr_t)d->workspace,
      (size_t)d->workspace_bytes, d->stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    /* cuBLASLt reports a context broken by an earlier asynchronous fault
     * (an illegal address in a kernel before this one) as an internal
     * failure of its own: the driver's sticky error is the real cause. */
    CUresult r = api->cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) {
      char what[320];
      snprintf(what, sizeof(what),
               "the work queued before node %u (matmul %s; cuBLASLt: %s; "
               "TRAINYARD_CUDA_SYNC=1 names the kernel)",
               c->node, g->shape, ty_cu_blas_status_name(api, s));
      return ty_cu_driver_error(d, what, r);
    }
    return ty_plugin_error(TY_CODE_INTERNAL, "%s: node %u (matmul %s): cublasLtMatmul failed: %s",
                       d->label, c->node, g->shape, ty_cu_blas_status_name(api, s));
  }
  return NULL;
}
