/* The cuda backend: the CUDA driver loaded at run time, every CUDA device as
 * cuda:N, one stream per opened device, buffers as device allocations with
 * transfers staged through pinned host memory. Graphs are compiled
 * (cuda_compile.c) and run (cuda_execute.c) on kernels compiled into
 * embedded fatbins (cuda_modules.c) and cuBLASLt matmuls (cuda_gemm.c).
 *
 * Device URI options (docs/cuda.md): graphs=0|1 (replay each executable as
 * a captured CUDA graph; default 1), tf32=0|1 (f32 matmuls on TF32 tensor
 * cores; default 0, exact f32), memory_limit=BYTES[KiB|MiB|GiB] (allocate
 * at most that much through this handle, as a smaller card would). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainyard/device_exec.h"
#include "trainyard/plugin_status.h"
#include "cuda_internal.h"

#define TY_CU_STAGING_BYTES (32u << 20)
#define TY_CU_RING_BYTES (1u << 20)      /* see ty_abi_device_s.ring */
#define TY_CU_RING_WRITE_MAX (64u << 10) /* larger writes go through staging */
#define TY_CU_WORKSPACE_BYTES (64u << 20)

ty_abi_status_t ty_cu_driver_error(const ty_abi_device_t *d, const char *what, CUresult r) {
  char text[256];
  ty_cu_error_text(&d->backend->api, r, text, sizeof(text));
  ty_code_t code = TY_CODE_INTERNAL;
  const char *hint = "";
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY: code = TY_CODE_RESOURCE_EXHAUSTED; break;
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
    case CUDA_ERROR_SYSTEM_NOT_READY:
    case CUDA_ERROR_NO_DEVICE:
      code = TY_CODE_UNAVAILABLE;
      hint = " (the device was lost or is unavailable)";
      break;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
      hint = " (the context is unusable now: every later call on this device fails; "
             "the process must end)";
      break;
    default: break;
  }
  return ty_plugin_error(code, "%s: %s failed: %s%s", d->label, what, text, hint);
}

ty_abi_status_t ty_cu_enter(ty_abi_device_t *d) {
  CUresult r = d->api->cuCtxSetCurrent(d->slot->context);
  return r == CUDA_SUCCESS ? NULL : ty_cu_driver_error(d, "cuCtxSetCurrent", r);
}

static void ty_cu_format_bytes(uint64_t bytes, char *out, size_t cap) {
  if (bytes >= (1ull << 30)) snprintf(out, cap, "%.2f GiB", (double)bytes / (1ull << 30));
  else if (bytes >= (1ull << 20)) snprintf(out, cap, "%.1f MiB", (double)bytes / (1ull << 20));
  else snprintf(out, cap, "%llu bytes", (unsigned long long)bytes);
}

ty_abi_status_t ty_cu_alloc(ty_abi_device_t *d, uint64_t bytes, const char *what,
                            CUdeviceptr *out) {
  *out = 0;
  if (bytes == 0) return NULL;
  pthread_mutex_lock(&d->alloc_lock);
  const uint64_t limit = d->options.memory_limit;
  const bool over = limit && (bytes > limit || d->allocated > limit - bytes);
  CUresult r = CUDA_SUCCESS;
  if (!over) {
    r = d->api->cuMemAlloc(out, (size_t)bytes);
    if (r == CUDA_SUCCESS) {
      d->allocated += bytes;
      if (d->allocated > d->peak_allocated) d->peak_allocated = d->allocated;
    }
  }
  uint64_t held = d->allocated;
  pthread_mutex_unlock(&d->alloc_lock);
  if (!over && r == CUDA_SUCCESS) return NULL;
  if (!over && r != CUDA_ERROR_OUT_OF_MEMORY) {
    char text[160];
    snprintf(text, sizeof(text), "cuMemAlloc of %llu bytes for %s", (unsigned long long)bytes,
             what);
    return ty_cu_driver_error(d, text, r);
  }
  size_t free_bytes = 0, total = 0;
  d->api->cuMemGetInfo(&free_bytes, &total);
  char asked[32], fr[32], tot[32], hd[32], lim[32];
  ty_cu_format_bytes(bytes, asked, sizeof(asked));
  ty_cu_format_bytes(free_bytes, fr, sizeof(fr));
  ty_cu_format_bytes(total, tot, sizeof(tot));
  ty_cu_format_bytes(held, hd, sizeof(hd));
  ty_cu_format_bytes(limit, lim, sizeof(lim));
  if (over) {
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                       "%s: out of device memory for %s: %s asked, %s already held of the "
                       "%s memory_limit (the card has %s free of %s)",
                       d->label, what, asked, hd, lim, fr, tot);
  }
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                     "%s: out of device memory for %s: %s asked, %s free of %s (%s held by "
                     "this process's handle)",
                     d->label, what, asked, fr, tot, hd);
}

