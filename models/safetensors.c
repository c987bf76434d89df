/* The safetensors reader: bounds the header length, parses the JSON header
 * strictly, checks that the tensors tile the data region exactly, and gives
 * every tensor an aligned pointer (into a read-only mapping, or a copy). */
#include "models/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/file.h"
#include "models/safetensors_internal.h"

/* Heap copies are aligned to a cache line, more than any element needs. */
#define TY_ST_COPY_ALIGN 64u

struct ty_safetensors_file_t {
  char *path;
  void *map; /* the whole file, read-only; NULL for COPY and memory images */
  size_t map_size;
  uint64_t data_size;
  ty_safetensors_tensor_t *tensors; /* file order */
  size_t tensor_count;
  const ty_safetensors_tensor_t **by_name; /* sorted by name */
  char **metadata; /* key0, value0, key1, value1, ... sorted by key */
  size_t metadata_count;
  void *copies; /* one aligned block holding every copied tensor */
};

/* Where zero-size tensors point: valid, aligned, never read. */
static const _Alignas(TY_ST_COPY_ALIGN) uint8_t ty_st_empty[TY_ST_COPY_ALIGN];

static ty_status_t ty_st_fail(const ty_safetensors_file_t *f, const char *tensor,
                              ty_code_t code, const char *fmt, ...)
    TY_PRINTF_ATTR(4, 5);

static ty_status_t ty_st_fail(const ty_safetensors_file_t *f, const char *tensor,
                              ty_code_t code, const char *fmt, ...) {
  char detail[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(detail, sizeof(detail), fmt, args);
  va_end(args);
  if (tensor) {
    return ty_status_make(code, "%s: tensor '" TY_ST_MSG_NAME "': %s", f->path,
                          tensor, detail);
  }
  return ty_status_make(code, "%s: %s", f->path, detail);
}

static char *ty_st_format_shape(const int64_t *dims, uint32_t rank, char *buf,
                                size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "[");
  for (uint32_t i = 0; i < rank && used < cap; ++i) {
    used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                             (long long)dims[i]);
  }
  if (used < cap) snprintf(buf + used, cap - used, "]");
  return buf;
}

/* ---- header: one tensor entry ------------------------------------------- */

static ty_status_t ty_st_parse_u64_pair(const ty_safetensors_file_t *f,
                                        const char *name, json_t *value,
                                        uint64_t *out_begin, uint64_t *out_end) {
  if (!json_is_array(value) || json_array_size(value) != 2 ||
      !json_is_integer(json_array_get(value, 0)) ||
      !json_is_integer(json_array_get(value, 1)) ||
      json_integer_value(json_array_get(value, 0)) < 0 ||
      json_integer_value(json_array_get(value, 1)) < 0) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                      "data_offsets must be [begin, end] with two integers >= 0");
  }
  *out_begin = (uint64_t)json_integer_value(json_array_get(value, 0));
  *out_end = (uint64_t)json_integer_value(json_array_get(value, 1));
  if (*out_begin > *out_end) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                      "data_offsets [%llu, %llu] end before they begin",
                      (unsigned long long)*out_begin, (unsigned long long)*out_end);
  }
  return TY_OK;
}

