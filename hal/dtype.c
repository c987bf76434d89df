/* Element types: names, sizes and parsing. */
#include "hal/dtype.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hal/half.h"

typedef struct {
  const char *name;
  size_t size;
  bool is_float;
} ty_dtype_row_t;

static const ty_dtype_row_t ty_dtype_table[TY_DTYPE_COUNT_] = {
    [TY_DTYPE_INVALID] = {"invalid", 0, false},
    [TY_DTYPE_F32] = {"f32", 4, true},
    [TY_DTYPE_BF16] = {"bf16", 2, true},
    [TY_DTYPE_F16] = {"f16", 2, true},
    [TY_DTYPE_F64] = {"f64", 8, true},
    [TY_DTYPE_I32] = {"i32", 4, false},
    [TY_DTYPE_I64] = {"i64", 8, false},
    [TY_DTYPE_U8] = {"u8", 1, false},
};

bool ty_dtype_is_valid(ty_dtype_t dtype) {
  return dtype > TY_DTYPE_INVALID && dtype < TY_DTYPE_COUNT_;
}

size_t ty_dtype_size(ty_dtype_t dtype) {
  return ty_dtype_is_valid(dtype) ? ty_dtype_table[dtype].size : 0;
}

const char *ty_dtype_name(ty_dtype_t dtype) {
  return ty_dtype_is_valid(dtype) ? ty_dtype_table[dtype].name : "invalid";
}

bool ty_dtype_is_float(ty_dtype_t dtype) {
  return ty_dtype_is_valid(dtype) && ty_dtype_table[dtype].is_float;
}

ty_status_t ty_dtype_parse(const char *name, ty_dtype_t *out_dtype) {
  *out_dtype = TY_DTYPE_INVALID;
  if (name) {
    for (int d = TY_DTYPE_INVALID + 1; d < TY_DTYPE_COUNT_; ++d) {
      if (strcmp(name, ty_dtype_table[d].name) == 0) {
        *out_dtype = (ty_dtype_t)d;
        return TY_OK;
      }
    }
    if (strcmp(name, "bool") == 0) {
      *out_dtype = TY_DTYPE_U8;
      return TY_OK;
    }
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "unknown dtype '%s' (expected one of f32, bf16, f16, "
                        "f64, i32, i64, u8, bool)",
                        name ? name : "(null)");
}

char *ty_dtype_mask_format(uint32_t mask, char *buf, size_t capacity) {
  if (capacity == 0) return buf;
  buf[0] = '\0';
  size_t used = 0;
  for (int d = TY_DTYPE_INVALID + 1; d < TY_DTYPE_COUNT_; ++d) {
    if (!(mask & TY_DTYPE_BIT(d))) continue;
    size_t need = strlen(ty_dtype_table[d].name) + (used ? 1 : 0);
    if (need >= capacity - used) break; /* never cut a name in half */
    snprintf(buf + used, capacity - used, "%s%s", used ? "," : "",
             ty_dtype_table[d].name);
    used += need;
  }
  return buf;
}

bool ty_dtype_find_nonfinite(ty_dtype_t dtype, const void *data, uint64_t count,
                             uint64_t *out_index, double *out_value) {
  /* Bit tests (exponent all ones) rather than conversions: one pass over
   * a checkpoint's worth of memory should cost no more than reading it. */
  const unsigned char *p = data;
  for (uint64_t i = 0; i < count; ++i) {
    double v = 0;
    bool bad = false;
    switch (dtype) {
      case TY_DTYPE_F32: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        bad = !isfinite(f);
        v = f;
        break;
      }
      case TY_DTYPE_F64:
        memcpy(&v, p + 8 * i, 8);
        bad = !isfinite(v);
        break;
      case TY_DTYPE_BF16:
      case TY_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        uint16_t exponent = dtype == TY_DTYPE_BF16 ? 0x7F80 : 0x7C00;
        bad = (h & exponent) == exponent;
        if (bad) v = dtype == TY_DTYPE_BF16 ? ty_bf16_to_f64(h) : ty_f16_to_f64(h);
        break;
      }
      default: return false;
    }
    if (bad) {
      if (out_index) *out_index = i;
      if (out_value) *out_value = v;
      return true;
    }
  }
  return false;
}
