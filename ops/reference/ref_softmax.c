/* Reference softmax over the last axis (see ref_softmax.h).
 *
 *   y_c = exp(x_c - m) / Z;  dy/dx: J_cc' = y_c (delta_cc' - y_c')
 *   so dx_c = y_c (dy_c - sum_c' dy_c' y_c').
 */
#include "ops/reference/ref_softmax.h"

#include <math.h>

void ty_ref_softmax_forward(const double *x, int64_t rows, int64_t cols,
                            double *y) {
  if (cols <= 0) return; /* nothing to normalise; never read x[0] */
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * cols;
    double *yr = y + r * cols;
    double m = xr[0];
    for (int64_t c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
    double z = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      yr[c] = exp(xr[c] - m);
      z += yr[c];
    }
    for (int64_t c = 0; c < cols; ++c) yr[c] /= z;
  }
}

void ty_ref_softmax_backward(const double *y, const double *dy, int64_t rows,
                             int64_t cols, double *dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const double *yr = y + r * cols, *dyr = dy + r * cols;
    double dot = 0.0;
    for (int64_t c = 0; c < cols; ++c) dot += dyr[c] * yr[c];
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = yr[c] * (dyr[c] - dot);
  }
}
