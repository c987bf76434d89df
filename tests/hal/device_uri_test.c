/* Unit tests of hal/device_uri: the accepted grammar and every kind of
 * malformed URI, each of which must name what is wrong. */
#include "common/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/device_uri.h"

static void test_backend_only(void **state) {
  (void)state;
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse("cpu", &u));
  assert_string_equal(u.backend, "cpu");
  assert_false(u.has_index);
  assert_int_equal(u.index, 0);
  assert_int_equal(u.option_count, 0);
  assert_null(ty_device_uri_option(&u, "threads"));
  ty_device_uri_deinit(&u);
}

static void test_backend_with_index(void **state) {
  (void)state;
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse("cpu:0", &u));
  assert_string_equal(u.backend, "cpu");
  assert_true(u.has_index);
  assert_int_equal(u.index, 0);
  ty_device_uri_deinit(&u);

  TY_EXPECT_OK(ty_device_uri_parse("cuda:3", &u));
  assert_string_equal(u.backend, "cuda");
  assert_true(u.has_index);
  assert_int_equal(u.index, 3);
  ty_device_uri_deinit(&u);

  TY_EXPECT_OK(ty_device_uri_parse("opencl_2:4294967295", &u));
  assert_string_equal(u.backend, "opencl_2");
  assert_int_equal(u.index, UINT32_MAX);
  ty_device_uri_deinit(&u);
}

static void test_options(void **state) {
  (void)state;
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse("cpu?threads=2", &u));
  assert_string_equal(u.backend, "cpu");
  assert_false(u.has_index);
  assert_int_equal(u.option_count, 1);
  assert_string_equal(u.options[0].key, "threads");
  assert_string_equal(u.options[0].value, "2");
  assert_string_equal(ty_device_uri_option(&u, "threads"), "2");
  ty_device_uri_deinit(&u);

  TY_EXPECT_OK(ty_device_uri_parse("dataflow?tiles=4&mem=1", &u));
  assert_string_equal(u.backend, "dataflow");
  assert_int_equal(u.option_count, 2);
  assert_string_equal(u.options[0].key, "tiles");
  assert_string_equal(u.options[0].value, "4");
  assert_string_equal(u.options[1].key, "mem");
  assert_string_equal(u.options[1].value, "1");
  assert_string_equal(ty_device_uri_option(&u, "mem"), "1");
  assert_null(ty_device_uri_option(&u, "tile"));
  ty_device_uri_deinit(&u);

  /* Index and options together; an empty value is a value. */
  TY_EXPECT_OK(ty_device_uri_parse("cuda:1?Mem.Pool-Size=&x=a=b", &u));
  assert_int_equal(u.index, 1);
  assert_string_equal(ty_device_uri_option(&u, "Mem.Pool-Size"), "");
  assert_string_equal(ty_device_uri_option(&u, "x"), "a=b");
  ty_device_uri_deinit(&u);
}

static void test_max_options_fit(void **state) {
  (void)state;
  char uri[512] = "cpu?";
  for (int i = 0; i < TY_DEVICE_URI_MAX_OPTIONS; ++i) {
    char opt[32];
    snprintf(opt, sizeof(opt), "%sk%d=%d", i ? "&" : "", i, i * 7);
    strcat(uri, opt);
  }
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse(uri, &u));
  assert_int_equal(u.option_count, TY_DEVICE_URI_MAX_OPTIONS);
  assert_string_equal(ty_device_uri_option(&u, "k15"), "105");
  ty_device_uri_deinit(&u);
}

static void test_deinit_twice_is_safe(void **state) {
  (void)state;
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse("cpu?threads=2", &u));
  ty_device_uri_deinit(&u);
  ty_device_uri_deinit(&u); /* zeroed by the first call */
  assert_null(u.storage);
}

/* Every bad URI: INVALID_ARGUMENT, a message naming the URI and the fault,
 * and an output left zeroed (nothing to deinit, nothing leaked). */
static void expect_bad_uri(const char *uri, const char *fault) {
  ty_device_uri_t u;
  memset(&u, 0x5a, sizeof(u));
  ty_status_t s = ty_device_uri_parse(uri, &u);
  if (uri && *uri) {
    char quoted[600];
    snprintf(quoted, sizeof(quoted), "'%s'", uri);
    if (s) TY_EXPECT_CONTAINS(ty_status_message(s), quoted);
  }
  TY_EXPECT_STATUS(s, TY_CODE_INVALID_ARGUMENT, fault);
  assert_null(u.storage);
  assert_null(u.typed);
  assert_int_equal(u.option_count, 0);
}

