/* Reductions: reduce_sum / reduce_mean / reduce_sumsq over any set of axes,
 * and global-norm clipping. Every sum is deterministic: fixed shares per
 * thread, warp shuffles and block trees in a fixed order, and two-level
 * schemes whose partial sums land in scratch and are added in order — no
 * float atomics. Terms are f32; accumulation is f64, as the cpu backend's:
 * these kernels are bound by memory traffic, one add per element read, so
 * f64 costs nothing here and keeps sums of many terms of both signs (a
 * [B*T, C] bias gradient) within one f32 rounding of the reference. */
#include "vec.cuh"

#define TY_RED_SUM 0
#define TY_RED_SUMSQ 1

__device__ inline double ty_red_term(int kind, float v) {
  const double d = v;
  return kind == TY_RED_SUMSQ ? d * d : d;
}

/* ---- the general case ----
 *
 *   y[k] = scale * sum_r f(x[kept(k) + reduced(r)]),  f = x or x^2
 *
 * One block per output (grid-stride over outputs): each thread sums a
 * strided share of the terms, then the block adds the shares. The host
 * merges contiguous axes; this kernel serves the shapes the row and column
 * kernels below do not (reduced axes on both sides of a kept one, integer
 * operands). Checked at the "reduction" conform bound. */
extern "C" __global__ void ty_reduce(const void *x, int dtx, void *y, int dty, int kind,
                                     long long outs, long long terms, double scale, int krank,
                                     ty_dims8 kdims, ty_dims8 kstr, int rrank, ty_dims8 rdims,
                                     ty_dims8 rstr) {
  ty_pdl_enter();
  __shared__ double scratch[32];
  for (long long k = blockIdx.x; k < outs; k += gridDim.x) {
    long long base, unused;
    ty_offsets2_fast(k, krank, kdims, kstr, kstr, &base, &unused);
    double acc = 0.0;
    for (long long r = threadIdx.x; r < terms; r += blockDim.x) {
      long long off;
      ty_offsets2_fast(r, rrank, rdims, rstr, rstr, &off, &unused);
      acc += ty_red_term(kind, ty_ld(x, base + off, dtx));
    }
    const double total = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) ty_st_d(y, k, dty, total * scale);
  }
}

/* ---- rows: x viewed as [O, R], reduced over R ----
 *
 *   y[o * chunks + c] = scale * sum_{r in chunk c of row o} f(x[o, r])
 *
 * One block per (row, chunk); with chunks = 1 that is y itself, else the
 * chunk sums go to scratch as f64 (dty = f64) and ty_reduce_partials adds
 * each row's in order. A long row is so spread over the card instead of
 * one block. Also the first level of the clipping norm. Checked at the
 * "reduction" conform bound. */
template <typename T>
__device__ __forceinline__ void ty_reduce_rows_impl(const void *x_, void *y, int dty, int kind,
                                                    long long R, long long chunks,
                                                    long long chunk, long long total,
                                                    double scale) {
  __shared__ double scratch[32];
  const T *x = (const T *)x_;
  for (long long blk = blockIdx.x; blk < total; blk += gridDim.x) {
    const long long o = ty_div(blk, chunks), c = blk - o * chunks;
    const long long start = c * chunk;
    const long long len = R - start < chunk ? R - start : chunk;
    const T *row = x + o * R + start;
    double acc = 0.0;
    ty_row_loop(
        len, start % 4 ? -1 : ty_row_head4<T>(R, row), threadIdx.x, blockDim.x,
        [&](long long i) { acc += ty_red_term(kind, ty_get(row, i)); },
        [&](long long i) {
          float v[4];
          ty_ld4(row + i, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) acc += ty_red_term(kind, v[j]);
        });
    const double sum = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) ty_st_d(y, blk, dty, sum * scale);
  }
}
#define TY_REDUCE_ROWS_PARAMS                                                        \
  const void *x, void *y, int dty, int kind, long long R, long long chunks, long long chunk, \
      long long total, double scale
#define TY_REDUCE_ROWS_ARGS x, y, dty, kind, R, chunks, chunk, total, scale
TY_KERNEL3(ty_reduce_rows, TY_REDUCE_ROWS_PARAMS, TY_REDUCE_ROWS_ARGS)

/* y[r] = scale * sum_c part[r * per_row + c], in order: one block per row. */
extern "C" __global__ void ty_reduce_partials(const double *part, void *y, int dty,
                                              long long per_row, long long rows, double scale) {
  ty_pdl_enter();
  __shared__ double scratch[32];
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    double acc = 0.0;
    for (long long c = threadIdx.x; c < per_row; c += blockDim.x) acc += part[r * per_row + c];
    const double sum = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) ty_st_d(y, r, dty, sum * scale);
  }
}

