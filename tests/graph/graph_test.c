/* Graph IR tests: builder errors, lowering (dead-value removal, canonical
 * text, stable hash, dot), and sessions on the cpu plugin (results, state
 * kept on the device, transfer counts, compile-cache hits, support gaps). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/autodiff.h"
#include "graph/ir/graph.h"
#include "graph/ir/lower.h"
#include "graph/runtime/session.h"
#include "hal/buffer.h"
#include "hal/device.h"
#include "hal/registry.h"

/* y = x @ w + b, with an unused branch that lowering must drop. */
static ty_graph_t *build_linear(int64_t m, int64_t k, int64_t n) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x, w, b, y, dead;
  int64_t xd[2] = {m, k}, wd[2] = {k, n}, bd[1] = {n};
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, xd, &x));
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 2, wd, &w));
  TY_EXPECT_OK(ty_graph_add_state(g, "b", TY_DTYPE_F32, 1, bd, &b));
  ty_value_id_t in[3] = {x, w, b};
  TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", in, 3, NULL, &y));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &dead));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  return g;
}

/* x -> add(x, x) -> matmul(a, w) with trans_b as given: two nodes, so the
 * attribute sits on a node other than the first. */
static ty_graph_t *build_add_matmul(bool trans_b) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x, w, a, y;
  int64_t d[2] = {3, 3};
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, d, &x));
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 2, d, &w));
  ty_value_id_t xx[2] = {x, x};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", xx, 2, NULL, &a));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  if (trans_b) TY_EXPECT_OK(ty_attrs_set_int(&attrs, "trans_b", 1));
  ty_value_id_t in[2] = {a, w};
  TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", in, 2, &attrs, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  return g;
}

static void test_builder_errors(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t a, b, c;
  int64_t d2[2] = {2, 3}, d3[2] = {4, 5};
  TY_EXPECT_OK(ty_graph_add_input(g, "a", TY_DTYPE_F32, 2, d2, &a));
  TY_EXPECT_STATUS(ty_graph_add_input(g, "a", TY_DTYPE_F32, 2, d2, &b),
                   TY_CODE_ALREADY_EXISTS, "already has a value named 'a'");
  TY_EXPECT_STATUS(ty_graph_add_input(g, "", TY_DTYPE_F32, 2, d2, &b),
                   TY_CODE_INVALID_ARGUMENT, "must not be empty");
  TY_EXPECT_OK(ty_graph_add_input(g, "b", TY_DTYPE_F32, 2, d3, &b));
  ty_value_id_t in[2] = {a, b};
  uint32_t before = ty_graph_value_count(g);
  TY_EXPECT_STATUS(ty_graph_add_node1(g, "matmul", in, 2, NULL, &c),
                   TY_CODE_INVALID_ARGUMENT, "inner dimensions 3 and 4 differ");
  assert_int_equal(ty_graph_value_count(g), before); /* unchanged on error */
  TY_EXPECT_STATUS(ty_graph_add_node1(g, "no_such_op", in, 2, NULL, &c),
                   TY_CODE_NOT_FOUND, "no_such_op");
  ty_value_id_t bogus[1] = {999};
  TY_EXPECT_STATUS(ty_graph_add_node1(g, "gelu", bogus, 1, NULL, &c),
                   TY_CODE_INVALID_ARGUMENT, "refers to value 999");
  TY_EXPECT_STATUS(ty_graph_set_state_update(g, a, b), TY_CODE_INVALID_ARGUMENT,
                   "not a state value");
  ty_lowered_graph_t *l;
  TY_EXPECT_STATUS(ty_graph_lower(g, &l), TY_CODE_FAILED_PRECONDITION,
                   "no output and no state update");
  ty_graph_destroy(g);
}

