/* The cuda plugin's data errors, run on the CPU emulator of tests/cuda/emu
 * (TRAINYARD_CUDA_DRIVER and TRAINYARD_CUDA_BLASLT name it): every error a
 * kernel reports through the error flag — an id or target outside the
 * vocabulary, KV positions past the cache, an i64 that does not fit i32,
 * AdamW's step 0, SGD's nesterov without momentum — comes back from the
 * run as INVALID_ARGUMENT naming the node and the values, and the next run
 * with good data succeeds (the flag is cleared). */
#include <stdio.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/graph.h"
#include "graph/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"

typedef struct {
  ty_dtype_t dtype;
  uint32_t rank;
  int64_t dims[4];
  void *bad;        /* the data that makes the run fail */
  const void *good; /* NULL: the same as bad (the error is elsewhere) */
} input_t;

static int64_t count_of(const input_t *in) {
  int64_t n = 1;
  for (uint32_t i = 0; i < in->rank; ++i) n *= in->dims[i];
  return n;
}

/* One node of `op` on cuda:0: fails with `want` on the bad inputs, then
 * runs on the good ones. */
static void expect_data_error(const char *op, uint32_t n_out, const ty_attrs_t *attrs,
                              uint32_t n_in, const input_t *in, const char *want) {
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cuda:0", &dev));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t ids[12], outs[4];
  char names[12][8];
  assert_true(n_in <= 12);
  for (uint32_t i = 0; i < n_in; ++i) {
    snprintf(names[i], sizeof(names[i]), "in%u", i);
    TY_EXPECT_OK(ty_graph_add_input(g, names[i], in[i].dtype, in[i].rank, in[i].dims, &ids[i]));
  }
  TY_EXPECT_OK(ty_graph_add_node(g, op, ids, n_in, attrs, outs, n_out));
  TY_EXPECT_OK(ty_graph_set_output(g, outs[0], "out"));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t i = 0; i < n_in; ++i) {
      const void *data = pass == 1 && in[i].good ? in[i].good : in[i].bad;
      const size_t bytes = (size_t)count_of(&in[i]) * ty_dtype_size(in[i].dtype);
      TY_EXPECT_OK(ty_session_bind(s, names[i], in[i].dtype, in[i].rank, in[i].dims, data,
                                   bytes));
    }
    if (pass == 0) TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_INVALID_ARGUMENT, want);
    else TY_EXPECT_OK(ty_session_run(s));
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

static float g_table[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

static void test_embedding_ids(void **state) {
  (void)state;
  int32_t bad[3] = {0, 3, 1}, good[3] = {0, 2, 1}; /* 3 is outside [0, 3) */
  input_t in[2] = {{TY_DTYPE_F32, 2, {3, 4}, g_table, NULL},
                   {TY_DTYPE_I32, 1, {3}, bad, good}};
  expect_data_error("embedding", 1, NULL, 2, in,
                    "node 0 (embedding): embedding: ids[1] = 3 is outside the vocabulary [0, 3)");
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "vocab_size", 3));
  expect_data_error("embedding_backward", 1, &attrs, 2, in,
                    "node 0 (embedding_backward): embedding: ids[1] = 3 is outside the "
                    "vocabulary [0, 3)");
}

static void test_cross_entropy_targets(void **state) {
  (void)state;
  int64_t bad[3] = {1, -1, 4}, good[3] = {1, -1, 3}; /* 4 is outside [0, 4); -1 ignored */
  float dloss[3] = {1, 1, 1};
  input_t fwd[2] = {{TY_DTYPE_F32, 2, {3, 4}, g_table, NULL},
                    {TY_DTYPE_I64, 1, {3}, bad, good}};
  expect_data_error("cross_entropy", 1, NULL, 2, fwd,
                    "node 0 (cross_entropy): cross_entropy: targets[2] = 4 is outside the "
                    "vocabulary [0, 4)");
  input_t bwd[3] = {{TY_DTYPE_F32, 1, {3}, dloss, NULL},
                    {TY_DTYPE_F32, 2, {3, 4}, g_table, NULL},
                    {TY_DTYPE_I64, 1, {3}, bad, good}};
  expect_data_error("cross_entropy_backward", 1, NULL, 3, bwd,
                    "node 0 (cross_entropy_backward): cross_entropy: targets[2] = 4");
}

