/* Embedding gather and its deterministic scatter-add (no float atomics: a
 * vocabulary row's gradient adds its token rows in increasing order, so
 * every run gives the same bits). */
#include "vec.cuh"

/* ---- gather ----
 *
 *   out[n, :] = table[ids[n], :]      (ids outside [0, V): TY_ERR_EMBEDDING_ID
 *                                      with n, the id and V; that row gets 0)
 *
 * One warp per row; the row moves as raw bytes in the widest unit (16, 8,
 * 4 or 2 bytes) that the row size and both addresses allow. Exact. */
template <typename U>
__device__ inline void ty_move_row(const void *src, void *dst, long long units, int lane) {
  for (long long k = lane; k < units; k += 32) {
    ty_vstore((U *)dst + k, ty_vload<U>((const U *)src + k));
  }
}

extern "C" __global__ void ty_embedding(const void *table, int dtt, const void *ids, int dti,
                                        void *out, int dto, long long N, long long V,
                                        long long D, ERR_ARGS) {
  ty_pdl_enter();
  const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
  const int es = ty_dt_size(dto);
  const long long row_bytes = D * es;
  int unit = 0;
  if (dtt == dto) {
    const unsigned long long a = (uintptr_t)table | (uintptr_t)out | (unsigned long long)row_bytes;
    unit = a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : 2;
  }
  for (long long n = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); n < N;
       n += (long long)gridDim.x * wpb) {
    const long long id = ty_ldi(ids, n, dti);
    if (id < 0 || id >= V) {
      if (lane == 0) ty_fail(err, node, TY_ERR_EMBEDDING_ID, n, id, V);
      uint16_t *zero = (uint16_t *)((char *)out + n * row_bytes);
      for (long long k = lane; k < row_bytes / 2; k += 32) zero[k] = 0;
      continue;
    }
    const char *src = (const char *)table + id * row_bytes;
    char *dst = (char *)out + n * row_bytes;
    switch (unit) {
      case 16: ty_move_row<uint4>(src, dst, row_bytes / 16, lane); break;
      case 8: ty_move_row<uint2>(src, dst, row_bytes / 8, lane); break;
      case 4: ty_move_row<uint32_t>(src, dst, row_bytes / 4, lane); break;
      case 2: ty_move_row<uint16_t>(src, dst, row_bytes / 2, lane); break;
      default: /* the table's dtype differs from out's: convert */
        for (long long d = lane; d < D; d += 32) {
          ty_st(out, n * D + d, dto, ty_ld(table, id * D + d, dtt));
        }
        break;
    }
  }
}

/* ---- scatter-add ----
 *
 *   dtable[v, :] = sum_{n: ids[n] = v} dout[n, :], in increasing n
 *
 * A counting sort groups the token rows by id: counts by integer atomics
 * (exact), an exclusive scan into offsets, then each row placed into its
 * id's bucket by an atomic cursor. The order inside a bucket is then
 * arbitrary, so ty_emb_sum_* sorts each bucket (its entries are distinct
 * row numbers: the sorted order is unique) before adding the rows in that
 * order. A bucket larger than TY_EMB_CAP (a very frequent token) is not
 * sorted but found by scanning all ids in order, tile by tile. The sums are
 * f64, rounded once, as the cpu backend's ("reduction" conform bound). */

#define TY_EMB_CAP 2048 /* bucket entries sorted in shared memory */

/* counts[id] += 1 for every row (counts zeroed by the host). */
extern "C" __global__ void ty_emb_count(const void *ids, int dti, long long N, long long V,
                                        int *counts, ERR_ARGS) {
  ty_pdl_enter();
  TY_FOR_EACH(n, N) {
    const long long id = ty_ldi(ids, n, dti);
    if (id < 0 || id >= V) {
      ty_fail(err, node, TY_ERR_EMBEDDING_ID, n, id, V);
      continue;
    }
    atomicAdd(counts + id, 1);
  }
}

/* One block: offsets = cursor = exclusive prefix sum of counts. */
extern "C" __global__ void ty_emb_scan(const int *counts, int *offsets, int *cursor,
                                       long long V) {
  ty_pdl_enter();
  __shared__ int scratch[32];
  const long long chunk = (V + blockDim.x - 1) / blockDim.x;
  const long long lo = threadIdx.x * chunk, hi = lo + chunk < V ? lo + chunk : V;
  int sum = 0;
  for (long long v = lo; v < hi; ++v) sum += counts[v];
  int total;
  int run = ty_block_scan(sum, scratch, &total);
  for (long long v = lo; v < hi; ++v) {
    offsets[v] = run;
    cursor[v] = run;
    run += counts[v];
  }
}

