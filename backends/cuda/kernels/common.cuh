/* Helpers every CUDA kernel family shares (included by every kernels/<family>.cu).
 *
 * Storage and compute: a tensor operand is a device pointer plus its storage
 * dtype code (the values of ty_dtype_t); arithmetic is f32 (f64 data is only
 * moved or cast). bf16 and f16 conversions round to nearest even exactly as
 * hal/half.h does, so results agree bit for bit with the reference where the
 * math is exact. Kernels on the hot paths of training specialise on the
 * dtype with templates; the generic ty_ld/ty_st below keep every other op
 * dtype-agnostic at the cost of a uniform branch per element.
 *
 * Kernels are `extern "C"` so the host finds them by name in the module
 * (cuModuleGetFunction). Arguments are plain: pointers, 32/64-bit integers,
 * floats, and the by-value structs below; the host packs them with the same
 * alignment rules (cuda_exec.h).
 *
 * Data errors (an id out of range, a KV position past the cache) are
 * reported through a small error buffer: the first failing thread wins an
 * atomic compare-and-swap and records its node and three details, which the
 * host reads after the run: backends/common/device_errors.h lists the codes
 * for C, CUDA and OpenCL C alike, and ty_dev_data_error decodes them. */
#ifndef TY_CUDA_KERNELS_COMMON_CUH_
#define TY_CUDA_KERNELS_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "trainyard/device_errors.h"
#include "trainyard/philox.h"

/* Values of ty_dtype_t (hal/backend_abi.h). */
#define TY_F32 1
#define TY_BF16 2
#define TY_F16 3
#define TY_F64 4
#define TY_I32 5
#define TY_I64 6
#define TY_U8 7


#define ERR_ARGS int *err, int node

/* ---- programmatic dependent launch (sm_90+): cuda_execute.c may launch a
 * kernel that follows another kernel with the programmatic-serialization
 * attribute (TRAINYARD_CUDA_PDL), so it starts while the one before it
 * still runs. EVERY kernel's first statement is therefore ty_pdl_enter():
 * griddepcontrol.wait returns once the grids it depends on have finished
 * and their writes are visible (at once for a plain launch), and only then
 * griddepcontrol.launch_dependents lets the next kernel launch and wait in
 * turn. Nothing is read or written before the wait, so a kernel sees what
 * a stream-ordered launch shows it; tests/cuda/pdl_lint.py checks that
 * every kernel starts this way. ---- */
__device__ __forceinline__ void ty_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(TY_CU_EMULATE)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* Up to 8 dims (shapes, strides) travel by value. */
struct ty_dims8 {
  long long d[8];
};

__device__ inline void ty_fail(int *err, int node, int code, long long a, long long b,
                               long long c) {
  if (atomicCAS(err, 0, code) == 0) {
    err[1] = node;
    long long *detail = (long long *)(err + 2);
    detail[0] = a;
    detail[1] = b;
    detail[2] = c;
  }
}

/* ---- conversions (hal/half.h, bit for bit) ---- */

__device__ inline float ty_bf16_to_f32(uint16_t h) {
  return __uint_as_float((uint32_t)h << 16);
}

__device__ inline uint16_t ty_f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* RNE; a carry bumps the exponent (to inf) */
  return (uint16_t)(u >> 16);
}

__device__ inline float ty_f16_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

__device__ inline uint16_t ty_f32_to_f16(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

/* Element i of a tensor in storage dtype dt, as f32 (f64 rounds to
 * nearest even, as a cast does). */
__device__ inline float ty_ld(const void *p, long long i, int dt) {
  switch (dt) {
    case TY_BF16: return ty_bf16_to_f32(((const uint16_t *)p)[i]);
    case TY_F16: return ty_f16_to_f32(((const uint16_t *)p)[i]);
    case TY_F64: return __double2float_rn(((const double *)p)[i]);
    case TY_I32: return (float)((const int32_t *)p)[i];
    case TY_I64: return (float)((const long long *)p)[i];
    default: return ((const float *)p)[i];
  }
}

__device__ inline void ty_st(void *p, long long i, int dt, float v) {
  switch (dt) {
    case TY_BF16: ((uint16_t *)p)[i] = ty_f32_to_bf16(v); break;
    case TY_F16: ((uint16_t *)p)[i] = ty_f32_to_f16(v); break;
    case TY_F64: ((double *)p)[i] = (double)v; break;
    default: ((float *)p)[i] = v; break;
  }
}

/* An integer operand (ids, targets, positions, steps): i32 or i64. */
__device__ inline long long ty_ldi(const void *p, long long i, int dt) {
  return dt == TY_I32 ? (long long)((const int32_t *)p)[i] : ((const long long *)p)[i];
}

/* Typed loads and stores for templated kernels: T is float, __nv_bfloat16
 * or __half; arithmetic in f32. */
template <typename T> __device__ inline float ty_to_f(T v);
template <> __device__ inline float ty_to_f<float>(float v) { return v; }
template <> __device__ inline float ty_to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <> __device__ inline float ty_to_f<__half>(__half v) { return __half2float(v); }
template <typename T> __device__ inline T ty_from_f(float v);
template <> __device__ inline float ty_from_f<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 ty_from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ inline __half ty_from_f<__half>(float v) { return __float2half_rn(v); }

/* ---- block reductions: every thread of the block must call them; the
 * block size is a multiple of 32 up to 1024. Warp shuffles, then one warp
 * over the per-warp partials, in a fixed order: deterministic. `scratch`
 * holds 32 floats of shared memory. ---- */

__device__ inline float ty_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float ty_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ inline float ty_block_sum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = ty_warp_sum(v);
  __syncthreads(); /* scratch may still be read by a previous reduction */
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.0f;
  return ty_warp_sum(r);
}

__device__ inline float ty_block_max(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = ty_warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  return ty_warp_max(r);
}

/* Offsets (in elements) of linear index i of a row-major shape `dims` of
 * `rank` under two stride vectors. */
__device__ inline void ty_offsets2(long long i, int rank, const ty_dims8 &dims,
                                   const ty_dims8 &sa, const ty_dims8 &sb, long long *oa,
                                   long long *ob) {
  long long a = 0, b = 0;
  for (int d = rank - 1; d >= 0; --d) {
    long long idx = i % dims.d[d];
    i /= dims.d[d];
    a += idx * sa.d[d];
    b += idx * sb.d[d];
  }
  *oa = a;
  *ob = b;
}

/* Grid-stride loop over n items. */
#define TY_FOR_EACH(i, n)                                                          \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);     \
       i += (long long)gridDim.x * blockDim.x)

#endif /* TY_CUDA_KERNELS_COMMON_CUH_ */
