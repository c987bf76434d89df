/* `trainyard check`: what a model's graphs need from a backend. It builds
 * the graphs `trainyard forward` and `generate` run (and, with --train, also
 * the graphs `trainyard train` runs with the same options), asks the backend's
 * graph_supports about every node, and prints one line per op and dtype:
 * how many nodes, in which graphs, and the plugin's verdict and reason.
 * With `--fallback URI2` it says which refused ops the fallback
 * device would run. Exit 0 when everything can run, 1 when something is
 * missing, 2 on usage errors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "graph/ir/lower.h"
#include "graph/runtime/support_report.h"
#include "graph/ir/train_step.h"
#include "graph_args.h"
#include "hal/dtype.h"
#include "train/train_graph.h"

static const char *const ty_check_usage =
    "usage: trainyard check --backend URI [--fallback URI2]\n"
    "                       (--model HF_DIR | --preset NAME\n"
    "                       (--vocab-size N | --data DIR)) [--train]\n"
    "                       [--batch-size B] [--seq-len T] [--dtype D]\n"
    "                       [--optimizer adamw|sgd] [--dropout P] [--grad-accum N]\n"
    "                       [--decay-all] [--dump-graph P] [--json]\n"
    "\n"
    "Builds the graphs a command would run on the device and asks the backend\n"
    "about every node: without --train, those of 'trainyard forward' (logits and\n"
    "loss, and with --grads every parameter's gradient) and 'trainyard generate'\n"
    "(steps over the paged KV cache: a prompt, then one token); with --train,\n"
    "those and the ones of 'trainyard train' with the same options (the train\n"
    "step, the optimizer step of --grad-accum > 1, the validation forward): a\n"
    "backend that trains but cannot generate (no paged_kv_write) fails it. Prints\n"
    "one line per op and dtype: nodes, the graphs that use it, and the backend's\n"
    "verdict with its reason. With --fallback URI2 it also says which refused ops\n"
    "the fallback device would run in a mixed run.\n"
    "\n"
    "  --backend URI      device to check, e.g. mine\n"
    "  --fallback URI2    device of the nodes --backend refuses, e.g. cpu (the old\n"
    "                     form, --backend URI?fallback=URI2, works too)\n"
    "  --model DIR        Hugging Face model folder (config.json)\n"
    "  --preset NAME      a model preset, with --vocab-size N (or --data DIR)\n"
    "  --vocab-size N     vocabulary of a preset\n"
    "  --max-positions N  a preset's positions instead of its own (longer rows)\n"
    "  --data DIR         vocabulary and sequence length from a dataset\n"
    "  --batch-size B     sequences per batch [8]\n"
    "  --seq-len T        tokens per sequence (and prompt length) [64 or the\n"
    "                     model's positions, whichever is smaller]\n"
    "  --train            also check the graphs of 'trainyard train'\n"
    "  --dtype D, --optimizer O, --dropout P, --grad-accum N, --decay-all\n"
    "                     as 'trainyard train' (they change the graphs)\n"
    "  --dump-graph P     write each graph as P-<graph>.txt and P-<graph>.dot\n"
    "  --json             print one JSON object\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit codes: 0 every op can run, 1 something is missing (or a runtime\n"
    "error), 2 usage error.\n";

#define TY_CHECK_MAX_GRAPHS 8 /* 3 of train, 4 of forward and generate */

typedef struct {
  ty_graph_args_t g;
  bool train, json;
} ty_check_args_t;

/* One op and dtype over every checked graph. */
typedef struct {
  const char *op;
  ty_dtype_t dtype;
  uint32_t nodes, refused;
  uint32_t graphs; /* bit per checked graph */
  char reason[160];
  char example[192];
  bool fallback_refused; /* the fallback refuses some of its refused nodes */
  char fallback_reason[160];
} ty_check_row_t;

typedef struct {
  const char *name;
  uint32_t nodes, refused, on_fallback;
} ty_check_graph_t;

typedef struct {
  ty_device_t *device, *fallback;
  ty_check_graph_t graphs[TY_CHECK_MAX_GRAPHS];
  uint32_t graph_count;
  ty_check_row_t *rows;
  uint32_t row_count, row_capacity;
  ty_lowered_graph_t *lowered[TY_CHECK_MAX_GRAPHS]; /* rows point into them */
} ty_check_t;

