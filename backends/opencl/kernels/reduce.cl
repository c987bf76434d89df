/* Reductions: reduce_sum / reduce_mean / reduce_sumsq over any set of axes,
 * and global-norm clipping.
 *
 *   y[k] = scale * sum_{r} f(x[kept(k) + reduced(r)]),  f = x or x^2
 *   clip: norm = sqrt(sum_i sum g_i^2); coef = min(1, max_norm/(norm + 1e-6))
 *         when max_norm > 0 (else 1); g_i' = g_i coef
 *
 * One work-group of TY_WG per output: each work-item sums a strided share
 * of the terms in f32, then a tree adds the shares, so an output of n terms
 * carries about log2(TY_WG) + n/TY_WG roundings instead of n. The clipping
 * norm is summed the same way in fixed-size blocks whose partial sums are
 * added in a fixed order: results are deterministic. Checked at the
 * "reduction" conform bound (f32 NMSE 1e-9). */

#define TY_RED_SUM 0
#define TY_RED_SUMSQ 1

__kernel void ty_reduce(IN(x), int dtx, OUT(y), int dty, int kind, long terms, float scale,
                        int krank, long8 kdims8, long8 kstr8, int rrank, long8 rdims8,
                        long8 rstr8) {
  __local float scratch[TY_WG];
  long k = get_group_id(0);
  long kdims[8], kstr[8], rdims[8], rstr[8], base, unused;
  ty_unpack8(kdims8, kdims);
  ty_unpack8(kstr8, kstr);
  ty_unpack8(rdims8, rdims);
  ty_unpack8(rstr8, rstr);
  ty_offsets2(k, krank, kdims, kstr, kstr, &base, &unused);
  float acc = 0.0f;
  for (long r = get_local_id(0); r < terms; r += TY_WG) {
    long off;
    ty_offsets2(r, rrank, rdims, rstr, rstr, &off, &unused);
    float v = ty_ld(P(x), base + off, dtx);
    acc += kind == TY_RED_SUMSQ ? v * v : v;
  }
  float total = ty_group_sum(acc, scratch);
  if (get_local_id(0) == 0) ty_st(P(y), k, dty, total * scale);
}

/* Sum of squares of x[block * TY_WG * 16 ...] per work-group into
 * partial[slot + group]. */
__kernel void ty_sumsq_blocks(IN(x), int dtx, long n, OUT(partial), long slot) {
  __local float scratch[TY_WG];
  long start = get_group_id(0) * (long)TY_WG * 16;
  float acc = 0.0f;
  for (int j = 0; j < 16; ++j) {
    long i = start + j * (long)TY_WG + get_local_id(0);
    if (i < n) {
      float v = ty_ld(P(x), i, dtx);
      acc += v * v;
    }
  }
  float total = ty_group_sum(acc, scratch);
  if (get_local_id(0) == 0) ((__global float *)P(partial))[slot + get_group_id(0)] = total;
}

/* One work-group: norm from the partial sums, the clipping coefficient into
 * coef[0]. */
__kernel void ty_clip_finish(IN(partial), long count, IN(max_norm), int dtm, OUT(norm),
                             int dtn, OUT(coef)) {
  __local float scratch[TY_WG];
  __global const float *parts = (__global const float *)P(partial);
  float acc = 0.0f;
  for (long i = get_local_id(0); i < count; i += TY_WG) acc += parts[i];
  float total = ty_group_sum(acc, scratch);
  if (get_local_id(0) == 0) {
    float nrm = sqrt(total);
    float limit = ty_ld(P(max_norm), 0, dtm);
    float c = 1.0f;
    if (limit > 0.0f) {
      c = limit / (nrm + 1e-6f);
      if (c > 1.0f) c = 1.0f; /* like torch.clamp(max=1): NaN stays NaN */
    }
    ty_st(P(norm), 0, dtn, nrm);
    ((__global float *)P(coef))[0] = c;
  }
}

__kernel void ty_scale_by(IN(x), int dtx, OUT(y), int dty, long n, IN(coef)) {
  long i = get_global_id(0);
  if (i >= n) return;
  ty_st(P(y), i, dty, ty_ld(P(x), i, dtx) * ((__global const float *)P(coef))[0]);
}
