/* The generation engine (see engine.h): a paged KV cache (models/kv_pool.h)
 * shared by every sequence, one packed step graph per token bucket (1, 2,
 * 4, ... tokens of any sequences), and the host-side sampler. */
#include "models/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/common/sample_params.h"
#include "graph/runtime/numerics.h"
#include "hal/dtype.h"
#include "models/checkpoint.h"
#include "models/kv_pool.h"
#include "models/llm.h"
#include "models/safetensors.h"

#define TY_ENGINE_MAX_BUCKETS 24

typedef enum { TY_SEQ_FREE = 0, TY_SEQ_RUNNING } ty_seq_state_t;

/* One sequence, in the slot whose index is its block-table row. */
typedef struct {
  ty_seq_state_t state;
  uint64_t sequence;
  uint64_t admitted;           /* admission order: the newest is preempted first */
  ty_engine_request_t request; /* request.prompt points at `tokens` */
  int64_t *tokens;             /* prompt then new tokens: len of them */
  int64_t len;
  int64_t generated; /* new tokens so far */
  uint64_t rng;
  ty_kv_seq_t kv;    /* kv.tokens: positions whose keys and values are cached */
  bool begun;        /* kv holds a table (false after a preemption, until rescheduled) */
  int64_t step_rows; /* this step: rows [step_first, step_first + step_rows) */
  int64_t step_first;
  int64_t logit_row; /* this step: its (first) row of the logits, or -1 */
  /* this step: drafted tokens (speculative decoding) in tokens[len, len +
   * draft), each with a logit row after logit_row */
  int64_t draft;
} ty_seq_t;

/* One compiled step graph of `tokens` rows and `logit_rows` logits. */
typedef struct {
  ty_graph_t *graph;
  ty_llm_t model;
  ty_session_t *session;
  int64_t tokens, logit_rows;
  bool sampling; /* outputs "next_ids" / "next_logprob" of the sample op */
} ty_step_graph_t;

struct ty_engine_t {
  ty_model_config_t config;
  ty_engine_options_t options;
  ty_device_t *device;
  ty_kv_pool_t *pool;
  int64_t block_size, table_blocks;
  int64_t max_tokens; /* the largest bucket */
  int64_t logit_cap;  /* logit rows of a step: max_batch * (1 + speculate) */
  ty_seq_t *seqs;     /* max_batch */
  ty_seq_t **order;   /* the running sequences of the step planned last */
  ty_step_graph_t buckets[TY_ENGINE_MAX_BUCKETS]; /* 1, 2, 4, ..., max_tokens */
  int bucket_count;
  ty_sampler_t *sampler;
  void *raw;  /* logits as the graph gives them: max_batch rows */
  float *row; /* one row as f32 */
  int64_t *tokens, *positions, *kv_slots, *row_seq, *table, *index; /* bind buffers */
  float *params;      /* sample op: [max_batch, TY_SAMPLE_P_COUNT] */
  int64_t *seeds;     /* [max_batch, 2] */
  int64_t *next_ids;  /* its outputs */
  float *next_logprob;
  bool device_sampling; /* the step graphs sample on the device */
  int64_t top_ids[TY_ENGINE_MAX_TOP_LOGPROBS];
  double top_logprobs[TY_ENGINE_MAX_TOP_LOGPROBS];
  uint64_t next_sequence, next_admission;
  bool nonfinite_ok; /* weights loaded with allow_nonfinite: sample any logits */
  ty_numerics_finding_t finding; /* options.check_numerics: the first bad node */
  uint32_t finding_nodes;        /* the node count of its graph */
  ty_engine_stats_t stats;
  /* options.overlap: a worker thread runs a step's graph and reads its
   * results while the caller's thread emits the step before's tokens and
   * does its own work (ty_engine_step). */
  bool worker_up;
  pthread_t worker;
  pthread_mutex_t wlock;
  pthread_cond_t wcond;
  int wstate;              /* TY_WORK_* */
  ty_step_graph_t *wgraph; /* the run it was handed */
  bool whost, wdevice;     /* which results it reads back */
  ty_status_t wresult;
  /* The step in flight: its graph and its sequences (order[0, flight_n)).
   * A slot cancelled meanwhile is free, or holds a sequence added since,
   * whose step_rows ty_engine_add cleared: ty_engine_collect skips both. */
  ty_step_graph_t *flight;
  int64_t flight_n;
  /* Tokens taken from a finished run, emitted after the next is launched. */
  ty_engine_token_t *held;
  int64_t held_count;
  int64_t *held_top_ids; /* TY_ENGINE_MAX_TOP_LOGPROBS per held token */
  double *held_top_logprobs;
};

enum { TY_WORK_IDLE = 0, TY_WORK_RUN, TY_WORK_DONE, TY_WORK_QUIT };

/* The logits' dtype: the compute dtype (bf16 under bf16-mixed). */
static ty_dtype_t ty_engine_logits_dtype(const ty_engine_options_t *o) {
  return o->compute_dtype != TY_DTYPE_INVALID ? o->compute_dtype : o->dtype;
}

static double ty_engine_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ty_status_t ty_engine_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in the generation engine");
}

/* Bucket i holds 2^i tokens (the last: max_tokens), and logits for as
 * many rows as sequences can finish a step in it. */
static int64_t ty_engine_bucket_tokens(const ty_engine_t *e, int i) {
  return i == e->bucket_count - 1 ? e->max_tokens : (int64_t)1 << i;
}

static int64_t ty_engine_logit_rows(const ty_engine_t *e, int64_t tokens) {
  return tokens < e->logit_cap ? tokens : e->logit_cap;
}

/* The sample op over the step's logits: inputs "sample_params" (f32 [R,
 * TY_SAMPLE_P_COUNT]) and "sample_seeds" (i64 [R, 2]), outputs "next_ids"
 * and "next_logprob" ([R]): only R ids and R floats cross to the host. */
static ty_status_t ty_engine_add_sampling(ty_engine_t *e, ty_step_graph_t *g) {
  (void)e;
  int64_t pd[2] = {g->logit_rows, TY_SAMPLE_P_COUNT}, sd[2] = {g->logit_rows, 2};
  ty_value_id_t in[3] = {g->model.logits, TY_VALUE_NONE, TY_VALUE_NONE}, outs[2];
  TY_RETURN_IF_ERROR(ty_graph_add_input(g->graph, "sample_params", TY_DTYPE_F32, 2, pd, &in[1]));
  TY_RETURN_IF_ERROR(ty_graph_add_input(g->graph, "sample_seeds", TY_DTYPE_I64, 2, sd, &in[2]));
  TY_RETURN_IF_ERROR(ty_graph_add_node(g->graph, "sample", in, 3, NULL, outs, 2));
  TY_RETURN_IF_ERROR(ty_graph_set_output(g->graph, outs[0], "next_ids"));
  TY_RETURN_IF_ERROR(ty_graph_set_output(g->graph, outs[1], "next_logprob"));
  g->sampling = true;
  return TY_OK;
}

