/* The graph IR builder. Values and nodes live in growable arrays; ids are
 * indices and never change once handed out. */
#include "graph/ir/graph.h"

#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/half.h"

struct ty_graph_t {
  ty_graph_value_t *values;
  uint32_t value_count, value_capacity;
  ty_graph_node_t *nodes;
  uint32_t node_count, node_capacity;
  ty_abi_state_update_t *updates;
  uint32_t update_count, update_capacity;
  ty_tensor_desc_t *infer_scratch; /* TY_OP_MAX_OUTPUTS descriptors, reused */
  uint32_t region, chunk;           /* what new nodes are tagged with */
  char levers[256];                 /* ty_graph_set_levers */
};

static bool ty_graph_grow(void **items, uint32_t *capacity, uint32_t count,
                          size_t elem_size) {
  if (count < *capacity) return true;
  uint32_t new_capacity = *capacity ? *capacity * 2 : 64;
  void *p = realloc(*items, (size_t)new_capacity * elem_size);
  if (!p) return false;
  *items = p;
  *capacity = new_capacity;
  return true;
}

static ty_status_t ty_graph_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory building a graph");
}

const char *ty_value_role_name(ty_value_role_t role) {
  switch (role) {
    case TY_VALUE_INPUT: return "input";
    case TY_VALUE_STATE: return "state";
    case TY_VALUE_INTERMEDIATE: return "value";
    case TY_VALUE_CONSTANT: return "const";
  }
  return "unknown";
}

ty_status_t ty_graph_create(ty_graph_t **out_graph) {
  *out_graph = calloc(1, sizeof(ty_graph_t));
  return *out_graph ? TY_OK : ty_graph_oom();
}

void ty_graph_destroy(ty_graph_t *g) {
  if (!g) return;
  for (uint32_t i = 0; i < g->value_count; ++i) free(g->values[i].const_data);
  for (uint32_t i = 0; i < g->node_count; ++i) {
    free(g->nodes[i].inputs);
    free(g->nodes[i].outputs);
  }
  free(g->values);
  free(g->nodes);
  free(g->updates);
  free(g->infer_scratch);
  free(g);
}

ty_status_t ty_graph_find(const ty_graph_t *g, const char *name,
                          ty_value_id_t *out_value) {
  *out_value = TY_VALUE_NONE;
  if (name && *name) {
    for (uint32_t i = 0; i < g->value_count; ++i) {
      if (strcmp(g->values[i].desc.name, name) == 0) {
        *out_value = i;
        return TY_OK;
      }
    }
  }
  return ty_status_make(TY_CODE_NOT_FOUND, "graph has no value named '%s'",
                        name ? name : "(null)");
}

static ty_status_t ty_graph_check_new_name(const ty_graph_t *g, const char *name) {
  if (!name || !*name) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "a graph value name must not be empty");
  }
  if (strlen(name) >= TY_TENSOR_NAME_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "graph value name '%.40s...' is longer than %d bytes",
                          name, TY_TENSOR_NAME_MAX - 1);
  }
  ty_value_id_t existing;
  ty_status_t s = ty_graph_find(g, name, &existing);
  if (!s) {
    return ty_status_make(TY_CODE_ALREADY_EXISTS,
                          "graph already has a value named '%s'", name);
  }
  ty_status_free(s);
  return TY_OK;
}

static ty_status_t ty_graph_push_value(ty_graph_t *g, const ty_tensor_desc_t *desc,
                                       ty_value_role_t role, uint32_t producer,
                                       uint32_t producer_output,
                                       ty_value_id_t *out_value) {
  if (g->value_count == TY_VALUE_NONE - 1) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "graph has too many values");
  }
  if (!ty_graph_grow((void **)&g->values, &g->value_capacity, g->value_count,
                     sizeof(*g->values))) {
    return ty_graph_oom();
  }
  ty_graph_value_t *v = &g->values[g->value_count];
  memset(v, 0, sizeof(*v));
  v->desc = *desc;
  v->role = role;
  v->producer = producer;
  v->producer_output = producer_output;
  *out_value = g->value_count++;
  return TY_OK;
}