/* ---- columns: x viewed as [O, R, I], reduced over R ----
 *
 *   y[o, i] = scale * sum_r f(x[o, r, i])
 *
 * The bias-gradient shape (reduce_sum of a [B*T, C] gradient over all but
 * the last axis: O = 1, R = B*T, I = C) and reductions over a middle axis.
 * Blocks of 32 x 8 threads: 32 neighbouring columns (coalesced reads), 8
 * lanes over interleaved rows of a chunk of R, added in a fixed tree. The
 * chunks (gridDim.y of them, chosen from the shape alone) spread a long R
 * over the card; with more than one, each writes f64 partial sums to
 * `part` [chunks, O * I] and ty_reduce_cols_finish adds them in chunk
 * order. Checked at the "reduction" conform bound. */
template <typename T>
__device__ __forceinline__ void ty_reduce_cols_impl(const void *x_, void *y, int dty,
                                                    double *part, int kind, long long O,
                                                    long long R, long long I,
                                                    long long rchunk, double scale) {
  __shared__ double sh[8][32];
  const T *x = (const T *)x_;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long cb = (I + 31) / 32;
  const long long r0 = (long long)blockIdx.y * rchunk;
  const long long r1 = R - r0 < rchunk ? R : r0 + rchunk;
  for (long long bx = blockIdx.x; bx < cb * O; bx += gridDim.x) {
    const long long o = ty_div(bx, cb);
    const long long i = (bx - o * cb) * 32 + tx;
    double acc = 0.0;
    if (i < I) {
      const T *col = x + o * R * I + i;
      for (long long r = r0 + ty; r < r1; r += 8) acc += ty_red_term(kind, ty_get(col, r * I));
    }
    sh[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int s = 4; s > 0; s >>= 1) {
      if (ty < s) sh[ty][tx] += sh[ty + s][tx];
      __syncthreads();
    }
    if (ty == 0 && i < I) {
      const double sum = sh[0][tx];
      if (gridDim.y == 1) ty_st_d(y, o * I + i, dty, sum * scale);
      else part[((long long)blockIdx.y * O + o) * I + i] = sum;
    }
    __syncthreads(); /* sh is reused by the next column block */
  }
}
#define TY_REDUCE_COLS_PARAMS                                                           \
  const void *x, void *y, int dty, double *part, int kind, long long O, long long R, \
      long long I, long long rchunk, double scale
#define TY_REDUCE_COLS_ARGS x, y, dty, part, kind, O, R, I, rchunk, scale
TY_KERNEL3(ty_reduce_cols, TY_REDUCE_COLS_PARAMS, TY_REDUCE_COLS_ARGS)

/* The same over I % 4 == 0 columns, 4 per thread: a block covers 128
 * columns x 8 row lanes, each lane reading 4 adjacent elements at once (a
 * warp reads 4 x 32 contiguous elements of a row, not 32), with the
 * per-column sums kept in f64 and the same fixed tree and partials. */
