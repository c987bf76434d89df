/* The opencl executor: graph_supports, graph_compile, executable_execute.
 *
 * Compile deep-copies the graph (backends/common/abi_graph.h), plans
 * memory (backends/common/memory_plan.h: every intermediate at an offset
 * of ONE arena cl_mem; optimizer and KV-cache updates in place where the
 * plan allows), uploads constants, and turns each node into commands
 * (ocl_exec.h) through the op table of ocl_ops*.c. Programs come from the
 * device's slot (built once per family, binary-cached).
 *
 * Execute resolves the named bindings to (cl_mem, offset), enqueues every
 * command on the device's in-order queue (the last ones copy the state
 * updates that were not done in place), then reads the small error buffer
 * (a non-blocking read waited on through its event): data errors the
 * reference reports (ids or targets out of range, KV positions, kv_len,
 * i64 -> i32 overflow, AdamW step < 1, SGD nesterov without momentum) are
 * found on the device and returned here as INVALID_ARGUMENT naming the
 * node. That wait makes execute synchronous; its cost is one round trip
 * per step.
 *
 * Large steps (issue 12): every fill and copy of the executor is a kernel
 * with 64-bit indices (kernels/views.cl says why not the driver's), and the
 * error flag is read into the executable, never the stack, and the queue is
 * finished before an error returns: a faulting device may fail the wait at
 * once and land the read later. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/ocl_exec.h"

#define TY_OCL_ALIGN 256u
#define TY_OCL_ERR_BYTES 32u

struct ty_abi_executable_s {
  ty_abi_device_t *device;
  ty_ocl_api_t *api;
  ty_owned_graph_t *graph;
  ty_memory_plan_t plan;
  cl_mem arena, constants, aux, scratch, err, fallback;
  uint64_t *const_offset;    /* per value */
  uint64_t *fallback_offset; /* per value: unbound outputs */
  uint64_t fallback_bytes;
  unsigned char *aux_host;   /* until uploaded */
  uint64_t aux_bytes, aux_cap;
  uint64_t scratch_bytes;
  ty_ocl_cmd_t *cmds;
  uint32_t cmd_count, cmd_cap;
  cl_mem *mem;               /* per value, resolved at execute */
  uint64_t *off;
  uint32_t *sorted_named;
  uint32_t named_count;
  int32_t flag[TY_OCL_ERR_BYTES / 4]; /* the error buffer's host copy */
};

static uint64_t ty_ocl_round_up(uint64_t x) {
  return (x + TY_OCL_ALIGN - 1) & ~(uint64_t)(TY_OCL_ALIGN - 1);
}

int64_t ty_ocl_numel(const ty_abi_value_t *v) { return ty_abi_value_elements(v); }

/* ---- supports ---- */

ty_abi_status_t ty_ocl_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *g,
                                      ty_abi_node_support_t *out) {
  /* The kernels are built for work-groups of TY_OCL_WG work-items. */
  const bool small_groups = device->slot->max_work_group < TY_OCL_WG;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    ty_abi_node_support_t *r = &out[n];
    const ty_ocl_op_t *op = ty_ocl_op_find(node->op);
    r->supported = 0;
    if (small_groups) {
      snprintf(r->reason, sizeof(r->reason),
               "the opencl kernels need work-groups of %u; %s allows %zu", TY_OCL_WG,
               device->label, device->slot->max_work_group);
      continue;
    }
    if (!op) {
      snprintf(r->reason, sizeof(r->reason), "opencl has no kernel for op '%s'", node->op);
      continue;
    }
    bool ok = ty_abi_node_operands_ok(g, node, op->accept, "opencl", r->reason,
                                      sizeof(r->reason));
    if (ok) ok = ty_ocl_op_check(g, node, r->reason, sizeof(r->reason));
    r->supported = ok;
  }
  return NULL;
}

/* ---- builder helpers ---- */

void ty_ocl_fail(ty_ocl_build_t *b, ty_code_t code, const char *fmt, ...) {
  if (b->status) return;
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  if (b->node) {
    b->status = ty_ocl_error(code, "%s: node %u (%s): %s", b->device->label, b->n,
                             b->node->op, message);
  } else {
    b->status = ty_ocl_error(code, "%s: %s", b->device->label, message);
  }
}

const ty_abi_value_t *ty_ocl_vin(const ty_ocl_build_t *b, uint32_t i) {
  if (i >= b->node->input_count || b->node->inputs[i] == UINT32_MAX) return NULL;
  return &b->g->values[b->node->inputs[i]];
}

