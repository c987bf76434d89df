/* Plugin registry: finds backend plugins, loads the good ones and records,
 * for every rejected candidate, why it was rejected.
 *
 * Search order (first backend of a given name wins; later ones are listed as
 * shadowed): explicit paths -> TRAINYARD_BACKEND_PATH (colon-separated) ->
 * the install plugin folder -> the plugin folder beside the executable
 * (<exe dir>/../lib/trainyard/backends). A folder contributes every file
 * named libty_backend_<name>.so; an explicit path may also be a file.
 *
 * A candidate is loaded only when it and every folder above it belong to
 * root or this user and are not writable by group or others (sshd's
 * StrictModes; hal/path_trust.h): loading runs the plugin's code. Others
 * are rejected as TY_REJECT_UNSAFE_PERMISSIONS, unless the environment sets
 * TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS=1 (read at each ty_registry_create).
 */
#ifndef TY_HAL_REGISTRY_H_
#define TY_HAL_REGISTRY_H_

#include <stdbool.h>
#include <stddef.h>

#include "hal/backend_abi.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_registry_t ty_registry_t;
typedef struct ty_backend_t ty_backend_t;

typedef struct ty_registry_options_t {
  /* Files or folders searched first, in order. May be NULL when count is 0. */
  const char *const *explicit_paths;
  size_t explicit_path_count;
  /* Read TRAINYARD_BACKEND_PATH from the environment. */
  bool use_env;
  /* Search the compiled-in install plugin folder. */
  bool use_install_dir;
  /* Folder holding the executable (for the beside-the-executable folder);
   * NULL skips that step. */
  const char *exe_dir;
} ty_registry_options_t;

/* Why a candidate was rejected. Stable names via ty_reject_kind_name(). */
typedef enum ty_reject_kind_e {
  TY_REJECT_MISSING_PATH = 0, /* search path entry does not exist */
  TY_REJECT_DLOPEN,           /* not loadable: dlerror() text */
  TY_REJECT_NO_ENTRY_POINT,   /* ty_backend_query not exported */
  TY_REJECT_QUERY_NULL,       /* entry point returned NULL for our major */
  TY_REJECT_ABI_MISMATCH,     /* table's major differs from ours */
  TY_REJECT_TABLE_TOO_SMALL,  /* struct_size below the required entries */
  TY_REJECT_INVALID_TABLE,    /* NULL name/required entry, name mismatch */
  TY_REJECT_UNAVAILABLE,      /* backend_create said UNAVAILABLE */
  TY_REJECT_CREATE_FAILED,    /* backend_create failed otherwise */
  TY_REJECT_SHADOWED,         /* a backend of that name was already loaded */
  TY_REJECT_UNSAFE_PERMISSIONS, /* the file or a folder above it can be
                                   changed by users other than this one and
                                   root (hal/path_trust.h); not loaded */
} ty_reject_kind_t;

typedef struct ty_rejected_candidate_t {
  const char *path;   /* as found */
  const char *name;   /* backend name from the file name, or "" */
  ty_reject_kind_t kind;
  const char *reason; /* human readable, names the root cause */
} ty_rejected_candidate_t;

/* Searches and loads. Never fails because of a bad plugin: those are listed
 * as rejected. Fails only for out-of-memory. The registry owns every loaded
 * backend; destroy it after every device opened from it is closed. */
ty_status_t ty_registry_create(const ty_registry_options_t *options,
                               ty_registry_t **out_registry);
void ty_registry_destroy(ty_registry_t *registry);

/* Loaded backends, in search order. Read-only after create: thread-safe. */
size_t ty_registry_backend_count(const ty_registry_t *registry);
ty_backend_t *ty_registry_backend_at(const ty_registry_t *registry, size_t i);

/* The backend named `name`. NOT_FOUND otherwise, with a message that lists
 * the loaded backends and, if a candidate of that name was rejected, why. */
ty_status_t ty_registry_find(const ty_registry_t *registry, const char *name,
                             ty_backend_t **out_backend);

size_t ty_registry_rejected_count(const ty_registry_t *registry);
const ty_rejected_candidate_t *ty_registry_rejected_at(
    const ty_registry_t *registry, size_t i);

/* The search folders actually used, in order (for `trainyard devices`). */
size_t ty_registry_search_dir_count(const ty_registry_t *registry);
const char *ty_registry_search_dir_at(const ty_registry_t *registry, size_t i);

const char *ty_reject_kind_name(ty_reject_kind_t kind);

/* ---- a loaded backend ---- */
const char *ty_backend_name(const ty_backend_t *backend);
const char *ty_backend_version(const ty_backend_t *backend);
const char *ty_backend_path(const ty_backend_t *backend);
void ty_backend_abi_version(const ty_backend_t *backend, uint32_t *out_major,
                            uint32_t *out_minor);
/* The identity of the loaded file: "build-id:<hex>" (its GNU build-id note)
 * or "sha256:<hex>" (its bytes, for a file without one). Unlike the version
 * string, which an author rarely bumps while writing kernels, it changes
 * with every rebuild that changes the code, so caches keyed on it never
 * serve a rebuilt plugin the results of its previous build. */
const char *ty_backend_identity(const ty_backend_t *backend);
/* Warnings about the plugin's table that did not stop it from loading: one
 * per pair of entries of which only one is set (device_open without
 * device_close leaks every device, graph_compile without executable_destroy
 * every executable, ...). `trainyard devices` and device opens print them. */
size_t ty_backend_warning_count(const ty_backend_t *backend);
const char *ty_backend_warning_at(const ty_backend_t *backend, size_t i);
/* The plugin's table and instance, for the rest of hal. */
const ty_backend_api_t *ty_backend_api(const ty_backend_t *backend);
ty_abi_backend_t *ty_backend_instance(const ty_backend_t *backend);

ty_status_t ty_backend_device_count(ty_backend_t *backend, uint32_t *out_count);
/* Zeroes out_info, sets its struct_size, and asks the plugin. */
ty_status_t ty_backend_device_info(ty_backend_t *backend, uint32_t index,
                                   ty_abi_device_info_t *out_info);

/* True when the plugin's table is large enough to hold the entry at
 * `offset` and the entry is non-NULL. */
bool ty_backend_has_entry(const ty_backend_t *backend, size_t offset);

/* True when the plugin sets every collective entry of ABI 1.4 (comm_*):
 * its devices reduce gradients themselves; otherwise a data-parallel run
 * takes the host path (distributed/dist.h). The entries are optional. */
bool ty_backend_has_collectives(const ty_backend_t *backend);
/* True when it also has point to point (ABI 1.8 comm_send and comm_recv)
 * and declares ABI 1.8 or newer: pipeline activations can travel between
 * its devices without the host (hal/comm.h ty_comm_send). */
bool ty_backend_has_p2p(const ty_backend_t *backend);

#define TY_BACKEND_ENTRY(backend, field)                            \
  (ty_backend_has_entry((backend), offsetof(ty_backend_api_t, field)) \
       ? ty_backend_api(backend)->field                             \
       : NULL)

/* The install plugin folder compiled into this build. */
const char *ty_registry_install_dir(void);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_REGISTRY_H_ */