static ty_status_t ty_st_parse_tensor(const ty_safetensors_file_t *f,
                                      const char *name, json_t *entry,
                                      ty_safetensors_tensor_t *t) {
  if (!json_is_object(entry)) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                      "entry is not a JSON object with dtype, shape and data_offsets");
  }
  const char *field;
  json_t *value;
  json_object_foreach(entry, field, value) {
    if (strcmp(field, "dtype") != 0 && strcmp(field, "shape") != 0 &&
        strcmp(field, "data_offsets") != 0) {
      return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                        "unknown field '" TY_ST_MSG_NAME "' (a tensor entry has "
                        "only dtype, shape and data_offsets)", field);
    }
  }
  json_t *dtype = json_object_get(entry, "dtype");
  json_t *shape = json_object_get(entry, "shape");
  json_t *offsets = json_object_get(entry, "data_offsets");
  if (!dtype || !shape || !offsets) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS, "missing field '%s'",
                      !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
  }
  if (!json_is_string(dtype)) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS, "dtype is not a string");
  }
  const char *dtype_str = json_string_value(dtype);
  const ty_st_dtype_row_t *row = ty_st_dtype_find(dtype_str);
  if (!row) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                      "unknown dtype '" TY_ST_MSG_NAME "' (safetensors dtypes are "
                      "F32, F16, BF16, F64, I32, I64, U8, BOOL, I8, I16, U16, U32, "
                      "U64, F8_E4M3, F8_E5M2, ...)", dtype_str);
  }
  if (row->dtype == TY_DTYPE_INVALID) {
    return ty_st_fail(f, name, TY_CODE_UNIMPLEMENTED,
                      "dtype %s is valid safetensors but Trainyard has no such "
                      "type (supported: F32, F16, BF16, F64, I32, I64, U8, BOOL); "
                      "convert the checkpoint to one of them", row->name);
  }
  if (!json_is_array(shape)) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS, "shape is not an array");
  }
  size_t rank = json_array_size(shape);
  if (rank > TY_TENSOR_MAX_RANK) {
    return ty_st_fail(f, name, TY_CODE_UNIMPLEMENTED,
                      "rank %zu is above the %d dimensions Trainyard supports",
                      rank, TY_TENSOR_MAX_RANK);
  }
  bool any_zero = false;
  for (size_t i = 0; i < rank; ++i) {
    json_t *d = json_array_get(shape, i);
    if (!json_is_integer(d) || json_integer_value(d) < 0) {
      return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                        "shape entry %zu is not an integer >= 0", i);
    }
    t->dims[i] = (int64_t)json_integer_value(d);
    any_zero |= t->dims[i] == 0;
  }
  t->name = name;
  t->dtype = row->dtype;
  t->is_bool = row->is_bool;
  t->rank = (uint32_t)rank;
  char shape_buf[256];
  uint64_t count = 1;
  if (any_zero) {
    count = 0;
  } else {
    for (size_t i = 0; i < rank; ++i) {
      uint64_t d = (uint64_t)t->dims[i];
      if (count > UINT64_MAX / d || count * d > UINT64_MAX / row->size) {
        return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                          "shape %s has more bytes than 64 bits can count",
                          ty_st_format_shape(t->dims, t->rank, shape_buf, sizeof(shape_buf)));
      }
      count *= d;
    }
  }
  t->element_count = count;
  t->byte_size = count * row->size;
  uint64_t begin = 0, end = 0;
  TY_RETURN_IF_ERROR(ty_st_parse_u64_pair(f, name, offsets, &begin, &end));
  if (end - begin != t->byte_size) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                      "shape %s of %s needs %llu bytes, but data_offsets "
                      "[%llu, %llu] hold %llu",
                      ty_st_format_shape(t->dims, t->rank, shape_buf, sizeof(shape_buf)),
                      row->name, (unsigned long long)t->byte_size,
                      (unsigned long long)begin, (unsigned long long)end,
                      (unsigned long long)(end - begin));
  }
  if (end > f->data_size) {
    return ty_st_fail(f, name, TY_CODE_DATA_LOSS,
                      "data_offsets [%llu, %llu] run past the end of the data "
                      "region (%llu bytes): the file is truncated or the "
                      "offsets are wrong",
                      (unsigned long long)begin, (unsigned long long)end,
                      (unsigned long long)f->data_size);
  }
  t->data_offset = begin;
  t->file = f;
  return TY_OK;
}

/* ---- header: the whole object -------------------------------------------- */

