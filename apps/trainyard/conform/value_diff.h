/* Every intermediate of a graph run on two sides, compared value by value:
 * what `conform --bisect` and `compare --per-layer` share (moved out of
 * bisect.c). Internal to the trainyard app. */
#ifndef TY_APPS_TRAINYARD_CONFORM_VALUE_DIFF_H_
#define TY_APPS_TRAINYARD_CONFORM_VALUE_DIFF_H_

#include <stdbool.h>
#include <stdint.h>

#include "conform/tier_common.h"
#include "graph/ir/graph.h"

/* (Every intermediate is exposed by ty_graph_expose_all, graph/runtime/numerics.h.) */

typedef struct ty_value_diff_t {
  ty_tier_error_t error;
  bool compared;
  int64_t count; /* elements */
  double scale;  /* ty_value_diff_scales */
} ty_value_diff_t;

/* Errors of every value the lowered graph exposes (errors[v] for ABI value
 * v), `dev` against `ref`; values one side lacks are left uncompared. */
ty_status_t ty_value_diff_compare_all(const ty_abi_graph_t *abi, ty_tier_runner_t *dev,
                                      ty_tier_runner_t *ref, ty_value_diff_t *errors);

/* Every value's scale (its mean square, or what rounding it carries from
 * the inputs of an additive op); after ty_value_diff_compare_all. */
void ty_value_diff_scales(const ty_abi_graph_t *abi, ty_value_diff_t *errors);

/* A value's error: squared error per element over its scale (plain NMSE
 * for a value of ordinary size). */
double ty_value_diff_error(const ty_value_diff_t *e);

#endif /* TY_APPS_TRAINYARD_CONFORM_VALUE_DIFF_H_ */
