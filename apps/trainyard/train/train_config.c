/* `trainyard train` options: one table drives parsing, printing, JSON and
 * help, so the four never disagree. */
#include "train_config.h"

#include "check_numerics.h"
#include "graph/runtime/compile_cache.h"
#include "hal/device_uri.h"
#include "hal/file.h"
#include "models/llm.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TY_OPT_STRING, TY_OPT_INT, TY_OPT_FLOAT, TY_OPT_BOOL, TY_OPT_U64 } ty_opt_kind_t;

typedef struct {
  const char *name;
  ty_opt_kind_t kind;
  size_t offset;
  size_t size; /* strings: capacity */
  const char *help;
} ty_opt_t;

#define TY_S(field, help) {#field, TY_OPT_STRING, offsetof(ty_train_config_t, field), \
                           sizeof(((ty_train_config_t *)0)->field), help}
#define TY_I(field, help) {#field, TY_OPT_INT, offsetof(ty_train_config_t, field), 0, help}
#define TY_F(field, help) {#field, TY_OPT_FLOAT, offsetof(ty_train_config_t, field), 0, help}
#define TY_B(field, help) {#field, TY_OPT_BOOL, offsetof(ty_train_config_t, field), 0, help}
#define TY_U(field, help) {#field, TY_OPT_U64, offsetof(ty_train_config_t, field), 0, help}

