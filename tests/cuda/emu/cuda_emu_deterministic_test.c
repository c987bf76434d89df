/* The cuda plugin's deterministic mode (compile option deterministic=1, ABI
 * 1.10) on the CPU emulator: a matmul row is the same bits whatever the
 * number of rows M (1, 64, 257) and wherever the row sits, through the
 * emulated cuBLASLt, whose heuristic picks another summation order per M
 * (split-K for small M, K in chunks for middling M: emu_blaslt.cpp) — and
 * without the option the same rows do differ, which shows the check can
 * fail; an artifact keeps the mode; the option's values (0/1, anything else
 * INVALID_ARGUMENT), ignored debug.* keys (ABI 1.9) and unknown keys. The
 * attention half of the promise is checked on the kernels themselves
 * (tests/cuda/attention_emu.cc, check_row_invariance).
 *
 * With TY_DET_DEVICE=1 (tests/cuda/device_run.sh deterministic, on a GPU)
 * it runs other cases instead: GPT-2's matmul shapes (bf16 and f32, M from
 * 1 to 1024, every row of the smaller M against the same row of the
 * largest) and attention (a decode row over a cache against the same row
 * in a causal prefill and in a longer block, bf16, head dim 64, the
 * tensor-core path), bitwise under deterministic=1; what the default mode
 * gives for the same cases is printed, not checked (the card may agree). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"

enum { K = 96, N = 40, MAX_M = 257 }; /* the emulator cases' shape */

