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
/* The most positions --max-positions gives a preset (2^24 tokens). */
#define TY_MAX_POSITIONS (1ll << 24)

typedef struct ty_train_config_t {
  /* what to train */
  char model[TY_CFG_PATH_MAX];  /* Hugging Face folder to fine-tune, or "" */
  char preset[64];              /* preset to train from scratch, or "" */
  int64_t max_positions;        /* the preset's positions instead of its own (0: its own) */
  char data[TY_CFG_PATH_MAX];   /* dataset folder (trainyard data prepare) */
  char tokenizer[TY_CFG_PATH_MAX]; /* tokenizer.json copied into checkpoints */
  char out[TY_CFG_PATH_MAX];    /* output folder */
  char backend[TY_CFG_WORD_MAX];
  char fallback[TY_CFG_WORD_MAX]; /* --fallback: device of the refused nodes, or "" */
  char dtype[16];
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
  char eval_data[TY_CFG_PATH_MAX]; /* task evaluation set (JSONL), or "" */
  bool eval_choices;               /* score it as multiple choice */
  double min_eval_acc;             /* the final accuracy's bar (0: none) */
  char control_registry[TY_CFG_PATH_MAX]; /* `trainyard control`'s registry, "" default */
  char resume[TY_CFG_PATH_MAX]; /* "" none, "latest", "auto", or a checkpoint folder */
  bool overwrite;               /* a fresh run may delete the run that --out holds */
  bool allow_done;              /* --resume of a run already at its last step exits 0 */
  int64_t sample_tokens;        /* a greedy sample of this many tokens at every
                                   evaluation and checkpoint (0: none) */
  char sample_prompt[TY_CFG_WORD_MAX];
  /* compiling */
  char artifact[TY_CFG_PATH_MAX];  /* load the train step from this artifact, or "" */
  char cache_dir[TY_CFG_PATH_MAX]; /* on-disk compile cache; "" for none */
  bool retry_failed;               /* compile again over a cached failure */
  char dump_graph[TY_CFG_PATH_MAX]; /* write the step's graph to P.txt and P.dot, or "" */
  /* loading */
  bool allow_nonfinite;            /* load NaN/Inf weights with a warning */
  /* debugging numerics */
  char check_numerics[32];         /* "" off; "true" every step; "every:N" */
  /* memory levers (README, "Fitting bigger models") */
  char recompute[16];              /* none, attention or layer */
  int64_t loss_chunk;              /* > 0: fused LM head + loss, N tokens at a time */
  int64_t mlp_chunk;               /* > 0: each block's MLP over N tokens at a time */
  bool fused_optimizer;            /* updates in the backward pass */
  char offload[16];                /* none or optimizer */
  char memory_limit[32];           /* "" (the device's memory) or a size: 24GiB */
  bool plan_only;                  /* print every rank's memory plan and exit */
  /* Adafactor (transformers.Adafactor's arguments) */
  bool relative_step, scale_parameter, warmup_init;
  double clip_threshold, decay_rate, adafactor_eps1, adafactor_eps2;
  /* many devices (README, "Many devices") */
  char distributed[16];            /* auto, mpi, env or none */
  double dist_timeout;             /* seconds a collective may wait for a rank */
  int64_t zero;                    /* 1: optimizer state sharded over the ranks (ZeRO-1);
                                      2: the gradient accumulators too (ZeRO-2) */
  int64_t pp;                      /* pipeline stages (world = data parallel x pp) */
  char pp_schedule[16];            /* 1f1b or interleaved */
  int64_t pp_virtual;              /* interleaved: chunks per rank (0: 2) */
  int64_t tp;                      /* tensor parallel: the model split over this many ranks */
  int64_t cp;                      /* context parallel: each sequence split over this many */
  bool deterministic;              /* one gradient per row, one fixed summation tree */
  /* This rank's index in its tp group: set by the trainer with world, not
   * an option (the graph holds this rank's part of the model). */
  int64_t tp_rank;
  int64_t cp_rank; /* this rank's index in its cp group, likewise */
  /* The run's world size: set by the trainer (or by `compile
   * --data-parallel`), not an option; the train step's graph depends on it. */
  int64_t world;
  /* Set by the trainer with world: the gradient all-reduce runs as ops
   * inside the fused step (a device that runs whole steps only, dataflow)
   * instead of between a gradient and an optimizer graph. */
  bool world_in_graph;
  /* Set by the trainer with world: this process's rank (ZeRO-1 in the fused
   * step updates the parameters this rank owns, ty_train_plan_zero_owners). */
  int64_t rank;
  /* Where each option's value came from, by option: TY_TRAIN_LAYER_*. The
   * cross-option checks of ty_train_config_validate refuse an option given
   * on purpose that another option makes ineffective (--momentum with
   * adamw, --epochs under --max-steps, ...): an option must do what it says
   * or be refused. Not part of the JSON form. */
  uint8_t layer[72];
  uint8_t setting_layer; /* what ty_train_config_set records (command line) */
} ty_train_config_t;

