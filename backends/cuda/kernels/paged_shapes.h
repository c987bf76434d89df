/* The split rule of paged attention (kernels/paged.cu), shared by the
 * kernels and the host builder, which sizes the grid and the partials'
 * scratch from it. Plain C: no CUDA types.
 *
 * A row that sees L keys (L = p + 1, or at most `window`) is cut into
 * ty_pa_splits(L) pieces of ty_pa_split_keys(L) keys (a whole number of
 * 32-key tiles); the last piece may be shorter. Both depend on L alone, so
 * a row's result (its tiles, its online-softmax order and its merge) is the
 * same whatever the batch holds: batch invariance. The host's grid covers
 * the most splits any row of the table can need (ty_pa_splits of the
 * longest visible span); blocks past a row's own count return at once.
 * Splits are short (two tiles) because a block walks its tiles one after
 * another: a decode row of one sequence would otherwise be one block per
 * kv head on a GPU of 132 SMs (GPT-2, 1 stream, 200 keys: 12 blocks of 7
 * tiles, 78 us a layer on an H100). The tiles a block walks are staged in
 * shared memory, the next one loading while the current one is computed
 * (ty_pa_smem_bytes). A tile's arithmetic (kernels/paged.cu) cuts each
 * score's dot into TY_PA_DPARTS pieces and the values' sums into
 * TY_PA_KPARTS parts of the tile's keys, so one decode row keeps a block's
 * 128 threads busy; the cuts are fixed, never taken from the batch. */
#ifndef TY_CUDA_KERNELS_PAGED_SHAPES_H_
#define TY_CUDA_KERNELS_PAGED_SHAPES_H_

#define TY_PA_THREADS 128     /* 4 warps per (row, kv-head, split) block */
#define TY_PA_TILE 32         /* keys per tile (one per lane in the softmax) */
#define TY_PA_MAX_D 256       /* head dims a lane holds in 8 registers */
#define TY_PA_MAX_GD 4096     /* query elements a block stages (16 KiB f32) */
#define TY_PA_MAX_GC 32       /* (row, query head) pairs a block handles at once */
#define TY_PA_MAX_ROWS 16     /* rows of one run a block handles at once */
#define TY_PA_SPLIT_KEYS 64   /* one split per this many keys (two tiles) ... */
#define TY_PA_MAX_SPLITS 16   /* ... up to this many */
#define TY_PA_ROW_PAD 16      /* bytes after each staged key row (bank spread) */
#define TY_PA_DPARTS 8        /* pieces of a score's dot (lanes per key, xor 4 2 1) */
#define TY_PA_KPARTS 4        /* parts of a tile's keys in the values' sums (xor 8 16) */

#ifdef __CUDACC__
#define TY_PA_FN __host__ __device__ inline
#else
#define TY_PA_FN static inline
#endif

/* The head size a paged_attention kernel is built for: 64 and 128 have
 * their own (ty_paged_attn_d64_*, _d128_*: the divisions by D fold); any
 * other D takes the generic one (0). */
TY_PA_FN int ty_pa_head_kernel(int D) { return D == 64 || D == 128 ? D : 0; }

/* How many splits a row that sees `keys` (>= 1) keys uses at most. */
TY_PA_FN long long ty_pa_splits(long long keys) {
  long long n = (keys + TY_PA_SPLIT_KEYS - 1) / TY_PA_SPLIT_KEYS;
  return n < 1 ? 1 : (n > TY_PA_MAX_SPLITS ? TY_PA_MAX_SPLITS : n);
}

/* Keys per split of such a row: a whole number of tiles. In 32-bit
 * arithmetic where the count allows (the kernels' hot path: a 64-bit
 * division is dozens of instructions on a GPU); the same values. */
TY_PA_FN long long ty_pa_split_keys(long long keys) {
  if (keys > 0 && keys < 0x7fffffffLL - TY_PA_SPLIT_KEYS) {
    const int k = (int)keys;
    int n = (k + TY_PA_SPLIT_KEYS - 1) / TY_PA_SPLIT_KEYS;
    n = n > TY_PA_MAX_SPLITS ? TY_PA_MAX_SPLITS : n;
    const int per = k / n + (k % n != 0);
    return (per + TY_PA_TILE - 1) / TY_PA_TILE * TY_PA_TILE;
  }
  const long long n = ty_pa_splits(keys), per = (keys + n - 1) / n;
  return (per + TY_PA_TILE - 1) / TY_PA_TILE * TY_PA_TILE;
}

/* Query heads per block for G query heads per kv head of D dims. */
TY_PA_FN int ty_pa_head_chunk(int G, int D) {
  int gc = TY_PA_MAX_GD / (D > 0 ? D : 1);
  if (gc > TY_PA_MAX_GC) gc = TY_PA_MAX_GC;
  return gc < G ? gc : G;
}

/* Rows of a run (consecutive rows of one sequence: a prefill chunk) one
 * block takes together, sharing each K/V tile, for chunks of gc query heads
 * of D dims: what the block's query staging and score tiles hold. */
TY_PA_FN int ty_pa_run_rows(int gc, int D) {
  int r = TY_PA_MAX_GC / (gc > 0 ? gc : 1);
  const int by_q = TY_PA_MAX_GD / ((gc > 0 ? gc : 1) * (D > 0 ? D : 1));
  if (by_q < r) r = by_q;
  if (r > TY_PA_MAX_ROWS) r = TY_PA_MAX_ROWS;
  return r < 1 ? 1 : r;
}

/* Bytes between two staged key (or value) rows of D elements of `esize`
 * bytes: 16-byte aligned, plus a pad so the threads of a warp, each on its
 * own key, spread over the banks. */
TY_PA_FN int ty_pa_row_bytes(int D, int esize) {
  return (D * esize + 15) / 16 * 16 + TY_PA_ROW_PAD;
}

/* The staged queries (f32) of a block of `rows` run rows x gc heads x D. */
TY_PA_FN int ty_pa_q_bytes(int rows, int gc, int D) {
  return (rows * gc * D * 4 + 15) / 16 * 16;
}

/* The dynamic shared memory of a paged_attention block: the queries, as
 * many f32 accumulators, then two staging buffers of a tile of keys and a
 * tile of values each. */
TY_PA_FN int ty_pa_smem_bytes(int rows, int gc, int D, int esize) {
  return 2 * ty_pa_q_bytes(rows, gc, D) + 2 * 2 * TY_PA_TILE * ty_pa_row_bytes(D, esize);
}

#endif /* TY_CUDA_KERNELS_PAGED_SHAPES_H_ */
