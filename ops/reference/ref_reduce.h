/* Reference reductions: sum over any set of axes (what un-broadcasts
 * gradients), and sum / mean / sum of squares over the last axis or over all
 * elements. Part of ty_ops_reference (f64, naive, the spec).
 *
 * Result layout of ty_ref_reduce_sum_*: keepdims. The output has the input's
 * shape with every reduced axis set to 1, contiguous row-major. Because a
 * size-1 axis adds no stride, the same buffer is also the contiguous result
 * with those axes dropped, so the caller picks either shape for free.
 *
 * Row reductions view x as [rows, cols] and reduce each row; pass rows = 1,
 * cols = element count to reduce over all elements.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for a bad rank or dim, an axis outside
 * [-rank, rank) or a repeated axis (before anything is written).
 */
#ifndef TY_OPS_REFERENCE_REF_REDUCE_H_
#define TY_OPS_REFERENCE_REF_REDUCE_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out = sum of x over `axes` (negative axes count from the end; zero axes
 * copies x). out must not alias x. */
ty_status_t ty_ref_reduce_sum_forward(int rank, const int64_t *shape,
                                      const double *x, int axis_count,
                                      const int *axes, double *out);

/* dx[i] = dout[keepdims index of i]: dout broadcast back over the reduced
 * axes. dx (the input's shape) is overwritten. */
ty_status_t ty_ref_reduce_sum_backward(int rank, const int64_t *shape,
                                       int axis_count, const int *axes,
                                       const double *dout, double *dx);

/* out[r] = sum_c x[r, c];        dx[r, c] = dout[r]. */
void ty_ref_sum_forward(const double *x, int64_t rows, int64_t cols,
                        double *out);
void ty_ref_sum_backward(const double *dout, int64_t rows, int64_t cols,
                         double *dx);

/* out[r] = sum_c x[r, c] / cols; dx[r, c] = dout[r] / cols. cols > 0. */
void ty_ref_mean_forward(const double *x, int64_t rows, int64_t cols,
                         double *out);
void ty_ref_mean_backward(const double *dout, int64_t rows, int64_t cols,
                          double *dx);

/* out[r] = sum_c x[r, c]^2;      dx[r, c] = 2 x[r, c] dout[r]. */
void ty_ref_sum_of_squares_forward(const double *x, int64_t rows, int64_t cols,
                                   double *out);
void ty_ref_sum_of_squares_backward(const double *x, const double *dout,
                                    int64_t rows, int64_t cols, double *dx);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_REDUCE_H_ */
