/* apps/trainyard/train/train_tree.c: the fixed summation tree of `train
 * --deterministic`. Its shape is pinned (small cases against sums written
 * out by hand), and the sum of one process equals, bit for bit, the ranks'
 * partials folded in rank order for every split into whole power-of-two
 * subtrees, while a plain left-to-right sum of the same leaves differs (so
 * the equality is the tree's doing, not the data's). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "apps/trainyard/train/train_tree.h"

enum { COUNT = 257, LEAVES = 16 };
static float g_leaf[LEAVES][COUNT];
static double g_loss[LEAVES];

static uint64_t g_state;
static uint64_t ty_next(void) {
  uint64_t z = (g_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Values of very different sizes, so that the order of adds shows. */
static int ty_setup(void **state) {
  (void)state;
  uint64_t seed = (uint64_t)time(NULL);
  const char *given = getenv("TY_TEST_SEED");
  if (given) seed = strtoull(given, NULL, 10);
  printf("train_tree_test: seed %llu (TY_TEST_SEED=%llu repeats it)\n", (unsigned long long)seed,
         (unsigned long long)seed);
  g_state = seed;
  for (int l = 0; l < LEAVES; ++l) {
    for (int i = 0; i < COUNT; ++i) {
      double u = (double)(ty_next() >> 11) / 9007199254740992.0 - 0.5;
      int e = (int)(ty_next() % 24) - 12;
      double scale = 1;
      for (; e > 0; --e) scale *= 2;
      for (; e < 0; ++e) scale /= 2;
      g_leaf[l][i] = (float)(u * scale);
    }
    g_loss[l] = ((double)(ty_next() >> 11) / 9007199254740992.0) * 1e-3 * (double)(l + 1);
  }
  return 0;
}

/* The tree's sum of leaves [first, first + n) into out (and its loss). */
static double ty_tree_sum(int first, int n, float *out) {
  ty_train_tree_t tree;
  ty_train_tree_init(&tree, COUNT);
  for (int l = first; l < first + n; ++l) {
    float *slot = NULL;
    assert_int_equal(ty_train_tree_next(&tree, &slot), TY_OK);
    memcpy(slot, g_leaf[l], sizeof(g_leaf[l]));
    ty_train_tree_push(&tree, 0, g_loss[l]);
  }
  double loss = 0;
  const float *sum = ty_train_tree_finish(&tree, &loss);
  assert_non_null(sum);
  memcpy(out, sum, COUNT * sizeof(float));
  ty_train_tree_deinit(&tree);
  return loss;
}

static void ty_add(float *a, const float *b) {
  for (int i = 0; i < COUNT; ++i) a[i] = a[i] + b[i];
}

/* 3, 5, 6 and 7 leaves against the sums written out: pairs merge as
 * (older + newer), the leftovers fold largest first. */
static void test_shape_is_pinned(void **state) {
  (void)state;
  float got[COUNT], want[COUNT], p[COUNT], q[COUNT];
  /* 3: (l0 + l1) + l2 */
  ty_tree_sum(0, 3, got);
  memcpy(want, g_leaf[0], sizeof(want));
  ty_add(want, g_leaf[1]);
  ty_add(want, g_leaf[2]);
  assert_memory_equal(got, want, sizeof(got));
  /* 5: ((l0 + l1) + (l2 + l3)) + l4 */
  memcpy(p, g_leaf[0], sizeof(p));
  ty_add(p, g_leaf[1]);
  memcpy(q, g_leaf[2], sizeof(q));
  ty_add(q, g_leaf[3]);
  ty_add(p, q); /* p = S4 */
  memcpy(want, p, sizeof(want));
  ty_add(want, g_leaf[4]);
  ty_tree_sum(0, 5, got);
  assert_memory_equal(got, want, sizeof(got));
  /* 6: S4 + (l4 + l5) */
  memcpy(q, g_leaf[4], sizeof(q));
  ty_add(q, g_leaf[5]);
  memcpy(want, p, sizeof(want));
  ty_add(want, q);
  ty_tree_sum(0, 6, got);
  assert_memory_equal(got, want, sizeof(got));
  /* 7: (S4 + (l4 + l5)) + l6 */
  ty_add(want, g_leaf[6]);
  ty_tree_sum(0, 7, got);
  assert_memory_equal(got, want, sizeof(got));
}

/* 16 leaves over R ranks of 16 / R (a power of two) each, and 12 leaves
 * over 3 ranks of 4: the ranks' partials pushed in rank order give the
 * one-process bits, losses included. */
static void test_rank_splits_equal_one_process(void **state) {
  (void)state;
  static const int splits[][2] = {{16, 1}, {16, 2}, {16, 4}, {16, 8}, {16, 16}, {12, 3}};
  for (size_t k = 0; k < sizeof(splits) / sizeof(splits[0]); ++k) {
    const int total = splits[k][0], ranks = splits[k][1], per = total / ranks;
    float one[COUNT], part[COUNT];
    double one_loss = ty_tree_sum(0, total, one);
    ty_train_tree_t over;
    ty_train_tree_init(&over, COUNT);
    for (int r = 0; r < ranks; ++r) {
      double loss = ty_tree_sum(r * per, per, part);
      float *slot = NULL;
      assert_int_equal(ty_train_tree_next(&over, &slot), TY_OK);
      memcpy(slot, part, sizeof(part));
      ty_train_tree_push(&over, 0, loss);
    }
    double folded_loss = 0;
    const float *folded = ty_train_tree_finish(&over, &folded_loss);
    assert_memory_equal(folded, one, sizeof(one));
    assert_memory_equal(&folded_loss, &one_loss, sizeof(double));
    ty_train_tree_deinit(&over);
  }
  /* A plain running sum of the same leaves differs somewhere: the data
   * would show an order that is not the tree's. */
  float tree16[COUNT], plain[COUNT];
  ty_tree_sum(0, LEAVES, tree16);
  memcpy(plain, g_leaf[0], sizeof(plain));
  for (int l = 1; l < LEAVES; ++l) ty_add(plain, g_leaf[l]);
  assert_true(memcmp(plain, tree16, sizeof(plain)) != 0);
}

/* Reset keeps the memory and starts over; an empty tree finishes to NULL. */
static void test_reset_and_empty(void **state) {
  (void)state;
  ty_train_tree_t tree;
  ty_train_tree_init(&tree, COUNT);
  double loss = 1;
  assert_null(ty_train_tree_finish(&tree, &loss));
  assert_true(loss == 0);
  float *slot = NULL;
  for (int round = 0; round < 2; ++round) {
    ty_train_tree_reset(&tree);
    for (int l = 0; l < 5; ++l) {
      assert_int_equal(ty_train_tree_next(&tree, &slot), TY_OK);
      memcpy(slot, g_leaf[l], sizeof(g_leaf[l]));
      ty_train_tree_push(&tree, 0, g_loss[l]);
    }
    float want[COUNT];
    ty_tree_sum(0, 5, want);
    assert_memory_equal(ty_train_tree_finish(&tree, &loss), want, sizeof(want));
  }
  ty_train_tree_deinit(&tree);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shape_is_pinned),
      cmocka_unit_test(test_rank_splits_equal_one_process),
      cmocka_unit_test(test_reset_and_empty),
  };
  return cmocka_run_group_tests(tests, ty_setup, NULL);
}
