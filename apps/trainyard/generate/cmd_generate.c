/* `trainyard generate`: continues a prompt with the generation engine
 * (models/generator.h: KV-cache decoding, greedy or sampled) and prints the
 * new tokens, as text when the model folder has a tokenizer.json; or, with
 * --input, a JSONL file of prompts through the batching engine
 * (generate_batch.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "check_numerics.h"
#include "generate.h"
#include "hal/file.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "models/engine.h"
#include "models/generator.h"
#include "models/llm.h"
#include "models/text_stream.h"
#include "models/tokenizer.h"

static const char *const ty_generate_usage =
    "usage: trainyard generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "                          --max-new-tokens N [--greedy | --temperature T\n"
    "                          --top-k K --top-p P --seed S] [--backend URI]\n"
    "                          [--dtype D] [--json] [--check-numerics] [--deterministic]\n"
    "                          [--speculate N]\n"
    "       trainyard generate --model DIR --input PROMPTS.jsonl --output OUT.jsonl\n"
    "                          [--max-new-tokens N] [--max-batch N] [--ctx N]\n"
    "                          [--prefill-chunk N] [--prefill-budget N] [sampling,\n"
    "                          --backend, --dtype, --deterministic, --speculate N]\n"
    "\n"
    "Continues a prompt with the model in DIR. Greedy unless --temperature is\n"
    "given. Prints the text (when DIR holds tokenizer.json) and the speed; with\n"
    "--json prints one object {\"ids\": [new token ids], \"text\": \"...\"}.\n"
    "\n"
    "With --input, every line of PROMPTS.jsonl is a prompt, {\"prompt\": TEXT} or\n"
    "{\"prompt_ids\": [...]}, optionally with \"id\", \"max_new_tokens\",\n"
    "\"temperature\" (0: greedy), \"top_k\", \"top_p\", \"seed\" and \"stop\" (strings);\n"
    "they run through the batching engine of `trainyard serve`, up to --max-batch\n"
    "at once, and OUT.jsonl gets one line per prompt, in order: {\"index\", \"id\",\n"
    "\"prompt_tokens\", \"ids\", \"text\", \"finish_reason\"}. A line without a seed\n"
    "uses --seed + its index.\n"
    "\n"
    "  --model DIR          Hugging Face model folder\n"
    "  --prompt TEXT        prompt text (needs DIR/tokenizer.json)\n"
    "  --prompt-ids LIST    prompt token ids, comma-separated\n"
    "  --input FILE         JSONL prompts (instead of --prompt/--prompt-ids)\n"
    "  --output FILE        JSONL results of --input (written atomically)\n"
    "  --max-batch N        --input: sequences generated together (default 8)\n"
    "  --ctx N              --input: tokens per sequence (default: the longest line's)\n"
    "  --prefill-chunk N    --input: prompt tokens per prefill run (default 64)\n"
    "  --prefill-budget N   --input: prompt tokens a step may prefill while others\n"
    "                       decode, in whole chunks (default: one chunk; more\n"
    "                       starts a file of many prompts in fewer steps)\n"
    "  --max-new-tokens N   tokens to generate (>= 1; with --input, the default of\n"
    "                       lines without max_new_tokens)\n"
    "  --greedy             pick the most likely token (the default)\n"
    "  --temperature T      sample from softmax(logits / T), T > 0\n"
    "  --top-k K            sample among the K most likely tokens (0: all)\n"
    "  --top-p P            sample among the smallest set with mass >= P\n"
    "  --seed S             sampling seed (default 0)\n"
    "  --stop-at-eos        stop at the model's eos_token_id\n"
    "  --allow-nonfinite    load weights that hold NaN or infinity (a loud warning\n"
    "                       instead of an error)\n"
    "  --backend URI        device (default cpu)\n"
    "  --dtype D            f32, bf16, f16 or f64, or bf16-mixed / f16-mixed (f32\n"
    "                       weights, matmuls and attention in bf16/f16); default f32\n"
    "  --json               print JSON\n"
    "  --check-numerics     keep and read back every intermediate value of every\n"
    "                       prefill and decode run and, at the first node whose\n"
    "                       output holds a NaN or an infinity, stop with exit 1\n"
    "                       naming it (op, shape, layer) and its inputs' min, max\n"
    "                       and NaN/Inf counts (=every:N is taken as for train and\n"
    "                       forward; generation checks every run)\n"
    "  --deterministic      batch-invariant kernels: a prompt's tokens are the same\n"
    "                       whatever else shares the batch (--input lines equal\n"
    "                       each line alone) and as `serve --deterministic` gives\n"
    "                       them; refused by a backend that cannot promise it\n"
    "  --speculate N        speculative decoding by prompt lookup: when the last\n"
    "                       tokens occurred earlier, draft up to N (1..16) tokens\n"
    "                       that followed them and check them all in one step;\n"
    "                       the tokens made do not change (default 0: off)\n"
    "  -h, --help           this help\n";

typedef struct {
  const char *model_dir, *prompt, *backend, *input, *output;
  int64_t max_batch, ctx, chunk, prefill_budget;
  int64_t *prompt_ids; /* --prompt-ids, parsed */
  size_t prompt_id_count;
  int64_t max_new;
  bool json, stop_at_eos, allow_nonfinite;
  bool check_numerics; /* every run's intermediates read back */
  bool deterministic;  /* batch-invariant kernels (ty_engine_options_t) */
  int64_t speculate;   /* --speculate: drafted tokens per step, 0: off */
  ty_sampling_t sampling;
  ty_dtype_t dtype;         /* parameters */
  ty_dtype_t compute_dtype; /* matmuls and attention (== dtype unless mixed) */
} ty_generate_args_t;

