/* Which attention kernels run for a node, and their launch shapes: a pure
 * function of dtype and shapes, so cuda_attention.c (the builder) and the
 * CPU emulation harness (tests/cuda/attention_emu.cc) launch exactly the
 * same kernels. Threading: pure; safe from any thread.
 *
 * The rule: the tensor-core kernels run for bf16 and f16 with head dim 64
 * or 128 (any T, S, window or kv_len; tiles at the edges are masked); every
 * other case — f32 (so f32 attention stays exact f32), other head dims up
 * to TY_ATT_MAX_HEAD_DIM — runs the generic kernels. `mode` narrows the
 * choice (ty_cu_att_mode_t). */
#ifndef TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_
#define TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_cu_att_kernel_e {
  TY_CU_ATT_FWD = 0, /* out, lse */
  TY_CU_ATT_DELTA,   /* delta = rowsum(dout * out), f32 [B, Hq, T] scratch */
  TY_CU_ATT_DQ,      /* dq (generic path) */
  TY_CU_ATT_DKV,     /* dk, dv (generic path) */
  TY_CU_ATT_BWD,     /* dq, dk, dv in one kernel (tensor-core path) */
  TY_CU_ATT_KERNELS_
} ty_cu_att_kernel_t;

/* Which kernels may run: AUTO the fastest that applies, GENERIC only the
 * f32-math ones (TRAINYARD_CUDA_ATTENTION=generic), SPLIT the tensor-core
 * forward with the split backward (dQ and dK/dV kernels, no scratch) where
 * the tensor cores apply. */
typedef enum ty_cu_att_mode_e {
  TY_CU_ATT_AUTO = 0,
  TY_CU_ATT_GENERIC,
  TY_CU_ATT_SPLIT,
} ty_cu_att_mode_t;

typedef struct ty_cu_att_launch_t {
  /* extern "C" name in kernels/attention.cu (static storage); NULL for a
   * kernel the path does not use */
  const char *kernel;
  uint32_t grid[3];
  uint32_t threads;
  uint32_t smem; /* bytes of dynamic shared memory */
} ty_cu_att_launch_t;

typedef struct ty_cu_att_plan_t {
  /* the tensor-core kernels. The backward is delta then BWD (with
   * dq_acc_bytes of f32 scratch and `counters` int32 turn counters, zeroed
   * before it) where launch[BWD].kernel is set; otherwise delta, DQ, DKV */
  bool fast;
  uint64_t dq_acc_bytes;
  uint64_t counters;
  ty_cu_att_launch_t launch[TY_CU_ATT_KERNELS_];
} ty_cu_att_plan_t;

/* Fills *out for q [B, T, Hq, D] and k/v [B, S, Hkv, D] of `dtype`.
 * Returns NULL, or (nothing filled) a sentence saying why no kernel fits:
 * the dtype, a head dim above TY_ATT_MAX_HEAD_DIM, a grid dimension out of
 * range. Sizes must be positive. */
const char *ty_cu_att_plan(ty_dtype_t dtype, int64_t B, int64_t T, int64_t S, int64_t Hq,
                           int64_t Hkv, int64_t D, ty_cu_att_mode_t mode, ty_cu_att_plan_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_ */
