/* The plugins' SHA-256 (backends/common/sha256.c) against OpenSSL's (the
 * core's ty_sha256_hex): every length from 0 to 300 bytes, so each padding
 * case is met, a known FIPS vector, and a large buffer fed in odd pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "backends/common/sha256.h"
#include "graph/lower.h"

static void hex(const unsigned char d[32], char out[65]) {
  for (int i = 0; i < 32; ++i) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_known_vector(void **state) {
  (void)state;
  unsigned char d[32];
  char h[65];
  ty_sha256("abc", 3, d);
  hex(d, h);
  assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_matches_openssl(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  size_t big = 100003;
  unsigned char *buf = malloc(big);
  assert_non_null(buf);
  ty_test_fill_random(&rng, buf, big);
  for (size_t n = 0; n <= 300; ++n) {
    unsigned char d[32];
    char ours[65], theirs[65];
    ty_sha256(buf, n, d);
    hex(d, ours);
    ty_sha256_hex(buf, n, theirs);
    assert_string_equal(ours, theirs);
  }
  ty_sha256_ctx_t ctx;
  ty_sha256_init(&ctx);
  for (size_t at = 0, step = 1; at < big; at += step, step = step * 3 % 997 + 1) {
    ty_sha256_update(&ctx, buf + at, at + step > big ? big - at : step);
  }
  unsigned char d[32];
  char ours[65], theirs[65];
  ty_sha256_final(&ctx, d);
  hex(d, ours);
  ty_sha256_hex(buf, big, theirs);
  assert_string_equal(ours, theirs);
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_vector),
      cmocka_unit_test(test_matches_openssl),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
