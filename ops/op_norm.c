/* layernorm and rmsnorm over the last axis, with their backward companions.
 * The forward ops also output the per-row statistics (mean, rstd) the
 * backward needs; those are f32 (f64 for f64 x) whatever x's dtype. */
#include "ops/op_internal.h"

static const char *const ty_layernorm_attrs[] = {"eps", NULL};

/* Checks an optional per-channel parameter ([C], x's dtype). */
static ty_status_t ty_norm_check_param(const char *op, const char *role,
                                       const ty_tensor_desc_t *p,
                                       const ty_tensor_desc_t *x) {
  if (!p) return TY_OK;
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(op, role, p, "x", x));
  return ty_op_check_shape(op, role, p, 1, &x->dims[x->rank - 1],
                           "C, the last dimension of x");
}

/* Checks a saved statistic: x's shape without the last axis, stat dtype. */
static ty_status_t ty_norm_check_stat(const char *op, const char *role,
                                      const ty_tensor_desc_t *s,
                                      const ty_tensor_desc_t *x) {
  TY_RETURN_IF_ERROR(ty_op_check_dtype(op, role, s, ty_op_stat_dtype(x->dtype)));
  return ty_op_check_shape(op, role, s, x->rank - 1, x->dims,
                           "x's shape without its last dimension");
}

static ty_status_t ty_norm_check_x(const char *op, const ty_tensor_desc_t *x) {
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "x", x));
  return ty_op_check_min_rank(op, "x", x, 1);
}

static ty_status_t ty_norm_check_eps(const char *op, const ty_attrs_t *attrs,
                                     double default_eps) {
  double eps;
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "eps", default_eps, &eps));
  if (eps >= 0) return TY_OK;
  return ty_op_error(op, "attribute 'eps' = %g must be >= 0", eps);
}

/* Appends the statistics outputs: `count` tensors shaped like x[:-1]. */
static ty_status_t ty_norm_output_stats(const ty_op_infer_ctx_t *ctx,
                                        const ty_tensor_desc_t *x,
                                        uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    TY_RETURN_IF_ERROR(
        ty_op_output(ctx, ty_op_stat_dtype(x->dtype), x->rank - 1, x->dims));
  }
  return TY_OK;
}

static ty_status_t ty_layernorm_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_norm_check_x(ctx->op, x));
  TY_RETURN_IF_ERROR(ty_norm_check_param(ctx->op, "gamma", ty_op_in(ctx, 1), x));
  TY_RETURN_IF_ERROR(ty_norm_check_param(ctx->op, "beta", ty_op_in(ctx, 2), x));
  TY_RETURN_IF_ERROR(ty_norm_check_eps(ctx->op, ctx->attrs, 1e-5));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, x));
  return ty_norm_output_stats(ctx, x, 2); /* mean, rstd */
}

/* layernorm_backward(dy, x, gamma?, mean, rstd) -> dx, dgamma, dbeta */
static ty_status_t ty_layernorm_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dy, *x, *mean, *rstd;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dy", &dy));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 3, "mean", &mean));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 4, "rstd", &rstd));
  TY_RETURN_IF_ERROR(ty_norm_check_x(ctx->op, x));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dy", dy, "x", x));
  TY_RETURN_IF_ERROR(ty_norm_check_param(ctx->op, "gamma", ty_op_in(ctx, 2), x));
  TY_RETURN_IF_ERROR(ty_norm_check_stat(ctx->op, "mean", mean, x));
  TY_RETURN_IF_ERROR(ty_norm_check_stat(ctx->op, "rstd", rstd, x));
  const int64_t *c = &x->dims[x->rank - 1];
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, x));
  TY_RETURN_IF_ERROR(ty_op_output(ctx, x->dtype, 1, c)); /* dgamma */
  return ty_op_output(ctx, x->dtype, 1, c);              /* dbeta */
}

/* Runs `backward` once for every wanted input; the companion's outputs are
 * in the forward op's input order (dx, dgamma[, dbeta]). */
static ty_status_t ty_norm_grad(const ty_grad_ctx_t *ctx, const char *backward,
                                const ty_value_id_t *ins, uint32_t in_count,
                                uint32_t out_count) {
  ty_value_id_t outs[3];
  TY_RETURN_IF_ERROR(ty_grad_emit(ctx, backward, ins, in_count, NULL, outs,
                                  out_count));
  for (uint32_t i = 0; i < out_count; ++i) {
    if (ty_grad_wants(ctx, i)) ctx->input_grads[i] = outs[i];
  }
  return TY_OK;
}