const ty_abi_value_t *ty_ocl_vout(const ty_ocl_build_t *b, uint32_t o) {
  return &b->g->values[b->node->outputs[o]];
}

ty_ocl_ref_t ty_ocl_in(const ty_ocl_build_t *b, uint32_t i) {
  ty_ocl_ref_t r = {TY_OCL_REF_NONE, 0, 0};
  if (i < b->node->input_count && b->node->inputs[i] != UINT32_MAX) {
    r.kind = TY_OCL_REF_VALUE;
    r.value = b->node->inputs[i];
  }
  return r;
}

ty_ocl_ref_t ty_ocl_out(const ty_ocl_build_t *b, uint32_t o) {
  ty_ocl_ref_t r = {TY_OCL_REF_VALUE, b->node->outputs[o], 0};
  return r;
}

ty_ocl_ref_t ty_ocl_ref_at(ty_ocl_ref_t ref, uint64_t byte_offset) {
  ref.offset += byte_offset;
  return ref;
}

int ty_ocl_dt(const ty_abi_value_t *v) { return v ? (int)v->dtype : 0; }

ty_ocl_ref_t ty_ocl_scratch(ty_ocl_build_t *b, uint64_t bytes) {
  ty_ocl_ref_t r = {TY_OCL_REF_SCRATCH, 0, b->scratch_used};
  b->scratch_used += ty_ocl_round_up(bytes ? bytes : 1);
  if (b->scratch_used > b->exec->scratch_bytes) b->exec->scratch_bytes = b->scratch_used;
  return r;
}

ty_ocl_ref_t ty_ocl_aux(ty_ocl_build_t *b, const void *data, uint64_t bytes) {
  ty_ocl_exec_t *e = b->exec;
  ty_ocl_ref_t r = {TY_OCL_REF_AUX, 0, e->aux_bytes};
  uint64_t need = e->aux_bytes + ty_ocl_round_up(bytes ? bytes : 1);
  if (need > e->aux_cap) {
    uint64_t cap = e->aux_cap ? e->aux_cap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *grown = realloc(e->aux_host, cap);
    if (!grown) {
      ty_ocl_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return r;
    }
    e->aux_host = grown;
    e->aux_cap = cap;
  }
  memcpy(e->aux_host + e->aux_bytes, data, bytes);
  e->aux_bytes = need;
  return r;
}

static ty_ocl_cmd_t *ty_ocl_cmd_add(ty_ocl_build_t *b, ty_ocl_cmd_kind_t kind) {
  ty_ocl_exec_t *e = b->exec;
  if (b->status) return NULL;
  if (e->cmd_count == e->cmd_cap) {
    uint32_t cap = e->cmd_cap ? e->cmd_cap * 2 : 64;
    ty_ocl_cmd_t *grown = realloc(e->cmds, cap * sizeof(*grown));
    if (!grown) {
      ty_ocl_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return NULL;
    }
    e->cmds = grown;
    e->cmd_cap = cap;
  }
  ty_ocl_cmd_t *c = &e->cmds[e->cmd_count++];
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  c->node = b->n;
  return c;
}

ty_ocl_cmd_t *ty_ocl_launch(ty_ocl_build_t *b, ty_ocl_family_t family, const char *kernel) {
  if (b->status) return NULL;
  cl_program program = NULL;
  ty_abi_status_t s = ty_ocl_program_get(b->device, family, &program);
  if (s) {
    b->status = s;
    return NULL;
  }
  cl_int err = CL_SUCCESS;
  cl_kernel k = ty_ocl_kernel_create(b->device->api, program, kernel, &err);
  if (!k) {
    ty_ocl_fail(b, TY_CODE_INTERNAL, "clCreateKernel(%s) from %s failed: %s (%d)", kernel,
                ty_ocl_family_file(family), ty_ocl_error_name(err), (int)err);
    return NULL;
  }
  ty_ocl_cmd_t *c = ty_ocl_cmd_add(b, TY_OCL_CMD_KERNEL);
  if (!c) {
    ty_ocl_kernel_release(b->device->api, k);
    return NULL;
  }
  c->kernel = k;
  c->name = kernel;
  return c;
}

static void ty_ocl_arg_raw(ty_ocl_build_t *b, ty_ocl_cmd_t *c, size_t size, const void *v) {
  if (!c || b->status) return;
  cl_int err = b->device->api->clSetKernelArg(c->kernel, c->next_arg, size, v);
  if (err != CL_SUCCESS) {
    ty_ocl_fail(b, TY_CODE_INTERNAL, "clSetKernelArg(%s, %u) failed: %s (%d)", c->name,
                c->next_arg, ty_ocl_error_name(err), (int)err);
  }
  c->next_arg++;
}

