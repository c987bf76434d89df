/* Reductions over chosen axes: reduce_sum, reduce_mean, reduce_sumsq (Σx²).
 * Their gradients spread dy back over the reduced axes with broadcast_to. */
#include "ops/op_internal.h"

static const char *const ty_reduce_attrs[] = {"axes", "keepdims", NULL};

typedef struct ty_reduce_plan_t {
  uint32_t mask;   /* reduced axes of x */
  bool keepdims;
  uint32_t rank;   /* of y */
  int64_t dims[TY_TENSOR_MAX_RANK];
  int64_t kept[TY_TENSOR_MAX_RANK]; /* y's shape with keepdims=1 (x's rank) */
  int64_t count;   /* elements reduced into each output */
} ty_reduce_plan_t;

static ty_status_t ty_reduce_plan(const char *op, const ty_attrs_t *attrs,
                                  const ty_tensor_desc_t *x,
                                  ty_reduce_plan_t *out) {
  const int64_t *axes;
  uint32_t count;
  TY_RETURN_IF_ERROR(ty_status_annotate(
      ty_attrs_get_ints(attrs, "axes", &axes, &count), "%s", op));
  TY_RETURN_IF_ERROR(ty_op_attr_flag(op, attrs, "keepdims", 0, &out->keepdims));
  TY_RETURN_IF_ERROR(ty_op_axes_mask(op, "x", x, axes, count, &out->mask));
  out->rank = 0;
  out->count = 1;
  for (uint32_t i = 0; i < x->rank; ++i) {
    bool reduced = out->mask & (1u << i);
    out->kept[i] = reduced ? 1 : x->dims[i];
    if (reduced) out->count *= x->dims[i];
    if (!reduced || out->keepdims) out->dims[out->rank++] = out->kept[i];
  }
  return TY_OK;
}

static ty_status_t ty_reduce_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  ty_reduce_plan_t plan;
  TY_RETURN_IF_ERROR(ty_reduce_plan(ctx->op, ctx->attrs, x, &plan));
  return ty_op_output(ctx, x->dtype, plan.rank, plan.dims);
}

/* dy·factor spread over x's shape: scaled first (the smaller tensor), then
 * reshaped to keepdims form so that it broadcasts, then broadcast. */
static ty_status_t ty_reduce_spread(const ty_grad_ctx_t *ctx, double factor,
                                    ty_value_id_t *out_value) {
  /* A copy: the emits below may move the descriptor. */
  const ty_tensor_desc_t x_copy = *ty_grad_input_desc(ctx, 0);
  const ty_tensor_desc_t *x = &x_copy;
  ty_reduce_plan_t plan;
  TY_RETURN_IF_ERROR(ty_reduce_plan(ctx->op, ctx->attrs, x, &plan));
  ty_value_id_t v = ctx->output_grads[0];
  if (factor != 1.0) TY_RETURN_IF_ERROR(ty_grad_scale(ctx, v, factor, &v));
  TY_RETURN_IF_ERROR(ty_grad_reshape(ctx, v, x->rank, plan.kept, &v));
  return ty_grad_broadcast(ctx, v, x->rank, x->dims, out_value);
}

static ty_status_t ty_reduce_sum_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  if (ctx->output_grads[0] == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) {
    return TY_OK;
  }
  return ty_reduce_spread(ctx, 1.0, &ctx->input_grads[0]);
}

static ty_status_t ty_reduce_mean_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  if (ctx->output_grads[0] == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) {
    return TY_OK;
  }
  ty_reduce_plan_t plan;
  TY_RETURN_IF_ERROR(ty_reduce_plan(ctx->op, ctx->attrs,
                                    ty_grad_input_desc(ctx, 0), &plan));
  /* An empty reduction has no elements to receive a gradient. */
  double factor = plan.count > 0 ? 1.0 / (double)plan.count : 0.0;
  return ty_reduce_spread(ctx, factor, &ctx->input_grads[0]);
}

/* d(Σx²)/dx = 2x: dx = broadcast(2·dy) · x. */
static ty_status_t ty_reduce_sumsq_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  if (ctx->output_grads[0] == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) {
    return TY_OK;
  }
  ty_value_id_t spread;
  TY_RETURN_IF_ERROR(ty_reduce_spread(ctx, 2.0, &spread));
  const ty_value_id_t ins[2] = {spread, ctx->inputs[0]};
  return ty_grad_emit1(ctx, "mul", ins, 2, NULL, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_reduce_sum = {
    .name = "reduce_sum", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_reduce_attrs, .infer = ty_reduce_infer,
    .grad = ty_reduce_sum_grad,
    .summary = "y = sum of x over axes (all when empty)"};
const ty_op_def_t ty_op_def_reduce_mean = {
    .name = "reduce_mean", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_reduce_attrs, .infer = ty_reduce_infer,
    .grad = ty_reduce_mean_grad,
    .summary = "y = mean of x over axes (all when empty)"};
const ty_op_def_t ty_op_def_reduce_sumsq = {
    .name = "reduce_sumsq", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_reduce_attrs, .infer = ty_reduce_infer,
    .grad = ty_reduce_sumsq_grad,
    .summary = "y = sum of x squared over axes (all when empty)"};
