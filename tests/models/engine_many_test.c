/* The paged engine under load (issue 29's acceptance 1 and 2 on cpu): 64
 * requests at once with prompts of 1..1000 tokens (a quarter sharing a
 * 300-token prefix) and 1..24 new tokens each, on the tiny Llama-3 fixture
 * (GQA, 2048 positions), in deterministic mode. Every request's greedy
 * tokens must equal, bit for bit, those it gets alone (an engine of one
 * slot, no prefix cache, run one request at a time); seeded sampling
 * likewise. Then again with a KV pool far too small for all 64, so that
 * sequences wait for blocks and are preempted and recomputed: the tokens
 * must not change, and afterwards every block is free again. With
 * speculative decoding (prompt lookup, 4 drafts) the tokens must not
 * change either, and some drafts must have been accepted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "hal/device.h"
#include "hal/registry.h"
#include "models/engine.h"

#define REQUESTS 64
#define MAX_NEW 24
#define CONTEXT 1100
#ifdef TY_ENGINE_MANY_SMALL
/* Sanitizer builds (TY_SANITIZE): the same 64 requests, scheduler, pools
 * and preemption on prompts of 1..250 tokens (a 100-token shared prefix),
 * a quarter of the work; the gcc build runs the full size. */
#define MAX_PROMPT 250
#define SHARED 100
#else
#define MAX_PROMPT 1000
#define SHARED 300
#endif

typedef struct {
  int64_t ids[REQUESTS][MAX_NEW];
  int64_t count[REQUESTS];
  int done;
} collected_t;

static void collect(void *context, const ty_engine_token_t *t) {
  collected_t *c = context;
  intptr_t k = (intptr_t)t->user;
  assert_true(k >= 0 && k < REQUESTS);
  assert_int_equal(t->index, c->count[k]);
  assert_true(c->count[k] < MAX_NEW);
  c->ids[k][c->count[k]++] = t->id;
  if (t->finish) c->done++;
}

static ty_registry_t *registry;
static ty_device_t *device;
static ty_model_config_t config;
static char dir[512];
static int64_t *prompts[REQUESTS];
static int64_t prompt_len[REQUESTS], new_len[REQUESTS];

static uint64_t next_random(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

static int setup(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  TY_EXPECT_OK(ty_registry_create(&options, &registry));
  TY_EXPECT_OK(ty_device_open(registry, "cpu", &device));
  snprintf(dir, sizeof(dir), "%s/llama3", TY_TEST_MODEL_DIR);
  TY_EXPECT_OK(ty_model_config_load(dir, &config));
  assert_true(config.max_positions >= CONTEXT);
  uint64_t rng = 29;
  for (int k = 0; k < REQUESTS; ++k) {
    /* The extremes, then a spread; every fourth shares the system prefix. */
    prompt_len[k] = k == 0 ? 1 : k == 1 ? MAX_PROMPT : 1 + (int64_t)(next_random(&rng) % MAX_PROMPT);
    if (k % 4 == 2 && prompt_len[k] <= SHARED) prompt_len[k] += SHARED;
    if (prompt_len[k] > MAX_PROMPT) prompt_len[k] = MAX_PROMPT;
    new_len[k] = 1 + (int64_t)(next_random(&rng) % MAX_NEW);
    prompts[k] = malloc((size_t)prompt_len[k] * sizeof(int64_t));
    assert_non_null(prompts[k]);
    for (int64_t i = 0; i < prompt_len[k]; ++i) {
      bool shared = k % 4 == 2 && i < SHARED;
      prompts[k][i] = shared ? (i * 7 + 3) % config.vocab_size
                             : (int64_t)(next_random(&rng) % (uint64_t)config.vocab_size);
    }
  }
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int k = 0; k < REQUESTS; ++k) free(prompts[k]);
  ty_device_close(device);
  ty_registry_destroy(registry);
  return 0;
}

