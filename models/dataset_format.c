/* Token shards: the header layout, the CRC-32 that guards headers and rows,
 * the split assignment of documents, and file helpers shared by the reader
 * and the writer. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/dataset_internal.h"
#include "hal/sha256.h"

const char *ty_dataset_split_name(ty_dataset_split_t split) {
  switch (split) {
    case TY_DATASET_SPLIT_TRAIN: return "train";
    case TY_DATASET_SPLIT_VAL: return "val";
    default: return NULL;
  }
}

uint64_t ty_dataset_row_stride(uint32_t seq_len, bool loss_weights) {
  uint64_t bytes = 4ull * ((uint64_t)seq_len + 1) + (loss_weights ? (uint64_t)seq_len : 0);
  bytes = (bytes + 3) & ~(uint64_t)3;
  bytes += 4; /* CRC-32 */
  return bytes > UINT32_MAX ? 0 : bytes;
}

/* splitmix64's finalizer: spreads FNV-1a's weak low bits. */
static uint64_t ty_ds_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ty_dataset_split_t ty_dataset_assign_split(uint64_t seed, double val_fraction, const char *text,
                                           size_t size) {
  if (!(val_fraction > 0.0)) return TY_DATASET_SPLIT_TRAIN;
  uint64_t h = 0xcbf29ce484222325ull ^ ty_ds_mix(seed + 0x9e3779b97f4a7c15ull);
  const unsigned char *p = (const unsigned char *)text;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  h = ty_ds_mix(h ^ size);
  double u = (double)(h >> 11) * 0x1.0p-53;
  return u < val_fraction ? TY_DATASET_SPLIT_VAL : TY_DATASET_SPLIT_TRAIN;
}

/* ---- CRC-32, slicing by 8 ---- */

static uint32_t ty_ds_crc_table[8][256];
static pthread_once_t ty_ds_crc_once = PTHREAD_ONCE_INIT;

static void ty_ds_crc_init(void) {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    ty_ds_crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = ty_ds_crc_table[0][i];
    for (int t = 1; t < 8; ++t) {
      c = ty_ds_crc_table[0][c & 0xFF] ^ (c >> 8);
      ty_ds_crc_table[t][i] = c;
    }
  }
}

