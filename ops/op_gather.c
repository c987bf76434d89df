/* The gathers of context parallel (issue 31): each rank of the "cp" group
 * holds its own slices of every sequence, and attention needs the keys and
 * values of all of them.
 *
 * all_gather(x) -> y: y concatenates, along `axis`, the x of every rank of
 * the group in group-rank order; `parts` is the group's size (the shape of
 * y cannot wait for the run), checked by the executor against the run's
 * group. At world 1 (parts 1) it is the identity.
 *   Gradient: the loss differentiated is the SUM of the ranks' losses
 *   (each covers its own tokens), and rank s's y holds rank r's x in part
 *   r, so dL/dx_r = sum over s of part r of dL/dy_s: reduce_scatter(dy).
 *
 * reduce_scatter(x) -> y: x's `axis` holds `parts` equal parts; y is part
 * (this rank's group rank) of the sum of x over the group.
 *   Gradient: y_r = sum over s of part r of x_s, so dL/dx_s, part r, is
 *   dL/dy_r: all_gather(dy). */
#include "ops/op_internal.h"

static const char *const ty_gather_attrs[] = {"group", "axis", "parts", NULL};

/* x float of rank >= 1; axis in range; parts >= 1. */
static ty_status_t ty_gather_check(const ty_op_infer_ctx_t *ctx, const ty_tensor_desc_t **out_x,
                                   int64_t *out_axis, int64_t *out_parts) {
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", out_x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", *out_x));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(ctx->op, "x", *out_x, 1));
  TY_RETURN_IF_ERROR(ty_collective_group(ctx, "cp"));
  TY_RETURN_IF_ERROR(ty_op_attr_int(ctx->op, ctx->attrs, "axis", 0, out_axis));
  TY_RETURN_IF_ERROR(ty_op_attr_int(ctx->op, ctx->attrs, "parts", 1, out_parts));
  const int64_t rank = (int64_t)(*out_x)->rank;
  if (*out_axis < 0 || *out_axis >= rank) {
    return ty_op_error(ctx->op, "attribute 'axis' = %lld must lie in [0, %lld) for x of rank %lld",
                       (long long)*out_axis, (long long)rank, (long long)rank);
  }
  if (*out_parts < 1 || *out_parts > 65536) {
    return ty_op_error(ctx->op, "attribute 'parts' = %lld must lie in [1, 65536] (the group's "
                       "ranks)", (long long)*out_parts);
  }
  return TY_OK;
}

static ty_status_t ty_all_gather_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  int64_t axis, parts;
  TY_RETURN_IF_ERROR(ty_gather_check(ctx, &x, &axis, &parts));
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < x->rank; ++i) dims[i] = x->dims[i];
  if (dims[axis] > INT64_MAX / parts) {
    return ty_op_error(ctx->op, "x's axis %lld (%lld) times %lld parts overflows",
                       (long long)axis, (long long)dims[axis], (long long)parts);
  }
  dims[axis] *= parts;
  return ty_op_output(ctx, x->dtype, x->rank, dims);
}

static ty_status_t ty_reduce_scatter_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  int64_t axis, parts;
  TY_RETURN_IF_ERROR(ty_gather_check(ctx, &x, &axis, &parts));
  if (x->dims[axis] % parts != 0) {
    return ty_op_error(ctx->op, "x's axis %lld (%lld) does not split into %lld equal parts",
                       (long long)axis, (long long)x->dims[axis], (long long)parts);
  }
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < x->rank; ++i) dims[i] = x->dims[i];
  dims[axis] /= parts;
  return ty_op_output(ctx, x->dtype, x->rank, dims);
}

static ty_status_t ty_all_gather_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  return ty_grad_emit1(ctx, "reduce_scatter", &dy, 1, ctx->attrs, &ctx->input_grads[0]);
}

static ty_status_t ty_reduce_scatter_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  return ty_grad_emit1(ctx, "all_gather", &dy, 1, ctx->attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_all_gather = {
    .name = "all_gather", .min_inputs = 1, .max_inputs = 1, .communicates = true,
    .attr_names = ty_gather_attrs, .infer = ty_all_gather_infer, .grad = ty_all_gather_grad,
    .summary = "y = the group's x concatenated along axis in rank order; identity at world 1"};
const ty_op_def_t ty_op_def_reduce_scatter = {
    .name = "reduce_scatter", .min_inputs = 1, .max_inputs = 1, .communicates = true,
    .attr_names = ty_gather_attrs, .infer = ty_reduce_scatter_infer,
    .grad = ty_reduce_scatter_grad,
    .summary = "y = this rank's part along axis of the sum of x over the group"};
