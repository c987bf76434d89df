/* The reference implementation of every op: naive f64 kernels that are the
 * executable spec of op set v1 and the oracle the conformance tests compare
 * each backend against. Include this one header to get them all.
 *
 * Common rules (each header repeats what applies to it):
 *  - Arrays are contiguous row-major; floats are double, integer inputs (ids,
 *    targets, positions) are int64_t. Casts and views also take raw buffers.
 *  - Kernels accumulate in double and are slow on purpose: no SIMD, no threads.
 *  - Outputs are overwritten, never accumulated, except embedding backward,
 *    which scatter-adds (see ref_embedding.h).
 *  - A kernel returns ty_status_t when its arguments can be inconsistent or
 *    its data can be out of range (ids, targets, positions, shapes); errors
 *    are INVALID_ARGUMENT naming what is wrong, found before any output is
 *    written. Kernels that cannot fail return void.
 *  - Thread-safe on disjoint outputs; nothing is global; nothing is kept.
 */
#ifndef TY_OPS_REFERENCE_REFERENCE_H_
#define TY_OPS_REFERENCE_REFERENCE_H_

#include "ops/reference/ref_activation.h"
#include "ops/reference/ref_attention.h"
#include "ops/reference/ref_cast.h"
#include "ops/reference/ref_dropout.h"
#include "ops/reference/ref_elementwise.h"
#include "ops/reference/ref_embedding.h"
#include "ops/reference/ref_kv_cache.h"
#include "ops/reference/ref_loss.h"
#include "ops/reference/ref_matmul.h"
#include "ops/reference/ref_norm.h"
#include "ops/reference/ref_optim.h"
#include "ops/reference/ref_paged.h"
#include "ops/reference/ref_reduce.h"
#include "ops/reference/ref_rope.h"
#include "ops/reference/ref_sample.h"
#include "ops/reference/ref_shape.h"
#include "ops/reference/ref_softmax.h"
#include "ops/reference/ref_view.h"
#include "ops/reference/ref_vocab.h"

#endif /* TY_OPS_REFERENCE_REFERENCE_H_ */
