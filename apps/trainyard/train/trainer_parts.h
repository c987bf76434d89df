/* The parts of a training run (ty_trainer_t, trainer.h) by concern, as
 * types of their own so that code running inside the trainer (the
 * pipeline's stages, pipeline/pp_runner.h) sees the parts it needs and not
 * the trainer. */
#ifndef TY_APPS_TRAINYARD_TRAIN_TRAINER_PARTS_H_
#define TY_APPS_TRAINYARD_TRAIN_TRAINER_PARTS_H_

#include <stdbool.h>
#include <stdint.h>

#include "files/ckpt_identity.h"
#include "graph/runtime/session.h"
#include "hal/comm.h"
#include "hal/dtype.h"
#include "models/dataset.h"
#include "models/llm.h"
#include "train_config.h"

/* ty_trainer_t by concern: each part names the file that fills it and
 * keeps it; the others read it. */

/* What a step is (trainer.c, from the options and the model). */
typedef struct ty_trainer_shape_t {
  ty_dtype_t dtype, loss_dtype;
  ty_dtype_t compute_dtype; /* matmuls and attention (bf16 in bf16-mixed) */
  int64_t B, T, accum;
  /* Tokens per row in this rank's graphs: T, or T / cp under context
   * parallel (this rank's two chunks; trainer_cp.c) */
  int64_t Tl;
  int64_t rows_per_step, steps_per_epoch, total_steps;
} ty_trainer_shape_t;

/* The graphs and their sessions (trainer.c); the optimizer graph only with
 * grad_accum > 1. */
typedef struct ty_trainer_graphs_t {
  ty_graph_t *g_train, *g_opt, *g_eval;
  ty_llm_t m_train, m_eval;
  ty_session_t *s_train, *s_opt, *s_eval;
  /* the pre-flight memory plan of those graphs (graph/runtime/preflight.h), the
   * limit it was checked against, and what the device measured */
  struct ty_preflight_t *plan;
  uint64_t memory_limit;
  char memory_limit_what[96];
  uint64_t step_transfer_bytes; /* a mixed run's host copies in the last step */
} ty_trainer_graphs_t;

/* Progress: the trainer state saved in checkpoints (trainer_ckpt.c writes
 * it, trainer_state.c reads it back). */
typedef struct ty_trainer_progress_t {
  int64_t step;   /* optimizer steps done */
  int64_t epoch;  /* 0-based epoch of the next step */
  int64_t cursor; /* rows of the epoch's order consumed */
  int64_t tokens_seen;
  double last_loss, last_val_loss, last_grad_norm;
  double last_eval_acc; /* --eval-data's last accuracy, NAN before */
  double train_seconds;
} ty_trainer_progress_t;

/* Data feeding (trainer.c): the splits, the epoch's order and the host
 * staging of a micro-batch. */
typedef struct ty_trainer_feed_t {
  ty_dataset_t *train_data, *val_data;
  uint64_t *order; /* the epoch's row permutation */
  int64_t *tokens, *targets;
  void *weights;
  uint32_t *row_tokens;
  uint8_t *row_weights;
} ty_trainer_feed_t;

/* The run's tokenizer (run_tokenizer.c): loaded and checked against the
 * data; its exact bytes go into every checkpoint. NULL when none. */
typedef struct ty_trainer_tok_t {
  struct ty_tokenizer_t *tokenizer;
  void *tokenizer_json;
  size_t tokenizer_json_size;
  char tokenizer_path[TY_CFG_PATH_MAX + 64];
} ty_trainer_tok_t;

/* What the run reports and hears (train_metrics.c, train_sample.c,
 * train_eval.c, train_control.c; the stop signal from trainer.c). */
typedef struct ty_trainer_report_t {
  struct ty_jsonl_writer_t *metrics;           /* metrics.jsonl */
  struct ty_tensorboard_writer_t *tensorboard; /* <out>/tensorboard/events... */
  bool live_line;                              /* stderr is a terminal */
  struct ty_train_sample_t *sample;            /* --sample-tokens */
  struct ty_train_eval_t *task_eval;           /* --eval-data */
  struct ty_control_server_t *control;         /* `trainyard control` */
  bool control_abort;    /* `trainyard control abort` ended the loop on every rank */
  uint32_t control_bits; /* the requests rank 0 took at the end of the step */
  int stop_signal;
} ty_trainer_report_t;

/* Many processes (trainer_dist.c; trainer_tp.c, pipeline/trainer_pp.c for
 * their layouts). The rank layout (docs/design-notes.md "Many devices"):
 * world = dp x pp x tp. Without --tp or --pp: dp = world, dp_rank = rank. */
