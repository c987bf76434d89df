/* The opencl backend: the ICD loader loaded at run time, every device of
 * every platform as opencl:N, one in-order queue per opened device, and
 * buffers as cl_mem with real host<->device transfers. Graphs run in
 * ocl_graph.c on kernels written in OpenCL C (kernels/ folder), built at run
 * time with a program-binary cache (ocl_program.c).
 *
 * Device URIs take no options. Environment (documented in docs/opencl.md):
 * TRAINYARD_OPENCL_LIBRARY names the ICD loader to load instead of
 * libOpenCL.so.1, TRAINYARD_OPENCL_CACHE_DIR the binary cache. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainyard/device_exec.h"
#include "trainyard/plugin_status.h"
#include "ocl_internal.h"

ty_abi_status_t ty_ocl_cl_error(const ty_abi_device_t *d, const char *what, cl_int err) {
  ty_code_t code = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
                           err == CL_OUT_OF_RESOURCES
                       ? TY_CODE_RESOURCE_EXHAUSTED
                       : TY_CODE_INTERNAL;
  return ty_plugin_error(code, "%s: %s failed: %s (%d)", d ? d->label : "opencl", what,
                      ty_ocl_error_name(err), (int)err);
}

/* ---- probing ---- */

static void ty_ocl_device_string(ty_ocl_api_t *api, cl_device_id dev, cl_device_info what,
                                 char *out, size_t capacity) {
  out[0] = '\0';
  size_t size = 0;
  if (api->clGetDeviceInfo(dev, what, 0, NULL, &size) != CL_SUCCESS || size == 0) return;
  char *text = malloc(size + 1);
  if (!text) return;
  if (api->clGetDeviceInfo(dev, what, size, text, NULL) == CL_SUCCESS) {
    text[size] = '\0';
    /* Whole words only: extension lists are cut at a space. */
    size_t len = strlen(text);
    while (len > 0 && (text[len - 1] == ' ' || text[len - 1] == '\n')) text[--len] = '\0';
    if (len >= capacity) {
      len = capacity - 1;
      while (len > 0 && text[len] != ' ') --len;
    }
    memcpy(out, text, len);
    out[len] = '\0';
  }
  free(text);
}

static void ty_ocl_platform_string(ty_ocl_api_t *api, cl_platform_id p, cl_platform_info what,
                                   char *out, size_t capacity) {
  out[0] = '\0';
  char text[512];
  if (api->clGetPlatformInfo(p, what, sizeof(text), text, NULL) == CL_SUCCESS) {
    size_t n = strnlen(text, sizeof(text) - 1);
    if (n >= capacity) n = capacity - 1;
    memcpy(out, text, n);
    out[n] = '\0';
  }
}

static uint64_t ty_ocl_device_u64(ty_ocl_api_t *api, cl_device_id dev, cl_device_info what) {
  cl_ulong v = 0;
  return api->clGetDeviceInfo(dev, what, sizeof(v), &v, NULL) == CL_SUCCESS ? v : 0;
}

static uint32_t ty_ocl_device_u32(ty_ocl_api_t *api, cl_device_id dev, cl_device_info what) {
  cl_uint v = 0;
  return api->clGetDeviceInfo(dev, what, sizeof(v), &v, NULL) == CL_SUCCESS ? v : 0;
}

static bool ty_ocl_has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n) {
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  }
  return false;
}

