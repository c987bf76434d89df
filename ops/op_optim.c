/* Optimizer updates (adamw_update, sgd_update, adafactor_update) and
 * global-norm gradient clipping. Hyperparameters are scalar inputs, not attributes, so changing
 * them per step never recompiles. None of these ops has a gradient. */
#include <stdio.h>
#include <string.h>

#include "ops/op_internal.h"

/* Checks param (float) and a same-dtype, same-shape grad. */
static ty_status_t ty_optim_check_param(const char *op,
                                        const ty_tensor_desc_t *param,
                                        const ty_tensor_desc_t *grad) {
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "param", param));
  return ty_op_check_like(op, "grad", grad, "param", param);
}

/* Optimizer state: f32, param's shape. */
static ty_status_t ty_optim_check_state(const char *op, const char *role,
                                        const ty_tensor_desc_t *s,
                                        const ty_tensor_desc_t *param) {
  TY_RETURN_IF_ERROR(ty_op_check_dtype(op, role, s, TY_DTYPE_F32));
  return ty_op_check_shape(op, role, s, param->rank, param->dims,
                           "the shape of param");
}

/* Inputs [first, first + count) are f32 scalars named by `roles`. */
static ty_status_t ty_optim_check_scalars(const ty_op_infer_ctx_t *ctx,
                                          uint32_t first,
                                          const char *const *roles,
                                          uint32_t count) {
  for (uint32_t i = 0; i < count; ++i) {
    const ty_tensor_desc_t *d;
    TY_RETURN_IF_ERROR(ty_op_need(ctx, first + i, roles[i], &d));
    TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, roles[i], d, TY_DTYPE_F32));
  }
  return TY_OK;
}

/* adamw_update(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step)
 * -> param', m', v' */
static ty_status_t ty_adamw_update_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *param, *grad, *m, *v, *step;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "param", &param));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "grad", &grad));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "m", &m));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 3, "v", &v));
  TY_RETURN_IF_ERROR(ty_optim_check_param(ctx->op, param, grad));
  TY_RETURN_IF_ERROR(ty_optim_check_state(ctx->op, "m", m, param));
  TY_RETURN_IF_ERROR(ty_optim_check_state(ctx->op, "v", v, param));
  static const char *const hyper[] = {"lr", "beta1", "beta2", "eps",
                                      "weight_decay"};
  TY_RETURN_IF_ERROR(ty_optim_check_scalars(ctx, 4, hyper, 5));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 9, "step", &step));
  TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, "step", step, TY_DTYPE_I64));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, param));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, m));
  return ty_op_output_like(ctx, v);
}

const ty_op_def_t ty_op_def_adamw_update = {
    .name = "adamw_update", .min_inputs = 10, .max_inputs = 10,
    .attr_names = ty_op_no_attrs, .infer = ty_adamw_update_infer,
    .grad = NULL,
    .summary = "AdamW step (PyTorch semantics): param', m', v' from hyperparameter inputs"};

/* sgd_update(param, grad, buf, lr, momentum, weight_decay) -> param', buf' */
static const char *const ty_sgd_attrs[] = {"nesterov", NULL};

static ty_status_t ty_sgd_update_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *param, *grad, *buf;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "param", &param));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "grad", &grad));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "buf", &buf));
  TY_RETURN_IF_ERROR(ty_optim_check_param(ctx->op, param, grad));
  TY_RETURN_IF_ERROR(ty_optim_check_state(ctx->op, "buf", buf, param));
  static const char *const hyper[] = {"lr", "momentum", "weight_decay"};
  TY_RETURN_IF_ERROR(ty_optim_check_scalars(ctx, 3, hyper, 3));
  bool nesterov;
  TY_RETURN_IF_ERROR(
      ty_op_attr_flag(ctx->op, ctx->attrs, "nesterov", 0, &nesterov));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, param));
  return ty_op_output_like(ctx, buf);
}

