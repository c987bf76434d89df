/* ABI 1.5 host collectives: a graph's all_reduce runs inside the plugin's
 * step through host->collective (hal/comm.h) on the cpu and dataflow
 * plugins. The world here is a fake of two ranks whose other rank holds
 * known values, so sum, avg, bf16 staging, world 1 and a failing rank are
 * all checked in one process; tests/apps/test_distributed_cli.py runs the
 * real thing under mpirun. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "graph/ir/train_step.h"
#include "hal/comm.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/half.h"
#include "hal/registry.h"

#define N 12

/* The other rank: its values, and what the fake saw. */
typedef struct fake_world_t {
  float other[N];
  int calls;
  ty_dtype_t last_dtype;
  size_t last_count;
  bool fail; /* the other rank never arrives */
} fake_world_t;

static ty_status_t fake_all_reduce_sum(void *user, ty_dtype_t dtype, void *data, size_t count) {
  fake_world_t *w = user;
  w->calls++;
  w->last_dtype = dtype;
  w->last_count = count;
  if (w->fail) {
    return ty_status_make(TY_CODE_DEADLINE_EXCEEDED,
                          "rank 1 did not reach the all-reduce within 1 s");
  }
  if (dtype != TY_DTYPE_F32 || count != N) {
    return ty_status_make(TY_CODE_INTERNAL, "fake world: unexpected %s[%zu]",
                          ty_dtype_name(dtype), count);
  }
  float *x = data;
  for (size_t i = 0; i < count; ++i) x[i] += w->other[i];
  return TY_OK;
}

/* y = all_reduce(x * w) with `reduce`, w a parameter of ones: an inference
 * graph (what the dataflow device runs) with all_reduce after another node,
 * as in a train step. */
