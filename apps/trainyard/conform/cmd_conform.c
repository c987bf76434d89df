/* `trainyard conform`: runs the conformance kit (graph/conform/conform.h) on one
 * backend and reports every case: op, case, dtype, direction, status, worst
 * NMSE and its bound, as a table (one line per case as it finishes) or as
 * one JSON array. Exit 0 when nothing failed, 1 on any failure or when no
 * case could run at all, 2 on usage errors. */
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "conform/coverage.h"
#include "conform/tiers.h"
#include "graph/conform/conform.h"
#include "hal/device.h"
#include "hal/device_uri.h"
#include "hal/dtype.h"
#include "hal/file.h"

static const char *const ty_conform_usage =
    "usage: trainyard conform --backend URI [--ops PATTERN] [--dtype D]\n"
    "                         [--direction forward|backward] [--seed N]\n"
    "                         [--tier op|graph|all] [--xfail FILE] [--json]\n"
    "                         [--summary] [--only-failures]\n"
    "   or: trainyard conform --backend URI (--tier model|step | --bisect)\n"
    "                         [--against URI|reference] [--model NAME|DIR]...\n"
    "                         [--dtype D] [--steps N] [--tolerance X] [--seed N] [--json]\n"
    "   or: trainyard conform --list [--ops PATTERN] [--dtype D] [--direction DIR]\n"
    "\n"
    "Runs every op of the op set on a backend and on the reference kernels\n"
    "in f64 (the oracle, run in process), with the same random inputs\n"
    "rounded to the storage dtype, and compares each result by normalized\n"
    "mean squared error, NMSE = sum((a-b)^2) / sum(b^2), against a bound per\n"
    "op and dtype. Direction 'forward' checks the op's outputs; 'backward'\n"
    "checks the input gradients that autodiff builds from the op's gradient\n"
    "rule, for a random upstream gradient. A result fails when it is over\n"
    "its bound, holds NaN or Inf where the oracle is finite, or when the\n"
    "backend wrote outside a tensor (guard bytes) or into an input.\n"
    "\n"
    "  --backend URI     device to check, e.g. cpu, cpu?threads=2, cuda:0\n"
    "  --ops PATTERN     only ops whose name matches this glob (e.g. 'rope*')\n"
    "  --dtype D         only cases of dtype D (f32, bf16, f16, i32, i64)\n"
    "  --direction DIR   only forward or only backward\n"
    "  --seed N          the run's seed, printed; the same seed replays the same\n"
    "                    inputs. Default: from the clock for the op tiers (new\n"
    "                    inputs each run), 1234 for the model, step and bisect\n"
    "                    tiers (a near-miss fails every run, not some)\n"
    "  --tier T          op: each op alone (the per-op tier); graph: each op\n"
    "                    wrapped in a one-node inference graph (forward) or\n"
    "                    train step with an SGD update (backward), for devices\n"
    "                    that run whole graphs only; all: both. Default: all\n"
    "                    for such devices (dataflow), op for the others\n"
    "                    model: each fixture model's logits, loss and parameter\n"
    "                    gradients, tensor by tensor (default --against\n"
    "                    reference); step: --steps AdamW steps from the same\n"
    "                    weights and batches, the loss gap per step (default\n"
    "                    --against cpu)\n"
    "  --bisect          run a fixture model's forward and backward graph on both\n"
    "                    sides, read every intermediate value, and name the first\n"
    "                    node whose output diverges (default --against cpu)\n"
    "  --against URI     the other side of the model tiers: a device, or\n"
    "                    'reference' (the f64 reference kernels, in process)\n"
    "  --model NAME|DIR  a fixture model (gpt2, llama, llama3, mistral, qwen2) or\n"
    "                    a folder's config.json, repeatable; default: every fixture\n"
    "                    (weights and tokens are drawn from --seed)\n"
    "  --steps N         training steps of the step tier [5]\n"
    "  --tolerance X     the model tiers' bound instead of the default (see\n"
    "                    docs/plugin-abi.md)\n"
    "  --xfail FILE      expected failures, one a line:\n"
    "                      PATTERN DTYPE|* forward|backward|* REASON...\n"
    "                    PATTERN globs 'op' or 'op/case'; an expected failure\n"
    "                    that passes (xpass) counts as a failure\n"
    "  --json            print one JSON array, an object per case\n"
    "  --summary         after the cases, a coverage table: a line per op, a\n"
    "                    cell per dtype and direction (pass, FAIL, unsup, part)\n"
    "  --only-failures   list only the runs that failed (fail, xpass)\n"
    "  --list            list the cases and bound classes; run nothing\n"
    "  -h, --help        this help\n"
    "\n"
    "Every line gives the worst NMSE and its bound, the largest absolute error\n"
    "and the element where it is (value[flat index]), the op's shapes and the\n"
    "case's attributes; the reason is printed under every run that did not\n"
    "pass. Statuses: pass, fail, unsupported (the backend's graph_supports\n"
    "said no; not a failure unless nothing could run), xfail, xpass.\n";

