/* apps/trainyard/ckpt/tensor_diff.c, the comparison core of `trainyard
 * ckpt diff`: ULP distances in f32, f64, bf16 and f16 (signs around zero,
 * subnormals, infinities, NaN), integer distances, the NaN/Inf rules,
 * relative errors with zeros, the tolerance rule |a-b| <= tol + rtol*|b|,
 * the ranking and the hash. Expected values are worked out by hand from
 * the encodings. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "apps/trainyard/ckpt/tensor_diff.h"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}

static ty_tensor_diff_t diff(ty_dtype_t dtype, const void *a, const void *b, uint64_t n,
                             double tol, double rtol) {
  ty_tensor_diff_t d;
  ty_status_t s = ty_tensor_diff_compute(dtype, a, b, n, tol, rtol, &d);
  assert_null(s);
  return d;
}

static void test_ulp_f32(void **state) {
  (void)state;
  assert_int_equal(ty_tensor_diff_ulp_f32(f32_bits(1.0f), f32_bits(nextafterf(1.0f, 2.0f))), 1);
  assert_int_equal(ty_tensor_diff_ulp_f32(0x00000000u, 0x80000000u), 0); /* +0, -0 */
  assert_int_equal(ty_tensor_diff_ulp_f32(0x80000000u, 0x00000001u), 1); /* -0, min subnormal */
  assert_int_equal(ty_tensor_diff_ulp_f32(0x80000001u, 0x00000001u), 2); /* across zero */
  assert_int_equal(ty_tensor_diff_ulp_f32(f32_bits(-1.0f), f32_bits(1.0f)), 2ull * 0x3f800000u);
  assert_int_equal(ty_tensor_diff_ulp_f32(f32_bits(FLT_MAX), f32_bits(INFINITY)), 1);
  assert_int_equal(ty_tensor_diff_ulp_f32(f32_bits(-INFINITY), f32_bits(INFINITY)),
                   2ull * 0x7f800000u);
  assert_int_equal(ty_tensor_diff_ulp_f32(f32_bits(2.0f), f32_bits(1.0f)), 0x800000);
  assert_int_equal(ty_tensor_diff_ulp_f32(0x7fc00000u, 0xffc00001u), 0); /* NaN, NaN */
  assert_true(ty_tensor_diff_ulp_f32(0x7fc00000u, f32_bits(1.0f)) == TY_TENSOR_DIFF_ULP_INF);
  assert_true(ty_tensor_diff_ulp_f32(f32_bits(INFINITY), 0x7f800001u) == TY_TENSOR_DIFF_ULP_INF);
}

static void test_ulp_f64(void **state) {
  (void)state;
  assert_int_equal(ty_tensor_diff_ulp_f64(f64_bits(1.0), f64_bits(nextafter(1.0, 2.0))), 1);
  assert_int_equal(ty_tensor_diff_ulp_f64(f64_bits(0.0), f64_bits(-0.0)), 0);
  assert_int_equal(ty_tensor_diff_ulp_f64(f64_bits(-4.9e-324), f64_bits(4.9e-324)), 2);
  assert_true(ty_tensor_diff_ulp_f64(f64_bits(-INFINITY), f64_bits(INFINITY)) ==
              UINT64_C(0xffe0000000000000));
  assert_int_equal(ty_tensor_diff_ulp_f64(f64_bits(DBL_MAX), f64_bits(INFINITY)), 1);
  assert_int_equal(ty_tensor_diff_ulp_f64(f64_bits(NAN), f64_bits(-NAN)), 0);
  assert_true(ty_tensor_diff_ulp_f64(f64_bits(NAN), f64_bits(0.0)) == TY_TENSOR_DIFF_ULP_INF);
}

