/* Optimizer updates (PyTorch semantics; ops/reference/ref_optim.c): AdamW
 * with 4 elements per thread on the typed path, SGD through the generic
 * loads. Outputs may share storage with the state they replace (the memory
 * plan's in-place updates): each thread reads its elements before writing
 * them, so no pointer here is __restrict__. */
#include "vec.cuh"

/* ---- AdamW ----
 *
 *   p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
 *   p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *      = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
 *
 * The hyperparameters are device scalars (inputs, so changing them per step
 * never recompiles); ty_adamw_prep forms hp = {b1, 1 - b1, b2, 1 - b2,
 * 1 - lr wd, lr / bc1, 1 / sqrt(bc2), eps} in f64 once per step. A step
 * below 1 is a data error (TY_ERR_ADAMW_STEP with the step). The
 * per-element arithmetic is f64 over f32 moments, as the cpu backend's
 * (backends/cpu/cpu_kernels_optim.c): an update stays within one f32
 * rounding of the f64 reference, so a bf16 parameter rounds as the
 * reference's does, and cuda agrees with cpu step after step. The kernel is
 * bound by memory traffic either way ("elementwise" conform bound). */
extern "C" __global__ void ty_adamw_prep(const void *lr, int dtlr, const void *b1, int dtb1,
                                         const void *b2, int dtb2, const void *eps, int dteps,
                                         const void *wd, int dtwd, const void *step,
                                         int dtstep, double *hp, ERR_ARGS) {
  ty_pdl_enter();
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const long long t = ty_ldi(step, 0, dtstep);
  if (t < 1) ty_fail(err, node, TY_ERR_ADAMW_STEP, t, 0, 0);
  const double l = ty_ld(lr, 0, dtlr), beta1 = ty_ld(b1, 0, dtb1);
  const double beta2 = ty_ld(b2, 0, dtb2), w = ty_ld(wd, 0, dtwd);
  const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
  hp[0] = beta1;
  hp[1] = 1.0 - beta1;
  hp[2] = beta2;
  hp[3] = 1.0 - beta2;
  hp[4] = 1.0 - l * w;
  hp[5] = l / bc1;
  hp[6] = 1.0 / sqrt(bc2);
  hp[7] = ty_ld(eps, 0, dteps);
}

__device__ inline void ty_adamw1(const double *h, float p, float g, float &m, float &v,
                                 float &po) {
  const double gj = g;
  const double mj = h[0] * m + h[1] * gj;
  const double vj = h[2] * v + h[3] * gj * gj;
  po = (float)((double)p * h[4] - h[5] * mj / (sqrt(vj) * h[6] + h[7]));
  m = (float)mj;
  v = (float)vj;
}

