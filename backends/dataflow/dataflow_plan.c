/* Compiling for the emulated chip: the whole-graph contract (a train step or
 * an inference graph, never a bare op), sections (FWD, BWD, GRADNORM, OPT)
 * as a static schedule, the slot table, greedy placement of nodes on tiles
 * under each tile's on-chip memory, and the cycle model (docs/dataflow.md
 * states every rule and constant used here). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainyard/abi_graph.h"
#include "trainyard/plugin_status.h"
#include "dataflow_internal.h"

const char *df_section_name(df_section_t s) {
  static const char *const names[] = {"FWD", "BWD", "GRADNORM", "OPT"};
  return (unsigned)s < DF_SECTION_COUNT ? names[s] : "?";
}

const char *df_role_name(df_role_t r) {
  static const char *const names[] = {"input",           "output",           "parameter",
                                      "optimizer state", "loss-gradient seed", "hyperparameter",
                                      "state"};
  return (unsigned)r < DF_ROLE_COUNT ? names[r] : "?";
}

const char *df_dtype_name(ty_dtype_t dtype) {
  static const char *const names[] = {"invalid", "f32", "bf16", "f16", "f64",
                                      "i32",     "i64", "u8"};
  return (unsigned)dtype < TY_DTYPE_COUNT_ ? names[dtype] : "?";
}

void df_format_shape(ty_dtype_t dtype, uint32_t rank, const int64_t *dims, char *out,
                     size_t capacity) {
  size_t used = (size_t)snprintf(out, capacity, "%s[", df_dtype_name(dtype));
  for (uint32_t d = 0; d < rank && used < capacity; ++d) {
    used += (size_t)snprintf(out + used, capacity - used, "%s%lld", d ? "," : "",
                             (long long)dims[d]);
  }
  if (used < capacity) snprintf(out + used, capacity - used, "]");
}

void df_format_target(const df_target_t *t, char *out, size_t capacity) {
  char mem[32];
  ty_format_bytes(t->mem_per_tile, mem, sizeof(mem));
  snprintf(out, capacity, "tiles=%u mem_per_tile=%s clock_mhz=%u bandwidth_gbs=%g", t->tiles,
           mem, t->clock_mhz, t->bandwidth_gbs);
}

bool df_same_target(const df_target_t *a, const df_target_t *b) {
  return a->tiles == b->tiles && a->mem_per_tile == b->mem_per_tile &&
         a->clock_mhz == b->clock_mhz && a->bandwidth_gbs == b->bandwidth_gbs;
}

static bool df_is_optimizer(const char *op) {
  return strcmp(op, "adamw_update") == 0 || strcmp(op, "sgd_update") == 0 ||
         strcmp(op, "adafactor_update") == 0;
}

static bool df_ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The section a node's own op puts it in at least. */
static df_section_t df_section_floor(const char *op) {
  if (df_is_optimizer(op)) return DF_OPT;
  if (strcmp(op, "clip_by_global_norm") == 0) return DF_GRADNORM;
  if (df_ends_with(op, "_backward")) return DF_BWD;
  return DF_FWD;
}

void df_plan_free(df_plan_t *plan) {
  free(plan->section);
  free(plan->tile);
  for (uint32_t i = 0; i < plan->slot_count; ++i) free(plan->slots[i].name);
  free(plan->slots);
  free(plan->dropout_p);
  memset(plan, 0, sizeof(*plan));
}

/* The node whose output `value` is, or UINT32_MAX. */
static uint32_t *df_producers(const ty_abi_graph_t *g) {
  uint32_t *producer = malloc((g->value_count ? g->value_count : 1) * sizeof(uint32_t));
  if (!producer) return NULL;
  for (uint32_t v = 0; v < g->value_count; ++v) producer[v] = UINT32_MAX;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    for (uint32_t o = 0; o < g->nodes[n].output_count; ++o) producer[g->nodes[n].outputs[o]] = n;
  }
  return producer;
}

/* The update that writes state `v`, or NULL. */
static const ty_abi_state_update_t *df_update_of(const ty_abi_graph_t *g, uint32_t v) {
  for (uint32_t u = 0; u < g->update_count; ++u) {
    if (g->updates[u].state == v) return &g->updates[u];
  }
  return NULL;
}

