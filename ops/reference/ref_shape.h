/* Shape helpers shared by the reference kernels: rank limit, element counts,
 * row-major strides and numpy broadcasting. Part of ty_ops_reference.
 *
 * Threading: pure functions on caller memory, safe from any thread.
 * Errors: INVALID_ARGUMENT naming the offending rank, axis or dims; the
 * out-parameters are unspecified on error.
 */
#ifndef TY_OPS_REFERENCE_REF_SHAPE_H_
#define TY_OPS_REFERENCE_REF_SHAPE_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Equal to TY_TENSOR_MAX_RANK (checked at compile time in ref_shape.c). */
#define TY_REF_MAX_RANK 8

/* Product of dims (1 for rank 0). INVALID_ARGUMENT for a rank outside
 * [0, TY_REF_MAX_RANK], a negative dim or a count that overflows int64. */
ty_status_t ty_ref_shape_count(int rank, const int64_t *shape,
                               int64_t *out_count);

/* Row-major element strides of `shape` (out_strides[rank-1] == 1). Assumes a
 * shape already accepted by ty_ref_shape_count. */
void ty_ref_shape_strides(int rank, const int64_t *shape, int64_t *out_strides);

/* numpy broadcasting: shapes are aligned at their last axis, and each pair of
 * dims must be equal or contain a 1 (a missing leading axis counts as 1).
 * out_rank = max(rank_a, rank_b); out_shape needs TY_REF_MAX_RANK entries. */
ty_status_t ty_ref_shape_broadcast(int rank_a, const int64_t *shape_a,
                                   int rank_b, const int64_t *shape_b,
                                   int *out_rank, int64_t *out_shape);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_SHAPE_H_ */
