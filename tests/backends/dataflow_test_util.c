/* Shared pieces of the dataflow plugin's tests (dataflow_test_util.h). */
#include "dataflow_test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test_util.h"

#include "graph/ir/train_step.h"
#include "models/config.h"
#include "models/presets.h"

ty_registry_t *df_test_registry(void) {
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  return r;
}

void df_test_graph_build(df_test_kind_t kind, double dropout, df_test_graph_t *out) {
  memset(out, 0, sizeof(*out));
  ty_model_config_t config;
  TY_EXPECT_OK(ty_model_config_load(TY_TEST_FIXTURES "/models/gpt2", &config));
  TY_EXPECT_OK(ty_graph_create(&out->graph));
  ty_llm_options_t o = {.batch = DF_TEST_B, .seq = DF_TEST_T, .dtype = TY_DTYPE_F32,
                        .with_loss = true,
                        .dropout = kind == DF_TEST_INFERENCE ? 0.0 : dropout};
  TY_EXPECT_OK(ty_llm_build(out->graph, &config, &o, &out->model));
  if (kind == DF_TEST_INFERENCE) return;
  uint32_t n = out->model.param_count;
  ty_value_id_t *params = calloc(n, sizeof(*params));
  assert_non_null(params);
  for (uint32_t i = 0; i < n; ++i) params[i] = out->model.params[i].value;
  ty_train_step_params_t tp = {
      .loss = out->model.loss, .loss_seed = TY_VALUE_NONE, .params = params,
      .param_count = n,
      .optimizer = kind == DF_TEST_TRAIN_SGD ? TY_OPTIMIZER_SGD : TY_OPTIMIZER_ADAMW,
      .mode = kind == DF_TEST_ACCUMULATE ? TY_TRAIN_STEP_ACCUMULATE : TY_TRAIN_STEP_FUSED};
  TY_EXPECT_OK(ty_graph_build_train_step(out->graph, &tp));
  free(params);
}

void df_test_graph_free(df_test_graph_t *g) {
  ty_llm_deinit(&g->model);
  ty_graph_destroy(g->graph);
  memset(g, 0, sizeof(*g));
}

static void df_bind_f32(ty_session_t *s, const char *name, float v) {
  TY_EXPECT_OK(ty_session_bind(s, name, TY_DTYPE_F32, 0, NULL, &v, sizeof(v)));
}

void df_test_bind_step(const df_test_graph_t *g, ty_session_t *s, df_test_kind_t kind,
                       bool seed_ones) {
  TY_EXPECT_OK(ty_llm_init_weights(&g->model, s, 42));
  int64_t bt[2] = {DF_TEST_B, DF_TEST_T};
  int64_t tokens[DF_TEST_B * DF_TEST_T], targets[DF_TEST_B * DF_TEST_T];
  for (int i = 0; i < DF_TEST_B * DF_TEST_T; ++i) {
    tokens[i] = (i * 7 + 3) % 90;
    targets[i] = (i * 7 + 10) % 90;
  }
  TY_EXPECT_OK(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, tokens, sizeof(tokens)));
  TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
  if (seed_ones) {
    float ones[DF_TEST_B * DF_TEST_T];
    for (int i = 0; i < DF_TEST_B * DF_TEST_T; ++i) ones[i] = 1.0f;
    TY_EXPECT_OK(ty_session_bind(s, "loss_weights", TY_DTYPE_F32, 2, bt, ones, sizeof(ones)));
  }
  ty_value_id_t rng;
  ty_status_t found = ty_graph_find(g->graph, "rng", &rng);
  if (found == TY_OK) {
    int64_t two[1] = {2}, seed[2] = {7, 1};
    TY_EXPECT_OK(ty_session_bind(s, "rng", TY_DTYPE_I64, 1, two, seed, sizeof(seed)));
  }
  ty_status_free(found);
  if (kind == DF_TEST_INFERENCE || kind == DF_TEST_ACCUMULATE) return;
  df_bind_f32(s, "lr", 1e-3f);
  df_bind_f32(s, "weight_decay", 0.1f);
  df_bind_f32(s, "max_norm", 1.0f);
  if (kind == DF_TEST_TRAIN_SGD) {
    df_bind_f32(s, "momentum", 0.9f);
    return;
  }
  df_bind_f32(s, "beta1", 0.9f);
  df_bind_f32(s, "beta2", 0.95f);
  df_bind_f32(s, "eps", 1e-8f);
  int64_t step = 1;
  TY_EXPECT_OK(ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &step, sizeof(step)));
}

char *df_test_report(const ty_session_t *s) {
  char *text = NULL;
  TY_EXPECT_OK(ty_session_report(s, &text));
  assert_non_null(text);
  return text;
}

float df_test_loss(ty_session_t *s) {
  float loss = 0;
  TY_EXPECT_OK(ty_session_read(s, "loss", &loss, sizeof(loss)));
  return loss;
}

void df_test_tmpdir(char *out, size_t capacity) {
  const char *base = getenv("TMPDIR");
  snprintf(out, capacity, "%s/ty_dataflow_test_XXXXXX", base && *base ? base : "/tmp");
  assert_non_null(mkdtemp(out));
}

void df_test_rmtree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      df_test_rmtree(path);
    } else {
      unlink(path);
    }
  }
  closedir(d);
  rmdir(dir);
}

int df_test_count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  struct dirent *e;
  size_t m = strlen(suffix);
  while ((e = readdir(d)) != NULL) {
    size_t k = strlen(e->d_name);
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (!strcmp(suffix, "hidden") ? e->d_name[0] == '.'
                                  : k >= m && !strcmp(e->d_name + k - m, suffix)) {
      ++n;
    }
  }
  closedir(d);
  return n;
}
