/* Tensor descriptors: construction, validation, sizes. */
#include "hal/tensor.h"

#include <stdio.h>
#include <string.h>

#include "hal/dtype.h"

static ty_status_t ty_tensor_strides_overflow(const char *label) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "tensor %s: row-major strides overflow 64 bits (a zero "
                        "dimension does not shrink the other dimensions' "
                        "strides)",
                        label);
}

ty_status_t ty_tensor_desc_init(ty_dtype_t dtype, uint32_t rank,
                                const int64_t *dims, const char *name,
                                ty_tensor_desc_t *out_desc) {
  memset(out_desc, 0, sizeof(*out_desc));
  const char *label = name && name[0] ? name : "(unnamed)";
  if (!ty_dtype_is_valid(dtype)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor %s: invalid dtype value %d", label, (int)dtype);
  }
  if (rank > TY_TENSOR_MAX_RANK) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor %s: rank %u exceeds the maximum of %d", label,
                          rank, TY_TENSOR_MAX_RANK);
  }
  if (name && strlen(name) >= TY_TENSOR_NAME_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor name '%.40s...' is longer than %d bytes", name,
                          TY_TENSOR_NAME_MAX - 1);
  }
  uint64_t count = 1;
  /* The strides below count a zero dim as 1, so an empty tensor's other
   * dims must still give strides that fit: track that product too. */
  uint64_t span = 1;
  for (uint32_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "tensor %s: dimension %u is negative (%lld)", label,
                            i, (long long)dims[i]);
    }
    if (dims[i] != 0 && count > (UINT64_MAX / ty_dtype_size(dtype)) /
                                    (uint64_t)dims[i]) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "tensor %s: byte size overflows 64 bits", label);
    }
    count *= (uint64_t)dims[i];
    uint64_t extent = dims[i] ? (uint64_t)dims[i] : 1;
    if (span > UINT64_MAX / extent) return ty_tensor_strides_overflow(label);
    span *= extent;
  }
  if (count > (uint64_t)INT64_MAX / ty_dtype_size(dtype)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor %s: byte size overflows 64 bits", label);
  }
  if (span > (uint64_t)INT64_MAX / ty_dtype_size(dtype)) {
    return ty_tensor_strides_overflow(label);
  }
  out_desc->dtype = dtype;
  out_desc->rank = rank;
  int64_t stride = 1;
  for (uint32_t i = rank; i-- > 0;) {
    out_desc->dims[i] = dims[i];
    out_desc->strides[i] = stride;
    stride *= dims[i] ? dims[i] : 1;
  }
  if (name) memcpy(out_desc->name, name, strlen(name) + 1);
  return TY_OK;
}

int64_t ty_tensor_desc_element_count(const ty_tensor_desc_t *desc) {
  int64_t count = 1;
  for (uint32_t i = 0; i < desc->rank; ++i) count *= desc->dims[i];
  return count;
}

bool ty_tensor_desc_is_contiguous(const ty_tensor_desc_t *desc) {
  int64_t stride = 1;
  for (uint32_t i = desc->rank; i-- > 0;) {
    if (desc->dims[i] != 1 && desc->strides[i] != stride) return false;
    stride *= desc->dims[i] ? desc->dims[i] : 1; /* as ty_tensor_desc_init */
  }
  return true;
}

ty_status_t ty_tensor_desc_required_bytes(const ty_tensor_desc_t *desc,
                                          uint64_t *out_bytes) {
  *out_bytes = 0;
  uint64_t elem = ty_dtype_size(desc->dtype);
  if (!elem || desc->rank > TY_TENSOR_MAX_RANK) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor %s: invalid descriptor", desc->name);
  }
  uint64_t last = 0; /* index of the furthest element, in elements */
  for (uint32_t i = 0; i < desc->rank; ++i) {
    if (desc->dims[i] == 0) { /* empty: addresses nothing */
      *out_bytes = desc->byte_offset;
      return TY_OK;
    }
    if (desc->dims[i] < 0 || desc->strides[i] < 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "tensor %s: negative dimension or stride at axis %u",
                            desc->name, i);
    }
    uint64_t extent = (uint64_t)(desc->dims[i] - 1);
    uint64_t stride = (uint64_t)desc->strides[i];
    if (stride && extent > (UINT64_MAX - last) / stride) goto overflow;
    last += extent * stride;
  }
  if (last > (UINT64_MAX - 1) / elem) goto overflow;
  uint64_t span = (last + 1) * elem;
  if (span > UINT64_MAX - desc->byte_offset) goto overflow;
  *out_bytes = desc->byte_offset + span;
  return TY_OK;
overflow:
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "tensor %s: addressed byte range overflows 64 bits",
                        desc->name);
}

char *ty_tensor_desc_format(const ty_tensor_desc_t *desc, char *buf,
                            size_t capacity) {
  if (capacity == 0) return buf;
  int used = snprintf(buf, capacity, "%s[", ty_dtype_name(desc->dtype));
  for (uint32_t i = 0; i < desc->rank && used >= 0 && (size_t)used < capacity;
       ++i) {
    used += snprintf(buf + used, capacity - (size_t)used, "%s%lld",
                     i ? "," : "", (long long)desc->dims[i]);
  }
  if (used >= 0 && (size_t)used < capacity) {
    snprintf(buf + used, capacity - (size_t)used, "]");
  }
  return buf;
}
