/* The pre-flight memory plan (preflight.h): lower each graph, place its
 * intermediates with the host executor's planner, and sort every value's
 * bytes into the plan's items by its role and memory class. */
#include "graph/runtime/preflight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/abi_graph.h"
#include "hal/dtype.h"
#include "hal/memory_plan.h"
#include "graph/ir/lower.h"
#include "hal/file.h"

/* The alignment the host executor places its arena with. */
#define TY_PREFLIGHT_ALIGNMENT 64u

const char *ty_plan_item_name(ty_plan_item_t item) {
  static const char *const names[TY_PLAN_ITEM_COUNT] = {
      "parameters", "gradients", "optimizer state", "activations",
      "workspace",  "inputs and outputs", "other state"};
  return (unsigned)item < TY_PLAN_ITEM_COUNT ? names[item] : "?";
}

void ty_preflight_init(ty_preflight_t *p) { memset(p, 0, sizeof(*p)); }

void ty_preflight_deinit(ty_preflight_t *p) {
  for (uint32_t i = 0; i < p->state_count; ++i) free(p->state_names[i]);
  free(p->state_names);
  memset(p, 0, sizeof(*p));
}

/* Whether state `name` was counted; records it when not. */
static ty_status_t ty_preflight_seen(ty_preflight_t *p, const char *name, bool *out_seen) {
  for (uint32_t i = 0; i < p->state_count; ++i) {
    if (strcmp(p->state_names[i], name) == 0) {
      *out_seen = true;
      return TY_OK;
    }
  }
  *out_seen = false;
  if (p->state_count == p->state_capacity) {
    uint32_t cap = p->state_capacity ? p->state_capacity * 2 : 256;
    char **grown = realloc(p->state_names, cap * sizeof(char *));
    if (!grown) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory planning");
    p->state_names = grown;
    p->state_capacity = cap;
  }
  if (!(p->state_names[p->state_count] = strdup(name))) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory planning");
  }
  p->state_count++;
  return TY_OK;
}

/* The arena's live bytes over time: peak, and the gradients live then. */
/* What made value v: its producer's op, dtype and shape, and the block its
 * producer belongs to (backward nodes and recomputed copies carry none). */
static void ty_preflight_describe(const ty_owned_graph_t *og, uint32_t v, uint32_t region,
                                  char *out, size_t capacity) {
  const ty_abi_value_t *val = &og->graph.values[v];
  char dims[64];
  size_t used = 0;
  dims[0] = '\0';
  for (uint32_t d = 0; d < val->rank && used < sizeof(dims); ++d) {
    used += (size_t)snprintf(dims + used, sizeof(dims) - used, "%s%lld", d ? "," : "",
                             (long long)val->dims[d]);
  }
  char where[40] = "backward or outside a block";
  if (region) {
    snprintf(where, sizeof(where), "layer %u %s", TY_REGION_LAYER(region),
             TY_REGION_PART(region) == TY_REGION_MLP ? "mlp" : "attention");
  }
  snprintf(out, capacity, "%s %s [%s], node %u, %s", og->graph.nodes[og->producer[v]].op,
           ty_dtype_name(val->dtype), dims, og->producer[v], where);
}

/* The arena values live at node `peak`, largest first, into out->detail. */
static void ty_preflight_peak_detail(const ty_owned_graph_t *og, const ty_memory_plan_t *mp,
                                     const uint32_t *last, const uint32_t *region,
                                     uint32_t peak, ty_preflight_graph_t *out) {
  const ty_abi_graph_t *g = &og->graph;
  out->peak_node = peak;
  snprintf(out->peak_op, sizeof(out->peak_op), "%s", peak < g->node_count ? g->nodes[peak].op : "");
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (mp->storage[v].kind != TY_STORAGE_ARENA || og->producer[v] == UINT32_MAX) continue;
    const uint32_t from = og->producer[v], to = last[v] < from ? from : last[v];
    if (from > peak || to < peak) continue;
    out->peak_values++;
    const uint64_t bytes = og->value_bytes[v];
    uint32_t k = out->detail_count < TY_PREFLIGHT_DETAIL ? out->detail_count++
                                                         : TY_PREFLIGHT_DETAIL;
    if (k == TY_PREFLIGHT_DETAIL) {
      if (bytes <= out->detail[k - 1].bytes) continue;
      k--; /* replaces the smallest */
    }
    for (; k > 0 && out->detail[k - 1].bytes < bytes; --k) out->detail[k] = out->detail[k - 1];
    out->detail[k].bytes = bytes;
    ty_preflight_describe(og, v, region ? region[v] : 0, out->detail[k].what,
                          sizeof(out->detail[k].what));
  }
}

