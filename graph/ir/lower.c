/* Lowering a graph to the ABI descriptor, canonical text, dot and hash. */
#include "graph/ir/lower.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/sha256.h"

struct ty_lowered_graph_t {
  ty_abi_graph_t abi;
  ty_abi_value_t *values;
  ty_abi_node_t *nodes;
  ty_abi_state_update_t *updates;
  uint32_t *index_of; /* core value id -> lowered index */
  uint32_t core_value_count;
  /* Backing storage the descriptor points into. */
  int64_t *dims;
  uint32_t *ids;
  ty_abi_attr_t *attrs;
  ty_attrs_t *attr_sets;
  char **names; /* per lowered value */
  char **ops;   /* per lowered node */
  void **const_data;
  char hash[65];
  uint32_t *producer; /* lowered value -> lowered node, UINT32_MAX if none */
  char *text;
  char levers[256];
};

/* A growable string for the text and dot forms. */
typedef struct {
  char *data;
  size_t len, cap;
  bool failed;
} ty_sbuf_t;

static void ty_sbuf_printf(ty_sbuf_t *b, const char *fmt, ...)
    TY_PRINTF_ATTR(2, 3);
static void ty_sbuf_printf(ty_sbuf_t *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(b->data ? b->data + b->len : NULL,
                      b->data ? b->cap - b->len : 0, fmt, args);
    va_end(args);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if (b->data && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap <= b->len + (size_t)n) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
      b->failed = true;
      return;
    }
    b->data = p;
    b->cap = cap;
  }
}

static void ty_sbuf_shape(ty_sbuf_t *b, ty_dtype_t dtype, uint32_t rank,
                          const int64_t *dims) {
  ty_sbuf_printf(b, "%s[", ty_dtype_name(dtype));
  for (uint32_t i = 0; i < rank; ++i) {
    ty_sbuf_printf(b, "%s%lld", i ? "," : "", (long long)dims[i]);
  }
  ty_sbuf_printf(b, "]");
}

static void ty_sbuf_attrs(ty_sbuf_t *b, const ty_attrs_t *attrs) {
  for (uint32_t i = 0; i < attrs->count; ++i) {
    const ty_attr_t *a = &attrs->items[i];
    ty_sbuf_printf(b, " %s=", a->name);
    switch (a->kind) {
      case TY_ATTR_INT: ty_sbuf_printf(b, "%lld", (long long)a->i); break;
      case TY_ATTR_FLOAT: ty_sbuf_printf(b, "%.17g", a->f); break;
      case TY_ATTR_STRING: ty_sbuf_printf(b, "\"%s\"", a->s); break;
      case TY_ATTR_INTS:
        ty_sbuf_printf(b, "[");
        for (uint32_t k = 0; k < a->count; ++k) {
          ty_sbuf_printf(b, "%s%lld", k ? "," : "", (long long)a->ints[k]);
        }
        ty_sbuf_printf(b, "]");
        break;
      case TY_ATTR_FLOATS:
        ty_sbuf_printf(b, "[");
        for (uint32_t k = 0; k < a->count; ++k) {
          ty_sbuf_printf(b, "%s%.17g", k ? "," : "", a->floats[k]);
        }
        ty_sbuf_printf(b, "]");
        break;
    }
  }
}

void ty_lowered_graph_destroy(ty_lowered_graph_t *l) {
  if (!l) return;
  if (l->names) {
    for (uint32_t i = 0; i < l->abi.value_count; ++i) free(l->names[i]);
  }
  if (l->ops) {
    for (uint32_t i = 0; i < l->abi.node_count; ++i) free(l->ops[i]);
  }
  if (l->const_data) {
    for (uint32_t i = 0; i < l->abi.value_count; ++i) free(l->const_data[i]);
  }
  free(l->values);
  free(l->nodes);
  free(l->updates);
  free(l->index_of);
  free(l->dims);
  free(l->ids);
  free(l->attrs);
  free(l->attr_sets);
  free(l->names);
  free(l->ops);
  free(l->const_data);
  free(l->producer);
  free(l->text);
  free(l);
}

/* Marks live nodes: those reachable backwards from outputs and updates,
 * and every collective (ty_op_def_t.communicates). */