static ty_graph_t *build(ty_dtype_t dtype, const char *reduce) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[2] = {3, 4};
  ty_value_id_t x, w, a, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", dtype, 2, d, &x));
  TY_EXPECT_OK(ty_graph_add_state(g, "w", dtype, 2, d, &w));
  ty_attrs_t attrs = {0};
  ty_value_id_t xw[2] = {x, w};
  TY_EXPECT_OK(ty_graph_add_node1(g, "mul", xw, 2, NULL, &a));
  if (reduce) TY_EXPECT_OK(ty_attrs_set_string(&attrs, "reduce", reduce));
  TY_EXPECT_OK(ty_graph_add_node1(g, "all_reduce", &a, 1, &attrs, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  return g;
}

/* Runs the graph on `uri` with `comm` (may be NULL) and returns the run's
 * status; y in f32. */
static ty_status_t run_on(const char *uri, ty_dtype_t dtype, const char *reduce,
                          const ty_host_comm_t *comm, const float *x, float *y) {
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  ty_graph_t *g = build(dtype, reduce);
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  TY_EXPECT_OK(ty_session_set_host_comm(s, comm));
  int64_t d[2] = {3, 4};
  uint16_t h[N];
  ty_status_t status;
  float ones[N];
  for (int i = 0; i < N; ++i) ones[i] = 1.0f;
  const float *src[2] = {x, ones};
  const char *names[2] = {"x", "w"};
  for (int k = 0; k < 2; ++k) {
    if (dtype == TY_DTYPE_BF16) {
      for (int i = 0; i < N; ++i) h[i] = ty_f32_to_bf16(src[k][i]);
      TY_EXPECT_OK(ty_session_bind(s, names[k], dtype, 2, d, h, sizeof(h)));
    } else {
      TY_EXPECT_OK(ty_session_bind(s, names[k], dtype, 2, d, src[k], N * sizeof(float)));
    }
  }
  status = ty_session_run(s);
  if (!status && dtype == TY_DTYPE_BF16) {
    TY_EXPECT_OK(ty_session_read(s, "y", h, sizeof(h)));
    for (int i = 0; i < N; ++i) y[i] = ty_bf16_to_f32(h[i]);
  } else if (!status) {
    TY_EXPECT_OK(ty_session_read(s, "y", y, N * sizeof(float)));
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
  return status;
}

static const char *const uris[] = {"cpu", "cpu?kernels=reference", "dataflow"};

static void fill(float *x, fake_world_t *w) {
  for (int i = 0; i < N; ++i) {
    x[i] = 0.25f * (float)(i - 5); /* exact in bf16 */
    w->other[i] = 0.5f * (float)(3 - i);
  }
}

static void test_sum_and_avg_over_two_ranks(void **state) {
  (void)state;
  for (size_t u = 0; u < sizeof(uris) / sizeof(uris[0]); ++u) {
    for (int avg = 0; avg < 2; ++avg) {
      fake_world_t w = {0};
      float x[N], y[N];
      fill(x, &w);
      ty_host_comm_t comm = {.rank = 0, .size = 2, .user = &w,
                             .all_reduce_sum = fake_all_reduce_sum};
      TY_EXPECT_OK(run_on(uris[u], TY_DTYPE_F32, avg ? "avg" : NULL, &comm, x, y));
      assert_int_equal(w.calls, 1);
      for (int i = 0; i < N; ++i) {
        float want = (x[i] + w.other[i]) / (avg ? 2.0f : 1.0f);
        if (y[i] != want) fail_msg("%s %s y[%d] = %g, want %g", uris[u], avg ? "avg" : "sum",
                                   i, y[i], want);
      }
    }
  }
}

/* bf16 travels as f32 (MPI has no half type) and is rounded once. */
static void test_bf16_is_staged_through_f32(void **state) {
  (void)state;
  for (size_t u = 0; u < sizeof(uris) / sizeof(uris[0]); ++u) {
    fake_world_t w = {0};
    float x[N], y[N];
    fill(x, &w);
    ty_host_comm_t comm = {.rank = 1, .size = 2, .user = &w,
                           .all_reduce_sum = fake_all_reduce_sum};
    TY_EXPECT_OK(run_on(uris[u], TY_DTYPE_BF16, "avg", &comm, x, y));
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.last_dtype, TY_DTYPE_F32);
    assert_int_equal(w.last_count, N);
    for (int i = 0; i < N; ++i) assert_true(y[i] == (x[i] + w.other[i]) / 2.0f);
  }
}

/* One rank, or no communicator: the identity, and the world is not asked. */
static void test_world_of_one_is_identity(void **state) {
  (void)state;
  for (size_t u = 0; u < sizeof(uris) / sizeof(uris[0]); ++u) {
    fake_world_t w = {0};
    float x[N], y[N];
    fill(x, &w);
    ty_host_comm_t one = {.rank = 0, .size = 1, .user = &w,
                          .all_reduce_sum = fake_all_reduce_sum};
    TY_EXPECT_OK(run_on(uris[u], TY_DTYPE_F32, "avg", &one, x, y));
    for (int i = 0; i < N; ++i) assert_true(y[i] == x[i]);
    TY_EXPECT_OK(run_on(uris[u], TY_DTYPE_F32, NULL, NULL, x, y));
    for (int i = 0; i < N; ++i) assert_true(y[i] == x[i]);
    assert_int_equal(w.calls, 0);
  }
}

/* The other rank's failure comes back through the plugin, named. */
static void test_failing_rank_fails_the_run(void **state) {
  (void)state;
  for (size_t u = 0; u < sizeof(uris) / sizeof(uris[0]); ++u) {
    fake_world_t w = {.fail = true};
    float x[N], y[N];
    fill(x, &w);
    ty_host_comm_t comm = {.rank = 0, .size = 2, .user = &w,
                           .all_reduce_sum = fake_all_reduce_sum};
    ty_status_t s = run_on(uris[u], TY_DTYPE_F32, NULL, &comm, x, y);
    TY_EXPECT_STATUS(s, TY_CODE_DEADLINE_EXCEEDED, "rank 1 did not reach the all-reduce");
  }
}

/* The service's own checks, called as a plugin would. */
static void test_service_refuses_bad_arguments(void **state) {
  (void)state;
  const ty_host_api_t *host = ty_hal_host_api();
  assert_non_null(host->collective);
  fake_world_t w = {0};
  ty_host_comm_t comm = {.rank = 0, .size = 2, .user = &w, .all_reduce_sum = fake_all_reduce_sum};
  int64_t ints[N] = {0};
  float f[N] = {0};
  ty_abi_host_collective_args_t a = {
      .struct_size = sizeof(a), .op = 0, .dtype = TY_DTYPE_I64, .data = ints, .count = N};
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)),
                   TY_CODE_INVALID_ARGUMENT, "dtype i64 is not reduced");
  a.dtype = TY_DTYPE_F32;
  a.data = f;
  a.op = 7;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)),
                   TY_CODE_INVALID_ARGUMENT, "reduce op 7 is not sum (0), avg (1) or max (2)");
  a.op = 0;
  a.data = NULL;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)),
                   TY_CODE_INVALID_ARGUMENT, "12 elements but no data");
  a.data = f;
  a.struct_size = 8;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)),
                   TY_CODE_INVALID_ARGUMENT, "shorter than ABI 1.5's");
  a.struct_size = sizeof(a);
  ty_host_comm_t broken = {.rank = 2, .size = 2, .all_reduce_sum = fake_all_reduce_sum};
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&broken, &a)),
                   TY_CODE_INVALID_ARGUMENT, "not set up (rank 2 of 2)");
  assert_int_equal(w.calls, 0);
}