static const ty_opt_t ty_opts[] = {
    TY_S(model, "Hugging Face model folder to fine-tune"),
    TY_S(preset, "model preset to train from scratch (gpt2-tiny, gpt2-124m, gpt2-350m, "
                 "llama-tiny, llama-60m, llama-1b, llama-7b, llama-8b); the vocabulary comes "
                 "from the "
                 "data"),
    TY_I(max_positions, "a --preset model's positions (config.json max_position_embeddings / "
                        "n_positions) instead of the preset's, to train longer sequences from "
                        "scratch (0: the preset's)"),
    TY_S(data, "dataset folder made by 'trainyard data prepare'"),
    TY_S(tokenizer, "tokenizer.json copied into checkpoints (default: the data's or model's)"),
    TY_S(out, "output folder: checkpoints, metrics.jsonl, TensorBoard events, summary.txt"),
    TY_S(backend, "device URI, e.g. cpu, cpu?threads=2 (URI?fallback=cpu is the old form of "
                  "--fallback cpu)"),
    TY_S(fallback, "device URI that runs the nodes --backend refuses, e.g. cpu (a mixed run, "
                   "for bring-up on one process; never a benchmark)"),
    TY_S(dtype, "parameter and compute dtype: f32, bf16, f16, f64; or bf16-mixed / f16-mixed "
                "(f32 parameters and optimizer state, matmuls and attention in bf16/f16)"),
    TY_I(batch_size, "sequences per micro-batch"),
    TY_I(seq_len, "tokens per sequence: must be the dataset's (a check; 0: take the "
                  "dataset's)"),
    TY_I(grad_accum, "micro-batches per optimizer step"),
    TY_I(epochs, "passes over the training data (when --max-steps is 0)"),
    TY_I(max_steps, "optimizer steps (0: --epochs decides)"),
    TY_S(optimizer, "adamw, sgd or adafactor (transformers.Adafactor: factored second "
                    "moments; --beta1 turns its first moment on)"),
    TY_F(lr, "peak learning rate"),
    TY_F(min_lr, "learning-rate floor of the decay (not with --schedule constant)"),
    TY_I(warmup_steps, "linear warmup steps"),
    TY_S(schedule, "decay after warmup: cosine, linear or constant"),
    TY_F(weight_decay, "decoupled weight decay (matrices only unless --decay-all)"),
    TY_F(beta1, "AdamW beta1; with adafactor, given on purpose, its first moment's beta1"),
    TY_F(beta2, "AdamW beta2 (--optimizer adamw only)"),
    TY_F(eps, "AdamW epsilon (--optimizer adamw only)"),
    TY_F(momentum, "SGD momentum (--optimizer sgd only)"),
    TY_F(clip, "global gradient-norm clipping (0: off)"),
    TY_F(dropout, "dropout probability on embeddings and residual branches"),
    TY_B(decay_all, "apply weight decay to norms, biases and embeddings too"),
    TY_U(seed, "seed of initialization, data order and dropout"),
    TY_I(eval_every, "validation loss every N steps (0: only at the end; needs val rows)"),
    TY_I(eval_batches, "validation batches per evaluation (0: all; needs val rows)"),
    TY_S(eval_data, "task evaluation set, JSON lines as for 'trainyard eval': its accuracy at "
                    "every evaluation and at the end (metrics.jsonl, TensorBoard eval/*)"),
    TY_B(eval_choices, "score --eval-data as multiple choice (the choices of 'trainyard "
                       "eval')"),
    TY_F(min_eval_acc, "the final --eval-data accuracy must reach this (0..1), else the run "
                       "exits 1 after saving its checkpoint (0: no bar)"),
    TY_S(control_registry, "where 'trainyard control' finds this run (default "
                           "$XDG_RUNTIME_DIR/trainyard, else /tmp/trainyard-<uid>)"),
    TY_I(save_every, "checkpoint every N steps (0: only at the end)"),
    TY_I(keep, "keep the last K checkpoints (0: all)"),
    TY_I(log_every, "print a step line every N steps"),
    TY_S(resume, "resume: 'latest' checkpoint in --out (an error when there is none), 'auto' "
                 "(latest if there is one, else start fresh), or a checkpoint folder"),
    TY_B(overwrite, "start over in an --out that holds a run: delete that run's checkpoints "
                    "and logs first (only files a run writes; refused if others are inside "
                    "them)"),
    TY_B(allow_done, "a --resume whose checkpoint already reached --max-steps/--epochs exits "
                     "0 with a note instead of 1 (--resume auto always does)"),
    TY_I(sample_tokens, "print a greedy sample of N tokens at every evaluation and "
                        "checkpoint and at the end (also in metrics.jsonl; 0: none)"),
    TY_S(sample_prompt, "the samples' prompt (needs a tokenizer; default: the end-of-text "
                        "token)"),
    TY_S(artifact, "run the train step from this artifact ('trainyard compile') instead of "
                   "compiling"),
    TY_S(cache_dir, "on-disk compile cache ('none' for none; default $XDG_CACHE_HOME/trainyard "
                    "or ~/.cache/trainyard)"),
    TY_B(retry_failed, "compile again even if the cache holds a failure for this graph"),
    TY_B(allow_nonfinite, "load weights holding NaN or infinity (a loud warning instead of an "
                          "error; the first step then stops on a non-finite loss)"),
    TY_S(check_numerics, "alone: run every step with every intermediate value kept and read "
                         "back, and stop at the first node whose output holds a NaN or an "
                         "infinity, naming it (op, shape, layer, forward or backward) and its "
                         "inputs' min/max/NaN/Inf counts, before any checkpoint of that state; "
                         "=every:N checks steps 1, N+1, 2N+1, ... and replays a step whose loss "
                         "turns non-finite between them checked"),
    TY_S(dump_graph, "write the train step's graph as canonical text (P.txt) and Graphviz "
                     "dot (P.dot)"),
    TY_S(recompute, "activation checkpointing: none, attention (re-run each block's attention "
                    "half in the backward) or layer (the whole block)"),
    TY_I(loss_chunk, "fused LM head + cross-entropy over N tokens at a time: the [B,T,V] "
                     "logits never exist (0: off)"),
    TY_I(mlp_chunk, "each block's MLP over N tokens of the sequence at a time, forward, "
                    "backward and recompute: [B,N,I] intermediates instead of [B,T,I] "
                    "(0: off; a last piece takes T mod N)"),
    TY_B(fused_optimizer, "update each parameter as soon as its gradient is complete, in the "
                          "backward pass (with --clip > 0: one extra backward for the norm)"),
    TY_S(offload, "none, or optimizer: optimizer state in pinned host memory (devices with "
                  "their own memory; refused on host backends)"),
    TY_S(memory_limit, "refuse the run before step 0 unless its memory plan fits in this size "
                       "(e.g. 24GiB; default: the device's memory)"),
    TY_B(plan_only, "build every graph of the run as it would (each rank its part under "
                    "mpirun), print the memory plan, check it against --memory-limit and "
                    "exit: nothing is allocated and --out is not touched"),
    TY_B(relative_step, "adafactor: the relative step size min(1e-2, 1/sqrt(t)) instead of "
                        "--lr and its schedule"),
    TY_B(scale_parameter, "adafactor: scale the step by the parameter's RMS"),
    TY_B(warmup_init, "adafactor: relative step 1e-6 t at first (needs --relative-step)"),
    TY_F(clip_threshold, "adafactor: update clipping threshold"),
    TY_F(decay_rate, "adafactor: second-moment decay exponent"),
    TY_F(adafactor_eps1, "adafactor: regularization added to squared gradients"),
    TY_F(adafactor_eps2, "adafactor: floor of the parameter scale"),
    TY_S(distributed, "auto (one rank of an MPI job when started by mpirun, else env when "
                      "RANK/WORLD_SIZE or srun's SLURM_PROCID/SLURM_NTASKS > 1 are set, else "
                      "one process), mpi (an MPI job; an error without MPI), env (ranks from "
                      "torchrun/Slurm variables meeting at MASTER_ADDR:MASTER_PORT over the "
                      "Trainyard TCP transport, TRAINYARD_JOB_TOKEN required) or none"),
    TY_F(dist_timeout, "seconds a rank waits for the others at a collective before the run "
                       "ends with an error naming the missing rank"),
    TY_I(tp, "tensor parallel: split attention heads and MLP columns over this many ranks "
             "of an MPI job, inside each stage with --pp (the rest data parallel: world = dp x pp "
             "x tp)"),
    TY_I(cp, "context parallel: split each sequence into 2N chunks over N ranks of an MPI "
             "job (rank r holds chunks r and 2N-1-r; world = dp x tp x cp); keys and values "
             "all-gathered per layer, attention merged chunk by chunk; with --tp, data "
             "parallel, --zero 1 (shares over the replicas) and --eval-data (whole rows on "
             "rank 0); not with --pp, --deterministic, --check-numerics or --artifact yet"),
    TY_I(zero, "1: ZeRO-1, each data-parallel replica keeps and updates the optimizer state "
               "of its share of the parameters (with --tp each tp rank its parts; with --pp "
               "each chunk's parameters shared over the replicas); 2: ZeRO-2, the gradient "
               "accumulators sharded too (each gradient summed over the shares as backward "
               "completes it, kept by its owner alone); 0: every rank keeps all of it"),
    TY_I(pp, "pipeline parallel: split the layers into N stages on N ranks, or N groups of "
             "--tp ranks (world = data parallel x N x tp under mpirun; micro-batches = "
             "--grad-accum)"),
    TY_S(pp_schedule, "pipeline schedule: 1f1b, or interleaved (--pp-virtual chunks per rank; "
                      "--grad-accum a multiple of --pp)"),
    TY_I(pp_virtual, "interleaved schedule: model chunks per rank (default 2)"),
    TY_B(deterministic, "bitwise the same training whatever --batch-size, --grad-accum and "
                        "the data-parallel world split the global batch into: one gradient "
                        "per row, summed in one fixed tree on the device (slower; batch x "
                        "accumulation a power of two with several ranks; not with --tp, --pp, "
                        "--zero, --fused-optimizer, --artifact)"),
};
#define TY_OPT_COUNT (sizeof(ty_opts) / sizeof(ty_opts[0]))
_Static_assert(TY_OPT_COUNT <= sizeof(((ty_train_config_t *)0)->layer),
               "one layer entry per option");

