/* Artifact byte strings for plugins (artifact_io.h). */
#include "backends/common/artifact_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/abi_graph.h"
#include "backends/common/plugin_status.h"
#include "hal/sha256.h"
#include "ops/reference/ref_interp.h"

/* ---- writing ---- */

void ty_art_put(ty_art_writer_t *w, const void *p, uint64_t n) {
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
static void ty_art_put_uint(ty_art_writer_t *w, uint64_t v, unsigned bytes) {
  unsigned char b[8];
  for (unsigned i = 0; i < bytes; ++i) b[i] = (unsigned char)(v >> (8 * i));
  ty_art_put(w, b, bytes);
}
void ty_art_put_u8(ty_art_writer_t *w, uint64_t v) { ty_art_put_uint(w, v, 1); }
void ty_art_put_u16(ty_art_writer_t *w, uint64_t v) { ty_art_put_uint(w, v, 2); }
void ty_art_put_u32(ty_art_writer_t *w, uint64_t v) { ty_art_put_uint(w, v, 4); }
void ty_art_put_u64(ty_art_writer_t *w, uint64_t v) { ty_art_put_uint(w, v, 8); }
void ty_art_put_f64(ty_art_writer_t *w, double d) {
  uint64_t v;
  memcpy(&v, &d, 8);
  ty_art_put_u64(w, v);
}
void ty_art_put_str(ty_art_writer_t *w, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > UINT16_MAX) n = UINT16_MAX;
  ty_art_put_u16(w, n);
  ty_art_put(w, s, n);
}

void ty_art_begin(ty_art_writer_t *w, const char magic[8], uint32_t version) {
  ty_art_put(w, magic, 8);
  ty_art_put_u32(w, version);
  ty_art_put_u32(w, TY_ART_HASHED_FROM);
  unsigned char zeros[32] = {0};
  ty_art_put(w, zeros, 32);
  ty_art_put_u64(w, 0); /* total size, patched by ty_art_finish */
}

bool ty_art_finish(ty_art_writer_t *w) {
  if (w->failed || w->size < TY_ART_HASHED_FROM + 8) return false;
  for (unsigned i = 0; i < 8; ++i) w->data[48 + i] = (unsigned char)(w->size >> (8 * i));
  return ty_sha256(w->data + TY_ART_HASHED_FROM, (size_t)(w->size - TY_ART_HASHED_FROM),
                   w->data + 16);
}

void ty_art_put_graph(ty_art_writer_t *w, const ty_abi_graph_t *g, ty_art_node_writer_fn extra,
                      void *user) {
  ty_art_put_u32(w, g->value_count);
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    ty_art_put_str(w, val->name);
    ty_art_put_u8(w, val->dtype);
    ty_art_put_u8(w, val->role);
    ty_art_put_u32(w, val->flags);
    ty_art_put_u8(w, val->rank);
    for (uint32_t d = 0; d < val->rank; ++d) ty_art_put_u64(w, (uint64_t)val->dims[d]);
    uint64_t bytes = val->role == TY_VALUE_CONSTANT
                         ? (uint64_t)ty_desc_value_elements(val) * ty_desc_dtype_size(val->dtype)
                         : 0;
    ty_art_put_u64(w, bytes);
    ty_art_put(w, val->const_data, bytes);
  }
  ty_art_put_u32(w, g->node_count);
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    ty_art_put_str(w, node->op);
    if (extra) extra(w, n, user);
    ty_art_put_u32(w, node->input_count);
    for (uint32_t i = 0; i < node->input_count; ++i) ty_art_put_u32(w, node->inputs[i]);
    ty_art_put_u32(w, node->output_count);
    for (uint32_t o = 0; o < node->output_count; ++o) ty_art_put_u32(w, node->outputs[o]);
    ty_art_put_u32(w, node->attr_count);
    for (uint32_t a = 0; a < node->attr_count; ++a) {
      const ty_abi_attr_t *attr = &node->attrs[a];
      ty_art_put_str(w, attr->name);
      ty_art_put_u8(w, attr->kind);
      switch (attr->kind) {
        case TY_ATTR_INT: ty_art_put_u64(w, (uint64_t)attr->i); break;
        case TY_ATTR_FLOAT: ty_art_put_f64(w, attr->f); break;
        case TY_ATTR_STRING: ty_art_put_str(w, attr->s); break;
        case TY_ATTR_INTS:
          ty_art_put_u32(w, attr->count);
          for (uint32_t k = 0; k < attr->count; ++k) ty_art_put_u64(w, (uint64_t)attr->ints[k]);
          break;
        case TY_ATTR_FLOATS:
          ty_art_put_u32(w, attr->count);
          for (uint32_t k = 0; k < attr->count; ++k) ty_art_put_f64(w, attr->floats[k]);
          break;
      }
    }
  }
  ty_art_put_u32(w, g->update_count);
  for (uint32_t u = 0; u < g->update_count; ++u) {
    ty_art_put_u32(w, g->updates[u].state);
    ty_art_put_u32(w, g->updates[u].value);
  }
}

