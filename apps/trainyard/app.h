/* Shared pieces of the `trainyard` command: the context every subcommand
 * gets, exit codes, and error reporting. */
#ifndef TY_APPS_TRAINYARD_APP_H_
#define TY_APPS_TRAINYARD_APP_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "hal/device.h"
#include "hal/registry.h"
#include "hal/status.h"
#include "models/checkpoint.h"

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

/* What of the global options a command uses (ty_command_t.uses): a global
 * option given to a command that would ignore it is refused. */
enum {
  TY_COMMAND_USES_PLUGINS = 1u << 0, /* --plugin-path: it opens devices */
  TY_COMMAND_USES_VERBOSE = 1u << 1, /* -v: it has more detail to print */
};

typedef struct ty_command_t {
  const char *name;
  ty_command_fn_t run;
  const char *summary;
  unsigned uses; /* TY_COMMAND_USES_* */
} ty_command_t;

/* Loads plugins with the app's search order. */
ty_status_t ty_app_registry_create(const ty_app_t *app, ty_registry_t **out);

/* Opens the device `uri` (as typed) for `command`, parsed once here and
 * passed down as a struct, first printing to stderr a warning for every
 * half-set entry pair of its plugin (ty_backend_warning_at). `fallback`
 * (--fallback URI2, or NULL) opens URI2 into *out_fallback (bring-up: nodes
 * the device refuses run on URI2, explicitly; graph/runtime/session.h). The old
 * form, a URI option `fallback=URI2`, does the same and is taken off the
 * struct before the plugin sees it; giving both is INVALID_ARGUMENT naming
 * both. A command that cannot run mixed passes out_fallback NULL and gets
 * INVALID_ARGUMENT for either form. Without a fallback *out_fallback is
 * NULL. The caller closes both devices. */
ty_status_t ty_app_device_open_fallback(const char *command, ty_registry_t *registry,
                                        const char *uri, const char *fallback,
                                        ty_device_t **out_device, ty_device_t **out_fallback);

/* ty_app_device_open_fallback without --fallback. */
ty_status_t ty_app_device_open(const char *command, ty_registry_t *registry, const char *uri,
                               ty_device_t **out_device, ty_device_t **out_fallback);

/* The device of local rank `local_rank` of a distributed run
 * (ty_device_uri_for_rank: the index is set in the parsed struct). The
 * caller refuses a fallback first: a mixed run is one process. */
ty_status_t ty_app_device_open_rank(const char *command, ty_registry_t *registry,
                                    const char *uri, uint32_t local_rank,
                                    ty_device_t **out_device);

/* Refuses --fallback given together with a --backend URI that holds
 * `fallback=` (its old form): prints the usage error naming both and
 * returns TY_EXIT_USAGE; TY_EXIT_OK otherwise (also for a malformed URI,
 * which opening the device reports). */
int ty_app_refuse_two_fallbacks(const char *command, const char *backend,
                                const char *fallback);

/* --dump-graph P: the graph as lowered for a backend (what a session
 * compiles), as canonical text (P.txt) and Graphviz dot (P.dot). Written
 * before compiling, so a graph a backend refuses can be looked at too. */
ty_status_t ty_app_write_graph_dump(const ty_graph_t *graph, const char *prefix);

/* Prints "trainyard <command>: <CODE>: <message>" to stderr, frees status,
 * and returns TY_EXIT_RUNTIME. */
/* Text before every error line of ty_app_fail and ty_app_usage_error:
 * "rank 1: " in a distributed run, "" (the default) otherwise. */
void ty_app_set_error_prefix(const char *prefix);
const char *ty_app_error_prefix(void);
int ty_app_fail(const char *command, ty_status_t status);

/* Prints "trainyard <command>: <message>; see 'trainyard <command> --help'"
 * to stderr and returns TY_EXIT_USAGE. */
