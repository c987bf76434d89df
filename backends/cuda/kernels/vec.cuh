/* Helpers of the dtype-templated hot kernels (elementwise, reduce, norm,
 * softmax, rope, embedding, views, optim): 4-element vector loads and stores
 * of f32 / bf16 / f16 as f32 lanes, index arithmetic in 32 bits where sizes
 * allow, the row loop that peels a row's unaligned head so any row start
 * takes vector loads, a block-wide exclusive scan, and the macro that
 * instantiates a template once per float dtype under C names. */
#ifndef TY_CUDA_KERNELS_VEC_CUH_
#define TY_CUDA_KERNELS_VEC_CUH_

#include <limits.h>
#include <string.h>

#include "common.cuh"

/* ---- instantiation: kernel NAME_f32 / NAME_bf16 / NAME_f16 calls
 * NAME_impl<T>; PARAMS and ARGS are macros holding the parameter list and
 * the forwarded names (so the list is written once). The host picks the
 * name by the operands' dtype (cuda_ops.h). ---- */
#define TY_KERNEL3(name, PARAMS, ARGS)                                              \
  extern "C" __global__ void name##_f32(PARAMS) {                                   \
    ty_pdl_enter();                                                                 \
    name##_impl<float>(ARGS);                                                       \
  }                                                                                 \
  extern "C" __global__ void name##_bf16(PARAMS) {                                  \
    ty_pdl_enter();                                                                 \
    name##_impl<__nv_bfloat16>(ARGS);                                               \
  }                                                                                 \
  extern "C" __global__ void name##_f16(PARAMS) {                                   \
    ty_pdl_enter();                                                                 \
    name##_impl<__half>(ARGS);                                                      \
  }
/* The same with an attribute (e.g. __launch_bounds__) on each kernel. Each
 * kernel enters first (ty_pdl_enter, common.cuh). */
#define TY_KERNEL3_ATTR(name, PARAMS, ARGS, ATTR)                                   \
  extern "C" __global__ void ATTR name##_f32(PARAMS) {                              \
    ty_pdl_enter();                                                                 \
    name##_impl<float>(ARGS);                                                       \
  }                                                                                 \
  extern "C" __global__ void ATTR name##_bf16(PARAMS) {                             \
    ty_pdl_enter();                                                                 \
    name##_impl<__nv_bfloat16>(ARGS);                                               \
  }                                                                                 \
  extern "C" __global__ void ATTR name##_f16(PARAMS) {                              \
    ty_pdl_enter();                                                                 \
    name##_impl<__half>(ARGS);                                                      \
  }

/* ---- vector accesses: every load or store wider than an element goes
 * through these, so the CPU emulator of tests/cuda/emu can check its
 * alignment (a misaligned vector access faults on a GPU; a CPU forgives
 * it). ---- */
#ifndef TY_CHECK_ALIGNED
#define TY_CHECK_ALIGNED(p, bytes) ((void)0)
#endif

template <typename V> __device__ inline V ty_vload(const void *p) {
  TY_CHECK_ALIGNED(p, sizeof(V));
  return *reinterpret_cast<const V *>(p);
}

template <typename V> __device__ inline void ty_vstore(void *p, V v) {
  TY_CHECK_ALIGNED(p, sizeof(V));
  *reinterpret_cast<V *>(p) = v;
}

/* ---- 4-element groups: f32 moves 16 bytes, bf16/f16 8 bytes; the group
 * must be aligned to 4 elements (ty_al4). ---- */

template <typename T> __device__ inline bool ty_al4(const void *p) {
  return ((uintptr_t)p % (4u * sizeof(T))) == 0;
}

__device__ inline void ty_bf16x2_to_f(uint32_t w, float *v) {
  v[0] = __uint_as_float(w << 16);
  v[1] = __uint_as_float(w & 0xffff0000u);
}

__device__ inline uint32_t ty_f_to_bf16x2(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* .x (a) is the low half */
  uint32_t w;
  memcpy(&w, &h, 4);
  return w;
}

__device__ inline void ty_f16x2_to_f(uint32_t w, float *v) {
  __half2 h;
  memcpy(&h, &w, 4);
  float2 f = __half22float2(h);
  v[0] = f.x;
  v[1] = f.y;
}

__device__ inline uint32_t ty_f_to_f16x2(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  uint32_t w;
  memcpy(&w, &h, 4);
  return w;
}

