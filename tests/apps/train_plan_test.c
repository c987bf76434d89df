/* apps/trainyard/train/train_plan.c: what every rank of a run computes alike.
 * The row order of (seed, epoch) is pinned (a resumed run, on any version,
 * must rebuild it; trainer_state.json says "fisher-yates(seed, epoch)") and
 * differs between epochs; the dropout stream of a micro-batch is its index
 * in the global step (replicas differ, a layout never matters); ZeRO-1's
 * shares are pinned and split the state evenly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "apps/trainyard/train/train_plan.h"

/* Orders of 12 rows from an independent Python rendering of the documented
 * algorithm (splitmix64 from seed * 0x632BE59BD9B4E019 + epoch + 1, then
 * Fisher-Yates from the last row down, j = draw % i). */
static void test_row_order_is_pinned(void **state) {
  (void)state;
  static const struct {
    uint64_t seed;
    int64_t epoch;
    uint64_t want[12];
  } cases[] = {
      {0, 0, {4, 6, 7, 9, 11, 3, 10, 1, 2, 0, 8, 5}},
      {0, 1, {11, 7, 5, 8, 0, 6, 2, 9, 3, 1, 4, 10}},
      {0, 2, {7, 3, 4, 2, 8, 0, 1, 6, 5, 10, 11, 9}},
      {42, 0, {8, 7, 9, 1, 4, 5, 10, 6, 11, 2, 3, 0}},
      {42, 1, {8, 7, 9, 1, 6, 10, 5, 2, 4, 0, 11, 3}},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    uint64_t got[12];
    ty_train_plan_row_order(cases[c].seed, cases[c].epoch, 12, got);
    for (int i = 0; i < 12; ++i) assert_int_equal(got[i], cases[c].want[i]);
  }
}

/* Every epoch of every seed is a permutation, and no two epochs of a seed
 * (nor two seeds' first epochs) give the same order: a shuffle that ignored
 * the epoch or the seed would train every epoch on one order. */
static void test_row_order_differs_between_epochs(void **state) {
  (void)state;
  enum { ROWS = 64, EPOCHS = 6, SEEDS = 50 };
  static uint64_t orders[SEEDS][EPOCHS][ROWS];
  for (uint64_t s = 0; s < SEEDS; ++s) {
    for (int64_t e = 0; e < EPOCHS; ++e) {
      uint64_t *o = orders[s][e];
      ty_train_plan_row_order(s, e, ROWS, o);
      bool seen[ROWS] = {false};
      for (int i = 0; i < ROWS; ++i) {
        assert_true(o[i] < ROWS);
        assert_false(seen[o[i]]);
        seen[o[i]] = true;
      }
      uint64_t again[ROWS];
      ty_train_plan_row_order(s, e, ROWS, again); /* a rerun or a resume */
      assert_memory_equal(again, o, sizeof(again));
      for (int64_t f = 0; f < e; ++f) {
        assert_memory_not_equal(orders[s][f], o, sizeof(orders[s][f]));
      }
    }
    for (uint64_t r = 0; r < s; ++r) {
      assert_memory_not_equal(orders[r][0], orders[s][0], sizeof(orders[s][0]));
    }
  }
  uint64_t one = 7;
  ty_train_plan_row_order(3, 1, 1, &one); /* one row, and none, are fine */
  assert_int_equal(one, 0);
  ty_train_plan_row_order(3, 1, 0, NULL);
}

/* The dropout masks of micro-batch m of replica r are those of micro-batch
 * r x A + m of one process with accumulation dp x A (the promise that a
 * data-parallel run equals one process, dropout included), and no two
 * (step, replica, micro-batch) of a run share a stream. */
