/* Model-graph options of `trainyard compile` and `trainyard check`
 * (graph_args.h). */
#include "graph_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "files/out_paths.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/dataset.h"
#include "models/presets.h"

void ty_graph_args_init(ty_graph_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->B = 8;
  a->eos = -1;
  a->compiles = true;
  ty_train_config_defaults(&a->cfg);
}

static bool ty_graph_args_int(const char *text, int64_t *out) {
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (!*text || *end || v <= 0) return false;
  *out = v;
  return true;
}

/* Options that are per-step inputs, not part of a compiled graph. */
static bool ty_graph_args_is_runtime(const char *key) {
  static const char *const keys[] = {"lr",    "min-lr", "warmup-steps", "schedule", "weight-decay",
                                     "beta1", "beta2",  "eps",          "momentum", "clip",
                                     NULL};
  for (int i = 0; keys[i]; ++i) {
    if (!strcmp(keys[i], key)) return true;
  }
  return false;
}

static bool ty_listed(const char *const *list, const char *key) {
  for (int i = 0; list && list[i]; ++i) {
    if (!strcmp(list[i], key)) return true;
  }
  return false;
}

/* The options ty_graph_args_option takes (flags: decay-all, retry-failed).
 * No --eos-id: the end-of-text id is part of no graph. */
static const char *const ty_graph_args_keys[] = {
    "backend",    "fallback",  "model",     "preset",    "data",         "vocab-size", "batch-size",
    "seq-len",    "optimizer", "dtype",     "dropout",      "decay-all",  "grad-accum",
    "cache-dir",  "retry-failed", "dump-graph", "max-positions", NULL};

int ty_graph_args_refuse_runtime(const char *command, const char *key) {
  return ty_app_usage_error(command,
                            "--%s is a runtime hyperparameter (an input bound at every "
                            "step, never compiled): give it to 'trainyard train'",
                            key);
}

/* One model/shape/train option; -1 when `key` is none of them. */
static int ty_graph_args_option(const char *command, ty_graph_args_t *a, const char *key,
                                const char *value) {
  if (value && !value[0] && (!strcmp(key, "backend") || !strcmp(key, "fallback") ||
                             !strcmp(key, "model") ||
                             !strcmp(key, "preset") || !strcmp(key, "data"))) {
    /* As ty_train_config_set refuses the options it sets. */
    return ty_app_usage_error(command, "--%s is empty: give it a value, or leave it out", key);
  }
  if (!strcmp(key, "backend")) {
    a->backend = value;
  } else if (!strcmp(key, "fallback")) {
    a->fallback = value;
  } else if (!strcmp(key, "model")) {
    a->model = value;
  } else if (!strcmp(key, "preset")) {
    a->preset = value;
  } else if (!strcmp(key, "data")) {
    a->data = value;
  } else if (!strcmp(key, "vocab-size") || !strcmp(key, "batch-size") ||
             !strcmp(key, "seq-len")) {
    int64_t *dst = key[0] == 'v' ? &a->vocab : key[0] == 'b' ? &a->B : &a->T;
    if (!ty_graph_args_int(value, dst)) {
      return ty_app_usage_error(command, "--%s '%s' is not a positive integer", key, value);
    }
  } else if (!a->compiles && (!strcmp(key, "cache-dir") || !strcmp(key, "retry-failed"))) {
    return ty_app_usage_error(command, "--%s: 'trainyard %s' compiles nothing", key, command);
  } else if (!strcmp(key, "optimizer") || !strcmp(key, "dtype") || !strcmp(key, "dropout") ||
             !strcmp(key, "decay-all") || !strcmp(key, "grad-accum") ||
             !strcmp(key, "cache-dir") || !strcmp(key, "retry-failed") ||
             !strcmp(key, "dump-graph") || !strcmp(key, "max-positions")) {
    ty_status_t s = ty_train_config_set(&a->cfg, key, value ? value : "true");
    if (s) {
      int rc = ty_app_usage_error(command, "%s", ty_status_message(s));
      ty_status_free(s);
      return rc;
    }
  } else if (ty_graph_args_is_runtime(key)) {
    return ty_graph_args_refuse_runtime(command, key);
  } else {
    return -1;
  }
  return TY_EXIT_OK;
}

