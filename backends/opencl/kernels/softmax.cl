/* softmax over the last axis and per-token cross-entropy, forward and
 * backward. One work-group of TY_WG per row.
 *
 *   softmax:  y = exp(x - max) / sum exp(x - max);  dx = y (dy - sum(dy y))
 *   xent:     loss = logsumexp(z) - z[t]  (t < 0: ignored, loss 0)
 *             dz = dloss (softmax(z) - onehot(t))  (t < 0: 0)
 * A target >= V is a data error (reported, as the reference does).
 * Checked at the "reduction" conform bound. */

__kernel void ty_softmax(IN(x), int dtx, OUT(y), int dty, long C) {
  __local float scratch[TY_WG];
  const long base = get_group_id(0) * C;
  const int lid = get_local_id(0);
  float m = -INFINITY;
  for (long c = lid; c < C; c += TY_WG) m = fmax(m, ty_ld(P(x), base + c, dtx));
  m = ty_group_max(m, scratch);
  float s = 0.0f;
  for (long c = lid; c < C; c += TY_WG) s += exp(ty_ld(P(x), base + c, dtx) - m);
  const float inv = 1.0f / ty_group_sum(s, scratch);
  for (long c = lid; c < C; c += TY_WG) {
    ty_st(P(y), base + c, dty, exp(ty_ld(P(x), base + c, dtx) - m) * inv);
  }
}

__kernel void ty_softmax_bwd(IN(dy), int dtdy, IN(y), int dty, OUT(dx), int dtdx, long C) {
  __local float scratch[TY_WG];
  const long base = get_group_id(0) * C;
  const int lid = get_local_id(0);
  float s = 0.0f;
  for (long c = lid; c < C; c += TY_WG) {
    s += ty_ld(P(dy), base + c, dtdy) * ty_ld(P(y), base + c, dty);
  }
  const float dot = ty_group_sum(s, scratch);
  for (long c = lid; c < C; c += TY_WG) {
    float yv = ty_ld(P(y), base + c, dty);
    ty_st(P(dx), base + c, dtdx, yv * (ty_ld(P(dy), base + c, dtdy) - dot));
  }
}

/* logsumexp of row `base` (every work-item gets it). */
float ty_row_lse(__global const uchar *z, int dtz, long base, long V, __local float *scratch) {
  const int lid = get_local_id(0);
  float m = -INFINITY;
  for (long v = lid; v < V; v += TY_WG) m = fmax(m, ty_ld(z, base + v, dtz));
  m = ty_group_max(m, scratch);
  float s = 0.0f;
  for (long v = lid; v < V; v += TY_WG) s += exp(ty_ld(z, base + v, dtz) - m);
  return m + log(ty_group_sum(s, scratch));
}

__kernel void ty_xent(IN(logits), int dtz, IN(targets), int dtt, OUT(loss), int dtl, long V,
                      ERR_ARGS) {
  __local float scratch[TY_WG];
  const long row = get_group_id(0), base = row * V;
  const long t = ty_ldi(P(targets), row, dtt);
  if (t >= V) {
    if (get_local_id(0) == 0) {
      ty_fail(err, node, TY_ERR_TARGET, row, t, V);
      ty_st(P(loss), row, dtl, 0.0f);
    }
    return;
  }
  if (t < 0) {
    if (get_local_id(0) == 0) ty_st(P(loss), row, dtl, 0.0f);
    return;
  }
  const float lse = ty_row_lse(P(logits), dtz, base, V, scratch);
  if (get_local_id(0) == 0) ty_st(P(loss), row, dtl, lse - ty_ld(P(logits), base + t, dtz));
}

__kernel void ty_xent_bwd(IN(dloss), int dtdl, IN(logits), int dtz, IN(targets), int dtt,
                          OUT(dz), int dtdz, long V, ERR_ARGS) {
  __local float scratch[TY_WG];
  const long row = get_group_id(0), base = row * V;
  const int lid = get_local_id(0);
  const long t = ty_ldi(P(targets), row, dtt);
  if (t < 0 || t >= V) {
    if (t >= V && lid == 0) ty_fail(err, node, TY_ERR_TARGET, row, t, V);
    for (long v = lid; v < V; v += TY_WG) ty_st(P(dz), base + v, dtdz, 0.0f);
    return;
  }
  const float lse = ty_row_lse(P(logits), dtz, base, V, scratch);
  const float d = ty_ld(P(dloss), row, dtdl);
  for (long v = lid; v < V; v += TY_WG) {
    float p = exp(ty_ld(P(logits), base + v, dtz) - lse);
    ty_st(P(dz), base + v, dtdz, d * (p - (v == t ? 1.0f : 0.0f)));
  }
}