/* Builds and opens bucket `i` (tokens 2^i, or max_tokens for the last).
 * The last bucket, opened first, shares `share` (weights from a training
 * session, or NULL) and owns the KV pools; the others share its states. */
static ty_status_t ty_engine_open(ty_engine_t *e, int i, const ty_session_t *share) {
  ty_step_graph_t *out = &e->buckets[i];
  out->tokens = ty_engine_bucket_tokens(e, i);
  out->logit_rows = ty_engine_logit_rows(e, out->tokens);
  TY_RETURN_IF_ERROR(ty_graph_create(&out->graph));
  ty_llm_options_t o = {.batch = 1, .seq = out->tokens, .dtype = e->options.dtype,
                        .compute_dtype = e->options.compute_dtype, .logits_output = true,
                        .logits_at_index = true, .logit_rows = out->logit_rows,
                        .kv_blocks = ty_kv_pool_stats(e->pool).blocks,
                        .kv_block_size = e->block_size, .table_rows = e->options.max_batch,
                        .table_blocks = e->table_blocks};
  TY_RETURN_IF_ERROR(ty_llm_build(out->graph, &e->config, &o, &out->model));
  if (e->device_sampling) TY_RETURN_IF_ERROR(ty_engine_add_sampling(e, out));
  if (e->options.check_numerics) TY_RETURN_IF_ERROR(ty_graph_expose_all(out->graph));
  ty_session_options_t so = {.share_state_with = share, .cache_dir = e->options.cache_dir,
                             .retry_failed = e->options.retry_failed,
                             .fallback_device = e->options.fallback_device,
                             .deterministic = e->options.deterministic};
  return ty_session_create(e->device, out->graph, &so, &out->session);
}

static void ty_engine_close(ty_step_graph_t *g) {
  ty_session_destroy(g->session);
  ty_llm_deinit(&g->model);
  ty_graph_destroy(g->graph);
  memset(g, 0, sizeof(*g));
}

/* Opens bucket i on first use (the last one is open from creation). */
static ty_status_t ty_engine_bucket(ty_engine_t *e, int i) {
  if (e->buckets[i].session) return TY_OK;
  ty_status_t s = ty_engine_open(e, i, e->buckets[e->bucket_count - 1].session);
  if (s) {
    ty_engine_close(&e->buckets[i]);
    return ty_status_annotate(s, "compiling the step graph of %lld tokens",
                              (long long)ty_engine_bucket_tokens(e, i));
  }
  return TY_OK;
}

static ty_status_t ty_engine_check_options(const ty_model_config_t *c,
                                           const ty_engine_options_t *o) {
  if (o->max_batch < 1 || o->max_batch > 4096) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "max batch %lld must be in 1..4096",
                          (long long)o->max_batch);
  }
  if (o->context < 2 || o->context > c->max_positions) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "context %lld must be in 2..%lld (the model's positions)",
                          (long long)o->context, (long long)c->max_positions);
  }
  if (o->prefill_chunk < 1 || o->prefill_chunk > o->context) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "prefill chunk %lld must be in 1..%lld (the context)",
                          (long long)o->prefill_chunk, (long long)o->context);
  }
  if (o->prefill_budget < 0 || o->prefill_budget > o->context * o->max_batch) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "prefill budget %lld must be in 0..%lld (every slot's context)",
                          (long long)o->prefill_budget, (long long)(o->context * o->max_batch));
  }
  if (o->speculate < 0 || o->speculate > TY_ENGINE_MAX_SPECULATE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "speculative tokens %lld must be in 0..%d (0: off)",
                          (long long)o->speculate, TY_ENGINE_MAX_SPECULATE);
  }
  if (o->kv_block_size < 0 || o->kv_block_size > 1024 || o->kv_blocks < 0 ||
      o->kv_blocks > INT32_MAX || o->kv_cache_bytes < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "KV block size %lld must be in 1..1024, blocks %lld in 1..%d and the "
                          "cache memory >= 0 (0: the defaults)",
                          (long long)o->kv_block_size, (long long)o->kv_blocks, INT32_MAX);
  }
  return TY_OK;
}

/* The pool's blocks: the option, or what kv_cache_bytes holds, or enough
 * for every slot's whole context. */
static ty_status_t ty_engine_pool_blocks(const ty_model_config_t *c,
                                         const ty_engine_options_t *o, int64_t block_size,
                                         int64_t *out_blocks) {
  int64_t per_table = (o->context + block_size - 1) / block_size;
  if (o->kv_blocks > 0) {
    *out_blocks = o->kv_blocks;
  } else if (o->kv_cache_bytes > 0) {
    int64_t per_block = 2 * (int64_t)c->num_layers * block_size * c->num_kv_heads *
                        c->head_dim * (int64_t)ty_dtype_size(ty_engine_logits_dtype(o));
    *out_blocks = o->kv_cache_bytes / per_block;
    if (*out_blocks < 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "a KV cache of %lld bytes holds no block of %lld tokens (%lld "
                            "bytes each for this model)",
                            (long long)o->kv_cache_bytes, (long long)block_size,
                            (long long)per_block);
    }
  } else {
    *out_blocks = per_table * o->max_batch;
  }
  if (*out_blocks > INT32_MAX) *out_blocks = INT32_MAX;
  return TY_OK;
}

static void *ty_engine_worker(void *arg);

/* options.overlap: the buffers of the step in flight and its worker. */
static ty_status_t ty_engine_start_worker(ty_engine_t *e) {
  const int64_t L = e->logit_cap;
  e->held = calloc((size_t)L, sizeof(*e->held));
  e->held_top_ids = calloc((size_t)L * TY_ENGINE_MAX_TOP_LOGPROBS, sizeof(int64_t));
  e->held_top_logprobs = calloc((size_t)L * TY_ENGINE_MAX_TOP_LOGPROBS, sizeof(double));
  if (!e->held || !e->held_top_ids ||
      !e->held_top_logprobs) {
    return ty_engine_oom();
  }
  pthread_mutex_init(&e->wlock, NULL);
  pthread_cond_init(&e->wcond, NULL);
  if (pthread_create(&e->worker, NULL, ty_engine_worker, e) != 0) {
    pthread_cond_destroy(&e->wcond);
    pthread_mutex_destroy(&e->wlock);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "cannot start the generation engine's worker thread");
  }
  e->worker_up = true;
  return TY_OK;
}

