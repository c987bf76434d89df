/* Reference casts (see ref_cast.h). Elements go through memcpy so raw
 * buffers of any alignment are fine and no aliasing rule is bent.
 *
 * Floats are widened to double, which is exact for f32, bf16 and f16, and then
 * narrowed once, so a bf16 -> f16 cast is a single correct rounding.
 */
#include "ops/reference/ref_cast.h"

#include <stdbool.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/half.h"

static bool ty_ref_cast_is_float(ty_dtype_t d) {
  return d == TY_DTYPE_F32 || d == TY_DTYPE_BF16 || d == TY_DTYPE_F16 ||
         d == TY_DTYPE_F64;
}

static double ty_ref_load_float(const unsigned char *p, ty_dtype_t d) {
  switch (d) {
    case TY_DTYPE_F32: {
      float f;
      memcpy(&f, p, sizeof(f));
      return (double)f;
    }
    case TY_DTYPE_BF16:
    case TY_DTYPE_F16: {
      uint16_t h;
      memcpy(&h, p, sizeof(h));
      return d == TY_DTYPE_BF16 ? ty_bf16_to_f64(h) : ty_f16_to_f64(h);
    }
    default: {
      double v;
      memcpy(&v, p, sizeof(v));
      return v;
    }
  }
}

static void ty_ref_store_float(unsigned char *p, ty_dtype_t d, double v) {
  switch (d) {
    case TY_DTYPE_F32: {
      float f = (float)v;
      memcpy(p, &f, sizeof(f));
      break;
    }
    case TY_DTYPE_BF16:
    case TY_DTYPE_F16: {
      uint16_t h = d == TY_DTYPE_BF16 ? ty_f64_to_bf16(v) : ty_f64_to_f16(v);
      memcpy(p, &h, sizeof(h));
      break;
    }
    default:
      memcpy(p, &v, sizeof(v));
      break;
  }
}

ty_status_t ty_ref_cast_forward(const void *src, ty_dtype_t src_dtype,
                                void *dst, ty_dtype_t dst_dtype,
                                int64_t count) {
  if (!ty_dtype_is_valid(src_dtype) || !ty_dtype_is_valid(dst_dtype)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "cast: invalid dtype (src %d, dst %d)",
                          (int)src_dtype, (int)dst_dtype);
  }
  if (count < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "cast: negative element count %lld",
                          (long long)count);
  }
  const unsigned char *s = src;
  unsigned char *d = dst;
  const size_t ss = ty_dtype_size(src_dtype), ds = ty_dtype_size(dst_dtype);
  if (src_dtype == dst_dtype) {
    if (src != dst) memcpy(dst, src, (size_t)count * ss);
    return TY_OK;
  }
  if (ty_ref_cast_is_float(src_dtype) && ty_ref_cast_is_float(dst_dtype)) {
    for (int64_t i = 0; i < count; ++i) {
      ty_ref_store_float(d + (size_t)i * ds, dst_dtype,
                         ty_ref_load_float(s + (size_t)i * ss, src_dtype));
    }
    return TY_OK;
  }
  if (src_dtype == TY_DTYPE_I32 && dst_dtype == TY_DTYPE_I64) {
    for (int64_t i = 0; i < count; ++i) {
      int32_t v;
      memcpy(&v, s + (size_t)i * 4, 4);
      int64_t w = v;
      memcpy(d + (size_t)i * 8, &w, 8);
    }
    return TY_OK;
  }
  if (src_dtype == TY_DTYPE_I64 && dst_dtype == TY_DTYPE_I32) {
    /* Refuse rather than wrap: a token id or position silently wrapped is a
     * much worse failure than an error. Check all before writing any. */
    for (int64_t i = 0; i < count; ++i) {
      int64_t v;
      memcpy(&v, s + (size_t)i * 8, 8);
      if (v < INT32_MIN || v > INT32_MAX) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "cast i64 -> i32: element %lld = %lld does not "
                              "fit in i32",
                              (long long)i, (long long)v);
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      int64_t v;
      memcpy(&v, s + (size_t)i * 8, 8);
      int32_t w = (int32_t)v;
      memcpy(d + (size_t)i * 4, &w, 4);
    }
    return TY_OK;
  }
  return ty_status_make(TY_CODE_UNIMPLEMENTED,
                        "cast from %s to %s is not in the op set",
                        ty_dtype_name(src_dtype), ty_dtype_name(dst_dtype));
}
