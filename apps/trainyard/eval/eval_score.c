/* Scoring an evaluation set (eval.h): teacher-forced log-likelihoods from
 * `trainyard forward`'s graph, greedy generations from the engine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "eval.h"
#include "models/engine.h"
#include "models/llm.h"
#include "models/safetensors.h"
#include "models/sampler.h"
#include "train/train_graph.h"

struct ty_eval_scorer_t {
  ty_eval_scorer_options_t o;
  ty_model_config_t config;
  int64_t B, T;
  ty_graph_t *graph;
  ty_llm_t model;
  ty_session_t *session;
  ty_engine_t *engine;
  ty_dtype_t loss_dtype;
  int64_t *tokens, *targets;
  void *weights;
  void *raw; /* the logits as the graph made them */
  float *logits;
};

static ty_status_t ty_eval_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

const ty_session_t *ty_eval_scorer_weights(const ty_eval_scorer_t *e) {
  return e->o.weights_from ? e->o.weights_from : e->session;
}

void ty_eval_scorer_destroy(ty_eval_scorer_t *e) {
  if (!e) return;
  ty_engine_destroy(e->engine); /* before the session whose weights it uses */
  ty_session_destroy(e->session);
  ty_llm_deinit(&e->model);
  ty_graph_destroy(e->graph);
  free(e->tokens);
  free(e->targets);
  free(e->weights);
  free(e->raw);
  free(e->logits);
  free(e);
}

ty_status_t ty_eval_scorer_create(ty_device_t *device, const ty_model_config_t *config,
                                  const ty_eval_set_t *set, const ty_eval_scorer_options_t *o,
                                  ty_eval_scorer_t **out) {
  *out = NULL;
  ty_eval_scorer_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_eval_oom();
  e->o = *o;
  e->config = *config;
  e->B = o->batch;
  e->T = set->max_row;
  size_t n = (size_t)(e->B * e->T), v = (size_t)config->vocab_size;
  e->tokens = malloc(n * sizeof(int64_t));
  e->targets = malloc(n * sizeof(int64_t));
  e->weights = calloc(n, sizeof(double));
  e->raw = malloc(n * v * 8);
  e->logits = malloc(n * v * sizeof(float));
  ty_status_t s = e->tokens && e->targets && e->weights && e->raw && e->logits ? TY_OK
                                                                              : ty_eval_oom();
  /* The graph of `trainyard forward` (its loss unused: every target -1). */
  if (!s) {
    s = ty_forward_graph_build(config, e->B, e->T, o->dtype, o->compute_dtype, false, &e->graph,
                               &e->model);
  }
  if (!s) {
    ty_session_options_t so = {.share_state_with = o->weights_from, .cache_dir = o->cache_dir,
                               .retry_failed = o->retry_failed,
                               .fallback_device = o->fallback_device,
                               .deterministic = o->deterministic};
    s = ty_session_create(device, e->graph, &so, &e->session);
  }
  if (!s && !o->weights_from) {
    s = ty_app_load_weights(&e->model, e->session, o->model_dir, o->allow_nonfinite, "eval");
  }
  if (!s) {
    ty_tensor_desc_t d;
    s = ty_session_value_desc(e->session, "loss_weights", &d);
    e->loss_dtype = d.dtype;
  }
  if (!s && set->generate) {
    int64_t chunk = set->max_row < 64 ? set->max_row : 64;
    ty_engine_options_t eo = {.dtype = o->dtype, .compute_dtype = o->compute_dtype,
                              .max_batch = e->B, .context = set->max_row,
                              .prefill_chunk = chunk, .weights_from = ty_eval_scorer_weights(e),
                              .cache_dir = o->cache_dir, .retry_failed = o->retry_failed,
                              .fallback_device = o->fallback_device,
                              .deterministic = o->deterministic};
    s = ty_engine_create(device, config, &eo, &e->engine);
  }
  if (s) {
    ty_eval_scorer_destroy(e);
    return s;
  }
  *out = e;
  return TY_OK;
}

/* One forward run over up to B (item, continuation) rows. */
typedef struct {
  ty_eval_item_t *item;
  size_t cont;
} ty_eval_row_t;