static void test_lowering_drops_dead_nodes_and_hash_is_stable(void **state) {
  (void)state;
  ty_graph_t *g1 = build_linear(2, 3, 4), *g2 = build_linear(2, 3, 4);
  ty_graph_t *g3 = build_linear(2, 3, 5);
  ty_lowered_graph_t *l1, *l2, *l3;
  TY_EXPECT_OK(ty_graph_lower(g1, &l1));
  TY_EXPECT_OK(ty_graph_lower(g2, &l2));
  TY_EXPECT_OK(ty_graph_lower(g3, &l3));
  const ty_abi_graph_t *abi = ty_lowered_graph_abi(l1);
  assert_int_equal(abi->node_count, 1); /* the gelu is dead */
  assert_string_equal(abi->nodes[0].op, "matmul");
  assert_string_equal(ty_lowered_graph_hash(l1), ty_lowered_graph_hash(l2));
  assert_string_not_equal(ty_lowered_graph_hash(l1), ty_lowered_graph_hash(l3));
  assert_int_equal(strlen(ty_lowered_graph_hash(l1)), 64);
  /* Graphs that differ in one node's attribute only differ in hash (the
   * compile-cache key): x @ w and x @ w^T must never share an executable. */
  ty_graph_t *plain = build_add_matmul(false), *trans = build_add_matmul(true);
  ty_lowered_graph_t *lp, *lt;
  TY_EXPECT_OK(ty_graph_lower(plain, &lp));
  TY_EXPECT_OK(ty_graph_lower(trans, &lt));
  assert_string_not_equal(ty_lowered_graph_hash(lp), ty_lowered_graph_hash(lt));
  TY_EXPECT_CONTAINS(ty_lowered_graph_text(lt), "trans_b");
  ty_lowered_graph_destroy(lp);
  ty_lowered_graph_destroy(lt);
  ty_graph_destroy(plain);
  ty_graph_destroy(trans);
  const char *text = ty_lowered_graph_text(l1);
  TY_EXPECT_CONTAINS(text, "trainyard-graph 1\n");
  TY_EXPECT_CONTAINS(text, "= input \"x\" f32[2,3]");
  TY_EXPECT_CONTAINS(text, "= matmul(%0, %1, %2) : f32[2,4]");
  TY_EXPECT_CONTAINS(text, "output %3 \"y\"");
  assert_null(strstr(text, "gelu"));
  char *dot = NULL;
  TY_EXPECT_OK(ty_lowered_graph_format_dot(l1, &dot));
  TY_EXPECT_CONTAINS(dot, "digraph trainyard {");
  TY_EXPECT_CONTAINS(dot, "label=\"matmul\"");
  free(dot);
  ty_lowered_graph_destroy(l1);
  ty_lowered_graph_destroy(l2);
  ty_lowered_graph_destroy(l3);
  ty_graph_destroy(g1);
  ty_graph_destroy(g2);
  ty_graph_destroy(g3);
}

