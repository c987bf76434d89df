/* The dataflow backend: the emulated device (target options from the URI),
 * its DRAM (host allocations the plugin owns, with a capacity), and the
 * plugin table. Graphs compile in dataflow_exec.c.
 *
 * Device options: tiles=1|2|4, mem_per_tile=SIZE (on-chip bytes per tile),
 * clock_mhz=N, bandwidth_gbs=X (device DRAM bandwidth), dram=SIZE (device
 * DRAM capacity). SIZE is a byte count with an optional K, M or G suffix
 * (binary: 64M = 64 MiB). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainyard/plugin_status.h"
#include "dataflow_internal.h"

#define DF_DEFAULT_TILES 4u
#define DF_DEFAULT_MEM_PER_TILE (64ull << 20)
#define DF_DEFAULT_CLOCK_MHZ 1000u
#define DF_DEFAULT_BANDWIDTH_GBS 200.0
#define DF_DEFAULT_DRAM (16ull << 30)
#define DF_ALIGNMENT 64u

static const char *const df_option_keys =
    "tiles, mem_per_tile, clock_mhz, bandwidth_gbs, dram";

static df_target_t df_default_target(void) {
  return (df_target_t){.tiles = DF_DEFAULT_TILES,
                       .clock_mhz = DF_DEFAULT_CLOCK_MHZ,
                       .mem_per_tile = DF_DEFAULT_MEM_PER_TILE,
                       .bandwidth_gbs = DF_DEFAULT_BANDWIDTH_GBS,
                       .dram_bytes = DF_DEFAULT_DRAM};
}

static double df_peak_gflops(const df_target_t *t) {
  return (double)t->tiles * DF_MACS_PER_TILE * 2.0 * t->clock_mhz * 1e-3;
}

static void df_fill_info(ty_abi_device_info_t *info, const df_target_t *t) {
  memset(info, 0, sizeof(*info));
  info->struct_size = sizeof(*info);
  char mem[32];
  ty_format_bytes(t->mem_per_tile, mem, sizeof(mem));
  snprintf(info->name, sizeof(info->name),
           "emulated dataflow chip (%u tiles x %s on-chip, %u MHz)", t->tiles, mem,
           t->clock_mhz);
  snprintf(info->vendor, sizeof(info->vendor), "trainyard (emulated on the host)");
  snprintf(info->driver_version, sizeof(info->driver_version), "%s", TY_DATAFLOW_VERSION);
  info->kind = TY_DEVICE_KIND_ACCELERATOR;
  info->compute_units = t->tiles;
  info->memory_bytes = t->dram_bytes;
  info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                     TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                     TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                     TY_DTYPE_BIT(TY_DTYPE_U8);
  info->emulated = 1;
  info->peak_f32_gflops = df_peak_gflops(t); /* of the simulated chip, not the host */
  info->whole_graphs_only = 1;
}

static ty_abi_status_t df_backend_create(const ty_abi_backend_create_args_t *args,
                                         ty_abi_backend_t **out_backend) {
  *out_backend = NULL;
  ty_abi_backend_t *b = calloc(1, sizeof(*b));
  if (!b) {
    return args->host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                   "dataflow: out of memory creating backend");
  }
  b->host = args->host;
  ty_plugin_status_init(args->host);
  df_target_t t = df_default_target();
  df_fill_info(&b->info, &t);
  *out_backend = b;
  return NULL;
}

static void df_backend_destroy(ty_abi_backend_t *b) { free(b); }

static ty_abi_status_t df_device_count(ty_abi_backend_t *b, uint32_t *out_count) {
  (void)b;
  *out_count = 1;
  return NULL;
}

static ty_abi_status_t df_device_info(ty_abi_backend_t *b, uint32_t index,
                                      ty_abi_device_info_t *out_info) {
  (void)index;
  size_t host_size = out_info->struct_size;
  size_t n = host_size < sizeof(b->info) ? host_size : sizeof(b->info);
  memcpy(out_info, &b->info, n);
  out_info->struct_size = host_size;
  return NULL;
}

/* Digits only (strtoull would take "+5", " 5" and "-1"). */
static bool df_parse_u64(const char *text, uint64_t *out) {
  if (!*text) return false;
  for (const char *p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
  }
  errno = 0;
  unsigned long long v = strtoull(text, NULL, 10);
  if (errno) return false;
  *out = v;
  return true;
}

