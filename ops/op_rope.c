/* Rotary position embeddings (rope) in the rotate-half layout of Hugging
 * Face checkpoints, with default or llama3 frequency scaling, and the
 * inverse rotation as rope_backward. */
#include <string.h>

#include "ops/op_internal.h"

static const char *const ty_rope_attrs[] = {
    "theta", "scaling", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position", NULL};

static ty_status_t ty_rope_check_positive(const char *op, const char *name,
                                          double value) {
  if (value > 0) return TY_OK;
  return ty_op_error(op, "attribute '%s' = %g must be > 0", name, value);
}

/* Validates the attributes shared by rope and rope_backward. */
static ty_status_t ty_rope_check_attrs(const char *op, const ty_attrs_t *attrs) {
  double theta, factor, low, high;
  int64_t original;
  const char *scaling;
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "theta", 10000.0, &theta));
  TY_RETURN_IF_ERROR(ty_op_attr_string(op, attrs, "scaling", "default", &scaling));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "factor", 1.0, &factor));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "low_freq_factor", 1.0, &low));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "high_freq_factor", 4.0, &high));
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "original_max_position", 8192,
                                    &original));
  TY_RETURN_IF_ERROR(ty_rope_check_positive(op, "theta", theta));
  TY_RETURN_IF_ERROR(ty_rope_check_positive(op, "factor", factor));
  TY_RETURN_IF_ERROR(ty_rope_check_positive(op, "low_freq_factor", low));
  TY_RETURN_IF_ERROR(ty_rope_check_positive(op, "high_freq_factor", high));
  TY_RETURN_IF_ERROR(
      ty_rope_check_positive(op, "original_max_position", (double)original));
  if (strcmp(scaling, "default") == 0) return TY_OK;
  if (strcmp(scaling, "llama3") != 0) {
    return ty_op_error(op,
                       "attribute 'scaling' = '%s' is unknown (expected "
                       "'default' or 'llama3')",
                       scaling);
  }
  /* llama3 interpolates between the two wavelength bounds, dividing by
   * high_freq_factor - low_freq_factor. */
  if (high <= low) {
    return ty_op_error(op,
                       "scaling='llama3' needs high_freq_factor (%g) > "
                       "low_freq_factor (%g)",
                       high, low);
  }
  return TY_OK;
}

/* rope(x, positions) and rope_backward(dy, positions) share one rule. */
static ty_status_t ty_rope_infer_named(const ty_op_infer_ctx_t *ctx,
                                       const char *x_role) {
  const ty_tensor_desc_t *x, *pos;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, x_role, &x));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "positions", &pos));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, x_role, x));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, x_role, x, 4));
  if (x->dims[3] % 2 != 0) {
    return ty_op_error(ctx->op,
                       "%s is %s: the head dimension D = %lld must be even "
                       "(rotate-half pairs j with j + D/2)",
                       x_role, TY_DESC(x), (long long)x->dims[3]);
  }
  TY_RETURN_IF_ERROR(ty_op_check_int(ctx->op, "positions", pos));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "positions", pos, 1,
                                       &x->dims[1], "[T], T from [B, T, H, D]"));
  TY_RETURN_IF_ERROR(ty_rope_check_attrs(ctx->op, ctx->attrs));
  return ty_op_output_like(ctx, x);
}

static ty_status_t ty_rope_infer(const ty_op_infer_ctx_t *ctx) {
  return ty_rope_infer_named(ctx, "x");
}

static ty_status_t ty_rope_backward_infer(const ty_op_infer_ctx_t *ctx) {
  return ty_rope_infer_named(ctx, "dy");
}

/* The rotation is orthogonal, so dx is dy rotated back by the same angles. */
static ty_status_t ty_rope_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_value_id_t ins[2] = {dy, ctx->inputs[1]};
  return ty_grad_emit1(ctx, "rope_backward", ins, 2, ctx->attrs,
                       &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_rope = {
    .name = "rope", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_rope_attrs, .infer = ty_rope_infer,
    .grad = ty_rope_grad,
    .summary = "rotary position embedding of x[B,T,H,D] at positions[T]"};
const ty_op_def_t ty_op_def_rope_backward = {
    .name = "rope_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_rope_attrs, .infer = ty_rope_backward_infer,
    .grad = NULL, .summary = "dx of rope: dy rotated back by the same angles"};
