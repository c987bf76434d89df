/* Activations and softmax, forward and backward.
 *
 *   gelu (tanh): u = s (x + c x^3), s = sqrt(2/pi), c = 0.044715
 *                y = 0.5 x (1 + tanh u)
 *                dx = dy (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) s (1 + 3 c x^2))
 *                computed as y = x g, dx = dy (g + 2 x g (1 - g) s (1 + 3 c x^2))
 *                with g = sig(2u) = (1 + tanh u) / 2: one expf instead of
 *                glibc's slow tanhf, and no cancellation in 1 + tanh u for
 *                large negative x.
 *   silu:        y = x sig(x),  dx = dy sig(x) (1 + x (1 - sig(x)))
 *   swiglu:      y = silu(gate) up,  dgate = dy up silu'(gate),  dup = dy silu(gate)
 *   softmax:     y = exp(x - max) / sum exp(x - max)   (last axis)
 *                dx = y (dy - sum(dy y))
 *
 * Elementwise ops run in chunks over threads with cpu_expf (vectorised,
 * 2.4e-7 relative); softmax runs a row per step with the sums in f64. Checked
 * against the f64 reference at normalised mean squared error < 1e-10 (f32
 * storage). */
#include <math.h>
#include <stdlib.h>

#include "cpu_kernels.h"

#define CPU_GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define CPU_GELU_C 0.044715f

typedef enum {
  CPU_GELU, CPU_GELU_BWD, CPU_SILU, CPU_SILU_BWD, CPU_SWIGLU, CPU_SWIGLU_BWD,
} cpu_act_t;

static inline float cpu_sigmoid(float x) { return 1.0f / (1.0f + cpu_expf(-x)); }

/* One chunk of `kind`: in/out as the op orders its operands. */
CPU_BODY void cpu_act_chunk_body(cpu_act_t kind, int64_t len, const float *restrict in0,
                                 const float *restrict in1, const float *restrict in2,
                                 float *restrict out0, float *restrict out1) {
  switch (kind) {
    case CPU_GELU:
      for (int64_t j = 0; j < len; ++j) {
        const float x = in0[j], u = CPU_GELU_S * (x + CPU_GELU_C * x * x * x);
        out0[j] = x * cpu_sigmoid(2.0f * u);
      }
      break;
    case CPU_GELU_BWD: /* (dy, x) */
      for (int64_t j = 0; j < len; ++j) {
        const float x = in1[j], u = CPU_GELU_S * (x + CPU_GELU_C * x * x * x);
        /* g = 1/(1+e), g(1-g) = e/(1+e)^2 with e = exp(-2u): no 1 - g
         * cancellation; e = inf (u << 0) gives g = 0 and g(1-g) = 0. */
        const float e = cpu_expf(-2.0f * u), g = 1.0f / (1.0f + e);
        const float gg = cpu_select_f32(e == INFINITY, 0.0f, e * g * g);
        const float du = CPU_GELU_S * (1.0f + 3.0f * CPU_GELU_C * x * x);
        out0[j] = in0[j] * (g + 2.0f * x * gg * du);
      }
      break;
    case CPU_SILU:
      for (int64_t j = 0; j < len; ++j) out0[j] = in0[j] * cpu_sigmoid(in0[j]);
      break;
    case CPU_SILU_BWD: /* (dy, x) */
      for (int64_t j = 0; j < len; ++j) {
        const float x = in1[j], sg = cpu_sigmoid(x);
        out0[j] = in0[j] * (sg * (1.0f + x * (1.0f - sg)));
      }
      break;
    case CPU_SWIGLU: /* (gate, up) */
      for (int64_t j = 0; j < len; ++j) out0[j] = in0[j] * cpu_sigmoid(in0[j]) * in1[j];
      break;
    case CPU_SWIGLU_BWD: /* (dy, gate, up) -> (dgate, dup) */
      for (int64_t j = 0; j < len; ++j) {
        const float d = in0[j], g = in1[j], u = in2[j], sg = cpu_sigmoid(g);
        out0[j] = d * u * (sg * (1.0f + g * (1.0f - sg)));
        out1[j] = d * (g * sg);
      }
      break;
  }
}
CPU_MULTIVERSION(cpu_act_chunk, (cpu_act_t kind, int64_t len, const float *restrict in0,
                  const float *restrict in1, const float *restrict in2, float *restrict out0,
                  float *restrict out1),
                 (kind, len, in0, in1, in2, out0, out1))

/* Runs `kind` over chunks. Inputs and outputs are in the op's order; every
 * float operand has the element count of output 0. */