/* Whether node n writes state v (one of its outputs is v's update). */
static bool df_node_updates(const ty_abi_graph_t *g, uint32_t n, uint32_t v) {
  const ty_abi_state_update_t *u = df_update_of(g, v);
  if (!u) return false;
  for (uint32_t o = 0; o < g->nodes[n].output_count; ++o) {
    if (g->nodes[n].outputs[o] == u->value) return true;
  }
  return false;
}

static ty_abi_status_t df_oom(void) {
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory compiling");
}

/* Slot roles, the contract's last word: see docs/dataflow.md. */
static ty_abi_status_t df_build_slots(const ty_abi_graph_t *g, const uint8_t *section_of,
                                      df_plan_t *plan) {
  uint32_t count = 0;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    if (val->role == TY_VALUE_INPUT || val->role == TY_VALUE_STATE ||
        (val->flags & TY_VALUE_FLAG_OUTPUT)) {
      ++count;
    }
  }
  plan->slots = calloc(count ? count : 1, sizeof(df_slot_t));
  if (!plan->slots) return df_oom();
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    if (val->role != TY_VALUE_INPUT && val->role != TY_VALUE_STATE &&
        !(val->flags & TY_VALUE_FLAG_OUTPUT)) {
      continue;
    }
    bool fwd_read = false, read = false, opt_only = true, opt_write = false;
    for (uint32_t n = 0; n < g->node_count; ++n) {
      const ty_abi_node_t *node = &g->nodes[n];
      for (uint32_t i = 0; i < node->input_count; ++i) {
        if (node->inputs[i] != v) continue;
        read = true;
        df_section_t sec = (df_section_t)section_of[n];
        if (sec != DF_OPT && sec != DF_GRADNORM) opt_only = false;
        if ((sec == DF_FWD || sec == DF_BWD) && !df_node_updates(g, n, v)) fwd_read = true;
        if (sec == DF_OPT && df_node_updates(g, n, v)) opt_write = true;
      }
    }
    df_role_t role;
    if (val->role == TY_VALUE_INPUT) {
      role = (val->flags & TY_VALUE_FLAG_LOSS_SEED) ? DF_ROLE_LOSS_SEED
             : val->rank == 0 && read && opt_only   ? DF_ROLE_HYPERPARAMETER
                                                    : DF_ROLE_INPUT;
    } else if (val->role == TY_VALUE_STATE) {
      role = fwd_read ? DF_ROLE_PARAMETER : opt_write || (read && opt_only) ? DF_ROLE_OPTIMIZER_STATE
                                                                        : DF_ROLE_STATE;
    } else {
      role = DF_ROLE_OUTPUT;
    }
    df_slot_t *slot = &plan->slots[plan->slot_count++];
    slot->name = strdup(val->name);
    if (!slot->name) return df_oom();
    slot->role = role;
    slot->dtype = val->dtype;
    slot->rank = val->rank > 8 ? 8 : val->rank;
    memcpy(slot->dims, val->dims, slot->rank * sizeof(int64_t));
    slot->bytes = (uint64_t)ty_desc_value_elements(val) * ty_desc_dtype_size(val->dtype);
  }
  return NULL;
}

/* Distinct dropout probabilities: fixed at compile time (an attribute). */
static ty_abi_status_t df_collect_dropout(const ty_abi_graph_t *g, df_plan_t *plan) {
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    if (strcmp(node->op, "dropout") != 0 && strcmp(node->op, "dropout_backward") != 0) continue;
    double p = ty_desc_node_attr_float(node, "p", 0.0);
    bool seen = false;
    for (uint32_t i = 0; i < plan->dropout_count; ++i) seen = seen || plan->dropout_p[i] == p;
    if (seen) continue;
    double *grown = realloc(plan->dropout_p, (plan->dropout_count + 1) * sizeof(double));
    if (!grown) return df_oom();
    plan->dropout_p = grown;
    plan->dropout_p[plan->dropout_count++] = p;
  }
  return NULL;
}

/* The world the step's all_reduce ops were compiled for (a lever, since
 * the graph itself is the same for every world size above 1). */
static ty_abi_status_t df_world_size(const ty_abi_graph_t *g, df_plan_t *plan) {
  char word[64];
  plan->world_size = 1;
  if (!ty_desc_graph_lever(g, "data_parallel", "1", word, sizeof(word))) return NULL;
  char *end = NULL;
  unsigned long n = strtoul(word + strlen("data_parallel="), &end, 10);
  if (!end || *end || n < 2 || n > 65536) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "dataflow: lever '%s' is not a number of ranks from 2 to 65536", word);
  }
  plan->world_size = (uint32_t)n;
  return NULL;
}

