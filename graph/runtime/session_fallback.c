/* Fallback sessions: a graph partitioned between a primary and a fallback
 * device, segment by segment, with explicit host transfers (see
 * session_fallback.h). */
#include "graph/runtime/session_fallback.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/runtime/support_report.h"
#include "hal/dtype.h"
#include "ops/attrs.h"

typedef struct ty_segment_t {
  ty_device_t *device;
  uint32_t first, count;    /* nodes [first, first + count) */
  ty_session_t *session;
  uint32_t *inputs;         /* values copied in before it runs: other segments' */
  uint32_t input_count;     /* intermediates, and states whose home is elsewhere */
} ty_segment_t;

struct ty_fallback_run_t {
  ty_device_t *primary, *fallback;
  const ty_abi_graph_t *graph;
  uint32_t *node_seg;            /* per node */
  uint32_t *producer_seg;        /* per value; UINT32_MAX when no node makes it */
  uint8_t *exported;             /* per value: its producer segment hands it out */
  ty_device_t **home;            /* per value, states only */
  const ty_session_t **holder;   /* per value, states only */
  uint32_t *deferred;            /* updates (graph->updates indices) copied home at the end */
  uint32_t deferred_count;
  ty_segment_t *segs;
  uint32_t seg_count;
  void **host;                   /* per value: this run's host copy */
  char *partition;
  uint64_t runs, transfer_bytes, last_run_bytes;
  uint64_t run_bytes_to[2];      /* last run: into the primary [0] / the fallback [1] */
  uint32_t values_to[2];         /* per run, how many copies into each */
};

static ty_status_t ty_fallback_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory partitioning a graph");
}

static uint64_t ty_fallback_bytes(const ty_abi_value_t *v) {
  uint64_t n = ty_dtype_size(v->dtype);
  for (uint32_t r = 0; r < v->rank; ++r) n *= (uint64_t)v->dims[r];
  return n;
}

/* The name a value crosses segments under: its own, else a made-up one no
 * graph value can have (names never contain '#'). */
static const char *ty_fallback_name(const ty_abi_graph_t *g, uint32_t v, char *buf, size_t cap) {
  if (g->values[v].name && g->values[v].name[0]) return g->values[v].name;
  snprintf(buf, cap, "mixed#%u", v);
  return buf;
}

static uint32_t ty_fallback_find(const ty_abi_graph_t *g, const char *name) {
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (g->values[v].name && strcmp(g->values[v].name, name) == 0) return v;
  }
  return UINT32_MAX;
}

/* ---- partition ---- */

/* Node devices from both backends' verdicts; segments of consecutive nodes
 * on one device. *out_all_primary when the fallback is not needed. */
static ty_status_t ty_fallback_assign(ty_fallback_run_t *m, bool *out_all_primary) {
  const ty_abi_graph_t *g = m->graph;
  ty_support_report_t *primary = NULL, *fallback = NULL;
  TY_RETURN_IF_ERROR(ty_support_report_create(m->primary, g, &primary));
  ty_status_t s = TY_OK;
  *out_all_primary = primary->unsupported_nodes == 0;
  if (!*out_all_primary) {
    s = ty_support_report_create(m->fallback, g, &fallback);
    if (!s) {
      /* What neither device runs: the fallback's error names those nodes. */
      for (uint32_t n = 0; n < g->node_count; ++n) {
        if (primary->verdicts[n].supported) fallback->verdicts[n].supported = 1;
      }
      s = ty_support_report_error(fallback, m->fallback);
      if (s) {
        s = ty_status_annotate(s, "neither %s nor its fallback runs every node",
                               ty_device_label(m->primary));
      }
    }
  }
  m->node_seg = calloc(g->node_count ? g->node_count : 1, sizeof(uint32_t));
  m->segs = calloc(g->node_count ? g->node_count : 1, sizeof(ty_segment_t));
  if (!s && (!m->node_seg || !m->segs)) s = ty_fallback_oom();
  for (uint32_t n = 0; n < g->node_count && !s; ++n) {
    ty_device_t *d = primary->verdicts[n].supported ? m->primary : m->fallback;
    if (!m->seg_count || m->segs[m->seg_count - 1].device != d) {
      m->segs[m->seg_count++] = (ty_segment_t){.device = d, .first = n};
    }
    m->segs[m->seg_count - 1].count++;
    m->node_seg[n] = m->seg_count - 1;
  }
  ty_support_report_destroy(primary);
  ty_support_report_destroy(fallback);
  return s;
}

