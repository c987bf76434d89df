/* Elementwise kernels: broadcasting binary ops, scale, activations and
 * their backwards, dropout. One work-item per output element.
 *
 *   c[o]   = a[bcast_a(o)] (+ - * /) b[bcast_b(o)]   (numpy broadcasting;
 *            the host merges axes so most shapes have rank 1 or 2 here)
 *   gelu   = x sigmoid(2u), u = sqrt(2/pi)(x + 0.044715 x^3), which equals
 *            0.5x(1 + tanh u) without its cancellation for x << 0
 *   gelu'  = s + 2x s(1-s) u',  s = sigmoid(2u), u' = sqrt(2/pi)(1 + 3*0.044715 x^2)
 *   silu   = x s, s = sigmoid(x);   silu' = s (1 + x (1 - s))
 *   swiglu = silu(gate) up;  dgate = dy up silu'(gate), dup = dy silu(gate)
 *   dropout: element i kept iff philox_u24(seed, step 2^16 + stream, i) >=
 *            threshold (hal/philox.h); kept values are x / (1 - p), divided
 *            in f64 when the device has it (then bit-identical to the cpu
 *            backend and the reference), else in f32.
 * Checked at the conform bounds of graph/conform_cases.c ("elementwise":
 * f32 NMSE 1e-10, bf16 1e-4, f16 1e-6). */

#define TY_OP_ADD 0
#define TY_OP_SUB 1
#define TY_OP_MUL 2
#define TY_OP_DIV 3

__kernel void ty_binary(IN(a), int dta, IN(b), int dtb, OUT(c), int dtc, int op, long n,
                        int rank, long8 dims8, long8 sa8, long8 sb8) {
  long o = get_global_id(0);
  if (o >= n) return;
  long dims[8], sa[8], sb[8], ia, ib;
  ty_unpack8(dims8, dims);
  ty_unpack8(sa8, sa);
  ty_unpack8(sb8, sb);
  ty_offsets2(o, rank, dims, sa, sb, &ia, &ib);
  float x = ty_ld(P(a), ia, dta), y = ty_ld(P(b), ib, dtb), r;
  switch (op) {
    case TY_OP_ADD: r = x + y; break;
    case TY_OP_SUB: r = x - y; break;
    case TY_OP_MUL: r = x * y; break;
    default: r = x / y; break;
  }
  ty_st(P(c), o, dtc, r);
}

#define TY_MAP_SCALE 0
#define TY_MAP_GELU 1
#define TY_MAP_GELU_BWD 2
#define TY_MAP_SILU 3
#define TY_MAP_SILU_BWD 4
#define TY_MAP_SWIGLU 5
#define TY_MAP_SWIGLU_BWD 6

float ty_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

/* y (and z) from up to three same-shape inputs; absent ones are unused. */
__kernel void ty_map(IN(a), int dta, IN(b), int dtb, IN(c), int dtc, OUT(y), int dty, OUT(z),
                     int dtz, int op, long n, float alpha) {
  long i = get_global_id(0);
  if (i >= n) return;
  const float k0 = 0.7978845608028654f; /* sqrt(2/pi) */
  const float k1 = 0.044715f;
  float x = ty_ld(P(a), i, dta);
  switch (op) {
    case TY_MAP_SCALE: ty_st(P(y), i, dty, alpha * x); break;
    case TY_MAP_GELU: {
      float u = k0 * (x + k1 * x * x * x);
      ty_st(P(y), i, dty, x * ty_sigmoid(2.0f * u));
      break;
    }
    case TY_MAP_GELU_BWD: { /* a = dy, b = x */
      float v = ty_ld(P(b), i, dtb);
      float u = k0 * (v + k1 * v * v * v);
      float s = ty_sigmoid(2.0f * u);
      float du = k0 * (1.0f + 3.0f * k1 * v * v);
      ty_st(P(y), i, dty, x * (s + 2.0f * v * s * (1.0f - s) * du));
      break;
    }
    case TY_MAP_SILU: ty_st(P(y), i, dty, x * ty_sigmoid(x)); break;
    case TY_MAP_SILU_BWD: { /* a = dy, b = x */
      float v = ty_ld(P(b), i, dtb), s = ty_sigmoid(v);
      ty_st(P(y), i, dty, x * s * (1.0f + v * (1.0f - s)));
      break;
    }
    case TY_MAP_SWIGLU: { /* a = gate, b = up */
      float up = ty_ld(P(b), i, dtb);
      ty_st(P(y), i, dty, x * ty_sigmoid(x) * up);
      break;
    }
    default: { /* TY_MAP_SWIGLU_BWD: a = dy, b = gate, c = up -> dgate, dup */
      float g = ty_ld(P(b), i, dtb), up = ty_ld(P(c), i, dtc), s = ty_sigmoid(g);
      ty_st(P(y), i, dty, x * up * s * (1.0f + g * (1.0f - s)));
      ty_st(P(z), i, dtz, x * g * s);
      break;
    }
  }
}

/* Dropout (and its backward, the same mask on dy). rng = (seed, step) i64. */
__kernel void ty_dropout(IN(x), int dtx, IN(rng), int dtrng, OUT(y), int dty, long n,
                         uint threshold, uint stream, ulong keep_bits) {
  long i = get_global_id(0);
  if (i >= n) return;
  ulong seed = (ulong)ty_ldi(P(rng), 0, dtrng);
  ulong offset = (ulong)ty_ldi(P(rng), 1, dtrng) * 65536UL + stream;
  float v = 0.0f;
  if (ty_philox_u24(seed, offset, (ulong)i) >= threshold) {
#ifdef TY_FP64
    v = (float)((double)ty_ld(P(x), i, dtx) / as_double(keep_bits));
#else
    v = ty_ld(P(x), i, dtx) / ty_f64bits_to_f32(keep_bits);
#endif
  }
  ty_st(P(y), i, dty, v);
}
