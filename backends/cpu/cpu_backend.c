/* The cpu backend: devices, options and host-memory buffers; graphs run in
 * cpu_graph.c with the kernels of cpu_kernels_*.c.
 *
 * Buffers are 64-byte aligned host allocations (cache line and AVX-512
 * friendly). Device options: threads=N, kernels=fast|fast-only|reference
 * (fast-only: no silent fallback to the reference kernels). */
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainyard/host_meter.h"
#include "trainyard/plugin_status.h"
#include "cpu_internal.h"
#include "trainyard/backend_abi.h"

#define CPU_DEFAULT_ALIGNMENT 64u
#define CPU_MAX_THREADS 4096u


static ty_abi_status_t cpu_error(const ty_host_api_t *host, ty_code_t code,
                                 const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ty_abi_status_t cpu_error(const ty_host_api_t *host, ty_code_t code,
                                 const char *fmt, ...) {
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  return host->status_make(code, message);
}

/* Copies the value of a "key : value" line from /proc/cpuinfo. */
static void cpu_probe_cpuinfo(const char *key, char *out, size_t capacity) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  size_t key_len = strlen(key);
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, key, key_len) != 0) continue;
    const char *colon = strchr(line, ':');
    if (!colon) continue;
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') ++v;
    snprintf(out, capacity, "%s", v);
    out[strcspn(out, "\n")] = '\0';
    break;
  }
  fclose(f);
}

static void cpu_probe(ty_abi_device_info_t *info) {
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  snprintf(info->name, sizeof(info->name), "host CPU");
  cpu_probe_cpuinfo("model name", info->name, sizeof(info->name));
  cpu_probe_cpuinfo("vendor_id", info->vendor, sizeof(info->vendor));
  snprintf(info->driver_version, sizeof(info->driver_version), "n/a");
  info->kind = TY_DEVICE_KIND_CPU;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  info->compute_units = cores > 0 ? (uint32_t)cores : 1;
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    info->memory_bytes = (uint64_t)pages * (uint64_t)page_size;
  }
  info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                     TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                     TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                     TY_DTYPE_BIT(TY_DTYPE_U8);
  /* Peak f32 = cores x clock x FLOP/cycle. FLOP/cycle from the widest FMA
   * the CPU has (2 FMA pipes: AVX-512 64, AVX2+FMA 32, SSE 8); the clock is
   * /proc/cpuinfo's "cpu MHz", which under a VM is the nominal clock, so
   * boosted cores can run faster than this peak (docs/performance.md). */
  char mhz_text[64] = "";
  cpu_probe_cpuinfo("cpu MHz", mhz_text, sizeof(mhz_text));
  double mhz = atof(mhz_text);
  __builtin_cpu_init();
  double per_cycle = __builtin_cpu_supports("avx512f")                                 ? 64
                     : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 32
                                                                                        : 8;
  info->peak_f32_gflops = mhz > 0 ? info->compute_units * mhz * 1e-3 * per_cycle : 0;
}

static ty_abi_status_t cpu_backend_create(const ty_abi_backend_create_args_t *args,
                                          ty_abi_backend_t **out_backend) {
  *out_backend = NULL;
  ty_abi_backend_t *b = calloc(1, sizeof(*b));
  if (!b) {
    return args->host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                   "cpu: out of memory creating backend");
  }
  b->host = args->host;
  ty_plugin_status_init(args->host);
  cpu_probe(&b->info);
  *out_backend = b;
  return NULL;
}

static void cpu_backend_destroy(ty_abi_backend_t *b) { free(b); }

static ty_abi_status_t cpu_device_count(ty_abi_backend_t *b, uint32_t *out_count) {
  (void)b;
  *out_count = 1; /* one device spanning all cores; threads=N narrows it */
  return NULL;
}

static ty_abi_status_t cpu_device_info(ty_abi_backend_t *b, uint32_t index,
                                       ty_abi_device_info_t *out_info) {
  (void)index;
  /* Copy only what the host's struct holds. */
  size_t n = out_info->struct_size < sizeof(b->info) ? out_info->struct_size
                                                     : sizeof(b->info);
  size_t host_size = out_info->struct_size;
  memcpy(out_info, &b->info, n);
  out_info->struct_size = host_size;
  return NULL;
}

static ty_abi_status_t cpu_parse_threads(ty_abi_backend_t *b, const char *value,
                                         uint32_t *out_threads) {
  /* Digits only: strtoul would also take "+5", " 5" and "-1". */
  bool digits = *value != '\0';
  for (const char *p = value; *p; ++p) digits = digits && *p >= '0' && *p <= '9';
  char *end = NULL;
  errno = 0;
  unsigned long v = digits ? strtoul(value, &end, 10) : 0;
  if (!digits || errno || v == 0 || v > CPU_MAX_THREADS) {
    return cpu_error(b->host, TY_CODE_INVALID_ARGUMENT,
                     "cpu: option threads='%s' must be an integer in 1..%u",
                     value, CPU_MAX_THREADS);
  }
  *out_threads = (uint32_t)v;
  return NULL;
}

