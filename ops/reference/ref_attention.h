/* Reference causal attention with grouped-query heads (one fused op), with an
 * optional sliding window and a KV-cache offset; forward and backward. Part of
 * ty_ops_reference (f64, naive, the spec).
 *
 * Layouts: q and out [batch, q_len, q_heads, head_dim]; k, v, dk, dv
 * [batch, kv_len, kv_heads, head_dim]; lse [batch, q_heads, q_len].
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for non-positive sizes, q_heads not a multiple of
 * kv_heads, kv_len < q_len, or a negative window (before anything is written).
 */
#ifndef TY_OPS_REFERENCE_REF_ATTENTION_H_
#define TY_OPS_REFERENCE_REF_ATTENTION_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_ref_attention_shape_t {
  int64_t batch;
  int64_t q_len;    /* T */
  int64_t kv_len;   /* S >= T; the last T keys belong to the queries */
  int64_t q_heads;  /* Hq, a multiple of kv_heads */
  int64_t kv_heads; /* Hkv */
  int64_t head_dim; /* D */
  double scale;     /* usually 1 / sqrt(D) */
  int64_t window;   /* 0: plain causal; > 0: sliding window of that many keys */
  int64_t valid_len; /* L in [T, S]: keys at and after L are not attended
                        (a KV cache filled up to L); 0 means L = S */
  int non_causal;    /* causal=0: every key below L is visible (no window) */
} ty_ref_attention_shape_t;

/* With L = valid_len (S when 0), query t sits at absolute position
 * P(t) = t + (L - T), so L > T models a KV cache holding L - T earlier
 * tokens, and keys at L and after (unfilled cache rows) are never visible. Query head h reads kv head
 * h / (Hq / Hkv). Key s is visible to query t iff s <= P(t) and, when
 * window > 0, P(t) - s < window. Every query sees at least key P(t).
 * With non_causal, every key s < L is visible (L may be below T then).
 *   score_s = scale * <q[t, h], k[s, kvh]>            (visible s only)
 *   lse     = log sum_s exp(score_s)
 *   out     = sum_s exp(score_s - lse) v[s, kvh]
 * lse is saved for the backward pass (may be NULL when none follows). */
ty_status_t ty_ref_attention_forward(const ty_ref_attention_shape_t *shape,
                                     const double *q, const double *k,
                                     const double *v, double *out, double *lse);

/* With p_s = exp(score_s - lse) recomputed from the saved lse:
 *   dp_s = <dout, v_s>,  delta = sum_s p_s dp_s,  ds_s = p_s (dp_s - delta)
 *   dq = scale sum_s ds_s k_s;  dk_s += scale ds_s q;  dv_s += p_s dout
 * dk and dv sum over all query heads of a kv head's group. dq, dk, dv are
 * overwritten. */
ty_status_t ty_ref_attention_backward(const ty_ref_attention_shape_t *shape,
                                      const double *q, const double *k,
                                      const double *v, const double *lse,
                                      const double *dout, double *dq,
                                      double *dk, double *dv);

/* The same with the gradient of lse, dlse ([batch, q_heads, q_len], NULL
 * for none): since d lse / d score_s = p_s, delta becomes
 * sum_s p_s dp_s - dlse. */
ty_status_t ty_ref_attention_backward_dlse(const ty_ref_attention_shape_t *shape,
                                           const double *q, const double *k,
                                           const double *v, const double *lse,
                                           const double *dout, const double *dlse,
                                           double *dq, double *dk, double *dv);

/* attention_merge of two partials over disjoint keys, per row (b, h, t):
 *   lse = m + log(exp(lse_a - m) + exp(lse_b - m)),  m = max(lse_a, lse_b)
 *   out = w_a out_a + w_b out_b,  w_x = exp(lse_x - lse)
 * A part with lse_x = -inf saw no key: weight 0, its out_x is not read (so
 * it may hold anything). Both -inf: lse = -inf and out = 0 (the merge of
 * two empty partials is empty, and merges on as one). out* are
 * [rows, q_len, heads, dim], lse* [rows, heads, q_len]. */
void ty_ref_attention_merge(int64_t rows, int64_t heads, int64_t q_len, int64_t dim,
                            const double *out_a, const double *lse_a, const double *out_b,
                            const double *lse_b, double *out, double *lse);

/* Its backward, from the merge's own out and lse and the gradients dout,
 * dlse (either NULL for zero):
 *   dout_x = w_x dout,  dlse_x = w_x (dlse + <dout, out_x - out>)
 * Every gradient of a part with weight 0 (or of an empty row) is 0. */
void ty_ref_attention_merge_backward(int64_t rows, int64_t heads, int64_t q_len, int64_t dim,
                                     const double *out_a, const double *lse_a,
                                     const double *out_b, const double *lse_b,
                                     const double *out, const double *lse, const double *dout,
                                     const double *dlse, double *dout_a, double *dlse_a,
                                     double *dout_b, double *dlse_b);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_ATTENTION_H_ */
