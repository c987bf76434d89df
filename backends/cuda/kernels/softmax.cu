/* softmax over the last axis and per-token cross-entropy, forward and
 * backward. One block per row (up to 1024 threads for a 50257-wide vocab
 * row); the max and the sum of exponentials come from one pass (an online
 * softmax per thread, then combined across the block), so a row is read
 * twice in all, not three times; the loss gradient after a forward reads it
 * once (ty_xent_bwd_lse). */
#include "vec.cuh"

/* exp of an argument <= 0 (x - max, z - lse) on the fast hardware path
 * (ex2.approx: a few ulp, 2 + 1.16 |x| at most, so <= ~2e-6 relative where
 * the terms still matter): a 50257-wide row costs an exp per element per
 * pass, which with the accurate expf takes about as long as reading the
 * row. Checked at the "reduction" conform bound (NMSE 1e-9 in f32). */
__device__ inline float ty_exp(float x) { return __expf(x); }

/* A thread's running (max, sum of exp(x - max)) takes value v. */
__device__ inline void ty_online_add(float v, float &m, float &s) {
  if (v > m) {
    s = s * ty_exp(m - v) + 1.0f; /* m = -inf: s is 0, and 0 * 0 stays 0 */
    m = v;
  } else if (v != -INFINITY) { /* a masked -inf adds 0, also while m is still -inf */
    s += ty_exp(v - m);
  }
}

/* The block's max M and sum of exp(x - M) from the threads' (m, s). */
__device__ inline void ty_online_combine(float m, float s, float *scratch, float *out_m,
                                         float *out_s) {
  const float mx = ty_block_max(m, scratch);
  const float part = m == -INFINITY ? 0.0f : s * ty_exp(m - mx);
  *out_s = ty_block_sum(part, scratch);
  *out_m = mx;
}

/* Online (max, sum) over a row of n elements of T, by the whole block. */
template <typename T>
__device__ inline void ty_row_online(const T *row, long long n, int head, float *scratch,
                                     float *out_m, float *out_s) {
  float m = -INFINITY, s = 0.0f;
  ty_row_loop(
      n, head, threadIdx.x, blockDim.x, [&](long long i) { ty_online_add(ty_get(row, i), m, s); },
      [&](long long i) {
        float v[4];
        ty_ld4(row + i, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) ty_online_add(v[j], m, s);
      });
  ty_online_combine(m, s, scratch, out_m, out_s);
}

/* ---- softmax ----
 *
 *   y = exp(x - max) / sum exp(x - max);  dx = y (dy - sum(dy y))
 *
 * Checked at the "reduction" conform bound. */
template <typename T>
__device__ __forceinline__ void ty_softmax_impl(const void *x_, void *y_, long long rows,
                                                long long C) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *x = (const T *)x_ + row * C;
    T *y = (T *)y_ + row * C;
    const int head = ty_row_head4<T>(C, x, y);
    float m, s;
    ty_row_online(x, C, head, scratch, &m, &s);
    const float inv = 1.0f / s;
    ty_row_loop(
        C, head, threadIdx.x, blockDim.x,
        [&](long long i) { ty_put(y, i, ty_exp(ty_get(x, i) - m) * inv); },
        [&](long long i) {
          float v[4];
          ty_ld4(x + i, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = ty_exp(v[j] - m) * inv;
          ty_st4(y + i, v);
        });
  }
}
#define TY_SOFTMAX_PARAMS const void *x, void *y, long long rows, long long C
#define TY_SOFTMAX_ARGS x, y, rows, C
TY_KERNEL3(ty_softmax, TY_SOFTMAX_PARAMS, TY_SOFTMAX_ARGS)

