/* The cuda plugin's data errors, run on the CPU emulator of tests/cuda/emu
 * (TRAINYARD_CUDA_DRIVER and TRAINYARD_CUDA_BLASLT name it): every error a
 * kernel reports through the error flag — an id or target outside the
 * vocabulary, KV positions past the cache, an i64 that does not fit i32,
 * AdamW's and Adafactor's step 0, SGD's nesterov without momentum, a target
 * of the fused LM head and loss (linear_cross_entropy, forward and
 * backward) outside the vocabulary — comes back from the run as
 * INVALID_ARGUMENT naming the node and the values, and the next run with
 * good data succeeds (the flag is cleared); and empty inputs, whose empty
 * sums must come out as zeros. Also ABI 1.3's pinned host buffers
 * (optimizer offload), small writes queued through the pinned ring, the
 * measured device memory, ABI 1.7's refusal of a
 * collective whose group has no communicator on the device, a bad
 * TRAINYARD_CUDA_ATTENTION value, and the fault hook's test-only kernels.
 * Also issue 29's serving ops through a session: their data errors, and
 * sample / top_logprobs against the f64 reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/buffer.h"
#include "hal/comm.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"
#include "ops/reference/ref_sample.h"

typedef struct {
  ty_dtype_t dtype;
  uint32_t rank;
  int64_t dims[4];
  void *bad;        /* the data that makes the run fail; dtype INVALID: an absent
                       optional input */
  const void *good; /* NULL: the same as bad (the error is elsewhere) */
} input_t;

static int64_t count_of(const input_t *in) {
  int64_t n = 1;
  for (uint32_t i = 0; i < in->rank; ++i) n *= in->dims[i];
  return n;
}

/* A one-node graph of `op` on cuda:0 with output `out` bound as "out". */
typedef struct {
  ty_registry_t *r;
  ty_device_t *dev;
  ty_graph_t *g;
  ty_session_t *s;
  char names[12][8];
} one_node_t;

static void one_node_open(one_node_t *t, const char *op, uint32_t n_out,
                          const ty_attrs_t *attrs, uint32_t n_in, const input_t *in,
                          uint32_t out) {
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_value_id_t ids[12], outs[4];
  assert_true(n_in <= 12 && out < n_out && n_out <= 4);
  TY_EXPECT_OK(ty_registry_create(&options, &t->r));
  TY_EXPECT_OK(ty_device_open(t->r, "cuda:0", &t->dev));
  TY_EXPECT_OK(ty_graph_create(&t->g));
  for (uint32_t i = 0; i < n_in; ++i) {
    snprintf(t->names[i], sizeof(t->names[i]), "in%u", i);
    if (in[i].dtype == TY_DTYPE_INVALID) {
      ids[i] = TY_VALUE_NONE;
      continue;
    }
    TY_EXPECT_OK(
        ty_graph_add_input(t->g, t->names[i], in[i].dtype, in[i].rank, in[i].dims, &ids[i]));
  }
  TY_EXPECT_OK(ty_graph_add_node(t->g, op, ids, n_in, attrs, outs, n_out));
  TY_EXPECT_OK(ty_graph_set_output(t->g, outs[out], "out"));
  TY_EXPECT_OK(ty_session_create(t->dev, t->g, NULL, &t->s));
}

/* Binds the inputs: their bad data, or their good data where they have. */
static void one_node_bind(one_node_t *t, uint32_t n_in, const input_t *in, bool good) {
  for (uint32_t i = 0; i < n_in; ++i) {
    if (in[i].dtype == TY_DTYPE_INVALID) continue;
    const void *data = good && in[i].good ? in[i].good : in[i].bad;
    const size_t bytes = (size_t)count_of(&in[i]) * ty_dtype_size(in[i].dtype);
    TY_EXPECT_OK(
        ty_session_bind(t->s, t->names[i], in[i].dtype, in[i].rank, in[i].dims, data, bytes));
  }
}

