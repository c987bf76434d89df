/* Sessions: lowering, support check, compile cache, device-resident state,
 * named bindings and transfer accounting. */
#include "graph/session.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/compile_cache.h"
#include "graph/lower.h"
#include "hal/buffer.h"
#include "hal/dtype.h"

/* ---- the per-device compile cache ---- */

#define TY_COMPILE_CACHE_KEY "trainyard.compile_cache"

typedef struct ty_cache_entry_t {
  char *key;
  ty_abi_executable_t *executable;
  struct ty_cache_entry_t *next;
} ty_cache_entry_t;

typedef struct ty_compile_cache_t {
  ty_backend_t *backend;
  ty_cache_entry_t *entries;
} ty_compile_cache_t;

static void ty_compile_cache_destroy(void *object) {
  ty_compile_cache_t *cache = object;
  void (*destroy)(ty_abi_executable_t *) =
      TY_BACKEND_ENTRY(cache->backend, executable_destroy);
  for (ty_cache_entry_t *e = cache->entries, *next; e; e = next) {
    next = e->next;
    if (destroy) destroy(e->executable);
    free(e->key);
    free(e);
  }
  free(cache);
}

static ty_status_t ty_compile_cache_get(ty_device_t *device,
                                        ty_compile_cache_t **out) {
  *out = ty_device_attachment(device, TY_COMPILE_CACHE_KEY);
  if (*out) return TY_OK;
  ty_compile_cache_t *cache = calloc(1, sizeof(*cache));
  if (!cache) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a compile cache");
  }
  cache->backend = ty_device_backend(device);
  ty_status_t s = ty_device_attach(device, TY_COMPILE_CACHE_KEY, cache,
                                   ty_compile_cache_destroy);
  if (s) {
    free(cache);
    return s;
  }
  *out = cache;
  return TY_OK;
}

/* ---- sessions ---- */

/* A device buffer that several sessions' state slots may share. */
typedef struct ty_shared_buffer_t {
  ty_buffer_t *buffer;
  uint32_t refs;
} ty_shared_buffer_t;

static void ty_shared_buffer_release(ty_shared_buffer_t *b) {
  if (b && --b->refs == 0) {
    ty_buffer_free(b->buffer);
    free(b);
  }
}

typedef struct ty_session_slot_t {
  const char *name; /* points into the lowered graph */
  ty_tensor_desc_t desc;
  ty_value_role_t role;
  uint32_t flags;
  uint64_t bytes;
  ty_shared_buffer_t *storage;
  ty_buffer_t *buffer; /* == storage->buffer */
  bool bound;
  uint64_t input_hash; /* FNV-1a of the bound bytes (with guards only) */
} ty_session_slot_t;

struct ty_session_t {
  ty_device_t *device;
  ty_lowered_graph_t *lowered;     /* NULL for a session made from an artifact alone */
  const ty_abi_graph_t *abi;       /* lowered's, or the executable's own */
  char hash[65];
  ty_abi_executable_t *executable; /* owned by the device's compile cache */
  char *cache_entry;
  bool compile_only;
  ty_session_slot_t *slots;
  uint32_t slot_count;
  ty_abi_binding_t *bindings;
  ty_session_stats_t stats;
  uint64_t guard; /* bytes of guard before and after every tensor */
};

/* ---- guard regions ---- */

/* The sentinel byte at position i of a guard: not a constant, so a shifted
 * or partial copy over it is still caught. */
static unsigned char ty_guard_byte(uint64_t i) {
  return (unsigned char)(0xA7u + 61u * (unsigned)(i & 0xFFu));
}

static uint64_t ty_fnv1a(const void *data, size_t bytes) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* Fills a slot's whole buffer: guards with the sentinel, the tensor with
 * 0xFF (inputs and states are written over by bind). */
