/* The generation engine (see generator.h): a prefill and a decode session
 * sharing weights and KV caches, and the host-side sampler. */
#include "models/generator.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/dtype.h"
#include "models/checkpoint.h"
#include "models/llm.h"
#include "models/safetensors.h"

typedef struct {
  double p;
  int64_t id;
} ty_candidate_t;

struct ty_generator_t {
  ty_model_config_t config;
  ty_generator_options_t options;
  ty_graph_t *g_prefill, *g_decode;
  ty_llm_t m_prefill, m_decode;
  ty_session_t *s_prefill, *s_decode;
  void *raw;                 /* logits of the prefill, in the model's dtype */
  float *last;               /* the last row's logits as f32 */
  ty_candidate_t *scratch;   /* the sampler's sorted candidates */
};

static double ty_gen_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* splitmix64: the sampler's random numbers (host side, reproducible). */
static double ty_next_uniform(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static int ty_candidate_desc(const void *a, const void *b) {
  double pa = ((const ty_candidate_t *)a)->p, pb = ((const ty_candidate_t *)b)->p;
  return pa < pb ? 1 : pa > pb ? -1 : 0;
}

/* Picks the next token from one row of logits. Ties go to the lower id,
 * like torch.argmax. */
static int64_t ty_pick(const float *logits, int64_t vocab, const ty_sampling_t *a,
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

/* Builds a KV-cache graph of `seq` tokens and opens a session for it. */
static ty_status_t ty_open_step(ty_device_t *device, ty_generator_t *g, int64_t seq,
                                const ty_session_t *share, ty_graph_t **out_graph,
                                ty_llm_t *out_model, ty_session_t **out_session) {
  TY_RETURN_IF_ERROR(ty_graph_create(out_graph));
  ty_llm_options_t options = {.batch = 1, .seq = seq, .dtype = g->options.dtype,
                              .compute_dtype = g->options.compute_dtype,
                              .logits_output = true,
                              .cache_len = g->options.prompt_len + g->options.max_new};
  TY_RETURN_IF_ERROR(ty_llm_build(*out_graph, &g->config, &options, out_model));
  ty_session_options_t so = {.share_state_with = share, .cache_dir = g->options.cache_dir,
                             .fallback_device = g->options.fallback_device};
  return ty_session_create(device, *out_graph, &so, out_session);
}

/* Binds positions [start, start+T) and runs; the last row's logits go to
 * g->last as f32. */
static ty_status_t ty_step(ty_generator_t *g, ty_session_t *s, const int64_t *tokens, int64_t T,
                           int64_t start) {
  int64_t vocab = g->config.vocab_size;
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
  /* Logits come in the compute dtype (bf16 in bf16-mixed). */
  const ty_dtype_t ld = g->options.compute_dtype != TY_DTYPE_INVALID ? g->options.compute_dtype
                                                                     : g->options.dtype;
  size_t row = (size_t)vocab * ty_dtype_size(ld);
  if (!st) st = ty_session_read(s, "logits", g->raw, (size_t)T * row);
  if (!st) {
    st = ty_safetensors_convert(ld, (const char *)g->raw + (size_t)(T - 1) * row,
                                TY_DTYPE_F32, g->last, (size_t)vocab);
  }
  return st;
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
  g->config = *config;
  g->options = *options;
  int64_t V = config->vocab_size;
  g->raw = malloc((size_t)P * (size_t)V * 8);
  g->last = malloc((size_t)V * sizeof(float));
  g->scratch = malloc((size_t)V * sizeof(ty_candidate_t));
  ty_status_t s = g->raw && g->last && g->scratch
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) {
    s = ty_open_step(device, g, P, options->weights_from, &g->g_prefill, &g->m_prefill,
                     &g->s_prefill);
  }
  if (!s) s = ty_open_step(device, g, 1, g->s_prefill, &g->g_decode, &g->m_decode, &g->s_decode);
  if (s) {
    ty_generator_destroy(g);
    return s;
  }
  *out_generator = g;
  return TY_OK;
}

void ty_generator_destroy(ty_generator_t *g) {
  if (!g) return;
  ty_session_destroy(g->s_decode);
  ty_session_destroy(g->s_prefill);
  ty_llm_deinit(&g->m_decode);
  ty_llm_deinit(&g->m_prefill);
  ty_graph_destroy(g->g_decode);
  ty_graph_destroy(g->g_prefill);
  free(g->raw);
  free(g->last);
  free(g->scratch);
  free(g);
}

ty_status_t ty_generator_load_weights(ty_generator_t *g, const char *dir,
                                      const ty_llm_load_options_t *options,
                                      ty_llm_load_report_t *out_report) {
  return ty_llm_load_weights_with(&g->m_prefill, g->s_prefill, dir, options, out_report);
}

ty_status_t ty_generator_run(ty_generator_t *g, const int64_t *prompt,
                             const ty_sampling_t *sampling, int64_t stop_eos,
                             ty_generation_t *out) {
  int64_t P = g->options.prompt_len, V = g->config.vocab_size;
  out->count = 0;
  out->prefill_seconds = out->decode_seconds = 0;
  for (int64_t i = 0; i < P; ++i) {
    if (prompt[i] < 0 || prompt[i] >= V) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "prompt token %lld (position %lld) is not below the model's "
                            "vocabulary size %lld",
                            (long long)prompt[i], (long long)i, (long long)V);
    }
  }
  uint64_t rng = sampling->seed;
  double t0 = ty_gen_now(), t_first = t0;
  ty_status_t s = ty_step(g, g->s_prefill, prompt, P, 0);
  while (!s && out->count < g->options.max_new) {
    int64_t next = ty_pick(g->last, V, sampling, &rng, g->scratch);
    out->ids[out->count++] = next;
    if (out->count == 1) t_first = ty_gen_now();
    if (stop_eos >= 0 && next == stop_eos) break;
    if (out->count == g->options.max_new) break;
    s = ty_step(g, g->s_decode, &next, 1, P + out->count - 1);
  }
  out->prefill_seconds = t_first - t0;
  out->decode_seconds = ty_gen_now() - t_first;
  return s;
}
