/* Token selection (issue 29): sample and top_logprobs, one work-group of
 * TY_WG work-items per row of logits [N, V] (the op contract: docs/ops.md;
 * the f64 reference ops/reference/ref_sample.c and the cuda kernel
 * backends/cuda/kernels/sample.cu compute the same definition).
 *
 * sample, per row, with x the logits after the history's penalties:
 *   temperature 0: the argmax of x (ties: the lower id);
 *   else w_v = exp((x_v - max x) / T); candidates in order (w desc, id asc)
 *   cut by top_k, top_p and min_p; u from the row's splitmix64 counter
 *   stream; the kept candidates walked in id order until the running sum of
 *   w reaches u * (kept total).
 * No sort: the top_k and top_p cuts are thresholds (a w value plus a tie
 * boundary id) found by bisection over w's bits (w >= 0, so its bits order
 * as the values do) with group-wide counts and sums, and the walk is a
 * group-wide prefix sum. logprob is log softmax over the raw logits.
 * Every reduction has one order that depends on V only, so a row's token
 * does not depend on the other rows (batch invariance). The params'
 * columns and the draw's constants are sample_params.h's, which
 * ocl_program.c puts before common.cl. */

/* ---- group-wide helpers (every work-item of the group calls them; local
 * size TY_WG, a power of two). Two levels, as ty_group_sum: TY_WG / w
 * partials of w values, then every work-item reads the partials. ---- */

/* The argmax order: larger x first, then the lower id. */
bool ty_before(float xa, long ia, float xb, long ib) { return xa > xb || (xa == xb && ia < ib); }

/* A NaN logit never wins the argmax (the reference skips it too). */
float ty_rank_value(float x) { return isnan(x) ? -INFINITY : x; }

