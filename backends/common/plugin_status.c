/* hal/status.h implemented over the host services, for plugin-side code. A
 * ty_status_t here is the host's status object, reached only through
 * ty_host_api_t; its layout is never read. */
#include "backends/common/plugin_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/status.h"

static const ty_host_api_t *ty_plugin_host;

void ty_plugin_status_init(const ty_host_api_t *host) { ty_plugin_host = host; }

const ty_host_api_t *ty_plugin_host_api(void) { return ty_plugin_host; }

static ty_status_t ty_plugin_wrap(ty_abi_status_t s) { return (ty_status_t)(void *)s; }

/* The message is allocated to its full length: build logs and long graph
 * names are not cut, and no backend needs a formatter of its own. */
ty_status_t ty_status_makev(ty_code_t code, const char *fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  const size_t size = n > 0 ? (size_t)n + 1 : 1;
  char *message = malloc(size);
  if (!message) {
    return ty_plugin_wrap(ty_plugin_host->status_make(
        TY_CODE_RESOURCE_EXHAUSTED, "out of memory formatting an error message"));
  }
  if (n > 0) {
    vsnprintf(message, size, fmt, args);
  } else {
    message[0] = '\0';
  }
  ty_abi_status_t s = ty_plugin_host->status_make(code, message);
  free(message);
  return ty_plugin_wrap(s);
}

ty_status_t ty_status_make(ty_code_t code, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  ty_status_t s = ty_status_makev(code, fmt, args);
  va_end(args);
  return s;
}

ty_abi_status_t ty_plugin_error(ty_code_t code, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  ty_status_t s = ty_status_makev(code, fmt, args);
  va_end(args);
  return (ty_abi_status_t)(void *)s;
}

ty_code_t ty_status_code(ty_status_t status) {
  return ty_plugin_host->status_code((ty_abi_status_t)(void *)status);
}

const char *ty_status_message(ty_status_t status) {
  return ty_plugin_host->status_message((ty_abi_status_t)(void *)status);
}

void ty_status_free(ty_status_t status) {
  ty_plugin_host->status_free((ty_abi_status_t)(void *)status);
}

ty_code_t ty_status_consume_code(ty_status_t status) {
  ty_code_t code = ty_status_code(status);
  ty_status_free(status);
  return code;
}

ty_status_t ty_status_from_errno(int err, const char *fmt, ...) {
  char context[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(context, sizeof(context), fmt, args);
  va_end(args);
  return ty_status_make(ty_code_from_errno(err), "%s: %s", context, strerror(err));
}

ty_status_t ty_status_annotate(ty_status_t status, const char *fmt, ...) {
  if (!status) return status;
  char context[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(context, sizeof(context), fmt, args);
  va_end(args);
  ty_status_t annotated = ty_status_make(ty_status_code(status), "%s: %s",
                                         context, ty_status_message(status));
  ty_status_free(status);
  return annotated;
}
