/* Fused causal grouped-query attention on Hopper's warpgroup tensor cores
 * (wgmma, sm_90a only; this file's fatbin holds nothing else): bf16/f16 with
 * head dim 64, forward, dQ and dK/dV. The math, the masks, the split of the
 * backward into a dQ kernel and a dK/dV kernel (no atomics: bit-identical
 * run to run) and the loop orders are those of the mma.sync kernels
 * (attention.cu, attention_tc.cuh), which stay the path for other chips,
 * head dim 128 and TRAINYARD_CUDA_ATTENTION=mma. What changes is who does
 * the products: a warpgroup of 4 warps issues m64n64k16 wgmma with the
 * shared tiles read by the tensor cores through descriptors (wgmma.cuh), so
 * a tile is read once per 64 rows instead of once per warp's 16, which is
 * what bounded the mma.sync kernels (ldmatrix traffic per product).
 *
 * Per product (A x B, K = the summed index):
 *   forward  S = Q K^T      A = Q tile (K-major), B = K tile (K-major)
 *            O += P V       A = P registers,      B = V tile (MN-major)
 *   dQ       S = Q K^T, dP = dO V^T   (both tiles K-major)
 *            dQ += dS K     A = dS registers,     B = K tile (MN-major)
 *   dK/dV    S^T = K Q^T, dP^T = V dO^T   (K-major)
 *            dV += P^T dO, dK += dS^T Q   A = registers, B MN-major
 * Each batch is issued, committed and waited for before its results are
 * read; tiles are double-buffered by cp.async as in the mma.sync kernels,
 * with a proxy fence so the tensor cores see them. A tile a warpgroup sees
 * none of is skipped by the whole warpgroup (wgmma is warpgroup-collective);
 * masks are per element as before.
 *
 * Tile shapes: attention_shapes.h (TY_ATT_WG_*); launch geometry:
 * cuda_attention_plan.c. Entry points: ty_att_<kernel>_wg_<dtype>_d64. */
#include "attention_tc.cuh"
#include "wgmma.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TY_WG_BUILD 1
#else
#define TY_WG_BUILD 0
#endif

#if TY_WG_BUILD

static_assert(TY_ATT_WG_BK == 64 && TY_ATT_WG_FWD_BQ % 64 == 0,
              "every product is over K = 64 (wgmma.cuh, ty_wg_mm_kk and ty_wg_mm_rn)");

/* The dynamic shared memory's first 1024-byte aligned address. */
__device__ __forceinline__ uint16_t *ty_wg_smem_base() {
  const uint32_t s = ty_smem_u32(ty_att_smem);
  return (uint16_t *)(ty_att_smem + (((s + 1023u) & ~1023u) - s));
}