/* The device and session already holding state `name` for the session the
 * fallback one shares state with, or NULL. */
static const ty_session_t *ty_fallback_share_holder(const ty_session_t *share, const char *name,
                                                 const ty_fallback_run_t *m) {
  if (!share) return NULL;
  ty_fallback_run_t *other = ty_session_fallback_of(share);
  if (!other) return ty_session_has_state(share, name) ? share : NULL;
  const ty_session_t *h = ty_fallback_holder(other, name, m->primary);
  return h ? h : ty_fallback_holder(other, name, m->fallback);
}

/* Producers, exports, inputs copied per segment, state homes, deferred
 * updates; refuses a state read after its update in a later segment. */
static ty_status_t ty_fallback_plan(ty_fallback_run_t *m, const ty_session_t *share) {
  const ty_abi_graph_t *g = m->graph;
  uint32_t nv = g->value_count ? g->value_count : 1;
  m->producer_seg = malloc(nv * sizeof(uint32_t));
  m->exported = calloc(nv, 1);
  m->home = calloc(nv, sizeof(*m->home));
  m->holder = calloc(nv, sizeof(*m->holder));
  m->host = calloc(nv, sizeof(*m->host));
  m->deferred = calloc(g->update_count ? g->update_count : 1, sizeof(uint32_t));
  if (!m->producer_seg || !m->exported || !m->home || !m->holder || !m->host || !m->deferred) {
    return ty_fallback_oom();
  }
  for (uint32_t v = 0; v < g->value_count; ++v) m->producer_seg[v] = UINT32_MAX;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    for (uint32_t k = 0; k < g->nodes[n].output_count; ++k) {
      m->producer_seg[g->nodes[n].outputs[k]] = m->node_seg[n];
    }
  }
  /* Homes: where a shared session keeps the state, else the updater's
   * device, else the first reader's. */
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (g->values[v].role != TY_VALUE_STATE) continue;
    const ty_session_t *h = ty_fallback_share_holder(share, g->values[v].name, m);
    if (h) m->home[v] = ty_session_device_of(h);
    for (uint32_t u = 0; u < g->update_count && !m->home[v]; ++u) {
      uint32_t p = m->producer_seg[g->updates[u].value];
      if (g->updates[u].state == v && p != UINT32_MAX) m->home[v] = m->segs[p].device;
    }
    for (uint32_t n = 0; n < g->node_count && !m->home[v]; ++n) {
      for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
        if (g->nodes[n].inputs[i] == v) m->home[v] = m->segs[m->node_seg[n]].device;
      }
    }
    if (!m->home[v]) m->home[v] = m->primary;
  }
  /* Updates: made in the segment on the state's home device, or copied home
   * after the run; either way no segment may read the state after it. */
  for (uint32_t u = 0; u < g->update_count; ++u) {
    uint32_t st = g->updates[u].state, val = g->updates[u].value, p = m->producer_seg[val];
    if (p == UINT32_MAX) {
      return ty_status_make(TY_CODE_UNIMPLEMENTED,
                            "a mixed run cannot update state '%s' from a value no node makes",
                            g->values[st].name);
    }
    if (m->segs[p].device != m->home[st]) {
      m->deferred[m->deferred_count++] = u;
      m->exported[val] = 1;
      continue;
    }
    for (uint32_t n = m->segs[p].first + m->segs[p].count; n < g->node_count; ++n) {
      for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
        if (g->nodes[n].inputs[i] != st) continue;
        return ty_status_make(TY_CODE_UNIMPLEMENTED,
                              "a mixed run of this graph would read state '%s' (node %u, %s) "
                              "after the segment that updates it: run it on one device",
                              g->values[st].name, n, g->nodes[n].op);
      }
    }
  }
  /* Per segment, the values copied in before it runs. */
  for (uint32_t k = 0; k < m->seg_count; ++k) {
    ty_segment_t *seg = &m->segs[k];
    seg->inputs = calloc(nv, sizeof(uint32_t));
    if (!seg->inputs) return ty_fallback_oom();
    for (uint32_t n = seg->first; n < seg->first + seg->count; ++n) {
      for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
        uint32_t v = g->nodes[n].inputs[i];
        if (v == UINT32_MAX) continue;
        bool crossing = (m->producer_seg[v] != UINT32_MAX && m->producer_seg[v] != k) ||
                        (g->values[v].role == TY_VALUE_STATE && m->home[v] != seg->device);
        bool listed = false;
        for (uint32_t j = 0; j < seg->input_count; ++j) listed |= seg->inputs[j] == v;
        if (!crossing || listed) continue;
        seg->inputs[seg->input_count++] = v;
        if (m->producer_seg[v] != UINT32_MAX) m->exported[v] = 1;
      }
    }
  }
  return TY_OK;
}

