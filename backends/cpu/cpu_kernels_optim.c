/* Optimizer updates and global-norm clipping (PyTorch semantics).
 *
 *   adamw: p <- p (1 - lr wd);  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
 *          p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
 *          computed as p - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), one
 *          square root and one division per element (as torch.optim.AdamW)
 *   sgd:   g <- g + wd p;  buf <- mu buf + g   (when mu != 0)
 *          p <- p - lr (nesterov ? g + mu buf : (mu != 0 ? buf : g))
 *   clip:  norm = sqrt(sum_i sum g_i^2);  when max_norm > 0,
 *          g_i <- g_i min(1, max_norm / (norm + 1e-6))
 *
 * Every output may be the storage of the state input it replaces (the
 * executor updates parameters and moments in place), so each element reads
 * all its inputs before writing; the element loops are marked `omp simd`
 * because an exact alias (out == in) is safe lane by lane, which the
 * compiler's own alias checks would otherwise send down a scalar path. The
 * per-element arithmetic is f64 over f32 moments and f32/bf16/f16
 * parameters: the loops are bound by memory traffic once vectorised (the
 * AdamW and clipping loops are compiled for AVX-512 / AVX2 as well, see
 * CPU_MULTIVERSION), and f64 keeps an update within an f32 rounding of the
 * f64 reference. The clipping norm is summed in f64 with eight partial sums
 * per chunk, over parts of each tensor fixed by its size and added in order
 * (the same bits on any thread count). Checked against the
 * reference at normalised mean squared error < 1e-10 (f32 storage; measured
 * ~1e-15). */
#include <math.h>
#include <stdlib.h>

#include "cpu_kernels.h"

static float cpu_scalar_f32(const cpu_node_ctx_t *c, uint32_t i) {
  return *(const float *)cpu_in_data(c, i);
}

/* k = {b1, 1 - b1, b2, 1 - b2, 1 - lr wd, lr / bc1, 1 / sqrt(bc2), eps} */
CPU_BODY void cpu_adamw_chunk_body(int64_t len, const float *p, const float *g,
                                   const float *m, const float *v, float *po, float *mo,
                                   float *vo, const double *k) {
  const double b1 = k[0], c1 = k[1], b2 = k[2], c2 = k[3], decay = k[4], step = k[5];
  const double rbc2 = k[6], eps = k[7];
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) {
    const double gj = g[j];
    const double mj = b1 * m[j] + c1 * gj;
    const double vj = b2 * v[j] + c2 * gj * gj;
    const double pj = (double)p[j] * decay - step * mj / (sqrt(vj) * rbc2 + eps);
    mo[j] = (float)mj;
    vo[j] = (float)vj;
    po[j] = (float)pj;
  }
}
CPU_MULTIVERSION(cpu_adamw_chunk, (int64_t len, const float *p, const float *g, const float *m,
                                   const float *v, float *po, float *mo, float *vo,
                                   const double *k),
                 (len, p, g, m, v, po, mo, vo, k))

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
  const double k[8] = {b1, 1.0 - b1, b2, 1.0 - b2, 1.0 - lr * wd, lr / bc1, 1.0 / sqrt(bc2),
                       eps};
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
    cpu_adamw_chunk(len, p, g, m + off, v + off, out, mo + off, vo + off, k);
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
  const bool nesterov = ty_desc_node_attr_int(c->node, "nesterov", 0) != 0;
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

CPU_BODY void cpu_sumsq_chunk_body(const float *g, int64_t len, double *acc) {
  *acc += cpu_sumsq_f64(g, len, 0.0);
}
CPU_MULTIVERSION(cpu_sumsq_chunk, (const float *g, int64_t len, double *acc), (g, len, acc))

CPU_BODY void cpu_scale_chunk_body(const float *g, int64_t len, double coef, float *o) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) o[j] = (float)((double)g[j] * coef);
}
CPU_MULTIVERSION(cpu_scale_chunk, (const float *g, int64_t len, double coef, float *o),
                 (g, len, coef, o))

ty_abi_status_t cpu_kernel_clip_by_global_norm(const cpu_node_ctx_t *c) {
  /* max_norm, g_1..g_n -> norm, g_1'..g_n' */
  const uint32_t count = c->node->input_count - 1;
  const double max_norm = cpu_scalar_f32(c, 0);
  int64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) total += cpu_numel(cpu_in(c, i + 1));
  const int nt = cpu_threads(c, total, 16384);
  /* Each tensor's chunks in parts fixed by its size (never by the thread
   * count, as deterministic=1 asks; costing nothing, it is done always),
   * each summed in order; parts, then tensors, added in order. */
  double sum = 0.0;
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *gv = cpu_in(c, i + 1);
    const void *pg = cpu_in_data(c, i + 1);
    const int64_t n = cpu_numel(gv), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
    /* Small tensors: one part (a parallel region costs more than them). */
    int64_t parts = n < 65536 ? 1 : n / 16384;
    if (parts > CPU_MAX_PARTS) parts = CPU_MAX_PARTS;
    if (parts < 1) parts = 1;
    double partial[CPU_MAX_PARTS];