int ty_graph_args_parse(const char *command, int argc, char **argv, ty_graph_args_t *a,
                        const char *const *flags, const char *const *own,
                        ty_graph_args_own_fn own_fn, void *user) {
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return -1;
    if (strncmp(arg, "--", 2) != 0) {
      return ty_app_usage_error(command, "unexpected argument '%s'", arg);
    }
    char key[64];
    const char *eq = strchr(arg, '='), *value = NULL;
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n == 0 || n >= sizeof(key)) return ty_app_usage_error(command, "bad option '%s'", arg);
    memcpy(key, arg + 2, n);
    key[n] = '\0';
    if (!ty_listed(flags, key) && !ty_listed(own, key) && !ty_listed(ty_graph_args_keys, key) &&
        !ty_graph_args_is_runtime(key)) {
      return ty_app_usage_error(command, "unknown option '%s'", arg);
    }
    bool flag = ty_listed(flags, key) || !strcmp(key, "retry-failed") ||
                !strcmp(key, "decay-all");
    if (eq) {
      value = eq + 1;
    } else if (!flag) {
      if (i + 1 == argc) return ty_app_usage_error(command, "option '%s' needs a value", arg);
      value = argv[++i];
    }
    int rc;
    if (ty_listed(flags, key) || ty_listed(own, key)) {
      rc = own_fn(user, key, value);
    } else if ((rc = ty_graph_args_option(command, a, key, value)) < 0) {
      rc = ty_app_usage_error(command, "unknown option '%s'", arg);
    }
    if (rc != TY_EXIT_OK) return rc;
  }
  return TY_EXIT_OK;
}

