/* The tokenizer of a `trainyard train` run: --tokenizer, else the data
 * folder's or the model folder's tokenizer.json. It is loaded and checked
 * against the data (SHA-256, vocabulary) and the model before training
 * starts, and its exact bytes are what every checkpoint gets, so a
 * checkpoint never carries a tokenizer that does not load or does not
 * match its token ids. */
#ifndef TY_APPS_TRAINYARD_TRAIN_RUN_TOKENIZER_H_
#define TY_APPS_TRAINYARD_TRAIN_RUN_TOKENIZER_H_

#include "hal/status.h"

struct ty_trainer_t;

/* Fills t->tokenizer, t->tokenizer_json(_size) and t->tokenizer_path, or
 * leaves them empty when no tokenizer is given or found. Needs t->train_data
 * and t->model_config. INVALID_ARGUMENT naming the file and both SHA-256
 * hashes or vocabulary sizes for a tokenizer other than the data's; the
 * loader's error, annotated, for one that does not load. */
ty_status_t ty_run_tokenizer_open(struct ty_trainer_t *t);

/* Releases what ty_run_tokenizer_open filled. */
void ty_run_tokenizer_close(struct ty_trainer_t *t);

#endif /* TY_APPS_TRAINYARD_TRAIN_RUN_TOKENIZER_H_ */