template <typename T>
__device__ __forceinline__ void ty_softmax_bwd_impl(const void *dy_, const void *y_, void *dx_,
                                                    long long rows, long long C) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *dy = (const T *)dy_ + row * C, *y = (const T *)y_ + row * C;
    T *dx = (T *)dx_ + row * C;
    const int head = ty_row_head4<T>(C, dy, y, dx);
    float acc = 0.0f;
    ty_row_loop(
        C, head, threadIdx.x, blockDim.x, [&](long long i) { acc += ty_get(dy, i) * ty_get(y, i); },
        [&](long long i) {
          float a[4], b[4];
          ty_ld4(dy + i, a);
          ty_ld4(y + i, b);
#pragma unroll
          for (int j = 0; j < 4; ++j) acc += a[j] * b[j];
        });
    const float dot = ty_block_sum(acc, scratch);
    ty_row_loop(
        C, head, threadIdx.x, blockDim.x,
        [&](long long i) { ty_put(dx, i, ty_get(y, i) * (ty_get(dy, i) - dot)); },
        [&](long long i) {
          float a[4], b[4];
          ty_ld4(dy + i, a);
          ty_ld4(y + i, b);
#pragma unroll
          for (int j = 0; j < 4; ++j) a[j] = b[j] * (a[j] - dot);
          ty_st4(dx + i, a);
        });
  }
}
#define TY_SOFTMAX_BWD_PARAMS const void *dy, const void *y, void *dx, long long rows, long long C
#define TY_SOFTMAX_BWD_ARGS dy, y, dx, rows, C
TY_KERNEL3(ty_softmax_bwd, TY_SOFTMAX_BWD_PARAMS, TY_SOFTMAX_BWD_ARGS)

/* ---- cross-entropy ----
 *
 *   loss = logsumexp(z) - z[t]           (t < 0: ignored, loss 0)
 *   dz   = dloss (softmax(z) - onehot(t))  (t < 0: 0)
 *
 * A target >= V is a data error (TY_ERR_TARGET with the row, the target and
 * V), as in the reference; its row gets loss 0 / dz 0. Rows of z and dz lie
 * ld and ldz elements apart (>= V: the executor may pad them). loss and dloss are
 * f32 (any float dtype is accepted). Checked at the "reduction" conform
 * bound. */
template <typename T>
__device__ __forceinline__ void ty_xent_impl(const void *logits, const void *targets, int dtt,
                                             void *loss, int dtl, long long rows, long long V,
                                             long long ld, ERR_ARGS) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *z = (const T *)logits + row * ld;
    const long long t = ty_ldi(targets, row, dtt);
    if (t < 0 || t >= V) { /* uniform over the block */
      if (threadIdx.x == 0) {
        if (t >= V) ty_fail(err, node, TY_ERR_TARGET, row, t, V);
        ty_st(loss, row, dtl, 0.0f);
      }
      continue;
    }
    float m, s;
    ty_row_online(z, V, ty_row_head4<T>(ld, z), scratch, &m, &s);
    if (threadIdx.x == 0) ty_st(loss, row, dtl, m + logf(s) - ty_get(z, t));
  }
}
#define TY_XENT_PARAMS                                                                   \
  const void *logits, const void *targets, int dtt, void *loss, int dtl, long long rows, \
      long long V, long long ld, ERR_ARGS
#define TY_XENT_ARGS logits, targets, dtt, loss, dtl, rows, V, ld, err, node
TY_KERNEL3(ty_xent, TY_XENT_PARAMS, TY_XENT_ARGS)

/* A row's dz = d (exp(z - lse) - onehot(t)) over V elements, z of TZ and dz
 * of TD (dz may be z when TZ is TD: each element is read, then written,
 * by one thread). */
template <typename TZ, typename TD>
__device__ inline void ty_xent_grad_row(const TZ *z, TD *dz, long long V, int head, long long t,
                                        float d, float lse) {
  ty_row_loop(
      V, head, threadIdx.x, blockDim.x,
      [&](long long i) {
        ty_put(dz, i, d * (ty_exp(ty_get(z, i) - lse) - (i == t ? 1.0f : 0.0f)));
      },
      [&](long long i) {
        float v[4];
        ty_ld4(z + i, v);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = d * (ty_exp(v[j] - lse) - (i + j == t ? 1.0f : 0.0f));
        ty_st4(dz + i, v);
      });
}

