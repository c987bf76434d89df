/* The configuration of `trainyard train`: one table of options that serves
 * the command line (--flag value, --flag=value), config files (key=value
 * lines) and key=value overrides, the printed resolved configuration, and
 * its JSON copy saved beside every checkpoint. */
#ifndef TY_APPS_TRAINYARD_TRAIN_CONFIG_H_
#define TY_APPS_TRAINYARD_TRAIN_CONFIG_H_

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "hal/status.h"

#define TY_CFG_PATH_MAX 1024
#define TY_CFG_WORD_MAX 256

typedef struct ty_train_config_t {
  /* what to train */
  char model[TY_CFG_PATH_MAX];  /* Hugging Face folder to fine-tune, or "" */
  char preset[64];              /* preset to train from scratch, or "" */
  char data[TY_CFG_PATH_MAX];   /* dataset folder (trainyard data prepare) */
  char tokenizer[TY_CFG_PATH_MAX]; /* tokenizer.json copied into checkpoints */
  char out[TY_CFG_PATH_MAX];    /* output folder */
  char backend[TY_CFG_WORD_MAX];
  char dtype[8];
  /* batches */
  int64_t batch_size, seq_len, grad_accum, epochs, max_steps;
  /* optimizer and schedule */
  char optimizer[16];
  double lr, min_lr;
  int64_t warmup_steps;
  char schedule[16];
  double weight_decay, beta1, beta2, eps, momentum, clip, dropout;
  bool decay_all;
  uint64_t seed;
  /* evaluation, checkpoints, logging */
  int64_t eval_every, eval_batches, save_every, keep, log_every;
  char resume[TY_CFG_PATH_MAX]; /* "" none, "latest", or a checkpoint folder */
  int64_t sample_tokens;        /* generate this many tokens at the end */
  char sample_prompt[TY_CFG_WORD_MAX];
  /* compiling */
  char artifact[TY_CFG_PATH_MAX];  /* load the train step from this artifact, or "" */
  char cache_dir[TY_CFG_PATH_MAX]; /* on-disk compile cache; "" for none */
  bool retry_failed;               /* compile again over a cached failure */
  char dump_graph[TY_CFG_PATH_MAX]; /* write the step's graph to P.txt and P.dot, or "" */
} ty_train_config_t;

/* The defaults. */
void ty_train_config_defaults(ty_train_config_t *config);

/* Sets option `key` (its command-line name without dashes, '-' or '_'
 * alike) from text. INVALID_ARGUMENT naming the key for an unknown key or a
 * bad value. */
ty_status_t ty_train_config_set(ty_train_config_t *config, const char *key, const char *value);

/* Reads key=value lines ('#' comments, blank lines) from `path`; errors name
 * the file and line. */
ty_status_t ty_train_config_load_file(ty_train_config_t *config, const char *path);

/* Cross-field checks (exactly one of model/preset, positive sizes, ...). */
ty_status_t ty_train_config_validate(const ty_train_config_t *config);

/* Prints "  key  value" lines of every option. */
void ty_train_config_print(const ty_train_config_t *config, FILE *out);

/* The whole configuration as a JSON object (new reference) and back. */
json_t *ty_train_config_to_json(const ty_train_config_t *config);
ty_status_t ty_train_config_from_json(ty_train_config_t *config, const json_t *object);

/* Writes the --help text for every option. */
void ty_train_config_help(FILE *out);

/* True when `name` (no dashes) is an option that takes no value. */
bool ty_train_config_is_flag(const char *name);

#endif /* TY_APPS_TRAINYARD_TRAIN_CONFIG_H_ */