static ty_abi_status_t cpu_device_open(ty_abi_backend_t *b,
                                       const ty_abi_device_open_args_t *args,
                                       ty_abi_device_t **out_device) {
  *out_device = NULL;
  uint32_t threads = b->info.compute_units;
  cpu_kernel_mode_t kernels = CPU_KERNELS_FAST;
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const ty_abi_option_t *o = &args->options[i];
    if (strcmp(o->key, "threads") == 0) {
      ty_abi_status_t s = cpu_parse_threads(b, o->value, &threads);
      if (s) return s;
    } else if (strcmp(o->key, "kernels") == 0) {
      if (strcmp(o->value, "fast") == 0) {
        kernels = CPU_KERNELS_FAST;
      } else if (strcmp(o->value, "reference") == 0) {
        kernels = CPU_KERNELS_REFERENCE;
      } else if (strcmp(o->value, "fast-only") == 0) {
        kernels = CPU_KERNELS_FAST_ONLY;
      } else {
        return cpu_error(b->host, TY_CODE_INVALID_ARGUMENT,
                         "cpu: option kernels='%s' must be 'fast', 'fast-only' or "
                         "'reference'",
                         o->value);
      }
    } else {
      return cpu_error(b->host, TY_CODE_INVALID_ARGUMENT,
                       "cpu: unknown device option '%s' (known: threads, kernels)",
                       o->key);
    }
  }
  ty_abi_device_t *d = calloc(1, sizeof(*d));
  if (!d) {
    return b->host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                "cpu: out of memory opening device");
  }
  d->backend = b;
  d->threads = threads;
  d->kernels = kernels;
  *out_device = d;
  return NULL;
}

static void cpu_device_close(ty_abi_device_t *d) { free(d); }

static ty_abi_status_t cpu_device_synchronize(ty_abi_device_t *d) {
  (void)d; /* every cpu call completes before it returns */
  return NULL;
}

static ty_abi_status_t cpu_buffer_alloc(ty_abi_device_t *d,
                                        const ty_abi_buffer_alloc_args_t *args,
                                        ty_abi_buffer_t **out_buffer) {
  const ty_host_api_t *host = d->backend->host;
  *out_buffer = NULL;
  uint64_t alignment = args->alignment ? args->alignment : CPU_DEFAULT_ALIGNMENT;
  if (alignment & (alignment - 1) || alignment > 4096) {
    return cpu_error(host, TY_CODE_INVALID_ARGUMENT,
                     "cpu: buffer alignment %llu is not a power of two <= 4096",
                     (unsigned long long)alignment);
  }
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  if (TY_ABI_HAS_FIELD(args, ty_abi_buffer_alloc_args_t, flags) &&
      (args->flags & TY_ABI_BUFFER_HOST)) {
    return cpu_error(host, TY_CODE_UNIMPLEMENTED,
                     "cpu: no pinned host buffers: the cpu device's memory is host memory");
  }
  uint64_t memory = d->backend->info.memory_bytes;
  /* Refuse what can never fit instead of counting on the kernel's
   * overcommit policy (which would let it through and kill us later). */
  if (memory && args->size_bytes > memory) {
    return cpu_error(host, TY_CODE_RESOURCE_EXHAUSTED,
                     "cpu: cannot allocate %llu bytes; the host has %llu bytes "
                     "of memory",
                     (unsigned long long)args->size_bytes,
                     (unsigned long long)memory);
  }
  ty_abi_buffer_t *buf = calloc(1, sizeof(*buf));
  if (!buf) {
    return host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                             "cpu: out of memory for a buffer record");
  }
  buf->size = args->size_bytes;
  if (buf->size) {
    /* Counted by the host meter: buffers are device memory (ABI 1.3
     * device_memory reports them with the arenas and kernel scratch). */
    void *p = buf->size > SIZE_MAX - alignment ? NULL
                                               : ty_host_mem_alloc_aligned(buf->size, alignment);
    if (!p) {
      free(buf);
      return cpu_error(host, TY_CODE_RESOURCE_EXHAUSTED,
                       "cpu: out of memory allocating %llu bytes",
                       (unsigned long long)args->size_bytes);
    }
    buf->data = p;
  }
  *out_buffer = buf;
  return NULL;
}

static void cpu_buffer_free(ty_abi_device_t *d, ty_abi_buffer_t *buf) {
  (void)d;
  if (!buf) return;
  ty_host_mem_free(buf->data);
  free(buf);
}

static ty_abi_status_t cpu_buffer_write(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                        uint64_t offset, const void *src,
                                        uint64_t size) {
  (void)d;
  memcpy(buf->data + offset, src, (size_t)size);
  return NULL;
}

static ty_abi_status_t cpu_buffer_read(ty_abi_device_t *d, ty_abi_buffer_t *buf,
                                       uint64_t offset, void *dst, uint64_t size) {
  (void)d;
  memcpy(dst, buf->data + offset, (size_t)size);
  return NULL;
}

static ty_abi_status_t cpu_buffer_copy(ty_abi_device_t *d, ty_abi_buffer_t *src,
                                       uint64_t src_offset, ty_abi_buffer_t *dst,
                                       uint64_t dst_offset, uint64_t size) {
  (void)d;
  memcpy(dst->data + dst_offset, src->data + src_offset, (size_t)size);
  return NULL;
}

static const ty_backend_api_t cpu_api = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = TY_ABI_MINOR,
    .name = "cpu",
    .version = TY_CPU_BACKEND_VERSION,
    .backend_create = cpu_backend_create,
    .backend_destroy = cpu_backend_destroy,
    .device_count = cpu_device_count,
    .device_info = cpu_device_info,
    .device_open = cpu_device_open,
    .device_close = cpu_device_close,
    .device_synchronize = cpu_device_synchronize,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .buffer_write = cpu_buffer_write,
    .buffer_read = cpu_buffer_read,
    .buffer_copy = cpu_buffer_copy,
    .graph_supports = cpu_graph_supports,
    .graph_compile = cpu_graph_compile,
    .executable_destroy = cpu_executable_destroy,
    .executable_execute = cpu_executable_execute,
    .executable_memory = cpu_executable_memory,
    .device_memory = cpu_device_memory,
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == TY_ABI_MAJOR ? &cpu_api : NULL;
}
