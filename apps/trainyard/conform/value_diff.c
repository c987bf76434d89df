/* Every intermediate of a graph on two sides, value by value (moved from
 * bisect.c so that `compare --per-layer` shares it). */
#include "conform/value_diff.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors of every value the graph exposes (errors[v] for ABI value v). */
ty_status_t ty_value_diff_compare_all(const ty_abi_graph_t *abi, ty_tier_runner_t *dev,
                                         ty_tier_runner_t *ref, ty_value_diff_t *errors) {
  for (uint32_t v = 0; v < abi->value_count; ++v) {
    const ty_abi_value_t *val = &abi->values[v];
    if (!(val->flags & TY_VALUE_FLAG_OUTPUT) && val->role != TY_VALUE_STATE) continue;
    double *got = NULL, *want = NULL;
    int64_t n = 0, m = 0;
    ty_status_t s = ty_tier_runner_get(dev, val->name, &got, &n);
    if (!s) s = ty_tier_runner_get(ref, val->name, &want, &m);
    if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
      ty_status_free(s); /* the other side's graph lacks it: not compared */
      s = TY_OK;
    } else if (!s && n == m) {
      errors[v].error = ty_tier_compare(got, want, n);
      errors[v].compared = true;
      errors[v].count = n;
    }
    free(got);
    free(want);
    TY_RETURN_IF_ERROR(s);
  }
  return TY_OK;
}

/* Ops whose outputs only add up or move their inputs' values (same units
 * in and out), where an output can cancel far below its inputs. */
static bool ty_value_diff_additive(const char *op) {
  static const char *const ops[] = {"add", "sub", "reduce_sum", "reduce_mean", "slice",
                                    "slice_backward", "reshape", "transpose", "concat",
                                    "broadcast_to", NULL};
  for (int i = 0; ops[i]; ++i) {
    if (!strcmp(op, ops[i])) return true;
  }
  return false;
}

/* Every value's scale, in node order: its mean square, or for an output of
 * an additive op the larger of that and each input's scale times the
 * input's elements per output element. A sum of n terms of RMS r carries
 * rounding of size ~sqrt(n) r whatever its result, and whatever is made
 * from it by adding and moving carries that rounding on: GPT-2's key bias
 * gradient is mathematically zero (softmax ignores a constant per row) and
 * sums to pure rounding, ~1e-9 from terms of ~1e-4, in every backend's own
 * order. Its NMSE against itself is meaningless; against its scale it is
 * rounding. */
void ty_value_diff_scales(const ty_abi_graph_t *abi, ty_value_diff_t *errors) {
  for (uint32_t v = 0; v < abi->value_count; ++v) {
    ty_value_diff_t *e = &errors[v];
    e->scale = e->compared && e->count > 0 ? e->error.ref2 / (double)e->count : 0.0;
  }
  for (uint32_t n = 0; n < abi->node_count; ++n) {
    const ty_abi_node_t *node = &abi->nodes[n];
    if (!ty_value_diff_additive(node->op)) continue;
    for (uint32_t k = 0; k < node->output_count; ++k) {
      ty_value_diff_t *e = &errors[node->outputs[k]];
      if (!e->compared || e->count <= 0) continue;
      for (uint32_t i = 0; i < node->input_count; ++i) {
        uint32_t x = node->inputs[i];
        if (x == UINT32_MAX || !errors[x].compared || errors[x].count <= 0) continue;
        double fan = (double)errors[x].count / (double)e->count;
        double scale = errors[x].scale * (fan > 1.0 ? fan : 1.0);
        if (scale > e->scale) e->scale = scale;
      }
    }
  }
}

/* A value's error: squared error per element over its scale (plain NMSE
 * for a value of ordinary size). */
double ty_value_diff_error(const ty_value_diff_t *e) {
  if (!(e->error.nmse < INFINITY) || e->count <= 0 || !(e->scale > 1e-300)) return e->error.nmse;
  double judged = e->error.err2 / (double)e->count / e->scale;
  return judged < e->error.nmse ? judged : e->error.nmse;
}

