/* An out-of-tree Trainyard backend, built against an installed Trainyard
 * only (the SDK: <trainyard/...> headers and libty_backend_support.a). It is
 * what docs/plugin-abi.md's "Write a backend in an afternoon" builds up to:
 * a device whose memory is host memory, f32 kernels for a few ops run by the
 * SDK's graph executor, and graph_supports that says no, with a reason, to
 * everything else. `trainyard conform --backend example` passes the cases it
 * supports and reports the rest as unsupported.
 *
 * Build (either):
 *   cmake -S . -B build -DCMAKE_PREFIX_PATH=<trainyard prefix> && cmake --build build
 *   make PKG_CONFIG_PATH=<trainyard prefix>/lib/pkgconfig
 * Run:
 *   trainyard --plugin-path build/libty_backend_example.so conform --backend example */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <trainyard/backend_abi.h>
#include <trainyard/host_buffers.h>
#include <trainyard/host_executor.h>
#include <trainyard/plugin_status.h>

struct ty_abi_backend_s {
  int unused; /* this backend keeps no state; a real one keeps its driver here */
};
struct ty_abi_device_s {
  int unused;
};
struct ty_abi_executable_s {
  ty_host_executor_t *executor;
};

/* ---- kernels: ctx->data[v] is value v's dense row-major f32 storage ---- */

static int64_t example_elements(const ty_host_node_ctx_t *ctx, uint32_t value) {
  return ty_desc_value_elements(&ctx->graph->values[value]);
}

static ty_abi_status_t example_add(const ty_host_node_ctx_t *ctx) {
  const float *a = ctx->data[ctx->node->inputs[0]], *b = ctx->data[ctx->node->inputs[1]];
  float *c = ctx->data[ctx->node->outputs[0]];
  for (int64_t i = 0, n = example_elements(ctx, ctx->node->outputs[0]); i < n; ++i) c[i] = a[i] + b[i];
  return NULL;
}

static ty_abi_status_t example_mul(const ty_host_node_ctx_t *ctx) {
  const float *a = ctx->data[ctx->node->inputs[0]], *b = ctx->data[ctx->node->inputs[1]];
  float *c = ctx->data[ctx->node->outputs[0]];
  for (int64_t i = 0, n = example_elements(ctx, ctx->node->outputs[0]); i < n; ++i) c[i] = a[i] * b[i];
  return NULL;
}

static ty_abi_status_t example_scale(const ty_host_node_ctx_t *ctx) {
  /* `alpha` is required by the op set; attributes come typed (INT or FLOAT). */
  float alpha = (float)ty_desc_node_attr_float(ctx->node, "alpha", 1.0);
  const float *x = ctx->data[ctx->node->inputs[0]];
  float *y = ctx->data[ctx->node->outputs[0]];
  for (int64_t i = 0, n = example_elements(ctx, ctx->node->outputs[0]); i < n; ++i) y[i] = alpha * x[i];
  return NULL;
}

/* gelu, tanh form: y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3);
 * dx = dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)). */
#define EXAMPLE_GELU_K 0.7978845608028654f
static ty_abi_status_t example_gelu(const ty_host_node_ctx_t *ctx) {
  const float *x = ctx->data[ctx->node->inputs[0]];
  float *y = ctx->data[ctx->node->outputs[0]];
  for (int64_t i = 0, n = example_elements(ctx, ctx->node->outputs[0]); i < n; ++i) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(EXAMPLE_GELU_K * (v + 0.044715f * v * v * v)));
  }
  return NULL;
}

