/* Tests for hal/philox.h: Philox4x32-10 against Random123's known-answer
 * vectors, the documented element-stream mapping, golden stream values, and
 * dropout keep rates.
 *
 * KAT sources: the three "philox4x32 10" lines of Random123's
 * tests/kat_vectors (DEShawResearch/random123), and further lines of the
 * examples/kat_vectors file as kept in girving/random123-manual. Columns:
 * CTR (4 words), KEY (2 words), EXPECTED (4 words).
 * Golden stream values were computed by an independent Python implementation
 * of the published algorithm that also reproduces those vectors.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hal/philox.h"
#include "test_util.h"

typedef struct kat_t {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expected[4];
} kat_t;

static const kat_t kKats[] = {
    /* Random123 tests/kat_vectors */
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    /* examples/kat_vectors (girving/random123-manual) */
    {{0x00000001, 0x00000000, 0x00000000, 0x00000000},
     {0x00000001, 0x00000000},
     {0xac08141b, 0xdfc5ccbe, 0x79c07a47, 0xa7f66093}},
    {{0x00000000, 0x00000000, 0x00000000, 0xffffffff},
     {0x00000001, 0x00000000},
     {0xf50c9398, 0xb36cdab2, 0x436bdc89, 0xcc49431b}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0x00000000, 0x00000001},
     {0x126514c3, 0xd1898b69, 0xda2707b3, 0x6e6fb436}},
    {{0x00000000, 0x00000000, 0x00000000, 0x80000000},
     {0x00000000, 0x80000000},
     {0xf7a0b371, 0xe51dc93d, 0x56ce135d, 0x1d4b5580}},
    {{0x452821e6, 0x38d01377, 0xbe5466cf, 0x34e90c6c},
     {0x00000000, 0xffffffff},
     {0x72ce44b3, 0xb44f9b78, 0x49af0267, 0x726813ac}},
};

static void test_known_answers(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(kKats) / sizeof(kKats[0]); ++i) {
    uint32_t out[4];
    ty_philox4x32_10(kKats[i].ctr, kKats[i].key, out);
    for (int w = 0; w < 4; ++w) {
      if (out[w] != kKats[i].expected[w]) {
        fail_msg("KAT %zu word %d: got %08x, expected %08x", i, w, out[w],
                 kKats[i].expected[w]);
      }
    }
  }
  /* out may alias ctr. */
  uint32_t inout[4] = {0, 0, 0, 0};
  ty_philox4x32_10(inout, (const uint32_t[2]){0, 0}, inout);
  assert_int_equal(inout[0], 0x6627e8d5);
}

/* The mapping written in the header, spelled out independently. */
static void test_stream_mapping(void **state) {
  (void)state;
  for (int trial = 0; trial < 1000; ++trial) {
    uint64_t seed = ty_test_rng_u64(), offset = ty_test_rng_u64();
    uint64_t index = ty_test_rng_u64() >> (trial % 64);
    uint64_t g = index >> 2;
    uint32_t ctr[4] = {(uint32_t)(g & 0xffffffffu), (uint32_t)(g >> 32),
                       (uint32_t)(offset & 0xffffffffu), (uint32_t)(offset >> 32)};
    uint32_t key[2] = {(uint32_t)(seed & 0xffffffffu), (uint32_t)(seed >> 32)};
    uint32_t r[4];
    ty_philox4x32_10(ctr, key, r);
    assert_int_equal(ty_philox_u32(seed, offset, index), r[index & 3]);
    assert_int_equal(ty_philox_u24(seed, offset, index), r[index & 3] >> 8);
  }
}

