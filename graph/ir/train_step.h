/* The training step as one graph: forward (already built by the caller),
 * backward by autodiff, global-norm gradient clipping, and the optimizer
 * update, with parameters and optimizer moments as device-resident state.
 * Hyperparameters are per-run inputs, so schedules never recompile. The
 * backward re-casts mixed-precision weights where it reads them
 * (autodiff.h, recast_states) rather than keeping the forward's casts. */
#ifndef TY_GRAPH_TRAIN_STEP_H_
#define TY_GRAPH_TRAIN_STEP_H_

#include <stdbool.h>

#include "graph/ir/autodiff.h"
#include "graph/ir/graph.h"
#include "hal/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_optimizer_e {
  TY_OPTIMIZER_ADAMW = 0,
  TY_OPTIMIZER_SGD = 1,
  TY_OPTIMIZER_ADAFACTOR = 2,
} ty_optimizer_t;

/* transformers.Adafactor's constructor arguments that are fixed for a run
 * (adafactor_update attributes; lr, weight_decay and beta1 are inputs).
 * Zero-initialized means transformers' defaults except relative_step,
 * which is off here: set `set` and the fields to choose. */
typedef struct ty_adafactor_config_t {
  bool set;              /* false: eps1 1e-30, eps2 1e-3, clip 1, decay -0.8,
                            scale_parameter on, relative_step and warmup off */
  double eps1, eps2, clip_threshold, decay_rate;
  bool relative_step, scale_parameter, warmup_init;
  bool momentum;         /* first moment (transformers' beta1 not None):
                            states "<param>.exp_avg" and input beta1 */
} ty_adafactor_config_t;

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
  /* Memory levers (docs/design-notes.md, "Fitting bigger models"). */
  ty_recompute_t recompute;    /* activation checkpointing (autodiff.h) */
  ty_adafactor_config_t adafactor; /* TY_OPTIMIZER_ADAFACTOR only */
  /* FUSED mode only: each parameter's update is emitted right after the
   * backward node that completes its gradient, so the gradient's bytes are
   * free again before the next one is made and no full set of gradients
   * ever exists. The global gradient norm ("grad_norm") then comes from
   * per-gradient sums of squares (global_norm_scale). With fused_clip, a
   * first backward pass computes only that norm (each gradient reduced to
   * its sum of squares as it completes) and the second scales every
   * gradient by min(1, max_norm / (norm + 1e-6)) before its update: clipping
   * as clip_by_global_norm does, for one extra backward. */
  bool fused_optimizer;
  bool fused_clip;
  /* Marks every optimizer state TY_VALUE_FLAG_HOST_RESIDENT (ABI 1.3): a
   * device backend keeps it in pinned host memory (backends without their
   * own memory refuse the flag). */
  bool offload_optimizer;
  /* Optimizer step graphs only (ZeRO-1, docs/design-notes.md "Many
   * devices"): per parameter, false leaves it as it is and gives it no
   * optimizer state, while its gradient still counts in the global norm and
   * its accumulator is still reset; another rank updates it. NULL: update
   * every parameter. */
  const bool *update;
  /* FUSED mode, data parallel in one graph (docs/design-notes.md "Many
   * devices"): each gradient is summed over the run's ranks by an
   * all_reduce op between backward and clipping, so a device that runs the
   * whole step in one call (dataflow) reduces inside it, through the
   * host's collective service (ABI 1.5). At world 1 the op is the identity.
   * Not with fused_optimizer (the update would precede the sum). */
  bool all_reduce_grads;
  /* ACCUMULATE mode, pipeline stages (docs/design-notes.md "Pipeline
   * parallel"): the gradients of these values too (a stage's input, the
   * previous stage's activations), in the same backward pass, as outputs
   * named wrt_input_names[i]. */
  const ty_value_id_t *wrt_inputs;
  const char *const *wrt_input_names;
  uint32_t wrt_input_count;
  /* Tensor parallel (issue 17): per parameter, true when this rank holds a
   * part of a tensor split over the "tp" group. Clipping's global norm is
   * then the whole model's: the split gradients' sums of squares summed
   * over the group (one tp_reduce), the replicated ones (the same on every
   * tp rank) counted once, through global_norm_scale. NULL: no tensor
   * parallel. Not with fused_optimizer. */
  const bool *tp_split;
  /* Optimizer step graphs of a pipeline stage (issue 17): clipping's global
   * norm comes from outside the graph, whose other stages hold the rest of
   * the model: input "grad_norm_sq" (f32 []), the squared norm over every
   * stage and tp rank (ty_graph_build_grad_reduce gives each rank's
   * share). The gradients are scaled by min(1, max_norm / (norm + 1e-6)) as
   * clip_by_global_norm does; "grad_norm" is its square root. */
  bool norm_sq_input;
  /* ZeRO-2 (docs/design-notes.md "Many devices"). ACCUMULATE mode: with
   * grad_group, each gradient is summed over that process group by an
   * all_reduce op (in f32) as soon as backward completes it, and only the
   * parameters with accumulate[i] (NULL: all) get a "<param>.grad_accum"
   * state and add the sum into it: every rank of the group takes part in
   * every sum, the owner alone keeps it. Optimizer step graphs: with
   * norm_group, the parameters given are this rank's share and clipping's
   * global norm is the group's: the share's sum of squares (split
   * parameters summed over "tp" first, with tp_split) all_reduced over
   * norm_group. */
  const bool *accumulate;
  const char *grad_group;
  const char *norm_group;
} ty_train_step_params_t;

