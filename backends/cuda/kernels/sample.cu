/* Token selection on the device (issue 29): sample and top_logprobs, a
 * block per row of logits [N, V] (the op contract: docs/ops.md; the host
 * sampler models/sampler.c implements the same definition).
 *
 * sample, per row, with x the logits after the history's penalties:
 *   temperature 0: the argmax of x (ties: the lower id);
 *   else w_v = exp((x_v - max x) / T); candidates in order (w desc, id asc)
 *   cut by top_k, top_p and min_p; u from the row's splitmix64 counter
 *   stream; the kept candidates walked in id order until the running sum of
 *   w reaches u * (kept total).
 * No sort: the top_k and top_p cuts are thresholds (a w value plus a tie
 * boundary id) found by bisection over w's bits (w >= 0, so its bits order
 * as the values do) with block-wide counts and sums, and the walk is a
 * block-wide prefix sum. logprob is log softmax over the raw logits.
 * Every reduction has one order, so a row's token does not depend on the
 * other rows: batch invariance. */
#include "vec.cuh"

#include "trainyard/sample_params.h"

#include "sample_shapes.h"

/* ---- block-wide helpers (every thread calls them; blockDim.x a multiple
 * of 32). The argmax order: larger x first, then the lower id. ---- */

__device__ inline bool ty_before(float xa, long long ia, float xb, long long ib) {
  return xa > xb || (xa == xb && ia < ib);
}

/* A NaN logit never wins the argmax (the reference skips it too). */
__device__ inline float ty_rank_value(float x) { return isnan(x) ? -INFINITY : x; }

__device__ inline void ty_block_argmax(float *x, long long *id, float *sx, long long *sid) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  float bx = *x;
  long long bi = *id;
  for (int o = 16; o > 0; o >>= 1) {
    const float ox = __shfl_xor_sync(0xffffffffu, bx, o);
    const long long oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ty_before(ox, oi, bx, bi)) {
      bx = ox;
      bi = oi;
    }
  }
  __syncthreads();
  if (lane == 0) {
    sx[warp] = bx;
    sid[warp] = bi;
  }
  __syncthreads();
  bx = -INFINITY;
  bi = LLONG_MAX;
  for (int w = 0; w < warps; ++w) {
    if (ty_before(sx[w], sid[w], bx, bi)) {
      bx = sx[w];
      bi = sid[w];
    }
  }
  *x = bx;
  *id = bi;
}

__device__ inline long long ty_block_count(long long v, long long *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  long long all = 0;
  for (int w = 0; w < warps; ++w) all += scratch[w];
  return all;
}

__device__ inline long long ty_block_min_ll(long long v, long long *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const long long u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u < v ? u : v;
  }
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  long long m = LLONG_MAX;
  for (int w = 0; w < warps; ++w) m = scratch[w] < m ? scratch[w] : m;
  return m;
}

/* Inclusive prefix sum of one float per thread, in one order; *total gets
 * the block's sum (the last thread's prefix). */
__device__ inline float ty_block_scan_f(float v, float *scratch, float *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  float before = 0.0f, all = 0.0f;
  for (int w = 0; w < warps; ++w) {
    if (w == warp) before = all;
    all += scratch[w];
  }
  *total = all;
  return before + v;
}

/* A candidate passes a cut (W, I) when w > W or (w == W and id <= I): it is
 * no later than the cut's last candidate in the order (w desc, id asc). */
__device__ inline bool ty_within(uint32_t wb, long long v, uint32_t W, long long I) {
  return wb > W || (wb == W && v <= I);
}

/* The splitmix64 draw number `counter` of the stream that starts at `seed`
 * (models/sampler.c ty_next_uniform), in [0, 1). */
