/* `trainyard compare --per-layer`: one batch (the first rows of the data,
 * the same on both sides) forward and backward on two backends from the
 * same weights, with every intermediate read back (conform/value_diff.h, as
 * `conform --bisect` does), summed up layer by layer: the embedding, each
 * block's norms, attention and MLP, the final norm, the head, the loss, then
 * every parameter gradient. The first row whose error exceeds the dtype's
 * bound is named. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "compare_layers.h"
#include "conform/tier_common.h"
#include "conform/value_diff.h"
#include "graph/ir/lower.h"
#include "graph/runtime/numerics.h"
#include "hal/dtype.h"
#include "models/dataset.h"
#include "models/llm.h"
#include "train/train_config.h"
#include "train/train_graph.h"

/* A row's bound on the relative RMS error (the square root of the value
 * error of conform/value_diff.h: squared error over the value's scale).
 * f32: two correct backends differ by rounding, relative ~1e-7 on a layer's
 * output and 1.1e-6 on a gradient summed over the batch (cpu against
 * opencl on the GPT-2 fixture); the bisect tests' planted gelu bug shows 2e-3.
 * 1e-5 sits between, above every correct backend. bf16 and f16 keep 8 and
 * 11 bits of mantissa: cpu against opencl differs by 8.6e-3 in bf16 and
 * 1.2e-3 in f16, so 1e-1 and 1e-2 (the bounds `conform --bisect` uses, as
 * NMSE 1e-2 and 1e-4). docs/design-notes.md has the figures. */
static double ty_layers_bound(ty_dtype_t dtype) {
  return dtype == TY_DTYPE_BF16 ? 1e-1 : dtype == TY_DTYPE_F16 ? 1e-2 : 1e-5;
}

typedef struct {
  char label[160];
  bool backward;
  uint32_t rep;   /* ABI value whose statistics the row shows (its last output) */
  double worst;   /* the largest value error of the row's values */
  char first_op[32]; /* the op of the row's first value over the bound ("" none) */
} ty_layers_row_t;

typedef struct {
  char backends[2][TY_CFG_WORD_MAX];
  char model[TY_CFG_PATH_MAX], data[TY_CFG_PATH_MAX];
  int64_t batch;
  ty_dtype_t dtype;
  double tolerance; /* 0: the dtype's bound */
  bool json;
} ty_layers_args_t;

static void ty_layers_usage(FILE *out) {
  fputs("usage: trainyard compare --per-layer --backends A,B --model DIR --data DIR\n"
        "                         [--batch-size N] [--dtype f32|bf16|f16] [--tolerance X]\n"
        "                         [--json]\n"
        "\n"
        "Runs one batch (the first N rows of the data's train split, the same on\n"
        "both) forward and backward on backends A and B from the model's weights,\n"
        "reads back every intermediate and prints, layer by layer (embedding, each\n"
        "block's norms, attention and MLP, the final norm, the head, the loss, then\n"
        "every parameter gradient), the RMS and max |x| on each side and their\n"
        "difference: the largest absolute difference of the layer's output and the\n"
        "largest relative RMS error of any value in the layer. The first layer whose\n"
        "error exceeds the dtype's bound (f32 1e-05, f16 1e-02, bf16 1e-01) is named.\n"
        "Exits 0 when none does, 1 when one does, 2 for bad input.\n"
        "\n"
        "  --backends A,B    two device URIs; A is the reference\n"
        "  --model DIR       a Hugging Face model folder (config.json, safetensors)\n"
        "  --data DIR        token shards ('trainyard data'); their seq_len is T\n"
        "  --batch-size N    rows of the batch [2]\n"
        "  --dtype D         f32, bf16 or f16 [f32]\n"
        "  --tolerance X     the bound on the relative RMS error instead of the dtype's\n"
        "  --json            the table as JSON on stdout\n",
        out);
}

