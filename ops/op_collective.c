/* Collectives as ops of the graph (issue 11: "collectives are ops in the
 * train-step graph, so whole-graph devices can fuse them too"; issue 17
 * needs the same ops mid-forward for tensor parallelism).
 *
 * all_reduce(x) -> y, y the same shape and dtype as x: on every rank of the
 * run's communicator, y = sum over ranks of x (reduce="sum", the default)
 * or that sum divided by the world size (reduce="avg"). A graph carries no
 * world: the executor takes it from the run (docs/plugin-abi.md), and an
 * executor with none runs at world 1, where both reductions are the
 * identity; that is what the reference kernel and the one-process
 * conformance cases check.
 *
 * Gradient: every rank's output is the same function of every rank's
 * input, and the loss being differentiated is the sum of the ranks' losses
 * (data parallel sums, tensor parallel splits one loss into parts), so
 * dL/dx_r = sum over ranks s of dL/dy_s * dy_s/dx_r = all_reduce(dy) with
 * the same reduce: 1 per rank for sum, 1/world per rank for avg. */
#include <string.h>

#include "ops/op_internal.h"

static const char *const ty_all_reduce_attrs[] = {"reduce", NULL};

static ty_status_t ty_all_reduce_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  const char *reduce;
  TY_RETURN_IF_ERROR(ty_op_attr_string(ctx->op, ctx->attrs, "reduce", "sum", &reduce));
  if (strcmp(reduce, "sum") != 0 && strcmp(reduce, "avg") != 0) {
    return ty_op_error(ctx->op, "attribute 'reduce' = '%s' must be 'sum' or 'avg'", reduce);
  }
  return ty_op_output_like(ctx, x);
}

static ty_status_t ty_all_reduce_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  return ty_grad_emit1(ctx, "all_reduce", &dy, 1, ctx->attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_all_reduce = {
    .name = "all_reduce", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_all_reduce_attrs, .infer = ty_all_reduce_infer,
    .grad = ty_all_reduce_grad,
    .summary = "y = sum (or avg) of x over the run's ranks; identity at world 1"};
