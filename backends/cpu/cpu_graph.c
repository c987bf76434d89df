/* The cpu plugin's graph entries: support check, compile (copy the graph,
 * plan memory, pick a kernel per node) and execute (resolve named bindings,
 * run the nodes in order, apply state updates). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/abi_graph.h"
#include "backends/common/memory_plan.h"
#include "backends/common/plugin_status.h"
#include "backends/cpu/cpu_internal.h"
#include "ops/reference/ref_interp.h"

#define CPU_ARENA_ALIGNMENT 64u

struct ty_abi_executable_s {
  ty_abi_device_t *device;
  ty_owned_graph_t *graph;
  ty_memory_plan_t plan;
  unsigned char *arena;
  cpu_kernel_fn_t *kernels; /* per node; NULL runs the reference kernel */
  void **data;              /* per value, resolved at execute */
  unsigned char *fallback;  /* storage for outputs the caller did not bind */
  uint64_t *fallback_offset;
  uint64_t fallback_bytes;
  uint32_t *sorted_named; /* indices of named bound values, sorted by name */
  uint32_t named_count;
};

static ty_abi_status_t cpu_oom(const char *what) {
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "cpu: out of memory %s", what);
}

ty_abi_status_t cpu_graph_supports(ty_abi_device_t *device,
                                   const ty_abi_graph_t *graph,
                                   ty_abi_node_support_t *out_support) {
  uint32_t mask = device->backend->info.dtype_mask;
  for (uint32_t n = 0; n < graph->node_count; ++n) {
    const ty_abi_node_t *node = &graph->nodes[n];
    ty_abi_node_support_t *r = &out_support[n];
    r->supported = 1;
    if (!ty_ref_supports_op(node->op)) {
      r->supported = 0;
      snprintf(r->reason, sizeof(r->reason), "unknown op '%s'", node->op);
      continue;
    }
    for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
      uint32_t v = i < node->input_count ? node->inputs[i]
                                          : node->outputs[i - node->input_count];
      if (v == UINT32_MAX) continue;
      if (!(mask & TY_DTYPE_BIT(graph->values[v].dtype))) {
        r->supported = 0;
        snprintf(r->reason, sizeof(r->reason), "dtype of operand %u not supported", i);
        break;
      }
    }
  }
  return NULL;
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

static const ty_abi_graph_t *cpu_exe_graph(const ty_abi_executable_t *e) {
  return &e->graph->graph;
}

static int cpu_name_compare(const void *a, const void *b, void *ctx) {
  const ty_abi_graph_t *g = ctx;
  return strcmp(g->values[*(const uint32_t *)a].name, g->values[*(const uint32_t *)b].name);
}

void cpu_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_memory_plan_free(&e->plan);
  ty_owned_graph_free(e->graph);
  free(e->arena);
  free(e->kernels);
  free(e->data);
  free(e->fallback);
  free(e->fallback_offset);
  free(e->sorted_named);
  free(e);
}

ty_abi_status_t cpu_graph_compile(ty_abi_device_t *device,
                                  const ty_abi_compile_args_t *args,
                                  ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  if (args->option_count > 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: unknown compile option '%s' (the cpu backend "
                           "takes none; use device options such as cpu?threads=N)",
                           args->options[0].key);
  }
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return cpu_oom("compiling a graph");
  e->device = device;
  e->graph = ty_owned_graph_copy(args->graph);
  if (!e->graph) goto oom;
  const ty_abi_graph_t *g = cpu_exe_graph(e);
  if (ty_memory_plan_build(e->graph, CPU_ARENA_ALIGNMENT, &e->plan) != TY_CODE_OK) goto oom;
  if (e->plan.arena_bytes) {
    e->arena = aligned_alloc(CPU_ARENA_ALIGNMENT,
                             (e->plan.arena_bytes + CPU_ARENA_ALIGNMENT - 1) &
                                 ~(uint64_t)(CPU_ARENA_ALIGNMENT - 1));
    if (!e->arena) {
      unsigned long long bytes = (unsigned long long)e->plan.arena_bytes;
      cpu_executable_destroy(e);
      return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                             "cpu: cannot allocate a %llu-byte activation arena", bytes);
    }
  }
  e->kernels = calloc(g->node_count ? g->node_count : 1, sizeof(*e->kernels));
  e->data = calloc(g->value_count ? g->value_count : 1, sizeof(*e->data));
  e->fallback_offset = calloc(g->value_count ? g->value_count : 1, sizeof(uint64_t));
  e->sorted_named = calloc(g->value_count ? g->value_count : 1, sizeof(uint32_t));
  if (!e->kernels || !e->data || !e->fallback_offset || !e->sorted_named) goto oom;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    e->kernels[n] = device->kernels != CPU_KERNELS_REFERENCE
                        ? cpu_kernel_find(g, &g->nodes[n])
                        : NULL;
    if (!e->kernels[n] && device->kernels == CPU_KERNELS_FAST_ONLY) {
      ty_abi_status_t s = cpu_no_fast_kernel(g, n);
      cpu_executable_destroy(e);
      return s;
    }
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    if (e->plan.storage[v].kind == TY_STORAGE_BOUND) {
      e->sorted_named[e->named_count++] = v;
      if (val->role == TY_VALUE_INTERMEDIATE) { /* an output */
        e->fallback_offset[v] = e->fallback_bytes;
        e->fallback_bytes += (e->graph->value_bytes[v] + 63) & ~(uint64_t)63;
      }
    }
  }
  qsort_r(e->sorted_named, e->named_count, sizeof(uint32_t), cpu_name_compare, (void *)g);
  *out_executable = e;
  return NULL;
