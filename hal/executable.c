/* Executables and executable caches over the plugin table's graph and
 * executable entries (see executable.h). */
#include "hal/executable.h"

#include <stdlib.h>
#include <string.h>

#include "hal/registry.h"

struct ty_executable_t {
  ty_device_t *device;   /* it runs on; closed only after the executable */
  ty_backend_t *backend; /* whose executable_destroy and friends apply */
  ty_abi_executable_t *handle;
};

typedef struct ty_executable_entry_t {
  char *key;
  ty_executable_t *executable;
  struct ty_executable_entry_t *next;
} ty_executable_entry_t;

struct ty_executable_cache_t {
  ty_device_t *device; /* every executable in the cache is of this device */
  ty_executable_entry_t *entries; /* newest first */
  size_t count;
};

static ty_status_t ty_executable_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for an executable");
}

ty_status_t ty_executable_graph_entries(const ty_device_t *device) {
  ty_backend_t *backend = ty_device_backend(device);
  if (!TY_BACKEND_ENTRY(backend, graph_supports) || !TY_BACKEND_ENTRY(backend, graph_compile) ||
      !TY_BACKEND_ENTRY(backend, executable_execute)) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' cannot run graphs (it lacks the ABI "
                          "1.1 graph entries)",
                          ty_backend_name(backend));
  }
  return TY_OK;
}

ty_status_t ty_executable_supports(ty_device_t *device, const ty_abi_graph_t *graph,
                                   ty_abi_node_support_t *out_support) {
  TY_RETURN_IF_ERROR(ty_executable_graph_entries(device));
  return ty_status_from_abi(ty_backend_api(ty_device_backend(device))
                                ->graph_supports(ty_device_handle(device), graph, out_support));
}

bool ty_executable_serializable(const ty_device_t *device) {
  ty_backend_t *backend = ty_device_backend(device);
  return TY_BACKEND_ENTRY(backend, executable_serialize) &&
         TY_BACKEND_ENTRY(backend, executable_deserialize);
}

/* Wraps a plugin executable (taking it: it is destroyed on error). */
static ty_status_t ty_executable_wrap(ty_device_t *device, ty_abi_executable_t *handle,
                                      ty_executable_t **out) {
  ty_backend_t *backend = ty_device_backend(device);
  ty_executable_t *e = calloc(1, sizeof(*e));
  if (!e) {
    void (*destroy)(ty_abi_executable_t *) = TY_BACKEND_ENTRY(backend, executable_destroy);
    if (destroy && handle) destroy(handle);
    return ty_executable_oom();
  }
  e->device = device;
  e->backend = backend;
  e->handle = handle;
  *out = e;
  return TY_OK;
}

ty_status_t ty_executable_compile(ty_device_t *device, const ty_abi_graph_t *graph,
                                  uint32_t option_count, const ty_abi_option_t *options,
                                  ty_executable_t **out_executable) {
  *out_executable = NULL;
  ty_backend_t *backend = ty_device_backend(device);
  ty_abi_status_t (*compile)(ty_abi_device_t *, const ty_abi_compile_args_t *,
                             ty_abi_executable_t **) = TY_BACKEND_ENTRY(backend, graph_compile);
  if (!compile) return ty_executable_graph_entries(device);
  ty_abi_compile_args_t args = {
      .struct_size = sizeof(args),
      .graph = graph,
      .option_count = option_count,
      .options = options,
  };
  ty_abi_executable_t *handle = NULL;
  TY_RETURN_IF_ERROR(ty_status_from_plugin(ty_backend_name(backend),
                                           compile(ty_device_handle(device), &args, &handle)));
  return ty_executable_wrap(device, handle, out_executable);
}

ty_status_t ty_executable_deserialize(ty_device_t *device, const void *bytes, size_t size,
                                      const ty_abi_graph_t *expected,
                                      ty_executable_t **out_executable) {
  *out_executable = NULL;
  ty_backend_t *backend = ty_device_backend(device);
  ty_abi_status_t (*load)(ty_abi_device_t *, const ty_abi_deserialize_args_t *,
                          ty_abi_executable_t **) =
      TY_BACKEND_ENTRY(backend, executable_deserialize);
  if (!load) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' cannot load artifacts (it has no ABI 1.2 "
                          "executable_deserialize)",
                          ty_backend_name(backend));
  }
  ty_abi_deserialize_args_t args = {
      .struct_size = sizeof(args), .bytes = bytes, .size = size, .expected = expected};
  ty_abi_executable_t *handle = NULL;
  TY_RETURN_IF_ERROR(ty_status_from_abi(load(ty_device_handle(device), &args, &handle)));
  return ty_executable_wrap(device, handle, out_executable);
}

void ty_executable_destroy(ty_executable_t *e) {
  if (!e) return;
  void (*destroy)(ty_abi_executable_t *) = TY_BACKEND_ENTRY(e->backend, executable_destroy);
  if (destroy && e->handle) destroy(e->handle);
  free(e);
}

ty_abi_executable_t *ty_executable_handle(const ty_executable_t *e) { return e->handle; }

const ty_abi_graph_t *ty_executable_graph(const ty_executable_t *e) {
  const ty_abi_graph_t *(*graph_of)(ty_abi_executable_t *) =
      TY_BACKEND_ENTRY(e->backend, executable_graph);
  return graph_of ? graph_of(e->handle) : NULL;
}

