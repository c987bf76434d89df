/* Fixture models, seeded values, runners and comparisons of the model, step
 * and bisect tiers (tier_common.h). */
#include "conform/tier_common.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "hal/dtype.h"

/* Tiny configs of every family the models/ folder builds, as Hugging Face
 * config.json text (the same shapes as tests/fixtures/models, with a
 * sliding window shorter than the tier's sequence so that it masks). */
static const struct {
  const char *name, *config;
} ty_fixtures[] = {
    {"gpt2",
     "{\"model_type\": \"gpt2\", \"vocab_size\": 96, \"n_embd\": 32, \"n_head\": 2, "
     "\"n_layer\": 2, \"n_positions\": 64, \"layer_norm_epsilon\": 1e-5, "
     "\"activation_function\": \"gelu_new\", \"tie_word_embeddings\": true}"},
    {"llama",
     "{\"model_type\": \"llama\", \"vocab_size\": 96, \"hidden_size\": 32, "
     "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, "
     "\"intermediate_size\": 64, \"num_hidden_layers\": 2, \"max_position_embeddings\": 128, "
     "\"rms_norm_eps\": 1e-6, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
     "\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}"},
    {"llama3",
     "{\"model_type\": \"llama\", \"vocab_size\": 96, \"hidden_size\": 32, "
     "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, "
     "\"intermediate_size\": 64, \"num_hidden_layers\": 2, \"max_position_embeddings\": 2048, "
     "\"rms_norm_eps\": 1e-5, \"hidden_act\": \"silu\", \"tie_word_embeddings\": true, "
     "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, "
     "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
     "\"original_max_position_embeddings\": 256}}"},
    {"mistral",
     "{\"model_type\": \"mistral\", \"vocab_size\": 96, \"hidden_size\": 32, "
     "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8, "
     "\"intermediate_size\": 64, \"num_hidden_layers\": 2, \"max_position_embeddings\": 128, "
     "\"rms_norm_eps\": 1e-5, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
     "\"sliding_window\": 8, \"rope_parameters\": {\"rope_theta\": 10000.0, "
     "\"rope_type\": \"default\"}}"},
    {"qwen2",
     "{\"model_type\": \"qwen2\", \"vocab_size\": 96, \"hidden_size\": 32, "
     "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"intermediate_size\": 64, "
     "\"num_hidden_layers\": 2, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-6, "
     "\"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"use_sliding_window\": false, "
     "\"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}}"},
};
#define TY_FIXTURE_COUNT (sizeof(ty_fixtures) / sizeof(ty_fixtures[0]))

const char *ty_tier_fixture_names(void) { return "gpt2, llama, llama3, mistral, qwen2"; }

ty_status_t ty_tier_models(const ty_tier_args_t *a, ty_tier_model_t **out_models,
                           uint32_t *out_count) {
  uint32_t n = a->model_count ? a->model_count : (uint32_t)TY_FIXTURE_COUNT;
  ty_tier_model_t *models = calloc(n, sizeof(*models));
  if (!models) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = TY_OK;
  for (uint32_t i = 0; i < n && !s; ++i) {
    const char *name = a->model_count ? a->models[i] : ty_fixtures[i].name;
    snprintf(models[i].name, sizeof(models[i].name), "%s", name);
    const char *builtin = NULL;
    for (size_t f = 0; f < TY_FIXTURE_COUNT; ++f) {
      if (strcmp(ty_fixtures[f].name, name) == 0) builtin = ty_fixtures[f].config;
    }
    if (builtin) {
      s = ty_model_config_parse(builtin, name, &models[i].config);
    } else if (strchr(name, '/') || strchr(name, '.')) {
      s = ty_model_config_load(name, &models[i].config);
    } else {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "--model '%s' is neither a fixture model (%s) nor a folder "
                         "(write ./%s for a folder)",
                         name, ty_tier_fixture_names(), name);
    }
    if (!s && models[i].config.max_positions < TY_TIER_SEQ) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "--model %s has %lld positions; the tiers run %d tokens per row", name,
                         (long long)models[i].config.max_positions, TY_TIER_SEQ);
    }
  }
  if (s) {
    free(models);
    return s;
  }
  *out_models = models;
  *out_count = n;
  return TY_OK;
}

