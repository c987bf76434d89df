/* safetensors support code: the dtype table, errno statuses, whole-range
 * preads, pickle sniffing (ty_checkpoint_check_format) and the dtype
 * conversions used to load checkpoints into other dtypes. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/half.h"
#include "models/safetensors.h"
#include "hal/file.h"
#include "models/safetensors_internal.h"

/* `order` follows the reference implementation's Dtype enum (BOOL < U8 <
 * I8 < F8_* < I16 < U16 < F16 < BF16 < I32 < U32 < F32 < F64 < I64 < U64),
 * checked against files written by the Python package. */
static const ty_st_dtype_row_t ty_st_dtypes[] = {
    {"BOOL", TY_DTYPE_U8, true, 1, 0},
    {"U8", TY_DTYPE_U8, false, 1, 1},
    {"I8", TY_DTYPE_INVALID, false, 1, 2},
    {"F8_E5M2", TY_DTYPE_INVALID, false, 1, 3},
    {"F8_E4M3", TY_DTYPE_INVALID, false, 1, 3},
    {"F8_E8M0", TY_DTYPE_INVALID, false, 1, 3},
    {"F4", TY_DTYPE_INVALID, false, 0, -1},
    {"F6_E2M3", TY_DTYPE_INVALID, false, 0, -1},
    {"F6_E3M2", TY_DTYPE_INVALID, false, 0, -1},
    {"I16", TY_DTYPE_INVALID, false, 2, 4},
    {"U16", TY_DTYPE_INVALID, false, 2, 5},
    {"F16", TY_DTYPE_F16, false, 2, 6},
    {"BF16", TY_DTYPE_BF16, false, 2, 7},
    {"I32", TY_DTYPE_I32, false, 4, 8},
    {"U32", TY_DTYPE_INVALID, false, 4, 9},
    {"F32", TY_DTYPE_F32, false, 4, 10},
    {"F64", TY_DTYPE_F64, false, 8, 11},
    {"I64", TY_DTYPE_I64, false, 8, 12},
    {"U64", TY_DTYPE_INVALID, false, 8, 13},
    {"C64", TY_DTYPE_INVALID, false, 8, -1},
};
#define TY_ST_DTYPE_COUNT (sizeof(ty_st_dtypes) / sizeof(ty_st_dtypes[0]))

const ty_st_dtype_row_t *ty_st_dtype_find(const char *name) {
  for (size_t i = 0; i < TY_ST_DTYPE_COUNT; ++i) {
    if (strcmp(ty_st_dtypes[i].name, name) == 0) return &ty_st_dtypes[i];
  }
  return NULL;
}

const ty_st_dtype_row_t *ty_st_dtype_row(ty_dtype_t dtype, bool is_bool) {
  if (!ty_dtype_is_valid(dtype)) return NULL;
  if (is_bool && dtype != TY_DTYPE_U8) return NULL;
  for (size_t i = 0; i < TY_ST_DTYPE_COUNT; ++i) {
    if (ty_st_dtypes[i].dtype == dtype && ty_st_dtypes[i].is_bool == is_bool) {
      return &ty_st_dtypes[i];
    }
  }
  return NULL;
}

const char *ty_safetensors_dtype_string(ty_dtype_t dtype, bool is_bool) {
  const ty_st_dtype_row_t *row = ty_st_dtype_row(dtype, is_bool);
  return row ? row->name : "INVALID";
}


ty_status_t ty_st_pread_all(int fd, void *dst, uint64_t size, uint64_t offset,
                            const char *path) {
  uint8_t *p = dst;
  while (size > 0) {
    size_t chunk = size > (1u << 30) ? (1u << 30) : (size_t)size;
    ssize_t n = pread(fd, p, chunk, (off_t)offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ty_status_from_errno(errno, TY_ST_MSG_NAME ": read failed", path);
    }
    if (n == 0) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            TY_ST_MSG_NAME ": the file ended at byte %llu while "
                            "reading (it shrank after it was opened?)",
                            path, (unsigned long long)offset);
    }
    p += n;
    size -= (uint64_t)n;
    offset += (uint64_t)n;
  }
  return TY_OK;
}