int ty_graph_args_validate(const char *command, const ty_graph_args_t *a,
                           const char *untrained) {
  if (!a->backend) return ty_app_usage_error(command, "--backend URI is required");
  if (ty_app_refuse_two_fallbacks(command, a->backend, a->fallback) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  if (!a->model == !a->preset) {
    return ty_app_usage_error(command, "give exactly one of --model and --preset");
  }
  /* Options the chosen graphs would ignore are refused, not dropped. */
  if (a->model && a->vocab) {
    return ty_app_usage_error(command, "--vocab-size is for --preset (the model's config.json "
                                       "has its own)");
  }
  if (a->model && a->cfg.max_positions) {
    return ty_app_usage_error(command, "--max-positions is for --preset (a --model's positions "
                                       "are its config.json's)");
  }
  if (a->preset && !a->vocab && !a->data) {
    return ty_app_usage_error(command, "--preset needs --vocab-size N (or --data DIR)");
  }
  if (untrained) {
    static const char *const train_only[] = {"optimizer", "dropout", "decay_all", "grad_accum"};
    for (size_t i = 0; i < sizeof(train_only) / sizeof(train_only[0]); ++i) {
      if (ty_train_config_layer(&a->cfg, train_only[i]) != TY_TRAIN_LAYER_DEFAULT) {
        char flag[32];
        snprintf(flag, sizeof(flag), "%s", train_only[i]);
        for (char *p = flag; *p; ++p) *p = *p == '_' ? '-' : *p;
        return ty_app_usage_error(command, "--%s has no effect %s", flag, untrained);
      }
    }
  }
  if (a->compiles && a->cfg.retry_failed && !a->cfg.cache_dir[0]) {
    return ty_app_usage_error(command, "--retry-failed has no effect without a compile cache "
                                       "(--cache-dir)");
  }
  if (!(a->cfg.dropout >= 0 && a->cfg.dropout < 1)) {
    return ty_app_usage_error(command, "--dropout must lie in [0, 1)");
  }
  /* The train options' own checks (choices, combinations, memory levers),
   * on a copy that names a model and data as a train run would. */
  ty_train_config_t check = a->cfg;
  snprintf(check.preset, sizeof(check.preset), "%s", "x");
  snprintf(check.data, sizeof(check.data), "%s", "x");
  check.model[0] = '\0';
  ty_status_t vs = ty_train_config_validate(&check);
  if (vs) {
    int rc = ty_app_usage_error(command, "%s", ty_status_message(vs));
    ty_status_free(vs);
    return rc;
  }
  return TY_EXIT_OK;
}

ty_status_t ty_graph_args_model(ty_graph_args_t *a, ty_model_config_t *mc) {
  int64_t data_vocab = 0;
  if (a->data) {
    ty_dataset_t *d = NULL;
    TY_RETURN_IF_ERROR(ty_dataset_open(a->data, "train", 0, &d));
    /* Given with --data, the sizes must be the data's: a train run on it
     * would need exactly those, and the graph would not match it. */
    const char *flag = NULL;
    int64_t given = 0, have = 0;
    if (a->T && a->T != (int64_t)ty_dataset_seq_len(d)) {
      flag = "seq-len", given = a->T, have = ty_dataset_seq_len(d);
    } else if (a->vocab && a->vocab != (int64_t)ty_dataset_vocab_size(d)) {
      flag = "vocab-size", given = a->vocab, have = ty_dataset_vocab_size(d);
    }
    data_vocab = ty_dataset_vocab_size(d);
    if (!a->vocab) a->vocab = ty_dataset_vocab_size(d);
    if (a->eos < 0) a->eos = ty_dataset_eos_id(d);
    if (!a->T) a->T = ty_dataset_seq_len(d);
    ty_dataset_close(d);
    if (flag) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--%s %lld differs from the data's %lld in %s (a train run on it "
                            "could not use this graph); leave --%s out",
                            flag, (long long)given, (long long)have, a->data, flag);
    }
  }
  if (a->model) {
    TY_RETURN_IF_ERROR(ty_model_config_load(a->model, mc));
    /* A config alone is enough to build the graphs; weights beside it must
     * match it, checked before a graph of a size the checkpoint belies (a
     * config with 100000 layers over 2) is built. */
    bool weights = false;
    for (int k = 0; k < 2 && !weights; ++k) {
      char path[TY_CFG_PATH_MAX + 64];
      snprintf(path, sizeof(path), "%s/%s", a->model,
               k ? "model.safetensors.index.json" : "model.safetensors");
      TY_RETURN_IF_ERROR(ty_file_probe(path, &weights));
    }
    if (weights) TY_RETURN_IF_ERROR(ty_llm_check_weights(mc, a->model));
    if (data_vocab > mc->vocab_size) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "the data's vocabulary (%lld) is larger than the model's (%lld)",
                            (long long)data_vocab, (long long)mc->vocab_size);
    }
    return TY_OK;
  }
  /* The graphs do not depend on it; the preset's config needs one. */
  int64_t eos = a->eos >= 0 ? a->eos : a->vocab - 1;
  TY_RETURN_IF_ERROR(ty_model_preset(a->preset, a->vocab, eos, eos, mc));
  if (a->cfg.max_positions > 0) mc->max_positions = a->cfg.max_positions;
  return TY_OK;
}

ty_status_t ty_graph_args_check_out(const ty_graph_args_t *a, const ty_out_path_t *out) {
  const ty_path_arg_t inputs[] = {{"--model", a->model}, {"--data", a->data}};
  return ty_out_path_check(out, inputs, sizeof(inputs) / sizeof(inputs[0]));
}

ty_status_t ty_graph_args_check_dump(const ty_graph_args_t *a, const char *prefix) {
  if (!prefix || !prefix[0]) return TY_OK;
  for (int k = 0; k < 2; ++k) {
    char path[TY_CFG_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s%s", prefix, k ? ".dot" : ".txt");
    const ty_out_path_t dump = {
        .option = "--dump-graph", .path = path, .what = "graph dump", .creates_parents = true};
    TY_RETURN_IF_ERROR(ty_graph_args_check_out(a, &dump));
  }
  return TY_OK;
}
