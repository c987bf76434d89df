/* `trainyard generate`: KV-cache decoding. Two graphs share the weights and
 * the per-layer caches on the device: a prefill graph for the whole prompt
 * and a one-token decode graph run once per new token, both with a cache of
 * prompt + max-new-tokens rows, so every step reuses one compiled graph. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app.h"
#include "graph/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "models/checkpoint.h"
#include "models/llm.h"
#include "models/safetensors.h"
#include "models/tokenizer.h"

static const char *const ty_generate_usage =
    "usage: trainyard generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3)\n"
    "                          --max-new-tokens N [--greedy | --temperature T\n"
    "                          --top-k K --top-p P --seed S] [--backend URI]\n"
    "                          [--dtype D] [--json]\n"
    "\n"
    "Continues a prompt with the model in DIR. Greedy unless --temperature is\n"
    "given. Prints the text (when DIR holds tokenizer.json) and the speed; with\n"
    "--json prints one object {\"ids\": [new token ids], \"text\": \"...\"}.\n"
    "\n"
    "  --model DIR          Hugging Face model folder\n"
    "  --prompt TEXT        prompt text (needs DIR/tokenizer.json)\n"
    "  --prompt-ids LIST    prompt token ids, comma-separated\n"
    "  --max-new-tokens N   tokens to generate (>= 1)\n"
    "  --greedy             pick the most likely token (the default)\n"
    "  --temperature T      sample from softmax(logits / T), T > 0\n"
    "  --top-k K            sample among the K most likely tokens (0: all)\n"
    "  --top-p P            sample among the smallest set with mass >= P\n"
    "  --seed S             sampling seed (default 0)\n"
    "  --stop-at-eos        stop at the model's eos_token_id\n"
    "  --backend URI        device (default cpu)\n"
    "  --dtype D            f32, bf16, f16 or f64 (default f32)\n"
    "  --json               print JSON\n"
    "  -h, --help           this help\n";

typedef struct {
  const char *model_dir, *prompt, *prompt_ids, *backend;
  int64_t max_new;
  bool greedy, json, stop_at_eos;
  double temperature, top_p;
  int64_t top_k;
  uint64_t seed;
  ty_dtype_t dtype;
} ty_generate_args_t;

/* splitmix64: the sampler's random numbers (host side, reproducible). */
static double ty_next_uniform(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
  double p;
  int64_t id;
} ty_candidate_t;

static int ty_candidate_desc(const void *a, const void *b) {
  double pa = ((const ty_candidate_t *)a)->p, pb = ((const ty_candidate_t *)b)->p;
  return pa < pb ? 1 : pa > pb ? -1 : 0;
}

/* Picks the next token from one row of logits. Ties go to the lower id,
 * like torch.argmax. */
static int64_t ty_pick(const float *logits, int64_t vocab, const ty_generate_args_t *a,
                       uint64_t *rng, ty_candidate_t *scratch) {
  if (a->greedy) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; ++v) {
      if (logits[v] > logits[best]) best = v;
    }
    return best;
  }
  double max = logits[0];
  for (int64_t v = 1; v < vocab; ++v) max = logits[v] > max ? logits[v] : max;
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    scratch[v].id = v;
    scratch[v].p = exp(((double)logits[v] - max) / a->temperature);
    total += scratch[v].p;
  }
  qsort(scratch, (size_t)vocab, sizeof(*scratch), ty_candidate_desc);
  int64_t keep = a->top_k > 0 && a->top_k < vocab ? a->top_k : vocab;
  double mass = 0, kept = 0;
  for (int64_t i = 0; i < keep; ++i) {
    mass += scratch[i].p / total;
    kept += scratch[i].p;
    if (a->top_p < 1.0 && mass >= a->top_p) {
      keep = i + 1;
      break;
    }
  }
  double u = ty_next_uniform(rng) * kept;
  for (int64_t i = 0; i < keep; ++i) {
    u -= scratch[i].p;
    if (u <= 0) return scratch[i].id;
  }
  return scratch[keep - 1].id;
}

