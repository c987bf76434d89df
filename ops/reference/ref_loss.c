/* Reference per-token cross-entropy (see ref_loss.h).
 *
 *   loss_n = log sum_v exp(z_nv) - z_{n,t_n}
 *   d loss_n / d z_nv = softmax(z_n)_v - [v == t_n]
 */
#include "ops/reference/ref_loss.h"

#include <math.h>

static ty_status_t ty_ref_cross_entropy_check(const int64_t *targets,
                                              int64_t rows, int64_t vocab) {
  for (int64_t n = 0; n < rows; ++n) {
    if (targets[n] >= vocab) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "cross_entropy: targets[%lld] = %lld is outside "
                            "the vocabulary [0, %lld) (negative means ignored)",
                            (long long)n, (long long)targets[n],
                            (long long)vocab);
    }
  }
  return TY_OK;
}

static double ty_ref_logsumexp(const double *z, int64_t count) {
  double m = z[0];
  for (int64_t v = 1; v < count; ++v) m = z[v] > m ? z[v] : m;
  double s = 0.0;
  for (int64_t v = 0; v < count; ++v) s += exp(z[v] - m);
  return m + log(s);
}

ty_status_t ty_ref_cross_entropy_forward(const double *logits,
                                         const int64_t *targets, int64_t rows,
                                         int64_t vocab, double *loss) {
  TY_RETURN_IF_ERROR(ty_ref_cross_entropy_check(targets, rows, vocab));
  for (int64_t n = 0; n < rows; ++n) {
    const double *z = logits + n * vocab;
    loss[n] = targets[n] < 0 ? 0.0 : ty_ref_logsumexp(z, vocab) - z[targets[n]];
  }
  return TY_OK;
}

ty_status_t ty_ref_cross_entropy_backward(const double *logits,
                                          const int64_t *targets,
                                          const double *dloss, int64_t rows,
                                          int64_t vocab, double *dlogits) {
  TY_RETURN_IF_ERROR(ty_ref_cross_entropy_check(targets, rows, vocab));
  for (int64_t n = 0; n < rows; ++n) {
    const double *z = logits + n * vocab;
    double *dz = dlogits + n * vocab;
    if (targets[n] < 0) {
      for (int64_t v = 0; v < vocab; ++v) dz[v] = 0.0;
      continue;
    }
    double lse = ty_ref_logsumexp(z, vocab);
    for (int64_t v = 0; v < vocab; ++v) {
      double p = exp(z[v] - lse);
      dz[v] = dloss[n] * (p - (v == targets[n] ? 1.0 : 0.0));
    }
  }
  return TY_OK;
}
