/* The cuda executor: graph_supports, graph_compile, executable_execute.
 *
 * Compile deep-copies the graph (backends/common/abi_graph.h), plans memory
 * (backends/common/memory_plan.h: every intermediate at an offset of ONE
 * arena allocation; optimizer and KV-cache updates in place where the plan
 * allows; reshapes as views), uploads constants and tables, and turns each
 * node into commands (cuda_exec.h) through the op table of cuda_ops*.c.
 *
 * Execute resolves the named bindings to device addresses and patches them
 * into the commands. With graphs=1 (the default) the whole run — every
 * kernel, matmul, memset and state-update copy — is captured once as a CUDA
 * graph and replayed on later runs; it is captured again only when a bound
 * address changed (a session binds the same buffers every run, so in
 * training that is never after the first). Per-step data (tokens, the
 * learning rate, the step) changes through the bound buffers' contents,
 * never by recapture.
 *
 * After the run the small error flag is copied back and the stream waited
 * on: data errors the reference reports (ids or targets out of range, KV
 * positions, kv_len, i64 -> i32 overflow, AdamW step < 1, SGD nesterov
 * without momentum) are found on the device and returned as
 * INVALID_ARGUMENT naming the node. That wait makes execute synchronous.
 *
 * Faults inside a kernel (an illegal address) surface at that wait and
 * leave the context unusable; the error names the device, the graph and
 * the cause. TRAINYARD_CUDA_SYNC=1 waits after every command instead, so
 * the error names the node and kernel (slow; for debugging). With
 * TRAINYARD_PROFILE set, runs are not captured and every node is timed with
 * CUDA events (backends/common/host_profile.h prints the table). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/host_profile.h"
#include "backends/cuda/cuda_exec.h"
#include "backends/cuda/cuda_gemm.h"
#include "hal/dtype.h"

#define TY_CU_ALIGN 256u
#define TY_CU_ERR_BYTES 32u

struct ty_abi_executable_s {
  ty_abi_device_t *device;
  ty_cu_api_t *api;
  ty_owned_graph_t *graph;
  ty_memory_plan_t plan;
  CUdeviceptr arena, constants, aux, scratch, err, fallback;
  uint64_t arena_bytes, const_bytes, aux_bytes_dev, scratch_alloc, fallback_alloc;
  uint64_t *const_offset;    /* per value */
  uint64_t *fallback_offset; /* per value: unbound outputs */
  uint64_t fallback_bytes;
  unsigned char *aux_host; /* until uploaded */
  uint64_t aux_bytes, aux_cap;
  uint64_t scratch_bytes;
  ty_cu_cmd_t *cmds;
  uint32_t cmd_count, cmd_cap;
  CUdeviceptr *addr; /* per value, resolved at execute */
  uint32_t *sorted_named;
  uint32_t named_count;
  int32_t *err_host; /* pinned */
  /* CUDA graph replay. */
  CUgraph cu_graph;
  CUgraphExec cu_exec;
  uint64_t captures, replays, runs;
  bool sync_each; /* TRAINYARD_CUDA_SYNC */
  bool deterministic; /* the compile option deterministic=1 (ty_cu_compile_options) */
  /* Profiling (TRAINYARD_PROFILE): one event before every node and one at
   * the end. */
  ty_host_profile_t *profile;
  CUevent *events;
  uint32_t *first_cmd; /* per node: its first command (cmd_count when none) */
  int64_t *row_stride; /* per value: padded row length in elements, 0 = dense */
  int64_t *zero_rows;  /* per value: rows allocated (>= dims[0]) whose extra rows
                          are zeros, 0 = none */
  bool *zero_cols;     /* per value: the padding of its rows holds zeros */
  /* Address tables (ty_cu_ptr_table): one device array of u64, its
   * references, and the addresses last uploaded. */
  ty_cu_ref_t *table_refs;
  uint64_t *table_host;
  uint32_t table_count, table_cap;
  CUdeviceptr tables;
  bool tables_uploaded;
  bool *fused; /* per node: its work is done by another node's commands */
  ty_cu_fuse_t *fuse; /* per node: the fusion it heads (cuda_fuse.h) */
  uint32_t *extra_read; /* per node: a value its command reads beyond its inputs
                           (ty_cu_xent_plan: the forward's loss), UINT32_MAX = none */
  /* Test hooks (TRAINYARD_CUDA_FAULT). */
  int fault_kind;
  uint64_t fault_run;
  /* The ranks the all_reduce commands sum over in the current run (the
   * execute args' world_size; 1: they are copies). A CUDA graph captured
   * for one world is captured again for another. */
  uint32_t world;
  bool collectives_ran; /* a run over several ranks has completed */
  /* Over several ranks the commands are captured in segments, the runs of
   * commands between all_reduce commands, each its own CUDA graph; the
   * all_reduce commands run eagerly between them. NCCL's collectives are
   * kept out of the captured graphs: a graph holding them pins the
   * communicator (ncclCommDestroy then waits for the graph), and NCCL
   * connects peers on first use, host work a capture cannot hold. */
  CUgraph *seg_graph;
  CUgraphExec *seg_exec;
  uint32_t seg_count;
};

static uint64_t ty_cu_round_up(uint64_t x) {
  return (x + TY_CU_ALIGN - 1) & ~(uint64_t)(TY_CU_ALIGN - 1);
}

int64_t ty_cu_numel(const ty_abi_value_t *v) { return ty_abi_value_elements(v); }

/* ---- supports ---- */

ty_abi_status_t ty_cu_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *g,
                                     ty_abi_node_support_t *out) {
  (void)device;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    ty_abi_node_support_t *r = &out[n];
    const ty_cu_op_t *op = ty_cu_op_find(node->op);
    r->supported = 0;
    if (!op) {
      snprintf(r->reason, sizeof(r->reason), "cuda has no kernel for op '%s'", node->op);
      continue;
    }
    bool ok = ty_abi_node_operands_ok(g, node, op->accept, "cuda", r->reason,
                                      sizeof(r->reason));
    if (ok) ok = ty_cu_op_check(g, node, r->reason, sizeof(r->reason));
    r->supported = ok;
  }
  return NULL;
}

/* ---- builder helpers ---- */

void ty_cu_fail(ty_cu_build_t *b, ty_code_t code, const char *fmt, ...) {
  if (b->status) return;
  char message[512];
  va_list args;
  va_start(args, fmt);
  vsnprintf(message, sizeof(message), fmt, args);
  va_end(args);
  b->status = ty_cu_error(code, "%s: node %u (%s): %s", b->device->label, b->n, b->node->op,
                          message);
}

const ty_abi_value_t *ty_cu_vin(const ty_cu_build_t *b, uint32_t i) {
  if (i >= b->node->input_count || b->node->inputs[i] == UINT32_MAX) return NULL;
  return &b->g->values[b->node->inputs[i]];
}

const ty_abi_value_t *ty_cu_vout(const ty_cu_build_t *b, uint32_t o) {
  return &b->g->values[b->node->outputs[o]];
}

ty_cu_ref_t ty_cu_none(void) {
  ty_cu_ref_t r = {TY_CU_REF_NONE, 0, 0};
  return r;
}

ty_cu_ref_t ty_cu_in(const ty_cu_build_t *b, uint32_t i) {
  ty_cu_ref_t r = ty_cu_none();
  if (i < b->node->input_count && b->node->inputs[i] != UINT32_MAX) {
    r.kind = TY_CU_REF_VALUE;
    r.value = b->node->inputs[i];
  }
  return r;
}

ty_cu_ref_t ty_cu_out(const ty_cu_build_t *b, uint32_t o) {
  ty_cu_ref_t r = {TY_CU_REF_VALUE, b->node->outputs[o], 0};
  return r;
}

ty_cu_ref_t ty_cu_value(uint32_t value) {
  ty_cu_ref_t r = {TY_CU_REF_VALUE, value, 0};
  return r;
}

ty_cu_ref_t ty_cu_ref_at(ty_cu_ref_t ref, uint64_t byte_offset) {
  ref.offset += byte_offset;
  return ref;
}

int ty_cu_dt(const ty_abi_value_t *v) { return v ? (int)v->dtype : 0; }

int64_t ty_cu_row_stride(const ty_cu_build_t *b, uint32_t value) {
  const ty_abi_value_t *v = &b->g->values[value];
  const int64_t padded = b->exec->row_stride ? b->exec->row_stride[value] : 0;
  return padded ? padded : (v->rank ? v->dims[v->rank - 1] : 1);
}

int64_t ty_cu_zero_rows(const ty_cu_build_t *b, uint32_t value) {
  return b->exec->zero_rows ? b->exec->zero_rows[value] : 0;
}

bool ty_cu_zero_cols(const ty_cu_build_t *b, uint32_t value) {
  return b->exec->zero_cols && b->exec->zero_cols[value];
}

