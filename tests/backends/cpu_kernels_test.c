/* Differential test of the cpu plugin's fast kernels (backends/cpu/
 * cpu_kernels_*.c). Every op of op set v1 is built as one-node graphs with
 * random inputs (seed printed; TY_TEST_SEED=<n> replays) and run on
 *   - cpu?kernels=fast-only&threads=3  (fails to compile a node without a
 *     fast kernel, so every case also checks the kernel table's coverage;
 *     3 threads on 2 cores also exercises uneven work splits),
 *   - the same plugin built without oneDNN (blocked OpenMP GEMM),
 *   - cpu?kernels=reference             (the f64 oracle),
 * in f32, bf16 and f16 storage, and the outputs are compared by normalised
 * mean squared error (NMSE = sum (got - want)^2 / sum want^2) with bounds
 * chosen by the output's dtype; element movers, dropout and casts must match
 * bit for bit. In-place optimizer and KV-cache updates run as state updates
 * over several steps. Out-of-bounds writes are left to the ASan build: every
 * output is its own allocation there. The worst error per op and dtype is
 * printed at the end. */
#include <inttypes.h>
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
#include "ops/op.h"

#include "cpu_kernels_cases.h"

/* NMSE bounds by output dtype. f32: the fast kernels compute in f32 against
 * an f64 oracle. bf16/f16: both sides round (nearly) the same value, so at
 * most a few elements differ by one unit in the last place. */
#define BOUND_F32 1e-10
#define BOUND_BF16 1e-5
#define BOUND_F16 1e-7
/* max |got - want| / max |want|, the "relative error" the brief states. */
#define MAXREL_F32 1e-5
#define MAXREL_BF16 (2.0 / 256.0)
#define MAXREL_F16 (2.0 / 2048.0)

/* ---- running and comparing ---------------------------------------------- */

static ty_registry_t *open_registry(const char *dir) {
  const char *paths[] = {dir};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  return r;
}

static ty_test_rng_t g_rng;

static double uniform(double lo, double hi) {
  return lo + (hi - lo) * ((double)(ty_test_rng_next(&g_rng) >> 11) * 0x1p-53);
}

static void store_elem(void *p, ty_dtype_t d, int64_t i, double v) {
  switch (d) {
    case TY_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case TY_DTYPE_BF16: ((uint16_t *)p)[i] = ty_f64_to_bf16(v); break;
    case TY_DTYPE_F16: ((uint16_t *)p)[i] = ty_f64_to_f16(v); break;
    case TY_DTYPE_F64: ((double *)p)[i] = v; break;
    case TY_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case TY_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    default: fail_msg("unexpected dtype %d", (int)d);
  }
}

static double load_elem(const void *p, ty_dtype_t d, int64_t i) {
  switch (d) {
    case TY_DTYPE_F32: return ((const float *)p)[i];
    case TY_DTYPE_BF16: return ty_bf16_to_f64(((const uint16_t *)p)[i]);
    case TY_DTYPE_F16: return ty_f16_to_f64(((const uint16_t *)p)[i]);
    case TY_DTYPE_F64: return ((const double *)p)[i];
    case TY_DTYPE_I32: return ((const int32_t *)p)[i];
    case TY_DTYPE_I64: return (double)((const int64_t *)p)[i];
    default: return NAN;
  }
}

