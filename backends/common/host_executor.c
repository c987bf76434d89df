/* The host executor: graph copy, memory plan, per-node kernel choice,
 * named bindings, node-by-node execution and state updates (see
 * host_executor.h). */
#include "backends/common/host_executor.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/device_exec.h"
#include "backends/common/host_meter.h"
#include "backends/common/host_profile.h"
#include "hal/memory_plan.h"
#include "backends/common/plugin_status.h"
#include "ops/reference/ref_interp.h"

#define TY_HOST_ARENA_ALIGNMENT 64u

struct ty_host_executor_t {
  char plugin[32];
  ty_dev_exec_t core;           /* graph, plan, named values, locations */
  unsigned char *arena;
  ty_host_kernel_fn_t *kernels; /* per node; NULL runs the reference kernel */
  uint32_t reference_nodes;
  void **data;                  /* per value, resolved at execute */
  unsigned char *fallback;      /* storage for outputs the caller did not bind */
  unsigned char *ones;          /* an unbound loss-gradient seed's ones */
  bool seed_defaulted;          /* the last run used them */
  ty_host_profile_t *profile;   /* NULL unless TRAINYARD_PROFILE is set */
  /* debug.guards (ty_host_executor_options_t): every activation in a slot
   * of its own in `debug`, gap g (0..slot_count) at gap_offset[g] before
   * slot g, the run's pattern of every gap in guard_expect. */
  bool guards;
  bool deterministic; /* handed to every kernel (ty_host_node_ctx_t) */
  uint64_t guard_seed, runs;
  unsigned char *debug;
  uint64_t debug_bytes;
  uint64_t *slot_offset;    /* per value; UINT64_MAX: no slot */
  uint32_t *slot_value;     /* per slot: its value */
  uint32_t slot_count;
  uint64_t *gap_offset;     /* slot_count + 1 gaps: each starts at the byte */
  uint64_t *gap_bytes;      /* right after its slot's end (padding included) */
  uint64_t *expect_offset;  /* where each gap's pattern is in guard_expect */
  unsigned char *guard_expect;
  uint32_t *producer;       /* per value: the node that writes it, or UINT32_MAX */
};

/* Whether a value lives in the executor's own memory (an arena slot, or the
 * storage of an output the caller did not bind). */
static bool ty_host_is_own(const ty_host_executor_t *e, uint32_t v) {
  const ty_value_storage_t *st = &e->core.plan.storage[v];
  return st->kind == TY_STORAGE_ARENA ||
         (st->kind == TY_STORAGE_BOUND &&
          ty_host_executor_graph(e)->values[v].role == TY_VALUE_INTERMEDIATE);
}

static ty_abi_status_t ty_host_oom(const ty_host_executor_t *e, const char *what) {
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory %s",
                         e ? e->plugin : "host executor", what);
}