/* ---- segment graphs ---- */

typedef struct {
  const ty_fallback_run_t *m;
  uint32_t seg;
  ty_graph_t *g;
  ty_value_id_t *map; /* full-graph value -> segment graph value */
} ty_seg_build_t;

/* Whether state v is a STATE (not a copied input) in segment b->seg. */
static bool ty_seg_holds_state(const ty_seg_build_t *b, uint32_t v) {
  return b->m->home[v] == b->m->segs[b->seg].device;
}

static ty_status_t ty_seg_value(ty_seg_build_t *b, uint32_t v, ty_value_id_t *out) {
  if (b->map[v] != TY_VALUE_NONE) {
    *out = b->map[v];
    return TY_OK;
  }
  const ty_abi_value_t *val = &b->m->graph->values[v];
  char buf[32];
  const char *name = ty_fallback_name(b->m->graph, v, buf, sizeof(buf));
  ty_status_t s;
  if (val->role == TY_VALUE_CONSTANT) {
    s = ty_graph_add_constant(b->g, val->name[0] ? val->name : NULL, val->dtype, val->rank,
                              val->dims, val->const_data, &b->map[v]);
  } else if (val->role == TY_VALUE_STATE && ty_seg_holds_state(b, v)) {
    s = ty_graph_add_state(b->g, name, val->dtype, val->rank, val->dims, &b->map[v]);
  } else {
    s = ty_graph_add_input(b->g, name, val->dtype, val->rank, val->dims, &b->map[v]);
    if (!s && (val->flags & TY_VALUE_FLAG_LOSS_SEED)) s = ty_graph_mark_loss_seed(b->g, b->map[v]);
  }
  *out = b->map[v];
  return s;
}

/* The graph of segment `seg`: its nodes, with inputs for what other
 * segments make, outputs for what they (or the caller) read, and the
 * updates of states whose home is this segment's device. */
