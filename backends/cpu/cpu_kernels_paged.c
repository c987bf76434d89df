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
 * slot the later row wins here (undefined on other devices).
 *
 * The attention computes each (row, head) in a fixed order that depends only
 * on that row's q, sequence and position, never on N, the other rows or the
 * threads: a row gets the same bits whatever step it is packed into (batch
 * invariance). Scores and the weighted sum of values are f32, the softmax
 * denominator f64, exponentials cpu_expf. Two ways:
 *   - f32 without deterministic=1 (serving): a work item is a row and its
 *     kv heads (a share of them when rows are too few for the threads); it
 *     reads each key's heads where they lie in the pool (one contiguous run
 *     per key) and makes the scores q . k (16 lane-wise partial sums, added
 *     in a fixed tree), the softmax, then out += p v key by key into the
 *     output row. Nothing is gathered, no GEMM is called.
 *   - otherwise one (row, head) per item with the dense attention's
 *     arithmetic (cpu_paged_row_head), which deterministic=1 needs; bf16/f16
 *     are widened per row and the output rounded once. */
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

/* q . k over d floats: 16 lane-wise partial sums (a mul then an add each:
 * -std=c11 contracts nothing, so every ISA copy gives these bits), the tail
 * past a multiple of 16 into lane 0, then the lanes added in a fixed tree
 * of halves. The 16 lanes are two 8-lane vectors of GCC's vector types:
 * they stay in registers for AVX2 and AVX-512 (one 16-lane vector went
 * through the stack under AVX2, and a loop over a float array through the
 * stack or scalar shuffles everywhere: the dot products were then the
 * kernel's bottleneck). */
typedef float cpu_v8f __attribute__((vector_size(32)));
typedef float cpu_v4f __attribute__((vector_size(16)));
CPU_BODY float cpu_paged_dot(const float *q, const float *k, int64_t d) {
  cpu_v8f lo = {0}, hi = {0};
  int64_t e = 0;
  for (; e + 16 <= d; e += 16) {
    cpu_v8f ql, qh, kl, kh;
    memcpy(&ql, q + e, sizeof(ql));
    memcpy(&qh, q + e + 8, sizeof(qh));
    memcpy(&kl, k + e, sizeof(kl));
    memcpy(&kh, k + e + 8, sizeof(kh));
    lo += ql * kl;
    hi += qh * kh;
  }
  for (; e < d; ++e) lo[0] += q[e] * k[e];
  const cpu_v8f h8 = lo + hi;
  const cpu_v4f h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) +
                     __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

/* One item of the fast path: row i's query heads of kv heads [g0, g0+gn),
 * keys [lo, pos] at pool offsets at[0..L) (each the first float of kv head
 * g0 of that key). S: room for gn * grp rows of L scores. */
CPU_BODY void cpu_paged_item_body(const cpu_paged_shape_t *s, const float *q, const float *kp,
                                  const float *vp, const int64_t *at, int64_t L, int64_t i,
                                  int64_t g0, int64_t gn, float *S, int64_t ls, float *out) {
  const int64_t d = s->dim, grp = s->hq / s->hkv, nq = gn * grp, h0 = g0 * grp;
  const float *qi = q + (i * s->hq + h0) * d;
  float *oi = out + (i * s->hq + h0) * d;
  for (int64_t j = 0; j < L; ++j) {
    const float *kj = kp + at[j];
    for (int64_t h = 0; h < nq; ++h) {
      S[h * ls + j] = cpu_paged_dot(qi + h * d, kj + (h / grp) * d, d);
    }
  }
  for (int64_t h = 0; h < nq; ++h) {
    float lse;
    cpu_att_softmax(S + h * ls, L, 0, L - 1, s->scale, &lse);
  }
  for (int64_t e = 0; e < nq * d; ++e) oi[e] = 0.0f;
  for (int64_t j = 0; j < L; ++j) {
    const float *vj = vp + at[j];
    for (int64_t h = 0; h < nq; ++h) {
      const float pj = S[h * ls + j];
      const float *vr = vj + (h / grp) * d;
      float *o = oi + h * d;
      for (int64_t e = 0; e < d; ++e) o[e] += pj * vr[e];
    }
  }
}
CPU_MULTIVERSION(cpu_paged_item, (const cpu_paged_shape_t *s, const float *q, const float *kp,
                 const float *vp, const int64_t *at, int64_t L, int64_t i, int64_t g0,
                 int64_t gn, float *S, int64_t ls, float *out),
                 (s, q, kp, vp, at, L, i, g0, gn, S, ls, out))

