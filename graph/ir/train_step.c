/* Train-step construction: autodiff, then either clip_by_global_norm +
 * optimizer in the same graph, or accumulation into gradient states that a
 * separate optimizer-step graph consumes. */
#include "graph/ir/train_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir/autodiff.h"
#include "hal/dtype.h"

static ty_status_t ty_scalar_input(ty_graph_t *g, const char *name, ty_dtype_t dtype,
                                   ty_value_id_t *out) {
  return ty_graph_add_input(g, name, dtype, 0, NULL, out);
}

/* A f32 state "<param>.<suffix>" shaped like the param. */
static ty_status_t ty_param_state(ty_graph_t *g, const ty_tensor_desc_t *param,
                                  const char *suffix, ty_value_id_t *out) {
  char name[TY_TENSOR_NAME_MAX];
  int n = snprintf(name, sizeof(name), "%s.%s", param->name, suffix);
  if (n < 0 || (size_t)n >= sizeof(name)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "parameter name '%s' is too long for its optimizer state",
                          param->name);
  }
  return ty_graph_add_state(g, name, TY_DTYPE_F32, param->rank, param->dims, out);
}

/* `v` as `dtype` (a cast node when it differs). */
static ty_status_t ty_as_dtype(ty_graph_t *g, ty_value_id_t v, ty_dtype_t dtype,
                               ty_value_id_t *out) {
  if (ty_graph_value(g, v)->desc.dtype == dtype) {
    *out = v;
    return TY_OK;
  }
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_string(&a, "dtype", ty_dtype_name(dtype)));
  return ty_graph_add_node1(g, "cast", &v, 1, &a, out);
}

/* The hyperparameter inputs of an optimizer, declared once per graph. */
typedef struct {
  const ty_train_step_params_t *p;
  ty_value_id_t lr, wd, max_norm, zero, beta1, beta2, eps, step, momentum;
} ty_optim_t;

static ty_status_t ty_optim_declare(ty_graph_t *g, const ty_train_step_params_t *p,
                                    ty_optim_t *o) {
  *o = (ty_optim_t){.p = p, .beta1 = TY_VALUE_NONE, .beta2 = TY_VALUE_NONE,
                    .eps = TY_VALUE_NONE, .step = TY_VALUE_NONE, .momentum = TY_VALUE_NONE};
  TY_RETURN_IF_ERROR(ty_scalar_input(g, "lr", TY_DTYPE_F32, &o->lr));
  TY_RETURN_IF_ERROR(ty_scalar_input(g, "weight_decay", TY_DTYPE_F32, &o->wd));
  TY_RETURN_IF_ERROR(ty_scalar_input(g, "max_norm", TY_DTYPE_F32, &o->max_norm));
  TY_RETURN_IF_ERROR(ty_graph_add_scalar(g, TY_DTYPE_F32, 0.0, &o->zero));
  switch (p->optimizer) {
    case TY_OPTIMIZER_ADAMW:
      TY_RETURN_IF_ERROR(ty_scalar_input(g, "beta1", TY_DTYPE_F32, &o->beta1));
      TY_RETURN_IF_ERROR(ty_scalar_input(g, "beta2", TY_DTYPE_F32, &o->beta2));
      TY_RETURN_IF_ERROR(ty_scalar_input(g, "eps", TY_DTYPE_F32, &o->eps));
      return ty_scalar_input(g, "step", TY_DTYPE_I64, &o->step);
    case TY_OPTIMIZER_SGD:
      return ty_scalar_input(g, "momentum", TY_DTYPE_F32, &o->momentum);
    case TY_OPTIMIZER_ADAFACTOR:
      if (p->adafactor.momentum) {
        TY_RETURN_IF_ERROR(ty_scalar_input(g, "beta1", TY_DTYPE_F32, &o->beta1));
      }
      return ty_scalar_input(g, "step", TY_DTYPE_I64, &o->step);
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT, "unknown optimizer %d", (int)p->optimizer);
}

/* An optimizer state of `param`, classed for memory plans and offloaded
 * when asked. dims/rank NULL/0 mean param's shape. */
