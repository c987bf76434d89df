/* Tensor descriptors: dtype, shape, strides, byte offset and name. A
 * descriptor describes memory; it owns none. */
#ifndef TY_HAL_TENSOR_H_
#define TY_HAL_TENSOR_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_TENSOR_MAX_RANK 8
#define TY_TENSOR_NAME_MAX 128

typedef struct ty_tensor_desc_t {
  ty_dtype_t dtype;
  uint32_t rank;
  int64_t dims[TY_TENSOR_MAX_RANK];
  int64_t strides[TY_TENSOR_MAX_RANK]; /* in elements */
  uint64_t byte_offset;                /* into the backing buffer */
  char name[TY_TENSOR_NAME_MAX];       /* may be empty */
} ty_tensor_desc_t;

/* Fills a contiguous row-major descriptor. INVALID_ARGUMENT for an invalid
 * dtype, rank > TY_TENSOR_MAX_RANK, a negative dim, a name that does not fit,
 * an element count whose byte size overflows 64 bits, or (for an empty tensor)
 * dims whose row-major strides would not fit in int64. `name` may be NULL. */
ty_status_t ty_tensor_desc_init(ty_dtype_t dtype, uint32_t rank,
                                const int64_t *dims, const char *name,
                                ty_tensor_desc_t *out_desc);

/* Number of elements (1 for rank 0). Assumes a validated descriptor. */
int64_t ty_tensor_desc_element_count(const ty_tensor_desc_t *desc);

/* True when strides are the row-major strides of dims. */
bool ty_tensor_desc_is_contiguous(const ty_tensor_desc_t *desc);

/* Bytes a backing buffer needs from offset 0 to cover every element the
 * descriptor can address (byte_offset included). INVALID_ARGUMENT on
 * overflow or on negative strides. */
ty_status_t ty_tensor_desc_required_bytes(const ty_tensor_desc_t *desc,
                                          uint64_t *out_bytes);

/* Writes e.g. "f32[2,3]" into buf (always NUL-terminated when capacity > 0).
 * Returns buf. */
char *ty_tensor_desc_format(const ty_tensor_desc_t *desc, char *buf,
                            size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_TENSOR_H_ */
