/* The split tensor-core backward: a dQ kernel and a dK/dV kernel, each
 * recomputing S and dP (7 products per tile pair where the fused kernel of
 * attention_tc.cuh has 5), with no scratch and no ordering between blocks.
 * TRAINYARD_CUDA_ATTENTION=split selects it (to compare the two, or where
 * the fused kernel's ordered dQ sum serializes: a few query rows against
 * many keys). Included by attention.cu after attention_tc.cuh. */
#ifndef TY_CUDA_KERNELS_ATTENTION_SPLIT_TC_CUH_
#define TY_CUDA_KERNELS_ATTENTION_SPLIT_TC_CUH_

#include "attention_tc.cuh"

/* dq = scale sum_s dS K with dS = P (dP - delta), P = exp(s scale - lse),
 * dP = dout V^T: grid (ceil(T / 64), Hq, B), 128 threads, query tiles in
 * reverse order. */
template <typename T, int D>
__device__ void ty_att_dq_tc(const T *dout, const T *q, const T *k, const T *v,
                             const float *lse, const float *delta, const long long *kvlen, T *dq,
                             int Tq, int S, int Hq, int Hkv, int D_, float scale, float sl2,
                             int window, ERR_ARGS) {
  (void)D_;
  constexpr int NW = TY_ATT_TC_DQ_WARPS, BQ = TY_ATT_TC_DQ_BQ, BK = TY_ATT_TC_DQ_BK(D);
  constexpr int NT = 32 * NW;
  uint16_t *sQ = (uint16_t *)ty_att_smem, *sO = sQ + BQ * D, *sK = sO + BQ * D;
  uint16_t *sV = sK + 2 * BK * D;
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node);
  if (L < 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
  const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * BQ, off = (int)L - Tq;
  const bool aligned = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)dout |
                         (uintptr_t)dq) & 15) == 0;
  const long long q_stride = (long long)Hq * D, kv_stride = (long long)Hkv * D;
  const long long q_base = ((long long)b * Tq * Hq + h) * D;
  const uint16_t *kb = (const uint16_t *)k + ((long long)b * S * Hkv + kvh) * D;
  const uint16_t *vb = (const uint16_t *)v + ((long long)b * S * Hkv + kvh) * D;
  const int hi = min(q0 + BQ, Tq) + off; /* one past the last row's position */
  const int lo = window > 0 ? max(0, q0 + off - window + 1) : 0;
  const int kt_lo = lo / BK, kt_hi = (hi + BK - 1) / BK;

  ty_tc_load<D, BQ, NT>(sQ, (const uint16_t *)q + q_base, q_stride, q0, Tq, aligned);
  ty_tc_load<D, BQ, NT>(sO, (const uint16_t *)dout + q_base, q_stride, q0, Tq, aligned);
  ty_tc_load<D, BK, NT>(sK + (kt_lo & 1) * BK * D, kb, kv_stride, kt_lo * BK, hi, aligned);
  ty_tc_load<D, BK, NT>(sV + (kt_lo & 1) * BK * D, vb, kv_stride, kt_lo * BK, hi, aligned);
  ty_cp_commit();

  const int w0 = q0 + warp * 16;
  const bool active = w0 < Tq;
  const int t0 = w0 + g, t1 = w0 + g + 8;
  /* lse (log2 units) and delta of this thread's two rows; 0 past T. */
  float l2[2] = {0.0f, 0.0f}, dl[2] = {0.0f, 0.0f};
  if (t0 < Tq) {
    l2[0] = lse[((long long)b * Hq + h) * Tq + t0] * TY_ATT_LOG2E;
    dl[0] = delta[((long long)b * Hq + h) * Tq + t0];
  }
  if (t1 < Tq) {
    l2[1] = lse[((long long)b * Hq + h) * Tq + t1] * TY_ATT_LOG2E;
    dl[1] = delta[((long long)b * Hq + h) * Tq + t1];
  }
  float acc[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  for (int kt = kt_lo; kt < kt_hi; ++kt) {
    const int buf = kt & 1;
    ty_cp_wait<0>();
    __syncthreads();
    if (kt + 1 < kt_hi) {
      ty_tc_load<D, BK, NT>(sK + (buf ^ 1) * BK * D, kb, kv_stride, (kt + 1) * BK, hi, aligned);
      ty_tc_load<D, BK, NT>(sV + (buf ^ 1) * BK * D, vb, kv_stride, (kt + 1) * BK, hi, aligned);
    }
    ty_cp_commit();
    const int k0 = kt * BK;
    if (!active || ty_tc_sees_none(w0, k0, BK, off, window)) continue;
    uint16_t *tK = sK + buf * BK * D, *tV = sV + buf * BK * D;
    float s[BK / 8][4], dp[BK / 8][4];
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      dp[j][0] = dp[j][1] = dp[j][2] = dp[j][3] = 0.0f;
    }
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t qa[4], oa[4];
      ty_ldsm_x4(qa, ty_tc_a_addr<D>(sQ, warp * 16, kc, lane));
      ty_ldsm_x4(oa, ty_tc_a_addr<D>(sO, warp * 16, kc, lane));
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        uint32_t f[4];
        ty_ldsm_x4(f, ty_tc_bn_addr<D>(tK, np * 16, kc, lane));
        ty_mma16816<T>(s[2 * np], qa, f[0], f[1]);
        ty_mma16816<T>(s[2 * np + 1], qa, f[2], f[3]);
        ty_ldsm_x4(f, ty_tc_bn_addr<D>(tV, np * 16, kc, lane));
        ty_mma16816<T>(dp[2 * np], oa, f[0], f[1]);
        ty_mma16816<T>(dp[2 * np + 1], oa, f[2], f[3]);
      }
    }
    const bool mask = ty_tc_needs_mask(w0, 16, k0, BK, off, window);
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int key = k0 + j * 8 + tq * 2 + (e & 1);
        float p = ty_exp2_ftz(fmaf(s[j][e], sl2, -l2[r]));
        if (mask && !ty_tc_visible((r ? t1 : t0) + off, key, window)) p = 0.0f;
        s[j][e] = p * (dp[j][e] - dl[r]); /* dS */
      }
    }
    /* dQ += dS K: dS from registers, K read transposed. */
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      uint32_t a[4];
      a[0] = ty_pack2<T>(s[2 * kc][0], s[2 * kc][1]);
      a[1] = ty_pack2<T>(s[2 * kc][2], s[2 * kc][3]);
      a[2] = ty_pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      a[3] = ty_pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
      for (int dp2 = 0; dp2 < D / 16; ++dp2) {
        uint32_t f[4];
        ty_ldsm_x4_trans(f, ty_tc_a_addr<D>(tK, kc * 16, dp2, lane));
        ty_mma16816<T>(acc[2 * dp2], a, f[0], f[1]);
        ty_mma16816<T>(acc[2 * dp2 + 1], a, f[2], f[3]);
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = r ? t1 : t0;
    if (t >= Tq) continue;
    T *row = dq + q_base + (long long)t * q_stride;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      ty_tc_store2<T>(row + j * 8 + tq * 2, acc[j][2 * r] * scale, acc[j][2 * r + 1] * scale,
                      aligned);
    }
  }
}