void ty_ocl_arg_buf(ty_ocl_build_t *b, ty_ocl_cmd_t *c, ty_ocl_ref_t ref) {
  if (!c || b->status) return;
  if (c->bufarg_count == sizeof(c->bufargs) / sizeof(c->bufargs[0])) {
    ty_ocl_fail(b, TY_CODE_INTERNAL, "too many buffer arguments for %s", c->name);
    return;
  }
  ty_ocl_bufarg_t *a = &c->bufargs[c->bufarg_count++];
  memset(a, 0, sizeof(*a));
  a->arg = c->next_arg;
  a->ref = ref;
  c->next_arg += 2; /* set at execute */
}

void ty_ocl_arg_err(ty_ocl_build_t *b, ty_ocl_cmd_t *c) {
  if (!c || b->status) return;
  ty_ocl_ref_t ref = {TY_OCL_REF_ERR, 0, 0};
  ty_ocl_arg_buf(b, c, ref);
  c->next_arg -= 1; /* the error buffer has no offset argument */
  int32_t node = (int32_t)b->n;
  ty_ocl_arg_raw(b, c, sizeof(node), &node);
}

void ty_ocl_arg_i32(ty_ocl_build_t *b, ty_ocl_cmd_t *c, int32_t v) {
  cl_int x = v;
  ty_ocl_arg_raw(b, c, sizeof(x), &x);
}

void ty_ocl_arg_u32(ty_ocl_build_t *b, ty_ocl_cmd_t *c, uint32_t v) {
  cl_uint x = v;
  ty_ocl_arg_raw(b, c, sizeof(x), &x);
}

void ty_ocl_arg_i64(ty_ocl_build_t *b, ty_ocl_cmd_t *c, int64_t v) {
  cl_long x = v;
  ty_ocl_arg_raw(b, c, sizeof(x), &x);
}

void ty_ocl_arg_u64(ty_ocl_build_t *b, ty_ocl_cmd_t *c, uint64_t v) {
  cl_ulong x = v;
  ty_ocl_arg_raw(b, c, sizeof(x), &x);
}

void ty_ocl_arg_f32(ty_ocl_build_t *b, ty_ocl_cmd_t *c, float v) {
  cl_float x = v;
  ty_ocl_arg_raw(b, c, sizeof(x), &x);
}

void ty_ocl_arg_l8(ty_ocl_build_t *b, ty_ocl_cmd_t *c, const int64_t v[8]) {
  cl_long8 x;
  for (int i = 0; i < 8; ++i) x.s[i] = v[i];
  ty_ocl_arg_raw(b, c, sizeof(x), &x);
}

void ty_ocl_grid1(ty_ocl_cmd_t *c, uint64_t items, size_t local) {
  if (!c) return;
  c->work_dim = 1;
  c->local[0] = local;
  c->global[0] = (size_t)((items + local - 1) / local * local);
}

void ty_ocl_grid(ty_ocl_cmd_t *c, uint32_t dims, const size_t global[3], const size_t local[3]) {
  if (!c) return;
  c->work_dim = dims;
  for (uint32_t i = 0; i < dims; ++i) {
    c->global[i] = global[i];
    c->local[i] = local[i];
  }
}

/* Fills and copies are kernels whose arguments are set at execute, where
 * the operands' offsets (and so the widest unit they allow) are known. */
void ty_ocl_fill(ty_ocl_build_t *b, ty_ocl_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_fill_zero");
  if (!c) return;
  c->kind = TY_OCL_CMD_FILL;
  c->dst = dst;
  c->size = size;
}

void ty_ocl_copy(ty_ocl_build_t *b, ty_ocl_ref_t src, ty_ocl_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_copy_units");
  if (!c) return;
  c->kind = TY_OCL_CMD_COPY;
  c->src = src;
  c->dst = dst;
  c->size = size;
}

/* ---- compile ---- */

void ty_ocl_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_ocl_api_t *api = e->api;
  if (e->device) api->clFinish(e->device->queue);
  for (uint32_t i = 0; i < e->cmd_count; ++i) ty_ocl_kernel_release(api, e->cmds[i].kernel);
  ty_ocl_mem_release(api, e->arena);
  ty_ocl_mem_release(api, e->constants);
  ty_ocl_mem_release(api, e->aux);
  ty_ocl_mem_release(api, e->scratch);
  ty_ocl_mem_release(api, e->err);
  ty_ocl_mem_release(api, e->fallback);
  ty_memory_plan_free(&e->plan);
  ty_owned_graph_free(e->graph);
  free(e->const_offset);
  free(e->fallback_offset);
  free(e->aux_host);
  free(e->cmds);
  free(e->mem);
  free(e->off);
  free(e->sorted_named);
  free(e);
}

