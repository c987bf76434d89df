/* Shared pieces of the `trainyard` command: the context every subcommand
 * gets, exit codes, and error reporting. */
#ifndef TY_APPS_TRAINYARD_APP_H_
#define TY_APPS_TRAINYARD_APP_H_

#include <stdbool.h>
#include <stddef.h>

#include "graph/graph.h"
#include "hal/device.h"
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

/* Opens the device `uri` for `command`, first printing to stderr a warning
 * for every half-set entry pair of its plugin (ty_backend_warning_at).
 * A URI option `fallback=URI2` (bring-up: nodes the device refuses run on
 * URI2, explicitly; graph/session.h) is taken off before the plugin sees the
 * URI, and URI2 is opened into *out_fallback; a command that cannot run
 * mixed passes out_fallback NULL and gets INVALID_ARGUMENT for it. Without
 * the option *out_fallback is NULL. The caller closes both devices. */
ty_status_t ty_app_device_open(const char *command, ty_registry_t *registry, const char *uri,
                               ty_device_t **out_device, ty_device_t **out_fallback);

/* --dump-graph P: the graph as lowered for a backend (what a session
 * compiles), as canonical text (P.txt) and Graphviz dot (P.dot). Written
 * before compiling, so a graph a backend refuses can be looked at too. */
ty_status_t ty_app_write_graph_dump(const ty_graph_t *graph, const char *prefix);

/* Prints "trainyard <command>: <CODE>: <message>" to stderr, frees status,
 * and returns TY_EXIT_RUNTIME. */
int ty_app_fail(const char *command, ty_status_t status);

/* Prints "trainyard <command>: <message>; see 'trainyard <command> --help'"
 * to stderr and returns TY_EXIT_USAGE. */
int ty_app_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

int ty_cmd_devices(ty_app_t *app, int argc, char **argv);
int ty_cmd_check(ty_app_t *app, int argc, char **argv);
int ty_cmd_compare(ty_app_t *app, int argc, char **argv);
int ty_cmd_compile(ty_app_t *app, int argc, char **argv);
int ty_cmd_conform(ty_app_t *app, int argc, char **argv);
int ty_cmd_data(ty_app_t *app, int argc, char **argv);
int ty_cmd_forward(ty_app_t *app, int argc, char **argv);
int ty_cmd_generate(ty_app_t *app, int argc, char **argv);
int ty_cmd_train(ty_app_t *app, int argc, char **argv);
int ty_cmd_tokenize(ty_app_t *app, int argc, char **argv);

#endif /* TY_APPS_TRAINYARD_APP_H_ */
