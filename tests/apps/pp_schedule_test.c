/* apps/trainyard/train/pipeline/pp_schedule.c: the 1F1B and interleaved orders
 * against their published forms, every schedule deadlock-free when sends do
 * not block and receives do, and the balanced partition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "apps/trainyard/train/pipeline/pp_schedule.h"

/* "F0.0 B0.0 ..." (micro.chunk) for comparison with the known orders. */
static void ty_render(const ty_pp_action_t *a, size_t n, char *out, size_t capacity) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n; ++i) {
    used += (size_t)snprintf(out + used, capacity - used, "%s%c%d.%d", i ? " " : "",
                             a[i].backward ? 'B' : 'F', a[i].micro, a[i].chunk);
  }
}

static void ty_expect(ty_pp_kind_t kind, int rank, int pp, int v, int m, const char *want) {
  ty_pp_action_t *a = NULL;
  size_t n = 0;
  assert_int_equal(ty_pp_schedule(kind, rank, pp, v, m, &a, &n), TY_OK);
  char text[2048];
  ty_render(a, n, text, sizeof(text));
  assert_string_equal(text, want);
  free(a);
}

/* PipeDream-Flush / Megatron 1F1B: 4 stages, 6 micro-batches. */
static void test_1f1b_known_order(void **state) {
  (void)state;
  ty_expect(TY_PP_1F1B, 0, 4, 1, 6, "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 B3.0 B4.0 B5.0");
  ty_expect(TY_PP_1F1B, 2, 4, 1, 6, "F0.0 F1.0 B0.0 F2.0 B1.0 F3.0 B2.0 F4.0 B3.0 F5.0 B4.0 B5.0");
  ty_expect(TY_PP_1F1B, 3, 4, 1, 6, "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0");
  /* fewer micro-batches than warm-up: all forwards, then all backwards */
  ty_expect(TY_PP_1F1B, 0, 4, 1, 2, "F0.0 F1.0 B0.0 B1.0");
}

/* Megatron-LM's forward_backward_pipelining_with_interleaving, 2 stages x 2
 * chunks, 4 micro-batches: rank 0 warms up with (2-0-1)*2 + (2-1)*2 = 4. */
