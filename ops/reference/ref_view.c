/* Reference permute, slice and concat on raw buffers (see ref_view.h).
 *
 *   permute: dst[i] = src[sum_a i_a * src_stride[perm[a]]]
 *   slice:   dst[i] = src[sum_a (start_a + i_a) * src_stride[a]]
 *   concat:  per outer index, the inputs' axis blocks one after another
 * Each backward is the transpose of its (linear, 0/1) forward.
 */
#include "ops/reference/ref_view.h"

#include <stdbool.h>
#include <string.h>

#include "ops/reference/ref_shape.h"

static ty_status_t ty_ref_view_check(const char *op, size_t elem_size,
                                     int rank, const int64_t *shape,
                                     int64_t *out_count) {
  if (elem_size == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: element size is 0",
                          op);
  }
  ty_status_t status = ty_ref_shape_count(rank, shape, out_count);
  return status ? ty_status_annotate(status, "%s", op) : TY_OK;
}

static ty_status_t ty_ref_permute_check(int rank, const int *perm) {
  bool seen[TY_REF_MAX_RANK] = {false};
  for (int a = 0; a < rank; ++a) {
    if (perm[a] < 0 || perm[a] >= rank || seen[perm[a]]) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "permute: perm[%d] = %d makes perm not a "
                            "permutation of [0, %d)",
                            a, perm[a], rank);
    }
    seen[perm[a]] = true;
  }
  return TY_OK;
}

ty_status_t ty_ref_permute_forward(const void *src, size_t elem_size, int rank,
                                   const int64_t *shape, const int *perm,
                                   void *dst) {
  int64_t count;
  TY_RETURN_IF_ERROR(ty_ref_view_check("permute", elem_size, rank, shape, &count));
  TY_RETURN_IF_ERROR(ty_ref_permute_check(rank, perm));
  int64_t src_strides[TY_REF_MAX_RANK], dst_shape[TY_REF_MAX_RANK];
  ty_ref_shape_strides(rank, shape, src_strides);
  for (int a = 0; a < rank; ++a) dst_shape[a] = shape[perm[a]];
  const unsigned char *s = src;
  unsigned char *d = dst;
  for (int64_t o = 0; o < count; ++o) {
    int64_t rest = o, j = 0;
    for (int a = rank - 1; a >= 0; --a) {
      j += (rest % dst_shape[a]) * src_strides[perm[a]];
      rest /= dst_shape[a];
    }
    memcpy(d + (size_t)o * elem_size, s + (size_t)j * elem_size, elem_size);
  }
  return TY_OK;
}

ty_status_t ty_ref_permute_backward(const void *dout, size_t elem_size,
                                    int rank, const int64_t *shape,
                                    const int *perm, void *dx) {
  int64_t count;
  TY_RETURN_IF_ERROR(ty_ref_view_check("permute", elem_size, rank, shape, &count));
  TY_RETURN_IF_ERROR(ty_ref_permute_check(rank, perm));
  int inverse[TY_REF_MAX_RANK];
  int64_t out_shape[TY_REF_MAX_RANK];
  for (int a = 0; a < rank; ++a) {
    inverse[perm[a]] = a;
    out_shape[a] = shape[perm[a]];
  }
  return ty_ref_permute_forward(dout, elem_size, rank, out_shape, inverse, dx);
}

static ty_status_t ty_ref_slice_check(int rank, const int64_t *shape,
                                      const int64_t *start,
                                      const int64_t *length) {
  for (int a = 0; a < rank; ++a) {
    if (start[a] < 0 || length[a] < 0 || start[a] > shape[a] - length[a]) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "slice: axis %d: start %lld, length %lld does not "
                            "fit in dim %lld",
                            a, (long long)start[a], (long long)length[a],
                            (long long)shape[a]);
    }
  }
  return TY_OK;
}

/* Flat index in the full buffer of element o of the packed slice. */
static int64_t ty_ref_slice_index(int rank, const int64_t *strides,
                                  const int64_t *start, const int64_t *length,
                                  int64_t o) {
  int64_t j = 0;
  for (int a = rank - 1; a >= 0; --a) {
    j += (start[a] + o % length[a]) * strides[a];
    o /= length[a];
  }
  return j;
}

ty_status_t ty_ref_slice_forward(const void *src, size_t elem_size, int rank,
                                 const int64_t *shape, const int64_t *start,
                                 const int64_t *length, void *dst) {
  int64_t count, packed, strides[TY_REF_MAX_RANK];
  TY_RETURN_IF_ERROR(ty_ref_view_check("slice", elem_size, rank, shape, &count));
  TY_RETURN_IF_ERROR(ty_ref_slice_check(rank, shape, start, length));
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank, length, &packed));
  ty_ref_shape_strides(rank, shape, strides);
  const unsigned char *s = src;
  unsigned char *d = dst;
  for (int64_t o = 0; o < packed; ++o) {
    int64_t j = ty_ref_slice_index(rank, strides, start, length, o);
    memcpy(d + (size_t)o * elem_size, s + (size_t)j * elem_size, elem_size);
  }
  return TY_OK;
}

