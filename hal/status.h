/* Status values: every fallible Trainyard call returns a ty_status_t.
 *
 * A status is NULL for OK, otherwise an owned heap object carrying a canonical
 * code (hal/backend_abi.h, ty_code_t) and a message naming the root cause.
 * Library code never prints or aborts; it returns a status and the app decides.
 */
#ifndef TY_HAL_STATUS_H_
#define TY_HAL_STATUS_H_

#include <stdarg.h>
#include <stdbool.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_status_s *ty_status_t;

#define TY_OK ((ty_status_t)NULL)

#if defined(__GNUC__) || defined(__clang__)
#define TY_PRINTF_ATTR(fmt, args) __attribute__((format(printf, fmt, args)))
#define TY_MUST_USE __attribute__((warn_unused_result))
#else
#define TY_PRINTF_ATTR(fmt, args)
#define TY_MUST_USE
#endif

/* Creates a status with `code` and a printf-formatted message. `code` must
 * not be TY_CODE_OK. Never returns NULL: if memory runs out it returns a
 * static RESOURCE_EXHAUSTED status (safe to free). Thread-safe. */
ty_status_t ty_status_make(ty_code_t code, const char *fmt, ...)
    TY_PRINTF_ATTR(2, 3) TY_MUST_USE;
ty_status_t ty_status_makev(ty_code_t code, const char *fmt, va_list args)
    TY_MUST_USE;

/* A status for a failed system call: the code from errno value `err`
 * (ENOENT NOT_FOUND; EACCES/EPERM/EROFS PERMISSION_DENIED; ENOSPC/EDQUOT/
 * EFBIG/ENOMEM/EMFILE/ENFILE RESOURCE_EXHAUSTED; EEXIST/ENOTEMPTY
 * ALREADY_EXISTS; EIO DATA_LOSS; EISDIR/ENOTDIR/ENODEV/ENXIO/ESPIPE/ETXTBSY
 * FAILED_PRECONDITION (the path names the wrong kind of file, nothing is
 * damaged); EINVAL/ENAMETOOLONG/ELOOP INVALID_ARGUMENT; EOVERFLOW
 * OUT_OF_RANGE; EAGAIN/EBUSY/EINTR UNAVAILABLE; ENOSYS/EOPNOTSUPP
 * UNIMPLEMENTED; else UNKNOWN) and the message
 * "<formatted context>: <strerror(err)>". Never returns OK. */
ty_status_t ty_status_from_errno(int err, const char *fmt, ...) TY_PRINTF_ATTR(2, 3) TY_MUST_USE;

/* Prefixes the message of a non-OK status with context ("loading x: ...").
 * Takes ownership of `status` and returns the (possibly new) status. OK
 * passes through untouched. */
ty_status_t ty_status_annotate(ty_status_t status, const char *fmt, ...)
    TY_PRINTF_ATTR(2, 3) TY_MUST_USE;

/* TY_CODE_OK for NULL. */
ty_code_t ty_status_code(ty_status_t status);
/* "OK" for NULL. Owned by the status; valid until it is freed. */
const char *ty_status_message(ty_status_t status);
/* Releases a status. NULL and the static out-of-memory status are no-ops. */
void ty_status_free(ty_status_t status);

static inline bool ty_status_is_ok(ty_status_t status) { return status == NULL; }

/* "INVALID_ARGUMENT", ...; "UNKNOWN_CODE(n)" is never returned, out-of-range
 * codes map to "UNKNOWN". Static storage. */
const char *ty_code_name(ty_code_t code);

/* The code ty_status_from_errno gives errno value `err`. */
ty_code_t ty_code_from_errno(int err);

/* Convenience for tests and apps: frees `status` and returns its code. */
ty_code_t ty_status_consume_code(ty_status_t status);

#define TY_RETURN_IF_ERROR(expr)            \
  do {                                      \
    ty_status_t ty_status_tmp_ = (expr);    \
    if (ty_status_tmp_) return ty_status_tmp_; \
  } while (0)

/* TY_SDK_HOST_ONLY_BEGIN: the core's end of the plugin boundary. The SDK's
 * copy of this header (cmake/TrainyardPlugin.cmake) leaves out everything up
 * to TY_SDK_HOST_ONLY_END: a plugin could not link it (the support library's
 * plugin_status.c implements the rest over the host's services). */

/* The host services handed to plugins (status_make / status_free over the
 * ABI). Statuses created there are ordinary ty_status_t values. */
const ty_host_api_t *ty_hal_host_api(void);

/* Converts a status returned over the ABI into a core status (same object). */
static inline ty_status_t ty_status_from_abi(ty_abi_status_t status) {
  return (ty_status_t)(void *)status;
}

/* What the host's status_make makes of a plugin's error made with code OK
 * (which would read as success): INTERNAL, with this text before the
 * plugin's message. */
#define TY_STATUS_OK_CODE_MARK "a plugin returned an error with code OK"

/* ty_status_from_abi for a status from plugin `plugin`: an error the plugin
 * made with code OK (found by TY_STATUS_OK_CODE_MARK, wherever annotations
 * put it) is named as that plugin's contract error, "plugin 'x' returned an
 * error with code OK (...): <its message>"; any other status passes through.
 * Takes ownership of `status`. */
ty_status_t ty_status_from_plugin(const char *plugin, ty_abi_status_t status) TY_MUST_USE;
/* TY_SDK_HOST_ONLY_END */

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_STATUS_H_ */