static void run_linear_on(const char *uri) {
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  const int64_t m = 3, k = 4, n = 5;
  ty_graph_t *g = build_linear(m, k, n);
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  assert_false(ty_session_stats(s).cache_hit);
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  float x[12], w[20], b[5], y[15];
  for (int i = 0; i < 12; ++i) x[i] = (float)((ty_test_rng_next(&rng) % 2001) / 1000.0 - 1.0);
  for (int i = 0; i < 20; ++i) w[i] = (float)((ty_test_rng_next(&rng) % 2001) / 1000.0 - 1.0);
  for (int i = 0; i < 5; ++i) b[i] = (float)(i + 1);
  int64_t xd[2] = {m, k}, wd[2] = {k, n}, bd[1] = {n};
  TY_EXPECT_OK(ty_session_bind(s, "w", TY_DTYPE_F32, 2, wd, w, sizeof(w)));
  TY_EXPECT_OK(ty_session_bind(s, "b", TY_DTYPE_F32, 1, bd, b, sizeof(b)));
  TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_FAILED_PRECONDITION,
                   "input 'x' was never bound");
  TY_EXPECT_STATUS(ty_session_bind(s, "x", TY_DTYPE_F32, 2, wd, w, sizeof(w)),
                   TY_CODE_INVALID_ARGUMENT, "wants f32[3,4] but got f32[4,5]");
  /* Every dim is compared, the last one too (not only the byte count). */
  const int64_t wide[2] = {m, n};
  TY_EXPECT_STATUS(ty_session_bind(s, "x", TY_DTYPE_F32, 2, wide, w, (size_t)(m * n) * 4),
                   TY_CODE_INVALID_ARGUMENT, "wants f32[3,4] but got f32[3,5]");
  TY_EXPECT_STATUS(ty_session_bind(s, "nope", TY_DTYPE_F32, 2, xd, x, sizeof(x)),
                   TY_CODE_NOT_FOUND, "'nope'");
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, xd, x, sizeof(x)));
  ty_session_stats_t before = ty_session_stats(s);
  ty_transfer_stats_t hal_before = ty_buffer_transfer_stats();
  for (int run = 0; run < 3; ++run) TY_EXPECT_OK(ty_session_run(s));
  ty_session_stats_t after = ty_session_stats(s);
  ty_transfer_stats_t hal_after = ty_buffer_transfer_stats();
  /* Counted at the hal buffer layer too: no write, read or copy at all. */
  assert_int_equal(hal_after.writes, hal_before.writes);
  assert_int_equal(hal_after.reads, hal_before.reads);
  assert_int_equal(hal_after.copies, hal_before.copies);
  /* Running moves nothing between host and device. */
  assert_int_equal(after.host_to_device_count, before.host_to_device_count);
  assert_int_equal(after.device_to_host_count, before.device_to_host_count);
  assert_int_equal(after.runs, 3);
  TY_EXPECT_OK(ty_session_read(s, "y", y, sizeof(y)));
  /* One requested read, of exactly the output's bytes. */
  assert_int_equal(ty_buffer_transfer_stats().reads, hal_after.reads + 1);
  assert_int_equal(ty_buffer_transfer_stats().read_bytes, hal_after.read_bytes + sizeof(y));
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double want = b[j];
      for (int p = 0; p < k; ++p) want += (double)x[i * k + p] * w[p * n + j];
      assert_true(fabs(y[i * n + j] - want) < 1e-5);
    }
  }
  /* A read of part of an output is refused, not filled in part. */
  TY_EXPECT_STATUS(ty_session_read(s, "y", y, sizeof(y) - 4), TY_CODE_INVALID_ARGUMENT,
                   "reading 'y': 56 bytes requested from a 60-byte tensor");
  /* The same graph again on the same device is a compile-cache hit. */
  ty_graph_t *g2 = build_linear(m, k, n);
  ty_session_t *s2;
  TY_EXPECT_OK(ty_session_create(dev, g2, NULL, &s2));
  assert_true(ty_session_stats(s2).cache_hit);
  assert_string_equal(ty_session_graph_hash(s), ty_session_graph_hash(s2));
  ty_session_destroy(s2);
  ty_session_destroy(s);
  ty_graph_destroy(g2);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* ty_session_bind_device: an input filled from a device buffer (at an
 * offset) by one device copy, no host write; the same result as the host
 * bind; an output, a wrong size, a range past the buffer, another device's
 * buffer and an unknown name are refused by name. */
static void test_session_bind_device(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev, *other;
  TY_EXPECT_OK(ty_device_open(r, "cpu", &dev));
  TY_EXPECT_OK(ty_device_open(r, "cpu", &other));
  const int64_t m = 3, k = 4, n = 5;
  ty_graph_t *g = build_linear(m, k, n);
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  float x[12], w[20], b[5], y_host[15], y_dev[15];
  for (int i = 0; i < 12; ++i) x[i] = (float)((ty_test_rng_next(&rng) % 2001) / 1000.0 - 1.0);
  for (int i = 0; i < 20; ++i) w[i] = (float)((ty_test_rng_next(&rng) % 2001) / 1000.0 - 1.0);
  for (int i = 0; i < 5; ++i) b[i] = (float)(ty_test_rng_next(&rng) % 7);
  int64_t xd[2] = {m, k}, wd[2] = {k, n}, bd[1] = {n};
  TY_EXPECT_OK(ty_session_bind(s, "w", TY_DTYPE_F32, 2, wd, w, sizeof(w)));
  TY_EXPECT_OK(ty_session_bind(s, "b", TY_DTYPE_F32, 1, bd, b, sizeof(b)));
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, xd, x, sizeof(x)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "y", y_host, sizeof(y_host)));
  /* x at byte 16 of a device buffer; the session's x overwritten first */
  ty_buffer_t *src, *far;
  TY_EXPECT_OK(ty_buffer_alloc(dev, 16 + sizeof(x), &src));
  TY_EXPECT_OK(ty_buffer_alloc(other, sizeof(x), &far));
  TY_EXPECT_OK(ty_buffer_write(src, 16, x, sizeof(x)));
  float zeros[12] = {0};
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, xd, zeros, sizeof(zeros)));
  ty_transfer_stats_t before = ty_buffer_transfer_stats();
  TY_EXPECT_OK(ty_session_bind_device(s, "x", src, 16, sizeof(x)));
  ty_transfer_stats_t after = ty_buffer_transfer_stats();
  assert_int_equal(after.writes, before.writes);
  assert_int_equal(after.reads, before.reads);
  assert_int_equal(after.copies, before.copies + 1);
  assert_int_equal(after.copy_bytes, before.copy_bytes + sizeof(x));
  assert_int_equal(ty_session_stats(s).device_to_device_bytes, sizeof(x));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "y", y_dev, sizeof(y_dev)));
  assert_memory_equal(y_host, y_dev, sizeof(y_dev));
  TY_EXPECT_STATUS(ty_session_bind_device(s, "y", src, 0, sizeof(y_dev)),
                   TY_CODE_INVALID_ARGUMENT, "'y' is an output");
  TY_EXPECT_STATUS(ty_session_bind_device(s, "x", src, 0, sizeof(x) - 4),
                   TY_CODE_INVALID_ARGUMENT, "44 bytes given for a 48-byte tensor");
  TY_EXPECT_STATUS(ty_session_bind_device(s, "x", src, 20, sizeof(x)),
                   TY_CODE_INVALID_ARGUMENT, "binding 'x' from a device buffer");
  TY_EXPECT_STATUS(ty_session_bind_device(s, "x", far, 0, sizeof(x)),
                   TY_CODE_INVALID_ARGUMENT, "the session runs on");
  TY_EXPECT_STATUS(ty_session_bind_device(s, "nope", src, 0, sizeof(x)),
                   TY_CODE_NOT_FOUND, "'nope'");
  ty_buffer_free(far);
  ty_buffer_free(src);
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(other);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