static ty_status_t ty_session_fill_guards(ty_session_t *s, ty_session_slot_t *slot) {
  uint64_t total = slot->bytes + 2 * s->guard;
  unsigned char *fill = malloc((size_t)total);
  if (!fill) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for guards");
  for (uint64_t i = 0; i < s->guard; ++i) {
    fill[i] = ty_guard_byte(i);
    fill[s->guard + slot->bytes + i] = ty_guard_byte(i);
  }
  memset(fill + s->guard, 0xFF, (size_t)slot->bytes);
  ty_status_t st = ty_buffer_write(slot->buffer, 0, fill, total);
  free(fill);
  return st;
}

static ty_status_t ty_session_check_support(ty_device_t *device,
                                            const ty_abi_graph_t *graph) {
  ty_backend_t *backend = ty_device_backend(device);
  ty_abi_status_t (*supports)(ty_abi_device_t *, const ty_abi_graph_t *,
                              ty_abi_node_support_t *) =
      TY_BACKEND_ENTRY(backend, graph_supports);
  if (!supports || !TY_BACKEND_ENTRY(backend, graph_compile) ||
      !TY_BACKEND_ENTRY(backend, executable_execute)) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' cannot run graphs (it lacks the ABI "
                          "1.1 graph entries)",
                          ty_backend_name(backend));
  }
  ty_abi_node_support_t *report =
      calloc(graph->node_count ? graph->node_count : 1, sizeof(*report));
  if (!report) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory checking support");
  }
  ty_status_t s = ty_status_from_abi(supports(ty_device_handle(device), graph, report));
  for (uint32_t n = 0; n < graph->node_count && !s; ++n) {
    if (report[n].supported) continue;
    const ty_abi_node_t *node = &graph->nodes[n];
    /* Name the dtype of the node's first float input (or output). */
    ty_dtype_t dtype = TY_DTYPE_INVALID;
    for (uint32_t i = 0; i < node->input_count && dtype == TY_DTYPE_INVALID; ++i) {
      if (node->inputs[i] != UINT32_MAX) dtype = graph->values[node->inputs[i]].dtype;
    }
    if (dtype == TY_DTYPE_INVALID && node->output_count) {
      dtype = graph->values[node->outputs[0]].dtype;
    }
    report[n].reason[sizeof(report[n].reason) - 1] = '\0';
    s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                       "%s does not support op %s (%s)%s%s; run 'trainyard "
                       "conform --backend %s' for the full list",
                       ty_device_label(device), node->op, ty_dtype_name(dtype),
                       report[n].reason[0] ? ": " : "", report[n].reason,
                       ty_device_uri(device));
  }
  free(report);
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
  }
  return "unknown";
}

/* key = graph hash | backend | backend version | device URI | options. The
 * in-process cache is per device, so the URI only matters on disk, where it
 * names the target of a compile-then-run device. */
static ty_status_t ty_session_cache_key(ty_device_t *device, const char *hash,
                                        const ty_session_options_t *options, bool with_uri,
                                        char **out_key) {
  ty_backend_t *backend = ty_device_backend(device);
  size_t key_len = 64 + strlen(ty_backend_name(backend)) + strlen(ty_backend_version(backend)) +
                   strlen(ty_device_uri(device)) + 16;
  uint32_t option_count = options ? options->option_count : 0;
  for (uint32_t i = 0; i < option_count; ++i) {
    key_len += strlen(options->options[i].key) + strlen(options->options[i].value) + 2;
  }
  char *key = malloc(key_len + 1);
  if (!key) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  int used = snprintf(key, key_len + 1, "%s|%s|%s", hash, ty_backend_name(backend),
                      ty_backend_version(backend));
  if (with_uri) used += snprintf(key + used, key_len + 1 - (size_t)used, "|%s", ty_device_uri(device));
  for (uint32_t i = 0; i < option_count; ++i) {
    used += snprintf(key + used, key_len + 1 - (size_t)used, "|%s=%s",
                     options->options[i].key, options->options[i].value);
  }
  *out_key = key;
  return TY_OK;
}

static void ty_session_destroy_executable(ty_backend_t *backend, ty_abi_executable_t *e) {
  void (*destroy)(ty_abi_executable_t *) = TY_BACKEND_ENTRY(backend, executable_destroy);
  if (destroy && e) destroy(e);
}

