/* The cuda compiler: graph_supports and graph_compile.
 *
 * Compile deep-copies the graph (backends/common/abi_graph.h), plans memory
 * (backends/common/memory_plan.h: every intermediate at an offset of ONE
 * arena allocation; optimizer and KV-cache updates in place where the plan
 * allows; reshapes as views), uploads constants and tables, and turns each
 * node into commands (cuda_exec.h, emitted by cuda_emit.c) through the op
 * table of cuda_ops*.c. Execution is cuda_execute.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_executable.h"
#include "cuda_gemm.h"
#include "cuda_ops.h"
#include "trainyard/dtype.h"

/* ---- supports ---- */

ty_abi_status_t ty_cu_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *g,
                                     ty_abi_node_support_t *out) {
  (void)device;
  ty_dev_supports(g, ty_cu_ops, "cuda", ty_cu_op_check, out);
  return NULL;
}

/* ---- compile ---- */

void ty_cu_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_abi_device_t *d = e->device;
  ty_cu_enter(d);
  d->api->cuStreamSynchronize(d->stream);
  if (e->profile) {
    ty_host_profile_report_and_free(e->profile, d->label, &e->core.graph->graph, NULL);
    e->profile = NULL;
  }
  if (e->events) {
    for (uint32_t i = 0; i <= e->core.graph->graph.node_count; ++i) {
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
  ty_cu_free(d, e->err, TY_DEVICE_ERROR_BYTES);
  ty_cu_free(d, e->core.fallback, e->fallback_alloc);
  if (e->err_host) e->api->cuMemFreeHost(e->err_host);
  ty_dev_exec_free(&e->core);
  free(e->cmds);
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
  ty_cu_weights_free(e);
  free(e);
}

/* Device memory of `bytes` holding `data` when given (synchronous). */
ty_abi_status_t ty_cu_upload(ty_abi_executable_t *e, uint64_t bytes, const void *data,
                                    const char *what, CUdeviceptr *out) {
  ty_abi_device_t *d = e->device;
  char text[160];
  snprintf(text, sizeof(text), "the %s of graph %.12s", what, e->core.graph->hash_hex);
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
 * same weight (graph/ir/autodiff.h, recast_states) is padded the same way, so
 * the input gradient keeps the aligned k. */
static void ty_cu_plan_padded_head(ty_abi_executable_t *e, uint32_t logits, uint32_t mm,
                                   int64_t padded) {
  ty_owned_graph_t *og = e->core.graph;
  const ty_abi_graph_t *g = &og->graph;
  const ty_abi_node_t *node = &g->nodes[mm];
  if (node->input_count > 2 && node->inputs[2] != UINT32_MAX) return; /* a bias */
  if (!ty_desc_node_attr_int(node, "trans_b", 0) || ty_desc_node_attr_int(node, "trans_a", 0)) {
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
    og->value_bytes[v] = (uint64_t)padded * (uint64_t)wv->dims[1] * ty_desc_dtype_size(wv->dtype);
  }
  e->zero_cols[logits] = true;
}

static ty_abi_status_t ty_cu_plan_padding(ty_abi_executable_t *e) {
  ty_owned_graph_t *og = e->core.graph;
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nv = g->value_count ? g->value_count : 1;
  e->row_stride = calloc(nv, sizeof(int64_t));
  e->zero_rows = calloc(nv, sizeof(int64_t));
  e->zero_cols = calloc(nv, sizeof(bool));
  if (!e->row_stride || !e->zero_rows || !e->zero_cols) {
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  const char *env = getenv("TRAINYARD_CUDA_PAD_ROWS");
  if (env && !strcmp(env, "0")) return NULL;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    const ty_abi_value_t *val = &g->values[v];
    const size_t es = ty_desc_dtype_size(val->dtype);
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
    const uint64_t rows = (uint64_t)(ty_desc_value_elements(val) / n);
    e->row_stride[v] = padded;
    og->value_bytes[v] = rows * (uint64_t)padded * es;
    ty_cu_plan_padded_head(e, v, p, padded);
    for (uint32_t k = 0; k < view_count; ++k) {
      const ty_abi_value_t *y = &g->values[views[k]];
      e->row_stride[views[k]] = padded;
      og->value_bytes[views[k]] =
          (uint64_t)(ty_desc_value_elements(y) / n) * (uint64_t)padded * es;
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
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "%s: compile option %s=%s: expected 0 or 1", device->label, k, v);
      }
      *out_deterministic = v[0] == '1';
      continue;
    }
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: unknown compile option '%s' (the cuda backend takes "
                       "deterministic=0|1 and ignores debug.* keys; device options go in the "
                       "URI, e.g. cuda:0?graphs=0)",
                       device->label, k);
  }
  return NULL;
}