/* ---- reading ---- */

bool ty_art_take(ty_art_reader_t *r, void *out, uint64_t n, const char *what) {
  if (r->failed) return false;
  if (n > r->size - r->at) {
    r->failed = what;
    return false;
  }
  if (out && n) memcpy(out, r->data + r->at, (size_t)n);
  r->at += n;
  return true;
}

uint64_t ty_art_get_uint(ty_art_reader_t *r, unsigned bytes, const char *what) {
  unsigned char b[8] = {0};
  if (!ty_art_take(r, b, bytes, what)) return 0;
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes; ++i) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

double ty_art_get_f64(ty_art_reader_t *r, const char *what) {
  uint64_t v = ty_art_get_u64(r, what);
  double d;
  memcpy(&d, &v, 8);
  return d;
}

void *ty_art_pool_take(ty_art_pool_t *p, uint64_t n) {
  uint64_t at = (p->used + 7) & ~(uint64_t)7;
  if (at > p->cap || n > p->cap - at) return NULL;
  p->used = at + n;
  return p->base + at;
}

char *ty_art_get_str(ty_art_reader_t *r, ty_art_pool_t *pool, const char *what) {
  uint32_t n = ty_art_get_u16(r, what);
  if (r->failed) return NULL;
  char *s = pool ? ty_art_pool_take(pool, n + 1) : malloc(n + 1);
  if (!s) {
    r->failed = "memory for a string (the lengths do not add up)";
    return NULL;
  }
  if (!ty_art_take(r, s, n, what)) {
    if (!pool) free(s);
    return NULL;
  }
  s[n] = '\0';
  return s;
}

ty_abi_status_t ty_art_malformed(const ty_art_reader_t *r, const char *detail) {
  return ty_plugin_error(TY_CODE_DATA_LOSS,
                         "%s: the artifact is malformed at byte %llu (%s) although its "
                         "content hash matches: it was written by a broken or hostile writer",
                         r->plugin, (unsigned long long)r->at, detail);
}

ty_abi_status_t ty_art_open(ty_art_reader_t *r, const unsigned char *bytes, uint64_t size,
                            const char magic[8], uint32_t version, const char *plugin,
                            const char *plugin_version, const char *made_by) {
  memset(r, 0, sizeof(*r));
  r->plugin = plugin;
  if (size < TY_ART_HASHED_FROM + 8) {
    return ty_plugin_error(TY_CODE_DATA_LOSS,
                           "%s: the artifact is truncated: %llu bytes, less than its "
                           "%u-byte header",
                           plugin, (unsigned long long)size, TY_ART_HASHED_FROM + 8);
  }
  if (memcmp(bytes, magic, 8) != 0) {
    return ty_plugin_error(TY_CODE_DATA_LOSS,
                           "%s: not a %s artifact (the file does not start with the magic "
                           "\"%.8s\"); was it made by %s?",
                           plugin, plugin, magic, made_by);
  }
  r->data = bytes;
  r->size = size;
  r->at = 8;
  uint32_t got = ty_art_get_u32(r, "version");
  uint32_t hashed_from = ty_art_get_u32(r, "header size");
  if (got != version) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "%s: artifact format version %u; this plugin (%s) reads "
                           "version %u: compile it again with 'trainyard compile'",
                           plugin, got, plugin_version, version);
  }
  unsigned char digest[32];
  if (!ty_sha256(bytes + TY_ART_HASHED_FROM, (size_t)(size - TY_ART_HASHED_FROM), digest)) {
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory hashing the artifact",
                           plugin);
  }
  if (hashed_from != TY_ART_HASHED_FROM || memcmp(digest, bytes + 16, 32) != 0) {
    return ty_plugin_error(TY_CODE_DATA_LOSS,
                           "%s: the artifact's content hash does not match its content "
                           "(%llu bytes): it is corrupt or truncated; compile it again",
                           plugin, (unsigned long long)size);
  }
  r->at = TY_ART_HASHED_FROM;
  uint64_t total = ty_art_get_u64(r, "total size");
  if (total != size) return ty_art_malformed(r, "the recorded size differs from the file's");
  return NULL;
}

