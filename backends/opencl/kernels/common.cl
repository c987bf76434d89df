/* Helpers every kernel family shares; prepended to each family's file when
 * its program is built (ocl_program.c). OpenCL C 1.2.
 *
 * Storage and compute: tensors are addressed as a byte buffer plus a byte
 * offset (IN/OUT below), in any storage dtype; arithmetic is f32. bf16 is
 * converted by bit manipulation with round-to-nearest-even exactly as
 * hal/half.h does; f16 through vload_half / vstore_half_rte (core 1.2, no
 * cl_khr_fp16 needed); f64 data (only ever moved or cast here) by bits, so
 * no device needs cl_khr_fp64 for it.
 *
 * Data errors (an id out of range, a KV position past the cache) are
 * reported through a small error buffer: the first failing work-item wins
 * an atomic compare-and-swap and records its node and details, which the
 * host reads after the step (ocl_graph.c, device_errors.h). */
#ifdef TY_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

/* Values of ty_dtype_t (hal/backend_abi.h). */
#define TY_F32 1
#define TY_BF16 2
#define TY_F16 3
#define TY_F64 4
#define TY_I32 5
#define TY_I64 6
#define TY_U8 7

/* A tensor operand: buffer + byte offset. P(x) is its first byte. */
#define IN(x) __global const uchar *x##_b, ulong x##_o
#define OUT(x) __global uchar *x##_b, ulong x##_o
#define P(x) (x##_b + x##_o)
#define ERR_ARGS __global int *err, int node

/* The error codes (TY_ERR_*) come from backends/common/device_errors.h,
 * which ocl_program.c puts before this file; the host decodes them with
 * ty_dev_data_error (backends/common/device_exec.c). */

void ty_fail(__global int *err, int node, int code, long a, long b, long c) {
  if (atomic_cmpxchg(err, 0, code) == 0) {
    err[1] = node;
    __global long *detail = (__global long *)(err + 2);
    detail[0] = a;
    detail[1] = b;
    detail[2] = c;
  }
}

/* ---- conversions (hal/half.h, bit for bit) ---- */

float ty_bf16_to_f32(ushort h) { return as_float((uint)h << 16); }

ushort ty_f32_to_bf16(float f) {
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x0040u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* RNE; a carry bumps the exponent (to inf) */
  return (ushort)(u >> 16);
}

/* f64 bits -> f32, rounded to nearest even (subnormal results included). */
float ty_f64bits_to_f32(ulong b) {
  uint sign = (uint)(b >> 32) & 0x80000000u;
  uint exp = (uint)(b >> 52) & 0x7ffu;
  ulong man = b & 0xfffffffffffffUL;
  if (exp == 0x7ffu) {
    return as_float(man == 0 ? sign | 0x7f800000u : sign | 0x7fc00000u | (uint)(man >> 29));
  }
  int e = (int)exp - 896; /* the f32 biased exponent: -1023 + 127 */
  if (e >= 0xff) return as_float(sign | 0x7f800000u);
  if (e >= 1) {
    uint q = ((uint)e << 23) | (uint)(man >> 29);
    ulong rem = man & 0x1fffffffUL;
    if (rem > 0x10000000UL || (rem == 0x10000000UL && (q & 1u))) ++q; /* may reach inf */
    return as_float(sign | q);
  }
  /* Subnormal f32 (or zero): q = m * 2^(exp - 926) with the 53-bit m. */
  if (exp == 0) return as_float(sign);
  int shift = 926 - (int)exp;
  if (shift > 60) return as_float(sign);
  ulong m = man | (1UL << 52);
  ulong q = m >> shift, rem = m & ((1UL << shift) - 1UL), mid = 1UL << (shift - 1);
  if (rem > mid || (rem == mid && (q & 1UL))) ++q; /* may reach the smallest normal */
  return as_float(sign | (uint)q);
}

/* f32 -> f64 bits, exact. */
ulong ty_f32_to_f64bits(float f) {
  uint u = as_uint(f);
  ulong sign = (ulong)(u & 0x80000000u) << 32;
  uint exp = (u >> 23) & 0xffu, man = u & 0x7fffffu;
  if (exp == 0xffu) return sign | 0x7ff0000000000000UL | ((ulong)man << 29);
  if (exp == 0) {
    if (man == 0) return sign;
    int e = 1;
    while ((man & 0x800000u) == 0) {
      man <<= 1;
      --e;
    }
    return sign | ((ulong)(e + 896) << 52) | ((ulong)(man & 0x7fffffu) << 29);
  }
  return sign | ((ulong)(exp + 896) << 52) | ((ulong)man << 29);
}

