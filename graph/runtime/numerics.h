/* Numerics checks on a graph's intermediates: every node output exposed
 * (kept and readable after a run), then the first node, in execution order,
 * whose output holds a NaN or an infinity, with its inputs' figures. Used by
 * `--check-numerics` (forward, train) and `conform --bisect`.
 *
 * Library code: nothing is printed; the caller formats the finding. Not
 * thread-safe (it reads a session). */
#ifndef TY_GRAPH_NUMERICS_H_
#define TY_GRAPH_NUMERICS_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names every node output that has no name "n<node>.<k>" and marks every
 * node output an OUTPUT, so a session of the graph keeps and hands back
 * every intermediate. Changes the graph's hash (it is a different graph). */
ty_status_t ty_graph_expose_all(ty_graph_t *graph);

/* Figures of one float tensor. */
typedef struct ty_numerics_stats_t {
  int64_t count; /* elements */
  int64_t nan, inf;
  double min, max; /* over the finite elements; NAN when there are none */
} ty_numerics_stats_t;

/* Counts NaNs and infinities and takes min/max of `count` elements of float
 * data of `dtype` (f32, f64, bf16, f16). False for another dtype. */
bool ty_numerics_stats(ty_dtype_t dtype, const void *data, uint64_t count,
                       ty_numerics_stats_t *out);

#define TY_NUMERICS_MAX_INPUTS 8

typedef struct ty_numerics_input_t {
  ty_tensor_desc_t desc; /* desc.name: the value's name ("" if it has none) */
  ty_value_role_t role;
  uint32_t producer;     /* node index, UINT32_MAX for inputs/state/constants */
  bool read;             /* stats hold: a float value the session handed back */
  bool updated;          /* a state the run updates: the figures are of its
                            value after the run, not the one the node read */
  ty_numerics_stats_t stats;
} ty_numerics_input_t;

typedef struct ty_numerics_finding_t {
  bool found;            /* false: every exposed float output is finite */
  uint32_t nodes_checked;
  uint32_t node;         /* the first node with a non-finite output */
  char op[32];
  uint32_t output;       /* which of its outputs */
  ty_tensor_desc_t desc; /* that output's; desc.name its name */
  ty_numerics_stats_t stats;
  bool backward;         /* the node comes after the forward (node >= forward_nodes) */
  /* The model block it belongs to: the node's region (graph.h), or for a
   * backward node (which carries none) the latest region among the forward
   * nodes whose outputs it reads. 0: outside the blocks. */
  uint32_t region;
  bool region_derived;
  uint32_t input_count;  /* at most TY_NUMERICS_MAX_INPUTS are described */
  uint32_t input_total;
  ty_numerics_input_t inputs[TY_NUMERICS_MAX_INPUTS];
} ty_numerics_finding_t;

/* After a run of `session` (compiled from `graph` after ty_graph_expose_all),
 * reads the node outputs in node order and stops at the first float output
 * holding a NaN or an infinity. Nodes [0, forward_nodes) are the forward.
 * Values the session does not hold (removed in lowering) are skipped.
 * Errors: the session's read errors; RESOURCE_EXHAUSTED. */
ty_status_t ty_numerics_find(ty_session_t *session, const ty_graph_t *graph,
                             uint32_t forward_nodes, ty_numerics_finding_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_NUMERICS_H_ */