static int ty_check_own(void *user, const char *key, const char *value) {
  (void)value;
  ty_check_args_t *a = user;
  if (!strcmp(key, "train")) a->train = true;
  if (!strcmp(key, "json")) a->json = true;
  return TY_EXIT_OK;
}

static ty_check_row_t *ty_check_row(ty_check_t *c, const char *op, ty_dtype_t dtype) {
  for (uint32_t i = 0; i < c->row_count; ++i) {
    if (c->rows[i].dtype == dtype && strcmp(c->rows[i].op, op) == 0) return &c->rows[i];
  }
  if (c->row_count == c->row_capacity) {
    uint32_t cap = c->row_capacity ? 2 * c->row_capacity : 64;
    ty_check_row_t *grown = realloc(c->rows, cap * sizeof(*grown));
    if (!grown) return NULL;
    c->rows = grown;
    c->row_capacity = cap;
  }
  ty_check_row_t *r = &c->rows[c->row_count++];
  memset(r, 0, sizeof(*r));
  r->op = op;
  r->dtype = dtype;
  return r;
}

/* Lowers `graph` and folds the verdicts of the device (and the fallback,
 * for what the device refuses) into the rows. Takes `graph`. */
static ty_status_t ty_check_graph(ty_check_t *c, const ty_check_args_t *a, const char *name,
                                  ty_graph_t *graph) {
  uint32_t index = c->graph_count;
  ty_check_graph_t *cg = &c->graphs[c->graph_count++];
  cg->name = name;
  ty_status_t s = TY_OK;
  if (a->g.cfg.dump_graph[0]) {
    char prefix[TY_CFG_PATH_MAX + 32];
    snprintf(prefix, sizeof(prefix), "%s-%s", a->g.cfg.dump_graph, name);
    s = ty_graph_args_check_dump(&a->g, prefix); /* never over --model or --data */
    if (!s) s = ty_app_write_graph_dump(graph, prefix);
  }
  if (!s) s = ty_graph_lower(graph, &c->lowered[index]);
  ty_graph_destroy(graph);
  TY_RETURN_IF_ERROR(s);
  const ty_abi_graph_t *abi = ty_lowered_graph_abi(c->lowered[index]);
  ty_support_report_t *report = NULL, *fallback = NULL;
  s = ty_support_report_create(c->device, abi, &report);
  if (!s && c->fallback && report->unsupported_nodes) {
    s = ty_support_report_create(c->fallback, abi, &fallback);
  }
  cg->nodes = abi->node_count;
  for (uint32_t n = 0; n < abi->node_count && !s; ++n) {
    const ty_abi_node_t *node = &abi->nodes[n];
    ty_check_row_t *r = ty_check_row(c, node->op, ty_support_node_dtype(abi, node));
    if (!r) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    r->nodes++;
    r->graphs |= 1u << index;
    if (!r->example[0]) ty_support_node_shapes(abi, node, r->example, sizeof(r->example));
    if (report->verdicts[n].supported) continue;
    cg->refused++;
    if (!r->refused++) {
      snprintf(r->reason, sizeof(r->reason), "%s", report->verdicts[n].reason);
      ty_support_node_shapes(abi, node, r->example, sizeof(r->example));
    }
    if (!fallback) continue;
    if (fallback->verdicts[n].supported) {
      cg->on_fallback++;
    } else if (!r->fallback_refused) {
      r->fallback_refused = true;
      snprintf(r->fallback_reason, sizeof(r->fallback_reason), "%s",
               fallback->verdicts[n].reason);
    }
  }
  ty_support_report_destroy(report);
  ty_support_report_destroy(fallback);
  return s;
}

