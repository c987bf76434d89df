/* Elementwise kernels: broadcasting binary ops, scale, the activations and
 * their backwards, dropout, and the bias rows of K = 0 matmuls. f32 math;
 * the typed kernels (NAME_f32/_bf16/_f16) take 4 elements per thread with
 * vector loads, the generic ones any storage dtype through ty_ld/ty_st. */
#include "vec.cuh"

/* ---- binary ops ----
 *
 *   c[o] = a[ia(o)] (+ - * /) b[ib(o)]
 *
 * numpy broadcasting: the host drops size-1 output axes and merges axes
 * every operand walks contiguously, so ia/ib come from at most 8 (dims,
 * strides) pairs; a stride of 0 repeats the operand. Same-shape operands of
 * one float dtype take ty_binary_same_*. Checked at the "elementwise"
 * conform bound. */

#define TY_OP_ADD 0
#define TY_OP_SUB 1
#define TY_OP_MUL 2
#define TY_OP_DIV 3

__device__ inline float ty_binop(int op, float x, float y) {
  switch (op) {
    case TY_OP_ADD: return x + y;
    case TY_OP_SUB: return x - y;
    case TY_OP_MUL: return x * y;
    default: return x / y;
  }
}

extern "C" __global__ void ty_binary(const void *a, int dta, const void *b, int dtb, void *c,
                                     int dtc, int op, long long n, int rank, ty_dims8 dims,
                                     ty_dims8 sa, ty_dims8 sb) {
  ty_pdl_enter();
  TY_FOR_EACH(o, n) {
    long long ia, ib;
    ty_offsets2_fast(o, rank, dims, sa, sb, &ia, &ib);
    ty_st(c, o, dtc, ty_binop(op, ty_ld(a, ia, dta), ty_ld(b, ib, dtb)));
  }
}

/* c[i] = a[i] op b[i], all of dtype T. */
template <typename T>
__device__ __forceinline__ void ty_binary_same_impl(const void *a_, const void *b_, void *c_,
                                                    int op, long long n) {
  const T *a = (const T *)a_, *b = (const T *)b_;
  T *c = (T *)c_;
  long long done = 0;
  if (ty_al4<T>(a) && ty_al4<T>(b) && ty_al4<T>(c)) {
    const long long groups = n / 4;
    TY_FOR_EACH(k, groups) {
      float x[4], y[4];
      ty_ld4(a + 4 * k, x);
      ty_ld4(b + 4 * k, y);
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = ty_binop(op, x[j], y[j]);
      ty_st4(c + 4 * k, x);
    }
    done = 4 * groups;
  }
  TY_FOR_EACH(k, n - done) {
    const long long i = done + k;
    ty_put(c, i, ty_binop(op, ty_get(a, i), ty_get(b, i)));
  }
}
#define TY_BINARY_SAME_PARAMS const void *a, const void *b, void *c, int op, long long n
#define TY_BINARY_SAME_ARGS a, b, c, op, n
TY_KERNEL3(ty_binary_same, TY_BINARY_SAME_PARAMS, TY_BINARY_SAME_ARGS)

/* ---- maps: scale and the activations ----
 *
 *   scale  = alpha x
 *   gelu   = x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3), which equals
 *            0.5x(1 + tanh u) without its cancellation for x << 0
 *   gelu'  = s + 2x s(1-s) u',  s = sigmoid(2u), u' = sqrt(2/pi)(1 + 3*0.044715 x^2)
 *   silu   = x s, s = sigmoid(x);   silu' = s (1 + x (1 - s))
 *   swiglu = silu(gate) up;  dgate = dy up silu'(gate), dup = dy silu(gate)
 *
 * Operands: a, b, c in, y (and z: swiglu_backward's dup) out, all the same
 * shape. The same f32 formulas as the opencl backend's (kernels/
 * elementwise.cl). Checked at the "elementwise" conform bound. */

#define TY_MAP_SCALE 0
#define TY_MAP_GELU 1
#define TY_MAP_GELU_BWD 2
#define TY_MAP_SILU 3
#define TY_MAP_SILU_BWD 4
#define TY_MAP_SWIGLU 5
#define TY_MAP_SWIGLU_BWD 6