template <typename T> __device__ inline void ty_ld4(const T *p, float *v);
template <> __device__ inline void ty_ld4<float>(const float *p, float *v) {
  const float4 r = ty_vload<float4>(p);
  v[0] = r.x;
  v[1] = r.y;
  v[2] = r.z;
  v[3] = r.w;
}
template <> __device__ inline void ty_ld4<__nv_bfloat16>(const __nv_bfloat16 *p, float *v) {
  const uint2 r = ty_vload<uint2>(p);
  ty_bf16x2_to_f(r.x, v);
  ty_bf16x2_to_f(r.y, v + 2);
}
template <> __device__ inline void ty_ld4<__half>(const __half *p, float *v) {
  const uint2 r = ty_vload<uint2>(p);
  ty_f16x2_to_f(r.x, v);
  ty_f16x2_to_f(r.y, v + 2);
}

/* 2-element groups (aligned to 2 elements): f32 moves 8 bytes, bf16/f16 4. */
template <typename T> __device__ inline void ty_ld2(const T *p, float *v);
template <> __device__ inline void ty_ld2<float>(const float *p, float *v) {
  const float2 r = ty_vload<float2>(p);
  v[0] = r.x;
  v[1] = r.y;
}
template <> __device__ inline void ty_ld2<__nv_bfloat16>(const __nv_bfloat16 *p, float *v) {
  ty_bf16x2_to_f(ty_vload<uint32_t>(p), v);
}
template <> __device__ inline void ty_ld2<__half>(const __half *p, float *v) {
  ty_f16x2_to_f(ty_vload<uint32_t>(p), v);
}

template <typename T> __device__ inline void ty_st4(T *p, const float *v);
template <> __device__ inline void ty_st4<float>(float *p, const float *v) {
  ty_vstore(p, make_float4(v[0], v[1], v[2], v[3]));
}
template <> __device__ inline void ty_st4<__nv_bfloat16>(__nv_bfloat16 *p, const float *v) {
  ty_vstore(p, make_uint2(ty_f_to_bf16x2(v[0], v[1]), ty_f_to_bf16x2(v[2], v[3])));
}
template <> __device__ inline void ty_st4<__half>(__half *p, const float *v) {
  ty_vstore(p, make_uint2(ty_f_to_f16x2(v[0], v[1]), ty_f_to_f16x2(v[2], v[3])));
}

/* Bytes of an element of storage dtype dt. */
__device__ inline int ty_dt_size(int dt) {
  return dt == TY_F64 || dt == TY_I64 ? 8 : dt == TY_BF16 || dt == TY_F16 ? 2 : dt == TY_U8 ? 1 : 4;
}

/* The storage dtype code (TY_F32, ...) of a kernel's T. */
template <typename T> __device__ constexpr int ty_dt_code();
template <> __device__ constexpr int ty_dt_code<float>() { return TY_F32; }
template <> __device__ constexpr int ty_dt_code<__nv_bfloat16>() { return TY_BF16; }
template <> __device__ constexpr int ty_dt_code<__half>() { return TY_F16; }

/* Four elements from p + i in storage dtype dt (f32, bf16 or f16): the
 * operands of fused kernels whose dtype is not the kernel's T (a norm that
 * writes its cast's bf16 output, reads a bf16 gradient). p + i must be
 * aligned to 4 elements (ty_al4_dt). */
__device__ inline void ty_ld4_dt(const void *p, long long i, int dt, float *v) {
  if (dt == TY_BF16) {
    ty_ld4((const __nv_bfloat16 *)p + i, v);
  } else if (dt == TY_F16) {
    ty_ld4((const __half *)p + i, v);
  } else {
    ty_ld4((const float *)p + i, v);
  }
}
__device__ inline void ty_st4_dt(void *p, long long i, int dt, const float *v) {
  if (dt == TY_BF16) {
    ty_st4((__nv_bfloat16 *)p + i, v);
  } else if (dt == TY_F16) {
    ty_st4((__half *)p + i, v);
  } else {
    ty_st4((float *)p + i, v);
  }
}
__device__ inline bool ty_al4_dt(const void *p, int dt) {
  return ((uintptr_t)p & (uintptr_t)(4 * ty_dt_size(dt) - 1)) == 0;
}

/* Scalar element access of the typed kernels. */
template <typename T> __device__ inline float ty_get(const T *p, long long i) {
  return ty_to_f<T>(p[i]);
}
template <typename T> __device__ inline void ty_put(T *p, long long i, float v) {
  p[i] = ty_from_f<T>(v);
}

/* ---- index arithmetic: 64-bit division costs several times a 32-bit
 * one, so both take the 32-bit path when the operands fit. ---- */

__device__ inline long long ty_div(long long a, long long b) {
  if ((((unsigned long long)a | (unsigned long long)b) >> 32) == 0) {
    return (long long)((unsigned)a / (unsigned)b);
  }
  return a / b;
}

__device__ inline long long ty_mod(long long a, long long b) {
  if ((((unsigned long long)a | (unsigned long long)b) >> 32) == 0) {
    return (long long)((unsigned)a % (unsigned)b);
  }
  return a % b;
}

