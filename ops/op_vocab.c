/* Vocabulary-parallel ops (issue 17; docs/design-notes.md "Tensor parallel"):
 * the embedding lookup and the cross-entropy of one rank's shard of the
 * vocabulary, rows [vocab_start, vocab_start + vocab_valid) of the whole
 * one, held in a table (or a logits axis) of Vp >= vocab_valid rows whose
 * tail is padding. None of them communicates: the model puts tp_reduce
 * between them, so the host executors see every collective as one.
 *
 *   vocab_embedding(table [Vp, D], ids [...]) -> out [..., D]:
 *     table[id - start] for an id of the shard, 0 for any other id; the
 *     sum over the tp ranks (tp_reduce) is the whole lookup.
 *   vocab_max(logits [..., Vp]) -> m [...]: the max over the shard's real
 *     columns; after tp_reduce(max), the stability shift of the softmax.
 *     The loss does not depend on the shift: m's gradients cancel over the
 *     ranks, and tp_reduce max passes none on (ops/op_collective.c).
 *   vocab_ce_sums(logits [..., Vp], targets [...], m [...]) -> sums [..., 2]:
 *     sum over the shard's real columns of exp(logit - m), and logit[t] - m
 *     where the target t is in the shard (0 elsewhere); tp_reduce(sum) gives
 *     the whole vocabulary's.
 *   vocab_ce_loss(sums [..., 2], targets [...]) -> loss [...]:
 *     log(sums[0]) - sums[1], 0 for an ignored (negative) target; attribute
 *     vocab_size (the whole V) rejects targets past the vocabulary.
 * Padded columns count nowhere (as if masked to -inf), so their gradient is
 * 0 and padded rows of a head or embedding stay zero. */
#include "ops/op_internal.h"

static const char *const ty_vocab_attrs[] = {"vocab_start", "vocab_valid", NULL};
static const char *const ty_vocab_emb_bwd_attrs[] = {"vocab_start", "vocab_valid",
                                                     "vocab_size", NULL};
static const char *const ty_vocab_loss_attrs[] = {"vocab_size", NULL};

/* vocab_start >= 0 (required when `need_start`), 0 < vocab_valid <= rows. */
static ty_status_t ty_vocab_range(const char *op, const ty_attrs_t *attrs, bool need_start,
                                  int64_t rows) {
  int64_t start = 0, valid;
  if (need_start) {
    TY_RETURN_IF_ERROR(ty_op_attr_require(op, attrs, "vocab_start"));
    TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "vocab_start", 0, &start));
  }
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, attrs, "vocab_valid", rows, &valid));
  if (start < 0) return ty_op_error(op, "attribute 'vocab_start' = %lld must be >= 0", (long long)start);
  if (valid < 1 || valid > rows) {
    return ty_op_error(op, "attribute 'vocab_valid' = %lld must lie in [1, %lld], the "
                       "shard's rows", (long long)valid, (long long)rows);
  }
  return TY_OK;
}

/* ---- vocab_embedding ---- */

static ty_status_t ty_vocab_embedding_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *table, *ids;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "table", &table));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "ids", &ids));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "table", table));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "table", table, 2));
  TY_RETURN_IF_ERROR(ty_op_check_int(ctx->op, "ids", ids));
  if (ids->rank >= TY_TENSOR_MAX_RANK) {
    return ty_op_error(ctx->op, "ids is %s: rank must be below %d (the result adds D)",
                       TY_DESC(ids), TY_TENSOR_MAX_RANK);
  }
  TY_RETURN_IF_ERROR(ty_vocab_range(ctx->op, ctx->attrs, true, table->dims[0]));
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i < ids->rank; ++i) dims[i] = ids->dims[i];
  dims[ids->rank] = table->dims[1];
  return ty_op_output(ctx, table->dtype, ids->rank + 1, dims);
}

