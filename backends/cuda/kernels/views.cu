/* Element movers and casts: strided copies (transpose, slice,
 * slice_backward, concat, broadcast_to), dtype casts and KV-cache writes.
 * All exact: elements move as raw bytes; float casts round to nearest even
 * through f32 bit for bit as hal/half.h does, NaN payloads included. */
#include "vec.cuh"

/* Moves `bytes` (1, 2, 4, 8 or 16, the addresses aligned to it). */
__device__ inline void ty_move_bytes(const char *src, char *dst, int bytes) {
  switch (bytes) {
    case 1: *dst = *src; break;
    case 2: ty_vstore(dst, ty_vload<uint16_t>(src)); break;
    case 4: ty_vstore(dst, ty_vload<uint32_t>(src)); break;
    case 8: ty_vstore(dst, ty_vload<uint2>(src)); break;
    default: ty_vstore(dst, ty_vload<uint4>(src)); break;
  }
}

/* ---- strided copy ----
 *
 *   y[ystart + ys(i)] = x[xstart + xs(i)] for every index i of `dims`
 *
 * (both starts folded into the pointers). The host drops size-1 axes and
 * merges axes both sides walk contiguously; when the innermost axis is
 * contiguous on both sides, `vec` > 1 elements (vec * esize <= 16 bytes,
 * dividing the innermost size and every stride) move as one unit — if the
 * two addresses allow it at run time, else element by element. Exact. */
extern "C" __global__ void ty_strided_copy(const void *x, void *y, int esize, int vec,
                                           long long n, int rank, ty_dims8 dims, ty_dims8 xs,
                                           ty_dims8 ys) {
  ty_pdl_enter();
  const int ubytes = esize * vec;
  const bool units = vec > 1 && ((uintptr_t)x | (uintptr_t)y) % ubytes == 0;
  const int step = units ? vec : 1, bytes = units ? ubytes : esize;
  const long long count = n / step;
  TY_FOR_EACH(u, count) {
    long long xi, yi;
    ty_offsets2_fast(u * step, rank, dims, xs, ys, &xi, &yi);
    ty_move_bytes((const char *)x + xi * esize, (char *)y + yi * esize, bytes);
  }
}

/* ---- slices of one input's rows (a SLICES fusion, cuda_fuse.h) ----
 *
 *   y_p[r, 0:w_p] = x[r, o_p : o_p + w_p]   for parts p < parts (<= 4),
 *
 * rows r < rows of xrow elements each; ow holds o_0..o_3 then w_0..w_3. One
 * launch for the q, k and v slices of a fused projection. Units of `vec`
 * elements (vec * esize <= 16 bytes, dividing xrow, every o_p and w_p) when
 * every address allows it at run time, else element by element. Exact. */
extern "C" __global__ void ty_slice_rows(const void *x, void *y0, void *y1, void *y2, void *y3,
                                         int esize, int vec, long long rows, long long xrow,
                                         int parts, ty_dims8 ow) {
  ty_pdl_enter();
  void *ys[4] = {y0, y1, y2, y3};
  uintptr_t mix = (uintptr_t)x;
  long long width = 0; /* elements written per row, all parts */
  for (int p = 0; p < parts; ++p) {
    mix |= (uintptr_t)ys[p];
    width += ow.d[4 + p];
  }
  const int ubytes = esize * vec;
  const bool units = vec > 1 && mix % ubytes == 0;
  const int step = units ? vec : 1, bytes = units ? ubytes : esize;
  const long long per_row = width / step;
  TY_FOR_EACH(u, rows * per_row) {
    const long long r = u / per_row;
    long long k = (u - r * per_row) * step;
    int p = 0;
    while (k >= ow.d[4 + p]) k -= ow.d[4 + p++];
    ty_move_bytes((const char *)x + (r * xrow + ow.d[p] + k) * esize,
                  (char *)ys[p] + (r * ow.d[4 + p] + k) * esize, bytes);
  }
}

/* ---- casts ----
 *
 * float <-> float (f64 included) and i32 <-> i64. Narrowing float casts
 * round to nearest even through f32 (f64 -> bf16/f16 too, as PyTorch does);
 * NaNs keep their sign and top payload bits, quiet (hal/half.h). An i64 that
 * does not fit i32 is a data error (TY_ERR_CAST_RANGE with the element and
 * the value), never a silent wrap. Exact ("exact" conform bound). */

