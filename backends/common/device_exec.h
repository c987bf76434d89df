/* The device-executor core: what every per-op executor does the same way
 * whatever its device (the opencl and cuda plugins, the host executor), so
 * that a backend writes kernels and a few hooks only.
 *
 * - ty_dev_exec_t: the executable's graph copy, its memory plan, the
 *   layout of constants and of unbound outputs, the index of named values,
 *   and at each run where every value lives (ty_dev_exec_resolve, which
 *   checks the named bindings of ty_abi_execute_args_t against the graph);
 * - ty_dev_ref_t: an operand of a command (a value, scratch, aux data, the
 *   error buffer) resolved to a location at each run;
 * - ty_dev_build_t and its helpers: what an op builder works with while
 *   compile walks the nodes (operands, scratch, aux data, a sticky error);
 * - ty_dev_op_t: the op table type (name -> builder) with one lookup;
 * - ty_dev_data_error: the one decoder of the device data errors
 *   (device_errors.h).
 *
 * A location is a device handle and a byte offset. What the handle is
 * belongs to the backend: a cl_mem, a CUdeviceptr or a host pointer, kept
 * as an integer. The core never dereferences one. Nothing here is
 * thread-safe; an executable is run by one thread at a time (the ABI's
 * rule). Errors are statuses made with ty_plugin_error (plugin_status.h). */
#ifndef TY_BACKENDS_COMMON_DEVICE_EXEC_H_
#define TY_BACKENDS_COMMON_DEVICE_EXEC_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/abi_graph.h"
#include "hal/memory_plan.h"
#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A place in device memory: the backend's handle and a byte offset. */
typedef struct ty_dev_loc_t {
  uint64_t base; /* 0: none (an absent optional operand) */
  uint64_t offset;
} ty_dev_loc_t;

typedef enum ty_dev_ref_kind_e {
  TY_DEV_REF_NONE = 0, /* an absent optional operand: no buffer */
  TY_DEV_REF_VALUE,    /* graph value `value` */
  TY_DEV_REF_SCRATCH,  /* the executable's scratch memory */
  TY_DEV_REF_AUX,      /* the executable's read-only aux memory (tables) */
  TY_DEV_REF_ERR,      /* the error buffer (a kernel's `err` argument) */
  TY_DEV_REF_TABLE,    /* a backend's own region (cuda: address tables) */
  TY_DEV_REF_KIND_COUNT_
} ty_dev_ref_kind_t;

typedef struct ty_dev_ref_t {
  ty_dev_ref_kind_t kind;
  uint32_t value;
  uint64_t offset; /* bytes, added to the value's own offset */
} ty_dev_ref_t;

typedef struct ty_dev_exec_t {
  const char *label;        /* prefixes messages ("opencl:0", "cpu"); not owned */
  uint32_t align;           /* of arena slots, constants, scratch and aux */
  ty_owned_graph_t *graph;  /* owned */
  ty_memory_plan_t plan;
  uint64_t *const_offset;   /* per value: in the constants buffer */
  uint64_t const_bytes;
  uint64_t *fallback_offset; /* per value: unbound outputs' storage */
  uint64_t fallback_bytes;
  /* The unbound outputs' storage the core asked hooks.alloc for at the
   * first run that needed it (0: not yet). A backend handle: the backend
   * frees it when it destroys the executable, before ty_dev_exec_free. */
  uint64_t fallback;
  uint32_t *sorted_named;   /* bound values, sorted by name */
  uint32_t named_count;
  ty_dev_loc_t *loc;        /* per value, resolved at every run */
  bool *bound;              /* per value, during a resolve */
  ty_abi_buffer_t **buffer_of; /* per value: its binding's buffer in the last
                                  resolve (where bound[v]) */
  /* Handles the backend sets once its memory exists: CONSTANT and ARENA
   * values, and the bases of the other reference kinds. */
  uint64_t constants, arena;
  uint64_t base[TY_DEV_REF_KIND_COUNT_];
  /* Filled by the builders during compile (ty_dev_scratch, ty_dev_aux). */
  uint64_t scratch_bytes;
  unsigned char *aux_host;  /* until the backend uploads it */
  uint64_t aux_bytes, aux_cap;
} ty_dev_exec_t;

