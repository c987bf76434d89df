/* Buffer conformance on every in-tree device: the same test bodies run once
 * per device URI (cpu, template). Data is random (seed printed), host
 * destinations are fenced with sentinel bytes, and every rejected call is
 * checked to have left both the buffer and the host memory untouched. */
#include "common/test_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/buffer.h"
#include "hal/device.h"
#include "hal/registry.h"

#define GUARD_BYTES 64
#define GUARD_VALUE 0xCD

typedef struct fixture_t {
  const char *uri;
  ty_registry_t *registry;
  ty_device_t *device;
  ty_test_rng_t rng;
} fixture_t;

static int setup_device(void **state) {
  static uint64_t stream = 0;
  fixture_t *f = calloc(1, sizeof(*f));
  if (!f) return -1;
  f->uri = *state;
  ty_test_rng_init(&f->rng, ty_test_seed() + 0x1000 * ++stream);
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_status_t s = ty_registry_create(&options, &f->registry);
  if (!s) s = ty_device_open(f->registry, f->uri, &f->device);
  if (s) {
    print_error("opening %s: %s\n", f->uri, ty_status_message(s));
    ty_status_free(s);
    ty_registry_destroy(f->registry);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown_device(void **state) {
  fixture_t *f = *state;
  ty_device_close(f->device);
  ty_registry_destroy(f->registry);
  free(f);
  return 0;
}

/* ---- host memory fenced by sentinels ---- */

typedef struct guarded_t {
  unsigned char *base; /* GUARD | size bytes | GUARD */
  size_t size;
} guarded_t;

static unsigned char *guarded_alloc(guarded_t *g, size_t size) {
  g->size = size;
  g->base = malloc(size + 2 * GUARD_BYTES);
  assert_non_null(g->base);
  memset(g->base, GUARD_VALUE, size + 2 * GUARD_BYTES);
  return g->base + GUARD_BYTES;
}

static void guarded_check_and_free(guarded_t *g) {
  for (size_t i = 0; i < GUARD_BYTES; ++i) {
    if (g->base[i] != GUARD_VALUE || g->base[GUARD_BYTES + g->size + i] != GUARD_VALUE) {
      print_error("sentinel byte %zu around a %zu-byte host array was overwritten\n",
                  i, g->size);
      free(g->base);
      fail();
    }
  }
  free(g->base);
}

/* True when every byte of the guarded body is still the sentinel. */
static bool guarded_untouched(const guarded_t *g) {
  for (size_t i = 0; i < g->size + 2 * GUARD_BYTES; ++i) {
    if (g->base[i] != GUARD_VALUE) return false;
  }
  return true;
}

/* ---- buffers ---- */

/* A buffer of `size` bytes holding fresh random contents, copied to
 * *out_contents (caller frees). */
static ty_buffer_t *random_buffer(fixture_t *f, size_t size,
                                  unsigned char **out_contents) {
  ty_buffer_t *b = NULL;
  TY_EXPECT_OK(ty_buffer_alloc(f->device, size, &b));
  assert_int_equal(ty_buffer_size(b), size);
  assert_ptr_equal(ty_buffer_device(b), f->device);
  unsigned char *contents = malloc(size ? size : 1);
  assert_non_null(contents);
  ty_test_fill_random(&f->rng, contents, size);
  TY_EXPECT_OK(ty_buffer_write(b, 0, contents, size));
  *out_contents = contents;
  return b;
}

/* Reads all of `b` into fenced host memory and compares with `expected`. */
static void expect_buffer_contents(ty_buffer_t *b, const unsigned char *expected) {
  size_t size = (size_t)ty_buffer_size(b);
  guarded_t g;
  unsigned char *got = guarded_alloc(&g, size);
  TY_EXPECT_OK(ty_buffer_read(b, 0, got, size));
  for (size_t i = 0; i < size; ++i) {
    if (got[i] != expected[i]) {
      print_error("buffer byte %zu of %zu is 0x%02x, expected 0x%02x\n", i, size,
                  got[i], expected[i]);
      free(g.base);
      fail();
    }
  }
  guarded_check_and_free(&g);
}

static void test_round_trips(void **state) {
  fixture_t *f = *state;
  const size_t sizes[] = {1, 3, 8, 63, 64, 65, 4096, 4099, 1u << 20};
  const size_t offsets[] = {0, 1, 7, 64, 4097};
  const size_t tail = 13;
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); ++si) {
    for (size_t oi = 0; oi < sizeof(offsets) / sizeof(offsets[0]); ++oi) {
      size_t size = sizes[si], offset = offsets[oi];
      unsigned char *expected = NULL;
      ty_buffer_t *b = random_buffer(f, offset + size + tail, &expected);

      unsigned char *data = malloc(size);
      assert_non_null(data);
      ty_test_fill_random(&f->rng, data, size);
      TY_EXPECT_OK(ty_buffer_write(b, offset, data, size));
      memcpy(expected + offset, data, size);

      guarded_t g;
      unsigned char *got = guarded_alloc(&g, size);
      TY_EXPECT_OK(ty_buffer_read(b, offset, got, size));
      assert_memory_equal(got, data, size);
      guarded_check_and_free(&g);

      /* Bytes around the written range keep their old contents. */
      expect_buffer_contents(b, expected);

      /* A read that starts inside the written range and ends in the tail. */
      size_t from = offset + size / 2;
      size_t n = size - size / 2 + tail;
      got = guarded_alloc(&g, n);
      TY_EXPECT_OK(ty_buffer_read(b, from, got, n));
      assert_memory_equal(got, expected + from, n);
      guarded_check_and_free(&g);

      free(data);
      free(expected);
      ty_buffer_free(b);
    }
  }
}

