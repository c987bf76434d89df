/* The graphs of `trainyard train` and `trainyard compile` (train_graph.h). */
#include "train_graph.h"

#include <stdlib.h>
#include <string.h>


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

ty_status_t ty_train_graph_step_options(const ty_train_config_t *c, ty_train_step_params_t *p) {
  memset(p, 0, sizeof(*p));
  p->optimizer = !strcmp(c->optimizer, "sgd")         ? TY_OPTIMIZER_SGD
                 : !strcmp(c->optimizer, "adafactor") ? TY_OPTIMIZER_ADAFACTOR
                                                      : TY_OPTIMIZER_ADAMW;
  p->mode = c->grad_accum > 1 ? TY_TRAIN_STEP_ACCUMULATE : TY_TRAIN_STEP_FUSED;
  TY_RETURN_IF_ERROR(ty_recompute_parse(c->recompute, &p->recompute));
  p->fused_optimizer = c->fused_optimizer;
  p->fused_clip = c->fused_optimizer && c->clip > 0;
  p->offload_optimizer = !strcmp(c->offload, "optimizer");
  p->adafactor = (ty_adafactor_config_t){
      .set = true, .eps1 = c->adafactor_eps1, .eps2 = c->adafactor_eps2,
      .clip_threshold = c->clip_threshold, .decay_rate = c->decay_rate,
      .relative_step = c->relative_step, .scale_parameter = c->scale_parameter,
      .warmup_init = c->warmup_init,
      /* transformers' beta1=None unless given: --beta1 on purpose turns it on */
      .momentum = ty_train_config_layer(c, "beta1") != TY_TRAIN_LAYER_DEFAULT};
  return TY_OK;
}

void ty_train_graph_levers(const ty_train_config_t *c, char *out, size_t capacity) {
  size_t used = 0;
  out[0] = '\0';
#define TY_LEVER(...)                                                              \
  do {                                                                             \
    int n_ = snprintf(out + used, capacity - used, "%s", used ? " " : "");         \
    if (n_ > 0 && (size_t)n_ < capacity - used) used += (size_t)n_;                \
    n_ = snprintf(out + used, capacity - used, __VA_ARGS__);                       \
    if (n_ > 0 && (size_t)n_ < capacity - used) used += (size_t)n_;                \
  } while (0)
  if (strcmp(c->recompute, "none")) TY_LEVER("recompute=%s", c->recompute);
  if (c->loss_chunk > 0) TY_LEVER("loss_chunk=%lld", (long long)c->loss_chunk);
  if (!strcmp(c->optimizer, "adafactor")) TY_LEVER("optimizer=adafactor");
  if (c->fused_optimizer) TY_LEVER("fused_optimizer=1");
  if (strcmp(c->offload, "none")) TY_LEVER("offload=%s", c->offload);
  if (!strcmp(c->dtype, "bf16")) TY_LEVER("dtype=bf16");
#undef TY_LEVER
}

ty_status_t ty_train_graph_build(const ty_train_config_t *c, const ty_model_config_t *mc,
                                 int64_t B, int64_t T, ty_dtype_t dtype,
                                 ty_train_graph_kind_t kind, ty_graph_t **out_graph,
                                 ty_llm_t *out_model) {
  memset(out_model, 0, sizeof(*out_model));
  *out_graph = NULL;
  ty_llm_options_t opts = {.batch = B, .seq = T, .dtype = dtype};
  if (kind == TY_TRAIN_GRAPH_STEP) {
    opts.with_loss = true;
    opts.dropout = c->dropout;
    opts.loss_chunk = c->loss_chunk;
  } else if (kind == TY_TRAIN_GRAPH_EVAL) {
    opts.with_loss = true;
    opts.loss_chunk = c->loss_chunk;
  } else {
    opts.logits_output = true;
  }
  TY_RETURN_IF_ERROR(ty_graph_create(out_graph));
  char levers[256];
  ty_train_graph_levers(c, levers, sizeof(levers));
  if (kind == TY_TRAIN_GRAPH_STEP) TY_RETURN_IF_ERROR(ty_graph_set_levers(*out_graph, levers));
  TY_RETURN_IF_ERROR(ty_llm_build(*out_graph, mc, &opts, out_model));
  if (kind != TY_TRAIN_GRAPH_STEP) return TY_OK;
  uint32_t n = out_model->param_count;
  ty_value_id_t *params = calloc(n ? n : 1, sizeof(ty_value_id_t));
  ty_tensor_desc_t *descs = NULL;
  bool *decay = NULL;
  ty_status_t s = params ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = ty_train_graph_param_descs(c, *out_graph, out_model, &descs, &decay);
  for (uint32_t i = 0; i < n && !s; ++i) params[i] = out_model->params[i].value;
  ty_train_step_params_t tp;
  if (!s) s = ty_train_graph_step_options(c, &tp);
  tp.loss = out_model->loss;
  tp.loss_seed = TY_VALUE_NONE;
  tp.params = params;
  tp.decay = decay;
  tp.param_count = n;
  if (!s) s = ty_graph_build_train_step(*out_graph, &tp);
  free(params);
  free(descs);
  free(decay);
  return s;
}