static ty_status_t ty_graph_live_nodes(const ty_graph_t *g, bool *node_live,
                                       bool *value_live) {
  uint32_t nv = ty_graph_value_count(g), nn = ty_graph_node_count(g);
  for (uint32_t v = 0; v < nv; ++v) {
    const ty_graph_value_t *val = ty_graph_value(g, v);
    value_live[v] = (val->flags & TY_VALUE_FLAG_OUTPUT) ||
                    val->role == TY_VALUE_INPUT || val->role == TY_VALUE_STATE;
    /* inputs/states are interface values, but they do not make their
     * consumers live; only outputs and updates do. */
  }
  bool *needed = calloc(nv ? nv : 1, sizeof(bool));
  if (!needed) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory lowering");
  for (uint32_t v = 0; v < nv; ++v) {
    if (ty_graph_value(g, v)->flags & TY_VALUE_FLAG_OUTPUT) needed[v] = true;
  }
  for (uint32_t u = 0; u < ty_graph_update_count(g); ++u) {
    needed[ty_graph_update(g, u).value] = true;
  }
  for (uint32_t n = nn; n-- > 0;) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    /* a collective runs whatever reads it: the group's other ranks wait for it */
    const ty_op_def_t *def = ty_op_lookup(node->op);
    bool live = def && def->communicates;
    for (uint32_t o = 0; o < node->output_count && !live; ++o) {
      live = needed[node->outputs[o]];
    }
    node_live[n] = live;
    if (!live) continue;
    for (uint32_t i = 0; i < node->input_count; ++i) {
      if (node->inputs[i] != TY_VALUE_NONE) needed[node->inputs[i]] = true;
    }
    /* every output of a live node is materialized */
    for (uint32_t o = 0; o < node->output_count; ++o) needed[node->outputs[o]] = true;
  }
  for (uint32_t v = 0; v < nv; ++v) value_live[v] = value_live[v] || needed[v];
  free(needed);
  return TY_OK;
}

static void ty_lowered_render_text(const ty_lowered_graph_t *l, ty_sbuf_t *text) {
  ty_sbuf_printf(text, "trainyard-graph 1\n");
  for (uint32_t i = 0; i < l->abi.value_count; ++i) {
    const ty_abi_value_t *v = &l->values[i];
    if (v->role == TY_VALUE_INTERMEDIATE) continue;
    ty_sbuf_printf(text, "%%%u = %s", i, ty_value_role_name(v->role));
    if (v->name[0]) ty_sbuf_printf(text, " \"%s\"", v->name);
    ty_sbuf_printf(text, " ");
    ty_sbuf_shape(text, v->dtype, v->rank, v->dims);
    if (v->role == TY_VALUE_CONSTANT) {
      char hex[65];
      size_t bytes = ty_dtype_size(v->dtype);
      for (uint32_t d = 0; d < v->rank; ++d) bytes *= (size_t)v->dims[d];
      /* libcrypto fails only without memory: the text's own failure. */
      if (!ty_sha256_hex(v->const_data, bytes, hex)) text->failed = true;
      ty_sbuf_printf(text, " sha256:%s", hex);
    }
    ty_sbuf_printf(text, "\n");
  }
  for (uint32_t n = 0; n < l->abi.node_count; ++n) {
    const ty_abi_node_t *node = &l->nodes[n];
    for (uint32_t o = 0; o < node->output_count; ++o) {
      ty_sbuf_printf(text, "%s%%%u", o ? ", " : "", node->outputs[o]);
    }
    ty_sbuf_printf(text, " = %s(", node->op);
    for (uint32_t i = 0; i < node->input_count; ++i) {
      if (node->inputs[i] == UINT32_MAX) {
        ty_sbuf_printf(text, "%s_", i ? ", " : "");
      } else {
        ty_sbuf_printf(text, "%s%%%u", i ? ", " : "", node->inputs[i]);
      }
    }
    ty_sbuf_printf(text, ")");
    ty_sbuf_attrs(text, &l->attr_sets[n]);
    ty_sbuf_printf(text, " :");
    for (uint32_t o = 0; o < node->output_count; ++o) {
      const ty_abi_value_t *v = &l->values[node->outputs[o]];
      ty_sbuf_printf(text, " ");
      ty_sbuf_shape(text, v->dtype, v->rank, v->dims);
    }
    ty_sbuf_printf(text, "\n");
  }
  for (uint32_t i = 0; i < l->abi.value_count; ++i) {
    const ty_abi_value_t *v = &l->values[i];
    if (v->flags & TY_VALUE_FLAG_OUTPUT) {
      ty_sbuf_printf(text, "output %%%u \"%s\"\n", i, v->name);
    }
    if (v->flags & TY_VALUE_FLAG_LOSS_SEED) {
      ty_sbuf_printf(text, "loss_seed %%%u \"%s\"\n", i, v->name);
    }
    if (v->flags & TY_VALUE_FLAG_HOST_RESIDENT) {
      ty_sbuf_printf(text, "host_resident %%%u \"%s\"\n", i, v->name);
    }
  }
  if (l->levers[0]) ty_sbuf_printf(text, "levers %s\n", l->levers);
  for (uint32_t u = 0; u < l->abi.update_count; ++u) {
    ty_sbuf_printf(text, "update %%%u <- %%%u\n", l->updates[u].state,
                   l->updates[u].value);
  }
}

