/* "faulty": a deliberately broken backend that proves `trainyard conform` can
 * fail. It runs graphs node by node with the reference kernels (so without
 * a fault it is correct) and, opened as `faulty?fault=KIND:OP`, breaks op OP:
 *
 *   perturb      scales OP's first output by 1.05 (a wrong kernel)
 *   nan          sets element 0 of OP's first output to NaN
 *   overflow     writes 4 bytes just past OP's first output
 *   skip         never runs OP (its outputs keep whatever was there)
 *   input        adds 1 to element 0 of OP's first input after running it
 *   unsupported  graph_supports refuses OP
 *
 * Built for the tests only, into their own folder; never installed. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/abi_graph.h"
#include "backends/common/plugin_status.h"
#include "hal/backend_abi.h"
#include "hal/half.h"
#include "ops/reference/ref_interp.h"

#define FAULTY_SLACK 64 /* every allocation has this much room past its end */

typedef enum { FAULT_NONE, FAULT_PERTURB, FAULT_NAN, FAULT_OVERFLOW, FAULT_SKIP,
               FAULT_INPUT, FAULT_UNSUPPORTED } faulty_kind_t;

struct ty_abi_backend_s {
  const ty_host_api_t *host;
};
struct ty_abi_device_s {
  faulty_kind_t fault;
  char op[32];
};
struct ty_abi_buffer_s {
  uint64_t size;
  unsigned char *data;
};
struct ty_abi_executable_s {
  ty_abi_device_t *device;
  ty_owned_graph_t *graph;
};

static ty_abi_status_t faulty_backend_create(const ty_abi_backend_create_args_t *args,
                                             ty_abi_backend_t **out) {
  ty_plugin_status_init(args->host);
  *out = calloc(1, sizeof(**out));
  if (!*out) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory");
  (*out)->host = args->host;
  return NULL;
}

static void faulty_backend_destroy(ty_abi_backend_t *b) { free(b); }

static ty_abi_status_t faulty_device_count(ty_abi_backend_t *b, uint32_t *out) {
  (void)b;
  *out = 1;
  return NULL;
}

static ty_abi_status_t faulty_device_info(ty_abi_backend_t *b, uint32_t index,
                                          ty_abi_device_info_t *info) {
  (void)b;
  (void)index;
  snprintf(info->name, sizeof(info->name), "faulty test device");
  snprintf(info->vendor, sizeof(info->vendor), "trainyard tests");
  info->kind = TY_DEVICE_KIND_OTHER;
  info->compute_units = 1;
  info->memory_bytes = 1ull << 30;
  info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                     TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                     TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                     TY_DTYPE_BIT(TY_DTYPE_U8);
  info->emulated = 1;
  return NULL;
}

static ty_abi_status_t faulty_device_open(ty_abi_backend_t *b,
                                          const ty_abi_device_open_args_t *args,
                                          ty_abi_device_t **out) {
  (void)b;
  static const char *const kinds[] = {"", "perturb", "nan", "overflow", "skip", "input",
                                      "unsupported"};
  ty_abi_device_t d = {FAULT_NONE, ""};
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const ty_abi_option_t *o = &args->options[i];
    const char *colon = strchr(o->value, ':');
    if (strcmp(o->key, "fault") != 0) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "faulty: unknown device option '%s' (known: fault)", o->key);
    }
    for (int k = 1; colon && k < 7; ++k) {
      if (strlen(kinds[k]) == (size_t)(colon - o->value) &&
          strncmp(kinds[k], o->value, (size_t)(colon - o->value)) == 0) {
        d.fault = (faulty_kind_t)k;
      }
    }
    if (d.fault == FAULT_NONE || strlen(colon + 1) >= sizeof(d.op) || !colon[1]) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "faulty: fault='%s' is not KIND:OP with KIND one of perturb, "
                             "nan, overflow, skip, input, unsupported",
                             o->value);
    }
    snprintf(d.op, sizeof(d.op), "%s", colon + 1);
  }
  *out = malloc(sizeof(**out));
  if (!*out) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory");
  **out = d;
  return NULL;
}

