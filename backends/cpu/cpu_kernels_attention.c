/* Causal grouped-query attention, forward and backward, on GEMMs over blocks
 * of queries (probabilities recomputed from the saved log-sum-exp in the
 * backward).
 *
 *   q [B,T,Hq,D], k, v [B,S,Hkv,D]; query head h reads kv head h / (Hq/Hkv).
 *   With L = kv_len (S when that input is absent), query t sits at absolute
 *   position pos = t + L - T; key s is visible iff s <= pos and, when
 *   window > 0, pos - s < window (keys at L and after never are).
 *   s_ts = scale q_t . k_s,  lse_t = log sum_{s visible} exp(s_ts)
 *   p_ts = exp(s_ts - lse_t),  out_t = sum_s p_ts v_s
 * causal=0: every key s < L is visible (no window).
 * backward, with dp_ts = dout_t . v_s and delta_t = sum_s p_ts dp_ts - dlse_t
 * (dlse, the optional gradient of lse, absent = 0: d lse_t / d s_ts = p_ts):
 *   ds_ts = p_ts (dp_ts - delta_t)
 *   dq_t = scale sum_s ds_ts k_s,  dk_s = scale sum_t ds_ts q_t,  dv_s = sum_t p_ts dout_t
 *
 * A block is up to 64 queries of one (batch, query head) and the keys any of
 * them sees, [lo, hi] (causal: the block's last query bounds it, so about
 * half of the T x S products are skipped). Forward, per block (one work
 * item): S = Q K^T (one GEMM, rows of q/k read in place through their
 * leading dimensions), a softmax per row with masked keys at 0, then
 * out = P V (a second GEMM, written straight into `out` for f32). Backward,
 * per (batch, kv head) (so dk/dv rows have one owner and threads never write
 * the same memory), per query head of its group and block: P again from S
 * and lse, dP = dO V^T, delta from p and dp as the reference does (the
 * `out` input is therefore unused), dS = scale P (dP - delta), then
 * dQ = dS K, dK += dS^T Q and dV += P^T dO: five GEMMs. GEMMs inside the
 * parallel loop run on the calling thread (cpu_gemm). Scratch is 64 x S
 * floats (two of them backward) per thread, so no T x S matrix exists.
 *
 * GEMMs accumulate in f32 (FMA); exponentials are cpu_expf, and per-row sums
 * (the softmax denominator, delta) are f64. bf16/f16 operands are converted
 * to f32 copies first and results rounded at the end. Checked against the
 * f64 reference at normalised mean squared error < 1e-10 (f32 storage).
 * causal=0 (context parallel's blocks of earlier keys) runs the same
 * blocks with every row's range [0, L-1]. Under deterministic=1 the GEMMs are the batch-invariant
 * blocked one and a block's keys start at a multiple of CPU_KC, so a query
 * over a KV cache and the same query inside a causal block are the same
 * bits (cpu_att_block). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define CPU_ATT_QB 64 /* queries per block */

typedef struct {
  int64_t batch, q_len, kv_len, q_heads, kv_heads, dim, group, window;
  int64_t valid; /* L: rows of k/v filled (the optional kv_len input), else S */
  bool causal;
  float scale;
  bool det; /* deterministic=1: batch-invariant GEMMs, key blocks anchored */
} cpu_att_shape_t;

static cpu_att_shape_t cpu_att_shape(const cpu_node_ctx_t *c, uint32_t q_in) {
  const ty_abi_value_t *q = cpu_in(c, q_in), *k = cpu_in(c, q_in + 1);
  cpu_att_shape_t s = {
      .batch = q->dims[0], .q_len = q->dims[1], .kv_len = k->dims[1],
      .q_heads = q->dims[2], .kv_heads = k->dims[2], .dim = q->dims[3],
      .window = ty_desc_node_attr_int(c->node, "window", 0),
      .det = c->deterministic,
      .causal = ty_desc_node_attr_int(c->node, "causal", 1) != 0,
  };
  s.group = s.kv_heads > 0 ? s.q_heads / s.kv_heads : 1;
  s.scale = (float)ty_desc_node_attr_float(c->node, "scale", 1.0 / sqrt((double)s.dim));
  /* kv_len is the forward's 4th input and the backward's 7th. */
  uint32_t kv_in = q_in == 0 ? 3 : 6;
  s.valid = s.kv_len;
  if (c->node->input_count > kv_in && c->node->inputs[kv_in] != UINT32_MAX) {
    s.valid = *(const int64_t *)cpu_in_data(c, kv_in);
  }
  return s;
}

static ty_abi_status_t cpu_att_check(const cpu_node_ctx_t *c, const cpu_att_shape_t *s) {
  if (s->valid < (s->causal ? s->q_len : 1) || s->valid > s->kv_len) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: node %u (%s): kv_len input %lld must lie in [%lld, %lld]",
                           c->node_index, c->node->op, (long long)s->valid,
                           (long long)(s->causal ? s->q_len : 1), (long long)s->kv_len);
  }
  return NULL;
}

