/* Device URIs: `backend[:index][?key=value[&key=value]...]`, e.g. `cpu`,
 * `cpu?threads=2`, `cuda:0`, `opencl:1`, `dataflow?tiles=4`. */
#ifndef TY_HAL_DEVICE_URI_H_
#define TY_HAL_DEVICE_URI_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_DEVICE_URI_MAX_OPTIONS 16
#define TY_BACKEND_NAME_MAX 64

typedef struct ty_device_uri_t {
  char backend[TY_BACKEND_NAME_MAX]; /* [a-z0-9_]+ */
  uint32_t index;                    /* 0 when not given */
  bool has_index;
  uint32_t option_count;
  ty_abi_option_t options[TY_DEVICE_URI_MAX_OPTIONS]; /* point into storage */
  char *storage; /* owned copy of the query part, split in place */
} ty_device_uri_t;

/* Parses `uri`. On success the caller owns out_uri and must call
 * ty_device_uri_deinit. INVALID_ARGUMENT naming the URI and the offending
 * part otherwise (empty name, bad characters, bad index, `key` without `=`,
 * empty key, duplicate key, too many options). */
ty_status_t ty_device_uri_parse(const char *uri, ty_device_uri_t *out_uri);

void ty_device_uri_deinit(ty_device_uri_t *uri);

/* Value of `key`, or NULL. */
const char *ty_device_uri_option(const ty_device_uri_t *uri, const char *key);

/* Whether the URI text parses and has option `key` (false when malformed:
 * opening the device says why). E.g. "fallback", which asks for a mixed run. */
bool ty_device_uri_has_option(const char *uri, const char *key);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_DEVICE_URI_H_ */
