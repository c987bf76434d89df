/* Causal grouped-query attention, forward (flash-style online softmax) and
 * backward (probabilities recomputed from the saved log-sum-exp).
 *
 *   q [B,T,Hq,D], k, v [B,S,Hkv,D]; query head h reads kv head h / (Hq/Hkv).
 *   With L = kv_len (S when that input is absent), query t sits at absolute
 *   position pos = t + L - T; key s is visible iff s <= pos and, when
 *   window > 0, pos - s < window (keys at L and after never are).
 *   s_ts = scale q_t . k_s,  lse_t = log sum_{s visible} exp(s_ts)
 *   p_ts = exp(s_ts - lse_t),  out_t = sum_s p_ts v_s
 * backward, with dp_ts = dout_t . v_s and delta_t = sum_s p_ts dp_ts:
 *   ds_ts = p_ts (dp_ts - delta_t)
 *   dq_t = scale sum_s ds_ts k_s,  dk_s = scale sum_t ds_ts q_t,  dv_s = sum_t p_ts dout_t
 *
 * Forward: work items are (batch, query head, block of 16 queries); each walks
 * its visible keys in blocks of 64 keeping a running max, running sum and an
 * unnormalised output (online softmax), so no T x S matrix exists. lse is
 * f32. Backward: work items are (batch, kv head), which own their dk/dv rows,
 * so threads never write the same memory; each takes the query heads of its
 * group a query block at a time, stores p and dp for the block's visible
 * keys, then forms delta and accumulates dq, dk, dv. delta is computed from p
 * and dp as the reference does rather than from the `out` input (which is
 * therefore unused), so any (out, lse) pair gives the reference's answer.
 * Parallelism is B*Hkv items, so batch 1 with one kv head runs on one thread.
 *
 * All arithmetic is f32 (exponentials by cpu_expf) with per-row sums in
 * f64; bf16/f16 operands are converted to f32 copies first. Scores come
 * from K (and, backward, V) blocks packed transposed so the inner loops run
 * over keys in vector registers; the work-item functions are compiled for
 * AVX-512, AVX2 and baseline x86-64 (CPU_MULTIVERSION). Checked against the
 * f64 reference at normalised mean squared error < 1e-10 (f32 storage). causal=0 is left to
 * the reference kernel (cpu_kernels.c does not select this one for it). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"

#define CPU_ATT_QB 16 /* queries per block */
#define CPU_ATT_KB 64 /* keys per block (forward) */

typedef struct {
  int64_t batch, q_len, kv_len, q_heads, kv_heads, dim, group, window;
  int64_t valid; /* L: rows of k/v filled (the optional kv_len input), else S */
  float scale;
} cpu_att_shape_t;

static cpu_att_shape_t cpu_att_shape(const cpu_node_ctx_t *c, uint32_t q_in) {
  const ty_abi_value_t *q = cpu_in(c, q_in), *k = cpu_in(c, q_in + 1);
  cpu_att_shape_t s = {
      .batch = q->dims[0], .q_len = q->dims[1], .kv_len = k->dims[1],
      .q_heads = q->dims[2], .kv_heads = k->dims[2], .dim = q->dims[3],
      .window = ty_abi_node_attr_int(c->node, "window", 0),
  };
  s.group = s.kv_heads > 0 ? s.q_heads / s.kv_heads : 1;
  s.scale = (float)ty_abi_node_attr_float(c->node, "scale", 1.0 / sqrt((double)s.dim));
  /* kv_len is the forward's 4th input and the backward's 7th. */
  uint32_t kv_in = q_in == 0 ? 3 : 6;
  s.valid = s.kv_len;
  if (c->node->input_count > kv_in && c->node->inputs[kv_in] != UINT32_MAX) {
    s.valid = *(const int64_t *)cpu_in_data(c, kv_in);
  }
  return s;
}

static ty_abi_status_t cpu_att_check(const cpu_node_ctx_t *c, const cpu_att_shape_t *s) {
  if (s->valid < s->q_len || s->valid > s->kv_len) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: node %u (%s): kv_len input %lld must lie in [%lld, %lld]",
                           c->node_index, c->node->op, (long long)s->valid,
                           (long long)s->q_len, (long long)s->kv_len);
  }
  return NULL;
}

