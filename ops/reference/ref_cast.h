/* Reference dtype casts on raw buffers: any pair of f32 / bf16 / f16 / f64,
 * and i32 <-> i64. Part of ty_ops_reference (the spec for every backend's
 * cast kernels; float rounding comes from hal/half.h).
 *
 * Rounding: every float narrowing rounds to nearest even once; f64 -> bf16 /
 * f16 goes through f32 (as PyTorch does, see hal/half.h). NaN stays NaN,
 * overflow becomes infinity.
 * Gradient: the backward of a float cast is the cast back to the source dtype.
 *
 * Ownership: every pointer is caller memory; nothing is kept.
 * Threading: safe from any thread on disjoint outputs.
 * Errors: INVALID_ARGUMENT for an invalid dtype, a negative count, or an i64
 * value outside the i32 range (naming the index and value; checked before
 * anything is written); UNIMPLEMENTED for pairs outside the list above (float
 * <-> integer, u8 to anything else).
 */
#ifndef TY_OPS_REFERENCE_REF_CAST_H_
#define TY_OPS_REFERENCE_REF_CAST_H_

#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Converts `count` elements of src_dtype at src to dst_dtype at dst. The
 * buffers hold elements in the host's byte order and need no particular
 * alignment. They must not overlap, except src == dst with equal dtypes. */
ty_status_t ty_ref_cast_forward(const void *src, ty_dtype_t src_dtype,
                                void *dst, ty_dtype_t dst_dtype,
                                int64_t count);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_REFERENCE_REF_CAST_H_ */
