/* Reverse-mode autodiff: one backward sweep over the nodes in reverse
 * order, accumulating gradients with `add` where a value has several uses. */
#include "graph/ir/autodiff.h"

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

const char *ty_recompute_name(ty_recompute_t r) {
  return r == TY_RECOMPUTE_LAYER ? "layer" : r == TY_RECOMPUTE_ATTENTION ? "attention" : "none";
}

ty_status_t ty_recompute_parse(const char *text, ty_recompute_t *out) {
  for (int r = TY_RECOMPUTE_NONE; r <= TY_RECOMPUTE_LAYER; ++r) {
    if (strcmp(text, ty_recompute_name((ty_recompute_t)r)) == 0) {
      *out = (ty_recompute_t)r;
      return TY_OK;
    }
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "recompute '%s': expected none, attention or layer", text);
}

/* The recompute segment of a node (UINT32_MAX: none). */
static uint32_t ty_autodiff_segment(ty_recompute_t mode, uint32_t region) {
  if (region == 0 || mode == TY_RECOMPUTE_NONE) return UINT32_MAX;
  if (mode == TY_RECOMPUTE_ATTENTION && TY_REGION_PART(region) != TY_REGION_ATTENTION) {
    return UINT32_MAX;
  }
  return TY_REGION_LAYER(region);
}

/* A value that only slices read, and that they tile along one axis (the
 * chunked MLP's input, GPT-2's c_attn weight and bias cut into q, k and v,
 * llm.c): its gradient is the concat of the slices' gradients, emitted once
 * the sweep is past its first reader, instead of a zero-padded full-size
 * slice_backward per piece summed with adds (K full-size writes and three
 * full-size buffers live per add). */
typedef struct {
  ty_value_id_t value;
  uint32_t axis, pieces;
  uint32_t first_reader;  /* the lowest node index among the slices */
  uint32_t *nodes;        /* per piece, in order along the axis: its slice */
  ty_value_id_t *grads;   /* per piece: its gradient so far, or NONE */
} ty_sweep_tile_t;

/* State of one backward sweep. */
typedef struct {
  ty_graph_t *g;
  uint32_t nv, nn;
  const ty_autodiff_options_t *opt;
  bool *depends;
  ty_value_id_t *grads;
  bool *wants;
  ty_value_id_t *input_grads, *output_grads;
  uint32_t *segment;     /* per original node */
  bool *recomputed;      /* per segment */
  ty_value_id_t *remap;  /* original value -> its recomputed copy, or NONE */
  bool *pending;         /* per original value: left out of its segment's
                            recompute (it depends on a chunk not yet copied) */
  bool *copied;          /* per original node: a chunk node whose copy exists */
  ty_sweep_tile_t *tiles;
  uint32_t tile_count;
  uint32_t *tile_slot;   /* per original node: its piece of tile tile_of_node, or
                            UINT32_MAX (not a tiling slice) */
  uint32_t *tile_of_node;
} ty_sweep_t;

static ty_value_id_t ty_sweep_map(const ty_sweep_t *w, ty_value_id_t v) {
  return w->remap && v != TY_VALUE_NONE && v < w->nv && w->remap[v] != TY_VALUE_NONE ? w->remap[v]
                                                                                  : v;
}

/* Appends copies of segment `seg`'s forward nodes, in forward order.
 * chunk 0: the nodes of no chunk, less those that read what a chunk makes
 * (their outputs are left pending: a gradient rule that reads one reads
 * the forward's value); chunk c > 0: the nodes of chunk c, just before its
 * backward, so one chunk's intermediates are live at a time. */
