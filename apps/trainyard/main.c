/* `trainyard`: one command, git-style subcommands. Global options come
 * before the subcommand; each subcommand parses its own. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "build_info.h"
#include "hal/backend_abi.h"
#include "stop_signals.h"

#define TY_P TY_COMMAND_USES_PLUGINS
#define TY_V TY_COMMAND_USES_VERBOSE
static const ty_command_t ty_commands[] = {
    {"devices", ty_cmd_devices,
     "list backends, their devices, and plugins that were rejected", TY_P},
    {"data", ty_cmd_data,
     "prepare token datasets, train a BPE tokenizer, check a dataset", 0},
    {"ckpt", ty_cmd_ckpt,
     "diff two checkpoints tensor by tensor; merge or split ZeRO-1 optimizer shards", 0},
    {"check", ty_cmd_check,
     "list what a model's graphs need from a backend, op by op, with its verdicts", TY_P},
    {"compare", ty_cmd_compare,
     "the same training run on several backends: per-step loss, speed, plot", TY_P},
    {"compile", ty_cmd_compile,
     "compile a train step or inference graph into a device artifact", TY_P},
    {"control", ty_cmd_control,
     "list running trainings; status, save, stop or abort one", 0},
    {"conform", ty_cmd_conform,
     "check a backend's ops and gradients against the f64 reference", TY_P},
    {"eval", ty_cmd_eval,
     "score a model on prompt -> completion or multiple-choice lines; perplexity", TY_P},
    {"forward", ty_cmd_forward,
     "logits, loss and gradients of a Hugging Face model for given tokens", TY_P | TY_V},
    {"generate", ty_cmd_generate,
     "continue a prompt with KV-cache decoding (greedy or sampled)", TY_P},
    {"serve", ty_cmd_serve,
     "an OpenAI-compatible HTTP server with continuous batching", TY_P | TY_V},
    {"train", ty_cmd_train,
     "train or fine-tune a model: checkpoints, metrics, exact resume", TY_P},
    {"tokenize", ty_cmd_tokenize,
     "text to token ids, or ids to text, with a Hugging Face tokenizer.json", TY_V},
};
#undef TY_P
#undef TY_V
#define TY_COMMAND_COUNT (sizeof(ty_commands) / sizeof(ty_commands[0]))

static void ty_print_help(FILE *out) {
  fprintf(out,
          "usage: trainyard [--version] [--help] [-v] [--plugin-path PATH]...\n"
          "                 <command> [<args>]\n"
          "\n"
          "Trainyard trains and runs GPT-2 and Llama-family models on backends\n"
          "loaded at run time (plugins named libty_backend_<name>.so).\n"
          "\n"
          "Commands:\n");
  for (size_t i = 0; i < TY_COMMAND_COUNT; ++i) {
    fprintf(out, "  %-10s %s\n", ty_commands[i].name, ty_commands[i].summary);
  }
  fprintf(out,
          "\n"
          "Global options:\n"
          "  --plugin-path PATH  search this plugin file or folder first\n"
          "                      (repeatable; then TRAINYARD_BACKEND_PATH, the\n"
          "                      install folder %s,\n"
          "                      and <exe dir>/../lib/trainyard/backends; for the\n"
          "                      commands that open devices)\n"
          "  -v, --verbose       more detail: forward prints the loss, tokenize the\n"
          "                      time it took, serve a line per request\n"
          "  --version           print version, ABI and build features\n"
          "  -h, --help          this help\n"
          "\n"
          "'trainyard <command> --help' describes a command.\n"
          "Exit codes: 0 success, 1 runtime error, 2 usage error.\n",
          ty_registry_install_dir());
}

/* `dir`/`rel` when it exists (as a real path), else NULL: the tree the
 * executable sits in (a build tree and an install tree share the layout). */
static const char *ty_beside_exe(const char *exe_dir, const char *rel, char *out,
                                 size_t capacity) {
  char path[8192];
  if (!exe_dir[0]) return NULL;
  snprintf(path, sizeof(path), "%s/../%s", exe_dir, rel);
  char *real = realpath(path, NULL);
  if (!real) return NULL;
  snprintf(out, capacity, "%s", real);
  free(real);
  return out;
}

/* The plugin SDK's folders, found beside the executable first (where a
 * relocated install or the build tree has them), then as configured. */
