/* Shared pieces of the `trainyard` command. */
#include "app.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/runtime/compile_cache.h"
#include "graph/ir/lower.h"
#include "hal/device_uri.h"
#include "hal/file.h"

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

/* Opens `fallback_text` (a URI as typed) as the fallback device of
 * `primary`, already open as *out_device; closes *out_device on error. */
static ty_status_t ty_app_fallback_open(const char *command, ty_registry_t *registry,
                                        const ty_device_uri_t *primary,
                                        const char *fallback_text, ty_device_t **out_device,
                                        ty_device_t **out_fallback) {
  ty_device_uri_t fb;
  ty_status_t s = ty_device_uri_parse(fallback_text, &fb);
  if (!s && strcmp(fb.backend, primary->backend) == 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "device '%s': the fallback must be another backend than '%s'",
                       primary->typed, primary->backend);
  }
  if (!s) ty_app_plugin_warnings(command, registry, fb.backend);
  if (!s) s = ty_device_open_parsed(registry, &fb, out_fallback);
  ty_device_uri_deinit(&fb);
  if (s) {
    s = ty_status_annotate(s, "opening the fallback device of '%s'", primary->typed);
    ty_device_close(*out_device);
    *out_device = NULL;
  }
  return s;
}

ty_status_t ty_app_device_open_fallback(const char *command, ty_registry_t *registry,
                                        const char *uri, const char *fallback,
                                        ty_device_t **out_device, ty_device_t **out_fallback) {
  *out_device = NULL;
  if (out_fallback) *out_fallback = NULL;
  ty_device_uri_t parsed;
  TY_RETURN_IF_ERROR(ty_device_uri_parse(uri, &parsed));
  ty_app_plugin_warnings(command, registry, parsed.backend);
  /* `fallback=` is the app's option, not the plugin's: taken off the
   * struct, so the plugin never sees it. Its value stays readable. */
  const char *in_uri = ty_device_uri_option(&parsed, "fallback");
  ty_device_uri_remove_option(&parsed, "fallback");
  ty_status_t s = TY_OK;
  if (in_uri && fallback) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "--fallback %s and --backend %s both name a fallback device: give "
                       "--fallback only ('?fallback=' in the URI is its old form)",
                       fallback, uri);
  } else if (in_uri && !out_fallback) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "device '%s': 'fallback=%s' (running refused nodes on another device, "
                       "for bring-up) is taken by 'trainyard train', 'forward', 'check' and "
                       "'eval', not by '%s'",
                       uri, in_uri, command);
  } else if (fallback && !out_fallback) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "--fallback %s (running refused nodes on another device, for bring-up) "
                       "is taken by 'trainyard train', 'forward', 'check' and 'eval', not by "
                       "'%s'",
                       fallback, command);
  }
  if (!s) s = ty_device_open_parsed(registry, &parsed, out_device);
  if (!s && (in_uri || fallback)) {
    s = ty_app_fallback_open(command, registry, &parsed, in_uri ? in_uri : fallback,
                             out_device, out_fallback);
  }
  ty_device_uri_deinit(&parsed);
  return s;
}

ty_status_t ty_app_device_open(const char *command, ty_registry_t *registry, const char *uri,
                               ty_device_t **out_device, ty_device_t **out_fallback) {
  return ty_app_device_open_fallback(command, registry, uri, NULL, out_device, out_fallback);
}

ty_status_t ty_app_device_open_rank(const char *command, ty_registry_t *registry,
                                    const char *uri, uint32_t local_rank,
                                    ty_device_t **out_device) {
  *out_device = NULL;
  ty_device_uri_t parsed;
  TY_RETURN_IF_ERROR(ty_device_uri_parse(uri, &parsed));
  ty_app_plugin_warnings(command, registry, parsed.backend);
  ty_status_t s = ty_device_uri_for_rank(registry, &parsed, local_rank);
  if (!s) s = ty_device_open_parsed(registry, &parsed, out_device);
  ty_device_uri_deinit(&parsed);
  return s;
}

