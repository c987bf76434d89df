/* Which run and which save a checkpoint's parts come from. A training run
 * gets a random run id when it starts fresh and keeps it across resumes;
 * every part of a checkpoint-<step>/ folder carries that id and the step:
 * trainer_state.json ("run_id", "step"), the model's and each optimizer
 * file's safetensors metadata (trainyard_run_id, trainyard_step) and the
 * ZeRO-1 index's metadata (run_id, step, with world_size against its
 * shards). `train --resume` and `ckpt merge`/`split` check them before
 * anything is loaded or written, so parts of two runs or two saves are
 * refused naming both files instead of resumed as one.
 *
 * Checkpoints written before run ids have none anywhere: they match each
 * other (no id equals no id) and load as before; a part with an id beside
 * one without is a mix, refused (docs/formats.md).
 *
 * Thread-safe; errors are statuses naming the files; nothing is printed. */
#ifndef TY_APPS_TRAINYARD_FILES_CKPT_IDENTITY_H_
#define TY_APPS_TRAINYARD_FILES_CKPT_IDENTITY_H_

#include <stdint.h>

#include "hal/status.h"
#include "models/safetensors.h"

#define TY_CKPT_RUN_ID_KEY "trainyard_run_id" /* safetensors metadata keys */
#define TY_CKPT_STEP_KEY "trainyard_step"
#define TY_CKPT_RUN_ID_CAP 40 /* 32 hex digits and the NUL, with room */

typedef struct ty_ckpt_identity_t {
  char run_id[TY_CKPT_RUN_ID_CAP]; /* "" for a checkpoint from before run ids */
  int64_t step;
  char source[4096]; /* the file that says so, for messages */
} ty_ckpt_identity_t;

/* A new run id: 128 random bits as 32 lowercase hex digits. */
ty_status_t ty_ckpt_run_id_new(char out[TY_CKPT_RUN_ID_CAP]) TY_MUST_USE;

/* Whether `id` can be a run id (1 to 32 lowercase hex digits). */
int ty_ckpt_run_id_valid(const char *id);

/* The identity <dir>/trainer_state.json states; NOT_FOUND when the folder
 * has none, DATA_LOSS naming it when its run_id or step is malformed. */
ty_status_t ty_ckpt_identity_of_state(const char *dir, ty_ckpt_identity_t *out) TY_MUST_USE;

/* Every model file, every optimizer file and the optimizer index of `dir`
 * against `want`: DATA_LOSS naming the part and want->source with both
 * identities when one differs; DATA_LOSS when the index's world_size
 * (or replicas) disagrees with the shards present. */
ty_status_t ty_ckpt_identity_check(const char *dir, const ty_ckpt_identity_t *want) TY_MUST_USE;

/* Opens the optimizer state of checkpoint folder `dir` (one file, or the
 * ZeRO-1 shards gathered through their index: ty_safetensors_open_set
 * "optimizer") and checks every part of the folder against one identity,
 * that of its trainer_state.json or, without one, of its first optimizer
 * file; *out_id gets it. What `ckpt merge`, `split` and `diff` read. On
 * success *out_set is the caller's (ty_safetensors_set_close); on error it
 * is NULL: the open's errors (NOT_FOUND naming both file names when the
 * folder has no optimizer state) or the check's DATA_LOSS. */
ty_status_t ty_ckpt_optimizer_open(const char *dir, ty_safetensors_set_t **out_set,
                                   ty_ckpt_identity_t *out_id) TY_MUST_USE;

#endif /* TY_APPS_TRAINYARD_FILES_CKPT_IDENTITY_H_ */
