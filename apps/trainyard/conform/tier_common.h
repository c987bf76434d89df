/* What the model, step and bisect tiers share: fixture models, seeded
 * weights and batches, a runner that is either a device session or the f64
 * reference executor, and tensor comparison. Internal to conform/. */
#ifndef TY_APPS_TRAINYARD_CONFORM_TIER_COMMON_H_
#define TY_APPS_TRAINYARD_CONFORM_TIER_COMMON_H_

#include <stdbool.h>
#include <stdint.h>

#include "conform/tiers.h"
#include "graph/conform.h"
#include "graph/session.h"
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
} ty_tier_error_t;
ty_tier_error_t ty_tier_compare(const double *got, const double *want, int64_t n);

/* "reference (f64)" or the device's label. */
const char *ty_tier_against_label(ty_device_t *against);

#endif /* TY_APPS_TRAINYARD_CONFORM_TIER_COMMON_H_ */
