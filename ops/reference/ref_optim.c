/* Reference AdamW, SGD and gradient clipping (see ref_optim.h for the
 * update rules, which follow torch.optim and torch.nn.utils).
 */
#include "ops/reference/ref_optim.h"

#include <math.h>

ty_status_t ty_ref_adamw_step(const ty_ref_adamw_params_t *p, double *param,
                              const double *grad, double *m, double *v,
                              int64_t n) {
  if (p->step < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "adamw: step %lld must be >= 1 (it counts this "
                          "update)",
                          (long long)p->step);
  }
  const double bc1 = 1.0 - pow(p->beta1, (double)p->step);
  const double bc2 = 1.0 - pow(p->beta2, (double)p->step);
  for (int64_t i = 0; i < n; ++i) {
    double g = grad[i];
    param[i] *= 1.0 - p->lr * p->weight_decay;
    m[i] = p->beta1 * m[i] + (1.0 - p->beta1) * g;
    v[i] = p->beta2 * v[i] + (1.0 - p->beta2) * g * g;
    param[i] -= p->lr * (m[i] / bc1) / (sqrt(v[i] / bc2) + p->eps);
  }
  return TY_OK;
}

ty_status_t ty_ref_sgd_step(const ty_ref_sgd_params_t *p, double *param,
                            const double *grad, double *momentum_buf,
                            int64_t n) {
  if (p->momentum != 0.0 && !momentum_buf) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sgd: momentum %g needs a momentum buffer",
                          p->momentum);
  }
  if (p->nesterov && !(p->momentum > 0.0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sgd: nesterov needs momentum > 0 (got %g)",
                          p->momentum);
  }
  for (int64_t i = 0; i < n; ++i) {
    double d = grad[i] + p->weight_decay * param[i];
    if (p->momentum != 0.0) {
      momentum_buf[i] = p->momentum * momentum_buf[i] + d;
      d = p->nesterov ? d + p->momentum * momentum_buf[i] : momentum_buf[i];
    }
    param[i] -= p->lr * d;
  }
  return TY_OK;
}

double ty_ref_clip_grad_norm(int count, double *const *grads,
                             const int64_t *sizes, double max_norm) {
  double sum = 0.0;
  for (int a = 0; a < count; ++a) {
    for (int64_t i = 0; i < sizes[a]; ++i) sum += grads[a][i] * grads[a][i];
  }
  const double norm = sqrt(sum);
  if (max_norm > 0.0) {
    double coef = max_norm / (norm + 1e-6);
    /* Clamp the way torch.clamp(max=1) does: NaN stays NaN. */
    if (coef > 1.0) coef = 1.0;
    for (int a = 0; a < count; ++a) {
      for (int64_t i = 0; i < sizes[a]; ++i) grads[a][i] *= coef;
    }
  }
  return norm;
}
