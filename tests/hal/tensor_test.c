/* Unit tests of hal/tensor: descriptor construction and validation,
 * contiguity, required bytes (strides, offsets, overflow) and formatting. */
#include "common/test_util.h"

#include <string.h>

#include "hal/tensor.h"

static void test_init_row_major(void **state) {
  (void)state;
  const int64_t dims[] = {2, 3, 5};
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_BF16, 3, dims, "h.0.attn", &d));
  assert_int_equal(d.dtype, TY_DTYPE_BF16);
  assert_int_equal(d.rank, 3);
  assert_int_equal(d.dims[0], 2);
  assert_int_equal(d.dims[1], 3);
  assert_int_equal(d.dims[2], 5);
  assert_int_equal(d.strides[0], 15);
  assert_int_equal(d.strides[1], 5);
  assert_int_equal(d.strides[2], 1);
  assert_int_equal(d.byte_offset, 0);
  assert_string_equal(d.name, "h.0.attn");
  assert_int_equal(ty_tensor_desc_element_count(&d), 30);
  assert_true(ty_tensor_desc_is_contiguous(&d));
  uint64_t bytes = 0;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 60);
}

static void test_init_rank_zero_and_null_name(void **state) {
  (void)state;
  ty_tensor_desc_t d;
  memset(&d, 0x7f, sizeof(d));
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F64, 0, NULL, NULL, &d));
  assert_int_equal(d.rank, 0);
  assert_string_equal(d.name, "");
  assert_int_equal(ty_tensor_desc_element_count(&d), 1);
  uint64_t bytes = 0;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 8);
}

static void test_init_max_rank_and_longest_name(void **state) {
  (void)state;
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (int i = 0; i < TY_TENSOR_MAX_RANK; ++i) dims[i] = 2;
  char name[TY_TENSOR_NAME_MAX];
  memset(name, 'n', sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_U8, TY_TENSOR_MAX_RANK, dims, name, &d));
  assert_int_equal(ty_tensor_desc_element_count(&d), 256);
  assert_string_equal(d.name, name);
}

static void test_init_rejects_invalid_dtype(void **state) {
  (void)state;
  const int64_t dims[] = {4};
  ty_tensor_desc_t d;
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_INVALID, 1, dims, "w", &d),
                   TY_CODE_INVALID_ARGUMENT, "tensor w: invalid dtype value 0");
  TY_EXPECT_STATUS(ty_tensor_desc_init((ty_dtype_t)99, 1, dims, NULL, &d),
                   TY_CODE_INVALID_ARGUMENT, "(unnamed): invalid dtype value 99");
}

static void test_init_rejects_rank_above_max(void **state) {
  (void)state;
  int64_t dims[TY_TENSOR_MAX_RANK + 1];
  for (int i = 0; i <= TY_TENSOR_MAX_RANK; ++i) dims[i] = 1;
  ty_tensor_desc_t d;
  TY_EXPECT_STATUS(
      ty_tensor_desc_init(TY_DTYPE_F32, TY_TENSOR_MAX_RANK + 1, dims, "deep", &d),
      TY_CODE_INVALID_ARGUMENT, "rank 9 exceeds the maximum of 8");
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_F32, UINT32_MAX, dims, "deep", &d),
                   TY_CODE_INVALID_ARGUMENT, "exceeds the maximum");
}

static void test_init_rejects_negative_dims(void **state) {
  (void)state;
  const int64_t dims[] = {4, -3, 2};
  ty_tensor_desc_t d;
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_F32, 3, dims, "x", &d),
                   TY_CODE_INVALID_ARGUMENT, "tensor x: dimension 1 is negative (-3)");
  const int64_t most_negative[] = {INT64_MIN};
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_F32, 1, most_negative, "x", &d),
                   TY_CODE_INVALID_ARGUMENT, "dimension 0 is negative");
}

static void test_init_rejects_too_long_name(void **state) {
  (void)state;
  char name[TY_TENSOR_NAME_MAX + 1];
  memset(name, 'n', sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  const int64_t dims[] = {1};
  ty_tensor_desc_t d;
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_F32, 1, dims, name, &d),
                   TY_CODE_INVALID_ARGUMENT, "is longer than 127 bytes");
}

