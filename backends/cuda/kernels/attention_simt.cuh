/* The generic attention kernels: every dtype, any head dim up to 256, f32
 * arithmetic on CUDA cores (FMA, no tensor cores), so f32 models get real
 * f32 attention. Included by attention.cu; the math and the tiling are
 * described there.
 *
 * Rows: the query rows of one (batch, kv head) are packed as R = t G + g
 * (token t, head g of the group of G = Hq / Hkv query heads sharing the kv
 * head), so a block's K/V tiles serve all the heads that read them and a
 * decoding step (T = 1) still fills G rows. A thread (row group rg =
 * tid / 8, lane c = tid % 8) owns rows rg RM + i, keys c + 8 j of a tile
 * and dims c + 8 j of an accumulator; row statistics are reduced over the 8
 * lanes of a row group (consecutive lanes: shuffles). */
#ifndef TY_CUDA_KERNELS_ATTENTION_SIMT_CUH_
#define TY_CUDA_KERNELS_ATTENTION_SIMT_CUH_

#include "attention_shapes.h"
#include "common.cuh"

#define TY_ATT_LOG2E 1.4426950408889634f
#define TY_ATT_LN2 0.6931471805599453f

#ifndef TY_CU_EMULATE
extern __shared__ __align__(16) unsigned char ty_att_smem[];
#endif

/* L = kv_len (S when absent), or -1 after recording the data error; every
 * block then returns without writing (the run fails). kv_len lies in
 * [lo, S]: lo = T when causal, 1 when not (docs/ops.md). */
__device__ inline long long ty_att_kv_len(const long long *kvlen, int Tq, int S, ERR_ARGS,
                                          int lo) {
  (void)Tq;
  if (!kvlen) return S;
  const long long L = *kvlen;
  if (L < lo || L > S) {
    if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && threadIdx.x == 0) {
      ty_fail(err, node, TY_ERR_KV_LEN, L, lo, S);
    }
    return -1;
  }
  return L;
}

__device__ inline long long ty_att_kv_len(const long long *kvlen, int Tq, int S, ERR_ARGS) {
  return ty_att_kv_len(kvlen, Tq, S, err, node, Tq);
}

/* The generic kernels' `window` argument also carries `causal`: -1 is
 * causal=0 (every key below L visible to every query; docs/ops.md; the
 * tensor-core kernels have _full instances for it instead, which ignore
 * window). Each kernel turns it into a row-position rule once, so
 * the masks and tile bounds below are the causal ones unchanged: query
 * token t sits at position t * cm + off, with cm = 1, off = L - T when
 * causal and cm = 0, off = L - 1 (every row at the last key) when not. */
struct ty_att_rows {
  long long cm, off;
};

__device__ inline ty_att_rows ty_att_rows_of(int *window, long long L, int Tq) {
  if (*window < 0) {
    *window = 0;
    return {0, L - 1};
  }
  return {1, L - Tq};
}

/* Key `key` is visible from absolute position `pos` (pos < 0: a padding
 * row, sees nothing). */
__device__ __forceinline__ bool ty_att_visible(long long pos, long long key, int window) {
  return pos >= 0 && key <= pos && (window == 0 || pos - key < window);
}

__device__ __forceinline__ float ty_att_sum8(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v + __shfl_xor_sync(0xffffffffu, v, 4);
}

__device__ __forceinline__ float ty_att_max8(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
}

/* Element offset of packed row R (token R / G, head kvh G + R % G) of a
 * [B, T, Hq, D] tensor, and of its lse/delta entry in [B, Hq, T]. */
__device__ __forceinline__ long long ty_att_qoff(int b, long long R, int G, int kvh, int Tq,
                                                 int Hq, int D) {
  const long long t = R / G, h = (long long)kvh * G + R % G;
  return (((long long)b * Tq + t) * Hq + h) * D;
}

__device__ __forceinline__ long long ty_att_rowoff(int b, long long R, int G, int kvh, int Tq,
                                                   int Hq) {
  const long long t = R / G, h = (long long)kvh * G + R % G;
  return ((long long)b * Hq + h) * Tq + t;
}

/* rows x DC floats (row stride DC + 1) from a [.., rows, H, D] tensor whose
 * row r starts at base + r * stride; rows at or past `valid` and dims past
 * D are zero. */