static ty_status_t ty_layernorm_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  TY_RETURN_IF_ERROR(ty_grad_check_saved_outputs(ctx));
  if (ctx->output_grads[0] == TY_VALUE_NONE || !ty_grad_wants_any(ctx)) {
    return TY_OK;
  }
  const ty_value_id_t gamma =
      ctx->input_count > 1 ? ctx->inputs[1] : TY_VALUE_NONE;
  const ty_value_id_t ins[5] = {ctx->output_grads[0], ctx->inputs[0], gamma,
                                ctx->outputs[1], ctx->outputs[2]};
  return ty_norm_grad(ctx, "layernorm_backward", ins, 5, 3);
}

const ty_op_def_t ty_op_def_layernorm = {
    .name = "layernorm", .min_inputs = 1, .max_inputs = 3,
    .attr_names = ty_layernorm_attrs, .infer = ty_layernorm_infer,
    .grad = ty_layernorm_grad,
    .summary = "y = (x - mean) * rstd * gamma + beta over the last axis"};
const ty_op_def_t ty_op_def_layernorm_backward = {
    .name = "layernorm_backward", .min_inputs = 5, .max_inputs = 5,
    .attr_names = ty_op_no_attrs, .infer = ty_layernorm_backward_infer,
    .grad = NULL,
    .summary = "dx, dgamma, dbeta of layernorm from dy and the saved mean, rstd"};

/* ---- rmsnorm ---- */

static ty_status_t ty_rmsnorm_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_norm_check_x(ctx->op, x));
  TY_RETURN_IF_ERROR(ty_norm_check_param(ctx->op, "gamma", ty_op_in(ctx, 1), x));
  TY_RETURN_IF_ERROR(ty_norm_check_eps(ctx->op, ctx->attrs, 1e-6));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, x));
  return ty_norm_output_stats(ctx, x, 1); /* rstd */
}

/* rmsnorm_backward(dy, x, gamma?, rstd) -> dx, dgamma */
static ty_status_t ty_rmsnorm_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dy, *x, *rstd;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dy", &dy));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 3, "rstd", &rstd));
  TY_RETURN_IF_ERROR(ty_norm_check_x(ctx->op, x));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dy", dy, "x", x));
  TY_RETURN_IF_ERROR(ty_norm_check_param(ctx->op, "gamma", ty_op_in(ctx, 2), x));
  TY_RETURN_IF_ERROR(ty_norm_check_stat(ctx->op, "rstd", rstd, x));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, x));
  return ty_op_output(ctx, x->dtype, 1, &x->dims[x->rank - 1]); /* dgamma */
}

static ty_status_t ty_rmsnorm_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  TY_RETURN_IF_ERROR(ty_grad_check_saved_outputs(ctx));
  if (ctx->output_grads[0] == TY_VALUE_NONE || !ty_grad_wants_any(ctx)) {
    return TY_OK;
  }
  const ty_value_id_t gamma =
      ctx->input_count > 1 ? ctx->inputs[1] : TY_VALUE_NONE;
  const ty_value_id_t ins[4] = {ctx->output_grads[0], ctx->inputs[0], gamma,
                                ctx->outputs[1]};
  return ty_norm_grad(ctx, "rmsnorm_backward", ins, 4, 2);
}

static const char *const ty_rmsnorm_attrs[] = {"eps", NULL};

const ty_op_def_t ty_op_def_rmsnorm = {
    .name = "rmsnorm", .min_inputs = 1, .max_inputs = 2,
    .attr_names = ty_rmsnorm_attrs, .infer = ty_rmsnorm_infer,
    .grad = ty_rmsnorm_grad,
    .summary = "y = x * rstd * gamma, rstd = 1/sqrt(mean(x^2) + eps)"};
const ty_op_def_t ty_op_def_rmsnorm_backward = {
    .name = "rmsnorm_backward", .min_inputs = 4, .max_inputs = 4,
    .attr_names = ty_op_no_attrs, .infer = ty_rmsnorm_backward_infer,
    .grad = NULL,
    .summary = "dx, dgamma of rmsnorm from dy and the saved rstd"};