static ty_abi_status_t cpu_activation(const cpu_node_ctx_t *c, cpu_act_t kind) {
  const uint32_t nin = c->node->input_count, nout = c->node->output_count;
  const int64_t n = cpu_numel(cpu_out(c, 0)), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
  const int nt = cpu_threads(c, n, 8192);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float si[3][CPU_CHUNK], so[2][CPU_CHUNK];
    const float *in[3] = {NULL, NULL, NULL};
    float *out[2] = {so[0], so[1]};
    int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    for (uint32_t i = 0; i < nin && i < 3; ++i) {
      in[i] = cpu_span_in(cpu_in_data(c, i), cpu_in(c, i)->dtype, off, len, si[i]);
    }
    for (uint32_t o = 0; o < nout && o < 2; ++o) {
      out[o] = cpu_span_out(cpu_out_data(c, o), cpu_out(c, o)->dtype, off, so[o]);
    }
    cpu_act_chunk(kind, len, in[0], in[1], in[2], out[0], out[1]);
    for (uint32_t o = 0; o < nout && o < 2; ++o) {
      cpu_span_out_done(cpu_out_data(c, o), cpu_out(c, o)->dtype, off, len, out[o]);
    }
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_gelu(const cpu_node_ctx_t *c) {
  return cpu_activation(c, CPU_GELU);
}
ty_abi_status_t cpu_kernel_gelu_backward(const cpu_node_ctx_t *c) {
  return cpu_activation(c, CPU_GELU_BWD);
}
ty_abi_status_t cpu_kernel_silu(const cpu_node_ctx_t *c) {
  return cpu_activation(c, CPU_SILU);
}
ty_abi_status_t cpu_kernel_silu_backward(const cpu_node_ctx_t *c) {
  return cpu_activation(c, CPU_SILU_BWD);
}
ty_abi_status_t cpu_kernel_swiglu(const cpu_node_ctx_t *c) {
  return cpu_activation(c, CPU_SWIGLU);
}
ty_abi_status_t cpu_kernel_swiglu_backward(const cpu_node_ctx_t *c) {
  return cpu_activation(c, CPU_SWIGLU_BWD);
}

/* y = softmax(a) over one row (forward), or y = b (a - sum(a b)) with
 * a = dy, b = the forward output (backward). */
CPU_BODY void cpu_softmax_row_body(bool backward, int64_t cols, const float *restrict a,
                                   const float *restrict b, float *restrict y) {
  if (!backward) {
    const float m = cpu_max_f32(a, cols);
    for (int64_t j = 0; j < cols; ++j) y[j] = cpu_expf(a[j] - m);
    const float inv = (float)(1.0 / cpu_sum_f64(y, cols));
    for (int64_t j = 0; j < cols; ++j) y[j] *= inv;
  } else {
    const float d = (float)cpu_dot_f64(a, b, cols);
    for (int64_t j = 0; j < cols; ++j) y[j] = b[j] * (a[j] - d);
  }
}
CPU_MULTIVERSION(cpu_softmax_row, (bool backward, int64_t cols, const float *restrict a,
                  const float *restrict b, float *restrict y),
                 (backward, cols, a, b, y))

/* Softmax over the last axis, forward (x -> y) or backward (dy, y -> dx). */
static ty_abi_status_t cpu_softmax(const cpu_node_ctx_t *c, bool backward) {
  const ty_abi_value_t *out = cpu_out(c, 0);
  const int64_t rows = cpu_rows(out), cols = cpu_last_dim(out);
  if (rows == 0 || cols == 0) return NULL;
  const int nt = cpu_threads(c, rows * cols, 8192);
  const size_t c1 = (size_t)cols;
  float *scratch = malloc((size_t)nt * c1 * 3 * sizeof(float));
  if (!scratch) return cpu_oom(c);
  const ty_abi_value_t *v0 = cpu_in(c, 0), *v1 = backward ? cpu_in(c, 1) : NULL;
  const void *p0 = cpu_in_data(c, 0), *p1 = backward ? cpu_in_data(c, 1) : NULL;
  void *py = cpu_out_data(c, 0);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float *s0 = scratch + (size_t)cpu_thread_num() * c1 * 3, *s1 = s0 + c1, *so = s1 + c1;
    const float *a = cpu_span_in(p0, v0->dtype, r * cols, cols, s0);
    const float *b = backward ? cpu_span_in(p1, v1->dtype, r * cols, cols, s1) : NULL;
    float *y = cpu_span_out(py, out->dtype, r * cols, so);
    cpu_softmax_row(backward, cols, a, b, y);
    cpu_span_out_done(py, out->dtype, r * cols, cols, y);
  }
  free(scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_softmax(const cpu_node_ctx_t *c) { return cpu_softmax(c, false); }
ty_abi_status_t cpu_kernel_softmax_backward(const cpu_node_ctx_t *c) {
  return cpu_softmax(c, true);
}
