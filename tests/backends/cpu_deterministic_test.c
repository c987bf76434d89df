/* The cpu plugin under deterministic=1 (ABI 1.10, docs/plugin-abi.md
 * "Deterministic mode"): results that do not depend on how the work was
 * batched or split.
 *   - a matmul row computed alone (M = 1) is the same bits as that row inside
 *     M = 64 and M = 257 products (f32, bf16); without the option the
 *     oneDNN build may differ, which is printed, not asserted;
 *   - on an AVX2 CPU, decode's few rows without the option take the blocked
 *     GEMM where it beat oneDNN, so their bits are the option's;
 *   - an attention query over a KV cache (q_len 1, kv_len input) is the same
 *     bits as that query's row in a causal block, with and without a window
 *     longer than one K slice of the GEMM;
 *   - reductions (reduce_sum, layernorm_backward, embedding_backward,
 *     clip_by_global_norm, matmul, attention_backward) give the same bits
 *     on 1, 2 and 3 threads;
 *   - the template plugin (the SDK's reference kernels) honours it too;
 *   - the dataflow plugin (the same kernels) keeps the option in its
 *     artifact, so an executable loaded from the compile cache honours it;
 *   - a bad value is INVALID_ARGUMENT naming it.
 * Random inputs (seed printed; TY_TEST_SEED=<n> replays). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/half.h"
#include "hal/registry.h"

#include "dataflow_test_util.h"

static ty_test_rng_t g_rng;
static ty_registry_t *g_registry;

static double uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(ty_test_rng_next(&g_rng) >> 11) * 0x1p-53);
}

/* n random floats in [lo, hi) stored in dtype dt (f32 or bf16). */
static void *random_floats(ty_dtype_t dt, int64_t n, double lo, double hi) {
  void *p = malloc((size_t)(n > 0 ? n : 1) * ty_dtype_size(dt));
  assert_non_null(p);
  for (int64_t i = 0; i < n; ++i) {
    double v = uniform(lo, hi);
    if (dt == TY_DTYPE_BF16) ((uint16_t *)p)[i] = ty_f64_to_bf16(v);
    else ((float *)p)[i] = (float)v;
  }
  return p;
}

typedef struct {
  const char *name;
  ty_dtype_t dtype;
  uint32_t rank;
  int64_t dims[4];
  const void *data;
} input_t;

static int64_t numel(uint32_t rank, const int64_t *dims) {
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

/* Adds the inputs to g (ids into ids[]). */
static void add_inputs(ty_graph_t *g, const input_t *in, uint32_t n, ty_value_id_t *ids) {
  for (uint32_t i = 0; i < n; ++i) {
    if (!in[i].name) {
      ids[i] = TY_VALUE_NONE;
      continue;
    }
    TY_EXPECT_OK(ty_graph_add_input(g, in[i].name, in[i].dtype, in[i].rank, in[i].dims, &ids[i]));
  }
}

/* Runs g on `uri` (deterministic or not; with a compile cache folder when
 * cache_dir is set, *out_source then telling where the executable came
 * from) with the inputs bound, and returns a malloc'ed copy of output `out`
 * (its byte count in *out_bytes). */
static void *run_cached(const char *uri, bool det, const char *cache_dir, const ty_graph_t *g,
                        const input_t *in, uint32_t n, const char *out, size_t *out_bytes,
                        ty_session_source_t *out_source) {
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(g_registry, uri, &dev));
  ty_session_options_t opts = {.deterministic = det, .cache_dir = cache_dir};
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, &opts, &s));
  if (out_source) *out_source = ty_session_stats(s).source;
  for (uint32_t i = 0; i < n; ++i) {
    if (!in[i].name) continue;
    size_t bytes = (size_t)numel(in[i].rank, in[i].dims) * ty_dtype_size(in[i].dtype);
    TY_EXPECT_OK(
        ty_session_bind(s, in[i].name, in[i].dtype, in[i].rank, in[i].dims, in[i].data, bytes));
  }
  TY_EXPECT_OK(ty_session_run(s));
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_session_value_desc(s, out, &d));
  size_t bytes = (size_t)numel(d.rank, d.dims) * ty_dtype_size(d.dtype);
  void *buf = malloc(bytes ? bytes : 1);
  assert_non_null(buf);
  TY_EXPECT_OK(ty_session_read(s, out, buf, bytes));
  ty_session_destroy(s);
  ty_device_close(dev);
  *out_bytes = bytes;
  return buf;
}