typedef struct {
  ty_registry_t *r;
  ty_device_t *dev;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  if (!f) return -1;
  /* On the GPU machine the plugins are where device_run.sh says. */
  const char *dir = getenv("TY_DET_PLUGIN_DIR");
  const char *paths[] = {dir && dir[0] ? dir : TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  if (ty_registry_create(&options, &f->r) || ty_device_open(f->r, "cuda:0", &f->dev)) {
    if (f->r) ty_registry_destroy(f->r);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  if (!f) return 0;
  ty_device_close(f->dev);
  ty_registry_destroy(f->r);
  free(f);
  return 0;
}

/* out [M, N] = a [M, K] @ b [K, N], f32. */
static ty_graph_t *matmul_graph(int64_t M) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t ad[2] = {M, K}, bd[2] = {K, N};
  ty_value_id_t in[2], out;
  TY_EXPECT_OK(ty_graph_add_input(g, "a", TY_DTYPE_F32, 2, ad, &in[0]));
  TY_EXPECT_OK(ty_graph_add_input(g, "b", TY_DTYPE_F32, 2, bd, &in[1]));
  TY_EXPECT_OK(ty_graph_add_node(g, "matmul", in, 2, NULL, &out, 1));
  TY_EXPECT_OK(ty_graph_set_output(g, out, "out"));
  return g;
}

static float g_a[MAX_M * K], g_b[K * N], g_row[K];

/* Fresh inputs from `seed` (printed): the row under test, b, and other
 * rows. */
static void make_inputs(uint32_t seed) {
  printf("inputs from seed %u\n", seed);
  for (size_t i = 0; i < sizeof(g_a) / sizeof(g_a[0]); ++i) {
    seed = seed * 1664525u + 1013904223u;
    g_a[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  for (size_t i = 0; i < K * N; ++i) {
    seed = seed * 1664525u + 1013904223u;
    g_b[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
  for (size_t i = 0; i < K; ++i) {
    seed = seed * 1664525u + 1013904223u;
    g_row[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
  }
}

/* Runs a session of `graph` with a [M, K] holding the test row at `at`
 * (the other rows: g_a); the row's N results into out_row. */
static void run_row(ty_session_t *s, int64_t M, int64_t at, float *out_row) {
  static float a[MAX_M * K], out[MAX_M * N];
  memcpy(a, g_a, (size_t)(M * K) * sizeof(float));
  memcpy(a + at * K, g_row, sizeof(g_row));
  const int64_t ad[2] = {M, K}, bd[2] = {K, N};
  TY_EXPECT_OK(ty_session_bind(s, "a", TY_DTYPE_F32, 2, ad, a, (size_t)(M * K) * sizeof(float)));
  TY_EXPECT_OK(ty_session_bind(s, "b", TY_DTYPE_F32, 2, bd, g_b, sizeof(g_b)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "out", out, (size_t)(M * N) * sizeof(float)));
  memcpy(out_row, out + at * N, N * sizeof(float));
}

static void matmul_row(fixture_t *f, bool deterministic, int64_t M, int64_t at, float *out_row) {
  ty_graph_t *g = matmul_graph(M);
  ty_session_options_t opts = {.deterministic = deterministic};
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(f->dev, g, &opts, &s));
  run_row(s, M, at, out_row);
  ty_session_destroy(s);
  ty_graph_destroy(g);
}

/* The row at M = 1, 64 (last row) and 257 (row 100) is the same bits under
 * deterministic=1; without it, M = 1 and 257 differ (the emulated
 * heuristic's split-K), or this test could not see a per-M choice. */
static void test_matmul_row_invariant(void **state) {
  fixture_t *f = *state;
  make_inputs((uint32_t)time(NULL));
  const int64_t shapes[3][2] = {{1, 0}, {64, 63}, {257, 100}};
  float rows[3][N], plain[2][N];
  for (int i = 0; i < 3; ++i) matmul_row(f, true, shapes[i][0], shapes[i][1], rows[i]);
  for (int i = 1; i < 3; ++i) {
    printf("deterministic: M=%lld row %lld vs M=1: %s\n", (long long)shapes[i][0],
           (long long)shapes[i][1], memcmp(rows[i], rows[0], sizeof(rows[0])) ? "DIFFERENT"
                                                                              : "same bits");
    assert_memory_equal(rows[i], rows[0], sizeof(rows[0]));
  }
  matmul_row(f, false, 1, 0, plain[0]);
  matmul_row(f, false, 257, 100, plain[1]);
  printf("default mode: M=257 vs M=1: %s\n",
         memcmp(plain[0], plain[1], sizeof(plain[0])) ? "different (as expected)" : "same");
  assert_memory_not_equal(plain[0], plain[1], sizeof(plain[0]));
}

/* One node of `op` over x [M, C] (f32; layernorm also takes gamma and beta
 * [C]) with the test row at `at`; its first output's row into out_row. */
static void row_op(fixture_t *f, const char *op, int64_t M, int64_t C, int64_t at,
                   float *out_row) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t xd[2] = {M, C}, pd[1] = {C};
  const bool norm = !strcmp(op, "layernorm");
  ty_value_id_t in[3], out[3];
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, xd, &in[0]));
  if (norm) {
    TY_EXPECT_OK(ty_graph_add_input(g, "gamma", TY_DTYPE_F32, 1, pd, &in[1]));
    TY_EXPECT_OK(ty_graph_add_input(g, "beta", TY_DTYPE_F32, 1, pd, &in[2]));
  }
  const uint32_t n_out = norm ? 3 : !strcmp(op, "rmsnorm") ? 2 : 1;
  TY_EXPECT_OK(ty_graph_add_node(g, op, in, norm ? 3 : 1, NULL, out, n_out));
  TY_EXPECT_OK(ty_graph_set_output(g, out[0], "out"));
  ty_session_options_t opts = {.deterministic = true};
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(f->dev, g, &opts, &s));
  static float x[MAX_M * K], y[MAX_M * K];
  assert_true(M * C <= MAX_M * K);
  memcpy(x, g_a, (size_t)(M * C) * sizeof(float));
  memcpy(x + at * C, g_row, (size_t)C * sizeof(float));
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F32, 2, xd, x, (size_t)(M * C) * sizeof(float)));
  if (norm) {
    TY_EXPECT_OK(ty_session_bind(s, "gamma", TY_DTYPE_F32, 1, pd, g_b, (size_t)C * sizeof(float)));
    TY_EXPECT_OK(
        ty_session_bind(s, "beta", TY_DTYPE_F32, 1, pd, g_b + C, (size_t)C * sizeof(float)));
  }
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "out", y, (size_t)(M * C) * sizeof(float)));
  memcpy(out_row, y + at * C, (size_t)C * sizeof(float));
  ty_session_destroy(s);
  ty_graph_destroy(g);
}