/* ---- process groups (ABI 1.6) ---- */

/* A world of 4 whose "tp" group is this rank and one other holding
 * w->other; "dp" is this rank alone. Records the group it was asked for. */
typedef struct fake_groups_t {
  fake_world_t w;
  char last_group[8];
  bool last_max;
} fake_groups_t;

static uint32_t fake_group_size(void *user, const char *group) {
  (void)user;
  if (!strcmp(group, "world")) return 4;
  if (!strcmp(group, "tp")) return 2;
  if (!strcmp(group, "dp")) return 1;
  return 0;
}

static ty_status_t fake_group_reduce(void *user, const char *group, bool max, ty_dtype_t dtype,
                                     void *data, size_t count) {
  fake_groups_t *f = user;
  snprintf(f->last_group, sizeof(f->last_group), "%s", group);
  f->last_max = max;
  f->w.calls++;
  if (dtype != TY_DTYPE_F32 || count != N) {
    return ty_status_make(TY_CODE_INTERNAL, "fake group: unexpected %s[%zu]",
                          ty_dtype_name(dtype), count);
  }
  float *x = data;
  for (size_t i = 0; i < count; ++i) {
    x[i] = max ? fmaxf(x[i], f->w.other[i]) : x[i] + f->w.other[i];
  }
  return TY_OK;
}

static void test_group_collectives_on(const char *uri) {
  static const struct {
    const char *op, *group, *reduce;
    int calls;
  } cases[] = {
      {"tp_reduce", NULL, NULL, 1},  {"tp_reduce", "tp", "max", 1},
      {"all_reduce", "tp", "avg", 1}, {"all_reduce", "dp", "sum", 0},
      {"tp_copy", "tp", NULL, 0},
  };
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
    fake_groups_t f = {0};
    float x[N], y[N], ones[N];
    fill(x, &f.w);
    for (int i = 0; i < N; ++i) ones[i] = 1.0f;
    ty_host_comm_t comm = {.rank = 0, .size = 4, .user = &f,
                           .all_reduce_sum = fake_all_reduce_sum,
                           .group_size = fake_group_size, .group_reduce = fake_group_reduce};
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t d[2] = {3, 4};
    ty_value_id_t xv, wv, a, yv;
    TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, d, &xv));
    TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 2, d, &wv));
    ty_value_id_t xw[2] = {xv, wv};
    TY_EXPECT_OK(ty_graph_add_node1(g, "mul", xw, 2, NULL, &a));
    ty_attrs_t attrs = {0};
    if (cases[k].group) TY_EXPECT_OK(ty_attrs_set_string(&attrs, "group", cases[k].group));
    if (cases[k].reduce) TY_EXPECT_OK(ty_attrs_set_string(&attrs, "reduce", cases[k].reduce));
    TY_EXPECT_OK(ty_graph_add_node1(g, cases[k].op, &a, 1, &attrs, &yv));
    TY_EXPECT_OK(ty_graph_set_output(g, yv, "y"));
    ty_session_t *s;
    TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
    TY_EXPECT_OK(ty_session_set_host_comm(s, &comm));
    TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, d, x, sizeof(x)));
    TY_EXPECT_OK(ty_session_bind(s, "w", TY_DTYPE_F32, 2, d, ones, sizeof(ones)));
    TY_EXPECT_OK(ty_session_run(s));
    TY_EXPECT_OK(ty_session_read(s, "y", y, sizeof(y)));
    assert_int_equal(f.w.calls, cases[k].calls);
    const bool max = cases[k].reduce && !strcmp(cases[k].reduce, "max");
    const bool avg = cases[k].reduce && !strcmp(cases[k].reduce, "avg");
    for (int i = 0; i < N; ++i) {
      float want = x[i];
      if (cases[k].calls) want = max ? fmaxf(x[i], f.w.other[i]) : x[i] + f.w.other[i];
      if (avg) want /= 2.0f; /* the tp group's size, not the world's 4 */
      assert_float_equal(y[i], want, 0.0f);
    }
    if (cases[k].calls) {
      assert_string_equal(f.last_group, "tp");
      assert_int_equal(f.last_max, max);
    }
    ty_session_destroy(s);
    ty_graph_destroy(g);
  }
  ty_device_close(dev);
  ty_registry_destroy(r);
}


