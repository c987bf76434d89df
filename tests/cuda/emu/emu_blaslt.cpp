/* A fake cuBLASLt for the CPU emulator (TRAINYARD_CUDA_BLASLT names it):
 * the entry points the cuda plugin uses, with cublasLtMatmul a plain
 * column-major GEMM on host memory — f32, bf16 or f16 storage, f32
 * accumulation, strided batches, transposes and the bias epilogue — so the
 * plugin's matmul builder (cuda_gemm.c) runs end to end without a GPU.
 *
 * Algorithms are as real as a batch-invariance test needs: the heuristic
 * picks by the whole shape, as cuBLASLt's does, and each algorithm sums K
 * in its own order, so a row summed by another algorithm gets other bits.
 * cuBLASLt's n (the plugin's M, its rows) decides: n < 64 gets algorithm 2
 * first (split-K in 4 parts, in place: no workspace) then 1, n < 256 gets
 * algorithm 1 (K in chunks of 8, each chunk summed then added), larger n
 * algorithm 0 (K in order; the summation of earlier versions). A zeroed
 * algo is algorithm 0. SPLITK_NUM and REDUCTION_SCHEME are readable and
 * settable config attributes, and the product honours SPLITK_NUM. */
#include <cublasLt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <functional>

/* emu_driver.cpp: runs the matmul on the stream (recorded when captured). */
extern "C" CUresult ty_emu_stream_submit(CUstream s, std::function<CUresult()> *op);

namespace {

struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
};
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");