void ty_cu_free(ty_abi_device_t *d, CUdeviceptr ptr, uint64_t bytes) {
  if (!ptr) return;
  d->api->cuMemFree(ptr);
  pthread_mutex_lock(&d->alloc_lock);
  d->allocated -= bytes <= d->allocated ? bytes : d->allocated;
  pthread_mutex_unlock(&d->alloc_lock);
}

/* ---- probing ---- */

static int ty_cu_attr(ty_cu_api_t *api, CUdevice dev, CUdevice_attribute a) {
  int v = 0;
  return api->cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : 0;
}

/* FP32 lanes per SM, for the peak the trainer's MFU divides by. */
static int ty_cu_fp32_lanes(int major, int minor) {
  if (major == 8 && minor == 0) return 64;
  if (major >= 8) return 128;
  return 64;
}

static void ty_cu_probe(ty_cu_api_t *api, ty_cu_slot_t *s) {
  ty_abi_device_info_t *info = &s->base.info;
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  api->cuDeviceGetName(info->name, (int)sizeof(info->name), s->device);
  snprintf(info->vendor, sizeof(info->vendor), "NVIDIA");
  snprintf(info->driver_version, sizeof(info->driver_version), "CUDA driver %d.%d",
           api->driver_version / 1000, api->driver_version % 1000 / 10);
  info->kind = TY_DEVICE_KIND_GPU;
  s->cc_major = ty_cu_attr(api, s->device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  s->cc_minor = ty_cu_attr(api, s->device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  s->sm_count = ty_cu_attr(api, s->device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  s->max_shared_optin =
      ty_cu_attr(api, s->device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  info->compute_units = (uint32_t)s->sm_count;
  size_t total = 0;
  api->cuDeviceTotalMem(&total, s->device);
  info->memory_bytes = total;
  info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                     TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                     TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                     TY_DTYPE_BIT(TY_DTYPE_U8);
  /* Dense f32 FMA peak at the boost clock the driver reports. */
  const int clock_khz = ty_cu_attr(api, s->device, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  info->peak_f32_gflops = (double)s->sm_count * ty_cu_fp32_lanes(s->cc_major, s->cc_minor) *
                          2.0 * (double)clock_khz * 1e-6;
  snprintf(info->api_version, sizeof(info->api_version),
           "CUDA %d.%d driver, compute capability %d.%d (plugin built with CUDA %d.%d)",
           api->driver_version / 1000, api->driver_version % 1000 / 10, s->cc_major,
           s->cc_minor, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
  const int l2 = ty_cu_attr(api, s->device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  snprintf(info->extensions, sizeof(info->extensions),
           "sm_%d%d sms=%d l2_bytes=%d shared_optin_bytes=%d clock_khz=%d fatbin=%s",
           s->cc_major, s->cc_minor, s->sm_count, l2, s->max_shared_optin, clock_khz,
           ty_cu_fatbin_targets());
}

/* ---- backend (the core's backend base, device_backend.h) ---- */

static ty_abi_backend_t *ty_cu_backend_of(ty_dev_backend_t *base) {
  return (ty_abi_backend_t *)(void *)base; /* the base is its first member */
}

static int ty_cu_backend_load(ty_dev_backend_t *base, char *why, size_t capacity) {
  return ty_cu_api_load(&ty_cu_backend_of(base)->api, why, capacity);
}

static void ty_cu_backend_unload(ty_dev_backend_t *base) {
  ty_cu_api_unload(&ty_cu_backend_of(base)->api);
}

static void ty_cu_slot_release(ty_dev_backend_t *base, ty_dev_slot_t *slot) {
  ty_cu_api_t *api = &ty_cu_backend_of(base)->api;
  ty_cu_slot_t *s = (ty_cu_slot_t *)(void *)slot;
  if (s->context) {
    api->cuCtxSetCurrent(s->context);
    ty_cu_modules_unload(api, s);
    api->cuDevicePrimaryCtxRelease(s->device);
  }
}

static ty_abi_status_t ty_cu_enumerate(ty_dev_backend_t *base) {
  ty_cu_api_t *api = &ty_cu_backend_of(base)->api;
  int count = 0;
  CUresult r = api->cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count <= 0) {
    char text[256] = "no device";
    if (r != CUDA_SUCCESS) ty_cu_error_text(api, r, text, sizeof(text));
    return ty_plugin_error(TY_CODE_UNAVAILABLE, "cuda: no CUDA device (%s)", text);
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device;
    if (api->cuDeviceGet(&device, i) != CUDA_SUCCESS) continue;
    ty_dev_slot_t *slot = NULL;
    ty_abi_status_t st = ty_dev_backend_slot_add(base, &slot);
    if (st) return st;
    ty_cu_slot_t *s = (ty_cu_slot_t *)(void *)slot;
    s->device = device;
    ty_cu_probe(api, s);
  }
  return NULL;
}

static const ty_dev_backend_class_t ty_cu_backend_class = {
    .name = "cuda",
    .backend_size = sizeof(ty_abi_backend_t),
    .slot_size = sizeof(ty_cu_slot_t),
    .load = ty_cu_backend_load,
    .enumerate = ty_cu_enumerate,
    .slot_release = ty_cu_slot_release,
    .unload = ty_cu_backend_unload,
};

static ty_abi_status_t ty_cu_backend_create(const ty_abi_backend_create_args_t *args,
                                            ty_abi_backend_t **out_backend) {
  return ty_dev_backend_create(&ty_cu_backend_class, args, out_backend);
}

/* ---- devices ---- */

/* "24GiB", "512MiB", "1000000": bytes; -1 when malformed. */
static int ty_cu_parse_bytes(const char *text, uint64_t *out) {
  errno = 0;
  char *end = NULL;
  double v = strtod(text, &end);
  if (errno || end == text || !(v > 0)) return -1;
  double mult = 1;
  if (!strcmp(end, "") || !strcmp(end, "B")) mult = 1;
  else if (!strcmp(end, "KiB") || !strcmp(end, "K")) mult = 1024.0;
  else if (!strcmp(end, "MiB") || !strcmp(end, "M")) mult = 1024.0 * 1024;
  else if (!strcmp(end, "GiB") || !strcmp(end, "G")) mult = 1024.0 * 1024 * 1024;
  else if (!strcmp(end, "KB")) mult = 1e3;
  else if (!strcmp(end, "MB")) mult = 1e6;
  else if (!strcmp(end, "GB")) mult = 1e9;
  else return -1;
  v *= mult;
  if (v >= 18446744073709551615.0) return -1;
  *out = (uint64_t)v;
  return 0;
}

static ty_abi_status_t ty_cu_parse_options(const ty_abi_device_open_args_t *args,
                                           ty_cu_options_t *o) {
  o->graphs = true;
  o->tf32 = false;
  o->memory_limit = 0;
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const char *k = args->options[i].key, *v = args->options[i].value ? args->options[i].value : "";
    bool flag = !strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true");
    bool flag_off = !strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false");
    if (!strcmp(k, "graphs") || !strcmp(k, "tf32")) {
      if (!flag && !flag_off) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cuda: device option %s=%s: expected 0 or 1", k, v);
      }
      if (!strcmp(k, "graphs")) o->graphs = flag;
      else o->tf32 = flag;
    } else if (!strcmp(k, "memory_limit")) {
      if (ty_cu_parse_bytes(v, &o->memory_limit) != 0) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cuda: device option memory_limit=%s: expected a positive size "
                           "such as 24GiB, 512MiB or 1000000",
                           v);
      }
    } else {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                         "cuda: unknown device option '%s' (cuda devices take graphs=0|1, "
                         "tf32=0|1 and memory_limit=SIZE)",
                         k);
    }
  }
  return NULL;
}

static void ty_cu_device_close(ty_abi_device_t *d) {
  if (!d) return;
  ty_cu_api_t *api = d->api;
  if (d->slot->context) api->cuCtxSetCurrent(d->slot->context);
  if (d->stream) api->cuStreamSynchronize(d->stream);
  if (d->blaslt) api->cublasLtDestroy(d->blaslt);
  ty_cu_free(d, d->workspace, d->workspace_bytes);
  if (d->staging) api->cuMemFreeHost(d->staging);
  if (d->stream) api->cuStreamDestroy(d->stream);
  pthread_mutex_destroy(&d->staging_lock);
  pthread_mutex_destroy(&d->alloc_lock);
  free(d);
}

static ty_abi_status_t ty_cu_device_open(ty_abi_backend_t *b,
                                         const ty_abi_device_open_args_t *args,
                                         ty_abi_device_t **out_device) {
  *out_device = NULL;
  ty_cu_options_t options;
  ty_abi_status_t st = ty_cu_parse_options(args, &options);
  if (st) return st;
  ty_cu_slot_t *s = ty_cu_slot(b, args->device_index);
  ty_abi_device_t *d = calloc(1, sizeof(*d));
  if (!d) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "cuda: out of memory");
  d->backend = b;
  d->slot = s;
  d->api = &b->api;
  d->index = args->device_index;
  d->options = options;
  pthread_mutex_init(&d->staging_lock, NULL);
  pthread_mutex_init(&d->alloc_lock, NULL);
  snprintf(d->label, sizeof(d->label), "cuda:%u", args->device_index);
  pthread_mutex_lock(&s->base.lock);
  CUresult r = CUDA_SUCCESS;
  if (!s->context) r = b->api.cuDevicePrimaryCtxRetain(&s->context, s->device);
  pthread_mutex_unlock(&s->base.lock);
  if (r != CUDA_SUCCESS) {
    st = ty_cu_driver_error(d, "cuDevicePrimaryCtxRetain", r);
    pthread_mutex_destroy(&d->staging_lock);
    pthread_mutex_destroy(&d->alloc_lock);
    free(d);
    return st;
  }
  st = ty_cu_enter(d);
  if (!st) {
    r = b->api.cuStreamCreate(&d->stream, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) st = ty_cu_driver_error(d, "cuStreamCreate", r);
  }
  if (!st) {
    r = b->api.cuMemAllocHost(&d->staging, TY_CU_STAGING_BYTES + TY_CU_RING_BYTES);
    if (r != CUDA_SUCCESS) {
      st = ty_cu_driver_error(d, "cuMemAllocHost (transfer staging)", r);
    } else {
      d->staging_bytes = TY_CU_STAGING_BYTES;
      /* TRAINYARD_CUDA_QUEUED_WRITES=0 (or TRAINYARD_CUDA_SYNC=1, which
       * waits after every command) makes every write wait, as before the
       * ring: to compare, or to pin a fault on a transfer. */
      const char *queued = getenv("TRAINYARD_CUDA_QUEUED_WRITES");
      const char *sync = getenv("TRAINYARD_CUDA_SYNC");
      if (!(queued && !strcmp(queued, "0")) && !(sync && sync[0] && strcmp(sync, "0"))) {
        d->ring = (unsigned char *)d->staging + TY_CU_STAGING_BYTES;
        d->ring_bytes = TY_CU_RING_BYTES;
      }
    }
  }
  if (!st) {
    cublasStatus_t bs = b->api.cublasLtCreate(&d->blaslt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
      st = ty_plugin_error(TY_CODE_INTERNAL, "%s: cublasLtCreate failed: %s", d->label,
                       ty_cu_blas_status_name(&b->api, bs));
    }
  }
  if (!st) {
    st = ty_cu_alloc(d, TY_CU_WORKSPACE_BYTES, "the cuBLASLt workspace", &d->workspace);
    if (!st) d->workspace_bytes = TY_CU_WORKSPACE_BYTES;
  }
  if (st) {
    ty_cu_device_close(d);
    return st;
  }
  *out_device = d;
  return NULL;
}

