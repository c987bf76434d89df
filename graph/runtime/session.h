/* Sessions: a graph compiled for one device, with its state resident there.
 *
 *   create(device, graph, options) -> bind(name, data) -> run() -> read(name)
 *
 * create lowers the graph, asks the backend which nodes it supports (a gap is
 * an error naming op, dtype and device; there is never a fallback to another
 * device), and compiles it — or reuses an executable compiled earlier on the
 * same device for the same graph hash, backend, backend version and options
 * (the in-process compile cache), or, with options.cache_dir, one stored on
 * disk by an earlier process (graph/runtime/compile_cache.h; backends that can
 * serialize executables only). Every INPUT, STATE and OUTPUT value gets a
 * device buffer at create. STATE values (parameters, optimizer moments)
 * start as zeros and stay on the device across runs; only bound inputs and
 * explicit reads cross between host and device.
 *
 * create_from_artifact loads an executable a backend serialized earlier
 * (`trainyard compile`) instead of compiling.
 *
 * With options.fallback_device, a graph the device refuses in part
 * runs with a fallback (graph/runtime/session_fallback.h); the API is the same.
 *
 * A session must be destroyed before its device is closed. Not thread-safe. */
#ifndef TY_GRAPH_SESSION_H_
#define TY_GRAPH_SESSION_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "hal/buffer.h"
#include "hal/comm.h"
#include "hal/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_session_t ty_session_t;
struct ty_session_t;

typedef struct ty_session_options_t {
  /* Backend compile options (key/value), part of the cache key. */
  uint32_t option_count;
  const ty_abi_option_t *options;
  /* STATE values that also exist (same name, dtype and shape) in this
   * session on the same device use its device buffers instead of new ones:
   * how a prefill and a decode graph share a KV cache, or a training and an
   * evaluation graph share weights. The buffers are reference-counted, so
   * either session may be destroyed first. NULL for none. */
  const struct ty_session_t *share_state_with;
  /* Guard regions for conformance runs (0: none; not part of the cache
   * key). Every tensor buffer gets this many bytes before and after the
   * tensor, filled with a sentinel pattern, and the tensor is bound at that
   * offset, so use a multiple of the alignment the backend's kernels want
   * (64 is safe). The bytes of OUTPUT values are filled with 0xFF (NaN in
   * every float dtype) so an output a backend never writes cannot pass for a
   * result, and bound inputs are fingerprinted; ty_session_check_guards then
   * tells whether a run wrote outside its tensors or into an input. */
  uint64_t guard_bytes;
  /* Seeds the guard pattern. Each buffer's guards get a pattern of their own
   * (from this seed and the tensor's name), so a kernel that copies one
   * element too many from an input copies the input's guard bytes, which
   * differ from the output's, and is caught; a new seed per run (conform
   * passes its case seed) keeps a kernel from passing by luck. */
  uint64_t guard_seed;
  /* Asks the plugin for its debug mode of guards between the values it
   * keeps in its own memory (the SDK's host executor: guard gaps between
   * arena slots, checked after every node, naming the node and the slot).
   * Sent as the compile option "debug.guards=<guard_seed>" to plugins of
   * ABI >= 1.9 only (docs/plugin-abi.md "Debug options"); part of the cache
   * key. For conformance runs. */
  bool debug_guards;
  /* `--deterministic`: batch-invariant kernels. Sent as the compile option
   * "deterministic=1" (TY_ABI_DETERMINISTIC_OPTION) to plugins of ABI >=
   * 1.10, which honour it or refuse it; the session is refused
   * (FAILED_PRECONDITION, naming the backend) for older plugins. Part of the
   * cache key. */
  bool deterministic;
  /* The on-disk compile cache folder; NULL or "" for none. */
  const char *cache_dir;
  /* Compile again even when the cache holds a failure record for the key
   * (by default a cached failure is returned without compiling). */
  bool retry_failed;
  /* Compile (or load) only: no device buffers are made, and bind, run and
   * read fail. For `trainyard compile`, which only writes the artifact. */
  bool compile_only;
  /* Bring-up only: run the nodes the device refuses on this device instead
   * (a fallback session, graph/runtime/session_fallback.h): the graph is cut into segments
   * that run on one device or the other, with every value that crosses
   * copied through the host, explicitly and counted in the stats. NULL (the
   * default) never mixes: a refused node is an error. */
  ty_device_t *fallback_device;
} ty_session_options_t;

