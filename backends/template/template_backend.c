/* The template backend: the smallest complete Trainyard plugin.
 *
 * Copy this folder to start a new backend. It implements every v1.0 entry of
 * hal/backend_abi.h with one device whose "device memory" is ordinary host
 * memory, so each step a real backend must take is here, in order, with the
 * reasons. docs/plugin-abi.md is the reference; this file is the walk-through.
 *
 * Rules worth repeating before you start:
 *  1. Include only the SDK's headers: <trainyard/backend_abi.h> and, if you
 *     want them, the backend support library's (<trainyard/host_executor.h>,
 *     ...). Never include or link the Trainyard core.
 *  2. Export only ty_backend_query (TY_BACKEND_EXPORT); build with
 *     -fvisibility=hidden so nothing else leaks (CMake does this for you via
 *     trainyard_add_backend_plugin(); pkg-config trainyard-plugin's cflags
 *     include it).
 *  3. Report every failure as a status from host->status_make() whose message
 *     names the thing that failed. Never print, never abort, never exit.
 *  4. Vendor runtimes (libcuda.so.1, libOpenCL.so.1, ...) are dlopen'ed in
 *     backend_create; if one is missing, return UNAVAILABLE there.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <trainyard/backend_abi.h>
#include <trainyard/host_executor.h>
#include <trainyard/plugin_status.h>

/* Step 1: your backend's state. The host treats these as opaque handles:
 * it stores the pointers and hands them back, nothing more. */
struct ty_abi_backend_s {
  const ty_host_api_t *host; /* for status_make; valid until destroy */
};

struct ty_abi_device_s {
  ty_abi_backend_t *backend;
};

struct ty_abi_buffer_s {
  uint64_t size;
  unsigned char *data; /* NULL for a zero-size buffer */
};

/* The template's device advertises a fixed amount of memory. A real backend
 * asks its driver. Allocations beyond it fail with RESOURCE_EXHAUSTED: the
 * host relies on that instead of an abort or an OOM kill. */
#define TEMPLATE_MEMORY_BYTES (1ull << 30)

/* A helper that formats a message and wraps it in a host status. Every
 * plugin ends up with one of these. */
static ty_abi_status_t template_error(const ty_host_api_t *host, ty_code_t code,
                                      const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ty_abi_status_t template_error(const ty_host_api_t *host, ty_code_t code,
                                      const char *fmt, ...) {
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  return host->status_make(code, message);
}

/* Step 2: backend lifetime. backend_create runs once per process when the
 * host loads the plugin. Keep it cheap: no device is opened yet. This is the
 * place to dlopen a vendor runtime and to return UNAVAILABLE without it. */
static ty_abi_status_t template_backend_create(
    const ty_abi_backend_create_args_t *args, ty_abi_backend_t **out_backend) {
  *out_backend = NULL;
  ty_abi_backend_t *backend = calloc(1, sizeof(*backend));
  if (!backend) {
    return args->host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                   "template: out of memory creating backend");
  }
  backend->host = args->host;
  /* The support library reports errors through the host's services. */
  ty_plugin_status_init(args->host);
  *out_backend = backend;
  return NULL; /* NULL is OK */
}

static void template_backend_destroy(ty_abi_backend_t *backend) {
  free(backend);
}

/* Step 3: device enumeration. The host calls these to list devices in
 * `trainyard devices` and to validate URIs like `template:0`. */
static ty_abi_status_t template_device_count(ty_abi_backend_t *backend,
                                             uint32_t *out_count) {
  (void)backend;
  *out_count = 1;
  return NULL;
}

static ty_abi_status_t template_device_info(ty_abi_backend_t *backend,
                                            uint32_t index,
                                            ty_abi_device_info_t *out_info) {
  (void)backend;
  (void)index; /* the host has already checked index < device_count */
  /* out_info->struct_size is the HOST's size: only write fields that fit.
   * Every v1.0 field is always there; fields from later minors need
   * TY_ABI_HAS_FIELD(out_info, ty_abi_device_info_t, field). */
  snprintf(out_info->name, sizeof(out_info->name), "Template device (host memory)");
  snprintf(out_info->vendor, sizeof(out_info->vendor), "Trainyard");
  snprintf(out_info->driver_version, sizeof(out_info->driver_version), "none");
  out_info->kind = TY_DEVICE_KIND_OTHER;
  out_info->compute_units = 1;
  out_info->memory_bytes = TEMPLATE_MEMORY_BYTES;
  out_info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                         TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                         TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                         TY_DTYPE_BIT(TY_DTYPE_U8);
  out_info->emulated = 1; /* honest: this is not real hardware */
  return NULL;
}

/* Step 4: opening a device. URI options (`template?key=value`) arrive here;
 * reject every key you do not understand, so typos never pass silently. */