static void faulty_device_close(ty_abi_device_t *d) { free(d); }

static ty_abi_status_t faulty_buffer_alloc(ty_abi_device_t *d,
                                           const ty_abi_buffer_alloc_args_t *args,
                                           ty_abi_buffer_t **out) {
  (void)d;
  *out = calloc(1, sizeof(**out));
  if (*out) (*out)->data = calloc(1, (size_t)args->size_bytes + FAULTY_SLACK);
  if (!*out || !(*out)->data) {
    free(*out);
    *out = NULL;
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory");
  }
  (*out)->size = args->size_bytes;
  return NULL;
}

static void faulty_buffer_free(ty_abi_device_t *d, ty_abi_buffer_t *b) {
  (void)d;
  if (b) free(b->data);
  free(b);
}

static ty_abi_status_t faulty_buffer_write(ty_abi_device_t *d, ty_abi_buffer_t *b,
                                           uint64_t offset, const void *src, uint64_t size) {
  (void)d;
  memcpy(b->data + offset, src, (size_t)size);
  return NULL;
}

static ty_abi_status_t faulty_buffer_read(ty_abi_device_t *d, ty_abi_buffer_t *b,
                                          uint64_t offset, void *dst, uint64_t size) {
  (void)d;
  memcpy(dst, b->data + offset, (size_t)size);
  return NULL;
}

static ty_abi_status_t faulty_buffer_copy(ty_abi_device_t *d, ty_abi_buffer_t *src,
                                          uint64_t src_offset, ty_abi_buffer_t *dst,
                                          uint64_t dst_offset, uint64_t size) {
  (void)d;
  memmove(dst->data + dst_offset, src->data + src_offset, (size_t)size);
  return NULL;
}

static ty_abi_status_t faulty_graph_supports(ty_abi_device_t *d, const ty_abi_graph_t *g,
                                             ty_abi_node_support_t *out) {
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const char *op = g->nodes[n].op;
    out[n].supported = ty_ref_supports_op(op) &&
                       !(d->fault == FAULT_UNSUPPORTED && strcmp(op, d->op) == 0);
    if (!out[n].supported) {
      snprintf(out[n].reason, sizeof(out[n].reason), "faulty: %s is switched off", op);
    }
  }
  return NULL;
}

static ty_abi_status_t faulty_graph_compile(ty_abi_device_t *d, const ty_abi_compile_args_t *args,
                                            ty_abi_executable_t **out) {
  *out = calloc(1, sizeof(**out));
  if (*out) (*out)->graph = ty_owned_graph_copy(args->graph);
  if (!*out || !(*out)->graph) {
    free(*out);
    *out = NULL;
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory");
  }
  (*out)->device = d;
  return NULL;
}

static void faulty_executable_destroy(ty_abi_executable_t *e) {
  if (e) ty_owned_graph_free(e->graph);
  free(e);
}

/* Applies the device's fault after node `node` ran. */
static void faulty_break(const ty_abi_executable_t *e, const ty_abi_node_t *node,
                         void *const *data) {
  const ty_abi_graph_t *g = &e->graph->graph;
  uint32_t out = node->outputs[0];
  const ty_abi_value_t *v = &g->values[out];
  int64_t n = ty_abi_value_elements(v);
  switch (e->device->fault) {
    case FAULT_PERTURB:
      for (int64_t i = 0; i < n && v->dtype == TY_DTYPE_F32; ++i) ((float *)data[out])[i] *= 1.05f;
      for (int64_t i = 0; i < n && v->dtype == TY_DTYPE_BF16; ++i) {
        uint16_t *p = (uint16_t *)data[out] + i;
        *p = ty_f32_to_bf16(ty_bf16_to_f32(*p) * 1.05f);
      }
      for (int64_t i = 0; i < n && v->dtype == TY_DTYPE_F16; ++i) {
        uint16_t *p = (uint16_t *)data[out] + i;
        *p = ty_f32_to_f16(ty_f16_to_f32(*p) * 1.05f);
      }
      break;
    case FAULT_NAN:
      if (n && v->dtype == TY_DTYPE_F32) ((float *)data[out])[0] = NAN;
      if (n && (v->dtype == TY_DTYPE_BF16 || v->dtype == TY_DTYPE_F16)) {
        ((uint16_t *)data[out])[0] = 0x7FC1;
      }
      break;
    case FAULT_OVERFLOW:
      memset((unsigned char *)data[out] + e->graph->value_bytes[out], 0x5A, 4);
      break;
    case FAULT_INPUT: {
      uint32_t in = node->inputs[0];
      if (g->values[in].dtype == TY_DTYPE_F32 && ty_abi_value_elements(&g->values[in])) {
        ((float *)data[in])[0] += 1.0f;
      } else if (g->values[in].dtype == TY_DTYPE_BF16 || g->values[in].dtype == TY_DTYPE_F16) {
        ((uint16_t *)data[in])[0] ^= 0x4000;
      }
      break;
    }
    default: break;
  }
}

