/* Outputs that never destroy inputs. Every `trainyard` command that writes a
 * file or folder checks each output against its inputs here before it does
 * any work, so that `forward --out` naming the model's own
 * model.safetensors, or `data prepare --out` holding its --input, is
 * refused instead of done.
 *
 * Paths are compared by device and inode (so through symbolic links, hard
 * links and `..`); an output that does not exist yet by the folder it would
 * go into. An existing output file with several names is also compared with
 * the files of each input folder (two levels deep), so a hard link to the
 * model's model.safetensors is caught outside the model folder too. An output may not be an input, lie inside an input folder (a
 * command may read any file there: shards, tokenizer.json, ...), or, when
 * the command replaces the output folder whole, hold an input.
 *
 * All functions are thread-safe; errors are statuses naming both options
 * and paths; nothing is printed. */
#ifndef TY_APPS_TRAINYARD_FILES_OUT_PATHS_H_
#define TY_APPS_TRAINYARD_FILES_OUT_PATHS_H_

#include <stdbool.h>
#include <stddef.h>

#include "hal/status.h"

/* A path given to a command, with the option that gave it ("--model"). */
typedef struct ty_path_arg_t {
  const char *option;
  const char *path;
} ty_path_arg_t;

typedef struct ty_out_path_t {
  const char *option; /* "--out" */
  const char *path;
  const char *what;     /* named in errors: "safetensors file" (NULL: "file") */
  bool creates_parents; /* the command creates missing parent folders */
  bool replaces_folder; /* a folder the command replaces whole (data prepare) */
} ty_out_path_t;

/* INVALID_ARGUMENT naming both when `out` would overwrite or sit inside one
 * of `inputs` (or hold one, with replaces_folder); when the folder `out`
 * goes into is missing (or not a folder) and the command does not create
 * it, ty_file_create_error's status (NOT_FOUND, FAILED_PRECONDITION)
 * prefixed with the option. Inputs that are NULL, empty or missing are skipped:
 * the command reports those itself. */
ty_status_t ty_out_path_check(const ty_out_path_t *out, const ty_path_arg_t *inputs,
                              size_t input_count) TY_MUST_USE;

/* Whether `path` is `folder` or lies inside it. A `path` that does not exist
 * yet counts by its nearest existing parent. False when `folder` is not an
 * existing folder. */
bool ty_path_within(const char *path, const char *folder);

/* Whether two existing paths are the same file or folder. */
bool ty_path_same(const char *a, const char *b);

#endif /* TY_APPS_TRAINYARD_FILES_OUT_PATHS_H_ */
