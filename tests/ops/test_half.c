/* Tests for hal/half.h: every bf16 and f16 bit pattern round-trips through
 * f32, and millions of random f32 values narrow exactly as a slow,
 * obviously-correct oracle (nearest representable value by search over all
 * finite half values, ties to the even encoding) says they should.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "hal/half.h"
#include "test_util.h"

/* A half format described by its field widths; decoding it through ldexp
 * in double is independent of the bit tricks in hal/half.h. */
typedef struct half_format_t {
  const char *name;
  int exp_bits;
  int man_bits;
  uint16_t max_finite; /* largest finite positive encoding */
  uint16_t (*narrow)(float);
  float (*widen)(uint16_t);
  double table[0x8000]; /* value of every positive encoding up to max_finite */
} half_format_t;

static half_format_t g_bf16 = {"bf16", 8, 7, 0x7f7f, ty_f32_to_bf16,
                               ty_bf16_to_f32, {0}};
static half_format_t g_f16 = {"f16", 5, 10, 0x7bff, ty_f32_to_f16,
                              ty_f16_to_f32, {0}};

static int is_nan_bits(const half_format_t *f, uint16_t h) {
  uint16_t exp_mask = (uint16_t)(((1u << f->exp_bits) - 1u) << f->man_bits);
  uint16_t man_mask = (uint16_t)((1u << f->man_bits) - 1u);
  return (h & exp_mask) == exp_mask && (h & man_mask) != 0;
}

/* Value of a non-NaN encoding, computed from the definition. */
static double decode(const half_format_t *f, uint16_t h) {
  int bias = (1 << (f->exp_bits - 1)) - 1;
  int e = (h >> f->man_bits) & ((1 << f->exp_bits) - 1);
  int m = h & ((1 << f->man_bits) - 1);
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << f->exp_bits) - 1) return sign * INFINITY;
  if (e == 0) return sign * ldexp((double)m, 1 - bias - f->man_bits);
  return sign * ldexp((double)((1 << f->man_bits) + m), e - bias - f->man_bits);
}

static void build_table(half_format_t *f) {
  for (uint32_t h = 0; h <= f->max_finite; ++h) f->table[h] = decode(f, (uint16_t)h);
}

/* Round-to-nearest-even by search: the largest encoding not above |x|, the
 * next one up (max_finite + 1 is the infinity encoding, and its "value" for
 * rounding is 2^(emax + 1), the next power of two), nearer wins, a tie takes
 * the even encoding. Exactness: |x| and both neighbours are f32-representable
 * and in the same binade or zero, so the double differences are exact. */
static uint16_t oracle(const half_format_t *f, float x) {
  if (isnan(x)) return 0xffff; /* caller checks NaN separately */
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs((double)x);
  uint32_t lo = 0, hi = f->max_finite;
  if (a >= f->table[hi]) {
    lo = hi;
  } else {
    while (hi - lo > 1) { /* invariant: table[lo] <= a < table[hi] */
      uint32_t mid = (lo + hi) / 2;
      if (f->table[mid] <= a) lo = mid; else hi = mid;
    }
  }
  if (f->table[lo] == a) return (uint16_t)(sign | lo);
  double below = f->table[lo];
  double above = lo == f->max_finite
                     ? ldexp(1.0, (1 << (f->exp_bits - 1)))
                     : f->table[lo + 1];
  double dl = a - below, du = above - a;
  uint32_t pick = dl < du ? lo : du < dl ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return (uint16_t)(sign | pick);
}

static void check_exhaustive(const half_format_t *f) {
  int quiet_bit = f->man_bits - 1;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    uint16_t h = (uint16_t)bits;
    float w = f->widen(h);
    if (is_nan_bits(f, h)) {
      assert_true(isnan(w));
      assert_int_equal(!!signbit(w), !!(h & 0x8000));
      uint16_t back = f->narrow(w);
      assert_true(is_nan_bits(f, back));
      assert_int_equal(back & 0x8000, h & 0x8000);
      if (h & (1u << quiet_bit)) assert_int_equal(back, h); /* quiet: exact */
      continue;
    }
    double expect = decode(f, h);
    if ((double)w != expect || (expect == 0.0 && !!signbit(w) != !!(h & 0x8000))) {
      fail_msg("%s 0x%04x widened to %.9g, expected %.9g", f->name, h, (double)w,
               expect);
    }
    uint16_t back = f->narrow(w);
    if (back != h) fail_msg("%s 0x%04x round-tripped to 0x%04x", f->name, h, back);
  }
}

