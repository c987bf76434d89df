/* `trainyard conform --bisect`: a fixture model's forward and backward
 * graph runs on the backend and on --against (default cpu) with every
 * intermediate value read back, and the first node, in execution order,
 * whose output differs beyond tolerance is named with its shapes,
 * attributes and its inputs' errors. Inputs within tolerance and an output
 * beyond it put the fault in that node's kernel. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "conform/tier_common.h"
#include "conform/value_diff.h"
#include "graph/ir/lower.h"
#include "graph/runtime/numerics.h"
#include "graph/runtime/support_report.h"
#include "hal/dtype.h"
#include "train/train_graph.h"

/* An intermediate's NMSE against the other side above which it diverges.
 * f32: two correct kernels differ by rounding (NMSE ~1e-14 per op; at most
 * 5e-12 anywhere in the fixture models on the in-tree backends); a wrong
 * kernel shows 1e-8 and up (the planted gelu bug of the tests: 4e-6).
 * bf16/f16: correct backends reach 1e-4 / 3e-6, so only coarser faults
 * stand out there. */
static double ty_bisect_bound(ty_dtype_t dtype) {
  return dtype == TY_DTYPE_BF16 ? 1e-2 : dtype == TY_DTYPE_F16 ? 1e-4 : 1e-9;
}

static void ty_bisect_attrs(const ty_abi_node_t *node, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < node->attr_count && used < cap; ++i) {
    const ty_abi_attr_t *a = &node->attrs[i];
    int n = 0;
    switch (a->kind) {
      case TY_ATTR_INT: n = snprintf(out + used, cap - used, "%s%s=%lld", used ? " " : "", a->name, (long long)a->i); break;
      case TY_ATTR_FLOAT: n = snprintf(out + used, cap - used, "%s%s=%.9g", used ? " " : "", a->name, a->f); break;
      case TY_ATTR_STRING: n = snprintf(out + used, cap - used, "%s%s='%s'", used ? " " : "", a->name, a->s); break;
      case TY_ATTR_INTS:
      case TY_ATTR_FLOATS:
        n = snprintf(out + used, cap - used, "%s%s=[%u values]", used ? " " : "", a->name, a->count);
        break;
    }
    if (n > 0) used += (size_t)n;
  }
}

