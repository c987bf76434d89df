/* The dataflow artifact: a compiled executable as one self-describing file
 * (docs/dataflow.md, "Artifact format"; docs/formats.md). Little-endian:
 *
 *   0   magic "TYDFART\0"
 *   8   u32 format version (1)
 *   12  u32 offset of the hashed content (48)
 *   16  SHA-256 of bytes [48, end)
 *   48  u64 total size
 *   56  target: u32 tiles, u32 clock_mhz, u64 mem_per_tile,
 *       f64 bandwidth_gbs, u64 dram
 *   88  u32 kind (1 train step, 2 inference)
 *   92  graph hash, 64 ASCII hex digits
 *   156 the rest: plugin version, cost-model constant, sections, tiles,
 *       estimates, hyperparameter names, fixed dropout probabilities, the
 *       slot table, and the scheduled graph with its placement; then "END!"
 *
 * Reading verifies magic, version and hash before it parses anything, and
 * bounds-checks every field after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/abi_graph.h"
#include "backends/common/plugin_status.h"
#include "backends/common/sha256.h"
#include "backends/dataflow/dataflow_internal.h"
#include "ops/reference/ref_interp.h"

#define DF_MAGIC "TYDFART"
#define DF_FORMAT_VERSION 1u
#define DF_HASHED_FROM 48u
#define DF_END_MARKER 0x21444E45u /* "END!" */

/* ---- writing ---- */

typedef struct {
  unsigned char *data;
  uint64_t size, cap;
  bool failed;
} df_writer_t;

static void df_put(df_writer_t *w, const void *p, uint64_t n) {
  if (w->failed) return;
  if (w->size + n > w->cap) {
    uint64_t cap = w->cap ? w->cap : 4096;
    while (cap < w->size + n) cap *= 2;
    unsigned char *grown = realloc(w->data, (size_t)cap);
    if (!grown) {
      w->failed = true;
      return;
    }
    w->data = grown;
    w->cap = cap;
  }
  if (n) memcpy(w->data + w->size, p, (size_t)n);
  w->size += n;
}

/* Fixed-width little-endian integers (the format's byte order on every host). */
static void df_put_uint(df_writer_t *w, uint64_t v, unsigned bytes) {
  unsigned char b[8];
  for (unsigned i = 0; i < bytes; ++i) b[i] = (unsigned char)(v >> (8 * i));
  df_put(w, b, bytes);
}
static void df_put_u8(df_writer_t *w, uint64_t v) { df_put_uint(w, v, 1); }
static void df_put_u16(df_writer_t *w, uint64_t v) { df_put_uint(w, v, 2); }
static void df_put_u32(df_writer_t *w, uint64_t v) { df_put_uint(w, v, 4); }
static void df_put_u64(df_writer_t *w, uint64_t v) { df_put_uint(w, v, 8); }
static void df_put_f64(df_writer_t *w, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  df_put_u64(w, v);
}
static void df_put_str(df_writer_t *w, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > UINT16_MAX) n = UINT16_MAX;
  df_put_u16(w, n);
  df_put(w, s, n);
}

static void df_put_graph(df_writer_t *w, const ty_abi_graph_t *g, const df_plan_t *plan) {
  df_put_u32(w, g->value_count);
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    df_put_str(w, val->name);
    df_put_u8(w, val->dtype);
    df_put_u8(w, val->role);
    df_put_u32(w, val->flags);
    df_put_u8(w, val->rank);
    for (uint32_t d = 0; d < val->rank; ++d) df_put_u64(w, (uint64_t)val->dims[d]);
    uint64_t bytes = val->role == TY_VALUE_CONSTANT
                         ? (uint64_t)ty_abi_value_elements(val) * ty_abi_dtype_size(val->dtype)
                         : 0;
    df_put_u64(w, bytes);
    df_put(w, val->const_data, bytes);
  }
  df_put_u32(w, g->node_count);
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    df_put_str(w, node->op);
    df_put_u8(w, plan->section[n]);
    df_put_u16(w, plan->tile[n]);
    df_put_u32(w, node->input_count);
    for (uint32_t i = 0; i < node->input_count; ++i) df_put_u32(w, node->inputs[i]);
    df_put_u32(w, node->output_count);
    for (uint32_t o = 0; o < node->output_count; ++o) df_put_u32(w, node->outputs[o]);
    df_put_u32(w, node->attr_count);
    for (uint32_t a = 0; a < node->attr_count; ++a) {
      const ty_abi_attr_t *attr = &node->attrs[a];
      df_put_str(w, attr->name);
      df_put_u8(w, attr->kind);
      switch (attr->kind) {
        case TY_ATTR_INT: df_put_u64(w, (uint64_t)attr->i); break;
        case TY_ATTR_FLOAT: df_put_f64(w, attr->f); break;
        case TY_ATTR_STRING: df_put_str(w, attr->s); break;
        case TY_ATTR_INTS:
          df_put_u32(w, attr->count);
          for (uint32_t k = 0; k < attr->count; ++k) df_put_u64(w, (uint64_t)attr->ints[k]);
          break;
        case TY_ATTR_FLOATS:
          df_put_u32(w, attr->count);
          for (uint32_t k = 0; k < attr->count; ++k) df_put_f64(w, attr->floats[k]);
          break;
      }
    }
  }
  df_put_u32(w, g->update_count);
  for (uint32_t u = 0; u < g->update_count; ++u) {
    df_put_u32(w, g->updates[u].state);
    df_put_u32(w, g->updates[u].value);
  }
}