/* Per-row ops over rows whose length (C = 93, not a multiple of 4) leaves
 * each row at another 16-byte alignment: the row at place 5 of 7 is the
 * same bits as the row alone (the kernels' vector path took its head from
 * the row's own address, so the summation order followed the row's place:
 * kernels/vec.cuh, ty_row_head4). */
static void test_row_ops_invariant(void **state) {
  fixture_t *f = *state;
  make_inputs((uint32_t)time(NULL) ^ 0x27d4eb2fu);
  enum { C = 93 };
  static const char *const ops[] = {"layernorm", "softmax", "rmsnorm"};
  for (int i = 0; i < 3; ++i) {
    float alone[C], among[C];
    row_op(f, ops[i], 1, C, 0, alone);
    row_op(f, ops[i], 7, C, 5, among);
    printf("%s: row 5 of 7 vs alone: %s\n", ops[i],
           memcmp(alone, among, sizeof(alone)) ? "DIFFERENT" : "same bits");
    assert_memory_equal(alone, among, sizeof(alone));
  }
}

/* An artifact of a deterministic executable loads as one: the M = 1 row
 * from the loaded artifact equals the M = 257 row. */
static void test_artifact_keeps_mode(void **state) {
  fixture_t *f = *state;
  make_inputs((uint32_t)time(NULL) ^ 0x5bd1e995u);
  float big[N], loaded[N];
  matmul_row(f, true, 257, 7, big);
  ty_graph_t *g = matmul_graph(1);
  ty_session_options_t opts = {.deterministic = true};
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(f->dev, g, &opts, &s));
  void *bytes = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_session_serialize(s, &bytes, &size));
  ty_session_destroy(s);
  char path[] = "/tmp/ty_cuda_det_artifact_XXXXXX";
  const int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *fp = fdopen(fd, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(bytes, 1, size, fp), size);
  assert_int_equal(fclose(fp), 0);
  free(bytes);
  s = NULL;
  TY_EXPECT_OK(ty_session_create_from_artifact(f->dev, g, path, NULL, &s));
  run_row(s, 1, 0, loaded);
  ty_session_destroy(s);
  unlink(path);
  ty_graph_destroy(g);
  assert_memory_equal(loaded, big, sizeof(big));
}

/* deterministic takes 0 or 1; debug.* keys are ignored (ABI 1.9); other
 * keys are refused by name. */
static void test_option_values(void **state) {
  fixture_t *f = *state;
  ty_graph_t *g = matmul_graph(2);
  ty_session_t *s = NULL;
  const ty_abi_option_t yes = {"deterministic", "yes"};
  ty_session_options_t opts = {.option_count = 1, .options = &yes};
  TY_EXPECT_STATUS(ty_session_create(f->dev, g, &opts, &s), TY_CODE_INVALID_ARGUMENT,
                   "compile option deterministic=yes: expected 0 or 1");
  assert_null(s);
  const ty_abi_option_t bogus = {"fast", "1"};
  opts.options = &bogus;
  TY_EXPECT_STATUS(ty_session_create(f->dev, g, &opts, &s), TY_CODE_INVALID_ARGUMENT,
                   "unknown compile option 'fast'");
  assert_null(s);
  const ty_abi_option_t fine[3] = {{"deterministic", "0"}, {"debug.nothing", "7"},
                                   {"debug.guards", "3"}};
  opts.option_count = 3;
  opts.options = fine;
  TY_EXPECT_OK(ty_session_create(f->dev, g, &opts, &s));
  float row[N];
  make_inputs(1);
  run_row(s, 2, 1, row);
  ty_session_destroy(s);
  ty_graph_destroy(g);
}

/* ---- on a GPU (TY_DET_DEVICE=1) ---- */

static uint32_t g_seed;

static float next_uniform(void) {
  g_seed = g_seed * 1664525u + 1013904223u;
  return (float)(g_seed >> 8) / 16777216.0f * 2.0f - 1.0f;
}