/* (offset, size) pairs that fall outside a 256-byte buffer. */
static const struct {
  uint64_t offset, size;
} kOutOfRange[] = {
    {257, 0},                   /* offset past the end */
    {256, 1},                   /* starts at the end */
    {1000, 4},                  /* offset far past the end */
    {UINT64_MAX, 1},
    {0, 257},                   /* size past the end */
    {255, 2},                   /* ends one past the end */
    {128, 129},
    {1, UINT64_MAX},            /* offset + size overflows uint64 */
    {16, UINT64_MAX - 8},       /* ...wrapping around to a small end */
    {UINT64_MAX, UINT64_MAX},
    {UINT64_MAX, 0},
};
#define kOutOfRangeCount (sizeof(kOutOfRange) / sizeof(kOutOfRange[0]))
#define kRangeBufferSize 256

static void test_out_of_range_write_changes_nothing(void **state) {
  fixture_t *f = *state;
  unsigned char *expected = NULL;
  ty_buffer_t *b = random_buffer(f, kRangeBufferSize, &expected);
  unsigned char src[64];
  ty_test_fill_random(&f->rng, src, sizeof(src));
  for (size_t i = 0; i < kOutOfRangeCount; ++i) {
    /* `src` is smaller than most sizes: a write that got through the checks
     * would read past it, which ASan reports. */
    TY_EXPECT_STATUS(ty_buffer_write(b, kOutOfRange[i].offset, src, kOutOfRange[i].size),
                     TY_CODE_INVALID_ARGUMENT, "out of range for a 256-byte buffer");
    expect_buffer_contents(b, expected);
  }
  /* The edges themselves are fine. */
  TY_EXPECT_OK(ty_buffer_write(b, kRangeBufferSize, src, 0));
  TY_EXPECT_OK(ty_buffer_write(b, kRangeBufferSize - 1, src, 1));
  expected[kRangeBufferSize - 1] = src[0];
  expect_buffer_contents(b, expected);
  free(expected);
  ty_buffer_free(b);
}

