/* The tensor-core attention kernels: bf16/f16 storage, head dim 64 or 128,
 * mma.sync m16n8k16 with f32 accumulation, FlashAttention-2 style (each warp
 * owns 16 rows, scores and probabilities never leave registers). Included by
 * attention.cu; the math, tiling and tolerances are described there.
 *
 * Shared tiles are [rows][D] 16-bit elements, rows D * 2 bytes apart; the
 * 16-byte chunk c of row r is stored at chunk c ^ (r & 7), so the eight row
 * addresses of every ldmatrix 8x8 matrix (eight consecutive rows, one
 * chunk) fall in distinct bank groups, and a row's chunks stay contiguous
 * 16-byte units for cp.async. Tiles are loaded with cp.async into two
 * buffers: tile j + 1 is fetched while tile j is computed. */
#ifndef TY_CUDA_KERNELS_ATTENTION_TC_CUH_
#define TY_CUDA_KERNELS_ATTENTION_TC_CUH_

#include "attention_simt.cuh"
#include "warp_mma.cuh"

/* The address of element (r, 8 c) of a swizzled [rows][D] tile. */
template <int D>
__device__ __forceinline__ uint16_t *ty_tc_at(uint16_t *s, int r, int c) {
  return s + r * D + ((c ^ (r & 7)) << 3);
}

/* Rows [row0, row0 + ROWS) of a tensor whose row r starts at base + r *
 * stride (elements) into the swizzled tile s; rows at or past `valid` are
 * zero. With `aligned` false (a base address not 16-byte aligned) the
 * copies go through registers instead of cp.async. */
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void ty_tc_load(uint16_t *s, const uint16_t *base, long long stride,
                                           int row0, int valid, bool aligned) {
  constexpr int CH = D / 8;
#pragma unroll
  for (int i = threadIdx.x; i < ROWS * CH; i += THREADS) {
    const int r = i / CH, c = i % CH;
    const bool ok = row0 + r < valid;
    const uint16_t *src = base + (ok ? row0 + r : 0) * stride + c * 8;
    uint16_t *dst = ty_tc_at<D>(s, r, c);
    if (aligned) {
      ty_cp_async16(dst, src, ok ? 16 : 0);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = ok ? src[e] : (uint16_t)0;
    }
  }
}

/* Lane address of ldmatrix for an A fragment (rows row0.., k-chunk kc) and
 * for B fragments of a [k][n] tile read transposed (k rows 16 kc.., n
 * chunk nc): matrix (lane >> 3) covers rows +8 (bit 0) and chunk +1 (bit 1). */
template <int D>
__device__ __forceinline__ uint16_t *ty_tc_a_addr(uint16_t *s, int row0, int kc, int lane) {
  return ty_tc_at<D>(s, row0 + ((lane >> 3) & 1) * 8 + (lane & 7), kc * 2 + (lane >> 4));
}

/* ... and for two B fragments (n-tiles n0, n0 + 8) of an [n][k] tile at
 * k-chunk kc: matrix bit 0 is the chunk, bit 1 the n-tile. */
template <int D>
__device__ __forceinline__ uint16_t *ty_tc_bn_addr(uint16_t *s, int n0, int kc, int lane) {
  return ty_tc_at<D>(s, n0 + (lane >> 4) * 8 + (lane & 7), kc * 2 + ((lane >> 3) & 1));
}

/* Stores two adjacent values (columns d, d + 1) of row `p`. */
template <typename T>
__device__ __forceinline__ void ty_tc_store2(T *p, float x, float y, bool aligned) {
  const uint32_t u = ty_pack2<T>(x, y);
  if (aligned) {
    *(uint32_t *)p = u;
  } else {
    ((uint16_t *)p)[0] = (uint16_t)(u & 0xffffu);
    ((uint16_t *)p)[1] = (uint16_t)(u >> 16);
  }
}