static ty_status_t ty_optim_state(ty_graph_t *g, const ty_optim_t *o,
                                  const ty_tensor_desc_t *param, const char *suffix,
                                  uint32_t rank, const int64_t *dims, ty_value_id_t *out) {
  ty_tensor_desc_t shape = *param;
  if (dims) {
    shape.rank = rank;
    memcpy(shape.dims, dims, rank * sizeof(int64_t));
  }
  TY_RETURN_IF_ERROR(ty_param_state(g, &shape, suffix, out));
  TY_RETURN_IF_ERROR(ty_graph_set_memory_class(g, *out, TY_MEMORY_OPTIMIZER));
  return o->p->offload_optimizer ? ty_graph_mark_host_resident(g, *out) : TY_OK;
}

static const char *const ty_adamw_kinds[] = {"exp_avg", "exp_avg_sq", NULL};
static const char *const ty_sgd_kinds[] = {"momentum_buffer", NULL};
static const char *const ty_adafactor_kinds[] = {"exp_avg_sq_row", "exp_avg_sq_col",
                                                  "exp_avg_sq", "exp_avg", NULL};

const char *const *ty_optimizer_state_kinds(ty_optimizer_t optimizer) {
  return optimizer == TY_OPTIMIZER_SGD         ? ty_sgd_kinds
         : optimizer == TY_OPTIMIZER_ADAFACTOR ? ty_adafactor_kinds
                                               : ty_adamw_kinds;
}

static ty_status_t ty_optim_adafactor(ty_graph_t *g, const ty_optim_t *o, ty_value_id_t param,
                                      ty_value_id_t grad, bool decay) {
  const ty_adafactor_config_t *a = &o->p->adafactor;
  ty_tensor_desc_t d = ty_graph_value(g, param)->desc;
  ty_value_id_t in[10] = {param, grad, TY_VALUE_NONE, TY_VALUE_NONE, TY_VALUE_NONE,
                          TY_VALUE_NONE, o->lr, decay ? o->wd : o->zero, o->step, o->beta1};
  if (d.rank >= 2) {
    int64_t col[TY_TENSOR_MAX_RANK];
    memcpy(col, d.dims, d.rank * sizeof(int64_t));
    col[d.rank - 2] = d.dims[d.rank - 1];
    TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "exp_avg_sq_row", d.rank - 1, d.dims, &in[2]));
    TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "exp_avg_sq_col", d.rank - 1, col, &in[3]));
  } else {
    TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "exp_avg_sq", 0, NULL, &in[4]));
  }
  if (a->momentum) TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "exp_avg", 0, NULL, &in[5]));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  if (a->set) {
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&attrs, "eps1", a->eps1));
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&attrs, "eps2", a->eps2));
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&attrs, "clip_threshold", a->clip_threshold));
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&attrs, "decay_rate", a->decay_rate));
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "relative_step", a->relative_step));
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "scale_parameter", a->scale_parameter));
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "warmup_init", a->warmup_init));
  }
  ty_value_id_t out[5];
  uint32_t states = (d.rank >= 2 ? 2u : 1u) + (a->momentum ? 1u : 0u);
  TY_RETURN_IF_ERROR(ty_graph_add_node(g, "adafactor_update", in, a->momentum ? 10 : 9, &attrs,
                                       out, 1 + states));
  TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, param, out[0]));
  uint32_t k = 1;
  for (uint32_t i = 2; i < 6; ++i) {
    if (in[i] != TY_VALUE_NONE) TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, in[i], out[k++]));
  }
  return TY_OK;
}

