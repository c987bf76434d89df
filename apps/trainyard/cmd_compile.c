/* `trainyard compile`: compiles the graph `trainyard train` would run (or an
 * inference graph) for a device, writes the backend's artifact and prints
 * its placement report. The report's simulated figures and the host wall
 * time of the compile are kept apart; an emulated device says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "graph/compile_cache.h"
#include "graph/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "models/config.h"
#include "models/dataset.h"
#include "models/presets.h"
#include "train_config.h"
#include "train_graph.h"

static const char *const ty_compile_usage =
    "usage: trainyard compile --backend URI (--model HF_DIR | --preset NAME\n"
    "                         (--vocab-size N | --data DIR)) --batch-size B\n"
    "                         (--seq-len T | --data DIR) [--inference]\n"
    "                         [--optimizer adamw|sgd] [--dtype D] [--dropout P]\n"
    "                         [--decay-all] --out FILE [--cache-dir DIR] [--retry-failed]\n"
    "\n"
    "Compiles the train step that 'trainyard train' runs with the same options\n"
    "(forward, backward, clipping and optimizer as one graph; with --inference,\n"
    "the forward pass with logits as output) for the device, and writes the\n"
    "backend's artifact to FILE and its report to FILE.report.txt. 'trainyard\n"
    "train --artifact FILE' then runs it without compiling; a run whose graph\n"
    "differs (batch, sequence, model, optimizer, dropout) is refused.\n"
    "Hyperparameters such as --lr are inputs bound at every step, not part of\n"
    "the artifact. Only backends that serialize executables write artifacts\n"
    "(dataflow).\n"
    "\n"
    "  --backend URI      device, e.g. dataflow, dataflow?tiles=2&mem_per_tile=32M\n"
    "  --model DIR        Hugging Face model folder (config.json)\n"
    "  --preset NAME      a model preset, with --vocab-size N (or --data DIR)\n"
    "  --vocab-size N     vocabulary of a preset\n"
    "  --eos-id ID        end-of-text id of a preset (default: vocab size - 1)\n"
    "  --data DIR         take vocabulary, end-of-text id and sequence length from\n"
    "                     a dataset made by 'trainyard data prepare'\n"
    "  --batch-size B     sequences per step [8]\n"
    "  --seq-len T        tokens per sequence\n"
    "  --inference        compile the forward pass (logits) instead of a train step\n"
    "  --optimizer O      adamw or sgd [adamw]\n"
    "  --dtype D          parameter and compute dtype [f32]\n"
    "  --dropout P        dropout probability (fixed at compile time) [0]\n"
    "  --decay-all        weight decay on norms, biases and embeddings too\n"
    "  --grad-accum N     as 'trainyard train' (the dataflow device needs 1) [1]\n"
    "  --out FILE         the artifact; the report goes to FILE.report.txt\n"
    "  --cache-dir DIR    on-disk compile cache ('none' for none; default\n"
    "                     $XDG_CACHE_HOME/trainyard or ~/.cache/trainyard)\n"
    "  --retry-failed     compile again even if the cache holds a failure\n"
    "  -h, --help         this help\n";

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  const char *backend, *model, *preset, *data, *out;
  int64_t vocab, eos, B, T;
  bool inference;
  ty_train_config_t cfg; /* optimizer, dtype, dropout, decay_all, cache */
} ty_compile_args_t;

static bool ty_compile_int(const char *text, int64_t *out) {
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (!*text || *end || v <= 0) return false;
  *out = v;
  return true;
}

/* Options that are per-step inputs, not part of a compiled graph. */
static bool ty_compile_is_runtime(const char *key) {
  static const char *const keys[] = {"lr",    "min-lr", "warmup-steps", "schedule", "weight-decay",
                                     "beta1", "beta2",  "eps",          "momentum", "clip",
                                     NULL};
  for (int i = 0; keys[i]; ++i) {
    if (!strcmp(keys[i], key)) return true;
  }
  return false;
}

