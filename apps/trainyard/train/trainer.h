/* The training loop behind `trainyard train`: data order, schedule, the
 * train-step graph(s) on one device, evaluation, checkpoints with exact
 * resume, metrics, and graceful stops. */
#ifndef TY_APPS_TRAINYARD_TRAINER_H_
#define TY_APPS_TRAINYARD_TRAINER_H_

#include <stdio.h>

#include "app.h"
#include "files/ckpt_identity.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "models/config.h"
#include "models/dataset.h"
#include "models/llm.h"
#include "train_config.h"
#include "trainer_parts.h"
#include "pipeline/pp_runner.h"

typedef struct ty_trainer_t {
  /* the run: its options, model and device (trainer.c) */
  ty_train_config_t cfg;
  ty_app_t *app;
  ty_model_config_t model_config;
  char model_source[TY_CFG_PATH_MAX]; /* folder the weights came from, or "" */
  ty_registry_t *registry;
  ty_device_t *device;
  ty_device_t *fallback; /* `--backend URI?fallback=URI2`: a mixed run, or NULL */
  ty_trainer_shape_t shape;
  ty_trainer_graphs_t graphs;
  ty_trainer_progress_t progress;
  ty_trainer_feed_t feed;
  ty_trainer_tok_t tok;
  ty_trainer_report_t report;
  ty_trainer_par_t par;
  ty_trainer_checks_t checks;
  ty_trainer_folder_t folder;
  /* what the pipeline's stages see of the run (pipeline/pp_runner.h):
   * pointers to the parts above and the trainer's calls */
  ty_pp_runner_t pp_runner;
} ty_trainer_t;

/* Runs `trainyard train` with a validated configuration. */
ty_status_t ty_trainer_run(ty_app_t *app, const ty_train_config_t *config);
/* The graphs first (host memory only), then the memory plan, then the
 * sessions: the whole model on one rank (the pipeline's mirror on rank 0). */
ty_status_t ty_trainer_build(ty_trainer_t *t);
/* Fills t->pp_runner (trainer_runner.c): pointers into t, so t must not
 * move afterwards. */
void ty_trainer_runner_init(ty_trainer_t *t);

/* Stages micro-batch m of the step whose rows start at `base` in the
 * epoch's order into tokens/targets/weights (raw 0/1 weights; rows past the
 * epoch's end are padding) and counts its targets. */
ty_status_t ty_trainer_stage_micro(ty_trainer_t *t, int64_t base, int64_t m,
                                   double *out_counted);
/* Multiplies the staged loss weights by `factor` (1 / the step's counted
 * targets). */
void ty_trainer_scale_weights(ty_trainer_t *t, double factor);
/* The batch of the train step's graph: --batch-size, or 1 under
 * --deterministic (one row at a time, trainer_det.c). */
static inline int64_t ty_trainer_graph_batch(const ty_trainer_t *t) {
  return t->cfg.deterministic ? 1 : t->shape.B;
}
/* The hyperparameters of update `step` into the session that runs it. */
ty_status_t ty_trainer_bind_hparams(ty_trainer_t *t, ty_session_t *s, int64_t step);

/* ---- trainer_ckpt.c ---- */

/* Writes checkpoint-<step> atomically into cfg.out and prunes old ones. */
ty_status_t ty_trainer_save(ty_trainer_t *t);
/* The checkpoint of this step by every rank that writes a part of it (rank
 * 0; under ZeRO-1 every replica its optimizer share), then, with several ranks,
 * their agreement that it is whole (`what` names it in errors). Call on
 * every rank. */
ty_status_t ty_trainer_save_all(ty_trainer_t *t, const char *what);
/* Opens and locks the run folder cfg.out for the run's life (t->folder.run),
 * removes what interrupted saves left, and finds the checkpoint to resume
 * (into out_dir; "" for a fresh start): --resume latest needs one, auto
 * takes one if there is one. A fresh run (or one resumed from another
 * folder) refuses a folder that holds a run unless --overwrite; a run
 * continued in its own folder refuses later checkpoints there. */
ty_status_t ty_trainer_open_run(ty_trainer_t *t, char *out_dir, size_t capacity);
/* --overwrite: deletes the run ty_trainer_open_run found in cfg.out (only
 * the files a run writes), after every check that can refuse the run. */
ty_status_t ty_trainer_clear_pending(ty_trainer_t *t, const char *resume_dir);
/* A run refused at start-up: removes the lock file and the folder cfg.out
 * when this run created them (the folder only when empty), so that --out
 * is as it was. Call while t->folder.run is still open. */
void ty_trainer_discard_fresh(ty_trainer_t *t);
/* ---- trainer_dist.c ---- */

/* Opens the world (--distributed, the launcher's environment): sets dist,
 * rank, world and cfg.world. INVALID_ARGUMENT for options data parallel
 * cannot honour; UNAVAILABLE saying why MPI cannot start. */