static ty_status_t ty_preflight_liveness(const ty_owned_graph_t *og, const ty_memory_plan_t *mp,
                                         const uint8_t *klass, const uint32_t *region,
                                         ty_preflight_graph_t *out) {
  const ty_abi_graph_t *g = &og->graph;
  uint32_t nv = g->value_count, nn = g->node_count;
  uint32_t *last = malloc((nv ? nv : 1) * sizeof(uint32_t));
  int64_t *delta = calloc((size_t)nn + 2, sizeof(int64_t));
  int64_t *grad_delta = calloc((size_t)nn + 2, sizeof(int64_t));
  if (!last || !delta || !grad_delta) {
    free(last);
    free(delta);
    free(grad_delta);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory planning");
  }
  for (uint32_t v = 0; v < nv; ++v) last[v] = og->producer[v];
  for (uint32_t n = 0; n < nn; ++n) {
    for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
      uint32_t v = g->nodes[n].inputs[i];
      if (v == UINT32_MAX) continue;
      if (mp->storage[v].kind == TY_STORAGE_VIEW) v = mp->storage[v].alias;
      last[v] = n;
    }
  }
  for (uint32_t u = 0; u < mp->copy_count; ++u) {
    uint32_t v = mp->copies[u].value;
    if (mp->storage[v].kind == TY_STORAGE_VIEW) v = mp->storage[v].alias;
    last[v] = nn; /* copied into its state after the last node */
  }
  for (uint32_t v = 0; v < nv; ++v) {
    if (mp->storage[v].kind != TY_STORAGE_ARENA || og->producer[v] == UINT32_MAX) continue;
    int64_t bytes = (int64_t)((og->value_bytes[v] + TY_PREFLIGHT_ALIGNMENT - 1) &
                              ~(uint64_t)(TY_PREFLIGHT_ALIGNMENT - 1));
    uint32_t from = og->producer[v], to = last[v] < from ? from : last[v];
    delta[from] += bytes;
    delta[to + 1] -= bytes;
    if (klass[v] == TY_MEMORY_GRADIENT) {
      grad_delta[from] += bytes;
      grad_delta[to + 1] -= bytes;
    }
  }
  int64_t live = 0, grads = 0;
  uint32_t peak = 0;
  for (uint32_t n = 0; n <= nn; ++n) {
    live += delta[n];
    grads += grad_delta[n];
    if ((uint64_t)live > out->live_peak) {
      out->live_peak = (uint64_t)live;
      out->gradients = (uint64_t)grads;
      peak = n;
    }
  }
  ty_preflight_peak_detail(og, mp, last, region, peak, out);
  free(last);
  free(delta);
  free(grad_delta);
  return TY_OK;
}

