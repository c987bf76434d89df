/* A fake CUDA driver (libcuda.so.1's API, reached through cuGetProcAddress
 * as the cuda plugin reaches the real one) over host memory and the CPU
 * emulator's scheduler: one device, "device" pointers are host pointers
 * (allocations 256-byte aligned, as the driver's), streams run everything
 * at once, stream capture records the work and a graph launch replays it.
 * Kernels are found by name among those the family files registered, so
 * the plugin's fatbins are never read. For tests: TRAINYARD_CUDA_DRIVER
 * names this library (and TRAINYARD_CUDA_BLASLT the fake cuBLASLt). */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <functional>
#include <map>
#include <vector>

#include "emu_driver.h"

struct CUctx_st {
  int unused;
};
struct CUstream_st {
  bool capturing;
  std::vector<std::function<CUresult()>> *capture;
};
struct CUmod_st {
  int unused;
};
struct CUfunc_st {
  const ty_emu_kernel *kernel;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
};
struct CUgraph_st {
  std::vector<std::function<CUresult()>> work;
};
struct CUgraphExec_st {
  std::vector<std::function<CUresult()>> work;
};

namespace {

CUctx_st g_context;
CUstream_st g_default_stream;
CUresult g_sticky = CUDA_SUCCESS; /* a failed launch poisons the context */
constexpr size_t kMemory = (size_t)16 << 30;
size_t g_allocated;

CUstream_st *stream_of(CUstream s) { return s ? s : &g_default_stream; }

/* Runs `op` now, or records it when the stream is being captured. */
CUresult submit(CUstream s, std::function<CUresult()> op) {
  CUstream_st *st = stream_of(s);
  if (st->capturing) {
    st->capture->push_back(std::move(op));
    return CUDA_SUCCESS;
  }
  if (g_sticky != CUDA_SUCCESS) return g_sticky;
  CUresult r = op();
  if (r != CUDA_SUCCESS) g_sticky = r;
  return r;
}

}  // namespace

/* Every entry is exported under the name cuda.h's macros give it
 * (cuMemAlloc -> cuMemAlloc_v2, cuGraphInstantiate ->
 * cuGraphInstantiateWithFlags): defining `cuMemAlloc` here defines that
 * symbol with the header's signature. The plugin finds them with dlsym;
 * cuGetProcAddress_v2 below serves base names too. */
#define TY_EMU_API __attribute__((visibility("default")))

extern "C" {

/* For the fake cuBLASLt (linked against this library): queues a matmul on
 * a stream like any other work, so stream capture records it. */
TY_EMU_API CUresult ty_emu_stream_submit(
    CUstream s, std::function<CUresult()> *op) {
  return submit(s, std::move(*op));
}

TY_EMU_API CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }

TY_EMU_API CUresult cuDriverGetVersion(int *v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

static const char *error_name(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_LAUNCH_FAILED: return "CUDA_ERROR_LAUNCH_FAILED";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return "CUDA_ERROR_UNKNOWN";
  }
}
TY_EMU_API CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = error_name(r);
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == CUDA_ERROR_LAUNCH_FAILED ? "a kernel failed in the CPU emulator (see stderr)"
                                     : "error in the CPU emulator";
  return CUDA_SUCCESS;
}

