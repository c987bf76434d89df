/* The paged KV cache of serving (issue 29): paged_kv_write and
 * paged_attention over a block pool [NB, BS, Hkv, D] and a block table
 * [S, MB] (the op contract: docs/ops.md).
 *
 *   paged_kv_write: pool[slots[i] / BS, slots[i] % BS] = new[i]   (slot -1: skipped)
 *   paged_attention: out[i, h] = sum_j softmax_j(scale q[i,h].k_j) v_j over the
 *     keys j in [lo, p] of the row's sequence s, k_j at
 *     pool[table[s, j / BS], j % BS, h / (Hq / Hkv)]
 *
 * Attention is flash-decoding: a block per (row, kv head, query-head chunk,
 * split) reads each key and value of its kv head once for all the chunk's
 * query heads (GQA), keeps an online softmax in f32, and leaves its
 * unnormalised output with its (max, sum) in scratch; a second kernel
 * merges a row's splits exactly (log-sum-exp). The split count comes from
 * the row's own span of keys (paged_shapes.h), never from the batch, so a
 * row gets the same bits in any batch: decode rows and prefill rows are the
 * same op. Rows with one split skip the scratch and write out directly. */
#include "vec.cuh"
#include "warp_mma.cuh"
#include "paged_shapes.h"

/* ---- paged_kv_write ----
 *
 * A block per row copies its Hkv*D elements as raw bytes, in units of up
 * to 16 bytes where the row size and both addresses allow. A slot outside
 * [-1, NB*BS) is a data error (TY_ERR_PAGED_SLOT: row, slot, NB*BS) and the
 * row is not written. Exact. */
extern "C" __global__ void ty_paged_kv_write(const void *fresh, void *pool, const long long *slots,
                                             int esize, long long row, long long nslots,
                                             ERR_ARGS) {
  const long long i = blockIdx.x, s = slots[i];
  if (s == -1) return;
  if (s < -1 || s >= nslots) {
    if (threadIdx.x == 0) ty_fail(err, node, TY_ERR_PAGED_SLOT, i, s, nslots);
    return;
  }
  const long long bytes = row * esize;
  const char *src = (const char *)fresh + i * bytes;
  char *dst = (char *)pool + s * bytes;
  const uintptr_t mix = (uintptr_t)src | (uintptr_t)dst | (uintptr_t)bytes;
  if (mix % 16 == 0) {
    for (long long u = threadIdx.x; u < bytes / 16; u += blockDim.x)
      ty_vstore(dst + 16 * u, ty_vload<uint4>(src + 16 * u));
  } else if (mix % 8 == 0) {
    for (long long u = threadIdx.x; u < bytes / 8; u += blockDim.x)
      ty_vstore(dst + 8 * u, ty_vload<uint2>(src + 8 * u));
  } else if (mix % 4 == 0) {
    for (long long u = threadIdx.x; u < bytes / 4; u += blockDim.x)
      ty_vstore(dst + 4 * u, ty_vload<uint32_t>(src + 4 * u));
  } else {
    for (long long u = threadIdx.x; u < bytes; u += blockDim.x) dst[u] = src[u];
  }
}