/* Visible keys of query t: [lo, hi]. */
static inline void cpu_att_range(const cpu_att_shape_t *s, int64_t t, int64_t *lo,
                                 int64_t *hi) {
  if (!s->causal) {
    *lo = 0;
    *hi = s->valid - 1;
    return;
  }
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

/* One query block: rows t0..t0+qn-1 of a (batch, query head), the keys
 * klo..klo+L-1 that any of them sees, and each row's own range. */
typedef struct {
  int64_t t0, qn, klo, L;
  int64_t lo[CPU_ATT_QB], hi[CPU_ATT_QB];
} cpu_att_block_t;

static void cpu_att_block(const cpu_att_shape_t *s, int64_t t0, cpu_att_block_t *blk) {
  blk->t0 = t0;
  blk->qn = s->q_len - t0 < CPU_ATT_QB ? s->q_len - t0 : CPU_ATT_QB;
  for (int64_t r = 0; r < blk->qn; ++r) cpu_att_range(s, t0 + r, &blk->lo[r], &blk->hi[r]);
  blk->klo = blk->lo[0];
  /* P V sums over the keys in K slices of CPU_KC that start at klo. With a
   * sliding window rows start at different keys, so a row alone (decode)
   * and the same row inside a block would slice differently; anchored at a
   * multiple of CPU_KC, every row's slices start at the same absolute keys
   * (the keys before a row's own lo carry p = 0, which adds exactly 0). */
  if (s->det) blk->klo -= blk->klo % CPU_KC;
  blk->L = blk->hi[blk->qn - 1] - blk->klo + 1;
}

/* Forward softmax of one row of raw scores (keys klo..klo+L-1; visible
 * [lo, hi]): p = exp(scale s - max) / sum over the visible keys, 0 elsewhere;
 * *out_lse = log sum exp(scale s). */
CPU_BODY void cpu_att_softmax_row_body(float *sr, int64_t L, int64_t lo, int64_t hi,
                                       float scale, float *out_lse) {
  float m = -INFINITY;
  for (int64_t j = lo; j <= hi; ++j) {
    sr[j] *= scale;
    m = sr[j] > m ? sr[j] : m;
  }
  for (int64_t j = 0; j < lo; ++j) sr[j] = 0.0f;
  for (int64_t j = lo; j <= hi; ++j) sr[j] = cpu_expf(sr[j] - m);
  for (int64_t j = hi + 1; j < L; ++j) sr[j] = 0.0f;
  const double l = cpu_sum_f64(sr + lo, hi - lo + 1);
  const float inv = (float)(1.0 / l);
  for (int64_t j = lo; j <= hi; ++j) sr[j] *= inv;
  *out_lse = (float)((double)m + log(l));
}
CPU_MULTIVERSION(cpu_att_softmax_row, (float *sr, int64_t L, int64_t lo, int64_t hi,
                  float scale, float *out_lse),
                 (sr, L, lo, hi, scale, out_lse))

void cpu_att_softmax(float *sr, int64_t L, int64_t lo, int64_t hi, float scale,
                     float *out_lse) {
  cpu_att_softmax_row(sr, L, lo, hi, scale, out_lse);
}

/* Backward, one row: p = exp(scale s - lse) on the visible keys (0
 * elsewhere), then ds = scale p (dp - (sum p dp - dlse)) in place of dp.
 * dlse = 0 gives the bits of the rule without it (x - 0.0 is x). */
CPU_BODY void cpu_att_grad_row_body(float *pr, float *dpr, int64_t L, int64_t lo, int64_t hi,
                                    float scale, float lse, float dlse) {
  for (int64_t j = 0; j < lo; ++j) pr[j] = 0.0f;
  for (int64_t j = lo; j <= hi; ++j) pr[j] = cpu_expf(scale * pr[j] - lse);
  for (int64_t j = hi + 1; j < L; ++j) pr[j] = 0.0f;
  const float delta = (float)(cpu_dot_f64(pr + lo, dpr + lo, hi - lo + 1) - (double)dlse);
  for (int64_t j = 0; j < L; ++j) dpr[j] = scale * pr[j] * (dpr[j] - delta);
}
CPU_MULTIVERSION(cpu_att_grad_row, (float *pr, float *dpr, int64_t L, int64_t lo, int64_t hi,
                  float scale, float lse, float dlse),
                 (pr, dpr, L, lo, hi, scale, lse, dlse))

/* Forward for one block of head h in batch b. ws: QB x S scores/probabilities
 * and, unless out is f32, QB x D of output. False when a GEMM fails. */
static bool cpu_att_forward_item(const cpu_att_shape_t *s, const float *q, const float *k,
                                 const float *v, int64_t b, int64_t h, int64_t t0, float *ws,
                                 void *pout, ty_dtype_t out_dtype, float *lse) {
  const int64_t D = s->dim, qrow = s->q_heads * D, kvrow = s->kv_heads * D;
  const int64_t kvh = h / s->group;
  cpu_att_block_t blk;
  cpu_att_block(s, t0, &blk);
  const int64_t L = blk.L, qn = blk.qn;
  float *P = ws, *ob = P + (size_t)CPU_ATT_QB * (size_t)s->kv_len;
  const float *qb = q + (b * s->q_len + t0) * qrow + h * D;
  const float *kb = k + (b * s->kv_len + blk.klo) * kvrow + kvh * D;
  const float *vb = v + (b * s->kv_len + blk.klo) * kvrow + kvh * D;
  if (!cpu_gemm(false, true, qn, L, D, qb, qrow, kb, kvrow, P, L, false, 1, s->det)) {
    return false;
  }
  for (int64_t r = 0; r < qn; ++r) {
    cpu_att_softmax_row(P + r * L, L, blk.lo[r] - blk.klo, blk.hi[r] - blk.klo, s->scale,
                        &lse[(b * s->q_heads + h) * s->q_len + t0 + r]);
  }
  const int64_t o0 = (b * s->q_len + t0) * qrow + h * D;
  const bool direct = out_dtype == TY_DTYPE_F32;
  float *o = direct ? (float *)pout + o0 : ob;
  if (!cpu_gemm(false, false, qn, D, L, P, L, vb, kvrow, o, direct ? qrow : D, false, 1,
                s->det)) {
    return false;
  }
  if (!direct) {
    for (int64_t r = 0; r < qn; ++r) cpu_store_f32(pout, out_dtype, o0 + r * qrow, D, ob + r * D);
  }
  return true;
}

bool cpu_att_row_gathered(const float *q, const float *k, const float *v, int64_t L, int64_t D,
                          int64_t lo, int64_t hi, float scale, bool det, float *P, float *out) {
  if (!cpu_gemm(false, true, 1, L, D, q, D, k, D, P, L, false, 1, det)) return false;
  float lse;
  cpu_att_softmax_row(P, L, lo, hi, scale, &lse);
  return cpu_gemm(false, false, 1, D, L, P, L, v, D, out, D, false, 1, det);
}

static ty_abi_status_t cpu_att_gemm_failed(const cpu_node_ctx_t *c) {
  return ty_plugin_error(TY_CODE_INTERNAL,
                         "cpu: " CPU_NODE_FMT ": a GEMM failed (out of memory or a oneDNN "
                         "error)",
                         CPU_NODE_ARGS(c));
}

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
  const size_t per = (size_t)CPU_ATT_QB * (size_t)(s.kv_len + D);
  float *scratch = malloc((size_t)nt * per * sizeof(float));
  if (!scratch) {
    for (int i = 0; i < 3; ++i) free(owned[i]);
    return cpu_oom(c);
  }
  int failed = 0;
  /* Later blocks see more keys: hand them out first, then the cheap ones. */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t bh = it % (s.batch * s.q_heads), qbi = nqb - 1 - it / (s.batch * s.q_heads);
    if (!cpu_att_forward_item(&s, in[0], in[1], in[2], bh / s.q_heads, bh % s.q_heads,
                              qbi * CPU_ATT_QB, scratch + (size_t)cpu_thread_num() * per, pout,
                              ov->dtype, lse)) {
#pragma omp atomic write
      failed = 1;
    }
  }
  free(scratch);
  for (int i = 0; i < 3; ++i) free(owned[i]);
  return failed ? cpu_att_gemm_failed(c) : NULL;
}

