/* What `trainyard train` reports: the start banner with the resolved
 * configuration, one line per step (live on a terminal), metrics.jsonl,
 * TensorBoard event files, and summary.txt at the end. */
#ifndef TY_APPS_TRAINYARD_TRAIN_METRICS_H_
#define TY_APPS_TRAINYARD_TRAIN_METRICS_H_

#include "hal/status.h"

struct ty_trainer_t;

/* Opens metrics.jsonl (truncated back to the resumed step when resuming)
 * and a TensorBoard event file in <out>/tensorboard. */
ty_status_t ty_train_metrics_open(struct ty_trainer_t *t, bool resuming);
void ty_train_metrics_close(struct ty_trainer_t *t);

/* Prints the resolved configuration and what will run. */
void ty_train_metrics_banner(struct ty_trainer_t *t, const char *resume_dir);

/* After each optimizer step: the step line and the metrics records. */
void ty_train_metrics_step(struct ty_trainer_t *t, double loss, double grad_norm, double lr,
                           double tokens_per_s, double seconds_per_step);

/* After an evaluation (t->last_val_loss). */
void ty_train_metrics_eval(struct ty_trainer_t *t);

/* Ends a live terminal line (before other output). */
void ty_train_metrics_line_end(struct ty_trainer_t *t);

/* Writes summary.txt and prints its last lines. */
ty_status_t ty_train_metrics_summary(struct ty_trainer_t *t, double wall_seconds);

#endif /* TY_APPS_TRAINYARD_TRAIN_METRICS_H_ */