static const ty_dtype_t ty_conform_dtypes[] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16,
                                               TY_DTYPE_I32, TY_DTYPE_I64};
#define TY_CONFORM_DTYPE_COUNT (sizeof(ty_conform_dtypes) / sizeof(ty_conform_dtypes[0]))

typedef struct {
  const char *backend;
  const char *ops;
  ty_dtype_t dtype; /* TY_DTYPE_INVALID: all */
  int direction;    /* -1: both */
  int tier;         /* -1: by the device; 0 op, 1 graph, 2 all */
  uint64_t seed;
  const char *xfail_path;
  bool json, list, summary, only_failures;
  /* the model tiers: --tier model|step (tier 3, 4), --bisect */
  bool bisect;
  const char *against; /* a device URI or "reference"; NULL: the tier's default */
  ty_tier_args_t model_args;
} ty_conform_args_t;

static bool ty_conform_selected(const ty_conform_args_t *a, const ty_conform_case_t *c) {
  return !a->ops || fnmatch(a->ops, c->op, 0) == 0;
}

/* Calls fn for every selected (case, dtype, direction). */
typedef bool (*ty_conform_visit_fn)(void *ctx, const ty_conform_case_t *c, ty_dtype_t dtype,
                                    ty_conform_direction_t direction);
static uint32_t ty_conform_each(const ty_conform_args_t *a, ty_conform_visit_fn fn, void *ctx) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < ty_conform_case_count(); ++i) {
    const ty_conform_case_t *c = ty_conform_case_at(i);
    if (!ty_conform_selected(a, c)) continue;
    for (size_t d = 0; d < TY_CONFORM_DTYPE_COUNT; ++d) {
      ty_dtype_t dtype = ty_conform_dtypes[d];
      if (a->dtype != TY_DTYPE_INVALID && a->dtype != dtype) continue;
      for (int dir = 0; dir < 2; ++dir) {
        if (a->direction >= 0 && a->direction != dir) continue;
        if (!ty_conform_case_has_direction(c, dtype, (ty_conform_direction_t)dir)) continue;
        ++n;
        if (fn && !fn(ctx, c, dtype, (ty_conform_direction_t)dir)) return n;
      }
    }
  }
  return n;
}