/* Pins four A-fragment registers before a fence (see wgmma.cuh). */
__device__ __forceinline__ void ty_wg_keep4(uint32_t a[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

/* Two accumulator n8 tiles (16 columns from 16 kc) rounded to T: the A
 * fragment of k16 step kc. */
template <typename T>
__device__ __forceinline__ void ty_wg_afrag(uint32_t a[4], const float *c, int kc) {
  a[0] = ty_pack2<T>(c[8 * kc + 0], c[8 * kc + 1]);
  a[1] = ty_pack2<T>(c[8 * kc + 2], c[8 * kc + 3]);
  a[2] = ty_pack2<T>(c[8 * kc + 4], c[8 * kc + 5]);
  a[3] = ty_pack2<T>(c[8 * kc + 6], c[8 * kc + 7]);
  ty_wg_keep4(a);
}

__device__ __forceinline__ void ty_wg_zero(float d[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
}

/* Rows [row0, row0 + ROWS) of a tensor whose row r starts at base + r *
 * stride (elements) into the swizzled [ROWS][64] tile, rows at or past
 * `valid` zero: ty_tc_load's job with the per-thread offsets worked out
 * once. Thread i copies 16-byte chunk i % 8 of rows i / 8 + n NT / 8; NT / 8
 * is a multiple of 8, so every row it copies has the same swizzle. A base
 * not 16-byte aligned goes through ty_tc_load's register copies. */
template <int ROWS, int NT> struct ty_wg_copy {
  static_assert((NT / 8) % 8 == 0 && (ROWS * 8) % NT == 0, "tile copy shape");
  int r, c;
  uint32_t dst; /* byte offset of this thread's first chunk in a tile */
  __device__ __forceinline__ ty_wg_copy() {
    r = threadIdx.x >> 3;
    c = threadIdx.x & 7;
    dst = (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
  }
  __device__ __forceinline__ void operator()(uint16_t *tile, const uint16_t *base,
                                             long long stride, int row0, int valid,
                                             bool aligned) const {
    if (!aligned) {
      ty_tc_load<64, ROWS, NT>(tile, base, stride, row0, valid, false);
      return;
    }
    const uint16_t *src = base + (long long)(row0 + r) * stride + c * 8;
#pragma unroll
    for (int n = 0; n < ROWS * 8 / NT; ++n) {
      const bool ok = row0 + r + n * (NT / 8) < valid;
      ty_cp_async16((char *)tile + dst + n * (NT / 8) * 128,
                    ok ? src + (long long)n * (NT / 8) * stride : base, ok ? 16 : 0);
    }
  }
};

/* Masks a row-major score tile (rows: queries, columns: 64 keys from k0)
 * for this thread's two rows at positions pos[r]: key visible iff
 * pos - window < key <= pos (no lower bound when window = 0). Column
 * 8 j + 2 t + (e & 1) of accumulator element 4 j + e; the compares are
 * against compile-time column numbers. */
__device__ __forceinline__ void ty_wg_mask_rows(float s[32], const int pos[2], int k0, int tq,
                                                int window) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hi = pos[r] - k0 - 2 * tq; /* last visible column, less 2 t */
    const int lo = window > 0 ? hi - window + 1 : -(1 << 30);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int cc = 8 * j + e;
        if (cc > hi || cc < lo) s[4 * j + 2 * r + e] = -INFINITY;
      }
    }
  }
}

/* out, lse = attention(q, k, v): grid (ceil(T / 128), Hq, B), 256 threads
 * (two warpgroups of 64 query rows); query tiles in reverse order so the
 * longest causal rows start first. */
