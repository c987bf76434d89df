/* Liveness-based memory planning for per-op backends: every intermediate
 * value gets an offset in one arena, reusing the bytes of values whose last
 * reader has run; optimizer, KV-cache and accumulator updates (an add of
 * one shape into its state) write straight into their state's buffer when
 * nothing reads the old state afterwards; and a reshape
 * is a view (its output shares its input's bytes, which stay live until the
 * view's last reader), so executors skip it; a backend may offer a node's
 * output its input's bytes (ty_memory_plan_opts_t). Depends only on
 * hal/backend_abi.h. */
#ifndef TY_HAL_MEMORY_PLAN_H_
#define TY_HAL_MEMORY_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/abi_graph.h"

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
  TY_STORAGE_EXTERNAL = 5,    /* kept by the backend in memory of its own
                                 (ty_memory_plan_opts_t.external) */
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
  /* Per node: output 0 took the bytes of input reuse_input[n] (opts). */
  bool *in_place;
  /* State updates that still need a copy after the last node. */
  uint32_t copy_count;
  ty_abi_state_update_t *copies;
} ty_memory_plan_t;

/* Plans `graph` with arena offsets aligned to `alignment` (power of two).
 * Returns 0 on success, or TY_CODE_RESOURCE_EXHAUSTED on out-of-memory. */
ty_code_t ty_memory_plan_build(const ty_owned_graph_t *graph, uint64_t alignment,
                               ty_memory_plan_t *out_plan);

/* What a backend may tell the planner beyond the graph (every array is per
 * node and may be NULL: none of that kind).
 *
 * run_at[n] is the node whose command does node n's work: n itself, an
 * earlier node whose kernel also writes n's outputs (a matmul that writes
 * the add after it), or a later one that reads n's inputs in n's stead (a
 * cast folded into the norm backward that reads its input). A node's
 * outputs are placed when the command that writes them runs, and its
 * inputs stay live until then, so nothing the command touches lands on
 * bytes another live value holds.
 *
 * reuse_input[n] >= 0 offers node n's output 0 the bytes of its input
 * reuse_input[n] (the backend vouches that n's command reads each element
 * before it writes it, or reads nothing after writing). The plan takes the
 * offer only when it is safe: the input's root (through reshape views) is
 * an arena value that nothing reads after node n (no later node, no view,
 * no other node done by n's command), the output is an arena value (not
 * bound, not a graph output, not a state update) of the root's byte size,
 * and n runs at its own position. The output then becomes a view of the
 * root (views of the output follow it); n still runs (plan.skip[n] stays
 * false) and plan.in_place[n] says the offer was taken.
 *
 * extra_read[n] (UINT32_MAX = none) is one more value n's command reads
 * beyond its inputs: it stays live until that command runs.
 *
 * external (per VALUE, may be NULL) marks intermediates the backend keeps
 * in memory of its own across runs (the cuda executor's bf16 weight copies
 * that its optimizer writes): they get TY_STORAGE_EXTERNAL and no arena
 * bytes, and no other value is ever placed on them. Only values that would
 * otherwise be ARENA values are taken; a reshape of one is a view of it. */
typedef struct ty_memory_plan_opts_t {
  const uint32_t *run_at;
  const int32_t *reuse_input;
  const uint32_t *extra_read;
  const bool *external;
} ty_memory_plan_opts_t;

/* Plans `graph` as ty_memory_plan_build does, with `opts` (NULL: none). */
ty_code_t ty_memory_plan_build_opts(const ty_owned_graph_t *graph, uint64_t alignment,
                                    const ty_memory_plan_opts_t *opts,
                                    ty_memory_plan_t *out_plan);

/* ty_memory_plan_build_opts with run_at alone; run_at NULL is
 * ty_memory_plan_build. */
ty_code_t ty_memory_plan_build_fused(const ty_owned_graph_t *graph, uint64_t alignment,
                                     const uint32_t *run_at, ty_memory_plan_t *out_plan);
void ty_memory_plan_free(ty_memory_plan_t *plan);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_MEMORY_PLAN_H_ */
