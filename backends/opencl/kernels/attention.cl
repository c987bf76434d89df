/* Fused causal grouped-query attention, forward and backward.
 *
 * q [B,T,Hq,D], k/v [B,S,Hkv,D]; query head h reads kv head h / (Hq/Hkv).
 * With L = kv_len (S when absent) query t sits at position pos = t + L - T
 * and sees key s iff s <= pos and (window == 0 or pos - s < window).
 *
 *   forward:  s_j = scale q.k_j;  lse = log sum_j exp(s_j);
 *             out = sum_j exp(s_j - lse) v_j
 *   backward: p_j = exp(s_j - lse), dp_j = dout.v_j,
 *             delta = sum_j p_j dp_j = dout.out,  ds_j = p_j (dp_j - delta)
 *             dq = scale sum_j ds_j k_j
 *             dk_j = scale sum_{(h,t) seeing j} ds q,  dv_j = sum p dout
 *
 * Forward: one work-group of TY_ATT_WG per (b, h, t) walks the visible keys
 * in chunks of TY_ATT_WG (one key per work-item) with an online softmax
 * (running max and sum, rescaled per chunk), so any key length fits in
 * fixed local memory; each work-item accumulates D / TY_ATT_WG output
 * dimensions. Backward runs two kernels without atomics, so results are
 * deterministic: dq per query row (which also stores delta), then dk/dv per
 * key row, walking the (head, query) pairs that see the key. Scores are
 * recomputed rather than stored. f32 throughout; checked at the
 * "reduction" / "chain" conform bounds. */

#define TY_ATT_PER (TY_ATT_MAXD / TY_ATT_WG) /* output dims per work-item */

/* L from the optional kv_len input; a bad value is a data error and makes
 * every group return without writing (the step fails). */
long ty_att_len(IN(kvlen), int dtkl, int has_kvlen, long T, long S, ERR_ARGS) {
  if (!has_kvlen) return S;
  long L = ty_ldi(P(kvlen), 0, dtkl);
  if (L < T || L > S) {
    if (get_global_id(0) == 0) ty_fail(err, node, TY_ERR_KV_LEN, L, T, S);
    return -1;
  }
  return L;
}

__kernel __attribute__((reqd_work_group_size(TY_ATT_WG, 1, 1))) void ty_attention(
    IN(q), int dtq, IN(k), int dtk, IN(v), int dtv, OUT(out), int dto, OUT(lse), int dtl,
    IN(kvlen), int dtkl, int has_kvlen, long B, long T, long S, long Hq, long Hkv, long D,
    float scale, long window, ERR_ARGS) {
  __local float qv[TY_ATT_MAXD];
  __local float pr[TY_ATT_WG];
  __local float red[TY_ATT_WG];
  const long L = ty_att_len(kvlen_b, kvlen_o, dtkl, has_kvlen, T, S, err, node);
  if (L < 0) return;
  const int lid = get_local_id(0);
  const long row = get_group_id(0); /* (b * Hq + h) * T + t */
  const long t = row % T, h = (row / T) % Hq, b = row / (T * Hq);
  const long kvh = h / (Hq / Hkv);
  const long qbase = ((b * T + t) * Hq + h) * D;
  for (long d = lid; d < D; d += TY_ATT_WG) qv[d] = ty_ld(P(q), qbase + d, dtq);
  barrier(CLK_LOCAL_MEM_FENCE);
  const long pos = t + L - T;
  const long lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  float m = -INFINITY, l = 0.0f, acc[TY_ATT_PER];
  for (int j = 0; j < TY_ATT_PER; ++j) acc[j] = 0.0f;
  for (long c0 = lo; c0 <= pos; c0 += TY_ATT_WG) {
    const long s = c0 + lid;
    float sc = -INFINITY;
    if (s <= pos) {
      const long kb = ((b * S + s) * Hkv + kvh) * D;
      float dot = 0.0f;
      for (long d = 0; d < D; ++d) dot += qv[d] * ty_ld(P(k), kb + d, dtk);
      sc = dot * scale;
    }
    const float cm = ty_group_max(sc, red);
    const float nm = fmax(m, cm);
    const float e = s <= pos ? exp(sc - nm) : 0.0f;
    pr[lid] = e;
    const float cs = ty_group_sum(e, red); /* its barriers also publish pr[] */
    const float corr = exp(m - nm);        /* 0 on the first chunk (m = -inf) */
    l = l * corr + cs;
    const long count = pos - c0 + 1 < TY_ATT_WG ? pos - c0 + 1 : TY_ATT_WG;
    for (int j = 0; j < TY_ATT_PER; ++j) {
      const long d = lid + (long)j * TY_ATT_WG;
      if (d >= D) break;
      float a = acc[j] * corr;
      for (long i = 0; i < count; ++i) {
        a += pr[i] * ty_ld(P(v), ((b * S + c0 + i) * Hkv + kvh) * D + d, dtv);
      }
      acc[j] = a;
    }
    m = nm;
    barrier(CLK_LOCAL_MEM_FENCE); /* before pr[] is overwritten */
  }
  const float inv = 1.0f / l;
  for (int j = 0; j < TY_ATT_PER; ++j) {
    const long d = lid + (long)j * TY_ATT_WG;
    if (d >= D) break;
    ty_st(P(out), qbase + d, dto, acc[j] * inv);
  }
  if (lid == 0) ty_st(P(lse), (b * Hq + h) * T + t, dtl, m + log(l));
}