/* y = tp_reduce(x * w) (or all_reduce with a group) on cpu and dataflow
 * (both on the host executor), through the comm's group service: sum, max,
 * a one-rank group, and avg by the group's size, not the world's. */
static void test_group_collectives(void **state) {
  (void)state;
  for (size_t u = 0; u < 2; ++u) test_group_collectives_on(u == 0 ? "cpu" : "dataflow");
}

/* A plugin of ABI 1.5 would reduce every collective over the world: the
 * host refuses it a graph whose collectives name a group, and still runs
 * its world-wide all_reduce. */
static void test_old_plugin_refuses_groups(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_BRINGUP_DIR "/old15"};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "old15", &dev));
  fake_groups_t f = {0};
  ty_host_comm_t comm = {.rank = 0, .size = 4, .user = &f, .all_reduce_sum = fake_all_reduce_sum,
                         .group_size = fake_group_size, .group_reduce = fake_group_reduce};
  static const char *const ops[] = {"tp_reduce", "tp_copy", "all_reduce", "all_reduce"};
  static const char *const groups[] = {NULL, NULL, "dp", "world"};
  for (int k = 0; k < 4; ++k) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t d[1] = {N};
    ty_value_id_t x, y;
    TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
    ty_attrs_t attrs = {0};
    if (groups[k]) TY_EXPECT_OK(ty_attrs_set_string(&attrs, "group", groups[k]));
    TY_EXPECT_OK(ty_graph_add_node1(g, ops[k], &x, 1, &attrs, &y));
    TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
    ty_session_t *s;
    TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
    if (k < 3) {
      TY_EXPECT_STATUS(ty_session_set_host_comm(s, &comm), TY_CODE_FAILED_PRECONDITION,
                       "needs the process groups of ABI 1.6");
    } else {
      TY_EXPECT_OK(ty_session_set_host_comm(s, &comm));
    }
    ty_session_destroy(s);
    ty_graph_destroy(g);
  }
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* The service: a group the run lacks, a comm with the world alone. */
static void test_group_service_errors(void **state) {
  (void)state;
  const ty_host_api_t *host = ty_hal_host_api();
  fake_groups_t f = {0};
  float x[N] = {1};
  ty_host_comm_t comm = {.rank = 0, .size = 4, .user = &f, .all_reduce_sum = fake_all_reduce_sum,
                         .group_size = fake_group_size, .group_reduce = fake_group_reduce};
  ty_abi_host_collective_args_t a = {.struct_size = sizeof(a), .op = TY_ABI_REDUCE_SUM,
                                     .dtype = TY_DTYPE_F32, .data = x, .count = N,
                                     .group = "pp"};
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)), TY_CODE_NOT_FOUND,
                   "no process group 'pp'");
  ty_host_comm_t world_only = {.rank = 0, .size = 2, .user = &f.w,
                               .all_reduce_sum = fake_all_reduce_sum};
  a.group = "tp";
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&world_only, &a)), TY_CODE_NOT_FOUND,
                   "no process group 'tp'");
  a.group = NULL;
  a.op = TY_ABI_REDUCE_MAX;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&world_only, &a)),
                   TY_CODE_FAILED_PRECONDITION, "sums over the world only");
  /* A 1.5 plugin's args (ending before `group`) reduce over the world. */
  a.op = TY_ABI_REDUCE_SUM;
  a.group = "tp";
  a.struct_size = offsetof(ty_abi_host_collective_args_t, group);
  fill(x, &f.w);
  TY_EXPECT_OK(ty_status_from_abi(host->collective(&world_only, &a)));
  assert_int_equal(f.w.calls, 1);
}