__device__ __forceinline__ float ty_tc_max4(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float ty_tc_sum4(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* ty_att_visible in 32 bits: positions are below 2^31 (the plan checks T and
 * S), and 64-bit compares cost registers the forward does not have. */
__device__ __forceinline__ bool ty_tc_visible(int pos, int key, int window) {
  return key <= pos && (window == 0 || pos - key < window);
}

/* Whether a 16 x 64 (rows x keys) piece needs the per-element mask: some
 * key past the first row's position, or (window) before the last row's
 * window start. Rows past T are masked by the caller or harmless. */
__device__ __forceinline__ bool ty_tc_needs_mask(int row0, int nrows, int key0, int nkeys,
                                                 int off, int window) {
  return key0 + nkeys - 1 > row0 + off ||
         (window > 0 && row0 + nrows - 1 + off - key0 >= window);
}

/* Whether 16 rows from row0 see none of the keys [key0, key0 + nkeys): the
 * keys all come after the last row's position or (window) end before the
 * first row's window start. */
__device__ __forceinline__ bool ty_tc_sees_none(int row0, int key0, int nkeys, int off,
                                                int window) {
  return key0 > row0 + 15 + off || (window > 0 && key0 + nkeys - 1 < row0 + off - window + 1);
}

/* The key tiles of BK keys, [*kt_lo, *kt_hi), that hold every key query
 * rows [q0, q0 + BQ) see; *end is one past the last row's position (keys
 * from there on are loaded as zeros). Shared with attention_sm90.cu. */
template <int BQ, int BK>
__device__ __forceinline__ void ty_att_key_tiles(int q0, int Tq, int off, int window, int *end,
                                                 int *kt_lo, int *kt_hi) {
  *end = min(q0 + BQ, Tq) + off;
  const int first = window > 0 ? max(0, q0 + off - window + 1) : 0;
  *kt_lo = first / BK;
  *kt_hi = (*end + BK - 1) / BK;
}

/* The same for the kernels' NC (causal=0) instances: every row sits at
 * `last` = L - 1, so the tiles are [0, ceil(L / BK)); causal ones as above. */
template <int BQ, int BK, bool NC>
__device__ __forceinline__ void ty_att_key_tiles_nc(int q0, int Tq, int off, int last,
                                                    int window, int *end, int *kt_lo,
                                                    int *kt_hi) {
  if (NC) {
    *end = last + 1;
    *kt_lo = 0;
    *kt_hi = (*end + BK - 1) / BK;
  } else {
    ty_att_key_tiles<BQ, BK>(q0, Tq, off, window, end, kt_lo, kt_hi);
  }
}

/* The query tiles of BQ rows, [*qt_lo, *qt_lo + *nqt), in which some row
 * sees one of keys [k0, k0 + BKV) (per query head of the group). */
template <int BQ, int BKV>
__device__ __forceinline__ void ty_att_query_tiles(int k0, int Tq, int off, int window,
                                                   int *qt_lo, int *nqt) {
  const int t_lo = max(0, k0 - off);
  int t_hi = Tq - 1;
  if (window > 0) t_hi = (int)min((long long)t_hi, (long long)k0 + BKV - 1 + window - 1 - off);
  *qt_lo = t_lo / BQ;
  *nqt = t_lo <= t_hi ? t_hi / BQ - *qt_lo + 1 : 0;
}

/* lse (in log2 units) and delta of query rows t0 and t1 of the [B, Hq, T]
 * row block starting at `row`; 0 past T. */
__device__ __forceinline__ void ty_att_row_stats(const float *lse, const float *delta,
                                                 long long row, int Tq, int t0, int t1,
                                                 float l2[2], float dl[2]) {
  l2[0] = l2[1] = dl[0] = dl[1] = 0.0f;
  if (t0 < Tq) {
    l2[0] = lse[row + t0] * TY_ATT_LOG2E;
    dl[0] = delta[row + t0];
  }
  if (t1 < Tq) {
    l2[1] = lse[row + t1] * TY_ATT_LOG2E;
    dl[1] = delta[row + t1];
  }
}

/* lse and delta of query rows [q0, q0 + BQ) of the row block at `row` into
 * tL and tD by cp.async (NT threads; rows past T as zeros). */
template <int BQ, int NT>
__device__ __forceinline__ void ty_att_load_stats(float *tL, float *tD, const float *lse,
                                                  const float *delta, long long row, int q0,
                                                  int Tq) {
  for (int i = threadIdx.x; i < 2 * BQ; i += NT) {
    const int r = i % BQ;
    const bool ok = q0 + r < Tq;
    const float *src = (i < BQ ? lse : delta) + row + (ok ? q0 + r : 0);
    ty_cp_async4((i < BQ ? tL : tD) + r, src, ok ? 4 : 0);
  }
}

/* out, lse = attention(q, k, v): grid (ceil(T / 128), Hq, B), 256 threads;
 * query tiles in reverse order so the longest causal rows start first. */
template <typename T, int D, bool NC>
__device__ void ty_att_fwd_tc(const T *q, const T *k, const T *v, T *out, float *lse,
                              const long long *kvlen, int Tq, int S, int Hq, int Hkv, int D_,
                              float scale, float sl2, int window, ERR_ARGS) {
  (void)D_;
  (void)scale;
  constexpr int NW = TY_ATT_TC_FWD_WARPS, BQ = TY_ATT_TC_FWD_BQ, BK = TY_ATT_TC_BK;
  constexpr int NT = 32 * NW;
  uint16_t *sQ = (uint16_t *)ty_att_smem, *sK = sQ + BQ * D, *sV = sK + 2 * BK * D;
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node, NC ? 1 : Tq);
  if (L < 0) return;
  const int last = (int)L - 1; /* NC: every row's position */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / (Hq / Hkv);
  const int q0 = (int)(gridDim.x - 1 - blockIdx.x) * BQ, off = (int)L - Tq;
  const bool aligned = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)out) & 15) == 0;
  const long long q_stride = (long long)Hq * D, kv_stride = (long long)Hkv * D;
  const uint16_t *qb = (const uint16_t *)q + ((long long)b * Tq * Hq + h) * D;
  const uint16_t *kb = (const uint16_t *)k + ((long long)b * S * Hkv + kvh) * D;
  const uint16_t *vb = (const uint16_t *)v + ((long long)b * S * Hkv + kvh) * D;
  int hi, kt_lo, kt_hi; /* hi: one past the last row's position */
  ty_att_key_tiles_nc<BQ, BK, NC>(q0, Tq, off, last, window, &hi, &kt_lo, &kt_hi);

  ty_tc_load<D, BQ, NT>(sQ, qb, q_stride, q0, Tq, aligned);
  ty_tc_load<D, BK, NT>(sK + (kt_lo & 1) * BK * D, kb, kv_stride, kt_lo * BK, hi, aligned);
  ty_tc_load<D, BK, NT>(sV + (kt_lo & 1) * BK * D, vb, kv_stride, kt_lo * BK, hi, aligned);
  ty_cp_commit();

  const int w0 = q0 + warp * 16;           /* the warp's first row */
  const bool active = w0 < Tq;             /* rows past T: load, never compute */
  const int t0 = w0 + g, t1 = w0 + g + 8; /* this thread's rows */
  /* Q's A fragments stay in registers at D = 128; at D = 64 they are read
   * from shared memory per tile, which keeps the kernel within 128
   * registers (two blocks, 16 warps per SM). */
  constexpr bool kQRegs = D > 64;
  uint32_t qf[kQRegs ? D / 16 : 1][4];
  float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

  for (int kt = kt_lo; kt < kt_hi; ++kt) {
    const int buf = kt & 1;
    ty_cp_wait<0>();
    __syncthreads(); /* tile kt landed; every warp is done with tile kt - 1 */
    if (kt + 1 < kt_hi) {
      ty_tc_load<D, BK, NT>(sK + (buf ^ 1) * BK * D, kb, kv_stride, (kt + 1) * BK, hi, aligned);
      ty_tc_load<D, BK, NT>(sV + (buf ^ 1) * BK * D, vb, kv_stride, (kt + 1) * BK, hi, aligned);
    }
    ty_cp_commit();
    if (!active) continue;
    if (kQRegs && kt == kt_lo) {
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        ty_ldsm_x4(qf[kQRegs ? kc : 0], ty_tc_a_addr<D>(sQ, warp * 16, kc, lane));
      }
    }
    const int k0 = kt * BK;
    if (NC ? k0 > last : ty_tc_sees_none(w0, k0, BK, off, window)) continue;
    uint16_t *tK = sK + buf * BK * D, *tV = sV + buf * BK * D;
    float s[BK / 8][4];
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t qs[4];
      if (!kQRegs) ty_ldsm_x4(qs, ty_tc_a_addr<D>(sQ, warp * 16, kc, lane));
      const uint32_t *qa = kQRegs ? qf[kQRegs ? kc : 0] : qs;