static ty_abi_status_t ty_cu_device_synchronize(ty_abi_device_t *d) {
  ty_abi_status_t st = ty_cu_enter(d);
  if (st) return st;
  CUresult r = d->api->cuStreamSynchronize(d->stream);
  return r == CUDA_SUCCESS ? NULL : ty_cu_driver_error(d, "cuStreamSynchronize", r);
}

/* ---- buffers ---- */

/* A TY_ABI_BUFFER_HOST buffer (optimizer offload): pinned host memory mapped
 * into the device's address space, so kernels read and write it in place
 * over the bus and the state never takes device memory. */
static ty_abi_status_t ty_cu_host_alloc(ty_abi_device_t *d, uint64_t bytes,
                                        ty_abi_buffer_t *buf) {
  if (bytes == 0) return NULL;
  CUresult r = d->api->cuMemHostAlloc(&buf->host, (size_t)bytes,
                                      CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
  if (r == CUDA_SUCCESS) r = d->api->cuMemHostGetDevicePointer(&buf->ptr, buf->host, 0);
  if (r != CUDA_SUCCESS) {
    if (buf->host) d->api->cuMemFreeHost(buf->host);
    buf->host = NULL;
    char what[96];
    snprintf(what, sizeof(what), "cuMemHostAlloc of %llu bytes of mapped pinned host memory",
             (unsigned long long)bytes);
    return ty_cu_driver_error(d, what, r);
  }
  pthread_mutex_lock(&d->alloc_lock);
  d->host_allocated += bytes;
  if (d->host_allocated > d->host_peak_allocated) d->host_peak_allocated = d->host_allocated;
  pthread_mutex_unlock(&d->alloc_lock);
  return NULL;
}

void ty_cu_buffer_written(ty_abi_buffer_t *buffer) {
  static _Atomic uint64_t generation;
  if (buffer) buffer->gen = ++generation;
}

static ty_abi_status_t ty_cu_buffer_alloc(ty_abi_device_t *d,
                                          const ty_abi_buffer_alloc_args_t *args,
                                          ty_abi_buffer_t **out_buffer) {
  *out_buffer = NULL;
  ty_abi_status_t st = ty_cu_enter(d);
  if (st) return st;
  ty_abi_buffer_t *buf = calloc(1, sizeof(*buf));
  if (!buf) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "cuda: out of memory");
  /* cuMemAlloc aligns to at least 256 bytes, more than any kernel needs. */
  if (args->alignment > 256) {
    free(buf);
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: buffer alignment %llu is above the 256 bytes cuMemAlloc gives",
                       d->label, (unsigned long long)args->alignment);
  }
  const uint32_t flags = TY_ABI_HAS_FIELD(args, ty_abi_buffer_alloc_args_t, flags) ? args->flags
                                                                                 : 0u;
  if (flags & ~TY_ABI_BUFFER_HOST) {
    free(buf);
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: unknown buffer flags %#x", d->label,
                       flags);
  }
  if (flags & TY_ABI_BUFFER_HOST) {
    st = ty_cu_host_alloc(d, args->size_bytes, buf);
    if (st) {
      free(buf);
      return st;
    }
    buf->size = args->size_bytes;
    ty_cu_buffer_written(buf);
    *out_buffer = buf;
    return NULL;
  }
  char what[64];
  snprintf(what, sizeof(what), "a %llu-byte buffer", (unsigned long long)args->size_bytes);
  st = ty_cu_alloc(d, args->size_bytes, what, &buf->ptr);
  if (st) {
    free(buf);
    return st;
  }
  buf->size = args->size_bytes;
  ty_cu_buffer_written(buf);
  *out_buffer = buf;
  return NULL;
}