/* Hands `executable` to the device's cache under `key` (taking both). */
static ty_status_t ty_compile_cache_add(ty_compile_cache_t *cache, char *key,
                                        ty_abi_executable_t *executable) {
  ty_cache_entry_t *entry = calloc(1, sizeof(*entry));
  if (!entry) {
    ty_session_destroy_executable(cache->backend, executable);
    free(key);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  entry->key = key;
  entry->executable = executable;
  entry->next = cache->entries;
  cache->entries = entry;
  return TY_OK;
}

/* Deserializes `bytes` for `device` (checked against `expected` if given). */
static ty_status_t ty_session_deserialize(ty_device_t *device, const void *bytes, size_t size,
                                          const ty_abi_graph_t *expected,
                                          ty_abi_executable_t **out) {
  *out = NULL;
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
  return ty_status_from_abi(load(ty_device_handle(device), &args, out));
}

/* The executable's artifact bytes (malloc'ed). */
static ty_status_t ty_session_serialize_executable(ty_backend_t *backend,
                                                   ty_abi_executable_t *executable,
                                                   void **out_bytes, size_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  ty_abi_status_t (*serialize)(ty_abi_executable_t *, void *, uint64_t, uint64_t *) =
      TY_BACKEND_ENTRY(backend, executable_serialize);
  if (!serialize) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' cannot serialize executables (it has no ABI 1.2 "
                          "executable_serialize)",
                          ty_backend_name(backend));
  }
  uint64_t size = 0;
  TY_RETURN_IF_ERROR(ty_status_from_abi(serialize(executable, NULL, 0, &size)));
  void *bytes = malloc(size ? (size_t)size : 1);
  if (!bytes) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory serializing");
  uint64_t written = 0;
  ty_status_t s = ty_status_from_abi(serialize(executable, bytes, size, &written));
  if (!s && written != size) {
    s = ty_status_make(TY_CODE_INTERNAL, "backend '%s' serialized %llu bytes after announcing %llu",
                       ty_backend_name(backend), (unsigned long long)written,
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

/* Compile failures worth remembering: the same key fails the same way. */
static bool ty_session_failure_is_cacheable(ty_status_t s) {
  ty_code_t c = ty_status_code(s);
  return c == TY_CODE_FAILED_PRECONDITION || c == TY_CODE_INVALID_ARGUMENT ||
         c == TY_CODE_UNIMPLEMENTED;
}

static ty_status_t ty_session_compile_now(ty_device_t *device, const ty_abi_graph_t *graph,
                                          const ty_session_options_t *options,
                                          ty_abi_executable_t **out) {
  ty_backend_t *backend = ty_device_backend(device);
  ty_abi_compile_args_t args = {
      .struct_size = sizeof(args),
      .graph = graph,
      .option_count = options ? options->option_count : 0,
      .options = options ? options->options : NULL,
  };
  ty_abi_status_t (*compile)(ty_abi_device_t *, const ty_abi_compile_args_t *,
                             ty_abi_executable_t **) =
      TY_BACKEND_ENTRY(backend, graph_compile);
  ty_status_t s = ty_status_from_abi(compile(ty_device_handle(device), &args, out));
  return s ? ty_status_annotate(s, "compiling graph %.12s for %s", graph->hash_hex,
                                ty_device_label(device))
           : TY_OK;
}

/* The on-disk cache around a compile: a stored failure, a stored executable,
 * or a compile whose result (executable or failure) is stored. */
static ty_status_t ty_session_compile_disk(ty_session_t *s, const ty_session_options_t *options,
                                           ty_abi_executable_t **out) {
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
  bool serializable = TY_BACKEND_ENTRY(backend, executable_serialize) &&
                      TY_BACKEND_ENTRY(backend, executable_deserialize);
  if (!st && !options->retry_failed) st = ty_compile_cache_read_failure(fail);
  if (!st && options->retry_failed) remove(fail);
  bool done = false;
  if (!st && serializable) {
    char *bytes = NULL;
    size_t size = 0;
    ty_status_t r = ty_file_read(entry, &ty_artifact_file_kind, &bytes, &size);
    if (!r) {
      r = ty_session_deserialize(device, bytes, size, graph, out);
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
      st = ty_session_serialize_executable(backend, *out, &bytes, &size);
      if (!st) st = ty_file_write_atomic(entry, bytes, size);
      free(bytes);
      if (st) {
        st = ty_status_annotate(st, "storing the compiled graph in the cache %s (pass "
                                    "--cache-dir '' to run without a cache)",
                                options->cache_dir);
        ty_session_destroy_executable(backend, *out);
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

static ty_status_t ty_session_compile(ty_session_t *s, const ty_session_options_t *options) {
  ty_device_t *device = s->device;
  ty_compile_cache_t *cache;
  TY_RETURN_IF_ERROR(ty_compile_cache_get(device, &cache));
  char *key = NULL;
  TY_RETURN_IF_ERROR(ty_session_cache_key(device, s->hash, options, false, &key));
  for (ty_cache_entry_t *e = cache->entries; e; e = e->next) {
    if (strcmp(e->key, key) == 0) {
      free(key);
      s->executable = e->executable;
      s->stats.cache_hit = true;
      s->stats.source = TY_SESSION_MEMORY_HIT;
      return TY_OK;
    }
  }
  double start = ty_session_now();
  ty_abi_executable_t *executable = NULL;
  ty_status_t st;
  if (options && options->cache_dir && options->cache_dir[0]) {
    st = ty_session_compile_disk(s, options, &executable);
  } else {
    st = ty_session_check_support(device, s->abi);
    if (!st) st = ty_session_compile_now(device, s->abi, options, &executable);
    s->stats.source = TY_SESSION_COMPILED;
  }
  s->stats.compile_seconds = ty_session_now() - start;
  if (st) {
    free(key);
    return st;
  }
  TY_RETURN_IF_ERROR(ty_compile_cache_add(cache, key, executable));
  s->executable = executable;
  return TY_OK;
}

/* The other session's state slot matching `slot` (name, dtype, shape). */
static ty_session_slot_t *ty_session_shared_slot(const ty_session_t *other,
                                                 const ty_session_slot_t *slot) {
  if (!other) return NULL;
  for (uint32_t i = 0; i < other->slot_count; ++i) {
    ty_session_slot_t *o = &other->slots[i];
    if (o->role == TY_VALUE_STATE && strcmp(o->name, slot->name) == 0 &&
        o->desc.dtype == slot->desc.dtype && o->desc.rank == slot->desc.rank &&
        memcmp(o->desc.dims, slot->desc.dims, slot->desc.rank * sizeof(int64_t)) == 0) {
      return o;
    }
  }
  return NULL;
}

static ty_status_t ty_session_add_slots(ty_session_t *s, const ty_session_t *share) {
  const ty_abi_graph_t *g = s->abi;
  s->slots = calloc(g->value_count ? g->value_count : 1, sizeof(*s->slots));
  s->bindings = calloc(g->value_count ? g->value_count : 1, sizeof(*s->bindings));
  if (!s->slots || !s->bindings) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory creating a session");
  }
  for (uint32_t i = 0; i < g->value_count; ++i) {
    const ty_abi_value_t *v = &g->values[i];
    if (v->role != TY_VALUE_INPUT && v->role != TY_VALUE_STATE &&
        !(v->flags & TY_VALUE_FLAG_OUTPUT)) {
      continue;
    }
    ty_session_slot_t *slot = &s->slots[s->slot_count];
    TY_RETURN_IF_ERROR(ty_tensor_desc_init(v->dtype, v->rank, v->dims, v->name, &slot->desc));
    slot->name = v->name;
    slot->role = v->role;
    slot->flags = v->flags;
    slot->bytes = (uint64_t)ty_tensor_desc_element_count(&slot->desc) * ty_dtype_size(v->dtype);
    ty_session_slot_t *shared =
        v->role == TY_VALUE_STATE ? ty_session_shared_slot(share, slot) : NULL;
    if (shared) {
      slot->storage = shared->storage;
      slot->storage->refs++;
      slot->buffer = slot->storage->buffer;
      slot->bound = shared->bound;
      s->bindings[s->slot_count] = (ty_abi_binding_t){.name = v->name, .offset = s->guard};
      s->slot_count++;
      continue; /* already initialized by its owner */
    }
    slot->storage = calloc(1, sizeof(*slot->storage));
    if (!slot->storage) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    slot->storage->refs = 1;
    s->bindings[s->slot_count] = (ty_abi_binding_t){.name = v->name, .offset = s->guard};
    s->slot_count++; /* counted now so that destroy releases it on error */
    /* Offloaded state (TY_VALUE_FLAG_HOST_RESIDENT) goes to pinned host
     * memory; the plugin accepted the flag at compile. */
    uint32_t alloc_flags = (v->flags & TY_VALUE_FLAG_HOST_RESIDENT) ? TY_ABI_BUFFER_HOST : 0;
    TY_RETURN_IF_ERROR(ty_buffer_alloc_flags(s->device, slot->bytes + 2 * s->guard, alloc_flags,
                                             &slot->storage->buffer));
    slot->buffer = slot->storage->buffer;
    if (s->guard) TY_RETURN_IF_ERROR(ty_session_fill_guards(s, slot));
    if (v->role == TY_VALUE_STATE && slot->bytes) {
      /* States start as zeros (optimizer moments); weights are bound. */
      void *zeros = calloc(1, (size_t)slot->bytes);
      if (!zeros) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      ty_status_t st = ty_buffer_write(slot->buffer, s->guard, zeros, slot->bytes);
      free(zeros);
      TY_RETURN_IF_ERROR(st);
      s->stats.host_to_device_count++;
      s->stats.host_to_device_bytes += slot->bytes;
    }
  }
  return TY_OK;
}

/* What every create does after it has an executable. */
static ty_status_t ty_session_finish(ty_session_t *s, const ty_session_options_t *options) {
  ty_device_t *device = s->device;
  if (options && options->share_state_with && options->share_state_with->device != device) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sessions can share state only on one device (%s vs %s)",
                          ty_device_label(device),
                          ty_device_label(options->share_state_with->device));
  }
  if (options && options->share_state_with && options->share_state_with->guard != s->guard) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sessions that share state need the same guard_bytes (%llu vs %llu)",
                          (unsigned long long)s->guard,
                          (unsigned long long)options->share_state_with->guard);
  }
  if (s->compile_only) return TY_OK;
  return ty_session_add_slots(s, options ? options->share_state_with : NULL);
}

static ty_status_t ty_session_new(ty_device_t *device, const ty_session_options_t *options,
                                  ty_session_t **out) {
  *out = calloc(1, sizeof(**out));
  if (!*out) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory creating a session");
  (*out)->device = device;
  (*out)->guard = options ? options->guard_bytes : 0;
  (*out)->compile_only = options && options->compile_only;
  return TY_OK;
}

static void ty_session_set_graph(ty_session_t *s, const ty_abi_graph_t *abi) {
  s->abi = abi;
  snprintf(s->hash, sizeof(s->hash), "%s", abi->hash_hex ? abi->hash_hex : "");
}

ty_status_t ty_session_create(ty_device_t *device, const ty_graph_t *graph,
                              const ty_session_options_t *options,
                              ty_session_t **out_session) {
  *out_session = NULL;
  ty_session_t *s = NULL;
  TY_RETURN_IF_ERROR(ty_session_new(device, options, &s));
  ty_status_t st = ty_graph_lower(graph, &s->lowered);
  if (!st) {
    ty_session_set_graph(s, ty_lowered_graph_abi(s->lowered));
    st = ty_session_compile(s, options);
  }
  if (!st) st = ty_session_finish(s, options);
  if (st) {
    ty_session_destroy(s);
    return st;
  }
  *out_session = s;
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
  ty_abi_executable_t *executable = NULL;
  ty_compile_cache_t *cache = NULL;
  double start = ty_session_now();
  ty_status_t st = graph ? ty_graph_lower(graph, &s->lowered) : TY_OK;
  if (!st) st = ty_compile_cache_get(device, &cache);
  if (!st) st = ty_file_read(path, &ty_artifact_file_kind, &bytes, &size);
  if (!st) {
    st = ty_session_deserialize(device, bytes, size,
                                s->lowered ? ty_lowered_graph_abi(s->lowered) : NULL, &executable);
  }
  free(bytes);
  if (!st && s->lowered) {
    ty_session_set_graph(s, ty_lowered_graph_abi(s->lowered));
  } else if (!st) {
    const ty_abi_graph_t *(*graph_of)(ty_abi_executable_t *) =
        TY_BACKEND_ENTRY(backend, executable_graph);
    const ty_abi_graph_t *abi = graph_of ? graph_of(executable) : NULL;
    if (!abi) {
      st = ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' does not describe the graph of a loaded artifact; "
                          "create the session with the graph it was compiled from",
                          ty_backend_name(backend));
      ty_session_destroy_executable(backend, executable);
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
    st = key ? ty_compile_cache_add(cache, key, executable)
             : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    if (!key) ty_session_destroy_executable(backend, executable);
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

void ty_session_destroy(ty_session_t *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->slot_count; ++i) ty_shared_buffer_release(s->slots[i].storage);
  free(s->slots);
  free(s->bindings);
  ty_lowered_graph_destroy(s->lowered);
  free(s->cache_entry);
  free(s);
}

ty_status_t ty_session_serialize(const ty_session_t *s, void **out_bytes, size_t *out_size) {
  return ty_session_serialize_executable(ty_device_backend(s->device), s->executable, out_bytes,
                                         out_size);
}

ty_status_t ty_session_executable_memory(const ty_session_t *s,
                                         ty_abi_executable_memory_t *out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  ty_backend_t *backend = ty_device_backend(s->device);
  ty_abi_status_t (*memory)(ty_abi_executable_t *, ty_abi_executable_memory_t *) =
      TY_BACKEND_ENTRY(backend, executable_memory);
  if (!memory) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' does not report an executable's memory (no ABI 1.3 "
                          "executable_memory)",
                          ty_backend_name(backend));
  }
  return ty_status_from_abi(memory(s->executable, out));
}

ty_status_t ty_session_report(const ty_session_t *s, char **out_text) {
  *out_text = NULL;
  ty_backend_t *backend = ty_device_backend(s->device);
  ty_abi_status_t (*report)(ty_abi_executable_t *, char *, uint64_t, uint64_t *) =
      TY_BACKEND_ENTRY(backend, executable_report);
  if (!report) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "backend '%s' gives no executable report",
                          ty_backend_name(backend));
  }
  uint64_t size = 0;
  TY_RETURN_IF_ERROR(ty_status_from_abi(report(s->executable, NULL, 0, &size)));
  char *text = calloc(1, size + 1);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  uint64_t written = 0;
  ty_status_t st = ty_status_from_abi(report(s->executable, text, size, &written));
  if (st) {
    free(text);
    return st;
  }
  text[size] = '\0';
  *out_text = text;
  return TY_OK;
}