int ty_app_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints, once per process, the warning of ty_compile_cache_dir_warning
 * for the compile cache `dir` of `command` (nothing when the folder is this
 * user's alone or there is no cache). */
void ty_app_warn_cache_dir(const char *command, const char *dir);

struct option;

/* Refuses an empty value ("--out ''", "--memory-limit=") of any option of
 * `longopts` (and `shortopts`) that takes one, before a command's own
 * getopt_long loop reads them: '' is never a path, size, name or list, and
 * taking it for "not given" hides a mistake ("--out $UNSET"). Prints the
 * usage error naming the option and returns TY_EXIT_USAGE; TY_EXIT_OK when
 * every value is non-empty (or argv has errors the command's loop reports).
 * Leaves optind at 0, so that the command's loop starts afresh. */
int ty_app_refuse_empty_values(const char *command, int argc, char **argv, const char *shortopts,
                               const struct option *longopts);

/* `arg`, which the command's getopt_long loop refused: when it is
 * "--name=VALUE" for a switch of `longopts` (an option that takes no value,
 * e.g. "--deterministic=maybe"), prints a usage error saying so and returns
 * TY_EXIT_USAGE; otherwise TY_EXIT_OK, and the caller reports `arg` its own
 * way (getopt's "unknown option" would mislead here). */
int ty_app_refuse_switch_value(const char *command, const char *arg,
                               const struct option *longopts);

/* `--deterministic`: prints, once at start-up, that the sessions of
 * `command` on `device` run batch-invariant kernels (graph/runtime/session.h). */
void ty_app_note_deterministic(const char *command, const ty_device_t *device);

/* A comma-separated option value ("cpu,dataflow", "1,2,3"), split. The
 * one parser of every list option, so they all refuse the same things. */
typedef struct ty_app_list_t {
  char **items;  /* `count` items, each trimmed of spaces; NUL-terminated */
  size_t count;  /* >= 1 */
  char *storage; /* owns the items */
} ty_app_list_t;

/* Splits `value` of option `option` (e.g. "--backends") at commas. An empty
 * value or an empty item ("1,,2", "a,", ",a", "a, ,b") is a usage error that
 * names the option and the item's position: printed as ty_app_usage_error
 * does, returning TY_EXIT_USAGE. TY_EXIT_OK fills *out (free it with
 * ty_app_list_free); TY_EXIT_RUNTIME when memory runs out. */
int ty_app_list_parse(const char *command, const char *option, const char *value,
                      ty_app_list_t *out);
void ty_app_list_free(ty_app_list_t *list);

/* ty_app_list_parse for a list of token ids: every item a decimal integer
 * in [0, 2^31). *out_ids (malloc'ed, `*out_count` >= 1 entries) belongs to
 * the caller. Same return values. */
int ty_app_list_parse_ids(const char *command, const char *option, const char *value,
                          int64_t **out_ids, size_t *out_count);

/* The weight-loading options of a command with --allow-nonfinite (for
 * ty_llm_load_weights_with and ty_generator_load_weights): refuse NaN/Inf
 * weights naming the option, or load them when `allow_nonfinite`. */
ty_llm_load_options_t ty_app_load_options(bool allow_nonfinite);

/* The loud warning on stderr when `report` counts tensors holding NaN or
 * infinity that were loaded from `dir` (with --allow-nonfinite). */
void ty_app_warn_nonfinite(const char *command, const char *dir,
                           const ty_llm_load_report_t *report);

/* ty_llm_load_weights_with with ty_app_load_options, then
 * ty_app_warn_nonfinite. */
ty_status_t ty_app_load_weights(const ty_llm_t *model, ty_session_t *session, const char *dir,
                                bool allow_nonfinite, const char *command);

int ty_cmd_devices(ty_app_t *app, int argc, char **argv);
int ty_cmd_ckpt(ty_app_t *app, int argc, char **argv);
int ty_cmd_check(ty_app_t *app, int argc, char **argv);
int ty_cmd_compare(ty_app_t *app, int argc, char **argv);
int ty_cmd_compile(ty_app_t *app, int argc, char **argv);
int ty_cmd_conform(ty_app_t *app, int argc, char **argv);
int ty_cmd_data(ty_app_t *app, int argc, char **argv);
int ty_cmd_control(ty_app_t *app, int argc, char **argv);
int ty_cmd_eval(ty_app_t *app, int argc, char **argv);
int ty_cmd_forward(ty_app_t *app, int argc, char **argv);
int ty_cmd_generate(ty_app_t *app, int argc, char **argv);
int ty_cmd_serve(ty_app_t *app, int argc, char **argv);
int ty_cmd_train(ty_app_t *app, int argc, char **argv);
int ty_cmd_tokenize(ty_app_t *app, int argc, char **argv);

#endif /* TY_APPS_TRAINYARD_APP_H_ */
