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
 * own span). A tile: (1) each warp takes keys t = warp, warp + 4, ...: its
 * lanes hold the key's D elements and reduce the dot product with every
 * query head of the chunk (lane-strided partial sums, then shuffles in a
 * fixed order); (2) a warp per query head turns the tile's 32 scores into
 * exp(s - m_new) and rescales the running sum; (3) each thread owns query
 * elements (head, d) and adds w_t v_t[d] over the tile's keys in order. All
 * f32, one order.
 *
 * Runs: rows of one sequence with the same lo and per (a prefill chunk
 * without a window, whose rows differ only in p) have the same tile
 * boundaries, so the block of the run's first row takes up to `rgroup` of
 * them at once and reads each K/V tile once for all; the other rows' blocks
 * return. Every row still does exactly the arithmetic above (its keys past
 * its own p are skipped, not weighted by zero), so its bits are the same
 * alone or in a run, in any batch: the grouping is only a speed-up.
 *
 * Data errors (TY_ERR_PAGED_ROW: row*4 + TY_PAGED_BAD_*, the value, its
 * bound): row_seq outside [-1, S), row_pos outside [0, MB*BS), a block
 * number outside [0, NB) (that key is then left out; the row named is its
 * run's first). The partials of split sp of row i,
 * query head h: part[((i*Hq + h)*max_splits + sp)*D + d], and (max, sum) at
 * part[N*Hq*max_splits*D + ((i*Hq + h)*max_splits + sp)*2]. */

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
  r.splits = (int)((keys + r.per - 1) / r.per);
  return r;
}

/* Rows a and b share tile boundaries (and so may share a block). */
__device__ inline bool ty_pa_same_run(const ty_pa_row &a, const ty_pa_row &b) {
  return a.s >= 0 && a.s == b.s && a.lo == b.lo && a.per == b.per;
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
  __shared__ float q_sh[TY_PA_MAX_GD];
  __shared__ float s_sh[TY_PA_MAX_GC * TY_PA_TILE];
  __shared__ float m_sh[TY_PA_MAX_GC], l_sh[TY_PA_MAX_GC], c_sh[TY_PA_MAX_GC];
  __shared__ long long slot_sh[TY_PA_TILE];
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
  for (int r = 0; r < nr; ++r) {
    const long long p = row_pos[i0 + r], e = k0 + lead.per < p + 1 ? k0 + lead.per : p + 1;
    k1[r] = e; /* <= k0: the row has no keys in this split */
    if (e > k0) ++active;
    if (e > kend) kend = e;
  }
  if (active == 0) return;
  const long long *trow = table + lead.s * MB;
  const int rgd = nr * gd, rgc = nr * gc;

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
  __syncthreads();

  for (long long t0 = k0; t0 < kend; t0 += TY_PA_TILE) {
    /* (0) the tile's pool slots, once (the block table read off the
     * critical path of every key's load below) */
    if (tid < TY_PA_TILE) {
      const long long j = t0 + tid;
      long long slot = -1;
      if (j < kend) {
        const long long blk = trow[j / BS];
        if (blk < 0 || blk >= NB) {
          ty_fail(err, node, TY_ERR_PAGED_ROW, i0 * 4 + TY_PAGED_BAD_BLOCK, blk, NB);
        } else {
          slot = blk * BS + j % BS;
        }
      }
      slot_sh[tid] = slot;
    }
    __syncthreads();
    /* (1) scores: the key's elements once, dotted with every (row, head).
     * A warp takes keys warp, warp + 4, ...: TY_PA_KEYS_AT_ONCE of them
     * loaded together (independent loads, all in flight), then reduced one
     * by one as before (the same arithmetic, one memory latency per group
     * of keys instead of per key). */
    constexpr int kAtOnce = TY_PA_KEYS_AT_ONCE;
    for (int t1 = warp; t1 < TY_PA_TILE; t1 += warps * kAtOnce) {
      float kr[kAtOnce][TY_PA_MAX_D / 32];
#pragma unroll
      for (int u = 0; u < kAtOnce; ++u) {
        const int t = t1 + u * warps;
        const long long slot = t < TY_PA_TILE ? slot_sh[t] : -1;
#pragma unroll
        for (int jj = 0; jj < TY_PA_MAX_D / 32; ++jj) {
          const int d = lane + 32 * jj;
          kr[u][jj] = slot >= 0 && d < D ? ty_to_f<T>(kp[(slot * Hkv + g) * D + d]) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kAtOnce; ++u) {
        const int t = t1 + u * warps;
        if (t >= TY_PA_TILE) break;
        const long long j = t0 + t;
        const long long slot = slot_sh[t];
        for (int rc = 0; rc < rgc; ++rc) {
          const int r = rc / gc, c = rc % gc;
          if (slot < 0 || j >= k1[r]) { /* warp-uniform: past the row's split, or a bad block */
            if (lane == 0) s_sh[rc * TY_PA_TILE + t] = -INFINITY;
            continue;
          }
          float dot = 0.0f;
#pragma unroll
          for (int jj = 0; jj < TY_PA_MAX_D / 32; ++jj) {
            const int d = lane + 32 * jj;
            if (d < D) dot += q_sh[(r * gc + c) * D + d] * kr[u][jj];
          }
          dot = ty_warp_sum(dot);
          if (lane == 0) s_sh[rc * TY_PA_TILE + t] = dot * scale;
        }
      }
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
          /* The tile's values first (independent loads, all in flight),
           * then the sum in key order: the same arithmetic as one load and
           * one multiply-add per key, without a memory latency per key. */
          float vv[TY_PA_TILE];
#pragma unroll
          for (int t = 0; t < TY_PA_TILE; ++t) {
            const long long slot = slot_sh[t];
            vv[t] = t < tn && slot >= 0 ? ty_to_f<T>(vp[(slot * Hkv + g) * D + d]) : 0.0f;
          }
#pragma unroll
          for (int t = 0; t < TY_PA_TILE; ++t) {
            if (t < tn && slot_sh[t] >= 0) a += s_sh[rc * TY_PA_TILE + t] * vv[t];
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
      const ty_pa_row row = ty_pa_row_of(row_seq, row_pos, i, S, cap, window);
      if (row.splits == 1) {
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
    if (k1[r] <= k0 || ty_pa_row_of(row_seq, row_pos, i, S, cap, window).splits == 1) continue;
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