static int64_t count_of(uint32_t rank, const int64_t *dims) {
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

/* Random contents for input `in` of `n` elements. */
static void *make_input(const tin_t *in, ty_dtype_t dt, int64_t n) {
  void *buf = calloc((size_t)(n > 0 ? n : 1), ty_dtype_size(dt));
  assert_non_null(buf);
  if (in->kind == K_PERM) {
    const int64_t row = in->rank ? in->dims[in->rank - 1] : 1;
    for (int64_t r = 0; r + row <= n; r += row) {
      for (int64_t j = 0; j < row; ++j) store_elem(buf, dt, r + j, (double)(j - row / 2) * in->a);
      for (int64_t j = row - 1; j > 0; --j) { /* Fisher-Yates over the stored values */
        const int64_t o = (int64_t)(ty_test_rng_next(&g_rng) % (uint64_t)(j + 1));
        const double a = load_elem(buf, dt, r + j), b = load_elem(buf, dt, r + o);
        store_elem(buf, dt, r + j, b);
        store_elem(buf, dt, r + o, a);
      }
    }
    return buf;
  }
  for (int64_t i = 0; i < n; ++i) {
    double v = 0.0;
    switch (in->kind) {
      case K_FLOAT: v = uniform(in->a, in->b); break;
      case K_NONZERO: v = uniform(in->a, in->b) * (ty_test_rng_next(&g_rng) & 1 ? 1 : -1); break;
      case K_IDS: v = floor(uniform(0.0, in->a)); break;
      case K_TARGETS:
        v = ty_test_rng_next(&g_rng) % 8 == 0 ? -1.0 : floor(uniform(0.0, in->a));
        break;
      case K_SCALAR: v = in->a; break;
      case K_LIST: v = (double)in->list[i]; break;
      case K_VALUES: v = in->values[i]; break;
      case K_RNG: v = 0.0; break;
      default: break;
    }
    if (in->kind == K_RNG) {
      ((int64_t *)buf)[i] = i == 0 ? (int64_t)(ty_test_rng_next(&g_rng) >> 1)
                                   : (int64_t)(ty_test_rng_next(&g_rng) % 1000);
    } else {
      store_elem(buf, dt, i, v);
    }
  }
  return buf;
}

typedef struct {
  double nmse, maxrel;
} err_t;

/* Worst errors per (op, output dtype) over every case and fast device. */
#define MAX_OPS 96
typedef struct {
  const char *op;
  err_t worst[TY_DTYPE_COUNT_];
  bool seen[TY_DTYPE_COUNT_];
  bool exact;
} op_stats_t;
static op_stats_t g_stats[MAX_OPS];
static int g_stat_count;

static op_stats_t *stats_for(const char *op) {
  for (int i = 0; i < g_stat_count; ++i) {
    if (strcmp(g_stats[i].op, op) == 0) return &g_stats[i];
  }
  assert_true(g_stat_count < MAX_OPS);
  op_stats_t *s = &g_stats[g_stat_count++];
  memset(s, 0, sizeof(*s));
  s->op = op;
  s->exact = true;
  return s;
}

/* Compares got against want; fails the test (naming everything) when a
 * bound is broken. */
static void compare(const tcase_t *c, const char *device, ty_dtype_t run_dtype, const char *name,
                    ty_dtype_t dt, int64_t n, const void *got, const void *want) {
  const size_t bytes = (size_t)n * ty_dtype_size(dt);
  op_stats_t *st = stats_for(c->op);
  if (c->exact || dt == TY_DTYPE_I32 || dt == TY_DTYPE_I64) {
    if (memcmp(got, want, bytes) != 0) {
      int64_t i = 0;
      while (i < n && load_elem(got, dt, i) == load_elem(want, dt, i)) ++i;
      fail_msg("%s [%s] %s on %s: output %s differs from the reference at element %lld "
               "(%.9g vs %.9g); it must match bit for bit",
               c->op, c->label, ty_dtype_name(run_dtype), device, name, (long long)i,
               i < n ? load_elem(got, dt, i) : 0.0, i < n ? load_elem(want, dt, i) : 0.0);
    }
    st->seen[dt] = true;
    return;
  }
  double num = 0.0, den = 0.0, maxdiff = 0.0, maxref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double g = load_elem(got, dt, i), w = load_elem(want, dt, i);
    if (isnan(g) != isnan(w)) {
      fail_msg("%s [%s] %s on %s: output %s element %lld is %g, the reference has %g",
               c->op, c->label, ty_dtype_name(run_dtype), device, name, (long long)i, g, w);
    }
    if (isnan(w)) continue;
    num += (g - w) * (g - w);
    den += w * w;
    maxdiff = fabs(g - w) > maxdiff ? fabs(g - w) : maxdiff;
    maxref = fabs(w) > maxref ? fabs(w) : maxref;
  }
  err_t e = {den > 0 ? num / den : num, maxref > 0 ? maxdiff / maxref : maxdiff};
  double bound = dt == TY_DTYPE_F32 ? BOUND_F32 : dt == TY_DTYPE_BF16 ? BOUND_BF16 : BOUND_F16;
  double maxrel = dt == TY_DTYPE_F32 ? MAXREL_F32 : dt == TY_DTYPE_BF16 ? MAXREL_BF16 : MAXREL_F16;
  if (!(e.nmse <= bound) || !(e.maxrel <= maxrel)) {
    fail_msg("%s [%s] %s on %s: output %s (%s) has NMSE %.3g (bound %.3g), max relative "
             "error %.3g (bound %.3g)",
             c->op, c->label, ty_dtype_name(run_dtype), device, name, ty_dtype_name(dt), e.nmse,
             bound, e.maxrel, maxrel);
  }
  st->exact = false;
  if (!st->seen[dt] || e.nmse > st->worst[dt].nmse) st->worst[dt].nmse = e.nmse;
  if (!st->seen[dt] || e.maxrel > st->worst[dt].maxrel) st->worst[dt].maxrel = e.maxrel;
  st->seen[dt] = true;
}

