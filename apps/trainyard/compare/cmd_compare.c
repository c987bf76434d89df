/* `trainyard compare`: the same training run (same initialization, data
 * order, dropout masks and configuration) on several backends, one after the
 * other, each in a child process of its own (so that its peak memory is its
 * own); then the per-step losses side by side with their absolute and
 * relative differences against the first backend, throughput and memory,
 * written as compare.csv and plotted as compare.svg. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "compare_layers.h"
#include "compare_plot.h"
#include "files/out_paths.h"
#include "files/run_folder.h"
#include "graph/runtime/compile_cache.h"
#include "hal/device_uri.h"
#include "metrics/jsonl.h"
#include "stop_signals.h"
#include "train/train_args.h"
#include "train/train_config.h"
#include "train/trainer.h"

#define TY_COMPARE_MAX 8

/* A child's device_report.txt: a page of text the plugin wrote. */
static const ty_file_kind_t ty_device_report_kind = {
    .what = "device report", .max_bytes = 16 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS, .skip_bom = true};

static void ty_compare_usage(FILE *out) {
  fputs("usage: trainyard compare --backends URI,URI[,...] --steps N --out DIR\n"
        "                         [--tolerance X] [--config FILE] [TRAIN OPTIONS]...\n"
        "\n"
        "Runs 'trainyard train' for N steps on each backend, one after the other,\n"
        "with the same options (same initialization, data order and dropout masks),\n"
        "each in its own process under DIR/<i>-<backend>/ (its checkpoint, metrics\n"
        "and train.log). Prints every step's loss on each backend with the absolute\n"
        "and relative difference against the first backend, the throughput of each\n"
        "and its ratio to the first, and peak memory; writes DIR/compare.csv and\n"
        "DIR/compare.svg (loss curves, and the relative difference on a log scale).\n"
        "Exits 1 when a relative difference exceeds --tolerance.\n"
        "\n"
        "  --backends LIST   device URIs, comma-separated; the first is the reference;\n"
        "                    URI*N (cpu*2, cuda*4) is a data-parallel run of N ranks\n"
        "                    under mpirun, each with 1/N of every batch (the same\n"
        "                    global batch as the others)\n"
        "  --steps N         optimizer steps on each backend\n"
        "  --out DIR         output folder\n"
        "  --tolerance X     largest relative loss difference accepted [1e-05]\n"
        "  --config FILE     train options from a file, as 'trainyard train'\n"
        "  TRAIN OPTIONS     any 'trainyard train' option (--model or --preset,\n"
        "                    --data, --batch-size, --lr, --dropout, ...); --backend,\n"
        "                    --max-steps, --epochs, --out and --resume are set by\n"
        "                    compare; --overwrite replaces the runs of an earlier\n"
        "                    comparison in DIR (refused without it)\n"
        "  --per-layer       one batch forward and backward on two backends, layer\n"
        "                    by layer ('trainyard compare --per-layer --help')\n"
        "  -h, --help        this help\n",
        out);
}

typedef struct {
  char uri[TY_CFG_WORD_MAX];  /* the device URI, without "*N" */
  char label[TY_CFG_WORD_MAX]; /* as given: "cpu", "cuda*2" */
  int ranks;                   /* URI*N: N ranks under mpirun (1: this process) */
  char dir[TY_CFG_PATH_MAX];
  double *loss, *tok_s, *tokens;
  int64_t rows;
  double wall_s, peak_rss_mib, mean_tok_s;
  char cycles[256];   /* the device report's simulated step, if any */
  char dram_peak[64]; /* the device report's DRAM peak, if any */
} ty_compare_run_t;

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "dataflow?tiles=2" -> "dataflow_tiles_2" */
static void ty_compare_slug(const char *uri, char *out, size_t capacity) {
  size_t n = 0;
  for (const char *p = uri; *p && n + 1 < capacity; ++p) {
    out[n++] = isalnum((unsigned char)*p) ? *p : '_';
  }
  out[n] = '\0';
}

/* The last capacity-1 bytes of a child's log (however long the log grew),
 * NUL-terminated; "" when it cannot be read. */
static void ty_compare_log_tail(const char *path, char *out, size_t capacity) {
  out[0] = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  size_t got = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    off_t want = (off_t)(capacity - 1);
    off_t from = st.st_size > want ? st.st_size - want : 0;
    while (got < capacity - 1) {
      ssize_t n = pread(fd, out + got, capacity - 1 - got, from + (off_t)got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += (size_t)n;
    }
  }
  close(fd);
  out[got] = '\0';
}

