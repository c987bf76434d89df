/* File helpers every layer shares: the one way Trainyard reads a whole file
 * (or stdin) into memory, with a size cap fitting the kind of file; opening a
 * file to map it; atomic writes; folders with their parents; and the status
 * of a failed create.
 *
 * A cap turns /dev/zero, an endless pipe or a wrong multi-gigabyte file into
 * a clear error instead of an out-of-memory kill; text kinds also refuse NUL
 * bytes, which no JSON or options file holds. Errors name the user's path
 * (never a temporary name beside it) and the cause in the user's terms ("is
 * a folder, not a file", "its folder x does not exist"), with the code
 * ty_status_from_errno gives.
 *
 * Thread-safety: every function may be called from several threads; none
 * keeps state except the counter that makes temporary names unique. */
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
  bool skip_bom;         /* a leading UTF-8 byte-order mark (EF BB BF) is
                            dropped: set by every JSON, JSONL and options
                            kind, since editors on Windows start files with
                            one and RFC 8259 lets a parser ignore it */
} ty_file_kind_t;

/* Reads all of `path` (a regular file, pipe or character device) into a new
 * buffer, without its leading byte-order mark when kind->skip_bom is set.
 * *out_data is NUL-terminated (the NUL not counted in *out_size);
 * the caller frees it. st_size is only a hint for the first allocation,
 * never trusted. Errors name the kind and the path: FAILED_PRECONDITION
 * "<what> <path> is a folder, not a file"; ty_status_from_errno's "cannot
 * read <what> <path>: <cause>" when it cannot be opened or read;
 * RESOURCE_EXHAUSTED past the cap (the message gives the cap and, when the
 * kind has one, the variable that raises it); kind->bad_code for a NUL byte
 * in a text kind, with its offset. */
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

/* The length of a UTF-8 byte-order mark at the start of `data` (3), or 0:
 * for readers of mapped JSON lines, which skip it as ty_file_read does for
 * kinds with skip_bom. */
size_t ty_text_bom_size(const char *data, size_t size);

/* Opens `path` read-only to map it (shards, safetensors files): a folder or
 * a device cannot be mapped. `what` names the file in errors ("shard",
 * "safetensors file"). A folder or device is FAILED_PRECONDITION "<what>
 * <path> is a folder (device), not a file"; any other failure is
 * ty_status_from_errno's "cannot read <what> <path>: <cause>". On success
 * the caller closes *out_fd; *out_size is the size of a regular file and 0
 * for anything else (a pipe). out_size may be NULL. */
ty_status_t ty_file_open_read(const char *path, const char *what, int *out_fd,
                              uint64_t *out_size) TY_MUST_USE;

/* Whether something exists at `path`, for optional inputs (a model
 * folder's tokenizer.json): *out_exists is false only when it is absent
 * (ENOENT); any other failure to look is an error, never "absent". */
ty_status_t ty_file_probe(const char *path, bool *out_exists) TY_MUST_USE;

/* The status for a failed creation (errno `err`) of `path`, or of a
 * temporary file or folder made beside it: it names `path`, never the
 * temporary name, and says when the folder that should hold it is missing
 * (NOT_FOUND), is not a folder (FAILED_PRECONDITION), or when `path` itself
 * is a folder (FAILED_PRECONDITION). `what` names the output ("tokenizer",
 * "dataset folder"). Only stats `path` and its folder. */
ty_status_t ty_file_create_error(int err, const char *path, const char *what) TY_MUST_USE;

/* Writes `data` to `path` atomically: a temporary file beside it (unique per
 * process and call), fsync, rename over `path`, fsync of the folder. Creates
 * missing parent folders. RESOURCE_EXHAUSTED for a full disk; errors name
 * `path` (ty_file_create_error). A `path` that is a device or a pipe
 * (/dev/null, /dev/stdout, a FIFO) is written in place, not replaced. */
ty_status_t ty_file_write_atomic(const char *path, const void *data, size_t size) TY_MUST_USE;

/* Creates `dir` and its missing parents (mode 0777 & umask). A file in the
 * way is FAILED_PRECONDITION naming it. */
ty_status_t ty_mkdir_parents(const char *dir) TY_MUST_USE;

/* A byte count as people read it: "1000 B", "16 MiB", "1.50 GiB" (caps in
 * messages, memory in reports). Truncates to `capacity`. */
void ty_format_bytes(uint64_t bytes, char *out, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_FILE_H_ */