uint32_t ty_cu_extra_read(const ty_cu_build_t *b) {
  return b->exec->extra_read ? b->exec->extra_read[b->n] : UINT32_MAX;
}

uint32_t ty_cu_sm_count(const ty_cu_build_t *b) {
  return b->device->slot->sm_count > 0 ? (uint32_t)b->device->slot->sm_count : 1u;
}

ty_cu_ref_t ty_cu_scratch(ty_cu_build_t *b, uint64_t bytes) {
  ty_cu_ref_t r = {TY_CU_REF_SCRATCH, 0, b->scratch_used};
  b->scratch_used += ty_cu_round_up(bytes ? bytes : 1);
  if (b->scratch_used > b->exec->scratch_bytes) b->exec->scratch_bytes = b->scratch_used;
  return r;
}

ty_cu_ref_t ty_cu_ptr_table(ty_cu_build_t *b, const ty_cu_ref_t *refs, uint32_t count) {
  ty_cu_exec_t *e = b->exec;
  ty_cu_ref_t r = {TY_CU_REF_TABLE, 0, (uint64_t)e->table_count * 8u};
  if (b->status) return r;
  if (e->table_count + count > e->table_cap) {
    uint32_t cap = e->table_cap ? e->table_cap : 256;
    while (cap < e->table_count + count) cap *= 2;
    ty_cu_ref_t *grown = realloc(e->table_refs, (size_t)cap * sizeof(*grown));
    if (!grown) {
      ty_cu_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return r;
    }
    e->table_refs = grown;
    e->table_cap = cap;
  }
  memcpy(e->table_refs + e->table_count, refs, (size_t)count * sizeof(*refs));
  e->table_count += count;
  return r;
}

void ty_cu_mark_fused(ty_cu_build_t *b, uint32_t node) {
  if (node < b->g->node_count) b->exec->fused[node] = true;
}

ty_cu_ref_t ty_cu_aux(ty_cu_build_t *b, const void *data, uint64_t bytes) {
  ty_cu_exec_t *e = b->exec;
  ty_cu_ref_t r = {TY_CU_REF_AUX, 0, e->aux_bytes};
  uint64_t need = e->aux_bytes + ty_cu_round_up(bytes ? bytes : 1);
  if (need > e->aux_cap) {
    uint64_t cap = e->aux_cap ? e->aux_cap : 4096;
    while (cap < need) cap *= 2;
    unsigned char *grown = realloc(e->aux_host, cap);
    if (!grown) {
      ty_cu_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return r;
    }
    e->aux_host = grown;
    e->aux_cap = cap;
  }
  if (bytes) memcpy(e->aux_host + e->aux_bytes, data, bytes);
  e->aux_bytes = need;
  return r;
}

static ty_cu_cmd_t *ty_cu_cmd_add(ty_cu_build_t *b, ty_cu_cmd_kind_t kind) {
  ty_cu_exec_t *e = b->exec;
  if (b->status) return NULL;
  if (e->cmd_count == e->cmd_cap) {
    uint32_t cap = e->cmd_cap ? e->cmd_cap * 2 : 64;
    ty_cu_cmd_t *grown = realloc(e->cmds, (size_t)cap * sizeof(*grown));
    if (!grown) {
      ty_cu_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return NULL;
    }
    e->cmds = grown;
    e->cmd_cap = cap;
  }
  ty_cu_cmd_t *c = &e->cmds[e->cmd_count++];
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  c->node = b->n;
  return c;
}

ty_cu_cmd_t *ty_cu_launch(ty_cu_build_t *b, ty_cu_family_t family, const char *kernel) {
  if (b->status) return NULL;
  CUmodule module = NULL;
  ty_abi_status_t s = ty_cu_module_get(b->device, family, &module);
  if (s) {
    b->status = s;
    return NULL;
  }
  CUfunction f = NULL;
  CUresult r = b->device->api->cuModuleGetFunction(&f, module, kernel);
  if (r != CUDA_SUCCESS) {
    char text[256];
    ty_cu_error_text(b->device->api, r, text, sizeof(text));
    ty_cu_fail(b, TY_CODE_INTERNAL, "kernel %s is not in kernels/%s.cu's module: %s", kernel,
               ty_cu_family_file(family), text);
    return NULL;
  }
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_KERNEL);
  if (!c) return NULL;
  c->function = f;
  c->name = kernel;
  c->block[0] = c->block[1] = c->block[2] = 1;
  c->grid[0] = c->grid[1] = c->grid[2] = 1;
  return c;
}

static void ty_cu_arg_raw(ty_cu_build_t *b, ty_cu_cmd_t *c, const void *v, uint32_t size,
                          uint32_t align) {
  if (!c || b->status) return;
  uint32_t at = (c->param_bytes + align - 1) & ~(align - 1);
  if (at + size > TY_CU_MAX_PARAM_BYTES) {
    ty_cu_fail(b, TY_CODE_INTERNAL, "the parameters of %s exceed %u bytes", c->name,
               TY_CU_MAX_PARAM_BYTES);
    return;
  }
  memcpy(c->params + at, v, size);
  c->param_bytes = at + size;
}

void ty_cu_arg_ptr(ty_cu_build_t *b, ty_cu_cmd_t *c, ty_cu_ref_t ref) {
  if (!c || b->status) return;
  if (c->ptr_count == TY_CU_MAX_PTRS) {
    ty_cu_fail(b, TY_CODE_INTERNAL, "too many pointer parameters for %s (at most %u)", c->name,
               TY_CU_MAX_PTRS);
    return;
  }
  uint32_t at = (c->param_bytes + 7u) & ~7u;
  uint64_t null_ptr = 0;
  ty_cu_arg_raw(b, c, &null_ptr, 8, 8); /* patched at execute */
  if (b->status) return;
  ty_cu_ptrarg_t *p = &c->ptrs[c->ptr_count++];
  p->at = at;
  p->ref = ref;
}

void ty_cu_arg_err(ty_cu_build_t *b, ty_cu_cmd_t *c) {
  ty_cu_ref_t ref = {TY_CU_REF_ERR, 0, 0};
  ty_cu_arg_ptr(b, c, ref);
  ty_cu_arg_i32(b, c, (int32_t)b->n);
}

void ty_cu_arg_i32(ty_cu_build_t *b, ty_cu_cmd_t *c, int32_t v) { ty_cu_arg_raw(b, c, &v, 4, 4); }
void ty_cu_arg_u32(ty_cu_build_t *b, ty_cu_cmd_t *c, uint32_t v) { ty_cu_arg_raw(b, c, &v, 4, 4); }
void ty_cu_arg_i64(ty_cu_build_t *b, ty_cu_cmd_t *c, int64_t v) { ty_cu_arg_raw(b, c, &v, 8, 8); }
void ty_cu_arg_u64(ty_cu_build_t *b, ty_cu_cmd_t *c, uint64_t v) { ty_cu_arg_raw(b, c, &v, 8, 8); }
void ty_cu_arg_f32(ty_cu_build_t *b, ty_cu_cmd_t *c, float v) { ty_cu_arg_raw(b, c, &v, 4, 4); }
void ty_cu_arg_f64(ty_cu_build_t *b, ty_cu_cmd_t *c, double v) { ty_cu_arg_raw(b, c, &v, 8, 8); }

void ty_cu_arg_dims8(ty_cu_build_t *b, ty_cu_cmd_t *c, const int64_t v[8]) {
  ty_cu_arg_raw(b, c, v, 64, 8);
}

void ty_cu_grid1(ty_cu_build_t *b, ty_cu_cmd_t *c, uint64_t items, uint32_t block) {
  if (!c) return;
  uint64_t blocks = (items + block - 1) / block;
  /* Grid-stride kernels: enough blocks to fill the card several times. */
  uint64_t cap = (uint64_t)ty_cu_sm_count(b) * 32u;
  if (blocks > cap) blocks = cap;
  if (blocks == 0) blocks = 1;
  ty_cu_grid(b, c, (uint32_t)blocks, 1, 1, block, 1, 1, 0);
}

void ty_cu_grid(ty_cu_build_t *b, ty_cu_cmd_t *c, uint32_t gx, uint32_t gy, uint32_t gz,
                uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared_bytes) {
  if (!c || b->status) return;
  if (gy > 65535u || gz > 65535u || bx * by * bz > 1024u || gx == 0 || gy == 0 || gz == 0) {
    ty_cu_fail(b, TY_CODE_INTERNAL, "launch shape of %s out of range: grid %u x %u x %u, block "
               "%u x %u x %u", c->name, gx, gy, gz, bx, by, bz);
    return;
  }
  c->grid[0] = gx;
  c->grid[1] = gy;
  c->grid[2] = gz;
  c->block[0] = bx;
  c->block[1] = by;
  c->block[2] = bz;
  c->shared_bytes = shared_bytes;
  if (shared_bytes > 48u * 1024u) {
    if ((int)shared_bytes > b->device->slot->max_shared_optin) {
      ty_cu_fail(b, TY_CODE_INTERNAL, "%s needs %u bytes of shared memory; %s allows %d",
                 c->name, shared_bytes, b->device->label, b->device->slot->max_shared_optin);
      return;
    }
    CUresult r = b->device->api->cuFuncSetAttribute(
        c->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared_bytes);
    if (r != CUDA_SUCCESS) {
      char text[256];
      ty_cu_error_text(b->device->api, r, text, sizeof(text));
      ty_cu_fail(b, TY_CODE_INTERNAL, "raising the shared memory of %s to %u bytes: %s",
                 c->name, shared_bytes, text);
    }
  }
}