/* vocab_embedding_backward(dout [..., D], ids [...]) -> dtable [vocab_size, D] */
static ty_status_t ty_vocab_embedding_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dout, *ids;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dout", &dout));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "ids", &ids));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "dout", dout));
  TY_RETURN_IF_ERROR(ty_op_check_int(ctx->op, "ids", ids));
  if (dout->rank != ids->rank + 1) {
    return ty_op_error(ctx->op, "dout is %s but ids is %s: expected dout to be ids' shape "
                       "plus a last dimension D", TY_DESC(dout), TY_DESC(ids));
  }
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "ids", ids, ids->rank, dout->dims,
                                       "dout's shape without its last dimension"));
  int64_t rows;
  TY_RETURN_IF_ERROR(ty_op_attr_require(ctx->op, ctx->attrs, "vocab_size"));
  TY_RETURN_IF_ERROR(ty_op_attr_int(ctx->op, ctx->attrs, "vocab_size", 0, &rows));
  if (rows <= 0) {
    return ty_op_error(ctx->op, "attribute 'vocab_size' = %lld must be > 0", (long long)rows);
  }
  TY_RETURN_IF_ERROR(ty_vocab_range(ctx->op, ctx->attrs, true, rows));
  const int64_t dims[2] = {rows, dout->dims[dout->rank - 1]};
  return ty_op_output(ctx, dout->dtype, 2, dims);
}

/* The gradient lands on the shard's rows only (the other ranks' lookups
 * never read them), and the padding keeps a zero gradient. */
static ty_status_t ty_vocab_embedding_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dout = ctx->output_grads[0];
  if (dout == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const int64_t rows = ty_grad_input_desc(ctx, 0)->dims[0];
  int64_t start = 0, valid = rows;
  TY_RETURN_IF_ERROR(ty_attrs_get_int(ctx->attrs, "vocab_start", 0, &start));
  TY_RETURN_IF_ERROR(ty_attrs_get_int(ctx->attrs, "vocab_valid", rows, &valid));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "vocab_start", start));
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "vocab_valid", valid));
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "vocab_size", rows));
  const ty_value_id_t ins[2] = {dout, ctx->inputs[1]};
  return ty_grad_emit1(ctx, "vocab_embedding_backward", ins, 2, &attrs, &ctx->input_grads[0]);
}

/* ---- the loss ---- */

/* logits [..., Vp] float; `targets`, when given, int of logits' shape
 * without the last axis. */
static ty_status_t ty_vocab_logits(const ty_op_infer_ctx_t *ctx, uint32_t at,
                                   const ty_tensor_desc_t **out_logits,
                                   const ty_tensor_desc_t *targets) {
  const ty_tensor_desc_t *logits;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, at, "logits", &logits));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "logits", logits));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(ctx->op, "logits", logits, 1));
  if (targets) {
    TY_RETURN_IF_ERROR(ty_op_check_int(ctx->op, "targets", targets));
    TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "targets", targets, logits->rank - 1,
                                         logits->dims, "logits' shape without the last axis"));
  }
  *out_logits = logits;
  return TY_OK;
}

/* A per-token statistic `role` of logits' shape without the last axis
 * (plus a last axis of 2 when `pair`), in the statistics dtype. */
static ty_status_t ty_vocab_stat(const char *op, const char *role, const ty_tensor_desc_t *x,
                                 const ty_tensor_desc_t *logits, bool pair) {
  TY_RETURN_IF_ERROR(ty_op_check_dtype(op, role, x, ty_op_stat_dtype(logits->dtype)));
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i + 1 < logits->rank; ++i) dims[i] = logits->dims[i];
  dims[logits->rank - 1] = 2;
  return ty_op_check_shape(op, role, x, logits->rank - (pair ? 0 : 1), dims,
                           pair ? "logits' shape with a last axis of 2"
                                : "logits' shape without the last axis");
}

static ty_status_t ty_vocab_max_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *logits;
  TY_RETURN_IF_ERROR(ty_vocab_logits(ctx, 0, &logits, NULL));
  TY_RETURN_IF_ERROR(ty_vocab_range(ctx->op, ctx->attrs, false, logits->dims[logits->rank - 1]));
  return ty_op_output(ctx, ty_op_stat_dtype(logits->dtype), logits->rank - 1, logits->dims);
}

/* The max's own derivative: dy at the first column that attains it. In the
 * model no gradient reaches it (tp_reduce max passes zero), but the op is
 * differentiable on its own like any other. */
static ty_status_t ty_vocab_max_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_value_id_t ins[3] = {dy, ctx->inputs[0], ctx->outputs[0]};
  return ty_grad_emit1(ctx, "vocab_max_backward", ins, 3, ctx->attrs, &ctx->input_grads[0]);
}

