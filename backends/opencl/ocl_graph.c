/* The opencl executor: graph_supports, graph_compile, executable_execute.
 *
 * The device-executor core (backends/common/device_exec.h) copies the
 * graph, plans memory (every intermediate at an offset of ONE arena cl_mem;
 * optimizer and KV-cache updates in place where the plan allows), lays out
 * constants and resolves bindings; this file uploads, and turns each node
 * into commands (ocl_exec.h) through the op table of ocl_ops*.c. Programs come from the
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

#include "trainyard/device_errors.h"
#include "ocl_exec.h"

#define TY_OCL_ALIGN 256u

struct ty_abi_executable_s {
  ty_dev_exec_t core; /* graph, plan, layout, per-value locations */
  ty_abi_device_t *device;
  ty_ocl_api_t *api;
  cl_mem arena, constants, aux, scratch, err; /* unbound outputs: core.fallback */
  ty_ocl_cmd_t *cmds;
  uint32_t cmd_count, cmd_cap;
  int32_t flag[TY_DEVICE_ERROR_BYTES / 4]; /* the error buffer's host copy */
};

static cl_mem ty_ocl_mem_of(uint64_t base) { return (cl_mem)(uintptr_t)base; }

static uint64_t ty_ocl_base_of(cl_mem mem) { return (uint64_t)(uintptr_t)mem; }

/* ---- supports ---- */

ty_abi_status_t ty_ocl_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *g,
                                      ty_abi_node_support_t *out) {
  /* The kernels are built for work-groups of TY_OCL_WG work-items. */
  if (device->slot->max_work_group >= TY_OCL_WG) {
    ty_dev_supports(g, ty_ocl_ops, "opencl", ty_ocl_op_check, out);
    return NULL;
  }
  for (uint32_t n = 0; n < g->node_count; ++n) {
    out[n].supported = 0;
    snprintf(out[n].reason, sizeof(out[n].reason),
             "the opencl kernels need work-groups of %u; %s allows %zu", TY_OCL_WG,
             device->label, device->slot->max_work_group);
  }
  return NULL;
}

/* ---- builder helpers ---- */

static ty_ocl_cmd_t *ty_ocl_cmd_add(ty_ocl_build_t *b, ty_ocl_cmd_kind_t kind) {
  ty_ocl_exec_t *e = b->exec;
  ty_ocl_cmd_t *c = ty_dev_push(b, (void **)&e->cmds, &e->cmd_count, &e->cmd_cap, sizeof(*c));
  if (!c) return NULL;
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
    ty_dev_fail(b, TY_CODE_INTERNAL, "clCreateKernel(%s) from %s failed: %s (%d)", kernel,
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
    ty_dev_fail(b, TY_CODE_INTERNAL, "clSetKernelArg(%s, %u) failed: %s (%d)", c->name,
                c->next_arg, ty_ocl_error_name(err), (int)err);
  }
  c->next_arg++;
}

static void ty_ocl_arg_buf(ty_ocl_build_t *b, ty_ocl_cmd_t *c, ty_dev_ref_t ref) {
  if (c->bufarg_count == sizeof(c->bufargs) / sizeof(c->bufargs[0])) {
    ty_dev_fail(b, TY_CODE_INTERNAL, "too many buffer arguments for %s", c->name);
    return;
  }
  ty_ocl_bufarg_t *a = &c->bufargs[c->bufarg_count++];
  memset(a, 0, sizeof(*a));
  a->arg = c->next_arg;
  a->ref = ref;
  c->next_arg += 2; /* set at execute */
}

