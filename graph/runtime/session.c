/* Sessions: device-resident state, named bindings, runs, guard regions and
 * transfer accounting (executables come from session_compile.c, fallback runs
 * from session_fallback.c). */
#include "graph/runtime/session.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/runtime/session_internal.h"
#include "hal/abi_graph.h"
#include "hal/dtype.h"

/* ---- sessions ---- */

static void ty_shared_buffer_release(ty_shared_buffer_t *b) {
  if (b && --b->refs == 0) {
    ty_buffer_free(b->buffer);
    free(b);
  }
}
/* ---- guard regions ---- */

static uint64_t ty_guard_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The key of a slot's guard pattern: the session's seed and the tensor's
 * name, so two buffers never share a pattern (a copy of one buffer's guard
 * over another's is caught) and sessions sharing a state agree on it. */
static uint64_t ty_guard_key(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const unsigned char *p = (const unsigned char *)name; *p; ++p) h = (h ^ *p) * 0x100000001b3ull;
  return ty_guard_mix(seed * 0x9e3779b97f4a7c15ull + h);
}

/* The sentinel byte at position i of a guard of the slot with `key`: not a
 * constant, so a shifted or partial copy over it is still caught. */
static unsigned char ty_guard_byte(uint64_t key, uint64_t i) {
  return (unsigned char)(ty_guard_mix(key + (i >> 3) * 0x9e3779b97f4a7c15ull) >> (8 * (i & 7)));
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
    fill[i] = ty_guard_byte(slot->guard_key, i);
    fill[s->guard + slot->bytes + i] = ty_guard_byte(slot->guard_key ^ 1, i);
  }
  memset(fill + s->guard, 0xFF, (size_t)slot->bytes);
  ty_status_t st = ty_buffer_write(slot->buffer, 0, fill, total);
  free(fill);
  return st;
}

/* The other session's state slot matching `slot` (name, dtype, shape). */
static ty_session_slot_t *ty_session_shared_slot(const ty_session_t *other,
                                                 const ty_session_slot_t *slot) {
  for (; other; other = other->share_parent) {
    for (uint32_t i = 0; i < other->slot_count; ++i) {
      ty_session_slot_t *o = &other->slots[i];
      if (o->role == TY_VALUE_STATE && strcmp(o->name, slot->name) == 0 &&
          o->desc.dtype == slot->desc.dtype && o->desc.rank == slot->desc.rank &&
          memcmp(o->desc.dims, slot->desc.dims, slot->desc.rank * sizeof(int64_t)) == 0) {
        return o;
      }
    }
  }
  return NULL;
}

ty_fallback_run_t *ty_session_fallback_of(const ty_session_t *s) { return s->fallback; }
ty_device_t *ty_session_device_of(const ty_session_t *s) { return s->device; }

bool ty_session_has_state(const ty_session_t *s, const char *name) {
  for (uint32_t i = 0; i < s->slot_count; ++i) {
    if (s->slots[i].role == TY_VALUE_STATE && strcmp(s->slots[i].name, name) == 0) return true;
  }
  return false;
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
    slot->guard_key = ty_guard_key(s->guard_seed, v->name);
    ty_session_slot_t *shared =
        v->role == TY_VALUE_STATE ? ty_session_shared_slot(share, slot) : NULL;
    if (shared) {
      slot->storage = shared->storage;
      slot->storage->refs++;
      slot->buffer = slot->storage->buffer;
      slot->bound = shared->bound;
      slot->guard_key = shared->guard_key; /* its owner filled the guards */
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
ty_status_t ty_session_finish(ty_session_t *s, const ty_session_options_t *options) {
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
  const ty_session_t *share = options ? options->share_state_with : NULL;
  /* A plain session sharing with a fallback one hangs on its segments here. */
  if (share && share->fallback) share = ty_fallback_last_on(share->fallback, s->device);
  s->share_parent = share;
  return ty_session_add_slots(s, share);
}

ty_status_t ty_session_new(ty_device_t *device, const ty_session_options_t *options,
                                  ty_session_t **out) {
  *out = calloc(1, sizeof(**out));
  if (!*out) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory creating a session");
  (*out)->device = device;
  (*out)->guard = options ? options->guard_bytes : 0;
  (*out)->guard_seed = options ? options->guard_seed : 0;
  (*out)->compile_only = options && options->compile_only;
  return TY_OK;
}

void ty_session_set_graph(ty_session_t *s, const ty_abi_graph_t *abi) {
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
  if (!st) ty_session_set_graph(s, ty_lowered_graph_abi(s->lowered));
  if (!st && options && options->fallback_device) {
    st = ty_fallback_create(device, s->abi, options, &s->fallback);
  }
  if (!st && s->fallback) {
    s->stats.source = TY_SESSION_FALLBACK;
    *out_session = s;
    return TY_OK;
  }
  if (!st) st = ty_session_compile(s, options);
  if (!st) st = ty_session_finish(s, options);
  if (st) {
    ty_session_destroy(s);
    return st;
  }
  *out_session = s;
  return TY_OK;
}

void ty_session_destroy(ty_session_t *s) {
  if (!s) return;
  ty_fallback_destroy(s->fallback);
  for (uint32_t i = 0; i < s->slot_count; ++i) ty_shared_buffer_release(s->slots[i].storage);
  free(s->slots);
  free(s->bindings);
  ty_lowered_graph_destroy(s->lowered);
  free(s->cache_entry);
  free(s);
}

ty_status_t ty_session_usable(const ty_session_t *s) {
  if (s->fallback) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "a mixed session (graph %.12s) runs as segments on two devices; it "
                          "has no single executable or buffer set for this",
                          s->hash);
  }
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

ty_status_t ty_session_device_tensor(ty_session_t *s, const char *name,
                                     ty_buffer_t **out_buffer, uint64_t *out_offset,
                                     ty_abi_executable_t **out_executable) {
  *out_buffer = NULL;
  *out_offset = 0;
  *out_executable = NULL;
  if (s->fallback) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "'%s': a mixed session's tensors live on two devices", name);
  }
  TY_RETURN_IF_ERROR(ty_session_usable(s));
  ty_session_slot_t *slot;
  TY_RETURN_IF_ERROR(ty_session_slot(s, name, &slot));
  *out_buffer = slot->buffer;
  *out_offset = s->guard; /* where every tensor is bound in its buffer */
  *out_executable = ty_executable_handle(s->executable);
  return TY_OK;
}

