/* The token sampler of the generation engine: picks the next token from a
 * row of logits (penalties from the sequence's history, then greedy, or
 * temperature / top-k / top-p / min-p sampling with a reproducible host-side
 * random stream) and reports log-probabilities.
 *
 * The definition is the `sample` op's (docs/ops.md; issue 29's op contract),
 * and ty_sampler_pick computes it by calling the op's reference row function
 * (ops/reference/ref_sample.h), so a backend's `sample` op and this host
 * path pick the same tokens: penalties first; temperature 0 (or greedy) is
 * the argmax (ties: the lower id); else the kept set is chosen in
 * probability order (top_k, then top_p over what top_k kept, then min_p),
 * and the draw walks the kept tokens in id order.
 *
 * Ownership: a sampler owns its scratch (one candidate per vocabulary
 * entry); destroy it once. Threads: one sampler per thread (the scratch is
 * shared by calls). Errors: create fails only when memory runs out. */
#ifndef TY_MODELS_SAMPLER_H_
#define TY_MODELS_SAMPLER_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the next token is picked from a row of logits. The valid ranges are
 * the `sample` op's (ty_sampling_check); callers check at their edge. */
typedef struct ty_sampling_t {
  bool greedy;        /* the most likely token (ties: the lower id, like torch.argmax) */
  double temperature; /* > 0: sample from softmax(x / temperature); 0: greedy */
  int64_t top_k;      /* among the K most likely tokens (0: all) */
  double top_p;       /* then among the shortest run of those with mass >= top_p
                         (the mass renormalized over the top-k; 1: all) */
  uint64_t seed;      /* the sampler's splitmix64 seed (host side, reproducible) */
  double min_p;       /* then those with probability >= min_p * the top one's (0: off) */
  /* Penalties on the tokens of the history (ty_sampler_pick's argument),
   * before everything else: x / rep for x > 0, x * rep otherwise, then
   * minus presence + frequency * count. Zero-initialized means off for
   * presence and frequency; repetition_penalty 0 is read as 1 (off), so a
   * struct that predates it keeps its meaning. */
  double repetition_penalty; /* > 0; 1 (or 0): off */
  double presence_penalty;
  double frequency_penalty;
} ty_sampling_t;

/* OK when `sampling` is in the `sample` op's ranges: unless greedy,
 * temperature finite and > 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1);
 * repetition_penalty >= 0 and finite (0 means 1), the other penalties
 * finite. INVALID_ARGUMENT names the field otherwise. Pure; any thread. */
ty_status_t ty_sampling_check(const ty_sampling_t *sampling);

typedef struct ty_sampler_t ty_sampler_t;

ty_status_t ty_sampler_create(int64_t vocab_size, ty_sampler_t **out_sampler);
void ty_sampler_destroy(ty_sampler_t *sampler);

/* The next token from `logits` (vocab_size floats). `rng` is the sequence's
 * random state: start it at sampling->seed; each sampled (not greedy) token
 * advances it by one draw, so a seed gives the same tokens on every run and
 * whatever else shares the batch (draw c is the `sample` op's row with
 * seeds {seed, c}). `history` (history_len ids, -1 for none; NULL when
 * history_len is 0) holds the tokens the penalties count; every id must be
 * in [-1, vocab_size). `sampling` must pass ty_sampling_check. */
int64_t ty_sampler_pick(ty_sampler_t *sampler, const float *logits,
                        const ty_sampling_t *sampling, uint64_t *rng,
                        const int64_t *history, int64_t history_len);

/* log softmax(logits)[id] = logits[id] - (max + log(sum_v exp(logits[v] -
 * max))), in f64 over the f32 logits, summed in vocabulary order: the one
 * definition of a token's log-probability that the server
 * (ty_sampler_logprobs) and `trainyard eval` share, so that equal logits
 * give equal bits in both. *out_argmax (may be NULL): the most likely id
 * (ties: the lower id, as greedy picks). Pure; any thread. */
double ty_sampler_logprob(const float *logits, int64_t vocab, int64_t id, int64_t *out_argmax);

/* log softmax(logits)[chosen] (ty_sampler_logprob) into *out_logprob (the model's distribution,
 * before temperature or truncation, as OpenAI reports it) and, when top > 0,
 * the `top` most likely tokens (ties: the lower id) with theirs, most likely
 * first, into top_ids / top_logprobs (`top` entries each, top <= vocab). */
void ty_sampler_logprobs(ty_sampler_t *sampler, const float *logits, int64_t chosen,
                         int32_t top, double *out_logprob, int64_t *top_ids,
                         double *top_logprobs);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_SAMPLER_H_ */