static int ty_ocl_name_compare(const void *a, const void *b, void *ctx) {
  const ty_abi_graph_t *g = ctx;
  return strcmp(g->values[*(const uint32_t *)a].name, g->values[*(const uint32_t *)b].name);
}

/* A device buffer of `bytes` (at least 1) holding `data` when given. */
static ty_abi_status_t ty_ocl_upload(ty_abi_executable_t *e, uint64_t bytes, const void *data,
                                     const char *what, cl_mem *out) {
  ty_abi_device_t *d = e->device;
  const uint64_t limit = d->slot->max_alloc;
  /* CL_DEVICE_MAX_MEM_ALLOC_SIZE is the size every driver must accept, not
   * always the most it accepts: NVIDIA's reports 2 GiB on an H200 and
   * allocates 8 GiB arenas. So the buffer is asked for; a refusal of one
   * past the limit is named as such. */
  cl_int err = CL_SUCCESS;
  *out = bytes > SIZE_MAX ? NULL
                          : ty_ocl_mem_create(e->api, d->slot->context,
                                              (size_t)(bytes ? bytes : 1), &err);
  if (!*out && limit && bytes > limit) {
    return ty_ocl_error(TY_CODE_RESOURCE_EXHAUSTED,
                        "%s: the %llu-byte %s does not fit in one buffer of this device "
                        "(CL_DEVICE_MAX_MEM_ALLOC_SIZE is %llu bytes; the driver refused it: "
                        "%s)%s",
                        d->label, (unsigned long long)bytes, what, (unsigned long long)limit,
                        ty_ocl_error_name(err),
                        strcmp(what, "activation arena") == 0
                            ? "; activations grow with batch x sequence length: use fewer "
                              "tokens per step"
                            : "");
  }
  if (!*out) {
    char text[128];
    snprintf(text, sizeof(text), "clCreateBuffer for the %llu-byte %s",
             (unsigned long long)bytes, what);
    return ty_ocl_cl_error(d, text, err);
  }
  if (data && bytes) {
    err = e->api->clEnqueueWriteBuffer(d->queue, *out, CL_TRUE, 0, (size_t)bytes, data, 0, NULL,
                                       NULL);
    if (err != CL_SUCCESS) return ty_ocl_cl_error(d, "clEnqueueWriteBuffer", err);
  }
  return NULL;
}

