/* The cuda executor's few-row matmuls (kernels/gemv.cu, chosen in
 * cuda_gemm.c) on the CPU emulator of tests/cuda/emu: products of 1 to 5
 * rows, in f32 and bf16, with the weight as [K, N] (gemv_kn) and as [N, K]
 * (trans_b: gemv_nk), with and without a bias, and the fused epilogues a
 * decode step meets (matmul -> gelu, matmul -> add of the residual), each
 * against the same graph on the cpu backend. The executor's report tells
 * which path ran. With TRAINYARD_CUDA_GEMV=all up to TY_GEMV_MAX_M rows of
 * a [N, K] weight take gemv_nk and of a [K, N] weight gemv_kn (no cuBLASLt
 * command), 5 rows cuBLASLt, as does deterministic=1, and a [K, N] weight
 * whose N is not whole 16-byte groups (N = 36 in bf16); =nk keeps [K, N]
 * weights on cuBLASLt. By default ("group") only GEMV_GROUP fusions (q/k/v,
 * gate/up: several products of one input) take the kernels, =0 none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "backends/cuda/kernels/gemv_shapes.h"
#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"

enum { K_DEFAULT = 48, MAX_K = 768, MAX_N = 48, MAX_M = 5 };

typedef enum { EPI_NONE, EPI_GELU, EPI_RESIDUAL } epi_t;

typedef struct {
  int64_t M, N, K; /* K: 0 for K_DEFAULT */
  ty_dtype_t dtype;
  bool trans_b, bias;
  epi_t epi;
} case_t;

static ty_registry_t *g_registry;

static int setup(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  return ty_registry_create(&options, &g_registry) ? -1 : 0;
}

static int teardown(void **state) {
  (void)state;
  ty_registry_destroy(g_registry);
  return 0;
}

/* Inputs in f32 (rounded to bf16 first for a bf16 case, so both backends
 * see the same values). */
static float g_x[MAX_M * MAX_K], g_w[MAX_K * MAX_N], g_b[MAX_N], g_r[MAX_M * MAX_N];

static float round_bf16(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&v, &u, 4);
  return v;
}

static void fill(float *p, size_t n, uint32_t *seed, bool bf16) {
  for (size_t i = 0; i < n; ++i) {
    *seed = *seed * 1664525u + 1013904223u;
    const float v = (float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f;
    p[i] = bf16 ? round_bf16(v) : v;
  }
}

/* x [M, K] @ w ([K, N], or [N, K] with trans_b) (+ bias) -> y; then
 * gelu(y) or r + y with the epilogue; the graph computes in `dtype` and
 * casts its output to f32 ("out"). */
static int64_t k_of(const case_t *c) { return c->K ? c->K : K_DEFAULT; }

static ty_graph_t *graph_of(const case_t *c) {
  const int64_t K = k_of(c);
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t xd[2] = {c->M, K}, wd[2] = {c->trans_b ? c->N : K, c->trans_b ? K : c->N};
  const int64_t bd[1] = {c->N}, rd[2] = {c->M, c->N};
  ty_value_id_t in[3], y, out;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", c->dtype, 2, xd, &in[0]));
  TY_EXPECT_OK(ty_graph_add_input(g, "w", c->dtype, 2, wd, &in[1]));
  if (c->bias) TY_EXPECT_OK(ty_graph_add_input(g, "b", c->dtype, 1, bd, &in[2]));
  ty_attrs_t a = TY_ATTRS_EMPTY;
  if (c->trans_b) TY_EXPECT_OK(ty_attrs_set_int(&a, "trans_b", 1));
  TY_EXPECT_OK(ty_graph_add_node(g, "matmul", in, c->bias ? 3 : 2, &a, &y, 1));
  if (c->epi == EPI_GELU) {
    TY_EXPECT_OK(ty_graph_add_node(g, "gelu", &y, 1, NULL, &y, 1));
  } else if (c->epi == EPI_RESIDUAL) {
    ty_value_id_t ra[2];
    TY_EXPECT_OK(ty_graph_add_input(g, "r", c->dtype, 2, rd, &ra[0]));
    ra[1] = y;
    TY_EXPECT_OK(ty_graph_add_node(g, "add", ra, 2, NULL, &y, 1));
  }
  if (c->dtype != TY_DTYPE_F32) {
    ty_attrs_t ca = TY_ATTRS_EMPTY;
    TY_EXPECT_OK(ty_attrs_set_string(&ca, "dtype", "f32"));
    TY_EXPECT_OK(ty_graph_add_node(g, "cast", &y, 1, &ca, &out, 1));
  } else {
    out = y;
  }
  TY_EXPECT_OK(ty_graph_set_output(g, out, "out"));
  return g;
}

/* Binds one input from its f32 values (converted to the case's dtype). */
static void bind(ty_session_t *s, const char *name, const case_t *c, uint32_t rank,
                 const int64_t *dims, const float *v) {
  size_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= (size_t)dims[i];
  if (c->dtype == TY_DTYPE_F32) {
    TY_EXPECT_OK(ty_session_bind(s, name, TY_DTYPE_F32, rank, dims, v, n * sizeof(float)));
    return;
  }
  uint16_t *h = malloc(n * sizeof(uint16_t));
  assert_non_null(h);
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    h[i] = (uint16_t)(u >> 16); /* already bf16 values */
  }
  TY_EXPECT_OK(ty_session_bind(s, name, c->dtype, rank, dims, h, n * sizeof(uint16_t)));
  free(h);
}

