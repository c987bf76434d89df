/* The first non-finite node of a run (graph/runtime/numerics.h): every node output is
 * exposed, read back in node order and counted; the first one holding a NaN
 * or an infinity is described with its inputs' figures. */
#include "graph/runtime/numerics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/half.h"

ty_status_t ty_graph_expose_all(ty_graph_t *g) {
  for (uint32_t n = 0; n < ty_graph_node_count(g); ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    for (uint32_t k = 0; k < node->output_count; ++k) {
      const ty_graph_value_t *v = ty_graph_value(g, node->outputs[k]);
      char name[64];
      snprintf(name, sizeof(name), "n%u.%u", n, k);
      TY_RETURN_IF_ERROR(
          ty_graph_set_output(g, node->outputs[k], v->desc.name[0] ? v->desc.name : name));
    }
  }
  return TY_OK;
}

static double ty_numerics_at(ty_dtype_t dtype, const void *data, uint64_t i) {
  switch (dtype) {
    case TY_DTYPE_F32: return ((const float *)data)[i];
    case TY_DTYPE_F64: return ((const double *)data)[i];
    case TY_DTYPE_BF16: return ty_bf16_to_f64(((const uint16_t *)data)[i]);
    case TY_DTYPE_F16: return ty_f16_to_f64(((const uint16_t *)data)[i]);
    default: return 0.0;
  }
}

bool ty_numerics_stats(ty_dtype_t dtype, const void *data, uint64_t count,
                       ty_numerics_stats_t *out) {
  memset(out, 0, sizeof(*out));
  out->min = out->max = NAN;
  if (dtype != TY_DTYPE_F32 && dtype != TY_DTYPE_F64 && dtype != TY_DTYPE_BF16 &&
      dtype != TY_DTYPE_F16) {
    return false;
  }
  out->count = (int64_t)count;
  for (uint64_t i = 0; i < count; ++i) {
    double x = ty_numerics_at(dtype, data, i);
    if (isnan(x)) {
      out->nan++;
    } else if (isinf(x)) {
      out->inf++;
    } else {
      if (!(x >= out->min)) out->min = x; /* NAN at first: comparisons fail */
      if (!(x <= out->max)) out->max = x;
    }
  }
  return true;
}

/* Reads float value `v` (by name) and takes its figures. False in *out_read
 * for a value that is not a float or that the session does not hold. */
static ty_status_t ty_numerics_read(ty_session_t *session, const ty_graph_t *g,
                                    ty_value_id_t v, ty_numerics_stats_t *out,
                                    bool *out_read) {
  *out_read = false;
  const ty_graph_value_t *val = ty_graph_value(g, v);
  if (!val->desc.name[0] || !ty_dtype_is_float(val->desc.dtype)) return TY_OK;
  /* a session hands back outputs and states only, not bound inputs */
  if (val->producer == UINT32_MAX && val->role != TY_VALUE_STATE) return TY_OK;
  ty_tensor_desc_t d;
  ty_status_t s = ty_session_value_desc(session, val->desc.name, &d);
  if (s) {
    if (ty_status_code(s) != TY_CODE_NOT_FOUND) return s;
    ty_status_free(s); /* lowering removed it: nothing to read */
    return TY_OK;
  }
  uint64_t n = (uint64_t)ty_tensor_desc_element_count(&d);
  size_t bytes = (size_t)n * ty_dtype_size(d.dtype);
  void *buf = malloc(bytes ? bytes : 1);
  if (!buf) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s", d.name);
  s = ty_session_read(session, val->desc.name, buf, bytes);
  if (!s) *out_read = ty_numerics_stats(d.dtype, buf, n, out);
  free(buf);
  return s;
}

/* A backward node carries no region: the latest region among the forward
 * nodes whose outputs it reads (its forward node's own outputs and inputs;
 * an input from the block before has the lower region). */
static uint32_t ty_numerics_region(const ty_graph_t *g, const ty_graph_node_t *node,
                                   uint32_t forward_nodes, bool *out_derived) {
  *out_derived = false;
  if (node->region) return node->region;
  uint32_t best = 0;
  for (uint32_t i = 0; i < node->input_count; ++i) {
    if (node->inputs[i] == TY_VALUE_NONE) continue;
    uint32_t p = ty_graph_value(g, node->inputs[i])->producer;
    if (p == UINT32_MAX || p >= forward_nodes) continue;
    uint32_t r = ty_graph_node(g, p)->region;
    if (r > best) best = r;
  }
  *out_derived = best != 0;
  return best;
}

ty_status_t ty_numerics_find(ty_session_t *session, const ty_graph_t *g, uint32_t forward_nodes,
                             ty_numerics_finding_t *out) {
  memset(out, 0, sizeof(*out));
  uint32_t nn = ty_graph_node_count(g);
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    out->nodes_checked = n + 1;
    for (uint32_t k = 0; k < node->output_count; ++k) {
      ty_numerics_stats_t st;
      bool read = false;
      TY_RETURN_IF_ERROR(ty_numerics_read(session, g, node->outputs[k], &st, &read));
      if (!read || (st.nan == 0 && st.inf == 0)) continue;
      out->found = true;
      out->node = n;
      snprintf(out->op, sizeof(out->op), "%s", node->op);
      out->output = k;
      out->desc = ty_graph_value(g, node->outputs[k])->desc;
      out->stats = st;
      out->backward = n >= forward_nodes;
      out->region = ty_numerics_region(g, node, forward_nodes, &out->region_derived);
      out->input_total = node->input_count;
      for (uint32_t i = 0; i < node->input_count && out->input_count < TY_NUMERICS_MAX_INPUTS;
           ++i) {
        if (node->inputs[i] == TY_VALUE_NONE) continue;
        const ty_graph_value_t *iv = ty_graph_value(g, node->inputs[i]);
        ty_numerics_input_t *in = &out->inputs[out->input_count++];
        in->desc = iv->desc;
        in->role = iv->role;
        in->producer = iv->producer;
        for (uint32_t u = 0; u < ty_graph_update_count(g); ++u) {
          if (ty_graph_update(g, u).state == node->inputs[i]) in->updated = true;
        }
        TY_RETURN_IF_ERROR(ty_numerics_read(session, g, node->inputs[i], &in->stats, &in->read));
      }
      return TY_OK;
    }
  }
  return TY_OK;
}