static int ty_st_cmp_file_order(const void *a, const void *b) {
  const ty_safetensors_tensor_t *x = a, *y = b;
  if (x->data_offset != y->data_offset) return x->data_offset < y->data_offset ? -1 : 1;
  if (x->byte_size != y->byte_size) return x->byte_size < y->byte_size ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int ty_st_cmp_by_name(const void *a, const void *b) {
  const ty_safetensors_tensor_t *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

static int ty_st_cmp_metadata(const void *a, const void *b) {
  const char *const *x = a, *const *y = b;
  return strcmp(x[0], y[0]);
}

static ty_status_t ty_st_parse_metadata(ty_safetensors_file_t *f, json_t *meta) {
  if (!json_is_object(meta)) {
    return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                      "__metadata__ is not a JSON object of strings");
  }
  size_t n = json_object_size(meta);
  f->metadata = calloc(2 * n + 1, sizeof(char *));
  if (!f->metadata) return ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  const char *key;
  json_t *value;
  json_object_foreach(meta, key, value) {
    if (!json_is_string(value)) {
      return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                        "__metadata__ entry '" TY_ST_MSG_NAME "' is not a string",
                        key);
    }
    char **pair = &f->metadata[2 * f->metadata_count];
    pair[0] = strdup(key);
    pair[1] = strdup(json_string_value(value));
    ++f->metadata_count; /* counted now so that close frees a half pair */
    if (!pair[0] || !pair[1]) {
      return ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  qsort(f->metadata, f->metadata_count, 2 * sizeof(char *), ty_st_cmp_metadata);
  return TY_OK;
}

/* The tensors, sorted by offset, must cover [0, data_size) with no gap and
 * no overlap, as the reference implementation requires. */
static ty_status_t ty_st_check_tiling(const ty_safetensors_file_t *f) {
  uint64_t pos = 0;
  const ty_safetensors_tensor_t *prev = NULL;
  for (size_t i = 0; i < f->tensor_count; ++i) {
    const ty_safetensors_tensor_t *t = &f->tensors[i];
    if (t->data_offset > pos && !prev) {
      return ty_st_fail(f, t->name, TY_CODE_DATA_LOSS,
                        "a gap: the first tensor begins at byte %llu of the data "
                        "region, leaving bytes [0, %llu) to no tensor",
                        (unsigned long long)t->data_offset,
                        (unsigned long long)t->data_offset);
    }
    if (t->data_offset > pos) {
      return ty_st_fail(f, t->name, TY_CODE_DATA_LOSS,
                        "a gap of %llu bytes: it begins at %llu, but tensor '"
                        TY_ST_MSG_NAME "' before it ends at %llu",
                        (unsigned long long)(t->data_offset - pos),
                        (unsigned long long)t->data_offset, prev->name,
                        (unsigned long long)pos);
    }
    if (t->data_offset < pos) {
      return ty_st_fail(f, t->name, TY_CODE_DATA_LOSS,
                        "data_offsets [%llu, %llu] overlap tensor '" TY_ST_MSG_NAME
                        "' [%llu, %llu]",
                        (unsigned long long)t->data_offset,
                        (unsigned long long)(t->data_offset + t->byte_size), prev->name,
                        (unsigned long long)prev->data_offset,
                        (unsigned long long)(prev->data_offset + prev->byte_size));
    }
    pos = t->data_offset + t->byte_size;
    prev = t;
  }
  if (pos != f->data_size) {
    return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                      "the tensors end at byte %llu of the data region, but it "
                      "holds %llu bytes: %llu trailing bytes belong to no tensor",
                      (unsigned long long)pos, (unsigned long long)f->data_size,
                      (unsigned long long)(f->data_size - pos));
  }
  return TY_OK;
}

static ty_status_t ty_st_parse_header(ty_safetensors_file_t *f, const char *json,
                                      size_t size) {
  json_error_t err;
  json_t *root = json_loadb(json, size, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                      "header is not valid JSON: %s (line %d, column %d)", err.text,
                      err.line, err.column);
  }
  ty_status_t status = TY_OK;
  if (!json_is_object(root)) {
    status = ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                        "header is not a JSON object (it maps tensor names to "
                        "{dtype, shape, data_offsets})");
    goto done;
  }
  json_t *meta = json_object_get(root, "__metadata__");
  if (meta) {
    status = ty_st_parse_metadata(f, meta);
    if (status) goto done;
  }
  size_t n = json_object_size(root) - (meta ? 1 : 0);
  f->tensors = calloc(n ? n : 1, sizeof(*f->tensors));
  f->by_name = calloc(n ? n : 1, sizeof(*f->by_name));
  if (!f->tensors || !f->by_name) {
    status = ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED,
                        "out of memory for %zu tensors", n);
    goto done;
  }
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (strcmp(key, "__metadata__") == 0) continue;
    char *name = strdup(key);
    if (!name) {
      status = ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    ty_safetensors_tensor_t *t = &f->tensors[f->tensor_count++];
    t->name = name; /* owned from here on, even if parsing fails */
    status = ty_st_parse_tensor(f, name, value, t);
    if (status) goto done;
  }
  qsort(f->tensors, f->tensor_count, sizeof(*f->tensors), ty_st_cmp_file_order);
  for (size_t i = 0; i < f->tensor_count; ++i) f->by_name[i] = &f->tensors[i];
  qsort(f->by_name, f->tensor_count, sizeof(*f->by_name), ty_st_cmp_by_name);
  status = ty_st_check_tiling(f);