ty_status_t ty_trainer_dist_open(ty_trainer_t *t);
/* ---- trainer_agree.c ---- */
/* Collective, before any other: every rank of the world holds the same
 * build, plugin, model, data and options (dist.h ty_dist_agree_fields),
 * or every rank gets the same FAILED_PRECONDITION naming the field and the
 * rank that differs. Makes t->registry (the plugin's identity is a field).
 * One process: OK. */
ty_status_t ty_trainer_agree(ty_trainer_t *t);
/* Opens this rank's device: --backend, with the rank's index on a backend
 * of several devices (ty_device_uri_for_rank). */
ty_status_t ty_trainer_dist_device_open(ty_trainer_t *t);
void ty_trainer_dist_close(ty_trainer_t *t);
/* After every rank's sessions exist: the device communicator when the
 * backend has collectives of its own (rank 0's unique id broadcast over
 * the host world: MPI or the TCP transport),
 * and a line on rank 0 saying which path the gradients take. */
ty_status_t ty_trainer_dist_comm_open(ty_trainer_t *t);
/* The host path of the gradient all-reduce: sums the "<param>.grad_accum"
 * states of s_train over the ranks in place. A no-op for one process. */
ty_status_t ty_trainer_dist_reduce_grads(ty_trainer_t *t);
/* Parameter i's gradient accumulator ("<param>.grad_accum" of the train
 * session): its name (into name[capacity]) and descriptor. */
ty_status_t ty_trainer_grad_accum(const ty_trainer_t *t, uint32_t i, char *name,
                                  size_t capacity, ty_tensor_desc_t *out_desc);
/* The accumulators' total element count and (out_largest, may be NULL) the
 * largest one's; INTERNAL, naming `user` (what sums them), for one that is
 * not f32. */
ty_status_t ty_trainer_grad_sizes(const ty_trainer_t *t, const char *user, size_t *out_total,
                                  size_t *out_largest);
/* Every accumulator, in parameter order, packed: read into dst (grad_sizes'
 * total floats), bound from src, or bound to zeros (at least the largest
 * accumulator's floats). The session's errors. */
ty_status_t ty_trainer_read_grads(ty_trainer_t *t, float *dst);
ty_status_t ty_trainer_write_grads(ty_trainer_t *t, const float *src);
ty_status_t ty_trainer_zero_grads(ty_trainer_t *t, const float *zeros);
/* Sums `count` doubles over the ranks in place ("the loss of step N"). */
ty_status_t ty_trainer_dist_sum(ty_trainer_t *t, double *values, size_t count,
                                const char *what);
/* ZeRO's shares (trainer_parts.h ty_par_zero_shares), this rank's, and
 * the group they are over, named as the run's device communicators are:
 * "dp_cp" under --cp, "dp" under --tp or --pp, else "world" (plain data
 * parallel: its one communicator; the host's "dp" is the same ranks). */
int ty_trainer_zero_shares(const ty_trainer_t *t);
int ty_trainer_zero_index(const ty_trainer_t *t);
const char *ty_trainer_zero_group(const ty_trainer_t *t);
/* ZeRO-1: shares the parameters among the zero group's ranks (owner,
 * updates: owner[i] is a share index), by size; the same table on every
 * tp rank of a replica. */
ty_status_t ty_trainer_dist_owners(ty_trainer_t *t);
/* Whether the run's gradients are sharded (--zero 2 in the split step; the
 * fused step of a device that sums in the graph keeps no gradients). */
bool ty_trainer_zero2(const ty_trainer_t *t);
/* ZeRO-2: this rank's share of the optimizer graph's parameters: descs
 * and decay (the whole model's, in parameter order) packed in place to the
 * owned ones, *n their count, *out_split their tp_split (NULL without
 * --tp; the caller frees it). */
ty_status_t ty_trainer_zero2_share(const ty_trainer_t *t, ty_tensor_desc_t *descs, bool *decay,
                                   uint32_t *n, bool **out_split);
/* ZeRO-1, after the optimizer step: every replica's updated parameters
 * (under --tp each tp rank's parts) to the other replicas, broadcast over
 * the dp group. A no-op without ZeRO. */
ty_status_t ty_trainer_dist_gather_params(ty_trainer_t *t);
/* The same for any model's parameters living in `session` (`graph` gives
 * their descriptors), owner[i] the share that updated parameter i: the
 * host path broadcasts each share's packed parameters over the zero group,
 * the device path (that group's communicator: t->par.comm, or
 * t->par.grad_comm under --cp) each tensor in place. Collective over the
 * zero group. */
ty_status_t ty_trainer_zero_broadcast(ty_trainer_t *t, ty_session_t *session,
                                      const ty_graph_t *graph, const ty_llm_t *model,
                                      const int *owner);
/* TRAINYARD_DEBUG_DIST_FAULT (a test hook): may end or hang this rank. */
void ty_trainer_dist_fault(const ty_trainer_t *t);
/* The per-rank memory line of the pre-flight plan (nothing for one rank). */
void ty_trainer_dist_plan(const ty_trainer_t *t, FILE *out);

