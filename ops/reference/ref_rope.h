/* Reference rotary position embedding (rotate-half pairing, as Hugging Face
 * Llama), its inverse-rotation backward, and the inverse frequencies with
 * optional llama3 scaling. Part of ty_ops_reference (f64, naive, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for an odd or non-positive head_dim, theta <= 0,
 * or llama3 parameters that make the formula undefined (factor <= 0,
 * original_max_position_embeddings <= 0, low/high_freq_factor <= 0 or equal).
 */
#ifndef TY_OPS_REFERENCE_REF_ROPE_H_
#define TY_OPS_REFERENCE_REF_ROPE_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_ref_rope_kind_e {
  TY_REF_ROPE_DEFAULT = 0, /* inv_freq[j] = theta^(-2j/D) */
  TY_REF_ROPE_LLAMA3 = 1,  /* default, then rescaled (see ty_ref_rope_inv_freq) */
} ty_ref_rope_kind_t;

/* Hugging Face's rope_scaling / rope_parameters for rope_type "llama3". */
typedef struct ty_ref_rope_scaling_t {
  ty_ref_rope_kind_t kind;
  double factor;                           /* 8 for Llama 3.1 */
  double low_freq_factor;                  /* 1 */
  double high_freq_factor;                 /* 4 */
  double original_max_position_embeddings; /* 8192 */
} ty_ref_rope_scaling_t;

/* out_inv_freq[j] for j < head_dim / 2:
 *   inv = 1 / theta^(2j / head_dim)
 * and for llama3, exactly as transformers' _compute_llama3_parameters:
 *   low_wavelen = old_len / low_freq_factor
 *   high_wavelen = old_len / high_freq_factor
 *   wavelen = 2 pi / inv
 *   inv = wavelen > low_wavelen ? inv / factor : inv
 *   smooth = (old_len / wavelen - low_freq_factor)
 *            / (high_freq_factor - low_freq_factor)
 *   if !(wavelen < high_wavelen) && !(wavelen > low_wavelen):
 *     inv = (1 - smooth) * inv / factor + smooth * inv
 * Computed in double (transformers uses float32; expect ~1e-7 relative
 * differences against it). scaling may be NULL (default). */
ty_status_t ty_ref_rope_inv_freq(int64_t head_dim, double theta,
                                 const ty_ref_rope_scaling_t *scaling,
                                 double *out_inv_freq);

/* x and out [batch, seq, heads, head_dim]; positions [seq] (shared by the
 * batch); inv_freq [head_dim / 2]. With angle = positions[t] * inv_freq[j],
 * h = head_dim / 2 and j < h:
 *   out[j]     = x[j] cos - x[j + h] sin
 *   out[j + h] = x[j + h] cos + x[j] sin
 * out may alias x. */
ty_status_t ty_ref_rope_forward(const double *x, int64_t batch, int64_t seq,
                                int64_t heads, int64_t head_dim,
                                const int64_t *positions,
                                const double *inv_freq, double *out);

/* The transpose of the rotation, i.e. the inverse rotation applied to dout:
 *   dx[j]     =  dout[j] cos + dout[j + h] sin
 *   dx[j + h] = -dout[j] sin + dout[j + h] cos
 * dx may alias dout. */
ty_status_t ty_ref_rope_backward(const double *dout, int64_t batch,
                                 int64_t seq, int64_t heads, int64_t head_dim,
                                 const int64_t *positions,
                                 const double *inv_freq, double *dx);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_ROPE_H_ */