ty_status_t ty_engine_create(ty_device_t *device, const ty_model_config_t *config,
                             const ty_engine_options_t *options, ty_engine_t **out_engine) {
  *out_engine = NULL;
  TY_RETURN_IF_ERROR(ty_engine_check_options(config, options));
  ty_engine_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_engine_oom();
  e->config = *config;
  e->options = *options;
  e->device = device;
  e->block_size = options->kv_block_size > 0 ? options->kv_block_size : 16;
  e->table_blocks = (options->context + e->block_size - 1) / e->block_size;
  int64_t N = options->max_batch, V = config->vocab_size;
  /* A step holds a token (and its drafts) of every decoding sequence and a
   * prefill budget. */
  int64_t prefill = options->prefill_budget > options->prefill_chunk ? options->prefill_budget
                                                                       : options->prefill_chunk;
  e->logit_cap = N * (1 + options->speculate);
  e->max_tokens = e->logit_cap + prefill;
  e->bucket_count = 1;
  while (((int64_t)1 << (e->bucket_count - 1)) < e->max_tokens &&
         e->bucket_count < TY_ENGINE_MAX_BUCKETS) {
    e->bucket_count++;
  }
  int64_t blocks = 0;
  ty_status_t s = ty_engine_pool_blocks(config, options, e->block_size, &blocks);
  ty_kv_pool_options_t po = {.blocks = blocks, .block_size = e->block_size,
                             .prefix_sharing = !options->no_prefix_cache};
  if (!s) s = ty_kv_pool_create(&po, &e->pool);
  int64_t T = e->max_tokens, L = e->logit_cap;
  e->seqs = calloc((size_t)N, sizeof(*e->seqs));
  e->order = malloc((size_t)N * sizeof(*e->order));
  e->raw = malloc((size_t)L * (size_t)V * ty_dtype_size(ty_engine_logits_dtype(options)));
  e->row = malloc((size_t)V * sizeof(float));
  e->tokens = malloc((size_t)T * sizeof(int64_t));
  e->positions = malloc((size_t)T * sizeof(int64_t));
  e->kv_slots = malloc((size_t)T * sizeof(int64_t));
  e->row_seq = malloc((size_t)T * sizeof(int64_t));
  e->table = calloc((size_t)(N * e->table_blocks), sizeof(int64_t));
  e->index = malloc((size_t)L * sizeof(int64_t));
  e->params = malloc((size_t)L * TY_SAMPLE_P_COUNT * sizeof(float));
  e->seeds = malloc((size_t)L * 2 * sizeof(int64_t));
  e->next_ids = malloc((size_t)L * sizeof(int64_t));
  e->next_logprob = malloc((size_t)L * sizeof(float));
  if (!s && !(e->seqs && e->order && e->raw && e->row && e->tokens && e->positions && e->kv_slots &&
              e->row_seq && e->table && e->index && e->params && e->seeds && e->next_ids &&
              e->next_logprob)) {
    s = ty_engine_oom();
  }
  if (!s) s = ty_sampler_create(V, &e->sampler);
  /* The largest bucket first: it holds the KV pools and the weights (its
   * own, or the training session's), for the others to share. */
  /* Sampling on the device when the plugin runs the sample op (or a
   * fallback does); otherwise every step reads the logits. */
  e->device_sampling = !options->host_sampling;
  if (!s) {
    s = ty_engine_open(e, e->bucket_count - 1, options->weights_from);
    if (s && e->device_sampling) {
      ty_status_free(s);
      ty_engine_close(&e->buckets[e->bucket_count - 1]);
      e->device_sampling = false;
      s = ty_engine_open(e, e->bucket_count - 1, options->weights_from);
    }
  }
  if (s) {
    ty_engine_destroy(e);
    return ty_status_annotate(s, "creating the generation engine (%lld slots of %lld tokens)",
                              (long long)N, (long long)options->context);
  }
  e->stats.slots = N;
  e->next_sequence = 1;
  /* TRAINYARD_ENGINE_OVERLAP=0 turns it off (comparisons, debugging). */
  const char *env = getenv("TRAINYARD_ENGINE_OVERLAP");
  bool overlap = options->overlap && !(env && strcmp(env, "0") == 0);
  if (overlap && !options->check_numerics) {
    s = ty_engine_start_worker(e);
    if (s) {
      ty_engine_destroy(e);
      return s;
    }
  }
  *out_engine = e;
  return TY_OK;
}

static ty_status_t ty_engine_wait(ty_engine_t *e);

void ty_engine_destroy(ty_engine_t *e) {
  if (!e) return;
  if (e->worker_up) {
    if (e->flight) ty_status_free(ty_engine_wait(e)); /* nobody takes its tokens */
    pthread_mutex_lock(&e->wlock);
    e->wstate = TY_WORK_QUIT;
    pthread_cond_broadcast(&e->wcond);
    pthread_mutex_unlock(&e->wlock);
    pthread_join(e->worker, NULL);
    pthread_cond_destroy(&e->wcond);
    pthread_mutex_destroy(&e->wlock);
  }
  free(e->held);
  free(e->held_top_ids);
  free(e->held_top_logprobs);
  /* The smaller buckets share the last one's states: close them first. */
  for (int i = 0; i < e->bucket_count; ++i) ty_engine_close(&e->buckets[i]);
  for (int64_t i = 0; e->seqs && i < e->options.max_batch; ++i) {
    if (e->pool) ty_kv_pool_seq_end(e->pool, &e->seqs[i].kv);
    free(e->seqs[i].tokens);
  }
  ty_kv_pool_destroy(e->pool);
  ty_sampler_destroy(e->sampler);
  free(e->seqs);
  free(e->order);
  free(e->raw);
  free(e->row);
  free(e->tokens);
  free(e->positions);
  free(e->kv_slots);
  free(e->row_seq);
  free(e->table);
  free(e->index);
  free(e->params);
  free(e->seeds);
  free(e->next_ids);
  free(e->next_logprob);
  free(e);
}

ty_status_t ty_engine_load_weights(ty_engine_t *e, const char *dir,
                                   const ty_llm_load_options_t *options,
                                   ty_llm_load_report_t *out_report) {
  ty_step_graph_t *owner = &e->buckets[e->bucket_count - 1];
  TY_RETURN_IF_ERROR(
      ty_llm_load_weights_with(&owner->model, owner->session, dir, options, out_report));
  e->nonfinite_ok = options && options->allow_nonfinite;
  return TY_OK;
}