static ty_abi_status_t example_gelu_backward(const ty_host_node_ctx_t *ctx) {
  const float *dy = ctx->data[ctx->node->inputs[0]], *x = ctx->data[ctx->node->inputs[1]];
  float *dx = ctx->data[ctx->node->outputs[0]];
  for (int64_t i = 0, n = example_elements(ctx, ctx->node->outputs[0]); i < n; ++i) {
    float v = x[i], t = tanhf(EXAMPLE_GELU_K * (v + 0.044715f * v * v * v));
    float du = EXAMPLE_GELU_K * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
  return NULL;
}

/* matmul of two rank-2 operands, c[M,N] = op(a) op(b) (+ bias[N]), where
 * trans_a means a is stored [K,M] and trans_b that b is stored [N,K]. The
 * optional bias is absent when its input index is UINT32_MAX. */
static ty_abi_status_t example_matmul(const ty_host_node_ctx_t *ctx) {
  const ty_abi_node_t *node = ctx->node;
  const ty_abi_value_t *out = &ctx->graph->values[node->outputs[0]];
  int64_t trans_a = ty_desc_node_attr_int(node, "trans_a", 0);
  int64_t trans_b = ty_desc_node_attr_int(node, "trans_b", 0);
  const ty_abi_value_t *av = &ctx->graph->values[node->inputs[0]];
  int64_t M = out->dims[0], N = out->dims[1], K = trans_a ? av->dims[0] : av->dims[1];
  const float *a = ctx->data[node->inputs[0]], *b = ctx->data[node->inputs[1]];
  const float *bias = node->input_count > 2 && node->inputs[2] != UINT32_MAX
                          ? ctx->data[node->inputs[2]]
                          : NULL;
  float *c = ctx->data[node->outputs[0]];
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = bias ? bias[n] : 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        acc += (trans_a ? a[k * M + m] : a[m * K + k]) * (trans_b ? b[n * K + k] : b[k * N + n]);
      }
      c[m * N + n] = acc;
    }
  }
  return NULL;
}

static const struct {
  const char *op;
  ty_host_kernel_fn_t fn;
} example_kernels[] = {
    {"add", example_add},   {"mul", example_mul},   {"scale", example_scale},
    {"gelu", example_gelu}, {"gelu_backward", example_gelu_backward},
    {"matmul", example_matmul},
};

static ty_host_kernel_fn_t example_kernel(const char *op) {
  for (size_t i = 0; i < sizeof(example_kernels) / sizeof(example_kernels[0]); ++i) {
    if (strcmp(example_kernels[i].op, op) == 0) return example_kernels[i].fn;
  }
  return NULL;
}

/* Why the kernels above cannot run `node`, or NULL when they can. */
static const char *example_refusal(const ty_abi_graph_t *g, const ty_abi_node_t *node) {
  if (!example_kernel(node->op)) return "no kernel for this op yet";
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    uint32_t v = i < node->input_count ? node->inputs[i] : node->outputs[i - node->input_count];
    if (v != UINT32_MAX && g->values[v].dtype != TY_DTYPE_F32) return "f32 only";
  }
  const ty_abi_value_t *out = &g->values[node->outputs[0]];
  if (strcmp(node->op, "matmul") == 0) {
    if (out->rank != 2 || g->values[node->inputs[1]].rank != 2) return "rank-2 operands only";
    return NULL;
  }
  for (uint32_t i = 0; i < node->input_count; ++i) {
    const ty_abi_value_t *in = &g->values[node->inputs[i]];
    if (ty_desc_value_elements(in) != ty_desc_value_elements(out)) return "no broadcasting yet";
  }
  return NULL;
}

static ty_abi_status_t example_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *graph,
                                              ty_abi_node_support_t *out_support) {
  (void)device;
  for (uint32_t n = 0; n < graph->node_count; ++n) {
    const char *why = example_refusal(graph, &graph->nodes[n]);
    out_support[n].supported = why == NULL;
    if (why) snprintf(out_support[n].reason, sizeof(out_support[n].reason), "example: %s", why);
  }
  return NULL;
}

/* The executor asks for a kernel per node; graph_supports has vouched for
 * each, so a missing one is a bug worth an error, not a silent fallback to
 * the reference kernel (which a NULL return would mean). */
static ty_host_kernel_fn_t example_finder(void *user, const ty_abi_graph_t *graph, uint32_t node,
                                         ty_abi_status_t *out_error) {
  (void)user;
  ty_host_kernel_fn_t fn = example_kernel(graph->nodes[node].op);
  if (!fn) {
    *out_error = ty_plugin_error(TY_CODE_UNIMPLEMENTED, "example: no kernel for %s",
                                 graph->nodes[node].op);
  }
  return fn;
}