done:
  json_decref(root);
  return status;
}

/* ---- data ------------------------------------------------------------------ */

/* Points every aligned tensor into `data_base` (unless `flags` ask for
 * copies) and copies the others into one aligned block, from `data_base`
 * or, when it is NULL, from `fd` at `data_file_offset`. */
static ty_status_t ty_st_attach(ty_safetensors_file_t *f, uint32_t flags,
                                const uint8_t *data_base, int fd,
                                uint64_t data_file_offset) {
  uint64_t total = 0;
  for (size_t i = 0; i < f->tensor_count; ++i) {
    ty_safetensors_tensor_t *t = &f->tensors[i];
    if (t->byte_size == 0) {
      t->data = ty_st_empty;
      continue;
    }
    size_t esize = ty_dtype_size(t->dtype);
    if (data_base && !(flags & TY_SAFETENSORS_OPEN_COPY) &&
        (uintptr_t)(data_base + t->data_offset) % esize == 0) {
      t->data = data_base + t->data_offset;
      continue;
    }
    t->data_is_copy = true;
    /* Cannot overflow: byte sizes sum to the data size, which a file has. */
    total += (t->byte_size + TY_ST_COPY_ALIGN - 1) / TY_ST_COPY_ALIGN * TY_ST_COPY_ALIGN;
  }
  if (total == 0) return TY_OK;
  if (total > SIZE_MAX || !(f->copies = aligned_alloc(TY_ST_COPY_ALIGN, (size_t)total))) {
    return ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED,
                      "out of memory: %llu bytes for aligned copies of its tensors",
                      (unsigned long long)total);
  }
  uint8_t *dst = f->copies;
  for (size_t i = 0; i < f->tensor_count; ++i) {
    ty_safetensors_tensor_t *t = &f->tensors[i];
    if (!t->data_is_copy) continue;
    if (data_base) {
      memcpy(dst, data_base + t->data_offset, (size_t)t->byte_size);
    } else {
      TY_RETURN_IF_ERROR(ty_st_pread_all(fd, dst, t->byte_size,
                                         data_file_offset + t->data_offset, f->path));
    }
    t->data = dst;
    dst += (t->byte_size + TY_ST_COPY_ALIGN - 1) / TY_ST_COPY_ALIGN * TY_ST_COPY_ALIGN;
  }
  return TY_OK;
}

/* Checks the 8-byte header length against the file size; a file that fails
 * and looks like a pickle gets the conversion hint instead. */
