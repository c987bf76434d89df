/* Runs nodes of an ABI graph with the reference kernels on host memory: the
 * oracle of `trainyard conform` and the executor of `cpu?kernels=reference`.
 * Float values are widened to f64 for the kernel and rounded back to their
 * storage dtype (so a bf16 graph computes in f64 and stores bf16). */
#ifndef TY_OPS_REFERENCE_REF_INTERP_H_
#define TY_OPS_REFERENCE_REF_INTERP_H_

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Executes node `node` of `graph`. data[v] points at the dense storage of
 * value v (in its dtype) for every value the node reads or writes; outputs
 * may alias inputs only where the op updates in place (optimizer updates,
 * kv_cache_write, paged_kv_write). Errors: UNIMPLEMENTED for an op the reference lacks,
 * INVALID_ARGUMENT for bad data (token id out of range, ...), naming the
 * node and op. Thread-safe for disjoint outputs. */
ty_status_t ty_ref_execute_node(const ty_abi_graph_t *graph, uint32_t node,
                                void *const *data);

/* True when the reference implements `op`. */
int ty_ref_supports_op(const char *op);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_INTERP_H_ */
