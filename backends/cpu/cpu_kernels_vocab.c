/* The vocabulary-parallel ops (ops/op_vocab.c): one tp rank's shard of rows
 * [start, start + valid) of the vocabulary, held in Vp >= valid rows of a
 * table or columns of the logits (the rest padding, never read).
 *
 *   vocab_embedding   out[n] = table[id - start] (id in the shard), else 0
 *   ..._backward      dtable[id - start] += dout[n]; padding rows 0
 *   vocab_max         m = max_{c < valid} z_c;  backward: dy at the first argmax
 *   vocab_ce_sums     [sum_{c < valid} exp(z_c - m), z_{t - start} - m or 0]
 *   ..._backward      dz_c = ds0 exp(z_c - m) + ds1 [c == t - start];
 *                     dm = -(ds0 sum_c exp(z_c - m) + ds1 [t in shard])
 *   vocab_ce_loss     log(s0) - s1 (0 for t < 0); backward [dl / s0, -dl]
 *
 * Rows spread over threads; exponentials are cpu_expf (2.4e-7 relative),
 * their sums f64. The embedding backward gives each thread a slice of the
 * columns over every token in order (no atomics, any thread count the same
 * result). Checked against the f64 reference in tests/backends
 * (cpu_kernels_cases.c) at NMSE < 1e-10 (f32 storage). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

static int64_t cpu_vocab_attr(const cpu_node_ctx_t *c, const char *name, int64_t dflt) {
  return ty_desc_node_attr_int(c->node, name, dflt);
}

static bool cpu_vocab_in(int64_t id, int64_t start, int64_t valid) {
  return id >= start && id < start + valid;
}

ty_abi_status_t cpu_kernel_vocab_embedding(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *table = cpu_in(c, 0), *ids = cpu_in(c, 1);
  const unsigned char *pt = cpu_in_data(c, 0);
  const void *pids = cpu_in_data(c, 1);
  unsigned char *po = cpu_out_data(c, 0);
  const int64_t dim = table->dims[1], n = cpu_numel(ids);
  const int64_t start = cpu_vocab_attr(c, "vocab_start", 0),
                valid = cpu_vocab_attr(c, "vocab_valid", table->dims[0]);
  const size_t row = (size_t)dim * ty_desc_dtype_size(table->dtype);
  const int nt = cpu_threads(c, n * dim, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = cpu_load_index(pids, ids->dtype, i);
    if (cpu_vocab_in(id, start, valid)) {
      memcpy(po + (size_t)i * row, pt + (size_t)(id - start) * row, row);
    } else {
      memset(po + (size_t)i * row, 0, row); /* +0 in every float dtype */
    }
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_vocab_embedding_backward(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *dout = cpu_in(c, 0), *ids = cpu_in(c, 1), *dt = cpu_out(c, 0);
  const void *pd = cpu_in_data(c, 0), *pids = cpu_in_data(c, 1);
  void *pt = cpu_out_data(c, 0);
  const int64_t rows = dt->dims[0], dim = dt->dims[1], n = cpu_numel(ids);
  const int64_t start = cpu_vocab_attr(c, "vocab_start", 0),
                valid = cpu_vocab_attr(c, "vocab_valid", rows);
  double *acc = calloc((size_t)(rows * dim > 0 ? rows * dim : 1), sizeof(double));
  float *out = malloc((size_t)(rows * dim > 0 ? rows * dim : 1) * sizeof(float));
  float *in = malloc((size_t)(n * dim > 0 ? n * dim : 1) * sizeof(float));
  if (!acc || !out || !in) {
    free(acc);
    free(out);
    free(in);
    return cpu_oom(c);
  }
  const float *g = cpu_span_in(pd, dout->dtype, 0, n * dim, in);
  const int nt = cpu_threads(c, n * dim, 16384);
  const int64_t slice = (dim + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int s = 0; s < nt; ++s) {
    const int64_t d0 = s * slice, d1 = d0 + slice < dim ? d0 + slice : dim;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = cpu_load_index(pids, ids->dtype, i);
      if (!cpu_vocab_in(id, start, valid)) continue;
      double *a = acc + (id - start) * dim;
      for (int64_t d = d0; d < d1; ++d) a[d] += g[i * dim + d];
    }
  }
  for (int64_t k = 0; k < rows * dim; ++k) out[k] = (float)acc[k];
  cpu_store_f32(pt, dt->dtype, 0, rows * dim, out);
  free(acc);
  free(out);
  free(in);
  return NULL;
}

