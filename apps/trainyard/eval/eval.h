/* Task evaluation of a language model, shared by `trainyard eval` and
 * `trainyard train --eval-data` (so that a run's logged accuracy and a later
 * `eval` of its checkpoint are the same computation).
 *
 * An evaluation set is a JSONL file of prompts with their expected
 * continuations (docs/formats.md, "Evaluation sets"). Each line is scored:
 *   - teacher-forced log-likelihood of the expected continuation, from the
 *     logits of the very graph `trainyard forward` runs (batched rows of
 *     prompt + continuation, padded after the real tokens: causal, so the
 *     padding changes nothing before it), log-softmax on the host in f64;
 *   - first-token match: the most likely token after the prompt is the
 *     continuation's first token (classification-style labels);
 *   - exact match: greedy generation with the generation engine
 *     (models/engine.h, the one `generate` and `serve` run) of as many
 *     tokens as the expectation has, both texts trimmed of white space;
 *   - with choices: every choice is scored and the most likely one picked
 *     (accuracy against the line's answer).
 * The engine and the forward graph share the parameters of one session (the
 * loaded model, or the training step's), so nothing is copied.
 *
 * Ownership: a set owns its items; a scorer owns its graphs and sessions and
 * must be destroyed before the device and the weights' session. Threads: one
 * thread at a time. Errors: INVALID_ARGUMENT naming "FILE:LINE" and the
 * cause for every bad line; the device's errors while scoring. */
#ifndef TY_APPS_TRAINYARD_EVAL_EVAL_H_
#define TY_APPS_TRAINYARD_EVAL_EVAL_H_

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "graph/runtime/session.h"
#include "hal/device.h"
#include "models/config.h"
#include "models/tokenizer.h"

struct ty_chat_template_t;

typedef struct ty_eval_item_t {
  size_t line;      /* 1-based line of the file */
  json_t *id;       /* the line's "id", echoed in the report (or NULL) */
  int64_t *prompt, prompt_len;
  /* The continuations scored: the expected completion alone, or every
   * choice; `answer` is the index of the expected one. */
  size_t cont_count;
  int64_t **cont, *cont_len;
  char **cont_text; /* the texts (NULL entries for id lines) */
  size_t answer;
  /* results */
  double *logprob;        /* per continuation: sum of token log-probabilities */
  int64_t first_token;    /* the most likely token after the prompt */
  bool first_token_match;
  size_t chosen;          /* the most likely continuation */
  int64_t *generated, generated_len; /* greedy tokens (exact match only) */
  char *generated_text;
  bool exact_match;
} ty_eval_item_t;

typedef struct ty_eval_set_t {
  char *path;
  bool choices;     /* lines are scored as multiple choice */
  bool generate;    /* exact match needs generation (not with choices) */
  ty_eval_item_t *items;
  size_t count;
  int64_t max_row;  /* the longest prompt + continuation, in tokens */
} ty_eval_set_t;

typedef struct ty_eval_set_options_t {
  const char *option;    /* "--data", "--eval-data": named in errors */
  bool choices;          /* --choices */
  const ty_tokenizer_t *tokenizer;               /* for text lines, or NULL */
  const struct ty_chat_template_t *chat_template; /* for "messages" lines, or NULL */
  const char *model_dir; /* named when a tokenizer or template is missing */
} ty_eval_set_options_t;

/* Reads and checks every line of `path` (size-capped, see eval_set.c)
 * against the model's vocabulary and positions. With options->choices a
 * line without "choices" takes the file's distinct completions as its
 * choices (a classification set: at least two labels). */
ty_status_t ty_eval_set_load(const char *path, const ty_model_config_t *config,
                             const ty_eval_set_options_t *options, ty_eval_set_t **out_set);
void ty_eval_set_destroy(ty_eval_set_t *set);

/* Two token sequences are equal. */
bool ty_eval_same_ids(const int64_t *a, int64_t na, const int64_t *b, int64_t nb);

/* The set's aggregate numbers. */
typedef struct ty_eval_summary_t {
  size_t lines;
  int64_t tokens;          /* expected-continuation tokens scored */
  double mean_logprob;     /* per token, over the expected continuations */
  double perplexity;       /* exp(-mean_logprob) */
  double first_token_match;
  double exact_match;      /* NAN with choices */
  double choice_accuracy;  /* NAN without choices */
  double accuracy;         /* choice_accuracy with choices, else exact_match */
  double majority_baseline; /* share of the most common expected answer */
} ty_eval_summary_t;

ty_eval_summary_t ty_eval_summarize(const ty_eval_set_t *set);

typedef struct ty_eval_scorer_options_t {
  ty_dtype_t dtype, compute_dtype;
  int64_t batch;            /* rows per forward run and engine slots */
  /* The session whose STATE values hold the parameters (HF names); NULL:
   * the scorer loads model_dir itself. */
  const ty_session_t *weights_from;
  const char *model_dir;
  bool allow_nonfinite;
  const char *cache_dir;    /* compile cache, or NULL */
  bool retry_failed;        /* compile again over a cached failure */
  ty_device_t *fallback_device;
  int64_t eos_id;           /* generation stops there; < 0: none */
  /* `--deterministic`: every session (forward graph, engine, dataset) asks
   * for batch-invariant kernels (ty_session_options_t.deterministic). */
  bool deterministic;
} ty_eval_scorer_options_t;

typedef struct ty_eval_scorer_t ty_eval_scorer_t;

/* Builds the forward graph for rows of up to `set->max_row` tokens (and the
 * engine when the set needs generation) on `device`. */
ty_status_t ty_eval_scorer_create(ty_device_t *device, const ty_model_config_t *config,
                                  const ty_eval_set_t *set, const ty_eval_scorer_options_t *options,
                                  ty_eval_scorer_t **out_scorer);
void ty_eval_scorer_destroy(ty_eval_scorer_t *scorer);

/* The parameters' session (options->weights_from or the scorer's own). */
const ty_session_t *ty_eval_scorer_weights(const ty_eval_scorer_t *scorer);

/* Scores every line of `set` into its items' results. `tokenizer` (may be
 * NULL) decodes generated text. */
ty_status_t ty_eval_score(ty_eval_scorer_t *scorer, ty_eval_set_t *set,
                          const ty_tokenizer_t *tokenizer);

/* Perplexity over a token dataset (`trainyard data prepare`): its val split
 * when it declares one, else its train split; every counted target. */
typedef struct ty_eval_dataset_result_t {
  char split[8];
  uint64_t rows;
  double tokens;      /* counted targets */
  double mean_nll;
  double perplexity;
} ty_eval_dataset_result_t;

ty_status_t ty_eval_dataset(ty_device_t *device, const ty_model_config_t *config,
                            const ty_session_t *weights, const ty_eval_scorer_options_t *options,
                            const char *dir, ty_eval_dataset_result_t *out);

#endif /* TY_APPS_TRAINYARD_EVAL_EVAL_H_ */
