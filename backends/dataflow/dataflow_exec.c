/* The dataflow plugin's graph entries: compile (contract, schedule,
 * placement, cost), the one-call execute with named slots checked against
 * the slot table, binding checks with the device's own errors, artifacts,
 * and the placement report. Kernels are the cpu plugin's (ty_cpu_kernels),
 * run by the host executor on memory this plugin owns. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainyard/abi_graph.h"
#include "trainyard/plugin_status.h"
#include "trainyard/host_kernels.h"
#include "dataflow_internal.h"
#include "trainyard/status.h"

static double df_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ty_abi_status_t df_oom(void) {
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
}

ty_abi_status_t df_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *graph,
                                  ty_abi_node_support_t *out_support) {
  return ty_host_supports(graph, device->backend->info.dtype_mask, out_support);
}

static ty_host_kernel_fn_t df_find_kernel(void *user, const ty_abi_graph_t *g, uint32_t n,
                                          ty_abi_status_t *out_error) {
  (void)user;
  (void)out_error;
  return cpu_kernel_find(g, &g->nodes[n]); /* NULL: the reference kernel */
}

void df_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  if (e->device_bytes) df_device_release(e->device, e->device_bytes);
  ty_host_executor_destroy(e->executor);
  df_plan_free(&e->plan);
  free(e->artifact);
  free(e);
}

/* Creates the executor for the scheduled graph and charges its arena. */
static ty_abi_status_t df_executable_start(ty_abi_executable_t *e, const ty_abi_graph_t *scheduled,
                                           const ty_host_executor_options_t *options) {
  ty_abi_status_t s = ty_host_executor_create_opts(scheduled, DF_NAME, df_find_kernel, NULL,
                                                   options, &e->executor);
  if (s) return s;
  uint64_t arena = ty_host_executor_arena_bytes(e->executor);
  s = df_device_charge(e->device, arena, "the executable's activations");
  if (!s) e->device_bytes = arena;
  return s;
}

ty_abi_status_t df_graph_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                 ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  ty_host_executor_options_t options;
  const ty_abi_option_t *other = NULL;
  ty_abi_status_t bad = ty_host_executor_read_options(args, DF_NAME, &options, &other);
  if (bad) return bad;
  if (other) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: unknown compile option '%s' (the dataflow backend takes "
                           "none; the target comes from the device URI, e.g. "
                           "dataflow?tiles=2&mem_per_tile=32M)",
                           other->key);
  }
  const ty_abi_graph_t *g = args->graph;
  /* Memory levers its static schedule would undo: sections run every
   * forward node (a recomputed copy reads only checkpoints and weights, so
   * it lands in FWD) before any backward one, and every optimizer update in
   * OPT after the whole backward. Loss chunking, Adafactor and bf16 are ops
   * and dtypes: accepted. */
  static const struct {
    const char *key, *off, *why;
  } df_levers[] = {
      {"recompute", "none",
       "the static schedule runs every forward node, recomputed copies included, in the FWD "
       "section before the backward, so nothing would be freed"},
      {"fused_optimizer", "0",
       "the static schedule runs every optimizer update in the OPT section after the whole "
       "backward, so every gradient would exist at once anyway"},
      {"offload", "none",
       "its state lives in the emulated device DRAM, which has no host memory to offload to"},
  };
  for (size_t i = 0; i < sizeof(df_levers) / sizeof(df_levers[0]); ++i) {
    char word[96];
    if (!ty_desc_graph_lever(g, df_levers[i].key, df_levers[i].off, word, sizeof(word))) {
      continue;
    }
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: memory lever %s is refused: %s; run without it", word,
                           df_levers[i].why);
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (g->values[v].flags & TY_VALUE_FLAG_HOST_RESIDENT) {
      return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                             "dataflow: state '%s' is flagged to live in host memory: the "
                             "emulated device keeps all state in its DRAM; run without "
                             "--offload",
                             g->values[v].name);
    }
  }
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  uint32_t *order = malloc((g->node_count ? g->node_count : 1) * sizeof(uint32_t));
  ty_abi_node_t *nodes = malloc((g->node_count ? g->node_count : 1) * sizeof(ty_abi_node_t));
  ty_abi_status_t s = (!e || !order || !nodes) ? df_oom() : NULL;
  if (!s) {
    e->device = device;
    e->plan.target = device->target;
    s = df_classify(g, &e->plan, order);
    e->plan.deterministic = options.deterministic;
  }
  if (!s) {
    ty_abi_graph_t scheduled = *g;
    for (uint32_t i = 0; i < g->node_count; ++i) nodes[i] = g->nodes[order[i]];
    scheduled.nodes = nodes;
    s = df_executable_start(e, &scheduled, &options);
  }
  if (!s) s = df_place(ty_host_executor_graph(e->executor), &e->plan);
  free(order);
  free(nodes);
  if (s) {
    df_executable_destroy(e);
    return s;
  }
  *out_executable = e;
  return NULL;
}

