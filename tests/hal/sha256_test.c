/* hal/sha256.h, the one SHA-256 of the core and the plugins (issue 32: it
 * replaced a hand-written copy in the opencl plugin, whose program-cache keys
 * must not change). The FIPS 180-2 examples ("abc", the 448-bit message, one
 * million 'a'), the empty message, and random data hashed in updates split
 * at odd offsets, which must equal the one-shot digest. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "hal/sha256.h"

static void expect_hex(const void *data, size_t size, const char *want) {
  char hex[65];
  assert_true(ty_sha256_hex(data, size, hex));
  assert_string_equal(hex, want);
  unsigned char digest[32];
  assert_true(ty_sha256(data, size, digest));
  char again[65];
  ty_sha256_to_hex(digest, again);
  assert_string_equal(again, want);
}

static void test_fips_vectors(void **state) {
  (void)state;
  expect_hex("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  assert_int_equal(strlen(m448) * 8, 448);
  expect_hex(m448, strlen(m448),
             "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  expect_hex("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_hex(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  /* One million 'a', fed 1000 at a time (crosses every block boundary). */
  char chunk[1000];
  memset(chunk, 'a', sizeof(chunk));
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  for (int i = 0; i < 1000; ++i) ty_sha256_update(&sha, chunk, sizeof(chunk));
  char hex[65];
  assert_true(ty_sha256_final_hex(&sha, hex));
  assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  assert_null(sha.ctx);
}

/* Splits at odd offsets (1, 3, 55, 56, 63, 64, 65 ... bytes: around the
 * 56-byte padding edge and the 64-byte block) give the one-shot digest. */
static void test_split_updates_equal_one_shot(void **state) {
  (void)state;
  enum { kSize = 1000 };
  unsigned char *data = malloc(kSize);
  assert_non_null(data);
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  ty_test_fill_random(&rng, data, kSize);
  unsigned char whole[32];
  assert_true(ty_sha256(data, kSize, whole));
  static const size_t steps[] = {1, 3, 55, 56, 63, 64, 65, 127, 7, 129};
  for (size_t first = 0; first < sizeof(steps) / sizeof(steps[0]); ++first) {
    ty_sha256_t sha;
    ty_sha256_init(&sha);
    size_t at = 0;
    for (size_t k = first; at < kSize; ++k) {
      size_t n = steps[k % (sizeof(steps) / sizeof(steps[0]))];
      if (n > kSize - at) n = kSize - at;
      ty_sha256_update(&sha, data + at, n);
      ty_sha256_update(&sha, data + at + n, 0); /* empty updates change nothing */
      at += n;
    }
    unsigned char split[32];
    assert_true(ty_sha256_final(&sha, split));
    assert_memory_equal(split, whole, 32);
  }
  free(data);
}

/* A second final is a caller's bug: it reports failure and writes zeros
 * rather than reading a freed context. */
static void test_second_final_fails(void **state) {
  (void)state;
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  ty_sha256_update(&sha, "abc", 3);
  unsigned char digest[32];
  assert_true(ty_sha256_final(&sha, digest));
  char hex[65];
  assert_false(ty_sha256_final_hex(&sha, hex));
  assert_string_equal(hex, "0000000000000000000000000000000000000000000000000000000000000000");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fips_vectors),
      cmocka_unit_test(test_split_updates_equal_one_shot),
      cmocka_unit_test(test_second_final_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
