/* matmul: c = op(a) @ op(b) + bias with optional transposes and broadcast
 * batch dimensions. Its gradient is two more matmuls whose transpose flags
 * are chosen so that no explicit transpose is ever materialized. */
#include "ops/op_internal.h"

static const char *const ty_matmul_attrs[] = {"trans_a", "trans_b", NULL};

typedef struct ty_matmul_shape_t {
  int64_t m, k, n;
  uint32_t batch_rank;
  int64_t batch[TY_TENSOR_MAX_RANK];
} ty_matmul_shape_t;

static ty_status_t ty_matmul_resolve(const char *op, const ty_tensor_desc_t *a,
                                     const ty_tensor_desc_t *b, bool ta,
                                     bool tb, ty_matmul_shape_t *out) {
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "a", a));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(op, "b", b, "a", a));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(op, "a", a, 2));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(op, "b", b, 2));
  int64_t a_rows = a->dims[a->rank - 2], a_cols = a->dims[a->rank - 1];
  int64_t b_rows = b->dims[b->rank - 2], b_cols = b->dims[b->rank - 1];
  out->m = ta ? a_cols : a_rows;
  out->k = ta ? a_rows : a_cols;
  out->n = tb ? b_rows : b_cols;
  int64_t kb = tb ? b_cols : b_rows;
  if (out->k != kb) {
    return ty_op_error(op,
                       "a is %s but b is %s: inner dimensions %lld and %lld "
                       "differ (trans_a=%d, trans_b=%d)",
                       TY_DESC(a), TY_DESC(b), (long long)out->k,
                       (long long)kb, (int)ta, (int)tb);
  }
  if (!ty_op_broadcast_dims(a->rank - 2, a->dims, b->rank - 2, b->dims,
                            &out->batch_rank, out->batch)) {
    return ty_op_error(op,
                       "a is %s but b is %s: batch dimensions %s and %s do "
                       "not broadcast",
                       TY_DESC(a), TY_DESC(b), TY_DIMS(a->rank - 2, a->dims),
                       TY_DIMS(b->rank - 2, b->dims));
  }
  return TY_OK;
}

static ty_status_t ty_matmul_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *a, *b;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "a", &a));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "b", &b));
  bool ta, tb;
  TY_RETURN_IF_ERROR(ty_op_attr_flag(ctx->op, ctx->attrs, "trans_a", 0, &ta));
  TY_RETURN_IF_ERROR(ty_op_attr_flag(ctx->op, ctx->attrs, "trans_b", 0, &tb));
  ty_matmul_shape_t s;
  TY_RETURN_IF_ERROR(ty_matmul_resolve(ctx->op, a, b, ta, tb, &s));
  const ty_tensor_desc_t *bias = ty_op_in(ctx, 2);
  if (bias) {
    TY_RETURN_IF_ERROR(ty_op_check_same_dtype(ctx->op, "bias", bias, "a", a));
    TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "bias", bias, 1, &s.n,
                                         "N, the columns of c"));
  }
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < s.batch_rank; ++i) dims[i] = s.batch[i];
  dims[s.batch_rank] = s.m;
  dims[s.batch_rank + 1] = s.n;
  return ty_op_output(ctx, a->dtype, s.batch_rank + 2, dims);
}

static ty_status_t ty_matmul_emit(const ty_grad_ctx_t *ctx, ty_value_id_t x,
                                  ty_value_id_t y, bool ta, bool tb,
                                  ty_value_id_t *out_value) {
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  if (ta) TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "trans_a", 1));
  if (tb) TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "trans_b", 1));
  const ty_value_id_t ins[2] = {x, y};
  return ty_grad_emit1(ctx, "matmul", ins, 2, &attrs, out_value);
}

/* Reshapes [..., R, C] to [prod(...)·R, C]. */
static ty_status_t ty_matmul_flatten(const ty_grad_ctx_t *ctx, ty_value_id_t v,
                                     ty_value_id_t *out_value) {
  const ty_tensor_desc_t *d = ty_grad_desc(ctx, v);
  int64_t rows = 1;
  for (uint32_t i = 0; i + 1 < d->rank; ++i) rows *= d->dims[i];
  const int64_t dims[2] = {rows, d->dims[d->rank - 1]};
  return ty_grad_reshape(ctx, v, 2, dims, out_value);
}

