/* What a pipeline stage sees of the training run that hosts it: the run's
 * options and model, its device, the parts of its state a stage reads or
 * advances (trainer_parts.h), and the few calls it makes back into the run
 * (stage a micro-batch's rows, bind the step's hyperparameters, sum over
 * the ranks, ZeRO's broadcast, build rank 0's mirror of the whole model).
 * The trainer fills one (trainer.c) and hands it to every ty_trainer_pp_*
 * call; pipeline/ never sees ty_trainer_t. Pointers live as long as the
 * run. */
#ifndef TY_APPS_TRAINYARD_TRAIN_PIPELINE_PP_RUNNER_H_
#define TY_APPS_TRAINYARD_TRAIN_PIPELINE_PP_RUNNER_H_

#include <stddef.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "models/config.h"
#include "models/llm.h"
#include "train/train_config.h"
#include "train/trainer_parts.h"

typedef struct ty_pp_runner_t {
  /* the layout sets cfg->tp_rank; rank 0 builds its mirror of the whole
   * model under tp 1 and no ZeRO, restored after */
  ty_train_config_t *cfg;
  const ty_model_config_t *model_config;
  ty_device_t *const *device; /* the run's, opened after the layout */
  ty_trainer_shape_t *shape;       /* the stages set loss_dtype */
  ty_trainer_graphs_t *graphs;     /* rank 0's mirror of the whole model */
  ty_trainer_progress_t *progress; /* the step reads step, adds tokens_seen */
  ty_trainer_par_t *par;           /* the layout; pipe is the pipeline's own */
  /* The calls back into the run; `run` is their first argument. */
  void *run;
  /* Stages micro-batch m of the step whose rows start at `base` into the
   * run's host staging (tokens, targets, raw weights) and counts them. */
  ty_status_t (*stage_micro)(void *run, int64_t base, int64_t m, double *out_counted);
  /* The hyperparameters of update `step` into `session`. */
  ty_status_t (*bind_hparams)(void *run, ty_session_t *session, int64_t step);
  /* Sums `count` doubles over the ranks in place. */
  ty_status_t (*dist_sum)(void *run, double *values, size_t count, const char *what);
  /* ZeRO-1's broadcast of the parameters in `session` from their owners. */
  ty_status_t (*zero_broadcast)(void *run, ty_session_t *session, const ty_graph_t *graph,
                                const ty_llm_t *model, const int *owner);
  /* Rank 0's mirror of the whole model (the train graph and sessions). */
  ty_status_t (*build_mirror)(void *run);
  /* The run's staging buffers the stages bind (stage_micro fills them). */
  const ty_trainer_feed_t *feed;
} ty_pp_runner_t;

#endif /* TY_APPS_TRAINYARD_TRAIN_PIPELINE_PP_RUNNER_H_ */