uint32_t ty_ds_crc32(uint32_t crc, const void *data, size_t size) {
  pthread_once(&ty_ds_crc_once, ty_ds_crc_init);
  const uint8_t *p = data;
  uint32_t c = ~crc;
  while (size >= 8) {
    uint32_t lo = c ^ ty_ds_get_u32(p);
    uint32_t hi = ty_ds_get_u32(p + 4);
    c = ty_ds_crc_table[7][lo & 0xFF] ^ ty_ds_crc_table[6][(lo >> 8) & 0xFF] ^
        ty_ds_crc_table[5][(lo >> 16) & 0xFF] ^ ty_ds_crc_table[4][lo >> 24] ^
        ty_ds_crc_table[3][hi & 0xFF] ^ ty_ds_crc_table[2][(hi >> 8) & 0xFF] ^
        ty_ds_crc_table[1][(hi >> 16) & 0xFF] ^ ty_ds_crc_table[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size--) c = ty_ds_crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  return ~c;
}

/* ---- the header ---- */

void ty_ds_header_encode(const ty_ds_header_t *h, uint8_t out[TY_DATASET_SHARD_HEADER_SIZE]) {
  memset(out, 0, TY_DATASET_SHARD_HEADER_SIZE);
  memcpy(out, TY_DATASET_SHARD_MAGIC, 8);
  ty_ds_put_u32(out + 8, h->version);
  ty_ds_put_u32(out + 12, h->header_size);
  ty_ds_put_u32(out + 16, h->seq_len);
  ty_ds_put_u32(out + 20, h->vocab_size);
  ty_ds_put_u32(out + 24, h->eos_id);
  ty_ds_put_u32(out + 28, h->flags);
  ty_ds_put_u64(out + 32, h->row_count);
  ty_ds_put_u32(out + 40, h->padding);
  ty_ds_put_u32(out + 44, h->shard_index);
  memcpy(out + 48, h->tokenizer_prefix, 8);
  ty_ds_put_u32(out + 56, h->split);
  ty_ds_put_u32(out + 60, ty_ds_crc32(0, out, 60));
}

ty_status_t ty_ds_header_decode(const uint8_t *b, const char *file, ty_ds_header_t *out) {
  if (memcmp(b, TY_DATASET_SHARD_MAGIC, 8) != 0) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: not a trainyard token shard (the file does not start with "
                          "\"" TY_DATASET_SHARD_MAGIC "\")",
                          file);
  }
  ty_ds_header_t h;
  memset(&h, 0, sizeof(h));
  h.version = ty_ds_get_u32(b + 8);
  if (h.version > TY_DATASET_FORMAT_VERSION) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: shard format version %u is newer than this trainyard reads (%u); "
                          "update trainyard",
                          file, h.version, TY_DATASET_FORMAT_VERSION);
  }
  uint32_t stored_crc = ty_ds_get_u32(b + 60), crc = ty_ds_crc32(0, b, 60);
  if (stored_crc != crc) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: the shard header is damaged (CRC-32 %08x, stored %08x); prepare "
                          "the dataset again",
                          file, crc, stored_crc);
  }
  h.header_size = ty_ds_get_u32(b + 12);
  h.seq_len = ty_ds_get_u32(b + 16);
  h.vocab_size = ty_ds_get_u32(b + 20);
  h.eos_id = ty_ds_get_u32(b + 24);
  h.flags = ty_ds_get_u32(b + 28);
  h.row_count = ty_ds_get_u64(b + 32);
  h.padding = ty_ds_get_u32(b + 40);
  h.shard_index = ty_ds_get_u32(b + 44);
  memcpy(h.tokenizer_prefix, b + 48, 8);
  h.split = ty_ds_get_u32(b + 56);
  const char *bad = h.version == 0                             ? "format version 0"
                    : h.header_size != TY_DATASET_SHARD_HEADER_SIZE ? "header size"
                    : h.seq_len == 0                                ? "seq_len 0"
                    : (h.flags & ~(uint32_t)TY_DS_KNOWN_FLAGS)      ? "unknown flags"
                    : h.eos_id >= h.vocab_size                      ? "eos_id >= vocab_size"
                    : h.split >= TY_DATASET_SPLIT_COUNT             ? "split"
                    : h.padding >= h.seq_len || (h.padding && !h.row_count) ? "padding"
                    : ty_dataset_row_stride(h.seq_len, h.flags & 1) == 0   ? "seq_len too large"
                                                                           : NULL;
  if (bad) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: invalid shard header (%s)", file, bad);
  }
  *out = h;
  return TY_OK;
}

/* ---- helpers ---- */

bool ty_ds_hex_decode(const char *hex, uint8_t *out, size_t n) {
  if (!hex || strlen(hex) != 2 * n) return false;
  for (size_t i = 0; i < 2 * n; ++i) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return false;
    if (i % 2 == 0) {
      out[i / 2] = (uint8_t)(v << 4);
    } else {
      out[i / 2] |= (uint8_t)v;
    }
  }
  return true;
}

char *ty_ds_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *path = malloc(a + b + 2);
  if (!path) return NULL;
  memcpy(path, dir, a);
  path[a] = '/';
  memcpy(path + a + 1, name, b + 1);
  return path;
}

ty_status_t ty_ds_sha256_file(const char *path, char out_hex[65]) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot open %s", path);
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  enum { kChunk = 1 << 20 };
  unsigned char *buf = malloc(kChunk);
  ty_status_t status = TY_OK;
  if (!buf) status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing %s", path);
  while (!status) {
    ssize_t n = read(fd, buf, kChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = ty_status_from_errno(errno, "cannot read %s", path);
    } else if (n == 0) {
      break;
    } else {
      ty_sha256_update(&sha, buf, (size_t)n);
    }
  }
  /* Always finished, so the hash's context is released on every path. */
  if (!ty_sha256_final_hex(&sha, out_hex) && !status) {
    status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing %s", path);
  }
  free(buf);
  close(fd);
  return status;
}

ty_status_t ty_ds_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot open folder %s to sync it", dir);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    return ty_status_from_errno(err, "cannot sync folder %s", dir);
  }
  return TY_OK;
}
