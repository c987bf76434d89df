/* What every rank of a training run computes alike, from the seed and the
 * layout alone: the row order of an epoch, the dropout stream of a
 * micro-batch, and ZeRO-1's shares of the optimizer state. Pure functions
 * in one place, so that the single-process, data-parallel, pipeline and
 * fused-step paths cannot drift apart, and so that tests hold them directly
 * (tests/apps/train_plan_test.c). Thread-safe: no state. */
#ifndef TY_APPS_TRAINYARD_TRAIN_PLAN_H_
#define TY_APPS_TRAINYARD_TRAIN_PLAN_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"

/* The row order of `epoch` (0-based) of `rows` rows into order[0..rows): a
 * Fisher-Yates shuffle driven by splitmix64 seeded by (seed, epoch), so
 * every epoch is reshuffled and a resumed run rebuilds the same order. */
void ty_train_plan_row_order(uint64_t seed, int64_t epoch, uint64_t rows, uint64_t *order);

/* The Philox counter of the dropout masks of micro-batch `micro` (0-based,
 * < accum) of optimizer step `step` on data-parallel replica `dp_rank` of
 * `dp`: the micro-batch's index in the global step, so the masks follow the
 * rows (2 replicas x accumulation A draw what one process with accumulation
 * 2A draws) and differ between replicas. */
int64_t ty_train_plan_dropout_counter(int64_t step, int64_t dp, int64_t dp_rank, int64_t accum,
                                      int64_t micro);

/* `train --deterministic`: the Philox counter of the dropout mask of row
 * `row` (0-based, < rows_per_step) of the global batch of optimizer step
 * `step`, rows_per_step rows a step: a function of the row alone, so a
 * row's mask is the same however ranks and micro-batches split the batch
 * (each row runs alone in a graph of batch 1). */
int64_t ty_train_plan_row_dropout_counter(int64_t step, int64_t rows_per_step, int64_t row);

/* ZeRO-1's ownership of `n` parameters of `elements[i]` elements each over
 * `world` ranks: largest first (the lower index on a tie), each to the
 * least-loaded rank (the lowest on a tie), so every rank computes the same
 * shares and the optimizer state is within one parameter of an even split.
 * Whole tensors: each update stays one op. `pinned` (NULL: none) fixes the
 * owner of each i with 0 <= pinned[i] < world (counted in its load before
 * the others are shared: the pipeline's tied embedding, whose two copies
 * two chunks update). Writes owner[i]; when `update` is not NULL also
 * update[i] = (owner[i] == rank), the optimizer's mask of this rank.
 * RESOURCE_EXHAUSTED when memory runs out. */
ty_status_t ty_train_plan_zero_owners(const int64_t *elements, uint32_t n, int world,
                                      const int *pinned, int rank, int *owner, bool *update);

#endif /* TY_APPS_TRAINYARD_TRAIN_PLAN_H_ */