static void ty_print_json_string(const char *s, size_t n) {
  putchar('"');
  for (size_t i = 0; i < n; ++i) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c == '\t') printf("\\t");
    else if (c == '\r') printf("\\r");
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}

/* The model's tokenizer.json, when the folder has one. */
static ty_status_t ty_generate_tokenizer(const ty_generate_args_t *a, ty_tokenizer_t **out) {
  *out = NULL;
  char path[4096];
  snprintf(path, sizeof(path), "%s/tokenizer.json", a->model_dir);
  bool exists = false;
  TY_RETURN_IF_ERROR(ty_file_probe(path, &exists));
  /* One that is there but cannot be read is an error, not "no tokenizer". */
  if (exists) return ty_tokenizer_load_file(path, out);
  if (a->prompt) {
    return ty_status_make(TY_CODE_NOT_FOUND,
                          "--prompt needs %s; pass --prompt-ids instead, or add the model's "
                          "tokenizer.json",
                          path);
  }
  return TY_OK;
}

/* The prompt's ids: --prompt encoded, or --prompt-ids. */
static ty_status_t ty_generate_prompt(const ty_generate_args_t *a, const ty_tokenizer_t *tok,
                                      int64_t **out, int64_t *out_count) {
  if (!a->prompt) {
    *out = malloc(a->prompt_id_count * sizeof(int64_t));
    if (!*out) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    memcpy(*out, a->prompt_ids, a->prompt_id_count * sizeof(int64_t));
    *out_count = (int64_t)a->prompt_id_count;
    return TY_OK;
  }
  uint32_t *ids = NULL;
  size_t n = 0;
  TY_RETURN_IF_ERROR(ty_tokenizer_encode(tok, a->prompt, strlen(a->prompt), 0, &ids, &n));
  ty_status_t s = n ? TY_OK
                    : ty_status_make(TY_CODE_INVALID_ARGUMENT, "the prompt encodes to no tokens");
  *out = s ? NULL : malloc(n * sizeof(int64_t));
  if (!s && !*out) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; !s && i < n; ++i) (*out)[i] = ids[i];
  *out_count = (int64_t)n;
  free(ids);
  return s;
}

