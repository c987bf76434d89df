/* Per-token cross-entropy, forward and backward, one row of V logits per
 * step and rows spread over threads.
 *
 *   lse_n     = log sum_v exp(z_nv)          (max-shifted)
 *   loss_n    = lse_n - z_{n, t_n}           (0 when t_n < 0: ignored)
 *   dz_nv     = dloss_n (exp(z_nv - lse_n) - [v == t_n])   (0 row when ignored)
 *
 * Targets >= V are INVALID_ARGUMENT naming the node, found before anything is
 * written. Exponentials are cpu_expf (2.4e-7 relative), their sum is
 * accumulated in f64; loss is f32.
 * Checked against the f64 reference at normalised mean squared error < 1e-10
 * (f32 storage). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

ty_abi_status_t cpu_ce_check_targets(const cpu_node_ctx_t *c, uint32_t targets_in, int64_t rows,
                                     int64_t vocab) {
  const ty_abi_value_t *tv = cpu_in(c, targets_in);
  const void *pt = cpu_in_data(c, targets_in);
  for (int64_t n = 0; n < rows; ++n) {
    int64_t t = cpu_load_index(pt, tv->dtype, n);
    if (t >= vocab) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "cpu: " CPU_NODE_FMT ": targets[%lld] = %lld is outside the "
                             "vocabulary [0, %lld) (negative means ignored)",
                             CPU_NODE_ARGS(c), (long long)n, (long long)t,
                             (long long)vocab);
    }
  }
  return NULL;
}

/* e[v] = exp(z[v] - m) for the row's max m (returned in *out_max); returns
 * sum_v e[v] in f64, so lse = m + log(sum). */
CPU_BODY void cpu_row_exp_body(const float *restrict z, int64_t vocab, float *restrict e,
                               float *out_max, double *out_sum) {
  const float m = cpu_max_f32(z, vocab);
  for (int64_t j = 0; j < vocab; ++j) e[j] = cpu_expf(z[j] - m);
  *out_max = m;
  *out_sum = cpu_sum_f64(e, vocab);
}
CPU_MULTIVERSION(cpu_row_exp, (const float *restrict z, int64_t vocab, float *restrict e,
                  float *out_max, double *out_sum),
                 (z, vocab, e, out_max, out_sum))

/* dz = g (softmax(z) - onehot(t)) for one row. */
CPU_BODY void cpu_ce_backward_row_body(const float *restrict z, int64_t vocab, int64_t t, float g,
                                       float *restrict dz) {
  float m;
  double sum;
  cpu_row_exp_body(z, vocab, dz, &m, &sum);
  const float pt = dz[t];
  const float gs = (float)((double)g / sum);
  for (int64_t j = 0; j < vocab; ++j) dz[j] *= gs;
  dz[t] = (float)((double)g * ((double)pt / sum - 1.0));
}
CPU_MULTIVERSION(cpu_ce_backward_row, (const float *restrict z, int64_t vocab, int64_t t, float g,
                  float *restrict dz),
                 (z, vocab, t, g, dz))

/* The row function, for the fused linear + cross-entropy kernel
 * (cpu_kernels_linear_ce.c), whose loss must be computed exactly as here. */
void cpu_ce_row_exp(const float *z, int64_t vocab, float *e, float *out_max, double *out_sum) {
  cpu_row_exp(z, vocab, e, out_max, out_sum);
}

ty_abi_status_t cpu_kernel_cross_entropy(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *lv = cpu_in(c, 0), *tv = cpu_in(c, 1);
  const void *pl = cpu_in_data(c, 0), *pt = cpu_in_data(c, 1);
  float *loss = cpu_out_data(c, 0);
  const int64_t rows = cpu_rows(lv), vocab = cpu_last_dim(lv);
  ty_abi_status_t st = cpu_ce_check_targets(c, 1, rows, vocab);
  if (st) return st;
  if (rows == 0) return NULL;
  const int nt = cpu_threads(c, rows * vocab, 16384);
  const size_t v1 = (size_t)(vocab > 0 ? vocab : 1);
  float *scratch = malloc((size_t)nt * v1 * 2 * sizeof(float));
  if (!scratch) return cpu_oom(c);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = cpu_load_index(pt, tv->dtype, n);
    if (t < 0 || vocab == 0) {
      loss[n] = 0.0f;
      continue;
    }
    float *zs = scratch + (size_t)cpu_thread_num() * v1 * 2, *es = zs + v1;
    const float *z = cpu_span_in(pl, lv->dtype, n * vocab, vocab, zs);
    float m;
    double sum;
    cpu_row_exp(z, vocab, es, &m, &sum);
    /* (m - z[t]) + log(sum): no rounded lse in between, so small losses keep
     * their digits. */
    loss[n] = (float)((double)(m - z[t]) + log(sum));
  }
  free(scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_cross_entropy_backward(const cpu_node_ctx_t *c) {
  const float *dloss = cpu_in_data(c, 0);
  const ty_abi_value_t *lv = cpu_in(c, 1), *tv = cpu_in(c, 2), *dv = cpu_out(c, 0);
  const void *pl = cpu_in_data(c, 1), *pt = cpu_in_data(c, 2);
  void *pd = cpu_out_data(c, 0);
  const int64_t rows = cpu_rows(lv), vocab = cpu_last_dim(lv);
  ty_abi_status_t st = cpu_ce_check_targets(c, 2, rows, vocab);
  if (st) return st;
  if (rows == 0 || vocab == 0) return NULL;
  const int nt = cpu_threads(c, rows * vocab, 16384);
  float *scratch = malloc((size_t)nt * (size_t)vocab * 2 * sizeof(float));
  if (!scratch) return cpu_oom(c);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t n = 0; n < rows; ++n) {
    float *zs = scratch + (size_t)cpu_thread_num() * (size_t)vocab * 2, *ds = zs + vocab;
    const int64_t t = cpu_load_index(pt, tv->dtype, n);
    float *dz = cpu_span_out(pd, dv->dtype, n * vocab, ds);
    if (t < 0) {
      memset(dz, 0, (size_t)vocab * sizeof(float));
    } else {
      cpu_ce_backward_row(cpu_span_in(pl, lv->dtype, n * vocab, vocab, zs), vocab, t, dloss[n],
                          dz);
    }
    cpu_span_out_done(pd, dv->dtype, n * vocab, vocab, dz);
  }
  free(scratch);
  return NULL;
}
