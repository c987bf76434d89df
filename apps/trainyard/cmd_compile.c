/* `trainyard compile`: compiles the graph `trainyard train` would run (or an
 * inference graph) for a device, writes the backend's artifact and prints
 * its placement report. The report's simulated figures and the host wall
 * time of the compile are kept apart; an emulated device says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "files/out_paths.h"
#include "graph/runtime/compile_cache.h"
#include "graph/runtime/preflight.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/config.h"
#include "graph_args.h"
#include "train/train_graph.h"

static const char *const ty_compile_usage =
    "usage: trainyard compile --backend URI (--model HF_DIR | --preset NAME\n"
    "                         (--vocab-size N | --data DIR)) --batch-size B\n"
    "                         (--seq-len T | --data DIR) [--inference]\n"
    "                         [--optimizer adamw|sgd|adafactor] [--dtype D] [--dropout P]\n"
    "                         [--decay-all] [memory levers] [--memory-limit SIZE]\n"
    "                         (--out FILE | --plan-only [--plan-detail]) [--cache-dir DIR]\n"
    "                         [--retry-failed]\n"
    "                         [--dump-graph P] [--data-parallel N]\n"
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
    "  --max-positions N  a preset's positions instead of its own (longer rows)\n"
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
    "  --mlp-chunk N      each block's MLP over N tokens at a time (forward,\n"
    "                     backward and recompute): [B,N,I] intermediates instead\n"
    "                     of [B,T,I]; a last piece takes T mod N [0: off]\n"
    "  --fused-optimizer  updates in the backward pass; --clip 0 after it leaves out\n"
    "                     its norm pass (a graph property only with this lever)\n"
    "  --offload O        none or optimizer (devices with their own memory)\n"
    "                     The levers are recorded in the graph (its hash and the\n"
    "                     artifact's report); a backend that cannot honour one\n"
    "                     refuses it by name.\n"
    "  --data-parallel N  the step of one rank of an N-rank run (mpirun -np N\n"
    "                     trainyard train --artifact FILE; --batch-size is per\n"
    "                     rank): its gradients all-reduced inside the step; a run\n"
    "                     of another size is refused. Whole-step devices only\n"
    "                     (dataflow) [1]\n"
    "  --memory-limit S   refuse unless the memory plan fits in S (e.g. 24GiB;\n"
    "                     default: the device's memory)\n"
    "  --plan-only        print the memory plan of the graph and check it; compile\n"
    "                     nothing (no --out): the plan of a llama-7b step at any\n"
    "                     length takes a second on the host\n"
    "  --plan-detail      with --plan-only: also where each graph's activation peak\n"
    "                     is (the node) and the largest values live there\n"
    "  --out FILE         the artifact; the report goes to FILE.report.txt\n"
    "  --cache-dir DIR    on-disk compile cache ('none' for none; default\n"
    "                     $XDG_CACHE_HOME/trainyard or ~/.cache/trainyard)\n"
    "  --retry-failed     compile again even if the cache holds a failure\n"
    "  --dump-graph P     write the compiled graph as canonical text (P.txt) and\n"
    "                     Graphviz dot (P.dot), also when the compile fails\n"
    "  -h, --help         this help\n";

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
  ty_graph_args_t g; /* model, shapes, optimizer, dtype, dropout, cache, levers */
  const char *out;
  bool inference, plan_only, plan_detail;
  int64_t data_parallel; /* --data-parallel N: ranks of the run (0: not given) */
} ty_compile_args_t;

/* compile's own options: --inference, --out, --plan-only and the memory
 * levers of `trainyard train` (train_config.h), which only compile takes. */
