/* Shared pieces of the `trainyard` command. */
#include "app.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/lower.h"
#include "hal/device_uri.h"

ty_status_t ty_app_registry_create(const ty_app_t *app, ty_registry_t **out) {
  ty_registry_options_t options = {
      .explicit_paths = app->plugin_paths,
      .explicit_path_count = app->plugin_path_count,
      .use_env = true,
      .use_install_dir = true,
      .exe_dir = app->exe_dir[0] ? app->exe_dir : NULL,
  };
  return ty_registry_create(&options, out);
}

static void ty_app_plugin_warnings(const char *command, ty_registry_t *registry,
                                   const char *backend_name) {
  ty_backend_t *backend = NULL;
  ty_status_t s = ty_registry_find(registry, backend_name, &backend);
  if (s) {
    ty_status_free(s); /* ty_device_open says why */
    return;
  }
  for (size_t i = 0; i < ty_backend_warning_count(backend); ++i) {
    fprintf(stderr, "trainyard %s: warning: plugin '%s' (%s): %s\n", command,
            ty_backend_name(backend), ty_backend_path(backend),
            ty_backend_warning_at(backend, i));
  }
}

/* `parsed` as a URI without its `fallback` option, into a new string. */
static char *ty_app_uri_without_fallback(const ty_device_uri_t *parsed) {
  size_t cap = 64 + TY_BACKEND_NAME_MAX;
  for (uint32_t i = 0; i < parsed->option_count; ++i) {
    cap += strlen(parsed->options[i].key) + strlen(parsed->options[i].value) + 2;
  }
  char *uri = malloc(cap);
  if (!uri) return NULL;
  int used = snprintf(uri, cap, "%s", parsed->backend);
  if (parsed->has_index) used += snprintf(uri + used, cap - (size_t)used, ":%u", parsed->index);
  char sep = '?';
  for (uint32_t i = 0; i < parsed->option_count; ++i) {
    if (strcmp(parsed->options[i].key, "fallback") == 0) continue;
    used += snprintf(uri + used, cap - (size_t)used, "%c%s=%s", sep, parsed->options[i].key,
                     parsed->options[i].value);
    sep = '&';
  }
  return uri;
}

ty_status_t ty_app_device_open(const char *command, ty_registry_t *registry, const char *uri,
                               ty_device_t **out_device, ty_device_t **out_fallback) {
  *out_device = NULL;
  if (out_fallback) *out_fallback = NULL;
  ty_device_uri_t parsed;
  ty_status_t s = ty_device_uri_parse(uri, &parsed);
  if (s) return ty_device_open(registry, uri, out_device); /* its own message */
  ty_app_plugin_warnings(command, registry, parsed.backend);
  const char *fallback = ty_device_uri_option(&parsed, "fallback");
  if (!fallback) {
    ty_device_uri_deinit(&parsed);
    return ty_device_open(registry, uri, out_device);
  }
  if (!out_fallback) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "device '%s': 'fallback=%s' (running refused nodes on another device, "
                       "for bring-up) is taken by 'trainyard train', 'forward' and 'check', "
                       "not by '%s'",
                       uri, fallback, command);
  }
  char *primary = s ? NULL : ty_app_uri_without_fallback(&parsed);
  if (!s && !primary) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) s = ty_device_open(registry, primary, out_device);
  if (!s) {
    ty_device_uri_t fb;
    s = ty_device_uri_parse(fallback, &fb);
    if (!s && strcmp(fb.backend, parsed.backend) == 0) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "device '%s': the fallback must be another backend than '%s'", uri,
                         parsed.backend);
    }
    if (!s) ty_app_plugin_warnings(command, registry, fb.backend);
    ty_device_uri_deinit(&fb);
    if (!s) s = ty_device_open(registry, fallback, out_fallback);
    if (s) {
      s = ty_status_annotate(s, "opening the fallback device of '%s'", uri);
      ty_device_close(*out_device);
      *out_device = NULL;
    }
  }
  free(primary);
  ty_device_uri_deinit(&parsed);
  return s;
}

static ty_status_t ty_write_text_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return ty_status_make(TY_CODE_PERMISSION_DENIED, "cannot write %s", path);
  bool ok = fputs(text, f) >= 0;
  ok = fclose(f) == 0 && ok;
  return ok ? TY_OK : ty_status_make(TY_CODE_DATA_LOSS, "writing %s failed", path);
}

ty_status_t ty_app_write_graph_dump(const ty_graph_t *graph, const char *prefix) {
  ty_lowered_graph_t *lowered = NULL;
  TY_RETURN_IF_ERROR(ty_graph_lower(graph, &lowered));
  char path[4096];
  char *dot = NULL;
  snprintf(path, sizeof(path), "%s.txt", prefix);
  ty_status_t s = ty_write_text_file(path, ty_lowered_graph_text(lowered));
  if (!s) s = ty_lowered_graph_format_dot(lowered, &dot);
  snprintf(path, sizeof(path), "%s.dot", prefix);
  if (!s) s = ty_write_text_file(path, dot);
  free(dot);
  ty_lowered_graph_destroy(lowered);
  return s;
}

int ty_app_fail(const char *command, ty_status_t status) {
  fprintf(stderr, "trainyard %s: %s: %s\n", command,
          ty_code_name(ty_status_code(status)), ty_status_message(status));
  ty_status_free(status);
  return TY_EXIT_RUNTIME;
}

int ty_app_usage_error(const char *command, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "trainyard %s: ", command);
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "; see 'trainyard %s --help'\n", command);
  va_end(args);
  return TY_EXIT_USAGE;
}
