/* cuda executables as artifacts (`trainyard compile --backend cuda:0`, the
 * on-disk compile cache). The kernels are machine code already embedded in
 * the plugin, so an executable is its graph plus the card it was planned
 * for; loading one checks the card and plans it again (milliseconds: memory
 * plan, commands, cuBLASLt algorithm choices), which is what makes the
 * artifact stay valid across plugin rebuilds of the same format.
 *
 * Format (backends/common/artifact_io.h header, then):
 *   u32 compute capability major, u32 minor, str device name,
 *   str plugin version, str fatbin targets, u8 graphs, u8 tf32,
 *   u8 deterministic (version 2: the compile option deterministic=1, which
 *   the load passes to the compile again)
 *   64 ASCII hex digits: the graph hash
 *   the graph (ty_art_put_graph)
 *   u32 "END!" */
#include <stdlib.h>
#include <string.h>

#include "trainyard/artifact_io.h"
#include "cuda_internal.h"

#define TY_CU_ART_MAGIC "TYCUART"
#define TY_CU_ART_VERSION 2u
#define TY_CU_ART_END 0x21444E45u /* "END!" */

#ifndef TY_CUDA_BACKEND_VERSION
#define TY_CUDA_BACKEND_VERSION "0.0.0"
#endif

ty_abi_status_t ty_cu_executable_serialize(ty_abi_executable_t *e, void *dst, uint64_t capacity,
                                           uint64_t *out_size) {
  const ty_abi_graph_t *g = ty_cu_executable_graph(e);
  const ty_abi_device_t *d = ty_cu_exec_device(e);
  const ty_cu_slot_t *s = d->slot;
  ty_art_writer_t w = {0};
  ty_art_begin(&w, TY_CU_ART_MAGIC, TY_CU_ART_VERSION);
  ty_art_put_u32(&w, (uint64_t)s->cc_major);
  ty_art_put_u32(&w, (uint64_t)s->cc_minor);
  ty_art_put_str(&w, s->base.info.name);
  ty_art_put_str(&w, TY_CUDA_BACKEND_VERSION);
  ty_art_put_str(&w, ty_cu_fatbin_targets());
  ty_art_put_u8(&w, d->options.graphs);
  ty_art_put_u8(&w, d->options.tf32);
  ty_art_put_u8(&w, ty_cu_exec_deterministic(e) ? 1u : 0u);
  char hash[64];
  memset(hash, '0', sizeof(hash));
  memcpy(hash, g->hash_hex, strnlen(g->hash_hex, 64));
  ty_art_put(&w, hash, 64);
  ty_art_put_graph(&w, g, NULL, NULL);
  ty_art_put_u32(&w, TY_CU_ART_END);
  if (!ty_art_finish(&w)) {
    free(w.data);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory serializing", d->label);
  }
  *out_size = w.size;
  if (dst && capacity >= w.size) memcpy(dst, w.data, (size_t)w.size);
  free(w.data);
  return NULL;
}

ty_abi_status_t ty_cu_executable_deserialize(ty_abi_device_t *d,
                                             const ty_abi_deserialize_args_t *args,
                                             ty_abi_executable_t **out_executable) {
  *out_executable = NULL;
  ty_art_reader_t r;
  ty_abi_status_t st = ty_art_open(&r, args->bytes, args->size, TY_CU_ART_MAGIC,
                                   TY_CU_ART_VERSION, "cuda", TY_CUDA_BACKEND_VERSION,
                                   "'trainyard compile --backend cuda'");
  if (st) return st;
  int major = (int)ty_art_get_u32(&r, "target"), minor = (int)ty_art_get_u32(&r, "target");
  char *name = ty_art_get_str(&r, NULL, "device name");
  free(ty_art_get_str(&r, NULL, "plugin version"));
  free(ty_art_get_str(&r, NULL, "fatbin targets"));
  (void)ty_art_get_u8(&r, "options");
  (void)ty_art_get_u8(&r, "options");
  const bool deterministic = ty_art_get_u8(&r, "options") != 0;
  char hash[65] = {0};
  ty_art_take(&r, hash, 64, "graph hash");
  if (r.failed) {
    free(name);
    return ty_art_malformed(&r, r.failed);
  }
  if (major != d->slot->cc_major || minor != d->slot->cc_minor) {
    st = ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                     "%s: the artifact was compiled for sm_%d%d (%s); this device is sm_%d%d "
                     "(%s): compile it again for this card",
                     d->label, major, minor, name ? name : "?", d->slot->cc_major,
                     d->slot->cc_minor, d->slot->base.info.name);
    free(name);
    return st;
  }
  free(name);
  if (args->expected && args->expected->hash_hex && strcmp(args->expected->hash_hex, hash)) {
    return ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                       "%s: the artifact was compiled from graph %.12s, but this run's graph is "
                       "%.12s (a changed model, shape, dtype or optimizer): compile it again",
                       d->label, hash, args->expected->hash_hex);
  }
  ty_art_pool_t pool = {0};
  pool.cap = 8 * (args->size - r.at) + 64 * 1024;
  pool.base = malloc((size_t)pool.cap);
  if (!pool.base) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", d->label);
  ty_abi_graph_t g;
  st = ty_art_get_graph(&r, &pool, &g, NULL, NULL);
  if (!st && ty_art_get_u32(&r, "end marker") != TY_CU_ART_END) {
    st = ty_art_malformed(&r, "end marker");
  }
  if (!st && r.at != args->size) st = ty_art_malformed(&r, "bytes after the end marker");
  if (!st) {
    g.hash_hex = hash;
    const ty_abi_option_t det = {.key = TY_ABI_DETERMINISTIC_OPTION, .value = "1"};
    ty_abi_compile_args_t compile = {.struct_size = sizeof(compile),
                                     .graph = &g,
                                     .option_count = deterministic ? 1u : 0u,
                                     .options = &det};
    st = ty_cu_graph_compile(d, &compile, out_executable);
  }
  free(pool.base);
  return st;
}
