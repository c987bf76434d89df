/* The generation engine (see engine.h): slots with KV caches of their own,
 * batched decode graphs by powers of two, a prefill graph per slot, and the
 * host-side sampler. */
#include "models/engine.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/runtime/numerics.h"
#include "hal/dtype.h"
#include "models/checkpoint.h"
#include "models/llm.h"
#include "models/safetensors.h"

typedef enum { TY_SLOT_FREE = 0, TY_SLOT_PREFILL, TY_SLOT_DECODE } ty_slot_state_t;

typedef struct {
  ty_slot_state_t state;
  uint64_t sequence;
  ty_engine_request_t request; /* request.prompt points at `prompt` */
  int64_t *prompt;   /* prompt_len tokens, then room for max_new: */
  int64_t *history;  /* the new tokens so far (the sampler's penalties count them) */
  int64_t prefilled; /* prompt tokens already in the cache */
  int64_t generated; /* new tokens so far */
  int64_t last;      /* the last new token: the next decode input */
  uint64_t rng;
} ty_slot_t;

/* One compiled step graph: a decode graph of `rows` rows (slots 0..rows-1)
 * or the prefill graph of one slot. */
typedef struct {
  ty_graph_t *graph;
  ty_llm_t model;
  ty_session_t *session;
  int64_t rows, seq;
} ty_step_graph_t;

struct ty_engine_t {
  ty_model_config_t config;
  ty_engine_options_t options;
  ty_device_t *device;
  int64_t cache_len;
  ty_slot_t *slots;
  ty_step_graph_t *decode; /* rows 1, 2, 4, ..., max_batch */
  int decode_count;
  ty_step_graph_t *prefill; /* per slot, compiled on first use */
  ty_sampler_t *sampler;
  void *raw;       /* logits as the graph gives them: max_batch rows */
  float *row;      /* one row as f32 */
  int64_t *tokens, *positions, *cache_position, *kv_len, *index; /* bind buffers */
  int64_t top_ids[TY_ENGINE_MAX_TOP_LOGPROBS];
  double top_logprobs[TY_ENGINE_MAX_TOP_LOGPROBS];
  uint64_t next_sequence;
  bool nonfinite_ok; /* weights loaded with allow_nonfinite: sample any logits */
  ty_numerics_finding_t finding; /* options.check_numerics: the first bad node */
  uint32_t finding_nodes;        /* the node count of its graph */
  ty_engine_stats_t stats;
};

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

/* Builds and opens a slot-cache graph of rows x seq tokens for slots
 * first..first+rows-1. The first graph opened shares `share` (weights from
 * a training session, or NULL); every later one shares the first's states. */
static ty_status_t ty_engine_open(ty_engine_t *e, int64_t rows, int64_t seq, int64_t first,
                                  const ty_session_t *share, ty_step_graph_t *out) {
  out->rows = rows;
  out->seq = seq;
  TY_RETURN_IF_ERROR(ty_graph_create(&out->graph));
  ty_llm_options_t o = {.batch = rows, .seq = seq, .dtype = e->options.dtype,
                        .compute_dtype = e->options.compute_dtype,
                        .logits_output = true, .cache_len = e->cache_len,
                        .slot_caches = true, .first_slot = first, .logits_at_index = seq > 1};
  TY_RETURN_IF_ERROR(ty_llm_build(out->graph, &e->config, &o, &out->model));
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
  /* Room for the padding of a last chunk that starts at context - 1. */
  e->cache_len = options->context + options->prefill_chunk - 1;
  int64_t N = options->max_batch, C = options->prefill_chunk, V = config->vocab_size;
  int64_t rows = N > C ? N : C;
  e->slots = calloc((size_t)N, sizeof(*e->slots));
  e->prefill = calloc((size_t)N, sizeof(*e->prefill));
  e->decode = calloc(14, sizeof(*e->decode)); /* 1, 2, ..., 4096 */
  e->raw = malloc((size_t)N * (size_t)V * ty_dtype_size(ty_engine_logits_dtype(options)));
  e->row = malloc((size_t)V * sizeof(float));
  e->tokens = malloc((size_t)rows * sizeof(int64_t));
  e->positions = malloc((size_t)rows * sizeof(int64_t));
  e->cache_position = malloc((size_t)N * sizeof(int64_t));
  e->kv_len = malloc((size_t)N * sizeof(int64_t));
  e->index = malloc((size_t)N * sizeof(int64_t));
  ty_status_t s = e->slots && e->prefill && e->decode && e->raw && e->row && e->tokens &&
                          e->positions && e->cache_position && e->kv_len && e->index
                      ? TY_OK
                      : ty_engine_oom();
  if (!s) s = ty_sampler_create(V, &e->sampler);
  /* The largest decode graph first: it holds every slot's caches, and the
   * weights (its own, or the training session's), for the others to share. */
  int64_t sizes[14];
  int count = 0;
  for (int64_t r = 1; r < N; r *= 2) sizes[count++] = r;
  sizes[count++] = N;
  for (int i = count - 1; i >= 0 && !s; --i) {
    const ty_session_t *share = i == count - 1 ? options->weights_from
                                               : e->decode[count - 1].session;
    s = ty_engine_open(e, sizes[i], 1, 0, share, &e->decode[i]);
  }
  e->decode_count = count;
  if (s) {
    ty_engine_destroy(e);
    return ty_status_annotate(s, "creating the generation engine (%lld slots of %lld tokens)",
                              (long long)N, (long long)options->context);
  }
  e->stats.slots = N;
  e->next_sequence = 1;
  *out_engine = e;
  return TY_OK;
}