ty_abi_status_t df_classify(const ty_abi_graph_t *g, df_plan_t *plan, uint32_t *out_order) {
  const char *hash = g->hash_hex ? g->hash_hex : "";
  uint32_t *producer = df_producers(g);
  uint8_t *section = calloc(g->node_count ? g->node_count : 1, 1);
  if (!producer || !section) {
    free(producer);
    free(section);
    return df_oom();
  }
  /* A node's section is the latest of its op's own and its inputs'
   * producers', so sorting by section keeps a topological order. */
  bool has_opt = false;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    df_section_t s = df_section_floor(node->op);
    for (uint32_t i = 0; i < node->input_count; ++i) {
      uint32_t v = node->inputs[i];
      if (v != UINT32_MAX && producer[v] != UINT32_MAX && section[producer[v]] > s) {
        s = (df_section_t)section[producer[v]];
      }
    }
    section[n] = (uint8_t)s;
    has_opt = has_opt || df_is_optimizer(node->op);
  }
  ty_abi_status_t st = NULL;
  /* State may change only through an optimizer update or a KV-cache write
   * (kv_cache_write, or the paged pool's paged_kv_write, which an inference
   * graph runs like any op, through the cpu kernels): anything else (a
   * gradient accumulator) is state carried between calls that are not whole
   * steps. */
  for (uint32_t u = 0; u < g->update_count && !st; ++u) {
    uint32_t p = producer[g->updates[u].value];
    const char *op = p == UINT32_MAX ? "a copy" : g->nodes[p].op;
    if (p != UINT32_MAX && (df_is_optimizer(op) || strcmp(op, "kv_cache_write") == 0 ||
                            strcmp(op, "paged_kv_write") == 0)) {
      continue;
    }
    st = ty_plugin_error(
        TY_CODE_FAILED_PRECONDITION,
        "dataflow: graph %.12s updates state '%s' with %s outside an optimizer update: the "
        "dataflow device runs whole train steps (forward, backward, clipping and optimizer in "
        "one call) or inference graphs; gradient accumulation across calls is not a whole "
        "step (use --grad-accum 1 with a larger --batch-size)",
        hash, g->values[g->updates[u].state].name, op);
  }
  /* Parameters: state the model's computation (forward or backward, not
   * the optimizer or clipping) reads without writing it. */
  uint32_t params = 0;
  for (uint32_t v = 0; v < g->value_count && !st; ++v) {
    if (g->values[v].role != TY_VALUE_STATE) continue;
    bool is_param = false;
    for (uint32_t n = 0; n < g->node_count && !is_param; ++n) {
      if (section[n] != DF_FWD && section[n] != DF_BWD) continue;
      for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
        if (g->nodes[n].inputs[i] == v && !df_node_updates(g, n, v)) is_param = true;
      }
    }
    params += is_param;
  }
  if (!st && params == 0) {
    const char *first = g->node_count ? g->nodes[0].op : "none";
    st = ty_plugin_error(
        TY_CODE_FAILED_PRECONDITION,
        "dataflow: per-op execution: graph %.12s (%u node%s, the first '%s') has no "
        "parameters (no state value that its computation reads outside an optimizer update), "
        "so it is not a train step or an inference graph; the dataflow device runs whole "
        "train steps or inference graphs; wrap the op in a train step",
        hash, g->node_count, g->node_count == 1 ? "" : "s", first);
  }
  if (!st) {
    plan->kind = has_opt ? DF_KIND_TRAIN : DF_KIND_INFERENCE;
    snprintf(plan->graph_hash, sizeof(plan->graph_hash), "%s", hash);
    plan->node_count = g->node_count;
    plan->section = malloc(g->node_count ? g->node_count : 1);
    if (!plan->section) st = df_oom();
  }
  if (!st) {
    /* The static schedule: section by section, graph order within one. */
    uint32_t k = 0;
    for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
      for (uint32_t n = 0; n < g->node_count; ++n) {
        if (section[n] != s) continue;
        plan->section[k] = (uint8_t)s;
        out_order[k++] = n;
      }
    }
    st = df_build_slots(g, section, plan);
  }
  if (!st) st = df_collect_dropout(g, plan);
  if (!st) st = df_world_size(g, plan);
  free(producer);
  free(section);
  return st;
}

