/* `trainyard serve`: an OpenAI-compatible HTTP server for a Hugging Face
 * model folder on any backend, with continuous batching (models/engine.h).
 * This file: options, start-up, signals and the graceful shutdown; the
 * parts are listed in serve.h. */
#include <getopt.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "app.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/llm.h"
#include "serve/serve.h"
#include "stop_signals.h"

static const char *const ty_serve_usage =
    "usage: trainyard serve --model DIR [--backend URI] [--host 127.0.0.1] [--port 8000]\n"
    "                       [--api-key KEY] [--max-batch N] [--ctx N] [options]\n"
    "\n"
    "Serves the model in DIR over the OpenAI HTTP API: POST /v1/completions and\n"
    "/v1/chat/completions (streaming with server-sent events), GET /v1/models,\n"
    "/health and /metrics (Prometheus). Concurrent requests share decode steps\n"
    "(continuous batching over a paged KV cache). SIGTERM, SIGINT or SIGHUP\n"
    "stop taking requests, let those in flight finish within --shutdown-timeout, and\n"
    "exit 0.\n"
    "\n"
    "  --model DIR             Hugging Face model folder (config.json, safetensors,\n"
    "                          tokenizer.json; tokenizer_config.json's chat_template\n"
    "                          for chat)\n"
    "  --backend URI           device (default cpu)\n"
    "  --dtype D               f32, bf16, f16 or f64, or bf16-mixed / f16-mixed (f32\n"
    "                          weights, matmuls and attention in bf16/f16); default f32\n"
    "  --host HOST             address to listen on (default 127.0.0.1: this machine\n"
    "                          only; other addresses must be named)\n"
    "  --port N                TCP port (default 8000; 0: any free port, printed)\n"
    "  --api-key KEY           require 'Authorization: Bearer KEY' (all but /health;\n"
    "                          the scheme's name in any case)\n"
    "  --model-name NAME       the model's id in the API (default: DIR's name)\n"
    "  --max-batch N           sequences decoded together (default 8)\n"
    "  --ctx N                 tokens per sequence, prompt + completion (default: the\n"
    "                          model's positions, at most 2048)\n"
    "  --prefill-chunk N       prompt tokens of one request per step (default 64, at\n"
    "                          most --ctx): a long prompt delays running streams by\n"
    "                          one chunk per step\n"
    "  --prefill-budget N      prompt tokens a step may prefill while streams run, in\n"
    "                          whole chunks (default: one chunk): more reaches the\n"
    "                          first tokens of a burst of requests in fewer steps\n"
    "  --kv-cache-memory BYTES device memory for the paged KV cache (suffix K, M or G\n"
    "                          for KiB, MiB, GiB; default: enough for every sequence\n"
    "                          to reach --ctx). Requests wait for blocks when it is\n"
    "                          full; one larger than all of it gets a 400\n"
    "  --kv-block-size N       tokens per KV-cache block (default 16)\n"
    "  --no-prefix-cache       do not share the blocks of a common prompt prefix\n"
    "  --speculate N           speculative decoding by prompt lookup: a stream whose\n"
    "                          last tokens occurred earlier drafts up to N (1..16)\n"
    "                          tokens that followed them and one step checks them\n"
    "                          all; the tokens made do not change (default 0: off)\n"
    "  --chat-template FILE    a chat template for models without a recognized one:\n"
    "                          the JSON form of docs/formats.md, or a Jinja file of\n"
    "                          the chatml, llama2, llama3 or mistral family\n"
    "  --max-body BYTES        largest request body (default 1048576)\n"
    "  --max-queue N           requests that may wait for a slot; more get 429\n"
    "                          (default 256)\n"
    "  --request-timeout S     a request still running after S seconds ends with 504\n"
    "                          (default 600)\n"
    "  --shutdown-timeout S    on SIGTERM/SIGHUP, how long requests in flight may finish\n"
    "                          before they are cancelled (default 30)\n"
    "  --read-timeout S        a client must send a whole request, head and body,\n"
    "                          within S seconds of owing it (of connecting, or of\n"
    "                          the previous answer); else the connection is closed\n"
    "                          (default 10). Answers and streams are not cut by it\n"
    "  --max-connections N     open connections in all; more are closed at once\n"
    "                          (default 1024)\n"
    "  --max-connections-per-client N\n"
    "                          open connections from one client address; more are\n"
    "                          closed at once (default 128; 0: no limit; behind a\n"
    "                          proxy every client has the proxy's address)\n"
    "  --deterministic         batch-invariant kernels: a request's tokens and\n"
    "                          logprobs (greedy or seeded) are the same bits whatever\n"
    "                          else shares the batch, and equal `trainyard eval\n"
    "                          --deterministic`'s; refused by a backend that cannot\n"
    "                          promise it (/metrics: trainyard_deterministic)\n"
    "  -h, --help              this help\n";