int ty_app_refuse_two_fallbacks(const char *command, const char *backend,
                                const char *fallback) {
  if (!fallback || !backend || !ty_device_uri_has_option(backend, "fallback")) {
    return TY_EXIT_OK;
  }
  return ty_app_usage_error(command, "--fallback %s and --backend %s both name a fallback "
                            "device: give --fallback only ('?fallback=' in the URI is its old "
                            "form)", fallback, backend);
}

/* Atomic, and errors in the user's terms (hal/file.h). */
static ty_status_t ty_write_text_file(const char *path, const char *text) {
  return ty_file_write_atomic(path, text, strlen(text));
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

static char ty_error_prefix[32];

void ty_app_set_error_prefix(const char *prefix) {
  snprintf(ty_error_prefix, sizeof(ty_error_prefix), "%s", prefix);
}

const char *ty_app_error_prefix(void) { return ty_error_prefix; }

int ty_app_fail(const char *command, ty_status_t status) {
  fprintf(stderr, "%strainyard %s: %s: %s\n", ty_error_prefix, command,
          ty_code_name(ty_status_code(status)), ty_status_message(status));
  ty_status_free(status);
  return TY_EXIT_RUNTIME;
}

int ty_app_usage_error(const char *command, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "%strainyard %s: ", ty_error_prefix, command);
  vfprintf(stderr, fmt, args);
  fprintf(stderr, "; see 'trainyard %s --help'\n", command);
  va_end(args);
  return TY_EXIT_USAGE;
}

void ty_app_list_free(ty_app_list_t *list) {
  if (!list) return;
  free(list->items);
  free(list->storage);
  memset(list, 0, sizeof(*list));
}

void ty_app_warn_cache_dir(const char *command, const char *dir) {
  static bool warned; /* once: a run opens many sessions on one cache */
  char text[8192];
  if (warned || !ty_compile_cache_dir_warning(dir, text, sizeof(text))) return;
  warned = true;
  fprintf(stderr, "%strainyard %s: warning: %s\n", ty_app_error_prefix(), command, text);
}

int ty_app_refuse_empty_values(const char *command, int argc, char **argv, const char *shortopts,
                               const struct option *longopts) {
  /* A first pass of getopt_long itself, so that abbreviations, "--x=v" and
   * "--x v" are read exactly as the command's loop will read them; over a
   * copy of argv, which GNU getopt permutes. */
  char **copy = malloc(((size_t)argc + 1) * sizeof(char *));
  if (!copy) return ty_app_fail(command, ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                                        "out of memory"));
  memcpy(copy, argv, (size_t)argc * sizeof(char *));
  copy[argc] = NULL;
  int saved_opterr = opterr, rc = TY_EXIT_OK, c, index = -1;
  opterr = 0;
  optind = 0;
  while (rc == TY_EXIT_OK && (c = getopt_long(argc, copy, shortopts, longopts, &index)) != -1) {
    if (c != '?' && c != ':' && optarg && !optarg[0]) {
      char name[64];
      if (index >= 0) snprintf(name, sizeof(name), "--%s", longopts[index].name);
      else snprintf(name, sizeof(name), "-%c", c);
      rc = ty_app_usage_error(command, "%s is empty: give it a value, or leave it out", name);
    }
    index = -1;
  }
  opterr = saved_opterr;
  optind = 0;
  free(copy);
  return rc;
}

int ty_app_refuse_switch_value(const char *command, const char *arg,
                               const struct option *longopts) {
  const char *eq = arg && !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
  if (!eq) return TY_EXIT_OK;
  size_t n = (size_t)(eq - arg - 2);
  for (const struct option *o = longopts; o->name; ++o) {
    if (o->has_arg == no_argument && strlen(o->name) == n && !strncmp(o->name, arg + 2, n)) {
      return ty_app_usage_error(command, "--%s is a switch and takes no value (got '%s'): give "
                                "--%s to turn it on, or leave it out", o->name, arg, o->name);
    }
  }
  return TY_EXIT_OK;
}