ty_abi_status_t ty_ocl_graph_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                     ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  for (uint32_t i = 0; i < args->option_count; ++i) {
    /* ABI 1.9: "debug." keys are the host's requests, ignored when not
     * implemented (this executor has no guard mode yet). */
    if (strncmp(args->options[i].key, TY_ABI_DEBUG_OPTION_PREFIX,
                strlen(TY_ABI_DEBUG_OPTION_PREFIX)) == 0) {
      continue;
    }
    /* ABI 1.10: no test holds these kernels to batch invariance yet (a
     * matmul row alone and in a batch, an attention row over a cache and in
     * a block, on every OpenCL compiler), so the promise is not made. */
    if (strcmp(args->options[i].key, TY_ABI_DETERMINISTIC_OPTION) == 0) {
      const char *value = args->options[i].value;
      if (strcmp(value, "0") == 0) continue;
      if (strcmp(value, "1") != 0) {
        return ty_ocl_error(TY_CODE_INVALID_ARGUMENT,
                            "%s: compile option %s='%s' must be 1 or 0", device->label,
                            TY_ABI_DETERMINISTIC_OPTION, value);
      }
      return ty_ocl_error(TY_CODE_UNIMPLEMENTED,
                          "%s: --deterministic is not supported yet: its matmul and attention "
                          "kernels are not checked to be batch-invariant; use --backend cpu",
                          device->label);
    }
    return ty_ocl_error(TY_CODE_INVALID_ARGUMENT,
                        "%s: unknown compile option '%s' (the opencl backend takes none)",
                        device->label, args->options[i].key);
  }
  /* Optimizer offload needs pinned host buffers and host-side updates,
   * which this executor does not have yet (ABI 1.3, docs/plugin-abi.md). */
  for (uint32_t v = 0; v < args->graph->value_count; ++v) {
    if (args->graph->values[v].flags & TY_VALUE_FLAG_HOST_RESIDENT) {
      return ty_ocl_error(TY_CODE_FAILED_PRECONDITION,
                          "%s: state '%s' is flagged to live in host memory (--offload "
                          "optimizer), which the opencl backend does not implement yet; run "
                          "without --offload",
                          device->label, args->graph->values[v].name);
    }
  }
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_ocl_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
  e->device = device;
  e->api = device->api;
  ty_abi_status_t s = NULL;
  e->graph = ty_owned_graph_copy(args->graph);
  if (!e->graph || ty_memory_plan_build(e->graph, TY_OCL_ALIGN, &e->plan) != TY_CODE_OK) {
    ty_ocl_executable_destroy(e);
    return ty_ocl_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling", device->label);
  }
  const ty_abi_graph_t *g = &e->graph->graph;
  uint32_t nv = g->value_count ? g->value_count : 1;
  e->const_offset = calloc(nv, sizeof(uint64_t));
  e->fallback_offset = calloc(nv, sizeof(uint64_t));
  e->mem = calloc(nv, sizeof(cl_mem));
  e->off = calloc(nv, sizeof(uint64_t));
  e->sorted_named = calloc(nv, sizeof(uint32_t));
  if (!e->const_offset || !e->fallback_offset || !e->mem || !e->off || !e->sorted_named) {
    ty_ocl_executable_destroy(e);
    return ty_ocl_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling", device->label);
  }
  /* Constants, named values, unbound-output slots. */
  uint64_t const_bytes = 0;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_value_storage_t *st = &e->plan.storage[v];
    if (st->kind == TY_STORAGE_CONSTANT) {
      e->const_offset[v] = const_bytes;
      const_bytes += ty_ocl_round_up(e->graph->value_bytes[v]);
    } else if (st->kind == TY_STORAGE_BOUND) {
      e->sorted_named[e->named_count++] = v;
      if (g->values[v].role == TY_VALUE_INTERMEDIATE) {
        e->fallback_offset[v] = e->fallback_bytes;
        e->fallback_bytes += ty_ocl_round_up(e->graph->value_bytes[v]);
      }
    }
  }
  qsort_r(e->sorted_named, e->named_count, sizeof(uint32_t), ty_ocl_name_compare, (void *)g);
  /* Commands. */
  ty_ocl_build_t b = {.device = device, .exec = e, .g = g};
  for (uint32_t n = 0; n < g->node_count && !b.status; ++n) {
    if (e->plan.skip[n]) continue; /* a view: its output already reads its input */
    b.node = &g->nodes[n];
    b.n = n;
    b.scratch_used = 0;
    const ty_ocl_op_t *op = ty_ocl_op_find(b.node->op);
    if (!op) {
      ty_ocl_fail(&b, TY_CODE_UNIMPLEMENTED, "no kernel for this op");
      break;
    }
    op->build(&b);
  }
  /* State updates the plan could not do in place: copies after every node. */
  b.node = NULL;
  b.n = UINT32_MAX;
  b.scratch_used = 0;
  for (uint32_t u = 0; u < e->plan.copy_count && !b.status; ++u) {
    const ty_abi_state_update_t *up = &e->plan.copies[u];
    ty_ocl_ref_t src = {TY_OCL_REF_VALUE, up->value, 0}, dst = {TY_OCL_REF_VALUE, up->state, 0};
    uint32_t before = e->cmd_count;
    ty_ocl_copy(&b, src, dst, e->graph->value_bytes[up->state]);
    if (e->cmd_count > before) e->cmds[before].name = g->values[up->state].name;
  }
  s = b.status;
  /* Buffers. */
  if (!s && e->plan.arena_bytes) s = ty_ocl_upload(e, e->plan.arena_bytes, NULL, "activation arena", &e->arena);
  if (!s && const_bytes) {
    unsigned char *host = calloc(1, (size_t)const_bytes);
    if (!host) {
      s = ty_ocl_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
    } else {
      for (uint32_t v = 0; v < g->value_count; ++v) {
        if (e->plan.storage[v].kind == TY_STORAGE_CONSTANT && e->graph->value_bytes[v]) {
          memcpy(host + e->const_offset[v], g->values[v].const_data, e->graph->value_bytes[v]);
        }
      }
      s = ty_ocl_upload(e, const_bytes, host, "constants", &e->constants);
      free(host);
    }
  }
  if (!s && e->aux_bytes) s = ty_ocl_upload(e, e->aux_bytes, e->aux_host, "tables", &e->aux);
  if (!s && e->scratch_bytes) s = ty_ocl_upload(e, e->scratch_bytes, NULL, "scratch", &e->scratch);
  if (!s) {
    unsigned char zeros[TY_OCL_ERR_BYTES] = {0};
    s = ty_ocl_upload(e, TY_OCL_ERR_BYTES, zeros, "error flag", &e->err);
  }
  if (s) {
    ty_ocl_executable_destroy(e);
    return s;
  }
  free(e->aux_host);
  e->aux_host = NULL;
  *out_executable = e;
  return NULL;
}