typedef struct {
  ty_device_t *dev;
  const char *label;
} tdev_t;

/* Names the run before a failing status is reported. */
static void describe(const tcase_t *c, ty_dtype_t fdt, const char *device) {
  fprintf(stderr, "%s [%s] %s on %s:\n", c->op, c->label, ty_dtype_name(fdt), device);
}

/* Runs case `c` with float dtype `fdt` on every device; devs[0] is the
 * reference. */
static void run_case(const tcase_t *c, ty_dtype_t fdt, const tdev_t *devs, int ndev) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t ids[MAX_IN], outs[MAX_OUT];
  void *data[MAX_IN] = {NULL};
  ty_dtype_t dts[MAX_IN];
  char names[MAX_IN][8];
  for (uint32_t i = 0; i < c->n_in; ++i) {
    const tin_t *in = &c->in[i];
    snprintf(names[i], sizeof(names[i]), "in%u", i);
    if (in->kind == K_ABSENT) {
      ids[i] = TY_VALUE_NONE;
      continue;
    }
    dts[i] = in->dtype == TY_DTYPE_INVALID ? fdt : in->dtype;
    TY_EXPECT_OK((in->state ? ty_graph_add_state : ty_graph_add_input)(
        g, names[i], dts[i], in->rank, in->dims, &ids[i]));
    data[i] = make_input(in, dts[i], count_of(in->rank, in->dims));
  }
  ty_status_t st = ty_graph_add_node(g, c->op, ids, c->n_in, &c->attrs, outs, c->n_out);
  if (st) describe(c, fdt, "(building the graph)");
  TY_EXPECT_OK(st);
  char out_names[MAX_OUT][8];
  for (uint32_t o = 0; o < c->n_out; ++o) {
    if (c->update[o] >= 0) {
      TY_EXPECT_OK(ty_graph_set_state_update(g, ids[c->update[o]], outs[o]));
      snprintf(out_names[o], sizeof(out_names[o]), "in%d", c->update[o]);
    } else {
      snprintf(out_names[o], sizeof(out_names[o]), "out%u", o);
      TY_EXPECT_OK(ty_graph_set_output(g, outs[o], out_names[o]));
    }
  }
  void *results[4][MAX_OUT] = {{NULL}};
  ty_tensor_desc_t descs[MAX_OUT];
  for (int d = 0; d < ndev; ++d) {
    ty_session_t *s;
    st = ty_session_create(devs[d].dev, g, NULL, &s);
    if (st) describe(c, fdt, devs[d].label);
    TY_EXPECT_OK(st);
    for (uint32_t i = 0; i < c->n_in; ++i) {
      if (!data[i]) continue;
      const tin_t *in = &c->in[i];
      int64_t n = count_of(in->rank, in->dims);
      TY_EXPECT_OK(ty_session_bind(s, names[i], dts[i], in->rank, in->dims, data[i],
                                   (size_t)n * ty_dtype_size(dts[i])));
    }
    for (int r = 0; r < c->runs; ++r) {
      st = ty_session_run(s);
      if (st) describe(c, fdt, devs[d].label);
      TY_EXPECT_OK(st);
    }
    for (uint32_t o = 0; o < c->n_out; ++o) {
      TY_EXPECT_OK(ty_session_value_desc(s, out_names[o], &descs[o]));
      int64_t n = count_of(descs[o].rank, descs[o].dims);
      size_t bytes = (size_t)n * ty_dtype_size(descs[o].dtype);
      results[d][o] = malloc(bytes ? bytes : 1);
      assert_non_null(results[d][o]);
      TY_EXPECT_OK(ty_session_read(s, out_names[o], results[d][o], bytes));
    }
    ty_session_destroy(s);
  }
  for (int d = 1; d < ndev; ++d) {
    for (uint32_t o = 0; o < c->n_out; ++o) {
      compare(c, devs[d].label, fdt, out_names[o], descs[o].dtype,
              count_of(descs[o].rank, descs[o].dims), results[d][o], results[0][o]);
    }
  }
  for (int d = 0; d < ndev; ++d) {
    for (uint32_t o = 0; o < c->n_out; ++o) free(results[d][o]);
  }
  for (uint32_t i = 0; i < c->n_in; ++i) free(data[i]);
  ty_graph_destroy(g);
}