bool ty_cu_exec_deterministic(const ty_cu_exec_t *e) { return e->deterministic; }


/* Every node's first command (for TRAINYARD_CUDA_SYNC's messages and the
 * profile); a node fused into another's commands builds nothing itself. */
static bool ty_cu_node_visit(ty_cu_build_t *b, uint32_t n) {
  ty_cu_exec_t *e = b->exec;
  e->first_cmd[n] = e->cmd_count;
  if (e->fused[n]) return false; /* done by another node's commands (cuda_fuse.h) */
  if (e->wcopy_role && e->wcopy_role[n] == 2) return false; /* reads its weight's copy */
  b->hint = e->fuse[n].kind != TY_CU_FUSE_NONE ? &e->fuse[n] : NULL;
  return true;
}

/* The zero rows of a padded LM-head weight (ty_cu_plan_padded_head): the
 * arena's bytes there belonged to other values before. */
static void ty_cu_node_built(ty_cu_build_t *b) {
  ty_cu_exec_t *e = b->exec;
  const uint32_t out0 = b->node->output_count ? b->node->outputs[0] : UINT32_MAX;
  if (out0 != UINT32_MAX && e->zero_rows[out0]) {
    const ty_abi_value_t *w = &b->g->values[out0];
    const uint64_t row = (uint64_t)w->dims[1] * ty_desc_dtype_size(w->dtype);
    ty_cu_fill(b, ty_dev_ref_at(ty_dev_out(b, 0), (uint64_t)w->dims[0] * row),
               (uint64_t)(e->zero_rows[out0] - w->dims[0]) * row);
  }
  /* The cast that makes a weight copy runs only when the copy is stale
   * (cuda_weights.c). */
  if (e->wcopy_role && e->wcopy_role[b->n] == 1) {
    for (uint32_t i = e->first_cmd[b->n]; i < e->cmd_count; ++i) e->cmds[i].refresh = true;
  }
}

/* Programmatic dependent launch (on by default on sm_90 and later;
 * TRAINYARD_CUDA_PDL=0 turns it off): every kernel command that directly
 * follows another kernel command is launched as its programmatic dependent
 * (cuda_execute.c), so its launch overlaps the end of the one before;
 * every kernel waits for its predecessor first (ty_pdl_enter,
 * kernels/common.cuh), so results are the same bits. The first command,
 * and one after a cuBLASLt matmul, a fill, a copy or a collective,
 * launches as usual. With the few-row GEMV path (every launch of a decode
 * step then a kernel of ours) it took one GPT-2 124M stream from 1,095 to
 * 1,124 tok/s on an H100 (docs/performance.md). */
static bool ty_cu_pdl_enabled(const ty_abi_executable_t *e) {
  const char *env = getenv("TRAINYARD_CUDA_PDL");
  const ty_cu_slot_t *slot = e->device->slot;
  return (!env || strcmp(env, "0") != 0) && slot->cc_major >= 9;
}

/* The launch settings read from the environment, refused by name when
 * they hold a value they do not take (a typo must not pass silently as
 * the default). */
static ty_abi_status_t ty_cu_env_check(const ty_abi_device_t *device) {
  const char *pdl = getenv("TRAINYARD_CUDA_PDL");
  if (pdl && pdl[0] && strcmp(pdl, "0") != 0 && strcmp(pdl, "1") != 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "%s: TRAINYARD_CUDA_PDL='%s' is not 0 or 1", device->label, pdl);
  }
  const char *gemv = ty_cu_gemv_bad_setting();
  if (gemv) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "%s: TRAINYARD_CUDA_GEMV='%s' is not 'group', 'all', 'nk', '1' or '0'",
                           device->label, gemv);
  }
  const char *copies = ty_cu_weight_copies_bad_setting();
  if (copies) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "%s: TRAINYARD_CUDA_WEIGHT_COPIES='%s' is not 0 or 1", device->label,
                           copies);
  }
  return NULL;
}

/* The refresh commands of the weight copies run on their own, before the
 * rest (cuda_weights.c): never dependents, and never counted as the
 * command before another. */
static void ty_cu_mark_pdl(ty_abi_executable_t *e) {
  const bool on = ty_cu_pdl_enabled(e);
  const ty_cu_cmd_t *prev = NULL;
  for (uint32_t i = 0; i < e->cmd_count; ++i) {
    ty_cu_cmd_t *c = &e->cmds[i];
    if (c->refresh) {
      c->pdl = false;
      continue;
    }
    c->pdl = on && prev && c->kind == TY_CU_CMD_KERNEL && prev->kind == TY_CU_CMD_KERNEL;
    prev = c;
  }
}