static void *run(const char *uri, bool det, const ty_graph_t *g, const input_t *in, uint32_t n,
                 const char *out, size_t *out_bytes) {
  return run_cached(uri, det, NULL, g, in, n, out, out_bytes, NULL);
}

/* ---- matmul: a row alone equals the row among 64 and 257 ----------------- */

/* [m, K] @ [K, N] (+ bias) on the first m rows of `a`; returns C. */
static void *matmul_rows(const char *uri, bool det, ty_dtype_t dt, int64_t m, int64_t k,
                         int64_t n, const void *a, const void *b, const void *bias) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  input_t in[3] = {{"a", dt, 2, {m, k}, a}, {"b", dt, 2, {k, n}, b}, {"bias", dt, 1, {n}, bias}};
  ty_value_id_t ids[3], c;
  add_inputs(g, in, 3, ids);
  TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", ids, 3, NULL, &c));
  TY_EXPECT_OK(ty_graph_set_output(g, c, "c"));
  size_t bytes;
  void *out = run(uri, det, g, in, 3, "c", &bytes);
  assert_int_equal(bytes, (size_t)(m * n) * ty_dtype_size(dt));
  ty_graph_destroy(g);
  return out;
}

static void test_matmul_row_is_batch_invariant(void **state) {
  (void)state;
  /* K spans three K slices of the blocked GEMM and is no multiple of one. */
  const int64_t k = 600, n = 80, rows[2] = {64, 257};
  static const ty_dtype_t dts[2] = {TY_DTYPE_F32, TY_DTYPE_BF16};
  for (int di = 0; di < 2; ++di) {
    const ty_dtype_t dt = dts[di];
    const size_t es = ty_dtype_size(dt), row_bytes = (size_t)n * es;
    void *a = random_floats(dt, 257 * k, -1.0, 1.0), *b = random_floats(dt, k * n, -1.0, 1.0);
    void *bias = random_floats(dt, n, -0.5, 0.5);
    for (int det = 1; det >= 0; --det) {
      for (int ri = 0; ri < 2; ++ri) {
        const int64_t m = rows[ri];
        unsigned char *big = matmul_rows("cpu?threads=2", det, dt, m, k, n, a, b, bias);
        int differ = 0;
        for (int64_t r = 0; r < m; r += m / 5) { /* the first, some middle and the last */
          const int64_t row = r + 5 >= m ? m - 1 : r;
          unsigned char *one = matmul_rows("cpu?threads=2", det, dt, 1, k, n,
                                           (const unsigned char *)a + (size_t)(row * k) * es, b,
                                           bias);
          const bool same = memcmp(one, big + (size_t)row * row_bytes, row_bytes) == 0;
          if (det && !same) {
            fail_msg("matmul %s under deterministic: row %lld alone differs from the same row "
                     "of the M=%lld product",
                     ty_dtype_name(dt), (long long)row, (long long)m);
          }
          differ += !same;
          free(one);
        }
        if (!det) {
          printf("matmul %s M=1 vs M=%lld without deterministic: %d of the rows checked "
                 "differ\n",
                 ty_dtype_name(dt), (long long)m, differ);
        }
        free(big);
      }
    }
    free(a);
    free(b);
    free(bias);
  }
}

/* [m, K] @ [N, K]^T (trans_b, as a tied lm_head or a Llama layer holds its
 * weights) in f32; returns C. */
static float *matmul_tb(bool det, int64_t m, int64_t k, int64_t n, const float *a,
                        const float *b) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  input_t in[2] = {{"a", TY_DTYPE_F32, 2, {m, k}, a}, {"b", TY_DTYPE_F32, 2, {n, k}, b}};
  ty_value_id_t ids[2], c;
  add_inputs(g, in, 2, ids);
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "trans_b", 1));
  TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", ids, 2, &attrs, &c));
  TY_EXPECT_OK(ty_graph_set_output(g, c, "c"));
  size_t bytes;
  float *out = run("cpu?threads=2", det, g, in, 2, "c", &bytes);
  assert_int_equal(bytes, (size_t)(m * n) * sizeof(float));
  ty_graph_destroy(g);
  return out;
}

/* With oneDNN linked and deterministic=0, the plugin runs decode's few rows
 * on an AVX2 (not AVX-512) CPU on the blocked GEMM's streaming path where
 * that was faster than dnnl_sgemm (2..16 rows with trans_b, 2..8 without it
 * when K <= N): the same bits as under deterministic=1 (where oneDNN ran
 * before, most rows differed). Elsewhere nothing is asserted. */
