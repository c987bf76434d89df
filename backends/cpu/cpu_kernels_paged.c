/* The paged KV cache (issue 29): paged_kv_write and paged_attention.
 *
 *   paged_kv_write(pool [NB,BS,Hkv,D], new [N,Hkv,D], slots [N] i64):
 *     pool'[slots[i] / BS, slots[i] % BS] = new[i]; slots[i] == -1 skips row i
 *   paged_attention(q [N,Hq,D], k_pool, v_pool [NB,BS,Hkv,D],
 *                   block_table [S,MB], row_seq [N], row_pos [N]):
 *     row i (s = row_seq[i] >= 0, p = row_pos[i]) sees keys j in [lo, p],
 *     lo = window > 0 ? max(0, p - window + 1) : 0, key j at
 *     pool[block_table[s, j / BS], j % BS, h / (Hq / Hkv)];
 *     out[i,h] = sum_j softmax_j(scale q.k_j) v_j; padding rows (-1) are 0.
 *
 * Every index is checked before anything is written (INVALID_ARGUMENT naming
 * the node, with the reference's words, ops/reference/ref_paged.c). The write
 * moves bytes (any dtype, exact), rows in order, so with two rows naming one
 * slot the later row wins here (undefined on other devices). The attention
 * runs one (row, head) per OpenMP work item and computes it in a fixed order
 * that depends only on that row's q, sequence and position, never on N or
 * the other rows: a row gets the same bits whatever step it is packed into
 * (batch invariance). Scores and the weighted sum of values are f32, the
 * softmax denominator f64, exponentials cpu_expf; bf16/f16 are widened per
 * row and the output rounded once. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

ty_abi_status_t cpu_kernel_paged_kv_write(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *pool = cpu_in(c, 0), *fresh = cpu_in(c, 1);
  const unsigned char *pp = cpu_in_data(c, 0), *pn = cpu_in_data(c, 1);
  const int64_t *slots = cpu_in_data(c, 2);
  unsigned char *po = cpu_out_data(c, 0);
  const int64_t nslots = pool->dims[0] * pool->dims[1], rows = fresh->dims[0];
  for (int64_t i = 0; i < rows; ++i) {
    if (slots[i] < -1 || slots[i] >= nslots) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "cpu: " CPU_NODE_FMT ": row %lld writes slot %lld outside the "
                             "pool's %lld slots (NB*BS; -1 skips the row)",
                             CPU_NODE_ARGS(c), (long long)i, (long long)slots[i],
                             (long long)nslots);
    }
  }
  const size_t row = (size_t)(pool->dims[2] * pool->dims[3]) * ty_desc_dtype_size(pool->dtype);
  /* pool' = pool first, unless the plan put pool' in pool's storage. */
  if (po != pp) memcpy(po, pp, (size_t)nslots * row);
  if (row == 0) return NULL;
  for (int64_t i = 0; i < rows; ++i) {
    if (slots[i] >= 0) memcpy(po + (size_t)slots[i] * row, pn + (size_t)i * row, row);
  }
  return NULL;
}

typedef struct {
  int64_t rows, hq, hkv, dim, blocks, bs, seqs, mb, window;
  float scale;
} cpu_paged_shape_t;

static ty_abi_status_t cpu_paged_check(const cpu_node_ctx_t *c, const cpu_paged_shape_t *s,
                                       const int64_t *table, const int64_t *row_seq,
                                       const int64_t *row_pos) {
  for (int64_t i = 0; i < s->rows; ++i) {
    const int64_t seq = row_seq[i], pos = row_pos[i];
    if (seq < -1 || seq >= s->seqs) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "cpu: " CPU_NODE_FMT ": row %lld has row_seq %lld outside "
                             "[-1, %lld) (the block table's rows; -1 is padding)",
                             CPU_NODE_ARGS(c), (long long)i, (long long)seq,
                             (long long)s->seqs);
    }
    if (seq < 0) continue;
    if (pos < 0 || pos >= s->mb * s->bs) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "cpu: " CPU_NODE_FMT ": row %lld has row_pos %lld outside "
                             "[0, %lld) (MB*BS positions of a block table row)",
                             CPU_NODE_ARGS(c), (long long)i, (long long)pos,
                             (long long)(s->mb * s->bs));
    }
    const int64_t lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
    for (int64_t b = lo / s->bs; b <= pos / s->bs; ++b) {
      const int64_t block = table[seq * s->mb + b];
      if (block < 0 || block >= s->blocks) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "cpu: " CPU_NODE_FMT ": row %lld reads block %lld outside the "
                               "pool's [0, %lld) (block_table[%lld, %lld])",
                               CPU_NODE_ARGS(c), (long long)i, (long long)block,
                               (long long)s->blocks, (long long)seq, (long long)b);
      }
    }
  }
  return NULL;
}

