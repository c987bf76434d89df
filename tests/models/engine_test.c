/* The generation engine (models/engine.h) on the tiny model fixtures: many
 * sequences of different lengths sharing decode steps, joining and leaving
 * between steps, with prompts split into padded chunks, must give each
 * sequence exactly the greedy tokens it gets alone (models/generator.h, one
 * unpadded prefill); log-probabilities must match a plain forward pass of
 * the whole sequence; seeded samples must not depend on what shares the
 * batch; slots are freed by finishing and by cancel; bad requests and
 * options are refused with their reason. Under bf16-mixed (f32 weights,
 * bf16 matmuls, logits in bf16) the batched engine's log-probabilities
 * track a plain bf16-mixed forward pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "hal/device.h"
#include "hal/registry.h"
#include "models/checkpoint.h"
#include "models/engine.h"
#include "models/generator.h"
#include "models/llm.h"
#include "models/safetensors.h"

#define MAX_SEQ 8
#define MAX_NEW 16

typedef struct {
  int64_t ids[MAX_SEQ][MAX_NEW];
  double logprob[MAX_SEQ][MAX_NEW];
  int64_t top_ids[MAX_SEQ][MAX_NEW][5];
  double top_lp[MAX_SEQ][MAX_NEW][5];
  int64_t count[MAX_SEQ];
  ty_engine_finish_t finish[MAX_SEQ];
  int done;
} collected_t;

static void collect(void *context, const ty_engine_token_t *t) {
  collected_t *c = context;
  intptr_t k = (intptr_t)t->user;
  assert_true(k >= 0 && k < MAX_SEQ);
  assert_int_equal(t->index, c->count[k]);
  assert_true(c->count[k] < MAX_NEW);
  c->ids[k][c->count[k]] = t->id;
  c->logprob[k][c->count[k]] = t->logprob;
  for (int32_t i = 0; i < t->top_count && i < 5; ++i) {
    c->top_ids[k][c->count[k]][i] = t->top_ids[i];
    c->top_lp[k][c->count[k]][i] = t->top_logprobs[i];
  }
  c->count[k]++;
  if (t->finish) {
    c->finish[k] = t->finish;
    c->done++;
  }
}

static ty_registry_t *registry;
static ty_device_t *device;

static int setup(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  TY_EXPECT_OK(ty_registry_create(&options, &registry));
  TY_EXPECT_OK(ty_device_open(registry, "cpu", &device));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ty_device_close(device);
  ty_registry_destroy(registry);
  return 0;
}

static void model_dir(const char *name, char *out, size_t size) {
  snprintf(out, size, "%s/%s", TY_TEST_MODEL_DIR, name);
}

/* An engine on fixture `name` with its weights loaded. */
static ty_engine_t *open_engine(const char *name, int64_t slots, int64_t context, int64_t chunk,
                                ty_model_config_t *config) {
  char dir[512];
  model_dir(name, dir, sizeof(dir));
  TY_EXPECT_OK(ty_model_config_load(dir, config));
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = slots, .context = context,
                           .prefill_chunk = chunk};
  ty_engine_t *e = NULL;
  TY_EXPECT_OK(ty_engine_create(device, config, &o, &e));
  TY_EXPECT_OK(ty_engine_load_weights(e, dir, NULL, NULL));
  return e;
}

/* Six prompts of 1..11 tokens and 4..12 new tokens each. */
static const int64_t prompt_len[6] = {5, 1, 11, 3, 8, 2};
static const int64_t new_len[6] = {7, 12, 4, 9, 6, 10};

static void make_prompt(int k, int64_t vocab, int64_t *out) {
  for (int64_t i = 0; i < prompt_len[k]; ++i) out[i] = (k * 7 + i * 13 + 3) % vocab;
}

/* The greedy tokens of prompt k alone (one slot, the whole prompt at once). */
static void alone(const char *dir, const ty_model_config_t *config, int k, int64_t *out) {
  ty_generator_options_t o = {.dtype = TY_DTYPE_F32, .prompt_len = prompt_len[k],
                              .max_new = new_len[k]};
  ty_generator_t *g = NULL;
  TY_EXPECT_OK(ty_generator_create(device, config, &o, &g));
  TY_EXPECT_OK(ty_generator_load_weights(g, dir, NULL, NULL));
  int64_t prompt[16];
  make_prompt(k, config->vocab_size, prompt);
  ty_sampling_t greedy = {.greedy = true};
  ty_generation_t gen = {.ids = out};
  TY_EXPECT_OK(ty_generator_run(g, prompt, &greedy, -1, &gen));
  assert_int_equal(gen.count, new_len[k]);
  ty_generator_destroy(g);
}