void ty_engine_destroy(ty_engine_t *e) {
  if (!e) return;
  for (int64_t i = 0; e->prefill && i < e->options.max_batch; ++i) ty_engine_close(&e->prefill[i]);
  for (int i = 0; e->decode && i < e->decode_count; ++i) ty_engine_close(&e->decode[i]);
  for (int64_t i = 0; e->slots && i < e->options.max_batch; ++i) free(e->slots[i].prompt);
  ty_sampler_destroy(e->sampler);
  free(e->slots);
  free(e->prefill);
  free(e->decode);
  free(e->raw);
  free(e->row);
  free(e->tokens);
  free(e->positions);
  free(e->cache_position);
  free(e->kv_len);
  free(e->index);
  free(e);
}

ty_status_t ty_engine_load_weights(ty_engine_t *e, const char *dir,
                                   const ty_llm_load_options_t *options,
                                   ty_llm_load_report_t *out_report) {
  ty_step_graph_t *owner = &e->decode[e->decode_count - 1];
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

ty_status_t ty_engine_add(ty_engine_t *e, const ty_engine_request_t *r, uint64_t *out_sequence) {
  TY_RETURN_IF_ERROR(ty_engine_check_request(e, r));
  int64_t free_slot = -1;
  for (int64_t i = 0; i < e->options.max_batch && free_slot < 0; ++i) {
    if (e->slots[i].state == TY_SLOT_FREE) free_slot = i;
  }
  if (free_slot < 0) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "all %lld slots of the engine are busy",
                          (long long)e->options.max_batch);
  }
  ty_slot_t *slot = &e->slots[free_slot];
  int64_t *prompt = malloc((size_t)(r->prompt_len + r->max_new) * sizeof(int64_t));
  if (!prompt) return ty_engine_oom();
  memcpy(prompt, r->prompt, (size_t)r->prompt_len * sizeof(int64_t));
  free(slot->prompt);
  memset(slot, 0, sizeof(*slot));
  slot->prompt = prompt;
  slot->request = *r;
  slot->request.prompt = prompt;
  slot->history = prompt + r->prompt_len;
  slot->sequence = e->next_sequence++;
  slot->rng = r->sampling.seed;
  slot->state = TY_SLOT_PREFILL;
  e->stats.busy++;
  e->stats.prefilling++;
  if (out_sequence) *out_sequence = slot->sequence;
  return TY_OK;
}

static void ty_engine_free_slot(ty_engine_t *e, ty_slot_t *slot) {
  if (slot->state == TY_SLOT_PREFILL) e->stats.prefilling--;
  if (slot->state != TY_SLOT_FREE) e->stats.busy--;
  slot->state = TY_SLOT_FREE;
  free(slot->prompt);
  slot->prompt = NULL;
  slot->request.prompt = NULL;
}

