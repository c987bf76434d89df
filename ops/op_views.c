/* Type and layout ops: cast, reshape, transpose, slice (and slice_backward,
 * its zero-padding adjoint), concat. Except for cast's arithmetic, they move
 * elements and accept any dtype; integer inputs simply get no gradient. */
#include <stdio.h>
#include <string.h>

#include "ops/op_internal.h"

/* ---- cast ---- */

static const char *const ty_cast_attrs[] = {"dtype", NULL};

static ty_status_t ty_cast_target(const char *op, const ty_attrs_t *attrs,
                                  ty_dtype_t *out_dtype) {
  const char *name;
  TY_RETURN_IF_ERROR(ty_op_attr_require(op, attrs, "dtype"));
  TY_RETURN_IF_ERROR(ty_op_attr_string(op, attrs, "dtype", "", &name));
  return ty_status_annotate(ty_dtype_parse(name, out_dtype),
                            "%s: attribute 'dtype'", op);
}

static ty_status_t ty_cast_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  ty_dtype_t dtype;
  TY_RETURN_IF_ERROR(ty_cast_target(ctx->op, ctx->attrs, &dtype));
  return ty_op_output(ctx, dtype, x->rank, x->dims);
}

/* A float-to-float cast is differentiable (the identity up to rounding);
 * the gradient is cast back to x's dtype. From an integer y no gradient
 * flows, and an integer x takes none. */
static ty_status_t ty_cast_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  if (!ty_dtype_is_float(ty_grad_desc(ctx, dy)->dtype)) return TY_OK;
  ty_dtype_t x_dtype = ty_grad_input_desc(ctx, 0)->dtype;
  if (ty_grad_desc(ctx, dy)->dtype == x_dtype) {
    ctx->input_grads[0] = dy;
    return TY_OK;
  }
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(
      ty_attrs_set_string(&attrs, "dtype", ty_dtype_name(x_dtype)));
  return ty_grad_emit1(ctx, "cast", &dy, 1, &attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_cast = {
    .name = "cast", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_cast_attrs, .infer = ty_cast_infer,
    .grad = ty_cast_grad,
    .summary = "y = x converted to the dtype attribute (round to nearest even)"};

/* ---- reshape ---- */

static const char *const ty_reshape_attrs[] = {"shape", NULL};

static ty_status_t ty_reshape_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  const int64_t *shape;
  uint32_t rank;
  TY_RETURN_IF_ERROR(ty_op_attr_ints(ctx->op, ctx->attrs, "shape", &shape, &rank));
  int64_t dims[TY_TENSOR_MAX_RANK];
  int64_t known = 1;
  int infer_axis = -1;
  for (uint32_t i = 0; i < rank; ++i) {
    dims[i] = shape[i];
    if (shape[i] == -1 && infer_axis < 0) {
      infer_axis = (int)i;
    } else if (shape[i] < 0) {
      return ty_op_error(ctx->op,
                         "shape %s: dimensions must be >= 0, with at most "
                         "one -1",
                         TY_DIMS(rank, shape));
    } else if (shape[i] > 0 && known > INT64_MAX / shape[i]) {
      return ty_op_error(ctx->op, "shape %s has too many elements",
                         TY_DIMS(rank, shape));
    } else {
      known *= shape[i];
    }
  }
  int64_t count = ty_tensor_desc_element_count(x);
  if (infer_axis >= 0) {
    if (known == 0 || count % known != 0) {
      return ty_op_error(ctx->op,
                         "x is %s (%lld elements): cannot infer the -1 in "
                         "shape %s",
                         TY_DESC(x), (long long)count, TY_DIMS(rank, shape));
    }
    dims[infer_axis] = count / known;
  } else if (known != count) {
    return ty_op_error(ctx->op,
                       "x is %s (%lld elements) but shape %s has %lld",
                       TY_DESC(x), (long long)count, TY_DIMS(rank, shape),
                       (long long)known);
  }
  return ty_op_output(ctx, x->dtype, rank, dims);
}