static ty_status_t ty_st_check_length(const ty_safetensors_file_t *f,
                                      const uint8_t *head, size_t head_size,
                                      uint64_t file_size, uint64_t *out_len) {
  uint64_t len = 0;
  if (file_size >= 8) {
    for (int i = 7; i >= 0; --i) len = (len << 8) | head[i];
    if (len >= 2 && len <= TY_SAFETENSORS_MAX_HEADER_BYTES && len <= file_size - 8) {
      *out_len = len;
      return TY_OK;
    }
  }
  ty_st_format_t format = ty_st_sniff(head, head_size, file_size, f->path);
  if (format != TY_ST_FORMAT_SAFETENSORS && format != TY_ST_FORMAT_UNKNOWN) {
    return ty_st_pickle_status(f->path, format);
  }
  if (file_size < 8) {
    return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                      "truncated: %llu bytes, fewer than the 8-byte header "
                      "length a safetensors file starts with",
                      (unsigned long long)file_size);
  }
  if (len < 2) {
    return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                      "header length %llu is too small (the smallest header, "
                      "{}, has 2 bytes)", (unsigned long long)len);
  }
  if (len > TY_SAFETENSORS_MAX_HEADER_BYTES) {
    return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                      "header length %llu is above the %llu-byte limit (is this "
                      "a safetensors file?)", (unsigned long long)len,
                      (unsigned long long)TY_SAFETENSORS_MAX_HEADER_BYTES);
  }
  return ty_st_fail(f, NULL, TY_CODE_DATA_LOSS,
                    "header length %llu runs past the end of the file (%llu "
                    "bytes follow the length): the file is truncated",
                    (unsigned long long)len, (unsigned long long)(file_size - 8));
}

static ty_safetensors_file_t *ty_st_file_new(const char *path) {
  ty_safetensors_file_t *f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  f->path = strdup(path ? path : "(memory)");
  if (!f->path) {
    free(f);
    return NULL;
  }
  return f;
}

void ty_safetensors_close(ty_safetensors_file_t *file) {
  if (!file) return;
  for (size_t i = 0; i < file->tensor_count; ++i) free((char *)file->tensors[i].name);
  free(file->tensors);
  free(file->by_name);
  for (size_t i = 0; i < 2 * file->metadata_count; ++i) free(file->metadata[i]);
  free(file->metadata);
  free(file->copies);
  if (file->map) munmap(file->map, file->map_size);
  free(file->path);
  free(file);
}

ty_status_t ty_safetensors_open_memory(const void *data, size_t size,
                                       const char *name, uint32_t flags,
                                       ty_safetensors_file_t **out_file) {
  *out_file = NULL;
  if (!data && size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "safetensors image is NULL");
  }
  ty_safetensors_file_t *f = ty_st_file_new(name);
  if (!f) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  const uint8_t *bytes = data;
  uint64_t len = 0;
  ty_status_t status = ty_st_check_length(f, bytes, size < 16 ? size : 16, size, &len);
  if (!status) {
    f->data_size = size - 8 - len;
    status = ty_st_parse_header(f, (const char *)bytes + 8, (size_t)len);
  }
  if (!status) status = ty_st_attach(f, flags, bytes + 8 + len, -1, 0);
  if (status) {
    ty_safetensors_close(f);
    return status;
  }
  *out_file = f;
  return TY_OK;
}

static ty_status_t ty_st_open_fd(ty_safetensors_file_t *f, int fd, uint32_t flags) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ty_status_from_errno(errno, "cannot stat %s", f->path);
  if (!S_ISREG(st.st_mode)) {
    return ty_st_fail(f, NULL, TY_CODE_FAILED_PRECONDITION,
                      "not a regular file: safetensors are read from a file on disk");
  }
  uint64_t size = (uint64_t)st.st_size;
  uint8_t head[16] = {0};
  size_t head_size = size < sizeof(head) ? (size_t)size : sizeof(head);
  TY_RETURN_IF_ERROR(ty_st_pread_all(fd, head, head_size, 0, f->path));
  uint64_t len = 0;
  TY_RETURN_IF_ERROR(ty_st_check_length(f, head, head_size, size, &len));
  f->data_size = size - 8 - len;
  if (flags & TY_SAFETENSORS_OPEN_COPY) {
    char *header = malloc((size_t)len);
    if (!header) {
      return ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED,
                        "out of memory for a %llu-byte header", (unsigned long long)len);
    }
    ty_status_t status = ty_st_pread_all(fd, header, len, 8, f->path);
    if (!status) status = ty_st_parse_header(f, header, (size_t)len);
    free(header);
    TY_RETURN_IF_ERROR(status);
    return ty_st_attach(f, flags, NULL, fd, 8 + len);
  }
  if (size > SIZE_MAX) {
    return ty_st_fail(f, NULL, TY_CODE_RESOURCE_EXHAUSTED, "too large to map");
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return ty_status_from_errno(errno, "cannot map %s", f->path);
  f->map = map;
  f->map_size = (size_t)size;
  const uint8_t *bytes = map;
  TY_RETURN_IF_ERROR(ty_st_parse_header(f, (const char *)bytes + 8, (size_t)len));
  return ty_st_attach(f, flags, bytes + 8 + len, fd, 8 + len);
}

