/* Memory planning: interval liveness + best-fit placement in one arena. */
#include "hal/memory_plan.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* (node, output index) -> input index it may overwrite in place. */
static int ty_inplace_input(const ty_abi_node_t *node, uint32_t output) {
  const char *op = node->op;
  if (strcmp(op, "adafactor_update") == 0) {
    /* param', then one output per present state input 2..5, in order */
    if (output == 0) return 0;
    uint32_t seen = 0;
    for (uint32_t i = 2; i < 6 && i < node->input_count; ++i) {
      if (node->inputs[i] != UINT32_MAX && ++seen == output) return (int)i;
    }
    return -1;
  }
  if (strcmp(op, "adamw_update") == 0) {
    return output == 0 ? 0 : output == 1 ? 2 : output == 2 ? 3 : -1;
  }
  if (strcmp(op, "sgd_update") == 0) return output == 0 ? 0 : output == 1 ? 2 : -1;
  if (strcmp(op, "kv_cache_write") == 0 || strcmp(op, "paged_kv_write") == 0) {
    return output == 0 ? 0 : -1;
  }
  return -1;
}

/* How many of `node`'s inputs are `v`. */
static uint32_t ty_node_reads(const ty_abi_node_t *node, uint32_t v) {
  uint32_t reads = 0;
  for (uint32_t i = 0; i < node->input_count; ++i) reads += node->inputs[i] == v;
  return reads;
}

static bool ty_same_shape(const ty_abi_value_t *a, const ty_abi_value_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (uint32_t d = 0; d < a->rank; ++d) {
    if (a->dims[d] != b->dims[d]) return false;
  }
  return true;
}

/* An elementwise add whose output updates `state`, one of its inputs, with
 * no broadcast (both inputs and the output of one shape and dtype): each
 * element is read before it is written, so the sum may go straight into
 * the state's buffer (a gradient accumulator's acc + grad). The input
 * index, or -1. */
static int ty_inplace_add(const ty_abi_graph_t *g, const ty_abi_node_t *node, uint32_t state) {
  if (strcmp(node->op, "add") != 0 || node->input_count != 2 || node->output_count != 1) return -1;
  const uint32_t a = node->inputs[0], b = node->inputs[1];
  if (a == UINT32_MAX || b == UINT32_MAX || a == b) return -1;
  const ty_abi_value_t *y = &g->values[node->outputs[0]];
  if (!ty_same_shape(&g->values[a], y) || !ty_same_shape(&g->values[b], y)) return -1;
  return a == state ? 0 : b == state ? 1 : -1;
}

/* The input whose state buffer an elementwise output `o` of `node` may
 * take as scratch (see ty_plan_state_scratch): clip_by_global_norm's
 * scaled gradient k from gradient k (every gradient is read for the norm
 * before any is scaled), a mul's product from its operand of the output's
 * shape. -1: none. */
static int ty_scratch_input(const ty_abi_graph_t *g, const ty_abi_node_t *node, uint32_t o) {
  if (strcmp(node->op, "clip_by_global_norm") == 0) {
    return o >= 1 && o < node->input_count ? (int)o : -1;
  }
  if (strcmp(node->op, "mul") == 0 && o == 0 && node->input_count == 2) {
    for (uint32_t i = 0; i < 2; ++i) {
      const uint32_t x = node->inputs[i];
      if (x != UINT32_MAX && g->values[x].role == TY_VALUE_STATE) return (int)i;
    }
  }
  return -1;
}

static uint32_t ty_plan_at(const uint32_t *run_at, uint32_t nn, uint32_t n);

/* Scratch in a state's buffer. A state that this graph gives a new value
 * holds nothing worth keeping between the last read of its old value and
 * the write of its new one (the accumulators, which the optimizer step
 * reads, clips and then resets to zeros). An output computed element by
 * element from that old value (ty_scratch_input) may live there in the
 * meantime when: it is an arena value of the state's shape and dtype, the
 * node that makes it is the old value's last reader, its own last reader
 * runs before the new value is written (the end-of-graph copy, or the
 * command that writes the update in place), and no other scratch is in
 * that state already. It becomes a STATE_ALIAS of the state: executors
 * resolve it to the state's buffer. */
