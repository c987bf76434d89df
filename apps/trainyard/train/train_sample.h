/* --sample-tokens / --sample-prompt of `trainyard train`: a greedy sample
 * from the weights being trained, made with the generation engine
 * (models/generator.h) on the training device, sharing the training
 * session's parameters (no copy). One sample at every evaluation and every
 * checkpoint (once per step) and at the end; printed to stderr and written
 * to metrics.jsonl as {"step", "sample_prompt_ids", "sample_ids", and
 * "sample_prompt"/"sample" text when the run has a tokenizer}. */
#ifndef TY_APPS_TRAINYARD_TRAIN_SAMPLE_H_
#define TY_APPS_TRAINYARD_TRAIN_SAMPLE_H_

#include "hal/status.h"

struct ty_trainer_t;

/* With cfg.sample_tokens > 0: encodes the prompt (--sample-prompt through
 * the run's tokenizer; without one the sample starts at the data's
 * end-of-text token) and builds the generator on the training device.
 * Needs t->s_train. INVALID_ARGUMENT for a prompt without a tokenizer, or
 * a prompt + --sample-tokens longer than the model's positions; the
 * device's error when it cannot run the generation graphs. */
ty_status_t ty_train_sample_open(struct ty_trainer_t *t);
void ty_train_sample_close(struct ty_trainer_t *t);

/* Generates, prints and logs one sample of the current weights (step
 * t->step). A no-op without --sample-tokens or when this step already has
 * one. */
ty_status_t ty_train_sample_run(struct ty_trainer_t *t);

#endif /* TY_APPS_TRAINYARD_TRAIN_SAMPLE_H_ */
