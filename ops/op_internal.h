/* Helpers shared by the op family files (ops/op_*.c): error messages in the
 * house format, input and attribute checks for inference, broadcasting and
 * axis normalization, and small emitters for gradient rules. Internal to
 * ty_ops; nothing outside ops/ includes it. */
#ifndef TY_OPS_OP_INTERNAL_H_
#define TY_OPS_OP_INTERNAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/dtype.h"
#include "hal/status.h"
#include "hal/tensor.h"
#include "ops/attrs.h"
#include "ops/op.h"

/* ---- Op definitions, one per op, defined in the family files. ---- */
extern const ty_op_def_t ty_op_def_embedding, ty_op_def_embedding_backward;
extern const ty_op_def_t ty_op_def_matmul;
extern const ty_op_def_t ty_op_def_add, ty_op_def_sub, ty_op_def_mul,
    ty_op_def_div, ty_op_def_scale, ty_op_def_broadcast_to;
extern const ty_op_def_t ty_op_def_reduce_sum, ty_op_def_reduce_mean,
    ty_op_def_reduce_sumsq;
extern const ty_op_def_t ty_op_def_layernorm, ty_op_def_layernorm_backward,
    ty_op_def_rmsnorm, ty_op_def_rmsnorm_backward;
extern const ty_op_def_t ty_op_def_gelu, ty_op_def_gelu_backward,
    ty_op_def_silu, ty_op_def_silu_backward, ty_op_def_swiglu,
    ty_op_def_swiglu_backward, ty_op_def_softmax, ty_op_def_softmax_backward;
extern const ty_op_def_t ty_op_def_rope, ty_op_def_rope_backward;
extern const ty_op_def_t ty_op_def_attention, ty_op_def_attention_backward,
    ty_op_def_attention_merge, ty_op_def_attention_merge_backward;
extern const ty_op_def_t ty_op_def_cross_entropy,
    ty_op_def_cross_entropy_backward, ty_op_def_linear_cross_entropy,
    ty_op_def_linear_cross_entropy_backward;
extern const ty_op_def_t ty_op_def_dropout, ty_op_def_dropout_backward;
extern const ty_op_def_t ty_op_def_cast, ty_op_def_reshape,
    ty_op_def_transpose, ty_op_def_slice, ty_op_def_slice_backward,
    ty_op_def_concat;
extern const ty_op_def_t ty_op_def_adamw_update, ty_op_def_sgd_update,
    ty_op_def_adafactor_update, ty_op_def_clip_by_global_norm, ty_op_def_global_norm_scale;
extern const ty_op_def_t ty_op_def_kv_cache_write;
extern const ty_op_def_t ty_op_def_paged_kv_write, ty_op_def_paged_attention;
extern const ty_op_def_t ty_op_def_sample, ty_op_def_top_logprobs;
extern const ty_op_def_t ty_op_def_all_reduce;
extern const ty_op_def_t ty_op_def_all_gather;
extern const ty_op_def_t ty_op_def_reduce_scatter;
extern const ty_op_def_t ty_op_def_tp_copy;
extern const ty_op_def_t ty_op_def_tp_reduce;
extern const ty_op_def_t ty_op_def_vocab_embedding, ty_op_def_vocab_embedding_backward,
    ty_op_def_vocab_max, ty_op_def_vocab_max_backward, ty_op_def_vocab_ce_sums, ty_op_def_vocab_ce_sums_backward,
    ty_op_def_vocab_ce_loss, ty_op_def_vocab_ce_loss_backward;

/* The attribute list of ops that take none. */
extern const char *const ty_op_no_attrs[];

/* ---- Formatting. ---- */

/* A descriptor formatted as "f32[2,3]" ("(absent)" for NULL), returned by
 * value so it can sit in a printf argument list: the array lives until the
 * end of the enclosing full expression (C11 6.2.4p8). */
