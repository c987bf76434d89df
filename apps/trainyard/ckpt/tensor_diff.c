/* The comparison core of `trainyard ckpt diff` (see tensor_diff.h). */
#include "ckpt/tensor_diff.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "hal/half.h"
#include "hal/sha256.h"

/* A position on the number line of the encoding: negative values below
 * 2^63, positive above, +0 and -0 both at 2^63, so that the distance of two
 * keys is the number of representable steps between the values. */
#define TY_DIFF_MID (UINT64_C(1) << 63)

static uint64_t ty_diff_key(bool negative, uint64_t magnitude) {
  return negative ? TY_DIFF_MID - magnitude : TY_DIFF_MID + magnitude;
}

static uint64_t ty_diff_distance(uint64_t ka, uint64_t kb) { return ka > kb ? ka - kb : kb - ka; }

/* Distance of two keys of values that may be NaN (`na`, `nb`). */
static uint64_t ty_diff_ulp(bool na, bool nb, uint64_t ka, uint64_t kb) {
  if (na || nb) return na && nb ? 0 : TY_TENSOR_DIFF_ULP_INF;
  return ty_diff_distance(ka, kb);
}

uint64_t ty_tensor_diff_ulp_f32(uint32_t a, uint32_t b) {
  uint32_t ma = a & 0x7fffffffu, mb = b & 0x7fffffffu;
  return ty_diff_ulp(ma > 0x7f800000u, mb > 0x7f800000u, ty_diff_key(a >> 31, ma),
                     ty_diff_key(b >> 31, mb));
}

uint64_t ty_tensor_diff_ulp_f64(uint64_t a, uint64_t b) {
  const uint64_t inf = UINT64_C(0x7ff0000000000000), low = ~(UINT64_C(1) << 63);
  uint64_t ma = a & low, mb = b & low;
  return ty_diff_ulp(ma > inf, mb > inf, ty_diff_key(a >> 63, ma), ty_diff_key(b >> 63, mb));
}

uint64_t ty_tensor_diff_ulp_bf16(uint16_t a, uint16_t b) {
  uint16_t ma = a & 0x7fffu, mb = b & 0x7fffu;
  return ty_diff_ulp(ma > 0x7f80u, mb > 0x7f80u, ty_diff_key(a >> 15, ma),
                     ty_diff_key(b >> 15, mb));
}

uint64_t ty_tensor_diff_ulp_f16(uint16_t a, uint16_t b) {
  uint16_t ma = a & 0x7fffu, mb = b & 0x7fffu;
  return ty_diff_ulp(ma > 0x7c00u, mb > 0x7c00u, ty_diff_key(a >> 15, ma),
                     ty_diff_key(b >> 15, mb));
}

/* One element: values va/vb (for abs/rel and the tolerance), NaN flags,
 * and the keys whose distance is the ULP distance (integers: the values'
 * own order, so the distance is the exact absolute difference). */
static void ty_diff_element(ty_tensor_diff_t *o, double va, double vb, bool na, bool nb,
                            uint64_t ka, uint64_t kb, bool is_int, double tol, double rtol) {
  o->nan_a += na;
  o->nan_b += nb;
  o->inf_a += !na && isinf(va);
  o->inf_b += !nb && isinf(vb);
  uint64_t ulp = ty_diff_ulp(na, nb, ka, kb);
  if (ulp == 0) return; /* equal values */
  /* INT64_MIN against INT64_MAX is 2^64 - 1 apart: kept one below the
   * NaN marker, the one distance an integer cannot show exactly. */
  if (is_int && ulp == TY_TENSOR_DIFF_ULP_INF) ulp--;
  o->differing++;
  if (ulp > o->max_ulp) o->max_ulp = ulp;
  double abs_err, rel_err;
  if (na || nb || isinf(va) || isinf(vb)) {
    abs_err = rel_err = INFINITY;
  } else if (is_int) {
    abs_err = (double)ulp;
    rel_err = abs_err / fmax(fabs(va), fabs(vb));
  } else {
    /* Not both zero (the keys differ), so m > 0. Where a - b overflows
     * (f64 near its range), dividing first keeps the relative error. */
    double m = fmax(fabs(va), fabs(vb));
    abs_err = fabs(va - vb);
    rel_err = isinf(abs_err) ? fabs(va / m - vb / m) : abs_err / m;
  }
  if (abs_err > o->max_abs) o->max_abs = abs_err;
  if (rel_err > o->max_rel) o->max_rel = rel_err;
  if (!(abs_err <= tol + rtol * fabs(vb))) o->outside++;
}

static uint64_t ty_diff_int_key(int64_t v) { return (uint64_t)v ^ TY_DIFF_MID; }