static ty_status_t ty_sweep_recompute(ty_sweep_t *w, uint32_t seg, uint32_t chunk) {
  ty_value_id_t ins[TY_OP_MAX_INPUTS > 64 ? 64 : TY_OP_MAX_INPUTS];
  ty_value_id_t outs[16];
  uint32_t saved_region = ty_graph_set_region(w->g, 0);
  uint32_t saved_chunk = ty_graph_set_chunk(w->g, 0);
  ty_status_t s = TY_OK;
  for (uint32_t m = 0; m < w->nn && !s; ++m) {
    if (w->segment[m] != seg) continue;
    const ty_graph_node_t *node = ty_graph_node(w->g, m);
    if (node->chunk != chunk) {
      for (uint32_t o = 0; chunk == 0 && o < node->output_count; ++o) {
        w->pending[node->outputs[o]] = true;
      }
      continue;
    }
    bool skip = false;
    for (uint32_t i = 0; chunk == 0 && i < node->input_count; ++i) {
      skip = skip || (node->inputs[i] != TY_VALUE_NONE && w->pending[node->inputs[i]]);
    }
    if (skip) {
      for (uint32_t o = 0; o < node->output_count; ++o) w->pending[node->outputs[o]] = true;
      continue;
    }
    if (chunk) w->copied[m] = true;
    if (node->input_count > 64 || node->output_count > 16) {
      s = ty_status_make(TY_CODE_UNIMPLEMENTED,
                         "recompute: node %u (%s) has too many operands to recompute", m,
                         node->op);
      break;
    }
    char op[32];
    memcpy(op, node->op, sizeof(op));
    ty_attrs_t attrs = node->attrs;
    uint32_t in_count = node->input_count, out_count = node->output_count;
    ty_value_id_t orig_out[16];
    for (uint32_t i = 0; i < in_count; ++i) ins[i] = ty_sweep_map(w, node->inputs[i]);
    memcpy(orig_out, node->outputs, out_count * sizeof(ty_value_id_t));
    s = ty_graph_add_node(w->g, op, ins, in_count, &attrs, outs, out_count);
    for (uint32_t o = 0; o < out_count && !s; ++o) w->remap[orig_out[o]] = outs[o];
    if (s) s = ty_status_annotate(s, "recompute: copying node %u (%s)", m, op);
  }
  ty_graph_set_region(w->g, saved_region);
  ty_graph_set_chunk(w->g, saved_chunk);
  if (chunk == 0) w->recomputed[seg] = true;
  return s;
}

/* Whether op's gradient rule reads its operand i (given which operands
 * want gradients): the ops that take cast weights in bf16-mixed models.
 * Only these are re-cast, so no copy is made that nothing reads. */
static bool ty_sweep_rule_reads(const char *op, uint32_t i, const bool *wants) {
  if (strcmp(op, "matmul") == 0) return i < 2 && wants[1 - i];
  if (strcmp(op, "linear_cross_entropy") == 0) return i == 1;
  return false;
}

/* With recast_states: when v is a cast of a STATE value to a narrower
 * dtype and has no copy yet, emits one (see autodiff.h). */
static ty_status_t ty_sweep_recast(ty_sweep_t *w, ty_value_id_t v) {
  if (v == TY_VALUE_NONE || v >= w->nv || w->remap[v] != TY_VALUE_NONE) return TY_OK;
  const ty_graph_value_t *val = ty_graph_value(w->g, v);
  if (val->producer == UINT32_MAX) return TY_OK;
  const ty_graph_node_t *p = ty_graph_node(w->g, val->producer);
  if (strcmp(p->op, "cast") != 0 || p->input_count != 1 || p->output_count != 1) return TY_OK;
  ty_value_id_t src = p->inputs[0];
  const ty_graph_value_t *sv = ty_graph_value(w->g, src);
  if (sv->role != TY_VALUE_STATE ||
      ty_dtype_size(val->desc.dtype) >= ty_dtype_size(sv->desc.dtype)) {
    return TY_OK;
  }
  ty_attrs_t attrs = p->attrs;
  ty_value_id_t out = TY_VALUE_NONE;
  uint32_t saved_region = ty_graph_set_region(w->g, 0);
  ty_status_t s = ty_graph_add_node(w->g, "cast", &src, 1, &attrs, &out, 1);
  ty_graph_set_region(w->g, saved_region);
  if (s) return ty_status_annotate(s, "autodiff: re-casting value %u", v);
  w->remap[v] = out;
  return TY_OK;
}

