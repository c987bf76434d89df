/* Deep copy of ABI graphs and small accessors for plugins. One allocation
 * per array; strings are copied into a single pool. */
#include "hal/abi_graph.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ty_desc_dtype_size(ty_dtype_t dtype) {
  switch (dtype) {
    case TY_DTYPE_F32: case TY_DTYPE_I32: return 4;
    case TY_DTYPE_BF16: case TY_DTYPE_F16: return 2;
    case TY_DTYPE_F64: case TY_DTYPE_I64: return 8;
    case TY_DTYPE_U8: return 1;
    default: return 0;
  }
}

int64_t ty_desc_value_elements(const ty_abi_value_t *v) {
  int64_t n = 1;
  for (uint32_t i = 0; i < v->rank; ++i) n *= v->dims[i];
  return n;
}

/* Bump allocator over one block so the copy is freed with few calls. */
typedef struct {
  char *base;
  size_t used, cap;
} ty_pool_t;

static void *ty_pool_take(ty_pool_t *p, size_t bytes) {
  size_t aligned = (p->used + 15) & ~(size_t)15;
  if (aligned + bytes > p->cap) return NULL;
  p->used = aligned + bytes;
  return p->base + aligned;
}

static char *ty_pool_strdup(ty_pool_t *p, const char *s) {
  if (!s) s = "";
  size_t n = strlen(s) + 1;
  char *d = ty_pool_take(p, n);
  if (d) memcpy(d, s, n);
  return d;
}

static size_t ty_owned_graph_size(const ty_abi_graph_t *g) {
  size_t size = 0;
#define TY_ADD(bytes) (size += (((bytes) + 15) & ~(size_t)15) + 16)
  TY_ADD(g->value_count * sizeof(ty_abi_value_t));
  TY_ADD(g->node_count * sizeof(ty_abi_node_t));
  TY_ADD(g->update_count * sizeof(ty_abi_state_update_t));
  for (uint32_t i = 0; i < g->value_count; ++i) {
    const ty_abi_value_t *v = &g->values[i];
    TY_ADD(strlen(v->name ? v->name : "") + 1);
    TY_ADD(v->rank * sizeof(int64_t));
    if (v->role == TY_VALUE_CONSTANT) {
      TY_ADD((size_t)ty_desc_value_elements(v) * ty_desc_dtype_size(v->dtype));
    }
  }
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    TY_ADD(strlen(node->op) + 1);
    TY_ADD((node->input_count + node->output_count) * sizeof(uint32_t));
    TY_ADD(node->attr_count * sizeof(ty_abi_attr_t));
    for (uint32_t a = 0; a < node->attr_count; ++a) {
      const ty_abi_attr_t *attr = &node->attrs[a];
      TY_ADD(strlen(attr->name) + 1);
      if (attr->kind == TY_ATTR_STRING) TY_ADD(strlen(attr->s ? attr->s : "") + 1);
      if (attr->kind == TY_ATTR_INTS) TY_ADD(attr->count * sizeof(int64_t));
      if (attr->kind == TY_ATTR_FLOATS) TY_ADD(attr->count * sizeof(double));
    }
  }
#undef TY_ADD
  return size + 64;
}

