/* KV-cache write: cache'[:, pos:pos+T] = new, the rest of cache' = cache.
 *
 *   cache [B, Smax, H, D], new [B, T, H, D] (same dtype), pos [] i64
 *
 * pos outside [0, Smax - T] is INVALID_ARGUMENT naming the node, found before
 * anything is written. The output is normally the cache's own storage (the
 * executor's in-place state update), and then only the T new rows of each
 * batch are copied; otherwise the cache is copied first. Bytes are moved, so
 * any dtype works and the result is exact (checked bit for bit). */
#include <string.h>

#include "cpu_kernels.h"

ty_abi_status_t cpu_kernel_kv_cache_write(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *cache = cpu_in(c, 0), *fresh = cpu_in(c, 1);
  const unsigned char *pc = cpu_in_data(c, 0), *pn = cpu_in_data(c, 1);
  unsigned char *po = cpu_out_data(c, 0);
  const int64_t pos = *(const int64_t *)cpu_in_data(c, 2);
  const int64_t batch = cache->dims[0], max_len = cache->dims[1], len = fresh->dims[1];
  if (pos < 0 || len > max_len || pos > max_len - len) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: " CPU_NODE_FMT ": %lld new positions starting at "
                           "position %lld do not fit in a cache of max_len %lld (start "
                           "must be in 0..max_len-len)",
                           CPU_NODE_ARGS(c), (long long)len, (long long)pos,
                           (long long)max_len);
  }
  const size_t es = ty_desc_dtype_size(cache->dtype);
  const size_t row = (size_t)(cache->dims[2] * cache->dims[3]) * es;
  const int nt = cpu_threads(c, batch * max_len * (int64_t)row, (int64_t)1 << 20);
  if (po != pc) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      /* Only the rows the new values do not overwrite. */
      size_t before = (size_t)pos * row, after = (size_t)(max_len - pos - len) * row;
      size_t base = (size_t)(b * max_len) * row;
      if (before) memcpy(po + base, pc + base, before);
      if (after) {
        size_t tail = base + (size_t)(pos + len) * row;
        memcpy(po + tail, pc + tail, after);
      }
    }
  }
  if (len == 0 || row == 0) return NULL;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    memcpy(po + (size_t)(b * max_len + pos) * row, pn + (size_t)(b * len) * row,
           (size_t)len * row);
  }
  return NULL;
}
