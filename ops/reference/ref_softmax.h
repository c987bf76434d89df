/* Reference softmax over the last axis, forward and backward. Part of
 * ty_ops_reference (f64, naive, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: none (void). Outputs are overwritten; y may alias x, dx may alias dy.
 */
#ifndef TY_OPS_REFERENCE_REF_SOFTMAX_H_
#define TY_OPS_REFERENCE_REF_SOFTMAX_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[r, c] = exp(x[r, c] - m_r) / sum_c' exp(x[r, c'] - m_r), m_r = max_c x[r, c]
 * (subtracting the row max changes nothing mathematically and keeps exp
 * finite). x and y are [rows, cols], cols > 0. */
void ty_ref_softmax_forward(const double *x, int64_t rows, int64_t cols,
                            double *y);

/* dx[r, c] = y[r, c] (dy[r, c] - sum_c' dy[r, c'] y[r, c']), from the saved
 * output y. */
void ty_ref_softmax_backward(const double *y, const double *dy, int64_t rows,
                             int64_t cols, double *dx);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_SOFTMAX_H_ */
