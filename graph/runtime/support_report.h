/* What a backend says about each node of a lowered graph (its
 * graph_supports verdicts), grouped by op, dtype, verdict and reason: the
 * error a session gives for a graph it cannot run (every unsupported node,
 * not the first), and the table `trainyard check` prints for what a model's
 * graphs need from a backend.
 *
 * The report owns its memory; not thread-safe. */
#ifndef TY_GRAPH_SUPPORT_REPORT_H_
#define TY_GRAPH_SUPPORT_REPORT_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nodes of one op and dtype with the same verdict and reason. */
typedef struct ty_support_group_t {
  const char *op;       /* points into the graph the report was made for */
  ty_dtype_t dtype;     /* of the node's first float operand (else its first) */
  bool supported;
  char reason[160];     /* the plugin's words; "" when supported */
  uint32_t nodes;       /* how many nodes */
  uint32_t first_node;  /* the first of them, in topological order */
  char example[192];    /* the first node's shapes, e.g. "[2,16,32] [32] -> [2,16,32]" */
} ty_support_group_t;

typedef struct ty_support_report_t {
  uint32_t node_count;
  uint32_t unsupported_nodes;
  ty_abi_node_support_t *verdicts; /* per node, as the plugin wrote them */
  uint32_t group_count;
  ty_support_group_t *groups;      /* in order of first appearance */
} ty_support_report_t;

/* Asks `device`'s backend for a verdict on every node of `graph`.
 * UNIMPLEMENTED (naming the backend) when it lacks the ABI 1.1 graph
 * entries; the plugin's own error when the check itself fails. The caller
 * destroys *out_report (which refers to `graph`: keep it alive). */
ty_status_t ty_support_report_create(ty_device_t *device, const ty_abi_graph_t *graph,
                                     ty_support_report_t **out_report);
void ty_support_report_destroy(ty_support_report_t *report);

/* OK when every node is supported; otherwise FAILED_PRECONDITION naming the
 * device and every unsupported group (op, dtype, node count, an example
 * node's shapes, the plugin's reason). */
ty_status_t ty_support_report_error(const ty_support_report_t *report, ty_device_t *device);

/* The dtype a node is named by in reports: its first float operand's (inputs
 * first), else its first operand's. */
ty_dtype_t ty_support_node_dtype(const ty_abi_graph_t *graph, const ty_abi_node_t *node);

/* "[2,16,32] [32] - -> [2,16,32] [2,16]": the node's input shapes ("-" for
 * an absent optional input), then its output shapes, into out. */
void ty_support_node_shapes(const ty_abi_graph_t *graph, const ty_abi_node_t *node, char *out,
                            size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_SUPPORT_REPORT_H_ */
