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
  if (!s->non_causal && s->kv_len < s->q_len) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: kv_len %lld is shorter than q_len %lld",
                          (long long)s->kv_len, (long long)s->q_len);
  }
  if (s->valid_len != 0 &&
      (s->valid_len < (s->non_causal ? 1 : s->q_len) || s->valid_len > s->kv_len)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: kv_len input %lld must lie in [%lld, %lld] "
                          "(the query length and the key length)",
                          (long long)s->valid_len, (long long)s->q_len,
                          (long long)s->kv_len);
  }
  if (s->window < 0 || (s->window > 0 && s->non_causal)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attention: window %lld is negative or set without the "
                          "causal mask",
                          (long long)s->window);
  }
  return TY_OK;
}

static bool ty_ref_attention_visible(const ty_ref_attention_shape_t *s,
                                     int64_t t, int64_t key) {
  int64_t valid = s->valid_len ? s->valid_len : s->kv_len;
  if (s->non_causal) return key < valid;
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
  return ty_ref_attention_backward_dlse(s, q, k, v, lse, dout, NULL, dq, dk, dv);
}

ty_status_t ty_ref_attention_backward_dlse(const ty_ref_attention_shape_t *s,
                                           const double *q, const double *k,
                                           const double *v, const double *lse,
                                           const double *dout, const double *dlse,
                                           double *dq, double *dk, double *dv) {
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
        const int64_t row = (b * s->q_heads + h) * s->q_len + t;
        const double row_lse = lse[row];
        /* delta = sum_s p_s dp_s - dlse, needed before any ds_s. */
        double delta = dlse ? -dlse[row] : 0.0;
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

/* Part x's weight exp(lse_x - lse); 0 for a part that saw no key. */
static double ty_ref_merge_weight(double lse_x, double lse) {
  return lse_x == -INFINITY ? 0.0 : exp(lse_x - lse);
}

void ty_ref_attention_merge(int64_t rows, int64_t heads, int64_t q_len, int64_t dim,
                            const double *out_a, const double *lse_a, const double *out_b,
                            const double *lse_b, double *out, double *lse) {
  for (int64_t r = 0; r < rows * heads * q_len; ++r) {
    const int64_t b = r / (heads * q_len), h = r / q_len % heads, t = r % q_len;
    const int64_t o = ((b * q_len + t) * heads + h) * dim;
    const double la = lse_a[r], lb = lse_b[r], m = la > lb ? la : lb;
    if (m == -INFINITY) { /* neither part saw a key: empty, as both were */
      lse[r] = -INFINITY;
      for (int64_t d = 0; d < dim; ++d) out[o + d] = 0.0;
      continue;
    }
    lse[r] = m + log(exp(la - m) + exp(lb - m));
    const double wa = ty_ref_merge_weight(la, lse[r]), wb = ty_ref_merge_weight(lb, lse[r]);
    for (int64_t d = 0; d < dim; ++d) {
      out[o + d] = (wa > 0 ? wa * out_a[o + d] : 0.0) + (wb > 0 ? wb * out_b[o + d] : 0.0);
    }
  }
}

void ty_ref_attention_merge_backward(int64_t rows, int64_t heads, int64_t q_len, int64_t dim,
                                     const double *out_a, const double *lse_a,
                                     const double *out_b, const double *lse_b,
                                     const double *out, const double *lse, const double *dout,
                                     const double *dlse, double *dout_a, double *dlse_a,
                                     double *dout_b, double *dlse_b) {
  for (int64_t r = 0; r < rows * heads * q_len; ++r) {
    const int64_t b = r / (heads * q_len), h = r / q_len % heads, t = r % q_len;
    const int64_t o = ((b * q_len + t) * heads + h) * dim;
    const double *parts_out[2] = {out_a, out_b}, *parts_lse[2] = {lse_a, lse_b};
    double *douts[2] = {dout_a, dout_b}, *dlses[2] = {dlse_a, dlse_b};
    for (int p = 0; p < 2; ++p) {
      const double w =
          lse[r] == -INFINITY ? 0.0 : ty_ref_merge_weight(parts_lse[p][r], lse[r]);
      /* d out / d lse_x = w_x (out_x - out), d lse / d lse_x = w_x */
      double acc = dlse ? dlse[r] : 0.0;
      for (int64_t d = 0; d < dim; ++d) {
        const double g = dout ? dout[o + d] : 0.0;
        douts[p][o + d] = w * g;
        if (w > 0) acc += g * (parts_out[p][o + d] - out[o + d]);
      }
      dlses[p][r] = w * acc;
    }
  }
}