static void ty_cu_buffer_free(ty_abi_device_t *d, ty_abi_buffer_t *buf) {
  if (!buf) return;
  if (buf->host) {
    ty_cu_enter(d);
    d->api->cuStreamSynchronize(d->stream);
    d->api->cuMemFreeHost(buf->host);
    pthread_mutex_lock(&d->alloc_lock);
    d->host_allocated -= buf->size <= d->host_allocated ? buf->size : d->host_allocated;
    pthread_mutex_unlock(&d->alloc_lock);
  } else if (buf->ptr) {
    ty_cu_enter(d);
    /* Work queued on the stream may still read it. */
    d->api->cuStreamSynchronize(d->stream);
    ty_cu_free(d, buf->ptr, buf->size);
  }
  free(buf);
}

/* A small write queued through the ring (see ty_abi_device_s.ring) without
 * waiting for it. A failure of the queued copy itself surfaces at the next
 * wait on the stream, as a kernel's would. Under staging_lock. */
static ty_abi_status_t ty_cu_ring_write(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                        uint64_t offset, const void *host, uint64_t size) {
  ty_cu_api_t *api = d->api;
  const uint64_t at = (d->ring_used + 63) & ~(uint64_t)63;
  if (at + size > d->ring_bytes) { /* full: the queued copies must have read their bytes */
    CUresult r = api->cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "waiting for the device", r);
    d->ring_used = 0;
    return ty_cu_ring_write(d, buf, offset, host, size);
  }
  memcpy(d->ring + at, host, (size_t)size);
  CUresult r = api->cuMemcpyHtoDAsync(buf->ptr + offset, d->ring + at, (size_t)size, d->stream);
  if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "copying to the device", r);
  d->ring_used = at + size;
  return NULL;
}