/* The backward of original node n. */
static ty_status_t ty_sweep_node(ty_sweep_t *w, uint32_t n) {
  ty_graph_t *g = w->g;
  const ty_graph_node_t *node = ty_graph_node(g, n);
  uint32_t in_count = node->input_count, out_count = node->output_count;
  bool any_out = false, any_want = false;
  for (uint32_t o = 0; o < out_count; ++o) {
    w->output_grads[o] = w->grads[node->outputs[o]];
    any_out = any_out || w->output_grads[o] != TY_VALUE_NONE;
  }
  if (!any_out) return TY_OK;
  for (uint32_t i = 0; i < in_count; ++i) {
    ty_value_id_t in = node->inputs[i];
    w->wants[i] = in != TY_VALUE_NONE && w->depends[in] &&
                  ty_dtype_is_float(ty_graph_value(g, in)->desc.dtype);
    any_want = any_want || w->wants[i];
    w->input_grads[i] = TY_VALUE_NONE;
  }
  if (!any_want) return TY_OK;
  if (w->tile_slot && w->tile_slot[n] != UINT32_MAX) {
    /* a piece of a tiled value: kept for its concat (ty_sweep_tile_done) */
    w->tiles[w->tile_of_node[n]].grads[w->tile_slot[n]] = w->output_grads[0];
    return TY_OK;
  }
  const ty_op_def_t *def = ty_op_lookup(node->op);
  if (!def || !def->grad) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "autodiff: op %s (node %u) has no gradient rule, but "
                          "the loss depends on its inputs",
                          node->op, n);
  }
  uint32_t seg = w->segment ? w->segment[n] : UINT32_MAX;
  if (seg != UINT32_MAX && !w->recomputed[seg]) {
    TY_RETURN_IF_ERROR(ty_sweep_recompute(w, seg, 0));
    node = ty_graph_node(g, n); /* the node array may have moved */
  }
  if (seg != UINT32_MAX && node->chunk != 0 && !w->copied[n]) {
    TY_RETURN_IF_ERROR(ty_sweep_recompute(w, seg, node->chunk));
    node = ty_graph_node(g, n);
  }
  /* Copy what we need: emitting nodes may move the node array. The rule
   * sees the recomputed copies of its operands; gradients stay keyed by the
   * original values. */
  ty_attrs_t attrs = node->attrs;
  ty_value_id_t *orig_inputs = malloc((in_count ? in_count : 1) * sizeof(ty_value_id_t));
  ty_value_id_t *node_inputs = malloc((in_count ? in_count : 1) * sizeof(ty_value_id_t));
  ty_value_id_t *node_outputs = malloc((out_count ? out_count : 1) * sizeof(ty_value_id_t));
  ty_status_t s = TY_OK;
  if (!orig_inputs || !node_inputs || !node_outputs) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
  }
  char op[32];
  memcpy(op, node->op, sizeof(op));
  for (uint32_t i = 0; i < in_count && !s; ++i) orig_inputs[i] = node->inputs[i];
  for (uint32_t o = 0; o < out_count && !s; ++o) node_outputs[o] = ty_sweep_map(w, node->outputs[o]);
  node = NULL; /* re-casting below may move the node array */
  for (uint32_t i = 0; i < in_count && !s; ++i) {
    if (w->opt->recast_states && ty_sweep_rule_reads(op, i, w->wants)) {
      s = ty_sweep_recast(w, orig_inputs[i]);
    }
    node_inputs[i] = ty_sweep_map(w, orig_inputs[i]);
  }
  if (!s) {
    ty_grad_ctx_t ctx = {
        .op = op,
        .attrs = &attrs,
        .input_count = in_count,
        .inputs = node_inputs,
        .output_count = out_count,
        .outputs = node_outputs,
        .output_grads = w->output_grads,
        .wants_input_grad = w->wants,
        .input_grads = w->input_grads,
        .builder = g,
        .emit = ty_autodiff_emit,
        .desc = ty_autodiff_desc,
    };
    s = def->grad(&ctx);
  }
  for (uint32_t i = 0; i < in_count && !s; ++i) {
    if (w->input_grads[i] == TY_VALUE_NONE || !w->wants[i]) continue;
    s = ty_autodiff_accumulate(g, w->grads, orig_inputs[i], w->input_grads[i]);
  }
  free(orig_inputs);
  free(node_inputs);
  free(node_outputs);
  return s ? ty_status_annotate(s, "autodiff: gradient of node %u (%s)", n, op) : TY_OK;
}

/* Whether slice node `node` keeps every axis of `d` whole but one; that
 * axis (any, for a whole slice) and its start. */
