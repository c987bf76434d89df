/* `trainyard forward`: logits, the mean next-token loss and (with --grads)
 * every parameter's gradient for a batch of token ids, written as
 * safetensors named as in the checkpoint — the cross-check against
 * transformers. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "check_numerics.h"
#include "files/out_paths.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/json_input.h"
#include "models/llm.h"
#include "models/safetensors.h"
#include "train/train_graph.h"

static const char *const ty_forward_usage =
    "usage: trainyard forward --model DIR --tokens FILE --out OUT.safetensors\n"
    "                         [--backend URI] [--fallback URI2] [--dtype D] [--grads]\n"
    "                         [--check-numerics] [--deterministic]\n"
    "\n"
    "Runs the model in DIR (Hugging Face config.json + safetensors) on a batch\n"
    "of token ids and writes OUT with:\n"
    "  logits       F32 [B,T,V]\n"
    "  loss         F32 []: mean next-token cross-entropy over the B*(T-1)\n"
    "               predicted positions (none when T = 1: one token per\n"
    "               row predicts nothing, so there is no loss, and --grads\n"
    "               is refused)\n"
    "  grad.<name>  F32, for every parameter, named and shaped as in the\n"
    "               checkpoint (with --grads)\n"
    "\n"
    "  --model DIR      model folder\n"
    "  --tokens FILE    JSON: a list of equal-length lists of token ids\n"
    "  --out FILE       output .safetensors (written atomically)\n"
    "  --backend URI    device, e.g. cpu, cpu?threads=2, opencl:0 (default cpu)\n"
    "  --fallback URI2  runs what the device refuses on URI2, e.g. cpu (a mixed\n"
    "                   run for bring-up; its partition goes to stderr); the old\n"
    "                   form, --backend URI?fallback=URI2, works too\n"
    "  --dtype D        compute and parameter dtype (default f32); bf16-mixed / f16-mixed\n"
    "                   keep f32 weights and run matmuls and attention in bf16/f16\n"
    "  --grads          also compute parameter gradients\n"
    "  --check-numerics keep and read back every intermediate value (forward, and\n"
    "                   the backward with --grads) and, at the first node whose\n"
    "                   output holds a NaN or an infinity, stop with exit 1 naming\n"
    "                   the node, its op, shape, layer and its inputs' min, max\n"
    "                   and NaN/Inf counts (nothing is written)\n"
    "  --deterministic  batch-invariant kernels: a row's logits are the same bits\n"
    "                   whatever else is in the batch (and as `generate`, `eval`\n"
    "                   and `serve` compute them with the flag); refused by a\n"
    "                   backend that cannot promise it\n"
    "  --allow-nonfinite  load weights that hold NaN or infinity (a loud warning\n"
    "                   instead of an error)\n"
    "  --dump-graph P   write the graph as canonical text (P.txt) and Graphviz\n"
    "                   dot (P.dot), e.g. for 'dot -Tsvg P.dot > P.svg'\n"
    "  -h, --help       this help\n";

/* --tokens: a batch of ids as JSON. Its logits alone are B*T*V floats, so
 * 64 MiB of ids is far past any batch that could run. */
static const ty_file_kind_t ty_tokens_file_kind = {
    .what = "--tokens file", .max_bytes = 64 * TY_MIB, .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT, .skip_bom = true};

/* Reads the token file: [[ids...], ...], all rows the same length. */
static ty_status_t ty_read_tokens(const char *path, int64_t vocab, int64_t **out_ids,
                                  int64_t *out_b, int64_t *out_t) {
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_tokens_file_kind, &text, &size));
  json_error_t err;
  json_t *root = json_loadb(text, size, 0, &err);
  free(text);
  if (!root) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--tokens %s: not valid JSON (line %d: %s)",
                          path, err.line, err.text);
  }
  ty_status_t s = TY_OK;
  size_t b = json_is_array(root) ? json_array_size(root) : 0;
  size_t t = b ? json_array_size(json_array_get(root, 0)) : 0;
  if (!b || !t) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "%s: expected a non-empty list of non-empty lists of token ids", path);
    goto done;
  }
  int64_t *ids = malloc(b * t * sizeof(int64_t));
  if (!ids) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s", path);
    goto done;
  }
  for (size_t i = 0; i < b && !s; ++i) {
    json_t *row = json_array_get(root, i);
    if (!json_is_array(row) || json_array_size(row) != t) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "%s: row %zu is not a list of %zu ids (rows must have equal length)",
                         path, i, t);
      break;
    }
    for (size_t j = 0; j < t && !s; ++j) {
      s = ty_json_token_id(json_array_get(row, j), vocab, &ids[i * t + j]);
      s = ty_status_annotate(s, "%s: row %zu, position %zu", path, i, j);
    }
  }
  if (s) {
    free(ids);
  } else {
    *out_ids = ids;
    *out_b = (int64_t)b;
    *out_t = (int64_t)t;
  }