static void test_interleaved_known_order(void **state) {
  (void)state;
  ty_expect(TY_PP_INTERLEAVED, 0, 2, 2, 4,
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  ty_expect(TY_PP_INTERLEAVED, 1, 2, 2, 4,
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  /* micro-batches == stages: every forward first */
  ty_expect(TY_PP_INTERLEAVED, 1, 2, 2, 2, "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
}

/* Runs every rank's schedule at once as the trainer does: a forward of
 * global chunk c > 0 waits for the forward of c - 1 (its activation), a
 * backward of c < last for the backward of c + 1 (its gradient), the last
 * chunk's backward for its own forward; sends never wait. Fails if the
 * ranks stop with work left (a deadlock) or an action is missing or twice. */
static void ty_check_runs(ty_pp_kind_t kind, int pp, int v, int m) {
  int chunks = pp * v;
  ty_pp_action_t **a = calloc((size_t)pp, sizeof(*a));
  size_t *n = calloc((size_t)pp, sizeof(size_t)), *next = calloc((size_t)pp, sizeof(size_t));
  char *done = calloc((size_t)(2 * chunks * m), 1);
  assert_non_null(a);
  assert_non_null(n);
  assert_non_null(next);
  assert_non_null(done);
  for (int r = 0; r < pp; ++r) {
    assert_int_equal(ty_pp_schedule(kind, r, pp, v, m, &a[r], &n[r]), TY_OK);
    assert_int_equal(n[r], (size_t)(2 * v * m));
  }
#define TY_DONE(bwd, c, mb) done[((bwd) * chunks + (c)) * m + (mb)]
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r) {
      while (next[r] < n[r]) {
        ty_pp_action_t x = a[r][next[r]];
        int c = x.chunk * pp + r;
        bool ready = x.backward ? (c == chunks - 1 ? TY_DONE(0, c, x.micro)
                                                   : TY_DONE(1, c + 1, x.micro))
                                : (c == 0 || TY_DONE(0, c - 1, x.micro));
        if (!ready) break;
        assert_int_equal(TY_DONE(x.backward, c, x.micro), 0);
        TY_DONE(x.backward, c, x.micro) = 1;
        next[r]++;
        moved = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r) assert_int_equal(next[r], n[r]);
  for (int i = 0; i < 2 * chunks * m; ++i) assert_int_equal(done[i], 1);
#undef TY_DONE
  for (int r = 0; r < pp; ++r) free(a[r]);
  free(a);
  free(n);
  free(next);
  free(done);
}

static void test_schedules_are_deadlock_free(void **state) {
  (void)state;
  for (int pp = 1; pp <= 5; ++pp) {
    for (int m = 1; m <= 12; ++m) ty_check_runs(TY_PP_1F1B, pp, 1, m);
    for (int v = 1; v <= 3; ++v) {
      for (int m = pp; m <= 4 * pp; m += pp) ty_check_runs(TY_PP_INTERLEAVED, pp, v, m);
    }
  }
}

/* The device path's rule (TY_PP_P2P_GLOBAL) under NCCL's semantics: no
 * deadlock and both ends of every pair agree on the messages' order, for
 * every layout here; each send alone at once deadlocks at pp 2 1F1B, and
 * each send batched with the rank's next receive deadlocks on interleaved
 * pp 2 x 2 chunks x 4 micro-batches (fine for 1F1B), so the check can
 * fail. */
static void test_p2p_rule_is_deadlock_free(void **state) {
  (void)state;
  for (int pp = 2; pp <= 6; ++pp) {
    for (int m = 1; m <= 12; ++m) {
      for (int rule = TY_PP_P2P_GLOBAL; rule <= TY_PP_P2P_NEXT_RECV; ++rule) {
        ty_status_t s = ty_pp_p2p_check(TY_PP_1F1B, pp, 1, m, (ty_pp_p2p_rule_t)rule);
        if (s) fail_msg("rule %d: %s", rule, ty_status_message(s));
      }
    }
    for (int v = 1; v <= 4; ++v) {
      for (int m = pp; m <= 4 * pp; m += pp) {
        ty_status_t s = ty_pp_p2p_check(TY_PP_INTERLEAVED, pp, v, m, TY_PP_P2P_GLOBAL);
        if (s) fail_msg("%s", ty_status_message(s));
      }
    }
  }
  ty_status_t s = ty_pp_p2p_check(TY_PP_1F1B, 2, 1, 4, TY_PP_P2P_NAIVE);
  assert_int_equal(ty_status_code(s), TY_CODE_FAILED_PRECONDITION);
  assert_non_null(strstr(ty_status_message(s), "would deadlock"));
  ty_status_free(s);
  s = ty_pp_p2p_check(TY_PP_INTERLEAVED, 2, 2, 4, TY_PP_P2P_NEXT_RECV);
  assert_int_equal(ty_status_code(s), TY_CODE_FAILED_PRECONDITION);
  assert_non_null(strstr(ty_status_message(s), "would deadlock"));
  ty_status_free(s);
  /* the pp 2 1F1B plan of stage 0 at 2 micro-batches, in full: the first
   * activation goes with the first gradient's receive, the second alone
   * before it... as the global order has it */
  ty_pp_p2p_op_t *ops = NULL;
  size_t n = 0;
  assert_int_equal(ty_pp_p2p_plan(TY_PP_1F1B, 0, 2, 1, 2, TY_PP_P2P_GLOBAL, &ops, &n), TY_OK);
  assert_int_equal(n, 4);
  assert_true(ops[0].send && !ops[0].msg.gradient && ops[0].msg.micro == 0 && ops[0].batch == 0);
  assert_true(ops[1].send && !ops[1].msg.gradient && ops[1].msg.micro == 1 && ops[1].batch == 0);
  assert_true(!ops[2].send && ops[2].msg.gradient && ops[2].msg.micro == 0 && ops[2].batch == 0);
  assert_true(!ops[3].send && ops[3].msg.gradient && ops[3].msg.micro == 1 && ops[3].batch == 1);
  free(ops);
  s = ty_pp_p2p_plan(TY_PP_INTERLEAVED, 0, 2, 2, 3, TY_PP_P2P_GLOBAL, &ops, &n);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  ty_status_free(s);
}

static void test_bad_schedules_are_refused(void **state) {
  (void)state;
  ty_pp_action_t *a = NULL;
  size_t n = 0;
  ty_status_t s = ty_pp_schedule(TY_PP_INTERLEAVED, 0, 2, 2, 3, &a, &n);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(ty_status_message(s), "not a multiple of 2"));
  ty_status_free(s);
  s = ty_pp_schedule(TY_PP_1F1B, 2, 2, 1, 4, &a, &n);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  ty_status_free(s);
  ty_pp_kind_t kind;
  s = ty_pp_kind_parse("gpipe", &kind);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  ty_status_free(s);
  assert_null(a);
}

static void test_ideal_bubble(void **state) {
  (void)state;
  assert_true(ty_pp_ideal_bubble(1, 1, 8) == 0.0);
  assert_true(ty_pp_ideal_bubble(4, 1, 8) == 3.0 / 11.0);
  assert_true(ty_pp_ideal_bubble(4, 2, 8) == 3.0 / 19.0);
}

static void test_partition_is_balanced(void **state) {
  (void)state;
  /* the tiny Llama: embedding 3072, 2 layers of 9280, norm + head 3104 */
  int64_t llama[4] = {3072, 9280, 9280, 3104};
  int first[5];
  assert_int_equal(ty_pp_partition(llama, 4, 2, first), TY_OK);
  assert_int_equal(first[0], 0);
  assert_int_equal(first[1], 2);
  assert_int_equal(first[2], 4);
  assert_int_equal(ty_pp_partition(llama, 4, 4, first), TY_OK);
  for (int i = 0; i <= 4; ++i) assert_int_equal(first[i], i);
  /* the optimum, not a greedy fill: 5 | 4 4 | 1 1 1 1 ... into 3 */
  int64_t c[7] = {5, 4, 4, 1, 1, 1, 1};
  assert_int_equal(ty_pp_partition(c, 7, 3, first), TY_OK);
  int64_t worst = 0;
  for (int p = 0; p < 3; ++p) {
    int64_t sum = 0;
    assert_true(first[p] < first[p + 1]);
    for (int i = first[p]; i < first[p + 1]; ++i) sum += c[i];
    worst = sum > worst ? sum : worst;
  }
  assert_int_equal(worst, 8);
  ty_status_t s = ty_pp_partition(c, 2, 3, first);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  ty_status_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_1f1b_known_order),
      cmocka_unit_test(test_interleaved_known_order),
      cmocka_unit_test(test_schedules_are_deadlock_free),
      cmocka_unit_test(test_p2p_rule_is_deadlock_free),
      cmocka_unit_test(test_bad_schedules_are_refused),
      cmocka_unit_test(test_ideal_bubble),
      cmocka_unit_test(test_partition_is_balanced),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
