/* The op registry: every op is well formed (name, summary, inference,
 * attribute list), lookups agree with the table, exactly the ops the spec
 * calls non-differentiable lack a gradient rule, and the registry and the
 * tables of docs/ops.md (path given as argv[1]) name the same ops. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/op.h"

static const char *g_ops_md_path;

static void test_registry_entries_are_well_formed(void **state) {
  (void)state;
  assert_true(ty_op_count() >= 40);
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    const ty_op_def_t *def = ty_op_at(i);
    assert_non_null(def);
    assert_non_null(def->name);
    assert_true(strlen(def->name) > 0);
    assert_non_null(def->summary);
    assert_true(strlen(def->summary) > 0);
    assert_non_null(def->infer);
    assert_non_null(def->attr_names);
    assert_true(def->min_inputs <= def->max_inputs);
    assert_true(def->max_inputs == TY_OP_VARIADIC ||
                def->max_inputs <= TY_OP_MAX_INPUTS);
    assert_ptr_equal(ty_op_lookup(def->name), def);
    for (uint32_t j = 0; j < i; ++j) {
      assert_string_not_equal(ty_op_at(j)->name, def->name);
    }
  }
  assert_null(ty_op_at(ty_op_count()));
  assert_null(ty_op_lookup("no_such_op"));
  assert_null(ty_op_lookup(NULL));
  /* The ops that meet the other ranks (lowering keeps them unread), and
   * those alone: tp_copy's forward is the identity. */
  static const char *const collectives[] = {"all_reduce", "tp_reduce", "all_gather",
                                            "reduce_scatter"};
  uint32_t communicating = 0;
  for (uint32_t i = 0; i < ty_op_count(); ++i) communicating += ty_op_at(i)->communicates;
  assert_int_equal(communicating, 4);
  for (size_t k = 0; k < sizeof(collectives) / sizeof(collectives[0]); ++k) {
    assert_true(ty_op_lookup(collectives[k])->communicates);
  }
  assert_false(ty_op_lookup("tp_copy")->communicates);
}

/* docs/ops.md: the *_backward ops, optimizer updates, clipping and
 * the KV-cache writes, paged_attention and the sampling ops (inference only) have no
 * gradient; everything else has one. */
static void test_registry_gradient_rules(void **state) {
  (void)state;
  static const char *const no_grad[] = {
      "embedding_backward", "layernorm_backward", "rmsnorm_backward",
      "gelu_backward",      "silu_backward",      "swiglu_backward",
      "softmax_backward",   "rope_backward",      "attention_backward",
      "attention_merge_backward",
      "cross_entropy_backward", "dropout_backward", "slice_backward",
      "linear_cross_entropy_backward", "vocab_embedding_backward", "vocab_max_backward",
      "vocab_ce_sums_backward", "vocab_ce_loss_backward",
      "adamw_update",       "sgd_update",         "adafactor_update",
      "clip_by_global_norm", "global_norm_scale", "kv_cache_write",
      "paged_kv_write",     "paged_attention",   "sample",             "top_logprobs"};
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    const ty_op_def_t *def = ty_op_at(i);
    bool listed = false;
    for (size_t j = 0; j < sizeof(no_grad) / sizeof(no_grad[0]); ++j) {
      listed = listed || strcmp(no_grad[j], def->name) == 0;
    }
    if (listed != (def->grad == NULL)) {
      fail_msg("op %s: expected %s gradient rule", def->name,
               listed ? "no" : "a");
    }
  }
  for (size_t j = 0; j < sizeof(no_grad) / sizeof(no_grad[0]); ++j) {
    assert_non_null(ty_op_lookup(no_grad[j]));
  }
}

/* Adds every `name` in the first cell of a markdown table row to names. */
static void collect_row_names(const char *line, char names[][48],
                              unsigned *count, unsigned capacity) {
  if (strncmp(line, "| `", 3) != 0) return;
  const char *end = strstr(line + 1, " |");
  if (!end) return;
  const char *p = line + 1;
  for (;;) {
    const char *open = memchr(p, '`', (size_t)(end - p));
    if (!open) break;
    const char *close = memchr(open + 1, '`', (size_t)(end - open - 1));
    if (!close) break;
    size_t n = (size_t)(close - open - 1);
    assert_true(n > 0 && n < 48);
    assert_true(*count < capacity);
    memcpy(names[*count], open + 1, n);
    names[*count][n] = '\0';
    ++*count;
    p = close + 1;
  }
}

static void test_registry_matches_docs(void **state) {
  (void)state;
  assert_non_null(g_ops_md_path);
  FILE *f = fopen(g_ops_md_path, "r");
  if (!f) fail_msg("cannot open %s", g_ops_md_path);
  static char names[128][48];
  unsigned count = 0;
  char line[1024];
  while (fgets(line, sizeof(line), f)) {
    collect_row_names(line, names, &count, 128);
  }
  fclose(f);
  /* A parser that finds nothing would pass the checks below vacuously. */
  assert_true(count >= 40);
  unsigned missing = 0;
  for (unsigned i = 0; i < count; ++i) {
    if (!ty_op_lookup(names[i])) {
      print_error("docs/ops.md names op '%s' but it is not registered\n", names[i]);
      ++missing;
    }
  }
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    bool documented = false;
    for (unsigned j = 0; j < count && !documented; ++j) {
      documented = strcmp(names[j], ty_op_at(i)->name) == 0;
    }
    if (!documented) {
      print_error("op '%s' is registered but not in docs/ops.md\n",
                  ty_op_at(i)->name);
      ++missing;
    }
  }
  assert_int_equal(missing, 0);
}

int main(int argc, char **argv) {
  g_ops_md_path = argc > 1 ? argv[1] : NULL;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_entries_are_well_formed),
      cmocka_unit_test(test_registry_gradient_rules),
      cmocka_unit_test(test_registry_matches_docs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