/* Reports the first node whose output is beyond `bound`. */
static void ty_bisect_report(ty_tier_run_t *t, const char *model, const ty_abi_graph_t *abi,
                             const ty_value_diff_t *errors, double bound, const char *against) {
  const ty_tier_args_t *a = t->args;
  uint32_t first = UINT32_MAX, later = 0, worst_node = 0;
  double worst = 0.0;
  for (uint32_t n = 0; n < abi->node_count; ++n) {
    const ty_abi_node_t *node = &abi->nodes[n];
    bool bad = false;
    for (uint32_t k = 0; k < node->output_count; ++k) {
      const ty_value_diff_t *e = &errors[node->outputs[k]];
      if (!e->compared) continue;
      double err = ty_value_diff_error(e);
      if (!(err <= bound)) bad = true;
      if (err > worst || isnan(err)) {
        worst = err;
        worst_node = n;
      }
    }
    if (bad && first == UINT32_MAX) first = n;
    else if (bad) later++;
  }
  json_t *row = a->json ? json_pack("{s:s,s:s,s:i}", "tier", "bisect", "model", model, "nodes",
                                    (json_int_t)abi->node_count)
                        : NULL;
  if (first == UINT32_MAX) {
    t->pass++;
    if (row) {
      json_object_set_new(row, "status", json_string("agrees"));
      json_object_set_new(row, "worst_nmse", json_real(worst));
      json_array_append_new(t->rows, row);
    } else if (!a->only_failures) {
      printf("%s: no divergence over %u nodes (worst NMSE %.2e at node %u, %s)\n", model,
             abi->node_count, worst, worst_node, abi->nodes[worst_node].op);
    }
    return;
  }
  t->fail++;
  const ty_abi_node_t *node = &abi->nodes[first];
  ty_dtype_t dtype = ty_support_node_dtype(abi, node);
  char shapes[256], attrs[256];
  ty_support_node_shapes(abi, node, shapes, sizeof(shapes));
  ty_bisect_attrs(node, attrs, sizeof(attrs));
  /* The summary names every first-divergent kernel. */
  size_t used = strlen(t->note);
  if (used < sizeof(t->note) && !strstr(t->note, node->op)) {
    snprintf(t->note + used, sizeof(t->note) - used, "%s%s (%s)",
             used ? ", " : "; first divergent kernels: ", node->op, ty_dtype_name(dtype));
  }
  if (row) {
    json_object_set_new(row, "status", json_string("diverges"));
    json_object_set_new(row, "node", json_integer(first));
    json_object_set_new(row, "op", json_string(node->op));
    json_object_set_new(row, "dtype", json_string(ty_dtype_name(dtype)));
    json_object_set_new(row, "shapes", json_string(shapes));
    json_object_set_new(row, "attrs", json_string(attrs));
    json_object_set_new(row, "later_divergent_nodes", json_integer(later));
  } else {
    printf("%s: first divergence at node %u of %u: %s (%s) %s%s%s\n", model, first,
           abi->node_count, node->op, ty_dtype_name(dtype), shapes, attrs[0] ? " " : "", attrs);
  }
  json_t *outs = json_array(), *ins = json_array();
  for (uint32_t k = 0; k < node->output_count; ++k) {
    const ty_abi_value_t *val = &abi->values[node->outputs[k]];
    const ty_value_diff_t *e = &errors[node->outputs[k]];
    if (!e->compared) continue;
    if (row) {
      json_array_append_new(outs, json_pack("{s:s,s:f,s:f,s:I,s:f,s:f}", "value", val->name,
                                            "nmse", ty_value_diff_error(e),
                                            "max_abs", e->error.max_abs,
                                            "index", (json_int_t)e->error.index, "got",
                                            e->error.got, "want", e->error.want));
    } else {
      printf("    output %s: NMSE %.2e > %.0e; largest error %.3g at [%" PRId64 "]: %.9g where "
             "%s has %.9g\n",
             val->name, ty_value_diff_error(e), bound, e->error.max_abs,
             e->error.index, e->error.got,
             against, e->error.want);
    }
  }
  for (uint32_t i = 0; i < node->input_count; ++i) {
    uint32_t v = node->inputs[i];
    if (v == UINT32_MAX) continue;
    const ty_abi_value_t *val = &abi->values[v];
    const ty_value_diff_t *e = &errors[v];
    uint32_t producer = UINT32_MAX;
    for (uint32_t n = 0; n < first && producer == UINT32_MAX; ++n) {
      for (uint32_t k = 0; k < abi->nodes[n].output_count; ++k) {
        if (abi->nodes[n].outputs[k] == v) producer = n;
      }
    }
    char from[96];
    if (producer != UINT32_MAX) {
      snprintf(from, sizeof(from), "from node %u, %s", producer, abi->nodes[producer].op);
    } else {
      snprintf(from, sizeof(from), "a bound %s (the same values on both sides)",
               val->role == TY_VALUE_STATE ? "parameter" : val->role == TY_VALUE_CONSTANT ? "constant" : "input");
    }
    if (row) {
      json_t *o = json_pack("{s:i,s:s,s:s}", "input", (json_int_t)i, "value", val->name, "from",
                            from);
      json_object_set_new(o, "nmse", e->compared ? json_real(ty_value_diff_error(e)) : json_null());
      json_array_append_new(ins, o);
    } else if (e->compared && producer != UINT32_MAX) {
      printf("    input %u %s (%s): NMSE %.2e\n", i, val->name[0] ? val->name : "-", from,
             ty_value_diff_error(e));
    } else {
      printf("    input %u %s (%s)\n", i, val->name[0] ? val->name : "-", from);
    }
  }
  if (row) {
    json_object_set_new(row, "outputs", outs);
    json_object_set_new(row, "inputs", ins);
    json_array_append_new(t->rows, row);
  } else {
    json_decref(outs);
    json_decref(ins);
    printf("    its inputs agree and its output does not: the %s kernel is the first to "
           "diverge; after it %u of the %u later nodes diverge too\n",
           node->op, later, abi->node_count - first - 1);
  }
}

