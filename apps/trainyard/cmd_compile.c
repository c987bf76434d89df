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
#include "graph/preflight.h"
#include "graph/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/config.h"
#include "models/dataset.h"
#include "models/presets.h"
#include "train_config.h"
#include "train_graph.h"

static const char *const ty_compile_usage =
    "usage: trainyard compile --backend URI (--model HF_DIR | --preset NAME\n"
    "                         (--vocab-size N | --data DIR)) --batch-size B\n"
    "                         (--seq-len T | --data DIR) [--inference]\n"
    "                         [--optimizer adamw|sgd|adafactor] [--dtype D] [--dropout P]\n"
    "                         [--decay-all] [memory levers] [--memory-limit SIZE]\n"
    "                         (--out FILE | --plan-only) [--cache-dir DIR] [--retry-failed]\n"
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
    "  --data DIR         take vocabulary, end-of-text id and sequence length from\n"
    "                     a dataset made by 'trainyard data prepare'\n"
    "  --batch-size B     sequences per step [8]\n"
    "  --seq-len T        tokens per sequence\n"
    "  --inference        compile the forward pass (logits) instead of a train step\n"
    "  --optimizer O      adamw, sgd or adafactor [adamw]; adafactor takes\n"
    "                     --relative-step, --scale-parameter, --warmup-init,\n"
    "                     --clip-threshold, --decay-rate, --adafactor-eps1,\n"
    "                     --adafactor-eps2 and --beta1 (after --optimizer: its\n"
    "                     first moment) as 'trainyard train' does\n"
    "  --dtype D          parameter and compute dtype [f32]\n"
    "  --dropout P        dropout probability (fixed at compile time) [0]\n"
    "  --decay-all        weight decay on norms, biases and embeddings too\n"
    "  --grad-accum N     as 'trainyard train' (the dataflow device needs 1) [1]\n"
    "  --recompute R      none, attention or layer (activation checkpointing)\n"
    "  --loss-chunk N     fused LM head + loss over N tokens at a time\n"
    "  --fused-optimizer  updates in the backward pass; --clip 0 after it leaves out\n"
    "                     its norm pass (a graph property only with this lever)\n"
    "  --offload O        none or optimizer (devices with their own memory)\n"
    "                     The levers are recorded in the graph (its hash and the\n"
    "                     artifact's report); a backend that cannot honour one\n"
    "                     refuses it by name.\n"
    "  --memory-limit S   refuse unless the memory plan fits in S (e.g. 24GiB;\n"
    "                     default: the device's memory)\n"
    "  --plan-only        print the memory plan of the graph and check it; compile\n"
    "                     nothing (no --out): the plan of a llama-7b step at any\n"
    "                     length takes a second on the host\n"
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
  int64_t vocab, eos, B, T; /* eos: the data's end-of-text id, -1 without --data */
  bool inference, plan_only;
  ty_train_config_t cfg; /* optimizer, dtype, dropout, decay_all, cache, levers */
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
                !strcmp(key, "decay-all") || !strcmp(key, "plan-only") ||
                !strcmp(key, "fused-optimizer") || !strcmp(key, "relative-step") ||
                !strcmp(key, "scale-parameter") || !strcmp(key, "warmup-init");
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
    } else if (!strcmp(key, "plan-only")) {
      a->plan_only = true;
    } else if (!strcmp(key, "vocab-size") || !strcmp(key, "batch-size") ||
               !strcmp(key, "seq-len")) {
      /* (no --eos-id: the end-of-text id is not part of any compiled graph) */
      int64_t *dst = key[0] == 'v' ? &a->vocab : key[0] == 'b' ? &a->B : &a->T;
      if (!ty_compile_int(value, dst)) {
        return ty_app_usage_error("compile", "--%s '%s' is not a positive integer", key, value);
      }
    } else if (!strcmp(key, "optimizer") || !strcmp(key, "dtype") || !strcmp(key, "dropout") ||
               !strcmp(key, "decay-all") || !strcmp(key, "grad-accum") ||
               !strcmp(key, "cache-dir") || !strcmp(key, "retry-failed") ||
               !strcmp(key, "recompute") || !strcmp(key, "loss-chunk") ||
               !strcmp(key, "fused-optimizer") || !strcmp(key, "offload") ||
               !strcmp(key, "memory-limit") || !strcmp(key, "relative-step") ||
               !strcmp(key, "scale-parameter") || !strcmp(key, "warmup-init") ||
               !strcmp(key, "clip-threshold") || !strcmp(key, "decay-rate") ||
               !strcmp(key, "adafactor-eps1") || !strcmp(key, "adafactor-eps2") ||
               /* graph properties only after the option that makes them so: beta1
                * turns Adafactor's first moment on; clip 0 leaves out the fused
                * optimizer's norm pass */
               (!strcmp(key, "beta1") && !strcmp(a->cfg.optimizer, "adafactor")) ||
               (!strcmp(key, "clip") && a->cfg.fused_optimizer)) {
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
  /* Options the chosen graph would ignore are refused, not dropped. */
  if (a->model && a->vocab) {
    return ty_app_usage_error("compile", "--vocab-size is for --preset (the model's config.json "
                                         "has its own)");
  }
  if (a->inference) {
    static const char *const train_only[] = {"optimizer", "dropout", "decay_all", "grad_accum"};
    for (size_t i = 0; i < sizeof(train_only) / sizeof(train_only[0]); ++i) {
      if (ty_train_config_layer(&a->cfg, train_only[i]) != TY_TRAIN_LAYER_DEFAULT) {
        char flag[32];
        snprintf(flag, sizeof(flag), "%s", train_only[i]);
        for (char *p = flag; *p; ++p) *p = *p == '_' ? '-' : *p;
        return ty_app_usage_error("compile",
                                  "--%s has no effect with --inference (an inference graph "
                                  "has no optimizer, dropout or accumulation)",
                                  flag);
      }
    }
  }
  if (a->cfg.retry_failed && !a->cfg.cache_dir[0]) {
    return ty_app_usage_error("compile", "--retry-failed has no effect without a compile cache "
                                         "(--cache-dir)");
  }
  if (a->plan_only && a->out) {
    return ty_app_usage_error("compile", "--out has no effect with --plan-only (nothing is "
                                         "compiled)");
  }
  if (!a->plan_only && (!a->out || !a->out[0])) {
    return ty_app_usage_error("compile", "--out FILE is required (or --plan-only)");
  }
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
  /* The train options' own checks (choices, combinations, levers). */
  ty_train_config_t check = a->cfg;
  snprintf(check.preset, sizeof(check.preset), "%s", "x");
  snprintf(check.data, sizeof(check.data), "%s", "x");
  check.model[0] = '\0';
  ty_status_t vs = ty_train_config_validate(&check);
  if (vs) {
    int rc = ty_app_usage_error("compile", "%s", ty_status_message(vs));
    ty_status_free(vs);
    return rc;
  }
  return TY_EXIT_OK;
}