static void test_golden_u24(void **state) {
  (void)state;
  static const struct {
    uint64_t seed, offset, index;
    uint32_t u24;
  } kGolden[] = {
      {0x0000000000000000ull, 0x0000000000000000ull, 0ull, 0x6627e8},
      {0x0000000000000000ull, 0x0000000000000000ull, 3ull, 0x9b00db},
      {0x0000000000000000ull, 0x0000000000000000ull, 4ull, 0xf8e4cc},
      {0x00000000000004d2ull, 0x0000000000000000ull, 5ull, 0x1cbe13},
      {0x0123456789abcdefull, 0x0000000000000007ull, 0ull, 0x34b23a},
      {0x0123456789abcdefull, 0x0000000000000007ull, 1ull, 0x8ec43d},
      {0xdeadbeefcafef00dull, 0xfedcba9876543210ull, 123456789ull, 0xce4bb0},
      {0x000000000000002aull, 0x0000010000000000ull, 17179869186ull, 0xe2ea73},
      {0xffffffffffffffffull, 0xffffffffffffffffull, 9223372036854775811ull,
       0x8c9261},
  };
  for (size_t i = 0; i < sizeof(kGolden) / sizeof(kGolden[0]); ++i) {
    uint32_t got = ty_philox_u24(kGolden[i].seed, kGolden[i].offset,
                                 kGolden[i].index);
    if (got != kGolden[i].u24) {
      fail_msg("golden %zu: got %06x, expected %06x", i, got, kGolden[i].u24);
    }
  }
  /* Golden keep masks over the first 32 elements (bit i = element i kept). */
  uint32_t mask = 0;
  for (uint64_t i = 0; i < 32; ++i) {
    mask |= (uint32_t)ty_dropout_keep(2024, 1, i, ty_dropout_threshold(0.5)) << i;
  }
  assert_int_equal(mask, 0x0fd0c542u);
  mask = 0;
  for (uint64_t i = 0; i < 32; ++i) {
    mask |= (uint32_t)ty_dropout_keep(7, 3, i, ty_dropout_threshold(0.1)) << i;
  }
  assert_int_equal(mask, 0xffff7fbfu);
}

static void test_threshold(void **state) {
  (void)state;
  assert_int_equal(ty_dropout_threshold(0.0), 0);
  assert_int_equal(ty_dropout_threshold(0.5), 8388608);
  assert_int_equal(ty_dropout_threshold(0.1), 1677721); /* floor(1677721.6) */
  assert_int_equal(ty_dropout_threshold(0.9), 15099494); /* floor(15099494.4) */
  assert_int_equal(ty_dropout_threshold(nextafter(1.0, 0.0)), 16777215);
  assert_int_equal(ty_dropout_threshold(0x1p-24), 1);
  assert_int_equal(ty_dropout_threshold(nextafter(0x1p-24, 0.0)), 0);
  /* Out of contract: clamped, documented. */
  assert_int_equal(ty_dropout_threshold(-0.5), 0);
  assert_int_equal(ty_dropout_threshold(NAN), 0);
  assert_int_equal(ty_dropout_threshold(1.0), 16777216);
}

static void test_keep_rate(void **state) {
  (void)state;
  const double ps[] = {0.1, 0.5, 0.9};
  const int64_t n = 1000000;
  for (size_t k = 0; k < 3; ++k) {
    uint64_t seed = ty_test_rng_u64(), offset = ty_test_rng_u64() >> 20;
    uint32_t thr = ty_dropout_threshold(ps[k]);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += ty_dropout_keep(seed, offset, (uint64_t)i, thr);
    double rate = (double)kept / (double)n;
    double sigma = sqrt(ps[k] * (1.0 - ps[k]) / (double)n);
    print_message("p=%.1f: kept %.5f (expect %.5f, 6 sigma = %.5f)\n", ps[k],
                  rate, 1.0 - ps[k], 6 * sigma);
    assert_true(fabs(rate - (1.0 - ps[k])) < 6.0 * sigma);
  }
  /* p = 0 keeps everything. */
  for (uint64_t i = 0; i < 4096; ++i) assert_true(ty_dropout_keep(99, 0, i, 0));
}

int main(void) {
  ty_test_rng_init("test_philox");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_answers),
      cmocka_unit_test(test_stream_mapping),
      cmocka_unit_test(test_golden_u24),
      cmocka_unit_test(test_threshold),
      cmocka_unit_test(test_keep_rate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