static ty_status_t ty_reshape_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_tensor_desc_t *x = ty_grad_input_desc(ctx, 0);
  return ty_grad_reshape(ctx, dy, x->rank, x->dims, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_reshape = {
    .name = "reshape", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_reshape_attrs, .infer = ty_reshape_infer,
    .grad = ty_reshape_grad,
    .summary = "y = x with the shape attribute (one -1 inferred)"};

/* ---- transpose ---- */

static const char *const ty_transpose_attrs[] = {"perm", NULL};

static ty_status_t ty_transpose_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  const int64_t *perm;
  uint32_t count;
  TY_RETURN_IF_ERROR(ty_op_attr_ints(ctx->op, ctx->attrs, "perm", &perm, &count));
  uint32_t seen = 0;
  bool ok = count == x->rank;
  for (uint32_t i = 0; ok && i < count; ++i) {
    ok = perm[i] >= 0 && perm[i] < (int64_t)x->rank && !(seen & (1u << perm[i]));
    if (ok) seen |= 1u << perm[i];
  }
  if (!ok) {
    return ty_op_error(ctx->op,
                       "x is %s: perm %s is not a permutation of its %u axes",
                       TY_DESC(x), TY_DIMS(count, perm), x->rank);
  }
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < count; ++i) dims[i] = x->dims[perm[i]];
  return ty_op_output(ctx, x->dtype, x->rank, dims);
}

static ty_status_t ty_transpose_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const int64_t *perm;
  uint32_t count;
  TY_RETURN_IF_ERROR(ty_op_attr_ints(ctx->op, ctx->attrs, "perm", &perm, &count));
  int64_t inverse[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < count; ++i) {
    if (perm[i] < 0 || perm[i] >= (int64_t)count) {
      return ty_op_error(ctx->op, "perm %s is not a permutation",
                         TY_DIMS(count, perm));
    }
    inverse[perm[i]] = i;
  }
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "perm", inverse, count));
  return ty_grad_emit1(ctx, "transpose", &dy, 1, &attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_transpose = {
    .name = "transpose", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_transpose_attrs, .infer = ty_transpose_infer,
    .grad = ty_transpose_grad,
    .summary = "y = x with axes permuted: y.dims[i] = x.dims[perm[i]]"};

/* ---- slice and slice_backward ---- */

static const char *const ty_slice_attrs[] = {"starts", "sizes", NULL};
static const char *const ty_slice_backward_attrs[] = {"shape", "starts", NULL};

/* Checks that the box starts[i] .. starts[i] + sizes[i] lies inside `dims`;
 * `role` names the tensor being indexed. */
static ty_status_t ty_slice_check_box(const char *op, const char *role,
                                      const ty_tensor_desc_t *d,
                                      uint32_t rank, const int64_t *dims,
                                      const int64_t *starts,
                                      const int64_t *sizes) {
  for (uint32_t i = 0; i < rank; ++i) {
    if (starts[i] < 0 || sizes[i] < 0 || starts[i] > dims[i] - sizes[i]) {
      return ty_op_error(op,
                         "%s is %s: on axis %u, [%lld, %lld + %lld) does not "
                         "fit in %lld (starts %s)",
                         role, TY_DESC(d), i, (long long)starts[i],
                         (long long)starts[i], (long long)sizes[i],
                         (long long)dims[i], TY_DIMS(rank, starts));
    }
  }
  return TY_OK;
}

/* A per-axis list attribute must have one entry per axis of `d`. */
static ty_status_t ty_slice_list(const char *op, const ty_attrs_t *attrs,
                                 const char *name, const char *role,
                                 const ty_tensor_desc_t *d,
                                 const int64_t **out_values) {
  uint32_t count;
  TY_RETURN_IF_ERROR(ty_op_attr_ints(op, attrs, name, out_values, &count));
  if (count == d->rank) return TY_OK;
  return ty_op_error(op,
                     "attribute '%s' has %u entries but %s is %s (rank %u): "
                     "expected one per axis",
                     name, count, role, TY_DESC(d), d->rank);
}

static ty_status_t ty_slice_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  const int64_t *starts, *sizes;
  TY_RETURN_IF_ERROR(ty_slice_list(ctx->op, ctx->attrs, "starts", "x", x, &starts));
  TY_RETURN_IF_ERROR(ty_slice_list(ctx->op, ctx->attrs, "sizes", "x", x, &sizes));
  TY_RETURN_IF_ERROR(
      ty_slice_check_box(ctx->op, "x", x, x->rank, x->dims, starts, sizes));
  return ty_op_output(ctx, x->dtype, x->rank, sizes);
}

static ty_status_t ty_slice_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dy;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dy", &dy));
  const int64_t *shape, *starts;
  TY_RETURN_IF_ERROR(ty_slice_list(ctx->op, ctx->attrs, "shape", "dy", dy, &shape));
  TY_RETURN_IF_ERROR(ty_slice_list(ctx->op, ctx->attrs, "starts", "dy", dy, &starts));
  TY_RETURN_IF_ERROR(
      ty_slice_check_box(ctx->op, "dy", dy, dy->rank, shape, starts, dy->dims));
  return ty_op_output(ctx, dy->dtype, dy->rank, shape);
}

