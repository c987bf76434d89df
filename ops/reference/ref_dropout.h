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

/* The global numbering of context parallel (attributes seq_len and
 * seq_starts, docs/ops.md "Dropout"): x is [outer, local, inner] around
 * its axis 1, whose `local` rows are `count` equal slices that begin at
 * rows starts[j] of a [outer, seq_len, inner] tensor; element (a, t, r)
 * is numbered (a seq_len + starts[t / m] + t % m) inner + r, m = local /
 * count, so each element draws the mask it has in the whole tensor. */
typedef struct ty_ref_dropout_rows_t {
  int64_t outer, local, inner, seq_len;
  const int64_t *starts;
  uint32_t count;
} ty_ref_dropout_rows_t;

/* Forward or backward (the same rule) under that numbering. */
ty_status_t ty_ref_dropout_numbered(const double *x, int64_t n, double p, uint64_t seed,
                                    uint64_t offset, const ty_ref_dropout_rows_t *rows,
                                    double *y);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_DROPOUT_H_ */
