/* End-to-end test of `trainyard forward` against transformers: for every
 * model fixture (gpt2, llama with GQA, llama3 with llama3 RoPE and tied
 * embeddings, qwen2 with q/k/v bias, mistral), the command's logits and every
 * grad.* must match what transformers computed in float64 with relative
 * error ||a-b||/||b|| <= 1e-5, and the loss within 1e-5 absolute. Also the
 * sharded and bf16 checkpoints, and the command's bad inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/test_util.h"
#include "models/safetensors.h"

static char g_tmp[256];

/* Runs a shell command; returns its exit status. */
static int run(const char *cmd) {
  int rc = system(cmd);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static double *as_f64(const ty_safetensors_tensor_t *t) {
  double *out = malloc((size_t)t->element_count * sizeof(double));
  assert_non_null(out);
  TY_EXPECT_OK(ty_safetensors_tensor_read(t, TY_DTYPE_F64, out,
                                          (size_t)t->element_count * sizeof(double)));
  return out;
}

static double rel_error(const ty_safetensors_tensor_t *got, const ty_safetensors_tensor_t *want) {
  assert_int_equal(got->element_count, want->element_count);
  double *a = as_f64(got), *b = as_f64(want), num = 0, den = 0;
  for (uint64_t i = 0; i < got->element_count; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  free(a);
  free(b);
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Writes the fixture's input_ids as the JSON token file. */
static void write_tokens(const ty_safetensors_file_t *expected, const char *path) {
  const ty_safetensors_tensor_t *ids = ty_safetensors_file_find(expected, "input_ids");
  assert_non_null(ids);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  const int64_t *data = ids->data;
  fputc('[', f);
  for (int64_t b = 0; b < ids->dims[0]; ++b) {
    fprintf(f, "%s[", b ? "," : "");
    for (int64_t t = 0; t < ids->dims[1]; ++t) {
      fprintf(f, "%s%lld", t ? "," : "", (long long)data[b * ids->dims[1] + t]);
    }
    fputc(']', f);
  }
  fputs("]\n", f);
  fclose(f);
}

/* Runs forward on model `dir` and compares with `expected_name` in `ref_dir`. */
static void check_model(const char *dir, const char *ref_dir, const char *expected_name,
                        const char *logits_key, const char *extra, double logits_bound,
                        double loss_bound, bool grads) {
  char path[512], cmd[2048], tokens[512], out[512];
  snprintf(path, sizeof(path), "%s/%s/%s", TY_TEST_MODEL_DIR, ref_dir, expected_name);
  ty_safetensors_file_t *expected = NULL;
  TY_EXPECT_OK(ty_safetensors_open(path, &expected));
  snprintf(tokens, sizeof(tokens), "%s/%s.tokens.json", g_tmp, dir);
  snprintf(out, sizeof(out), "%s/%s.out.safetensors", g_tmp, dir);
  write_tokens(expected, tokens);
  snprintf(cmd, sizeof(cmd), "%s forward --model %s/%s --tokens %s --out %s %s %s",
           TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR, dir, tokens, out, grads ? "--grads" : "",
           extra);
  assert_int_equal(run(cmd), 0);
  ty_safetensors_file_t *got = NULL;
  TY_EXPECT_OK(ty_safetensors_open(out, &got));
  const ty_safetensors_tensor_t *logits = ty_safetensors_file_find(got, "logits");
  const ty_safetensors_tensor_t *loss = ty_safetensors_file_find(got, "loss");
  assert_non_null(logits);
  assert_non_null(loss);
  assert_int_equal(logits->dtype, TY_DTYPE_F32);
  assert_int_equal(loss->element_count, 1);
  const ty_safetensors_tensor_t *want_logits = ty_safetensors_file_find(expected, logits_key);
  assert_non_null(want_logits);
  double e = rel_error(logits, want_logits);
  printf("%-14s %s logits rel %.3g", dir, extra, e);
  assert_true(e <= logits_bound);
  const ty_safetensors_tensor_t *want_loss = ty_safetensors_file_find(expected, "loss");
  if (want_loss) { /* the bf16 fixtures carry logits only */
    double *lg = as_f64(loss), *lw = as_f64(want_loss);
    double loss_err = fabs(lg[0] - lw[0]);
    printf(", loss abs %.3g", loss_err);
    assert_true(loss_err <= loss_bound);
    free(lg);
    free(lw);
  }
  if (grads) {
    double worst = 0;
    size_t count = 0;
    for (size_t i = 0; i < ty_safetensors_file_tensor_count(expected); ++i) {
      const ty_safetensors_tensor_t *w = ty_safetensors_file_tensor_at(expected, i);
      if (strncmp(w->name, "grad.", 5) != 0) continue;
      const ty_safetensors_tensor_t *g = ty_safetensors_file_find(got, w->name);
      if (!g) fail_msg("%s: output lacks %s", dir, w->name);
      assert_int_equal(g->rank, w->rank);
      assert_memory_equal(g->dims, w->dims, w->rank * sizeof(int64_t));
      double r = rel_error(g, w);
      if (r > worst) worst = r;
      if (r > 1e-5) fail_msg("%s: %s relative error %.3g > 1e-5", dir, w->name, r);
      ++count;
    }
    /* ... and nothing more: one gradient per checkpoint parameter. */
    size_t got_grads = 0;
    for (size_t i = 0; i < ty_safetensors_file_tensor_count(got); ++i) {
      got_grads += strncmp(ty_safetensors_file_tensor_at(got, i)->name, "grad.", 5) == 0;
    }
    assert_int_equal(got_grads, count);
    printf(", %zu grads, worst rel %.3g", count, worst);
  }
  printf("\n");
  ty_safetensors_close(got);
  ty_safetensors_close(expected);
}

static void test_families_match_transformers(void **state) {
  (void)state;
  const char *models[] = {"gpt2", "llama", "llama3", "qwen2", "mistral"};
  for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); ++i) {
    check_model(models[i], models[i], "expected.safetensors", "logits", "", 1e-5, 1e-5,
                true);
  }
}

static void test_sharded_checkpoint(void **state) {
  (void)state;
  /* The same weights as llama, in three shards with an index. */
  check_model("llama_sharded", "llama", "expected.safetensors", "logits", "", 1e-5, 1e-5,
              true);
}

static void test_bf16_checkpoints(void **state) {
  (void)state;
  /* bf16 weights computed in f32 against transformers' own f64 run of the
   * same bf16 weights: bf16 rounding is in the inputs only. */
  check_model("gpt2_bf16", "gpt2_bf16", "expected_bf16.safetensors", "logits_f64", "", 1e-5,
              1e-5, false);
  check_model("llama_bf16", "llama_bf16", "expected_bf16.safetensors", "logits_f64", "", 1e-5,
              1e-5, false);
  /* Computing in bf16 throughout: within bf16 tolerance of transformers'
   * own bf16 run (both round every op's result to bf16, in different
   * places, so they differ by a few bf16 ulps). */
  check_model("gpt2_bf16", "gpt2_bf16", "expected_bf16.safetensors", "logits",
              "--dtype bf16", 3e-2, 0, false);
  check_model("llama_bf16", "llama_bf16", "expected_bf16.safetensors", "logits",
              "--dtype bf16", 3e-2, 0, false);
}

static void test_bad_inputs(void **state) {
  (void)state;
  char cmd[2048], path[512];
  snprintf(path, sizeof(path), "%s/bad_tokens.json", g_tmp);
  FILE *f = fopen(path, "w");
  fputs("[[1,2,3],[4,5]]", f);
  fclose(f);
  snprintf(cmd, sizeof(cmd), "%s forward --model %s/gpt2 --tokens %s --out %s/x 2>%s/err.txt",
           TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR, path, g_tmp, g_tmp);
  assert_int_equal(run(cmd), 1);
  f = fopen(path, "w");
  fputs("[[1,2,99999]]", f);
  fclose(f);
  assert_int_equal(run(cmd), 1);
  snprintf(cmd, sizeof(cmd), "%s forward --model /nonexistent --tokens %s --out %s/x 2>/dev/null",
           TY_TEST_TRAINYARD, path, g_tmp);
  assert_int_equal(run(cmd), 1);
  snprintf(cmd, sizeof(cmd), "%s forward --model %s/gpt2 2>/dev/null", TY_TEST_TRAINYARD,
           TY_TEST_MODEL_DIR);
  assert_int_equal(run(cmd), 2);
  snprintf(cmd, sizeof(cmd), "%s forward --bogus 2>/dev/null", TY_TEST_TRAINYARD);
  assert_int_equal(run(cmd), 2);
  snprintf(cmd, sizeof(cmd), "%s forward --help >/dev/null", TY_TEST_TRAINYARD);
  assert_int_equal(run(cmd), 0);
}

/* --dump-graph writes the canonical text and the Graphviz form. */
static void test_dump_graph(void **state) {
  (void)state;
  char cmd[2048], tokens[512], prefix[512], path[600], buf[256];
  snprintf(tokens, sizeof(tokens), "%s/dump_tokens.json", g_tmp);
  FILE *f = fopen(tokens, "w");
  fputs("[[1,2,3]]", f);
  fclose(f);
  snprintf(prefix, sizeof(prefix), "%s/graph", g_tmp);
  snprintf(cmd, sizeof(cmd), "%s forward --model %s/llama --tokens %s --out %s/d.safetensors "
           "--dump-graph %s", TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR, tokens, g_tmp, prefix);
  assert_int_equal(run(cmd), 0);
  snprintf(path, sizeof(path), "%s.txt", prefix);
  f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof(buf), f));
  fclose(f);
  assert_string_equal(buf, "trainyard-graph 1\n");
  snprintf(path, sizeof(path), "%s.dot", prefix);
  f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof(buf), f));
  fclose(f);
  TY_EXPECT_CONTAINS(buf, "digraph trainyard");
}

static int setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(g_tmp, sizeof(g_tmp), "%s/ty_forward_test_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
  return run(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_families_match_transformers),
      cmocka_unit_test(test_sharded_checkpoint),
      cmocka_unit_test(test_bf16_checkpoints),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_dump_graph),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