static int ty_layers_parse(int argc, char **argv, ty_layers_args_t *a) {
  memset(a, 0, sizeof(*a));
  a->batch = 2;
  a->dtype = TY_DTYPE_F32;
  char backends[1024] = "";
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      ty_layers_usage(stdout);
      return -1;
    }
    if (!strcmp(arg, "--per-layer")) continue;
    if (!strcmp(arg, "--json")) {
      a->json = true;
      continue;
    }
    char key[64];
    const char *eq = strchr(arg, '='), *value = NULL;
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    if (strncmp(arg, "--", 2) || n >= sizeof(key)) {
      return ty_app_usage_error("compare", "--per-layer: unexpected argument '%s'", arg);
    }
    memcpy(key, arg, n);
    key[n] = '\0';
    bool known = !strcmp(key, "--backends") || !strcmp(key, "--model") ||
                 !strcmp(key, "--data") || !strcmp(key, "--batch-size") ||
                 !strcmp(key, "--dtype") || !strcmp(key, "--tolerance");
    if (!known) {
      return ty_app_usage_error("compare",
                                "--per-layer cannot honour %s: it runs one batch forward and "
                                "backward from the model's weights (options: --backends, "
                                "--model, --data, --batch-size, --dtype, --tolerance, --json); "
                                "drop %s, or drop --per-layer to compare training runs",
                                key, key);
    }
    if (eq) {
      value = eq + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return ty_app_usage_error("compare", "option '%s' needs a value", key);
    }
    char *end = NULL;
    if (!strcmp(key, "--backends")) {
      snprintf(backends, sizeof(backends), "%s", value);
    } else if (!strcmp(key, "--model")) {
      snprintf(a->model, sizeof(a->model), "%s", value);
    } else if (!strcmp(key, "--data")) {
      snprintf(a->data, sizeof(a->data), "%s", value);
    } else if (!strcmp(key, "--batch-size")) {
      long long v = strtoll(value, &end, 10);
      if (!*value || *end || v < 1 || v > 4096) {
        return ty_app_usage_error("compare", "--batch-size '%s' is not an integer from 1 to 4096",
                                  value);
      }
      a->batch = v;
    } else if (!strcmp(key, "--dtype")) {
      if (!strcmp(value, "f32")) a->dtype = TY_DTYPE_F32;
      else if (!strcmp(value, "bf16")) a->dtype = TY_DTYPE_BF16;
      else if (!strcmp(value, "f16")) a->dtype = TY_DTYPE_F16;
      else return ty_app_usage_error("compare", "--per-layer: --dtype '%s' is not f32, bf16 or f16", value);
    } else {
      double v = strtod(value, &end);
      if (!*value || *end || !(v > 0) || !isfinite(v)) {
        return ty_app_usage_error("compare", "--tolerance '%s' is not a number > 0", value);
      }
      a->tolerance = v;
    }
  }
  if (!backends[0]) return ty_app_usage_error("compare", "--per-layer needs --backends A,B");
  if (!a->model[0]) {
    return ty_app_usage_error("compare", "--per-layer needs --model DIR (a model folder)");
  }
  if (!a->data[0]) return ty_app_usage_error("compare", "--per-layer needs --data DIR (token shards)");
  ty_app_list_t list;
  int rc = ty_app_list_parse("compare", "--backends", backends, &list);
  if (rc != TY_EXIT_OK) return rc;
  if (list.count != 2) {
    rc = ty_app_usage_error("compare", "--per-layer compares exactly two backends (--backends "
                                       "A,B); got %zu", list.count);
  }
  for (size_t i = 0; i < list.count && !rc; ++i) {
    if (strchr(list.items[i], '*')) {
      rc = ty_app_usage_error("compare", "--per-layer runs one process per side; '%s' (URI*N) "
                                         "asks for a data-parallel run", list.items[i]);
    } else if (strlen(list.items[i]) >= sizeof(a->backends[i])) {
      rc = ty_app_usage_error("compare", "--backends: URI %zu is too long", i + 1);
    } else {
      snprintf(a->backends[i], sizeof(a->backends[i]), "%s", list.items[i]);
    }
  }
  ty_app_list_free(&list);
  return rc;
}

