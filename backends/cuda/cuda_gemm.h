/* Matmuls through cuBLASLt for the cuda executor (cuda_gemm.c): the
 * `matmul` op becomes one or a few GEMM commands whose descriptors, layouts
 * and algorithm are chosen at compile time; execute only patches pointers. */
#ifndef TY_BACKENDS_CUDA_CUDA_GEMM_H_
#define TY_BACKENDS_CUDA_CUDA_GEMM_H_

#include <stdbool.h>

#include "backends/cuda/cuda_exec.h"

/* The device of an executable, and the address a reference resolves to in
 * the current run (cuda_graph.c). */
CUdeviceptr ty_cu_ref_address(const ty_cu_exec_t *e, ty_cu_ref_t r);

/* Re-resolves the command's pointers; true when any changed since the last
 * run (the captured CUDA graph is then stale). */
bool ty_cu_gemm_patch(ty_cu_exec_t *e, ty_cu_gemm_t *gemm);
/* Queues the matmul on the device's stream. */
ty_abi_status_t ty_cu_gemm_run(ty_cu_exec_t *e, const ty_cu_cmd_t *c);
void ty_cu_gemm_free(ty_cu_api_t *api, ty_cu_gemm_t *gemm);

#endif /* TY_BACKENDS_CUDA_CUDA_GEMM_H_ */