void ty_engine_cancel(ty_engine_t *e, uint64_t sequence) {
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    ty_slot_t *slot = &e->slots[i];
    if (slot->state != TY_SLOT_FREE && slot->sequence == sequence) ty_engine_free_slot(e, slot);
  }
}

/* Samples the slot's next token from logits row `raw_row` (the logits'
 * dtype), records it and hands it to `emit`. */
static ty_status_t ty_engine_take(ty_engine_t *e, ty_slot_t *slot, const void *raw_row,
                                  ty_engine_emit_fn_t emit, void *context) {
  int64_t V = e->config.vocab_size;
  TY_RETURN_IF_ERROR(ty_safetensors_convert(ty_engine_logits_dtype(&e->options), raw_row,
                                            TY_DTYPE_F32, e->row, (size_t)V));
  for (int64_t v = 0; v < V && !e->nonfinite_ok; ++v) {
    if (!isfinite(e->row[v])) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "the model's logits for sequence %llu hold %g at token %lld (after "
                            "%lld new tokens): the device computed garbage",
                            (unsigned long long)slot->sequence, (double)e->row[v], (long long)v,
                            (long long)slot->generated);
    }
  }
  const ty_engine_request_t *r = &slot->request;
  ty_engine_token_t t = {.sequence = slot->sequence, .user = r->user, .index = slot->generated};
  t.id = ty_sampler_pick(e->sampler, e->row, &r->sampling, &slot->rng, slot->history,
                         slot->generated);
  if (r->logprobs || r->top_logprobs > 0) {
    ty_sampler_logprobs(e->sampler, e->row, t.id, r->top_logprobs, &t.logprob, e->top_ids,
                        e->top_logprobs);
    t.top_count = r->top_logprobs;
    t.top_ids = e->top_ids;
    t.top_logprobs = e->top_logprobs;
  }
  slot->history[slot->generated++] = t.id;
  slot->last = t.id;
  for (uint32_t i = 0; i < r->stop_id_count; ++i) {
    if (t.id == r->stop_ids[i]) t.finish = TY_ENGINE_STOP;
  }
  if (!t.finish && slot->generated == r->max_new) t.finish = TY_ENGINE_LENGTH;
  if (t.finish) ty_engine_free_slot(e, slot);
  if (emit) emit(context, &t);
  return TY_OK;
}

/* A position the model's tables hold (padding may run past the last one). */
static int64_t ty_engine_clamp(const ty_engine_t *e, int64_t position) {
  return position < e->config.max_positions ? position : e->config.max_positions - 1;
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
  bool prefill = false;
  for (int64_t i = 0; e->prefill && i < e->options.max_batch; ++i) prefill |= g == &e->prefill[i];
  return ty_status_make(TY_CODE_ABORTED,
                        "check-numerics: the %s run's node %u (%s) is the first to output a NaN "
                        "or an infinity",
                        prefill ? "prefill" : "decode", e->finding.node, e->finding.op);
}

static ty_status_t ty_engine_bind_run(ty_engine_t *e, ty_step_graph_t *g, bool with_index,
                                      int64_t *tokens,
                                      int64_t *positions, int64_t *cache_position,
                                      int64_t *kv_len, int64_t *index) {
  int64_t bt[2] = {g->rows, g->seq}, rows[1] = {g->rows};
  size_t all = (size_t)(g->rows * g->seq) * 8, per_row = (size_t)g->rows * 8;
  ty_session_t *s = g->session;
  TY_RETURN_IF_ERROR(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, tokens, all));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "positions", TY_DTYPE_I64, 2, bt, positions, all));
  TY_RETURN_IF_ERROR(
      ty_session_bind(s, "cache_position", TY_DTYPE_I64, 1, rows, cache_position, per_row));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "kv_len", TY_DTYPE_I64, 1, rows, kv_len, per_row));
  if (with_index) {
    TY_RETURN_IF_ERROR(ty_session_bind(s, "logits_index", TY_DTYPE_I64, 1, rows, index, per_row));
  }
  TY_RETURN_IF_ERROR(ty_session_run(s));
  return ty_engine_check(e, g);
}