/* ---- slots ---- */

static const df_slot_t *df_slot(const ty_abi_executable_t *e, const char *name) {
  for (uint32_t i = 0; i < e->plan.slot_count; ++i) {
    if (strcmp(e->plan.slots[i].name, name) == 0) return &e->plan.slots[i];
  }
  return NULL;
}

/* "lr, beta1, ..." of the slots with `role` (at most `capacity` bytes). */
static void df_slot_names(const ty_abi_executable_t *e, df_role_t role, char *out,
                          size_t capacity) {
  size_t used = 0;
  uint32_t listed = 0, total = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < e->plan.slot_count; ++i) {
    if (e->plan.slots[i].role != role) continue;
    ++total;
    if (used + strlen(e->plan.slots[i].name) + 8 >= capacity) continue;
    used += (size_t)snprintf(out + used, capacity - used, "%s%s", listed ? ", " : "",
                             e->plan.slots[i].name);
    ++listed;
  }
  if (listed < total && used + 16 < capacity) {
    snprintf(out + used, capacity - used, ", ... (%u)", total);
  }
  if (!total) snprintf(out, capacity, "none");
}

static bool df_is_training_hyperparameter(const char *name) {
  static const char *const names[] = {"lr",       "beta1",    "beta2", "eps", "weight_decay",
                                      "max_norm", "momentum", "step",  NULL};
  for (int i = 0; names[i]; ++i) {
    if (strcmp(names[i], name) == 0) return true;
  }
  return false;
}

/* The error for a name the artifact has no slot for. */
static ty_abi_status_t df_unknown_slot(const ty_abi_executable_t *e, const char *name) {
  const df_plan_t *plan = &e->plan;
  char declared[256];
  df_slot_names(e, DF_ROLE_HYPERPARAMETER, declared, sizeof(declared));
  if (df_is_training_hyperparameter(name) && plan->kind == DF_KIND_INFERENCE) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: artifact %.12s is an inference graph, so it cannot "
                           "train ('%s' is a training hyperparameter); compile a train step "
                           "('trainyard compile' without --inference)",
                           plan->graph_hash, name);
  }
  if (df_is_training_hyperparameter(name)) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: '%s' is not a hyperparameter of artifact %.12s (it "
                           "declares: %s); another optimizer or hyperparameter set needs a "
                           "recompile",
                           name, plan->graph_hash, declared);
  }
  if (strcmp(name, "dropout") == 0 || strcmp(name, "p") == 0 || strcmp(name, "dropout_p") == 0) {
    if (plan->dropout_count) {
      return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                             "dataflow: the dropout probability of artifact %.12s is fixed at "
                             "compile time (p = %g); changing it needs a recompile",
                             plan->graph_hash, plan->dropout_p[0]);
    }
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: artifact %.12s was compiled without dropout; dropout "
                           "needs a recompile",
                           plan->graph_hash);
  }
  char inputs[256];
  df_slot_names(e, DF_ROLE_INPUT, inputs, sizeof(inputs));
  return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                         "dataflow: artifact %.12s has no slot named '%s' (inputs: %s; "
                         "hyperparameters: %s)",
                         plan->graph_hash, name, inputs, declared);
}

ty_abi_status_t df_executable_check_binding(ty_abi_executable_t *e,
                                            const ty_abi_binding_check_t *c) {
  const df_slot_t *slot = df_slot(e, c->name);
  if (!slot) return df_unknown_slot(e, c->name);
  if (slot->role == DF_ROLE_OUTPUT) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: slot '%s' is an output of artifact %.12s: outputs are "
                           "read after a run, not bound",
                           c->name, e->plan.graph_hash);
  }
  char want[128], got[128];
  df_format_shape(slot->dtype, slot->rank, slot->dims, want, sizeof(want));
  uint32_t rank = c->rank > 8 ? 8 : c->rank;
  df_format_shape(c->dtype, rank, c->dims, got, sizeof(got));
  if (c->dtype != slot->dtype) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: slot '%s' (%s) is %s in artifact %.12s, got %s: dtypes "
                           "are fixed at compile time (another dtype needs a recompile)",
                           c->name, df_role_name(slot->role), want, e->plan.graph_hash, got);
  }
  bool same = c->rank == slot->rank &&
              (c->rank == 0 || memcmp(c->dims, slot->dims, c->rank * sizeof(int64_t)) == 0);
  if (!same) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: no dynamic shapes: slot '%s' (%s) is %s in artifact "
                           "%.12s, got %s; pad to the compiled shape ('trainyard train' pads a "
                           "short last batch and zeroes its loss-gradient seed) or recompile "
                           "for the new shape",
                           c->name, df_role_name(slot->role), want, e->plan.graph_hash, got);
  }
  return NULL;
}

