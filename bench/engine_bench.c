/* engine_bench: aggregate decode throughput of the generation engine
 * (models/engine.h) in process, without HTTP: C sequences at once against
 * the same C sequences one after another, and the time to first token.
 *
 * The model is a preset with random weights (initialized as transformers
 * does; default gpt2-124m) or a Hugging Face folder (--model DIR; with
 * --random-weights only its config.json is read, so a ~1B Llama shape needs
 * no download). Every sequence has a prompt of --prompt-len random ids and
 * makes exactly --new-tokens greedy tokens. Usage:
 *   engine_bench [--preset NAME | --model DIR [--random-weights]]
 *                [--backend URI] [--plugin-dir DIR] [--dtype f32|bf16|f16]
 *                [--concurrency 1,8,32] [--prompt-len 32] [--new-tokens 32]
 *                [--chunk 32] [--context N]
 * Prints one line per concurrency: batched tokens/s, sequential tokens/s,
 * the speed-up, mean and worst time to first token, and the rows the decode
 * graphs ran (occupancy). serve_bench.py measures the same through the HTTP
 * server; docs/performance.md records both. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_registry.h"
#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"
#include "models/engine.h"
#include "models/llm.h"
#include "models/presets.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
  double *added, *first; /* per sequence: when it was added, its first token */
  int64_t tokens;
  int done;
} bench_run_t;

static void on_token(void *context, const ty_engine_token_t *t) {
  bench_run_t *r = context;
  intptr_t k = (intptr_t)t->user;
  if (r->first[k] == 0) r->first[k] = now_s();
  r->tokens++;
  if (t->finish) r->done++;
}

/* Runs `count` sequences, at most `at_once` at a time; returns tokens/s and
 * the mean and worst time to first token (each from its own start). */
static ty_status_t run_sequences(ty_engine_t *e, const int64_t *prompts, int64_t P, int64_t N,
                                 int count, int at_once, double *out_tps, double *out_ttft,
                                 double *out_ttft_max) {
  double *times = calloc((size_t)count * 2, sizeof(double));
  if (!times) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  bench_run_t r = {.added = times, .first = times + count};
  double t0 = now_s(), ttft_sum = 0, ttft_max = 0;
  int next = 0;
  ty_status_t s = TY_OK;
  while (!s && r.done < count) {
    while (!s && next < count && next - r.done < at_once) {
      ty_engine_request_t q = {.prompt = prompts + (size_t)next * (size_t)P, .prompt_len = P,
                               .max_new = N, .sampling = {.greedy = true},
                               .user = (void *)(intptr_t)next};
      r.added[next] = now_s();
      s = ty_engine_add(e, &q, NULL);
      next++;
    }
    if (!s) s = ty_engine_step(e, on_token, &r);
  }
  double elapsed = now_s() - t0;
  for (int k = 0; k < count; ++k) {
    double ttft = r.first[k] - r.added[k];
    ttft_sum += ttft;
    ttft_max = ttft > ttft_max ? ttft : ttft_max;
  }
  *out_tps = (double)r.tokens / elapsed;
  *out_ttft = ttft_sum / count;
  *out_ttft_max = ttft_max;
  free(times);
  return s;
}

static int usage(void) {
  fprintf(stderr, "usage: engine_bench [--preset NAME | --model DIR [--random-weights]] "
                  "[--backend URI] [--plugin-dir DIR] [--dtype D] [--concurrency LIST] "
                  "[--prompt-len P] [--new-tokens N] [--chunk C] [--context N]\n");
  return 2;
}