static ty_status_t ty_engine_open_prefill(ty_engine_t *e, int64_t slot_index) {
  ty_step_graph_t *g = &e->prefill[slot_index];
  if (g->session) return TY_OK;
  ty_status_t s = ty_engine_open(e, 1, e->options.prefill_chunk, slot_index,
                                 e->decode[e->decode_count - 1].session, g);
  if (s) {
    ty_engine_close(g);
    return ty_status_annotate(s, "compiling the prefill graph of slot %lld",
                              (long long)slot_index);
  }
  return TY_OK;
}

/* Runs the next prompt chunk of the slot; after the last one, takes its
 * first new token. */
static ty_status_t ty_engine_prefill(ty_engine_t *e, int64_t slot_index,
                                     ty_engine_emit_fn_t emit, void *context) {
  ty_slot_t *slot = &e->slots[slot_index];
  ty_step_graph_t *g = &e->prefill[slot_index];
  int64_t C = e->options.prefill_chunk;
  TY_RETURN_IF_ERROR(ty_engine_open_prefill(e, slot_index));
  int64_t start = slot->prefilled, P = slot->request.prompt_len;
  int64_t n = P - start < C ? P - start : C;
  for (int64_t t = 0; t < C; ++t) {
    /* Padding after the real tokens: any valid id, written past them. */
    e->tokens[t] = t < n ? slot->prompt[start + t] : 0;
    e->positions[t] = ty_engine_clamp(e, start + t);
  }
  e->cache_position[0] = start;
  e->kv_len[0] = start + C;
  e->index[0] = n - 1;
  TY_RETURN_IF_ERROR(ty_engine_bind_run(e, g, C > 1, e->tokens, e->positions, e->cache_position,
                                        e->kv_len, e->index));
  e->stats.prefill_tokens += (uint64_t)n;
  slot->prefilled += n;
  if (slot->prefilled < P) return TY_OK;
  size_t row_bytes =
      (size_t)e->config.vocab_size * ty_dtype_size(ty_engine_logits_dtype(&e->options));
  TY_RETURN_IF_ERROR(ty_session_read(g->session, "logits", e->raw, row_bytes));
  slot->state = TY_SLOT_DECODE;
  e->stats.prefilling--;
  return ty_engine_take(e, slot, e->raw, emit, context);
}

/* One decode step of every decoding slot. */
static ty_status_t ty_engine_decode(ty_engine_t *e, ty_engine_emit_fn_t emit, void *context) {
  int64_t highest = -1;
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    if (e->slots[i].state == TY_SLOT_DECODE) highest = i;
  }
  if (highest < 0) return TY_OK;
  ty_step_graph_t *g = NULL;
  for (int i = 0; i < e->decode_count && !g; ++i) {
    if (e->decode[i].rows > highest) g = &e->decode[i];
  }
  int64_t decoding = 0;
  for (int64_t r = 0; r < g->rows; ++r) {
    const ty_slot_t *slot = &e->slots[r];
    /* Rows that do not decode write one row of garbage where their next
     * real token goes (overwritten before it is ever visible). */
    int64_t at = slot->state == TY_SLOT_DECODE    ? slot->request.prompt_len + slot->generated - 1
                 : slot->state == TY_SLOT_PREFILL ? slot->prefilled
                                                  : 0;
    e->tokens[r] = slot->state == TY_SLOT_DECODE ? slot->last : 0;
    e->positions[r] = ty_engine_clamp(e, at);
    e->cache_position[r] = at;
    e->kv_len[r] = at + 1;
    decoding += slot->state == TY_SLOT_DECODE;
  }
  TY_RETURN_IF_ERROR(ty_engine_bind_run(e, g, false, e->tokens, e->positions, e->cache_position,
                                        e->kv_len, NULL));
  size_t row_bytes =
      (size_t)e->config.vocab_size * ty_dtype_size(ty_engine_logits_dtype(&e->options));
  TY_RETURN_IF_ERROR(ty_session_read(g->session, "logits", e->raw, (size_t)g->rows * row_bytes));
  e->stats.decode_runs++;
  e->stats.decode_rows += (uint64_t)g->rows;
  e->stats.decode_tokens += (uint64_t)decoding;
  for (int64_t r = 0; r < g->rows; ++r) {
    ty_slot_t *slot = &e->slots[r];
    if (slot->state != TY_SLOT_DECODE) continue;
    TY_RETURN_IF_ERROR(ty_engine_take(e, slot, (const char *)e->raw + (size_t)r * row_bytes,
                                      emit, context));
  }
  return TY_OK;
}