template <typename T>
__device__ void ty_att_fwd_wg(const T *q, const T *k, const T *v, T *out, float *lse,
                              const long long *kvlen, int Tq, int S, int Hq, int Hkv,
                              float sl2, int window, ERR_ARGS) {
  constexpr int D = 64, BQ = TY_ATT_WG_FWD_BQ, BK = TY_ATT_WG_BK;
  constexpr int NT = 128 * TY_ATT_WG_FWD_WGS;
  uint16_t *sQ = ty_wg_smem_base(), *sK = sQ + BQ * D, *sV = sK + 2 * BK * D;
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node);
  if (L < 0) return;
  const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
  const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * BQ, off = (int)L - Tq;
  const bool aligned = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out) & 15) == 0;
  const long long q_stride = (long long)Hq * D, kv_stride = (long long)Hkv * D;
  const uint16_t *qb = (const uint16_t *)q + ((long long)b * Tq * Hq + h) * D;
  const uint16_t *kb = (const uint16_t *)k + ((long long)b * S * Hkv + kvh) * D;
  const uint16_t *vb = (const uint16_t *)v + ((long long)b * S * Hkv + kvh) * D;
  int hi, kt_lo, kt_hi; /* hi: one past the last row's position */
  ty_att_key_tiles<BQ, BK>(q0, Tq, off, window, &hi, &kt_lo, &kt_hi);

  const ty_wg_copy<BK, NT> copy;
  ty_wg_copy<BQ, NT>()(sQ, qb, q_stride, q0, Tq, aligned);
  copy(sK + (kt_lo & 1) * BK * D, kb, kv_stride, kt_lo * BK, hi, aligned);
  copy(sV + (kt_lo & 1) * BK * D, vb, kv_stride, kt_lo * BK, hi, aligned);
  ty_cp_commit();

  const int r0 = q0 + wg * 64;            /* the warpgroup's first row */
  const bool active = r0 < Tq;            /* rows past T: load, never compute */
  const int w0 = r0 + warp * 16;          /* the warp's first row */
  const int t0 = w0 + g, t1 = w0 + g + 8; /* this thread's rows */
  const int pos[2] = {t0 + off, t1 + off};
  const uint16_t *wQ = sQ + wg * 64 * D;
  float o[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  ty_wg_zero(o);

  for (int kt = kt_lo; kt < kt_hi; ++kt) {
    const int buf = kt & 1;
    ty_cp_wait<0>();
    ty_wg_fence_smem();
    __syncthreads(); /* tile kt landed; every warpgroup is done with tile kt - 1 */
    if (kt + 1 < kt_hi) {
      copy(sK + (buf ^ 1) * BK * D, kb, kv_stride, (kt + 1) * BK, hi, aligned);
      copy(sV + (buf ^ 1) * BK * D, vb, kv_stride, (kt + 1) * BK, hi, aligned);
    }
    ty_cp_commit();
    const int k0 = kt * BK;
    /* Warpgroup-uniform: its 64 rows see none of the tile's keys. */
    if (!active || k0 > r0 + 63 + off || (window > 0 && k0 + BK - 1 < r0 + off - window + 1)) {
      continue;
    }
    const uint16_t *tK = sK + buf * BK * D, *tV = sV + buf * BK * D;
    float s[32];
    ty_wg_zero(s);
    ty_wg_keep(s);
    ty_wg_fence();
    ty_wg_mm_kk<T>(s, wQ, tK);
    ty_wg_commit();
    ty_wg_wait<0>();
    ty_wg_keep(s);
    if (ty_tc_needs_mask(w0, 16, k0, BK, off, window)) ty_wg_mask_rows(s, pos, k0, tq, window);
    /* Online softmax, in log2 units (scores times scale log2(e)). */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
        mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      }
      const float mnew = fmaxf(m[r], ty_tc_max4(mx) * sl2);
      const float muse = mnew == -INFINITY ? 0.0f : mnew;
      const float corr = ty_exp2_ftz(m[r] - muse);
      m[r] = mnew;
      l[r] *= corr;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 2 * r] *= corr;
        o[4 * j + 2 * r + 1] *= corr;
      }
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[4 * j + e] = ty_exp2_ftz(fmaf(s[4 * j + e], sl2, -muse));
          l[r] += s[4 * j + e];
        }
      }
    }
    /* O += P V: P from registers. */
    uint32_t pa[BK / 16][4];
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) ty_wg_afrag<T>(pa[kc], s, kc);
    ty_wg_keep(o);
    ty_wg_fence();
    ty_wg_mm_rn<T>(o, pa, tV);
    ty_wg_commit();
    ty_wg_wait<0>();
    ty_wg_keep(o);
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = r ? t1 : t0;
    const float lt = ty_tc_sum4(l[r]);
    if (t >= Tq) continue;
    const float inv = 1.0f / lt;
    T *orow = out + (((long long)b * Tq + t) * Hq + h) * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      ty_tc_store2<T>(orow + j * 8 + tq * 2, o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv,
                      aligned);
    }
    if (tq == 0) lse[((long long)b * Hq + h) * Tq + t] = (m[r] + log2f(lt)) * TY_ATT_LN2;
  }
}

/* dq = scale sum_s dS K: grid (ceil(T / 64), Hq, B), 128 threads (one
 * warpgroup of 64 query rows), query tiles in reverse order. */