#pragma unroll
      for (int np = 0; np < BK / 16; ++np) {
        uint32_t kf[4];
        ty_ldsm_x4(kf, ty_tc_bn_addr<D>(tK, np * 16, kc, lane));
        ty_mma16816<T>(s[2 * np], qa, kf[0], kf[1]);
        ty_mma16816<T>(s[2 * np + 1], qa, kf[2], kf[3]);
      }
    }
    if (NC ? k0 + BK - 1 > last : ty_tc_needs_mask(w0, 16, k0, BK, off, window)) {
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + j * 8 + tq * 2 + (e & 1);
          if (NC ? key > last : !ty_tc_visible((e < 2 ? t0 : t1) + off, key, window)) {
            s[j][e] = -INFINITY;
          }
        }
      }
    }
    /* Online softmax, in log2 units (scores times scale log2(e)). */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      const float mnew = fmaxf(m[r], ty_tc_max4(mx) * sl2);
      const float muse = mnew == -INFINITY ? 0.0f : mnew;
      const float corr = ty_exp2_ftz(m[r] - muse);
      m[r] = mnew;
      l[r] *= corr;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j][2 * r] *= corr;
        o[j][2 * r + 1] *= corr;
      }
#pragma unroll
      for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[j][e] = ty_exp2_ftz(fmaf(s[j][e], sl2, -muse));
          l[r] += s[j][e];
        }
      }
    }
    /* O += P V: P from registers (two C tiles = one A fragment). */