/* ty_offsets2 of common.cuh on the fast division, fully unrolled so the
 * shapes are read straight from the kernel's parameters (a loop indexing
 * them at run time makes the compiler copy them to local memory). */
__device__ inline void ty_offsets2_fast(long long i, int rank, const ty_dims8 &dims,
                                        const ty_dims8 &sa, const ty_dims8 &sb, long long *oa,
                                        long long *ob) {
  long long a = 0, b = 0;
#pragma unroll
  for (int d = 7; d >= 0; --d) {
    if (d < rank) {
      const long long q = ty_div(i, dims.d[d]);
      const long long idx = i - q * dims.d[d];
      i = q;
      a += idx * sa.d[d];
      b += idx * sb.d[d];
    }
  }
  *oa = a;
  *ob = b;
}

/* ---- rows: `head` is the number of elements before the first 4-element
 * boundary of the row (0..3), or -1 when the operands' alignments differ
 * (then every element goes the scalar way). The loop visits the head and
 * the tail with fs(i) and the aligned groups with fv(i) (elements i..i+3);
 * thread t of nt takes a fixed share, so the order of a thread's partial
 * sums depends only on the row length and its alignment. ---- */

template <typename T> __device__ inline int ty_head4(const void *p) {
  const unsigned mis = (unsigned)((uintptr_t)p % (4u * sizeof(T)));
  if (mis % sizeof(T)) return -1;
  return (int)(((4u * sizeof(T) - mis) % (4u * sizeof(T))) / sizeof(T));
}

/* The common head of several row pointers, -1 when they disagree (a NULL
 * pointer, an absent operand, agrees with anything). */
template <typename T> __device__ inline int ty_head4_of(const void *a, const void *b,
                                                        const void *c = nullptr,
                                                        const void *d = nullptr) {
  const int h = ty_head4<T>(a);
  const void *others[3] = {b, c, d};
  for (int k = 0; k < 3; ++k) {
    if (others[k] && ty_head4<T>(others[k]) != h) return -1;
  }
  return h;
}

/* The head of a row of a tensor whose rows are `stride` elements apart:
 * -1 (every element the scalar way) unless the stride keeps every row at
 * the first row's alignment, so that a row's summation order never depends
 * on its place in the batch (the cuda plugin's deterministic mode,
 * backends/cuda/cuda_exec.h, promises that of every per-row op). */
template <typename T> __device__ inline int ty_row_head4(long long stride, const void *a,
                                                         const void *b = nullptr,
                                                         const void *c = nullptr,
                                                         const void *d = nullptr) {
  return stride % 4 ? -1 : ty_head4_of<T>(a, b, c, d);
}

template <typename FS, typename FV>
__device__ inline void ty_row_loop(long long n, int head, int t, int nt, FS fs, FV fv) {
  if (head < 0) {
    for (long long i = t; i < n; i += nt) fs(i);
    return;
  }
  const long long h = head < n ? head : n;
  for (long long i = t; i < h; i += nt) fs(i);
  const long long groups = (n - h) / 4;
  for (long long k = t; k < groups; k += nt) fv(h + 4 * k);
  for (long long i = h + 4 * groups + t; i < n; i += nt) fs(i);
}

/* ---- f64 block sums (the standalone reductions accumulate in f64, as the
 * cpu backend's do; see reduce.cu): every thread of the block calls it,
 * blockDim.x a multiple of 32; `scratch` holds 32 doubles of shared
 * memory. Fixed order: deterministic. ---- */
__device__ inline double ty_warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline double ty_block_sum_d(double v, double *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = ty_warp_sum_d(v);
  __syncthreads(); /* scratch may still be read by a previous reduction */
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return ty_warp_sum_d(lane < warps ? scratch[lane] : 0.0);
}

/* Stores an f64 result: exactly into f64 storage, else rounded through f32
 * as every float output is. */
__device__ inline void ty_st_d(void *p, long long i, int dt, double v) {
  if (dt == TY_F64) ((double *)p)[i] = v;
  else ty_st(p, i, dt, (float)v);
}

/* ---- block-wide exclusive scan of one int per thread (blockDim.x a
 * multiple of 32, at most 1024); `scratch` holds 32 ints of shared memory.
 * Returns the sum of the values of the threads before this one; *total
 * gets the block's sum. ---- */
__device__ inline int ty_block_scan(int v, int *scratch, int *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    int u = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += u;
  }
  __syncthreads(); /* scratch may still be read by a previous scan */
  if (lane == 31) scratch[warp] = inc;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < warps; ++w) {
    int s = scratch[w];
    if (w < warp) before += s;
    all += s;
  }
  *total = all;
  return before + inc - v;
}

#endif /* TY_CUDA_KERNELS_VEC_CUH_ */