void ty_cu_fill(ty_cu_build_t *b, ty_cu_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_FILL);
  if (!c) return;
  c->name = "fill";
  c->dst = dst;
  c->size = size;
}

void ty_cu_copy(ty_cu_build_t *b, ty_cu_ref_t src, ty_cu_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_COPY);
  if (!c) return;
  c->name = "copy";
  c->src = src;
  c->dst = dst;
  c->size = size;
}

void ty_cu_all_reduce(ty_cu_build_t *b, ty_cu_ref_t src, ty_cu_ref_t dst, uint64_t count,
                      ty_dtype_t dtype, uint32_t reduce, const char *group) {
  if (count == 0) return;
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_ALL_REDUCE);
  if (!c) return;
  c->name = "ncclAllReduce";
  c->group = group;
  c->src = src;
  c->dst = dst;
  c->size = count;
  c->dtype = dtype;
  c->reduce = reduce;
}

ty_cu_cmd_t *ty_cu_gemm_cmd(ty_cu_build_t *b, const char *name) {
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_GEMM);
  if (c) c->name = name;
  return c;
}

/* ---- compile ---- */

static void ty_cu_graph_release(ty_abi_executable_t *e) {
  if (e->cu_exec) e->api->cuGraphExecDestroy(e->cu_exec);
  if (e->cu_graph) e->api->cuGraphDestroy(e->cu_graph);
  e->cu_exec = NULL;
  e->cu_graph = NULL;
  for (uint32_t i = 0; i < e->seg_count; ++i) {
    if (e->seg_exec[i]) e->api->cuGraphExecDestroy(e->seg_exec[i]);
    if (e->seg_graph[i]) e->api->cuGraphDestroy(e->seg_graph[i]);
  }
  free(e->seg_exec);
  free(e->seg_graph);
  e->seg_exec = NULL;
  e->seg_graph = NULL;
  e->seg_count = 0;
}

void ty_cu_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_abi_device_t *d = e->device;
  ty_cu_enter(d);
  d->api->cuStreamSynchronize(d->stream);
  if (e->profile) {
    ty_host_profile_report_and_free(e->profile, d->label, &e->graph->graph, NULL);
    e->profile = NULL;
  }
  if (e->events) {
    for (uint32_t i = 0; i <= e->graph->graph.node_count; ++i) {
      if (e->events[i]) e->api->cuEventDestroy(e->events[i]);
    }
    free(e->events);
  }
  ty_cu_graph_release(e);
  for (uint32_t i = 0; i < e->cmd_count; ++i) ty_cu_gemm_free(e->api, e->cmds[i].gemm);
  ty_cu_free(d, e->arena, e->arena_bytes);
  ty_cu_free(d, e->constants, e->const_bytes);
  ty_cu_free(d, e->aux, e->aux_bytes_dev);
  ty_cu_free(d, e->scratch, e->scratch_alloc);
  ty_cu_free(d, e->err, TY_CU_ERR_BYTES);
  ty_cu_free(d, e->fallback, e->fallback_alloc);
  if (e->err_host) e->api->cuMemFreeHost(e->err_host);
  ty_memory_plan_free(&e->plan);
  ty_owned_graph_free(e->graph);
  free(e->const_offset);
  free(e->fallback_offset);
  free(e->aux_host);
  free(e->cmds);
  free(e->addr);
  free(e->sorted_named);
  free(e->first_cmd);
  free(e->row_stride);
  free(e->zero_rows);
  free(e->zero_cols);
  ty_cu_free(d, e->tables, (uint64_t)e->table_count * 8u);
  free(e->table_refs);
  free(e->table_host);
  free(e->fused);
  free(e->fuse);
  free(e->extra_read);
  free(e);
}

static int ty_cu_name_compare(const void *a, const void *b, void *ctx) {
  const ty_abi_graph_t *g = ctx;
  return strcmp(g->values[*(const uint32_t *)a].name, g->values[*(const uint32_t *)b].name);
}

/* Device memory of `bytes` holding `data` when given (synchronous). */
static ty_abi_status_t ty_cu_upload(ty_abi_executable_t *e, uint64_t bytes, const void *data,
                                    const char *what, CUdeviceptr *out) {
  ty_abi_device_t *d = e->device;
  char text[160];
  snprintf(text, sizeof(text), "the %s of graph %.12s", what, e->graph->hash_hex);
  ty_abi_status_t st = ty_cu_alloc(d, bytes ? bytes : 1, text, out);
  if (st || !data || !bytes) return st;
  /* Through the staging buffer (pinned), in chunks. */
  pthread_mutex_lock(&d->staging_lock);
  for (uint64_t done = 0; done < bytes && !st;) {
    uint64_t n = bytes - done < d->staging_bytes ? bytes - done : d->staging_bytes;
    memcpy(d->staging, (const unsigned char *)data + done, (size_t)n);
    CUresult r = e->api->cuMemcpyHtoDAsync(*out + done, d->staging, (size_t)n, d->stream);
    if (r == CUDA_SUCCESS) r = e->api->cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) st = ty_cu_driver_error(d, "uploading graph data", r);
    done += n;
  }
  pthread_mutex_unlock(&d->staging_lock);
  return st;
}

/* ---- padded rows ----
 *
 * A matmul whose output rows are not a multiple of 16 bytes (GPT-2's logits:
 * 50257 columns) runs on cuBLASLt's slow unaligned kernels, at a fifth of
 * the speed of its aligned ones, and so do the matmuls and the loss that
 * read it. Such an intermediate value is laid out with its rows padded to a
 * multiple of 64 elements when every node that touches it can take a row
 * stride: matmul (as an operand or result), cross_entropy(+_backward) on the
 * logits, and reshapes that keep the last dimension (views of the same
 * rows). The padding is never read, so it is never written either. Values
 * bound by name stay dense: the caller sees their plain layout. */

static bool ty_cu_pad_consumers_ok(const ty_abi_graph_t *g, uint32_t v, uint32_t depth,
                                   uint32_t *views, uint32_t *view_count) {
  const int64_t last = g->values[v].dims[g->values[v].rank - 1];
  for (uint32_t n = 0; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    for (uint32_t i = 0; i < node->input_count; ++i) {
      if (node->inputs[i] != v) continue;
      const char *op = node->op;
      if (!strcmp(op, "matmul") && i < 2) continue;
      if (!strcmp(op, "cross_entropy") && i == 0) continue;
      if (!strcmp(op, "cross_entropy_backward") && i == 1) continue;
      if (!strcmp(op, "reshape") && depth < 4 && *view_count < 8) {
        const ty_abi_value_t *y = &g->values[node->outputs[0]];
        if (y->rank >= 2 && y->dims[y->rank - 1] == last && y->role == TY_VALUE_INTERMEDIATE &&
            !(y->flags & TY_VALUE_FLAG_OUTPUT)) {
          views[(*view_count)++] = node->outputs[0];
          if (ty_cu_pad_consumers_ok(g, node->outputs[0], depth + 1, views, view_count)) continue;
        }
      }
      return false;
    }
  }
  return true;
}

/* Whether value w is a [V, C] cast (an intermediate, not an output) that
 * only matmuls read, each as its b operand. */
static bool ty_cu_head_weight_ok(const ty_owned_graph_t *og, uint32_t w, int64_t V) {
  const ty_abi_graph_t *g = &og->graph;
  const ty_abi_value_t *wv = &g->values[w];
  if (wv->role != TY_VALUE_INTERMEDIATE || (wv->flags & TY_VALUE_FLAG_OUTPUT) || wv->rank != 2 ||
      wv->dims[0] != V || og->producer[w] == UINT32_MAX ||
      strcmp(g->nodes[og->producer[w]].op, "cast") != 0) {
    return false;
  }
  for (uint32_t n = 0; n < g->node_count; ++n) {
    for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
      if (g->nodes[n].inputs[i] == w && (strcmp(g->nodes[n].op, "matmul") || i != 1)) {
        return false;
      }
    }
  }
  return true;
}