template <typename T, int DC>
__device__ inline void ty_att_simt_load_kv(float *dst, const T *base, long long stride, int rows,
                                           long long valid, int D) {
  for (int i = threadIdx.x; i < rows * DC; i += TY_ATT_SIMT_THREADS) {
    const int r = i / DC, d = i % DC;
    float x = 0.0f;
    if (r < valid && d < D) x = ty_to_f<T>(base[r * stride + d]);
    dst[r * (DC + 1) + d] = x;
  }
}

/* Packed query rows [R0, R0 + rows) of a [B, T, Hq, D] tensor. */
template <typename T, int DC>
__device__ inline void ty_att_simt_load_q(float *dst, const T *src, int b, long long R0,
                                          int rows, long long total, int G, int kvh, int Tq,
                                          int Hq, int D) {
  for (int i = threadIdx.x; i < rows * DC; i += TY_ATT_SIMT_THREADS) {
    const int r = i / DC, d = i % DC;
    float x = 0.0f;
    if (R0 + r < total && d < D) x = ty_to_f<T>(src[ty_att_qoff(b, R0 + r, G, kvh, Tq, Hq, D) + d]);
    dst[r * (DC + 1) + d] = x;
  }
}

/* out, lse = attention(q, k, v): grid (ceil(T G / BQ), Hkv, B). */
template <typename T, int DC>
__device__ void ty_att_fwd_simt(const T *q, const T *k, const T *v, T *out, float *lse,
                                const long long *kvlen, int Tq, int S, int Hq, int Hkv, int D,
                                float scale, float sl2, int window, ERR_ARGS) {
  (void)scale;
  constexpr int RM = TY_ATT_SIMT_RM(DC), KC = TY_ATT_SIMT_KC_FWD(DC);
  constexpr int BQ = 16 * RM, BK = 8 * KC, LD = DC + 1, LP = BK + 1;
  float *sQ = (float *)ty_att_smem, *sK = sQ + BQ * LD, *sV = sK + BK * LD, *sP = sV + BK * LD;
  int *sPos = (int *)(sP + BQ * LP);
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node, window < 0 ? 1 : Tq);
  if (L < 0) return;
  const ty_att_rows rp = ty_att_rows_of(&window, L, Tq);
  const int G = Hq / Hkv, kvh = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, rg = tid >> 3, c = tid & 7;
  const long long rows = (long long)Tq * G, R0 = (long long)blockIdx.x * BQ, off = rp.off;
  ty_att_simt_load_q<T, DC>(sQ, q, b, R0, BQ, rows, G, kvh, Tq, Hq, D);
  for (int r = tid; r < BQ; r += TY_ATT_SIMT_THREADS) {
    sPos[r] = R0 + r < rows ? (int)((R0 + r) / G * rp.cm + off) : -1;
  }
  /* Keys the block's rows can see: up to the last row's position, from the
   * first row's window start. */
  const long long hi = (min(R0 + BQ, rows) - 1) / G * rp.cm + off;
  long long lo = 0;
  if (window > 0) lo = max(0LL, R0 / G + off - window + 1);
  const long long kv_stride = (long long)Hkv * D;
  const long long kv_base = ((long long)b * S * Hkv + kvh) * D;
  const T *kb = k + kv_base, *vb = v + kv_base;
  float o[RM][DC / 8], m[RM], l[RM];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) o[i][j] = 0.0f;
  }
  for (long long k0 = lo / BK * BK; k0 <= hi; k0 += BK) {
    __syncthreads(); /* the previous tile's readers are done (and sQ is ready) */
    ty_att_simt_load_kv<T, DC>(sK, kb + k0 * kv_stride, kv_stride, BK, hi + 1 - k0, D);
    ty_att_simt_load_kv<T, DC>(sV, vb + k0 * kv_stride, kv_stride, BK, hi + 1 - k0, D);
    __syncthreads();
    float s[RM][KC];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < KC; ++j) s[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < DC; ++d) {
      float qv[RM], kv[KC];
#pragma unroll
      for (int i = 0; i < RM; ++i) qv[i] = sQ[(rg * RM + i) * LD + d];
#pragma unroll
      for (int j = 0; j < KC; ++j) kv[j] = sK[(c + 8 * j) * LD + d];
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < KC; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int pos = sPos[rg * RM + i];
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        const bool vis = ty_att_visible(pos, k0 + c + 8 * j, window);
        s[i][j] = vis ? s[i][j] * sl2 : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      const float mnew = fmaxf(m[i], ty_att_max8(mx));
      const float muse = mnew == -INFINITY ? 0.0f : mnew; /* no key yet: keep 0s */
      const float corr = exp2f(m[i] - muse);
      m[i] = mnew;
      float ps = 0.0f;
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        const float p = exp2f(s[i][j] - muse);
        ps += p;
        sP[(rg * RM + i) * LP + c + 8 * j] = p;
      }
      l[i] = l[i] * corr + ps; /* this lane's share; corr is the row's */
