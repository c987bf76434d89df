/* The dataflow artifact: a compiled executable as one self-describing file
 * (docs/dataflow.md, "Artifact format"; docs/formats.md). Little-endian:
 *
 *   0   magic "TYDFART\0"
 *   8   u32 format version (3: 2 lacked the options word, 1 the world size)
 *   12  u32 offset of the hashed content (48)
 *   16  SHA-256 of bytes [48, end)
 *   48  u64 total size
 *   56  target: u32 tiles, u32 clock_mhz, u64 mem_per_tile,
 *       f64 bandwidth_gbs, u64 dram
 *   88  u32 kind (1 train step, 2 inference)
 *   92  u32 world size (ranks the step's all_reduce ops were compiled for)
 *   96  graph hash, 64 ASCII hex digits
 *   160 the rest: plugin version, cost-model constant, sections, tiles,
 *       estimates, hyperparameter names, fixed dropout probabilities, the
 *       slot table, the scheduled graph with its placement, u32 options
 *       (bit 0: compiled with deterministic=1); then "END!"
 *
 * Reading verifies magic, version and hash before it parses anything, and
 * bounds-checks every field after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainyard/abi_graph.h"
#include "trainyard/artifact_io.h"
#include "trainyard/plugin_status.h"
#include "dataflow_internal.h"

#define DF_MAGIC "TYDFART"
#define DF_FORMAT_VERSION 3u
#define DF_OPTION_DETERMINISTIC 1u
#define DF_END_MARKER 0x21444E45u /* "END!" */

/* ---- writing ---- */

/* The placement of each node, after its op name. */
static void df_put_node_extra(ty_art_writer_t *w, uint32_t node, void *user) {
  const df_plan_t *plan = user;
  ty_art_put_u8(w, plan->section[node]);
  ty_art_put_u16(w, plan->tile[node]);
}

ty_abi_status_t df_artifact_write(const ty_abi_executable_t *e, unsigned char **out_bytes,
                                  uint64_t *out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  const df_plan_t *plan = &e->plan;
  const ty_abi_graph_t *g = ty_host_executor_graph(e->executor);
  ty_art_writer_t w = {0};
  ty_art_begin(&w, DF_MAGIC, DF_FORMAT_VERSION);
  ty_art_put_u32(&w, plan->target.tiles);
  ty_art_put_u32(&w, plan->target.clock_mhz);
  ty_art_put_u64(&w, plan->target.mem_per_tile);
  ty_art_put_f64(&w, plan->target.bandwidth_gbs);
  ty_art_put_u64(&w, plan->target.dram_bytes);
  ty_art_put_u32(&w, plan->kind);
  ty_art_put_u32(&w, plan->world_size);
  char hash[64];
  memset(hash, '0', sizeof(hash));
  memcpy(hash, plan->graph_hash, strnlen(plan->graph_hash, 64));
  ty_art_put(&w, hash, 64);
  ty_art_put_str(&w, TY_DATAFLOW_VERSION);
  ty_art_put_u32(&w, DF_MACS_PER_TILE);
  for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
    const df_section_stats_t *sec = &plan->sections[s];
    ty_art_put_u32(&w, sec->nodes);
    ty_art_put_f64(&w, sec->flops);
    ty_art_put_u64(&w, sec->dram_bytes);
    ty_art_put_u64(&w, sec->compute_cycles);
    ty_art_put_u64(&w, sec->dram_cycles);
  }
  ty_art_put_u32(&w, plan->target.tiles);
  for (uint32_t k = 0; k < plan->target.tiles; ++k) {
    const df_tile_stats_t *t = &plan->tiles[k];
    ty_art_put_u32(&w, t->nodes);
    ty_art_put_f64(&w, t->flops);
    ty_art_put_u64(&w, t->state_bytes);
    ty_art_put_u64(&w, t->peak_activation_bytes);
    ty_art_put_u64(&w, t->spill_bytes);
  }
  ty_art_put_u64(&w, plan->cycles_per_step);
  ty_art_put_u64(&w, plan->tokens_per_step);
  uint32_t hyper = 0;
  for (uint32_t i = 0; i < plan->slot_count; ++i) hyper += plan->slots[i].role == DF_ROLE_HYPERPARAMETER;
  ty_art_put_u32(&w, hyper);
  for (uint32_t i = 0; i < plan->slot_count; ++i) {
    if (plan->slots[i].role == DF_ROLE_HYPERPARAMETER) ty_art_put_str(&w, plan->slots[i].name);
  }
  ty_art_put_u32(&w, plan->dropout_count);
  for (uint32_t i = 0; i < plan->dropout_count; ++i) ty_art_put_f64(&w, plan->dropout_p[i]);
  ty_art_put_u32(&w, plan->slot_count);
  for (uint32_t i = 0; i < plan->slot_count; ++i) {
    const df_slot_t *slot = &plan->slots[i];
    ty_art_put_str(&w, slot->name);
    ty_art_put_u8(&w, slot->role);
    ty_art_put_u8(&w, slot->dtype);
    ty_art_put_u8(&w, slot->rank);
    for (uint32_t d = 0; d < slot->rank; ++d) ty_art_put_u64(&w, (uint64_t)slot->dims[d]);
    ty_art_put_u64(&w, slot->bytes);
  }
  ty_art_put_graph(&w, g, df_put_node_extra, (void *)plan);
  ty_art_put_u32(&w, plan->deterministic ? DF_OPTION_DETERMINISTIC : 0u);
  ty_art_put_u32(&w, DF_END_MARKER);
  if (!ty_art_finish(&w)) {
    free(w.data);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory serializing");
  }
  *out_bytes = w.data;
  *out_size = w.size;
  return NULL;
}