static void ty_plan_state_scratch(const ty_owned_graph_t *og, const uint32_t *run_at,
                                  ty_memory_plan_t *plan, const uint32_t *last_use) {
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nn = g->node_count;
  for (uint32_t u = 0; u < g->update_count; ++u) {
    const uint32_t state = g->updates[u].state, value = g->updates[u].value;
    /* when the new value lands in the state's buffer */
    const uint32_t written = plan->storage[value].kind == TY_STORAGE_STATE_ALIAS &&
                                     og->producer[value] != UINT32_MAX
                                 ? ty_plan_at(run_at, nn, og->producer[value])
                                 : nn;
    const uint32_t reader = last_use[state];
    if (reader >= nn || ty_plan_at(run_at, nn, reader) != reader) continue;
    const ty_abi_node_t *node = &g->nodes[reader];
    for (uint32_t o = 0; o < node->output_count; ++o) {
      const int in = ty_scratch_input(g, node, o);
      const uint32_t x = node->outputs[o];
      if (in < 0 || node->inputs[in] != state || x == UINT32_MAX ||
          plan->storage[x].kind != TY_STORAGE_ARENA ||
          !ty_same_shape(&g->values[x], &g->values[state]) || last_use[x] >= written) {
        continue;
      }
      /* the state read once by this node (clip's other inputs are other
       * states) */
      if (ty_node_reads(node, state) != 1) continue;
      plan->storage[x].kind = TY_STORAGE_STATE_ALIAS;
      plan->storage[x].alias = state;
      break; /* one scratch per state */
    }
  }
}

typedef struct {
  uint64_t offset, size;
  uint32_t last_use; /* node index after which the block is free */
} ty_block_t;

void ty_memory_plan_free(ty_memory_plan_t *plan) {
  free(plan->storage);
  free(plan->copies);
  free(plan->skip);
  free(plan->in_place);
  memset(plan, 0, sizeof(*plan));
}

ty_code_t ty_memory_plan_build(const ty_owned_graph_t *og, uint64_t alignment,
                               ty_memory_plan_t *plan) {
  return ty_memory_plan_build_fused(og, alignment, NULL, plan);
}

ty_code_t ty_memory_plan_build_fused(const ty_owned_graph_t *og, uint64_t alignment,
                                     const uint32_t *run_at, ty_memory_plan_t *plan) {
  const ty_memory_plan_opts_t opts = {.run_at = run_at};
  return ty_memory_plan_build_opts(og, alignment, &opts, plan);
}

/* The node whose command does node n's work. */
static uint32_t ty_plan_at(const uint32_t *run_at, uint32_t nn, uint32_t n) {
  return run_at && run_at[n] < nn ? run_at[n] : n;
}

/* The value whose bytes v reads (v itself unless it is a view). */
static uint32_t ty_plan_root(const ty_memory_plan_t *plan, uint32_t v) {
  return plan->storage[v].kind == TY_STORAGE_VIEW ? plan->storage[v].alias : v;
}

/* Whether node n's offer (opts->reuse_input[n]) is safe to take, given the
 * final last uses (see memory_plan.h). */
