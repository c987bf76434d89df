/* Pieces shared by the conformance kit's files: value conversion between f64
 * arrays and storage bytes, and the seeded generator. Internal to graph/. */
#ifndef TY_GRAPH_CONFORM_INTERNAL_H_
#define TY_GRAPH_CONFORM_INTERNAL_H_

#include <stdint.h>

#include "graph/conform.h"

/* Dense storage of `count` values of `dtype` from f64 (rounding to nearest
 * even for floats; ints are converted exactly within their range). */
void ty_conform_pack(ty_dtype_t dtype, const double *values, int64_t count, void *out);
/* The reverse: storage bytes widened to f64. */
void ty_conform_unpack(ty_dtype_t dtype, const void *data, int64_t count, double *out);

/* splitmix64 */
static inline uint64_t ty_conform_mix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double ty_conform_uniform(uint64_t *state) {
  return (double)(ty_conform_mix(state) >> 11) * 0x1.0p-53;
}

uint64_t ty_conform_hash_string(uint64_t h, const char *s);

#endif /* TY_GRAPH_CONFORM_INTERNAL_H_ */