static void test_init_rejects_byte_size_overflow(void **state) {
  (void)state;
  ty_tensor_desc_t d;
  const int64_t cube[] = {1ll << 31, 1ll << 31, 1ll << 31};
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_U8, 3, cube, "cube", &d),
                   TY_CODE_INVALID_ARGUMENT, "tensor cube: byte size overflows 64 bits");
  /* Byte sizes must fit in int64: the limit is INT64_MAX bytes. */
  const int64_t fits[] = {INT64_MAX / 4};
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 1, fits, "v", &d));
  const int64_t one_more[] = {INT64_MAX / 4 + 1};
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_F32, 1, one_more, "v", &d),
                   TY_CODE_INVALID_ARGUMENT, "overflows 64 bits");
  const int64_t u8_max[] = {INT64_MAX};
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_U8, 1, u8_max, "v", &d));
  const int64_t pair[] = {INT64_MAX, 2};
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_U8, 2, pair, "v", &d),
                   TY_CODE_INVALID_ARGUMENT, "overflows 64 bits");
}

static void test_init_empty_tensor_with_huge_dims_does_not_overflow(void **state) {
  (void)state;
  /* Zero elements, but row-major strides over the other dims (2^80) do not
   * fit in int64: the descriptor must be refused, not built with wrapped
   * strides (UBSan checks there is no signed overflow on the way). */
  const int64_t dims[] = {0, 1ll << 40, 1ll << 40};
  ty_tensor_desc_t d;
  TY_EXPECT_STATUS(ty_tensor_desc_init(TY_DTYPE_F32, 3, dims, "e", &d),
                   TY_CODE_INVALID_ARGUMENT,
                   "tensor e: row-major strides overflow 64 bits");
  /* Small empty tensors are fine and address nothing. */
  const int64_t small[] = {2, 0, 3};
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 3, small, "e", &d));
  assert_int_equal(ty_tensor_desc_element_count(&d), 0);
  uint64_t bytes = 99;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 0);
}

static void test_contiguity(void **state) {
  (void)state;
  const int64_t dims[] = {2, 3};
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "m", &d));
  assert_true(ty_tensor_desc_is_contiguous(&d));
  d.strides[0] = 1; /* transposed view */
  d.strides[1] = 2;
  assert_false(ty_tensor_desc_is_contiguous(&d));
  /* The stride of a size-1 axis does not matter. */
  const int64_t row[] = {1, 4};
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, row, "r", &d));
  d.strides[0] = 1000;
  assert_true(ty_tensor_desc_is_contiguous(&d));
}

static void test_init_output_with_zero_dim_is_contiguous(void **state) {
  (void)state;
  /* ty_tensor_desc_init promises a contiguous row-major descriptor, zero
   * dims included. */
  const int64_t dims[] = {2, 0, 3};
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 3, dims, "z", &d));
  assert_true(ty_tensor_desc_is_contiguous(&d));
}

static void test_required_bytes_with_offset_and_strides(void **state) {
  (void)state;
  const int64_t dims[] = {2, 3};
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "v", &d));
  uint64_t bytes = 0;

  d.byte_offset = 16;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 16 + 24);

  /* Padded rows: strides {8, 2} elements; furthest element is 1*8 + 2*2. */
  d.byte_offset = 4;
  d.strides[0] = 8;
  d.strides[1] = 2;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 4 + (1 * 8 + 2 * 2 + 1) * 4);

  /* Broadcast: stride 0 re-reads one row. */
  d.byte_offset = 0;
  d.strides[0] = 0;
  d.strides[1] = 1;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 3 * 4);

  /* An empty tensor needs only its offset. */
  d.dims[0] = 0;
  d.byte_offset = 100;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_int_equal(bytes, 100);
}

static void test_required_bytes_rejects_bad_descriptors(void **state) {
  (void)state;
  const int64_t dims[] = {2, 3};
  ty_tensor_desc_t d;
  uint64_t bytes = 123;

  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "neg", &d));
  d.strides[1] = -1;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "tensor neg: negative dimension or stride at axis 1");
  assert_int_equal(bytes, 0);

  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "negdim", &d));
  d.dims[0] = -2;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "negative dimension or stride at axis 0");

  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "bad", &d));
  d.dtype = TY_DTYPE_INVALID;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "tensor bad: invalid descriptor");
  d.dtype = TY_DTYPE_F32;
  d.rank = TY_TENSOR_MAX_RANK + 1;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "invalid descriptor");
}

