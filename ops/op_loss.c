/* Per-token cross-entropy of logits against integer targets (negative
 * targets are ignored) and its backward. The loss is per token; weighted
 * means are built by the caller from mul, reduce_sum and div. */
#include "ops/op_internal.h"

/* Validates logits [..., V] float and targets [...] int. */
static ty_status_t ty_cross_entropy_check(const char *op,
                                          const ty_tensor_desc_t *logits,
                                          const ty_tensor_desc_t *targets) {
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "logits", logits));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(op, "logits", logits, 1));
  TY_RETURN_IF_ERROR(ty_op_check_int(op, "targets", targets));
  return ty_op_check_shape(op, "targets", targets, logits->rank - 1,
                           logits->dims,
                           "logits' shape without the vocabulary axis");
}

static ty_status_t ty_cross_entropy_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *logits, *targets;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "logits", &logits));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "targets", &targets));
  TY_RETURN_IF_ERROR(ty_cross_entropy_check(ctx->op, logits, targets));
  return ty_op_output(ctx, ty_op_stat_dtype(logits->dtype), targets->rank,
                      targets->dims);
}

/* cross_entropy_backward(dloss, logits, targets) -> dlogits */
static ty_status_t ty_cross_entropy_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dloss, *logits, *targets;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dloss", &dloss));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "logits", &logits));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "targets", &targets));
  TY_RETURN_IF_ERROR(ty_cross_entropy_check(ctx->op, logits, targets));
  TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "dloss", dloss,
                                       ty_op_stat_dtype(logits->dtype)));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "dloss", dloss, targets->rank,
                                       targets->dims, "the shape of targets"));
  return ty_op_output_like(ctx, logits);
}

/* Targets are integers and get no gradient. */
static ty_status_t ty_cross_entropy_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dloss = ctx->output_grads[0];
  if (dloss == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_value_id_t ins[3] = {dloss, ctx->inputs[0], ctx->inputs[1]};
  return ty_grad_emit1(ctx, "cross_entropy_backward", ins, 3, NULL,
                       &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_cross_entropy = {
    .name = "cross_entropy", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_cross_entropy_infer,
    .grad = ty_cross_entropy_grad,
    .summary = "per-token loss = logsumexp(logits) - logits[target]"};
const ty_op_def_t ty_op_def_cross_entropy_backward = {
    .name = "cross_entropy_backward", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_op_no_attrs, .infer = ty_cross_entropy_backward_infer,
    .grad = NULL,
    .summary = "dlogits = dloss * (softmax(logits) - onehot(targets))"};