static ty_status_t ty_parse_ids(const char *text, int64_t vocab, int64_t **out, int64_t *count) {
  size_t cap = 16, n = 0;
  int64_t *ids = malloc(cap * sizeof(int64_t));
  if (!ids) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  const char *p = text;
  while (*p) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || v >= vocab) {
      free(ids);
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--prompt-ids: '%s' is not a comma-separated list of token ids in "
                            "[0, %lld)",
                            text, (long long)vocab);
    }
    if (n == cap) {
      int64_t *grown = realloc(ids, (cap *= 2) * sizeof(int64_t));
      if (!grown) {
        free(ids);
        return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      }
      ids = grown;
    }
    ids[n++] = v;
    p = end;
    while (*p == ',' || *p == ' ') ++p;
  }
  if (n == 0) {
    free(ids);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--prompt-ids is empty");
  }
  *out = ids;
  *count = (int64_t)n;
  return TY_OK;
}

/* Builds a KV-cache graph of `seq` tokens and opens a session for it. */
static ty_status_t ty_open_step(ty_device_t *device, const ty_model_config_t *config,
                                const ty_generate_args_t *a, int64_t seq, int64_t cache_len,
                                const ty_session_t *share, ty_graph_t **out_graph,
                                ty_llm_t *out_model, ty_session_t **out_session) {
  TY_RETURN_IF_ERROR(ty_graph_create(out_graph));
  ty_llm_options_t options = {.batch = 1, .seq = seq, .dtype = a->dtype,
                              .logits_output = true, .cache_len = cache_len};
  TY_RETURN_IF_ERROR(ty_llm_build(*out_graph, config, &options, out_model));
  ty_session_options_t so = {.share_state_with = share};
  return ty_session_create(device, *out_graph, &so, out_session);
}

/* Binds positions [start, start+T) and runs; returns the last row's logits
 * as f32 in `last` (vocab entries). */