const ty_op_def_t ty_op_def_sgd_update = {
    .name = "sgd_update", .min_inputs = 6, .max_inputs = 6,
    .attr_names = ty_sgd_attrs, .infer = ty_sgd_update_infer, .grad = NULL,
    .summary = "SGD step with momentum (PyTorch, dampening 0): param', buf'"};

/* adafactor_update(param, grad, row, col, v, m, lr, weight_decay, step, beta1)
 * -> param', then row', col' (factored) or v' (not), then m' when m is
 * given. A param of rank >= 2 is factored: row is its shape without the last
 * axis, col without the second-to-last, v absent; a vector or scalar keeps v
 * (its shape) and no row or col. m (param's shape) turns on the first moment
 * and needs beta1. States are f32. */
static const char *const ty_adafactor_attrs[] = {
    "eps1", "eps2", "clip_threshold", "decay_rate", "relative_step", "scale_parameter",
    "warmup_init", NULL};

static ty_status_t ty_adafactor_check_attrs(const char *op, const ty_attrs_t *attrs) {
  double eps1, eps2, clip, decay;
  bool relative, scale, warmup;
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "eps1", 1e-30, &eps1));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "eps2", 1e-3, &eps2));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "clip_threshold", 1.0, &clip));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "decay_rate", -0.8, &decay));
  TY_RETURN_IF_ERROR(ty_op_attr_flag(op, attrs, "relative_step", 0, &relative));
  TY_RETURN_IF_ERROR(ty_op_attr_flag(op, attrs, "scale_parameter", 1, &scale));
  TY_RETURN_IF_ERROR(ty_op_attr_flag(op, attrs, "warmup_init", 0, &warmup));
  if (eps1 < 0 || eps2 < 0) return ty_op_error(op, "eps1 and eps2 must be >= 0");
  if (!(clip > 0)) return ty_op_error(op, "clip_threshold = %g must be > 0", clip);
  if (!(decay < 0)) return ty_op_error(op, "decay_rate = %g must be < 0", decay);
  if (warmup && !relative) return ty_op_error(op, "warmup_init needs relative_step");
  return TY_OK;
}

static ty_status_t ty_adafactor_update_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *param, *grad, *d;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "param", &param));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "grad", &grad));
  TY_RETURN_IF_ERROR(ty_optim_check_param(ctx->op, param, grad));
  TY_RETURN_IF_ERROR(ty_adafactor_check_attrs(ctx->op, ctx->attrs));
  const ty_tensor_desc_t *row = ty_op_in(ctx, 2), *col = ty_op_in(ctx, 3), *v = ty_op_in(ctx, 4);
  const ty_tensor_desc_t *m = ty_op_in(ctx, 5);
  bool factored = param->rank >= 2;
  if (factored && (!row || !col || v)) {
    return ty_op_error(ctx->op, "param %s is factored: give row and col, not v",
                       TY_DESC(param));
  }
  if (!factored && (row || col || !v)) {
    return ty_op_error(ctx->op, "param %s has rank < 2 (not factored): give v, not row and "
                       "col", TY_DESC(param));
  }
  if (factored) {
    int64_t dims[TY_TENSOR_MAX_RANK];
    TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "row", row, TY_DTYPE_F32));
    TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "row", row, param->rank - 1, param->dims,
                                         "param's shape without its last dimension"));
    memcpy(dims, param->dims, param->rank * sizeof(int64_t));
    dims[param->rank - 2] = param->dims[param->rank - 1];
    TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "col", col, TY_DTYPE_F32));
    TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "col", col, param->rank - 1, dims,
                                         "param's shape without its second-to-last "
                                         "dimension"));
  } else {
    TY_RETURN_IF_ERROR(ty_optim_check_state(ctx->op, "v", v, param));
  }
  if (m) TY_RETURN_IF_ERROR(ty_optim_check_state(ctx->op, "m", m, param));
  static const char *const hyper[] = {"lr", "weight_decay"};
  TY_RETURN_IF_ERROR(ty_optim_check_scalars(ctx, 6, hyper, 2));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 8, "step", &d));
  TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, "step", d, TY_DTYPE_I64));
  const ty_tensor_desc_t *beta1 = ty_op_in(ctx, 9);
  if (!m != !beta1) {
    return ty_op_error(ctx->op, "the first moment m and beta1 come together (%s without %s)",
                       m ? "m" : "beta1", m ? "beta1" : "m");
  }
  if (beta1) TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, "beta1", beta1, TY_DTYPE_F32));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, param));
  if (factored) {
    TY_RETURN_IF_ERROR(ty_op_output_like(ctx, row));
    TY_RETURN_IF_ERROR(ty_op_output_like(ctx, col));
  } else {
    TY_RETURN_IF_ERROR(ty_op_output_like(ctx, v));
  }
  return m ? ty_op_output_like(ctx, m) : TY_OK;
}

