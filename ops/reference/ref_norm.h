/* Reference normalisations over the last axis: layernorm and rmsnorm,
 * forward and backward. Part of ty_ops_reference (f64, naive, the spec).
 *
 * x is viewed as [rows, dim]; gamma and beta have dim entries. The forward
 * pass saves per-row statistics (mean, rstd) that the backward pass reads,
 * as a fused training kernel does; backends must produce the same values.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: none (void). Outputs are overwritten, never accumulated.
 */
#ifndef TY_OPS_REFERENCE_REF_NORM_H_
#define TY_OPS_REFERENCE_REF_NORM_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* mean = sum_d x / dim;  var = sum_d (x - mean)^2 / dim (biased);
 * rstd = 1 / sqrt(var + eps);  y = (x - mean) * rstd * gamma + beta.
 * gamma / beta may be NULL (taken as 1 / 0); out_mean / out_rstd ([rows])
 * may be NULL when no backward pass follows. */
void ty_ref_layernorm_forward(const double *x, const double *gamma,
                              const double *beta, int64_t rows, int64_t dim,
                              double eps, double *y, double *out_mean,
                              double *out_rstd);

/* With xhat = (x - mean) * rstd and g = dy * gamma:
 *   dx = rstd * (g - mean_d(g) - xhat * mean_d(g * xhat))
 *   dgamma = sum_rows dy * xhat;  dbeta = sum_rows dy.
 * mean / rstd are the forward's saved values. dgamma / dbeta may be NULL;
 * gamma may be NULL (taken as 1). */
void ty_ref_layernorm_backward(const double *dy, const double *x,
                               const double *gamma, const double *mean,
                               const double *rstd, int64_t rows, int64_t dim,
                               double *dx, double *dgamma, double *dbeta);

/* rstd = 1 / sqrt(sum_d x^2 / dim + eps);  y = x * rstd * gamma.
 * gamma may be NULL (taken as 1); out_rstd ([rows]) may be NULL. */
void ty_ref_rmsnorm_forward(const double *x, const double *gamma, int64_t rows,
                            int64_t dim, double eps, double *y,
                            double *out_rstd);

/* With xhat = x * rstd and g = dy * gamma:
 *   dx = rstd * (g - xhat * mean_d(g * xhat));  dgamma = sum_rows dy * xhat.
 * dgamma may be NULL; gamma may be NULL (taken as 1). */
void ty_ref_rmsnorm_backward(const double *dy, const double *x,
                             const double *gamma, const double *rstd,
                             int64_t rows, int64_t dim, double *dx,
                             double *dgamma);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_NORM_H_ */