/* The child of a URI*N item: the run's options as a --config file, then
 * mpirun -np N <this trainyard> train --config FILE, each rank taking
 * batch_size / N rows so the global batch is the reference's. */
static void ty_compare_exec_mpirun(ty_app_t *app, ty_train_config_t *cfg, int ranks,
                                   const char *dir) {
  char path[TY_CFG_PATH_MAX + 32], np[16], exe[sizeof(app->exe_dir) + 16];
  snprintf(path, sizeof(path), "%s/train.cfg", dir);
  cfg->batch_size /= ranks;
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "trainyard compare: cannot write %s: %s\n", path, strerror(errno));
    _exit(1);
  }
  static const char *const force[] = {"backend", "out", "max_steps", "batch_size", NULL};
  ty_train_config_write_given(cfg, force, f);
  if (fclose(f) != 0) _exit(1);
  snprintf(np, sizeof(np), "%d", ranks);
  snprintf(exe, sizeof(exe), "%s/trainyard", app->exe_dir);
  /* --oversubscribe: compare runs on one host, which may have fewer cores
   * than ranks; as root (containers, CI) Open MPI also wants consent. */
  char *args[] = {"mpirun", "-np", np, "--oversubscribe", NULL, NULL, NULL, NULL, NULL, NULL};
  int n = 4;
  if (geteuid() == 0) args[n++] = "--allow-run-as-root";
  args[n++] = exe;
  args[n++] = "train";
  args[n++] = "--config";
  args[n++] = path;
  fprintf(stderr, "trainyard compare: mpirun -np %s ... %s train --config %s\n", np, exe, path);
  fflush(stderr);
  execvp("mpirun", args);
  fprintf(stderr, "trainyard compare: cannot run mpirun (%s): install Open MPI "
                  "(scripts/install-deps.sh) for the URI*N items of --backends\n",
          strerror(errno));
  _exit(127);
}

/* One backend's training run, in a child process. */
static ty_status_t ty_compare_train(ty_app_t *app, const ty_train_config_t *base,
                                    ty_compare_run_t *run) {
  ty_train_config_t cfg = *base;
  size_t uri_len = strnlen(run->uri, sizeof(cfg.backend) - 1);
  memcpy(cfg.backend, run->uri, uri_len);
  cfg.backend[uri_len] = '\0';
  snprintf(cfg.out, sizeof(cfg.out), "%s", run->dir);
  cfg.resume[0] = '\0';
  TY_RETURN_IF_ERROR(ty_mkdir_parents(run->dir));
  char log[TY_CFG_PATH_MAX + 32];
  snprintf(log, sizeof(log), "%s/train.log", run->dir);
  fflush(stdout);
  fflush(stderr);
  double start = ty_now();
  ty_stop_signals_pause(); /* fork from a single-threaded process */
  pid_t pid = fork();
  int fork_errno = errno;
  ty_stop_signals_resume();
  if (pid < 0) return ty_status_make(TY_CODE_UNAVAILABLE, "fork failed: %s", strerror(fork_errno));
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    if (run->ranks > 1) ty_compare_exec_mpirun(app, &cfg, run->ranks, run->dir);
    ty_status_t s = ty_trainer_run(app, &cfg);
    int rc = s ? ty_app_fail("train", s) : 0;
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof(ru));
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  run->wall_s = ty_now() - start;
  run->peak_rss_mib = (double)ru.ru_maxrss / 1024.0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return TY_OK;
  /* Show the end of its log: the error is there. */
  char tail[1501] = "";
  ty_compare_log_tail(log, tail, sizeof(tail));
  return ty_status_make(TY_CODE_ABORTED, "the run on %s failed (%s %d); the end of %s:\n%s",
                        run->label, WIFEXITED(status) ? "exit code" : "signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log, tail);
}