long ty_group_count(long v, __local long *s) {
  const int lid = get_local_id(0), n = get_local_size(0), w = ty_group_width(n);
  s[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  long part = 0;
  if (lid < n / w) {
    for (int i = 0; i < w; ++i) part += s[lid * w + i];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < n / w) s[lid] = part;
  barrier(CLK_LOCAL_MEM_FENCE);
  long r = 0;
  for (int i = 0; i < n / w; ++i) r += s[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

long ty_group_min_long(long v, __local long *s) {
  const int lid = get_local_id(0), n = get_local_size(0), w = ty_group_width(n);
  s[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  long part = LONG_MAX;
  if (lid < n / w) {
    for (int i = 0; i < w; ++i) part = min(part, s[lid * w + i]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < n / w) s[lid] = part;
  barrier(CLK_LOCAL_MEM_FENCE);
  long r = LONG_MAX;
  for (int i = 0; i < n / w; ++i) r = min(r, s[i]);
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

/* The group's first (x, id) in the argmax order, in every work-item. */
void ty_group_argmax(float *x, long *id, __local float *sf, __local long *sl) {
  const int lid = get_local_id(0), n = get_local_size(0), w = ty_group_width(n);
  sf[lid] = *x;
  sl[lid] = *id;
  barrier(CLK_LOCAL_MEM_FENCE);
  float bx = -INFINITY;
  long bi = LONG_MAX;
  if (lid < n / w) {
    for (int i = 0; i < w; ++i) {
      if (ty_before(sf[lid * w + i], sl[lid * w + i], bx, bi)) {
        bx = sf[lid * w + i];
        bi = sl[lid * w + i];
      }
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < n / w) {
    sf[lid] = bx;
    sl[lid] = bi;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  bx = -INFINITY;
  bi = LONG_MAX;
  for (int i = 0; i < n / w; ++i) {
    if (ty_before(sf[i], sl[i], bx, bi)) {
      bx = sf[i];
      bi = sl[i];
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  *x = bx;
  *id = bi;
}

/* Inclusive prefix sum of one float per work-item, in work-item order (a
 * sum per chunk of w, the chunks before this one, then this chunk's items
 * up to this one); *total gets the group's sum. `s` holds 2 * TY_WG. */
float ty_group_scan(float v, __local float *s, float *total) {
  const int lid = get_local_id(0), n = get_local_size(0), w = ty_group_width(n);
  s[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < n / w) {
    float part = 0.0f;
    for (int i = 0; i < w; ++i) part += s[lid * w + i];
    s[n + lid] = part;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int chunk = lid / w;
  float before = 0.0f, all = 0.0f;
  for (int i = 0; i < n / w; ++i) {
    if (i == chunk) before = all;
    all += s[n + i];
  }
  for (int i = chunk * w; i <= lid; ++i) before += s[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  *total = all;
  return before;
}

/* A candidate passes a cut (W, I) when w > W or (w == W and id <= I): it is
 * no later than the cut's last candidate in the order (w desc, id asc). */
bool ty_within(uint wb, long v, uint W, long I) { return wb > W || (wb == W && v <= I); }

/* The splitmix64 draw number `counter` of the stream that starts at `seed`
 * (models/sampler.c ty_next_uniform), in [0, 1): the reference's
 * (z >> 11) * 2^-53 cut to its top 24 bits, (z >> 40) * 2^-24, exact in
 * f32, which is all an f32 walk resolves (and needs no cl_khr_fp64). */
float ty_splitmix_uniform(ulong seed, ulong counter) {
  ulong z = seed + (counter + 1UL) * (ulong)TY_SAMPLE_GOLDEN;
  z = (z ^ (z >> 30)) * (ulong)TY_SAMPLE_MIX1;
  z = (z ^ (z >> 27)) * (ulong)TY_SAMPLE_MIX2;
  z ^= z >> 31;
  return (float)(z >> 40) * 0x1.0p-24f;
}

/* The penalised logit (spec step 1). */
float ty_penalise(float x, int count, __global const float *pr) {
  if (count <= 0) return x;
  const float rep = pr[TY_SAMPLE_P_REPETITION];
  x = x > 0.0f ? x / rep : x * rep;
  return x - (pr[TY_SAMPLE_P_PRESENCE] + pr[TY_SAMPLE_P_FREQUENCY] * (float)count);
}

/* ---- sample ----
 *
 * Group i handles row i. `work` holds V f32 per row (the penalised logits,
 * then the weights w) and `counts` V ints per row when there is a history
 * (L > 0). Invalid params or a history id outside [-1, V) are a data error
 * (TY_ERR_SAMPLE_PARAM: row, column (TY_SAMPLE_P_HISTORY: a history id),
 * the param's f32 bits or the id); the row is then not written.
 *
 * Every barrier is reached by every work-item unconditionally (no barrier
 * under an `if`, no early return): a greedy row or an unused cut still
 * runs the group-wide steps and then ignores them. PoCL compiles a
 * barrier under a condition by replicating the rest of the kernel, which
 * for this kernel's many cuts took minutes; loops with barriers have
 * group-uniform trip counts. */
__kernel __attribute__((reqd_work_group_size(TY_WG, 1, 1))) void ty_sample(
    IN(logits), int dtl, IN(params), IN(seeds), IN(hist), long L, long V, OUT(work),
    OUT(counts), OUT(ids), OUT(logprob), ERR_ARGS) {
  __local float sf[2 * TY_WG];
  __local long sl[TY_WG];
  const int tid = get_local_id(0), nt = TY_WG;
  const long i = get_group_id(0);
  __global const float *pr = (__global const float *)P(params) + i * TY_SAMPLE_P_COUNT;
  __global const long *sd = (__global const long *)P(seeds);
  __global const uchar *lg = P(logits);
  const float T = pr[TY_SAMPLE_P_TEMPERATURE], topk = pr[TY_SAMPLE_P_TOP_K];
  const float topp = pr[TY_SAMPLE_P_TOP_P], minp = pr[TY_SAMPLE_P_MIN_P];
  const float rep = pr[TY_SAMPLE_P_REPETITION];
  int bad = -1;
  if (!(T >= 0.0f) || isinf(T)) bad = TY_SAMPLE_P_TEMPERATURE;
  else if (!(topk >= 0.0f) || isinf(topk) || topk != floor(topk)) bad = TY_SAMPLE_P_TOP_K;
  else if (!(topp > 0.0f && topp <= 1.0f)) bad = TY_SAMPLE_P_TOP_P;
  else if (!(minp >= 0.0f && minp < 1.0f)) bad = TY_SAMPLE_P_MIN_P;
  else if (!(rep > 0.0f) || isinf(rep)) bad = TY_SAMPLE_P_REPETITION;
  else if (!isfinite(pr[TY_SAMPLE_P_PRESENCE])) bad = TY_SAMPLE_P_PRESENCE;
  else if (!isfinite(pr[TY_SAMPLE_P_FREQUENCY])) bad = TY_SAMPLE_P_FREQUENCY;
  /* the same verdict in every work-item */
  if (bad >= 0 && tid == 0) {
    ty_fail(err, node, TY_ERR_SAMPLE_PARAM, i, bad, (long)as_uint(pr[bad]));
  }
  __global const long *h = L > 0 ? (__global const long *)P(hist) + i * L : 0;
  long badh = 0;
  for (long k = tid; bad < 0 && h && k < L; k += nt) {
    if (h[k] < -1 || h[k] >= V) {
      ty_fail(err, node, TY_ERR_SAMPLE_PARAM, i, TY_SAMPLE_P_HISTORY, h[k]);
      badh = 1;
    }
  }
  const bool ok = bad < 0 && ty_group_count(badh, sl) == 0;

  /* counts of the history's tokens (ids outside [0, V) are never counted,
   * so a bad row cannot write outside its counts) */
  __global int *cnt = h ? (__global int *)P(counts) + i * V : 0;
  for (long v = tid; cnt && v < V; v += nt) cnt[v] = 0;
  barrier(CLK_GLOBAL_MEM_FENCE);
  for (long k = tid; cnt && k < L; k += nt) {
    if (h[k] >= 0 && h[k] < V) atomic_inc(&cnt[h[k]]);
  }
  barrier(CLK_GLOBAL_MEM_FENCE);
  /* raw max, penalised x (and its argmax) */
  __global float *x = (__global float *)P(work) + i * V;
  float rmax = -INFINITY, bx = -INFINITY;
  long bi = LONG_MAX;
  for (long v = tid; v < V; v += nt) {
    const float r = ty_ld(lg, i * V + v, dtl);
    rmax = fmax(rmax, r);
    const float xv = cnt ? ty_penalise(r, cnt[v], pr) : r;
    x[v] = xv;
    if (ty_before(ty_rank_value(xv), v, bx, bi)) {
      bx = ty_rank_value(xv);
      bi = v;
    }
  }
  rmax = ty_group_max(rmax, sf);
  ty_group_argmax(&bx, &bi, sf, sl);
  float se = 0.0f;
  for (long v = tid; v < V; v += nt) se += exp(ty_ld(lg, i * V + v, dtl) - rmax);
  const float lse = rmax + log(ty_group_sum(se, sf));

  /* weights; x's max has w = 1 exactly (a greedy row computes them at
   * temperature 1 and ignores them) */
  const bool draw = T > 0.0f;
  const float Tw = draw ? T : 1.0f;
  for (long v = tid; v < V; v += nt) {
    const float w = exp((x[v] - bx) / Tw);
    x[v] = isnan(w) ? 0.0f : w; /* as the reference: a NaN weighs nothing */
  }
  /* top_k: the k-th candidate (Wk, Ik); no cut: (0, V - 1), which every
   * candidate passes */
  const long k = (long)topk;
  const bool cut_k = k > 0 && k < V;
  uint Wk = 0;
  for (int bit = 29; bit >= 0; --bit) {
    const uint trial = Wk | (1u << bit);
    long c = 0;
    for (long v = tid; v < V; v += nt) c += as_uint(x[v]) >= trial;
    if (ty_group_count(c, sl) >= k) Wk = trial;
  }
  long gt = 0, eq = 0;
  for (long v = tid; v < V; v += nt) {
    gt += as_uint(x[v]) > Wk;
    eq += as_uint(x[v]) == Wk;
  }
  const long need = k - ty_group_count(gt, sl);
  /* ties at the cut: the lower ids, the need-th tie's id by bisection */
  const bool tie_k = cut_k && ty_group_count(eq, sl) > need;
  long a = 0, b = tie_k ? V - 1 : 0;
  while (a < b) {
    const long mid = a + (b - a) / 2;
    long c = 0;
    for (long v = tid; v <= mid && v < V; v += nt) c += as_uint(x[v]) == Wk;
    if (ty_group_count(c, sl) >= need) b = mid;
    else a = mid + 1;
  }
  const long Ik = tie_k ? a : V - 1;
  if (!cut_k) Wk = 0;
  /* top_p: the shortest leading run of the top_k set holding top_p of its
   * mass, (Wp, Ip); no cut: (0, V - 1) */
  const bool cut_p = topp < 1.0f;
  float tot = 0.0f;
  for (long v = tid; v < V; v += nt) {
    if (ty_within(as_uint(x[v]), v, Wk, Ik)) tot += x[v];
  }
  const float target = topp * ty_group_sum(tot, sf);
  uint Wp = 0;
  for (int bit = 29; bit >= 0; --bit) {
    const uint trial = Wp | (1u << bit);
    float sum = 0.0f;
    for (long v = tid; v < V; v += nt) {
      const uint wb = as_uint(x[v]);
      if (wb >= trial && ty_within(wb, v, Wk, Ik)) sum += x[v];
    }
    if (ty_group_sum(sum, sf) >= target) Wp = trial;
  }
  eq = 0;
  for (long v = tid; v < V; v += nt) eq += as_uint(x[v]) == Wp && ty_within(as_uint(x[v]), v, Wk, Ik);
  const bool tie_p = cut_p && ty_group_count(eq, sl) > 1;
  a = 0;
  b = tie_p ? V - 1 : 0;
  while (a < b) {
    const long mid = a + (b - a) / 2;
    float sum = 0.0f;
    for (long v = tid; v < V; v += nt) {
      const uint wb = as_uint(x[v]);
      if (ty_within(wb, v, Wp, mid) && ty_within(wb, v, Wk, Ik)) sum += x[v];
    }
    if (ty_group_sum(sum, sf) >= target) b = mid;
    else a = mid + 1;
  }
  const long Ip = tie_p ? a : V - 1;
  if (!cut_p) Wp = 0;
  /* the kept set's mass, the draw, then the walk in id order */
  float kept = 0.0f;
  long last = -1;
  for (long v = tid; v < V; v += nt) {
    const uint wb = as_uint(x[v]);
    if (ty_within(wb, v, Wk, Ik) && ty_within(wb, v, Wp, Ip) && x[v] >= minp) {
      kept += x[v];
      last = v;
    }
  }
  const float total = ty_group_sum(kept, sf);
  last = -ty_group_min_long(-last, sl);
  const float r = ty_splitmix_uniform((ulong)sd[2 * i], (ulong)sd[2 * i + 1]) * total;
  float run = 0.0f;
  long chosen = LONG_MAX;
  for (long base = 0; draw && base < V && chosen == LONG_MAX; base += nt) {
    const long v = base + tid;
    const uint wb = v < V ? as_uint(x[v]) : 0u;
    const bool in = v < V && ty_within(wb, v, Wk, Ik) && ty_within(wb, v, Wp, Ip) &&
                    x[v] >= minp;
    float tile;
    const float pre = run + ty_group_scan(in ? x[v] : 0.0f, sf, &tile);
    chosen = ty_group_min_long(in && pre >= r ? v : LONG_MAX, sl);
    run += tile;
  }
  if (!draw) chosen = bi;
  else if (chosen == LONG_MAX) chosen = last; /* rounding left some of u */
  if (ok && tid == 0) {
    ((__global long *)P(ids))[i] = chosen;
    ((__global float *)P(logprob))[i] = ty_ld(lg, i * V + chosen, dtl) - lse;
  }
}

/* ---- top_logprobs ----
 *
 * Group i handles row i: the log-sum-exp, then k rounds of a group argmax,
 * each over the candidates after the previous round's pick in the order
 * (logit desc, id asc), so no pick repeats. */
__kernel __attribute__((reqd_work_group_size(TY_WG, 1, 1))) void ty_top_logprobs(
    IN(logits), int dtl, long V, int k, OUT(ids), OUT(logprobs)) {
  __local float sf[TY_WG];
  __local long sl[TY_WG];
  const int tid = get_local_id(0), nt = TY_WG;
  const long i = get_group_id(0);
  __global const uchar *lg = P(logits);
  float m = -INFINITY;
  for (long v = tid; v < V; v += nt) m = fmax(m, ty_ld(lg, i * V + v, dtl));
  m = ty_group_max(m, sf);
  float se = 0.0f;
  for (long v = tid; v < V; v += nt) se += exp(ty_ld(lg, i * V + v, dtl) - m);
  const float lse = m + log(ty_group_sum(se, sf));
  float px = INFINITY;
  long pi = -1;
  for (int r = 0; r < k; ++r) {
    float bx = -INFINITY;
    long bi = LONG_MAX;
    for (long v = tid; v < V; v += nt) {
      const float xv = ty_ld(lg, i * V + v, dtl);
      if (ty_before(px, pi, xv, v) && ty_before(xv, v, bx, bi)) {
        bx = xv;
        bi = v;
      }
    }
    ty_group_argmax(&bx, &bi, sf, sl);
    if (tid == 0) {
      ((__global long *)P(ids))[i * k + r] = bi;
      ((__global float *)P(logprobs))[i * k + r] = bx - lse;
    }
    px = bx;
    pi = bi;
  }
}