static void print_stats(void) {
  printf("\nworst error per op (fast kernels vs f64 reference; NMSE / max relative):\n");
  printf("  %-24s %-22s %-22s %-22s\n", "op", "f32", "bf16", "f16");
  static const ty_dtype_t cols[3] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16};
  for (int i = 0; i < g_stat_count; ++i) {
    const op_stats_t *s = &g_stats[i];
    printf("  %-24s", s->op);
    for (int k = 0; k < 3; ++k) {
      char cell[32];
      if (!s->seen[cols[k]]) snprintf(cell, sizeof(cell), "-");
      else if (s->exact) snprintf(cell, sizeof(cell), "exact");
      else snprintf(cell, sizeof(cell), "%.1e / %.1e", s->worst[cols[k]].nmse,
                    s->worst[cols[k]].maxrel);
      printf(" %-22s", cell);
    }
    printf("\n");
  }
  fflush(stdout);
}

/* ---- tests ----------------------------------------------------------------- */

static const tcase_t *g_cases;
static int g_case_count;

static void test_every_op_has_cases(void **state) {
  (void)state;
  g_cases = cpu_test_cases(&g_case_count);
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    const char *op = ty_op_at(i)->name;
    bool found = false;
    for (int k = 0; k < g_case_count && !found; ++k) found = strcmp(g_cases[k].op, op) == 0;
    if (!found) fail_msg("op %s has no case in cpu_kernels_test.c", op);
  }
}

/* TY_TEST_KERNELS_SKIP: ops (comma-separated) another device's run leaves
 * out, e.g. those an emulator does not run. */
static bool skipped(const char *op) {
  const char *list = getenv("TY_TEST_KERNELS_SKIP");
  const size_t n = strlen(op);
  for (const char *p = list; p && *p;) {
    const size_t len = strcspn(p, ",");
    if (len == n && strncmp(p, op, n) == 0) return true;
    p += len + (p[len] == ',');
  }
  return false;
}

static void test_fast_kernels_match_reference(void **state) {
  (void)state;
  g_cases = cpu_test_cases(&g_case_count);
  ty_test_rng_init(&g_rng, ty_test_seed());
  ty_registry_t *r = open_registry(TY_TEST_PLUGIN_DIR);
  ty_registry_t *rb = open_registry(TY_TEST_CPU_BLOCKED_DIR);
  tdev_t devs[3] = {{NULL, "cpu?kernels=reference"},
                    {NULL, "cpu?kernels=fast-only&threads=3"},
                    {NULL, "cpu?kernels=fast-only (no oneDNN build)"}};
  int ndev = 3;
  TY_EXPECT_OK(ty_device_open(r, "cpu?kernels=reference", &devs[0].dev));
  const char *other = getenv("TY_TEST_KERNELS_DEVICE");
  if (other && other[0]) {
    devs[1].label = other;
    TY_EXPECT_OK(ty_device_open(r, other, &devs[1].dev));
    ndev = 2;
  } else {
    TY_EXPECT_OK(ty_device_open(r, "cpu?kernels=fast-only&threads=3", &devs[1].dev));
    TY_EXPECT_OK(ty_device_open(rb, "cpu?kernels=fast-only", &devs[2].dev));
  }
  static const ty_dtype_t sweep[3] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16};
  int runs = 0;
  for (int k = 0; k < g_case_count; ++k) {
    const tcase_t *c = &g_cases[k];
    if (skipped(c->op) || (c->refused_on && other &&
                            strncmp(other, c->refused_on, strlen(c->refused_on)) == 0)) {
      continue;
    }
    for (int d = 0; d < (c->fixed ? 1 : 3); ++d) {
      run_case(c, c->fixed ? TY_DTYPE_F32 : sweep[d], devs, ndev);
      ++runs;
    }
  }
  printf("%d cases, %d runs on %d devices\n", g_case_count, runs, ndev);
  print_stats();
  for (int i = 0; i < ndev; ++i) ty_device_close(devs[i].dev);
  ty_registry_destroy(rb);
  ty_registry_destroy(r);
}

/* fast-only must refuse what has no fast kernel (f64 math), or the coverage
 * check above could not fail; plain `cpu` runs it on the reference. */