/* The update of one parameter from its (clipped) gradient. */
static ty_status_t ty_optim_update(ty_graph_t *g, const ty_optim_t *o, ty_value_id_t param,
                                   ty_value_id_t grad_in, bool decay) {
  ty_tensor_desc_t d = ty_graph_value(g, param)->desc;
  ty_value_id_t grad, wd = decay ? o->wd : o->zero;
  TY_RETURN_IF_ERROR(ty_as_dtype(g, grad_in, d.dtype, &grad));
  if (o->p->optimizer == TY_OPTIMIZER_ADAFACTOR) return ty_optim_adafactor(g, o, param, grad, decay);
  if (o->p->optimizer == TY_OPTIMIZER_ADAMW) {
    ty_value_id_t m, v, out[3];
    TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "exp_avg", 0, NULL, &m));
    TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "exp_avg_sq", 0, NULL, &v));
    ty_value_id_t in[10] = {param, grad, m, v, o->lr, o->beta1, o->beta2, o->eps, wd, o->step};
    TY_RETURN_IF_ERROR(ty_graph_add_node(g, "adamw_update", in, 10, NULL, out, 3));
    TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, param, out[0]));
    TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, m, out[1]));
    return ty_graph_set_state_update(g, v, out[2]);
  }
  ty_value_id_t buf, out[2];
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&attrs, "nesterov", o->p->nesterov ? 1 : 0));
  TY_RETURN_IF_ERROR(ty_optim_state(g, o, &d, "momentum_buffer", 0, NULL, &buf));
  ty_value_id_t in[6] = {param, grad, buf, o->lr, o->momentum, wd};
  TY_RETURN_IF_ERROR(ty_graph_add_node(g, "sgd_update", in, 6, &attrs, out, 2));
  TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, param, out[0]));
  return ty_graph_set_state_update(g, buf, out[1]);
}

static ty_status_t ty_fused_sumsq(ty_graph_t *g, ty_value_id_t grad, ty_value_id_t *out);

/* `v` summed over `group` (an all_reduce op). */
static ty_status_t ty_group_sum(ty_graph_t *g, ty_value_id_t v, const char *group,
                                ty_value_id_t *out) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_string(&a, "group", group));
  return ty_graph_add_node1(g, "all_reduce", &v, 1, &a, out);
}

/* *total += v (an add node), or *total = v while it is NONE. */
static ty_status_t ty_add_into(ty_graph_t *g, ty_value_id_t *total, ty_value_id_t v) {
  if (*total == TY_VALUE_NONE) {
    *total = v;
    return TY_OK;
  }
  ty_value_id_t pair[2] = {*total, v};
  return ty_graph_add_node1(g, "add", pair, 2, NULL, total);
}

/* clip_out[0] the norm from max_norm and the sums of squares sq[0 .. k)
 * (global_norm_scale), clip_out[1 + i] grads[i] scaled by min(1, max_norm /
 * (norm + 1e-6)). */
static ty_status_t ty_clip_from_sumsq(ty_graph_t *g, const ty_value_id_t *grads, uint32_t n,
                                      ty_value_id_t max_norm, const ty_value_id_t *sq,
                                      uint32_t k, ty_value_id_t *clip_out) {
  ty_value_id_t in[3] = {max_norm}, out[2];
  for (uint32_t i = 0; i < k; ++i) in[1 + i] = sq[i];
  TY_RETURN_IF_ERROR(ty_graph_add_node(g, "global_norm_scale", in, k + 1, NULL, out, 2));
  clip_out[0] = out[0];
  for (uint32_t i = 0; i < n; ++i) {
    ty_value_id_t scale, pair[2];
    TY_RETURN_IF_ERROR(ty_as_dtype(g, out[1], ty_graph_value(g, grads[i])->desc.dtype, &scale));
    pair[0] = grads[i];
    pair[1] = scale;
    TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "mul", pair, 2, NULL, &clip_out[1 + i]));
  }
  return TY_OK;
}

/* Tensor parallel: clip_by_global_norm's result over the whole model
 * (train_step.h tp_split): clip_out[0] the norm, clip_out[1 + i] grads[i]
 * scaled by min(1, max_norm / (norm + 1e-6)). */
