/* Reference kernels of the vocabulary-parallel ops (ops/op_vocab.c): one
 * rank's shard of rows [start, start + valid) of the vocabulary, held in
 * `rows` >= valid rows or columns (the rest padding). Part of
 * ty_ops_reference (f64, naive, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: vocab_ce_loss_forward returns INVALID_ARGUMENT for a target at or
 * past the whole vocabulary, before anything is written; the rest cannot
 * fail (an id or target outside the shard is another rank's).
 */
#ifndef TY_OPS_REFERENCE_REF_VOCAB_H_
#define TY_OPS_REFERENCE_REF_VOCAB_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i, :] = table[ids[i] - start, :] for start <= ids[i] < start + valid,
 * else 0; table [rows, dim], out [count, dim]. */
void ty_ref_vocab_embedding_forward(const double *table, int64_t dim, int64_t start,
                                    int64_t valid, const int64_t *ids, int64_t count,
                                    double *out);
/* dtable[ids[i] - start, :] += dout[i, :] for the shard's ids; ACCUMULATES
 * (the caller zeroes dtable), padding rows untouched. */
void ty_ref_vocab_embedding_backward(const double *dout, const int64_t *ids, int64_t count,
                                     int64_t start, int64_t valid, int64_t dim,
                                     double *dtable);
/* m[n] = max of logits[n, 0 .. valid); logits [count, rows]. */
void ty_ref_vocab_max(const double *logits, int64_t count, int64_t rows, int64_t valid,
                      double *m);
/* sums[n] = {sum over c < valid of exp(logits[n, c] - m[n]),
 *            logits[n, t - start] - m[n] if t = targets[n] is in the shard, else 0}. */
void ty_ref_vocab_ce_sums_forward(const double *logits, const int64_t *targets,
                                  const double *m, int64_t count, int64_t rows,
                                  int64_t start, int64_t valid, double *sums);
/* dlogits[n, c] = dy[n] for the first c < valid with logits[n, c] == m[n],
 * 0 elsewhere (the padding too). */
void ty_ref_vocab_max_backward(const double *dy, const double *logits, const double *m,
                               int64_t count, int64_t rows, int64_t valid, double *dlogits);
/* dlogits[n, c] = dsums[n, 0] exp(logits[n, c] - m[n]) + dsums[n, 1] [c == t - start]
 * for c < valid, 0 for the padding; dm[n] = -(dsums[n, 0] sums[n, 0] +
 * dsums[n, 1] [t in the shard]). */
void ty_ref_vocab_ce_sums_backward(const double *dsums, const double *logits,
                                   const int64_t *targets, const double *m, int64_t count,
                                   int64_t rows, int64_t start, int64_t valid,
                                   double *dlogits, double *dm);
/* loss[n] = log(sums[n, 0]) - sums[n, 1], 0 for a negative target. */
ty_status_t ty_ref_vocab_ce_loss_forward(const double *sums, const int64_t *targets,
                                         int64_t count, int64_t vocab, double *loss);
/* dsums[n] = {dloss[n] / sums[n, 0], -dloss[n]}, 0 for a negative target. */
void ty_ref_vocab_ce_loss_backward(const double *dloss, const double *sums,
                                   const int64_t *targets, int64_t count, double *dsums);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_VOCAB_H_ */
