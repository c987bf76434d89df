/* Reference dropout driven by the Philox element stream of hal/philox.h, so
 * every backend draws the same mask. Part of ty_ops_reference (f64, naive,
 * the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT when p is not in [0, 1) (NaN included), before
 * anything is written.
 */
#ifndef TY_OPS_REFERENCE_REF_DROPOUT_H_
#define TY_OPS_REFERENCE_REF_DROPOUT_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* keep(i) = ty_philox_u24(seed, offset, i) >= ty_dropout_threshold(p), with i
 * the flat index into x; y[i] = keep(i) ? x[i] / (1 - p) : 0. p == 0 is the
 * identity. A backend may multiply by 1 / (1 - p) instead of dividing: the
 * difference is one rounding, inside every stated tolerance; the mask itself
 * must match exactly. y may alias x. */
ty_status_t ty_ref_dropout_forward(const double *x, int64_t n, double p,
                                   uint64_t seed, uint64_t offset, double *y);

/* dx[i] = keep(i) ? dy[i] / (1 - p) : 0 with the forward's (seed, offset):
 * the mask is recomputed, never stored. dx may alias dy. */
ty_status_t ty_ref_dropout_backward(const double *dy, int64_t n, double p,
                                    uint64_t seed, uint64_t offset, double *dx);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_DROPOUT_H_ */