/* ---- paged_attention: the splits ----
 *
 * Grid (N, Hkv * chunks, max splits), TY_PA_THREADS threads. Row i's split
 * sp covers keys [lo + sp*per, min(lo + (sp+1)*per, p + 1)) in tiles of 32
 * keys from its start (per, the split count: paged_shapes.h, from the row's
 * own span). The tiles are staged in shared memory, two at a time: while a
 * tile is computed, the next one's keys and values are already on their way
 * (cp.async, one memory latency per tile overlapped with the work instead
 * of one per dependent load). A tile: (1) a thread per (key, row-head pair)
 * dots the staged key with that query, d = 0..D-1 in order; (2) a warp per
 * query head turns the tile's 32 scores into exp(s - m_new) and rescales
 * the running sum; (3) each thread owns query elements (head, d) and adds
 * w_t v_t[d] over the tile's keys in order. All f32, one order, whoever
 * computes it.
 *
 * Staging: a key's D elements are one row of the staging area, rows
 * ty_pa_row_bytes apart (16 bytes of padding, so the threads of a warp,
 * which read different keys' rows, hit different banks). A row moves in
 * 16-byte cp.async copies when its size and the pool allow, else 4-byte
 * ones, else element by element through registers. A key outside the
 * split or with a bad block is zero-filled and skipped.
 *
 * Runs: rows of one sequence with the same lo and per (a prefill chunk
 * without a window, whose rows differ only in p) have the same tile
 * boundaries, so the block of the run's first row takes up to `rgroup` of
 * them at once and stages each K/V tile once for all; the other rows'
 * blocks return. Every row still does exactly the arithmetic above (its
 * keys past its own p are skipped, not weighted by zero), so its bits are
 * the same alone or in a run, in any batch: the grouping is only a
 * speed-up.
 *
 * Data errors (TY_ERR_PAGED_ROW: row*4 + TY_PAGED_BAD_*, the value, its
 * bound): row_seq outside [-1, S), row_pos outside [0, MB*BS), a block
 * number outside [0, NB) (that key is then left out; the row named is its
 * run's first). The partials of split sp of row i,
 * query head h: part[((i*Hq + h)*max_splits + sp)*D + d], and (max, sum) at
 * part[N*Hq*max_splits*D + ((i*Hq + h)*max_splits + sp)*2].
 *
 * Dynamic shared memory (ty_pa_smem_bytes): the staged queries (f32, the
 * block's rgroup * gchunk * D), then two tiles of keys and two of values. */

#ifndef TY_CU_EMULATE
extern __shared__ __align__(16) unsigned char ty_pa_smem[];
#endif

/* What a row's split needs: its sequence (-1: padding, -2: a data error),
 * position, first visible key and keys per split. */
struct ty_pa_row {
  long long s, p, lo, per;
  int splits;
};

__device__ inline ty_pa_row ty_pa_row_of(const long long *row_seq, const long long *row_pos,
                                         long long i, int S, long long cap, int window) {
  ty_pa_row r;
  r.s = row_seq[i];
  r.p = row_pos[i];
  r.lo = r.per = 0;
  r.splits = 0;
  if (r.s < -1 || r.s >= S || (r.s >= 0 && (r.p < 0 || r.p >= cap))) r.s = -2;
  if (r.s < 0) return r;
  r.lo = window > 0 && r.p - window + 1 > 0 ? r.p - window + 1 : 0;
  const long long keys = r.p - r.lo + 1;
  r.per = ty_pa_split_keys(keys);
  r.splits = keys < 0x7fffffffLL - r.per ? ((int)keys + (int)r.per - 1) / (int)r.per
                                         : (int)((keys + r.per - 1) / r.per);
  return r;
}

/* Rows a and b share tile boundaries (and so may share a block). */
__device__ inline bool ty_pa_same_run(const ty_pa_row &a, const ty_pa_row &b) {
  return a.s >= 0 && a.s == b.s && a.lo == b.lo && a.per == b.per;
}

/* q . k over d = 0..D-1 in order, k a staged row of T (16-byte aligned). */
template <typename T>
__device__ inline float ty_pa_dot(const float *q, const unsigned char *row, int D) {
  const T *k = (const T *)row;
  float dot = 0.0f;
  if (D % 4 == 0) {
    for (int d = 0; d < D; d += 4) {
      float kv[4];
      ty_ld4(k + d, kv);
      const float4 qv = ty_vload<float4>(q + d);
      dot += qv.x * kv[0];
      dot += qv.y * kv[1];
      dot += qv.z * kv[2];
      dot += qv.w * kv[3];
    }
  } else {
    for (int d = 0; d < D; ++d) dot += q[d] * ty_to_f<T>(k[d]);
  }
  return dot;
}

