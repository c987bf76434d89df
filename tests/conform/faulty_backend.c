/* "faulty": a deliberately broken backend that proves `trainyard conform`
 * (and the core's contract checks) can fail. It runs graphs on the SDK's host
 * executor with the reference kernels (so without a fault it is correct)
 * and, opened as `faulty?fault=KIND:OP`, breaks op OP:
 *
 *   perturb      scales OP's first output by 1.05 (a wrong kernel)
 *   nan          sets element 0 of OP's first output to NaN
 *   overflow     writes 4 bytes just past OP's first output
 *   offbyone     copies one element too many from OP's first input to its
 *                first output (the element past the input's end lands past
 *                the output's end): the usual off-by-one copy kernel
 *   skip         never runs OP (its outputs keep whatever was there)
 *   input        adds 1 to element 0 of OP's first input after running it
 *   unsupported  graph_supports refuses OP
 *   error        OP's kernel fails (INTERNAL "faulty: OP kernel failed")
 *   okerror      OP's kernel fails with a status made with code OK
 *
 * and `faulty?fault=nodevice` makes device_open return OK without a
 * device. Built for the tests only, into their own folder; never installed. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/abi_graph.h"
#include "backends/common/host_executor.h"
#include "backends/common/plugin_status.h"
#include "hal/backend_abi.h"
#include "hal/half.h"
#include "ops/reference/ref_interp.h"

#define FAULTY_SLACK 64 /* every allocation has this much room past its end */

typedef enum { FAULT_NONE, FAULT_PERTURB, FAULT_NAN, FAULT_OVERFLOW, FAULT_SKIP,
               FAULT_INPUT, FAULT_UNSUPPORTED, FAULT_OFFBYONE, FAULT_ERROR, FAULT_OKERROR,
               FAULT_NODEVICE, FAULT_COUNT_ } faulty_kind_t;

