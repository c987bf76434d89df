/* Plugin registry: discovery, validation and loading of backend plugins.
 * Every candidate either loads or is recorded with the reason it was
 * rejected; a bad plugin never stops the others from loading. */
#include "hal/registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hal/path_trust.h"
#include "hal/plugin_check.h"

#ifndef TY_INSTALL_PLUGIN_DIR
#define TY_INSTALL_PLUGIN_DIR "/usr/local/lib/trainyard/backends"
#endif

#define TY_PLUGIN_PREFIX "libty_backend_"
#define TY_PLUGIN_SUFFIX ".so"
#define TY_NAME_BUF_ 64

struct ty_backend_t {
  char *name;
  char *path;
  char *real_path;
  void *dl;
  const ty_backend_api_t *api;
  ty_abi_backend_t *instance;
  char identity[TY_PLUGIN_IDENTITY_MAX]; /* build-id or file hash */
  char **warnings;                       /* half-set entry pairs */
  size_t warning_count;
};

struct ty_registry_t {
  ty_backend_t **backends;
  size_t backend_count, backend_capacity;
  ty_rejected_candidate_t *rejected;
  size_t rejected_count, rejected_capacity;
  char **search_dirs;
  size_t search_dir_count, search_dir_capacity;
  char **seen; /* real paths of every candidate considered */
  size_t seen_count, seen_capacity;
  bool allow_unsafe; /* TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS=1 */
};

/* Grows *items (of elem_size) so that one more fits. false on OOM. */
static bool ty_grow(void **items, size_t *capacity, size_t count,
                    size_t elem_size) {
  if (count < *capacity) return true;
  size_t new_capacity = *capacity ? *capacity * 2 : 8;
  void *p = realloc(*items, new_capacity * elem_size);
  if (!p) return false;
  *items = p;
  *capacity = new_capacity;
  return true;
}

static ty_status_t ty_oom(const char *what) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                        "out of memory while %s", what);
}

const char *ty_reject_kind_name(ty_reject_kind_t kind) {
  switch (kind) {
    case TY_REJECT_MISSING_PATH: return "missing-path";
    case TY_REJECT_DLOPEN: return "dlopen-failed";
    case TY_REJECT_NO_ENTRY_POINT: return "no-entry-point";
    case TY_REJECT_QUERY_NULL: return "query-returned-null";
    case TY_REJECT_ABI_MISMATCH: return "abi-mismatch";
    case TY_REJECT_TABLE_TOO_SMALL: return "table-too-small";
    case TY_REJECT_INVALID_TABLE: return "invalid-table";
    case TY_REJECT_UNAVAILABLE: return "unavailable";
    case TY_REJECT_CREATE_FAILED: return "create-failed";
    case TY_REJECT_SHADOWED: return "shadowed";
    case TY_REJECT_UNSAFE_PERMISSIONS: return "unsafe-permissions";
  }
  return "unknown";
}

const char *ty_registry_install_dir(void) { return TY_INSTALL_PLUGIN_DIR; }

static ty_status_t ty_registry_reject(ty_registry_t *r, const char *path,
                                      const char *name, ty_reject_kind_t kind,
                                      const char *fmt, ...)
    TY_PRINTF_ATTR(5, 6);

