/* Rogue backend plugins: one source, built once per ROGUE_<KIND> into
 * tests/rogue-plugins/, each breaking one rule of hal/backend_abi.h so the
 * loader test can check that exactly that rule is reported. Apart from the
 * broken rule each is a valid plugin with no devices.
 *
 * ROGUE_MINIMAL is the exception: a valid plugin (built into its own folder)
 * whose struct_size covers only the required entries while the memory after
 * it holds a poisoned device_open, so the host must never call it.
 * ROGUE_UNPAIRED is another valid one (in a folder of its own) that sets one
 * entry of three pairs and not the other (device_open without device_close,
 * graph_compile without executable_destroy, executable_serialize without
 * executable_deserialize): it loads, and the loader warns about each pair. */
#include <stdlib.h>

#include "hal/backend_abi.h"
#include "rogue_plugin.h"

#ifndef ROGUE_NAME
#error "ROGUE_NAME (the name in the file name) must be defined"
#endif

struct ty_abi_backend_s {
  const ty_host_api_t *host;
};

static ty_abi_status_t rogue_backend_create(const ty_abi_backend_create_args_t *args,
                                            ty_abi_backend_t **out_backend) {
  *out_backend = NULL;
#if defined(ROGUE_UNAVAILABLE)
  return args->host->status_make(TY_CODE_UNAVAILABLE, ROGUE_UNAVAILABLE_MESSAGE);
#elif defined(ROGUE_CREATE_FAILED)
  return args->host->status_make(TY_CODE_INTERNAL, ROGUE_CREATE_FAILED_MESSAGE);
#else
  ty_abi_backend_t *b = calloc(1, sizeof(*b));
  if (!b) return args->host->status_make(TY_CODE_RESOURCE_EXHAUSTED, "rogue: out of memory");
  b->host = args->host;
  *out_backend = b;
  return NULL;
#endif
}

static void rogue_backend_destroy(ty_abi_backend_t *backend) { free(backend); }

static ty_abi_status_t rogue_device_count(ty_abi_backend_t *backend, uint32_t *out_count) {
  (void)backend;
#if defined(ROGUE_MINIMAL)
  *out_count = 1;
#elif defined(ROGUE_UNPAIRED)
  *out_count = 4; /* a host of several devices: the rank-to-device mapping */
#else
  *out_count = 0;
#endif
  return NULL;
}

#if defined(ROGUE_MINIMAL) || defined(ROGUE_UNPAIRED)
static ty_abi_status_t rogue_device_info(ty_abi_backend_t *backend, uint32_t index,
                                         ty_abi_device_info_t *out_info) {
  (void)backend;
  (void)index;
  static const char name[] = "minimal device";
  for (size_t i = 0; i < sizeof(name); ++i) out_info->name[i] = name[i];
  out_info->kind = TY_DEVICE_KIND_OTHER;
  out_info->memory_bytes = 1;
  return NULL;
}

/* Lies beyond struct_size: a host that calls it has read past the table. */
static ty_abi_status_t rogue_poisoned_device_open(ty_abi_backend_t *backend,
                                                  const ty_abi_device_open_args_t *args,
                                                  ty_abi_device_t **out_device) {
  (void)args;
  *out_device = NULL;
  return backend->host->status_make(TY_CODE_INTERNAL, ROGUE_POISON_MESSAGE);
}
#endif

#if defined(ROGUE_UNPAIRED)
/* ROGUE_UNPAIRED's halves of pairs: never called by the loader test. */
static ty_abi_status_t rogue_graph_compile(ty_abi_device_t *device,
                                           const ty_abi_compile_args_t *args,
                                           ty_abi_executable_t **out_executable) {
  (void)device;
  (void)args;
  *out_executable = NULL;
  return NULL;
}

static ty_abi_status_t rogue_serialize(ty_abi_executable_t *executable, void *dst,
                                       uint64_t capacity, uint64_t *out_size) {
  (void)executable;
  (void)dst;
  (void)capacity;
  *out_size = 0;
  return NULL;
}