ty_status_t ty_executable_check_binding(ty_executable_t *e,
                                        const ty_abi_binding_check_t *check) {
  ty_abi_status_t (*check_fn)(ty_abi_executable_t *, const ty_abi_binding_check_t *) =
      TY_BACKEND_ENTRY(e->backend, executable_check_binding);
  return check_fn ? ty_status_from_abi(check_fn(e->handle, check)) : TY_OK;
}

ty_status_t ty_executable_execute(ty_executable_t *e, const ty_abi_execute_args_t *args) {
  ty_abi_status_t (*execute)(ty_abi_executable_t *, const ty_abi_execute_args_t *) =
      TY_BACKEND_ENTRY(e->backend, executable_execute);
  if (!execute) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' cannot run graphs (it has no executable_execute)",
                          ty_backend_name(e->backend));
  }
  return ty_status_from_plugin(ty_backend_name(e->backend), execute(e->handle, args));
}

ty_status_t ty_executable_serialize(const ty_executable_t *e, void **out_bytes,
                                    size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  ty_abi_status_t (*serialize)(ty_abi_executable_t *, void *, uint64_t, uint64_t *) =
      TY_BACKEND_ENTRY(e->backend, executable_serialize);
  if (!serialize) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' cannot serialize executables (it has no ABI 1.2 "
                          "executable_serialize)",
                          ty_backend_name(e->backend));
  }
  uint64_t size = 0;
  TY_RETURN_IF_ERROR(ty_status_from_abi(serialize(e->handle, NULL, 0, &size)));
  void *bytes = malloc(size ? (size_t)size : 1);
  if (!bytes) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory serializing");
  uint64_t written = 0;
  ty_status_t s = ty_status_from_abi(serialize(e->handle, bytes, size, &written));
  if (!s && written != size) {
    s = ty_status_make(TY_CODE_INTERNAL, "backend '%s' serialized %llu bytes after announcing %llu",
                       ty_backend_name(e->backend), (unsigned long long)written,
                       (unsigned long long)size);
  }
  if (s) {
    free(bytes);
    return s;
  }
  *out_bytes = bytes;
  *out_size = (size_t)size;
  return TY_OK;
}

ty_status_t ty_executable_memory(const ty_executable_t *e, ty_abi_executable_memory_t *out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  ty_abi_status_t (*memory)(ty_abi_executable_t *, ty_abi_executable_memory_t *) =
      TY_BACKEND_ENTRY(e->backend, executable_memory);
  if (!memory) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' does not report an executable's memory (no ABI 1.3 "
                          "executable_memory)",
                          ty_backend_name(e->backend));
  }
  return ty_status_from_abi(memory(e->handle, out));
}

ty_status_t ty_executable_report(const ty_executable_t *e, char **out_text) {
  *out_text = NULL;
  ty_abi_status_t (*report)(ty_abi_executable_t *, char *, uint64_t, uint64_t *) =
      TY_BACKEND_ENTRY(e->backend, executable_report);
  if (!report) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "backend '%s' gives no executable report",
                          ty_backend_name(e->backend));
  }
  uint64_t size = 0;
  TY_RETURN_IF_ERROR(ty_status_from_abi(report(e->handle, NULL, 0, &size)));
  char *text = calloc(1, size + 1);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t written = 0;
  ty_status_t st = ty_status_from_abi(report(e->handle, text, size, &written));
  if (st) {
    free(text);
    return st;
  }
  text[size] = '\0';
  *out_text = text;
  return TY_OK;
}

ty_status_t ty_executable_cache_create(ty_device_t *device, ty_executable_cache_t **out_cache) {
  *out_cache = calloc(1, sizeof(**out_cache));
  if (!*out_cache) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for an executable cache");
  }
  (*out_cache)->device = device;
  return TY_OK;
}

void ty_executable_cache_destroy(ty_executable_cache_t *cache) {
  if (!cache) return;
  for (ty_executable_entry_t *e = cache->entries, *next; e; e = next) {
    next = e->next;
    ty_executable_destroy(e->executable);
    free(e->key);
    free(e);
  }
  free(cache);
}

ty_executable_t *ty_executable_cache_lookup(const ty_executable_cache_t *cache,
                                            const char *key) {
  for (ty_executable_entry_t *e = cache->entries; e; e = e->next) {
    if (strcmp(e->key, key) == 0) return e->executable;
  }
  return NULL;
}

ty_status_t ty_executable_cache_insert(ty_executable_cache_t *cache, const char *key,
                                       ty_executable_t *executable) {
  if (executable->device != cache->device) {
    /* A lookup would hand it to sessions of another device. */
    ty_status_t s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                   "an executable of %s cannot be stored in the executable cache "
                                   "of %s (compile it for that device)",
                                   ty_device_label(executable->device),
                                   ty_device_label(cache->device));
    ty_executable_destroy(executable);
    return s;
  }
  ty_executable_entry_t *entry = calloc(1, sizeof(*entry));
  char *copy = strdup(key);
  if (!entry || !copy) {
    free(entry);
    free(copy);
    ty_executable_destroy(executable);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  entry->key = copy;
  entry->executable = executable;
  entry->next = cache->entries;
  cache->entries = entry;
  cache->count++;
  return TY_OK;
}

size_t ty_executable_cache_count(const ty_executable_cache_t *cache) { return cache->count; }