#pragma omp parallel for num_threads(parts > 1 ? nt : 1) schedule(static)
    for (int64_t q = 0; q < parts; ++q) {
      float sg[CPU_CHUNK];
      double acc = 0.0;
      for (int64_t ch = chunks * q / parts; ch < chunks * (q + 1) / parts; ++ch) {
        const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
        cpu_sumsq_chunk(cpu_span_in(pg, gv->dtype, off, len, sg), len, &acc);
      }
      partial[q] = acc;
    }
    double tensor = 0.0;
    for (int64_t q = 0; q < parts; ++q) tensor += partial[q];
    sum += tensor;
  }
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
    const int nti = n < 65536 ? 1 : nt;
#pragma omp parallel for num_threads(nti) schedule(static)
    for (int64_t ch = 0; ch < chunks; ++ch) {
      float sg[CPU_CHUNK], so[CPU_CHUNK];
      const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
      const float *g = cpu_span_in(pg, gv->dtype, off, len, sg);
      float *o = cpu_span_out(po, ov->dtype, off, so);
      cpu_scale_chunk(g, len, coef, o);
      cpu_span_out_done(po, ov->dtype, off, len, o);
    }
  }
  return NULL;
}

/* ---- adafactor_update (transformers.Adafactor; ops/reference/ref_optim.h
 * states the rule) ----
 *
 * Two passes over the parameter: the first updates the second-moment state
 * (row and column means of g^2 + eps1 for a factored matrix, v otherwise)
 * and sums u^2 for the update's RMS; the second forms u again, scales it by
 * alpha / max(1, rms(u) / clip_threshold), runs the first moment and writes
 * the parameter. u is never stored. Arithmetic is f64 over f32 states (as
 * adamw's), sums are taken per CPU_CHUNK block and added in block order, so
 * the result does not depend on the thread count. Outputs may alias their
 * state inputs: every element is read before it is written, and the second
 * pass reads the new states from the outputs. */

/* Sum over blocks of CPU_CHUNK elements of `expr` (of i), added in block
 * order; parts_ holds one double per block. */
#define CPU_BLOCK_SUM(nt, n, parts_, expr, out)                                  \
  do {                                                                           \
    const int64_t blocks_ = ((n) + CPU_CHUNK - 1) / CPU_CHUNK;                   \
    _Pragma("omp parallel for num_threads(nt) schedule(static)")                 \
    for (int64_t b_ = 0; b_ < blocks_; ++b_) {                                   \
      double acc_ = 0.0;                                                         \
      const int64_t end_ = (b_ + 1) * CPU_CHUNK < (n) ? (b_ + 1) * CPU_CHUNK : (n); \
      for (int64_t i = b_ * CPU_CHUNK; i < end_; ++i) acc_ += (expr);            \
      parts_[b_] = acc_;                                                         \
    }                                                                            \
    double sum_ = 0.0;                                                           \
    for (int64_t b_ = 0; b_ < blocks_; ++b_) sum_ += parts_[b_];                 \
    (out) = sum_;                                                                \
  } while (0)

