/* Sessions' executables: the device's executable cache (hal/executable.h)
 * in process, the on-disk cache (graph/runtime/compile_cache.h), artifacts,
 * serialization and reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/runtime/compile_cache.h"
#include "graph/runtime/session_internal.h"
#include "graph/runtime/support_report.h"
#include "hal/executable.h"

static ty_status_t ty_session_check_support(ty_device_t *device,
                                            const ty_abi_graph_t *graph) {
  ty_support_report_t *report = NULL;
  TY_RETURN_IF_ERROR(ty_support_report_create(device, graph, &report));
  ty_status_t s = ty_support_report_error(report, device);
  ty_support_report_destroy(report);
  return s;
}

static double ty_session_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *ty_session_source_name(ty_session_source_t source) {
  switch (source) {
    case TY_SESSION_COMPILED: return "compiled (no cache folder)";
    case TY_SESSION_MEMORY_HIT: return "hit (in-process cache)";
    case TY_SESSION_DISK_HIT: return "hit";
    case TY_SESSION_DISK_MISS: return "miss (compiled and stored)";
    case TY_SESSION_DISK_UNSERIALIZABLE:
      return "compiled (the backend cannot serialize executables; only failures are cached)";
    case TY_SESSION_ARTIFACT: return "loaded from an artifact";
    case TY_SESSION_FALLBACK: return "mixed (each segment compiled on its device)";
  }
  return "unknown";
}

/* key = graph hash | backend | backend version | plugin identity | device
 * URI | options. The identity (build-id or file hash) changes with every
 * rebuild of the plugin, so a rebuilt plugin never gets the executable or the
 * refusal of its previous build (authors rarely bump the version string
 * while writing kernels). The in-process cache is per device, so the URI
 * only matters on disk, where it names the target of a compile-then-run
 * device. */
static ty_status_t ty_session_cache_key(ty_device_t *device, const char *hash,
                                        const ty_session_options_t *options, bool with_uri,
                                        char **out_key) {
  ty_backend_t *backend = ty_device_backend(device);
  size_t key_len = 64 + strlen(ty_backend_name(backend)) + strlen(ty_backend_version(backend)) +
                   strlen(ty_backend_identity(backend)) + strlen(ty_device_uri(device)) + 16;
  uint32_t option_count = options ? options->option_count : 0;
  for (uint32_t i = 0; i < option_count; ++i) {
    key_len += strlen(options->options[i].key) + strlen(options->options[i].value) + 2;
  }
  char *key = malloc(key_len + 1);
  if (!key) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  int used = snprintf(key, key_len + 1, "%s|%s|%s|%s", hash, ty_backend_name(backend),
                      ty_backend_version(backend), ty_backend_identity(backend));
  if (with_uri) used += snprintf(key + used, key_len + 1 - (size_t)used, "|%s", ty_device_uri(device));
  for (uint32_t i = 0; i < option_count; ++i) {
    used += snprintf(key + used, key_len + 1 - (size_t)used, "|%s=%s",
                     options->options[i].key, options->options[i].value);
  }
  *out_key = key;
  return TY_OK;
}

/* Compile failures worth remembering: the same key fails the same way. */
static bool ty_session_failure_is_cacheable(ty_status_t s) {
  ty_code_t c = ty_status_code(s);
  return c == TY_CODE_FAILED_PRECONDITION || c == TY_CODE_INVALID_ARGUMENT ||
         c == TY_CODE_UNIMPLEMENTED;
}

static ty_status_t ty_session_compile_now(ty_device_t *device, const ty_abi_graph_t *graph,
                                          const ty_session_options_t *options,
                                          ty_executable_t **out) {
  ty_status_t s = ty_executable_compile(device, graph, options ? options->option_count : 0,
                                        options ? options->options : NULL, out);
  return s ? ty_status_annotate(s, "compiling graph %.12s for %s", graph->hash_hex,
                                ty_device_label(device))
           : TY_OK;
}

/* The on-disk cache around a compile: a stored failure, a stored executable,
 * or a compile whose result (executable or failure) is stored. */