static ty_engine_request_t request(int k, bool sampled) {
  ty_engine_request_t r = {.prompt = prompts[k], .prompt_len = prompt_len[k],
                           .max_new = new_len[k], .user = (void *)(intptr_t)k};
  if (sampled) {
    r.sampling = (ty_sampling_t){.temperature = 0.8 + 0.01 * k, .top_k = k % 3 ? 20 : 0,
                                 .top_p = k % 2 ? 0.9 : 1.0, .seed = 1000 + (uint64_t)k};
  } else {
    r.sampling.greedy = true;
  }
  return r;
}

/* Alone runs step by step; together ones overlap the host's work with the
 * runs (options.overlap), as serve and generate do. */
static ty_engine_t *engine(int64_t slots, int64_t kv_blocks, bool prefix_cache,
                           int64_t speculate) {
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = slots, .context = CONTEXT,
                           .prefill_chunk = 128, .prefill_budget = 256,
                           .deterministic = true, .kv_blocks = kv_blocks,
                           .no_prefix_cache = !prefix_cache, .speculate = speculate,
                           .overlap = slots > 1};
  ty_engine_t *e = NULL;
  TY_EXPECT_OK(ty_engine_create(device, &config, &o, &e));
  TY_EXPECT_OK(ty_engine_load_weights(e, dir, NULL, NULL));
  return e;
}

/* Every request alone, one after another through one slot. */
static void alone(bool sampled, collected_t *c) {
  ty_engine_t *e = engine(1, 0, false, 0);
  memset(c, 0, sizeof(*c));
  for (int k = 0; k < REQUESTS; ++k) {
    ty_engine_request_t r = request(k, sampled);
    TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
    int before = c->done, steps = 0;
    while (c->done == before) {
      TY_EXPECT_OK(ty_engine_step(e, collect, c));
      assert_true(++steps < 100);
    }
    assert_int_equal(c->count[k], new_len[k]);
  }
  ty_engine_destroy(e);
}

/* All 64 at once (adding more as slots free up when slots < 64). */
static void together(bool sampled, int64_t slots, int64_t kv_blocks, int64_t speculate,
                     collected_t *c, ty_engine_stats_t *out_stats) {
  ty_engine_t *e = engine(slots, kv_blocks, true, speculate);
  memset(c, 0, sizeof(*c));
  int next = 0, steps = 0;
  while (c->done < REQUESTS) {
    while (next < REQUESTS && ty_engine_free_slots(e) > 0) {
      ty_engine_request_t r = request(next++, sampled);
      TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
    }
    TY_EXPECT_OK(ty_engine_step(e, collect, c));
    assert_true(++steps < 5000);
  }
  *out_stats = ty_engine_stats(e);
  assert_int_equal(out_stats->busy, 0);
  /* Every block is back: free again or holding a cached prefix. */
  assert_int_equal(out_stats->kv_free, out_stats->kv_blocks);
  ty_engine_destroy(e);
}

static void expect_equal(const collected_t *a, const collected_t *b, const char *what) {
  for (int k = 0; k < REQUESTS; ++k) {
    assert_int_equal(a->count[k], new_len[k]);
    assert_int_equal(b->count[k], new_len[k]);
    for (int64_t i = 0; i < new_len[k]; ++i) {
      if (a->ids[k][i] != b->ids[k][i]) {
        fail_msg("%s: request %d (prompt %lld) token %lld is %lld alone, %lld together", what, k,
                 (long long)prompt_len[k], (long long)i, (long long)a->ids[k][i],
                 (long long)b->ids[k][i]);
      }
    }
  }
}

static void test_greedy_64_equals_alone(void **state) {
  (void)state;
  static collected_t ref, got;
  ty_engine_stats_t st;
  alone(false, &ref);
  together(false, REQUESTS, 0, 0, &got, &st);
  expect_equal(&ref, &got, "greedy, 64 slots");
  /* The shared system prefix was computed once and reused. */
  assert_true(st.prefix_hits >= SHARED / 16 * 16);
  assert_int_equal(st.preemptions, 0);
  /* A pool of 160 blocks (2,560 tokens) for 64 slots: requests wait for
   * blocks, the newest are preempted, and nothing changes. */
  together(false, REQUESTS, 160, 0, &got, &st);
  expect_equal(&ref, &got, "greedy, 160 blocks");
  assert_true(st.preemptions > 0);
  print_message("160 blocks: %llu preemptions, %llu prefix tokens reused\n",
                (unsigned long long)st.preemptions, (unsigned long long)st.prefix_hits);
}

