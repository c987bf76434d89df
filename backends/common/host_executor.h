/* A complete graph executor for backends whose device memory the host can
 * address (the cpu plugin, the template, emulated devices): compile copies
 * the graph, plans memory into one arena and picks a kernel per node through
 * the plugin's callback; execute resolves named bindings, runs the nodes in
 * order (the f64 reference kernel where the plugin has none) and applies
 * state updates. A plugin on such a device writes kernels, not plumbing.
 * Depends only on hal/backend_abi.h and the backend support library. */
#ifndef TY_BACKENDS_COMMON_HOST_EXECUTOR_H_
#define TY_BACKENDS_COMMON_HOST_EXECUTOR_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/abi_graph.h"
#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a kernel gets for one node. data[v] is the dense row-major storage
 * of value v in its dtype; outputs may alias inputs only for in-place
 * updates (adamw_update, sgd_update, kv_cache_write, paged_kv_write). */
typedef struct ty_host_node_ctx_t {
  const ty_abi_graph_t *graph;
  const ty_abi_node_t *node;
  uint32_t node_index;
  void *const *data;
  uint32_t threads; /* the device's thread budget */
  /* The compile asked for deterministic=1 (ABI 1.10, "Deterministic mode"
   * in docs/plugin-abi.md): a kernel that honours it sums in an order fixed
   * by the problem, never by the rows, the batch or `threads`. */
  bool deterministic;
} ty_host_node_ctx_t;

/* Returns NULL (OK) or a status made with ty_plugin_error(). */
typedef ty_abi_status_t (*ty_host_kernel_fn_t)(const ty_host_node_ctx_t *ctx);

/* Picks the kernel of node `node_index`: a function, or NULL to run the
 * reference kernel. Setting *out_error refuses the graph (e.g. a plugin
 * mode that forbids falling back to the reference). */
typedef ty_host_kernel_fn_t (*ty_host_kernel_finder_t)(void *user, const ty_abi_graph_t *graph,
                                                       uint32_t node_index,
                                                       ty_abi_status_t *out_error);

/* How the executor reaches a bound buffer's bytes. */
typedef void (*ty_host_buffer_view_t)(ty_abi_buffer_t *buffer, unsigned char **out_data,
                                      uint64_t *out_size);

typedef struct ty_host_executor_t ty_host_executor_t;

/* What the executor itself reads from a compile's options: the host's
 * debugging requests (ABI 1.9 "debug." keys, hal/backend_abi.h) and the
 * deterministic request (ABI 1.10). */
typedef struct ty_host_executor_options_t {
  /* debug.guards=SEED: every activation gets its own arena slot (no reuse)
   * with a guard gap of TY_HOST_GUARD_BYTES before it and after it, filled
   * at each run with a pattern of its own (from SEED, the run and the gap)
   * and checked after every node; the first damaged gap fails the run,
   * naming the node that ran and the slot beside the gap. Slots start
   * every run as 0xFF bytes (NaN in every float dtype). */
  bool guards;
  uint64_t guard_seed;
  /* deterministic=1 (TY_ABI_DETERMINISTIC_OPTION): the executor passes it to
   * every kernel (ty_host_node_ctx_t.deterministic). The SDK's reference
   * kernels honour it already (one thread, f64 sums in a fixed order per
   * element); a plugin with kernels of its own that are not invariant must
   * refuse it with UNIMPLEMENTED, naming what is not. */
  bool deterministic;
} ty_host_executor_options_t;

#define TY_HOST_GUARD_BYTES 64u

/* Reads the "debug." keys and `deterministic` of `args` into *out (zeroed
 * first; debug keys it does not know are ignored, as ABI 1.9 asks) and sets
 * *out_other to the first other option (NULL: none), for the plugin to take
 * or refuse with its own message. INVALID_ARGUMENT, prefixed with `plugin`,
 * for a debug.guards value that is not a decimal number or a deterministic
 * value other than "1" or "0". */
ty_abi_status_t ty_host_executor_read_options(const ty_abi_compile_args_t *args,
                                              const char *plugin,
                                              ty_host_executor_options_t *out,
                                              const ty_abi_option_t **out_other);

/* graph_supports for a host device: every op the reference implements, for
 * operand dtypes in `dtype_mask`. `plugin` names the plugin in reasons. */
ty_abi_status_t ty_host_supports(const ty_abi_graph_t *graph, uint32_t dtype_mask,
                                 ty_abi_node_support_t *out_support);

/* Compiles `graph`. `finder` may be NULL (reference kernels throughout).
 * `plugin` (e.g. "cpu") prefixes messages. */
ty_abi_status_t ty_host_executor_create(const ty_abi_graph_t *graph, const char *plugin,
                                        ty_host_kernel_finder_t finder, void *finder_user,
                                        ty_host_executor_t **out_executor);
/* ty_host_executor_create with options (NULL: none). */
ty_abi_status_t ty_host_executor_create_opts(const ty_abi_graph_t *graph, const char *plugin,
                                             ty_host_kernel_finder_t finder, void *finder_user,
                                             const ty_host_executor_options_t *options,
                                             ty_host_executor_t **out_executor);
void ty_host_executor_destroy(ty_host_executor_t *executor);

/* Runs once with named bindings. An unbound INPUT flagged
 * TY_VALUE_FLAG_LOSS_SEED reads ones; any other unbound INPUT or STATE is
 * INVALID_ARGUMENT. A kernel's error comes back prefixed with the node
 * ("node 14 (gelu, output 'h.0.mlp.act'): ..."); with debug guards, a
 * damaged guard gap is DATA_LOSS naming the node and the slot. */
ty_abi_status_t ty_host_executor_run(ty_host_executor_t *executor,
                                     const ty_abi_execute_args_t *args,
                                     ty_host_buffer_view_t view, uint32_t threads);

/* The executor's graph, and how many nodes run on the reference kernel. */
const ty_abi_graph_t *ty_host_executor_graph(const ty_host_executor_t *executor);
uint32_t ty_host_executor_reference_nodes(const ty_host_executor_t *executor);
/* Whether the last run left the loss-gradient seed unbound (ones used). */
bool ty_host_executor_seed_defaulted(const ty_host_executor_t *executor);
/* Bytes of the activation arena the executor allocated at create. */
uint64_t ty_host_executor_arena_bytes(const ty_host_executor_t *executor);
/* executable_memory (ABI 1.3) for a host-executor plugin: the arena, and
 * the largest kernel workspace of one node (ty_desc_node_workspace_bytes). */
void ty_host_executor_memory(const ty_host_executor_t *executor,
                             ty_abi_executable_memory_t *out);
/* device_memory (ABI 1.3) from the plugin's host meter (host_meter.h). */
void ty_host_device_memory(uint32_t reset_peak, ty_abi_device_memory_t *out);
/* FAILED_PRECONDITION naming the first TY_VALUE_FLAG_HOST_RESIDENT value of
 * `graph`: a device whose memory is host memory has nothing to offload to. */
ty_abi_status_t ty_host_refuse_offload(const ty_abi_graph_t *graph, const char *plugin);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_HOST_EXECUTOR_H_ */
