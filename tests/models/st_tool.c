/* A small driver of models/safetensors for tests in other languages
 * (tests/models/test_safetensors_python.py):
 *
 *   ty_st_tool write FILE SEED             random tensors of every dtype
 *   ty_st_tool write-dir DIR SEED MAX      the same, sharded at MAX bytes
 *   ty_st_tool dump FILE|DIR               what our reader sees
 *
 * Each prints JSON on stdout: {"metadata": {...}, "tensors": {name: {"dtype",
 * "shape", "hex"}}} (for write: what was written, plus "order", the names in
 * the order they were added). Exit 1 with the status
 * message on stderr on error, 2 on usage errors. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/safetensors.h"

static uint64_t st_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static json_t *st_describe(const char *dtype, uint32_t rank, const int64_t *dims,
                           const uint8_t *data, uint64_t size) {
  json_t *shape = json_array();
  for (uint32_t k = 0; k < rank; ++k) json_array_append_new(shape, json_integer(dims[k]));
  char *hex = malloc(2 * size + 1);
  if (!hex) return NULL;
  for (uint64_t i = 0; i < size; ++i) snprintf(hex + 2 * i, 3, "%02x", data[i]);
  hex[2 * size] = '\0';
  json_t *entry = json_pack("{s:s, s:o, s:s}", "dtype", dtype, "shape", shape, "hex", hex);
  free(hex);
  return entry;
}

static int st_fail(ty_status_t status) {
  fprintf(stderr, "ty_st_tool: %s\n", ty_status_message(status));
  ty_status_free(status);
  return 1;
}

static int st_write(const char *target, uint64_t seed, bool dir, uint64_t max_bytes) {
  static const ty_dtype_t dtypes[] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16, TY_DTYPE_F64,
                                      TY_DTYPE_I32, TY_DTYPE_I64,  TY_DTYPE_U8,  TY_DTYPE_U8};
  enum { kPerDtype = 3, kCount = 8 * kPerDtype };
  uint8_t *data[kCount] = {0};
  ty_safetensors_writer_t *w = NULL;
  ty_status_t status = ty_safetensors_writer_create(&w);
  if (status) return st_fail(status);
  json_t *tensors = json_object();
  json_t *order = json_array();
  for (int i = 0; i < kCount && !status; ++i) {
    ty_dtype_t dtype = dtypes[i % 8];
    bool is_bool = i % 8 == 7;
    int64_t dims[4];
    uint32_t rank = (uint32_t)(st_next(&seed) % 4);
    uint64_t count = 1;
    for (uint32_t k = 0; k < rank; ++k) {
      dims[k] = (int64_t)(st_next(&seed) % 7); /* 0 included: empty tensors */
      count *= (uint64_t)dims[k];
    }
    uint64_t size = count * ty_dtype_size(dtype);
    data[i] = malloc(size ? size : 1);
    if (!data[i]) return 1;
    for (uint64_t b = 0; b < size; ++b) {
      data[i][b] = (uint8_t)st_next(&seed);
      if (is_bool) data[i][b] &= 1;
    }
    char name[64];
    snprintf(name, sizeof(name), "layers.%d.%s.weight", (int)(st_next(&seed) % 100),
             ty_safetensors_dtype_string(dtype, is_bool));
    if (json_object_get(tensors, name)) snprintf(name + strlen(name), 8, ".%d", i);
    status = is_bool ? ty_safetensors_writer_add_bool(w, name, rank, dims, data[i], size)
                     : ty_safetensors_writer_add(w, name, dtype, rank, dims, data[i], size);
    json_object_set_new(tensors, name,
                        st_describe(ty_safetensors_dtype_string(dtype, is_bool), rank, dims,
                                    data[i], size));
    json_array_append_new(order, json_string(name));
  }
  if (!status) {
    status = dir ? ty_safetensors_writer_write_dir(w, target, max_bytes)
                 : ty_safetensors_writer_write_file(w, target);
  }
  ty_safetensors_writer_destroy(w);
  for (int i = 0; i < kCount; ++i) free(data[i]);
  if (status) {
    json_decref(tensors);
    json_decref(order);
    return st_fail(status);
  }
  json_t *root = json_pack("{s:{s:s}, s:o, s:o}", "metadata", "format", "pt", "tensors",
                           tensors, "order", order);
  json_dumpf(root, stdout, JSON_SORT_KEYS);
  json_decref(root);
  return 0;
}

static int st_dump(const char *target) {
  struct stat st;
  bool is_dir = stat(target, &st) == 0 && S_ISDIR(st.st_mode);
  ty_safetensors_file_t *file = NULL;
  ty_safetensors_set_t *set = NULL;
  ty_status_t status = is_dir ? ty_safetensors_open_dir(target, &set)
                              : ty_safetensors_open(target, &file);
  if (status) return st_fail(status);
  size_t count = is_dir ? ty_safetensors_set_tensor_count(set)
                        : ty_safetensors_file_tensor_count(file);
  json_t *tensors = json_object();
  for (size_t i = 0; i < count; ++i) {
    const ty_safetensors_tensor_t *t = is_dir ? ty_safetensors_set_tensor_at(set, i)
                                              : ty_safetensors_file_tensor_at(file, i);
    json_object_set_new(tensors, t->name,
                        st_describe(ty_safetensors_dtype_string(t->dtype, t->is_bool), t->rank,
                                    t->dims, t->data, t->byte_size));
  }
  const ty_safetensors_file_t *meta_file = is_dir ? ty_safetensors_set_shard(set, 0) : file;
  json_t *meta = json_object();
  for (size_t i = 0; meta_file && i < ty_safetensors_file_metadata_count(meta_file); ++i) {
    const char *key, *value;
    ty_safetensors_file_metadata_at(meta_file, i, &key, &value);
    json_object_set_new(meta, key, json_string(value));
  }
  json_t *root = json_pack("{s:o, s:o}", "metadata", meta, "tensors", tensors);
  json_dumpf(root, stdout, JSON_SORT_KEYS);
  json_decref(root);
  ty_safetensors_set_close(set);
  ty_safetensors_close(file);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "write") == 0) {
    return st_write(argv[2], strtoull(argv[3], NULL, 0), false, 0);
  }
  if (argc == 5 && strcmp(argv[1], "write-dir") == 0) {
    return st_write(argv[2], strtoull(argv[3], NULL, 0), true, strtoull(argv[4], NULL, 0));
  }
  if (argc == 3 && strcmp(argv[1], "dump") == 0) return st_dump(argv[2]);
  fprintf(stderr,
          "usage: ty_st_tool write FILE SEED | write-dir DIR SEED MAX_SHARD_BYTES | "
          "dump FILE|DIR\n");
  return 2;
}
