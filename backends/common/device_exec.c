/* The device-executor core (device_exec.h): layout and resolution of an
 * executable's values, builder helpers, the op lookup and the decoder of
 * device data errors. */
#include "backends/common/device_exec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/device_errors.h"
#include "backends/common/plugin_status.h"

static ty_abi_status_t ty_dev_oom(const ty_dev_exec_t *x, const char *what) {
  return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory %s", x->label, what);
}

uint64_t ty_dev_exec_round_up(const ty_dev_exec_t *x, uint64_t bytes) {
  return (bytes + x->align - 1) & ~(uint64_t)(x->align - 1);
}

static int ty_dev_name_compare(const void *a, const void *b, void *ctx) {
  const ty_abi_graph_t *g = ctx;
  return strcmp(g->values[*(const uint32_t *)a].name, g->values[*(const uint32_t *)b].name);
}

ty_abi_status_t ty_dev_exec_init(ty_dev_exec_t *x, const ty_abi_graph_t *graph, uint32_t align,
                                 const char *label) {
  memset(x, 0, sizeof(*x));
  x->label = label;
  x->align = align;
  x->graph = ty_owned_graph_copy(graph);
  if (!x->graph || ty_memory_plan_build(x->graph, align, &x->plan) != TY_CODE_OK) {
    return ty_dev_oom(x, "compiling");
  }
  return ty_dev_exec_layout(x);
}

ty_abi_status_t ty_dev_exec_layout(ty_dev_exec_t *x) {
  const ty_abi_graph_t *g = ty_dev_exec_graph(x);
  const size_t nv = g->value_count ? g->value_count : 1;
  x->const_offset = calloc(nv, sizeof(uint64_t));
  x->fallback_offset = calloc(nv, sizeof(uint64_t));
  x->sorted_named = calloc(nv, sizeof(uint32_t));
  x->loc = calloc(nv, sizeof(ty_dev_loc_t));
  x->bound = calloc(nv, sizeof(bool));
  x->buffer_of = calloc(nv, sizeof(*x->buffer_of));
  if (!x->const_offset || !x->fallback_offset || !x->sorted_named || !x->loc || !x->bound ||
      !x->buffer_of) {
    return ty_dev_oom(x, "compiling");
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_value_storage_t *st = &x->plan.storage[v];
    if (st->kind == TY_STORAGE_CONSTANT) {
      x->const_offset[v] = x->const_bytes;
      x->const_bytes += ty_dev_exec_round_up(x, x->graph->value_bytes[v]);
    } else if (st->kind == TY_STORAGE_BOUND) {
      x->sorted_named[x->named_count++] = v;
      if (g->values[v].role == TY_VALUE_INTERMEDIATE) { /* an output */
        x->fallback_offset[v] = x->fallback_bytes;
        x->fallback_bytes += ty_dev_exec_round_up(x, x->graph->value_bytes[v]);
      }
    }
  }
  qsort_r(x->sorted_named, x->named_count, sizeof(uint32_t), ty_dev_name_compare, (void *)g);
  return NULL;
}

void ty_dev_exec_free(ty_dev_exec_t *x) {
  ty_memory_plan_free(&x->plan);
  ty_owned_graph_free(x->graph);
  free(x->const_offset);
  free(x->fallback_offset);
  free(x->sorted_named);
  free(x->loc);
  free(x->bound);
  free(x->buffer_of);
  free(x->aux_host);
  memset(x, 0, sizeof(*x));
}

