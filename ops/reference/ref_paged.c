/* Reference paged KV cache kernels (see ref_paged.h). Every index is checked
 * before anything is written; attention materialises one row's scores at a
 * time, slow and obviously correct. */
#include "ops/reference/ref_paged.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ty_status_t ty_ref_paged_kv_write(double *pool, int64_t blocks, int64_t block_size,
                                  int64_t kv_heads, int64_t head_dim, const double *fresh,
                                  int64_t rows, const int64_t *slots) {
  const int64_t nslots = blocks * block_size;
  for (int64_t i = 0; i < rows; ++i) {
    if (slots[i] < -1 || slots[i] >= nslots) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "paged_kv_write: row %lld writes slot %lld outside the pool's "
                            "%lld slots (NB*BS; -1 skips the row)",
                            (long long)i, (long long)slots[i], (long long)nslots);
    }
    for (int64_t j = 0; j < i && slots[i] >= 0; ++j) {
      if (slots[j] == slots[i]) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "paged_kv_write: rows %lld and %lld both write slot %lld "
                              "(which wins is undefined on devices; give each row its own slot)",
                              (long long)j, (long long)i, (long long)slots[i]);
      }
    }
  }
  const size_t row = (size_t)(kv_heads * head_dim);
  for (int64_t i = 0; i < rows; ++i) {
    if (slots[i] < 0 || row == 0) continue;
    memcpy(pool + (size_t)slots[i] * row, fresh + (size_t)i * row, row * sizeof(double));
  }
  return TY_OK;
}

/* Checks row i's sequence, position and every block it reads. */
static ty_status_t ty_ref_paged_check_row(const ty_ref_paged_shape_t *s,
                                          const int64_t *table, int64_t i, int64_t seq,
                                          int64_t pos) {
  if (seq < -1 || seq >= s->seqs) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "paged_attention: row %lld has row_seq %lld outside [-1, %lld) "
                          "(the block table's rows; -1 is padding)",
                          (long long)i, (long long)seq, (long long)s->seqs);
  }
  if (seq < 0) return TY_OK;
  const int64_t positions = s->max_blocks * s->block_size;
  if (pos < 0 || pos >= positions) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "paged_attention: row %lld has row_pos %lld outside [0, %lld) "
                          "(MB*BS positions of a block table row)",
                          (long long)i, (long long)pos, (long long)positions);
  }
  const int64_t lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
  for (int64_t b = lo / s->block_size; b <= pos / s->block_size; ++b) {
    int64_t block = table[seq * s->max_blocks + b];
    if (block < 0 || block >= s->blocks) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "paged_attention: row %lld reads block %lld outside the pool's "
                            "[0, %lld) (block_table[%lld, %lld])",
                            (long long)i, (long long)block, (long long)s->blocks,
                            (long long)seq, (long long)b);
    }
  }
  return TY_OK;
}

ty_status_t ty_ref_paged_attention(const ty_ref_paged_shape_t *s, const double *q,
                                   const double *k_pool, const double *v_pool,
                                   const int64_t *table, const int64_t *row_seq,
                                   const int64_t *row_pos, double *out) {
  /* Empty tensors are fine (nothing to compute); a row that is not padding
   * with BS or MB zero fails its position check before any division. */
  if (s->rows < 0 || s->q_heads < 0 || s->kv_heads <= 0 || s->head_dim < 0 ||
      s->block_size < 0 || s->q_heads % s->kv_heads != 0 || s->window < 0 ||
      !(s->scale > 0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "paged_attention: bad shape (rows=%lld, Hq=%lld, Hkv=%lld, D=%lld, "
                          "BS=%lld, window=%lld, scale=%g)",
                          (long long)s->rows, (long long)s->q_heads, (long long)s->kv_heads,
                          (long long)s->head_dim, (long long)s->block_size,
                          (long long)s->window, s->scale);
  }
  for (int64_t i = 0; i < s->rows; ++i) {
    TY_RETURN_IF_ERROR(ty_ref_paged_check_row(s, table, i, row_seq[i], row_pos[i]));
  }
  const int64_t hq = s->q_heads, hkv = s->kv_heads, d = s->head_dim, bs = s->block_size;
  const int64_t positions = s->max_blocks * bs;
  double *score = malloc((size_t)(positions > 0 ? positions : 1) * sizeof(double));
  if (!score) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "paged_attention: out of memory for %lld scores",
                          (long long)positions);
  }
  for (int64_t i = 0; i < s->rows; ++i) {
    const int64_t seq = row_seq[i], pos = row_pos[i];
    double *o_row = out + i * hq * d;
    if (seq < 0) {
      memset(o_row, 0, (size_t)(hq * d) * sizeof(double));
      continue;
    }
    const int64_t lo = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / (hq / hkv);
      const double *qh = q + (i * hq + h) * d;
      double max = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        const int64_t block = table[seq * s->max_blocks + j / bs];
        const double *kj = k_pool + ((block * bs + j % bs) * hkv + g) * d;
        double dot = 0.0;
        for (int64_t e = 0; e < d; ++e) dot += qh[e] * kj[e];
        score[j] = s->scale * dot;
        if (score[j] > max) max = score[j];
      }
      double sum = 0.0;
      for (int64_t j = lo; j <= pos; ++j) {
        score[j] = exp(score[j] - max);
        sum += score[j];
      }
      double *oh = o_row + h * d;
      for (int64_t e = 0; e < d; ++e) oh[e] = 0.0;
      for (int64_t j = lo; j <= pos; ++j) {
        const int64_t block = table[seq * s->max_blocks + j / bs];
        const double *vj = v_pool + ((block * bs + j % bs) * hkv + g) * d;
        const double p = score[j] / sum;
        for (int64_t e = 0; e < d; ++e) oh[e] += p * vj[e];
      }
    }
  }
  free(score);
  return TY_OK;
}
