/* train_bench: time one training step (forward, backward, global-norm
 * clipping at 1.0 and AdamW in one graph, as `trainyard train` runs it) on
 * a backend, and print ms/step, tokens/s and MFU.
 *
 * The model is a preset (default gpt2-124m: vocab 50257, 12 layers, 12
 * heads, 768 wide, 1024 positions, tied embeddings; also gpt2-350m,
 * llama-1b with vocab 128256, llama-7b with vocab 32000), in f32 or
 * --dtype bf16-mixed, initialized as transformers does;
 * tokens and targets are random ids, fixed for the whole run. Weight decay
 * 0.1 applies to the matrices (not to biases, norms or embeddings), lr 6e-4,
 * betas (0.9, 0.95), eps 1e-8. A timed step is: bind `step`, run, read the
 * loss (which waits for the run). Usage:
 *   train_bench [--batch B] [--seq T] [--steps N] [--warmup W] [--threads N]
 *               [--backend URI] [--plugin-dir DIR] [--model PRESET]
 *               [--dtype f32|bf16-mixed] [--peak-tflops P] [--deterministic 0|1]
 * MFU counts 6 FLOPs per parameter and token plus causal attention's
 * 6·L·T·C per token (forward and backward: 12·L·T·C halved by the mask),
 * over --peak-tflops (the card's dense peak for the compute dtype; 0
 * prints none). --deterministic 1 compiles the step with deterministic=1
 * (batch-invariant kernels, docs/plugin-abi.md), to time what it costs.
 * The backend's executable report (device memory, CUDA graph
 * replays, ...) is printed at the end when it gives one.
 * Plugins are found as `trainyard` finds them: --plugin-dir, then
 * TRAINYARD_BACKEND_PATH, the install folder and the build's (bench_registry.h).
 * --threads N (default: every core) makes the default backend "cpu?threads=N"
 * and sets OpenMP's thread count. For a per-op time split, run with
 * TRAINYARD_PROFILE=1 (the host executor prints a table to stderr when the
 * session is destroyed). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench_mixed.h"
#include "bench_registry.h"
#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "graph/ir/train_step.h"
#include "hal/device.h"
#include "hal/registry.h"
#include "models/llm.h"
#include "models/presets.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double load_avg(void) {
  double l = NAN;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = NAN;
    fclose(f);
  }
  return l;
}

/* CPU time of the whole machine (busy, all CPUs) and of this process, in
 * seconds, so that a step can tell how much of the machine other processes
 * used meanwhile (the machine is shared; a disturbed step is reported). */
static void cpu_times(double *machine_busy, double *self) {
  const double tick = (double)sysconf(_SC_CLK_TCK);
  unsigned long long v[10] = {0};
  *machine_busy = *self = 0.0;
  FILE *f = fopen("/proc/stat", "r");
  if (f) {
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
      *machine_busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / tick;
    }
    fclose(f);
  }
  struct timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) {
    *self = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
  }
}