/* Runs the case on `uri`; out [M, N] f32; the executor's report (cuda)
 * into report. */
static void run(const char *uri, const case_t *c, bool deterministic, float *out, char *report,
                size_t cap) {
  ty_device_t *dev = NULL;
  TY_EXPECT_OK(ty_device_open(g_registry, uri, &dev));
  ty_graph_t *g = graph_of(c);
  ty_session_options_t opts = {.deterministic = deterministic};
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(dev, g, &opts, &s));
  const int64_t K = k_of(c);
  const int64_t xd[2] = {c->M, K}, wd[2] = {c->trans_b ? c->N : K, c->trans_b ? K : c->N};
  const int64_t bd[1] = {c->N}, rd[2] = {c->M, c->N};
  bind(s, "x", c, 2, xd, g_x);
  bind(s, "w", c, 2, wd, g_w);
  if (c->bias) bind(s, "b", c, 1, bd, g_b);
  if (c->epi == EPI_RESIDUAL) bind(s, "r", c, 2, rd, g_r);
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "out", out, (size_t)(c->M * c->N) * sizeof(float)));
  /* A second run gives the same bits: gemv_kn's split-K counters are back
   * at 0 and its runs are added in one order. */
  float again[MAX_M * MAX_N];
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "out", again, (size_t)(c->M * c->N) * sizeof(float)));
  assert_memory_equal(out, again, (size_t)(c->M * c->N) * sizeof(float));
  if (report) {
    char *text = NULL;
    TY_EXPECT_OK(ty_session_report(s, &text));
    snprintf(report, cap, "%s", text ? text : "");
    free(text);
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
}

static unsigned gemm_commands(const char *report) {
  const char *at = strstr(report, "kernels, ");
  assert_non_null(at);
  unsigned n = 0;
  assert_int_equal(sscanf(at, "kernels, %u cuBLASLt matmuls", &n), 1);
  return n;
}

/* The case on cuda:0 against cpu; `cublas`: whether cuBLASLt must run it. */
static void check(const case_t *c, bool deterministic, bool cublas) {
  static uint32_t seed = 29;
  const bool bf16 = c->dtype == TY_DTYPE_BF16;
  fill(g_x, (size_t)(c->M * k_of(c)), &seed, bf16);
  fill(g_w, (size_t)(k_of(c) * c->N), &seed, bf16);
  fill(g_b, (size_t)c->N, &seed, bf16);
  fill(g_r, (size_t)(c->M * c->N), &seed, bf16);
  float want[MAX_M * MAX_N], got[MAX_M * MAX_N];
  char report[2048];
  run("cpu", c, false, want, NULL, 0);
  run("cuda:0", c, deterministic, got, report, sizeof(report));
  const unsigned gemms = gemm_commands(report);
  printf("M=%lld N=%lld K=%lld %s%s%s%s%s: %u cuBLASLt command(s)\n", (long long)c->M,
         (long long)c->N, (long long)k_of(c), bf16 ? "bf16" : "f32", c->trans_b ? " trans_b" : "",
         c->bias ? " bias" : "", c->epi == EPI_GELU ? " gelu" : c->epi == EPI_RESIDUAL ? " +r" : "",
         deterministic ? " deterministic" : "", gemms);
  assert_int_equal(gemms, cublas ? 1u : 0u);
  if (c->epi != EPI_NONE && !deterministic) { /* the gelu or the add rides on the product */
    const char *at = strstr(report, "fused: ");
    unsigned fused = 0;
    assert_non_null(at);
    assert_int_equal(sscanf(at, "fused: %u nodes", &fused), 1);
    assert_true(fused >= 1);
  }
  /* f32: the sums' order differs from the cpu's; bf16: one output rounding
   * (two with the residual or gelu's bf16 input). */
  const double tol = bf16 ? 1.6e-2 : 2e-5;
  for (int64_t i = 0; i < c->M * c->N; ++i) {
    const double gap = fabs((double)got[i] - (double)want[i]);
    if (gap > tol * fmax(1.0, fabs((double)want[i]))) {
      fail_msg("element %lld: cuda %.7g, cpu %.7g", (long long)i, got[i], want[i]);
    }
  }
}