ty_status_t ty_preflight_add(ty_preflight_t *p, const ty_graph_t *graph, const char *label) {
  if (p->graph_count == TY_PREFLIGHT_MAX_GRAPHS) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "a memory plan holds %d graphs at most",
                          TY_PREFLIGHT_MAX_GRAPHS);
  }
  ty_lowered_graph_t *lowered = NULL;
  TY_RETURN_IF_ERROR(ty_graph_lower(graph, &lowered));
  const ty_abi_graph_t *abi = ty_lowered_graph_abi(lowered);
  ty_owned_graph_t *og = ty_owned_graph_copy(abi);
  uint8_t *klass = calloc(abi->value_count ? abi->value_count : 1, 1);
  uint32_t *region = calloc(abi->value_count ? abi->value_count : 1, sizeof(uint32_t));
  ty_memory_plan_t mp;
  memset(&mp, 0, sizeof(mp));
  ty_status_t s = TY_OK;
  if (!og || !klass || !region ||
      ty_memory_plan_build(og, TY_PREFLIGHT_ALIGNMENT, &mp) != TY_CODE_OK) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory planning %s", label);
  }
  /* Memory classes live on the core graph; map them to lowered values. */
  for (uint32_t v = 0; !s && v < ty_graph_value_count(graph); ++v) {
    uint32_t l = ty_lowered_graph_index(lowered, v);
    if (l == UINT32_MAX) continue;
    const ty_graph_value_t *cv = ty_graph_value(graph, v);
    klass[l] = cv->memory_class;
    if (cv->producer != UINT32_MAX) region[l] = ty_graph_node(graph, cv->producer)->region;
  }
  ty_preflight_graph_t *gr = &p->graphs[p->graph_count];
  memset(gr, 0, sizeof(*gr));
  snprintf(gr->label, sizeof(gr->label), "%s", label);
  if (!s) {
    gr->arena = mp.arena_bytes;
    gr->nodes = abi->node_count;
    s = ty_preflight_liveness(og, &mp, klass, region, gr);
  }
  for (uint32_t n = 0; !s && n < abi->node_count; ++n) {
    uint64_t w = ty_desc_node_workspace_bytes(abi, &abi->nodes[n]);
    if (w > gr->workspace) gr->workspace = w;
  }
  for (uint32_t v = 0; !s && v < abi->value_count; ++v) {
    const ty_abi_value_t *val = &abi->values[v];
    uint64_t bytes = og->value_bytes[v];
    if (val->role == TY_VALUE_STATE) {
      bool seen = false;
      s = ty_preflight_seen(p, val->name, &seen);
      if (s || seen) continue;
      if (val->flags & TY_VALUE_FLAG_HOST_RESIDENT) {
        p->host_bytes += bytes;
        continue;
      }
      ty_plan_item_t item = klass[v] == TY_MEMORY_PARAMETER   ? TY_PLAN_PARAMETERS
                            : klass[v] == TY_MEMORY_OPTIMIZER ? TY_PLAN_OPTIMIZER
                            : klass[v] == TY_MEMORY_GRADIENT  ? TY_PLAN_GRADIENTS
                                                              : TY_PLAN_OTHER_STATE;
      p->bytes[item] += bytes;
    } else if (val->role == TY_VALUE_INPUT || (val->flags & TY_VALUE_FLAG_OUTPUT)) {
      p->bytes[TY_PLAN_IO] += bytes;
    }
  }
  if (!s) {
    p->bytes[TY_PLAN_GRADIENTS] += gr->gradients;
    p->bytes[TY_PLAN_ACTIVATIONS] += gr->arena - gr->gradients;
    if (gr->workspace > p->bytes[TY_PLAN_WORKSPACE]) p->bytes[TY_PLAN_WORKSPACE] = gr->workspace;
    p->graph_count++;
    p->peak = 0;
    for (int i = 0; i < TY_PLAN_ITEM_COUNT; ++i) p->peak += p->bytes[i];
  }
  ty_memory_plan_free(&mp);
  ty_owned_graph_free(og);
  free(klass);
  free(region);
  ty_lowered_graph_destroy(lowered);
  return s ? ty_status_annotate(s, "planning the memory of the %s graph", label) : TY_OK;
}

/* What shrinks an item (README, "Fitting bigger models"). */
static const char *ty_plan_levers(ty_plan_item_t item) {
  switch (item) {
    case TY_PLAN_PARAMETERS: return "--dtype bf16";
    case TY_PLAN_GRADIENTS:
      return "--fused-optimizer; --dtype bf16; under mpirun --zero 2, a share per rank";
    case TY_PLAN_OPTIMIZER:
      return "--optimizer adafactor (factored moments); --offload optimizer (devices with "
             "their own memory); under mpirun --zero 1, a share per rank";
    case TY_PLAN_ACTIVATIONS:
      return "--recompute layer or attention; --loss-chunk N; a smaller --batch-size or "
             "--seq-len";
    case TY_PLAN_WORKSPACE: return "a smaller --loss-chunk";
    case TY_PLAN_IO: return "a smaller --batch-size";
    default: return "";
  }
}

/* Items by size, largest first. */
static void ty_plan_order(const ty_preflight_t *p, int order[TY_PLAN_ITEM_COUNT]) {
  for (int i = 0; i < TY_PLAN_ITEM_COUNT; ++i) order[i] = i;
  for (int i = 1; i < TY_PLAN_ITEM_COUNT; ++i) {
    for (int j = i; j > 0 && p->bytes[order[j]] > p->bytes[order[j - 1]]; --j) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  }
}