static int ty_conform_list(const ty_conform_args_t *a) {
  printf("%-22s %-20s %-16s %-12s %s\n", "op", "case", "dtypes", "bound", "backward bound");
  for (uint32_t i = 0; i < ty_conform_case_count(); ++i) {
    const ty_conform_case_t *c = ty_conform_case_at(i);
    if (!ty_conform_selected(a, c)) continue;
    if (a->dtype != TY_DTYPE_INVALID && !(c->dtypes & TY_DTYPE_BIT(a->dtype))) continue;
    if (a->direction >= 0) {
      bool has = false;
      for (size_t d = 0; d < TY_CONFORM_DTYPE_COUNT && !has; ++d) {
        has = ty_conform_case_has_direction(c, ty_conform_dtypes[d],
                                            (ty_conform_direction_t)a->direction);
      }
      if (!has) continue;
    }
    char dtypes[64];
    ty_dtype_mask_format(c->dtypes, dtypes, sizeof(dtypes));
    /* Any of its dtypes: an f16-only case (cast f16-to-f32) has a backward
     * too, and `--list` is what docs and scripts count runs from. */
    bool bwd = false;
    for (size_t d = 0; d < TY_CONFORM_DTYPE_COUNT && !bwd; ++d) {
      bwd = ty_conform_case_has_direction(c, ty_conform_dtypes[d], TY_CONFORM_BACKWARD);
    }
    printf("%-22s %-20s %-16s %-12s %s\n", c->op, c->name, dtypes, c->bound->name,
           bwd ? c->bwd_bound->name : "-");
    printf("    inputs %s%s%s\n", c->inputs, c->attrs[0] ? "  attrs " : "", c->attrs);
  }
  printf("\nBound classes (largest NMSE accepted):\n");
  for (uint32_t i = 0; i < ty_conform_bound_count(); ++i) {
    const ty_conform_bound_t *b = ty_conform_bound_at(i);
    printf("  %-12s f32 %.0e  bf16 %.0e  f16 %.0e\n      %s\n", b->name, b->f32, b->bf16,
           b->f16, b->why);
  }
  return TY_EXIT_OK;
}

/* ---- a run ---- */

typedef struct {
  ty_device_t *device;
  const ty_conform_args_t *args;
  ty_conform_options_t options;
  ty_conform_result_t *results;
  uint32_t count, capacity;
  uint32_t tally[5];
  uint32_t tier_tally[2][5];
  ty_status_t error; /* a failure of the kit itself */
} ty_conform_run_t;

static bool ty_conform_is_failure(const ty_conform_result_t *r) {
  return r->status == TY_CONFORM_FAIL || r->status == TY_CONFORM_XPASS;
}

/* One line per run: its identity, verdict, worst NMSE and bound, the largest
 * absolute error and where, the op's shapes and the case's attributes; the
 * reason under every run that did not pass. */
static void ty_conform_print_row(const ty_conform_result_t *r) {
  char nmse[32] = "-", max_abs[32] = "-", at[40] = "-";
  if (!isnan(r->nmse)) snprintf(nmse, sizeof(nmse), "%.2e", r->nmse);
  if (!isnan(r->max_abs)) snprintf(max_abs, sizeof(max_abs), "%.2e", r->max_abs);
  if (r->max_abs_index >= 0) {
    snprintf(at, sizeof(at), "%s[%lld]", r->worst, (long long)r->max_abs_index);
  }
  printf("%-22s %-20s %-5s %-9s %-12s %10s %8.0e %9s %-10s %s%s%s\n", r->test_case->op,
         r->test_case->name, ty_dtype_name(r->dtype), ty_conform_direction_name(r->direction),
         ty_conform_status_name(r->status), nmse, r->bound, max_abs, at, r->shapes,
         r->test_case->attrs[0] ? " " : "", r->test_case->attrs);
  if (r->status != TY_CONFORM_PASS) printf("    %s\n", r->reason);
  fflush(stdout);
}

static bool ty_conform_visit(void *ctx, const ty_conform_case_t *c, ty_dtype_t dtype,
                             ty_conform_direction_t direction) {
  ty_conform_run_t *run = ctx;
  if (run->count == run->capacity) {
    uint32_t capacity = run->capacity ? run->capacity * 2 : 256;
    ty_conform_result_t *grown = realloc(run->results, capacity * sizeof(*grown));
    if (!grown) {
      run->error = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return false;
    }
    run->results = grown;
    run->capacity = capacity;
  }
  ty_conform_result_t *r = &run->results[run->count];
  run->error = ty_conform_run_case(run->device, c, dtype, direction, &run->options, r);
  if (run->error) return false;
  run->count++;
  run->tally[r->status]++;
  run->tier_tally[r->tier][r->status]++;
  if (!run->args->json && (!run->args->only_failures || ty_conform_is_failure(r))) {
    ty_conform_print_row(r);
  }
  return true;
}

