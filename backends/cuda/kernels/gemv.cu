/* Matrix-vector products for the few-row matmuls of decoding (cuda_gemm.c
 * sends a matmul here when it has at most TY_GEMV_MAX_M rows, no
 * transposed a, and is not under deterministic=1):
 *
 *   c[m, n] = epi(sum_k a[m, k] b(k, n) + bias[n] + cin[m, n])
 *
 * with b(k, n) = b[k, n] (gemv_kn: a [K, N] weight, GPT-2's Conv1D) or
 * b[n, k] (gemv_nk: a [N, K] weight, nn.Linear's). epi is the identity or
 * the tanh GELU of the gelu op (then aux[m, n] receives the argument, as
 * cuBLASLt's GELU_AUX epilogue writes it). Accumulation in f32, each output
 * in one fixed order; cuBLASLt's order differs, so results differ from the
 * GEMM path by rounding (within the conformance bounds), which is why
 * deterministic=1 (batch invariance) never takes this path.
 *
 * The weight is read once in 16-byte loads, every row of a in the same
 * pass: at one to four rows a decode step's matmuls are bound by reading
 * the weight, and cuBLASLt's tiles (64 or more rows) idle most of their
 * threads there. K (nk) or N (kn) is a multiple of the 16-byte vector (the
 * host checks); pointers and row strides that are not 16-byte aligned take
 * element loads instead of vector ones (the same sums). */
#include "vec.cuh"
#include "gemv_shapes.h"

/* 16 bytes of T as f32: 8 elements of bf16/f16, 4 of f32. */
template <typename T> struct ty_gv {
  static constexpr int kVec = 16 / (int)sizeof(T);
  /* vec: p is 16-byte aligned (else element by element, the same values) */
  __device__ static inline void load(const T *p, float *v, bool vec) {
    if (!vec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) v[e] = ty_to_f<T>(p[e]);
      return;
    }
    const uint4 r = ty_vload<uint4>(p);
    if (sizeof(T) == 4) {
      v[0] = __uint_as_float(r.x);
      v[1] = __uint_as_float(r.y);
      v[2] = __uint_as_float(r.z);
      v[3] = __uint_as_float(r.w);
    } else {
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (ty_dt_code<T>() == TY_BF16) ty_bf16x2_to_f(w[i], v + 2 * i);
        else ty_f16x2_to_f(w[i], v + 2 * i);
      }
    }
  }
};

__device__ inline float ty_gv_gelu(float x) {
  const float k0 = 0.7978845608028654f, k1 = 0.044715f;
  return x / (1.0f + expf(-2.0f * (k0 * (x + k1 * x * x * x))));
}

/* The epilogue of output (m, n) with its f32 sum. bias, cin, c and aux
 * are of c's dtype dtc (a fused cast's f32 output takes the f32 bias, as
 * cuBLASLt's bias epilogue does). */
__device__ inline void ty_gv_store(float v, long long m, long long n, const void *bias,
                                   const void *cin, void *c, void *aux, long long ldc, int dtc,
                                   int gelu) {
  if (bias) v += ty_ld(bias, n, dtc);
  if (cin) v += ty_ld(cin, m * ldc + n, dtc);
  if (gelu) {
    ty_st(aux, m * ldc + n, dtc, v);
    v = ty_gv_gelu(v);
  }
  ty_st(c, m * ldc + n, dtc, v);
}

/* ---- b [N, K]: `wpc` warps per output column n (1, 2, 4 or 8; the block's
 * 8 warps hold 8 / wpc columns): warp w of a column walks its w-th part of
 * K in 16-byte steps (lane-strided), every row of a at once, then a fixed
 * shuffle reduction, and the column's parts are added in part order
 * through shared memory. A product of few columns (Llama's key and value
 * projections: 512) takes several warps a column, so the grid still fills
 * the card. Grid ceil(N / (8 / wpc)). ---- */