/* Runs the six prompts through an engine of `slots` slots, a prefill
 * chunk of `chunk` and a prefill budget of `budget` tokens per step (0: one
 * chunk), adding each as soon as a slot is free. */
static void batched_in(const char *dir, const ty_model_config_t *config, int64_t slots,
                       int64_t chunk, int64_t budget, ty_dtype_t compute_dtype, bool overlap,
                       collected_t *c) {
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .compute_dtype = compute_dtype,
                           .max_batch = slots, .context = 32, .prefill_chunk = chunk,
                           .prefill_budget = budget, .overlap = overlap};
  ty_engine_t *e = NULL;
  TY_EXPECT_OK(ty_engine_create(device, config, &o, &e));
  TY_EXPECT_OK(ty_engine_load_weights(e, dir, NULL, NULL));
  /* The warm-up's garbage in the slot caches must never show. */
  TY_EXPECT_OK(ty_engine_warm_up(e));
  memset(c, 0, sizeof(*c));
  int next = 0, steps = 0;
  while (c->done < 6) {
    while (next < 6 && ty_engine_free_slots(e) > 0) {
      int64_t prompt[16];
      make_prompt(next, config->vocab_size, prompt);
      ty_engine_request_t r = {.prompt = prompt, .prompt_len = prompt_len[next],
                               .max_new = new_len[next], .sampling = {.greedy = true},
                               .logprobs = true, .top_logprobs = 5,
                               .user = (void *)(intptr_t)next};
      TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
      next++;
    }
    TY_EXPECT_OK(ty_engine_step(e, collect, c));
    assert_true(++steps < 200);
  }
  ty_engine_stats_t st = ty_engine_stats(e);
  assert_int_equal(st.busy, 0);
  assert_int_equal(st.prefilling, 0);
  int64_t prompt_total = 0;
  for (int k = 0; k < 6; ++k) prompt_total += prompt_len[k];
  assert_int_equal(st.prefill_tokens, prompt_total);
  ty_engine_destroy(e);
}

static void batched(const char *dir, const ty_model_config_t *config, int64_t slots,
                    int64_t chunk, int64_t budget, bool overlap, collected_t *c) {
  batched_in(dir, config, slots, chunk, budget, TY_DTYPE_INVALID, overlap, c);
}

/* log softmax of a plain forward pass over prompt + new tokens, computing
 * in `compute_dtype` (logits in that dtype), within `bound`. */