/* Speculative decoding, in the small pool too (drafts take only free
 * blocks and give back the rejected ones). */
static void test_greedy_speculate_equals_alone(void **state) {
  (void)state;
  static collected_t ref, got;
  ty_engine_stats_t st;
  alone(false, &ref);
  together(false, REQUESTS, 0, 4, &got, &st);
  expect_equal(&ref, &got, "greedy, --speculate 4");
  assert_true(st.draft_accepted > 0);
  print_message("--speculate 4: %llu of %llu drafts accepted, %llu steps\n",
                (unsigned long long)st.draft_accepted, (unsigned long long)st.draft_tokens,
                (unsigned long long)st.steps);
  together(false, REQUESTS, 160, 4, &got, &st);
  expect_equal(&ref, &got, "greedy, --speculate 4, 160 blocks");
}

static void test_seeded_64_equals_alone(void **state) {
  (void)state;
  static collected_t ref, got;
  ty_engine_stats_t st;
  alone(true, &ref);
  together(true, REQUESTS, 0, 0, &got, &st);
  expect_equal(&ref, &got, "seeded, 64 slots");
  /* A draft is accepted when the seeded draw of its row makes it. */
  together(true, REQUESTS, 0, 4, &got, &st);
  expect_equal(&ref, &got, "seeded, --speculate 4");
}

/* A request larger than the whole pool is refused naming the limit; one
 * that fits the pool but not its free blocks now is taken and waits. */
static void test_pool_limits(void **state) {
  (void)state;
  ty_engine_t *e = engine(2, 8, true, 0); /* 8 blocks of 16 = 128 tokens */
  ty_engine_request_t r = request(1, false);
  r.prompt_len = 120;
  r.max_new = 10; /* needs 129 positions' blocks: 9 > 8 */
  TY_EXPECT_STATUS(ty_engine_add(e, &r, NULL), TY_CODE_INVALID_ARGUMENT,
                   "needs 9 KV-cache blocks of 16 tokens but the whole pool holds 8");
  r.max_new = 9; /* 128 positions: fits exactly */
  r.user = (void *)(intptr_t)0;
  TY_EXPECT_OK(ty_engine_add(e, &r, NULL));
  r.user = (void *)(intptr_t)1;
  TY_EXPECT_OK(ty_engine_add(e, &r, NULL)); /* waits for the first */
  collected_t c;
  memset(&c, 0, sizeof(c));
  int steps = 0;
  while (c.done < 2) {
    TY_EXPECT_OK(ty_engine_step(e, collect, &c));
    assert_true(++steps < 200);
  }
  for (int i = 0; i < 9; ++i) assert_int_equal(c.ids[0][i], c.ids[1][i]);
  ty_engine_stats_t st = ty_engine_stats(e);
  assert_int_equal(st.kv_free, 8);
  ty_engine_destroy(e);
  ty_engine_options_t o = {.dtype = TY_DTYPE_F32, .max_batch = 2, .context = 64,
                           .prefill_chunk = 8, .kv_block_size = 2000};
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &o, &e), TY_CODE_INVALID_ARGUMENT,
                   "KV block size 2000 must be in 1..1024");
  o.kv_block_size = 0;
  o.kv_cache_bytes = 100;
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &o, &e), TY_CODE_INVALID_ARGUMENT,
                   "a KV cache of 100 bytes holds no block");
  o.kv_cache_bytes = 0;
  o.speculate = 17;
  TY_EXPECT_STATUS(ty_engine_create(device, &config, &o, &e), TY_CODE_INVALID_ARGUMENT,
                   "speculative tokens 17 must be in 0..16");
}

/* argv[1]: a cmocka test filter (ctest runs the cases as separate entries,
 * so that they run in parallel). */
int main(int argc, char **argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy_64_equals_alone),
      cmocka_unit_test(test_greedy_speculate_equals_alone),
      cmocka_unit_test(test_seeded_64_equals_alone),
      cmocka_unit_test(test_pool_limits),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
