/* The token sampler (see sampler.h). Sampling works in double precision on
 * the f32 logits; the order of candidates is total (probability, then id),
 * so a seed picks the same token on every machine. */
#include "models/sampler.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
  double p;
  int64_t id;
} ty_candidate_t;

struct ty_sampler_t {
  int64_t vocab;
  ty_candidate_t *scratch;
};

ty_status_t ty_sampler_create(int64_t vocab_size, ty_sampler_t **out_sampler) {
  *out_sampler = NULL;
  ty_sampler_t *s = calloc(1, sizeof(*s));
  if (s) s->scratch = malloc((size_t)(vocab_size > 0 ? vocab_size : 1) * sizeof(ty_candidate_t));
  if (!s || !s->scratch) {
    free(s);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a sampler of %lld "
                          "tokens", (long long)vocab_size);
  }
  s->vocab = vocab_size;
  *out_sampler = s;
  return TY_OK;
}

void ty_sampler_destroy(ty_sampler_t *sampler) {
  if (!sampler) return;
  free(sampler->scratch);
  free(sampler);
}

/* splitmix64: the sampler's random numbers (host side, reproducible). */
static double ty_next_uniform(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* More likely first; equal probabilities: the lower id first. */
static int ty_candidate_before(const ty_candidate_t *a, const ty_candidate_t *b) {
  return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int ty_candidate_cmp(const void *a, const void *b) {
  const ty_candidate_t *x = a, *y = b;
  return ty_candidate_before(x, y) ? -1 : ty_candidate_before(y, x) ? 1 : 0;
}

/* Reorders c[0..n) so that c[0..k) are the k first in candidate order
 * (quickselect, expected O(n)). */
static void ty_select_first(ty_candidate_t *c, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    ty_candidate_t pivot = c[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (ty_candidate_before(&c[i], &pivot)) ++i;
      while (ty_candidate_before(&pivot, &c[j])) --j;
      if (i <= j) {
        ty_candidate_t t = c[i];
        c[i++] = c[j];
        c[j--] = t;
      }
    }
    if (k - 1 <= j) {
      hi = j;
    } else if (k - 1 >= i) {
      lo = i;
    } else {
      return;
    }
  }
}

static int64_t ty_argmax(const float *logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (logits[v] > logits[best]) best = v;
  }
  return best;
}

int64_t ty_sampler_pick(ty_sampler_t *sampler, const float *logits,
                        const ty_sampling_t *a, uint64_t *rng) {
  int64_t vocab = sampler->vocab;
  if (a->greedy) return ty_argmax(logits, vocab);
  ty_candidate_t *c = sampler->scratch;
  double max = logits[ty_argmax(logits, vocab)];
  for (int64_t v = 0; v < vocab; ++v) {
    c[v].id = v;
    c[v].p = exp(((double)logits[v] - max) / a->temperature);
  }
  int64_t keep = a->top_k > 0 && a->top_k < vocab ? a->top_k : vocab;
  bool truncated = keep < vocab || a->top_p < 1.0;
  if (truncated) {
    /* Only the kept candidates need an order: select them, sort those. */
    if (keep < vocab) ty_select_first(c, vocab, keep);
    qsort(c, (size_t)keep, sizeof(*c), ty_candidate_cmp);
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += c[i].p;
  if (a->top_p < 1.0) {
    double mass = 0, total = kept;
    kept = 0;
    for (int64_t i = 0; i < keep; ++i) {
      mass += c[i].p / total;
      kept += c[i].p;
      if (mass >= a->top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double u = ty_next_uniform(rng) * kept;
  for (int64_t i = 0; i < keep; ++i) {
    u -= c[i].p;
    if (u <= 0) return c[i].id;
  }
  return c[keep - 1].id;
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
  ty_candidate_t *c = sampler->scratch;
  for (int64_t v = 0; v < vocab; ++v) {
    c[v].id = v;
    c[v].p = (double)logits[v];
  }
  int64_t k = top < vocab ? top : vocab;
  if (k < vocab) ty_select_first(c, vocab, k);
  qsort(c, (size_t)k, sizeof(*c), ty_candidate_cmp);
  for (int64_t i = 0; i < k; ++i) {
    top_ids[i] = c[i].id;
    top_logprobs[i] = c[i].p - log_total;
  }
}