/* The core's arg hook (device_ops.h): each kind as its OpenCL C type. */
void ty_ocl_arg(ty_ocl_build_t *b, void *cmd, const ty_dev_arg_t *a) {
  ty_ocl_cmd_t *c = cmd;
  union {
    cl_int i32;
    cl_uint u32;
    cl_long i64;
    cl_ulong u64;
    cl_float f32;
    cl_long8 l8;
  } x;
  size_t size = 0;
  switch (a->kind) {
    case TY_DEV_ARG_REF: ty_ocl_arg_buf(b, c, a->ref); return;
    case TY_DEV_ARG_ERR:
      ty_ocl_arg_buf(b, c, (ty_dev_ref_t){TY_DEV_REF_ERR, 0, 0});
      if (b->status) return;
      c->next_arg -= 1; /* the error buffer has no offset argument */
      x.i32 = (cl_int)a->i;
      size = sizeof(x.i32);
      break;
    case TY_DEV_ARG_I32: x.i32 = (cl_int)a->i; size = sizeof(x.i32); break;
    case TY_DEV_ARG_U32: x.u32 = (cl_uint)a->i; size = sizeof(x.u32); break;
    case TY_DEV_ARG_I64: x.i64 = a->i; size = sizeof(x.i64); break;
    case TY_DEV_ARG_U64: x.u64 = (cl_ulong)a->i; size = sizeof(x.u64); break;
    case TY_DEV_ARG_F32: x.f32 = (cl_float)a->f; size = sizeof(x.f32); break;
    case TY_DEV_ARG_DIMS8:
      for (int i = 0; i < 8; ++i) x.l8.s[i] = a->dims8[i];
      size = sizeof(x.l8);
      break;
    case TY_DEV_ARG_F64:
      /* The kernels take no double: fp64 is optional in OpenCL. */
      ty_dev_fail(b, TY_CODE_INTERNAL, "%s: the opencl kernels take no double argument",
                  c->name);
      return;
  }
  ty_ocl_arg_raw(b, c, size, &x);
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
void ty_ocl_fill(ty_ocl_build_t *b, ty_dev_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_fill_zero");
  if (!c) return;
  c->kind = TY_OCL_CMD_FILL;
  c->dst = dst;
  c->size = size;
}

void ty_ocl_copy(ty_ocl_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t size) {
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
  ty_ocl_mem_release(api, ty_ocl_mem_of(e->core.fallback));
  ty_dev_exec_free(&e->core);
  free(e->cmds);
  free(e);
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
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
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

/* A state update's copy, named after the state in messages. */
static ty_abi_status_t ty_ocl_state_copy(void *user, uint32_t state, uint32_t value,
                                         uint64_t bytes) {
  ty_ocl_build_t *b = user;
  ty_abi_executable_t *e = b->exec;
  const uint32_t before = e->cmd_count;
  ty_ocl_copy(b, ty_dev_value(value), ty_dev_value(state), bytes);
  if (e->cmd_count > before) e->cmds[before].name = b->g->values[state].name;
  return b->status;
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
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                            "%s: compile option %s='%s' must be 1 or 0", device->label,
                            TY_ABI_DETERMINISTIC_OPTION, value);
      }
      return ty_plugin_error(TY_CODE_UNIMPLEMENTED,
                          "%s: --deterministic is not supported yet: its matmul and attention "
                          "kernels are not checked to be batch-invariant; use --backend cpu",
                          device->label);
    }
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                        "%s: unknown compile option '%s' (the opencl backend takes none)",
                        device->label, args->options[i].key);
  }
  /* Optimizer offload needs pinned host buffers and host-side updates,
   * which this executor does not have yet (ABI 1.3, docs/plugin-abi.md). */
  for (uint32_t v = 0; v < args->graph->value_count; ++v) {
    if (args->graph->values[v].flags & TY_VALUE_FLAG_HOST_RESIDENT) {
      return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                          "%s: state '%s' is flagged to live in host memory (--offload "
                          "optimizer), which the opencl backend does not implement yet; run "
                          "without --offload",
                          device->label, args->graph->values[v].name);
    }
  }
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
  e->device = device;
  e->api = device->api;
  ty_abi_status_t s = ty_dev_exec_init(&e->core, args->graph, TY_OCL_ALIGN, device->label);
  if (s) {
    ty_ocl_executable_destroy(e);
    return s;
  }
  const ty_abi_graph_t *g = ty_dev_exec_graph(&e->core);
  /* Commands. */
  ty_ocl_build_t b = {
      .core = &e->core, .device = device, .exec = e, .g = g, .move = &ty_ocl_movers,
      .arg = ty_ocl_arg};
  ty_dev_build_nodes(&b, ty_ocl_ops, NULL);
  /* State updates the plan could not do in place: copies after every node. */
  b.node = NULL;
  b.n = UINT32_MAX;
  b.scratch_used = 0;
  if (!b.status) b.status = ty_dev_exec_state_updates(&e->core, ty_ocl_state_copy, &b);
  s = b.status;
  /* Buffers. */
  ty_dev_exec_t *x = &e->core;
  if (!s && x->plan.arena_bytes) {
    s = ty_ocl_upload(e, x->plan.arena_bytes, NULL, "activation arena", &e->arena);
  }
  if (!s && x->const_bytes) {
    unsigned char *host = calloc(1, (size_t)x->const_bytes);
    if (!host) {
      s = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
    } else {
      for (uint32_t v = 0; v < g->value_count; ++v) {
        if (x->plan.storage[v].kind == TY_STORAGE_CONSTANT && x->graph->value_bytes[v]) {
          memcpy(host + x->const_offset[v], g->values[v].const_data, x->graph->value_bytes[v]);
        }
      }
      s = ty_ocl_upload(e, x->const_bytes, host, "constants", &e->constants);
      free(host);
    }
  }
  if (!s && x->aux_bytes) s = ty_ocl_upload(e, x->aux_bytes, x->aux_host, "tables", &e->aux);
  if (!s && x->scratch_bytes) s = ty_ocl_upload(e, x->scratch_bytes, NULL, "scratch", &e->scratch);
  if (!s) {
    unsigned char zeros[TY_DEVICE_ERROR_BYTES] = {0};
    s = ty_ocl_upload(e, TY_DEVICE_ERROR_BYTES, zeros, "error flag", &e->err);
  }
  if (s) {
    ty_ocl_executable_destroy(e);
    return s;
  }
  free(x->aux_host);
  x->aux_host = NULL;
  x->arena = ty_ocl_base_of(e->arena);
  x->constants = ty_ocl_base_of(e->constants);
  x->base[TY_DEV_REF_AUX] = ty_ocl_base_of(e->aux);
  x->base[TY_DEV_REF_SCRATCH] = ty_ocl_base_of(e->scratch);
  x->base[TY_DEV_REF_ERR] = ty_ocl_base_of(e->err);
  *out_executable = e;
  return NULL;
}