/* The fast path (f32, deterministic=0); the shape is checked. */
static ty_abi_status_t cpu_paged_fast(const cpu_node_ctx_t *c, const cpu_paged_shape_t *s,
                                      const float *q, const float *kp, const float *vp,
                                      const int64_t *table, const int64_t *row_seq,
                                      const int64_t *row_pos, float *out) {
  const int64_t grp = s->hq / s->hkv, lmax = s->mb * s->bs;
  int64_t keys = 0; /* keys read, for the thread count */
  for (int64_t i = 0; i < s->rows; ++i) {
    if (row_seq[i] < 0) continue;
    const int64_t pos = row_pos[i];
    keys += pos - (s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0) + 1;
  }
  const int nt = cpu_threads(c, keys * s->hq * s->dim * 2, (int64_t)1 << 16);
  /* kv heads per item: all of a row's (a key's heads are then one
   * contiguous run, and a block's keys one run of BS of them, which the
   * hardware prefetcher follows), up to 16 query heads, fewer while that
   * leaves under 2 items per thread. Software prefetching a few keys ahead
   * on top of it was slower (8 rows of GPT-2 124M, one thread, Zen 4: 5.6
   * ms per step with, 4.1-4.4 without; items of 3 heads instead of 12:
   * 8.9). */
  int64_t gkv = s->hkv;
  while (gkv > 1 && (gkv * grp > 16 || s->rows * ((s->hkv + gkv - 1) / gkv) < 2 * (int64_t)nt)) {
    gkv = (gkv + 1) / 2;
  }
  const int64_t groups = (s->hkv + gkv - 1) / gkv, items = s->rows * groups;
  const size_t per = (size_t)lmax * sizeof(int64_t) + (size_t)(gkv * grp * lmax) * sizeof(float);
  unsigned char *scratch = malloc((size_t)nt * per);
  if (!scratch) return cpu_oom(c);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t i = it / groups, g0 = (it % groups) * gkv;
    const int64_t gn = s->hkv - g0 < gkv ? s->hkv - g0 : gkv;
    const int64_t seq = row_seq[i], pos = row_pos[i];
    if (seq < 0) {
      float *o = out + (i * s->hq + g0 * grp) * s->dim;
      for (int64_t e = 0; e < gn * grp * s->dim; ++e) o[e] = 0.0f;
      continue;
    }
    unsigned char *mine = scratch + (size_t)cpu_thread_num() * per;
    int64_t *at = (int64_t *)mine;
    float *S = (float *)(mine + (size_t)lmax * sizeof(int64_t));
    const int64_t lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
    const int64_t L = pos - lo + 1;
    for (int64_t j = 0; j < L; ++j) {
      const int64_t key = lo + j, block = table[seq * s->mb + key / s->bs];
      at[j] = ((block * s->bs + key % s->bs) * s->hkv + g0) * s->dim;
    }
    cpu_paged_item(s, q, kp, vp, at, L, i, g0, gn, S, lmax, out);
  }
  free(scratch);
  return NULL;
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
  if (s.rows * s.hq * s.dim == 0) return NULL;
  if (dt == TY_DTYPE_F32 && !c->deterministic) {
    return cpu_paged_fast(c, &s, pq, pk, pv, pt, row_seq, row_pos, po);
  }
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
