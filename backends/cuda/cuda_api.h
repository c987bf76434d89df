/* The CUDA driver and cuBLASLt as the cuda plugin sees them: ONE table of
 * entry points, resolved at backend_create with dlopen and dlsym —
 * libcuda.so.1 by the versioned names cuda.h's macros expand to (so every
 * entry has the signature this plugin's cuda.h declares),
 * libcublasLt.so.<major> by name — so that a machine
 * without a driver or without cuBLASLt loads the plugin and reports
 * UNAVAILABLE with the reason instead of failing to dlopen it. The plugin
 * links neither library and never calls the CUDA runtime API: cuda.h and
 * cublasLt.h are used for their types only.
 *
 * Thread-safe: the table is immutable after ty_cu_api_load. */
#ifndef TY_BACKENDS_CUDA_CUDA_API_H_
#define TY_BACKENDS_CUDA_CUDA_API_H_

#include <cublasLt.h>
#include <cuda.h>
#include <stddef.h>

/* Every driver entry point the plugin uses (names as cuda.h spells them:
 * macros such as cuMemAlloc -> cuMemAlloc_v2 pick the versioned entry, and
 * the loader looks up the expanded name). */
#define TY_CU_DRIVER_FUNCTIONS(X)                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                    \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceTotalMem)                 \
  X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)          \
  X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuMemGetInfo) X(cuMemAlloc)   \
  X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost) X(cuMemHostAlloc)                         \
  X(cuMemHostGetDevicePointer) X(cuMemcpyHtoDAsync)                                        \
  X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuStreamCreate)           \
  X(cuStreamDestroy) X(cuStreamSynchronize) X(cuModuleLoadData) X(cuModuleUnload)          \
  X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuLaunchKernel) X(cuLaunchKernelEx)       \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)                 \
  X(cuEventElapsedTime) X(cuStreamBeginCapture) X(cuStreamEndCapture)                     \
  X(cuGraphInstantiate) X(cuGraphLaunch)                                                   \
  X(cuGraphExecDestroy) X(cuGraphDestroy)

#define TY_CU_BLASLT_FUNCTIONS(X)                                                          \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtGetStatusString)    \
  X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                                 \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)                          \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)                       \
  X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                     \
  X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic)                \
  X(cublasLtMatmulAlgoConfigGetAttribute) X(cublasLtMatmulAlgoConfigSetAttribute)          \
  X(cublasLtMatmulAlgoCheck) X(cublasLtMatmul)

#define TY_CU_MEMBER(name) __typeof__(&name) name;

typedef struct ty_cu_api_t {
  void *driver_handle;
  void *blaslt_handle;
  int driver_version; /* cuDriverGetVersion: 13000 for CUDA 13.0 */
  char driver_path[256];
  char blaslt_path[512];
  TY_CU_DRIVER_FUNCTIONS(TY_CU_MEMBER)
  TY_CU_BLASLT_FUNCTIONS(TY_CU_MEMBER)
} ty_cu_api_t;

/* Loads the driver (TRAINYARD_CUDA_DRIVER names another file than
 * libcuda.so.1) and cuBLASLt (TRAINYARD_CUDA_BLASLT, then libcublasLt.so.13,
 * then the CUDA prefix the plugin was built against), and calls cuInit.
 * Returns 0, or -1 with the reason in `why` (e.g. "no CUDA driver
 * (libcuda.so.1: cannot open shared object file: ...)"); the api is then
 * unloaded. */
int ty_cu_api_load(ty_cu_api_t *api, char *why, size_t why_capacity);
void ty_cu_api_unload(ty_cu_api_t *api);

/* "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered" */
void ty_cu_error_text(const ty_cu_api_t *api, CUresult r, char *out, size_t capacity);
/* "CUBLAS_STATUS_NOT_SUPPORTED" */
const char *ty_cu_blas_status_name(const ty_cu_api_t *api, cublasStatus_t s);

#endif /* TY_BACKENDS_CUDA_CUDA_API_H_ */