typedef struct ty_op_str_t {
  char s[200];
} ty_op_str_t;
ty_op_str_t ty_op_desc_str(const ty_tensor_desc_t *desc);
/* "[2,-1,3]" for a dimension or attribute list. */
ty_op_str_t ty_op_dims_str(uint32_t rank, const int64_t *dims);
#define TY_DESC(d) (ty_op_desc_str(d).s)
#define TY_DIMS(rank, dims) (ty_op_dims_str((rank), (dims)).s)

/* INVALID_ARGUMENT "<op>: <message>". */
ty_status_t ty_op_error(const char *op, const char *fmt, ...)
    TY_PRINTF_ATTR(2, 3) TY_MUST_USE;

/* ---- Inference: inputs and their checks. ---- */

/* Input `index`, or NULL when it is absent (or beyond input_count). */
const ty_tensor_desc_t *ty_op_in(const ty_op_infer_ctx_t *ctx, uint32_t index);
/* Input `index`, which must be present; `role` names it in the error. */
ty_status_t ty_op_need(const ty_op_infer_ctx_t *ctx, uint32_t index,
                       const char *role, const ty_tensor_desc_t **out_desc);

/* Each check returns INVALID_ARGUMENT "<op>: <role> is <desc>: <rule>". */
ty_status_t ty_op_check_float(const char *op, const char *role,
                              const ty_tensor_desc_t *d);
ty_status_t ty_op_check_int(const char *op, const char *role,
                            const ty_tensor_desc_t *d);
ty_status_t ty_op_check_dtype(const char *op, const char *role,
                              const ty_tensor_desc_t *d, ty_dtype_t dtype);
/* `d` must have the dtype of `ref` (named `ref_role`). */
ty_status_t ty_op_check_same_dtype(const char *op, const char *role,
                                   const ty_tensor_desc_t *d,
                                   const char *ref_role,
                                   const ty_tensor_desc_t *ref);
ty_status_t ty_op_check_rank(const char *op, const char *role,
                             const ty_tensor_desc_t *d, uint32_t rank);
ty_status_t ty_op_check_min_rank(const char *op, const char *role,
                                 const ty_tensor_desc_t *d, uint32_t min_rank);
/* `d` must have the dtype and shape of `ref`. */
ty_status_t ty_op_check_like(const char *op, const char *role,
                             const ty_tensor_desc_t *d, const char *ref_role,
                             const ty_tensor_desc_t *ref);
/* `d` must have shape `dims`; `why` says where that shape comes from. */
ty_status_t ty_op_check_shape(const char *op, const char *role,
                              const ty_tensor_desc_t *d, uint32_t rank,
                              const int64_t *dims, const char *why);
/* `d` must be a rank-0 tensor of `dtype`. */
ty_status_t ty_op_check_scalar(const char *op, const char *role,
                               const ty_tensor_desc_t *d, ty_dtype_t dtype);

/* The dtype of saved statistics and per-token losses for float dtype `x`:
 * f32, or f64 when x is f64 (so f64 gradient checks keep full precision). */
ty_dtype_t ty_op_stat_dtype(ty_dtype_t x);

/* Numpy broadcasting of two shapes; false when they do not broadcast. */
bool ty_op_broadcast_dims(uint32_t a_rank, const int64_t *a_dims,
                          uint32_t b_rank, const int64_t *b_dims,
                          uint32_t *out_rank, int64_t *out_dims);

/* Normalizes `axes` (negative counts from the end) for a tensor of `rank`
 * into a bit mask; an empty list means every axis. Errors on an axis out of
 * range or repeated, naming the op and `role`'s descriptor `d`. */
ty_status_t ty_op_axes_mask(const char *op, const char *role,
                            const ty_tensor_desc_t *d, const int64_t *axes,
                            uint32_t count, uint32_t *out_mask);

/* OK when the `group` attribute (default `fallback`) names a process group
 * of the rank layout (op_collective.c). */
ty_status_t ty_collective_group(const ty_op_infer_ctx_t *ctx, const char *fallback);

/* Appends an output descriptor. */
ty_status_t ty_op_output(const ty_op_infer_ctx_t *ctx, ty_dtype_t dtype,
                         uint32_t rank, const int64_t *dims);