/* list[cursor[id]++] = n (in no particular order within a bucket). */
extern "C" __global__ void ty_emb_place(const void *ids, int dti, long long N, long long V,
                                        int *cursor, int *list) {
  ty_pdl_enter();
  TY_FOR_EACH(n, N) {
    const long long id = ty_ldi(ids, n, dti);
    if (id < 0 || id >= V) continue;
    list[atomicAdd(cursor + id, 1)] = (int)n;
  }
}

/* One block per vocabulary row (grid-stride). */
template <typename T>
__device__ __forceinline__ void ty_emb_sum_impl(const void *dout_, const void *ids, int dti,
                                                const int *counts, const int *offsets,
                                                const int *list, void *dtable_, long long N,
                                                long long V, long long D) {
  __shared__ int rows[TY_EMB_CAP];
  __shared__ int scratch[32];
  const T *dout = (const T *)dout_;
  T *dtable = (T *)dtable_;
  const int t = threadIdx.x, nt = blockDim.x;
  for (long long v = blockIdx.x; v < V; v += gridDim.x) {
    const int k = counts[v];
    T *out = dtable + v * D;
    if (k == 0) {
      for (long long d = t; d < D; d += nt) ty_put(out, d, 0.0f);
      continue;
    }
    if (k <= TY_EMB_CAP) {
      /* The bucket, padded to a power of two, bitonic-sorted ascending. */
      int p = 1;
      while (p < k) p <<= 1;
      for (int i = t; i < p; i += nt) rows[i] = i < k ? list[offsets[v] + i] : INT_MAX;
      __syncthreads();
      for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
          for (int i = t; i < p; i += nt) {
            const int j = i ^ stride;
            if (j > i) {
              const int a = rows[i], b = rows[j];
              if ((a > b) == ((i & size) == 0)) {
                rows[i] = b;
                rows[j] = a;
              }
            }
          }
          __syncthreads();
        }
      }
      for (long long d = t; d < D; d += nt) {
        double acc = 0.0;
        for (int r = 0; r < k; ++r) acc += ty_get(dout, (long long)rows[r] * D + d);
        ty_put(out, d, (float)acc);
      }
      __syncthreads(); /* rows is reused by the next vocabulary row */
      continue;
    }
    /* A frequent token: for each column slice, walk the ids in tiles of
     * TY_EMB_CAP, compact the matching rows of a tile in order (each thread
     * checks a run of consecutive ids, a block scan places the runs), and
     * add them. */
    const int per = TY_EMB_CAP / nt; /* nt divides TY_EMB_CAP (the host's choice) */
    for (long long d0 = 0; d0 < D; d0 += nt) {
      const long long d = d0 + t;
      double acc = 0.0;
      for (long long base = 0; base < N; base += TY_EMB_CAP) {
        unsigned mask = 0;
        for (int j = 0; j < per; ++j) {
          const long long n = base + (long long)t * per + j;
          if (n < N && ty_ldi(ids, n, dti) == v) mask |= 1u << j;
        }
        int total;
        int at = ty_block_scan(__popc(mask), scratch, &total);
        for (int j = 0; j < per; ++j) {
          if (mask & (1u << j)) rows[at++] = (int)(base + (long long)t * per + j);
        }
        __syncthreads();
        if (d < D) {
          for (int r = 0; r < total; ++r) acc += ty_get(dout, (long long)rows[r] * D + d);
        }
        __syncthreads();
      }
      if (d < D) ty_put(out, d, (float)acc);
    }
  }
}
#define TY_EMB_SUM_PARAMS                                                                   \
  const void *dout, const void *ids, int dti, const int *counts, const int *offsets,       \
      const int *list, void *dtable, long long N, long long V, long long D
#define TY_EMB_SUM_ARGS dout, ids, dti, counts, offsets, list, dtable, N, V, D
TY_KERNEL3(ty_emb_sum, TY_EMB_SUM_PARAMS, TY_EMB_SUM_ARGS)