static void ty_ocl_probe(ty_ocl_api_t *api, ty_ocl_slot_t *s) {
  ty_abi_device_info_t *info = &s->base.info;
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  ty_ocl_device_string(api, s->device, CL_DEVICE_NAME, info->name, sizeof(info->name));
  ty_ocl_device_string(api, s->device, CL_DEVICE_VENDOR, info->vendor, sizeof(info->vendor));
  ty_ocl_device_string(api, s->device, CL_DRIVER_VERSION, info->driver_version,
                       sizeof(info->driver_version));
  ty_ocl_device_string(api, s->device, CL_DEVICE_VERSION, s->device_version,
                       sizeof(s->device_version));
  ty_ocl_device_string(api, s->device, CL_DEVICE_OPENCL_C_VERSION, s->c_version,
                       sizeof(s->c_version));
  ty_ocl_device_string(api, s->device, CL_DEVICE_EXTENSIONS, s->extensions,
                       sizeof(s->extensions));
  ty_ocl_platform_string(api, s->platform, CL_PLATFORM_NAME, s->platform_name,
                         sizeof(s->platform_name));
  ty_ocl_platform_string(api, s->platform, CL_PLATFORM_VERSION, s->platform_version,
                         sizeof(s->platform_version));
  /* "OpenCL 3.0 <driver detail> (platform: <name>)", cut to fit. */
  char text[512];
  snprintf(text, sizeof(text), "%s (platform: %s)", s->device_version, s->platform_name);
  size_t api_len = strlen(text) < sizeof(info->api_version) - 1 ? strlen(text)
                                                               : sizeof(info->api_version) - 1;
  memcpy(info->api_version, text, api_len);
  info->api_version[api_len] = '\0';
  memcpy(info->extensions, s->extensions, sizeof(info->extensions)); /* same size */
  cl_device_type type = 0;
  api->clGetDeviceInfo(s->device, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
  info->kind = type & CL_DEVICE_TYPE_GPU           ? TY_DEVICE_KIND_GPU
               : type & CL_DEVICE_TYPE_CPU         ? TY_DEVICE_KIND_CPU
               : type & CL_DEVICE_TYPE_ACCELERATOR ? TY_DEVICE_KIND_ACCELERATOR
                                                   : TY_DEVICE_KIND_OTHER;
  info->compute_units = ty_ocl_device_u32(api, s->device, CL_DEVICE_MAX_COMPUTE_UNITS);
  info->memory_bytes = ty_ocl_device_u64(api, s->device, CL_DEVICE_GLOBAL_MEM_SIZE);
  /* Buffers hold any dtype; kernels compute in f32 (ocl_graph.c says which
   * dtypes each op takes). */
  info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                     TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                     TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                     TY_DTYPE_BIT(TY_DTYPE_U8);
  /* OpenCL does not report FLOP per cycle per compute unit, so the peak is
   * unknown (0) rather than guessed. */
  info->peak_f32_gflops = 0;
  s->fp64 = ty_ocl_has_word(s->extensions, "cl_khr_fp64");
  size_t wg = 0;
  api->clGetDeviceInfo(s->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(wg), &wg, NULL);
  s->max_work_group = wg;
  s->max_alloc = ty_ocl_device_u64(api, s->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  s->local_mem = ty_ocl_device_u64(api, s->device, CL_DEVICE_LOCAL_MEM_SIZE);
}

/* ---- backend ---- */

#ifdef TY_OPENCL_TEST_HOOKS
/* Only in the test copy of the plugin (tests/backends builds it): the live
 * and created OpenCL objects per kind (ty_ocl_object_t order) and the
 * program builds from source and from the binary cache, of the backend
 * instance created last. The leak and cache tests read them. */
static ty_abi_backend_t *ty_ocl_test_backend;
TY_BACKEND_EXPORT int ty_opencl_test_counts(int64_t out_live[6], int64_t out_created[6],
                                            uint64_t out_builds[2]);
TY_BACKEND_EXPORT int ty_opencl_test_counts(int64_t out_live[6], int64_t out_created[6],
                                            uint64_t out_builds[2]) {
  ty_abi_backend_t *b = ty_ocl_test_backend;
  if (!b) return -1;
  for (int k = 0; k < TY_OCL_OBJ_COUNT_; ++k) {
    out_live[k] = atomic_load(&b->api.live[k]);
    out_created[k] = atomic_load(&b->api.created[k]);
  }
  out_builds[0] = out_builds[1] = 0;
  for (uint32_t i = 0; i < b->base.slot_count; ++i) {
    ty_ocl_slot_t *s = ty_ocl_slot(b, i);
    pthread_mutex_lock(&s->base.lock);
    out_builds[0] += s->builds_from_source;
    out_builds[1] += s->builds_from_cache;
    pthread_mutex_unlock(&s->base.lock);
  }
  return 0;
}
#define TY_OCL_TEST_REMEMBER(b) (ty_ocl_test_backend = (b))
#else
#define TY_OCL_TEST_REMEMBER(b) ((void)0)
#endif

static ty_abi_backend_t *ty_ocl_backend_of(ty_dev_backend_t *base) {
  return (ty_abi_backend_t *)(void *)base; /* the base is its first member */
}

static int ty_ocl_backend_load(ty_dev_backend_t *base, char *why, size_t capacity) {
  return ty_ocl_api_load(&ty_ocl_backend_of(base)->api, why, capacity);
}

static void ty_ocl_backend_unload(ty_dev_backend_t *base) {
  TY_OCL_TEST_REMEMBER(NULL);
  ty_ocl_api_unload(&ty_ocl_backend_of(base)->api);
}

static void ty_ocl_slot_release(ty_dev_backend_t *base, ty_dev_slot_t *slot) {
  ty_ocl_api_t *api = &ty_ocl_backend_of(base)->api;
  ty_ocl_slot_t *s = (ty_ocl_slot_t *)(void *)slot;
  ty_ocl_programs_release(api, s);
  ty_ocl_context_release(api, s->context);
}

static ty_abi_status_t ty_ocl_enumerate(ty_dev_backend_t *base) {
  ty_ocl_api_t *api = &ty_ocl_backend_of(base)->api;
  cl_uint platform_count = 0;
  cl_int err = api->clGetPlatformIDs(0, NULL, &platform_count);
  if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && platform_count == 0)) {
    return ty_plugin_error(TY_CODE_UNAVAILABLE,
                        "opencl: the ICD loader %s found no OpenCL platform (no driver "
                        "is registered in /etc/OpenCL/vendors or OCL_ICD_VENDORS); "
                        "install one, e.g. pocl-opencl-icd",
                        api->library_path);
  }
  if (err != CL_SUCCESS) return ty_ocl_cl_error(NULL, "clGetPlatformIDs", err);
  cl_platform_id *platforms = calloc(platform_count, sizeof(*platforms));
  if (!platforms) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "opencl: out of memory");
  err = api->clGetPlatformIDs(platform_count, platforms, NULL);
  if (err != CL_SUCCESS) {
    free(platforms);
    return ty_ocl_cl_error(NULL, "clGetPlatformIDs", err);
  }
  ty_abi_status_t st = NULL;
  for (cl_uint p = 0; p < platform_count && !st; ++p) {
    cl_uint n = 0;
    if (api->clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL, &n) != CL_SUCCESS) {
      continue; /* CL_DEVICE_NOT_FOUND: a platform without devices */
    }
    cl_device_id *ids = calloc(n ? n : 1, sizeof(*ids));
    if (!ids) {
      st = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "opencl: out of memory");
      break;
    }
    if (api->clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, n, ids, NULL) == CL_SUCCESS) {
      for (cl_uint i = 0; i < n && !st; ++i) {
        ty_dev_slot_t *slot = NULL;
        st = ty_dev_backend_slot_add(base, &slot);
        if (st) break;
        ty_ocl_slot_t *s = (ty_ocl_slot_t *)(void *)slot;
        s->platform = platforms[p];
        s->device = ids[i];
        ty_ocl_probe(api, s);
      }
    }
    free(ids);
  }
  free(platforms);
  if (st) return st;
  if (base->slot_count == 0) {
    return ty_plugin_error(TY_CODE_UNAVAILABLE,
                        "opencl: %u OpenCL platform(s) found, but no device", platform_count);
  }
  return NULL;
}