ty_abi_status_t df_artifact_write(const ty_abi_executable_t *e, unsigned char **out_bytes,
                                  uint64_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  const df_plan_t *plan = &e->plan;
  const ty_abi_graph_t *g = ty_host_executor_graph(e->executor);
  df_writer_t w = {0};
  df_put(&w, DF_MAGIC, 8); /* with its NUL */
  df_put_u32(&w, DF_FORMAT_VERSION);
  df_put_u32(&w, DF_HASHED_FROM);
  unsigned char zeros[32] = {0};
  df_put(&w, zeros, 32);
  df_put_u64(&w, 0); /* total size, patched below */
  df_put_u32(&w, plan->target.tiles);
  df_put_u32(&w, plan->target.clock_mhz);
  df_put_u64(&w, plan->target.mem_per_tile);
  df_put_f64(&w, plan->target.bandwidth_gbs);
  df_put_u64(&w, plan->target.dram_bytes);
  df_put_u32(&w, plan->kind);
  char hash[64];
  memset(hash, '0', sizeof(hash));
  memcpy(hash, plan->graph_hash, strnlen(plan->graph_hash, 64));
  df_put(&w, hash, 64);
  df_put_str(&w, TY_DATAFLOW_VERSION);
  df_put_u32(&w, DF_MACS_PER_TILE);
  for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
    const df_section_stats_t *sec = &plan->sections[s];
    df_put_u32(&w, sec->nodes);
    df_put_f64(&w, sec->flops);
    df_put_u64(&w, sec->dram_bytes);
    df_put_u64(&w, sec->compute_cycles);
    df_put_u64(&w, sec->dram_cycles);
  }
  df_put_u32(&w, plan->target.tiles);
  for (uint32_t k = 0; k < plan->target.tiles; ++k) {
    const df_tile_stats_t *t = &plan->tiles[k];
    df_put_u32(&w, t->nodes);
    df_put_f64(&w, t->flops);
    df_put_u64(&w, t->state_bytes);
    df_put_u64(&w, t->peak_activation_bytes);
    df_put_u64(&w, t->spill_bytes);
  }
  df_put_u64(&w, plan->cycles_per_step);
  df_put_u64(&w, plan->tokens_per_step);
  uint32_t hyper = 0;
  for (uint32_t i = 0; i < plan->slot_count; ++i) hyper += plan->slots[i].role == DF_ROLE_HYPERPARAMETER;
  df_put_u32(&w, hyper);
  for (uint32_t i = 0; i < plan->slot_count; ++i) {
    if (plan->slots[i].role == DF_ROLE_HYPERPARAMETER) df_put_str(&w, plan->slots[i].name);
  }
  df_put_u32(&w, plan->dropout_count);
  for (uint32_t i = 0; i < plan->dropout_count; ++i) df_put_f64(&w, plan->dropout_p[i]);
  df_put_u32(&w, plan->slot_count);
  for (uint32_t i = 0; i < plan->slot_count; ++i) {
    const df_slot_t *slot = &plan->slots[i];
    df_put_str(&w, slot->name);
    df_put_u8(&w, slot->role);
    df_put_u8(&w, slot->dtype);
    df_put_u8(&w, slot->rank);
    for (uint32_t d = 0; d < slot->rank; ++d) df_put_u64(&w, (uint64_t)slot->dims[d]);
    df_put_u64(&w, slot->bytes);
  }
  df_put_graph(&w, g, plan);
  df_put_u32(&w, DF_END_MARKER);
  if (w.failed) {
    free(w.data);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory serializing");
  }
  for (unsigned i = 0; i < 8; ++i) w.data[48 + i] = (unsigned char)(w.size >> (8 * i));
  ty_sha256(w.data + DF_HASHED_FROM, (size_t)(w.size - DF_HASHED_FROM), w.data + 16);
  *out_bytes = w.data;
  *out_size = w.size;
  return NULL;
}

