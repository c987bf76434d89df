/* Reference kernels of the paged KV cache (issue 29; docs/ops.md):
 * paged_kv_write puts rows into pool slots, paged_attention attends each row
 * over its own sequence's blocks. Part of ty_ops_reference (f64, naive, the
 * spec and the conformance oracle).
 *
 * Layouts: pool, k_pool, v_pool [NB, BS, Hkv, D]; new [N, Hkv, D]; q and out
 * [N, Hq, D]; slots, row_seq, row_pos [N]; block_table [S, MB].
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for the data errors below, found before anything
 * is written, naming the row, the value and the allowed range (the same
 * words as the devices' data errors, backends/common/device_exec.c).
 */
#ifndef TY_OPS_REFERENCE_REF_PAGED_H_
#define TY_OPS_REFERENCE_REF_PAGED_H_

#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* pool[slots[i] / BS, slots[i] % BS] = fresh[i] for every i with
 * slots[i] >= 0; slots[i] == -1 skips row i. Errors: a slot < -1 or >=
 * NB*BS; two rows naming one slot (devices leave that undefined, the
 * reference refuses it so a conformance case cannot depend on it). */
ty_status_t ty_ref_paged_kv_write(double *pool, int64_t blocks, int64_t block_size,
                                  int64_t kv_heads, int64_t head_dim, const double *fresh,
                                  int64_t rows, const int64_t *slots);

typedef struct ty_ref_paged_shape_t {
  int64_t rows;       /* N */
  int64_t q_heads;    /* Hq, a multiple of kv_heads */
  int64_t kv_heads;   /* Hkv */
  int64_t head_dim;   /* D */
  int64_t blocks;     /* NB */
  int64_t block_size; /* BS */
  int64_t seqs;       /* S, rows of the block table */
  int64_t max_blocks; /* MB, blocks per table row */
  double scale;       /* > 0, usually 1 / sqrt(D) */
  int64_t window;     /* 0: plain causal; > 0: a query at p sees p-window+1..p */
} ty_ref_paged_shape_t;

/* For row i with s = row_seq[i] >= 0 and p = row_pos[i]: key j in [lo, p]
 * (lo = max(0, p - window + 1) with a window, else 0) is
 * k_pool[table[s, j / BS], j % BS, h / (Hq / Hkv)], and
 *   out[i, h] = sum_j softmax_j(scale <q[i, h], k_j>) v_j.
 * row_seq[i] == -1 is a padding row: out[i] = 0. Errors: row_seq outside
 * [-1, S), row_pos outside [0, MB*BS), a block number the row reads outside
 * [0, NB). */
ty_status_t ty_ref_paged_attention(const ty_ref_paged_shape_t *shape, const double *q,
                                   const double *k_pool, const double *v_pool,
                                   const int64_t *block_table, const int64_t *row_seq,
                                   const int64_t *row_pos, double *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_PAGED_H_ */
