/* `trainyard control` on the training side: the run's control server
 * (control/control.h) started beside the loop, its snapshot updated after
 * every step, and the requests it posted acted on at step boundaries:
 * save (a checkpoint, the run goes on), stop (a checkpoint, exit 0), abort
 * (exit 1 without saving; the previous checkpoint stays as it was).
 *
 * Under mpirun, rank 0 alone opens the server; the requests it takes reach
 * every rank before any acts (the request bits ride in the step's loss
 * all-reduce, and every rank calls ty_train_control_poll after the step),
 * so all ranks save, stop or abort after the same step. */
#ifndef TY_APPS_TRAINYARD_TRAIN_CONTROL_H_
#define TY_APPS_TRAINYARD_TRAIN_CONTROL_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"

struct ty_trainer_t;

/* Starts the server. An unusable default registry (no $XDG_RUNTIME_DIR
 * and a /tmp/trainyard-<uid> of someone else's) is a warning on stderr and
 * the run goes on uncontrolled; a --control-registry that cannot be used is
 * an error. */
ty_status_t ty_train_control_open(struct ty_trainer_t *t);
/* The --control-registry folder checked (created if missing, this user's
 * alone) before the run folder is touched; ty_train_control_open would
 * otherwise refuse it only after the run has started writing. */
ty_status_t ty_train_control_check(struct ty_trainer_t *t);
void ty_train_control_close(struct ty_trainer_t *t);

/* After each step: what list and status show. */
void ty_train_control_update(struct ty_trainer_t *t, double tokens_per_s, double seconds_per_step);

/* At the end of a step's work: the requests waiting on rank 0 (0 on the
 * other ranks), which the step's loss all-reduce carries to every rank. */
uint32_t ty_train_control_take(struct ty_trainer_t *t);

/* At a step boundary (t->control_bits): saves for `save` (unless *saved_step is this step
 * already) and answers; sets *out_stop for `stop` (the caller saves, then
 * calls ty_train_control_stopped); ABORTED for `abort`, answered first. */
ty_status_t ty_train_control_poll(struct ty_trainer_t *t, int64_t *saved_step, bool *out_stop);

/* Answers the `stop` requests once the run has saved (or failed to). */
void ty_train_control_stopped(struct ty_trainer_t *t, ty_status_t save_status);

#endif /* TY_APPS_TRAINYARD_TRAIN_CONTROL_H_ */
