/* The fixed summation tree of `train --deterministic` (docs/design-notes.md
 * "Reduction orders"): leaves (one training row's gradient set and loss)
 * are pushed in global row order and summed as a binary counter, so the
 * bits of the sum depend on the leaves alone, never on how ranks or
 * micro-batches split them. Not thread-safe; pure host memory. */
#ifndef TY_APPS_TRAINYARD_TRAIN_TREE_H_
#define TY_APPS_TRAINYARD_TRAIN_TREE_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

/* At most 2^63 leaves: one partial per bit, plus the leaf being pushed. */
#define TY_TRAIN_TREE_SLOTS 65

typedef struct ty_train_tree_t {
  size_t count;                          /* f32 elements of a leaf */
  int depth;                             /* partials held */
  uint32_t level[TY_TRAIN_TREE_SLOTS];   /* partial k sums 2^level[k] leaves */
  double loss[TY_TRAIN_TREE_SLOTS];      /* each partial's summed loss */
  float *slot[TY_TRAIN_TREE_SLOTS];      /* allocated as first needed */
} ty_train_tree_t;

/* An empty tree of leaves of `count` floats (no memory yet). */
void ty_train_tree_init(ty_train_tree_t *tree, size_t count);
/* Frees every slot. */
void ty_train_tree_deinit(ty_train_tree_t *tree);
/* Forgets the partials (keeps the memory): the next step's first leaf. */
void ty_train_tree_reset(ty_train_tree_t *tree);
/* Where the next leaf's `count` floats go (fill it, then push): *out_leaf.
 * RESOURCE_EXHAUSTED when the slot cannot be allocated. */
ty_status_t ty_train_tree_next(ty_train_tree_t *tree, float **out_leaf);
/* Pushes the leaf written at ty_train_tree_next's pointer, as a partial of
 * 2^level leaves (0: one leaf; a rank's whole partial: log2 of its leaves),
 * with its loss: while the newest partial below holds as many leaves, the
 * two merge as (older + newer), elementwise f32 adds. */
void ty_train_tree_push(ty_train_tree_t *tree, uint32_t level, double loss);
/* Folds what is left, largest (oldest) first: ((S_big + S_mid) + S_small),
 * and gives the sum (owned by the tree, valid until the next push or
 * reset; NULL for an empty tree) and its loss. The tree then holds that
 * one partial. */
const float *ty_train_tree_finish(ty_train_tree_t *tree, double *out_loss);

#endif /* TY_APPS_TRAINYARD_TRAIN_TREE_H_ */
