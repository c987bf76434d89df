/* Collectives as ops of the graph (issue 11: "collectives are ops in the
 * train-step graph, so whole-graph devices can fuse them too"; issue 17:
 * the same ops mid-forward for tensor parallelism).
 *
 * Every collective op reduces over one process group of the run, named by
 * its `group` attribute: "world" (the default: every rank), or "tp", "dp",
 * "pp" of the rank layout world = dp x pp x tp (distributed/dist.h). A graph
 * carries no communicator: the executor takes the group from the run
 * (docs/plugin-abi.md "Process groups"), and an executor with none runs at
 * world 1, where every reduction is the identity; that is what the
 * reference kernel and the one-process conformance cases check.
 *
 * all_reduce(x) -> y, y the same shape and dtype as x: on every rank of the
 * group, y = sum over its ranks of x (reduce="sum", the default), or that
 * sum divided by the group's size (reduce="avg").
 *   Gradient: data parallel. Every rank's output is the same function of
 *   every rank's input, and the loss differentiated is the SUM of the
 *   ranks' losses (each rank's loss covers its own part of the batch), so
 *   dL/dx_r = sum over ranks s of dL/dy_s * dy_s/dx_r = all_reduce(dy) with
 *   the same reduce and group: 1 per rank for sum, 1/size for avg.
 *
 * The two Megatron region ops of tensor parallelism (default group "tp")
 * have the other convention: the loss is REPLICATED, every rank of the
 * group computes the same whole loss L, and each rank's backward must give
 * its own inputs dL/dx of that one L (not of the sum of the copies):
 *   tp_copy(x) = x (Megatron's f: enter a column-parallel region). Each
 *     rank uses x in its own shard of the region, so L depends on x through
 *     every rank's shard: dL/dx = sum over ranks of the shards' parts =
 *     all_reduce(dy, sum) over the group.
 *   tp_reduce(x) = all_reduce(x) (Megatron's g: leave a row-parallel region
 *     with the sum of the ranks' partial results). y is the same on every
 *     rank and so is dL/dy; y_s depends on x_r with derivative 1, and only
 *     one copy of L is differentiated, so dL/dx_r = dL/dy: the identity.
 *     reduce="max" (the shift of a vocabulary-parallel softmax) has a zero
 *     gradient: its output is treated as a constant, which is exact only
 *     where the result's gradient cancels (a log-sum-exp about its shift);
 *     docs/ops.md says so. */
#include <string.h>

#include "ops/op_internal.h"

static const char *const ty_all_reduce_attrs[] = {"group", "reduce", NULL};

/* `group` names a process group the executor knows (distributed/dist.h). */
ty_status_t ty_collective_group(const ty_op_infer_ctx_t *ctx, const char *fallback) {
  static const char *const known[] = {"world", "tp", "dp", "pp", "embed", "cp", "dp_cp"};
  const char *group;
  TY_RETURN_IF_ERROR(ty_op_attr_string(ctx->op, ctx->attrs, "group", fallback, &group));
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); ++i) {
    if (strcmp(group, known[i]) == 0) return TY_OK;
  }
  return ty_op_error(ctx->op,
                     "attribute 'group' = '%s' must be 'world', 'tp', 'cp', 'dp', 'dp_cp', "
                     "'pp' or 'embed'",
                     group);
}

/* x is float; reduce is one of `allowed` (NULL-terminated). */
static ty_status_t ty_collective_infer(const ty_op_infer_ctx_t *ctx, const char *group,
                                       const char *const *allowed, const char *allowed_text) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  TY_RETURN_IF_ERROR(ty_collective_group(ctx, group));
  const char *reduce;
  TY_RETURN_IF_ERROR(ty_op_attr_string(ctx->op, ctx->attrs, "reduce", "sum", &reduce));
  bool ok = false;
  for (const char *const *a = allowed; *a && !ok; ++a) ok = strcmp(reduce, *a) == 0;
  if (!ok) {
    return ty_op_error(ctx->op, "attribute 'reduce' = '%s' must be %s", reduce, allowed_text);
  }
  return ty_op_output_like(ctx, x);
}

static ty_status_t ty_all_reduce_infer(const ty_op_infer_ctx_t *ctx) {
  static const char *const allowed[] = {"sum", "avg", NULL};
  return ty_collective_infer(ctx, "world", allowed, "'sum' or 'avg'");
}

static ty_status_t ty_all_reduce_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  return ty_grad_emit1(ctx, "all_reduce", &dy, 1, ctx->attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_all_reduce = {
    .name = "all_reduce", .min_inputs = 1, .max_inputs = 1, .communicates = true,
    .attr_names = ty_all_reduce_attrs, .infer = ty_all_reduce_infer,
    .grad = ty_all_reduce_grad,
    .summary = "y = sum (or avg) of x over a process group; identity at world 1"};

/* ---- tensor-parallel region ops ---- */

static const char *const ty_tp_copy_attrs[] = {"group", NULL};

static ty_status_t ty_tp_copy_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *x;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "x", &x));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "x", x));
  TY_RETURN_IF_ERROR(ty_collective_group(ctx, "tp"));
  return ty_op_output_like(ctx, x);
}

/* The backward's all_reduce: a sum over this op's group. */
static ty_status_t ty_tp_group_attrs(const ty_grad_ctx_t *ctx, ty_attrs_t *out) {
  const char *group = "tp";
  TY_RETURN_IF_ERROR(ty_attrs_get_string(ctx->attrs, "group", "tp", &group));
  *out = TY_ATTRS_EMPTY;
  return ty_attrs_set_string(out, "group", group);
}

static ty_status_t ty_tp_copy_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  ty_attrs_t attrs;
  TY_RETURN_IF_ERROR(ty_tp_group_attrs(ctx, &attrs));
  return ty_grad_emit1(ctx, "all_reduce", &dy, 1, &attrs, &ctx->input_grads[0]);
}

const ty_op_def_t ty_op_def_tp_copy = {
    .name = "tp_copy", .min_inputs = 1, .max_inputs = 1,
    .attr_names = ty_tp_copy_attrs, .infer = ty_tp_copy_infer, .grad = ty_tp_copy_grad,
    .summary = "y = x; backward all-reduces dy over the group (Megatron f)"};

static ty_status_t ty_tp_reduce_infer(const ty_op_infer_ctx_t *ctx) {
  static const char *const allowed[] = {"sum", "max", NULL};
  return ty_collective_infer(ctx, "tp", allowed, "'sum' or 'max'");
}

static ty_status_t ty_tp_reduce_grad(const ty_grad_ctx_t *ctx) {
  ty_grad_clear(ctx);
  ty_value_id_t dy = ctx->output_grads[0];
  if (dy == TY_VALUE_NONE || !ty_grad_wants(ctx, 0)) return TY_OK;
  const char *reduce = "sum";
  TY_RETURN_IF_ERROR(ty_attrs_get_string(ctx->attrs, "reduce", "sum", &reduce));
  if (strcmp(reduce, "max") == 0) {
    return ty_grad_scale(ctx, dy, 0.0, &ctx->input_grads[0]); /* a constant shift: see the top */
  }
  ctx->input_grads[0] = dy; /* the identity */
  return TY_OK;
}

const ty_op_def_t ty_op_def_tp_reduce = {
    .name = "tp_reduce", .min_inputs = 1, .max_inputs = 1, .communicates = true,
    .attr_names = ty_all_reduce_attrs, .infer = ty_tp_reduce_infer, .grad = ty_tp_reduce_grad,
    .summary = "y = sum (or max) of x over the group; backward is the identity (Megatron g)"};