/* Whether the data can give the batch, before any graph is built. */
static ty_status_t ty_layers_check_data(const ty_dataset_t *ds, const char *dir,
                                        const ty_model_config_t *config, int64_t B) {
  if ((int64_t)ty_dataset_row_count(ds) < B) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--per-layer: %s holds %llu rows of training data, fewer than "
                          "--batch-size %lld; give a smaller --batch-size",
                          dir, (unsigned long long)ty_dataset_row_count(ds), (long long)B);
  }
  if ((int64_t)ty_dataset_vocab_size(ds) > config->vocab_size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--per-layer: the data in %s has a vocabulary of %u tokens and the "
                          "model's is %lld; make the data with the model's tokenizer",
                          dir, ty_dataset_vocab_size(ds), (long long)config->vocab_size);
  }
  return TY_OK;
}

/* The first `B` rows of the train split: tokens, next-token targets and
 * loss weights averaging the counted targets, bound on both runners. */
static ty_status_t ty_layers_bind_batch(const char *dir, const ty_model_config_t *config,
                                        int64_t B, ty_tier_runner_t *const *runners,
                                        int64_t *out_T) {
  ty_dataset_t *ds = NULL;
  TY_RETURN_IF_ERROR(ty_dataset_open(dir, "train", 0, &ds));
  int64_t T = ty_dataset_seq_len(ds);
  ty_status_t s = ty_layers_check_data(ds, dir, config, B);
  size_t n = (size_t)(B * T);
  uint32_t *row = malloc((size_t)(T + 1) * sizeof(*row));
  uint8_t *w = malloc((size_t)T);
  double *ids = malloc(n * sizeof(double)), *targets = malloc(n * sizeof(double)),
         *weights = malloc(n * sizeof(double));
  if (!s && (!row || !w || !ids || !targets || !weights)) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  double counted = 0;
  for (int64_t b = 0; b < B && !s; ++b) {
    s = ty_dataset_read_row(ds, (uint64_t)b, row, w);
    for (int64_t t = 0; t < T && !s; ++t) {
      ids[b * T + t] = row[t];
      targets[b * T + t] = w[t] ? (double)row[t + 1] : -1.0;
      weights[b * T + t] = w[t] ? 1.0 : 0.0;
      counted += w[t] ? 1.0 : 0.0;
    }
  }
  if (!s && counted == 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "--per-layer: the first %lld rows of %s "
                       "train on no token (every loss weight 0); give a larger --batch-size",
                       (long long)B, dir);
  }
  for (size_t i = 0; i < n && !s; ++i) weights[i] /= counted;
  for (int r = 0; r < 2 && !s; ++r) {
    s = ty_tier_runner_set(runners[r], "tokens", ids, (int64_t)n);
    if (!s) s = ty_tier_runner_set(runners[r], "targets", targets, (int64_t)n);
    if (!s) s = ty_tier_runner_set(runners[r], "loss_weights", weights, (int64_t)n);
  }
  free(row);
  free(w);
  free(ids);
  free(targets);
  free(weights);
  ty_dataset_close(ds);
  *out_T = T;
  return s;
}

static bool ty_layers_is_norm(const char *op) {
  return !strcmp(op, "layernorm") || !strcmp(op, "rmsnorm");
}

/* The row a forward node belongs to. */
static void ty_layers_forward_label(const ty_graph_node_t *node, bool after_blocks,
                                    bool after_logits, char *out, size_t cap) {
  if (node->region) {
    snprintf(out, cap, "layer %u %s%s", TY_REGION_LAYER(node->region),
             TY_REGION_PART(node->region) == TY_REGION_ATTENTION ? "attention" : "mlp",
             ty_layers_is_norm(node->op) ? " norm" : "");
  } else if (!after_blocks) {
    snprintf(out, cap, "embedding");
  } else if (after_logits) {
    snprintf(out, cap, "loss");
  } else {
    snprintf(out, cap, "%s", ty_layers_is_norm(node->op) ? "final norm" : "head");
  }
}

/* Adds a value to the row `label` (appended when new): it becomes the row's
 * shown value, and `op` (its producer) is kept when it is the row's first
 * over `bound`. */
