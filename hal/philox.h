/* Counter-based random numbers that every backend reproduces bit for bit:
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC11; the Random123 library) and the element stream dropout draws from.
 * Header-only so plugins and device-kernel generators can share it.
 *
 * The element stream (the contract every backend implements exactly):
 *   For the element with flat row-major index i of a tensor, under a
 *   (seed, offset) pair of uint64:
 *     g    = i / 4,  lane = i % 4
 *     ctr  = { lo32(g), hi32(g), lo32(offset), hi32(offset) }
 *     key  = { lo32(seed), hi32(seed) }
 *     r    = philox4x32_10(ctr, key)[lane]
 *     u24  = r >> 8                      (uniform on [0, 2^24))
 *   Dropout with probability p keeps element i iff u24 >= threshold, where
 *     threshold = ty_dropout_threshold(p) = (uint32_t)floor(p * 2^24)
 *   computed in double. Keep probability is (2^24 - threshold) / 2^24, i.e.
 *   1 - p up to 2^-24. Only integers decide the mask, so no backend can
 *   disagree through floating-point rounding. One Philox call serves four
 *   consecutive elements, which is how a vectorised kernel will draw them.
 *   Callers advance `offset` (e.g. per step and per dropout site) to get
 *   independent masks from one seed.
 *
 * Threading: pure functions, safe from any thread. No errors are possible.
 */
#ifndef TY_HAL_PHILOX_H_
#define TY_HAL_PHILOX_H_

#include <stdint.h>

/* nvcc compiles these for the device too (the cuda backend's kernels). */
#ifdef __CUDACC__
#define TY_PHILOX_FN static inline __host__ __device__
#else
#define TY_PHILOX_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define TY_PHILOX_M0 0xD2511F53u
#define TY_PHILOX_M1 0xCD9E8D57u
#define TY_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define TY_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* One round: two 32x32->64 multiplies, the high halves xored with the other
 * words and the key, the words permuted (Random123's _philox4x32round). */
TY_PHILOX_FN void ty_philox4x32_round_(uint32_t x[4], const uint32_t k[2]) {
  uint64_t p0 = (uint64_t)TY_PHILOX_M0 * x[0];
  uint64_t p1 = (uint64_t)TY_PHILOX_M1 * x[2];
  uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
  uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
  uint32_t y0 = hi1 ^ x[1] ^ k[0];
  uint32_t y2 = hi0 ^ x[3] ^ k[1];
  x[0] = y0;
  x[1] = lo1;
  x[2] = y2;
  x[3] = lo0;
}

/* Philox4x32 with 10 rounds: the key is bumped by (W0, W1) before every
 * round after the first. `out` may alias `ctr`. */
TY_PHILOX_FN void ty_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                    uint32_t out[4]) {
  uint32_t x[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  uint32_t k[2] = {key[0], key[1]};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += TY_PHILOX_W0;
      k[1] += TY_PHILOX_W1;
    }
    ty_philox4x32_round_(x, k);
  }
  out[0] = x[0];
  out[1] = x[1];
  out[2] = x[2];
  out[3] = x[3];
}

/* The 32-bit draw for element `index` of the stream (seed, offset). */
TY_PHILOX_FN uint32_t ty_philox_u32(uint64_t seed, uint64_t offset, uint64_t index) {
  uint64_t g = index / 4u;
  uint32_t ctr[4] = {(uint32_t)g, (uint32_t)(g >> 32), (uint32_t)offset,
                     (uint32_t)(offset >> 32)};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t r[4];
  ty_philox4x32_10(ctr, key, r);
  return r[index % 4u];
}

/* The 24-bit draw (top 24 bits of the 32-bit draw) that decides dropout. */
TY_PHILOX_FN uint32_t ty_philox_u24(uint64_t seed, uint64_t offset, uint64_t index) {
  return ty_philox_u32(seed, offset, index) >> 8;
}

/* floor(p * 2^24) in double for p in [0, 1). Out-of-contract p is clamped so
 * the result stays meaningful: p <= 0 or NaN gives 0 (keep everything), p >= 1
 * gives 2^24 (keep nothing). Callers validate p before relying on this.
 * p * 2^24 is exact (a power-of-two scaling) and positive here, so the
 * truncating conversion is floor() without needing libm in device code. */
TY_PHILOX_FN uint32_t ty_dropout_threshold(double p) {
  if (!(p > 0.0)) return 0u;
  if (p >= 1.0) return 16777216u;
  return (uint32_t)(p * 16777216.0);
}

/* Whether dropout keeps element `index` for the given threshold. */
TY_PHILOX_FN int ty_dropout_keep(uint64_t seed, uint64_t offset, uint64_t index,
                                  uint32_t threshold) {
  return ty_philox_u24(seed, offset, index) >= threshold;
}

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_PHILOX_H_ */
