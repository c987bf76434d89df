/* Helpers shared by the op family files: messages, input and attribute
 * checks for inference, broadcasting, axes, and the small emitters gradient
 * rules are built from. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops/op_internal.h"

const char *const ty_op_no_attrs[] = {NULL};

/* ---- Formatting. ---- */

ty_op_str_t ty_op_desc_str(const ty_tensor_desc_t *desc) {
  ty_op_str_t out;
  if (!desc) {
    snprintf(out.s, sizeof(out.s), "(absent)");
  } else {
    ty_tensor_desc_format(desc, out.s, sizeof(out.s));
  }
  return out;
}

ty_op_str_t ty_op_dims_str(uint32_t rank, const int64_t *dims) {
  ty_op_str_t out;
  size_t used = 0;
  out.s[used++] = '[';
  for (uint32_t i = 0; i < rank && used < sizeof(out.s); ++i) {
    int n = snprintf(out.s + used, sizeof(out.s) - used, "%s%lld",
                     i ? "," : "", (long long)dims[i]);
    if (n < 0) break;
    used += (size_t)n;
  }
  if (used < sizeof(out.s) - 1) {
    out.s[used++] = ']';
    out.s[used] = '\0';
  } else {
    out.s[sizeof(out.s) - 1] = '\0';
  }
  return out;
}

ty_status_t ty_op_error(const char *op, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  ty_status_t status = ty_status_makev(TY_CODE_INVALID_ARGUMENT, fmt, args);
  va_end(args);
  return ty_status_annotate(status, "%s", op);
}

/* ---- Inference. ---- */

const ty_tensor_desc_t *ty_op_in(const ty_op_infer_ctx_t *ctx, uint32_t index) {
  return index < ctx->input_count ? ctx->inputs[index] : NULL;
}

ty_status_t ty_op_need(const ty_op_infer_ctx_t *ctx, uint32_t index,
                       const char *role, const ty_tensor_desc_t **out_desc) {
  *out_desc = ty_op_in(ctx, index);
  if (!*out_desc) {
    return ty_op_error(ctx->op, "%s (input %u) is required but absent", role,
                       index);
  }
  return TY_OK;
}

ty_status_t ty_op_check_float(const char *op, const char *role,
                              const ty_tensor_desc_t *d) {
  if (ty_dtype_is_float(d->dtype)) return TY_OK;
  return ty_op_error(op, "%s is %s: expected a float dtype (f32, bf16, f16, f64)",
                     role, TY_DESC(d));
}

ty_status_t ty_op_check_int(const char *op, const char *role,
                            const ty_tensor_desc_t *d) {
  if (d->dtype == TY_DTYPE_I32 || d->dtype == TY_DTYPE_I64) return TY_OK;
  return ty_op_error(op, "%s is %s: expected an int dtype (i32, i64)", role,
                     TY_DESC(d));
}

ty_status_t ty_op_check_dtype(const char *op, const char *role,
                              const ty_tensor_desc_t *d, ty_dtype_t dtype) {
  if (d->dtype == dtype) return TY_OK;
  return ty_op_error(op, "%s is %s: expected dtype %s", role, TY_DESC(d),
                     ty_dtype_name(dtype));
}

ty_status_t ty_op_check_same_dtype(const char *op, const char *role,
                                   const ty_tensor_desc_t *d,
                                   const char *ref_role,
                                   const ty_tensor_desc_t *ref) {
  if (d->dtype == ref->dtype) return TY_OK;
  return ty_op_error(op, "%s is %s but %s is %s: dtypes must match", role,
                     TY_DESC(d), ref_role, TY_DESC(ref));
}

ty_status_t ty_op_check_rank(const char *op, const char *role,
                             const ty_tensor_desc_t *d, uint32_t rank) {
  if (d->rank == rank) return TY_OK;
  return ty_op_error(op, "%s is %s: expected rank %u, got %u", role,
                     TY_DESC(d), rank, d->rank);
}

ty_status_t ty_op_check_min_rank(const char *op, const char *role,
                                 const ty_tensor_desc_t *d, uint32_t min_rank) {
  if (d->rank >= min_rank) return TY_OK;
  return ty_op_error(op, "%s is %s: expected rank >= %u, got %u", role,
                     TY_DESC(d), min_rank, d->rank);
}

