/* Rotary position embedding (rotate-half pairing), forward and backward.
 *
 *   a = pos[t] inv_freq[j];  for j < D/2:
 *   y[j]       = x[j] cos a - x[j+D/2] sin a
 *   y[j+D/2]   = x[j+D/2] cos a + x[j] sin a      (backward: angle -a)
 *
 * inv_freq comes from the host, computed in f64 exactly as the reference
 * does (llama3 scaling included) and split into f32 hi + lo parts. The
 * angle is formed in double-float: pos * hi exactly (an fma recovers the
 * product's rounding error) plus pos * lo, so a position of thousands times
 * a frequency near 1 keeps ~1e-11 rad instead of the ~2e-4 rad an f32
 * product would lose; cos/sin of the rounded angle are then corrected to
 * first order by the remainder. Positions must be below 2^24 (exact in
 * f32). The rotation itself is f32. Checked at the "rope" conform bound. */

__kernel void ty_rope(IN(x), int dtx, OUT(y), int dty, IN(pos), int dtpos, IN(freq), long T,
                      long H, long D, float sign, long pairs) {
  const long i = get_global_id(0);
  if (i >= pairs) return;
  const long hd = D / 2;
  const long j = i % hd, vec = i / hd; /* vec = (b * T + t) * H + h */
  const long t = (vec / H) % T;
  __global const float *f = (__global const float *)P(freq);
  const float p = (float)ty_ldi(P(pos), t, dtpos);
  const float hi = f[2 * j], lo = f[2 * j + 1];
  const float a_hi = p * hi;
  const float a_lo = fma(p, hi, -a_hi) + p * lo;
  const float c0 = cos(a_hi), s0 = sin(a_hi);
  const float co = c0 - s0 * a_lo;
  const float si = sign * (s0 + c0 * a_lo);
  const long base = vec * D;
  const float x0 = ty_ld(P(x), base + j, dtx), x1 = ty_ld(P(x), base + j + hd, dtx);
  ty_st(P(y), base + j, dty, x0 * co - x1 * si);
  ty_st(P(y), base + j + hd, dty, x1 * co + x0 * si);
}