/* Host <-> device through the pinned staging buffer, chunk by chunk, each
 * waited for; small writes through the ring, not waited for. */
static ty_abi_status_t ty_cu_transfer(ty_abi_device_t *d, ty_abi_buffer_t *buf, uint64_t offset,
                                      void *host, uint64_t size, bool to_device) {
  ty_abi_status_t st = ty_cu_enter(d);
  if (st || size == 0) return st;
  ty_cu_api_t *api = d->api;
  if (!buf->host && to_device && size <= TY_CU_RING_WRITE_MAX && d->ring) {
    pthread_mutex_lock(&d->staging_lock);
    st = ty_cu_ring_write(d, buf, offset, host, size);
    pthread_mutex_unlock(&d->staging_lock);
    return st;
  }
  if (buf->host) { /* pinned host memory: once the queued work is done, a memcpy */
    CUresult r = api->cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "waiting for the device", r);
    unsigned char *at = (unsigned char *)buf->host + offset;
    if (to_device) memcpy(at, host, (size_t)size);
    else memcpy(host, at, (size_t)size);
    return NULL;
  }
  pthread_mutex_lock(&d->staging_lock);
  for (uint64_t done = 0; done < size && !st;) {
    uint64_t n = size - done < d->staging_bytes ? size - done : d->staging_bytes;
    CUresult r;
    if (to_device) {
      memcpy(d->staging, (const unsigned char *)host + done, (size_t)n);
      r = api->cuMemcpyHtoDAsync(buf->ptr + offset + done, d->staging, (size_t)n, d->stream);
    } else {
      r = api->cuMemcpyDtoHAsync(d->staging, buf->ptr + offset + done, (size_t)n, d->stream);
    }
    if (r == CUDA_SUCCESS) r = api->cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) {
      st = ty_cu_driver_error(d, to_device ? "copying to the device" : "copying from the device",
                              r);
      break;
    }
    if (!to_device) memcpy((unsigned char *)host + done, d->staging, (size_t)n);
    done += n;
    d->ring_used = 0; /* the wait above covered every queued ring copy */
  }
  pthread_mutex_unlock(&d->staging_lock);
  return st;
}

