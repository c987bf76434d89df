/* layernorm and rmsnorm, forward and backward.
 *
 *   layernorm: mu = mean(x), var = mean((x - mu)^2), rstd = 1/sqrt(var + eps),
 *              y = (x - mu) rstd gamma + beta
 *   rmsnorm:   rstd = 1/sqrt(mean(x^2) + eps), y = x rstd gamma
 *   backward, with xhat = (x - mu) rstd (rmsnorm: x rstd), g = dy gamma:
 *     layernorm dx = rstd (g - mean(g) - xhat mean(g xhat))
 *     rmsnorm   dx = rstd (g - xhat mean(g xhat))
 *     dgamma = sum_rows dy xhat, dbeta = sum_rows dy
 *
 * Row kernels use one work-group of TY_WG per row; the variance is taken in
 * a second pass over the row (E[x^2] - E[x]^2 cancels when the mean is
 * large). dgamma/dbeta use 16 x 16 work-groups: 16 columns, each summed by
 * 16 work-items over interleaved rows and then added in a fixed tree.
 * Statistics are f32. Checked at the "reduction" conform bound. */

__kernel void ty_layernorm(IN(x), int dtx, IN(g), int dtg, int has_g, IN(beta), int dtb,
                           int has_b, OUT(y), int dty, OUT(mean), int dtm, OUT(rstd), int dtr,
                           long C, float eps, int rms) {
  __local float scratch[TY_WG];
  const long row = get_group_id(0), base = row * C;
  const int lid = get_local_id(0);
  __global const uchar *px = P(x);
  float mu = 0.0f;
  if (!rms) {
    float s = 0.0f;
    for (long c = lid; c < C; c += TY_WG) s += ty_ld(px, base + c, dtx);
    mu = ty_group_sum(s, scratch) / (float)C;
  }
  float s2 = 0.0f;
  for (long c = lid; c < C; c += TY_WG) {
    float d = ty_ld(px, base + c, dtx) - mu;
    s2 += d * d;
  }
  float r = 1.0f / sqrt(ty_group_sum(s2, scratch) / (float)C + eps);
  for (long c = lid; c < C; c += TY_WG) {
    float v = (ty_ld(px, base + c, dtx) - mu) * r;
    if (has_g) v *= ty_ld(P(g), c, dtg);
    if (has_b) v += ty_ld(P(beta), c, dtb);
    ty_st(P(y), base + c, dty, v);
  }
  if (lid == 0) {
    if (!rms) ty_st(P(mean), row, dtm, mu);
    ty_st(P(rstd), row, dtr, r);
  }
}

/* dx of either norm (rms: no mean, no mean(g) term). */
__kernel void ty_norm_bwd_dx(IN(dy), int dtdy, IN(x), int dtx, IN(g), int dtg, int has_g,
                             IN(mean), int dtm, IN(rstd), int dtr, OUT(dx), int dtdx, long C,
                             int rms) {
  __local float scratch[TY_WG];
  const long row = get_group_id(0), base = row * C;
  const int lid = get_local_id(0);
  const float mu = rms ? 0.0f : ty_ld(P(mean), row, dtm);
  const float r = ty_ld(P(rstd), row, dtr);
  float sg = 0.0f, sgx = 0.0f;
  for (long c = lid; c < C; c += TY_WG) {
    float xhat = (ty_ld(P(x), base + c, dtx) - mu) * r;
    float gv = ty_ld(P(dy), base + c, dtdy) * (has_g ? ty_ld(P(g), c, dtg) : 1.0f);
    sg += gv;
    sgx += gv * xhat;
  }
  const float mean_g = rms ? 0.0f : ty_group_sum(sg, scratch) / (float)C;
  const float mean_gx = ty_group_sum(sgx, scratch) / (float)C;
  for (long c = lid; c < C; c += TY_WG) {
    float xhat = (ty_ld(P(x), base + c, dtx) - mu) * r;
    float gv = ty_ld(P(dy), base + c, dtdy) * (has_g ? ty_ld(P(g), c, dtg) : 1.0f);
    ty_st(P(dx), base + c, dtdx, r * (gv - mean_g - xhat * mean_gx));
  }
}

/* dgamma[c] = sum_r dy xhat, dbeta[c] = sum_r dy (when has_dbeta). Local
 * size (16, 16): get_local_id(0) picks the column, get_local_id(1) the
 * row lane. */
__kernel __attribute__((reqd_work_group_size(16, 16, 1))) void ty_norm_bwd_params(
    IN(dy), int dtdy, IN(x), int dtx, IN(mean), int dtm, IN(rstd), int dtr, OUT(dgamma),
    int dtdg, OUT(dbeta), int dtdb, int has_dbeta, long rows, long C, int rms) {
  __local float sg[16][17];
  __local float sb[16][17];
  const int cx = get_local_id(0), ry = get_local_id(1);
  const long c = get_global_id(0);
  float accg = 0.0f, accb = 0.0f;
  if (c < C) {
    for (long r = ry; r < rows; r += 16) {
      float mu = rms ? 0.0f : ty_ld(P(mean), r, dtm);
      float xhat = (ty_ld(P(x), r * C + c, dtx) - mu) * ty_ld(P(rstd), r, dtr);
      float d = ty_ld(P(dy), r * C + c, dtdy);
      accg += d * xhat;
      accb += d;
    }
  }
  sg[ry][cx] = accg;
  sb[ry][cx] = accb;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 8; s > 0; s >>= 1) {
    if (ry < s) {
      sg[ry][cx] += sg[ry + s][cx];
      sb[ry][cx] += sb[ry + s][cx];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (ry == 0 && c < C) {
    ty_st(P(dgamma), c, dtdg, sg[0][cx]);
    if (has_dbeta) ty_st(P(dbeta), c, dtdb, sb[0][cx]);
  }
}
