/* What the op builders of every device executor share beyond the core's
 * operands (device_exec.h): kernel arguments appended through one hook, the
 * argument lists of kernels whose signature is the same in the CUDA and the
 * OpenCL C sources, and decoders of an op's shapes and attributes. The
 * launch itself (which module, which grid) stays with the backend: a
 * builder calls its own launch, then these to fill the arguments, then its
 * own grid. Nothing here is thread-safe (a build is one thread's); a
 * decoder that refuses a node fails the build (ty_dev_fail) and says why. */
#ifndef TY_BACKENDS_COMMON_DEVICE_OPS_H_
#define TY_BACKENDS_COMMON_DEVICE_OPS_H_

#include <stdbool.h>
#include <stdint.h>

#include "backends/common/device_exec.h"
#include "backends/common/op_shapes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel arguments ---- */

typedef enum ty_dev_arg_kind_e {
  TY_DEV_ARG_REF = 0, /* a tensor operand (the backend's pointer or buffer + offset) */
  TY_DEV_ARG_ERR,     /* the error buffer, then the node's index as an int */
  TY_DEV_ARG_I32,
  TY_DEV_ARG_U32,
  TY_DEV_ARG_I64,
  TY_DEV_ARG_U64,
  TY_DEV_ARG_F32,
  TY_DEV_ARG_F64,
  TY_DEV_ARG_DIMS8, /* 8 x int64 by value (CUDA struct ty_dims8, OpenCL long8) */
} ty_dev_arg_kind_t;

/* One argument, as the builder's arg hook (ty_dev_build_t.arg) receives it. */
typedef struct ty_dev_arg_t {
  ty_dev_arg_kind_t kind;
  ty_dev_ref_t ref;     /* REF */
  int64_t i;            /* I32, U32, I64, U64 (U64 as its bits) */
  double f;             /* F32, F64 */
  const int64_t *dims8; /* DIMS8: 8 entries */
} ty_dev_arg_t;

/* Append the next argument of launch `cmd` (the backend's command, from its
 * launch call; NULL after an error, and then nothing happens) through
 * b->arg. The kinds follow the kernel's parameter list in order. */
void ty_dev_arg_ref(ty_dev_build_t *b, void *cmd, ty_dev_ref_t ref);
void ty_dev_arg_err(ty_dev_build_t *b, void *cmd);
void ty_dev_arg_i32(ty_dev_build_t *b, void *cmd, int32_t v);
void ty_dev_arg_u32(ty_dev_build_t *b, void *cmd, uint32_t v);
void ty_dev_arg_i64(ty_dev_build_t *b, void *cmd, int64_t v);
void ty_dev_arg_u64(ty_dev_build_t *b, void *cmd, uint64_t v);
void ty_dev_arg_f32(ty_dev_build_t *b, void *cmd, float v);
void ty_dev_arg_f64(ty_dev_build_t *b, void *cmd, double v);
void ty_dev_arg_dims8(ty_dev_build_t *b, void *cmd, const int64_t v[8]);
/* Input i (output o) of the node and its dtype code (ty_dev_dt). */
void ty_dev_arg_in(ty_dev_build_t *b, void *cmd, uint32_t i);
void ty_dev_arg_out(ty_dev_build_t *b, void *cmd, uint32_t o);

/* ---- argument lists both devices' kernels declare alike ---- */

/* ty_binary(a, int dta, b, int dtb, c, int dtc, int op, i64 n, int rank,
 *           dims8 dims, dims8 sa, dims8 sb): inputs 0, 1, output 0, op
 * (ty_dev_binary_op), n elements, broadcast plan p. */
void ty_dev_args_binary(ty_dev_build_t *b, void *cmd, int op, int64_t n, const ty_op_bcast_t *p);
/* ty_embedding(table, int dtt, ids, int dti, out, int dto, i64 N, i64 V,
 *              i64 D, err, int node) */
void ty_dev_args_embedding(ty_dev_build_t *b, void *cmd);
/* ty_kv_write(fresh, cache, pos, int dtpos, int esize, i64 Smax, i64 T,
 *             i64 row, i64 n, err, int node): inputs 1, output 0, input 2. */