static void test_bf16_exhaustive(void **state) {
  (void)state;
  check_exhaustive(&g_bf16);
}

static void test_f16_exhaustive(void **state) {
  (void)state;
  check_exhaustive(&g_f16);
}

static void check_random(half_format_t *f, int exp_lo, int exp_hi, int count) {
  for (int i = 0; i < count; ++i) {
    uint32_t u = (uint32_t)ty_test_rng_u64();
    if (exp_hi >= exp_lo) {
      /* Force the f32 exponent field into [exp_lo, exp_hi]: the range where
       * the format rounds, goes subnormal or overflows. */
      uint32_t e = (uint32_t)(exp_lo + ty_test_rng_below(exp_hi - exp_lo + 1));
      u = (u & 0x807fffffu) | (e << 23);
    }
    float x = ty_half_f32_from_bits(u);
    uint16_t got = f->narrow(x);
    if (isnan(x)) {
      assert_true(is_nan_bits(f, got));
      assert_int_equal(got & 0x8000, (u >> 16) & 0x8000);
      continue;
    }
    uint16_t want = oracle(f, x);
    if (got != want) {
      fail_msg("%s: f32 0x%08x (%.9g) narrowed to 0x%04x, oracle says 0x%04x",
               f->name, u, (double)x, got, want);
    }
  }
}

static void test_random_against_oracle(void **state) {
  (void)state;
  check_random(&g_bf16, 1, 0, 1500000);     /* any bit pattern */
  check_random(&g_f16, 1, 0, 1500000);
  check_random(&g_f16, 100, 145, 1500000);  /* 2^-27 .. 2^18: f16's range */
  check_random(&g_bf16, 0, 20, 300000);     /* bf16 subnormals and zero */
  check_random(&g_bf16, 240, 255, 300000);  /* bf16 near overflow, inf, NaN */
}

static uint16_t bf16(float x) { return ty_f32_to_bf16(x); }
static uint16_t f16(float x) { return ty_f32_to_f16(x); }