__device__ inline float ty_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* One element: x = a, v = b, w = c; *z only for swiglu_backward. */
__device__ inline float ty_map1(int op, float x, float v, float w, float alpha, float *z) {
  const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
  const float k1 = 0.044715f;
  switch (op) {
    case TY_MAP_SCALE: return alpha * x;
    case TY_MAP_GELU: return x * ty_sigmoid(2.0f * (k0 * (x + k1 * x * x * x)));
    case TY_MAP_GELU_BWD: { /* x = dy, v = x */
      const float s = ty_sigmoid(2.0f * (k0 * (v + k1 * v * v * v)));
      const float du = k0 * (1.0f + 3.0f * k1 * v * v);
      return x * (s + 2.0f * v * s * (1.0f - s) * du);
    }
    case TY_MAP_SILU: return x * ty_sigmoid(x);
    case TY_MAP_SILU_BWD: { /* x = dy, v = x */
      const float s = ty_sigmoid(v);
      return x * s * (1.0f + v * (1.0f - s));
    }
    case TY_MAP_SWIGLU: return x * ty_sigmoid(x) * v; /* x = gate, v = up */
    default: {                                        /* x = dy, v = gate, w = up */
      const float s = ty_sigmoid(v);
      *z = x * v * s;
      return x * w * s * (1.0f + v * (1.0f - s));
    }
  }
}

__device__ inline int ty_map_inputs(int op) {
  if (op == TY_MAP_SWIGLU_BWD) return 3;
  return op == TY_MAP_SCALE || op == TY_MAP_GELU || op == TY_MAP_SILU ? 1 : 2;
}

/* Any storage dtypes (absent operands are NULL with dtype 0). */
extern "C" __global__ void ty_map(const void *a, int dta, const void *b, int dtb, const void *c,
                                  int dtc, void *y, int dty, void *z, int dtz, int op,
                                  long long n, float alpha) {
  ty_pdl_enter();
  const int ins = ty_map_inputs(op);
  TY_FOR_EACH(i, n) {
    float zv = 0.0f;
    const float x = ty_ld(a, i, dta);
    const float v = ins > 1 ? ty_ld(b, i, dtb) : 0.0f;
    const float w = ins > 2 ? ty_ld(c, i, dtc) : 0.0f;
    ty_st(y, i, dty, ty_map1(op, x, v, w, alpha, &zv));
    if (op == TY_MAP_SWIGLU_BWD) ty_st(z, i, dtz, zv);
  }
}

/* Every operand of dtype T. */
template <typename T>
__device__ __forceinline__ void ty_map_t_impl(const void *a_, const void *b_, const void *c_,
                                              void *y_, void *z_, int op, long long n,
                                              float alpha) {
  const T *a = (const T *)a_, *b = (const T *)b_, *c = (const T *)c_;
  T *y = (T *)y_, *z = (T *)z_;
  const int ins = ty_map_inputs(op);
  const bool two = op == TY_MAP_SWIGLU_BWD;
  long long done = 0;
  if (ty_al4<T>(a) && ty_al4<T>(y) && (ins < 2 || ty_al4<T>(b)) && (ins < 3 || ty_al4<T>(c)) &&
      (!two || ty_al4<T>(z))) {
    const long long groups = n / 4;
    TY_FOR_EACH(k, groups) {
      float x[4], v[4] = {0, 0, 0, 0}, w[4] = {0, 0, 0, 0}, r[4], zr[4];
      ty_ld4(a + 4 * k, x);
      if (ins > 1) ty_ld4(b + 4 * k, v);
      if (ins > 2) ty_ld4(c + 4 * k, w);
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] = ty_map1(op, x[j], v[j], w[j], alpha, &zr[j]);
      ty_st4(y + 4 * k, r);
      if (two) ty_st4(z + 4 * k, zr);
    }
    done = 4 * groups;
  }
  TY_FOR_EACH(k, n - done) {
    const long long i = done + k;
    float zv = 0.0f;
    const float v = ins > 1 ? ty_get(b, i) : 0.0f, w = ins > 2 ? ty_get(c, i) : 0.0f;
    ty_put(y, i, ty_map1(op, ty_get(a, i), v, w, alpha, &zv));
    if (two) ty_put(z, i, zv);
  }
}
#define TY_MAP_T_PARAMS \
  const void *a, const void *b, const void *c, void *y, void *z, int op, long long n, float alpha
#define TY_MAP_T_ARGS a, b, c, y, z, op, n, alpha
TY_KERNEL3(ty_map_t, TY_MAP_T_PARAMS, TY_MAP_T_ARGS)

/* ---- dropout (and its backward: the same mask on dy) ----
 *
 *   element i kept iff philox_u24(seed, step 2^16 + stream, i) >= threshold
 *   (hal/philox.h, bit for bit); kept values are x / (1 - p), the quotient
 *   taken in f64 and rounded once to f32 (so f32 results equal the cpu
 *   backend's and the reference's bit for bit).
 *
 * One Philox call yields the draws of 4 consecutive elements (a group), so
 * a thread takes a group. rng = (seed, step), i32 or i64. Checked at the
 * "elementwise" conform bound. */