static ty_status_t ty_engine_check_request(const ty_engine_t *e, const ty_engine_request_t *r) {
  int64_t V = e->config.vocab_size;
  if (r->prompt_len < 1 || !r->prompt) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "the prompt is empty");
  }
  if (r->max_new < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "at least 1 new token is needed (got %lld)",
                          (long long)r->max_new);
  }
  if (r->prompt_len > e->options.context || r->max_new > e->options.context - r->prompt_len) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "a prompt of %lld tokens + %lld new tokens exceeds the context of "
                          "%lld tokens",
                          (long long)r->prompt_len, (long long)r->max_new,
                          (long long)e->options.context);
  }
  ty_kv_pool_stats_t pool = ty_kv_pool_stats(e->pool);
  /* The last new token's keys are never needed: prompt + max_new - 1. */
  int64_t need = ty_kv_pool_blocks_for(e->pool, r->prompt_len + r->max_new - 1);
  if (need > pool.blocks) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "a prompt of %lld tokens + %lld new tokens needs %lld KV-cache blocks "
                          "of %lld tokens but the whole pool holds %lld (%lld tokens; raise "
                          "--kv-cache-memory)",
                          (long long)r->prompt_len, (long long)r->max_new, (long long)need,
                          (long long)pool.block_size, (long long)pool.blocks,
                          (long long)(pool.blocks * pool.block_size));
  }
  for (int64_t i = 0; i < r->prompt_len; ++i) {
    if (r->prompt[i] < 0 || r->prompt[i] >= V) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "prompt token %lld (position %lld) is not below the model's "
                            "vocabulary size %lld",
                            (long long)r->prompt[i], (long long)i, (long long)V);
    }
  }
  TY_RETURN_IF_ERROR(ty_sampling_check(&r->sampling));
  if (r->top_logprobs < 0 || r->top_logprobs > TY_ENGINE_MAX_TOP_LOGPROBS ||
      r->stop_id_count > TY_ENGINE_MAX_STOP_IDS) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "top logprobs %d must be in 0..%d and stop ids %u at most %d",
                          (int)r->top_logprobs, TY_ENGINE_MAX_TOP_LOGPROBS,
                          (unsigned)r->stop_id_count, TY_ENGINE_MAX_STOP_IDS);
  }
  return TY_OK;
}

/* Positions the sequence still has to compute before its next token. */
static int64_t ty_seq_todo(const ty_seq_t *q) { return q->len - q->kv.tokens; }

ty_status_t ty_engine_add(ty_engine_t *e, const ty_engine_request_t *r, uint64_t *out_sequence) {
  TY_RETURN_IF_ERROR(ty_engine_check_request(e, r));
  int64_t free_slot = -1;
  for (int64_t i = 0; i < e->options.max_batch && free_slot < 0; ++i) {
    if (e->seqs[i].state == TY_SEQ_FREE) free_slot = i;
  }
  if (free_slot < 0) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "all %lld slots of the engine are busy",
                          (long long)e->options.max_batch);
  }
  ty_seq_t *q = &e->seqs[free_slot];
  int64_t *tokens = malloc((size_t)(r->prompt_len + r->max_new) * sizeof(int64_t));
  if (!tokens) return ty_engine_oom();
  memcpy(tokens, r->prompt, (size_t)r->prompt_len * sizeof(int64_t));
  free(q->tokens);
  memset(q, 0, sizeof(*q));
  ty_status_t s = ty_kv_pool_seq_begin(e->pool, tokens, r->prompt_len, &q->kv, NULL);
  if (s) {
    free(tokens);
    return s;
  }
  q->tokens = tokens;
  q->len = r->prompt_len;
  q->request = *r;
  q->request.prompt = tokens;
  q->sequence = e->next_sequence++;
  q->admitted = e->next_admission++;
  q->rng = r->sampling.seed;
  q->state = TY_SEQ_RUNNING;
  q->begun = true;
  e->stats.busy++;
  if (out_sequence) *out_sequence = q->sequence;
  return TY_OK;
}

static void ty_engine_free_seq(ty_engine_t *e, ty_seq_t *q) {
  if (q->state != TY_SEQ_FREE) e->stats.busy--;
  ty_kv_pool_seq_end(e->pool, &q->kv);
  q->state = TY_SEQ_FREE;
  free(q->tokens);
  q->tokens = NULL;
  q->request.prompt = NULL;
}

void ty_engine_cancel(ty_engine_t *e, uint64_t sequence) {
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    ty_seq_t *q = &e->seqs[i];
    if (q->state != TY_SEQ_FREE && q->sequence == sequence) ty_engine_free_seq(e, q);
  }
}

/* Whether q's next token needs the host sampler (the logits read back):
 * no sample op on the device; top log-probabilities; penalties (their
 * history stays on the host); or log-probabilities under --deterministic,
 * where they must be ty_sampler_logprob's bits (those `trainyard eval`
 * reports) rather than the device's f32 log-sum-exp. */
static bool ty_engine_host_sampled(const ty_engine_t *e, const ty_seq_t *q) {
  const ty_engine_request_t *r = &q->request;
  const ty_sampling_t *a = &r->sampling;
  bool penalties = (a->repetition_penalty != 0 && a->repetition_penalty != 1) ||
                   a->presence_penalty != 0 || a->frequency_penalty != 0;
  return !e->device_sampling || r->top_logprobs > 0 || penalties ||
         (r->logprobs && e->options.deterministic);
}

/* Records q's new token t.id (t filled by a sampler), ends the sequence on
 * a stop id or its length, and hands the token to `emit`. */
static void ty_engine_emit_token(ty_engine_t *e, ty_seq_t *q, ty_engine_token_t *t,
                                 ty_engine_emit_fn_t emit, void *context) {
  const ty_engine_request_t *r = &q->request;
  q->generated++;
  for (uint32_t i = 0; i < r->stop_id_count; ++i) {
    if (t->id == r->stop_ids[i]) t->finish = TY_ENGINE_STOP;
  }
  if (!t->finish && q->generated == r->max_new) t->finish = TY_ENGINE_LENGTH;
  if (t->finish) {
    ty_engine_free_seq(e, q);
  } else {
    q->tokens[q->len++] = t->id;
  }
  if (emit) emit(context, t);
}

static ty_status_t ty_engine_garbage(const ty_seq_t *q, double value, int64_t at) {
  return ty_status_make(TY_CODE_DATA_LOSS,
                        "the model's logits for sequence %llu hold %g at token %lld (after %lld "
                        "new tokens): the device computed garbage",
                        (unsigned long long)q->sequence, value, (long long)at,
                        (long long)q->generated);
}

/* Samples q's next token on the host from logits row `raw_row` (the
 * logits' dtype). */
static ty_status_t ty_engine_take(ty_engine_t *e, ty_seq_t *q, const void *raw_row,
                                  ty_engine_emit_fn_t emit, void *context) {
  int64_t V = e->config.vocab_size;
  TY_RETURN_IF_ERROR(ty_safetensors_convert(ty_engine_logits_dtype(&e->options), raw_row,
                                            TY_DTYPE_F32, e->row, (size_t)V));
  for (int64_t v = 0; v < V && !e->nonfinite_ok; ++v) {
    if (!isfinite(e->row[v])) return ty_engine_garbage(q, e->row[v], v);
  }
  const ty_engine_request_t *r = &q->request;
  ty_engine_token_t t = {.sequence = q->sequence, .user = r->user, .index = q->generated};
  /* The penalties count the new tokens so far (after the prompt). */
  t.id = ty_sampler_pick(e->sampler, e->row, &r->sampling, &q->rng, q->tokens + r->prompt_len,
                         q->generated);
  if (r->logprobs || r->top_logprobs > 0) {
    ty_sampler_logprobs(e->sampler, e->row, t.id, r->top_logprobs, &t.logprob, e->top_ids,
                        e->top_logprobs);
    t.top_count = r->top_logprobs;
    t.top_ids = e->top_ids;
    t.top_logprobs = e->top_logprobs;
  }
  ty_engine_emit_token(e, q, &t, emit, context);
  return TY_OK;
}