/* Any storage dtypes (the generic path). */
extern "C" __global__ void ty_adamw(const void *p, int dtp, const void *g, int dtg,
                                    const void *m, int dtm, const void *v, int dtv, void *po,
                                    int dtpo, void *mo, int dtmo, void *vo, int dtvo,
                                    long long n, const double *hp) {
  ty_pdl_enter();
  double h[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = hp[k];
  TY_FOR_EACH(i, n) {
    float mi = ty_ld(m, i, dtm), vi = ty_ld(v, i, dtv), pi;
    ty_adamw1(h, ty_ld(p, i, dtp), ty_ld(g, i, dtg), mi, vi, pi);
    ty_st(mo, i, dtmo, mi);
    ty_st(vo, i, dtvo, vi);
    ty_st(po, i, dtpo, pi);
  }
}

/* param and grad of dtype T, m and v f32. */
template <typename T>
__device__ __forceinline__ void ty_adamw_t_impl(const void *p_, const void *g_, const float *m,
                                                const float *v, void *po_, float *mo,
                                                float *vo, long long n, const double *hp) {
  const T *p = (const T *)p_, *g = (const T *)g_;
  T *po = (T *)po_;
  double h[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = hp[k];
  long long done = 0;
  if (ty_al4<T>(p) && ty_al4<T>(g) && ty_al4<T>(po) && ty_al4<float>(m) && ty_al4<float>(v) &&
      ty_al4<float>(mo) && ty_al4<float>(vo)) {
    const long long groups = n / 4;
    TY_FOR_EACH(k, groups) {
      float pv[4], gv[4], mv[4], vv[4], out[4];
      ty_ld4(p + 4 * k, pv);
      ty_ld4(g + 4 * k, gv);
      ty_ld4(m + 4 * k, mv);
      ty_ld4(v + 4 * k, vv);
#pragma unroll
      for (int j = 0; j < 4; ++j) ty_adamw1(h, pv[j], gv[j], mv[j], vv[j], out[j]);
      ty_st4(mo + 4 * k, mv);
      ty_st4(vo + 4 * k, vv);
      ty_st4(po + 4 * k, out);
    }
    done = 4 * groups;
  }
  TY_FOR_EACH(k, n - done) {
    const long long i = done + k;
    float mi = m[i], vi = v[i], pi;
    ty_adamw1(h, ty_get(p, i), ty_get(g, i), mi, vi, pi);
    mo[i] = mi;
    vo[i] = vi;
    ty_put(po, i, pi);
  }
}
#define TY_ADAMW_T_PARAMS                                                                 \
  const void *p, const void *g, const float *m, const float *v, void *po, float *mo, \
      float *vo, long long n, const double *hp
#define TY_ADAMW_T_ARGS p, g, m, v, po, mo, vo, n, hp
TY_KERNEL3(ty_adamw_t, TY_ADAMW_T_PARAMS, TY_ADAMW_T_ARGS)

/* ---- SGD (dampening 0) ----
 *
 *   d = g + wd p;  buf <- mu buf + d (when mu != 0)
 *   p <- p - lr (nesterov ? d + mu buf : (mu != 0 ? buf : d))
 *
 * nesterov without momentum > 0 is a data error (TY_ERR_SGD_NESTEROV with
 * the momentum's f32 bits), and nothing is written. Per-element arithmetic
 * in f64, as AdamW's ("elementwise" conform bound). */
extern "C" __global__ void ty_sgd(const void *p, int dtp, const void *g, int dtg,
                                  const void *buf, int dtbuf, void *po, int dtpo, void *bo,
                                  int dtbo, long long n, const void *lr, int dtlr,
                                  const void *mu, int dtmu, const void *wd, int dtwd,
                                  int nesterov, ERR_ARGS) {
  ty_pdl_enter();
  const float mf = ty_ld(mu, 0, dtmu);
  const double l = ty_ld(lr, 0, dtlr), m = mf, w = ty_ld(wd, 0, dtwd);
  if (nesterov && !(mf > 0.0f)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      ty_fail(err, node, TY_ERR_SGD_NESTEROV, (long long)__float_as_uint(mf), 0, 0);
    }
    return;
  }
  TY_FOR_EACH(i, n) {
    const double pi = ty_ld(p, i, dtp);
    double d = (double)ty_ld(g, i, dtg) + w * pi;
    double b = ty_ld(buf, i, dtbuf);
    if (m != 0.0) {
      b = m * b + d;
      d = nesterov ? d + m * b : b;
    }
    ty_st(bo, i, dtbo, (float)b);
    ty_st(po, i, dtpo, (float)(pi - l * d));
  }
}

/* ---- multi-tensor AdamW ----
 *
 * One launch for a run of adamw_update nodes that share lr, the betas, eps
 * and the step (cuda_ops.c groups them; each tensor keeps its own weight
 * decay): the tensors' elements are cut into chunks of `chunk` (a multiple
 * of 4), starts[k] is tensor k's first chunk (starts[count] the total), and
 * block j updates chunk j. ty_adamw_multi_prep forms hp as ty_adamw_prep
 * does but with hp[4] = lr; each chunk forms 1 - lr wd_k exactly as
 * ty_adamw_prep would, so every element gets the per-node kernel's bits.
 * Tables hold one device pointer per tensor (param, grad, m, v, their
 * outputs, the weight decay scalar, and `copy`: where the bf16 copy of the
 * new param goes, or 0 for none). With `coef` (a clip_by_global_norm
 * fused in, cuda_fuse.h CLIP_ADAMW) each gradient is first scaled as
 * ty_scale_multi would have stored it: T((float)(g coef[0])). */
extern "C" __global__ void ty_adamw_multi_prep(const void *lr, int dtlr, const void *b1,
                                               int dtb1, const void *b2, int dtb2,
                                               const void *eps, int dteps, const void *step,
                                               int dtstep, double *hp, ERR_ARGS) {
  ty_pdl_enter();
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const long long t = ty_ldi(step, 0, dtstep);
  if (t < 1) ty_fail(err, node, TY_ERR_ADAMW_STEP, t, 0, 0);
  const double l = ty_ld(lr, 0, dtlr), beta1 = ty_ld(b1, 0, dtb1);
  const double beta2 = ty_ld(b2, 0, dtb2);
  const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
  hp[0] = beta1;
  hp[1] = 1.0 - beta1;
  hp[2] = beta2;
  hp[3] = 1.0 - beta2;
  hp[4] = l;
  hp[5] = l / bc1;
  hp[6] = 1.0 / sqrt(bc2);
  hp[7] = ty_ld(eps, 0, dteps);
}

/* The tensor of chunk j: the last k with starts[k] <= j. */
__device__ inline int ty_chunk_tensor(const long long *starts, int count, long long j) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= j) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <typename T>
__device__ __forceinline__ void ty_adamw_multi_impl(
    const void *const *pt, const void *const *gt, const float *const *mt, const float *const *vt,
    void *const *pot, float *const *mot, float *const *vot, const void *const *wdt, int dtwd,
    uint16_t *const *copyt, const long long *starts, const long long *sizes, int count,
    long long chunk, const double *hp, const double *coef) {
  double h[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) h[q] = hp[q];
  const double lr = h[4];
  const double c = coef ? coef[0] : 1.0;
  /* the clipped gradient, rounded to T as the clip stores it */
  auto clipped = [&](float gi) {
    return coef ? ty_to_f<T>(ty_from_f<T>((float)((double)gi * c))) : gi;
  };
  for (long long j = blockIdx.x; j < starts[count]; j += gridDim.x) {
    const int k = ty_chunk_tensor(starts, count, j);
    const long long begin = (j - starts[k]) * chunk;
    const long long n = sizes[k] - begin < chunk ? sizes[k] - begin : chunk;
    h[4] = 1.0 - lr * (double)ty_ld(wdt[k], 0, dtwd);
    const T *p = (const T *)pt[k] + begin, *g = (const T *)gt[k] + begin;
    const float *m = mt[k] + begin, *v = vt[k] + begin;
    T *po = (T *)pot[k] + begin;
    float *mo = mot[k] + begin, *vo = vot[k] + begin;
    /* the bf16 copy of the new value (cuda_fuse.h ty_cu_weight_copy_plan),
     * rounded as the cast kernel rounds (ty_f32_to_bf16) */
    uint16_t *cp = copyt[k] ? copyt[k] + begin : nullptr;
    long long done = 0;
    if (ty_al4<T>(p) && ty_al4<T>(g) && ty_al4<T>(po) && ty_al4<float>(m) &&
        ty_al4<float>(v) && ty_al4<float>(mo) && ty_al4<float>(vo) &&
        (!cp || ty_al4<__nv_bfloat16>((const __nv_bfloat16 *)cp))) {
      const long long groups = n / 4;
      for (long long q = threadIdx.x; q < groups; q += blockDim.x) {
        float pv[4], gv[4], mv[4], vv[4], out[4];
        ty_ld4(p + 4 * q, pv);
        ty_ld4(g + 4 * q, gv);
        ty_ld4(m + 4 * q, mv);
        ty_ld4(v + 4 * q, vv);
#pragma unroll
        for (int i = 0; i < 4; ++i) ty_adamw1(h, pv[i], clipped(gv[i]), mv[i], vv[i], out[i]);
        ty_st4(mo + 4 * q, mv);
        ty_st4(vo + 4 * q, vv);
        ty_st4(po + 4 * q, out);
        if (cp) {
          ty_vstore(cp + 4 * q, make_uint2((uint32_t)ty_f32_to_bf16(out[0]) |
                                               (uint32_t)ty_f32_to_bf16(out[1]) << 16,
                                           (uint32_t)ty_f32_to_bf16(out[2]) |
                                               (uint32_t)ty_f32_to_bf16(out[3]) << 16));
        }
      }
      done = 4 * groups;
    }
    for (long long i = done + threadIdx.x; i < n; i += blockDim.x) {
      float mi = m[i], vi = v[i], pi;
      ty_adamw1(h, ty_get(p, i), clipped(ty_get(g, i)), mi, vi, pi);
      mo[i] = mi;
      vo[i] = vi;
      ty_put(po, i, pi);
      if (cp) cp[i] = ty_f32_to_bf16(ty_get(po, i));
    }
    __syncthreads(); /* h[4] is per chunk; every thread moves on together */
  }
}
#define TY_ADAMW_MULTI_PARAMS                                                                  \
  const void *const *p, const void *const *g, const float *const *m, const float *const *v,   \
      void *const *po, float *const *mo, float *const *vo, const void *const *wd, int dtwd,    \
      uint16_t *const *copy, const long long *starts, const long long *sizes, int count,       \
      long long chunk, const double *hp, const double *coef
