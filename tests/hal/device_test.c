/* ty_device_open against the real cpu and template plugins: URIs that work,
 * and each way a URI can name something that cannot be opened. */
#include "common/test_util.h"

#include <stdlib.h>
#include <string.h>

#include "hal/device.h"
#include "hal/registry.h"

static int setup_registry(void **state) {
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {
      .explicit_paths = paths,
      .explicit_path_count = 1,
  };
  ty_registry_t *registry = NULL;
  ty_status_t s = ty_registry_create(&options, &registry);
  if (s) {
    print_error("registry: %s\n", ty_status_message(s));
    ty_status_free(s);
    return -1;
  }
  *state = registry;
  return 0;
}

static int teardown_registry(void **state) {
  ty_registry_destroy(*state);
  return 0;
}

static void test_open_cpu_with_threads(void **state) {
  ty_registry_t *registry = *state;
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(registry, "cpu?threads=2", &d));
  assert_non_null(d);
  assert_string_equal(ty_device_uri(d), "cpu?threads=2");
  assert_string_equal(ty_device_label(d), "cpu:0");
  assert_int_equal(ty_device_index(d), 0);
  assert_string_equal(ty_backend_name(ty_device_backend(d)), "cpu");
  assert_non_null(ty_device_handle(d));
  const ty_abi_device_info_t *info = ty_device_info(d);
  assert_int_equal(info->struct_size, sizeof(ty_abi_device_info_t));
  assert_int_equal(info->kind, TY_DEVICE_KIND_CPU);
  assert_true(info->compute_units >= 1);
  assert_true(info->dtype_mask & TY_DTYPE_BIT(TY_DTYPE_F32));
  assert_true(strlen(info->name) > 0);
  TY_EXPECT_OK(ty_device_synchronize(d));
  ty_device_close(d);
}

static void test_open_each_spelling(void **state) {
  ty_registry_t *registry = *state;
  const char *uris[] = {"cpu", "cpu:0", "template", "template:0", "cpu?threads=4096"};
  for (size_t i = 0; i < sizeof(uris) / sizeof(uris[0]); ++i) {
    ty_device_t *d = NULL;
    TY_EXPECT_OK(ty_device_open(registry, uris[i], &d));
    assert_non_null(d);
    assert_string_equal(ty_device_uri(d), uris[i]);
    assert_int_equal(strncmp(ty_device_label(d), uris[i], 3), 0);
    TY_EXPECT_OK(ty_device_synchronize(d));
    ty_device_close(d);
  }
  ty_device_t *t = NULL;
  TY_EXPECT_OK(ty_device_open(registry, "template:0", &t));
  assert_string_equal(ty_device_label(t), "template:0");
  assert_true(ty_device_info(t)->emulated);
  assert_int_equal(ty_device_info(t)->memory_bytes, 1ull << 30);
  ty_device_close(t);
  ty_device_close(NULL); /* a no-op */
}

/* A failed open leaves *out_device NULL. */
static void expect_open_fails(ty_registry_t *registry, const char *uri,
                              ty_code_t code, const char *m1, const char *m2) {
  ty_device_t *d = (ty_device_t *)(uintptr_t)1;
  ty_status_t s = ty_device_open(registry, uri, &d);
  assert_null(d);
  if (s && m2) TY_EXPECT_CONTAINS(ty_status_message(s), m2);
  TY_EXPECT_STATUS(s, code, m1);
}

static void test_open_errors(void **state) {
  ty_registry_t *registry = *state;
  expect_open_fails(registry, "cpu?threads=0", TY_CODE_INVALID_ARGUMENT,
                    "threads='0' must be an integer in 1..4096",
                    "opening device 'cpu?threads=0'");
  expect_open_fails(registry, "cpu?threads=4097", TY_CODE_INVALID_ARGUMENT,
                    "threads='4097'", NULL);
  expect_open_fails(registry, "cpu?threads=-1", TY_CODE_INVALID_ARGUMENT,
                    "threads='-1'", NULL);
  expect_open_fails(registry, "cpu?threads=2x", TY_CODE_INVALID_ARGUMENT,
                    "threads='2x'", NULL);
  expect_open_fails(registry, "cpu?threads=", TY_CODE_INVALID_ARGUMENT,
                    "threads=''", NULL);
  expect_open_fails(registry, "cpu?threads=+5", TY_CODE_INVALID_ARGUMENT,
                    "threads='+5'", NULL);
  expect_open_fails(registry, "cpu?threads= 5", TY_CODE_INVALID_ARGUMENT,
                    "threads=' 5'", NULL);
  expect_open_fails(registry, "cpu?bogus=1", TY_CODE_INVALID_ARGUMENT,
                    "unknown device option 'bogus'", "known: threads");
  expect_open_fails(registry, "template?x=1", TY_CODE_INVALID_ARGUMENT,
                    "unknown device option 'x'", "takes no options");
  expect_open_fails(registry, "cpu:5", TY_CODE_NOT_FOUND,
                    "backend 'cpu' has 1 device(s); index 5 is out of range",
                    "opening device 'cpu:5'");
  expect_open_fails(registry, "template:1", TY_CODE_NOT_FOUND, "index 1", NULL);
  /* "(loaded: cpu, dataflow, template)": every in-tree plugin, by name. */
  char loaded[320];
  ty_test_loaded_message(TY_TEST_INTREE_PLUGINS, registry, "nosuch", loaded, sizeof(loaded));
  expect_open_fails(registry, "nosuch", TY_CODE_NOT_FOUND, loaded, "trainyard devices");
}

static void test_open_malformed_uri(void **state) {
  ty_registry_t *registry = *state;
  expect_open_fails(registry, "cpu:x", TY_CODE_INVALID_ARGUMENT,
                    "device index is not a number", NULL);
  expect_open_fails(registry, "", TY_CODE_INVALID_ARGUMENT, "empty device URI", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_cpu_with_threads),
      cmocka_unit_test(test_open_each_spelling),
      cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_open_malformed_uri),
  };
  return cmocka_run_group_tests_name("device", tests, setup_registry,
                                     teardown_registry);
}