static void test_fast_only_refuses_fallback(void **state) {
  (void)state;
  ty_registry_t *r = open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *strict, *fast;
  TY_EXPECT_OK(ty_device_open(r, "cpu?kernels=fast-only", &strict));
  TY_EXPECT_OK(ty_device_open(r, "cpu", &fast));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F64, 1, (int64_t[]){4}, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  ty_session_t *s;
  TY_EXPECT_STATUS(ty_session_create(strict, g, NULL, &s), TY_CODE_UNIMPLEMENTED,
                   "no fast kernel for node 0 (gelu) with operands f64 -> f64");
  TY_EXPECT_OK(ty_session_create(fast, g, NULL, &s));
  double in[4] = {-1.0, 0.5, 1.0, 2.0}, out[4];
  TY_EXPECT_OK(ty_session_bind(s, "x", TY_DTYPE_F64, 1, (int64_t[]){4}, in, sizeof(in)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "y", out, sizeof(out)));
  assert_true(fabs(out[3] - 1.9545976940871754) < 1e-12);
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(strict);
  ty_device_close(fast);
  ty_registry_destroy(r);
}

/* Runs a one-node graph whose data is bad and expects INVALID_ARGUMENT
 * naming the node, on the fast kernels and on the reference. */
static void expect_data_error(ty_registry_t *r, const char *op, uint32_t n_out,
                              const ty_attrs_t *attrs, uint32_t n_in, const ty_dtype_t *dts,
                              const uint32_t *ranks, const int64_t (*dims)[4],
                              void *const *data, const char *want) {
  static const char *uris[2] = {"cpu?kernels=fast-only", "cpu?kernels=reference"};
  for (int d = 0; d < 2; ++d) {
    ty_device_t *dev;
    TY_EXPECT_OK(ty_device_open(r, uris[d], &dev));
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    ty_value_id_t ids[6], outs[4];
    char names[6][8];
    for (uint32_t i = 0; i < n_in; ++i) {
      snprintf(names[i], sizeof(names[i]), "in%u", i);
      TY_EXPECT_OK(ty_graph_add_input(g, names[i], dts[i], ranks[i], dims[i], &ids[i]));
    }
    TY_EXPECT_OK(ty_graph_add_node(g, op, ids, n_in, attrs, outs, n_out));
    TY_EXPECT_OK(ty_graph_set_output(g, outs[0], "out"));
    ty_session_t *s;
    TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
    for (uint32_t i = 0; i < n_in; ++i) {
      size_t bytes = (size_t)count_of(ranks[i], dims[i]) * ty_dtype_size(dts[i]);
      TY_EXPECT_OK(ty_session_bind(s, names[i], dts[i], ranks[i], dims[i], data[i], bytes));
    }
    TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_INVALID_ARGUMENT, d == 0 ? want : NULL);
    ty_session_destroy(s);
    ty_graph_destroy(g);
    ty_device_close(dev);
  }
}

