/* Device URIs: `backend[:index][?key=value[&key=value]...]`, e.g. `cpu`,
 * `cpu?threads=2`, `cuda:0`, `opencl:1`, `dataflow?tiles=4`. A URI is parsed
 * once, where the user gives it, and passed down as a ty_device_uri_t; what
 * the app changes on its way to the plugin (a rank's device index, an
 * application option taken off) is a change of the struct, never a string
 * rebuilt and parsed again. */
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
  char *typed;   /* owned: the URI as the user typed it, for messages */
  bool changed;  /* set by ty_device_uri_set_index / _remove_option */
} ty_device_uri_t;

/* Parses `uri`. On success the caller owns out_uri and must call
 * ty_device_uri_deinit. INVALID_ARGUMENT naming the URI and the offending
 * part otherwise (empty name, bad characters, bad index, `key` without `=`,
 * empty key, duplicate key, too many options). */
ty_status_t ty_device_uri_parse(const char *uri, ty_device_uri_t *out_uri);

void ty_device_uri_deinit(ty_device_uri_t *uri);

/* Value of `key`, or NULL. */
const char *ty_device_uri_option(const ty_device_uri_t *uri, const char *key);

/* Takes option `key` off `uri` (an application option the plugin must not
 * see, e.g. "fallback"); its value stays readable until deinit, through the
 * pointer ty_device_uri_option gave before. False when `key` is not there. */
bool ty_device_uri_remove_option(ty_device_uri_t *uri, const char *key);

/* Names device `index` (e.g. the device of a rank: `cuda` -> `cuda:1`). */
void ty_device_uri_set_index(ty_device_uri_t *uri, uint32_t index);

/* The URI the struct describes, as text: `typed` when nothing was changed,
 * else `backend[:index][?key=value&...]` in the struct's option order. The
 * caller frees *out_text. RESOURCE_EXHAUSTED when out of memory. */
ty_status_t ty_device_uri_format(const ty_device_uri_t *uri, char **out_text);

/* Whether the URI text parses and has option `key` (false when malformed:
 * opening the device says why). E.g. "fallback", which asks for a mixed run. */
bool ty_device_uri_has_option(const char *uri, const char *key);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_DEVICE_URI_H_ */