/* Step losses, throughput and cumulative tokens from metrics.jsonl. */
static ty_status_t ty_compare_read(ty_compare_run_t *run, int64_t steps) {
  run->loss = calloc((size_t)steps, sizeof(double));
  run->tok_s = calloc((size_t)steps, sizeof(double));
  run->tokens = calloc((size_t)steps, sizeof(double));
  if (!run->loss || !run->tok_s || !run->tokens) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (int64_t i = 0; i < steps; ++i) run->loss[i] = NAN;
  char path[TY_CFG_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/metrics.jsonl", run->dir);
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_metrics_jsonl_kind, &text, &size));
  size_t line_no = 0;
  ty_status_t s = TY_OK;
  for (char *line = text; line < text + size && !s; ++line_no) {
    char *nl = memchr(line, '\n', (size_t)(text + size - line));
    size_t len = nl ? (size_t)(nl - line) : (size_t)(text + size - line);
    json_error_t error;
    json_t *j = json_loadb(line, len, 0, &error);
    if (!json_is_object(j)) {
      s = ty_status_make(TY_CODE_DATA_LOSS, "%s:%zu: not a JSON object (%s)", path, line_no + 1,
                         j ? "another JSON value" : error.text);
    }
    json_t *loss = json_object_get(j, "loss");
    int64_t step = (int64_t)json_integer_value(json_object_get(j, "step"));
    if (!s && loss && step >= 1 && step <= steps) {
      run->loss[step - 1] = json_number_value(loss);
      run->tok_s[step - 1] = json_number_value(json_object_get(j, "tokens_per_s"));
      run->tokens[step - 1] = json_number_value(json_object_get(j, "tokens"));
      run->rows++;
    }
    json_decref(j);
    line += len + (nl ? 1 : 0);
  }
  free(text);
  TY_RETURN_IF_ERROR(s);
  if (run->rows != steps) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s holds %lld of the %lld steps", path,
                          (long long)run->rows, (long long)steps);
  }
  /* Throughput over the run: tokens / the time the steps took. */
  double seconds = 0, tokens = 0;
  for (int64_t i = 0; i < steps; ++i) {
    double t = run->tokens[i] - (i ? run->tokens[i - 1] : 0);
    if (run->tok_s[i] > 0) {
      seconds += t / run->tok_s[i];
      tokens += t;
    }
  }
  run->mean_tok_s = seconds > 0 ? tokens / seconds : 0;
  /* A device report (the dataflow device's) gives simulated figures. */
  snprintf(path, sizeof(path), "%s/device_report.txt", run->dir);
  text = NULL;
  ty_status_t r = ty_file_read(path, &ty_device_report_kind, &text, &size);
  if (!r) {
    const char *c = strstr(text, "estimated cycles per step: ");
    if (c) snprintf(run->cycles, sizeof(run->cycles), "%.*s", (int)strcspn(c, "\n"), c);
    const char *d = strstr(text, "the device's peak so far ");
    if (d) {
      d += strlen("the device's peak so far ");
      snprintf(run->dram_peak, sizeof(run->dram_peak), "%.*s", (int)strcspn(d, "\n"), d);
    }
  }
  ty_status_free(r);
  free(text);
  return TY_OK;
}

