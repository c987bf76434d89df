/* Train-step construction: autodiff, then either clip_by_global_norm +
 * optimizer in the same graph, or accumulation into gradient states that a
 * separate optimizer-step graph consumes. */
#include "graph/train_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/autodiff.h"
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

/* Clipping and the optimizer for params[i] with gradients grads[i]; declares
 * the hyperparameter inputs and optimizer states, sets the state updates. */
static ty_status_t ty_append_optimizer(ty_graph_t *g, const ty_value_id_t *params,
                                       const ty_value_id_t *grads, const bool *decay,
                                       uint32_t n, ty_optimizer_t optimizer, bool nesterov) {
  ty_value_id_t *clip_in = calloc(n + 1, sizeof(ty_value_id_t));
  ty_value_id_t *clip_out = calloc(n + 1, sizeof(ty_value_id_t));
  ty_status_t s = (!clip_in || !clip_out)
                      ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                      : TY_OK;
  ty_value_id_t lr, wd, max_norm, zero;
  if (!s) s = ty_scalar_input(g, "lr", TY_DTYPE_F32, &lr);
  if (!s) s = ty_scalar_input(g, "weight_decay", TY_DTYPE_F32, &wd);
  if (!s) s = ty_scalar_input(g, "max_norm", TY_DTYPE_F32, &max_norm);
  if (!s) s = ty_graph_add_scalar(g, TY_DTYPE_F32, 0.0, &zero);
  if (!s) {
    clip_in[0] = max_norm;
    memcpy(clip_in + 1, grads, n * sizeof(ty_value_id_t));
    s = ty_graph_add_node(g, "clip_by_global_norm", clip_in, n + 1, NULL, clip_out, n + 1);
  }
  if (!s) s = ty_graph_set_output(g, clip_out[0], "grad_norm");
  if (!s && optimizer == TY_OPTIMIZER_ADAMW) {
    ty_value_id_t beta1, beta2, eps, step;
    if (!s) s = ty_scalar_input(g, "beta1", TY_DTYPE_F32, &beta1);
    if (!s) s = ty_scalar_input(g, "beta2", TY_DTYPE_F32, &beta2);
    if (!s) s = ty_scalar_input(g, "eps", TY_DTYPE_F32, &eps);
    if (!s) s = ty_scalar_input(g, "step", TY_DTYPE_I64, &step);
    for (uint32_t i = 0; i < n && !s; ++i) {
      ty_tensor_desc_t param = ty_graph_value(g, params[i])->desc;
      ty_value_id_t m, v, grad, out[3];
      if ((s = ty_param_state(g, &param, "exp_avg", &m))) break;
      if ((s = ty_param_state(g, &param, "exp_avg_sq", &v))) break;
      if ((s = ty_as_dtype(g, clip_out[1 + i], param.dtype, &grad))) break;
      bool d = decay ? decay[i] : true;
      ty_value_id_t in[10] = {params[i], grad, m, v, lr, beta1, beta2, eps, d ? wd : zero, step};
      if ((s = ty_graph_add_node(g, "adamw_update", in, 10, NULL, out, 3))) break;
      if ((s = ty_graph_set_state_update(g, params[i], out[0]))) break;
      if ((s = ty_graph_set_state_update(g, m, out[1]))) break;
      s = ty_graph_set_state_update(g, v, out[2]);
    }
  } else if (!s) {
    ty_value_id_t momentum;
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    s = ty_scalar_input(g, "momentum", TY_DTYPE_F32, &momentum);
    if (!s) s = ty_attrs_set_int(&attrs, "nesterov", nesterov ? 1 : 0);
    for (uint32_t i = 0; i < n && !s; ++i) {
      ty_tensor_desc_t param = ty_graph_value(g, params[i])->desc;
      ty_value_id_t buf, grad, out[2];
      if ((s = ty_param_state(g, &param, "momentum_buffer", &buf))) break;
      if ((s = ty_as_dtype(g, clip_out[1 + i], param.dtype, &grad))) break;
      bool d = decay ? decay[i] : true;
      ty_value_id_t in[6] = {params[i], grad, buf, lr, momentum, d ? wd : zero};
      if ((s = ty_graph_add_node(g, "sgd_update", in, 6, &attrs, out, 2))) break;
      if ((s = ty_graph_set_state_update(g, params[i], out[0]))) break;
      s = ty_graph_set_state_update(g, buf, out[1]);
    }
  }
  free(clip_in);
  free(clip_out);
  return s;
}

static ty_status_t ty_check_params(const ty_graph_t *g, const ty_value_id_t *params,
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
  }
  return TY_OK;
}

ty_status_t ty_graph_build_train_step(ty_graph_t *g, const ty_train_step_params_t *p) {
  uint32_t n = p->param_count;
  TY_RETURN_IF_ERROR(ty_check_params(g, p->params, n));
  ty_value_id_t *grads = calloc(n, sizeof(ty_value_id_t));
  if (!grads) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = ty_graph_autodiff(g, p->loss, p->loss_seed, p->params, n, grads);
  if (!s) {
    const char *name = ty_graph_value(g, p->loss)->desc.name;
    s = ty_graph_set_output(g, p->loss, name[0] ? name : "loss");
  }
  if (!s && p->mode == TY_TRAIN_STEP_FUSED) {
    s = ty_append_optimizer(g, p->params, grads, p->decay, n, p->optimizer, p->nesterov);
  } else if (!s) {
    /* acc += grad (in f32, whatever the parameter's dtype) */
    for (uint32_t i = 0; i < n && !s; ++i) {
      ty_tensor_desc_t param = ty_graph_value(g, p->params[i])->desc;
      ty_value_id_t acc, grad32, sum;
      if ((s = ty_param_state(g, &param, "grad_accum", &acc))) break;
      if ((s = ty_as_dtype(g, grads[i], TY_DTYPE_F32, &grad32))) break;
      ty_value_id_t in[2] = {acc, grad32};
      if ((s = ty_graph_add_node1(g, "add", in, 2, NULL, &sum))) break;
      s = ty_graph_set_state_update(g, acc, sum);
    }
  }
  free(grads);
  return s ? ty_status_annotate(s, "building the train step") : TY_OK;
}

ty_status_t ty_graph_build_optimizer_step(ty_graph_t *g, const ty_tensor_desc_t *params,
                                          const bool *decay, uint32_t n,
                                          ty_optimizer_t optimizer, bool nesterov) {
  if (n == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "optimizer step: no parameters");
  }
  ty_value_id_t *ids = calloc(n, sizeof(ty_value_id_t));
  ty_value_id_t *accs = calloc(n, sizeof(ty_value_id_t));
  ty_status_t s = (!ids || !accs) ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                                  : TY_OK;
  for (uint32_t i = 0; i < n && !s; ++i) {
    s = ty_graph_add_state(g, params[i].name, params[i].dtype, params[i].rank, params[i].dims,
                           &ids[i]);
    if (!s) s = ty_param_state(g, &params[i], "grad_accum", &accs[i]);
  }
  if (!s) s = ty_append_optimizer(g, ids, accs, decay, n, optimizer, nesterov);
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
