/* A plugin-owned deep copy of an ABI graph (the host's descriptor is only
 * valid during graph_compile), with per-value byte sizes and producers. Kept in
 * hal/ so that the core (graph/runtime/preflight.c) and plugins share it;
 * archived into the backend support library too. Depends only on
 * hal/backend_abi.h. Its helpers over the ABI's plain descriptors are
 * ty_desc_* (attribute getters, element counts, operand checks): ty_abi_*
 * names only the ABI's own types, so a reader tells the contract from the
 * support code by the prefix. */
#ifndef TY_HAL_ABI_GRAPH_H_
#define TY_HAL_ABI_GRAPH_H_

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_owned_graph_t {
  ty_abi_graph_t graph;     /* every pointer points into this object */
  uint64_t *value_bytes;    /* per value: dense byte size */
  uint32_t *producer;       /* per value: node index or UINT32_MAX */
  char hash_hex[65];
  char levers[256];         /* graph.levers points here ("" for older hosts) */
  void *pool_base_; /* private: the block everything above points into */
} ty_owned_graph_t;

/* Deep-copies `src`. Returns NULL on out-of-memory. Checks nothing else:
 * the host validated the graph. */
ty_owned_graph_t *ty_owned_graph_copy(const ty_abi_graph_t *src);
void ty_owned_graph_free(ty_owned_graph_t *graph);

/* Size in bytes of one element of `dtype` (0 for invalid). */
size_t ty_desc_dtype_size(ty_dtype_t dtype);

/* Element count of a value. */
int64_t ty_desc_value_elements(const ty_abi_value_t *value);

/* Whether the space-separated `levers` word list (ty_abi_graph_t.levers)
 * has a word starting with `key=` other than `key=<off>`; *out_value (may be
 * NULL) receives the word. */
bool ty_desc_graph_lever(const ty_abi_graph_t *graph, const char *key, const char *off,
                        char *out_value, size_t capacity);

/* Bytes of scratch (workspace) a node's kernel allocates beyond its
 * operands, as the host plans it: the chunk of logits of
 * linear_cross_entropy (with f32 copies of bf16/f16 h and w, and the f32
 * staging of its backward); 0 for every other op (their scratch is a few
 * rows per thread). One estimate shared by the host's pre-flight plan and
 * the host executor's executable_memory, so both report the same figure. */
uint64_t ty_desc_node_workspace_bytes(const ty_abi_graph_t *graph, const ty_abi_node_t *node);

/* Attribute lookup on a node; NULL when absent. */
const ty_abi_attr_t *ty_desc_node_attr(const ty_abi_node_t *node, const char *name);
/* Typed lookups with defaults (INT attributes read as floats too). */
int64_t ty_desc_node_attr_int(const ty_abi_node_t *node, const char *name,
                             int64_t default_value);
double ty_desc_node_attr_float(const ty_abi_node_t *node, const char *name,
                              double default_value);
const char *ty_desc_node_attr_string(const ty_abi_node_t *node, const char *name,
                                    const char *default_value);

/* The dtypes a kernel backend's op takes (cuda, opencl: kernels that compute
 * in f32 from f32/bf16/f16 storage). */
typedef enum ty_desc_accept_e {
  TY_DESC_ACCEPT_COMPUTE, /* float operands f32/bf16/f16, ints i32/i64 */
  TY_DESC_ACCEPT_MOVE,    /* moves bytes: every dtype */
  TY_DESC_ACCEPT_CAST,    /* float <-> float (f64 included), i32 <-> i64 */
} ty_desc_accept_t;

/* The operand checks every node of such a backend passes before its
 * op-specific ones: rank <= 8, valid dtypes, `accept`'s dtypes, and for a
 * cast a pair of op set v1. False with the reason (naming `backend`, e.g.
 * "cuda") in reason[capacity]. */
bool ty_desc_node_operands_ok(const ty_abi_graph_t *graph, const ty_abi_node_t *node,
                             ty_desc_accept_t accept, const char *backend, char *reason,
                             size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_ABI_GRAPH_H_ */