static ty_status_t ty_registry_reject(ty_registry_t *r, const char *path,
                                      const char *name, ty_reject_kind_t kind,
                                      const char *fmt, ...) {
  if (!ty_grow((void **)&r->rejected, &r->rejected_capacity, r->rejected_count,
               sizeof(*r->rejected))) {
    return ty_oom("recording a rejected plugin");
  }
  char reason[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(reason, sizeof(reason), fmt, args);
  va_end(args);
  ty_rejected_candidate_t *c = &r->rejected[r->rejected_count];
  c->path = strdup(path);
  c->name = strdup(name ? name : "");
  c->reason = strdup(reason);
  c->kind = kind;
  if (!c->path || !c->name || !c->reason) {
    free((void *)c->path);
    free((void *)c->name);
    free((void *)c->reason);
    return ty_oom("recording a rejected plugin");
  }
  r->rejected_count++;
  return TY_OK;
}

/* Records real_path as seen. *out_seen_before is true if it already was. */
static ty_status_t ty_registry_mark_seen(ty_registry_t *r, const char *real_path,
                                         bool *out_seen_before) {
  for (size_t i = 0; i < r->seen_count; ++i) {
    if (strcmp(r->seen[i], real_path) == 0) {
      *out_seen_before = true;
      return TY_OK;
    }
  }
  *out_seen_before = false;
  if (!ty_grow((void **)&r->seen, &r->seen_capacity, r->seen_count,
               sizeof(*r->seen))) {
    return ty_oom("scanning plugins");
  }
  if (!(r->seen[r->seen_count] = strdup(real_path))) return ty_oom("scanning plugins");
  r->seen_count++;
  return TY_OK;
}

static ty_backend_t *ty_registry_lookup(const ty_registry_t *r, const char *name) {
  for (size_t i = 0; i < r->backend_count; ++i) {
    if (strcmp(r->backends[i]->name, name) == 0) return r->backends[i];
  }
  return NULL;
}

/* Backend name from a file name libty_backend_<name>.so, into out (size
 * TY_BACKEND_NAME_MAX-ish). false when the file name does not match. */
static bool ty_plugin_name_from_file(const char *file_name, char *out,
                                     size_t capacity) {
  size_t prefix = strlen(TY_PLUGIN_PREFIX), suffix = strlen(TY_PLUGIN_SUFFIX);
  size_t n = strlen(file_name);
  if (n <= prefix + suffix) return false;
  if (strncmp(file_name, TY_PLUGIN_PREFIX, prefix) != 0) return false;
  if (strcmp(file_name + n - suffix, TY_PLUGIN_SUFFIX) != 0) return false;
  size_t name_len = n - prefix - suffix;
  if (name_len >= capacity) return false;
  memcpy(out, file_name + prefix, name_len);
  out[name_len] = '\0';
  return true;
}

/* True when file_name looks like libty_backend_*.so whatever its length. */
static bool ty_plugin_file_pattern(const char *file_name) {
  size_t prefix = strlen(TY_PLUGIN_PREFIX), suffix = strlen(TY_PLUGIN_SUFFIX);
  size_t n = strlen(file_name);
  return n > prefix + suffix && strncmp(file_name, TY_PLUGIN_PREFIX, prefix) == 0 &&
         strcmp(file_name + n - suffix, TY_PLUGIN_SUFFIX) == 0;
}

static bool ty_backend_name_valid(const char *name) {
  if (!name || !*name || strlen(name) >= 64) return false;
  for (const char *p = name; *p; ++p) {
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) {
      return false;
    }
  }
  return true;
}

/* Checks the table a plugin returned. Returns a reject kind, or -1 when the
 * table is acceptable; fills reason. */