/* Backward for batch b, kv head kvh: every query head of the group, a query
 * block at a time. ws holds P and dP/dS (QB x S each) and, unless dq is f32,
 * the block's dq (QB x D). dk/dv rows of this kv head belong to this work
 * item alone. False when a GEMM fails. */
static bool cpu_att_backward_unit(const cpu_att_shape_t *s, const float *dout, const float *q,
                                  const float *k, const float *v, const float *lse,
                                  const float *dlse, int64_t b,
                                  int64_t kvh, float *ws, float *dk, float *dv, void *pdq,
                                  ty_dtype_t dq_dtype) {
  const int64_t D = s->dim, S = s->kv_len, qrow = s->q_heads * D, kvrow = s->kv_heads * D;
  const int64_t nqb = (s->q_len + CPU_ATT_QB - 1) / CPU_ATT_QB;
  float *P = ws, *dP = P + (size_t)CPU_ATT_QB * (size_t)S;
  float *dqs = dP + (size_t)CPU_ATT_QB * (size_t)S;
  const bool direct = dq_dtype == TY_DTYPE_F32;
  for (int64_t h = kvh * s->group; h < (kvh + 1) * s->group; ++h) {
    for (int64_t qbi = 0; qbi < nqb; ++qbi) {
      cpu_att_block_t blk;
      cpu_att_block(s, qbi * CPU_ATT_QB, &blk);
      const int64_t L = blk.L, qn = blk.qn, t0 = blk.t0;
      const int64_t q0 = (b * s->q_len + t0) * qrow + h * D;
      const int64_t k0 = (b * S + blk.klo) * kvrow + kvh * D;
      const float *qb = q + q0, *db = dout + q0, *kb = k + k0, *vb = v + k0;
      /* P (raw scores for now) = Q K^T, dP = dO V^T */
      if (!cpu_gemm(false, true, qn, L, D, qb, qrow, kb, kvrow, P, L, false, 1, s->det) ||
          !cpu_gemm(false, true, qn, L, D, db, qrow, vb, kvrow, dP, L, false, 1, s->det)) {
        return false;
      }
      for (int64_t r = 0; r < qn; ++r) {
        const int64_t row = (b * s->q_heads + h) * s->q_len + t0 + r;
        cpu_att_grad_row(P + r * L, dP + r * L, L, blk.lo[r] - blk.klo, blk.hi[r] - blk.klo,
                         s->scale, lse[row], dlse ? dlse[row] : 0.0f);
      }
      /* dQ = dS K;  dK += dS^T Q;  dV += P^T dO */
      float *dq = direct ? (float *)pdq + q0 : dqs;
      if (!cpu_gemm(false, false, qn, D, L, dP, L, kb, kvrow, dq, direct ? qrow : D, false, 1,
                    s->det) ||
          !cpu_gemm(true, false, L, D, qn, dP, L, qb, qrow, dk + k0, kvrow, true, 1, s->det) ||
          !cpu_gemm(true, false, L, D, qn, P, L, db, qrow, dv + k0, kvrow, true, 1, s->det)) {
        return false;
      }
      if (!direct) {
        for (int64_t r = 0; r < qn; ++r) cpu_store_f32(pdq, dq_dtype, q0 + r * qrow, D, dqs + r * D);
      }
    }
  }
  return true;
}

