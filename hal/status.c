/* Status values: allocation, formatting and the host services given to
 * plugins. See hal/status.h. */
#include "hal/status.h"

#include "hal/comm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct ty_status_s {
  ty_code_t code;
  const char *message; /* points into storage, or at a literal (static OOM) */
  char storage[];
};

/* Returned when a status itself cannot be allocated; never freed. */
static struct ty_status_s ty_status_oom_ = {
    TY_CODE_RESOURCE_EXHAUSTED, "out of memory while reporting an error"};
#define TY_STATUS_OOM (&ty_status_oom_)

static ty_status_t ty_status_alloc(ty_code_t code, const char *prefix,
                                   const char *message) {
  size_t prefix_len = prefix ? strlen(prefix) : 0;
  size_t message_len = strlen(message);
  struct ty_status_s *s = malloc(sizeof(*s) + prefix_len + message_len + 1);
  if (!s) return TY_STATUS_OOM;
  s->code = code;
  if (prefix_len) memcpy(s->storage, prefix, prefix_len);
  memcpy(s->storage + prefix_len, message, message_len + 1);
  s->message = s->storage;
  return s;
}

/* vasprintf-like; NULL on failure. */
static char *ty_format_alloc(const char *fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) return NULL;
  char *buf = malloc((size_t)n + 1);
  if (!buf) return NULL;
  vsnprintf(buf, (size_t)n + 1, fmt, args);
  return buf;
}

ty_status_t ty_status_makev(ty_code_t code, const char *fmt, va_list args) {
  if (code == TY_CODE_OK) code = TY_CODE_INTERNAL; /* misuse; keep the error */
  char *message = ty_format_alloc(fmt, args);
  if (!message) return TY_STATUS_OOM;
  ty_status_t s = ty_status_alloc(code, NULL, message);
  free(message);
  return s;
}

ty_status_t ty_status_make(ty_code_t code, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  ty_status_t s = ty_status_makev(code, fmt, args);
  va_end(args);
  return s;
}

ty_status_t ty_status_from_errno(int err, const char *fmt, ...) {
  ty_code_t code = ty_code_from_errno(err);
  va_list args;
  va_start(args, fmt);
  char *context = ty_format_alloc(fmt, args);
  va_end(args);
  ty_status_t s = ty_status_make(code, "%s: %s", context ? context : "(out of memory)",
                                 strerror(err));
  free(context);
  return s;
}

ty_status_t ty_status_annotate(ty_status_t status, const char *fmt, ...) {
  if (!status || status == TY_STATUS_OOM) return status;
  va_list args;
  va_start(args, fmt);
  char *context = ty_format_alloc(fmt, args);
  va_end(args);
  if (!context) return status; /* keep the original rather than lose it */
  size_t n = strlen(context);
  char *prefix = realloc(context, n + 3);
  if (!prefix) {
    free(context);
    return status;
  }
  memcpy(prefix + n, ": ", 3);
  ty_status_t annotated = ty_status_alloc(status->code, prefix, status->message);
  free(prefix);
  if (annotated == TY_STATUS_OOM) return status;
  ty_status_free(status);
  return annotated;
}

ty_code_t ty_status_code(ty_status_t status) {
  return status ? status->code : TY_CODE_OK;
}

const char *ty_status_message(ty_status_t status) {
  return status ? status->message : "OK";
}

void ty_status_free(ty_status_t status) {
  if (status && status != TY_STATUS_OOM) free(status);
}

ty_code_t ty_status_consume_code(ty_status_t status) {
  ty_code_t code = ty_status_code(status);
  ty_status_free(status);
  return code;
}

/* ---- host services for plugins ---- */

/* An error with code OK would read as success: it becomes INTERNAL, marked
 * so that ty_status_from_plugin can name the plugin, with its message kept. */
#define TY_STATUS_OK_CODE_PREFIX \
  TY_STATUS_OK_CODE_MARK " (a plugin contract error: an error needs a code other than OK): "

static ty_abi_status_t ty_host_status_make(ty_code_t code, const char *message) {
  ty_status_t s = ty_status_alloc(code == TY_CODE_OK ? TY_CODE_INTERNAL : code,
                                  code == TY_CODE_OK ? TY_STATUS_OK_CODE_PREFIX : NULL,
                                  message ? message : "(no message)");
  return (ty_abi_status_t)(void *)s;
}

ty_status_t ty_status_from_plugin(const char *plugin, ty_abi_status_t abi) {
  ty_status_t status = ty_status_from_abi(abi);
  const char *mark = status ? strstr(status->message, TY_STATUS_OK_CODE_MARK) : NULL;
  if (!mark || status == TY_STATUS_OOM) return status;
  /* "a plugin returned" -> "plugin 'x' returned", the rest kept. */
  ty_status_t named = ty_status_make(status->code, "%.*splugin '%s'%s",
                                     (int)(mark - status->message), status->message, plugin,
                                     mark + strlen("a plugin"));
  if (named == TY_STATUS_OOM) return status;
  ty_status_free(status);
  return named;
}

static void ty_host_status_free(ty_abi_status_t status) {
  ty_status_free(ty_status_from_abi(status));
}

static ty_code_t ty_host_status_code(ty_abi_status_t status) {
  return ty_status_code(ty_status_from_abi(status));
}

static const char *ty_host_status_message(ty_abi_status_t status) {
  return ty_status_message(ty_status_from_abi(status));
}

const ty_host_api_t *ty_hal_host_api(void) {
  static const ty_host_api_t api = {
      .struct_size = sizeof(ty_host_api_t),
      .abi_major = TY_ABI_MAJOR,
      .abi_minor = TY_ABI_MINOR,
      .status_make = ty_host_status_make,
      .status_free = ty_host_status_free,
      .status_code = ty_host_status_code,
      .status_message = ty_host_status_message,
      .collective = ty_host_comm_collective,
  };
  return &api;
}