/* Visible keys of query t: [lo, hi]. */
static inline void cpu_att_range(const cpu_att_shape_t *s, int64_t t, int64_t *lo,
                                 int64_t *hi) {
  int64_t pos = t + s->valid - s->q_len;
  *hi = pos < s->valid - 1 ? pos : s->valid - 1;
  *lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
}

/* Whole inputs as f32; frees what it converted when it fails. */
static bool cpu_att_inputs(const cpu_node_ctx_t *c, uint32_t first, uint32_t count,
                           int threads, const float **out, float **owned) {
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *v = cpu_in(c, first + i);
    if (!cpu_f32_whole(cpu_in_data(c, first + i), v->dtype, cpu_numel(v), threads, &out[i],
                       &owned[i])) {
      for (uint32_t j = 0; j < i; ++j) free(owned[j]);
      return false;
    }
  }
  return true;
}

/* y += a x (distinct rows, so the compiler may vectorise freely). */
CPU_BODY void cpu_axpy(int64_t n, float a, const float *restrict x, float *restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

/* Packs keys [k0, k0+kn) of one kv head transposed: kt[d * KB + j]. */
CPU_BODY void cpu_att_pack_t(const float *x, int64_t stride, int64_t k0, int64_t kn,
                             int64_t dim, float *xt) {
  for (int64_t j = 0; j < kn; ++j) {
    const float *xr = x + (k0 + j) * stride;
    for (int64_t d = 0; d < dim; ++d) xt[d * CPU_ATT_KB + j] = xr[d];
  }
}

/* s[j] = sum_d row[d] xt[d][j] for j < kn: vector FMAs over keys. */
CPU_BODY void cpu_att_scores(const float *restrict row, const float *restrict xt, int64_t dim,
                             int64_t kn, float *restrict out) {
  if (kn == CPU_ATT_KB) { /* a full block: fixed bounds keep out[] in registers */
    float acc[CPU_ATT_KB] = {0};
    for (int64_t d = 0; d < dim; ++d) {
      const float x = row[d], *xd = xt + d * CPU_ATT_KB;
      for (int j = 0; j < CPU_ATT_KB; ++j) acc[j] += x * xd[j];
    }
    for (int j = 0; j < CPU_ATT_KB; ++j) out[j] = acc[j];
    return;
  }
  for (int64_t j = 0; j < kn; ++j) out[j] = 0.0f;
  for (int64_t d = 0; d < dim; ++d) {
    const float x = row[d], *xd = xt + d * CPU_ATT_KB;
    for (int64_t j = 0; j < kn; ++j) out[j] += x * xd[j];
  }
}

/* Forward for queries t0.. of head h in batch b (one work item). ws holds
 * QB*D (running output) + QB*KB (scores) + D*KB (a transposed K block). */
CPU_BODY void cpu_att_forward_item_body(const cpu_att_shape_t *s, const float *q, const float *k,
                                        const float *v, int64_t b, int64_t h, int64_t t0, float *ws,
                                        void *pout, ty_dtype_t out_dtype, float *lse) {
  const int64_t D = s->dim, qrow = s->q_heads * D, kvrow = s->kv_heads * D;
  const int64_t qn = s->q_len - t0 < CPU_ATT_QB ? s->q_len - t0 : CPU_ATT_QB;
  const int64_t kvh = h / s->group;
  float *acc = ws, *sc = acc + CPU_ATT_QB * D, *kt = sc + CPU_ATT_QB * CPU_ATT_KB;
  const float *qb = q + (b * s->q_len + t0) * qrow + h * D;
  const float *kb = k + b * s->kv_len * kvrow + kvh * D;
  const float *vb = v + b * s->kv_len * kvrow + kvh * D;
  float m[CPU_ATT_QB];
  double l[CPU_ATT_QB];
  int64_t lo[CPU_ATT_QB] = {0}, hi[CPU_ATT_QB] = {0};
  for (int64_t r = 0; r < qn; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0;
    cpu_att_range(s, t0 + r, &lo[r], &hi[r]);
    for (int64_t d = 0; d < D; ++d) acc[r * D + d] = 0.0f;
  }
  for (int64_t k0 = lo[0]; k0 <= hi[qn - 1]; k0 += CPU_ATT_KB) {
    const int64_t kn = hi[qn - 1] - k0 + 1 < CPU_ATT_KB ? hi[qn - 1] - k0 + 1 : CPU_ATT_KB;
    cpu_att_pack_t(kb, kvrow, k0, kn, D, kt);
    for (int64_t r = 0; r < qn; ++r) {
      if (k0 > hi[r] || k0 + kn <= lo[r]) continue; /* nothing visible here */
      float *sr = sc + r * CPU_ATT_KB;
      cpu_att_scores(qb + r * qrow, kt, D, kn, sr);
      float bm = -INFINITY;
      for (int64_t j = 0; j < kn; ++j) {
        const int64_t key = k0 + j;
        sr[j] = key < lo[r] || key > hi[r] ? -INFINITY : s->scale * sr[j];
        bm = sr[j] > bm ? sr[j] : bm;
      }
      const float nm = bm > m[r] ? bm : m[r];
      const float corr = cpu_expf(m[r] - nm); /* 0 on the first block */
      float *ar = acc + r * D;
      if (corr != 1.0f) {
        for (int64_t d = 0; d < D; ++d) ar[d] *= corr;
      }
      for (int64_t j = 0; j < kn; ++j) sr[j] = cpu_expf(sr[j] - nm); /* masked: exp(-inf) = 0 */
      for (int64_t j = 0; j < kn; ++j) {
        if (sr[j] != 0.0f) cpu_axpy(D, sr[j], vb + (k0 + j) * kvrow, ar);
      }
      l[r] = l[r] * corr + cpu_sum_f64(sr, kn);
      m[r] = nm;
    }
  }
  for (int64_t r = 0; r < qn; ++r) {
    float *ar = acc + r * D;
    const float inv = (float)(1.0 / l[r]);
    for (int64_t d = 0; d < D; ++d) ar[d] *= inv;
    cpu_store_f32(pout, out_dtype, ((b * s->q_len + t0 + r) * s->q_heads + h) * D, D, ar);
    lse[(b * s->q_heads + h) * s->q_len + t0 + r] = (float)((double)m[r] + log(l[r]));
  }
}
CPU_MULTIVERSION(cpu_att_forward_item, (const cpu_att_shape_t *s, const float *q, const float *k,
                  const float *v, int64_t b, int64_t h, int64_t t0, float *ws, void *pout,
                  ty_dtype_t out_dtype, float *lse),
                 (s, q, k, v, b, h, t0, ws, pout, out_dtype, lse))

ty_abi_status_t cpu_kernel_attention(const cpu_node_ctx_t *c) {
  const cpu_att_shape_t s = cpu_att_shape(c, 0);
  ty_abi_status_t bad = cpu_att_check(c, &s);
  if (bad) return bad;
  const ty_abi_value_t *ov = cpu_out(c, 0);
  void *pout = cpu_out_data(c, 0);
  float *lse = cpu_out_data(c, 1);
  const int64_t D = s.dim, nqb = (s.q_len + CPU_ATT_QB - 1) / CPU_ATT_QB;
  const int64_t items = s.batch * s.q_heads * nqb;
  if (items == 0 || D == 0) return NULL;
  const float *in[3];
  float *owned[3] = {NULL, NULL, NULL};
  if (!cpu_att_inputs(c, 0, 3, (int)c->threads, in, owned)) return cpu_oom(c);
  const int nt = cpu_threads(c, items * CPU_ATT_QB * s.kv_len * D, 65536);
  const size_t per = (size_t)CPU_ATT_QB * (size_t)(D + CPU_ATT_KB) + (size_t)D * CPU_ATT_KB;
  float *scratch = malloc((size_t)nt * per * sizeof(float));
  if (!scratch) {
    for (int i = 0; i < 3; ++i) free(owned[i]);
    return cpu_oom(c);
  }
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t it = 0; it < items; ++it) {
    cpu_att_forward_item(&s, in[0], in[1], in[2], it / (s.q_heads * nqb), (it / nqb) % s.q_heads,
                         (it % nqb) * CPU_ATT_QB, scratch + (size_t)cpu_thread_num() * per, pout,
                         ov->dtype, lse);
  }
  free(scratch);
  for (int i = 0; i < 3; ++i) free(owned[i]);
  return NULL;
}