void ty_app_note_deterministic(const char *command, const ty_device_t *device) {
  fprintf(stderr, "trainyard %s: deterministic mode on %s: batch-invariant kernels, so results "
          "do not depend on the batch (--deterministic)\n", command, ty_device_label(device));
}

int ty_app_list_parse(const char *command, const char *option, const char *value,
                      ty_app_list_t *out) {
  memset(out, 0, sizeof(*out));
  size_t commas = 0;
  for (const char *p = value; *p; ++p) commas += *p == ',';
  out->storage = strdup(value);
  out->items = calloc(commas + 1, sizeof(char *));
  if (!out->storage || !out->items) {
    ty_app_list_free(out);
    return ty_app_fail(command, ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory"));
  }
  char *item = out->storage;
  for (size_t i = 0; i <= commas; ++i) {
    char *comma = strchr(item, ',');
    if (comma) *comma = '\0';
    while (*item == ' ' || *item == '\t') ++item;
    char *end = item + strlen(item);
    while (end > item && (end[-1] == ' ' || end[-1] == '\t')) *--end = '\0';
    if (!*item) {
      /* Dropping it would run something other than what was asked. */
      ty_app_list_free(out);
      if (commas == 0) return ty_app_usage_error(command, "%s is empty", option);
      return ty_app_usage_error(command, "%s '%s': item %zu of %zu is empty", option, value,
                                i + 1, commas + 1);
    }
    out->items[out->count++] = item;
    item = comma ? comma + 1 : end;
  }
  return TY_EXIT_OK;
}

int ty_app_list_parse_ids(const char *command, const char *option, const char *value,
                          int64_t **out_ids, size_t *out_count) {
  *out_ids = NULL;
  *out_count = 0;
  ty_app_list_t list;
  int rc = ty_app_list_parse(command, option, value, &list);
  if (rc != TY_EXIT_OK) return rc;
  int64_t *ids = malloc(list.count * sizeof(int64_t));
  if (!ids) {
    ty_app_list_free(&list);
    return ty_app_fail(command, ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory"));
  }
  for (size_t i = 0; i < list.count; ++i) {
    const char *text = list.items[i];
    char *end = NULL;
    errno = 0;
    long long v = text[0] >= '0' && text[0] <= '9' ? strtoll(text, &end, 10) : -1;
    if (v < 0 || errno || *end || v > INT32_MAX) {
      rc = ty_app_usage_error(command, "%s '%s': item %zu, '%s', is not a token id (an integer "
                                       "from 0 to %d)",
                              option, value, i + 1, text, INT32_MAX);
      free(ids);
      ty_app_list_free(&list);
      return rc;
    }
    ids[i] = v;
  }
  *out_count = list.count;
  *out_ids = ids;
  ty_app_list_free(&list);
  return TY_EXIT_OK;
}

ty_llm_load_options_t ty_app_load_options(bool allow_nonfinite) {
  return (ty_llm_load_options_t){
      .allow_nonfinite = allow_nonfinite,
      .nonfinite_hint = "pass --allow-nonfinite to load such weights anyway"};
}

void ty_app_warn_nonfinite(const char *command, const char *dir,
                           const ty_llm_load_report_t *report) {
  if (!report->nonfinite_tensors) return;
  fprintf(stderr,
          "trainyard %s: WARNING: %u tensor(s) of %s hold NaN or infinity, loaded because "
          "of --allow-nonfinite; results computed from them are not meaningful. First: %s\n",
          command, report->nonfinite_tensors, dir, report->first_nonfinite);
}

ty_status_t ty_app_load_weights(const ty_llm_t *model, ty_session_t *session, const char *dir,
                                bool allow_nonfinite, const char *command) {
  ty_llm_load_options_t options = ty_app_load_options(allow_nonfinite);
  ty_llm_load_report_t report;
  TY_RETURN_IF_ERROR(ty_llm_load_weights_with(model, session, dir, &options, &report));
  ty_app_warn_nonfinite(command, dir, &report);
  return TY_OK;
}
