/* Hugging Face safetensors checkpoints: a strict reader (one file, or a model
 * folder with model.safetensors or a sharded model.safetensors.index.json),
 * an atomic writer (one file, or shards + index named as transformers names
 * them), and a guard that refuses pickle checkpoints with a conversion hint.
 *
 * File layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON,
 * then the data region. Every rule the reader enforces is in docs/formats.md
 * ("safetensors"); each violation is a DATA_LOSS status naming the file and,
 * where there is one, the tensor.
 *
 * Threading: opening, writing and closing are not thread-safe on the same
 * object; a file or set that is fully open may be read (lookups, accessors,
 * conversions) from several threads at once, since nothing in it changes
 * after open. Objects are independent of each other.
 */
#ifndef TY_MODELS_SAFETENSORS_H_
#define TY_MODELS_SAFETENSORS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/dtype.h"
#include "hal/status.h"
#include "hal/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest header accepted (the limit of the reference implementation). */
#define TY_SAFETENSORS_MAX_HEADER_BYTES 100000000ull

/* ---- Reading one file --------------------------------------------------- */

typedef struct ty_safetensors_file_t ty_safetensors_file_t;

/* One tensor of an open file. Owned by the file (or set) and valid until it
 * is closed; never modify it. */
typedef struct ty_safetensors_tensor_t {
  const char *name;
  ty_dtype_t dtype;        /* BOOL is read as TY_DTYPE_U8 with is_bool set */
  bool is_bool;
  uint32_t rank;           /* at most TY_TENSOR_MAX_RANK */
  int64_t dims[TY_TENSOR_MAX_RANK];
  uint64_t element_count;  /* product of dims (1 for rank 0) */
  uint64_t byte_size;      /* element_count * ty_dtype_size(dtype) */
  uint64_t data_offset;    /* begin of data_offsets, relative to the data region */
  /* The bytes, always aligned to the element size (64 bytes for copies).
   * For a zero-size tensor: non-NULL, never to be dereferenced. */
  const void *data;
  /* true: `data` points at a private heap copy; false: into the file's
   * read-only mapping (or the caller's buffer, for open_memory). */
  bool data_is_copy;
  /* The file the tensor lives in (useful with sets). */
  const ty_safetensors_file_t *file;
} ty_safetensors_tensor_t;

enum {
  /* Default: map the file read-only and point each tensor into the map when
   * its data is aligned to its element size; unaligned tensors are copied
   * into aligned heap memory at open. Note: if another process truncates a
   * mapped file, touching its pages raises SIGBUS — use COPY when the file
   * may change underneath. */
  TY_SAFETENSORS_OPEN_DEFAULT = 0,
  /* Read every tensor into aligned heap memory at open (pread, no mmap);
   * the file is closed when open returns. */
  TY_SAFETENSORS_OPEN_COPY = 1u << 0,
};

/* Opens and fully validates `path`. On success *out_file owns the mapping
 * (or copies); release it with ty_safetensors_close. Errors:
 * NOT_FOUND / PERMISSION_DENIED from the file system; DATA_LOSS naming the
 * file (and tensor) for every malformed header or layout;
 * UNIMPLEMENTED for a dtype Trainyard has no type for (F8_E4M3, I8, ...) or a
 * rank above TY_TENSOR_MAX_RANK, naming the tensor; FAILED_PRECONDITION for a
 * pickle/zip checkpoint (with how to convert it); RESOURCE_EXHAUSTED on
 * allocation failure. *out_file is NULL on error. */
ty_status_t ty_safetensors_open(const char *path, ty_safetensors_file_t **out_file);
/* As ty_safetensors_open with TY_SAFETENSORS_OPEN_* flags. */
ty_status_t ty_safetensors_open_flags(const char *path, uint32_t flags,
                                      ty_safetensors_file_t **out_file);

/* Parses a whole file image held in memory. `name` is used in messages (may
 * be NULL). Not copied: `data` must stay valid and unchanged until the file
 * is closed; aligned tensors point into it, unaligned ones are copied (or all
 * of them with TY_SAFETENSORS_OPEN_COPY). Same errors as ty_safetensors_open. */
ty_status_t ty_safetensors_open_memory(const void *data, size_t size,
                                       const char *name, uint32_t flags,
                                       ty_safetensors_file_t **out_file);

/* Releases the file, its mapping and copies. NULL is a no-op. */
void ty_safetensors_close(ty_safetensors_file_t *file);

/* The path (or name) given at open. Owned by the file. */
const char *ty_safetensors_file_path(const ty_safetensors_file_t *file);
/* Byte size of the data region (the file less 8 + header length). */
uint64_t ty_safetensors_file_data_size(const ty_safetensors_file_t *file);