void ty_dev_args_kv_write(ty_dev_build_t *b, void *cmd);
/* ty_sample(logits, int dtl, params, seeds, hist, i64 L, i64 V, work, counts,
 *           ids, logprob, err, int node): sample(logits [N, V], params,
 * seeds, history? [N, L]); takes the scratch it names (work: N x V f32,
 * counts: N x V i32 when there is a history). */
void ty_dev_args_sample(ty_dev_build_t *b, void *cmd);
/* The same with `work` (N x V f32, ty_dev_sample_work) given by the caller,
 * which shares it with a kernel of its own (cuda's sample_scan). */
ty_dev_ref_t ty_dev_sample_work(ty_dev_build_t *b);
void ty_dev_args_sample_with(ty_dev_build_t *b, void *cmd, ty_dev_ref_t work);
/* ty_top_logprobs(logits, int dtl, i64 V, int k, ids, logprobs) */
void ty_dev_args_top_logprobs(ty_dev_build_t *b, void *cmd);
/* ty_cast(x, int dtx, y, int dty, i64 n, err, int node) */
void ty_dev_args_cast(ty_dev_build_t *b, void *cmd);

/* ty_strided_copy(x, y, int esize, [int vec,] i64 n, int rank, dims8 dims,
 *                 dims8 xs, dims8 ys): `vec` (elements a thread moves) is
 * passed when > 0; 0 for a kernel without that parameter (OpenCL's). */
void ty_dev_args_strided_copy(ty_dev_build_t *b, void *cmd, ty_dev_ref_t x, ty_dev_ref_t y,
                              size_t esize, int vec, int64_t n, int rank, const int64_t dims[8],
                              const int64_t xs[8], const int64_t ys[8]);

/* ---- decoders of a node's shapes and attributes ---- */

/* The rows of `v` along its last axis (norms, softmax): returns their
 * count (0 when v is empty, which a builder skips) and sets *out_C to the
 * last axis' length (1 for a scalar). */
int64_t ty_dev_rows(const ty_abi_value_t *v, int64_t *out_C);

/* add, sub, mul, div: 0..3 (the kernels' op codes). */
int ty_dev_binary_op(const ty_dev_build_t *b);

/* An embedding's sizes: N ids (input 1), a table of V rows of D (input 0,
 * or output 0 for embedding_backward). */
typedef struct ty_dev_embedding_t {
  int64_t N, V, D;
} ty_dev_embedding_t;
ty_dev_embedding_t ty_dev_embedding_of(const ty_dev_build_t *b);

/* Which axes of input 0 a reduce_* node reduces (attribute `axes`, negative
 * from the end; none or empty: all); axes out of range are ignored, as the
 * reference does. */
void ty_dev_reduce_axes(const ty_dev_build_t *b, bool red[8]);

/* A reduction's axes for the general reduce kernels (CUDA and OpenCL
 * ty_reduce): input 0's axes of size > 1 split into kept and reduced
 * (`red`), each run of axes of one kind that is contiguous in x merged
 * into one, with their strides in x (elements). Entries past a rank hold
 * `pad_dim` (dims) and 0 (strides). */
typedef struct ty_dev_reduce_plan_t {
  int krank, rrank;
  int64_t kdims[8], kstr[8], rdims[8], rstr[8];
} ty_dev_reduce_plan_t;
void ty_dev_reduce_plan(const ty_dev_build_t *b, const bool red[8], int64_t pad_dim,
                        ty_dev_reduce_plan_t *out);
/* The kernels' tail: int krank, dims8 kdims, dims8 kstr, int rrank,
 * dims8 rdims, dims8 rstr. */
void ty_dev_args_reduce_plan(ty_dev_build_t *b, void *cmd, const ty_dev_reduce_plan_t *p);

/* The chunks of `chunk` elements that inputs first .. first + count - 1
 * make, each input's rounded up (the partial sums of a global norm). */
uint64_t ty_dev_chunk_count(const ty_dev_build_t *b, uint32_t first, uint32_t count,
                            uint64_t chunk);

/* clip_by_global_norm (max_norm, g_1..g_n -> norm, g_1'..g_n'): this
 * node's scratch for the partial sums of squares (`slots` of them, one per
 * chunk of `chunk` elements of each gradient, `esize` bytes each) and for
 * the scale coefficient (one of `esize` bytes). */