static bool ty_plan_reuse_ok(const ty_owned_graph_t *og, const ty_memory_plan_opts_t *opts,
                             const ty_memory_plan_t *plan, const uint32_t *last_use,
                             uint32_t n) {
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nn = g->node_count;
  const ty_abi_node_t *node = &g->nodes[n];
  const int32_t in = opts->reuse_input[n];
  if (in < 0 || (uint32_t)in >= node->input_count || node->inputs[in] == UINT32_MAX ||
      node->output_count < 1 || ty_plan_at(opts->run_at, nn, n) != n) {
    return false;
  }
  const uint32_t root = ty_plan_root(plan, node->inputs[in]), y = node->outputs[0];
  /* last_use covers later readers, views, state-update copies, deferred
   * nodes and extra reads alike. */
  if (plan->storage[root].kind != TY_STORAGE_ARENA || plan->storage[y].kind != TY_STORAGE_ARENA ||
      og->value_bytes[root] != og->value_bytes[y] || last_use[root] > n) {
    return false;
  }
  for (uint32_t u = 0; u < g->update_count; ++u) {
    if (g->updates[u].value == y) return false;
  }
  /* Another node done by n's command may read the root while n writes. */
  for (uint32_t m = 0; m < nn; ++m) {
    if (m == n || ty_plan_at(opts->run_at, nn, m) != n) continue;
    for (uint32_t i = 0; i < g->nodes[m].input_count; ++i) {
      const uint32_t x = g->nodes[m].inputs[i];
      if (x != UINT32_MAX && ty_plan_root(plan, x) == root) return false;
    }
    const uint32_t extra = opts->extra_read ? opts->extra_read[m] : UINT32_MAX;
    if (extra < g->value_count && ty_plan_root(plan, extra) == root) return false;
  }
  return true;
}