static int ty_compile_own(void *user, const char *key, const char *value) {
  ty_compile_args_t *a = user;
  if (!strcmp(key, "inference")) {
    a->inference = true;
  } else if (!strcmp(key, "plan-only")) {
    a->plan_only = true;
  } else if (!strcmp(key, "plan-detail")) {
    a->plan_detail = true;
  } else if (!strcmp(key, "out")) {
    a->out = value;
  } else if (!strcmp(key, "data-parallel")) {
    char *end = NULL;
    long long n = value ? strtoll(value, &end, 10) : 0;
    if (!value || !*value || !end || *end || n < 1 || n > 65536) {
      return ty_app_usage_error("compile", "--data-parallel needs a number of ranks from 1 to "
                                           "65536, not '%s'",
                                value ? value : "");
    }
    a->data_parallel = n;
  } else if ((!strcmp(key, "beta1") && strcmp(a->g.cfg.optimizer, "adafactor")) ||
             (!strcmp(key, "clip") && !a->g.cfg.fused_optimizer)) {
    /* graph properties only after the option that makes them so: beta1
     * turns Adafactor's first moment on; clip 0 leaves out the fused
     * optimizer's norm pass */
    return ty_graph_args_refuse_runtime("compile", key);
  } else {
    ty_status_t s = ty_train_config_set(&a->g.cfg, key, value ? value : "true");
    if (s) {
      int rc = ty_app_usage_error("compile", "%s", ty_status_message(s));
      ty_status_free(s);
      return rc;
    }
  }
  return TY_EXIT_OK;
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
  ty_status_t s = ty_train_config_memory_limit(&a->g.cfg, &limit);
  if (!s && limit) {
    snprintf(what, sizeof(what), "--memory-limit %s", a->g.cfg.memory_limit);
  } else if (!s && ty_device_info(device)->memory_bytes) {
    limit = ty_device_info(device)->memory_bytes;
    snprintf(what, sizeof(what), "the memory of %s", ty_device_label(device));
  }
  if (!s) s = ty_preflight_add(&plan, graph, a->inference ? "inference" : "train step");
  if (!s) s = ty_preflight_format(&plan, "  ", &lines);
  if (!s && a->plan_detail) {
    char *detail = NULL, *both = NULL;
    s = ty_preflight_format_detail(&plan, "  ", &detail);
    if (!s && !(both = malloc(strlen(lines) + strlen(detail) + 1))) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (!s) {
      strcpy(both, lines);
      strcat(both, detail);
      free(lines);
      lines = both;
    }
    free(detail);
  }
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
  ty_dtype_t compute_dtype;
  ty_status_t s = ty_llm_precision_parse(a->g.cfg.dtype, &dtype, &compute_dtype);
  if (!s) s = ty_graph_args_model(&a->g, &mc);
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open_fallback("compile", registry, a->g.backend, a->g.fallback,
                                            &device, NULL);
  /* --data-parallel N: the fused step of a whole-step device with its
   * gradient all_reduce ops, for a run of N ranks (the lever records N). */
  if (!s && a->data_parallel > 1) {
    uint32_t major = 0, minor = 0;
    ty_backend_abi_version(ty_device_backend(device), &major, &minor);
    if (!ty_device_info(device)->whole_graphs_only || major != TY_ABI_MAJOR || minor < 5) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "--data-parallel %lld: --backend %s does not run whole steps (ABI 1.5), "
                         "so its data-parallel runs split the step at the all-reduce and need "
                         "no artifact for N ranks",
                         (long long)a->data_parallel, a->g.backend);
    }
    a->g.cfg.world = a->data_parallel;
    a->g.cfg.world_in_graph = true;
  }
  /* Weights no lever could fit need no graph to be refused. */
  ty_train_recipe_t recipe;
  if (!s) s = ty_train_config_recipe(&a->g.cfg, &recipe);
  if (!s) s = ty_train_graph_check_memory(&recipe, &mc, device);
  if (!s) {
    ty_train_graph_kind_t kind = a->inference ? TY_TRAIN_GRAPH_INFERENCE : TY_TRAIN_GRAPH_STEP;
    s = ty_train_graph_build(&recipe, &mc, a->g.B, a->g.T, dtype, kind, &graph, &model);
  }
  if (!s && a->g.cfg.dump_graph[0]) s = ty_app_write_graph_dump(graph, a->g.cfg.dump_graph);
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
    ty_session_options_t so = {.cache_dir = a->g.cfg.cache_dir,
                               .retry_failed = a->g.cfg.retry_failed,
                               .compile_only = true};
    ty_app_warn_cache_dir("compile", a->g.cfg.cache_dir);
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
                          mc.model_type, a->g.model ? a->g.model : a->g.preset, (long long)a->g.B,
                          (long long)a->g.T, a->g.cfg.dtype,
                          a->inference ? "no optimizer" : a->g.cfg.optimizer,
                          a->g.cfg.dropout > 0 ? ", dropout" : "",
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
  ty_graph_args_init(&a.g);
  static const char *const flags[] = {"inference",       "plan-only",       "fused-optimizer",
                                      "relative-step",   "scale-parameter", "warmup-init",
                                      "plan-detail",     NULL};
  static const char *const own[] = {"out",            "recompute",      "loss-chunk",
                                    "offload",        "memory-limit",   "clip-threshold",
                                    "decay-rate",     "adafactor-eps1", "adafactor-eps2",
                                    "beta1",          "clip",           "data-parallel",
                                    "mlp-chunk",      NULL};
  int rc = ty_graph_args_parse("compile", argc, argv, &a.g, flags, own, ty_compile_own, &a);
  if (rc < 0) {
    fputs(ty_compile_usage, stdout);
    return TY_EXIT_OK;
  }
  if (rc == TY_EXIT_OK) {
    rc = ty_graph_args_validate("compile", &a.g,
                                a.inference ? "with --inference (an inference graph has no "
                                              "optimizer, dropout or accumulation)"
                                            : NULL);
  }
  if (rc != TY_EXIT_OK) return rc;
  if (a.data_parallel > 1 && a.inference) {
    return ty_app_usage_error("compile", "--data-parallel with --inference: an inference graph "
                                         "has no gradients to all-reduce");
  }
  if (a.plan_only && a.out) {
    return ty_app_usage_error("compile", "--out has no effect with --plan-only (nothing is "
                                         "compiled)");
  }
  if (a.plan_detail && !a.plan_only) {
    return ty_app_usage_error("compile", "--plan-detail needs --plan-only (it details the "
                                         "memory plan it prints)");
  }
  if (!a.plan_only && (!a.out || !a.out[0])) {
    return ty_app_usage_error("compile", "--out FILE is required (or --plan-only)");
  }
  if (!a.g.T && !a.g.data) return ty_app_usage_error("compile", "--seq-len T is required");
  /* The artifact, its report and the graph dump may not overwrite --model
   * or --data. */
  char report[4200];
  snprintf(report, sizeof(report), "%s.report.txt", a.out ? a.out : "");
  const ty_out_path_t outs[] = {
      {.option = "--out", .path = a.out, .what = "artifact", .creates_parents = true},
      {.option = "--out", .path = report, .what = "report", .creates_parents = true}};
  ty_status_t s = TY_OK;
  for (size_t i = 0; i < 2 && !s && a.out; ++i) s = ty_graph_args_check_out(&a.g, &outs[i]);
  if (!s) s = ty_graph_args_check_dump(&a.g, a.g.cfg.dump_graph);
  if (s) return ty_app_fail("compile", s);
  return ty_compile_run(app, &a);
}
