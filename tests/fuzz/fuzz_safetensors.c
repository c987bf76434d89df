/* Fuzz target of the safetensors reader: any byte string is either refused
 * with a status or opened into a file whose every tensor is consistent
 * (found by name, aligned, inside the image or a copy, readable and
 * convertible). Built with libFuzzer under clang (-fsanitize=fuzzer), or
 * with standalone_driver.c as a program that replays and mutates a corpus. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TY_FUZZ_CHECK(cond) \
  do {                      \
    if (!(cond)) abort();   \
  } while (0)

static void ty_fuzz_touch_file(const ty_safetensors_file_t *f, const uint8_t *data,
                               size_t size) {
  size_t count = ty_safetensors_file_tensor_count(f);
  uint64_t total = 0;
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < count; ++i) {
    const ty_safetensors_tensor_t *t = ty_safetensors_file_tensor_at(f, i);
    TY_FUZZ_CHECK(t && t->file == f);
    TY_FUZZ_CHECK(ty_safetensors_file_find(f, t->name) == t);
    size_t esize = ty_dtype_size(t->dtype);
    TY_FUZZ_CHECK(esize > 0 && t->byte_size == t->element_count * esize);
    TY_FUZZ_CHECK(t->data && (uintptr_t)t->data % esize == 0);
    const uint8_t *p = t->data;
    if (!t->data_is_copy && t->byte_size) {
      TY_FUZZ_CHECK(p >= data && p + t->byte_size <= data + size);
    }
    for (uint64_t b = 0; b < t->byte_size; ++b) sink ^= p[b];
    total += t->byte_size;
    if (ty_dtype_is_float(t->dtype) && t->element_count <= (1u << 16)) {
      float *out = malloc(t->element_count ? t->element_count * sizeof(float) : 1);
      TY_FUZZ_CHECK(out);
      ty_status_t s = ty_safetensors_tensor_read(t, TY_DTYPE_F32, out,
                                                 (size_t)t->element_count * sizeof(float));
      TY_FUZZ_CHECK(s == NULL);
      free(out);
    }
    ty_tensor_desc_t desc;
    ty_status_free(ty_safetensors_tensor_desc(t, &desc));
  }
  TY_FUZZ_CHECK(total == ty_safetensors_file_data_size(f));
  for (size_t i = 0; i < ty_safetensors_file_metadata_count(f); ++i) {
    const char *key, *value;
    ty_safetensors_file_metadata_at(f, i, &key, &value);
    TY_FUZZ_CHECK(key && value && ty_safetensors_file_metadata_get(f, key));
  }
  const ty_safetensors_tensor_t *missing = NULL;
  ty_status_t s = ty_safetensors_file_lookup(f, "\x01never a tensor name", &missing);
  TY_FUZZ_CHECK(s != NULL && missing == NULL);
  ty_status_free(s);
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint32_t modes[] = {TY_SAFETENSORS_OPEN_DEFAULT, TY_SAFETENSORS_OPEN_COPY};
  for (int m = 0; m < 2; ++m) {
    ty_safetensors_file_t *f = NULL;
    ty_status_t s = ty_safetensors_open_memory(data, size, "fuzz", modes[m], &f);
    if (s) {
      TY_FUZZ_CHECK(f == NULL && ty_status_code(s) != TY_CODE_OK);
      TY_FUZZ_CHECK(strstr(ty_status_message(s), "fuzz") != NULL ||
                    ty_status_code(s) == TY_CODE_RESOURCE_EXHAUSTED);
      ty_status_free(s);
      continue;
    }
    ty_fuzz_touch_file(f, data, size);
    ty_safetensors_close(f);
  }
  return 0;
}
