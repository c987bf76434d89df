/* File helpers every layer shares: opening a file to read, whole-file
 * reads, atomic writes, folders with their parents, and the status of a
 * failed create. Their errors name the user's path (never a temporary name
 * beside it) and the cause in the user's terms ("is a folder, not a file",
 * "its folder x does not exist"), with the code ty_status_from_errno gives.
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

/* Opens `path` read-only. `what` names the file in errors ("shard",
 * "tokenizer", "--tokens file"). A folder is FAILED_PRECONDITION "<what>
 * <path> is a folder, not a file"; any other failure is
 * ty_status_from_errno's "cannot read <what> <path>: <cause>". On success
 * the caller closes *out_fd; *out_size is the size of a regular file and 0
 * for anything else (a pipe, a device). out_size may be NULL. */
ty_status_t ty_file_open_read(const char *path, const char *what, int *out_fd,
                              uint64_t *out_size) TY_MUST_USE;

/* Whether something exists at `path`, for optional inputs (a model
 * folder's tokenizer.json): *out_exists is false only when it is absent
 * (ENOENT); any other failure to look is an error, never "absent". */
ty_status_t ty_file_probe(const char *path, bool *out_exists) TY_MUST_USE;

/* Reads a whole file (a regular file or a pipe) with the errors of
 * ty_file_open_read. The caller frees *out_data, which is NUL-terminated
 * (the NUL not counted in *out_size). */
ty_status_t ty_file_read_named(const char *path, const char *what, void **out_data,
                               size_t *out_size) TY_MUST_USE;

/* ty_file_read_named(path, "file", ...). */
ty_status_t ty_file_read_all(const char *path, void **out_data, size_t *out_size) TY_MUST_USE;

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
 * `path` (ty_file_create_error). */
ty_status_t ty_file_write_atomic(const char *path, const void *data, size_t size) TY_MUST_USE;

/* Creates `dir` and its missing parents (mode 0777 & umask). A file in the
 * way is FAILED_PRECONDITION naming it. */
ty_status_t ty_mkdir_parents(const char *dir) TY_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_FILE_H_ */
