/* The host collectives' arrival check (issue 33; distributed/mpi_shim.h
 * ty_mpi_shim_fault_t) under mpirun -np 2: ranks that bring different byte
 * counts, different roots or different collectives get, on every rank, an
 * error naming the op, the group and both sizes, and no data moves (the
 * world stays usable: a matching collective after each refusal sums
 * right). Also the rank agreement (ty_dist_agree_fields): equal fields
 * agree, a differing one is named with both values on every rank, and
 * different field lists are refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/dist.h"
#include "rank_check.h"

static ty_dist_t *g_dist;

/* `s` is an error whose message holds every one of the NULL-terminated
 * `parts`; frees it. */
static void expect_error(ty_status_t s, const char *what, const char *const *parts) {
  CHECK(s != TY_OK, "%s: expected an error, got OK", what);
  const char *m = ty_status_message(s);
  for (size_t i = 0; parts[i]; ++i) {
    CHECK(strstr(m, parts[i]), "%s: the message lacks \"%s\": %s", what, parts[i], m);
  }
  fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, m);
  ty_status_free(s);
}

/* A matching all-reduce after a refusal: the world still works. */
static void expect_usable(const char *after) {
  double v[3] = {1.0 + g_rank, 2.0, 3.0};
  ty_status_t s = ty_dist_all_reduce_sum(g_dist, TY_DTYPE_F64, v, 3, "a matching sum");
  CHECK(!s, "after %s: %s", after, s ? ty_status_message(s) : "");
  CHECK(v[0] == 3.0 && v[1] == 4.0 && v[2] == 6.0, "after %s: sums %g %g %g", after, v[0], v[1],
        v[2]);
}

static void test_sizes(void) {
  /* rank 1 sends 1024 floats, rank 0 2048 */
  const size_t count = g_rank == 0 ? 2048 : 1024;
  float *buf = calloc(2048, sizeof(float));
  CHECK(buf, "out of memory");
  for (size_t i = 0; i < 2048; ++i) buf[i] = 7.0f;
  ty_status_t s = ty_dist_all_reduce_sum(g_dist, TY_DTYPE_F32, buf, count, "the test's sum");
  const char *sum[] = {"the test's sum", "all_reduce (sum of f32) on group 'world'",
                       "rank 1 sends 4096 bytes, rank 0 sends 8192", NULL};
  expect_error(s, "all-reduce sizes", sum);
  for (size_t i = 0; i < 2048; ++i) CHECK(buf[i] == 7.0f, "element %zu moved: %g", i, buf[i]);
  free(buf);
  expect_usable("different all-reduce sizes");

  char bytes[64] = "";
  s = ty_dist_broadcast(g_dist, 0, bytes, g_rank == 0 ? 64 : 32, "the test's broadcast");
  const char *bc[] = {"broadcast from rank 0 on group 'world'",
                      "rank 1 sends 32 bytes, rank 0 sends 64", NULL};
  expect_error(s, "broadcast sizes", bc);
  expect_usable("different broadcast sizes");

  s = ty_dist_broadcast(g_dist, g_rank, bytes, 16, "the test's broadcast of two roots");
  const char *roots[] = {"call different collectives", "rank 1 calls broadcast from rank 1",
                         "rank 0 calls broadcast from rank 0", NULL};
  expect_error(s, "broadcast roots", roots);
  expect_usable("different roots");

  double d[4] = {0};
  s = g_rank == 0 ? ty_dist_all_reduce_sum(g_dist, TY_DTYPE_F64, d, 4, "the test's mixed op")
                  : ty_dist_broadcast(g_dist, 0, d, sizeof(d), "the test's mixed op");
  const char *mixed[] = {"call different collectives", "rank 1 calls broadcast from rank 0 with 32",
                         "rank 0 calls all_reduce (sum of f64) with 32 bytes", NULL};
  expect_error(s, "mixed ops", mixed);
  expect_usable("different ops");
}