static ty_status_t ty_seg_graph(const ty_fallback_run_t *m, uint32_t seg, ty_graph_t **out) {
  const ty_abi_graph_t *g = m->graph;
  const ty_segment_t *sg = &m->segs[seg];
  ty_seg_build_t b = {.m = m, .seg = seg};
  b.map = malloc((g->value_count ? g->value_count : 1) * sizeof(ty_value_id_t));
  if (!b.map) return ty_fallback_oom();
  for (uint32_t v = 0; v < g->value_count; ++v) b.map[v] = TY_VALUE_NONE;
  ty_status_t s = ty_graph_create(&b.g);
  for (uint32_t n = sg->first; n < sg->first + sg->count && !s; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    ty_value_id_t *in = malloc((node->input_count + node->output_count + 1) * sizeof(*in));
    if (!in) {
      s = ty_fallback_oom();
      break;
    }
    ty_value_id_t *outs = in + node->input_count;
    ty_attrs_t attrs;
    for (uint32_t i = 0; i < node->input_count && !s; ++i) {
      if (node->inputs[i] == UINT32_MAX) in[i] = TY_VALUE_NONE;
      else s = ty_seg_value(&b, node->inputs[i], &in[i]);
    }
    if (!s) s = ty_attrs_from_abi(node->attrs, node->attr_count, &attrs);
    if (!s) s = ty_graph_add_node(b.g, node->op, in, node->input_count, &attrs, outs,
                                  node->output_count);
    for (uint32_t k = 0; k < node->output_count && !s; ++k) {
      uint32_t v = node->outputs[k];
      b.map[v] = outs[k];
      char buf[32];
      if (m->exported[v] || (g->values[v].flags & TY_VALUE_FLAG_OUTPUT)) {
        s = ty_graph_set_output(b.g, outs[k], ty_fallback_name(g, v, buf, sizeof(buf)));
      }
    }
    free(in);
  }
  for (uint32_t u = 0; u < g->update_count && !s; ++u) {
    uint32_t st = g->updates[u].state, val = g->updates[u].value;
    if (m->producer_seg[val] != seg || m->home[st] != sg->device) continue;
    ty_value_id_t state_id;
    s = ty_seg_value(&b, st, &state_id);
    if (!s) s = ty_graph_set_state_update(b.g, state_id, b.map[val]);
  }
  free(b.map);
  if (s) {
    ty_graph_destroy(b.g);
    return ty_status_annotate(s, "building segment %u of a mixed run", seg + 1);
  }
  *out = b.g;
  return TY_OK;
}

/* ---- the partition, as text ---- */

#define TY_FALLBACK_LISTED_SEGMENTS 40

static ty_status_t ty_fallback_describe(ty_fallback_run_t *m) {
  const ty_abi_graph_t *g = m->graph;
  size_t cap = 512 + (size_t)m->seg_count * 512;
  char *t = malloc(cap);
  if (!t) return ty_fallback_oom();
  size_t used = (size_t)snprintf(
      t, cap, "mixed run (bring-up only, never a benchmark): graph %.12s, %u nodes in %u "
              "segments on %s and its fallback %s\n",
      g->hash_hex ? g->hash_hex : "", g->node_count, m->seg_count, ty_device_label(m->primary),
      ty_device_label(m->fallback));
  uint64_t per_run[2] = {0, 0};
  for (uint32_t k = 0; k < m->seg_count && used < cap; ++k) {
    const ty_segment_t *sg = &m->segs[k];
    uint64_t in_bytes = 0;
    for (uint32_t j = 0; j < sg->input_count; ++j) {
      in_bytes += ty_fallback_bytes(&g->values[sg->inputs[j]]);
    }
    per_run[sg->device == m->fallback] += in_bytes;
    /* A large model has hundreds of segments: the first ones show the
     * pattern, the totals below count them all. */
    if (k == TY_FALLBACK_LISTED_SEGMENTS) {
      used += (size_t)snprintf(t + used, cap - used, "  ... %u more segments\n",
                               m->seg_count - k);
    }
    if (k >= TY_FALLBACK_LISTED_SEGMENTS) continue;
    used += (size_t)snprintf(t + used, cap - used,
                             "  segment %u on %-10s nodes %u-%u (%u): ", k + 1,
                             ty_device_label(sg->device), sg->first, sg->first + sg->count - 1,
                             sg->count);
    /* The ops of the segment, each once, in order. */
    uint32_t listed = 0;
    for (uint32_t n = sg->first; n < sg->first + sg->count && used < cap; ++n) {
      bool seen = false;
      for (uint32_t p = sg->first; p < n && !seen; ++p) seen = !strcmp(g->nodes[p].op, g->nodes[n].op);
      if (seen) continue;
      if (listed++ == 8) {
        used += (size_t)snprintf(t + used, cap - used, ", ...");
        break;
      }
      used += (size_t)snprintf(t + used, cap - used, "%s%s", listed > 1 ? ", " : "",
                               g->nodes[n].op);
    }
    if (used < cap) {
      used += (size_t)snprintf(t + used, cap - used, "; %u values (%" PRIu64 " bytes) copied in\n",
                               sg->input_count, in_bytes);
    }
  }
  uint64_t deferred = 0;
  for (uint32_t d = 0; d < m->deferred_count; ++d) {
    deferred += ty_fallback_bytes(&g->values[g->updates[m->deferred[d]].state]);
  }
  if (used < cap) {
    snprintf(t + used, cap - used,
             "  copies per run: %" PRIu64 " bytes into %s, %" PRIu64 " bytes into %s, %" PRIu64
             " bytes of %u state updates copied home\n",
             per_run[0], ty_device_label(m->primary), per_run[1], ty_device_label(m->fallback),
             deferred, m->deferred_count);
  }
  m->partition = t;
  return TY_OK;
}