/* ---- reading ---- */

typedef struct {
  const unsigned char *data;
  uint64_t size, at;
  const char *failed; /* what was being read when the bytes ran out */
} df_reader_t;

static bool df_take(df_reader_t *r, void *out, uint64_t n, const char *what) {
  if (r->failed) return false;
  if (n > r->size - r->at) {
    r->failed = what;
    return false;
  }
  if (out && n) memcpy(out, r->data + r->at, (size_t)n);
  r->at += n;
  return true;
}

static uint64_t df_get_uint(df_reader_t *r, unsigned bytes, const char *what) {
  unsigned char b[8] = {0};
  if (!df_take(r, b, bytes, what)) return 0;
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes; ++i) v |= (uint64_t)b[i] << (8 * i);
  return v;
}
#define df_get_u8(r, what) ((uint32_t)df_get_uint((r), 1, (what)))
#define df_get_u16(r, what) ((uint32_t)df_get_uint((r), 2, (what)))
#define df_get_u32(r, what) ((uint32_t)df_get_uint((r), 4, (what)))
#define df_get_u64(r, what) df_get_uint((r), 8, (what))
static double df_get_f64(df_reader_t *r, const char *what) {
  uint64_t v = df_get_u64(r, what);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

/* A length-prefixed string, copied into pool memory (NUL-terminated). */
typedef struct {
  unsigned char *base;
  uint64_t used, cap;
} df_pool_t;

static void *df_pool_take(df_pool_t *p, uint64_t n) {
  uint64_t at = (p->used + 7) & ~(uint64_t)7;
  if (at > p->cap || n > p->cap - at) return NULL;
  p->used = at + n;
  return p->base + at;
}

static char *df_get_str(df_reader_t *r, df_pool_t *pool, const char *what) {
  uint32_t n = df_get_u16(r, what);
  if (r->failed) return NULL;
  char *s = pool ? df_pool_take(pool, n + 1) : malloc(n + 1);
  if (!s) {
    r->failed = "memory for a string (the lengths do not add up)";
    return NULL;
  }
  if (!df_take(r, s, n, what)) {
    if (!pool) free(s);
    return NULL;
  }
  s[n] = '\0';
  return s;
}

static ty_abi_status_t df_malformed(const df_reader_t *r, const char *detail) {
  return ty_plugin_error(TY_CODE_DATA_LOSS,
                         "dataflow: the artifact is malformed at byte %llu (%s) although its "
                         "content hash matches: it was written by a broken or hostile writer",
                         (unsigned long long)r->at, detail);
}

/* Parses the graph block into `pool`; checks indices and ops. */
static ty_abi_status_t df_get_graph(df_reader_t *r, df_pool_t *pool, df_plan_t *plan,
                                    ty_abi_graph_t *g) {
  memset(g, 0, sizeof(*g));
  g->struct_size = sizeof(*g);
  uint32_t nv = df_get_u32(r, "value count");
  /* Every value takes at least 17 bytes, every node 17: a count larger than
   * the bytes left is a lie, not an allocation to attempt. */
  if (r->failed || nv > (r->size - r->at) / 17) return df_malformed(r, "value count");
  ty_abi_value_t *values = df_pool_take(pool, (uint64_t)nv * sizeof(*values) + 1);
  if (!values) return df_malformed(r, "values");
  for (uint32_t v = 0; v < nv && !r->failed; ++v) {
    ty_abi_value_t *val = &values[v];
    memset(val, 0, sizeof(*val));
    val->name = df_get_str(r, pool, "value name");
    val->dtype = (ty_dtype_t)df_get_u8(r, "value dtype");
    val->role = (ty_value_role_t)df_get_u8(r, "value role");
    val->flags = df_get_u32(r, "value flags");
    val->rank = df_get_u8(r, "value rank");
    if (r->failed) break;
    if (val->dtype <= TY_DTYPE_INVALID || val->dtype >= TY_DTYPE_COUNT_ || val->rank > 8 ||
        val->role > TY_VALUE_CONSTANT) {
      return df_malformed(r, "a value's dtype, role or rank is out of range");
    }
    int64_t *dims = df_pool_take(pool, val->rank * sizeof(int64_t) + 1);
    if (!dims) return df_malformed(r, "dims");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < val->rank; ++d) {
      dims[d] = (int64_t)df_get_u64(r, "value dims");
      if (dims[d] < 0 || (dims[d] && elements > (UINT64_MAX >> 4) / (uint64_t)dims[d])) {
        return df_malformed(r, "a dimension is out of range");
      }
      elements *= (uint64_t)dims[d];
    }
    val->dims = dims;
    uint64_t bytes = df_get_u64(r, "constant size");
    if (r->failed) break;
    uint64_t want = elements * ty_abi_dtype_size(val->dtype);
    if ((val->role == TY_VALUE_CONSTANT && bytes != want) ||
        (val->role != TY_VALUE_CONSTANT && bytes != 0)) {
      return df_malformed(r, "a constant's size does not match its shape");
    }
    if (bytes) {
      if (bytes > r->size - r->at) return df_malformed(r, "constant data");
      void *data = df_pool_take(pool, bytes);
      if (!data || !df_take(r, data, bytes, "constant data")) return df_malformed(r, "constant data");
      val->const_data = data;
    }
  }
  uint32_t nn = df_get_u32(r, "node count");
  if (r->failed || nn > (r->size - r->at) / 17) return df_malformed(r, "node count");
  ty_abi_node_t *nodes = df_pool_take(pool, (uint64_t)nn * sizeof(*nodes) + 1);
  plan->section = malloc(nn ? nn : 1);
  plan->tile = malloc((nn ? nn : 1) * sizeof(uint16_t));
  if (!nodes || !plan->section || !plan->tile) return df_malformed(r, "nodes");
  plan->node_count = nn;
  for (uint32_t n = 0; n < nn && !r->failed; ++n) {
    ty_abi_node_t *node = &nodes[n];
    memset(node, 0, sizeof(*node));
    node->op = df_get_str(r, pool, "op name");
    plan->section[n] = (uint8_t)df_get_u8(r, "node section");
    plan->tile[n] = (uint16_t)df_get_u16(r, "node tile");
    if (r->failed) break;
    if (!ty_ref_supports_op(node->op) || plan->section[n] >= DF_SECTION_COUNT ||
        plan->tile[n] >= plan->target.tiles) {
      return df_malformed(r, "a node's op, section or tile is unknown");
    }
    for (int side = 0; side < 2; ++side) {
      uint32_t count = df_get_u32(r, "operand count");
      if (r->failed || count > 64) return df_malformed(r, "operand count");
      uint32_t *ids = df_pool_take(pool, count * sizeof(uint32_t) + 1);
      if (!ids) return df_malformed(r, "operands");
      for (uint32_t k = 0; k < count; ++k) {
        ids[k] = df_get_u32(r, "operand");
        bool absent_ok = side == 0 && ids[k] == UINT32_MAX;
        if (!r->failed && !absent_ok && ids[k] >= nv) {
          return df_malformed(r, "an operand names no value");
        }
      }
      if (side == 0) {
        node->input_count = count;
        node->inputs = ids;
      } else {
        node->output_count = count;
        node->outputs = ids;
      }
    }
    node->attr_count = df_get_u32(r, "attribute count");
    if (r->failed || node->attr_count > 64) return df_malformed(r, "attribute count");
    ty_abi_attr_t *attrs = df_pool_take(pool, node->attr_count * sizeof(*attrs) + 1);
    if (!attrs) return df_malformed(r, "attributes");
    for (uint32_t a = 0; a < node->attr_count && !r->failed; ++a) {
      ty_abi_attr_t *attr = &attrs[a];
      memset(attr, 0, sizeof(*attr));
      attr->name = df_get_str(r, pool, "attribute name");
      attr->kind = (ty_attr_kind_t)df_get_u8(r, "attribute kind");
      switch (attr->kind) {
        case TY_ATTR_INT: attr->i = (int64_t)df_get_u64(r, "int attribute"); break;
        case TY_ATTR_FLOAT: attr->f = df_get_f64(r, "float attribute"); break;
        case TY_ATTR_STRING: attr->s = df_get_str(r, pool, "string attribute"); break;
        case TY_ATTR_INTS:
        case TY_ATTR_FLOATS: {
          attr->count = df_get_u32(r, "attribute list length");
          if (r->failed || attr->count > (r->size - r->at) / 8) {
            return df_malformed(r, "attribute list length");
          }
          void *list = df_pool_take(pool, (uint64_t)attr->count * 8 + 1);
          if (!list) return df_malformed(r, "attribute list");
          for (uint32_t k = 0; k < attr->count; ++k) {
            uint64_t bits = df_get_u64(r, "attribute list");
            memcpy((char *)list + 8 * k, &bits, 8);
          }
          if (attr->kind == TY_ATTR_INTS) attr->ints = list;
          else attr->floats = list;
          break;
        }
        default: return df_malformed(r, "an attribute kind is unknown");
      }
    }
    node->attrs = attrs;
  }
  uint32_t nu = df_get_u32(r, "update count");
  if (r->failed || nu > nv) return df_malformed(r, "update count");
  ty_abi_state_update_t *updates = df_pool_take(pool, nu * sizeof(*updates) + 1);
  if (!updates) return df_malformed(r, "updates");
  for (uint32_t u = 0; u < nu; ++u) {
    updates[u].state = df_get_u32(r, "update state");
    updates[u].value = df_get_u32(r, "update value");
    if (!r->failed && (updates[u].state >= nv || updates[u].value >= nv)) {
      return df_malformed(r, "a state update names no value");
    }
  }
  if (r->failed) return df_malformed(r, r->failed);
  g->value_count = nv;
  g->values = values;
  g->node_count = nn;
  g->nodes = nodes;
  g->update_count = nu;
  g->updates = updates;
  g->hash_hex = plan->graph_hash;
  return NULL;
}