static ty_status_t ty_session_usable(const ty_session_t *s) {
  if (!s->compile_only) return TY_OK;
  return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                        "the session of graph %.12s was created compile-only: it has no "
                        "device buffers to bind, run or read",
                        s->hash);
}

static ty_status_t ty_session_slot(const ty_session_t *s, const char *name,
                                   ty_session_slot_t **out) {
  for (uint32_t i = 0; i < s->slot_count; ++i) {
    if (strcmp(s->slots[i].name, name) == 0) {
      *out = &s->slots[i];
      return TY_OK;
    }
  }
  *out = NULL;
  return ty_status_make(TY_CODE_NOT_FOUND,
                        "the graph has no input, state or output named '%s'", name);
}

ty_status_t ty_session_value_desc(const ty_session_t *s, const char *name,
                                  ty_tensor_desc_t *out_desc) {
  ty_session_slot_t *slot;
  TY_RETURN_IF_ERROR(ty_session_slot(s, name, &slot));
  *out_desc = slot->desc;
  return TY_OK;
}

ty_status_t ty_session_bind(ty_session_t *s, const char *name, ty_dtype_t dtype,
                            uint32_t rank, const int64_t *dims, const void *data,
                            size_t bytes) {
  TY_RETURN_IF_ERROR(ty_session_usable(s));
  ty_abi_status_t (*check)(ty_abi_executable_t *, const ty_abi_binding_check_t *) =
      TY_BACKEND_ENTRY(ty_device_backend(s->device), executable_check_binding);
  if (check) {
    ty_abi_binding_check_t c = {
        .struct_size = sizeof(c), .name = name, .dtype = dtype, .rank = rank, .dims = dims};
    TY_RETURN_IF_ERROR(ty_status_from_abi(check(s->executable, &c)));
  }
  ty_session_slot_t *slot;
  TY_RETURN_IF_ERROR(ty_session_slot(s, name, &slot));
  if (slot->role != TY_VALUE_INPUT && slot->role != TY_VALUE_STATE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "'%s' is an output; only inputs and states can be bound",
                          name);
  }
  bool same = dtype == slot->desc.dtype && rank == slot->desc.rank &&
              (rank == 0 || memcmp(dims, slot->desc.dims, rank * sizeof(int64_t)) == 0);
  if (!same) {
    ty_tensor_desc_t given;
    char want[128], got[128];
    ty_status_t st = ty_tensor_desc_init(dtype, rank, dims, NULL, &given);
    if (st) return ty_status_annotate(st, "binding '%s'", name);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "binding '%s': the graph wants %s but got %s", name,
                          ty_tensor_desc_format(&slot->desc, want, sizeof(want)),
                          ty_tensor_desc_format(&given, got, sizeof(got)));
  }
  if (bytes != slot->bytes) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "binding '%s': %zu bytes given for a %" PRIu64 "-byte tensor",
                          name, bytes, slot->bytes);
  }
  TY_RETURN_IF_ERROR(ty_buffer_write(slot->buffer, s->guard, data, bytes));
  if (s->guard && slot->role == TY_VALUE_INPUT) slot->input_hash = ty_fnv1a(data, bytes);
  s->stats.host_to_device_count++;
  s->stats.host_to_device_bytes += bytes;
  slot->bound = true;
  return TY_OK;
}