static void one_node_close(one_node_t *t) {
  ty_session_destroy(t->s);
  ty_graph_destroy(t->g);
  ty_device_close(t->dev);
  ty_registry_destroy(t->r);
}

/* One node of `op` on cuda:0: fails with `want` on the bad inputs, then
 * runs on the good ones. */
static void expect_data_error(const char *op, uint32_t n_out, const ty_attrs_t *attrs,
                              uint32_t n_in, const input_t *in, const char *want) {
  one_node_t t;
  one_node_open(&t, op, n_out, attrs, n_in, in, 0);
  one_node_bind(&t, n_in, in, false);
  TY_EXPECT_STATUS(ty_session_run(t.s), TY_CODE_INVALID_ARGUMENT, want);
  one_node_bind(&t, n_in, in, true);
  TY_EXPECT_OK(ty_session_run(t.s));
  one_node_close(&t);
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
  /* The fused head: h [3, 2] times w [4, 2]^T, in chunks of 2 rows (the bad
   * target is in the second chunk). */
  float h[6] = {1, 0, 0, 1, 1, 1}, lse[3] = {2, 2, 2};
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "chunk", 2));
  input_t lce[3] = {{TY_DTYPE_F32, 2, {3, 2}, h, NULL},
                    {TY_DTYPE_F32, 2, {4, 2}, g_table, NULL},
                    {TY_DTYPE_I64, 1, {3}, bad, good}};
  expect_data_error("linear_cross_entropy", 2, &attrs, 3, lce,
                    "node 0 (linear_cross_entropy): cross_entropy: targets[2] = 4 is outside "
                    "the vocabulary [0, 4)");
  input_t lce_bwd[5] = {{TY_DTYPE_F32, 1, {3}, dloss, NULL},
                        {TY_DTYPE_F32, 2, {3, 2}, h, NULL},
                        {TY_DTYPE_F32, 2, {4, 2}, g_table, NULL},
                        {TY_DTYPE_I64, 1, {3}, bad, good},
                        {TY_DTYPE_F32, 1, {3}, lse, NULL}};
  expect_data_error("linear_cross_entropy_backward", 2, &attrs, 5, lce_bwd,
                    "node 0 (linear_cross_entropy_backward): cross_entropy: targets[2] = 4");
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
  /* Adafactor of a vector (v, no row/col/m): step 0. */
  input_t adafactor[9] = {{TY_DTYPE_F32, 1, {5}, p, NULL},   {TY_DTYPE_F32, 1, {5}, grad, NULL},
                          {TY_DTYPE_INVALID, 0, {0}, NULL, NULL},
                          {TY_DTYPE_INVALID, 0, {0}, NULL, NULL},
                          {TY_DTYPE_F32, 1, {5}, v, NULL},   {TY_DTYPE_INVALID, 0, {0}, NULL, NULL},
                          {TY_DTYPE_F32, 0, {0}, &lr, NULL}, {TY_DTYPE_F32, 0, {0}, &wd, NULL},
                          {TY_DTYPE_I64, 0, {0}, &bad_step, &good_step}};
  expect_data_error("adafactor_update", 2, NULL, 9, adafactor,
                    "node 0 (adafactor_update): adafactor: step 0 must be >= 1 and beta1 0 in "
                    "[0, 1)");
}

/* Issue 29's serving ops through the session (cuda_ops_serve.c's builders
 * and the shared list's paged builders): their data errors name the node,
 * the row and the value; sample and top_logprobs give the f64 reference's
 * ids (these logits are well separated) and its logprobs to f32 tolerance. */
static void read_output(const char *op, uint32_t n_out, const ty_attrs_t *attrs, uint32_t n_in,
                        const input_t *in, uint32_t out, void *dst, size_t bytes) {
  one_node_t t;
  one_node_open(&t, op, n_out, attrs, n_in, in, out);
  one_node_bind(&t, n_in, in, true);
  TY_EXPECT_OK(ty_session_run(t.s));
  TY_EXPECT_OK(ty_session_read(t.s, "out", dst, bytes));
  one_node_close(&t);
}