typedef struct ty_dev_clip_t {
  ty_dev_ref_t partial, coef;
  uint64_t slots;
} ty_dev_clip_t;
/* Launches the partial sums of gradient `input` (n > 0 elements) into
 * `partial`'s slots from `slot` on; returns how many slots it filled. */
typedef uint64_t (*ty_dev_sumsq_fn)(ty_dev_build_t *b, uint32_t input, int64_t n,
                                    ty_dev_ref_t partial, uint64_t slot);
/* Takes the scratch and calls `sumsq` for each nonempty gradient in order. */
ty_dev_clip_t ty_dev_clip_partials(ty_dev_build_t *b, uint64_t chunk, size_t esize,
                                   ty_dev_sumsq_fn sumsq);
/* ty_clip_finish(part, i64 count, max_norm, int dtm, norm, int dtn, coef) */
void ty_dev_args_clip_finish(ty_dev_build_t *b, void *cmd, const ty_dev_clip_t *clip);

/* A norm backward's operands (layernorm_backward: dy, x, gamma?, mean, rstd
 * -> dx, dgamma, dbeta?; rmsnorm_backward: dy, x, gamma?, rstd -> dx,
 * dgamma): the statistics the forward saved and dbeta when asked for (NONE
 * and dtype 0 when absent). */
typedef struct ty_dev_norm_bwd_t {
  bool rms, has_dbeta;
  ty_dev_ref_t mean, rstd, dbeta;
  int dtm, dtr, dtdb;
} ty_dev_norm_bwd_t;
ty_dev_norm_bwd_t ty_dev_norm_bwd_of(const ty_dev_build_t *b);
/* The statistics as every norm-backward kernel takes them:
 * mean, int dtm, rstd, int dtr. */
void ty_dev_args_norm_stats(ty_dev_build_t *b, void *cmd, const ty_dev_norm_bwd_t *nb);
/* dbeta, int dtdb. */
void ty_dev_args_norm_dbeta(ty_dev_build_t *b, void *cmd, const ty_dev_norm_bwd_t *nb);

/* The rope kernels' frequency table from inv[0..half): (hi, lo) f32 pairs
 * with hi + lo = inv[j] to ~2^-48 relative, uploaded as aux. NONE with the
 * build failed (RESOURCE_EXHAUSTED) when out of memory. */
ty_dev_ref_t ty_dev_rope_freq_table(ty_dev_build_t *b, const double *inv, int64_t half);
/* A rope node (rope, rope_backward: x [B, T, H, D], pos -> y): the
 * direction and the sizes its kernels take; pairs = elements / 2. */
typedef struct ty_dev_rope_t {
  bool backward;
  int64_t T, H, D, pairs;
} ty_dev_rope_t;
ty_dev_rope_t ty_dev_rope_of(const ty_dev_build_t *b);
/* What every rope kernel takes after x and y: pos, int dtpos (input 1),
 * freq, i64 T, i64 H, i64 D, f32 sign (-1 for rope_backward), i64 pairs. */
void ty_dev_args_rope_tail(ty_dev_build_t *b, void *cmd, ty_dev_ref_t freq,
                           const ty_dev_rope_t *rope);

/* dropout's `p`; fails the build (INVALID_ARGUMENT, "probability P is
 * outside [0, 1)") and returns false when it is not in [0, 1). */
bool ty_dev_dropout_p(ty_dev_build_t *b, double *out_p);

/* matmul's sizes: c[M, N] = op(a)[M, K] op(b)[K, N] (trans_a, trans_b);
 * batch axes before the last two. */
typedef struct ty_dev_matmul_t {
  bool ta, tb;
  int64_t M, N, K;
} ty_dev_matmul_t;
ty_dev_matmul_t ty_dev_matmul_of(const ty_dev_build_t *b);

/* ---- for the backend's own command list ---- */

/* Grows the array *items (of *count entries of `size` bytes, room for *cap,
 * doubling from 64) by one zeroed entry and returns it; NULL after an
 * earlier error, or failing the build with RESOURCE_EXHAUSTED. */
void *ty_dev_push(ty_dev_build_t *b, void **items, uint32_t *count, uint32_t *cap, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_DEVICE_OPS_H_ */