ty_abi_status_t ty_host_supports(const ty_abi_graph_t *graph, uint32_t mask,
                                 ty_abi_node_support_t *out_support) {
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

const ty_abi_graph_t *ty_host_executor_graph(const ty_host_executor_t *e) {
  return ty_dev_exec_graph(&e->core);
}

uint32_t ty_host_executor_reference_nodes(const ty_host_executor_t *e) {
  return e->reference_nodes;
}

void ty_host_executor_destroy(ty_host_executor_t *e) {
  if (!e) return;
  if (e->profile) {
    const ty_abi_graph_t *g = ty_host_executor_graph(e);
    uint8_t *reference = calloc(g->node_count ? g->node_count : 1, 1);
    for (uint32_t n = 0; reference && n < g->node_count; ++n) reference[n] = !e->kernels[n];
    ty_host_profile_report_and_free(e->profile, e->plugin, g, reference);
    free(reference);
  }
  ty_dev_exec_free(&e->core);
  ty_host_mem_free(e->arena);
  free(e->kernels);
  free(e->data);
  ty_host_mem_free(e->fallback);
  ty_host_mem_free(e->ones);
  ty_host_mem_free(e->debug);
  free(e->slot_offset);
  free(e->slot_value);
  free(e->gap_offset);
  free(e->gap_bytes);
  free(e->expect_offset);
  free(e->guard_expect);
  free(e->producer);
  free(e);
}

ty_abi_status_t ty_host_executor_read_options(const ty_abi_compile_args_t *args,
                                              const char *plugin,
                                              ty_host_executor_options_t *out,
                                              const ty_abi_option_t **out_other) {
  memset(out, 0, sizeof(*out));
  *out_other = NULL;
  const size_t prefix = strlen(TY_ABI_DEBUG_OPTION_PREFIX);
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const ty_abi_option_t *o = &args->options[i];
    if (strcmp(o->key, TY_ABI_DETERMINISTIC_OPTION) == 0) {
      if (strcmp(o->value, "1") != 0 && strcmp(o->value, "0") != 0) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "%s: compile option %s='%s' must be 1 or 0",
                               plugin, TY_ABI_DETERMINISTIC_OPTION, o->value);
      }
      out->deterministic = o->value[0] == '1';
      continue;
    }
    if (strncmp(o->key, TY_ABI_DEBUG_OPTION_PREFIX, prefix) != 0) {
      if (!*out_other) *out_other = o;
      continue;
    }
    if (strcmp(o->key, "debug.guards") != 0) continue; /* a request this SDK does not know */
    char *end = NULL;
    unsigned long long seed = strtoull(o->value, &end, 10);
    if (!o->value[0] || *end || o->value[0] == '-') {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "%s: compile option debug.guards='%s' is not a decimal seed",
                             plugin, o->value);
    }
    out->guards = true;
    out->guard_seed = seed;
  }
  return NULL;
}

/* debug.guards: a slot per activation between guard gaps, and each value's
 * producer for the messages. */
static bool ty_host_guards_layout(ty_host_executor_t *e) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  const uint32_t count = g->value_count ? g->value_count : 1;
  e->slot_offset = malloc(count * sizeof(uint64_t));
  e->slot_value = calloc(count, sizeof(uint32_t));
  e->gap_offset = calloc((size_t)count + 1, sizeof(uint64_t));
  e->gap_bytes = calloc((size_t)count + 1, sizeof(uint64_t));
  e->expect_offset = calloc((size_t)count + 1, sizeof(uint64_t));
  e->producer = malloc(count * sizeof(uint32_t));
  if (!e->slot_offset || !e->slot_value || !e->gap_offset || !e->gap_bytes ||
      !e->expect_offset || !e->producer) {
    return false;
  }
  for (uint32_t v = 0; v < count; ++v) {
    e->slot_offset[v] = UINT64_MAX;
    e->producer[v] = UINT32_MAX;
  }
  for (uint32_t n = 0; n < g->node_count; ++n) {
    for (uint32_t o = 0; o < g->nodes[n].output_count; ++o) {
      uint32_t v = g->nodes[n].outputs[o];
      if (v != UINT32_MAX && e->producer[v] == UINT32_MAX) e->producer[v] = n;
    }
  }
  /* Slots start aligned; a gap runs from the last byte of its slot to the
   * next slot's start, so even a one-byte overrun lands in it. */
  uint64_t off = TY_HOST_GUARD_BYTES, expect = TY_HOST_GUARD_BYTES; /* gap 0: [0, 64) */
  e->gap_bytes[0] = TY_HOST_GUARD_BYTES;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (!ty_host_is_own(e, v)) continue;
    e->slot_value[e->slot_count] = v;
    e->slot_offset[v] = off;
    const uint64_t end = off + e->core.graph->value_bytes[v];
    off = ((end + TY_HOST_ARENA_ALIGNMENT - 1) & ~(uint64_t)(TY_HOST_ARENA_ALIGNMENT - 1)) +
          TY_HOST_GUARD_BYTES;
    const uint32_t gap = ++e->slot_count;
    e->gap_offset[gap] = end;
    e->gap_bytes[gap] = off - end;
    e->expect_offset[gap] = expect;
    expect += off - end;
  }
  e->debug_bytes = off;
  e->guard_expect = malloc((size_t)expect);
  e->debug = ty_host_mem_alloc_aligned(off, TY_HOST_ARENA_ALIGNMENT);
  return e->guard_expect && e->debug;
}

static uint64_t ty_host_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* A new pattern per gap and per run: an overrun that copies another slot's
 * gap, or last run's bytes, never matches. Slots become 0xFF (NaN). */
