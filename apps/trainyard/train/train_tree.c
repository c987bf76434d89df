/* The binary-counter summation tree of `train --deterministic`
 * (train_tree.h). */
#include "train_tree.h"

#include <stdlib.h>
#include <string.h>

void ty_train_tree_init(ty_train_tree_t *tree, size_t count) {
  memset(tree, 0, sizeof(*tree));
  tree->count = count;
}

void ty_train_tree_deinit(ty_train_tree_t *tree) {
  for (int k = 0; k < TY_TRAIN_TREE_SLOTS; ++k) free(tree->slot[k]);
  memset(tree, 0, sizeof(*tree));
}

void ty_train_tree_reset(ty_train_tree_t *tree) { tree->depth = 0; }

ty_status_t ty_train_tree_next(ty_train_tree_t *tree, float **out_leaf) {
  *out_leaf = NULL;
  if (tree->depth >= TY_TRAIN_TREE_SLOTS) {
    return ty_status_make(TY_CODE_OUT_OF_RANGE, "the summation tree is full (%d partials)",
                          tree->depth);
  }
  float **slot = &tree->slot[tree->depth];
  if (!*slot) {
    *slot = malloc((tree->count ? tree->count : 1) * sizeof(float));
    if (!*slot) {
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                            "out of host memory for a partial gradient sum of %zu floats",
                            tree->count);
    }
  }
  *out_leaf = *slot;
  return TY_OK;
}

/* a = a + b, elementwise, in f32 (the compiler may not contract or
 * reassociate: one IEEE add per element). */
static void ty_add_into(float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] = a[i] + b[i];
}

void ty_train_tree_push(ty_train_tree_t *tree, uint32_t level, double loss) {
  int k = tree->depth;
  tree->level[k] = level;
  tree->loss[k] = loss;
  /* carry: the newest partial merges into the older one of its size */
  while (k > 0 && tree->level[k - 1] == tree->level[k]) {
    ty_add_into(tree->slot[k - 1], tree->slot[k], tree->count);
    tree->loss[k - 1] = tree->loss[k - 1] + tree->loss[k];
    tree->level[k - 1]++;
    --k; /* slot k's memory takes the next leaf */
  }
  tree->depth = k + 1;
}

const float *ty_train_tree_finish(ty_train_tree_t *tree, double *out_loss) {
  *out_loss = 0;
  if (tree->depth == 0) return NULL;
  for (int k = 1; k < tree->depth; ++k) {
    ty_add_into(tree->slot[0], tree->slot[k], tree->count);
    tree->loss[0] = tree->loss[0] + tree->loss[k];
  }
  /* the folded sum is one partial (its level no longer a power's count) */
  tree->level[0] = UINT32_MAX;
  tree->depth = 1;
  *out_loss = tree->loss[0];
  return tree->slot[0];
}
