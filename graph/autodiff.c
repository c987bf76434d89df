/* Reverse-mode autodiff: one backward sweep over the nodes in reverse
 * order, accumulating gradients with `add` where a value has several uses. */
#include "graph/autodiff.h"

#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"

static ty_status_t ty_autodiff_emit(void *builder, const char *op,
                                    const ty_value_id_t *inputs,
                                    uint32_t input_count, const ty_attrs_t *attrs,
                                    ty_value_id_t *out_outputs, uint32_t out_count) {
  return ty_graph_add_node((ty_graph_t *)builder, op, inputs, input_count, attrs,
                           out_outputs, out_count);
}

static const ty_tensor_desc_t *ty_autodiff_desc(void *builder, ty_value_id_t value) {
  const ty_graph_value_t *v = ty_graph_value((ty_graph_t *)builder, value);
  return v ? &v->desc : NULL;
}

ty_status_t ty_graph_add_filled(ty_graph_t *g, ty_dtype_t dtype, uint32_t rank,
                                const int64_t *dims, double fill,
                                ty_value_id_t *out_value) {
  ty_value_id_t scalar;
  TY_RETURN_IF_ERROR(ty_graph_add_scalar(g, dtype, fill, &scalar));
  if (rank == 0) {
    *out_value = scalar;
    return TY_OK;
  }
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "shape", dims, rank));
  return ty_graph_add_node1(g, "broadcast_to", &scalar, 1, &attrs, out_value);
}

/* grads[v] += g (emitting an add when v already has a gradient). */
static ty_status_t ty_autodiff_accumulate(ty_graph_t *g, ty_value_id_t *grads,
                                          ty_value_id_t v, ty_value_id_t grad) {
  if (grads[v] == TY_VALUE_NONE) {
    grads[v] = grad;
    return TY_OK;
  }
  ty_value_id_t pair[2] = {grads[v], grad};
  return ty_graph_add_node1(g, "add", pair, 2, NULL, &grads[v]);
}