static int ty_validate_table(const ty_backend_api_t *api, const char *file_name,
                             char *reason, size_t capacity) {
  size_t version_end = offsetof(ty_backend_api_t, abi_minor) + sizeof(uint32_t);
  if (api->struct_size < version_end) {
    snprintf(reason, capacity,
             "backend table struct_size %zu is too small to hold even the ABI "
             "version (%zu bytes)",
             api->struct_size, version_end);
    return TY_REJECT_TABLE_TOO_SMALL;
  }
  if (api->abi_major != TY_ABI_MAJOR) {
    snprintf(reason, capacity,
             "plugin ABI major %u does not match host ABI major %u (plugin "
             "ABI %u.%u, host ABI %u.%u); rebuild the plugin against this "
             "Trainyard's hal/backend_abi.h",
             api->abi_major, TY_ABI_MAJOR, api->abi_major, api->abi_minor,
             TY_ABI_MAJOR, TY_ABI_MINOR);
    return TY_REJECT_ABI_MISMATCH;
  }
  if (api->struct_size < TY_BACKEND_API_MIN_SIZE) {
    snprintf(reason, capacity,
             "backend table struct_size %zu is smaller than the %zu bytes of "
             "entries required by ABI %u.0 (plugin says ABI %u.%u)",
             api->struct_size, (size_t)TY_BACKEND_API_MIN_SIZE, TY_ABI_MAJOR,
             api->abi_major, api->abi_minor);
    return TY_REJECT_TABLE_TOO_SMALL;
  }
  if (!ty_backend_name_valid(api->name)) {
    snprintf(reason, capacity,
             "backend table has a missing or invalid name (want [a-z0-9_]+)");
    return TY_REJECT_INVALID_TABLE;
  }
  if (file_name && strcmp(api->name, file_name) != 0) {
    snprintf(reason, capacity,
             "backend table is named '%s' but the file is named for '%s'; "
             "rename the file to " TY_PLUGIN_PREFIX "%s" TY_PLUGIN_SUFFIX
             " or fix the table's name",
             api->name, file_name, api->name);
    return TY_REJECT_INVALID_TABLE;
  }
  const char *missing = !api->version          ? "version"
                        : !api->backend_create  ? "backend_create"
                        : !api->backend_destroy ? "backend_destroy"
                        : !api->device_count    ? "device_count"
                        : !api->device_info     ? "device_info"
                                                : NULL;
  if (missing) {
    snprintf(reason, capacity, "backend table lacks required entry '%s'",
             missing);
    return TY_REJECT_INVALID_TABLE;
  }
  return -1;
}

static void ty_backend_free(ty_backend_t *b) {
  if (!b) return;
  for (size_t i = 0; i < b->warning_count; ++i) free(b->warnings[i]);
  free(b->warnings);
  free(b->name);
  free(b->path);
  free(b->real_path);
  free(b);
}

/* ty_plugin_warn_fn_t: keeps a copy of the warning; false on out-of-memory. */
static bool ty_backend_add_warning(void *user, const char *message) {
  ty_backend_t *b = user;
  char **grown = realloc(b->warnings, (b->warning_count + 1) * sizeof(*grown));
  if (!grown) return false;
  b->warnings = grown;
  if (!(b->warnings[b->warning_count] = strdup(message))) return false;
  b->warning_count++;
  return true;
}

/* Considers one candidate file. Only out-of-memory (and an unreadable file
 * that dlopen could read moments ago) is an error. */