static ty_status_t ty_eval_forward(ty_eval_scorer_t *e, const ty_eval_row_t *rows, int64_t count) {
  int64_t B = e->B, T = e->T, V = e->config.vocab_size;
  for (int64_t b = 0; b < B; ++b) {
    int64_t *tok = e->tokens + b * T, len = 0;
    if (b < count) {
      const ty_eval_item_t *it = rows[b].item;
      memcpy(tok, it->prompt, (size_t)it->prompt_len * sizeof(int64_t));
      memcpy(tok + it->prompt_len, it->cont[rows[b].cont],
             (size_t)it->cont_len[rows[b].cont] * sizeof(int64_t));
      len = it->prompt_len + it->cont_len[rows[b].cont];
    }
    /* Padding after the real tokens: causal attention keeps it out of them. */
    for (int64_t p = len; p < T; ++p) tok[p] = 0;
    for (int64_t p = 0; p < T; ++p) e->targets[b * T + p] = -1;
  }
  int64_t bt[2] = {B, T};
  size_t n = (size_t)(B * T);
  TY_RETURN_IF_ERROR(ty_session_bind(e->session, "tokens", TY_DTYPE_I64, 2, bt, e->tokens, n * 8));
  TY_RETURN_IF_ERROR(ty_session_bind(e->session, "targets", TY_DTYPE_I64, 2, bt, e->targets, n * 8));
  TY_RETURN_IF_ERROR(ty_session_bind(e->session, "loss_weights", e->loss_dtype, 2, bt, e->weights,
                                     n * ty_dtype_size(e->loss_dtype)));
  TY_RETURN_IF_ERROR(ty_session_run(e->session));
  ty_tensor_desc_t d;
  TY_RETURN_IF_ERROR(ty_session_value_desc(e->session, "logits", &d));
  size_t elements = n * (size_t)V;
  TY_RETURN_IF_ERROR(ty_session_read(e->session, "logits", e->raw,
                                     elements * ty_dtype_size(d.dtype)));
  return ty_safetensors_convert(d.dtype, e->raw, TY_DTYPE_F32, e->logits, elements);
}

static ty_status_t ty_eval_likelihoods(ty_eval_scorer_t *e, ty_eval_set_t *set) {
  size_t rows_total = 0;
  for (size_t i = 0; i < set->count; ++i) rows_total += set->items[i].cont_count;
  ty_eval_row_t *rows = malloc(rows_total * sizeof(*rows));
  if (!rows) return ty_eval_oom();
  size_t r = 0;
  for (size_t i = 0; i < set->count; ++i) {
    for (size_t k = 0; k < set->items[i].cont_count; ++k) rows[r++] = (ty_eval_row_t){&set->items[i], k};
  }
  int64_t T = e->T, V = e->config.vocab_size;
  ty_status_t s = TY_OK;
  for (size_t first = 0; first < rows_total && !s; first += (size_t)e->B) {
    int64_t count = (int64_t)(rows_total - first < (size_t)e->B ? rows_total - first : (size_t)e->B);
    s = ty_eval_forward(e, rows + first, count);
    if (s) {
      s = ty_status_annotate(s, "%s:%zu", set->path, rows[first].item->line);
      break;
    }
    for (int64_t b = 0; b < count; ++b) {
      ty_eval_item_t *it = rows[first + (size_t)b].item;
      size_t k = rows[first + (size_t)b].cont;
      const int64_t *cont = it->cont[k];
      double sum = 0;
      for (int64_t j = 0; j < it->cont_len[k]; ++j) {
        /* The logits at position p predict the token at p + 1. */
        const float *row = e->logits + ((size_t)(b * T + it->prompt_len - 1 + j)) * (size_t)V;
        int64_t arg = 0;
        /* The server's definition (ty_sampler_logprob), so that a
         * sequence's log-likelihood here is the sum of its logprobs there. */
        double lp = ty_sampler_logprob(row, V, cont[j], &arg);
        if (!isfinite(lp)) {
          free(rows);
          return ty_status_make(TY_CODE_DATA_LOSS, "%s:%zu: the model's logits are not finite "
                                "(log-likelihood %g)", set->path, it->line, lp);
        }
        sum += lp;
        if (j == 0 && k == it->answer) {
          it->first_token = arg;
          it->first_token_match = arg == cont[0];
        }
      }
      it->logprob[k] = sum;
    }
  }
  free(rows);
  for (size_t i = 0; i < set->count; ++i) {
    ty_eval_item_t *it = &set->items[i];
    it->chosen = 0;
    for (size_t k = 1; k < it->cont_count; ++k) {
      if (it->logprob[k] > it->logprob[it->chosen]) it->chosen = k;
    }
  }
  return s;
}

typedef struct {
  ty_eval_set_t *set;
  size_t done;
} ty_eval_gen_t;

static void ty_eval_on_token(void *context, const ty_engine_token_t *t) {
  ty_eval_gen_t *g = context;
  ty_eval_item_t *it = t->user;
  it->generated[it->generated_len++] = t->id;
  if (t->finish != TY_ENGINE_RUNNING) g->done++;
}

/* Text without the white space at both ends. */
static void ty_eval_trim(const char *text, size_t size, const char **out, size_t *out_size) {
  while (size && strchr(" \t\r\n", *text)) {
    text++;
    size--;
  }
  while (size && strchr(" \t\r\n", text[size - 1])) size--;
  *out = text;
  *out_size = size;
}

