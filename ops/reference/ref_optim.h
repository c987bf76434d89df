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

/* torch.nn.utils.clip_grad_norm_ (2-norm) over `count` arrays together:
 *   norm = sqrt(sum over all arrays and elements of g^2)
 *   if max_norm > 0: every g *= clamp(max_norm / (norm + 1e-6), max = 1)
 * Returns the norm before clipping. As in PyTorch, a NaN or inf norm makes
 * the factor NaN or 0 and spreads into every gradient; the caller checks the
 * returned norm. max_norm <= 0 only measures. */
double ty_ref_clip_grad_norm(int count, double *const *grads,
                             const int64_t *sizes, double max_norm);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_OPTIM_H_ */
