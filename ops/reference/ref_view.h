/* Reference layout ops on raw contiguous buffers of any element size:
 * permute (transpose), slice and concat, each with its backward. Part of
 * ty_ops_reference (the spec). Reshape needs no kernel: a contiguous buffer
 * already is every shape with its element count.
 *
 * Elements are moved as bytes (elem_size each), so these serve every dtype;
 * the backward passes are the same moves in reverse, plus zero fill (all-zero
 * bytes are 0 in every Trainyard dtype).
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for a bad rank, dim, element size, permutation,
 * axis or slice bound, naming it (before anything is written). Outputs must
 * not overlap inputs.
 */
#ifndef TY_OPS_REFERENCE_REF_VIEW_H_
#define TY_OPS_REFERENCE_REF_VIEW_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst has shape dst_shape[i] = shape[perm[i]], and
 * dst[i_0, ..., i_{r-1}] = src[j] where j has index i_a on axis perm[a]
 * (numpy.transpose(src, perm)). perm is a permutation of [0, rank). */
ty_status_t ty_ref_permute_forward(const void *src, size_t elem_size, int rank,
                                   const int64_t *shape, const int *perm,
                                   void *dst);
/* dx = permute(dout, inverse(perm)); shape is the forward INPUT's shape. */
ty_status_t ty_ref_permute_backward(const void *dout, size_t elem_size,
                                    int rank, const int64_t *shape,
                                    const int *perm, void *dx);

/* dst[i] = src[start + i] per axis; dst has shape `length`.
 * Needs 0 <= start[a], 0 <= length[a], start[a] + length[a] <= shape[a]. */
ty_status_t ty_ref_slice_forward(const void *src, size_t elem_size, int rank,
                                 const int64_t *shape, const int64_t *start,
                                 const int64_t *length, void *dst);
/* dx (shape `shape`) = zeros with dout placed at `start`. */
ty_status_t ty_ref_slice_backward(const void *dout, size_t elem_size, int rank,
                                  const int64_t *shape, const int64_t *start,
                                  const int64_t *length, void *dx);

/* Joins `count` inputs along `axis` (negative counts from the end). Every
 * input has shape `shape` except on `axis`, where input k has axis_lens[k];
 * dst has sum(axis_lens) there. shape[axis] itself is ignored. */
ty_status_t ty_ref_concat_forward(int count, const void *const *srcs,
                                  size_t elem_size, int rank,
                                  const int64_t *shape,
                                  const int64_t *axis_lens, int axis,
                                  void *dst);
/* Splits dout back into the `count` input gradients dxs[k]. */
ty_status_t ty_ref_concat_backward(const void *dout, size_t elem_size,
                                   int rank, const int64_t *shape,
                                   const int64_t *axis_lens, int axis,
                                   int count, void *const *dxs);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_VIEW_H_ */