template <typename T>
__device__ __forceinline__ void ty_reduce_cols4_impl(const void *x_, void *y, int dty,
                                                     double *part, int kind, long long O,
                                                     long long R, long long I,
                                                     long long rchunk, double scale) {
  __shared__ double sh[8][128];
  const T *x = (const T *)x_;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long cb = (I + 127) / 128;
  const long long r0 = (long long)blockIdx.y * rchunk;
  const long long r1 = R - r0 < rchunk ? R : r0 + rchunk;
  const bool aligned = ty_al4<T>(x);
  for (long long bx = blockIdx.x; bx < cb * O; bx += gridDim.x) {
    const long long o = ty_div(bx, cb);
    const long long i = (bx - o * cb) * 128 + 4 * tx;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    if (i < I) {
      const T *col = x + o * R * I + i;
      if (aligned) { /* unrolled: several rows' loads in flight per thread */
#pragma unroll 8
        for (long long r = r0 + ty; r < r1; r += 8) {
          float v[4];
          ty_ld4(col + r * I, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[j] += ty_red_term(kind, v[j]);
        }
      } else {
        for (long long r = r0 + ty; r < r1; r += 8) {
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[j] += ty_red_term(kind, ty_get(col, r * I + j));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) sh[ty][4 * tx + j] = acc[j];
    __syncthreads();
#pragma unroll
    for (int s = 4; s > 0; s >>= 1) {
      if (ty < s) {
#pragma unroll
        for (int j = 0; j < 4; ++j) sh[ty][4 * tx + j] += sh[ty + s][4 * tx + j];
      }
      __syncthreads();
    }
    if (ty == 0 && i < I) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const double sum = sh[0][4 * tx + j];
        if (gridDim.y == 1) ty_st_d(y, o * I + i + j, dty, sum * scale);
        else part[((long long)blockIdx.y * O + o) * I + i + j] = sum;
      }
    }
    __syncthreads(); /* sh is reused by the next column block */
  }
}
TY_KERNEL3(ty_reduce_cols4, TY_REDUCE_COLS_PARAMS, TY_REDUCE_COLS_ARGS)

/* y[i] = scale * sum_s part[s * n + i]: blocks of 32 columns x 32 chunk
 * lanes (lane y adds chunks y, y + 32, ..., reading 32 adjacent columns of
 * a chunk together), the lanes' sums then added by a fixed tree in shared
 * memory, so the order (and the result) depends on the shape only. One
 * thread per column adding every chunk in turn left a column's 100+ loads
 * back to back, each waiting for the last: the finish cost more than the
 * sums. */
extern "C" __global__ void ty_reduce_cols_finish(const double *part, void *y, int dty,
                                                 long long chunks, long long n, double scale) {
  ty_pdl_enter();
  __shared__ double sh[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (long long bx = blockIdx.x; bx * 32 < n; bx += gridDim.x) {
    const long long i = bx * 32 + tx;
    double acc = 0.0;
    if (i < n) {
#pragma unroll 4
      for (long long s = ty; s < chunks; s += 32) acc += part[s * n + i];
    }
    sh[ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int h = 16; h > 0; h >>= 1) {
      if (ty < h) sh[ty][tx] += sh[ty + h][tx];
      __syncthreads();
    }
    if (ty == 0 && i < n) ty_st_d(y, i, dty, sh[0][tx] * scale);
    __syncthreads(); /* sh is reused by the next column block */
  }
}

/* ---- clip_by_global_norm ----
 *
 *   norm = sqrt(sum_i sum g_i^2);  coef = min(1, max_norm / (norm + 1e-6))
 *   when max_norm > 0 (else 1);  g_i' = g_i coef
 *
 * The sums of squares come from ty_reduce_rows_* (kind sumsq, f64) over
 * fixed chunks of every g_i into one array of partials; ty_clip_finish (one
 * block) adds them in order and forms coef in f64; ty_scale_by_* applies
 * it, each product in f64 and rounded once (as the cpu backend). Checked
 * at the "reduction" conform bound. */
extern "C" __global__ void ty_clip_finish(const double *part, long long count,
                                          const void *max_norm, int dtm, void *norm, int dtn,
                                          double *coef) {
  ty_pdl_enter();
  __shared__ double scratch[32];
  double acc = 0.0;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) acc += part[i];
  const double total = ty_block_sum_d(acc, scratch);
  if (threadIdx.x == 0) {
    const double nrm = sqrt(total);
    const double limit = ty_ld(max_norm, 0, dtm);
    double c = 1.0;
    if (limit > 0.0) {
      c = limit / (nrm + 1e-6);
      if (c > 1.0) c = 1.0; /* like torch.clamp(max=1): NaN stays NaN */
    }
    ty_st_d(norm, 0, dtn, nrm);
    coef[0] = c;
  }
}

/* y = x coef[0]; y may be x (in place). */
template <typename T>
__device__ __forceinline__ void ty_scale_by_impl(const void *x_, void *y_, long long n,
                                                 const double *coef) {
  const T *x = (const T *)x_;
  T *y = (T *)y_;
  const double c = coef[0];
  long long done = 0;
  if (ty_al4<T>(x) && ty_al4<T>(y)) {
    const long long groups = n / 4;
    TY_FOR_EACH(k, groups) {
      float v[4];
      ty_ld4(x + 4 * k, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] = (float)(v[j] * c);
      ty_st4(y + 4 * k, v);
    }
    done = 4 * groups;
  }
  TY_FOR_EACH(k, n - done) ty_put(y, done + k, (float)(ty_get(x, done + k) * c));
}
#define TY_SCALE_BY_PARAMS const void *x, void *y, long long n, const double *coef
#define TY_SCALE_BY_ARGS x, y, n, coef
TY_KERNEL3(ty_scale_by, TY_SCALE_BY_PARAMS, TY_SCALE_BY_ARGS)

/* ---- multi-tensor clipping ----
 *
 * clip_by_global_norm over many gradients in three launches instead of two
 * per gradient: ty_sumsq_multi_* leaves the f64 sum of squares of each
 * chunk of each tensor in part[] (chunks as in ty_adamw_multi: starts[k] is
 * tensor k's first chunk), ty_clip_finish adds them in order, and
 * ty_scale_multi_* multiplies every tensor by coef in f64, rounded once
 * (as ty_scale_by). Deterministic: fixed chunks, fixed order. */
__device__ inline int ty_red_chunk_tensor(const long long *starts, int count, long long j) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= j) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <typename T>
__device__ __forceinline__ void ty_sumsq_multi_impl(const void *const *xt,
                                                    const long long *starts,
                                                    const long long *sizes, int count,
                                                    long long chunk, double *part) {
  __shared__ double scratch[32];
  for (long long j = blockIdx.x; j < starts[count]; j += gridDim.x) {
    const int k = ty_red_chunk_tensor(starts, count, j);
    const long long begin = (j - starts[k]) * chunk;
    const long long n = sizes[k] - begin < chunk ? sizes[k] - begin : chunk;
    const T *x = (const T *)xt[k] + begin;
    double acc = 0.0;
    ty_row_loop(
        n, ty_head4<T>(x), threadIdx.x, blockDim.x,
        [&](long long i) {
          const double v = ty_get(x, i);
          acc += v * v;
        },
        [&](long long i) {
          float v[4];
          ty_ld4(x + i, v);
#pragma unroll
          for (int q = 0; q < 4; ++q) acc += (double)v[q] * (double)v[q];
        });
    const double sum = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) part[j] = sum;
  }
}
#define TY_SUMSQ_MULTI_PARAMS \
  const void *const *x, const long long *starts, const long long *sizes, int count, \
      long long chunk, double *part