#define TY_ADAMW_MULTI_ARGS \
  p, g, m, v, po, mo, vo, wd, dtwd, copy, starts, sizes, count, chunk, hp, coef
TY_KERNEL3(ty_adamw_multi, TY_ADAMW_MULTI_PARAMS, TY_ADAMW_MULTI_ARGS)

/* ---- Adafactor (transformers.Adafactor; ops/reference/ref_optim.c) ----
 *
 *   rho = relative_step ? min(warmup_init ? 1e-6 t : 1e-2, 1/sqrt(t)) : lr
 *   alpha = rho (scale_parameter ? max(eps2, rms(p)) : 1);  b2t = 1 - t^decay
 *   factored (rank >= 2, per matrix of the batch dims; s = g^2 + eps1):
 *     row <- b2t row + (1 - b2t) mean_last(s);  col <- b2t col + (1 - b2t) mean_rows(s)
 *     u = g / sqrt(row / mean(row)) / sqrt(col)
 *   else: v <- b2t v + (1 - b2t) s;  u = g / sqrt(v)
 *   u <- alpha u / max(1, rms(u) / clip);  m <- b1 m + (1 - b1) u, u = m (optional)
 *   p <- p - wd alpha p - u
 *
 * The host (cuda_ops_memory.c) queues: ty_adaf_prep (hyperparameters into
 * hp, step and beta1 checked), the sum of p^2 in fixed chunks (reduce.cu's
 * ty_reduce_rows), ty_adaf_alpha (one block adds the chunk sums in order:
 * rms(p), alpha), the new states (ty_adaf_rows, ty_adaf_cols with
 * ty_adaf_cols_finish, and ty_adaf_rowmean; or ty_adaf_v), the sum of u^2 in fixed chunks
 * (ty_adaf_usq), ty_adaf_scale (rms(u) and the clipped scale), and
 * ty_adaf_apply. u is never stored: the last two passes form it again from
 * the new states. Arithmetic is f64 over f32 states and sums are two-level
 * in a fixed order, as the cpu backend's, so the result does not depend on
 * the launch shape. Outputs may alias their state inputs: every element is
 * read by the thread that writes it, before it does. A step below 1 or a
 * beta1 outside [0, 1) is a data error (TY_ERR_ADAFACTOR with the step and
 * beta1's bits).
 *
 * hp: [0] rho, [1] b2t, [2] beta1, [3] wd, [4] alpha, [5] the update's
 * scale alpha / max(1, rms(u) / clip), [6] wd alpha. */