/* dk = scale sum dS^T Q, dv = sum P^T dO for a block of 64 keys over every
 * (query head of the group, query tile) that sees them: grid (ceil(S / 64),
 * Hkv, B), 128 threads; each warp owns 16 keys and computes the transposed
 * scores S^T = K Q^T so P^T and dS^T are A fragments in registers. */
template <typename T, int D>
__device__ void ty_att_dkv_tc(const T *dout, const T *q, const T *k, const T *v,
                              const float *lse, const float *delta, const long long *kvlen,
                              T *dk, T *dv, int Tq, int S, int Hq, int Hkv, int D_, float scale,
                              float sl2, int window, ERR_ARGS) {
  (void)D_;
  constexpr int NW = TY_ATT_TC_DKV_WARPS, BKV = TY_ATT_TC_DKV_BKV, BQ = TY_ATT_TC_DKV_BQ(D);
  constexpr int NT = 32 * NW;
  uint16_t *sK = (uint16_t *)ty_att_smem, *sV = sK + BKV * D, *sQ = sV + BKV * D;
  uint16_t *sO = sQ + 2 * BQ * D;
  float *sL = (float *)(sO + 2 * BQ * D), *sD = sL + 2 * BQ;
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node);
  if (L < 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int kvh = blockIdx.y, b = blockIdx.z, G = Hq / Hkv;
  const int k0 = (int)blockIdx.x * BKV, off = (int)L - Tq;
  const bool aligned = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)dout |
                         (uintptr_t)dk | (uintptr_t)dv) & 15) == 0;
  const long long q_stride = (long long)Hq * D, kv_stride = (long long)Hkv * D;
  const long long kv_base = ((long long)b * S * Hkv + kvh) * D;
  /* Query tiles [qt_lo, qt_hi] of each head of the group see the block. */
  const int t_lo = max(0, k0 - off);
  int t_hi = Tq - 1;
  if (window > 0) t_hi = (int)min((long long)t_hi, (long long)k0 + BKV - 1 + window - 1 - off);
  const int qt_lo = t_lo / BQ;
  const int nqt = t_lo <= t_hi ? t_hi / BQ - qt_lo + 1 : 0;
  const int iters = G * nqt;

  /* Iteration it: head kvh G + it / nqt, query tile qt_lo + it % nqt. */
  auto load_tile = [&](int it, int buf) {
    const int h = kvh * G + it / nqt;
    const int q0 = (qt_lo + it % nqt) * BQ;
    const long long base = ((long long)b * Tq * Hq + h) * D;
    const uint16_t *qb = (const uint16_t *)q + base, *ob = (const uint16_t *)dout + base;
    ty_tc_load<D, BQ, NT>(sQ + buf * BQ * D, qb, q_stride, q0, Tq, aligned);
    ty_tc_load<D, BQ, NT>(sO + buf * BQ * D, ob, q_stride, q0, Tq, aligned);
    const long long row = ((long long)b * Hq + h) * Tq;
    for (int i = threadIdx.x; i < 2 * BQ; i += NT) {
      const int r = i % BQ;
      const bool ok = q0 + r < Tq;
      const float *src = (i < BQ ? lse : delta) + row + (ok ? q0 + r : 0);
      ty_cp_async4((i < BQ ? sL : sD) + buf * BQ + r, src, ok ? 4 : 0);
    }
  };
  if (iters > 0) { /* else nothing sees these keys: store zeros */
    ty_tc_load<D, BKV, NT>(sK, (const uint16_t *)k + kv_base, kv_stride, k0, S, aligned);
    ty_tc_load<D, BKV, NT>(sV, (const uint16_t *)v + kv_base, kv_stride, k0, S, aligned);
    load_tile(0, 0);
  }
  ty_cp_commit();

  const int kw0 = k0 + warp * 16; /* the warp's first key */
  const bool active = kw0 < L;    /* keys past L are never seen: dK = dV = 0 */
  const int key0 = kw0 + g, key1 = kw0 + g + 8;
  float ak[D / 8][4], av[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    ak[j][0] = ak[j][1] = ak[j][2] = ak[j][3] = 0.0f;
    av[j][0] = av[j][1] = av[j][2] = av[j][3] = 0.0f;
  }
  for (int it = 0; it < iters; ++it) {
    const int buf = it & 1;
    ty_cp_wait<0>();
    __syncthreads();
    if (it + 1 < iters) load_tile(it + 1, buf ^ 1);
    ty_cp_commit();
    const int q0 = (qt_lo + it % nqt) * BQ;
    /* No query of the tile sees the warp's keys: all positions before them,
     * or (window) all window starts after them. */
    if (!active || min(q0 + BQ, Tq) - 1 + off < kw0 ||
        (window > 0 && q0 + off - window + 1 > kw0 + 15)) {
      continue;
    }
    uint16_t *tQ = sQ + buf * BQ * D, *tO = sO + buf * BQ * D;
    const float *tL = sL + buf * BQ, *tD = sD + buf * BQ;
    float st[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.0f;
      dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.0f;
    }
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t ka[4], va[4];
      ty_ldsm_x4(ka, ty_tc_a_addr<D>(sK, warp * 16, kc, lane));
      ty_ldsm_x4(va, ty_tc_a_addr<D>(sV, warp * 16, kc, lane));
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        uint32_t f[4];
        ty_ldsm_x4(f, ty_tc_bn_addr<D>(tQ, np * 16, kc, lane));
        ty_mma16816<T>(st[2 * np], ka, f[0], f[1]);
        ty_mma16816<T>(st[2 * np + 1], ka, f[2], f[3]);
        ty_ldsm_x4(f, ty_tc_bn_addr<D>(tO, np * 16, kc, lane));
        ty_mma16816<T>(dpt[2 * np], va, f[0], f[1]);
        ty_mma16816<T>(dpt[2 * np + 1], va, f[2], f[3]);
      }
    }
    /* Element (j, e): key (e < 2 ? key0 : key1), query q0 + 8 j + 2 tq + (e & 1). */
    const bool mask = q0 + BQ > Tq || kw0 + 15 > q0 + off ||
                      (window > 0 && q0 + BQ - 1 + off - kw0 >= window);
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = j * 8 + tq * 2 + (e & 1);
        float p = ty_exp2_ftz(fmaf(st[j][e], sl2, -ty_lds_f32(tL + c) * TY_ATT_LOG2E));
        if (mask && (q0 + c >= Tq || !ty_tc_visible(q0 + c + off, e < 2 ? key0 : key1, window))) {
          p = 0.0f;
        }
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - ty_lds_f32(tD + c)); /* dS^T */
      }
    }
    /* dV += P^T dO and dK += dS^T Q: A from registers, B read transposed. */
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc) {
      uint32_t pa[4], da[4];
      pa[0] = ty_pack2<T>(st[2 * kc][0], st[2 * kc][1]);
      pa[1] = ty_pack2<T>(st[2 * kc][2], st[2 * kc][3]);
      pa[2] = ty_pack2<T>(st[2 * kc + 1][0], st[2 * kc + 1][1]);
      pa[3] = ty_pack2<T>(st[2 * kc + 1][2], st[2 * kc + 1][3]);
      da[0] = ty_pack2<T>(dpt[2 * kc][0], dpt[2 * kc][1]);
      da[1] = ty_pack2<T>(dpt[2 * kc][2], dpt[2 * kc][3]);
      da[2] = ty_pack2<T>(dpt[2 * kc + 1][0], dpt[2 * kc + 1][1]);
      da[3] = ty_pack2<T>(dpt[2 * kc + 1][2], dpt[2 * kc + 1][3]);
#pragma unroll
      for (int dp2 = 0; dp2 < D / 16; ++dp2) {
        uint32_t f[4];
        ty_ldsm_x4_trans(f, ty_tc_a_addr<D>(tO, kc * 16, dp2, lane));
        ty_mma16816<T>(av[2 * dp2], pa, f[0], f[1]);
        ty_mma16816<T>(av[2 * dp2 + 1], pa, f[2], f[3]);
        ty_ldsm_x4_trans(f, ty_tc_a_addr<D>(tQ, kc * 16, dp2, lane));
        ty_mma16816<T>(ak[2 * dp2], da, f[0], f[1]);
        ty_mma16816<T>(ak[2 * dp2 + 1], da, f[2], f[3]);
      }
    }
  }
  /* Every warp stores its keys (zeros where nothing saw them). */
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r ? key1 : key0;
    if (key >= S) continue;
    const long long o = kv_base + (long long)key * kv_stride;
    T *krow = dk + o, *vrow = dv + o;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      ty_tc_store2<T>(krow + j * 8 + tq * 2, ak[j][2 * r] * scale, ak[j][2 * r + 1] * scale,
                      aligned);
      ty_tc_store2<T>(vrow + j * 8 + tq * 2, av[j][2 * r], av[j][2 * r + 1], aligned);
    }
  }
}

#endif /* TY_CUDA_KERNELS_ATTENTION_SPLIT_TC_CUH_ */