/* ---- execute ---- */

static void df_buffer_view(ty_abi_buffer_t *buffer, unsigned char **out_data,
                           uint64_t *out_size) {
  *out_data = buffer->data;
  *out_size = buffer->size;
}

ty_abi_status_t df_executable_execute(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  const df_plan_t *plan = &e->plan;
  uint8_t *seen = calloc(plan->slot_count ? plan->slot_count : 1, 1);
  if (!seen) return df_oom();
  ty_abi_status_t s = NULL;
  for (uint32_t b = 0; b < args->binding_count && !s; ++b) {
    const ty_abi_binding_t *bind = &args->bindings[b];
    const df_slot_t *slot = df_slot(e, bind->name);
    if (!slot) {
      s = df_unknown_slot(e, bind->name);
      break;
    }
    uint32_t k = (uint32_t)(slot - plan->slots);
    if (seen[k]) {
      s = ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "dataflow: slot '%s' is bound twice",
                          bind->name);
      break;
    }
    seen[k] = 1;
    uint64_t size = bind->buffer ? bind->buffer->size : 0;
    if (!bind->buffer || bind->offset > size || slot->bytes > size - bind->offset) {
      char shape[128];
      df_format_shape(slot->dtype, slot->rank, slot->dims, shape, sizeof(shape));
      s = ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                          "dataflow: slot '%s' is %s (%llu bytes) but its binding holds %llu "
                          "bytes from offset %llu",
                          bind->name, shape, (unsigned long long)slot->bytes,
                          (unsigned long long)size, (unsigned long long)bind->offset);
    }
  }
  for (uint32_t k = 0; k < plan->slot_count && !s; ++k) {
    df_role_t role = plan->slots[k].role;
    if (seen[k] || role == DF_ROLE_OUTPUT || role == DF_ROLE_LOSS_SEED) continue;
    s = ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                        "dataflow: %s '%s' of artifact %.12s is not bound: every input, "
                        "hyperparameter and state is bound at each execute (only the "
                        "loss-gradient seed may be left out: ones)",
                        df_role_name(role), plan->slots[k].name, plan->graph_hash);
  }
  free(seen);
  if (s) return s;
  double start = df_now();
  s = ty_host_executor_run(e->executor, args, df_buffer_view, e->device->threads);
  if (s) return s;
  e->run_seconds += df_now() - start;
  e->runs++;
  if (ty_host_executor_seed_defaulted(e->executor)) e->seed_default_runs++;
  return NULL;
}

/* ---- artifacts ---- */

ty_abi_status_t df_executable_serialize(ty_abi_executable_t *e, void *dst, uint64_t capacity,
                                        uint64_t *out_size) {
  if (!e->artifact) {
    ty_abi_status_t s = df_artifact_write(e, &e->artifact, &e->artifact_size);
    if (s) return s;
  }
  *out_size = e->artifact_size;
  if (dst && capacity >= e->artifact_size) memcpy(dst, e->artifact, e->artifact_size);
  return NULL;
}

