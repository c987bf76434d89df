/* The command-line options that say which model graph a command builds,
 * shared by `trainyard compile` and `trainyard check`: the model (--model
 * or --preset with --vocab-size/--data), the shapes (--batch-size,
 * --seq-len), and the options of `trainyard train` that change the graph
 * (--optimizer, --dtype, --dropout, --decay-all, --grad-accum, and the
 * compile cache's --cache-dir, --retry-failed, --dump-graph). Options that
 * are per-step inputs (--lr, ...) are refused: they never change a graph. */
#ifndef TY_APPS_TRAINYARD_GRAPH_ARGS_H_
#define TY_APPS_TRAINYARD_GRAPH_ARGS_H_

#include <stdbool.h>
#include <stdint.h>

#include "files/out_paths.h"
#include "models/config.h"
#include "train/train_config.h"

typedef struct ty_graph_args_t {
  const char *backend, *model, *preset, *data;
  const char *fallback; /* --fallback URI2, or NULL */
  int64_t vocab, B, T;
  int64_t eos; /* the data's end-of-text id, -1 without --data */
  ty_train_config_t cfg; /* optimizer, dtype, dropout, decay_all, grad_accum, cache */
  bool compiles; /* the command compiles: --cache-dir and --retry-failed apply */
} ty_graph_args_t;

/* Defaults: batch 8, the train defaults, compiles, no end-of-text id. */
void ty_graph_args_init(ty_graph_args_t *args);

/* Parses argv[1..] as --key value / --key=value. Keys in `flags` (a
 * NULL-terminated list) take no value and, like keys in `own` (taking a
 * value), are handed to `own_fn(user, key, value)` (value NULL for a flag),
 * which returns TY_EXIT_OK or a usage error it has printed. Returns
 * TY_EXIT_OK, TY_EXIT_USAGE (having printed why), or -1 for --help (the
 * caller prints its usage). */
typedef int (*ty_graph_args_own_fn)(void *user, const char *key, const char *value);
int ty_graph_args_parse(const char *command, int argc, char **argv, ty_graph_args_t *args,
                        const char *const *flags, const char *const *own,
                        ty_graph_args_own_fn own_fn, void *user);

/* The usage error for --`key`, a per-step input that no graph holds;
 * returns TY_EXIT_USAGE having printed it. */
int ty_graph_args_refuse_runtime(const char *command, const char *key);

/* The checks every such command shares (exactly one of --model/--preset, a
 * vocabulary for a preset and none for a model, dropout, --retry-failed
 * only with a cache, and ty_train_config_validate's checks of the train
 * options: optimizer, memory levers); TY_EXIT_USAGE having printed
 * why. When the command builds no train graph this time, `untrained` says
 * why ("with --inference (...)") and the train-only options (--optimizer,
 * --dropout, --decay-all, --grad-accum) are refused as having no effect;
 * NULL otherwise. */
int ty_graph_args_validate(const char *command, const ty_graph_args_t *args,
                           const char *untrained);

/* The model configuration, and vocabulary/EOS/sequence length from --data
 * when not given. INVALID_ARGUMENT when --seq-len or --vocab-size differs
 * from the data's, or the data's vocabulary is larger than --model's; when
 * the --model folder holds weights, ty_llm_check_weights' errors for weights
 * that do not match its config.json (a config alone is enough). */
ty_status_t ty_graph_args_model(ty_graph_args_t *args, ty_model_config_t *out_config);

/* An output of the command against its inputs --model and --data
 * (files/out_paths.h). */
ty_status_t ty_graph_args_check_out(const ty_graph_args_t *args, const ty_out_path_t *out);

/* The two files of --dump-graph `prefix` (prefix.txt, prefix.dot) against
 * the inputs; OK for an empty prefix. */
ty_status_t ty_graph_args_check_dump(const ty_graph_args_t *args, const char *prefix);

#endif /* TY_APPS_TRAINYARD_GRAPH_ARGS_H_ */