/* FUSED: appends backward, clipping and optimizer to `graph` and declares:
 *  inputs  lr, weight_decay, max_norm (f32 []), and for AdamW beta1, beta2,
 *          eps (f32 []) and step (i64 [], 1-based); for SGD momentum (f32 []);
 *          for Adafactor step, and beta1 with its momentum;
 *  states  "<param>.exp_avg" and "<param>.exp_avg_sq" (AdamW) or
 *          "<param>.momentum_buffer" (SGD), f32 like the param; Adafactor:
 *          "<param>.exp_avg_sq_row" and "<param>.exp_avg_sq_col" for
 *          matrices, "<param>.exp_avg_sq" for vectors, "<param>.exp_avg"
 *          with momentum (transformers' state names);
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
/* The same with Adafactor's configuration, optimizer offload and the
 * ZeRO-1 update mask (the other fields of `step` are not read). */
ty_status_t ty_graph_build_optimizer_step_ex(ty_graph_t *graph, const ty_tensor_desc_t *params,
                                             const bool *decay, uint32_t param_count,
                                             const ty_train_step_params_t *step);

/* What a pipeline stage's gradient accumulators need before the optimizer
 * (issue 17, docs/design-notes.md "Pipeline parallel"), per parameter i:
 * its accumulator summed over `sum_group` (the data-parallel replicas;
 * NULL: none) and, where tied[i], over `tied_group` too (the two stages
 * that hold a tied embedding); counted[i]: its sum of squares is part of
 * this rank's share of the global norm (a tensor replicated over tp counts
 * on one tp rank, a tied copy on one stage). */
typedef struct ty_grad_reduce_params_t {
  const char *sum_group;
  const char *tied_group;
  const bool *tied;    /* NULL: none */
  const bool *counted; /* NULL: none */
} ty_grad_reduce_params_t;

/* The gradient sums of a pipeline stage in their own graph, run between
 * the last backward and the optimizer step: declares each parameter's
 * "<param>.grad_accum" state (f32, shaped as params[i]), replaces it by its
 * sums (all_reduce ops over the groups named above) and outputs
 * "grad_norm_sq_share" (f32 []), the sum of the counted accumulators'
 * squares after the sums, when any is counted (*out_share true).
 * *out_empty: nothing to do (no sum, nothing counted), and the graph is
 * left empty. */
ty_status_t ty_graph_build_grad_reduce(ty_graph_t *graph, const ty_tensor_desc_t *params,
                                       uint32_t param_count,
                                       const ty_grad_reduce_params_t *reduce, bool *out_empty,
                                       bool *out_share);

/* The names of the optimizer's per-parameter states ("exp_avg", ...), NULL
 * terminated; a parameter has those of them its shape gives it (Adafactor:
 * row/col for matrices, exp_avg_sq for vectors). */
const char *const *ty_optimizer_state_kinds(ty_optimizer_t optimizer);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_TRAIN_STEP_H_ */
