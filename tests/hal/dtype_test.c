/* Unit tests of hal/dtype: sizes, names, parsing and mask formatting. */
#include "common/test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/half.h"

static const struct {
  ty_dtype_t dtype;
  const char *name;
  size_t size;
  bool is_float;
} kDtypes[] = {
    {TY_DTYPE_F32, "f32", 4, true},   {TY_DTYPE_BF16, "bf16", 2, true},
    {TY_DTYPE_F16, "f16", 2, true},   {TY_DTYPE_F64, "f64", 8, true},
    {TY_DTYPE_I32, "i32", 4, false},  {TY_DTYPE_I64, "i64", 8, false},
    {TY_DTYPE_U8, "u8", 1, false},
};
#define kDtypeCount (sizeof(kDtypes) / sizeof(kDtypes[0]))

static void test_every_dtype_is_in_the_table(void **state) {
  (void)state;
  /* A new dtype must be added here too (and to the ABI docs). */
  assert_int_equal(kDtypeCount, TY_DTYPE_COUNT_ - 1);
}

static void test_sizes_names_and_kinds(void **state) {
  (void)state;
  for (size_t i = 0; i < kDtypeCount; ++i) {
    assert_true(ty_dtype_is_valid(kDtypes[i].dtype));
    assert_int_equal(ty_dtype_size(kDtypes[i].dtype), kDtypes[i].size);
    assert_string_equal(ty_dtype_name(kDtypes[i].dtype), kDtypes[i].name);
    assert_int_equal(ty_dtype_is_float(kDtypes[i].dtype), kDtypes[i].is_float);
  }
}

static void test_invalid_values(void **state) {
  (void)state;
  const ty_dtype_t bad[] = {TY_DTYPE_INVALID, TY_DTYPE_COUNT_, (ty_dtype_t)77,
                            (ty_dtype_t)-1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    assert_false(ty_dtype_is_valid(bad[i]));
    assert_int_equal(ty_dtype_size(bad[i]), 0);
    assert_string_equal(ty_dtype_name(bad[i]), "invalid");
    assert_false(ty_dtype_is_float(bad[i]));
  }
}

static void test_parse_round_trips_every_name(void **state) {
  (void)state;
  for (size_t i = 0; i < kDtypeCount; ++i) {
    ty_dtype_t d = TY_DTYPE_INVALID;
    TY_EXPECT_OK(ty_dtype_parse(kDtypes[i].name, &d));
    assert_int_equal(d, kDtypes[i].dtype);
  }
  ty_dtype_t d = TY_DTYPE_INVALID;
  TY_EXPECT_OK(ty_dtype_parse("bool", &d));
  assert_int_equal(d, TY_DTYPE_U8);
}

static void test_parse_rejects_bad_names(void **state) {
  (void)state;
  const char *bad[] = {"",    "F32",  "float32", "f32 ", " f32", "fp16",
                       "f",   "bf",   "invalid", "u8x",  "i16",  "f32\n"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    ty_dtype_t d = TY_DTYPE_F64;
    ty_status_t s = ty_dtype_parse(bad[i], &d);
    assert_int_equal(d, TY_DTYPE_INVALID); /* never left stale */
    char quoted[64];
    snprintf(quoted, sizeof(quoted), "unknown dtype '%s'", bad[i]);
    assert_non_null(s);
    TY_EXPECT_CONTAINS(ty_status_message(s), "expected one of f32, bf16");
    TY_EXPECT_STATUS(s, TY_CODE_INVALID_ARGUMENT, quoted);
  }
  ty_dtype_t d = TY_DTYPE_F32;
  TY_EXPECT_STATUS(ty_dtype_parse(NULL, &d), TY_CODE_INVALID_ARGUMENT, "(null)");
  assert_int_equal(d, TY_DTYPE_INVALID);
}

