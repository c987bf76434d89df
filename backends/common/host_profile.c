/* Per-node timing tables for the host executor (see host_profile.h). */
#include "backends/common/host_profile.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/abi_graph.h"

struct ty_host_profile_t {
  uint32_t node_count;
  uint64_t runs; /* timed runs: all but the first */
  bool first_done;
  double copies; /* state-update copies after the last node */
  double node[];  /* seconds per node, summed over runs */
};

ty_host_profile_t *ty_host_profile_create(uint32_t node_count) {
  const char *env = getenv("TRAINYARD_PROFILE");
  if (!env || !env[0] || !strcmp(env, "0")) return NULL;
  ty_host_profile_t *p = calloc(1, sizeof(*p) + (size_t)node_count * sizeof(double));
  if (p) p->node_count = node_count;
  return p;
}

double ty_host_profile_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ty_host_profile_add(ty_host_profile_t *p, uint32_t node, double seconds) {
  if (node == UINT32_MAX) p->copies += seconds;
  else if (node < p->node_count) p->node[node] += seconds;
}

/* The first run pays for first-touch page faults of the arena, oneDNN's
 * JIT and cold caches; only the runs after it count. */
void ty_host_profile_end_run(ty_host_profile_t *p) {
  if (!p->first_done) {
    p->first_done = true;
    p->copies = 0.0;
    memset(p->node, 0, (size_t)p->node_count * sizeof(double));
    return;
  }
  p->runs++;
}

typedef struct {
  char key[96];
  uint32_t nodes;
  double seconds;
} ty_profile_row_t;

static int ty_profile_row_cmp(const void *a, const void *b) {
  double x = ((const ty_profile_row_t *)a)->seconds, y = ((const ty_profile_row_t *)b)->seconds;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* "matmul[4x64x768 @ 768x2304 tb]": op, operand shapes, transpose flags. */
static void ty_profile_label(const ty_abi_graph_t *g, uint32_t n, const uint8_t *reference,
                             char *out, size_t cap) {
  const ty_abi_node_t *node = &g->nodes[n];
  size_t len = (size_t)snprintf(out, cap, "%s%s[", node->op,
                                reference && reference[n] ? " (ref)" : "");
  for (uint32_t i = 0; i < node->input_count && i < 2 && len < cap; ++i) {
    if (node->inputs[i] == UINT32_MAX) continue;
    const ty_abi_value_t *v = &g->values[node->inputs[i]];
    if (i) len += (size_t)snprintf(out + len, cap - len, " , ");
    for (uint32_t d = 0; d < v->rank && len < cap; ++d) {
      len += (size_t)snprintf(out + len, cap - len, d ? "x%lld" : "%lld", (long long)v->dims[d]);
    }
  }
  if (len < cap && ty_desc_node_attr_int(node, "trans_a", 0)) {
    len += (size_t)snprintf(out + len, cap - len, " ta");
  }
  if (len < cap && ty_desc_node_attr_int(node, "trans_b", 0)) {
    len += (size_t)snprintf(out + len, cap - len, " tb");
  }
  if (len < cap) snprintf(out + len, cap - len, "]");
}

/* Sums nodes with equal keys into rows; returns the row count. */
static uint32_t ty_profile_group(const ty_host_profile_t *p, const ty_abi_graph_t *g,
                                 const uint8_t *reference, bool by_shape,
                                 ty_profile_row_t *rows) {
  uint32_t count = 0;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    char key[96];
    if (by_shape) ty_profile_label(g, n, reference, key, sizeof(key));
    else snprintf(key, sizeof(key), "%s%s", g->nodes[n].op,
                  reference && reference[n] ? " (ref)" : "");
    uint32_t r = 0;
    while (r < count && strcmp(rows[r].key, key)) ++r;
    if (r == count) {
      memset(&rows[count], 0, sizeof(rows[count]));
      snprintf(rows[count].key, sizeof(rows[count].key), "%s", key);
      ++count;
    }
    rows[r].nodes++;
    rows[r].seconds += p->node[n];
  }
  qsort(rows, count, sizeof(*rows), ty_profile_row_cmp);
  return count;
}

void ty_host_profile_report_and_free(ty_host_profile_t *p, const char *plugin,
                                     const ty_abi_graph_t *g, const uint8_t *reference) {
  if (!p) return;
  ty_profile_row_t *rows = p->runs ? malloc((g->node_count + 1) * sizeof(*rows)) : NULL;
  if (rows) {
    double total = p->copies;
    for (uint32_t n = 0; n < g->node_count; ++n) total += p->node[n];
    const double per = 1e3 / (double)p->runs;
    fprintf(stderr,
            "%s profile: %u nodes, %llu runs after the first, %.2f ms per run (state-update copies %.2f ms)\n",
            plugin, g->node_count, (unsigned long long)p->runs, total * per, p->copies * per);
    for (int by_shape = 0; by_shape < 2; ++by_shape) {
      uint32_t count = ty_profile_group(p, g, reference, by_shape, rows);
      uint32_t shown = by_shape ? (count < 25 ? count : 25) : count;
      fprintf(stderr, "  %-60s %6s %10s %6s\n", by_shape ? "slowest op + shapes" : "op",
              "nodes", "ms/run", "%");
      for (uint32_t r = 0; r < shown; ++r) {
        fprintf(stderr, "  %-60s %6u %10.2f %5.1f%%\n", rows[r].key, rows[r].nodes,
                rows[r].seconds * per, total > 0 ? 100.0 * rows[r].seconds / total : 0.0);
      }
    }
  }
  free(rows);
  free(p);
}