static void ty_print_version(const char *exe_dir) {
  printf("trainyard %s\n", TY_VERSION_STRING);
  printf("plugin ABI %u.%u\n", TY_ABI_MAJOR, TY_ABI_MINOR);
  printf("build: %s, %s%s%s\n", TY_BUILD_TYPE, TY_BUILD_COMPILER,
         TY_BUILD_SANITIZE[0] ? ", sanitize=" : "", TY_BUILD_SANITIZE);
  printf("optional parts detected at build time: %s\n", TY_BUILD_FEATURES);
  char include[4096], plugins[4096];
  const char *inc = ty_beside_exe(exe_dir, TY_SDK_INCLUDE_REL "/trainyard", include,
                                  sizeof(include));
  if (inc) *strrchr(include, '/') = '\0'; /* the folder -I names holds trainyard/ */
  const char *dir = ty_beside_exe(exe_dir, TY_PLUGIN_SUBDIR_REL, plugins, sizeof(plugins));
  if (!inc) inc = TY_SDK_INCLUDE_DIR;
  if (!dir) dir = ty_registry_install_dir();
  printf("plugin include: -I%s (<trainyard/backend_abi.h>; pkg-config trainyard-plugin, "
         "CMake find_package(Trainyard))\n",
         inc);
  printf("plugin folder: %s\n", dir);
}

static void ty_find_exe_dir(char *out, size_t capacity) {
  out[0] = '\0';
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return;
  path[n] = '\0';
  snprintf(out, capacity, "%s", dirname(path));
}

int main(int argc, char **argv) {
  /* Before anything can start a thread: every thread must inherit the
   * blocked SIGINT/SIGTERM/SIGHUP (stop_signals.h). */
  if (!ty_stop_signals_start()) {
    fprintf(stderr, "trainyard: warning: cannot start the signal thread; SIGINT, SIGTERM and "
                    "SIGHUP will end the process without a graceful stop\n");
  }
  ty_app_t app;
  memset(&app, 0, sizeof(app));
  ty_find_exe_dir(app.exe_dir, sizeof(app.exe_dir));

  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      ty_print_help(stdout);
      return TY_EXIT_OK;
    } else if (strcmp(a, "--version") == 0) {
      ty_print_version(app.exe_dir);
      return TY_EXIT_OK;
    } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
      app.verbosity++;
    } else if (strcmp(a, "--plugin-path") == 0 ||
               strncmp(a, "--plugin-path=", 14) == 0) {
      const char *value = a[13] == '=' ? a + 14 : (i + 1 < argc ? argv[++i] : NULL);
      if (!value || !*value) {
        fprintf(stderr, "trainyard: --plugin-path needs a file or folder\n");
        return TY_EXIT_USAGE;
      }
      if (app.plugin_path_count == TY_APP_MAX_PLUGIN_PATHS) {
        fprintf(stderr, "trainyard: more than %d --plugin-path options\n",
                TY_APP_MAX_PLUGIN_PATHS);
        return TY_EXIT_USAGE;
      }
      app.plugin_paths[app.plugin_path_count++] = value;
    } else {
      fprintf(stderr, "trainyard: unknown option '%s'; see 'trainyard --help'\n", a);
      return TY_EXIT_USAGE;
    }
  }
  if (i == argc) {
    ty_print_help(stderr);
    return TY_EXIT_USAGE;
  }
  const char *name = argv[i];
  /* `trainyard help <command>` is `trainyard <command> --help`. */
  if (strcmp(name, "help") == 0) {
    if (i + 1 == argc) {
      ty_print_help(stdout);
      return TY_EXIT_OK;
    }
    name = argv[i + 1];
    for (size_t c = 0; c < TY_COMMAND_COUNT; ++c) {
      if (strcmp(ty_commands[c].name, name) == 0) {
        char *help_argv[] = {(char *)name, (char *)"--help", NULL};
        return ty_commands[c].run(&app, 2, help_argv);
      }
    }
  } else {
    for (size_t c = 0; c < TY_COMMAND_COUNT; ++c) {
      const ty_command_t *cmd = &ty_commands[c];
      if (strcmp(cmd->name, name) != 0) continue;
      /* A global option the command would ignore is refused, not dropped. */
      if (app.plugin_path_count && !(cmd->uses & TY_COMMAND_USES_PLUGINS)) {
        fprintf(stderr, "trainyard: --plugin-path has no effect on '%s' (it opens no "
                        "device); see 'trainyard --help'\n", name);
        return TY_EXIT_USAGE;
      }
      if (app.verbosity && !(cmd->uses & TY_COMMAND_USES_VERBOSE)) {
        fprintf(stderr, "trainyard: -v has no effect on '%s' (it adds detail to forward, serve "
                        "and tokenize); see 'trainyard --help'\n", name);
        return TY_EXIT_USAGE;
      }
      return cmd->run(&app, argc - i, argv + i);
    }
  }
  fprintf(stderr, "trainyard: '%s' is not a trainyard command; see 'trainyard --help'\n",
          name);
  return TY_EXIT_USAGE;
}
