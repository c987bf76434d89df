/* ABI 1.5 host collectives: a graph's all_reduce runs inside the plugin's
 * step through host->collective (hal/comm.h) on the cpu and dataflow
 * plugins. The world here is a fake of two ranks whose other rank holds
 * known values, so sum, avg, bf16 staging, world 1 and a failing rank are
 * all checked in one process; tests/apps/test_distributed_cli.py runs the
 * real thing under mpirun. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/graph.h"
#include "graph/session.h"
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

static ty_registry_t *open_registry(void) {
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  return r;
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
  ty_registry_t *r = open_registry();
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
                   TY_CODE_INVALID_ARGUMENT, "reduce op 7 is neither sum (0) nor avg (1)");
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sum_and_avg_over_two_ranks),
      cmocka_unit_test(test_bf16_is_staged_through_f32),
      cmocka_unit_test(test_world_of_one_is_identity),
      cmocka_unit_test(test_failing_rank_fails_the_run),
      cmocka_unit_test(test_service_refuses_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
