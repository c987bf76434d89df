/* `trainyard eval`: how well a model does the task it was fine-tuned for —
 * accuracy, first-token match and log-likelihood of expected completions
 * (eval.h), and perplexity over a token dataset. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "eval.h"
#include "eval_report.h"
#include "files/out_paths.h"
#include "hal/file.h"
#include "models/chat_template.h"
#include "models/checkpoint.h"
#include "models/llm.h"

static const char *const ty_eval_usage =
    "usage: trainyard eval --model DIR [--data FILE.jsonl] [--dataset DIR]\n"
    "                      [--choices] [--out REPORT.json] [--backend URI] [--dtype D]\n"
    "                      [--fallback URI2] [--batch-size N] [--deterministic]\n"
    "\n"
    "Scores the model in DIR (config.json + safetensors, tokenizer.json for\n"
    "text lines) on an evaluation set and/or a token dataset, prints a table\n"
    "and writes a JSON report (docs/formats.md, \"Evaluation sets\").\n"
    "\n"
    "Each line of --data holds {\"prompt\": ..., \"completion\": ...} (or\n"
    "\"prompt_ids\"/\"completion_ids\"), or chat {\"messages\": [...]} whose last\n"
    "assistant turn is the expectation, or with --choices {\"prompt\", \"choices\",\n"
    "\"answer\"}. Reported: exact match (greedy generation, both texts trimmed),\n"
    "first-token match, the mean per-token log-likelihood and perplexity of the\n"
    "expected completions (teacher-forced), and with --choices the accuracy of\n"
    "picking the most likely choice.\n"
    "\n"
    "  --model DIR       model folder (a training checkpoint works)\n"
    "  --data FILE       evaluation set, JSON lines\n"
    "  --dataset DIR     also the perplexity over a 'trainyard data prepare'\n"
    "                    folder (its val split, else its train split)\n"
    "  --choices         multiple choice: each line's \"choices\", or for\n"
    "                    completion lines the file's distinct completions\n"
    "                    (labels), scored by log-likelihood\n"
    "  --out FILE        the JSON report (written atomically)\n"
    "  --backend URI     device, e.g. cpu, cpu?threads=2 (default cpu)\n"
    "  --fallback URI2   runs what the device refuses on URI2, e.g. cpu (a mixed\n"
    "                    run for bring-up); the old form, --backend\n"
    "                    URI?fallback=URI2, works too\n"
    "  --dtype D         f32 (default), bf16, f16, f64, bf16-mixed, f16-mixed\n"
    "  --batch-size N    rows per forward run and sequences generated together\n"
    "                    (default 8)\n"
    "  --deterministic   batch-invariant kernels: every score is the same bits\n"
    "                    whatever --batch-size, and a completion's log-likelihood\n"
    "                    is bitwise the sum of the logprobs `trainyard serve\n"
    "                    --deterministic` reports for its tokens; refused by a\n"
    "                    backend that cannot promise it\n"
    "  -h, --help        this help\n"
    "\n"
    "Exit codes: 0 scored, 1 runtime error (a bad line: FILE:LINE: cause),\n"
    "2 usage error.\n";

typedef struct {
  const char *model, *data, *dataset, *out, *backend, *fallback, *dtype_text;
  ty_dtype_t dtype, compute_dtype;
  bool choices;
  bool deterministic; /* batch-invariant kernels (graph/runtime/session.h) */
  int64_t batch;
} ty_eval_args_t;