static ty_status_t ty_step(ty_session_t *s, const int64_t *tokens, int64_t T, int64_t start,
                           int64_t vocab, ty_dtype_t dtype, void *raw, float *last) {
  int64_t bt[2] = {1, T}, t1[1] = {T};
  int64_t *pos = malloc((size_t)T * sizeof(int64_t));
  if (!pos) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (int64_t t = 0; t < T; ++t) pos[t] = start + t;
  int64_t kv_len = start + T;
  ty_status_t st = ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, tokens, (size_t)T * 8);
  if (!st) st = ty_session_bind(s, "positions", TY_DTYPE_I64, 1, t1, pos, (size_t)T * 8);
  if (!st) st = ty_session_bind(s, "cache_position", TY_DTYPE_I64, 0, NULL, &start, 8);
  if (!st) st = ty_session_bind(s, "kv_len", TY_DTYPE_I64, 0, NULL, &kv_len, 8);
  free(pos);
  if (!st) st = ty_session_run(s);
  size_t row = (size_t)vocab * ty_dtype_size(dtype);
  if (!st) st = ty_session_read(s, "logits", raw, (size_t)T * row);
  if (!st) {
    st = ty_safetensors_convert(dtype, (const char *)raw + (size_t)(T - 1) * row, TY_DTYPE_F32,
                                last, (size_t)vocab);
  }
  return st;
}

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

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ty_status_t ty_generate_run(ty_app_t *app, const ty_generate_args_t *a) {
  ty_model_config_t config;
  TY_RETURN_IF_ERROR(ty_model_config_load(a->model_dir, &config));
  ty_tokenizer_t *tok = NULL;
  char tok_path[4096];
  snprintf(tok_path, sizeof(tok_path), "%s/tokenizer.json", a->model_dir);
  ty_status_t s = TY_OK;
  FILE *probe = fopen(tok_path, "rb");
  if (probe) {
    fclose(probe);
    s = ty_tokenizer_load_file(tok_path, &tok);
  } else if (a->prompt) {
    return ty_status_make(TY_CODE_NOT_FOUND,
                          "--prompt needs %s; pass --prompt-ids instead, or add the "
                          "model's tokenizer.json",
                          tok_path);
  }
  int64_t *prompt = NULL, P = 0;
  if (!s && a->prompt) {
    uint32_t *ids = NULL;
    size_t n = 0;
    s = ty_tokenizer_encode(tok, a->prompt, strlen(a->prompt), 0, &ids, &n);
    if (!s && n == 0) s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "the prompt encodes to no tokens");
    if (!s) {
      prompt = malloc(n * sizeof(int64_t));
      if (!prompt) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      for (size_t i = 0; i < n && prompt; ++i) prompt[i] = ids[i];
      P = (int64_t)n;
    }
    free(ids);
  } else if (!s) {
    s = ty_parse_ids(a->prompt_ids, config.vocab_size, &prompt, &P);
  }
  int64_t cache_len = P + a->max_new, V = config.vocab_size;
  if (!s && cache_len > config.max_positions) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "prompt (%lld tokens) + --max-new-tokens (%lld) exceeds the model's "
                       "%lld positions",
                       (long long)P, (long long)a->max_new, (long long)config.max_positions);
  }
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  ty_graph_t *g_prefill = NULL, *g_decode = NULL;
  ty_llm_t m_prefill = {0}, m_decode = {0};
  ty_session_t *s_prefill = NULL, *s_decode = NULL;
  int64_t *generated = calloc((size_t)a->max_new, sizeof(int64_t));
  void *raw = malloc((size_t)(P > 0 ? P : 1) * (size_t)V * 8);
  float *last = malloc((size_t)V * sizeof(float));
  ty_candidate_t *scratch = malloc((size_t)V * sizeof(ty_candidate_t));
  if (!s && (!generated || !raw || !last || !scratch)) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open("generate", registry, a->backend, &device, NULL);
  if (!s) s = ty_open_step(device, &config, a, P, cache_len, NULL, &g_prefill, &m_prefill, &s_prefill);
  if (!s) s = ty_llm_load_weights(&m_prefill, s_prefill, a->model_dir);
  if (!s) s = ty_open_step(device, &config, a, 1, cache_len, s_prefill, &g_decode, &m_decode, &s_decode);
  uint64_t rng = a->seed;
  int64_t produced = 0;
  double t0 = ty_now(), t_first = t0;
  if (!s) s = ty_step(s_prefill, prompt, P, 0, V, a->dtype, raw, last);
  while (!s && produced < a->max_new) {
    int64_t next = ty_pick(last, V, a, &rng, scratch);
    generated[produced++] = next;
    if (produced == 1) t_first = ty_now();
    if (a->stop_at_eos && next == config.eos_token_id) break;
    if (produced == a->max_new) break;
    s = ty_step(s_decode, &next, 1, P + produced - 1, V, a->dtype, raw, last);
  }
  double t1 = ty_now();
  char *text = NULL;
  size_t text_size = 0;
  if (!s && tok) {
    uint32_t *ids = malloc((size_t)(produced ? produced : 1) * sizeof(uint32_t));
    if (!ids) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    for (int64_t i = 0; i < produced && ids; ++i) ids[i] = (uint32_t)generated[i];
    if (!s) s = ty_tokenizer_decode(tok, ids, (size_t)produced, 0, &text, &text_size);
    free(ids);
  }
  if (!s) {
    if (a->json) {
      printf("{\"ids\": [");
      for (int64_t i = 0; i < produced; ++i) printf("%s%lld", i ? ", " : "", (long long)generated[i]);
      printf("], \"text\": ");
      ty_print_json_string(text ? text : "", text_size);
      printf("}\n");
    } else {
      if (text) {
        if (a->prompt) fwrite(a->prompt, 1, strlen(a->prompt), stdout);
        fwrite(text, 1, text_size, stdout);
        printf("\n");
      } else {
        for (int64_t i = 0; i < produced; ++i) printf("%s%lld", i ? " " : "", (long long)generated[i]);
        printf("\n");
      }
    }
    double decode_s = t1 - t_first;
    fprintf(stderr,
            "trainyard generate: %lld prompt + %lld new tokens on %s; prefill %.1f ms, "
            "decode %.1f tok/s\n",
            (long long)P, (long long)produced, ty_device_label(device),
            (t_first - t0) * 1e3, produced > 1 && decode_s > 0 ? (produced - 1) / decode_s : 0.0);
  }
  free(text);
  ty_session_destroy(s_decode);
  ty_session_destroy(s_prefill);
  ty_llm_deinit(&m_decode);
  ty_llm_deinit(&m_prefill);
  ty_graph_destroy(g_decode);
  ty_graph_destroy(g_prefill);
  ty_device_close(device);
  ty_registry_destroy(registry);
  ty_tokenizer_destroy(tok);
  free(generated);
  free(raw);
  free(last);
  free(scratch);
  free(prompt);
  return s;
}

