/* matmul_bench: f32 GEMM throughput of the cpu plugin's matmul (through a
 * session, as a graph runs it), of oneDNN's sgemm called directly, and of
 * the plugin built without oneDNN (blocked OpenMP GEMM) when that copy is
 * present, against the machine's theoretical f32 peak. The row "plugin,
 * --deterministic" is the plugin's session compiled with deterministic=1
 * (the batch-invariant blocked GEMM even where oneDNN is linked).
 *
 *   peak = cores x clock x FLOP/cycle
 *     FLOP/cycle from /proc/cpuinfo flags: avx512f -> 2 FMA pipes x 16 lanes
 *     x 2 = 64; avx2+fma -> 2 x 8 x 2 = 32; else 2 x 4 x 2 = 16 (SSE).
 *     clock: measured, all cores busy, as the rate of a chain of dependent
 *     integer adds (one cycle each); /proc/cpuinfo's "cpu MHz" and
 *     cpufreq's maximum are printed beside it. An FMA microbenchmark prints
 *     the FLOP/cycle the cores actually deliver, to check the pipe count.
 *
 * Each GEMM runs once untimed (warm-up: first-touch, oneDNN's JIT, the
 * session's compile), then until at least --min-time seconds and 5 runs
 * have passed; the table shows the median and best run. Usage:
 *   matmul_bench [--threads N] [--min-time SECONDS] [--plugin-dir DIR]
 *                [--no-onednn-dir DIR] [--device URI]... [--shape MxKxN]...
 * --shape MxKxN (repeatable) replaces the default shapes, e.g. decode's small
 * M: --shape 1x768x768 --shape 16x768x3072; a trailing t (MxKxNt) gives B
 * as [N, K] with trans_b, as a tied lm_head or a Llama linear layer holds
 * its weights: --shape 8x768x50257t.
 * --device URI adds a row for the same session on another device of the
 * plugin folder (e.g. opencl:0); its run includes the device's completion.
 * --threads N (default: every core) sets the plugin device's threads=N and
 * oneDNN's OpenMP thread count, and the peak counts N cores.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#ifdef TY_BENCH_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "bench_mixed.h"
#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/registry.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ---- the machine --------------------------------------------------------- */

typedef struct {
  char model[128];
  int cores;
  bool avx512f, avx2, fma;
  double cpuinfo_mhz;  /* "cpu MHz" of the first processor */
  double cpufreq_mhz;  /* cpuinfo_max_freq, 0 when the kernel has none */
  double clock_1_ghz;  /* measured, one core busy */
  double clock_all_ghz; /* measured, every core busy */
  int flop_per_cycle;  /* from the ISA */
  double fma_gflops;   /* measured FMA throughput, every core */
} machine_t;

static bool has_flag(const char *flags, const char *flag) {
  size_t n = strlen(flag);
  for (const char *p = flags; (p = strstr(p, flag)) != NULL; p += n) {
    if ((p == flags || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || !p[n])) {
      return true;
    }
  }
  return false;
}

static void read_cpuinfo(machine_t *m) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[4096];
  bool have_flags = false, have_mhz = false;
  snprintf(m->model, sizeof(m->model), "unknown");
  while (f && fgets(line, sizeof(line), f)) {
    char *colon = strchr(line, ':');
    if (!colon) continue;
    char *value = colon + 1;
    while (*value == ' ') ++value;
    if (!strncmp(line, "model name", 10) && !strcmp(m->model, "unknown")) {
      snprintf(m->model, sizeof(m->model), "%s", value);
      m->model[strcspn(m->model, "\n")] = '\0';
    } else if (!strncmp(line, "flags", 5) && !have_flags) {
      m->avx512f = has_flag(value, "avx512f");
      m->avx2 = has_flag(value, "avx2");
      m->fma = has_flag(value, "fma");
      have_flags = true;
    } else if (!strncmp(line, "cpu MHz", 7) && !have_mhz) {
      m->cpuinfo_mhz = strtod(value, NULL);
      have_mhz = true;
    }
  }
  if (f) fclose(f);
  f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
  if (f) {
    long khz = 0;
    if (fscanf(f, "%ld", &khz) == 1) m->cpufreq_mhz = (double)khz / 1000.0;
    fclose(f);
  }
  m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  m->flop_per_cycle = m->avx512f ? 64 : (m->avx2 && m->fma) ? 32 : 16;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ADD4 "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
