/* Executables and executable caches: the one place above the plugin table
 * where graphs are checked, compiled, loaded, run, serialized and reported
 * (the ABI 1.1-1.3 graph and executable entries). Layers above hal reach
 * executables only through these functions, never through the table.
 *
 * An executable is a graph compiled for one device. It must be destroyed
 * before its device is closed. An executable cache is a set of executables
 * of one device under string keys (the model is IREE's
 * iree_hal_executable_cache_t): whoever creates a cache owns it and every
 * executable in it, and destroys it before closing the device. Each device
 * also owns one cache of its own (ty_device_executable_cache), with the
 * device's lifetime, which sessions share so that a graph compiled once per
 * device is reused by every later session on it.
 *
 * Nothing here is thread-safe: use an executable or a cache from one thread
 * at a time. */
#ifndef TY_HAL_EXECUTABLE_H_
#define TY_HAL_EXECUTABLE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/device.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_executable_t ty_executable_t;
typedef struct ty_executable_cache_t ty_executable_cache_t;

/* ---- what a device's backend can do with graphs ---- */

/* OK when the backend has the ABI 1.1 graph entries (graph_supports,
 * graph_compile, executable_execute); UNIMPLEMENTED naming the backend
 * otherwise. */
ty_status_t ty_executable_graph_entries(const ty_device_t *device);

/* The backend's verdict on every node of `graph` into
 * out_support[graph->node_count] (zeroed by the caller). The errors of
 * ty_executable_graph_entries, or the plugin's own when the check fails. */
ty_status_t ty_executable_supports(ty_device_t *device, const ty_abi_graph_t *graph,
                                   ty_abi_node_support_t *out_support);

/* True when the backend can both serialize and deserialize executables
 * (ABI 1.2): only then can they be stored in files. */
bool ty_executable_serializable(const ty_device_t *device);

/* ---- making an executable (the caller owns *out_executable) ---- */

/* Compiles `graph` for `device` with the given compile options. The
 * plugin's errors (a contract error named as the plugin's); UNIMPLEMENTED
 * for a backend without graph entries. */
ty_status_t ty_executable_compile(ty_device_t *device, const ty_abi_graph_t *graph,
                                  uint32_t option_count, const ty_abi_option_t *options,
                                  ty_executable_t **out_executable);

/* Loads an artifact (the bytes of ty_executable_serialize) for `device`,
 * checked against `expected` when it is not NULL. UNIMPLEMENTED for a
 * backend without ABI 1.2 executable_deserialize; the plugin's DATA_LOSS or
 * FAILED_PRECONDITION for a corrupt or mismatched artifact. */
ty_status_t ty_executable_deserialize(ty_device_t *device, const void *bytes, size_t size,
                                      const ty_abi_graph_t *expected,
                                      ty_executable_t **out_executable);

/* Destroys the plugin's executable. NULL is a no-op. */
void ty_executable_destroy(ty_executable_t *executable);

/* ---- using one ---- */

/* The plugin's handle (valid while the executable lives), for hal calls
 * that order work after it (hal/comm.h). */
ty_abi_executable_t *ty_executable_handle(const ty_executable_t *executable);

/* The graph the executable runs as the plugin keeps it, or NULL when the
 * plugin has no ABI 1.2 executable_graph or keeps none. Owned by the
 * executable. */
const ty_abi_graph_t *ty_executable_graph(const ty_executable_t *executable);

/* The plugin's check of a binding before data is copied (ABI 1.2
 * executable_check_binding); OK when the plugin has no such check. */
ty_status_t ty_executable_check_binding(ty_executable_t *executable,
                                        const ty_abi_binding_check_t *check);

/* Runs once (the plugin's executable_execute): its errors, with a contract
 * error named as the plugin's. */
ty_status_t ty_executable_execute(ty_executable_t *executable,
                                  const ty_abi_execute_args_t *args);

/* The artifact bytes (malloc'ed; the caller frees *out_bytes).
 * UNIMPLEMENTED for a backend without ABI 1.2 executable_serialize;
 * INTERNAL when the plugin writes another size than it announced. */
ty_status_t ty_executable_serialize(const ty_executable_t *executable, void **out_bytes,
                                    size_t *out_size);

/* The memory the executable holds and uses per run (ABI 1.3); out is
 * zeroed and its struct_size set first. UNIMPLEMENTED when the plugin does
 * not say. */
ty_status_t ty_executable_memory(const ty_executable_t *executable,
                                 ty_abi_executable_memory_t *out);

/* The plugin's report as text (the caller frees *out_text); UNIMPLEMENTED
 * when the plugin gives none. */
ty_status_t ty_executable_report(const ty_executable_t *executable, char **out_text);

/* ---- caches ---- */

/* An empty cache for executables of `device`; destroy it (which destroys
 * its executables) before closing the device. */
ty_status_t ty_executable_cache_create(ty_device_t *device, ty_executable_cache_t **out_cache);
void ty_executable_cache_destroy(ty_executable_cache_t *cache);

/* The executable stored under `key`, or NULL. Owned by the cache. */
ty_executable_t *ty_executable_cache_lookup(const ty_executable_cache_t *cache,
                                            const char *key);

/* Stores `executable` (which must be of the cache's device) under a copy of
 * `key`; the cache takes the executable even on error (it is destroyed:
 * RESOURCE_EXHAUSTED; INVALID_ARGUMENT for an executable of another
 * device). A key stored again keeps the earlier executable
 * alive too (a session may still run it); lookups find the newest. */
ty_status_t ty_executable_cache_insert(ty_executable_cache_t *cache, const char *key,
                                       ty_executable_t *executable);

/* How many executables the cache holds. */
size_t ty_executable_cache_count(const ty_executable_cache_t *cache);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_EXECUTABLE_H_ */
