/* Reference sampling (see ref_sample.h for the definition, step by step).
 * f64 throughout; the order of candidates is total (w, then id), so a seed
 * picks the same token on every machine. A NaN weight counts as 0 and a NaN
 * logit never wins the argmax (the spec leaves NaN logits undefined). */
#include "ops/reference/ref_sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backends/common/sample_params.h"

typedef struct {
  double w;
  int64_t id;
} ty_cand_t;

double ty_ref_sample_uniform(uint64_t seed, int64_t counter) {
  uint64_t z = seed + ((uint64_t)counter + 1u) * (uint64_t)TY_SAMPLE_GOLDEN;
  z = (z ^ (z >> 30)) * (uint64_t)TY_SAMPLE_MIX1;
  z = (z ^ (z >> 27)) * (uint64_t)TY_SAMPLE_MIX2;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

size_t ty_ref_sample_scratch_bytes(int64_t vocab) {
  size_t v = (size_t)(vocab > 0 ? vocab : 1);
  return v * sizeof(ty_cand_t) + v * sizeof(int32_t);
}

/* Higher weight first; equal weights: the lower id first. */
static bool ty_before(const ty_cand_t *a, const ty_cand_t *b) {
  return a->w > b->w || (a->w == b->w && a->id < b->id);
}

static int ty_cand_cmp(const void *a, const void *b) {
  const ty_cand_t *x = a, *y = b;
  return ty_before(x, y) ? -1 : ty_before(y, x) ? 1 : 0;
}

static int ty_id_cmp(const void *a, const void *b) {
  const ty_cand_t *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id ? 1 : 0;
}

/* Reorders c[0..n) so that c[0..k) are the first k in candidate order
 * (quickselect, expected O(n)); 0 < k <= n. */
static void ty_select_first(ty_cand_t *c, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    ty_cand_t pivot = c[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (ty_before(&c[i], &pivot)) ++i;
      while (ty_before(&pivot, &c[j])) --j;
      if (i <= j) {
        ty_cand_t t = c[i];
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

static const char *const ty_sample_column_names[TY_SAMPLE_P_COUNT + 1] = {
    "temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "history"};

static ty_status_t ty_bad(int64_t row, int column, double value, const char *rule,
                          int *out_column) {
  if (out_column) *out_column = column;
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "sample: row %lld has %s = %g: %s (params column %d)", (long long)row,
                        ty_sample_column_names[column], value, rule, column);
}

ty_status_t ty_ref_sample_check(const double *p, int64_t vocab, const int64_t *history,
                                int64_t history_len, int64_t row, int *out_column) {
  double t = p[TY_SAMPLE_P_TEMPERATURE], k = p[TY_SAMPLE_P_TOP_K], tp = p[TY_SAMPLE_P_TOP_P];
  double mp = p[TY_SAMPLE_P_MIN_P], rep = p[TY_SAMPLE_P_REPETITION];
  if (!(t >= 0) || !isfinite(t)) {
    return ty_bad(row, TY_SAMPLE_P_TEMPERATURE, t, "expected a finite value >= 0", out_column);
  }
  if (!(k >= 0) || !isfinite(k) || floor(k) != k) {
    return ty_bad(row, TY_SAMPLE_P_TOP_K, k, "expected an integer >= 0", out_column);
  }
  if (!(tp > 0 && tp <= 1)) {
    return ty_bad(row, TY_SAMPLE_P_TOP_P, tp, "expected a value in (0, 1]", out_column);
  }
  if (!(mp >= 0 && mp < 1)) {
    return ty_bad(row, TY_SAMPLE_P_MIN_P, mp, "expected a value in [0, 1)", out_column);
  }
  if (!(rep > 0) || !isfinite(rep)) {
    return ty_bad(row, TY_SAMPLE_P_REPETITION, rep, "expected a finite value > 0",
                  out_column);
  }
  for (int col = TY_SAMPLE_P_PRESENCE; col <= TY_SAMPLE_P_FREQUENCY; ++col) {
    if (!isfinite(p[col])) return ty_bad(row, col, p[col], "expected a finite value", out_column);
  }
  for (int64_t j = 0; history && j < history_len; ++j) {
    if (history[j] < -1 || history[j] >= vocab) {
      if (out_column) *out_column = TY_SAMPLE_P_HISTORY;
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "sample: row %lld has history id %lld at index %lld, outside "
                            "[-1, %lld) (-1 pads; the rest must be token ids)",
                            (long long)row, (long long)history[j], (long long)j,
                            (long long)vocab);
    }
  }
  return TY_OK;
}

/* max + log(sum_v exp(x_v - max)), summed in id order. */
static double ty_log_norm(const double *x, int64_t vocab) {
  double max = x[0];
  for (int64_t v = 1; v < vocab; ++v) {
    if (x[v] > max) max = x[v];
  }
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v) total += exp(x[v] - max);
  return max + log(total);
}

double ty_ref_sample_logprob(const double *logits, int64_t vocab, int64_t id) {
  return logits[id] - ty_log_norm(logits, vocab);
}

/* Step 1: penalties on c[v].w (holding x) for the ids of the history.
 * count[] needs no zeroing: only the history's entries are read. */
static void ty_apply_penalties(ty_cand_t *c, int32_t *count, const double *p,
                               const int64_t *history, int64_t len) {
  double rep = p[TY_SAMPLE_P_REPETITION], presence = p[TY_SAMPLE_P_PRESENCE];
  double frequency = p[TY_SAMPLE_P_FREQUENCY];
  for (int64_t j = 0; j < len; ++j) {
    if (history[j] >= 0) count[history[j]] = 0;
  }
  for (int64_t j = 0; j < len; ++j) {
    if (history[j] >= 0) ++count[history[j]];
  }
  for (int64_t j = 0; j < len; ++j) {
    int64_t v = history[j];
    if (v < 0 || count[v] == 0) continue; /* padding, or already applied */
    double x = c[v].w;
    x = x > 0 ? x / rep : x * rep;
    c[v].w = x - (presence + frequency * (double)count[v]);
    count[v] = 0;
  }
}

int64_t ty_ref_sample_row(const double *logits, int64_t vocab, const double *p, uint64_t seed,
                          int64_t counter, const int64_t *history, int64_t history_len,
                          void *scratch, double *out_logprob) {
  ty_cand_t *c = scratch;
  int32_t *count = (int32_t *)(c + vocab);
  for (int64_t v = 0; v < vocab; ++v) {
    c[v].w = logits[v];
    c[v].id = v;
  }
  if (history) ty_apply_penalties(c, count, p, history, history_len);
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (c[v].w > c[best].w || isnan(c[best].w)) best = v;
  }
  int64_t token = best;
  double temperature = p[TY_SAMPLE_P_TEMPERATURE];
  if (temperature > 0) {
    double max = c[best].w;
    for (int64_t v = 0; v < vocab; ++v) {
      double w = exp((c[v].w - max) / temperature);
      c[v].w = isnan(w) ? 0.0 : w;
    }
    double top_k = p[TY_SAMPLE_P_TOP_K], top_p = p[TY_SAMPLE_P_TOP_P];
    double min_p = p[TY_SAMPLE_P_MIN_P];
    int64_t keep = top_k > 0 && top_k < (double)vocab ? (int64_t)top_k : vocab;
    bool moved = false, sorted = false;
    if (keep < vocab) {
      ty_select_first(c, vocab, keep);
      moved = true;
    }
    if (top_p < 1) {
      qsort(c, (size_t)keep, sizeof(*c), ty_cand_cmp);
      moved = sorted = true;
      double total = 0, run = 0;
      for (int64_t i = 0; i < keep; ++i) total += c[i].w;
      for (int64_t i = 0; i < keep; ++i) {
        run += c[i].w;
        if (run >= top_p * total) {
          keep = i + 1;
          break;
        }
      }
    }
    if (min_p > 0) {
      int64_t first = 0;
      for (int64_t i = 1; !sorted && i < keep; ++i) {
        if (ty_before(&c[i], &c[first])) first = i;
      }
      int64_t n = 0;
      for (int64_t i = 0; i < keep; ++i) {
        if (c[i].w >= min_p || i == first) c[n++] = c[i];
      }
      keep = n;
    }
    /* Step 5 walks in id order, so that a device can do it as a prefix sum
     * once it knows the kept set. */
    if (moved) qsort(c, (size_t)keep, sizeof(*c), ty_id_cmp);
    double kept = 0;
    for (int64_t i = 0; i < keep; ++i) kept += c[i].w;
    double r = ty_ref_sample_uniform(seed, counter) * kept;
    token = c[keep - 1].id;
    for (int64_t i = 0; i < keep; ++i) {
      r -= c[i].w;
      if (r <= 0) {
        token = c[i].id;
        break;
      }
    }
  }
  if (out_logprob) *out_logprob = ty_ref_sample_logprob(logits, vocab, token);
  return token;
}

ty_status_t ty_ref_sample(const double *logits, int64_t rows, int64_t vocab,
                          const double *params, const int64_t *seeds, const int64_t *history,
                          int64_t history_len, double *out_ids, double *out_logprob) {
  if (rows < 0 || vocab < 1 || history_len < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sample: bad sizes (rows=%lld, vocab=%lld, history_len=%lld)",
                          (long long)rows, (long long)vocab, (long long)history_len);
  }
  for (int64_t i = 0; i < rows; ++i) {
    TY_RETURN_IF_ERROR(ty_ref_sample_check(params + i * TY_SAMPLE_P_COUNT, vocab,
                                           history ? history + i * history_len : NULL,
                                           history_len, i, NULL));
  }
  void *scratch = malloc(ty_ref_sample_scratch_bytes(vocab));
  if (!scratch) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "sample: out of memory for a vocabulary of %lld", (long long)vocab);
  }
  for (int64_t i = 0; i < rows; ++i) {
    double logprob;
    out_ids[i] = (double)ty_ref_sample_row(
        logits + i * vocab, vocab, params + i * TY_SAMPLE_P_COUNT, (uint64_t)seeds[2 * i],
        seeds[2 * i + 1], history ? history + i * history_len : NULL, history_len, scratch,
        &logprob);
    out_logprob[i] = logprob;
  }
  free(scratch);
  return TY_OK;
}

