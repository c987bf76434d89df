/* Reverse-mode automatic differentiation over the graph IR: appends the
 * backward graph, built from each op's gradient rule (ops of the same set). */
#ifndef TY_GRAPH_AUTODIFF_H_
#define TY_GRAPH_AUTODIFF_H_

#include "graph/ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Appends nodes computing dL/dwrt[i] for L = Σ seed ⊙ loss, i.e. the
 * gradient when the upstream gradient of `loss` is `seed` (same shape and
 * dtype as loss; TY_VALUE_NONE means ones). out_grads[i] receives the value
 * holding the gradient of wrt[i] (same shape and dtype); a wrt value that
 * does not influence the loss gets zeros. Only nodes present when the call
 * starts are differentiated. Errors: INVALID_ARGUMENT for a non-float wrt or
 * loss; UNIMPLEMENTED naming the op when a node on the path has no gradient
 * rule. On error the graph may hold unused extra nodes (harmless: lowering
 * drops them). */
ty_status_t ty_graph_autodiff(ty_graph_t *graph, ty_value_id_t loss,
                              ty_value_id_t seed, const ty_value_id_t *wrt,
                              uint32_t wrt_count, ty_value_id_t *out_grads);

/* Activation checkpointing: which forward nodes the backward re-runs
 * instead of keeping their outputs, by the regions models tag blocks with
 * (graph.h, TY_REGION). */
typedef enum ty_recompute_e {
  TY_RECOMPUTE_NONE = 0,
  /* each block's attention half (norm, projections, RoPE, attention, output
   * projection, residual add) is re-run in its backward from the block's
   * input; the MLP half's activations are kept */
  TY_RECOMPUTE_ATTENTION = 1,
  /* each whole block is re-run in its backward from its input: only the
   * residual stream at block boundaries is kept */
  TY_RECOMPUTE_LAYER = 2,
} ty_recompute_t;

/* "none", "attention", "layer"; ty_recompute_parse takes them back
 * (INVALID_ARGUMENT naming the value otherwise). */
const char *ty_recompute_name(ty_recompute_t recompute);
ty_status_t ty_recompute_parse(const char *text, ty_recompute_t *out);

typedef struct ty_autodiff_options_t {
  /* The recompute pass: when the backward sweep reaches the first node of
   * a region to recompute, it appends copies of that region's forward nodes
   * (same ops and attributes, inputs from outside the region unchanged: the
   * checkpoint), and the region's gradient rules read the copies. The
   * forward values of the region then die in the forward, which is what the
   * memory planner sees. The copies compute exactly what the forward did
   * (dropout masks are functions of the node's stream), so gradients are
   * bit-identical. */
  ty_recompute_t recompute;
  /* Re-casts parameters in the backward: a gradient rule that reads the
   * output of a `cast` of a STATE value to a narrower dtype (a bf16-mixed
   * weight) reads a copy of that cast emitted at that point of the sweep
   * instead, so the forward's cast dies after its last forward reader and
   * no full set of 16-bit weight copies is live across forward and
   * backward (for a 1B model, 2.3 GiB). The copy computes the same bits:
   * gradients are unchanged; the price is one more read of each such
   * weight per step. */
  bool recast_states;
  /* Called once for each wrt[i] as soon as no node left in the sweep can
   * add to its gradient (after the node that reads wrt[i] first in the
   * forward), with the gradient value, which it may consume by emitting
   * nodes (the fused optimizer's update). wrt values no node reads are
   * reported at the end with zeros. NULL: no calls. */
  ty_status_t (*on_grad_complete)(void *user, uint32_t index, ty_value_id_t grad);
  void *user;
} ty_autodiff_options_t;

/* ty_graph_autodiff with options (NULL: none). Errors from the callback are
 * returned, annotated. */
ty_status_t ty_graph_autodiff_ex(ty_graph_t *graph, ty_value_id_t loss, ty_value_id_t seed,
                                 const ty_value_id_t *wrt, uint32_t wrt_count,
                                 const ty_autodiff_options_t *options,
                                 ty_value_id_t *out_grads);

/* A value of `shape`/`dtype` filled with `fill`, as broadcast_to of a scalar
 * constant (so no large constant is stored). */
ty_status_t ty_graph_add_filled(ty_graph_t *graph, ty_dtype_t dtype,
                                uint32_t rank, const int64_t *dims, double fill,
                                ty_value_id_t *out_value);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_AUTODIFF_H_ */
