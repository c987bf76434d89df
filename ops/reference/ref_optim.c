/* Reference AdamW, SGD and gradient clipping (see ref_optim.h for the
 * update rules, which follow torch.optim and torch.nn.utils).
 */
#include "ops/reference/ref_optim.h"

#include <math.h>
#include <stdlib.h>

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

ty_status_t ty_ref_adafactor_step(const ty_ref_adafactor_params_t *p, double *param,
                                  const double *grad, double *row, double *col, double *v,
                                  double *m, int64_t batches, int64_t rows, int64_t cols) {
  if (p->step < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "adafactor: step %lld must be >= 1 (it counts this update)",
                          (long long)p->step);
  }
  if (m && !(p->beta1 >= 0.0 && p->beta1 < 1.0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "adafactor: beta1 %g must lie in [0, 1)",
                          p->beta1);
  }
  const int64_t n = batches * rows * cols;
  const double t = (double)p->step;
  double sumsq = 0.0;
  for (int64_t i = 0; i < n; ++i) sumsq += param[i] * param[i];
  const double rms_p = n ? sqrt(sumsq / (double)n) : 0.0;
  double rel = p->lr;
  if (p->relative_step) {
    double min_step = p->warmup_init ? 1e-6 * t : 1e-2;
    rel = fmin(min_step, 1.0 / sqrt(t));
  }
  const double alpha = rel * (p->scale_parameter ? fmax(p->eps2, rms_p) : 1.0);
  const double beta2t = 1.0 - pow(t, p->decay_rate);
  double *u = malloc((size_t)(n ? n : 1) * sizeof(double));
  if (!u) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "adafactor: out of memory");
  if (row) {
    for (int64_t b = 0; b < batches; ++b) {
      const double *g = grad + b * rows * cols;
      double *r = row + b * rows, *c = col + b * cols, *ub = u + b * rows * cols;
      for (int64_t i = 0; i < rows; ++i) {
        double acc = 0.0;
        for (int64_t j = 0; j < cols; ++j) acc += g[i * cols + j] * g[i * cols + j] + p->eps1;
        r[i] = beta2t * r[i] + (1.0 - beta2t) * (acc / (double)cols);
      }
      for (int64_t j = 0; j < cols; ++j) {
        double acc = 0.0;
        for (int64_t i = 0; i < rows; ++i) acc += g[i * cols + j] * g[i * cols + j] + p->eps1;
        c[j] = beta2t * c[j] + (1.0 - beta2t) * (acc / (double)rows);
      }
      double mean = 0.0;
      for (int64_t i = 0; i < rows; ++i) mean += r[i];
      mean /= (double)rows;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          ub[i * cols + j] = g[i * cols + j] / sqrt(r[i] / mean) / sqrt(c[j]);
        }
      }
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      v[i] = beta2t * v[i] + (1.0 - beta2t) * (grad[i] * grad[i] + p->eps1);
      u[i] = grad[i] / sqrt(v[i]);
    }
  }
  double usq = 0.0;
  for (int64_t i = 0; i < n; ++i) usq += u[i] * u[i];
  const double rms_u = n ? sqrt(usq / (double)n) : 0.0;
  const double scale = alpha / fmax(1.0, rms_u / p->clip_threshold);
  for (int64_t i = 0; i < n; ++i) {
    double ui = u[i] * scale;
    if (m) {
      m[i] = p->beta1 * m[i] + (1.0 - p->beta1) * ui;
      ui = m[i];
    }
    param[i] = param[i] - p->weight_decay * alpha * param[i] - ui;
  }
  free(u);
  return TY_OK;
}

double ty_ref_global_norm_scale(int count, const double *sumsq, double max_norm,
                                double *out_norm) {
  double sum = 0.0;
  for (int i = 0; i < count; ++i) sum += sumsq[i];
  const double norm = sqrt(sum);
  *out_norm = norm;
  if (!(max_norm > 0.0)) return 1.0;
  double coef = max_norm / (norm + 1e-6);
  return coef > 1.0 ? 1.0 : coef; /* torch.clamp(max=1): NaN stays NaN */
}