/* n random values of dtype dt (f32 or bf16: the top half of an f32). */
static void *random_values(ty_dtype_t dt, size_t n) {
  const size_t es = ty_dtype_size(dt);
  unsigned char *p = malloc(n * es);
  assert_non_null(p);
  for (size_t i = 0; i < n; ++i) {
    float x = next_uniform();
    uint32_t u;
    memcpy(&u, &x, 4);
    if (dt == TY_DTYPE_BF16) {
      const uint16_t h = (uint16_t)(u >> 16);
      memcpy(p + i * 2, &h, 2);
    } else {
      memcpy(p + i * 4, &u, 4);
    }
  }
  return p;
}

/* out [M, ND] = x [M, KD] @ (tb ? w[ND, KD]^T : w[KD, ND]) on cuda:0; out is
 * malloc'ed. */
static void *device_matmul(fixture_t *f, bool det, ty_dtype_t dt, int64_t M, int64_t KD,
                           int64_t ND, bool tb, const void *x, const void *w) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t xd[2] = {M, KD}, wd[2] = {tb ? ND : KD, tb ? KD : ND};
  ty_value_id_t in[2], out;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", dt, 2, xd, &in[0]));
  TY_EXPECT_OK(ty_graph_add_input(g, "w", dt, 2, wd, &in[1]));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "trans_b", tb ? 1 : 0));
  TY_EXPECT_OK(ty_graph_add_node(g, "matmul", in, 2, &attrs, &out, 1));
  TY_EXPECT_OK(ty_graph_set_output(g, out, "out"));
  ty_session_options_t opts = {.deterministic = det};
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(f->dev, g, &opts, &s));
  const size_t es = ty_dtype_size(dt);
  TY_EXPECT_OK(ty_session_bind(s, "x", dt, 2, xd, x, (size_t)(M * KD) * es));
  TY_EXPECT_OK(ty_session_bind(s, "w", dt, 2, wd, w, (size_t)(KD * ND) * es));
  TY_EXPECT_OK(ty_session_run(s));
  void *o = malloc((size_t)(M * ND) * es);
  assert_non_null(o);
  TY_EXPECT_OK(ty_session_read(s, "out", o, (size_t)(M * ND) * es));
  ty_session_destroy(s);
  ty_graph_destroy(g);
  return o;
}

/* GPT-2's linear layers and LM head: rows of M = 1 .. 1000 against the
 * same rows of M = 1024. */
static void test_device_matmul_shapes(void **state) {
  fixture_t *f = *state;
  g_seed = (uint32_t)time(NULL);
  printf("inputs from seed %u\n", g_seed);
  static const struct {
    int64_t KD, ND;
    bool tb;
    ty_dtype_t dt;
  } shapes[] = {{768, 2304, false, TY_DTYPE_BF16}, {768, 768, false, TY_DTYPE_BF16},
                {768, 3072, false, TY_DTYPE_BF16}, {3072, 768, false, TY_DTYPE_BF16},
                {768, 50257, true, TY_DTYPE_BF16}, {768, 2304, false, TY_DTYPE_F32},
                {3072, 768, false, TY_DTYPE_F32}};
  static const int64_t ms[] = {1, 5, 64, 200, 1000};
  const int64_t big = 1024;
  int bad = 0;
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); ++i) {
    const ty_dtype_t dt = shapes[i].dt;
    const int64_t KD = shapes[i].KD, ND = shapes[i].ND;
    const size_t es = ty_dtype_size(dt);
    void *x = random_values(dt, (size_t)(big * KD)), *w = random_values(dt, (size_t)(KD * ND));
    for (int det = 1; det >= 0; --det) {
      unsigned char *ref = device_matmul(f, det, dt, big, KD, ND, shapes[i].tb, x, w);
      for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); ++j) {
        unsigned char *o = device_matmul(f, det, dt, ms[j], KD, ND, shapes[i].tb, x, w);
        int64_t rows = 0;
        for (int64_t r = 0; r < ms[j]; ++r) {
          rows += memcmp(o + r * ND * es, ref + r * ND * es, (size_t)ND * es) != 0;
        }
        printf("%s matmul %s K=%lld N=%lld%s M=%lld: %lld of %lld rows differ from M=%lld\n",
               det ? "deterministic" : "default      ", dt == TY_DTYPE_BF16 ? "bf16" : "f32",
               (long long)KD, (long long)ND, shapes[i].tb ? " (w^T)" : "", (long long)ms[j],
               (long long)rows, (long long)ms[j], (long long)big);
        if (det && rows) bad++;
        free(o);
      }
      free(ref);
    }
    free(x);
    free(w);
  }
  assert_int_equal(bad, 0);
}

