/* Plugin artifacts (executable_serialize / executable_deserialize) as
 * self-describing byte strings: little-endian fixed-width fields,
 * length-prefixed strings, a common header and the canonical encoding of an
 * ABI graph, with bounds-checked reading. Part of the backend support
 * library; each plugin keeps its own magic, format version and payload
 * (docs/formats.md, "Artifacts").
 *
 * The header every artifact starts with:
 *   0   magic, 8 bytes (the plugin's, NUL-padded)
 *   8   u32 format version
 *   12  u32 offset of the hashed content (48)
 *   16  SHA-256 of bytes [48, end)
 *   48  u64 total size
 * then the plugin's payload. Reading checks the magic, the version and the
 * hash before anything of the payload is parsed, and every read after is
 * bounds-checked: a lie in a count fails, it does not allocate.
 *
 * Not thread-safe per writer/reader; no global state. */
#ifndef TY_BACKENDS_COMMON_ARTIFACT_IO_H_
#define TY_BACKENDS_COMMON_ARTIFACT_IO_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_ART_HASHED_FROM 48u

/* ---- writing ---- */

typedef struct ty_art_writer_t {
  unsigned char *data; /* malloc'ed; the caller frees (or takes) it */
  uint64_t size, cap;
  bool failed;         /* out of memory: every later put is a no-op */
} ty_art_writer_t;

void ty_art_put(ty_art_writer_t *w, const void *p, uint64_t n);
void ty_art_put_u8(ty_art_writer_t *w, uint64_t v);
void ty_art_put_u16(ty_art_writer_t *w, uint64_t v);
void ty_art_put_u32(ty_art_writer_t *w, uint64_t v);
void ty_art_put_u64(ty_art_writer_t *w, uint64_t v);
void ty_art_put_f64(ty_art_writer_t *w, double d);
void ty_art_put_str(ty_art_writer_t *w, const char *s); /* u16 length + bytes */

/* The header with a zero hash and size; ty_art_finish fills both. */
void ty_art_begin(ty_art_writer_t *w, const char magic[8], uint32_t version);
/* Patches the total size and the content hash. False when out of memory. */
bool ty_art_finish(ty_art_writer_t *w);

/* Per-node extra fields a plugin writes after each node's op name (e.g. a
 * placement); NULL for none. */
typedef void (*ty_art_node_writer_fn)(ty_art_writer_t *w, uint32_t node, void *user);

/* The graph: values (name, dtype, role, flags, dims, constant bytes), nodes
 * (op, extras, inputs, outputs, attributes), state updates. */
void ty_art_put_graph(ty_art_writer_t *w, const ty_abi_graph_t *g, ty_art_node_writer_fn extra,
                      void *user);

/* ---- reading ---- */

typedef struct ty_art_reader_t {
  const unsigned char *data;
  uint64_t size, at;
  const char *failed; /* what was being read when the bytes ran out */
  const char *plugin; /* names the plugin in messages ("dataflow") */
} ty_art_reader_t;

bool ty_art_take(ty_art_reader_t *r, void *out, uint64_t n, const char *what);
uint64_t ty_art_get_uint(ty_art_reader_t *r, unsigned bytes, const char *what);
#define ty_art_get_u8(r, what) ((uint32_t)ty_art_get_uint((r), 1, (what)))
#define ty_art_get_u16(r, what) ((uint32_t)ty_art_get_uint((r), 2, (what)))
#define ty_art_get_u32(r, what) ((uint32_t)ty_art_get_uint((r), 4, (what)))
#define ty_art_get_u64(r, what) ty_art_get_uint((r), 8, (what))
double ty_art_get_f64(ty_art_reader_t *r, const char *what);

/* Memory the parsed graph points into: one block, sized from the bytes
 * left (structs take at most ~6x their encoding). */
typedef struct ty_art_pool_t {
  unsigned char *base;
  uint64_t used, cap;
} ty_art_pool_t;

void *ty_art_pool_take(ty_art_pool_t *p, uint64_t n);
/* A string, NUL-terminated, in `pool` (or malloc'ed when pool is NULL). */
char *ty_art_get_str(ty_art_reader_t *r, ty_art_pool_t *pool, const char *what);

/* DATA_LOSS: "<plugin>: the artifact is malformed at byte N (detail)". */
ty_abi_status_t ty_art_malformed(const ty_art_reader_t *r, const char *detail);

/* Checks the header: DATA_LOSS for a truncated file, a wrong magic (with
 * `made_by`, e.g. "'trainyard compile --backend cuda'") or a hash that does
 * not match; FAILED_PRECONDITION for another format version. On success
 * the reader stands after the total-size field, which matched `size`. */
ty_abi_status_t ty_art_open(ty_art_reader_t *r, const unsigned char *bytes, uint64_t size,
                            const char magic[8], uint32_t version, const char *plugin,
                            const char *plugin_version, const char *made_by);

typedef ty_abi_status_t (*ty_art_node_reader_fn)(ty_art_reader_t *r, uint32_t node,
                                                 uint32_t node_count, void *user);

/* Parses a graph written by ty_art_put_graph into pool memory, checking
 * dtypes, ranks, sizes, operand indices and that every op is in op set v1.
 * g->hash_hex is left NULL for the caller to set. */
ty_abi_status_t ty_art_get_graph(ty_art_reader_t *r, ty_art_pool_t *pool, ty_abi_graph_t *g,
                                 ty_art_node_reader_fn extra, void *user);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_ARTIFACT_IO_H_ */