const ty_op_def_t ty_op_def_adafactor_update = {
    .name = "adafactor_update", .min_inputs = 9, .max_inputs = 10,
    .attr_names = ty_adafactor_attrs, .infer = ty_adafactor_update_infer, .grad = NULL,
    .summary = "Adafactor step (transformers.Adafactor): factored second moments, relative "
               "step, update clipping, optional first moment"};

/* clip_by_global_norm(max_norm, g1 ... gn) -> norm, g1' ... gn'. The
 * gradients may differ in shape and float dtype (mixed-precision models
 * keep norm weights in f32); each gi' takes gi's. */
static ty_status_t ty_clip_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *max_norm;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "max_norm", &max_norm));
  TY_RETURN_IF_ERROR(
      ty_op_check_scalar(ctx->op, "max_norm", max_norm, TY_DTYPE_F32));
  TY_RETURN_IF_ERROR(ty_op_output(ctx, TY_DTYPE_F32, 0, NULL)); /* norm */
  for (uint32_t i = 1; i < ctx->input_count; ++i) {
    char role[24];
    snprintf(role, sizeof(role), "g%u", i);
    const ty_tensor_desc_t *g;
    TY_RETURN_IF_ERROR(ty_op_need(ctx, i, role, &g));
    TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, role, g));
    TY_RETURN_IF_ERROR(ty_op_output_like(ctx, g));
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_clip_by_global_norm = {
    .name = "clip_by_global_norm", .min_inputs = 2,
    .max_inputs = TY_OP_VARIADIC, .attr_names = ty_op_no_attrs,
    .infer = ty_clip_infer, .grad = NULL,
    .summary = "norm = sqrt(sum of all gi^2); gi scaled by min(1, max_norm/(norm+1e-6))"};

/* global_norm_scale(max_norm, s1 ... sn) -> norm, scale: the global norm
 * from per-gradient sums of squares, and clip_by_global_norm's factor. */
static ty_status_t ty_global_norm_scale_infer(const ty_op_infer_ctx_t *ctx) {
  for (uint32_t i = 0; i < ctx->input_count; ++i) {
    char role[24];
    snprintf(role, sizeof(role), i ? "s%u" : "max_norm", i);
    const ty_tensor_desc_t *d;
    TY_RETURN_IF_ERROR(ty_op_need(ctx, i, role, &d));
    TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, role, d, TY_DTYPE_F32));
  }
  TY_RETURN_IF_ERROR(ty_op_output(ctx, TY_DTYPE_F32, 0, NULL));
  return ty_op_output(ctx, TY_DTYPE_F32, 0, NULL);
}

const ty_op_def_t ty_op_def_global_norm_scale = {
    .name = "global_norm_scale", .min_inputs = 2, .max_inputs = TY_OP_VARIADIC,
    .attr_names = ty_op_no_attrs, .infer = ty_global_norm_scale_infer, .grad = NULL,
    .summary = "norm = sqrt(sum of si); scale = min(1, max_norm/(norm+1e-6)) (1 when "
               "max_norm <= 0)"};