static ty_status_t ty_layers_add(ty_layers_row_t **rows, uint32_t *count, const char *label,
                                 bool backward, uint32_t rep, double worst, const char *op,
                                 double bound) {
  ty_layers_row_t *row = NULL;
  for (uint32_t r = 0; r < *count && !row; ++r) {
    if ((*rows)[r].backward == backward && !strcmp((*rows)[r].label, label)) row = &(*rows)[r];
  }
  if (!row) {
    ty_layers_row_t *grown = realloc(*rows, (*count + 1) * sizeof(**rows));
    if (!grown) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    *rows = grown;
    row = &grown[(*count)++];
    memset(row, 0, sizeof(*row));
    snprintf(row->label, sizeof(row->label), "%s", label);
    row->backward = backward;
  }
  row->rep = rep;
  if (worst > row->worst || isnan(worst)) row->worst = worst;
  if (!(sqrt(worst) <= bound) && !row->first_op[0]) {
    snprintf(row->first_op, sizeof(row->first_op), "%s", op);
  }
  return TY_OK;
}

/* The rows, in execution order: forward nodes up to the loss by layer, then
 * each parameter gradient ("grad.<name>") in the order the backward makes
 * them. */
static ty_status_t ty_layers_rows(const ty_graph_t *g, const ty_lowered_graph_t *lowered,
                                  const ty_value_diff_t *errors, double bound,
                                  ty_layers_row_t **rows, uint32_t *count) {
  ty_value_id_t loss = 0, logits = 0;
  TY_RETURN_IF_ERROR(ty_graph_find(g, "loss", &loss));
  TY_RETURN_IF_ERROR(ty_graph_find(g, "logits", &logits));
  uint32_t loss_node = ty_graph_value(g, loss)->producer;
  uint32_t logits_node = ty_graph_value(g, logits)->producer;
  bool after_blocks = false;
  for (uint32_t n = 0; n < ty_graph_node_count(g); ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    if (node->region) after_blocks = true;
    char label[160];
    bool backward = n > loss_node;
    if (!backward) {
      ty_layers_forward_label(node, after_blocks, n > logits_node, label, sizeof(label));
    }
    for (uint32_t k = 0; k < node->output_count; ++k) {
      const ty_graph_value_t *v = ty_graph_value(g, node->outputs[k]);
      uint32_t x = ty_lowered_graph_index(lowered, node->outputs[k]);
      if (x == TY_VALUE_NONE || !errors[x].compared) continue;
      if (backward) {
        if (strncmp(v->desc.name, "grad.", 5)) continue;
        snprintf(label, sizeof(label), "%s", v->desc.name);
      } else if (k > 0) {
        continue; /* a norm's saved mean and rstd: its output 0 says it */
      }
      TY_RETURN_IF_ERROR(ty_layers_add(rows, count, label, backward, x,
                                       ty_value_diff_error(&errors[x]), node->op, bound));
    }
  }
  return TY_OK;
}

typedef struct {
  double rms, max_abs;
} ty_layers_stats_t;

static ty_status_t ty_layers_stats(ty_tier_runner_t *r, const char *name, ty_layers_stats_t *out) {
  double *x = NULL;
  int64_t n = 0;
  TY_RETURN_IF_ERROR(ty_tier_runner_get(r, name, &x, &n));
  double sum = 0, max = 0;
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i] * x[i];
    if (!(fabs(x[i]) <= max)) max = fabs(x[i]);
  }
  free(x);
  out->rms = n ? sqrt(sum / (double)n) : 0;
  out->max_abs = max;
  return TY_OK;
}

/* Prints (or returns as JSON) the table; *out_first is the first row over
 * the bound, or -1. */