static void test_mask_format(void **state) {
  (void)state;
  char buf[64];
  assert_string_equal(ty_dtype_mask_format(0, buf, sizeof(buf)), "");
  assert_string_equal(
      ty_dtype_mask_format(TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_U8),
                           buf, sizeof(buf)),
      "f32,u8");
  /* Bits outside the known dtypes (INVALID, future ones) are ignored. */
  assert_string_equal(
      ty_dtype_mask_format(TY_DTYPE_BIT(TY_DTYPE_INVALID) | (1u << 30) |
                               TY_DTYPE_BIT(TY_DTYPE_BF16),
                           buf, sizeof(buf)),
      "bf16");
  uint32_t all = 0;
  for (size_t i = 0; i < kDtypeCount; ++i) all |= TY_DTYPE_BIT(kDtypes[i].dtype);
  assert_string_equal(ty_dtype_mask_format(all, buf, sizeof(buf)),
                      "f32,bf16,f16,f64,i32,i64,u8");
}

static void test_mask_format_truncates_without_overflow(void **state) {
  (void)state;
  /* Sentinels after the declared capacity must survive. */
  char buf[16];
  memset(buf, 0x5a, sizeof(buf));
  ty_dtype_mask_format(0xffu, buf, 8);
  /* NUL-terminated within the capacity, a prefix of the full list, and the
   * sentinels after the declared capacity survive. */
  assert_true(memchr(buf, '\0', 8) != NULL);
  /* Whole names only: "f32,bf1" would be a lie. */
  assert_string_equal(buf, "f32");
  for (size_t i = 8; i < sizeof(buf); ++i) assert_int_equal(buf[i], 0x5a);
  char one = 0x5a;
  ty_dtype_mask_format(0xffu, &one, 0); /* capacity 0: nothing written */
  assert_int_equal(one, 0x5a);
}

/* NaN and both infinities are found at their index in every float dtype;
 * finite data (the largest finite values included) and integers are not. */
static void test_find_nonfinite(void **state) {
  (void)state;
  const double bad[3] = {NAN, INFINITY, -INFINITY};
  for (int b = 0; b < 3; ++b) {
    float f32[5] = {1, -2, 3.4e38f, 0, 5};
    double f64[5] = {1, -2, 1.7e308, 0, 5};
    uint16_t bf16[5], f16[5];
    for (int i = 0; i < 5; ++i) {
      bf16[i] = ty_f32_to_bf16(f32[i] > 1e30f ? 3e38f : f32[i]);
      f16[i] = ty_f32_to_f16(f32[i] > 1e30f ? 65504.0f : f32[i]);
    }
    const void *data[4] = {f32, f64, bf16, f16};
    const ty_dtype_t dtypes[4] = {TY_DTYPE_F32, TY_DTYPE_F64, TY_DTYPE_BF16, TY_DTYPE_F16};
    uint64_t index = 99;
    double value = 0;
    for (int d = 0; d < 4; ++d) {
      assert_false(ty_dtype_find_nonfinite(dtypes[d], data[d], 5, &index, &value));
    }
    f32[3] = (float)bad[b];
    f64[3] = bad[b];
    bf16[3] = ty_f32_to_bf16((float)bad[b]);
    f16[3] = ty_f32_to_f16((float)bad[b]);
    for (int d = 0; d < 4; ++d) {
      assert_true(ty_dtype_find_nonfinite(dtypes[d], data[d], 5, &index, &value));
      assert_int_equal(index, 3);
      assert_true(isnan(bad[b]) ? isnan(value) : value == bad[b]);
      /* Only the elements it is given. */
      assert_false(ty_dtype_find_nonfinite(dtypes[d], data[d], 3, &index, &value));
    }
  }
  int64_t ints[2] = {-1, 0x7FF0000000000000};
  assert_false(ty_dtype_find_nonfinite(TY_DTYPE_I64, ints, 2, NULL, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_dtype_is_in_the_table),
      cmocka_unit_test(test_sizes_names_and_kinds),
      cmocka_unit_test(test_invalid_values),
      cmocka_unit_test(test_parse_round_trips_every_name),
      cmocka_unit_test(test_parse_rejects_bad_names),
      cmocka_unit_test(test_mask_format),
      cmocka_unit_test(test_mask_format_truncates_without_overflow),
      cmocka_unit_test(test_find_nonfinite),
  };
  return cmocka_run_group_tests_name("dtype", tests, NULL, NULL);
}