static ty_abi_status_t faulty_execute(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  const ty_abi_graph_t *g = &e->graph->graph;
  void **data = calloc(g->value_count ? g->value_count : 1, sizeof(void *));
  bool *owned = calloc(g->value_count ? g->value_count : 1, sizeof(bool));
  ty_abi_status_t s = (!data || !owned) ? ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory") : NULL;
  for (uint32_t b = 0; b < args->binding_count && !s; ++b) {
    for (uint32_t v = 0; v < g->value_count; ++v) {
      if (strcmp(g->values[v].name, args->bindings[b].name) == 0) {
        data[v] = args->bindings[b].buffer->data + args->bindings[b].offset;
      }
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    if (g->values[v].role == TY_VALUE_CONSTANT) data[v] = (void *)g->values[v].const_data;
    if (data[v]) continue;
    if (g->values[v].role != TY_VALUE_INTERMEDIATE) {
      s = ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "faulty: '%s' is not bound", g->values[v].name);
    } else if (!(data[v] = calloc(1, (size_t)e->graph->value_bytes[v] + FAULTY_SLACK))) {
      s = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory");
    } else {
      owned[v] = true;
    }
  }
  for (uint32_t n = 0; n < g->node_count && !s; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    bool hit = e->device->fault != FAULT_NONE && strcmp(node->op, e->device->op) == 0;
    if (hit && e->device->fault == FAULT_SKIP) continue;
    s = (ty_abi_status_t)(void *)ty_ref_execute_node(g, n, data);
    if (!s && hit) faulty_break(e, node, data);
  }
  for (uint32_t u = 0; u < g->update_count && !s; ++u) {
    const ty_abi_state_update_t *up = &g->updates[u];
    memmove(data[up->state], data[up->value], (size_t)e->graph->value_bytes[up->state]);
  }
  for (uint32_t v = 0; data && v < g->value_count; ++v) {
    if (owned[v]) free(data[v]);
  }
  free(data);
  free(owned);
  return s;
}

static const ty_backend_api_t faulty_api = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = TY_ABI_MINOR,
    .name = "faulty",
    .version = "0.0.1-test",
    .backend_create = faulty_backend_create,
    .backend_destroy = faulty_backend_destroy,
    .device_count = faulty_device_count,
    .device_info = faulty_device_info,
    .device_open = faulty_device_open,
    .device_close = faulty_device_close,
    .buffer_alloc = faulty_buffer_alloc,
    .buffer_free = faulty_buffer_free,
    .buffer_write = faulty_buffer_write,
    .buffer_read = faulty_buffer_read,
    .buffer_copy = faulty_buffer_copy,
    .graph_supports = faulty_graph_supports,
    .graph_compile = faulty_graph_compile,
    .executable_destroy = faulty_executable_destroy,
    .executable_execute = faulty_execute,
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t major, uint32_t minor) {
  (void)minor;
  return major == TY_ABI_MAJOR ? &faulty_api : NULL;
}
