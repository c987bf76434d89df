/* The graphs of `trainyard train` and `trainyard compile` (train_graph.h). */
#include "train_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/autodiff.h"
#include "hal/dtype.h"
#include "graph/train_step.h"

ty_status_t ty_train_graph_check_memory(const ty_train_config_t *c, const ty_model_config_t *mc,
                                        ty_dtype_t dtype, bool trains, ty_device_t *device) {
  uint64_t extra = 0;
  if (trains) {
    extra = ty_dtype_size(dtype);                       /* gradients */
    extra += strcmp(c->optimizer, "sgd") == 0 ? 4 : 8;  /* f32 moments */
    if (c->grad_accum > 1) extra += 4;                  /* f32 accumulators */
  }
  return ty_llm_check_memory(mc, dtype, extra, ty_device_info(device)->memory_bytes,
                             ty_device_label(device));
}

ty_status_t ty_train_graph_param_descs(const ty_train_config_t *c, const ty_graph_t *g,
                                       const ty_llm_t *m, ty_tensor_desc_t **out_descs,
                                       bool **out_decay) {
  uint32_t n = m->param_count;
  *out_descs = calloc(n ? n : 1, sizeof(ty_tensor_desc_t));
  *out_decay = calloc(n ? n : 1, sizeof(bool));
  if (!*out_descs || !*out_decay) {
    free(*out_descs);
    free(*out_decay);
    *out_descs = NULL;
    *out_decay = NULL;
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < n; ++i) {
    (*out_decay)[i] = c->decay_all || m->params[i].decay;
    (*out_descs)[i] = ty_graph_value(g, m->params[i].value)->desc;
  }
  return TY_OK;
}

ty_status_t ty_train_graph_build(const ty_train_config_t *c, const ty_model_config_t *mc,
                                 int64_t B, int64_t T, ty_dtype_t dtype,
                                 ty_train_graph_kind_t kind, ty_graph_t **out_graph,
                                 ty_llm_t *out_model) {
  memset(out_model, 0, sizeof(*out_model));
  *out_graph = NULL;
  ty_dtype_t param_dtype, compute_dtype;
  TY_RETURN_IF_ERROR(ty_llm_precision_parse(c->dtype, &param_dtype, &compute_dtype));
  if (param_dtype != dtype) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--dtype %s keeps parameters in %s, not %s",
                          c->dtype, ty_dtype_name(param_dtype), ty_dtype_name(dtype));
  }
  ty_llm_options_t opts = {.batch = B, .seq = T, .dtype = dtype, .compute_dtype = compute_dtype};
  if (kind == TY_TRAIN_GRAPH_STEP) {
    opts.with_loss = true;
    opts.dropout = c->dropout;
  } else if (kind == TY_TRAIN_GRAPH_EVAL) {
    opts.with_loss = true;
  } else {
    opts.logits_output = true;
  }
  TY_RETURN_IF_ERROR(ty_graph_create(out_graph));
  TY_RETURN_IF_ERROR(ty_llm_build(*out_graph, mc, &opts, out_model));
  if (kind != TY_TRAIN_GRAPH_STEP) return TY_OK;
  uint32_t n = out_model->param_count;
  ty_value_id_t *params = calloc(n ? n : 1, sizeof(ty_value_id_t));
  ty_tensor_desc_t *descs = NULL;
  bool *decay = NULL;
  ty_status_t s = params ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = ty_train_graph_param_descs(c, *out_graph, out_model, &descs, &decay);
  for (uint32_t i = 0; i < n && !s; ++i) params[i] = out_model->params[i].value;
  ty_train_step_params_t tp = {
      .loss = out_model->loss, .loss_seed = TY_VALUE_NONE, .params = params, .decay = decay,
      .param_count = n,
      .optimizer = !strcmp(c->optimizer, "sgd") ? TY_OPTIMIZER_SGD : TY_OPTIMIZER_ADAMW,
      .mode = c->grad_accum > 1 ? TY_TRAIN_STEP_ACCUMULATE : TY_TRAIN_STEP_FUSED};
  if (!s) s = ty_graph_build_train_step(*out_graph, &tp);
  free(params);
  free(descs);
  free(decay);
  return s;
}

ty_status_t ty_forward_graph_build(const ty_model_config_t *mc, int64_t B, int64_t T,
                                   ty_dtype_t dtype, ty_dtype_t compute_dtype, bool grads,
                                   ty_graph_t **out_graph, ty_llm_t *out_model) {
  memset(out_model, 0, sizeof(*out_model));
  *out_graph = NULL;
  ty_llm_options_t options = {.batch = B, .seq = T, .dtype = dtype,
                              .compute_dtype = compute_dtype, .with_loss = true,
                              .logits_output = true};
  TY_RETURN_IF_ERROR(ty_graph_create(out_graph));
  TY_RETURN_IF_ERROR(ty_llm_build(*out_graph, mc, &options, out_model));
  if (!grads) return TY_OK;
  uint32_t n = out_model->param_count;
  ty_value_id_t *wrt = calloc(n ? n : 1, sizeof(ty_value_id_t));
  ty_value_id_t *grad_values = calloc(n ? n : 1, sizeof(ty_value_id_t));
  ty_status_t s = wrt && grad_values
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n && !s; ++i) wrt[i] = out_model->params[i].value;
  if (!s) s = ty_graph_autodiff(*out_graph, out_model->loss, TY_VALUE_NONE, wrt, n, grad_values);
  for (uint32_t i = 0; i < n && !s; ++i) {
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "grad.%s", out_model->params[i].name);
    s = ty_graph_set_output(*out_graph, grad_values[i], name);
  }
  free(wrt);
  free(grad_values);
  return s;
}