/* ---- runners ---- */

ty_status_t ty_tier_runner_create(ty_device_t *device, const ty_graph_t *graph,
                                  ty_tier_runner_t *out) {
  memset(out, 0, sizeof(*out));
  if (!device) {
    snprintf(out->label, sizeof(out->label), "reference (f64)");
    return ty_conform_host_create(graph, &out->host);
  }
  snprintf(out->label, sizeof(out->label), "%s", ty_device_label(device));
  /* The executor's guard gaps between arena slots (debug.guards, ABI 1.9),
   * as in the per-op tiers: a kernel that writes past its output inside a
   * whole model is named, not only seen as a wrong number downstream. */
  ty_session_options_t so = {.debug_guards = true, .guard_seed = 0x7479636f6e66ull};
  return ty_session_create(device, graph, &so, &out->session);
}

void ty_tier_runner_destroy(ty_tier_runner_t *r) {
  ty_session_destroy(r->session);
  ty_conform_host_destroy(r->host);
  memset(r, 0, sizeof(*r));
}

ty_status_t ty_tier_runner_set(ty_tier_runner_t *r, const char *name, const double *values,
                               int64_t count) {
  if (r->host) return ty_conform_host_set(r->host, name, values, count);
  ty_tensor_desc_t d;
  TY_RETURN_IF_ERROR(ty_session_value_desc(r->session, name, &d));
  size_t bytes = (size_t)count * ty_dtype_size(d.dtype);
  void *data = malloc(bytes ? bytes : 1);
  if (!data) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_conform_pack(d.dtype, values, count, data);
  ty_status_t s = ty_session_bind(r->session, name, d.dtype, d.rank, d.dims, data, bytes);
  free(data);
  return s;
}

ty_status_t ty_tier_runner_run(ty_tier_runner_t *r) {
  return r->host ? ty_conform_host_run(r->host) : ty_session_run(r->session);
}

ty_status_t ty_tier_runner_get(ty_tier_runner_t *r, const char *name, double **out,
                               int64_t *out_count) {
  *out = NULL;
  int64_t n = 0;
  ty_dtype_t dtype;
  ty_tensor_desc_t d;
  if (r->host) {
    TY_RETURN_IF_ERROR(ty_conform_host_desc(r->host, name, &n, &dtype));
  } else {
    TY_RETURN_IF_ERROR(ty_session_value_desc(r->session, name, &d));
    n = ty_tensor_desc_element_count(&d);
    dtype = d.dtype;
  }
  double *values = malloc((size_t)(n ? n : 1) * sizeof(double));
  if (!values) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s;
  if (r->host) {
    s = ty_conform_host_get(r->host, name, values, n);
  } else {
    size_t bytes = (size_t)n * ty_dtype_size(dtype);
    void *raw = malloc(bytes ? bytes : 1);
    s = raw ? ty_session_read(r->session, name, raw, bytes)
            : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    if (!s) ty_conform_unpack(dtype, raw, n, values);
    free(raw);
  }
  if (s) {
    free(values);
    return s;
  }
  *out = values;
  *out_count = n;
  return TY_OK;
}

/* ---- seeded values ---- */

static uint64_t ty_tier_mix(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double ty_tier_uniform(uint64_t *state) {
  return (double)(ty_tier_mix(state) >> 11) * 0x1.0p-53;
}

static uint64_t ty_tier_seed_of(uint64_t seed, const char *name) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (const char *p = name; *p; ++p) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  return h;
}

/* Sets `values` on every runner. */
static ty_status_t ty_tier_set_all(ty_tier_runner_t *const *runners, uint32_t count,
                                   const char *name, const double *values, int64_t n) {
  for (uint32_t i = 0; i < count; ++i) {
    TY_RETURN_IF_ERROR(ty_status_annotate(ty_tier_runner_set(runners[i], name, values, n),
                                          "binding '%s' on %s", name, runners[i]->label));
  }
  return TY_OK;
}

