/* The graph IR: values (tensors) and nodes (ops of op set v1) built with a
 * checked builder API. Every node's outputs are inferred by the op set when
 * it is added, so a graph that builds is well-typed. Parameters and optimizer
 * moments are STATE values; per-run data are INPUT values; a state update
 * names the value a state takes after each run.
 *
 * Ownership: the graph owns everything it holds. Not thread-safe for
 * mutation; concurrent readers are fine. */
#ifndef TY_GRAPH_GRAPH_H_
#define TY_GRAPH_GRAPH_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/status.h"
#include "hal/tensor.h"
#include "ops/attrs.h"
#include "ops/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_graph_t ty_graph_t;

/* What a value's bytes are for, in memory plans (graph/memory_plan.h). Set
 * by whoever builds the value (the train step marks parameters, optimizer
 * state and gradients); core-only, not part of the lowered graph or its
 * hash. */
typedef enum ty_memory_class_e {
  TY_MEMORY_OTHER = 0,      /* activations, inputs, outputs, ... */
  TY_MEMORY_PARAMETER = 1,  /* a trained parameter (STATE) */
  TY_MEMORY_OPTIMIZER = 2,  /* optimizer state (STATE) */
  TY_MEMORY_GRADIENT = 3,   /* a parameter's gradient or its accumulator */
} ty_memory_class_t;

/* Checkpointing regions (ty_graph_node_t.region): models tag the nodes of
 * each transformer block's two halves, so that the recompute pass (graph/
 * autodiff.h) knows what a layer is. 0 is "no region". */
#define TY_REGION_ATTENTION 0u
#define TY_REGION_MLP 1u
#define TY_REGION(layer, part) (1u + 2u * (uint32_t)(layer) + (part))
#define TY_REGION_LAYER(region) (((region) - 1u) / 2u)
#define TY_REGION_PART(region) (((region) - 1u) % 2u)

typedef struct ty_graph_value_t {
  ty_tensor_desc_t desc; /* desc.name is the value's name ("" if none) */
  ty_value_role_t role;
  uint32_t flags;            /* TY_VALUE_FLAG_OUTPUT, TY_VALUE_FLAG_LOSS_SEED */
  uint32_t producer;         /* node index, UINT32_MAX for inputs/state/constants */
  uint32_t producer_output;  /* which output of the producer */
  void *const_data;          /* owned; constants only */
  size_t const_bytes;
  uint8_t memory_class;      /* ty_memory_class_t */
} ty_graph_value_t;

typedef struct ty_graph_node_t {
  char op[32];
  ty_attrs_t attrs;
  uint32_t input_count;
  uint32_t output_count;
  ty_value_id_t *inputs; /* owned; TY_VALUE_NONE for an absent optional */
  ty_value_id_t *outputs; /* owned */
  uint32_t region;        /* TY_REGION(layer, part), or 0 */
  /* The piece (1, 2, ...) of a chunked block the node belongs to, 0 none
   * (ty_graph_set_chunk). Like regions, no computation and no hash. */
  uint32_t chunk;
} ty_graph_node_t;

ty_status_t ty_graph_create(ty_graph_t **out_graph);
void ty_graph_destroy(ty_graph_t *graph);

/* Per-run input bound by name. `name` must be unique and non-empty. */
ty_status_t ty_graph_add_input(ty_graph_t *graph, const char *name,
                               ty_dtype_t dtype, uint32_t rank,
                               const int64_t *dims, ty_value_id_t *out_value);
/* Device-resident state (parameter, optimizer moment). Named, unique. */
ty_status_t ty_graph_add_state(ty_graph_t *graph, const char *name,
                               ty_dtype_t dtype, uint32_t rank,
                               const int64_t *dims, ty_value_id_t *out_value);
/* A constant; `data` (dense, row-major) is copied. `name` may be NULL. */
ty_status_t ty_graph_add_constant(ty_graph_t *graph, const char *name,
                                  ty_dtype_t dtype, uint32_t rank,
                                  const int64_t *dims, const void *data,
                                  ty_value_id_t *out_value);
/* A rank-0 constant of a float dtype holding `value` (rounded to dtype). */
ty_status_t ty_graph_add_scalar(ty_graph_t *graph, ty_dtype_t dtype,
                                double value, ty_value_id_t *out_value);

