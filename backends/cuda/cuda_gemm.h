/* Matmuls through cuBLASLt for the cuda executor (cuda_gemm.c): the
 * `matmul` op becomes one or a few GEMM commands whose descriptors, layouts
 * and algorithm are chosen at compile time; execute only patches pointers. */
#ifndef TY_BACKENDS_CUDA_CUDA_GEMM_H_
#define TY_BACKENDS_CUDA_CUDA_GEMM_H_

#include <stdbool.h>

#include "cuda_exec.h"

/* The device of an executable, and the address a reference resolves to in
 * the current run (cuda_execute.c). */
CUdeviceptr ty_cu_ref_address(const ty_cu_exec_t *e, ty_dev_ref_t r);

/* Re-resolves the command's pointers; true when any changed since the last
 * run (the captured CUDA graph is then stale). */
bool ty_cu_gemm_patch(ty_cu_exec_t *e, ty_cu_gemm_t *gemm);
/* Queues the matmul on the device's stream. */
ty_abi_status_t ty_cu_gemm_run(ty_cu_exec_t *e, const ty_cu_cmd_t *c);
void ty_cu_gemm_free(ty_cu_api_t *api, ty_cu_gemm_t *gemm);

/* A GEMM on any operands (the fused ops' chunks: linear_cross_entropy):
 * row-major c[M, N] (+)= op(a) op(b), a and b of ab_dtype, c of c_dtype
 * (ab_dtype, or f32 from bf16/f16 products), leading dimensions in
 * elements, `count` strided batches (sa, sb, sc elements apart; count 1
 * for one). f32 accumulation; `accumulate` adds to c (beta = 1); with
 * has_cin, c = cin + op(a) op(b) instead (cin of c's dtype and layout, read
 * as cuBLASLt's C while c is its D). */
typedef struct ty_cu_gemm_spec_t {
  ty_dev_ref_t a, b, c, bias, cin, aux;
  bool has_cin;
  ty_cu_gemm_epi_t epilogue; /* cuda_fuse.h; aux has c's dtype and layout */
  ty_dtype_t ab_dtype, c_dtype;
  int64_t M, N, K;
  bool ta, tb, has_bias, accumulate;
  int64_t lda, ldb, ldc;
  int32_t count;
  int64_t sa, sb, sc;
  /* The bias gradient (one GEMM, count 1): bgrad (c's dtype) = the sum of
   * operand a (bgrad_of 0: [M]) or b (1: [N]) over the K rows, written by
   * cuBLASLt's BGRADB/BGRADA epilogue, or by a column sum after the GEMM
   * where cuBLASLt has no algorithm with it. */
  ty_dev_ref_t bgrad;
  bool has_bgrad;
  uint32_t bgrad_of;
} ty_cu_gemm_spec_t;
void ty_cu_gemm_emit(ty_cu_build_t *b, const ty_cu_gemm_spec_t *spec);

/* Whether the few-row GEMV kernels (kernels/gemv.cu) run at all (for the
 * GEMV_GROUP fusions at least): unless TRAINYARD_CUDA_GEMV=0; never under
 * deterministic=1. */
bool ty_cu_gemv_on(void);
/* TRAINYARD_CUDA_GEMV's value when it is none of group, all, nk, 1 or 0
 * (compile refuses it by name), else NULL. */
const char *ty_cu_gemv_bad_setting(void);

#endif /* TY_BACKENDS_CUDA_CUDA_GEMM_H_ */