static void test_data_errors_name_the_node(void **state) {
  (void)state;
  ty_registry_t *r = open_registry(TY_TEST_PLUGIN_DIR);
  float table[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  int32_t ids[3] = {0, 3, 1}; /* 3 is outside [0, 3) */
  expect_data_error(r, "embedding", 1, NULL, 2, (ty_dtype_t[]){TY_DTYPE_F32, TY_DTYPE_I32},
                    (uint32_t[]){2, 1}, (const int64_t[][4]){{3, 4}, {3}},
                    (void *[]){table, ids}, "node 0 (embedding): ids[1] = 3");
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "vocab_size", 3));
  expect_data_error(r, "embedding_backward", 1, &attrs, 2,
                    (ty_dtype_t[]){TY_DTYPE_F32, TY_DTYPE_I32}, (uint32_t[]){2, 1},
                    (const int64_t[][4]){{3, 4}, {3}}, (void *[]){table, ids},
                    "node 0 (embedding_backward): ids[1] = 3");
  float cache[2 * 5 * 1 * 2] = {0}, fresh[2 * 2 * 1 * 2] = {1, 2, 3, 4, 5, 6, 7, 8};
  int64_t pos = 4; /* 4 + 2 > 5 */
  expect_data_error(r, "kv_cache_write", 1, NULL, 3,
                    (ty_dtype_t[]){TY_DTYPE_F32, TY_DTYPE_F32, TY_DTYPE_I64},
                    (uint32_t[]){4, 4, 0}, (const int64_t[][4]){{2, 5, 1, 2}, {2, 2, 1, 2}, {0}},
                    (void *[]){cache, fresh, &pos},
                    "node 0 (kv_cache_write): 2 new positions starting at position 4");
  /* The paged KV cache (issue 29): a slot past the pool, a block number
   * past the pool (read by row 1 at position 6: block_table[0, 1]). */
  float pool[3 * 4 * 1 * 2] = {0}, rows[2 * 1 * 2] = {1, 2, 3, 4};
  int64_t slots[2] = {-1, 12}; /* the pool has 3 * 4 = 12 slots */
  expect_data_error(r, "paged_kv_write", 1, NULL, 3,
                    (ty_dtype_t[]){TY_DTYPE_F32, TY_DTYPE_F32, TY_DTYPE_I64},
                    (uint32_t[]){4, 3, 1}, (const int64_t[][4]){{3, 4, 1, 2}, {2, 1, 2}, {2}},
                    (void *[]){pool, rows, slots},
                    "node 0 (paged_kv_write): row 1 writes slot 12 outside the pool's 12 slots");
  int64_t block_table[2 * 2] = {2, 3, 0, -1}, row_seq[2] = {1, 0}, row_pos[2] = {1, 6};
  const ty_dtype_t att_dts[6] = {TY_DTYPE_F32, TY_DTYPE_F32, TY_DTYPE_F32,
                                 TY_DTYPE_I64, TY_DTYPE_I64, TY_DTYPE_I64};
  const uint32_t att_ranks[6] = {3, 4, 4, 2, 1, 1};
  const int64_t att_dims[6][4] = {{2, 1, 2}, {3, 4, 1, 2}, {3, 4, 1, 2}, {2, 2}, {2}, {2}};
  expect_data_error(r, "paged_attention", 1, NULL, 6, att_dts, att_ranks, att_dims,
                    (void *[]){rows, pool, pool, block_table, row_seq, row_pos},
                    "node 0 (paged_attention): row 1 reads block 3 outside the pool's [0, 3)");
  row_pos[1] = 8; /* MB * BS = 8 positions */
  expect_data_error(r, "paged_attention", 1, NULL, 6, att_dts, att_ranks, att_dims,
                    (void *[]){rows, pool, pool, block_table, row_seq, row_pos},
                    "node 0 (paged_attention): row 1 has row_pos 8 outside [0, 8)");
  row_pos[1] = 2;
  row_seq[0] = 2;
  expect_data_error(r, "paged_attention", 1, NULL, 6, att_dts, att_ranks, att_dims,
                    (void *[]){rows, pool, pool, block_table, row_seq, row_pos},
                    "node 0 (paged_attention): row 0 has row_seq 2 outside [-1, 2)");
  /* sample (issue 29): a negative temperature in row 1, then a history id
   * past the vocabulary in row 0 (both rows' params valid). */
  float logits[2 * 5] = {1, 2, 3, 4, 5, 5, 4, 3, 2, 1};
  float params[2 * 7] = {0, 0, 1, 0, 1, 0, 0, -1, 0, 1, 0, 1, 0, 0};
  int64_t seeds[2 * 2] = {1, 0, 2, 0}, history[2 * 3] = {-1, 5, 0, 1, 1, -1};
  const ty_dtype_t smp_dts[4] = {TY_DTYPE_F32, TY_DTYPE_F32, TY_DTYPE_I64, TY_DTYPE_I64};
  const uint32_t smp_ranks[4] = {2, 2, 2, 2};
  const int64_t smp_dims[4][4] = {{2, 5}, {2, 7}, {2, 2}, {2, 3}};
  expect_data_error(r, "sample", 2, NULL, 3, smp_dts, smp_ranks, smp_dims,
                    (void *[]){logits, params, seeds},
                    "node 0 (sample): row 1 has temperature = -1: expected a finite value >= 0 "
                    "(params column 0)");
  params[7] = 0.5f;
  expect_data_error(r, "sample", 2, NULL, 4, smp_dts, smp_ranks, smp_dims,
                    (void *[]){logits, params, seeds, history},
                    "node 0 (sample): row 0 has history id 5 at index 1, outside [-1, 5)");
  int64_t targets[3] = {1, 4, -1}; /* 4 is outside [0, 4) */
  expect_data_error(r, "cross_entropy", 1, NULL, 2, (ty_dtype_t[]){TY_DTYPE_F32, TY_DTYPE_I64},
                    (uint32_t[]){2, 1}, (const int64_t[][4]){{3, 4}, {3}},
                    (void *[]){table, targets}, "node 0 (cross_entropy): targets[1] = 4");
  ty_registry_destroy(r);
}