void ty_train_config_defaults(ty_train_config_t *c) {
  memset(c, 0, sizeof(*c));
  snprintf(c->backend, sizeof(c->backend), "cpu");
  snprintf(c->dtype, sizeof(c->dtype), "f32");
  snprintf(c->out, sizeof(c->out), "out");
  snprintf(c->optimizer, sizeof(c->optimizer), "adamw");
  snprintf(c->schedule, sizeof(c->schedule), "cosine");
  c->batch_size = 8;
  c->grad_accum = 1;
  c->epochs = 1;
  c->lr = 3e-4;
  c->min_lr = 3e-5;
  c->warmup_steps = 0;
  c->weight_decay = 0.1;
  c->beta1 = 0.9;
  c->beta2 = 0.95;
  c->eps = 1e-8;
  c->momentum = 0.9;
  c->clip = 1.0;
  c->seed = 1337;
  c->eval_batches = 0;
  c->keep = 3;
  c->log_every = 1;
  snprintf(c->recompute, sizeof(c->recompute), "none");
  snprintf(c->offload, sizeof(c->offload), "none");
  c->scale_parameter = true;
  c->clip_threshold = 1.0;
  c->decay_rate = -0.8;
  c->adafactor_eps1 = 1e-30;
  c->adafactor_eps2 = 1e-3;
  snprintf(c->distributed, sizeof(c->distributed), "auto");
  c->dist_timeout = 300;
  c->pp = 1;
  snprintf(c->pp_schedule, sizeof(c->pp_schedule), "1f1b");
  c->world = 1;
  c->tp = 1;
  c->cp = 1;
  ty_compile_cache_default_dir(c->cache_dir, sizeof(c->cache_dir));
  c->setting_layer = TY_TRAIN_LAYER_COMMAND;
}

static const ty_opt_t *ty_opt_find(const char *key) {
  char norm[64];
  size_t n = 0;
  for (const char *p = key; *p; ++p) {
    if (n + 1 == sizeof(norm)) return NULL; /* longer than any option: not one cut short */
    norm[n++] = *p == '-' ? '_' : *p;
  }
  norm[n] = '\0';
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    if (strcmp(ty_opts[i].name, norm) == 0) return &ty_opts[i];
  }
  return NULL;
}

int ty_train_config_layer(const ty_train_config_t *c, const char *name) {
  const ty_opt_t *o = ty_opt_find(name);
  return o ? c->layer[o - ty_opts] : TY_TRAIN_LAYER_DEFAULT;
}

bool ty_train_config_is_flag(const char *name) {
  const ty_opt_t *o = ty_opt_find(name);
  /* --check-numerics alone means every step; a value only with '=' */
  return o && (o->kind == TY_OPT_BOOL || !strcmp(o->name, "check_numerics"));
}

ty_status_t ty_train_config_set(ty_train_config_t *c, const char *key, const char *value) {
  const ty_opt_t *o = ty_opt_find(key);
  if (!o) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "unknown option '%.200s'; see 'trainyard train --help'", key);
  }
  char *field = (char *)c + o->offset;
  char *end = NULL;
  errno = 0;
  c->layer[o - ty_opts] = c->setting_layer;
  switch (o->kind) {
    case TY_OPT_STRING:
      /* Numbers and switches refuse '' as not a number; text options too,
       * where '' would pass for "not given" ("--memory-limit ''" was no
       * limit) or for a value no one meant ("--out $UNSET"). */
      if (!value[0]) {
        char flag[64];
        snprintf(flag, sizeof(flag), "%s", o->name);
        for (char *q = flag; *q; ++q) *q = *q == '_' ? '-' : *q;
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--%s is empty: give it a value, or "
                              "leave it out for its default%s", flag,
                              o->offset == offsetof(ty_train_config_t, cache_dir)
                                  ? " ('none' for no cache)" : "");
      }
      if (strlen(value) >= o->size) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: value too long", o->name);
      }
      {
        /* The configuration is saved as JSON beside every checkpoint; a
         * value JSON cannot hold would vanish from the copy. */
        json_t *probe = json_string(value);
        if (!probe) {
          return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: the value is not UTF-8 "
                                "text", o->name);
        }
        json_decref(probe);
      }
      if (o->offset == offsetof(ty_train_config_t, cache_dir) && !strcmp(value, "none")) {
        value = ""; /* no on-disk cache */
      }
      memcpy(field, value, strlen(value) + 1);
      return TY_OK;
    case TY_OPT_INT: {
      long long v = strtoll(value, &end, 10);
      if (errno || end == value || *end) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: '%s' is not an integer",
                              o->name, value);
      }
      *(int64_t *)field = v;
      return TY_OK;
    }
    case TY_OPT_U64: {
      unsigned long long v = strtoull(value, &end, 10);
      if (errno || end == value || *end || value[0] == '-') {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "option %s: '%s' is not a non-negative integer", o->name, value);
      }
      *(uint64_t *)field = v;
      return TY_OK;
    }
    case TY_OPT_FLOAT: {
      double v = strtod(value, &end);
      if (errno || end == value || *end || !isfinite(v)) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: '%s' is not a number",
                              o->name, value);
      }
      *(double *)field = v;
      return TY_OK;
    }
    case TY_OPT_BOOL:
      if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes")) {
        *(bool *)field = true;
      } else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no")) {
        *(bool *)field = false;
      } else {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: '%s' is not true or false",
                              o->name, value);
      }
      return TY_OK;
  }
  return TY_OK;
}

