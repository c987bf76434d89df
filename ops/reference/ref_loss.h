/* Reference per-token cross-entropy from logits, forward and backward. Part
 * of ty_ops_reference (f64, naive, the spec). Weighted or averaged losses are
 * built by the caller with mul and sum on the per-token values.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT when a target is >= vocab, naming the row and the
 * value (checked before anything is written). A negative target means
 * "ignored", never an error.
 */
#ifndef TY_OPS_REFERENCE_REF_LOSS_H_
#define TY_OPS_REFERENCE_REF_LOSS_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* loss[n] = logsumexp_v(logits[n, v]) - logits[n, targets[n]], or 0 when
 * targets[n] < 0. logits [rows, vocab] (vocab > 0), targets and loss [rows]. */
ty_status_t ty_ref_cross_entropy_forward(const double *logits,
                                         const int64_t *targets, int64_t rows,
                                         int64_t vocab, double *loss);

/* dlogits[n, v] = dloss[n] (softmax(logits[n])[v] - [v == targets[n]]), and
 * a zero row when targets[n] < 0. dlogits is overwritten. */
ty_status_t ty_ref_cross_entropy_backward(const double *logits,
                                          const int64_t *targets,
                                          const double *dloss, int64_t rows,
                                          int64_t vocab, double *dlogits);

/* linear_cross_entropy: loss[n] and lse[n] of the logits z[n, v] = sum_c
 * h[n, c] w[v, c] (h [rows, C], w [vocab, C]), formed `chunk` rows at a time
 * (0: all rows at once; the result does not depend on it, only the scratch
 * of chunk x vocab doubles does). lse[n] is logsumexp_v z[n, v] (0 for an
 * ignored row). RESOURCE_EXHAUSTED when the scratch cannot be allocated. */
ty_status_t ty_ref_linear_cross_entropy_forward(const double *h, const double *w,
                                                const int64_t *targets, int64_t rows,
                                                int64_t channels, int64_t vocab, int64_t chunk,
                                                double *loss, double *lse);

/* Its backward from the saved lse: with dz[n, v] = dloss[n] (exp(z[n, v] -
 * lse[n]) - [v == targets[n]]) (0 for an ignored row), dh = dz w and dw =
 * dz^T h, recomputing z chunk by chunk. dh and dw are overwritten. */
ty_status_t ty_ref_linear_cross_entropy_backward(const double *h, const double *w,
                                                 const int64_t *targets, const double *lse,
                                                 const double *dloss, int64_t rows,
                                                 int64_t channels, int64_t vocab, int64_t chunk,
                                                 double *dh, double *dw);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_LOSS_H_ */