/* The start of a row's gradient: zeros in the row's padding (ldz > V: an
 * executor-padded gradient; only [V, ldz) is written, so z = dz stays
 * intact), and for an ignored (t < 0) or out-of-range (t >= V, the data
 * error) target zeros in the whole row and false: nothing more to do. t is
 * uniform over the block, and so is the answer. */
template <typename T>
__device__ inline bool ty_xent_bwd_row_live(T *dz, long long V, long long ldz, int head,
                                            long long t, long long row, ERR_ARGS) {
  for (long long i = V + threadIdx.x; i < ldz; i += blockDim.x) ty_put(dz, i, 0.0f);
  if (t >= 0 && t < V) return true;
  if (t >= V && threadIdx.x == 0) ty_fail(err, node, TY_ERR_TARGET, row, t, V);
  ty_row_loop(
      V, head, threadIdx.x, blockDim.x, [&](long long i) { ty_put(dz, i, 0.0f); },
      [&](long long i) {
        const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        ty_st4(dz + i, zero);
      });
  return false;
}

/* A row's logsumexp: without `loss`, summed again (an online pass over the
 * row); with the forward's f32 per-row loss (ty_xent_bwd_lse), taken from
 * it: loss = lse - z_t, so lse = loss + z_t, and the row is read once, by
 * the gradient. The forward rounded lse - z_t to f32 and this adds z_t
 * back, so lse differs from the forward's by about one f32 ulp of the loss
 * (~1e-7 relative to lse; exp(z - lse) then ~1e-6 relative at worst), far
 * below bf16's 2^-8 and inside the f32 conform and cpu-vs-cuda (1e-4)
 * bounds.
 *
 * dz may be z (the executor's in-place loss gradient, ld = ldz): every
 * thread has read what it needs of the row before any thread writes it
 * (the online pass ends in block reductions that wait for every thread;
 * z_t is read before a barrier), and the gradient pass reads each element
 * and writes it back from the same thread (ty_row_loop gives each index
 * one thread). `loss` is uniform over the grid, so is the barrier. */
template <typename T>
__device__ __forceinline__ void ty_xent_bwd_impl(const void *dloss, int dtdl, const void *logits,
                                                 const void *targets, int dtt, const float *loss,
                                                 void *dz_, long long rows, long long V,
                                                 long long ld, long long ldz, ERR_ARGS) {
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *z = (const T *)logits + row * ld;
    T *dz = (T *)dz_ + row * ldz;
    const int head = ld == ldz ? ty_row_head4<T>(ld, z, dz) : -1;
    const long long t = ty_ldi(targets, row, dtt);
    if (!ty_xent_bwd_row_live(dz, V, ldz, head, t, row, err, node)) continue;
    float lse;
    if (loss) {
      lse = loss[row] + ty_get(z, t);
      __syncthreads();
    } else {
      float m, s;
      ty_row_online(z, V, head, scratch, &m, &s);
      lse = m + logf(s);
    }
    ty_xent_grad_row(z, dz, V, head, t, ty_ld(dloss, row, dtdl), lse);
  }
}
#define TY_XENT_BWD_PARAMS                                                                  \
  const void *dloss, int dtdl, const void *logits, const void *targets, int dtt, void *dz, \
      long long rows, long long V, long long ld, long long ldz, ERR_ARGS
#define TY_XENT_BWD_ARGS \
  dloss, dtdl, logits, targets, dtt, (const float *)nullptr, dz, rows, V, ld, ldz, err, node
TY_KERNEL3(ty_xent_bwd, TY_XENT_BWD_PARAMS, TY_XENT_BWD_ARGS)
/* ty_xent_bwd with the forward's per-row loss (see ty_xent_bwd_impl). */
#define TY_XENT_BWD_LSE_PARAMS                                                              \
  const void *dloss, int dtdl, const void *logits, const void *targets, int dtt,           \
      const float *loss, void *dz, long long rows, long long V, long long ld, long long ldz, \
      ERR_ARGS
#define TY_XENT_BWD_LSE_ARGS \
  dloss, dtdl, logits, targets, dtt, loss, dz, rows, V, ld, ldz, err, node
