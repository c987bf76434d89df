/* Liveness-based memory planning for per-op backends: every intermediate
 * value gets an offset in one arena, reusing the bytes of values whose last
 * reader has run; optimizer and KV-cache updates write straight into their
 * state's buffer when nothing reads the old state afterwards; and a reshape
 * is a view (its output shares its input's bytes, which stay live until the
 * view's last reader), so executors skip it. Depends only on
 * hal/backend_abi.h. */
#ifndef TY_BACKENDS_COMMON_MEMORY_PLAN_H_
#define TY_BACKENDS_COMMON_MEMORY_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#include "backends/common/abi_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_storage_kind_e {
  TY_STORAGE_BOUND = 0,       /* INPUT, STATE or OUTPUT: bound by name */
  TY_STORAGE_CONSTANT = 1,    /* the graph's const_data */
  TY_STORAGE_ARENA = 2,       /* arena + offset */
  TY_STORAGE_STATE_ALIAS = 3, /* written in place into state `alias` */
  TY_STORAGE_VIEW = 4,        /* the bytes of value `alias` (a reshape's
                                 output; alias is never itself a view) */
} ty_storage_kind_t;

typedef struct ty_value_storage_t {
  ty_storage_kind_t kind;
  uint64_t offset;  /* TY_STORAGE_ARENA */
  uint32_t alias;   /* TY_STORAGE_STATE_ALIAS: the state value;
                       TY_STORAGE_VIEW: the value whose bytes it reads */
} ty_value_storage_t;

typedef struct ty_memory_plan_t {
  uint32_t value_count;
  ty_value_storage_t *storage; /* per value */
  uint64_t arena_bytes;        /* peak arena size */
  uint64_t naive_bytes;        /* sum of all intermediates (for reports) */
  /* Per node: nothing to run (a reshape planned as a view). */
  bool *skip;
  /* State updates that still need a copy after the last node. */
  uint32_t copy_count;
  ty_abi_state_update_t *copies;
} ty_memory_plan_t;

/* Plans `graph` with arena offsets aligned to `alignment` (power of two).
 * Returns 0 on success, or TY_CODE_RESOURCE_EXHAUSTED on out-of-memory. */
ty_code_t ty_memory_plan_build(const ty_owned_graph_t *graph, uint64_t alignment,
                               ty_memory_plan_t *out_plan);

/* The same for a backend that fuses nodes: run_at[n] is the node whose
 * command does node n's work: n itself, an earlier node whose kernel also
 * writes n's outputs (a matmul that writes the add after it), or a later
 * one that reads n's inputs in n's stead (a cast folded into the norm
 * backward that reads its input). A node's outputs are placed when the
 * command that writes them runs, and its inputs stay live until then, so
 * nothing the command touches lands on bytes another live value holds.
 * run_at NULL is ty_memory_plan_build. */
ty_code_t ty_memory_plan_build_fused(const ty_owned_graph_t *graph, uint64_t alignment,
                                     const uint32_t *run_at, ty_memory_plan_t *out_plan);
void ty_memory_plan_free(ty_memory_plan_t *plan);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_MEMORY_PLAN_H_ */