static json_t *ty_conform_json(const ty_conform_run_t *run) {
  json_t *array = json_array();
  for (uint32_t i = 0; i < run->count; ++i) {
    const ty_conform_result_t *r = &run->results[i];
    if (run->args->only_failures && !ty_conform_is_failure(r)) continue;
    json_t *o = json_object();
    json_object_set_new(o, "tier", json_string(ty_conform_tier_name(r->tier)));
    json_object_set_new(o, "op", json_string(r->test_case->op));
    json_object_set_new(o, "case", json_string(r->test_case->name));
    json_object_set_new(o, "dtype", json_string(ty_dtype_name(r->dtype)));
    json_object_set_new(o, "direction", json_string(ty_conform_direction_name(r->direction)));
    json_object_set_new(o, "status", json_string(ty_conform_status_name(r->status)));
    json_object_set_new(o, "nmse", isfinite(r->nmse) ? json_real(r->nmse) : json_null());
    json_object_set_new(o, "bound", json_real(r->bound));
    json_object_set_new(o, "ref_nmse",
                        isfinite(r->ref_nmse) ? json_real(r->ref_nmse) : json_null());
    json_object_set_new(o, "worst", json_string(r->worst));
    json_object_set_new(o, "max_abs", isfinite(r->max_abs) ? json_real(r->max_abs) : json_null());
    json_object_set_new(o, "worst_index",
                        r->max_abs_index >= 0 ? json_integer(r->max_abs_index) : json_null());
    json_object_set_new(o, "worst_got",
                        isfinite(r->max_abs_got) && r->max_abs_index >= 0
                            ? json_real(r->max_abs_got) : json_null());
    json_object_set_new(o, "worst_want",
                        isfinite(r->max_abs_want) && r->max_abs_index >= 0
                            ? json_real(r->max_abs_want) : json_null());
    json_object_set_new(o, "shapes", json_string(r->shapes));
    json_object_set_new(o, "attrs", json_string(r->test_case->attrs));
    json_object_set_new(o, "seed", json_integer((json_int_t)run->options.seed));
    json_object_set_new(o, "reason", json_string(r->reason));
    json_array_append_new(array, o);
  }
  return array;
}

/* --xfail: one "op case dtype direction reason" line per expected failure. */
static const ty_file_kind_t ty_xfail_file_kind = {
    .what = "--xfail file", .max_bytes = TY_MIB, .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT, .skip_bom = true};

