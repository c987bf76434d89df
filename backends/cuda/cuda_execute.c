/* The cuda executor: executable_execute and executable_report.
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

#include "cuda_executable.h"
#include "cuda_gemm.h"
#include "trainyard/dtype.h"

/* ---- execute ---- */

static void ty_cu_hook_buffer(void *user, ty_abi_buffer_t *buffer, uint64_t *out_base,
                              uint64_t *out_size) {
  (void)user;
  *out_base = buffer->ptr;
  *out_size = buffer->size;
}

/* The unbound outputs' storage (the core asks at the first run needing it). */
static ty_abi_status_t ty_cu_hook_alloc(void *user, uint64_t bytes, uint64_t *out_base) {
  ty_abi_executable_t *e = user;
  CUdeviceptr p = 0;
  ty_abi_status_t s = ty_cu_upload(e, bytes, NULL, "unbound outputs", &p);
  if (s) return s;
  e->fallback_alloc = bytes ? bytes : 1;
  *out_base = p;
  return NULL;
}

static ty_abi_status_t ty_cu_resolve(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  const ty_dev_hooks_t hooks = {.user = e,
                                .buffer = ty_cu_hook_buffer,
                                .alloc = ty_cu_hook_alloc,
                                .external = ty_cu_weights_place};
  return ty_dev_exec_resolve(&e->core, args, &hooks);
}

CUdeviceptr ty_cu_ref_address(const ty_abi_executable_t *e, ty_dev_ref_t r) {
  const ty_dev_loc_t loc = ty_dev_ref_loc(&e->core, r);
  return loc.base + loc.offset; /* NONE: 0 */
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

/* An all_reduce command: a copy at world 1; else queued on the device's
 * communicator of its group, in one NCCL group with the all_reduce
 * commands right after it on the same communicator (the gradients of a
 * train step: one launch, not ~150). Commands on different communicators
 * are never in one NCCL group: each communicator's batch is closed before
 * the next one's starts (ty_nccl_queue keeps one open group per comm).
 * An all_gather / reduce_scatter command (parts > 1) runs on its group's
 * communicator too, alone in its NCCL group. */
static ty_abi_status_t ty_cu_all_reduce_run(ty_abi_executable_t *e, ty_cu_cmd_t *c) {
  CUdeviceptr dst = ty_cu_ref_address(e, c->dst), src = ty_cu_ref_address(e, c->src);
  uint64_t bytes = c->size * ty_dtype_size(c->dtype);
  const bool reduce = c->coll == TY_CU_COLL_ALL_REDUCE;
  if (!reduce && e->world <= 1) {
    /* parts > 1 (parts = 1 builds a copy): the session refuses such a
     * graph first; an executable run directly at world 1 lands here. */
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                       "%s: node %u (%s over %u parts of group '%s') runs in a one-process run: "
                       "run it over %u ranks, or build it with parts=1",
                       e->device->label, c->node, e->core.graph->graph.nodes[c->node].op,
                       c->parts, c->group ? c->group : "cp", c->parts);
  }
  if (e->world <= 1) {
    if (!dst || !src || dst == src) return NULL;
    CUresult r = e->api->cuMemcpyDtoDAsync(dst, src, (size_t)bytes, e->device->stream);
    return r == CUDA_SUCCESS ? NULL : ty_cu_cmd_error(e, c, "cuMemcpyDtoDAsync", r);
  }
  const char *group = c->group ? c->group : reduce ? "world" : "cp";
  const char *op = e->core.graph->graph.nodes[c->node].op;
  ty_abi_comm_t *comm = ty_cu_device_comm(e->device, group);
  if (!comm && !reduce && c->parts == e->world) {
    /* A gather's group as large as the run is the world, and in world-rank
     * order (the host's groups are splits keyed by world rank,
     * distributed/dist_group.c): the world's communicator serves it.
     * `train --cp N` on N ranks makes only that one. */
    ty_abi_comm_t *world = ty_cu_device_comm(e->device, "world");
    if (world && ty_cu_comm_size(world) == e->world) comm = world;
  }
  if (!comm) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                       "%s: node %u (%s over group '%s') runs in a run of %u ranks, and no "
                       "communicator of group '%s' was made on this device: make it first "
                       "(comm_create with group '%s', ABI 1.7)",
                       e->device->label, c->node, op, group, e->world, group, group);
  }
  if (!strcmp(group, "world") && ty_cu_comm_size(comm) != e->world) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                       "%s: node %u (%s) runs over the world of %u ranks, and this device's "
                       "world communicator has %u",
                       e->device->label, c->node, op, e->world, ty_cu_comm_size(comm));
  }
  if (!reduce) {
    if (ty_cu_comm_size(comm) != c->parts) {
      return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                         "%s: node %u (%s) splits into %u parts, and this device's '%s' "
                         "communicator has %u ranks",
                         e->device->label, c->node, op, c->parts, group, ty_cu_comm_size(comm));
    }
    ty_abi_status_t st = ty_cu_comm_enqueue_gather(comm, c->coll == TY_CU_COLL_ALL_GATHER,
                                                   c->dtype, src, dst, c->size, op);
    if (!st) return NULL;
    const ty_host_api_t *host = e->device->backend->base.host;
    ty_abi_status_t named = ty_plugin_error(
        host->status_code(st), "%s (node %u, %s, %llu %s per rank, group %s)",
        host->status_message(st), c->node, op, (unsigned long long)c->size,
        ty_dtype_name(c->dtype), group);
    host->status_free(st);
    return named;
  }
  const ty_cu_cmd_t *next = c + 1 < e->cmds + e->cmd_count ? c + 1 : NULL;
  bool more = next && next->kind == TY_CU_CMD_ALL_REDUCE &&
              next->coll == TY_CU_COLL_ALL_REDUCE &&
              ty_cu_device_comm(e->device, next->group ? next->group : "world") == comm &&
              !e->sync_each && !e->events;
  ty_abi_status_t st =
      ty_cu_comm_enqueue_all_reduce(comm, c->dtype, c->reduce, src, dst, c->size, more, op);
  if (!st) return NULL;
  /* The node's details only on the error path (this runs ~150 times a step). */
  const ty_host_api_t *host = e->device->backend->base.host;
  ty_abi_status_t named = ty_plugin_error(
      host->status_code(st), "%s (node %u, '%s', %llu %s, group %s)", host->status_message(st),
      c->node, e->core.graph->graph.values[e->core.graph->graph.nodes[c->node].outputs[0]].name,
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
      if (c->pdl && !e->events && !e->sync_each) {
        /* A programmatic dependent of the kernel before it (ty_cu_mark_pdl);
         * not under profiling events or TRAINYARD_CUDA_SYNC, which put other
         * work between the two. */
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof(attr));
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig cfg = {.gridDimX = c->grid[0], .gridDimY = c->grid[1],
                              .gridDimZ = c->grid[2], .blockDimX = c->block[0],
                              .blockDimY = c->block[1], .blockDimZ = c->block[2],
                              .sharedMemBytes = c->shared_bytes, .hStream = stream,
                              .attrs = &attr, .numAttrs = 1};
        r = api->cuLaunchKernelEx(&cfg, c->function, NULL, extra);
      } else {
        r = api->cuLaunchKernel(c->function, c->grid[0], c->grid[1], c->grid[2], c->block[0],
                                c->block[1], c->block[2], c->shared_bytes, stream, NULL, extra);
      }
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