done:
  json_decref(root);
  return s;
}

typedef struct {
  const char *model_dir, *tokens_path, *out_path, *backend, *fallback, *dump_graph;
  ty_dtype_t dtype;         /* parameters */
  ty_dtype_t compute_dtype; /* matmuls and attention (== dtype unless mixed) */
  bool grads, allow_nonfinite;
  bool check_numerics; /* every intermediate read back, the first NaN/Inf named */
  bool deterministic;  /* batch-invariant kernels (graph/runtime/session.h) */
} ty_forward_args_t;

/* Reads value `name` from the session as f32 into a new buffer. */
static ty_status_t ty_read_f32(ty_session_t *s, const char *name, float **out, uint64_t *count) {
  ty_tensor_desc_t d;
  TY_RETURN_IF_ERROR(ty_session_value_desc(s, name, &d));
  uint64_t n = (uint64_t)ty_tensor_desc_element_count(&d);
  size_t bytes = (size_t)n * ty_dtype_size(d.dtype);
  void *raw = malloc(bytes ? bytes : 1);
  float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
  ty_status_t st = (!raw || !f) ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                                : ty_session_read(s, name, raw, bytes);
  if (!st) st = ty_safetensors_convert(d.dtype, raw, TY_DTYPE_F32, f, (size_t)n);
  free(raw);
  if (st) {
    free(f);
    return st;
  }
  *out = f;
  *count = n;
  return TY_OK;
}

/* --check-numerics: the first non-finite node of the run, reported and
 * returned as an error (nothing is written then). */
static ty_status_t ty_forward_check(ty_session_t *session, const ty_graph_t *graph,
                                    uint32_t forward_nodes, const ty_model_config_t *config) {
  ty_numerics_finding_t f;
  TY_RETURN_IF_ERROR(ty_numerics_find(session, graph, forward_nodes, &f));
  uint32_t n = ty_graph_node_count(graph);
  if (f.found) {
    ty_check_numerics_print(stderr, "forward", config, &f, n, "the batch");
    return ty_check_numerics_status(config, &f, "the batch");
  }
  fprintf(stderr, "trainyard forward: check-numerics: every output of the %u nodes is finite\n",
          n);
  return TY_OK;
}