static void test_bad_uris(void **state) {
  (void)state;
  expect_bad_uri(NULL, "empty device URI");
  expect_bad_uri("", "empty device URI");
  expect_bad_uri(":0", "missing backend name");
  expect_bad_uri("cpu:", "device index is not a number");
  expect_bad_uri("cpu:x", "device index is not a number");
  expect_bad_uri("cpu:-1", "device index is not a number");
  expect_bad_uri("cpu: 1", "device index is not a number");
  expect_bad_uri("cpu:1x", "unexpected character after the backend name");
  expect_bad_uri("cpu?threads", "option without '=value'");
  expect_bad_uri("cpu?=1", "option with an empty key");
  expect_bad_uri("cpu?a=1&a=2", "duplicate option key");
  expect_bad_uri("cpu?a=1&", "trailing '&'");
  expect_bad_uri("cpu?a=1&&b=2", "option without '=value'");
  expect_bad_uri("cpu?a b=1", "bad character in option key");
  /* Capitals: refused with the lowercase spelling (the names 'trainyard
   * devices' lists), never read as a missing name nor matched. */
  expect_bad_uri("Cpu", "backend names are lowercase, as 'trainyard devices' lists them: give "
                        "'cpu'");
  expect_bad_uri("CPU", "give 'cpu'");
  expect_bad_uri("CUDA:1?fallback=cpu", "give 'cuda:1?fallback=cpu'");
  expect_bad_uri("cpU_2", "give 'cpu_2'");
  expect_bad_uri("cpu#", "unexpected character after the backend name");
  expect_bad_uri("cpu/0", "unexpected character after the backend name");
  expect_bad_uri("cpu:4294967296", "device index out of range");
  expect_bad_uri("cpu:99999999999999999999999", "device index out of range");
}

static void test_too_long_backend_name(void **state) {
  (void)state;
  char uri[TY_BACKEND_NAME_MAX + 1];
  memset(uri, 'a', TY_BACKEND_NAME_MAX);
  uri[TY_BACKEND_NAME_MAX] = '\0';
  expect_bad_uri(uri, "backend name too long");
  uri[TY_BACKEND_NAME_MAX - 1] = '\0'; /* 63 characters fit */
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse(uri, &u));
  assert_string_equal(u.backend, uri);
  ty_device_uri_deinit(&u);
}

static void test_too_many_options(void **state) {
  (void)state;
  char uri[512] = "cpu?";
  for (int i = 0; i <= TY_DEVICE_URI_MAX_OPTIONS; ++i) {
    char opt[32];
    snprintf(opt, sizeof(opt), "%sk%d=1", i ? "&" : "", i);
    strcat(uri, opt);
  }
  expect_bad_uri(uri, "too many options");
}

static void expect_format(const ty_device_uri_t *u, const char *want) {
  char *text = NULL;
  TY_EXPECT_OK(ty_device_uri_format(u, &text));
  assert_string_equal(text, want);
  free(text);
}

/* The struct is what is passed down: the text as typed is kept for
 * messages and shown while nothing changed; a change (an application
 * option taken off, a rank's index) is made on the struct and shows in
 * the formatted URI, not by editing the string. */
static void test_changes_on_the_struct(void **state) {
  (void)state;
  ty_device_uri_t u;
  TY_EXPECT_OK(ty_device_uri_parse("cuda:01?a=1&fallback=cpu:0?x=1&b=2", &u));
  assert_string_equal(u.typed, "cuda:01?a=1&fallback=cpu:0?x=1&b=2");
  expect_format(&u, "cuda:01?a=1&fallback=cpu:0?x=1&b=2"); /* as typed */
  const char *fallback = ty_device_uri_option(&u, "fallback");
  assert_string_equal(fallback, "cpu:0?x=1");
  assert_true(ty_device_uri_remove_option(&u, "fallback"));
  assert_false(ty_device_uri_remove_option(&u, "fallback"));
  assert_string_equal(fallback, "cpu:0?x=1"); /* still readable */
  assert_null(ty_device_uri_option(&u, "fallback"));
  assert_int_equal(u.option_count, 2);
  expect_format(&u, "cuda:1?a=1&b=2");
  assert_string_equal(u.typed, "cuda:01?a=1&fallback=cpu:0?x=1&b=2");
  ty_device_uri_deinit(&u);

  TY_EXPECT_OK(ty_device_uri_parse("opencl?only=1", &u));
  assert_false(ty_device_uri_remove_option(&u, "fallback"));
  expect_format(&u, "opencl?only=1");
  ty_device_uri_set_index(&u, 3);
  expect_format(&u, "opencl:3?only=1");
  assert_true(ty_device_uri_remove_option(&u, "only"));
  expect_format(&u, "opencl:3");
  ty_device_uri_deinit(&u);
  assert_null(u.typed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_backend_only),
      cmocka_unit_test(test_backend_with_index),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_max_options_fit),
      cmocka_unit_test(test_deinit_twice_is_safe),
      cmocka_unit_test(test_bad_uris),
      cmocka_unit_test(test_too_long_backend_name),
      cmocka_unit_test(test_too_many_options),
      cmocka_unit_test(test_changes_on_the_struct),
  };
  return cmocka_run_group_tests_name("device_uri", tests, NULL, NULL);
}