static void test_required_bytes_rejects_overflow(void **state) {
  (void)state;
  const int64_t dims[] = {2, 3};
  ty_tensor_desc_t d;
  uint64_t bytes = 0;

  /* Huge stride: the element index fits, its byte position does not. */
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "wide", &d));
  d.strides[0] = INT64_MAX;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "tensor wide: addressed byte range overflows 64 bits");

  /* The element index itself overflows: (2^20 - 1) * INT64_MAX. */
  const int64_t big[] = {1ll << 20, 1ll << 20};
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_U8, 2, big, "idx", &d));
  d.strides[0] = INT64_MAX;
  d.strides[1] = INT64_MAX;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "overflows 64 bits");

  /* Offset pushes the end past 2^64. */
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "off", &d));
  d.byte_offset = UINT64_MAX - 10;
  TY_EXPECT_STATUS(ty_tensor_desc_required_bytes(&d, &bytes), TY_CODE_INVALID_ARGUMENT,
                   "overflows 64 bits");
  /* ...but exactly reaching it is fine. */
  d.byte_offset = UINT64_MAX - 24;
  TY_EXPECT_OK(ty_tensor_desc_required_bytes(&d, &bytes));
  assert_true(bytes == UINT64_MAX);
}

static void test_format(void **state) {
  (void)state;
  char buf[64];
  const int64_t dims[] = {2, 3};
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, 2, dims, "x", &d));
  assert_string_equal(ty_tensor_desc_format(&d, buf, sizeof(buf)), "f32[2,3]");
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_I64, 0, NULL, "s", &d));
  assert_string_equal(ty_tensor_desc_format(&d, buf, sizeof(buf)), "i64[]");
  const int64_t big[] = {INT64_MAX};
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_U8, 1, big, "b", &d));
  assert_string_equal(ty_tensor_desc_format(&d, buf, sizeof(buf)),
                      "u8[9223372036854775807]");
}

static void test_format_truncates_inside_capacity(void **state) {
  (void)state;
  int64_t dims[TY_TENSOR_MAX_RANK];
  for (int i = 0; i < TY_TENSOR_MAX_RANK; ++i) dims[i] = 100 + i;
  ty_tensor_desc_t d;
  TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_BF16, TY_TENSOR_MAX_RANK, dims, "t", &d));
  const char *full = "bf16[100,101,102,103,104,105,106,107]";
  for (size_t capacity = 1; capacity <= strlen(full) + 1; ++capacity) {
    char buf[80];
    memset(buf, 0x5a, sizeof(buf));
    ty_tensor_desc_format(&d, buf, capacity);
    assert_non_null(memchr(buf, '\0', capacity));
    assert_int_equal(strncmp(buf, full, strlen(buf)), 0);
    for (size_t i = capacity; i < sizeof(buf); ++i) assert_int_equal(buf[i], 0x5a);
    if (capacity == strlen(full) + 1) assert_string_equal(buf, full);
  }
  char untouched = 0x5a;
  ty_tensor_desc_format(&d, &untouched, 0);
  assert_int_equal(untouched, 0x5a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_init_row_major),
      cmocka_unit_test(test_init_rank_zero_and_null_name),
      cmocka_unit_test(test_init_max_rank_and_longest_name),
      cmocka_unit_test(test_init_rejects_invalid_dtype),
      cmocka_unit_test(test_init_rejects_rank_above_max),
      cmocka_unit_test(test_init_rejects_negative_dims),
      cmocka_unit_test(test_init_rejects_too_long_name),
      cmocka_unit_test(test_init_rejects_byte_size_overflow),
      cmocka_unit_test(test_init_empty_tensor_with_huge_dims_does_not_overflow),
      cmocka_unit_test(test_contiguity),
      cmocka_unit_test(test_init_output_with_zero_dim_is_contiguous),
      cmocka_unit_test(test_required_bytes_with_offset_and_strides),
      cmocka_unit_test(test_required_bytes_rejects_bad_descriptors),
      cmocka_unit_test(test_required_bytes_rejects_overflow),
      cmocka_unit_test(test_format),
      cmocka_unit_test(test_format_truncates_inside_capacity),
  };
  return cmocka_run_group_tests_name("tensor", tests, NULL, NULL);
}
