/* Which attention kernels run for a node, and their launch shapes: a pure
 * function of dtype and shapes, so cuda_attention.c (the builder) and the
 * CPU emulation harness (tests/cuda/attention_emu.cc) launch exactly the
 * same kernels. Threading: pure; safe from any thread.
 *
 * The rule: the tensor-core kernels run for bf16 and f16 with head dim 64
 * or 128 (any T, S, window or kv_len; tiles at the edges are masked); every
 * other case — f32 (so f32 attention stays exact f32), other head dims up
 * to TY_ATT_MAX_HEAD_DIM — runs the generic kernels. allow_fast = false
 * forces the generic kernels (TRAINYARD_CUDA_ATTENTION=generic). */
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
  TY_CU_ATT_DQ,      /* dq */
  TY_CU_ATT_DKV,     /* dk, dv */
  TY_CU_ATT_KERNELS_
} ty_cu_att_kernel_t;

typedef struct ty_cu_att_launch_t {
  const char *kernel; /* extern "C" name in kernels/attention.cu (static storage) */
  uint32_t grid[3];
  uint32_t threads;
  uint32_t smem; /* bytes of dynamic shared memory */
} ty_cu_att_launch_t;

typedef struct ty_cu_att_plan_t {
  bool fast; /* the tensor-core kernels */
  ty_cu_att_launch_t launch[TY_CU_ATT_KERNELS_];
} ty_cu_att_plan_t;

/* Fills *out for q [B, T, Hq, D] and k/v [B, S, Hkv, D] of `dtype`.
 * Returns NULL, or (nothing filled) a sentence saying why no kernel fits:
 * the dtype, a head dim above TY_ATT_MAX_HEAD_DIM, a grid dimension out of
 * range. Sizes must be positive. */
const char *ty_cu_att_plan(ty_dtype_t dtype, int64_t B, int64_t T, int64_t S, int64_t Hq,
                           int64_t Hkv, int64_t D, bool allow_fast, ty_cu_att_plan_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_CUDA_CUDA_ATTENTION_PLAN_H_ */
