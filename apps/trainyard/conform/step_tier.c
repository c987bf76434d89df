/* `trainyard conform --tier step`: N training steps of each fixture model
 * (the train step `trainyard train` runs: forward, backward, clipping,
 * AdamW) from the same weights and batches on the backend and on --against
 * (default cpu), with the per-step loss gap. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "conform/tier_common.h"
#include "hal/dtype.h"
#include "train/train_config.h"
#include "train/train_graph.h"

/* The largest relative loss gap of a step: f32 is the bound the opencl
 * backend's acceptance holds 20 steps of `trainyard compare` to (measured
 * backends stay below 1e-6 here); bf16 and f16 round every weight update to
 * 8 or 11 bits, which at lr 1e-2 puts correct backends up to 3e-3 apart. */
static double ty_step_tier_bound(ty_dtype_t dtype) {
  return dtype == TY_DTYPE_F32 ? 1e-4 : 2e-2;
}

/* The hyperparameters of step `step` (fixed: no schedule to blur a gap). */
static ty_status_t ty_step_tier_hparams(ty_tier_runner_t *const *runners, int64_t step) {
  static const struct {
    const char *name;
    double value;
  } hp[] = {{"lr", 1e-2},   {"weight_decay", 0.1}, {"max_norm", 1.0},
            {"beta1", 0.9}, {"beta2", 0.95},       {"eps", 1e-8}};
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < sizeof(hp) / sizeof(hp[0]); ++i) {
      TY_RETURN_IF_ERROR(ty_tier_runner_set(runners[r], hp[i].name, &hp[i].value, 1));
    }
    double t = (double)(step + 1);
    TY_RETURN_IF_ERROR(ty_tier_runner_set(runners[r], "step", &t, 1));
  }
  return TY_OK;
}

static ty_status_t ty_step_tier_scalar(ty_tier_runner_t *r, const char *name, double *out) {
  double *v = NULL;
  int64_t n = 0;
  TY_RETURN_IF_ERROR(ty_tier_runner_get(r, name, &v, &n));
  *out = n ? v[0] : NAN;
  free(v);
  return TY_OK;
}

static ty_status_t ty_step_tier_build(const ty_model_config_t *config, ty_dtype_t dtype,
                                      ty_graph_t **out_graph, ty_llm_t *out_model) {
  /* the default options' step: AdamW, f32, no levers, one process */
  ty_train_config_t cfg;
  ty_train_config_defaults(&cfg);
  ty_train_recipe_t recipe;
  TY_RETURN_IF_ERROR(ty_train_config_recipe(&cfg, &recipe));
  return ty_train_graph_build(&recipe, config, TY_TIER_BATCH, TY_TIER_SEQ, dtype,
                              TY_TRAIN_GRAPH_STEP, out_graph, out_model);
}

static ty_status_t ty_step_tier_one(ty_tier_run_t *t, const ty_tier_model_t *model) {
  const ty_tier_args_t *a = t->args;
  double bound = t->bound;
  ty_tier_pair_t p;
  ty_status_t d = TY_OK;
  ty_status_t s = ty_tier_pair_create(t, model, ty_step_tier_build, &p, &d);
  ty_tier_runner_t *const *both = p.both;
  double worst = 0.0;
  for (int64_t step = 0; step < a->steps && !s && !d; ++step) {
    double loss[2], norm[2];
    s = ty_tier_bind_batch(&model->config, a->seed, (uint64_t)step, both, 2);
    if (!s) s = ty_step_tier_hparams(both, step);
    if (!s) s = ty_tier_runner_run(&p.ref);
    if (!s) d = ty_tier_runner_run(&p.dev);
    for (int r = 0; r < 2 && !s && !d; ++r) {
      s = ty_step_tier_scalar(both[r], "loss", &loss[r]);
      if (!s) s = ty_step_tier_scalar(both[r], "grad_norm", &norm[r]);
    }
    if (s || d) break;
    double gap = fabs(loss[0] - loss[1]), rel = gap / fmax(fabs(loss[1]), 1e-30);
    bool ok = rel <= bound && isfinite(loss[0]);
    worst = fmax(worst, isfinite(rel) ? rel : INFINITY);
    if (ok) {
      t->pass++;
    } else {
      t->fail++;
    }
    if (a->only_failures && ok) continue;
    if (a->json) {
      json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:s,s:f,s:f,s:f}", "tier", "step", "model",
                            model->name, "dtype", ty_dtype_name(a->dtype), "step",
                            (json_int_t)(step + 1), "status", ok ? "pass" : "fail", "loss",
                            loss[0], "against_loss", loss[1], "bound", bound);
      json_object_set_new(o, "rel_gap", isfinite(rel) ? json_real(rel) : json_null());
      json_object_set_new(o, "grad_norm", isfinite(norm[0]) ? json_real(norm[0]) : json_null());
      json_object_set_new(o, "against_grad_norm", json_real(norm[1]));
      json_array_append_new(t->rows, o);
    } else {
      printf("%-10s %4" PRId64 " %-5s %14.9f %14.9f %10.2e %8.0e %12.6g %12.6g\n", model->name,
             step + 1, ok ? "pass" : "FAIL", loss[0], loss[1], rel, bound, norm[0], norm[1]);
    }
  }
  if (d) {
    bool unsupported = ty_tier_is_unsupported(d);
    if (unsupported) {
      t->unsupported++;
    } else {
      t->fail++;
    }
    if (a->json) {
      json_array_append_new(t->rows, json_pack("{s:s,s:s,s:s,s:s}", "tier", "step", "model",
                                               model->name, "status",
                                               unsupported ? "unsupported" : "fail", "reason",
                                               ty_status_message(d)));
    } else {
      printf("%-10s %s\n    %s\n", model->name, unsupported ? "unsupported" : "FAIL",
             ty_status_message(d));
    }
    ty_status_free(d);
  } else if (!s && !a->json) {
    printf("%-10s worst relative loss gap %.2e over %" PRId64 " steps\n", model->name, worst,
           a->steps);
  }
  ty_tier_pair_destroy(&p);
  return s;
}

int ty_conform_tier_step(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a) {
  char header[256], columns[160];
  snprintf(header, sizeof(header),
           "conform --tier step: %%s against %%s, %%u models x %" PRId64 " AdamW steps (lr "
           "1e-2, clip 1), %%s, batch %%d x %%d, seed %%" PRIu64 "; --seed N to change\n",
           a->steps);
  snprintf(columns, sizeof(columns), "%-10s %4s %-5s %14s %14s %10s %8s %12s %12s\n", "model",
           "step", "", "loss", "against", "rel_gap", "bound", "grad_norm", "against");
  return ty_tier_drive(device, against, a,
                       a->tolerance > 0 ? a->tolerance : ty_step_tier_bound(a->dtype), header,
                       columns, "step tier", "steps pass", "fail", ty_step_tier_one);
}