/* Copies `graph`, plans its memory with `align`, lays out constants and
 * unbound outputs, and indexes the bound values by name. On error (only
 * RESOURCE_EXHAUSTED) `x` is left for ty_dev_exec_free. `label` must
 * outlive `x`. */
ty_abi_status_t ty_dev_exec_init(ty_dev_exec_t *x, const ty_abi_graph_t *graph, uint32_t align,
                                 const char *label);
/* For a backend that copies and plans the graph itself (passes between
 * the copy and the plan): with x zeroed and label, align, graph and plan
 * set (x owns them from then on), lays out constants and unbound outputs
 * and indexes the bound values, as ty_dev_exec_init does after its plan. */
ty_abi_status_t ty_dev_exec_layout(ty_dev_exec_t *x);
/* Frees what init and the builders allocated (not the backend's memory). */
void ty_dev_exec_free(ty_dev_exec_t *x);

static inline const ty_abi_graph_t *ty_dev_exec_graph(const ty_dev_exec_t *x) {
  return &x->graph->graph;
}

/* `x` rounded up to the core's alignment. */
uint64_t ty_dev_exec_round_up(const ty_dev_exec_t *x, uint64_t bytes);

/* The bound value named `name`, or UINT32_MAX. */
uint32_t ty_dev_exec_find(const ty_dev_exec_t *x, const char *name);

/* What differs between devices when a run's locations are resolved. */
typedef struct ty_dev_hooks_t {
  void *user;
  /* A bound buffer's handle and size (required). */
  void (*buffer)(void *user, ty_abi_buffer_t *buffer, uint64_t *out_base, uint64_t *out_size);
  /* Where an unbound output `v` goes; NULL: at fallback_offset[v] of
   * x->fallback, which the core gets from `alloc` at the first need. */
  ty_abi_status_t (*unbound_output)(void *user, uint32_t v, ty_dev_loc_t *out);
  /* An unbound input flagged TY_VALUE_FLAG_LOSS_SEED; NULL: such an input
   * must be bound like any other. */
  ty_abi_status_t (*unbound_seed)(void *user, uint32_t v, ty_dev_loc_t *out);
  /* Where a CONSTANT or ARENA value lives; NULL: constants +
   * const_offset[v] and arena + the plan's offset. */
  ty_dev_loc_t (*place)(void *user, uint32_t v);
  /* With unbound_output NULL (then required): device memory of `bytes`
   * (0 when every unbound output is empty; a backend may round up) for
   * the unbound outputs, as a nonzero handle in *out_base. Called once
   * per executable; the result lands in x->fallback (see there who frees). */
  ty_abi_status_t (*alloc)(void *user, uint64_t bytes, uint64_t *out_base);
  /* Where an EXTERNAL value `v` lives (the backend's own memory: the plan
   * gave it no arena bytes, ty_memory_plan_opts_t.external); required when
   * the plan has one. */
  ty_dev_loc_t (*external)(void *user, uint32_t v);
} ty_dev_hooks_t;

/* Resolves loc[] for a run: the bindings first (each name must be a bound
 * value, its bytes inside the buffer: INVALID_ARGUMENT otherwise), then
 * the executable's own storage, unbound outputs and seeds (an unbound
 * input or state is INVALID_ARGUMENT), then state aliases and views.
 * Hooks with neither unbound_output nor alloc are INTERNAL at the first
 * unbound output. */
ty_abi_status_t ty_dev_exec_resolve(ty_dev_exec_t *x, const ty_abi_execute_args_t *args,
                                    const ty_dev_hooks_t *hooks);

/* Where `ref` points in this run (after a resolve). */
ty_dev_loc_t ty_dev_ref_loc(const ty_dev_exec_t *x, ty_dev_ref_t ref);

/* Calls `copy` for every state update the plan could not do in place, in
 * the plan's order (a copy of `bytes` from value `value` into state
 * `state`); the first error stops it. */