/* An options file is a page of key = value lines. */
static const ty_file_kind_t ty_options_file_kind = {
    .what = "config file", .max_bytes = TY_MIB, .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT, .skip_bom = true};

static bool ty_cfg_is_blank(char c) { return c == ' ' || c == '\t'; }

ty_status_t ty_train_config_load_text(ty_train_config_t *c, const char *text, size_t size,
                                      const char *origin) {
  TY_RETURN_IF_ERROR(ty_file_check_text(text, size, origin, &ty_options_file_kind));
  /* One line at a time in a scratch copy, cut at '=' and trimmed in place. */
  char *line = malloc(size + 1);
  if (!line) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s", origin);
  ty_status_t s = TY_OK;
  /* What the file sets is the file's layer, under the command line's. */
  uint8_t outer = c->setting_layer;
  c->setting_layer = TY_TRAIN_LAYER_FILE;
  size_t number = 0;
  for (size_t at = 0; at < size && !s;) {
    const char *nl = memchr(text + at, '\n', size - at);
    size_t len = nl ? (size_t)(nl - (text + at)) : size - at;
    memcpy(line, text + at, len);
    line[len] = '\0';
    at += len + (nl ? 1 : 0);
    ++number;
    if (len && line[len - 1] == '\r') line[--len] = '\0';
    char *p = line;
    while (ty_cfg_is_blank(*p)) ++p;
    if (!*p || *p == '#') continue;
    char *eq = strchr(p, '=');
    if (!eq) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%zu: expected key = value, got '%.200s'",
                         origin, number, p);
      break;
    }
    char *key_end = eq;
    while (key_end > p && ty_cfg_is_blank(key_end[-1])) --key_end;
    *key_end = '\0';
    if (!*p) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%zu: no option name before '='", origin,
                         number);
      break;
    }
    char *value = eq + 1;
    while (ty_cfg_is_blank(*value)) ++value;
    char *vend = value + strlen(value);
    while (vend > value && ty_cfg_is_blank(vend[-1])) *--vend = '\0';
    s = ty_status_annotate(ty_train_config_set(c, p, value), "%s:%zu", origin, number);
  }
  c->setting_layer = outer;
  free(line);
  return s;
}

ty_status_t ty_train_config_load_file(ty_train_config_t *c, const char *path) {
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_options_file_kind, &text, &size));
  ty_status_t s = ty_train_config_load_text(c, text, size, path);
  free(text);
  return s;
}

/* Options given on purpose (from a file or the command line) that other
 * options make ineffective: refused, naming both, so that no option is
 * accepted and ignored. `given` is the option's layer; an option only
 * overrides what a lower layer set (a --max-steps on the command line over
 * a file's epochs is how one shortens a configured run). */
static ty_status_t ty_train_config_check_effects(const ty_train_config_t *c) {
#define TY_GIVEN(name) (ty_train_config_layer(c, name) != TY_TRAIN_LAYER_DEFAULT)
#define TY_NO_EFFECT(...) return ty_status_make(TY_CODE_INVALID_ARGUMENT, __VA_ARGS__)
  bool sgd = !strcmp(c->optimizer, "sgd"), adafactor = !strcmp(c->optimizer, "adafactor");
  if (!sgd && TY_GIVEN("momentum")) {
    TY_NO_EFFECT("--momentum has no effect with --optimizer %s (it is SGD's)", c->optimizer);
  }
  if (!strcmp(c->distributed, "none") && (TY_GIVEN("dist_timeout") || c->zero)) {
    TY_NO_EFFECT("--%s%s has no effect with --distributed none (one process)",
                 c->zero ? "zero " : "dist-timeout", c->zero == 2 ? "2" : c->zero ? "1" : "");
  }
  if (c->pp == 1 && (TY_GIVEN("pp_schedule") || TY_GIVEN("pp_virtual"))) {
    TY_NO_EFFECT("--pp-%s has no effect without --pp N > 1 (pipeline parallel)",
                 TY_GIVEN("pp_schedule") ? "schedule" : "virtual");
  }
  if (TY_GIVEN("pp_virtual") && strcmp(c->pp_schedule, "interleaved")) {
    TY_NO_EFFECT("--pp-virtual has no effect with --pp-schedule %s (one chunk per rank); use "
                 "--pp-schedule interleaved", c->pp_schedule);
  }
  static const char *const adamw_only[] = {"beta1", "beta2", "eps"};
  for (size_t i = 0; (sgd || adafactor) && i < 3; ++i) {
    if (TY_GIVEN(adamw_only[i]) && !(adafactor && i == 0)) {
      TY_NO_EFFECT("--%s has no effect with --optimizer %s (it is AdamW's)", adamw_only[i],
                   c->optimizer);
    }
  }
  static const char *const adafactor_only[] = {"relative_step", "scale_parameter", "warmup_init",
                                               "clip_threshold", "decay_rate", "adafactor_eps1",
                                               "adafactor_eps2"};
  for (size_t i = 0; !adafactor && i < sizeof(adafactor_only) / sizeof(*adafactor_only); ++i) {
    if (TY_GIVEN(adafactor_only[i])) {
      char flag[32];
      snprintf(flag, sizeof(flag), "%s", adafactor_only[i]);
      for (char *q = flag; *q; ++q) *q = *q == '_' ? '-' : *q;
      TY_NO_EFFECT("--%s has no effect with --optimizer %s (it is Adafactor's)", flag,
                   c->optimizer);
    }
  }
  /* The relative step replaces the learning rate and its schedule, as
   * transformers.Adafactor refuses lr with relative_step. */
  static const char *const schedule_opts[] = {"lr", "min_lr", "warmup_steps", "schedule"};
  static const char *const schedule_flags[] = {"lr", "min-lr", "warmup-steps", "schedule"};
  for (size_t i = 0; c->relative_step && i < 4; ++i) {
    if (TY_GIVEN(schedule_opts[i])) {
      TY_NO_EFFECT("--%s has no effect with --relative-step (Adafactor's step size is then "
                   "min(1e-2, 1/sqrt(t)) times the parameter scale)",
                   schedule_flags[i]);
    }
  }
  if (!strcmp(c->schedule, "constant") && TY_GIVEN("min_lr")) {
    TY_NO_EFFECT("--min-lr has no effect with --schedule constant (nothing decays)");
  }
  if (c->max_steps > 0 && TY_GIVEN("epochs") &&
      ty_train_config_layer(c, "epochs") >= ty_train_config_layer(c, "max_steps")) {
    TY_NO_EFFECT("--epochs has no effect with --max-steps %lld (which sets the run's length); "
                 "give one of them",
                 (long long)c->max_steps);
  }
  if (c->decay_all && c->weight_decay == 0 && TY_GIVEN("decay_all")) {
    TY_NO_EFFECT("--decay-all has no effect with --weight-decay 0");
  }
  if (c->artifact[0] && TY_GIVEN("cache_dir")) {
    TY_NO_EFFECT("--cache-dir has no effect with --artifact (nothing is compiled)");
  }
  if (c->retry_failed && TY_GIVEN("retry_failed") && (c->artifact[0] || !c->cache_dir[0])) {
    TY_NO_EFFECT("--retry-failed has no effect %s", c->artifact[0]
                                                        ? "with --artifact (nothing is compiled)"
                                                        : "without a compile cache (--cache-dir)");
  }
  if (c->allow_done && TY_GIVEN("allow_done") && !c->resume[0]) {
    TY_NO_EFFECT("--allow-done has no effect without --resume (a fresh run has steps to do)");
  }
  if (c->allow_nonfinite && TY_GIVEN("allow_nonfinite") && !c->model[0] && !c->resume[0]) {
    TY_NO_EFFECT("--allow-nonfinite has no effect without --model or --resume (a --preset "
                 "starts from random weights; nothing is loaded)");
  }
#undef TY_NO_EFFECT
#undef TY_GIVEN
  return TY_OK;
}