template <typename T>
__device__ void ty_att_dq_wg(const T *dout, const T *q, const T *k, const T *v, const float *lse,
                             const float *delta, const long long *kvlen, T *dq, int Tq, int S,
                             int Hq, int Hkv, float scale, float sl2, int window, ERR_ARGS) {
  constexpr int D = 64, BQ = 64, BK = TY_ATT_WG_BK, NT = 128;
  uint16_t *sQ = ty_wg_smem_base(), *sO = sQ + BQ * D, *sK = sO + BQ * D;
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
  int hi, kt_lo, kt_hi; /* hi: one past the last row's position */
  ty_att_key_tiles<BQ, BK>(q0, Tq, off, window, &hi, &kt_lo, &kt_hi);

  const ty_wg_copy<64, NT> copy;
  copy(sQ, (const uint16_t *)q + q_base, q_stride, q0, Tq, aligned);
  copy(sO, (const uint16_t *)dout + q_base, q_stride, q0, Tq, aligned);
  copy(sK + (kt_lo & 1) * BK * D, kb, kv_stride, kt_lo * BK, hi, aligned);
  copy(sV + (kt_lo & 1) * BK * D, vb, kv_stride, kt_lo * BK, hi, aligned);
  ty_cp_commit();

  const int w0 = q0 + warp * 16;
  const int t0 = w0 + g, t1 = w0 + g + 8;
  const int pos[2] = {t0 + off, t1 + off};
  /* lse (log2 units) and delta of this thread's two rows; 0 past T (those
   * rows have q = dout = 0, so dS = 0 there). */
  float l2[2], dl[2];
  ty_att_row_stats(lse, delta, ((long long)b * Hq + h) * Tq, Tq, t0, t1, l2, dl);
  float acc[32];
  ty_wg_zero(acc);

  for (int kt = kt_lo; kt < kt_hi; ++kt) {
    const int buf = kt & 1;
    ty_cp_wait<0>();
    ty_wg_fence_smem();
    __syncthreads();
    if (kt + 1 < kt_hi) {
      copy(sK + (buf ^ 1) * BK * D, kb, kv_stride, (kt + 1) * BK, hi, aligned);
      copy(sV + (buf ^ 1) * BK * D, vb, kv_stride, (kt + 1) * BK, hi, aligned);
    }
    ty_cp_commit();
    const int k0 = kt * BK;
    if (k0 > q0 + 63 + off || (window > 0 && k0 + BK - 1 < q0 + off - window + 1)) continue;
    const uint16_t *tK = sK + buf * BK * D, *tV = sV + buf * BK * D;
    float s[32], dp[32];
    ty_wg_zero(s);
    ty_wg_zero(dp);
    ty_wg_keep(s);
    ty_wg_keep(dp);
    ty_wg_fence();
    ty_wg_mm_kk<T>(s, sQ, tK);
    ty_wg_mm_kk<T>(dp, sO, tV);
    ty_wg_commit();
    ty_wg_wait<0>();
    ty_wg_keep(s);
    ty_wg_keep(dp);
    /* A masked score is -inf: P = 0 there, and dS = 0 (dP is finite). */
    if (ty_tc_needs_mask(w0, 16, k0, BK, off, window)) ty_wg_mask_rows(s, pos, k0, tq, window);
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const float p = ty_exp2_ftz(fmaf(s[4 * j + e], sl2, -l2[r]));
        s[4 * j + e] = p * (dp[4 * j + e] - dl[r]); /* dS */
      }
    }
    /* dQ += dS K: dS from registers, K read MN-major. */
    uint32_t da[BK / 16][4];
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) ty_wg_afrag<T>(da[kc], s, kc);
    ty_wg_keep(acc);
    ty_wg_fence();
    ty_wg_mm_rn<T>(acc, da, tK);
    ty_wg_commit();
    ty_wg_wait<0>();
    ty_wg_keep(acc);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = r ? t1 : t0;
    if (t >= Tq) continue;
    T *row = dq + q_base + (long long)t * q_stride;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      ty_tc_store2<T>(row + j * 8 + tq * 2, acc[4 * j + 2 * r] * scale,
                      acc[4 * j + 2 * r + 1] * scale, aligned);
    }
  }
}

/* dk = scale sum dS^T Q, dv = sum P^T dO for a block of 64 keys over every
 * (query head of the group, query tile) that sees them: grid (ceil(S / 64),
 * Hkv, B), 128 threads (one warpgroup; warp w owns keys 16 w ..). */
