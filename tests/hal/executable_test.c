/* hal/executable.h against the real cpu and template plugins: a hand-made
 * ABI graph (c = a + b) compiled, run and cached, the entries the cpu
 * plugin lacks reported as UNIMPLEMENTED by name, and the caches' rules
 * (owner, device, repeated keys, the device's own cache). */
#include "common/test_util.h"

#include <stdlib.h>
#include <string.h>

#include "hal/buffer.h"
#include "hal/device.h"
#include "hal/executable.h"
#include "hal/registry.h"

static int setup_registry(void **state) {
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
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

/* c = a + b over 4 floats. */
static const int64_t k_dims[1] = {4};
static const uint32_t k_inputs[2] = {0, 1};
static const uint32_t k_outputs[1] = {2};
static const ty_abi_value_t k_values[3] = {
    {.name = "a", .dtype = TY_DTYPE_F32, .rank = 1, .dims = k_dims, .role = TY_VALUE_INPUT},
    {.name = "b", .dtype = TY_DTYPE_F32, .rank = 1, .dims = k_dims, .role = TY_VALUE_INPUT},
    {.name = "c", .dtype = TY_DTYPE_F32, .rank = 1, .dims = k_dims, .role = TY_VALUE_INTERMEDIATE,
     .flags = TY_VALUE_FLAG_OUTPUT},
};
static const ty_abi_node_t k_nodes[1] = {
    {.op = "add", .input_count = 2, .inputs = k_inputs, .output_count = 1,
     .outputs = k_outputs},
};
static const ty_abi_graph_t k_graph = {
    .struct_size = sizeof(ty_abi_graph_t),
    .value_count = 3,
    .values = k_values,
    .node_count = 1,
    .nodes = k_nodes,
    .hash_hex = "00000000000000000000000000000000000000000000000000000000000000ad",
    .levers = "",
};

static ty_executable_t *compile_add(ty_device_t *device) {
  ty_executable_t *e = NULL;
  TY_EXPECT_OK(ty_executable_compile(device, &k_graph, 0, NULL, &e));
  assert_non_null(e);
  return e;
}

static void test_compile_and_run(void **state) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(*state, "cpu", &d));
  TY_EXPECT_OK(ty_executable_graph_entries(d));
  ty_abi_node_support_t verdict[1];
  memset(verdict, 0, sizeof(verdict));
  TY_EXPECT_OK(ty_executable_supports(d, &k_graph, verdict));
  assert_true(verdict[0].supported);

  ty_executable_t *e = compile_add(d);
  assert_non_null(ty_executable_handle(e));
  ty_abi_binding_check_t check = {
      .struct_size = sizeof(check), .name = "a", .dtype = TY_DTYPE_F32, .rank = 1,
      .dims = k_dims};
  TY_EXPECT_OK(ty_executable_check_binding(e, &check)); /* cpu has no check: OK */

  ty_buffer_t *buf[3] = {NULL, NULL, NULL};
  const float a[4] = {1.5f, -2, 3, 4}, b[4] = {0.25f, 8, -1, 0.5f};
  for (int i = 0; i < 3; ++i) TY_EXPECT_OK(ty_buffer_alloc(d, sizeof(a), &buf[i]));
  TY_EXPECT_OK(ty_buffer_write(buf[0], 0, a, sizeof(a)));
  TY_EXPECT_OK(ty_buffer_write(buf[1], 0, b, sizeof(b)));
  ty_abi_binding_t bindings[3] = {
      {.name = "a", .buffer = ty_buffer_handle(buf[0])},
      {.name = "b", .buffer = ty_buffer_handle(buf[1])},
      {.name = "c", .buffer = ty_buffer_handle(buf[2])},
  };
  ty_abi_execute_args_t args = {
      .struct_size = sizeof(args), .binding_count = 3, .bindings = bindings, .world_size = 1};
  TY_EXPECT_OK(ty_executable_execute(e, &args));
  float c[4] = {0};
  TY_EXPECT_OK(ty_buffer_read(buf[2], 0, c, sizeof(c)));
  for (int i = 0; i < 4; ++i) assert_true(c[i] == a[i] + b[i]);
  for (int i = 0; i < 3; ++i) ty_buffer_free(buf[i]);

  ty_abi_executable_memory_t memory;
  TY_EXPECT_OK(ty_executable_memory(e, &memory));
  assert_int_equal(memory.struct_size, sizeof(memory));
  ty_executable_destroy(e);
  ty_executable_destroy(NULL); /* a no-op */
  ty_device_close(d);
}

/* The cpu plugin has no ABI 1.2 artifact or report entries: each is
 * UNIMPLEMENTED, naming the backend and the entry. */
