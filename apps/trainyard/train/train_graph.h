/* The graphs `trainyard train` runs, built in one place so that
 * `trainyard compile` makes an artifact of exactly the graph a later
 * `trainyard train --artifact` builds (same canonical hash). */
#ifndef TY_APPS_TRAINYARD_TRAIN_GRAPH_H_
#define TY_APPS_TRAINYARD_TRAIN_GRAPH_H_

#include <stdint.h>

#include "graph/ir/graph.h"
#include "hal/device.h"
#include "graph/ir/train_step.h"
#include "models/config.h"
#include "models/llm.h"
#include "train_recipe.h"

typedef enum ty_train_graph_kind_e {
  /* forward, loss, backward, clipping and optimizer (grad_accum == 1), or
   * forward, loss, backward and accumulation (grad_accum > 1) */
  TY_TRAIN_GRAPH_STEP = 0,
  /* forward and the loss, for validation (shares the step's weights) */
  TY_TRAIN_GRAPH_EVAL = 1,
  /* forward with the logits as output: what `trainyard compile
   * --inference` compiles */
  TY_TRAIN_GRAPH_INFERENCE = 2,
} ty_train_graph_kind_t;

/* Builds the graph of `kind` for batches of B rows of T tokens in `dtype`
 * as `recipe` describes it (optimizer, dropout, decay_all, grad_accum,
 * levers, rank layout). The caller destroys *out_graph and deinits
 * *out_model (also on error). */
ty_status_t ty_train_graph_build(const ty_train_recipe_t *recipe,
                                 const ty_model_config_t *model_config, int64_t B, int64_t T,
                                 ty_dtype_t dtype, ty_train_graph_kind_t kind,
                                 ty_graph_t **out_graph, ty_llm_t *out_model);

/* The graph of `trainyard forward`: logits and the loss for B rows of T
 * tokens (inputs tokens, targets, loss_weights) with parameters in `dtype`
 * and matmuls/attention in `compute_dtype` (TY_DTYPE_INVALID: the same;
 * bf16 over f32: bf16-mixed), and with `grads` every
 * parameter's gradient as an output named "grad.<parameter name>". Built here
 * so that `trainyard check` checks exactly that graph. The caller destroys
 * *out_graph and deinits *out_model (also on error). */
ty_status_t ty_forward_graph_build(const ty_model_config_t *model_config, int64_t B, int64_t T,
                                   ty_dtype_t dtype, ty_dtype_t compute_dtype, bool grads,
                                   ty_graph_t **out_graph, ty_llm_t *out_model);

/* The parameters of `model_config` against --memory-limit
 * (recipe->memory_limit_bytes) or else the memory of `device`, before any graph is built: weights that
 * cannot fit even in bf16 (2 bytes each) are refused at once, the message
 * naming the run's own parameter dtype (--dtype; f32 under bf16-mixed)
 * (RESOURCE_EXHAUSTED, ty_llm_check_memory), since no lever could help and
 * a config of thousands of huge layers would take long to build and plan.
 * Gradients, optimizer state and activations depend on the levers: the
 * pre-flight memory plan (graph/runtime/preflight.h) checks them on the built graph. */
ty_status_t ty_train_graph_check_memory(const ty_train_recipe_t *recipe,
                                        const ty_model_config_t *model_config,
                                        ty_device_t *device);

/* The train-step options of the recipe: optimizer, Adafactor's
 * arguments and the memory levers (the fields of ty_train_step_params_t
 * that do not depend on a built model). */
ty_status_t ty_train_graph_step_options(const ty_train_recipe_t *recipe,
                                        ty_train_step_params_t *out);

/* The memory levers of the recipe as ty_abi_graph_t.levers words
 * ("recompute=layer loss_chunk=256 ..."; "" for none). */
void ty_train_graph_levers(const ty_train_recipe_t *recipe, char *out, size_t capacity);

/* The parameters' descriptors and weight-decay flags of a built model, for
 * the optimizer-step graph of gradient accumulation. Caller frees both. */
ty_status_t ty_train_graph_param_descs(const ty_train_recipe_t *recipe, const ty_graph_t *graph,
                                       const ty_llm_t *model, ty_tensor_desc_t **out_descs,
                                       bool **out_decay);

/* ZeRO-2's optimizer graph of a share: descs and decay (n, in parameter
 * order) and `flags` (NULL: none) packed in place to the entries with
 * keep[i]; their count. */
uint32_t ty_train_graph_keep_params(const bool *keep, uint32_t n, ty_tensor_desc_t *descs,
                                    bool *decay, bool *flags);

#endif /* TY_APPS_TRAINYARD_TRAIN_GRAPH_H_ */