/* ---- batch invariance of paged_attention (issue 29) ---- */

/* A paged_attention shape: the pool, the block table and the step's rows
 * (seq/pos: n values). */
typedef struct {
  const char *name;
  int64_t nb, bs, hkv, hq, d, s, mb, n;
  const int64_t *table, *seq, *pos;
} pa_shape_t;

/* Runs paged_attention over `n` rows (q: n rows, seq/pos: n values) on
 * `dev` in `dt` storage and reads out (n rows) back. */
static void run_paged(ty_device_t *dev, const pa_shape_t *p, ty_dtype_t dt, int64_t n,
                      const void *q, const void *k, const void *v, const int64_t *seq,
                      const int64_t *pos, void *out) {
  const int64_t q_d[3] = {n, p->hq, p->d}, pool_d[4] = {p->nb, p->bs, p->hkv, p->d};
  const int64_t tab_d[2] = {p->s, p->mb}, n_d[1] = {n};
  const size_t es = ty_dtype_size(dt), pool = (size_t)(p->nb * p->bs * p->hkv * p->d);
  const size_t row = (size_t)(p->hq * p->d);
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t in[6], y;
  TY_EXPECT_OK(ty_graph_add_input(g, "q", dt, 3, q_d, &in[0]));
  TY_EXPECT_OK(ty_graph_add_input(g, "k", dt, 4, pool_d, &in[1]));
  TY_EXPECT_OK(ty_graph_add_input(g, "v", dt, 4, pool_d, &in[2]));
  TY_EXPECT_OK(ty_graph_add_input(g, "table", TY_DTYPE_I64, 2, tab_d, &in[3]));
  TY_EXPECT_OK(ty_graph_add_input(g, "seq", TY_DTYPE_I64, 1, n_d, &in[4]));
  TY_EXPECT_OK(ty_graph_add_input(g, "pos", TY_DTYPE_I64, 1, n_d, &in[5]));
  TY_EXPECT_OK(ty_graph_add_node1(g, "paged_attention", in, 6, NULL, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "out"));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  TY_EXPECT_OK(ty_session_bind(s, "q", dt, 3, q_d, q, (size_t)n * row * es));
  TY_EXPECT_OK(ty_session_bind(s, "k", dt, 4, pool_d, k, pool * es));
  TY_EXPECT_OK(ty_session_bind(s, "v", dt, 4, pool_d, v, pool * es));
  TY_EXPECT_OK(ty_session_bind(s, "table", TY_DTYPE_I64, 2, tab_d, p->table,
                               (size_t)(p->s * p->mb) * sizeof(int64_t)));
  TY_EXPECT_OK(ty_session_bind(s, "seq", TY_DTYPE_I64, 1, n_d, seq, (size_t)n * sizeof(int64_t)));
  TY_EXPECT_OK(ty_session_bind(s, "pos", TY_DTYPE_I64, 1, n_d, pos, (size_t)n * sizeof(int64_t)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "out", out, (size_t)n * row * es));
  ty_session_destroy(s);
  ty_graph_destroy(g);
}

/* One shape, one dtype: every row alone, in the step, and in the step
 * reversed. */