struct Desc {
  cublasOperation_t ta, tb;
  cublasLtEpilogue_t epilogue;
  const void *bias; /* BGRADA/BGRADB: the bias gradient written, D's type */
  void *aux; /* GELU epilogues: the pre-activation, D's type, leading dimension aux_ld */
  int64_t aux_ld;
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");

Layout *lay(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout *>(l); }
Desc *dsc(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc *>(d); }

float load(cudaDataType_t t, const void *p, int64_t i) {
  switch (t) {
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

void store(cudaDataType_t t, void *p, int64_t i, float v) {
  switch (t) {
    case CUDA_R_16BF: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case CUDA_R_16F: ((__half *)p)[i] = __float2half_rn(v); break;
    default: ((float *)p)[i] = v; break;
  }
}

size_t type_size(cudaDataType_t t) { return t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 4; }

/* GELU's tanh form (the op's, docs/ops.md) and its derivative. */
float gelu(float x) {
  const float k = 0.7978845608028654f, t = tanhf(k * (x + 0.044715f * x * x * x));
  return 0.5f * x * (1.0f + t);
}
float gelu_grad(float x) {
  const float k = 0.7978845608028654f, t = tanhf(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

/* The emulated algorithm in cublasLtMatmulAlgo_t's words. */
enum { ALGO_ID = 0, ALGO_SPLITK = 1, ALGO_SCHEME = 2, ALGO_CHUNK = 3 };

struct Order {
  int64_t splits, chunk; /* K in `splits` parts summed in turn; inside a part,
                            chunks of `chunk` (0: none) */
};

Order order_of(const cublasLtMatmulAlgo_t *algo) {
  Order o = {1, 0};
  if (algo) {
    o.splits = algo->data[ALGO_SPLITK] > 1 ? (int64_t)algo->data[ALGO_SPLITK] : 1;
    o.chunk = (int64_t)algo->data[ALGO_CHUNK];
  }
  return o;
}

cublasLtMatmulAlgo_t make_algo(uint64_t id) {
  cublasLtMatmulAlgo_t a;
  memset(&a, 0, sizeof(a));
  a.data[ALGO_ID] = id;
  a.data[ALGO_SPLITK] = id == 2 ? 4 : 1;
  a.data[ALGO_SCHEME] = id == 2 ? CUBLASLT_REDUCTION_SCHEME_INPLACE : CUBLASLT_REDUCTION_SCHEME_NONE;
  a.data[ALGO_CHUNK] = id == 1 ? 8 : 0;
  return a;
}

/* sum_l f(l) for l in [0, k) in the order o gives. */
template <typename F> float ordered_sum(int64_t k, Order o, F f) {
  const int64_t part = (k + o.splits - 1) / o.splits;
  float total = 0.0f;
  for (int64_t p0 = 0; p0 < k; p0 += part) {
    const int64_t p1 = p0 + part < k ? p0 + part : k;
    float acc = 0.0f;
    if (o.chunk > 0) {
      for (int64_t c0 = p0; c0 < p1; c0 += o.chunk) {
        float cs = 0.0f;
        for (int64_t l = c0; l < p1 && l < c0 + o.chunk; ++l) cs += f(l);
        acc += cs;
      }
    } else {
      for (int64_t l = p0; l < p1; ++l) acc += f(l);
    }
    total = p0 == 0 ? acc : total + acc;
  }
  return total;
}

/* D (m x n) = alpha op(A) op(B) + beta C (+ bias[m] per row), column-major;
 * the GELU epilogues then store the pre-activation into aux and GELU of it
 * into D (GELU_AUX[_BIAS]), or D = result * gelu'(aux) (DGELU); BGRADA
 * writes bias[i] = sum_l op(A)[i, l] (m values), BGRADB bias[j] =
 * sum_l op(B)[l, j] (n values), in D's type. */
void gemm(const Desc *x, const Layout &a, const Layout &b, const Layout &c, const Layout &d,
          float al, float be, const void *A, const void *B, const void *C, void *D, Order ord) {
  const int64_t m = (int64_t)d.rows, n = (int64_t)d.cols;
  const bool ta = x->ta != CUBLAS_OP_N, tb = x->tb != CUBLAS_OP_N;
  const int64_t k = ta ? (int64_t)a.rows : (int64_t)a.cols;
  const bool bias = x->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                    x->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool gelu_aux = x->epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                        x->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = x->epilogue == CUBLASLT_EPILOGUE_DGELU;
  const int32_t batches = d.batch;
  for (int32_t q = 0; q < batches; ++q) {
    const char *pa = (const char *)A + (a.batch > 1 ? q * a.stride : 0) * type_size(a.type);
    const char *pb = (const char *)B + (b.batch > 1 ? q * b.stride : 0) * type_size(b.type);
    const char *pc = (const char *)C + (c.batch > 1 ? q * c.stride : 0) * type_size(c.type);
    char *pd = (char *)D + (d.batch > 1 ? q * d.stride : 0) * type_size(d.type);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) {
        const float acc = ordered_sum(k, ord, [&](int64_t l) {
          const float av = load(a.type, pa, ta ? l + i * a.ld : i + l * a.ld);
          const float bv = load(b.type, pb, tb ? j + l * b.ld : l + j * b.ld);
          return av * bv;
        });
        float v = al * acc;
        if (be != 0.0f) v += be * load(c.type, pc, i + j * c.ld);
        if (bias) v += load(d.type, x->bias, i);
        if (gelu_aux) {
          store(d.type, x->aux, i + j * x->aux_ld, v);
          v = gelu(v);
        } else if (dgelu) {
          v *= gelu_grad(load(d.type, x->aux, i + j * x->aux_ld));
        }
        store(d.type, pd, i + j * d.ld, v);
      }
    }
  }
  if (x->epilogue == CUBLASLT_EPILOGUE_BGRADA) {
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int64_t l = 0; l < k; ++l) acc += load(a.type, A, ta ? l + i * a.ld : i + l * a.ld);
      store(d.type, const_cast<void *>(x->bias), i, acc);
    }
  } else if (x->epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t l = 0; l < k; ++l) acc += load(b.type, B, tb ? j + l * b.ld : l + j * b.ld);
      store(d.type, const_cast<void *>(x->bias), j, acc);
    }
  }
}

