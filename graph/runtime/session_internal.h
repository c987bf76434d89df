/* The session object and what session.c (slots, bindings, runs) and
 * session_compile.c (compile caches, artifacts) share. Internal to graph/. */
#ifndef TY_GRAPH_SESSION_INTERNAL_H_
#define TY_GRAPH_SESSION_INTERNAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/ir/lower.h"
#include "graph/runtime/session.h"
#include "graph/runtime/session_fallback.h"
#include "hal/buffer.h"
#include "hal/executable.h"

/* A device buffer that several sessions' state slots may share. */
typedef struct ty_shared_buffer_t {
  ty_buffer_t *buffer;
  uint32_t refs;
} ty_shared_buffer_t;

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
  uint64_t guard_key;  /* seeds this slot's guard pattern (its own per buffer) */
} ty_session_slot_t;

struct ty_session_t {
  ty_device_t *device;
  ty_lowered_graph_t *lowered;     /* NULL for a session made from an artifact alone */
  const ty_abi_graph_t *abi;       /* lowered's, or the executable's own */
  char hash[65];
  ty_executable_t *executable;     /* owned by the device's executable cache */
  char *cache_entry;
  bool compile_only;
  ty_session_slot_t *slots;
  uint32_t slot_count;
  ty_abi_binding_t *bindings;
  ty_session_stats_t stats;
  uint64_t guard; /* bytes of guard before and after every tensor */
  uint64_t guard_seed;
  /* The session this one shares state with (during create only: sharing
   * follows the chain, so segments of a fallback session find every state). */
  const ty_session_t *share_parent;
  ty_fallback_run_t *fallback; /* a fallback session: everything goes through it */
  const ty_host_comm_t *host_comm; /* the run's world for collective ops, or NULL */
};

/* session.c: a new empty session; its graph; buffers for its slots once it
 * has an executable; UNIMPLEMENTED / FAILED_PRECONDITION for a fallback or
 * compile-only session asked to bind, run, read or serialize. */
ty_status_t ty_session_new(ty_device_t *device, const ty_session_options_t *options,
                           ty_session_t **out);
void ty_session_set_graph(ty_session_t *s, const ty_abi_graph_t *abi);
ty_status_t ty_session_finish(ty_session_t *s, const ty_session_options_t *options);
ty_status_t ty_session_usable(const ty_session_t *s);

/* session_compile.c: the executable of s->abi for its device, through the
 * in-process cache and the on-disk one (options->cache_dir); sets
 * s->executable, s->stats.source and s->cache_entry. */
ty_status_t ty_session_compile(ty_session_t *s, const ty_session_options_t *options);

#endif /* TY_GRAPH_SESSION_INTERNAL_H_ */