ty_status_t ty_train_config_validate(const ty_train_config_t *c) {
#define TY_BAD(...) return ty_status_make(TY_CODE_INVALID_ARGUMENT, __VA_ARGS__)
  if (!c->model[0] == !c->preset[0]) TY_BAD("give exactly one of --model and --preset");
  if (!c->data[0]) TY_BAD("--data is required (a folder made by 'trainyard data prepare')");
  if (!c->out[0]) TY_BAD("--out must not be empty");
  if (c->plan_only && c->resume[0]) {
    TY_BAD("--plan-only plans a fresh run (the same graphs as a resumed one); drop --resume %s",
           c->resume);
  }
  if (c->plan_only && c->artifact[0]) {
    TY_BAD("--plan-only builds the graphs the run would compile; --artifact %s runs a compiled "
           "one: drop one of the two", c->artifact);
  }
  if (c->fallback[0] && ty_device_uri_has_option(c->backend, "fallback")) {
    TY_BAD("--fallback %s and --backend %s both name a fallback device: give --fallback only "
           "('?fallback=' in the URI is its old form)", c->fallback, c->backend);
  }
  if (c->batch_size < 1) TY_BAD("--batch-size must be >= 1");
  if (c->seq_len < 0) TY_BAD("--seq-len must be >= 0");
  if (c->grad_accum < 1) TY_BAD("--grad-accum must be >= 1");
  if (c->epochs < 1 && c->max_steps < 1) TY_BAD("give --epochs >= 1 or --max-steps >= 1");
  if (c->max_steps < 0) TY_BAD("--max-steps must be >= 0");
  if (!(c->lr > 0)) TY_BAD("--lr must be > 0");
  if (c->min_lr < 0 || c->min_lr > c->lr) TY_BAD("--min-lr must lie in [0, --lr]");
  if (c->warmup_steps < 0) TY_BAD("--warmup-steps must be >= 0");
  if (strcmp(c->schedule, "cosine") && strcmp(c->schedule, "linear") &&
      strcmp(c->schedule, "constant")) {
    TY_BAD("--schedule must be cosine, linear or constant, not '%s'", c->schedule);
  }
  if (strcmp(c->optimizer, "adamw") && strcmp(c->optimizer, "sgd") &&
      strcmp(c->optimizer, "adafactor")) {
    TY_BAD("--optimizer must be adamw, sgd or adafactor, not '%s'", c->optimizer);
  }
  if (strcmp(c->recompute, "none") && strcmp(c->recompute, "attention") &&
      strcmp(c->recompute, "layer")) {
    TY_BAD("--recompute must be none, attention or layer, not '%s'", c->recompute);
  }
  if (strcmp(c->offload, "none") && strcmp(c->offload, "optimizer")) {
    TY_BAD("--offload must be none or optimizer, not '%s'", c->offload);
  }
  if (c->max_positions < 0 || c->max_positions > TY_MAX_POSITIONS) {
    TY_BAD("--max-positions must be in [1, %lld] (0: the preset's), not %lld",
           (long long)TY_MAX_POSITIONS, (long long)c->max_positions);
  }
  if (c->max_positions > 0 && !c->preset[0]) {
    TY_BAD("--max-positions is for --preset (a --model's positions are its config.json's)");
  }
  if (c->loss_chunk < 0) TY_BAD("--loss-chunk must be >= 0 (0: off)");
  if (c->mlp_chunk < 0) {
    TY_BAD("--mlp-chunk must be >= 0 (0: off), not %lld", (long long)c->mlp_chunk);
  }
  if (c->check_numerics[0]) {
    int64_t every = 0;
    TY_RETURN_IF_ERROR(ty_check_numerics_parse(c->check_numerics, &every));
    if (c->grad_accum > 1 || c->tp > 1 || c->pp > 1) {
      TY_BAD("--check-numerics checks the fused train step of one process: give --grad-accum 1 "
             "(the step's batch as --batch-size) and no --tp/--pp");
    }
  }
  if (c->deterministic) {
    /* Each of these changes where or how the gradients are summed, which
     * the fixed tree (trainer_det.c) does not cover. */
    const char *what = c->tp > 1           ? "--tp (the step's sums over the tp ranks)"
                       : c->pp > 1         ? "--pp (each stage's own gradient graph)"
                       : c->zero           ? "--zero (the clip norm summed over the shards)"
                       : c->fused_optimizer ? "--fused-optimizer (no whole gradient to sum)"
                       : c->artifact[0]    ? "--artifact (a step compiled for the whole batch)"
                                           : NULL;
    if (what) TY_BAD("--deterministic does not cover %s yet: drop one of the two", what);
  }
  if (c->fused_optimizer && c->grad_accum > 1) {
    TY_BAD("--fused-optimizer needs --grad-accum 1: gradient accumulation keeps every "
           "gradient in an f32 accumulator until the optimizer step, which is what the fused "
           "optimizer avoids; use a larger --batch-size");
  }
  uint64_t limit;
  {
    ty_status_t ls = ty_train_config_memory_limit(c, &limit);
    if (ls) return ls;
  }
  if (c->warmup_init && !c->relative_step) TY_BAD("--warmup-init needs --relative-step");
  if (!(c->clip_threshold > 0)) TY_BAD("--clip-threshold must be > 0");
  if (!(c->decay_rate < 0)) TY_BAD("--decay-rate must be < 0");
  if (c->adafactor_eps1 < 0 || c->adafactor_eps2 < 0) {
    TY_BAD("--adafactor-eps1 and --adafactor-eps2 must be >= 0");
  }
  if (c->weight_decay < 0) TY_BAD("--weight-decay must be >= 0");
  if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) {
    TY_BAD("--beta1 and --beta2 must lie in [0, 1)");
  }
  if (!(c->eps > 0)) TY_BAD("--eps must be > 0");
  if (c->clip < 0) TY_BAD("--clip must be >= 0");
  if (!(c->dropout >= 0 && c->dropout < 1)) TY_BAD("--dropout must lie in [0, 1)");
  if (c->eval_every < 0 || c->save_every < 0 || c->keep < 0 || c->eval_batches < 0) {
    TY_BAD("--eval-every, --eval-batches, --save-every and --keep must be >= 0");
  }
  if (c->log_every < 1) TY_BAD("--log-every must be >= 1");
  if (c->overwrite && (!strcmp(c->resume, "latest") || !strcmp(c->resume, "auto"))) {
    TY_BAD("--overwrite starts over and --resume %s continues: give one of them", c->resume);
  }
  if (c->eval_choices && !c->eval_data[0]) TY_BAD("--eval-choices needs --eval-data FILE");
  if (ty_train_config_layer(c, "min_eval_acc") != TY_TRAIN_LAYER_DEFAULT && !c->eval_data[0]) {
    TY_BAD("--min-eval-acc needs --eval-data FILE (the set whose accuracy it bars)");
  }
  if (!(c->min_eval_acc >= 0 && c->min_eval_acc <= 1)) {
    TY_BAD("--min-eval-acc must lie in [0, 1] (an accuracy)");
  }
  if (c->sample_tokens < 0) TY_BAD("--sample-tokens must be >= 0");
  if (c->sample_prompt[0] && c->sample_tokens == 0) {
    TY_BAD("--sample-prompt needs --sample-tokens N (the length of the samples)");
  }
  if (strcmp(c->distributed, "auto") && strcmp(c->distributed, "mpi") &&
      strcmp(c->distributed, "env") && strcmp(c->distributed, "none")) {
    TY_BAD("--distributed must be auto, mpi, env or none, not '%s'", c->distributed);
  }
  if (c->zero < 0 || c->zero > 2) {
    TY_BAD("--zero must be 0, 1 or 2, not %lld", (long long)c->zero);
  }
  if (c->tp < 1 || c->tp > 4096) TY_BAD("--tp must be 1 or more, not %lld", (long long)c->tp);
  /* What tensor parallel does not do (yet): each named, none ignored. */
  if (c->tp > 1) {
#define TY_TP_BAD(what, reason) \
  TY_BAD("tensor parallel (--tp %lld) does not run with %s: %s", (long long)c->tp, what, reason)
    if (!strcmp(c->distributed, "none")) {
      TY_TP_BAD("--distributed none", "it splits the model over ranks");
    }
    if (c->fused_optimizer) {
      TY_TP_BAD("--fused-optimizer", "the update would precede the gradient sums over the ranks");
    }
    if (!strcmp(c->optimizer, "adafactor")) {
      TY_TP_BAD("--optimizer adafactor",
                "its factored moments of a split matrix are not the whole matrix's");
    }
    if (c->sample_tokens > 0 || c->eval_data[0]) {
      TY_TP_BAD(c->sample_tokens > 0 ? "--sample-tokens" : "--eval-data",
                "they run the whole model on rank 0");
    }
    if (c->artifact[0]) {
      TY_TP_BAD("--artifact", "an artifact holds one whole model's step");
    }
    if (c->loss_chunk > 0) {
      TY_TP_BAD("--loss-chunk", "the vocabulary is split over the tp ranks, and the fused "
                                "LM head and loss needs the whole of it (the logits are "
                                "never whole under --tp anyway)");
    }
#undef TY_TP_BAD
  }
  if (!(c->dist_timeout > 0) || !(c->dist_timeout <= 86400 * 7)) {
    TY_BAD("--dist-timeout must lie in (0, 604800] seconds, not %g: a rank that dies or "
           "hangs must end the run in bounded time", c->dist_timeout);
  }
  if (c->pp < 1) TY_BAD("--pp must be >= 1, not %lld", (long long)c->pp);
  if (strcmp(c->pp_schedule, "1f1b") && strcmp(c->pp_schedule, "interleaved")) {
    TY_BAD("--pp-schedule must be 1f1b or interleaved, not '%s'", c->pp_schedule);
  }
  /* Levers whose step the pipeline cannot run: it splits every step into
   * per-chunk backward, gradient-sum and optimizer graphs (docs/design-notes.md
   * "Pipeline parallel"). */
  const char *lever = c->fused_optimizer          ? "--fused-optimizer"
                      : c->artifact[0]            ? "--artifact"
                      : strcmp(c->offload, "none") ? "--offload"
                      : c->dump_graph[0]          ? "--dump-graph"
                                                  : NULL;
  if (c->pp > 1 && lever) {
    TY_BAD("%s does not combine with --pp: pipeline parallel runs each stage's backward, "
           "gradient sums and optimizer as graphs of their own, the gradients accumulated "
           "over the micro-batches between them; drop it or run without --pp", lever);
  }
  if (c->pp_virtual < 0 || c->pp_virtual == 1) {
    TY_BAD("--pp-virtual must be >= 2 (model chunks per rank of the interleaved schedule), "
           "not %lld", (long long)c->pp_virtual);
  }