static ty_status_t ty_tp_clip(ty_graph_t *g, const ty_value_id_t *grads, uint32_t n,
                              const bool *split, ty_value_id_t max_norm,
                              ty_value_id_t *clip_out) {
  ty_value_id_t total[2] = {TY_VALUE_NONE, TY_VALUE_NONE}; /* replicated, split */
  for (uint32_t i = 0; i < n; ++i) {
    ty_value_id_t sq;
    TY_RETURN_IF_ERROR(ty_fused_sumsq(g, grads[i], &sq));
    TY_RETURN_IF_ERROR(ty_add_into(g, &total[split[i] ? 1 : 0], sq));
  }
  if (total[1] != TY_VALUE_NONE) {
    ty_value_id_t part = total[1];
    TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "tp_reduce", &part, 1, NULL, &total[1]));
  }
  ty_value_id_t sq[2];
  uint32_t k = 0;
  for (int t = 0; t < 2; ++t) {
    if (total[t] != TY_VALUE_NONE) sq[k++] = total[t];
  }
  return ty_clip_from_sumsq(g, grads, n, max_norm, sq, k, clip_out);
}

/* ZeRO-2: clip_by_global_norm's result when this rank holds a share of the
 * gradients (train_step.h norm_group): the share's sum of squares, its
 * tp-split part summed over "tp" first, summed over `group`. Every rank
 * emits the same collectives whatever its share holds, since each is a
 * rendezvous of the group. */
static ty_status_t ty_share_clip(ty_graph_t *g, const ty_value_id_t *grads, uint32_t n,
                                 const bool *split, const char *group, ty_value_id_t max_norm,
                                 ty_value_id_t *clip_out) {
  ty_value_id_t total[2] = {TY_VALUE_NONE, TY_VALUE_NONE}; /* replicated, split */
  for (uint32_t i = 0; i < n; ++i) {
    ty_value_id_t sq;
    TY_RETURN_IF_ERROR(ty_fused_sumsq(g, grads[i], &sq));
    TY_RETURN_IF_ERROR(ty_add_into(g, &total[split && split[i] ? 1 : 0], sq));
  }
  for (int k = 0; k < (split ? 2 : 1); ++k) {
    if (total[k] == TY_VALUE_NONE) {
      TY_RETURN_IF_ERROR(ty_graph_add_filled(g, TY_DTYPE_F32, 0, NULL, 0.0, &total[k]));
    }
  }
  if (split) {
    ty_value_id_t part = total[1];
    TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "tp_reduce", &part, 1, NULL, &total[1]));
    TY_RETURN_IF_ERROR(ty_add_into(g, &total[0], total[1]));
  }
  ty_value_id_t sum;
  TY_RETURN_IF_ERROR(ty_group_sum(g, total[0], group, &sum));
  return ty_clip_from_sumsq(g, grads, n, max_norm, &sum, 1, clip_out);
}

/* Clipping and the optimizer for params[i] with gradients grads[i]; declares
 * the hyperparameter inputs and optimizer states, sets the state updates. */
static ty_status_t ty_append_optimizer(ty_graph_t *g, const ty_value_id_t *params,
                                       const ty_value_id_t *grads, const bool *decay,
                                       uint32_t n, const ty_train_step_params_t *p) {
  ty_value_id_t *clip_in = calloc(n + 1, sizeof(ty_value_id_t));
  ty_value_id_t *clip_out = calloc(n + 1, sizeof(ty_value_id_t));
  ty_status_t s = (!clip_in || !clip_out)
                      ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                      : TY_OK;
  ty_optim_t o;
  if (!s) s = ty_optim_declare(g, p, &o);
  if (!s && p->norm_sq_input) {
    /* a pipeline stage: the norm is the whole model's, summed outside */
    ty_value_id_t sq;
    s = ty_scalar_input(g, "grad_norm_sq", TY_DTYPE_F32, &sq);
    if (!s) s = ty_clip_from_sumsq(g, grads, n, o.max_norm, &sq, 1, clip_out);
  } else if (!s && p->norm_group) {
    s = ty_share_clip(g, grads, n, p->tp_split, p->norm_group, o.max_norm, clip_out);
  } else if (!s && p->tp_split) {
    s = ty_tp_clip(g, grads, n, p->tp_split, o.max_norm, clip_out);
  } else if (!s) {
    clip_in[0] = o.max_norm;
    memcpy(clip_in + 1, grads, n * sizeof(ty_value_id_t));
    s = ty_graph_add_node(g, "clip_by_global_norm", clip_in, n + 1, NULL, clip_out, n + 1);
  }
  if (!s) s = ty_graph_set_output(g, clip_out[0], "grad_norm");
  for (uint32_t i = 0; i < n && !s; ++i) {
    s = ty_graph_set_memory_class(g, clip_out[1 + i], TY_MEMORY_GRADIENT);
    /* ZeRO-1: another rank updates it; its gradient still counts in the
     * norm, so every rank clips by the same global norm. */
    if (p->update && !p->update[i]) continue;
    if (!s) s = ty_optim_update(g, &o, params[i], clip_out[1 + i], decay ? decay[i] : true);
  }
  free(clip_in);
  free(clip_out);
  return s;
}