ty_abi_status_t ty_dev_exec_state_updates(const ty_dev_exec_t *x,
                                          ty_abi_status_t (*copy)(void *user, uint32_t state,
                                                                  uint32_t value,
                                                                  uint64_t bytes),
                                          void *user);

/* INVALID_ARGUMENT naming the node and what a kernel recorded in an error
 * buffer of TY_DEVICE_ERROR_BYTES bytes (device_errors.h). */
ty_abi_status_t ty_dev_data_error(const ty_dev_exec_t *x, const void *error_buffer);

/* ---- for op builders ---- */

typedef struct ty_dev_build_t ty_dev_build_t;
struct ty_dev_arg_t; /* device_ops.h */

/* How a backend moves bytes (its fills and copies), all that the builders
 * of the view ops below need. */
typedef struct ty_dev_movers_t {
  void (*fill)(ty_dev_build_t *b, ty_dev_ref_t dst, uint64_t size); /* zeros */
  void (*copy)(ty_dev_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t size);
  /* dims[0..rank) elements of `esize` bytes from x (element strides xs) to
   * y (strides ys). */
  void (*strided_copy)(ty_dev_build_t *b, ty_dev_ref_t x, ty_dev_ref_t y, size_t esize,
                       int rank, const int64_t *dims, const int64_t *xs, const int64_t *ys);
} ty_dev_movers_t;

/* What an op builder works with: the node, and a sticky status (the first
 * error wins; later calls are no-ops). `device` and `exec` are the
 * backend's own objects. */
struct ty_dev_build_t {
  ty_dev_exec_t *core;
  ty_abi_device_t *device;
  ty_abi_executable_t *exec;
  const ty_abi_graph_t *g;
  const ty_abi_node_t *node; /* NULL while building the state updates */
  uint32_t n;
  ty_abi_status_t status;
  uint64_t scratch_used; /* this node's scratch (nodes run one at a time) */
  bool deterministic;    /* the compile asked for deterministic=1 (ABI 1.10) */
  const void *hint;      /* the backend's plan for this node (cuda: its fusion), or NULL */
  const ty_dev_movers_t *move; /* for the view ops' builders */
  /* Appends one argument to the backend's launch `cmd` (device_ops.h's
   * ty_dev_arg_*, called only with a command and no error). */
  void (*arg)(ty_dev_build_t *b, void *cmd, const struct ty_dev_arg_t *arg);
};

