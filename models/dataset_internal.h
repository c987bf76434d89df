/* What models/dataset_*.c share: the shard header, CRC-32, little-endian
 * helpers and file helpers. Not for use outside models/dataset_*.c. */
#ifndef TY_MODELS_DATASET_INTERNAL_H_
#define TY_MODELS_DATASET_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "models/dataset.h"

/* Flags of the shard header. */
enum {
  TY_DS_FLAG_LOSS_WEIGHTS = 1u << 0,
  TY_DS_KNOWN_FLAGS = TY_DS_FLAG_LOSS_WEIGHTS,
};

/* The 64-byte shard header, decoded. Offsets are in docs/formats.md. */
typedef struct ty_ds_header_t {
  uint32_t version;
  uint32_t header_size;
  uint32_t seq_len;
  uint32_t vocab_size;
  uint32_t eos_id;
  uint32_t flags;
  uint64_t row_count;
  uint32_t padding; /* EOS targets that pad the shard's last row (0 but in a split's last shard) */
  uint32_t shard_index;
  uint8_t tokenizer_prefix[8]; /* the first 8 bytes of the tokenizer's SHA-256 */
  uint32_t split;
} ty_ds_header_t;

void ty_ds_header_encode(const ty_ds_header_t *header, uint8_t out[TY_DATASET_SHARD_HEADER_SIZE]);
/* Checks magic, CRC and sizes; `file` names the shard in errors (DATA_LOSS,
 * or UNIMPLEMENTED for a newer version). */
ty_status_t ty_ds_header_decode(const uint8_t *bytes, const char *file, ty_ds_header_t *out);

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32 and Python's zlib.crc32). */
uint32_t ty_ds_crc32(uint32_t crc, const void *data, size_t size);

static inline void ty_ds_put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t ty_ds_get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void ty_ds_put_u64(uint8_t *p, uint64_t v) {
  ty_ds_put_u32(p, (uint32_t)v);
  ty_ds_put_u32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t ty_ds_get_u64(const uint8_t *p) {
  return (uint64_t)ty_ds_get_u32(p) | ((uint64_t)ty_ds_get_u32(p + 4) << 32);
}

/* Hex digits to bytes; false unless `hex` holds exactly 2*n of them. */
bool ty_ds_hex_decode(const char *hex, uint8_t *out, size_t n);


/* "<dir>/<name>", malloc'ed; NULL when memory runs out. */
char *ty_ds_path_join(const char *dir, const char *name);

/* SHA-256 of a whole file as 64 hex digits. */
ty_status_t ty_ds_sha256_file(const char *path, char out_hex[65]);

/* fsync of a folder (a file system that cannot is not an error). */
ty_status_t ty_ds_fsync_dir(const char *dir);

#endif /* TY_MODELS_DATASET_INTERNAL_H_ */