#undef TY_BAD
  TY_RETURN_IF_ERROR(ty_train_config_check_cp(c));
  return ty_train_config_check_effects(c);
}

/* Context parallel (apps/trainyard/train/trainer_cp.c). */
ty_status_t ty_train_config_check_cp(const ty_train_config_t *c) {
  if (c->cp < 1 || c->cp > TY_LLM_CP_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--cp must lie in [1, %d], not %lld",
                          TY_LLM_CP_MAX, (long long)c->cp);
  }
  if (c->cp == 1) return TY_OK;
  /* Each named, none ignored: what splits the step or the data in a way
   * the chunks do not follow yet. */
  const char *what = !strcmp(c->distributed, "none") ? "--distributed none (it splits each "
                                                        "sequence over ranks)"
                     : c->deterministic ? "--deterministic (its fixed tree sums whole rows)"
                     : c->check_numerics[0] ? "--check-numerics (it checks one process's "
                                              "step)"
                     : c->artifact[0]       ? "--artifact (an artifact holds one whole "
                                              "sequence's step)"
                     : c->fused_optimizer ? "--fused-optimizer (the update would precede "
                                            "the gradient sum over the cp ranks)"
                                          : NULL;
  if (what) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "context parallel (--cp %lld) does not run with %s yet: drop one of "
                          "the two",
                          (long long)c->cp, what);
  }
  return TY_OK;
}

