/* Reference layernorm and rmsnorm (see ref_norm.h for the formulas).
 *
 * Both backward passes come from y = xhat * gamma (+ beta) with xhat a
 * function of the whole row: d xhat_i / d x_j = rstd * (delta_ij - 1/dim -
 * xhat_i xhat_j / dim) for layernorm and rstd * (delta_ij - xhat_i xhat_j /
 * dim) for rmsnorm, contracted with g = dy * gamma.
 */
#include "ops/reference/ref_norm.h"

#include <math.h>
#include <stddef.h>

void ty_ref_layernorm_forward(const double *x, const double *gamma,
                              const double *beta, int64_t rows, int64_t dim,
                              double eps, double *y, double *out_mean,
                              double *out_rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * dim;
    double mean = 0.0;
    for (int64_t d = 0; d < dim; ++d) mean += xr[d];
    mean /= (double)dim;
    /* Two passes: the textbook E[x^2] - mean^2 cancels badly. */
    double var = 0.0;
    for (int64_t d = 0; d < dim; ++d) var += (xr[d] - mean) * (xr[d] - mean);
    var /= (double)dim;
    double rstd = 1.0 / sqrt(var + eps);
    for (int64_t d = 0; d < dim; ++d) {
      double v = (xr[d] - mean) * rstd;
      if (gamma) v *= gamma[d];
      if (beta) v += beta[d];
      y[r * dim + d] = v;
    }
    if (out_mean) out_mean[r] = mean;
    if (out_rstd) out_rstd[r] = rstd;
  }
}

void ty_ref_layernorm_backward(const double *dy, const double *x,
                               const double *gamma, const double *mean,
                               const double *rstd, int64_t rows, int64_t dim,
                               double *dx, double *dgamma, double *dbeta) {
  for (int64_t d = 0; d < dim; ++d) {
    if (dgamma) dgamma[d] = 0.0;
    if (dbeta) dbeta[d] = 0.0;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * dim, *dyr = dy + r * dim;
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = (xr[d] - mean[r]) * rstd[r];
      double g = dyr[d] * (gamma ? gamma[d] : 1.0);
      mean_g += g;
      mean_gx += g * xhat;
      if (dgamma) dgamma[d] += dyr[d] * xhat;
      if (dbeta) dbeta[d] += dyr[d];
    }
    mean_g /= (double)dim;
    mean_gx /= (double)dim;
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = (xr[d] - mean[r]) * rstd[r];
      double g = dyr[d] * (gamma ? gamma[d] : 1.0);
      dx[r * dim + d] = rstd[r] * (g - mean_g - xhat * mean_gx);
    }
  }
}

void ty_ref_rmsnorm_forward(const double *x, const double *gamma, int64_t rows,
                            int64_t dim, double eps, double *y,
                            double *out_rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * dim;
    double ms = 0.0;
    for (int64_t d = 0; d < dim; ++d) ms += xr[d] * xr[d];
    ms /= (double)dim;
    double rstd = 1.0 / sqrt(ms + eps);
    for (int64_t d = 0; d < dim; ++d) {
      y[r * dim + d] = xr[d] * rstd * (gamma ? gamma[d] : 1.0);
    }
    if (out_rstd) out_rstd[r] = rstd;
  }
}

void ty_ref_rmsnorm_backward(const double *dy, const double *x,
                             const double *gamma, const double *rstd,
                             int64_t rows, int64_t dim, double *dx,
                             double *dgamma) {
  if (dgamma) {
    for (int64_t d = 0; d < dim; ++d) dgamma[d] = 0.0;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x + r * dim, *dyr = dy + r * dim;
    double mean_gx = 0.0;
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = xr[d] * rstd[r];
      mean_gx += dyr[d] * (gamma ? gamma[d] : 1.0) * xhat;
      if (dgamma) dgamma[d] += dyr[d] * xhat;
    }
    mean_gx /= (double)dim;
    for (int64_t d = 0; d < dim; ++d) {
      double xhat = xr[d] * rstd[r];
      double g = dyr[d] * (gamma ? gamma[d] : 1.0);
      dx[r * dim + d] = rstd[r] * (g - xhat * mean_gx);
    }
  }
}