static void test_few_rows_take_the_blocked_gemm_on_avx2(void **state) {
  (void)state;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  const bool avx2_best = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         !__builtin_cpu_supports("avx512f");
#else
  const bool avx2_best = false;
#endif
  if (!avx2_best) {
    printf("cpu_deterministic_test: not an AVX2-only CPU: few rows stay on oneDNN, "
           "not checked\n");
    return;
  }
  const int64_t k = 300, n = 600, rows[5] = {2, 5, 8, 12, 16};
  float *a = random_floats(TY_DTYPE_F32, 16 * k, -1.0, 1.0);
  float *b = random_floats(TY_DTYPE_F32, k * n, -1.0, 1.0);
  float *bias = random_floats(TY_DTYPE_F32, n, -0.5, 0.5);
  for (int ri = 0; ri < 5; ++ri) {
    const int64_t m = rows[ri];
    for (int tb = m <= 8 ? 0 : 1; tb < 2; ++tb) {
      float *fast = tb ? matmul_tb(false, m, k, n, a, b)
                       : matmul_rows("cpu?threads=2", false, TY_DTYPE_F32, m, k, n, a, b, bias);
      float *det = tb ? matmul_tb(true, m, k, n, a, b)
                      : matmul_rows("cpu?threads=2", true, TY_DTYPE_F32, m, k, n, a, b, bias);
      if (memcmp(fast, det, (size_t)(m * n) * sizeof(float)) != 0) {
        fail_msg("matmul f32 M=%lld trans_b=%d without deterministic: not the blocked GEMM's "
                 "bits (did oneDNN run it?)",
                 (long long)m, tb);
      }
      free(fast);
      free(det);
    }
  }
  free(a);
  free(b);
  free(bias);
}

/* The template plugin runs the SDK's reference kernels, which honour the
 * option as they are (f64 sums per element in a fixed order). */
static void test_template_honours(void **state) {
  (void)state;
  const int64_t k = 300, n = 24;
  float *a = random_floats(TY_DTYPE_F32, 64 * k, -1.0, 1.0);
  float *b = random_floats(TY_DTYPE_F32, k * n, -1.0, 1.0);
  float *bias = random_floats(TY_DTYPE_F32, n, -0.5, 0.5);
  float *big = matmul_rows("template", true, TY_DTYPE_F32, 64, k, n, a, b, bias);
  float *one = matmul_rows("template", true, TY_DTYPE_F32, 1, k, n, a + 63 * k, b, bias);
  if (memcmp(one, big + 63 * n, (size_t)n * sizeof(float)) != 0) {
    fail_msg("template under deterministic: row 63 alone differs from row 63 of M=64");
  }
  free(big);
  free(one);
  free(a);
  free(b);
  free(bias);
}

/* The dataflow plugin runs the cpu kernels: deterministic there too, and
 * kept in its artifact, so an executable loaded from the compile cache runs
 * the batch-invariant GEMM as well. */
static void test_dataflow_artifact_keeps_deterministic(void **state) {
  (void)state;
  const int64_t k = 600, n = 80, ms[2] = {1, 64};
  float *a = random_floats(TY_DTYPE_F32, 64 * k, -1.0, 1.0);
  float *b = random_floats(TY_DTYPE_F32, k * n, -1.0, 1.0);
  char dir[600];
  df_test_tmpdir(dir, sizeof(dir));
  float *rows[2][2] = {{NULL}}; /* [compiled, loaded][M = 1, M = 64] */
  for (int mi = 0; mi < 2; ++mi) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    input_t in[2] = {{"a", TY_DTYPE_F32, 2, {ms[mi], k}, a}, {"b", TY_DTYPE_F32, 2, {k, n}, b}};
    ty_value_id_t ids[2], c;
    /* b a parameter: the dataflow device runs inference graphs, not ops. */
    TY_EXPECT_OK(ty_graph_add_input(g, "a", TY_DTYPE_F32, 2, in[0].dims, &ids[0]));
    TY_EXPECT_OK(ty_graph_add_state(g, "b", TY_DTYPE_F32, 2, in[1].dims, &ids[1]));
    TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", ids, 2, NULL, &c));
    TY_EXPECT_OK(ty_graph_set_output(g, c, "c"));
    static const ty_session_source_t want[2] = {TY_SESSION_DISK_MISS, TY_SESSION_DISK_HIT};
    for (int pass = 0; pass < 2; ++pass) {
      size_t bytes;
      ty_session_source_t source;
      rows[pass][mi] = run_cached("dataflow", true, dir, g, in, 2, "c", &bytes, &source);
      assert_int_equal(source, want[pass]);
    }
    ty_graph_destroy(g);
  }
  for (int pass = 0; pass < 2; ++pass) {
    if (memcmp(rows[pass][0], rows[pass][1], (size_t)n * sizeof(float)) != 0) {
      fail_msg("dataflow under deterministic (%s): row 0 alone differs from row 0 of the "
               "M=64 product",
               pass ? "loaded from the compile cache" : "compiled");
    }
    for (int mi = 0; mi < 2; ++mi) free(rows[pass][mi]);
  }
  df_test_rmtree(dir);
  free(a);
  free(b);
}

