/* Unit tests of hal/status: creation, annotation, code names, and the
 * host services plugins use to make statuses. */
#include "common/test_util.h"

#include <errno.h>
#include <string.h>

#include "hal/status.h"

static void test_make_carries_code_and_formatted_message(void **state) {
  (void)state;
  ty_status_t s = ty_status_make(TY_CODE_NOT_FOUND, "tensor %s has %d dims", "wte", 2);
  assert_non_null(s);
  assert_false(ty_status_is_ok(s));
  assert_int_equal(ty_status_code(s), TY_CODE_NOT_FOUND);
  assert_string_equal(ty_status_message(s), "tensor wte has 2 dims");
  ty_status_free(s);
}

static void test_make_with_ok_code_becomes_internal(void **state) {
  (void)state;
  /* Misuse must not turn an error into success. */
  ty_status_t s = ty_status_make(TY_CODE_OK, "oops");
  assert_non_null(s);
  TY_EXPECT_STATUS(s, TY_CODE_INTERNAL, "oops");
}

static void test_long_message_is_kept_whole(void **state) {
  (void)state;
  char long_text[5000];
  memset(long_text, 'x', sizeof(long_text) - 1);
  long_text[sizeof(long_text) - 1] = '\0';
  ty_status_t s = ty_status_make(TY_CODE_DATA_LOSS, "%s!", long_text);
  assert_int_equal(strlen(ty_status_message(s)), sizeof(long_text));
  assert_int_equal(ty_status_message(s)[sizeof(long_text) - 1], '!');
  ty_status_free(s);
}

static void test_ok_is_null(void **state) {
  (void)state;
  assert_null(TY_OK);
  assert_true(ty_status_is_ok(TY_OK));
  assert_int_equal(ty_status_code(TY_OK), TY_CODE_OK);
  assert_string_equal(ty_status_message(TY_OK), "OK");
  ty_status_free(NULL); /* a no-op; ASan would flag anything else */
  assert_int_equal(ty_status_consume_code(NULL), TY_CODE_OK);
}

static void test_annotate_prefixes_and_keeps_code(void **state) {
  (void)state;
  ty_status_t s = ty_status_make(TY_CODE_UNAVAILABLE, "libcuda.so.1 not found");
  s = ty_status_annotate(s, "loading backend '%s'", "cuda");
  assert_int_equal(ty_status_code(s), TY_CODE_UNAVAILABLE);
  assert_string_equal(ty_status_message(s),
                      "loading backend 'cuda': libcuda.so.1 not found");
  s = ty_status_annotate(s, "opening %s", "cuda:0");
  assert_string_equal(ty_status_message(s),
                      "opening cuda:0: loading backend 'cuda': libcuda.so.1 not found");
  ty_status_free(s);
}

static void test_annotate_ok_stays_ok(void **state) {
  (void)state;
  assert_null(ty_status_annotate(TY_OK, "context %d", 1));
}

static ty_status_t fails_at(int step, int failing_step) {
  if (step == failing_step) {
    return ty_status_make(TY_CODE_ABORTED, "step %d failed", step);
  }
  return TY_OK;
}

static ty_status_t run_steps(int failing_step, int *out_steps_run) {
  *out_steps_run = 0;
  for (int i = 0; i < 4; ++i) {
    TY_RETURN_IF_ERROR(fails_at(i, failing_step));
    ++*out_steps_run;
  }
  return TY_OK;
}

static void test_return_if_error_stops_at_first_error(void **state) {
  (void)state;
  int steps = 0;
  TY_EXPECT_STATUS(run_steps(2, &steps), TY_CODE_ABORTED, "step 2 failed");
  assert_int_equal(steps, 2);
  TY_EXPECT_OK(run_steps(-1, &steps));
  assert_int_equal(steps, 4);
}

