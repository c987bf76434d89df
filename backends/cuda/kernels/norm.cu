/* layernorm and rmsnorm, forward and backward (rmsnorm is layernorm with the
 * mean pinned to 0 and no beta: one kernel serves both, `rms` telling).
 * One warp per row; rows up to 1024 wide that are 4-element aligned stay in
 * registers between the passes, longer ones are read again (from L1/L2). */
#include "vec.cuh"

/* Rows of at most TY_NORM_K * 128 elements are cached in registers. */
#define TY_NORM_K 8
#define TY_NORM_WARPS 8 /* rows per block of the row kernels */

/* ---- forward ----
 *
 *   layernorm: mu = mean(x), var = mean((x - mu)^2), rstd = 1/sqrt(var + eps),
 *              y = (x - mu) rstd gamma + beta
 *   rmsnorm:   rstd = 1/sqrt(mean(x^2) + eps), y = x rstd gamma
 *
 * The variance is a second pass over the row (one-pass E[x^2] - E[x]^2
 * cancels when the mean is large: conform's "offset-mean" case). gamma and
 * beta are optional (NULL). mean and rstd are f32 (any float dtype is
 * accepted). y is T, or with dty != 0 that storage dtype: the norm and the
 * cast after it in one pass (cuda_fuse.c), y rounded once from f32 as the
 * cast would. Checked at the "reduction" conform bound. */
template <typename T>
__device__ __forceinline__ void ty_layernorm_impl(const void *x_, const void *g_,
                                                  const void *b_, void *y_, int dty, void *mean,
                                                  int dtm, void *rstd, int dtr, long long rows,
                                                  long long C, float eps, int rms) {
  const T *xall = (const T *)x_, *g = (const T *)g_, *beta = (const T *)b_;
  T *yall = (T *)y_;
  const int lane = threadIdx.x & 31;
  const int wpb = blockDim.x >> 5;
  const bool cached = C % 4 == 0 && C <= 128 * TY_NORM_K && ty_al4<T>(xall) &&
                      (dty ? ty_al4_dt(y_, dty) : ty_al4<T>(yall)) && (!g || ty_al4<T>(g)) &&
                      (!beta || ty_al4<T>(beta));
  for (long long row = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); row < rows;
       row += (long long)gridDim.x * wpb) {
    const T *x = xall + row * C;
    T *y = yall + row * C;
    float mu = 0.0f, r;
    if (cached) {
      /* x, gamma and beta all loaded up front: one memory latency before
       * the reductions, not a second one after them (a decode step's norms
       * are a row or a few: latency is their whole cost). */
      float v[TY_NORM_K][4], gv[TY_NORM_K][4], bv[TY_NORM_K][4];
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        const long long c = (long long)(k * 32 + lane) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          gv[k][j] = 1.0f;
          bv[k][j] = 0.0f;
        }
        if (c < C) {
          ty_ld4(x + c, v[k]);
          if (g) ty_ld4(g + c, gv[k]);
          if (beta) ty_ld4(beta + c, bv[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        if ((long long)(k * 32 + lane) * 4 < C) s += (v[k][0] + v[k][1]) + (v[k][2] + v[k][3]);
      }
      if (!rms) mu = ty_warp_sum(s) / (float)C;
      float s2 = 0.0f;
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        if ((long long)(k * 32 + lane) * 4 < C) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float d = v[k][j] - mu;
            s2 += d * d;
          }
        }
      }
      r = 1.0f / sqrtf(ty_warp_sum(s2) / (float)C + eps);
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        const long long c = (long long)(k * 32 + lane) * 4;
        if (c < C) {
          float o[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) o[j] = (v[k][j] - mu) * r * gv[k][j] + bv[k][j];
          if (dty) {
            ty_st4_dt(y_, row * C + c, dty, o);
          } else {
            ty_st4(y + c, o);
          }
        }
      }
    } else {
      const int head = ty_row_head4<T>(C, x, y, g, beta);
      if (!rms) {
        float s = 0.0f;
        ty_row_loop(
            C, head, lane, 32, [&](long long c) { s += ty_get(x, c); },
            [&](long long c) {
              float v[4];
              ty_ld4(x + c, v);
              s += (v[0] + v[1]) + (v[2] + v[3]);
            });
        mu = ty_warp_sum(s) / (float)C;
      }
      float s2 = 0.0f;
      ty_row_loop(
          C, head, lane, 32,
          [&](long long c) {
            const float d = ty_get(x, c) - mu;
            s2 += d * d;
          },
          [&](long long c) {
            float v[4];
            ty_ld4(x + c, v);
#pragma unroll
            for (int j = 0; j < 4; ++j) s2 += (v[j] - mu) * (v[j] - mu);
          });
      r = 1.0f / sqrtf(ty_warp_sum(s2) / (float)C + eps);
      ty_row_loop(
          C, head, lane, 32,
          [&](long long c) {
            float o = (ty_get(x, c) - mu) * r;
            if (g) o *= ty_get(g, c);
            if (beta) o += ty_get(beta, c);
            if (dty) {
              ty_st(y_, row * C + c, dty, o);
            } else {
              ty_put(y, c, o);
            }
          },
          [&](long long c) {
            float v[4], gv[4] = {1.0f, 1.0f, 1.0f, 1.0f}, bv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            ty_ld4(x + c, v);
            if (g) ty_ld4(g + c, gv);
            if (beta) ty_ld4(beta + c, bv);
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = (v[j] - mu) * r * gv[j] + bv[j];
            if (dty) { /* y's alignment may differ from T's: element by element */
#pragma unroll
              for (int j = 0; j < 4; ++j) ty_st(y_, row * C + c + j, dty, v[j]);
            } else {
              ty_st4(y + c, v);
            }
          });
    }
    if (lane == 0) {
      if (!rms) ty_st(mean, row, dtm, mu);
      ty_st(rstd, row, dtr, r);
    }
  }
}
#define TY_LAYERNORM_PARAMS                                                          \
  const void *x, const void *g, const void *b, void *y, int dty, void *mean, int dtm, \
      void *rstd, int dtr, long long rows, long long C, float eps, int rms