#pragma unroll
      for (int j = 0; j < DC / 8; ++j) o[i][j] *= corr;
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < BK; ++kk) {
      float p[RM];
#pragma unroll
      for (int i = 0; i < RM; ++i) p[i] = sP[(rg * RM + i) * LP + kk];
#pragma unroll
      for (int j = 0; j < DC / 8; ++j) {
        const float vv = sV[kk * LD + c + 8 * j];
#pragma unroll
        for (int i = 0; i < RM; ++i) o[i][j] = fmaf(p[i], vv, o[i][j]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const float lt = ty_att_sum8(l[i]);
    const long long R = R0 + rg * RM + i;
    if (R >= rows) continue;
    const float inv = 1.0f / lt;
    T *orow = out + ty_att_qoff(b, R, G, kvh, Tq, Hq, D);
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) {
      if (c + 8 * j < D) orow[c + 8 * j] = ty_from_f<T>(o[i][j] * inv);
    }
    if (c == 0) lse[ty_att_rowoff(b, R, G, kvh, Tq, Hq)] = (m[i] + log2f(lt)) * TY_ATT_LN2;
  }
}

/* Per-row data of the backward: position (-1 past the end), lse in log2
 * units, delta. */
__device__ inline void ty_att_simt_rowdata(int *pos, float *lse2, float *dl, const float *lse,
                                           const float *delta, int b, long long R0, int rows,
                                           long long total, int G, int kvh, int Tq, int Hq,
                                           ty_att_rows rp) {
  for (int r = threadIdx.x; r < rows; r += TY_ATT_SIMT_THREADS) {
    const long long R = R0 + r;
    if (R < total) {
      const long long o = ty_att_rowoff(b, R, G, kvh, Tq, Hq);
      pos[r] = (int)(R / G * rp.cm + rp.off);
      lse2[r] = lse[o] * TY_ATT_LOG2E;
      dl[r] = delta[o];
    } else {
      pos[r] = -1;
      lse2[r] = 0.0f;
      dl[r] = 0.0f;
    }
  }
}

