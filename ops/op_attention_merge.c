/* attention_merge: the exact merge of two partial attention results over
 * disjoint sets of keys (their outputs and log-sum-exps), and its backward.
 * Context parallel attention runs one attention per block of keys and
 * merges the partials with it (docs/design-notes.md "Context parallel"). */
#include "ops/op_internal.h"

/* out_a [B, T, H, D] and lse_a [B, H, T] (the statistics dtype of out_a),
 * and the same for part b: the four inputs every merge op starts with. */
static ty_status_t ty_merge_check(const ty_op_infer_ctx_t *ctx, uint32_t first,
                                  const ty_tensor_desc_t **out_a,
                                  const ty_tensor_desc_t **lse_a) {
  const char *op = ctx->op;
  const ty_tensor_desc_t *oa, *la, *ob, *lb;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, first, "out_a", &oa));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, first + 1, "lse_a", &la));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, first + 2, "out_b", &ob));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, first + 3, "lse_b", &lb));
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "out_a", oa));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "out_a", oa, 4));
  const int64_t lse_dims[3] = {oa->dims[0], oa->dims[2], oa->dims[1]};
  TY_RETURN_IF_ERROR(ty_op_check_dtype(op, "lse_a", la, ty_op_stat_dtype(oa->dtype)));
  TY_RETURN_IF_ERROR(ty_op_check_shape(op, "lse_a", la, 3, lse_dims,
                                       "[B, H, T] from out_a [B, T, H, D]"));
  TY_RETURN_IF_ERROR(ty_op_check_like(op, "out_b", ob, "out_a", oa));
  TY_RETURN_IF_ERROR(ty_op_check_like(op, "lse_b", lb, "lse_a", la));
  *out_a = oa;
  *lse_a = la;
  return TY_OK;
}

/* attention_merge(out_a, lse_a, out_b, lse_b) -> out, lse */
static ty_status_t ty_attention_merge_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *oa, *la;
  TY_RETURN_IF_ERROR(ty_merge_check(ctx, 0, &oa, &la));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, oa));
  return ty_op_output_like(ctx, la);
}

/* attention_merge_backward(out_a, lse_a, out_b, lse_b, out, lse, dout?,
 * dlse?) -> dout_a, dlse_a, dout_b, dlse_b (an absent gradient is zero). */
static ty_status_t ty_attention_merge_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *oa, *la, *out, *lse;
  TY_RETURN_IF_ERROR(ty_merge_check(ctx, 0, &oa, &la));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 4, "out", &out));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 5, "lse", &lse));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "out", out, "out_a", oa));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "lse", lse, "lse_a", la));
  const ty_tensor_desc_t *dout = ty_op_in(ctx, 6), *dlse = ty_op_in(ctx, 7);
  if (dout) TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dout", dout, "out_a", oa));
  if (dlse) TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dlse", dlse, "lse_a", la));
  if (!dout && !dlse) {
    return ty_op_error(ctx->op, "needs dout, dlse or both (inputs 6 and 7); both are absent");
  }
  for (int part = 0; part < 2; ++part) {
    TY_RETURN_IF_ERROR(ty_op_output_like(ctx, oa));
    TY_RETURN_IF_ERROR(ty_op_output_like(ctx, la));
  }
  return TY_OK;
}

static ty_status_t ty_attention_merge_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  const ty_value_id_t dout = ctx->output_grads[0], dlse = ctx->output_grads[1];
  if ((dout == TY_VALUE_NONE && dlse == TY_VALUE_NONE) || !ty_grad_wants_any(ctx)) {
    return TY_OK;
  }
  const ty_value_id_t ins[8] = {ctx->inputs[0],  ctx->inputs[1],  ctx->inputs[2],
                                ctx->inputs[3],  ctx->outputs[0], ctx->outputs[1],
                                dout,            dlse};
  ty_value_id_t outs[4];
  TY_RETURN_IF_ERROR(ty_grad_emit(ctx, "attention_merge_backward", ins,
                                  dlse != TY_VALUE_NONE ? 8 : 7, NULL, outs, 4));
  for (uint32_t i = 0; i < 4; ++i) {
    if (ty_grad_wants(ctx, i)) ctx->input_grads[i] = outs[i];
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_attention_merge = {
    .name = "attention_merge", .min_inputs = 4, .max_inputs = 4,
    .attr_names = ty_op_no_attrs, .infer = ty_attention_merge_infer,
    .grad = ty_attention_merge_grad,
    .summary = "exact merge of two partial attentions (out, lse) over disjoint keys"};
const ty_op_def_t ty_op_def_attention_merge_backward = {
    .name = "attention_merge_backward", .min_inputs = 6, .max_inputs = 8,
    .attr_names = ty_op_no_attrs, .infer = ty_attention_merge_backward_infer,
    .grad = NULL, .summary = "gradients of both parts of attention_merge"};