static void ty_host_guards_fill(ty_host_executor_t *e) {
  e->runs++;
  const uint64_t run_key = ty_host_mix(e->guard_seed * 0x9e3779b97f4a7c15ull + e->runs);
  for (uint32_t gap = 0; gap <= e->slot_count; ++gap) {
    unsigned char *want = e->guard_expect + e->expect_offset[gap];
    const uint64_t key = ty_host_mix(run_key ^ ((uint64_t)gap << 24));
    for (uint64_t i = 0; i < e->gap_bytes[gap]; ++i) {
      want[i] = (unsigned char)(ty_host_mix(key + (i >> 3)) >> (8 * (i & 7)));
    }
    memcpy(e->debug + e->gap_offset[gap], want, (size_t)e->gap_bytes[gap]);
    if (gap < e->slot_count) {
      uint32_t v = e->slot_value[gap];
      memset(e->debug + e->slot_offset[v], 0xFF, (size_t)e->core.graph->value_bytes[v]);
    }
  }
}

/* "'name'" or "#v (unnamed)". */
static void ty_host_value_label(const ty_abi_graph_t *g, uint32_t v, char *out, size_t cap) {
  if (v == UINT32_MAX) snprintf(out, cap, "none");
  else if (g->values[v].name && g->values[v].name[0]) snprintf(out, cap, "'%s'", g->values[v].name);
  else snprintf(out, cap, "#%u (unnamed)", v);
}

/* "node 14 (gelu, output 'h.0.mlp.act')" */
static void ty_host_node_label(const ty_host_executor_t *e, uint32_t n, char *out, size_t cap) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  const ty_abi_node_t *node = &g->nodes[n];
  char value[96];
  ty_host_value_label(g, node->output_count ? node->outputs[0] : UINT32_MAX, value,
                      sizeof(value));
  snprintf(out, cap, "node %u (%s, output %s)", n, node->op, value);
}

/* DATA_LOSS naming node n and the slot beside the first damaged gap. */
static ty_abi_status_t ty_host_guards_check(const ty_host_executor_t *e, uint32_t n) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  for (uint32_t gap = 0; gap <= e->slot_count; ++gap) {
    const unsigned char *got = e->debug + e->gap_offset[gap];
    const unsigned char *want = e->guard_expect + e->expect_offset[gap];
    const uint64_t bytes = e->gap_bytes[gap];
    if (memcmp(got, want, (size_t)bytes) == 0) continue;
    uint64_t first = 0, changed = 0;
    while (got[first] == want[first]) ++first;
    for (uint64_t i = first; i < bytes; ++i) changed += got[i] != want[i];
    /* The gap after slot gap-1 (an overrun of it), or before slot 0. */
    const bool after = gap > 0;
    const uint32_t v = e->slot_value[after ? gap - 1 : 0];
    char node[160], value[96], maker[160] = "";
    ty_host_node_label(e, n, node, sizeof(node));
    ty_host_value_label(g, v, value, sizeof(value));
    if (e->producer[v] != UINT32_MAX) {
      snprintf(maker, sizeof(maker), ", written by node %u (%s)", e->producer[v],
               g->nodes[e->producer[v]].op);
    }
    return ty_plugin_error(
        TY_CODE_DATA_LOSS,
        "%s: %s wrote outside its memory: %llu of the %llu guard bytes %s arena slot %u "
        "(value %s, %llu bytes%s) changed, the first at byte %s%llu of the slot "
        "(debug.guards)",
        e->plugin, node, (unsigned long long)changed, (unsigned long long)bytes,
        after ? "after" : "before", after ? gap - 1 : 0, value,
        (unsigned long long)e->core.graph->value_bytes[v], maker, after ? "+" : "-",
        after ? (unsigned long long)(e->core.graph->value_bytes[v] + first)
              : (unsigned long long)(bytes - first));
  }
  return NULL;
}

