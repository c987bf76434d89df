/* Rotary position embedding (rotate-half pairing), forward and backward.
 *
 *   inv_freq[j] = theta^(-2j/D)  (llama3 scaling rescales it as transformers'
 *                 _compute_llama3_parameters), a = pos[t] inv_freq[j]
 *   y[j]       = x[j] cos a - x[j+D/2] sin a
 *   y[j+D/2]   = x[j+D/2] cos a + x[j] sin a          for j < D/2
 *   backward: the inverse rotation (angle -a) applied to dy.
 *
 * The angles and their cos/sin are computed once per (t, j) in f64 — a
 * position of a few thousand times a frequency near 1 loses digits in f32 —
 * and rounded to f32; the rotation is f32. Checked against the f64
 * reference at normalised mean squared error < 1e-10 (f32 storage). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define CPU_PI 3.14159265358979323846

/* inv_freq exactly as ops/reference/ref_rope.c computes it. */
static void cpu_rope_inv_freq(const ty_abi_node_t *node, int64_t dim, double *inv_freq) {
  const double theta = ty_desc_node_attr_float(node, "theta", 10000.0);
  const bool llama3 = strcmp(ty_desc_node_attr_string(node, "scaling", "default"), "llama3") == 0;
  const double factor = ty_desc_node_attr_float(node, "factor", 1.0);
  const double low = ty_desc_node_attr_float(node, "low_freq_factor", 1.0);
  const double high = ty_desc_node_attr_float(node, "high_freq_factor", 4.0);
  const double old_len = ty_desc_node_attr_float(node, "original_max_position", 8192.0);
  for (int64_t j = 0; j < dim / 2; ++j) {
    double inv = 1.0 / pow(theta, (double)(2 * j) / (double)dim);
    if (llama3) {
      double low_wavelen = old_len / low, high_wavelen = old_len / high;
      double wavelen = 2.0 * CPU_PI / inv;
      if (wavelen > low_wavelen) inv = inv / factor;
      double smooth = (old_len / wavelen - low) / (high - low);
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        inv = (1.0 - smooth) * inv / factor + smooth * inv;
      }
    }
    inv_freq[j] = inv;
  }
}

static ty_abi_status_t cpu_rope(const cpu_node_ctx_t *c, float sign) {
  const ty_abi_value_t *x = cpu_in(c, 0), *pos = cpu_in(c, 1), *y = cpu_out(c, 0);
  const void *px = cpu_in_data(c, 0), *ppos = cpu_in_data(c, 1);
  void *py = cpu_out_data(c, 0);
  const int64_t batch = x->dims[0], seq = x->dims[1], heads = x->dims[2], dim = x->dims[3];
  const int64_t half = dim / 2;
  if (cpu_numel(x) == 0) return NULL;
  double *inv_freq = malloc((size_t)(half > 0 ? half : 1) * sizeof(double));
  float *table = malloc((size_t)(seq * half > 0 ? seq * half : 1) * 2 * sizeof(float));
  const int nt = cpu_threads(c, batch * seq * heads * dim, 8192);
  float *scratch = malloc((size_t)nt * (size_t)dim * 2 * sizeof(float));
  if (!inv_freq || !table || !scratch) {
    free(inv_freq);
    free(table);
    free(scratch);
    return cpu_oom(c);
  }
  cpu_rope_inv_freq(c->node, dim, inv_freq);
  /* table[t][j] = (cos a, sign * sin a) */
  for (int64_t t = 0; t < seq; ++t) {
    double p = (double)cpu_load_index(ppos, pos->dtype, t);
    for (int64_t j = 0; j < half; ++j) {
      double a = p * inv_freq[j];
      table[(t * half + j) * 2] = (float)cos(a);
      table[(t * half + j) * 2 + 1] = sign * (float)sin(a);
    }
  }
  const int64_t vectors = batch * seq * heads;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t vi = 0; vi < vectors; ++vi) {
    float *xs = scratch + (size_t)cpu_thread_num() * (size_t)dim * 2, *ys = xs + dim;
    const int64_t t = (vi / heads) % seq, off = vi * dim;
    const float *xv = cpu_span_in(px, x->dtype, off, dim, xs);
    float *yv = cpu_span_out(py, y->dtype, off, ys);
    const float *cs = table + t * half * 2;
    for (int64_t j = 0; j < half; ++j) {
      float co = cs[2 * j], si = cs[2 * j + 1];
      float x0 = xv[j], x1 = xv[j + half];
      yv[j] = x0 * co - x1 * si;
      yv[j + half] = x1 * co + x0 * si;
    }
    cpu_span_out_done(py, y->dtype, off, dim, yv);
  }
  free(inv_freq);
  free(table);
  free(scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_rope(const cpu_node_ctx_t *c) { return cpu_rope(c, 1.0f); }
ty_abi_status_t cpu_kernel_rope_backward(const cpu_node_ctx_t *c) {
  return cpu_rope(c, -1.0f);
}