ty_status_t ty_train_config_memory_limit(const ty_train_config_t *c, uint64_t *out) {
  *out = 0;
  const char *text = c->memory_limit;
  if (!text[0]) return TY_OK;
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  uint64_t unit = 1;
  switch (end && end != text ? *end : '\0') {
    case 'K': case 'k': unit = 1ull << 10; ++end; break;
    case 'M': case 'm': unit = 1ull << 20; ++end; break;
    case 'G': case 'g': unit = 1ull << 30; ++end; break;
    case 'T': case 't': unit = 1ull << 40; ++end; break;
    default: break;
  }
  if (end && unit > 1 && *end == 'i') ++end;
  if (end && (unit > 1 || *end == 'B') && *end == 'B') ++end;
  if (errno || !end || end == text || *end || !(v > 0) || v * (double)unit >= 1.8e19) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--memory-limit '%s' is not a size (e.g. 24GiB, 512M, 1073741824)",
                          text);
  }
  *out = (uint64_t)(v * (double)unit);
  return TY_OK;
}

static void ty_opt_format(const ty_train_config_t *c, const ty_opt_t *o, char *buf, size_t cap) {
  const char *field = (const char *)c + o->offset;
  switch (o->kind) {
    case TY_OPT_STRING: snprintf(buf, cap, "%s", field); break;
    case TY_OPT_INT: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)field); break;
    case TY_OPT_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case TY_OPT_FLOAT: snprintf(buf, cap, "%.17g", *(const double *)field); break;
    case TY_OPT_BOOL: snprintf(buf, cap, "%s", *(const bool *)field ? "true" : "false"); break;
  }
}

void ty_train_config_print(const ty_train_config_t *c, FILE *out) {
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    char value[TY_CFG_PATH_MAX];
    ty_opt_format(c, &ty_opts[i], value, sizeof(value));
    if (ty_opts[i].kind == TY_OPT_FLOAT) {
      snprintf(value, sizeof(value), "%g", *(const double *)((const char *)c + ty_opts[i].offset));
    }
    fprintf(out, "  %-14s %s\n", ty_opts[i].name, value[0] ? value : "-");
  }
}