static void test_rows_and_layouts(void **state) {
  (void)state;
  setenv("TRAINYARD_CUDA_GEMV", "all", 1);
  const ty_dtype_t dts[2] = {TY_DTYPE_F32, TY_DTYPE_BF16};
  for (int d = 0; d < 2; ++d) {
    for (int tb = 0; tb < 2; ++tb) {
      for (int64_t M = 1; M <= MAX_M; ++M) {
        const case_t c = {.M = M, .N = 40, .dtype = dts[d], .trans_b = tb != 0, .bias = M % 2};
        check(&c, false, M > TY_GEMV_MAX_M);
      }
    }
  }
  /* with =nk a [K, N] weight stays on cuBLASLt, and by default any single
   * matmul does */
  setenv("TRAINYARD_CUDA_GEMV", "nk", 1);
  const case_t kn = {.M = 1, .N = 40, .dtype = TY_DTYPE_BF16};
  check(&kn, false, true);
  unsetenv("TRAINYARD_CUDA_GEMV");
  check(&kn, false, true);
}

static void test_epilogues(void **state) {
  (void)state;
  setenv("TRAINYARD_CUDA_GEMV", "all", 1);
  for (int tb = 0; tb < 2; ++tb) {
    const case_t gelu = {.M = 2, .N = 48, .dtype = TY_DTYPE_BF16, .trans_b = tb != 0,
                         .bias = true, .epi = EPI_GELU};
    check(&gelu, false, false);
    const case_t res = {.M = 3, .N = 40, .dtype = TY_DTYPE_BF16, .trans_b = tb != 0,
                        .bias = true, .epi = EPI_RESIDUAL};
    check(&res, false, false);
    const case_t res32 = {.M = 1, .N = 40, .dtype = TY_DTYPE_F32, .trans_b = tb != 0,
                          .epi = EPI_RESIDUAL};
    check(&res32, false, false);
  }
  unsetenv("TRAINYARD_CUDA_GEMV");
}

/* K = 768: gemv_kn cuts K into runs (4 on the emulator's 2 SMs: two
 * blocks an SM over one column block), whose partials the last block adds
 * in run order, and gemv_nk splits a narrow product's columns over warps. */
static void test_split_k(void **state) {
  (void)state;
  setenv("TRAINYARD_CUDA_GEMV", "all", 1);
  const ty_dtype_t dts[2] = {TY_DTYPE_F32, TY_DTYPE_BF16};
  for (int d = 0; d < 2; ++d) {
    for (int64_t M = 1; M <= TY_GEMV_MAX_M; ++M) {
      const case_t c = {.M = M, .N = 40, .K = MAX_K, .dtype = dts[d], .bias = M % 2,
                        .epi = M == 2 && d == 1 ? EPI_GELU /* fused in 16 bits only */
                               : M == 3         ? EPI_RESIDUAL
                                                : EPI_NONE};
      check(&c, false, false);
      /* [N, K] of 8 or 16 columns: gemv_nk takes 2 or 4 warps a column
       * (parts of K added in order) to give the 2 SMs 4 blocks */
      const case_t t = {.M = M, .N = M % 2 ? 8 : 16, .K = MAX_K, .dtype = dts[d],
                        .trans_b = true, .bias = M % 2, .epi = M == 3 ? EPI_RESIDUAL : EPI_NONE};
      check(&t, false, false);
    }
  }
  unsetenv("TRAINYARD_CUDA_GEMV");
}

/* GEMV_GROUP (cuda_fuse.h): q, k and v of one input (N 40, 8, 8) in one
 * gemv_group launch, and gate and up (N 48) with their swiglu, each against
 * the cpu; K 768 so the narrow members take several warps a column. */