uint32_t ty_dev_exec_find(const ty_dev_exec_t *x, const char *name) {
  const ty_abi_graph_t *g = ty_dev_exec_graph(x);
  uint32_t lo = 0, hi = x->named_count;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int c = strcmp(g->values[x->sorted_named[mid]].name, name);
    if (c == 0) return x->sorted_named[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return UINT32_MAX;
}

static ty_abi_status_t ty_dev_bind(ty_dev_exec_t *x, const ty_abi_execute_args_t *args,
                                   const ty_dev_hooks_t *h) {
  for (uint32_t i = 0; i < args->binding_count; ++i) {
    const ty_abi_binding_t *bind = &args->bindings[i];
    const uint32_t v = ty_dev_exec_find(x, bind->name);
    if (v == UINT32_MAX) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "%s: no input, state or output named '%s' in graph %.12s",
                             x->label, bind->name, x->graph->hash_hex);
    }
    uint64_t base = 0, size = 0;
    h->buffer(h->user, bind->buffer, &base, &size);
    if (bind->offset > size || x->graph->value_bytes[v] > size - bind->offset) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "%s: binding '%s' needs %llu bytes at offset %llu of a %llu-byte "
                             "buffer",
                             x->label, bind->name, (unsigned long long)x->graph->value_bytes[v],
                             (unsigned long long)bind->offset, (unsigned long long)size);
    }
    x->loc[v].base = base;
    x->loc[v].offset = bind->offset;
    x->bound[v] = true;
    x->buffer_of[v] = bind->buffer;
  }
  return NULL;
}

/* An own (CONSTANT, ARENA) or unbound value's place. */
/* Every unbound output shares one allocation, made at the first run that
 * needs it and kept for the executable's later runs. */
static ty_abi_status_t ty_dev_place_unbound(ty_dev_exec_t *x, uint32_t v,
                                            const ty_dev_hooks_t *h) {
  if (!x->fallback) {
    if (!h->alloc) {
      return ty_plugin_error(TY_CODE_INTERNAL,
                             "%s: output '%s' is not bound and the backend gives no hook "
                             "to allocate it (ty_dev_hooks_t.alloc or .unbound_output)",
                             x->label, ty_dev_exec_graph(x)->values[v].name);
    }
    ty_abi_status_t s = h->alloc(h->user, x->fallback_bytes, &x->fallback);
    if (s) return s;
  }
  x->loc[v] = (ty_dev_loc_t){x->fallback, x->fallback_offset[v]};
  return NULL;
}

static ty_abi_status_t ty_dev_place(ty_dev_exec_t *x, uint32_t v, const ty_dev_hooks_t *h) {
  const ty_abi_value_t *val = &ty_dev_exec_graph(x)->values[v];
  const ty_value_storage_t *st = &x->plan.storage[v];
  switch (st->kind) {
    case TY_STORAGE_CONSTANT:
    case TY_STORAGE_ARENA:
      if (h->place) {
        x->loc[v] = h->place(h->user, v);
      } else if (st->kind == TY_STORAGE_CONSTANT) {
        x->loc[v] = (ty_dev_loc_t){x->constants, x->const_offset[v]};
      } else {
        x->loc[v] = (ty_dev_loc_t){x->arena, st->offset};
      }
      return NULL;
    case TY_STORAGE_EXTERNAL:
      if (!h->external) {
        return ty_plugin_error(TY_CODE_INTERNAL,
                               "%s: value '%s' is kept in the backend's own memory and the "
                               "backend gives no hook to place it (ty_dev_hooks_t.external)",
                               x->label, val->name);
      }
      x->loc[v] = h->external(h->user, v);
      return NULL;
    case TY_STORAGE_STATE_ALIAS:
    case TY_STORAGE_VIEW: /* after every other kind */
      return NULL;
    case TY_STORAGE_BOUND:
      if (x->bound[v]) return NULL;
      if (val->role == TY_VALUE_INPUT && (val->flags & TY_VALUE_FLAG_LOSS_SEED) &&
          h->unbound_seed) {
        return h->unbound_seed(h->user, v, &x->loc[v]);
      }
      if (val->role != TY_VALUE_INTERMEDIATE) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: %s '%s' is not bound", x->label,
                               val->role == TY_VALUE_STATE ? "state" : "input", val->name);
      }
      if (h->unbound_output) return h->unbound_output(h->user, v, &x->loc[v]);
      return ty_dev_place_unbound(x, v, h);
  }
  return NULL;
}

