/* Node attributes: a small fixed-capacity, copyable set of named int, float,
 * string, int-list and float-list values. Self-contained (no pointers), so a
 * node's attributes can be copied, hashed and compared as plain data. */
#ifndef TY_OPS_ATTRS_H_
#define TY_OPS_ATTRS_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_ATTRS_MAX 12
#define TY_ATTR_NAME_MAX 32
#define TY_ATTR_STRING_MAX 32
#define TY_ATTR_LIST_MAX 8

typedef struct ty_attr_t {
  char name[TY_ATTR_NAME_MAX];
  ty_attr_kind_t kind;
  uint32_t count; /* list length for INTS / FLOATS */
  int64_t i;
  double f;
  char s[TY_ATTR_STRING_MAX];
  int64_t ints[TY_ATTR_LIST_MAX];
  double floats[TY_ATTR_LIST_MAX];
} ty_attr_t;

typedef struct ty_attrs_t {
  uint32_t count;
  ty_attr_t items[TY_ATTRS_MAX]; /* kept sorted by name (canonical order) */
} ty_attrs_t;

/* An empty set. */
#define TY_ATTRS_EMPTY ((ty_attrs_t){0})

/* Setters replace an attribute of the same name. INVALID_ARGUMENT when the
 * name or string is too long, a list exceeds TY_ATTR_LIST_MAX, or the set is
 * full. Not thread-safe on one set. */
ty_status_t ty_attrs_set_int(ty_attrs_t *attrs, const char *name, int64_t value);
ty_status_t ty_attrs_set_float(ty_attrs_t *attrs, const char *name, double value);
ty_status_t ty_attrs_set_string(ty_attrs_t *attrs, const char *name,
                                const char *value);
ty_status_t ty_attrs_set_ints(ty_attrs_t *attrs, const char *name,
                              const int64_t *values, uint32_t count);
ty_status_t ty_attrs_set_floats(ty_attrs_t *attrs, const char *name,
                                const double *values, uint32_t count);

/* The attribute, or NULL. */
const ty_attr_t *ty_attrs_find(const ty_attrs_t *attrs, const char *name);

/* Typed getters with a default when absent. An attribute present with the
 * wrong kind yields INVALID_ARGUMENT naming it (FLOAT getters accept INT). */
ty_status_t ty_attrs_get_int(const ty_attrs_t *attrs, const char *name,
                             int64_t default_value, int64_t *out_value);
ty_status_t ty_attrs_get_float(const ty_attrs_t *attrs, const char *name,
                               double default_value, double *out_value);
ty_status_t ty_attrs_get_string(const ty_attrs_t *attrs, const char *name,
                                const char *default_value,
                                const char **out_value);
/* *out_count = 0 and *out_values = NULL when absent. */
ty_status_t ty_attrs_get_ints(const ty_attrs_t *attrs, const char *name,
                              const int64_t **out_values, uint32_t *out_count);

/* INVALID_ARGUMENT naming the first attribute not in the NULL-terminated
 * `allowed` list (so typos in attribute names are caught). */
ty_status_t ty_attrs_check_known(const ty_attrs_t *attrs, const char *op,
                                 const char *const *allowed);

/* Fills `out` (capacity >= attrs->count) with ABI views pointing into
 * `attrs`; valid while attrs lives and is unchanged. */
void ty_attrs_to_abi(const ty_attrs_t *attrs, ty_abi_attr_t *out);

/* Converts ABI attributes back into a set. */
ty_status_t ty_attrs_from_abi(const ty_abi_attr_t *attrs, uint32_t count,
                              ty_attrs_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_ATTRS_H_ */