/* Whether the backend may run with the loss-gradient seed unbound. */
static bool ty_session_seed_may_be_unbound(const ty_session_t *s) {
  uint32_t major = 0, minor = 0;
  ty_backend_abi_version(ty_device_backend(s->device), &major, &minor);
  return major == TY_ABI_MAJOR && minor >= 2;
}

ty_status_t ty_session_run(ty_session_t *s) {
  TY_RETURN_IF_ERROR(ty_session_usable(s));
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->slot_count; ++i) {
    const ty_session_slot_t *slot = &s->slots[i];
    if (slot->role == TY_VALUE_INPUT && !slot->bound) {
      if ((slot->flags & TY_VALUE_FLAG_LOSS_SEED) && ty_session_seed_may_be_unbound(s)) {
        continue; /* the backend uses ones */
      }
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "input '%s' was never bound", slot->name);
    }
    s->bindings[n] = (ty_abi_binding_t){
        .name = slot->name, .buffer = ty_buffer_handle(slot->buffer), .offset = s->guard};
    n++;
  }
  ty_abi_execute_args_t args = {
      .struct_size = sizeof(args),
      .binding_count = n,
      .bindings = s->bindings,
  };
  ty_abi_status_t (*execute)(ty_abi_executable_t *, const ty_abi_execute_args_t *) =
      TY_BACKEND_ENTRY(ty_device_backend(s->device), executable_execute);
  TY_RETURN_IF_ERROR(ty_status_annotate(ty_status_from_abi(execute(s->executable, &args)),
                                        "running graph %.12s on %s", s->hash,
                                        ty_device_label(s->device)));
  s->stats.runs++;
  return TY_OK;
}