__device__ inline float ty_cast_f16_to_f32(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) { /* NaN: the payload kept */
    return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                           ((uint32_t)(h & 0x3ffu) << 13));
  }
  return __half2float(__ushort_as_half(h));
}

__device__ inline uint16_t ty_cast_f32_to_f16(float f) {
  const uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u | ((a >> 13) & 0x3ffu));
  return __half_as_ushort(__float2half_rn(f));
}

__device__ inline bool ty_is_float(int dt) {
  return dt == TY_F32 || dt == TY_BF16 || dt == TY_F16 || dt == TY_F64;
}

/* Any float element as f32, rounded to nearest even. */
__device__ inline float ty_cast_ld(const void *p, long long i, int dt) {
  if (dt == TY_F16) return ty_cast_f16_to_f32(((const uint16_t *)p)[i]);
  return ty_ld(p, i, dt);
}

__device__ inline void ty_cast_st(void *p, long long i, int dt, float v) {
  if (dt == TY_F16) ((uint16_t *)p)[i] = ty_cast_f32_to_f16(v);
  else ty_st(p, i, dt, v); /* bf16 by hal/half.h's rounding; f64 exact */
}

extern "C" __global__ void ty_cast(const void *x, int dtx, void *y, int dty, long long n,
                                   ERR_ARGS) {
  ty_pdl_enter();
  TY_FOR_EACH(i, n) {
    if (ty_is_float(dtx)) {
      if (dtx == TY_F64 && dty == TY_F32) {
        ((float *)y)[i] = __double2float_rn(((const double *)x)[i]);
      } else {
        ty_cast_st(y, i, dty, ty_cast_ld(x, i, dtx));
      }
      continue;
    }
    const long long v = ty_ldi(x, i, dtx);
    if (dty == TY_I32) {
      if (v < INT_MIN || v > INT_MAX) ty_fail(err, node, TY_ERR_CAST_RANGE, i, v, 0);
      ((int32_t *)y)[i] = (int32_t)v;
    } else {
      ((long long *)y)[i] = v;
    }
  }
}

/* The hot casts of mixed precision (f32 <-> bf16 / f16), 4 elements per
 * thread: the same conversions as ty_cast. */
template <typename T> __device__ inline float ty_cast_in(T v);
template <> __device__ inline float ty_cast_in<float>(float v) { return v; }
template <> __device__ inline float ty_cast_in<__nv_bfloat16>(__nv_bfloat16 v) {
  return ty_bf16_to_f32(__bfloat16_as_ushort(v));
}
template <> __device__ inline float ty_cast_in<__half>(__half v) {
  return ty_cast_f16_to_f32(__half_as_ushort(v));
}
template <typename T> __device__ inline T ty_cast_out(float v);
template <> __device__ inline float ty_cast_out<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 ty_cast_out<__nv_bfloat16>(float v) {
  return __ushort_as_bfloat16(ty_f32_to_bf16(v));
}
template <> __device__ inline __half ty_cast_out<__half>(float v) {
  return __ushort_as_half(ty_cast_f32_to_f16(v));
}

/* Four elements as f32 from 16 (f32) or 8 (bf16, f16) aligned bytes, and
 * back, with the conversions above (bit operations, no type punning). */