static void test_bf16_edges(void **state) {
  (void)state;
  assert_int_equal(bf16(1.0f), 0x3f80);
  assert_int_equal(bf16(-2.0f), 0xc000);
  assert_int_equal(bf16(-0.0f), 0x8000);
  /* Ties: 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd). */
  assert_int_equal(bf16(1.0f + 0x1p-8f), 0x3f80);
  assert_int_equal(bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* odd below: up */
  assert_int_equal(bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81); /* past tie */
  /* Max finite 0x7f7f = (2 - 2^-7) 2^127; FLT_MAX lies beyond the midpoint to
   * 2^128 and so rounds to inf; the midpoint itself ties to inf (odd max). */
  assert_int_equal(bf16(ty_bf16_to_f32(0x7f7f)), 0x7f7f);
  assert_int_equal(bf16(FLT_MAX), 0x7f80);
  assert_int_equal(bf16(ty_half_f32_from_bits(0x7f7f8000u)), 0x7f80);
  assert_int_equal(bf16(ty_half_f32_from_bits(0x7f7f7fffu)), 0x7f7f);
  assert_int_equal(bf16(-INFINITY), 0xff80);
  /* Subnormal f32 inputs keep their top bits. */
  assert_int_equal(bf16(ty_half_f32_from_bits(0x00010000u)), 0x0001);
  assert_int_equal(bf16(ty_half_f32_from_bits(0x00008000u)), 0x0000); /* tie */
  assert_int_equal(bf16(ty_half_f32_from_bits(0x00018000u)), 0x0002); /* tie up */
  /* NaN whose payload lies only in the dropped bits must stay NaN. */
  uint16_t n = bf16(ty_half_f32_from_bits(0x7f800001u));
  assert_true((n & 0x7f80) == 0x7f80 && (n & 0x7f) != 0);
  n = bf16(ty_half_f32_from_bits(0xff800001u));
  assert_true((n & 0x8000) && (n & 0x7f) != 0);
}

static void test_f16_edges(void **state) {
  (void)state;
  assert_int_equal(f16(1.0f), 0x3c00);
  assert_int_equal(f16(-2.0f), 0xc000);
  assert_int_equal(f16(-0.0f), 0x8000);
  assert_int_equal(f16(65504.0f), 0x7bff);      /* max finite */
  assert_int_equal(f16(65519.99f), 0x7bff);     /* below the midpoint */
  assert_int_equal(f16(65520.0f), 0x7c00);      /* midpoint ties to inf */
  assert_int_equal(f16(1e6f), 0x7c00);
  assert_int_equal(f16(-INFINITY), 0xfc00);
  assert_int_equal(f16(0x1p-14f), 0x0400);      /* min normal */
  assert_int_equal(f16(0x1p-24f), 0x0001);      /* min subnormal */
  assert_int_equal(f16(0x1p-25f), 0x0000);      /* tie with zero: even */
  assert_int_equal(f16(0x1.000002p-25f), 0x0001);
  assert_int_equal(f16(-0x1p-26f), 0x8000);
  assert_int_equal(f16(1023 * 0x1p-24f), 0x03ff); /* max subnormal */
  assert_int_equal(f16(1023.5f * 0x1p-24f), 0x0400); /* tie: odd -> up */
  assert_int_equal(f16(2.5f * 0x1p-24f), 0x0002);    /* tie: even stays */
  assert_int_equal(f16(1.0f + 0x1p-11f), 0x3c00);    /* normal tie: even */
  assert_int_equal(f16(1.0f + 3 * 0x1p-11f), 0x3c02);
  assert_true(ty_f16_to_f32(0x0001) == 0x1p-24f);
  assert_true(ty_f16_to_f32(0x7bff) == 65504.0f);
  assert_true(isinf(ty_f16_to_f32(0x7c00)));
  uint16_t n = f16(ty_half_f32_from_bits(0x7f800001u));
  assert_true((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
  n = f16(ty_half_f32_from_bits(0xffc00000u));
  assert_int_equal(n, 0xfe00);
}

static void test_f64_goes_through_f32(void **state) {
  (void)state;
  /* d sits just above the bf16 tie 1 + 2^-8, but so little above that it
   * rounds to the tie in f32. Through f32 (PyTorch's path) the tie then goes
   * to even, 1.0; a direct f64 -> bf16 rounding would give 1 + 2^-7. */
  double d = 1.0 + 0x1p-8 + 0x1p-30;
  assert_int_equal(ty_f64_to_bf16(d), 0x3f80);
  double e = 1.0 + 0x1p-11 + 0x1p-30; /* the same for f16 */
  assert_int_equal(ty_f64_to_f16(e), 0x3c00);
  assert_int_equal(ty_f64_to_bf16(1e300), 0x7f80);
  assert_int_equal(ty_f64_to_f16(-1e300), 0xfc00);
  assert_true(ty_bf16_to_f64(0x3f81) == 1.0 + 0x1p-7);
  assert_true(ty_f16_to_f64(0x3c01) == 1.0 + 0x1p-10);
  assert_true(isnan(ty_bf16_to_f64(ty_f64_to_bf16(NAN))));
}

int main(void) {
  ty_test_rng_init("test_half");
  build_table(&g_bf16);
  build_table(&g_f16);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bf16_exhaustive),
      cmocka_unit_test(test_f16_exhaustive),
      cmocka_unit_test(test_random_against_oracle),
      cmocka_unit_test(test_bf16_edges),
      cmocka_unit_test(test_f16_edges),
      cmocka_unit_test(test_f64_goes_through_f32),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
