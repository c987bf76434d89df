/* Shape helpers for the reference kernels: counts, strides, broadcasting.
 * See ref_shape.h. */
#include "ops/reference/ref_shape.h"

#include "hal/tensor.h"

_Static_assert(TY_REF_MAX_RANK == TY_TENSOR_MAX_RANK,
               "reference kernels must accept every tensor rank");

ty_status_t ty_ref_shape_count(int rank, const int64_t *shape,
                               int64_t *out_count) {
  *out_count = 0;
  if (rank < 0 || rank > TY_REF_MAX_RANK) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "rank %d is outside [0, %d]", rank, TY_REF_MAX_RANK);
  }
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "dim %d is negative (%lld)", i, (long long)shape[i]);
    }
    if (shape[i] != 0 && count > INT64_MAX / shape[i]) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "element count overflows int64 at dim %d", i);
    }
    count *= shape[i];
  }
  *out_count = count;
  return TY_OK;
}

void ty_ref_shape_strides(int rank, const int64_t *shape, int64_t *out_strides) {
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    out_strides[i] = stride;
    stride *= shape[i];
  }
}

ty_status_t ty_ref_shape_broadcast(int rank_a, const int64_t *shape_a,
                                   int rank_b, const int64_t *shape_b,
                                   int *out_rank, int64_t *out_shape) {
  int64_t unused;
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank_a, shape_a, &unused));
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank_b, shape_b, &unused));
  int rank = rank_a > rank_b ? rank_a : rank_b;
  for (int i = 0; i < rank; ++i) {
    /* i counts axes from the right, so both shapes align at their end. */
    int ia = rank_a - 1 - i, ib = rank_b - 1 - i;
    int64_t da = ia >= 0 ? shape_a[ia] : 1;
    int64_t db = ib >= 0 ? shape_b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "shapes do not broadcast: axis %d (from the right) "
                            "has %lld vs %lld",
                            i, (long long)da, (long long)db);
    }
    out_shape[rank - 1 - i] = da == 1 ? db : da;
  }
  *out_rank = rank;
  return TY_OK;
}