static ty_status_t ty_compare_write_csv(const char *dir, const ty_compare_run_t *runs,
                                        uint32_t count, int64_t steps) {
  size_t cap = 256 + (size_t)steps * (64 + 96 * count);
  char *csv = malloc(cap);
  if (!csv) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  char slug[TY_CFG_WORD_MAX];
  n += (size_t)snprintf(csv + n, cap - n, "step");
  for (uint32_t k = 0; k < count; ++k) {
    ty_compare_slug(runs[k].label, slug, sizeof(slug));
    n += (size_t)snprintf(csv + n, cap - n, ",loss_%s", slug);
  }
  for (uint32_t k = 1; k < count; ++k) {
    ty_compare_slug(runs[k].label, slug, sizeof(slug));
    n += (size_t)snprintf(csv + n, cap - n, ",abs_diff_%s,rel_diff_%s", slug, slug);
  }
  for (uint32_t k = 0; k < count; ++k) {
    ty_compare_slug(runs[k].label, slug, sizeof(slug));
    n += (size_t)snprintf(csv + n, cap - n, ",tokens_per_s_%s", slug);
  }
  n += (size_t)snprintf(csv + n, cap - n, "\n");
  for (int64_t i = 0; i < steps; ++i) {
    n += (size_t)snprintf(csv + n, cap - n, "%lld", (long long)(i + 1));
    for (uint32_t k = 0; k < count; ++k) {
      n += (size_t)snprintf(csv + n, cap - n, ",%.9g", runs[k].loss[i]);
    }
    for (uint32_t k = 1; k < count; ++k) {
      double a = runs[0].loss[i], d = fabs(runs[k].loss[i] - a);
      n += (size_t)snprintf(csv + n, cap - n, ",%.9g,%.9g", d, d / fmax(fabs(a), 1e-30));
    }
    for (uint32_t k = 0; k < count; ++k) {
      n += (size_t)snprintf(csv + n, cap - n, ",%.1f", runs[k].tok_s[i]);
    }
    n += (size_t)snprintf(csv + n, cap - n, "\n");
  }
  char path[TY_CFG_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/compare.csv", dir);
  ty_status_t s = ty_file_write_atomic(path, csv, n);
  free(csv);
  return s;
}

/* Before anything runs: --out may not be, or lie inside, an input, and a
 * backend's run folder that holds a run from an earlier comparison is kept
 * (its train.log too) unless --overwrite. */
static ty_status_t ty_compare_check_out(const ty_train_config_t *cfg, const char *out,
                                        const ty_compare_run_t *runs, uint32_t count) {
  const ty_path_arg_t inputs[] = {{"--data", cfg->data},
                                  {"--model", cfg->model},
                                  {"--tokenizer", cfg->tokenizer}};
  ty_out_path_t o = {.option = "--out", .path = out, .creates_parents = true};
  TY_RETURN_IF_ERROR(ty_out_path_check(&o, inputs, sizeof(inputs) / sizeof(inputs[0])));
  for (uint32_t k = 0; k < count; ++k) {
    struct stat st;
    if (stat(runs[k].dir, &st) != 0) continue;
    ty_run_folder_t *folder = NULL;
    TY_RETURN_IF_ERROR(ty_run_folder_open(runs[k].dir, &folder));
    char what[512];
    ty_status_t s = ty_run_folder_describe(folder, what, sizeof(what));
    ty_run_folder_close(folder); /* the run takes the lock itself */
    TY_RETURN_IF_ERROR(s);
    if (what[0] && !cfg->overwrite) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "%s already holds the run of an earlier comparison (%s); choose "
                            "another --out, or pass --overwrite to replace it",
                            runs[k].dir, what);
    }
  }
  return TY_OK;
}