static int ty_compile_parse(int argc, char **argv, ty_compile_args_t *a) {
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      fputs(ty_compile_usage, stdout);
      return -1;
    }
    if (strncmp(arg, "--", 2) != 0) {
      return ty_app_usage_error("compile", "unexpected argument '%s'", arg);
    }
    char key[64];
    const char *eq = strchr(arg, '='), *value = NULL;
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    if (n == 0 || n >= sizeof(key)) return ty_app_usage_error("compile", "bad option '%s'", arg);
    memcpy(key, arg + 2, n);
    key[n] = '\0';
    bool flag = !strcmp(key, "inference") || !strcmp(key, "retry-failed") ||
                !strcmp(key, "decay-all");
    if (eq) {
      value = eq + 1;
    } else if (!flag) {
      if (i + 1 == argc) return ty_app_usage_error("compile", "option '%s' needs a value", arg);
      value = argv[++i];
    }
    if (!strcmp(key, "backend")) {
      a->backend = value;
    } else if (!strcmp(key, "model")) {
      a->model = value;
    } else if (!strcmp(key, "preset")) {
      a->preset = value;
    } else if (!strcmp(key, "data")) {
      a->data = value;
    } else if (!strcmp(key, "out")) {
      a->out = value;
    } else if (!strcmp(key, "inference")) {
      a->inference = true;
    } else if (!strcmp(key, "vocab-size") || !strcmp(key, "eos-id") ||
               !strcmp(key, "batch-size") || !strcmp(key, "seq-len")) {
      int64_t *dst = key[0] == 'v' ? &a->vocab : key[0] == 'e' ? &a->eos
                                               : key[0] == 'b' ? &a->B
                                                               : &a->T;
      if (!ty_compile_int(value, dst)) {
        return ty_app_usage_error("compile", "--%s '%s' is not a positive integer", key, value);
      }
    } else if (!strcmp(key, "optimizer") || !strcmp(key, "dtype") || !strcmp(key, "dropout") ||
               !strcmp(key, "decay-all") || !strcmp(key, "grad-accum") ||
               !strcmp(key, "cache-dir") || !strcmp(key, "retry-failed")) {
      ty_status_t s = ty_train_config_set(&a->cfg, key, value ? value : "true");
      if (s) {
        int rc = ty_app_usage_error("compile", "%s", ty_status_message(s));
        ty_status_free(s);
        return rc;
      }
    } else if (ty_compile_is_runtime(key)) {
      return ty_app_usage_error("compile",
                                "--%s is a runtime hyperparameter (an input bound at every "
                                "step, never compiled): give it to 'trainyard train'",
                                key);
    } else {
      return ty_app_usage_error("compile", "unknown option '%s'", arg);
    }
  }
  if (!a->backend) return ty_app_usage_error("compile", "--backend URI is required");
  if (!a->out || !a->out[0]) return ty_app_usage_error("compile", "--out FILE is required");
  if (!a->model == !a->preset) {
    return ty_app_usage_error("compile", "give exactly one of --model and --preset");
  }
  if (a->preset && !a->vocab && !a->data) {
    return ty_app_usage_error("compile", "--preset needs --vocab-size N (or --data DIR)");
  }
  if (!a->T && !a->data) return ty_app_usage_error("compile", "--seq-len T is required");
  if (!(a->cfg.dropout >= 0 && a->cfg.dropout < 1)) {
    return ty_app_usage_error("compile", "--dropout must lie in [0, 1)");
  }
  if (strcmp(a->cfg.optimizer, "adamw") && strcmp(a->cfg.optimizer, "sgd")) {
    return ty_app_usage_error("compile", "--optimizer must be adamw or sgd, not '%s'",
                              a->cfg.optimizer);
  }
  return TY_EXIT_OK;
}

/* The model configuration and the shapes, from --model/--preset and --data. */
static ty_status_t ty_compile_model(ty_compile_args_t *a, ty_model_config_t *mc) {
  if (a->data) {
    ty_dataset_t *d = NULL;
    TY_RETURN_IF_ERROR(ty_dataset_open(a->data, "train", 0, &d));
    if (!a->vocab) a->vocab = ty_dataset_vocab_size(d);
    if (!a->eos) a->eos = ty_dataset_eos_id(d);
    if (!a->T) a->T = ty_dataset_seq_len(d);
    ty_dataset_close(d);
  }
  if (a->model) return ty_model_config_load(a->model, mc);
  int64_t eos = a->eos ? a->eos : a->vocab - 1;
  return ty_model_preset(a->preset, a->vocab, eos, eos, mc);
}