/* The LM head: logits = h @ W^T with W a [V, C] cast of the embedding (an
 * intermediate: bf16-mixed). An odd V is also cuBLASLt's m (forward) and k
 * (the input gradient dlogits @ W), which keeps it off its fast kernels
 * even with aligned rows. So W's cast gets V..P-1 extra rows of zeros, the
 * forward computes all P columns (the extra ones are h . 0 = 0), the loss
 * gradient writes zeros into its padding, and the input gradient sums over
 * P: the same numbers, on aligned shapes. The backward's own cast of the
 * same weight (graph/autodiff.h, recast_states) is padded the same way, so
 * the input gradient keeps the aligned k. */
static void ty_cu_plan_padded_head(ty_abi_executable_t *e, uint32_t logits, uint32_t mm,
                                   int64_t padded) {
  ty_owned_graph_t *og = e->graph;
  const ty_abi_graph_t *g = &og->graph;
  const ty_abi_node_t *node = &g->nodes[mm];
  if (node->input_count > 2 && node->inputs[2] != UINT32_MAX) return; /* a bias */
  if (!ty_abi_node_attr_int(node, "trans_b", 0) || ty_abi_node_attr_int(node, "trans_a", 0)) {
    return;
  }
  const uint32_t w = node->inputs[1];
  const int64_t V = g->values[logits].dims[g->values[logits].rank - 1];
  if (!ty_cu_head_weight_ok(og, w, V)) return;
  const ty_abi_node_t *cast = &g->nodes[og->producer[w]];
  const uint32_t src = cast->inputs[0];
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const uint32_t p = og->producer[v];
    const bool twin = v == w || (p != UINT32_MAX && !strcmp(g->nodes[p].op, "cast") &&
                                 g->nodes[p].inputs[0] == src &&
                                 g->values[v].dtype == g->values[w].dtype &&
                                 ty_cu_head_weight_ok(og, v, V));
    if (!twin) continue;
    const ty_abi_value_t *wv = &g->values[v];
    e->zero_rows[v] = padded;
    og->value_bytes[v] = (uint64_t)padded * (uint64_t)wv->dims[1] * ty_abi_dtype_size(wv->dtype);
  }
  e->zero_cols[logits] = true;
}

static ty_abi_status_t ty_cu_plan_padding(ty_abi_executable_t *e) {
  ty_owned_graph_t *og = e->graph;
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nv = g->value_count ? g->value_count : 1;
  e->row_stride = calloc(nv, sizeof(int64_t));
  e->zero_rows = calloc(nv, sizeof(int64_t));
  e->zero_cols = calloc(nv, sizeof(bool));
  if (!e->row_stride || !e->zero_rows || !e->zero_cols) {
    return ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  const char *env = getenv("TRAINYARD_CUDA_PAD_ROWS");
  if (env && !strcmp(env, "0")) return NULL;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    const size_t es = ty_abi_dtype_size(val->dtype);
    if (val->role != TY_VALUE_INTERMEDIATE || (val->flags & TY_VALUE_FLAG_OUTPUT) ||
        val->rank < 2 || es == 0 || e->row_stride[v]) {
      continue;
    }
    const int64_t n = val->dims[val->rank - 1];
    if (n < 256 || ((uint64_t)n * es) % 16 == 0) continue;
    const uint32_t p = og->producer[v];
    if (p == UINT32_MAX) continue;
    const char *op = g->nodes[p].op;
    if (!(!strcmp(op, "matmul") || !strcmp(op, "cross_entropy_backward")) ||
        g->nodes[p].outputs[0] != v) {
      continue;
    }
    uint32_t views[8], view_count = 0;
    if (!ty_cu_pad_consumers_ok(g, v, 0, views, &view_count)) continue;
    const int64_t padded = (n + 63) / 64 * 64;
    const uint64_t rows = (uint64_t)(ty_abi_value_elements(val) / n);
    e->row_stride[v] = padded;
    og->value_bytes[v] = rows * (uint64_t)padded * es;
    ty_cu_plan_padded_head(e, v, p, padded);
    for (uint32_t k = 0; k < view_count; ++k) {
      const ty_abi_value_t *y = &g->values[views[k]];
      e->row_stride[views[k]] = padded;
      og->value_bytes[views[k]] =
          (uint64_t)(ty_abi_value_elements(y) / n) * (uint64_t)padded * es;
    }
  }
  /* The loss gradient writes zeros into its rows' padding. */
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const uint32_t p = og->producer[v];
    if (e->row_stride[v] && p != UINT32_MAX &&
        !strcmp(g->nodes[p].op, "cross_entropy_backward")) {
      e->zero_cols[v] = true;
    }
  }
  return NULL;
}

/* TRAINYARD_CUDA_FAULT=<kind>@<run>: a test hook that makes run number
 * <run> (1-based) fail the way a real fault would. */
enum {
  TY_CU_FAULT_NONE = 0,
  TY_CU_FAULT_ILLEGAL_ADDRESS, /* a kernel writes through a wild pointer */
  TY_CU_FAULT_LAUNCH,          /* a launch with an impossible shape */
  TY_CU_FAULT_TRAP,            /* a kernel executes a trap (device assert) */
  TY_CU_FAULT_DEVICE_LOST,     /* the run reports the driver's "device
                                  unavailable" (simulated: nothing is lost) */
};

static void ty_cu_fault_parse(ty_abi_executable_t *e) {
  const char *env = getenv("TRAINYARD_CUDA_FAULT");
  if (!env || !env[0]) return;
  char kind[32] = "";
  unsigned long long run = 1;
  if (sscanf(env, "%31[a-z-]@%llu", kind, &run) < 1) return;
  if (!strcmp(kind, "illegal-address")) e->fault_kind = TY_CU_FAULT_ILLEGAL_ADDRESS;
  else if (!strcmp(kind, "launch")) e->fault_kind = TY_CU_FAULT_LAUNCH;
  else if (!strcmp(kind, "trap")) e->fault_kind = TY_CU_FAULT_TRAP;
  else if (!strcmp(kind, "device-lost")) e->fault_kind = TY_CU_FAULT_DEVICE_LOST;
  e->fault_run = run ? run : 1;
}

/* Compile options: deterministic=0|1 (ABI 1.10: batch-invariant kernels,
 * see cuda_exec.h "Deterministic mode"); keys starting with "debug." are
 * the host's debugging requests (ABI 1.9), none of which cuda implements,
 * so they are ignored; anything else is refused. */
static ty_abi_status_t ty_cu_compile_options(const ty_abi_device_t *device,
                                             const ty_abi_compile_args_t *args,
                                             bool *out_deterministic) {
  *out_deterministic = false;
  const size_t debug_len = strlen(TY_ABI_DEBUG_OPTION_PREFIX);
  for (uint32_t i = 0; i < args->option_count; ++i) {
    const char *k = args->options[i].key ? args->options[i].key : "";
    const char *v = args->options[i].value ? args->options[i].value : "";
    if (!strncmp(k, TY_ABI_DEBUG_OPTION_PREFIX, debug_len)) continue;
    if (!strcmp(k, TY_ABI_DETERMINISTIC_OPTION)) {
      if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0) {
        return ty_cu_error(TY_CODE_INVALID_ARGUMENT,
                           "%s: compile option %s=%s: expected 0 or 1", device->label, k, v);
      }
      *out_deterministic = v[0] == '1';
      continue;
    }
    return ty_cu_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: unknown compile option '%s' (the cuda backend takes "
                       "deterministic=0|1 and ignores debug.* keys; device options go in the "
                       "URI, e.g. cuda:0?graphs=0)",
                       device->label, k);
  }
  return NULL;
}

bool ty_cu_exec_deterministic(const ty_cu_exec_t *e) { return e->deterministic; }