/* Backward for batch b, kv head kvh: every query head of the group, a query
 * block at a time. ws holds P and dP (QB x S each), K and V blocks
 * transposed (D x KB each) and the block's dq (QB x D). dk/dv rows of this
 * kv head belong to this work item alone. */
CPU_BODY void cpu_att_backward_unit_body(const cpu_att_shape_t *s, const float *dout,
                                         const float *q, const float *k, const float *v,
                                         const float *lse, int64_t b, int64_t kvh, float *ws,
                                         float *dk, float *dv, void *pdq, ty_dtype_t dq_dtype) {
  const int64_t D = s->dim, S = s->kv_len, qrow = s->q_heads * D, kvrow = s->kv_heads * D;
  const int64_t nqb = (s->q_len + CPU_ATT_QB - 1) / CPU_ATT_QB;
  float *P = ws, *dP = P + (size_t)CPU_ATT_QB * (size_t)S;
  float *kt = dP + (size_t)CPU_ATT_QB * (size_t)S, *vt = kt + D * CPU_ATT_KB;
  float *dqa = vt + D * CPU_ATT_KB;
  const float *kb = k + b * S * kvrow + kvh * D, *vb = v + b * S * kvrow + kvh * D;
  float *dkb = dk + b * S * kvrow + kvh * D, *dvb = dv + b * S * kvrow + kvh * D;
  for (int64_t h = kvh * s->group; h < (kvh + 1) * s->group; ++h) {
    for (int64_t qbi = 0; qbi < nqb; ++qbi) {
      const int64_t t0 = qbi * CPU_ATT_QB;
      const int64_t qn = s->q_len - t0 < CPU_ATT_QB ? s->q_len - t0 : CPU_ATT_QB;
      const float *qb = q + (b * s->q_len + t0) * qrow + h * D;
      const float *db = dout + (b * s->q_len + t0) * qrow + h * D;
      int64_t lo[CPU_ATT_QB] = {0}, hi[CPU_ATT_QB] = {0};
      double delta[CPU_ATT_QB];
      for (int64_t r = 0; r < qn; ++r) {
        cpu_att_range(s, t0 + r, &lo[r], &hi[r]);
        delta[r] = 0.0;
      }
      const int64_t klo = lo[0], khi = hi[qn - 1], L = khi - klo + 1;
      /* p and dp over the block's key range (zero where masked), and delta. */
      for (int64_t k0 = klo; k0 <= khi; k0 += CPU_ATT_KB) {
        const int64_t kn = khi - k0 + 1 < CPU_ATT_KB ? khi - k0 + 1 : CPU_ATT_KB;
        cpu_att_pack_t(kb, kvrow, k0, kn, D, kt);
        cpu_att_pack_t(vb, kvrow, k0, kn, D, vt);
        for (int64_t r = 0; r < qn; ++r) {
          float *pr = P + r * L + (k0 - klo), *dpr = dP + r * L + (k0 - klo);
          const float row_lse = lse[(b * s->q_heads + h) * s->q_len + t0 + r];
          cpu_att_scores(qb + r * qrow, kt, D, kn, pr);
          cpu_att_scores(db + r * qrow, vt, D, kn, dpr);
          for (int64_t j = 0; j < kn; ++j) pr[j] = cpu_expf(s->scale * pr[j] - row_lse);
          for (int64_t j = 0; j < kn; ++j) { /* the mask: contiguous runs at the ends */
            const int64_t key = k0 + j;
            if (key < lo[r] || key > hi[r]) pr[j] = dpr[j] = 0.0f;
          }
          delta[r] += cpu_dot_f64(pr, dpr, kn);
        }
      }
      for (int64_t i = 0; i < qn * D; ++i) dqa[i] = 0.0f;
      for (int64_t j = 0; j < L; ++j) {
        const float *kr = kb + (klo + j) * kvrow;
        float *dkr = dkb + (klo + j) * kvrow, *dvr = dvb + (klo + j) * kvrow;
        for (int64_t r = 0; r < qn; ++r) {
          const float p = P[r * L + j];
          if (p == 0.0f) continue; /* masked, or underflowed: contributes 0 */
          const float ds = s->scale * p * (dP[r * L + j] - (float)delta[r]);
          cpu_axpy(D, ds, kr, dqa + r * D);
          cpu_axpy(D, ds, qb + r * qrow, dkr);
          cpu_axpy(D, p, db + r * qrow, dvr);
        }
      }
      for (int64_t r = 0; r < qn; ++r) {
        cpu_store_f32(pdq, dq_dtype, ((b * s->q_len + t0 + r) * s->q_heads + h) * D, D,
                      dqa + r * D);
      }
    }
  }
}
CPU_MULTIVERSION(cpu_att_backward_unit, (const cpu_att_shape_t *s, const float *dout,
                  const float *q, const float *k, const float *v, const float *lse, int64_t b,
                  int64_t kvh, float *ws, float *dk, float *dv, void *pdq, ty_dtype_t dq_dtype),
                 (s, dout, q, k, v, lse, b, kvh, ws, dk, dv, pdq, dq_dtype))