/* Queues tile [t0, t0 + TILE) of the split's keys (those below kend) into
 * staging buffer `buf`: K rows, then V rows; slot_sh[t] = the key's pool
 * slot, or -1 for a key left out. Every thread calls it; thread x owns
 * copy units x, x + TY_PA_THREADS, ... of the tile's keys (key u / upr,
 * unit u % upr), the same for K and V, so it finds each of its keys' slot
 * once. Index arithmetic in 32 bits (j < MB * BS, an int; the pool row
 * offset in 64). */
template <typename T>
__device__ inline void ty_pa_stage(const T *kp, const T *vp, const long long *trow,
                                   unsigned char *kv, long long *slot_sh, long long t0,
                                   long long kend, int NB, int BS, int Hkv, int g, int D,
                                   int unit, int upr, long long i0, ERR_ARGS) {
  const int rb = ty_pa_row_bytes(D, (int)sizeof(T));
  const int total = TY_PA_TILE * upr;
  const int j0 = (int)t0, jend = (int)kend;
  for (int u = threadIdx.x; u < total; u += TY_PA_THREADS) {
    const int t = u / upr, c = u - t * upr;
    const int j = j0 + t;
    long long slot = -1;
    if (j < jend) {
      const int bi = j / BS;
      const long long blk = trow[bi];
      if (blk >= 0 && blk < NB) {
        slot = blk * BS + (j - bi * BS);
      } else if (c == 0) {
        ty_fail(err, node, TY_ERR_PAGED_ROW, i0 * 4 + TY_PAGED_BAD_BLOCK, blk, NB);
      }
    }
    if (c == 0) slot_sh[t] = slot;
    const long long off = slot >= 0 ? (slot * Hkv + g) * D : 0;
    const unsigned char *ks = (const unsigned char *)(kp + off), *vs = (const unsigned char *)(vp + off);
    unsigned char *kd = kv + t * rb, *vd = kv + (TY_PA_TILE + t) * rb;
    if (unit == 16) {
      ty_cp_async16(kd + 16 * c, ks + 16 * c, slot >= 0 ? 16 : 0);
      ty_cp_async16(vd + 16 * c, vs + 16 * c, slot >= 0 ? 16 : 0);
    } else if (unit == 4) {
      ty_cp_async4(kd + 4 * c, ks + 4 * c, slot >= 0 ? 4 : 0);
      ty_cp_async4(vd + 4 * c, vs + 4 * c, slot >= 0 ? 4 : 0);
    } else {
      ((T *)kd)[c] = slot >= 0 ? ((const T *)ks)[c] : ty_from_f<T>(0.0f);
      ((T *)vd)[c] = slot >= 0 ? ((const T *)vs)[c] : ty_from_f<T>(0.0f);
    }
  }
  ty_cp_commit();
}