/* q's next token as the sample op chose it on the device (logit row
 * `row`). A NaN or infinity anywhere in the row makes its log-sum-exp, and
 * so the log-probability, not finite. */
static ty_status_t ty_engine_take_sampled(ty_engine_t *e, ty_seq_t *q, int64_t row,
                                          ty_engine_emit_fn_t emit, void *context) {
  const ty_engine_request_t *r = &q->request;
  double lp = e->next_logprob[row];
  if (!isfinite(lp) && !e->nonfinite_ok) return ty_engine_garbage(q, lp, e->next_ids[row]);
  ty_engine_token_t t = {.sequence = q->sequence, .user = r->user, .index = q->generated,
                         .id = e->next_ids[row], .logprob = r->logprobs ? lp : 0};
  /* The host stream stays in step (one draw per sampled token). */
  if (!r->sampling.greedy) q->rng += (uint64_t)TY_SAMPLE_GOLDEN;
  ty_engine_emit_token(e, q, &t, emit, context);
  return TY_OK;
}

/* q's next token from logit row `row`, on the host or from the device's
 * sample op. */
static ty_status_t ty_engine_take_row(ty_engine_t *e, ty_seq_t *q, int64_t row, size_t row_bytes,
                                      ty_engine_emit_fn_t emit, void *context) {
  if (ty_engine_host_sampled(e, q)) {
    return ty_engine_take(e, q, (const char *)e->raw + (size_t)row * row_bytes, emit, context);
  }
  return ty_engine_take_sampled(e, q, row, emit, context);
}

/* After a step that verified q's drafts: the token its last known token
 * predicts, then, while each new token equals the draft that stood in its
 * place, the token that draft predicts (its row saw only right tokens).
 * The first token that differs from its draft, or the one after the last
 * draft, ends the step: every emitted token is what a step without drafts
 * would have made (the same logits row, the same draw). Keys and values
 * count up to the last right input; the blocks reserved past it go back. */
static ty_status_t ty_engine_take_drafted(ty_engine_t *e, ty_seq_t *q, size_t row_bytes,
                                          ty_engine_emit_fn_t emit, void *context) {
  const int64_t len0 = q->len, draft = q->draft;
  e->stats.draft_tokens += (uint64_t)draft;
  for (int64_t j = 0; j <= draft; ++j) {
    /* Row j's input (the last known token, or draft j - 1, accepted) was
     * right: its keys and values stand. */
    ty_kv_pool_seq_commit(e->pool, &q->kv, q->tokens, len0 + j);
    const int64_t want = j < draft ? q->tokens[len0 + j] : -1; /* emitting overwrites it */
    e->stats.decode_tokens++;
    TY_RETURN_IF_ERROR(ty_engine_take_row(e, q, q->logit_row + j, row_bytes, emit, context));
    if (q->state != TY_SEQ_RUNNING) return TY_OK; /* finished: its blocks went back */
    if (j == draft || q->tokens[len0 + j] != want) break;
    e->stats.draft_accepted++;
  }
  ty_kv_pool_seq_trim(e->pool, &q->kv, q->len);
  return TY_OK;
}

/* options.check_numerics: after a run of g, the first node whose output
 * holds a NaN or an infinity is kept (ty_engine_numerics_finding) and the
 * run fails with ABORTED. */
static ty_status_t ty_engine_check(ty_engine_t *e, const ty_step_graph_t *g) {
  if (!e->options.check_numerics) return TY_OK;
  uint32_t nodes = ty_graph_node_count(g->graph);
  TY_RETURN_IF_ERROR(ty_numerics_find(g->session, g->graph, nodes, &e->finding));
  if (!e->finding.found) return TY_OK;
  e->finding_nodes = nodes;
  return ty_status_make(TY_CODE_ABORTED,
                        "check-numerics: the step run's node %u (%s) is the first to output a "
                        "NaN or an infinity",
                        e->finding.node, e->finding.op);
}

static ty_status_t ty_engine_bind_run(ty_engine_t *e, ty_step_graph_t *g) {
  int64_t T[1] = {g->tokens}, toks[2] = {1, g->tokens}, R[1] = {g->logit_rows};
  int64_t table[2] = {e->options.max_batch, e->table_blocks};
  size_t all = (size_t)g->tokens * 8;
  ty_session_t *s = g->session;
  TY_RETURN_IF_ERROR(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, toks, e->tokens, all));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "positions", TY_DTYPE_I64, 1, T, e->positions, all));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "kv_slots", TY_DTYPE_I64, 1, T, e->kv_slots, all));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "row_seq", TY_DTYPE_I64, 1, T, e->row_seq, all));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "block_table", TY_DTYPE_I64, 2, table, e->table,
                                     (size_t)(table[0] * table[1]) * 8));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "logits_index", TY_DTYPE_I64, 1, R, e->index,
                                     (size_t)g->logit_rows * 8));
  if (g->sampling) {
    int64_t pd[2] = {g->logit_rows, TY_SAMPLE_P_COUNT}, sd[2] = {g->logit_rows, 2};
    TY_RETURN_IF_ERROR(ty_session_bind(s, "sample_params", TY_DTYPE_F32, 2, pd, e->params,
                                       (size_t)(pd[0] * pd[1]) * sizeof(float)));
    TY_RETURN_IF_ERROR(ty_session_bind(s, "sample_seeds", TY_DTYPE_I64, 2, sd, e->seeds,
                                       (size_t)(sd[0] * sd[1]) * 8));
  }
  TY_RETURN_IF_ERROR(ty_session_run(s));
  return ty_engine_check(e, g);
}

/* Frees the blocks of the newest running sequence that holds any: it
 * recomputes its tokens later, from its prefix blocks if they are still
 * cached. Returns it, or NULL when none holds blocks. */
static ty_seq_t *ty_engine_preempt(ty_engine_t *e) {
  ty_seq_t *victim = NULL;
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    ty_seq_t *q = &e->seqs[i];
    if (q->state != TY_SEQ_RUNNING || q->kv.count == 0) continue;
    if (!victim || q->admitted > victim->admitted) victim = q;
  }
  if (!victim) return NULL;
  /* It begins again (taking back its prefix if still cached) only when it
   * is next scheduled: beginning now would take back the very blocks it
   * gives up. */
  ty_kv_pool_seq_end(e->pool, &victim->kv);
  victim->begun = false;
  victim->step_rows = 0;
  victim->draft = 0;
  e->stats.preemptions++;
  return victim;
}

/* Reserves blocks for positions [kv.tokens, kv.tokens + n) of q. When
 * the pool is short and `preempt`, the newest sequences give theirs back
 * until q fits or q is the newest left (then q itself waits). */