#define TY_LAYERNORM_ARGS x, g, b, y, dty, mean, dtm, rstd, dtr, rows, C, eps, rms
TY_KERNEL3(ty_layernorm, TY_LAYERNORM_PARAMS, TY_LAYERNORM_ARGS)


/* ---- forward, a block per row (few rows: a decode step's norms) ----
 *
 * The same definition as above with a row's elements spread over a whole
 * block (blockDim.x threads, each up to TY_NORM_ROW_K groups of 4 held in
 * registers with their gamma and beta): at one to a few rows the warp
 * kernel left one warp to walk a row of 768 or 2048 elements, a chain of
 * dependent loads. The builder takes it outside deterministic mode only,
 * for rows of 4-aligned length up to blockDim.x * 4 * TY_NORM_ROW_K: its
 * sums run in another order than the warp kernel's, so a row's bits would
 * depend on how many rows the step has. */
#define TY_NORM_ROW_K 2
template <typename T>
__device__ __forceinline__ void ty_layernorm_row_impl(const void *x_, const void *g_,
                                                      const void *b_, void *y_, int dty,
                                                      void *mean, int dtm, void *rstd, int dtr,
                                                      long long rows, long long C, float eps,
                                                      int rms) {
  __shared__ float scratch[32];
  const T *g = (const T *)g_, *beta = (const T *)b_;
  const long long row = blockIdx.x;
  if (row >= rows) return;
  const T *x = (const T *)x_ + row * C;
  T *y = (T *)y_ + row * C;
  const int nt = blockDim.x;
  /* 4-element groups where C and every pointer allow, else element by
   * element (the same values) */
  const bool al = C % 4 == 0 && ty_al4<T>(x) && (dty ? ty_al4_dt(y_, dty) : ty_al4<T>(y)) &&
                  (!g || ty_al4<T>(g)) && (!beta || ty_al4<T>(beta));
  float v[TY_NORM_ROW_K][4], gv[TY_NORM_ROW_K][4], bv[TY_NORM_ROW_K][4];
#pragma unroll
  for (int k = 0; k < TY_NORM_ROW_K; ++k) {
    const long long c = ((long long)k * nt + threadIdx.x) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[k][j] = 0.0f;
      gv[k][j] = 1.0f;
      bv[k][j] = 0.0f;
    }
    if (al && c < C) {
      ty_ld4(x + c, v[k]);
      if (g) ty_ld4(g + c, gv[k]);
      if (beta) ty_ld4(beta + c, bv[k]);
    } else if (c < C) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (c + j < C) {
          v[k][j] = ty_get(x, c + j);
          if (g) gv[k][j] = ty_get(g, c + j);
          if (beta) bv[k][j] = ty_get(beta, c + j);
        }
      }
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < TY_NORM_ROW_K; ++k) s += (v[k][0] + v[k][1]) + (v[k][2] + v[k][3]);
  const float mu = rms ? 0.0f : ty_block_sum(s, scratch) / (float)C;
  float s2 = 0.0f;