static bool ty_op_same_dims(const ty_tensor_desc_t *d, uint32_t rank,
                            const int64_t *dims) {
  if (d->rank != rank) return false;
  for (uint32_t i = 0; i < rank; ++i) {
    if (d->dims[i] != dims[i]) return false;
  }
  return true;
}

ty_status_t ty_op_check_like(const char *op, const char *role,
                             const ty_tensor_desc_t *d, const char *ref_role,
                             const ty_tensor_desc_t *ref) {
  if (d->dtype == ref->dtype && ty_op_same_dims(d, ref->rank, ref->dims)) {
    return TY_OK;
  }
  return ty_op_error(op, "%s is %s but %s is %s: expected the same dtype and shape",
                     role, TY_DESC(d), ref_role, TY_DESC(ref));
}

ty_status_t ty_op_check_shape(const char *op, const char *role,
                              const ty_tensor_desc_t *d, uint32_t rank,
                              const int64_t *dims, const char *why) {
  if (ty_op_same_dims(d, rank, dims)) return TY_OK;
  return ty_op_error(op, "%s is %s: expected shape %s (%s)", role, TY_DESC(d),
                     TY_DIMS(rank, dims), why);
}

ty_status_t ty_op_check_scalar(const char *op, const char *role,
                               const ty_tensor_desc_t *d, ty_dtype_t dtype) {
  if (d->rank == 0 && d->dtype == dtype) return TY_OK;
  return ty_op_error(op, "%s is %s: expected a scalar %s[]", role, TY_DESC(d),
                     ty_dtype_name(dtype));
}

ty_dtype_t ty_op_stat_dtype(ty_dtype_t x) {
  return x == TY_DTYPE_F64 ? TY_DTYPE_F64 : TY_DTYPE_F32;
}

bool ty_op_broadcast_dims(uint32_t a_rank, const int64_t *a_dims,
                          uint32_t b_rank, const int64_t *b_dims,
                          uint32_t *out_rank, int64_t *out_dims) {
  uint32_t rank = a_rank > b_rank ? a_rank : b_rank;
  for (uint32_t i = 0; i < rank; ++i) {
    /* Right-aligned: axis i of the result is axis i - (rank - r) of each. */
    int64_t a = i + a_rank >= rank ? a_dims[i + a_rank - rank] : 1;
    int64_t b = i + b_rank >= rank ? b_dims[i + b_rank - rank] : 1;
    if (a != b && a != 1 && b != 1) return false;
    out_dims[i] = a == 1 ? b : a;
  }
  *out_rank = rank;
  return true;
}

ty_status_t ty_op_axes_mask(const char *op, const char *role,
                            const ty_tensor_desc_t *d, const int64_t *axes,
                            uint32_t count, uint32_t *out_mask) {
  *out_mask = 0;
  if (count == 0) {
    *out_mask = d->rank ? (uint32_t)((1u << d->rank) - 1u) : 0u;
    return TY_OK;
  }
  for (uint32_t i = 0; i < count; ++i) {
    int64_t axis = axes[i] < 0 ? axes[i] + (int64_t)d->rank : axes[i];
    if (axis < 0 || axis >= (int64_t)d->rank) {
      return ty_op_error(op, "axis %lld is out of range for %s %s (rank %u)",
                         (long long)axes[i], role, TY_DESC(d), d->rank);
    }
    if (*out_mask & (1u << axis)) {
      return ty_op_error(op, "axes %s name axis %lld twice (%s is %s)",
                         TY_DIMS(count, axes), (long long)axis, role,
                         TY_DESC(d));
    }
    *out_mask |= 1u << axis;
  }
  return TY_OK;
}

ty_status_t ty_op_output(const ty_op_infer_ctx_t *ctx, ty_dtype_t dtype,
                         uint32_t rank, const int64_t *dims) {
  if (*ctx->out_count >= TY_OP_MAX_OUTPUTS) {
    return ty_op_error(ctx->op, "more than %d outputs", TY_OP_MAX_OUTPUTS);
  }
  ty_status_t status = ty_tensor_desc_init(dtype, rank, dims, NULL,
                                           &ctx->outputs[*ctx->out_count]);
  if (status) return ty_status_annotate(status, "%s: output %u", ctx->op,
                                        *ctx->out_count);
  ++*ctx->out_count;
  return TY_OK;
}

