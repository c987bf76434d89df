/* The cpu plugin's fast-kernel table: maps a node (op and operand dtypes) to
 * its oneDNN/OpenMP kernel. A node without one runs the reference kernel on
 * the same device (never another device). */
#include <string.h>

#include "backends/cpu/cpu_internal.h"

typedef struct {
  const char *op;
  cpu_kernel_fn_t fn;
} cpu_kernel_entry_t;

/* Filled in by the kernel families (cpu_kernels_*.c) as they land. */
static const cpu_kernel_entry_t cpu_kernel_table[] = {
    {NULL, NULL},
};

cpu_kernel_fn_t cpu_kernel_find(const ty_abi_graph_t *graph, const ty_abi_node_t *node) {
  (void)graph;
  for (const cpu_kernel_entry_t *e = cpu_kernel_table; e->op; ++e) {
    if (strcmp(e->op, node->op) == 0) return e->fn;
  }
  return NULL;
}
