/* Helpers the kernel families share (see cpu_kernels.h): storage
 * conversion, whole-tensor f32 views, thread counts, errors. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

void cpu_load_f32(const void *src, ty_dtype_t dt, int64_t off, int64_t n, float *dst) {
  switch (dt) {
    case TY_DTYPE_BF16: {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = ty_bf16_to_f32(s[i]);
      break;
    }
    case TY_DTYPE_F16: {
      const uint16_t *s = (const uint16_t *)src + off;
      for (int64_t i = 0; i < n; ++i) dst[i] = ty_f16_to_f32(s[i]);
      break;
    }
    default:
      if (n > 0) memcpy(dst, (const float *)src + off, (size_t)n * sizeof(float));
      break;
  }
}

void cpu_store_f32(void *dst, ty_dtype_t dt, int64_t off, int64_t n, const float *src) {
  switch (dt) {
    case TY_DTYPE_BF16: {
      uint16_t *d = (uint16_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = ty_f32_to_bf16(src[i]);
      break;
    }
    case TY_DTYPE_F16: {
      uint16_t *d = (uint16_t *)dst + off;
      for (int64_t i = 0; i < n; ++i) d[i] = ty_f32_to_f16(src[i]);
      break;
    }
    default:
      if (n > 0 && (float *)dst + off != src) {
        memmove((float *)dst + off, src, (size_t)n * sizeof(float));
      }
      break;
  }
}

bool cpu_f32_whole(const void *src, ty_dtype_t dt, int64_t n, int threads,
                   const float **out, float **owned) {
  *owned = NULL;
  if (dt == TY_DTYPE_F32) {
    *out = src;
    return true;
  }
  float *buf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!buf) return false;
  int64_t chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
  int nt = threads > 1 && chunks > 8 ? threads : 1;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int64_t off = ch * CPU_CHUNK;
    int64_t len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    cpu_load_f32(src, dt, off, len, buf + off);
  }
  *out = buf;
  *owned = buf;
  return true;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
int cpu_isa_level(void) {
  __builtin_cpu_init(); /* idempotent; we may run before libgcc's constructor */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2")) {
    return 4;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2")) {
    return 3;
  }
  return 1;
}
#endif

int cpu_threads(const cpu_node_ctx_t *c, int64_t work, int64_t grain) {
  int64_t max = c->threads > 0 ? (int64_t)c->threads : 1;
  if (grain < 1) grain = 1;
  int64_t want = work / grain;
  if (want < 1) want = 1;
  return (int)(want < max ? want : max);
}

ty_abi_status_t cpu_oom(const cpu_node_ctx_t *c) {
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                         "cpu: out of memory for scratch of " CPU_NODE_FMT,
                         CPU_NODE_ARGS(c));
}