static ty_status_t ty_eval_exact(ty_eval_item_t *it, const ty_tokenizer_t *tokenizer,
                                 int64_t eos_id) {
  int64_t n = it->generated_len;
  if (!it->cont_text[0] || !tokenizer) {
    it->exact_match = ty_eval_same_ids(it->generated, n, it->cont[0], it->cont_len[0]);
    return TY_OK;
  }
  /* The end-of-text token ends the answer; it is no part of its text. */
  if (n && it->generated[n - 1] == eos_id) n--;
  uint32_t *ids = malloc((size_t)(n ? n : 1) * sizeof(uint32_t));
  if (!ids) return ty_eval_oom();
  for (int64_t i = 0; i < n; ++i) ids[i] = (uint32_t)it->generated[i];
  size_t size = 0;
  ty_status_t s = ty_tokenizer_decode(tokenizer, ids, (size_t)n, TY_TOKENIZER_DECODE_SKIP_SPECIAL,
                                      &it->generated_text, &size);
  free(ids);
  TY_RETURN_IF_ERROR(s);
  const char *a, *b;
  size_t na, nb;
  ty_eval_trim(it->generated_text, size, &a, &na);
  ty_eval_trim(it->cont_text[0], strlen(it->cont_text[0]), &b, &nb);
  it->exact_match = na == nb && !memcmp(a, b, na);
  return TY_OK;
}

static ty_status_t ty_eval_generate(ty_eval_scorer_t *e, ty_eval_set_t *set,
                                    const ty_tokenizer_t *tokenizer) {
  ty_eval_gen_t g = {set, 0};
  size_t next = 0;
  for (size_t i = 0; i < set->count; ++i) {
    ty_eval_item_t *it = &set->items[i];
    free(it->generated);
    free(it->generated_text);
    it->generated_text = NULL;
    it->generated_len = 0;
    it->generated = malloc((size_t)it->cont_len[0] * sizeof(int64_t));
    if (!it->generated) return ty_eval_oom();
  }
  while (g.done < set->count) {
    while (next < set->count && ty_engine_free_slots(e->engine) > 0) {
      ty_eval_item_t *it = &set->items[next++];
      ty_engine_request_t q = {.prompt = it->prompt, .prompt_len = it->prompt_len,
                               .max_new = it->cont_len[0], .sampling = {.greedy = true},
                               .user = it};
      if (e->o.eos_id >= 0) q.stop_ids[q.stop_id_count++] = e->o.eos_id;
      ty_status_t s = ty_engine_add(e->engine, &q, NULL);
      if (s) return ty_status_annotate(s, "%s:%zu", set->path, it->line);
    }
    TY_RETURN_IF_ERROR(ty_engine_step(e->engine, ty_eval_on_token, &g));
  }
  for (size_t i = 0; i < set->count; ++i) {
    ty_status_t s = ty_eval_exact(&set->items[i], tokenizer, e->o.eos_id);
    if (s) return ty_status_annotate(s, "%s:%zu", set->path, set->items[i].line);
  }
  return TY_OK;
}

ty_status_t ty_eval_score(ty_eval_scorer_t *e, ty_eval_set_t *set,
                          const ty_tokenizer_t *tokenizer) {
  if (set->max_row > e->T) {
    return ty_status_make(TY_CODE_INTERNAL, "%s: rows of %lld tokens, the scorer was built for "
                          "%lld", set->path, (long long)set->max_row, (long long)e->T);
  }
  TY_RETURN_IF_ERROR(ty_eval_likelihoods(e, set));
  if (set->generate) TY_RETURN_IF_ERROR(ty_eval_generate(e, set, tokenizer));
  return TY_OK;
}

ty_eval_summary_t ty_eval_summarize(const ty_eval_set_t *set) {
  ty_eval_summary_t m = {.lines = set->count, .exact_match = NAN, .choice_accuracy = NAN};
  double lp = 0, first = 0, exact = 0, right = 0;
  for (size_t i = 0; i < set->count; ++i) {
    const ty_eval_item_t *it = &set->items[i];
    lp += it->logprob[it->answer];
    m.tokens += it->cont_len[it->answer];
    first += it->first_token_match;
    exact += it->exact_match;
    right += it->chosen == it->answer;
  }
  double n = (double)set->count;
  m.mean_logprob = m.tokens ? lp / (double)m.tokens : NAN;
  m.perplexity = exp(-m.mean_logprob);
  m.first_token_match = first / n;
  if (set->generate) m.exact_match = exact / n;
  if (set->choices) m.choice_accuracy = right / n;
  m.accuracy = set->choices ? m.choice_accuracy : m.exact_match;
  /* The majority class: the most common expected continuation. */
  size_t best = 0;
  for (size_t i = 0; i < set->count; ++i) {
    const ty_eval_item_t *a = &set->items[i];
    size_t same = 0;
    for (size_t j = 0; j < set->count; ++j) {
      const ty_eval_item_t *b = &set->items[j];
      same += ty_eval_same_ids(a->cont[a->answer], a->cont_len[a->answer], b->cont[b->answer],
                               b->cont_len[b->answer]);
    }
    if (same > best) best = same;
  }
  m.majority_baseline = (double)best / n;
  return m;
}