/* The prefilling slot that came first (the lowest sequence id), or -1. */
static int64_t ty_engine_first_prefill(const ty_engine_t *e) {
  int64_t best = -1;
  for (int64_t i = 0; i < e->options.max_batch; ++i) {
    const ty_slot_t *slot = &e->slots[i];
    if (slot->state == TY_SLOT_PREFILL &&
        (best < 0 || slot->sequence < e->slots[best].sequence)) {
      best = i;
    }
  }
  return best;
}

ty_status_t ty_engine_step(ty_engine_t *e, ty_engine_emit_fn_t emit, void *context) {
  double t0 = ty_engine_now();
  bool ran = false;
  /* While nothing decodes, prefill until a sequence has its first token
   * (no stream waits on it); otherwise up to the prefill budget per step
   * (one chunk by default), so running streams wait at most that long. */
  bool decoding = e->stats.busy > e->stats.prefilling;
  int64_t budget = e->options.prefill_budget > e->options.prefill_chunk
                       ? e->options.prefill_budget
                       : e->options.prefill_chunk;
  int64_t slot, spent = 0;
  while ((slot = ty_engine_first_prefill(e)) >= 0) {
    TY_RETURN_IF_ERROR(ty_engine_prefill(e, slot, emit, context));
    ran = true;
    spent += e->options.prefill_chunk;
    bool waiting = decoding || e->stats.busy > e->stats.prefilling;
    if (waiting && spent + e->options.prefill_chunk > budget) break;
  }
  if (e->stats.busy > e->stats.prefilling) {
    TY_RETURN_IF_ERROR(ty_engine_decode(e, emit, context));
    ran = true;
  }
  if (ran) {
    e->stats.steps++;
    e->stats.last_step_seconds = ty_engine_now() - t0;
  }
  return TY_OK;
}

ty_status_t ty_engine_warm_up(ty_engine_t *e) {
  if (e->stats.busy) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "the engine warms up before it takes sequences");
  }
  int64_t C = e->options.prefill_chunk;
  /* Every row at position 0 of its (free) slot: what they write there is
   * overwritten by the slot's first prefill. */
  for (int64_t t = 0; t < C || t < e->options.max_batch; ++t) {
    e->tokens[t] = 0;
    e->positions[t] = t < C ? ty_engine_clamp(e, t) : 0;
  }
  for (int64_t r = 0; r < e->options.max_batch; ++r) {
    e->cache_position[r] = 0;
    e->kv_len[r] = 1;
    e->index[r] = 0;
  }
  for (int i = 0; i < e->decode_count; ++i) {
    TY_RETURN_IF_ERROR(ty_engine_bind_run(e, &e->decode[i], false, e->tokens, e->positions,
                                          e->cache_position, e->kv_len, NULL));
  }
  for (int64_t t = 0; t < C; ++t) e->positions[t] = ty_engine_clamp(e, t);
  e->kv_len[0] = C;
  for (int64_t slot = 0; slot < e->options.max_batch; ++slot) {
    TY_RETURN_IF_ERROR(ty_engine_open_prefill(e, slot));
    TY_RETURN_IF_ERROR(ty_engine_bind_run(e, &e->prefill[slot], C > 1, e->tokens, e->positions,
                                          e->cache_position, e->kv_len, e->index));
  }
  return TY_OK;
}

ty_engine_stats_t ty_engine_stats(const ty_engine_t *e) { return e->stats; }

int64_t ty_engine_context(const ty_engine_t *e) { return e->options.context; }

const ty_numerics_finding_t *ty_engine_numerics_finding(const ty_engine_t *e,
                                                        uint32_t *out_node_count) {
  if (out_node_count) *out_node_count = e->finding_nodes;
  return e->finding.found ? &e->finding : NULL;
}

int64_t ty_engine_free_slots(const ty_engine_t *e) {
  return e->options.max_batch - e->stats.busy;
}