static ty_status_t ty_graph_add_leaf(ty_graph_t *g, const char *name,
                                     ty_value_role_t role, ty_dtype_t dtype,
                                     uint32_t rank, const int64_t *dims,
                                     ty_value_id_t *out_value) {
  *out_value = TY_VALUE_NONE;
  if (role != TY_VALUE_CONSTANT || (name && *name)) {
    TY_RETURN_IF_ERROR(ty_graph_check_new_name(g, name));
  }
  ty_tensor_desc_t desc;
  TY_RETURN_IF_ERROR(ty_tensor_desc_init(dtype, rank, dims, name, &desc));
  return ty_graph_push_value(g, &desc, role, UINT32_MAX, 0, out_value);
}

ty_status_t ty_graph_add_input(ty_graph_t *g, const char *name, ty_dtype_t dtype,
                               uint32_t rank, const int64_t *dims,
                               ty_value_id_t *out_value) {
  return ty_graph_add_leaf(g, name, TY_VALUE_INPUT, dtype, rank, dims, out_value);
}

ty_status_t ty_graph_add_state(ty_graph_t *g, const char *name, ty_dtype_t dtype,
                               uint32_t rank, const int64_t *dims,
                               ty_value_id_t *out_value) {
  return ty_graph_add_leaf(g, name, TY_VALUE_STATE, dtype, rank, dims, out_value);
}

ty_status_t ty_graph_add_constant(ty_graph_t *g, const char *name,
                                  ty_dtype_t dtype, uint32_t rank,
                                  const int64_t *dims, const void *data,
                                  ty_value_id_t *out_value) {
  ty_value_id_t id;
  TY_RETURN_IF_ERROR(
      ty_graph_add_leaf(g, name, TY_VALUE_CONSTANT, dtype, rank, dims, &id));
  ty_graph_value_t *v = &g->values[id];
  size_t bytes = (size_t)ty_tensor_desc_element_count(&v->desc) * ty_dtype_size(dtype);
  v->const_data = malloc(bytes ? bytes : 1);
  if (!v->const_data) {
    g->value_count--; /* drop the half-made value */
    return ty_graph_oom();
  }
  if (bytes) memcpy(v->const_data, data, bytes);
  v->const_bytes = bytes;
  *out_value = id;
  return TY_OK;
}

ty_status_t ty_graph_add_node(ty_graph_t *g, const char *op,
                              const ty_value_id_t *inputs, uint32_t input_count,
                              const ty_attrs_t *attrs,
                              ty_value_id_t *out_outputs, uint32_t output_count) {
  if (!op || strlen(op) >= sizeof(((ty_graph_node_t *)0)->op)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "bad op name");
  }
  if (input_count > TY_OP_MAX_INPUTS) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: too many inputs (%u)",
                          op, input_count);
  }
  const ty_tensor_desc_t **in_descs =
      calloc(input_count ? input_count : 1, sizeof(*in_descs));
  if (!g->infer_scratch) {
    g->infer_scratch = malloc(TY_OP_MAX_OUTPUTS * sizeof(*g->infer_scratch));
  }
  ty_tensor_desc_t *out_descs = g->infer_scratch;
  if (!in_descs || !out_descs) {
    free(in_descs);
    return ty_graph_oom();
  }
  memset(out_descs, 0, TY_OP_MAX_OUTPUTS * sizeof(*out_descs));
  ty_status_t s = TY_OK;
  for (uint32_t i = 0; i < input_count && !s; ++i) {
    if (inputs[i] == TY_VALUE_NONE) continue;
    if (inputs[i] >= g->value_count) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "%s: input %u refers to value %u, but the graph has %u",
                         op, i, inputs[i], g->value_count);
    } else {
      in_descs[i] = &g->values[inputs[i]].desc;
    }
  }
  uint32_t inferred = 0;
  if (!s) s = ty_op_infer(op, in_descs, input_count, attrs, out_descs, &inferred);
  if (!s && inferred != output_count) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "%s makes %u outputs but the caller expects %u", op,
                       inferred, output_count);
  }
  ty_graph_node_t node;
  memset(&node, 0, sizeof(node));
  if (!s) {
    node.inputs = malloc((input_count ? input_count : 1) * sizeof(ty_value_id_t));
    node.outputs = malloc((output_count ? output_count : 1) * sizeof(ty_value_id_t));
    if (!node.inputs || !node.outputs ||
        !ty_graph_grow((void **)&g->nodes, &g->node_capacity, g->node_count,
                       sizeof(*g->nodes))) {
      s = ty_graph_oom();
    }
  }
  uint32_t first_value = g->value_count;
  for (uint32_t i = 0; i < output_count && !s; ++i) {
    out_descs[i].name[0] = '\0';
    s = ty_graph_push_value(g, &out_descs[i], TY_VALUE_INTERMEDIATE,
                            g->node_count, i, &node.outputs[i]);
  }
  free(in_descs);
  if (s) {
    g->value_count = first_value;
    free(node.inputs);
    free(node.outputs);
    return ty_status_annotate(s, "adding node %u (%s)", g->node_count, op);
  }
  memcpy(node.op, op, strlen(op) + 1);
  node.region = g->region;
  node.chunk = g->chunk;
  if (attrs) node.attrs = *attrs;
  node.input_count = input_count;
  node.output_count = output_count;
  if (input_count) memcpy(node.inputs, inputs, input_count * sizeof(*inputs));
  g->nodes[g->node_count++] = node;
  for (uint32_t i = 0; i < output_count; ++i) out_outputs[i] = node.outputs[i];
  return TY_OK;
}

