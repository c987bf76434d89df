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
 * outputs, and the weight decay scalar). */
extern "C" __global__ void ty_adamw_multi_prep(const void *lr, int dtlr, const void *b1,
                                               int dtb1, const void *b2, int dtb2,
                                               const void *eps, int dteps, const void *step,
                                               int dtstep, double *hp, ERR_ARGS) {
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
    const long long *starts, const long long *sizes, int count, long long chunk,
    const double *hp) {
  double h[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) h[q] = hp[q];
  const double lr = h[4];
  for (long long j = blockIdx.x; j < starts[count]; j += gridDim.x) {
    const int k = ty_chunk_tensor(starts, count, j);
    const long long begin = (j - starts[k]) * chunk;
    const long long n = sizes[k] - begin < chunk ? sizes[k] - begin : chunk;
    h[4] = 1.0 - lr * (double)ty_ld(wdt[k], 0, dtwd);
    const T *p = (const T *)pt[k] + begin, *g = (const T *)gt[k] + begin;
    const float *m = mt[k] + begin, *v = vt[k] + begin;
    T *po = (T *)pot[k] + begin;
    float *mo = mot[k] + begin, *vo = vot[k] + begin;
    long long done = 0;
    if (ty_al4<T>(p) && ty_al4<T>(g) && ty_al4<T>(po) && ty_al4<float>(m) &&
        ty_al4<float>(v) && ty_al4<float>(mo) && ty_al4<float>(vo)) {
      const long long groups = n / 4;
      for (long long q = threadIdx.x; q < groups; q += blockDim.x) {
        float pv[4], gv[4], mv[4], vv[4], out[4];
        ty_ld4(p + 4 * q, pv);
        ty_ld4(g + 4 * q, gv);
        ty_ld4(m + 4 * q, mv);
        ty_ld4(v + 4 * q, vv);
#pragma unroll
        for (int i = 0; i < 4; ++i) ty_adamw1(h, pv[i], gv[i], mv[i], vv[i], out[i]);
        ty_st4(mo + 4 * q, mv);
        ty_st4(vo + 4 * q, vv);
        ty_st4(po + 4 * q, out);
      }
      done = 4 * groups;
    }
    for (long long i = done + threadIdx.x; i < n; i += blockDim.x) {
      float mi = m[i], vi = v[i], pi;
      ty_adamw1(h, ty_get(p, i), ty_get(g, i), mi, vi, pi);
      mo[i] = mi;
      vo[i] = vi;
      ty_put(po, i, pi);
    }
    __syncthreads(); /* h[4] is per chunk; every thread moves on together */
  }
}
#define TY_ADAMW_MULTI_PARAMS                                                                  \
  const void *const *p, const void *const *g, const float *const *m, const float *const *v,   \
      void *const *po, float *const *mo, float *const *vo, const void *const *wd, int dtwd,    \
      const long long *starts, const long long *sizes, int count, long long chunk,             \
      const double *hp
#define TY_ADAMW_MULTI_ARGS p, g, m, v, po, mo, vo, wd, dtwd, starts, sizes, count, chunk, hp
TY_KERNEL3(ty_adamw_multi, TY_ADAMW_MULTI_PARAMS, TY_ADAMW_MULTI_ARGS)