/* One (row, head) with the dense attention's arithmetic
 * (cpu_att_row_gathered): the row's keys and values gathered from the
 * blocks into contiguous f32 rows, starting at a multiple of CPU_KC under
 * deterministic=1 as a dense block's do, so the bits equal the same query's
 * inside the attention op (a forward pass, `trainyard eval`). Scratch: D
 * floats of q, 2 x Lmax x D of keys and values, Lmax of scores, D of output.
 * False when a GEMM runs out of memory. */
static bool cpu_paged_row_head(const cpu_paged_shape_t *s, ty_dtype_t dt, bool det,
                               const void *q, const void *kp, const void *vp,
                               const int64_t *table, int64_t seq, int64_t pos, int64_t i,
                               int64_t h, void *out, float *scratch, int64_t lmax) {
  const int64_t d = s->dim, g = h / (s->hq / s->hkv);
  const int64_t lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
  const int64_t klo = det ? lo - lo % CPU_KC : lo, L = pos - klo + 1;
  float *qf = scratch, *kg = qf + d, *vg = kg + lmax * d, *P = vg + lmax * d, *acc = P + lmax;
  const float *qr = cpu_span_in(q, dt, (i * s->hq + h) * d, d, qf);
  if (qr != qf) memcpy(qf, qr, (size_t)d * sizeof(float));
  for (int64_t j = klo; j <= pos; ++j) {
    const int64_t block = table[seq * s->mb + j / s->bs];
    const int64_t at = ((block * s->bs + j % s->bs) * s->hkv + g) * d;
    float *kr = kg + (j - klo) * d, *vr = vg + (j - klo) * d;
    const float *kin = cpu_span_in(kp, dt, at, d, kr), *vin = cpu_span_in(vp, dt, at, d, vr);
    if (kin != kr) memcpy(kr, kin, (size_t)d * sizeof(float));
    if (vin != vr) memcpy(vr, vin, (size_t)d * sizeof(float));
  }
  if (!cpu_att_row_gathered(qf, kg, vg, L, d, lo - klo, pos - klo, s->scale, det, P, acc)) {
    return false;
  }
  cpu_store_f32(out, dt, (i * s->hq + h) * d, d, acc);
  return true;
}

ty_abi_status_t cpu_kernel_paged_attention(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *q = cpu_in(c, 0), *k = cpu_in(c, 1), *table = cpu_in(c, 3);
  cpu_paged_shape_t s = {
      .rows = q->dims[0], .hq = q->dims[1], .dim = q->dims[2], .blocks = k->dims[0],
      .bs = k->dims[1], .hkv = k->dims[2], .seqs = table->dims[0], .mb = table->dims[1],
      .window = ty_desc_node_attr_int(c->node, "window", 0),
  };
  s.scale = (float)ty_desc_node_attr_float(c->node, "scale", 1.0 / sqrt((double)s.dim));
  const int64_t *pt = cpu_in_data(c, 3), *row_seq = cpu_in_data(c, 4),
                *row_pos = cpu_in_data(c, 5);
  ty_abi_status_t st = cpu_paged_check(c, &s, pt, row_seq, row_pos);
  if (st) return st;
  const ty_dtype_t dt = q->dtype;
  const void *pq = cpu_in_data(c, 0), *pk = cpu_in_data(c, 1), *pv = cpu_in_data(c, 2);
  void *po = cpu_out_data(c, 0);
  const int64_t items = s.rows * s.hq, lmax = s.mb * s.bs + CPU_KC;
  const int64_t per = 2 * s.dim + lmax * (2 * s.dim + 1);
  if (items == 0) return NULL;
  const bool det = c->deterministic;
  const int nt = cpu_threads(c, items * s.dim * 64, (int64_t)1 << 16);
  float *scratch = malloc((size_t)nt * (size_t)per * sizeof(float));
  if (!scratch) return cpu_oom(c);
  /* A flag written atomically, not an OpenMP reduction: clang's reduction
   * lock is a symbol the plugin would export (plugins_exports). */
  int failed = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t i = it / s.hq, h = it % s.hq;
    float *mine = scratch + (size_t)cpu_thread_num() * (size_t)per;
    if (row_seq[i] < 0) {
      for (int64_t e = 0; e < s.dim; ++e) mine[e] = 0.0f;
      cpu_store_f32(po, dt, (i * s.hq + h) * s.dim, s.dim, mine);
      continue;
    }
    if (!cpu_paged_row_head(&s, dt, det, pq, pk, pv, pt, row_seq[i], row_pos[i], i, h, po, mine,
                            lmax)) {
#pragma omp atomic write
      failed = 1;
    }
  }
  free(scratch);
  return failed ? cpu_oom(c) : NULL;
}
