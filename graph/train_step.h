/* The training step as one graph: forward (already built by the caller),
 * backward by autodiff, global-norm gradient clipping, and the optimizer
 * update, with parameters and optimizer moments as device-resident state.
 * Hyperparameters are per-run inputs, so schedules never recompile. */
#ifndef TY_GRAPH_TRAIN_STEP_H_
#define TY_GRAPH_TRAIN_STEP_H_

#include <stdbool.h>

#include "graph/graph.h"
#include "hal/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_optimizer_e {
  TY_OPTIMIZER_ADAMW = 0,
  TY_OPTIMIZER_SGD = 1,
} ty_optimizer_t;

/* What the graph does with the gradients. */
typedef enum ty_train_step_mode_e {
  /* forward + backward + clipping + optimizer in one graph (one run per
   * optimizer step) */
  TY_TRAIN_STEP_FUSED = 0,
  /* forward + backward, adding the gradients into f32 states
   * "<param>.grad_accum"; pair with ty_graph_build_optimizer_step on a
   * session that shares those states (gradient accumulation) */
  TY_TRAIN_STEP_ACCUMULATE = 1,
} ty_train_step_mode_t;

typedef struct ty_train_step_params_t {
  ty_value_id_t loss;        /* float value (scalar or per token) */
  ty_value_id_t loss_seed;   /* upstream gradient of loss; NONE = ones */
  const ty_value_id_t *params; /* STATE values to train */
  const bool *decay;           /* per param: apply weight decay (NULL = all) */
  uint32_t param_count;
  ty_optimizer_t optimizer;
  bool nesterov;               /* SGD only */
  ty_train_step_mode_t mode;
} ty_train_step_params_t;

/* FUSED: appends backward, clipping and optimizer to `graph` and declares:
 *  inputs  lr, weight_decay, max_norm (f32 []), and for AdamW beta1, beta2,
 *          eps (f32 []) and step (i64 [], 1-based); for SGD momentum (f32 []);
 *  states  "<param>.exp_avg" and "<param>.exp_avg_sq" (AdamW) or
 *          "<param>.momentum_buffer" (SGD), f32 like the param;
 *  outputs "loss" (the loss value, if it has no name yet) and "grad_norm"
 *          (the global norm before clipping);
 *  updates every param and moment.
 * A max_norm <= 0 disables clipping (the norm is still reported).
 * ACCUMULATE: appends backward and the accumulation only (states
 * "<param>.grad_accum", output "loss"). */
ty_status_t ty_graph_build_train_step(ty_graph_t *graph,
                                      const ty_train_step_params_t *params);

/* The optimizer half of gradient accumulation, in its own graph: declares
 * the parameters (STATE, named and shaped as `params` describes), their
 * "<param>.grad_accum" states, optimizer states and the inputs above; clips
 * the accumulated gradients by their global norm, applies the optimizer and
 * resets the accumulators to zero. Outputs "grad_norm". */
ty_status_t ty_graph_build_optimizer_step(ty_graph_t *graph,
                                          const ty_tensor_desc_t *params,
                                          const bool *decay, uint32_t param_count,
                                          ty_optimizer_t optimizer, bool nesterov);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_TRAIN_STEP_H_ */
