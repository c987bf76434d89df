/* Train-step construction: autodiff + clip_by_global_norm + optimizer. */
#include "graph/train_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/autodiff.h"

static ty_status_t ty_scalar_input(ty_graph_t *g, const char *name, ty_dtype_t dtype,
                                   ty_value_id_t *out) {
  return ty_graph_add_input(g, name, dtype, 0, NULL, out);
}

static ty_status_t ty_moment_state(ty_graph_t *g, const ty_graph_value_t *param,
                                   const char *suffix, ty_value_id_t *out) {
  char name[TY_TENSOR_NAME_MAX];
  int n = snprintf(name, sizeof(name), "%s.%s", param->desc.name, suffix);
  if (n < 0 || (size_t)n >= sizeof(name)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "parameter name '%s' is too long for its optimizer state",
                          param->desc.name);
  }
  return ty_graph_add_state(g, name, TY_DTYPE_F32, param->desc.rank,
                            param->desc.dims, out);
}

ty_status_t ty_graph_build_train_step(ty_graph_t *g, const ty_train_step_params_t *p) {
  uint32_t n = p->param_count;
  if (n == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "train step: no parameters to train");
  }
  for (uint32_t i = 0; i < n; ++i) {
    const ty_graph_value_t *v = ty_graph_value(g, p->params[i]);
    if (!v || v->role != TY_VALUE_STATE) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "train step: parameter %u is not a state value", i);
    }
  }
  ty_value_id_t *grads = calloc(n, sizeof(ty_value_id_t));
  ty_value_id_t *clip_in = calloc(n + 1, sizeof(ty_value_id_t));
  ty_value_id_t *clip_out = calloc(n + 1, sizeof(ty_value_id_t));
  ty_status_t s = TY_OK;
  if (!grads || !clip_in || !clip_out) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory building a train step");
    goto done;
  }
  s = ty_graph_autodiff(g, p->loss, p->loss_seed, p->params, n, grads);
  if (s) goto done;

  ty_value_id_t lr, wd, max_norm, zero;
  if ((s = ty_scalar_input(g, "lr", TY_DTYPE_F32, &lr))) goto done;
  if ((s = ty_scalar_input(g, "weight_decay", TY_DTYPE_F32, &wd))) goto done;
  if ((s = ty_scalar_input(g, "max_norm", TY_DTYPE_F32, &max_norm))) goto done;
  if ((s = ty_graph_add_scalar(g, TY_DTYPE_F32, 0.0, &zero))) goto done;

  clip_in[0] = max_norm;
  memcpy(clip_in + 1, grads, n * sizeof(ty_value_id_t));
  if ((s = ty_graph_add_node(g, "clip_by_global_norm", clip_in, n + 1, NULL,
                             clip_out, n + 1))) {
    goto done;
  }
  if ((s = ty_graph_set_output(g, clip_out[0], "grad_norm"))) goto done;
  if (!ty_graph_value(g, p->loss)->desc.name[0]) {
    if ((s = ty_graph_set_output(g, p->loss, "loss"))) goto done;
  } else {
    if ((s = ty_graph_set_output(g, p->loss, ty_graph_value(g, p->loss)->desc.name))) goto done;
  }

  if (p->optimizer == TY_OPTIMIZER_ADAMW) {
    ty_value_id_t beta1, beta2, eps, step;
    if ((s = ty_scalar_input(g, "beta1", TY_DTYPE_F32, &beta1))) goto done;
    if ((s = ty_scalar_input(g, "beta2", TY_DTYPE_F32, &beta2))) goto done;
    if ((s = ty_scalar_input(g, "eps", TY_DTYPE_F32, &eps))) goto done;
    if ((s = ty_scalar_input(g, "step", TY_DTYPE_I64, &step))) goto done;
    for (uint32_t i = 0; i < n && !s; ++i) {
      ty_graph_value_t param = *ty_graph_value(g, p->params[i]);
      ty_value_id_t m, v, out[3];
      if ((s = ty_moment_state(g, &param, "exp_avg", &m))) break;
      if ((s = ty_moment_state(g, &param, "exp_avg_sq", &v))) break;
      bool decay = p->decay ? p->decay[i] : true;
      ty_value_id_t in[10] = {p->params[i], clip_out[1 + i], m, v, lr,
                              beta1, beta2, eps, decay ? wd : zero, step};
      if ((s = ty_graph_add_node(g, "adamw_update", in, 10, NULL, out, 3))) break;
      if ((s = ty_graph_set_state_update(g, p->params[i], out[0]))) break;
      if ((s = ty_graph_set_state_update(g, m, out[1]))) break;
      s = ty_graph_set_state_update(g, v, out[2]);
    }
  } else {
    ty_value_id_t momentum;
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    if ((s = ty_scalar_input(g, "momentum", TY_DTYPE_F32, &momentum))) goto done;
    if ((s = ty_attrs_set_int(&attrs, "nesterov", p->nesterov ? 1 : 0))) goto done;
    for (uint32_t i = 0; i < n && !s; ++i) {
      ty_graph_value_t param = *ty_graph_value(g, p->params[i]);
      ty_value_id_t buf, out[2];
      if ((s = ty_moment_state(g, &param, "momentum_buffer", &buf))) break;
      bool decay = p->decay ? p->decay[i] : true;
      ty_value_id_t in[6] = {p->params[i], clip_out[1 + i], buf, lr, momentum,
                             decay ? wd : zero};
      if ((s = ty_graph_add_node(g, "sgd_update", in, 6, &attrs, out, 2))) break;
      if ((s = ty_graph_set_state_update(g, p->params[i], out[0]))) break;
      s = ty_graph_set_state_update(g, buf, out[1]);
    }
  }
done:
  free(grads);
  free(clip_in);
  free(clip_out);
  return s ? ty_status_annotate(s, "building the train step") : TY_OK;
}