ty_status_t ty_session_value_desc(const ty_session_t *s, const char *name,
                                  ty_tensor_desc_t *out_desc) {
  for (uint32_t v = 0; s->fallback && v < s->abi->value_count; ++v) {
    const ty_abi_value_t *val = &s->abi->values[v];
    if (val->role == TY_VALUE_INTERMEDIATE && !(val->flags & TY_VALUE_FLAG_OUTPUT)) continue;
    if (strcmp(val->name, name) == 0) {
      return ty_tensor_desc_init(val->dtype, val->rank, val->dims, val->name, out_desc);
    }
  }
  ty_session_slot_t *slot;
  TY_RETURN_IF_ERROR(ty_session_slot(s, name, &slot));
  *out_desc = slot->desc;
  return TY_OK;
}

ty_status_t ty_session_bind(ty_session_t *s, const char *name, ty_dtype_t dtype,
                            uint32_t rank, const int64_t *dims, const void *data,
                            size_t bytes) {
  if (s->fallback) return ty_fallback_bind(s->fallback, name, dtype, rank, dims, data, bytes);
  TY_RETURN_IF_ERROR(ty_session_usable(s));
  ty_abi_binding_check_t c = {
      .struct_size = sizeof(c), .name = name, .dtype = dtype, .rank = rank, .dims = dims};
  TY_RETURN_IF_ERROR(ty_executable_check_binding(s->executable, &c));
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

ty_status_t ty_session_bind_device(ty_session_t *s, const char *name, ty_buffer_t *src,
                                   uint64_t offset, size_t bytes) {
  if (s->fallback) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "binding '%s' from a device buffer: a mixed session's tensors live on "
                          "two devices", name);
  }
  TY_RETURN_IF_ERROR(ty_session_usable(s));
  ty_session_slot_t *slot;
  TY_RETURN_IF_ERROR(ty_session_slot(s, name, &slot));
  if (slot->role != TY_VALUE_INPUT && slot->role != TY_VALUE_STATE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "'%s' is an output; only inputs and states can be bound", name);
  }
  if (bytes != slot->bytes) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "binding '%s' from a device buffer: %zu bytes given for a %" PRIu64
                          "-byte tensor", name, bytes, slot->bytes);
  }
  if (ty_buffer_device(src) != s->device) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "binding '%s' from a buffer of %s: the session runs on %s", name,
                          ty_device_label(ty_buffer_device(src)), ty_device_label(s->device));
  }
  TY_RETURN_IF_ERROR(ty_status_annotate(ty_buffer_copy(src, offset, slot->buffer, s->guard, bytes),
                                        "binding '%s' from a device buffer", name));
  if (s->guard && slot->role == TY_VALUE_INPUT) {
    /* guards check that no run changes a bound input: hash what came */
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    ty_status_t st = ty_buffer_read(slot->buffer, s->guard, copy, bytes);
    if (!st) slot->input_hash = ty_fnv1a(copy, bytes);
    free(copy);
    TY_RETURN_IF_ERROR(st);
  }
  s->stats.device_to_device_count++;
  s->stats.device_to_device_bytes += bytes;
  slot->bound = true;
  return TY_OK;
}

/* Whether the backend may run with the loss-gradient seed unbound. */
static bool ty_session_seed_may_be_unbound(const ty_session_t *s) {
  uint32_t major = 0, minor = 0;
  ty_backend_abi_version(ty_device_backend(s->device), &major, &minor);
  return major == TY_ABI_MAJOR && minor >= 2;
}

