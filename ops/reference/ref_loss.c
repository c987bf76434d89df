/* Reference per-token cross-entropy (see ref_loss.h).
 *
 *   loss_n = log sum_v exp(z_nv) - z_{n,t_n}
 *   d loss_n / d z_nv = softmax(z_n)_v - [v == t_n]
 */
#include "ops/reference/ref_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* z[0 .. n) rows of logits h[first ..] w^T into `z` (n x vocab). */
static void ty_ref_lce_logits(const double *h, const double *w, int64_t first, int64_t n,
                              int64_t channels, int64_t vocab, double *z) {
  for (int64_t r = 0; r < n; ++r) {
    const double *hr = h + (first + r) * channels;
    for (int64_t v = 0; v < vocab; ++v) {
      const double *wv = w + v * channels;
      double acc = 0.0;
      for (int64_t c = 0; c < channels; ++c) acc += hr[c] * wv[c];
      z[r * vocab + v] = acc;
    }
  }
}

static int64_t ty_ref_lce_chunk(int64_t chunk, int64_t rows) {
  return chunk <= 0 || chunk > rows ? (rows > 0 ? rows : 1) : chunk;
}

ty_status_t ty_ref_linear_cross_entropy_forward(const double *h, const double *w,
                                                const int64_t *targets, int64_t rows,
                                                int64_t channels, int64_t vocab, int64_t chunk,
                                                double *loss, double *lse) {
  TY_RETURN_IF_ERROR(ty_ref_cross_entropy_check(targets, rows, vocab));
  chunk = ty_ref_lce_chunk(chunk, rows);
  double *z = malloc((size_t)(chunk * (vocab > 0 ? vocab : 1)) * sizeof(double));
  if (!z) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "linear_cross_entropy: no memory for %lld x %lld logits",
                          (long long)chunk, (long long)vocab);
  }
  for (int64_t first = 0; first < rows; first += chunk) {
    int64_t n = rows - first < chunk ? rows - first : chunk;
    ty_ref_lce_logits(h, w, first, n, channels, vocab, z);
    for (int64_t r = 0; r < n; ++r) {
      int64_t t = targets[first + r];
      double l = t < 0 ? 0.0 : ty_ref_logsumexp(z + r * vocab, vocab);
      lse[first + r] = l;
      loss[first + r] = t < 0 ? 0.0 : l - z[r * vocab + t];
    }
  }
  free(z);
  return TY_OK;
}

ty_status_t ty_ref_linear_cross_entropy_backward(const double *h, const double *w,
                                                 const int64_t *targets, const double *lse,
                                                 const double *dloss, int64_t rows,
                                                 int64_t channels, int64_t vocab, int64_t chunk,
                                                 double *dh, double *dw) {
  TY_RETURN_IF_ERROR(ty_ref_cross_entropy_check(targets, rows, vocab));
  chunk = ty_ref_lce_chunk(chunk, rows);
  double *z = malloc((size_t)(chunk * (vocab > 0 ? vocab : 1)) * sizeof(double));
  if (!z) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "linear_cross_entropy_backward: no memory for %lld x %lld logits",
                          (long long)chunk, (long long)vocab);
  }
  memset(dw, 0, (size_t)(vocab * channels) * sizeof(double));
  for (int64_t first = 0; first < rows; first += chunk) {
    int64_t n = rows - first < chunk ? rows - first : chunk;
    ty_ref_lce_logits(h, w, first, n, channels, vocab, z);
    for (int64_t r = 0; r < n; ++r) {
      int64_t t = targets[first + r];
      double *dz = z + r * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        dz[v] = t < 0 ? 0.0 : dloss[first + r] * (exp(dz[v] - lse[first + r]) - (v == t));
      }
      double *dhr = dh + (first + r) * channels;
      const double *hr = h + (first + r) * channels;
      for (int64_t c = 0; c < channels; ++c) dhr[c] = 0.0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double *wv = w + v * channels;
        double *dwv = dw + v * channels;
        for (int64_t c = 0; c < channels; ++c) {
          dhr[c] += dz[v] * wv[c];
          dwv[c] += dz[v] * hr[c];
        }
      }
    }
  }
  free(z);
  return TY_OK;
}
