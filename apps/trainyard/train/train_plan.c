/* What every rank of a training run computes alike (see train_plan.h). */
#include "train_plan.h"

#include <stdlib.h>

static uint64_t ty_splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void ty_train_plan_row_order(uint64_t seed, int64_t epoch, uint64_t rows, uint64_t *order) {
  uint64_t state = seed * 0x632BE59BD9B4E019ull + (uint64_t)epoch + 1;
  for (uint64_t i = 0; i < rows; ++i) order[i] = i;
  for (uint64_t i = rows; i > 1; --i) {
    uint64_t j = ty_splitmix(&state) % i;
    uint64_t tmp = order[i - 1];
    order[i - 1] = order[j];
    order[j] = tmp;
  }
}

int64_t ty_train_plan_dropout_counter(int64_t step, int64_t dp, int64_t dp_rank, int64_t accum,
                                      int64_t micro) {
  return (step * dp + dp_rank) * accum + micro;
}

int64_t ty_train_plan_row_dropout_counter(int64_t step, int64_t rows_per_step, int64_t row) {
  return step * rows_per_step + row;
}

ty_status_t ty_train_plan_zero_owners(const int64_t *elements, uint32_t n, int world,
                                      const int *pinned, int rank, int *owner, bool *update) {
  int64_t *load = calloc(world > 0 ? (size_t)world : 1, sizeof(int64_t));
  bool *done = calloc(n ? n : 1, sizeof(bool));
  if (!load || !done) {
    free(load);
    free(done);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  uint32_t left = n;
  for (uint32_t i = 0; pinned && i < n; ++i) {
    if (pinned[i] < 0 || pinned[i] >= world) continue;
    owner[i] = pinned[i];
    load[pinned[i]] += elements[i];
    done[i] = true;
    --left;
  }
  for (uint32_t k = 0; k < left; ++k) {
    uint32_t best = 0;
    int64_t best_size = -1;
    for (uint32_t i = 0; i < n; ++i) {
      if (!done[i] && elements[i] > best_size) {
        best = i;
        best_size = elements[i];
      }
    }
    int r = 0;
    for (int q = 1; q < world; ++q) r = load[q] < load[r] ? q : r;
    done[best] = true;
    owner[best] = r;
    load[r] += best_size;
  }
  for (uint32_t i = 0; update && i < n; ++i) update[i] = owner[i] == rank;
  free(load);
  free(done);
  return TY_OK;
}