extern "C" __global__ void ty_adaf_prep(const void *lr, int dtlr, const void *wd, int dtwd,
                                        const void *step, int dtstep, const void *b1, int dtb1,
                                        int relative, int warmup, double decay, double *hp,
                                        ERR_ARGS) {
  ty_pdl_enter();
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const long long t = ty_ldi(step, 0, dtstep);
  const float beta1 = b1 ? ty_ld(b1, 0, dtb1) : 0.0f;
  if (t < 1 || !(beta1 >= 0.0f && beta1 < 1.0f)) {
    ty_fail(err, node, TY_ERR_ADAFACTOR, t, (long long)__float_as_uint(beta1), 0);
  }
  const double td = (double)(t < 1 ? 1 : t);
  hp[0] = relative ? fmin(warmup ? 1e-6 * td : 1e-2, 1.0 / sqrt(td)) : (double)ty_ld(lr, 0, dtlr);
  hp[1] = 1.0 - pow(td, decay);
  hp[2] = beta1;
  hp[3] = ty_ld(wd, 0, dtwd);
}

/* The root mean square of n elements from `count` chunk sums of their
 * squares, added in order by the whole block (thread 0 gets it). */
__device__ inline double ty_adaf_rms(const double *part, long long count, long long n) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (long long i = threadIdx.x; i < count; i += blockDim.x) acc += part[i];
  const double total = ty_block_sum_d(acc, scratch);
  return n ? sqrt(total / (double)n) : 0.0;
}

