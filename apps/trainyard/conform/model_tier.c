/* `trainyard conform --tier model`: each fixture model's logits, loss and
 * parameter gradients on the backend, tensor by tensor against the f64
 * reference (or --against URI). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "conform/tier_common.h"
#include "hal/dtype.h"
#include "train/train_graph.h"

/* The largest NMSE a tensor may show against the f64 reference. f32: the
 * in-tree backends stay below 3e-12 on every tensor of every fixture; 1e-9
 * leaves a wide margin for other summation orders yet catches a kernel off
 * by one part in 1e5. bf16/f16: rounding every activation to the storage
 * dtype alone (the reference kernels computing in those dtypes) reaches
 * 1.3e-3 / 4e-5 on ill-conditioned gradients (a key bias's). */
static double ty_model_tier_bound(ty_dtype_t dtype) {
  return dtype == TY_DTYPE_BF16 ? 1e-2 : dtype == TY_DTYPE_F16 ? 3e-4 : 1e-9;
}

static void ty_model_tier_row(ty_tier_run_t *t, const char *model, const char *tensor,
                              const char *status, const ty_tier_error_t *e, double bound,
                              const char *reason) {
  if (!strcmp(status, "pass")) t->pass++;
  if (!strcmp(status, "fail")) t->fail++;
  if (!strcmp(status, "unsupported")) t->unsupported++;
  if (t->args->only_failures && strcmp(status, "fail") != 0) return;
  if (t->args->json) {
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:f,s:s}", "tier", "model", "model", model,
                          "tensor", tensor, "dtype", ty_dtype_name(t->args->dtype), "status",
                          status, "bound", bound, "reason", reason ? reason : "");
    json_object_set_new(o, "nmse", e && isfinite(e->nmse) ? json_real(e->nmse) : json_null());
    json_object_set_new(o, "max_abs",
                        e && isfinite(e->max_abs) ? json_real(e->max_abs) : json_null());
    json_object_set_new(o, "worst_index", e ? json_integer(e->index) : json_null());
    json_array_append_new(t->rows, o);
    return;
  }
  char nmse[32] = "-", max_abs[32] = "-", at[32] = "-";
  if (e) {
    snprintf(nmse, sizeof(nmse), "%.2e", e->nmse);
    snprintf(max_abs, sizeof(max_abs), "%.2e", e->max_abs);
    snprintf(at, sizeof(at), "[%" PRId64 "]", e->index);
  }
  printf("%-10s %-44s %-11s %10s %8.0e %9s %s\n", model, tensor, status, nmse, bound, max_abs,
         at);
  if (reason && reason[0]) printf("    %s\n", reason);
}

/* Compares one tensor of both runners. */
static ty_status_t ty_model_tier_tensor(ty_tier_run_t *t, const char *model, const char *name,
                                        ty_tier_runner_t *dev, ty_tier_runner_t *ref,
                                        double bound) {
  double *got = NULL, *want = NULL;
  int64_t n = 0, m = 0;
  ty_status_t s = ty_tier_runner_get(dev, name, &got, &n);
  if (!s) s = ty_tier_runner_get(ref, name, &want, &m);
  if (!s && n != m) {
    s = ty_status_make(TY_CODE_INTERNAL, "%s: %lld elements on %s, %lld on %s", name,
                       (long long)n, dev->label, (long long)m, ref->label);
  }
  if (!s) {
    ty_tier_error_t e = ty_tier_compare(got, want, n);
    bool ok = e.nmse <= bound;
    char reason[256] = "";
    if (!ok) {
      snprintf(reason, sizeof(reason),
               "NMSE %.3e > %.0e; largest error %.3g at [%" PRId64 "]: %.9g where %s has %.9g",
               e.nmse, bound, e.max_abs, e.index, e.got, ref->label, e.want);
    }
    ty_model_tier_row(t, model, name, ok ? "pass" : "fail", &e, bound, reason);
  }
  free(got);
  free(want);
  return s;
}

/* One model: forward and gradients on both sides. Backend errors become
 * rows (unsupported / fail); only kit errors are returned. */
static ty_status_t ty_model_tier_build(const ty_model_config_t *config, ty_dtype_t dtype,
                                       ty_graph_t **out_graph, ty_llm_t *out_model) {
  return ty_forward_graph_build(config, TY_TIER_BATCH, TY_TIER_SEQ, dtype, TY_DTYPE_INVALID,
                                true, out_graph, out_model);
}

static ty_status_t ty_model_tier_one(ty_tier_run_t *t, const ty_tier_model_t *model) {
  ty_tier_pair_t p;
  ty_status_t d = TY_OK;
  ty_status_t s = ty_tier_pair_create(t, model, ty_model_tier_build, &p, &d);
  if (!s && !d) s = ty_tier_bind_batch(&model->config, t->args->seed, 0, p.both, 2);
  if (!s && !d) s = ty_tier_runner_run(&p.ref);
  if (!s && !d) d = ty_tier_runner_run(&p.dev);
  if (!s && !d) s = ty_model_tier_tensor(t, model->name, "logits", &p.dev, &p.ref, t->bound);
  if (!s && !d) s = ty_model_tier_tensor(t, model->name, "loss", &p.dev, &p.ref, t->bound);
  for (uint32_t i = 0; i < p.m_dev.param_count && !s && !d; ++i) {
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "grad.%s", p.m_dev.params[i].name);
    s = ty_model_tier_tensor(t, model->name, name, &p.dev, &p.ref, t->bound);
  }
  if (d) {
    ty_model_tier_row(t, model->name, "(forward and gradients)",
                      ty_tier_is_unsupported(d) ? "unsupported" : "fail", NULL, t->bound,
                      ty_status_message(d));
    ty_status_free(d);
  }
  ty_tier_pair_destroy(&p);
  return s;
}

int ty_conform_tier_model(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a) {
  char columns[128];
  snprintf(columns, sizeof(columns), "%-10s %-44s %-11s %10s %8s %9s %s\n", "model", "tensor",
           "status", "nmse", "bound", "max_abs", "at");
  return ty_tier_drive(device, against, a,
                       a->tolerance > 0 ? a->tolerance : ty_model_tier_bound(a->dtype),
                       "conform --tier model: %s against %s, %u models, %s, batch %d x %d, "
                       "seed %" PRIu64 "; --seed N to change\n",
                       columns, "model tier", "tensors pass", "fail", ty_model_tier_one);
}