/* Cycles per second of this core: the fastest of many ~1 ms windows of 32
 * dependent one-cycle adds per step. Being preempted (other processes share
 * the machine) only slows a window down, so the fastest one is the clock. */
static double clock_once(double seconds) {
  uint64_t x = 0;
  double best = 0.0, start = now_s();
  do {
    double t0 = now_s();
    for (int i = 0; i < 3000; ++i) {
      __asm__ volatile(ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 ADD4 : "+r"(x));
    }
    double rate = 3000.0 * 32.0 / (now_s() - t0);
    best = rate > best ? rate : best;
  } while (now_s() - start < seconds);
  return best;
}
#else
static double clock_once(double seconds) {
  (void)seconds;
  return NAN;
}
#endif

static void measure_clock(machine_t *m) {
  m->clock_1_ghz = clock_once(0.3) * 1e-9;
  double sum = 0.0;
  int n = 1;
#pragma omp parallel reduction(+ : sum)
  {
    sum += clock_once(0.5);
#ifdef _OPENMP
#pragma omp single
    n = omp_get_num_threads();
#endif
  }
  m->clock_all_ghz = sum / n * 1e-9;
}

static volatile float g_sink; /* keeps the FMA results alive */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* 12 independent FMA chains (enough to cover a 4-cycle latency on 2 pipes),
 * as named variables so they stay in registers. Returns the FLOPs done. */
#define FMA12(fma)                                                                           \
  a0 = fma(a0, b, c), a1 = fma(a1, b, c), a2 = fma(a2, b, c), a3 = fma(a3, b, c),           \
  a4 = fma(a4, b, c), a5 = fma(a5, b, c), a6 = fma(a6, b, c), a7 = fma(a7, b, c),           \
  a8 = fma(a8, b, c), a9 = fma(a9, b, c), a10 = fma(a10, b, c), a11 = fma(a11, b, c)
__attribute__((target("avx512f"))) static double fma512(int64_t iters) {
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
  /* Distinct starting values, or the compiler merges identical chains. */
  __m512 a0 = _mm512_set1_ps(1.0f), a1 = _mm512_set1_ps(2.0f), a2 = _mm512_set1_ps(3.0f),
         a3 = _mm512_set1_ps(4.0f), a4 = _mm512_set1_ps(5.0f), a5 = _mm512_set1_ps(6.0f),
         a6 = _mm512_set1_ps(7.0f), a7 = _mm512_set1_ps(8.0f), a8 = _mm512_set1_ps(9.0f),
         a9 = _mm512_set1_ps(10.0f), a10 = _mm512_set1_ps(11.0f), a11 = _mm512_set1_ps(12.0f);
  for (int64_t it = 0; it < iters; ++it) FMA12(_mm512_fmadd_ps);
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  float out[16];
  _mm512_storeu_ps(out, s);
  g_sink = out[0];
  return (double)iters * 12 * 16 * 2;
}
__attribute__((target("avx2,fma"))) static double fma256(int64_t iters) {
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
  __m256 a0 = _mm256_set1_ps(1.0f), a1 = _mm256_set1_ps(2.0f), a2 = _mm256_set1_ps(3.0f),
         a3 = _mm256_set1_ps(4.0f), a4 = _mm256_set1_ps(5.0f), a5 = _mm256_set1_ps(6.0f),
         a6 = _mm256_set1_ps(7.0f), a7 = _mm256_set1_ps(8.0f), a8 = _mm256_set1_ps(9.0f),
         a9 = _mm256_set1_ps(10.0f), a10 = _mm256_set1_ps(11.0f), a11 = _mm256_set1_ps(12.0f);
  for (int64_t it = 0; it < iters; ++it) FMA12(_mm256_fmadd_ps);
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8];
  _mm256_storeu_ps(out, s);
  g_sink = out[0];
  return (double)iters * 12 * 8 * 2;
}
#endif

/* FLOP/s of FMA-only code on every core at once (0 without an FMA ISA):
 * per core the fastest of many short windows, as for the clock. */
static void measure_fma(machine_t *m) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!m->avx512f && !(m->avx2 && m->fma)) return;
  double flops = 0.0;
#pragma omp parallel reduction(+ : flops)
  {
    double best = 0.0, start = now_s();
    do {
      double t0 = now_s();
      double f = m->avx512f ? fma512(20000) : fma256(20000);
      double rate = f / (now_s() - t0);
      best = rate > best ? rate : best;
    } while (now_s() - start < 0.5);
    flops += best;
  }
  m->fma_gflops = flops * 1e-9;
