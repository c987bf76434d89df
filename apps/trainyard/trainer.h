/* The training loop behind `trainyard train`: data order, schedule, the
 * train-step graph(s) on one device, evaluation, checkpoints with exact
 * resume, metrics, and graceful stops. */
#ifndef TY_APPS_TRAINYARD_TRAINER_H_
#define TY_APPS_TRAINYARD_TRAINER_H_

#include <signal.h>
#include <stdio.h>

#include "app.h"
#include "graph/session.h"
#include "hal/device.h"
#include "models/config.h"
#include "models/dataset.h"
#include "models/llm.h"
#include "train_config.h"

typedef struct ty_trainer_t {
  ty_train_config_t cfg;
  ty_app_t *app;
  ty_model_config_t model_config;
  char model_source[TY_CFG_PATH_MAX]; /* folder the weights came from, or "" */
  ty_registry_t *registry;
  ty_device_t *device;
  ty_dataset_t *train_data, *val_data;
  ty_dtype_t dtype, loss_dtype;
  int64_t B, T, accum;
  int64_t rows_per_step, steps_per_epoch, total_steps;
  /* graphs and sessions; the optimizer graph only with grad_accum > 1 */
  ty_graph_t *g_train, *g_opt, *g_eval;
  ty_llm_t m_train, m_eval;
  ty_session_t *s_train, *s_opt, *s_eval;
  /* the pre-flight memory plan of those graphs (graph/preflight.h), the
   * limit it was checked against, and what the device measured */
  struct ty_preflight_t *plan;
  uint64_t memory_limit;
  char memory_limit_what[96];
  /* progress (the trainer state saved in checkpoints) */
  int64_t step;   /* optimizer steps done */
  int64_t epoch;  /* 0-based epoch of the next step */
  int64_t cursor; /* rows of the epoch's order consumed */
  int64_t tokens_seen;
  uint64_t *order; /* the epoch's row permutation */
  double last_loss, last_val_loss, last_grad_norm;
  double train_seconds;
  /* host staging buffers */
  int64_t *tokens, *targets;
  void *weights;
  uint32_t *row_tokens;
  uint8_t *row_weights;
  /* the run's tokenizer (train_tokenizer.c): loaded and checked against
   * the data; its exact bytes go into every checkpoint. NULL when none. */
  struct ty_tokenizer_t *tokenizer;
  void *tokenizer_json;
  size_t tokenizer_json_size;
  char tokenizer_path[TY_CFG_PATH_MAX + 64];
  struct ty_train_sample_t *sample;             /* --sample-tokens (train_sample.c) */
  struct ty_jsonl_writer_t *metrics;            /* metrics.jsonl */
  struct ty_tensorboard_writer_t *tensorboard;  /* <out>/tensorboard/events... */
  bool live_line;    /* stderr is a terminal */
} ty_trainer_t;

/* Set by SIGINT/SIGTERM; the loop saves and stops after the current step. */
extern volatile sig_atomic_t ty_trainer_stop_signal;

/* Runs `trainyard train` with a validated configuration. */
ty_status_t ty_trainer_run(ty_app_t *app, const ty_train_config_t *config);

/* ---- trainer_ckpt.c ---- */

/* Writes checkpoint-<step> atomically into cfg.out and prunes old ones. */
ty_status_t ty_trainer_save(ty_trainer_t *t);
/* Finds the checkpoint to resume from ("latest" or a folder); "" when none
 * exists with "latest". */
ty_status_t ty_trainer_find_resume(const ty_train_config_t *cfg, char *out_dir, size_t capacity);
/* Reads trainer_state.json of `dir`: progress and the saved configuration. */
ty_status_t ty_trainer_read_state(const char *dir, ty_trainer_t *t, ty_train_config_t *saved);
/* Loads the optimizer states of `dir` into the sessions. */
ty_status_t ty_trainer_load_optimizer(ty_trainer_t *t, const char *dir);
/* Removes leftovers of interrupted saves in cfg.out. */
void ty_trainer_clean_partial(const ty_train_config_t *cfg);

#endif /* TY_APPS_TRAINYARD_TRAINER_H_ */
