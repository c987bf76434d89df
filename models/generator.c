/* One sequence at a time on the generation engine (see generator.h). */
#include "models/generator.h"

#include <stdlib.h>
#include <time.h>

#include "models/engine.h"

struct ty_generator_t {
  ty_engine_t *engine;
  int64_t prompt_len, max_new;
};

static double ty_gen_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

ty_status_t ty_generator_create(ty_device_t *device, const ty_model_config_t *config,
                                const ty_generator_options_t *options,
                                ty_generator_t **out_generator) {
  *out_generator = NULL;
  int64_t P = options->prompt_len, N = options->max_new;
  if (P < 1 || N < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "generation needs a prompt of 1 or more tokens and 1 or more new "
                          "tokens (got %lld and %lld)",
                          (long long)P, (long long)N);
  }
  if (P > config->max_positions || N > config->max_positions - P) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "a prompt of %lld tokens + %lld new tokens exceeds the model's %lld "
                          "positions",
                          (long long)P, (long long)N, (long long)config->max_positions);
  }
  ty_generator_t *g = calloc(1, sizeof(*g));
  if (!g) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  g->prompt_len = P;
  g->max_new = N;
  /* The whole prompt is one chunk: no padding, one prefill run. */
  ty_engine_options_t o = {.dtype = options->dtype, .compute_dtype = options->compute_dtype,
                           .max_batch = 1, .context = P + N, .prefill_chunk = P,
                           .weights_from = options->weights_from,
                           .cache_dir = options->cache_dir,
                           .retry_failed = options->retry_failed,
                           .fallback_device = options->fallback_device,
                           .check_numerics = options->check_numerics,
                           .deterministic = options->deterministic,
                           .speculate = options->speculate};
  ty_status_t s = ty_engine_create(device, config, &o, &g->engine);
  if (s) {
    free(g);
    return s;
  }
  *out_generator = g;
  return TY_OK;
}

const ty_numerics_finding_t *ty_generator_numerics_finding(const ty_generator_t *g,
                                                           uint32_t *out_node_count) {
  return ty_engine_numerics_finding(g->engine, out_node_count);
}

void ty_generator_destroy(ty_generator_t *g) {
  if (!g) return;
  ty_engine_destroy(g->engine);
  free(g);
}

ty_status_t ty_generator_load_weights(ty_generator_t *g, const char *dir,
                                      const ty_llm_load_options_t *options,
                                      ty_llm_load_report_t *out_report) {
  return ty_engine_load_weights(g->engine, dir, options, out_report);
}

typedef struct {
  ty_generation_t *out;
  bool done;
  double t_first;
} ty_gen_collect_t;

static void ty_gen_collect(void *context, const ty_engine_token_t *token) {
  ty_gen_collect_t *c = context;
  if (c->out->count == 0) c->t_first = ty_gen_now();
  c->out->ids[c->out->count++] = token->id;
  if (token->finish) c->done = true;
}

ty_status_t ty_generator_run(ty_generator_t *g, const int64_t *prompt,
                             const ty_sampling_t *sampling, int64_t stop_eos,
                             ty_generation_t *out) {
  out->count = 0;
  out->prefill_seconds = out->decode_seconds = 0;
  ty_engine_request_t r = {.prompt = prompt, .prompt_len = g->prompt_len,
                           .max_new = g->max_new, .sampling = *sampling};
  if (stop_eos >= 0) r.stop_ids[r.stop_id_count++] = stop_eos;
  uint64_t sequence;
  double t0 = ty_gen_now();
  TY_RETURN_IF_ERROR(ty_engine_add(g->engine, &r, &sequence));
  ty_gen_collect_t c = {.out = out, .t_first = t0};
  ty_status_t s = TY_OK;
  while (!s && !c.done) s = ty_engine_step(g->engine, ty_gen_collect, &c);
  /* After an error the sequence may still hold the slot: free it. */
  ty_engine_cancel(g->engine, sequence);
  out->prefill_seconds = c.t_first - t0;
  out->decode_seconds = ty_gen_now() - c.t_first;
  return s;
}