/* ---- the fused optimizer ---- */

typedef struct {
  ty_graph_t *g;
  const ty_train_step_params_t *p;
  ty_optim_t o;
  ty_value_id_t *sumsq; /* per parameter: sum of its gradient's squares */
  ty_value_id_t scale;  /* the clipping factor (second pass), or NONE */
  bool update;          /* false: the norm pass */
} ty_fused_t;

/* sum(g^2) of a gradient, as an f32 scalar. */
static ty_status_t ty_fused_sumsq(ty_graph_t *g, ty_value_id_t grad, ty_value_id_t *out) {
  ty_value_id_t g32;
  TY_RETURN_IF_ERROR(ty_as_dtype(g, grad, TY_DTYPE_F32, &g32));
  return ty_graph_add_node1(g, "reduce_sumsq", &g32, 1, NULL, out);
}

static ty_status_t ty_fused_on_grad(void *user, uint32_t i, ty_value_id_t grad) {
  ty_fused_t *f = user;
  ty_graph_t *g = f->g;
  TY_RETURN_IF_ERROR(ty_graph_set_memory_class(g, grad, TY_MEMORY_GRADIENT));
  if (!f->update || f->scale == TY_VALUE_NONE) {
    /* The norm pass, or the norm reported without clipping. */
    TY_RETURN_IF_ERROR(ty_fused_sumsq(g, grad, &f->sumsq[i]));
    if (!f->update) return TY_OK;
  }
  ty_value_id_t clipped = grad;
  if (f->scale != TY_VALUE_NONE) {
    ty_value_id_t scale, pair[2];
    TY_RETURN_IF_ERROR(ty_as_dtype(g, f->scale, ty_graph_value(g, grad)->desc.dtype, &scale));
    pair[0] = grad;
    pair[1] = scale;
    TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "mul", pair, 2, NULL, &clipped));
  }
  return ty_optim_update(g, &f->o, f->p->params[i], clipped, f->p->decay ? f->p->decay[i] : true);
}

/* norm (and the clipping factor) from the per-gradient sums of squares. */
static ty_status_t ty_fused_norm(ty_fused_t *f, ty_value_id_t *out_norm, ty_value_id_t *out_scale) {
  uint32_t n = f->p->param_count;
  ty_value_id_t *in = malloc((n + 1) * sizeof(ty_value_id_t));
  if (!in) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  in[0] = f->o.max_norm;
  memcpy(in + 1, f->sumsq, n * sizeof(ty_value_id_t));
  ty_value_id_t out[2];
  ty_status_t s = ty_graph_add_node(f->g, "global_norm_scale", in, n + 1, NULL, out, 2);
  free(in);
  if (s) return s;
  *out_norm = out[0];
  *out_scale = out[1];
  return TY_OK;
}

static ty_status_t ty_build_fused(ty_graph_t *g, const ty_train_step_params_t *p,
                                  ty_value_id_t *grads) {
  uint32_t n = p->param_count;
  ty_fused_t f = {.g = g, .p = p, .scale = TY_VALUE_NONE};
  f.sumsq = calloc(n, sizeof(ty_value_id_t));
  if (!f.sumsq) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = ty_optim_declare(g, p, &f.o);
  ty_autodiff_options_t ad = {.recompute = p->recompute,
                              .recast_states = true,
                              .on_grad_complete = ty_fused_on_grad,
                              .user = &f};
  ty_value_id_t norm = TY_VALUE_NONE, scale;
  if (!s && p->fused_clip) {
    /* The norm pass: every gradient is reduced to its sum of squares as
     * soon as it is complete. */
    s = ty_graph_autodiff_ex(g, p->loss, p->loss_seed, p->params, n, &ad, grads);
    if (!s) s = ty_fused_norm(&f, &norm, &f.scale);
  }
  f.update = true;
  if (!s) s = ty_graph_autodiff_ex(g, p->loss, p->loss_seed, p->params, n, &ad, grads);
  if (!s && !p->fused_clip) s = ty_fused_norm(&f, &norm, &scale);
  if (!s) s = ty_graph_set_output(g, norm, "grad_norm");
  free(f.sumsq);
  return s;
}