ty_status_t ty_ref_slice_backward(const void *dout, size_t elem_size, int rank,
                                  const int64_t *shape, const int64_t *start,
                                  const int64_t *length, void *dx) {
  int64_t count, packed, strides[TY_REF_MAX_RANK];
  TY_RETURN_IF_ERROR(ty_ref_view_check("slice", elem_size, rank, shape, &count));
  TY_RETURN_IF_ERROR(ty_ref_slice_check(rank, shape, start, length));
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank, length, &packed));
  ty_ref_shape_strides(rank, shape, strides);
  const unsigned char *s = dout;
  unsigned char *d = dx;
  memset(dx, 0, (size_t)count * elem_size);
  for (int64_t o = 0; o < packed; ++o) {
    int64_t j = ty_ref_slice_index(rank, strides, start, length, o);
    memcpy(d + (size_t)j * elem_size, s + (size_t)o * elem_size, elem_size);
  }
  return TY_OK;
}

/* Validates a concat and returns the outer count (product of the dims before
 * the axis), the inner element count (after it) and the resolved axis. */
static ty_status_t ty_ref_concat_plan(int count, size_t elem_size, int rank,
                                      const int64_t *shape,
                                      const int64_t *axis_lens, int axis,
                                      int64_t *out_outer, int64_t *out_inner,
                                      int64_t *out_total) {
  int64_t unused;
  TY_RETURN_IF_ERROR(ty_ref_view_check("concat", elem_size, rank, shape, &unused));
  if (rank < 1 || axis < -rank || axis >= rank) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "concat: axis %d is outside [-%d, %d)", axis, rank,
                          rank);
  }
  if (count < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "concat: needs at least one input, got %d", count);
  }
  const int ax = axis < 0 ? axis + rank : axis;
  int64_t total = 0;
  for (int k = 0; k < count; ++k) {
    if (axis_lens[k] < 0 || axis_lens[k] > INT64_MAX - total) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "concat: input %d has a bad length %lld on axis %d",
                            k, (long long)axis_lens[k], axis);
    }
    total += axis_lens[k];
  }
  int64_t full[TY_REF_MAX_RANK];
  for (int a = 0; a < rank; ++a) full[a] = a == ax ? total : shape[a];
  ty_status_t status = ty_ref_shape_count(rank, full, &unused);
  if (status) return ty_status_annotate(status, "concat output");
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < ax; ++a) outer *= shape[a];
  for (int a = ax + 1; a < rank; ++a) inner *= shape[a];
  *out_outer = outer;
  *out_inner = inner;
  *out_total = total;
  return TY_OK;
}

ty_status_t ty_ref_concat_forward(int count, const void *const *srcs,
                                  size_t elem_size, int rank,
                                  const int64_t *shape,
                                  const int64_t *axis_lens, int axis,
                                  void *dst) {
  int64_t outer, inner, total;
  TY_RETURN_IF_ERROR(ty_ref_concat_plan(count, elem_size, rank, shape,
                                        axis_lens, axis, &outer, &inner, &total));
  unsigned char *d = dst;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (int k = 0; k < count; ++k) {
      size_t block = (size_t)(axis_lens[k] * inner) * elem_size;
      const unsigned char *s = srcs[k];
      if (block) {
        memcpy(d + (size_t)((o * total + at) * inner) * elem_size,
               s + (size_t)o * block, block);
      }
      at += axis_lens[k];
    }
  }
  return TY_OK;
}

ty_status_t ty_ref_concat_backward(const void *dout, size_t elem_size,
                                   int rank, const int64_t *shape,
                                   const int64_t *axis_lens, int axis,
                                   int count, void *const *dxs) {
  int64_t outer, inner, total;
  TY_RETURN_IF_ERROR(ty_ref_concat_plan(count, elem_size, rank, shape,
                                        axis_lens, axis, &outer, &inner, &total));
  const unsigned char *s = dout;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = 0;
    for (int k = 0; k < count; ++k) {
      size_t block = (size_t)(axis_lens[k] * inner) * elem_size;
      unsigned char *d = dxs[k];
      if (block) {
        memcpy(d + (size_t)o * block,
               s + (size_t)((o * total + at) * inner) * elem_size, block);
      }
      at += axis_lens[k];
    }
  }
  return TY_OK;
}