int ty_cmd_generate(ty_app_t *app, int argc, char **argv) {
  enum { O_PROMPT = 1000, O_IDS, O_MAX, O_GREEDY, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_BACKEND,
         O_DTYPE, O_JSON, O_EOS };
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
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  ty_generate_args_t a = {.backend = "cpu", .greedy = true, .temperature = 1.0, .top_p = 1.0,
                          .dtype = TY_DTYPE_F32, .max_new = -1};
  bool sampling_flag = false, greedy_flag = false;
  opterr = 0;
  optind = 1;
  int c;
  char *end;
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    switch (c) {
      case 'm': a.model_dir = optarg; break;
      case O_PROMPT: a.prompt = optarg; break;
      case O_IDS: a.prompt_ids = optarg; break;
      case O_MAX:
        a.max_new = strtoll(optarg, &end, 10);
        if (*end || end == optarg || a.max_new < 1) {
          return ty_app_usage_error("generate", "--max-new-tokens must be an integer >= 1");
        }
        break;
      case O_GREEDY: greedy_flag = true; break;
      case O_TEMP:
        a.temperature = strtod(optarg, &end);
        if (*end || end == optarg || !(a.temperature > 0)) {
          return ty_app_usage_error("generate", "--temperature must be a number > 0");
        }
        sampling_flag = true;
        break;
      case O_TOPK:
        a.top_k = strtoll(optarg, &end, 10);
        if (*end || end == optarg || a.top_k < 0) {
          return ty_app_usage_error("generate", "--top-k must be an integer >= 0");
        }
        sampling_flag = true;
        break;
      case O_TOPP:
        a.top_p = strtod(optarg, &end);
        if (*end || end == optarg || !(a.top_p > 0 && a.top_p <= 1)) {
          return ty_app_usage_error("generate", "--top-p must be in (0, 1]");
        }
        sampling_flag = true;
        break;
      case O_SEED:
        a.seed = strtoull(optarg, &end, 10);
        if (*end || end == optarg) return ty_app_usage_error("generate", "--seed must be an integer");
        break;
      case O_EOS: a.stop_at_eos = true; break;
      case O_BACKEND: a.backend = optarg; break;
      case O_DTYPE: {
        ty_status_t st = ty_dtype_parse(optarg, &a.dtype);
        if (st || !ty_dtype_is_float(a.dtype)) {
          ty_status_free(st);
          return ty_app_usage_error("generate", "--dtype must be f32, bf16, f16 or f64");
        }
        break;
      }
      case O_JSON: a.json = true; break;
      case 'h': fputs(ty_generate_usage, stdout); return TY_EXIT_OK;
      default:
        return ty_app_usage_error("generate", "unknown option or missing value '%s'",
                                  argv[optind - 1]);
    }
  }
  if (optind < argc) return ty_app_usage_error("generate", "unexpected argument '%s'", argv[optind]);
  if (!a.model_dir) return ty_app_usage_error("generate", "--model is required");
  if (!a.prompt == !a.prompt_ids) {
    return ty_app_usage_error("generate", "give exactly one of --prompt and --prompt-ids");
  }
  if (a.max_new < 1) return ty_app_usage_error("generate", "--max-new-tokens is required");
  if (greedy_flag && sampling_flag) {
    return ty_app_usage_error("generate", "--greedy cannot be combined with sampling options");
  }
  a.greedy = !sampling_flag;
  ty_status_t s = ty_generate_run(app, &a);
  return s ? ty_app_fail("generate", s) : TY_EXIT_OK;
}
