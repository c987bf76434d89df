/* Protobuf wire encoding and TensorBoard Event/TFRecord bytes against
 * byte strings worked out by hand from the protobuf encoding rules
 * (https://protobuf.dev/programming-guides/encoding/) and event.proto /
 * summary.proto. The Python test (test_tensorboard_events.py) compares the
 * same encoding with the protobuf library's own serialisation. */
#include <math.h>
#include <string.h>

#include "common/test_util.h"
#include "metrics/crc32c.h"
#include "metrics/protobuf.h"
#include "metrics/tensorboard.h"

static void expect_bytes(const ty_pb_buffer_t *b, const uint8_t *want, size_t n) {
  assert_false(b->failed);
  if (b->size != n) fail_msg("encoded %zu bytes, want %zu", b->size, n);
  for (size_t i = 0; i < n; ++i) {
    if (b->data[i] != want[i]) fail_msg("byte %zu: %02x, want %02x", i, b->data[i], want[i]);
  }
}

static void expect_varint(uint64_t v, const uint8_t *want, size_t n) {
  uint8_t out[TY_PB_VARINT_MAX_BYTES];
  size_t got = ty_pb_varint_encode(v, out);
  assert_int_equal(got, n);
  assert_memory_equal(out, want, n);
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  ty_pb_put_varint(&b, v);
  expect_bytes(&b, want, n);
  ty_pb_buffer_deinit(&b);
}

