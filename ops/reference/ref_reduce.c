/* Reference reductions (see ref_reduce.h).
 *
 *   reduce_sum: out[keep(i)] = sum over i mapping to it of x[i], where keep()
 *               zeroes the indices of the reduced axes; backward broadcasts.
 *   sum / mean / sum_of_squares over the last axis of a [rows, cols] view.
 */
#include "ops/reference/ref_reduce.h"

#include <stdbool.h>
#include <string.h>

#include "ops/reference/ref_shape.h"

/* Validates axes and fills the keepdims strides: for each input axis, the
 * stride in the output (0 for a reduced axis). */
static ty_status_t ty_ref_reduce_plan(int rank, const int64_t *shape,
                                      int axis_count, const int *axes,
                                      int64_t *out_count, int64_t *out_kept,
                                      int64_t *out_strides) {
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank, shape, out_count));
  if (axis_count < 0 || axis_count > rank) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "reduce_sum: %d axes for a rank-%d input",
                          axis_count, rank);
  }
  bool reduced[TY_REF_MAX_RANK] = {false};
  for (int i = 0; i < axis_count; ++i) {
    int axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (axis < 0 || axis >= rank) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "reduce_sum: axis %d is outside [-%d, %d)",
                            axes[i], rank, rank);
    }
    if (reduced[axis]) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "reduce_sum: axis %d is listed twice", axes[i]);
    }
    reduced[axis] = true;
  }
  int64_t kept_shape[TY_REF_MAX_RANK] = {0};
  for (int i = 0; i < rank; ++i) kept_shape[i] = reduced[i] ? 1 : shape[i];
  ty_ref_shape_strides(rank, kept_shape, out_strides);
  *out_kept = 1;
  for (int i = 0; i < rank; ++i) {
    *out_kept *= kept_shape[i];
    if (reduced[i]) out_strides[i] = 0;
  }
  return TY_OK;
}

static int64_t ty_ref_reduce_map(int rank, const int64_t *shape,
                                 const int64_t *strides, int64_t i) {
  int64_t o = 0;
  for (int d = rank - 1; d >= 0; --d) {
    o += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return o;
}

ty_status_t ty_ref_reduce_sum_forward(int rank, const int64_t *shape,
                                      const double *x, int axis_count,
                                      const int *axes, double *out) {
  int64_t count, kept, strides[TY_REF_MAX_RANK];
  TY_RETURN_IF_ERROR(ty_ref_reduce_plan(rank, shape, axis_count, axes, &count,
                                        &kept, strides));
  memset(out, 0, (size_t)kept * sizeof(double));
  for (int64_t i = 0; i < count; ++i) {
    out[ty_ref_reduce_map(rank, shape, strides, i)] += x[i];
  }
  return TY_OK;
}

ty_status_t ty_ref_reduce_sum_backward(int rank, const int64_t *shape,
                                       int axis_count, const int *axes,
                                       const double *dout, double *dx) {
  int64_t count, kept, strides[TY_REF_MAX_RANK];
  TY_RETURN_IF_ERROR(ty_ref_reduce_plan(rank, shape, axis_count, axes, &count,
                                        &kept, strides));
  for (int64_t i = 0; i < count; ++i) {
    dx[i] = dout[ty_ref_reduce_map(rank, shape, strides, i)];
  }
  return TY_OK;
}

void ty_ref_sum_forward(const double *x, int64_t rows, int64_t cols,
                        double *out) {
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += x[r * cols + c];
    out[r] = acc;
  }
}

void ty_ref_sum_backward(const double *dout, int64_t rows, int64_t cols,
                         double *dx) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = dout[r];
  }
}

void ty_ref_mean_forward(const double *x, int64_t rows, int64_t cols,
                         double *out) {
  ty_ref_sum_forward(x, rows, cols, out);
  for (int64_t r = 0; r < rows; ++r) out[r] /= (double)cols;
}

void ty_ref_mean_backward(const double *dout, int64_t rows, int64_t cols,
                          double *dx) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = dout[r] / (double)cols;
  }
}

void ty_ref_sum_of_squares_forward(const double *x, int64_t rows, int64_t cols,
                                   double *out) {
  for (int64_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (int64_t c = 0; c < cols; ++c) acc += x[r * cols + c] * x[r * cols + c];
    out[r] = acc;
  }
}

void ty_ref_sum_of_squares_backward(const double *x, const double *dout,
                                    int64_t rows, int64_t cols, double *dx) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      dx[r * cols + c] = 2.0 * x[r * cols + c] * dout[r];
    }
  }
}