ty_status_t ty_lowered_graph_format_dot(const ty_lowered_graph_t *l,
                                        char **out_dot) {
  *out_dot = NULL;
  ty_sbuf_t dot = {0};
  ty_sbuf_printf(&dot, "digraph trainyard {\n  node [fontname=\"monospace\"];\n");
  for (uint32_t i = 0; i < l->abi.value_count; ++i) {
    const ty_abi_value_t *v = &l->values[i];
    if (v->role != TY_VALUE_INTERMEDIATE) {
      ty_sbuf_printf(&dot, "  v%u [shape=ellipse,label=\"%s %s\"];\n", i,
                     ty_value_role_name(v->role), v->name);
    }
  }
  for (uint32_t n = 0; n < l->abi.node_count; ++n) {
    const ty_abi_node_t *node = &l->nodes[n];
    ty_sbuf_printf(&dot, "  n%u [shape=box,label=\"%s\"];\n", n, node->op);
    for (uint32_t i = 0; i < node->input_count; ++i) {
      uint32_t in = node->inputs[i];
      if (in == UINT32_MAX) continue;
      const ty_abi_value_t *v = &l->values[in];
      if (l->producer[in] != UINT32_MAX) {
        ty_sbuf_printf(&dot, "  n%u -> n%u [label=\"", l->producer[in], n);
        ty_sbuf_shape(&dot, v->dtype, v->rank, v->dims);
        ty_sbuf_printf(&dot, "\"];\n");
      } else {
        ty_sbuf_printf(&dot, "  v%u -> n%u;\n", in, n);
      }
    }
    for (uint32_t o = 0; o < node->output_count; ++o) {
      uint32_t out = node->outputs[o];
      if (l->values[out].flags & TY_VALUE_FLAG_OUTPUT) {
        ty_sbuf_printf(&dot, "  out%u [shape=doubleoctagon,label=\"%s\"];\n  n%u -> out%u;\n",
                       out, l->values[out].name, n, out);
      }
    }
  }
  for (uint32_t u = 0; u < l->abi.update_count; ++u) {
    uint32_t value = l->updates[u].value;
    if (l->producer[value] != UINT32_MAX) {
      ty_sbuf_printf(&dot, "  n%u -> v%u [style=dashed,label=\"update\"];\n",
                     l->producer[value], l->updates[u].state);
    }
  }
  ty_sbuf_printf(&dot, "}\n");
  if (dot.failed) {
    free(dot.data);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing dot");
  }
  *out_dot = dot.data;
  return TY_OK;
}