#pragma unroll
    for (int kc = 0; kc < BK / 16; ++kc) {
      uint32_t pa[4];
      pa[0] = ty_pack2<T>(s[2 * kc][0], s[2 * kc][1]);
      pa[1] = ty_pack2<T>(s[2 * kc][2], s[2 * kc][3]);
      pa[2] = ty_pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      pa[3] = ty_pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t vf[4];
        ty_ldsm_x4_trans(vf, ty_tc_a_addr<D>(tV, kc * 16, dp, lane));
        ty_mma16816<T>(o[2 * dp], pa, vf[0], vf[1]);
        ty_mma16816<T>(o[2 * dp + 1], pa, vf[2], vf[3]);
      }
    }
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
      ty_tc_store2<T>(orow + j * 8 + tq * 2, o[j][2 * r] * inv, o[j][2 * r + 1] * inv, aligned);
    }
    if (tq == 0) lse[((long long)b * Hq + h) * Tq + t] = (m[r] + log2f(lt)) * TY_ATT_LN2;
  }
}

/* dq = scale sum_s dS K with dS = P (dP - delta), P = exp(s scale - lse),
 * dP = dout V^T: grid (ceil(T / 64), Hq, B), 128 threads, query tiles in
 * reverse order. */
template <typename T, int D, bool NC>
__device__ void ty_att_dq_tc(const T *dout, const T *q, const T *k, const T *v,
                             const float *lse, const float *delta, const long long *kvlen, T *dq,
                             int Tq, int S, int Hq, int Hkv, int D_, float scale, float sl2,
                             int window, ERR_ARGS) {
  (void)D_;
  constexpr int NW = TY_ATT_TC_DQ_WARPS, BQ = TY_ATT_TC_DQ_BQ, BK = TY_ATT_TC_DQ_BK(D);
  constexpr int NT = 32 * NW;
  uint16_t *sQ = (uint16_t *)ty_att_smem, *sO = sQ + BQ * D, *sK = sO + BQ * D;
  uint16_t *sV = sK + 2 * BK * D;
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node, NC ? 1 : Tq);
  if (L < 0) return;
  const int last = (int)L - 1; /* NC: every row's position */
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
  ty_att_key_tiles_nc<BQ, BK, NC>(q0, Tq, off, last, window, &hi, &kt_lo, &kt_hi);

  ty_tc_load<D, BQ, NT>(sQ, (const uint16_t *)q + q_base, q_stride, q0, Tq, aligned);
  ty_tc_load<D, BQ, NT>(sO, (const uint16_t *)dout + q_base, q_stride, q0, Tq, aligned);
  ty_tc_load<D, BK, NT>(sK + (kt_lo & 1) * BK * D, kb, kv_stride, kt_lo * BK, hi, aligned);
  ty_tc_load<D, BK, NT>(sV + (kt_lo & 1) * BK * D, vb, kv_stride, kt_lo * BK, hi, aligned);
  ty_cp_commit();

  const int w0 = q0 + warp * 16;
  const bool active = w0 < Tq;
  const int t0 = w0 + g, t1 = w0 + g + 8;
  /* lse (log2 units) and delta of this thread's two rows; 0 past T. */
  float l2[2], dl[2];
  ty_att_row_stats(lse, delta, ((long long)b * Hq + h) * Tq, Tq, t0, t1, l2, dl);
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
    if (!active || (NC ? k0 > last : ty_tc_sees_none(w0, k0, BK, off, window))) continue;
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
    const bool mask = NC ? k0 + BK - 1 > last : ty_tc_needs_mask(w0, 16, k0, BK, off, window);
