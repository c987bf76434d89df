/* Token embeddings: embedding gathers rows of a table by id, and
 * embedding_backward scatter-adds gradients back into a table of V rows. */
#include "ops/op_internal.h"

static ty_status_t ty_embedding_check_ids(const char *op,
                                          const ty_tensor_desc_t *ids) {
  TY_RETURN_IF_ERROR(ty_op_check_int(op, "ids", ids));
  if (ids->rank < TY_TENSOR_MAX_RANK) return TY_OK;
  return ty_op_error(op, "ids is %s: rank must be below %d (the result adds D)",
                     TY_DESC(ids), TY_TENSOR_MAX_RANK);
}

static ty_status_t ty_embedding_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *table, *ids;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "table", &table));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "ids", &ids));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "table", table));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "table", table, 2));
  TY_RETURN_IF_ERROR(ty_embedding_check_ids(ctx->op, ids));
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < ids->rank; ++i) dims[i] = ids->dims[i];
  dims[ids->rank] = table->dims[1];
  return ty_op_output(ctx, table->dtype, ids->rank + 1, dims);
}

static const char *const ty_embedding_backward_attrs[] = {"vocab_size", NULL};

/* embedding_backward(dout [..., D], ids [...]) -> dtable [vocab_size, D] */
static ty_status_t ty_embedding_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dout, *ids;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dout", &dout));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "ids", &ids));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "dout", dout));
  TY_RETURN_IF_ERROR(ty_embedding_check_ids(ctx->op, ids));
  if (dout->rank != ids->rank + 1) {
    return ty_op_error(ctx->op,
                       "dout is %s but ids is %s: expected dout to be ids' "
                       "shape plus a last dimension D",
                       TY_DESC(dout), TY_DESC(ids));
  }
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "ids", ids, ids->rank,
                                       dout->dims,
                                       "dout's shape without its last dimension"));
  int64_t vocab;
  TY_RETURN_IF_ERROR(ty_op_attr_require(ctx->op, ctx->attrs, "vocab_size"));
  TY_RETURN_IF_ERROR(ty_op_attr_int(ctx->op, ctx->attrs, "vocab_size", 0, &vocab));
  if (vocab <= 0) {
    return ty_op_error(ctx->op, "attribute 'vocab_size' = %lld must be > 0",
                       (long long)vocab);
  }
  const int64_t dims[2] = {vocab, dout->dims[dout->rank - 1]};
  return ty_op_output(ctx, dout->dtype, 2, dims);
}

/* dtable is a scatter-add of dout by id; ids are integers and get none. */
static ty_status_t ty_embedding_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dout = ctx->output_grads[0];
  if (dout == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "vocab_size",
                                      ty_grad_input_desc(ctx, 0)->dims[0]));
  const ty_value_id_t ins[2] = {dout, ctx->inputs[1]};
  return ty_grad_emit1(ctx, "embedding_backward", ins, 2, &attrs,
                       &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_embedding = {
    .name = "embedding", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_op_no_attrs, .infer = ty_embedding_infer,
    .grad = ty_embedding_grad,
    .summary = "out[n, :] = table[ids[n], :]"};
const ty_op_def_t ty_op_def_embedding_backward = {
    .name = "embedding_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_embedding_backward_attrs,
    .infer = ty_embedding_backward_infer, .grad = NULL,
    .summary = "dtable[v] = sum of dout[n] over ids[n] = v (scatter-add)"};