static ty_status_t ty_generate_print(const ty_generate_args_t *a, const ty_tokenizer_t *tok,
                                     const ty_generation_t *gen) {
  char *text = NULL;
  size_t text_size = 0;
  if (tok) {
    uint32_t *ids = malloc((size_t)(gen->count ? gen->count : 1) * sizeof(uint32_t));
    if (!ids) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    for (int64_t i = 0; i < gen->count; ++i) ids[i] = (uint32_t)gen->ids[i];
    ty_status_t s = ty_tokenizer_decode(tok, ids, (size_t)gen->count, 0, &text, &text_size);
    free(ids);
    TY_RETURN_IF_ERROR(s);
  }
  if (a->json && text) {
    /* JSON text is UTF-8: bytes that form no character become U+FFFD. */
    char *clean = NULL;
    size_t clean_size = 0;
    ty_status_t s = ty_utf8_sanitize(text, text_size, false, &clean, &clean_size, NULL);
    if (s) {
      free(text);
      return s;
    }
    free(text);
    text = clean;
    text_size = clean_size;
  }
  if (a->json) {
    printf("{\"ids\": [");
    for (int64_t i = 0; i < gen->count; ++i) {
      printf("%s%lld", i ? ", " : "", (long long)gen->ids[i]);
    }
    printf("], \"text\": ");
    ty_print_json_string(text ? text : "", text_size);
    printf("}\n");
  } else if (text) {
    if (a->prompt) fwrite(a->prompt, 1, strlen(a->prompt), stdout);
    fwrite(text, 1, text_size, stdout);
    printf("\n");
  } else {
    for (int64_t i = 0; i < gen->count; ++i) {
      printf("%s%lld", i ? " " : "", (long long)gen->ids[i]);
    }
    printf("\n");
  }
  free(text);
  return TY_OK;
}

static ty_status_t ty_generate_run(ty_app_t *app, const ty_generate_args_t *a) {
  ty_model_config_t config;
  TY_RETURN_IF_ERROR(ty_model_config_load(a->model_dir, &config));
  if (a->stop_at_eos && config.eos_token_id < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--stop-at-eos: %s/config.json has no eos_token_id, so there is no "
                          "token to stop at",
                          a->model_dir);
  }
  /* The checkpoint against the config before any graph is built. */
  TY_RETURN_IF_ERROR(ty_llm_check_weights(&config, a->model_dir));
  ty_tokenizer_t *tok = NULL;
  int64_t *prompt = NULL, P = 0;
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  ty_generator_t *gen = NULL;
  ty_generation_t out = {.ids = calloc((size_t)a->max_new, sizeof(int64_t))};
  ty_status_t s = out.ids ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = ty_generate_tokenizer(a, &tok);
  if (!s) s = ty_generate_prompt(a, tok, &prompt, &P);
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open("generate", registry, a->backend, &device, NULL);
  if (!s) {
    s = ty_llm_check_memory(&config, a->dtype, 0, ty_device_info(device)->memory_bytes,
                            ty_device_label(device));
  }
  if (!s) {
    ty_generator_options_t o = {.dtype = a->dtype, .compute_dtype = a->compute_dtype,
                                .prompt_len = P, .max_new = a->max_new,
                                .check_numerics = a->check_numerics,
                                .deterministic = a->deterministic,
                                .speculate = a->speculate};
    s = ty_generator_create(device, &config, &o, &gen);
    if (!s && a->deterministic) ty_app_note_deterministic("generate", device);
    if (s && ty_status_code(s) == TY_CODE_INVALID_ARGUMENT && P + a->max_new > config.max_positions) {
      s = ty_status_annotate(s, "--max-new-tokens %lld", (long long)a->max_new);
    }
  }
  if (!s) {
    ty_llm_load_options_t load = ty_app_load_options(a->allow_nonfinite);
    ty_llm_load_report_t report;
    s = ty_generator_load_weights(gen, a->model_dir, &load, &report);
    if (!s) ty_app_warn_nonfinite("generate", a->model_dir, &report);
  }
  if (!s) {
    s = ty_generator_run(gen, prompt, &a->sampling, a->stop_at_eos ? config.eos_token_id : -1,
                         &out);
    uint32_t nodes = 0;
    const ty_numerics_finding_t *f = s ? ty_generator_numerics_finding(gen, &nodes) : NULL;
    if (f) {
      ty_status_free(s);
      ty_check_numerics_print(stderr, "generate", &config, f, nodes, "generation");
      s = ty_check_numerics_status(&config, f, "generation");
    } else if (s && !a->prompt) {
      s = ty_status_annotate(s, "--prompt-ids");
    }
  }
  if (!s) s = ty_generate_print(a, tok, &out);
  if (!s) {
    fprintf(stderr,
            "trainyard generate: %lld prompt + %lld new tokens on %s (%s, %s); prefill %.1f "
            "ms, decode %.1f tok/s\n",
            (long long)P, (long long)out.count, ty_device_label(device),
            ty_dtype_name(a->dtype), a->sampling.greedy ? "greedy" : "sampled",
            out.prefill_seconds * 1e3,
            out.count > 1 && out.decode_seconds > 0 ? (out.count - 1) / out.decode_seconds : 0.0);
  }
  ty_generator_destroy(gen);
  ty_device_close(device);
  ty_registry_destroy(registry);
  ty_tokenizer_destroy(tok);
  free(out.ids);
  free(prompt);
  return s;
}