static void check_paged_invariance(ty_device_t *dev, const char *uri, const pa_shape_t *p,
                                   ty_dtype_t dt) {
  const size_t es = ty_dtype_size(dt), row = (size_t)(p->hq * p->d) * es;
  const int64_t pool = p->nb * p->bs * p->hkv * p->d, n = p->n;
  unsigned char *q = malloc((size_t)n * row), *k = malloc((size_t)pool * es);
  unsigned char *v = malloc((size_t)pool * es), *all = malloc((size_t)n * row);
  unsigned char *rev_q = malloc((size_t)n * row), *rev = malloc((size_t)n * row);
  unsigned char *one = malloc(row);
  int64_t *rev_seq = malloc((size_t)n * sizeof(int64_t));
  int64_t *rev_pos = malloc((size_t)n * sizeof(int64_t));
  assert_true(q && k && v && all && rev_q && rev && one && rev_seq && rev_pos);
  for (int64_t i = 0; i < n * p->hq * p->d; ++i) store_elem(q, dt, i, uniform(-1.0, 1.0));
  for (int64_t i = 0; i < pool; ++i) store_elem(k, dt, i, uniform(-1.0, 1.0));
  for (int64_t i = 0; i < pool; ++i) store_elem(v, dt, i, uniform(-1.0, 1.0));
  run_paged(dev, p, dt, n, q, k, v, p->seq, p->pos, all);
  for (int64_t i = 0; i < n; ++i) {
    rev_seq[i] = p->seq[n - 1 - i];
    rev_pos[i] = p->pos[n - 1 - i];
    memcpy(rev_q + (size_t)i * row, q + (size_t)(n - 1 - i) * row, row);
  }
  run_paged(dev, p, dt, n, rev_q, k, v, rev_seq, rev_pos, rev);
  for (int64_t i = 0; i < n; ++i) {
    run_paged(dev, p, dt, 1, q + (size_t)i * row, k, v, &p->seq[i], &p->pos[i], one);
    const unsigned char *in_step = all + (size_t)i * row;
    if (memcmp(one, in_step, row) != 0) {
      fail_msg("%s %s %s: row %lld (seq %lld, pos %lld) alone differs from the same row in "
               "the step", uri, p->name, ty_dtype_name(dt), (long long)i,
               (long long)p->seq[i], (long long)p->pos[i]);
    }
    if (memcmp(rev + (size_t)(n - 1 - i) * row, in_step, row) != 0) {
      fail_msg("%s %s %s: row %lld differs when the step's rows are reversed", uri, p->name,
               ty_dtype_name(dt), (long long)i);
    }
  }
  free(q), free(k), free(v), free(all), free(rev_q), free(rev), free(one);
  free(rev_seq), free(rev_pos);
}

/* docs/ops.md: a row's paged_attention result depends only on its own q,
 * sequence and position, so a device gives it the same bits whatever step
 * it is packed into: alone (N = 1), in the full step, or with the step's
 * rows in reverse order. Two shapes: small heads (BS 5, GQA 4:2, D 8) and
 * GPT-2's (BS 16, 12 heads of 64, keys across several blocks), where the
 * cpu plugin's f32 path splits a row's heads differently for N = 1 and
 * N = 8. On TY_TEST_KERNELS_DEVICE when set. */
static void test_paged_attention_batch_invariant(void **state) {
  (void)state;
  if (skipped("paged_attention")) {
    print_message("skipped: TY_TEST_KERNELS_SKIP lists paged_attention for this device\n");
    return;
  }
  ty_test_rng_init(&g_rng, ty_test_seed());
  ty_registry_t *r = open_registry(TY_TEST_PLUGIN_DIR);
  const char *other = getenv("TY_TEST_KERNELS_DEVICE");
  const char *uri = other && other[0] ? other : "cpu?kernels=fast-only&threads=3";
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  static const int64_t table5[3 * 5] = {7, 2, 5, -1, -1, 0, -1, -1, -1, -1, 8, 3, 1, 6, -1};
  static const int64_t seq5[8] = {0, 2, -1, 0, 1, 0, 2, 0};
  static const int64_t pos5[8] = {9, 15, 0, 10, 4, 11, 1, 12};
  static const int64_t table16[3 * 4] = {5, 0, 9, 2, 7, 1, -1, -1, 3, 8, 4, 6};
  static const int64_t seq16[8] = {0, 1, 2, 0, -1, 2, 1, 2};
  static const int64_t pos16[8] = {50, 20, 63, 51, 0, 9, 31, 62};
  const pa_shape_t shapes[2] = {
      {"BS 5, GQA 4:2, D 8", 9, 5, 2, 4, 8, 3, 5, 8, table5, seq5, pos5},
      {"BS 16, 12 heads of 64", 10, 16, 12, 12, 64, 3, 4, 8, table16, seq16, pos16},
  };
  const ty_dtype_t dts[2] = {TY_DTYPE_F32, TY_DTYPE_BF16};
  for (int sh = 0; sh < 2; ++sh) {
    for (int t = 0; t < 2; ++t) check_paged_invariance(dev, uri, &shapes[sh], dts[t]);
  }
  ty_device_close(dev);
  ty_registry_destroy(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_op_has_cases),
      cmocka_unit_test(test_fast_only_refuses_fallback),
      cmocka_unit_test(test_data_errors_name_the_node),
      cmocka_unit_test(test_fast_kernels_match_reference),
      cmocka_unit_test(test_paged_attention_batch_invariant),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
