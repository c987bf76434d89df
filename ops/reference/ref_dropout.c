/* Reference dropout (see ref_dropout.h).
 *
 *   y = mask * x / (1 - p),  dx = mask * dy / (1 - p)
 * The mask is a pure function of (seed, offset, i), so forward and backward
 * (and every backend) agree without storing it.
 */
#include "ops/reference/ref_dropout.h"

#include "hal/philox.h"

static ty_status_t ty_ref_dropout_apply(const char *what, const double *x,
                                        int64_t n, double p, uint64_t seed,
                                        uint64_t offset, double *y) {
  if (!(p >= 0.0 && p < 1.0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dropout %s: probability %g is outside [0, 1)", what,
                          p);
  }
  const uint32_t threshold = ty_dropout_threshold(p);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = ty_dropout_keep(seed, offset, (uint64_t)i, threshold)
               ? x[i] / (1.0 - p)
               : 0.0;
  }
  return TY_OK;
}

ty_status_t ty_ref_dropout_forward(const double *x, int64_t n, double p,
                                   uint64_t seed, uint64_t offset, double *y) {
  return ty_ref_dropout_apply("forward", x, n, p, seed, offset, y);
}

ty_status_t ty_ref_dropout_backward(const double *dy, int64_t n, double p,
                                    uint64_t seed, uint64_t offset,
                                    double *dx) {
  return ty_ref_dropout_apply("backward", dy, n, p, seed, offset, dx);
}