/* A kernel's error, prefixed with the node that raised it. */
static ty_abi_status_t ty_host_node_error(const ty_host_executor_t *e, uint32_t n,
                                          ty_abi_status_t s) {
  const ty_host_api_t *host = ty_plugin_host_api();
  if (!host || !TY_ABI_HAS_FIELD(host, ty_host_api_t, status_message) || !host->status_message ||
      !host->status_code) {
    return s; /* a 1.0 host: its statuses cannot be read */
  }
  char node[160];
  ty_host_node_label(e, n, node, sizeof(node));
  ty_abi_status_t named =
      ty_plugin_error(host->status_code(s), "%s: %s", node, host->status_message(s));
  host->status_free(s);
  return named;
}

bool ty_host_executor_seed_defaulted(const ty_host_executor_t *e) { return e->seed_defaulted; }

uint64_t ty_host_executor_arena_bytes(const ty_host_executor_t *e) {
  return e->guards ? e->debug_bytes : e->core.plan.arena_bytes;
}

void ty_host_executor_memory(const ty_host_executor_t *e, ty_abi_executable_memory_t *out) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  uint64_t scratch = 0;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    uint64_t w = ty_desc_node_workspace_bytes(g, &g->nodes[n]);
    if (w > scratch) scratch = w;
  }
  out->arena_bytes = ty_host_executor_arena_bytes(e);
  if (TY_ABI_HAS_FIELD(out, ty_abi_executable_memory_t, scratch_bytes)) out->scratch_bytes = scratch;
  if (TY_ABI_HAS_FIELD(out, ty_abi_executable_memory_t, host_bytes)) out->host_bytes = 0;
}

void ty_host_device_memory(uint32_t reset_peak, ty_abi_device_memory_t *out) {
  uint64_t in_use = 0, peak = 0;
  ty_host_meter_read(&in_use, &peak);
  out->in_use_bytes = in_use;
  out->peak_bytes = peak;
  if (TY_ABI_HAS_FIELD(out, ty_abi_device_memory_t, how)) {
    snprintf(out->how, sizeof(out->how),
             "allocator counter: buffers, activation arenas and the large kernel scratch, "
             "at every allocation (not the process RSS)");
  }
  if (reset_peak) ty_host_meter_reset_peak();
}

ty_abi_status_t ty_host_refuse_offload(const ty_abi_graph_t *g, const char *plugin) {
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (!(g->values[v].flags & TY_VALUE_FLAG_HOST_RESIDENT)) continue;
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "%s: state '%s' is flagged to live in host memory (--offload "
                           "optimizer), but this device's memory is host memory already: "
                           "offload would move nothing; run without --offload",
                           plugin, g->values[v].name);
  }
  return NULL;
}

/* Ones in a float dtype, for an unbound loss-gradient seed. */
static unsigned char *ty_host_ones(ty_dtype_t dtype, uint64_t bytes) {
  unsigned char *p = ty_host_mem_alloc(bytes);
  if (!p) return NULL;
  size_t size = ty_desc_dtype_size(dtype), n = size ? (size_t)(bytes / size) : 0;
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case TY_DTYPE_F32: ((float *)p)[i] = 1.0f; break;
      case TY_DTYPE_F64: ((double *)p)[i] = 1.0; break;
      case TY_DTYPE_BF16: ((uint16_t *)p)[i] = 0x3F80u; break;
      case TY_DTYPE_F16: ((uint16_t *)p)[i] = 0x3C00u; break;
      default: break;
    }
  }
  return p;
}

ty_abi_status_t ty_host_executor_create(const ty_abi_graph_t *graph, const char *plugin,
                                        ty_host_kernel_finder_t finder, void *finder_user,
                                        ty_host_executor_t **out) {
  return ty_host_executor_create_opts(graph, plugin, finder, finder_user, NULL, out);
}