static ty_status_t ty_forward_run(ty_app_t *app, const ty_forward_args_t *a) {
  ty_model_config_t config;
  TY_RETURN_IF_ERROR(ty_model_config_load(a->model_dir, &config));
  TY_RETURN_IF_ERROR(ty_llm_check_weights(&config, a->model_dir));
  int64_t *ids = NULL, B = 0, T = 0;
  TY_RETURN_IF_ERROR(ty_read_tokens(a->tokens_path, config.vocab_size, &ids, &B, &T));
  /* A row of one token predicts nothing: its mean loss is 0/0, not 0. */
  bool has_loss = T >= 2;
  if (!has_loss && a->grads) {
    free(ids);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--grads: the rows of %s hold one token each, so no position is "
                          "predicted and there is no loss to differentiate; give rows of 2 or "
                          "more tokens",
                          a->tokens_path);
  }
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL, *fallback = NULL;
  ty_graph_t *graph = NULL;
  ty_session_t *session = NULL;
  ty_llm_t model = {0};
  ty_safetensors_writer_t *writer = NULL;
  int64_t *targets = malloc((size_t)(B * T) * sizeof(int64_t));
  void *weights = malloc((size_t)(B * T) * 8);
  float *logits = NULL, *loss = NULL;
  float **grads = NULL;
  ty_status_t s = (!targets || !weights)
                      ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                      : TY_OK;
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) {
    s = ty_app_device_open_fallback("forward", registry, a->backend, a->fallback, &device,
                                    &fallback);
  }
  if (!s) {
    s = ty_llm_check_memory(&config, a->dtype, a->grads ? ty_dtype_size(a->dtype) : 0,
                            ty_device_info(device)->memory_bytes, ty_device_label(device));
  }
  if (!s) s = ty_forward_graph_build(&config, B, T, a->dtype, a->compute_dtype, a->grads, &graph,
                                          &model);
  if (!s && a->dump_graph) s = ty_app_write_graph_dump(graph, a->dump_graph);
  /* Nodes up to the loss's are the forward; the backward follows. */
  uint32_t forward_nodes = graph ? ty_graph_node_count(graph) : 0;
  if (!s && a->grads) forward_nodes = ty_graph_value(graph, model.loss)->producer + 1;
  if (!s && a->check_numerics) s = ty_graph_expose_all(graph);
  ty_session_options_t so = {.fallback_device = fallback, .deterministic = a->deterministic};
  if (!s) s = ty_session_create(device, graph, &so, &session);
  if (!s && a->deterministic) ty_app_note_deterministic("forward", device);
  if (!s && ty_session_partition(session)) fputs(ty_session_partition(session), stderr);
  if (!s) s = ty_app_load_weights(&model, session, a->model_dir, a->allow_nonfinite, "forward");
  ty_dtype_t loss_dtype = TY_DTYPE_F32;
  if (!s) {
    ty_tensor_desc_t d;
    s = ty_session_value_desc(session, "loss_weights", &d);
    loss_dtype = d.dtype;
  }
  if (!s) {
    /* Next-token targets; the last position of each row predicts nothing. */
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        bool last = t == T - 1;
        targets[b * T + t] = last ? -1 : ids[b * T + t + 1];
        /* 1/N over the N = B*(T-1) predicted positions: the mean. */
        double w = last || T < 2 ? 0.0 : 1.0 / (double)(B * (T - 1));
        if (loss_dtype == TY_DTYPE_F64) {
          ((double *)weights)[b * T + t] = w;
        } else {
          ((float *)weights)[b * T + t] = (float)w;
        }
      }
    }
    int64_t bt[2] = {B, T};
    size_t n = (size_t)(B * T);
    s = ty_session_bind(session, "tokens", TY_DTYPE_I64, 2, bt, ids, n * sizeof(int64_t));
    if (!s) s = ty_session_bind(session, "targets", TY_DTYPE_I64, 2, bt, targets, n * sizeof(int64_t));
    if (!s) s = ty_session_bind(session, "loss_weights", loss_dtype, 2, bt, weights,
                                n * ty_dtype_size(loss_dtype));
  }
  if (!s) s = ty_session_run(session);
  if (!s && a->check_numerics) s = ty_forward_check(session, graph, forward_nodes, &config);
  uint64_t count = 0;
  if (!s) s = ty_read_f32(session, "logits", &logits, &count);
  if (!s && has_loss) s = ty_read_f32(session, "loss", &loss, &count);
  if (!s) s = ty_safetensors_writer_create(&writer);
  int64_t ld[3] = {B, T, config.vocab_size};
  if (!s) s = ty_safetensors_writer_add(writer, "logits", TY_DTYPE_F32, 3, ld, logits,
                                        (uint64_t)(B * T * config.vocab_size) * 4);
  if (!s && has_loss) s = ty_safetensors_writer_add(writer, "loss", TY_DTYPE_F32, 0, NULL, loss, 4);
  if (!s && a->grads) {
    grads = calloc(model.param_count, sizeof(float *));
    if (!grads) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    for (uint32_t i = 0; i < model.param_count && !s; ++i) {
      const ty_llm_param_t *p = &model.params[i];
      char name[TY_LLM_NAME_MAX + 8];
      snprintf(name, sizeof(name), "grad.%s", p->name);
      s = ty_read_f32(session, name, &grads[i], &count);
      if (!s) s = ty_safetensors_writer_add(writer, name, TY_DTYPE_F32, p->rank, p->dims,
                                            grads[i], count * 4);
    }
  }
  if (!s) s = ty_safetensors_writer_write_file(writer, a->out_path);
  if (!s && !has_loss) {
    fprintf(stderr,
            "trainyard forward: note: the rows hold one token each, so no position is "
            "predicted: %s holds the logits and no loss\n",
            a->out_path);
  }
  if (!s && app->verbosity) {
    char text[48] = "no loss (rows of one token)";
    if (has_loss) snprintf(text, sizeof(text), "loss %.6f", (double)loss[0]);
    fprintf(stderr, "trainyard forward: %s on %s: %s, wrote %s\n", config.model_type,
            ty_device_label(device), text, a->out_path);
  }
  ty_safetensors_writer_destroy(writer);
  for (uint32_t i = 0; grads && i < model.param_count; ++i) free(grads[i]);
  free(grads);
  free(logits);
  free(loss);
  ty_session_destroy(session);
  ty_llm_deinit(&model);
  ty_graph_destroy(graph);
  ty_device_close(fallback);
  ty_device_close(device);
  ty_registry_destroy(registry);
  free(targets);
  free(weights);
  free(ids);
  return s;
}

