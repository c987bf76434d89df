/* Elementwise arithmetic with numpy broadcasting (add, sub, mul, div), scale
 * and broadcast_to. Gradients of broadcast operands are summed back to the
 * operand's shape (reduce_sum + reshape, see ty_grad_sum_to). */
#include "ops/op_internal.h"

/* ---- add, sub, mul, div ---- */

static ty_status_t ty_binary_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *a, *b;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "a", &a));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "b", &b));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "a", a));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(ctx->op, "b", b, "a", a));
  uint32_t rank;
  int64_t dims[TY_TENSOR_MAX_RANK];
  if (!ty_op_broadcast_dims(a->rank, a->dims, b->rank, b->dims, &rank, dims)) {
    return ty_op_error(ctx->op,
                       "a is %s but b is %s: shapes do not broadcast "
                       "(aligned from the right, dimensions must match or be 1)",
                       TY_DESC(a), TY_DESC(b));
  }
  return ty_op_output(ctx, a->dtype, rank, dims);
}

/* Sums `value` back to input `index`'s shape, optionally negated. */
static ty_status_t ty_binary_grad_to(const ty_grad_ctx_t *ctx, uint32_t index,
                                     ty_value_id_t value, bool negate) {
  ty_value_id_t summed;
  TY_RETURN_IF_ERROR(
      ty_grad_sum_to(ctx, value, ty_grad_input_desc(ctx, index), &summed));
  /* Negating after the reduction touches the smaller tensor. */
  if (negate) return ty_grad_scale(ctx, summed, -1.0, &ctx->input_grads[index]);
  ctx->input_grads[index] = summed;
  return TY_OK;
}

static ty_status_t ty_add_sub_grad(const ty_grad_ctx_t *ctx, bool is_sub) {
  ty_grad_clear(ctx);
  ty_value_id_t dc = ctx->output_grads[0];
  if (dc == TY_VALUE_NONE) return TY_OK;
  if (ty_grad_wants(ctx, 0)) {
    TY_RETURN_IF_ERROR(ty_binary_grad_to(ctx, 0, dc, false));
  }
  if (ty_grad_wants(ctx, 1)) {
    TY_RETURN_IF_ERROR(ty_binary_grad_to(ctx, 1, dc, is_sub));
  }
  return TY_OK;
}

static ty_status_t ty_add_grad(const ty_grad_ctx_t *ctx) {
  return ty_add_sub_grad(ctx, false);
}

static ty_status_t ty_sub_grad(const ty_grad_ctx_t *ctx) {
  return ty_add_sub_grad(ctx, true);
}

/* c = a·b: da = dc·b, db = dc·a (each summed to its operand's shape). */
static ty_status_t ty_mul_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dc = ctx->output_grads[0];
  if (dc == TY_VALUE_NONE) return TY_OK;
  for (uint32_t i = 0; i < 2; ++i) {
    if (!ty_grad_wants(ctx, i)) continue;
    const ty_value_id_t ins[2] = {dc, ctx->inputs[1 - i]};
    ty_value_id_t prod;
    TY_RETURN_IF_ERROR(ty_grad_emit1(ctx, "mul", ins, 2, NULL, &prod));
    TY_RETURN_IF_ERROR(ty_binary_grad_to(ctx, i, prod, false));
  }
  return TY_OK;
}

/* c = a/b: da = dc/b and db = −dc·a/b² = −(dc/b)·c, so both share dc/b and
 * db reuses the forward output instead of squaring b. */
static ty_status_t ty_div_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dc = ctx->output_grads[0];
  bool want_a = ty_grad_wants(ctx, 0), want_b = ty_grad_wants(ctx, 1);
  if (dc == TY_VALUE_NONE || (!want_a && !want_b)) return TY_OK;
  const ty_value_id_t q_in[2] = {dc, ctx->inputs[1]};
  ty_value_id_t q;
  TY_RETURN_IF_ERROR(ty_grad_emit1(ctx, "div", q_in, 2, NULL, &q));
  if (want_a) TY_RETURN_IF_ERROR(ty_binary_grad_to(ctx, 0, q, false));
  if (want_b) {
    const ty_value_id_t p_in[2] = {q, ctx->outputs[0]};
    ty_value_id_t p;
    TY_RETURN_IF_ERROR(ty_grad_emit1(ctx, "mul", p_in, 2, NULL, &p));
    TY_RETURN_IF_ERROR(ty_binary_grad_to(ctx, 1, p, true));
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_add = {
    .name = "add", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_binary_infer,
    .grad = ty_add_grad, .summary = "c = a + b (broadcast)"};
const ty_op_def_t ty_op_def_sub = {
    .name = "sub", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_binary_infer,
    .grad = ty_sub_grad, .summary = "c = a - b (broadcast)"};
const ty_op_def_t ty_op_def_mul = {
    .name = "mul", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_binary_infer,
    .grad = ty_mul_grad, .summary = "c = a * b (broadcast)"};
const ty_op_def_t ty_op_def_div = {
    .name = "div", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_binary_infer,
    .grad = ty_div_grad, .summary = "c = a / b (broadcast)"};

/* ---- scale ---- */

static const char *const ty_scale_attrs[] = {"alpha", NULL};

static ty_status_t ty_scale_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  TY_RETURN_IF_ERROR(ty_op_attr_require(ctx->op, ctx->attrs, "alpha"));
  double alpha;
  TY_RETURN_IF_ERROR(ty_op_attr_float(ctx->op, ctx->attrs, "alpha", 1.0, &alpha));
  return ty_op_output_like(ctx, x);
}

static ty_status_t ty_scale_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  return ty_grad_emit1(ctx, "scale", &dy, 1, ctx->attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_scale = {
    .name = "scale", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_scale_attrs, .infer = ty_scale_infer,
    .grad = ty_scale_grad, .summary = "y = alpha * x"};

/* ---- broadcast_to ---- */

static const char *const ty_shape_attrs[] = {"shape", NULL};

/* Any dtype: broadcasting moves elements, it does no arithmetic. */
static ty_status_t ty_broadcast_to_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  const int64_t *shape;
  uint32_t rank;
  TY_RETURN_IF_ERROR(ty_op_attr_ints(ctx->op, ctx->attrs, "shape", &shape, &rank));
  for (uint32_t i = 0; i < rank; ++i) {
    if (shape[i] < 0) {
      return ty_op_error(ctx->op, "shape %s has a negative dimension",
                         TY_DIMS(rank, shape));
    }
  }
  uint32_t out_rank;
  int64_t dims[TY_TENSOR_MAX_RANK];
  bool ok = rank >= x->rank &&
            ty_op_broadcast_dims(x->rank, x->dims, rank, shape, &out_rank, dims);
  for (uint32_t i = 0; ok && i < rank; ++i) ok = dims[i] == shape[i];
  if (!ok) {
    return ty_op_error(ctx->op,
                       "x is %s: cannot broadcast to shape %s (aligned from "
                       "the right, each dimension of x must match or be 1)",
                       TY_DESC(x), TY_DIMS(rank, shape));
  }
  return ty_op_output(ctx, x->dtype, rank, shape);
}

static ty_status_t ty_broadcast_to_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  return ty_grad_sum_to(ctx, dy, ty_grad_input_desc(ctx, 0),
                        &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_broadcast_to = {
    .name = "broadcast_to", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_shape_attrs, .infer = ty_broadcast_to_infer,
    .grad = ty_broadcast_to_grad,
    .summary = "y = x broadcast (numpy rules) to the shape attribute"};
