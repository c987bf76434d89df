/* `train --check-numerics[=every:N]` (trainer_numerics.c): a second session
 * of the train step with every intermediate exposed, sharing the step's
 * state, runs the checked steps; the sampled mode keeps a host copy of the
 * state before each checked step so that a step whose loss turns non-finite
 * between two checked ones can be replayed and checked. */
#ifndef TY_APPS_TRAINYARD_TRAINER_NUMERICS_H_
#define TY_APPS_TRAINYARD_TRAINER_NUMERICS_H_

#include <stdbool.h>

#include "trainer.h"

/* Builds and compiles the checked step (after ty_trainer_build). Nothing
 * when the option is off. FAILED_PRECONDITION for the layouts it does not
 * cover (several ranks, --grad-accum > 1). */
ty_status_t ty_trainer_numerics_open(ty_trainer_t *t);
void ty_trainer_numerics_close(ty_trainer_t *t);

/* Whether step t->progress.step + 1 is checked; in the sampled mode it first copies
 * the state and the data position (the point a replay starts from). */
ty_status_t ty_trainer_numerics_begin(ty_trainer_t *t, bool *out_checked);

/* After a checked step of `seconds`: the first non-finite node, reported on
 * stderr and returned as ABORTED; OK when all is finite. `plain_seconds`
 * (a plain step's time, 0 if none yet) makes the one line on the cost. */
ty_status_t ty_trainer_numerics_after(ty_trainer_t *t, double seconds);
/* The next step runs checked (on) or plainly (a replay's steps). */
void ty_trainer_numerics_arm(ty_trainer_t *t, bool on);
/* Records a plain step's time (for the cost line). */
void ty_trainer_numerics_plain(ty_trainer_t *t, double seconds);

/* The sampled mode after a non-finite loss at step `bad_step` (1-based, not
 * checked): puts back the state and data position of the last checked
 * step's start. Returns in *out_replay the first step to run again; the
 * caller runs steps up to bad_step - 1 plainly and bad_step checked.
 * FAILED_PRECONDITION when there is no copy (cannot happen after step 1). */
ty_status_t ty_trainer_numerics_rewind(ty_trainer_t *t, int64_t *out_replay);

#endif /* TY_APPS_TRAINYARD_TRAINER_NUMERICS_H_ */