/* Why `expected` is not the graph the artifact was compiled from. */
static ty_abi_status_t df_explain_mismatch(const ty_abi_executable_t *e,
                                           const ty_abi_graph_t *expected) {
  const df_plan_t *have = &e->plan;
  df_plan_t want;
  memset(&want, 0, sizeof(want));
  uint32_t *order = malloc((expected->node_count ? expected->node_count : 1) * sizeof(uint32_t));
  if (!order) return df_oom();
  ty_abi_status_t cs = df_classify(expected, &want, order);
  free(order);
  char detail[640] = "";
  size_t used = 0;
  if (!cs && have->kind == DF_KIND_INFERENCE && want.kind == DF_KIND_TRAIN) {
    df_plan_free(&want);
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: an inference artifact asked to train: artifact %.12s is "
                           "an inference graph (compiled with --inference) and this run needs "
                           "a train step; compile one without --inference",
                           have->graph_hash);
  }
  if (!cs && have->world_size != want.world_size) {
    const uint32_t h = have->world_size, w = want.world_size;
    df_plan_free(&want);
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: artifact %.12s was compiled for %u rank%s%s and this run "
                           "has %u rank%s: its all_reduce ops sum over the ranks it was "
                           "compiled for; compile it again for %u (trainyard compile%s)",
                           have->graph_hash, h, h == 1 ? "" : "s",
                           h > 1 ? " (--data-parallel)" : " (no --data-parallel)", w,
                           w == 1 ? "" : "s", w, w > 1 ? " --data-parallel N" : "");
  }
  if (!cs && have->kind == DF_KIND_TRAIN && want.kind == DF_KIND_INFERENCE) {
    used += (size_t)snprintf(detail, sizeof(detail),
                             "; the artifact is a train step and this run an inference graph");
  }
  uint32_t shown = 0;
  bool same_dropout = !cs && want.dropout_count == have->dropout_count;
  for (uint32_t i = 0; same_dropout && i < want.dropout_count; ++i) {
    same_dropout = want.dropout_p[i] == have->dropout_p[i];
  }
  if (!cs && !same_dropout) {
    used += (size_t)snprintf(detail + used, sizeof(detail) - used,
                             "; dropout p (fixed at compile time) is %g in the artifact and %g "
                             "in this run",
                             have->dropout_count ? have->dropout_p[0] : 0.0,
                             want.dropout_count ? want.dropout_p[0] : 0.0);
    ++shown;
  }
  for (uint32_t i = 0; !cs && i < want.slot_count && shown < 3; ++i) {
    const df_slot_t *w = &want.slots[i], *h = df_slot(e, w->name);
    char a[96], b[96];
    df_format_shape(w->dtype, w->rank, w->dims, b, sizeof(b));
    if (!h) {
      used += (size_t)snprintf(detail + used, sizeof(detail) - used,
                               "; this run has %s '%s' %s, which the artifact lacks",
                               df_role_name(w->role), w->name, b);
      ++shown;
    } else if (h->dtype != w->dtype || h->rank != w->rank ||
               memcmp(h->dims, w->dims, w->rank * sizeof(int64_t)) != 0) {
      df_format_shape(h->dtype, h->rank, h->dims, a, sizeof(a));
      used += (size_t)snprintf(detail + used, sizeof(detail) - used,
                               "; '%s' is %s in the artifact and %s in this run", w->name, a, b);
      ++shown;
    }
    if (used >= sizeof(detail)) used = sizeof(detail) - 1;
  }
  for (uint32_t i = 0; !cs && i < have->slot_count && shown < 3; ++i) {
    bool found = false;
    for (uint32_t j = 0; j < want.slot_count && !found; ++j) {
      found = strcmp(want.slots[j].name, have->slots[i].name) == 0;
    }
    if (!found) {
      used += (size_t)snprintf(detail + used, sizeof(detail) - used,
                               "; the artifact has %s '%s', which this run lacks",
                               df_role_name(have->slots[i].role), have->slots[i].name);
      ++shown;
    }
    if (used >= sizeof(detail)) used = sizeof(detail) - 1;
  }
  if (cs) {
    snprintf(detail, sizeof(detail), "; this run's graph is not one the device runs either");
    ty_status_free((ty_status_t)(void *)cs);
  }
  if (!detail[0]) {
    snprintf(detail, sizeof(detail),
             "; the slots agree, so the computation itself changed (model configuration, "
             "dropout probability, optimizer settings such as weight decay per parameter)");
  }
  df_plan_free(&want);
  return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                         "dataflow: artifact %.12s was compiled from another graph than this "
                         "run's %.12s%s: that needs a recompile ('trainyard compile' with this "
                         "run's options)",
                         have->graph_hash, expected->hash_hex ? expected->hash_hex : "?", detail);
}