/* ---- attention: a decode query equals its row of the causal block -------- */

/* Attention of q [1, tq, H, D] over k, v [1, S, Hkv, D] (kv_len input when
 * valid > 0); returns out [1, tq, H, D] f32. */
static float *attention(bool det, int64_t tq, int64_t s, int64_t valid, int64_t window,
                        const float *q, const float *k, const float *v) {
  const int64_t H = 4, Hkv = 2, D = 16;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  input_t in[4] = {{"q", TY_DTYPE_F32, 4, {1, tq, H, D}, q},
                   {"k", TY_DTYPE_F32, 4, {1, s, Hkv, D}, k},
                   {"v", TY_DTYPE_F32, 4, {1, s, Hkv, D}, v},
                   {valid > 0 ? "kv_len" : NULL, TY_DTYPE_I64, 0, {0}, &valid}};
  ty_value_id_t ids[4], outs[2];
  add_inputs(g, in, 4, ids);
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  if (window) TY_EXPECT_OK(ty_attrs_set_int(&attrs, "window", window));
  TY_EXPECT_OK(ty_graph_add_node(g, "attention", ids, valid > 0 ? 4 : 3, &attrs, outs, 2));
  TY_EXPECT_OK(ty_graph_set_output(g, outs[0], "out"));
  size_t bytes;
  float *out = run("cpu?threads=2", det, g, in, 4, "out", &bytes);
  assert_int_equal(bytes, (size_t)(tq * H * D) * sizeof(float));
  ty_graph_destroy(g);
  return out;
}

static void test_attention_decode_row_equals_block_row(void **state) {
  (void)state;
  const int64_t T = 600, S = 640, H = 4, Hkv = 2, D = 16, row = H * D;
  float *q = random_floats(TY_DTYPE_F32, T * row, -1.0, 1.0);
  float *k = random_floats(TY_DTYPE_F32, S * Hkv * D, -1.0, 1.0);
  float *v = random_floats(TY_DTYPE_F32, S * Hkv * D, -1.0, 1.0);
  /* No window; a window longer than a K slice (256), and one that is not a
   * multiple of the query block. */
  static const int64_t windows[3] = {0, 300, 517};
  static const int64_t ts[] = {0, 1, 63, 64, 255, 256, 300, 301, 400, 527, 599};
  for (int wi = 0; wi < 3; ++wi) {
    for (int det = 1; det >= 0; --det) {
      float *block = attention(det, T, T, 0, windows[wi], q, k, v);
      int differ = 0;
      for (size_t i = 0; i < sizeof(ts) / sizeof(ts[0]); ++i) {
        const int64_t t = ts[i];
        /* The cache holds S rows, t + 1 of them filled. */
        float *one = attention(det, 1, S, t + 1, windows[wi], q + t * row, k, v);
        const bool same = memcmp(one, block + t * row, (size_t)row * sizeof(float)) == 0;
        if (det && !same) {
          fail_msg("attention under deterministic (window %lld): query %lld over a KV cache "
                   "differs from its row of the causal block",
                   (long long)windows[wi], (long long)t);
        }
        differ += !same;
        free(one);
      }
      if (!det) {
        printf("attention window %lld without deterministic: %d of %zu decode rows differ "
               "from the block\n",
               (long long)windows[wi], differ, sizeof(ts) / sizeof(ts[0]));
      }
      free(block);
    }
  }
  free(q);
  free(k);
  free(v);
}

/* ---- thread counts -------------------------------------------------------- */