static ty_abi_status_t example_graph_compile(ty_abi_device_t *device,
                                             const ty_abi_compile_args_t *args,
                                             ty_abi_executable_t **out_executable) {
  (void)device;
  *out_executable = NULL;
  /* "debug." keys (ABI 1.9) are the host's requests; the executor reads them,
   * and deterministic=1 (ABI 1.10), which this plugin honours: each kernel
   * above computes an element alone, matmul summing K in order, so a row's
   * bits never depend on the batch or a thread count. */
  ty_host_executor_options_t options;
  const ty_abi_option_t *other = NULL;
  ty_abi_status_t bad = ty_host_executor_read_options(args, "example", &options, &other);
  if (bad) return bad;
  if (other) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "example: unknown compile option '%s'",
                           other->key);
  }
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "example: out of memory compiling");
  ty_abi_status_t s = ty_host_executor_create_opts(args->graph, "example", example_finder, NULL,
                                                   &options, &e->executor);
  if (s) {
    free(e);
    return s;
  }
  *out_executable = e;
  return NULL;
}

static void example_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_host_executor_destroy(e->executor);
  free(e);
}

static ty_abi_status_t example_executable_execute(ty_abi_executable_t *e,
                                                  const ty_abi_execute_args_t *args) {
  return ty_host_executor_run(e->executor, args, ty_host_buffer_view, 1);
}

/* ---- backend and device ---- */

static ty_abi_status_t example_backend_create(const ty_abi_backend_create_args_t *args,
                                              ty_abi_backend_t **out_backend) {
  /* First: the support library reports errors through the host's services. */
  ty_plugin_status_init(args->host);
  *out_backend = calloc(1, sizeof(**out_backend));
  if (!*out_backend) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "example: out of memory");
  return NULL;
}

static void example_backend_destroy(ty_abi_backend_t *backend) { free(backend); }

static ty_abi_status_t example_device_count(ty_abi_backend_t *backend, uint32_t *out_count) {
  (void)backend;
  *out_count = 1;
  return NULL;
}

static ty_abi_status_t example_device_info(ty_abi_backend_t *backend, uint32_t index,
                                           ty_abi_device_info_t *info) {
  (void)backend;
  (void)index;
  snprintf(info->name, sizeof(info->name), "example device (host memory, f32)");
  snprintf(info->vendor, sizeof(info->vendor), "Trainyard example");
  snprintf(info->driver_version, sizeof(info->driver_version), "none");
  info->kind = TY_DEVICE_KIND_OTHER;
  info->compute_units = 1;
  info->memory_bytes = ty_host_memory_bytes();
  /* Buffers hold every dtype (inputs such as token ids are i64); the
   * kernels compute f32 only, which graph_supports says node by node. */
  info->dtype_mask = TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) |
                     TY_DTYPE_BIT(TY_DTYPE_F16) | TY_DTYPE_BIT(TY_DTYPE_F64) |
                     TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
                     TY_DTYPE_BIT(TY_DTYPE_U8);
  info->emulated = 1;
  return NULL;
}

static ty_abi_status_t example_device_open(ty_abi_backend_t *backend,
                                           const ty_abi_device_open_args_t *args,
                                           ty_abi_device_t **out_device) {
  (void)backend;
  *out_device = NULL;
  if (args->option_count > 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "example: unknown device option '%s' (the device takes none)",
                           args->options[0].key);
  }
  *out_device = calloc(1, sizeof(**out_device));
  if (!*out_device) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "example: out of memory");
  return NULL;
}

static void example_device_close(ty_abi_device_t *device) { free(device); }

static const ty_backend_api_t example_api = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = TY_ABI_MINOR,
    .name = "example", /* the file is libty_backend_example.so */
    .version = "0.1.0",
    .backend_create = example_backend_create,
    .backend_destroy = example_backend_destroy,
    .device_count = example_device_count,
    .device_info = example_device_info,
    .device_open = example_device_open,
    .device_close = example_device_close,
    .buffer_alloc = ty_host_buffer_alloc,
    .buffer_free = ty_host_buffer_free,
    .buffer_write = ty_host_buffer_write,
    .buffer_read = ty_host_buffer_read,
    .buffer_copy = ty_host_buffer_copy,
    .graph_supports = example_graph_supports,
    .graph_compile = example_graph_compile,
    .executable_destroy = example_executable_destroy,
    .executable_execute = example_executable_execute,
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor) {
  (void)host_abi_minor;
  return host_abi_major == TY_ABI_MAJOR ? &example_api : NULL;
}
