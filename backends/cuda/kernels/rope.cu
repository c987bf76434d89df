/* Rotary position embedding (rotate-half pairing), forward and backward:
 * one thread per rotated pair, the angle formed in double-float from a
 * host-made f64 frequency table so positions in the thousands keep their
 * precision. */
#include "vec.cuh"

/*   a = pos[t] inv_freq[j];  for j < D/2:
 *   y[j]       = x[j] cos a - x[j+D/2] sin a
 *   y[j+D/2]   = x[j+D/2] cos a + x[j] sin a      (backward: angle -a)
 *
 * freq holds (hi, lo) f32 pairs with hi + lo = inv_freq (computed in f64 by
 * the host exactly as the reference, llama3 scaling included). The angle is
 * pos * hi exactly (an fma recovers the product's rounding error) plus
 * pos * lo, so a position of thousands times a frequency near 1 keeps
 * ~1e-11 rad instead of the ~2e-4 rad an f32 product loses; cos/sin of the
 * rounded angle are then corrected to first order by the remainder, as the
 * opencl backend does. Positions must be below 2^24 (exact in f32). x is
 * [B, T, H, D]; pos is [T], i32 or i64. Checked at the "rope" conform
 * bound. */
/* One pair i of x's `pairs` (x [B, T, H, D]). */
template <typename T>
__device__ __forceinline__ void ty_rope_pair(const T *x, T *y, const void *pos, int dtpos,
                                             const float *freq, long long T_, long long H,
                                             long long D, float sign, long long i) {
  const long long hd = D / 2;
  const long long vec = ty_div(i, hd), j = i - vec * hd; /* vec = (b T + t) H + h */
  const long long t = ty_mod(ty_div(vec, H), T_);
  const float p = (float)ty_ldi(pos, t, dtpos);
  const float hi = freq[2 * j], lo = freq[2 * j + 1];
  const float a_hi = __fmul_rn(p, hi); /* rounded on its own: no fma contraction */
  const float a_lo = fmaf(p, hi, -a_hi) + p * lo;
  float s0, c0;
  sincosf(a_hi, &s0, &c0);
  const float co = c0 - s0 * a_lo;
  const float si = sign * (s0 + c0 * a_lo);
  const long long base = vec * D;
  const float x0 = ty_get(x, base + j), x1 = ty_get(x, base + j + hd);
  ty_put(y, base + j, x0 * co - x1 * si);
  ty_put(y, base + j + hd, x1 * co + x0 * si);
}

/* x -> y, then (ROPE_PAIR, cuda_fuse.h: a layer's keys after its queries,
 * the same positions, frequencies and head size) x2 [B, T, H2, D] -> y2:
 * pairs + pairs2 threads, one launch for both. */
template <typename T>
__device__ __forceinline__ void ty_rope_impl(const void *x_, void *y_, const void *pos,
                                             int dtpos, const float *freq, long long T_,
                                             long long H, long long D, float sign,
                                             long long pairs, const void *x2, void *y2,
                                             long long H2, long long pairs2) {
  TY_FOR_EACH(i, pairs + pairs2) {
    if (i < pairs) {
      ty_rope_pair<T>((const T *)x_, (T *)y_, pos, dtpos, freq, T_, H, D, sign, i);
    } else {
      ty_rope_pair<T>((const T *)x2, (T *)y2, pos, dtpos, freq, T_, H2, D, sign, i - pairs);
    }
  }
}
#define TY_ROPE_PARAMS                                                                      \
  const void *x, void *y, const void *pos, int dtpos, const float *freq, long long T_,   \
      long long H, long long D, float sign, long long pairs, const void *x2, void *y2,     \
      long long H2, long long pairs2
#define TY_ROPE_ARGS x, y, pos, dtpos, freq, T_, H, D, sign, pairs, x2, y2, H2, pairs2
TY_KERNEL3(ty_rope, TY_ROPE_PARAMS, TY_ROPE_ARGS)