/* The f64 reference graph is built by the same builder; values are matched
 * by the names ty_graph_expose_all gave them, which is sound only when both
 * graphs have the same nodes in the same order (no casts of a narrower
 * dtype, say). */
static ty_status_t ty_bisect_same_structure(const ty_lowered_graph_t *dev, const ty_graph_t *ref) {
  ty_lowered_graph_t *lowered = NULL;
  TY_RETURN_IF_ERROR(ty_graph_lower(ref, &lowered));
  const ty_abi_graph_t *a = ty_lowered_graph_abi(dev), *b = ty_lowered_graph_abi(lowered);
  bool same = a->node_count == b->node_count;
  for (uint32_t n = 0; same && n < a->node_count; ++n) same = !strcmp(a->nodes[n].op, b->nodes[n].op);
  ty_lowered_graph_destroy(lowered);
  return same ? TY_OK
              : ty_status_make(TY_CODE_INVALID_ARGUMENT,
                               "the model's graph in this dtype differs from its f64 graph "
                               "(casts); bisect against a device instead (--against cpu)");
}

static ty_status_t ty_bisect_build(const ty_model_config_t *config, ty_dtype_t dtype,
                                   ty_graph_t **out_graph, ty_llm_t *out_model) {
  TY_RETURN_IF_ERROR(ty_forward_graph_build(config, TY_TIER_BATCH, TY_TIER_SEQ, dtype,
                                            TY_DTYPE_INVALID, true, out_graph, out_model));
  return ty_graph_expose_all(*out_graph);
}

static ty_status_t ty_bisect_one(ty_tier_run_t *t, const ty_tier_model_t *model) {
  const ty_tier_args_t *a = t->args;
  ty_tier_pair_t p;
  ty_lowered_graph_t *lowered = NULL;
  ty_value_diff_t *errors = NULL;
  ty_status_t d = TY_OK;
  ty_status_t s = ty_tier_pair_create(t, model, ty_bisect_build, &p, &d);
  if (!s) s = ty_graph_lower(p.g_dev, &lowered);
  if (!s && !t->against) s = ty_bisect_same_structure(lowered, p.g_ref);
  if (!s && !d) s = ty_tier_bind_batch(&model->config, a->seed, 0, p.both, 2);
  if (!s && !d) s = ty_tier_runner_run(&p.ref);
  if (!s && !d) d = ty_tier_runner_run(&p.dev);
  const ty_abi_graph_t *abi = lowered ? ty_lowered_graph_abi(lowered) : NULL;
  if (!s && !d) {
    errors = calloc(abi->value_count ? abi->value_count : 1, sizeof(*errors));
    if (!errors) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s && !d) s = ty_value_diff_compare_all(abi, &p.dev, &p.ref, errors);
  if (!s && !d) ty_value_diff_scales(abi, errors);
  if (!s && !d) ty_bisect_report(t, model->name, abi, errors, t->bound, p.ref.label);
  if (d) {
    t->unsupported++;
    if (a->json) {
      json_array_append_new(t->rows, json_pack("{s:s,s:s,s:s,s:s}", "tier", "bisect", "model",
                                               model->name, "status", "unsupported", "reason",
                                               ty_status_message(d)));
    } else {
      printf("%s: cannot run on %s: %s\n", model->name, ty_device_label(t->device),
             ty_status_message(d));
    }
    ty_status_free(d);
  }
  free(errors);
  ty_lowered_graph_destroy(lowered);
  ty_tier_pair_destroy(&p);
  return s;
}

int ty_conform_bisect(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a) {
  double bound = a->tolerance > 0 ? a->tolerance : ty_bisect_bound(a->dtype);
  char header[256];
  snprintf(header, sizeof(header),
           "conform --bisect: %%s against %%s, %%u models (forward and backward, every "
           "intermediate), %%s, batch %%d x %%d, seed %%" PRIu64
           "; --seed N to change, divergence: NMSE > %.0e\n",
           bound);
  return ty_tier_drive(device, against, a, bound, header, "", "bisect", "models agree",
                       "diverge", ty_bisect_one);
}