ty_abi_status_t ty_host_executor_create_opts(const ty_abi_graph_t *graph, const char *plugin,
                                             ty_host_kernel_finder_t finder, void *finder_user,
                                             const ty_host_executor_options_t *options,
                                             ty_host_executor_t **out) {
  *out = NULL;
  ty_host_executor_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_host_oom(NULL, "compiling a graph");
  snprintf(e->plugin, sizeof(e->plugin), "%s", plugin ? plugin : "host");
  e->guards = options && options->guards;
  e->guard_seed = options ? options->guard_seed : 0;
  e->deterministic = options && options->deterministic;
  ty_abi_status_t planned = ty_dev_exec_init(&e->core, graph, TY_HOST_ARENA_ALIGNMENT, e->plugin);
  if (planned) {
    ty_host_executor_destroy(e);
    return planned;
  }
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  if (e->guards && !ty_host_guards_layout(e)) goto oom;
  if (e->core.plan.arena_bytes && !e->guards) {
    /* Counted as device memory (host_meter.h). */
    e->arena = ty_host_mem_alloc_aligned(e->core.plan.arena_bytes, TY_HOST_ARENA_ALIGNMENT);
    if (!e->arena) {
      unsigned long long bytes = (unsigned long long)e->core.plan.arena_bytes;
      ty_abi_status_t s = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                                          "%s: cannot allocate a %llu-byte activation arena",
                                          e->plugin, bytes);
      ty_host_executor_destroy(e);
      return s;
    }
  }
  e->kernels = calloc(g->node_count ? g->node_count : 1, sizeof(*e->kernels));
  e->data = calloc(g->value_count ? g->value_count : 1, sizeof(*e->data));
  if (!e->kernels || !e->data) goto oom;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    ty_abi_status_t refused = NULL;
    e->kernels[n] = finder ? finder(finder_user, g, n, &refused) : NULL;
    if (refused) {
      ty_host_executor_destroy(e);
      return refused;
    }
    if (!e->kernels[n]) e->reference_nodes++;
  }
  e->profile = ty_host_profile_create(g->node_count);
  *out = e;
  return NULL;
oom:
  ty_host_executor_destroy(e);
  return ty_host_oom(NULL, "compiling a graph");
}

static void ty_host_hook_buffer(void *user, ty_abi_buffer_t *buffer, uint64_t *out_base,
                                uint64_t *out_size) {
  const ty_host_buffer_view_t view = *(const ty_host_buffer_view_t *)user;
  unsigned char *data = NULL;
  view(buffer, &data, out_size);
  *out_base = (uint64_t)(uintptr_t)data;
}

typedef struct ty_host_resolve_t {
  ty_host_buffer_view_t view; /* first: ty_host_hook_buffer reads it */
  ty_host_executor_t *e;
} ty_host_resolve_t;

static ty_dev_loc_t ty_host_loc(const void *p) {
  ty_dev_loc_t loc = {(uint64_t)(uintptr_t)p, 0};
  return loc;
}

/* Constants stay in the graph copy; activations in the arena, or in their
 * guarded slots. */
static ty_dev_loc_t ty_host_hook_place(void *user, uint32_t v) {
  const ty_host_executor_t *e = ((const ty_host_resolve_t *)user)->e;
  const ty_value_storage_t *st = &e->core.plan.storage[v];
  if (st->kind == TY_STORAGE_CONSTANT) {
    return ty_host_loc(ty_host_executor_graph(e)->values[v].const_data);
  }
  return ty_host_loc(e->guards ? e->debug + e->slot_offset[v] : e->arena + st->offset);
}

static ty_abi_status_t ty_host_hook_seed(void *user, uint32_t v, ty_dev_loc_t *out) {
  ty_host_executor_t *e = ((ty_host_resolve_t *)user)->e;
  const ty_abi_value_t *val = &ty_host_executor_graph(e)->values[v];
  if (!e->ones && !(e->ones = ty_host_ones(val->dtype, e->core.graph->value_bytes[v]))) {
    return ty_host_oom(e, "for a loss-gradient seed of ones");
  }
  *out = ty_host_loc(e->ones);
  e->seed_defaulted = true;
  return NULL;
}

static ty_abi_status_t ty_host_hook_unbound(void *user, uint32_t v, ty_dev_loc_t *out) {
  ty_host_executor_t *e = ((ty_host_resolve_t *)user)->e;
  if (e->guards) {
    *out = ty_host_loc(e->debug + e->slot_offset[v]);
    return NULL;
  }
  if (!e->fallback && e->core.fallback_bytes) {
    e->fallback = ty_host_mem_alloc(e->core.fallback_bytes);
    if (!e->fallback) return ty_host_oom(e, "for unbound outputs");
  }
  *out = ty_host_loc(e->fallback + e->core.fallback_offset[v]);
  return NULL;
}

