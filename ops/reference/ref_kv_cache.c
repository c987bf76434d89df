/* Reference KV-cache write (see ref_kv_cache.h):
 *   cache[b, position + t, h, d] = values[b, t, h, d]
 * Not differentiable as an op: training never writes a cache.
 */
#include "ops/reference/ref_kv_cache.h"

#include <string.h>

ty_status_t ty_ref_kv_cache_write(double *cache, int64_t batch,
                                  int64_t max_len, int64_t heads,
                                  int64_t head_dim, const double *values,
                                  int64_t len, int64_t position) {
  if (batch < 0 || max_len < 0 || heads < 0 || head_dim < 0 || len < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv_cache_write: negative size (batch=%lld, "
                          "max_len=%lld, heads=%lld, head_dim=%lld, len=%lld)",
                          (long long)batch, (long long)max_len,
                          (long long)heads, (long long)head_dim,
                          (long long)len);
  }
  /* Written as position > max_len - len so no sum can overflow. */
  if (position < 0 || len > max_len || position > max_len - len) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "kv_cache_write: %lld new positions starting at "
                          "position %lld do not fit in a cache of max_len "
                          "%lld (start must be in 0..max_len-len)",
                          (long long)len, (long long)position,
                          (long long)max_len);
  }
  const size_t row = (size_t)(heads * head_dim);
  for (int64_t b = 0; b < batch; ++b) {
    if (len == 0) break;
    memcpy(cache + ((size_t)(b * max_len + position)) * row,
           values + (size_t)(b * len) * row, (size_t)len * row * sizeof(double));
  }
  return TY_OK;
}