/* Per-row loops over the logits: each thread a scratch row. */
typedef struct {
  const ty_abi_value_t *lv;
  const void *pl;
  int64_t rows, vp, start, valid;
  int nt;
  float *scratch; /* nt x 2 x vp */
} cpu_vocab_rows_t;

static ty_abi_status_t cpu_vocab_rows(const cpu_node_ctx_t *c, uint32_t logits_in,
                                      cpu_vocab_rows_t *r) {
  r->lv = cpu_in(c, logits_in);
  r->pl = cpu_in_data(c, logits_in);
  r->rows = cpu_rows(r->lv);
  r->vp = cpu_last_dim(r->lv);
  r->start = cpu_vocab_attr(c, "vocab_start", 0);
  r->valid = cpu_vocab_attr(c, "vocab_valid", r->vp);
  r->nt = cpu_threads(c, r->rows * r->vp, 16384);
  r->scratch = malloc((size_t)r->nt * (size_t)(r->vp > 0 ? r->vp : 1) * 2 * sizeof(float));
  return r->scratch ? NULL : cpu_oom(c);
}

static const float *cpu_vocab_row(const cpu_vocab_rows_t *r, int64_t n, float **out_spare) {
  float *zs = r->scratch + (size_t)cpu_thread_num() * (size_t)r->vp * 2;
  *out_spare = zs + r->vp;
  return cpu_span_in(r->pl, r->lv->dtype, n * r->vp, r->vp, zs);
}