static void test_session_cpu(void **state) {
  (void)state;
  run_linear_on("cpu");
}

static void test_session_cpu_reference(void **state) {
  (void)state;
  run_linear_on("cpu?kernels=reference");
}

/* A chain of intermediates: the first arena value is placed while no block
 * is live (the planner once put it at offset UINT64_MAX, one byte before the
 * arena; ASan builds catch any relapse). */
static void test_session_intermediates(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cpu", &dev));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[2] = {3, 7};
  ty_value_id_t x, a, b, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, d, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &a));
  TY_EXPECT_OK(ty_graph_add_node1(g, "silu", &a, 1, NULL, &b));
  ty_value_id_t in[2] = {a, b};
  TY_EXPECT_OK(ty_graph_add_node1(g, "mul", in, 2, NULL, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  float xs[21], ys[21];
  for (int i = 0; i < 21; ++i) xs[i] = 0.3f * (float)(i - 10);
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, d, xs, sizeof(xs)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "y", ys, sizeof(ys)));
  for (int i = 0; i < 21; ++i) {
    double v = xs[i];
    double ge = 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    double si = ge / (1.0 + exp(-ge));
    assert_true(fabs(ys[i] - ge * si) < 1e-5);
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* Guard regions: results are unchanged, intact guards check out, and an
 * output is never pre-filled with something that could pass for a result. */
static void test_session_guards(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cpu", &dev));
  ty_graph_t *g = build_linear(2, 3, 4);
  ty_session_options_t options = {.guard_bytes = 64};
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, &options, &s));
  float x[6] = {1, 2, 3, 4, 5, 6}, w[12], b[4] = {1, -1, 2, -2}, y[8];
  for (int i = 0; i < 12; ++i) w[i] = 0.25f * (float)(i - 5);
  int64_t xd[2] = {2, 3}, wd[2] = {3, 4}, bd[1] = {4};
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, xd, x, sizeof(x)));
  TY_EXPECT_OK(ty_session_bind(s, "w", TY_DTYPE_F32, 2, wd, w, sizeof(w)));
  TY_EXPECT_OK(ty_session_bind(s, "b", TY_DTYPE_F32, 1, bd, b, sizeof(b)));
  TY_EXPECT_OK(ty_session_read(s, "y", y, sizeof(y)));
  for (int i = 0; i < 8; ++i) assert_true(isnan(y[i])); /* poisoned before the run */
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_check_guards(s));
  TY_EXPECT_OK(ty_session_read(s, "y", y, sizeof(y)));
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      double want = b[j];
      for (int p = 0; p < 3; ++p) want += (double)x[i * 3 + p] * w[p * 4 + j];
      assert_true(fabs(y[i * 4 + j] - want) < 1e-5);
    }
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