enum {
  TY_TRAIN_LAYER_DEFAULT = 0,
  TY_TRAIN_LAYER_FILE = 1,    /* a --config file */
  TY_TRAIN_LAYER_COMMAND = 2, /* the command line */
};

/* The layer option `name` (no dashes, '-' or '_' alike) was last set from. */
int ty_train_config_layer(const ty_train_config_t *config, const char *name);

/* The defaults. */
void ty_train_config_defaults(ty_train_config_t *config);

/* Sets option `key` (its command-line name without dashes, '-' or '_'
 * alike) from text. INVALID_ARGUMENT naming the key for an unknown key or a
 * bad value. */
ty_status_t ty_train_config_set(ty_train_config_t *config, const char *key, const char *value);

/* Reads key=value lines ('#' comments, blank lines) from `path` (a file or
 * pipe of at most 1 MiB of text); errors name the file and line. */
ty_status_t ty_train_config_load_file(ty_train_config_t *config, const char *path);

/* The same from `size` bytes held in memory; `origin` names them in
 * messages. A NUL byte is an error, not the end of a line. */
ty_status_t ty_train_config_load_text(ty_train_config_t *config, const char *text, size_t size,
                                      const char *origin);

/* Cross-field checks (exactly one of model/preset, positive sizes, ...), and
 * options given on purpose that other options make ineffective. */
ty_status_t ty_train_config_validate(const ty_train_config_t *config);
/* What context parallel (--cp N) does not combine with yet, each refused by
 * name (trainer_cp.c); OK for --cp 1. */
ty_status_t ty_train_config_check_cp(const ty_train_config_t *c);

/* Prints "  key  value" lines of every option. */
void ty_train_config_print(const ty_train_config_t *config, FILE *out);

/* The whole configuration as a JSON object (new reference) and back;
 * from_json leaves keys that are absent as they are and refuses
 * (DATA_LOSS naming the key: the object is a saved configuration) a value of
 * the wrong type. */
json_t *ty_train_config_to_json(const ty_train_config_t *config);
ty_status_t ty_train_config_from_json(ty_train_config_t *config, const json_t *object);

/* key = value lines (a --config file) of every option given on purpose
 * (from a file or the command line) and of those named in `force`
 * (NULL-terminated, may be NULL): what reproduces this configuration in
 * another process, e.g. a `compare` run started under mpirun. */
void ty_train_config_write_given(const ty_train_config_t *config, const char *const *force,
                                 FILE *out);

/* Calls fn(user, option, old value, new value) for each option of `names`
 * (NULL-terminated, as in the config table) whose value differs. */
void ty_train_config_diff(const ty_train_config_t *old, const ty_train_config_t *now,
                          const char *const *names,
                          void (*fn)(void *user, const char *name, const char *was,
                                     const char *now),
                          void *user);
/* --memory-limit as bytes (0 when not given). INVALID_ARGUMENT for text that
 * is not a size: digits with an optional K, M, G or T (binary; "iB" or "B"
 * may follow) or a plain byte count. */
ty_status_t ty_train_config_memory_limit(const ty_train_config_t *config, uint64_t *out_bytes);
/* The graph recipe's description of the run (train_recipe.h) from the
 * options, as they stand now (the world and ranks are set as the run opens;
 * fill it after). INVALID_ARGUMENT for a --memory-limit that is not a size.
 * Defined in train_recipe.c. */
struct ty_train_recipe_t;
ty_status_t ty_train_config_recipe(const ty_train_config_t *config,
                                   struct ty_train_recipe_t *out_recipe);

/* Writes the --help text for every option. */
void ty_train_config_help(FILE *out);

/* True when `name` (no dashes) is an option that takes no value. */
bool ty_train_config_is_flag(const char *name);

#endif /* TY_APPS_TRAINYARD_TRAIN_CONFIG_H_ */