static void group_case(ty_dtype_t dt, int64_t M, bool swiglu) {
  static uint32_t seed = 31;
  const bool bf16 = dt == TY_DTYPE_BF16;
  const int64_t K = MAX_K, Ns[3] = {swiglu ? 48 : 40, swiglu ? 48 : 8, 8};
  const int members = swiglu ? 2 : 3;
  float *x = malloc((size_t)(M * K) * sizeof(float)), *w[3], *want[3], *got[3];
  assert_non_null(x);
  fill(x, (size_t)(M * K), &seed, bf16);
  for (int i = 0; i < 3; ++i) {
    w[i] = malloc((size_t)(Ns[i] * K) * sizeof(float));
    want[i] = calloc((size_t)(M * Ns[i]), sizeof(float));
    got[i] = calloc((size_t)(M * Ns[i]), sizeof(float));
    assert_true(w[i] && want[i] && got[i]);
    fill(w[i], (size_t)(Ns[i] * K), &seed, bf16);
  }
  const char *devs[2] = {"cpu", "cuda:0"};
  for (int d = 0; d < 2; ++d) {
    ty_graph_t *g = NULL;
    TY_EXPECT_OK(ty_graph_create(&g));
    const int64_t xd[2] = {M, K};
    ty_value_id_t xv, y[3];
    TY_EXPECT_OK(ty_graph_add_input(g, "x", dt, 2, xd, &xv));
    for (int i = 0; i < members; ++i) {
      const int64_t wd[2] = {Ns[i], K};
      char name[8];
      snprintf(name, sizeof(name), "w%d", i);
      ty_value_id_t wv;
      TY_EXPECT_OK(ty_graph_add_input(g, name, dt, 2, wd, &wv));
      ty_attrs_t a = TY_ATTRS_EMPTY;
      TY_EXPECT_OK(ty_attrs_set_int(&a, "trans_b", 1));
      TY_EXPECT_OK(ty_graph_add_node(g, "matmul", (ty_value_id_t[]){xv, wv}, 2, &a, &y[i], 1));
    }
    const int outs = swiglu ? 1 : 3;
    if (swiglu) {
      TY_EXPECT_OK(ty_graph_add_node(g, "swiglu", (ty_value_id_t[]){y[0], y[1]}, 2, NULL, &y[0], 1));
    }
    for (int i = 0; i < outs; ++i) { /* in the compute dtype: no cast to fuse */
      char name[8];
      snprintf(name, sizeof(name), "y%d", i);
      TY_EXPECT_OK(ty_graph_set_output(g, y[i], name));
    }
    ty_device_t *dev = NULL;
    TY_EXPECT_OK(ty_device_open(g_registry, devs[d], &dev));
    ty_session_t *se = NULL;
    TY_EXPECT_OK(ty_session_create(dev, g, NULL, &se));
    const case_t c = {.M = M, .N = Ns[0], .K = K, .dtype = dt};
    bind(se, "x", &c, 2, xd, x);
    for (int i = 0; i < members; ++i) {
      const int64_t wd[2] = {Ns[i], K};
      char name[8];
      snprintf(name, sizeof(name), "w%d", i);
      bind(se, name, &c, 2, wd, w[i]);
    }
    TY_EXPECT_OK(ty_session_run(se));
    for (int i = 0; i < outs; ++i) {
      char name[8];
      snprintf(name, sizeof(name), "y%d", i);
      float *dst = d ? got[i] : want[i];
      const size_t n = (size_t)(M * Ns[i]);
      if (!bf16) {
        TY_EXPECT_OK(ty_session_read(se, name, dst, n * sizeof(float)));
        continue;
      }
      uint16_t *h = malloc(n * sizeof(uint16_t));
      assert_non_null(h);
      TY_EXPECT_OK(ty_session_read(se, name, h, n * sizeof(uint16_t)));
      for (size_t e = 0; e < n; ++e) {
        const uint32_t u = (uint32_t)h[e] << 16;
        memcpy(&dst[e], &u, 4);
      }
      free(h);
    }
    if (d == 1) {
      char *text = NULL;
      TY_EXPECT_OK(ty_session_report(se, &text));
      printf("group %s M=%lld%s: %s", bf16 ? "bf16" : "f32", (long long)M,
             swiglu ? " swiglu" : "", strstr(text, "  fused:"));
      assert_non_null(strstr(text, "1 matmul group in one launch"));
      assert_int_equal(gemm_commands(text), 0u);
      free(text);
    }
    ty_session_destroy(se);
    ty_graph_destroy(g);
    ty_device_close(dev);
  }
  const double tol = bf16 ? 1.6e-2 : 2e-5;
  for (int i = 0; i < (swiglu ? 1 : 3); ++i) {
    for (int64_t e = 0; e < M * Ns[i]; ++e) {
      const double gap = fabs((double)got[i][e] - (double)want[i][e]);
      if (gap > tol * fmax(1.0, fabs((double)want[i][e]))) {
        fail_msg("output %d element %lld: cuda %.7g, cpu %.7g", i, (long long)e, got[i][e],
                 want[i][e]);
      }
    }
  }
  free(x);
  for (int i = 0; i < 3; ++i) {
    free(w[i]);
    free(want[i]);
    free(got[i]);
  }
}