bool bgrad(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

}  // namespace

#define TY_EMU_API __attribute__((visibility("default")))

extern "C" {

TY_EMU_API cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  static int handle;
  *h = reinterpret_cast<cublasLtHandle_t>(&handle);
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }
TY_EMU_API size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
TY_EMU_API const char *cublasLtGetStatusString(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_NOT_SUPPORTED";
}

TY_EMU_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t,
                                                   cudaDataType_t) {
  *d = new cublasLtMatmulDescOpaque_t();
  Desc *x = dsc(*d);
  x->ta = x->tb = CUBLAS_OP_N;
  x->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  x->bias = nullptr;
  x->aux = nullptr;
  x->aux_ld = 0;
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                         cublasLtMatmulDescAttributes_t a,
                                                         const void *buf, size_t size) {
  Desc *x = dsc(d);
  switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: memcpy(&x->ta, buf, sizeof(x->ta)); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: memcpy(&x->tb, buf, sizeof(x->tb)); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: memcpy(&x->epilogue, buf, sizeof(x->epilogue)); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: memcpy(&x->bias, buf, sizeof(x->bias)); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: memcpy(&x->aux, buf, sizeof(x->aux)); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: memcpy(&x->aux_ld, buf, sizeof(x->aux_ld)); break;
    default: break;
  }
  (void)size;
  return CUBLAS_STATUS_SUCCESS;
}

TY_EMU_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l,
                                                     cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld) {
  *l = new cublasLtMatrixLayoutOpaque_t();
  *lay(*l) = Layout{type, rows, cols, ld, 1, 0};
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                           cublasLtMatrixLayoutAttribute_t a,
                                                           const void *buf, size_t) {
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) memcpy(&lay(l)->batch, buf, 4);
  else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) memcpy(&lay(l)->stride, buf, 8);
  else if (a == CUBLASLT_MATRIX_LAYOUT_ORDER) {
    int32_t order;
    memcpy(&order, buf, 4);
    if (order != CUBLASLT_ORDER_COL) return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

TY_EMU_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new cublasLtMatmulPreferenceOpaque_t();
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
TY_EMU_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t) {
  return CUBLAS_STATUS_SUCCESS;
}

/* TY_EMU_BLASLT_NO_BGRAD=1: no algorithm with a bias-gradient epilogue (as
 * a cuBLASLt without one for the shape), for the executor's fallback. */