ty_abi_status_t ty_cu_graph_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                    ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  bool deterministic = false;
  ty_abi_status_t s = ty_cu_compile_options(device, args, &deterministic);
  if (s) return s;
  s = ty_cu_enter(device);
  if (s) return s;
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
  e->device = device;
  e->deterministic = deterministic;
  e->api = device->api;
  e->graph = ty_owned_graph_copy(args->graph);
  s = e->graph ? ty_cu_plan_padding(e) : NULL;
  if (s) {
    ty_cu_executable_destroy(e);
    return s;
  }
  /* Fusions first: the plan places a fused node's outputs where its
   * command runs (cuda_fuse.h). */
  const uint32_t nn = e->graph ? e->graph->graph.node_count : 0;
  uint32_t *run_at = e->graph ? malloc(((size_t)nn + 1) * sizeof(uint32_t)) : NULL;
  int32_t *reuse = e->graph ? malloc(((size_t)nn + 1) * sizeof(int32_t)) : NULL;
  e->fuse = e->graph ? calloc((size_t)nn + 1, sizeof(ty_cu_fuse_t)) : NULL;
  e->extra_read = e->graph ? malloc(((size_t)nn + 1) * sizeof(uint32_t)) : NULL;
  if (run_at && reuse && e->fuse && e->extra_read) {
    ty_cu_fuse_plan(e->graph, e->row_stride, ty_cu_fuse_enabled(), e->fuse, run_at);
    ty_cu_xent_plan(e->graph, e->row_stride, run_at, ty_cu_loss_in_place_enabled(), reuse,
                    e->extra_read);
  }
  const ty_memory_plan_opts_t plan_opts = {
      .run_at = run_at, .reuse_input = reuse, .extra_read = e->extra_read};
  if (!e->graph || !run_at || !reuse || !e->fuse || !e->extra_read ||
      ty_memory_plan_build_opts(e->graph, TY_CU_ALIGN, &plan_opts, &e->plan) != TY_CODE_OK) {
    free(run_at);
    free(reuse);
    ty_cu_executable_destroy(e);
    return ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling", device->label);
  }
  const ty_abi_graph_t *g = &e->graph->graph;
  uint32_t nv = g->value_count ? g->value_count : 1;
  e->const_offset = calloc(nv, sizeof(uint64_t));
  e->fallback_offset = calloc(nv, sizeof(uint64_t));
  e->addr = calloc(nv, sizeof(CUdeviceptr));
  e->sorted_named = calloc(nv, sizeof(uint32_t));
  e->first_cmd = calloc((size_t)g->node_count + 1, sizeof(uint32_t));
  e->fused = calloc((size_t)g->node_count + 1, sizeof(bool));
  if (e->fused) {
    for (uint32_t n = 0; n < nn; ++n) e->fused[n] = run_at[n] != n;
  }
  free(run_at);
  free(reuse);
  if (!e->const_offset || !e->fallback_offset || !e->addr || !e->sorted_named ||
      !e->first_cmd || !e->fused) {
    ty_cu_executable_destroy(e);
    return ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling", device->label);
  }
  const char *sync_env = getenv("TRAINYARD_CUDA_SYNC");
  e->sync_each = sync_env && sync_env[0] && strcmp(sync_env, "0") != 0;
  ty_cu_fault_parse(e);
  /* Constants, named values, unbound-output slots. */
  uint64_t const_bytes = 0;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_value_storage_t *st = &e->plan.storage[v];
    if (st->kind == TY_STORAGE_CONSTANT) {
      e->const_offset[v] = const_bytes;
      const_bytes += ty_cu_round_up(e->graph->value_bytes[v]);
    } else if (st->kind == TY_STORAGE_BOUND) {
      e->sorted_named[e->named_count++] = v;
      if (g->values[v].role == TY_VALUE_INTERMEDIATE) {
        e->fallback_offset[v] = e->fallback_bytes;
        e->fallback_bytes += ty_cu_round_up(e->graph->value_bytes[v]);
      }
    }
  }
  qsort_r(e->sorted_named, e->named_count, sizeof(uint32_t), ty_cu_name_compare, (void *)g);
  /* Commands. */
  ty_cu_build_t b = {.device = device, .exec = e, .g = g, .deterministic = deterministic};
  for (uint32_t n = 0; n < g->node_count && !b.status; ++n) {
    e->first_cmd[n] = e->cmd_count;
    if (e->plan.skip[n]) continue; /* a view: its output already reads its input */
    if (e->fused[n]) continue;     /* done by another node's commands (cuda_fuse.h) */
    b.node = &g->nodes[n];
    b.n = n;
    b.fuse = e->fuse[n].kind != TY_CU_FUSE_NONE ? &e->fuse[n] : NULL;
    b.scratch_used = 0;
    const ty_cu_op_t *op = ty_cu_op_find(b.node->op);
    if (!op) {
      ty_cu_fail(&b, TY_CODE_UNIMPLEMENTED, "no kernel for this op");
      break;
    }
    op->build(&b);
    /* The zero rows of a padded LM-head weight (ty_cu_plan_padded_head):
     * the arena's bytes there belonged to other values before. */
    const uint32_t out0 = b.node->output_count ? b.node->outputs[0] : UINT32_MAX;
    if (out0 != UINT32_MAX && e->zero_rows[out0]) {
      const ty_abi_value_t *w = &g->values[out0];
      const uint64_t row = (uint64_t)w->dims[1] * ty_abi_dtype_size(w->dtype);
      ty_cu_fill(&b, ty_cu_ref_at(ty_cu_out(&b, 0), (uint64_t)w->dims[0] * row),
                 (uint64_t)(e->zero_rows[out0] - w->dims[0]) * row);
    }
  }
  e->first_cmd[g->node_count] = e->cmd_count;
  s = b.status;
  /* Device memory. */
  if (!s && e->plan.arena_bytes) {
    s = ty_cu_upload(e, e->plan.arena_bytes, NULL, "activation arena", &e->arena);
    if (!s) e->arena_bytes = e->plan.arena_bytes;
  }
  if (!s && const_bytes) {
    unsigned char *host = calloc(1, (size_t)const_bytes);
    if (!host) {
      s = ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
    } else {
      for (uint32_t v = 0; v < g->value_count; ++v) {
        if (e->plan.storage[v].kind == TY_STORAGE_CONSTANT && e->graph->value_bytes[v]) {
          memcpy(host + e->const_offset[v], g->values[v].const_data, e->graph->value_bytes[v]);
        }
      }
      s = ty_cu_upload(e, const_bytes, host, "constants", &e->constants);
      if (!s) e->const_bytes = const_bytes;
      free(host);
    }
  }
  if (!s && e->aux_bytes) {
    s = ty_cu_upload(e, e->aux_bytes, e->aux_host, "tables", &e->aux);
    if (!s) e->aux_bytes_dev = e->aux_bytes;
  }
  if (!s && e->table_count) {
    e->table_host = calloc(e->table_count, sizeof(uint64_t));
    if (!e->table_host) {
      s = ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
    } else {
      s = ty_cu_upload(e, (uint64_t)e->table_count * 8u, NULL, "address tables", &e->tables);
    }
  }
  if (!s && e->scratch_bytes) {
    s = ty_cu_upload(e, e->scratch_bytes, NULL, "scratch", &e->scratch);
    if (!s) e->scratch_alloc = e->scratch_bytes;
  }
  if (!s) {
    unsigned char zeros[TY_CU_ERR_BYTES] = {0};
    s = ty_cu_upload(e, TY_CU_ERR_BYTES, zeros, "error flag", &e->err);
  }
  if (!s) {
    CUresult r = e->api->cuMemAllocHost((void **)&e->err_host, TY_CU_ERR_BYTES);
    if (r != CUDA_SUCCESS) s = ty_cu_driver_error(device, "cuMemAllocHost (error flag)", r);
  }
  if (!s) {
    e->profile = ty_host_profile_create(g->node_count);
    if (e->profile) {
      e->events = calloc((size_t)g->node_count + 1, sizeof(CUevent));
      if (!e->events) {
        ty_host_profile_report_and_free(e->profile, device->label, g, NULL);
        e->profile = NULL;
      }
    }
  }
  if (s) {
    ty_cu_executable_destroy(e);
    return s;
  }
  free(e->aux_host);
  e->aux_host = NULL;
  *out_executable = e;
  return NULL;
}

const ty_abi_graph_t *ty_cu_executable_graph(ty_abi_executable_t *e) { return &e->graph->graph; }

/* What compile allocated for the executable's life: the activation arena
 * (its plan), and beside it the per-node kernel scratch (the chunked loss's
 * logits, reduction partials), constants and tables. */
ty_abi_status_t ty_cu_executable_memory(ty_abi_executable_t *e, ty_abi_executable_memory_t *out) {
  out->arena_bytes = e->arena_bytes + e->const_bytes + e->aux_bytes_dev +
                     (uint64_t)e->table_count * 8u;
  out->scratch_bytes = e->scratch_alloc;
  out->host_bytes = 0;
  return NULL;
}

ty_abi_device_t *ty_cu_exec_device(const ty_cu_exec_t *e) { return e->device; }

/* ---- execute ---- */