/* ---- the gathers of context parallel (ABI 1.11) ---- */

/* A "cp" group of 2 whose other rank (this is rank 1) holds w->other in
 * the slots it fills: the service's all_gather sum leaves them there. */
static uint32_t fake_cp_size(void *user, const char *group) {
  (void)user;
  return !strcmp(group, "cp") ? 2 : !strcmp(group, "world") ? 4 : 0;
}

static uint32_t fake_cp_rank(void *user, const char *group) {
  (void)user;
  (void)group;
  return 1;
}

static ty_status_t fake_cp_reduce(void *user, const char *group, bool max, ty_dtype_t dtype,
                                  void *data, size_t count) {
  fake_groups_t *f = user;
  snprintf(f->last_group, sizeof(f->last_group), "%s", group);
  f->w.calls++;
  if (max || dtype != TY_DTYPE_F32 || count != 2 * N) {
    return ty_status_make(TY_CODE_INTERNAL, "fake cp: unexpected %s[%zu]", ty_dtype_name(dtype),
                          count);
  }
  /* the other rank (cp rank 0) brings its x in part 0 of each of the 3 rows */
  float *x = data;
  for (size_t o = 0; o < 3; ++o) {
    for (size_t i = 0; i < N / 3; ++i) x[o * 2 * (N / 3) + i] += f->w.other[o * (N / 3) + i];
  }
  return TY_OK;
}

/* The service: all_gather puts this rank's [3, 4] rows in part 1 of each
 * row of [3, 2, 4] and the other's in part 0; reduce_scatter keeps part 1
 * of the sum; bad shapes, a dtype and a comm without group ranks are
 * refused by name. */
static void test_gather_service(void **state) {
  (void)state;
  const ty_host_api_t *host = ty_hal_host_api();
  fake_groups_t f = {0};
  for (int i = 0; i < N; ++i) f.w.other[i] = 1000.0f + (float)i;
  ty_host_comm_t comm = {.rank = 1, .size = 4, .user = &f, .all_reduce_sum = fake_all_reduce_sum,
                         .group_size = fake_cp_size, .group_reduce = fake_cp_reduce,
                         .group_rank = fake_cp_rank};
  float part[N], all[2 * N], back[N];
  for (int i = 0; i < N; ++i) part[i] = (float)i;
  ty_abi_host_collective_args_t a = {.struct_size = sizeof(a), .op = TY_ABI_REDUCE_SUM,
                                     .dtype = TY_DTYPE_F32, .data = all, .count = 2 * N,
                                     .group = "cp", .kind = TY_ABI_HOST_ALL_GATHER, .outer = 3,
                                     .part = part};
  TY_EXPECT_OK(ty_status_from_abi(host->collective(&comm, &a)));
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 4; ++i) {
      assert_float_equal(all[o * 8 + i], 1000.0f + (float)(o * 4 + i), 0.0f);
      assert_float_equal(all[o * 8 + 4 + i], (float)(o * 4 + i), 0.0f);
    }
  }
  assert_string_equal(f.last_group, "cp");
  a.kind = TY_ABI_HOST_REDUCE_SCATTER;
  a.part = back;
  TY_EXPECT_OK(ty_status_from_abi(host->collective(&comm, &a)));
  for (int i = 0; i < N; ++i) assert_float_equal(back[i], (float)i, 0.0f); /* part 1 of the sum */
  a.outer = 5; /* 24 elements are not [5, 2, block] */
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)), TY_CODE_INVALID_ARGUMENT,
                   "reduce_scatter of 24 elements is not [outer 5, 2 ranks, block]");
  a.outer = 3;
  a.dtype = TY_DTYPE_I64;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)), TY_CODE_INVALID_ARGUMENT,
                   "reduce_scatter of i64 (f32, bf16, f16, f64 only)");
  a.dtype = TY_DTYPE_F32;
  a.kind = 7;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)), TY_CODE_INVALID_ARGUMENT,
                   "kind 7 is not a reduction (0), all_gather (1) or reduce_scatter (2)");
  a.kind = TY_ABI_HOST_ALL_GATHER;
  comm.group_rank = NULL;
  TY_EXPECT_STATUS(ty_status_from_abi(host->collective(&comm, &a)),
                   TY_CODE_FAILED_PRECONDITION, "cannot tell this rank's place in it");
}