/* Reads the --xfail file and appends the backend's built-in list. */
static int ty_conform_load_xfails(const ty_conform_args_t *a, const char *backend,
                                  ty_conform_xfail_t **out, uint32_t *out_count) {
  *out = NULL;
  *out_count = 0;
  ty_conform_xfail_t *file_list = NULL;
  uint32_t file_count = 0;
  if (a->xfail_path) {
    char *text = NULL;
    size_t size = 0;
    /* Past its cap an error (it used to be cut silently at 1 MiB), and a
     * folder is an error, not an empty list. */
    ty_status_t read = ty_file_read(a->xfail_path, &ty_xfail_file_kind, &text, &size);
    if (read) {
      int rc = ty_app_usage_error("conform", "%s", ty_status_message(read));
      ty_status_free(read);
      return rc;
    }
    ty_status_t s = ty_conform_xfails_parse(text, &file_list, &file_count);
    free(text);
    if (s) {
      int rc = ty_app_usage_error("conform", "%s: %s", a->xfail_path, ty_status_message(s));
      ty_status_free(s);
      return rc;
    }
  }
  const ty_conform_xfail_t *builtin;
  uint32_t builtin_count;
  ty_conform_builtin_xfails(backend, &builtin, &builtin_count);
  *out = calloc(file_count + builtin_count + 1, sizeof(**out));
  if (!*out) {
    free(file_list);
    return ty_app_fail("conform", ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory"));
  }
  if (file_count) memcpy(*out, file_list, file_count * sizeof(**out));
  if (builtin_count) memcpy(*out + file_count, builtin, builtin_count * sizeof(**out));
  *out_count = file_count + builtin_count;
  free(file_list);
  return TY_EXIT_OK;
}

static bool ty_conform_is_reference(const char *uri) {
  ty_device_uri_t parsed;
  ty_status_t s = ty_device_uri_parse(uri, &parsed);
  if (s) {
    ty_status_free(s);
    return false;
  }
  const char *kernels = ty_device_uri_option(&parsed, "kernels");
  bool reference = kernels && strcmp(kernels, "reference") == 0;
  ty_device_uri_deinit(&parsed);
  return reference;
}

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ty_conform_finish(ty_conform_run_t *run, double seconds) {
  const ty_conform_args_t *a = run->args;
  FILE *info = a->json ? stderr : stdout;
  for (int t = a->tier == 1 ? 1 : 0; a->summary && t <= (a->tier == 0 ? 0 : 1); ++t) {
    ty_conform_print_coverage(info, run->results, run->count, (ty_conform_tier_t)t);
  }
  fprintf(info,
          "summary: %u runs on %s: %u pass, %u fail, %u unsupported, %u xfail, %u xpass "
          "(seed %" PRIu64 ", %.1f s)\n",
          run->count, a->backend, run->tally[TY_CONFORM_PASS], run->tally[TY_CONFORM_FAIL],
          run->tally[TY_CONFORM_UNSUPPORTED], run->tally[TY_CONFORM_XFAIL],
          run->tally[TY_CONFORM_XPASS], run->options.seed, seconds);
  for (int t = 0; t < 2 && a->tier == 2; ++t) {
    const uint32_t *k = run->tier_tally[t];
    fprintf(info, "  %s tier: %u pass, %u fail, %u unsupported, %u xfail, %u xpass\n",
            ty_conform_tier_name((ty_conform_tier_t)t), k[TY_CONFORM_PASS], k[TY_CONFORM_FAIL],
            k[TY_CONFORM_UNSUPPORTED], k[TY_CONFORM_XFAIL], k[TY_CONFORM_XPASS]);
  }
  uint32_t failed = run->tally[TY_CONFORM_FAIL] + run->tally[TY_CONFORM_XPASS];
  if (failed) {
    fprintf(stderr, "trainyard conform: %u of %u runs failed on %s:", failed, run->count,
            a->backend);
    uint32_t shown = 0;
    for (uint32_t i = 0; i < run->count && shown < 8; ++i) {
      const ty_conform_result_t *r = &run->results[i];
      if (r->status != TY_CONFORM_FAIL && r->status != TY_CONFORM_XPASS) continue;
      fprintf(stderr, "%s %s/%s (%s %s%s)", shown++ ? "," : "", r->test_case->op,
              r->test_case->name, ty_dtype_name(r->dtype),
              ty_conform_direction_name(r->direction),
              r->tier == TY_CONFORM_TIER_GRAPH ? ", whole-graph" : "");
    }
    fprintf(stderr, "%s; replay with --seed %" PRIu64 "\n", failed > shown ? ", ..." : "",
            run->options.seed);
    return TY_EXIT_RUNTIME;
  }
  if (run->count && run->tally[TY_CONFORM_UNSUPPORTED] == run->count) {
    fprintf(stderr,
            "trainyard conform: %s ran none of the %u selected cases: every one is "
            "unsupported (%s); nothing was checked\n",
            a->backend, run->count, run->results[0].reason);
    return TY_EXIT_RUNTIME;
  }
  return TY_EXIT_OK;
}

static int ty_conform_execute(ty_app_t *app, const ty_conform_args_t *a) {
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  ty_status_t s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open("conform", registry, a->backend, &device, NULL);
  if (s) {
    ty_registry_destroy(registry);
    return ty_app_fail("conform", s);
  }
  ty_conform_args_t resolved = *a;
  if (resolved.tier < 0) resolved.tier = ty_device_info(device)->whole_graphs_only ? 2 : 0;
  a = &resolved;
  ty_conform_run_t run = {.device = device, .args = a};
  ty_conform_xfail_t *xfails = NULL;
  uint32_t xfail_count = 0;
  int rc = ty_conform_load_xfails(a, ty_backend_name(ty_device_backend(device)), &xfails,
                                  &xfail_count);
  if (rc == TY_EXIT_OK) {
    run.options = (ty_conform_options_t){
        .seed = a->seed, .guard_bytes = 256, .xfails = xfails, .xfail_count = xfail_count};
    FILE *info = a->json ? stderr : stdout;
    uint32_t total = ty_conform_each(a, NULL, NULL) * (a->tier == 2 ? 2 : 1);
    if (!a->json) {
      printf("conform: %s (%s, backend %s %s), %u runs, seed %" PRIu64 ", %u expected "
             "failures listed\n",
             a->backend, ty_device_label(device), ty_backend_name(ty_device_backend(device)),
             ty_backend_version(ty_device_backend(device)), total, a->seed, xfail_count);
    }
    if (ty_conform_is_reference(a->backend)) {
      fprintf(info,
              "notice: %s runs the reference kernels: the backend IS the oracle, so passing "
              "is trivial here (it checks the kit, the graph plumbing and the rounding to "
              "storage dtypes, not kernels)\n",
              a->backend);
    }
    if (ty_device_info(device)->whole_graphs_only && a->tier != 0) {
      fprintf(info,
              "notice: %s runs whole train steps and inference graphs only: the per-op tier "
              "is expected to be unsupported (per-op execution); the whole-graph tier wraps "
              "each op in a one-node inference graph (forward) or train step (backward)\n",
              a->backend);
    }
    double start = ty_now();
    for (int t = a->tier == 1 ? 1 : 0; t <= (a->tier == 0 ? 0 : 1) && !run.error; ++t) {
      run.options.tier = (ty_conform_tier_t)t;
      if (!a->json) {
        if (a->tier == 2) printf("\n-- %s tier --\n", ty_conform_tier_name((ty_conform_tier_t)t));
        printf("%-22s %-20s %-5s %-9s %-12s %10s %8s %9s %-10s %s\n", "op", "case", "dtype",
               "direction", "status", "nmse", "bound", "max_abs", "at", "shapes/attrs");
      }
      ty_conform_each(a, ty_conform_visit, &run);
    }
    if (run.error) {
      rc = ty_app_fail("conform", run.error);
    } else {
      if (a->json) {
        json_t *root = ty_conform_json(&run);
        char *text = root ? json_dumps(root, JSON_INDENT(1)) : NULL;
        json_decref(root);
        if (!text) {
          rc = ty_app_fail("conform", ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                                     "out of memory writing JSON"));
        } else {
          puts(text);
          free(text);
        }
      }
      if (rc == TY_EXIT_OK) rc = ty_conform_finish(&run, ty_now() - start);
    }
  }
  free(run.results);
  free(xfails);
  ty_device_close(device);
  ty_registry_destroy(registry);
  return rc;
}