#else
  (void)m;
#endif
}

/* ---- timing -------------------------------------------------------------- */

typedef struct {
  double median_s, best_s;
  int runs;
} timing_t;

typedef bool (*run_fn)(void *ctx);

static timing_t time_runs(run_fn fn, void *ctx, double min_time) {
  timing_t t = {0};
  if (!fn(ctx)) return t; /* warm-up, untimed */
  double times[10000];
  int n = 0;
  double start = now_s();
  while (n < 10000 && (n < 5 || now_s() - start < min_time)) {
    double t0 = now_s();
    if (!fn(ctx)) return t;
    times[n++] = now_s() - t0;
  }
  qsort(times, (size_t)n, sizeof(double), cmp_double);
  t.median_s = times[n / 2];
  t.best_s = times[0];
  t.runs = n;
  return t;
}

typedef struct {
  ty_session_t *session;
} plugin_ctx_t;

static bool run_plugin(void *ctx) {
  ty_status_t s = ty_session_run(((plugin_ctx_t *)ctx)->session);
  if (s) {
    fprintf(stderr, "matmul_bench: %s\n", ty_status_message(s));
    ty_status_free(s);
    return false;
  }
  return true;
}

#ifdef TY_BENCH_HAVE_ONEDNN
typedef struct {
  int64_t m, k, n;
  bool tb;
  const float *a, *b;
  float *c;
} dnnl_ctx_t;

static bool run_dnnl(void *ctx) {
  dnnl_ctx_t *d = ctx;
  return dnnl_sgemm('N', d->tb ? 'T' : 'N', d->m, d->n, d->k, 1.0f, d->a, d->k, d->b,
                    d->tb ? d->k : d->n, 0.0f, d->c, d->n) == dnnl_success;
}
#endif

/* c = a @ op(b) through a session on `uri` of the plugins in `dir` (with
 * --deterministic's compile option when `det`; b is [n, k] with trans_b
 * when `tb`). */
static timing_t time_plugin(const char *dir, const char *uri, int64_t m, int64_t k, int64_t n,
                            bool tb, const float *a, const float *b, float *c,
                            double min_time, bool det) {
  timing_t t = {0};
  const char *paths[] = {dir};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  ty_device_t *dev = NULL;
  ty_graph_t *g = NULL;
  plugin_ctx_t ctx = {NULL};
  int64_t ad[2] = {m, k}, bd[2] = {tb ? n : k, tb ? k : n};
  ty_value_id_t va, vb, vc;
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  ty_status_t s = ty_registry_create(&options, &r);
  if (!s && tb) s = ty_attrs_set_int(&attrs, "trans_b", 1);
  if (!s) s = ty_device_open(r, uri, &dev);
  if (!s) s = ty_graph_create(&g);
  if (!s) s = ty_graph_add_input(g, "a", TY_DTYPE_F32, 2, ad, &va);
  if (!s) s = ty_graph_add_input(g, "b", TY_DTYPE_F32, 2, bd, &vb);
  if (!s) s = ty_graph_add_node1(g, "matmul", (ty_value_id_t[]){va, vb}, 2, &attrs, &vc);
  if (!s) s = ty_graph_set_output(g, vc, "c");
  ty_session_options_t so = {.deterministic = det};
  if (!s) s = ty_session_create(dev, g, &so, &ctx.session);
  if (!s) s = ty_session_bind(ctx.session, "a", TY_DTYPE_F32, 2, ad, a, (size_t)(m * k) * 4);
  if (!s) s = ty_session_bind(ctx.session, "b", TY_DTYPE_F32, 2, bd, b, (size_t)(k * n) * 4);
  if (!s) {
    t = time_runs(run_plugin, &ctx, min_time);
    s = ty_session_read(ctx.session, "c", c, (size_t)(m * n) * 4);
  }
  if (s) {
    fprintf(stderr, "matmul_bench: %s on %s: %s\n", dir, uri, ty_status_message(s));
    ty_status_free(s);
    t.runs = 0;
  }
  if (ctx.session) ty_session_destroy(ctx.session);
  if (g) ty_graph_destroy(g);
  if (dev) ty_device_close(dev);
  if (r) ty_registry_destroy(r);
  return t;
}