ty_status_t ty_op_output_like(const ty_op_infer_ctx_t *ctx,
                              const ty_tensor_desc_t *d);

/* ---- Attributes (errors name the op). ---- */

/* INVALID_ARGUMENT when `name` is absent. */
ty_status_t ty_op_attr_require(const char *op, const ty_attrs_t *attrs,
                               const char *name);
ty_status_t ty_op_attr_int(const char *op, const ty_attrs_t *attrs,
                           const char *name, int64_t default_value,
                           int64_t *out_value);
/* An int attribute that must be 0 or 1. */
ty_status_t ty_op_attr_flag(const char *op, const ty_attrs_t *attrs,
                            const char *name, int64_t default_value,
                            bool *out_value);
/* A float attribute that must be finite. */
ty_status_t ty_op_attr_float(const char *op, const ty_attrs_t *attrs,
                             const char *name, double default_value,
                             double *out_value);
ty_status_t ty_op_attr_string(const char *op, const ty_attrs_t *attrs,
                              const char *name, const char *default_value,
                              const char **out_value);
/* A required int list. */
ty_status_t ty_op_attr_ints(const char *op, const ty_attrs_t *attrs,
                            const char *name, const int64_t **out_values,
                            uint32_t *out_count);

/* ---- Gradient rules. ---- */

/* Sets every input gradient to TY_VALUE_NONE. Rules call it first. */
void ty_grad_clear(const ty_grad_ctx_t *ctx);
/* Whether input `index` gets a gradient: asked for, present and float
 * (integer inputs such as token ids never receive one). */
bool ty_grad_wants(const ty_grad_ctx_t *ctx, uint32_t index);
/* Whether any input gets one. */
bool ty_grad_wants_any(const ty_grad_ctx_t *ctx);
/* Descriptors of values; like ctx->desc, valid only until the next emit. */
const ty_tensor_desc_t *ty_grad_desc(const ty_grad_ctx_t *ctx,
                                     ty_value_id_t value);
const ty_tensor_desc_t *ty_grad_input_desc(const ty_grad_ctx_t *ctx,
                                           uint32_t index);
/* For ops whose outputs after the first are saved for the backward (norm
 * statistics, attention's lse): INVALID_ARGUMENT if a gradient flows into
 * one of them, since the companion backward does not take it. */
ty_status_t ty_grad_check_saved_outputs(const ty_grad_ctx_t *ctx);

/* Emits `op`; errors are prefixed with the op whose gradient is built. */
ty_status_t ty_grad_emit(const ty_grad_ctx_t *ctx, const char *op,
                         const ty_value_id_t *inputs, uint32_t input_count,
                         const ty_attrs_t *attrs, ty_value_id_t *out_outputs,
                         uint32_t out_count);
ty_status_t ty_grad_emit1(const ty_grad_ctx_t *ctx, const char *op,
                          const ty_value_id_t *inputs, uint32_t input_count,
                          const ty_attrs_t *attrs, ty_value_id_t *out_value);
/* reshape, skipped when `value` already has that shape. */
ty_status_t ty_grad_reshape(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                            uint32_t rank, const int64_t *dims,
                            ty_value_id_t *out_value);
/* broadcast_to, skipped when `value` already has that shape. */
ty_status_t ty_grad_broadcast(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                              uint32_t rank, const int64_t *dims,
                              ty_value_id_t *out_value);
ty_status_t ty_grad_scale(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                          double alpha, ty_value_id_t *out_value);
/* Sums `value` (a gradient of a broadcast result) back to `target`'s shape:
 * reduce_sum over the broadcast axes, then reshape. */
ty_status_t ty_grad_sum_to(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                           const ty_tensor_desc_t *target,
                           ty_value_id_t *out_value);
/* For unary ops y = f(x) with a backward companion `backward(dy, x)`. */
ty_status_t ty_grad_unary_companion(const ty_grad_ctx_t *ctx,
                                    const char *backward, ty_value_id_t saved);

#endif /* TY_OPS_OP_INTERNAL_H_ */