ty_status_t ty_op_output_like(const ty_op_infer_ctx_t *ctx,
                              const ty_tensor_desc_t *d) {
  return ty_op_output(ctx, d->dtype, d->rank, d->dims);
}

/* ---- Attributes. ---- */

ty_status_t ty_op_attr_require(const char *op, const ty_attrs_t *attrs,
                               const char *name) {
  if (ty_attrs_find(attrs, name)) return TY_OK;
  return ty_op_error(op, "attribute '%s' is required", name);
}

ty_status_t ty_op_attr_int(const char *op, const ty_attrs_t *attrs,
                           const char *name, int64_t default_value,
                           int64_t *out_value) {
  return ty_status_annotate(
      ty_attrs_get_int(attrs, name, default_value, out_value), "%s", op);
}

ty_status_t ty_op_attr_flag(const char *op, const ty_attrs_t *attrs,
                            const char *name, int64_t default_value,
                            bool *out_value) {
  int64_t v;
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, name, default_value, &v));
  *out_value = v != 0;
  if (v == 0 || v == 1) return TY_OK;
  return ty_op_error(op, "attribute '%s' = %lld must be 0 or 1", name,
                     (long long)v);
}

ty_status_t ty_op_attr_float(const char *op, const ty_attrs_t *attrs,
                             const char *name, double default_value,
                             double *out_value) {
  TY_RETURN_IF_ERROR(ty_status_annotate(
      ty_attrs_get_float(attrs, name, default_value, out_value), "%s", op));
  if (isfinite(*out_value)) return TY_OK;
  return ty_op_error(op, "attribute '%s' = %g must be finite", name,
                     *out_value);
}

ty_status_t ty_op_attr_string(const char *op, const ty_attrs_t *attrs,
                              const char *name, const char *default_value,
                              const char **out_value) {
  return ty_status_annotate(
      ty_attrs_get_string(attrs, name, default_value, out_value), "%s", op);
}

ty_status_t ty_op_attr_ints(const char *op, const ty_attrs_t *attrs,
                            const char *name, const int64_t **out_values,
                            uint32_t *out_count) {
  *out_values = NULL;
  *out_count = 0;
  TY_RETURN_IF_ERROR(ty_op_attr_require(op, attrs, name));
  return ty_status_annotate(
      ty_attrs_get_ints(attrs, name, out_values, out_count), "%s", op);
}

/* ---- Gradient rules. ---- */

void ty_grad_clear(const ty_grad_ctx_t *ctx) {
  for (uint32_t i = 0; i < ctx->input_count; ++i) {
    ctx->input_grads[i] = TY_VALUE_NONE;
  }
}

const ty_tensor_desc_t *ty_grad_desc(const ty_grad_ctx_t *ctx,
                                     ty_value_id_t value) {
  return value == TY_VALUE_NONE ? NULL : ctx->desc(ctx->builder, value);
}

const ty_tensor_desc_t *ty_grad_input_desc(const ty_grad_ctx_t *ctx,
                                           uint32_t index) {
  return index < ctx->input_count ? ty_grad_desc(ctx, ctx->inputs[index])
                                  : NULL;
}

bool ty_grad_wants(const ty_grad_ctx_t *ctx, uint32_t index) {
  if (index >= ctx->input_count || !ctx->wants_input_grad[index]) return false;
  const ty_tensor_desc_t *d = ty_grad_input_desc(ctx, index);
  return d && ty_dtype_is_float(d->dtype);
}

bool ty_grad_wants_any(const ty_grad_ctx_t *ctx) {
  for (uint32_t i = 0; i < ctx->input_count; ++i) {
    if (ty_grad_wants(ctx, i)) return true;
  }
  return false;
}

ty_status_t ty_grad_check_saved_outputs(const ty_grad_ctx_t *ctx) {
  for (uint32_t j = 1; j < ctx->output_count; ++j) {
    if (ctx->output_grads[j] != TY_VALUE_NONE) {
      return ty_op_error(ctx->op,
                         "output %u is saved for the backward and is not "
                         "differentiable, but a gradient flows into it",
                         j);
    }
  }
  return TY_OK;
}