static void test_code_names(void **state) {
  (void)state;
  static const struct {
    ty_code_t code;
    const char *name;
  } cases[] = {
      {TY_CODE_OK, "OK"},
      {TY_CODE_CANCELLED, "CANCELLED"},
      {TY_CODE_UNKNOWN, "UNKNOWN"},
      {TY_CODE_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {TY_CODE_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
      {TY_CODE_NOT_FOUND, "NOT_FOUND"},
      {TY_CODE_ALREADY_EXISTS, "ALREADY_EXISTS"},
      {TY_CODE_PERMISSION_DENIED, "PERMISSION_DENIED"},
      {TY_CODE_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {TY_CODE_FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {TY_CODE_ABORTED, "ABORTED"},
      {TY_CODE_OUT_OF_RANGE, "OUT_OF_RANGE"},
      {TY_CODE_UNIMPLEMENTED, "UNIMPLEMENTED"},
      {TY_CODE_INTERNAL, "INTERNAL"},
      {TY_CODE_UNAVAILABLE, "UNAVAILABLE"},
      {TY_CODE_DATA_LOSS, "DATA_LOSS"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    assert_string_equal(ty_code_name(cases[i].code), cases[i].name);
  }
  /* Out-of-range values, including negative ones, map to UNKNOWN. */
  assert_string_equal(ty_code_name((ty_code_t)16), "UNKNOWN");
  assert_string_equal(ty_code_name((ty_code_t)-1), "UNKNOWN");
  assert_string_equal(ty_code_name((ty_code_t)1000), "UNKNOWN");
}

static void test_from_errno_maps_codes_and_names_the_cause(void **state) {
  (void)state;
  static const struct {
    int err;
    ty_code_t code;
  } cases[] = {{ENOENT, TY_CODE_NOT_FOUND},          {EACCES, TY_CODE_PERMISSION_DENIED},
               {EPERM, TY_CODE_PERMISSION_DENIED},   {EROFS, TY_CODE_PERMISSION_DENIED},
               {ENOSPC, TY_CODE_RESOURCE_EXHAUSTED}, {EDQUOT, TY_CODE_RESOURCE_EXHAUSTED},
               {EMFILE, TY_CODE_RESOURCE_EXHAUSTED}, {EEXIST, TY_CODE_ALREADY_EXISTS},
               {ENOTEMPTY, TY_CODE_ALREADY_EXISTS},  {EIO, TY_CODE_DATA_LOSS},
               /* the wrong kind of file is never damage (issue 12): mmap of
                * a folder gives ENODEV, which once surfaced as UNKNOWN */
               {ENOTDIR, TY_CODE_FAILED_PRECONDITION}, {EISDIR, TY_CODE_FAILED_PRECONDITION},
               {ENODEV, TY_CODE_FAILED_PRECONDITION},  {ENXIO, TY_CODE_FAILED_PRECONDITION},
               {ESPIPE, TY_CODE_FAILED_PRECONDITION},  {EINVAL, TY_CODE_INVALID_ARGUMENT},
               {ENAMETOOLONG, TY_CODE_INVALID_ARGUMENT}, {ELOOP, TY_CODE_INVALID_ARGUMENT},
               {EOVERFLOW, TY_CODE_OUT_OF_RANGE},    {EAGAIN, TY_CODE_UNAVAILABLE},
               {EBUSY, TY_CODE_UNAVAILABLE},         {ENOSYS, TY_CODE_UNIMPLEMENTED},
               {ECHILD, TY_CODE_UNKNOWN}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    ty_status_t s = ty_status_from_errno(cases[i].err, "cannot open %s", "/x/y");
    assert_int_equal(ty_status_code(s), cases[i].code);
    TY_EXPECT_CONTAINS(ty_status_message(s), "cannot open /x/y: ");
    TY_EXPECT_CONTAINS(ty_status_message(s), strerror(cases[i].err));
    ty_status_free(s);
  }
}

static void test_consume_code_frees_and_returns_code(void **state) {
  (void)state;
  assert_int_equal(
      ty_status_consume_code(ty_status_make(TY_CODE_PERMISSION_DENIED, "no")),
      TY_CODE_PERMISSION_DENIED);
}

static void test_host_api_statuses_are_core_statuses(void **state) {
  (void)state;
  const ty_host_api_t *host = ty_hal_host_api();
  assert_non_null(host);
  assert_int_equal(host->struct_size, sizeof(ty_host_api_t));
  assert_int_equal(host->abi_major, TY_ABI_MAJOR);
  assert_int_equal(host->abi_minor, TY_ABI_MINOR);

  ty_abi_status_t a = host->status_make(TY_CODE_UNAVAILABLE, "libfoo.so.1 not found");
  assert_non_null(a);
  TY_EXPECT_STATUS(ty_status_from_abi(a), TY_CODE_UNAVAILABLE, "libfoo.so.1 not found");

  /* A plugin that passes OK or a NULL message still gets an error. */
  TY_EXPECT_STATUS(ty_status_from_abi(host->status_make(TY_CODE_OK, "x")),
                   TY_CODE_INTERNAL, "x");
  TY_EXPECT_STATUS(ty_status_from_abi(host->status_make(TY_CODE_INTERNAL, NULL)),
                   TY_CODE_INTERNAL, "(no message)");

  host->status_free(NULL);
  host->status_free(host->status_make(TY_CODE_ABORTED, "released by the plugin"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_make_carries_code_and_formatted_message),
      cmocka_unit_test(test_make_with_ok_code_becomes_internal),
      cmocka_unit_test(test_long_message_is_kept_whole),
      cmocka_unit_test(test_ok_is_null),
      cmocka_unit_test(test_annotate_prefixes_and_keeps_code),
      cmocka_unit_test(test_annotate_ok_stays_ok),
      cmocka_unit_test(test_return_if_error_stops_at_first_error),
      cmocka_unit_test(test_code_names),
      cmocka_unit_test(test_from_errno_maps_codes_and_names_the_cause),
      cmocka_unit_test(test_consume_code_frees_and_returns_code),
      cmocka_unit_test(test_host_api_statuses_are_core_statuses),
  };
  return cmocka_run_group_tests_name("status", tests, NULL, NULL);
}