static void test_ulp_bf16_and_f16(void **state) {
  (void)state;
  /* bf16: 1.0 is 0x3f80, inf 0x7f80, NaN above it */
  assert_int_equal(ty_tensor_diff_ulp_bf16(0x3f80, 0x3f81), 1);
  assert_int_equal(ty_tensor_diff_ulp_bf16(0x8000, 0x0000), 0);
  assert_int_equal(ty_tensor_diff_ulp_bf16(0x8001, 0x0001), 2);
  assert_int_equal(ty_tensor_diff_ulp_bf16(0xbf80, 0x3f80), 2 * 0x3f80);
  assert_int_equal(ty_tensor_diff_ulp_bf16(0x7f7f, 0x7f80), 1);
  assert_int_equal(ty_tensor_diff_ulp_bf16(0x7fc0, 0xffc1), 0);
  assert_true(ty_tensor_diff_ulp_bf16(0x7fc0, 0x7f80) == TY_TENSOR_DIFF_ULP_INF);
  /* f16: 1.0 is 0x3c00, inf 0x7c00, NaN above it */
  assert_int_equal(ty_tensor_diff_ulp_f16(0x3c00, 0x3c01), 1);
  assert_int_equal(ty_tensor_diff_ulp_f16(0x8000, 0x0000), 0);
  assert_int_equal(ty_tensor_diff_ulp_f16(0x8001, 0x0001), 2);
  assert_int_equal(ty_tensor_diff_ulp_f16(0x7bff, 0x7c00), 1);
  assert_int_equal(ty_tensor_diff_ulp_f16(0xfc00, 0x7c00), 2 * 0x7c00);
  assert_int_equal(ty_tensor_diff_ulp_f16(0x7e00, 0xfe01), 0);
  assert_true(ty_tensor_diff_ulp_f16(0x7e00, 0x7c00) == TY_TENSOR_DIFF_ULP_INF);
}

static void test_f32_figures(void **state) {
  (void)state;
  const float a[] = {1, 0, -0.0f, NAN, INFINITY, 2, 3};
  const float b[] = {1, -0.0f, 0, -NAN, INFINITY, nextafterf(2, 3), 4};
  ty_tensor_diff_t d = diff(TY_DTYPE_F32, a, b, 7, 0, 0);
  assert_int_equal(d.elements, 7);
  assert_int_equal(d.differing, 2); /* +-0 and NaN/NaN and inf/inf are equal */
  assert_int_equal(d.outside, 2);
  assert_int_equal(d.nan_a, 1);
  assert_int_equal(d.nan_b, 1);
  assert_int_equal(d.inf_a, 1);
  assert_int_equal(d.inf_b, 1);
  assert_true(d.max_abs == 1.0);
  assert_true(d.max_rel == 0.25); /* |3-4| / 4 */
  assert_int_equal(d.max_ulp, f32_bits(4.0f) - f32_bits(3.0f));
}

static void test_tolerance_rule(void **state) {
  (void)state;
  const float a[] = {2, 3}, b[] = {2, 4};
  assert_int_equal(diff(TY_DTYPE_F32, a, b, 2, 0, 0).outside, 1);
  assert_int_equal(diff(TY_DTYPE_F32, a, b, 2, 1.0, 0).outside, 0);      /* 1 <= 1 */
  assert_int_equal(diff(TY_DTYPE_F32, a, b, 2, 0.999, 0).outside, 1);
  assert_int_equal(diff(TY_DTYPE_F32, a, b, 2, 0, 0.25).outside, 0);     /* 1 <= 0.25 * |4| */
  assert_int_equal(diff(TY_DTYPE_F32, b, a, 2, 0, 0.25).outside, 1);     /* 1 > 0.25 * |3| */
  assert_int_equal(diff(TY_DTYPE_F32, a, b, 2, 0.5, 0.125).outside, 0);  /* 1 <= 0.5 + 0.5 */
  assert_int_equal(diff(TY_DTYPE_F32, a, b, 2, 0.25, 0.125).outside, 1);
  /* one ULP passes a small relative tolerance, not the bitwise default */
  const float one[] = {1.0f}, next[] = {nextafterf(1.0f, 2.0f)};
  assert_int_equal(diff(TY_DTYPE_F32, one, next, 1, 0, 0).outside, 1);
  assert_int_equal(diff(TY_DTYPE_F32, one, next, 1, 0, 1e-6).outside, 0);
  /* bad tolerances are refused */
  ty_tensor_diff_t d;
  ty_status_t s = ty_tensor_diff_compute(TY_DTYPE_F32, a, b, 2, -1, 0, &d);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(ty_status_message(s), "tolerances must be finite and >= 0"));
  ty_status_free(s);
  s = ty_tensor_diff_compute(TY_DTYPE_F32, a, b, 2, 0, INFINITY, &d);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  ty_status_free(s);
  s = ty_tensor_diff_compute(TY_DTYPE_INVALID, a, b, 2, 0, 0, &d);
  assert_int_equal(ty_status_code(s), TY_CODE_INVALID_ARGUMENT);
  assert_non_null(strstr(ty_status_message(s), "cannot compare tensors of dtype"));
  ty_status_free(s);
}