/* ---- trainer_det.c (--deterministic) ---- */

/* Before anything is built or written: INVALID_ARGUMENT, naming both
 * numbers, when several replicas' rows per rank (B x accumulation) are not
 * a power of two. OK without --deterministic. */
ty_status_t ty_trainer_det_check(const ty_trainer_t *t);
/* Rank 0's start-up line: the rows per step, the tree, the host path. */
ty_status_t ty_trainer_det_banner(ty_trainer_t *t);
/* One optimizer step under --deterministic from row `base` of the epoch's
 * order: every row alone, the fixed tree over rows then ranks, the
 * optimizer graph. *out_loss is the global batch's loss (every rank holds
 * it), *out_norm the gradient norm. Collective over the dp group. */
ty_status_t ty_trainer_det_step(ty_trainer_t *t, int64_t base, double *out_loss,
                                double *out_norm);
void ty_trainer_det_close(ty_trainer_t *t);

/* ---- trainer_tp.c (tensor parallel, --tp) ---- */

/* After the world opens: the layout (world = dp x tp, tp fastest) and its
 * groups, tp, dp, dp_rank and cfg.tp_rank; with --pp it checks --tp only
 * and leaves the composed layout to ty_trainer_pp_layout. INVALID_ARGUMENT
 * for a --tp that does not divide the world, or one process. */
ty_status_t ty_trainer_tp_open(ty_trainer_t *t);
void ty_trainer_tp_close(ty_trainer_t *t);
/* Whether this rank takes part in writing checkpoints: rank 0, every
 * ZeRO-1 rank, and with tp (without --pp) the tp ranks of dp index 0 (rank
 * 0 gathers their parts). */
bool ty_trainer_saves(const ty_trainer_t *t);
/* Whether this rank runs the validation: rank 0, and with tp (without
 * --pp) its group. */
bool ty_trainer_evaluates(const ty_trainer_t *t);
/* After the train graph is built: tp_split from the model's split. */
ty_status_t ty_trainer_tp_sessions(ty_trainer_t *t);
/* After the sessions exist: the host communicator on each (tp only). */
ty_status_t ty_trainer_tp_comm(ty_trainer_t *t);

/* ---- Context parallel (--cp, trainer_cp.c) ----
 * After the data is open: shape.Tl, this rank's tokens per row (T / cp),
 * or INVALID_ARGUMENT naming T and 2 x cp when T does not cut into 2 cp
 * equal chunks. */
ty_status_t ty_trainer_cp_shape(ty_trainer_t *t);
/* The index in the row of this rank's token i (0 <= i < shape.Tl). */
int64_t ty_trainer_cp_position(const ty_trainer_t *t, int64_t i);
/* Rank 0 prints the layout, one line per rank with its device (tp only);
 * collective over the world. */
ty_status_t ty_trainer_tp_print_layout(ty_trainer_t *t);
/* The whole tensor of `name` in `session` (parameter `p`, or one of its
 * states of p's shape, `elem` bytes an element) from every tp rank's part:
 * into *out_full on tp rank 0 (the caller frees it), NULL on the others.
 * Collective over the tp group. */
ty_status_t ty_trainer_tp_gather(ty_trainer_t *t, ty_session_t *session,
                                 const ty_llm_param_t *p, const char *name, size_t elem,
                                 void **out_full);

/* ---- trainer_state.c ---- */

/* What a checkpoint's trainer_state.json says about the run that saved it. */
typedef struct ty_trainer_saved_t {
  ty_train_config_t config;
  int64_t seq_len;    /* tokens per row; 0 when not recorded (older states) */
  int64_t train_rows; /* rows of the train split; 0 when not recorded */
  int64_t world_size; /* ranks of the run; 1 when not recorded */
  char run_id[TY_CKPT_RUN_ID_CAP]; /* "" when not recorded (before run ids) */
} ty_trainer_saved_t;

/* Reads trainer_state.json of `dir` into t's progress and *saved. DATA_LOSS
 * naming the file and the field for a field missing, of the wrong type or
 * out of range. */
ty_status_t ty_trainer_read_state(const char *dir, ty_trainer_t *t, ty_trainer_saved_t *saved);
/* After the data is open: FAILED_PRECONDITION when the run changes what
 * decides its updates (preset, dtype, optimizer, batch, accumulation,
 * seed); DATA_LOSS naming the file when the progress cannot follow from
 * its step; a note on stderr for each changed hyperparameter. */
ty_status_t ty_trainer_check_resume(const ty_trainer_t *t, const ty_trainer_saved_t *saved,
                                    const char *resume_dir);
/* Loads the optimizer states of `dir` into the sessions. */
ty_status_t ty_trainer_load_optimizer(ty_trainer_t *t, const char *dir);

#endif /* TY_APPS_TRAINYARD_TRAINER_H_ */