static void test_out_of_range_read_touches_no_host_memory(void **state) {
  fixture_t *f = *state;
  unsigned char *expected = NULL;
  ty_buffer_t *b = random_buffer(f, kRangeBufferSize, &expected);
  for (size_t i = 0; i < kOutOfRangeCount; ++i) {
    guarded_t g;
    unsigned char *dst = guarded_alloc(&g, 64);
    ty_status_t s = ty_buffer_read(b, kOutOfRange[i].offset, dst, kOutOfRange[i].size);
    if (s) TY_EXPECT_CONTAINS(ty_status_message(s), "read of");
    TY_EXPECT_STATUS(s, TY_CODE_INVALID_ARGUMENT, "out of range for a 256-byte buffer");
    if (!guarded_untouched(&g)) {
      print_error("a rejected read (offset %" PRIu64 ", size %" PRIu64
                  ") wrote host memory\n",
                  kOutOfRange[i].offset, kOutOfRange[i].size);
      free(g.base);
      fail();
    }
    free(g.base);
  }
  expect_buffer_contents(b, expected);
  free(expected);
  ty_buffer_free(b);
}

static void test_out_of_range_copy_changes_nothing(void **state) {
  fixture_t *f = *state;
  unsigned char *src_expected = NULL, *dst_expected = NULL;
  ty_buffer_t *src = random_buffer(f, kRangeBufferSize, &src_expected);
  ty_buffer_t *dst = random_buffer(f, kRangeBufferSize, &dst_expected);
  for (size_t i = 0; i < kOutOfRangeCount; ++i) {
    uint64_t offset = kOutOfRange[i].offset, size = kOutOfRange[i].size;
    TY_EXPECT_STATUS(ty_buffer_copy(src, offset, dst, 0, size),
                     TY_CODE_INVALID_ARGUMENT, "copy source of");
    TY_EXPECT_STATUS(ty_buffer_copy(src, 0, dst, offset, size),
                     TY_CODE_INVALID_ARGUMENT, "out of range");
    /* Within one buffer, too: range checks come before the overlap check. */
    TY_EXPECT_STATUS(ty_buffer_copy(src, offset, src, 0, size),
                     TY_CODE_INVALID_ARGUMENT, "out of range");
    expect_buffer_contents(src, src_expected);
    expect_buffer_contents(dst, dst_expected);
  }
  /* The destination check names the destination. */
  TY_EXPECT_STATUS(ty_buffer_copy(src, 0, dst, 200, 100), TY_CODE_INVALID_ARGUMENT,
                   "copy destination of 100 bytes at offset 200");
  expect_buffer_contents(dst, dst_expected);
  free(src_expected);
  free(dst_expected);
  ty_buffer_free(src);
  ty_buffer_free(dst);
}