/* One compile; with `copies` false the weight copies are not planned
 * (cuda_fuse.h ty_cu_weight_copy_plan). */
static ty_abi_status_t ty_cu_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                     bool copies, ty_abi_executable_t **out_executable,
                                     uint32_t *out_copies) {
  *out_executable = NULL;
  *out_copies = 0;
  bool deterministic = false;
  ty_abi_status_t s = ty_cu_compile_options(device, args, &deterministic);
  if (s) return s;
  s = ty_cu_env_check(device);
  if (s) return s;
  s = ty_cu_enter(device);
  if (s) return s;
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
  e->device = device;
  e->deterministic = deterministic;
  e->api = device->api;
  e->core.label = device->label;
  e->core.align = TY_CU_ALIGN;
  e->core.graph = ty_owned_graph_copy(args->graph);
  s = e->core.graph ? ty_cu_plan_padding(e) : NULL;
  if (s) {
    ty_cu_executable_destroy(e);
    return s;
  }
  /* Fusions first: the plan places a fused node's outputs where its
   * command runs (cuda_fuse.h). */
  const uint32_t nn = e->core.graph ? e->core.graph->graph.node_count : 0;
  uint32_t *run_at = e->core.graph ? malloc(((size_t)nn + 1) * sizeof(uint32_t)) : NULL;
  int32_t *reuse = e->core.graph ? malloc(((size_t)nn + 1) * sizeof(int32_t)) : NULL;
  e->fuse = e->core.graph ? calloc((size_t)nn + 1, sizeof(ty_cu_fuse_t)) : NULL;
  e->extra_read = e->core.graph ? malloc(((size_t)nn + 1) * sizeof(uint32_t)) : NULL;
  bool *external = e->core.graph
                       ? calloc((size_t)e->core.graph->graph.value_count + 1, sizeof(bool))
                       : NULL;
  if (run_at && reuse && e->fuse && e->extra_read && external) {
    ty_cu_fuse_plan(e->core.graph, e->row_stride, ty_cu_fuse_enabled(),
                    !deterministic && ty_cu_gemv_on(), e->fuse, run_at);
    ty_cu_xent_plan(e->core.graph, e->row_stride, run_at, ty_cu_loss_in_place_enabled(), reuse,
                    e->extra_read);
    s = ty_cu_weights_plan(e, run_at, copies, external);
    *out_copies = e->wcopy_count;
    if (s) {
      free(run_at);
      free(reuse);
      free(external);
      ty_cu_executable_destroy(e);
      return s;
    }
  }
  const ty_memory_plan_opts_t plan_opts = {
      .run_at = run_at, .reuse_input = reuse, .extra_read = e->extra_read, .external = external};
  if (!e->core.graph || !run_at || !reuse || !e->fuse || !e->extra_read || !external ||
      ty_memory_plan_build_opts(e->core.graph, TY_CU_ALIGN, &plan_opts, &e->core.plan) != TY_CODE_OK) {
    free(run_at);
    free(reuse);
    free(external);
    ty_cu_executable_destroy(e);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling", device->label);
  }
  free(external);
  s = ty_dev_exec_layout(&e->core);
  if (s) {
    free(run_at);
    free(reuse);
    ty_cu_executable_destroy(e);
    return s;
  }
  const ty_abi_graph_t *g = ty_dev_exec_graph(&e->core);
  e->first_cmd = calloc((size_t)g->node_count + 1, sizeof(uint32_t));
  e->fused = calloc((size_t)g->node_count + 1, sizeof(bool));
  if (e->fused) {
    for (uint32_t n = 0; n < nn; ++n) e->fused[n] = run_at[n] != n;
  }
  free(run_at);
  free(reuse);
  if (!e->first_cmd || !e->fused) {
    ty_cu_executable_destroy(e);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory compiling", device->label);
  }
  const char *sync_env = getenv("TRAINYARD_CUDA_SYNC");
  e->sync_each = sync_env && sync_env[0] && strcmp(sync_env, "0") != 0;
  ty_cu_fault_parse(e);
  /* Commands. */
  ty_cu_build_t b = {
      .core = &e->core,
      .device = device,
      .exec = e,
      .g = g,
      .deterministic = deterministic,
      .move = &ty_cu_movers, .arg = ty_cu_arg};
  const ty_dev_node_hooks_t node_hooks = {ty_cu_node_visit, ty_cu_node_built};
  ty_dev_build_nodes(&b, ty_cu_ops, &node_hooks);
  e->first_cmd[g->node_count] = e->cmd_count;
  s = b.status;
  if (!s) ty_cu_mark_pdl(e);
  /* Device memory (the weight copies last: compile gives them up first,
   * see ty_cu_graph_compile). */
  if (!s && e->core.plan.arena_bytes) {
    s = ty_cu_upload(e, e->core.plan.arena_bytes, NULL, "activation arena", &e->arena);
    if (!s) e->arena_bytes = e->core.plan.arena_bytes;
  }
  const uint64_t const_bytes = e->core.const_bytes;
  if (!s && const_bytes) {
    unsigned char *host = calloc(1, (size_t)const_bytes);
    if (!host) {
      s = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
    } else {
      for (uint32_t v = 0; v < g->value_count; ++v) {
        if (e->core.plan.storage[v].kind == TY_STORAGE_CONSTANT && e->core.graph->value_bytes[v]) {
          memcpy(host + e->core.const_offset[v], g->values[v].const_data, e->core.graph->value_bytes[v]);
        }
      }
      s = ty_cu_upload(e, const_bytes, host, "constants", &e->constants);
      if (!s) e->const_bytes = const_bytes;
      free(host);
    }
  }
  if (!s && e->core.aux_bytes) {
    s = ty_cu_upload(e, e->core.aux_bytes, e->core.aux_host, "tables", &e->aux);
    if (!s) e->aux_bytes_dev = e->core.aux_bytes;
  }
  if (!s && e->table_count) {
    e->table_host = calloc(e->table_count, sizeof(uint64_t));
    if (!e->table_host) {
      s = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
    } else {
      s = ty_cu_upload(e, (uint64_t)e->table_count * 8u, NULL, "address tables", &e->tables);
    }
  }
  if (!s && e->core.scratch_bytes) {
    s = ty_cu_upload(e, e->core.scratch_bytes, NULL, "scratch", &e->scratch);
    if (!s) e->scratch_alloc = e->core.scratch_bytes;
  }
  if (!s) {
    unsigned char zeros[TY_DEVICE_ERROR_BYTES] = {0};
    s = ty_cu_upload(e, TY_DEVICE_ERROR_BYTES, zeros, "error flag", &e->err);
  }
  if (!s) s = ty_cu_weights_alloc(e);
  if (!s) {
    CUresult r = e->api->cuMemAllocHost((void **)&e->err_host, TY_DEVICE_ERROR_BYTES);
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
  free(e->core.aux_host);
  e->core.aux_host = NULL;
  /* Device pointers are the core's location handles, offsets added. */
  e->core.arena = e->arena;
  e->core.constants = e->constants;
  e->core.base[TY_DEV_REF_SCRATCH] = e->scratch;
  e->core.base[TY_DEV_REF_AUX] = e->aux;
  e->core.base[TY_DEV_REF_ERR] = e->err;
  e->core.base[TY_DEV_REF_TABLE] = e->tables;
  *out_executable = e;
  return NULL;
}

/* The weight copies are a speed-up that costs 2 bytes a weight: when an
 * executable with them does not fit the device (or its memory_limit), it is
 * compiled again without them, and its report says so. */
ty_abi_status_t ty_cu_graph_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                    ty_abi_executable_t **out_executable) {
  ty_abi_executable_t *e = NULL;
  uint32_t copies = 0;
  ty_abi_status_t s = ty_cu_compile(device, args, true, &e, &copies);
  const ty_host_api_t *host = device->backend->base.host;
  if (s && copies && host->status_code(s) == TY_CODE_RESOURCE_EXHAUSTED) {
    /* Without them; if that does not fit either, its error is the one
     * that says what does not fit. */
    host->status_free(s);
    s = ty_cu_compile(device, args, false, &e, &copies);
    if (!s) e->wcopies_dropped = true;
  }
  *out_executable = s ? NULL : e;
  return s;
}

const ty_abi_graph_t *ty_cu_executable_graph(ty_abi_executable_t *e) {
  return ty_dev_exec_graph(&e->core);
}

/* What compile allocated for the executable's life: the activation arena
 * (its plan), and beside it the per-node kernel scratch (the chunked loss's
 * logits, reduction partials), constants, tables and the bf16 weight
 * copies (counted with the arena). */
ty_abi_status_t ty_cu_executable_memory(ty_abi_executable_t *e, ty_abi_executable_memory_t *out) {
  out->arena_bytes = e->arena_bytes + e->const_bytes + e->aux_bytes_dev +
                     (uint64_t)e->table_count * 8u + e->wcopy_bytes;
  out->scratch_bytes = e->scratch_alloc;
  out->host_bytes = 0;
  return NULL;
}

ty_abi_device_t *ty_cu_exec_device(const ty_cu_exec_t *e) { return e->device; }
