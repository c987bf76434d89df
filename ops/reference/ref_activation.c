/* Reference gelu (tanh), silu and swiglu (see ref_activation.h).
 *
 *   gelu:  u = s (x + c x^3), s = sqrt(2/pi), c = 0.044715
 *          y = 0.5 x (1 + tanh u)
 *          y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 c x^2)
 *   silu:  y = x sig(x),  y' = sig(x) (1 + x (1 - sig(x)))
 */
#include "ops/reference/ref_activation.h"

#include <math.h>

#define TY_REF_GELU_C 0.044715
/* sqrt(2 / pi), spelled out so no libm call decides the last bit. */
#define TY_REF_SQRT_2_OVER_PI 0.79788456080286535588

static double ty_ref_sigmoid(double x) {
  /* exp(-x) overflows to inf for very negative x, giving the correct 0. */
  return 1.0 / (1.0 + exp(-x));
}

static double ty_ref_silu(double x) { return x * ty_ref_sigmoid(x); }

static double ty_ref_silu_grad(double x) {
  double s = ty_ref_sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

void ty_ref_gelu_forward(const double *x, int64_t n, double *y) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    double u = TY_REF_SQRT_2_OVER_PI * (v + TY_REF_GELU_C * v * v * v);
    y[i] = 0.5 * v * (1.0 + tanh(u));
  }
}

void ty_ref_gelu_backward(const double *x, const double *dy, int64_t n,
                          double *dx) {
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    double u = TY_REF_SQRT_2_OVER_PI * (v + TY_REF_GELU_C * v * v * v);
    double t = tanh(u);
    double du = TY_REF_SQRT_2_OVER_PI * (1.0 + 3.0 * TY_REF_GELU_C * v * v);
    dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du);
  }
}

void ty_ref_silu_forward(const double *x, int64_t n, double *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ty_ref_silu(x[i]);
}

void ty_ref_silu_backward(const double *x, const double *dy, int64_t n,
                          double *dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * ty_ref_silu_grad(x[i]);
}

void ty_ref_swiglu_forward(const double *gate, const double *up, int64_t n,
                           double *out) {
  for (int64_t i = 0; i < n; ++i) out[i] = ty_ref_silu(gate[i]) * up[i];
}

void ty_ref_swiglu_backward(const double *gate, const double *up,
                            const double *dout, int64_t n, double *dgate,
                            double *dup) {
  for (int64_t i = 0; i < n; ++i) {
    /* Read both inputs before writing: dgate may alias gate, dup may alias up. */
    double g = gate[i], u = up[i], d = dout[i];
    dgate[i] = d * u * ty_ref_silu_grad(g);
    dup[i] = d * ty_ref_silu(g);
  }
}