ty_abi_status_t ty_dev_exec_resolve(ty_dev_exec_t *x, const ty_abi_execute_args_t *args,
                                    const ty_dev_hooks_t *hooks) {
  const ty_abi_graph_t *g = ty_dev_exec_graph(x);
  memset(x->bound, 0, (g->value_count ? g->value_count : 1) * sizeof(bool));
  ty_abi_status_t s = ty_dev_bind(x, args, hooks);
  for (uint32_t v = 0; v < g->value_count && !s; ++v) s = ty_dev_place(x, v, hooks);
  if (s) return s;
  /* Aliases of states once bound values are known, views after all. */
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (x->plan.storage[v].kind == TY_STORAGE_STATE_ALIAS) {
      x->loc[v] = x->loc[x->plan.storage[v].alias];
    }
  }
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (x->plan.storage[v].kind == TY_STORAGE_VIEW) x->loc[v] = x->loc[x->plan.storage[v].alias];
  }
  return NULL;
}

ty_dev_loc_t ty_dev_ref_loc(const ty_dev_exec_t *x, ty_dev_ref_t r) {
  ty_dev_loc_t loc = {0, 0};
  switch (r.kind) {
    case TY_DEV_REF_VALUE:
      loc = x->loc[r.value];
      loc.offset += r.offset;
      break;
    case TY_DEV_REF_ERR: loc.base = x->base[TY_DEV_REF_ERR]; break;
    case TY_DEV_REF_SCRATCH:
    case TY_DEV_REF_AUX:
    case TY_DEV_REF_TABLE:
      loc.base = x->base[r.kind];
      loc.offset = r.offset;
      break;
    default: break;
  }
  return loc;
}

ty_abi_status_t ty_dev_exec_state_updates(const ty_dev_exec_t *x,
                                          ty_abi_status_t (*copy)(void *user, uint32_t state,
                                                                  uint32_t value,
                                                                  uint64_t bytes),
                                          void *user) {
  for (uint32_t u = 0; u < x->plan.copy_count; ++u) {
    const ty_abi_state_update_t *up = &x->plan.copies[u];
    ty_abi_status_t s = copy(user, up->state, up->value, x->graph->value_bytes[up->state]);
    if (s) return s;
  }
  return NULL;
}

/* ---- data errors ---- */