/* Tensors in file order: sorted by data offset (ties: end offset, name). */
size_t ty_safetensors_file_tensor_count(const ty_safetensors_file_t *file);
const ty_safetensors_tensor_t *ty_safetensors_file_tensor_at(
    const ty_safetensors_file_t *file, size_t index);

/* Lookup by exact name (binary search). NULL when absent. */
const ty_safetensors_tensor_t *ty_safetensors_file_find(
    const ty_safetensors_file_t *file, const char *name);
/* As _find; NOT_FOUND naming the file and the tensor when absent. */
ty_status_t ty_safetensors_file_lookup(const ty_safetensors_file_t *file,
                                       const char *name,
                                       const ty_safetensors_tensor_t **out_tensor);

/* The "__metadata__" map, sorted by key. Strings are owned by the file.
 * _metadata_get returns NULL when the key is absent. */
size_t ty_safetensors_file_metadata_count(const ty_safetensors_file_t *file);
void ty_safetensors_file_metadata_at(const ty_safetensors_file_t *file,
                                     size_t index, const char **out_key,
                                     const char **out_value);
const char *ty_safetensors_file_metadata_get(const ty_safetensors_file_t *file,
                                             const char *key);

/* ---- Tensor helpers ------------------------------------------------------ */

/* Fills a contiguous hal descriptor (dtype, dims, name). INVALID_ARGUMENT
 * when the name is longer than the descriptor holds. */
ty_status_t ty_safetensors_tensor_desc(const ty_safetensors_tensor_t *tensor,
                                       ty_tensor_desc_t *out_desc);

/* Copies the tensor into `dst` as `dst_dtype`. The same dtype is a plain
 * copy; between floating dtypes (f32, bf16, f16, f64) values are converted
 * with hal/half.h (round to nearest even when narrowing). `dst_bytes` must be
 * element_count * ty_dtype_size(dst_dtype). INVALID_ARGUMENT naming the
 * tensor for a size mismatch or a conversion to/from an integer dtype.
 * Thread-safe for distinct `dst`. */
ty_status_t ty_safetensors_tensor_read(const ty_safetensors_tensor_t *tensor,
                                       ty_dtype_t dst_dtype, void *dst,
                                       size_t dst_bytes);

/* Converts `count` elements between floating dtypes (or copies when
 * src_dtype == dst_dtype, any dtype). INVALID_ARGUMENT for other pairs. */
ty_status_t ty_safetensors_convert(ty_dtype_t src_dtype, const void *src,
                                   ty_dtype_t dst_dtype, void *dst,
                                   size_t count);

/* The safetensors dtype string ("F32", "BF16", "BOOL", ...). Static. */
const char *ty_safetensors_dtype_string(ty_dtype_t dtype, bool is_bool);

/* ---- Model folders (single or sharded) ------------------------------------ */

typedef struct ty_safetensors_set_t ty_safetensors_set_t;

/* Opens a model folder: model.safetensors.index.json when present (and every
 * shard it names), else model.safetensors. Validates that shard names are
 * plain file names (no '/', '\\' or '..'), that every weight_map entry is
 * present in the shard it names, that every tensor of every shard is listed
 * for that shard, and that no tensor is in two shards: each violation is
 * DATA_LOSS naming the index, shard and tensor (a missing shard file too).
 * NOT_FOUND when neither file exists (FAILED_PRECONDITION with a conversion
 * hint when the folder holds a pytorch_model.bin instead). Shards are opened
 * with TY_SAFETENSORS_OPEN_DEFAULT, or with `flags` (TY_SAFETENSORS_OPEN_*)
 * for _open_dir_flags. Release with ty_safetensors_set_close. */
ty_status_t ty_safetensors_open_dir(const char *model_dir,
                                    ty_safetensors_set_t **out_set);
ty_status_t ty_safetensors_open_dir_flags(const char *model_dir, uint32_t flags,
                                          ty_safetensors_set_t **out_set);
/* The same for another file stem: <dir>/<base>.safetensors.index.json (and
 * its shards) or <dir>/<base>.safetensors, e.g. "optimizer" for a
 * checkpoint's optimizer state (docs/formats.md); NOT_FOUND naming both
 * when neither exists. */
ty_status_t ty_safetensors_open_set(const char *dir, const char *base, uint32_t flags,
                                    ty_safetensors_set_t **out_set);
void ty_safetensors_set_close(ty_safetensors_set_t *set);

/* Tensors of all shards: shards in index order (shard file names sorted),
 * each in file order. */
size_t ty_safetensors_set_tensor_count(const ty_safetensors_set_t *set);
const ty_safetensors_tensor_t *ty_safetensors_set_tensor_at(
    const ty_safetensors_set_t *set, size_t index);
const ty_safetensors_tensor_t *ty_safetensors_set_find(
    const ty_safetensors_set_t *set, const char *name);
