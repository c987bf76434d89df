/* Pipeline parallel training (`trainyard train --pp N`, docs/design-notes.md
 * "Pipeline parallel"): the rank layout world = dp x pp x tp (with --tp each
 * stage is split over its tp ranks, trainer_pp.c), the model split
 * into pp x v chunks by a balanced partition, per-chunk forward and
 * backward graphs, the 1F1B or interleaved schedule with activations and
 * their gradients sent between ranks over MPI (the host path), the
 * optimizer step per stage with a global gradient norm, and the full model
 * mirrored on rank 0 for evaluation and checkpoints. Every function here is
 * collective over the world unless it says otherwise. */
#ifndef TY_APPS_TRAINYARD_PIPELINE_TRAINER_PP_H_
#define TY_APPS_TRAINYARD_PIPELINE_TRAINER_PP_H_

#include <stdbool.h>
#include <stdint.h>

#include "pp_runner.h"

/* After the world is open: the layout of --tp x --pp and its groups
 * (ty_dist_set_layout), par->pp, tp, dp, pp_rank, dp_rank and cfg.tp_rank
 * (pp 1: nothing; ty_trainer_tp_open made the layout). INVALID_ARGUMENT for
 * a world not divisible by --pp x --tp and --pp on one process. Collective
 * over the world. */
ty_status_t ty_trainer_pp_layout(ty_pp_runner_t *t);
/* After the device is open (pp > 1): the partition (checked against the
 * model: --pp and the chunks against its layers), the stage graphs and
 * sessions, the schedule; rank 0 also builds the full model's sessions
 * (build_mirror, the trainer's own build) for evaluation and checkpoints.
 * Local: the caller agrees on the outcome. */
ty_status_t ty_trainer_pp_build(ty_pp_runner_t *t);
/* Rank 0 prints the partition and the rank layout (every rank's device
 * name travels to it). */
ty_status_t ty_trainer_pp_describe(ty_pp_runner_t *t);
/* Rank 0's weights and with `optimizer` their optimizer state (the mirror,
 * loaded or initialized) to every stage of every replica: how a checkpoint
 * of any layout is split again on load. A fresh run's optimizer state is
 * zeros on every rank already (states start as zeros): no need to move it. */
ty_status_t ty_trainer_pp_scatter(ty_pp_runner_t *t, bool optimizer);
/* A model trained from scratch: each stage initializes its own chunks'
 * parameters from the seed (each tensor's values come from the seed and
 * its name, models/presets.c, so they equal the mirror's), and nothing
 * travels. */
ty_status_t ty_trainer_pp_init(ty_pp_runner_t *t);
/* One optimizer step: the micro-batches of rows from `base` through the
 * schedule, gradients summed over the data-parallel replicas and the tied
 * embedding's two stages, clipped by the global norm, every stage's
 * optimizer. *out_loss is this rank's share of the step's loss (the last
 * stage's; 0 elsewhere), *out_norm the global gradient norm. */
ty_status_t ty_trainer_pp_step(ty_pp_runner_t *t, int64_t base, double *out_loss, double *out_norm);
/* Every stage's parameters (and with `optimizer` their optimizer state)
 * of replica 0 into rank 0's mirror, before an evaluation or a save. */
ty_status_t ty_trainer_pp_gather(ty_pp_runner_t *t, bool optimizer);
/* The schedule's ideal bubble and each stage's measured idle fraction over
 * the run, printed by rank 0. */
ty_status_t ty_trainer_pp_report(ty_pp_runner_t *t);
/* Local; safe on a partly built or absent pipeline. */
void ty_trainer_pp_destroy(ty_pp_runner_t *t);

#endif /* TY_APPS_TRAINYARD_PIPELINE_TRAINER_PP_H_ */
