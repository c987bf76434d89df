/* Shape arithmetic the per-op executors share (opencl, cuda): row-major
 * strides and numpy broadcasting simplified for strided kernels. Depends
 * only on hal/backend_abi.h.
 *
 * Ownership: plain values in caller memory. Threading: pure functions. */
#ifndef TY_BACKENDS_COMMON_OP_SHAPES_H_
#define TY_BACKENDS_COMMON_OP_SHAPES_H_

#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major strides (in elements) of a shape of `rank` (<= 8) dims. */
void ty_op_strides(uint32_t rank, const int64_t *dims, int64_t *out);

/* A broadcast of up to two inputs to an output shape (numpy rules), with
 * size-1 output axes dropped and neighbouring axes merged where every
 * input walks them contiguously: out[o] reads input k at
 * sum_d idx_d(o) * stride[k][d] over the `rank` (>= 1) merged dims, a
 * stride of 0 repeating the input. A scalar output is one dim of size 1. */
typedef struct ty_op_bcast_t {
  int rank;
  int64_t dims[8];
  int64_t stride[2][8];
} ty_op_bcast_t;

void ty_op_bcast_plan(const ty_abi_value_t *out, const ty_abi_value_t *const *ins, int n_in,
                      ty_op_bcast_t *plan);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_OP_SHAPES_H_ */