/* "65536", "512K", "64M", "1G" (binary units; "MiB"/"MB" spellings too). */
static bool df_parse_size(const char *text, uint64_t *out) {
  size_t n = strlen(text), digits = 0;
  while (digits < n && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 18) return false;
  char number[24];
  memcpy(number, text, digits);
  number[digits] = '\0';
  uint64_t v = 0;
  if (!df_parse_u64(number, &v)) return false;
  const char *unit = text + digits;
  uint64_t scale = 1;
  if (*unit == 'K' || *unit == 'k') {
    scale = 1ull << 10;
  } else if (*unit == 'M' || *unit == 'm') {
    scale = 1ull << 20;
  } else if (*unit == 'G' || *unit == 'g') {
    scale = 1ull << 30;
  } else if (*unit) {
    return false;
  }
  if (*unit) {
    ++unit;
    if (strcmp(unit, "") != 0 && strcmp(unit, "B") != 0 && strcmp(unit, "iB") != 0) return false;
  }
  if (v > UINT64_MAX / scale) return false;
  *out = v * scale;
  return true;
}

static ty_abi_status_t df_parse_options(const ty_abi_device_open_args_t *args, df_target_t *t) {
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const ty_abi_option_t *o = &args->options[i];
    uint64_t v = 0;
    if (strcmp(o->key, "tiles") == 0) {
      if (!df_parse_u64(o->value, &v) || (v != 1 && v != 2 && v != 4)) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "dataflow: option tiles='%s' must be 1, 2 or 4", o->value);
      }
      t->tiles = (uint32_t)v;
    } else if (strcmp(o->key, "mem_per_tile") == 0) {
      if (!df_parse_size(o->value, &v) || v < (64ull << 10) || v > (4ull << 30)) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "dataflow: option mem_per_tile='%s' must be a size from 64K to "
                               "4G, e.g. 64M (K, M, G are binary units)",
                               o->value);
      }
      t->mem_per_tile = v;
    } else if (strcmp(o->key, "clock_mhz") == 0) {
      if (!df_parse_u64(o->value, &v) || v < 1 || v > 10000) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "dataflow: option clock_mhz='%s' must be an integer in 1..10000",
                               o->value);
      }
      t->clock_mhz = (uint32_t)v;
    } else if (strcmp(o->key, "bandwidth_gbs") == 0) {
      char *end = NULL;
      errno = 0;
      double d = strtod(o->value, &end);
      bool number = o->value[0] >= '0' && o->value[0] <= '9' && end && !*end && !errno;
      if (!number || !isfinite(d) || d <= 0 || d > 100000) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "dataflow: option bandwidth_gbs='%s' must be a number of GB/s "
                               "in (0, 100000]",
                               o->value);
      }
      t->bandwidth_gbs = d;
    } else if (strcmp(o->key, "dram") == 0) {
      if (!df_parse_size(o->value, &v) || v < (1ull << 20) || v > (1ull << 40)) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "dataflow: option dram='%s' must be a size from 1M to 1024G, "
                               "e.g. 16G",
                               o->value);
      }
      t->dram_bytes = v;
    } else {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "dataflow: unknown device option '%s' (known: %s)", o->key,
                             df_option_keys);
    }
  }
  return NULL;
}

static ty_abi_status_t df_device_open(ty_abi_backend_t *b, const ty_abi_device_open_args_t *args,
                                      ty_abi_device_t **out_device) {
  (void)b;
  *out_device = NULL;
  df_target_t t = df_default_target();
  ty_abi_status_t s = df_parse_options(args, &t);
  if (s) return s;
  ty_abi_device_t *d = calloc(1, sizeof(*d));
  if (!d) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  d->backend = b;
  d->target = t;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  d->threads = cores > 0 ? (uint32_t)cores : 1;
  *out_device = d;
  return NULL;
}

static void df_device_close(ty_abi_device_t *d) { free(d); }

static ty_abi_status_t df_device_synchronize(ty_abi_device_t *d) {
  (void)d; /* every call completes before it returns */
  return NULL;
}