TY_EMU_API CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuDeviceGetName(char *name, int len, CUdevice) {
  snprintf(name, (size_t)len, "NVIDIA Trainyard CPU emulator");
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuDeviceTotalMem(size_t *bytes, CUdevice) {
  *bytes = kMemory;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    /* Few SMs keep the grids (capped at a multiple of this) small. */
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 2; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = 227 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1000000; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    default: *v = 1; break;
  }
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) {
  *c = &g_context;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
TY_EMU_API CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
TY_EMU_API CUresult cuCtxGetCurrent(CUcontext *c) {
  *c = &g_context;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuCtxSynchronize(void) { return g_sticky; }

TY_EMU_API CUresult cuMemGetInfo(size_t *free_bytes, size_t *total) {
  *total = kMemory;
  *free_bytes = kMemory - g_allocated;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  void *q = NULL;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > kMemory - g_allocated || posix_memalign(&q, 256, bytes) != 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g_allocated += bytes;
  /* Garbage, as device memory holds: kernels must not rely on zeros. */
  memset(q, 0xA5, bytes);
  *p = (CUdeviceptr)(uintptr_t)q;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuMemFree(CUdeviceptr p) {
  free((void *)(uintptr_t)p); /* the accounting keeps the peak: fine for tests */
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuMemAllocHost(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TY_EMU_API CUresult cuMemFreeHost(void *p) {
  free(p);
  return CUDA_SUCCESS;
}
/* Mapped pinned memory: host memory is all there is, so the device address
 * is the host one (as unified addressing makes it on a GPU). */
TY_EMU_API CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
  (void)flags;
  *p = malloc(bytes ? bytes : 1);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
TY_EMU_API CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned int flags) {
  (void)flags;
  *d = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  return submit(s, [=] {
    memcpy((void *)(uintptr_t)dst, src, n);
    return CUDA_SUCCESS;
  });
}
TY_EMU_API CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  return submit(s, [=] {
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
  });
}
TY_EMU_API CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return submit(s, [=] {
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return CUDA_SUCCESS;
  });
}
TY_EMU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return submit(s, [=] {
    memset((void *)(uintptr_t)dst, v, n);
    return CUDA_SUCCESS;
  });
}

TY_EMU_API CUresult cuStreamCreate(CUstream *s, unsigned int) {
  *s = new CUstream_st{false, nullptr};
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuStreamDestroy(CUstream s) {
  if (s && s != &g_default_stream) delete s;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuStreamSynchronize(CUstream) { return g_sticky; }

TY_EMU_API CUresult cuModuleLoadData(CUmodule *m, const void *) {
  *m = new CUmod_st{0};
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuModuleUnload(CUmodule m) {
  delete m;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule, const char *name) {
  /* One handle per kernel for the life of the process (the driver library
   * stays loaded), whichever module asks. */
  static std::map<const ty_emu_kernel *, CUfunc_st> functions;
  const ty_emu_kernel *k = ty_emu_find(name);
  if (!k) return CUDA_ERROR_NOT_FOUND;
  CUfunc_st &fn = functions[k];
  fn.kernel = k;
  *f = &fn;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) {
  return CUDA_SUCCESS;
}

TY_EMU_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                   CUstream s, void **params, void **extra) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  const ty_emu_kernel *k = f->kernel;
  if (extra) { /* CU_LAUNCH_PARAM_BUFFER_POINTER, p, CU_LAUNCH_PARAM_BUFFER_SIZE, &n, END */
    const unsigned char *buffer = NULL;
    size_t size = 0;
    for (void **e = extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = (const unsigned char *)e[1];
      else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *(const size_t *)e[1];
    }
    /* A copy, as the driver takes one: the caller reuses the block. */
    std::vector<unsigned char> copy(buffer, buffer + size);
    copy.resize(size + 64, 0); /* reads of a short block stay in bounds */
    return submit(s, [=] {
      char why[512];
      if (ty_emu_launch(k, grid, block, shared, copy.data(), NULL, why, sizeof(why))) {
        return CUDA_SUCCESS;
      }
      fprintf(stderr, "cuda emulator: %s\n", why);
      return CUDA_ERROR_LAUNCH_FAILED;
    });
  }
  if (stream_of(s)->capturing) return CUDA_ERROR_NOT_SUPPORTED; /* sizes unknown */
  return submit(s, [=] {
    char why[512];
    if (ty_emu_launch(k, grid, block, shared, NULL, params, why, sizeof(why))) return CUDA_SUCCESS;
    fprintf(stderr, "cuda emulator: %s\n", why);
    return CUDA_ERROR_LAUNCH_FAILED;
  });
}

/* The attributes (programmatic dependent launch among them) change when
 * a kernel may start, not what it computes: the emulator runs launches in
 * stream order, as the plain form; the trace names the programmatic ones
 * (when they are queued: once per capture). */
TY_EMU_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                     void **extra) {
  if (!config) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
        config->attrs[i].value.programmaticStreamSerializationAllowed && ty_emu_trace()) {
      fprintf(stderr, "emu-trace: programmatic dependent launch of %s\n", f->kernel->name);
    }
  }
  return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                        config->blockDimX, config->blockDimY, config->blockDimZ,
                        config->sharedMemBytes, config->hStream, params, extra);
}