/* Where create found its executable. */
typedef enum ty_session_source_e {
  TY_SESSION_COMPILED = 0,       /* compiled; no cache folder was given */
  TY_SESSION_MEMORY_HIT = 1,     /* the device's in-process cache */
  TY_SESSION_DISK_HIT = 2,       /* loaded from the cache folder */
  TY_SESSION_DISK_MISS = 3,      /* compiled and stored in the cache folder */
  TY_SESSION_DISK_UNSERIALIZABLE = 4, /* compiled; the backend cannot serialize
                                         executables, so the folder keeps only
                                         failure records for it */
  TY_SESSION_ARTIFACT = 5,       /* loaded from an artifact file */
  TY_SESSION_FALLBACK = 6,          /* segments on a device and its fallback */
} ty_session_source_t;

/* "compiled", "memory hit", "disk hit", "disk miss", ... */
const char *ty_session_source_name(ty_session_source_t source);

typedef struct ty_session_stats_t {
  bool cache_hit;              /* create reused a compiled executable */
  ty_session_source_t source;
  const char *cache_entry;     /* the cache file or artifact read or written
                                  ("" if none); owned by the session */
  double compile_seconds;      /* host wall time of create's compile or load */
  uint64_t runs;
  uint64_t host_to_device_count; /* buffer writes since create */
  uint64_t host_to_device_bytes;
  uint64_t device_to_host_count; /* buffer reads since create */
  uint64_t device_to_host_bytes;
  uint64_t device_to_device_count; /* ty_session_bind_device copies */
  uint64_t device_to_device_bytes;
  /* A fallback session (a fallback device runs some nodes): its segments, and
   * the bytes copied between them through the host (also counted above). */
  bool fallback;
  uint32_t fallback_segments;
  uint64_t transfer_bytes;             /* since create */
  uint64_t last_run_transfer_bytes;    /* in the last run */
  uint64_t last_run_bytes_to_primary;  /* ... of which into the device */
  uint64_t last_run_bytes_to_fallback; /* ... and into the fallback */
} ty_session_stats_t;

/* `options` may be NULL. The session does not keep `graph`. Errors:
 * FAILED_PRECONDITION naming the unsupported op/dtype/device; UNIMPLEMENTED
 * when the backend cannot run graphs at all; compile errors from the
 * backend, annotated with the device. */
ty_status_t ty_session_create(ty_device_t *device, const ty_graph_t *graph,
                              const ty_session_options_t *options,
                              ty_session_t **out_session);
void ty_session_destroy(ty_session_t *session);

/* Loads the artifact at `path` (written by ty_session_serialize, e.g. by
 * `trainyard compile`) for `device`. With `graph`, the artifact must have
 * been compiled from that graph: the backend refuses another one with
 * FAILED_PRECONDITION naming the difference (a recompile is needed). Without
 * it the slots come from the artifact's own graph. NOT_FOUND for a missing
 * file; DATA_LOSS for a corrupt one; FAILED_PRECONDITION for a format
 * version or target the device does not take; UNIMPLEMENTED for a backend
 * that cannot load artifacts. options.cache_dir is ignored. */
ty_status_t ty_session_create_from_artifact(ty_device_t *device, const ty_graph_t *graph,
                                            const char *path,
                                            const ty_session_options_t *options,
                                            ty_session_t **out_session);

/* The executable as an artifact (the backend's format). The caller frees
 * *out_bytes. UNIMPLEMENTED for backends that cannot serialize. */
ty_status_t ty_session_serialize(const ty_session_t *session, void **out_bytes,
                                 size_t *out_size);

/* The backend's report on the executable (placement, estimates, what the
 * runs did); UNIMPLEMENTED when the backend gives none. Caller frees. */
ty_status_t ty_session_report(const ty_session_t *session, char **out_text);

/* The device memory the compiled executable holds (its arena) and uses per
 * run (scratch), as the backend plans it (ABI 1.3 executable_memory);
 * UNIMPLEMENTED when the backend does not say. */