static double median_of(double *x, int n) {
  qsort(x, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static ty_status_t bind_f32(ty_session_t *s, const char *name, float v) {
  return ty_session_bind(s, name, TY_DTYPE_F32, 0, NULL, &v, sizeof(v));
}

typedef struct {
  int64_t batch, seq;
  int steps, warmup, threads;
  const char *uri, *plugin_dir, *model, *dtype;
  double peak_tflops;
  int deterministic; /* --deterministic 1: compile with deterministic=1 */
} options_t;

static int usage(void) {
  fprintf(stderr,
          "usage: train_bench [--batch B] [--seq T] [--steps N] [--warmup W] [--threads N]\n"
          "                   [--backend URI] [--plugin-dir DIR] [--model PRESET]\n"
          "                   [--dtype f32|bf16-mixed] [--peak-tflops P]\n"
          "                   [--deterministic 0|1]\n");
  return 2;
}

static ty_status_t run_bench(const options_t *o) {
  ty_registry_t *reg = NULL;
  ty_device_t *dev = NULL;
  ty_graph_t *g = NULL;
  ty_session_t *sess = NULL;
  ty_llm_t model = {0};
  ty_value_id_t *params = NULL;
  bool *decay = NULL;
  int64_t *tokens = NULL, *targets = NULL;
  float *weights = NULL;
  double *times = NULL, *clean = NULL;
  const int64_t n_tok = o->batch * o->seq;
  ty_model_config_t cfg;
  const int64_t vocab = !strncmp(o->model, "gpt2", 4)         ? 50257
                        : !strcmp(o->model, "llama-1b")       ? 128256
                        : !strcmp(o->model, "llama-7b")       ? 32000
                                                              : 32000;
  ty_dtype_t param_dtype = TY_DTYPE_F32, compute_dtype = TY_DTYPE_F32;
  ty_status_t s = ty_model_preset(o->model, vocab, vocab - 1, vocab - 1, &cfg);
  if (!s) s = ty_llm_precision_parse(o->dtype, &param_dtype, &compute_dtype);
  if (!s) s = ty_bench_registry_create(o->plugin_dir, &reg);
  if (!s) s = ty_device_open(reg, o->uri, &dev);
  if (!s) s = ty_graph_create(&g);
  ty_llm_options_t lo = {.batch = o->batch, .seq = o->seq, .dtype = param_dtype,
                         .compute_dtype = compute_dtype, .with_loss = true};
  const double t_build = now_s();
  if (!s) s = ty_llm_build(g, &cfg, &lo, &model);
  if (!s) {
    params = calloc(model.param_count, sizeof(*params));
    decay = calloc(model.param_count, sizeof(*decay));
    tokens = malloc((size_t)n_tok * sizeof(int64_t));
    targets = malloc((size_t)n_tok * sizeof(int64_t));
    weights = malloc((size_t)n_tok * sizeof(float));
    times = calloc((size_t)o->steps, sizeof(double));
    clean = calloc((size_t)o->steps, sizeof(double));
    if (!params || !decay || !tokens || !targets || !weights || !times || !clean) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  for (uint32_t i = 0; !s && i < model.param_count; ++i) {
    params[i] = model.params[i].value;
    decay[i] = model.params[i].decay;
  }
  ty_train_step_params_t tp = {.loss = model.loss, .loss_seed = TY_VALUE_NONE,
                               .params = params, .decay = decay,
                               .param_count = model.param_count,
                               .optimizer = TY_OPTIMIZER_ADAMW,
                               .mode = TY_TRAIN_STEP_FUSED};
  if (!s) s = ty_graph_build_train_step(g, &tp);
  ty_session_options_t so = {.deterministic = o->deterministic != 0};
  if (!s) s = ty_session_create(dev, g, &so, &sess);
  if (!s) s = ty_llm_init_weights(&model, sess, 1234);
  const double t_ready = now_s();
  if (!s) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n_tok; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      tokens[i] = (int64_t)((x >> 33) % (uint64_t)vocab);
    }
    for (int64_t i = 0; i < n_tok; ++i) {
      /* next-token targets of the same random stream */
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      targets[i] = i + 1 < n_tok && (i + 1) % o->seq ? tokens[i + 1]
                                                     : (int64_t)((x >> 33) % (uint64_t)vocab);
      weights[i] = 1.0f / (float)n_tok;
    }
    int64_t bt[2] = {o->batch, o->seq};
    s = ty_session_bind(sess, "tokens", TY_DTYPE_I64, 2, bt, tokens, (size_t)n_tok * 8);
    if (!s) s = ty_session_bind(sess, "targets", TY_DTYPE_I64, 2, bt, targets, (size_t)n_tok * 8);
    if (!s) s = ty_session_bind(sess, "loss_weights", TY_DTYPE_F32, 2, bt, weights, (size_t)n_tok * 4);
    if (!s) s = bind_f32(sess, "lr", 6e-4f);
    if (!s) s = bind_f32(sess, "weight_decay", 0.1f);
    if (!s) s = bind_f32(sess, "max_norm", 1.0f);
    if (!s) s = bind_f32(sess, "beta1", 0.9f);
    if (!s) s = bind_f32(sess, "beta2", 0.95f);
    if (!s) s = bind_f32(sess, "eps", 1e-8f);
  }
  const int64_t n_params = ty_llm_parameter_count(&model);
  printf("model:      %s (%lld parameters), %s, AdamW + clip 1.0, one fused graph\n", o->model,
         (long long)n_params, o->dtype);
  printf("shape:      B=%lld T=%lld (%lld tokens/step); backend %s\n", (long long)o->batch,
         (long long)o->seq, (long long)n_tok, o->uri);
  printf("build:      graph + session + init %.2f s\n", t_ready - t_build);
  printf("load avg:   %.2f (1 min, before the steps)\n", load_avg());
  fflush(stdout);
  float first_loss = NAN, loss = NAN, gnorm = NAN;
  const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  int n_clean = 0;
  double others_max = 0.0;
  for (int i = 0; !s && i < o->warmup + o->steps; ++i) {
    int64_t step = i + 1;
    double busy0, self0, busy1, self1;
    cpu_times(&busy0, &self0);
    double t0 = now_s();
    s = ty_session_bind(sess, "step", TY_DTYPE_I64, 0, NULL, &step, sizeof(step));
    if (!s) s = ty_session_run(sess);
    if (!s) s = ty_session_read(sess, "loss", &loss, sizeof(loss));
    double dt = now_s() - t0;
    cpu_times(&busy1, &self1);
    /* other processes' share of all CPUs during the step */
    double others = ((busy1 - busy0) - (self1 - self0)) / (dt * cores);
    if (others < 0) others = 0;
    if (!s) s = ty_session_read(sess, "grad_norm", &gnorm, sizeof(gnorm));
    if (i == 0) first_loss = loss;
    if (i >= o->warmup) {
      times[i - o->warmup] = dt;
      if (others <= 0.05) clean[n_clean++] = dt;
      if (others > others_max) others_max = others;
    }
    fprintf(stderr, "step %3d%s: %8.1f ms  loss %.4f  grad_norm %.3f  other processes %3.0f%%\n",
            i + 1, i < o->warmup ? " (warm-up)" : "", dt * 1e3, loss, gnorm, 100.0 * others);
  }
  if (!s) {
    double mean = 0.0;
    for (int i = 0; i < o->steps; ++i) mean += times[i];
    mean /= o->steps;
    const double median = median_of(times, o->steps);
    const double clean_median = n_clean ? median_of(clean, n_clean) : NAN;
    printf("loss:       %.4f at step 1, %.4f at step %d (ln V = %.4f)\n", first_loss, loss,
           o->warmup + o->steps, log((double)vocab));
    printf("load avg:   %.2f (1 min, after the steps)\n", load_avg());
    printf("steps:      %d warm-up, %d timed; %d undisturbed (other processes <= 5%% of the "
           "CPUs; worst step %.0f%%)\n",
           o->warmup, o->steps, n_clean, 100.0 * others_max);
    printf("ms/step:    median %.1f  mean %.1f  min %.1f  max %.1f; undisturbed median %.1f\n",
           median * 1e3, mean * 1e3, times[0] * 1e3, times[o->steps - 1] * 1e3,
           clean_median * 1e3);
    printf("tokens/s:   %.0f (median)  %.0f (mean)\n", (double)n_tok / median,
           (double)n_tok / mean);
    /* Training FLOPs per token: 6 per parameter, plus attention's scores
     * and values (4·T·C forward per layer, x3 with the backward, halved by
     * the causal mask). */
    const double flops_token = 6.0 * (double)n_params +
                               6.0 * (double)cfg.num_layers * (double)o->seq *
                                   (double)cfg.hidden_size;
    const double tflops = flops_token * (double)n_tok / median * 1e-12;
    printf("compute:    %.1f TFLOP/s", tflops);
    if (o->peak_tflops > 0) printf(", MFU %.1f%% of %.0f TFLOP/s", 100.0 * tflops / o->peak_tflops,
                                   o->peak_tflops);
    printf("\n");
    /* one machine-readable line for bench/train_bench.sh */
    printf("RESULT trainyard model=%s dtype=%s B=%lld T=%lld median_ms=%.2f mean_ms=%.2f "
           "tok_s=%.1f clean_steps=%d clean_median_ms=%.2f tflops=%.1f\n",
           o->model, o->dtype, (long long)o->batch, (long long)o->seq, median * 1e3, mean * 1e3,
           (double)n_tok / median, n_clean, clean_median * 1e3, tflops);
    char *report = NULL;
    ty_status_t rs = ty_session_report(sess, &report);
    if (!rs && report) printf("report:\n%s", report);
    ty_status_free(rs);
    free(report);
  }
  ty_session_destroy(sess);
  ty_llm_deinit(&model);
  ty_graph_destroy(g);
  if (dev) ty_device_close(dev);
  if (reg) ty_registry_destroy(reg);
  free(params);
  free(decay);
  free(tokens);
  free(targets);
  free(weights);
  free(times);
  free(clean);
  return s;
}

int main(int argc, char **argv) {
  options_t o = {.batch = 4, .seq = 64, .steps = 10, .warmup = 2, .threads = 0,
                 .uri = NULL, .plugin_dir = NULL, .model = "gpt2-124m",
                 .dtype = "f32", .peak_tflops = 0};
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (i + 1 >= argc) return usage();
    if (!strcmp(a, "--batch")) o.batch = atoll(argv[++i]);
    else if (!strcmp(a, "--seq")) o.seq = atoll(argv[++i]);
    else if (!strcmp(a, "--steps")) o.steps = atoi(argv[++i]);
    else if (!strcmp(a, "--warmup")) o.warmup = atoi(argv[++i]);
    else if (!strcmp(a, "--threads")) o.threads = atoi(argv[++i]);
    else if (!strcmp(a, "--backend")) o.uri = argv[++i];
    else if (!strcmp(a, "--plugin-dir")) o.plugin_dir = argv[++i];
    else if (!strcmp(a, "--model")) o.model = argv[++i];
    else if (!strcmp(a, "--dtype")) o.dtype = argv[++i];
    else if (!strcmp(a, "--peak-tflops")) o.peak_tflops = atof(argv[++i]);
    else if (!strcmp(a, "--deterministic")) o.deterministic = atoi(argv[++i]);
    else return usage();
  }
  if (o.batch < 1 || o.seq < 1 || o.steps < 1 || o.warmup < 0) return usage();
  const int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (o.threads <= 0) o.threads = cores;
#ifdef _OPENMP
  omp_set_num_threads(o.threads);
#endif
  char uri[64];
  if (!o.uri) {
    snprintf(uri, sizeof(uri), "cpu?threads=%d", o.threads);
    o.uri = uri;
  }
  if (ty_bench_refuses_mixed("train_bench", o.uri)) return 2;
  printf("threads:    %d (of %d cores)\n", o.threads, cores);
  ty_status_t s = run_bench(&o);
  if (s) {
    fprintf(stderr, "train_bench: %s\n", ty_status_message(s));
    ty_status_free(s);
    return 1;
  }
  return 0;
}
