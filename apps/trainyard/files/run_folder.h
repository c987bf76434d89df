/* The run folder: the --out of `trainyard train` (and of each backend's run
 * under `trainyard compare`), which holds one training run.
 *
 * This library owns, so that train, compare and later control agree:
 * - the names a run writes there (below): "does this folder hold a run" and
 *   "what does --overwrite delete" have one answer;
 * - the lock: .trainyard.lock, flock()ed for the run's whole life, with the
 *   holder's pid and host inside, so that two runs never share a folder;
 * - the clean-up of what interrupted saves left, done only under the lock,
 *   so never a live run's save in progress.
 *
 * A run writes, and --overwrite deletes, exactly:
 *   checkpoint-<step>/     config.json, model.safetensors (or
 *                          model.safetensors.index.json and
 *                          model-<i>-of-<n>.safetensors), tokenizer.json,
 *                          optimizer.safetensors, trainer_state.json
 *   tensorboard/           events.out.tfevents.* files
 *   metrics.jsonl, summary.txt, train_config.json, device_report.txt
 *   while saving:          .checkpoint-<step>.tmp-<pid>/, <name>.tmp.<pid>
 *   while running:         .trainyard.control.sock (control/control.h), which
 *                          the next run replaces under the lock when a killed
 *                          run left it; --overwrite leaves it to that
 * Anything else in the folder is the user's: it never makes the folder "hold
 * a run" and is never deleted; a checkpoint or tensorboard folder holding
 * anything else makes --overwrite refuse, deleting nothing.
 *
 * Errors are statuses naming the folder; nothing is printed. A run folder
 * object is used by one thread at a time. */
#ifndef TY_APPS_TRAINYARD_FILES_RUN_FOLDER_H_
#define TY_APPS_TRAINYARD_FILES_RUN_FOLDER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

#define TY_RUN_LOCK_NAME ".trainyard.lock"
#define TY_RUN_CKPT_PREFIX "checkpoint-"
#define TY_RUN_CKPT_TMP_PREFIX ".checkpoint-"

typedef struct ty_run_folder_t ty_run_folder_t;

/* A path the run reads (--data, --model, --resume, ...): --overwrite never
 * deletes it or anything that holds it. */
typedef struct ty_run_folder_input_t {
  const char *option; /* "--model" */
  const char *path;
} ty_run_folder_input_t;

/* Creates `path` (and missing parents) and takes its lock without waiting.
 * FAILED_PRECONDITION naming the holder's pid and host when another process
 * holds it (the folder is left as it is), or when `path` is not a folder.
 * On a file system without flock() the folder opens unlocked
 * (ty_run_folder_locked() says so). The caller owns *out_folder. */
ty_status_t ty_run_folder_open(const char *path, ty_run_folder_t **out_folder) TY_MUST_USE;

/* Releases the lock and frees the object. NULL is a no-op. */
void ty_run_folder_close(ty_run_folder_t *folder);

const char *ty_run_folder_path(const ty_run_folder_t *folder);

/* False when the file system refused flock(): concurrent runs are then not
 * detected. */
bool ty_run_folder_locked(const ty_run_folder_t *folder);

/* Removes what interrupted saves left (.checkpoint-*.tmp-* folders and
 * <name>.tmp.<pid> files of the run's files). Under the lock no other run
 * writes here; unlocked, only leftovers of processes that are gone on this
 * host are removed. */
ty_status_t ty_run_folder_clean_partial(ty_run_folder_t *folder) TY_MUST_USE;

/* The steps of the complete checkpoints (those with trainer_state.json),
 * ascending. The caller frees *out_steps (NULL when none). */
ty_status_t ty_run_folder_checkpoints(const ty_run_folder_t *folder, int64_t **out_steps,
                                      size_t *out_count) TY_MUST_USE;

/* The run's files in the folder, as a short text for messages
 * ("checkpoint-20, metrics.jsonl, tensorboard/"); "" when it holds no run.
 * FAILED_PRECONDITION when a name a run writes is taken by something of
 * another kind (a folder named summary.txt, a symbolic link). */
ty_status_t ty_run_folder_describe(const ty_run_folder_t *folder, char *out_text,
                                   size_t capacity) TY_MUST_USE;

/* Deletes the run's files, and nothing else. Refuses with
 * FAILED_PRECONDITION, having deleted nothing, when a checkpoint or
 * tensorboard folder holds an entry a run does not write, or when one of
 * `inputs` is or lies inside what would be deleted. */
ty_status_t ty_run_folder_clear(ty_run_folder_t *folder, const ty_run_folder_input_t *inputs,
                                size_t input_count) TY_MUST_USE;

/* Removes the checkpoint of `step` (pruning). */
ty_status_t ty_run_folder_remove_checkpoint(ty_run_folder_t *folder, int64_t step) TY_MUST_USE;

/* Removes a file or folder tree without following symbolic links. A missing
 * path is OK. */
ty_status_t ty_run_folder_remove_tree(const char *path) TY_MUST_USE;

#endif /* TY_APPS_TRAINYARD_FILES_RUN_FOLDER_H_ */