ty_abi_status_t cpu_kernel_adafactor_update(const cpu_node_ctx_t *c) {
  /* param, grad, row, col, v, m, lr, weight_decay, step, beta1 */
  const ty_abi_value_t *pv = cpu_in(c, 0), *gv = cpu_in(c, 1);
  const int64_t n = cpu_numel(pv), step = *(const int64_t *)cpu_in_data(c, 8);
  const float *row = cpu_in_data(c, 2), *col = cpu_in_data(c, 3), *v = cpu_in_data(c, 4);
  const float *m = cpu_in_data(c, 5);
  uint32_t o = 1;
  float *row_o = row ? cpu_out_data(c, o++) : NULL, *col_o = col ? cpu_out_data(c, o++) : NULL;
  float *v_o = v ? cpu_out_data(c, o++) : NULL, *m_o = m ? cpu_out_data(c, o++) : NULL;
  const double lr = cpu_scalar_f32(c, 6), wd = cpu_scalar_f32(c, 7);
  const double beta1 = m ? cpu_scalar_f32(c, 9) : 0.0;
  const double eps1 = ty_desc_node_attr_float(c->node, "eps1", 1e-30);
  const double eps2 = ty_desc_node_attr_float(c->node, "eps2", 1e-3);
  const double clip = ty_desc_node_attr_float(c->node, "clip_threshold", 1.0);
  const double decay = ty_desc_node_attr_float(c->node, "decay_rate", -0.8);
  const bool relative = ty_desc_node_attr_int(c->node, "relative_step", 0) != 0;
  const bool scale_param = ty_desc_node_attr_int(c->node, "scale_parameter", 1) != 0;
  const bool warmup = ty_desc_node_attr_int(c->node, "warmup_init", 0) != 0;
  if (step < 1 || (m && !(beta1 >= 0.0 && beta1 < 1.0))) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: " CPU_NODE_FMT ": step %lld must be >= 1 and beta1 %g in "
                           "[0, 1)", CPU_NODE_ARGS(c), (long long)step, beta1);
  }
  const float *p = NULL, *g = NULL;
  float *p_owned = NULL, *g_owned = NULL;
  const int64_t cols = pv->rank >= 2 ? pv->dims[pv->rank - 1] : n;
  const int64_t rows = pv->rank >= 2 ? pv->dims[pv->rank - 2] : 1;
  const int64_t batches = rows * cols > 0 ? n / (rows * cols) : 0;
  double *parts = calloc((size_t)((n + CPU_CHUNK - 1) / CPU_CHUNK + batches + 1), sizeof(double));
  double *row_mean = parts ? parts + (n + CPU_CHUNK - 1) / CPU_CHUNK : NULL;
  if (!parts || !cpu_f32_whole(cpu_in_data(c, 0), pv->dtype, n, c->threads, &p, &p_owned) ||
      !cpu_f32_whole(cpu_in_data(c, 1), gv->dtype, n, c->threads, &g, &g_owned)) {
    free(parts);
    free(p_owned);
    return cpu_oom(c);
  }
  const int nt = cpu_threads(c, n, 16384);
  const double t = (double)step;
  double sumsq_p;
  CPU_BLOCK_SUM(nt, n, parts, (double)p[i] * p[i], sumsq_p);
  const double rms_p = n ? sqrt(sumsq_p / (double)n) : 0.0;
  const double rel = relative ? fmin(warmup ? 1e-6 * t : 1e-2, 1.0 / sqrt(t)) : lr;
  const double alpha = rel * (scale_param ? fmax(eps2, rms_p) : 1.0);
  const double beta2t = 1.0 - pow(t, decay);
  if (row) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < batches * rows; ++r) {
      const float *gr = g + r * cols;
      double acc = 0.0;
      for (int64_t j = 0; j < cols; ++j) acc += (double)gr[j] * gr[j] + eps1;
      row_o[r] = (float)(beta2t * row[r] + (1.0 - beta2t) * (acc / (double)cols));
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t bj = 0; bj < batches * cols; ++bj) {
      const int64_t b = bj / cols, j = bj % cols;
      const float *gb = g + b * rows * cols;
      double acc = 0.0;
      for (int64_t i = 0; i < rows; ++i) acc += (double)gb[i * cols + j] * gb[i * cols + j] + eps1;
      col_o[bj] = (float)(beta2t * col[bj] + (1.0 - beta2t) * (acc / (double)rows));
    }
    for (int64_t b = 0; b < batches; ++b) {
      double acc = 0.0;
      for (int64_t i = 0; i < rows; ++i) acc += row_o[b * rows + i];
      row_mean[b] = acc / (double)rows;
    }
  } else {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      v_o[i] = (float)(beta2t * v[i] + (1.0 - beta2t) * ((double)g[i] * g[i] + eps1));
    }
  }
  /* u_i before clipping, from the new states. */
#define CPU_ADAFACTOR_U(i)                                                              \
  (row ? (double)g[i] /                                                                 \
             sqrt((double)row_o[(i) / cols] / row_mean[(i) / (rows * cols)]) /          \
             sqrt((double)col_o[((i) / (rows * cols)) * cols + (i) % cols])             \
       : (double)g[i] / sqrt((double)v_o[i]))
  double sumsq_u;
  CPU_BLOCK_SUM(nt, n, parts, CPU_ADAFACTOR_U(i) * CPU_ADAFACTOR_U(i), sumsq_u);
  const double rms_u = n ? sqrt(sumsq_u / (double)n) : 0.0;
  const double scale = alpha / fmax(1.0, rms_u / clip), decay_factor = wd * alpha;
  void *po = cpu_out_data(c, 0);
  const ty_dtype_t pod = cpu_out(c, 0)->dtype;
  const int64_t chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float so[CPU_CHUNK];
    const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    float *out = cpu_span_out(po, pod, off, so);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t i = off + j;
      double u = CPU_ADAFACTOR_U(i) * scale;
      if (m) {
        const double mi = beta1 * m[i] + (1.0 - beta1) * u;
        m_o[i] = (float)mi;
        u = m_o[i]; /* the stored moment is the update, as in transformers */
      }
      out[j] = (float)((double)p[i] - decay_factor * p[i] - u);
    }
    cpu_span_out_done(po, pod, off, len, out);
  }
#undef CPU_ADAFACTOR_U
  free(parts);
  free(p_owned);
  free(g_owned);
  return NULL;
}

ty_abi_status_t cpu_kernel_global_norm_scale(const cpu_node_ctx_t *c) {
  /* max_norm, s_1..s_n -> norm, scale; the sums in f64, in input order */
  double sum = 0.0;
  for (uint32_t i = 1; i < c->node->input_count; ++i) sum += cpu_scalar_f32(c, i);
  const double norm = sqrt(sum), max_norm = cpu_scalar_f32(c, 0);
  double coef = 1.0;
  if (max_norm > 0.0) {
    coef = max_norm / (norm + 1e-6);
    if (coef > 1.0) coef = 1.0;
  }
  *(float *)cpu_out_data(c, 0) = (float)norm;
  *(float *)cpu_out_data(c, 1) = (float)coef;
  return NULL;
}
