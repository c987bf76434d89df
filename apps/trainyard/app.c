/* Shared pieces of the `trainyard` command. */
#include "app.h"

#include <stdarg.h>
#include <stdio.h>

#include "models/checkpoint.h"

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

ty_status_t ty_app_load_weights(const ty_llm_t *model, ty_session_t *session, const char *dir,
                                bool allow_nonfinite, const char *command) {
  ty_llm_load_options_t options = {
      .allow_nonfinite = allow_nonfinite,
      .nonfinite_hint = "pass --allow-nonfinite to load such weights anyway"};
  ty_llm_load_report_t report;
  TY_RETURN_IF_ERROR(ty_llm_load_weights_with(model, session, dir, &options, &report));
  if (report.nonfinite_tensors) {
    fprintf(stderr,
            "trainyard %s: WARNING: %u tensor(s) of %s hold NaN or infinity, loaded because "
            "of --allow-nonfinite; results computed from them are not meaningful. First: %s\n",
            command, report.nonfinite_tensors, dir, report.first_nonfinite);
  }
  return TY_OK;
}
