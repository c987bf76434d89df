/* The cpu plugin's graph entries: the host executor (backends/common) with
 * the cpu kernel table; kernels=reference runs the reference kernels
 * throughout and kernels=fast-only refuses graphs with a node that has no
 * fast kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainyard/host_executor.h"
#include "trainyard/plugin_status.h"
#include "cpu_internal.h"

struct ty_abi_executable_s {
  ty_abi_device_t *device;
  ty_host_executor_t *executor;
};

ty_abi_status_t cpu_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *graph,
                                   ty_abi_node_support_t *out_support) {
  return ty_host_supports(graph, device->backend->info.dtype_mask, out_support);
}

/* UNIMPLEMENTED naming the node, its op and its operand dtypes. */
static ty_abi_status_t cpu_no_fast_kernel(const ty_abi_graph_t *g, uint32_t n) {
  static const char *const names[] = {"invalid", "f32", "bf16", "f16", "f64",
                                      "i32",     "i64", "u8"};
  const ty_abi_node_t *node = &g->nodes[n];
  char dtypes[96] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    uint32_t v = i < node->input_count ? node->inputs[i] : node->outputs[i - node->input_count];
    const char *name = v == UINT32_MAX ? "none"
                       : (uint32_t)g->values[v].dtype < TY_DTYPE_COUNT_
                           ? names[g->values[v].dtype]
                           : "?";
    int w = snprintf(dtypes + used, sizeof(dtypes) - used, "%s%s",
                     i == 0 ? "" : i == node->input_count ? " -> " : ", ", name);
    if (w < 0 || (size_t)w >= sizeof(dtypes) - used) break;
    used += (size_t)w;
  }
  return ty_plugin_error(TY_CODE_UNIMPLEMENTED,
                         "cpu: kernels=fast-only: no fast kernel for node %u (%s) with "
                         "operands %s; use kernels=fast to run it on the reference kernel",
                         n, node->op, dtypes);
}

static ty_host_kernel_fn_t cpu_find(void *user, const ty_abi_graph_t *g, uint32_t n,
                                    ty_abi_status_t *out_error) {
  const ty_abi_device_t *device = user;
  if (device->kernels == CPU_KERNELS_REFERENCE) return NULL;
  ty_host_kernel_fn_t fn = cpu_kernel_find(g, &g->nodes[n]);
  if (!fn && device->kernels == CPU_KERNELS_FAST_ONLY) *out_error = cpu_no_fast_kernel(g, n);
  return fn;
}

void cpu_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_host_executor_destroy(e->executor);
  free(e);
}

ty_abi_status_t cpu_graph_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                  ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  ty_host_executor_options_t options;
  const ty_abi_option_t *other = NULL;
  ty_abi_status_t bad = ty_host_executor_read_options(args, "cpu", &options, &other);
  if (bad) return bad;
  if (other) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: unknown compile option '%s' (the cpu backend "
                           "takes none; use device options such as cpu?threads=N)",
                           other->key);
  }
  ty_abi_status_t refused = ty_host_refuse_offload(args->graph, "cpu");
  if (refused) return refused;
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "cpu: out of memory compiling");
  e->device = device;
  ty_abi_status_t s =
      ty_host_executor_create_opts(args->graph, "cpu", cpu_find, device, &options, &e->executor);
  if (s) {
    free(e);
    return s;
  }
  *out_executable = e;
  return NULL;
}

static void cpu_buffer_view(ty_abi_buffer_t *buffer, unsigned char **out_data, uint64_t *out_size) {
  *out_data = buffer->data;
  *out_size = buffer->size;
}

ty_abi_status_t cpu_executable_execute(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  return ty_host_executor_run(e->executor, args, cpu_buffer_view, e->device->threads);
}

ty_abi_status_t cpu_executable_memory(ty_abi_executable_t *e, ty_abi_executable_memory_t *out) {
  ty_host_executor_memory(e->executor, out);
  return NULL;
}

ty_abi_status_t cpu_device_memory(ty_abi_device_t *device, uint32_t reset_peak,
                                  ty_abi_device_memory_t *out) {
  (void)device;
  ty_host_device_memory(reset_peak, out);
  return NULL;
}