static const ty_dev_backend_class_t ty_ocl_backend_class = {
    .name = "opencl",
    .backend_size = sizeof(ty_abi_backend_t),
    .slot_size = sizeof(ty_ocl_slot_t),
    .load = ty_ocl_backend_load,
    .enumerate = ty_ocl_enumerate,
    .slot_release = ty_ocl_slot_release,
    .unload = ty_ocl_backend_unload,
};

static ty_abi_status_t ty_ocl_backend_create(const ty_abi_backend_create_args_t *args,
                                             ty_abi_backend_t **out_backend) {
  ty_abi_status_t st = ty_dev_backend_create(&ty_ocl_backend_class, args, out_backend);
  if (!st) TY_OCL_TEST_REMEMBER(*out_backend);
  return st;
}

/* ---- devices ---- */

static ty_abi_status_t ty_ocl_device_open(ty_abi_backend_t *b,
                                          const ty_abi_device_open_args_t *args,
                                          ty_abi_device_t **out_device) {
  *out_device = NULL;
  if (args->option_count > 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                        "opencl: unknown device option '%s' (opencl devices take no "
                        "options)",
                        args->options[0].key);
  }
  ty_ocl_slot_t *s = ty_ocl_slot(b, args->device_index);
  ty_abi_device_t *d = calloc(1, sizeof(*d));
  if (!d) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "opencl: out of memory");
  d->backend = b;
  d->slot = s;
  d->index = args->device_index;
  d->api = &b->api;
  snprintf(d->label, sizeof(d->label), "opencl:%u", args->device_index);
  cl_int err = CL_SUCCESS;
  pthread_mutex_lock(&s->base.lock);
  if (!s->context) s->context = ty_ocl_context_create(&b->api, s->device, &err);
  pthread_mutex_unlock(&s->base.lock);
  if (!s->context) {
    ty_abi_status_t st = ty_ocl_cl_error(d, "clCreateContext", err);
    free(d);
    return st;
  }
  d->queue = ty_ocl_queue_create(&b->api, s->context, s->device, &err);
  if (!d->queue) {
    ty_abi_status_t st = ty_ocl_cl_error(d, "clCreateCommandQueue", err);
    free(d);
    return st;
  }
  *out_device = d;
  return NULL;
}