ty_owned_graph_t *ty_owned_graph_copy(const ty_abi_graph_t *src) {
  ty_owned_graph_t *o = calloc(1, sizeof(*o));
  if (!o) return NULL;
  ty_pool_t pool = {0};
  pool.cap = ty_owned_graph_size(src);
  pool.base = malloc(pool.cap);
  o->value_bytes = calloc(src->value_count ? src->value_count : 1, sizeof(uint64_t));
  o->producer = malloc((src->value_count ? src->value_count : 1) * sizeof(uint32_t));
  if (!pool.base || !o->value_bytes || !o->producer) goto fail;
  ty_abi_value_t *values = ty_pool_take(&pool, src->value_count * sizeof(*values) + 1);
  ty_abi_node_t *nodes = ty_pool_take(&pool, src->node_count * sizeof(*nodes) + 1);
  ty_abi_state_update_t *updates =
      ty_pool_take(&pool, src->update_count * sizeof(*updates) + 1);
  if (!values || !nodes || !updates) goto fail;
  for (uint32_t i = 0; i < src->value_count; ++i) {
    const ty_abi_value_t *v = &src->values[i];
    values[i] = *v;
    values[i].name = ty_pool_strdup(&pool, v->name);
    int64_t *dims = ty_pool_take(&pool, v->rank * sizeof(int64_t) + 1);
    if (!values[i].name || !dims) goto fail;
    if (v->rank) memcpy(dims, v->dims, v->rank * sizeof(int64_t));
    values[i].dims = dims;
    o->value_bytes[i] = (uint64_t)ty_desc_value_elements(v) * ty_desc_dtype_size(v->dtype);
    o->producer[i] = UINT32_MAX;
    if (v->role == TY_VALUE_CONSTANT) {
      void *data = ty_pool_take(&pool, o->value_bytes[i] + 1);
      if (!data) goto fail;
      if (o->value_bytes[i]) memcpy(data, v->const_data, o->value_bytes[i]);
      values[i].const_data = data;
    } else {
      values[i].const_data = NULL;
    }
  }
  for (uint32_t n = 0; n < src->node_count; ++n) {
    const ty_abi_node_t *node = &src->nodes[n];
    nodes[n] = *node;
    nodes[n].op = ty_pool_strdup(&pool, node->op);
    uint32_t *ids = ty_pool_take(
        &pool, (node->input_count + node->output_count) * sizeof(uint32_t) + 1);
    ty_abi_attr_t *attrs = ty_pool_take(&pool, node->attr_count * sizeof(*attrs) + 1);
    if (!nodes[n].op || !ids || !attrs) goto fail;
    memcpy(ids, node->inputs, node->input_count * sizeof(uint32_t));
    memcpy(ids + node->input_count, node->outputs, node->output_count * sizeof(uint32_t));
    nodes[n].inputs = ids;
    nodes[n].outputs = ids + node->input_count;
    for (uint32_t k = 0; k < node->output_count; ++k) o->producer[node->outputs[k]] = n;
    for (uint32_t a = 0; a < node->attr_count; ++a) {
      const ty_abi_attr_t *attr = &node->attrs[a];
      attrs[a] = *attr;
      attrs[a].name = ty_pool_strdup(&pool, attr->name);
      attrs[a].s = NULL;
      attrs[a].ints = NULL;
      attrs[a].floats = NULL;
      if (!attrs[a].name) goto fail;
      if (attr->kind == TY_ATTR_STRING && !(attrs[a].s = ty_pool_strdup(&pool, attr->s))) goto fail;
      if (attr->kind == TY_ATTR_INTS) {
        int64_t *ints = ty_pool_take(&pool, attr->count * sizeof(int64_t) + 1);
        if (!ints) goto fail;
        if (attr->count) memcpy(ints, attr->ints, attr->count * sizeof(int64_t));
        attrs[a].ints = ints;
      }
      if (attr->kind == TY_ATTR_FLOATS) {
        double *floats = ty_pool_take(&pool, attr->count * sizeof(double) + 1);
        if (!floats) goto fail;
        if (attr->count) memcpy(floats, attr->floats, attr->count * sizeof(double));
        attrs[a].floats = floats;
      }
    }
    nodes[n].attrs = attrs;
  }
  if (src->update_count) memcpy(updates, src->updates, src->update_count * sizeof(*updates));
  /* A host of an older minor wrote a shorter struct: copy what it wrote. */
  memcpy(&o->graph, src, src->struct_size < sizeof(o->graph) ? src->struct_size
                                                             : sizeof(o->graph));
  o->graph.struct_size = sizeof(o->graph);
  const char *levers = TY_ABI_HAS_FIELD(src, ty_abi_graph_t, levers) ? src->levers : NULL;
  snprintf(o->levers, sizeof(o->levers), "%s", levers ? levers : "");
  o->graph.levers = o->levers;
  o->graph.values = values;
  o->graph.nodes = nodes;
  o->graph.updates = updates;
  if (src->hash_hex) {
    strncpy(o->hash_hex, src->hash_hex, 64);
    o->hash_hex[64] = '\0';
  }
  o->graph.hash_hex = o->hash_hex;
  /* Keep the pool alive through the values pointer's block. */
  o->pool_base_ = pool.base;
  return o;
fail:
  free(pool.base);
  free(o->value_bytes);
  free(o->producer);
  free(o);
  return NULL;
}

void ty_owned_graph_free(ty_owned_graph_t *o) {
  if (!o) return;
  free(o->pool_base_);
  free(o->value_bytes);
  free(o->producer);
  free(o);
}

const ty_abi_attr_t *ty_desc_node_attr(const ty_abi_node_t *node, const char *name) {
  for (uint32_t a = 0; a < node->attr_count; ++a) {
    if (strcmp(node->attrs[a].name, name) == 0) return &node->attrs[a];
  }
  return NULL;
}

int64_t ty_desc_node_attr_int(const ty_abi_node_t *node, const char *name,
                             int64_t default_value) {
  const ty_abi_attr_t *a = ty_desc_node_attr(node, name);
  return a && a->kind == TY_ATTR_INT ? a->i : default_value;
}

double ty_desc_node_attr_float(const ty_abi_node_t *node, const char *name,
                              double default_value) {
  const ty_abi_attr_t *a = ty_desc_node_attr(node, name);
  if (!a) return default_value;
  if (a->kind == TY_ATTR_FLOAT) return a->f;
  if (a->kind == TY_ATTR_INT) return (double)a->i;
  return default_value;
}