ty_status_t ty_graph_autodiff(ty_graph_t *g, ty_value_id_t loss, ty_value_id_t seed,
                              const ty_value_id_t *wrt, uint32_t wrt_count,
                              ty_value_id_t *out_grads) {
  uint32_t nv = ty_graph_value_count(g), nn = ty_graph_node_count(g);
  if (loss >= nv || !ty_dtype_is_float(ty_graph_value(g, loss)->desc.dtype)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "autodiff: the loss must be an existing float value");
  }
  for (uint32_t i = 0; i < wrt_count; ++i) {
    out_grads[i] = TY_VALUE_NONE;
    if (wrt[i] >= nv || !ty_dtype_is_float(ty_graph_value(g, wrt[i])->desc.dtype)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "autodiff: value %u to differentiate for is not an "
                            "existing float value",
                            wrt[i]);
    }
  }
  if (seed != TY_VALUE_NONE) {
    const ty_tensor_desc_t *ld = &ty_graph_value(g, loss)->desc;
    const ty_tensor_desc_t *sd = seed < nv ? &ty_graph_value(g, seed)->desc : NULL;
    if (!sd || sd->dtype != ld->dtype || sd->rank != ld->rank ||
        memcmp(sd->dims, ld->dims, ld->rank * sizeof(int64_t)) != 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "autodiff: the loss seed must match the loss's "
                            "dtype and shape");
    }
  }

  bool *depends = calloc(nv, sizeof(bool));
  ty_value_id_t *grads = malloc(nv * sizeof(ty_value_id_t));
  bool *wants = calloc(TY_OP_MAX_INPUTS, sizeof(bool));
  ty_value_id_t *input_grads = malloc(TY_OP_MAX_INPUTS * sizeof(ty_value_id_t));
  ty_value_id_t *output_grads = malloc(TY_OP_MAX_OUTPUTS * sizeof(ty_value_id_t));
  ty_status_t s = TY_OK;
  if (!depends || !grads || !wants || !input_grads || !output_grads) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
    goto done;
  }
  for (uint32_t v = 0; v < nv; ++v) grads[v] = TY_VALUE_NONE;
  for (uint32_t i = 0; i < wrt_count; ++i) depends[wrt[i]] = true;
  /* Forward sweep: which values depend on something we differentiate for. */
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    bool any = false;
    for (uint32_t i = 0; i < node->input_count && !any; ++i) {
      any = node->inputs[i] != TY_VALUE_NONE && depends[node->inputs[i]];
    }
    for (uint32_t o = 0; o < node->output_count; ++o) {
      depends[node->outputs[o]] = depends[node->outputs[o]] || any;
    }
  }
  if (seed == TY_VALUE_NONE) {
    const ty_tensor_desc_t ld = ty_graph_value(g, loss)->desc;
    s = ty_graph_add_filled(g, ld.dtype, ld.rank, ld.dims, 1.0, &grads[loss]);
    if (s) goto done;
  } else {
    grads[loss] = seed;
  }

  for (uint32_t n = nn; n-- > 0;) {
    /* Copy what we need: emitting nodes may move the node array. */
    const ty_graph_node_t *node = ty_graph_node(g, n);
    uint32_t in_count = node->input_count, out_count = node->output_count;
    bool any_out = false, any_want = false;
    for (uint32_t o = 0; o < out_count; ++o) {
      output_grads[o] = grads[node->outputs[o]];
      any_out = any_out || output_grads[o] != TY_VALUE_NONE;
    }
    if (!any_out) continue;
    for (uint32_t i = 0; i < in_count; ++i) {
      ty_value_id_t in = node->inputs[i];
      wants[i] = in != TY_VALUE_NONE && depends[in] &&
                 ty_dtype_is_float(ty_graph_value(g, in)->desc.dtype);
      any_want = any_want || wants[i];
      input_grads[i] = TY_VALUE_NONE;
    }
    if (!any_want) continue;
    const ty_op_def_t *def = ty_op_lookup(node->op);
    if (!def || !def->grad) {
      s = ty_status_make(TY_CODE_UNIMPLEMENTED,
                         "autodiff: op %s (node %u) has no gradient rule, but "
                         "the loss depends on its inputs",
                         node->op, n);
      goto done;
    }
    ty_attrs_t attrs = node->attrs;
    ty_value_id_t *node_inputs = malloc((in_count ? in_count : 1) * sizeof(ty_value_id_t));
    ty_value_id_t *node_outputs = malloc((out_count ? out_count : 1) * sizeof(ty_value_id_t));
    if (!node_inputs || !node_outputs) {
      free(node_inputs);
      free(node_outputs);
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
      goto done;
    }
    memcpy(node_inputs, node->inputs, in_count * sizeof(ty_value_id_t));
    memcpy(node_outputs, node->outputs, out_count * sizeof(ty_value_id_t));
    char op[32];
    memcpy(op, node->op, sizeof(op));
    ty_grad_ctx_t ctx = {
        .op = op,
        .attrs = &attrs,
        .input_count = in_count,
        .inputs = node_inputs,
        .output_count = out_count,
        .outputs = node_outputs,
        .output_grads = output_grads,
        .wants_input_grad = wants,
        .input_grads = input_grads,
        .builder = g,
        .emit = ty_autodiff_emit,
        .desc = ty_autodiff_desc,
    };
    s = def->grad(&ctx);
    for (uint32_t i = 0; i < in_count && !s; ++i) {
      if (input_grads[i] == TY_VALUE_NONE || !wants[i]) continue;
      s = ty_autodiff_accumulate(g, grads, node_inputs[i], input_grads[i]);
    }
    free(node_inputs);
    free(node_outputs);
    if (s) {
      s = ty_status_annotate(s, "autodiff: gradient of node %u (%s)", n, op);
      goto done;
    }
  }
  for (uint32_t i = 0; i < wrt_count && !s; ++i) {
    out_grads[i] = grads[wrt[i]];
    if (out_grads[i] == TY_VALUE_NONE) {
      const ty_tensor_desc_t d = ty_graph_value(g, wrt[i])->desc;
      s = ty_graph_add_filled(g, d.dtype, d.rank, d.dims, 0.0, &out_grads[i]);
    }
  }
done:
  free(depends);
  free(grads);
  free(wants);
  free(input_grads);
  free(output_grads);
  return s;
}