static void ty_ocl_device_close(ty_abi_device_t *d) {
  if (!d) return;
  d->api->clFinish(d->queue);
  ty_ocl_queue_release(d->api, d->queue);
  free(d);
}

static ty_abi_status_t ty_ocl_device_synchronize(ty_abi_device_t *d) {
  cl_int err = d->api->clFinish(d->queue);
  return err == CL_SUCCESS ? NULL : ty_ocl_cl_error(d, "clFinish", err);
}

/* ---- buffers ---- */

static ty_abi_status_t ty_ocl_buffer_alloc(ty_abi_device_t *d,
                                           const ty_abi_buffer_alloc_args_t *args,
                                           ty_abi_buffer_t **out_buffer) {
  *out_buffer = NULL;
  uint64_t alignment = args->alignment;
  /* Kernels address tensors by byte offsets from the cl_mem's start, whose
   * base the driver aligns to at least CL_DEVICE_MEM_BASE_ADDR_ALIGN (128
   * bytes or more), so any offset alignment up to a page is honoured. */
  if (alignment & (alignment - 1) || alignment > 4096) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                        "%s: buffer alignment %llu is not a power of two <= 4096", d->label,
                        (unsigned long long)alignment);
  }
  const ty_ocl_slot_t *s = d->slot;
  if (args->size_bytes > s->max_alloc || args->size_bytes > s->base.info.memory_bytes ||
      args->size_bytes > SIZE_MAX) {
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                        "%s: cannot allocate %llu bytes; the device's largest buffer is "
                        "%llu bytes (CL_DEVICE_MAX_MEM_ALLOC_SIZE) of %llu bytes of memory",
                        d->label, (unsigned long long)args->size_bytes,
                        (unsigned long long)s->max_alloc,
                        (unsigned long long)s->base.info.memory_bytes);
  }
  ty_abi_buffer_t *buf = calloc(1, sizeof(*buf));
  if (!buf) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", d->label);
  buf->size = args->size_bytes;
  if (buf->size) {
    cl_int err = CL_SUCCESS;
    buf->mem = ty_ocl_mem_create(d->api, s->context, (size_t)buf->size, &err);
    if (!buf->mem) {
      free(buf);
      char what[96];
      snprintf(what, sizeof(what), "clCreateBuffer of %llu bytes",
               (unsigned long long)args->size_bytes);
      return ty_ocl_cl_error(d, what, err);
    }
  }
  *out_buffer = buf;
  return NULL;
}

