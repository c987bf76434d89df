/* The token sampler (see sampler.h). Picking is the `sample` op's reference
 * row function (ops/reference/ref_sample.c) on the logits widened to f64,
 * so the host path and the op are one definition; log-probabilities work in
 * double precision on the f32 logits, ranked as the top_logprobs op ranks
 * them (ty_ref_top_ids: probability, then id). */
#include "models/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "backends/common/sample_params.h"
#include "ops/reference/ref_sample.h"

struct ty_sampler_t {
  int64_t vocab;
  double *row;      /* the logits widened to f64 for the reference's row functions */
  void *ref_scratch; /* ty_ref_sample_scratch_bytes(vocab) */
};

ty_status_t ty_sampler_create(int64_t vocab_size, ty_sampler_t **out_sampler) {
  *out_sampler = NULL;
  size_t v = (size_t)(vocab_size > 0 ? vocab_size : 1);
  ty_sampler_t *s = calloc(1, sizeof(*s));
  if (s) {
    s->row = malloc(v * sizeof(double));
    s->ref_scratch = malloc(ty_ref_sample_scratch_bytes(vocab_size));
  }
  if (!s || !s->row || !s->ref_scratch) {
    ty_sampler_destroy(s);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a sampler of %lld "
                          "tokens", (long long)vocab_size);
  }
  s->vocab = vocab_size;
  *out_sampler = s;
  return TY_OK;
}

void ty_sampler_destroy(ty_sampler_t *sampler) {
  if (!sampler) return;
  free(sampler->row);
  free(sampler->ref_scratch);
  free(sampler);
}

/* The `sample` op's params row for `a` (sample_params.h's columns). */
static void ty_sampling_params(const ty_sampling_t *a, double p[TY_SAMPLE_P_COUNT]) {
  p[TY_SAMPLE_P_TEMPERATURE] = a->greedy ? 0.0 : a->temperature;
  p[TY_SAMPLE_P_TOP_K] = a->greedy ? 0.0 : (double)a->top_k;
  p[TY_SAMPLE_P_TOP_P] = a->greedy ? 1.0 : a->top_p;
  p[TY_SAMPLE_P_MIN_P] = a->greedy ? 0.0 : a->min_p;
  p[TY_SAMPLE_P_REPETITION] = a->repetition_penalty == 0 ? 1.0 : a->repetition_penalty;
  p[TY_SAMPLE_P_PRESENCE] = a->presence_penalty;
  p[TY_SAMPLE_P_FREQUENCY] = a->frequency_penalty;
}

static ty_status_t ty_sampling_bad(const char *field, double value, const char *rule) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT, "sampling: %s = %g: expected %s", field, value,
                        rule);
}

ty_status_t ty_sampling_check(const ty_sampling_t *a) {
  /* Greedy reads none of the draw's fields (zero-initialized ones included). */
  if (!a->greedy) {
    if (!(a->temperature > 0) || !isfinite(a->temperature)) {
      return ty_sampling_bad("temperature", a->temperature, "temperature > 0 and finite when sampling (greedy needs none)");
    }
    if (a->top_k < 0) return ty_sampling_bad("top_k", (double)a->top_k, "top_k >= 0 (0: all)");
    if (!(a->top_p > 0 && a->top_p <= 1)) {
      return ty_sampling_bad("top_p", a->top_p, "top_p in (0, 1]");
    }
    if (!(a->min_p >= 0 && a->min_p < 1)) {
      return ty_sampling_bad("min_p", a->min_p, "min_p in [0, 1)");
    }
  }
  if (!(a->repetition_penalty >= 0) || !isfinite(a->repetition_penalty)) {
    return ty_sampling_bad("repetition_penalty", a->repetition_penalty, "repetition_penalty > 0 and finite (1: off)");
  }
  if (!isfinite(a->presence_penalty)) {
    return ty_sampling_bad("presence_penalty", a->presence_penalty, "a finite presence_penalty");
  }
  if (!isfinite(a->frequency_penalty)) {
    return ty_sampling_bad("frequency_penalty", a->frequency_penalty, "a finite frequency_penalty");
  }
  return TY_OK;
}

int64_t ty_sampler_pick(ty_sampler_t *sampler, const float *logits,
                        const ty_sampling_t *a, uint64_t *rng,
                        const int64_t *history, int64_t history_len) {
  int64_t vocab = sampler->vocab;
  double p[TY_SAMPLE_P_COUNT];
  ty_sampling_params(a, p);
  for (int64_t v = 0; v < vocab; ++v) sampler->row[v] = logits[v];
  /* The op's row {seed, counter} = {*rng, 0} is the next draw of this
   * stream: the state after it is *rng + golden. */
  int64_t id = ty_ref_sample_row(sampler->row, vocab, p, *rng, 0,
                                 history_len > 0 ? history : NULL, history_len,
                                 sampler->ref_scratch, NULL);
  if (p[TY_SAMPLE_P_TEMPERATURE] > 0) *rng += (uint64_t)TY_SAMPLE_GOLDEN;
  return id;
}

static int64_t ty_argmax(const float *logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  return best;
}

/* max + log(sum exp(logits - max)): the log of softmax's denominator. One
 * order of summation (the vocabulary's), so every caller gets the same bits. */
static double ty_log_normalizer(const float *logits, int64_t vocab, int64_t *out_argmax) {
  int64_t arg = ty_argmax(logits, vocab);
  double max = logits[arg], total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += exp((double)logits[v] - max);
  if (out_argmax) *out_argmax = arg;
  return max + log(total);
}

double ty_sampler_logprob(const float *logits, int64_t vocab, int64_t id, int64_t *out_argmax) {
  return (double)logits[id] - ty_log_normalizer(logits, vocab, out_argmax);
}

void ty_sampler_logprobs(ty_sampler_t *sampler, const float *logits, int64_t chosen,
                         int32_t top, double *out_logprob, int64_t *top_ids,
                         double *top_logprobs) {
  int64_t vocab = sampler->vocab;
  double log_total = ty_log_normalizer(logits, vocab, NULL);
  *out_logprob = (double)logits[chosen] - log_total;
  if (top <= 0) return;
  /* The ranking of the top_logprobs op (ties: the lower id first). */
  for (int64_t v = 0; v < vocab; ++v) sampler->row[v] = logits[v];
  int64_t k = top < vocab ? top : vocab;
  ty_ref_top_ids(sampler->row, vocab, k, sampler->ref_scratch, top_ids);
  for (int64_t i = 0; i < k; ++i) top_logprobs[i] = (double)logits[top_ids[i]] - log_total;
}
