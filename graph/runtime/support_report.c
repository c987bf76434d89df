/* Support reports: a backend's per-node verdicts, grouped (support_report.h). */
#include "graph/runtime/support_report.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/executable.h"

ty_dtype_t ty_support_node_dtype(const ty_abi_graph_t *g, const ty_abi_node_t *node) {
  ty_dtype_t first = TY_DTYPE_INVALID;
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    uint32_t v = i < node->input_count ? node->inputs[i] : node->outputs[i - node->input_count];
    if (v == UINT32_MAX) continue;
    ty_dtype_t d = g->values[v].dtype;
    if (ty_dtype_is_float(d)) return d;
    if (first == TY_DTYPE_INVALID) first = d;
  }
  return first;
}

static size_t ty_append(char *out, size_t capacity, size_t used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static size_t ty_append(char *out, size_t capacity, size_t used, const char *fmt, ...) {
  if (used >= capacity) return used;
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(out + used, capacity - used, fmt, args);
  va_end(args);
  return n < 0 ? used : used + (size_t)n;
}

void ty_support_node_shapes(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *out,
                            size_t capacity) {
  size_t used = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    bool output = i >= node->input_count;
    uint32_t v = output ? node->outputs[i - node->input_count] : node->inputs[i];
    const char *sep = i == 0 ? "" : i == node->input_count ? " -> " : " ";
    if (v == UINT32_MAX) {
      used = ty_append(out, capacity, used, "%s-", sep);
      continue;
    }
    const ty_abi_value_t *val = &g->values[v];
    used = ty_append(out, capacity, used, "%s[", sep);
    for (uint32_t r = 0; r < val->rank; ++r) {
      used = ty_append(out, capacity, used, "%s%lld", r ? "," : "", (long long)val->dims[r]);
    }
    used = ty_append(out, capacity, used, "]");
  }
  if (capacity && used >= capacity && capacity > 4) memcpy(out + capacity - 4, "...", 4);
}

void ty_support_report_destroy(ty_support_report_t *r) {
  if (!r) return;
  free(r->verdicts);
  free(r->groups);
  free(r);
}

ty_status_t ty_support_report_create(ty_device_t *device, const ty_abi_graph_t *graph,
                                     ty_support_report_t **out_report) {
  *out_report = NULL;
  TY_RETURN_IF_ERROR(ty_executable_graph_entries(device));
  uint32_t n = graph->node_count;
  ty_support_report_t *r = calloc(1, sizeof(*r));
  if (r) {
    r->verdicts = calloc(n ? n : 1, sizeof(*r->verdicts));
    r->groups = calloc(n ? n : 1, sizeof(*r->groups));
  }
  if (!r || !r->verdicts || !r->groups) {
    ty_support_report_destroy(r);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory checking support");
  }
  r->node_count = n;
  ty_status_t s = ty_executable_supports(device, graph, r->verdicts);
  if (s) {
    ty_support_report_destroy(r);
    return ty_status_annotate(s, "%s: graph_supports", ty_device_label(device));
  }
  for (uint32_t i = 0; i < n; ++i) {
    ty_abi_node_support_t *v = &r->verdicts[i];
    v->reason[sizeof(v->reason) - 1] = '\0';
    const ty_abi_node_t *node = &graph->nodes[i];
    bool ok = v->supported != 0;
    r->unsupported_nodes += !ok;
    ty_dtype_t dtype = ty_support_node_dtype(graph, node);
    ty_support_group_t *g = NULL;
    for (uint32_t k = 0; k < r->group_count && !g; ++k) {
      ty_support_group_t *c = &r->groups[k];
      if (c->supported == ok && c->dtype == dtype && strcmp(c->op, node->op) == 0 &&
          (ok || strcmp(c->reason, v->reason) == 0)) {
        g = c;
      }
    }
    if (!g) {
      g = &r->groups[r->group_count++];
      g->op = node->op;
      g->dtype = dtype;
      g->supported = ok;
      g->first_node = i;
      if (!ok) snprintf(g->reason, sizeof(g->reason), "%s", v->reason);
      ty_support_node_shapes(graph, node, g->example, sizeof(g->example));
    }
    g->nodes++;
  }
  *out_report = r;
  return TY_OK;
}

ty_status_t ty_support_report_error(const ty_support_report_t *r, ty_device_t *device) {
  if (!r->unsupported_nodes) return TY_OK;
  size_t cap = 512;
  for (uint32_t k = 0; k < r->group_count; ++k) {
    if (r->groups[k].supported) continue;
    cap += strlen(r->groups[k].op) + sizeof(r->groups[k].reason) +
           sizeof(r->groups[k].example) + 64;
  }
  char *text = malloc(cap);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t used = ty_append(text, cap, 0, "%s does not support %u of the graph's %u nodes:",
                          ty_device_label(device), r->unsupported_nodes, r->node_count);
  uint32_t shown = 0;
  for (uint32_t k = 0; k < r->group_count; ++k) {
    const ty_support_group_t *g = &r->groups[k];
    if (g->supported) continue;
    used = ty_append(text, cap, used, "%s op %s (%s), %u node%s, e.g. node %u %s%s%s",
                     shown++ ? ";" : "", g->op, ty_dtype_name(g->dtype), g->nodes,
                     g->nodes == 1 ? "" : "s", g->first_node, g->example,
                     g->reason[0] ? ": " : "", g->reason);
  }
  ty_status_t s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                                 "%s. 'trainyard check --backend %s --model DIR' lists what a "
                                 "model's graphs need, 'trainyard conform --backend %s' checks "
                                 "every op",
                                 text, ty_device_uri(device), ty_device_uri(device));
  free(text);
  return s;
}