static bool ty_sweep_slice_axis(const ty_graph_node_t *node, const ty_tensor_desc_t *d,
                                uint32_t *out_axis, int64_t *out_start) {
  const ty_attr_t *st = ty_attrs_find(&node->attrs, "starts");
  const ty_attr_t *sz = ty_attrs_find(&node->attrs, "sizes");
  if (!st || !sz || st->count != d->rank || sz->count != d->rank) return false;
  uint32_t axis = UINT32_MAX;
  for (uint32_t a = 0; a < d->rank; ++a) {
    if (st->ints[a] == 0 && sz->ints[a] == d->dims[a]) continue;
    if (axis != UINT32_MAX) return false;
    axis = a;
  }
  *out_axis = axis == UINT32_MAX ? 0 : axis;
  *out_start = st->ints[*out_axis];
  return true;
}

/* Finds the tiled values (ty_sweep_tile_t): those whose every reader is a
 * slice, all along one axis, covering it exactly once. */
static ty_status_t ty_sweep_find_tiles(ty_sweep_t *w) {
  ty_graph_t *g = w->g;
  uint32_t *readers = calloc(w->nv, sizeof(uint32_t)), *sliced = calloc(w->nv, sizeof(uint32_t));
  w->tile_slot = malloc(w->nn * sizeof(uint32_t));
  w->tile_of_node = malloc(w->nn * sizeof(uint32_t));
  ty_status_t s = TY_OK;
  if (!readers || !sliced || !w->tile_slot || !w->tile_of_node) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
  }
  for (uint32_t n = 0; n < w->nn && !s; ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    w->tile_slot[n] = w->tile_of_node[n] = UINT32_MAX;
    for (uint32_t i = 0; i < node->input_count; ++i) {
      if (node->inputs[i] == TY_VALUE_NONE) continue;
      readers[node->inputs[i]]++;
      if (strcmp(node->op, "slice") == 0) sliced[node->inputs[i]]++;
    }
  }
  uint32_t count = 0;
  for (uint32_t v = 0; v < w->nv && !s; ++v) count += readers[v] && readers[v] == sliced[v];
  if (!s && count) {
    w->tiles = calloc(count, sizeof(ty_sweep_tile_t));
    if (!w->tiles) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
  }
  for (uint32_t v = 0; v < w->nv && !s; ++v) {
    if (!readers[v] || readers[v] != sliced[v]) continue;
    const ty_tensor_desc_t *d = &ty_graph_value(g, v)->desc;
    ty_sweep_tile_t *t = &w->tiles[w->tile_count];
    t->value = v;
    t->pieces = readers[v];
    t->first_reader = UINT32_MAX;
    t->nodes = malloc(t->pieces * sizeof(uint32_t));
    t->grads = malloc(t->pieces * sizeof(ty_value_id_t));
    int64_t *start = malloc(t->pieces * sizeof(int64_t));
    int64_t *size = malloc(t->pieces * sizeof(int64_t));
    if (!t->nodes || !t->grads || !start || !size) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
    }
    /* The pieces in order of their start (insertion: a few dozen). */
    uint32_t k = 0;
    bool ok = !s;
    for (uint32_t n = 0; n < w->nn && ok; ++n) {
      const ty_graph_node_t *node = ty_graph_node(g, n);
      if (strcmp(node->op, "slice") != 0 || node->input_count != 1 || node->inputs[0] != v)
        continue;
      uint32_t axis = 0;
      int64_t st = 0;
      ok = ty_sweep_slice_axis(node, d, &axis, &st);
      if (k == 0) t->axis = axis;
      ok = ok && (axis == t->axis || d->rank == 0);
      if (t->first_reader == UINT32_MAX) t->first_reader = n;
      uint32_t j = k++;
      for (; ok && j > 0 && start[j - 1] > st; --j) {
        start[j] = start[j - 1];
        size[j] = size[j - 1];
        t->nodes[j] = t->nodes[j - 1];
      }
      if (ok) {
        start[j] = st;
        size[j] = ty_graph_value(g, node->outputs[0])->desc.dims[t->axis];
        t->nodes[j] = n;
      }
    }
    int64_t end = 0;
    for (uint32_t j = 0; ok && j < k; ++j) {
      ok = start[j] == end;
      end += size[j];
    }
    ok = ok && k == t->pieces && d->rank > 0 && end == d->dims[t->axis];
    free(start);
    free(size);
    if (s || !ok) {
      free(t->nodes);
      free(t->grads);
      memset(t, 0, sizeof(*t));
      continue;
    }
    for (uint32_t j = 0; j < t->pieces; ++j) {
      t->grads[j] = TY_VALUE_NONE;
      w->tile_slot[t->nodes[j]] = j;
      w->tile_of_node[t->nodes[j]] = w->tile_count;
    }
    w->tile_count++;
  }
  free(readers);
  free(sliced);
  return s;
}