char *ty_st_path_join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  bool slash = a > 0 && dir[a - 1] != '/';
  char *out = malloc(a + b + 2);
  if (!out) return NULL;
  memcpy(out, dir, a);
  if (slash) out[a++] = '/';
  memcpy(out + a, name, b + 1);
  return out;
}

static bool ty_st_ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

ty_st_format_t ty_st_sniff(const uint8_t *head, size_t n, uint64_t file_size,
                           const char *path) {
  /* safetensors first: a header length of e.g. 640 starts with 0x80 0x02,
   * like a pickle. */
  if (n >= 9 && file_size >= 10) {
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | head[i];
    if (len >= 2 && len <= TY_SAFETENSORS_MAX_HEADER_BYTES &&
        len <= file_size - 8 && head[8] == '{') {
      return TY_ST_FORMAT_SAFETENSORS;
    }
  }
  if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) {
    return TY_ST_FORMAT_PICKLE;
  }
  if (n >= 4 && head[0] == 'P' && head[1] == 'K' &&
      ((head[2] == 3 && head[3] == 4) || (head[2] == 5 && head[3] == 6))) {
    return TY_ST_FORMAT_ZIP;
  }
  static const char *const pickle_suffixes[] = {".bin", ".pt", ".pth", ".ckpt",
                                                ".pkl", ".pickle"};
  for (size_t i = 0; i < sizeof(pickle_suffixes) / sizeof(pickle_suffixes[0]); ++i) {
    if (path && ty_st_ends_with(path, pickle_suffixes[i])) {
      return TY_ST_FORMAT_PICKLE_NAME;
    }
  }
  return TY_ST_FORMAT_UNKNOWN;
}

ty_status_t ty_st_pickle_status(const char *path, ty_st_format_t format) {
  const char *what = format == TY_ST_FORMAT_ZIP      ? "a zip of pickles, as torch.save writes"
                     : format == TY_ST_FORMAT_PICKLE ? "a pickle, as legacy torch.save writes"
                                                     : "named like a pickle checkpoint";
  return ty_status_make(
      TY_CODE_FAILED_PRECONDITION,
      TY_ST_MSG_NAME " is a PyTorch pickle checkpoint (%s), not safetensors. "
      "Trainyard never unpickles (loading a pickle can run arbitrary code). "
      "Convert it once with Python: for a Hugging Face model folder, "
      "python3 -c \"import sys; from transformers import AutoModelForCausalLM as M; "
      "d = sys.argv[1]; M.from_pretrained(d).save_pretrained(d, safe_serialization=True)\" "
      "<model_dir>; for a bare state dict, python3 -c \"import sys, torch; "
      "from safetensors.torch import save_file; "
      "save_file(torch.load(sys.argv[1], map_location='cpu', weights_only=True), sys.argv[2])\" "
      "<file.pt> <file.safetensors>",
      path, what);
}

ty_status_t ty_checkpoint_check_format(const char *path) {
  int fd = -1;
  TY_RETURN_IF_ERROR(ty_file_open_read(path, "checkpoint", &fd, NULL));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ty_status_from_errno(err, "cannot stat " TY_ST_MSG_NAME, path);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          TY_ST_MSG_NAME ": not a regular file: checkpoints are read from a "
                          "file on disk", path);
  }
  uint8_t head[16] = {0};
  uint64_t n = (uint64_t)st.st_size < sizeof(head) ? (uint64_t)st.st_size : sizeof(head);
  ty_status_t status = ty_st_pread_all(fd, head, n, 0, path);
  close(fd);
  TY_RETURN_IF_ERROR(status);
  ty_st_format_t format = ty_st_sniff(head, (size_t)n, (uint64_t)st.st_size, path);
  switch (format) {
    case TY_ST_FORMAT_SAFETENSORS: return TY_OK;
    case TY_ST_FORMAT_UNKNOWN:
      return ty_status_make(TY_CODE_DATA_LOSS,
                            TY_ST_MSG_NAME ": not a safetensors file (no 8-byte "
                            "header length followed by a JSON object) and not "
                            "a known checkpoint format",
                            path);
    default: return ty_st_pickle_status(path, format);
  }
}

/* ---- conversions --------------------------------------------------------- */