/* vocab_max_backward(dy, logits, m) -> dlogits */
static ty_status_t ty_vocab_max_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dy, *logits, *m;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dy", &dy));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "m", &m));
  TY_RETURN_IF_ERROR(ty_vocab_logits(ctx, 1, &logits, NULL));
  TY_RETURN_IF_ERROR(ty_vocab_stat(ctx->op, "dy", dy, logits, false));
  TY_RETURN_IF_ERROR(ty_vocab_stat(ctx->op, "m", m, logits, false));
  TY_RETURN_IF_ERROR(ty_vocab_range(ctx->op, ctx->attrs, false, logits->dims[logits->rank - 1]));
  return ty_op_output_like(ctx, logits);
}

/* vocab_ce_sums(logits, targets, m) -> sums;
 * vocab_ce_sums_backward(dsums, logits, targets, m) -> dlogits */
static ty_status_t ty_vocab_sums_check(const ty_op_infer_ctx_t *ctx, uint32_t at,
                                       const ty_tensor_desc_t **out_logits) {
  const ty_tensor_desc_t *targets, *m;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, at + 1, "targets", &targets));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, at + 2, "m", &m));
  TY_RETURN_IF_ERROR(ty_vocab_logits(ctx, at, out_logits, targets));
  TY_RETURN_IF_ERROR(ty_vocab_stat(ctx->op, "m", m, *out_logits, false));
  const ty_tensor_desc_t *l = *out_logits;
  return ty_vocab_range(ctx->op, ctx->attrs, true, l->dims[l->rank - 1]);
}

static ty_status_t ty_vocab_ce_sums_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *logits;
  TY_RETURN_IF_ERROR(ty_vocab_sums_check(ctx, 0, &logits));
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (uint32_t i = 0; i + 1 < logits->rank; ++i) dims[i] = logits->dims[i];
  dims[logits->rank - 1] = 2;
  return ty_op_output(ctx, ty_op_stat_dtype(logits->dtype), logits->rank, dims);
}

static ty_status_t ty_vocab_ce_sums_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dsums, *logits;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dsums", &dsums));
  TY_RETURN_IF_ERROR(ty_vocab_sums_check(ctx, 1, &logits));
  TY_RETURN_IF_ERROR(ty_vocab_stat(ctx->op, "dsums", dsums, logits, true));
  TY_RETURN_IF_ERROR(ty_op_output_like(ctx, logits));
  return ty_op_output(ctx, dsums->dtype, logits->rank - 1, logits->dims);
}

/* m's own derivative is -(dsums[0] sums[0] + dsums[1] [t in shard]); in
 * the model it cancels over the ranks (the loss does not depend on the
 * shift) and tp_reduce max passes zero on. */
static ty_status_t ty_vocab_ce_sums_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dsums = ctx->output_grads[0];
  if (dsums == TY_VALUE_NONE || (!ty_grad_wants(ctx, 0) && !ty_grad_wants(ctx, 2))) {
    return TY_OK;
  }
  const ty_value_id_t ins[4] = {dsums, ctx->inputs[0], ctx->inputs[1], ctx->inputs[2]};
  ty_value_id_t outs[2];
  TY_RETURN_IF_ERROR(ty_grad_emit(ctx, "vocab_ce_sums_backward", ins, 4, ctx->attrs, outs, 2));
  if (ty_grad_wants(ctx, 0)) ctx->input_grads[0] = outs[0];
  if (ty_grad_wants(ctx, 2)) ctx->input_grads[2] = outs[1];
  return TY_OK;
}

/* vocab_ce_loss(sums, targets) -> loss;
 * vocab_ce_loss_backward(dloss, sums, targets) -> dsums */