ty_abi_status_t df_executable_deserialize(ty_abi_device_t *device,
                                          const ty_abi_deserialize_args_t *args,
                                          ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return df_oom();
  e->device = device;
  e->from_artifact = true;
  ty_abi_graph_t graph;
  void *block = NULL;
  ty_abi_status_t s =
      df_artifact_read(args->bytes, args->size, &device->target, &e->plan, &graph, &block);
  const ty_abi_graph_t *expected =
      args->struct_size >= offsetof(ty_abi_deserialize_args_t, expected) + sizeof(void *)
          ? args->expected
          : NULL;
  if (!s && expected &&
      (!expected->hash_hex || strncmp(expected->hash_hex, e->plan.graph_hash, 64) != 0)) {
    s = df_explain_mismatch(e, expected);
  }
  /* What compile read from its options and the artifact kept. */
  const ty_host_executor_options_t options = {.deterministic = e->plan.deterministic};
  if (!s) s = df_executable_start(e, &graph, &options);
  free(block); /* the executor keeps its own copy */
  if (!s && !(e->artifact = malloc(args->size ? (size_t)args->size : 1))) s = df_oom();
  if (s) {
    df_executable_destroy(e);
    return s;
  }
  memcpy(e->artifact, args->bytes, (size_t)args->size);
  e->artifact_size = args->size;
  *out_executable = e;
  return NULL;
}

const ty_abi_graph_t *df_executable_graph(ty_abi_executable_t *e) {
  return ty_host_executor_graph(e->executor);
}

/* ---- the report ---- */

typedef struct {
  char *data;
  size_t len, cap;
  bool failed;
} df_text_t;

static void df_printf(df_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void df_printf(df_text_t *t, const char *fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, args);
    va_end(args);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->data && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap * 2 : 4096;
    while (cap < t->len + (size_t)n + 1) cap *= 2;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->data = grown;
    t->cap = cap;
  }
}

