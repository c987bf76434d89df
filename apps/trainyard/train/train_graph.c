/* The graphs of `trainyard train` and `trainyard compile` (train_graph.h). */
#include "train_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir/autodiff.h"
#include "hal/dtype.h"
#include "train_plan.h"

ty_status_t ty_train_graph_check_memory(const ty_train_recipe_t *c, const ty_model_config_t *mc,
                                        ty_device_t *device) {
  const uint64_t limit = c->memory_limit_bytes;
  char where[160];
  snprintf(where, sizeof(where), "%s%s%s", ty_device_label(device),
           limit ? " under --memory-limit " : "", limit ? c->memory_limit : "");
  uint64_t memory = limit ? limit : ty_device_info(device)->memory_bytes;
  /* The bound is bf16's 2 bytes a weight, since --dtype is a lever the
   * memory plan may name; the message names the run's own dtype (f32 under
   * bf16-mixed), never one the run does not use. */
  ty_status_t s = ty_llm_check_memory(mc, TY_DTYPE_BF16, 0, memory, where);
  ty_dtype_t param_dtype = TY_DTYPE_BF16, compute_dtype = TY_DTYPE_BF16;
  ty_status_t parsed = s ? ty_llm_precision_parse(c->precision, &param_dtype, &compute_dtype) : TY_OK;
  if (!s || parsed || param_dtype == TY_DTYPE_BF16) {
    ty_status_free(parsed);
    return s;
  }
  ty_status_free(s);
  s = ty_llm_check_memory(mc, param_dtype, 0, memory, where);
  if (!s) return TY_OK; /* not reached: no dtype is smaller than bf16 */
  ty_status_t out = ty_status_make(ty_status_code(s), "%s; not even bf16 weights (2 bytes "
                                   "each) would fit", ty_status_message(s));
  ty_status_free(s);
  return out;
}

ty_status_t ty_train_graph_param_descs(const ty_train_recipe_t *c, const ty_graph_t *g,
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

uint32_t ty_train_graph_keep_params(const bool *keep, uint32_t n, ty_tensor_desc_t *descs,
                                    bool *decay, bool *flags) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    descs[k] = descs[i];
    decay[k] = decay[i];
    if (flags) flags[k] = flags[i];
    ++k;
  }
  return k;
}

ty_status_t ty_train_graph_step_options(const ty_train_recipe_t *c, ty_train_step_params_t *p) {
  memset(p, 0, sizeof(*p));
  p->optimizer = !strcmp(c->optimizer, "sgd")         ? TY_OPTIMIZER_SGD
                 : !strcmp(c->optimizer, "adafactor") ? TY_OPTIMIZER_ADAFACTOR
                                                      : TY_OPTIMIZER_ADAMW;
  /* Accumulation and data parallelism both split the step where the
   * gradients are complete: the host path reduces them over the ranks
   * between the gradient graph and the optimizer graph. A whole-step device
   * keeps one graph with the all-reduce ops inside it instead. */
  const bool in_graph = c->world > 1 && c->world_in_graph;
  /* --deterministic: one row's gradients at a time, summed on the host */
  p->mode = c->grad_accum > 1 || (c->world > 1 && !in_graph) || c->deterministic
                ? TY_TRAIN_STEP_ACCUMULATE
                : TY_TRAIN_STEP_FUSED;
  p->all_reduce_grads = in_graph;
  TY_RETURN_IF_ERROR(ty_recompute_parse(c->recompute, &p->recompute));
  p->fused_optimizer = c->fused_optimizer;
  p->fused_clip = c->fused_optimizer && c->clip > 0;
  p->offload_optimizer = !strcmp(c->offload, "optimizer");
  p->adafactor = c->adafactor;
  return TY_OK;
}

void ty_train_graph_levers(const ty_train_recipe_t *c, char *out, size_t capacity) {
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
  if (c->mlp_chunk > 0) TY_LEVER("mlp_chunk=%lld", (long long)c->mlp_chunk);
  if (!strcmp(c->optimizer, "adafactor")) TY_LEVER("optimizer=adafactor");
  if (c->fused_optimizer) TY_LEVER("fused_optimizer=1");
  if (strcmp(c->offload, "none")) TY_LEVER("offload=%s", c->offload);
  if (!strcmp(c->precision, "bf16")) TY_LEVER("dtype=bf16");
  /* The world a whole-step device's all_reduce ops sum over: recorded so an
   * artifact for N ranks is refused in a run of another size. */
  if (c->world > 1 && c->world_in_graph) TY_LEVER("data_parallel=%lld", (long long)c->world);
#undef TY_LEVER
}