/* A graph built for 2 cp ranks: run without a communicator it says why;
 * a plugin older than 1.11 is refused when the run hands it one. */
static void test_gather_needs_its_group(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cpu", &dev));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[2] = {3, 4};
  ty_value_id_t x, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, d, &x));
  ty_attrs_t attrs = {0};
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "axis", 1));
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "parts", 2));
  TY_EXPECT_OK(ty_graph_add_node1(g, "all_gather", &x, 1, &attrs, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  float xv[12] = {0};
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, d, xv, sizeof(xv)));
  TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_FAILED_PRECONDITION,
                   "(all_gather of 2 parts over group cp) needs a run of several ranks");
  fake_groups_t f = {0};
  ty_host_comm_t comm = {.rank = 0, .size = 4, .user = &f, .all_reduce_sum = fake_all_reduce_sum,
                         .group_size = fake_group_size, .group_reduce = fake_group_reduce};
  TY_EXPECT_STATUS(ty_session_set_host_comm(s, &comm), TY_CODE_FAILED_PRECONDITION,
                   "(all_gather over group cp): this run has no cp group");
  ty_session_destroy(s);
  ty_device_close(dev);
  ty_registry_destroy(r);
  const char *paths[] = {TY_TEST_BRINGUP_DIR "/old15"};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  TY_EXPECT_OK(ty_device_open(r, "old15", &dev));
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  comm.group_size = fake_cp_size;
  TY_EXPECT_STATUS(ty_session_set_host_comm(s, &comm), TY_CODE_FAILED_PRECONDITION,
                   "needs the gathers of ABI 1.11");
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* ---- the data-parallel train step in one graph ---- */

/* A fake second rank with the same batch: the sum over two ranks doubles. */
static ty_status_t twin_all_reduce_sum(void *user, ty_dtype_t dtype, void *data, size_t count) {
  int *calls = user;
  ++*calls;
  if (dtype != TY_DTYPE_F32) return ty_status_make(TY_CODE_INTERNAL, "twin: not f32");
  float *x = data;
  for (size_t i = 0; i < count; ++i) x[i] += x[i];
  return TY_OK;
}

/* loss = sum((x @ w)^2), one SGD step of w (no clipping, no momentum) with
 * the gradient all-reduced in the step when `reduce`; returns w after the
 * step and the number of all_reduce nodes the graph has. */
static uint32_t sgd_step(const char *uri, bool reduce, const ty_host_comm_t *comm, double lr,
                         float *w_out) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t dx[2] = {2, 4}, dw[2] = {4, 3};
  ty_value_id_t x, w, a, sq, loss;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, dx, &x));
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 2, dw, &w));
  ty_value_id_t xw[2] = {x, w};
  TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", xw, 2, NULL, &a));
  ty_value_id_t aa[2] = {a, a};
  TY_EXPECT_OK(ty_graph_add_node1(g, "mul", aa, 2, NULL, &sq));
  TY_EXPECT_OK(ty_graph_add_node1(g, "reduce_sum", &sq, 1, NULL, &loss));
  ty_train_step_params_t p = {.loss = loss, .loss_seed = TY_VALUE_NONE, .params = &w,
                              .param_count = 1, .optimizer = TY_OPTIMIZER_SGD,
                              .mode = TY_TRAIN_STEP_FUSED, .all_reduce_grads = reduce};
  TY_EXPECT_OK(ty_graph_build_train_step(g, &p));
  uint32_t collectives = 0;
  for (uint32_t n = 0; n < ty_graph_node_count(g); ++n) {
    collectives += strcmp(ty_graph_node(g, n)->op, "all_reduce") == 0;
  }
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  TY_EXPECT_OK(ty_session_set_host_comm(s, comm));
  float xs[8], ws[12];
  for (int i = 0; i < 8; ++i) xs[i] = 0.125f * (float)(i - 3);
  for (int i = 0; i < 12; ++i) ws[i] = 0.0625f * (float)(5 - i);
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, dx, xs, sizeof(xs)));
  TY_EXPECT_OK(ty_session_bind(s, "w", TY_DTYPE_F32, 2, dw, ws, sizeof(ws)));
  const char *names[4] = {"lr", "weight_decay", "max_norm", "momentum"};
  const float values[4] = {(float)lr, 0.0f, 0.0f, 0.0f};
  for (int k = 0; k < 4; ++k) {
    TY_EXPECT_OK(ty_session_bind(s, names[k], TY_DTYPE_F32, 0, NULL, &values[k], sizeof(float)));
  }
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "w", w_out, 12 * sizeof(float)));
  ty_session_destroy(s);
  ty_device_close(dev);
  ty_registry_destroy(r);
  ty_graph_destroy(g);
  return collectives;
}