/* max |c - ref| / max |ref| over a sample of entries. */
static double sample_error(const float *c, const float *ref, int64_t count) {
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < count; i += 997) {
    diff = fmax(diff, fabs((double)c[i] - ref[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

/* Uniform in [-0.5, 0.5) from a 64-bit LCG: any non-zero data will do. */
static void fill(float *p, int64_t n, uint64_t *state) {
  for (int64_t i = 0; i < n; ++i) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)(*state >> 40) / 16777216.0f - 0.5f;
  }
}

static void print_row(const char *shape, const char *via, timing_t t, double flop,
                      double peak_gflops, double err) {
  if (t.runs == 0) {
    printf("| %-15s | %-28s | %5s | %9s | %9s | %9s | %6s | %8s |\n", shape, via, "-", "-", "-",
           "-", "-", "failed");
    return;
  }
  double med = flop / t.median_s * 1e-9, best = flop / t.best_s * 1e-9;
  char err_text[16] = "-"; /* no oneDNN result to compare with */
  if (!isnan(err)) snprintf(err_text, sizeof(err_text), "%.1e", err);
  printf("| %-15s | %-28s | %5d | %9.2f | %9.1f | %9.1f | %5.1f%% | %8s |\n", shape, via,
         t.runs, t.median_s * 1e3, med, best, 100.0 * med / peak_gflops, err_text);
}

int main(int argc, char **argv) {
  double min_time = 2.0;
  int threads = 0;
  const char *plugin_dir = TY_BENCH_PLUGIN_DIR;
  const char *blocked_dir = TY_BENCH_NO_ONEDNN_DIR;
  const char *devices[8];
  int device_count = 0;
  int64_t shapes[16][4] = {{1024, 1024, 1024, 0}, {4096, 768, 3072, 0}}; /* M, K, N, trans_b */
  int shape_count = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--min-time") && i + 1 < argc) {
      min_time = strtod(argv[++i], NULL);
    } else if (!strcmp(argv[i], "--plugin-dir") && i + 1 < argc) {
      plugin_dir = argv[++i];
    } else if (!strcmp(argv[i], "--no-onednn-dir") && i + 1 < argc) {
      blocked_dir = argv[++i];
    } else if (!strcmp(argv[i], "--device") && i + 1 < argc && device_count < 8) {
      devices[device_count++] = argv[++i];
      if (ty_bench_refuses_mixed("matmul_bench", devices[device_count - 1])) return 2;
    } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && shape_count < 16) {
      long long sm, sk, sn;
      char t = '\0', end;
      const int got = sscanf(argv[++i], "%lldx%lldx%lld%c%c", &sm, &sk, &sn, &t, &end);
      if (got < 3 || got > 4 || (got == 4 && t != 't') || sm < 1 || sk < 1 || sn < 1) {
        fprintf(stderr, "matmul_bench: --shape %s: give MxKxN, three positive sizes "
                        "(e.g. 1x768x3072), or MxKxNt for B as [N, K] with trans_b\n",
                argv[i]);
        return 2;
      }
      shapes[shape_count][0] = sm;
      shapes[shape_count][1] = sk;
      shapes[shape_count][2] = sn;
      shapes[shape_count++][3] = got == 4;
    } else {
      fprintf(stderr,
              "usage: matmul_bench [--threads N] [--min-time SECONDS] [--plugin-dir DIR] "
              "[--no-onednn-dir DIR] [--device URI]... [--shape MxKxN]...\n");
      return 2;
    }
  }
  machine_t mc = {0};
  read_cpuinfo(&mc);
  if (threads <= 0 || threads > mc.cores) threads = mc.cores;
#ifdef _OPENMP
  omp_set_num_threads(threads);
