/* Devices: an opened device of a loaded backend, chosen by URI. */
#ifndef TY_HAL_DEVICE_H_
#define TY_HAL_DEVICE_H_

#include <stdbool.h>

#include "hal/backend_abi.h"
#include "hal/device_uri.h"
#include "hal/registry.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_device_t ty_device_t;

/* Opens the device `uri` describes (hal/device_uri.h), parsed by the
 * caller; `uri` is not kept. Errors: INVALID_ARGUMENT for an option the
 * backend rejects; NOT_FOUND for an unknown backend or device index;
 * UNAVAILABLE when the backend was found but its runtime is missing;
 * UNIMPLEMENTED when the plugin has no device_open. Messages name the URI
 * as ty_device_uri_format gives it (as typed, unless changed). The caller
 * owns the device (ty_device_close) and must close it before destroying the
 * registry. */
ty_status_t ty_device_open_parsed(ty_registry_t *registry, const ty_device_uri_t *uri,
                                  ty_device_t **out_device);

/* ty_device_open_parsed of `uri` parsed: INVALID_ARGUMENT for a malformed
 * URI too. */
ty_status_t ty_device_open(ty_registry_t *registry, const char *uri,
                           ty_device_t **out_device);

/* Makes `uri` name the device rank `local_rank` of a distributed run uses
 * (one rank per device on each host): left as it is when it names an index
 * or when its backend has one device (all ranks share it, as cpu does);
 * else given index `local_rank` (`cuda` -> `cuda:1` for local rank 1).
 * FAILED_PRECONDITION naming the backend and its device count when
 * local_rank has no device; NOT_FOUND for an unknown backend, as
 * ty_device_open gives it; both name the URI as typed. */
ty_status_t ty_device_uri_for_rank(ty_registry_t *registry, ty_device_uri_t *uri,
                                   uint32_t local_rank);

void ty_device_close(ty_device_t *device);

ty_backend_t *ty_device_backend(const ty_device_t *device);
uint32_t ty_device_index(const ty_device_t *device);
/* The URI the device was opened with, e.g. "cpu?threads=2": as typed, or
 * the canonical text of a struct the app changed (ty_device_uri_format:
 * "cuda:1" for a rank, a `fallback=` option taken off). */
const char *ty_device_uri(const ty_device_t *device);
/* Canonical short name, e.g. "cpu:0", for messages. */
const char *ty_device_label(const ty_device_t *device);
const ty_abi_device_info_t *ty_device_info(const ty_device_t *device);
ty_abi_device_t *ty_device_handle(const ty_device_t *device);

/* The device's own executable cache (hal/executable.h), which sessions
 * share: made at the first call, owned by the device, and destroyed with its
 * executables when the device closes (before the plugin's device). Fails
 * only for out-of-memory. Not thread-safe. */
typedef struct ty_executable_cache_t ty_executable_cache_t;
ty_status_t ty_device_executable_cache(ty_device_t *device, ty_executable_cache_t **out_cache);

/* Blocks until queued work is done. OK for plugins without the entry
 * (they are synchronous by definition). */
ty_status_t ty_device_synchronize(ty_device_t *device);

/* The device's measured memory (ABI 1.3 device_memory): bytes in use, their
 * high-water mark (restarted at the bytes in use when reset_peak), and how
 * the plugin measures them. UNIMPLEMENTED when the plugin does not say. */
ty_status_t ty_device_memory(ty_device_t *device, bool reset_peak,
                             ty_abi_device_memory_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_DEVICE_H_ */