static ty_abi_status_t ty_cu_buffer_write(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                          uint64_t offset, const void *src, uint64_t size) {
  ty_cu_buffer_written(buf);
  return ty_cu_transfer(d, buf, offset, (void *)src, size, true);
}

static ty_abi_status_t ty_cu_buffer_read(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                         uint64_t offset, void *dst, uint64_t size) {
  return ty_cu_transfer(d, buf, offset, dst, size, false);
}

static ty_abi_status_t ty_cu_buffer_copy(ty_abi_device_t *d, ty_abi_buffer_t *src,
                                         uint64_t src_offset, ty_abi_buffer_t *dst,
                                         uint64_t dst_offset, uint64_t size) {
  ty_cu_buffer_written(dst);
  ty_abi_status_t st = ty_cu_enter(d);
  if (st || size == 0) return st;
  CUresult r = d->api->cuMemcpyDtoDAsync(dst->ptr + dst_offset, src->ptr + src_offset,
                                         (size_t)size, d->stream);
  if (r == CUDA_SUCCESS) r = d->api->cuStreamSynchronize(d->stream);
  return r == CUDA_SUCCESS ? NULL : ty_cu_driver_error(d, "copying between buffers", r);
}

/* ---- memory accounting (ABI 1.3) ---- */

static ty_abi_status_t ty_cu_device_memory(ty_abi_device_t *d, uint32_t reset_peak,
                                           ty_abi_device_memory_t *out) {
  size_t free_bytes = 0, total = 0;
  ty_abi_status_t st = ty_cu_enter(d);
  if (st) return st;
  d->api->cuMemGetInfo(&free_bytes, &total);
  pthread_mutex_lock(&d->alloc_lock);
  out->in_use_bytes = d->allocated;
  out->peak_bytes = d->peak_allocated;
  out->host_in_use_bytes = d->host_allocated;
  out->host_peak_bytes = d->host_peak_allocated;
  if (reset_peak) {
    d->peak_allocated = d->allocated;
    d->host_peak_allocated = d->host_allocated;
  }
  pthread_mutex_unlock(&d->alloc_lock);
  if (TY_ABI_HAS_FIELD(out, ty_abi_device_memory_t, how)) {
    char used[32], tot[32];
    ty_cu_format_bytes((uint64_t)(total - free_bytes), used, sizeof(used));
    ty_cu_format_bytes((uint64_t)total, tot, sizeof(tot));
    snprintf(out->how, sizeof(out->how),
             "cuMemAlloc counter (buffers, arenas, scratch, workspace; not the context); "
             "card: %.15s used of %.15s", used, tot);
  }
  return NULL;
}

