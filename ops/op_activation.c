/* Pointwise activations (gelu, silu, swiglu) and softmax over the last axis,
 * with their backward companions. All keep the input's shape and dtype. */
#include "ops/op_internal.h"

/* ---- Unary: y = f(x). ---- */

static ty_status_t ty_unary_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  return ty_op_output_like(ctx, x);
}

/* backward(dy, saved) -> dx, where saved is x (gelu, silu) or y (softmax). */
static ty_status_t ty_unary_backward_infer_named(const ty_op_infer_ctx_t *ctx,
                                                 const char *saved_role) {
  const ty_tensor_desc_t *dy, *saved;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dy", &dy));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, saved_role, &saved));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, saved_role, saved));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dy", dy, saved_role, saved));
  return ty_op_output_like(ctx, saved);
}

static ty_status_t ty_unary_backward_infer(const ty_op_infer_ctx_t *ctx) {
  return ty_unary_backward_infer_named(ctx, "x");
}

static ty_status_t ty_gelu_grad(const ty_grad_ctx_t *ctx) {
  return ty_grad_unary_companion(ctx, "gelu_backward", ctx->inputs[0]);
}

static ty_status_t ty_silu_grad(const ty_grad_ctx_t *ctx) {
  return ty_grad_unary_companion(ctx, "silu_backward", ctx->inputs[0]);
}

const ty_op_def_t ty_op_def_gelu = {
    .name = "gelu", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_op_no_attrs, .infer = ty_unary_infer,
    .grad = ty_gelu_grad,
    .summary = "y = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (GPT-2 gelu_new)"};
const ty_op_def_t ty_op_def_gelu_backward = {
    .name = "gelu_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_unary_backward_infer,
    .grad = NULL, .summary = "dx of gelu from dy and x"};
const ty_op_def_t ty_op_def_silu = {
    .name = "silu", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_op_no_attrs, .infer = ty_unary_infer,
    .grad = ty_silu_grad, .summary = "y = x * sigmoid(x)"};
const ty_op_def_t ty_op_def_silu_backward = {
    .name = "silu_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_unary_backward_infer,
    .grad = NULL, .summary = "dx of silu from dy and x"};

/* ---- swiglu(gate, up) = silu(gate)·up ---- */

static ty_status_t ty_swiglu_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *gate, *up;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "gate", &gate));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "up", &up));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "gate", gate));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "up", up, "gate", gate));
  return ty_op_output_like(ctx, gate);
}

/* swiglu_backward(dy, gate, up) -> dgate, dup */
static ty_status_t ty_swiglu_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dy, *gate, *up;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dy", &dy));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "gate", &gate));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "up", &up));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "gate", gate));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "up", up, "gate", gate));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dy", dy, "gate", gate));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, gate));
  return ty_op_output_like(ctx, up);
}

static ty_status_t ty_swiglu_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  if (ctx->output_grads[0] == TY_VALUE_NONE || !ty_grad_wants_any(ctx)) {
    return TY_OK;
  }
  const ty_value_id_t ins[3] = {ctx->output_grads[0], ctx->inputs[0],
                                ctx->inputs[1]};
  ty_value_id_t outs[2];
  TY_RETURN_IF_ERROR(
      ty_grad_emit(ctx, "swiglu_backward", ins, 3, NULL, outs, 2));
  for (uint32_t i = 0; i < 2; ++i) {
    if (ty_grad_wants(ctx, i)) ctx->input_grads[i] = outs[i];
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_swiglu = {
    .name = "swiglu", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_swiglu_infer,
    .grad = ty_swiglu_grad, .summary = "y = silu(gate) * up"};
const ty_op_def_t ty_op_def_swiglu_backward = {
    .name = "swiglu_backward", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_op_no_attrs, .infer = ty_swiglu_backward_infer,
    .grad = NULL, .summary = "dgate, dup of swiglu from dy, gate and up"};

/* ---- softmax over the last axis ---- */

static ty_status_t ty_softmax_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(ctx->op, "x", x, 1));
  return ty_op_output_like(ctx, x);
}

/* The backward takes the forward output y: dx = y·(dy − Σ dy·y). */
static ty_status_t ty_softmax_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *y = ty_op_in(ctx, 1);
  if (y) TY_RETURN_IF_ERROR(ty_op_check_min_rank(ctx->op, "y", y, 1));
  return ty_unary_backward_infer_named(ctx, "y");
}

static ty_status_t ty_softmax_grad(const ty_grad_ctx_t *ctx) {
  return ty_grad_unary_companion(ctx, "softmax_backward", ctx->outputs[0]);
}

const ty_op_def_t ty_op_def_softmax = {
    .name = "softmax", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_op_no_attrs, .infer = ty_softmax_infer,
    .grad = ty_softmax_grad, .summary = "y = softmax(x) over the last axis"};
const ty_op_def_t ty_op_def_softmax_backward = {
    .name = "softmax_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_softmax_backward_infer,
    .grad = NULL, .summary = "dx of softmax from dy and the forward output y"};