static void test_kv_cache_position(void **state) {
  (void)state;
  float cache[2 * 5 * 1 * 2] = {0}, fresh[2 * 2 * 1 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t bad = 4, good = 3; /* 4 + 2 > 5 */
  input_t in[3] = {{TY_DTYPE_F32, 4, {2, 5, 1, 2}, cache, NULL},
                   {TY_DTYPE_F32, 4, {2, 2, 1, 2}, fresh, NULL},
                   {TY_DTYPE_I64, 0, {0}, &bad, &good}};
  expect_data_error("kv_cache_write", 1, NULL, 3, in,
                    "node 0 (kv_cache_write): kv_cache_write: 2 new positions starting at "
                    "position 4 do not fit in a cache of max_len 5");
}

static void test_cast_range(void **state) {
  (void)state;
  int64_t bad[3] = {7, (int64_t)1 << 40, -2}, good[3] = {7, 8, -2};
  input_t in[1] = {{TY_DTYPE_I64, 1, {3}, bad, good}};
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_string(&attrs, "dtype", "i32"));
  expect_data_error("cast", 1, &attrs, 1, in,
                    "node 0 (cast): cast i64 -> i32: element 1 = 1099511627776 does not fit "
                    "in i32");
}

static void test_optimizer_hyperparameters(void **state) {
  (void)state;
  float p[5] = {1, 2, 3, 4, 5}, grad[5] = {1, -1, 1, -1, 1}, m[5] = {0}, v[5] = {0};
  float lr = 0.1f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.0f;
  int64_t bad_step = 0, good_step = 1;
  input_t adamw[10] = {{TY_DTYPE_F32, 1, {5}, p, NULL},         {TY_DTYPE_F32, 1, {5}, grad, NULL},
                       {TY_DTYPE_F32, 1, {5}, m, NULL},         {TY_DTYPE_F32, 1, {5}, v, NULL},
                       {TY_DTYPE_F32, 0, {0}, &lr, NULL},       {TY_DTYPE_F32, 0, {0}, &b1, NULL},
                       {TY_DTYPE_F32, 0, {0}, &b2, NULL},       {TY_DTYPE_F32, 0, {0}, &eps, NULL},
                       {TY_DTYPE_F32, 0, {0}, &wd, NULL},
                       {TY_DTYPE_I64, 0, {0}, &bad_step, &good_step}};
  expect_data_error("adamw_update", 3, NULL, 10, adamw,
                    "node 0 (adamw_update): adamw: step 0 must be >= 1");
  float zero = 0.0f, momentum = 0.9f;
  input_t sgd[6] = {{TY_DTYPE_F32, 1, {5}, p, NULL},    {TY_DTYPE_F32, 1, {5}, grad, NULL},
                    {TY_DTYPE_F32, 1, {5}, m, NULL},    {TY_DTYPE_F32, 0, {0}, &lr, NULL},
                    {TY_DTYPE_F32, 0, {0}, &zero, &momentum},
                    {TY_DTYPE_F32, 0, {0}, &wd, NULL}};
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "nesterov", 1));
  expect_data_error("sgd_update", 2, &attrs, 6, sgd,
                    "node 0 (sgd_update): sgd: nesterov needs momentum > 0 (got 0)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_embedding_ids),
      cmocka_unit_test(test_cross_entropy_targets),
      cmocka_unit_test(test_kv_cache_position),
      cmocka_unit_test(test_cast_range),
      cmocka_unit_test(test_optimizer_hyperparameters),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