ty_status_t ty_tensor_diff_compute(ty_dtype_t dtype, const void *a, const void *b,
                                   uint64_t count, double tol, double rtol,
                                   ty_tensor_diff_t *out) {
  memset(out, 0, sizeof(*out));
  if (!(tol >= 0 && isfinite(tol)) || !(rtol >= 0 && isfinite(rtol))) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tolerances must be finite and >= 0 (tol %g, rtol %g)", tol, rtol);
  }
  out->elements = count;
  switch (dtype) {
    case TY_DTYPE_F32:
      for (uint64_t i = 0; i < count; ++i) {
        uint32_t x, y;
        memcpy(&x, (const char *)a + 4 * i, 4);
        memcpy(&y, (const char *)b + 4 * i, 4);
        uint32_t mx = x & 0x7fffffffu, my = y & 0x7fffffffu;
        ty_diff_element(out, ty_half_f32_from_bits(x), ty_half_f32_from_bits(y),
                        mx > 0x7f800000u, my > 0x7f800000u, ty_diff_key(x >> 31, mx),
                        ty_diff_key(y >> 31, my), false, tol, rtol);
      }
      break;
    case TY_DTYPE_F64:
      for (uint64_t i = 0; i < count; ++i) {
        uint64_t x, y;
        double dx, dy;
        memcpy(&x, (const char *)a + 8 * i, 8);
        memcpy(&y, (const char *)b + 8 * i, 8);
        memcpy(&dx, &x, 8);
        memcpy(&dy, &y, 8);
        const uint64_t low = ~TY_DIFF_MID;
        ty_diff_element(out, dx, dy, isnan(dx), isnan(dy), ty_diff_key(x >> 63, x & low),
                        ty_diff_key(y >> 63, y & low), false, tol, rtol);
      }
      break;
    case TY_DTYPE_BF16:
    case TY_DTYPE_F16: {
      const bool bf = dtype == TY_DTYPE_BF16;
      const uint16_t inf = bf ? 0x7f80u : 0x7c00u;
      for (uint64_t i = 0; i < count; ++i) {
        uint16_t x, y;
        memcpy(&x, (const char *)a + 2 * i, 2);
        memcpy(&y, (const char *)b + 2 * i, 2);
        uint16_t mx = x & 0x7fffu, my = y & 0x7fffu;
        ty_diff_element(out, bf ? ty_bf16_to_f32(x) : ty_f16_to_f32(x),
                        bf ? ty_bf16_to_f32(y) : ty_f16_to_f32(y), mx > inf, my > inf,
                        ty_diff_key(x >> 15, mx), ty_diff_key(y >> 15, my), false, tol, rtol);
      }
      break;
    }
    case TY_DTYPE_I32:
    case TY_DTYPE_I64:
    case TY_DTYPE_U8: {
      const size_t size = ty_dtype_size(dtype);
      for (uint64_t i = 0; i < count; ++i) {
        int64_t x, y;
        if (dtype == TY_DTYPE_I64) {
          memcpy(&x, (const char *)a + 8 * i, 8);
          memcpy(&y, (const char *)b + 8 * i, 8);
        } else if (dtype == TY_DTYPE_I32) {
          int32_t x32, y32;
          memcpy(&x32, (const char *)a + 4 * i, 4);
          memcpy(&y32, (const char *)b + 4 * i, 4);
          x = x32;
          y = y32;
        } else {
          x = ((const uint8_t *)a)[i * size];
          y = ((const uint8_t *)b)[i * size];
        }
        ty_diff_element(out, (double)x, (double)y, false, false, ty_diff_int_key(x),
                        ty_diff_int_key(y), true, tol, rtol);
      }
      break;
    }
    default:
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "cannot compare tensors of dtype %d",
                            (int)dtype);
  }
  return TY_OK;
}

ty_status_t ty_tensor_diff_hash(const void *data, size_t bytes,
                                char out[TY_TENSOR_DIFF_HASH_CHARS + 1]) {
  char hex[65];
  if (!ty_sha256_hex(data, bytes, hex)) {
    out[0] = '\0';
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory computing a SHA-256");
  }
  /* The first TY_TENSOR_DIFF_HASH_CHARS hex digits. */
  memcpy(out, hex, TY_TENSOR_DIFF_HASH_CHARS);
  out[TY_TENSOR_DIFF_HASH_CHARS] = '\0';
  return TY_OK;
}

int ty_tensor_diff_rank(const ty_tensor_diff_t *x, const ty_tensor_diff_t *y) {
  if (x->max_rel != y->max_rel) return x->max_rel > y->max_rel ? -1 : 1;
  if (x->max_abs != y->max_abs) return x->max_abs > y->max_abs ? -1 : 1;
  return 0;
}