/* alpha from the chunk sums of p^2: one block. */
extern "C" __global__ void ty_adaf_alpha(const double *part, long long count, long long n,
                                         double eps2, int scale_parameter, double *hp) {
  ty_pdl_enter();
  const double rms = ty_adaf_rms(part, count, n);
  if (threadIdx.x == 0) hp[4] = hp[0] * (scale_parameter ? fmax(eps2, rms) : 1.0);
}

/* row' = b2t row + (1 - b2t) mean over the row of g^2 + eps1: one block per
 * row of cols elements (R rows: the batch dims times the rows). */
template <typename T>
__device__ __forceinline__ void ty_adaf_rows_impl(const void *g_, const float *row, float *row_o,
                                                  long long R, long long cols, double eps1,
                                                  const double *hp) {
  __shared__ double scratch[32];
  const T *g = (const T *)g_;
  const double b2t = hp[1];
  for (long long r = blockIdx.x; r < R; r += gridDim.x) {
    const T *gr = g + r * cols;
    double acc = 0.0;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
      const double x = ty_get(gr, j);
      acc += x * x + eps1;
    }
    const double total = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) row_o[r] = (float)(b2t * row[r] + (1.0 - b2t) * (total / (double)cols));
  }
}
#define TY_ADAF_ROWS_PARAMS                                                             \
  const void *g, const float *row, float *row_o, long long R, long long cols, double eps1, \
      const double *hp
#define TY_ADAF_ROWS_ARGS g, row, row_o, R, cols, eps1, hp
TY_KERNEL3(ty_adaf_rows, TY_ADAF_ROWS_PARAMS, TY_ADAF_ROWS_ARGS)

/* col' = b2t col + (1 - b2t) mean over the rows of g^2 + eps1, in two
 * levels: ty_adaf_cols_* sums rows [split rchunk, (split + 1) rchunk) of 32
 * columns per block (32 x 8 threads; blockIdx.x the group of columns,
 * blockIdx.y the split, blockIdx.z the matrix of the batch; thread row y
 * takes rows y, y + 8, ..., and the 8 partial sums are added in order) into
 * part[split][b * cols + j]; ty_adaf_cols_finish adds the splits in order
 * and updates col. The splits fill the card however few the columns. */