static ty_status_t ty_layers_report(const ty_layers_args_t *a, const ty_abi_graph_t *abi,
                                    const ty_value_diff_t *errors, const ty_layers_row_t *rows,
                                    uint32_t count, ty_tier_runner_t *const *runners,
                                    double bound, json_t *table, int64_t *out_first) {
  *out_first = -1;
  if (!a->json) {
    printf("%-44s %11s %11s %11s %11s %11s %11s\n", "layer", "rms A", "max|A|", "rms B",
           "max|B|", "max |A-B|", "rel err");
  }
  bool backward_seen = false;
  for (uint32_t r = 0; r < count; ++r) {
    const ty_layers_row_t *row = &rows[r];
    ty_layers_stats_t sa, sb;
    const char *name = abi->values[row->rep].name;
    TY_RETURN_IF_ERROR(ty_layers_stats(runners[0], name, &sa));
    TY_RETURN_IF_ERROR(ty_layers_stats(runners[1], name, &sb));
    double rel = sqrt(row->worst);
    bool over = !(rel <= bound);
    if (over && *out_first < 0) *out_first = r;
    if (table) {
      json_t *o = json_pack("{s:s,s:s,s:s,s:{s:f,s:f},s:{s:f,s:f},s:f,s:b}", "layer", row->label,
                            "phase", row->backward ? "backward" : "forward", "value", name, "a",
                            "rms", sa.rms, "max_abs", sa.max_abs, "b", "rms", sb.rms, "max_abs",
                            sb.max_abs, "max_abs_diff", errors[row->rep].error.max_abs,
                            "exceeds", over);
      if (!o) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      /* NaN is no JSON number: a non-finite error is null. */
      json_object_set_new(o, "rel_err", isfinite(rel) ? json_real(rel) : json_null());
      json_array_append_new(table, o);
      continue;
    }
    if (row->backward && !backward_seen) {
      printf("-- parameter gradients (backward) --\n");
      backward_seen = true;
    }
    printf("%-44.44s %11.4e %11.4e %11.4e %11.4e %11.3e %11.3e%s%s\n", row->label, sa.rms,
           sa.max_abs, sb.rms, sb.max_abs, errors[row->rep].error.max_abs, rel,
           over ? "  > bound at " : "", over ? row->first_op : "");
  }
  return TY_OK;
}

