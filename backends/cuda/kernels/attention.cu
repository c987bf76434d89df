/* Fused causal grouped-query attention, forward and backward (docs/ops.md,
 * "Attention"; the oracle is ops/reference/ref_attention.c).
 *
 * q [B,T,Hq,D], k/v [B,S,Hkv,D] as stored (row-major: a token's heads are
 * adjacent, so a head's rows are Hq D or Hkv D elements apart); query head h
 * reads kv head h / (Hq / Hkv). With L = kv_len (S when absent) query t sits
 * at pos = t + L - T and sees key s iff s <= pos and (window == 0 or
 * pos - s < window); keys at L and after are never seen. kv_len outside
 * [T, S] is a data error (TY_ERR_KV_LEN): every block returns unwritten.
 *
 * Forward (online softmax; no T x S matrix is ever stored). Per query row,
 * over key tiles j, in log2 units (c = scale log2(e), exp2 on the MUFU):
 *   s_j = c q.k_j (masked: -inf),  m' = max(m, max_j s_j),
 *   l = l 2^(m - m') + sum_j 2^(s_j - m'),  o = o 2^(m - m') + sum_j 2^(s_j - m') v_j
 * then out = o / l and lse = (m + log2 l) ln 2 (natural log, f32 [B,Hq,T]).
 * A row that has seen no key yet keeps m = -inf and uses 0 as its shift, so
 * no inf - inf appears.
 *
 * Backward, with P = exp(q.k scale - lse) rebuilt from the saved lse:
 *   Di = rowsum(dout * out) = sum_j P_j dP_j       (ty_att_delta_*)
 *   dP = dout V^T,  dS = P o (dP - Di)
 *   dQ = scale dS K,  dK = scale dS^T Q,  dV = P^T dout
 * dK and dV sum over every query head of the kv head's group. Deterministic:
 * no atomics; one kernel owns each (b, kv head, key tile) and loops over the
 * group's heads and query tiles for dK, dV; another owns each query tile and
 * loops over key tiles for dQ (so S and dP are computed twice: 7 matmuls
 * where FlashAttention-2's atomic dQ has 5). Fixed loop orders: bit-identical
 * results run to run.
 *
 * Two paths (the builder, cuda_attention.c, picks one per node):
 *  - generic (attention_simt.cuh): any dtype, head dim up to 256 (bucketed to
 *    64/128/256, zero-padded), f32 FMA on CUDA cores throughout (no TF32,
 *    so f32 models match the cpu backend). Blocks of 128 threads; the rows of
 *    a (batch, kv head) are packed t G + g over the group's heads; tiles in
 *    f32 shared memory (shapes in attention_shapes.h). Checked by the
 *    conformance cases at the "reduction" bounds (f32 NMSE 1e-9; bf16/f16
 *    dominated by output rounding, ~3e-6 / ~4e-8).
 *  - tensor cores (attention_tc.cuh): bf16/f16 with head dim 64 or 128, any
 *    T, S, window, kv_len. mma.sync m16n8k16 (16-bit inputs, f32
 *    accumulation), FlashAttention-2 style: a warp owns 16 query rows (dK/dV:
 *    16 keys), Q K^T accumulates in registers, P (dS) is rounded to the
 *    input dtype in registers and fed straight back as the A operand; K/V
 *    (Q/dO) tiles of 64 rows are double-buffered through swizzled shared
 *    memory by cp.async. Forward: 8 warps = 128 query rows per block, key
 *    tiles of 64; dQ: 4 warps = 64 rows, key tiles of 64 (32 at D = 128);
 *    dK/dV: 4 warps = 64 keys, query tiles of 64 (32 at D = 128). Tiles
 *    that straddle the causal diagonal, the window edge or the end of T/S
 *    are masked element by element; the others are not, and a warp skips
 *    a tile in which it sees no key. Exponentials flush subnormal results
 *    to zero (ex2.approx.ftz). Checked against the f64 oracle at the
 *    "reduction" bounds and against the generic path at NMSE 2e-5 (bf16)
 *    / 5e-7 (f16): both outputs are rounded once (~3e-6 / ~4e-8 each), and
 *    P and dS rounded to 16 bits add the rest; seen: 4e-6..8e-6 (bf16),
 *    ~1e-7 (f16). By the CPU emulation (tests/cuda/attention_emu.cc) and on
 *    a GPU (tests/cuda/attention_cuda_test.c).
 *
 * Entry points are extern "C" (ty_att_<kernel>_<dtype>_d<dim>) over the
 * templates; their parameter lists are what cuda_attention.c packs. */
#include "attention_simt.cuh"
#include "attention_tc.cuh"

#define TY_ATT_FWD_PARAMS(T)                                                               \
  const T *q, const T *k, const T *v, T *out, float *lse, const long long *kvlen, int Tq,  \
      int S, int Hq, int Hkv, int D, float scale, float sl2, int window, ERR_ARGS