ty_code_t ty_memory_plan_build_opts(const ty_owned_graph_t *og, uint64_t alignment,
                                    const ty_memory_plan_opts_t *opts, ty_memory_plan_t *plan) {
  static const ty_memory_plan_opts_t no_opts = {0};
  if (!opts) opts = &no_opts;
  const uint32_t *run_at = opts->run_at;
  const ty_abi_graph_t *g = &og->graph;
  uint32_t nv = g->value_count, nn = g->node_count;
  memset(plan, 0, sizeof(*plan));
  plan->value_count = nv;
  plan->storage = calloc(nv ? nv : 1, sizeof(*plan->storage));
  plan->copies = calloc(g->update_count ? g->update_count : 1, sizeof(*plan->copies));
  plan->skip = calloc(nn ? nn : 1, sizeof(*plan->skip));
  plan->in_place = calloc(nn ? nn : 1, sizeof(*plan->in_place));
  uint32_t *last_use = malloc((nv ? nv : 1) * sizeof(uint32_t));
  ty_block_t *live = malloc((nv ? nv : 1) * sizeof(ty_block_t));
  /* Nodes whose outputs are placed at node k: first[k], then next[...]
   * (in node order). */
  uint32_t *first = malloc((nn ? nn : 1) * sizeof(uint32_t));
  uint32_t *next = malloc((nn ? nn : 1) * sizeof(uint32_t));
  if (!plan->storage || !plan->copies || !plan->skip || !plan->in_place || !last_use || !live ||
      !first || !next) {
    free(last_use);
    free(live);
    free(first);
    free(next);
    ty_memory_plan_free(plan);
    return TY_CODE_RESOURCE_EXHAUSTED;
  }
  for (uint32_t v = 0; v < nv; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    last_use[v] = og->producer[v];
    if (val->role == TY_VALUE_CONSTANT) {
      plan->storage[v].kind = TY_STORAGE_CONSTANT;
    } else if (val->role != TY_VALUE_INTERMEDIATE || (val->flags & TY_VALUE_FLAG_OUTPUT)) {
      plan->storage[v].kind = TY_STORAGE_BOUND;
    } else if (opts->external && opts->external[v]) {
      plan->storage[v].kind = TY_STORAGE_EXTERNAL;
    } else {
      plan->storage[v].kind = TY_STORAGE_ARENA;
    }
  }
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    for (uint32_t i = 0; i < node->input_count; ++i) {
      if (node->inputs[i] != UINT32_MAX) last_use[node->inputs[i]] = n;
    }
  }
  /* A node done later, by another node's command, reads its inputs then. */
  for (uint32_t n = 0; run_at && n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    for (uint32_t i = 0; i < node->input_count && run_at[n] > n && run_at[n] < nn; ++i) {
      uint32_t x = node->inputs[i];
      if (x != UINT32_MAX && last_use[x] < run_at[n]) last_use[x] = run_at[n];
    }
  }
  /* A value a command reads beyond its node's inputs (before the views
   * below, so a view's extra reader keeps its root too). */
  for (uint32_t n = 0; opts->extra_read && n < nn; ++n) {
    const uint32_t x = opts->extra_read[n], at = ty_plan_at(run_at, nn, n);
    if (x < nv && last_use[x] < at) last_use[x] = at;
  }
  /* A run of consecutive all_reduce (or tp_reduce) nodes is one group that
   * a backend may launch together (NCCL's group calls): every input of the
   * run stays live until its last node, so no output of the run lands on an
   * input that an earlier member is still reading. */
  for (uint32_t n = 0; n < nn;) {
    uint32_t end = n;
    while (end < nn && (strcmp(g->nodes[end].op, "all_reduce") == 0 ||
                        strcmp(g->nodes[end].op, "tp_reduce") == 0)) {
      ++end;
    }
    for (uint32_t m = n; m < end; ++m) {
      const ty_abi_node_t *node = &g->nodes[m];
      for (uint32_t i = 0; i < node->input_count; ++i) {
        uint32_t x = node->inputs[i];
        if (x != UINT32_MAX && last_use[x] < end - 1) last_use[x] = end - 1;
      }
    }
    n = end > n ? end : n + 1;
  }
  /* Reshapes into arena values become views of their input's root (the
   * first value of a chain of reshapes), which then stays live until the
   * last reader of any view: forward order sees a chain's links in order. */
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    if (strcmp(node->op, "reshape") != 0 || node->input_count < 1 || node->output_count != 1 ||
        node->inputs[0] == UINT32_MAX) {
      continue;
    }
    uint32_t x = node->inputs[0], y = node->outputs[0];
    if (plan->storage[y].kind != TY_STORAGE_ARENA || og->value_bytes[x] != og->value_bytes[y]) {
      continue;
    }
    uint32_t root = plan->storage[x].kind == TY_STORAGE_VIEW ? plan->storage[x].alias : x;
    plan->storage[y].kind = TY_STORAGE_VIEW;
    plan->storage[y].alias = root;
    plan->skip[n] = true;
    if (last_use[y] > last_use[root]) last_use[root] = last_use[y];
  }
  /* In-place state updates. */
  for (uint32_t u = 0; u < g->update_count; ++u) {
    uint32_t state = g->updates[u].state, value = g->updates[u].value;
    uint32_t p = og->producer[value];
    bool alias = false;
    if (p != UINT32_MAX && plan->storage[value].kind == TY_STORAGE_ARENA) {
      const ty_abi_node_t *node = &g->nodes[p];
      for (uint32_t o = 0; o < node->output_count && !alias; ++o) {
        if (node->outputs[o] != value) continue;
        int in = ty_inplace_input(node, o);
        if (in < 0) in = ty_inplace_add(g, node, state);
        /* Safe when nobody reads the old state after the update; readers
         * of the new value then read the state's buffer, which holds it (a
         * KV cache that attention reads right after the write). */
        alias = in >= 0 && (uint32_t)in < node->input_count &&
                node->inputs[in] == state && last_use[state] <= p;
      }
    }
    /* A producer that runs after every reader of the old state writes its
     * whole output without reading it (a state reset to a broadcast
     * constant, the optimizer step's zeroed accumulators): straight into
     * the state's buffer too, instead of waiting in the arena for the
     * end-of-graph copy. */
    if (!alias && p != UINT32_MAX && plan->storage[value].kind == TY_STORAGE_ARENA &&
        ty_same_shape(&g->values[value], &g->values[state])) {
      alias = ty_node_reads(&g->nodes[p], state) == 0 &&
              last_use[state] < ty_plan_at(run_at, nn, p);
    }
    if (alias) {
      plan->storage[value].kind = TY_STORAGE_STATE_ALIAS;
      plan->storage[value].alias = state;
    } else {
      plan->copies[plan->copy_count++] = g->updates[u];
      /* The copy reads the value after every node. */
      if (plan->storage[value].kind == TY_STORAGE_ARENA) last_use[value] = nn;
      if (plan->storage[value].kind == TY_STORAGE_VIEW) last_use[plan->storage[value].alias] = nn;
    }
  }
  ty_plan_state_scratch(og, run_at, plan, last_use);
  /* Outputs that take their input's bytes (every last use is known now):
   * the output becomes a view of the input's root, its own views follow,
   * and the root lives as long as the output does. */
  for (uint32_t n = 0; opts->reuse_input && n < nn; ++n) {
    if (!ty_plan_reuse_ok(og, opts, plan, last_use, n)) continue;
    const ty_abi_node_t *node = &g->nodes[n];
    const uint32_t root = ty_plan_root(plan, node->inputs[opts->reuse_input[n]]);
    const uint32_t y = node->outputs[0];
    plan->storage[y].kind = TY_STORAGE_VIEW;
    plan->storage[y].alias = root;
    plan->in_place[n] = true;
    if (last_use[y] > last_use[root]) last_use[root] = last_use[y];
    for (uint32_t v = 0; v < nv; ++v) {
      if (plan->storage[v].kind == TY_STORAGE_VIEW && plan->storage[v].alias == y) {
        plan->storage[v].alias = root;
      }
    }
  }
  for (uint32_t n = 0; n < nn; ++n) first[n] = next[n] = UINT32_MAX;
  for (uint32_t n = nn; n-- > 0;) {
    const uint32_t at = ty_plan_at(run_at, nn, n);
    next[n] = first[at];
    first[at] = n;
  }
  /* Best-fit placement in definition order. */
  uint32_t live_count = 0;
  uint64_t peak = 0;
  uint64_t mask = alignment ? alignment - 1 : 0;
  for (uint32_t n = 0; n < nn; ++n) {
    /* Release blocks whose last reader ran before this node. */
    for (uint32_t b = 0; b < live_count;) {
      if (live[b].last_use < n) {
        live[b] = live[--live_count];
      } else {
        ++b;
      }
    }
    for (uint32_t m = first[n]; m != UINT32_MAX; m = next[m]) {
      for (uint32_t o = 0; o < g->nodes[m].output_count; ++o) {
        uint32_t v = g->nodes[m].outputs[o];
        if (plan->storage[v].kind != TY_STORAGE_ARENA) continue;
        uint64_t size = (og->value_bytes[v] + mask) & ~mask;
        if (size == 0) size = alignment ? alignment : 1;
        plan->naive_bytes += size;
        /* Sort live blocks by offset (few blocks; insertion sort). */
        for (uint32_t i = 1; i < live_count; ++i) {
          ty_block_t key = live[i];
          uint32_t j = i;
          while (j > 0 && live[j - 1].offset > key.offset) {
            live[j] = live[j - 1];
            --j;
          }
          live[j] = key;
        }
        /* Best fit among the gaps; the space after the last block always fits. */
        uint64_t best = 0, best_gap = 0, cursor = 0;
        bool found = false;
        for (uint32_t i = 0; i <= live_count; ++i) {
          uint64_t end = i < live_count ? live[i].offset : UINT64_MAX;
          if (end >= cursor && end - cursor >= size && (!found || end - cursor < best_gap)) {
            best = cursor;
            best_gap = end - cursor;
            found = true;
          }
          if (i < live_count && live[i].offset + live[i].size > cursor) {
            cursor = live[i].offset + live[i].size;
          }
        }
        plan->storage[v].offset = best;
        live[live_count++] = (ty_block_t){best, size, last_use[v]};
        if (best + size > peak) peak = best + size;
      }
    }
  }
  plan->arena_bytes = peak;
  free(last_use);
  free(live);
  free(first);
  free(next);
  return TY_CODE_OK;
}