/* Sets the build's status (once) to `code` with "LABEL: node N (OP): ..." */
void ty_dev_fail(ty_dev_build_t *b, ty_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const ty_abi_value_t *ty_dev_vin(const ty_dev_build_t *b, uint32_t i); /* NULL when absent */
const ty_abi_value_t *ty_dev_vout(const ty_dev_build_t *b, uint32_t o);
ty_dev_ref_t ty_dev_in(const ty_dev_build_t *b, uint32_t i); /* NONE when absent */
ty_dev_ref_t ty_dev_out(const ty_dev_build_t *b, uint32_t o);
ty_dev_ref_t ty_dev_none(void);
ty_dev_ref_t ty_dev_value(uint32_t value); /* any graph value */
ty_dev_ref_t ty_dev_ref_at(ty_dev_ref_t ref, uint64_t byte_offset);
/* `bytes` of this node's scratch (aligned; contents undefined at the
 * node's start). */
ty_dev_ref_t ty_dev_scratch(ty_dev_build_t *b, uint64_t bytes);
/* Data uploaded with the executable (e.g. RoPE frequencies), zeros when
 * `data` is NULL; the executable's own bytes for its whole life, so a
 * kernel may also keep state there (paged attention's split counts). */
ty_dev_ref_t ty_dev_aux(ty_dev_build_t *b, const void *data, uint64_t bytes);
int ty_dev_dt(const ty_abi_value_t *v); /* dtype code for kernels, 0 when absent */
int64_t ty_dev_numel(const ty_abi_value_t *v);

/* The view ops, built on b->move (device_views.c): reshape (and any
 * identity, e.g. tp_copy) is a copy; broadcast_to, transpose, slice and
 * concat strided copies; slice_backward a fill and a strided copy. A malformed `perm` or
 * `starts` attribute fails the build with INVALID_ARGUMENT. */
void ty_dev_build_reshape(ty_dev_build_t *b);
void ty_dev_build_broadcast_to(ty_dev_build_t *b);
void ty_dev_build_transpose(ty_dev_build_t *b);
void ty_dev_build_slice(ty_dev_build_t *b);
void ty_dev_build_slice_backward(ty_dev_build_t *b);
void ty_dev_build_concat(ty_dev_build_t *b);

/* ---- the op table ---- */

typedef void (*ty_dev_op_build_fn)(ty_dev_build_t *b);

typedef struct ty_dev_op_t {
  const char *op;
  ty_dev_op_build_fn build;
  ty_desc_accept_t accept; /* abi_graph.h */
} ty_dev_op_t;

/* The entry of `op` in a table ended by an entry whose op is NULL. */
const ty_dev_op_t *ty_dev_op_find(const ty_dev_op_t *table, const char *op);

/* What a backend adds around each node of ty_dev_build_nodes (all may be
 * NULL). */
typedef struct ty_dev_node_hooks_t {
  /* Called for every node n first, even one the plan skips; returns false
   * when the node is built by another's commands (cuda: fused), may set
   * b->hint. */
  bool (*visit)(ty_dev_build_t *b, uint32_t n);
  /* After node b->n's builder ran without error (cuda: padded rows). */
  void (*built)(ty_dev_build_t *b);
} ty_dev_node_hooks_t;

/* Compile's walk over b->g's nodes in order: for each node the plan does
 * not skip (a view reading its input) and `hooks` keeps, sets b->node, n
 * and scratch_used and calls its builder from `table`; a node whose op has
 * no entry fails the build (UNIMPLEMENTED, "no kernel for this op"). Stops
 * at the first error, which stays in b->status. */
void ty_dev_build_nodes(ty_dev_build_t *b, const ty_dev_op_t *table,
                        const ty_dev_node_hooks_t *hooks);

/* Op-specific limits beyond dtypes (attention head_dim, causal=0, ...):
 * writes a reason and returns false when the node cannot run. */
typedef bool (*ty_dev_op_check_fn)(const ty_abi_graph_t *g, const ty_abi_node_t *node,
                                   char *reason, size_t capacity);

/* graph_supports over an op table: a node is supported when `table` has
 * its op ("PLUGIN has no kernel for op 'X'" otherwise), its operands' dtypes
 * pass the entry's accept rule, and `check` (NULL: none) passes it. */
void ty_dev_supports(const ty_abi_graph_t *g, const ty_dev_op_t *table, const char *plugin,
                     ty_dev_op_check_fn check, ty_abi_node_support_t *out);

/* ---- for the backend entries ---- */

/* Declares a device plugin's four graph entries, PREFIX_graph_supports,
 * PREFIX_graph_compile, PREFIX_executable_destroy and
 * PREFIX_executable_execute, with the signatures of their fields in
 * ty_backend_api_t (backend_abi.h), so the list is written once. */
#define TY_DEV_GRAPH_ENTRIES(prefix)                                                          \
  ty_abi_status_t prefix##_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *graph, \
                                          ty_abi_node_support_t *out_support);               \
  ty_abi_status_t prefix##_graph_compile(ty_abi_device_t *device,                           \
                                         const ty_abi_compile_args_t *args,                 \
                                         ty_abi_executable_t **out_executable);             \
  void prefix##_executable_destroy(ty_abi_executable_t *executable);                        \
  ty_abi_status_t prefix##_executable_execute(ty_abi_executable_t *executable,              \
                                              const ty_abi_execute_args_t *args)

/* device_info: copies `info` into the host's struct, no further than the
 * smaller of the two struct sizes, keeping the host's struct_size. */
void ty_dev_device_info_copy(const ty_abi_device_info_t *info, ty_abi_device_info_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_DEVICE_EXEC_H_ */