static void test_groups(void **state) {
  (void)state;
  unsetenv("TRAINYARD_CUDA_GEMV"); /* the default: groups on the kernels */
  for (int64_t M = 1; M <= TY_GEMV_MAX_M; M += 3) {
    group_case(TY_DTYPE_F32, M, false);
    group_case(TY_DTYPE_BF16, M, false);
    group_case(TY_DTYPE_F32, M, true);
    group_case(TY_DTYPE_BF16, M, true);
  }
}

static void test_stays_on_cublas(void **state) {
  (void)state;
  setenv("TRAINYARD_CUDA_GEMV", "nk", 1);
  /* deterministic=1: the pinned algorithm keeps a row's bits at any M */
  const case_t one = {.M = 1, .N = 40, .dtype = TY_DTYPE_F32, .trans_b = true};
  check(&one, true, true);
  /* bf16 [K, N] with N = 36: not whole 16-byte groups of columns */
  const case_t odd = {.M = 2, .N = 36, .dtype = TY_DTYPE_BF16};
  setenv("TRAINYARD_CUDA_GEMV", "all", 1);
  check(&odd, false, true);
  unsetenv("TRAINYARD_CUDA_GEMV");
  /* ... while [N, K] needs only K's (48): the kernel */
  setenv("TRAINYARD_CUDA_GEMV", "nk", 1);
  const case_t odd_t = {.M = 2, .N = 36, .dtype = TY_DTYPE_BF16, .trans_b = true};
  check(&odd_t, false, false);
  check(&one, false, false);
  /* a single matmul: cuBLASLt by default and with =0 */
  unsetenv("TRAINYARD_CUDA_GEMV");
  check(&one, false, true);
  setenv("TRAINYARD_CUDA_GEMV", "0", 1);
  check(&one, false, true);
  unsetenv("TRAINYARD_CUDA_GEMV");
}

/* A setting the executor does not take is refused at compile, by name,
 * not run as the default. */
static void bad_setting(const char *name, const char *value, const char *want) {
  setenv(name, value, 1);
  ty_device_t *dev = NULL;
  TY_EXPECT_OK(ty_device_open(g_registry, "cuda:0", &dev));
  const case_t c = {.M = 1, .N = 40, .dtype = TY_DTYPE_F32, .trans_b = true};
  ty_graph_t *g = graph_of(&c);
  ty_session_t *s = NULL;
  ty_status_t st = ty_session_create(dev, g, NULL, &s);
  assert_non_null(st);
  assert_int_equal(ty_status_code(st), TY_CODE_INVALID_ARGUMENT);
  if (!strstr(ty_status_message(st), want)) fail_msg("message: %s", ty_status_message(st));
  ty_status_free(st);
  ty_graph_destroy(g);
  ty_device_close(dev);
  unsetenv(name);
}

static void test_bad_settings(void **state) {
  (void)state;
  bad_setting("TRAINYARD_CUDA_GEMV", "fast",
              "TRAINYARD_CUDA_GEMV='fast' is not 'group', 'all', 'nk', '1' or '0'");
  bad_setting("TRAINYARD_CUDA_PDL", "yes", "TRAINYARD_CUDA_PDL='yes' is not 0 or 1");
  bad_setting("TRAINYARD_CUDA_WEIGHT_COPIES", "on",
              "TRAINYARD_CUDA_WEIGHT_COPIES='on' is not 0 or 1");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rows_and_layouts),
      cmocka_unit_test(test_epilogues),
      cmocka_unit_test(test_split_k), cmocka_unit_test(test_groups),
      cmocka_unit_test(test_stays_on_cublas), cmocka_unit_test(test_bad_settings),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
