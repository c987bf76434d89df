/* The op table of the cuda executor (cuda_ops.c: which builder compiles
 * each op, and its dtype rules; cuda_compile.c looks ops up here), the
 * builders by file, and what the builders share: picking the dtype
 * instance of a templated kernel (kernels/vec.cuh's TY_KERNEL3), launch
 * shapes of the row and column kernels, and the map launch that scale and
 * the activations both use. Builders emit through cuda_exec.h only. */
#ifndef TY_BACKENDS_CUDA_CUDA_OPS_H_
#define TY_BACKENDS_CUDA_CUDA_OPS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_exec.h"

/* The three instances NAME_f32, NAME_bf16, NAME_f16 of a templated kernel
 * (string literals: static storage, as ty_cu_launch needs). */
#define TY_CU_TYPED(name) ((const char *const[3]){name "_f32", name "_bf16", name "_f16"})

/* Bytes of one element of v. */
static inline size_t ty_cu_esize(const ty_abi_value_t *v) { return ty_desc_dtype_size(v->dtype); }

/* The instance of `names` for storage dtype dt, or NULL when dt is not
 * f32, bf16 or f16. */
const char *ty_cu_typed(const char *const names[3], int dt);

/* Whether every present value among `values` (NULL entries are absent
 * operands) has dtype dt. */
bool ty_cu_all_dtype(const ty_abi_value_t *const *values, int count, int dt);

/* A 1-D grid of `blocks` blocks of `threads` (capped at the grid limit;
 * the kernels loop over what remains). */
void ty_cu_grid_blocks(ty_cu_build_t *b, ty_cu_cmd_t *c, uint64_t blocks, uint32_t threads);

/* Threads of a one-block-per-row kernel for rows of n elements: a power of
 * two from 32 to `max` giving each thread about 8 elements (a function of
 * the shape only, so the summation order is too). */
uint32_t ty_cu_row_threads(int64_t n, uint32_t max);

/* Row chunks of a column reduction over `rows` rows whose columns make
 * `col_blocks` blocks of 32: enough blocks to fill a large card, each chunk
 * at least 64 rows; a function of the shape only. Writes the rows per
 * chunk; returns the number of chunks (>= 1, <= 65535). */
uint32_t ty_cu_col_split(int64_t col_blocks, int64_t rows, int64_t *out_rchunk);

/* y[i] = sum_r x[r, i] for x [rows, cols] (dense, xdt f32/bf16/f16), y of
 * ydt: reduce_sum's column kernels (f64 sums in an order fixed by the
 * shape). The bias gradient when cuBLASLt has no epilogue for it. */
void ty_cu_col_sum(ty_cu_build_t *b, ty_dev_ref_t x, ty_dtype_t xdt, ty_dev_ref_t y,
                   ty_dtype_t ydt, int64_t rows, int64_t cols);

/* The sums of squares of x (n elements of dtype dt, f32/bf16/f16) over
 * fixed chunks of `chunk` elements into part[0 ..) (f64, in order; reduce.cu's
 * ty_reduce_rows_*): the first level of a deterministic norm. Returns the
 * number of chunks. */
int64_t ty_cu_emit_chunk_sumsq(ty_cu_build_t *b, ty_dev_ref_t x, int dt, int64_t n,
                               int64_t chunk, ty_dev_ref_t part);

/* The map kernel (kernels/elementwise.cu, ty_map_t_* or ty_map): op is
 * TY_MAP_* of that file, alpha scale's factor. */
void ty_cu_emit_map(ty_cu_build_t *b, int op, float alpha);

/* The deterministic scatter-add of an embedding gradient (embedding.cu's
 * ty_emb_*): dout's rows (input 0) summed into dtable[V, D] (output 0) by id,
 * each row's in token order. begin checks the node and takes the scratch
 * (false: nothing more to do, or a failed build); the caller then fills
 * `counts` (ids per row), and end scans, places and sums over `ids` (dtype
 * code dti; ids outside [0, V) are skipped). */
typedef struct ty_cu_emb_scatter_t {
  int64_t N, V, D;
  const char *sum; /* ty_emb_sum_<T> */
  ty_dev_ref_t counts, offsets, cursor, list;
} ty_cu_emb_scatter_t;
bool ty_cu_emb_scatter_begin(ty_cu_build_t *b, ty_cu_emb_scatter_t *sc);
void ty_cu_emb_scatter_end(ty_cu_build_t *b, const ty_cu_emb_scatter_t *sc, ty_dev_ref_t ids,
                           int dti);

/* ---- the op table (cuda_ops.c) ---- */

/* Ended by an entry whose op is NULL; ty_dev_op_find looks an op up. */
extern const ty_dev_op_t ty_cu_ops[];
/* The fills and copies the core's view builders use (cuda_ops_views.c). */
extern const ty_dev_movers_t ty_cu_movers;
bool ty_cu_op_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                    size_t capacity);
bool ty_cu_attention_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                           size_t capacity);

/* The builders of the ops in device_op_list.h, ty_cu_build_<builder>
 * (cuda_ops.c: binary, scale; cuda_ops_views.c: cast, kv_cache_write; cuda_ops_reduce.c; cuda_ops_embedding.c; cuda_ops_optim.c:
 * adamw, sgd, clip; cuda_ops_nn.c: map, dropout, norm, norm_backward,
 * softmax, cross_entropy, rope; cuda_attention.c; cuda_gemm.c: matmul). */
#define TY_DEV_OP(op, builder, accept) void ty_cu_build_##builder(ty_cu_build_t *b);
#define TY_DEV_CORE_OP(op, function, accept)
#include "trainyard/device_op_list.h"

/* cuda's own builders, by file. */
/* cuda_ops_views.c: slice, with the SLICES fusion (cuda_fuse.h) */
void ty_cu_build_slice(ty_cu_build_t *b);
/* cuda_ops_optim.c */
void ty_cu_build_all_reduce(ty_cu_build_t *b);
void ty_cu_build_gather(ty_cu_build_t *b); /* all_gather, reduce_scatter */
/* cuda_attention.c */
void ty_cu_build_attention_merge(ty_cu_build_t *b);
/* cuda_ops_memory.c */
void ty_cu_build_linear_ce(ty_cu_build_t *b);
void ty_cu_build_adafactor(ty_cu_build_t *b);
void ty_cu_build_global_norm_scale(ty_cu_build_t *b);
/* cuda_ops_vocab.c */
void ty_cu_build_vocab_embedding(ty_cu_build_t *b);
void ty_cu_build_vocab_embedding_backward(ty_cu_build_t *b);
void ty_cu_build_vocab_max(ty_cu_build_t *b);
void ty_cu_build_vocab_ce_sums(ty_cu_build_t *b);
void ty_cu_build_vocab_ce_loss(ty_cu_build_t *b);
bool ty_cu_vocab_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                       size_t capacity);
/* cuda_ops_serve.c builds issue 29's ops (paged KV cache, token
 * selection); their builders are in the shared list above. */

#endif /* TY_BACKENDS_CUDA_CUDA_OPS_H_ */