/* The model configuration and the shapes, from --model/--preset and --data. */
static ty_status_t ty_compile_model(ty_compile_args_t *a, ty_model_config_t *mc) {
  int64_t data_vocab = 0;
  if (a->data) {
    ty_dataset_t *d = NULL;
    TY_RETURN_IF_ERROR(ty_dataset_open(a->data, "train", 0, &d));
    /* Given with --data, the sizes must be the data's: a train run on it
     * would need exactly those, and the artifact would not match it. */
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
                            "could not use this artifact); leave --%s out",
                            flag, (long long)given, (long long)have, a->data, flag);
    }
  }
  if (a->model) {
    TY_RETURN_IF_ERROR(ty_model_config_load(a->model, mc));
    if (data_vocab > mc->vocab_size) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "the data's vocabulary (%lld) is larger than the model's (%lld)",
                            (long long)data_vocab, (long long)mc->vocab_size);
    }
    return TY_OK;
  }
  /* The graph does not depend on it; the preset's config needs one. */
  int64_t eos = a->eos >= 0 ? a->eos : a->vocab - 1;
  return ty_model_preset(a->preset, a->vocab, eos, eos, mc);
}

/* The pre-flight memory plan of the graph, as text, checked against
 * --memory-limit or the device's memory. */
static ty_status_t ty_compile_plan(const ty_compile_args_t *a, ty_device_t *device,
                                   const ty_graph_t *graph, char **out_text) {
  *out_text = NULL;
  ty_preflight_t plan;
  ty_preflight_init(&plan);
  uint64_t limit = 0;
  char what[96] = "", size[32], *lines = NULL;
  ty_status_t s = ty_train_config_memory_limit(&a->cfg, &limit);
  if (!s && limit) {
    snprintf(what, sizeof(what), "--memory-limit %s", a->cfg.memory_limit);
  } else if (!s && ty_device_info(device)->memory_bytes) {
    limit = ty_device_info(device)->memory_bytes;
    snprintf(what, sizeof(what), "the memory of %s", ty_device_label(device));
  }
  if (!s) s = ty_preflight_add(&plan, graph, a->inference ? "inference" : "train step");
  if (!s) s = ty_preflight_format(&plan, "  ", &lines);
  if (!s) {
    ty_format_bytes(limit, size, sizeof(size));
    size_t cap = strlen(lines) + 256;
    *out_text = malloc(cap);
    if (!*out_text) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    } else {
      snprintf(*out_text, cap, "memory plan (device bytes; limit %s%s%s):\n%s",
               limit ? size : "none", limit ? ", " : "", what, lines);
    }
  }
  free(lines);
  if (!s) s = ty_preflight_check(&plan, limit, what);
  if (s) {
    free(*out_text);
    *out_text = NULL;
  }
  ty_preflight_deinit(&plan);
  return s;
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
  if (!s) s = ty_device_open(registry, a->backend, &device);
  if (!s) {
    /* Weights that cannot fit even in bf16 need no graph to be refused. */
    uint64_t limit = 0;
    s = ty_train_config_memory_limit(&a->cfg, &limit);
    char where[160];
    snprintf(where, sizeof(where), "%s%s%s", ty_device_label(device),
             limit ? " under --memory-limit " : "", limit ? a->cfg.memory_limit : "");
    if (!s) {
      s = ty_llm_check_memory(&mc, TY_DTYPE_BF16, 0,
                              limit ? limit : ty_device_info(device)->memory_bytes, where);
    }
  }
  if (!s) {
    ty_train_graph_kind_t kind = a->inference ? TY_TRAIN_GRAPH_INFERENCE : TY_TRAIN_GRAPH_STEP;
    s = ty_train_graph_build(&a->cfg, &mc, a->B, a->T, dtype, kind, &graph, &model);
  }
  /* The memory plan before anything is compiled or allocated. */
  char *plan_text = NULL;
  if (!s) s = ty_compile_plan(a, device, graph, &plan_text);
  if (!s && a->plan_only) {
    fputs(plan_text, stdout);
    free(plan_text);
    ty_llm_deinit(&model);
    ty_graph_destroy(graph);
    ty_device_close(device);
    ty_registry_destroy(registry);
    return TY_EXIT_OK;
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
                          "graph: %s, %s, batch %lld x %lld tokens, %s, %s%s\n"
                          "memory levers: %s\n%s\n%s\n"
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
                          ty_graph_levers(graph)[0] ? ty_graph_levers(graph) : "none",
                          plan_text ? plan_text : "",
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
  free(plan_text);
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
  a.eos = -1;
  ty_train_config_defaults(&a.cfg);
  int rc = ty_compile_parse(argc, argv, &a);
  if (rc < 0) return TY_EXIT_OK;
  if (rc != TY_EXIT_OK) return rc;
  return ty_compile_run(app, &a);
}
