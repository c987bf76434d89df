/* Reference embedding gather and scatter-add (see ref_embedding.h).
 *
 *   forward:  out[i, d]          = table[ids[i], d]
 *   backward: dtable[ids[i], d] += dout[i, d]      (duplicates sum)
 */
#include "ops/reference/ref_embedding.h"

static ty_status_t ty_ref_embedding_check_ids(const int64_t *ids, int64_t count,
                                              int64_t vocab) {
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "embedding: ids[%lld] = %lld is outside the "
                            "vocabulary [0, %lld)",
                            (long long)i, (long long)ids[i], (long long)vocab);
    }
  }
  return TY_OK;
}

ty_status_t ty_ref_embedding_forward(const double *table, int64_t vocab,
                                     int64_t dim, const int64_t *ids,
                                     int64_t count, double *out) {
  TY_RETURN_IF_ERROR(ty_ref_embedding_check_ids(ids, count, vocab));
  for (int64_t i = 0; i < count; ++i) {
    const double *row = table + ids[i] * dim;
    for (int64_t d = 0; d < dim; ++d) out[i * dim + d] = row[d];
  }
  return TY_OK;
}

ty_status_t ty_ref_embedding_backward(const double *dout, const int64_t *ids,
                                      int64_t count, int64_t vocab, int64_t dim,
                                      double *dtable) {
  TY_RETURN_IF_ERROR(ty_ref_embedding_check_ids(ids, count, vocab));
  for (int64_t i = 0; i < count; ++i) {
    double *row = dtable + ids[i] * dim;
    for (int64_t d = 0; d < dim; ++d) row[d] += dout[i * dim + d];
  }
  return TY_OK;
}