ty_status_t ty_preflight_check(const ty_preflight_t *p, uint64_t limit, const char *limit_what) {
  if (limit == 0 || p->peak <= limit) return TY_OK;
  char need[32], have[32], text[1536];
  ty_format_bytes(p->peak, need, sizeof(need));
  ty_format_bytes(limit, have, sizeof(have));
  int order[TY_PLAN_ITEM_COUNT];
  ty_plan_order(p, order);
  size_t used = 0;
  for (int k = 0; k < TY_PLAN_ITEM_COUNT && used < sizeof(text); ++k) {
    ty_plan_item_t item = (ty_plan_item_t)order[k];
    if (!p->bytes[item]) continue;
    char b[32];
    ty_format_bytes(p->bytes[item], b, sizeof(b));
    const char *levers = ty_plan_levers(item);
    used += (size_t)snprintf(text + used, sizeof(text) - used, "; %s %s%s%s%s", ty_plan_item_name(item),
                             b, levers[0] ? " (" : "", levers, levers[0] ? ")" : "");
  }
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                        "the run does not fit: its memory plan peaks at %s, more than %s (%s); "
                        "nothing was allocated. By size, with the levers that shrink each%s",
                        need, limit_what, have, text);
}

ty_status_t ty_preflight_format(const ty_preflight_t *p, const char *indent, char **out_text) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  char b[32];
  for (int i = 0; i < TY_PLAN_ITEM_COUNT; ++i) {
    if (i == TY_PLAN_OTHER_STATE && !p->bytes[i]) continue;
    ty_format_bytes(p->bytes[i], b, sizeof(b));
    fprintf(f, "%s%-19s %12s (%llu bytes)\n", indent, ty_plan_item_name((ty_plan_item_t)i), b,
            (unsigned long long)p->bytes[i]);
  }
  if (p->host_bytes) {
    ty_format_bytes(p->host_bytes, b, sizeof(b));
    fprintf(f, "%s%-19s %12s (pinned host memory, not device)\n", indent, "offloaded", b);
  }
  ty_format_bytes(p->peak, b, sizeof(b));
  fprintf(f, "%s%-19s %12s (%llu bytes)\n", indent, "peak", b, (unsigned long long)p->peak);
  for (uint32_t i = 0; i < p->graph_count; ++i) {
    const ty_preflight_graph_t *g = &p->graphs[i];
    char arena[32], live[32];
    ty_format_bytes(g->arena, arena, sizeof(arena));
    ty_format_bytes(g->live_peak, live, sizeof(live));
    fprintf(f, "%s  %s graph: %u nodes, activation arena %s (at most %s live at once)\n", indent,
            g->label, g->nodes, arena, live);
  }
  if (fclose(f) != 0) {
    free(text);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  *out_text = text;
  return TY_OK;
}

ty_status_t ty_preflight_format_detail(const ty_preflight_t *p, const char *indent,
                                       char **out_text) {
  char *text = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&text, &size);
  if (!f) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  char b[32];
  for (uint32_t i = 0; i < p->graph_count; ++i) {
    const ty_preflight_graph_t *g = &p->graphs[i];
    ty_format_bytes(g->live_peak, b, sizeof(b));
    fprintf(f, "%s%s graph peak: %s live at node %u of %u (%s), %u values; the largest:\n",
            indent, g->label, b, g->peak_node, g->nodes, g->peak_op, g->peak_values);
    uint64_t listed = 0;
    for (uint32_t k = 0; k < g->detail_count; ++k) {
      ty_format_bytes(g->detail[k].bytes, b, sizeof(b));
      fprintf(f, "%s  %12s  %s\n", indent, b, g->detail[k].what);
      listed += g->detail[k].bytes;
    }
    if (g->peak_values > g->detail_count) {
      /* the arena's live bytes are aligned; the values' own are not */
      ty_format_bytes(g->live_peak > listed ? g->live_peak - listed : 0, b, sizeof(b));
      fprintf(f, "%s  %12s  in the other %u values\n", indent, b,
              g->peak_values - g->detail_count);
    }
  }
  if (fclose(f) != 0) {
    free(text);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  *out_text = text;
  return TY_OK;
}