void ty_train_config_write_given(const ty_train_config_t *c, const char *const *force,
                                 FILE *out) {
  json_t *j = ty_train_config_to_json(c);
  for (size_t i = 0; i < TY_OPT_COUNT && j; ++i) {
    const char *name = ty_opts[i].name;
    bool forced = false;
    for (size_t k = 0; force && force[k] && !forced; ++k) forced = !strcmp(force[k], name);
    if (!forced && ty_train_config_layer(c, name) == TY_TRAIN_LAYER_DEFAULT) continue;
    const json_t *v = json_object_get(j, name);
    if (json_is_string(v) && !json_string_length(v) && !strcmp(name, "cache_dir")) {
      fprintf(out, "%s = none\n", name); /* how "no cache" is given (an empty value is not) */
    } else if (json_is_string(v)) {
      fprintf(out, "%s = %s\n", name, json_string_value(v));
    } else if (json_is_integer(v)) {
      fprintf(out, "%s = %lld\n", name, (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
      fprintf(out, "%s = %.17g\n", name, json_real_value(v));
    } else if (json_is_boolean(v)) {
      fprintf(out, "%s = %s\n", name, json_is_true(v) ? "true" : "false");
    }
  }
  json_decref(j);
}

json_t *ty_train_config_to_json(const ty_train_config_t *c) {
  json_t *j = json_object();
  for (size_t i = 0; i < TY_OPT_COUNT && j; ++i) {
    const ty_opt_t *o = &ty_opts[i];
    const char *field = (const char *)c + o->offset;
    json_t *v = NULL;
    switch (o->kind) {
      case TY_OPT_STRING: v = json_string(field); break;
      case TY_OPT_INT: v = json_integer(*(const int64_t *)field); break;
      case TY_OPT_U64: {
        char text[32];
        snprintf(text, sizeof(text), "%llu", (unsigned long long)*(const uint64_t *)field);
        v = json_string(text); /* JSON integers are signed 64-bit in jansson */
        break;
      }
      case TY_OPT_FLOAT: v = json_real(*(const double *)field); break;
      case TY_OPT_BOOL: v = json_boolean(*(const bool *)field); break;
    }
    json_object_set_new(j, o->name, v);
  }
  return j;
}

ty_status_t ty_train_config_from_json(ty_train_config_t *c, const json_t *object) {
  if (!json_is_object(object)) {
    return ty_status_make(TY_CODE_DATA_LOSS, "the saved configuration is not a JSON object");
  }
  /* Keys this version does not know are left alone: a checkpoint may come
   * from a version with more options. A known key of the wrong type is
   * damage, never a default. */
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    const ty_opt_t *o = &ty_opts[i];
    json_t *v = json_object_get(object, o->name);
    if (!v) continue;
    char *field = (char *)c + o->offset;
    const char *want = NULL;
    switch (o->kind) {
      case TY_OPT_STRING:
        if (!json_is_string(v) || json_string_length(v) >= o->size ||
            strlen(json_string_value(v)) != json_string_length(v)) {
          want = "a string of the option's length";
        } else {
          memcpy(field, json_string_value(v), json_string_length(v) + 1);
        }
        break;
      case TY_OPT_INT:
        if (!json_is_integer(v)) want = "an integer";
        else *(int64_t *)field = (int64_t)json_integer_value(v);
        break;
      case TY_OPT_U64: {
        /* Written as a string: jansson's integers are signed 64-bit. */
        const char *text = json_string_value(v);
        char *end = NULL;
        errno = 0;
        unsigned long long u = text ? strtoull(text, &end, 10) : 0;
        if (!text || text[0] < '0' || text[0] > '9' || *end || errno) want = "a decimal string";
        else *(uint64_t *)field = u;
        break;
      }
      case TY_OPT_FLOAT:
        if (!json_is_number(v) || !isfinite(json_number_value(v))) want = "a number";
        else *(double *)field = json_number_value(v);
        break;
      case TY_OPT_BOOL:
        if (!json_is_boolean(v)) want = "true or false";
        else *(bool *)field = json_is_true(v);
        break;
    }
    if (want) {
      return ty_status_make(TY_CODE_DATA_LOSS, "the saved configuration's option '%s' is not %s",
                            o->name, want);
    }
  }
  return TY_OK;
}

void ty_train_config_diff(const ty_train_config_t *old, const ty_train_config_t *now,
                          const char *const *names,
                          void (*fn)(void *user, const char *name, const char *was,
                                     const char *now),
                          void *user) {
  for (size_t n = 0; names[n]; ++n) {
    const ty_opt_t *o = ty_opt_find(names[n]);
    if (!o) continue;
    char was[TY_CFG_PATH_MAX], is[TY_CFG_PATH_MAX];
    ty_opt_format(old, o, was, sizeof(was));
    ty_opt_format(now, o, is, sizeof(is));
    if (strcmp(was, is) != 0) {
      if (o->kind == TY_OPT_FLOAT) { /* %.17g compares exactly; %g reads better */
        snprintf(was, sizeof(was), "%g", *(const double *)((const char *)old + o->offset));
        snprintf(is, sizeof(is), "%g", *(const double *)((const char *)now + o->offset));
      }
      char flag[64];
      snprintf(flag, sizeof(flag), "%s", o->name);
      for (char *p = flag; *p; ++p) *p = *p == '_' ? '-' : *p;
      fn(user, flag, was[0] ? was : "-", is[0] ? is : "-");
    }
  }
}

void ty_train_config_help(FILE *out) {
  ty_train_config_t d;
  ty_train_config_defaults(&d);
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    const ty_opt_t *o = &ty_opts[i];
    char flag[64], dflt[TY_CFG_PATH_MAX];
    snprintf(flag, sizeof(flag), "--%s", o->name);
    for (char *p = flag; *p; ++p) *p = *p == '_' ? '-' : *p;
    ty_opt_format(&d, o, dflt, sizeof(dflt));
    if (o->kind == TY_OPT_FLOAT) snprintf(dflt, sizeof(dflt), "%g", *(const double *)((const char *)&d + o->offset));
    fprintf(out, "  %-18s %s%s%s%s\n", flag, o->help, dflt[0] && o->kind != TY_OPT_BOOL ? " [" : "",
            dflt[0] && o->kind != TY_OPT_BOOL ? dflt : "", dflt[0] && o->kind != TY_OPT_BOOL ? "]" : "");
  }
}