/* Queues the commands that make the weight copies (cuda_weights.c), on
 * their own and never captured: only runs that find a copy stale have them. */
static ty_abi_status_t ty_cu_enqueue_refresh(ty_abi_executable_t *e) {
  ty_abi_status_t s = NULL;
  for (uint32_t i = 0; i < e->cmd_count && !s; ++i) {
    if (!e->cmds[i].refresh) continue;
    s = ty_cu_cmd_run(e, &e->cmds[i]);
    if (!s && e->sync_each) {
      CUresult r = e->api->cuStreamSynchronize(e->device->stream);
      if (r != CUDA_SUCCESS) s = ty_cu_cmd_error(e, &e->cmds[i], "running", r);
    }
  }
  return s;
}

/* Queues commands [from, to) but the refresh ones, then, with `copies`,
 * the state-update copies. Profiling events (the whole run only) mark
 * every node's start. */
static ty_abi_status_t ty_cu_enqueue_range(ty_abi_executable_t *e, uint32_t from, uint32_t to,
                                           bool copies) {
  ty_abi_status_t s = NULL;
  const ty_abi_graph_t *g = &e->core.graph->graph;
  ty_cu_api_t *api = e->api;
  CUstream stream = e->device->stream;
  uint32_t node = 0;
  for (uint32_t i = from; i < to && !s; ++i) {
    if (e->cmds[i].refresh) continue;
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
  for (uint32_t u = 0; copies && u < e->core.plan.copy_count && !s; ++u) {
    const ty_abi_state_update_t *up = &e->core.plan.copies[u];
    uint64_t bytes = e->core.graph->value_bytes[up->state];
    const CUdeviceptr dst = ty_cu_ref_address(e, ty_dev_value(up->state));
    const CUdeviceptr src = ty_cu_ref_address(e, ty_dev_value(up->value));
    if (!bytes || dst == src) continue;
    CUresult r = api->cuMemcpyDtoDAsync(dst, src, (size_t)bytes, stream);
    if (r != CUDA_SUCCESS) {
      char what[200];
      snprintf(what, sizeof(what), "copying the update of state '%s'",
               e->core.graph->graph.values[up->state].name);
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
      return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of host memory",
                         e->device->label);
    }
  }
  uint32_t seg = 0, i = 0;
  for (;;) {
    uint32_t end = i;
    while (end < e->cmd_count && e->cmds[end].kind != TY_CU_CMD_ALL_REDUCE) ++end;
    const bool last = end == e->cmd_count;
    const bool empty = end == i && !(last && e->core.plan.copy_count);
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

void ty_cu_graph_release(ty_abi_executable_t *e) {
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

static void ty_cu_profile_collect(ty_abi_executable_t *e) {
  const ty_abi_graph_t *g = &e->core.graph->graph;
  for (uint32_t n = 0; n < g->node_count; ++n) {
    float ms = 0.0f;
    if (e->events[n] && e->events[n + 1] &&
        e->api->cuEventElapsedTime(&ms, e->events[n], e->events[n + 1]) == CUDA_SUCCESS) {
      ty_host_profile_add(e->profile, n, ms * 1e-3);
    }
  }
  ty_host_profile_end_run(e->profile);
}

/* The run; *started once its bindings are resolved (from then on it may
 * write them). */
static ty_abi_status_t ty_cu_execute_body(ty_abi_executable_t *e,
                                          const ty_abi_execute_args_t *args, bool *started) {
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
  const bool fault = e->fault_kind && e->fault_kind != TY_CU_FAULT_COPIES_OOM &&
                     e->runs == e->fault_run;
  /* Over several ranks, the first run is queued eagerly: NCCL connects its
   * peers on a communicator's first collectives (host work that has no
   * place in a stream capture); later runs capture it and replay. */
  const bool nccl_first = e->world > 1 && !e->collectives_ran;
  const bool use_graph = d->options.graphs && !e->profile && !e->sync_each && !fault &&
                         !nccl_first;
  *started = true;
  const bool stale = ty_cu_weights_stale(e);
  if (fault) s = ty_cu_fault_inject(e);
  /* Stale weight copies are made first, in stream order before the run. */
  if (!s && stale) {
    s = ty_cu_enqueue_refresh(e);
    if (!s) e->wcopy_refreshes++;
  }
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
  if (!s) r = api->cuMemcpyDtoHAsync(e->err_host, e->err, TY_DEVICE_ERROR_BYTES, d->stream);
  CUresult sync = api->cuStreamSynchronize(d->stream);
  if (s) return s;
  if (r == CUDA_SUCCESS) r = sync;
  if (r != CUDA_SUCCESS) {
    char what[160];
    snprintf(what, sizeof(what), "running graph %.12s (%u nodes, %u commands%s%s)",
             e->core.graph->hash_hex, e->core.graph->graph.node_count, e->cmd_count,
             use_graph ? ", as a CUDA graph" : "",
             e->sync_each ? "" : "; TRAINYARD_CUDA_SYNC=1 names the kernel");
    return ty_cu_driver_error(d, what, r);
  }
  if (e->world > 1) e->collectives_ran = true;
  if (e->profile) ty_cu_profile_collect(e);
  if (e->err_host[0] == 0) return NULL;
  s = ty_dev_data_error(&e->core, e->err_host);
  api->cuMemsetD8Async(e->err, 0, TY_DEVICE_ERROR_BYTES, d->stream);
  api->cuStreamSynchronize(d->stream);
  memset(e->err_host, 0, TY_DEVICE_ERROR_BYTES);
  return s;
}

ty_abi_status_t ty_cu_executable_execute(ty_abi_executable_t *e,
                                         const ty_abi_execute_args_t *args) {
  bool started = false;
  ty_abi_status_t s = ty_cu_execute_body(e, args, &started);
  if (started) ty_cu_weights_ran(e, s == NULL);
  return s;
}

/* ---- report ---- */

ty_abi_status_t ty_cu_executable_report(ty_abi_executable_t *e, char *dst, uint64_t capacity,
                                        uint64_t *out_size) {
  uint32_t kernels = 0, gemms = 0, moves = 0, reduces = 0;
  uint32_t fz[TY_CU_FUSE_KIND_COUNT] = {0}, folded = 0; /* heads per kind; nodes folded */
  uint32_t bgrads = 0;                         /* GEMMs writing a bias gradient */
  uint32_t in_place = 0;                      /* loss gradients in the logits' bytes */
  for (uint32_t n = 0; n < e->core.graph->graph.node_count; ++n) {
    if (e->fuse && e->fuse[n].kind < TY_CU_FUSE_KIND_COUNT &&
        (e->fuse[n].kind != TY_CU_FUSE_GEMM || e->fuse[n].out != UINT32_MAX)) {
      fz[e->fuse[n].kind]++;
    }
    if (e->fuse && e->fuse[n].kind == TY_CU_FUSE_GEMM && e->fuse[n].bgrad != UINT32_MAX) {
      bgrads++;
    }
    if (e->fused && e->fused[n]) folded++;
    if (e->core.plan.in_place && e->core.plan.in_place[n]) in_place++;
  }
  for (uint32_t i = 0; i < e->cmd_count; ++i) {
    if (e->cmds[i].kind == TY_CU_CMD_KERNEL) kernels++;
    else if (e->cmds[i].kind == TY_CU_CMD_GEMM) gemms++;
    else if (e->cmds[i].kind == TY_CU_CMD_ALL_REDUCE) reduces++;
    else moves++;
  }
  const ty_cu_slot_t *s = e->device->slot;
  char text[3072];
  int n = snprintf(
      text, sizeof(text),
      "cuda executable on %s (%s, sm_%d%d, %d SMs)\n"
      "  graph %.12s: %u nodes -> %u commands (%u kernels, %u cuBLASLt matmuls, %u "
      "memsets/copies, %u NCCL all-reduces over %u rank(s))\n"
      "  fused: %u nodes done by others' commands (%u matmul+cast/add, %u norm+cast, %u "
      "norm-backward chains, %u bias gradients in matmuls, the rest multi-tensor optimizer "
      "launches); %u loss gradient%s in place; %u slice launch%s for several; %u K/V "
      "write pair%s in one launch; %u matmul group%s in one launch; %u rope pair%s in one "
      "launch; %u clip%s folded into the optimizer\n"
      "  weights kept in bf16 by the optimizer: %u (%.1f MiB; made %llu time(s))%s\n"
      "  device memory: activation arena %.1f MiB (%.1f MiB without reuse), scratch %.1f MiB, "
      "constants+tables %.1f MiB; this handle holds %.1f MiB, peak %.1f MiB\n"
      "  runs %llu: CUDA graph %s (captured %llu time(s), replayed %llu)%s\n",
      e->device->label, s->base.info.name, s->cc_major, s->cc_minor, s->sm_count, e->core.graph->hash_hex,
      e->core.graph->graph.node_count, e->cmd_count, kernels, gemms, moves, reduces,
      e->world ? e->world : 1, folded, fz[TY_CU_FUSE_GEMM], fz[TY_CU_FUSE_NORM],
      fz[TY_CU_FUSE_NORM_BWD], bgrads, in_place, in_place == 1 ? "" : "s",
      fz[TY_CU_FUSE_SLICES], fz[TY_CU_FUSE_SLICES] == 1 ? "" : "es", fz[TY_CU_FUSE_KV_PAIR],
      fz[TY_CU_FUSE_KV_PAIR] == 1 ? "" : "s", fz[TY_CU_FUSE_GEMV_GROUP],
      fz[TY_CU_FUSE_GEMV_GROUP] == 1 ? "" : "s", fz[TY_CU_FUSE_ROPE_PAIR],
      fz[TY_CU_FUSE_ROPE_PAIR] == 1 ? "" : "s", fz[TY_CU_FUSE_CLIP_ADAMW],
      fz[TY_CU_FUSE_CLIP_ADAMW] == 1 ? "" : "s", e->wcopy_count,
      (double)e->wcopy_bytes / 1048576.0, (unsigned long long)e->wcopy_refreshes,
      e->wcopies_dropped ? "; left out: the executable did not fit with them" : "",
      (double)e->arena_bytes / 1048576.0,
      (double)e->core.plan.naive_bytes / 1048576.0,
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