/* After the sweep has passed node n: the gradient of each tiled value
 * whose first reader n is, as one concat of its pieces' (zeros for a piece
 * the loss does not reach). */
static ty_status_t ty_sweep_tile_done(ty_sweep_t *w, uint32_t n) {
  for (uint32_t i = 0; i < w->tile_count; ++i) {
    ty_sweep_tile_t *t = &w->tiles[i];
    if (t->first_reader != n) continue;
    bool any = false;
    for (uint32_t j = 0; j < t->pieces; ++j) any = any || t->grads[j] != TY_VALUE_NONE;
    if (!any) continue;
    for (uint32_t j = 0; j < t->pieces; ++j) {
      if (t->grads[j] != TY_VALUE_NONE) continue;
      const ty_graph_node_t *node = ty_graph_node(w->g, t->nodes[j]);
      const ty_tensor_desc_t d = ty_graph_value(w->g, node->outputs[0])->desc;
      TY_RETURN_IF_ERROR(ty_graph_add_filled(w->g, d.dtype, d.rank, d.dims, 0.0, &t->grads[j]));
    }
    ty_attrs_t a = TY_ATTRS_EMPTY;
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "axis", t->axis));
    ty_value_id_t grad = t->grads[0];
    if (t->pieces > 1) {
      TY_RETURN_IF_ERROR(ty_graph_add_node1(w->g, "concat", t->grads, t->pieces, &a, &grad));
    }
    TY_RETURN_IF_ERROR(ty_autodiff_accumulate(w->g, w->grads, t->value, grad));
  }
  return TY_OK;
}

ty_status_t ty_graph_autodiff(ty_graph_t *g, ty_value_id_t loss, ty_value_id_t seed,
                              const ty_value_id_t *wrt, uint32_t wrt_count,
                              ty_value_id_t *out_grads) {
  return ty_graph_autodiff_ex(g, loss, seed, wrt, wrt_count, NULL, out_grads);
}

/* The zeros of a wrt value nothing differentiable reads. */
static ty_status_t ty_sweep_zeros(ty_graph_t *g, ty_value_id_t v, ty_value_id_t *out) {
  const ty_tensor_desc_t d = ty_graph_value(g, v)->desc;
  return ty_graph_add_filled(g, d.dtype, d.rank, d.dims, 0.0, out);
}