/* Points data[] at every value's storage for this run. */
static ty_abi_status_t ty_host_resolve(ty_host_executor_t *e, const ty_abi_execute_args_t *args,
                                       ty_host_buffer_view_t view) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  e->seed_defaulted = false;
  ty_host_resolve_t user = {view, e};
  const ty_dev_hooks_t hooks = {.user = &user,
                                .buffer = ty_host_hook_buffer,
                                .unbound_output = ty_host_hook_unbound,
                                .unbound_seed = ty_host_hook_seed,
                                .place = ty_host_hook_place};
  ty_abi_status_t s = ty_dev_exec_resolve(&e->core, args, &hooks);
  if (s) return s;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_dev_loc_t loc = e->core.loc[v];
    e->data[v] = loc.base ? (unsigned char *)(uintptr_t)loc.base + loc.offset : NULL;
  }
  return NULL;
}

/* An all_gather or reduce_scatter of several parts: no kernel computes it
 * alone (ty_host_gather_node does). */
static bool ty_host_gather_of_parts(const ty_abi_node_t *node) {
  return (!strcmp(node->op, "all_gather") || !strcmp(node->op, "reduce_scatter")) &&
         ty_desc_node_attr_int(node, "parts", 1) != 1;
}

/* ABI 1.11: all_gather / reduce_scatter of `parts` > 1 over the op's group
 * (ops/op_gather.c), through the host's service: x and y as [outer, block]
 * and [outer, parts, block] around the op's axis (reduce_scatter: the
 * other way round). One part is the kernel's identity. */
static ty_abi_status_t ty_host_gather_node(const ty_host_executor_t *e, uint32_t n,
                                           const ty_abi_execute_args_t *args) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  const ty_abi_node_t *node = &g->nodes[n];
  const bool gather = strcmp(node->op, "all_gather") == 0;
  if (ty_desc_node_attr_int(node, "parts", 1) == 1) return NULL;
  const char *group = ty_desc_node_attr_string(node, "group", "cp");
  const ty_host_api_t *host = ty_plugin_host_api();
  const bool several = TY_ABI_HAS_FIELD(args, ty_abi_execute_args_t, world_size) &&
                       args->host_comm && args->world_size > 1;
  if (!several || !host || !TY_ABI_HAS_FIELD(host, ty_host_api_t, collective) ||
      !host->collective || host->abi_minor < 11) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "%s: node %u (%s of %lld parts over group %s) needs a run of several "
                           "ranks and a host with the gathers of ABI 1.11%s",
                           e->plugin, n, node->op,
                           (long long)ty_desc_node_attr_int(node, "parts", 1), group,
                           several ? "" : "; this run is one process");
  }
  const uint32_t big = gather ? node->outputs[0] : node->inputs[0];
  const uint32_t small = gather ? node->inputs[0] : node->outputs[0];
  const ty_abi_value_t *x = &g->values[small];
  const int64_t axis = ty_desc_node_attr_int(node, "axis", 0);
  uint64_t outer = 1;
  for (int64_t i = 0; i < axis && i < (int64_t)x->rank; ++i) outer *= (uint64_t)x->dims[i];
  const size_t esize = ty_desc_dtype_size(g->values[big].dtype);
  ty_abi_host_collective_args_t c = {
      .struct_size = sizeof(c),
      .op = TY_ABI_REDUCE_SUM,
      .dtype = g->values[big].dtype,
      .data = e->data[big],
      .count = esize ? e->core.graph->value_bytes[big] / esize : 0,
      .group = group,
      .kind = gather ? TY_ABI_HOST_ALL_GATHER : TY_ABI_HOST_REDUCE_SCATTER,
      .outer = outer,
      .part = e->data[small],
  };
  return host->collective(args->host_comm, &c);
}

/* ABI 1.5: a collective op (all_reduce; tp_reduce, 1.6) has put this
 * rank's part in its output (the kernel's world-1 identity); in a run of
 * several ranks the host's service now reduces it across the op's process
 * group, in place, inside the step. tp_copy's forward is the identity on
 * every rank: nothing to reduce. */