static void test_group_sizes(void) {
  /* tp 2 on 2 ranks: the "tp" group is a communicator of its own */
  ty_status_t s = ty_dist_set_layout(g_dist, 2, 1);
  CHECK(!s, "set_layout: %s", s ? ty_status_message(s) : "");
  ty_dist_group_t *tp = NULL;
  s = ty_dist_group(g_dist, "tp", &tp);
  CHECK(!s && tp, "the tp group");
  double v[8] = {0};
  s = ty_dist_group_all_reduce(tp, TY_DIST_REDUCE_MAX, TY_DTYPE_F64, v, g_rank ? 8 : 2,
                               "the test's group max");
  const char *parts[] = {"all_reduce (max of f64) on group 'tp'",
                         "rank 1 sends 64 bytes, rank 0 sends 16", NULL};
  expect_error(s, "group sizes", parts);
  v[0] = g_rank;
  s = ty_dist_group_all_reduce(tp, TY_DIST_REDUCE_MAX, TY_DTYPE_F64, v, 1, "a matching max");
  CHECK(!s && v[0] == 1.0, "a matching max after a refusal: %s %g", s ? ty_status_message(s) : "",
        v[0]);
}

static void test_agreement(void) {
  ty_dist_field_t f[3];
  ty_dist_field_set(&f[0], "--model", "the model", "gpt2", 4, NULL);
  ty_dist_field_set(&f[1], "--lr", "", "0.001", 5, NULL);
  ty_dist_field_set(&f[2], "--seed", "", "7", 1, NULL);
  ty_status_t s = ty_dist_agree_fields(g_dist, f, 3);
  CHECK(!s, "equal fields: %s", s ? ty_status_message(s) : "");
  /* rank 1 differs on --lr: named with both values on every rank */
  if (g_rank == 1) ty_dist_field_set(&f[1], "--lr", "", "0.002", 5, NULL);
  s = ty_dist_agree_fields(g_dist, f, 3);
  const char *lr[] = {"ranks disagree on '--lr': rank 1 has 0.002, rank 0 has 0.001",
                      "every rank of one job must be started with the same options", NULL};
  expect_error(s, "a differing field", lr);
  /* a value longer than its shown form still differs by its digest */
  char a[300], b[300];
  memset(a, 'x', sizeof(a));
  memcpy(b, a, sizeof(b));
  b[299] = g_rank ? 'y' : 'x';
  ty_dist_field_set(&f[1], "--lr", "", "0.001", 5, NULL);
  ty_dist_field_set(&f[2], "--long", "a long value", g_rank ? b : a, sizeof(a), NULL);
  s = ty_dist_agree_fields(g_dist, f, 3);
  const char *lng[] = {"ranks disagree on '--long' (a long value): rank 1 has xxx",
                       "xxx (sha256 ", NULL};
  expect_error(s, "a long differing field", lng);
  /* different lists: a build that checks more */
  ty_dist_field_set(&f[2], "--seed", "", "7", 1, NULL);
  s = ty_dist_agree_fields(g_dist, f, g_rank ? 3 : 2);
  const char *count[] = {"rank 1 checks 3 fields, rank 0 2", "different trainyard builds",
                         NULL};
  expect_error(s, "different field lists", count);
  expect_usable("the agreement's refusals");
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: mpirun -np 2 %s <mpi shim dir>\n", argv[0]);
    return 2;
  }
  /* auto: MPI under mpirun, the TCP transport under run_env.py */
  ty_status_t s = ty_dist_open(TY_DIST_AUTO, argv[1], 30.0, &g_dist);
  CHECK(!s, "MPI: %s", s ? ty_status_message(s) : "");
  g_rank = ty_dist_rank(g_dist);
  CHECK(ty_dist_size(g_dist) == 2, "needs 2 ranks, has %d", ty_dist_size(g_dist));
  test_sizes();
  test_agreement();
  test_group_sizes();
  ty_dist_close(g_dist);
  if (g_rank == 0) printf("size_check_test: all checks passed\n");
  return 0;
}