template <typename T> __device__ inline void ty_cast_ld4(const T *p, float *v);
template <> __device__ inline void ty_cast_ld4<float>(const float *p, float *v) {
  const float4 r = ty_vload<float4>(p);
  v[0] = r.x;
  v[1] = r.y;
  v[2] = r.z;
  v[3] = r.w;
}
template <> __device__ inline void ty_cast_ld4<__nv_bfloat16>(const __nv_bfloat16 *p, float *v) {
  const uint2 r = ty_vload<uint2>(p);
  v[0] = ty_bf16_to_f32((uint16_t)(r.x & 0xffffu));
  v[1] = ty_bf16_to_f32((uint16_t)(r.x >> 16));
  v[2] = ty_bf16_to_f32((uint16_t)(r.y & 0xffffu));
  v[3] = ty_bf16_to_f32((uint16_t)(r.y >> 16));
}
template <> __device__ inline void ty_cast_ld4<__half>(const __half *p, float *v) {
  const uint2 r = ty_vload<uint2>(p);
  v[0] = ty_cast_f16_to_f32((uint16_t)(r.x & 0xffffu));
  v[1] = ty_cast_f16_to_f32((uint16_t)(r.x >> 16));
  v[2] = ty_cast_f16_to_f32((uint16_t)(r.y & 0xffffu));
  v[3] = ty_cast_f16_to_f32((uint16_t)(r.y >> 16));
}
template <typename T> __device__ inline void ty_cast_st4(T *p, const float *v);
template <> __device__ inline void ty_cast_st4<float>(float *p, const float *v) {
  ty_vstore(p, make_float4(v[0], v[1], v[2], v[3]));
}
template <> __device__ inline void ty_cast_st4<__nv_bfloat16>(__nv_bfloat16 *p, const float *v) {
  ty_vstore(p, make_uint2((uint32_t)ty_f32_to_bf16(v[0]) | (uint32_t)ty_f32_to_bf16(v[1]) << 16,
                          (uint32_t)ty_f32_to_bf16(v[2]) | (uint32_t)ty_f32_to_bf16(v[3]) << 16));
}
template <> __device__ inline void ty_cast_st4<__half>(__half *p, const float *v) {
  ty_vstore(p, make_uint2(
                   (uint32_t)ty_cast_f32_to_f16(v[0]) | (uint32_t)ty_cast_f32_to_f16(v[1]) << 16,
                   (uint32_t)ty_cast_f32_to_f16(v[2]) | (uint32_t)ty_cast_f32_to_f16(v[3]) << 16));
}

template <typename TI, typename TO>
__device__ __forceinline__ void ty_cast4(const void *x_, void *y_, long long n) {
  const TI *x = (const TI *)x_;
  TO *y = (TO *)y_;
  long long done = 0;
  if (ty_al4<TI>(x) && ty_al4<TO>(y)) {
    const long long groups = n / 4;
    TY_FOR_EACH(k, groups) {
      float v[4];
      ty_cast_ld4(x + 4 * k, v);
      ty_cast_st4(y + 4 * k, v);
    }
    done = 4 * groups;
  }
  TY_FOR_EACH(k, n - done) y[done + k] = ty_cast_out<TO>(ty_cast_in<TI>(x[done + k]));
}

#define TY_CAST4(name, TI, TO)                                                          \
  extern "C" __global__ void name(const void *x, void *y, long long n) {               \
    ty_pdl_enter();                                                                    \
    ty_cast4<TI, TO>(x, y, n);                                                           \
  }
TY_CAST4(ty_cast_f32_bf16, float, __nv_bfloat16)
TY_CAST4(ty_cast_f32_f16, float, __half)
TY_CAST4(ty_cast_bf16_f32, __nv_bfloat16, float)
TY_CAST4(ty_cast_f16_f32, __half, float)

/* ---- KV-cache writes ----
 *
 *   cache[b, pos + t, :] = new[b, t, :]   for rows of `row` elements
 *
 * The host first copies cache into cache' unless they share storage (the
 * memory plan's in-place update). pos < 0 or pos + T > Smax is a data error
 * (TY_ERR_KV_POSITION with pos, T and Smax), and nothing is written. */
extern "C" __global__ void ty_kv_write(const void *fresh, void *cache, const void *pos,
                                       int dtpos, int esize, long long Smax, long long T,
                                       long long row, long long n, ERR_ARGS) {
  ty_pdl_enter();
  const long long p = ty_ldi(pos, 0, dtpos);
  if (p < 0 || T > Smax || p > Smax - T) {
    if (blockIdx.x == 0 && threadIdx.x == 0) ty_fail(err, node, TY_ERR_KV_POSITION, p, T, Smax);
    return;
  }
  TY_FOR_EACH(i, n) {
    const long long q = ty_div(i, row), r = i - q * row; /* q = b T + t */
    const long long b = ty_div(q, T), t = q - b * T;
    ty_move_bytes((const char *)fresh + i * esize,
                  (char *)cache + ((b * Smax + p + t) * row + r) * esize, esize);
  }
}
