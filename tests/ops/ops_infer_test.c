/* Shape and dtype inference of every op: runs the table in ops_infer_cases.c
 * (exact outputs for good cases, code and message for bad ones), checks the
 * table covers every op both ways, and probes the registry-level checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hal/dtype.h"
#include "ops/op.h"
#include "ops_infer_cases.h"
#include "ops_test_util.h"

/* Runs one case; returns false (after printing why) when it does not hold. */
static bool run_case(const tyt_infer_case_t *c) {
  ty_tensor_desc_t descs[TY_OP_MAX_INPUTS];
  const ty_tensor_desc_t *ins[TY_OP_MAX_INPUTS];
  uint32_t n = tyt_descs_parse(c->inputs, descs, ins, TY_OP_MAX_INPUTS);
  ty_attrs_t attrs;
  tyt_attrs_parse(c->attrs, &attrs);
  ty_tensor_desc_t outs[TY_OP_MAX_OUTPUTS];
  uint32_t out_count = 99;
  ty_status_t status = ty_op_infer(c->op, ins, n, &attrs, outs, &out_count);
  const char *label = c->op;
  if (c->expect[0] == '!' || c->expect[0] == '?') {
    ty_code_t want = c->expect[0] == '!' ? TY_CODE_INVALID_ARGUMENT
                                         : TY_CODE_NOT_FOUND;
    bool ok = ty_status_code(status) == want &&
              strstr(ty_status_message(status), c->expect + 1) != NULL &&
              out_count == 0;
    if (!ok) {
      print_error("%s(%s | %s): expected %s '%s', got %s '%s' (%u outputs)\n",
                  label, c->inputs, c->attrs, ty_code_name(want), c->expect + 1,
                  ty_code_name(ty_status_code(status)),
                  ty_status_message(status), out_count);
    }
    ty_status_free(status);
    return ok;
  }
  if (status) {
    print_error("%s(%s | %s): expected %s, got %s\n", label, c->inputs,
                c->attrs, c->expect, ty_status_message(status));
    ty_status_free(status);
    return false;
  }
  ty_tensor_desc_t want[TY_OP_MAX_OUTPUTS];
  const ty_tensor_desc_t *want_ptrs[TY_OP_MAX_OUTPUTS];
  uint32_t want_count =
      tyt_descs_parse(c->expect, want, want_ptrs, TY_OP_MAX_OUTPUTS);
  bool ok = out_count == want_count;
  for (uint32_t i = 0; ok && i < want_count; ++i) {
    ok = tyt_desc_equal(&outs[i], &want[i]) &&
         ty_tensor_desc_is_contiguous(&outs[i]);
  }
  if (!ok) {
    char got[512] = {0};
    for (uint32_t i = 0; i < out_count && i < TY_OP_MAX_OUTPUTS; ++i) {
      strncat(got, tyt_desc_str(&outs[i]), sizeof(got) - strlen(got) - 2);
      strncat(got, " ", sizeof(got) - strlen(got) - 1);
    }
    print_error("%s(%s | %s): expected %s, got %s\n", label, c->inputs,
                c->attrs, c->expect, got);
  }
  return ok;
}

static void test_infer_table(void **state) {
  (void)state;
  unsigned failures = 0;
  for (unsigned i = 0; i < tyt_infer_case_count; ++i) {
    if (!run_case(&tyt_infer_cases[i])) ++failures;
  }
  assert_int_equal(failures, 0);
}

/* Every op has a good case and a bad case, so adding an op without
 * inference tests fails here. */
static void test_infer_table_covers_every_op(void **state) {
  (void)state;
  unsigned missing = 0;
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    const char *name = ty_op_at(i)->name;
    bool good = false, bad = false;
    for (unsigned j = 0; j < tyt_infer_case_count; ++j) {
      if (strcmp(tyt_infer_cases[j].op, name) != 0) continue;
      if (tyt_infer_cases[j].expect[0] == '!') {
        bad = true;
      } else {
        good = true;
      }
    }
    if (!good || !bad) {
      print_error("op %s lacks a %s inference case\n", name,
                  good ? "bad" : "good");
      ++missing;
    }
  }
  assert_int_equal(missing, 0);
}