static ty_status_t ty_check_build(ty_check_t *c, ty_check_args_t *a,
                                  const ty_train_recipe_t *recipe,
                                  const ty_model_config_t *mc, ty_dtype_t dtype,
                                  ty_dtype_t compute_dtype) {
  ty_llm_t model;
  ty_graph_t *graph = NULL;
  ty_status_t s = TY_OK;
  int64_t B = a->g.B, T = a->g.T;
  if (a->train) {
    ty_graph_t *opt = NULL;
    s = ty_train_graph_build(recipe, mc, B, T, dtype, TY_TRAIN_GRAPH_STEP, &graph, &model);
    if (!s && a->g.cfg.grad_accum > 1) {
      ty_tensor_desc_t *descs = NULL;
      bool *decay = NULL;
      s = ty_train_graph_param_descs(recipe, graph, &model, &descs, &decay);
      if (!s) s = ty_graph_create(&opt);
      if (!s) {
        s = ty_graph_build_optimizer_step(
            opt, descs, decay, model.param_count,
            !strcmp(a->g.cfg.optimizer, "sgd") ? TY_OPTIMIZER_SGD : TY_OPTIMIZER_ADAMW, false);
      }
      free(descs);
      free(decay);
    }
    ty_llm_deinit(&model);
    if (!s) s = ty_check_graph(c, a, "train-step", graph);
    else ty_graph_destroy(graph);
    if (!s && opt) s = ty_check_graph(c, a, "optimizer-step", opt);
    else ty_graph_destroy(opt);
    if (!s) s = ty_train_graph_build(recipe, mc, B, T, dtype, TY_TRAIN_GRAPH_EVAL, &graph, &model);
    if (!s) s = ty_check_graph(c, a, "validation", graph);
    else ty_graph_destroy(graph);
    ty_llm_deinit(&model);
    /* A trained model is then run by forward and generate: --train adds
     * its graphs to theirs, it does not replace them. */
  }
  for (int grads = 0; grads < 2 && !s; ++grads) {
    s = ty_forward_graph_build(mc, B, T, dtype, compute_dtype, grads != 0, &graph, &model);
    if (!s) s = ty_check_graph(c, a, grads ? "forward-grads" : "forward", graph);
    else ty_graph_destroy(graph);
    ty_llm_deinit(&model);
  }
  /* generate: the engine's packed steps over the paged KV cache
   * (models/engine.h), a prompt of T tokens, then one token at a time. The
   * sample op is left out: without it the engine samples on the host. */
  int64_t context = T + 16 <= mc->max_positions ? T + 16 : mc->max_positions;
  int64_t blocks = (context + 15) / 16;
  for (int decode = 0; decode < 2 && !s; ++decode) {
    ty_llm_options_t options = {.batch = 1, .seq = decode ? 1 : T, .dtype = dtype,
                                .compute_dtype = compute_dtype, .logits_output = true,
                                .logits_at_index = true, .logit_rows = 1,
                                .kv_blocks = blocks, .kv_block_size = 16, .table_rows = 1,
                                .table_blocks = blocks};
    s = ty_graph_create(&graph);
    if (!s) s = ty_llm_build(graph, mc, &options, &model);
    if (!s) s = ty_check_graph(c, a, decode ? "generate-decode" : "generate-prefill", graph);
    else ty_graph_destroy(graph);
    ty_llm_deinit(&model);
  }
  return s;
}

static const char *ty_check_status(const ty_check_t *c, const ty_check_row_t *r) {
  if (!r->refused) return "supported";
  if (c->fallback && !r->fallback_refused) return "fallback";
  return r->refused == r->nodes ? "MISSING" : "PARTLY";
}

static void ty_check_graph_list(const ty_check_t *c, uint32_t mask, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (uint32_t g = 0; g < c->graph_count; ++g) {
    if (!(mask & (1u << g))) continue;
    int n = snprintf(out + used, cap - used, "%s%s", used ? "," : "", c->graphs[g].name);
    if (n < 0 || (size_t)n >= cap - used) break;
    used += (size_t)n;
  }
}

static uint32_t ty_check_missing(const ty_check_t *c) {
  uint32_t missing = 0;
  for (uint32_t i = 0; i < c->row_count; ++i) {
    const ty_check_row_t *r = &c->rows[i];
    missing += r->refused && (!c->fallback || r->fallback_refused);
  }
  return missing;
}