TY_EMU_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t,
    int requested, cublasLtMatmulHeuristicResult_t results[], int *count) {
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const char *no_bgrad = getenv("TY_EMU_BLASLT_NO_BGRAD");
  if (no_bgrad && strcmp(no_bgrad, "1") == 0 && bgrad(dsc(desc)->epilogue)) {
    *count = 0;
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const uint64_t n = lay(Ddesc)->cols;
  const uint64_t ids[2] = {n < 64 ? 2u : n < 256 ? 1u : 0u, n < 64 ? 1u : 0u};
  const int have = n < 64 ? 2 : 1;
  *count = requested < have ? requested : have;
  for (int i = 0; i < *count; ++i) {
    memset(&results[i], 0, sizeof(results[i]));
    results[i].algo = make_algo(ids[i]);
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  return CUBLAS_STATUS_SUCCESS;
}

TY_EMU_API cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,
    size_t size, size_t *written) {
  if (attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM && size == sizeof(int32_t)) {
    const int32_t v = (int32_t)algo->data[ALGO_SPLITK];
    memcpy(buf, &v, sizeof(v));
  } else if (attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME && size == sizeof(uint32_t)) {
    const uint32_t v = (uint32_t)algo->data[ALGO_SCHEME];
    memcpy(buf, &v, sizeof(v));
  } else if (attr == CUBLASLT_ALGO_CONFIG_ID && size == sizeof(int32_t)) {
    const int32_t v = (int32_t)algo->data[ALGO_ID];
    memcpy(buf, &v, sizeof(v));
  } else {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (written) *written = size;
  return CUBLAS_STATUS_SUCCESS;
}

TY_EMU_API cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(
    cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void *buf,
    size_t size) {
  if (attr == CUBLASLT_ALGO_CONFIG_SPLITK_NUM && size == sizeof(int32_t)) {
    int32_t v;
    memcpy(&v, buf, sizeof(v));
    algo->data[ALGO_SPLITK] = v > 1 ? (uint64_t)v : 1u;
  } else if (attr == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME && size == sizeof(uint32_t)) {
    uint32_t v;
    memcpy(&v, buf, sizeof(v));
    algo->data[ALGO_SCHEME] = v;
  } else {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

/* Every emulated algorithm runs every shape, without workspace. */
TY_EMU_API cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                                  cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                  cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                                  const cublasLtMatmulAlgo_t *algo,
                                                  cublasLtMatmulHeuristicResult_t *result) {
  if (!algo || algo->data[ALGO_ID] > 2) return CUBLAS_STATUS_INVALID_VALUE;
  memset(result, 0, sizeof(*result));
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}

TY_EMU_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                         const void *alpha, const void *A,
                                         cublasLtMatrixLayout_t Adesc, const void *B,
                                         cublasLtMatrixLayout_t Bdesc, const void *beta,
                                         const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                         cublasLtMatrixLayout_t Ddesc,
                                         const cublasLtMatmulAlgo_t *algo, void *, size_t,
                                         cudaStream_t stream) {
  const Order ord = order_of(algo);
  const Desc x = *dsc(desc);
  const Layout a = *lay(Adesc), b = *lay(Bdesc), c = *lay(Cdesc), d = *lay(Ddesc);
  const float al = *(const float *)alpha, be = *(const float *)beta;
  const int64_t m = (int64_t)d.rows, n = (int64_t)d.cols;
  const bool ta = x.ta != CUBLAS_OP_N, tb = x.tb != CUBLAS_OP_N;
  const int64_t k = ta ? (int64_t)a.rows : (int64_t)a.cols;
  if ((ta ? a.cols : a.rows) != (uint64_t)m || (tb ? b.rows : b.cols) != (uint64_t)n ||
      (tb ? b.cols : b.rows) != (uint64_t)k || c.rows != d.rows || c.cols != d.cols) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((x.epilogue == CUBLASLT_EPILOGUE_BIAS || x.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) &&
      !x.bias) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const bool uses_aux = x.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                        x.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                        x.epilogue == CUBLASLT_EPILOGUE_DGELU;
  /* As cuBLASLt: an aux leading dimension of a multiple of 8, at least m. */
  if (uses_aux && (!x.aux || x.aux_ld % 8 != 0 || x.aux_ld < m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (bgrad(x.epilogue) && (!x.bias || d.batch > 1)) return CUBLAS_STATUS_INVALID_VALUE;
  if (x.epilogue != CUBLASLT_EPILOGUE_DEFAULT && x.epilogue != CUBLASLT_EPILOGUE_BIAS &&
      !uses_aux && !bgrad(x.epilogue)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  static const bool trace = [] {
    const char *e = getenv("TRAINYARD_CUDA_EMU_TRACE"); /* as emu_driver.h's ty_emu_trace */
    return e && *e && strcmp(e, "0") != 0;
  }();
  std::function<CUresult()> op = [=] {
    if (trace) {
      fprintf(stderr, "emu-trace: gemm m %lld n %lld k %lld epilogue %d beta %g\n", (long long)m,
              (long long)n, (long long)k, (int)x.epilogue, (double)be);
    }
    gemm(&x, a, b, c, d, al, be, A, B, C, D, ord);
    return CUDA_SUCCESS;
  };
  return ty_emu_stream_submit((CUstream)stream, &op) == CUDA_SUCCESS
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
