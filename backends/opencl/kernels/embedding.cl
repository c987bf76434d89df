/* Embedding gather and its deterministic scatter-add.
 *
 *   forward:  out[n, d] = table[ids[n], d]          (ids outside [0, V): error)
 *   backward: dtable[v, d] = sum_{n: ids[n] = v} dout[n, d], in increasing n
 *
 * The backward avoids float atomics (whose order, and so whose rounding,
 * changes from run to run): a counting sort groups the rows by id — counts
 * by integer atomics, an exclusive scan, then each row's place from its
 * rank among earlier rows with the same id — and each (v, d) then adds its
 * rows in order. The rank costs O(N) per row, fine for the N = batch x
 * sequence rows of a step. The gather is exact; the sums are f32 ("reduction"
 * conform bound). */

__kernel void ty_embedding(IN(table), int dtt, IN(ids), int dti, OUT(out), int dto, long N,
                           long V, long D, ERR_ARGS) {
  const long i = get_global_id(0);
  if (i >= N * D) return;
  const long n = i / D, d = i % D;
  const long id = ty_ldi(P(ids), n, dti);
  if (id < 0 || id >= V) {
    if (d == 0) ty_fail(err, node, TY_ERR_EMBEDDING_ID, n, id, V);
    ty_st(P(out), i, dto, 0.0f);
    return;
  }
  if (dtt == dto) {
    ty_move(P(table), id * D + d, P(out), i, dto == TY_F32 ? 4 : 2);
  } else {
    ty_st(P(out), i, dto, ty_ld(P(table), id * D + d, dtt));
  }
}

/* counts[v] += 1 per row with id v (counts zeroed by the host). */
__kernel void ty_emb_count(IN(ids), int dti, long N, long V, OUT(counts), ERR_ARGS) {
  const long n = get_global_id(0);
  if (n >= N) return;
  const long id = ty_ldi(P(ids), n, dti);
  if (id < 0 || id >= V) {
    ty_fail(err, node, TY_ERR_EMBEDDING_ID, n, id, V);
    return;
  }
  atomic_inc((__global int *)P(counts) + id);
}

/* One work-group: offsets = exclusive prefix sum of counts. */
__kernel void ty_emb_scan(IN(counts), OUT(offsets), long V) {
  __local int part[TY_WG];
  __global const int *c = (__global const int *)P(counts);
  __global int *o = (__global int *)P(offsets);
  const int lid = get_local_id(0);
  const long chunk = (V + TY_WG - 1) / TY_WG;
  const long lo = lid * chunk, hi = lo + chunk < V ? lo + chunk : V;
  int sum = 0;
  for (long v = lo; v < hi; ++v) sum += c[v];
  part[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) { /* TY_WG partial sums: a sequential scan is cheap */
    int run = 0;
    for (int i = 0; i < TY_WG; ++i) {
      int x = part[i];
      part[i] = run;
      run += x;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  int run = part[lid];
  for (long v = lo; v < hi; ++v) {
    o[v] = run;
    run += c[v];
  }
}

/* list[offsets[id] + rank] = n, rank = rows before n with the same id. */
__kernel void ty_emb_place(IN(ids), int dti, long N, long V, IN(offsets), OUT(list)) {
  const long n = get_global_id(0);
  if (n >= N) return;
  const long id = ty_ldi(P(ids), n, dti);
  if (id < 0 || id >= V) return;
  int rank = 0;
  for (long m = 0; m < n; ++m) rank += ty_ldi(P(ids), m, dti) == id;
  ((__global int *)P(list))[((__global const int *)P(offsets))[id] + rank] = (int)n;
}

__kernel void ty_emb_sum(IN(dout), int dtd, IN(counts), IN(offsets), IN(list), OUT(dtable),
                         int dtt, long V, long D) {
  const long i = get_global_id(0);
  if (i >= V * D) return;
  const long v = i / D, d = i % D;
  const int start = ((__global const int *)P(offsets))[v];
  const int count = ((__global const int *)P(counts))[v];
  __global const int *rows = (__global const int *)P(list);
  float acc = 0.0f;
  for (int r = 0; r < count; ++r) acc += ty_ld(P(dout), (long)rows[start + r] * D + d, dtd);
  ty_st(P(dtable), i, dtt, acc);
}