/* With A = op(a), B = op(b): dA = dc·Bᵀ and dB = Aᵀ·dc. When a is stored
 * transposed (a = Aᵀ) its gradient is dAᵀ = B·dcᵀ; likewise db = dcᵀ·A when
 * b = Bᵀ. Each case maps onto one matmul with the right flags. */
static ty_status_t ty_matmul_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dc = ctx->output_grads[0];
  if (dc == TY_VALUE_NONE || !ty_grad_wants_any(ctx)) return TY_OK;
  bool ta, tb;
  TY_RETURN_IF_ERROR(ty_op_attr_flag(ctx->op, ctx->attrs, "trans_a", 0, &ta));
  TY_RETURN_IF_ERROR(ty_op_attr_flag(ctx->op, ctx->attrs, "trans_b", 0, &tb));
  ty_value_id_t a = ctx->inputs[0], b = ctx->inputs[1];
  /* Copies: the emits below may move the descriptors. */
  const ty_tensor_desc_t a_desc = *ty_grad_input_desc(ctx, 0);
  const ty_tensor_desc_t b_desc = *ty_grad_input_desc(ctx, 1);

  if (ty_grad_wants(ctx, 0)) {
    ty_value_id_t da;
    if (!ta) {
      TY_RETURN_IF_ERROR(ty_matmul_emit(ctx, dc, b, false, !tb, &da));
    } else {
      TY_RETURN_IF_ERROR(ty_matmul_emit(ctx, b, dc, tb, true, &da));
    }
    TY_RETURN_IF_ERROR(ty_grad_sum_to(ctx, da, &a_desc, &ctx->input_grads[0]));
  }

  if (ty_grad_wants(ctx, 1)) {
    ty_value_id_t lhs = a, grad = dc;
    if (!ta && b_desc.rank == 2 && a_desc.rank > 2) {
      /* A shared weight under batched activations (x[B,T,K] @ w[K,N]):
       * folding the batch into the rows makes db one [K,N] matmul instead
       * of a [B,K,N] product reduced over B. */
      TY_RETURN_IF_ERROR(ty_matmul_flatten(ctx, a, &lhs));
      TY_RETURN_IF_ERROR(ty_matmul_flatten(ctx, dc, &grad));
    }
    ty_value_id_t db;
    if (!tb) {
      TY_RETURN_IF_ERROR(ty_matmul_emit(ctx, lhs, grad, !ta, false, &db));
    } else {
      TY_RETURN_IF_ERROR(ty_matmul_emit(ctx, grad, lhs, true, ta, &db));
    }
    TY_RETURN_IF_ERROR(ty_grad_sum_to(ctx, db, &b_desc, &ctx->input_grads[1]));
  }

  if (ty_grad_wants(ctx, 2)) {
    /* dbias: dc summed over every axis but the last. */
    const ty_tensor_desc_t *dc_desc = ty_grad_desc(ctx, dc);
    int64_t axes[TY_TENSOR_MAX_RANK];
    for (uint32_t i = 0; i + 1 < dc_desc->rank; ++i) axes[i] = i;
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    TY_RETURN_IF_ERROR(
        ty_attrs_set_ints(&attrs, "axes", axes, dc_desc->rank - 1));
    TY_RETURN_IF_ERROR(ty_grad_emit1(ctx, "reduce_sum", &dc, 1, &attrs,
                                     &ctx->input_grads[2]));
  }
  return TY_OK;
}

const ty_op_def_t ty_op_def_matmul = {
    .name = "matmul", .min_inputs = 2, .max_inputs = 3,
    .attr_names = ty_matmul_attrs, .infer = ty_matmul_infer,
    .grad = ty_matmul_grad,
    .summary = "c = op(a) @ op(b) + bias, batch dimensions broadcast"};