/* One value of the graph block. */
static ty_abi_status_t ty_art_get_value(ty_art_reader_t *r, ty_art_pool_t *pool,
                                        ty_abi_value_t *val) {
  memset(val, 0, sizeof(*val));
  val->name = ty_art_get_str(r, pool, "value name");
  val->dtype = (ty_dtype_t)ty_art_get_u8(r, "value dtype");
  val->role = (ty_value_role_t)ty_art_get_u8(r, "value role");
  val->flags = ty_art_get_u32(r, "value flags");
  val->rank = ty_art_get_u8(r, "value rank");
  if (r->failed) return NULL;
  if (val->dtype <= TY_DTYPE_INVALID || val->dtype >= TY_DTYPE_COUNT_ || val->rank > 8 ||
      val->role > TY_VALUE_CONSTANT) {
    return ty_art_malformed(r, "a value's dtype, role or rank is out of range");
  }
  int64_t *dims = ty_art_pool_take(pool, val->rank * sizeof(int64_t) + 1);
  if (!dims) return ty_art_malformed(r, "dims");
  uint64_t elements = 1;
  for (uint32_t d = 0; d < val->rank; ++d) {
    dims[d] = (int64_t)ty_art_get_u64(r, "value dims");
    if (dims[d] < 0 || (dims[d] && elements > (UINT64_MAX >> 4) / (uint64_t)dims[d])) {
      return ty_art_malformed(r, "a dimension is out of range");
    }
    elements *= (uint64_t)dims[d];
  }
  val->dims = dims;
  uint64_t bytes = ty_art_get_u64(r, "constant size");
  if (r->failed) return NULL;
  uint64_t want = elements * ty_desc_dtype_size(val->dtype);
  if ((val->role == TY_VALUE_CONSTANT && bytes != want) ||
      (val->role != TY_VALUE_CONSTANT && bytes != 0)) {
    return ty_art_malformed(r, "a constant's size does not match its shape");
  }
  if (bytes) {
    if (bytes > r->size - r->at) return ty_art_malformed(r, "constant data");
    void *data = ty_art_pool_take(pool, bytes);
    if (!data || !ty_art_take(r, data, bytes, "constant data")) {
      return ty_art_malformed(r, "constant data");
    }
    val->const_data = data;
  }
  return NULL;
}