static void check_logprobs_in(const char *dir, const ty_model_config_t *config, int k,
                              const collected_t *c, ty_dtype_t compute_dtype, double bound) {
  int64_t P = prompt_len[k], N = c->count[k], T = P + N - 1, V = config->vocab_size;
  int64_t tokens[64];
  make_prompt(k, V, tokens);
  for (int64_t i = 0; i + 1 < N; ++i) tokens[P + i] = c->ids[k][i];
  ty_graph_t *g = NULL;
  ty_llm_t m;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_llm_options_t o = {.batch = 1, .seq = T, .dtype = TY_DTYPE_F32,
                        .compute_dtype = compute_dtype, .logits_output = true};
  TY_EXPECT_OK(ty_llm_build(g, config, &o, &m));
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(device, g, NULL, &s));
  TY_EXPECT_OK(ty_llm_load_weights(&m, s, dir));
  int64_t bt[2] = {1, T};
  TY_EXPECT_OK(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, tokens, (size_t)T * 8));
  TY_EXPECT_OK(ty_session_run(s));
  const ty_dtype_t ld = compute_dtype == TY_DTYPE_INVALID ? TY_DTYPE_F32 : compute_dtype;
  float *logits = malloc((size_t)(T * V) * sizeof(float));
  void *raw = malloc((size_t)(T * V) * ty_dtype_size(ld));
  assert_true(logits && raw);
  TY_EXPECT_OK(ty_session_read(s, "logits", raw, (size_t)(T * V) * ty_dtype_size(ld)));
  TY_EXPECT_OK(ty_safetensors_convert(ld, raw, TY_DTYPE_F32, logits, (size_t)(T * V)));
  free(raw);
  for (int64_t i = 0; i < N; ++i) {
    const float *row = logits + (P - 1 + i) * V;
    double max = row[0], sum = 0;
    for (int64_t v = 1; v < V; ++v) max = row[v] > max ? row[v] : max;
    for (int64_t v = 0; v < V; ++v) sum += exp(row[v] - max);
    double want = row[c->ids[k][i]] - max - log(sum);
    if (fabs(c->logprob[k][i] - want) > bound) {
      fail_msg("sequence %d token %lld: logprob %.9f, forward %.9f", k, (long long)i,
               c->logprob[k][i], want);
    }
    /* Greedy: the chosen token is the most likely one. */
    assert_int_equal(c->top_ids[k][i][0], c->ids[k][i]);
    for (int j = 0; j < 5; ++j) {
      double lp = row[c->top_ids[k][i][j]] - max - log(sum);
      assert_true(fabs(c->top_lp[k][i][j] - lp) <= bound);
      if (j) assert_true(c->top_lp[k][i][j] <= c->top_lp[k][i][j - 1]);
    }
  }
  free(logits);
  ty_session_destroy(s);
  ty_llm_deinit(&m);
  ty_graph_destroy(g);
}

static void check_logprobs(const char *dir, const ty_model_config_t *config, int k,
                           const collected_t *c) {
  check_logprobs_in(dir, config, k, c, TY_DTYPE_INVALID, 1e-5);
}

static void test_batched_equals_alone(void **state) {
  (void)state;
  const char *models[] = {"gpt2", "llama", "llama3", "qwen2", "mistral"};
  for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); ++m) {
    char dir[512];
    model_dir(models[m], dir, sizeof(dir));
    ty_model_config_t config;
    TY_EXPECT_OK(ty_model_config_load(dir, &config));
    int64_t want[6][MAX_NEW];
    for (int k = 0; k < 6; ++k) alone(dir, &config, k, want[k]);
    /* 3 slots (graphs of 1, 2 and 3 rows) and chunks of 4 (padded last
     * chunks); then 8 slots with chunks of 1 token (prefill one by one);
     * then 8 slots prefilling up to 6 chunks of 2 per step (--prefill-budget).
     * The first and the last overlap the host's work with the runs
     * (options.overlap: tokens, log-probabilities and top lists held while
     * the next run is launched). */
    const int64_t shapes[3][4] = {{3, 4, 0, 1}, {8, 1, 0, 0}, {8, 2, 12, 1}};
    for (int sh = 0; sh < 3; ++sh) {
      collected_t c;
      batched(dir, &config, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3] != 0,
              &c);
      for (int k = 0; k < 6; ++k) {
        assert_int_equal(c.count[k], new_len[k]);
        assert_int_equal(c.finish[k], TY_ENGINE_LENGTH);
        for (int64_t i = 0; i < new_len[k]; ++i) {
          if (c.ids[k][i] != want[k][i]) {
            fail_msg("%s, %lld slots, chunk %lld: sequence %d token %lld is %lld alone, %lld "
                     "batched", models[m], (long long)shapes[sh][0], (long long)shapes[sh][1],
                     k, (long long)i, (long long)want[k][i], (long long)c.ids[k][i]);
          }
        }
        if (sh < 2) check_logprobs(dir, &config, k, &c);
      }
    }
    printf("%-8s 6 sequences batched = alone, logprobs = forward\n", models[m]);
  }
}

/* bf16-mixed (the engine's logits come back in bf16): every sequence
 * finishes, and each token's log-probability is a plain bf16-mixed
 * forward's within bf16's rounding of the logits and of batched matmuls. */
static void test_bf16_mixed(void **state) {
  (void)state;
  char dir[512];
  model_dir("llama", dir, sizeof(dir));
  ty_model_config_t config;
  TY_EXPECT_OK(ty_model_config_load(dir, &config));
  collected_t c;
  batched_in(dir, &config, 3, 4, 0, TY_DTYPE_BF16, false, &c);
  for (int k = 0; k < 6; ++k) {
    assert_int_equal(c.count[k], new_len[k]);
    check_logprobs_in(dir, &config, k, &c, TY_DTYPE_BF16, 5e-2);
  }
}

