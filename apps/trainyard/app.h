/* Shared pieces of the `trainyard` command: the context every subcommand
 * gets, exit codes, and error reporting. */
#ifndef TY_APPS_TRAINYARD_APP_H_
#define TY_APPS_TRAINYARD_APP_H_

#include <stdbool.h>
#include <stddef.h>

#include "hal/registry.h"
#include "hal/status.h"

/* Exit codes (git-style). */
enum {
  TY_EXIT_OK = 0,
  TY_EXIT_RUNTIME = 1, /* the command ran and failed */
  TY_EXIT_USAGE = 2,   /* bad command line */
};

#define TY_APP_MAX_PLUGIN_PATHS 32

typedef struct ty_app_t {
  const char *plugin_paths[TY_APP_MAX_PLUGIN_PATHS]; /* --plugin-path, in order */
  size_t plugin_path_count;
  char exe_dir[4096]; /* folder of the running executable; "" if unknown */
  int verbosity;      /* 0 normal, 1 with -v */
} ty_app_t;

typedef int (*ty_command_fn_t)(ty_app_t *app, int argc, char **argv);

typedef struct ty_command_t {
  const char *name;
  ty_command_fn_t run;
  const char *summary;
} ty_command_t;

/* Loads plugins with the app's search order. */
ty_status_t ty_app_registry_create(const ty_app_t *app, ty_registry_t **out);

/* Prints "trainyard <command>: <CODE>: <message>" to stderr, frees status,
 * and returns TY_EXIT_RUNTIME. */
int ty_app_fail(const char *command, ty_status_t status);

/* Prints "trainyard <command>: <message>; see 'trainyard <command> --help'"
 * to stderr and returns TY_EXIT_USAGE. */
int ty_app_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

struct ty_llm_t;
struct ty_session_t;

/* ty_llm_load_weights_with for a command with --allow-nonfinite: refuses
 * NaN/Inf weights naming the option, or, when `allow_nonfinite`, loads
 * them and prints a loud warning on stderr. */
ty_status_t ty_app_load_weights(const struct ty_llm_t *model, struct ty_session_t *session,
                                const char *dir, bool allow_nonfinite, const char *command);

int ty_cmd_devices(ty_app_t *app, int argc, char **argv);
int ty_cmd_compare(ty_app_t *app, int argc, char **argv);
int ty_cmd_compile(ty_app_t *app, int argc, char **argv);
int ty_cmd_conform(ty_app_t *app, int argc, char **argv);
int ty_cmd_data(ty_app_t *app, int argc, char **argv);
int ty_cmd_forward(ty_app_t *app, int argc, char **argv);
int ty_cmd_generate(ty_app_t *app, int argc, char **argv);
int ty_cmd_train(ty_app_t *app, int argc, char **argv);
int ty_cmd_tokenize(ty_app_t *app, int argc, char **argv);

#endif /* TY_APPS_TRAINYARD_APP_H_ */