#pragma unroll
  for (int k = 0; k < TY_NORM_ROW_K; ++k) {
    const long long c = ((long long)k * nt + threadIdx.x) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (c + j < C) {
        const float d = v[k][j] - mu;
        s2 += d * d;
      }
    }
  }
  const float r = 1.0f / sqrtf(ty_block_sum(s2, scratch) / (float)C + eps);
#pragma unroll
  for (int k = 0; k < TY_NORM_ROW_K; ++k) {
    const long long c = ((long long)k * nt + threadIdx.x) * 4;
    if (c >= C) continue;
    float o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = (v[k][j] - mu) * r * gv[k][j] + bv[k][j];
    if (al) {
      if (dty) ty_st4_dt(y_, row * C + c, dty, o);
      else ty_st4(y + c, o);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (c + j >= C) continue;
        if (dty) ty_st(y_, row * C + c + j, dty, o[j]);
        else ty_put(y, c + j, o[j]);
      }
    }
  }
  if (threadIdx.x == 0) {
    if (!rms) ty_st(mean, row, dtm, mu);
    ty_st(rstd, row, dtr, r);
  }
}
TY_KERNEL3(ty_layernorm_row, TY_LAYERNORM_PARAMS, TY_LAYERNORM_ARGS)
/* ---- backward, dx ----
 *
 *   xhat = (x - mu) rstd (rmsnorm: x rstd), g = dy gamma (gamma absent: dy)
 *   layernorm dx = rstd (g - mean(g) - xhat mean(g xhat))
 *   rmsnorm   dx = rstd (g - xhat mean(g xhat))
 *
 * One warp per row, like the forward. Checked at the "reduction" conform
 * bound. */