typedef struct ty_trainer_par_t {
  /* data parallel: the world (NULL for one process), this rank, the world
   * size, the host staging of the gradient all-reduce */
  struct ty_dist_t *dist;
  struct ty_comm_t *comm; /* the device's own collectives (ABI 1.4), or NULL:
                             the host path; under --tp or --pp (ABI 1.7)
                             the "dp" group's, which sums the gradients */
  struct ty_comm_t *tp_comm; /* --tp on a backend with collectives (ABI 1.7):
                                the "tp" group's, which runs the step's tp
                                ops on the device; NULL otherwise */
  struct ty_comm_t *pp_comm; /* --pp on a backend with point to point (ABI
                                1.8): the "pp" group's, on which the stages'
                                activations travel; NULL: the host path */
  struct ty_comm_t *embed_comm; /* --pp of a tied model on such a backend,
                                   on its first and last stage: the "embed"
                                   group's (the tied embedding's sum) */
  struct ty_comm_t *cp_comm;   /* --cp on a backend with collectives: the
                                  "cp" group's (the attention's gathers) */
  struct ty_comm_t *grad_comm; /* --cp on such a backend: the "dp_cp"
                                  group's, which sums the gradients (comm
                                  stays the "dp" group's, ZeRO-1's
                                  broadcasts); NULL otherwise */
  int rank, world;
  /* A whole-step device (cfg.world_in_graph): the world its fused step's
   * all_reduce ops reach through the host (ABI 1.5) */
  ty_host_comm_t host_comm;
  float *grad_host;
  size_t grad_count;
  /* ZeRO-1 (--zero 1): the replica (dp index; the rank without --tp) that
   * updates each parameter, and whether this rank does (the optimizer
   * graph's update mask); NULL otherwise */
  int *owner;
  bool *updates;
  /* Pipeline parallel (pipeline/trainer_pp.h): this rank is stage pp_rank
   * of replica dp_rank, with the stages in `pipe` (NULL without --pp).
   * Tensor parallel (--tp, trainer_tp.c): dp_rank is the replica whose
   * rows this rank reads; tp_split: per parameter, whether this rank holds
   * a part of it (the optimizer graph's global norm). */
  int pp, dp, pp_rank, dp_rank;
  struct ty_trainer_pp_t *pipe;
  int tp;
  bool *tp_split;
  /* Context parallel (--cp, trainer_cp.c): the cp ranks of a replica and
   * this rank's place among them (1 and 0 without) */
  int cp, cp_rank;
} ty_trainer_par_t;

/* ZeRO-1's shares are over the ranks that hold the same weights: the dp
 * replicas, or under --cp every cp rank of each (the dp_cp group, whose
 * rank is dp index x cp + cp index), since a cp rank's weights and summed
 * gradients are its replica's. Their count and this rank's share. */
static inline int ty_par_zero_shares(const ty_trainer_par_t *par) {
  return par->dp * (par->cp > 1 ? par->cp : 1);
}
static inline int ty_par_zero_share(const ty_trainer_par_t *par) {
  return par->cp > 1 ? par->dp_rank * par->cp + par->cp_rank : par->dp_rank;
}

/* The checked and the deterministic step's own state. */
typedef struct ty_trainer_checks_t {
  /* --check-numerics (trainer_numerics.c): its state, and the checked
   * step's session while a checked step runs (NULL otherwise) */
  struct ty_trainer_numerics_t *numerics;
  ty_session_t *check_session;
  struct ty_trainer_det_t *det; /* --deterministic's host tree (trainer_det.c) */
} ty_trainer_checks_t;

/* The run folder (trainer_ckpt.c). */
typedef struct ty_trainer_folder_t {
  struct ty_run_folder_t *run; /* cfg.out, locked for the run's life */
  /* The run's identity (files/ckpt_identity.h): random at a fresh start,
   * kept across resumes, in every part of every checkpoint. */
  char run_id[TY_CKPT_RUN_ID_CAP];
  bool done_already;  /* resumed at or past the last step: nothing to train */
  bool clear_pending; /* --overwrite: the run in cfg.out goes once every check passed */
  bool out_created, lock_created; /* cfg.out / its lock file did not exist before */
} ty_trainer_folder_t;

/* A scalar output of `dtype` (f32 or f64) as a double (trainer.c). */
ty_status_t ty_trainer_read_scalar(ty_session_t *s, const char *name, ty_dtype_t dtype,
                                   double *out);

#endif /* TY_APPS_TRAINYARD_TRAIN_TRAINER_PARTS_H_ */