uint32_t ty_graph_set_region(ty_graph_t *g, uint32_t region) {
  uint32_t previous = g->region;
  g->region = region;
  return previous;
}

uint32_t ty_graph_set_chunk(ty_graph_t *g, uint32_t chunk) {
  uint32_t previous = g->chunk;
  g->chunk = chunk;
  return previous;
}

ty_status_t ty_graph_set_memory_class(ty_graph_t *g, ty_value_id_t value,
                                      ty_memory_class_t memory_class) {
  if (value >= g->value_count) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "value %u does not exist (graph has %u values)", value,
                          g->value_count);
  }
  g->values[value].memory_class = (uint8_t)memory_class;
  return TY_OK;
}

ty_status_t ty_graph_mark_host_resident(ty_graph_t *g, ty_value_id_t value) {
  if (value >= g->value_count || g->values[value].role != TY_VALUE_STATE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "only a state value can live in host memory (value %u)", value);
  }
  g->values[value].flags |= TY_VALUE_FLAG_HOST_RESIDENT;
  return TY_OK;
}

ty_status_t ty_graph_set_levers(ty_graph_t *g, const char *levers) {
  if (!levers || strlen(levers) >= sizeof(g->levers) || strchr(levers, '\n')) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "graph levers must be one line under %zu bytes", sizeof(g->levers));
  }
  memcpy(g->levers, levers, strlen(levers) + 1);
  return TY_OK;
}

const char *ty_graph_levers(const ty_graph_t *g) { return g->levers; }

ty_status_t ty_graph_add_node1(ty_graph_t *g, const char *op,
                               const ty_value_id_t *inputs, uint32_t input_count,
                               const ty_attrs_t *attrs, ty_value_id_t *out_output) {
  return ty_graph_add_node(g, op, inputs, input_count, attrs, out_output, 1);
}

static ty_status_t ty_graph_check_value(const ty_graph_t *g, ty_value_id_t v) {
  if (v >= g->value_count) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "value %u does not exist (graph has %u values)", v,
                          g->value_count);
  }
  return TY_OK;
}

ty_status_t ty_graph_set_name(ty_graph_t *g, ty_value_id_t value, const char *name) {
  TY_RETURN_IF_ERROR(ty_graph_check_value(g, value));
  if (name && strcmp(g->values[value].desc.name, name) == 0) return TY_OK;
  TY_RETURN_IF_ERROR(ty_graph_check_new_name(g, name));
  memcpy(g->values[value].desc.name, name, strlen(name) + 1);
  return TY_OK;
}

ty_status_t ty_graph_set_output(ty_graph_t *g, ty_value_id_t value, const char *name) {
  TY_RETURN_IF_ERROR(ty_graph_set_name(g, value, name));
  g->values[value].flags |= TY_VALUE_FLAG_OUTPUT;
  return TY_OK;
}

