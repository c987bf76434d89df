/* The training step as one graph: forward (already built by the caller),
 * backward by autodiff, global-norm gradient clipping, and the optimizer
 * update, with parameters and optimizer moments as device-resident state.
 * Hyperparameters are per-run inputs, so schedules never recompile. */
#ifndef TY_GRAPH_TRAIN_STEP_H_
#define TY_GRAPH_TRAIN_STEP_H_

#include <stdbool.h>

#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_optimizer_e {
  TY_OPTIMIZER_ADAMW = 0,
  TY_OPTIMIZER_SGD = 1,
} ty_optimizer_t;

typedef struct ty_train_step_params_t {
  ty_value_id_t loss;        /* float value (scalar or per token) */
  ty_value_id_t loss_seed;   /* upstream gradient of loss; NONE = ones */
  const ty_value_id_t *params; /* STATE values to train */
  const bool *decay;           /* per param: apply weight decay (NULL = all) */
  uint32_t param_count;
  ty_optimizer_t optimizer;
  bool nesterov;               /* SGD only */
} ty_train_step_params_t;

/* Appends backward, clipping and optimizer to `graph` and declares:
 *  inputs  lr, weight_decay, max_norm (f32 []), and for AdamW beta1, beta2,
 *          eps (f32 []) and step (i64 [], 1-based); for SGD momentum (f32 []);
 *  states  "<param>.exp_avg" and "<param>.exp_avg_sq" (AdamW) or
 *          "<param>.momentum_buffer" (SGD), f32 like the param;
 *  outputs "loss" (the loss value, if it has no name yet) and "grad_norm"
 *          (the global norm before clipping);
 *  updates every param and moment.
 * A max_norm <= 0 disables clipping (the norm is still reported). */
ty_status_t ty_graph_build_train_step(ty_graph_t *graph,
                                      const ty_train_step_params_t *params);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_TRAIN_STEP_H_ */