template <typename T>
__device__ void ty_paged_attn_impl(const void *q_, const void *kp_, const void *vp_,
                                   const long long *table, const long long *row_seq,
                                   const long long *row_pos, void *out_, float *part, int N,
                                   int NB, int BS, int Hq, int Hkv, int D, int S, int MB,
                                   int gchunk, int rgroup, int max_splits, float scale,
                                   int window, ERR_ARGS) {
  const T *q = (const T *)q_, *kp = (const T *)kp_, *vp = (const T *)vp_;
  T *out = (T *)out_;
  __shared__ float s_sh[TY_PA_MAX_GC * TY_PA_TILE];
  __shared__ float m_sh[TY_PA_MAX_GC], l_sh[TY_PA_MAX_GC], c_sh[TY_PA_MAX_GC];
  __shared__ long long slot_sh[2][TY_PA_TILE];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warps = TY_PA_THREADS / 32;
  const long long i0 = blockIdx.x, cap = (long long)MB * BS;
  const int G = Hq / Hkv, chunks = (G + gchunk - 1) / gchunk;
  const int g = (int)blockIdx.y / chunks, c0 = ((int)blockIdx.y % chunks) * gchunk;
  const int gc = G - c0 < gchunk ? G - c0 : gchunk, sp = (int)blockIdx.z;
  const int gd = gc * D;
  const ty_pa_row lead = ty_pa_row_of(row_seq, row_pos, i0, S, cap, window);
  if (lead.s == -1) { /* padding: zeros, written once */
    if (sp == 0) {
      for (int e = tid; e < gd; e += TY_PA_THREADS)
        out[(i0 * Hq + g * G + c0 + e / D) * D + e % D] = ty_from_f<T>(0.0f);
    }
    return;
  }
  if (lead.s == -2) {
    if (tid == 0) {
      const long long s = row_seq[i0], p = row_pos[i0];
      if (s < -1 || s >= S) ty_fail(err, node, TY_ERR_PAGED_ROW, i0 * 4 + TY_PAGED_BAD_SEQ, s, S);
      else ty_fail(err, node, TY_ERR_PAGED_ROW, i0 * 4 + TY_PAGED_BAD_POS, p, cap);
    }
    return;
  }
  /* A row the block before it took (same run, not at a group boundary). */
  if (i0 % rgroup != 0 &&
      ty_pa_same_run(ty_pa_row_of(row_seq, row_pos, i0 - 1, S, cap, window), lead))
    return;
  int nr = 1;
  long long k1[TY_PA_MAX_ROWS]; /* each row's end of this split */
  int active = 0;               /* rows with keys in this split */
  while (nr < rgroup && i0 + nr < N &&
         ty_pa_same_run(ty_pa_row_of(row_seq, row_pos, i0 + nr, S, cap, window), lead))
    ++nr;
  const long long k0 = lead.lo + sp * lead.per;
  long long kend = k0;
  unsigned multi = 0; /* bit r: row r has more than one split (partials, not out) */
  for (int r = 0; r < nr; ++r) {
    const long long p = row_pos[i0 + r], e = k0 + lead.per < p + 1 ? k0 + lead.per : p + 1;
    k1[r] = e; /* <= k0: the row has no keys in this split */
    if (e > k0) ++active;
    if (e > kend) kend = e;
    if (p + 1 - lead.lo > lead.per) multi |= 1u << r; /* rows of a run share lo and per */
  }
  if (active == 0) return;
  const long long *trow = table + lead.s * MB;
  const int rgd = nr * gd, rgc = nr * gc;
  const int esize = (int)sizeof(T), rb = ty_pa_row_bytes(D, esize);
  /* The copy unit: 16 or 4 bytes when every row's start allows it. */
  const uintptr_t mix = (uintptr_t)kp | (uintptr_t)vp | (uintptr_t)(D * esize);
  const int unit = mix % 16 == 0 ? 16 : mix % 4 == 0 ? 4 : 0;
  const int upr = unit ? D * esize / unit : D; /* copy units per row */
  float *q_sh = (float *)ty_pa_smem;
  unsigned char *kv_sh = ty_pa_smem + ty_pa_q_bytes(rgroup, gchunk, D);
  const int kv_tile = 2 * TY_PA_TILE * rb; /* one buffer: K rows then V rows */

  /* The first tile on its way before anything else. */
  ty_pa_stage<T>(kp, vp, trow, kv_sh, slot_sh[0], k0, kend, NB, BS, Hkv, g, D, unit, upr, i0,
                 err, node);
  for (int e = tid; e < rgd; e += TY_PA_THREADS) {
    const int r = e / gd, f = e % gd;
    q_sh[e] = ty_to_f<T>(q[((i0 + r) * Hq + g * G + c0 + f / D) * D + f % D]);
  }
  for (int rc = tid; rc < rgc; rc += TY_PA_THREADS) {
    m_sh[rc] = -INFINITY;
    l_sh[rc] = 0.0f;
  }
  constexpr int kPer = TY_PA_MAX_GD / TY_PA_THREADS; /* query elements a thread owns */
  float acc[kPer];
#pragma unroll
  for (int jj = 0; jj < kPer; ++jj) acc[jj] = 0.0f;

  int buf = 0;
  for (long long t0 = k0; t0 < kend; t0 += TY_PA_TILE, buf ^= 1) {
    /* The next tile into the other buffer (its last readers finished at
     * the barrier that ended the previous tile), then this one's wait. */
    if (t0 + TY_PA_TILE < kend) {
      ty_pa_stage<T>(kp, vp, trow, kv_sh + (buf ^ 1) * kv_tile, slot_sh[buf ^ 1],
                     t0 + TY_PA_TILE, kend, NB, BS, Hkv, g, D, unit, upr, i0, err, node);
      ty_cp_wait<1>();
    } else {
      ty_cp_wait<0>();
    }
    __syncthreads();
    const unsigned char *ks = kv_sh + buf * kv_tile, *vs = ks + TY_PA_TILE * rb;
    const long long *slots = slot_sh[buf];
    /* (1) scores: a thread per (key, row-head pair) */
    for (int x = tid; x < TY_PA_TILE * rgc; x += TY_PA_THREADS) {
      const int t = x % TY_PA_TILE, rc = x / TY_PA_TILE, r = rc / gc;
      const long long j = t0 + t;
      float sv = -INFINITY;
      if (slots[t] >= 0 && j < k1[r])
        sv = ty_pa_dot<T>(q_sh + rc * D, ks + t * rb, D) * scale;
      s_sh[rc * TY_PA_TILE + t] = sv;
    }
    __syncthreads();
    /* (2) online softmax of the rows with keys in this tile */
    for (int rc = warp; rc < rgc; rc += warps) {
      if (t0 >= k1[rc / gc]) continue;
      const float sv = s_sh[rc * TY_PA_TILE + lane];
      const float mo = m_sh[rc], mn = fmaxf(mo, ty_warp_max(sv));
      const float w = sv == -INFINITY ? 0.0f : expf(sv - mn);
      s_sh[rc * TY_PA_TILE + lane] = w;
      const float ws = ty_warp_sum(w);
      if (lane == 0) {
        const float corr = mo == -INFINITY ? 0.0f : expf(mo - mn);
        l_sh[rc] = l_sh[rc] * corr + ws;
        m_sh[rc] = mn;
        c_sh[rc] = corr;
      }
    }
    __syncthreads();
    /* (3) weighted values, key by key, each row over its own keys */
#pragma unroll
    for (int jj = 0; jj < kPer; ++jj) {
      const int e = tid + TY_PA_THREADS * jj;
      if (e < rgd) {
        const int r = e / gd, c = e % gd / D, d = e % D, rc = r * gc + c;
        if (t0 < k1[r]) {
          const int tn = k1[r] - t0 < TY_PA_TILE ? (int)(k1[r] - t0) : TY_PA_TILE;
          float a = acc[jj] * c_sh[rc];
          const float *w = s_sh + rc * TY_PA_TILE;
          for (int t = 0; t < tn; ++t) {
            if (slots[t] >= 0) a += w[t] * ty_to_f<T>(((const T *)(vs + t * rb))[d]);
          }
          acc[jj] = a;
        }
      }
    }
    __syncthreads();
  }

  const long long slots_per = (long long)N * Hq * max_splits;
#pragma unroll
  for (int jj = 0; jj < kPer; ++jj) {
    const int e = tid + TY_PA_THREADS * jj;
    if (e < rgd) {
      const int r = e / gd, c = e % gd / D, d = e % D;
      if (k1[r] <= k0) continue;
      const long long i = i0 + r, h = (long long)g * G + c0 + c;
      if (!(multi >> r & 1u)) {
        const float l = l_sh[r * gc + c];
        out[(i * Hq + h) * D + d] = ty_from_f<T>(l > 0.0f ? acc[jj] / l : 0.0f);
      } else {
        part[((i * Hq + h) * max_splits + sp) * D + d] = acc[jj];
      }
    }
  }
  for (int rc = tid; rc < rgc; rc += TY_PA_THREADS) {
    const int r = rc / gc, c = rc % gc;
    const long long i = i0 + r, h = (long long)g * G + c0 + c;
    if (k1[r] <= k0 || !(multi >> r & 1u)) continue;
    float *ml = part + slots_per * D + ((i * Hq + h) * max_splits + sp) * 2;
    ml[0] = m_sh[rc];
    ml[1] = l_sh[rc];
  }
}

