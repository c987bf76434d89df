/* Reference causal grouped-query attention (see ref_attention.h for the
 * formulas). One query row at a time, all scores materialised: slow and
 * obviously correct, which is the point.
 */
#include "ops/reference/ref_attention.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static ty_status_t ty_ref_attention_check(const ty_ref_attention_shape_t *s) {
  if (s->batch <= 0 || s->q_len <= 0 || s->kv_len <= 0 || s->q_heads <= 0 ||
      s->kv_heads <= 0 || s->head_dim <= 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: sizes must be positive (batch=%lld, "
                          "q_len=%lld, kv_len=%lld, q_heads=%lld, "
                          "kv_heads=%lld, head_dim=%lld)",
                          (long long)s->batch, (long long)s->q_len,
                          (long long)s->kv_len, (long long)s->q_heads,
                          (long long)s->kv_heads, (long long)s->head_dim);
  }
  if (s->q_heads % s->kv_heads != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: q_heads %lld is not a multiple of "
                          "kv_heads %lld",
                          (long long)s->q_heads, (long long)s->kv_heads);
  }
  if (s->kv_len < s->q_len) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: kv_len %lld is shorter than q_len %lld",
                          (long long)s->kv_len, (long long)s->q_len);
  }
  if (s->valid_len != 0 && (s->valid_len < s->q_len || s->valid_len > s->kv_len)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: kv_len input %lld must lie in [%lld, %lld] "
                          "(the query length and the key length)",
                          (long long)s->valid_len, (long long)s->q_len,
                          (long long)s->kv_len);
  }
  if (s->window < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: window %lld is negative",
                          (long long)s->window);
  }
  return TY_OK;
}

static bool ty_ref_attention_visible(const ty_ref_attention_shape_t *s,
                                     int64_t t, int64_t key) {
  int64_t valid = s->valid_len ? s->valid_len : s->kv_len;
  int64_t pos = t + (valid - s->q_len);
  if (key > pos) return false;
  return s->window == 0 || pos - key < s->window;
}

static int64_t ty_ref_q_offset(const ty_ref_attention_shape_t *s, int64_t b,
                               int64_t t, int64_t h) {
  return ((b * s->q_len + t) * s->q_heads + h) * s->head_dim;
}

static int64_t ty_ref_kv_offset(const ty_ref_attention_shape_t *s, int64_t b,
                                int64_t key, int64_t kvh) {
  return ((b * s->kv_len + key) * s->kv_heads + kvh) * s->head_dim;
}

static double ty_ref_dot(const double *a, const double *b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

static double ty_ref_score(const ty_ref_attention_shape_t *s, const double *qr,
                           const double *k, int64_t b, int64_t key,
                           int64_t kvh) {
  return s->scale * ty_ref_dot(qr, k + ty_ref_kv_offset(s, b, key, kvh),
                               s->head_dim);
}

ty_status_t ty_ref_attention_forward(const ty_ref_attention_shape_t *s,
                                     const double *q, const double *k,
                                     const double *v, double *out,
                                     double *lse) {
  TY_RETURN_IF_ERROR(ty_ref_attention_check(s));
  const int64_t group = s->q_heads / s->kv_heads, dim = s->head_dim;
  for (int64_t b = 0; b < s->batch; ++b) {
    for (int64_t h = 0; h < s->q_heads; ++h) {
      const int64_t kvh = h / group;
      for (int64_t t = 0; t < s->q_len; ++t) {
        const double *qr = q + ty_ref_q_offset(s, b, t, h);
        double m = -INFINITY;
        for (int64_t key = 0; key < s->kv_len; ++key) {
          if (!ty_ref_attention_visible(s, t, key)) continue;
          double sc = ty_ref_score(s, qr, k, b, key, kvh);
          m = sc > m ? sc : m;
        }
        double z = 0.0;
        for (int64_t key = 0; key < s->kv_len; ++key) {
          if (!ty_ref_attention_visible(s, t, key)) continue;
          z += exp(ty_ref_score(s, qr, k, b, key, kvh) - m);
        }
        double row_lse = m + log(z);
        double *o = out + ty_ref_q_offset(s, b, t, h);
        for (int64_t d = 0; d < dim; ++d) o[d] = 0.0;
        for (int64_t key = 0; key < s->kv_len; ++key) {
          if (!ty_ref_attention_visible(s, t, key)) continue;
          double p = exp(ty_ref_score(s, qr, k, b, key, kvh) - row_lse);
          const double *vr = v + ty_ref_kv_offset(s, b, key, kvh);
          for (int64_t d = 0; d < dim; ++d) o[d] += p * vr[d];
        }
        if (lse) lse[(b * s->q_heads + h) * s->q_len + t] = row_lse;
      }
    }
  }
  return TY_OK;
}

ty_status_t ty_ref_attention_backward(const ty_ref_attention_shape_t *s,
                                      const double *q, const double *k,
                                      const double *v, const double *lse,
                                      const double *dout, double *dq,
                                      double *dk, double *dv) {
  TY_RETURN_IF_ERROR(ty_ref_attention_check(s));
  const int64_t group = s->q_heads / s->kv_heads, dim = s->head_dim;
  const size_t kv_count =
      (size_t)(s->batch * s->kv_len * s->kv_heads * dim);
  memset(dk, 0, kv_count * sizeof(double));
  memset(dv, 0, kv_count * sizeof(double));
  for (int64_t b = 0; b < s->batch; ++b) {
    for (int64_t h = 0; h < s->q_heads; ++h) {
      const int64_t kvh = h / group;
      for (int64_t t = 0; t < s->q_len; ++t) {
        const double *qr = q + ty_ref_q_offset(s, b, t, h);
        const double *dor = dout + ty_ref_q_offset(s, b, t, h);
        double *dqr = dq + ty_ref_q_offset(s, b, t, h);
        const double row_lse = lse[(b * s->q_heads + h) * s->q_len + t];
        /* delta = sum_s p_s dp_s, needed before any ds_s. */
        double delta = 0.0;
        for (int64_t key = 0; key < s->kv_len; ++key) {
          if (!ty_ref_attention_visible(s, t, key)) continue;
          double p = exp(ty_ref_score(s, qr, k, b, key, kvh) - row_lse);
          delta += p * ty_ref_dot(dor, v + ty_ref_kv_offset(s, b, key, kvh), dim);
        }
        for (int64_t d = 0; d < dim; ++d) dqr[d] = 0.0;
        for (int64_t key = 0; key < s->kv_len; ++key) {
          if (!ty_ref_attention_visible(s, t, key)) continue;
          const int64_t off = ty_ref_kv_offset(s, b, key, kvh);
          double p = exp(ty_ref_score(s, qr, k, b, key, kvh) - row_lse);
          double dp = ty_ref_dot(dor, v + off, dim);
          double ds = p * (dp - delta);
          for (int64_t d = 0; d < dim; ++d) {
            dqr[d] += s->scale * ds * k[off + d];
            dk[off + d] += s->scale * ds * qr[d];
            dv[off + d] += p * dor[d];
          }
        }
      }
    }
  }
  return TY_OK;
}