/* ---- life cycle ---- */

void ty_fallback_destroy(ty_fallback_run_t *m) {
  if (!m) return;
  /* Later segments share earlier ones' states: destroy in reverse. */
  for (uint32_t k = m->seg_count; k-- > 0;) {
    ty_session_destroy(m->segs[k].session);
    free(m->segs[k].inputs);
  }
  for (uint32_t v = 0; m->host && v < m->graph->value_count; ++v) free(m->host[v]);
  free(m->host);
  free(m->segs);
  free(m->node_seg);
  free(m->producer_seg);
  free(m->exported);
  free(m->home);
  free(m->holder);
  free(m->deferred);
  free(m->partition);
  free(m);
}

const ty_session_t *ty_fallback_last_on(const ty_fallback_run_t *m, const ty_device_t *device) {
  for (uint32_t k = m->seg_count; k-- > 0;) {
    if (m->segs[k].device == device && m->segs[k].session) return m->segs[k].session;
  }
  return NULL;
}

const ty_session_t *ty_fallback_holder(const ty_fallback_run_t *m, const char *name,
                                    const ty_device_t *device) {
  uint32_t v = ty_fallback_find(m->graph, name);
  if (v == UINT32_MAX || m->graph->values[v].role != TY_VALUE_STATE) return NULL;
  return m->home[v] == device ? m->holder[v] : NULL;
}

const char *ty_fallback_partition(const ty_fallback_run_t *m) { return m->partition; }

/* Creates the segment sessions (those on one device chained through
 * share_state_with) and finds each state's holder. */
static ty_status_t ty_fallback_sessions(ty_fallback_run_t *m, const ty_session_options_t *options) {
  const ty_session_t *share = options->share_state_with;
  ty_fallback_run_t *share_fallback = share ? ty_session_fallback_of(share) : NULL;
  for (uint32_t k = 0; k < m->seg_count; ++k) {
    ty_segment_t *sg = &m->segs[k];
    ty_session_options_t so = *options;
    so.fallback_device = NULL;
    so.share_state_with = ty_fallback_last_on(m, sg->device);
    if (!so.share_state_with && share_fallback) {
      so.share_state_with = ty_fallback_last_on(share_fallback, sg->device);
    } else if (!so.share_state_with && share && ty_session_device_of(share) == sg->device) {
      so.share_state_with = share;
    }
    if (sg->device == m->fallback) so.option_count = 0; /* the primary's compile options */
    ty_graph_t *g = NULL;
    TY_RETURN_IF_ERROR(ty_seg_graph(m, k, &g));
    ty_status_t s = ty_session_create(sg->device, g, &so, &sg->session);
    ty_graph_destroy(g);
    if (s) {
      return ty_status_annotate(s, "segment %u of the mixed run (%s)", k + 1,
                                ty_device_label(sg->device));
    }
  }
  const ty_abi_graph_t *g = m->graph;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (g->values[v].role != TY_VALUE_STATE) continue;
    for (uint32_t k = 0; k < m->seg_count && !m->holder[v]; ++k) {
      if (m->segs[k].device == m->home[v] && ty_session_has_state(m->segs[k].session, g->values[v].name)) {
        m->holder[v] = m->segs[k].session;
      }
    }
    if (!m->holder[v]) m->holder[v] = ty_fallback_share_holder(share, g->values[v].name, m);
    if (!m->holder[v]) {
      return ty_status_make(TY_CODE_INTERNAL, "mixed run: no session holds state '%s'",
                            g->values[v].name);
    }
  }
  return TY_OK;
}

