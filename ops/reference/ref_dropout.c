/* Reference dropout (see ref_dropout.h).
 *
 *   y = mask * x / (1 - p),  dx = mask * dy / (1 - p)
 * The mask is a pure function of (seed, offset, i), so forward and backward
 * (and every backend) agree without storing it.
 */
#include "ops/reference/ref_dropout.h"

#include "hal/philox.h"

/* Element i's number: i itself, or its index in the whole sequence. */
static uint64_t ty_ref_dropout_number(const ty_ref_dropout_rows_t *rows, int64_t i) {
  if (!rows) return (uint64_t)i;
  const int64_t inner = rows->inner, local = rows->local;
  const int64_t a = i / (local * inner), t = i / inner % local, r = i % inner;
  const int64_t m = local / rows->count;
  return (uint64_t)((a * rows->seq_len + rows->starts[t / m] + t % m) * inner + r);
}

static ty_status_t ty_ref_dropout_apply(const char *what, const double *x,
                                        int64_t n, double p, uint64_t seed,
                                        uint64_t offset, const ty_ref_dropout_rows_t *rows,
                                        double *y) {
  if (!(p >= 0.0 && p < 1.0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dropout %s: probability %g is outside [0, 1)", what,
                          p);
  }
  const uint32_t threshold = ty_dropout_threshold(p);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = ty_dropout_keep(seed, offset, ty_ref_dropout_number(rows, i), threshold)
               ? x[i] / (1.0 - p)
               : 0.0;
  }
  return TY_OK;
}

ty_status_t ty_ref_dropout_forward(const double *x, int64_t n, double p,
                                   uint64_t seed, uint64_t offset, double *y) {
  return ty_ref_dropout_apply("forward", x, n, p, seed, offset, NULL, y);
}

ty_status_t ty_ref_dropout_backward(const double *dy, int64_t n, double p,
                                    uint64_t seed, uint64_t offset,
                                    double *dx) {
  return ty_ref_dropout_apply("backward", dy, n, p, seed, offset, NULL, dx);
}

ty_status_t ty_ref_dropout_numbered(const double *x, int64_t n, double p, uint64_t seed,
                                    uint64_t offset, const ty_ref_dropout_rows_t *rows,
                                    double *y) {
  if (rows->count == 0 || rows->local % rows->count != 0 || rows->inner < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dropout: %lld rows do not split into %u slices", (long long)rows->local,
                          rows->count);
  }
  return ty_ref_dropout_apply("numbered", x, n, p, seed, offset, rows, y);
}