/* ---- the table ---- */

#ifndef TY_CUDA_BACKEND_VERSION
#define TY_CUDA_BACKEND_VERSION "0.0.0"
#endif

static const ty_backend_api_t ty_cu_api_table = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    /* 1.3: pinned host buffers (TY_ABI_BUFFER_HOST: optimizer offload) and
     * the memory accounting entries; 1.4: collectives on NCCL; 1.5: the
     * execute args' world size, over which all_reduce ops run (on the NCCL
     * communicator made on the device; cuda never needs host->collective);
     * 1.6: tp_copy / tp_reduce and all_reduce's `group`; 1.7: one NCCL
     * communicator per process group on a device (comm_create's `group`),
     * which runs the collective ops naming that group; 1.8: point to point
     * (comm_send / comm_recv on ncclSend / ncclRecv); 1.9: `debug.` compile
     * options, which it ignores (it implements none); 1.10: the compile
     * option deterministic=1 (cuda_exec.h, "Deterministic mode"); 1.11:
     * all_gather / reduce_scatter with parts > 1, which it runs on the
     * group's NCCL communicator (it never calls host->collective, whose
     * args grew their `kind` in 1.11). */
    .abi_minor = 11,
    .name = "cuda",
    .version = TY_CUDA_BACKEND_VERSION,
    .backend_create = ty_cu_backend_create,
    .backend_destroy = ty_dev_backend_destroy,
    .device_count = ty_dev_backend_device_count,
    .device_info = ty_dev_backend_device_info,
    .device_open = ty_cu_device_open,
    .device_close = ty_cu_device_close,
    .device_synchronize = ty_cu_device_synchronize,
    .buffer_alloc = ty_cu_buffer_alloc,
    .buffer_free = ty_cu_buffer_free,
    .buffer_write = ty_cu_buffer_write,
    .buffer_read = ty_cu_buffer_read,
    .buffer_copy = ty_cu_buffer_copy,
    .graph_supports = ty_cu_graph_supports,
    .graph_compile = ty_cu_graph_compile,
    .executable_destroy = ty_cu_executable_destroy,
    .executable_execute = ty_cu_executable_execute,
    .executable_serialize = ty_cu_executable_serialize,
    .executable_deserialize = ty_cu_executable_deserialize,
    .executable_report = ty_cu_executable_report,
    .executable_graph = ty_cu_executable_graph,
    .executable_check_binding = NULL,
    .executable_memory = ty_cu_executable_memory,
    .device_memory = ty_cu_device_memory,
    /* 1.4: the collectives, on NCCL (cuda_comm.c). */
    .comm_unique_id = ty_cu_comm_unique_id,
    .comm_create = ty_cu_comm_create,
    .comm_destroy = ty_cu_comm_destroy,
    .comm_all_reduce = ty_cu_comm_all_reduce,
    .comm_reduce_scatter = ty_cu_comm_reduce_scatter,
    .comm_all_gather = ty_cu_comm_all_gather,
    .comm_broadcast = ty_cu_comm_broadcast,
    /* 1.8: point to point (ncclSend / ncclRecv, cuda_comm.c). */
    .comm_send = ty_cu_comm_send,
    .comm_recv = ty_cu_comm_recv,
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == TY_ABI_MAJOR ? &ty_cu_api_table : NULL;
}