ty_status_t ty_session_read(ty_session_t *s, const char *name, void *dst,
                            size_t bytes) {
  TY_RETURN_IF_ERROR(ty_session_usable(s));
  ty_session_slot_t *slot;
  TY_RETURN_IF_ERROR(ty_session_slot(s, name, &slot));
  if (slot->role == TY_VALUE_INPUT && !(slot->flags & TY_VALUE_FLAG_OUTPUT)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "'%s' is an input; only outputs and states can be read",
                          name);
  }
  if (bytes != slot->bytes) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "reading '%s': %zu bytes requested from a %" PRIu64
                          "-byte tensor",
                          name, bytes, slot->bytes);
  }
  TY_RETURN_IF_ERROR(ty_device_synchronize(s->device));
  TY_RETURN_IF_ERROR(ty_buffer_read(slot->buffer, s->guard, dst, bytes));
  s->stats.device_to_host_count++;
  s->stats.device_to_host_bytes += bytes;
  return TY_OK;
}

/* DATA_LOSS naming `slot` when its guard at `start` differs from the
 * sentinel; `where` is "before" or "after". */
static ty_status_t ty_session_check_guard(ty_session_t *s, ty_session_slot_t *slot,
                                          const unsigned char *bytes, const char *where) {
  for (uint64_t i = 0; i < s->guard; ++i) {
    if (bytes[i] == ty_guard_byte(i)) continue;
    uint64_t changed = 0;
    for (uint64_t k = i; k < s->guard; ++k) changed += bytes[k] != ty_guard_byte(k);
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s wrote outside %s '%s': %" PRIu64 " of the %" PRIu64
                          " guard bytes %s it changed (the first at byte %s%" PRIu64
                          " of the tensor)",
                          ty_device_label(s->device), ty_value_role_name(slot->role),
                          slot->name, changed, s->guard, where,
                          where[0] == 'b' ? "-" : "+",
                          where[0] == 'b' ? s->guard - i : slot->bytes + i);
  }
  return TY_OK;
}