static ty_abi_status_t template_device_open(ty_abi_backend_t *backend,
                                           const ty_abi_device_open_args_t *args,
                                           ty_abi_device_t **out_device) {
  *out_device = NULL;
  if (args->option_count > 0) {
    return template_error(backend->host, TY_CODE_INVALID_ARGUMENT,
                          "template: unknown device option '%s' (the template "
                          "device takes no options)",
                          args->options[0].key);
  }
  ty_abi_device_t *device = calloc(1, sizeof(*device));
  if (!device) {
    return backend->host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                      "template: out of memory opening device");
  }
  device->backend = backend;
  *out_device = device;
  return NULL;
}

static void template_device_close(ty_abi_device_t *device) { free(device); }

/* Everything in this backend completes before returning, so there is never
 * outstanding work. An asynchronous backend waits for its queues here. */
static ty_abi_status_t template_device_synchronize(ty_abi_device_t *device) {
  (void)device;
  return NULL;
}

/* Step 5: buffers. The host has already checked that every offset/size pair
 * lies inside the buffer, so these functions only move bytes. */
static ty_abi_status_t template_buffer_alloc(ty_abi_device_t *device,
                                             const ty_abi_buffer_alloc_args_t *args,
                                             ty_abi_buffer_t **out_buffer) {
  const ty_host_api_t *host = device->backend->host;
  *out_buffer = NULL;
  if (args->size_bytes > TEMPLATE_MEMORY_BYTES) {
    return template_error(host, TY_CODE_RESOURCE_EXHAUSTED,
                          "template: cannot allocate %llu bytes; the device has "
                          "%llu bytes",
                          (unsigned long long)args->size_bytes,
                          (unsigned long long)TEMPLATE_MEMORY_BYTES);
  }
  ty_abi_buffer_t *buffer = calloc(1, sizeof(*buffer));
  if (!buffer) {
    return host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                             "template: out of memory for a buffer record");
  }
  buffer->size = args->size_bytes;
  if (buffer->size > 0) {
    buffer->data = malloc((size_t)buffer->size);
    if (!buffer->data) {
      free(buffer);
      return template_error(host, TY_CODE_RESOURCE_EXHAUSTED,
                            "template: out of memory allocating %llu bytes",
                            (unsigned long long)args->size_bytes);
    }
  }
  *out_buffer = buffer;
  return NULL;
}

static void template_buffer_free(ty_abi_device_t *device,
                                 ty_abi_buffer_t *buffer) {
  (void)device;
  if (!buffer) return;
  free(buffer->data);
  free(buffer);
}

static ty_abi_status_t template_buffer_write(ty_abi_device_t *device,
                                             ty_abi_buffer_t *buffer,
                                             uint64_t offset, const void *src,
                                             uint64_t size) {
  (void)device;
  memcpy(buffer->data + offset, src, (size_t)size);
  return NULL;
}

static ty_abi_status_t template_buffer_read(ty_abi_device_t *device,
                                            ty_abi_buffer_t *buffer,
                                            uint64_t offset, void *dst,
                                            uint64_t size) {
  (void)device;
  memcpy(dst, buffer->data + offset, (size_t)size);
  return NULL;
}

static ty_abi_status_t template_buffer_copy(ty_abi_device_t *device,
                                            ty_abi_buffer_t *src,
                                            uint64_t src_offset,
                                            ty_abi_buffer_t *dst,
                                            uint64_t dst_offset, uint64_t size) {
  (void)device;
  memcpy(dst->data + dst_offset, src->data + src_offset, (size_t)size);
  return NULL;
}

/* Step 6: graphs (ABI 1.1). The host hands over a whole graph; a device
 * whose memory the host can address can let the support library's host
 * executor do the plumbing (graph copy, memory plan, named bindings, state
 * updates) and run every node on the f64 reference kernels. That is correct
 * from day one — `trainyard conform --backend template` passes — and a
 * real backend then replaces ops one by one: give the executor a finder
 * that returns your kernel for the ops you have written (see
 * backends/cpu/cpu_graph.c). A device with its own memory (a GPU) builds
 * on the device-executor core instead (<trainyard/device_exec.h>: bindings,
 * operand references, op table, data errors; backends/opencl is the
 * smallest example) and writes its commands and kernels. */
#if !defined(TEMPLATE_ABI_1_0)
struct ty_abi_executable_s {
  ty_host_executor_t *executor;
};

static ty_abi_status_t template_graph_supports(ty_abi_device_t *device,
                                               const ty_abi_graph_t *graph,
                                               ty_abi_node_support_t *out_support) {
  ty_abi_device_info_t info = {.struct_size = sizeof(info)};
  template_device_info(device->backend, 0, &info);
  return ty_host_supports(graph, info.dtype_mask, out_support);
}