static void test_session_on_backend_without_graphs(void **state) {
  (void)state;
  /* The template as built for ABI 1.0: its table ends before the graph
   * entries, so a 1.1 host loads it and cannot run graphs on it. */
  const char *paths[] = {TY_TEST_TEMPLATE_ABI10_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "template", &dev));
  ty_graph_t *g = build_linear(2, 2, 2);
  ty_session_t *s;
  TY_EXPECT_STATUS(ty_session_create(dev, g, NULL, &s), TY_CODE_UNIMPLEMENTED,
                   "backend 'template' cannot run graphs");
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* A state update: counter += x, run 4 times, state stays on the device. */
static void test_state_updates_persist(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cpu", &dev));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {4};
  ty_value_id_t acc, x, sum;
  TY_EXPECT_OK(ty_graph_add_state(g, "acc", TY_DTYPE_F32, 1, d, &acc));
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  ty_value_id_t in[2] = {acc, x};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &sum));
  TY_EXPECT_OK(ty_graph_set_state_update(g, acc, sum));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  float xs[4] = {1, 2, 3, 4}, out[4];
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 1, d, xs, sizeof(xs)));
  for (int i = 0; i < 4; ++i) TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "acc", out, sizeof(out)));
  for (int i = 0; i < 4; ++i) assert_true(out[i] == 4.0f * xs[i]);
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* Two graphs share a state by name: one accumulates into it, the other reads
 * it; the owner may be destroyed first. */
static void test_sessions_share_state(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cpu", &dev));
  int64_t d[1] = {3};
  ty_graph_t *writer, *reader;
  ty_value_id_t acc, x, sum, acc2, twice;
  TY_EXPECT_OK(ty_graph_create(&writer));
  TY_EXPECT_OK(ty_graph_add_state(writer, "acc", TY_DTYPE_F32, 1, d, &acc));
  TY_EXPECT_OK(ty_graph_add_input(writer, "x", TY_DTYPE_F32, 1, d, &x));
  ty_value_id_t in[2] = {acc, x};
  TY_EXPECT_OK(ty_graph_add_node1(writer, "add", in, 2, NULL, &sum));
  TY_EXPECT_OK(ty_graph_set_state_update(writer, acc, sum));
  TY_EXPECT_OK(ty_graph_create(&reader));
  TY_EXPECT_OK(ty_graph_add_state(reader, "acc", TY_DTYPE_F32, 1, d, &acc2));
  ty_value_id_t in2[2] = {acc2, acc2};
  TY_EXPECT_OK(ty_graph_add_node1(reader, "add", in2, 2, NULL, &twice));
  TY_EXPECT_OK(ty_graph_set_output(reader, twice, "twice"));
  ty_session_t *sw, *sr;
  TY_EXPECT_OK(ty_session_create(dev, writer, NULL, &sw));
  ty_session_options_t share = {.share_state_with = sw};
  TY_EXPECT_OK(ty_session_create(dev, reader, &share, &sr));
  float xs[3] = {1, 2, 3}, out[3];
  TY_EXPECT_OK(ty_session_bind(sw, "x", TY_DTYPE_F32, 1, d, xs, sizeof(xs)));
  TY_EXPECT_OK(ty_session_run(sw));
  TY_EXPECT_OK(ty_session_run(sw));
  ty_session_destroy(sw); /* the reader keeps the shared buffer alive */
  TY_EXPECT_OK(ty_session_run(sr));
  TY_EXPECT_OK(ty_session_read(sr, "twice", out, sizeof(out)));
  for (int i = 0; i < 3; ++i) assert_true(out[i] == 4.0f * xs[i]);
  ty_session_destroy(sr);
  ty_graph_destroy(writer);
  ty_graph_destroy(reader);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* A graph whose first node writes an intermediate while no other arena
 * block is live: the planner once placed it at offset UINT64_MAX (one byte
 * before the arena), which the sanitizer builds catch. */
static void test_first_intermediate_is_planned_in_the_arena(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, "cpu?kernels=reference", &dev));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {5};
  ty_value_id_t x, a, b, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F64, 1, d, &x));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_float(&attrs, "alpha", 2.0));
  TY_EXPECT_OK(ty_graph_add_node1(g, "scale", &x, 1, &attrs, &a));
  TY_EXPECT_OK(ty_graph_add_node1(g, "scale", &a, 1, &attrs, &b));
  TY_EXPECT_OK(ty_graph_add_node1(g, "scale", &b, 1, &attrs, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  double xs[5] = {1, -2, 3, -4, 5}, out[5];
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F64, 1, d, xs, sizeof(xs)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "y", out, sizeof(out)));
  for (int i = 0; i < 5; ++i) assert_true(out[i] == 8.0 * xs[i]);
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* Gradient rules once kept descriptor pointers across emits, and an emit
 * that grows the graph's value array moved them (the sanitizer builds
 * caught a read after free). Padding the graph by 0..130 values puts the
 * growth inside each rule at some point: matmul (batched, bias, trans_b),
 * add with broadcasting, reduce_mean and concat. */