ty_abi_status_t df_device_charge(ty_abi_device_t *d, uint64_t bytes, const char *what) {
  uint64_t now = __atomic_add_fetch(&d->allocated, bytes, __ATOMIC_SEQ_CST);
  if (now > d->target.dram_bytes || now < bytes) {
    __atomic_sub_fetch(&d->allocated, bytes, __ATOMIC_SEQ_CST);
    char want[32], have[32];
    ty_format_bytes(bytes, want, sizeof(want));
    ty_format_bytes(d->target.dram_bytes, have, sizeof(have));
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                           "dataflow: %s needs %s of device DRAM, more than is left of its %s "
                           "(open the device with a larger dram=SIZE)",
                           what, want, have);
  }
  uint64_t peak = __atomic_load_n(&d->peak_allocated, __ATOMIC_SEQ_CST);
  while (now > peak &&
         !__atomic_compare_exchange_n(&d->peak_allocated, &peak, now, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {
  }
  return NULL;
}

void df_device_release(ty_abi_device_t *d, uint64_t bytes) {
  __atomic_sub_fetch(&d->allocated, bytes, __ATOMIC_SEQ_CST);
}

static ty_abi_status_t df_buffer_alloc(ty_abi_device_t *d, const ty_abi_buffer_alloc_args_t *args,
                                       ty_abi_buffer_t **out_buffer) {
  *out_buffer = NULL;
  uint64_t alignment = args->alignment ? args->alignment : DF_ALIGNMENT;
  if (alignment & (alignment - 1) || alignment > 4096) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: buffer alignment %llu is not a power of two <= 4096",
                           (unsigned long long)alignment);
  }
  if (alignment < sizeof(void *)) alignment = sizeof(void *);
  ty_abi_status_t s = df_device_charge(d, args->size_bytes, "a buffer");
  if (s) return s;
  ty_abi_buffer_t *buf = calloc(1, sizeof(*buf));
  void *p = NULL;
  if (!buf || (args->size_bytes &&
               (args->size_bytes > SIZE_MAX - alignment ||
                posix_memalign(&p, (size_t)alignment, (size_t)args->size_bytes) != 0))) {
    free(buf);
    df_device_release(d, args->size_bytes);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                           "dataflow: the host ran out of memory emulating a %llu-byte buffer",
                           (unsigned long long)args->size_bytes);
  }
  buf->size = args->size_bytes;
  buf->data = p;
  *out_buffer = buf;
  return NULL;
}

static void df_buffer_free(ty_abi_device_t *d, ty_abi_buffer_t *buf) {
  if (!buf) return;
  df_device_release(d, buf->size);
  free(buf->data);
  free(buf);
}

static ty_abi_status_t df_buffer_write(ty_abi_device_t *d, ty_abi_buffer_t *buf, uint64_t offset,
                                       const void *src, uint64_t size) {
  (void)d;
  memcpy(buf->data + offset, src, (size_t)size);
  return NULL;
}

static ty_abi_status_t df_buffer_read(ty_abi_device_t *d, ty_abi_buffer_t *buf, uint64_t offset,
                                      void *dst, uint64_t size) {
  (void)d;
  memcpy(dst, buf->data + offset, (size_t)size);
  return NULL;
}

static ty_abi_status_t df_buffer_copy(ty_abi_device_t *d, ty_abi_buffer_t *src,
                                      uint64_t src_offset, ty_abi_buffer_t *dst,
                                      uint64_t dst_offset, uint64_t size) {
  (void)d;
  memcpy(dst->data + dst_offset, src->data + src_offset, (size_t)size);
  return NULL;
}

static const ty_backend_api_t df_api = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = TY_ABI_MINOR,
    .name = DF_NAME,
    .version = TY_DATAFLOW_VERSION,
    .backend_create = df_backend_create,
    .backend_destroy = df_backend_destroy,
    .device_count = df_device_count,
    .device_info = df_device_info,
    .device_open = df_device_open,
    .device_close = df_device_close,
    .device_synchronize = df_device_synchronize,
    .buffer_alloc = df_buffer_alloc,
    .buffer_free = df_buffer_free,
    .buffer_write = df_buffer_write,
    .buffer_read = df_buffer_read,
    .buffer_copy = df_buffer_copy,
    .graph_supports = df_graph_supports,
    .graph_compile = df_graph_compile,
    .executable_destroy = df_executable_destroy,
    .executable_execute = df_executable_execute,
    .executable_serialize = df_executable_serialize,
    .executable_deserialize = df_executable_deserialize,
    .executable_report = df_executable_report,
    .executable_graph = df_executable_graph,
    .executable_check_binding = df_executable_check_binding,
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == TY_ABI_MAJOR ? &df_api : NULL;
}