/* ---- execute ---- */

static uint32_t ty_ocl_find_named(const ty_abi_executable_t *e, const char *name) {
  const ty_abi_graph_t *g = &e->graph->graph;
  uint32_t lo = 0, hi = e->named_count;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    int c = strcmp(g->values[e->sorted_named[mid]].name, name);
    if (c == 0) return e->sorted_named[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return UINT32_MAX;
}

static ty_abi_status_t ty_ocl_resolve(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  const ty_abi_graph_t *g = &e->graph->graph;
  const char *label = e->device->label;
  bool *bound = calloc(g->value_count ? g->value_count : 1, sizeof(bool));
  if (!bound) return ty_ocl_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", label);
  ty_abi_status_t s = NULL;
  for (uint32_t i = 0; i < args->binding_count && !s; ++i) {
    const ty_abi_binding_t *bind = &args->bindings[i];
    uint32_t v = ty_ocl_find_named(e, bind->name);
    if (v == UINT32_MAX) {
      s = ty_ocl_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: no input, state or output named '%s' in graph %.12s", label,
                       bind->name, e->graph->hash_hex);
    } else if (bind->offset > bind->buffer->size ||
               e->graph->value_bytes[v] > bind->buffer->size - bind->offset) {
      s = ty_ocl_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: binding '%s' needs %llu bytes at offset %llu of a %llu-byte buffer",
                       label, bind->name, (unsigned long long)e->graph->value_bytes[v],
                       (unsigned long long)bind->offset, (unsigned long long)bind->buffer->size);
    } else {
      e->mem[v] = bind->buffer->mem;
      e->off[v] = bind->offset;
      bound[v] = true;
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    const ty_value_storage_t *st = &e->plan.storage[v];
    switch (st->kind) {
      case TY_STORAGE_CONSTANT:
        e->mem[v] = e->constants;
        e->off[v] = e->const_offset[v];
        break;
      case TY_STORAGE_ARENA:
        e->mem[v] = e->arena;
        e->off[v] = st->offset;
        break;
      case TY_STORAGE_STATE_ALIAS:
      case TY_STORAGE_VIEW: /* after every other kind */
        break;
      case TY_STORAGE_BOUND:
        if (bound[v]) break;
        if (val->role != TY_VALUE_INTERMEDIATE) {
          s = ty_ocl_error(TY_CODE_INVALID_ARGUMENT, "%s: %s '%s' is not bound", label,
                           val->role == TY_VALUE_STATE ? "state" : "input", val->name);
          break;
        }
        if (!e->fallback) {
          s = ty_ocl_upload(e, e->fallback_bytes, NULL, "unbound outputs", &e->fallback);
          if (s) break;
        }
        e->mem[v] = e->fallback;
        e->off[v] = e->fallback_offset[v];
        break;
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    if (e->plan.storage[v].kind == TY_STORAGE_STATE_ALIAS) {
      e->mem[v] = e->mem[e->plan.storage[v].alias];
      e->off[v] = e->off[e->plan.storage[v].alias];
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    if (e->plan.storage[v].kind == TY_STORAGE_VIEW) {
      e->mem[v] = e->mem[e->plan.storage[v].alias];
      e->off[v] = e->off[e->plan.storage[v].alias];
    }
  }
  free(bound);
  return s;
}

static void ty_ocl_ref_resolve(const ty_abi_executable_t *e, ty_ocl_ref_t r, cl_mem *mem,
                               uint64_t *off) {
  switch (r.kind) {
    case TY_OCL_REF_VALUE: *mem = e->mem[r.value]; *off = e->off[r.value] + r.offset; break;
    case TY_OCL_REF_SCRATCH: *mem = e->scratch; *off = r.offset; break;
    case TY_OCL_REF_AUX: *mem = e->aux; *off = r.offset; break;
    case TY_OCL_REF_ERR: *mem = e->err; *off = 0; break;
    default: *mem = NULL; *off = 0; break;
  }
}

static ty_abi_status_t ty_ocl_cmd_error(const ty_abi_executable_t *e, const ty_ocl_cmd_t *c,
                                        const char *what, cl_int err) {
  const ty_code_t code = err == CL_OUT_OF_RESOURCES ||
                                 err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                 err == CL_OUT_OF_HOST_MEMORY
                             ? TY_CODE_RESOURCE_EXHAUSTED
                             : TY_CODE_INTERNAL;
  if (c->node == UINT32_MAX) { /* a state update's copy: named after the state */
    return ty_ocl_error(code, "%s: copying the update of state '%s' failed: %s of "
                        "ty_copy_units: %s (%d)", e->device->label, c->name, what,
                        ty_ocl_error_name(err), (int)err);
  }
  return ty_ocl_error(code, "%s: node %u (%s): %s of %s failed: %s (%d)", e->device->label,
                      c->node, e->graph->graph.nodes[c->node].op, what, c->name,
                      ty_ocl_error_name(err), (int)err);
}

/* The widest unit (16 bytes down to 1) that every one of `x` is a multiple
 * of: cl_mem bases are aligned far beyond 16 bytes
 * (CL_DEVICE_MEM_BASE_ADDR_ALIGN), so aligned offsets mean aligned
 * addresses. */
static uint32_t ty_ocl_unit(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t bits = a | b | c;
  uint32_t unit = 16;
  while (unit > 1 && (bits & (unit - 1))) unit /= 2;
  return unit;
}

/* The arguments and work size of a fill or copy, from its operands as they
 * resolve in this run; false when there is nothing to do. */
static bool ty_ocl_move_prepare(ty_abi_executable_t *e, ty_ocl_cmd_t *c, cl_int *err) {
  ty_ocl_api_t *api = e->api;
  cl_mem dst, src = NULL;
  uint64_t dst_off, src_off = 0;
  ty_ocl_ref_resolve(e, c->dst, &dst, &dst_off);
  if (!dst) return false;
  if (c->kind == TY_OCL_CMD_COPY) {
    ty_ocl_ref_resolve(e, c->src, &src, &src_off);
    if (!src || (src == dst && src_off == dst_off)) return false; /* in place */
  }
  const uint32_t unit = ty_ocl_unit(dst_off, src_off, c->size);
  const cl_long n = (cl_long)(c->size / unit);
  const cl_int unit_arg = (cl_int)unit;
  cl_uint arg = 0;
  cl_ulong off;
  if (c->kind == TY_OCL_CMD_COPY) {
    off = src_off;
    *err = api->clSetKernelArg(c->kernel, arg++, sizeof(cl_mem), &src);
    if (*err == CL_SUCCESS) *err = api->clSetKernelArg(c->kernel, arg++, sizeof(off), &off);
  }
  off = dst_off;
  if (*err == CL_SUCCESS) *err = api->clSetKernelArg(c->kernel, arg++, sizeof(cl_mem), &dst);
  if (*err == CL_SUCCESS) *err = api->clSetKernelArg(c->kernel, arg++, sizeof(off), &off);
  if (*err == CL_SUCCESS) *err = api->clSetKernelArg(c->kernel, arg++, sizeof(unit_arg), &unit_arg);
  if (*err == CL_SUCCESS) *err = api->clSetKernelArg(c->kernel, arg++, sizeof(n), &n);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
  return true;
}

static ty_abi_status_t ty_ocl_cmd_run(ty_abi_executable_t *e, ty_ocl_cmd_t *c) {
  ty_ocl_api_t *api = e->api;
  cl_command_queue q = e->device->queue;
  cl_int err = CL_SUCCESS;
  if (c->kind != TY_OCL_CMD_KERNEL) {
    if (!ty_ocl_move_prepare(e, c, &err)) {
      return err == CL_SUCCESS ? NULL : ty_ocl_cmd_error(e, c, "clSetKernelArg", err);
    }
  } else {
    for (uint32_t i = 0; i < c->bufarg_count; ++i) {
      ty_ocl_bufarg_t *a = &c->bufargs[i];
      cl_mem mem;
      uint64_t off;
      ty_ocl_ref_resolve(e, a->ref, &mem, &off);
      if (a->set && a->set_mem == mem && a->set_offset == off) continue;
      err = api->clSetKernelArg(c->kernel, a->arg, sizeof(cl_mem), &mem);
      if (err == CL_SUCCESS && a->ref.kind != TY_OCL_REF_ERR) {
        cl_ulong o = off;
        err = api->clSetKernelArg(c->kernel, a->arg + 1, sizeof(o), &o);
      }
      if (err != CL_SUCCESS) return ty_ocl_cmd_error(e, c, "clSetKernelArg", err);
      a->set = true;
      a->set_mem = mem;
      a->set_offset = off;
    }
  }
  err = api->clEnqueueNDRangeKernel(q, c->kernel, c->work_dim, NULL, c->global, c->local, 0,
                                    NULL, NULL);
  return err == CL_SUCCESS ? NULL : ty_ocl_cmd_error(e, c, "clEnqueueNDRangeKernel", err);
}

/* The message of a data error a kernel recorded. */
static ty_abi_status_t ty_ocl_data_error(const ty_abi_executable_t *e, const int32_t *flag) {
  int64_t a, b, c;
  memcpy(&a, (const char *)flag + 8, 8);
  memcpy(&b, (const char *)flag + 16, 8);
  memcpy(&c, (const char *)flag + 24, 8);
  uint32_t node = (uint32_t)flag[1];
  const char *op = node < e->graph->graph.node_count ? e->graph->graph.nodes[node].op : "?";
  char what[256];
  long long x = (long long)a, y = (long long)b, z = (long long)c;
  switch (flag[0]) {
    case 1:
      snprintf(what, sizeof(what), "embedding: ids[%lld] = %lld is outside the vocabulary "
               "[0, %lld)", x, y, z);
      break;
    case 2:
      snprintf(what, sizeof(what), "cross_entropy: targets[%lld] = %lld is outside the "
               "vocabulary [0, %lld) (negative means ignored)", x, y, z);
      break;
    case 3:
      snprintf(what, sizeof(what), "kv_cache_write: %lld new positions starting at position "
               "%lld do not fit in a cache of max_len %lld (start must be in 0..max_len-len)",
               y, x, z);
      break;
    case 4:
      snprintf(what, sizeof(what), "attention: kv_len input %lld must lie in [%lld, %lld] "
               "(the query length and the key length)", x, y, z);
      break;
    case 5:
      snprintf(what, sizeof(what), "cast i64 -> i32: element %lld = %lld does not fit in i32",
               x, y);
      break;
    case 6:
      snprintf(what, sizeof(what), "adamw: step %lld must be >= 1 (it counts this update)", x);
      break;
    case 7: {
      uint32_t bits = (uint32_t)a;
      float m;
      memcpy(&m, &bits, sizeof(m));
      snprintf(what, sizeof(what), "sgd: nesterov needs momentum > 0 (got %g)", (double)m);
      break;
    }
    default:
      snprintf(what, sizeof(what), "unknown device error code %d", (int)flag[0]);
      break;
  }
  return ty_ocl_error(TY_CODE_INVALID_ARGUMENT, "%s: node %u (%s): %s", e->device->label, node,
                      op, what);
}

ty_abi_status_t ty_ocl_executable_execute(ty_abi_executable_t *e,
                                          const ty_abi_execute_args_t *args) {
  ty_abi_status_t s = ty_ocl_resolve(e, args);
  for (uint32_t i = 0; i < e->cmd_count && !s; ++i) s = ty_ocl_cmd_run(e, &e->cmds[i]);
  ty_ocl_api_t *api = e->api;
  cl_command_queue q = e->device->queue;
  if (s) {
    api->clFinish(q); /* leave nothing half-queued behind an error */
    return s;
  }
  /* The error flag: read after everything above (in-order queue), into the
   * executable, which outlives any late landing of the read. */
  cl_event done = NULL;
  cl_int err = api->clEnqueueReadBuffer(q, e->err, CL_FALSE, 0, TY_OCL_ERR_BYTES, e->flag, 0,
                                        NULL, &done);
  if (err == CL_SUCCESS) {
    ty_ocl_event_created(api);
    err = api->clWaitForEvents(1, &done);
    ty_ocl_event_release(api, done);
  }
  if (err != CL_SUCCESS) {
    /* A faulted device may fail the wait before the read has landed: let
     * it finish (or die) before the caller goes on. */
    api->clFinish(q);
    return ty_ocl_error(TY_CODE_INTERNAL, "%s: running the graph failed: %s (%d)",
                        e->device->label, ty_ocl_error_name(err), (int)err);
  }
  if (e->flag[0] == 0) return NULL;
  s = ty_ocl_data_error(e, e->flag);
  unsigned char zeros[TY_OCL_ERR_BYTES] = {0};
  api->clEnqueueWriteBuffer(q, e->err, CL_TRUE, 0, TY_OCL_ERR_BYTES, zeros, 0, NULL, NULL);
  return s;
}