static float ty_dev_f32_bits(int64_t detail) {
  uint32_t bits = (uint32_t)detail;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

ty_abi_status_t ty_dev_data_error(const ty_dev_exec_t *x, const void *error_buffer) {
  const char *buf = error_buffer;
  int32_t code, node_i;
  int64_t d[3];
  memcpy(&code, buf, 4);
  memcpy(&node_i, buf + 4, 4);
  memcpy(d, buf + 8, sizeof(d));
  const ty_abi_graph_t *g = ty_dev_exec_graph(x);
  const uint32_t node = (uint32_t)node_i;
  const char *op = node < g->node_count ? g->nodes[node].op : "?";
  const long long a = (long long)d[0], b = (long long)d[1], c = (long long)d[2];
  char what[256];
  switch (code) {
    case TY_ERR_EMBEDDING_ID:
      snprintf(what, sizeof(what), "embedding: ids[%lld] = %lld is outside the vocabulary "
               "[0, %lld)", a, b, c);
      break;
    case TY_ERR_TARGET: /* cross_entropy, or the cuda plugin's fused vocab_* ops */
      snprintf(what, sizeof(what), "%s: targets[%lld] = %lld is outside the vocabulary "
               "[0, %lld) (negative means ignored)",
               strncmp(op, "vocab_", 6) == 0 ? op : "cross_entropy", a, b, c);
      break;
    case TY_ERR_KV_POSITION:
      snprintf(what, sizeof(what), "kv_cache_write: %lld new positions starting at position "
               "%lld do not fit in a cache of max_len %lld (start must be in 0..max_len-len)",
               b, a, c);
      break;
    case TY_ERR_KV_LEN:
      snprintf(what, sizeof(what), "attention: kv_len input %lld must lie in [%lld, %lld] "
               "(the query length and the key length)", a, b, c);
      break;
    case TY_ERR_CAST_RANGE:
      snprintf(what, sizeof(what), "cast i64 -> i32: element %lld = %lld does not fit in i32",
               a, b);
      break;
    case TY_ERR_ADAMW_STEP:
      snprintf(what, sizeof(what), "adamw: step %lld must be >= 1 (it counts this update)", a);
      break;
    case TY_ERR_SGD_NESTEROV:
      snprintf(what, sizeof(what), "sgd: nesterov needs momentum > 0 (got %g)",
               (double)ty_dev_f32_bits(d[0]));
      break;
    case TY_ERR_ADAFACTOR:
      snprintf(what, sizeof(what), "adafactor: step %lld must be >= 1 and beta1 %g in [0, 1)", a,
               (double)ty_dev_f32_bits(d[1]));
      break;
    case TY_ERR_PAGED_SLOT:
      snprintf(what, sizeof(what), "paged_kv_write: row %lld writes slot %lld outside the "
               "pool's %lld slots (NB*BS; -1 skips the row)", a, b, c);
      break;
    case TY_ERR_PAGED_ROW: {
      const long long row = a / 4, kind = a % 4;
      if (kind == TY_PAGED_BAD_SEQ) {
        snprintf(what, sizeof(what), "paged_attention: row %lld has row_seq %lld outside "
                 "[-1, %lld) (the block table's rows; -1 is padding)", row, b, c);
      } else if (kind == TY_PAGED_BAD_POS) {
        snprintf(what, sizeof(what), "paged_attention: row %lld has row_pos %lld outside "
                 "[0, %lld) (MB*BS positions of a block table row)", row, b, c);
      } else {
        snprintf(what, sizeof(what), "paged_attention: row %lld reads block %lld outside the "
                 "pool's [0, %lld)", row, b, c);
      }
      break;
    }
    case TY_ERR_SAMPLE_PARAM: {
      static const char *const col[] = {
          "temperature (>= 0, finite)", "top_k (an integer >= 0)", "top_p (in (0, 1])",
          "min_p (in [0, 1))", "repetition penalty (> 0)", "presence penalty",
          "frequency penalty"};
      if (b >= 0 && b < 7) {
        snprintf(what, sizeof(what), "sample: row %lld: %s is %g", a, col[b],
                 (double)ty_dev_f32_bits(c));
      } else {
        snprintf(what, sizeof(what), "sample: row %lld: history id %lld is outside [-1, V)", a,
                 c);
      }
      break;
    }
    default:
      snprintf(what, sizeof(what), "unknown device error code %d", (int)code);
      break;
  }
  return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: node %u (%s): %s", x->label, node, op,
                         what);
}

/* ---- builder helpers ---- */

void ty_dev_fail(ty_dev_build_t *b, ty_code_t code, const char *fmt, ...) {
  if (b->status) return;
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  if (b->node) {
    b->status = ty_plugin_error(code, "%s: node %u (%s): %s", b->core->label, b->n, b->node->op,
                                message);
  } else {
    b->status = ty_plugin_error(code, "%s: %s", b->core->label, message);
  }
}

const ty_abi_value_t *ty_dev_vin(const ty_dev_build_t *b, uint32_t i) {
  if (i >= b->node->input_count || b->node->inputs[i] == UINT32_MAX) return NULL;
  return &b->g->values[b->node->inputs[i]];
}

const ty_abi_value_t *ty_dev_vout(const ty_dev_build_t *b, uint32_t o) {
  return &b->g->values[b->node->outputs[o]];
}

ty_dev_ref_t ty_dev_none(void) {
  ty_dev_ref_t r = {TY_DEV_REF_NONE, 0, 0};
  return r;
}

ty_dev_ref_t ty_dev_value(uint32_t value) {
  ty_dev_ref_t r = {TY_DEV_REF_VALUE, value, 0};
  return r;
}

ty_dev_ref_t ty_dev_in(const ty_dev_build_t *b, uint32_t i) {
  if (i < b->node->input_count && b->node->inputs[i] != UINT32_MAX) {
    return ty_dev_value(b->node->inputs[i]);
  }
  return ty_dev_none();
}