static ty_status_t ty_session_compile_disk(ty_session_t *s, const ty_session_options_t *options,
                                           ty_executable_t **out) {
  ty_device_t *device = s->device;
  ty_backend_t *backend = ty_device_backend(device);
  const ty_abi_graph_t *graph = s->abi;
  char *key = NULL, *entry = NULL, *fail = NULL;
  ty_status_t st = ty_session_cache_key(device, s->hash, options, true, &key);
  if (!st) {
    st = ty_compile_cache_path(options->cache_dir, ty_backend_name(backend), key, ".art", &entry);
  }
  if (!st) {
    st = ty_compile_cache_path(options->cache_dir, ty_backend_name(backend), key, ".fail", &fail);
  }
  bool serializable = ty_executable_serializable(device);
  if (!st && !options->retry_failed) st = ty_compile_cache_read_failure(fail);
  if (!st && options->retry_failed) remove(fail);
  bool done = false;
  if (!st && serializable) {
    char *bytes = NULL;
    size_t size = 0;
    ty_status_t r = ty_file_read(entry, &ty_artifact_file_kind, &bytes, &size);
    if (!r) {
      r = ty_executable_deserialize(device, bytes, size, graph, out);
      /* A corrupt or stale entry is a miss: compile and replace it. */
      done = !r;
    }
    ty_status_free(r);
    free(bytes);
    if (done) s->stats.source = TY_SESSION_DISK_HIT;
  }
  if (!st && !done) {
    st = ty_session_check_support(device, graph);
    if (!st) st = ty_session_compile_now(device, graph, options, out);
    if (st && ty_session_failure_is_cacheable(st)) ty_compile_cache_write_failure(fail, key, st);
    if (!st && serializable) {
      void *bytes = NULL;
      size_t size = 0;
      st = ty_executable_serialize(*out, &bytes, &size);
      if (!st) st = ty_file_write_atomic(entry, bytes, size);
      free(bytes);
      if (st) {
        st = ty_status_annotate(st, "storing the compiled graph in the cache %s (pass "
                                    "--cache-dir '' to run without a cache)",
                                options->cache_dir);
        ty_executable_destroy(*out);
        *out = NULL;
      }
    }
    if (!st) s->stats.source = serializable ? TY_SESSION_DISK_MISS : TY_SESSION_DISK_UNSERIALIZABLE;
  }
  if (!st) {
    s->cache_entry = serializable ? entry : NULL;
    if (serializable) entry = NULL;
  }
  free(key);
  free(entry);
  free(fail);
  return st;
}

static ty_status_t ty_session_compile_with(ty_session_t *s, const ty_session_options_t *options);

/* The options with the host's requests the session asked for appended:
 * "debug.guards=<seed>" for plugins of ABI >= 1.9, which ignore debug keys
 * they do not know (older plugins refuse every unknown key, so they get
 * none), and "deterministic=1" (ABI >= 1.10, which a plugin honours or
 * refuses; an older plugin never promised batch-invariant kernels, so the
 * session is refused here). `eff` points into `storage` and `seed_text`. */
static ty_status_t ty_session_host_options(const ty_device_t *device,
                                          const ty_session_options_t *options,
                                          ty_session_options_t *eff,
                                          ty_abi_option_t **storage, char *seed_text,
                                          size_t seed_capacity) {
  *storage = NULL;
  if (!options) return TY_OK;
  *eff = *options;
  ty_backend_t *backend = ty_device_backend(device);
  uint32_t abi_major = 0, abi_minor = 0;
  ty_backend_abi_version(backend, &abi_major, &abi_minor);
  const bool guards = options->debug_guards && abi_minor >= 9;
  if (options->deterministic && abi_minor < 10) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "backend '%s' (plugin ABI %u.%u) makes no promise of batch-invariant "
                          "kernels: --deterministic needs a plugin of ABI 1.10 or newer that "
                          "honours the compile option 'deterministic' (docs/plugin-abi.md)",
                          ty_backend_name(backend), abi_major, abi_minor);
  }
  if (!guards && !options->deterministic) return TY_OK;
  *storage = calloc(options->option_count + 2, sizeof(**storage));
  if (!*storage) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  uint32_t n = 0;
  for (uint32_t i = 0; i < options->option_count; ++i) (*storage)[n++] = options->options[i];
  if (guards) {
    snprintf(seed_text, seed_capacity, "%llu", (unsigned long long)options->guard_seed);
    (*storage)[n++] = (ty_abi_option_t){.key = "debug.guards", .value = seed_text};
  }
  if (options->deterministic) {
    (*storage)[n++] = (ty_abi_option_t){.key = TY_ABI_DETERMINISTIC_OPTION, .value = "1"};
  }
  eff->options = *storage;
  eff->option_count = n;
  return TY_OK;
}

ty_status_t ty_session_compile(ty_session_t *s, const ty_session_options_t *options) {
  ty_session_options_t eff;
  ty_abi_option_t *storage = NULL;
  char seed_text[24];
  TY_RETURN_IF_ERROR(ty_session_host_options(s->device, options, &eff, &storage, seed_text,
                                              sizeof(seed_text)));
  ty_status_t st = ty_session_compile_with(s, options ? &eff : NULL);
  free(storage);
  return st;
}

