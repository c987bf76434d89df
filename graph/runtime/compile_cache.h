/* The on-disk compile cache of sessions (its file helpers, whole-file reads
 * and atomic writes, are hal/file.h's).
 *
 * An entry is keyed by the graph hash, the backend name and version, the
 * device URI (for a compile-then-run device it names the target) and the
 * compile options; its file name is the SHA-256 of that key text:
 *
 *   <dir>/compile-v1/<backend>/<sha256(key)>.art    an executable, in the
 *                                                   backend's artifact format
 *   <dir>/compile-v1/<backend>/<sha256(key)>.fail   a failure record
 *
 * Entries are committed atomically (a unique temporary file, fsync, rename,
 * fsync of the folder), so processes racing on one key all succeed and leave
 * one whole entry. Only backends with executable_serialize/deserialize store
 * executables; for the others the folder keeps failure records alone (their
 * executables live in the in-process cache of the device). Not thread-safe
 * within a process; safe across processes. */
#ifndef TY_GRAPH_COMPILE_CACHE_H_
#define TY_GRAPH_COMPILE_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/file.h" /* the file helpers the cache and the apps share */
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default cache folder: $XDG_CACHE_HOME/trainyard, else
 * $HOME/.cache/trainyard; "" when neither variable is set. */
void ty_compile_cache_default_dir(char *out, size_t capacity);

/* Compiled artifacts (cache entries and `--artifact` files), read with
 * ty_file_read (hal/file.h): binary, capped at 1 GiB unless
 * TRAINYARD_MAX_ARTIFACT_BYTES says otherwise. */
extern const ty_file_kind_t ty_artifact_file_kind;

/* A warning for the app to print, once, when the cache folder `dir` (or,
 * before it exists, the folder that will hold it) can be changed by users
 * other than this one and root (hal/path_trust.h's rule): its entries are
 * loaded as compiled executables, so whoever can write there chooses what
 * a run executes. Library code does not print; this gives the text. False
 * (*out "") when the folder passes or `dir` is NULL or "" (no cache). */
bool ty_compile_cache_dir_warning(const char *dir, char *out, size_t capacity);

/* Paths of an entry: <dir>/compile-v1/<backend>/<sha256(key)><suffix>. The
 * caller frees *out_path. */
ty_status_t ty_compile_cache_path(const char *dir, const char *backend, const char *key,
                                  const char *suffix, char **out_path);

/* Failure records: a code and a message. Writing one is best effort (a
 * read-only cache never fails a compile); reading gives the status the
 * compile returned, annotated with where it came from, or OK when there is
 * no record. */
void ty_compile_cache_write_failure(const char *path, const char *key, ty_status_t failure);
ty_status_t ty_compile_cache_read_failure(const char *path);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_COMPILE_CACHE_H_ */
