/* Reference sampling (issue 29): the `sample` op's definition, one row at a
 * time, and `top_logprobs`. Part of ty_ops_reference (f64, the spec). The
 * row function is the one definition of a sampled token: the reference
 * executor, the cpu kernels and the host sampler (models/sampler.c) all
 * call it, so they agree bit for bit on every row.
 *
 * A row, given its logits x (as stored, widened to f64), its params
 * (columns of sample_params.h), its {seed, counter} and its history:
 *  1. For each v with c_v > 0 occurrences in the history (-1 is padding):
 *     x_v = x_v > 0 ? x_v / rep : x_v * rep; x_v -= presence + frequency * c_v.
 *  2. temperature == 0: the token is argmax x (ties: the lower id); no draw.
 *  3. Else w_v = exp((x_v - max x) / temperature).
 *  4. Candidates in order (w descending, id ascending): top_k > 0 keeps the
 *     first top_k; top_p < 1 keeps the shortest leading run whose sum (in
 *     that order) is >= top_p * the sum of them all; min_p > 0 keeps those
 *     with w >= min_p. The first candidate is always kept.
 *  5. u = ty_ref_sample_uniform(seed, counter); r = u * (sum of the kept w,
 *     in id order); walk the kept in id order, r -= w_v; the first that
 *     brings r to <= 0 is the token (the last kept if rounding leaves some).
 * logprob = log softmax(x as stored)[token] (before penalties and
 * temperature), max + log(sum exp(x - max)) summed in id order.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread with its own scratch and outputs.
 * Errors: ty_ref_sample_check / ty_ref_sample return INVALID_ARGUMENT naming
 * the row and the parameter for invalid params or a history id outside
 * [-1, V), before any output is written. */
#ifndef TY_OPS_REFERENCE_REF_SAMPLE_H_
#define TY_OPS_REFERENCE_REF_SAMPLE_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* u in [0, 1) of draw `counter` of the stream started at `seed`: splitmix64
 * state seed + (counter + 1) * golden, finalized, top 53 bits. */
double ty_ref_sample_uniform(uint64_t seed, int64_t counter);

/* Bytes of scratch ty_ref_sample_row needs for a vocabulary of `vocab`. */
size_t ty_ref_sample_scratch_bytes(int64_t vocab);

/* Checks row `row`'s params (TY_SAMPLE_P_COUNT doubles) and history
 * (history_len ids, NULL when absent): temperature >= 0 and finite, top_k a
 * non-negative integer, top_p in (0, 1], min_p in [0, 1), repetition > 0
 * and finite, presence and frequency finite, history ids in [-1, vocab).
 * On error *out_column (may be NULL) is the bad column (TY_SAMPLE_P_HISTORY
 * for a history id). */
ty_status_t ty_ref_sample_check(const double *params, int64_t vocab, const int64_t *history,
                                int64_t history_len, int64_t row, int *out_column);

/* The token of one row (see the definition above) and, when out_logprob is
 * not NULL, its log-probability over the raw logits. `params` must have
 * passed ty_ref_sample_check. `scratch` is ty_ref_sample_scratch_bytes(vocab)
 * bytes, aligned for double; its contents are not kept. */
int64_t ty_ref_sample_row(const double *logits, int64_t vocab, const double *params,
                          uint64_t seed, int64_t counter, const int64_t *history,
                          int64_t history_len, void *scratch, double *out_logprob);

/* log softmax(logits)[id]: logits[id] - (max + log(sum exp(logits - max))). */
double ty_ref_sample_logprob(const double *logits, int64_t vocab, int64_t id);

/* sample over `rows` rows: logits [rows, vocab], params [rows, 7],
 * seeds [rows, 2] ({seed bits, counter}), history [rows, history_len] or
 * NULL; out_ids [rows] (ids as doubles) and out_logprob [rows]. */
ty_status_t ty_ref_sample(const double *logits, int64_t rows, int64_t vocab,
                          const double *params, const int64_t *seeds, const int64_t *history,
                          int64_t history_len, double *out_ids, double *out_logprob);

/* The ids of the k most likely tokens of one row (ties: the lower id
 * first; NaN counts as -inf), most likely first, into out_ids [k];
 * 1 <= k <= vocab. `scratch` as for ty_ref_sample_row. The one ranking of
 * top_logprobs and of the host sampler's top log-probabilities. */
void ty_ref_top_ids(const double *logits, int64_t vocab, int64_t k, void *scratch,
                    int64_t *out_ids);

/* top_logprobs: for each row the k most likely tokens (ties: the lower id
 * first), most likely first, and their log softmax; out_ids and
 * out_logprobs are [rows, k]. INVALID_ARGUMENT for k outside [1, vocab]. */
ty_status_t ty_ref_top_logprobs(const double *logits, int64_t rows, int64_t vocab, int64_t k,
                                double *out_ids, double *out_logprobs);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_SAMPLE_H_ */