template <typename T>
__device__ __forceinline__ void ty_norm_bwd_dx_impl(const void *dy_, const void *x_,
                                                    const void *g_, const void *mean, int dtm,
                                                    const void *rstd, int dtr, void *dx_,
                                                    long long rows, long long C, int rms) {
  const T *dyall = (const T *)dy_, *xall = (const T *)x_, *g = (const T *)g_;
  T *dxall = (T *)dx_;
  const int lane = threadIdx.x & 31;
  const int wpb = blockDim.x >> 5;
  const bool cached = C % 4 == 0 && C <= 128 * TY_NORM_K && ty_al4<T>(dyall) &&
                      ty_al4<T>(xall) && ty_al4<T>(dxall) && (!g || ty_al4<T>(g));
  const float inv_c = 1.0f / (float)C;
  for (long long row = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); row < rows;
       row += (long long)gridDim.x * wpb) {
    const T *dy = dyall + row * C, *x = xall + row * C;
    T *dx = dxall + row * C;
    const float mu = rms ? 0.0f : ty_ld(mean, row, dtm);
    const float r = ty_ld(rstd, row, dtr);
    float sg = 0.0f, sgx = 0.0f;
    if (cached) {
      float dv[TY_NORM_K][4], xv[TY_NORM_K][4];
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        const long long c = (long long)(k * 32 + lane) * 4;
        if (c < C) {
          float gv[4] = {1.0f, 1.0f, 1.0f, 1.0f};
          ty_ld4(dy + c, dv[k]);
          ty_ld4(x + c, xv[k]);
          if (g) ty_ld4(g + c, gv);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float gj = dv[k][j] * gv[j];
            sg += gj;
            sgx += gj * ((xv[k][j] - mu) * r);
          }
        }
      }
      const float mean_g = rms ? 0.0f : ty_warp_sum(sg) * inv_c;
      const float mean_gx = ty_warp_sum(sgx) * inv_c;
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        const long long c = (long long)(k * 32 + lane) * 4;
        if (c < C) {
          float gv[4] = {1.0f, 1.0f, 1.0f, 1.0f}, o[4];
          if (g) ty_ld4(g + c, gv);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float xhat = (xv[k][j] - mu) * r;
            o[j] = r * (dv[k][j] * gv[j] - mean_g - xhat * mean_gx);
          }
          ty_st4(dx + c, o);
        }
      }
    } else {
      const int head = ty_row_head4<T>(C, dy, x, dx, g);
      /* g = dy gamma and xhat of element c, or of the 4 from c. */
      auto load1 = [&](long long c, float *gj, float *xh) {
        *gj = ty_get(dy, c) * (g ? ty_get(g, c) : 1.0f);
        *xh = (ty_get(x, c) - mu) * r;
      };
      auto load4 = [&](long long c, float *gj, float *xh) {
        float dv[4], xv[4], gv[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        ty_ld4(dy + c, dv);
        ty_ld4(x + c, xv);
        if (g) ty_ld4(g + c, gv);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          gj[j] = dv[j] * gv[j];
          xh[j] = (xv[j] - mu) * r;
        }
      };
      ty_row_loop(
          C, head, lane, 32,
          [&](long long c) {
            float gj, xh;
            load1(c, &gj, &xh);
            sg += gj;
            sgx += gj * xh;
          },
          [&](long long c) {
            float gj[4], xh[4];
            load4(c, gj, xh);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              sg += gj[j];
              sgx += gj[j] * xh[j];
            }
          });
      const float mean_g = rms ? 0.0f : ty_warp_sum(sg) * inv_c;
      const float mean_gx = ty_warp_sum(sgx) * inv_c;
      ty_row_loop(
          C, head, lane, 32,
          [&](long long c) {
            float gj, xh;
            load1(c, &gj, &xh);
            ty_put(dx, c, r * (gj - mean_g - xh * mean_gx));
          },
          [&](long long c) {
            float gj[4], xh[4];
            load4(c, gj, xh);
#pragma unroll
            for (int j = 0; j < 4; ++j) gj[j] = r * (gj[j] - mean_g - xh[j] * mean_gx);
            ty_st4(dx + c, gj);
          });
    }
  }
}
#define TY_NORM_BWD_DX_PARAMS                                                           \
  const void *dy, const void *x, const void *g, const void *mean, int dtm, const void *rstd, \
      int dtr, void *dx, long long rows, long long C, int rms
#define TY_NORM_BWD_DX_ARGS dy, x, g, mean, dtm, rstd, dtr, dx, rows, C, rms
TY_KERNEL3(ty_norm_bwd_dx, TY_NORM_BWD_DX_PARAMS, TY_NORM_BWD_DX_ARGS)

/* ---- backward, fused: dx and the parameter gradients in one pass ----
 *
 * The same dx as ty_norm_bwd_dx (a warp per row, the row cached in
 * registers), and while the row is there each lane also adds dy xhat and dy
 * for its columns: lane l of every warp owns columns (32 k + l) 4 + j, so
 * the warps' running sums line up and are added in warp order in shared
 * memory, and block b writes its f64 partials to part[b][C] (dgamma) and
 * part[gridDim.x + b][C] (dbeta); ty_norm_params_finish adds the blocks in
 * order. dy and x are read once instead of twice. Rows go to warps by the
 * grid-stride rule of a grid sized from the shape only, so the summation
 * order, and the result, never change between runs. Needs C % 4 == 0 and
 * C <= 128 TY_NORM_K; unaligned rows load element by element.
 *
 * Fused with its neighbours (cuda_fuse.c): dy may be stored in another dtype
 * (dtdy != 0: the cast before the norm, read as f32 as the cast would give
 * it), the residual gradient `resid` (the add after the norm) is added to
 * dx, and dx2 receives the same values in dtype dtdx2 (the cast after the
 * add). NULL / 0 leave each out. */
