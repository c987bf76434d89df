/* The bf16 weight copies that the optimizer keeps (cuda_fuse.h,
 * ty_cu_weight_copy_plan, says which weights and why).
 *
 * A copy lives in the executable's own memory from one run to the next, so
 * it is only right while its weight has not changed since the run that
 * wrote it. The weight changes by this executable's AdamW update (which
 * writes the copy too) or by anything else that writes the weight's
 * buffer: the host's buffer_write (a checkpoint load, a rebind), a
 * buffer_copy, a collective or receive into it, another executable's run.
 * Every such write through the plugin gives the buffer a new generation
 * (ty_abi_buffer_s.gen), and this executable's own run gives each buffer
 * it wrote one too. After a run the executable records, per copy, the
 * weight's buffer, that buffer's generation and the weight's address;
 * before the next run, a copy whose weight is bound elsewhere, or whose
 * buffer has another generation, is stale, and the run first makes every
 * copy again with its weight's first cast kernel (the commands flagged
 * `refresh`, outside the captured CUDA graph). A weight in pinned host
 * memory is never trusted (the host may write it directly). A run that
 * fails leaves the copies stale. */
#include <stdlib.h>
#include <string.h>

#include "cuda_executable.h"
#include "cuda_fuse.h"

ty_abi_status_t ty_cu_weights_plan(ty_abi_executable_t *e, const uint32_t *run_at, bool allowed,
                                   bool *external) {
  const ty_owned_graph_t *og = e->core.graph;
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nv = g->value_count ? g->value_count : 1, nn = g->node_count ? g->node_count : 1;
  e->wcopy_of = malloc(nv * sizeof(uint32_t));
  e->wcopy_role = calloc(nn, sizeof(uint8_t));
  e->written = malloc(nv * sizeof(uint32_t));
  uint32_t *params = malloc(nv * sizeof(uint32_t)), *values = malloc(nv * sizeof(uint32_t));
  if (!e->wcopy_of || !e->wcopy_role || !e->written || !params || !values) {
    free(params);
    free(values);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", e->device->label);
  }
  const uint32_t count = ty_cu_weight_copy_plan(og, e->fuse, run_at,
                                                allowed && ty_cu_weight_copies_enabled(g->levers),
                                                e->wcopy_of, e->wcopy_role, params, values);
  e->wcopies = count ? calloc(count, sizeof(ty_cu_wcopy_t)) : NULL;
  if (count && !e->wcopies) {
    free(params);
    free(values);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", e->device->label);
  }
  for (uint32_t k = 0; k < count; ++k) {
    e->wcopies[k].param = params[k];
    e->wcopies[k].value = values[k];
  }
  e->wcopy_count = count;
  free(params);
  free(values);
  for (uint32_t v = 0; v < g->value_count; ++v) external[v] = e->wcopy_of[v] != UINT32_MAX;
  /* What a run writes: the states it updates, and its outputs. */
  uint8_t *mark = calloc(nv, 1);
  if (!mark) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", e->device->label);
  for (uint32_t u = 0; u < g->update_count; ++u) mark[g->updates[u].state] = 1;
  for (uint32_t v = 0; v < g->value_count; ++v) {
    if (mark[v] || (g->values[v].flags & TY_VALUE_FLAG_OUTPUT)) e->written[e->written_count++] = v;
  }
  free(mark);
  return NULL;
}

ty_abi_status_t ty_cu_weights_alloc(ty_abi_executable_t *e) {
  uint64_t at = 0;
  for (uint32_t k = 0; k < e->wcopy_count; ++k) {
    ty_cu_wcopy_t *c = &e->wcopies[k];
    c->offset = at;
    c->bytes = e->core.graph->value_bytes[c->value];
    at += ty_cu_round_up(c->bytes);
  }
  if (!at) return NULL;
  if (e->fault_kind == TY_CU_FAULT_COPIES_OOM) {
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                           "%s: out of device memory for the bf16 weight copies (test hook "
                           "TRAINYARD_CUDA_FAULT=copies-oom)",
                           e->device->label);
  }
  ty_abi_status_t s = ty_cu_upload(e, at, NULL, "bf16 weight copies", &e->wcopy_mem);
  if (!s) e->wcopy_bytes = at;
  return s;
}

ty_dev_loc_t ty_cu_weights_place(void *user, uint32_t v) {
  const ty_abi_executable_t *e = user;
  const uint32_t k = e->wcopy_of ? e->wcopy_of[v] : UINT32_MAX;
  if (k >= e->wcopy_count) return (ty_dev_loc_t){0, 0};
  return (ty_dev_loc_t){e->wcopy_mem, e->wcopies[k].offset};
}

bool ty_cu_weights_stale(const ty_abi_executable_t *e) {
  bool stale = !e->wcopies_valid;
  for (uint32_t k = 0; k < e->wcopy_count && !stale; ++k) {
    const ty_cu_wcopy_t *c = &e->wcopies[k];
    const ty_abi_buffer_t *b = e->core.bound[c->param] ? e->core.buffer_of[c->param] : NULL;
    const ty_dev_loc_t loc = e->core.loc[c->param];
    stale = !b || b->host || b != c->buffer || b->gen != c->gen ||
            loc.base + loc.offset != c->address;
  }
  return e->wcopy_count && stale;
}

void ty_cu_weights_ran(ty_abi_executable_t *e, bool ok) {
  for (uint32_t i = 0; i < e->written_count; ++i) {
    const uint32_t v = e->written[i];
    if (e->core.bound[v]) ty_cu_buffer_written(e->core.buffer_of[v]);
  }
  e->wcopies_valid = ok && e->wcopy_count;
  for (uint32_t k = 0; ok && k < e->wcopy_count; ++k) {
    ty_cu_wcopy_t *c = &e->wcopies[k];
    const ty_dev_loc_t loc = e->core.loc[c->param];
    c->buffer = e->core.bound[c->param] ? e->core.buffer_of[c->param] : NULL;
    c->gen = c->buffer ? c->buffer->gen : 0;
    c->address = loc.base + loc.offset;
  }
}

void ty_cu_weights_free(ty_abi_executable_t *e) {
  ty_cu_free(e->device, e->wcopy_mem, e->wcopy_bytes);
  free(e->wcopies);
  free(e->wcopy_of);
  free(e->wcopy_role);
  free(e->written);
}
