/* The status API of hal/status.h, implemented inside a plugin over the
 * host's services (ty_host_api_t), so that plugin-side copies of pure core
 * code (the reference kernels, dtype tables) report errors as host statuses
 * without linking the core. Call ty_plugin_status_init() in backend_create
 * before anything else of the support library runs. */
#ifndef TY_BACKENDS_COMMON_PLUGIN_STATUS_H_
#define TY_BACKENDS_COMMON_PLUGIN_STATUS_H_

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Remembers the host's services for this plugin (one copy per plugin, since
 * the support library is linked statically into each). Idempotent. */
void ty_plugin_status_init(const ty_host_api_t *host);

/* The host's services remembered by ty_plugin_status_init (NULL before). */
const ty_host_api_t *ty_plugin_host_api(void);

/* Formats a message of any length and makes a host status (never NULL;
 * RESOURCE_EXHAUSTED when the message cannot be allocated). */
ty_abi_status_t ty_plugin_error(ty_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_PLUGIN_STATUS_H_ */