static void test_serving_ops(void **state) {
  (void)state;
  enum { N = 4, V = 300, L = 3, K = 5 };
  static float logits[N * V];
  for (int e = 0; e < N * V; ++e) logits[e] = (float)((e * 7919) % 1000) / 97.0f - 5.0f;
  float good[N * 7] = {0, 0, 1, 0, 1, 0, 0,       0.8f, 20, 1, 0, 1, 0, 0,
                       1, 0, 0.9f, 0.02f, 1.2f, 0.5f, 0.1f, 1.5f, 3, 1, 0, 1, 0, 0};
  float bad[N * 7];
  memcpy(bad, good, sizeof(bad));
  bad[2 * 7 + 0] = -1; /* row 2's temperature */
  int64_t seeds[N * 2] = {1, 0, 2, 5, 3, 1, 4, 9};
  int64_t hist[N * L] = {7, -1, 7, 0, 1, 2, 299, 298, -1, -1, -1, -1};
  int64_t bad_hist[N * L];
  memcpy(bad_hist, hist, sizeof(hist));
  bad_hist[1 * L + 2] = V; /* row 1: an id past the vocabulary */
  input_t in[4] = {{TY_DTYPE_F32, 2, {N, V}, logits, NULL},
                   {TY_DTYPE_F32, 2, {N, 7}, bad, good},
                   {TY_DTYPE_I64, 2, {N, 2}, seeds, NULL},
                   {TY_DTYPE_I64, 2, {N, L}, hist, NULL}};
  expect_data_error("sample", 2, NULL, 4, in,
                    "node 0 (sample): sample: row 2: temperature (>= 0, finite) is -1");
  in[1].bad = good;
  in[3].bad = bad_hist;
  in[3].good = hist;
  expect_data_error("sample", 2, NULL, 4, in,
                    "node 0 (sample): sample: row 1: history id 300 is outside [-1, V)");
  int64_t ids[N];
  float lp[N];
  read_output("sample", 2, NULL, 4, in, 0, ids, sizeof(ids));
  read_output("sample", 2, NULL, 4, in, 1, lp, sizeof(lp));
  double x[N * V], p[N * 7], want_ids[N], want_lp[N];
  for (int e = 0; e < N * V; ++e) x[e] = logits[e];
  for (int e = 0; e < N * 7; ++e) p[e] = good[e];
  TY_EXPECT_OK(ty_ref_sample(x, N, V, p, seeds, hist, L, want_ids, want_lp));
  for (int i = 0; i < N; ++i) {
    assert_int_equal(ids[i], (int64_t)want_ids[i]);
    assert_true(fabs(lp[i] - want_lp[i]) < 1e-5);
  }
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "k", K));
  int64_t top[N * K];
  float top_lp[N * K];
  double want_top[N * K], want_top_lp[N * K];
  read_output("top_logprobs", 2, &attrs, 1, in, 0, top, sizeof(top));
  read_output("top_logprobs", 2, &attrs, 1, in, 1, top_lp, sizeof(top_lp));
  TY_EXPECT_OK(ty_ref_top_logprobs(x, N, V, K, want_top, want_top_lp));
  for (int e = 0; e < N * K; ++e) {
    assert_int_equal(top[e], (int64_t)want_top[e]);
    assert_true(fabs(top_lp[e] - want_top_lp[e]) < 1e-5);
  }
  /* The paged KV cache: a slot past the pool, a row_seq past the table. */
  float pool[3 * 2 * 1 * 2] = {0}, fresh[2 * 1 * 2] = {1, 2, 3, 4};
  int64_t bad_slots[2] = {6, -1}, good_slots[2] = {5, -1};
  input_t kv[3] = {{TY_DTYPE_F32, 4, {3, 2, 1, 2}, pool, NULL},
                   {TY_DTYPE_F32, 3, {2, 1, 2}, fresh, NULL},
                   {TY_DTYPE_I64, 1, {2}, bad_slots, good_slots}};
  expect_data_error("paged_kv_write", 1, NULL, 3, kv,
                    "node 0 (paged_kv_write): paged_kv_write: row 0 writes slot 6 outside the "
                    "pool's 6 slots");
  float q[2 * 2 * 2] = {1, 0, 0, 1, 1, 1, 0, 0};
  int64_t table[2 * 2] = {2, 0, 1, -1}, bad_seq[2] = {0, 2}, good_seq[2] = {0, 1},
          pos[2] = {3, 1};
  input_t att[6] = {{TY_DTYPE_F32, 3, {2, 2, 2}, q, NULL},
                    {TY_DTYPE_F32, 4, {3, 2, 1, 2}, pool, NULL},
                    {TY_DTYPE_F32, 4, {3, 2, 1, 2}, pool, NULL},
                    {TY_DTYPE_I64, 2, {2, 2}, table, NULL},
                    {TY_DTYPE_I64, 1, {2}, bad_seq, good_seq},
                    {TY_DTYPE_I64, 1, {2}, pos, NULL}};
  expect_data_error("paged_attention", 1, NULL, 6, att,
                    "node 0 (paged_attention): paged_attention: row 1 has row_seq 2 outside "
                    "[-1, 2)");
}

