/* Sampling ops (issue 29): the next token of each row of logits, drawn on
 * the device, and the k most likely tokens with their log-probabilities.
 * The definition is ops/reference/ref_sample.h's; the params columns are
 * backends/common/sample_params.h's. Inference only: no gradient.
 *
 *   sample(logits [N, V] float, params [N, 7] f32, seeds [N, 2] i64,
 *          history? [N, L] i64) -> ids [N] i64, logprob [N] f32
 *   top_logprobs(logits [N, V] float) attr k in 1..20
 *          -> ids [N, k] i64, logprobs [N, k] f32 */
#include "backends/common/sample_params.h"
#include "ops/op_internal.h"

static ty_status_t ty_sample_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *logits, *params, *seeds, *history = ty_op_in(ctx, 3);
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "logits", &logits));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "params", &params));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "seeds", &seeds));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "logits", logits));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "logits", logits, 2));
  if (logits->dims[1] < 1) {
    return ty_op_error(ctx->op, "logits is %s: expected [N, V] with V >= 1", TY_DESC(logits));
  }
  int64_t rows = logits->dims[0];
  const int64_t params_dims[2] = {rows, TY_SAMPLE_P_COUNT}, seeds_dims[2] = {rows, 2};
  TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "params", params, TY_DTYPE_F32));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "params", params, 2, params_dims,
                                       "[N, 7]: N from logits, the columns of "
                                       "sample_params.h"));
  TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "seeds", seeds, TY_DTYPE_I64));
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "seeds", seeds, 2, seeds_dims,
                                       "[N, 2]: {seed, counter} per row of logits"));
  if (history) {
    TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "history", history, TY_DTYPE_I64));
    TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "history", history, 2));
    if (history->dims[0] != rows) {
      return ty_op_error(ctx->op, "history is %s but logits is %s: expected [N, L] with "
                         "logits' N", TY_DESC(history), TY_DESC(logits));
    }
  }
  const int64_t out_dims[1] = {rows};
  TY_RETURN_IF_ERROR(ty_op_output(ctx, TY_DTYPE_I64, 1, out_dims));
  return ty_op_output(ctx, TY_DTYPE_F32, 1, out_dims);
}

static const char *const ty_top_logprobs_attrs[] = {"k", NULL};

static ty_status_t ty_top_logprobs_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *logits;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "logits", &logits));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "logits", logits));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "logits", logits, 2));
  TY_RETURN_IF_ERROR(ty_op_attr_require(ctx->op, ctx->attrs, "k"));
  int64_t k;
  TY_RETURN_IF_ERROR(ty_op_attr_int(ctx->op, ctx->attrs, "k", 1, &k));
  if (k < 1 || k > 20) {
    return ty_op_error(ctx->op, "attribute 'k' = %lld must lie in [1, 20] (OpenAI's "
                       "top_logprobs range)", (long long)k);
  }
  if (logits->dims[1] < k) {
    return ty_op_error(ctx->op, "logits is %s: the vocabulary must hold at least k = %lld "
                       "tokens", TY_DESC(logits), (long long)k);
  }
  const int64_t dims[2] = {logits->dims[0], k};
  TY_RETURN_IF_ERROR(ty_op_output(ctx, TY_DTYPE_I64, 2, dims));
  return ty_op_output(ctx, TY_DTYPE_F32, 2, dims);
}

const ty_op_def_t ty_op_def_sample = {
    .name = "sample", .min_inputs = 3, .max_inputs = 4,
    .attr_names = ty_op_no_attrs, .infer = ty_sample_infer, .grad = NULL,
    .summary = "ids, logprob = the next token of each row (penalties, greedy or "
               "temperature/top-k/top-p/min-p draw) and its raw log-probability"};

const ty_op_def_t ty_op_def_top_logprobs = {
    .name = "top_logprobs", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_top_logprobs_attrs, .infer = ty_top_logprobs_infer, .grad = NULL,
    .summary = "ids, logprobs = the k most likely tokens of each row, most likely first"};