static void ty_check_print(const ty_check_t *c, const ty_check_args_t *a,
                           const ty_model_config_t *mc) {
  printf("check: %s (%s, backend %s %s)%s%s for %s %s, %s, batch %lld x %lld tokens\n",
         ty_device_uri(c->device), ty_device_label(c->device),
         ty_backend_name(ty_device_backend(c->device)),
         ty_backend_version(ty_device_backend(c->device)), c->fallback ? ", fallback " : "",
         c->fallback ? ty_device_label(c->fallback) : "", mc->model_type,
         a->g.model ? a->g.model : a->g.preset, a->g.cfg.dtype, (long long)a->g.B,
         (long long)a->g.T);
  printf("%-22s %-5s %5s  %-10s %s\n", "op", "dtype", "nodes", "status", "graphs");
  for (uint32_t i = 0; i < c->row_count; ++i) {
    const ty_check_row_t *r = &c->rows[i];
    char graphs[256];
    ty_check_graph_list(c, r->graphs, graphs, sizeof(graphs));
    printf("%-22s %-5s %5u  %-10s %s\n", r->op, ty_dtype_name(r->dtype), r->nodes,
           ty_check_status(c, r), graphs);
    if (!r->refused) continue;
    if (r->refused < r->nodes) printf("    %u of %u nodes refused\n", r->refused, r->nodes);
    printf("    %s (e.g. %s)\n", r->reason[0] ? r->reason : "(no reason given)", r->example);
    if (c->fallback) {
      if (r->fallback_refused) {
        printf("    the fallback %s refuses it too: %s\n", ty_device_label(c->fallback),
               r->fallback_reason);
      } else {
        printf("    runs on the fallback %s in a mixed run\n", ty_device_label(c->fallback));
      }
    }
  }
  for (uint32_t g = 0; g < c->graph_count; ++g) {
    const ty_check_graph_t *cg = &c->graphs[g];
    printf("graph %-17s %5u nodes, ", cg->name, cg->nodes);
    if (!cg->refused) {
      printf("all supported\n");
    } else if (c->fallback) {
      printf("%u refused (%u of them run on %s)\n", cg->refused, cg->on_fallback,
             ty_device_label(c->fallback));
    } else {
      printf("%u refused\n", cg->refused);
    }
  }
  /* ABI 1.4's collectives are optional: say which path a data-parallel
   * run of this backend takes. */
  if (ty_backend_has_collectives(ty_device_backend(c->device))) {
    printf("collectives: %s has its own (ABI 1.4 comm_* entries)\n",
           ty_backend_name(ty_device_backend(c->device)));
  } else {
    printf("collectives: none (optional, ABI 1.4 comm_*); data parallel stages gradients "
           "through host memory over MPI\n");
  }
  uint32_t missing = ty_check_missing(c), refused = 0;
  for (uint32_t i = 0; i < c->row_count; ++i) refused += c->rows[i].refused;
  if (!missing) {
    if (refused) {
      printf("%s can run these graphs mixed with %s (--backend %s --fallback %s; never for "
             "benchmarks)\n",
             ty_device_label(c->device), ty_device_label(c->fallback),
             ty_device_uri(c->device), ty_device_uri(c->fallback));
    } else {
      printf("%s can run every op these graphs need\n", ty_device_label(c->device));
    }
    return;
  }
  printf("missing on %s:", ty_device_label(c->device));
  uint32_t shown = 0;
  for (uint32_t i = 0; i < c->row_count; ++i) {
    const ty_check_row_t *r = &c->rows[i];
    if (!r->refused || (c->fallback && !r->fallback_refused)) continue;
    printf("%s %s (%s)", shown++ ? "," : "", r->op, ty_dtype_name(r->dtype));
  }
  printf("\n");
}

