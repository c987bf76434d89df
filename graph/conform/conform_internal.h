/* Pieces shared by the conformance kit's files: the seeded generator and
 * graph-building helpers. Internal to graph/. */
#ifndef TY_GRAPH_CONFORM_INTERNAL_H_
#define TY_GRAPH_CONFORM_INTERNAL_H_

#include <stdint.h>

#include "graph/conform/conform.h"

/* splitmix64 */
static inline uint64_t ty_conform_mix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double ty_conform_uniform(uint64_t *state) {
  return (double)(ty_conform_mix(state) >> 11) * 0x1.0p-53;
}

uint64_t ty_conform_hash_string(uint64_t h, const char *s);

/* ---- graph building pieces (conform_instance.c), for the whole-graph
 * tier (conform_whole.c) ---- */

/* Adds the case's inputs (those whose bit is set in `state_mask` as STATE
 * values, the rest as INPUT) and its op node. */
ty_status_t ty_conform_add_op_states(const ty_conform_instance_t *inst, ty_graph_t *g,
                                     bool oracle, uint32_t state_mask, ty_value_id_t *in_ids,
                                     ty_value_id_t *out_ids);
/* Whether input i is differentiated (present and float). */
bool ty_conform_wrt(const ty_conform_instance_t *inst, uint32_t i);
/* Autodiff of the differentiable outputs `diff` from seeds dy<j> (INPUTs;
 * ones when !seeded) into grads[k] for each wrt input in order. */
ty_status_t ty_conform_add_backward(const ty_conform_instance_t *inst, ty_graph_t *g,
                                    bool oracle, const ty_value_id_t *in_ids,
                                    const ty_value_id_t *out_ids, const uint32_t *diff,
                                    uint32_t diff_count, bool seeded, ty_value_id_t *grads);

#endif /* TY_GRAPH_CONFORM_INTERNAL_H_ */