/* dq = scale sum_s dS K: grid (ceil(T G / BQ), Hkv, B). */
template <typename T, int DC>
__device__ void ty_att_dq_simt(const T *dout, const T *q, const T *k, const T *v,
                               const float *lse, const float *delta, const long long *kvlen,
                               T *dq, int Tq, int S, int Hq, int Hkv, int D, float scale,
                               float sl2, int window, ERR_ARGS) {
  constexpr int RM = TY_ATT_SIMT_RM(DC), KC = TY_ATT_SIMT_KC_DQ(DC);
  constexpr int BQ = 16 * RM, BK = 8 * KC, LD = DC + 1, LP = BK + 1;
  float *sQ = (float *)ty_att_smem, *sO = sQ + BQ * LD, *sK = sO + BQ * LD, *sV = sK + BK * LD;
  float *sS = sV + BK * LD, *sL = sS + BQ * LP, *sD = sL + BQ;
  int *sPos = (int *)(sD + BQ);
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node, window < 0 ? 1 : Tq);
  if (L < 0) return;
  const ty_att_rows rp = ty_att_rows_of(&window, L, Tq);
  const int G = Hq / Hkv, kvh = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, rg = tid >> 3, c = tid & 7;
  const long long rows = (long long)Tq * G, R0 = (long long)blockIdx.x * BQ, off = rp.off;
  ty_att_simt_load_q<T, DC>(sQ, q, b, R0, BQ, rows, G, kvh, Tq, Hq, D);
  ty_att_simt_load_q<T, DC>(sO, dout, b, R0, BQ, rows, G, kvh, Tq, Hq, D);
  ty_att_simt_rowdata(sPos, sL, sD, lse, delta, b, R0, BQ, rows, G, kvh, Tq, Hq, rp);
  const long long hi = (min(R0 + BQ, rows) - 1) / G * rp.cm + off;
  long long lo = 0;
  if (window > 0) lo = max(0LL, R0 / G + off - window + 1);
  const long long kv_stride = (long long)Hkv * D;
  const long long kv_base = ((long long)b * S * Hkv + kvh) * D;
  const T *kb = k + kv_base, *vb = v + kv_base;
  float acc[RM][DC / 8];
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) acc[i][j] = 0.0f;
  for (long long k0 = lo / BK * BK; k0 <= hi; k0 += BK) {
    __syncthreads();
    ty_att_simt_load_kv<T, DC>(sK, kb + k0 * kv_stride, kv_stride, BK, hi + 1 - k0, D);
    ty_att_simt_load_kv<T, DC>(sV, vb + k0 * kv_stride, kv_stride, BK, hi + 1 - k0, D);
    __syncthreads();
    float s[RM][KC], dp[RM][KC];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < KC; ++j) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < DC; ++d) {
      float qv[RM], gv[RM], kv[KC], vv[KC];
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        qv[i] = sQ[(rg * RM + i) * LD + d];
        gv[i] = sO[(rg * RM + i) * LD + d];
      }
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        kv[j] = sK[(c + 8 * j) * LD + d];
        vv[j] = sV[(c + 8 * j) * LD + d];
      }
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < KC; ++j) {
          s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
          dp[i][j] = fmaf(gv[i], vv[j], dp[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int r = rg * RM + i, pos = sPos[r];
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        const float p = ty_att_visible(pos, k0 + c + 8 * j, window)
                            ? exp2f(fmaf(s[i][j], sl2, -sL[r]))
                            : 0.0f;
        sS[r * LP + c + 8 * j] = p * (dp[i][j] - sD[r]);
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < BK; ++kk) {
      float ds[RM];
#pragma unroll
      for (int i = 0; i < RM; ++i) ds[i] = sS[(rg * RM + i) * LP + kk];
#pragma unroll
      for (int j = 0; j < DC / 8; ++j) {
        const float kv = sK[kk * LD + c + 8 * j];
#pragma unroll
        for (int i = 0; i < RM; ++i) acc[i][j] = fmaf(ds[i], kv, acc[i][j]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const long long R = R0 + rg * RM + i;
    if (R >= rows) continue;
    T *row = dq + ty_att_qoff(b, R, G, kvh, Tq, Hq, D);
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) {
      if (c + 8 * j < D) row[c + 8 * j] = ty_from_f<T>(acc[i][j] * scale);
    }
  }
}

/* dk = scale sum dS^T Q, dv = sum P^T dO over every query row (all heads of
 * the group) that sees the block's keys: grid (ceil(S / BQ), Hkv, B), where
 * a block owns BQ keys and streams packed query rows BK at a time. */
template <typename T, int DC>
__device__ void ty_att_dkv_simt(const T *dout, const T *q, const T *k, const T *v,
                                const float *lse, const float *delta, const long long *kvlen,
                                T *dk, T *dv, int Tq, int S, int Hq, int Hkv, int D, float scale,
                                float sl2, int window, ERR_ARGS) {
  constexpr int RM = TY_ATT_SIMT_RM(DC), KC = TY_ATT_SIMT_KC_DKV(DC);
  constexpr int BKK = 16 * RM, BR = 8 * KC, LD = DC + 1, LP = BR + 1;
  float *sK = (float *)ty_att_smem, *sV = sK + BKK * LD, *sQ = sV + BKK * LD, *sO = sQ + BR * LD;
  float *sP = sO + BR * LD, *sS = sP + BKK * LP, *sL = sS + BKK * LP, *sD = sL + BR;
  int *sPos = (int *)(sD + BR);
  const long long L = ty_att_kv_len(kvlen, Tq, S, err, node, window < 0 ? 1 : Tq);
  if (L < 0) return;
  const ty_att_rows rp = ty_att_rows_of(&window, L, Tq);
  const int G = Hq / Hkv, kvh = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, kg = tid >> 3, c = tid & 7;
  const long long k0 = (long long)blockIdx.x * BKK, off = rp.off, rows = (long long)Tq * G;
  const long long kv_stride = (long long)Hkv * D;
  const long long kv_base = ((long long)b * S * Hkv + kvh) * D;
  ty_att_simt_load_kv<T, DC>(sK, k + kv_base + k0 * kv_stride, kv_stride, BKK, S - k0, D);
  ty_att_simt_load_kv<T, DC>(sV, v + kv_base + k0 * kv_stride, kv_stride, BKK, S - k0, D);
  /* Tokens that see a key of the block: from the first key's position on,
   * and with a window up to where the last key leaves it (causal=0: every
   * token when the block starts below L, else none). */
  const long long t_lo = rp.cm ? max(0LL, k0 - off) : k0 <= off ? 0LL : (long long)Tq;
  long long t_hi = Tq - 1;
  if (window > 0) t_hi = min(t_hi, k0 + BKK - 1 + window - 1 - off);
  const long long row_hi = min(rows, (t_hi + 1) * G);
  float ak[RM][DC / 8], av[RM][DC / 8];
#pragma unroll
  for (int i = 0; i < RM; ++i)
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) ak[i][j] = av[i][j] = 0.0f;
  for (long long R0 = t_lo * G; R0 < row_hi; R0 += BR) {
    __syncthreads(); /* the previous tile's readers are done (and sK, sV ready) */
    ty_att_simt_load_q<T, DC>(sQ, q, b, R0, BR, row_hi, G, kvh, Tq, Hq, D);
    ty_att_simt_load_q<T, DC>(sO, dout, b, R0, BR, row_hi, G, kvh, Tq, Hq, D);
    ty_att_simt_rowdata(sPos, sL, sD, lse, delta, b, R0, BR, row_hi, G, kvh, Tq, Hq, rp);
    __syncthreads();
    float st[RM][KC], dpt[RM][KC];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < KC; ++j) st[i][j] = dpt[i][j] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < DC; ++d) {
      float kv[RM], vv[RM], qv[KC], gv[KC];
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        kv[i] = sK[(kg * RM + i) * LD + d];
        vv[i] = sV[(kg * RM + i) * LD + d];
      }
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        qv[j] = sQ[(c + 8 * j) * LD + d];
        gv[j] = sO[(c + 8 * j) * LD + d];
      }
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < KC; ++j) {
          st[i][j] = fmaf(kv[i], qv[j], st[i][j]);
          dpt[i][j] = fmaf(vv[i], gv[j], dpt[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int kr = kg * RM + i;
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        const int r = c + 8 * j;
        const float p = ty_att_visible(sPos[r], k0 + kr, window)
                            ? exp2f(fmaf(st[i][j], sl2, -sL[r]))
                            : 0.0f;
        sP[kr * LP + r] = p;
        sS[kr * LP + r] = p * (dpt[i][j] - sD[r]);
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < BR; ++r) {
      float p[RM], ds[RM];
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        p[i] = sP[(kg * RM + i) * LP + r];
        ds[i] = sS[(kg * RM + i) * LP + r];
      }
#pragma unroll
      for (int j = 0; j < DC / 8; ++j) {
        const float gv = sO[r * LD + c + 8 * j], qv = sQ[r * LD + c + 8 * j];
#pragma unroll
        for (int i = 0; i < RM; ++i) {
          av[i][j] = fmaf(p[i], gv, av[i][j]);
          ak[i][j] = fmaf(ds[i], qv, ak[i][j]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const long long key = k0 + kg * RM + i;
    if (key >= S) continue;
    const long long o = kv_base + key * kv_stride;
#pragma unroll
    for (int j = 0; j < DC / 8; ++j) {
      if (c + 8 * j < D) {
        dk[o + c + 8 * j] = ty_from_f<T>(ak[i][j] * scale);
        dv[o + c + 8 * j] = ty_from_f<T>(av[i][j]);
      }
    }
  }
}

/* delta[(b Hq + h) T + t] = sum_d dout * out over one row: one warp per
 * row, TY_ATT_DELTA_ROWS rows per 256-thread block. */
template <typename T>
__device__ void ty_att_delta(const T *dout, const T *out, const float *dlse, float *delta,
                             long long rows, int Tq, int Hq, int D) {
  const long long row = (long long)blockIdx.x * TY_ATT_DELTA_ROWS + (threadIdx.x >> 5);
  if (row >= rows) return; /* whole warps */
  const int lane = threadIdx.x & 31;
  const long long t = row % Tq, h = (row / Tq) % Hq, b = row / ((long long)Tq * Hq);
  const long long base = ((b * Tq + t) * Hq + h) * D;
  float acc = 0.0f;
  for (int d = lane; d < D; d += 32) {
    acc = fmaf(ty_to_f<T>(dout[base + d]), ty_to_f<T>(out[base + d]), acc);
  }
  acc = ty_warp_sum(acc);
  /* dlse (the lse output's gradient, NULL when absent): D_i - dlse_i,
   * since d lse_i / d s_ij = P_ij; absent, the bits of before. */
  if (lane == 0) delta[row] = dlse ? acc - dlse[row] : acc;
}

#endif /* TY_CUDA_KERNELS_ATTENTION_SIMT_CUH_ */
