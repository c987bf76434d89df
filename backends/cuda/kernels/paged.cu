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
 * unnormalised output with its (max, sum) in scratch; the block that
 * finishes a row's splits last merges them exactly (log-sum-exp, in split
 * order). The split count comes from the row's own span of keys
 * (paged_shapes.h), never from the batch, so a row gets the same bits in
 * any batch: decode rows and prefill rows are the same op. Rows with one
 * split skip the scratch and write out directly. */
#include "vec.cuh"
#include "warp_mma.cuh"
#include "paged_shapes.h"

/* ---- paged_kv_write ----
 *
 * A block per (row, pool): blockIdx.y 0 writes `fresh` into `pool`, 1
 * writes `fresh2` into `pool2` (a layer's keys and values in one launch: the
 * KV_PAIR fusion, cuda_fuse.h; a single write launches one y). The row's
 * Hkv*D elements move as raw bytes, in units of up to 16 bytes where the
 * row size and both addresses allow. A slot outside [-1, NB*BS) is a data
 * error (TY_ERR_PAGED_SLOT: row, slot, NB*BS) and the row is not written.
 * Exact. */
extern "C" __global__ void ty_paged_kv_write(const void *fresh, void *pool, const void *fresh2,
                                             void *pool2, const long long *slots, int esize,
                                             long long row, long long nslots, ERR_ARGS) {
  ty_pdl_enter();
  const long long i = blockIdx.x, s = slots[i];
  if (s == -1) return;
  if (s < -1 || s >= nslots) {
    if (threadIdx.x == 0 && blockIdx.y == 0) ty_fail(err, node, TY_ERR_PAGED_SLOT, i, s, nslots);
    return;
  }
  const long long bytes = row * esize;
  const char *src = (const char *)(blockIdx.y ? fresh2 : fresh) + i * bytes;
  char *dst = (char *)(blockIdx.y ? pool2 : pool) + s * bytes;
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
 * of one per dependent load).
 *
 * The arithmetic of a (row, query head) over a tile is fixed, whoever does
 * it (a block of one row or of a run, any batch):
 *   (1) score of key t: the head's D dims cut into TY_PA_DPARTS pieces of
 *       ceil(D / TY_PA_DPARTS) (the last ones shorter or empty); each piece
 *       is a sum in d order, and the pieces are added as a butterfly
 *       ((p0+p4)+(p2+p6))+((p1+p5)+(p3+p7)) (xor 4, 2, 1 over the lanes of
 *       an 8-lane group: every lane holds the same bits), times the scale;
 *   (2) the tile's online softmax: m_new = max(m, tile max), w_t =
 *       exp(s_t - m_new), l = l * exp(m - m_new) + sum_t w_t (warp sums);
 *   (3) values: the tile's keys cut into TY_PA_KPARTS parts of 8; per
 *       element, each part is sum_t w_t v_t[d] in key order from 0, and
 *       acc = acc * exp(m - m_new) + ((s0 + s1) + (s2 + s3)).
 * All f32. Work is spread so that one decode row keeps every thread busy:
 * (1) takes 8 lanes per (key, row-head pair), 16 keys at once; (3) takes a
 * lane per (pair of elements, part), the parts of a pair in one warp
 * (lanes 8 apart) so the adds are two shuffles. The accumulators live in
 * shared memory (acc_sh), one float per (row, head, d) of the block.
 *
 * Staging: a key's D elements are one row of the staging area, rows
 * ty_pa_row_bytes apart (16 bytes of padding, so the lanes of a warp, which
 * read different keys' rows, spread over the banks). A row moves in 16-byte
 * cp.async copies when its size and the pool allow, else 4-byte ones, else
 * element by element through registers. A key outside the split or with a
 * bad block is zero-filled and gets no weight.
 *
 * Runs: rows of one sequence with the same lo and per (a prefill chunk
 * without a window, whose rows differ only in p) have the same tile
 * boundaries, so the block of the run's first row takes up to `rgroup` of
 * them at once and stages each K/V tile once for all; the other rows'
 * blocks return. Every row still does exactly the arithmetic above over its
 * own keys (keys past its p get no score, and its parts stop at its last
 * key), so its bits are the same alone or in a run, in any batch: the
 * grouping is only a speed-up.
 *
 * Data errors (TY_ERR_PAGED_ROW: row*4 + TY_PAGED_BAD_*, the value, its
 * bound): row_seq outside [-1, S), row_pos outside [0, MB*BS), a block
 * number outside [0, NB) (that key is then left out; the row named is its
 * run's first). The partials of split sp of row i,
 * query head h: part[((i*Hq + h)*max_splits + sp)*D + d], and (max, sum) at
 * part[N*Hq*max_splits*D + ((i*Hq + h)*max_splits + sp)*2]. count[i *
 * gridDim.y + y]: how many of row i's splits in block column y are done
 * (0 between launches: the merging block puts it back). A row with a data
 * error returns in every split before counting, so no count is left
 * half-way.
 *
 * Dynamic shared memory (ty_pa_smem_bytes): the staged queries (f32, the
 * block's rgroup * gchunk * D), as many f32 accumulators, then two tiles of
 * keys and two of values. */

#ifndef TY_CU_EMULATE
extern __shared__ __align__(16) unsigned char ty_pa_smem[];
#endif
/* The shuffles below are written for these cuts: 8 lanes a score (xor 4 2
 * 1), 4 parts of 8 keys a value sum (xor 8 16), whole warps a pass. */
static_assert(TY_PA_DPARTS == 8 && TY_PA_KPARTS == 4 && TY_PA_TILE == 32, "paged cuts");
static_assert(TY_PA_THREADS % 32 == 0, "paged block of whole warps");

/* A load from L2 (not a possibly stale L1 line): the merge reads the
 * partials other blocks wrote during this launch. */
__device__ inline float ty_pa_ld_cg(const float *p) {
#ifdef TY_CU_EMULATE
  return *p;
#else
  return __ldcg(p);
#endif
}

/* What a row's split needs: its sequence (-1: padding, -2: a data error),
 * position, first visible key and keys per split. */
struct ty_pa_row {
  long long s, p, lo, per;
};

__device__ inline ty_pa_row ty_pa_row_of(const long long *row_seq, const long long *row_pos,
                                         long long i, int S, long long cap, int window) {
  ty_pa_row r;
  r.s = row_seq[i];
  r.p = row_pos[i];
  r.lo = r.per = 0;
  if (r.s < -1 || r.s >= S || (r.s >= 0 && (r.p < 0 || r.p >= cap))) r.s = -2;
  if (r.s < 0) return r;
  r.lo = window > 0 && r.p - window + 1 > 0 ? r.p - window + 1 : 0;
  const long long keys = r.p - r.lo + 1;
  r.per = ty_pa_split_keys(keys);
  return r;
}

/* Row j shares tile boundaries with `lead` (and so may share its block).
 * Its sequence is compared first: a decode batch's neighbours differ there. */
__device__ inline bool ty_pa_joins(const ty_pa_row &lead, const long long *row_seq,
                                   const long long *row_pos, long long j, int S, long long cap,
                                   int window) {
  if (lead.s < 0 || row_seq[j] != lead.s) return false;
  const ty_pa_row b = ty_pa_row_of(row_seq, row_pos, j, S, cap, window);
  return b.s == lead.s && b.lo == lead.lo && b.per == lead.per;
}

/* One piece of a score: q . k over the dims [d0, d1) in d order (q f32 in
 * shared memory, k a staged row of T); 4 at a time where `vec`. */
template <typename T>
__device__ inline float ty_pa_dot_piece(const float *q, const T *k, int d0, int d1, bool vec) {
  float dot = 0.0f;
  int d = d0;
  if (vec) {
    for (; d + 4 <= d1; d += 4) {
      float kv[4];
      ty_ld4(k + d, kv);
      const float4 qv = ty_vload<float4>(q + d);
      dot = fmaf(qv.x, kv[0], dot);
      dot = fmaf(qv.y, kv[1], dot);
      dot = fmaf(qv.z, kv[2], dot);
      dot = fmaf(qv.w, kv[3], dot);
    }
  }
  for (; d < d1; ++d) dot = fmaf(q[d], ty_to_f<T>(k[d]), dot);
  return dot;
}

/* Two adjacent elements of a staged value row (the second 0 past D). */
template <typename T>
__device__ inline void ty_pa_ld2(const T *v, int d, int D, bool vec, float *x) {
  if (vec) {
    ty_ld2(v + d, x);
  } else {
    x[0] = ty_to_f<T>(v[d]);
    x[1] = d + 1 < D ? ty_to_f<T>(v[d + 1]) : 0.0f;
  }
}

/* Queues tile [t0, t0 + TILE) of the split's keys (those below kend) into
 * staging buffer `buf`: K rows, then V rows; slot_sh[t] = 1 for a key
 * staged, 0 for one left out (zero-filled). Every thread calls it; thread x
 * owns copy units x, x + TY_PA_THREADS, ... of the tile's keys (key u /
 * upr, unit u % upr; UNIT-byte units, 0: elements), the same for K and V,
 * so it finds each of its keys' slot once. Index arithmetic in 32 bits (j <
 * MB * BS, an int; the pool row offset in 64); a power-of-two block size
 * (bs_shift >= 0) divides by a shift. */
template <typename T, int DT, int UNIT>
__device__ inline void ty_pa_stage(const T *kp, const T *vp, const long long *trow,
                                   unsigned char *kv, int *slot_sh, int j0, int jend, int NB,
                                   int BS, int bs_shift, int Hkv, int g, int D_, long long i0,
                                   ERR_ARGS) {
  const int D = DT > 0 ? DT : D_;
  const int rb = ty_pa_row_bytes(D, (int)sizeof(T));
  const int upr = UNIT ? D * (int)sizeof(T) / UNIT : D;
  for (int u = threadIdx.x; u < TY_PA_TILE * upr; u += TY_PA_THREADS) {
    const int t = u / upr, c = u - t * upr;
    const int j = j0 + t;
    long long slot = -1;
    if (j < jend) {
      const int bi = bs_shift >= 0 ? j >> bs_shift : j / BS;
      const long long blk = trow[bi];
      if (blk >= 0 && blk < NB) {
        slot = blk * BS + (j - bi * BS);
      } else if (c == 0) {
        ty_fail(err, node, TY_ERR_PAGED_ROW, i0 * 4 + TY_PAGED_BAD_BLOCK, blk, NB);
      }
    }
    if (c == 0) slot_sh[t] = slot >= 0 ? 1 : 0;
    const long long off = slot >= 0 ? (slot * Hkv + g) * D : 0;
    const unsigned char *ks = (const unsigned char *)(kp + off), *vs = (const unsigned char *)(vp + off);
    unsigned char *kd = kv + t * rb, *vd = kv + (TY_PA_TILE + t) * rb;
    if (UNIT == 16) {
      ty_cp_async16(kd + 16 * c, ks + 16 * c, slot >= 0 ? 16 : 0);
      ty_cp_async16(vd + 16 * c, vs + 16 * c, slot >= 0 ? 16 : 0);
    } else if (UNIT == 4) {
      ty_cp_async4(kd + 4 * c, ks + 4 * c, slot >= 0 ? 4 : 0);
      ty_cp_async4(vd + 4 * c, vs + 4 * c, slot >= 0 ? 4 : 0);
    } else {
      ((T *)kd)[c] = slot >= 0 ? ((const T *)ks)[c] : ty_from_f<T>(0.0f);
      ((T *)vd)[c] = slot >= 0 ? ((const T *)vs)[c] : ty_from_f<T>(0.0f);
    }
  }
  ty_cp_commit();
}

template <typename T, int DT>
__device__ inline void ty_pa_stage_any(int unit, const T *kp, const T *vp,
                                       const long long *trow, unsigned char *kv, int *slot_sh,
                                       int j0, int jend, int NB, int BS, int bs_shift, int Hkv,
                                       int g, int D, long long i0, ERR_ARGS) {
  if (unit == 16)
    ty_pa_stage<T, DT, 16>(kp, vp, trow, kv, slot_sh, j0, jend, NB, BS, bs_shift, Hkv, g, D, i0,
                           err, node);
  else if (unit == 4)
    ty_pa_stage<T, DT, 4>(kp, vp, trow, kv, slot_sh, j0, jend, NB, BS, bs_shift, Hkv, g, D, i0,
                          err, node);
  else
    ty_pa_stage<T, DT, 0>(kp, vp, trow, kv, slot_sh, j0, jend, NB, BS, bs_shift, Hkv, g, D, i0,
                          err, node);
}

/* DT: the head size when the kernel is built for one (64, 128: the
 * divisions by D and its pieces fold), 0 for any (the D argument). */
template <typename T, int DT = 0>
__device__ void ty_paged_attn_impl(const void *q_, const void *kp_, const void *vp_,
                                   const long long *table, const long long *row_seq,
                                   const long long *row_pos, void *out_, float *part,
                                   int *count, int N, int NB, int BS, int Hq, int Hkv, int D_,
                                   int S, int MB, int gchunk, int rgroup, int max_splits,
                                   float scale, int window, ERR_ARGS) {
  const T *q = (const T *)q_, *kp = (const T *)kp_, *vp = (const T *)vp_;
  T *out = (T *)out_;
  const int D = DT > 0 ? DT : D_;
  __shared__ float s_sh[TY_PA_MAX_GC * TY_PA_TILE];
  __shared__ float m_sh[TY_PA_MAX_GC], l_sh[TY_PA_MAX_GC], c_sh[TY_PA_MAX_GC];
  __shared__ int slot_sh[2][TY_PA_TILE];
  /* Per (row, head) pair rc of the block: its row's end of this split, its
   * row r, and its (row, query head) index i * Hq + h. */
  __shared__ int k1_sh[TY_PA_MAX_GC], r_sh[TY_PA_MAX_GC];
  __shared__ long long ih_sh[TY_PA_MAX_GC];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warps = TY_PA_THREADS / 32;
  const long long i0 = blockIdx.x, cap = (long long)MB * BS;
  const int G = Hq / Hkv, chunks = (G + gchunk - 1) / gchunk;
  const int g = (int)blockIdx.y / chunks, c0 = ((int)blockIdx.y % chunks) * gchunk;
  const int gc = G - c0 < gchunk ? G - c0 : gchunk, sp = (int)blockIdx.z;
  const ty_pa_row lead = ty_pa_row_of(row_seq, row_pos, i0, S, cap, window);
  if (lead.s == -1) { /* padding: zeros, written once */
    if (sp == 0) {
      for (int e = tid; e < gc * D; e += TY_PA_THREADS)
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
  if (i0 % rgroup != 0 && ty_pa_joins(lead, row_seq, row_pos, i0 - 1, S, cap, window)) return;
  /* The run's rows up to the next group boundary, where the row's own block
   * leads (a row belongs to one block: the merge counts each split of a row
   * once). */
  int nr = 1;
  while (nr < rgroup && i0 + nr < N && (i0 + nr) % rgroup != 0 &&
         ty_pa_joins(lead, row_seq, row_pos, i0 + nr, S, cap, window))
    ++nr;
  /* Positions fit an int: p < MB * BS, the table's reach. */
  const int per = (int)lead.per, k0 = (int)lead.lo + sp * per;
  int kend = k0;
  unsigned multi = 0; /* bit r: row r has more than one split (partials, not out) */
  __shared__ int ns_sh[TY_PA_MAX_ROWS]; /* each row's split count (the merge's) */
  for (int r = 0; r < nr; ++r) {
    const int p = (int)row_pos[i0 + r], e = k0 + per < p + 1 ? k0 + per : p + 1;
    if (e > kend) kend = e;
    if (p + 1 - (int)lead.lo > per) multi |= 1u << r; /* rows of a run share lo and per */
    if (tid == 0) ns_sh[r] = (p + 1 - (int)lead.lo + per - 1) / per;
  }
  if (kend == k0) return; /* no row has keys in this split */
  const long long *trow = table + lead.s * MB;
  const int rgc = nr * gc;
  const int esize = (int)sizeof(T), rb = ty_pa_row_bytes(D, esize);
  const int bs_shift = (BS & (BS - 1)) == 0 ? __ffs(BS) - 1 : -1;
  /* The copy unit: 16 or 4 bytes when every row's start allows it. */
  const uintptr_t mix = (uintptr_t)kp | (uintptr_t)vp | (uintptr_t)(D * esize);
  const int unit = mix % 16 == 0 ? 16 : mix % 4 == 0 ? 4 : 0;
  float *q_sh = (float *)ty_pa_smem;
  float *acc_sh = (float *)(ty_pa_smem + ty_pa_q_bytes(rgroup, gchunk, D));
  unsigned char *kv_sh = ty_pa_smem + 2 * ty_pa_q_bytes(rgroup, gchunk, D);
  const int kv_tile = 2 * TY_PA_TILE * rb; /* one buffer: K rows then V rows */
  /* (1)'s pieces and (3)'s element pairs. */
  const int dpiece = (D + TY_PA_DPARTS - 1) / TY_PA_DPARTS;
  const bool qvec = D % 4 == 0 && dpiece % 4 == 0, vvec = D % 2 == 0;
  const int pairs = (D + 1) / 2, npairs = rgc * pairs;

  /* The first tile on its way before anything else. */
  ty_pa_stage_any<T, DT>(unit, kp, vp, trow, kv_sh, slot_sh[0], k0, kend, NB, BS, bs_shift, Hkv,
                         g, D, i0, err, node);
  for (int rc = tid; rc < rgc; rc += TY_PA_THREADS) {
    const int r = rc / gc, p = (int)row_pos[i0 + r];
    k1_sh[rc] = k0 + per < p + 1 ? k0 + per : p + 1; /* <= k0: no keys in this split */
    r_sh[rc] = r;
    ih_sh[rc] = (i0 + r) * Hq + g * G + c0 + (rc - r * gc);
    m_sh[rc] = -INFINITY;
    l_sh[rc] = 0.0f;
  }
  __syncthreads();
  for (int e = tid; e < rgc * D; e += TY_PA_THREADS) {
    const int rc = e / D;
    q_sh[e] = ty_to_f<T>(q[ih_sh[rc] * D + (e - rc * D)]);
    acc_sh[e] = 0.0f;
  }

  int buf = 0;
  for (int t0 = k0; t0 < kend; t0 += TY_PA_TILE, buf ^= 1) {
    /* The next tile into the other buffer (its last readers finished at
     * the barrier that ended the previous tile), then this one's wait. */
    if (t0 + TY_PA_TILE < kend) {
      ty_pa_stage_any<T, DT>(unit, kp, vp, trow, kv_sh + (buf ^ 1) * kv_tile, slot_sh[buf ^ 1],
                             t0 + TY_PA_TILE, kend, NB, BS, bs_shift, Hkv, g, D, i0, err, node);
      ty_cp_wait<1>();
    } else {
      ty_cp_wait<0>();
    }
    __syncthreads();
    const unsigned char *ks = kv_sh + buf * kv_tile, *vs = ks + TY_PA_TILE * rb;
    const int *slots = slot_sh[buf];
    /* (1) scores: 8 lanes per (key, row-head pair); every lane of a warp
     * takes part in the shuffles (the item count is a multiple of 128). */
    for (int x = tid; x < TY_PA_TILE * TY_PA_DPARTS * rgc; x += TY_PA_THREADS) {
      const int item = x / TY_PA_DPARTS, c = x % TY_PA_DPARTS;
      const int t = item % TY_PA_TILE, rc = item / TY_PA_TILE;
      const int d0 = c * dpiece < D ? c * dpiece : D, d1 = d0 + dpiece < D ? d0 + dpiece : D;
      float dot = ty_pa_dot_piece<T>(q_sh + rc * D, (const T *)(ks + t * rb), d0, d1, qvec);
      dot += __shfl_xor_sync(0xffffffffu, dot, 4);
      dot += __shfl_xor_sync(0xffffffffu, dot, 2);
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      if (c == 0) s_sh[rc * TY_PA_TILE + t] = slots[t] && t0 + t < k1_sh[rc] ? dot * scale : -INFINITY;
    }
    __syncthreads();
    /* (2) online softmax of the pairs with keys in this tile */
    for (int rc = warp; rc < rgc; rc += warps) {
      if (t0 >= k1_sh[rc]) continue;
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
    /* (3) weighted values: lane = part * 8 + pair (of the warp's 8 pairs),
     * each part over its own keys of the row, then two shuffles. Whole
     * warps iterate (the shuffles), lanes past the pairs add zeros. */
    for (int base = warp * 32; base < TY_PA_KPARTS * ((npairs + 7) / 8) * 8;
         base += TY_PA_THREADS) {
      const int fp = base / TY_PA_KPARTS + (lane & 7), kpart = lane >> 3;
      const int rc = fp / pairs, d = 2 * (fp - rc * pairs);
      float a0 = 0.0f, a1 = 0.0f;
      const bool mine = fp < npairs && t0 < k1_sh[rc];
      if (mine) {
        const int tn = k1_sh[rc] - t0 < TY_PA_TILE ? k1_sh[rc] - t0 : TY_PA_TILE;
        const int ta = kpart * (TY_PA_TILE / TY_PA_KPARTS);
        const int tb = ta + TY_PA_TILE / TY_PA_KPARTS < tn ? ta + TY_PA_TILE / TY_PA_KPARTS : tn;
        const float *w = s_sh + rc * TY_PA_TILE;
        for (int t = ta; t < tb; ++t) {
          float x[2];
          ty_pa_ld2<T>((const T *)(vs + t * rb), d, D, vvec, x);
          a0 = fmaf(w[t], x[0], a0);
          a1 = fmaf(w[t], x[1], a1);
        }
      }
      a0 += __shfl_xor_sync(0xffffffffu, a0, 8);
      a1 += __shfl_xor_sync(0xffffffffu, a1, 8);
      a0 += __shfl_xor_sync(0xffffffffu, a0, 16);
      a1 += __shfl_xor_sync(0xffffffffu, a1, 16);
      if (mine && kpart < 2 && d + kpart < D) {
        float *a = acc_sh + rc * D + d + kpart;
        *a = *a * c_sh[rc] + (kpart == 0 ? a0 : a1);
      }
    }
    __syncthreads();
  }

  const long long slots_per = (long long)N * Hq * max_splits;
  for (int e = tid; e < rgc * D; e += TY_PA_THREADS) {
    const int rc = e / D, d = e - rc * D;
    if (k1_sh[rc] <= k0) continue;
    const long long ih = ih_sh[rc];
    if (!(multi >> r_sh[rc] & 1u)) {
      const float l = l_sh[rc];
      out[ih * D + d] = ty_from_f<T>(l > 0.0f ? acc_sh[e] / l : 0.0f);
    } else {
      part[(ih * max_splits + sp) * D + d] = acc_sh[e];
    }
  }
  for (int rc = tid; rc < rgc; rc += TY_PA_THREADS) {
    if (k1_sh[rc] <= k0 || !(multi >> r_sh[rc] & 1u)) continue;
    float *ml = part + slots_per * D + (ih_sh[rc] * max_splits + sp) * 2;
    ml[0] = m_sh[rc];
    ml[1] = l_sh[rc];
  }
  if (multi == 0) return; /* every row of one split: written already */

  /* The merge, by the block that finishes a row's splits last: each block
   * with keys of a row of several splits counts itself in, after its
   * partials are out (the fence); the one that brings the count to the
   * row's split count merges the row's heads of this chunk, in split
   * order (the same arithmetic whichever block it is), and puts the count
   * back to 0 for the next launch. */
  __shared__ unsigned merge_sh;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    unsigned mine = 0;
    for (int r = 0; r < nr; ++r) {
      if (!(multi >> r & 1u) || k1_sh[r * gc] <= k0) continue;
      const int splits = ns_sh[r];
      int *cnt = count + (i0 + r) * gridDim.y + blockIdx.y;
      if (atomicAdd(cnt, 1) == splits - 1) {
        mine |= 1u << r;
        *cnt = 0;
      }
    }
    merge_sh = mine;
  }
  __syncthreads();
  const unsigned mine = merge_sh;
  if (mine == 0) return;
  __threadfence();
  /*   M = max_sp m_sp, L = sum_sp l_sp e^(m_sp - M),
   *   out[d] = sum_sp acc_sp[d] e^(m_sp - M) / L   (split order)
   * The split weights in s_sh ([rc][TY_PA_MAX_SPLITS]) and 1 / L in c_sh:
   * the tiles are done with both. */
  float *w_sh = s_sh;
  for (int rc = tid; rc < rgc; rc += TY_PA_THREADS) {
    const int r = r_sh[rc];
    if (!(mine >> r & 1u)) continue;
    const int splits = ns_sh[r];
    const float *ml = part + slots_per * D + ih_sh[rc] * max_splits * 2;
    float m = -INFINITY, l = 0.0f;
    for (int k = 0; k < splits; ++k) m = fmaxf(m, ty_pa_ld_cg(ml + 2 * k));
    for (int k = 0; k < splits; ++k) {
      const float mk = ty_pa_ld_cg(ml + 2 * k);
      const float w = mk == -INFINITY ? 0.0f : expf(mk - m);
      w_sh[rc * TY_PA_MAX_SPLITS + k] = w;
      l += ty_pa_ld_cg(ml + 2 * k + 1) * w;
    }
    c_sh[rc] = l > 0.0f ? 1.0f / l : 0.0f;
  }
  __syncthreads();
  for (int e = tid; e < rgc * D; e += TY_PA_THREADS) {
    const int rc = e / D, d = e - rc * D, r = r_sh[rc];
    if (!(mine >> r & 1u)) continue;
    const int splits = ns_sh[r];
    const long long ih = ih_sh[rc];
    float o = 0.0f;
    for (int k = 0; k < splits; ++k) {
      o += ty_pa_ld_cg(part + (ih * max_splits + k) * D + d) * w_sh[rc * TY_PA_MAX_SPLITS + k];
    }
    out[ih * D + d] = ty_from_f<T>(o * c_sh[rc]);
  }
}

#define TY_PA_PARAMS                                                                      \
  const void *q, const void *kp, const void *vp, const long long *table,                 \
      const long long *row_seq, const long long *row_pos, void *out, float *part,         \
      int *count, int N, int NB, int BS, int Hq, int Hkv, int D, int S, int MB, int gchunk, \
      int rgroup, int max_splits, float scale, int window, ERR_ARGS
#define TY_PA_ARGS                                                                         \
  q, kp, vp, table, row_seq, row_pos, out, part, count, N, NB, BS, Hq, Hkv, D, S, MB,     \
      gchunk, rgroup, max_splits, scale, window, err, node
TY_KERNEL3_ATTR(ty_paged_attn, TY_PA_PARAMS, TY_PA_ARGS, __launch_bounds__(TY_PA_THREADS))
/* The same built for head sizes 64 and 128 (GPT-2, Llama, Mistral, Qwen2:
 * paged_shapes.h, ty_pa_head_kernel); the same arithmetic. */
template <typename T> __device__ void ty_paged_attn_d64_impl(TY_PA_PARAMS) {
  ty_paged_attn_impl<T, 64>(TY_PA_ARGS);
}
template <typename T> __device__ void ty_paged_attn_d128_impl(TY_PA_PARAMS) {
  ty_paged_attn_impl<T, 128>(TY_PA_ARGS);
}
TY_KERNEL3_ATTR(ty_paged_attn_d64, TY_PA_PARAMS, TY_PA_ARGS, __launch_bounds__(TY_PA_THREADS))
TY_KERNEL3_ATTR(ty_paged_attn_d128, TY_PA_PARAMS, TY_PA_ARGS, __launch_bounds__(TY_PA_THREADS))