ty_status_t ty_graph_autodiff_ex(ty_graph_t *g, ty_value_id_t loss, ty_value_id_t seed,
                                 const ty_value_id_t *wrt, uint32_t wrt_count,
                                 const ty_autodiff_options_t *opt, ty_value_id_t *out_grads) {
  static const ty_autodiff_options_t none = {0};
  if (!opt) opt = &none;
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

  ty_sweep_t w = {.g = g, .nv = nv, .nn = nn, .opt = opt};
  w.depends = calloc(nv ? nv : 1, sizeof(bool));
  w.grads = malloc((nv ? nv : 1) * sizeof(ty_value_id_t));
  w.wants = calloc(TY_OP_MAX_INPUTS, sizeof(bool));
  w.input_grads = malloc(TY_OP_MAX_INPUTS * sizeof(ty_value_id_t));
  w.output_grads = malloc(TY_OP_MAX_OUTPUTS * sizeof(ty_value_id_t));
  /* Per wrt value: the first node that reads it (its gradient is complete
   * once the sweep is past that node), and whether it was reported. */
  uint32_t *first_reader = malloc((wrt_count ? wrt_count : 1) * sizeof(uint32_t));
  bool *reported = calloc(wrt_count ? wrt_count : 1, sizeof(bool));
  ty_status_t s = TY_OK;
  if (!w.depends || !w.grads || !w.wants || !w.input_grads || !w.output_grads ||
      !first_reader || !reported) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
    goto done;
  }
  if (opt->recompute != TY_RECOMPUTE_NONE || opt->recast_states) {
    w.remap = malloc((nv ? nv : 1) * sizeof(ty_value_id_t));
    if (!w.remap) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
      goto done;
    }
    for (uint32_t v = 0; v < nv; ++v) w.remap[v] = TY_VALUE_NONE;
  }
  if (opt->recompute != TY_RECOMPUTE_NONE) {
    w.segment = malloc((nn ? nn : 1) * sizeof(uint32_t));
    uint32_t segments = 0;
    for (uint32_t n = 0; w.segment && n < nn; ++n) {
      w.segment[n] = ty_autodiff_segment(opt->recompute, ty_graph_node(g, n)->region);
      if (w.segment[n] != UINT32_MAX && w.segment[n] >= segments) segments = w.segment[n] + 1;
    }
    w.recomputed = calloc(segments ? segments : 1, sizeof(bool));
    w.pending = calloc(nv ? nv : 1, sizeof(bool));
    w.copied = calloc(nn ? nn : 1, sizeof(bool));
    if (!w.segment || !w.recomputed || !w.pending || !w.copied) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in autodiff");
      goto done;
    }
  }
  s = ty_sweep_find_tiles(&w);
  if (s) goto done;
  for (uint32_t v = 0; v < nv; ++v) w.grads[v] = TY_VALUE_NONE;
  for (uint32_t i = 0; i < wrt_count; ++i) {
    w.depends[wrt[i]] = true;
    first_reader[i] = UINT32_MAX;
  }
  /* Forward sweep: which values depend on something we differentiate for. */
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    bool any = false;
    for (uint32_t i = 0; i < node->input_count; ++i) {
      ty_value_id_t in = node->inputs[i];
      if (in == TY_VALUE_NONE) continue;
      any = any || w.depends[in];
      for (uint32_t k = 0; opt->on_grad_complete && k < wrt_count; ++k) {
        if (wrt[k] == in && first_reader[k] == UINT32_MAX) first_reader[k] = n;
      }
    }
    for (uint32_t o = 0; o < node->output_count; ++o) {
      w.depends[node->outputs[o]] = w.depends[node->outputs[o]] || any;
    }
  }
  if (seed == TY_VALUE_NONE) {
    const ty_tensor_desc_t ld = ty_graph_value(g, loss)->desc;
    s = ty_graph_add_filled(g, ld.dtype, ld.rank, ld.dims, 1.0, &w.grads[loss]);
    if (s) goto done;
  } else {
    w.grads[loss] = seed;
  }

  for (uint32_t n = nn; n-- > 0 && !s;) {
    s = ty_sweep_node(&w, n);
    if (!s && w.tile_count) s = ty_sweep_tile_done(&w, n);
    /* Gradients no remaining node can add to. */
    for (uint32_t k = 0; opt->on_grad_complete && k < wrt_count && !s; ++k) {
      if (first_reader[k] != n || reported[k]) continue;
      reported[k] = true;
      if (w.grads[wrt[k]] == TY_VALUE_NONE) s = ty_sweep_zeros(g, wrt[k], &w.grads[wrt[k]]);
      if (!s) s = opt->on_grad_complete(opt->user, k, w.grads[wrt[k]]);
      if (s) s = ty_status_annotate(s, "autodiff: consuming the gradient of value %u", wrt[k]);
    }
  }
  for (uint32_t i = 0; i < wrt_count && !s; ++i) {
    out_grads[i] = w.grads[wrt[i]];
    if (out_grads[i] == TY_VALUE_NONE) s = ty_sweep_zeros(g, wrt[i], &out_grads[i]);
    w.grads[wrt[i]] = out_grads[i];
    if (!s && opt->on_grad_complete && !reported[i]) {
      reported[i] = true;
      s = opt->on_grad_complete(opt->user, i, out_grads[i]);
    }
  }
done:
  free(w.depends);
  free(w.grads);
  free(w.wants);
  free(w.input_grads);
  free(w.output_grads);
  free(w.segment);
  free(w.recomputed);
  free(w.remap);
  free(w.pending);
  free(w.copied);
  for (uint32_t i = 0; i < w.tile_count; ++i) {
    free(w.tiles[i].nodes);
    free(w.tiles[i].grads);
  }
  free(w.tiles);
  free(w.tile_slot);
  free(w.tile_of_node);
  free(first_reader);
  free(reported);
  return s;
}