static void df_report_text(const ty_abi_executable_t *e, df_text_t *t) {
  const df_plan_t *p = &e->plan;
  char target[160], b1[32], b2[32], b3[32];
  df_format_target(&p->target, target, sizeof(target));
  df_printf(t, "dataflow placement report -- EMULATED device: a simulated chip run on the host.\n");
  df_printf(t, "Cycles, on-chip memory and DRAM traffic below come from the cost model in\n"
               "docs/dataflow.md, not from hardware; host wall times are reported apart.\n\n");
  df_printf(t, "graph:       %.64s (%s)\n", p->graph_hash,
            p->kind == DF_KIND_TRAIN ? "train step" : "inference graph");
  df_printf(t, "target:      %s\n", target);
  df_printf(t, "cost model:  %u f32 MACs per tile per cycle; a section costs its busiest "
               "tile's FLOPs / (2 x MACs) cycles + its DRAM bytes / (bandwidth / clock) cycles\n",
            DF_MACS_PER_TILE);
  df_printf(t, "source:      %s\n\n", e->from_artifact ? "loaded from an artifact" : "compiled");
  df_printf(t, "sections (static schedule, in order):\n");
  df_printf(t, "  %-9s %6s %14s %12s %14s %12s\n", "section", "nodes", "GFLOP", "DRAM", "compute cyc",
            "DRAM cyc");
  for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
    const df_section_stats_t *sec = &p->sections[s];
    ty_format_bytes(sec->dram_bytes, b1, sizeof(b1));
    df_printf(t, "  %-9s %6u %14.6f %12s %14llu %12llu\n", df_section_name((df_section_t)s),
              sec->nodes, sec->flops * 1e-9, b1, (unsigned long long)sec->compute_cycles,
              (unsigned long long)sec->dram_cycles);
  }
  uint32_t used_tiles = 0;
  for (uint32_t k = 0; k < p->target.tiles; ++k) used_tiles += p->tiles[k].nodes > 0;
  ty_format_bytes(p->target.mem_per_tile, b3, sizeof(b3));
  df_printf(t, "\ntiles used: %u of %u\n", used_tiles, p->target.tiles);
  uint64_t spill = 0;
  for (uint32_t k = 0; k < p->target.tiles; ++k) {
    const df_tile_stats_t *tile = &p->tiles[k];
    ty_format_bytes(tile->state_bytes + tile->peak_activation_bytes, b1, sizeof(b1));
    ty_format_bytes(tile->spill_bytes, b2, sizeof(b2));
    char states[32], acts[32];
    ty_format_bytes(tile->state_bytes, states, sizeof(states));
    ty_format_bytes(tile->peak_activation_bytes, acts, sizeof(acts));
    df_printf(t, "  tile %u: %5u nodes, %10.6f GFLOP, on-chip %s of %s (state %s, activations "
                 "peak %s)%s%s\n",
              k, tile->nodes, tile->flops * 1e-9, b1, b3, states, acts,
              tile->spill_bytes ? ", spills " : "", tile->spill_bytes ? b2 : "");
    spill += tile->spill_bytes;
  }
  if (spill) {
    ty_format_bytes(spill, b1, sizeof(b1));
    df_printf(t, "  the working set does not fit on chip: %s spills to device DRAM (charged as "
                 "DRAM traffic above)\n",
              b1);
  }
  double seconds = (double)p->cycles_per_step / ((double)p->target.clock_mhz * 1e6);
  df_printf(t, "\nestimated cycles per step: %llu (simulated %.6f ms per step at %u MHz",
            (unsigned long long)p->cycles_per_step, seconds * 1e3, p->target.clock_mhz);
  if (p->tokens_per_step && seconds > 0) {
    df_printf(t, "; %.0f simulated tokens/s", (double)p->tokens_per_step / seconds);
  }
  df_printf(t, ")\n");
  char names[512];
  df_slot_names(e, DF_ROLE_HYPERPARAMETER, names, sizeof(names));
  df_printf(t, "runtime hyperparameters (inputs, never recompiled): %s\n", names);
  if (p->dropout_count) {
    df_printf(t, "fixed at compile time: dropout p =");
    for (uint32_t i = 0; i < p->dropout_count; ++i) df_printf(t, " %g", p->dropout_p[i]);
    df_printf(t, " (an attribute of the graph; another p needs a recompile)\n");
  } else {
    df_printf(t, "fixed at compile time: no dropout\n");
  }
  if (p->world_size > 1) {
    df_printf(t, "data parallel: %u ranks (--data-parallel); gradients all-reduced inside the "
                 "step through the host's collectives\n",
              p->world_size);
  } else {
    df_printf(t, "data parallel: no (one process)\n");
  }

  const df_slot_t *seed = NULL;
  for (uint32_t i = 0; i < p->slot_count; ++i) {
    if (p->slots[i].role == DF_ROLE_LOSS_SEED) seed = &p->slots[i];
  }
  df_printf(t, "loss-gradient seed: %s\n",
            seed ? seed->name : "none (an inference graph, or a loss without one)");
  int width = 24;
  for (uint32_t i = 0; i < p->slot_count; ++i) {
    int n = (int)strlen(p->slots[i].name);
    if (n > width) width = n < 72 ? n : 72;
  }
  df_printf(t, "\nslots:\n  %-*s %-19s %-22s %12s\n", width, "name", "role", "dtype[shape]",
            "bytes");
  uint64_t totals[DF_ROLE_COUNT] = {0};
  for (uint32_t i = 0; i < p->slot_count; ++i) {
    const df_slot_t *slot = &p->slots[i];
    char shape[128];
    df_format_shape(slot->dtype, slot->rank, slot->dims, shape, sizeof(shape));
    df_printf(t, "  %-*s %-19s %-22s %12llu\n", width, slot->name, df_role_name(slot->role),
              shape, (unsigned long long)slot->bytes);
    totals[slot->role] += slot->bytes;
  }
  ty_format_bytes(totals[DF_ROLE_PARAMETER], b1, sizeof(b1));
  ty_format_bytes(totals[DF_ROLE_OPTIMIZER_STATE], b2, sizeof(b2));
  df_printf(t, "  parameters %s, optimizer state %s (resident on the device between calls)\n",
            b1, b2);
  ty_format_bytes(e->device->peak_allocated, b1, sizeof(b1));
  ty_format_bytes(e->device_bytes, b2, sizeof(b2));
  df_printf(t, "\ndevice DRAM: this executable's activations %s; the device's peak so far %s\n",
            b2, b1);
  if (e->runs) {
    df_printf(t, "runs: %llu, host wall time %.3f s (%.3f ms per run; emulation on the host, not "
                 "a simulated figure)\n",
              (unsigned long long)e->runs, e->run_seconds, 1e3 * e->run_seconds / (double)e->runs);
    if (seed) {
      df_printf(t, "loss-gradient seed '%s' unbound in %llu of %llu runs: ones were used\n",
                seed->name, (unsigned long long)e->seed_default_runs,
                (unsigned long long)e->runs);
    }
  } else {
    df_printf(t, "runs: none yet\n");
  }
}

ty_abi_status_t df_executable_report(ty_abi_executable_t *e, char *dst, uint64_t capacity,
                                     uint64_t *out_size) {
  df_text_t t = {0};
  df_report_text(e, &t);
  if (t.failed || !t.data) {
    free(t.data);
    return df_oom();
  }
  *out_size = t.len + 1;
  if (dst && capacity >= t.len + 1) memcpy(dst, t.data, t.len + 1);
  free(t.data);
  return NULL;
}
