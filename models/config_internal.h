/* Shared by config.c and config_rope.c: typed field readers over the parsed
 * config.json, each failing with the file and the field named. */
#ifndef TY_MODELS_CONFIG_INTERNAL_H_
#define TY_MODELS_CONFIG_INTERNAL_H_

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "models/config.h"

typedef struct ty_cfg_t {
  json_t *root;
  const char *origin;
} ty_cfg_t;

/* INVALID_ARGUMENT "<origin>: field '<field>' <what>". */
ty_status_t ty_cfg_error(const ty_cfg_t *c, const char *field, const char *what);

/* Positive number `key` of `obj` (`field` names it in messages); `dflt`
 * when absent or null, unless `required`. */
ty_status_t ty_cfg_positive(const ty_cfg_t *c, json_t *obj, const char *key, const char *field,
                            bool required, double dflt, double *out);

/* An enum-like string field: absent or null gives `dflt` (NULL: required).
 * Not a string: INVALID_ARGUMENT. One of `supported` (NULL-terminated):
 * OK, *out points into the JSON. One of `known`: UNIMPLEMENTED, naming the
 * supported values. Anything else: INVALID_ARGUMENT, naming them too. */
ty_status_t ty_cfg_enum(const ty_cfg_t *c, json_t *obj, const char *key, const char *field,
                        const char *dflt, const char *const *supported,
                        const char *const *known, const char **out);
/* The same for a value already looked up (NULL: absent). */
ty_status_t ty_cfg_enum_value(const ty_cfg_t *c, json_t *value, const char *field,
                              const char *dflt, const char *const *supported,
                              const char *const *known, const char **out);

/* RoPE from rope_theta, rope_scaling (older form) and rope_parameters
 * (newer form): each form present is validated alone, then they must agree
 * (config_rope.c). */
ty_status_t ty_cfg_rope(const ty_cfg_t *c, ty_model_config_t *m);

/* Which layers use the sliding window: layer_types when given, else the
 * family's rule; a mix of windowed and full layers is UNIMPLEMENTED
 * (config_rope.c). Needs num_layers parsed. */
ty_status_t ty_cfg_sliding_window(const ty_cfg_t *c, ty_model_config_t *m);

#endif /* TY_MODELS_CONFIG_INTERNAL_H_ */