static uint32_t ty_cu_find_named(const ty_abi_executable_t *e, const char *name) {
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

static ty_abi_status_t ty_cu_resolve(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  const ty_abi_graph_t *g = &e->graph->graph;
  const char *label = e->device->label;
  bool *bound = calloc(g->value_count ? g->value_count : 1, sizeof(bool));
  if (!bound) return ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", label);
  ty_abi_status_t s = NULL;
  for (uint32_t i = 0; i < args->binding_count && !s; ++i) {
    const ty_abi_binding_t *bind = &args->bindings[i];
    uint32_t v = ty_cu_find_named(e, bind->name);
    if (v == UINT32_MAX) {
      s = ty_cu_error(TY_CODE_INVALID_ARGUMENT,
                      "%s: no input, state or output named '%s' in graph %.12s", label,
                      bind->name, e->graph->hash_hex);
    } else if (bind->offset > bind->buffer->size ||
               e->graph->value_bytes[v] > bind->buffer->size - bind->offset) {
      s = ty_cu_error(TY_CODE_INVALID_ARGUMENT,
                      "%s: binding '%s' needs %llu bytes at offset %llu of a %llu-byte buffer",
                      label, bind->name, (unsigned long long)e->graph->value_bytes[v],
                      (unsigned long long)bind->offset, (unsigned long long)bind->buffer->size);
    } else {
      e->addr[v] = bind->buffer->ptr + bind->offset;
      bound[v] = true;
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    const ty_value_storage_t *st = &e->plan.storage[v];
    switch (st->kind) {
      case TY_STORAGE_CONSTANT: e->addr[v] = e->constants + e->const_offset[v]; break;
      case TY_STORAGE_ARENA: e->addr[v] = e->arena + st->offset; break;
      case TY_STORAGE_STATE_ALIAS:
      case TY_STORAGE_VIEW: /* after every other kind */
        break;
      case TY_STORAGE_BOUND:
        if (bound[v]) break;
        if (val->role != TY_VALUE_INTERMEDIATE) {
          s = ty_cu_error(TY_CODE_INVALID_ARGUMENT, "%s: %s '%s' is not bound", label,
                          val->role == TY_VALUE_STATE ? "state" : "input", val->name);
          break;
        }
        if (!e->fallback) {
          s = ty_cu_upload(e, e->fallback_bytes, NULL, "unbound outputs", &e->fallback);
          if (s) break;
          e->fallback_alloc = e->fallback_bytes ? e->fallback_bytes : 1;
        }
        e->addr[v] = e->fallback + e->fallback_offset[v];
        break;
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    if (e->plan.storage[v].kind == TY_STORAGE_STATE_ALIAS) {
      e->addr[v] = e->addr[e->plan.storage[v].alias];
    }
  }
  for (uint32_t v = 0; v < g->value_count && !s; ++v) {
    if (e->plan.storage[v].kind == TY_STORAGE_VIEW) e->addr[v] = e->addr[e->plan.storage[v].alias];
  }
  free(bound);
  return s;
}

CUdeviceptr ty_cu_ref_address(const ty_abi_executable_t *e, ty_cu_ref_t r) {
  switch (r.kind) {
    case TY_CU_REF_VALUE: return e->addr[r.value] + r.offset;
    case TY_CU_REF_SCRATCH: return e->scratch + r.offset;
    case TY_CU_REF_AUX: return e->aux + r.offset;
    case TY_CU_REF_ERR: return e->err;
    case TY_CU_REF_TABLE: return e->tables + r.offset;
    default: return 0;
  }
}

/* Resolves the address tables; uploads them when any entry moved. */
static ty_abi_status_t ty_cu_patch_tables(ty_abi_executable_t *e, bool *changed) {
  bool moved = !e->tables_uploaded;
  for (uint32_t i = 0; i < e->table_count; ++i) {
    const uint64_t a = ty_cu_ref_address(e, e->table_refs[i]);
    if (a != e->table_host[i]) {
      e->table_host[i] = a;
      moved = true;
    }
  }
  if (!moved || !e->table_count) return NULL;
  ty_abi_device_t *d = e->device;
  const uint64_t bytes = (uint64_t)e->table_count * 8u;
  ty_abi_status_t st = NULL;
  pthread_mutex_lock(&d->staging_lock);
  for (uint64_t done = 0; done < bytes && !st;) {
    const uint64_t n = bytes - done < d->staging_bytes ? bytes - done : d->staging_bytes;
    memcpy(d->staging, (const unsigned char *)e->table_host + done, (size_t)n);
    CUresult r = e->api->cuMemcpyHtoDAsync(e->tables + done, d->staging, (size_t)n, d->stream);
    if (r == CUDA_SUCCESS) r = e->api->cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) st = ty_cu_driver_error(d, "uploading the address tables", r);
    done += n;
  }
  pthread_mutex_unlock(&d->staging_lock);
  if (!st) {
    e->tables_uploaded = true;
    *changed = true;
  }
  return st;
}

/* Writes every command's resolved pointers; true when any changed. */
static bool ty_cu_patch(ty_abi_executable_t *e) {
  bool changed = false;
  for (uint32_t i = 0; i < e->cmd_count; ++i) {
    ty_cu_cmd_t *c = &e->cmds[i];
    if (c->kind == TY_CU_CMD_GEMM) {
      changed |= ty_cu_gemm_patch(e, c->gemm);
      continue;
    }
    for (uint32_t p = 0; p < c->ptr_count; ++p) {
      uint64_t addr = ty_cu_ref_address(e, c->ptrs[p].ref), old;
      memcpy(&old, c->params + c->ptrs[p].at, 8);
      if (old != addr) {
        memcpy(c->params + c->ptrs[p].at, &addr, 8);
        changed = true;
      }
    }
  }
  return changed;
}

static ty_abi_status_t ty_cu_cmd_error(const ty_abi_executable_t *e, const ty_cu_cmd_t *c,
                                       const char *what, CUresult r) {
  char text[320];
  snprintf(text, sizeof(text), "node %u (%s): %s of %s", c->node,
           e->graph->graph.nodes[c->node].op, what, c->name);
  return ty_cu_driver_error(e->device, text, r);
}

/* An all_reduce command: a copy at world 1; else queued on the device's
 * communicator of its group, in one NCCL group with the all_reduce
 * commands right after it on the same communicator (the gradients of a
 * train step: one launch, not ~150). Commands on different communicators
 * are never in one NCCL group: each communicator's batch is closed before
 * the next one's starts (ty_nccl_queue keeps one open group per comm). */
static ty_abi_status_t ty_cu_all_reduce_run(ty_abi_executable_t *e, ty_cu_cmd_t *c) {
  CUdeviceptr dst = ty_cu_ref_address(e, c->dst), src = ty_cu_ref_address(e, c->src);
  uint64_t bytes = c->size * ty_dtype_size(c->dtype);
  if (e->world <= 1) {
    if (!dst || !src || dst == src) return NULL;
    CUresult r = e->api->cuMemcpyDtoDAsync(dst, src, (size_t)bytes, e->device->stream);
    return r == CUDA_SUCCESS ? NULL : ty_cu_cmd_error(e, c, "cuMemcpyDtoDAsync", r);
  }
  const char *group = c->group ? c->group : "world";
  const char *op = e->graph->graph.nodes[c->node].op;
  ty_abi_comm_t *comm = ty_cu_device_comm(e->device, group);
  if (!comm) {
    return ty_cu_error(TY_CODE_FAILED_PRECONDITION,
                       "%s: node %u (%s over group '%s') runs in a run of %u ranks, and no "
                       "communicator of group '%s' was made on this device: make it first "
                       "(comm_create with group '%s', ABI 1.7)",
                       e->device->label, c->node, op, group, e->world, group, group);
  }
  if (!strcmp(group, "world") && ty_cu_comm_size(comm) != e->world) {
    return ty_cu_error(TY_CODE_FAILED_PRECONDITION,
                       "%s: node %u (%s) runs over the world of %u ranks, and this device's "
                       "world communicator has %u",
                       e->device->label, c->node, op, e->world, ty_cu_comm_size(comm));
  }
  const ty_cu_cmd_t *next = c + 1 < e->cmds + e->cmd_count ? c + 1 : NULL;
  bool more = next && next->kind == TY_CU_CMD_ALL_REDUCE &&
              ty_cu_device_comm(e->device, next->group ? next->group : "world") == comm &&
              !e->sync_each && !e->events;
  ty_abi_status_t st =
      ty_cu_comm_enqueue_all_reduce(comm, c->dtype, c->reduce, src, dst, c->size, more, op);
  if (!st) return NULL;
  /* The node's details only on the error path (this runs ~150 times a step). */
  const ty_host_api_t *host = e->device->backend->host;
  ty_abi_status_t named = ty_cu_error(
      host->status_code(st), "%s (node %u, '%s', %llu %s, group %s)", host->status_message(st),
      c->node, e->graph->graph.values[e->graph->graph.nodes[c->node].outputs[0]].name,
      (unsigned long long)c->size, ty_dtype_name(c->dtype), group);
  host->status_free(st);
  return named;
}

static ty_abi_status_t ty_cu_cmd_run(ty_abi_executable_t *e, ty_cu_cmd_t *c) {
  ty_cu_api_t *api = e->api;
  CUstream stream = e->device->stream;
  CUresult r = CUDA_SUCCESS;
  switch (c->kind) {
    case TY_CU_CMD_KERNEL: {
      size_t size = c->param_bytes;
      void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, c->params, CU_LAUNCH_PARAM_BUFFER_SIZE,
                       &size, CU_LAUNCH_PARAM_END};
      r = api->cuLaunchKernel(c->function, c->grid[0], c->grid[1], c->grid[2], c->block[0],
                              c->block[1], c->block[2], c->shared_bytes, stream, NULL, extra);
      if (r != CUDA_SUCCESS) return ty_cu_cmd_error(e, c, "launch", r);
      return NULL;
    }
    case TY_CU_CMD_GEMM: return ty_cu_gemm_run(e, c);
    case TY_CU_CMD_FILL: {
      CUdeviceptr dst = ty_cu_ref_address(e, c->dst);
      if (!dst) return NULL;
      r = api->cuMemsetD8Async(dst, 0, (size_t)c->size, stream);
      return r == CUDA_SUCCESS ? NULL : ty_cu_cmd_error(e, c, "cuMemsetD8Async", r);
    }
    case TY_CU_CMD_COPY: {
      CUdeviceptr dst = ty_cu_ref_address(e, c->dst), src = ty_cu_ref_address(e, c->src);
      if (!dst || !src || dst == src) return NULL;
      r = api->cuMemcpyDtoDAsync(dst, src, (size_t)c->size, stream);
      return r == CUDA_SUCCESS ? NULL : ty_cu_cmd_error(e, c, "cuMemcpyDtoDAsync", r);
    }
    case TY_CU_CMD_ALL_REDUCE: return ty_cu_all_reduce_run(e, c);
  }
  return NULL;
}

/* The test hook's fault, queued before the commands of the chosen run. */
static ty_abi_status_t ty_cu_fault_inject(ty_abi_executable_t *e) {
  ty_abi_device_t *d = e->device;
  if (e->fault_kind == TY_CU_FAULT_DEVICE_LOST) {
    return ty_cu_driver_error(d, "running (test hook TRAINYARD_CUDA_FAULT: a lost device)",
                              CUDA_ERROR_DEVICE_UNAVAILABLE);
  }
  CUmodule m = NULL;
  ty_abi_status_t st = ty_cu_module_get(d, TY_CU_FAM_TEST, &m);
  if (st) return st;
  CUfunction f = NULL;
  const char *name = e->fault_kind == TY_CU_FAULT_TRAP ? "ty_test_trap" : "ty_test_wild_write";
  CUresult r = e->api->cuModuleGetFunction(&f, m, name);
  if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "finding the test-hook kernel", r);
  uint64_t wild = 0x10; /* never a valid device address */
  void *params[] = {&wild};
  unsigned threads = e->fault_kind == TY_CU_FAULT_LAUNCH ? 4096u : 1u; /* > 1024: invalid */
  r = e->api->cuLaunchKernel(f, 1, 1, 1, threads, 1, 1, 0, d->stream, params, NULL);
  if (r != CUDA_SUCCESS) {
    char what[128];
    snprintf(what, sizeof(what), "launching kernel %s (test hook TRAINYARD_CUDA_FAULT)", name);
    return ty_cu_driver_error(d, what, r);
  }
  return NULL;
}