static ty_status_t ty_vocab_loss_check(const ty_op_infer_ctx_t *ctx, uint32_t at,
                                       const ty_tensor_desc_t **out_sums) {
  const ty_tensor_desc_t *sums, *targets;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, at, "sums", &sums));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, at + 1, "targets", &targets));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "sums", sums));
  TY_RETURN_IF_ERROR(ty_op_check_min_rank(ctx->op, "sums", sums, 1));
  if (sums->dims[sums->rank - 1] != 2) {
    return ty_op_error(ctx->op, "sums is %s: its last axis must be 2 (sum of exp, target's "
                       "logit)", TY_DESC(sums));
  }
  TY_RETURN_IF_ERROR(ty_op_check_int(ctx->op, "targets", targets));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "targets", targets, sums->rank - 1,
                                       sums->dims, "sums' shape without the last axis"));
  int64_t vocab;
  TY_RETURN_IF_ERROR(ty_op_attr_require(ctx->op, ctx->attrs, "vocab_size"));
  TY_RETURN_IF_ERROR(ty_op_attr_int(ctx->op, ctx->attrs, "vocab_size", 0, &vocab));
  if (vocab <= 0) {
    return ty_op_error(ctx->op, "attribute 'vocab_size' = %lld must be > 0", (long long)vocab);
  }
  *out_sums = sums;
  return TY_OK;
}

static ty_status_t ty_vocab_ce_loss_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *sums;
  TY_RETURN_IF_ERROR(ty_vocab_loss_check(ctx, 0, &sums));
  return ty_op_output(ctx, sums->dtype, sums->rank - 1, sums->dims);
}

static ty_status_t ty_vocab_ce_loss_backward_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *dloss, *sums;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "dloss", &dloss));
  TY_RETURN_IF_ERROR(ty_vocab_loss_check(ctx, 1, &sums));
  TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "dloss", dloss, sums->dtype));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "dloss", dloss, sums->rank - 1, sums->dims,
                                       "sums' shape without the last axis"));
  return ty_op_output_like(ctx, sums);
}

static ty_status_t ty_vocab_ce_loss_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dloss = ctx->output_grads[0];
  if (dloss == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const ty_value_id_t ins[3] = {dloss, ctx->inputs[0], ctx->inputs[1]};
  return ty_grad_emit1(ctx, "vocab_ce_loss_backward", ins, 3, ctx->attrs,
                       &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_vocab_embedding = {
    .name = "vocab_embedding", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_vocab_attrs, .infer = ty_vocab_embedding_infer,
    .grad = ty_vocab_embedding_grad,
    .summary = "out[n] = table[ids[n] - vocab_start] for ids of the shard, else 0"};
const ty_op_def_t ty_op_def_vocab_embedding_backward = {
    .name = "vocab_embedding_backward", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_vocab_emb_bwd_attrs, .infer = ty_vocab_embedding_backward_infer,
    .grad = NULL, .summary = "scatter-add of dout into the shard's rows"};
const ty_op_def_t ty_op_def_vocab_max = {
    .name = "vocab_max", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_vocab_attrs, .infer = ty_vocab_max_infer, .grad = ty_vocab_max_grad,
    .summary = "max over the first vocab_valid entries of the last axis"};
const ty_op_def_t ty_op_def_vocab_max_backward = {
    .name = "vocab_max_backward", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_vocab_attrs, .infer = ty_vocab_max_backward_infer, .grad = NULL,
    .summary = "dlogits = dy at the first real column equal to m, 0 elsewhere"};
const ty_op_def_t ty_op_def_vocab_ce_sums = {
    .name = "vocab_ce_sums", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_vocab_attrs, .infer = ty_vocab_ce_sums_infer,
    .grad = ty_vocab_ce_sums_grad,
    .summary = "[sum exp(logits - m), logits[target] - m] over a vocabulary shard"};
const ty_op_def_t ty_op_def_vocab_ce_sums_backward = {
    .name = "vocab_ce_sums_backward", .min_inputs = 4, .max_inputs = 4,
    .attr_names = ty_vocab_attrs, .infer = ty_vocab_ce_sums_backward_infer, .grad = NULL,
    .summary = "dlogits = dsums[0] exp(logits - m) + dsums[1] onehot(target); dm"};
const ty_op_def_t ty_op_def_vocab_ce_loss = {
    .name = "vocab_ce_loss", .min_inputs = 2, .max_inputs = 2,
    .attr_names = ty_vocab_loss_attrs, .infer = ty_vocab_ce_loss_infer,
    .grad = ty_vocab_ce_loss_grad,
    .summary = "per-token loss = log(sums[0]) - sums[1] (0 for ignored targets)"};
const ty_op_def_t ty_op_def_vocab_ce_loss_backward = {
    .name = "vocab_ce_loss_backward", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_vocab_loss_attrs, .infer = ty_vocab_ce_loss_backward_infer, .grad = NULL,
    .summary = "dsums = [dloss / sums[0], -dloss]"};
