/* Resuming `trainyard train`: trainer_state.json read strictly (every field
 * of the right type and range, errors naming the file), its progress checked
 * against itself, and the resumed configuration against the saved one:
 * what decides the data and the update sequence must not change; changed
 * hyperparameters (learning rate, schedule, ...) are allowed and noted. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/file.h"
#include "trainer.h"

#define TY_STATE_FILE "trainer_state.json"

/* trainer_state.json: progress and the configuration, a few kilobytes. */
static const ty_file_kind_t ty_trainer_state_kind = {
    .what = "trainer state", .max_bytes = 16 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS, .skip_bom = true};

/* An integer field >= min. */
static ty_status_t ty_state_int(const char *path, const json_t *j, const char *key, int64_t min,
                                int64_t *out) {
  const json_t *v = json_object_get(j, key);
  if (!json_is_integer(v)) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: \"%s\" is %s, not an integer", path, key,
                          v ? "of another type" : "missing");
  }
  int64_t x = (int64_t)json_integer_value(v);
  if (x < min) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: \"%s\" is %" PRId64 "; it must be >= %" PRId64,
                          path, key, x, min);
  }
  *out = x;
  return TY_OK;
}

/* A number field; finite and >= 0 when `non_negative`. */
static ty_status_t ty_state_real(const char *path, const json_t *j, const char *key,
                                 bool non_negative, double *out) {
  const json_t *v = json_object_get(j, key);
  if (!json_is_number(v)) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: \"%s\" is %s, not a number", path, key,
                          v ? "of another type" : "missing");
  }
  double x = json_number_value(v);
  if (non_negative && !(x >= 0 && isfinite(x))) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: \"%s\" is %g; it must be a number >= 0", path,
                          key, x);
  }
  *out = x;
  return TY_OK;
}

ty_status_t ty_trainer_read_state(const char *dir, ty_trainer_t *t, ty_trainer_saved_t *saved) {
  saved->seq_len = saved->train_rows = 0;
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/" TY_STATE_FILE, dir);
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_trainer_state_kind, &text, &size));
  json_error_t err;
  json_t *j = json_loadb(text, size, 0, &err);
  free(text);
  if (!j) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: unreadable trainer state (line %d: %s)", path,
                          err.line, err.text);
  }
  ty_status_t s = TY_OK;
  json_t *format = json_object_get(j, "format");
  if (!json_is_object(j) || !json_is_string(format) ||
      strcmp(json_string_value(format), "trainyard-trainer-state") ||
      !json_is_integer(json_object_get(j, "version")) ||
      json_integer_value(json_object_get(j, "version")) != 1) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: not a trainyard trainer state (version 1)", path);
  }
  if (!s) s = ty_state_int(path, j, "step", 0, &t->progress.step);
  if (!s) s = ty_state_int(path, j, "epoch", 0, &t->progress.epoch);
  if (!s) s = ty_state_int(path, j, "cursor", 0, &t->progress.cursor);
  if (!s) s = ty_state_int(path, j, "tokens_seen", 0, &t->progress.tokens_seen);
  if (!s) s = ty_state_real(path, j, "train_seconds", true, &t->progress.train_seconds);
  if (!s) s = ty_state_real(path, j, "loss", false, &t->progress.last_loss);
  /* Written since the progress checks below; older states lack them. */
  if (!s && json_object_get(j, "seq_len")) {
    s = ty_state_int(path, j, "seq_len", 1, &saved->seq_len);
  }
  if (!s && json_object_get(j, "train_rows")) {
    s = ty_state_int(path, j, "train_rows", 1, &saved->train_rows);
  }
  saved->run_id[0] = '\0';
  const json_t *run_id = json_object_get(j, "run_id");
  if (!s && run_id &&
      (!json_is_string(run_id) || !ty_ckpt_run_id_valid(json_string_value(run_id)))) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: \"run_id\" is not a run id (1 to 32 lowercase hex "
                       "digits)", path);
  }
  if (!s && run_id) snprintf(saved->run_id, sizeof(saved->run_id), "%s", json_string_value(run_id));
  saved->world_size = 1;
  if (!s && json_object_get(j, "world_size")) {
    s = ty_state_int(path, j, "world_size", 1, &saved->world_size);
  }
  if (!s && !json_is_object(json_object_get(j, "config"))) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: \"config\" is missing or not an object", path);
  }
  if (!s) {
    ty_train_config_defaults(&saved->config);
    s = ty_train_config_from_json(&saved->config, json_object_get(j, "config"));
    if (s) {
      ty_status_t d = ty_status_make(TY_CODE_DATA_LOSS, "%s: %s", path, ty_status_message(s));
      ty_status_free(s);
      s = d;
    }
  }
  json_decref(j);
  return s;
}