/* Runs a one-node graph on 1, 2 and 3 threads under deterministic and
 * fails unless output `out` is the same bits on each. */
static void expect_thread_invariant(const char *op, const input_t *in, uint32_t n_in,
                                    const ty_attrs_t *attrs, uint32_t n_out, uint32_t out) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t ids[8], outs[4];
  add_inputs(g, in, n_in, ids);
  TY_EXPECT_OK(ty_graph_add_node(g, op, ids, n_in, attrs, outs, n_out));
  TY_EXPECT_OK(ty_graph_set_output(g, outs[out], "out"));
  static const char *uris[3] = {"cpu?threads=1", "cpu?threads=2", "cpu?threads=3"};
  size_t bytes0 = 0;
  void *first = run(uris[0], true, g, in, n_in, "out", &bytes0);
  for (int u = 1; u < 3; ++u) {
    size_t bytes;
    void *got = run(uris[u], true, g, in, n_in, "out", &bytes);
    assert_int_equal(bytes, bytes0);
    if (memcmp(first, got, bytes) != 0) {
      fail_msg("%s output %u under deterministic: %s gives other bits than %s", op, out,
               uris[u], uris[0]);
    }
    free(got);
  }
  free(first);
  ty_graph_destroy(g);
}

/* [rows, cols] f32 in [-1, 1) but for +1e30 in row 0 and -1e30 in row
 * 3 rows / 4: a sum that meets them in another grouping keeps or loses the
 * terms between them, so any order that follows the threads shows. */
static float *cancelling_rows(int64_t rows, int64_t cols) {
  float *x = random_floats(TY_DTYPE_F32, rows * cols, -1.0, 1.0);
  for (int64_t d = 0; d < cols; ++d) {
    x[d] = 1e30f;
    x[(rows * 3 / 4) * cols + d] = -1e30f;
  }
  return x;
}