static json_t *ty_check_json(const ty_check_t *c) {
  json_t *root = json_object();
  json_object_set_new(root, "backend", json_string(ty_device_uri(c->device)));
  json_object_set_new(root, "fallback",
                      c->fallback ? json_string(ty_device_uri(c->fallback)) : json_null());
  json_t *graphs = json_array();
  for (uint32_t g = 0; g < c->graph_count; ++g) {
    json_array_append_new(graphs, json_pack("{s:s,s:i,s:i,s:i}", "name", c->graphs[g].name,
                                            "nodes", (json_int_t)c->graphs[g].nodes, "refused",
                                            (json_int_t)c->graphs[g].refused, "on_fallback",
                                            (json_int_t)c->graphs[g].on_fallback));
  }
  json_object_set_new(root, "graphs", graphs);
  json_t *ops = json_array();
  for (uint32_t i = 0; i < c->row_count; ++i) {
    const ty_check_row_t *r = &c->rows[i];
    json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:s,s:s,s:s}", "op", r->op, "dtype",
                          ty_dtype_name(r->dtype), "nodes", (json_int_t)r->nodes, "refused",
                          (json_int_t)r->refused, "status", ty_check_status(c, r), "reason",
                          r->reason, "example", r->example);
    json_t *in = json_array();
    for (uint32_t g = 0; g < c->graph_count; ++g) {
      if (r->graphs & (1u << g)) json_array_append_new(in, json_string(c->graphs[g].name));
    }
    json_object_set_new(o, "graphs", in);
    if (c->fallback && r->refused) {
      json_object_set_new(o, "fallback_reason", json_string(r->fallback_reason));
    }
    json_array_append_new(ops, o);
  }
  json_object_set_new(root, "ops", ops);
  json_object_set_new(root, "collectives",
                      json_boolean(ty_backend_has_collectives(ty_device_backend(c->device))));
  json_object_set_new(root, "missing", json_integer(ty_check_missing(c)));
  return root;
}

static int ty_check_run(ty_app_t *app, ty_check_args_t *a) {
  ty_model_config_t mc;
  ty_dtype_t dtype, compute_dtype;
  ty_registry_t *registry = NULL;
  ty_check_t c;
  memset(&c, 0, sizeof(c));
  ty_status_t s = ty_llm_precision_parse(a->g.cfg.dtype, &dtype, &compute_dtype);
  if (!s) s = ty_graph_args_model(&a->g, &mc);
  if (!s && !a->g.T) a->g.T = mc.max_positions < 64 ? mc.max_positions : 64;
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) {
    s = ty_app_device_open_fallback("check", registry, a->g.backend, a->g.fallback, &c.device,
                                    &c.fallback);
  }
  /* Sizes no device could hold are refused before any graph is built. */
  ty_train_recipe_t recipe;
  if (!s) s = ty_train_config_recipe(&a->g.cfg, &recipe);
  if (!s) s = ty_train_graph_check_memory(&recipe, &mc, c.device);
  if (!s) s = ty_check_build(&c, a, &recipe, &mc, dtype, compute_dtype);
  int rc = TY_EXIT_OK;
  if (!s && a->json) {
    json_t *root = ty_check_json(&c);
    char *text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
    json_decref(root);
    if (!text) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing JSON");
    } else {
      puts(text);
      free(text);
    }
  } else if (!s) {
    ty_check_print(&c, a, &mc);
  }
  if (s) {
    rc = ty_app_fail("check", s);
  } else if (ty_check_missing(&c)) {
    rc = TY_EXIT_RUNTIME;
  }
  for (uint32_t g = 0; g < c.graph_count; ++g) ty_lowered_graph_destroy(c.lowered[g]);
  free(c.rows);
  ty_device_close(c.fallback);
  ty_device_close(c.device);
  ty_registry_destroy(registry);
  return rc;
}

int ty_cmd_check(ty_app_t *app, int argc, char **argv) {
  ty_check_args_t a;
  memset(&a, 0, sizeof(a));
  ty_graph_args_init(&a.g);
  a.g.compiles = false;
  static const char *const flags[] = {"train", "json", NULL};
  int rc = ty_graph_args_parse("check", argc, argv, &a.g, flags, NULL, ty_check_own, &a);
  if (rc < 0) {
    fputs(ty_check_usage, stdout);
    return TY_EXIT_OK;
  }
  if (rc == TY_EXIT_OK) {
    rc = ty_graph_args_validate("check", &a.g,
                                a.train ? NULL
                                        : "without --train (the forward and generate graphs "
                                          "have no optimizer, dropout or accumulation)");
  }
  return rc == TY_EXIT_OK ? ty_check_run(app, &a) : rc;
}
