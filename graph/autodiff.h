/* Reverse-mode automatic differentiation over the graph IR: appends the
 * backward graph, built from each op's gradient rule (ops of the same set). */
#ifndef TY_GRAPH_AUTODIFF_H_
#define TY_GRAPH_AUTODIFF_H_

#include "graph/graph.h"

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

/* A value of `shape`/`dtype` filled with `fill`, as broadcast_to of a scalar
 * constant (so no large constant is stored). */
ty_status_t ty_graph_add_filled(ty_graph_t *graph, ty_dtype_t dtype,
                                uint32_t rank, const int64_t *dims, double fill,
                                ty_value_id_t *out_value);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_AUTODIFF_H_ */