static float ty_st_load_f32(ty_dtype_t dtype, const uint8_t *p) {
  switch (dtype) {
    case TY_DTYPE_F32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case TY_DTYPE_F64: {
      double v;
      memcpy(&v, p, 8);
      return (float)v;
    }
    default: {
      uint16_t h;
      memcpy(&h, p, 2);
      return dtype == TY_DTYPE_BF16 ? ty_bf16_to_f32(h) : ty_f16_to_f32(h);
    }
  }
}

/* The hot loops (checkpoint loading) get their own tight bodies. */
static void ty_st_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = ty_bf16_to_f32(src[i]);
}

static void ty_st_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = ty_f16_to_f32(src[i]);
}

ty_status_t ty_safetensors_convert(ty_dtype_t src_dtype, const void *src,
                                   ty_dtype_t dst_dtype, void *dst,
                                   size_t count) {
  if (src_dtype == dst_dtype && ty_dtype_is_valid(src_dtype)) {
    if (count) memcpy(dst, src, count * ty_dtype_size(src_dtype));
    return TY_OK;
  }
  if (!ty_dtype_is_float(src_dtype) || !ty_dtype_is_float(dst_dtype)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "cannot convert %s to %s: only floating dtypes "
                          "(f32, bf16, f16, f64) convert into each other",
                          ty_dtype_name(src_dtype), ty_dtype_name(dst_dtype));
  }
  /* Aligned fast paths; the general loop below handles any alignment. */
  if (dst_dtype == TY_DTYPE_F32 && ((uintptr_t)src & 1u) == 0 &&
      ((uintptr_t)dst & 3u) == 0) {
    if (src_dtype == TY_DTYPE_BF16) {
      ty_st_bf16_to_f32_n(src, dst, count);
      return TY_OK;
    }
    if (src_dtype == TY_DTYPE_F16) {
      ty_st_f16_to_f32_n(src, dst, count);
      return TY_OK;
    }
  }
  const uint8_t *s = src;
  uint8_t *d = dst;
  size_t ss = ty_dtype_size(src_dtype), ds = ty_dtype_size(dst_dtype);
  for (size_t i = 0; i < count; ++i, s += ss, d += ds) {
    if (dst_dtype == TY_DTYPE_F64) {
      /* f32, bf16 and f16 all widen to f64 exactly. */
      double v = (double)ty_st_load_f32(src_dtype, s);
      memcpy(d, &v, 8);
      continue;
    }
    uint16_t h;
    if (src_dtype == TY_DTYPE_F64) {
      double v;
      memcpy(&v, s, 8);
      if (dst_dtype == TY_DTYPE_F32) {
        float f = (float)v;
        memcpy(d, &f, 4);
        continue;
      }
      h = dst_dtype == TY_DTYPE_BF16 ? ty_f64_to_bf16(v) : ty_f64_to_f16(v);
    } else {
      float f = ty_st_load_f32(src_dtype, s);
      if (dst_dtype == TY_DTYPE_F32) {
        memcpy(d, &f, 4);
        continue;
      }
      h = dst_dtype == TY_DTYPE_BF16 ? ty_f32_to_bf16(f) : ty_f32_to_f16(f);
    }
    memcpy(d, &h, 2);
  }
  return TY_OK;
}

ty_status_t ty_safetensors_tensor_read(const ty_safetensors_tensor_t *tensor,
                                       ty_dtype_t dst_dtype, void *dst,
                                       size_t dst_bytes) {
  size_t esize = ty_dtype_size(dst_dtype);
  if (esize == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor '" TY_ST_MSG_NAME "': invalid destination dtype %d",
                          tensor->name, (int)dst_dtype);
  }
  if (tensor->element_count > SIZE_MAX / esize ||
      dst_bytes != (size_t)tensor->element_count * esize) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor '" TY_ST_MSG_NAME "': %llu elements of %s need "
                          "%llu bytes, but the destination has %zu",
                          tensor->name, (unsigned long long)tensor->element_count,
                          ty_dtype_name(dst_dtype),
                          (unsigned long long)(tensor->element_count * esize), dst_bytes);
  }
  return ty_status_annotate(
      ty_safetensors_convert(tensor->dtype, tensor->data, dst_dtype, dst,
                             (size_t)tensor->element_count),
      "tensor '" TY_ST_MSG_NAME "'", tensor->name);
}
