/* Per-token cross-entropy of logits against integer targets (negative
 * targets are ignored) and its backward; and the fused linear +
 * cross-entropy (logits = h W^T formed chunk by chunk, never whole). The
 * loss is per token; weighted means are built by the caller from mul,
 * reduce_sum and div. */
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

/* ---- linear_cross_entropy: the LM head and the loss in one op ---- */

static const char *const ty_lce_attrs[] = {"chunk", NULL};

/* h [..., C] float, w [V, C] of h's dtype, targets h's shape without C. */
static ty_status_t ty_lce_check(const char *op, const ty_attrs_t *attrs,
                                const ty_tensor_desc_t *h, const ty_tensor_desc_t *w,
                                const ty_tensor_desc_t *targets) {
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "h", h));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(op, "h", h, 1));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(op, "w", w, "h", h));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "w", w, 2));
  if (w->dims[1] != h->dims[h->rank - 1]) {
    return ty_op_error(op, "w is %s but h is %s: w must be [V, C] with C = %lld, h's last "
                       "dimension", TY_DESC(w), TY_DESC(h), (long long)h->dims[h->rank - 1]);
  }
  TY_RETURN_IF_ERROR(ty_op_check_int(op, "targets", targets));
  TY_RETURN_IF_ERROR(ty_op_check_shape(op, "targets", targets, h->rank - 1, h->dims,
                                       "h's shape without its last dimension"));
  int64_t chunk;
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "chunk", 0, &chunk));
  if (chunk < 0) return ty_op_error(op, "attribute 'chunk' = %lld must be >= 0", (long long)chunk);
  return TY_OK;
}

/* linear_cross_entropy(h, w, targets) -> loss, lse */
static ty_status_t ty_lce_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *h, *w, *targets;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "h", &h));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "w", &w));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "targets", &targets));
  TY_RETURN_IF_ERROR(ty_lce_check(ctx->op, ctx->attrs, h, w, targets));
  TY_RETURN_IF_ERROR(ty_op_output(ctx, ty_op_stat_dtype(h->dtype), targets->rank, targets->dims));
  return ty_op_output(ctx, ty_op_stat_dtype(h->dtype), targets->rank, targets->dims);
}

/* linear_cross_entropy_backward(dloss, h, w, targets, lse) -> dh, dw */
static ty_status_t ty_lce_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dloss, *h, *w, *targets, *lse;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dloss", &dloss));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "h", &h));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "w", &w));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 3, "targets", &targets));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 4, "lse", &lse));
  TY_RETURN_IF_ERROR(ty_lce_check(ctx->op, ctx->attrs, h, w, targets));
  static const char *const roles[2] = {"dloss", "lse"};
  const ty_tensor_desc_t *stats[2] = {dloss, lse};
  for (int i = 0; i < 2; ++i) {
    TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, roles[i], stats[i],
                                         ty_op_stat_dtype(h->dtype)));
    TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, roles[i], stats[i], targets->rank,
                                         targets->dims, "the shape of targets"));
  }
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, h));
  return ty_op_output_like(ctx, w);
}

/* The backward recomputes each chunk's logits from h and w (the forward
 * keeps only the per-token logsumexp), so no [..., V] tensor exists in
 * either direction. */
static ty_status_t ty_lce_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  TY_RETURN_IF_ERROR(ty_grad_check_saved_outputs(ctx));
  ty_value_id_t dloss = ctx->output_grads[0];
  if (dloss == TY_VALUE_NONE || (!ty_grad_wants(ctx, 0) && !ty_grad_wants(ctx, 1))) {
    return TY_OK;
  }
  const ty_value_id_t ins[5] = {dloss, ctx->inputs[0], ctx->inputs[1], ctx->inputs[2],
                                ctx->outputs[1]};
  ty_value_id_t outs[2];
  TY_RETURN_IF_ERROR(ty_grad_emit(ctx, "linear_cross_entropy_backward", ins, 5, ctx->attrs,
                                  outs, 2));
  if (ty_grad_wants(ctx, 0)) ctx->input_grads[0] = outs[0];
  if (ty_grad_wants(ctx, 1)) ctx->input_grads[1] = outs[1];
  return TY_OK;
}

const ty_op_def_t ty_op_def_linear_cross_entropy = {
    .name = "linear_cross_entropy", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_lce_attrs, .infer = ty_lce_infer, .grad = ty_lce_grad,
    .summary = "per-token cross-entropy of logits h W^T, formed `chunk` rows at a time; "
               "also outputs the logsumexp"};
const ty_op_def_t ty_op_def_linear_cross_entropy_backward = {
    .name = "linear_cross_entropy_backward", .min_inputs = 5, .max_inputs = 5,
    .attr_names = ty_lce_attrs, .infer = ty_lce_backward_infer, .grad = NULL,
    .summary = "dh, dW of linear_cross_entropy, recomputing each chunk's logits"};