#define TY_ATT_FWD_ARGS q, k, v, out, lse, kvlen, Tq, S, Hq, Hkv, D, scale, sl2, window, err, node
#define TY_ATT_DQ_PARAMS(T)                                                                \
  const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta, \
      const long long *kvlen, T *dq, int Tq, int S, int Hq, int Hkv, int D, float scale,   \
      float sl2, int window, ERR_ARGS
#define TY_ATT_DQ_ARGS                                                                     \
  dout, q, k, v, lse, delta, kvlen, dq, Tq, S, Hq, Hkv, D, scale, sl2, window, err, node
#define TY_ATT_DKV_PARAMS(T)                                                               \
  const T *dout, const T *q, const T *k, const T *v, const float *lse, const float *delta, \
      const long long *kvlen, T *dk, T *dv, int Tq, int S, int Hq, int Hkv, int D,         \
      float scale, float sl2, int window, ERR_ARGS
#define TY_ATT_DKV_ARGS                                                                    \
  dout, q, k, v, lse, delta, kvlen, dk, dv, Tq, S, Hq, Hkv, D, scale, sl2, window, err, node

#define TY_ATT_SIMT(name, T, DC)                                                           \
  extern "C" __global__ void __launch_bounds__(TY_ATT_SIMT_THREADS)                        \
      ty_att_fwd_simt_##name##_d##DC(TY_ATT_FWD_PARAMS(T)) {                               \
    ty_pdl_enter();                                                                        \
    ty_att_fwd_simt<T, DC>(TY_ATT_FWD_ARGS);                                               \
  }                                                                                        \
  extern "C" __global__ void __launch_bounds__(TY_ATT_SIMT_THREADS)                        \
      ty_att_dq_simt_##name##_d##DC(TY_ATT_DQ_PARAMS(T)) {                                 \
    ty_pdl_enter();                                                                        \
    ty_att_dq_simt<T, DC>(TY_ATT_DQ_ARGS);                                                 \
  }                                                                                        \
  extern "C" __global__ void __launch_bounds__(TY_ATT_SIMT_THREADS)                        \
      ty_att_dkv_simt_##name##_d##DC(TY_ATT_DKV_PARAMS(T)) {                               \
    ty_pdl_enter();                                                                        \
    ty_att_dkv_simt<T, DC>(TY_ATT_DKV_ARGS);                                               \
  }

#define TY_ATT_SIMT_DTYPE(name, T)                                                         \
  TY_ATT_SIMT(name, T, 64)                                                                 \
  TY_ATT_SIMT(name, T, 128)                                                                \
  TY_ATT_SIMT(name, T, 256)                                                                \
  extern "C" __global__ void __launch_bounds__(256) ty_att_delta_##name(                   \
      const T *dout, const T *out, const float *dlse, float *delta, long long rows, int Tq,  \
      int Hq, int D) {                                                                      \
    ty_pdl_enter();                                                                         \
    ty_att_delta<T>(dout, out, dlse, delta, rows, Tq, Hq, D);                              \
  }

TY_ATT_SIMT_DTYPE(f32, float)
TY_ATT_SIMT_DTYPE(bf16, __nv_bfloat16)
TY_ATT_SIMT_DTYPE(f16, __half)

/* Each tensor-core kernel twice: causal (the names without a suffix) and
 * NC = causal=0 (suffix _full: every key below kv_len seen by every row; a
 * compile-time flag, so the causal instances are the code of before). */
#define TY_ATT_TC1(name, T, DIM, NC, sfx)                                                  \
  extern "C" __global__ void __launch_bounds__(32 * TY_ATT_TC_FWD_WARPS,                   \
                                               TY_ATT_TC_FWD_BLOCKS(DIM))                  \
      ty_att_fwd_tc_##name##_d##DIM##sfx(TY_ATT_FWD_PARAMS(T)) {                           \
    ty_pdl_enter();                                                                        \
    ty_att_fwd_tc<T, DIM, NC>(TY_ATT_FWD_ARGS);                                            \
  }                                                                                        \
  extern "C" __global__ void __launch_bounds__(32 * TY_ATT_TC_DQ_WARPS)                    \
      ty_att_dq_tc_##name##_d##DIM##sfx(TY_ATT_DQ_PARAMS(T)) {                             \
    ty_pdl_enter();                                                                        \
    ty_att_dq_tc<T, DIM, NC>(TY_ATT_DQ_ARGS);                                              \
  }                                                                                        \
  extern "C" __global__ void __launch_bounds__(32 * TY_ATT_TC_DKV_WARPS)                   \
      ty_att_dkv_tc_##name##_d##DIM##sfx(TY_ATT_DKV_PARAMS(T)) {                           \
    ty_pdl_enter();                                                                        \
    ty_att_dkv_tc<T, DIM, NC>(TY_ATT_DKV_ARGS);                                            \
  }
#define TY_ATT_TC(name, T, DIM) \
  TY_ATT_TC1(name, T, DIM, false, ) TY_ATT_TC1(name, T, DIM, true, _full)

TY_ATT_TC(bf16, __nv_bfloat16, 64)
TY_ATT_TC(bf16, __nv_bfloat16, 128)
TY_ATT_TC(f16, __half, 64)
TY_ATT_TC(f16, __half, 128)
