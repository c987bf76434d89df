/* Pieces shared by the safetensors reader, index and writer: the dtype
 * table, file-system helpers that turn errno into statuses, and the pickle
 * sniffing behind ty_checkpoint_check_format. Not a public header. */
#ifndef TY_MODELS_SAFETENSORS_INTERNAL_H_
#define TY_MODELS_SAFETENSORS_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/dtype.h"
#include "hal/status.h"

/* Names and tensors are clipped to this many bytes in messages, so that a
 * hostile header cannot make an error message megabytes long. */
#define TY_ST_MSG_NAME "%.200s"

/* One safetensors dtype string. `dtype` is TY_DTYPE_INVALID for strings of
 * the format that Trainyard has no type for; `size` is then still the
 * element size in bytes (0 for the sub-byte float formats). `order` is the
 * position in the reference implementation's dtype enum, which is how it
 * orders data in a file (larger first). */
typedef struct ty_st_dtype_row_t {
  const char *name;
  ty_dtype_t dtype;
  bool is_bool;
  size_t size;
  int order;
} ty_st_dtype_row_t;

/* NULL for strings that are not safetensors dtypes at all. */
const ty_st_dtype_row_t *ty_st_dtype_find(const char *name);
/* The row of a Trainyard dtype (is_bool selects BOOL for u8); NULL when
 * invalid. */
const ty_st_dtype_row_t *ty_st_dtype_row(ty_dtype_t dtype, bool is_bool);


/* Full read at `offset` (retrying EINTR and short reads). DATA_LOSS when
 * the file ends first. */
ty_status_t ty_st_pread_all(int fd, void *dst, uint64_t size, uint64_t offset,
                            const char *path);

/* "a/b" from "a" and "b" (a '/' is inserted unless a ends with one).
 * NULL when out of memory. */
char *ty_st_path_join(const char *dir, const char *name);

/* What the first bytes of a file (and its name) say about its format. */
typedef enum ty_st_format_t {
  TY_ST_FORMAT_SAFETENSORS = 0,
  TY_ST_FORMAT_PICKLE,      /* pickle protocol 2+ magic (legacy torch.save) */
  TY_ST_FORMAT_ZIP,         /* torch.save since 1.6: a zip of pickles */
  TY_ST_FORMAT_PICKLE_NAME, /* not safetensors, and named like a pickle */
  TY_ST_FORMAT_UNKNOWN,
} ty_st_format_t;

/* `head` holds the first `n` bytes of a file of `file_size` bytes. */
ty_st_format_t ty_st_sniff(const uint8_t *head, size_t n, uint64_t file_size,
                           const char *path);

/* FAILED_PRECONDITION explaining that `path` is a pickle checkpoint and how
 * to convert it. */
ty_status_t ty_st_pickle_status(const char *path, ty_st_format_t format)
    TY_MUST_USE;

#endif /* TY_MODELS_SAFETENSORS_INTERNAL_H_ */