__device__ inline double ty_splitmix_uniform(unsigned long long seed, unsigned long long counter) {
  unsigned long long z = seed + (counter + 1ull) * (unsigned long long)TY_SAMPLE_GOLDEN;
  z = (z ^ (z >> 30)) * (unsigned long long)TY_SAMPLE_MIX1;
  z = (z ^ (z >> 27)) * (unsigned long long)TY_SAMPLE_MIX2;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* The penalised logit (spec step 1). */
__device__ inline float ty_penalise(float x, int count, const float *pr) {
  if (count <= 0) return x;
  const float rep = pr[TY_SAMPLE_P_REPETITION];
  x = x > 0.0f ? x / rep : x * rep;
  return x - (pr[TY_SAMPLE_P_PRESENCE] + pr[TY_SAMPLE_P_FREQUENCY] * (float)count);
}

/* ---- sample's first pass over a row without a history, spread over
 * blocks (a decode step has a row or a few; one block walking a 50K- or
 * 128K-entry vocabulary was the step's longest kernel after attention) ----
 *
 * Grid (N, P), TY_SAMPLE_SCAN_THREADS threads: block (i, c) takes ids
 * [c * TY_SAMPLE_CHUNK, (c + 1) * TY_SAMPLE_CHUNK) of row i, writes them to
 * the row's work (the logits as f32: no penalties without a history) and
 * leaves (max, argmax value, sum of exp(x - max), argmax id) of its chunk
 * in part[(i * P + c) * 4]. ty_sample merges the P chunks in order. P is
 * ceil(V / TY_SAMPLE_CHUNK), a function of V only: batch invariance holds. */
extern "C" __global__ void ty_sample_scan(const void *logits, int dtl, long long V, float *work,
                                          float *part) {
  ty_pdl_enter();
  __shared__ float sx[32], sf[32];
  __shared__ long long sid[32];
  const long long i = blockIdx.x;
  const int c = (int)blockIdx.y, P = (int)gridDim.y;
  const long long lo = (long long)c * TY_SAMPLE_CHUNK;
  const long long hi = lo + TY_SAMPLE_CHUNK < V ? lo + TY_SAMPLE_CHUNK : V;
  float *x = work + i * V;
  float rmax = -INFINITY, bx = -INFINITY;
  long long bi = LLONG_MAX;
  for (long long v = lo + threadIdx.x; v < hi; v += blockDim.x) {
    const float r = ty_ld(logits, i * V + v, dtl);
    x[v] = r;
    rmax = fmaxf(rmax, r);
    if (ty_before(ty_rank_value(r), v, bx, bi)) {
      bx = ty_rank_value(r);
      bi = v;
    }
  }
  rmax = ty_block_max(rmax, sf);
  ty_block_argmax(&bx, &bi, sx, sid);
  float se = 0.0f;
  for (long long v = lo + threadIdx.x; v < hi; v += blockDim.x) se += expf(x[v] - rmax);
  se = ty_block_sum(se, sf);
  if (threadIdx.x == 0) {
    float *o = part + (i * P + c) * 4;
    o[0] = rmax;
    o[1] = bx;
    o[2] = se;
    o[3] = __int_as_float((int)(bi == LLONG_MAX ? -1 : bi));
  }
}

/* ---- sample ----
 *
 * Grid N, TY_SAMPLE_THREADS threads. `work` holds V f32 of scratch per row
 * (the penalised logits, then the weights w) and `counts` V ints per row
 * when there is a history (L > 0). Invalid params or a history id outside
 * [-1, V) are a data error (TY_ERR_SAMPLE_PARAM: row, column (7: history),
 * the param's f32 bits or the id); the row is then not written. */
extern "C" __global__ void ty_sample(const void *logits, int dtl, const float *params, const long long *seeds,
              const long long *hist, long long L, long long V, float *work, int *counts,
              long long *ids, float *logprob, ERR_ARGS, const float *part, int P) {
  ty_pdl_enter();
  __shared__ float sx[32], sf[32];
  __shared__ long long sid[32], sll[32];
  __shared__ int bad_sh;
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long i = blockIdx.x;
  const float *pr = params + i * TY_SAMPLE_P_COUNT;
  const float T = pr[TY_SAMPLE_P_TEMPERATURE], topk = pr[TY_SAMPLE_P_TOP_K];
  const float topp = pr[TY_SAMPLE_P_TOP_P], minp = pr[TY_SAMPLE_P_MIN_P];
  int bad = -1;
  if (!(T >= 0.0f) || !isfinite(T)) bad = TY_SAMPLE_P_TEMPERATURE;
  else if (!(topk >= 0.0f) || !isfinite(topk) || topk != floorf(topk)) bad = TY_SAMPLE_P_TOP_K;
  else if (!(topp > 0.0f && topp <= 1.0f)) bad = TY_SAMPLE_P_TOP_P;
  else if (!(minp >= 0.0f && minp < 1.0f)) bad = TY_SAMPLE_P_MIN_P;
  else if (!(pr[TY_SAMPLE_P_REPETITION] > 0.0f) || !isfinite(pr[TY_SAMPLE_P_REPETITION]))
    bad = TY_SAMPLE_P_REPETITION;
  else if (!isfinite(pr[TY_SAMPLE_P_PRESENCE])) bad = TY_SAMPLE_P_PRESENCE;
  else if (!isfinite(pr[TY_SAMPLE_P_FREQUENCY])) bad = TY_SAMPLE_P_FREQUENCY;
  if (bad >= 0) { /* the same verdict in every thread */
    if (tid == 0) ty_fail(err, node, TY_ERR_SAMPLE_PARAM, i, bad, (long long)__float_as_uint(pr[bad]));
    return;
  }
  const long long *h = hist ? hist + i * L : nullptr;
  if (tid == 0) bad_sh = 0;
  __syncthreads();
  for (long long k = tid; h && k < L; k += nt) {
    if (h[k] < -1 || h[k] >= V) {
      ty_fail(err, node, TY_ERR_SAMPLE_PARAM, i, TY_SAMPLE_P_HISTORY, h[k]);
      bad_sh = 1;
    }
  }
  __syncthreads();
  if (bad_sh) return;

  /* counts of the history's tokens */
  int *cnt = h && L > 0 ? counts + i * V : nullptr;
  if (cnt) {
    for (long long v = tid; v < V; v += nt) cnt[v] = 0;
    __syncthreads();
    for (long long k = tid; k < L; k += nt)
      if (h[k] >= 0) atomicAdd(&cnt[h[k]], 1);
    __syncthreads();
  }
  /* raw max, penalised x (and its argmax) */
  float *x = work + i * V;
  float rmax = -INFINITY, bx = -INFINITY, lse;
  long long bi = LLONG_MAX;
  if (P > 0 && !h) {
    /* ty_sample_scan's chunks, merged in chunk order (x is in work) */
    __shared__ float merged[3];
    __shared__ long long merged_id;
    if (tid == 0) {
      const float *q = part + i * (long long)P * 4;
      for (int c = 0; c < P; ++c) rmax = fmaxf(rmax, q[4 * c]);
      float se = 0.0f;
      for (int c = 0; c < P; ++c) {
        if (q[4 * c] != -INFINITY) se += q[4 * c + 2] * expf(q[4 * c] - rmax);
        const int id = __float_as_int(q[4 * c + 3]);
        if (id >= 0 && ty_before(q[4 * c + 1], id, bx, bi)) {
          bx = q[4 * c + 1];
          bi = id;
        }
      }
      merged[0] = rmax;
      merged[1] = bx;
      merged[2] = rmax + logf(se);
      merged_id = bi;
    }
    __syncthreads();
    rmax = merged[0];
    bx = merged[1];
    lse = merged[2];
    bi = merged_id;
  } else {
    for (long long v = tid; v < V; v += nt) {
      const float r = ty_ld(logits, i * V + v, dtl);
      rmax = fmaxf(rmax, r);
      const float xv = cnt ? ty_penalise(r, cnt[v], pr) : r;
      x[v] = xv;
      if (ty_before(ty_rank_value(xv), v, bx, bi)) {
        bx = ty_rank_value(xv);
        bi = v;
      }
    }
    rmax = ty_block_max(rmax, sf);
    ty_block_argmax(&bx, &bi, sx, sid);
    float se = 0.0f;
    for (long long v = tid; v < V; v += nt) se += expf(ty_ld(logits, i * V + v, dtl) - rmax);
    lse = rmax + logf(ty_block_sum(se, sf));
  }

  long long chosen = bi;
  if (T > 0.0f) {
    /* weights; x's max has w = 1 exactly */
    for (long long v = tid; v < V; v += nt) {
      const float w = expf((x[v] - bx) / T);
      x[v] = isnan(w) ? 0.0f : w; /* as the reference: a NaN weighs nothing */
    }
    __syncthreads();
    /* top_k: the k-th candidate (Wk, Ik) */
    uint32_t Wk = 0;
    long long Ik = V - 1;
    const long long k = (long long)topk;
    if (k > 0 && k < V) {
      for (int bit = 29; bit >= 0; --bit) {
        const uint32_t trial = Wk | (1u << bit);
        long long c = 0;
        for (long long v = tid; v < V; v += nt) c += __float_as_uint(x[v]) >= trial;
        if (ty_block_count(c, sll) >= k) Wk = trial;
      }
      long long gt = 0, eq = 0;
      for (long long v = tid; v < V; v += nt) {
        gt += __float_as_uint(x[v]) > Wk;
        eq += __float_as_uint(x[v]) == Wk;
      }
      const long long need = k - ty_block_count(gt, sll);
      if (ty_block_count(eq, sll) > need) { /* ties at the cut: the lower ids */
        long long a = 0, b = V - 1;
        while (a < b) {
          const long long mid = a + (b - a) / 2;
          long long c = 0;
          for (long long v = tid; v <= mid && v < V; v += nt) c += __float_as_uint(x[v]) == Wk;
          if (ty_block_count(c, sll) >= need) b = mid;
          else a = mid + 1;
        }
        Ik = a;
      }
    }
    /* top_p: the shortest leading run of the top_k set holding top_p of its mass */
    uint32_t Wp = 0;
    long long Ip = V - 1;
    if (topp < 1.0f) {
      float tot = 0.0f;
      for (long long v = tid; v < V; v += nt)
        if (ty_within(__float_as_uint(x[v]), v, Wk, Ik)) tot += x[v];
      const float target = topp * ty_block_sum(tot, sf);
      for (int bit = 29; bit >= 0; --bit) {
        const uint32_t trial = Wp | (1u << bit);
        float sum = 0.0f;
        for (long long v = tid; v < V; v += nt)
          if (__float_as_uint(x[v]) >= trial && ty_within(__float_as_uint(x[v]), v, Wk, Ik)) sum += x[v];
        if (ty_block_sum(sum, sf) >= target) Wp = trial;
      }
      long long eq = 0;
      for (long long v = tid; v < V; v += nt) eq += __float_as_uint(x[v]) == Wp && ty_within(__float_as_uint(x[v]), v, Wk, Ik);
      if (ty_block_count(eq, sll) > 1) {
        long long a = 0, b = V - 1;
        while (a < b) {
          const long long mid = a + (b - a) / 2;
          float sum = 0.0f;
          for (long long v = tid; v < V; v += nt)
            if (ty_within(__float_as_uint(x[v]), v, Wp, mid) && ty_within(__float_as_uint(x[v]), v, Wk, Ik)) sum += x[v];
          if (ty_block_sum(sum, sf) >= target) b = mid;
          else a = mid + 1;
        }
        Ip = a;
      }
    }
    /* the kept set's mass, the draw, then the walk in id order */
    float kept = 0.0f;
    long long last = -1;
    for (long long v = tid; v < V; v += nt) {
      if (ty_within(__float_as_uint(x[v]), v, Wk, Ik) && ty_within(__float_as_uint(x[v]), v, Wp, Ip) && x[v] >= minp) {
        kept += x[v];
        last = v;
      }
    }
    const float total = ty_block_sum(kept, sf);
    last = -ty_block_min_ll(-last, sll);
    const double u = ty_splitmix_uniform((unsigned long long)seeds[2 * i],
                                         (unsigned long long)seeds[2 * i + 1]);
    const float r = (float)(u * (double)total);
    float run = 0.0f;
    chosen = LLONG_MAX;
    for (long long base = 0; base < V && chosen == LLONG_MAX; base += nt) {
      const long long v = base + tid;
      const bool in = v < V && ty_within(__float_as_uint(x[v]), v, Wk, Ik) && ty_within(__float_as_uint(x[v]), v, Wp, Ip) &&
                      x[v] >= minp;
      float tile;
      const float pre = run + ty_block_scan_f(in ? x[v] : 0.0f, sf, &tile);
      chosen = ty_block_min_ll(in && pre >= r ? v : LLONG_MAX, sll);
      run += tile;
    }
    if (chosen == LLONG_MAX) chosen = last; /* rounding left some of u */
  }
  if (tid == 0) {
    ids[i] = chosen;
    logprob[i] = ty_ld(logits, i * V + chosen, dtl) - lse;
  }
}

/* ---- top_logprobs ----
 *
 * Grid N, TY_SAMPLE_THREADS threads: the log-sum-exp, then k rounds of a
 * block argmax, each over the candidates after the previous round's pick in
 * the order (logit desc, id asc), so no pick repeats. */
extern "C" __global__ void ty_top_logprobs(const void *logits, int dtl, long long V, int k, long long *ids,
                    float *logprobs) {
  ty_pdl_enter();
  __shared__ float sx[32], sf[32];
  __shared__ long long sid[32];
  const int tid = threadIdx.x, nt = blockDim.x;
  const long long i = blockIdx.x;
  float m = -INFINITY;
  for (long long v = tid; v < V; v += nt) m = fmaxf(m, ty_ld(logits, i * V + v, dtl));
  m = ty_block_max(m, sf);
  float se = 0.0f;
  for (long long v = tid; v < V; v += nt) se += expf(ty_ld(logits, i * V + v, dtl) - m);
  const float lse = m + logf(ty_block_sum(se, sf));
  float px = INFINITY;
  long long pi = -1;
  for (int r = 0; r < k; ++r) {
    float bx = -INFINITY;
    long long bi = LLONG_MAX;
    for (long long v = tid; v < V; v += nt) {
      const float xv = ty_ld(logits, i * V + v, dtl);
      if (ty_before(px, pi, xv, v) && ty_before(xv, v, bx, bi)) {
        bx = xv;
        bi = v;
      }
    }
    ty_block_argmax(&bx, &bi, sx, sid);
    if (tid == 0) {
      ids[i * k + r] = bi;
      logprobs[i * k + r] = bx - lse;
    }
    px = bx;
    pi = bi;
  }
}
