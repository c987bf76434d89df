/* What the model, step and bisect tiers share: fixture models, seeded
 * weights and batches, a runner that is either a device session or the f64
 * reference executor, and tensor comparison. Internal to conform/. */
#ifndef TY_APPS_TRAINYARD_CONFORM_TIER_COMMON_H_
#define TY_APPS_TRAINYARD_CONFORM_TIER_COMMON_H_

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "conform/tiers.h"
#include "graph/conform/conform.h"
#include "graph/runtime/session.h"
#include "models/config.h"
#include "models/llm.h"

/* The tiny batch every tier runs: B rows of T tokens. */
#define TY_TIER_BATCH 2
#define TY_TIER_SEQ 16

typedef struct ty_tier_model_t {
  char name[64];             /* "gpt2" or the folder */
  ty_model_config_t config;
} ty_tier_model_t;

/* The models of a run (--model, else every built-in fixture). The caller
 * frees *out_models. INVALID_ARGUMENT naming an unknown name or a folder
 * without a usable config.json. */
ty_status_t ty_tier_models(const ty_tier_args_t *a, ty_tier_model_t **out_models,
                           uint32_t *out_count);

/* Runs a graph either on a device (a session) or on the f64 reference
 * kernels in process (the conformance kit's host executor). Values cross as
 * f64 arrays converted to and from each value's dtype. */
typedef struct ty_tier_runner_t {
  char label[64];              /* "cpu:0", "reference (f64)" */
  ty_session_t *session;       /* a device, or */
  ty_conform_host_t *host;     /* the reference */
} ty_tier_runner_t;

/* On `device` (NULL: the reference). The graph is not kept. */
ty_status_t ty_tier_runner_create(ty_device_t *device, const ty_graph_t *graph,
                                  ty_tier_runner_t *out);
void ty_tier_runner_destroy(ty_tier_runner_t *r);
/* An INPUT or STATE value. */
ty_status_t ty_tier_runner_set(ty_tier_runner_t *r, const char *name, const double *values,
                               int64_t count);
ty_status_t ty_tier_runner_run(ty_tier_runner_t *r);
/* An OUTPUT or STATE value into *out (malloc'ed; the caller frees). */
ty_status_t ty_tier_runner_get(ty_tier_runner_t *r, const char *name, double **out,
                               int64_t *out_count);

/* Binds every parameter of `model` (drawn from `seed`, rounded to `dtype`:
 * matrices uniform with variance 1/fan-in, norm weights near 1, biases
 * small) to each runner. */
ty_status_t ty_tier_bind_weights(const ty_llm_t *model, ty_dtype_t dtype, uint64_t seed,
                                 ty_tier_runner_t *const *runners, uint32_t runner_count);
/* Binds batch `index` of the run's `seed`: tokens, next-token targets (the
 * last of a row ignored) and loss weights averaging the counted targets. */
ty_status_t ty_tier_bind_batch(const ty_model_config_t *config, uint64_t seed, uint64_t index,
                               ty_tier_runner_t *const *runners, uint32_t runner_count);

/* Errors of `got` against `want` (n values). */
typedef struct ty_tier_error_t {
  double nmse;      /* INFINITY where got is not finite but want is */
  double max_abs;
  int64_t index;    /* of max_abs */
  double got, want; /* at index */
  double err2, ref2; /* sums of squared errors and of squared references */
} ty_tier_error_t;
ty_tier_error_t ty_tier_compare(const double *got, const double *want, int64_t n);

/* "reference (f64)" or the device's label. */
const char *ty_tier_against_label(ty_device_t *against);

/* One run of a tier over the models: its rows (with --json) and counts.
 * `pass` counts what agreed (tensors, steps, models), `fail` what did not,
 * `unsupported` the models the backend could not run; `note` ends the
 * summary line. */
typedef struct ty_tier_run_t {
  const ty_tier_args_t *args;
  ty_device_t *device, *against;
  double bound;
  json_t *rows;
  uint32_t pass, fail, unsupported;
  char note[512];
} ty_tier_run_t;

/* A model's graph on both sides, with weights bound. */
typedef struct ty_tier_pair_t {
  ty_graph_t *g_dev, *g_ref;
  ty_llm_t m_dev, m_ref;
  ty_tier_runner_t dev, ref;
  ty_tier_runner_t *both[2]; /* {&dev, &ref} */
} ty_tier_pair_t;

/* Builds a tier's graph of a model in a dtype. */
typedef ty_status_t (*ty_tier_build_fn_t)(const ty_model_config_t *config, ty_dtype_t dtype,
                                          ty_graph_t **out_graph, ty_llm_t *out_model);

/* Builds the graph for the device (the run's dtype) and for the other side
 * (the same dtype, or f64 for the reference), makes the other side's runner,
 * then the device's, and binds the run's weights to both. The device's own
 * error (it refuses or fails to compile the graph) goes to
 * *out_device_error; only kit errors are returned. Destroy *out either way. */
ty_status_t ty_tier_pair_create(const ty_tier_run_t *run, const ty_tier_model_t *model,
                                ty_tier_build_fn_t build, ty_tier_pair_t *out,
                                ty_status_t *out_device_error);
void ty_tier_pair_destroy(ty_tier_pair_t *pair);

/* Whether a device error means the backend refused the graph (unsupported)
 * rather than failed it. */
bool ty_tier_is_unsupported(ty_status_t device_error);

/* What a tier does for one model; backend errors are rows, only kit
 * errors are returned. */
typedef ty_status_t (*ty_tier_model_fn_t)(ty_tier_run_t *run, const ty_tier_model_t *model);

/* Runs a tier: resolves the models (a usage error for a bad --model),
 * prints `header` (a printf format taking the device, the other side, the
 * model count, the dtype, B, T and the seed) and `columns` unless --json,
 * calls `fn` per model, prints the JSON rows and the summary line
 * "summary: <what> on D against A: P <agree>, F <disagree>, U models
 * unsupported (seed S)<note>", and returns the exit code: 1 on a failure or
 * when no model ran, else 0. */
int ty_tier_drive(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a,
                  double bound, const char *header, const char *columns, const char *what,
                  const char *agree, const char *disagree, ty_tier_model_fn_t fn);

#endif /* TY_APPS_TRAINYARD_CONFORM_TIER_COMMON_H_ */