/* The progress fields must be able to follow from `step` steps of rps rows
 * of T tokens. Any data: the tokens fit, and the cursor and epoch fit the
 * steps. The data the state was saved with (same train rows): epoch and
 * cursor are exact, and tokens_seen lies between the rows read times T
 * (less the one padded row per epoch, without stored loss weights) and the
 * rows read times T. */
static ty_status_t ty_trainer_check_progress(const ty_trainer_t *t, const char *path,
                                             const ty_trainer_saved_t *saved) {
  const int64_t step = t->progress.step, rps = t->shape.rows_per_step;
  const int64_t T = saved->seq_len > t->shape.T ? saved->seq_len : t->shape.T;
  if (step == 0) {
    if (t->progress.epoch || t->progress.cursor || t->progress.tokens_seen) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: step 0 with epoch %" PRId64 ", cursor %" PRId64
                            " and tokens_seen %" PRId64 " (all must be 0 before any step)",
                            path, t->progress.epoch, t->progress.cursor, t->progress.tokens_seen);
    }
    return TY_OK;
  }
  int64_t hi = 0;
  if (__builtin_mul_overflow(step, rps, &hi) || __builtin_mul_overflow(hi, T, &hi)) {
    hi = INT64_MAX;
  }
  if (t->progress.cursor < rps || t->progress.cursor % rps ||
      t->progress.epoch > step - t->progress.cursor / rps) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: epoch %" PRId64 " and cursor %" PRId64
                          " cannot follow from step %" PRId64 " of %" PRId64 " rows each",
                          path, t->progress.epoch, t->progress.cursor, step, rps);
  }
  int64_t lo = 0;
  const int64_t rows = (int64_t)ty_dataset_row_count(t->feed.train_data);
  if (saved->train_rows == rows && (saved->seq_len == 0 || saved->seq_len == t->shape.T)) {
    const int64_t spe = (rows + rps - 1) / rps;
    const int64_t epoch = (step - 1) / spe, cursor = ((step - 1) % spe + 1) * rps;
    if (t->progress.epoch != epoch || t->progress.cursor != cursor) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: step %" PRId64 " puts the data at epoch %" PRId64
                            ", cursor %" PRId64 ", but the file says epoch %" PRId64
                            ", cursor %" PRId64,
                            path, step, epoch, cursor, t->progress.epoch, t->progress.cursor);
    }
    const int64_t read = epoch * rows + (cursor < rows ? cursor : rows);
    if (__builtin_mul_overflow(read, t->shape.T, &hi)) hi = INT64_MAX;
    if (!ty_dataset_has_loss_weights(t->feed.train_data)) lo = hi - (epoch + 1) * (t->shape.T - 1);
  }
  if (t->progress.tokens_seen < lo || t->progress.tokens_seen > hi) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: tokens_seen %" PRId64 " cannot follow from step %" PRId64
                          " (it must lie in [%" PRId64 ", %" PRId64 "] with %" PRId64
                          " rows of %" PRId64 " tokens per step)",
                          path, t->progress.tokens_seen, step, lo, hi, rps, t->shape.T);
  }
  return TY_OK;
}

/* Prints a note for every hyperparameter the resumed run changes. */
static void ty_trainer_note_change(void *user, const char *name, const char *was,
                                   const char *now) {
  const ty_trainer_t *t = user;
  if (t->par.rank != 0) return; /* one note per run, not per rank */
  fprintf(stderr,
          "trainyard train: note: --%s is %s; the run being resumed used %s (from step %" PRId64
          " on, updates follow the new value)\n",
          name, now, was, t->progress.step + 1);
}