static int ty_compile_run(ty_app_t *app, ty_compile_args_t *a) {
  ty_model_config_t mc;
  ty_dtype_t dtype;
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  ty_graph_t *graph = NULL;
  ty_llm_t model;
  memset(&model, 0, sizeof(model));
  ty_session_t *session = NULL;
  void *bytes = NULL;
  size_t size = 0;
  char *report = NULL;
  ty_status_t s = ty_dtype_parse(a->cfg.dtype, &dtype);
  if (!s) s = ty_compile_model(a, &mc);
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open("compile", registry, a->backend, &device, NULL);
  if (!s) {
    ty_train_graph_kind_t kind = a->inference ? TY_TRAIN_GRAPH_INFERENCE : TY_TRAIN_GRAPH_STEP;
    s = ty_train_graph_build(&a->cfg, &mc, a->B, a->T, dtype, kind, &graph, &model);
  }
  double start = ty_now();
  if (!s) {
    ty_session_options_t so = {.cache_dir = a->cfg.cache_dir,
                               .retry_failed = a->cfg.retry_failed,
                               .compile_only = true};
    s = ty_session_create(device, graph, &so, &session);
  }
  double seconds = ty_now() - start;
  if (!s) s = ty_session_serialize(session, &bytes, &size);
  if (s && ty_status_code(s) == TY_CODE_UNIMPLEMENTED && session) {
    s = ty_status_annotate(s, "%s compiles only in process; 'trainyard compile' writes "
                              "artifacts for backends that serialize executables (dataflow)",
                           ty_device_uri(device));
  }
  if (!s) s = ty_file_write_atomic(a->out, bytes, size);
  if (!s) {
    ty_status_t rs = ty_session_report(session, &report);
    ty_status_free(rs); /* a backend without a report still gets an artifact */
    const ty_abi_device_info_t *info = ty_device_info(device);
    ty_session_stats_t stats = ty_session_stats(session);
    size_t cap = (report ? strlen(report) : 0) + 4096;
    char *text = malloc(cap);
    if (!text) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      int used = snprintf(text, cap,
                          "trainyard compile: %s on %s (%s)%s\n"
                          "graph: %s, %s, batch %lld x %lld tokens, %s, %s%s\n\n%s\n"
                          "compile cache: %s%s%s\n"
                          "host wall time of the compile: %.3f s (measured on this host; not "
                          "a simulated figure)\n"
                          "artifact: %s (%zu bytes)\n",
                          a->inference ? "inference graph" : "train step", ty_device_uri(device),
                          info->name,
                          info->emulated ? " -- an EMULATED device: simulated figures are "
                                           "estimates of a cost model"
                                         : "",
                          mc.model_type, a->model ? a->model : a->preset, (long long)a->B,
                          (long long)a->T, a->cfg.dtype,
                          a->inference ? "no optimizer" : a->cfg.optimizer,
                          a->cfg.dropout > 0 ? ", dropout" : "",
                          report ? report : "(the backend gives no report)\n",
                          ty_session_source_name(stats.source),
                          stats.cache_entry[0] ? ": " : "", stats.cache_entry, seconds, a->out,
                          size);
      fputs(text, stdout);
      char path[4200];
      snprintf(path, sizeof(path), "%s.report.txt", a->out);
      if (used > 0) s = ty_file_write_atomic(path, text, strlen(text));
      if (!s) printf("report: %s\n", path);
      free(text);
    }
  }
  free(report);
  free(bytes);
  ty_session_destroy(session);
  ty_llm_deinit(&model);
  ty_graph_destroy(graph);
  ty_device_close(device);
  ty_registry_destroy(registry);
  return s ? ty_app_fail("compile", s) : TY_EXIT_OK;
}

int ty_cmd_compile(ty_app_t *app, int argc, char **argv) {
  ty_compile_args_t a;
  memset(&a, 0, sizeof(a));
  a.B = 8;
  ty_train_config_defaults(&a.cfg);
  int rc = ty_compile_parse(argc, argv, &a);
  if (rc < 0) return TY_EXIT_OK;
  if (rc != TY_EXIT_OK) return rc;
  return ty_compile_run(app, &a);
}