/* ---- execute ---- */

static void ty_ocl_hook_buffer(void *user, ty_abi_buffer_t *buffer, uint64_t *out_base,
                               uint64_t *out_size) {
  (void)user;
  *out_base = ty_ocl_base_of(buffer->mem);
  *out_size = buffer->size;
}

/* The unbound outputs' storage (the core asks at the first run needing it). */
static ty_abi_status_t ty_ocl_hook_alloc(void *user, uint64_t bytes, uint64_t *out_base) {
  cl_mem mem = NULL;
  ty_abi_status_t s = ty_ocl_upload(user, bytes, NULL, "unbound outputs", &mem);
  if (s) return s;
  *out_base = ty_ocl_base_of(mem);
  return NULL;
}

static void ty_ocl_ref_resolve(const ty_abi_executable_t *e, ty_dev_ref_t r, cl_mem *mem,
                               uint64_t *off) {
  const ty_dev_loc_t loc = ty_dev_ref_loc(&e->core, r);
  *mem = ty_ocl_mem_of(loc.base);
  *off = loc.offset;
}

static ty_abi_status_t ty_ocl_cmd_error(const ty_abi_executable_t *e, const ty_ocl_cmd_t *c,
                                        const char *what, cl_int err) {
  const ty_code_t code = err == CL_OUT_OF_RESOURCES ||
                                 err == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
                                 err == CL_OUT_OF_HOST_MEMORY
                             ? TY_CODE_RESOURCE_EXHAUSTED
                             : TY_CODE_INTERNAL;
  if (c->node == UINT32_MAX) { /* a state update's copy: named after the state */
    return ty_plugin_error(code, "%s: copying the update of state '%s' failed: %s of "
                        "ty_copy_units: %s (%d)", e->device->label, c->name, what,
                        ty_ocl_error_name(err), (int)err);
  }
  return ty_plugin_error(code, "%s: node %u (%s): %s of %s failed: %s (%d)", e->device->label,
                      c->node, ty_dev_exec_graph(&e->core)->nodes[c->node].op, what, c->name,
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
      if (err == CL_SUCCESS && a->ref.kind != TY_DEV_REF_ERR) {
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

ty_abi_status_t ty_ocl_executable_execute(ty_abi_executable_t *e,
                                          const ty_abi_execute_args_t *args) {
  const ty_dev_hooks_t hooks = {
      .user = e, .buffer = ty_ocl_hook_buffer, .alloc = ty_ocl_hook_alloc};
  ty_abi_status_t s = ty_dev_exec_resolve(&e->core, args, &hooks);
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
  cl_int err = api->clEnqueueReadBuffer(q, e->err, CL_FALSE, 0, TY_DEVICE_ERROR_BYTES, e->flag, 0,
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
    return ty_plugin_error(TY_CODE_INTERNAL, "%s: running the graph failed: %s (%d)",
                        e->device->label, ty_ocl_error_name(err), (int)err);
  }
  if (e->flag[0] == 0) return NULL;
  s = ty_dev_data_error(&e->core, e->flag);
  unsigned char zeros[TY_DEVICE_ERROR_BYTES] = {0};
  api->clEnqueueWriteBuffer(q, e->err, CL_TRUE, 0, TY_DEVICE_ERROR_BYTES, zeros, 0, NULL, NULL);
  return s;
}