/* ABI 1.4's collectives without comm_broadcast: all of them or none. */
static ty_abi_status_t rogue_comm_id(ty_abi_backend_t *backend, ty_abi_comm_id_t *out_id) {
  (void)backend;
  out_id->size = 0;
  return NULL;
}

static ty_abi_status_t rogue_comm_create(ty_abi_device_t *device,
                                         const ty_abi_comm_create_args_t *args,
                                         ty_abi_comm_t **out_comm) {
  (void)device;
  (void)args;
  *out_comm = NULL;
  return NULL;
}

static void rogue_comm_destroy(ty_abi_comm_t *comm) { (void)comm; }

static ty_abi_status_t rogue_collective(ty_abi_comm_t *comm,
                                        const ty_abi_collective_args_t *args) {
  (void)comm;
  (void)args;
  return NULL;
}
#endif

#if !defined(ROGUE_MINIMAL) && !defined(ROGUE_UNPAIRED) && !defined(ROGUE_MISSING_ENTRY)
static ty_abi_status_t rogue_device_info(ty_abi_backend_t *backend, uint32_t index,
                                         ty_abi_device_info_t *out_info) {
  (void)index;
  (void)out_info;
  return backend->host->status_make(TY_CODE_NOT_FOUND, "rogue: no devices");
}
#endif

static const ty_backend_api_t rogue_api = {
#if defined(ROGUE_TABLE_TOO_SMALL)
    .struct_size = ROGUE_SMALL_STRUCT_SIZE,
#elif defined(ROGUE_MINIMAL)
    .struct_size = TY_BACKEND_API_MIN_SIZE,
#else
    .struct_size = sizeof(ty_backend_api_t),
#endif
#if defined(ROGUE_ABI_MISMATCH)
    .abi_major = ROGUE_ABI_MAJOR,
#elif defined(ROGUE_QUERY_NULL)
    .abi_major = ROGUE_NULL_SERVES_MAJOR,
#else
    .abi_major = TY_ABI_MAJOR,
#endif
    .abi_minor = 0,
#if defined(ROGUE_NAME_MISMATCH)
    .name = ROGUE_MISMATCH_TABLE_NAME,
#else
    .name = ROGUE_NAME,
#endif
    .version = "0.0.1-rogue",
    .backend_create = rogue_backend_create,
    .backend_destroy = rogue_backend_destroy,
    .device_count = rogue_device_count,
#if defined(ROGUE_MISSING_ENTRY)
    .device_info = NULL,
#else
    .device_info = rogue_device_info,
#endif
#if defined(ROGUE_MINIMAL) || defined(ROGUE_UNPAIRED)
    .device_open = rogue_poisoned_device_open,
#endif
#if defined(ROGUE_UNPAIRED)
    .graph_compile = rogue_graph_compile,
    .executable_serialize = rogue_serialize,
    .comm_unique_id = rogue_comm_id,
    .comm_create = rogue_comm_create,
    .comm_destroy = rogue_comm_destroy,
    .comm_all_reduce = rogue_collective,
    .comm_reduce_scatter = rogue_collective,
    .comm_all_gather = rogue_collective,
#endif
};

#if defined(ROGUE_NO_ENTRY)
/* The author misspelt the entry point: the loader finds no ty_backend_query. */
TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_querry(uint32_t host_abi_major,
                                                            uint32_t host_abi_minor);
TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_querry(uint32_t host_abi_major,
                                                            uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return &rogue_api;
}
#else
TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor) {
  (void)host_abi_minor;
#if defined(ROGUE_QUERY_NULL)
  /* Correctly refuses a major it was not built for. */
  return host_abi_major == ROGUE_NULL_SERVES_MAJOR ? &rogue_api : NULL;
#else
  /* Every other rogue hands its table over without checking the major. */
  (void)host_abi_major;
  return &rogue_api;
#endif
}
#endif