int main(int argc, char **argv) {
  const char *preset = "gpt2-124m", *model = NULL, *backend = "cpu";
  const char *plugin_dir = NULL, *conc = "1,8,32";
  bool random_weights = false;
  int64_t P = 32, N = 32, chunk = 32, context = 0;
  ty_dtype_t dtype = TY_DTYPE_F32;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--random-weights")) {
      random_weights = true;
      continue;
    }
    if (!v) return usage();
    ++i;
    if (!strcmp(a, "--preset")) preset = v;
    else if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--backend")) backend = v;
    else if (!strcmp(a, "--plugin-dir")) plugin_dir = v;
    else if (!strcmp(a, "--concurrency")) conc = v;
    else if (!strcmp(a, "--prompt-len")) P = atoll(v);
    else if (!strcmp(a, "--new-tokens")) N = atoll(v);
    else if (!strcmp(a, "--chunk")) chunk = atoll(v);
    else if (!strcmp(a, "--context")) context = atoll(v);
    else if (!strcmp(a, "--dtype")) {
      ty_status_t s = ty_dtype_parse(v, &dtype);
      if (s) {
        ty_status_free(s);
        return usage();
      }
    } else {
      return usage();
    }
  }
  int levels[16], level_count = 0, max_level = 1;
  for (char *c = (char *)conc; *c && level_count < 16;) {
    levels[level_count] = atoi(c);
    if (levels[level_count] < 1) return usage();
    max_level = levels[level_count] > max_level ? levels[level_count] : max_level;
    level_count++;
    c = strchr(c, ',');
    if (!c) break;
    c++;
  }
  if (P < 1 || N < 1 || chunk < 1) return usage();
  ty_model_config_t config;
  ty_status_t s = model ? ty_model_config_load(model, &config)
                        : ty_model_preset(preset, 50257, 50256, 50256, &config);
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  ty_graph_t *g = NULL;
  ty_llm_t m = {0};
  ty_session_t *weights = NULL;
  ty_engine_t *e = NULL;
  int64_t *prompts = malloc((size_t)(max_level * P) * sizeof(int64_t));
  if (!s && !prompts) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = ty_bench_registry_create(plugin_dir, &registry);
  if (!s) s = ty_device_open(registry, backend, &device);
  /* Random weights live in a one-token graph's session the engine shares. */
  if (!s && (!model || random_weights)) {
    ty_llm_options_t lo = {.batch = 1, .seq = 1, .dtype = dtype, .logits_output = true};
    s = ty_graph_create(&g);
    if (!s) s = ty_llm_build(g, &config, &lo, &m);
    if (!s) s = ty_session_create(device, g, NULL, &weights);
    if (!s) s = ty_llm_init_weights(&m, weights, 1);
  }
  if (!context) context = P + N;
  if (!s) {
    ty_engine_options_t o = {.dtype = dtype, .max_batch = max_level, .context = context,
                             .prefill_chunk = chunk < context ? chunk : context,
                             .weights_from = weights};
    double t0 = now_s();
    s = ty_engine_create(device, &config, &o, &e);
    if (!s) {
      printf("engine: %s %s on %s, %d slots, context %lld, chunk %lld, compiled in %.2f s\n",
             model ? model : preset, ty_dtype_name(dtype), ty_device_label(device), max_level,
             (long long)context, (long long)o.prefill_chunk, now_s() - t0);
    }
  }
  if (!s && model && !random_weights) s = ty_engine_load_weights(e, model, NULL, NULL);
  for (int64_t i = 0; i < max_level * P; ++i) {
    prompts[i] = (int64_t)((uint64_t)(i * 2654435761u) % (uint64_t)config.vocab_size);
  }
  double tps, ttft, ttft_max;
  if (!s) {
    double t0 = now_s();
    s = ty_engine_warm_up(e);
    if (!s) printf("warm-up (every graph compiled and run once): %.2f s\n", now_s() - t0);
  }
  printf("%-11s %12s %12s %8s %10s %10s %10s\n", "concurrency", "batched t/s", "sequential",
         "speedup", "ttft mean", "ttft max", "occupancy");
  for (int l = 0; l < level_count && !s; ++l) {
    int c = levels[l];
    double seq_tps, seq_ttft, seq_max;
    /* Sequential: the same c sequences one after another. */
    s = run_sequences(e, prompts, P, N, c, 1, &seq_tps, &seq_ttft, &seq_max);
    ty_engine_stats_t before = ty_engine_stats(e);
    if (!s) s = run_sequences(e, prompts, P, N, c, c, &tps, &ttft, &ttft_max);
    ty_engine_stats_t after = ty_engine_stats(e);
    if (s) break;
    double rows = (double)(after.decode_rows - before.decode_rows);
    double occupancy = rows > 0 ? (double)(after.decode_tokens - before.decode_tokens) / rows : 0;
    printf("%-11d %12.1f %12.1f %7.2fx %8.1fms %8.1fms %9.0f%%\n", c, tps, seq_tps,
           tps / seq_tps, ttft * 1e3, ttft_max * 1e3, occupancy * 100);
    fflush(stdout);
  }
  ty_engine_destroy(e);
  ty_session_destroy(weights);
  ty_llm_deinit(&m);
  ty_graph_destroy(g);
  ty_device_close(device);
  ty_registry_destroy(registry);
  free(prompts);
  if (s) {
    fprintf(stderr, "engine_bench: %s: %s\n", ty_code_name(ty_status_code(s)),
            ty_status_message(s));
    ty_status_free(s);
    return 1;
  }
  return 0;
}