ty_status_t ty_fallback_create(ty_device_t *primary, const ty_abi_graph_t *graph,
                            const ty_session_options_t *options, ty_fallback_run_t **out_run) {
  *out_run = NULL;
  if (options->guard_bytes || options->compile_only) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "a fallback device (mixed run) cannot be used with guard bytes or "
                          "compile-only sessions: conformance runs and artifacts are never "
                          "mixed");
  }
  if (options->fallback_device == primary) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "the fallback device is the device itself");
  }
  ty_fallback_run_t *m = calloc(1, sizeof(*m));
  if (!m) return ty_fallback_oom();
  m->primary = primary;
  m->fallback = options->fallback_device;
  m->graph = graph;
  bool all_primary = false;
  ty_status_t s = ty_fallback_assign(m, &all_primary);
  /* A session sharing state with a fallback one stays one even when its own
   * nodes all run on the primary: its states may live on the fallback. */
  bool share_fallback =
      options->share_state_with && ty_session_fallback_of(options->share_state_with);
  if (!s && all_primary && !share_fallback) {
    ty_fallback_destroy(m);
    return TY_OK;
  }
  if (!s) s = ty_fallback_plan(m, options->share_state_with);
  if (!s) s = ty_fallback_sessions(m, options);
  if (!s) s = ty_fallback_describe(m);
  if (s) {
    ty_fallback_destroy(m);
    return s;
  }
  *out_run = m;
  return TY_OK;
}

/* ---- bind, run, read ---- */

ty_status_t ty_fallback_bind(ty_fallback_run_t *m, const char *name, ty_dtype_t dtype,
                             uint32_t rank, const int64_t *dims, const void *data, size_t bytes) {
  uint32_t v = ty_fallback_find(m->graph, name);
  if (v == UINT32_MAX) {
    return ty_status_make(TY_CODE_NOT_FOUND, "the graph has no input, state or output named '%s'",
                          name);
  }
  if (m->graph->values[v].role == TY_VALUE_STATE) {
    return ty_session_bind((ty_session_t *)m->holder[v], name, dtype, rank, dims, data, bytes);
  }
  /* An input: every segment that reads it gets it. */
  bool bound = false;
  for (uint32_t k = 0; k < m->seg_count; ++k) {
    ty_tensor_desc_t d;
    ty_status_t s = ty_session_value_desc(m->segs[k].session, name, &d);
    if (s) {
      ty_status_free(s);
      continue;
    }
    TY_RETURN_IF_ERROR(ty_session_bind(m->segs[k].session, name, dtype, rank, dims, data, bytes));
    bound = true;
  }
  if (!bound) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "'%s' is an output; only inputs and states can be bound", name);
  }
  return TY_OK;
}

/* This run's host copy of value v, read from where it lives. */
static ty_status_t ty_fallback_host_copy(ty_fallback_run_t *m, uint32_t v, void **out) {
  if (m->host[v]) {
    *out = m->host[v];
    return TY_OK;
  }
  const ty_abi_value_t *val = &m->graph->values[v];
  uint64_t bytes = ty_fallback_bytes(val);
  void *data = malloc(bytes ? (size_t)bytes : 1);
  if (!data) return ty_fallback_oom();
  char buf[32];
  ty_session_t *from = val->role == TY_VALUE_STATE ? (ty_session_t *)m->holder[v]
                                                   : m->segs[m->producer_seg[v]].session;
  ty_status_t s = ty_session_read(from, ty_fallback_name(m->graph, v, buf, sizeof(buf)), data,
                                  (size_t)bytes);
  if (s) {
    free(data);
    return s;
  }
  m->host[v] = data;
  *out = data;
  return TY_OK;
}