static const char *const faulty_kinds[FAULT_COUNT_] = {
    "", "perturb", "nan", "overflow", "skip", "input", "unsupported", "offbyone", "error",
    "okerror", "nodevice"};

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
  ty_host_executor_t *executor;
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
  ty_abi_device_t d = {FAULT_NONE, ""};
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const ty_abi_option_t *o = &args->options[i];
    if (strcmp(o->key, "fault") != 0) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "faulty: unknown device option '%s' (known: fault)", o->key);
    }
    if (strcmp(o->value, "nodevice") == 0) {
      *out = NULL; /* the fault: OK, and no device */
      return NULL;
    }
    const char *colon = strchr(o->value, ':');
    for (int k = 1; colon && k < FAULT_NODEVICE; ++k) {
      if (strlen(faulty_kinds[k]) == (size_t)(colon - o->value) &&
          strncmp(faulty_kinds[k], o->value, (size_t)(colon - o->value)) == 0) {
        d.fault = (faulty_kind_t)k;
      }
    }
    if (d.fault == FAULT_NONE || strlen(colon + 1) >= sizeof(d.op) || !colon[1]) {
      return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                             "faulty: fault='%s' is not KIND:OP with KIND one of perturb, "
                             "nan, overflow, offbyone, skip, input, unsupported, error, "
                             "okerror (or 'nodevice')",
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

/* Applies `fault` after (or instead of) node ctx->node's reference kernel. */
static ty_abi_status_t faulty_run(const ty_host_node_ctx_t *ctx, faulty_kind_t fault) {
  const ty_abi_graph_t *g = ctx->graph;
  const ty_abi_node_t *node = ctx->node;
  void *const *data = ctx->data;
  switch (fault) {
    case FAULT_SKIP: return NULL;
    case FAULT_ERROR:
      return ty_plugin_error(TY_CODE_INTERNAL, "faulty: %s kernel failed (a planted fault)",
                             node->op);
    case FAULT_OKERROR:
      return ty_plugin_error(TY_CODE_OK, "faulty: %s kernel failed (a planted fault)",
                             node->op);
    default: break;
  }
  ty_abi_status_t s = (ty_abi_status_t)(void *)ty_ref_execute_node(g, ctx->node_index, data);
  if (s) return s;
  uint32_t out = node->outputs[0];
  const ty_abi_value_t *v = &g->values[out];
  int64_t n = ty_desc_value_elements(v);
  size_t out_bytes = (size_t)n * ty_desc_dtype_size(v->dtype);
  switch (fault) {
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
      memset((unsigned char *)data[out] + out_bytes, 0x5A, 4);
      break;
    case FAULT_OFFBYONE: {
      /* for (i = 0; i <= n; ++i) y[i] = x[i]: the element past x's end
       * (the first bytes of whatever follows x) lands past y's end. */
      uint32_t in = node->inputs[0];
      size_t in_bytes = (size_t)ty_desc_value_elements(&g->values[in]) *
                        ty_desc_dtype_size(g->values[in].dtype);
      memcpy((unsigned char *)data[out] + out_bytes,
             (const unsigned char *)data[in] + in_bytes, ty_desc_dtype_size(v->dtype));
      break;
    }
    case FAULT_INPUT: {
      uint32_t in = node->inputs[0];
      if (g->values[in].dtype == TY_DTYPE_F32 && ty_desc_value_elements(&g->values[in])) {
        ((float *)data[in])[0] += 1.0f;
      } else if (g->values[in].dtype == TY_DTYPE_BF16 || g->values[in].dtype == TY_DTYPE_F16) {
        ((uint16_t *)data[in])[0] ^= 0x4000;
      }
      break;
    }
    default: break;
  }
  return NULL;
}

/* The executor's kernels take no user pointer: one per fault. */
#define FAULTY_KERNEL(kind, name) \
  static ty_abi_status_t faulty_##name(const ty_host_node_ctx_t *ctx) { return faulty_run(ctx, kind); }
FAULTY_KERNEL(FAULT_PERTURB, perturb)
FAULTY_KERNEL(FAULT_NAN, nan)
FAULTY_KERNEL(FAULT_OVERFLOW, overflow)
FAULTY_KERNEL(FAULT_OFFBYONE, offbyone)
FAULTY_KERNEL(FAULT_SKIP, skip)
FAULTY_KERNEL(FAULT_INPUT, input)
FAULTY_KERNEL(FAULT_ERROR, error)
FAULTY_KERNEL(FAULT_OKERROR, okerror)

static ty_host_kernel_fn_t faulty_find(void *user, const ty_abi_graph_t *graph, uint32_t n,
                                       ty_abi_status_t *out_error) {
  (void)out_error;
  const ty_abi_device_t *d = user;
  if (d->fault == FAULT_NONE || strcmp(graph->nodes[n].op, d->op) != 0) return NULL;
  switch (d->fault) {
    case FAULT_PERTURB: return faulty_perturb;
    case FAULT_NAN: return faulty_nan;
    case FAULT_OVERFLOW: return faulty_overflow;
    case FAULT_OFFBYONE: return faulty_offbyone;
    case FAULT_SKIP: return faulty_skip;
    case FAULT_INPUT: return faulty_input;
    case FAULT_ERROR: return faulty_error;
    case FAULT_OKERROR: return faulty_okerror;
    default: return NULL;
  }
}

static ty_abi_status_t faulty_graph_compile(ty_abi_device_t *d, const ty_abi_compile_args_t *args,
                                            ty_abi_executable_t **out) {
  ty_host_executor_options_t options;
  const ty_abi_option_t *other = NULL;
  ty_abi_status_t s = ty_host_executor_read_options(args, "faulty", &options, &other);
  if (s) return s;
  if (other) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "faulty: unknown compile option '%s'",
                           other->key);
  }
  *out = calloc(1, sizeof(**out));
  if (!*out) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "faulty: out of memory");
  s = ty_host_executor_create_opts(args->graph, "faulty", faulty_find, d, &options,
                                   &(*out)->executor);
  if (s) {
    free(*out);
    *out = NULL;
  }
  return s;
}

static void faulty_executable_destroy(ty_abi_executable_t *e) {
  if (e) ty_host_executor_destroy(e->executor);
  free(e);
}

static void faulty_buffer_view(ty_abi_buffer_t *b, unsigned char **out_data, uint64_t *out_size) {
  *out_data = b->data;
  *out_size = b->size;
}

static ty_abi_status_t faulty_execute(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  return ty_host_executor_run(e->executor, args, faulty_buffer_view, 1);
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
