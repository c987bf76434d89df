/* The training loop's side of `trainyard control` (train_control.h). */
#include "train_control.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "control/control.h"
#include "train_metrics.h"
#include "trainer.h"

ty_status_t ty_train_control_open(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  /* The registry first, on its own: a failure there is --control-registry's,
   * one after it (the socket in --out) is the run folder's. */
  char registry[4096];
  ty_status_t s = ty_control_registry_dir(c->control_registry, registry, sizeof(registry));
  if (s && c->control_registry[0]) {
    s = ty_status_annotate(s, "--control-registry %s", c->control_registry);
  } else if (!s) {
    json_t *config = ty_train_config_to_json(c);
    ty_control_server_options_t o = {.out_dir = c->out, .registry = c->control_registry,
                                     .backend = ty_device_label(t->device), .config = config};
    s = ty_control_server_start(&o, &t->report.control);
    json_decref(config);
    if (s) s = ty_status_annotate(s, "--out %s", c->out);
  }
  if (s && !c->control_registry[0]) {
    /* Control is a convenience: without a registry asked for, what keeps
     * it from this run does not stop the run, but says so. */
    fprintf(stderr, "trainyard train: warning: 'trainyard control' cannot reach this run: %s\n",
            ty_status_message(s));
    ty_status_free(s);
    return TY_OK;
  }
  return s;
}

ty_status_t ty_train_control_check(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  if (!c->control_registry[0]) return TY_OK; /* the default: a warning at most */
  char registry[4096];
  return ty_status_annotate(
      ty_control_registry_dir(c->control_registry, registry, sizeof(registry)),
      "--control-registry %s", c->control_registry);
}

void ty_train_control_close(ty_trainer_t *t) {
  ty_control_server_stop(t->report.control);
  t->report.control = NULL;
}

void ty_train_control_update(ty_trainer_t *t, double tokens_per_s, double seconds_per_step) {
  if (!t->report.control) return;
  ty_control_progress_t p = {
      .step = t->progress.step,
      .total_steps = t->shape.total_steps,
      .epoch = t->progress.epoch,
      .loss = t->progress.last_loss,
      .val_loss = t->progress.last_val_loss,
      .eval_acc = t->progress.last_eval_acc,
      .tokens_per_s = tokens_per_s,
      .eta_s = (double)(t->shape.total_steps - t->progress.step) * seconds_per_step};
  ty_control_server_update(t->report.control, &p);
}

static json_t *ty_train_control_reply(const ty_trainer_t *t, const char *message) {
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/checkpoint-%lld", t->cfg.out, (long long)t->progress.step);
  return json_pack("{s:I, s:s, s:s}", "step", (json_int_t)t->progress.step, "checkpoint", path,
                   "message", message);
}

uint32_t ty_train_control_take(ty_trainer_t *t) {
  return t->par.rank == 0 ? ty_control_server_take(t->report.control) : 0;
}

ty_status_t ty_train_control_poll(ty_trainer_t *t, int64_t *saved_step, bool *out_stop) {
  /* Rank 0 serves the socket; its requests came to every rank with the
   * step's loss (ty_trainer_step), so every rank acts on them here. */
  uint32_t bits = t->report.control_bits;
  t->report.control_bits = 0;
  if (!bits) return TY_OK;
  if (t->par.rank == 0) ty_train_metrics_line_end(t);
  if (bits & TY_CONTROL_ABORT) {
    if (t->par.rank == 0) {
      fprintf(stderr, "trainyard train: abort requested by 'trainyard control' after step "
              "%lld: exiting without saving\n", (long long)t->progress.step);
    }
    json_t *r = json_pack("{s:I, s:s}", "step", (json_int_t)t->progress.step, "message",
                          "aborting without a checkpoint");
    ty_control_server_reply(t->report.control, TY_CONTROL_ABORT, true, r);
    json_decref(r);
    t->report.control_abort = true; /* every rank ends here: no MPI_Abort needed */
    return ty_status_make(TY_CODE_ABORTED, "aborted by 'trainyard control abort' after step "
                          "%lld: no checkpoint saved; the earlier checkpoints in %s are intact",
                          (long long)t->progress.step, t->cfg.out);
  }
  ty_status_t s = TY_OK;
  if (bits & TY_CONTROL_SAVE) {
    if (t->par.rank == 0) {
      fprintf(stderr, "trainyard train: save requested by 'trainyard control' after step "
              "%lld\n", (long long)t->progress.step);
    }
    if (*saved_step != t->progress.step)
      s = ty_trainer_save_all(t, "the checkpoint 'control save' asked");
    if (!s) *saved_step = t->progress.step;
    json_t *r = ty_train_control_reply(t, s ? ty_status_message(s) : "saved; the run goes on");
    ty_control_server_reply(t->report.control, TY_CONTROL_SAVE, !s, r);
    json_decref(r);
  }
  if (!s && (bits & TY_CONTROL_STOP)) *out_stop = true;
  return s;
}

void ty_train_control_stopped(ty_trainer_t *t, ty_status_t save_status) {
  json_t *r = ty_train_control_reply(t, save_status ? ty_status_message(save_status)
                                                    : "saved; stopping");
  ty_control_server_reply(t->report.control, TY_CONTROL_STOP, !save_status, r);
  json_decref(r);
}