ty_abi_status_t cpu_kernel_vocab_max(const cpu_node_ctx_t *c) {
  cpu_vocab_rows_t r;
  ty_abi_status_t st = cpu_vocab_rows(c, 0, &r);
  if (st) return st;
  float *m = cpu_out_data(c, 0);
#pragma omp parallel for num_threads(r.nt) schedule(static)
  for (int64_t n = 0; n < r.rows; ++n) {
    float *spare;
    m[n] = cpu_max_f32(cpu_vocab_row(&r, n, &spare), r.valid);
  }
  free(r.scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_vocab_max_backward(const cpu_node_ctx_t *c) {
  cpu_vocab_rows_t r;
  ty_abi_status_t st = cpu_vocab_rows(c, 1, &r);
  if (st) return st;
  const float *dy = cpu_in_data(c, 0), *m = cpu_in_data(c, 2);
  const ty_abi_value_t *dv = cpu_out(c, 0);
  void *pd = cpu_out_data(c, 0);
#pragma omp parallel for num_threads(r.nt) schedule(static)
  for (int64_t n = 0; n < r.rows; ++n) {
    float *spare;
    const float *z = cpu_vocab_row(&r, n, &spare);
    float *dz = cpu_span_out(pd, dv->dtype, n * r.vp, spare);
    memset(dz, 0, (size_t)r.vp * sizeof(float));
    for (int64_t k = 0; k < r.valid; ++k) {
      if (z[k] == m[n]) {
        dz[k] = dy[n];
        break;
      }
    }
    cpu_span_out_done(pd, dv->dtype, n * r.vp, r.vp, dz);
  }
  free(r.scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_vocab_ce_sums(const cpu_node_ctx_t *c) {
  cpu_vocab_rows_t r;
  ty_abi_status_t st = cpu_vocab_rows(c, 0, &r);
  if (st) return st;
  const ty_abi_value_t *tv = cpu_in(c, 1);
  const void *pt = cpu_in_data(c, 1);
  const float *m = cpu_in_data(c, 2);
  float *sums = cpu_out_data(c, 0);
#pragma omp parallel for num_threads(r.nt) schedule(static)
  for (int64_t n = 0; n < r.rows; ++n) {
    float *e;
    const float *z = cpu_vocab_row(&r, n, &e);
    for (int64_t k = 0; k < r.valid; ++k) e[k] = cpu_expf(z[k] - m[n]);
    const int64_t t = cpu_load_index(pt, tv->dtype, n);
    sums[2 * n] = (float)cpu_sum_f64(e, r.valid);
    sums[2 * n + 1] = cpu_vocab_in(t, r.start, r.valid) ? z[t - r.start] - m[n] : 0.0f;
  }
  free(r.scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_vocab_ce_sums_backward(const cpu_node_ctx_t *c) {
  cpu_vocab_rows_t r;
  ty_abi_status_t st = cpu_vocab_rows(c, 1, &r);
  if (st) return st;
  const float *ds = cpu_in_data(c, 0), *m = cpu_in_data(c, 3);
  const ty_abi_value_t *tv = cpu_in(c, 2), *dv = cpu_out(c, 0);
  const void *pt = cpu_in_data(c, 2);
  void *pd = cpu_out_data(c, 0);
  float *dm = cpu_out_data(c, 1);
#pragma omp parallel for num_threads(r.nt) schedule(static)
  for (int64_t n = 0; n < r.rows; ++n) {
    float *spare;
    const float *z = cpu_vocab_row(&r, n, &spare);
    float *dz = cpu_span_out(pd, dv->dtype, n * r.vp, spare);
    for (int64_t k = 0; k < r.valid; ++k) dz[k] = cpu_expf(z[k] - m[n]);
    const double s = cpu_sum_f64(dz, r.valid);
    for (int64_t k = 0; k < r.valid; ++k) dz[k] *= ds[2 * n];
    for (int64_t k = r.valid; k < r.vp; ++k) dz[k] = 0.0f;
    const int64_t t = cpu_load_index(pt, tv->dtype, n);
    const bool mine = cpu_vocab_in(t, r.start, r.valid);
    if (mine) dz[t - r.start] += ds[2 * n + 1];
    dm[n] = (float)(-((double)ds[2 * n] * s + (mine ? (double)ds[2 * n + 1] : 0.0)));
    cpu_span_out_done(pd, dv->dtype, n * r.vp, r.vp, dz);
  }
  free(r.scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_vocab_ce_loss(const cpu_node_ctx_t *c) {
  const float *sums = cpu_in_data(c, 0);
  const ty_abi_value_t *tv = cpu_in(c, 1);
  const void *pt = cpu_in_data(c, 1);
  float *loss = cpu_out_data(c, 0);
  const int64_t rows = cpu_numel(tv), vocab = cpu_vocab_attr(c, "vocab_size", 0);
  ty_abi_status_t st = cpu_ce_check_targets(c, 1, rows, vocab);
  if (st) return st;
  for (int64_t n = 0; n < rows; ++n) {
    const int64_t t = cpu_load_index(pt, tv->dtype, n);
    loss[n] = t < 0 ? 0.0f : (float)(log((double)sums[2 * n]) - (double)sums[2 * n + 1]);
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_vocab_ce_loss_backward(const cpu_node_ctx_t *c) {
  const float *dloss = cpu_in_data(c, 0), *sums = cpu_in_data(c, 1);
  const ty_abi_value_t *tv = cpu_in(c, 2);
  const void *pt = cpu_in_data(c, 2);
  float *ds = cpu_out_data(c, 0);
  const int64_t rows = cpu_numel(tv);
  for (int64_t n = 0; n < rows; ++n) {
    const bool counted = cpu_load_index(pt, tv->dtype, n) >= 0;
    ds[2 * n] = counted ? (float)((double)dloss[n] / sums[2 * n]) : 0.0f;
    ds[2 * n + 1] = counted ? -dloss[n] : 0.0f;
  }
  return NULL;
}