/* A node's `group` attribute, or `fallback`. */
static const char *ty_session_node_group(const ty_abi_node_t *node, const char *fallback) {
  for (uint32_t a = 0; a < node->attr_count; ++a) {
    if (!strcmp(node->attrs[a].name, "group") && node->attrs[a].kind == TY_ATTR_STRING) {
      return node->attrs[a].s;
    }
  }
  return fallback;
}

ty_status_t ty_session_set_host_comm(ty_session_t *s, const ty_host_comm_t *comm) {
  if (comm && comm->size > 1) {
    uint32_t major = 0, minor = 0;
    ty_backend_t *backend = ty_device_backend(s->device);
    ty_backend_abi_version(backend, &major, &minor);
    if (s->fallback) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "a session split across devices (a fallback device runs some "
                            "nodes) cannot run collective ops over %u ranks",
                            comm->size);
    }
    if (major != TY_ABI_MAJOR || minor < 5) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "backend '%s' speaks ABI %u.%u: running collective ops over %u "
                            "ranks needs the host collectives of ABI 1.5",
                            ty_backend_name(backend), major, minor, comm->size);
    }
    /* A 1.5 plugin reduces every collective over the world: refuse a graph
     * whose collectives name a process group (or a maximum) rather than let
     * it compute a wrong result. */
    for (uint32_t n = 0; minor < 6 && s->abi && n < s->abi->node_count; ++n) {
      const ty_abi_node_t *node = &s->abi->nodes[n];
      const bool tp_op = !strcmp(node->op, "tp_copy") || !strcmp(node->op, "tp_reduce");
      const char *group = ty_session_node_group(node, tp_op ? "tp" : "world");
      if (tp_op || (!strcmp(node->op, "all_reduce") && strcmp(group, "world") != 0)) {
        return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                              "backend '%s' speaks ABI %u.%u: node %u (%s over group %s) needs "
                              "the process groups of ABI 1.6",
                              ty_backend_name(backend), major, minor, n, node->op, group);
      }
    }
  }
  /* The gathers (ABI 1.11): the shape of a node's output was fixed by its
   * `parts`, which must be the run's group size. */
  for (uint32_t n = 0; s->abi && n < s->abi->node_count; ++n) {
    const ty_abi_node_t *node = &s->abi->nodes[n];
    if (strcmp(node->op, "all_gather") != 0 && strcmp(node->op, "reduce_scatter") != 0) continue;
    const int64_t parts = ty_desc_node_attr_int(node, "parts", 1);
    const char *group = ty_session_node_group(node, "cp");
    const uint32_t size = !comm || comm->size <= 1 ? 1 /* one process: each group is it */
                          : !strcmp(group, "world") ? comm->size
                          : comm->group_size        ? comm->group_size(comm->user, group)
                                                    : 0;
    if (size == 0) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "node %u (%s over group %s): this run has no %s group", n, node->op,
                            group, group);
    }
    if (parts != (int64_t)size) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "node %u (%s over group %s) has %lld parts, and this run's %s group "
                            "has %u rank%s: build the graph for the run's layout",
                            n, node->op, group, (long long)parts, group, size,
                            size == 1 ? "" : "s");
    }
    uint32_t major = 0, minor = 0;
    ty_backend_abi_version(ty_device_backend(s->device), &major, &minor);
    if (parts > 1 && (major != TY_ABI_MAJOR || minor < 11)) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "backend '%s' speaks ABI %u.%u: node %u (%s over group %s) needs "
                            "the gathers of ABI 1.11",
                            ty_backend_name(ty_device_backend(s->device)), major, minor, n,
                            node->op, group);
    }
  }
  s->host_comm = comm;
  return TY_OK;
}

ty_status_t ty_session_run(ty_session_t *s) {
  if (s->fallback) return ty_fallback_run(s->fallback);
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
  const bool world = s->host_comm && s->host_comm->size > 1;
  ty_abi_execute_args_t args = {
      .struct_size = sizeof(args),
      .binding_count = n,
      .bindings = s->bindings,
      .host_comm = world ? (void *)(uintptr_t)s->host_comm : NULL,
      .world_size = world ? s->host_comm->size : 1,
  };
  TY_RETURN_IF_ERROR(ty_status_annotate(ty_executable_execute(s->executable, &args),
                                        "running graph %.12s on %s", s->hash,
                                        ty_device_label(s->device)));
  s->stats.runs++;
  return TY_OK;
}

ty_status_t ty_session_read(ty_session_t *s, const char *name, void *dst,
                            size_t bytes) {
  if (s->fallback) return ty_fallback_read(s->fallback, name, dst, bytes);
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
  const uint64_t key = where[0] == 'b' ? slot->guard_key : slot->guard_key ^ 1;
  for (uint64_t i = 0; i < s->guard; ++i) {
    if (bytes[i] == ty_guard_byte(key, i)) continue;
    uint64_t changed = 0;
    for (uint64_t k = i; k < s->guard; ++k) changed += bytes[k] != ty_guard_byte(key, k);
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
  if (s->fallback) ty_fallback_stats(s->fallback, &stats);
  return stats;
}

const char *ty_session_partition(const ty_session_t *s) {
  return s->fallback ? ty_fallback_partition(s->fallback) : NULL;
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