static ty_abi_status_t template_graph_compile(ty_abi_device_t *device,
                                              const ty_abi_compile_args_t *args,
                                              ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  /* Compile options are yours to define; keys starting with "debug." are
   * the host's debugging requests (ABI 1.9), which the SDK's executor reads
   * (debug.guards: guard gaps between its arena slots, which conform asks
   * for) and which you must never refuse. It also reads deterministic=1
   * (ABI 1.10, --deterministic) into options.deterministic: the reference
   * kernels honour it (one thread, each element summed in f64 in a fixed
   * order), so the template accepts it. Once you add kernels of your own,
   * honour it (ty_host_node_ctx_t.deterministic: no split chosen from the
   * batch or the threads) or refuse it here with UNIMPLEMENTED, naming the
   * kernels that are not batch-invariant. */
  ty_host_executor_options_t options;
  const ty_abi_option_t *other = NULL;
  ty_abi_status_t bad = ty_host_executor_read_options(args, "template", &options, &other);
  if (bad) return bad;
  if (other) {
    return template_error(device->backend->host, TY_CODE_INVALID_ARGUMENT,
                          "template: unknown compile option '%s'", other->key);
  }
  /* ABI 1.3: a state the host wants in pinned host memory (optimizer
   * offload) means nothing here, where device memory is host memory. A
   * device with memory of its own would honour it instead. */
  ty_abi_status_t refused = ty_host_refuse_offload(args->graph, "template");
  if (refused) return refused;
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) {
    return device->backend->host->status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                              "template: out of memory compiling");
  }
  /* No finder: every node runs its reference kernel. */
  ty_abi_status_t s =
      ty_host_executor_create_opts(args->graph, "template", NULL, NULL, &options, &e->executor);
  if (s) {
    free(e);
    return s;
  }
  *out_executable = e;
  return NULL;
}

static void template_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_host_executor_destroy(e->executor);
  free(e);
}

static void template_buffer_view(ty_abi_buffer_t *buffer, unsigned char **out_data,
                                 uint64_t *out_size) {
  *out_data = buffer->data;
  *out_size = buffer->size;
}

/* Pass `args` through whole: under mpirun its ABI 1.5 host_comm reaches
 * the executor, which runs the graph's collective ops (all_reduce) through
 * host->collective, so this plugin needs no transport of its own. */
static ty_abi_status_t template_executable_execute(ty_abi_executable_t *e,
                                                   const ty_abi_execute_args_t *args) {
  return ty_host_executor_run(e->executor, args, template_buffer_view, 1);
}
#endif /* !TEMPLATE_ABI_1_0 */

/* Step 7: the table. It is const and static: the host keeps the pointer for
 * as long as the plugin is loaded. Fill struct_size and the version from the
 * header you compiled against; that is how the host knows what it may read. */
static const ty_backend_api_t template_api = {
#if defined(TEMPLATE_ABI_1_0)
    /* The tests also build this plugin as it was for ABI 1.0: a table that
     * ends before the 1.1 graph entries. A 1.1 host must load it and report
     * that it cannot run graphs: how minors stay compatible. */
    .struct_size = offsetof(ty_backend_api_t, graph_supports),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = 0,
#else
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = TY_ABI_MINOR,
#endif
    .name = "template", /* must match the file: libty_backend_template.so */
    .version = "0.1.0",
    .backend_create = template_backend_create,
    .backend_destroy = template_backend_destroy,
    .device_count = template_device_count,
    .device_info = template_device_info,
    .device_open = template_device_open,
    .device_close = template_device_close,
    .device_synchronize = template_device_synchronize,
    .buffer_alloc = template_buffer_alloc,
    .buffer_free = template_buffer_free,
    .buffer_write = template_buffer_write,
    .buffer_read = template_buffer_read,
    .buffer_copy = template_buffer_copy,
#if !defined(TEMPLATE_ABI_1_0)
    .graph_supports = template_graph_supports,
    .graph_compile = template_graph_compile,
    .executable_destroy = template_executable_destroy,
    .executable_execute = template_executable_execute,
#endif
    /* Optional entries stay NULL: the host reports UNIMPLEMENTED for them
     * and works around them. E.g. the collectives of ABI 1.4 (comm_unique_id,
     * comm_create, comm_destroy, comm_all_reduce, comm_reduce_scatter,
     * comm_all_gather, comm_broadcast): without them a data-parallel run
     * stages the gradients through host memory and reduces them over MPI. A
     * device with its own collective library (NCCL, ...) sets all seven or
     * none; `trainyard check` says which path its runs take. Collective
     * OPS in a graph (all_reduce, ABI 1.5) need none of them: the host
     * executor reduces through the host's service (docs/plugin-abi.md).
     * ABI 1.8's point to point (comm_send, comm_recv; both or none, with
     * the collectives) moves a pipeline's activations device to device;
     * without them they go through host memory over MPI. */
};

/* Step 8: the one exported symbol. Return NULL for a major you were not
 * built for; the host then reports the plugin as unable to serve it. */
TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(
    uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_minor; /* minors are compatible by construction */
  if (host_abi_major != TY_ABI_MAJOR) return NULL;
  return &template_api;
}