/* Two ranks with the same batch sum to twice the gradient: one fused step
 * there equals one process's step at twice the learning rate, bit for bit
 * (both scale by an exact 2); at world 1 the op changes nothing. */
static void test_fused_step_reduces_gradients_in_the_step(void **state) {
  (void)state;
  const char *step_uris[] = {"cpu", "dataflow"};
  for (size_t u = 0; u < 2; ++u) {
    int calls = 0;
    ty_host_comm_t twin = {.rank = 0, .size = 2, .user = &calls,
                           .all_reduce_sum = twin_all_reduce_sum};
    float two_ranks[12], doubled_lr[12], one[12], plain[12];
    assert_int_equal(sgd_step(step_uris[u], true, &twin, 0.1, two_ranks), 1);
    assert_int_equal(calls, 1);
    assert_int_equal(sgd_step(step_uris[u], false, NULL, 0.2, doubled_lr), 0);
    assert_int_equal(sgd_step(step_uris[u], true, NULL, 0.1, one), 1);
    assert_int_equal(sgd_step(step_uris[u], false, NULL, 0.1, plain), 0);
    for (int i = 0; i < 12; ++i) {
      if (two_ranks[i] != doubled_lr[i] || one[i] != plain[i]) {
        fail_msg("%s w[%d]: 2 ranks %.9g vs 2x lr %.9g; world 1 %.9g vs plain %.9g",
                 step_uris[u], i, two_ranks[i], doubled_lr[i], one[i], plain[i]);
      }
      if (two_ranks[i] == plain[i]) fail_msg("%s w[%d] did not move", step_uris[u], i);
    }
  }
}

static void test_reduce_needs_the_plain_fused_step(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {3};
  ty_value_id_t w, loss;
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 1, d, &w));
  TY_EXPECT_OK(ty_graph_add_node1(g, "reduce_sum", &w, 1, NULL, &loss));
  ty_train_step_params_t p = {.loss = loss, .loss_seed = TY_VALUE_NONE, .params = &w,
                              .param_count = 1, .mode = TY_TRAIN_STEP_ACCUMULATE,
                              .all_reduce_grads = true};
  TY_EXPECT_STATUS(ty_graph_build_train_step(g, &p), TY_CODE_INVALID_ARGUMENT,
                   "gradient accumulation updates before the sum");
  ty_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_and_avg_over_two_ranks),
      cmocka_unit_test(test_bf16_is_staged_through_f32),
      cmocka_unit_test(test_world_of_one_is_identity),
      cmocka_unit_test(test_failing_rank_fails_the_run),
      cmocka_unit_test(test_service_refuses_bad_arguments),
      cmocka_unit_test(test_group_collectives),
      cmocka_unit_test(test_group_service_errors),
      cmocka_unit_test(test_old_plugin_refuses_groups),
      cmocka_unit_test(test_gather_service),
      cmocka_unit_test(test_gather_needs_its_group),
      cmocka_unit_test(test_fused_step_reduces_gradients_in_the_step),
      cmocka_unit_test(test_reduce_needs_the_plain_fused_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