template <typename T>
__device__ __forceinline__ void ty_adaf_cols_impl(const void *g_, long long rows, long long cols,
                                                  long long rchunk, double eps1, double *part) {
  __shared__ double acc8[8][33];
  const long long j = (long long)blockIdx.x * 32 + threadIdx.x;
  const long long b = blockIdx.z, B = gridDim.z;
  const T *g = (const T *)g_ + b * rows * cols;
  const long long r0 = (long long)blockIdx.y * rchunk;
  const long long r1 = r0 + rchunk < rows ? r0 + rchunk : rows;
  double acc = 0.0;
  if (j < cols) {
    for (long long i = r0 + threadIdx.y; i < r1; i += 8) {
      const double x = ty_get(g, i * cols + j);
      acc += x * x + eps1;
    }
  }
  acc8[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    double total = 0.0;
    for (int y = 0; y < 8; ++y) total += acc8[y][threadIdx.x];
    part[((long long)blockIdx.y * B + b) * cols + j] = total;
  }
}
#define TY_ADAF_COLS_PARAMS \
  const void *g, long long rows, long long cols, long long rchunk, double eps1, double *part
#define TY_ADAF_COLS_ARGS g, rows, cols, rchunk, eps1, part
TY_KERNEL3(ty_adaf_cols, TY_ADAF_COLS_PARAMS, TY_ADAF_COLS_ARGS)

/* col'[k] from the `splits` partial sums of column k (n = B cols of them). */
extern "C" __global__ void ty_adaf_cols_finish(const double *part, long long splits, long long n,
                                               long long rows, const float *col, float *col_o,
                                               const double *hp) {
  ty_pdl_enter();
  const double b2t = hp[1];
  TY_FOR_EACH(k, n) {
    double total = 0.0;
    for (long long s = 0; s < splits; ++s) total += part[s * n + k];
    col_o[k] = (float)(b2t * col[k] + (1.0 - b2t) * (total / (double)rows));
  }
}

/* rmean[b] = mean of the new row state of matrix b: one block per matrix. */
extern "C" __global__ void ty_adaf_rowmean(const float *row_o, long long B, long long rows,
                                           double *rmean) {
  ty_pdl_enter();
  __shared__ double scratch[32];
  for (long long b = blockIdx.x; b < B; b += gridDim.x) {
    double acc = 0.0;
    for (long long i = threadIdx.x; i < rows; i += blockDim.x) acc += row_o[b * rows + i];
    const double total = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) rmean[b] = total / (double)rows;
  }
}

/* v' = b2t v + (1 - b2t) (g^2 + eps1), elementwise (vectors and scalars). */
template <typename T>
__device__ __forceinline__ void ty_adaf_v_impl(const void *g_, const float *v, float *v_o,
                                               long long n, double eps1, const double *hp) {
  const T *g = (const T *)g_;
  const double b2t = hp[1];
  TY_FOR_EACH(i, n) {
    const double x = ty_get(g, i);
    v_o[i] = (float)(b2t * v[i] + (1.0 - b2t) * (x * x + eps1));
  }
}
#define TY_ADAF_V_PARAMS \
  const void *g, const float *v, float *v_o, long long n, double eps1, const double *hp
#define TY_ADAF_V_ARGS g, v, v_o, n, eps1, hp
TY_KERNEL3(ty_adaf_v, TY_ADAF_V_PARAMS, TY_ADAF_V_ARGS)