template <typename T>
__device__ __forceinline__ void ty_dropout_impl(const void *x_, const void *rng, int dtrng,
                                                void *y_, long long n, unsigned threshold,
                                                unsigned stream, double keep) {
  const T *x = (const T *)x_;
  T *y = (T *)y_;
  const unsigned long long seed = (unsigned long long)ty_ldi(rng, 0, dtrng);
  const unsigned long long offset =
      (unsigned long long)ty_ldi(rng, 1, dtrng) * 65536ull + stream;
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const bool vec = ty_al4<T>(x) && ty_al4<T>(y);
  const long long groups = (n + 3) / 4;
  TY_FOR_EACH(g, groups) {
    const uint32_t ctr[4] = {(uint32_t)g, (uint32_t)((unsigned long long)g >> 32),
                             (uint32_t)offset, (uint32_t)(offset >> 32)};
    uint32_t r[4];
    ty_philox4x32_10(ctr, key, r);
    const long long i0 = 4 * g;
    if (vec && i0 + 4 <= n) {
      float v[4];
      ty_ld4(x + i0, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[j] = (r[j] >> 8) >= threshold ? (float)((double)v[j] / keep) : 0.0f;
      }
      ty_st4(y + i0, v);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (i0 + j >= n) break;
        const float v =
            (r[j] >> 8) >= threshold ? (float)((double)ty_get(x, i0 + j) / keep) : 0.0f;
        ty_put(y, i0 + j, v);
      }
    }
  }
}
#define TY_DROPOUT_PARAMS                                                                 \
  const void *x, const void *rng, int dtrng, void *y, long long n, unsigned threshold, \
      unsigned stream, double keep
#define TY_DROPOUT_ARGS x, rng, dtrng, y, n, threshold, stream, keep
TY_KERNEL3(ty_dropout, TY_DROPOUT_PARAMS, TY_DROPOUT_ARGS)

/* Dropout numbered as in the whole sequence (attribute seq_len > 0, context
 * parallel; docs/ops.md "Dropout", the cpu kernel
 * backends/cpu/cpu_kernels_dropout.c): x [A, local, inner] holds local / m
 * slices of m rows that begin at rows starts.d[j] of a [A, seq_len, inner]
 * tensor, and element (a, t, r) draws the bit of its index there,
 * i = (a seq_len + starts[t / m] + t % m) inner + r: Philox group i / 4,
 * lane i % 4 of the same stream as above. A row may start mid-group, so a
 * thread takes one element (and one Philox call). Exact, like the above. */
template <typename T>
__device__ __forceinline__ void ty_dropout_seq_impl(const void *x_, const void *rng, int dtrng,
                                                    void *y_, long long n, long long inner,
                                                    long long local, long long m,
                                                    long long seq_len, ty_dims8 starts,
                                                    unsigned threshold, unsigned stream,
                                                    double keep) {
  const T *x = (const T *)x_;
  T *y = (T *)y_;
  const unsigned long long seed = (unsigned long long)ty_ldi(rng, 0, dtrng);
  const unsigned long long offset =
      (unsigned long long)ty_ldi(rng, 1, dtrng) * 65536ull + stream;
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  TY_FOR_EACH(e, n) {
    const long long row = e / inner, r = e - row * inner;
    const long long a = row / local, t = row - a * local;
    const unsigned long long i =
        (unsigned long long)((a * seq_len + starts.d[t / m] + t % m) * inner + r);
    const unsigned long long g = i / 4u;
    const uint32_t ctr[4] = {(uint32_t)g, (uint32_t)(g >> 32), (uint32_t)offset,
                             (uint32_t)(offset >> 32)};
    uint32_t bits[4];
    ty_philox4x32_10(ctr, key, bits);
    const float v =
        (bits[i % 4u] >> 8) >= threshold ? (float)((double)ty_get(x, e) / keep) : 0.0f;
    ty_put(y, e, v);
  }
}
#define TY_DROPOUT_SEQ_PARAMS                                                                \
  const void *x, const void *rng, int dtrng, void *y, long long n, long long inner,        \
      long long local, long long m, long long seq_len, ty_dims8 starts, unsigned threshold, \
      unsigned stream, double keep
#define TY_DROPOUT_SEQ_ARGS \
  x, rng, dtrng, y, n, inner, local, m, seq_len, starts, threshold, stream, keep
TY_KERNEL3(ty_dropout_seq, TY_DROPOUT_SEQ_PARAMS, TY_DROPOUT_SEQ_ARGS)

/* ---- bias rows: out[i] = bias[i % N] (matmul with K = 0: an empty sum
 * plus the bias; cuda_gemm.c). Exact. ---- */
extern "C" __global__ void ty_bias_rows(const void *bias, void *out, int dt, long long n,
                                        long long N) {
  ty_pdl_enter();
  TY_FOR_EACH(i, n) ty_st(out, i, dt, ty_ld(bias, ty_mod(i, N), dt));
}