/* Adds a node; infers its outputs through the op set. `output_count` must
 * equal the number of outputs the op makes (INVALID_ARGUMENT otherwise).
 * `attrs` may be NULL. On error the graph is unchanged and the message names
 * the op and the node index. */
ty_status_t ty_graph_add_node(ty_graph_t *graph, const char *op,
                              const ty_value_id_t *inputs, uint32_t input_count,
                              const ty_attrs_t *attrs,
                              ty_value_id_t *out_outputs, uint32_t output_count);
/* Shorthand for single-output ops. */
ty_status_t ty_graph_add_node1(ty_graph_t *graph, const char *op,
                               const ty_value_id_t *inputs,
                               uint32_t input_count, const ty_attrs_t *attrs,
                               ty_value_id_t *out_output);

/* Nodes added from now on carry `region` (0: none); returns the previous
 * one. Regions change no computation and no hash: they tell the recompute
 * pass where a block begins and ends. */
uint32_t ty_graph_set_region(ty_graph_t *graph, uint32_t region);

/* Nodes added from now on carry `chunk` (0: none); returns the previous
 * one. A model tags each piece of a block it runs over a few tokens at a
 * time (the chunked MLP) with its own number, so that autodiff (autodiff.h)
 * recomputes each piece just before its backward instead of the whole
 * block at once, and gives a value that only the pieces' slices read (and
 * that they tile) its gradient as one concat of theirs. */
uint32_t ty_graph_set_chunk(ty_graph_t *graph, uint32_t chunk);

/* Records what `value`'s bytes are for (memory plans only). */
ty_status_t ty_graph_set_memory_class(ty_graph_t *graph, ty_value_id_t value,
                                      ty_memory_class_t memory_class);

/* Flags STATE value `value` TY_VALUE_FLAG_HOST_RESIDENT (ABI 1.3): the
 * device keeps it in pinned host memory (optimizer offload).
 * INVALID_ARGUMENT for a value that is not a state. */
ty_status_t ty_graph_mark_host_resident(ty_graph_t *graph, ty_value_id_t value);

/* Records the memory levers the graph was built with ("recompute=layer
 * loss_chunk=256 ..."; ty_abi_graph_t.levers): one line of at most 255
 * bytes, part of the canonical text and hash when not empty. */
ty_status_t ty_graph_set_levers(ty_graph_t *graph, const char *levers);
const char *ty_graph_levers(const ty_graph_t *graph);

/* Names a value (unique) and marks it readable after a run. */
ty_status_t ty_graph_set_output(ty_graph_t *graph, ty_value_id_t value,
                                const char *name);
/* Gives a value a unique name without marking it an output. */
ty_status_t ty_graph_set_name(ty_graph_t *graph, ty_value_id_t value,
                              const char *name);
/* Marks a float INPUT as the graph's per-token loss-gradient seed
 * (TY_VALUE_FLAG_LOSS_SEED): a session may run without binding it, and the
 * backend then uses ones. At most one per graph (ALREADY_EXISTS);
 * INVALID_ARGUMENT for a value that is not a float input. */
ty_status_t ty_graph_mark_loss_seed(ty_graph_t *graph, ty_value_id_t value);
/* After each run, STATE value `state` takes the content of `value` (same
 * dtype and shape). At most one update per state. */
ty_status_t ty_graph_set_state_update(ty_graph_t *graph, ty_value_id_t state,
                                      ty_value_id_t value);

/* NOT_FOUND when no value has that name. */
ty_status_t ty_graph_find(const ty_graph_t *graph, const char *name,
                          ty_value_id_t *out_value);

uint32_t ty_graph_value_count(const ty_graph_t *graph);
const ty_graph_value_t *ty_graph_value(const ty_graph_t *graph,
                                       ty_value_id_t value);
uint32_t ty_graph_node_count(const ty_graph_t *graph);
const ty_graph_node_t *ty_graph_node(const ty_graph_t *graph, uint32_t node);
uint32_t ty_graph_update_count(const ty_graph_t *graph);
ty_abi_state_update_t ty_graph_update(const ty_graph_t *graph, uint32_t index);

const char *ty_value_role_name(ty_value_role_t role);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_GRAPH_H_ */