#pragma unroll
    for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int key = k0 + j * 8 + tq * 2 + (e & 1);
        float p = ty_exp2_ftz(fmaf(s[j][e], sl2, -l2[r]));
        if (mask && (NC ? key > last : !ty_tc_visible((r ? t1 : t0) + off, key, window))) {
          p = 0.0f;
        }
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
template <typename T, int D, bool NC>
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
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node, NC ? 1 : Tq);
  if (L < 0) return;
  const int last = (int)L - 1; /* NC: every query's position */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
  const int kvh = blockIdx.y, b = blockIdx.z, G = Hq / Hkv;
  const int k0 = (int)blockIdx.x * BKV, off = (int)L - Tq;
  const bool aligned = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)dout |
                         (uintptr_t)dk | (uintptr_t)dv) & 15) == 0;
  const long long q_stride = (long long)Hq * D, kv_stride = (long long)Hkv * D;
  const long long kv_base = ((long long)b * S * Hkv + kvh) * D;
  /* Query tiles [qt_lo, qt_hi] of each head of the group see the block. */
  int qt_lo, nqt;
  if (NC) { /* every query tile sees the block, unless it starts at L or after */
    qt_lo = 0;
    nqt = k0 <= last ? (Tq + BQ - 1) / BQ : 0;
  } else {
    ty_att_query_tiles<BQ, BKV>(k0, Tq, off, window, &qt_lo, &nqt);
  }
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
    ty_att_load_stats<BQ, NT>(sL + buf * BQ, sD + buf * BQ, lse, delta, row, q0, Tq);
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
    if (!active || (!NC && (min(q0 + BQ, Tq) - 1 + off < kw0 ||
                            (window > 0 && q0 + off - window + 1 > kw0 + 15)))) {
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
    const bool mask = q0 + BQ > Tq || (NC ? kw0 + 15 > last
                                          : kw0 + 15 > q0 + off ||
                                                (window > 0 && q0 + BQ - 1 + off - kw0 >= window));
#pragma unroll
    for (int j = 0; j < BQ / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = j * 8 + tq * 2 + (e & 1);
        float p = ty_exp2_ftz(fmaf(st[j][e], sl2, -ty_lds_f32(tL + c) * TY_ATT_LOG2E));
        const int key = e < 2 ? key0 : key1;
        const bool seen = NC ? key <= last : ty_tc_visible(q0 + c + off, key, window);
        if (mask && (q0 + c >= Tq || !seen)) p = 0.0f;
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

#endif /* TY_CUDA_KERNELS_ATTENTION_TC_CUH_ */