ty_dev_ref_t ty_dev_out(const ty_dev_build_t *b, uint32_t o) {
  return ty_dev_value(b->node->outputs[o]);
}

ty_dev_ref_t ty_dev_ref_at(ty_dev_ref_t ref, uint64_t byte_offset) {
  ref.offset += byte_offset;
  return ref;
}

int ty_dev_dt(const ty_abi_value_t *v) { return v ? (int)v->dtype : 0; }

int64_t ty_dev_numel(const ty_abi_value_t *v) { return ty_desc_value_elements(v); }

ty_dev_ref_t ty_dev_scratch(ty_dev_build_t *b, uint64_t bytes) {
  ty_dev_ref_t r = {TY_DEV_REF_SCRATCH, 0, b->scratch_used};
  b->scratch_used += ty_dev_exec_round_up(b->core, bytes ? bytes : 1);
  if (b->scratch_used > b->core->scratch_bytes) b->core->scratch_bytes = b->scratch_used;
  return r;
}

ty_dev_ref_t ty_dev_aux(ty_dev_build_t *b, const void *data, uint64_t bytes) {
  ty_dev_exec_t *x = b->core;
  ty_dev_ref_t r = {TY_DEV_REF_AUX, 0, x->aux_bytes};
  const uint64_t need = x->aux_bytes + ty_dev_exec_round_up(x, bytes ? bytes : 1);
  if (need > x->aux_cap) {
    uint64_t cap = x->aux_cap ? x->aux_cap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *grown = realloc(x->aux_host, cap);
    if (!grown) {
      ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return r;
    }
    x->aux_host = grown;
    x->aux_cap = cap;
  }
  if (bytes && data) memcpy(x->aux_host + x->aux_bytes, data, bytes);
  else if (bytes) memset(x->aux_host + x->aux_bytes, 0, bytes);
  x->aux_bytes = need;
  return r;
}

/* ---- the op table ---- */

const ty_dev_op_t *ty_dev_op_find(const ty_dev_op_t *table, const char *op) {
  for (const ty_dev_op_t *o = table; o->op; ++o) {
    if (strcmp(o->op, op) == 0) return o;
  }
  return NULL;
}

void ty_dev_build_nodes(ty_dev_build_t *b, const ty_dev_op_t *table,
                        const ty_dev_node_hooks_t *hooks) {
  const ty_abi_graph_t *g = b->g;
  for (uint32_t n = 0; n < g->node_count && !b->status; ++n) {
    const bool keep = !(hooks && hooks->visit) || hooks->visit(b, n);
    if (b->core->plan.skip[n] || !keep) continue;
    b->node = &g->nodes[n];
    b->n = n;
    b->scratch_used = 0;
    const ty_dev_op_t *op = ty_dev_op_find(table, b->node->op);
    if (!op) {
      ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "no kernel for this op");
      return;
    }
    op->build(b);
    if (!b->status && hooks && hooks->built) hooks->built(b);
  }
}

void ty_dev_supports(const ty_abi_graph_t *g, const ty_dev_op_t *table, const char *plugin,
                     ty_dev_op_check_fn check, ty_abi_node_support_t *out) {
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    ty_abi_node_support_t *r = &out[n];
    const ty_dev_op_t *op = ty_dev_op_find(table, node->op);
    r->supported = 0;
    if (!op) {
      snprintf(r->reason, sizeof(r->reason), "%s has no kernel for op '%s'", plugin, node->op);
      continue;
    }
    bool ok = ty_desc_node_operands_ok(g, node, op->accept, plugin, r->reason, sizeof(r->reason));
    if (ok && check) ok = check(g, node, r->reason, sizeof(r->reason));
    r->supported = ok;
  }
}

/* ---- for the backend entries ---- */

void ty_dev_device_info_copy(const ty_abi_device_info_t *info, ty_abi_device_info_t *out) {
  const size_t host_size = out->struct_size;
  memcpy(out, info, host_size < sizeof(*info) ? host_size : sizeof(*info));
  out->struct_size = host_size;
}
