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
#include "train_graph.h"

/* The largest NMSE a tensor may show against the f64 reference. f32: the
 * in-tree backends stay below 3e-12 on every tensor of every fixture; 1e-9
 * leaves a wide margin for other summation orders yet catches a kernel off
 * by one part in 1e5. bf16/f16: rounding every activation to the storage
 * dtype alone (the reference kernels computing in those dtypes) reaches
 * 1.3e-3 / 4e-5 on ill-conditioned gradients (a key bias's). */
static double ty_model_tier_bound(ty_dtype_t dtype) {
  return dtype == TY_DTYPE_BF16 ? 1e-2 : dtype == TY_DTYPE_F16 ? 3e-4 : 1e-9;
}

typedef struct {
  const ty_tier_args_t *args;
  json_t *rows;
  uint32_t pass, fail, unsupported;
} ty_model_tier_t;

static void ty_model_tier_row(ty_model_tier_t *t, const char *model, const char *tensor,
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
static ty_status_t ty_model_tier_tensor(ty_model_tier_t *t, const char *model, const char *name,
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
static ty_status_t ty_model_tier_one(ty_model_tier_t *t, const ty_tier_model_t *model,
                                     ty_device_t *device, ty_device_t *against, double bound) {
  const ty_tier_args_t *a = t->args;
  ty_graph_t *g_dev = NULL, *g_ref = NULL;
  ty_llm_t m_dev, m_ref;
  ty_tier_runner_t dev, ref;
  memset(&dev, 0, sizeof(dev));
  memset(&ref, 0, sizeof(ref));
  ty_status_t s = ty_forward_graph_build(&model->config, TY_TIER_BATCH, TY_TIER_SEQ, a->dtype,
                                         true, &g_dev, &m_dev);
  if (!s) {
    s = ty_forward_graph_build(&model->config, TY_TIER_BATCH, TY_TIER_SEQ,
                               against ? a->dtype : TY_DTYPE_F64, true, &g_ref, &m_ref);
  }
  if (!s) s = ty_tier_runner_create(against, g_ref, &ref);
  if (!s) {
    ty_status_t d = ty_tier_runner_create(device, g_dev, &dev);
    ty_code_t code = ty_status_code(d);
    if (d) {
      ty_model_tier_row(t, model->name, "(forward and gradients)",
                        code == TY_CODE_FAILED_PRECONDITION || code == TY_CODE_UNIMPLEMENTED
                            ? "unsupported"
                            : "fail",
                        NULL, bound, ty_status_message(d));
      ty_status_free(d);
      goto done;
    }
  }
  ty_tier_runner_t *both[2] = {&dev, &ref};
  if (!s) s = ty_tier_bind_weights(&m_dev, a->dtype, a->seed, both, 2);
  if (!s) s = ty_tier_bind_batch(&model->config, a->seed, 0, both, 2);
  if (!s) s = ty_tier_runner_run(&ref);
  if (!s) {
    ty_status_t d = ty_tier_runner_run(&dev);
    if (d) {
      ty_model_tier_row(t, model->name, "(run)", "fail", NULL, bound, ty_status_message(d));
      ty_status_free(d);
      goto done;
    }
  }
  if (!s) s = ty_model_tier_tensor(t, model->name, "logits", &dev, &ref, bound);
  if (!s) s = ty_model_tier_tensor(t, model->name, "loss", &dev, &ref, bound);
  for (uint32_t p = 0; p < m_dev.param_count && !s; ++p) {
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "grad.%s", m_dev.params[p].name);
    s = ty_model_tier_tensor(t, model->name, name, &dev, &ref, bound);
  }
done:
  ty_tier_runner_destroy(&dev);
  ty_tier_runner_destroy(&ref);
  ty_llm_deinit(&m_dev);
  ty_llm_deinit(&m_ref);
  ty_graph_destroy(g_dev);
  ty_graph_destroy(g_ref);
  return s ? ty_status_annotate(s, "model tier, %s", model->name) : TY_OK;
}

int ty_conform_tier_model(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a) {
  ty_tier_model_t *models = NULL;
  uint32_t count = 0;
  ty_status_t s = ty_tier_models(a, &models, &count);
  if (s) {
    int rc = ty_app_usage_error("conform", "%s", ty_status_message(s));
    ty_status_free(s);
    return rc;
  }
  double bound = a->tolerance > 0 ? a->tolerance : ty_model_tier_bound(a->dtype);
  ty_model_tier_t t = {.args = a, .rows = a->json ? json_array() : NULL};
  if (!a->json) {
    printf("conform --tier model: %s against %s, %u models, %s, batch %d x %d, seed %" PRIu64
           "\n",
           ty_device_label(device), ty_tier_against_label(against), count,
           ty_dtype_name(a->dtype), TY_TIER_BATCH, TY_TIER_SEQ, a->seed);
    printf("%-10s %-44s %-11s %10s %8s %9s %s\n", "model", "tensor", "status", "nmse", "bound",
           "max_abs", "at");
  }
  for (uint32_t i = 0; i < count && !s; ++i) {
    s = ty_model_tier_one(&t, &models[i], device, against, bound);
  }
  free(models);
  if (!s && a->json) {
    char *text = json_dumps(t.rows, JSON_INDENT(1));
    if (text) puts(text);
    else s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing JSON");
    free(text);
  }
  json_decref(t.rows);
  if (s) return ty_app_fail("conform", s);
  fprintf(a->json ? stderr : stdout,
          "summary: model tier on %s against %s: %u tensors pass, %u fail, %u models "
          "unsupported (seed %" PRIu64 ")\n",
          ty_device_label(device), ty_tier_against_label(against), t.pass, t.fail,
          t.unsupported, a->seed);
  if (t.fail) return TY_EXIT_RUNTIME;
  if (!t.pass) {
    fprintf(stderr, "trainyard conform: %s ran none of the models; nothing was checked\n",
            ty_device_label(device));
    return TY_EXIT_RUNTIME;
  }
  return TY_EXIT_OK;
}