/* Parses the command line into *a. TY_EXIT_OK, a usage error's exit code,
 * or -1 after --help. */
static int ty_generate_parse(int argc, char **argv, ty_generate_args_t *a) {
  enum { O_PROMPT = 1000, O_IDS, O_MAX, O_GREEDY, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_BACKEND,
         O_DTYPE, O_JSON, O_EOS, O_NONFINITE, O_INPUT, O_OUTPUT, O_BATCH, O_CTX, O_CHUNK, O_BUDGET,
         O_CHECK, O_DETERMINISTIC, O_SPECULATE };
  static const struct option long_options[] = {
      {"model", required_argument, NULL, 'm'},
      {"prompt", required_argument, NULL, O_PROMPT},
      {"prompt-ids", required_argument, NULL, O_IDS},
      {"max-new-tokens", required_argument, NULL, O_MAX},
      {"greedy", no_argument, NULL, O_GREEDY},
      {"temperature", required_argument, NULL, O_TEMP},
      {"top-k", required_argument, NULL, O_TOPK},
      {"top-p", required_argument, NULL, O_TOPP},
      {"seed", required_argument, NULL, O_SEED},
      {"stop-at-eos", no_argument, NULL, O_EOS},
      {"backend", required_argument, NULL, O_BACKEND},
      {"dtype", required_argument, NULL, O_DTYPE},
      {"json", no_argument, NULL, O_JSON},
      {"allow-nonfinite", no_argument, NULL, O_NONFINITE},
      {"check-numerics", optional_argument, NULL, O_CHECK},
      {"input", required_argument, NULL, O_INPUT},
      {"output", required_argument, NULL, O_OUTPUT},
      {"max-batch", required_argument, NULL, O_BATCH},
      {"ctx", required_argument, NULL, O_CTX},
      {"prefill-chunk", required_argument, NULL, O_CHUNK},
      {"prefill-budget", required_argument, NULL, O_BUDGET},
      {"deterministic", no_argument, NULL, O_DETERMINISTIC},
      {"speculate", required_argument, NULL, O_SPECULATE},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *cmd = "generate";
  bool sampling_flag = false, greedy_flag = false, seed_flag = false;
  ty_sampling_t *smp = &a->sampling;
  opterr = 0;
  optind = 1;
  int c;
  char *end;
  if (ty_app_refuse_empty_values(cmd, argc, argv, ":h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    switch (c) {
      case 'm': a->model_dir = optarg; break;
      case O_PROMPT: a->prompt = optarg; break;
      case O_IDS: {
        free(a->prompt_ids);
        a->prompt_ids = NULL;
        int rc = ty_app_list_parse_ids(cmd, "--prompt-ids", optarg, &a->prompt_ids,
                                       &a->prompt_id_count);
        if (rc != TY_EXIT_OK) return rc;
        break;
      }
      case O_MAX:
        a->max_new = strtoll(optarg, &end, 10);
        if (*end || end == optarg || a->max_new < 1) {
          return ty_app_usage_error(cmd, "--max-new-tokens must be an integer >= 1");
        }
        break;
      case O_GREEDY: greedy_flag = true; break;
      case O_TEMP:
        smp->temperature = strtod(optarg, &end);
        if (*end || end == optarg || !(smp->temperature > 0)) {
          return ty_app_usage_error(cmd, "--temperature must be a number > 0");
        }
        sampling_flag = true;
        break;
      case O_TOPK:
        smp->top_k = strtoll(optarg, &end, 10);
        if (*end || end == optarg || smp->top_k < 0) {
          return ty_app_usage_error(cmd, "--top-k must be an integer >= 0");
        }
        sampling_flag = true;
        break;
      case O_TOPP:
        smp->top_p = strtod(optarg, &end);
        if (*end || end == optarg || !(smp->top_p > 0 && smp->top_p <= 1)) {
          return ty_app_usage_error(cmd, "--top-p must be in (0, 1]");
        }
        sampling_flag = true;
        break;
      case O_SEED:
        smp->seed = strtoull(optarg, &end, 10);
        if (*end || end == optarg || optarg[0] == '-') {
          return ty_app_usage_error(cmd, "--seed must be a non-negative integer");
        }
        seed_flag = true;
        break;
      case O_EOS: a->stop_at_eos = true; break;
      case O_BACKEND: a->backend = optarg; break;
      case O_DTYPE: {
        ty_status_t st = ty_llm_precision_parse(optarg, &a->dtype, &a->compute_dtype);
        if (st) {
          ty_status_free(st);
          return ty_app_usage_error(cmd, "--dtype must be f32, bf16, f16, f64, bf16-mixed "
                                    "or f16-mixed, not '%s'", optarg);
        }
        break;
      }
      case O_JSON: a->json = true; break;
      case O_NONFINITE: a->allow_nonfinite = true; break;
      case O_DETERMINISTIC: a->deterministic = true; break;
      case O_SPECULATE: {
        int64_t v = strtoll(optarg, &end, 10);
        if (*end || end == optarg || v < 0 || v > TY_ENGINE_MAX_SPECULATE) {
          return ty_app_usage_error(cmd, "--speculate must be an integer in 0..16 (0: off)");
        }
        a->speculate = v;
        break;
      }
      case O_CHECK: {
        int64_t every = 0;
        ty_status_t s = ty_check_numerics_parse(optarg, &every);
        if (s) {
          int rc = ty_app_usage_error("generate", "%s", ty_status_message(s));
          ty_status_free(s);
          return rc;
        }
        a->check_numerics = true;
        break;
      }
      case O_INPUT: a->input = optarg; break;
      case O_OUTPUT: a->output = optarg; break;
      case O_BATCH:
      case O_CTX:
      case O_CHUNK:
      case O_BUDGET: {
        int64_t v = strtoll(optarg, &end, 10);
        int64_t hi = c == O_BATCH ? 1024 : INT32_MAX, lo = c == O_CTX ? 2 : 1;
        const char *name = c == O_BATCH ? "--max-batch"
                           : c == O_CTX ? "--ctx"
                           : c == O_CHUNK ? "--prefill-chunk"
                                          : "--prefill-budget";
        if (*end || end == optarg || v < lo || v > hi) {
          return ty_app_usage_error(cmd, "%s must be an integer in %lld..%lld", name,
                                    (long long)lo, (long long)hi);
        }
        *(c == O_BATCH ? &a->max_batch
          : c == O_CTX ? &a->ctx
          : c == O_CHUNK ? &a->chunk
                         : &a->prefill_budget) = v;
        break;
      }
      case 'h': fputs(ty_generate_usage, stdout); return -1;
      case ':': return ty_app_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default:
        if (ty_app_refuse_switch_value(cmd, argv[optind - 1], long_options)) return TY_EXIT_USAGE;
        return ty_app_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return ty_app_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  if (!a->model_dir) return ty_app_usage_error(cmd, "--model is required");
  if (a->input || a->output) {
    if (!a->input || !a->output) {
      return ty_app_usage_error(cmd, "--input and --output go together");
    }
    if (a->prompt || a->prompt_ids || a->json) {
      return ty_app_usage_error(cmd, "--input takes its prompts from the file: --prompt, "
                                     "--prompt-ids and --json do not apply");
    }
  } else {
    if (a->max_batch || a->ctx || a->chunk || a->prefill_budget) {
      return ty_app_usage_error(cmd, "--max-batch, --ctx, --prefill-chunk and --prefill-budget "
                                     "apply to --input only (one prompt runs alone)");
    }
    if (!a->prompt == !a->prompt_ids) {
      return ty_app_usage_error(cmd, "give exactly one of --prompt and --prompt-ids (or "
                                     "--input)");
    }
    if (a->max_new < 1) return ty_app_usage_error(cmd, "--max-new-tokens is required");
  }
  if (greedy_flag && sampling_flag) {
    return ty_app_usage_error(cmd, "--greedy cannot be combined with sampling options");
  }
  /* Greedy decoding draws no random numbers: a seed would change nothing
   * (with --input, lines may sample on their own). */
  if (seed_flag && !sampling_flag && !a->input) {
    return ty_app_usage_error(cmd, "--seed only matters when sampling (--temperature, --top-k "
                                   "or --top-p)");
  }
  smp->greedy = !sampling_flag;
  return TY_EXIT_OK;
}

int ty_cmd_generate(ty_app_t *app, int argc, char **argv) {
  ty_generate_args_t a = {.backend = "cpu", .dtype = TY_DTYPE_F32,
                          .compute_dtype = TY_DTYPE_F32, .max_new = -1,
                          .sampling = {.greedy = true, .temperature = 1.0, .top_p = 1.0}};
  int rc = ty_generate_parse(argc, argv, &a);
  if (rc == TY_EXIT_OK && a.input) {
    ty_generate_batch_args_t b = {.model_dir = a.model_dir, .backend = a.backend,
                                  .input = a.input, .output = a.output, .dtype = a.dtype,
                                  .compute_dtype = a.compute_dtype, .max_new = a.max_new,
                                  .max_batch = a.max_batch ? a.max_batch : 8,
                                  .ctx = a.ctx, .chunk = a.chunk,
                                  .prefill_budget = a.prefill_budget, .sampling = a.sampling,
                                  .stop_at_eos = a.stop_at_eos,
                                  .allow_nonfinite = a.allow_nonfinite,
                                  .check_numerics = a.check_numerics,
                                  .deterministic = a.deterministic,
                                  .speculate = a.speculate};
    ty_status_t s = ty_generate_batch(app, &b);
    rc = s ? ty_app_fail("generate", s) : TY_EXIT_OK;
  } else if (rc == TY_EXIT_OK) {
    ty_status_t s = ty_generate_run(app, &a);
    rc = s ? ty_app_fail("generate", s) : TY_EXIT_OK;
  }
  free(a.prompt_ids);
  return rc < 0 ? TY_EXIT_OK : rc;
}
