/* Optimizer updates and global-norm clipping (PyTorch semantics).
 *
 *   adamw: p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
 *          p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *   sgd:   g <- g + wd p;  buf <- mu buf + g   (when mu != 0)
 *          p <- p - lr (nesterov ? g + mu buf : (mu != 0 ? buf : g))
 *   clip:  norm = sqrt(sum_i sum g_i^2);  when max_norm > 0,
 *          g_i <- g_i min(1, max_norm / (norm + 1e-6))
 *
 * Every output may be the storage of the state input it replaces (the
 * executor updates parameters and moments in place), so each element reads
 * all its inputs before writing. The per-element arithmetic is f64 — these
 * loops are bound by memory traffic, and f64 makes an update match the f64
 * reference before the final rounding — over f32 moments and f32/bf16/f16
 * parameters. The clipping norm is summed in f64 per thread, partials added
 * in thread order. Checked against the reference at normalised mean squared
 * error < 1e-12 (f32 storage). */
#include <math.h>
#include <stdlib.h>

#include "backends/cpu/cpu_kernels.h"

static float cpu_scalar_f32(const cpu_node_ctx_t *c, uint32_t i) {
  return *(const float *)cpu_in_data(c, i);
}

ty_abi_status_t cpu_kernel_adamw_update(const cpu_node_ctx_t *c) {
  /* param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step */
  const ty_abi_value_t *pv = cpu_in(c, 0), *gv = cpu_in(c, 1);
  const void *pp = cpu_in_data(c, 0), *pg = cpu_in_data(c, 1);
  const float *m = cpu_in_data(c, 2), *v = cpu_in_data(c, 3);
  void *po = cpu_out_data(c, 0);
  float *mo = cpu_out_data(c, 1), *vo = cpu_out_data(c, 2);
  const ty_dtype_t pod = cpu_out(c, 0)->dtype;
  const double lr = cpu_scalar_f32(c, 4), b1 = cpu_scalar_f32(c, 5), b2 = cpu_scalar_f32(c, 6);
  const double eps = cpu_scalar_f32(c, 7), wd = cpu_scalar_f32(c, 8);
  const int64_t step = *(const int64_t *)cpu_in_data(c, 9);
  if (step < 1) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: " CPU_NODE_FMT ": step %lld must be >= 1 (it counts "
                           "this update)",
                           CPU_NODE_ARGS(c), (long long)step);
  }
  const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
  const double decay = 1.0 - lr * wd;
  const int64_t n = cpu_numel(pv), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
  const int nt = cpu_threads(c, n, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float sp[CPU_CHUNK], sg[CPU_CHUNK], so[CPU_CHUNK];
    const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    /* Converted copies (or the storage, for f32) are read before any write
     * of this chunk; for f32 the element loop reads p[j] before p[j] is
     * written, which is all an in-place update needs. */
    const float *p = cpu_span_in(pp, pv->dtype, off, len, sp);
    const float *g = cpu_span_in(pg, gv->dtype, off, len, sg);
    float *out = cpu_span_out(po, pod, off, so);
    for (int64_t j = 0; j < len; ++j) {
      const double gj = g[j];
      const double mj = b1 * m[off + j] + (1.0 - b1) * gj;
      const double vj = b2 * v[off + j] + (1.0 - b2) * gj * gj;
      const double pj = (double)p[j] * decay - lr * (mj / bc1) / (sqrt(vj / bc2) + eps);
      mo[off + j] = (float)mj;
      vo[off + j] = (float)vj;
      out[j] = (float)pj;
    }
    cpu_span_out_done(po, pod, off, len, out);
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_sgd_update(const cpu_node_ctx_t *c) {
  /* param, grad, buf, lr, momentum, weight_decay */
  const ty_abi_value_t *pv = cpu_in(c, 0), *gv = cpu_in(c, 1);
  const void *pp = cpu_in_data(c, 0), *pg = cpu_in_data(c, 1);
  const float *buf = cpu_in_data(c, 2);
  void *po = cpu_out_data(c, 0);
  float *bo = cpu_out_data(c, 1);
  const ty_dtype_t pod = cpu_out(c, 0)->dtype;
  const double lr = cpu_scalar_f32(c, 3), mu = cpu_scalar_f32(c, 4), wd = cpu_scalar_f32(c, 5);
  const bool nesterov = ty_abi_node_attr_int(c->node, "nesterov", 0) != 0;
  if (nesterov && !(mu > 0.0)) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: " CPU_NODE_FMT ": nesterov needs momentum > 0 (got %g)",
                           CPU_NODE_ARGS(c), mu);
  }
  const int64_t n = cpu_numel(pv), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
  const int nt = cpu_threads(c, n, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float sp[CPU_CHUNK], sg[CPU_CHUNK], so[CPU_CHUNK];
    const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    const float *p = cpu_span_in(pp, pv->dtype, off, len, sp);
    const float *g = cpu_span_in(pg, gv->dtype, off, len, sg);
    float *out = cpu_span_out(po, pod, off, so);
    for (int64_t j = 0; j < len; ++j) {
      const double pj = p[j];
      double d = (double)g[j] + wd * pj;
      double bj = buf[off + j];
      if (mu != 0.0) {
        bj = mu * bj + d;
        d = nesterov ? d + mu * bj : bj;
      }
      bo[off + j] = (float)bj;
      out[j] = (float)(pj - lr * d);
    }
    cpu_span_out_done(po, pod, off, len, out);
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_clip_by_global_norm(const cpu_node_ctx_t *c) {
  /* max_norm, g_1..g_n -> norm, g_1'..g_n' */
  const uint32_t count = c->node->input_count - 1;
  const double max_norm = cpu_scalar_f32(c, 0);
  int64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) total += cpu_numel(cpu_in(c, i + 1));
  int nt = cpu_threads(c, total, 16384);
  if (nt > CPU_MAX_PARTS) nt = CPU_MAX_PARTS;
  double partial[CPU_MAX_PARTS] = {0.0};
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *gv = cpu_in(c, i + 1);
    const void *pg = cpu_in_data(c, i + 1);
    const int64_t n = cpu_numel(gv), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
#pragma omp parallel num_threads(nt)
    {
      float sg[CPU_CHUNK];
      double acc = 0.0;
#pragma omp for schedule(static)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
        const float *g = cpu_span_in(pg, gv->dtype, off, len, sg);
        for (int64_t j = 0; j < len; ++j) acc += (double)g[j] * g[j];
      }
      partial[cpu_thread_num()] += acc;
    }
  }
  double sum = 0.0;
  for (int t = 0; t < nt; ++t) sum += partial[t];
  const double norm = sqrt(sum);
  *(float *)cpu_out_data(c, 0) = (float)norm;
  double coef = 1.0;
  if (max_norm > 0.0) {
    coef = max_norm / (norm + 1e-6);
    if (coef > 1.0) coef = 1.0; /* like torch.clamp(max=1): NaN stays NaN */
  }
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *gv = cpu_in(c, i + 1), *ov = cpu_out(c, i + 1);
    const void *pg = cpu_in_data(c, i + 1);
    void *po = cpu_out_data(c, i + 1);
    const int64_t n = cpu_numel(gv), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      float sg[CPU_CHUNK], so[CPU_CHUNK];
      const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
      const float *g = cpu_span_in(pg, gv->dtype, off, len, sg);
      float *o = cpu_span_out(po, ov->dtype, off, so);
      for (int64_t j = 0; j < len; ++j) o[j] = (float)((double)g[j] * coef);
      cpu_span_out_done(po, ov->dtype, off, len, o);
    }
  }
  return NULL;
}