static ty_status_t ty_slice_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_tensor_desc_t *x = ty_grad_input_desc(ctx, 0);
  const int64_t *starts;
  uint32_t count;
  TY_RETURN_IF_ERROR(
      ty_op_attr_ints(ctx->op, ctx->attrs, "starts", &starts, &count));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "shape", x->dims, x->rank));
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "starts", starts, count));
  return ty_grad_emit1(ctx, "slice_backward", &dy, 1, &attrs,
                       &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_slice = {
    .name = "slice", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_slice_attrs, .infer = ty_slice_infer,
    .grad = ty_slice_grad,
    .summary = "y = x[starts[i] : starts[i] + sizes[i]] on every axis"};
const ty_op_def_t ty_op_def_slice_backward = {
    .name = "slice_backward", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_slice_backward_attrs, .infer = ty_slice_backward_infer,
    .grad = NULL,
    .summary = "dx of shape `shape`: zeros with dy placed at starts"};

/* ---- concat ---- */

static const char *const ty_concat_attrs[] = {"axis", NULL};

static ty_status_t ty_concat_axis(const char *op, const ty_attrs_t *attrs,
                                  const ty_tensor_desc_t *x0,
                                  uint32_t *out_axis) {
  int64_t axis;
  TY_RETURN_IF_ERROR(ty_op_attr_require(op, attrs, "axis"));
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "axis", 0, &axis));
  int64_t a = axis < 0 ? axis + (int64_t)x0->rank : axis;
  if (a < 0 || a >= (int64_t)x0->rank) {
    return ty_op_error(op, "axis %lld is out of range for x1 %s (rank %u)",
                       (long long)axis, TY_DESC(x0), x0->rank);
  }
  *out_axis = (uint32_t)a;
  return TY_OK;
}

static ty_status_t ty_concat_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x0;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x1", &x0));
  uint32_t axis;
  TY_RETURN_IF_ERROR(ty_concat_axis(ctx->op, ctx->attrs, x0, &axis));
  int64_t dims[TY_TENSOR_MAX_RANK];
  memcpy(dims, x0->dims, sizeof(dims));
  for (uint32_t i = 1; i < ctx->input_count; ++i) {
    char role[24];
    snprintf(role, sizeof(role), "x%u", i + 1);
    const ty_tensor_desc_t *x;
    TY_RETURN_IF_ERROR(ty_op_need(ctx, i, role, &x));
    TY_RETURN_IF_ERROR(ty_op_check_same_dtype(ctx->op, role, x, "x1", x0));
    bool ok = x->rank == x0->rank;
    for (uint32_t d = 0; ok && d < x->rank; ++d) {
      ok = d == axis || x->dims[d] == x0->dims[d];
    }
    if (!ok) {
      return ty_op_error(ctx->op,
                         "%s is %s but x1 is %s: shapes must match except on "
                         "axis %u",
                         role, TY_DESC(x), TY_DESC(x0), axis);
    }
    dims[axis] += x->dims[axis];
  }
  return ty_op_output(ctx, x0->dtype, x0->rank, dims);
}

/* Each input's gradient is its slab of dy along the axis. */
static ty_status_t ty_concat_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants_any(ctx)) return TY_OK;
  uint32_t axis;
  TY_RETURN_IF_ERROR(
      ty_concat_axis(ctx->op, ctx->attrs, ty_grad_input_desc(ctx, 0), &axis));
  int64_t offset = 0;
  for (uint32_t i = 0; i < ctx->input_count; ++i) {
    /* A copy: the slice emitted below may move the descriptor. */
    const ty_tensor_desc_t x_copy = *ty_grad_input_desc(ctx, i);
    const ty_tensor_desc_t *x = &x_copy;
    if (ty_grad_wants(ctx, i)) {
      int64_t starts[TY_TENSOR_MAX_RANK] = {0};
      starts[axis] = offset;
      ty_attrs_t attrs = TY_ATTRS_EMPTY;
      TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "starts", starts, x->rank));
      TY_RETURN_IF_ERROR(ty_attrs_set_ints(&attrs, "sizes", x->dims, x->rank));
      TY_RETURN_IF_ERROR(
          ty_grad_emit1(ctx, "slice", &dy, 1, &attrs, &ctx->input_grads[i]));
    }
    offset += x->dims[axis];
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_concat = {
    .name = "concat", .min_inputs = 1, .max_inputs = TY_OP_VARIADIC,
    .attr_names = ty_concat_attrs, .infer = ty_concat_infer,
    .grad = ty_concat_grad, .summary = "y = x1 ... xn joined along axis"};