static void test_infer_rejects_null_arguments(void **state) {
  (void)state;
  ty_tensor_desc_t outs[TY_OP_MAX_OUTPUTS];
  uint32_t count;
  assert_int_equal(ty_status_consume_code(
                       ty_op_infer("gelu", NULL, 1, NULL, outs, &count)),
                   TY_CODE_INVALID_ARGUMENT);
  assert_int_equal(ty_status_consume_code(
                       ty_op_infer("gelu", NULL, 0, NULL, NULL, &count)),
                   TY_CODE_INVALID_ARGUMENT);
  ty_status_t status = ty_op_infer(NULL, NULL, 0, NULL, outs, &count);
  assert_int_equal(ty_status_code(status), TY_CODE_NOT_FOUND);
  assert_non_null(strstr(ty_status_message(status), "(null)"));
  ty_status_free(status);
}

/* A corrupt descriptor is refused before any op code reads its dims. */
static void test_infer_rejects_invalid_descriptor(void **state) {
  (void)state;
  ty_tensor_desc_t x;
  tyt_desc_parse("f32[2,3]", &x);
  const ty_tensor_desc_t *ins[1] = {&x};
  ty_tensor_desc_t outs[TY_OP_MAX_OUTPUTS];
  uint32_t count;
  x.dtype = TY_DTYPE_INVALID;
  ty_status_t status = ty_op_infer("reshape", ins, 1, NULL, outs, &count);
  assert_int_equal(ty_status_code(status), TY_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(ty_status_message(status),
                         "reshape: input 0 has an invalid descriptor"));
  ty_status_free(status);
  x.dtype = TY_DTYPE_F32;
  x.rank = TY_TENSOR_MAX_RANK + 1;
  assert_int_equal(ty_status_consume_code(
                       ty_op_infer("gelu", ins, 1, NULL, outs, &count)),
                   TY_CODE_INVALID_ARGUMENT);
  x.rank = 2;
  x.dims[1] = -3;
  status = ty_op_infer("gelu", ins, 1, NULL, outs, &count);
  assert_non_null(strstr(ty_status_message(status), "negative dimension"));
  ty_status_free(status);
}

/* Variadic ops accept up to TY_OP_MAX_INPUTS inputs, and clipping makes one
 * output more than it has gradients. */
static void test_infer_variadic_limits(void **state) {
  (void)state;
  ty_tensor_desc_t g, max_norm;
  tyt_desc_parse("bf16[3]", &g);
  tyt_desc_parse("f32[]", &max_norm);
  static const ty_tensor_desc_t *ins[TY_OP_MAX_INPUTS + 1];
  ins[0] = &max_norm;
  for (uint32_t i = 1; i <= TY_OP_MAX_INPUTS; ++i) ins[i] = &g;
  static ty_tensor_desc_t outs[TY_OP_MAX_OUTPUTS];
  uint32_t count = 0;
  ty_status_t status = ty_op_infer("clip_by_global_norm", ins,
                                   TY_OP_MAX_INPUTS, NULL, outs, &count);
  assert_null(status);
  assert_int_equal(count, TY_OP_MAX_INPUTS);
  assert_int_equal(outs[0].dtype, TY_DTYPE_F32);
  assert_int_equal(outs[0].rank, 0);
  assert_true(tyt_desc_equal(&outs[TY_OP_MAX_INPUTS - 1], &g));
  status = ty_op_infer("clip_by_global_norm", ins, TY_OP_MAX_INPUTS + 1, NULL,
                       outs, &count);
  assert_int_equal(ty_status_code(status), TY_CODE_INVALID_ARGUMENT);
  char expected[64];
  snprintf(expected, sizeof(expected), "takes 2 to %d inputs, got %d",
           TY_OP_MAX_INPUTS, TY_OP_MAX_INPUTS + 1);
  assert_non_null(strstr(ty_status_message(status), expected));
  assert_int_equal(count, 0);
  ty_status_free(status);

  ty_attrs_t attrs;
  tyt_attrs_parse("axis=0", &attrs);
  status = ty_op_infer("concat", ins + 1, TY_OP_MAX_INPUTS, &attrs, outs, &count);
  assert_null(status);
  assert_int_equal(count, 1);
  assert_int_equal(outs[0].dims[0], 3 * TY_OP_MAX_INPUTS);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_infer_table),
      cmocka_unit_test(test_infer_table_covers_every_op),
      cmocka_unit_test(test_infer_rejects_null_arguments),
      cmocka_unit_test(test_infer_rejects_invalid_descriptor),
      cmocka_unit_test(test_infer_variadic_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