/* Sequence 0 sampled with a seed, alone and then beside three others. */
static void test_seeded_sampling_ignores_neighbours(void **state) {
  (void)state;
  ty_model_config_t config;
  ty_engine_t *e = open_engine("llama", 4, 32, 4, &config);
  int64_t runs[2][MAX_NEW];
  for (int run = 0; run < 2; ++run) {
    collected_t c;
    memset(&c, 0, sizeof(c));
    int sequences = run == 0 ? 1 : 4;
    for (int k = 0; k < sequences; ++k) {
      int64_t prompt[16];
      make_prompt(k, config.vocab_size, prompt);
      ty_engine_request_t r = {.prompt = prompt, .prompt_len = prompt_len[k], .max_new = 12,
                               .sampling = {.temperature = 1.3, .top_k = 40, .top_p = 0.9,
                                            .seed = 1234 + (uint64_t)k},
                               .user = (void *)(intptr_t)k};
      TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
    }
    while (c.done < sequences) TY_EXPECT_OK(ty_engine_step(e, collect, &c));
    memcpy(runs[run], c.ids[0], sizeof(runs[run]));
    assert_int_equal(c.count[0], 12);
  }
  assert_memory_equal(runs[0], runs[1], 12 * sizeof(int64_t));
  ty_engine_destroy(e);
}

/* --prefill-budget: while nothing decodes a step takes every prompt it
 * can (two new requests both have their first token after one step); while
 * streams decode, a step prefills at most the budget: two more requests of
 * one chunk each take two steps to their first tokens with a budget of one
 * chunk (the default), one step with a budget of two. */
static int64_t steps_to_first_tokens(ty_model_config_t *config, const char *dir,
                                     int64_t budget) {
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = 4, .context = 24,
                           .prefill_chunk = 8, .prefill_budget = budget};
  ty_engine_t *e = NULL;
  TY_EXPECT_OK(ty_engine_create(device, config, &o, &e));
  TY_EXPECT_OK(ty_engine_load_weights(e, dir, NULL, NULL));
  int64_t prompt[8];
  for (int i = 0; i < 8; ++i) prompt[i] = (i * 5 + 1) % config->vocab_size;
  ty_engine_request_t r = {.prompt = prompt, .prompt_len = 4, .max_new = 10,
                           .sampling = {.greedy = true}, .user = (void *)(intptr_t)0};
  TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
  r.user = (void *)(intptr_t)1;
  TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
  collected_t c;
  memset(&c, 0, sizeof(c));
  TY_EXPECT_OK(ty_engine_step(e, collect, &c));
  assert_int_equal(c.count[0], 1);
  assert_int_equal(c.count[1], 1);
  assert_int_equal(c.ids[0][0], c.ids[1][0]); /* the same prompt, greedy */
  r.prompt_len = 8;
  r.max_new = 2;
  for (int k = 2; k < 4; ++k) {
    r.user = (void *)(intptr_t)k;
    TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
  }
  int64_t steps = 0;
  while (c.count[2] == 0 || c.count[3] == 0) {
    TY_EXPECT_OK(ty_engine_step(e, collect, &c));
    steps++;
  }
  /* The two streams made a token every step meanwhile. */
  assert_int_equal(c.count[0], 1 + steps);
  assert_int_equal(c.count[1], 1 + steps);
  ty_engine_destroy(e);
  return steps;
}

static void test_prefill_budget(void **state) {
  (void)state;
  char dir[512];
  model_dir("gpt2", dir, sizeof(dir));
  ty_model_config_t config;
  TY_EXPECT_OK(ty_model_config_load(dir, &config));
  assert_int_equal(steps_to_first_tokens(&config, dir, 0), 2);
  assert_int_equal(steps_to_first_tokens(&config, dir, 16), 1);
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = 2, .context = 24,
                           .prefill_chunk = 8, .prefill_budget = 49};
  ty_engine_t *e = NULL;
  /* Budgets past every slot's context are refused. */
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &o, &e), TY_CODE_INVALID_ARGUMENT,
                   "prefill budget 49 must be in 0..48");
  o.prefill_budget = -1;
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &o, &e), TY_CODE_INVALID_ARGUMENT,
                   "prefill budget -1");
}