static ty_status_t ty_eval_run(ty_app_t *app, const ty_eval_args_t *a) {
  ty_model_config_t config;
  ty_tokenizer_t *tok = NULL;
  ty_chat_template_t *chat = NULL;
  ty_eval_set_t *set = NULL;
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL, *fallback = NULL;
  ty_eval_scorer_t *scorer = NULL;
  ty_eval_dataset_result_t dataset;
  char path[4096];
  bool exists = false;
  const ty_path_arg_t inputs[] = {{"--model", a->model}, {"--data", a->data},
                                  {"--dataset", a->dataset}};
  const ty_out_path_t report = {.option = "--out", .path = a->out, .what = "report"};
  ty_status_t s = a->out ? ty_out_path_check(&report, inputs, 3) : TY_OK;
  if (!s) s = ty_model_config_load(a->model, &config);
  if (!s) s = ty_llm_check_weights(&config, a->model);
  snprintf(path, sizeof(path), "%s/tokenizer.json", a->model);
  if (!s) s = ty_file_probe(path, &exists);
  if (!s && exists) s = ty_tokenizer_load_file(path, &tok);
  if (!s && a->data) {
    /* A chat template only when the folder has one: "messages" lines say
     * so themselves when they need it. */
    ty_status_t t = ty_chat_template_load(a->model, NULL, &chat);
    if (t && ty_status_code(t) != TY_CODE_NOT_FOUND) s = t;
    else ty_status_free(t);
  }
  ty_eval_set_options_t so = {.option = "--data", .choices = a->choices, .tokenizer = tok,
                              .chat_template = chat, .model_dir = a->model};
  if (!s && a->data) s = ty_eval_set_load(a->data, &config, &so, &set);
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) {
    s = ty_app_device_open_fallback("eval", registry, a->backend, a->fallback, &device,
                                    &fallback);
  }
  if (!s) {
    s = ty_llm_check_memory(&config, a->dtype, 0, ty_device_info(device)->memory_bytes,
                            ty_device_label(device));
  }
  ty_eval_scorer_options_t o = {.dtype = a->dtype, .compute_dtype = a->compute_dtype,
                                .batch = a->batch, .model_dir = a->model,
                                .fallback_device = fallback, .eos_id = config.eos_token_id,
                                .deterministic = a->deterministic};
  /* Without --data, a one-row scorer still loads the weights once. */
  ty_eval_set_t probe = {.path = "", .max_row = 2};
  if (!s) s = ty_eval_scorer_create(device, &config, set ? set : &probe, &o, &scorer);
  if (!s && a->deterministic) ty_app_note_deterministic("eval", device);
  if (!s && set) s = ty_eval_score(scorer, set, tok);
  if (!s && a->dataset) {
    s = ty_eval_dataset(device, &config, ty_eval_scorer_weights(scorer), &o, a->dataset,
                        &dataset);
  }
  ty_eval_report_meta_t meta = {a->model, device ? ty_device_label(device) : a->backend,
                                a->dtype_text, a->dataset};
  if (!s) ty_eval_print_table(stdout, &meta, set, a->dataset ? &dataset : NULL);
  if (!s && a->out) {
    json_t *root = ty_eval_report_json(&meta, set, a->dataset ? &dataset : NULL);
    char *text = root ? json_dumps(root, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
    s = text ? ty_file_write_atomic(a->out, text, strlen(text))
             : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    free(text);
    json_decref(root);
  }
  ty_eval_scorer_destroy(scorer);
  ty_eval_set_destroy(set);
  ty_device_close(fallback);
  ty_device_close(device);
  ty_registry_destroy(registry);
  ty_chat_template_destroy(chat);
  ty_tokenizer_destroy(tok);
  return s;
}

int ty_cmd_eval(ty_app_t *app, int argc, char **argv) {
  static const struct option long_options[] = {
      {"model", required_argument, NULL, 'm'},   {"data", required_argument, NULL, 'd'},
      {"dataset", required_argument, NULL, 'D'}, {"choices", no_argument, NULL, 'c'},
      {"out", required_argument, NULL, 'o'},     {"backend", required_argument, NULL, 'b'},
      {"dtype", required_argument, NULL, 't'},   {"batch-size", required_argument, NULL, 'B'},
      {"deterministic", no_argument, NULL, 'X'}, {"fallback", required_argument, NULL, 'F'},
      {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
  };
  ty_eval_args_t a = {.backend = "cpu", .dtype_text = "f32", .dtype = TY_DTYPE_F32,
                      .compute_dtype = TY_DTYPE_F32, .batch = 8};
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values("eval", argc, argv, "h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    switch (c) {
      case 'm': a.model = optarg; break;
      case 'd': a.data = optarg; break;
      case 'D': a.dataset = optarg; break;
      case 'c': a.choices = true; break;
      case 'X': a.deterministic = true; break;
      case 'o': a.out = optarg; break;
      case 'b': a.backend = optarg; break;
      case 'F': a.fallback = optarg; break;
      case 't': {
        ty_status_t s = ty_llm_precision_parse(optarg, &a.dtype, &a.compute_dtype);
        if (s) {
          ty_status_free(s);
          return ty_app_usage_error("eval", "--dtype must be f32, bf16, f16, f64, bf16-mixed "
                                    "or f16-mixed, not '%s'", optarg);
        }
        a.dtype_text = optarg;
        break;
      }
      case 'B': {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(optarg, &end, 10);
        if (errno || end == optarg || *end || v < 1 || v > 4096) {
          return ty_app_usage_error("eval", "--batch-size must be an integer in 1..4096, not "
                                    "'%s'", optarg);
        }
        a.batch = v;
        break;
      }
      case 'h': fputs(ty_eval_usage, stdout); return TY_EXIT_OK;
      default:
        if (ty_app_refuse_switch_value("eval", argv[optind - 1], long_options)) {
          return TY_EXIT_USAGE;
        }
        return ty_app_usage_error("eval", "unknown option or missing value '%s'",
                                  argv[optind - 1]);
    }
  }
  if (optind < argc) return ty_app_usage_error("eval", "unexpected argument '%s'", argv[optind]);
  if (!a.model) return ty_app_usage_error("eval", "--model is required");
  if (!a.data && !a.dataset) {
    return ty_app_usage_error("eval", "give --data FILE.jsonl, --dataset DIR or both");
  }
  if (a.choices && !a.data) {
    return ty_app_usage_error("eval", "--choices applies to the lines of --data");
  }
  if (ty_app_refuse_two_fallbacks("eval", a.backend, a.fallback) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  ty_status_t s = ty_eval_run(app, &a);
  return s ? ty_app_fail("eval", s) : TY_EXIT_OK;
}