ty_status_t ty_graph_mark_loss_seed(ty_graph_t *g, ty_value_id_t value) {
  TY_RETURN_IF_ERROR(ty_graph_check_value(g, value));
  const ty_graph_value_t *v = &g->values[value];
  if (v->role != TY_VALUE_INPUT || !ty_dtype_is_float(v->desc.dtype)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "the loss-gradient seed '%s' must be a float input, not a %s %s",
                          v->desc.name, ty_dtype_name(v->desc.dtype),
                          ty_value_role_name(v->role));
  }
  for (uint32_t i = 0; i < g->value_count; ++i) {
    if (i != value && (g->values[i].flags & TY_VALUE_FLAG_LOSS_SEED)) {
      return ty_status_make(TY_CODE_ALREADY_EXISTS,
                            "'%s' is already the graph's loss-gradient seed",
                            g->values[i].desc.name);
    }
  }
  g->values[value].flags |= TY_VALUE_FLAG_LOSS_SEED;
  return TY_OK;
}

ty_status_t ty_graph_set_state_update(ty_graph_t *g, ty_value_id_t state,
                                      ty_value_id_t value) {
  TY_RETURN_IF_ERROR(ty_graph_check_value(g, state));
  TY_RETURN_IF_ERROR(ty_graph_check_value(g, value));
  const ty_graph_value_t *s = &g->values[state], *v = &g->values[value];
  if (s->role != TY_VALUE_STATE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "state update target '%s' is a %s, not a state value",
                          s->desc.name, ty_value_role_name(s->role));
  }
  char a[96], b[96];
  if (s->desc.dtype != v->desc.dtype || s->desc.rank != v->desc.rank ||
      memcmp(s->desc.dims, v->desc.dims, s->desc.rank * sizeof(int64_t)) != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "state '%s' is %s but its update is %s", s->desc.name,
                          ty_tensor_desc_format(&s->desc, a, sizeof(a)),
                          ty_tensor_desc_format(&v->desc, b, sizeof(b)));
  }
  for (uint32_t i = 0; i < g->update_count; ++i) {
    if (g->updates[i].state == state) {
      return ty_status_make(TY_CODE_ALREADY_EXISTS,
                            "state '%s' already has an update", s->desc.name);
    }
  }
  if (!ty_graph_grow((void **)&g->updates, &g->update_capacity, g->update_count,
                     sizeof(*g->updates))) {
    return ty_graph_oom();
  }
  g->updates[g->update_count++] = (ty_abi_state_update_t){state, value};
  return TY_OK;
}

uint32_t ty_graph_value_count(const ty_graph_t *g) { return g->value_count; }
const ty_graph_value_t *ty_graph_value(const ty_graph_t *g, ty_value_id_t v) {
  return v < g->value_count ? &g->values[v] : NULL;
}
uint32_t ty_graph_node_count(const ty_graph_t *g) { return g->node_count; }
const ty_graph_node_t *ty_graph_node(const ty_graph_t *g, uint32_t n) {
  return n < g->node_count ? &g->nodes[n] : NULL;
}
uint32_t ty_graph_update_count(const ty_graph_t *g) { return g->update_count; }
ty_abi_state_update_t ty_graph_update(const ty_graph_t *g, uint32_t i) {
  return g->updates[i];
}

ty_status_t ty_graph_add_scalar(ty_graph_t *g, ty_dtype_t dtype, double value,
                                ty_value_id_t *out_value) {
  unsigned char bytes[8];
  switch (dtype) {
    case TY_DTYPE_F32: {
      float f = (float)value;
      memcpy(bytes, &f, sizeof(f));
      break;
    }
    case TY_DTYPE_F64: memcpy(bytes, &value, sizeof(value)); break;
    case TY_DTYPE_BF16: {
      uint16_t h = ty_f64_to_bf16(value);
      memcpy(bytes, &h, sizeof(h));
      break;
    }
    case TY_DTYPE_F16: {
      uint16_t h = ty_f64_to_f16(value);
      memcpy(bytes, &h, sizeof(h));
      break;
    }
    case TY_DTYPE_I32: {
      int32_t i = (int32_t)value;
      memcpy(bytes, &i, sizeof(i));
      break;
    }
    case TY_DTYPE_I64: {
      int64_t i = (int64_t)value;
      memcpy(bytes, &i, sizeof(i));
      break;
    }
    default:
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "cannot make a scalar constant of dtype %s",
                            ty_dtype_name(dtype));
  }
  return ty_graph_add_constant(g, NULL, dtype, 0, NULL, bytes, out_value);
}