static void test_missing_entries_are_named(void **state) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(*state, "cpu", &d));
  assert_false(ty_executable_serializable(d));
  ty_executable_t *e = compile_add(d);
  void *bytes = (void *)1;
  size_t size = 7;
  TY_EXPECT_STATUS(ty_executable_serialize(e, &bytes, &size), TY_CODE_UNIMPLEMENTED,
                   "backend 'cpu' cannot serialize executables (it has no ABI 1.2 "
                   "executable_serialize)");
  assert_null(bytes);
  assert_int_equal(size, 0);
  char *text = (char *)1;
  TY_EXPECT_STATUS(ty_executable_report(e, &text), TY_CODE_UNIMPLEMENTED,
                   "backend 'cpu' gives no executable report");
  assert_null(text);
  assert_null(ty_executable_graph(e));
  ty_executable_t *loaded = (ty_executable_t *)1;
  TY_EXPECT_STATUS(ty_executable_deserialize(d, "x", 1, NULL, &loaded), TY_CODE_UNIMPLEMENTED,
                   "backend 'cpu' cannot load artifacts (it has no ABI 1.2 "
                   "executable_deserialize)");
  assert_null(loaded);
  ty_executable_destroy(e);
  ty_device_close(d);
}

static void test_cache_owned_by_its_creator(void **state) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(*state, "cpu", &d));
  ty_executable_cache_t *cache = NULL;
  TY_EXPECT_OK(ty_executable_cache_create(d, &cache));
  assert_int_equal(ty_executable_cache_count(cache), 0);
  assert_null(ty_executable_cache_lookup(cache, "k"));
  ty_executable_t *first = compile_add(d), *second = compile_add(d);
  TY_EXPECT_OK(ty_executable_cache_insert(cache, "k", first));
  assert_ptr_equal(ty_executable_cache_lookup(cache, "k"), first);
  assert_null(ty_executable_cache_lookup(cache, "k2"));
  /* A key stored again keeps both alive; the newest is found. */
  TY_EXPECT_OK(ty_executable_cache_insert(cache, "k", second));
  assert_int_equal(ty_executable_cache_count(cache), 2);
  assert_ptr_equal(ty_executable_cache_lookup(cache, "k"), second);
  ty_executable_cache_destroy(cache); /* destroys both executables */
  ty_executable_cache_destroy(NULL);
  ty_device_close(d);
}

/* An executable of one device never enters another device's cache. */
static void test_cache_refuses_other_devices(void **state) {
  ty_device_t *cpu = NULL, *tmpl = NULL;
  TY_EXPECT_OK(ty_device_open(*state, "cpu", &cpu));
  TY_EXPECT_OK(ty_device_open(*state, "template", &tmpl));
  ty_executable_cache_t *cache = NULL;
  TY_EXPECT_OK(ty_executable_cache_create(tmpl, &cache));
  TY_EXPECT_STATUS(ty_executable_cache_insert(cache, "k", compile_add(cpu)),
                   TY_CODE_INVALID_ARGUMENT,
                   "an executable of cpu:0 cannot be stored in the executable cache of "
                   "template:0");
  assert_int_equal(ty_executable_cache_count(cache), 0);
  ty_executable_cache_destroy(cache);
  ty_device_close(tmpl);
  ty_device_close(cpu);
}

/* The device's own cache: one per device, kept until the device closes,
 * which destroys what is in it (the sanitizer builds see a leak otherwise). */
static void test_device_cache(void **state) {
  ty_device_t *a = NULL, *b = NULL;
  TY_EXPECT_OK(ty_device_open(*state, "cpu", &a));
  TY_EXPECT_OK(ty_device_open(*state, "cpu?threads=2", &b));
  ty_executable_cache_t *ca = NULL, *ca2 = NULL, *cb = NULL;
  TY_EXPECT_OK(ty_device_executable_cache(a, &ca));
  TY_EXPECT_OK(ty_device_executable_cache(a, &ca2));
  TY_EXPECT_OK(ty_device_executable_cache(b, &cb));
  assert_non_null(ca);
  assert_ptr_equal(ca, ca2);
  assert_ptr_not_equal(ca, cb);
  TY_EXPECT_OK(ty_executable_cache_insert(ca, "k", compile_add(a)));
  assert_null(ty_executable_cache_lookup(cb, "k"));
  ty_device_close(a);
  ty_device_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_compile_and_run),
      cmocka_unit_test(test_missing_entries_are_named),
      cmocka_unit_test(test_cache_owned_by_its_creator),
      cmocka_unit_test(test_cache_refuses_other_devices),
      cmocka_unit_test(test_device_cache),
  };
  return cmocka_run_group_tests(tests, setup_registry, teardown_registry);
}