/* dq per query row; also delta = dout.out - dlse (dlse, the lse output's
 * gradient, when has_dlse) into delta[(b * Hq + h) * T + t]. */
__kernel __attribute__((reqd_work_group_size(TY_ATT_WG, 1, 1))) void ty_attention_bwd_dq(
    IN(dout), int dtdo, IN(q), int dtq, IN(k), int dtk, IN(v), int dtv, IN(out), int dto,
    IN(lse), int dtl, IN(kvlen), int dtkl, int has_kvlen, IN(dlse), int dtdls, int has_dlse,
    OUT(dq), int dtdq, OUT(delta),
    long B, long T, long S, long Hq, long Hkv, long D, float scale, long window, ERR_ARGS) {
  __local float qv[TY_ATT_MAXD];
  __local float gv[TY_ATT_MAXD];
  __local float ds[TY_ATT_WG];
  __local float red[TY_ATT_WG];
  const long L = ty_att_len(kvlen_b, kvlen_o, dtkl, has_kvlen, T, S, err, node);
  if (L < 0) return;
  const int lid = get_local_id(0);
  const long row = get_group_id(0);
  const long t = row % T, h = (row / T) % Hq, b = row / (T * Hq);
  const long kvh = h / (Hq / Hkv);
  const long qbase = ((b * T + t) * Hq + h) * D;
  float part = 0.0f;
  for (long d = lid; d < D; d += TY_ATT_WG) {
    qv[d] = ty_ld(P(q), qbase + d, dtq);
    gv[d] = ty_ld(P(dout), qbase + d, dtdo);
    part += gv[d] * ty_ld(P(out), qbase + d, dto);
  }
  /* also publishes qv, gv; without dlse, x - 0 keeps the bits of before */
  const float dl = ty_group_sum(part, red) - (has_dlse ? ty_ld(P(dlse), row, dtdls) : 0.0f);
  if (lid == 0) ((__global float *)P(delta))[row] = dl;
  const float row_lse = ty_ld(P(lse), (b * Hq + h) * T + t, dtl);
  const long pos = t + L - T;
  const long lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  float acc[TY_ATT_PER];
  for (int j = 0; j < TY_ATT_PER; ++j) acc[j] = 0.0f;
  for (long c0 = lo; c0 <= pos; c0 += TY_ATT_WG) {
    const long s = c0 + lid;
    float g = 0.0f;
    if (s <= pos) {
      const long kb = ((b * S + s) * Hkv + kvh) * D;
      float dot = 0.0f, dp = 0.0f;
      for (long d = 0; d < D; ++d) {
        dot += qv[d] * ty_ld(P(k), kb + d, dtk);
        dp += gv[d] * ty_ld(P(v), kb + d, dtv);
      }
      const float p = exp(dot * scale - row_lse);
      g = p * (dp - dl);
    }
    ds[lid] = g;
    barrier(CLK_LOCAL_MEM_FENCE);
    const long count = pos - c0 + 1 < TY_ATT_WG ? pos - c0 + 1 : TY_ATT_WG;
    for (int j = 0; j < TY_ATT_PER; ++j) {
      const long d = lid + (long)j * TY_ATT_WG;
      if (d >= D) break;
      float a = acc[j];
      for (long i = 0; i < count; ++i) {
        a += ds[i] * ty_ld(P(k), ((b * S + c0 + i) * Hkv + kvh) * D + d, dtk);
      }
      acc[j] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int j = 0; j < TY_ATT_PER; ++j) {
    const long d = lid + (long)j * TY_ATT_WG;
    if (d >= D) break;
    ty_st(P(dq), qbase + d, dtdq, acc[j] * scale);
  }
}

/* dk, dv per key row (b, kvh, s). */
__kernel __attribute__((reqd_work_group_size(TY_ATT_WG, 1, 1))) void ty_attention_bwd_dkv(
    IN(dout), int dtdo, IN(q), int dtq, IN(k), int dtk, IN(v), int dtv, IN(lse), int dtl,
    IN(delta), IN(kvlen), int dtkl, int has_kvlen, OUT(dk), int dtdk, OUT(dv), int dtdv,
    long B, long T, long S, long Hq, long Hkv, long D, float scale, long window, ERR_ARGS) {
  __local float kv[TY_ATT_MAXD];
  __local float vv[TY_ATT_MAXD];
  __local float pl[TY_ATT_WG];
  __local float dsl[TY_ATT_WG];
  __local long rowl[TY_ATT_WG];
  const long L = ty_att_len(kvlen_b, kvlen_o, dtkl, has_kvlen, T, S, err, node);
  if (L < 0) return;
  const int lid = get_local_id(0);
  const long key = get_group_id(0); /* (b * S + s) * Hkv + kvh */
  const long kvh = key % Hkv, s = (key / Hkv) % S, b = key / (Hkv * S);
  const long kbase = key * D;
  const long group = Hq / Hkv;
  /* Queries that see key s: t >= s - (L - T), and with a window
   * t < s + window - (L - T); none when s >= L. */
  long t_lo = s - (L - T), t_hi = T - 1;
  if (t_lo < 0) t_lo = 0;
  if (window > 0 && s + window - 1 - (L - T) < t_hi) t_hi = s + window - 1 - (L - T);
  const long nt = s < L && t_hi >= t_lo ? t_hi - t_lo + 1 : 0;
  const long pairs = group * nt;
  for (long d = lid; d < D; d += TY_ATT_WG) {
    kv[d] = ty_ld(P(k), kbase + d, dtk);
    vv[d] = ty_ld(P(v), kbase + d, dtv);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  float ak[TY_ATT_PER], av[TY_ATT_PER];
  for (int j = 0; j < TY_ATT_PER; ++j) ak[j] = av[j] = 0.0f;
  __global const float *dlt = (__global const float *)P(delta);
  for (long c0 = 0; c0 < pairs; c0 += TY_ATT_WG) {
    const long pi = c0 + lid;
    float p = 0.0f, g = 0.0f;
    long qrow = 0;
    if (pi < pairs) {
      const long h = kvh * group + pi / nt, t = t_lo + pi % nt;
      qrow = ((b * T + t) * Hq + h) * D;
      float dot = 0.0f, dp = 0.0f;
      for (long d = 0; d < D; ++d) {
        dot += ty_ld(P(q), qrow + d, dtq) * kv[d];
        dp += ty_ld(P(dout), qrow + d, dtdo) * vv[d];
      }
      const long srow = (b * Hq + h) * T + t;
      p = exp(dot * scale - ty_ld(P(lse), srow, dtl));
      g = p * (dp - dlt[srow]);
    }
    pl[lid] = p;
    dsl[lid] = g;
    rowl[lid] = qrow;
    barrier(CLK_LOCAL_MEM_FENCE);
    const long count = pairs - c0 < TY_ATT_WG ? pairs - c0 : TY_ATT_WG;
    for (int j = 0; j < TY_ATT_PER; ++j) {
      const long d = lid + (long)j * TY_ATT_WG;
      if (d >= D) break;
      float a = ak[j], c = av[j];
      for (long i = 0; i < count; ++i) {
        a += dsl[i] * ty_ld(P(q), rowl[i] + d, dtq);
        c += pl[i] * ty_ld(P(dout), rowl[i] + d, dtdo);
      }
      ak[j] = a;
      av[j] = c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int j = 0; j < TY_ATT_PER; ++j) {
    const long d = lid + (long)j * TY_ATT_WG;
    if (d >= D) break;
    ty_st(P(dk), kbase + d, dtdk, ak[j] * scale);
    ty_st(P(dv), kbase + d, dtdv, av[j]);
  }
}

/* Paged attention (issue 29): q [N,Hq,D], k_pool/v_pool [NB,BS,Hkv,D],
 * table [S,MB], row_seq/row_pos [N]. Row i of sequence s = row_seq[i] at
 * position p = row_pos[i] sees keys j in [lo, p] (lo = max(0, p-window+1)
 * with a window), key j at pool[table[s, j / BS], j % BS, h / (Hq/Hkv)];
 * row_seq -1 is a padding row, whose output is 0.
 *
 * One work-group of TY_ATT_WG per (row, head), the forward's online softmax
 * over chunks of TY_ATT_WG keys that start at lo: the chunks, and so the
 * order of every sum, depend on p only, never on N or the other rows, so a
 * row gets the same bits in any step (batch invariance). Bad data
 * (TY_ERR_PAGED_ROW: row*4 + what, value, bound) makes the row's groups
 * return without writing; every return is uniform within a group. */
__kernel __attribute__((reqd_work_group_size(TY_ATT_WG, 1, 1))) void ty_paged_attention(
    IN(q), int dtq, IN(kp), int dtk, IN(vp), int dtv, IN(table), int dtt, IN(rseq), int dts,
    IN(rpos), int dtp, OUT(out), int dto, long Hq, long Hkv, long D, long NB, long BS, long S,
    long MB, float scale, long window, ERR_ARGS) {
  __local float qv[TY_ATT_MAXD];
  __local float pr[TY_ATT_WG];
  __local float red[TY_ATT_WG];
  __local long kbase[TY_ATT_WG];
  const int lid = get_local_id(0);
  const long i = get_group_id(0) / Hq, h = get_group_id(0) % Hq;
  const long seq = ty_ldi(P(rseq), i, dts), pos = ty_ldi(P(rpos), i, dtp);
  const long obase = (i * Hq + h) * D;
  if (seq < -1 || seq >= S) {
    if (lid == 0 && h == 0) ty_fail(err, node, TY_ERR_PAGED_ROW, i * 4 + TY_PAGED_BAD_SEQ, seq, S);
    return;
  }
  if (seq < 0) {
    for (long d = lid; d < D; d += TY_ATT_WG) ty_st(P(out), obase + d, dto, 0.0f);
    return;
  }
  if (pos < 0 || pos >= MB * BS) {
    if (lid == 0 && h == 0) {
      ty_fail(err, node, TY_ERR_PAGED_ROW, i * 4 + TY_PAGED_BAD_POS, pos, MB * BS);
    }
    return;
  }
  const long lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
  float bad = 0.0f;
  for (long bb = lo / BS + lid; bb <= pos / BS; bb += TY_ATT_WG) {
    const long blk = ty_ldi(P(table), seq * MB + bb, dtt);
    if (blk < 0 || blk >= NB) {
      if (h == 0) ty_fail(err, node, TY_ERR_PAGED_ROW, i * 4 + TY_PAGED_BAD_BLOCK, blk, NB);
      bad = 1.0f;
    }
  }
  if (ty_group_max(bad, red) > 0.0f) return;
  const long kvh = h / (Hq / Hkv);
  for (long d = lid; d < D; d += TY_ATT_WG) qv[d] = ty_ld(P(q), obase + d, dtq);
  barrier(CLK_LOCAL_MEM_FENCE);
  float m = -INFINITY, l = 0.0f, acc[TY_ATT_PER];
  for (int j = 0; j < TY_ATT_PER; ++j) acc[j] = 0.0f;
  for (long c0 = lo; c0 <= pos; c0 += TY_ATT_WG) {
    const long s = c0 + lid;
    float sc = -INFINITY;
    if (s <= pos) {
      const long blk = ty_ldi(P(table), seq * MB + s / BS, dtt);
      const long kb = ((blk * BS + s % BS) * Hkv + kvh) * D;
      kbase[lid] = kb;
      float dot = 0.0f;
      for (long d = 0; d < D; ++d) dot += qv[d] * ty_ld(P(kp), kb + d, dtk);
      sc = dot * scale;
    }
    const float cm = ty_group_max(sc, red);
    const float nm = fmax(m, cm);
    const float e = s <= pos ? exp(sc - nm) : 0.0f;
    pr[lid] = e;
    const float cs = ty_group_sum(e, red); /* its barriers also publish pr[], kbase[] */
    const float corr = exp(m - nm);        /* 0 on the first chunk (m = -inf) */
    l = l * corr + cs;
    const long count = pos - c0 + 1 < TY_ATT_WG ? pos - c0 + 1 : TY_ATT_WG;
    for (int j = 0; j < TY_ATT_PER; ++j) {
      const long d = lid + (long)j * TY_ATT_WG;
      if (d >= D) break;
      float a = acc[j] * corr;
      for (long k = 0; k < count; ++k) a += pr[k] * ty_ld(P(vp), kbase[k] + d, dtv);
      acc[j] = a;
    }
    m = nm;
    barrier(CLK_LOCAL_MEM_FENCE); /* before pr[] and kbase[] are overwritten */
  }
  const float inv = 1.0f / l;
  for (int j = 0; j < TY_ATT_PER; ++j) {
    const long d = lid + (long)j * TY_ATT_WG;
    if (d >= D) break;
    ty_st(P(out), obase + d, dto, acc[j] * inv);
  }
}