ty_abi_status_t cpu_kernel_attention_backward(const cpu_node_ctx_t *c) {
  /* inputs: dout, q, k, v, out (unused), lse, kv_len?, dlse?; outputs dq, dk, dv */
  const cpu_att_shape_t s = cpu_att_shape(c, 1);
  ty_abi_status_t bad = cpu_att_check(c, &s);
  if (bad) return bad;
  const float *lse = cpu_in_data(c, 5), *dlse = cpu_in_data(c, 7);
  const int64_t D = s.dim, S = s.kv_len;
  const int64_t units = s.batch * s.kv_heads;
  const ty_abi_value_t *dqv = cpu_out(c, 0), *dkv = cpu_out(c, 1), *dvv = cpu_out(c, 2);
  void *pdq = cpu_out_data(c, 0), *pdk = cpu_out_data(c, 1), *pdv = cpu_out_data(c, 2);
  const int64_t kv_count = cpu_numel(dkv);
  if (units == 0 || D == 0 || s.q_len == 0) {
    memset(pdk, 0, (size_t)kv_count * ty_desc_dtype_size(dkv->dtype));
    memset(pdv, 0, (size_t)kv_count * ty_desc_dtype_size(dvv->dtype));
    return NULL;
  }
  const float *in[4]; /* dout, q, k, v */
  float *owned[4] = {NULL, NULL, NULL, NULL};
  if (!cpu_att_inputs(c, 0, 4, (int)c->threads, in, owned)) return cpu_oom(c);
  /* dk/dv accumulate in f32: the outputs themselves, or f32 copies. */
  float *dk = dkv->dtype == TY_DTYPE_F32 ? pdk : malloc((size_t)kv_count * sizeof(float));
  float *dv = dvv->dtype == TY_DTYPE_F32 ? pdv : malloc((size_t)kv_count * sizeof(float));
  const int nt = cpu_threads(c, units * s.group * s.q_len * S * D, 65536);
  const size_t per = (size_t)CPU_ATT_QB * ((size_t)S * 2 + (size_t)D);
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
  int failed = 0;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t u = 0; u < units; ++u) {
    if (!cpu_att_backward_unit(&s, in[0], in[1], in[2], in[3], lse, dlse, u / s.kv_heads,
                               u % s.kv_heads, scratch + (size_t)cpu_thread_num() * per, dk, dv,
                               pdq, dqv->dtype)) {
#pragma omp atomic write
      failed = 1;
    }
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
  return failed ? cpu_att_gemm_failed(c) : NULL;
}