/* The unclipped update u_i from the new states (row_o NULL: unfactored). */
template <typename T>
__device__ inline double ty_adaf_u(const T *g, const float *row_o, const float *col_o,
                                   const double *rmean, const float *v_o, long long i,
                                   long long rows, long long cols) {
  const double gi = ty_get(g, i);
  if (!row_o) return gi / sqrt((double)v_o[i]);
  const long long r = ty_div(i, cols), j = i - r * cols, b = ty_div(r, rows);
  return gi / sqrt((double)row_o[r] / rmean[b]) / sqrt((double)col_o[b * cols + j]);
}

/* part[k] = sum of u^2 over chunk k of `chunk` elements: one block each. */
template <typename T>
__device__ __forceinline__ void ty_adaf_usq_impl(const void *g_, const float *row_o,
                                                 const float *col_o, const double *rmean,
                                                 const float *v_o, long long n, long long rows,
                                                 long long cols, long long chunk, double *part) {
  __shared__ double scratch[32];
  const T *g = (const T *)g_;
  const long long chunks = (n + chunk - 1) / chunk;
  for (long long k = blockIdx.x; k < chunks; k += gridDim.x) {
    const long long end = (k + 1) * chunk < n ? (k + 1) * chunk : n;
    double acc = 0.0;
    for (long long i = k * chunk + threadIdx.x; i < end; i += blockDim.x) {
      const double u = ty_adaf_u(g, row_o, col_o, rmean, v_o, i, rows, cols);
      acc += u * u;
    }
    const double total = ty_block_sum_d(acc, scratch);
    if (threadIdx.x == 0) part[k] = total;
  }
}
#define TY_ADAF_USQ_PARAMS                                                                 \
  const void *g, const float *row_o, const float *col_o, const double *rmean,              \
      const float *v_o, long long n, long long rows, long long cols, long long chunk,     \
      double *part
#define TY_ADAF_USQ_ARGS g, row_o, col_o, rmean, v_o, n, rows, cols, chunk, part
TY_KERNEL3(ty_adaf_usq, TY_ADAF_USQ_PARAMS, TY_ADAF_USQ_ARGS)

/* The clipped scale from the chunk sums of u^2: one block. */
extern "C" __global__ void ty_adaf_scale(const double *part, long long count, long long n,
                                         double clip, double *hp) {
  ty_pdl_enter();
  const double rms = ty_adaf_rms(part, count, n);
  if (threadIdx.x == 0) {
    hp[5] = hp[4] / fmax(1.0, rms / clip);
    hp[6] = hp[3] * hp[4];
  }
}

/* p' = p - wd alpha p - u (u through the first moment when m is given). */
template <typename T>
__device__ __forceinline__ void ty_adaf_apply_impl(const void *p_, const void *g_,
                                                   const float *row_o, const float *col_o,
                                                   const double *rmean, const float *v_o,
                                                   const float *m, float *m_o, void *po_,
                                                   long long n, long long rows, long long cols,
                                                   const double *hp) {
  const T *p = (const T *)p_, *g = (const T *)g_;
  T *po = (T *)po_;
  const double scale = hp[5], decay = hp[6], beta1 = hp[2];
  TY_FOR_EACH(i, n) {
    double u = ty_adaf_u(g, row_o, col_o, rmean, v_o, i, rows, cols) * scale;
    if (m) {
      const float mi = (float)(beta1 * m[i] + (1.0 - beta1) * u);
      m_o[i] = mi;
      u = mi; /* the stored moment is the update, as in transformers */
    }
    const double pi = ty_get(p, i);
    ty_put(po, i, (float)(pi - decay * pi - u));
  }
}
#define TY_ADAF_APPLY_PARAMS                                                                \
  const void *p, const void *g, const float *row_o, const float *col_o, const double *rmean, \
      const float *v_o, const float *m, float *m_o, void *po, long long n, long long rows,   \
      long long cols, const double *hp
#define TY_ADAF_APPLY_ARGS p, g, row_o, col_o, rmean, v_o, m, m_o, po, n, rows, cols, hp
TY_KERNEL3(ty_adaf_apply, TY_ADAF_APPLY_PARAMS, TY_ADAF_APPLY_ARGS)