ty_status_t ty_safetensors_open_flags(const char *path, uint32_t flags,
                                      ty_safetensors_file_t **out_file) {
  *out_file = NULL;
  if (!path) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "safetensors path is NULL");
  ty_safetensors_file_t *f = ty_st_file_new(path);
  if (!f) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  int fd = -1;
  ty_status_t status = ty_file_open_read(path, "safetensors file", &fd, NULL);
  if (!status) {
    status = ty_st_open_fd(f, fd, flags);
    close(fd);
  }
  if (status) {
    ty_safetensors_close(f);
    return status;
  }
  *out_file = f;
  return TY_OK;
}

ty_status_t ty_safetensors_open(const char *path, ty_safetensors_file_t **out_file) {
  return ty_safetensors_open_flags(path, TY_SAFETENSORS_OPEN_DEFAULT, out_file);
}

/* ---- accessors ------------------------------------------------------------- */

const char *ty_safetensors_file_path(const ty_safetensors_file_t *file) {
  return file->path;
}

uint64_t ty_safetensors_file_data_size(const ty_safetensors_file_t *file) {
  return file->data_size;
}

size_t ty_safetensors_file_tensor_count(const ty_safetensors_file_t *file) {
  return file->tensor_count;
}

const ty_safetensors_tensor_t *ty_safetensors_file_tensor_at(
    const ty_safetensors_file_t *file, size_t index) {
  return index < file->tensor_count ? &file->tensors[index] : NULL;
}

const ty_safetensors_tensor_t *ty_safetensors_file_find(
    const ty_safetensors_file_t *file, const char *name) {
  size_t lo = 0, hi = file->tensor_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(file->by_name[mid]->name, name);
    if (c == 0) return file->by_name[mid];
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return NULL;
}

ty_status_t ty_safetensors_file_lookup(const ty_safetensors_file_t *file,
                                       const char *name,
                                       const ty_safetensors_tensor_t **out_tensor) {
  *out_tensor = ty_safetensors_file_find(file, name);
  if (*out_tensor) return TY_OK;
  return ty_st_fail(file, NULL, TY_CODE_NOT_FOUND,
                    "no tensor named '" TY_ST_MSG_NAME "' (the file has %zu tensors)",
                    name, file->tensor_count);
}

size_t ty_safetensors_file_metadata_count(const ty_safetensors_file_t *file) {
  return file->metadata_count;
}

void ty_safetensors_file_metadata_at(const ty_safetensors_file_t *file,
                                     size_t index, const char **out_key,
                                     const char **out_value) {
  bool ok = index < file->metadata_count;
  *out_key = ok ? file->metadata[2 * index] : NULL;
  *out_value = ok ? file->metadata[2 * index + 1] : NULL;
}

const char *ty_safetensors_file_metadata_get(const ty_safetensors_file_t *file,
                                             const char *key) {
  for (size_t i = 0; i < file->metadata_count; ++i) {
    if (strcmp(file->metadata[2 * i], key) == 0) return file->metadata[2 * i + 1];
  }
  return NULL;
}

ty_status_t ty_safetensors_tensor_desc(const ty_safetensors_tensor_t *tensor,
                                       ty_tensor_desc_t *out_desc) {
  return ty_tensor_desc_init(tensor->dtype, tensor->rank, tensor->dims,
                             tensor->name, out_desc);
}
