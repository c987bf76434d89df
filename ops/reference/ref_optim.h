/* Reference optimizer updates (AdamW, SGD with momentum) and global-norm
 * gradient clipping, with PyTorch's semantics. Part of ty_ops_reference (f64,
 * naive, the spec). Updates are in place on caller arrays.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint arrays.
 * Errors: INVALID_ARGUMENT for a step < 1 (AdamW), or SGD momentum without a
 * buffer / nesterov without momentum (before anything is written).
 */
#ifndef TY_OPS_REFERENCE_REF_OPTIM_H_
#define TY_OPS_REFERENCE_REF_OPTIM_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_ref_adamw_params_t {
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  int64_t step; /* 1-based: the number of this update, counting it */
} ty_ref_adamw_params_t;

/* torch.optim.AdamW (amsgrad off, maximize off), per element:
 *   p *= 1 - lr wd
 *   m  = b1 m + (1 - b1) g
 *   v  = b2 v + (1 - b2) g^2
 *   p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 * m and v start at zero before step 1. (PyTorch writes the m update as
 * lerp; the two agree to rounding.) */
ty_status_t ty_ref_adamw_step(const ty_ref_adamw_params_t *params,
                              double *param, const double *grad, double *m,
                              double *v, int64_t n);

typedef struct ty_ref_sgd_params_t {
  double lr;
  double momentum;     /* 0 disables the buffer */
  double weight_decay; /* added to the gradient, PyTorch style */
  bool nesterov;       /* needs momentum > 0 */
} ty_ref_sgd_params_t;

/* torch.optim.SGD with dampening 0, per element:
 *   d = g + wd p
 *   if momentum != 0: buf = momentum buf + d;  d = nesterov ? d + momentum buf
 *                                                           : buf
 *   p -= lr d
 * PyTorch sets buf = d on the first step; with dampening 0 that is exactly
 * momentum * 0 + d, so a zero-initialised buffer reproduces it bit for bit.
 * momentum_buf may be NULL only when momentum == 0. */
ty_status_t ty_ref_sgd_step(const ty_ref_sgd_params_t *params, double *param,
                            const double *grad, double *momentum_buf,
                            int64_t n);

typedef struct ty_ref_adafactor_params_t {
  double lr;            /* used when relative_step is off */
  double weight_decay;
  double beta1;         /* used with a first moment */
  int64_t step;         /* 1-based */
  double eps1, eps2;    /* transformers' eps = (eps1, eps2): 1e-30, 1e-3 */
  double clip_threshold; /* 1.0 */
  double decay_rate;    /* -0.8 */
  bool relative_step, scale_parameter, warmup_init;
} ty_ref_adafactor_params_t;

/* transformers.Adafactor (optimization.py) for one parameter of `batches`
 * matrices [rows, cols] (factored: row [batches, rows] and col [batches,
 * cols], v NULL) or of rows * cols elements unfactored (v, row and col
 * NULL). m is the first moment or NULL. Per parameter:
 *   alpha = (relative_step ? min(warmup_init ? 1e-6 t : 1e-2, 1/sqrt(t)) : lr)
 *           * (scale_parameter ? max(eps2, rms(p)) : 1)
 *   beta2t = 1 - t^decay_rate;  s = g^2 + eps1
 *   factored: row = beta2t row + (1 - beta2t) mean_cols(s),
 *             col = beta2t col + (1 - beta2t) mean_rows(s),
 *             u = g / sqrt(row / mean(row)) / sqrt(col)
 *   else:     v = beta2t v + (1 - beta2t) s,  u = g / sqrt(v)
 *   u = alpha u / max(1, rms(u) / clip_threshold)
 *   with m:   m = beta1 m + (1 - beta1) u,  u = m
 *   p = p - weight_decay alpha p - u
 * rms(p) is taken before the update, rms(u) over the whole parameter.
 * INVALID_ARGUMENT for a step < 1 or a first moment without beta1 in [0, 1). */
ty_status_t ty_ref_adafactor_step(const ty_ref_adafactor_params_t *params, double *param,
                                  const double *grad, double *row, double *col, double *v,
                                  double *m, int64_t batches, int64_t rows, int64_t cols);

/* torch.nn.utils.clip_grad_norm_ (2-norm) over `count` arrays together:
 *   norm = sqrt(sum over all arrays and elements of g^2)
 *   if max_norm > 0: every g *= clamp(max_norm / (norm + 1e-6), max = 1)
 * Returns the norm before clipping. As in PyTorch, a NaN or inf norm makes
 * the factor NaN or 0 and spreads into every gradient; the caller checks the
 * returned norm. max_norm <= 0 only measures. */
double ty_ref_clip_grad_norm(int count, double *const *grads,
                             const int64_t *sizes, double max_norm);

/* global_norm_scale: norm = sqrt(sum of the `count` sums of squares); the
 * returned factor is clip_grad_norm_'s, min(1, max_norm / (norm + 1e-6)),
 * or 1 when max_norm <= 0 (NaN stays NaN). */
double ty_ref_global_norm_scale(int count, const double *sumsq, double max_norm,
                                double *out_norm);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_OPTIM_H_ */