static void ty_ocl_buffer_free(ty_abi_device_t *d, ty_abi_buffer_t *buf) {
  if (!buf) return;
  ty_ocl_mem_release(d->api, buf->mem);
  free(buf);
}

static ty_abi_status_t ty_ocl_buffer_write(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                           uint64_t offset, const void *src, uint64_t size) {
  cl_int err = d->api->clEnqueueWriteBuffer(d->queue, buf->mem, CL_TRUE, (size_t)offset,
                                            (size_t)size, src, 0, NULL, NULL);
  return err == CL_SUCCESS ? NULL : ty_ocl_cl_error(d, "clEnqueueWriteBuffer", err);
}

static ty_abi_status_t ty_ocl_buffer_read(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                          uint64_t offset, void *dst, uint64_t size) {
  /* Blocking, and after everything queued before it (the queue is in order). */
  cl_int err = d->api->clEnqueueReadBuffer(d->queue, buf->mem, CL_TRUE, (size_t)offset,
                                           (size_t)size, dst, 0, NULL, NULL);
  return err == CL_SUCCESS ? NULL : ty_ocl_cl_error(d, "clEnqueueReadBuffer", err);
}

static ty_abi_status_t ty_ocl_buffer_copy(ty_abi_device_t *d, ty_abi_buffer_t *src,
                                          uint64_t src_offset, ty_abi_buffer_t *dst,
                                          uint64_t dst_offset, uint64_t size) {
  cl_int err = d->api->clEnqueueCopyBuffer(d->queue, src->mem, dst->mem, (size_t)src_offset,
                                           (size_t)dst_offset, (size_t)size, 0, NULL, NULL);
  return err == CL_SUCCESS ? NULL : ty_ocl_cl_error(d, "clEnqueueCopyBuffer", err);
}

static const ty_backend_api_t ty_ocl_backend_api = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = TY_ABI_MINOR,
    .name = "opencl",
    .version = TY_OPENCL_BACKEND_VERSION,
    .backend_create = ty_ocl_backend_create,
    .backend_destroy = ty_dev_backend_destroy,
    .device_count = ty_dev_backend_device_count,
    .device_info = ty_dev_backend_device_info,
    .device_open = ty_ocl_device_open,
    .device_close = ty_ocl_device_close,
    .device_synchronize = ty_ocl_device_synchronize,
    .buffer_alloc = ty_ocl_buffer_alloc,
    .buffer_free = ty_ocl_buffer_free,
    .buffer_write = ty_ocl_buffer_write,
    .buffer_read = ty_ocl_buffer_read,
    .buffer_copy = ty_ocl_buffer_copy,
    .graph_supports = ty_ocl_graph_supports,
    .graph_compile = ty_ocl_graph_compile,
    .executable_destroy = ty_ocl_executable_destroy,
    .executable_execute = ty_ocl_executable_execute,
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == TY_ABI_MAJOR ? &ty_ocl_backend_api : NULL;
}