/* ---- the ACCUMULATE mode ---- */

typedef struct {
  ty_graph_t *g;
  const ty_train_step_params_t *p;
  uint32_t done; /* parameters whose gradient was added */
} ty_accumulate_t;

/* acc += grad (in f32, whatever the parameter's dtype) for parameter i,
 * as soon as autodiff has its whole gradient; the stage-input gradients
 * (wrt indices past the parameters) are the caller's outputs. */
static ty_status_t ty_accumulate_on_grad(void *user, uint32_t i, ty_value_id_t grad) {
  ty_accumulate_t *a = user;
  ty_graph_t *g = a->g;
  if (i >= a->p->param_count) return TY_OK;
  TY_RETURN_IF_ERROR(ty_graph_set_memory_class(g, grad, TY_MEMORY_GRADIENT));
  ty_tensor_desc_t param = ty_graph_value(g, a->p->params[i])->desc;
  ty_value_id_t acc, grad32, sum;
  TY_RETURN_IF_ERROR(ty_as_dtype(g, grad, TY_DTYPE_F32, &grad32));
  if (a->p->grad_group) {
    /* ZeRO-2: every rank of the group takes part in the sum (a collective
     * stays in the graph unread), its owner keeps it */
    ty_value_id_t local = grad32;
    TY_RETURN_IF_ERROR(ty_group_sum(g, local, a->p->grad_group, &grad32));
    TY_RETURN_IF_ERROR(ty_graph_set_memory_class(g, grad32, TY_MEMORY_GRADIENT));
  }
  a->done++;
  if (a->p->accumulate && !a->p->accumulate[i]) return TY_OK;
  TY_RETURN_IF_ERROR(ty_param_state(g, &param, "grad_accum", &acc));
  TY_RETURN_IF_ERROR(ty_graph_set_memory_class(g, acc, TY_MEMORY_GRADIENT));
  ty_value_id_t in[2] = {acc, grad32};
  TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "add", in, 2, NULL, &sum));
  return ty_graph_set_state_update(g, acc, sum);
}

static ty_status_t ty_check_params(ty_graph_t *g, const ty_value_id_t *params,
                                   uint32_t n) {
  if (n == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "train step: no parameters to train");
  }
  for (uint32_t i = 0; i < n; ++i) {
    const ty_graph_value_t *v = ty_graph_value(g, params[i]);
    if (!v || v->role != TY_VALUE_STATE) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "train step: parameter %u is not a state value", i);
    }
    TY_RETURN_IF_ERROR(ty_graph_set_memory_class(g, params[i], TY_MEMORY_PARAMETER));
  }
  return TY_OK;
}