/* ---- placement and cost ---- */

static int64_t df_numel(const ty_abi_graph_t *g, uint32_t v) {
  return v == UINT32_MAX ? 0 : ty_desc_value_elements(&g->values[v]);
}

static uint32_t df_in(const ty_abi_node_t *node, uint32_t i) {
  return i < node->input_count ? node->inputs[i] : UINT32_MAX;
}

/* Floating-point operations of one node (docs/dataflow.md, "Cost model"). */
static double df_node_flops(const ty_abi_graph_t *g, const ty_abi_node_t *node) {
  const char *op = node->op;
  double out = node->output_count ? (double)df_numel(g, node->outputs[0]) : 0.0;
  if (strcmp(op, "matmul") == 0) {
    const ty_abi_value_t *a = &g->values[node->inputs[0]];
    int64_t k = a->rank >= 2 ? a->dims[a->rank - (ty_desc_node_attr_int(node, "trans_a", 0) ? 2 : 1)]
                             : 1;
    return 2.0 * out * (double)k + (df_in(node, 2) != UINT32_MAX ? out : 0.0);
  }
  if (strncmp(op, "linear_cross_entropy", 20) == 0 && node->input_count >= 3) {
    bool bwd = op[20] == '_';
    const ty_abi_value_t *w = &g->values[node->inputs[bwd ? 2 : 1]];
    double rows = w->dims[1] ? (double)df_numel(g, node->inputs[bwd ? 1 : 0]) / (double)w->dims[1]
                             : 0.0;
    return (bwd ? 6.0 : 2.0) * rows * (double)w->dims[0] * (double)w->dims[1];
  }
  bool attention = strcmp(op, "attention") == 0, attention_bwd = strcmp(op, "attention_backward") == 0;
  if (attention || attention_bwd) {
    uint32_t qi = df_in(node, attention ? 0 : 1), ki = df_in(node, attention ? 1 : 2);
    if (qi == UINT32_MAX || ki == UINT32_MAX) return out;
    const ty_abi_value_t *q = &g->values[qi], *k = &g->values[ki];
    if (q->rank != 4 || k->rank != 4) return out;
    double f = 4.0 * (double)q->dims[0] * (double)q->dims[1] * (double)q->dims[2] *
               (double)k->dims[1] * (double)q->dims[3];
    return attention ? f : 2.0 * f;
  }
  static const struct {
    const char *op;
    double per_element; /* of the first input (or the output where noted) */
    bool of_input;
  } table[] = {
      {"cross_entropy", 4, true},   {"cross_entropy_backward", 3, false},
      {"layernorm", 7, true},       {"layernorm_backward", 12, true},
      {"rmsnorm", 5, true},         {"rmsnorm_backward", 10, true},
      {"gelu", 12, true},           {"gelu_backward", 20, true},
      {"silu", 5, true},            {"silu_backward", 8, true},
      {"swiglu", 6, false},         {"swiglu_backward", 10, false},
      {"softmax", 5, true},         {"softmax_backward", 4, true},
      {"rope", 6, true},            {"rope_backward", 6, true},
      {"dropout", 3, true},         {"dropout_backward", 3, true},
      {"adamw_update", 14, true},   {"sgd_update", 4, true},
      {"adafactor_update", 16, true},
      {"reduce_sum", 1, true},      {"reduce_mean", 1, true},
      {"reduce_sumsq", 2, true},    {"embedding_backward", 1, true},
      {"add", 1, false},            {"sub", 1, false},
      {"mul", 1, false},            {"div", 1, false},
      {"scale", 1, false},
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i) {
    if (strcmp(op, table[i].op) != 0) continue;
    double n = table[i].of_input ? (double)df_numel(g, df_in(node, 0)) : out;
    return table[i].per_element * n;
  }
  if (strcmp(op, "clip_by_global_norm") == 0) {
    double total = 0;
    for (uint32_t i = 1; i < node->input_count; ++i) total += (double)df_numel(g, node->inputs[i]);
    return 3.0 * total;
  }
  return 0.0; /* moves: views, casts, gathers, concat, kv-cache writes */
}