TY_EMU_API CUresult cuEventCreate(CUevent *e, unsigned int) {
  *e = new CUevent_st{std::chrono::steady_clock::now()};
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuEventDestroy(CUevent e) {
  delete e;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuEventRecord(CUevent e, CUstream s) {
  return submit(s, [=] {
    e->at = std::chrono::steady_clock::now();
    return CUDA_SUCCESS;
  });
}
TY_EMU_API CUresult cuEventSynchronize(CUevent) { return g_sticky; }
TY_EMU_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return CUDA_SUCCESS;
}

TY_EMU_API CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode) {
  CUstream_st *st = stream_of(s);
  if (st->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  st->capturing = true;
  st->capture = new std::vector<std::function<CUresult()>>();
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  CUstream_st *st = stream_of(s);
  if (!st->capturing) return CUDA_ERROR_ILLEGAL_STATE;
  *g = new CUgraph_st{std::move(*st->capture)};
  delete st->capture;
  st->capture = nullptr;
  st->capturing = false;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuGraphInstantiate(CUgraphExec *x, CUgraph g, unsigned long long) {
  *x = new CUgraphExec_st{g->work};
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuGraphLaunch(CUgraphExec x, CUstream s) {
  for (auto &op : x->work) {
    CUresult r = submit(s, op);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuGraphExecDestroy(CUgraphExec x) {
  delete x;
  return CUDA_SUCCESS;
}
TY_EMU_API CUresult cuGraphDestroy(CUgraph g) {
  delete g;
  return CUDA_SUCCESS;
}

/* cuGetProcAddress's table: base name -> the entry cuda.h's macro names. */
#define TY_EMU_ENTRY(name) {#name, (void *)&name},
static const struct {
  const char *name;
  void *fn;
} kEntries[] = {
    TY_EMU_ENTRY(cuInit) TY_EMU_ENTRY(cuDriverGetVersion) TY_EMU_ENTRY(cuGetErrorName)
    TY_EMU_ENTRY(cuGetErrorString) TY_EMU_ENTRY(cuDeviceGetCount) TY_EMU_ENTRY(cuDeviceGet)
    TY_EMU_ENTRY(cuDeviceGetName) TY_EMU_ENTRY(cuDeviceTotalMem)
    TY_EMU_ENTRY(cuDeviceGetAttribute) TY_EMU_ENTRY(cuDevicePrimaryCtxRetain)
    TY_EMU_ENTRY(cuDevicePrimaryCtxRelease) TY_EMU_ENTRY(cuCtxSetCurrent)
    TY_EMU_ENTRY(cuCtxGetCurrent) TY_EMU_ENTRY(cuCtxSynchronize) TY_EMU_ENTRY(cuMemGetInfo)
    TY_EMU_ENTRY(cuMemAlloc) TY_EMU_ENTRY(cuMemFree) TY_EMU_ENTRY(cuMemAllocHost)
    TY_EMU_ENTRY(cuMemFreeHost) TY_EMU_ENTRY(cuMemHostAlloc)
    TY_EMU_ENTRY(cuMemHostGetDevicePointer) TY_EMU_ENTRY(cuMemcpyHtoDAsync) TY_EMU_ENTRY(cuMemcpyDtoHAsync)
    TY_EMU_ENTRY(cuMemcpyDtoDAsync) TY_EMU_ENTRY(cuMemsetD8Async) TY_EMU_ENTRY(cuStreamCreate)
    TY_EMU_ENTRY(cuStreamDestroy) TY_EMU_ENTRY(cuStreamSynchronize)
    TY_EMU_ENTRY(cuModuleLoadData) TY_EMU_ENTRY(cuModuleUnload)
    TY_EMU_ENTRY(cuModuleGetFunction) TY_EMU_ENTRY(cuFuncSetAttribute)
    TY_EMU_ENTRY(cuLaunchKernel) TY_EMU_ENTRY(cuLaunchKernelEx) TY_EMU_ENTRY(cuEventCreate) TY_EMU_ENTRY(cuEventDestroy)
    TY_EMU_ENTRY(cuEventRecord) TY_EMU_ENTRY(cuEventSynchronize)
    TY_EMU_ENTRY(cuEventElapsedTime) TY_EMU_ENTRY(cuStreamBeginCapture)
    TY_EMU_ENTRY(cuStreamEndCapture) TY_EMU_ENTRY(cuGraphInstantiate)
    TY_EMU_ENTRY(cuGraphLaunch) TY_EMU_ENTRY(cuGraphExecDestroy) TY_EMU_ENTRY(cuGraphDestroy)};

TY_EMU_API CUresult cuGetProcAddress_v2(
    const char *symbol, void **fn, int version, cuuint64_t flags,
    CUdriverProcAddressQueryResult *status) {
  (void)version;
  (void)flags;
  for (const auto &e : kEntries) {
    if (strcmp(e.name, symbol) == 0) {
      *fn = e.fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *fn = NULL;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