void ty_ref_top_ids(const double *logits, int64_t vocab, int64_t k, void *scratch,
                    int64_t *out_ids) {
  ty_cand_t *c = scratch;
  for (int64_t v = 0; v < vocab; ++v) {
    c[v].w = isnan(logits[v]) ? -INFINITY : logits[v];
    c[v].id = v;
  }
  if (k < vocab) ty_select_first(c, vocab, k);
  qsort(c, (size_t)k, sizeof(*c), ty_cand_cmp);
  for (int64_t j = 0; j < k; ++j) out_ids[j] = c[j].id;
}

ty_status_t ty_ref_top_logprobs(const double *logits, int64_t rows, int64_t vocab, int64_t k,
                                double *out_ids, double *out_logprobs) {
  if (rows < 0 || k < 1 || k > vocab) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "top_logprobs: k = %lld must lie in [1, vocab = %lld]", (long long)k,
                          (long long)vocab);
  }
  void *scratch = malloc(ty_ref_sample_scratch_bytes(vocab));
  int64_t *ids = malloc((size_t)k * sizeof(int64_t));
  if (!scratch || !ids) {
    free(scratch);
    free(ids);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "top_logprobs: out of memory for a vocabulary of %lld",
                          (long long)vocab);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const double *x = logits + i * vocab;
    ty_ref_top_ids(x, vocab, k, scratch, ids);
    double norm = ty_log_norm(x, vocab);
    for (int64_t j = 0; j < k; ++j) {
      out_ids[i * k + j] = (double)ids[j];
      out_logprobs[i * k + j] = x[ids[j]] - norm;
    }
  }
  free(scratch);
  free(ids);
  return TY_OK;
}