/* Element i of a tensor in storage dtype dt, as f32. */
float ty_ld(__global const uchar *p, long i, int dt) {
  switch (dt) {
    case TY_BF16: return ty_bf16_to_f32(((__global const ushort *)p)[i]);
    case TY_F16: return vload_half((size_t)i, (__global const half *)p);
    case TY_F64: return ty_f64bits_to_f32(((__global const ulong *)p)[i]);
    case TY_I32: return (float)((__global const int *)p)[i];
    case TY_I64: return (float)((__global const long *)p)[i];
    default: return ((__global const float *)p)[i];
  }
}

void ty_st(__global uchar *p, long i, int dt, float v) {
  switch (dt) {
    case TY_BF16: ((__global ushort *)p)[i] = ty_f32_to_bf16(v); break;
    case TY_F16: vstore_half_rte(v, (size_t)i, (__global half *)p); break;
    case TY_F64: ((__global ulong *)p)[i] = ty_f32_to_f64bits(v); break;
    default: ((__global float *)p)[i] = v; break;
  }
}

/* An integer operand (ids, targets, positions, steps): i32 or i64. */
long ty_ldi(__global const uchar *p, long i, int dt) {
  return dt == TY_I32 ? (long)((__global const int *)p)[i] : ((__global const long *)p)[i];
}

/* Moves one element of `size` bytes. */
void ty_move(__global const uchar *src, long si, __global uchar *dst, long di, int size) {
  switch (size) {
    case 1: dst[di] = src[si]; break;
    case 2: ((__global ushort *)dst)[di] = ((__global const ushort *)src)[si]; break;
    case 4: ((__global uint *)dst)[di] = ((__global const uint *)src)[si]; break;
    default: ((__global ulong *)dst)[di] = ((__global const ulong *)src)[si]; break;
  }
}

/* ---- work-group reductions (local size a power of two; every work-item
 * of the group must call them). Two levels — n/w partial sums of w values
 * each, then every work-item adds the n/w partials — so a reduction costs
 * four barriers instead of a tree's 2 + log2(n). The order of the additions
 * is fixed: results are deterministic. ---- */

int ty_group_width(int n) { return n >= 256 ? 16 : n >= 64 ? 8 : n >= 16 ? 4 : 1; }

float ty_group_sum(float v, __local float *scratch) {
  const int lid = get_local_id(0), n = get_local_size(0), w = ty_group_width(n);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  float part = 0.0f;
  if (lid < n / w) {
    for (int i = 0; i < w; ++i) part += scratch[lid * w + i];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < n / w) scratch[lid] = part;
  barrier(CLK_LOCAL_MEM_FENCE);
  float r = 0.0f;
  for (int i = 0; i < n / w; ++i) r += scratch[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

float ty_group_max(float v, __local float *scratch) {
  const int lid = get_local_id(0), n = get_local_size(0), w = ty_group_width(n);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  float part = -INFINITY;
  if (lid < n / w) {
    for (int i = 0; i < w; ++i) part = fmax(part, scratch[lid * w + i]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < n / w) scratch[lid] = part;
  barrier(CLK_LOCAL_MEM_FENCE);
  float r = -INFINITY;
  for (int i = 0; i < n / w; ++i) r = fmax(r, scratch[i]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

/* ---- shapes: up to 8 dims travel as long8 ---- */

void ty_unpack8(long8 v, long *out) { vstore8(v, 0, out); }

/* Offsets (in elements) of linear index i of a row-major shape `dims` under
 * two stride vectors. */
void ty_offsets2(long i, int rank, const long *dims, const long *sa, const long *sb,
                 long *oa, long *ob) {
  long a = 0, b = 0;
  for (int d = rank - 1; d >= 0; --d) {
    long idx = i % dims[d];
    i /= dims[d];
    a += idx * sa[d];
    b += idx * sb[d];
  }
  *oa = a;
  *ob = b;
}

/* ---- Philox4x32-10 and the dropout stream (hal/philox.h, bit for bit) ---- */

uint4 ty_philox4x32_10(uint4 x, uint2 k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k.x += 0x9E3779B9u;
      k.y += 0xBB67AE85u;
    }
    uint hi0 = mul_hi(0xD2511F53u, x.x), lo0 = 0xD2511F53u * x.x;
    uint hi1 = mul_hi(0xCD9E8D57u, x.z), lo1 = 0xCD9E8D57u * x.z;
    x = (uint4)(hi1 ^ x.y ^ k.x, lo1, hi0 ^ x.w ^ k.y, lo0);
  }
  return x;
}

uint ty_philox_u24(ulong seed, ulong offset, ulong index) {
  ulong g = index / 4;
  uint4 r = ty_philox4x32_10((uint4)((uint)g, (uint)(g >> 32), (uint)offset, (uint)(offset >> 32)),
                             (uint2)((uint)seed, (uint)(seed >> 32)));
  uint lane = (uint)(index % 4);
  uint v = lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w;
  return v >> 8;
}