ty_status_t ty_train_graph_build(const ty_train_recipe_t *c, const ty_model_config_t *mc,
                                 int64_t B, int64_t T, ty_dtype_t dtype,
                                 ty_train_graph_kind_t kind, ty_graph_t **out_graph,
                                 ty_llm_t *out_model) {
  memset(out_model, 0, sizeof(*out_model));
  *out_graph = NULL;
  ty_dtype_t param_dtype, compute_dtype;
  TY_RETURN_IF_ERROR(ty_llm_precision_parse(c->precision, &param_dtype, &compute_dtype));
  if (param_dtype != dtype) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--dtype %s keeps parameters in %s, not %s",
                          c->precision, ty_dtype_name(param_dtype), ty_dtype_name(dtype));
  }
  ty_llm_options_t opts = {.batch = B, .seq = T, .dtype = dtype, .compute_dtype = compute_dtype};
  if (kind != TY_TRAIN_GRAPH_INFERENCE) { /* this rank's part of a tensor-parallel model */
    opts.tp_size = (int)c->tp;
    opts.tp_rank = (int)c->tp_rank;
  }
  if (kind == TY_TRAIN_GRAPH_STEP) { /* this rank's chunks of each sequence */
    opts.cp_size = (int)c->cp;
    opts.cp_rank = (int)c->cp_rank;
  }
  if (kind == TY_TRAIN_GRAPH_STEP) {
    opts.with_loss = true;
    opts.dropout = c->dropout;
    opts.loss_chunk = c->loss_chunk;
    opts.mlp_chunk = c->mlp_chunk;
  } else if (kind == TY_TRAIN_GRAPH_EVAL) {
    opts.with_loss = true;
    opts.loss_chunk = c->loss_chunk;
    opts.mlp_chunk = c->mlp_chunk;
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
  /* ZeRO-1 in the fused step: the gradients are summed by all_reduce ops,
   * this rank updates the parameters it owns (and has optimizer state for
   * those only), and the trainer broadcasts each from its owner after the
   * run. */
  /* ZeRO-2 in the split step: each gradient summed over the zero group by
   * an all_reduce op as backward completes it, and added into an
   * accumulator by its owner alone (the same shares as the trainer's
   * ty_trainer_dist_owners). */
  const bool fused_zero = c->zero && c->world > 1 && c->world_in_graph;
  const bool zero_grads = !s && c->zero == 2 && tp.mode == TY_TRAIN_STEP_ACCUMULATE;
  if (zero_grads && (c->zero_shares < 2 || !c->zero_group[0])) {
    s = ty_status_make(TY_CODE_INTERNAL, "ZeRO-2: the step was built without its shares");
  }
  bool *updates = NULL;
  if (!s && (fused_zero || zero_grads)) {
    int64_t *elements = calloc(n ? n : 1, sizeof(int64_t));
    int *owner = calloc(n ? n : 1, sizeof(int));
    updates = calloc(n ? n : 1, sizeof(bool));
    if (!elements || !owner || !updates) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      for (uint32_t i = 0; i < n; ++i) elements[i] = ty_tensor_desc_element_count(&descs[i]);
      s = ty_train_plan_zero_owners(elements, n, (int)(fused_zero ? c->world : c->zero_shares),
                                    NULL, (int)(fused_zero ? c->rank : c->zero_index), owner,
                                    updates);
      if (fused_zero) {
        tp.update = updates;
      } else {
        tp.accumulate = updates;
        tp.grad_group = c->zero_group;
      }
    }
    free(elements);
    free(owner);
  }
  tp.loss = out_model->loss;
  tp.loss_seed = TY_VALUE_NONE;
  tp.params = params;
  tp.decay = decay;
  tp.param_count = n;
  if (!s) s = ty_graph_build_train_step(*out_graph, &tp);
  free(updates);
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