#endif
  char uri[64];
  snprintf(uri, sizeof(uri), "cpu?threads=%d", threads);
  double load0[3] = {0};
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (fscanf(lf, "%lf %lf %lf", &load0[0], &load0[1], &load0[2]) != 3) load0[0] = NAN;
    fclose(lf);
  }
  measure_clock(&mc);
  measure_fma(&mc);
  const double peak = threads * mc.clock_all_ghz * mc.flop_per_cycle;
  printf("cpu:        %s, %d cores, %s; using %d thread%s\n", mc.model, mc.cores,
         mc.avx512f ? "avx512f" : (mc.avx2 && mc.fma) ? "avx2+fma" : "no avx2/fma", threads,
         threads == 1 ? "" : "s");
  printf("clock:      %.3f GHz measured with every core busy (%.3f GHz one core busy; "
         "/proc/cpuinfo says %.0f MHz; cpufreq max %s)\n",
         mc.clock_all_ghz, mc.clock_1_ghz, mc.cpuinfo_mhz,
         mc.cpufreq_mhz > 0 ? "present" : "not exposed");
  if (mc.cpufreq_mhz > 0) printf("            cpufreq max %.0f MHz\n", mc.cpufreq_mhz);
  printf("peak f32:   %d core%s x %.3f GHz x %d FLOP/cycle = %.1f GFLOP/s\n", threads,
         threads == 1 ? "" : "s", mc.clock_all_ghz, mc.flop_per_cycle, peak);
  if (mc.fma_gflops > 0) {
    printf("FMA loop:   %.1f GFLOP/s on %d thread%s = %.1f FLOP/cycle/core (%.0f%% of the "
           "ISA figure)\n",
           mc.fma_gflops, threads, threads == 1 ? "" : "s",
           mc.fma_gflops / (threads * mc.clock_all_ghz), 100.0 * mc.fma_gflops / peak);
  }
  printf("load avg:   %.2f (1 min, before the runs)\n", load0[0]);
  printf("runs:       one warm-up, then >= 5 and >= %.1f s; GFLOP/s = 2MNK / time\n\n",
         min_time);

  if (shape_count == 0) shape_count = 2;
  printf("| %-15s | %-28s | %5s | %9s | %9s | %9s | %6s | %8s |\n", "M x K x N", "via", "runs",
         "median ms", "GFLOP/s", "best", "% peak", "max err");
  printf("|-----------------|------------------------------|-------|-----------|-----------|"
         "-----------|--------|----------|\n");
  for (int si = 0; si < shape_count; ++si) {
    const int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
    const bool tb = shapes[si][3] != 0;
    const double flop = 2.0 * (double)m * (double)n * (double)k;
    char shape[32];
    snprintf(shape, sizeof(shape), "%lldx%lldx%lld%s", (long long)m, (long long)k, (long long)n,
             tb ? "t" : "");
    float *a = malloc((size_t)(m * k) * 4), *b = malloc((size_t)(k * n) * 4);
    float *c = malloc((size_t)(m * n) * 4), *ref = calloc((size_t)(m * n), 4);
    if (!a || !b || !c || !ref) {
      fprintf(stderr, "matmul_bench: out of memory\n");
      return 1;
    }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    fill(a, m * k, &x);
    fill(b, k * n, &x);
    bool have_ref = false;
#ifdef TY_BENCH_HAVE_ONEDNN
    dnnl_ctx_t dctx = {m, k, n, tb, a, b, ref};
    timing_t td = time_runs(run_dnnl, &dctx, min_time);
    have_ref = td.runs > 0;
#endif
    timing_t tp = time_plugin(plugin_dir, uri, m, k, n, tb, a, b, c, min_time, false);
    print_row(shape, "plugin matmul (session)", tp, flop, peak,
              have_ref ? sample_error(c, ref, m * n) : NAN);
    timing_t tdet = time_plugin(plugin_dir, uri, m, k, n, tb, a, b, c, min_time, true);
    print_row(shape, "plugin, --deterministic", tdet, flop, peak,
              have_ref ? sample_error(c, ref, m * n) : NAN);
#ifdef TY_BENCH_HAVE_ONEDNN
    print_row(shape, "oneDNN dnnl_sgemm direct", td, flop, peak, 0.0);
#endif
    if (access(blocked_dir, R_OK) == 0) {
      timing_t tbl = time_plugin(blocked_dir, uri, m, k, n, tb, a, b, c, min_time, false);
      print_row(shape, "plugin, blocked (no oneDNN)", tbl, flop, peak,
                have_ref ? sample_error(c, ref, m * n) : NAN);
    }
    for (int d = 0; d < device_count; ++d) {
      char via[64];
      snprintf(via, sizeof(via), "matmul (session) on %s", devices[d]);
      timing_t to = time_plugin(plugin_dir, devices[d], m, k, n, tb, a, b, c, min_time, false);
      print_row(shape, via, to, flop, peak, have_ref ? sample_error(c, ref, m * n) : NAN);
    }
    free(a);
    free(b);
    free(c);
    free(ref);
  }
  lf = fopen("/proc/loadavg", "r");
  if (lf) {
    double l1 = NAN;
    if (fscanf(lf, "%lf", &l1) == 1) printf("\nload avg:   %.2f (1 min, after the runs)\n", l1);
    fclose(lf);
  }
  return 0;
}