ty_status_t ty_graph_build_train_step(ty_graph_t *g, const ty_train_step_params_t *p) {
  if ((p->grad_group || p->accumulate) && p->mode != TY_TRAIN_STEP_ACCUMULATE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "train step: sharded gradients (ZeRO-2) are for the ACCUMULATE mode");
  }
  if (p->accumulate && !p->grad_group) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "train step: accumulating a share of the gradients needs the group "
                          "whose other ranks keep the rest (grad_group)");
  }
  uint32_t n = p->param_count;
  TY_RETURN_IF_ERROR(ty_check_params(g, p->params, n));
  if (p->fused_optimizer && p->mode != TY_TRAIN_STEP_FUSED) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "train step: the fused optimizer updates each parameter in the "
                          "backward pass, which gradient accumulation (the ACCUMULATE mode) "
                          "cannot do: it keeps every gradient in an accumulator");
  }
  if (p->tp_split && p->fused_optimizer) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "train step: the fused optimizer's clipping has no tensor-parallel "
                          "global norm");
  }
  if (p->all_reduce_grads && (p->fused_optimizer || p->mode != TY_TRAIN_STEP_FUSED)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "train step: all-reducing the gradients inside the step needs the "
                          "FUSED mode without the fused optimizer (%s updates before the sum)",
                          p->fused_optimizer ? "the fused optimizer" : "gradient accumulation");
  }
  if (p->wrt_input_count && (p->mode != TY_TRAIN_STEP_ACCUMULATE || p->fused_optimizer)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "train step: input gradients are for the ACCUMULATE mode");
  }
  const uint32_t k = p->wrt_input_count;
  ty_value_id_t *grads = calloc(n + k, sizeof(ty_value_id_t));
  ty_value_id_t *wrt = calloc(n + k, sizeof(ty_value_id_t));
  if (!grads || !wrt) {
    free(grads);
    free(wrt);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(wrt, p->params, n * sizeof(ty_value_id_t));
  if (k) memcpy(wrt + n, p->wrt_inputs, k * sizeof(ty_value_id_t));
  ty_status_t s = TY_OK;
  ty_accumulate_t accumulate = {.g = g, .p = p};
  if (p->fused_optimizer) {
    s = ty_build_fused(g, p, grads);
  } else {
    /* ACCUMULATE: each parameter's `acc += grad` right where its gradient
     * is complete, so the gradient's bytes are free again before the next
     * one is made (with the adds at the end, every gradient of the model
     * lived at once beside the accumulators: 27 GiB of Llama-3.1-8B's step) */
    ty_autodiff_options_t ad = {.recompute = p->recompute, .recast_states = true};
    if (p->mode == TY_TRAIN_STEP_ACCUMULATE) {
      ad.on_grad_complete = ty_accumulate_on_grad;
      ad.user = &accumulate;
    }
    s = ty_graph_autodiff_ex(g, p->loss, p->loss_seed, wrt, n + k, &ad, grads);
    for (uint32_t i = 0; i < k && !s; ++i) {
      s = ty_graph_set_output(g, grads[n + i], p->wrt_input_names[i]);
    }
    for (uint32_t i = 0; i < n && !s; ++i) {
      /* The sum over the ranks sits where the gradient is complete and
       * before anything reads it (clipping's norm, the update). The loss
       * is normalized by the global batch's count, so the sum is the
       * gradient of the global mean. */
      if (p->all_reduce_grads) {
        ty_value_id_t local = grads[i];
        s = ty_graph_add_node1(g, "all_reduce", &local, 1, NULL, &grads[i]);
      }
      if (!s) s = ty_graph_set_memory_class(g, grads[i], TY_MEMORY_GRADIENT);
    }
  }
  if (!s) {
    const char *name = ty_graph_value(g, p->loss)->desc.name;
    s = ty_graph_set_output(g, p->loss, name[0] ? name : "loss");
  }
  if (!s && p->mode == TY_TRAIN_STEP_FUSED && !p->fused_optimizer) {
    s = ty_append_optimizer(g, p->params, grads, p->decay, n, p);
  } else if (!s && p->mode == TY_TRAIN_STEP_ACCUMULATE && accumulate.done != n) {
    s = ty_status_make(TY_CODE_INTERNAL, "train step: %u of %u gradients were accumulated",
                       accumulate.done, n);
  }
  free(grads);
  free(wrt);
  return s ? ty_status_annotate(s, "building the train step") : TY_OK;
}

ty_status_t ty_graph_build_optimizer_step(ty_graph_t *g, const ty_tensor_desc_t *params,
                                          const bool *decay, uint32_t n,
                                          ty_optimizer_t optimizer, bool nesterov) {
  ty_train_step_params_t p = {.optimizer = optimizer, .nesterov = nesterov};
  return ty_graph_build_optimizer_step_ex(g, params, decay, n, &p);
}