/* One node on cuda:0 whose output must be `want` (n floats) although an
 * input is empty: the kernels skip empty work, and what the op defines as
 * zeros (an empty sum) is written, not left as the device's garbage. */
static void expect_output(const char *op, uint32_t n_out, const ty_attrs_t *attrs,
                          uint32_t n_in, const input_t *in, uint32_t out, const float *want,
                          int64_t n) {
  one_node_t t;
  one_node_open(&t, op, n_out, attrs, n_in, in, out);
  one_node_bind(&t, n_in, in, false);
  TY_EXPECT_OK(ty_session_run(t.s));
  float got[16];
  assert_true(n <= 16);
  TY_EXPECT_OK(ty_session_read(t.s, "out", got, (size_t)n * sizeof(float)));
  for (int64_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) {
      fail_msg("%s: output %lld is %g, want %g", op, (long long)i, got[i], want[i]);
    }
  }
  one_node_close(&t);
}

static void test_empty_inputs(void **state) {
  (void)state;
  static const float zeros[16] = {0};
  float none[1] = {0}, gamma[3] = {1, 2, 3}, stats[1] = {0};
  /* layernorm_backward over 0 rows: dgamma and dbeta are empty sums. */
  input_t ln[5] = {{TY_DTYPE_F32, 2, {0, 3}, none, NULL},
                   {TY_DTYPE_F32, 2, {0, 3}, none, NULL},
                   {TY_DTYPE_F32, 1, {3}, gamma, NULL},
                   {TY_DTYPE_F32, 1, {0}, stats, NULL},
                   {TY_DTYPE_F32, 1, {0}, stats, NULL}};
  expect_output("layernorm_backward", 3, NULL, 5, ln, 1, zeros, 3);
  expect_output("layernorm_backward", 3, NULL, 5, ln, 2, zeros, 3);
  /* embedding_backward of no ids: every vocabulary row is 0. */
  int32_t no_ids[1] = {0};
  input_t emb[2] = {{TY_DTYPE_F32, 2, {0, 4}, none, NULL}, {TY_DTYPE_I32, 1, {0}, no_ids, NULL}};
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "vocab_size", 3));
  expect_output("embedding_backward", 1, &attrs, 2, emb, 0, zeros, 12);
  /* reduce_sum over an empty axis: zeros of the kept shape. */
  input_t red[1] = {{TY_DTYPE_F32, 2, {0, 5}, none, NULL}};
  ty_attrs_t axes = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_ints(&axes, "axes", (int64_t[]){0}, 1));
  expect_output("reduce_sum", 1, &axes, 1, red, 0, zeros, 5);
  /* clip_by_global_norm with an empty gradient: norm 0, the other scaled by 1. */
  float max_norm = 1.0f, g[2] = {0.25f, -0.5f};
  input_t clip[3] = {{TY_DTYPE_F32, 0, {0}, &max_norm, NULL},
                     {TY_DTYPE_F32, 1, {0}, none, NULL},
                     {TY_DTYPE_F32, 1, {2}, g, NULL}};
  const float norm[1] = {0.5590169943749474f};
  expect_output("clip_by_global_norm", 3, NULL, 3, clip, 0, norm, 1);
  expect_output("clip_by_global_norm", 3, NULL, 3, clip, 2, g, 2);
}