static void test_varints(void **state) {
  (void)state;
  expect_varint(0, (const uint8_t[]){0x00}, 1);
  expect_varint(1, (const uint8_t[]){0x01}, 1);
  expect_varint(127, (const uint8_t[]){0x7F}, 1);
  expect_varint(128, (const uint8_t[]){0x80, 0x01}, 2);
  expect_varint(150, (const uint8_t[]){0x96, 0x01}, 2); /* the encoding guide's example */
  expect_varint(300, (const uint8_t[]){0xAC, 0x02}, 2);
  expect_varint(16383, (const uint8_t[]){0xFF, 0x7F}, 2);
  expect_varint(16384, (const uint8_t[]){0x80, 0x80, 0x01}, 3);
  expect_varint(UINT32_MAX, (const uint8_t[]){0xFF, 0xFF, 0xFF, 0xFF, 0x0F}, 5);
  /* int64 -1 as protobuf's int64 writes it: two's complement, ten bytes. */
  expect_varint((uint64_t)(int64_t)-1,
                (const uint8_t[]){0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01},
                10);
  expect_varint(UINT64_C(1) << 63,
                (const uint8_t[]){0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
                10);
}

static void test_fields(void **state) {
  (void)state;
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  /* Field 1 (wire type 1) = 1.0: key 0x09, then 0x3FF0000000000000 LE. */
  ty_pb_put_double_field(&b, 1, 1.0);
  expect_bytes(&b, (const uint8_t[]){0x09, 0, 0, 0, 0, 0, 0, 0xF0, 0x3F}, 9);
  ty_pb_buffer_reset(&b);
  /* Field 2 (wire type 5) = -2.5f = 0xC0200000. */
  ty_pb_put_float_field(&b, 2, -2.5f);
  expect_bytes(&b, (const uint8_t[]){0x15, 0x00, 0x00, 0x20, 0xC0}, 5);
  ty_pb_buffer_reset(&b);
  /* Field 2 (varint) = 150; field 3 (bytes) = "testing" (the guide's). */
  ty_pb_put_int64_field(&b, 2, 150);
  ty_pb_put_bytes_field(&b, 3, "testing", 7);
  expect_bytes(&b, (const uint8_t[]){0x10, 0x96, 0x01, 0x1A, 0x07, 't', 'e', 's', 't', 'i',
                                     'n', 'g'},
               12);
  ty_pb_buffer_reset(&b);
  /* A field number that needs a two-byte key: 16 << 3 | 0 = 128. */
  ty_pb_put_key(&b, 16, TY_PB_WIRE_VARINT);
  expect_bytes(&b, (const uint8_t[]){0x80, 0x01}, 2);
  ty_pb_buffer_deinit(&b);
}

static void test_growth(void **state) {
  (void)state;
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  for (int i = 0; i < 5000; ++i) ty_pb_put_varint(&b, (uint64_t)i);
  assert_false(b.failed);
  /* 128 one-byte, 5000 - 128 two-byte varints. */
  assert_int_equal(b.size, 128 + (5000 - 128) * 2);
  assert_int_equal(b.data[b.size - 2], (uint8_t)(4999 | 0x80));
  assert_int_equal(b.data[b.size - 1], (uint8_t)(4999 >> 7));
  TY_EXPECT_OK(ty_pb_buffer_status(&b, "test"));
  b.failed = true;
  TY_EXPECT_STATUS(ty_pb_buffer_status(&b, "a test message"), TY_CODE_RESOURCE_EXHAUSTED,
                   "a test message");
  ty_pb_buffer_deinit(&b);
}

static const uint8_t kVersionEvent[] = {
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF8, 0x3F, /* wall_time 1.5 */
    0x1A, 0x0D, 'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2'};

static void test_version_event(void **state) {
  (void)state;
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  ty_tensorboard_event_encode_version(&b, 1.5);
  expect_bytes(&b, kVersionEvent, sizeof(kVersionEvent));
  ty_pb_buffer_deinit(&b);
}

static void test_scalar_event(void **state) {
  (void)state;
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  ty_tensorboard_scalar_t loss = {"loss", 1.0};
  TY_EXPECT_OK(ty_tensorboard_event_encode_scalars(&b, 2.0, 150, &loss, 1));
  static const uint8_t want[] = {
      0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, /* wall_time 2.0 */
      0x10, 0x96, 0x01,                /* step 150 */
      0x2A, 0x0D,                      /* summary, 13 bytes */
      0x0A, 0x0B,                      /*   value, 11 bytes */
      0x0A, 0x04, 'l', 'o', 's', 's',  /*     tag */
      0x15, 0x00, 0x00, 0x80, 0x3F};   /*     simple_value 1.0f */
  expect_bytes(&b, want, sizeof(want));

  /* proto3 leaves out a zero step and wall time; simple_value (a oneof
   * member) is written even when zero; two values in one summary. */
  ty_pb_buffer_reset(&b);
  ty_tensorboard_scalar_t two[] = {{"a", 0.0}, {"lr", -2.5}};
  TY_EXPECT_OK(ty_tensorboard_event_encode_scalars(&b, 0.0, 0, two, 2));
  static const uint8_t want2[] = {
      0x2A, 0x15,                                /* summary, 21 bytes */
      0x0A, 0x08, 0x0A, 0x01, 'a', 0x15, 0, 0, 0, 0,  /* {a, 0.0f} */
      0x0A, 0x09, 0x0A, 0x02, 'l', 'r', 0x15, 0x00, 0x00, 0x20, 0xC0}; /* {lr, -2.5f} */
  expect_bytes(&b, want2, sizeof(want2));

  /* A negative step is a ten-byte varint. */
  ty_pb_buffer_reset(&b);
  TY_EXPECT_OK(ty_tensorboard_event_encode_scalars(&b, 0.0, -1, &loss, 1));
  static const uint8_t want3[] = {0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
  assert_true(b.size > sizeof(want3));
  assert_memory_equal(b.data, want3, sizeof(want3));
  ty_pb_buffer_deinit(&b);
}

static void test_scalar_event_refusals(void **state) {
  (void)state;
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  ty_tensorboard_scalar_t bad[] = {{"loss", 1.0}, {"loss", 2.0}};
  TY_EXPECT_STATUS(ty_tensorboard_event_encode_scalars(&b, 1.0, 1, bad, 2),
                   TY_CODE_INVALID_ARGUMENT, "'loss' appears twice");
  ty_tensorboard_scalar_t empty = {"", 1.0};
  TY_EXPECT_STATUS(ty_tensorboard_event_encode_scalars(&b, 1.0, 7, &empty, 1),
                   TY_CODE_INVALID_ARGUMENT, "has no tag");
  ty_tensorboard_scalar_t latin1 = {"caf\xe9", 1.0};
  TY_EXPECT_STATUS(ty_tensorboard_event_encode_scalars(&b, 1.0, 1, &latin1, 1),
                   TY_CODE_INVALID_ARGUMENT, "not valid UTF-8");
  ty_tensorboard_scalar_t surrogate = {"\xed\xa0\x80", 1.0};
  TY_EXPECT_STATUS(ty_tensorboard_event_encode_scalars(&b, 1.0, 1, &surrogate, 1),
                   TY_CODE_INVALID_ARGUMENT, "not valid UTF-8");
  ty_tensorboard_scalar_t overlong = {"\xc0\xaf", 1.0};
  TY_EXPECT_STATUS(ty_tensorboard_event_encode_scalars(&b, 1.0, 1, &overlong, 1),
                   TY_CODE_INVALID_ARGUMENT, "not valid UTF-8");
  TY_EXPECT_STATUS(ty_tensorboard_event_encode_scalars(&b, 1.0, 1, NULL, 0),
                   TY_CODE_INVALID_ARGUMENT, "at least one value");
  assert_int_equal(b.size, 0); /* nothing written on error */
  ty_tensorboard_scalar_t utf8 = {"train/\xc3\xa9\xf0\x9f\x98\x80", 1.0};
  TY_EXPECT_OK(ty_tensorboard_event_encode_scalars(&b, 1.0, 1, &utf8, 1));
  ty_pb_buffer_deinit(&b);
}

static void test_value_to_float(void **state) {
  (void)state;
  assert_true(ty_tensorboard_value_to_float(0.1) == 0.1f);
  assert_true(isinf(ty_tensorboard_value_to_float(1e300)));
  assert_true(ty_tensorboard_value_to_float(-1e300) < 0);
  assert_true(isnan(ty_tensorboard_value_to_float(NAN)));
}

static void test_record_frame(void **state) {
  (void)state;
  ty_pb_buffer_t b;
  ty_pb_buffer_init(&b);
  ty_tensorboard_record_frame(&b, kVersionEvent, sizeof(kVersionEvent));
  assert_int_equal(b.size, 8 + 4 + sizeof(kVersionEvent) + 4);
  static const uint8_t len[8] = {sizeof(kVersionEvent), 0, 0, 0, 0, 0, 0, 0};
  assert_memory_equal(b.data, len, 8);
  uint32_t len_crc = ty_crc32c_mask(ty_crc32c_compute(len, 8));
  uint32_t data_crc = ty_crc32c_mask(ty_crc32c_compute(kVersionEvent, sizeof(kVersionEvent)));
  const uint8_t *p = b.data + 8;
  assert_int_equal(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24, len_crc);
  assert_memory_equal(b.data + 12, kVersionEvent, sizeof(kVersionEvent));
  p = b.data + 12 + sizeof(kVersionEvent);
  assert_int_equal(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24, data_crc);
  /* An empty record: length 0, CRC of zero bytes masked. */
  ty_pb_buffer_reset(&b);
  ty_tensorboard_record_frame(&b, NULL, 0);
  assert_int_equal(b.size, 16);
  assert_int_equal(b.data[12] | b.data[13] << 8 | b.data[14] << 16 | (uint32_t)b.data[15] << 24,
                   0xa282ead8u);
  ty_pb_buffer_deinit(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_varints),
      cmocka_unit_test(test_fields),
      cmocka_unit_test(test_growth),
      cmocka_unit_test(test_version_event),
      cmocka_unit_test(test_scalar_event),
      cmocka_unit_test(test_scalar_event_refusals),
      cmocka_unit_test(test_value_to_float),
      cmocka_unit_test(test_record_frame),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