static uint64_t df_value_bytes(const ty_abi_graph_t *g, uint32_t v) {
  if (v == UINT32_MAX) return 0;
  return (uint64_t)ty_desc_value_elements(&g->values[v]) * ty_desc_dtype_size(g->values[v].dtype);
}

static uint64_t df_node_bytes(const ty_abi_graph_t *g, const ty_abi_node_t *node) {
  uint64_t b = 0;
  for (uint32_t i = 0; i < node->input_count; ++i) b += df_value_bytes(g, node->inputs[i]);
  for (uint32_t o = 0; o < node->output_count; ++o) b += df_value_bytes(g, node->outputs[o]);
  return b;
}

ty_abi_status_t df_place(const ty_abi_graph_t *g, df_plan_t *plan) {
  const df_target_t *t = &plan->target;
  uint32_t nv = g->value_count, nn = g->node_count, tiles = t->tiles;
  plan->tile = calloc(nn ? nn : 1, sizeof(uint16_t));
  uint16_t *owner = malloc((nv ? nv : 1) * sizeof(uint16_t));  /* state -> tile */
  uint16_t *home = malloc((nv ? nv : 1) * sizeof(uint16_t));   /* intermediate -> tile */
  uint32_t *last_use = malloc((nv ? nv : 1) * sizeof(uint32_t));
  double *flops = malloc((nn ? nn : 1) * sizeof(double));
  if (!plan->tile || !owner || !home || !last_use || !flops) {
    free(owner);
    free(home);
    free(last_use);
    free(flops);
    return df_oom();
  }
  for (uint32_t v = 0; v < nv; ++v) {
    owner[v] = UINT16_MAX;
    home[v] = UINT16_MAX;
    last_use[v] = UINT32_MAX;
  }
  for (uint32_t n = 0; n < nn; ++n) {
    for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
      if (g->nodes[n].inputs[i] != UINT32_MAX) last_use[g->nodes[n].inputs[i]] = n;
    }
  }
  uint64_t live[DF_MAX_TILES] = {0};
  double section_load[DF_MAX_TILES] = {0};
  memset(plan->tiles, 0, sizeof(plan->tiles));
  memset(plan->sections, 0, sizeof(plan->sections));
  uint32_t current = UINT32_MAX;
  double fp_per_cycle = 2.0 * DF_MACS_PER_TILE;
  /* Greedy, in schedule order: an optimizer update goes where its
   * parameter lives; any other node to the least-loaded tile of its section
   * that still has room for its state and outputs. */
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    if (plan->section[n] != current) {
      current = plan->section[n];
      for (uint32_t k = 0; k < tiles; ++k) section_load[k] = 0;
    }
    flops[n] = df_node_flops(g, node);
    uint64_t new_state = 0, outputs = 0;
    for (uint32_t i = 0; i < node->input_count; ++i) {
      uint32_t v = node->inputs[i];
      if (v != UINT32_MAX && g->values[v].role == TY_VALUE_STATE && owner[v] == UINT16_MAX) {
        new_state += df_value_bytes(g, v);
      }
    }
    for (uint32_t o = 0; o < node->output_count; ++o) outputs += df_value_bytes(g, node->outputs[o]);
    uint32_t pick = UINT32_MAX;
    if (plan->section[n] == DF_OPT && node->input_count &&
        node->inputs[0] != UINT32_MAX && owner[node->inputs[0]] != UINT16_MAX) {
      pick = owner[node->inputs[0]];
    }
    if (pick == UINT32_MAX) {
      double best = INFINITY;
      for (uint32_t c = 0; c < tiles; ++c) {
        uint64_t need = plan->tiles[c].state_bytes + new_state + live[c] + outputs;
        if (need <= t->mem_per_tile && section_load[c] < best) {
          best = section_load[c];
          pick = c;
        }
      }
    }
    if (pick == UINT32_MAX) { /* nothing fits: the least-loaded tile spills */
      double best = INFINITY;
      for (uint32_t c = 0; c < tiles; ++c) {
        if (section_load[c] < best) {
          best = section_load[c];
          pick = c;
        }
      }
    }
    plan->tile[n] = (uint16_t)pick;
    df_tile_stats_t *tile = &plan->tiles[pick];
    tile->nodes++;
    tile->flops += flops[n];
    section_load[pick] += flops[n] / fp_per_cycle;
    for (uint32_t i = 0; i < node->input_count; ++i) {
      uint32_t v = node->inputs[i];
      if (v != UINT32_MAX && g->values[v].role == TY_VALUE_STATE && owner[v] == UINT16_MAX) {
        owner[v] = (uint16_t)pick;
        tile->state_bytes += df_value_bytes(g, v);
      }
    }
    for (uint32_t o = 0; o < node->output_count; ++o) {
      uint32_t v = node->outputs[o];
      if (last_use[v] == UINT32_MAX) continue; /* streams out: no consumer */
      home[v] = (uint16_t)pick;
      live[pick] += df_value_bytes(g, v);
    }
    if (live[pick] > tile->peak_activation_bytes) tile->peak_activation_bytes = live[pick];
    for (uint32_t i = 0; i < node->input_count; ++i) {
      uint32_t v = node->inputs[i];
      if (v != UINT32_MAX && last_use[v] == n && home[v] != UINT16_MAX) {
        live[home[v]] -= df_value_bytes(g, v);
        home[v] = UINT16_MAX; /* an input listed twice is freed once */
      }
    }
  }
  for (uint32_t k = 0; k < tiles; ++k) {
    uint64_t need = plan->tiles[k].state_bytes + plan->tiles[k].peak_activation_bytes;
    plan->tiles[k].spill_bytes = need > t->mem_per_tile ? need - t->mem_per_tile : 0;
  }
  /* Per section: the busiest tile's compute, plus DRAM traffic (inputs read
   * once, outputs written once, and a spilling tile's share of its nodes'
   * operands) at the DRAM bandwidth. */
  double tile_flops[DF_SECTION_COUNT][DF_MAX_TILES] = {{0}};
  double dram[DF_SECTION_COUNT] = {0};
  bool *input_seen = calloc(nv ? nv : 1, 1);
  if (!input_seen) {
    free(owner);
    free(home);
    free(last_use);
    free(flops);
    return df_oom();
  }
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    uint32_t s = plan->section[n], k = plan->tile[n];
    plan->sections[s].nodes++;
    plan->sections[s].flops += flops[n];
    tile_flops[s][k] += flops[n];
    for (uint32_t i = 0; i < node->input_count; ++i) {
      uint32_t v = node->inputs[i];
      if (v != UINT32_MAX && g->values[v].role == TY_VALUE_INPUT && !input_seen[v]) {
        input_seen[v] = 1;
        dram[s] += (double)df_value_bytes(g, v);
      }
    }
    for (uint32_t o = 0; o < node->output_count; ++o) {
      if (g->values[node->outputs[o]].flags & TY_VALUE_FLAG_OUTPUT) {
        dram[s] += (double)df_value_bytes(g, node->outputs[o]);
      }
    }
    const df_tile_stats_t *tile = &plan->tiles[k];
    uint64_t need = tile->state_bytes + tile->peak_activation_bytes;
    if (tile->spill_bytes && need) {
      dram[s] += (double)df_node_bytes(g, node) * (double)tile->spill_bytes / (double)need;
    }
  }
  double bytes_per_cycle = t->bandwidth_gbs * 1e9 / ((double)t->clock_mhz * 1e6);
  plan->cycles_per_step = 0;
  for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
    double busiest = 0;
    for (uint32_t k = 0; k < tiles; ++k) busiest = fmax(busiest, tile_flops[s][k]);
    plan->sections[s].compute_cycles = (uint64_t)ceil(busiest / fp_per_cycle);
    plan->sections[s].dram_bytes = (uint64_t)ceil(dram[s]);
    plan->sections[s].dram_cycles = (uint64_t)ceil(dram[s] / bytes_per_cycle);
    plan->cycles_per_step += plan->sections[s].compute_cycles + plan->sections[s].dram_cycles;
  }
  /* Tokens per step: the integer input an embedding gathers by. */
  plan->tokens_per_step = 0;
  for (uint32_t n = 0; n < nn && !plan->tokens_per_step; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    uint32_t ids = df_in(node, 1);
    if (strcmp(node->op, "embedding") == 0 && ids != UINT32_MAX &&
        g->values[ids].role == TY_VALUE_INPUT) {
      plan->tokens_per_step = (uint64_t)df_numel(g, ids);
    }
  }
  free(input_seen);
  free(owner);
  free(home);
  free(last_use);
  free(flops);
  return NULL;
}
