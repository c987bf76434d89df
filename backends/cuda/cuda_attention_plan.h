/* Which attention kernels run for a node, and their launch shapes: a pure
 * function of dtype and shapes, so cuda_attention.c (the builder) and the
 * CPU emulation harness (tests/cuda/attention_emu.cc) launch exactly the
 * same kernels. Threading: pure; safe from any thread.
 *
 * The rule: the tensor-core kernels run for bf16 and f16 with head dim 64
 * or 128 (any T, S, window or kv_len; tiles at the edges are masked) —
 * the wgmma ones (kernels/attention_sm90.cu) for head dim 64 and at least
 * 64 query rows (T) where the caller allows them (a compute capability 9.0
 * card), the mma.sync ones otherwise; every other case — f32 (so f32 attention stays exact f32),
 * other head dims up to TY_ATT_MAX_HEAD_DIM — runs the generic kernels.
 * `best` caps the choice (TRAINYARD_CUDA_ATTENTION=generic or mma, or a
 * card without wgmma). `deterministic` (the compile option deterministic=1)
 * keeps one path for every T: never wgmma, whose choice depends on T, so
 * a decode row (T = 1) and the same row in a prefill block run the same
 * mma.sync kernel, whose key tiles are anchored at absolute positions
 * (cuda_exec.h "Deterministic mode"). */
#ifndef TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_
#define TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_cu_att_kernel_e {
  TY_CU_ATT_FWD = 0, /* out, lse */
  TY_CU_ATT_DELTA,   /* delta = rowsum(dout * out), f32 [B, Hq, T] scratch */
  TY_CU_ATT_DQ,      /* dq */
  TY_CU_ATT_DKV,     /* dk, dv */
  TY_CU_ATT_KERNELS_
} ty_cu_att_kernel_t;

/* The kernel paths, slowest first. */
typedef enum ty_cu_att_path_e {
  TY_CU_ATT_GENERIC = 0, /* attention_simt.cuh: f32 FMA, any dtype */
  TY_CU_ATT_MMA,         /* attention_tc.cuh: mma.sync, sm_80+ */
  TY_CU_ATT_WGMMA,       /* attention_sm90.cu: wgmma, compute capability 9.0 */
} ty_cu_att_path_t;

typedef struct ty_cu_att_launch_t {
  const char *kernel; /* extern "C" name in kernels/attention.cu (static storage) */
  bool sm90;          /* ... or in kernels/attention_sm90.cu */
  uint32_t grid[3];
  uint32_t threads;
  uint32_t smem; /* bytes of dynamic shared memory */
} ty_cu_att_launch_t;

typedef struct ty_cu_att_plan_t {
  ty_cu_att_path_t path; /* of the forward, dQ and dK/dV kernels */
  ty_cu_att_launch_t launch[TY_CU_ATT_KERNELS_];
} ty_cu_att_plan_t;

/* Fills *out for q [B, T, Hq, D] and k/v [B, S, Hkv, D] of `dtype`.
 * causal=0 (context parallel's blocks of earlier keys) takes the mma.sync
 * kernels' _full instances where the tensor cores apply (never wgmma, whose
 * kernels are causal-only), else the generic ones, which read it from
 * window -1 (attention_simt.cuh). Returns NULL, or (nothing filled) a
 * sentence saying why no kernel fits: the dtype, a head dim above
 * TY_ATT_MAX_HEAD_DIM, a grid dimension out of range. Sizes must be
 * positive. */
const char *ty_cu_att_plan(ty_dtype_t dtype, int64_t B, int64_t T, int64_t S, int64_t Hq,
                           int64_t Hkv, int64_t D, ty_cu_att_path_t best, bool deterministic,
                           bool causal, ty_cu_att_plan_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_ */