static void test_zero_sizes(void **state) {
  fixture_t *f = *state;
  ty_buffer_t *empty = NULL, *other = NULL;
  TY_EXPECT_OK(ty_buffer_alloc(f->device, 0, &empty));
  assert_non_null(empty);
  assert_int_equal(ty_buffer_size(empty), 0);
  TY_EXPECT_OK(ty_buffer_alloc(f->device, 0, &other));

  guarded_t g;
  unsigned char *host = guarded_alloc(&g, 8);
  TY_EXPECT_OK(ty_buffer_read(empty, 0, host, 0));
  TY_EXPECT_OK(ty_buffer_write(empty, 0, host, 0));
  TY_EXPECT_OK(ty_buffer_read(empty, 0, NULL, 0));
  TY_EXPECT_OK(ty_buffer_write(empty, 0, NULL, 0));
  TY_EXPECT_OK(ty_buffer_copy(empty, 0, other, 0, 0));
  TY_EXPECT_OK(ty_buffer_copy(empty, 0, empty, 0, 0));
  TY_EXPECT_STATUS(ty_buffer_read(empty, 0, host, 1), TY_CODE_INVALID_ARGUMENT,
                   "out of range for a 0-byte buffer");
  TY_EXPECT_STATUS(ty_buffer_write(empty, 1, host, 0), TY_CODE_INVALID_ARGUMENT,
                   "out of range for a 0-byte buffer");
  TY_EXPECT_STATUS(ty_buffer_copy(empty, 0, other, 0, 1), TY_CODE_INVALID_ARGUMENT,
                   "out of range");
  assert_true(guarded_untouched(&g));
  free(g.base);

  /* Zero-length transfers at the end of a non-empty buffer, and NULL host
   * pointers only when nothing moves. */
  unsigned char *expected = NULL;
  ty_buffer_t *b = random_buffer(f, 32, &expected);
  TY_EXPECT_OK(ty_buffer_read(b, 32, NULL, 0));
  TY_EXPECT_OK(ty_buffer_write(b, 32, NULL, 0));
  TY_EXPECT_OK(ty_buffer_copy(b, 32, empty, 0, 0));
  TY_EXPECT_OK(ty_buffer_copy(b, 0, b, 32, 0));
  TY_EXPECT_STATUS(ty_buffer_read(b, 0, NULL, 1), TY_CODE_INVALID_ARGUMENT,
                   "read into a NULL pointer");
  TY_EXPECT_STATUS(ty_buffer_write(b, 0, NULL, 1), TY_CODE_INVALID_ARGUMENT,
                   "write from a NULL pointer");
  expect_buffer_contents(b, expected);
  free(expected);
  ty_buffer_free(b);
  ty_buffer_free(empty);
  ty_buffer_free(other);
  ty_buffer_free(NULL); /* a no-op */
}

static void test_huge_alloc_is_resource_exhausted(void **state) {
  fixture_t *f = *state;
  const uint64_t sizes[] = {1ull << 62, UINT64_MAX, (1ull << 63) + 1, 1ull << 50};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    char size_text[64];
    snprintf(size_text, sizeof(size_text), "allocating %" PRIu64 " bytes", sizes[i]);
    ty_buffer_t *b = (ty_buffer_t *)(uintptr_t)1;
    TY_EXPECT_STATUS(ty_buffer_alloc(f->device, sizes[i], &b),
                     TY_CODE_RESOURCE_EXHAUSTED, size_text);
    assert_null(b);
  }
  /* The device is still usable afterwards. */
  unsigned char *expected = NULL;
  ty_buffer_t *b = random_buffer(f, 100, &expected);
  expect_buffer_contents(b, expected);
  free(expected);
  ty_buffer_free(b);
}

static void test_copy_within_device(void **state) {
  fixture_t *f = *state;
  unsigned char *a_expected = NULL, *b_expected = NULL;
  ty_buffer_t *a = random_buffer(f, 1000, &a_expected);
  ty_buffer_t *b = random_buffer(f, 600, &b_expected);

  TY_EXPECT_OK(ty_buffer_copy(a, 100, b, 50, 300));
  memcpy(b_expected + 50, a_expected + 100, 300);
  expect_buffer_contents(a, a_expected);
  expect_buffer_contents(b, b_expected);

  /* Whole buffer, then back the other way at the very end of `a`. */
  TY_EXPECT_OK(ty_buffer_copy(b, 0, a, 400, 600));
  memcpy(a_expected + 400, b_expected, 600);
  expect_buffer_contents(a, a_expected);

  /* Disjoint and touching ranges within one buffer are allowed. */
  TY_EXPECT_OK(ty_buffer_copy(a, 0, a, 900, 100));
  memcpy(a_expected + 900, a_expected, 100);
  TY_EXPECT_OK(ty_buffer_copy(a, 200, a, 100, 100));
  memmove(a_expected + 100, a_expected + 200, 100);
  expect_buffer_contents(a, a_expected);
  expect_buffer_contents(b, b_expected);

  free(a_expected);
  free(b_expected);
  ty_buffer_free(a);
  ty_buffer_free(b);
}

