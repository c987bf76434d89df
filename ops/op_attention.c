/* Fused scaled dot-product attention with causal and sliding-window masks
 * and grouped-query heads, plus its backward. The forward also outputs the
 * per-row log-sum-exp (lse) so the backward can rebuild the softmax. */
#include "ops/op_internal.h"

static const char *const ty_attention_attrs[] = {"scale", "causal", "window",
                                                 NULL};

/* Validates q, k, v and the attributes shared by attention and its
 * backward. */
static ty_status_t ty_attention_check(const char *op, const ty_attrs_t *attrs,
                                      const ty_tensor_desc_t *q,
                                      const ty_tensor_desc_t *k,
                                      const ty_tensor_desc_t *v) {
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "q", q));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "q", q, 4));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(op, "k", k, "q", q));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "k", k, 4));
  TY_RETURN_IF_ERROR(ty_op_check_like(op, "v", v, "k", k));
  if (k->dims[0] != q->dims[0] || k->dims[3] != q->dims[3]) {
    return ty_op_error(op,
                       "k is %s but q is %s: batch B and head dimension D "
                       "must match ([B, S, Hkv, D] vs [B, T, Hq, D])",
                       TY_DESC(k), TY_DESC(q));
  }
  int64_t hq = q->dims[2], hkv = k->dims[2];
  if (hkv == 0 || hq % hkv != 0) {
    return ty_op_error(op,
                       "k is %s but q is %s: Hq = %lld must be a multiple of "
                       "Hkv = %lld (grouped-query attention)",
                       TY_DESC(k), TY_DESC(q), (long long)hq, (long long)hkv);
  }
  bool causal;
  int64_t window;
  TY_RETURN_IF_ERROR(ty_op_attr_flag(op, attrs, "causal", 1, &causal));
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "window", 0, &window));
  if (window < 0) {
    return ty_op_error(op, "attribute 'window' = %lld must be >= 0",
                       (long long)window);
  }
  if (window > 0 && !causal) {
    return ty_op_error(op, "attribute 'window' = %lld needs causal=1 (a "
                           "sliding window limits how far back a query sees)",
                       (long long)window);
  }
  /* With a causal mask query t sits at t + S − T; S < T would leave the
   * first queries with no visible key and an undefined softmax. */
  if (causal && k->dims[1] < q->dims[1]) {
    return ty_op_error(op,
                       "k is %s but q is %s: a causal mask needs S = %lld >= "
                       "T = %lld",
                       TY_DESC(k), TY_DESC(q), (long long)k->dims[1],
                       (long long)q->dims[1]);
  }
  if (ty_attrs_find(attrs, "scale")) {
    double scale;
    TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "scale", 1.0, &scale));
    if (!(scale > 0)) {
      return ty_op_error(op, "attribute 'scale' = %g must be > 0", scale);
    }
  }
  return TY_OK;
}

static void ty_attention_lse_dims(const ty_tensor_desc_t *q, int64_t *dims) {
  dims[0] = q->dims[0]; /* B */
  dims[1] = q->dims[2]; /* Hq */
  dims[2] = q->dims[1]; /* T */
}

static ty_status_t ty_attention_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *q, *k, *v;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "q", &q));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "k", &k));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "v", &v));
  TY_RETURN_IF_ERROR(ty_attention_check(ctx->op, ctx->attrs, q, k, v));
  const ty_tensor_desc_t *kv_len = ty_op_in(ctx, 3);
  if (kv_len) TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, "kv_len", kv_len, TY_DTYPE_I64));
  int64_t lse[3];
  ty_attention_lse_dims(q, lse);
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, q));
  return ty_op_output(ctx, ty_op_stat_dtype(q->dtype), 3, lse);
}

/* attention_backward(dout, q, k, v, out, lse, kv_len?, dlse?) -> dq, dk, dv */
static ty_status_t ty_attention_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dout, *q, *k, *v, *out, *lse;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dout", &dout));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "q", &q));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "k", &k));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 3, "v", &v));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 4, "out", &out));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 5, "lse", &lse));
  TY_RETURN_IF_ERROR(ty_attention_check(ctx->op, ctx->attrs, q, k, v));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dout", dout, "q", q));
  TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "out", out, "q", q));
  const ty_tensor_desc_t *kv_len = ty_op_in(ctx, 6);
  if (kv_len) TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, "kv_len", kv_len, TY_DTYPE_I64));
  int64_t lse_dims[3];
  ty_attention_lse_dims(q, lse_dims);
  TY_RETURN_IF_ERROR(
      ty_op_check_dtype(ctx->op, "lse", lse, ty_op_stat_dtype(q->dtype)));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "lse", lse, 3, lse_dims,
                                       "[B, Hq, T] from q"));
  /* dlse: the gradient of the lse output, when lse has a consumer (an
   * attention_merge); absent means zero. */
  const ty_tensor_desc_t *dlse = ty_op_in(ctx, 7);
  if (dlse) TY_RETURN_IF_ERROR(ty_op_check_like(ctx->op, "dlse", dlse, "lse", lse));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, q));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, k));
  return ty_op_output_like(ctx, v);
}

/* The gradient of lse flows too (an attention_merge consumes it): since
 * d lse_t / d s_ts = p_ts, it enters the backward as delta_t - dlse_t. */
static ty_status_t ty_attention_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dout = ctx->output_grads[0];
  const ty_value_id_t dlse = ctx->output_count > 1 ? ctx->output_grads[1] : TY_VALUE_NONE;
  if ((dout == TY_VALUE_NONE && dlse == TY_VALUE_NONE) || !ty_grad_wants_any(ctx)) {
    return TY_OK;
  }
  /* Only lse is used: the backward takes dout, so give it zeros. */
  if (dout == TY_VALUE_NONE) TY_RETURN_IF_ERROR(ty_grad_scale(ctx, ctx->outputs[0], 0.0, &dout));
  /* The optional kv_len input travels to the backward unchanged. */
  bool has_kv_len = ctx->input_count > 3 && ctx->inputs[3] != TY_VALUE_NONE;
  const ty_value_id_t ins[8] = {dout,
                                ctx->inputs[0],
                                ctx->inputs[1],
                                ctx->inputs[2],
                                ctx->outputs[0],
                                ctx->outputs[1],
                                has_kv_len ? ctx->inputs[3] : TY_VALUE_NONE,
                                dlse};
  const uint32_t count = dlse != TY_VALUE_NONE ? 8 : has_kv_len ? 7 : 6;
  ty_value_id_t outs[3];
  TY_RETURN_IF_ERROR(ty_grad_emit(ctx, "attention_backward", ins, count, ctx->attrs, outs, 3));
  for (uint32_t i = 0; i < 3; ++i) {
    if (ty_grad_wants(ctx, i)) ctx->input_grads[i] = outs[i];
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_attention = {
    .name = "attention", .min_inputs = 3, .max_inputs = 4,
    .attr_names = ty_attention_attrs, .infer = ty_attention_infer,
    .grad = ty_attention_grad,
    .summary = "softmax(q k^T scale, causal/window mask) v with GQA; also lse"};
const ty_op_def_t ty_op_def_attention_backward = {
    .name = "attention_backward", .min_inputs = 6, .max_inputs = 8,
    .attr_names = ty_attention_attrs, .infer = ty_attention_backward_infer,
    .grad = NULL, .summary = "dq, dk, dv of attention from dout, out, lse (and dlse)"};
