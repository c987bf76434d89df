/* --eval-data / --eval-choices / --min-eval-acc of `trainyard train`: the
 * task accuracy of the weights being trained, scored exactly as `trainyard
 * eval` scores a checkpoint (eval/eval.h) on the training device, sharing
 * the training session's parameters (no copy). Logged at every evaluation
 * and at the end to metrics.jsonl ({"step", "eval_acc", "eval_exact_match"
 * or "eval_choice_acc", "eval_first_token", "eval_logprob"}) and TensorBoard
 * (eval/accuracy, eval/first_token_match, eval/mean_logprob), beside the
 * validation loss; the final accuracy against --min-eval-acc goes into
 * summary.txt. */
#ifndef TY_APPS_TRAINYARD_TRAIN_EVAL_H_
#define TY_APPS_TRAINYARD_TRAIN_EVAL_H_

#include <stdbool.h>
#include <stdio.h>

#include "hal/status.h"

struct ty_trainer_t;

/* With cfg.eval_data: reads and checks the whole set (FILE:LINE errors)
 * and builds its graphs on the training device. Needs t->s_train. */
ty_status_t ty_train_eval_open(struct ty_trainer_t *t);
void ty_train_eval_close(struct ty_trainer_t *t);

/* Scores the current weights (step t->step) and logs the numbers; a no-op
 * without --eval-data or when this step was scored already. */
ty_status_t ty_train_eval_run(struct ty_trainer_t *t);

/* The lines of summary.txt (nothing without --eval-data). */
void ty_train_eval_summary(const struct ty_trainer_t *t, FILE *f);

/* FAILED_PRECONDITION with both numbers when the last accuracy is below
 * --min-eval-acc (the caller has saved the checkpoint and the summary). */
ty_status_t ty_train_eval_check(const struct ty_trainer_t *t);

#endif /* TY_APPS_TRAINYARD_TRAIN_EVAL_H_ */
