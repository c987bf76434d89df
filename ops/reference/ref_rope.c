/* Reference rotary position embedding (see ref_rope.h).
 *
 * Each pair (x[j], x[j + D/2]) is rotated by angle pos * inv_freq[j]:
 *   [out_j    ]   [cos -sin] [x_j    ]
 *   [out_j+D/2] = [sin  cos] [x_j+D/2]
 * The rotation is orthogonal, so the backward pass is its transpose.
 */
#include "ops/reference/ref_rope.h"

#include <math.h>
#include <stdbool.h>

#define TY_REF_PI 3.14159265358979323846

static ty_status_t ty_ref_rope_check_dim(int64_t head_dim) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "rope: head_dim %lld must be positive and even",
                          (long long)head_dim);
  }
  return TY_OK;
}

ty_status_t ty_ref_rope_inv_freq(int64_t head_dim, double theta,
                                 const ty_ref_rope_scaling_t *scaling,
                                 double *out_inv_freq) {
  TY_RETURN_IF_ERROR(ty_ref_rope_check_dim(head_dim));
  if (!(theta > 0.0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "rope: theta %g must be positive", theta);
  }
  bool llama3 = scaling && scaling->kind == TY_REF_ROPE_LLAMA3;
  if (scaling && !llama3 && scaling->kind != TY_REF_ROPE_DEFAULT) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "rope: unknown scaling kind %d", (int)scaling->kind);
  }
  if (llama3 && (!(scaling->factor > 0.0) ||
                 !(scaling->original_max_position_embeddings > 0.0) ||
                 !(scaling->low_freq_factor > 0.0) ||
                 !(scaling->high_freq_factor > 0.0) ||
                 scaling->high_freq_factor == scaling->low_freq_factor)) {
    return ty_status_make(
        TY_CODE_INVALID_ARGUMENT,
        "rope: llama3 scaling needs factor > 0, original_max_position_"
        "embeddings > 0 and distinct positive low/high_freq_factor (got "
        "factor=%g, original_max_position_embeddings=%g, low_freq_factor=%g, "
        "high_freq_factor=%g)",
        scaling->factor, scaling->original_max_position_embeddings,
        scaling->low_freq_factor, scaling->high_freq_factor);
  }
  int64_t half = head_dim / 2;
  for (int64_t j = 0; j < half; ++j) {
    /* 2j / D as transformers writes it: arange(0, D, 2) / D. */
    double inv = 1.0 / pow(theta, (double)(2 * j) / (double)head_dim);
    if (llama3) {
      double old_len = scaling->original_max_position_embeddings;
      double low = scaling->low_freq_factor, high = scaling->high_freq_factor;
      double low_wavelen = old_len / low;
      double high_wavelen = old_len / high;
      double wavelen = 2.0 * TY_REF_PI / inv;
      if (wavelen > low_wavelen) inv = inv / scaling->factor;
      double smooth = (old_len / wavelen - low) / (high - low);
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        inv = (1.0 - smooth) * inv / scaling->factor + smooth * inv;
      }
    }
    out_inv_freq[j] = inv;
  }
  return TY_OK;
}

/* Rotates every head vector by +angle (sign = 1) or -angle (sign = -1). */
static ty_status_t ty_ref_rope_apply(const double *x, int64_t batch,
                                     int64_t seq, int64_t heads,
                                     int64_t head_dim, const int64_t *positions,
                                     const double *inv_freq, double sign,
                                     double *out) {
  TY_RETURN_IF_ERROR(ty_ref_rope_check_dim(head_dim));
  int64_t half = head_dim / 2;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        int64_t base = ((b * seq + t) * heads + h) * head_dim;
        for (int64_t j = 0; j < half; ++j) {
          double angle = (double)positions[t] * inv_freq[j];
          double c = cos(angle), s = sign * sin(angle);
          double x0 = x[base + j], x1 = x[base + j + half];
          out[base + j] = x0 * c - x1 * s;
          out[base + j + half] = x1 * c + x0 * s;
        }
      }
    }
  }
  return TY_OK;
}

ty_status_t ty_ref_rope_forward(const double *x, int64_t batch, int64_t seq,
                                int64_t heads, int64_t head_dim,
                                const int64_t *positions,
                                const double *inv_freq, double *out) {
  return ty_ref_rope_apply(x, batch, seq, heads, head_dim, positions, inv_freq,
                           1.0, out);
}

ty_status_t ty_ref_rope_backward(const double *dout, int64_t batch,
                                 int64_t seq, int64_t heads, int64_t head_dim,
                                 const int64_t *positions,
                                 const double *inv_freq, double *dx) {
  return ty_ref_rope_apply(dout, batch, seq, heads, head_dim, positions,
                           inv_freq, -1.0, dx);
}
