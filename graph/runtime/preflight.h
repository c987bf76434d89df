/* The pre-flight memory plan of a run: the device bytes of parameters,
 * gradients, optimizer state, saved activations, workspace, inputs and
 * outputs, and their peak, computed from the graphs a run compiles (train
 * step, optimizer step, evaluation) before anything is allocated. Each
 * graph is lowered and placed by the liveness planner the host executor
 * places its activation arena with (hal/memory_plan.h), so for
 * host-executor backends the arena is exactly what compile allocates.
 *
 * Ownership: the plan owns what it holds; ty_preflight_deinit frees it. Not
 * thread-safe. */
#ifndef TY_GRAPH_PREFLIGHT_H_
#define TY_GRAPH_PREFLIGHT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_plan_item_e {
  TY_PLAN_PARAMETERS = 0,  /* trained weights (STATE) */
  TY_PLAN_GRADIENTS = 1,   /* parameter gradients live at the arena's peak,
                              and accumulators */
  TY_PLAN_OPTIMIZER = 2,   /* optimizer state in device memory */
  TY_PLAN_ACTIVATIONS = 3, /* the rest of the activation arenas: saved
                              activations, their gradients, transients */
  TY_PLAN_WORKSPACE = 4,   /* the largest kernel scratch of one node */
  TY_PLAN_IO = 5,          /* inputs and outputs bound at every run */
  TY_PLAN_OTHER_STATE = 6, /* other states (KV caches) */
  TY_PLAN_ITEM_COUNT = 7,
} ty_plan_item_t;

/* "parameters", "gradients", "optimizer state", ... */
const char *ty_plan_item_name(ty_plan_item_t item);

#define TY_PREFLIGHT_MAX_GRAPHS 8
#define TY_PREFLIGHT_DETAIL 12 /* largest values listed at a graph's peak */

/* One value live at a graph's peak: its bytes and what made it ("matmul
 * bf16 [1,131072,8192], layer 3 mlp"). */
typedef struct ty_preflight_live_t {
  uint64_t bytes;
  char what[112];
} ty_preflight_live_t;

typedef struct ty_preflight_graph_t {
  char label[32];
  uint64_t arena;      /* the planner's arena (with alignment and gaps) */
  uint64_t live_peak;  /* the most bytes live in it at once */
  uint64_t gradients;  /* parameter gradients live at that moment */
  uint64_t workspace;  /* its largest kernel scratch */
  uint32_t nodes;
  /* Where the peak is (--plan-detail): the node (lowered order) whose
   * outputs make it, its op, how many arena values are live there, and the
   * largest of them, largest first. */
  uint32_t peak_node;
  char peak_op[32];
  uint32_t peak_values;
  uint32_t detail_count;
  ty_preflight_live_t detail[TY_PREFLIGHT_DETAIL];
} ty_preflight_graph_t;

typedef struct ty_preflight_t {
  uint64_t bytes[TY_PLAN_ITEM_COUNT]; /* device bytes per item */
  uint64_t host_bytes;                /* offloaded to pinned host memory */
  uint64_t peak;                      /* the sum of the device items */
  uint32_t graph_count;
  ty_preflight_graph_t graphs[TY_PREFLIGHT_MAX_GRAPHS];
  char **state_names; /* states counted already (graphs share them by name) */
  uint32_t state_count, state_capacity;
} ty_preflight_t;

void ty_preflight_init(ty_preflight_t *plan);
void ty_preflight_deinit(ty_preflight_t *plan);

/* Adds a graph the run compiles (its states only once across graphs: a
 * shared parameter is one buffer). Every graph's arena counts, since each
 * executable holds its own for its life; workspace is the largest of any
 * one node, since runs are sequential. */
ty_status_t ty_preflight_add(ty_preflight_t *plan, const ty_graph_t *graph, const char *label);

/* RESOURCE_EXHAUSTED when the peak exceeds `limit` (0: no check), naming
 * `limit_what` ("--memory-limit 24 GiB", "cpu:0 (23.5 GiB)"), every item
 * largest first and the levers that shrink each. */
ty_status_t ty_preflight_check(const ty_preflight_t *plan, uint64_t limit,
                               const char *limit_what);

/* The plan as lines ("  parameters   25.1 GiB\n..."), each prefixed with
 * `indent`. The caller frees *out_text. */
ty_status_t ty_preflight_format(const ty_preflight_t *plan, const char *indent,
                                char **out_text);

/* Per graph, where its activation peak is: the node and the largest values
 * live there, one per line (`trainyard compile --plan-only --plan-detail`).
 * The caller frees *out_text. */
ty_status_t ty_preflight_format_detail(const ty_preflight_t *plan, const char *indent,
                                       char **out_text);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_PREFLIGHT_H_ */
