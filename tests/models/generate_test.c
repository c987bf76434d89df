/* End-to-end test of `trainyard generate`: greedy KV-cache decoding must
 * reproduce transformers' greedy continuation token for token for every
 * model fixture; --json prints {"ids": [...], "text": ...}; sampling is
 * reproducible for a seed; bad usage gives exit code 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <jansson.h>

#include "common/test_util.h"
#include "models/safetensors.h"

/* Runs `cmd`, captures stdout into out (NUL-terminated); returns the exit code. */
static int capture(const char *cmd, char *out, size_t capacity) {
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, capacity - 1, p);
  out[n] = '\0';
  int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void ids_csv(const ty_safetensors_tensor_t *t, char *out, size_t capacity, char sep) {
  const int64_t *v = t->data;
  size_t used = 0;
  out[0] = '\0';
  for (uint64_t i = 0; i < t->element_count; ++i) {
    used += (size_t)snprintf(out + used, capacity - used, "%s%lld", i ? (char[]){sep, 0} : "",
                             (long long)v[i]);
  }
}

static void test_greedy_matches_transformers(void **state) {
  (void)state;
  const char *models[] = {"gpt2", "llama", "llama3", "qwen2", "mistral"};
  for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); ++m) {
    char path[512], prompt[256], want[256], cmd[1024], out[4096];
    snprintf(path, sizeof(path), "%s/%s/expected.safetensors", TY_TEST_MODEL_DIR, models[m]);
    ty_safetensors_file_t *f = NULL;
    TY_EXPECT_OK(ty_safetensors_open(path, &f));
    const ty_safetensors_tensor_t *p = ty_safetensors_file_find(f, "greedy_prompt");
    const ty_safetensors_tensor_t *c = ty_safetensors_file_find(f, "greedy_continuation");
    assert_non_null(p);
    assert_non_null(c);
    ids_csv(p, prompt, sizeof(prompt), ',');
    ids_csv(c, want, sizeof(want), ' ');
    snprintf(cmd, sizeof(cmd),
             "%s generate --model %s/%s --prompt-ids %s --max-new-tokens %llu --greedy "
             "2>/dev/null",
             TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR, models[m], prompt,
             (unsigned long long)c->element_count);
    assert_int_equal(capture(cmd, out, sizeof(out)), 0);
    out[strcspn(out, "\n")] = '\0';
    printf("%-8s got [%s] want [%s]\n", models[m], out, want);
    assert_string_equal(out, want);
    /* --json gives the same ids as a JSON object. */
    snprintf(cmd + strlen(cmd) - strlen(" 2>/dev/null"), 64, " --json 2>/dev/null");
    assert_int_equal(capture(cmd, out, sizeof(out)), 0);
    json_error_t err;
    json_t *root = json_loads(out, 0, &err);
    assert_non_null(root);
    json_t *ids = json_object_get(root, "ids");
    assert_true(json_is_array(ids));
    assert_int_equal(json_array_size(ids), c->element_count);
    for (size_t i = 0; i < json_array_size(ids); ++i) {
      assert_int_equal(json_integer_value(json_array_get(ids, i)), ((const int64_t *)c->data)[i]);
    }
    assert_true(json_is_string(json_object_get(root, "text")));
    json_decref(root);
    ty_safetensors_close(f);
  }
}

static void test_sampling_is_reproducible(void **state) {
  (void)state;
  char cmd[1024], a[4096], b[4096], c[4096];
  const char *fmt = "%s generate --model %s/llama --prompt-ids 1,2,3 --max-new-tokens 12 "
                    "--temperature 1.5 --top-k 20 --top-p 0.95 --seed %d 2>/dev/null";
  snprintf(cmd, sizeof(cmd), fmt, TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR, 7);
  assert_int_equal(capture(cmd, a, sizeof(a)), 0);
  assert_int_equal(capture(cmd, b, sizeof(b)), 0);
  assert_string_equal(a, b);
  snprintf(cmd, sizeof(cmd), fmt, TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR, 8);
  assert_int_equal(capture(cmd, c, sizeof(c)), 0);
  assert_string_not_equal(a, c); /* another seed, another draw */
}

static void test_bad_usage(void **state) {
  (void)state;
  char cmd[1024], out[4096];
  const char *bad[] = {
      "--model %s/gpt2 --max-new-tokens 3",                               /* no prompt */
      "--model %s/gpt2 --prompt-ids 1 --prompt x --max-new-tokens 3",     /* both */
      "--model %s/gpt2 --prompt-ids 1 --max-new-tokens 0",                /* N < 1 */
      "--model %s/gpt2 --prompt-ids 1 --max-new-tokens 2 --greedy --temperature 2",
      "--model %s/gpt2 --prompt-ids 1 --max-new-tokens 2 --top-p 1.5",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    char args[512];
    snprintf(args, sizeof(args), bad[i], TY_TEST_MODEL_DIR);
    snprintf(cmd, sizeof(cmd), "%s generate %s 2>/dev/null", TY_TEST_TRAINYARD, args);
    assert_int_equal(capture(cmd, out, sizeof(out)), 2);
  }
  /* Runtime errors: id out of the vocabulary; too long for the positions;
   * a text prompt without tokenizer.json. */
  snprintf(cmd, sizeof(cmd), "%s generate --model %s/gpt2 --prompt-ids 1,999 --max-new-tokens 2 2>&1",
           TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR);
  assert_int_equal(capture(cmd, out, sizeof(out)), 1);
  TY_EXPECT_CONTAINS(out, "--prompt-ids: prompt token 999 (position 1) is not below the "
                          "model's vocabulary size 96");
  snprintf(cmd, sizeof(cmd), "%s generate --model %s/gpt2 --prompt-ids 1 --max-new-tokens 100 2>&1",
           TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR);
  assert_int_equal(capture(cmd, out, sizeof(out)), 1);
  TY_EXPECT_CONTAINS(out, "exceeds the model's 64 positions");
  snprintf(cmd, sizeof(cmd), "%s generate --model %s/gpt2 --prompt hello --max-new-tokens 2 2>&1",
           TY_TEST_TRAINYARD, TY_TEST_MODEL_DIR);
  assert_int_equal(capture(cmd, out, sizeof(out)), 1);
  TY_EXPECT_CONTAINS(out, "tokenizer.json");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_greedy_matches_transformers),
      cmocka_unit_test(test_sampling_is_reproducible),
      cmocka_unit_test(test_bad_usage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