static ty_status_t ty_registry_consider(ty_registry_t *r, const char *path) {
  char real_path[PATH_MAX];
  if (!realpath(path, real_path)) {
    return ty_registry_reject(r, path, NULL, TY_REJECT_MISSING_PATH,
                              "cannot resolve path: %s", strerror(errno));
  }
  bool seen = false;
  TY_RETURN_IF_ERROR(ty_registry_mark_seen(r, real_path, &seen));
  if (seen) return TY_OK; /* same file reached through two search folders */

  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  char file_name[TY_NAME_BUF_] = {0};
  bool named = ty_plugin_name_from_file(base, file_name, sizeof(file_name));

  if (named) {
    ty_backend_t *existing = ty_registry_lookup(r, file_name);
    if (existing) {
      return ty_registry_reject(r, path, file_name, TY_REJECT_SHADOWED,
                                "backend '%s' is already loaded from %s, "
                                "which comes earlier in the search order",
                                file_name, existing->path);
    }
  }

  /* Before dlopen, which runs the plugin's constructors. */
  char unsafe[PATH_MAX + 160];
  if (!r->allow_unsafe && !ty_path_trusted(real_path, unsafe, sizeof(unsafe))) {
    return ty_registry_reject(r, path, file_name, TY_REJECT_UNSAFE_PERMISSIONS,
                              "%s, so users other than you and root could put code there "
                              "that runs when the plugin loads: chown or chmod go-w it, or "
                              "set " TY_PATH_TRUST_ENV "=1 to load it anyway",
                              unsafe);
  }

  dlerror();
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    const char *err = dlerror();
    return ty_registry_reject(r, path, file_name, TY_REJECT_DLOPEN,
                              "dlopen failed: %s", err ? err : "unknown error");
  }
  ty_backend_query_fn_t query;
  dlerror();
  void *sym = dlsym(dl, TY_BACKEND_QUERY_SYMBOL);
  if (!sym) {
    const char *err = dlerror();
    ty_status_t s = ty_registry_reject(
        r, path, file_name, TY_REJECT_NO_ENTRY_POINT,
        "no exported entry point " TY_BACKEND_QUERY_SYMBOL " (%s); a plugin "
        "must define it with TY_BACKEND_EXPORT",
        err ? err : "symbol not found");
    dlclose(dl);
    return s;
  }
  /* POSIX guarantees object/function pointer conversion for dlsym. */
  memcpy(&query, &sym, sizeof(query));
  const ty_backend_api_t *api = query(TY_ABI_MAJOR, TY_ABI_MINOR);
  if (!api) {
    ty_status_t s = ty_registry_reject(
        r, path, file_name, TY_REJECT_QUERY_NULL,
        TY_BACKEND_QUERY_SYMBOL "(%u, %u) returned NULL: the plugin cannot "
        "serve host ABI major %u",
        TY_ABI_MAJOR, TY_ABI_MINOR, TY_ABI_MAJOR);
    dlclose(dl);
    return s;
  }
  char reason[768];
  int kind = ty_validate_table(api, named ? file_name : NULL, reason,
                               sizeof(reason));
  if (kind >= 0) {
    ty_status_t s = ty_registry_reject(r, path, file_name,
                                       (ty_reject_kind_t)kind, "%s", reason);
    dlclose(dl);
    return s;
  }
  if (!named) snprintf(file_name, sizeof(file_name), "%s", api->name);
  ty_backend_t *existing = ty_registry_lookup(r, api->name);
  if (existing) {
    ty_status_t s = ty_registry_reject(
        r, path, api->name, TY_REJECT_SHADOWED,
        "backend '%s' is already loaded from %s, which comes earlier in the "
        "search order",
        api->name, existing->path);
    dlclose(dl);
    return s;
  }

  ty_abi_backend_create_args_t args = {
      .struct_size = sizeof(args),
      .host = ty_hal_host_api(),
  };
  ty_abi_backend_t *instance = NULL;
  ty_status_t create_status = ty_status_from_abi(api->backend_create(&args, &instance));
  if (create_status) {
    ty_code_t code = ty_status_code(create_status);
    ty_status_t s = ty_registry_reject(
        r, path, api->name,
        code == TY_CODE_UNAVAILABLE ? TY_REJECT_UNAVAILABLE
                                    : TY_REJECT_CREATE_FAILED,
        "%s: %s", ty_code_name(code), ty_status_message(create_status));
    ty_status_free(create_status);
    dlclose(dl);
    return s;
  }

  ty_backend_t *b = calloc(1, sizeof(*b));
  ty_status_t s = b ? TY_OK : ty_oom("loading a plugin");
  if (!s) {
    b->name = strdup(api->name);
    b->path = strdup(path);
    b->real_path = strdup(real_path);
    if (!b->name || !b->path || !b->real_path ||
        !ty_grow((void **)&r->backends, &r->backend_capacity, r->backend_count,
                 sizeof(*r->backends))) {
      s = ty_oom("loading a plugin");
    }
  }
  if (!s) s = ty_plugin_identity(dl, real_path, b->identity);
  if (!s && !ty_plugin_check_pairs(api, ty_backend_add_warning, b)) {
    s = ty_oom("checking a plugin's table");
  }
  if (s) {
    ty_backend_free(b);
    api->backend_destroy(instance);
    dlclose(dl);
    return s;
  }
  /* An accepted plugin stays mapped for the life of the process (the
   * registry's dlclose then only drops a reference): backends start threads
   * that outlive their backend object — OpenMP pools, CUDA and OpenCL driver
   * threads — and unmapping code those threads may still run crashes the
   * process at exit (seen with a cpu plugin's 16 spinning OpenMP threads). */
  void *pinned = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  if (pinned) dlclose(pinned);
  b->dl = dl;
  b->api = api;
  b->instance = instance;
  r->backends[r->backend_count++] = b;
  return TY_OK;
}