/* options.overlap: a step takes the run in flight and launches the next
 * before it emits, so a sequence cancelled between steps is still in the
 * run in flight; its row is dropped, and a new sequence that takes its slot
 * meanwhile gets exactly its own tokens (those it makes alone). Every block
 * is back at the end, and destroying the engine with a run in flight waits
 * for it. */
static void test_overlap_cancel_in_flight(void **state) {
  (void)state;
  char dir[512];
  model_dir("gpt2", dir, sizeof(dir));
  ty_model_config_t config;
  TY_EXPECT_OK(ty_model_config_load(dir, &config));
  int64_t want[6][MAX_NEW];
  for (int k = 0; k < 3; ++k) alone(dir, &config, k, want[k]);
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = 2, .context = 32,
                           .prefill_chunk = 16, .overlap = true};
  ty_engine_t *e = NULL;
  TY_EXPECT_OK(ty_engine_create(device, &config, &o, &e));
  TY_EXPECT_OK(ty_engine_load_weights(e, dir, NULL, NULL));
  const int64_t all = ty_engine_stats(e).kv_free;
  collected_t c;
  memset(&c, 0, sizeof(c));
  uint64_t id[3];
  for (int k = 0; k < 3; ++k) {
    int64_t prompt[16];
    make_prompt(k, config.vocab_size, prompt);
    ty_engine_request_t r = {.prompt = prompt, .prompt_len = prompt_len[k],
                             .max_new = new_len[k], .sampling = {.greedy = true},
                             .user = (void *)(intptr_t)k};
    if (k == 2) {
      /* Sequence 0 is in the run in flight (its second token): cancel it
       * and give its slot to sequence 2 before that run is taken. */
      ty_engine_cancel(e, id[0]);
      assert_int_equal(ty_engine_free_slots(e), 1);
    }
    TY_EXPECT_OK(ty_engine_add(e, &r, &id[k]));
    if (k == 0) continue;
    if (k == 1) {
      /* The first step launches both prompts and emits nothing yet; the
       * second takes their first tokens and launches their next. */
      TY_EXPECT_OK(ty_engine_step(e, collect, &c));
      assert_int_equal(c.count[0] + c.count[1], 0);
      TY_EXPECT_OK(ty_engine_step(e, collect, &c));
      assert_int_equal(c.count[0], 1);
      assert_int_equal(c.count[1], 1);
    }
  }
  int steps = 0;
  while (c.finish[1] == TY_ENGINE_RUNNING || c.finish[2] == TY_ENGINE_RUNNING) {
    TY_EXPECT_OK(ty_engine_step(e, collect, &c));
    assert_true(++steps < 100);
  }
  assert_int_equal(c.count[0], 1); /* its in-flight row was dropped */
  for (int k = 1; k < 3; ++k) {
    assert_int_equal(c.count[k], new_len[k]);
    for (int64_t i = 0; i < new_len[k]; ++i) assert_int_equal(c.ids[k][i], want[k][i]);
  }
  ty_engine_stats_t st = ty_engine_stats(e);
  assert_int_equal(st.busy, 0);
  assert_int_equal(st.kv_free, all);
  /* A run in flight when the engine goes: destroy waits for it. */
  int64_t prompt[16];
  make_prompt(3, config.vocab_size, prompt);
  ty_engine_request_t r = {.prompt = prompt, .prompt_len = prompt_len[3], .max_new = 4,
                           .sampling = {.greedy = true}, .user = (void *)(intptr_t)3};
  TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
  TY_EXPECT_OK(ty_engine_step(e, collect, &c));
  ty_engine_destroy(e);
}

