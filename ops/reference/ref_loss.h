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

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_LOSS_H_ */