/* ABI 1.3 memory: pinned host buffers (optimizer offload) hold what is
 * written to them, copy to and from device buffers, and are counted apart
 * from device memory; device_memory reports the cuMemAlloc counter and its
 * peak, which a reset brings down to what is in use. */
static void test_host_buffers_and_memory(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  ty_device_t *dev = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  TY_EXPECT_OK(ty_device_open(r, "cuda:0", &dev));
  ty_abi_device_memory_t before, after;
  TY_EXPECT_OK(ty_device_memory(dev, true, &before));
  ty_buffer_t *host = NULL, *device = NULL;
  TY_EXPECT_OK(ty_buffer_alloc_flags(dev, 64, TY_ABI_BUFFER_HOST, &host));
  TY_EXPECT_OK(ty_buffer_alloc(dev, 1 << 20, &device));
  float data[16], back[16];
  for (int i = 0; i < 16; ++i) data[i] = (float)i * 0.5f;
  TY_EXPECT_OK(ty_buffer_write(host, 0, data, sizeof(data)));
  TY_EXPECT_OK(ty_buffer_copy(host, 0, device, 128, sizeof(data)));
  memset(back, 0, sizeof(back));
  TY_EXPECT_OK(ty_buffer_read(device, 128, back, sizeof(back)));
  assert_memory_equal(back, data, sizeof(data));
  TY_EXPECT_OK(ty_buffer_copy(device, 128, host, 0, sizeof(data) / 2));
  TY_EXPECT_OK(ty_buffer_read(host, 0, back, sizeof(back)));
  assert_memory_equal(back, data, sizeof(data));
  TY_EXPECT_OK(ty_device_memory(dev, false, &after));
  assert_int_equal(after.host_in_use_bytes, before.host_in_use_bytes + 64);
  assert_int_equal(after.in_use_bytes, before.in_use_bytes + (1 << 20));
  assert_true(after.peak_bytes >= after.in_use_bytes);
  assert_non_null(strstr(after.how, "cuMemAlloc counter"));
  ty_buffer_free(device);
  TY_EXPECT_OK(ty_device_memory(dev, true, &after));
  assert_int_equal(after.peak_bytes, before.in_use_bytes + (1 << 20));
  TY_EXPECT_OK(ty_device_memory(dev, false, &after));
  assert_int_equal(after.peak_bytes, before.in_use_bytes); /* reset to what is in use */
  ty_buffer_free(host);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* Small writes are queued through the pinned ring without waiting
 * (cuda_backend.c, ty_cu_ring_write): many of them, more than the ring
 * holds in all (so it wraps), some to the same bytes (the last one wins),
 * some larger than a ring write (through staging), read back equal. */
static void test_small_writes_through_ring(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  ty_device_t *dev = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  TY_EXPECT_OK(ty_device_open(r, "cuda:0", &dev));
  enum { CHUNK = 40 << 10, CHUNKS = 64, BIG = 200 << 10 };
  const size_t total = (size_t)CHUNK * CHUNKS + BIG;
  unsigned char *want = malloc(total), *back = malloc(total), *data = malloc(BIG);
  assert_non_null(want);
  assert_non_null(back);
  assert_non_null(data);
  ty_buffer_t *buf = NULL;
  TY_EXPECT_OK(ty_buffer_alloc(dev, total, &buf));
  for (int round = 0; round < 3; ++round) { /* 3 x 64 x 40 KiB = 7.5 MiB through the ring */
    for (int c = 0; c < CHUNKS; ++c) {
      for (size_t i = 0; i < CHUNK; ++i) data[i] = (unsigned char)(i * 7 + (size_t)c * 13 + (size_t)round);
      TY_EXPECT_OK(ty_buffer_write(buf, (uint64_t)c * CHUNK, data, CHUNK));
      memcpy(want + (size_t)c * CHUNK, data, CHUNK);
      memset(data, 0xEE, CHUNK); /* the caller's bytes are free once write returns */
    }
    for (size_t i = 0; i < BIG; ++i) data[i] = (unsigned char)(i * 3 + (size_t)round);
    TY_EXPECT_OK(ty_buffer_write(buf, (uint64_t)CHUNK * CHUNKS, data, BIG));
    memcpy(want + (size_t)CHUNK * CHUNKS, data, BIG);
    /* odd sizes and offsets: the ring's 64-byte alignment is its own */
    for (int k = 0; k < 100; ++k) {
      unsigned char small[37];
      for (int i = 0; i < 37; ++i) small[i] = (unsigned char)(k + i + round);
      uint64_t at = (uint64_t)k * 1001 + 3;
      TY_EXPECT_OK(ty_buffer_write(buf, at, small, sizeof(small)));
      memcpy(want + at, small, sizeof(small));
    }
  }
  memset(back, 0, total);
  TY_EXPECT_OK(ty_buffer_read(buf, 0, back, total));
  assert_memory_equal(back, want, total);
  ty_buffer_free(buf);
  free(want);
  free(back);
  free(data);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* ABI 1.7 group communicators: a collective op of a run of several ranks
 * runs on the device's communicator of the op's group, and a group the
 * device has none for fails the run with FAILED_PRECONDITION naming the
 * group and the node (here no communicator at all: the emulator has no
 * NCCL). comm_create of a name that is not a group is refused before NCCL
 * is touched. At world 1 the same graphs are copies (conformance). */
static ty_status_t fake_sum(void *user, ty_dtype_t dtype, void *data, size_t count) {
  (void)user, (void)dtype, (void)data, (void)count;
  return ty_status_make(TY_CODE_INTERNAL, "cuda must not reduce through the host");
}

static void test_group_without_communicator(void **state) {
  (void)state;
  float x[6] = {1, 2, 3, 4, 5, 6};
  const input_t in[1] = {{TY_DTYPE_F32, 2, {2, 3}, x, NULL}};
  ty_host_comm_t world2 = {.rank = 0, .size = 2, .all_reduce_sum = fake_sum};
  static const struct {
    const char *op, *group, *want;
  } cases[] = {
      {"tp_reduce", NULL, "node 0 (tp_reduce over group 'tp') runs in a run of 2 ranks, and no "
                          "communicator of group 'tp' was made on this device"},
      {"all_reduce", "dp", "no communicator of group 'dp' was made on this device"},
      {"all_reduce", NULL, "no communicator of group 'world' was made on this device"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    if (cases[i].group) TY_EXPECT_OK(ty_attrs_set_string(&attrs, "group", cases[i].group));
    one_node_t t;
    one_node_open(&t, cases[i].op, 1, &attrs, 1, in, 0);
    one_node_bind(&t, 1, in, false);
    TY_EXPECT_OK(ty_session_run(t.s)); /* one process: a copy */
    float got[6];
    TY_EXPECT_OK(ty_session_read(t.s, "out", got, sizeof(got)));
    assert_memory_equal(got, x, sizeof(x));
    TY_EXPECT_OK(ty_session_set_host_comm(t.s, &world2));
    TY_EXPECT_STATUS(ty_session_run(t.s), TY_CODE_FAILED_PRECONDITION, cases[i].want);
    one_node_close(&t);
  }
  /* a communicator of a group that does not exist */
  one_node_t t;
  one_node_open(&t, "tp_copy", 1, NULL, 1, in, 0);
  ty_abi_comm_id_t id;
  memset(&id, 0, sizeof(id));
  id.struct_size = sizeof(id);
  ty_comm_t *comm = NULL;
  TY_EXPECT_STATUS(ty_comm_create_group(t.dev, &id, 0, 2, "replicas", &comm),
                   TY_CODE_INVALID_ARGUMENT,
                   "a communicator of process group 'replicas': the groups are 'world', 'tp', "
                   "'dp', 'pp', 'embed', 'cp' and 'dp_cp'");
  assert_null(comm);
  one_node_close(&t);
}

static uint32_t fake_group_size(void *user, const char *group) {
  (void)user, (void)group;
  return 2;
}

static uint32_t fake_group_rank(void *user, const char *group) {
  (void)user, (void)group;
  return 0;
}

/* Context parallel's gathers (issue 31): parts = 1 is a copy; over 2 ranks
 * they need the device's communicator of their group (default cp), and
 * without one the run is refused naming the group, as all_reduce's. */
static void test_gather_without_communicator(void **state) {
  (void)state;
  float x[12];
  for (int i = 0; i < 12; ++i) x[i] = (float)i - 2.5f;
  const input_t in[1] = {{TY_DTYPE_F32, 2, {2, 6}, x, NULL}};
  ty_host_comm_t world2 = {.rank = 0,
                           .size = 2,
                           .all_reduce_sum = fake_sum,
                           .group_size = fake_group_size,
                           .group_rank = fake_group_rank};
  static const struct {
    const char *op, *group, *want;
  } cases[] = {
      {"all_gather", NULL, "node 0 (all_gather over group 'cp') runs in a run of 2 ranks, and "
                           "no communicator of group 'cp' was made on this device"},
      {"reduce_scatter", NULL, "no communicator of group 'cp' was made on this device"},
      {"all_gather", "dp_cp", "no communicator of group 'dp_cp' was made on this device"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    for (int64_t parts = 1; parts <= 2; ++parts) {
      ty_attrs_t attrs = TY_ATTRS_EMPTY;
      if (cases[i].group) TY_EXPECT_OK(ty_attrs_set_string(&attrs, "group", cases[i].group));
      TY_EXPECT_OK(ty_attrs_set_int(&attrs, "axis", 1));
      TY_EXPECT_OK(ty_attrs_set_int(&attrs, "parts", parts));
      one_node_t t;
      one_node_open(&t, cases[i].op, 1, &attrs, 1, in, 0);
      one_node_bind(&t, 1, in, false);
      if (parts == 1) {
        TY_EXPECT_OK(ty_session_run(t.s)); /* the identity: a copy */
        float got[12];
        TY_EXPECT_OK(ty_session_read(t.s, "out", got, sizeof(got)));
        assert_memory_equal(got, x, sizeof(x));
      } else {
        TY_EXPECT_OK(ty_session_set_host_comm(t.s, &world2));
        TY_EXPECT_STATUS(ty_session_run(t.s), TY_CODE_FAILED_PRECONDITION, cases[i].want);
      }
      one_node_close(&t);
    }
  }
}

/* TRAINYARD_CUDA_ATTENTION takes auto, mma or generic; any other value
 * fails the compile of an attention node with a message naming the
 * variable and its values (the check comes before any kernel is looked up,
 * so the emulator, which has no attention kernels, shows it). */
static void test_attention_mode_value(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  ty_device_t *dev = NULL;
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  TY_EXPECT_OK(ty_device_open(r, "cuda:0", &dev));
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t dims[4] = {1, 8, 2, 64};
  ty_value_id_t in[3], out[2];
  static const char *const names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    TY_EXPECT_OK(ty_graph_add_input(g, names[i], TY_DTYPE_BF16, 4, dims, &in[i]));
  }
  TY_EXPECT_OK(ty_graph_add_node(g, "attention", in, 3, NULL, out, 2));
  TY_EXPECT_OK(ty_graph_set_output(g, out[0], "out"));
  setenv("TRAINYARD_CUDA_ATTENTION", "fast", 1);
  ty_session_t *s = NULL;
  ty_status_t st = ty_session_create(dev, g, NULL, &s);
  unsetenv("TRAINYARD_CUDA_ATTENTION");
  TY_EXPECT_STATUS(st, TY_CODE_INVALID_ARGUMENT,
                   "TRAINYARD_CUDA_ATTENTION='fast' is not 'auto', 'mma' or 'generic'");
  assert_null(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  ty_registry_destroy(r);
}

/* TRAINYARD_CUDA_FAULT launches the kernels of kernels/test.cu, a test-only
 * family the plugin does not embed (backends/cuda/cuda_families.def).
 * Without TRAINYARD_CUDA_FATBIN_DIR the run fails naming the variable and
 * the folder; pointed at the build's tests/cuda-fatbin-test, the module
 * loads from there and the hook goes on to look its kernel up (which the
 * emulator, having no test kernels, does not have: the failure has moved
 * past the load; on a GPU, tests/backends/test_cuda_cli.py FaultTest runs
 * the faults themselves). */
static void test_fault_kernels_are_test_only(void **state) {
  (void)state;
  int64_t x[3] = {7, 8, -2};
  input_t in[1] = {{TY_DTYPE_I64, 1, {3}, x, NULL}};
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_string(&attrs, "dtype", "i32"));
  one_node_t t;
  unsetenv("TRAINYARD_CUDA_FATBIN_DIR");
  setenv("TRAINYARD_CUDA_FAULT", "illegal-address@1", 1);
  one_node_open(&t, "cast", 1, &attrs, 1, in, 0);
  one_node_bind(&t, 1, in, false);
  TY_EXPECT_STATUS(ty_session_run(t.s), TY_CODE_FAILED_PRECONDITION,
                   "cuda:0: the kernels of kernels/test.cu are test-only, and the plugin does "
                   "not embed them: point TRAINYARD_CUDA_FATBIN_DIR at the folder of "
                   "test.fatbin (tests/cuda-fatbin-test in the build folder)");
  one_node_close(&t);
  setenv("TRAINYARD_CUDA_FATBIN_DIR", TY_CUDA_TEST_FATBIN_DIR, 1);
  one_node_open(&t, "cast", 1, &attrs, 1, in, 0);
  one_node_bind(&t, 1, in, false);
  TY_EXPECT_STATUS(ty_session_run(t.s), TY_CODE_INTERNAL, "finding the test-hook kernel");
  one_node_close(&t);
  unsetenv("TRAINYARD_CUDA_FATBIN_DIR");
  unsetenv("TRAINYARD_CUDA_FAULT");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_attention_mode_value),
      cmocka_unit_test(test_embedding_ids),
      cmocka_unit_test(test_cross_entropy_targets),
      cmocka_unit_test(test_kv_cache_position),
      cmocka_unit_test(test_cast_range),
      cmocka_unit_test(test_serving_ops),
      cmocka_unit_test(test_optimizer_hyperparameters),
      cmocka_unit_test(test_empty_inputs),
      cmocka_unit_test(test_host_buffers_and_memory),
      cmocka_unit_test(test_small_writes_through_ring),
      cmocka_unit_test(test_group_without_communicator),
      cmocka_unit_test(test_gather_without_communicator),
      cmocka_unit_test(test_fault_kernels_are_test_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