static ty_status_t ty_session_compile_with(ty_session_t *s, const ty_session_options_t *options) {
  ty_device_t *device = s->device;
  ty_executable_cache_t *cache;
  TY_RETURN_IF_ERROR(ty_device_executable_cache(device, &cache));
  char *key = NULL;
  TY_RETURN_IF_ERROR(ty_session_cache_key(device, s->hash, options, false, &key));
  ty_executable_t *hit = ty_executable_cache_lookup(cache, key);
  if (hit) {
    free(key);
    s->executable = hit;
    s->stats.cache_hit = true;
    s->stats.source = TY_SESSION_MEMORY_HIT;
    return TY_OK;
  }
  double start = ty_session_now();
  ty_executable_t *executable = NULL;
  ty_status_t st;
  if (options && options->cache_dir && options->cache_dir[0]) {
    st = ty_session_compile_disk(s, options, &executable);
  } else {
    st = ty_session_check_support(device, s->abi);
    if (!st) st = ty_session_compile_now(device, s->abi, options, &executable);
    s->stats.source = TY_SESSION_COMPILED;
  }
  s->stats.compile_seconds = ty_session_now() - start;
  if (!st) st = ty_executable_cache_insert(cache, key, executable);
  free(key);
  if (st) return st;
  s->executable = executable;
  return TY_OK;
}

ty_status_t ty_session_create_from_artifact(ty_device_t *device, const ty_graph_t *graph,
                                            const char *path,
                                            const ty_session_options_t *options,
                                            ty_session_t **out_session) {
  *out_session = NULL;
  ty_session_t *s = NULL;
  TY_RETURN_IF_ERROR(ty_session_new(device, options, &s));
  ty_backend_t *backend = ty_device_backend(device);
  char *bytes = NULL;
  size_t size = 0;
  ty_executable_t *executable = NULL;
  ty_executable_cache_t *cache = NULL;
  double start = ty_session_now();
  ty_status_t st = graph ? ty_graph_lower(graph, &s->lowered) : TY_OK;
  if (!st) st = ty_device_executable_cache(device, &cache);
  if (!st) st = ty_file_read(path, &ty_artifact_file_kind, &bytes, &size);
  if (!st) {
    st = ty_executable_deserialize(device, bytes, size,
                                   s->lowered ? ty_lowered_graph_abi(s->lowered) : NULL,
                                   &executable);
  }
  free(bytes);
  if (!st && s->lowered) {
    ty_session_set_graph(s, ty_lowered_graph_abi(s->lowered));
  } else if (!st) {
    const ty_abi_graph_t *abi = ty_executable_graph(executable);
    if (!abi) {
      st = ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' does not describe the graph of a loaded artifact; "
                          "create the session with the graph it was compiled from",
                          ty_backend_name(backend));
      ty_executable_destroy(executable);
    } else {
      ty_session_set_graph(s, abi);
    }
  }
  if (!st) {
    /* The device's cache owns loaded executables too (under a key no
     * compile looks up), so they live until the device closes. */
    size_t cap = strlen(path) + 96;
    char *key = malloc(cap);
    if (key) snprintf(key, cap, "artifact|%s|%s", s->hash, path);
    st = key ? ty_executable_cache_insert(cache, key, executable)
             : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    if (!key) ty_executable_destroy(executable);
    free(key);
  }
  if (!st) {
    s->executable = executable;
    s->stats.source = TY_SESSION_ARTIFACT;
    s->stats.compile_seconds = ty_session_now() - start;
    s->cache_entry = strdup(path);
    st = ty_session_finish(s, options);
  }
  if (st) {
    ty_session_destroy(s);
    return ty_status_annotate(st, "loading artifact %s on %s", path, ty_device_label(device));
  }
  *out_session = s;
  return TY_OK;
}

ty_status_t ty_session_serialize(const ty_session_t *s, void **out_bytes, size_t *out_size) {
  if (s->fallback) TY_RETURN_IF_ERROR(ty_session_usable(s));
  return ty_executable_serialize(s->executable, out_bytes, out_size);
}

ty_status_t ty_session_executable_memory(const ty_session_t *s,
                                         ty_abi_executable_memory_t *out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  if (s->fallback) TY_RETURN_IF_ERROR(ty_session_usable(s));
  return ty_executable_memory(s->executable, out);
}

ty_status_t ty_session_report(const ty_session_t *s, char **out_text) {
  *out_text = NULL;
  if (s->fallback) TY_RETURN_IF_ERROR(ty_session_usable(s));
  return ty_executable_report(s->executable, out_text);
}