ty_status_t ty_graph_build_optimizer_step_ex(ty_graph_t *g, const ty_tensor_desc_t *params,
                                             const bool *decay, uint32_t n,
                                             const ty_train_step_params_t *step) {
  if (n == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "optimizer step: no parameters");
  }
  if (step->norm_group && (step->norm_sq_input || step->update)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "optimizer step: a share of the gradients (norm_group) has its norm "
                          "summed in the graph and updates every parameter given (no "
                          "grad_norm_sq input, no update mask)");
  }
  ty_value_id_t *ids = calloc(n, sizeof(ty_value_id_t));
  ty_value_id_t *accs = calloc(n, sizeof(ty_value_id_t));
  ty_status_t s = (!ids || !accs) ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                                  : TY_OK;
  for (uint32_t i = 0; i < n && !s; ++i) {
    s = ty_graph_add_state(g, params[i].name, params[i].dtype, params[i].rank, params[i].dims,
                           &ids[i]);
    if (!s) s = ty_graph_set_memory_class(g, ids[i], TY_MEMORY_PARAMETER);
    if (!s) s = ty_param_state(g, &params[i], "grad_accum", &accs[i]);
    if (!s) s = ty_graph_set_memory_class(g, accs[i], TY_MEMORY_GRADIENT);
  }
  if (!s) s = ty_append_optimizer(g, ids, accs, decay, n, step);
  /* Reset the accumulators for the next optimizer step. */
  for (uint32_t i = 0; i < n && !s; ++i) {
    ty_value_id_t zeros;
    s = ty_graph_add_filled(g, TY_DTYPE_F32, params[i].rank, params[i].dims, 0.0, &zeros);
    if (!s) s = ty_graph_set_state_update(g, accs[i], zeros);
  }
  free(ids);
  free(accs);
  return s ? ty_status_annotate(s, "building the optimizer step") : TY_OK;
}

/* Whether parameter i is summed over the tied group too. */
static bool ty_reduce_tied(const ty_grad_reduce_params_t *r, uint32_t i) {
  return r->tied && r->tied[i] && r->tied_group;
}

ty_status_t ty_graph_build_grad_reduce(ty_graph_t *g, const ty_tensor_desc_t *params, uint32_t n,
                                       const ty_grad_reduce_params_t *r, bool *out_empty,
                                       bool *out_share) {
  *out_empty = true;
  *out_share = false;
  for (uint32_t i = 0; i < n; ++i) {
    if (r->sum_group || ty_reduce_tied(r, i) || (r->counted && r->counted[i])) *out_empty = false;
  }
  if (*out_empty) return TY_OK;
  /* Every sum first, in parameter order (a device batches consecutive
   * collectives of one group), then the squares. */
  ty_value_id_t *accs = calloc(2 * (size_t)n, sizeof(ty_value_id_t)), *sums = accs + n;
  if (!accs) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = TY_OK;
  for (uint32_t i = 0; i < n && !s; ++i) {
    s = ty_param_state(g, &params[i], "grad_accum", &accs[i]);
    if (!s) s = ty_graph_set_memory_class(g, accs[i], TY_MEMORY_GRADIENT);
    sums[i] = accs[i];
    if (!s && r->sum_group) s = ty_group_sum(g, accs[i], r->sum_group, &sums[i]);
  }
  for (uint32_t i = 0; i < n && !s; ++i) {
    if (ty_reduce_tied(r, i)) {
      ty_value_id_t once = sums[i];
      s = ty_group_sum(g, once, r->tied_group, &sums[i]);
    }
  }
  ty_value_id_t total = TY_VALUE_NONE;
  for (uint32_t i = 0; i < n && !s; ++i) {
    if (sums[i] != accs[i]) s = ty_graph_set_state_update(g, accs[i], sums[i]);
  }
  for (uint32_t i = 0; i < n && !s; ++i) {
    if (!r->counted || !r->counted[i]) continue;
    ty_value_id_t sq;
    s = ty_fused_sumsq(g, sums[i], &sq);
    if (!s) s = ty_add_into(g, &total, sq);
  }
  if (!s && total != TY_VALUE_NONE) {
    s = ty_graph_set_output(g, total, "grad_norm_sq_share");
    *out_share = !s;
  }
  free(accs);
  return s ? ty_status_annotate(s, "building the gradient sums") : TY_OK;
}
