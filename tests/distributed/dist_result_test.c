/* The words of a failed host collective (distributed/dist.c ty_dist_result),
 * without MPI: a fault record as a transport fills it in, a group whose
 * ranks are not the world's (dp of a tp 2 x dp 2 layout: world ranks 1
 * and 3), and the message each case gives. The multi-host tests reach the
 * timeout cases only through real link failures, whose timing decides
 * whether the stalled rank is known (tests/multihost accepts either); here
 * each is pinned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/test_util.h"
#include "distributed/dist_internal.h"

typedef struct {
  ty_dist_t dist;
  ty_dist_group_t dp;
  int ranks[2];
  char hosts[4][160];
} fixture_t;

static void fixture_init(fixture_t *f) {
  memset(f, 0, sizeof(*f));
  f->dist.rank = 1;
  f->dist.size = 4;
  f->dist.timeout_s = 5;
  for (int r = 0; r < 4; ++r) snprintf(f->hosts[r], sizeof(f->hosts[r]), "h%d", r / 2 + 1);
  f->dist.hosts = f->hosts;
  f->ranks[0] = 1;
  f->ranks[1] = 3;
  f->dp.dist = &f->dist;
  f->dp.comm = (ty_mpi_shim_comm_t *)(uintptr_t)1; /* not the world; never called */
  snprintf(f->dp.name, sizeof(f->dp.name), "dp");
  f->dp.rank = 0;
  f->dp.size = 2;
  f->dp.world_ranks = f->ranks;
}

/* The message of `s` holds `want`; frees it; checks the code. */
static void expect(ty_status_t s, ty_code_t code, const char *want) {
  assert_non_null(s);
  const char *m = ty_status_message(s);
  if (!strstr(m, want)) fail_msg("the message lacks \"%s\": %s", want, m);
  assert_int_equal(ty_status_code(s), code);
  ty_status_free(s);
}

static void test_stalled_rank_is_named(void **state) {
  (void)state;
  fixture_t f;
  fixture_init(&f);
  ty_mpi_shim_fault_t fault = {.rank = 1, .stalled = 1};
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_TIMEOUT, &fault, "", "the gradient all-reduce of step 3"),
         TY_CODE_DEADLINE_EXCEEDED,
         "rank 3 on host h2 stopped answering during the gradient all-reduce of step 3 (every "
         "rank had reached it), which did not complete within 5 s (--dist-timeout): it died or "
         "hangs");
}

static void test_missing_rank_is_named(void **state) {
  (void)state;
  fixture_t f;
  fixture_init(&f);
  ty_mpi_shim_fault_t fault = {.rank = 1, .stalled = 0};
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_TIMEOUT, &fault, "", "the gradient all-reduce of step 3"),
         TY_CODE_DEADLINE_EXCEEDED,
         "rank 3 on host h2 did not reach the gradient all-reduce of step 3 within 5 s "
         "(--dist-timeout): it died or hangs");
}

static void test_unknown_rank(void **state) {
  (void)state;
  fixture_t f;
  fixture_init(&f);
  ty_mpi_shim_fault_t fault = {.rank = -1};
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_TIMEOUT, &fault, "", "the loss sum"),
         TY_CODE_DEADLINE_EXCEEDED,
         "the loss sum did not complete within 5 s (--dist-timeout): another rank died or hangs");
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_TIMEOUT, NULL, "", "the loss sum"),
         TY_CODE_DEADLINE_EXCEEDED, "another rank died or hangs");
  /* no host names (one host, or a transport that has none): no "on host" */
  f.dist.hosts = NULL;
  fault.rank = 0;
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_TIMEOUT, &fault, "", "the loss sum"),
         TY_CODE_DEADLINE_EXCEEDED, "rank 1 did not reach the loss sum within 5 s");
}

static void test_mismatches(void **state) {
  (void)state;
  fixture_t f;
  fixture_init(&f);
  ty_mpi_shim_fault_t fault = {.rank = 1, .seq = 7, .root_seq = 8,
                               .kind = TY_MPI_SHIM_KIND_ALLREDUCE, .root_kind = TY_MPI_SHIM_KIND_ALLREDUCE,
                               .bytes = 16, .root_bytes = 16};
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_MISMATCH, &fault, "", "a sum"),
         TY_CODE_FAILED_PRECONDITION,
         "a sum: the ranks of group 'dp' are out of step: rank 3 is at its collective #7 "
         "(all_reduce (sum of f32) with 16 bytes), rank 1 at #8");
  fault.seq = 8;
  fault.root_kind = TY_MPI_SHIM_KIND_BROADCAST + 1; /* group rank 1 = world rank 3 */
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_MISMATCH, &fault, "", "a sum"),
         TY_CODE_FAILED_PRECONDITION,
         "rank 3 calls all_reduce (sum of f32) with 16 bytes, rank 1 calls broadcast from rank 3");
  fault.root_kind = fault.kind;
  fault.root_bytes = 32;
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_MISMATCH, &fault, "", "a sum"),
         TY_CODE_FAILED_PRECONDITION,
         "a sum: all_reduce (sum of f32) on group 'dp': rank 3 sends 16 bytes, rank 1 sends 32");
}

static void test_transport_error(void **state) {
  (void)state;
  fixture_t f;
  fixture_init(&f);
  expect(ty_dist_result(&f.dp, TY_MPI_SHIM_ERROR, NULL, "MPI_Iallreduce: connection reset",
                        "a sum"),
         TY_CODE_UNAVAILABLE, "a sum: MPI_Iallreduce: connection reset");
  assert_null(ty_dist_result(&f.dp, TY_MPI_SHIM_OK, NULL, "", "a sum"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stalled_rank_is_named),
      cmocka_unit_test(test_missing_rank_is_named),
      cmocka_unit_test(test_unknown_rank),
      cmocka_unit_test(test_mismatches),
      cmocka_unit_test(test_transport_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