typedef struct {
  const char *model_dir, *backend, *chat_template;
  ty_dtype_t dtype;         /* parameters */
  ty_dtype_t compute_dtype; /* matmuls and attention (== dtype unless mixed) */
  int64_t max_batch, ctx, chunk, prefill_budget;
  int64_t kv_bytes, kv_block_size;
  bool no_prefix_cache;
  int64_t speculate;
  ty_server_options_t server;
} ty_serve_args_t;

static bool ty_parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  long long v = strtoll(text, &end, 10);
  if (*end || end == text || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* A byte count with an optional K, M or G (binary) suffix. */
static bool ty_parse_bytes(const char *text, int64_t *out) {
  char *end;
  long long v = strtoll(text, &end, 10);
  int shift = 0;
  if (end != text && *end) {
    shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
          : *end == 'G' || *end == 'g' ? 30 : -1;
    if (shift < 0 || end[1]) return false;
  }
  if (end == text || v < 1 || v > ((int64_t)1 << 50) >> shift) return false;
  *out = (int64_t)v << shift;
  return true;
}

static bool ty_parse_seconds(const char *text, double *out) {
  char *end;
  double v = strtod(text, &end);
  if (*end || end == text || !(v > 0) || v > 1e7) return false;
  *out = v;
  return true;
}

static int ty_serve_parse(int argc, char **argv, ty_serve_args_t *a) {
  enum { O_BACKEND = 1000, O_DTYPE, O_HOST, O_PORT, O_KEY, O_NAME, O_BATCH, O_CTX, O_CHUNK,
         O_BUDGET, O_TEMPLATE, O_BODY, O_QUEUE, O_TIMEOUT, O_SHUTDOWN, O_READ, O_CONNS,
         O_PER_CLIENT, O_DETERMINISTIC, O_KV_MEMORY, O_KV_BLOCK, O_NO_PREFIX, O_SPECULATE };
  static const struct option long_options[] = {
      {"model", required_argument, NULL, 'm'},
      {"backend", required_argument, NULL, O_BACKEND},
      {"dtype", required_argument, NULL, O_DTYPE},
      {"host", required_argument, NULL, O_HOST},
      {"port", required_argument, NULL, O_PORT},
      {"api-key", required_argument, NULL, O_KEY},
      {"model-name", required_argument, NULL, O_NAME},
      {"max-batch", required_argument, NULL, O_BATCH},
      {"ctx", required_argument, NULL, O_CTX},
      {"prefill-chunk", required_argument, NULL, O_CHUNK},
      {"prefill-budget", required_argument, NULL, O_BUDGET},
      {"chat-template", required_argument, NULL, O_TEMPLATE},
      {"max-body", required_argument, NULL, O_BODY},
      {"max-queue", required_argument, NULL, O_QUEUE},
      {"request-timeout", required_argument, NULL, O_TIMEOUT},
      {"shutdown-timeout", required_argument, NULL, O_SHUTDOWN},
      {"read-timeout", required_argument, NULL, O_READ},
      {"max-connections", required_argument, NULL, O_CONNS},
      {"max-connections-per-client", required_argument, NULL, O_PER_CLIENT},
      {"deterministic", no_argument, NULL, O_DETERMINISTIC},
      {"kv-cache-memory", required_argument, NULL, O_KV_MEMORY},
      {"kv-block-size", required_argument, NULL, O_KV_BLOCK},
      {"no-prefix-cache", no_argument, NULL, O_NO_PREFIX},
      {"speculate", required_argument, NULL, O_SPECULATE},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *cmd = "serve";
  opterr = 0;
  optind = 1;
  int c;
  int64_t v;
  if (ty_app_refuse_empty_values(cmd, argc, argv, ":h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    switch (c) {
      case 'm': a->model_dir = optarg; break;
      case O_BACKEND: a->backend = optarg; break;
      case O_DETERMINISTIC: a->server.deterministic = true; break;
      case O_DTYPE: {
        ty_status_t st = ty_llm_precision_parse(optarg, &a->dtype, &a->compute_dtype);
        if (st) {
          ty_status_free(st);
          return ty_app_usage_error(cmd, "--dtype must be f32, bf16, f16, f64, bf16-mixed or "
                                         "f16-mixed");
        }
        break;
      }
      case O_HOST:
        if (!optarg[0]) return ty_app_usage_error(cmd, "--host needs an address");
        a->server.host = optarg;
        break;
      case O_PORT:
        if (!ty_parse_i64(optarg, 0, 65535, &v)) {
          return ty_app_usage_error(cmd, "--port must be an integer in 0..65535");
        }
        a->server.port = (int)v;
        break;
      case O_KEY:
        if (!optarg[0]) return ty_app_usage_error(cmd, "--api-key must not be empty");
        a->server.api_key = optarg;
        break;
      case O_NAME:
        if (!optarg[0]) return ty_app_usage_error(cmd, "--model-name must not be empty");
        a->server.model_name = optarg;
        break;
      case O_BATCH:
        if (!ty_parse_i64(optarg, 1, 1024, &a->max_batch)) {
          return ty_app_usage_error(cmd, "--max-batch must be an integer in 1..1024");
        }
        break;
      case O_CTX:
        if (!ty_parse_i64(optarg, 2, INT32_MAX, &a->ctx)) {
          return ty_app_usage_error(cmd, "--ctx must be an integer >= 2");
        }
        break;
      case O_CHUNK:
        if (!ty_parse_i64(optarg, 1, INT32_MAX, &a->chunk)) {
          return ty_app_usage_error(cmd, "--prefill-chunk must be an integer >= 1");
        }
        break;
      case O_BUDGET:
        if (!ty_parse_i64(optarg, 1, INT32_MAX, &a->prefill_budget)) {
          return ty_app_usage_error(cmd, "--prefill-budget must be an integer >= 1");
        }
        break;
      case O_TEMPLATE: a->chat_template = optarg; break;
      case O_KV_MEMORY:
        if (!ty_parse_bytes(optarg, &a->kv_bytes)) {
          return ty_app_usage_error(cmd, "--kv-cache-memory must be a byte count >= 1, with an "
                                         "optional suffix K, M or G (e.g. 2G)");
        }
        break;
      case O_KV_BLOCK:
        if (!ty_parse_i64(optarg, 1, 1024, &a->kv_block_size)) {
          return ty_app_usage_error(cmd, "--kv-block-size must be an integer in 1..1024");
        }
        break;
      case O_NO_PREFIX: a->no_prefix_cache = true; break;
      case O_SPECULATE:
        if (!ty_parse_i64(optarg, 0, TY_ENGINE_MAX_SPECULATE, &a->speculate)) {
          return ty_app_usage_error(cmd, "--speculate must be an integer in 0..16 (0: off)");
        }
        break;
      case O_BODY:
        if (!ty_parse_i64(optarg, 64, (int64_t)1 << 32, &v)) {
          return ty_app_usage_error(cmd, "--max-body must be a byte count in 64..4294967296");
        }
        a->server.max_body = (size_t)v;
        break;
      case O_QUEUE:
        if (!ty_parse_i64(optarg, 0, 1 << 20, &a->server.max_queue)) {
          return ty_app_usage_error(cmd, "--max-queue must be an integer in 0..1048576");
        }
        break;
      case O_TIMEOUT:
        if (!ty_parse_seconds(optarg, &a->server.request_timeout)) {
          return ty_app_usage_error(cmd, "--request-timeout must be a number of seconds > 0");
        }
        break;
      case O_SHUTDOWN:
        if (!ty_parse_seconds(optarg, &a->server.shutdown_timeout)) {
          return ty_app_usage_error(cmd, "--shutdown-timeout must be a number of seconds > 0");
        }
        break;
      case O_READ:
        if (!ty_parse_seconds(optarg, &a->server.read_timeout)) {
          return ty_app_usage_error(cmd, "--read-timeout must be a number of seconds > 0");
        }
        break;
      case O_CONNS:
        if (!ty_parse_i64(optarg, 1, 1 << 20, &a->server.max_connections)) {
          return ty_app_usage_error(cmd, "--max-connections must be an integer in 1..1048576");
        }
        break;
      case O_PER_CLIENT:
        if (!ty_parse_i64(optarg, 0, 1 << 20, &a->server.max_per_client)) {
          return ty_app_usage_error(cmd, "--max-connections-per-client must be an integer in "
                                         "0..1048576 (0: no limit)");
        }
        break;
      case 'h': fputs(ty_serve_usage, stdout); return -1;
      case ':': return ty_app_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default:
        if (ty_app_refuse_switch_value(cmd, argv[optind - 1], long_options)) return TY_EXIT_USAGE;
        return ty_app_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return ty_app_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  if (!a->model_dir) return ty_app_usage_error(cmd, "--model is required");
  if (a->server.max_per_client > a->server.max_connections) {
    return ty_app_usage_error(cmd, "--max-connections-per-client %lld is larger than "
                              "--max-connections %lld", (long long)a->server.max_per_client,
                              (long long)a->server.max_connections);
  }
  if (a->ctx > 0 && a->chunk > a->ctx) {
    return ty_app_usage_error(cmd, "--prefill-chunk %lld is larger than --ctx %lld",
                              (long long)a->chunk, (long long)a->ctx);
  }
  return TY_EXIT_OK;
}

/* Each connection holds a descriptor: the soft limit of open files is
 * raised to fit --max-connections (up to the hard limit), and where the
 * hard limit is lower, fewer connections are taken, with a warning. */
static void ty_serve_fd_limit(ty_server_options_t *o) {
  const rlim_t spare = 64; /* the model's files, the plugins, the console */
  rlim_t want = (rlim_t)o->max_connections + spare;
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
    rlim_t old = r.rlim_cur;
    r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max > want ? want : r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) != 0) r.rlim_cur = old;
  }
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < want) {
    int64_t fit = r.rlim_cur > spare ? (int64_t)(r.rlim_cur - spare) : 1;
    fprintf(stderr, "trainyard serve: warning: the open-file limit (ulimit -n) is %llu: at "
            "most %lld connections, not --max-connections %lld\n",
            (unsigned long long)r.rlim_cur, (long long)fit, (long long)o->max_connections);
    o->max_connections = fit;
    if (o->max_per_client > fit) o->max_per_client = fit;
  }
}

