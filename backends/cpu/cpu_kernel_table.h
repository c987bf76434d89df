/* The cpu plugin's kernel table, as the SDK library ty_host_kernels
 * (installed as <trainyard/host_kernels.h> and libty_host_kernels.a) offers
 * it to other plugins on host-addressable memory (the dataflow plugin), so
 * that they compute exactly as the cpu plugin does. Depends only on the
 * backend support library's host executor types. */
#ifndef TY_BACKENDS_CPU_CPU_KERNEL_TABLE_H_
#define TY_BACKENDS_CPU_CPU_KERNEL_TABLE_H_

#include "trainyard/host_executor.h"
#include "trainyard/backend_abi.h"

/* Everything a fast kernel needs to run one node (the host executor's
 * context: graph, node, data[v] per value, thread budget). */
typedef ty_host_node_ctx_t cpu_node_ctx_t;

/* Returns NULL (OK) or a status made with ty_plugin_error(). */
typedef ty_abi_status_t (*cpu_kernel_fn_t)(const cpu_node_ctx_t *ctx);

/* The fast kernel for `node` (given its operand dtypes), or NULL when there
 * is none and the reference kernel must run. Thread-safe (a static table). */
cpu_kernel_fn_t cpu_kernel_find(const ty_abi_graph_t *graph,
                                const ty_abi_node_t *node);

#endif /* TY_BACKENDS_CPU_CPU_KERNEL_TABLE_H_ */