ty_status_t ty_graph_lower(const ty_graph_t *g, ty_lowered_graph_t **out) {
  *out = NULL;
  uint32_t nv = ty_graph_value_count(g), nn = ty_graph_node_count(g);
  bool has_root = ty_graph_update_count(g) > 0;
  for (uint32_t v = 0; v < nv && !has_root; ++v) {
    has_root = ty_graph_value(g, v)->flags & TY_VALUE_FLAG_OUTPUT;
  }
  if (!has_root) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "graph has no output and no state update: it "
                          "computes nothing observable");
  }
  ty_lowered_graph_t *l = calloc(1, sizeof(*l));
  bool *node_live = calloc(nn ? nn : 1, sizeof(bool));
  bool *value_live = calloc(nv ? nv : 1, sizeof(bool));
  ty_status_t s = TY_OK;
  if (!l || !node_live || !value_live) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory lowering a graph");
    goto done;
  }
  s = ty_graph_live_nodes(g, node_live, value_live);
  if (s) goto done;

  uint32_t lv = 0, ln = 0;
  size_t total_dims = 0, total_ids = 0, total_attrs = 0;
  l->index_of = malloc((nv ? nv : 1) * sizeof(uint32_t));
  if (!l->index_of) goto oom;
  l->core_value_count = nv;
  for (uint32_t v = 0; v < nv; ++v) {
    l->index_of[v] = value_live[v] ? lv++ : UINT32_MAX;
    if (value_live[v]) total_dims += ty_graph_value(g, v)->desc.rank;
  }
  for (uint32_t n = 0; n < nn; ++n) {
    if (!node_live[n]) continue;
    const ty_graph_node_t *node = ty_graph_node(g, n);
    ln++;
    total_ids += node->input_count + node->output_count;
    total_attrs += node->attrs.count;
  }
  l->values = calloc(lv ? lv : 1, sizeof(*l->values));
  l->names = calloc(lv ? lv : 1, sizeof(char *));
  l->const_data = calloc(lv ? lv : 1, sizeof(void *));
  l->nodes = calloc(ln ? ln : 1, sizeof(*l->nodes));
  l->ops = calloc(ln ? ln : 1, sizeof(char *));
  l->attr_sets = calloc(ln ? ln : 1, sizeof(*l->attr_sets));
  l->dims = calloc(total_dims ? total_dims : 1, sizeof(int64_t));
  l->ids = calloc(total_ids ? total_ids : 1, sizeof(uint32_t));
  l->attrs = calloc(total_attrs ? total_attrs : 1, sizeof(ty_abi_attr_t));
  uint32_t nu = ty_graph_update_count(g);
  l->updates = calloc(nu ? nu : 1, sizeof(*l->updates));
  l->producer = malloc((lv ? lv : 1) * sizeof(uint32_t));
  if (!l->values || !l->names || !l->const_data || !l->nodes || !l->ops ||
      !l->attr_sets || !l->dims || !l->ids || !l->attrs || !l->updates || !l->producer) {
    goto oom;
  }
  l->abi.struct_size = sizeof(l->abi);
  snprintf(l->levers, sizeof(l->levers), "%s", ty_graph_levers(g));
  l->abi.levers = l->levers;
  l->abi.values = l->values;
  l->abi.nodes = l->nodes;
  l->abi.updates = l->updates;

  for (uint32_t i = 0; i < lv; ++i) l->producer[i] = UINT32_MAX;
  size_t dim_at = 0;
  for (uint32_t v = 0; v < nv; ++v) {
    if (!value_live[v]) continue;
    const ty_graph_value_t *src = ty_graph_value(g, v);
    uint32_t i = l->index_of[v];
    ty_abi_value_t *dst = &l->values[i];
    if (!(l->names[i] = strdup(src->desc.name))) goto oom;
    memcpy(&l->dims[dim_at], src->desc.dims, src->desc.rank * sizeof(int64_t));
    dst->name = l->names[i];
    dst->dtype = src->desc.dtype;
    dst->rank = src->desc.rank;
    dst->dims = &l->dims[dim_at];
    dst->role = src->role;
    dst->flags = src->flags;
    dim_at += src->desc.rank;
    if (src->role == TY_VALUE_CONSTANT) {
      if (!(l->const_data[i] = malloc(src->const_bytes ? src->const_bytes : 1))) goto oom;
      if (src->const_bytes) memcpy(l->const_data[i], src->const_data, src->const_bytes);
      dst->const_data = l->const_data[i];
    }
    l->abi.value_count++;
  }
  size_t id_at = 0, attr_at = 0;
  for (uint32_t n = 0; n < nn; ++n) {
    if (!node_live[n]) continue;
    const ty_graph_node_t *src = ty_graph_node(g, n);
    uint32_t k = l->abi.node_count;
    ty_abi_node_t *dst = &l->nodes[k];
    if (!(l->ops[k] = strdup(src->op))) goto oom;
    dst->op = l->ops[k];
    dst->input_count = src->input_count;
    dst->inputs = &l->ids[id_at];
    for (uint32_t i = 0; i < src->input_count; ++i) {
      l->ids[id_at++] =
          src->inputs[i] == TY_VALUE_NONE ? UINT32_MAX : l->index_of[src->inputs[i]];
    }
    dst->output_count = src->output_count;
    dst->outputs = &l->ids[id_at];
    for (uint32_t o = 0; o < src->output_count; ++o) {
      l->ids[id_at++] = l->index_of[src->outputs[o]];
      l->producer[l->index_of[src->outputs[o]]] = k;
    }
    l->attr_sets[k] = src->attrs;
    dst->attr_count = src->attrs.count;
    dst->attrs = &l->attrs[attr_at];
    ty_attrs_to_abi(&l->attr_sets[k], &l->attrs[attr_at]);
    attr_at += src->attrs.count;
    l->abi.node_count++;
  }
  for (uint32_t u = 0; u < nu; ++u) {
    ty_abi_state_update_t up = ty_graph_update(g, u);
    l->updates[u] = (ty_abi_state_update_t){l->index_of[up.state], l->index_of[up.value]};
  }
  l->abi.update_count = nu;

  ty_sbuf_t text = {0};
  ty_lowered_render_text(l, &text);
  if (text.failed) {
    free(text.data);
    goto oom;
  }
  l->text = text.data;
  if (!ty_sha256_hex(l->text, text.len, l->hash)) goto oom;
  l->abi.hash_hex = l->hash;
  goto done;
oom:
  s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory lowering a graph");
done:
  free(node_live);
  free(value_live);
  if (s) {
    ty_lowered_graph_destroy(l);
    return s;
  }
  *out = l;
  return TY_OK;
}

const ty_abi_graph_t *ty_lowered_graph_abi(const ty_lowered_graph_t *l) { return &l->abi; }
const char *ty_lowered_graph_hash(const ty_lowered_graph_t *l) { return l->hash; }
const char *ty_lowered_graph_text(const ty_lowered_graph_t *l) { return l->text; }
uint32_t ty_lowered_graph_index(const ty_lowered_graph_t *l, ty_value_id_t v) {
  return v < l->core_value_count ? l->index_of[v] : UINT32_MAX;
}