static void test_nan_and_inf_rules(void **state) {
  (void)state;
  /* a NaN against a number: infinite errors, outside any tolerance */
  const float a[] = {NAN, 1}, b[] = {1, NAN};
  ty_tensor_diff_t d = diff(TY_DTYPE_F32, a, b, 2, 1e30, 1e30);
  assert_int_equal(d.differing, 2);
  assert_int_equal(d.outside, 2);
  assert_true(isinf(d.max_abs) && isinf(d.max_rel));
  assert_true(d.max_ulp == TY_TENSOR_DIFF_ULP_INF);
  /* NaNs of other payloads at the same place are equal */
  const uint32_t na[] = {0x7fc00000u, 0xffc12345u}, nb[] = {0x7fc00001u, 0x7fc00000u};
  d = diff(TY_DTYPE_F32, na, nb, 2, 0, 0);
  assert_int_equal(d.differing, 0);
  assert_int_equal(d.nan_a, 2);
  assert_int_equal(d.nan_b, 2);
  /* infinities that differ, or against a finite value */
  const float ia[] = {INFINITY, INFINITY}, ib[] = {-INFINITY, FLT_MAX};
  d = diff(TY_DTYPE_F32, ia, ib, 2, 1e30, 0);
  assert_int_equal(d.outside, 2);
  assert_true(isinf(d.max_abs) && isinf(d.max_rel));
  assert_int_equal(d.inf_a, 2);
  assert_int_equal(d.inf_b, 1);
  assert_int_equal(d.max_ulp, 2ull * 0x7f800000u);
}

static void test_relative_error_with_zeros(void **state) {
  (void)state;
  const double a[] = {0, 0, 5, 2, -0.0}, b[] = {0, 1e-300, 0, 1, 0};
  ty_tensor_diff_t d = diff(TY_DTYPE_F64, a, b, 5, 0, 0);
  assert_int_equal(d.differing, 3);
  assert_true(d.max_rel == 1.0); /* 0 against anything: 1; never a division by 0 */
  assert_true(d.max_abs == 5.0);
  const double c[] = {2}, e[] = {1};
  assert_true(diff(TY_DTYPE_F64, c, e, 1, 0, 0).max_rel == 0.5);
  assert_true(diff(TY_DTYPE_F64, e, c, 1, 0, 0).max_rel == 0.5); /* symmetric */
  const double z[] = {0, -0.0}, y[] = {-0.0, 0};
  d = diff(TY_DTYPE_F64, z, y, 2, 0, 0);
  assert_int_equal(d.differing, 0);
  assert_true(d.max_rel == 0 && d.max_abs == 0);
  /* no overflow in the relative error of extreme values */
  const double m[] = {DBL_MAX}, n[] = {-DBL_MAX};
  assert_true(diff(TY_DTYPE_F64, m, n, 1, 0, 0).max_rel == 2.0);
}

static void test_half_figures(void **state) {
  (void)state;
  const uint16_t a[] = {0x3f80, 0x8000}, b[] = {0x3f81, 0x0000}; /* bf16 */
  ty_tensor_diff_t d = diff(TY_DTYPE_BF16, a, b, 2, 0, 0);
  assert_int_equal(d.differing, 1);
  assert_int_equal(d.max_ulp, 1);
  assert_true(d.max_abs == 0.0078125); /* 2^-7 */
  const uint16_t h[] = {0x3c00, 0x7c00}, g[] = {0x3c01, 0x7c00}; /* f16 */
  d = diff(TY_DTYPE_F16, h, g, 2, 0, 0);
  assert_int_equal(d.max_ulp, 1);
  assert_true(d.max_abs == 0.0009765625); /* 2^-10 */
  assert_int_equal(d.inf_a, 1);
  assert_int_equal(d.differing, 1);
}