ty_status_t ty_trainer_check_resume(const ty_trainer_t *t, const ty_trainer_saved_t *state,
                                    const char *resume_dir) {
  const ty_train_config_t *now = &t->cfg, *saved = &state->config;
  /* What decides the sequence of updates must not change across a resume. */
#define TY_SAME_S(f)                                                                         \
  if (strcmp(now->f, saved->f)) {                                                            \
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,                                       \
                          "cannot resume: --" #f " was '%s' and is now '%s'", saved->f, now->f); \
  }
#define TY_SAME_I(f)                                                                          \
  if (now->f != saved->f) {                                                                   \
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,                                        \
                          "cannot resume: --" #f " was %lld and is now %lld",                  \
                          (long long)saved->f, (long long)now->f);                             \
  }
  TY_SAME_S(preset) TY_SAME_I(max_positions) TY_SAME_S(dtype) TY_SAME_S(optimizer)
  TY_SAME_I(seed)
  /* The global batch decides the updates; how the ranks and micro-batches
   * split it does not (the rows and their order stay the same). */
  /* The replicas: the world over the pipeline stages (--pp), the
   * tensor-parallel ranks (--tp) and the context-parallel ranks (--cp),
   * which read the same rows. */
  const int64_t saved_pp = saved->pp > 0 ? saved->pp : 1;
  const int64_t saved_cp = saved->cp > 1 ? saved->cp : 1;
  const int64_t saved_dp =
      state->world_size / saved_pp / (saved->tp > 1 ? saved->tp : 1) / saved_cp;
  const int64_t was = saved->batch_size * saved->grad_accum * saved_dp;
  if (was != t->shape.rows_per_step) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "cannot resume: the global batch was %lld rows (%lld replicas x "
                          "--batch-size %lld x --grad-accum %lld) and is now %lld (%d x %lld x "
                          "%lld); keep replicas x batch size x accumulation the same (replicas: "
                          "ranks / (--pp x --tp x --cp))",
                          (long long)was, (long long)saved_dp,
                          (long long)saved->batch_size, (long long)saved->grad_accum,
                          (long long)t->shape.rows_per_step, t->par.dp, (long long)t->shape.B,
                          (long long)t->shape.accum);
  }
  const int64_t saved_tp = saved->tp > 1 ? saved->tp : 1;
  const bool layout = saved_tp != (now->tp > 1 ? now->tp : 1) ||
                      saved_pp != (now->pp > 0 ? now->pp : 1) ||
                      saved_cp != (now->cp > 1 ? now->cp : 1);
  if (t->par.rank == 0 && !layout && (saved_dp != t->par.dp || saved->batch_size != t->shape.B)) {
    fprintf(stderr,
            "trainyard train: note: the global batch of %lld rows is now split as %d ranks x "
            "%lld x %lld (was %lld x %lld x %lld): the same updates up to rounding\n",
            (long long)was, t->par.dp, (long long)t->shape.B, (long long)t->shape.accum,
            (long long)saved_dp, (long long)saved->batch_size,
            (long long)saved->grad_accum);
  }
  if (t->par.rank == 0 && layout) {
    fprintf(stderr,
            "trainyard train: note: the global batch of %lld rows is now split as %d replicas "
            "x %lld x %lld over %d ranks (--tp %lld --pp %lld --cp %lld; was %lld x %lld x %lld "
            "over %lld ranks, --tp %lld --pp %lld --cp %lld): the same updates up to "
            "rounding\n",
            (long long)was, t->par.dp, (long long)t->shape.B, (long long)t->shape.accum,
            t->par.world, (long long)now->tp, (long long)now->pp,
            (long long)(now->cp > 1 ? now->cp : 1), (long long)saved_dp,
            (long long)saved->batch_size, (long long)saved->grad_accum,
            (long long)state->world_size, (long long)saved_tp, (long long)saved_pp,
            (long long)saved_cp);
  }
#undef TY_SAME_S
#undef TY_SAME_I
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/" TY_STATE_FILE, resume_dir);
  TY_RETURN_IF_ERROR(ty_trainer_check_progress(t, path, state));
  const int64_t rows = (int64_t)ty_dataset_row_count(t->feed.train_data);
  if (t->par.rank == 0 && state->train_rows && state->train_rows != rows) {
    fprintf(stderr,
            "trainyard train: note: the data has %" PRId64 " train rows; the run being resumed "
            "had %" PRId64 ": from here its order differs from an uninterrupted run's\n",
            rows, state->train_rows);
  }
  /* Allowed, but never silent: the learning rate, its schedule (whose
   * length follows --max-steps/--epochs) and the update's other knobs. */
  static const char *const changeable[] = {
      "lr",    "min_lr", "warmup_steps", "schedule", "max_steps", "epochs",  "weight_decay",
      "beta1", "beta2",  "eps",          "momentum", "clip",      "dropout", "decay_all",
      /* Adafactor's (the memory levers change no update: not noted) */
      "relative_step", "scale_parameter", "warmup_init", "clip_threshold", "decay_rate",
      "adafactor_eps1", "adafactor_eps2",
      /* the summation order (trainer_det.c): rounding only, but said */
      "deterministic", NULL};
  ty_train_config_diff(saved, now, changeable, ty_trainer_note_change, (void *)t);
  return TY_OK;
}