static ty_status_t ty_engine_reserve(ty_engine_t *e, ty_seq_t *q, int64_t n, bool preempt) {
  for (;;) {
    ty_status_t s = ty_kv_pool_seq_reserve(e->pool, &q->kv, q->kv.tokens + n, NULL, 0, NULL);
    if (!s || ty_status_code(s) != TY_CODE_RESOURCE_EXHAUSTED || !preempt) return s;
    ty_seq_t *victim = ty_engine_preempt(e);
    if (!victim || victim == q) return s;
    ty_status_free(s);
  }
}

/* The running sequences in admission order (oldest first) into order[]. */
static int64_t ty_engine_order(const ty_engine_t *e, ty_seq_t **order) {
  int64_t n = 0;
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    if (e->seqs[i].state == TY_SEQ_RUNNING) order[n++] = &e->seqs[i];
  }
  for (int64_t i = 1; i < n; ++i) { /* insertion sort: n <= max_batch, mostly sorted */
    ty_seq_t *x = order[i];
    int64_t j = i;
    while (j > 0 && order[j - 1]->admitted > x->admitted) {
      order[j] = order[j - 1];
      --j;
    }
    order[j] = x;
  }
  return n;
}

/* Prompt lookup (speculative decoding): finds the latest earlier
 * occurrence of q's last n tokens (n = 3, else 2, else 1) and writes the
 * tokens that followed it into tokens[len, len + k) as drafts, k at most
 * options.speculate and never past the sequence's last new token. A copy
 * may run on into the drafts it wrote, so a repeating stretch continues
 * its period. One scan from the end with one comparison per position
 * (the n are matched together), stopping at the first 3-token match.
 * Returns k (0: no draft). */
static int64_t ty_engine_draft(const ty_engine_t *e, ty_seq_t *q) {
  int64_t room = q->request.max_new - q->generated - 1;
  if (room > e->options.speculate) room = e->options.speculate;
  const int64_t len = q->len, *t = q->tokens, last = t[len - 1];
  int64_t best = 0, at = -1; /* the longest match (latest of its length) ends at `at` */
  for (int64_t end = len - 2; end >= 0 && room > 0 && best < 3; --end) {
    if (t[end] != last) continue;
    int64_t m = 1;
    while (m < 3 && end - m >= 0 && t[end - m] == t[len - 1 - m]) ++m;
    if (m > best) {
      best = m;
      at = end;
    }
  }
  if (at < 0) return 0;
  for (int64_t j = 0; j < room; ++j) q->tokens[len + j] = t[at + 1 + j];
  return room;
}

/* Picks this step's rows: one for every decoding sequence (a token to
 * compute, its last), then prompt chunks of the others, oldest first, up to
 * the prefill budget (all of the bucket while nothing decodes). Returns the
 * rows taken. */
static ty_status_t ty_engine_plan(ty_engine_t *e, ty_seq_t **order, int64_t n, int64_t *out_rows) {
  int64_t rows = 0;
  bool decoding = false;
  for (int64_t i = 0; i < n; ++i) order[i]->step_rows = order[i]->draft = 0;
  for (int64_t i = 0; i < n; ++i) {
    ty_seq_t *q = order[i];
    if (q->state != TY_SEQ_RUNNING || !q->begun || ty_seq_todo(q) != 1 || q->generated == 0) {
      continue;
    }
    /* Drafts only where blocks are free for them: they never preempt. */
    int64_t draft = e->options.speculate > 0 ? ty_engine_draft(e, q) : 0;
    ty_status_t s = draft > 0 ? ty_engine_reserve(e, q, 1 + draft, false) : NULL;
    if (s) {
      if (ty_status_code(s) != TY_CODE_RESOURCE_EXHAUSTED) return s;
      ty_status_free(s);
      draft = 0;
    }
    if (draft == 0) s = ty_engine_reserve(e, q, 1, true);
    if (s) {
      if (ty_status_code(s) != TY_CODE_RESOURCE_EXHAUSTED) return s;
      ty_status_free(s); /* preempted itself: it waits for blocks */
      continue;
    }
    q->step_rows = 1 + draft;
    q->draft = draft;
    rows += 1 + draft;
    decoding = true;
  }
  int64_t chunk = e->options.prefill_chunk;
  int64_t budget = e->options.prefill_budget > chunk ? e->options.prefill_budget : chunk;
  if (!decoding || budget > e->max_tokens - rows) budget = e->max_tokens - rows;
  for (int64_t i = 0; i < n && budget > 0; ++i) {
    ty_seq_t *q = order[i];
    if (q->state != TY_SEQ_RUNNING || q->step_rows > 0) continue;
    if (!q->begun) { /* preempted: back with its cached prefix, if any */
      TY_RETURN_IF_ERROR(ty_kv_pool_seq_begin(e->pool, q->tokens, q->len, &q->kv, NULL));
      q->begun = true;
    } else if (q->generated == 0) {
      /* A prompt begun before another computed their common prefix takes
       * the blocks registered since, at each block boundary. */
      TY_RETURN_IF_ERROR(ty_kv_pool_seq_extend(e->pool, &q->kv, q->tokens, q->len, NULL));
    }
    int64_t take = ty_seq_todo(q);
    if (take > chunk) take = chunk;
    if (take > budget) take = budget;
    if (take < 1) continue;
    /* A prompt waits for blocks rather than preempt running streams; only
     * when nothing at all could run does the newest give way. */
    ty_status_t s = ty_engine_reserve(e, q, take, rows == 0);
    if (s) {
      if (ty_status_code(s) != TY_CODE_RESOURCE_EXHAUSTED) return s;
      ty_status_free(s);
      continue;
    }
    q->step_rows = take;
    rows += take;
    budget -= take;
  }
  /* A preemption may have taken back rows planned before it. */
  rows = 0;
  for (int64_t i = 0; i < n; ++i) rows += order[i]->step_rows;
  *out_rows = rows;
  return TY_OK;
}

/* Row `row` of the sample op's inputs for q's new token `ahead` places
 * after its next one (NULL: padding, greedy). The draw counter is the
 * token's index among the new tokens: every token of a sampled request is
 * one draw, so it matches the host sampler's stream, and a draft's row
 * draws what that token would draw without speculation. */
static void ty_engine_fill_sampling(ty_engine_t *e, const ty_seq_t *q, int64_t row,
                                    int64_t ahead) {
  float *p = e->params + row * TY_SAMPLE_P_COUNT;
  const ty_sampling_t *a = q ? &q->request.sampling : NULL;
  bool greedy = !a || a->greedy;
  p[TY_SAMPLE_P_TEMPERATURE] = greedy ? 0.0f : (float)a->temperature;
  p[TY_SAMPLE_P_TOP_K] = greedy ? 0.0f : (float)a->top_k;
  p[TY_SAMPLE_P_TOP_P] = greedy ? 1.0f : (float)a->top_p;
  p[TY_SAMPLE_P_MIN_P] = greedy ? 0.0f : (float)a->min_p;
  p[TY_SAMPLE_P_REPETITION] = 1.0f; /* penalties: the host sampler (ty_engine_host_sampled) */
  p[TY_SAMPLE_P_PRESENCE] = 0.0f;
  p[TY_SAMPLE_P_FREQUENCY] = 0.0f;
  e->seeds[row * 2] = a ? (int64_t)a->seed : 0;
  e->seeds[row * 2 + 1] = q ? q->generated + ahead : 0;
}