/* The chat template's turn ends: single tokens stop the engine; longer
 * ones are stop strings. */
static ty_status_t ty_serve_chat(ty_server_t *s, const ty_serve_args_t *a,
                                 ty_chat_template_t **out) {
  ty_status_t st = ty_chat_template_load(a->model_dir, a->chat_template, out);
  if (st && ty_status_code(st) == TY_CODE_NOT_FOUND && !a->chat_template) {
    fprintf(stderr, "trainyard serve: %s; /v1/chat/completions is refused\n",
            ty_status_message(st));
    ty_status_free(st);
    return TY_OK;
  }
  TY_RETURN_IF_ERROR(st);
  const char *const *stops;
  size_t n = ty_chat_template_stops(*out, &stops);
  for (size_t i = 0; i < n; ++i) {
    uint32_t id;
    if (ty_tokenizer_token_to_id(s->tokenizer, stops[i], strlen(stops[i]), &id) &&
        id < s->config.vocab_size && s->chat_stop_id_count < TY_ENGINE_MAX_STOP_IDS - 1) {
      s->chat_stop_ids[s->chat_stop_id_count++] = id;
    } else {
      s->chat_stop_text[s->chat_stop_text_count++] = stops[i];
    }
  }
  return TY_OK;
}

static ty_status_t ty_serve_run(ty_app_t *app, ty_serve_args_t *a) {
  /* SIGTERM/SIGINT/SIGHUP reach the process's one signal thread (stop_signals.h:
   * every thread blocks them from main() on, and no thread runs a handler);
   * armed, it records them for the loop below to poll. A second thread in
   * sigwait would race it for each signal, and the signal thread, unarmed,
   * ends the process the default way. One that comes while the server
   * starts is kept, and stops it as soon as it listens. */
  ty_stop_signals_clear();
  ty_stop_signals_arm();
  ty_stop_signals_ignore_sigpipe();
  ty_server_t *s = calloc(1, sizeof(*s));
  if (!s) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  s->options = a->server;
  ty_serve_fd_limit(&s->options);
  s->started = ty_srv_now();
  s->created = (int64_t)time(NULL);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work, NULL);
  ty_tokenizer_t *tok = NULL;
  ty_chat_template_t *chat = NULL;
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  char path[4096], name[4096];
  ty_status_t st = ty_model_config_load(a->model_dir, &s->config);
  /* The checkpoint against the config before any graph is built. */
  if (!st) st = ty_llm_check_weights(&s->config, a->model_dir);
  if (!st) {
    snprintf(path, sizeof(path), "%s/tokenizer.json", a->model_dir);
    bool exists = false;
    st = ty_file_probe(path, &exists);
    if (!st && !exists) {
      st = ty_status_make(TY_CODE_NOT_FOUND, "%s is missing: the server turns text into tokens "
                          "and back with it", path);
    }
    if (!st) st = ty_tokenizer_load_file(path, &tok);
  }
  s->tokenizer = tok;
  if (!st) st = ty_serve_chat(s, a, &chat);
  s->chat = chat;
  if (!st) {
    s->eos_id = s->config.eos_token_id >= 0 && s->config.eos_token_id < s->config.vocab_size
                    ? s->config.eos_token_id
                    : -1;
    s->context = a->ctx > 0 ? a->ctx
                            : (s->config.max_positions < 2048 ? s->config.max_positions : 2048);
    if (s->context > s->config.max_positions) {
      st = ty_status_make(TY_CODE_INVALID_ARGUMENT, "--ctx %lld exceeds the model's %lld "
                          "positions (%s/config.json)", (long long)s->context,
                          (long long)s->config.max_positions, a->model_dir);
    }
    s->slots = a->max_batch;
  }
  if (!s->options.model_name) {
    snprintf(name, sizeof(name), "%s", a->model_dir);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = '\0';
    s->options.model_name = strdup(basename(name));
    if (!s->options.model_name && !st) {
      st = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (!st) st = ty_app_registry_create(app, &registry);
  if (!st) st = ty_app_device_open("serve", registry, a->backend, &device, NULL);
  if (!st) {
    st = ty_llm_check_memory(&s->config, a->dtype, 0, ty_device_info(device)->memory_bytes,
                             ty_device_label(device));
  }
  if (!st) {
    int64_t chunk = a->chunk > 0 ? a->chunk : 64;
    ty_engine_options_t o = {.dtype = a->dtype, .compute_dtype = a->compute_dtype,
                             .max_batch = a->max_batch, .context = s->context,
                             .prefill_chunk = chunk < s->context ? chunk : s->context,
                             .deterministic = a->server.deterministic,
                             .kv_cache_bytes = a->kv_bytes, .kv_block_size = a->kv_block_size,
                             .no_prefix_cache = a->no_prefix_cache, .speculate = a->speculate,
                             .overlap = true};
    /* At most every slot's context: more could never be spent in a step. */
    int64_t most = s->context * a->max_batch;
    o.prefill_budget = a->prefill_budget < most ? a->prefill_budget : most;
    st = ty_engine_create(device, &s->config, &o, &s->engine);
    if (!st && o.deterministic) ty_app_note_deterministic("serve", device);
    if (!st) {
      ty_engine_stats_t es = ty_engine_stats(s->engine);
      s->kv_blocks = es.kv_blocks;
      s->kv_block_size = es.kv_block_size;
      s->metrics.engine = es;
    }
  }
  /* NaN or infinite weights are refused: a server has no use for them. */
  if (!st) st = ty_engine_load_weights(s->engine, a->model_dir, NULL, NULL);
  double warm = ty_srv_now();
  if (!st) st = ty_engine_warm_up(s->engine);
  if (!st && app->verbosity) {
    fprintf(stderr, "trainyard serve: ready after %.2f s (warm-up %.2f s)\n",
            ty_srv_now() - s->started, ty_srv_now() - warm);
  }
  bool sched = false;
  if (!st) st = ty_srv_sched_start(s);
  sched = !st;
  if (!st) st = ty_srv_http_start(s);
  if (!st) {
    printf("trainyard serve: listening on http://%s%s%s:%d/v1 (model '%s', %lld slots of %lld "
           "tokens on %s, chat template %s)\n",
           strchr(s->options.host, ':') ? "[" : "", s->options.host,
           strchr(s->options.host, ':') ? "]" : "", s->bound_port, s->options.model_name,
           (long long)s->slots, (long long)s->context, ty_device_label(device),
           chat ? ty_chat_template_family(chat) : "none");
    printf("trainyard serve: KV cache of %lld blocks x %lld tokens (%lld tokens)",
           (long long)s->kv_blocks, (long long)s->kv_block_size,
           (long long)(s->kv_blocks * s->kv_block_size));
    if (a->speculate > 0) {
      printf("; speculative decoding: up to %lld drafted tokens", (long long)a->speculate);
    }
    printf("\n");
    fflush(stdout);
    if (strcmp(s->options.host, "127.0.0.1") && strcmp(s->options.host, "::1") &&
        strcmp(s->options.host, "localhost") && !s->options.api_key) {
      fprintf(stderr, "trainyard serve: warning: --host %s takes requests from other machines "
              "and no --api-key is set\n", s->options.host);
    }
    struct timespec tick = {0, 50 * 1000 * 1000};
    int sig;
    while ((sig = ty_stop_signals_received()) == 0) nanosleep(&tick, NULL);
    ty_stop_signals_clear(); /* a second one cuts the wait for requests short */
    fprintf(stderr, "trainyard serve: %s: no new requests; %lld in flight get %g s to "
            "finish\n", ty_stop_signals_name(sig), (long long)s->in_flight,
            s->options.shutdown_timeout);
    pthread_mutex_lock(&s->lock);
    s->draining = true;
    pthread_mutex_unlock(&s->lock);
    ty_srv_http_quiesce(s);
    /* Wait for the requests in flight (a second signal cuts it short). */
    double deadline = ty_srv_now() + s->options.shutdown_timeout;
    for (;;) {
      pthread_mutex_lock(&s->lock);
      int64_t left = s->in_flight;
      pthread_mutex_unlock(&s->lock);
      if (left == 0 || ty_srv_now() > deadline || ty_stop_signals_received()) break;
      nanosleep(&tick, NULL);
    }
    pthread_mutex_lock(&s->lock);
    int64_t cancelled = s->in_flight;
    s->abort_all = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    /* Let the connections send what they have (at most 5 s more). */
    for (double until = ty_srv_now() + 5; ty_srv_now() < until;) {
      pthread_mutex_lock(&s->lock);
      int64_t live = s->live_requests;
      pthread_mutex_unlock(&s->lock);
      if (live == 0) break;
      nanosleep(&tick, NULL);
    }
    fprintf(stderr, "trainyard serve: stopped (%lld requests cancelled at the deadline)\n",
            (long long)cancelled);
  }
  ty_srv_http_stop(s);
  if (sched) ty_srv_sched_stop(s);
  ty_engine_destroy(s->engine);
  ty_device_close(device);
  ty_registry_destroy(registry);
  ty_chat_template_destroy(chat);
  ty_tokenizer_destroy(tok);
  if (!a->server.model_name) free((char *)s->options.model_name);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->lock);
  free(s);
  return st;
}

int ty_cmd_serve(ty_app_t *app, int argc, char **argv) {
  ty_serve_args_t a = {.backend = "cpu", .dtype = TY_DTYPE_F32,
                       .compute_dtype = TY_DTYPE_F32, .max_batch = 8,
                       .server = {.host = "127.0.0.1", .port = 8000, .max_body = 1 << 20,
                                  .max_queue = 256, .request_timeout = 600,
                                  .shutdown_timeout = 30, .read_timeout = 10,
                                  .max_connections = 1024, .max_per_client = 128,
                                  .default_max_tokens = 16,
                                  .verbosity = app->verbosity}};
  int rc = ty_serve_parse(argc, argv, &a);
  if (rc == TY_EXIT_OK) {
    ty_status_t s = ty_serve_run(app, &a);
    rc = s ? ty_app_fail("serve", s) : TY_EXIT_OK;
  }
  return rc < 0 ? TY_EXIT_OK : rc;
}