/* Queues commands [from, to), then, with `copies`, the state-update
 * copies. Profiling events (the whole run only) mark every node's start. */
static ty_abi_status_t ty_cu_enqueue_range(ty_abi_executable_t *e, uint32_t from, uint32_t to,
                                           bool copies) {
  ty_abi_status_t s = NULL;
  const ty_abi_graph_t *g = &e->graph->graph;
  ty_cu_api_t *api = e->api;
  CUstream stream = e->device->stream;
  uint32_t node = 0;
  for (uint32_t i = from; i < to && !s; ++i) {
    if (e->events) {
      while (node < g->node_count && e->first_cmd[node] <= i) {
        if (!e->events[node]) api->cuEventCreate(&e->events[node], CU_EVENT_DEFAULT);
        api->cuEventRecord(e->events[node], stream);
        ++node;
      }
    }
    s = ty_cu_cmd_run(e, &e->cmds[i]);
    if (!s && e->sync_each) {
      CUresult r = api->cuStreamSynchronize(stream);
      if (r != CUDA_SUCCESS) s = ty_cu_cmd_error(e, &e->cmds[i], "running", r);
    }
  }
  if (e->events) {
    while (node <= g->node_count) {
      if (!e->events[node]) api->cuEventCreate(&e->events[node], CU_EVENT_DEFAULT);
      api->cuEventRecord(e->events[node], stream);
      ++node;
    }
  }
  for (uint32_t u = 0; copies && u < e->plan.copy_count && !s; ++u) {
    const ty_abi_state_update_t *up = &e->plan.copies[u];
    uint64_t bytes = e->graph->value_bytes[up->state];
    if (!bytes || e->addr[up->state] == e->addr[up->value]) continue;
    CUresult r = api->cuMemcpyDtoDAsync(e->addr[up->state], e->addr[up->value], (size_t)bytes,
                                        stream);
    if (r != CUDA_SUCCESS) {
      char what[200];
      snprintf(what, sizeof(what), "copying the update of state '%s'",
               e->graph->graph.values[up->state].name);
      s = ty_cu_driver_error(e->device, what, r);
    }
  }
  return s;
}

/* Queues the whole run: every command, then the state-update copies. */
static ty_abi_status_t ty_cu_enqueue(ty_abi_executable_t *e) {
  return ty_cu_enqueue_range(e, 0, e->cmd_count, true);
}

/* Captures commands [from, to) (and with `copies` the state updates) as
 * one CUDA graph into *graph / *exec. */
static ty_abi_status_t ty_cu_capture(ty_abi_executable_t *e, uint32_t from, uint32_t to,
                                     bool copies, CUgraph *graph, CUgraphExec *exec) {
  ty_abi_device_t *d = e->device;
  ty_cu_api_t *api = e->api;
  CUresult r = api->cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "cuStreamBeginCapture", r);
  ty_abi_status_t s = ty_cu_enqueue_range(e, from, to, copies);
  CUgraph g = NULL;
  r = api->cuStreamEndCapture(d->stream, &g);
  if (!s && r != CUDA_SUCCESS) s = ty_cu_driver_error(d, "cuStreamEndCapture", r);
  if (s) {
    if (g) api->cuGraphDestroy(g);
    return s;
  }
  r = api->cuGraphInstantiate(exec, g, 0);
  if (r != CUDA_SUCCESS) {
    *exec = NULL;
    api->cuGraphDestroy(g);
    return ty_cu_driver_error(d, "cuGraphInstantiate", r);
  }
  *graph = g;
  return NULL;
}

/* A run over several ranks as CUDA graphs of the command runs between
 * all_reduce commands (captured when `capture`, else replayed), with the
 * all_reduce commands queued eagerly between them (see seg_graph). */
static ty_abi_status_t ty_cu_run_segments(ty_abi_executable_t *e, bool capture) {
  ty_cu_api_t *api = e->api;
  if (capture) {
    ty_cu_graph_release(e);
    uint32_t most = e->cmd_count + 1;
    e->seg_graph = calloc(most, sizeof(*e->seg_graph));
    e->seg_exec = calloc(most, sizeof(*e->seg_exec));
    if (!e->seg_graph || !e->seg_exec) {
      ty_cu_graph_release(e);
      return ty_cu_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of host memory",
                         e->device->label);
    }
  }
  uint32_t seg = 0, i = 0;
  for (;;) {
    uint32_t end = i;
    while (end < e->cmd_count && e->cmds[end].kind != TY_CU_CMD_ALL_REDUCE) ++end;
    const bool last = end == e->cmd_count;
    const bool empty = end == i && !(last && e->plan.copy_count);
    if (capture && !empty) {
      ty_abi_status_t s =
          ty_cu_capture(e, i, end, last, &e->seg_graph[seg], &e->seg_exec[seg]);
      if (s) {
        e->seg_count = seg + 1;
        ty_cu_graph_release(e);
        return s;
      }
      e->seg_count = seg + 1;
    }
    if (e->seg_exec[seg]) {
      CUresult r = api->cuGraphLaunch(e->seg_exec[seg], e->device->stream);
      if (r != CUDA_SUCCESS) return ty_cu_driver_error(e->device, "cuGraphLaunch", r);
    }
    ++seg;
    if (last) return NULL;
    for (i = end; i < e->cmd_count && e->cmds[i].kind == TY_CU_CMD_ALL_REDUCE; ++i) {
      ty_abi_status_t s = ty_cu_cmd_run(e, &e->cmds[i]);
      if (s) return s;
    }
  }
}