/* Fills the bind buffers for the planned rows in bucket g. */
static void ty_engine_fill(ty_engine_t *e, const ty_step_graph_t *g, ty_seq_t **order,
                           int64_t n) {
  int64_t row = 0, logit = 0, BS = e->block_size, MB = e->table_blocks;
  for (int64_t i = 0; i < n; ++i) {
    ty_seq_t *q = order[i];
    q->logit_row = -1;
    if (q->state != TY_SEQ_RUNNING || q->step_rows == 0) continue;
    int64_t slot = q - e->seqs, first = q->kv.tokens;
    q->step_first = row;
    for (int64_t t = 0; t < q->step_rows; ++t, ++row) {
      int64_t p = first + t;
      e->tokens[row] = q->tokens[p];
      e->positions[row] = p;
      e->kv_slots[row] = (int64_t)q->kv.blocks[p / BS] * BS + p % BS;
      e->row_seq[row] = slot;
    }
    for (int64_t j = 0; j < MB; ++j) {
      e->table[slot * MB + j] = j < q->kv.count ? q->kv.blocks[j] : 0;
    }
    if (q->draft > 0) { /* the last known token and every draft: a row of logits each */
      q->logit_row = logit;
      for (int64_t t = 0; t <= q->draft; ++t) {
        ty_engine_fill_sampling(e, q, logit, t);
        e->index[logit++] = q->step_first + t;
      }
    } else if (first + q->step_rows == q->len) {
      q->logit_row = logit;
      ty_engine_fill_sampling(e, q, logit, 0);
      e->index[logit++] = row - 1;
    }
  }
  for (; row < g->tokens; ++row) { /* padding: writes nothing, sees nothing */
    e->tokens[row] = 0;
    e->positions[row] = 0;
    e->kv_slots[row] = -1;
    e->row_seq[row] = -1;
  }
  for (; logit < g->logit_rows; ++logit) {
    e->index[logit] = 0;
    ty_engine_fill_sampling(e, NULL, logit, 0); /* greedy: valid, never read */
  }
}

/* Which results a step's sequences need back: the logits (host-sampled
 * rows), the sample op's ids and log-probabilities (the others). */
static void ty_engine_wanted(const ty_engine_t *e, ty_seq_t *const *order, int64_t n,
                             bool *out_host, bool *out_device) {
  bool host = false, device = false;
  for (int64_t i = 0; i < n; ++i) {
    if (order[i]->logit_row < 0) continue;
    bool h = ty_engine_host_sampled(e, order[i]);
    host |= h;
    device |= !h;
  }
  *out_host = host;
  *out_device = device;
}

static size_t ty_engine_row_bytes(const ty_engine_t *e) {
  return (size_t)e->config.vocab_size * ty_dtype_size(ty_engine_logits_dtype(&e->options));
}

/* Reads a finished run's results into e->raw / e->next_ids and
 * e->next_logprob. */
static ty_status_t ty_engine_read(ty_engine_t *e, ty_step_graph_t *g, bool host, bool device) {
  if (host) {
    TY_RETURN_IF_ERROR(ty_session_read(g->session, "logits", e->raw,
                                       (size_t)g->logit_rows * ty_engine_row_bytes(e)));
  }
  if (device) {
    TY_RETURN_IF_ERROR(ty_session_read(g->session, "next_ids", e->next_ids,
                                       (size_t)g->logit_rows * sizeof(int64_t)));
    TY_RETURN_IF_ERROR(ty_session_read(g->session, "next_logprob", e->next_logprob,
                                       (size_t)g->logit_rows * sizeof(float)));
  }
  return TY_OK;
}

/* Plans the next step over the running sequences (order[] gets them,
 * *out_n their count) and fills its inputs; *out_graph is NULL when
 * nothing runs. */
static ty_status_t ty_engine_prepare(ty_engine_t *e, ty_seq_t **order, int64_t *out_n,
                                     ty_step_graph_t **out_graph) {
  *out_graph = NULL;
  int64_t n = ty_engine_order(e, order), rows = 0;
  *out_n = n;
  if (n == 0) return TY_OK;
  TY_RETURN_IF_ERROR(ty_engine_plan(e, order, n, &rows));
  if (rows == 0) {
    return ty_status_make(TY_CODE_INTERNAL,
                          "no running sequence could take KV-cache blocks although no other "
                          "holds any (%lld running)",
                          (long long)n);
  }
  int b = 0;
  while (ty_engine_bucket_tokens(e, b) < rows) b++;
  TY_RETURN_IF_ERROR(ty_engine_bucket(e, b));
  ty_engine_fill(e, &e->buckets[b], order, n);
  *out_graph = &e->buckets[b];
  return TY_OK;
}

/* Takes a finished run's tokens: commits the sequences' keys and values
 * and hands each new token to `emit`. A slot whose sequence was cancelled
 * after the run was planned is free or holds a new sequence with no rows
 * in it (step_rows 0): skipped. */
static ty_status_t ty_engine_collect(ty_engine_t *e, const ty_step_graph_t *g,
                                     ty_seq_t *const *order, int64_t n,
                                     ty_engine_emit_fn_t emit, void *context) {
  e->stats.steps++;
  e->stats.decode_runs++;
  e->stats.decode_rows += (uint64_t)g->tokens;
  const size_t row_bytes = ty_engine_row_bytes(e);
  for (int64_t i = 0; i < n; ++i) {
    ty_seq_t *q = order[i];
    if (q->state != TY_SEQ_RUNNING || q->step_rows == 0) continue;
    if (q->draft > 0) {
      TY_RETURN_IF_ERROR(ty_engine_take_drafted(e, q, row_bytes, emit, context));
      continue;
    }
    int64_t upto = q->kv.tokens + q->step_rows;
    bool decode = q->generated > 0 && q->step_rows == 1;
    if (!decode) e->stats.prefill_tokens += (uint64_t)q->step_rows;
    ty_kv_pool_seq_commit(e->pool, &q->kv, q->tokens, upto);
    if (q->logit_row < 0) continue;
    if (decode) e->stats.decode_tokens++;
    TY_RETURN_IF_ERROR(ty_engine_take_row(e, q, q->logit_row, row_bytes, emit, context));
  }
  return TY_OK;
}

