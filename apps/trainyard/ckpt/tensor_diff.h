/* The comparison core of `trainyard ckpt diff`: the figures of two tensors
 * of one dtype and element count (errors, ULP distance, NaN/Inf counts,
 * the tolerance rule), a hash of a tensor's bytes, and the ranking of the
 * tensors that differ. Kept apart from the command so a unit test holds
 * each rule (tests/apps/tensor_diff_test.c).
 *
 * Rules (docs/formats.md, "trainyard ckpt diff"):
 * - Values are compared, not bits: -0 equals +0, and a NaN equals a NaN at
 *   the same place (any payload). A NaN against a number, or infinities
 *   that differ, is an element with infinite errors.
 * - Relative error |a-b| / max(|a|,|b|), 0 where both are 0.
 * - ULP distance: steps between the two values in the dtype's own
 *   encoding (f32, f64, bf16, f16; +-0 are one value); for integer dtypes
 *   the absolute difference (2^64 - 1, INT64_MIN against INT64_MAX, shows
 *   as 2^64 - 2). TY_TENSOR_DIFF_ULP_INF for a NaN against a number.
 * - Within tolerance: |a-b| <= tol + rtol*|b| element by element (b is the
 *   second tensor), or equal values.
 *
 * Pure functions, thread-safe; nothing is allocated or printed. */
#ifndef TY_APPS_TRAINYARD_CKPT_TENSOR_DIFF_H_
#define TY_APPS_TRAINYARD_CKPT_TENSOR_DIFF_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/dtype.h"
#include "hal/status.h"

#define TY_TENSOR_DIFF_ULP_INF UINT64_MAX
#define TY_TENSOR_DIFF_HASH_CHARS 16 /* hex digits of SHA-256 kept */

typedef struct ty_tensor_diff_t {
  uint64_t elements;
  uint64_t differing; /* elements whose values differ (rules above) */
  uint64_t outside;   /* elements outside the tolerance */
  double max_abs;     /* INFINITY for a NaN against a number, or other infinities */
  double max_rel;
  uint64_t max_ulp;   /* TY_TENSOR_DIFF_ULP_INF for a NaN against a number */
  uint64_t nan_a, nan_b, inf_a, inf_b;
} ty_tensor_diff_t;

/* The figures of `count` elements of `a` against `b`, both of `dtype`
 * (any Trainyard dtype; u8 and bool as integers). INVALID_ARGUMENT for
 * an unknown dtype, a negative or non-finite tol/rtol. */
ty_status_t ty_tensor_diff_compute(ty_dtype_t dtype, const void *a, const void *b,
                                   uint64_t count, double tol, double rtol,
                                   ty_tensor_diff_t *out) TY_MUST_USE;

/* The ULP distance of two values given as bit patterns of their dtype
 * (TY_TENSOR_DIFF_ULP_INF when exactly one is a NaN, 0 when both are). */
uint64_t ty_tensor_diff_ulp_f32(uint32_t a, uint32_t b);
uint64_t ty_tensor_diff_ulp_f64(uint64_t a, uint64_t b);
uint64_t ty_tensor_diff_ulp_bf16(uint16_t a, uint16_t b);
uint64_t ty_tensor_diff_ulp_f16(uint16_t a, uint16_t b);

/* The first TY_TENSOR_DIFF_HASH_CHARS hex digits of SHA-256 over `bytes`
 * bytes at `data` (order-sensitive), NUL-terminated into out. INTERNAL
 * when libcrypto fails. */
ty_status_t ty_tensor_diff_hash(const void *data, size_t bytes,
                                char out[TY_TENSOR_DIFF_HASH_CHARS + 1]) TY_MUST_USE;

/* Ranking of differing tensors, worst first: < 0 when x ranks before y
 * (larger max_rel, then larger max_abs), 0 when they tie. */
int ty_tensor_diff_rank(const ty_tensor_diff_t *x, const ty_tensor_diff_t *y);

#endif /* TY_APPS_TRAINYARD_CKPT_TENSOR_DIFF_H_ */
