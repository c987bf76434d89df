/* attention_merge and its backward: the exact merge of two partial
 * attentions over disjoint keys (ops/reference/ref_attention.h has the
 * formulas), one (batch, head, query) row at a time.
 *
 *   lse = m + log(exp(lse_a - m) + exp(lse_b - m)),  m = max(lse_a, lse_b)
 *   out = w_a out_a + w_b out_b,  w_x = exp(lse_x - lse)
 *   dout_x = w_x dout,  dlse_x = w_x (dlse + <dout, out_x - out>)
 * A part with lse_x = -inf has weight 0 and its out_x is never read; a row
 * where both are -inf merges to lse = -inf, out = 0, gradients 0.
 * Weights and lse are formed in f64 (they are per row, so cheap) and the
 * row arithmetic is f32 over the storage dtype, as the other kernels. */
#include <math.h>
#include <stdlib.h>

#include "cpu_kernels.h"

typedef struct {
  int64_t rows, heads, q_len, dim;
} cpu_merge_shape_t;

static cpu_merge_shape_t cpu_merge_shape(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *oa = cpu_in(c, 0);
  return (cpu_merge_shape_t){oa->dims[0], oa->dims[2], oa->dims[1], oa->dims[3]};
}

/* Row r of lse [B, H, T] -> element offset of its [B, T, H, D] vector. */
static inline int64_t cpu_merge_vec(const cpu_merge_shape_t *s, int64_t r) {
  const int64_t b = r / (s->heads * s->q_len), h = r / s->q_len % s->heads,
                t = r % s->q_len;
  return ((b * s->q_len + t) * s->heads + h) * s->dim;
}

static inline double cpu_merge_weight(float lse_x, double lse) {
  return lse_x == -INFINITY || lse == -INFINITY ? 0.0 : exp((double)lse_x - lse);
}

ty_abi_status_t cpu_kernel_attention_merge(const cpu_node_ctx_t *c) {
  const cpu_merge_shape_t s = cpu_merge_shape(c);
  const ty_abi_value_t *oa = cpu_in(c, 0), *ob = cpu_in(c, 2), *ov = cpu_out(c, 0);
  const void *pa = cpu_in_data(c, 0), *pb = cpu_in_data(c, 2);
  const float *la = cpu_in_data(c, 1), *lb = cpu_in_data(c, 3);
  void *pout = cpu_out_data(c, 0);
  float *lse = cpu_out_data(c, 1);
  const int64_t n = s.rows * s.heads * s.q_len, D = s.dim;
  float *scratch = malloc((size_t)(c->threads > 0 ? c->threads : 1) * 3 * (size_t)(D ? D : 1) *
                          sizeof(float));
  if (!scratch) return cpu_oom(c);
  const int nt = cpu_threads(c, n * D, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    float *ws = scratch + (size_t)cpu_thread_num() * 3 * (size_t)D;
    const int64_t o = cpu_merge_vec(&s, r);
    const double m = la[r] > lb[r] ? la[r] : lb[r];
    const double l = m == -INFINITY ? -INFINITY : m + log(exp(la[r] - m) + exp(lb[r] - m));
    lse[r] = (float)l;
    const float wa = (float)cpu_merge_weight(la[r], l), wb = (float)cpu_merge_weight(lb[r], l);
    const float *xa = wa > 0 ? cpu_span_in(pa, oa->dtype, o, D, ws) : NULL;
    const float *xb = wb > 0 ? cpu_span_in(pb, ob->dtype, o, D, ws + D) : NULL;
    float *y = cpu_span_out(pout, ov->dtype, o, ws + 2 * D);
    for (int64_t d = 0; d < D; ++d) {
      y[d] = (xa ? wa * xa[d] : 0.0f) + (xb ? wb * xb[d] : 0.0f);
    }
    cpu_span_out_done(pout, ov->dtype, o, D, y);
  }
  free(scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_attention_merge_backward(const cpu_node_ctx_t *c) {
  /* inputs: out_a, lse_a, out_b, lse_b, out, lse, dout?, dlse?;
   * outputs: dout_a, dlse_a, dout_b, dlse_b */
  const cpu_merge_shape_t s = cpu_merge_shape(c);
  const ty_abi_value_t *vx[2] = {cpu_in(c, 0), cpu_in(c, 2)}, *vout = cpu_in(c, 4);
  const ty_abi_value_t *vdout = cpu_in(c, 6);
  const void *px[2] = {cpu_in_data(c, 0), cpu_in_data(c, 2)}, *pout = cpu_in_data(c, 4);
  const void *pdout = cpu_in_data(c, 6);
  const float *lx[2] = {cpu_in_data(c, 1), cpu_in_data(c, 3)}, *lse = cpu_in_data(c, 5);
  const float *dlse = cpu_in_data(c, 7);
  const ty_abi_value_t *vdx[2] = {cpu_out(c, 0), cpu_out(c, 2)};
  void *pdx[2] = {cpu_out_data(c, 0), cpu_out_data(c, 2)};
  float *dlx[2] = {cpu_out_data(c, 1), cpu_out_data(c, 3)};
  const int64_t n = s.rows * s.heads * s.q_len, D = s.dim;
  float *scratch = malloc((size_t)(c->threads > 0 ? c->threads : 1) * 4 * (size_t)(D ? D : 1) *
                          sizeof(float));
  if (!scratch) return cpu_oom(c);
  const int nt = cpu_threads(c, n * D, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    float *ws = scratch + (size_t)cpu_thread_num() * 4 * (size_t)D;
    const int64_t o = cpu_merge_vec(&s, r);
    const float *g = NULL, *y = NULL;
    if (pdout) {
      g = cpu_span_in(pdout, vdout->dtype, o, D, ws);
      y = cpu_span_in(pout, vout->dtype, o, D, ws + D);
    }
    for (int p = 0; p < 2; ++p) {
      const float w = (float)cpu_merge_weight(lx[p][r], lse[r]);
      float *dx = cpu_span_out(pdx[p], vdx[p]->dtype, o, ws + 3 * D);
      double acc = dlse ? dlse[r] : 0.0;
      if (g && w > 0) {
        const float *x = cpu_span_in(px[p], vx[p]->dtype, o, D, ws + 2 * D);
        for (int64_t d = 0; d < D; ++d) acc += (double)g[d] * ((double)x[d] - y[d]);
      }
      for (int64_t d = 0; d < D; ++d) dx[d] = g ? w * g[d] : 0.0f;
      cpu_span_out_done(pdx[p], vdx[p]->dtype, o, D, dx);
      dlx[p][r] = (float)(w * acc);
    }
  }
  free(scratch);
  return NULL;
}
