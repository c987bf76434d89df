/* Reference elementwise arithmetic: broadcasting add / sub / mul and scale.
 * Part of ty_ops_reference (f64, naive, the spec).
 *
 * Broadcasting follows numpy (see ty_ref_shape_broadcast): rank <= 8, shapes
 * aligned at the last axis, size-1 or missing axes repeat. The output shape is
 * the broadcast shape, contiguous row-major.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT when the shapes do not broadcast or a rank or dim
 * is out of range (before anything is written).
 */
#ifndef TY_OPS_REFERENCE_REF_ELEMENTWISE_H_
#define TY_OPS_REFERENCE_REF_ELEMENTWISE_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_ref_binary_op_e {
  TY_REF_BINARY_ADD = 0, /* out = a + b */
  TY_REF_BINARY_SUB = 1, /* out = a - b */
  TY_REF_BINARY_MUL = 2, /* out = a * b */
  TY_REF_BINARY_DIV = 3, /* out = a / b */
} ty_ref_binary_op_t;

/* out = a (op) b with broadcasting. out must not alias a or b unless it has
 * the same shape as the one it aliases. */
ty_status_t ty_ref_binary_forward(ty_ref_binary_op_t op, int rank_a,
                                  const int64_t *shape_a, const double *a,
                                  int rank_b, const int64_t *shape_b,
                                  const double *b, double *out);

/* Gradients of ty_ref_binary_forward, un-broadcast (summed over every axis
 * that was broadcast) back to each input's own shape:
 *   add: da = dout, db = dout;  sub: da = dout, db = -dout;
 *   mul: da = dout * b, db = dout * a   (then summed to the input's shape).
 * da and db are overwritten; either may be NULL. a and b are only read for
 * mul (and may be NULL otherwise). */
ty_status_t ty_ref_binary_backward(ty_ref_binary_op_t op, int rank_a,
                                   const int64_t *shape_a, const double *a,
                                   int rank_b, const int64_t *shape_b,
                                   const double *b, const double *dout,
                                   double *da, double *db);

/* y = alpha * x over n elements (y may alias x). */
void ty_ref_scale_forward(const double *x, int64_t n, double alpha, double *y);
/* dx = alpha * dy (dx may alias dy). */
void ty_ref_scale_backward(const double *dy, int64_t n, double alpha,
                           double *dx);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_ELEMENTWISE_H_ */