static void test_integers(void **state) {
  (void)state;
  const int32_t a[] = {5, -3, INT32_MIN}, b[] = {2, -3, INT32_MAX};
  ty_tensor_diff_t d = diff(TY_DTYPE_I32, a, b, 3, 0, 0);
  assert_int_equal(d.differing, 2);
  assert_int_equal(d.max_ulp, UINT64_C(0xffffffff));
  assert_true(d.max_abs == 4294967295.0);
  const int64_t x[] = {INT64_MIN, 7}, y[] = {INT64_MAX, 7};
  d = diff(TY_DTYPE_I64, x, y, 2, 0, 0);
  assert_true(d.max_ulp == UINT64_MAX - 1); /* kept below the NaN marker */
  assert_int_equal(d.differing, 1);
  const int64_t p[] = {INT64_MAX}, q[] = {INT64_MAX - 1};
  d = diff(TY_DTYPE_I64, p, q, 1, 0, 0); /* exact where a double is not */
  assert_int_equal(d.max_ulp, 1);
  assert_int_equal(d.outside, 1);
  const uint8_t u[] = {0, 255, 9}, v[] = {255, 255, 9};
  d = diff(TY_DTYPE_U8, u, v, 3, 0, 0);
  assert_int_equal(d.max_ulp, 255);
  assert_int_equal(d.differing, 1);
  assert_int_equal(diff(TY_DTYPE_U8, u, v, 3, 255, 0).outside, 0);
}

static int by_rank(const void *x, const void *y) { return ty_tensor_diff_rank(x, y); }

static void test_ranking(void **state) {
  (void)state;
  ty_tensor_diff_t d[5] = {{.max_rel = 0.5, .max_abs = 1},
                           {.max_rel = 0.5, .max_abs = 2},
                           {.max_rel = 1, .max_abs = 0.1},
                           {.max_rel = INFINITY, .max_abs = INFINITY},
                           {.max_rel = 1e-7, .max_abs = 100}};
  qsort(d, 5, sizeof(d[0]), by_rank);
  assert_true(isinf(d[0].max_rel));
  assert_true(d[1].max_rel == 1);
  assert_true(d[2].max_rel == 0.5 && d[2].max_abs == 2); /* ties go by absolute error */
  assert_true(d[3].max_rel == 0.5 && d[3].max_abs == 1);
  assert_true(d[4].max_abs == 100); /* large but relatively small: last */
  assert_int_equal(ty_tensor_diff_rank(&d[3], &d[3]), 0);
}

static void test_hash(void **state) {
  (void)state;
  char h[TY_TENSOR_DIFF_HASH_CHARS + 1];
  assert_null(ty_tensor_diff_hash("abc", 3, h));
  assert_string_equal(h, "ba7816bf8f01cfea"); /* SHA-256("abc") */
  assert_null(ty_tensor_diff_hash("", 0, h));
  assert_string_equal(h, "e3b0c44298fc1c14"); /* SHA-256("") */
  const float x[] = {1, 2}, y[] = {2, 1};
  char hx[TY_TENSOR_DIFF_HASH_CHARS + 1], hy[TY_TENSOR_DIFF_HASH_CHARS + 1];
  assert_null(ty_tensor_diff_hash(x, sizeof(x), hx));
  assert_null(ty_tensor_diff_hash(y, sizeof(y), hy));
  assert_string_not_equal(hx, hy); /* order-sensitive */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ulp_f32),
      cmocka_unit_test(test_ulp_f64),
      cmocka_unit_test(test_ulp_bf16_and_f16),
      cmocka_unit_test(test_f32_figures),
      cmocka_unit_test(test_tolerance_rule),
      cmocka_unit_test(test_nan_and_inf_rules),
      cmocka_unit_test(test_relative_error_with_zeros),
      cmocka_unit_test(test_half_figures),
      cmocka_unit_test(test_integers),
      cmocka_unit_test(test_ranking),
      cmocka_unit_test(test_hash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