/* NOT_FOUND naming the folder and the tensor when absent. */
ty_status_t ty_safetensors_set_lookup(const ty_safetensors_set_t *set,
                                      const char *name,
                                      const ty_safetensors_tensor_t **out_tensor);

size_t ty_safetensors_set_shard_count(const ty_safetensors_set_t *set);
const ty_safetensors_file_t *ty_safetensors_set_shard(
    const ty_safetensors_set_t *set, size_t index);
/* True when the set was opened through an index file. */
bool ty_safetensors_set_is_sharded(const ty_safetensors_set_t *set);
/* The index's metadata.total_size, or -1 when absent (or not sharded). */
int64_t ty_safetensors_set_total_size(const ty_safetensors_set_t *set);

/* ---- Legacy formats -------------------------------------------------------- */

/* Sniffs `path`: OK when it looks like safetensors (a plausible header
 * length followed by '{'). FAILED_PRECONDITION for pickle or zip checkpoints
 * (pytorch_model.bin, *.pt, *.pth, *.ckpt, *.pkl, or their magic bytes), with
 * the command that converts them: Trainyard never unpickles. DATA_LOSS for
 * anything else; NOT_FOUND / PERMISSION_DENIED from the file system. */
ty_status_t ty_checkpoint_check_format(const char *path);

/* ---- Writing ----------------------------------------------------------------- */

typedef struct ty_safetensors_writer_t ty_safetensors_writer_t;

/* An empty writer whose metadata is {"format": "pt"} (as transformers
 * writes). RESOURCE_EXHAUSTED on allocation failure. */
ty_status_t ty_safetensors_writer_create(ty_safetensors_writer_t **out_writer);
/* NULL is a no-op. Does not touch the borrowed tensor data. */
void ty_safetensors_writer_destroy(ty_safetensors_writer_t *writer);

/* Sets (or replaces) a "__metadata__" entry. Both strings are copied.
 * INVALID_ARGUMENT for invalid UTF-8. */
ty_status_t ty_safetensors_writer_set_metadata(ty_safetensors_writer_t *writer,
                                               const char *key,
                                               const char *value);

/* Adds a tensor. `name` and `dims` are copied; `data` (row-major,
 * little-endian, `byte_size` bytes) is BORROWED: it must stay valid and
 * unchanged until the last write call returns. INVALID_ARGUMENT for an
 * invalid dtype, rank > TY_TENSOR_MAX_RANK, a negative dim, a byte_size that
 * does not match the shape, an empty, non-UTF-8 or reserved ("__metadata__")
 * name; ALREADY_EXISTS for a name added before. */
ty_status_t ty_safetensors_writer_add(ty_safetensors_writer_t *writer,
                                      const char *name, ty_dtype_t dtype,
                                      uint32_t rank, const int64_t *dims,
                                      const void *data, uint64_t byte_size);
/* As _add for a BOOL tensor: one byte per element, each 0 or 1
 * (INVALID_ARGUMENT naming the first other byte). */
ty_status_t ty_safetensors_writer_add_bool(ty_safetensors_writer_t *writer,
                                           const char *name, uint32_t rank,
                                           const int64_t *dims,
                                           const uint8_t *data,
                                           uint64_t byte_size);

/* Writes one file atomically: <path>.tmp.<pid>, fsync, rename over `path`,
 * fsync of the folder. Layout as the reference implementation writes it
 * (data sorted by element size, largest first, then by name, so every tensor
 * is aligned to its element size; header keys in data order after
 * "__metadata__"; header padded with spaces to a multiple of 8). On error the
 * temporary file is removed and `path` is untouched. Errors from the file
 * system name the path (RESOURCE_EXHAUSTED for a full disk). */
ty_status_t ty_safetensors_writer_write_file(const ty_safetensors_writer_t *writer,
                                             const char *path);

/* Writes a model folder (which must exist) as transformers' save_pretrained
 * does: tensors, in the order they were added, are cut into shards of at
 * most `max_shard_bytes` (a tensor larger than that gets a shard of its
 * own); one shard is written as model.safetensors, several as
 * model-00001-of-0000N.safetensors plus model.safetensors.index.json
 * ({"metadata": {"total_size": ...}, "weight_map": {...}}, sorted keys,
 * indent 2). `max_shard_bytes` 0 means no limit. Every file is written
 * atomically and the index last; only then are checkpoint files of an
 * earlier save that the new one does not use removed (model.safetensors,
 * the index, or model-*-of-*.safetensors). */
ty_status_t ty_safetensors_writer_write_dir(const ty_safetensors_writer_t *writer,
                                            const char *model_dir,
                                            uint64_t max_shard_bytes);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_SAFETENSORS_H_ */
