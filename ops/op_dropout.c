/* Dropout with a counter-based (Philox) mask drawn from rng = (seed, step)
 * and a per-site stream, so the backward redraws the same mask instead of
 * storing it, and every backend draws identical masks. */
#include "ops/op_internal.h"

static const char *const ty_dropout_attrs[] = {"p", "stream", "seq_len", "seq_starts", NULL};

/* The Philox offset packs step·2¹⁶ + stream, so a stream must fit 16 bits. */
#define TY_DROPOUT_STREAMS 65536

static ty_status_t ty_dropout_check_attrs(const char *op,
                                          const ty_attrs_t *attrs) {
  double p;
  int64_t stream;
  TY_RETURN_IF_ERROR(ty_op_attr_require(op, attrs, "p"));
  TY_RETURN_IF_ERROR(ty_op_attr_require(op, attrs, "stream"));
  TY_RETURN_IF_ERROR(ty_op_attr_float(op, attrs, "p", 0.0, &p));
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "stream", 0, &stream));
  if (!(p >= 0 && p < 1)) {
    return ty_op_error(op, "attribute 'p' = %g must lie in [0, 1)", p);
  }
  if (stream < 0 || stream >= TY_DROPOUT_STREAMS) {
    return ty_op_error(op, "attribute 'stream' = %lld must lie in [0, %d)",
                       (long long)stream, TY_DROPOUT_STREAMS);
  }
  return TY_OK;
}

/* The global numbering of context parallel (docs/ops.md "Dropout"):
 * seq_len > 0 numbers x [A, n, ...] as the rows of a [A, seq_len, ...]
 * tensor, axis 1 being len(seq_starts) equal slices that begin at those
 * rows. Absent (0): x's own flat index, as always. */
static ty_status_t ty_dropout_check_numbering(const char *op, const ty_attrs_t *attrs,
                                              const ty_tensor_desc_t *x) {
  int64_t seq_len;
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "seq_len", 0, &seq_len));
  if (seq_len == 0) {
    if (ty_attrs_find(attrs, "seq_starts")) {
      return ty_op_error(op, "attribute 'seq_starts' needs 'seq_len' (the global length)");
    }
    return TY_OK;
  }
  const int64_t *starts;
  uint32_t count;
  TY_RETURN_IF_ERROR(ty_op_attr_ints(op, attrs, "seq_starts", &starts, &count));
  if (seq_len < 0 || x->rank < 2 || count == 0 || x->dims[1] % (int64_t)count != 0) {
    return ty_op_error(op,
                       "attribute 'seq_len' = %lld with %u seq_starts needs x of rank >= 2 whose "
                       "axis 1 splits into that many equal slices",
                       (long long)seq_len, count);
  }
  const int64_t m = x->dims[1] / (int64_t)count;
  for (uint32_t j = 0; j < count; ++j) {
    if (starts[j] < 0 || starts[j] > seq_len - m) {
      return ty_op_error(op, "seq_starts[%u] = %lld: a slice of %lld rows must lie in [0, %lld)",
                         j, (long long)starts[j], (long long)m, (long long)seq_len);
    }
  }
  return TY_OK;
}

/* dropout(x, rng) and dropout_backward(dy, rng) share one rule. */
static ty_status_t ty_dropout_infer_named(const ty_op_infer_ctx_t *ctx,
                                          const char *x_role) {
  const ty_tensor_desc_t *x, *rng;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, x_role, &x));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "rng", &rng));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, x_role, x));
  static const int64_t rng_dims[1] = {2};
  TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "rng", rng, TY_DTYPE_I64));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "rng", rng, 1, rng_dims,
                                       "seed, step"));
  TY_RETURN_IF_ERROR(ty_dropout_check_attrs(ctx->op, ctx->attrs));
  TY_RETURN_IF_ERROR(ty_dropout_check_numbering(ctx->op, ctx->attrs, x));
  return ty_op_output_like(ctx, x);
}

static ty_status_t ty_dropout_infer(const ty_op_infer_ctx_t *ctx) {
  return ty_dropout_infer_named(ctx, "x");
}

static ty_status_t ty_dropout_backward_infer(const ty_op_infer_ctx_t *ctx) {
  return ty_dropout_infer_named(ctx, "dy");
}

static ty_status_t ty_dropout_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_value_id_t ins[2] = {dy, ctx->inputs[1]};
  return ty_grad_emit1(ctx, "dropout_backward", ins, 2, ctx->attrs,
                       &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_dropout = {
    .name = "dropout", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_dropout_attrs, .infer = ty_dropout_infer,
    .grad = ty_dropout_grad,
    .summary = "y = x * mask / (1 - p), mask drawn by Philox from rng and stream"};
const ty_op_def_t ty_op_def_dropout_backward = {
    .name = "dropout_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_dropout_attrs, .infer = ty_dropout_backward_infer,
    .grad = NULL, .summary = "dx = dy * mask / (1 - p), the forward's mask"};
