/* Fallback sessions, for bring-up only: a graph the primary device cannot run
 * whole is partitioned, in execution order, into segments of consecutive
 * nodes, each run by a session of its own on the primary device or, for the
 * nodes the primary refuses, on the fallback device the caller named
 * (ty_session_options_t.fallback_device; `--backend URI?fallback=cpu`).
 * Every value that crosses segments is copied through host memory,
 * explicitly and counted, before the segment that reads it runs. Never
 * implicit: without a fallback device a refused node is an error.
 *
 * States (weights, optimizer moments, KV caches) live on one device, their
 * home: the device whose segment updates them (else the first that reads
 * them, or where a shared session keeps them); a segment on the other device
 * gets a state as an input copied at each run, and an update made on the
 * other device is copied home after the last segment. Segment sessions on
 * one device share their states (ty_session_options_t.share_state_with,
 * chained), so a state has one buffer.
 *
 * Internal to graph/ (session.c dispatches the public session API here).
 * Not thread-safe. */
#ifndef TY_GRAPH_RUNTIME_SESSION_FALLBACK_H_
#define TY_GRAPH_RUNTIME_SESSION_FALLBACK_H_

#include "graph/runtime/session.h"

typedef struct ty_fallback_run_t ty_fallback_run_t;

/* Partitions `graph` (lowered, owned by the caller and kept alive while the
 * fallback session lives) for `primary` and options->fallback_device and
 * creates the segment sessions. *out_run is NULL when the primary supports
 * every node: the caller makes a plain session. FAILED_PRECONDITION naming
 * every node neither device supports; UNIMPLEMENTED for a graph whose state
 * is read after its update in a later segment; INVALID_ARGUMENT for guard
 * bytes or compile-only (conformance runs and artifacts never fall back). */
ty_status_t ty_fallback_create(ty_device_t *primary, const ty_abi_graph_t *graph,
                            const ty_session_options_t *options, ty_fallback_run_t **out_run);
void ty_fallback_destroy(ty_fallback_run_t *run);

ty_status_t ty_fallback_bind(ty_fallback_run_t *run, const char *name, ty_dtype_t dtype,
                             uint32_t rank, const int64_t *dims, const void *data, size_t bytes);
ty_status_t ty_fallback_run(ty_fallback_run_t *run);
ty_status_t ty_fallback_read(ty_fallback_run_t *run, const char *name, void *dst, size_t bytes);
/* Adds the segments' counters to *stats and fills the fallback fields. */
void ty_fallback_stats(const ty_fallback_run_t *run, ty_session_stats_t *stats);
const char *ty_fallback_partition(const ty_fallback_run_t *run);

/* The session of `run` on `device` holding STATE `name`, or NULL; and the
 * last segment session on `device` (what a session sharing state with
 * `run` on that device chains to), or NULL. */
const ty_session_t *ty_fallback_holder(const ty_fallback_run_t *run, const char *name,
                                    const ty_device_t *device);
const ty_session_t *ty_fallback_last_on(const ty_fallback_run_t *run, const ty_device_t *device);

/* From session.c, for the partition: the fallback part of a session (NULL for
 * a plain one), its device, and whether it has a STATE slot `name`. */
ty_fallback_run_t *ty_session_fallback_of(const ty_session_t *session);
ty_device_t *ty_session_device_of(const ty_session_t *session);
bool ty_session_has_state(const ty_session_t *session, const char *name);

#endif /* TY_GRAPH_RUNTIME_SESSION_FALLBACK_H_ */