static ty_status_t ty_layers_run(ty_app_t *app, const ty_layers_args_t *a, int *out_rc) {
  ty_model_config_t config;
  TY_RETURN_IF_ERROR(ty_model_config_load(a->model, &config));
  TY_RETURN_IF_ERROR(ty_llm_check_weights(&config, a->model));
  ty_dataset_t *probe = NULL;
  TY_RETURN_IF_ERROR(ty_dataset_open(a->data, "train", 0, &probe));
  int64_t T = ty_dataset_seq_len(probe);
  ty_status_t checked = ty_layers_check_data(probe, a->data, &config, a->batch);
  ty_dataset_close(probe);
  TY_RETURN_IF_ERROR(checked);
  ty_registry_t *registry = NULL;
  ty_device_t *dev[2] = {NULL, NULL};
  ty_graph_t *g = NULL;
  ty_llm_t model = {0};
  ty_lowered_graph_t *lowered = NULL;
  ty_tier_runner_t run[2];
  memset(run, 0, sizeof(run));
  ty_tier_runner_t *both[2] = {&run[0], &run[1]};
  ty_value_diff_t *errors = NULL;
  ty_layers_row_t *rows = NULL;
  uint32_t count = 0;
  json_t *table = NULL;
  ty_status_t s = ty_app_registry_create(app, &registry);
  for (int k = 0; k < 2 && !s; ++k) {
    s = ty_app_device_open("compare", registry, a->backends[k], &dev[k], NULL);
  }
  if (!s) s = ty_forward_graph_build(&config, a->batch, T, a->dtype, TY_DTYPE_INVALID, true, &g,
                                     &model);
  if (!s) s = ty_graph_expose_all(g);
  if (!s) s = ty_graph_lower(g, &lowered);
  for (int k = 0; k < 2 && !s; ++k) {
    s = ty_tier_runner_create(dev[k], g, &run[k]);
    if (s) s = ty_status_annotate(s, "%s", a->backends[k]);
    if (!s) s = ty_app_load_weights(&model, run[k].session, a->model, false, "compare");
  }
  int64_t bound_T = 0;
  if (!s) s = ty_layers_bind_batch(a->data, &config, a->batch, both, &bound_T);
  for (int k = 0; k < 2 && !s; ++k) {
    s = ty_tier_runner_run(&run[k]);
    if (s) s = ty_status_annotate(s, "running the batch on %s", a->backends[k]);
  }
  const ty_abi_graph_t *abi = lowered ? ty_lowered_graph_abi(lowered) : NULL;
  if (!s) {
    errors = calloc(abi->value_count ? abi->value_count : 1, sizeof(*errors));
    if (!errors) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  /* B against A: A is the reference. */
  if (!s) s = ty_value_diff_compare_all(abi, &run[1], &run[0], errors);
  if (!s) ty_value_diff_scales(abi, errors);
  double bound = a->tolerance > 0 ? a->tolerance : ty_layers_bound(a->dtype);
  if (!s) s = ty_layers_rows(g, lowered, errors, bound, &rows, &count);
  int64_t first = -1;
  if (!s && a->json) {
    table = json_array();
    if (!table) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s && !a->json) {
    printf("compare --per-layer: %s (A) against %s (B), %s, batch %lld x %lld (the first rows "
           "of %s), %s; bound on the relative RMS error %.0e\n",
           a->backends[0], a->backends[1], a->model, (long long)a->batch, (long long)T, a->data,
           ty_dtype_name(a->dtype), bound);
  }
  if (!s) s = ty_layers_report(a, abi, errors, rows, count, both, bound, table, &first);
  if (!s && a->json) {
    json_t *doc = json_pack("{s:[s,s],s:s,s:s,s:I,s:I,s:f,s:o}", "backends", a->backends[0],
                            a->backends[1], "model", a->model, "dtype", ty_dtype_name(a->dtype),
                            "batch", (json_int_t)a->batch, "seq_len", (json_int_t)T, "bound",
                            bound, "layers", table);
    table = NULL; /* the document owns it, or json_pack freed it */
    if (doc) {
      json_object_set_new(doc, "first_divergence",
                          first >= 0 ? json_pack("{s:s,s:s,s:s}", "layer", rows[first].label,
                                                 "phase", rows[first].backward ? "backward"
                                                                               : "forward",
                                                 "op", rows[first].first_op)
                                     : json_null());
    }
    char *text = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
    if (text) printf("%s\n", text);
    else s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    free(text);
    json_decref(doc);
  }
  if (!s && first >= 0) {
    fprintf(stderr, "trainyard compare: first divergence: %s (%s), first at its %s node: "
                    "relative RMS error %.3e > %.0e, %s against %s\n",
            rows[first].label, rows[first].backward ? "backward" : "forward",
            rows[first].first_op, sqrt(rows[first].worst), bound, a->backends[1],
            a->backends[0]);
    *out_rc = TY_EXIT_RUNTIME;
  } else if (!s) {
    fprintf(stderr, "trainyard compare: every layer within %.0e (%u rows)\n", bound, count);
  }
  json_decref(table);
  free(rows);
  free(errors);
  ty_tier_runner_destroy(&run[1]);
  ty_tier_runner_destroy(&run[0]);
  ty_lowered_graph_destroy(lowered);
  ty_graph_destroy(g);
  ty_llm_deinit(&model);
  for (int k = 1; k >= 0; --k) ty_device_close(dev[k]);
  ty_registry_destroy(registry);
  return s;
}

bool ty_compare_is_per_layer(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--per-layer")) return true;
  }
  return false;
}

int ty_compare_per_layer(ty_app_t *app, int argc, char **argv) {
  ty_layers_args_t a;
  int rc = ty_layers_parse(argc, argv, &a);
  if (rc < 0) return TY_EXIT_OK;
  if (rc) return rc;
  rc = TY_EXIT_OK;
  ty_status_t s = ty_layers_run(app, &a, &rc);
  if (s) {
    /* Bad input (a missing folder, unusable data) is the user's to fix. */
    ty_code_t code = ty_status_code(s);
    if (code == TY_CODE_INVALID_ARGUMENT || code == TY_CODE_NOT_FOUND) {
      rc = ty_app_usage_error("compare", "%s", ty_status_message(s));
      ty_status_free(s);
      return rc;
    }
    return ty_app_fail("compare", s);
  }
  return rc;
}