ty_abi_status_t cpu_kernel_attention_backward(const cpu_node_ctx_t *c) {
  /* inputs: dout, q, k, v, out (unused), lse; outputs dq, dk, dv */
  const cpu_att_shape_t s = cpu_att_shape(c, 1);
  ty_abi_status_t bad = cpu_att_check(c, &s);
  if (bad) return bad;
  const float *lse = cpu_in_data(c, 5);
  const int64_t D = s.dim, S = s.kv_len;
  const int64_t units = s.batch * s.kv_heads;
  const ty_abi_value_t *dqv = cpu_out(c, 0), *dkv = cpu_out(c, 1), *dvv = cpu_out(c, 2);
  void *pdq = cpu_out_data(c, 0), *pdk = cpu_out_data(c, 1), *pdv = cpu_out_data(c, 2);
  const int64_t kv_count = cpu_numel(dkv);
  if (units == 0 || D == 0 || s.q_len == 0) {
    memset(pdk, 0, (size_t)kv_count * ty_abi_dtype_size(dkv->dtype));
    memset(pdv, 0, (size_t)kv_count * ty_abi_dtype_size(dvv->dtype));
    return NULL;
  }
  const float *in[4]; /* dout, q, k, v */
  float *owned[4] = {NULL, NULL, NULL, NULL};
  if (!cpu_att_inputs(c, 0, 4, (int)c->threads, in, owned)) return cpu_oom(c);
  /* dk/dv accumulate in f32: the outputs themselves, or f32 copies. */
  float *dk = dkv->dtype == TY_DTYPE_F32 ? pdk : malloc((size_t)kv_count * sizeof(float));
  float *dv = dvv->dtype == TY_DTYPE_F32 ? pdv : malloc((size_t)kv_count * sizeof(float));
  const int nt = cpu_threads(c, units * s.group * s.q_len * S * D, 65536);
  const size_t per = (size_t)CPU_ATT_QB * ((size_t)S * 2 + (size_t)D) +
                     (size_t)D * CPU_ATT_KB * 2;
  float *scratch = malloc((size_t)nt * per * sizeof(float));
  if (!dk || !dv || !scratch) {
    if (dk != pdk) free(dk);
    if (dv != pdv) free(dv);
    free(scratch);
    for (int i = 0; i < 4; ++i) free(owned[i]);
    return cpu_oom(c);
  }
  memset(dk, 0, (size_t)kv_count * sizeof(float));
  memset(dv, 0, (size_t)kv_count * sizeof(float));
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t u = 0; u < units; ++u) {
    cpu_att_backward_unit(&s, in[0], in[1], in[2], in[3], lse, u / s.kv_heads, u % s.kv_heads,
                          scratch + (size_t)cpu_thread_num() * per, dk, dv, pdq, dqv->dtype);
  }
  if (dk != pdk) {
    cpu_store_f32(pdk, dkv->dtype, 0, kv_count, dk);
    free(dk);
  }
  if (dv != pdv) {
    cpu_store_f32(pdv, dvv->dtype, 0, kv_count, dv);
    free(dv);
  }
  free(scratch);
  for (int i = 0; i < 4; ++i) free(owned[i]);
  return NULL;
}