ty_abi_status_t df_artifact_read(const unsigned char *bytes, uint64_t size,
                                 const df_target_t *device_target, df_plan_t *plan,
                                 ty_abi_graph_t *out_graph, void **out_block) {
  memset(plan, 0, sizeof(*plan));
  *out_block = NULL;
  if (size < DF_HASHED_FROM + 8) {
    return ty_plugin_error(TY_CODE_DATA_LOSS,
                           "dataflow: the artifact is truncated: %llu bytes, less than its "
                           "%u-byte header",
                           (unsigned long long)size, DF_HASHED_FROM + 8);
  }
  if (memcmp(bytes, DF_MAGIC, 8) != 0) {
    return ty_plugin_error(TY_CODE_DATA_LOSS,
                           "dataflow: not a dataflow artifact (the file does not start with "
                           "the magic \"TYDFART\"); was it made by 'trainyard compile "
                           "--backend dataflow'?");
  }
  df_reader_t r = {.data = bytes, .size = size, .at = 8};
  uint32_t version = df_get_u32(&r, "version");
  uint32_t hashed_from = df_get_u32(&r, "header size");
  if (version != DF_FORMAT_VERSION) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: artifact format version %u; this plugin (%s) reads "
                           "version %u: compile it again with 'trainyard compile'",
                           version, TY_DATAFLOW_VERSION, DF_FORMAT_VERSION);
  }
  unsigned char digest[32];
  ty_sha256(bytes + DF_HASHED_FROM, (size_t)(size - DF_HASHED_FROM), digest);
  if (hashed_from != DF_HASHED_FROM || memcmp(digest, bytes + 16, 32) != 0) {
    return ty_plugin_error(TY_CODE_DATA_LOSS,
                           "dataflow: the artifact's content hash does not match its content "
                           "(%llu bytes): it is corrupt or truncated; compile it again",
                           (unsigned long long)size);
  }
  r.at = DF_HASHED_FROM;
  uint64_t total = df_get_u64(&r, "total size");
  if (total != size) return df_malformed(&r, "the recorded size differs from the file's");
  plan->target.tiles = df_get_u32(&r, "target");
  plan->target.clock_mhz = df_get_u32(&r, "target");
  plan->target.mem_per_tile = df_get_u64(&r, "target");
  plan->target.bandwidth_gbs = df_get_f64(&r, "target");
  plan->target.dram_bytes = df_get_u64(&r, "target");
  if (!r.failed && !df_same_target(&plan->target, device_target)) {
    char have[160], want[160];
    df_format_target(&plan->target, have, sizeof(have));
    df_format_target(device_target, want, sizeof(want));
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: target mismatch: the artifact was compiled for %s, but the "
                           "device is %s; open the device with the artifact's options or "
                           "compile again for this device",
                           have, want);
  }
  plan->kind = (df_kind_t)df_get_u32(&r, "kind");
  df_take(&r, plan->graph_hash, 64, "graph hash");
  plan->graph_hash[64] = '\0';
  if (plan->target.tiles < 1 || plan->target.tiles > DF_MAX_TILES ||
      (plan->kind != DF_KIND_TRAIN && plan->kind != DF_KIND_INFERENCE)) {
    return df_malformed(&r, "target tiles or kind out of range");
  }
  char *writer = df_get_str(&r, NULL, "plugin version");
  free(writer);
  (void)df_get_u32(&r, "cost model");
  for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
    df_section_stats_t *sec = &plan->sections[s];
    sec->nodes = df_get_u32(&r, "sections");
    sec->flops = df_get_f64(&r, "sections");
    sec->dram_bytes = df_get_u64(&r, "sections");
    sec->compute_cycles = df_get_u64(&r, "sections");
    sec->dram_cycles = df_get_u64(&r, "sections");
  }
  if (df_get_u32(&r, "tile count") != plan->target.tiles) return df_malformed(&r, "tile count");
  for (uint32_t k = 0; k < plan->target.tiles; ++k) {
    df_tile_stats_t *t = &plan->tiles[k];
    t->nodes = df_get_u32(&r, "tiles");
    t->flops = df_get_f64(&r, "tiles");
    t->state_bytes = df_get_u64(&r, "tiles");
    t->peak_activation_bytes = df_get_u64(&r, "tiles");
    t->spill_bytes = df_get_u64(&r, "tiles");
  }
  plan->cycles_per_step = df_get_u64(&r, "estimates");
  plan->tokens_per_step = df_get_u64(&r, "estimates");
  uint32_t hyper = df_get_u32(&r, "hyperparameter count");
  for (uint32_t i = 0; i < hyper && !r.failed; ++i) {
    free(df_get_str(&r, NULL, "hyperparameter names")); /* the slot table has them */
  }
  plan->dropout_count = df_get_u32(&r, "dropout count");
  if (r.failed || plan->dropout_count > 1024) return df_malformed(&r, "dropout count");
  plan->dropout_p = malloc((plan->dropout_count + 1) * sizeof(double));
  if (!plan->dropout_p) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  for (uint32_t i = 0; i < plan->dropout_count; ++i) plan->dropout_p[i] = df_get_f64(&r, "dropout");
  uint32_t slots = df_get_u32(&r, "slot count");
  if (r.failed || slots > (size - r.at) / 12) return df_malformed(&r, "slot count");
  plan->slots = calloc(slots + 1, sizeof(df_slot_t));
  if (!plan->slots) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  for (uint32_t i = 0; i < slots && !r.failed; ++i) {
    df_slot_t *slot = &plan->slots[i];
    plan->slot_count = i + 1;
    slot->name = df_get_str(&r, NULL, "slot name");
    slot->role = (df_role_t)df_get_u8(&r, "slot role");
    slot->dtype = (ty_dtype_t)df_get_u8(&r, "slot dtype");
    slot->rank = df_get_u8(&r, "slot rank");
    if (!r.failed && (slot->role >= DF_ROLE_COUNT || slot->rank > 8)) {
      return df_malformed(&r, "a slot's role or rank is out of range");
    }
    for (uint32_t d = 0; d < slot->rank; ++d) slot->dims[d] = (int64_t)df_get_u64(&r, "slot dims");
    slot->bytes = df_get_u64(&r, "slot bytes");
  }
  if (r.failed) return df_malformed(&r, r.failed);
  /* The graph's pool: its structs take at most ~6x their serialized bytes. */
  df_pool_t pool = {0};
  pool.cap = 8 * (size - r.at) + 64 * 1024;
  pool.base = malloc((size_t)pool.cap);
  if (!pool.base) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  ty_abi_status_t s = df_get_graph(&r, &pool, plan, out_graph);
  if (!s && df_get_u32(&r, "end marker") != DF_END_MARKER) s = df_malformed(&r, "end marker");
  if (!s && r.at != size) s = df_malformed(&r, "bytes after the end marker");
  if (s) {
    free(pool.base);
    return s;
  }
  *out_block = pool.base;
  return NULL;
}