template <typename T>
__device__ inline void ty_norm_ld4(const T *p, bool aligned, float v[4]) {
  if (aligned) {
    ty_ld4(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = ty_get(p, j);
  }
}

/* The lane's columns (32 k + lane) 4 .. + 3 of the row at `base` (elements)
 * of an aligned U tensor, every load issued before any value is used. */
template <typename U>
__device__ __forceinline__ void ty_norm_row_ld4(const void *p, long long base, long long C,
                                                int lane, float v[TY_NORM_K][4]) {
#pragma unroll
  for (int k = 0; k < TY_NORM_K; ++k) {
    const long long c = (long long)(k * 32 + lane) * 4;
    if (c < C) ty_ld4((const U *)p + base + c, v[k]);
  }
}

template <typename T>
__device__ __forceinline__ void ty_norm_bwd_fused_impl(const void *dy_, int dtdy, const void *x_,
                                                       const void *g_, const void *mean,
                                                       int dtm, const void *rstd, int dtr,
                                                       const void *resid_, void *dx_,
                                                       void *dx2, int dtdx2, double *part,
                                                       long long rows, long long C, int rms) {
  __shared__ float sh[2][128 * TY_NORM_K];
  const T *xall = (const T *)x_, *g = (const T *)g_, *rall = (const T *)resid_;
  T *dxall = (T *)dx_;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wpb = blockDim.x >> 5;
  const int ddt = dtdy ? dtdy : (int)ty_dt_code<T>();
  const bool aligned = ty_al4_dt(dy_, ddt) && ty_al4<T>(xall) && ty_al4<T>(dxall) &&
                       (!g || ty_al4<T>(g)) && (!rall || ty_al4<T>(rall)) &&
                       (!dx2 || ty_al4_dt(dx2, dtdx2));
  const float inv_c = 1.0f / (float)C;
  float accg[TY_NORM_K][4], accb[TY_NORM_K][4];
#pragma unroll
  for (int k = 0; k < TY_NORM_K; ++k) {
#pragma unroll
    for (int j = 0; j < 4; ++j) accg[k][j] = accb[k][j] = 0.0f;
  }
  for (long long row = (long long)blockIdx.x * wpb + warp; row < rows;
       row += (long long)gridDim.x * wpb) {
    const T *x = xall + row * C;
    T *dx = dxall + row * C;
    const float mu = rms ? 0.0f : ty_ld(mean, row, dtm);
    const float r = ty_ld(rstd, row, dtr);
    /* gamma is loaded again in the second loop (from L1) rather than kept:
     * registers are what limits this kernel's occupancy. The row's dy and x
     * are all requested before any is used (one branch per dtype outside
     * the unrolled loads): with few warps per SM, a load per use left the
     * kernel waiting on memory latency at a third of the bandwidth. */
    float dv[TY_NORM_K][4], xh[TY_NORM_K][4];
    float sg = 0.0f, sgx = 0.0f;
    if (aligned) {
      if (ddt == TY_BF16) {
        ty_norm_row_ld4<__nv_bfloat16>(dy_, row * C, C, lane, dv);
      } else if (ddt == TY_F16) {
        ty_norm_row_ld4<__half>(dy_, row * C, C, lane, dv);
      } else {
        ty_norm_row_ld4<float>(dy_, row * C, C, lane, dv);
      }
      ty_norm_row_ld4<T>(xall, row * C, C, lane, xh);
    } else {
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        const long long c = (long long)(k * 32 + lane) * 4;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          dv[k][j] = c < C ? ty_ld(dy_, row * C + c + j, ddt) : 0.0f;
          xh[k][j] = c < C ? ty_get(x, c + j) : 0.0f;
        }
      }
    }
#pragma unroll
    for (int k = 0; k < TY_NORM_K; ++k) {
      const long long c = (long long)(k * 32 + lane) * 4;
      if (c < C) {
        float gv[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        if (g) ty_norm_ld4(g + c, aligned, gv);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          xh[k][j] = (xh[k][j] - mu) * r;
          const float gj = dv[k][j] * gv[j];
          sg += gj;
          sgx += gj * xh[k][j];
          accg[k][j] += dv[k][j] * xh[k][j];
          accb[k][j] += dv[k][j];
        }
      }
    }
    const float mean_g = rms ? 0.0f : ty_warp_sum(sg) * inv_c;
    const float mean_gx = ty_warp_sum(sgx) * inv_c;
    /* dx into dv (in place), then the residual gradient it joins (the add
     * after the norm) into xh, all of it requested before the first store:
     * a store to dx may alias rall as far as the compiler knows, so a load
     * after one would wait for it. */
#pragma unroll
    for (int k = 0; k < TY_NORM_K; ++k) {
      const long long c = (long long)(k * 32 + lane) * 4;
      if (c < C) {
        float gv[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        if (g) ty_norm_ld4(g + c, aligned, gv);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          dv[k][j] = r * (dv[k][j] * gv[j] - mean_g - xh[k][j] * mean_gx);
        }
      }
    }
    if (rall) {
      if (aligned) {
        ty_norm_row_ld4<T>(rall, row * C, C, lane, xh);
      } else {
#pragma unroll
        for (int k = 0; k < TY_NORM_K; ++k) {
          const long long c = (long long)(k * 32 + lane) * 4;
#pragma unroll
          for (int j = 0; j < 4; ++j) xh[k][j] = c < C ? ty_get(rall, row * C + c + j) : 0.0f;
        }
      }
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
#pragma unroll
        for (int j = 0; j < 4; ++j) dv[k][j] = xh[k][j] + dv[k][j];
      }
    }