static int ty_compare_strings(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static ty_status_t ty_registry_add_search_dir(ty_registry_t *r,
                                              const char *real_dir) {
  for (size_t i = 0; i < r->search_dir_count; ++i) {
    if (strcmp(r->search_dirs[i], real_dir) == 0) return TY_OK;
  }
  if (!ty_grow((void **)&r->search_dirs, &r->search_dir_capacity,
               r->search_dir_count, sizeof(*r->search_dirs))) {
    return ty_oom("scanning plugin folders");
  }
  if (!(r->search_dirs[r->search_dir_count] = strdup(real_dir))) {
    return ty_oom("scanning plugin folders");
  }
  r->search_dir_count++;
  return TY_OK;
}

/* Scans a folder for libty_backend_*.so, in name order for determinism. */
static ty_status_t ty_registry_scan_dir(ty_registry_t *r, const char *dir,
                                        const char *real_dir) {
  TY_RETURN_IF_ERROR(ty_registry_add_search_dir(r, real_dir));
  DIR *d = opendir(dir);
  if (!d) {
    return ty_registry_reject(r, dir, NULL, TY_REJECT_MISSING_PATH,
                              "cannot open plugin folder: %s", strerror(errno));
  }
  char **names = NULL;
  size_t count = 0, capacity = 0;
  ty_status_t status = TY_OK;
  struct dirent *e;
  char name_buf[TY_NAME_BUF_];
  while ((e = readdir(d)) != NULL) {
    if (!ty_plugin_name_from_file(e->d_name, name_buf, sizeof(name_buf))) {
      if (ty_plugin_file_pattern(e->d_name)) {
        /* Named like a plugin but unusable: say so rather than skip it. */
        char path[PATH_MAX + 300];
        int n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (n < 0) path[0] = '\0';
        status = ty_registry_reject(r, path, NULL, TY_REJECT_INVALID_TABLE,
                                    "plugin file name %s has a backend name "
                                    "longer than %d characters",
                                    e->d_name, TY_NAME_BUF_ - 1);
        if (status) break;
      }
      continue;
    }
    if (!ty_grow((void **)&names, &capacity, count, sizeof(*names)) ||
        !(names[count] = strdup(e->d_name))) {
      status = ty_oom("scanning a plugin folder");
      break;
    }
    count++;
  }
  closedir(d);
  if (count) qsort(names, count, sizeof(*names), ty_compare_strings);
  for (size_t i = 0; i < count; ++i) {
    if (!status) {
      size_t n = strlen(dir) + strlen(names[i]) + 2;
      char *path = malloc(n);
      if (!path) {
        status = ty_oom("scanning a plugin folder");
      } else {
        snprintf(path, n, "%s/%s", dir, names[i]);
        status = ty_registry_consider(r, path);
        free(path);
      }
    }
    free(names[i]);
  }
  free(names);
  return status;
}

/* A search path entry: file or folder. `report_missing` records a missing
 * entry as rejected (user-given paths); default folders are skipped quietly. */
static ty_status_t ty_registry_search(ty_registry_t *r, const char *path,
                                      bool report_missing) {
  struct stat st;
  char real_path[PATH_MAX];
  if (stat(path, &st) != 0 || !realpath(path, real_path)) {
    if (!report_missing) return TY_OK;
    return ty_registry_reject(r, path, NULL, TY_REJECT_MISSING_PATH,
                              "search path does not exist: %s", strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return ty_registry_scan_dir(r, real_path, real_path);
  return ty_registry_consider(r, path);
}

static ty_status_t ty_registry_search_env(ty_registry_t *r) {
  const char *env = getenv("TRAINYARD_BACKEND_PATH");
  if (!env || !*env) return TY_OK;
  char *copy = strdup(env);
  if (!copy) return ty_oom("reading TRAINYARD_BACKEND_PATH");
  ty_status_t status = TY_OK;
  char *save = NULL;
  for (char *entry = strtok_r(copy, ":", &save); entry && !status;
       entry = strtok_r(NULL, ":", &save)) {
    status = ty_registry_search(r, entry, true);
  }
  free(copy);
  return status;
}

ty_status_t ty_registry_create(const ty_registry_options_t *options,
                               ty_registry_t **out_registry) {
  *out_registry = NULL;
  ty_registry_t *r = calloc(1, sizeof(*r));
  if (!r) return ty_oom("creating the plugin registry");
  const char *allow = getenv(TY_PATH_TRUST_ENV);
  r->allow_unsafe = allow && !strcmp(allow, "1");
  ty_status_t status = TY_OK;
  for (size_t i = 0; i < options->explicit_path_count && !status; ++i) {
    status = ty_registry_search(r, options->explicit_paths[i], true);
  }
  if (!status && options->use_env) status = ty_registry_search_env(r);
  if (!status && options->use_install_dir) {
    status = ty_registry_search(r, TY_INSTALL_PLUGIN_DIR, false);
  }
  if (!status && options->exe_dir) {
    size_t n = strlen(options->exe_dir) + sizeof("/../lib/trainyard/backends");
    char *dir = malloc(n);
    if (!dir) {
      status = ty_oom("locating the plugin folder");
    } else {
      snprintf(dir, n, "%s/../lib/trainyard/backends", options->exe_dir);
      status = ty_registry_search(r, dir, false);
      free(dir);
    }
  }
  if (status) {
    ty_registry_destroy(r);
    return status;
  }
  *out_registry = r;
  return TY_OK;
}

void ty_registry_destroy(ty_registry_t *r) {
  if (!r) return;
  for (size_t i = r->backend_count; i-- > 0;) {
    ty_backend_t *b = r->backends[i];
    b->api->backend_destroy(b->instance);
    dlclose(b->dl);
    ty_backend_free(b);
  }
  free(r->backends);
  for (size_t i = 0; i < r->rejected_count; ++i) {
    free((void *)r->rejected[i].path);
    free((void *)r->rejected[i].name);
    free((void *)r->rejected[i].reason);
  }
  free(r->rejected);
  for (size_t i = 0; i < r->search_dir_count; ++i) free(r->search_dirs[i]);
  free(r->search_dirs);
  for (size_t i = 0; i < r->seen_count; ++i) free(r->seen[i]);
  free(r->seen);
  free(r);
}

size_t ty_registry_backend_count(const ty_registry_t *r) { return r->backend_count; }

ty_backend_t *ty_registry_backend_at(const ty_registry_t *r, size_t i) {
  return i < r->backend_count ? r->backends[i] : NULL;
}

size_t ty_registry_rejected_count(const ty_registry_t *r) { return r->rejected_count; }

const ty_rejected_candidate_t *ty_registry_rejected_at(const ty_registry_t *r,
                                                       size_t i) {
  return i < r->rejected_count ? &r->rejected[i] : NULL;
}

size_t ty_registry_search_dir_count(const ty_registry_t *r) {
  return r->search_dir_count;
}

const char *ty_registry_search_dir_at(const ty_registry_t *r, size_t i) {
  return i < r->search_dir_count ? r->search_dirs[i] : NULL;
}

ty_status_t ty_registry_find(const ty_registry_t *r, const char *name,
                             ty_backend_t **out_backend) {
  *out_backend = ty_registry_lookup(r, name);
  if (*out_backend) return TY_OK;
  for (size_t i = 0; i < r->rejected_count; ++i) {
    const ty_rejected_candidate_t *c = &r->rejected[i];
    if (c->name[0] && strcmp(c->name, name) == 0 && c->kind != TY_REJECT_SHADOWED) {
      return ty_status_make(
          c->kind == TY_REJECT_UNAVAILABLE ? TY_CODE_UNAVAILABLE
                                           : TY_CODE_FAILED_PRECONDITION,
          "backend '%s' was found at %s but rejected: %s", name, c->path,
          c->reason);
    }
  }
  char loaded[512] = "";
  size_t used = 0;
  for (size_t i = 0; i < r->backend_count && used < sizeof(loaded); ++i) {
    int n = snprintf(loaded + used, sizeof(loaded) - used, "%s%s",
                     i ? ", " : "", r->backends[i]->name);
    if (n < 0) break;
    used += (size_t)n;
  }
  return ty_status_make(TY_CODE_NOT_FOUND,
                        "no backend named '%s' (loaded: %s); run 'trainyard "
                        "devices' to see every plugin found and why any was "
                        "rejected",
                        name, r->backend_count ? loaded : "none");
}

const char *ty_backend_name(const ty_backend_t *b) { return b->name; }
const char *ty_backend_version(const ty_backend_t *b) { return b->api->version; }
const char *ty_backend_path(const ty_backend_t *b) { return b->path; }

void ty_backend_abi_version(const ty_backend_t *b, uint32_t *out_major,
                            uint32_t *out_minor) {
  *out_major = b->api->abi_major;
  *out_minor = b->api->abi_minor;
}

const ty_backend_api_t *ty_backend_api(const ty_backend_t *b) { return b->api; }
ty_abi_backend_t *ty_backend_instance(const ty_backend_t *b) { return b->instance; }

const char *ty_backend_identity(const ty_backend_t *b) { return b->identity; }

size_t ty_backend_warning_count(const ty_backend_t *b) { return b->warning_count; }

const char *ty_backend_warning_at(const ty_backend_t *b, size_t i) {
  return i < b->warning_count ? b->warnings[i] : NULL;
}

bool ty_backend_has_entry(const ty_backend_t *b, size_t offset) {
  return ty_backend_api_has_entry(b->api, offset);
}

bool ty_backend_has_collectives(const ty_backend_t *b) {
  static const size_t entries[] = {
      offsetof(ty_backend_api_t, comm_unique_id),      offsetof(ty_backend_api_t, comm_create),
      offsetof(ty_backend_api_t, comm_destroy),        offsetof(ty_backend_api_t, comm_all_reduce),
      offsetof(ty_backend_api_t, comm_reduce_scatter), offsetof(ty_backend_api_t, comm_all_gather),
      offsetof(ty_backend_api_t, comm_broadcast)};
  for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); ++i) {
    if (!ty_backend_api_has_entry(b->api, entries[i])) return false;
  }
  return true;
}

bool ty_backend_has_p2p(const ty_backend_t *b) {
  if (!ty_backend_has_collectives(b)) return false;
  if (b->api->abi_major != TY_ABI_MAJOR || b->api->abi_minor < 8) return false;
  return ty_backend_api_has_entry(b->api, offsetof(ty_backend_api_t, comm_send)) &&
         ty_backend_api_has_entry(b->api, offsetof(ty_backend_api_t, comm_recv));
}

ty_status_t ty_backend_device_count(ty_backend_t *b, uint32_t *out_count) {
  *out_count = 0;
  ty_status_t s = ty_status_from_plugin(b->name, b->api->device_count(b->instance, out_count));
  return ty_status_annotate(s, "backend '%s': device_count", b->name);
}

ty_status_t ty_backend_device_info(ty_backend_t *b, uint32_t index,
                                   ty_abi_device_info_t *out_info) {
  memset(out_info, 0, sizeof(*out_info));
  out_info->struct_size = sizeof(*out_info);
  uint32_t count = 0;
  TY_RETURN_IF_ERROR(ty_backend_device_count(b, &count));
  if (index >= count) {
    return ty_status_make(TY_CODE_NOT_FOUND,
                          "backend '%s' has %u device(s); index %u is out of "
                          "range",
                          b->name, count, index);
  }
  ty_status_t s =
      ty_status_from_plugin(b->name, b->api->device_info(b->instance, index, out_info));
  /* A plugin must not change struct_size; restore it and force NUL ends. */
  out_info->struct_size = sizeof(*out_info);
  out_info->name[sizeof(out_info->name) - 1] = '\0';
  out_info->vendor[sizeof(out_info->vendor) - 1] = '\0';
  out_info->driver_version[sizeof(out_info->driver_version) - 1] = '\0';
  out_info->api_version[sizeof(out_info->api_version) - 1] = '\0';
  out_info->extensions[sizeof(out_info->extensions) - 1] = '\0';
  return ty_status_annotate(s, "backend '%s': device_info(%u)", b->name, index);
}