static void test_autodiff_survives_graph_growth(void **state) {
  (void)state;
  for (int pad = 0; pad <= 130; ++pad) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t one = 1;
    for (int i = 0; i < pad; ++i) {
      char name[32];
      snprintf(name, sizeof(name), "pad%d", i);
      ty_value_id_t unused;
      TY_EXPECT_OK(ty_graph_add_input(g, name, TY_DTYPE_F32, 1, &one, &unused));
    }
    int64_t xd[3] = {2, 3, 4}, wd[2] = {5, 4}, bd[1] = {5}, cd[1] = {3};
    ty_value_id_t x, w, b, c, y, z, loss, cat;
    TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 3, xd, &x));
    TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 2, wd, &w));
    TY_EXPECT_OK(ty_graph_add_state(g, "b", TY_DTYPE_F32, 1, bd, &b));
    TY_EXPECT_OK(ty_graph_add_state(g, "c", TY_DTYPE_F32, 1, cd, &c));
    ty_attrs_t tb = TY_ATTRS_EMPTY, axis = TY_ATTRS_EMPTY;
    TY_EXPECT_OK(ty_attrs_set_int(&tb, "trans_b", 1));
    TY_EXPECT_OK(ty_attrs_set_int(&axis, "axis", 0));
    ty_value_id_t mm[3] = {x, w, b};
    TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", mm, 3, &tb, &y)); /* [2,3,5] */
    ty_value_id_t pair[2] = {b, c};
    TY_EXPECT_OK(ty_graph_add_node1(g, "concat", pair, 2, &axis, &cat)); /* [8] */
    ty_value_id_t sum[2] = {y, b};
    TY_EXPECT_OK(ty_graph_add_node1(g, "add", sum, 2, NULL, &z)); /* broadcast */
    TY_EXPECT_OK(ty_graph_add_node1(g, "reduce_mean", &z, 1, NULL, &z));
    ty_value_id_t total[2] = {z, cat};
    TY_EXPECT_OK(ty_graph_add_node1(g, "mul", total, 2, NULL, &loss));
    ty_value_id_t wrt[3] = {w, b, c}, grads[3];
    TY_EXPECT_OK(ty_graph_autodiff(g, loss, TY_VALUE_NONE, wrt, 3, grads));
    for (int i = 0; i < 3; ++i) {
      const ty_tensor_desc_t *want = &ty_graph_value(g, wrt[i])->desc;
      const ty_tensor_desc_t *got = &ty_graph_value(g, grads[i])->desc;
      assert_int_equal(got->rank, want->rank);
      assert_memory_equal(got->dims, want->dims, want->rank * sizeof(int64_t));
    }
    ty_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_builder_errors),
      cmocka_unit_test(test_lowering_drops_dead_nodes_and_hash_is_stable),
      cmocka_unit_test(test_session_cpu),
      cmocka_unit_test(test_session_bind_device),
      cmocka_unit_test(test_session_cpu_reference),
      cmocka_unit_test(test_session_intermediates),
      cmocka_unit_test(test_session_guards),
      cmocka_unit_test(test_session_on_backend_without_graphs),
      cmocka_unit_test(test_state_updates_persist),
      cmocka_unit_test(test_sessions_share_state),
      cmocka_unit_test(test_first_intermediate_is_planned_in_the_arena),
      cmocka_unit_test(test_autodiff_survives_graph_growth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