/* One step without the worker: plan, run, read, take. */
static ty_status_t ty_engine_step_now(ty_engine_t *e, ty_engine_emit_fn_t emit, void *context) {
  double t0 = ty_engine_now();
  ty_seq_t **order = e->order;
  int64_t n = 0;
  ty_step_graph_t *g = NULL;
  TY_RETURN_IF_ERROR(ty_engine_prepare(e, order, &n, &g));
  if (!g) return TY_OK;
  double t_run = ty_engine_now();
  TY_RETURN_IF_ERROR(ty_engine_bind_run(e, g));
  double t_read = ty_engine_now();
  bool host, device;
  ty_engine_wanted(e, order, n, &host, &device);
  TY_RETURN_IF_ERROR(ty_engine_read(e, g, host, device));
  double t_take = ty_engine_now();
  e->stats.run_seconds += t_read - t_run;
  e->stats.read_seconds += t_take - t_read;
  TY_RETURN_IF_ERROR(ty_engine_collect(e, g, order, n, emit, context));
  e->stats.last_step_seconds = ty_engine_now() - t0;
  e->stats.step_seconds += e->stats.last_step_seconds;
  return TY_OK;
}

/* ---- the overlapped step (options.overlap) ---- */

static void *ty_engine_worker(void *arg) {
  ty_engine_t *e = arg;
  pthread_mutex_lock(&e->wlock);
  for (;;) {
    while (e->wstate != TY_WORK_RUN && e->wstate != TY_WORK_QUIT) {
      pthread_cond_wait(&e->wcond, &e->wlock);
    }
    if (e->wstate == TY_WORK_QUIT) break;
    ty_step_graph_t *g = e->wgraph;
    const bool host = e->whost, device = e->wdevice;
    pthread_mutex_unlock(&e->wlock);
    ty_status_t s = ty_engine_bind_run(e, g);
    if (!s) s = ty_engine_read(e, g, host, device);
    pthread_mutex_lock(&e->wlock);
    e->wresult = s;
    e->wstate = TY_WORK_DONE;
    pthread_cond_broadcast(&e->wcond);
  }
  pthread_mutex_unlock(&e->wlock);
  return NULL;
}

/* Waits for the run in flight; its status. */
static ty_status_t ty_engine_wait(ty_engine_t *e) {
  pthread_mutex_lock(&e->wlock);
  while (e->wstate == TY_WORK_RUN) pthread_cond_wait(&e->wcond, &e->wlock);
  ty_status_t s = e->wresult;
  e->wresult = NULL;
  e->wstate = TY_WORK_IDLE;
  pthread_mutex_unlock(&e->wlock);
  return s;
}

/* The emit of a run taken before the next is launched: the token is kept
 * (with its top log-probabilities) for ty_engine_emit_held. A run makes at
 * most one token per logit row, so logit_cap places always suffice. */
static void ty_engine_hold(void *context, const ty_engine_token_t *t) {
  ty_engine_t *e = context;
  int64_t k = e->held_count++;
  e->held[k] = *t;
  for (int32_t j = 0; j < t->top_count; ++j) {
    e->held_top_ids[k * TY_ENGINE_MAX_TOP_LOGPROBS + j] = t->top_ids[j];
    e->held_top_logprobs[k * TY_ENGINE_MAX_TOP_LOGPROBS + j] = t->top_logprobs[j];
  }
}

static void ty_engine_emit_held(ty_engine_t *e, ty_engine_emit_fn_t emit, void *context) {
  for (int64_t k = 0; k < e->held_count; ++k) {
    ty_engine_token_t *t = &e->held[k];
    t->top_ids = e->held_top_ids + k * TY_ENGINE_MAX_TOP_LOGPROBS;
    t->top_logprobs = e->held_top_logprobs + k * TY_ENGINE_MAX_TOP_LOGPROBS;
    if (emit) emit(context, t);
  }
  e->held_count = 0;
}

/* Takes the run in flight (if any), launches the next on the worker, then
 * emits the taken tokens while the device runs: the caller's work between
 * steps overlaps the device's. */
static ty_status_t ty_engine_step_overlapped(ty_engine_t *e, ty_engine_emit_fn_t emit,
                                             void *context) {
  double t0 = ty_engine_now();
  ty_status_t s = TY_OK;
  e->held_count = 0;
  if (e->flight) {
    double t = ty_engine_now();
    s = ty_engine_wait(e);
    e->stats.run_seconds += ty_engine_now() - t;
    const ty_step_graph_t *g = e->flight;
    e->flight = NULL;
    if (!s) {
      s = ty_engine_collect(e, g, e->order, e->flight_n, ty_engine_hold, e);
    }
  }
  ty_step_graph_t *next = NULL;
  int64_t n = 0;
  if (!s) s = ty_engine_prepare(e, e->order, &n, &next);
  if (!s && next) {
    bool host, device;
    ty_engine_wanted(e, e->order, n, &host, &device);
    e->flight = next;
    e->flight_n = n;
    pthread_mutex_lock(&e->wlock);
    e->wgraph = next;
    e->whost = host;
    e->wdevice = device;
    e->wstate = TY_WORK_RUN;
    pthread_cond_broadcast(&e->wcond);
    pthread_mutex_unlock(&e->wlock);
  }
  /* Tokens taken before an error stand. */
  ty_engine_emit_held(e, emit, context);
  e->stats.last_step_seconds = ty_engine_now() - t0;
  e->stats.step_seconds += e->stats.last_step_seconds;
  return s;
}

ty_status_t ty_engine_step(ty_engine_t *e, ty_engine_emit_fn_t emit, void *context) {
  return e->worker_up ? ty_engine_step_overlapped(e, emit, context)
                      : ty_engine_step_now(e, emit, context);
}

ty_status_t ty_engine_warm_up(ty_engine_t *e) {
  if (e->stats.busy) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "the engine warms up before it takes sequences");
  }
  /* Every bucket once, all padding: nothing is written, nothing seen. */
  for (int b = 0; b < e->bucket_count; ++b) {
    TY_RETURN_IF_ERROR(ty_engine_bucket(e, b));
    ty_engine_fill(e, &e->buckets[b], NULL, 0);
    TY_RETURN_IF_ERROR(ty_engine_bind_run(e, &e->buckets[b]));
  }
  return TY_OK;
}

ty_engine_stats_t ty_engine_stats(const ty_engine_t *e) {
  ty_engine_stats_t s = e->stats;
  s.overlapped = e->worker_up;
  s.prefilling = 0;
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    const ty_seq_t *q = &e->seqs[i];
    s.prefilling += q->state == TY_SEQ_RUNNING && q->generated == 0;
  }
  ty_kv_pool_stats_t p = ty_kv_pool_stats(e->pool);
  s.kv_blocks = p.blocks;
  s.kv_block_size = p.block_size;
  s.kv_free = p.free;
  s.kv_cached = p.cached;
  s.prefix_hits = p.prefix_hits;
  return s;
}

int64_t ty_engine_context(const ty_engine_t *e) { return e->options.context; }

const ty_numerics_finding_t *ty_engine_numerics_finding(const ty_engine_t *e,
                                                        uint32_t *out_node_count) {
  if (out_node_count) *out_node_count = e->finding_nodes;
  return e->finding.found ? &e->finding : NULL;
}

int64_t ty_engine_free_slots(const ty_engine_t *e) {
  return e->options.max_batch - e->stats.busy;
}