#define TY_PA_PARAMS                                                                      \
  const void *q, const void *kp, const void *vp, const long long *table,                 \
      const long long *row_seq, const long long *row_pos, void *out, float *part, int N,  \
      int NB, int BS, int Hq, int Hkv, int D, int S, int MB, int gchunk, int rgroup,      \
      int max_splits, float scale, int window, ERR_ARGS
#define TY_PA_ARGS                                                                         \
  q, kp, vp, table, row_seq, row_pos, out, part, N, NB, BS, Hq, Hkv, D, S, MB, gchunk,    \
      rgroup, max_splits, scale, window, err, node
TY_KERNEL3_ATTR(ty_paged_attn, TY_PA_PARAMS, TY_PA_ARGS, __launch_bounds__(TY_PA_THREADS))

/* ---- paged_attention: the merge ----
 *
 *   M = max_sp m_sp, L = sum_sp l_sp e^(m_sp - M),
 *   out[d] = sum_sp acc_sp[d] e^(m_sp - M) / L
 *
 * in split order. Grid (N, Hq); rows with one split (written already),
 * padding rows and rows with a data error are left alone. */
template <typename T>
__device__ void ty_paged_merge_impl(const float *part, const long long *row_seq,
                                    const long long *row_pos, void *out_, int N, int Hq, int D,
                                    int S, int MB, int BS, int max_splits, int window) {
  T *out = (T *)out_;
  const long long i = blockIdx.x, h = blockIdx.y;
  const long long s = row_seq[i], p = row_pos[i];
  if (s < 0 || s >= S || p < 0 || p >= (long long)MB * BS) return;
  const long long lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
  const long long keys = p - lo + 1, per = ty_pa_split_keys(keys);
  const int splits = (int)((keys + per - 1) / per);
  if (splits == 1) return;
  const long long base = (i * Hq + h) * max_splits;
  const float *ml = part + (long long)N * Hq * max_splits * D + base * 2;
  float m = -INFINITY;
  for (int sp = 0; sp < splits; ++sp) m = fmaxf(m, ml[2 * sp]);
  float wsp[TY_PA_MAX_SPLITS], l = 0.0f;
  for (int sp = 0; sp < splits; ++sp) {
    wsp[sp] = ml[2 * sp] == -INFINITY ? 0.0f : expf(ml[2 * sp] - m);
    l += ml[2 * sp + 1] * wsp[sp];
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int sp = 0; sp < splits; ++sp) o += part[(base + sp) * D + d] * wsp[sp];
    out[(i * Hq + h) * D + d] = ty_from_f<T>(o * inv);
  }
}

#define TY_PM_PARAMS                                                                     \
  const float *part, const long long *row_seq, const long long *row_pos, void *out, int N, \
      int Hq, int D, int S, int MB, int BS, int max_splits, int window
#define TY_PM_ARGS part, row_seq, row_pos, out, N, Hq, D, S, MB, BS, max_splits, window
TY_KERNEL3(ty_paged_merge, TY_PM_PARAMS, TY_PM_ARGS)
