/* What the registry learns about a plugin beyond its table's validity: the
 * identity of the exact file that was loaded (the compile cache keys on it,
 * so a rebuilt plugin never meets results of its previous build), and the
 * ABI entries it sets in half (one entry of a pair without the other), which
 * load but leak or fail later. Internal to hal (registry.c). */
#ifndef TY_HAL_PLUGIN_CHECK_H_
#define TY_HAL_PLUGIN_CHECK_H_

#include <stdbool.h>
#include <stddef.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_PLUGIN_IDENTITY_MAX 96

/* "build-id:<hex>" from the loaded object's GNU build-id note (found through
 * `dl`, a dlopen handle), else "sha256:<hex>" of the file at `path`.
 * RESOURCE_EXHAUSTED or DATA_LOSS (naming the path) when neither can be
 * had. */
ty_status_t ty_plugin_identity(void *dl, const char *path, char out[TY_PLUGIN_IDENTITY_MAX]);

/* True when `api`'s struct_size reaches past the entry at `offset` and the
 * entry is not NULL. */
bool ty_backend_api_has_entry(const ty_backend_api_t *api, size_t offset);

/* Calls `warn(user, message)` once per pair of entries of which `api` sets
 * exactly one (within its struct_size); returns false when `warn` did. */
typedef bool (*ty_plugin_warn_fn_t)(void *user, const char *message);
bool ty_plugin_check_pairs(const ty_backend_api_t *api, ty_plugin_warn_fn_t warn, void *user);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_PLUGIN_CHECK_H_ */
