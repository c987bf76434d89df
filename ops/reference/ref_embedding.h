/* Reference embedding: a row gather from a [vocab, dim] table and its
 * scatter-add gradient. Part of ty_ops_reference (f64, naive, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT when an id lies outside [0, vocab), naming the
 * position and the value. Ids are checked before anything is written, so an
 * error leaves the outputs untouched.
 */
#ifndef TY_OPS_REFERENCE_REF_EMBEDDING_H_
#define TY_OPS_REFERENCE_REF_EMBEDDING_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i, :] = table[ids[i], :] for i < count; table [vocab, dim],
 * out [count, dim]. */
ty_status_t ty_ref_embedding_forward(const double *table, int64_t vocab,
                                     int64_t dim, const int64_t *ids,
                                     int64_t count, double *out);

/* dtable[ids[i], :] += dout[i, :]. ACCUMULATES into dtable (the caller zeroes
 * it first): repeated ids sum their gradients, and gradient accumulation
 * across micro-batches needs no extra op. */
ty_status_t ty_ref_embedding_backward(const double *dout, const int64_t *ids,
                                      int64_t count, int64_t vocab, int64_t dim,
                                      double *dtable);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_EMBEDDING_H_ */
