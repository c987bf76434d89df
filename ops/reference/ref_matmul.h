/* Reference batched matmul with transposes, broadcast batches and an
 * optional bias. Part of ty_ops_reference (f64, naive, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for negative sizes or batch counts that neither
 * match nor broadcast (checked before anything is written);
 * RESOURCE_EXHAUSTED if the test-only backward cannot allocate scratch.
 */
#ifndef TY_OPS_REFERENCE_REF_MATMUL_H_
#define TY_OPS_REFERENCE_REF_MATMUL_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per batch, A is stored [m, k] (or [k, m] when trans_a), B is stored [k, n]
 * (or [n, k] when trans_b) and C is [m, n]. batch_a and batch_b are each >= 1
 * and either equal or 1; a batch of 1 is broadcast. C has
 * max(batch_a, batch_b) batches. */
typedef struct ty_ref_matmul_shape_t {
  int64_t batch_a;
  int64_t batch_b;
  int64_t m;
  int64_t n;
  int64_t k;
  bool trans_a;
  bool trans_b;
} ty_ref_matmul_shape_t;

/* Number of batches of C. Assumes a valid shape. */
int64_t ty_ref_matmul_batch(const ty_ref_matmul_shape_t *shape);

/* C[b] = op(A[b]) @ op(B[b]) (+ bias[j] on every row when bias != NULL;
 * bias has n entries). c must not alias a, b or bias. */
ty_status_t ty_ref_matmul_forward(const ty_ref_matmul_shape_t *shape,
                                  const double *a, const double *b,
                                  const double *bias, double *c);

/* FOR TESTS: the gradient formula the graph's matmul rule uses, written with
 * ty_ref_matmul_forward itself, so finite differences can check it:
 *   dA = dC @ op(B)^T  (stored back as op(A) is: transposed when trans_a)
 *   dB = op(A)^T @ dC  (transposed when trans_b)
 *   dbias[j] = sum over batches and rows of dC[.., j]
 * A broadcast operand's gradient is summed over the broadcast batches.
 * Outputs are overwritten; any of da, db, dbias may be NULL to skip it. */
ty_status_t ty_ref_matmul_backward(const ty_ref_matmul_shape_t *shape,
                                   const double *a, const double *b,
                                   const double *dc, double *da, double *db,
                                   double *dbias);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_MATMUL_H_ */