static void test_reductions_are_thread_invariant(void **state) {
  (void)state;
  const int64_t R = 3000, C = 97;
  /* reduce_sum over everything, and over the rows (a bias gradient). */
  float *x = cancelling_rows(R, C);
  input_t rin[1] = {{"x", TY_DTYPE_F32, 2, {R, C}, x}};
  expect_thread_invariant("reduce_sum", rin, 1, NULL, 1, 0);
  ty_attrs_t axes = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_ints(&axes, "axes", (int64_t[]){0}, 1));
  expect_thread_invariant("reduce_sum", rin, 1, &axes, 1, 0);
  /* layernorm_backward: dgamma and dbeta sum dy xhat and dy over the rows;
   * every row of x the same (mean 0, rstd 1), so the big terms cancel. */
  float *dy = cancelling_rows(R, C);
  float *xs = random_floats(TY_DTYPE_F32, R * C, -1.0, 1.0);
  for (int64_t r = 1; r < R; ++r) memcpy(xs + r * C, xs, (size_t)C * sizeof(float));
  float *gamma = random_floats(TY_DTYPE_F32, C, 0.5, 1.5);
  float *mean = calloc((size_t)R, sizeof(float)), *rstd = malloc((size_t)R * sizeof(float));
  assert_non_null(mean);
  assert_non_null(rstd);
  for (int64_t r = 0; r < R; ++r) rstd[r] = 1.0f;
  input_t lin[5] = {{"dy", TY_DTYPE_F32, 2, {R, C}, dy},
                    {"x", TY_DTYPE_F32, 2, {R, C}, xs},
                    {"gamma", TY_DTYPE_F32, 1, {C}, gamma},
                    {"mean", TY_DTYPE_F32, 1, {R}, mean},
                    {"rstd", TY_DTYPE_F32, 1, {R}, rstd}};
  expect_thread_invariant("layernorm_backward", lin, 5, NULL, 3, 1);
  expect_thread_invariant("layernorm_backward", lin, 5, NULL, 3, 2);
  /* embedding_backward: many rows onto few tokens, rows 0 and 3R/4 (the
   * big ones) onto the same token. */
  int32_t *ids = malloc((size_t)R * sizeof(int32_t));
  assert_non_null(ids);
  for (int64_t i = 0; i < R; ++i) ids[i] = (int32_t)(ty_test_rng_next(&g_rng) % 5);
  ids[R * 3 / 4] = ids[0];
  input_t ein[2] = {{"dy", TY_DTYPE_F32, 2, {R, C}, dy}, {"ids", TY_DTYPE_I32, 1, {R}, ids}};
  ty_attrs_t vocab = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&vocab, "vocab_size", 7));
  expect_thread_invariant("embedding_backward", ein, 2, &vocab, 1, 0);
  /* clip_by_global_norm: the norm of every gradient together (squares do
   * not cancel, so this one guards the property more than it probes it). */
  float max_norm = 0.5f;
  input_t cin[3] = {{"max_norm", TY_DTYPE_F32, 0, {0}, &max_norm},
                    {"g0", TY_DTYPE_F32, 2, {R, C}, xs},
                    {"g1", TY_DTYPE_F32, 1, {R}, gamma}};
  cin[2].dims[0] = C;
  for (uint32_t o = 0; o < 3; ++o) {
    expect_thread_invariant("clip_by_global_norm", cin, 3, NULL, 3, o);
  }
  /* matmul (the blocked GEMM's tiles go to any thread) and attention
   * backward (dk/dv summed over query heads and blocks in order). */
  float *w = random_floats(TY_DTYPE_F32, C * 80, -1.0, 1.0);
  float *xr = random_floats(TY_DTYPE_F32, R * C, -1.0, 1.0);
  input_t min[2] = {{"a", TY_DTYPE_F32, 2, {R, C}, xr}, {"b", TY_DTYPE_F32, 2, {C, 80}, w}};
  expect_thread_invariant("matmul", min, 2, NULL, 1, 0);
  const int64_t T = 300, H = 4, Hkv = 2, D = 16;
  float *att[6];
  for (int i = 0; i < 6; ++i) {
    const int64_t count = i == 5 ? H * T : T * (i == 2 || i == 3 ? Hkv : H) * D;
    att[i] = random_floats(TY_DTYPE_F32, count, i == 5 ? 1.0 : -1.0, i == 5 ? 3.0 : 1.0);
  }
  input_t ain[6] = {{"dout", TY_DTYPE_F32, 4, {1, T, H, D}, att[0]},
                    {"q", TY_DTYPE_F32, 4, {1, T, H, D}, att[1]},
                    {"k", TY_DTYPE_F32, 4, {1, T, Hkv, D}, att[2]},
                    {"v", TY_DTYPE_F32, 4, {1, T, Hkv, D}, att[3]},
                    {"o", TY_DTYPE_F32, 4, {1, T, H, D}, att[4]},
                    {"lse", TY_DTYPE_F32, 3, {1, H, T}, att[5]}};
  for (uint32_t o = 0; o < 3; ++o) {
    expect_thread_invariant("attention_backward", ain, 6, NULL, 3, o);
  }
  for (int i = 0; i < 6; ++i) free(att[i]);
  free(w);
  free(xr);
  free(x);
  free(dy);
  free(xs);
  free(gamma);
  free(mean);
  free(rstd);
  free(ids);
}

/* ---- the option's values ------------------------------------------------- */

static void test_bad_value_is_refused(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, (int64_t[]){4}, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(g_registry, "cpu", &dev));
  ty_abi_option_t bad = {.key = "deterministic", .value = "yes"};
  ty_session_options_t opts = {.option_count = 1, .options = &bad};
  ty_session_t *s = NULL;
  TY_EXPECT_STATUS(ty_session_create(dev, g, &opts, &s), TY_CODE_INVALID_ARGUMENT,
                   "cpu: compile option deterministic='yes' must be 1 or 0");
  /* "0" is the default, said out loud. */
  ty_abi_option_t off = {.key = "deterministic", .value = "0"};
  opts.options = &off;
  TY_EXPECT_OK(ty_session_create(dev, g, &opts, &s));
  ty_session_destroy(s);
  ty_device_close(dev);
  ty_graph_destroy(g);
}

static int setup(void **state) {
  (void)state;
  ty_test_rng_init(&g_rng, ty_test_seed());
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  return ty_registry_create(&options, &g_registry) == TY_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  ty_registry_destroy(g_registry);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_value_is_refused),
      cmocka_unit_test(test_matmul_row_is_batch_invariant),
      cmocka_unit_test(test_few_rows_take_the_blocked_gemm_on_avx2),
      cmocka_unit_test(test_dataflow_artifact_keeps_deterministic),
      cmocka_unit_test(test_template_honours),
      cmocka_unit_test(test_attention_decode_row_equals_block_row),
      cmocka_unit_test(test_reductions_are_thread_invariant),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