/* The model, step and bisect tiers (conform/tiers.h): the device, the other
 * side (a device, or NULL for the f64 reference), and the tier. */
static int ty_conform_models(ty_app_t *app, ty_conform_args_t *a) {
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL, *against = NULL;
  const char *other = a->against ? a->against : a->tier == 3 ? "reference" : "cpu";
  ty_status_t s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open("conform", registry, a->backend, &device, NULL);
  if (!s && strcmp(other, "reference") != 0) {
    s = ty_app_device_open("conform", registry, other, &against, NULL);
    if (s) s = ty_status_annotate(s, "--against %s", other);
  }
  int rc;
  if (s) {
    rc = ty_app_fail("conform", s);
  } else {
    a->model_args.seed = a->seed;
    a->model_args.json = a->json;
    a->model_args.only_failures = a->only_failures;
    rc = a->bisect     ? ty_conform_bisect(device, against, &a->model_args)
         : a->tier == 3 ? ty_conform_tier_model(device, against, &a->model_args)
                        : ty_conform_tier_step(device, against, &a->model_args);
  }
  ty_device_close(against);
  ty_device_close(device);
  ty_registry_destroy(registry);
  return rc;
}

/* Usage checks of the model tiers, then the run. */
static int ty_conform_models_checked(ty_app_t *app, ty_conform_args_t *a) {
  if (a->bisect && a->tier >= 0 && a->tier != 3) {
    return ty_app_usage_error("conform", "--bisect runs a model graph of its own; drop --tier");
  }
  if (a->ops || a->direction >= 0 || a->xfail_path || a->summary) {
    return ty_app_usage_error("conform",
                              "--ops, --direction, --xfail and --summary belong to the op and "
                              "graph tiers, not to --tier model, --tier step or --bisect");
  }
  if (a->model_args.steps && a->tier != 4) {
    return ty_app_usage_error("conform", "--steps goes with --tier step");
  }
  ty_dtype_t dtype = a->dtype == TY_DTYPE_INVALID ? TY_DTYPE_F32 : a->dtype;
  if (!ty_dtype_is_float(dtype) || dtype == TY_DTYPE_F64) {
    return ty_app_usage_error("conform", "the model tiers run f32, bf16 or f16, not %s",
                              ty_dtype_name(dtype));
  }
  a->model_args.dtype = dtype;
  if (!a->model_args.steps) a->model_args.steps = 5;
  return ty_conform_models(app, a);
}

