/* Reference vocabulary-parallel embedding and cross-entropy (ref_vocab.h).
 * With one shard (start 0, valid = V) and tp_reduce the identity, the three
 * loss kernels compose to cross_entropy:
 *   loss_n = log sum_v exp(z_nv - m_n) - (z_{n,t} - m_n) = lse(z_n) - z_{n,t}
 */
#include "ops/reference/ref_vocab.h"

#include <math.h>

static bool ty_ref_vocab_in(int64_t id, int64_t start, int64_t valid) {
  return id >= start && id < start + valid;
}

void ty_ref_vocab_embedding_forward(const double *table, int64_t dim, int64_t start,
                                    int64_t valid, const int64_t *ids, int64_t count,
                                    double *out) {
  for (int64_t i = 0; i < count; ++i) {
    const bool mine = ty_ref_vocab_in(ids[i], start, valid);
    for (int64_t d = 0; d < dim; ++d) {
      out[i * dim + d] = mine ? table[(ids[i] - start) * dim + d] : 0.0;
    }
  }
}

void ty_ref_vocab_embedding_backward(const double *dout, const int64_t *ids, int64_t count,
                                     int64_t start, int64_t valid, int64_t dim,
                                     double *dtable) {
  for (int64_t i = 0; i < count; ++i) {
    if (!ty_ref_vocab_in(ids[i], start, valid)) continue;
    double *row = dtable + (ids[i] - start) * dim;
    for (int64_t d = 0; d < dim; ++d) row[d] += dout[i * dim + d];
  }
}

void ty_ref_vocab_max(const double *logits, int64_t count, int64_t rows, int64_t valid,
                      double *m) {
  for (int64_t n = 0; n < count; ++n) {
    const double *z = logits + n * rows;
    double best = z[0];
    for (int64_t c = 1; c < valid; ++c) best = z[c] > best ? z[c] : best;
    m[n] = best;
  }
}

void ty_ref_vocab_ce_sums_forward(const double *logits, const int64_t *targets,
                                  const double *m, int64_t count, int64_t rows,
                                  int64_t start, int64_t valid, double *sums) {
  for (int64_t n = 0; n < count; ++n) {
    const double *z = logits + n * rows;
    double s = 0.0;
    for (int64_t c = 0; c < valid; ++c) s += exp(z[c] - m[n]);
    sums[2 * n] = s;
    sums[2 * n + 1] =
        ty_ref_vocab_in(targets[n], start, valid) ? z[targets[n] - start] - m[n] : 0.0;
  }
}

void ty_ref_vocab_max_backward(const double *dy, const double *logits, const double *m,
                               int64_t count, int64_t rows, int64_t valid, double *dlogits) {
  for (int64_t n = 0; n < count; ++n) {
    const double *z = logits + n * rows;
    bool taken = false;
    for (int64_t c = 0; c < rows; ++c) {
      const bool at = !taken && c < valid && z[c] == m[n];
      dlogits[n * rows + c] = at ? dy[n] : 0.0;
      taken = taken || at;
    }
  }
}

void ty_ref_vocab_ce_sums_backward(const double *dsums, const double *logits,
                                   const int64_t *targets, const double *m, int64_t count,
                                   int64_t rows, int64_t start, int64_t valid,
                                   double *dlogits, double *dm) {
  for (int64_t n = 0; n < count; ++n) {
    const double *z = logits + n * rows;
    double *dz = dlogits + n * rows, s = 0.0;
    for (int64_t c = 0; c < rows; ++c) {
      const double e = c < valid ? exp(z[c] - m[n]) : 0.0;
      s += e;
      dz[c] = dsums[2 * n] * e;
    }
    const bool mine = ty_ref_vocab_in(targets[n], start, valid);
    if (mine) dz[targets[n] - start] += dsums[2 * n + 1];
    dm[n] = -(dsums[2 * n] * s + (mine ? dsums[2 * n + 1] : 0.0));
  }
}

ty_status_t ty_ref_vocab_ce_loss_forward(const double *sums, const int64_t *targets,
                                         int64_t count, int64_t vocab, double *loss) {
  for (int64_t n = 0; n < count; ++n) {
    if (targets[n] >= vocab) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "vocab_ce_loss: targets[%lld] = %lld is outside the vocabulary "
                            "[0, %lld) (negative means ignored)",
                            (long long)n, (long long)targets[n], (long long)vocab);
    }
  }
  for (int64_t n = 0; n < count; ++n) {
    loss[n] = targets[n] < 0 ? 0.0 : log(sums[2 * n]) - sums[2 * n + 1];
  }
  return TY_OK;
}

void ty_ref_vocab_ce_loss_backward(const double *dloss, const double *sums,
                                   const int64_t *targets, int64_t count, double *dsums) {
  for (int64_t n = 0; n < count; ++n) {
    const bool counted = targets[n] >= 0;
    dsums[2 * n] = counted ? dloss[n] / sums[2 * n] : 0.0;
    dsums[2 * n + 1] = counted ? -dloss[n] : 0.0;
  }
}