template <typename T>
__device__ void ty_att_dkv_wg(const T *dout, const T *q, const T *k, const T *v,
                              const float *lse, const float *delta, const long long *kvlen,
                              T *dk, T *dv, int Tq, int S, int Hq, int Hkv, float scale,
                              float sl2, int window, ERR_ARGS) {
  constexpr int D = 64, BKV = 64, BQ = 64, NT = 128;
  uint16_t *sK = ty_wg_smem_base(), *sV = sK + BKV * D, *sQ = sV + BKV * D;
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
  /* Query tiles [qt_lo, qt_lo + nqt) of each head of the group see the block. */
  int qt_lo, nqt;
  ty_att_query_tiles<BQ, BKV>(k0, Tq, off, window, &qt_lo, &nqt);
  const int iters = G * nqt;

  /* Iteration it: head kvh G + it / nqt, query tile qt_lo + it % nqt. */
  const ty_wg_copy<64, NT> copy;
  auto load_tile = [&](int it, int buf) {
    const int h = kvh * G + it / nqt;
    const int q0 = (qt_lo + it % nqt) * BQ;
    const long long base = ((long long)b * Tq * Hq + h) * D;
    const uint16_t *qb = (const uint16_t *)q + base, *ob = (const uint16_t *)dout + base;
    copy(sQ + buf * BQ * D, qb, q_stride, q0, Tq, aligned);
    copy(sO + buf * BQ * D, ob, q_stride, q0, Tq, aligned);
    const long long row = ((long long)b * Hq + h) * Tq;
    ty_att_load_stats<BQ, NT>(sL + buf * BQ, sD + buf * BQ, lse, delta, row, q0, Tq);
  };
  if (iters > 0) { /* else nothing sees these keys: store zeros */
    copy(sK, (const uint16_t *)k + kv_base, kv_stride, k0, S, aligned);
    copy(sV, (const uint16_t *)v + kv_base, kv_stride, k0, S, aligned);
    load_tile(0, 0);
  }
  ty_cp_commit();

  const int kw0 = k0 + warp * 16; /* the warp's first key */
  const int key0 = kw0 + g, key1 = kw0 + g + 8;
  float ak[32], av[32];
  ty_wg_zero(ak);
  ty_wg_zero(av);
  for (int it = 0; it < iters; ++it) {
    const int buf = it & 1;
    ty_cp_wait<0>();
    ty_wg_fence_smem();
    __syncthreads();
    if (it + 1 < iters) load_tile(it + 1, buf ^ 1);
    ty_cp_commit();
    const int q0 = (qt_lo + it % nqt) * BQ;
    /* Block-uniform: no query of the tile sees any of the 64 keys. */
    if (min(q0 + BQ, Tq) - 1 + off < k0 || (window > 0 && q0 + off - window + 1 > k0 + BKV - 1)) {
      continue;
    }
    const uint16_t *tQ = sQ + buf * BQ * D, *tO = sO + buf * BQ * D;
    const float *tL = sL + buf * BQ, *tD = sD + buf * BQ;
    float st[32], dpt[32];
    ty_wg_zero(st);
    ty_wg_zero(dpt);
    ty_wg_keep(st);
    ty_wg_keep(dpt);
    ty_wg_fence();
    ty_wg_mm_kk<T>(st, sK, tQ);
    ty_wg_mm_kk<T>(dpt, sV, tO);
    ty_wg_commit();
    ty_wg_wait<0>();
    ty_wg_keep(st);
    ty_wg_keep(dpt);
    /* Element 4 j + e: key (e < 2 ? key0 : key1), query q0 + c with column
     * c = 8 j + 2 tq + (e & 1). Visible iff c >= key - off - q0 (causal),
     * c < Tq - q0, and c < key - off - q0 + window; masked scores are -inf
     * (P = 0, dS = 0). */
    if (q0 + BQ > Tq || kw0 + 15 > q0 + off || (window > 0 && q0 + BQ - 1 + off - kw0 >= window)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int lo = (r ? key1 : key0) - off - q0 - 2 * tq;
        int hi = Tq - q0 - 2 * tq;
        if (window > 0) hi = min(hi, lo + window);
#pragma unroll
        for (int j = 0; j < BQ / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int cc = 8 * j + e;
            if (cc < lo || cc >= hi) st[4 * j + 2 * r + e] = -INFINITY;
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
      /* lse (log2 units) and delta of columns 8 j + 2 tq, + 1. */
      const float2 lc = *(const float2 *)(tL + j * 8 + tq * 2);
      const float2 dc = *(const float2 *)(tD + j * 8 + tq * 2);
      const float l2c[2] = {lc.x * TY_ATT_LOG2E, lc.y * TY_ATT_LOG2E}, dlc[2] = {dc.x, dc.y};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = ty_exp2_ftz(fmaf(st[4 * j + e], sl2, -l2c[e & 1]));
        st[4 * j + e] = p;
        dpt[4 * j + e] = p * (dpt[4 * j + e] - dlc[e & 1]); /* dS^T */
      }
    }
    /* dV += P^T dO and dK += dS^T Q: A from registers, B MN-major. */
    uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
    for (int kc = 0; kc < BQ / 16; ++kc) {
      ty_wg_afrag<T>(pa[kc], st, kc);
      ty_wg_afrag<T>(da[kc], dpt, kc);
    }
    ty_wg_keep(av);
    ty_wg_keep(ak);
    ty_wg_fence();
    ty_wg_mm_rn<T>(av, pa, tO);
    ty_wg_mm_rn<T>(ak, da, tQ);
    ty_wg_commit();
    ty_wg_wait<0>();
    ty_wg_keep(av);
    ty_wg_keep(ak);
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
      ty_tc_store2<T>(krow + j * 8 + tq * 2, ak[4 * j + 2 * r] * scale,
                      ak[4 * j + 2 * r + 1] * scale, aligned);
      ty_tc_store2<T>(vrow + j * 8 + tq * 2, av[4 * j + 2 * r], av[4 * j + 2 * r + 1], aligned);
    }
  }
}

