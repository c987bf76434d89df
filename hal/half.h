/* Half-precision conversions shared by every layer: f32 <-> bf16 and
 * f32 <-> f16 (IEEE binary16), bit-exact and identical on every backend.
 * Header-only so plugins may include it without linking the core.
 *
 * Storage: bf16 and f16 values are held as uint16_t bit patterns.
 * Rounding: f32 -> bf16/f16 round to nearest, ties to even (RNE), whatever
 *   the host's floating-point rounding mode; values beyond the largest finite
 *   half round to infinity exactly as RNE dictates (the cut-over is the midpoint
 *   between the largest finite value and the next power of two).
 *   f16 subnormals are produced and read exactly.
 * NaN: a NaN stays a NaN of the same sign. Narrowing keeps the top payload bits
 *   and sets the quiet bit (so a NaN whose payload lives only in dropped bits
 *   cannot turn into infinity); widening copies the payload unchanged.
 * f64: ty_f64_to_bf16 / ty_f64_to_f16 first round to f32 and then to the half
 *   format. This double rounding is deliberate: it is what PyTorch does
 *   (c10::BFloat16 / c10::Half are constructed from float), so a reference
 *   check against PyTorch sees the same bits.
 * Threading: pure functions, safe from any thread. No errors are possible.
 */
#ifndef TY_HAL_HALF_H_
#define TY_HAL_HALF_H_

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline uint32_t ty_half_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float ty_half_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* ---- bf16: the top 16 bits of an f32 ----------------------------------- */

static inline float ty_bf16_to_f32(uint16_t h) {
  return ty_half_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t ty_f32_to_bf16(float f) {
  uint32_t u = ty_half_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    /* NaN: truncate, then force the quiet bit so the payload cannot vanish. */
    return (uint16_t)((u >> 16) | 0x0040u);
  }
  /* RNE on the 16 dropped bits: add 0x7fff plus the lowest kept bit, so an
   * exact tie carries only when the kept part is odd. A carry out of the
   * mantissa bumps the exponent, which is also how overflow reaches inf. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* ---- f16: IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits) ---------- */

static inline float ty_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (man << 13); /* inf, or NaN with its payload */
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13); /* rebias 15 -> 127 */
  } else if (man == 0) {
    u = sign; /* signed zero */
  } else {
    /* Subnormal man * 2^-24: normalise so the leading 1 becomes implicit. */
    uint32_t e = 113u; /* the f32 exponent field of 2^-14 */
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --e;
    }
    u = sign | (e << 23) | ((man & 0x3ffu) << 13);
  }
  return ty_half_f32_from_bits(u);
}

static inline uint16_t ty_f32_to_f16(float f) {
  uint32_t u = ty_half_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* quiet NaN */
  }
  if (a >= 0x477ff000u) {
    /* >= 65520 = midpoint of 65504 (max, odd mantissa) and 2^16: RNE goes up
     * to infinity. Also covers f32 infinity. */
    return (uint16_t)(sign | 0x7c00u);
  }
  if (a >= 0x38800000u) {
    /* Normal in f16 (>= 2^-14): rebias the exponent (127 -> 15, i.e. minus
     * 112 << 23) and round the 13 dropped bits to nearest even; a mantissa
     * carry correctly bumps the exponent. */
    uint32_t r = a - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a <= 0x33000000u) {
    /* <= 2^-25, half the smallest subnormal: rounds to zero (a tie goes to
     * the even neighbour, zero). */
    return sign;
  }
  /* Subnormal result: the f16 integer is a / 2^-24 = m * 2^(e - 126) with
   * m the 24-bit significand; e < 113 here so the shift is 14..24. */
  uint32_t e = a >> 23;
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - e;
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q; /* may reach 0x400: min normal */
  return (uint16_t)(sign | q);
}

/* ---- f64 sources: through f32, as PyTorch does (see the file comment) --- */

static inline uint16_t ty_f64_to_bf16(double d) { return ty_f32_to_bf16((float)d); }
static inline uint16_t ty_f64_to_f16(double d) { return ty_f32_to_f16((float)d); }
static inline double ty_bf16_to_f64(uint16_t h) { return (double)ty_bf16_to_f32(h); }
static inline double ty_f16_to_f64(uint16_t h) { return (double)ty_f16_to_f32(h); }

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_HALF_H_ */
