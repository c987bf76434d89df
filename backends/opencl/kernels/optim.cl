/* Optimizer updates (PyTorch semantics; ops/reference/ref_optim.c).
 *
 *   adamw: p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
 *          p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *   sgd:   d = g + wd p;  buf <- mu buf + d (when mu != 0)
 *          p <- p - lr (nesterov ? d + mu buf : (mu != 0 ? buf : d))
 *
 * Outputs may share storage with the state they replace (in-place updates
 * from the memory plan): each work-item reads its element before writing
 * it. The hyperparameters are device scalars (inputs, so changing them per
 * step never recompiles); AdamW's bias corrections are formed once per step
 * by ty_adamw_prep, in f64 when the device has it. Per-element math is f32
 * ("elementwise" conform bound). */

/* hp = {lr, b1, b2, eps, 1 - lr wd, 1 - b1^t, 1 - b2^t} */
__kernel void ty_adamw_prep(IN(lr), int dtlr, IN(b1), int dtb1, IN(b2), int dtb2, IN(eps),
                            int dteps, IN(wd), int dtwd, IN(step), int dtstep, OUT(hp),
                            ERR_ARGS) {
  if (get_global_id(0) != 0) return;
  __global float *o = (__global float *)P(hp);
  const long t = ty_ldi(P(step), 0, dtstep);
  if (t < 1) ty_fail(err, node, TY_ERR_ADAMW_STEP, t, 0, 0);
  const float l = ty_ld(P(lr), 0, dtlr), beta1 = ty_ld(P(b1), 0, dtb1);
  const float beta2 = ty_ld(P(b2), 0, dtb2), w = ty_ld(P(wd), 0, dtwd);
  o[0] = l;
  o[1] = beta1;
  o[2] = beta2;
  o[3] = ty_ld(P(eps), 0, dteps);
#ifdef TY_FP64
  o[4] = (float)(1.0 - (double)l * (double)w);
  o[5] = (float)(1.0 - pow((double)beta1, (double)t));
  o[6] = (float)(1.0 - pow((double)beta2, (double)t));
#else
  o[4] = 1.0f - l * w;
  o[5] = 1.0f - pow(beta1, (float)t);
  o[6] = 1.0f - pow(beta2, (float)t);
#endif
}

__kernel void ty_adamw(IN(p), int dtp, IN(g), int dtg, IN(m), int dtm, IN(v), int dtv,
                       OUT(po), int dtpo, OUT(mo), int dtmo, OUT(vo), int dtvo, long n,
                       IN(hp)) {
  const long i = get_global_id(0);
  if (i >= n) return;
  __global const float *h = (__global const float *)P(hp);
  const float gi = ty_ld(P(g), i, dtg);
  const float mi = h[1] * ty_ld(P(m), i, dtm) + (1.0f - h[1]) * gi;
  const float vi = h[2] * ty_ld(P(v), i, dtv) + (1.0f - h[2]) * gi * gi;
  const float pi = ty_ld(P(p), i, dtp) * h[4] - h[0] * (mi / h[5]) / (sqrt(vi / h[6]) + h[3]);
  ty_st(P(mo), i, dtmo, mi);
  ty_st(P(vo), i, dtvo, vi);
  ty_st(P(po), i, dtpo, pi);
}

__kernel void ty_sgd(IN(p), int dtp, IN(g), int dtg, IN(buf), int dtbuf, OUT(po), int dtpo,
                     OUT(bo), int dtbo, long n, IN(lr), int dtlr, IN(mu), int dtmu, IN(wd),
                     int dtwd, int nesterov, ERR_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const float l = ty_ld(P(lr), 0, dtlr), m = ty_ld(P(mu), 0, dtmu), w = ty_ld(P(wd), 0, dtwd);
  if (nesterov && !(m > 0.0f)) {
    if (i == 0) ty_fail(err, node, TY_ERR_SGD_NESTEROV, (long)as_uint(m), 0, 0);
    return;
  }
  const float pi = ty_ld(P(p), i, dtp);
  float d = ty_ld(P(g), i, dtg) + w * pi;
  float b = ty_ld(P(buf), i, dtbuf);
  if (m != 0.0f) {
    b = m * b + d;
    d = nesterov ? d + m * b : b;
  }
  ty_st(P(bo), i, dtbo, b);
  ty_st(P(po), i, dtpo, pi - l * d);
}