static void test_overlapping_copy_is_rejected(void **state) {
  fixture_t *f = *state;
  unsigned char *expected = NULL;
  ty_buffer_t *a = random_buffer(f, 256, &expected);
  const struct {
    uint64_t src, dst, size;
  } cases[] = {
      {0, 1, 100}, {1, 0, 100}, {10, 10, 1}, {0, 99, 100}, {99, 0, 100}, {0, 0, 256},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    TY_EXPECT_STATUS(ty_buffer_copy(a, cases[i].src, a, cases[i].dst, cases[i].size),
                     TY_CODE_INVALID_ARGUMENT, "copy ranges overlap within one buffer");
    expect_buffer_contents(a, expected);
  }
  free(expected);
  ty_buffer_free(a);
}

static void test_copy_between_devices_is_rejected(void **state) {
  fixture_t *f = *state;
  ty_device_t *second = NULL;
  TY_EXPECT_OK(ty_device_open(f->registry, f->uri, &second));
  unsigned char *src_expected = NULL;
  ty_buffer_t *src = random_buffer(f, 64, &src_expected);
  ty_buffer_t *dst = NULL;
  TY_EXPECT_OK(ty_buffer_alloc(second, 64, &dst));
  unsigned char dst_expected[64];
  ty_test_fill_random(&f->rng, dst_expected, sizeof(dst_expected));
  TY_EXPECT_OK(ty_buffer_write(dst, 0, dst_expected, sizeof(dst_expected)));
  TY_EXPECT_STATUS(ty_buffer_copy(src, 0, dst, 0, 64), TY_CODE_INVALID_ARGUMENT,
                   "copy between buffers of different devices");
  expect_buffer_contents(dst, dst_expected);
  free(src_expected);
  ty_buffer_free(src);
  ty_buffer_free(dst);
  ty_device_close(second);
}

#define DEVICE_TESTS(uri)                                                        \
  cmocka_unit_test_prestate_setup_teardown(test_round_trips, setup_device,       \
                                           teardown_device, (void *)(uri)),      \
  cmocka_unit_test_prestate_setup_teardown(test_out_of_range_write_changes_nothing, \
                                           setup_device, teardown_device,        \
                                           (void *)(uri)),                       \
  cmocka_unit_test_prestate_setup_teardown(                                      \
      test_out_of_range_read_touches_no_host_memory, setup_device,               \
      teardown_device, (void *)(uri)),                                           \
  cmocka_unit_test_prestate_setup_teardown(test_out_of_range_copy_changes_nothing, \
                                           setup_device, teardown_device,        \
                                           (void *)(uri)),                       \
  cmocka_unit_test_prestate_setup_teardown(test_zero_sizes, setup_device,        \
                                           teardown_device, (void *)(uri)),      \
  cmocka_unit_test_prestate_setup_teardown(test_huge_alloc_is_resource_exhausted, \
                                           setup_device, teardown_device,        \
                                           (void *)(uri)),                       \
  cmocka_unit_test_prestate_setup_teardown(test_copy_within_device, setup_device, \
                                           teardown_device, (void *)(uri)),      \
  cmocka_unit_test_prestate_setup_teardown(test_overlapping_copy_is_rejected,    \
                                           setup_device, teardown_device,        \
                                           (void *)(uri)),                       \
  cmocka_unit_test_prestate_setup_teardown(test_copy_between_devices_is_rejected, \
                                           setup_device, teardown_device,        \
                                           (void *)(uri))

int main(void) {
  ty_test_seed(); /* print it before anything can fail */
  const struct CMUnitTest cpu_tests[] = {DEVICE_TESTS("cpu")};
  const struct CMUnitTest template_tests[] = {DEVICE_TESTS("template:0")};
  int failures = cmocka_run_group_tests_name("buffer on cpu", cpu_tests, NULL, NULL);
  failures += cmocka_run_group_tests_name("buffer on template:0", template_tests,
                                          NULL, NULL);
  return failures;
}