const char *ty_desc_node_attr_string(const ty_abi_node_t *node, const char *name,
                                    const char *default_value) {
  const ty_abi_attr_t *a = ty_desc_node_attr(node, name);
  return a && a->kind == TY_ATTR_STRING ? a->s : default_value;
}

bool ty_desc_graph_lever(const ty_abi_graph_t *g, const char *key, const char *off,
                        char *out_value, size_t capacity) {
  const char *levers = TY_ABI_HAS_FIELD(g, ty_abi_graph_t, levers) ? g->levers : NULL;
  size_t klen = strlen(key);
  for (const char *p = levers ? levers : ""; *p;) {
    while (*p == ' ') ++p;
    const char *end = strchr(p, ' ');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=' &&
        !(off && strlen(off) == len - klen - 1 && strncmp(p + klen + 1, off, len - klen - 1) == 0)) {
      if (out_value && capacity) snprintf(out_value, capacity, "%.*s", (int)len, p);
      return true;
    }
    p += len;
  }
  return false;
}

uint64_t ty_desc_node_workspace_bytes(const ty_abi_graph_t *g, const ty_abi_node_t *node) {
  bool forward = strcmp(node->op, "linear_cross_entropy") == 0;
  if (!forward && strcmp(node->op, "linear_cross_entropy_backward") != 0) return 0;
  uint32_t at = forward ? 0 : 1;
  if (node->input_count < at + 2) return 0;
  const ty_abi_value_t *h = &g->values[node->inputs[at]], *w = &g->values[node->inputs[at + 1]];
  if (h->rank < 1 || w->rank != 2) return 0;
  uint64_t channels = (uint64_t)w->dims[1], vocab = (uint64_t)w->dims[0];
  uint64_t rows = channels ? (uint64_t)ty_desc_value_elements(h) / channels : 0;
  uint64_t chunk = (uint64_t)ty_desc_node_attr_int(node, "chunk", 0);
  if (chunk == 0 || chunk > rows) chunk = rows ? rows : 1;
  uint64_t floats = chunk * vocab;
  if (h->dtype != TY_DTYPE_F32) floats += rows * channels + (forward ? 0 : chunk * channels);
  if (w->dtype != TY_DTYPE_F32) floats += vocab * channels * (forward ? 1 : 2);
  return floats * sizeof(float);
}

static const char *ty_desc_dtype_label(ty_dtype_t d) {
  static const char *const names[] = {"invalid", "f32", "bf16", "f16", "f64",
                                      "i32",     "i64", "u8"};
  return (uint32_t)d < TY_DTYPE_COUNT_ ? names[d] : "?";
}

static bool ty_desc_is_float(ty_dtype_t d) {
  return d == TY_DTYPE_F32 || d == TY_DTYPE_BF16 || d == TY_DTYPE_F16 || d == TY_DTYPE_F64;
}

bool ty_desc_node_operands_ok(const ty_abi_graph_t *g, const ty_abi_node_t *node,
                             ty_desc_accept_t accept, const char *backend, char *reason,
                             size_t capacity) {
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    uint32_t v = i < node->input_count ? node->inputs[i] : node->outputs[i - node->input_count];
    if (v == UINT32_MAX) continue;
    ty_dtype_t d = g->values[v].dtype;
    if (g->values[v].rank > 8) {
      snprintf(reason, capacity, "rank %u > 8", g->values[v].rank);
      return false;
    }
    if (accept == TY_DESC_ACCEPT_COMPUTE &&
        !(d == TY_DTYPE_F32 || d == TY_DTYPE_BF16 || d == TY_DTYPE_F16 || d == TY_DTYPE_I32 ||
          d == TY_DTYPE_I64)) {
      snprintf(reason, capacity,
               "%s operand %u is %s; %s computes in f32 from f32/bf16/f16 storage "
               "(f64 only moves and casts)",
               node->op, i, ty_desc_dtype_label(d), backend);
      return false;
    }
    if (ty_desc_dtype_size(d) == 0) {
      snprintf(reason, capacity, "invalid dtype of operand %u", i);
      return false;
    }
  }
  if (accept == TY_DESC_ACCEPT_CAST) {
    ty_dtype_t from = g->values[node->inputs[0]].dtype, to = g->values[node->outputs[0]].dtype;
    bool ints = (from == TY_DTYPE_I32 || from == TY_DTYPE_I64) &&
                (to == TY_DTYPE_I32 || to == TY_DTYPE_I64);
    if (from != to && !(ty_desc_is_float(from) && ty_desc_is_float(to)) && !ints) {
      snprintf(reason, capacity, "cast %s -> %s is not in op set v1", ty_desc_dtype_label(from),
               ty_desc_dtype_label(to));
      return false;
    }
  }
  return true;
}
