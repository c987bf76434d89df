/* Loading the CUDA driver and cuBLASLt at run time (cuda_api.h). */
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TY_CUDA_LIBDIR
#define TY_CUDA_LIBDIR ""
#endif

#define TY_CU_STR2(x) #x
#define TY_CU_STR(x) TY_CU_STR2(x)

/* cuBLASLt's soname carries the toolkit's major version. */
#define TY_CU_BLASLT_SONAME "libcublasLt.so." TY_CU_STR(CUBLAS_VER_MAJOR)

void ty_cu_api_unload(ty_cu_api_t *api) {
  /* The driver stays loaded for the life of the process: it keeps threads
   * and state (primary contexts) that do not survive dlclose. cuBLASLt is
   * a plain library, but it registers its own kernels with the driver, so
   * it stays too. Only the table is cleared. */
  memset(api, 0, sizeof(*api));
}

/* Copies src (NULL: "") into dst of cap > 0 bytes, cut to fit. Not
 * snprintf: gcc's -Wformat-truncation cannot tell which row of a 2-D
 * buffer src is and warns (an error under -Werror). */
static void ty_cu_copy(char *dst, size_t cap, const char *src) {
  if (!src) src = "";
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static void *ty_cu_blaslt_open(ty_cu_api_t *api, char *why, size_t cap) {
  const char *env = getenv("TRAINYARD_CUDA_BLASLT");
  char candidates[3][512];
  int count = 0;
  if (env && env[0]) ty_cu_copy(candidates[count++], sizeof(candidates[0]), env);
  else {
    ty_cu_copy(candidates[count++], sizeof(candidates[0]), TY_CU_BLASLT_SONAME);
    if (TY_CUDA_LIBDIR[0]) {
      snprintf(candidates[count++], sizeof(candidates[0]), "%s/%s", TY_CUDA_LIBDIR,
               TY_CU_BLASLT_SONAME);
    }
  }
  char first_error[256] = "";
  for (int i = 0; i < count; ++i) {
    void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (h) {
      ty_cu_copy(api->blaslt_path, sizeof(api->blaslt_path), candidates[i]);
      return h;
    }
    if (!first_error[0]) ty_cu_copy(first_error, sizeof(first_error), dlerror());
  }
  snprintf(why, cap, "no cuBLASLt (%s); install the CUDA toolkit's libcublas or set "
           "TRAINYARD_CUDA_BLASLT", first_error);
  return NULL;
}

int ty_cu_api_load(ty_cu_api_t *api, char *why, size_t why_capacity) {
  memset(api, 0, sizeof(*api));
  const char *env = getenv("TRAINYARD_CUDA_DRIVER");
  const char *path = env && env[0] ? env : "libcuda.so.1";
  ty_cu_copy(api->driver_path, sizeof(api->driver_path), path);
  api->driver_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!api->driver_handle) {
    snprintf(why, why_capacity, "no CUDA driver (%s)", dlerror());
    return -1;
  }
  /* Each entry by the exact symbol cuda.h's macros name (cuMemAlloc ->
   * cuMemAlloc_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags), so
   * its signature is the one the header declares. (cuGetProcAddress with a
   * base name may return an older signature for some entries.) */
#define TY_CU_RESOLVE(name)                                                                \
  {                                                                                       \
    void *fn = dlsym(api->driver_handle, TY_CU_STR(name));                                \
    if (!fn) {                                                                            \
      snprintf(why, why_capacity, "the CUDA driver %s has no %s", path, TY_CU_STR(name)); \
      ty_cu_api_unload(api);                                                              \
      return -1;                                                                          \
    }                                                                                     \
    *(void **)&api->name = fn;                                                            \
  }
  TY_CU_DRIVER_FUNCTIONS(TY_CU_RESOLVE)
#undef TY_CU_RESOLVE
  CUresult r = api->cuInit(0);
  if (r != CUDA_SUCCESS) {
    char text[256];
    ty_cu_error_text(api, r, text, sizeof(text));
    if (r == CUDA_ERROR_NO_DEVICE) {
      snprintf(why, why_capacity, "no CUDA device (cuInit: %s)", text);
    } else {
      snprintf(why, why_capacity, "the CUDA driver %s failed to initialize (cuInit: %s)", path,
               text);
    }
    ty_cu_api_unload(api);
    return -1;
  }
  /* The plugin needs a driver at least as new as the CUDA it was built
   * with. */
  api->cuDriverGetVersion(&api->driver_version);
  if (api->driver_version < CUDA_VERSION) {
    snprintf(why, why_capacity,
             "the CUDA driver %s supports CUDA %d.%d; this plugin was built with CUDA %d.%d "
             "and needs a driver at least that new",
             path, api->driver_version / 1000, api->driver_version % 1000 / 10,
             CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    ty_cu_api_unload(api);
    return -1;
  }
  api->blaslt_handle = ty_cu_blaslt_open(api, why, why_capacity);
  if (!api->blaslt_handle) {
    ty_cu_api_unload(api);
    return -1;
  }
#define TY_CU_RESOLVE_BLAS(name)                                                           \
  {                                                                                       \
    void *fn = dlsym(api->blaslt_handle, #name);                                          \
    if (!fn) {                                                                            \
      snprintf(why, why_capacity, "cuBLASLt %s has no %s", api->blaslt_path, #name);      \
      ty_cu_api_unload(api);                                                              \
      return -1;                                                                          \
    }                                                                                     \
    *(void **)&api->name = fn;                                                            \
  }
  TY_CU_BLASLT_FUNCTIONS(TY_CU_RESOLVE_BLAS)
#undef TY_CU_RESOLVE_BLAS
  return 0;
}

void ty_cu_error_text(const ty_cu_api_t *api, CUresult r, char *out, size_t capacity) {
  const char *name = NULL, *text = NULL;
  if (api->cuGetErrorName) api->cuGetErrorName(r, &name);
  if (api->cuGetErrorString) api->cuGetErrorString(r, &text);
  if (name && text) {
    snprintf(out, capacity, "%s: %s", name, text);
    return;
  }
  /* A driver that cannot name its errors (the toolkit's stub library). */
  switch (r) {
    case CUDA_ERROR_STUB_LIBRARY:
      snprintf(out, capacity, "CUDA_ERROR_STUB_LIBRARY: the CUDA driver is a stub library");
      break;
    case CUDA_ERROR_NO_DEVICE: snprintf(out, capacity, "CUDA_ERROR_NO_DEVICE"); break;
    default: snprintf(out, capacity, "CUresult %d", (int)r); break;
  }
}

const char *ty_cu_blas_status_name(const ty_cu_api_t *api, cublasStatus_t s) {
  const char *name = api->cublasLtGetStatusString ? api->cublasLtGetStatusString(s) : NULL;
  return name ? name : "unknown cuBLAS status";
}