#define TY_SUMSQ_MULTI_ARGS x, starts, sizes, count, chunk, part
TY_KERNEL3(ty_sumsq_multi, TY_SUMSQ_MULTI_PARAMS, TY_SUMSQ_MULTI_ARGS)

template <typename T>
__device__ __forceinline__ void ty_scale_multi_impl(const void *const *xt, void *const *yt,
                                                    const long long *starts,
                                                    const long long *sizes, int count,
                                                    long long chunk, const double *coef) {
  const double c = coef[0];
  for (long long j = blockIdx.x; j < starts[count]; j += gridDim.x) {
    const int k = ty_red_chunk_tensor(starts, count, j);
    const long long begin = (j - starts[k]) * chunk;
    const long long n = sizes[k] - begin < chunk ? sizes[k] - begin : chunk;
    const T *x = (const T *)xt[k] + begin;
    T *y = (T *)yt[k] + begin;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) {
      ty_put(y, i, (float)((double)ty_get(x, i) * c));
    }
  }
}
#define TY_SCALE_MULTI_PARAMS \
  const void *const *x, void *const *y, const long long *starts, const long long *sizes, \
      int count, long long chunk, const double *coef
#define TY_SCALE_MULTI_ARGS x, y, starts, sizes, count, chunk, coef
TY_KERNEL3(ty_scale_multi, TY_SCALE_MULTI_PARAMS, TY_SCALE_MULTI_ARGS)

/* ---- global_norm_scale (clipping when the gradients never exist together:
 * train --fused-optimizer) ----
 *
 *   norm = sqrt(sum_i s_i),  scale = min(1, max_norm / (norm + 1e-6))  (1 when max_norm <= 0)
 *
 * from the per-gradient sums of squares s_i (f32 scalars, through an
 * address table), added in f64 in input order by one thread, as the cpu
 * backend does. */
extern "C" __global__ void ty_global_norm_scale(const void *max_norm, int dtm,
                                                const void *const *sums, int dts,
                                                int count, void *norm, int dtn, void *scale,
                                                int dtsc) {
  ty_pdl_enter();
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double sum = 0.0;
  for (int i = 0; i < count; ++i) sum += (double)ty_ld(sums[i], 0, dts);
  const double nrm = sqrt(sum), limit = ty_ld(max_norm, 0, dtm);
  double c = 1.0;
  if (limit > 0.0) {
    c = limit / (nrm + 1e-6);
    if (c > 1.0) c = 1.0; /* like torch.clamp(max=1): NaN stays NaN */
  }
  ty_st_d(norm, 0, dtn, nrm);
  ty_st_d(scale, 0, dtsc, c);
}