ty_status_t ty_session_executable_memory(const ty_session_t *session,
                                         ty_abi_executable_memory_t *out);

/* Copies host data into the INPUT or STATE value `name` (for a state: sets
 * its value, e.g. initial weights). `dtype` and the shape must match the
 * value's exactly; `bytes` must equal its size. INVALID_ARGUMENT naming the
 * value and both shapes otherwise; NOT_FOUND for an unknown name. A backend
 * with executable_check_binding checks first and its error is returned. */
ty_status_t ty_session_bind(ty_session_t *session, const char *name,
                            ty_dtype_t dtype, uint32_t rank, const int64_t *dims,
                            const void *data, size_t bytes);

/* Fills the INPUT or STATE value `name` from `bytes` bytes at `offset` of
 * `src`, a buffer of the session's device, by a device-side copy (no host
 * round trip: how a pipeline stage binds an activation it received on the
 * device). `bytes` must equal the value's size. INVALID_ARGUMENT for an
 * output, a size mismatch, or a buffer of another device or a range past
 * its end; NOT_FOUND for an unknown name; FAILED_PRECONDITION for a fallback
 * session. The copy is ordered after the device's queued work, as a run. */
ty_status_t ty_session_bind_device(ty_session_t *session, const char *name, ty_buffer_t *src,
                                   uint64_t offset, size_t bytes);

/* The run's world for the graph's collective ops (all_reduce), handed to
 * the plugin at every run (ABI 1.5 host collectives); NULL or a world of
 * one rank makes them the identity. The session keeps the pointer: `comm`
 * must outlive it. FAILED_PRECONDITION for a world of more than one rank
 * on a backend older than ABI 1.5 or a fallback session, which could not reach
 * the other ranks. */
ty_status_t ty_session_set_host_comm(ty_session_t *session, const ty_host_comm_t *comm);

/* Runs once. FAILED_PRECONDITION naming the first INPUT never bound; the
 * graph's loss-gradient seed (TY_VALUE_FLAG_LOSS_SEED) may stay unbound on
 * backends of ABI >= 1.2, which then use ones. */
ty_status_t ty_session_run(ty_session_t *session);

/* Copies an OUTPUT or STATE value to host memory (`bytes` must equal its
 * size). Blocks until the last run has finished. */
ty_status_t ty_session_read(ty_session_t *session, const char *name, void *dst,
                            size_t bytes);

/* The device buffer of INPUT, STATE or OUTPUT value `name`, the byte offset
 * of the tensor in it, and the executable whose stream orders the work on
 * it (owned by the session): what a device collective (hal/comm.h) works
 * on. NOT_FOUND for an unknown name; FAILED_PRECONDITION for a fallback or
 * compile-only session. */
ty_status_t ty_session_device_tensor(ty_session_t *session, const char *name,
                                     ty_buffer_t **out_buffer, uint64_t *out_offset,
                                     ty_abi_executable_t **out_executable);

/* The value's descriptor (dtype, shape, name); NOT_FOUND for unknown names. */
ty_status_t ty_session_value_desc(const ty_session_t *session, const char *name,
                                  ty_tensor_desc_t *out_desc);

/* With options.guard_bytes > 0: DATA_LOSS naming the first value whose
 * guard bytes before or after it changed (with the first changed byte's
 * offset), or the first bound INPUT whose bytes a run changed. OK when
 * everything is intact, and always OK without guards. Call after
 * ty_session_run; it synchronizes the device first. */
ty_status_t ty_session_check_guards(ty_session_t *session);

ty_session_stats_t ty_session_stats(const ty_session_t *session);
/* A fallback session's partition as text (segments, devices, ops, bytes copied
 * per run), owned by the session; NULL for a session on one device. */
const char *ty_session_partition(const ty_session_t *session);
/* The canonical graph hash the session was compiled for (64 hex digits). */
const char *ty_session_graph_hash(const ty_session_t *session);
/* The lowered graph the session runs, as canonical text (owned by the
 * session) or Graphviz dot (the caller frees *out_dot). */
const char *ty_session_graph_text(const ty_session_t *session);
ty_status_t ty_session_graph_dot(const ty_session_t *session, char **out_dot);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_SESSION_H_ */
