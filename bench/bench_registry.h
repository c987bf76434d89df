/* The plugin registry of a benchmark, found as `trainyard` finds its own
 * (apps/trainyard/app.c): --plugin-dir when given, then
 * TRAINYARD_BACKEND_PATH, the install plugin folder and the folder beside
 * the executable (build/bin/../lib/trainyard/backends in a build tree), so
 * a plugin that every other program finds is found here too. */
#ifndef TY_BENCH_BENCH_REGISTRY_H_
#define TY_BENCH_BENCH_REGISTRY_H_

#include <libgen.h>
#include <stdio.h>
#include <unistd.h>

#include "hal/registry.h"

/* `plugin_dir` may be NULL (none given). */
static inline ty_status_t ty_bench_registry_create(const char *plugin_dir,
                                                   ty_registry_t **out) {
  char exe[4096], dir[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  dir[0] = '\0';
  if (n > 0) {
    exe[n] = '\0';
    snprintf(dir, sizeof(dir), "%s", dirname(exe));
  }
  const char *paths[] = {plugin_dir};
  ty_registry_options_t ro = {
      .explicit_paths = plugin_dir ? paths : NULL,
      .explicit_path_count = plugin_dir ? 1 : 0,
      .use_env = true,
      .use_install_dir = true,
      .exe_dir = dir[0] ? dir : NULL,
  };
  return ty_registry_create(&ro, out);
}

#endif /* TY_BENCH_BENCH_REGISTRY_H_ */