template <typename T>
__device__ __forceinline__ void ty_xent_bwd_lse_impl(TY_XENT_BWD_LSE_PARAMS) {
  ty_xent_bwd_impl<T>(TY_XENT_BWD_LSE_ARGS);
}
TY_KERNEL3(ty_xent_bwd_lse, TY_XENT_BWD_LSE_PARAMS, TY_XENT_BWD_LSE_ARGS)

/* ---- linear_cross_entropy (the LM head and the loss in one op) ----
 *
 * The host (cuda_ops_memory.c) walks the rows `chunk` at a time: per chunk
 * of n rows from row `first`, one cuBLASLt GEMM forms the f32 logits
 * z = h W^T (n x V, rows ldz apart) in scratch; these kernels take each row:
 *
 *   forward:  lse = log sum_v exp(z_v) = m + log sum_v exp(z_v - m),
 *             loss = lse - z_t                      (t < 0: both 0)
 *   backward: dz_v = dloss (exp(z_v - lse) - [v = t])   (t < 0: 0)
 *
 * with the lse the forward saved (the backward never sums a row again).
 * The backward stores dz in h's dtype T for the GEMMs dh = dz W and
 * dW += dz^T h; for f32 it overwrites z in place (each element is read
 * before the same thread writes it). A target >= V is a data error
 * (TY_ERR_TARGET), as cross_entropy's. loss, lse and dloss are f32. */
extern "C" __global__ void ty_lce_rows(const float *z_, long long ldz, const void *targets,
                                       int dtt, float *loss, float *lse, long long first,
                                       long long n, long long V, ERR_ARGS) {
  ty_pdl_enter();
  __shared__ float scratch[32];
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const float *z = z_ + row * ldz;
    const long long t = ty_ldi(targets, first + row, dtt);
    if (t < 0 || t >= V) { /* uniform over the block */
      if (threadIdx.x == 0) {
        if (t >= V) ty_fail(err, node, TY_ERR_TARGET, first + row, t, V);
        loss[first + row] = 0.0f;
        lse[first + row] = 0.0f;
      }
      continue;
    }
    float m, s;
    ty_row_online(z, V, ty_row_head4<float>(ldz, z), scratch, &m, &s);
    if (threadIdx.x == 0) {
      const float l = m + logf(s);
      lse[first + row] = l;
      loss[first + row] = l - z[t];
    }
  }
}

template <typename T>
__device__ __forceinline__ void ty_lce_bwd_rows_impl(const float *dloss, const float *z_,
                                                     long long ldz, const void *targets,
                                                     int dtt, const float *lse, void *dz_,
                                                     long long first, long long n,
                                                     long long V, ERR_ARGS) {
  for (long long row = blockIdx.x; row < n; row += gridDim.x) {
    const float *z = z_ + row * ldz;
    T *dz = (T *)dz_ + row * ldz;
    const int hz = ty_row_head4<float>(ldz, z), hd = ty_row_head4<T>(ldz, dz);
    const int head = hz == hd ? hz : -1;
    const long long t = ty_ldi(targets, first + row, dtt);
    if (t < 0 || t >= V) { /* uniform over the block */
      if (t >= V && threadIdx.x == 0) ty_fail(err, node, TY_ERR_TARGET, first + row, t, V);
      for (long long i = threadIdx.x; i < V; i += blockDim.x) ty_put(dz, i, 0.0f);
      continue;
    }
    ty_xent_grad_row(z, dz, V, head, t, dloss[first + row], lse[first + row]);
  }
}
#define TY_LCE_BWD_PARAMS                                                                 \
  const float *dloss, const float *z, long long ldz, const void *targets, int dtt,        \
      const float *lse, void *dz, long long first, long long n, long long V, ERR_ARGS
#define TY_LCE_BWD_ARGS dloss, z, ldz, targets, dtt, lse, dz, first, n, V, err, node
TY_KERNEL3(ty_lce_bwd_rows, TY_LCE_BWD_PARAMS, TY_LCE_BWD_ARGS)