#pragma unroll
    for (int k = 0; k < TY_NORM_K; ++k) {
      const long long c = (long long)(k * 32 + lane) * 4;
      if (c < C) {
        if (aligned) {
          ty_st4(dx + c, dv[k]);
          if (dx2) ty_st4_dt(dx2, row * C + c, dtdx2, dv[k]);
        } else {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            ty_put(dx, c + j, dv[k][j]);
            if (dx2) ty_st(dx2, row * C + c + j, dtdx2, dv[k][j]);
          }
        }
      }
    }
  }
  /* The warps' sums, added in warp order. */
  for (int w = 0; w < wpb; ++w) {
    if (warp == w) {
#pragma unroll
      for (int k = 0; k < TY_NORM_K; ++k) {
        const int c = (k * 32 + lane) * 4;
        if (c < C) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            sh[0][c + j] = (w ? sh[0][c + j] : 0.0f) + accg[k][j];
            sh[1][c + j] = (w ? sh[1][c + j] : 0.0f) + accb[k][j];
          }
        }
      }
    }
    __syncthreads();
  }
  for (long long c = threadIdx.x; c < C; c += blockDim.x) {
    part[(long long)blockIdx.x * C + c] = sh[0][c];
    part[((long long)gridDim.x + blockIdx.x) * C + c] = sh[1][c];
  }
}
#define TY_NORM_BWD_FUSED_PARAMS                                                            \
  const void *dy, int dtdy, const void *x, const void *g, const void *mean, int dtm,       \
      const void *rstd, int dtr, const void *resid, void *dx, void *dx2, int dtdx2,          \
      double *part, long long rows, long long C, int rms
#define TY_NORM_BWD_FUSED_ARGS \
  dy, dtdy, x, g, mean, dtm, rstd, dtr, resid, dx, dx2, dtdx2, part, rows, C, rms
/* 3 blocks of 4 warps per SM (cuda_ops_nn.c sizes the grid for that): at
 * 174 registers only 2 fit, and the third block of every SM ran as a
 * second, half-empty wave. */
TY_KERNEL3_ATTR(ty_norm_bwd_fused, TY_NORM_BWD_FUSED_PARAMS, TY_NORM_BWD_FUSED_ARGS,
                __launch_bounds__(128, 3))

/* ---- backward, dgamma and dbeta ----
 *
 *   dgamma[c] = sum_rows dy xhat,  dbeta[c] = sum_rows dy  (dbeta may be NULL)
 *
 * A column reduction in two deterministic levels, as ty_reduce_cols_* of
 * reduce.cu (and like it accumulated in f64): blocks of 32 columns x 8 row
 * lanes over a chunk of the rows (gridDim.y chunks, chosen from the shape),
 * added in a fixed tree; with one chunk the block writes the outputs, else
 * f64 partials go to `part` ([2][chunks][C]: dgamma's, then dbeta's) and
 * ty_norm_params_finish adds them in chunk order. Checked at the
 * "reduction" conform bound. */
