/* CRC-32C against published vectors (the check value, RFC 3720 B.4, an
 * iSCSI PDU), against the bit-at-a-time definition on random data at every
 * alignment and length around the 8-byte fast path, and TFRecord's mask. */
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "metrics/crc32c.h"

static void test_known_vectors(void **state) {
  (void)state;
  assert_int_equal(ty_crc32c_compute("123456789", 9), 0xE3069283u);
  assert_int_equal(ty_crc32c_compute(NULL, 0), 0u);
  assert_int_equal(ty_crc32c_compute("a", 1), 0xC1D04330u);
  static const char fox[] = "The quick brown fox jumps over the lazy dog";
  assert_int_equal(ty_crc32c_compute(fox, strlen(fox)), 0x22620404u);

  /* RFC 3720 (iSCSI) appendix B.4. */
  uint8_t buf[32];
  memset(buf, 0, sizeof(buf));
  assert_int_equal(ty_crc32c_compute(buf, 32), 0x8A9136AAu);
  memset(buf, 0xFF, sizeof(buf));
  assert_int_equal(ty_crc32c_compute(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) buf[i] = (uint8_t)i;
  assert_int_equal(ty_crc32c_compute(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) buf[i] = (uint8_t)(31 - i);
  assert_int_equal(ty_crc32c_compute(buf, 32), 0x113FDB5Cu);
  static const uint8_t read_pdu[48] = {
      0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
      0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
      0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  assert_int_equal(ty_crc32c_compute(read_pdu, sizeof(read_pdu)), 0xD9963A56u);
}

/* The definition: shift one bit at a time through the reflected polynomial. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

static void test_matches_definition(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  enum { kMax = 300 };
  uint8_t *buf = malloc(kMax + 8);
  assert_non_null(buf);
  ty_test_fill_random(&rng, buf, kMax + 8);
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n <= kMax; n += (n < 40 ? 1 : 37)) {
      uint32_t want = crc32c_bitwise(buf + offset, n);
      if (ty_crc32c_compute(buf + offset, n) != want) {
        fail_msg("offset %zu length %zu: got %08x want %08x", offset, n,
                 ty_crc32c_compute(buf + offset, n), want);
      }
    }
  }
  free(buf);
}

static void test_extend_concatenates(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed() ^ 1);
  uint8_t buf[200];
  ty_test_fill_random(&rng, buf, sizeof(buf));
  uint32_t whole = ty_crc32c_compute(buf, sizeof(buf));
  for (size_t cut = 0; cut <= sizeof(buf); cut += 13) {
    uint32_t c = ty_crc32c_extend(ty_crc32c_compute(buf, cut), buf + cut, sizeof(buf) - cut);
    assert_int_equal(c, whole);
  }
  assert_int_equal(ty_crc32c_extend(0, "123456789", 9), 0xE3069283u);
  assert_int_equal(ty_crc32c_extend(ty_crc32c_compute("1234", 4), "56789", 5), 0xE3069283u);
}

static void test_mask(void **state) {
  (void)state;
  /* ((0xE3069283 >> 15) | (0xE3069283 << 17)) = 0x2507C60D; + 0xa282ead8. */
  assert_int_equal(ty_crc32c_mask(0xE3069283u), 0xC78AB0E5u);
  assert_int_equal(ty_crc32c_mask(0), 0xa282ead8u);
  /* The masked CRC of a TFRecord length field of 5, as TensorFlow writes. */
  static const uint8_t len5[8] = {5, 0, 0, 0, 0, 0, 0, 0};
  assert_int_equal(ty_crc32c_mask(ty_crc32c_compute(len5, 8)), 0x3E04B2EAu);
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed() ^ 2);
  for (int i = 0; i < 1000; ++i) {
    uint32_t c = (uint32_t)ty_test_rng_next(&rng);
    assert_int_equal(ty_crc32c_unmask(ty_crc32c_mask(c)), c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_vectors),
      cmocka_unit_test(test_matches_definition),
      cmocka_unit_test(test_extend_concatenates),
      cmocka_unit_test(test_mask),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