static ty_abi_status_t ty_host_collective_node(const ty_host_executor_t *e, uint32_t n,
                                               const ty_abi_execute_args_t *args) {
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  const ty_abi_node_t *node = &g->nodes[n];
  const bool tp_reduce = strcmp(node->op, "tp_reduce") == 0;
  if (!strcmp(node->op, "all_gather") || !strcmp(node->op, "reduce_scatter")) {
    return ty_host_gather_node(e, n, args);
  }
  if (!tp_reduce && strcmp(node->op, "all_reduce") != 0) return NULL;
  if (!TY_ABI_HAS_FIELD(args, ty_abi_execute_args_t, world_size) || !args->host_comm ||
      args->world_size <= 1) {
    return NULL; /* one process: the identity is the result */
  }
  const ty_host_api_t *host = ty_plugin_host_api();
  if (!host || !TY_ABI_HAS_FIELD(host, ty_host_api_t, collective) || !host->collective) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "%s: node %u (%s) runs over %u ranks but the host offers no "
                           "collective service (ABI 1.5)",
                           e->plugin, n, node->op, args->world_size);
  }
  const char *reduce = ty_desc_node_attr_string(node, "reduce", "sum");
  const char *group = ty_desc_node_attr_string(node, "group", tp_reduce ? "tp" : "world");
  if (host->abi_minor < 6 && (strcmp(group, "world") != 0 || !strcmp(reduce, "max"))) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "%s: node %u (%s over group %s) needs the process groups of ABI "
                           "1.6; the host speaks 1.%u",
                           e->plugin, n, node->op, group, host->abi_minor);
  }
  const uint32_t y = node->outputs[0];
  const size_t esize = ty_desc_dtype_size(g->values[y].dtype);
  ty_abi_host_collective_args_t c = {
      .struct_size = sizeof(c),
      .op = !strcmp(reduce, "avg")   ? TY_ABI_REDUCE_AVG
            : !strcmp(reduce, "max") ? TY_ABI_REDUCE_MAX
                                     : TY_ABI_REDUCE_SUM,
      .dtype = g->values[y].dtype,
      .data = e->data[y],
      .count = esize ? e->core.graph->value_bytes[y] / esize : 0,
      .group = group,
  };
  return host->collective(args->host_comm, &c);
}

ty_abi_status_t ty_host_executor_run(ty_host_executor_t *e, const ty_abi_execute_args_t *args,
                                     ty_host_buffer_view_t view, uint32_t threads) {
  ty_abi_status_t s = ty_host_resolve(e, args, view);
  if (s) return s;
  const ty_abi_graph_t *g = ty_host_executor_graph(e);
  ty_host_node_ctx_t ctx = {
      .graph = g, .data = e->data, .threads = threads, .deterministic = e->deterministic};
  const bool profile = e->profile != NULL;
  if (e->guards) ty_host_guards_fill(e);
  for (uint32_t n = 0; n < g->node_count; ++n) {
    if (e->core.plan.skip[n]) continue; /* a view: its output already reads its input */
    const double t0 = profile ? ty_host_profile_now() : 0.0;
    if (ty_host_gather_of_parts(&g->nodes[n])) {
      s = NULL; /* the collective step below writes the whole output */
    } else if (e->kernels[n]) {
      ctx.node = &g->nodes[n];
      ctx.node_index = n;
      s = e->kernels[n](&ctx);
    } else {
      s = (ty_abi_status_t)(void *)ty_ref_execute_node(g, n, e->data);
    }
    /* The reference kernels name the node themselves; a plugin's do not. */
    if (s && e->kernels[n]) s = ty_host_node_error(e, n, s);
    if (!s && e->guards) s = ty_host_guards_check(e, n);
    if (!s) s = ty_host_collective_node(e, n, args);
    if (profile) ty_host_profile_add(e->profile, n, ty_host_profile_now() - t0);
    if (s) return s;
  }
  const double t_copies = profile ? ty_host_profile_now() : 0.0;
  for (uint32_t u = 0; u < e->core.plan.copy_count; ++u) {
    const ty_abi_state_update_t *up = &e->core.plan.copies[u];
    if (e->data[up->state] != e->data[up->value]) {
      memmove(e->data[up->state], e->data[up->value], e->core.graph->value_bytes[up->state]);
    }
  }
  if (profile) {
    ty_host_profile_add(e->profile, UINT32_MAX, ty_host_profile_now() - t_copies);
    ty_host_profile_end_run(e->profile);
  }
  return NULL;
}