template <typename T>
__device__ __forceinline__ void ty_norm_params_impl(const void *dy_, const void *x_,
                                                    const void *mean, int dtm,
                                                    const void *rstd, int dtr, void *dgamma,
                                                    int dtdg, void *dbeta, int dtdb,
                                                    double *part, long long rows, long long C,
                                                    long long rchunk, int rms) {
  __shared__ double sg[8][32], sb[8][32];
  const T *dy = (const T *)dy_, *x = (const T *)x_;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long r0 = (long long)blockIdx.y * rchunk;
  const long long r1 = rows - r0 < rchunk ? rows : r0 + rchunk;
  const long long cb = (C + 31) / 32;
  for (long long bx = blockIdx.x; bx < cb; bx += gridDim.x) {
    const long long c = bx * 32 + tx;
    double accg = 0.0, accb = 0.0;
    if (c < C) {
      for (long long r = r0 + ty; r < r1; r += 8) {
        const float mu = rms ? 0.0f : ty_ld(mean, r, dtm);
        const float xhat = (ty_get(x, r * C + c) - mu) * ty_ld(rstd, r, dtr);
        const float d = ty_get(dy, r * C + c);
        accg += (double)d * xhat;
        accb += d;
      }
    }
    sg[ty][tx] = accg;
    sb[ty][tx] = accb;
    __syncthreads();
#pragma unroll
    for (int s = 4; s > 0; s >>= 1) {
      if (ty < s) {
        sg[ty][tx] += sg[ty + s][tx];
        sb[ty][tx] += sb[ty + s][tx];
      }
      __syncthreads();
    }
    if (ty == 0 && c < C) {
      if (gridDim.y == 1) {
        ty_st_d(dgamma, c, dtdg, sg[0][tx]);
        if (dbeta) ty_st_d(dbeta, c, dtdb, sb[0][tx]);
      } else {
        part[(long long)blockIdx.y * C + c] = sg[0][tx];
        part[((long long)gridDim.y + blockIdx.y) * C + c] = sb[0][tx];
      }
    }
    __syncthreads();
  }
}
#define TY_NORM_PARAMS_PARAMS                                                              \
  const void *dy, const void *x, const void *mean, int dtm, const void *rstd, int dtr,    \
      void *dgamma, int dtdg, void *dbeta, int dtdb, double *part, long long rows, long long C, \
      long long rchunk, int rms
#define TY_NORM_PARAMS_ARGS \
  dy, x, mean, dtm, rstd, dtr, dgamma, dtdg, dbeta, dtdb, part, rows, C, rchunk, rms
TY_KERNEL3(ty_norm_params, TY_NORM_PARAMS_PARAMS, TY_NORM_PARAMS_ARGS)

/* dgamma[c] = sum_s part[s][c], dbeta[c] = sum_s part[chunks + s][c]:
 * blocks of 32 columns x 32 chunk lanes (threadIdx.y adds chunks y, y + 32,
 * ..., reading 32 adjacent columns of a chunk together), then the 32 lane
 * sums added by a fixed tree in shared memory: the order, and the result,
 * depend only on the shape. */
extern "C" __global__ void ty_norm_params_finish(const double *part, long long chunks,
                                                 long long C, void *dgamma, int dtdg,
                                                 void *dbeta, int dtdb) {
  ty_pdl_enter();
  __shared__ double sg[32][33], sb[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const long long c = (long long)blockIdx.x * 32 + tx;
  double accg = 0.0, accb = 0.0;
  if (c < C) {
#pragma unroll 4
    for (long long s = ty; s < chunks; s += 32) {
      accg += part[s * C + c];
      accb += part[(chunks + s) * C + c];
    }
  }
  sg[ty][tx] = accg;
  sb[ty][tx] = accb;
  __syncthreads();
#pragma unroll
  for (int h = 16; h > 0; h >>= 1) {
    if (ty < h) {
      sg[ty][tx] += sg[ty + h][tx];
      sb[ty][tx] += sb[ty + h][tx];
    }
    __syncthreads();
  }
  if (ty == 0 && c < C) {
    ty_st_d(dgamma, c, dtdg, sg[0][tx]);
    if (dbeta) ty_st_d(dbeta, c, dtdb, sb[0][tx]);
  }
}