/* ---- reading ---- */

static ty_abi_status_t df_get_node_extra(ty_art_reader_t *r, uint32_t node, uint32_t node_count,
                                         void *user) {
  df_plan_t *plan = user;
  if (node == 0) {
    plan->section = malloc(node_count ? node_count : 1);
    plan->tile = malloc((node_count ? node_count : 1) * sizeof(uint16_t));
    if (!plan->section || !plan->tile) return ty_art_malformed(r, "nodes");
    plan->node_count = node_count;
  }
  plan->section[node] = (uint8_t)ty_art_get_u8(r, "node section");
  plan->tile[node] = (uint16_t)ty_art_get_u16(r, "node tile");
  if (!r->failed && (plan->section[node] >= DF_SECTION_COUNT ||
                     plan->tile[node] >= plan->target.tiles)) {
    return ty_art_malformed(r, "a node's section or tile is unknown");
  }
  return NULL;
}

ty_abi_status_t df_artifact_read(const unsigned char *bytes, uint64_t size,
                                 const df_target_t *device_target, df_plan_t *plan,
                                 ty_abi_graph_t *out_graph, void **out_block) {
  memset(plan, 0, sizeof(*plan));
  *out_block = NULL;
  ty_art_reader_t r;
  ty_abi_status_t st = ty_art_open(&r, bytes, size, DF_MAGIC, DF_FORMAT_VERSION, "dataflow",
                                   TY_DATAFLOW_VERSION, "'trainyard compile --backend dataflow'");
  if (st) return st;
  plan->target.tiles = ty_art_get_u32(&r, "target");
  plan->target.clock_mhz = ty_art_get_u32(&r, "target");
  plan->target.mem_per_tile = ty_art_get_u64(&r, "target");
  plan->target.bandwidth_gbs = ty_art_get_f64(&r, "target");
  plan->target.dram_bytes = ty_art_get_u64(&r, "target");
  if (!r.failed && !df_same_target(&plan->target, device_target)) {
    char have[160], want[160];
    df_format_target(&plan->target, have, sizeof(have));
    df_format_target(device_target, want, sizeof(want));
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                           "dataflow: target mismatch: the artifact was compiled for %s, but the "
                           "device is %s; open the device with the artifact's options or "
                           "compile again for this device",
                           have, want);
  }
  plan->kind = (df_kind_t)ty_art_get_u32(&r, "kind");
  plan->world_size = ty_art_get_u32(&r, "world size");
  ty_art_take(&r, plan->graph_hash, 64, "graph hash");
  plan->graph_hash[64] = '\0';
  if (plan->target.tiles < 1 || plan->target.tiles > DF_MAX_TILES ||
      (plan->kind != DF_KIND_TRAIN && plan->kind != DF_KIND_INFERENCE) ||
      plan->world_size < 1 || plan->world_size > 65536) {
    return ty_art_malformed(&r, "target tiles, kind or world size out of range");
  }
  char *writer = ty_art_get_str(&r, NULL, "plugin version");
  free(writer);
  (void)ty_art_get_u32(&r, "cost model");
  for (uint32_t s = 0; s < DF_SECTION_COUNT; ++s) {
    df_section_stats_t *sec = &plan->sections[s];
    sec->nodes = ty_art_get_u32(&r, "sections");
    sec->flops = ty_art_get_f64(&r, "sections");
    sec->dram_bytes = ty_art_get_u64(&r, "sections");
    sec->compute_cycles = ty_art_get_u64(&r, "sections");
    sec->dram_cycles = ty_art_get_u64(&r, "sections");
  }
  if (ty_art_get_u32(&r, "tile count") != plan->target.tiles) return ty_art_malformed(&r, "tile count");
  for (uint32_t k = 0; k < plan->target.tiles; ++k) {
    df_tile_stats_t *t = &plan->tiles[k];
    t->nodes = ty_art_get_u32(&r, "tiles");
    t->flops = ty_art_get_f64(&r, "tiles");
    t->state_bytes = ty_art_get_u64(&r, "tiles");
    t->peak_activation_bytes = ty_art_get_u64(&r, "tiles");
    t->spill_bytes = ty_art_get_u64(&r, "tiles");
  }
  plan->cycles_per_step = ty_art_get_u64(&r, "estimates");
  plan->tokens_per_step = ty_art_get_u64(&r, "estimates");
  uint32_t hyper = ty_art_get_u32(&r, "hyperparameter count");
  for (uint32_t i = 0; i < hyper && !r.failed; ++i) {
    free(ty_art_get_str(&r, NULL, "hyperparameter names")); /* the slot table has them */
  }
  plan->dropout_count = ty_art_get_u32(&r, "dropout count");
  if (r.failed || plan->dropout_count > 1024) return ty_art_malformed(&r, "dropout count");
  plan->dropout_p = malloc((plan->dropout_count + 1) * sizeof(double));
  if (!plan->dropout_p) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  for (uint32_t i = 0; i < plan->dropout_count; ++i) plan->dropout_p[i] = ty_art_get_f64(&r, "dropout");
  uint32_t slots = ty_art_get_u32(&r, "slot count");
  if (r.failed || slots > (size - r.at) / 12) return ty_art_malformed(&r, "slot count");
  plan->slots = calloc(slots + 1, sizeof(df_slot_t));
  if (!plan->slots) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  for (uint32_t i = 0; i < slots && !r.failed; ++i) {
    df_slot_t *slot = &plan->slots[i];
    plan->slot_count = i + 1;
    slot->name = ty_art_get_str(&r, NULL, "slot name");
    slot->role = (df_role_t)ty_art_get_u8(&r, "slot role");
    slot->dtype = (ty_dtype_t)ty_art_get_u8(&r, "slot dtype");
    slot->rank = ty_art_get_u8(&r, "slot rank");
    if (!r.failed && (slot->role >= DF_ROLE_COUNT || slot->rank > 8)) {
      return ty_art_malformed(&r, "a slot's role or rank is out of range");
    }
    for (uint32_t d = 0; d < slot->rank; ++d) slot->dims[d] = (int64_t)ty_art_get_u64(&r, "slot dims");
    slot->bytes = ty_art_get_u64(&r, "slot bytes");
  }
  if (r.failed) return ty_art_malformed(&r, r.failed);
  /* The graph's pool: its structs take at most ~6x their serialized bytes. */
  ty_art_pool_t pool = {0};
  pool.cap = 8 * (size - r.at) + 64 * 1024;
  pool.base = malloc((size_t)pool.cap);
  if (!pool.base) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
  ty_abi_status_t s = ty_art_get_graph(&r, &pool, out_graph, df_get_node_extra, plan);
  if (!s) out_graph->hash_hex = plan->graph_hash;
  if (!s && !plan->section) { /* a graph without nodes */
    plan->section = malloc(1);
    plan->tile = malloc(sizeof(uint16_t));
    if (!plan->section || !plan->tile) {
      s = ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "dataflow: out of memory");
    }
  }
  if (!s) {
    const uint32_t opts = ty_art_get_u32(&r, "options");
    if (r.failed || (opts & ~DF_OPTION_DETERMINISTIC)) s = ty_art_malformed(&r, "options");
    plan->deterministic = (opts & DF_OPTION_DETERMINISTIC) != 0;
  }
  if (!s && ty_art_get_u32(&r, "end marker") != DF_END_MARKER) s = ty_art_malformed(&r, "end marker");
  if (!s && r.at != size) s = ty_art_malformed(&r, "bytes after the end marker");
  if (s) {
    free(pool.base);
    return s;
  }
  *out_block = pool.base;
  return NULL;
}