static void test_slots_cancel_and_stop(void **state) {
  (void)state;
  ty_model_config_t config;
  ty_engine_t *e = open_engine("gpt2", 2, 24, 8, &config);
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = 2, .context = 24,
                           .prefill_chunk = 8};
  int64_t prompt[4] = {1, 2, 3, 4};
  ty_engine_request_t r = {.prompt = prompt, .prompt_len = 4, .max_new = 10,
                           .sampling = {.greedy = true}, .user = (void *)(intptr_t)0};
  uint64_t a, b;
  TY_EXPECT_OK(ty_engine_add(e, &r, &a));
  TY_EXPECT_STATUS(ty_engine_warm_up(e), TY_CODE_FAILED_PRECONDITION, "before it takes");
  r.user = (void *)(intptr_t)1;
  TY_EXPECT_OK(ty_engine_add(e, &r, &b));
  assert_int_equal(ty_engine_free_slots(e), 0);
  TY_EXPECT_STATUS(ty_engine_add(e, &r, NULL), TY_CODE_RESOURCE_EXHAUSTED, "all 2 slots");
  collected_t c;
  memset(&c, 0, sizeof(c));
  /* Nothing decodes yet, so one step reads both prompts and each makes
   * its first token. */
  TY_EXPECT_OK(ty_engine_step(e, collect, &c));
  assert_int_equal(c.count[0], 1);
  assert_int_equal(c.count[1], 1);
  /* A cancelled sequence frees its slot and blocks at once and makes no
   * more tokens. */
  ty_engine_stats_t before = ty_engine_stats(e);
  ty_engine_cancel(e, a);
  ty_engine_cancel(e, a); /* twice: harmless */
  assert_int_equal(ty_engine_free_slots(e), 1);
  assert_true(ty_engine_stats(e).kv_free > before.kv_free);
  TY_EXPECT_OK(ty_engine_step(e, collect, &c));
  assert_int_equal(c.count[0], 1);
  assert_int_equal(c.count[1], 2);
  /* A stop id ends the sequence with the token included. */
  int64_t stop = c.ids[1][0];
  r.stop_ids[0] = stop;
  r.stop_id_count = 1;
  r.user = (void *)(intptr_t)2;
  TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
  while (c.finish[2] == TY_ENGINE_RUNNING) TY_EXPECT_OK(ty_engine_step(e, collect, &c));
  assert_int_equal(c.finish[2], TY_ENGINE_STOP);
  assert_int_equal(c.count[2], 1);
  assert_int_equal(c.ids[2][0], stop);
  ty_engine_cancel(e, b);
  assert_int_equal(ty_engine_free_slots(e), 2);
  /* Bad requests. */
  int64_t bad[2] = {1, 96};
  ty_engine_request_t q = r;
  q.prompt = bad;
  q.prompt_len = 2;
  TY_EXPECT_STATUS(ty_engine_add(e, &q, NULL), TY_CODE_INVALID_ARGUMENT,
                   "prompt token 96 (position 1) is not below the model's vocabulary size 96");
  q = r;
  q.max_new = 21;
  TY_EXPECT_STATUS(ty_engine_add(e, &q, NULL), TY_CODE_INVALID_ARGUMENT,
                   "a prompt of 4 tokens + 21 new tokens exceeds the context of 24 tokens");
  q = r;
  q.top_logprobs = 21;
  TY_EXPECT_STATUS(ty_engine_add(e, &q, NULL), TY_CODE_INVALID_ARGUMENT, "top logprobs 21");
  q = r;
  q.sampling = (ty_sampling_t){.temperature = 0};
  TY_EXPECT_STATUS(ty_engine_add(e, &q, NULL), TY_CODE_INVALID_ARGUMENT, "temperature > 0");
  ty_engine_destroy(e);
  /* Bad options. */
  ty_engine_options_t bo = o;
  bo.context = 65;
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &bo, &e), TY_CODE_INVALID_ARGUMENT,
                   "context 65 must be in 2..64");
  bo = o;
  bo.prefill_chunk = 25;
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &bo, &e), TY_CODE_INVALID_ARGUMENT,
                   "prefill chunk 25 must be in 1..24");
  bo = o;
  bo.max_batch = 0;
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &bo, &e), TY_CODE_INVALID_ARGUMENT,
                   "max batch 0");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_batched_equals_alone),
      cmocka_unit_test(test_bf16_mixed),
      cmocka_unit_test(test_seeded_sampling_ignores_neighbours),
      cmocka_unit_test(test_slots_cancel_and_stop),
      cmocka_unit_test(test_overlap_cancel_in_flight),
      cmocka_unit_test(test_prefill_budget),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