static double value_at(ty_dtype_t dt, const void *p, size_t i) {
  if (dt == TY_DTYPE_F32) return ((const float *)p)[i];
  const uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* A product x @ w^T whose output rows are not a multiple of 16 bytes (bf16
 * [5, 300] and [1, 300]: 296 + 4 columns; f32 [3, 301]: 300 + 1; a graph
 * output like serving's logits) runs as two GEMMs into a row-padded scratch
 * and is packed after (cuda_gemm.c, ty_cu_pitched_output): the product
 * against an f64 reference in both modes, with that path and with
 * TRAINYARD_CUDA_PAD_ROWS=0 (one unaligned GEMM); x @ w (f32 [3, 301]) keeps
 * the one GEMM. */
static void test_matmul_unaligned_rows(void **state) {
  fixture_t *f = *state;
  static const struct {
    int64_t M, KD, ND;
    bool tb;
    ty_dtype_t dt;
  } cases[] = {{5, 64, 300, true, TY_DTYPE_BF16}, {3, 40, 301, true, TY_DTYPE_F32},
               {1, 64, 300, true, TY_DTYPE_BF16}, {3, 40, 301, false, TY_DTYPE_F32}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    const int64_t M = cases[i].M, KD = cases[i].KD, ND = cases[i].ND;
    const ty_dtype_t dt = cases[i].dt;
    const bool tb = cases[i].tb;
    void *x = random_values(dt, (size_t)(M * KD)), *w = random_values(dt, (size_t)(KD * ND));
    for (int pad = 1; pad >= 0; --pad) {
      if (!pad) setenv("TRAINYARD_CUDA_PAD_ROWS", "0", 1);
      for (int det = 0; det <= 1; ++det) {
        void *o = device_matmul(f, det, dt, M, KD, ND, tb, x, w);
        double worst = 0;
        for (int64_t r = 0; r < M; ++r) {
          for (int64_t n = 0; n < ND; ++n) {
            double want = 0;
            for (int64_t k = 0; k < KD; ++k) {
              want += value_at(dt, x, (size_t)(r * KD + k)) *
                      value_at(dt, w, (size_t)(tb ? n * KD + k : k * ND + n));
            }
            const double d = fabs(value_at(dt, o, (size_t)(r * ND + n)) - want);
            if (d > worst) worst = d;
          }
        }
        /* bf16 output: its rounding (2^-9 relative) on sums below 16 */
        const double bound = dt == TY_DTYPE_BF16 ? 0.04 : 1e-4;
        if (worst > bound) {
          fail_msg("matmul %lld x %lld (pad %d det %d): max |device - f64| %g > %g",
                   (long long)M, (long long)ND, pad, det, worst, bound);
        }
        free(o);
      }
      unsetenv("TRAINYARD_CUDA_PAD_ROWS");
    }
    free(x);
    free(w);
  }
}

/* One attention node (bf16, causal) on cuda:0: q [1, T, H, D], k/v
 * [1, S, H, D], kv_len (when > 0); returns row t of out (H x D values). */
static void device_attention_row(fixture_t *f, bool det, int64_t T, int64_t S, int64_t kv_len,
                                 int64_t t, const uint16_t *qrow, const uint16_t *kv0,
                                 int64_t L, uint16_t *out_row) {
  enum { H = 12, D = 64 };
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t qd[4] = {1, T, H, D}, kd[4] = {1, S, H, D};
  ty_value_id_t in[4], out[2];
  TY_EXPECT_OK(ty_graph_add_input(g, "q", TY_DTYPE_BF16, 4, qd, &in[0]));
  TY_EXPECT_OK(ty_graph_add_input(g, "k", TY_DTYPE_BF16, 4, kd, &in[1]));
  TY_EXPECT_OK(ty_graph_add_input(g, "v", TY_DTYPE_BF16, 4, kd, &in[2]));
  uint32_t n_in = 3;
  if (kv_len > 0) {
    TY_EXPECT_OK(ty_graph_add_input(g, "kv_len", TY_DTYPE_I64, 0, NULL, &in[3]));
    n_in = 4;
  }
  TY_EXPECT_OK(ty_graph_add_node(g, "attention", in, n_in, NULL, out, 2));
  TY_EXPECT_OK(ty_graph_set_output(g, out[0], "out"));
  ty_session_options_t opts = {.deterministic = det};
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(f->dev, g, &opts, &s));
  uint16_t *q = random_values(TY_DTYPE_BF16, (size_t)(T * H * D));
  uint16_t *k = random_values(TY_DTYPE_BF16, (size_t)(S * H * D));
  uint16_t *v = random_values(TY_DTYPE_BF16, (size_t)(S * H * D));
  memcpy(q + t * H * D, qrow, H * D * 2);
  memcpy(k, kv0, (size_t)(L * H * D) * 2);
  memcpy(v, kv0 + L * H * D, (size_t)(L * H * D) * 2);
  TY_EXPECT_OK(ty_session_bind(s, "q", TY_DTYPE_BF16, 4, qd, q, (size_t)(T * H * D) * 2));
  TY_EXPECT_OK(ty_session_bind(s, "k", TY_DTYPE_BF16, 4, kd, k, (size_t)(S * H * D) * 2));
  TY_EXPECT_OK(ty_session_bind(s, "v", TY_DTYPE_BF16, 4, kd, v, (size_t)(S * H * D) * 2));
  if (kv_len > 0) TY_EXPECT_OK(ty_session_bind(s, "kv_len", TY_DTYPE_I64, 0, NULL, &kv_len, 8));
  TY_EXPECT_OK(ty_session_run(s));
  uint16_t *o = malloc((size_t)(T * H * D) * 2);
  assert_non_null(o);
  TY_EXPECT_OK(ty_session_read(s, "out", o, (size_t)(T * H * D) * 2));
  memcpy(out_row, o + t * H * D, H * D * 2);
  free(o);
  free(q);
  free(k);
  free(v);
  ty_session_destroy(s);
  ty_graph_destroy(g);
}

static void test_device_attention_rows(void **state) {
  fixture_t *f = *state;
  enum { H = 12, D = 64, L = 300 };
  g_seed = (uint32_t)time(NULL) ^ 0x9e3779b9u;
  printf("inputs from seed %u\n", g_seed);
  uint16_t *qrow = random_values(TY_DTYPE_BF16, H * D);
  uint16_t *kv0 = random_values(TY_DTYPE_BF16, 2 * (size_t)L * H * D);
  static uint16_t rows[4][H * D];
  static const char *const what[4] = {"decode over a 512 cache", "last row of a causal prefill",
                                      "row 299 of a 400-row block", "end of a 64-row chunk"};
  int bad = 0;
  for (int det = 1; det >= 0; --det) {
    device_attention_row(f, det, 1, 512, L, 0, qrow, kv0, L, rows[0]);
    device_attention_row(f, det, L, L, 0, L - 1, qrow, kv0, L, rows[1]);
    device_attention_row(f, det, 400, 400, 0, L - 1, qrow, kv0, L, rows[2]);
    device_attention_row(f, det, 64, 512, L, 63, qrow, kv0, L, rows[3]);
    for (int i = 1; i < 4; ++i) {
      const bool same = memcmp(rows[i], rows[0], sizeof(rows[0])) == 0;
      printf("%s attention: %s vs %s: %s\n", det ? "deterministic" : "default      ", what[i],
             what[0], same ? "same bits" : "DIFFERENT");
      if (det && !same) bad++;
    }
  }
  free(qrow);
  free(kv0);
  assert_int_equal(bad, 0);
}

int main(void) {
  const char *device = getenv("TY_DET_DEVICE");
  if (device && !strcmp(device, "1")) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_matmul_shapes),
        cmocka_unit_test(test_matmul_unaligned_rows),
        cmocka_unit_test(test_device_attention_rows),
        cmocka_unit_test(test_option_values),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_row_invariant),
      cmocka_unit_test(test_matmul_unaligned_rows),
      cmocka_unit_test(test_row_ops_invariant),
      cmocka_unit_test(test_artifact_keeps_mode),
      cmocka_unit_test(test_option_values),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