/* --out and the --dump-graph files may not overwrite --model or --tokens. */
static ty_status_t ty_forward_check_out(const ty_forward_args_t *a) {
  const ty_path_arg_t inputs[] = {{"--model", a->model_dir}, {"--tokens", a->tokens_path}};
  const size_t n = sizeof(inputs) / sizeof(inputs[0]);
  ty_out_path_t out = {.option = "--out", .path = a->out_path, .what = "safetensors file"};
  TY_RETURN_IF_ERROR(ty_out_path_check(&out, inputs, n));
  for (int k = 0; a->dump_graph && k < 2; ++k) {
    char path[4096];
    snprintf(path, sizeof(path), "%s%s", a->dump_graph, k ? ".dot" : ".txt");
    ty_out_path_t dump = {.option = "--dump-graph", .path = path, .what = "graph dump"};
    TY_RETURN_IF_ERROR(ty_out_path_check(&dump, inputs, n));
  }
  return TY_OK;
}

int ty_cmd_forward(ty_app_t *app, int argc, char **argv) {
  static const struct option long_options[] = {
      {"model", required_argument, NULL, 'm'},  {"tokens", required_argument, NULL, 't'},
      {"out", required_argument, NULL, 'o'},    {"backend", required_argument, NULL, 'b'},
      {"dtype", required_argument, NULL, 'd'},  {"grads", no_argument, NULL, 'g'},
      {"fallback", required_argument, NULL, 'F'},
      {"dump-graph", required_argument, NULL, 'G'},
      {"allow-nonfinite", no_argument, NULL, 'N'},
      {"check-numerics", optional_argument, NULL, 'C'},
      {"deterministic", no_argument, NULL, 'D'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0},
  };
  ty_forward_args_t a = {.backend = "cpu", .dtype = TY_DTYPE_F32, .compute_dtype = TY_DTYPE_F32};
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values("forward", argc, argv, "h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    switch (c) {
      case 'm': a.model_dir = optarg; break;
      case 't': a.tokens_path = optarg; break;
      case 'o': a.out_path = optarg; break;
      case 'b': a.backend = optarg; break;
      case 'F': a.fallback = optarg; break;
      case 'g': a.grads = true; break;
      case 'G': a.dump_graph = optarg; break;
      case 'N': a.allow_nonfinite = true; break;
      case 'D': a.deterministic = true; break;
      case 'C': {
        /* one batch: every:N means the same check as the plain flag */
        int64_t every = 0;
        ty_status_t s = ty_check_numerics_parse(optarg, &every);
        if (s) {
          int rc = ty_app_usage_error("forward", "%s", ty_status_message(s));
          ty_status_free(s);
          return rc;
        }
        a.check_numerics = true;
        break;
      }
      case 'd': {
        ty_status_t s = ty_llm_precision_parse(optarg, &a.dtype, &a.compute_dtype);
        if (s) {
          ty_status_free(s);
          return ty_app_usage_error("forward", "--dtype must be f32, bf16, f16, f64, bf16-mixed "
                                    "or f16-mixed, not '%s'",
                                    optarg);
        }
        break;
      }
      case 'h': fputs(ty_forward_usage, stdout); return TY_EXIT_OK;
      default:
        if (ty_app_refuse_switch_value("forward", argv[optind - 1], long_options)) {
          return TY_EXIT_USAGE;
        }
        return ty_app_usage_error("forward", "unknown option or missing value '%s'",
                                  argv[optind - 1]);
    }
  }
  if (optind < argc) return ty_app_usage_error("forward", "unexpected argument '%s'", argv[optind]);
  if (!a.model_dir || !a.tokens_path || !a.out_path) {
    return ty_app_usage_error("forward", "--model, --tokens and --out are required");
  }
  if (ty_app_refuse_two_fallbacks("forward", a.backend, a.fallback) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  ty_status_t s = ty_forward_check_out(&a);
  if (!s) s = ty_forward_run(app, &a);
  return s ? ty_app_fail("forward", s) : TY_EXIT_OK;
}