static void test_dropout_counter_follows_the_rows(void **state) {
  (void)state;
  assert_int_equal(ty_train_plan_dropout_counter(0, 1, 0, 1, 0), 0);
  assert_int_equal(ty_train_plan_dropout_counter(3, 2, 1, 2, 1), 15); /* (3*2+1)*2+1 */
  for (int64_t dp = 1; dp <= 4; ++dp) {
    for (int64_t accum = 1; accum <= 3; ++accum) {
      enum { STEPS = 8, MAX = 8 * 4 * 3 };
      bool used[MAX] = {false};
      for (int64_t step = 0; step < STEPS; ++step) {
        for (int64_t r = 0; r < dp; ++r) {
          for (int64_t m = 0; m < accum; ++m) {
            int64_t c = ty_train_plan_dropout_counter(step, dp, r, accum, m);
            assert_int_equal(c, ty_train_plan_dropout_counter(step, 1, 0, dp * accum,
                                                              r * accum + m));
            assert_true(c >= 0 && c < MAX);
            assert_false(used[c]); /* replicas and micro-batches differ */
            used[c] = true;
          }
        }
      }
    }
  }
}

/* Largest first (the lower index on a tie), each to the least-loaded rank
 * (the lowest on a tie): pinned by hand for 2 ranks. */
static void test_zero_owners_are_pinned(void **state) {
  (void)state;
  const int64_t elements[6] = {10, 40, 30, 20, 30, 5};
  /* 40 -> 0; 30 (i2) -> 1; 30 (i4) -> 1 (30 < 40); 20 -> 0 (40 < 60);
   * 10 -> 0 (60 = 60, the lower rank); 5 -> 1 (60 < 70). */
  const int want[6] = {0, 0, 1, 0, 1, 1};
  int owner[6];
  bool update[6];
  for (int rank = 0; rank < 2; ++rank) {
    assert_int_equal(ty_train_plan_zero_owners(elements, 6, 2, NULL, rank, owner, update), TY_OK);
    for (int i = 0; i < 6; ++i) {
      assert_int_equal(owner[i], want[i]);
      assert_int_equal(update[i], want[i] == rank);
    }
  }
  /* pinned: i1 to rank 1, counted first: 30 (i2) -> 0; 30 (i4) -> 0
   * (30 < 40); 20 -> 1 (40 < 60); 10 -> 0 (60 = 60); 5 -> 1 (60 < 70). */
  const int pinned[6] = {-1, 1, -1, -1, -1, -1};
  const int want_pinned[6] = {0, 1, 0, 1, 0, 1};
  assert_int_equal(ty_train_plan_zero_owners(elements, 6, 2, pinned, 0, owner, NULL), TY_OK);
  for (int i = 0; i < 6; ++i) assert_int_equal(owner[i], want_pinned[i]);
}

/* For many random sizes and world sizes: every rank computes the same
 * table, each parameter is updated by exactly one rank, and the loads are
 * within the largest parameter of each other. */
static void test_zero_owners_split_evenly(void **state) {
  (void)state;
  uint64_t x = 0x1234567ull;
  for (int trial = 0; trial < 200; ++trial) {
    enum { N = 40 };
    int64_t elements[N], load[8] = {0}, largest = 0;
    int world = 1 + trial % 8, first[N], owner[N];
    bool update[N];
    for (int i = 0; i < N; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      elements[i] = 1 + (int64_t)((x >> 33) % 5000);
      largest = elements[i] > largest ? elements[i] : largest;
    }
    int updated[N] = {0};
    for (int rank = 0; rank < world; ++rank) {
      assert_int_equal(
          ty_train_plan_zero_owners(elements, N, world, NULL, rank, owner, update), TY_OK);
      if (rank == 0) memcpy(first, owner, sizeof(first));
      assert_memory_equal(first, owner, sizeof(first));
      for (int i = 0; i < N; ++i) {
        assert_true(owner[i] >= 0 && owner[i] < world);
        assert_int_equal(update[i], owner[i] == rank);
        updated[i] += update[i];
      }
    }
    for (int i = 0; i < N; ++i) {
      assert_int_equal(updated[i], 1);
      load[owner[i]] += elements[i];
    }
    for (int a = 0; a < world; ++a) {
      for (int b = 0; b < world; ++b) assert_true(load[a] - load[b] <= largest);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_row_order_is_pinned),
      cmocka_unit_test(test_row_order_differs_between_epochs),
      cmocka_unit_test(test_dropout_counter_follows_the_rows),
      cmocka_unit_test(test_zero_owners_are_pinned),
      cmocka_unit_test(test_zero_owners_split_evenly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