int ty_cmd_conform(ty_app_t *app, int argc, char **argv) {
  static const struct option long_options[] = {
      {"backend", required_argument, NULL, 'b'}, {"ops", required_argument, NULL, 'o'},
      {"dtype", required_argument, NULL, 'd'},   {"direction", required_argument, NULL, 'r'},
      {"seed", required_argument, NULL, 's'},    {"xfail", required_argument, NULL, 'x'},
      {"tier", required_argument, NULL, 'T'},
      {"json", no_argument, NULL, 'j'},          {"list", no_argument, NULL, 'l'},
      {"summary", no_argument, NULL, 'S'},       {"only-failures", no_argument, NULL, 'F'},
      {"bisect", no_argument, NULL, 'B'},        {"against", required_argument, NULL, 'A'},
      {"model", required_argument, NULL, 'M'},   {"steps", required_argument, NULL, 'N'},
      {"tolerance", required_argument, NULL, 'E'},
      {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
  };
  ty_conform_args_t a = {.dtype = TY_DTYPE_INVALID, .direction = -1, .tier = -1};
  bool have_seed = false;
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values("conform", argc, argv, ":h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    switch (c) {
      case 'b': a.backend = optarg; break;
      case 'o': a.ops = optarg; break;
      case 'd': {
        bool known = false;
        for (size_t d = 0; d < TY_CONFORM_DTYPE_COUNT; ++d) {
          if (strcmp(optarg, ty_dtype_name(ty_conform_dtypes[d])) == 0) {
            a.dtype = ty_conform_dtypes[d];
            known = true;
          }
        }
        if (!known) {
          return ty_app_usage_error("conform",
                                    "--dtype '%s' is not one of f32, bf16, f16, i32, i64",
                                    optarg);
        }
        break;
      }
      case 'r':
        if (strcmp(optarg, "forward") == 0) a.direction = TY_CONFORM_FORWARD;
        else if (strcmp(optarg, "backward") == 0) a.direction = TY_CONFORM_BACKWARD;
        else return ty_app_usage_error("conform", "--direction '%s' is not forward or backward", optarg);
        break;
      case 's': {
        char *end = NULL;
        a.seed = strtoull(optarg, &end, 10);
        if (!*optarg || *end || optarg[0] == '-' || a.seed > (UINT64_C(1) << 53)) {
          return ty_app_usage_error("conform", "--seed '%s' is not an integer in [0, 2^53]",
                                    optarg);
        }
        have_seed = true;
        break;
      }
      case 'x': a.xfail_path = optarg; break;
      case 'T':
        if (strcmp(optarg, "op") == 0) a.tier = 0;
        else if (strcmp(optarg, "graph") == 0) a.tier = 1;
        else if (strcmp(optarg, "all") == 0) a.tier = 2;
        else if (strcmp(optarg, "model") == 0) a.tier = 3;
        else if (strcmp(optarg, "step") == 0) a.tier = 4;
        else return ty_app_usage_error("conform", "--tier '%s' is not op, graph, all, model or step", optarg);
        break;
      case 'j': a.json = true; break;
      case 'S': a.summary = true; break;
      case 'B': a.bisect = true; break;
      case 'A': a.against = optarg; break;
      case 'M':
        if (a.model_args.model_count == TY_TIER_MAX_MODELS) {
          return ty_app_usage_error("conform", "more than %d --model options", TY_TIER_MAX_MODELS);
        }
        a.model_args.models[a.model_args.model_count++] = optarg;
        break;
      case 'N': {
        char *end = NULL;
        long long v = strtoll(optarg, &end, 10);
        if (!*optarg || *end || v < 1 || v > 100000) {
          return ty_app_usage_error("conform", "--steps '%s' is not an integer in [1, 100000]",
                                    optarg);
        }
        a.model_args.steps = v;
        break;
      }
      case 'E': {
        char *end = NULL;
        a.model_args.tolerance = strtod(optarg, &end);
        if (!*optarg || *end || !(a.model_args.tolerance > 0)) {
          return ty_app_usage_error("conform", "--tolerance '%s' is not a positive number",
                                    optarg);
        }
        break;
      }
      case 'F': a.only_failures = true; break;
      case 'l': a.list = true; break;
      case 'h': fputs(ty_conform_usage, stdout); return TY_EXIT_OK;
      case ':':
        return ty_app_usage_error("conform", "option '%s' needs a value", argv[optind - 1]);
      default:
        return ty_app_usage_error("conform", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) {
    return ty_app_usage_error("conform", "unexpected argument '%s'", argv[optind]);
  }
  if (a.ops) {
    bool any = false;
    for (uint32_t i = 0; i < ty_conform_case_count() && !any; ++i) {
      any = fnmatch(a.ops, ty_conform_case_at(i)->op, 0) == 0;
    }
    if (!any) {
      return ty_app_usage_error("conform",
                                "--ops '%s' matches no op ('trainyard conform --list' "
                                "shows them)",
                                a.ops);
    }
  }
  if (a.list) {
    /* --list runs nothing: the options of a run would do nothing. */
    const char *unused = a.backend ? "--backend" : have_seed ? "--seed" : a.xfail_path ? "--xfail"
                         : a.tier >= 0 ? "--tier" : a.json ? "--json" : a.summary ? "--summary"
                         : a.only_failures ? "--only-failures" : a.bisect ? "--bisect"
                         : a.against ? "--against" : a.model_args.model_count ? "--model"
                         : a.model_args.steps ? "--steps"
                         : a.model_args.tolerance > 0 ? "--tolerance" : NULL;
    if (unused) {
      return ty_app_usage_error("conform", "%s has no effect with --list (it runs nothing; "
                                           "--list takes --ops, --dtype and --direction)",
                                unused);
    }
    return ty_conform_list(&a);
  }
  if (!a.backend) return ty_app_usage_error("conform", "--backend URI is required");
  bool model_tiers = a.tier >= 3 || a.bisect;
  if (!have_seed && model_tiers) a.seed = TY_TIER_DEFAULT_SEED;
  if (!have_seed && !model_tiers) {
    a.seed = ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0xffffffffu;
  }
  if (model_tiers) return ty_conform_models_checked(app, &a);
  if (a.against || a.model_args.model_count || a.model_args.steps || a.model_args.tolerance > 0) {
    return ty_app_usage_error("conform",
                              "--against, --model, --steps and --tolerance go with --tier "
                              "model, --tier step or --bisect");
  }
  if (ty_conform_each(&a, NULL, NULL) == 0) {
    return ty_app_usage_error("conform", "no case matches --ops, --dtype and --direction");
  }
  return ty_conform_execute(app, &a);
}
