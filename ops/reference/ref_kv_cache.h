/* Reference KV-cache write: copies new keys or values into a preallocated
 * cache at a position. Part of ty_ops_reference (f64, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint cache regions.
 * Errors: INVALID_ARGUMENT when the write would not fit (position < 0 or
 * position + len > max_len), naming the numbers, or for negative sizes;
 * the cache is untouched on error.
 */
#ifndef TY_OPS_REFERENCE_REF_KV_CACHE_H_
#define TY_OPS_REFERENCE_REF_KV_CACHE_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cache [batch, max_len, heads, head_dim], values [batch, len, heads,
 * head_dim]: cache[:, position : position + len] = values. Every batch row
 * writes at the same position. values must not overlap cache. */
ty_status_t ty_ref_kv_cache_write(double *cache, int64_t batch,
                                  int64_t max_len, int64_t heads,
                                  int64_t head_dim, const double *values,
                                  int64_t len, int64_t position);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_KV_CACHE_H_ */
