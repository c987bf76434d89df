/* The summation tree of `train --deterministic` kept on the device
 * (docs/design-notes.md "Reduction orders: the training tree"): the same
 * binary counter as train_tree.h, the same f32 adds in the same order, but
 * the partials are STATE values "<param>.tree.<k>" of small graphs that
 * share the train session's state, so a row's gradients never leave the
 * device. The host keeps only the levels and the losses (a train_tree.h
 * tree of no floats) and picks which graph runs. Not thread-safe. */
#ifndef TY_APPS_TRAINYARD_TRAIN_TREE_DEV_H_
#define TY_APPS_TRAINYARD_TRAIN_TREE_DEV_H_

#include <stdint.h>

#include "graph/runtime/session.h"
#include "hal/status.h"

typedef struct ty_train_tree_dev_t ty_train_tree_dev_t;

/* Builds the graphs that `rows` leaves a step need (a power of two or not)
 * over the accumulators "<params[i]>.grad_accum" (f32 STATE values of
 * `train`), as sessions on `device` (train's) that share its state;
 * `options` as the train session's (share_state_with is replaced). For one
 * row nothing is built: the leaf is the sum. The caller keeps `train` alive
 * until destroy. Errors: the session's (a backend that refuses "add", a
 * mixed session), INVALID_ARGUMENT for an accumulator
 * that is not f32; the caller may then sum on the host instead. */
ty_status_t ty_train_tree_dev_create(ty_device_t *device, ty_session_t *train,
                                     const ty_session_options_t *options,
                                     const char *const *params, uint32_t count, int64_t rows,
                                     ty_train_tree_dev_t **out_tree);
void ty_train_tree_dev_destroy(ty_train_tree_dev_t *tree);

/* The tree's device memory (its slots, bytes) and the graphs built. */
uint64_t ty_train_tree_dev_bytes(const ty_train_tree_dev_t *tree);
uint32_t ty_train_tree_dev_graphs(const ty_train_tree_dev_t *tree);

/* Forgets the partials: the next push is the step's first leaf. */
void ty_train_tree_dev_reset(ty_train_tree_dev_t *tree);
/* The leaf is in the accumulators (a row's gradients): pushes it with its
 * loss, merging (older + newer) while the newest partials hold as many
 * leaves, and sets the accumulators back to zero (not after the last leaf:
 * finish overwrites them). OUT_OF_RANGE past the
 * `rows` leaves the tree was built for. */
ty_status_t ty_train_tree_dev_push(ty_train_tree_dev_t *tree, double loss);
/* Folds what is left, oldest first ((S0 + S1) + S2), into the
 * accumulators, and gives the summed loss. */
ty_status_t ty_train_tree_dev_finish(ty_train_tree_dev_t *tree, double *out_loss);

#endif /* TY_APPS_TRAINYARD_TRAIN_TREE_DEV_H_ */
