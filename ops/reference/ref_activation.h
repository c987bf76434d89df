/* Reference activations: gelu (tanh approximation), silu and swiglu,
 * forward and backward. Part of ty_ops_reference (f64, naive, the spec).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: none (void). Outputs are overwritten; an output may alias the
 * input of the same index space.
 */
#ifndef TY_OPS_REFERENCE_REF_ACTIVATION_H_
#define TY_OPS_REFERENCE_REF_ACTIVATION_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2's gelu,
 * PyTorch's gelu(approximate="tanh")). */
void ty_ref_gelu_forward(const double *x, int64_t n, double *y);
/* dx = dy * d/dx gelu(x). */
void ty_ref_gelu_backward(const double *x, const double *dy, int64_t n,
                          double *dx);

/* y = x * sigmoid(x). */
void ty_ref_silu_forward(const double *x, int64_t n, double *y);
/* dx = dy * sigmoid(x) (1 + x (1 - sigmoid(x))). */
void ty_ref_silu_backward(const double *x, const double *dy, int64_t n,
                          double *dx);

/* out = silu(gate) * up (Llama's MLP; gate and up are separate arrays). */
void ty_ref_swiglu_forward(const double *gate, const double *up, int64_t n,
                           double *out);
/* dgate = dout * up * silu'(gate);  dup = dout * silu(gate). */
void ty_ref_swiglu_backward(const double *gate, const double *up,
                            const double *dout, int64_t n, double *dgate,
                            double *dup);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_ACTIVATION_H_ */