int ty_cmd_compare(ty_app_t *app, int argc, char **argv) {
  if (ty_compare_is_per_layer(argc, argv)) return ty_compare_per_layer(app, argc, argv);
  ty_train_config_t cfg;
  ty_train_config_defaults(&cfg);
  char backends[1024] = "", out[TY_CFG_PATH_MAX] = "";
  int64_t steps = 0;
  double tolerance = 1e-5;
  static const char refused[] = "--%s is set by compare (use --backends and --steps)";
  const ty_train_arg_t own[] = {
      {"backends", TY_TRAIN_ARG_TEXT, backends, sizeof(backends), NULL},
      {"steps", TY_TRAIN_ARG_COUNT, &steps, 0, NULL},
      {"out", TY_TRAIN_ARG_TEXT, out, sizeof(out), NULL},
      {"tolerance", TY_TRAIN_ARG_TOLERANCE, &tolerance, 0, NULL},
      {"backend", TY_TRAIN_ARG_REFUSED, NULL, 0, refused},
      {"max-steps", TY_TRAIN_ARG_REFUSED, NULL, 0, refused},
      {"max_steps", TY_TRAIN_ARG_REFUSED, NULL, 0, refused},
      {"resume", TY_TRAIN_ARG_REFUSED, NULL, 0, refused},
      {"epochs", TY_TRAIN_ARG_REFUSED, NULL, 0, refused},
  };
  const ty_train_args_t args = {.command = "compare", .usage = ty_compare_usage, .own = own,
                                .own_count = sizeof(own) / sizeof(own[0]),
                                .hint_on_bad_value = true};
  int rc = ty_train_args_parse(&args, argc, argv, &cfg);
  if (rc == TY_TRAIN_ARGS_HELP) return TY_EXIT_OK;
  if (rc) return rc;
  if (cfg.fallback[0]) { /* from the command line or a --config file */
    return ty_app_usage_error("compare",
                              "--fallback %s asks for a mixed run: compare measures each "
                              "backend's speed and memory, and refuses mixed runs; train it "
                              "with 'trainyard train' and compare the losses in metrics.jsonl",
                              cfg.fallback);
  }
  if (!backends[0]) return ty_app_usage_error("compare", "--backends URI,URI is required");
  if (!steps) return ty_app_usage_error("compare", "--steps N is required");
  if (!out[0]) return ty_app_usage_error("compare", "--out DIR is required");
  /* As if given on the command line: it overrides a --config file's epochs. */
  char steps_text[32];
  snprintf(steps_text, sizeof(steps_text), "%lld", (long long)steps);
  ty_status_free(ty_train_config_set(&cfg, "max_steps", steps_text)); /* a valid integer */
  snprintf(cfg.out, sizeof(cfg.out), "%s", out);
  ty_status_t s = ty_train_config_validate(&cfg);
  if (s) {
    rc = ty_app_usage_error("compare", "%s", ty_status_message(s));
    ty_status_free(s);
    return rc;
  }
  if (cfg.artifact[0]) {
    return ty_app_usage_error("compare", "--artifact names one backend's executable; compare "
                                         "compiles for each backend");
  }
  ty_compare_run_t runs[TY_COMPARE_MAX];
  memset(runs, 0, sizeof(runs));
  uint32_t count = 0;
  ty_app_list_t list;
  rc = ty_app_list_parse("compare", "--backends", backends, &list);
  if (rc != TY_EXIT_OK) return rc;
  if (list.count > TY_COMPARE_MAX) {
    ty_app_list_free(&list);
    return ty_app_usage_error("compare", "at most %d backends", TY_COMPARE_MAX);
  }
  for (size_t i = 0; i < list.count; ++i) {
    const char *uri = list.items[i];
    if (strlen(uri) >= sizeof(runs[count].label)) {
      ty_app_list_free(&list);
      return ty_app_usage_error("compare", "--backends: URI %zu is too long", i + 1);
    }
    if (ty_device_uri_has_option(uri, "fallback")) {
      rc = ty_app_usage_error("compare",
                              "'%s' asks for a mixed run (fallback=): compare measures each "
                              "backend's speed and memory, and refuses mixed runs; train it "
                              "with 'trainyard train' and compare the losses in metrics.jsonl",
                              uri);
      ty_app_list_free(&list); /* after the message: it names an item */
      return rc;
    }
    snprintf(runs[count].label, sizeof(runs[count].label), "%s", uri);
    snprintf(runs[count].uri, sizeof(runs[count].uri), "%s", uri);
    runs[count].ranks = 1;
    char *star = strrchr(runs[count].uri, '*');
    if (star) {
      char *end = NULL;
      long n = strtol(star + 1, &end, 10);
      if (star == runs[count].uri || !star[1] || *end || n < 2 || n > 1024) {
        rc = ty_app_usage_error("compare", "--backends: '%s': URI*N needs a number of ranks N "
                                           "from 2 to 1024 (e.g. cpu*2)", uri);
        ty_app_list_free(&list);
        return rc;
      }
      if (cfg.batch_size % n) {
        rc = ty_app_usage_error("compare", "--backends: '%s' splits each batch over %ld ranks, "
                                           "and --batch-size %lld is not a multiple of %ld",
                                uri, n, (long long)cfg.batch_size, n);
        ty_app_list_free(&list);
        return rc;
      }
      *star = '\0';
      runs[count].ranks = (int)n;
    }
    char slug[TY_CFG_WORD_MAX];
    ty_compare_slug(uri, slug, sizeof(slug));
    snprintf(runs[count].dir, sizeof(runs[count].dir), "%s/%u-%s", out, count + 1, slug);
    count++;
  }
  ty_app_list_free(&list);
  if (count < 2) return ty_app_usage_error("compare", "--backends needs two or more URIs");
  s = ty_compare_check_out(&cfg, out, runs, count);
  if (!s) s = ty_mkdir_parents(out);
  printf("trainyard compare: %lld steps of %s on %u backends; the first, %s, is the reference\n",
         (long long)steps, cfg.model[0] ? cfg.model : cfg.preset, count, runs[0].label);
  for (uint32_t k = 0; k < count && !s; ++k) {
    printf("  running on %-24s -> %s/train.log ... ", runs[k].label, runs[k].dir);
    fflush(stdout);
    s = ty_compare_train(app, &cfg, &runs[k]);
    if (!s) s = ty_compare_read(&runs[k], steps);
    if (!s) printf("done in %.1f s\n", runs[k].wall_s);
    else printf("failed\n");
  }
  double worst = 0;
  int64_t worst_step = 0;
  uint32_t worst_k = 1;
  if (!s) {
    printf("\n%6s", "step");
    for (uint32_t k = 0; k < count; ++k) printf("  %16.16s", runs[k].label);
    for (uint32_t k = 1; k < count; ++k) printf("  %12s  %12s", "abs diff", "rel diff");
    printf("\n");
    for (int64_t i = 0; i < steps; ++i) {
      printf("%6lld", (long long)(i + 1));
      for (uint32_t k = 0; k < count; ++k) printf("  %16.9f", runs[k].loss[i]);
      for (uint32_t k = 1; k < count; ++k) {
        double a = runs[0].loss[i], d = fabs(runs[k].loss[i] - a), rel = d / fmax(fabs(a), 1e-30);
        if (!(rel <= worst)) {
          worst = rel;
          worst_step = i + 1;
          worst_k = k;
        }
        printf("  %12.3e  %12.3e", d, rel);
      }
      printf("\n");
    }
    printf("\n%-24s %14s %10s %16s %s\n", "backend", "tokens/s", "vs first", "peak RSS (MiB)",
           "device");
    for (uint32_t k = 0; k < count; ++k) {
      double ratio = runs[0].mean_tok_s > 0 ? runs[k].mean_tok_s / runs[0].mean_tok_s : 0;
      printf("%-24s %14.1f %9.2fx %16.1f %s%s\n", runs[k].label, runs[k].mean_tok_s, ratio,
             runs[k].peak_rss_mib, runs[k].dram_peak[0] ? "emulated DRAM peak " : "",
             runs[k].dram_peak);
    }
    for (uint32_t k = 0; k < count; ++k) {
      if (runs[k].cycles[0]) {
        printf("%s (cost model, not host time): %s\n", runs[k].label, runs[k].cycles);
      }
    }
    printf("tokens/s is host wall-clock throughput (an emulated device runs on this host)\n");
    if (worst == 0) {
      printf("max relative loss difference: 0 (every step bit-identical)\n");
    } else {
      printf("max relative loss difference: %.3e (step %lld, %s)\n", worst, (long long)worst_step,
             runs[worst_k].label);
    }
    s = ty_compare_write_csv(out, runs, count, steps);
  }
  if (!s) {
    ty_compare_series_t series[TY_COMPARE_MAX];
    for (uint32_t k = 0; k < count; ++k) {
      series[k] = (ty_compare_series_t){runs[k].label, runs[k].loss};
    }
    char title[2048], path[TY_CFG_PATH_MAX + 32];
    const char *model = cfg.model[0] ? cfg.model : cfg.preset;
    const char *base = strrchr(model, '/');
    char sub[1536];
    snprintf(title, sizeof(title), "Training loss: %s vs %s%s", runs[0].label, runs[1].label,
             count > 2 ? " and more" : "");
    if (worst == 0) {
      snprintf(sub, sizeof(sub), "%s, %lld steps, batch %lld: every step's loss bit-identical",
               base && base[1] ? base + 1 : model, (long long)steps, (long long)cfg.batch_size);
    } else {
      snprintf(sub, sizeof(sub),
               "%s, %lld steps, batch %lld: max relative difference %.2e (step %lld)",
               base && base[1] ? base + 1 : model, (long long)steps, (long long)cfg.batch_size,
               worst, (long long)worst_step);
    }
    snprintf(path, sizeof(path), "%s/compare.svg", out);
    s = ty_compare_plot_write(path, title, sub, steps, series, count, tolerance);
    if (!s) printf("wrote %s/compare.csv and %s\n", out, path);
  }
  for (uint32_t k = 0; k < count; ++k) {
    free(runs[k].loss);
    free(runs[k].tok_s);
    free(runs[k].tokens);
  }
  if (s) return ty_app_fail("compare", s);
  if (worst > tolerance) {
    fprintf(stderr,
            "trainyard compare: the relative loss difference %.3e at step %lld (%s vs %s) "
            "exceeds the tolerance %g\n",
            worst, (long long)worst_step, runs[worst_k].label, runs[0].label, tolerance);
    return TY_EXIT_RUNTIME;
  }
  return TY_EXIT_OK;
}