oom:
  cpu_executable_destroy(e);
  return cpu_oom("compiling a graph");
}

static uint32_t cpu_find_named(const ty_abi_executable_t *e, const char *name) {
  const ty_abi_graph_t *g = cpu_exe_graph(e);
  uint32_t lo = 0, hi = e->named_count;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int c = strcmp(g->values[e->sorted_named[mid]].name, name);
    if (c == 0) return e->sorted_named[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return UINT32_MAX;
}

/* Points data[] at every value's storage for this run. */
static ty_abi_status_t cpu_resolve(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  const ty_abi_graph_t *g = cpu_exe_graph(e);
  for (uint32_t v = 0; v < g->value_count; ++v) e->data[v] = NULL;
  for (uint32_t b = 0; b < args->binding_count; ++b) {
    const ty_abi_binding_t *bind = &args->bindings[b];
    uint32_t v = cpu_find_named(e, bind->name);
    if (v == UINT32_MAX) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "cpu: no input, state or output named '%s' in graph %.12s",
                             bind->name, e->graph->hash_hex);
    }
    if (bind->offset > bind->buffer->size ||
        e->graph->value_bytes[v] > bind->buffer->size - bind->offset) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "cpu: binding '%s' needs %llu bytes at offset %llu of "
                             "a %llu-byte buffer",
                             bind->name, (unsigned long long)e->graph->value_bytes[v],
                             (unsigned long long)bind->offset,
                             (unsigned long long)bind->buffer->size);
    }
    e->data[v] = bind->buffer->data + bind->offset;
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    const ty_value_storage_t *st = &e->plan.storage[v];
    switch (st->kind) {
      case TY_STORAGE_CONSTANT: e->data[v] = (void *)val->const_data; break;
      case TY_STORAGE_ARENA: e->data[v] = e->arena + st->offset; break;
      case TY_STORAGE_STATE_ALIAS: break; /* after bound values are known */
      case TY_STORAGE_BOUND:
        if (e->data[v]) break;
        if (val->role != TY_VALUE_INTERMEDIATE) {
          return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "cpu: %s '%s' is not bound",
                                 val->role == TY_VALUE_STATE ? "state" : "input",
                                 val->name);
        }
        if (!e->fallback && e->fallback_bytes) {
          e->fallback = aligned_alloc(64, e->fallback_bytes);
          if (!e->fallback) return cpu_oom("for unbound outputs");
        }
        e->data[v] = e->fallback + e->fallback_offset[v];
        break;
    }
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (e->plan.storage[v].kind == TY_STORAGE_STATE_ALIAS) {
      e->data[v] = e->data[e->plan.storage[v].alias];
    }
  }
  return NULL;
}

ty_abi_status_t cpu_executable_execute(ty_abi_executable_t *e,
                                       const ty_abi_execute_args_t *args) {
  ty_abi_status_t s = cpu_resolve(e, args);
  if (s) return s;
  const ty_abi_graph_t *g = cpu_exe_graph(e);
  cpu_node_ctx_t ctx = {
      .graph = g,
      .data = e->data,
      .threads = e->device->threads,
  };
  for (uint32_t n = 0; n < g->node_count; ++n) {
    if (e->kernels[n]) {
      ctx.node = &g->nodes[n];
      ctx.node_index = n;
      s = e->kernels[n](&ctx);
    } else {
      s = (ty_abi_status_t)(void *)ty_ref_execute_node(g, n, e->data);
    }
    if (s) return s;
  }
  for (uint32_t u = 0; u < e->plan.copy_count; ++u) {
    const ty_abi_state_update_t *up = &e->plan.copies[u];
    if (e->data[up->state] != e->data[up->value]) {
      memmove(e->data[up->state], e->data[up->value], e->graph->value_bytes[up->state]);
    }
  }
  return NULL;
}