ty_status_t ty_session_check_guards(ty_session_t *s) {
  if (!s->guard) return TY_OK;
  TY_RETURN_IF_ERROR(ty_device_synchronize(s->device));
  ty_status_t st = TY_OK;
  for (uint32_t i = 0; i < s->slot_count && !st; ++i) {
    ty_session_slot_t *slot = &s->slots[i];
    uint64_t total = slot->bytes + 2 * s->guard;
    unsigned char *all = malloc((size_t)total);
    if (!all) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory checking guards");
    st = ty_buffer_read(slot->buffer, 0, all, total);
    if (!st) st = ty_session_check_guard(s, slot, all, "before");
    if (!st) st = ty_session_check_guard(s, slot, all + s->guard + slot->bytes, "after");
    if (!st && slot->role == TY_VALUE_INPUT && slot->bound &&
        ty_fnv1a(all + s->guard, (size_t)slot->bytes) != slot->input_hash) {
      st = ty_status_make(TY_CODE_DATA_LOSS,
                          "%s wrote into input '%s' (inputs are read-only during a run)",
                          ty_device_label(s->device), slot->name);
    }
    free(all);
  }
  return st;
}

ty_session_stats_t ty_session_stats(const ty_session_t *s) {
  ty_session_stats_t stats = s->stats;
  stats.cache_entry = s->cache_entry ? s->cache_entry : "";
  return stats;
}

const char *ty_session_graph_text(const ty_session_t *s) {
  /* Sessions made from an artifact have no host-side graph to print. */
  return s->lowered ? ty_lowered_graph_text(s->lowered) : "";
}

ty_status_t ty_session_graph_dot(const ty_session_t *s, char **out_dot) {
  if (!s->lowered) {
    *out_dot = NULL;
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "this session was made from an artifact: it has no graph to print");
  }
  return ty_lowered_graph_format_dot(s->lowered, out_dot);
}

const char *ty_session_graph_hash(const ty_session_t *s) { return s->hash; }