/* One node's operands and attributes (after its op name and extras). */
static ty_abi_status_t ty_art_get_node_body(ty_art_reader_t *r, ty_art_pool_t *pool,
                                            ty_abi_node_t *node, uint32_t nv) {
  for (int side = 0; side < 2; ++side) {
    uint32_t count = ty_art_get_u32(r, "operand count");
    if (r->failed || count > 64) return ty_art_malformed(r, "operand count");
    uint32_t *ids = ty_art_pool_take(pool, count * sizeof(uint32_t) + 1);
    if (!ids) return ty_art_malformed(r, "operands");
    for (uint32_t k = 0; k < count; ++k) {
      ids[k] = ty_art_get_u32(r, "operand");
      bool absent_ok = side == 0 && ids[k] == UINT32_MAX;
      if (!r->failed && !absent_ok && ids[k] >= nv) {
        return ty_art_malformed(r, "an operand names no value");
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
  node->attr_count = ty_art_get_u32(r, "attribute count");
  if (r->failed || node->attr_count > 64) return ty_art_malformed(r, "attribute count");
  ty_abi_attr_t *attrs = ty_art_pool_take(pool, node->attr_count * sizeof(*attrs) + 1);
  if (!attrs) return ty_art_malformed(r, "attributes");
  for (uint32_t a = 0; a < node->attr_count && !r->failed; ++a) {
    ty_abi_attr_t *attr = &attrs[a];
    memset(attr, 0, sizeof(*attr));
    attr->name = ty_art_get_str(r, pool, "attribute name");
    attr->kind = (ty_attr_kind_t)ty_art_get_u8(r, "attribute kind");
    switch (attr->kind) {
      case TY_ATTR_INT: attr->i = (int64_t)ty_art_get_u64(r, "int attribute"); break;
      case TY_ATTR_FLOAT: attr->f = ty_art_get_f64(r, "float attribute"); break;
      case TY_ATTR_STRING: attr->s = ty_art_get_str(r, pool, "string attribute"); break;
      case TY_ATTR_INTS:
      case TY_ATTR_FLOATS: {
        attr->count = ty_art_get_u32(r, "attribute list length");
        if (r->failed || attr->count > (r->size - r->at) / 8) {
          return ty_art_malformed(r, "attribute list length");
        }
        void *list = ty_art_pool_take(pool, (uint64_t)attr->count * 8 + 1);
        if (!list) return ty_art_malformed(r, "attribute list");
        for (uint32_t k = 0; k < attr->count; ++k) {
          uint64_t bits = ty_art_get_u64(r, "attribute list");
          memcpy((char *)list + 8 * k, &bits, 8);
        }
        if (attr->kind == TY_ATTR_INTS) attr->ints = list;
        else attr->floats = list;
        break;
      }
      default: return ty_art_malformed(r, "an attribute kind is unknown");
    }
  }
  node->attrs = attrs;
  return NULL;
}

ty_abi_status_t ty_art_get_graph(ty_art_reader_t *r, ty_art_pool_t *pool, ty_abi_graph_t *g,
                                 ty_art_node_reader_fn extra, void *user) {
  memset(g, 0, sizeof(*g));
  g->struct_size = sizeof(*g);
  uint32_t nv = ty_art_get_u32(r, "value count");
  /* Every value takes at least 17 bytes, every node 17: a count larger than
   * the bytes left is a lie, not an allocation to attempt. */
  if (r->failed || nv > (r->size - r->at) / 17) return ty_art_malformed(r, "value count");
  ty_abi_value_t *values = ty_art_pool_take(pool, (uint64_t)nv * sizeof(*values) + 1);
  if (!values) return ty_art_malformed(r, "values");
  for (uint32_t v = 0; v < nv && !r->failed; ++v) {
    ty_abi_status_t s = ty_art_get_value(r, pool, &values[v]);
    if (s) return s;
  }
  uint32_t nn = ty_art_get_u32(r, "node count");
  if (r->failed || nn > (r->size - r->at) / 17) return ty_art_malformed(r, "node count");
  ty_abi_node_t *nodes = ty_art_pool_take(pool, (uint64_t)nn * sizeof(*nodes) + 1);
  if (!nodes) return ty_art_malformed(r, "nodes");
  for (uint32_t n = 0; n < nn && !r->failed; ++n) {
    ty_abi_node_t *node = &nodes[n];
    memset(node, 0, sizeof(*node));
    node->op = ty_art_get_str(r, pool, "op name");
    if (r->failed) break;
    if (!ty_ref_supports_op(node->op)) return ty_art_malformed(r, "a node's op is unknown");
    if (extra) {
      ty_abi_status_t s = extra(r, n, nn, user);
      if (s) return s;
    }
    ty_abi_status_t s = ty_art_get_node_body(r, pool, node, nv);
    if (s) return s;
  }
  uint32_t nu = ty_art_get_u32(r, "update count");
  if (r->failed || nu > nv) return ty_art_malformed(r, "update count");
  ty_abi_state_update_t *updates = ty_art_pool_take(pool, nu * sizeof(*updates) + 1);
  if (!updates) return ty_art_malformed(r, "updates");
  for (uint32_t u = 0; u < nu; ++u) {
    updates[u].state = ty_art_get_u32(r, "update state");
    updates[u].value = ty_art_get_u32(r, "update value");
    if (!r->failed && (updates[u].state >= nv || updates[u].value >= nv)) {
      return ty_art_malformed(r, "a state update names no value");
    }
  }
  if (r->failed) return ty_art_malformed(r, r->failed);
  g->value_count = nv;
  g->values = values;
  g->node_count = nn;
  g->nodes = nodes;
  g->update_count = nu;
  g->updates = updates;
  return NULL;
}