ty_status_t ty_grad_emit(const ty_grad_ctx_t *ctx, const char *op,
                         const ty_value_id_t *inputs, uint32_t input_count,
                         const ty_attrs_t *attrs, ty_value_id_t *out_outputs,
                         uint32_t out_count) {
  return ty_status_annotate(ctx->emit(ctx->builder, op, inputs, input_count,
                                      attrs, out_outputs, out_count),
                            "gradient of %s", ctx->op);
}

ty_status_t ty_grad_emit1(const ty_grad_ctx_t *ctx, const char *op,
                          const ty_value_id_t *inputs, uint32_t input_count,
                          const ty_attrs_t *attrs, ty_value_id_t *out_value) {
  return ty_grad_emit(ctx, op, inputs, input_count, attrs, out_value, 1);
}

static ty_status_t ty_grad_shape_op(const ty_grad_ctx_t *ctx, const char *op,
                                    ty_value_id_t value, uint32_t rank,
                                    const int64_t *dims,
                                    ty_value_id_t *out_value) {
  const ty_tensor_desc_t *d = ty_grad_desc(ctx, value);
  if (d && ty_op_same_dims(d, rank, dims)) {
    *out_value = value;
    return TY_OK;
  }
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "shape", dims, rank));
  return ty_grad_emit1(ctx, op, &value, 1, &attrs, out_value);
}

ty_status_t ty_grad_reshape(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                            uint32_t rank, const int64_t *dims,
                            ty_value_id_t *out_value) {
  return ty_grad_shape_op(ctx, "reshape", value, rank, dims, out_value);
}

ty_status_t ty_grad_broadcast(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                              uint32_t rank, const int64_t *dims,
                              ty_value_id_t *out_value) {
  return ty_grad_shape_op(ctx, "broadcast_to", value, rank, dims, out_value);
}

ty_status_t ty_grad_scale(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                          double alpha, ty_value_id_t *out_value) {
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&attrs, "alpha", alpha));
  return ty_grad_emit1(ctx, "scale", &value, 1, &attrs, out_value);
}

ty_status_t ty_grad_sum_to(const ty_grad_ctx_t *ctx, ty_value_id_t value,
                           const ty_tensor_desc_t *target,
                           ty_value_id_t *out_value) {
  /* A copy: `target` may point into the graph, which the reduce_sum
   * emitted below can move. */
  const ty_tensor_desc_t t = *target;
  const ty_tensor_desc_t *d = ty_grad_desc(ctx, value);
  if (!d || d->rank < t.rank) {
    return ty_op_error(ctx->op, "cannot sum gradient %s to shape %s",
                       TY_DESC(d), TY_DESC(&t));
  }
  /* The axes broadcasting added: every leading axis target lacks, and every
   * axis where target has 1 and the gradient does not. */
  int64_t axes[TY_TENSOR_MAX_RANK];
  uint32_t count = 0;
  uint32_t lead = d->rank - t.rank;
  for (uint32_t i = 0; i < d->rank; ++i) {
    if (i < lead || (t.dims[i - lead] == 1 && d->dims[i] != 1)) {
      axes[count++] = i;
    }
  }
  ty_value_id_t summed = value;
  if (count > 0) { /* never an empty list: reduce_sum reads it as "all" */
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "axes", axes, count));
    TY_RETURN_IF_ERROR(
        ty_grad_emit1(ctx, "reduce_sum", &value, 1, &attrs, &summed));
  }
  return ty_grad_reshape(ctx, summed, t.rank, t.dims, out_value);
}

ty_status_t ty_grad_unary_companion(const ty_grad_ctx_t *ctx,
                                    const char *backward, ty_value_id_t saved) {
  ty_grad_clear(ctx);
  TY_RETURN_IF_ERROR(ty_grad_check_saved_outputs(ctx));
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_value_id_t ins[2] = {dy, saved};
  return ty_grad_emit1(ctx, backward, ins, 2, ctx->attrs, &ctx->input_grads[0]);
}