/* The message of a data error a kernel recorded. */
static ty_abi_status_t ty_cu_data_error(const ty_abi_executable_t *e, const int32_t *flag) {
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
      snprintf(what, sizeof(what), "%s: targets[%lld] = %lld is outside the "
               "vocabulary [0, %lld) (negative means ignored)",
               strncmp(op, "vocab_", 6) == 0 ? op : "cross_entropy", x, y, z);
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
    case 8: {
      uint32_t bits = (uint32_t)b;
      float beta1;
      memcpy(&beta1, &bits, sizeof(beta1));
      snprintf(what, sizeof(what), "adafactor: step %lld must be >= 1 and beta1 %g in [0, 1)", x,
               (double)beta1);
      break;
    }
    default:
      snprintf(what, sizeof(what), "unknown device error code %d", (int)flag[0]);
      break;
  }
  return ty_cu_error(TY_CODE_INVALID_ARGUMENT, "%s: node %u (%s): %s", e->device->label, node,
                     op, what);
}

static void ty_cu_profile_collect(ty_abi_executable_t *e) {
  const ty_abi_graph_t *g = &e->graph->graph;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    float ms = 0.0f;
    if (e->events[n] && e->events[n + 1] &&
        e->api->cuEventElapsedTime(&ms, e->events[n], e->events[n + 1]) == CUDA_SUCCESS) {
      ty_host_profile_add(e->profile, n, ms * 1e-3);
    }
  }
  ty_host_profile_end_run(e->profile);
}

ty_abi_status_t ty_cu_executable_execute(ty_abi_executable_t *e,
                                         const ty_abi_execute_args_t *args) {
  ty_abi_device_t *d = e->device;
  ty_cu_api_t *api = e->api;
  ty_abi_status_t s = ty_cu_enter(d);
  if (!s) s = ty_cu_resolve(e, args);
  if (s) return s;
  e->runs++;
  bool changed = ty_cu_patch(e);
  uint32_t world = args->struct_size >= offsetof(ty_abi_execute_args_t, world_size) +
                                             sizeof(args->world_size) && args->world_size > 1
                       ? args->world_size
                       : 1;
  if (world != e->world) {
    e->world = world;
    changed = true;
  }
  s = ty_cu_patch_tables(e, &changed);
  if (s) return s;
  const bool fault = e->fault_kind && e->runs == e->fault_run;
  /* Over several ranks, the first run is queued eagerly: NCCL connects its
   * peers on a communicator's first collectives (host work that has no
   * place in a stream capture); later runs capture it and replay. */
  const bool nccl_first = e->world > 1 && !e->collectives_ran;
  const bool use_graph = d->options.graphs && !e->profile && !e->sync_each && !fault &&
                         !nccl_first;
  if (fault) s = ty_cu_fault_inject(e);
  if (!s && use_graph && e->world > 1) {
    bool capture = changed || !e->seg_exec;
    s = ty_cu_run_segments(e, capture);
    if (!s) {
      if (capture) e->captures++;
      else e->replays++;
    }
  } else if (!s && use_graph) {
    if (changed || !e->cu_exec) {
      ty_cu_graph_release(e);
      CUresult r = api->cuStreamBeginCapture(d->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
      if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "cuStreamBeginCapture", r);
      s = ty_cu_enqueue(e);
      CUgraph graph = NULL;
      r = api->cuStreamEndCapture(d->stream, &graph);
      if (!s && r != CUDA_SUCCESS) s = ty_cu_driver_error(d, "cuStreamEndCapture", r);
      if (s) {
        if (graph) api->cuGraphDestroy(graph);
        return s;
      }
      e->cu_graph = graph;
      r = api->cuGraphInstantiate(&e->cu_exec, graph, 0);
      if (r != CUDA_SUCCESS) {
        e->cu_exec = NULL;
        ty_cu_graph_release(e);
        return ty_cu_driver_error(d, "cuGraphInstantiate", r);
      }
      e->captures++;
    } else {
      e->replays++;
    }
    CUresult r = api->cuGraphLaunch(e->cu_exec, d->stream);
    if (r != CUDA_SUCCESS) s = ty_cu_driver_error(d, "cuGraphLaunch", r);
  } else if (!s) {
    s = ty_cu_enqueue(e);
  }
  /* The error flag, read after everything above (stream order). */
  CUresult r = CUDA_SUCCESS;
  if (!s) r = api->cuMemcpyDtoHAsync(e->err_host, e->err, TY_CU_ERR_BYTES, d->stream);
  CUresult sync = api->cuStreamSynchronize(d->stream);
  if (s) return s;
  if (r == CUDA_SUCCESS) r = sync;
  if (r != CUDA_SUCCESS) {
    char what[160];
    snprintf(what, sizeof(what), "running graph %.12s (%u nodes, %u commands%s%s)",
             e->graph->hash_hex, e->graph->graph.node_count, e->cmd_count,
             use_graph ? ", as a CUDA graph" : "",
             e->sync_each ? "" : "; TRAINYARD_CUDA_SYNC=1 names the kernel");
    return ty_cu_driver_error(d, what, r);
  }
  if (e->world > 1) e->collectives_ran = true;
  if (e->profile) ty_cu_profile_collect(e);
  if (e->err_host[0] == 0) return NULL;
  s = ty_cu_data_error(e, e->err_host);
  api->cuMemsetD8Async(e->err, 0, TY_CU_ERR_BYTES, d->stream);
  api->cuStreamSynchronize(d->stream);
  memset(e->err_host, 0, TY_CU_ERR_BYTES);
  return s;
}

/* ---- report ---- */

ty_abi_status_t ty_cu_executable_report(ty_abi_executable_t *e, char *dst, uint64_t capacity,
                                        uint64_t *out_size) {
  uint32_t kernels = 0, gemms = 0, moves = 0, reduces = 0;
  uint32_t fz[4] = {0, 0, 0, 0}, folded = 0; /* heads per ty_cu_fuse_kind_t; nodes folded */
  uint32_t bgrads = 0;                         /* GEMMs writing a bias gradient */
  uint32_t in_place = 0;                      /* loss gradients in the logits' bytes */
  for (uint32_t n = 0; n < e->graph->graph.node_count; ++n) {
    if (e->fuse && e->fuse[n].kind < 4 &&
        (e->fuse[n].kind != TY_CU_FUSE_GEMM || e->fuse[n].out != UINT32_MAX)) {
      fz[e->fuse[n].kind]++;
    }
    if (e->fuse && e->fuse[n].kind == TY_CU_FUSE_GEMM && e->fuse[n].bgrad != UINT32_MAX) {
      bgrads++;
    }
    if (e->fused && e->fused[n]) folded++;
    if (e->plan.in_place && e->plan.in_place[n]) in_place++;
  }
  for (uint32_t i = 0; i < e->cmd_count; ++i) {
    if (e->cmds[i].kind == TY_CU_CMD_KERNEL) kernels++;
    else if (e->cmds[i].kind == TY_CU_CMD_GEMM) gemms++;
    else if (e->cmds[i].kind == TY_CU_CMD_ALL_REDUCE) reduces++;
    else moves++;
  }
  const ty_cu_slot_t *s = e->device->slot;
  char text[1536];
  int n = snprintf(
      text, sizeof(text),
      "cuda executable on %s (%s, sm_%d%d, %d SMs)\n"
      "  graph %.12s: %u nodes -> %u commands (%u kernels, %u cuBLASLt matmuls, %u "
      "memsets/copies, %u NCCL all-reduces over %u rank(s))\n"
      "  fused: %u nodes done by others' commands (%u matmul+cast/add, %u norm+cast, %u "
      "norm-backward chains, %u bias gradients in matmuls, the rest multi-tensor optimizer "
      "launches); %u loss gradient%s in place\n"
      "  device memory: activation arena %.1f MiB (%.1f MiB without reuse), scratch %.1f MiB, "
      "constants+tables %.1f MiB; this handle holds %.1f MiB, peak %.1f MiB\n"
      "  runs %llu: CUDA graph %s (captured %llu time(s), replayed %llu)%s\n",
      e->device->label, s->info.name, s->cc_major, s->cc_minor, s->sm_count, e->graph->hash_hex,
      e->graph->graph.node_count, e->cmd_count, kernels, gemms, moves, reduces,
      e->world ? e->world : 1, folded, fz[TY_CU_FUSE_GEMM], fz[TY_CU_FUSE_NORM],
      fz[TY_CU_FUSE_NORM_BWD], bgrads, in_place, in_place == 1 ? "" : "s",
      (double)e->arena_bytes / 1048576.0,
      (double)e->plan.naive_bytes / 1048576.0,
      (double)e->scratch_alloc / 1048576.0,
      (double)(e->const_bytes + e->aux_bytes_dev) / 1048576.0,
      (double)e->device->allocated / 1048576.0, (double)e->device->peak_allocated / 1048576.0,
      (unsigned long long)e->runs, e->device->options.graphs ? "on" : "off (graphs=0)",
      (unsigned long long)e->captures, (unsigned long long)e->replays,
      e->profile ? "; profiling (runs not captured)" : "");
  *out_size = (uint64_t)n + 1;
  if (dst && capacity >= *out_size) memcpy(dst, text, *out_size);
  return NULL;
}