static ty_status_t ty_fallback_copy_into(ty_fallback_run_t *m, uint32_t v, ty_session_t *to,
                                      ty_device_t *to_device) {
  void *data = NULL;
  TY_RETURN_IF_ERROR(ty_fallback_host_copy(m, v, &data));
  const ty_abi_value_t *val = &m->graph->values[v];
  uint64_t bytes = ty_fallback_bytes(val);
  char buf[32];
  TY_RETURN_IF_ERROR(ty_session_bind(to, ty_fallback_name(m->graph, v, buf, sizeof(buf)),
                                     val->dtype, val->rank, val->dims, data, (size_t)bytes));
  int side = to_device == m->fallback;
  m->run_bytes_to[side] += bytes;
  m->values_to[side]++;
  m->last_run_bytes += bytes;
  return TY_OK;
}

ty_status_t ty_fallback_run(ty_fallback_run_t *m) {
  const ty_abi_graph_t *g = m->graph;
  m->last_run_bytes = 0;
  m->run_bytes_to[0] = m->run_bytes_to[1] = 0;
  m->values_to[0] = m->values_to[1] = 0;
  ty_status_t s = TY_OK;
  for (uint32_t k = 0; k < m->seg_count && !s; ++k) {
    ty_segment_t *sg = &m->segs[k];
    for (uint32_t j = 0; j < sg->input_count && !s; ++j) {
      s = ty_fallback_copy_into(m, sg->inputs[j], sg->session, sg->device);
    }
    if (!s) {
      s = ty_status_annotate(ty_session_run(sg->session), "segment %u of the mixed run (%s)",
                             k + 1, ty_device_label(sg->device));
    }
  }
  /* Updates made on the other device, copied home after every segment ran
   * (a state keeps its old value for the whole run, as in one session). */
  for (uint32_t d = 0; d < m->deferred_count && !s; ++d) {
    const ty_abi_state_update_t *u = &g->updates[m->deferred[d]];
    void *data = NULL;
    s = ty_fallback_host_copy(m, u->value, &data);
    if (s) break;
    const ty_abi_value_t *st = &g->values[u->state];
    uint64_t bytes = ty_fallback_bytes(st);
    s = ty_session_bind((ty_session_t *)m->holder[u->state], st->name, st->dtype, st->rank,
                        st->dims, data, (size_t)bytes);
    int side = m->home[u->state] == m->fallback;
    m->run_bytes_to[side] += bytes;
    m->values_to[side]++;
    m->last_run_bytes += bytes;
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    free(m->host[v]);
    m->host[v] = NULL;
  }
  if (!s) {
    m->runs++;
    m->transfer_bytes += m->last_run_bytes;
  }
  return s;
}

ty_status_t ty_fallback_read(ty_fallback_run_t *m, const char *name, void *dst, size_t bytes) {
  uint32_t v = ty_fallback_find(m->graph, name);
  if (v == UINT32_MAX) {
    return ty_status_make(TY_CODE_NOT_FOUND, "the graph has no input, state or output named '%s'",
                          name);
  }
  const ty_abi_value_t *val = &m->graph->values[v];
  ty_session_t *from = val->role == TY_VALUE_STATE ? (ty_session_t *)m->holder[v]
                       : m->producer_seg[v] != UINT32_MAX ? m->segs[m->producer_seg[v]].session
                                                          : NULL;
  if (!from) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "'%s' is an input; only outputs and states can be read", name);
  }
  return ty_session_read(from, name, dst, bytes);
}

void ty_fallback_stats(const ty_fallback_run_t *m, ty_session_stats_t *stats) {
  for (uint32_t k = 0; k < m->seg_count; ++k) {
    ty_session_stats_t s = ty_session_stats(m->segs[k].session);
    stats->host_to_device_count += s.host_to_device_count;
    stats->host_to_device_bytes += s.host_to_device_bytes;
    stats->device_to_host_count += s.device_to_host_count;
    stats->device_to_host_bytes += s.device_to_host_bytes;
    stats->compile_seconds += s.compile_seconds;
  }
  stats->runs = m->runs;
  stats->fallback = true;
  stats->fallback_segments = m->seg_count;
  stats->transfer_bytes = m->transfer_bytes;
  stats->last_run_transfer_bytes = m->last_run_bytes;
  stats->last_run_bytes_to_primary = m->run_bytes_to[0];
  stats->last_run_bytes_to_fallback = m->run_bytes_to[1];
}
