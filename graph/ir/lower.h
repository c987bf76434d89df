/* Lowering: a graph's live part as the plain ABI descriptor plugins compile,
 * plus its canonical text form and the SHA-256 graph hash derived from it.
 *
 * Dead-value removal happens here: only nodes that contribute to an OUTPUT
 * value or a state update are kept (every INPUT and STATE value is kept: they
 * are the graph's interface). Values are renumbered densely in their original
 * order. The canonical text names every value, node, attribute (floats to 17
 * significant digits), constant (by the SHA-256 of its bytes), output and
 * state update, so equal text means an equal computation; the hash is the
 * SHA-256 of the text, the key of compile caches. */
#ifndef TY_GRAPH_LOWER_H_
#define TY_GRAPH_LOWER_H_

#include "graph/ir/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_lowered_graph_t ty_lowered_graph_t;

/* The result does not reference `graph`; destroy it with
 * ty_lowered_graph_destroy. FAILED_PRECONDITION for a graph with no output
 * and no state update (it computes nothing observable). */
ty_status_t ty_graph_lower(const ty_graph_t *graph, ty_lowered_graph_t **out);
void ty_lowered_graph_destroy(ty_lowered_graph_t *lowered);

/* The descriptor; valid while `lowered` lives. hash_hex is set. */
const ty_abi_graph_t *ty_lowered_graph_abi(const ty_lowered_graph_t *lowered);
/* 64 lowercase hex digits. */
const char *ty_lowered_graph_hash(const ty_lowered_graph_t *lowered);
/* The canonical text (also the human-readable dump). */
const char *ty_lowered_graph_text(const ty_lowered_graph_t *lowered);
/* Graphviz dot of the lowered graph; the caller frees *out_dot. */
ty_status_t ty_lowered_graph_format_dot(const ty_lowered_graph_t *lowered,
                                        char **out_dot);
/* Lowered index of a core value id, or TY_VALUE_NONE if it was removed. */
uint32_t ty_lowered_graph_index(const ty_lowered_graph_t *lowered,
                                ty_value_id_t value);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_LOWER_H_ */
