/* attention_merge and attention_merge_backward (docs/ops.md "Attention";
 * the oracle is ops/reference/ref_attention.c, and these follow the cpu
 * kernel, backends/cpu/cpu_kernels_attention_merge.c, step for step):
 *
 *   lse = m + log(exp(lse_a - m) + exp(lse_b - m)),  m = max(lse_a, lse_b)
 *   out = w_a out_a + w_b out_b,  w_x = exp(lse_x - lse)
 *   dout_x = w_x dout,  dlse_x = w_x (dlse + <dout, out_x - out>)
 *
 * A part with lse_x = -inf has weight 0 and its out_x is never read (it may
 * hold NaN); both -inf gives lse = -inf, out = 0 and zero gradients. The
 * per-row lse and weights are formed in f64 and rounded to f32 as the cpu
 * kernel does; the row products are f32 with no contraction (__fmul_rn,
 * __fadd_rn), so forward outputs are the cpu's bit for bit wherever the
 * device's f64 exp and log round as the host's. <dout, out_x - out> sums
 * in f64 over a warp (another order than the cpu's: last bits of dlse_x).
 *
 * One warp per (b, h, t) row of lse [B, H, T]; its vectors are the row's D
 * elements of [B, T, H, D]. TY_MERGE_ROWS rows per 256-thread block. lse
 * values are f32 (the plugin refuses f64). */
#include "vec.cuh"

#define TY_MERGE_ROWS 8

/* Row `row` of [B, H, T] -> offset of its vector in [B, T, H, D]. */
__device__ inline long long ty_merge_vec(long long row, int Tq, int H, int D) {
  const long long t = row % Tq, h = (row / Tq) % H, b = row / ((long long)Tq * H);
  return ((b * Tq + t) * H + h) * D;
}

__device__ inline float ty_merge_weight(float lse_x, double lse) {
  return lse_x == -INFINITY || lse == -INFINITY ? 0.0f : (float)exp((double)lse_x - lse);
}

__device__ inline double ty_merge_warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* ty_attention_merge_<T>(out_a, lse_a, out_b, lse_b, out, lse, i64 rows,
 * int T, int H, int D) */
template <typename T>
__device__ void ty_attention_merge_impl(const void *oa_, const float *la, const void *ob_,
                                        const float *lb, void *out_, float *lse, long long rows,
                                        int Tq, int H, int D) {
  const T *oa = (const T *)oa_, *ob = (const T *)ob_;
  T *out = (T *)out_;
  const long long row = (long long)blockIdx.x * TY_MERGE_ROWS + (threadIdx.x >> 5);
  if (row >= rows) return; /* whole warps */
  const int lane = threadIdx.x & 31;
  const long long o = ty_merge_vec(row, Tq, H, D);
  const float a = la[row], b = lb[row];
  const double m = a > b ? a : b;
  const double l = m == -INFINITY ? -INFINITY : m + log(exp(a - m) + exp(b - m));
  const float wa = ty_merge_weight(a, l), wb = ty_merge_weight(b, l);
  for (int d = lane; d < D; d += 32) {
    const float xa = wa > 0.0f ? __fmul_rn(wa, ty_to_f<T>(oa[o + d])) : 0.0f;
    const float xb = wb > 0.0f ? __fmul_rn(wb, ty_to_f<T>(ob[o + d])) : 0.0f;
    out[o + d] = ty_from_f<T>(__fadd_rn(xa, xb));
  }
  if (lane == 0) lse[row] = (float)l;
}
#define TY_MERGE_PARAMS                                                                      \
  const void *oa, const float *la, const void *ob, const float *lb, void *out, float *lse, \
      long long rows, int Tq, int H, int D
#define TY_MERGE_ARGS oa, la, ob, lb, out, lse, rows, Tq, H, D
TY_KERNEL3_ATTR(ty_attention_merge, TY_MERGE_PARAMS, TY_MERGE_ARGS,
                __launch_bounds__(32 * TY_MERGE_ROWS))

/* ty_attention_merge_backward_<T>(out_a, lse_a, out_b, lse_b, out, lse,
 * dout, dlse, dout_a, dlse_a, dout_b, dlse_b, i64 rows, int T, int H,
 * int D): dout and dlse may be NULL (absent: zero), not both. */
template <typename T>
__device__ void ty_attention_merge_backward_impl(const void *oa, const float *la,
                                                 const void *ob, const float *lb,
                                                 const void *y_, const float *lse,
                                                 const void *g_, const float *dlse, void *da,
                                                 float *dla, void *db, float *dlb,
                                                 long long rows, int Tq, int H, int D) {
  const T *y = (const T *)y_, *g = (const T *)g_;
  const long long row = (long long)blockIdx.x * TY_MERGE_ROWS + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int lane = threadIdx.x & 31;
  const long long o = ty_merge_vec(row, Tq, H, D);
  const float l = lse[row];
  for (int p = 0; p < 2; ++p) {
    const T *x = (const T *)(p ? ob : oa);
    T *dx = (T *)(p ? db : da);
    const float w = ty_merge_weight(p ? lb[row] : la[row], l);
    double acc = 0.0;
    for (int d = lane; d < D; d += 32) {
      const float gd = g ? ty_to_f<T>(g[o + d]) : 0.0f;
      if (g && w > 0.0f) {
        acc += (double)gd * ((double)ty_to_f<T>(x[o + d]) - (double)ty_to_f<T>(y[o + d]));
      }
      dx[o + d] = ty_from_f<T>(g ? __fmul_rn(w, gd) : 0.0f);
    }
    acc = ty_merge_warp_sum(acc);
    if (dlse) acc += dlse[row];
    if (lane == 0) (p ? dlb : dla)[row] = (float)((double)w * acc);
  }
}
#define TY_MERGE_BWD_PARAMS                                                                  \
  const void *oa, const float *la, const void *ob, const float *lb, const void *y,         \
      const float *lse, const void *g, const float *dlse, void *da, float *dla, void *db,  \
      float *dlb, long long rows, int Tq, int H, int D
#define TY_MERGE_BWD_ARGS oa, la, ob, lb, y, lse, g, dlse, da, dla, db, dlb, rows, Tq, H, D
TY_KERNEL3_ATTR(ty_attention_merge_backward, TY_MERGE_BWD_PARAMS, TY_MERGE_BWD_ARGS,
                __launch_bounds__(32 * TY_MERGE_ROWS))