ty_status_t ty_tier_bind_weights(const ty_llm_t *model, ty_dtype_t dtype, uint64_t seed,
                                 ty_tier_runner_t *const *runners, uint32_t runner_count) {
  ty_status_t s = TY_OK;
  for (uint32_t p = 0; p < model->param_count && !s; ++p) {
    const ty_llm_param_t *param = &model->params[p];
    int64_t n = 1;
    for (uint32_t r = 0; r < param->rank; ++r) n *= param->dims[r];
    double *values = malloc((size_t)(n ? n : 1) * sizeof(double));
    void *rounded = malloc((size_t)(n ? n : 1) * 8);
    if (!values || !rounded) {
      free(values);
      free(rounded);
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
    uint64_t state = ty_tier_seed_of(seed, param->name);
    size_t len = strlen(param->name);
    bool norm_weight = param->rank == 1 && len > 7 && !strcmp(param->name + len - 7, ".weight");
    int64_t fan = param->rank == 2 ? (param->dims[0] < param->dims[1] ? param->dims[0]
                                                                      : param->dims[1])
                                   : 1;
    double a = param->rank == 2 ? sqrt(3.0 / (double)fan) : norm_weight ? 0.2 : 0.1;
    for (int64_t i = 0; i < n; ++i) {
      values[i] = (norm_weight ? 1.0 : 0.0) + a * (2.0 * ty_tier_uniform(&state) - 1.0);
    }
    /* Round to the storage dtype, so every side sees the same numbers. */
    ty_conform_pack(dtype, values, n, rounded);
    ty_conform_unpack(dtype, rounded, n, values);
    s = ty_tier_set_all(runners, runner_count, param->name, values, n);
    free(values);
    free(rounded);
  }
  return s;
}

ty_status_t ty_tier_bind_batch(const ty_model_config_t *config, uint64_t seed, uint64_t index,
                               ty_tier_runner_t *const *runners, uint32_t runner_count) {
  enum { N = TY_TIER_BATCH * TY_TIER_SEQ };
  double tokens[N + TY_TIER_BATCH], ids[N], targets[N], weights[N];
  uint64_t state = ty_tier_seed_of(seed ^ (index * 0x9e3779b97f4a7c15ull), "batch");
  for (int b = 0; b < TY_TIER_BATCH; ++b) {
    for (int t = 0; t <= TY_TIER_SEQ; ++t) {
      tokens[b * (TY_TIER_SEQ + 1) + t] =
          (double)(ty_tier_mix(&state) % (uint64_t)config->vocab_size);
    }
  }
  /* Rows of T+1 tokens: the inputs are the first T, the targets the last T;
   * one target per row is ignored (-1) so ignored targets are exercised. */
  for (int b = 0; b < TY_TIER_BATCH; ++b) {
    for (int t = 0; t < TY_TIER_SEQ; ++t) {
      ids[b * TY_TIER_SEQ + t] = tokens[b * (TY_TIER_SEQ + 1) + t];
      bool ignored = t == (int)(index + (uint64_t)b) % TY_TIER_SEQ;
      targets[b * TY_TIER_SEQ + t] = ignored ? -1.0 : tokens[b * (TY_TIER_SEQ + 1) + t + 1];
      weights[b * TY_TIER_SEQ + t] = ignored ? 0.0 : 1.0 / (double)(N - TY_TIER_BATCH);
    }
  }
  TY_RETURN_IF_ERROR(ty_tier_set_all(runners, runner_count, "tokens", ids, N));
  TY_RETURN_IF_ERROR(ty_tier_set_all(runners, runner_count, "targets", targets, N));
  return ty_tier_set_all(runners, runner_count, "loss_weights", weights, N);
}

ty_tier_error_t ty_tier_compare(const double *got, const double *want, int64_t n) {
  ty_tier_error_t e = {.nmse = 0.0, .max_abs = 0.0, .index = -1};
  double err = 0.0, ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double d = isfinite(got[i]) ? fabs(got[i] - want[i]) : INFINITY;
    if (e.index < 0 || d > e.max_abs || (isnan(d) && !isnan(e.max_abs))) {
      e.max_abs = d;
      e.index = i;
      e.got = got[i];
      e.want = want[i];
    }
    err += d * d;
    ref += want[i] * want[i];
  }
  e.nmse = err / (ref > 1e-300 ? ref : 1e-300);
  e.err2 = err;
  e.ref2 = ref;
  return e;
}

