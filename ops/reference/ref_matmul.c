/* Reference batched matmul (see ref_matmul.h).
 *
 *   C[b,i,j] = sum_p opA[b,i,p] * opB[b,p,j]  (+ bias[j])
 *   dopA = dC @ opB^T,  dopB = opA^T @ dC,  dbias = sum_{b,i} dC[b,i,:]
 */
#include "ops/reference/ref_matmul.h"

#include <stdlib.h>
#include <string.h>

static ty_status_t ty_ref_matmul_check(const ty_ref_matmul_shape_t *s) {
  if (s->m < 0 || s->n < 0 || s->k < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "matmul: negative size (m=%lld, n=%lld, k=%lld)",
                          (long long)s->m, (long long)s->n, (long long)s->k);
  }
  if (s->batch_a < 1 || s->batch_b < 1 ||
      (s->batch_a != s->batch_b && s->batch_a != 1 && s->batch_b != 1)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "matmul: batch counts %lld (A) and %lld (B) must be "
                          ">= 1 and equal, or one of them 1",
                          (long long)s->batch_a, (long long)s->batch_b);
  }
  return TY_OK;
}

int64_t ty_ref_matmul_batch(const ty_ref_matmul_shape_t *shape) {
  return shape->batch_a > shape->batch_b ? shape->batch_a : shape->batch_b;
}

ty_status_t ty_ref_matmul_forward(const ty_ref_matmul_shape_t *s,
                                  const double *a, const double *b,
                                  const double *bias, double *c) {
  TY_RETURN_IF_ERROR(ty_ref_matmul_check(s));
  const int64_t m = s->m, n = s->n, k = s->k;
  const int64_t batch = ty_ref_matmul_batch(s);
  for (int64_t bi = 0; bi < batch; ++bi) {
    const double *ab = a + (s->batch_a == 1 ? 0 : bi) * m * k;
    const double *bb = b + (s->batch_b == 1 ? 0 : bi) * k * n;
    double *cb = c + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          double av = s->trans_a ? ab[p * m + i] : ab[i * k + p];
          double bv = s->trans_b ? bb[j * k + p] : bb[p * n + j];
          acc += av * bv;
        }
        cb[i * n + j] = bias ? acc + bias[j] : acc;
      }
    }
  }
  return TY_OK;
}

/* Adds one single-batch matmul into `acc` (size rows*cols) via `scratch`. */
static ty_status_t ty_ref_matmul_accumulate(int64_t rows, int64_t cols,
                                            int64_t inner, bool ta, bool tb,
                                            const double *x, const double *y,
                                            double *scratch, double *acc) {
  ty_ref_matmul_shape_t one = {1, 1, rows, cols, inner, ta, tb};
  TY_RETURN_IF_ERROR(ty_ref_matmul_forward(&one, x, y, NULL, scratch));
  for (int64_t i = 0; i < rows * cols; ++i) acc[i] += scratch[i];
  return TY_OK;
}

ty_status_t ty_ref_matmul_backward(const ty_ref_matmul_shape_t *s,
                                   const double *a, const double *b,
                                   const double *dc, double *da, double *db,
                                   double *dbias) {
  TY_RETURN_IF_ERROR(ty_ref_matmul_check(s));
  const int64_t m = s->m, n = s->n, k = s->k;
  const int64_t batch = ty_ref_matmul_batch(s);
  if (da) memset(da, 0, (size_t)(s->batch_a * m * k) * sizeof(double));
  if (db) memset(db, 0, (size_t)(s->batch_b * k * n) * sizeof(double));
  if (dbias) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t r = 0; r < batch * m; ++r) acc += dc[r * n + j];
      dbias[j] = acc;
    }
  }
  size_t scratch_count = (size_t)(m * k > k * n ? m * k : k * n);
  double *scratch = malloc((scratch_count ? scratch_count : 1) * sizeof(double));
  if (!scratch) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "matmul backward: no memory for %zu doubles",
                          scratch_count);
  }
  ty_status_t status = TY_OK;
  for (int64_t bi = 0; bi < batch && !status; ++bi) {
    const double *ab = a + (s->batch_a == 1 ? 0 : bi) * m * k;
    const double *bb = b + (s->batch_b == 1 ? 0 : bi) * k * n;
    const double *dcb = dc + bi * m * n;
    if (da) {
      double *dab = da + (s->batch_a == 1 ? 0 : bi) * m * k;
      status = s->trans_a
                   /* dA stored [k, m] = opB @ dC^T */
                   ? ty_ref_matmul_accumulate(k, m, n, s->trans_b, true, bb,
                                              dcb, scratch, dab)
                   /* dA stored [m, k] = dC @ opB^T */
                   : ty_ref_matmul_accumulate(m, k, n, false, !s->trans_b,
                                              dcb, bb, scratch, dab);
    }
    if (db && !status) {
      double *dbb = db + (s->batch_b == 1 ? 0 : bi) * k * n;
      status = s->trans_b
                   /* dB stored [n, k] = dC^T @ opA */
                   ? ty_ref_matmul_accumulate(n, k, m, true, s->trans_a, dcb,
                                              ab, scratch, dbb)
                   /* dB stored [k, n] = opA^T @ dC */
                   : ty_ref_matmul_accumulate(k, n, m, !s->trans_a, false, ab,
                                              dcb, scratch, dbb);
    }
  }
  free(scratch);
  return status;
}
