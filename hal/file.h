/* Whole-file reads with a size cap fitting the kind of file: the one way
 * Trainyard reads a file (or stdin) into memory. A cap turns /dev/zero, an
 * endless pipe or a wrong multi-gigabyte file into a clear error instead of
 * an out-of-memory kill; text kinds also refuse NUL bytes, which no JSON or
 * options file holds. Non-regular files (pipes, character devices) work:
 * st_size is only a hint for the first allocation, never trusted. */
#ifndef TY_HAL_FILE_H_
#define TY_HAL_FILE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_KIB (UINT64_C(1) << 10)
#define TY_MIB (UINT64_C(1) << 20)
#define TY_GIB (UINT64_C(1) << 30)

/* What a file of one kind may be. Kinds are constants defined by the code
 * that owns the format (models/config.c for config.json, ...); docs/formats.md
 * lists them all. */
typedef struct ty_file_kind_t {
  const char *what;      /* named in messages: "model config", "tokenizer", ... */
  uint64_t max_bytes;    /* the cap */
  const char *limit_env; /* environment variable that replaces the cap (a byte
                            count, optionally with a K, M or G suffix), or NULL
                            when no real file of this kind comes near it */
  bool text;             /* a NUL byte anywhere is an error */
  ty_code_t bad_code;    /* code for content that cannot be this kind (a NUL
                            byte): INVALID_ARGUMENT for what users hand in,
                            DATA_LOSS for files Trainyard wrote itself */
} ty_file_kind_t;

/* Reads all of `path` (a regular file, pipe or character device) into a new
 * buffer. *out_data is NUL-terminated (the NUL not counted in *out_size);
 * the caller frees it. Errors name the kind and the path:
 * NOT_FOUND / PERMISSION_DENIED / ... from errno when it cannot be opened or
 * read; INVALID_ARGUMENT for a folder; RESOURCE_EXHAUSTED past the cap (the
 * message gives the cap and, when the kind has one, the variable that
 * raises it); kind->bad_code for a NUL byte in a text kind, with its offset.
 * Thread-safe. */
ty_status_t ty_file_read(const char *path, const ty_file_kind_t *kind, char **out_data,
                         size_t *out_size) TY_MUST_USE;

/* As ty_file_read, from an open descriptor (e.g. 0 for stdin) that is read to
 * its end and left open; `name` stands for the file in messages. */
ty_status_t ty_file_read_fd(int fd, const char *name, const ty_file_kind_t *kind,
                            char **out_data, size_t *out_size) TY_MUST_USE;

/* The cap of `kind`: max_bytes, or the value of limit_env when that is set
 * (INVALID_ARGUMENT naming the variable when it is not a byte count). */
ty_status_t ty_file_kind_limit(const ty_file_kind_t *kind, uint64_t *out_limit) TY_MUST_USE;

/* kind->bad_code naming `name` and the offset when `data` holds a NUL byte:
 * the text check of ty_file_read for data that was mapped instead of read. */
ty_status_t ty_file_check_text(const char *data, size_t size, const char *name,
                               const ty_file_kind_t *kind) TY_MUST_USE;

/* A byte count as people read it: "1000 B", "16 MiB", "1.50 GiB" (caps in
 * messages, memory in reports). Truncates to `capacity`. */
void ty_format_bytes(uint64_t bytes, char *out, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_FILE_H_ */