const char *ty_tier_against_label(ty_device_t *against) {
  return against ? ty_device_label(against) : "reference (f64)";
}

int ty_tier_drive(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a,
                  double bound, const char *header, const char *columns, const char *what,
                  const char *agree, const char *disagree, ty_tier_model_fn_t fn) {
  ty_tier_model_t *models = NULL;
  uint32_t count = 0;
  ty_status_t s = ty_tier_models(a, &models, &count);
  if (s) {
    int rc = ty_app_usage_error("conform", "%s", ty_status_message(s));
    ty_status_free(s);
    return rc;
  }
  ty_tier_run_t run = {.args = a, .device = device, .against = against, .bound = bound,
                       .rows = a->json ? json_array() : NULL};
  if (!a->json) {
    printf(header, ty_device_label(device), ty_tier_against_label(against), count,
           ty_dtype_name(a->dtype), TY_TIER_BATCH, TY_TIER_SEQ, a->seed);
    fputs(columns, stdout);
  }
  for (uint32_t i = 0; i < count && !s; ++i) {
    s = ty_status_annotate(fn(&run, &models[i]), "%s, %s", what, models[i].name);
  }
  free(models);
  if (!s && a->json) {
    char *text = json_dumps(run.rows, JSON_INDENT(1));
    if (text) puts(text);
    else s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing JSON");
    free(text);
  }
  json_decref(run.rows);
  if (s) return ty_app_fail("conform", s);
  fprintf(a->json ? stderr : stdout,
          "summary: %s on %s against %s: %u %s, %u %s, %u models unsupported (seed %" PRIu64
          ")%s\n",
          what, ty_device_label(device), ty_tier_against_label(against), run.pass, agree,
          run.fail, disagree, run.unsupported, a->seed, run.note);
  if (run.fail) return TY_EXIT_RUNTIME;
  if (!run.pass) {
    fprintf(stderr, "trainyard conform: %s ran none of the models; nothing was checked\n",
            ty_device_label(device));
    return TY_EXIT_RUNTIME;
  }
  return TY_EXIT_OK;
}

ty_status_t ty_tier_pair_create(const ty_tier_run_t *run, const ty_tier_model_t *model,
                                ty_tier_build_fn_t build, ty_tier_pair_t *p,
                                ty_status_t *out_device_error) {
  memset(p, 0, sizeof(*p));
  p->both[0] = &p->dev;
  p->both[1] = &p->ref;
  *out_device_error = TY_OK;
  ty_dtype_t dtype = run->args->dtype;
  TY_RETURN_IF_ERROR(build(&model->config, dtype, &p->g_dev, &p->m_dev));
  TY_RETURN_IF_ERROR(build(&model->config, run->against ? dtype : TY_DTYPE_F64, &p->g_ref,
                           &p->m_ref));
  TY_RETURN_IF_ERROR(ty_tier_runner_create(run->against, p->g_ref, &p->ref));
  *out_device_error = ty_tier_runner_create(run->device, p->g_dev, &p->dev);
  if (*out_device_error) return TY_OK;
  return ty_tier_bind_weights(&p->m_dev, dtype, run->args->seed, p->both, 2);
}

void ty_tier_pair_destroy(ty_tier_pair_t *p) {
  ty_tier_runner_destroy(&p->dev);
  ty_tier_runner_destroy(&p->ref);
  ty_llm_deinit(&p->m_dev);
  ty_llm_deinit(&p->m_ref);
  ty_graph_destroy(p->g_dev);
  ty_graph_destroy(p->g_ref);
}

bool ty_tier_is_unsupported(ty_status_t device_error) {
  ty_code_t code = ty_status_code(device_error);
  return code == TY_CODE_FAILED_PRECONDITION || code == TY_CODE_UNIMPLEMENTED;
}