template <typename T>
__device__ void ty_gemv_nk_impl(const void *a_, const void *b_, const void *bias,
                                const void *cin, void *c, void *aux, int M, long long N,
                                long long K, long long lda, long long ldb, long long ldc,
                                int dtc, int gelu, int wpc) {
  const T *a = (const T *)a_, *b = (const T *)b_;
  constexpr int V = ty_gv<T>::kVec, W = TY_GEMV_THREADS / 32;
  __shared__ float part_sh[TY_GEMV_MAX_M][W];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = W / wpc, col = warp / wpc, piece = warp % wpc;
  const long long n = (long long)blockIdx.x * cols + col;
  float acc[TY_GEMV_MAX_M];
#pragma unroll
  for (int m = 0; m < TY_GEMV_MAX_M; ++m) acc[m] = 0.0f;
  /* the piece's run of K: whole 32-lane vector rounds, the last piece the rest */
  const long long round = 32LL * V, rounds = (K + round - 1) / round;
  const long long per = (rounds + wpc - 1) / wpc;
  const long long k0 = piece * per * round, k1 = k0 + per * round < K ? k0 + per * round : K;
  if (n < N) {
    const T *w = b + n * ldb;
    const bool vec = (((uintptr_t)a | (uintptr_t)b) % 16 == 0) &&
                     (lda * (long long)sizeof(T)) % 16 == 0 &&
                     (ldb * (long long)sizeof(T)) % 16 == 0;
    /* Up to 8 of the lane's 16-byte loads in flight at once (K of 2048 bf16
     * is 8 a lane): the product is a few memory latencies, not K / 256. */
#pragma unroll 8
    for (long long k = k0 + (long long)lane * V; k < k1; k += round) {
      float wv[V];
      ty_gv<T>::load(w + k, wv, vec);
#pragma unroll
      for (int m = 0; m < TY_GEMV_MAX_M; ++m) {
        if (m < M) {
          float xv[V];
          ty_gv<T>::load(a + m * lda + k, xv, vec);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[m] += xv[e] * wv[e];
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < TY_GEMV_MAX_M; ++m) {
    const float v = ty_warp_sum(acc[m]);
    if (lane == 0) part_sh[m][warp] = v;
  }
  __syncthreads();
  if (piece != 0 || n >= N) return;
  for (int m = lane; m < M; m += 32) {
    float v = 0.0f;
    for (int p = 0; p < wpc; ++p) v += part_sh[m][warp + p];
    ty_gv_store(v, m, n, bias, cin, c, aux, ldc, dtc, gelu);
  }
}
#define TY_GEMV_PARAMS                                                                     \
  const void *a, const void *b, const void *bias, const void *cin, void *c, void *aux,     \
      int M, long long N, long long K, long long lda, long long ldb, long long ldc, int dtc, \
      int gelu
#define TY_GEMV_ARGS a, b, bias, cin, c, aux, M, N, K, lda, ldb, ldc, dtc, gelu
#define TY_GEMV_NK_PARAMS TY_GEMV_PARAMS, int wpc
#define TY_GEMV_NK_ARGS TY_GEMV_ARGS, wpc
TY_KERNEL3_ATTR(ty_gemv_nk, TY_GEMV_NK_PARAMS, TY_GEMV_NK_ARGS,
                __launch_bounds__(TY_GEMV_THREADS))

/* ---- b [K, N]: block (x, y) owns TY_GV_COLS columns and the y-th of
 * gridDim.y equal runs of K (split-K: a 768-column product has 12 column
 * blocks, too few to keep loads in flight, so K is cut until the grid
 * fills the card). Thread (g, s) owns the 16-byte group g of the columns
 * and rows s, s + S, ... of the block's run; the slices' sums are added in
 * slice order through shared memory. With one run the block stores the
 * outputs. With several, each block writes its partial sums to `part`
 * ([runs][M][N] f32), then counts itself in on its column block's counter;
 * the block that brings the count to gridDim.y adds the runs' partials in
 * run order (the same arithmetic whichever block is last: the result is
 * deterministic), stores the outputs and puts the counter back to 0 for
 * the next launch (`count`: the executable's zeroed memory). ---- */
#define TY_GV_COLS TY_GEMV_KN_COLS

__device__ inline float ty_gv_ld_cg(const float *p) {
#ifdef TY_CU_EMULATE
  return *p;
#else
  return __ldcg(p); /* another block's partial: past L1, which may hold stale lines */
#endif
}

template <typename T>
__device__ void ty_gemv_kn_impl(const void *a_, const void *b_, const void *bias,
                                const void *cin, void *c, void *aux, int M, long long N,
                                long long K, long long lda, long long ldb, long long ldc,
                                int dtc, int gelu, float *part, int *count) {
  const T *a = (const T *)a_, *b = (const T *)b_;
  constexpr int V = ty_gv<T>::kVec, G = TY_GV_COLS / V, S = TY_GEMV_THREADS / G;
  __shared__ float sum_sh[TY_GEMV_MAX_M][S][TY_GV_COLS + 1];
  __shared__ int last_sh;
  const int g = threadIdx.x % G, s = threadIdx.x / G;
  const int runs = (int)gridDim.y, run = (int)blockIdx.y;
  const long long n0 = (long long)blockIdx.x * TY_GV_COLS + g * V;
  const long long per = (K + runs - 1) / runs, k0 = run * per;
  const long long k1 = k0 + per < K ? k0 + per : K;
  float acc[TY_GEMV_MAX_M][V];
#pragma unroll
  for (int m = 0; m < TY_GEMV_MAX_M; ++m)
#pragma unroll
    for (int e = 0; e < V; ++e) acc[m][e] = 0.0f;
  const bool vec = (uintptr_t)b % 16 == 0 && (ldb * (long long)sizeof(T)) % 16 == 0;
  if (n0 < N) { /* N is a multiple of V: a group is all in or all out */
#pragma unroll 4
    for (long long k = k0 + s; k < k1; k += S) {
      float wv[V];
      ty_gv<T>::load(b + k * ldb + n0, wv, vec);
#pragma unroll
      for (int m = 0; m < TY_GEMV_MAX_M; ++m) {
        if (m < M) {
          const float x = ty_to_f<T>(a[m * lda + k]);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[m][e] += x * wv[e];
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < TY_GEMV_MAX_M; ++m)
#pragma unroll
    for (int e = 0; e < V; ++e) sum_sh[m][s][g * V + e] = acc[m][e];
  __syncthreads();
  /* the slices' sums: the outputs (one run) or this run's partials */
  for (int x = threadIdx.x; x < M * TY_GV_COLS; x += TY_GEMV_THREADS) {
    const int m = x / TY_GV_COLS, col = x % TY_GV_COLS;
    const long long n = (long long)blockIdx.x * TY_GV_COLS + col;
    if (n >= N) continue;
    float v = 0.0f;
    for (int t = 0; t < S; ++t) v += sum_sh[m][t][col];
    if (runs == 1) ty_gv_store(v, m, n, bias, cin, c, aux, ldc, dtc, gelu);
    else part[((long long)run * M + m) * N + n] = v;
  }
  if (runs == 1) return;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    int *cnt = count + blockIdx.x;
    last_sh = atomicAdd(cnt, 1) == runs - 1;
    if (last_sh) *cnt = 0;
  }
  __syncthreads();
  if (!last_sh) return;
  __threadfence();
  for (int x = threadIdx.x; x < M * TY_GV_COLS; x += TY_GEMV_THREADS) {
    const int m = x / TY_GV_COLS, col = x % TY_GV_COLS;
    const long long n = (long long)blockIdx.x * TY_GV_COLS + col;
    if (n >= N) continue;
    float v = 0.0f;
    for (int r = 0; r < runs; ++r) v += ty_gv_ld_cg(part + ((long long)r * M + m) * N + n);
    ty_gv_store(v, m, n, bias, cin, c, aux, ldc, dtc, gelu);
  }
}
#define TY_GEMV_KN_PARAMS TY_GEMV_PARAMS, float *part, int *count
#define TY_GEMV_KN_ARGS TY_GEMV_ARGS, part, count
TY_KERNEL3_ATTR(ty_gemv_kn, TY_GEMV_KN_PARAMS, TY_GEMV_KN_ARGS,
                __launch_bounds__(TY_GEMV_THREADS))

/* ---- a group: up to TY_GEMV_GROUP_MAX products of one a by [N_i, K]
 * weights (Llama's q, k and v projections; its gate and up) in one
 * launch. The columns of the members follow one another (member 0's N0,
 * then member 1's, ...); `wpc` warps a column, each column's dot in
 * gemv_nk's order (the bits gemv_nk gives it at the same wpc).
 * With `swiglu` the group is (gate, up) of equal N and a column computes
 * both dots and writes silu(gate) up into c0 alone, rounding gate and up
 * to the dtype first as the unfused nodes store them (the swiglu op's
 * arithmetic, kernels/elementwise.cu). Grid ceil(columns / (8 / wpc)). ---- */
template <typename T> __device__ inline float ty_gv_round(float v) {
  if (ty_dt_code<T>() == TY_BF16) return __bfloat162float(__float2bfloat16_rn(v));
  if (ty_dt_code<T>() == TY_F16) return __half2float(__float2half_rn(v));
  return v;
}

template <typename T>
__device__ void ty_gemv_group_impl(const void *a_, const void *b0, const void *b1,
                                   const void *b2, const void *bias0, const void *bias1,
                                   const void *bias2, void *c0, void *c1, void *c2, int M,
                                   long long N0, long long N1, long long N2, long long K,
                                   int swiglu, int wpc) {
  const T *a = (const T *)a_;
  constexpr int V = ty_gv<T>::kVec, W = TY_GEMV_THREADS / 32;
  __shared__ float part_sh[2][TY_GEMV_MAX_M][W];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cols = W / wpc, col = warp / wpc, piece = warp % wpc;
  const long long u = (long long)blockIdx.x * cols + col;
  const long long total = swiglu ? N0 : N0 + N1 + N2;
  /* the column's member and its place there */
  int member = 0;
  long long n = u;
  if (!swiglu && n >= N0) {
    n -= N0;
    member = 1;
    if (n >= N1) {
      n -= N1;
      member = 2;
    }
  }
  const void *bm = member == 0 ? b0 : member == 1 ? b1 : b2;
  const int dots = swiglu ? 2 : 1;
  float acc[2][TY_GEMV_MAX_M];
#pragma unroll
  for (int d = 0; d < 2; ++d)
#pragma unroll
    for (int m = 0; m < TY_GEMV_MAX_M; ++m) acc[d][m] = 0.0f;
  const long long round = 32LL * V, rounds = (K + round - 1) / round;
  const long long per = (rounds + wpc - 1) / wpc;
  const long long k0 = piece * per * round, k1 = k0 + per * round < K ? k0 + per * round : K;
  if (u < total) {
    const T *w0 = (const T *)bm + n * K, *w1 = swiglu ? (const T *)b1 + n * K : w0;
    /* dense operands of 16-byte rows (the fusion's conditions): vector loads
     * wherever the bases are aligned, element loads (the same sums) else */
    const bool vec = (((uintptr_t)a | (uintptr_t)bm | (uintptr_t)(swiglu ? b1 : bm)) % 16 == 0);
#pragma unroll 8
    for (long long k = k0 + (long long)lane * V; k < k1; k += round) {
      float wv[2][V];
      ty_gv<T>::load(w0 + k, wv[0], vec);
      if (dots == 2) ty_gv<T>::load(w1 + k, wv[1], vec);
#pragma unroll
      for (int m = 0; m < TY_GEMV_MAX_M; ++m) {
        if (m < M) {
          float xv[V];
          ty_gv<T>::load(a + m * K + k, xv, vec);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[0][m] += xv[e] * wv[0][e];
          if (dots == 2) {
#pragma unroll
            for (int e = 0; e < V; ++e) acc[1][m] += xv[e] * wv[1][e];
          }
        }
      }
    }
  }
#pragma unroll
  for (int d = 0; d < 2; ++d) {
#pragma unroll
    for (int m = 0; m < TY_GEMV_MAX_M; ++m) {
      const float v = ty_warp_sum(acc[d][m]);
      if (lane == 0) part_sh[d][m][warp] = v;
    }
  }
  __syncthreads();
  if (piece != 0 || u >= total) return;
  const int dt = ty_dt_code<T>();
  for (int m = lane; m < M; m += 32) {
    float v[2] = {0.0f, 0.0f};
    for (int d = 0; d < dots; ++d) {
      for (int p = 0; p < wpc; ++p) v[d] += part_sh[d][m][warp + p];
    }
    if (swiglu) {
      const float g = ty_gv_round<T>(bias0 ? v[0] + ty_ld(bias0, n, dt) : v[0]);
      const float up = ty_gv_round<T>(bias1 ? v[1] + ty_ld(bias1, n, dt) : v[1]);
      ty_st(c0, m * N0 + n, dt, g * (1.0f / (1.0f + expf(-g))) * up);
      continue;
    }
    const void *bias = member == 0 ? bias0 : member == 1 ? bias1 : bias2;
    void *c = member == 0 ? c0 : member == 1 ? c1 : c2;
    const long long N = member == 0 ? N0 : member == 1 ? N1 : N2;
    ty_gv_store(v[0], m, n, bias, NULL, c, NULL, N, dt, 0);
  }
}
#define TY_GEMV_GROUP_PARAMS                                                                  \
  const void *a, const void *b0, const void *b1, const void *b2, const void *bias0,           \
      const void *bias1, const void *bias2, void *c0, void *c1, void *c2, int M, long long N0, \
      long long N1, long long N2, long long K, int swiglu, int wpc
#define TY_GEMV_GROUP_ARGS \
  a, b0, b1, b2, bias0, bias1, bias2, c0, c1, c2, M, N0, N1, N2, K, swiglu, wpc
TY_KERNEL3_ATTR(ty_gemv_group, TY_GEMV_GROUP_PARAMS, TY_GEMV_GROUP_ARGS,
                __launch_bounds__(TY_GEMV_THREADS))