#define TY_WG_CALL(expr) expr
#else /* not sm_90a: the entry points exist (the host pass sees them) but trap */
#define TY_WG_CALL(expr) __trap()
#endif

/* The parameter lists are attention.cu's (cuda_attention.c packs them). */
#define TY_ATT_WG(name, T)                                                                   \
  extern "C" __global__ void __launch_bounds__(128 * TY_ATT_WG_FWD_WGS, 2)                   \
      ty_att_fwd_wg_##name##_d64(const T *q, const T *k, const T *v, T *out, float *lse,     \
                                 const long long *kvlen, int Tq, int S, int Hq, int Hkv,     \
                                 int D, float scale, float sl2, int window, ERR_ARGS) {      \
    ty_pdl_enter();                                                                          \
    (void)D;                                                                                 \
    (void)scale;                                                                             \
    TY_WG_CALL((ty_att_fwd_wg<T>(q, k, v, out, lse, kvlen, Tq, S, Hq, Hkv, sl2, window, err, \
                                 node)));                                                    \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(128, 3) ty_att_dq_wg_##name##_d64(            \
      const T *dout, const T *q, const T *k, const T *v, const float *lse,                   \
      const float *delta, const long long *kvlen, T *dq, int Tq, int S, int Hq, int Hkv,     \
      int D, float scale, float sl2, int window, ERR_ARGS) {                                 \
    ty_pdl_enter();                                                                          \
    (void)D;                                                                                 \
    TY_WG_CALL((ty_att_dq_wg<T>(dout, q, k, v, lse, delta, kvlen, dq, Tq, S, Hq, Hkv, scale, \
                                sl2, window, err, node)));                                   \
  }                                                                                          \
  extern "C" __global__ void __launch_bounds__(128, 3) ty_att_dkv_wg_##name##_d64(           \
      const T *dout, const T *q, const T *k, const T *v, const float *lse,                   \
      const float *delta, const long long *kvlen, T *dk, T *dv, int Tq, int S, int Hq,       \
      int Hkv, int D, float scale, float sl2, int window, ERR_ARGS) {                        \
    ty_pdl_enter();                                                                          \
    (void)D;                                                                                 \
    TY_WG_CALL((ty_att_dkv_wg<T>(dout, q, k, v, lse, delta, kvlen, dk, dv, Tq, S, Hq, Hkv,   \
                                 scale, sl2, window, err, node)));                           \
  }

TY_ATT_WG(bf16, __nv_bfloat16)
TY_ATT_WG(f16, __half)
