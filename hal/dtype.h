/* Element types: names, sizes and parsing. The enum itself lives in
 * hal/backend_abi.h because plugins see it too. */
#ifndef TY_HAL_DTYPE_H_
#define TY_HAL_DTYPE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Size of one element in bytes; 0 for TY_DTYPE_INVALID or unknown values. */
size_t ty_dtype_size(ty_dtype_t dtype);

/* Canonical lowercase name ("f32", "bf16", ...); "invalid" for unknown
 * values. Static storage. */
const char *ty_dtype_name(ty_dtype_t dtype);

/* Parses a canonical name (also accepts "bool" for u8). INVALID_ARGUMENT
 * naming the string and the accepted names otherwise. */
ty_status_t ty_dtype_parse(const char *name, ty_dtype_t *out_dtype);

bool ty_dtype_is_valid(ty_dtype_t dtype);
bool ty_dtype_is_float(ty_dtype_t dtype);

/* Looks for NaN or infinity in `count` elements of float data of `dtype`
 * (f32, f64, bf16, f16). True for the first one found, with its index and
 * its value as a double; false when every element is finite or the dtype
 * is not a float type. Pure and thread-safe. */
bool ty_dtype_find_nonfinite(ty_dtype_t dtype, const void *data, uint64_t count,
                             uint64_t *out_index, double *out_value);

/* Writes "f32,bf16,..." for the bits set in `mask` into buf (truncating,
 * always NUL-terminated when capacity > 0). Returns buf. */
char *ty_dtype_mask_format(uint32_t mask, char *buf, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_DTYPE_H_ */
