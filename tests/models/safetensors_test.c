/* Unit tests of models/safetensors: round trips of random tensors of every
 * dtype (one file, every open mode; sharded folders), the layout the writer
 * produces, unaligned data, dtype conversion, the writer's argument checks,
 * atomic saves and the pickle guard. */
#include "common/test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hal/half.h"
#include "models/safetensors.h"
#include "st_test_util.h"

typedef struct st_tensor_t {
  char name[64];
  ty_dtype_t dtype;
  bool is_bool;
  uint32_t rank;
  int64_t dims[TY_TENSOR_MAX_RANK];
  uint8_t *data;
  uint64_t bytes;
} st_tensor_t;

typedef struct st_model_t {
  st_tensor_t *tensors;
  size_t count;
} st_model_t;

static const ty_dtype_t st_dtypes[] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16,
                                       TY_DTYPE_F64, TY_DTYPE_I32,  TY_DTYPE_I64,
                                       TY_DTYPE_U8,  TY_DTYPE_U8 /* BOOL */};
#define ST_DTYPE_COUNT (sizeof(st_dtypes) / sizeof(st_dtypes[0]))

/* `per_dtype` tensors of every dtype with random shapes (rank 0..4, dims
 * 0..9, so scalars and empty tensors occur) and random bytes, plus a rank-8
 * tensor, named in a shuffled order. */
static st_model_t st_model_random(ty_test_rng_t *rng, size_t per_dtype) {
  st_model_t m;
  m.count = ST_DTYPE_COUNT * per_dtype + 1;
  m.tensors = calloc(m.count, sizeof(*m.tensors));
  assert_non_null(m.tensors);
  for (size_t i = 0; i < m.count; ++i) {
    st_tensor_t *t = &m.tensors[i];
    size_t d = i % ST_DTYPE_COUNT;
    t->dtype = st_dtypes[d];
    t->is_bool = d == ST_DTYPE_COUNT - 1;
    if (i == m.count - 1) {
      t->rank = TY_TENSOR_MAX_RANK;
      for (uint32_t k = 0; k < t->rank; ++k) t->dims[k] = 2;
    } else {
      t->rank = (uint32_t)(ty_test_rng_next(rng) % 5);
      for (uint32_t k = 0; k < t->rank; ++k) t->dims[k] = (int64_t)(ty_test_rng_next(rng) % 10);
    }
    uint64_t count = 1;
    for (uint32_t k = 0; k < t->rank; ++k) count *= (uint64_t)t->dims[k];
    t->bytes = count * ty_dtype_size(t->dtype);
    t->data = malloc(t->bytes ? t->bytes : 1);
    assert_non_null(t->data);
    ty_test_fill_random(rng, t->data, t->bytes);
    if (t->is_bool) {
      for (uint64_t k = 0; k < t->bytes; ++k) t->data[k] &= 1;
    }
    snprintf(t->name, sizeof(t->name), "h.%llu.%s.w%zu",
             (unsigned long long)(ty_test_rng_next(rng) % 1000), ty_dtype_name(t->dtype), i);
  }
  return m;
}

static void st_model_free(st_model_t *m) {
  for (size_t i = 0; i < m->count; ++i) free(m->tensors[i].data);
  free(m->tensors);
}

static ty_safetensors_writer_t *st_writer_for(const st_model_t *m) {
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  for (size_t i = 0; i < m->count; ++i) {
    const st_tensor_t *t = &m->tensors[i];
    if (t->is_bool) {
      TY_EXPECT_OK(ty_safetensors_writer_add_bool(w, t->name, t->rank, t->dims, t->data,
                                                  t->bytes));
    } else {
      TY_EXPECT_OK(ty_safetensors_writer_add(w, t->name, t->dtype, t->rank, t->dims,
                                             t->data, t->bytes));
    }
  }
  return w;
}

static void st_expect_tensor(const ty_safetensors_tensor_t *got, const st_tensor_t *want) {
  assert_non_null(got);
  assert_string_equal(got->name, want->name);
  assert_int_equal(got->dtype, want->dtype);
  assert_int_equal(got->is_bool, want->is_bool);
  assert_int_equal(got->rank, want->rank);
  for (uint32_t k = 0; k < want->rank; ++k) assert_int_equal(got->dims[k], want->dims[k]);
  assert_int_equal(got->byte_size, want->bytes);
  assert_non_null(got->data);
  assert_int_equal((uintptr_t)got->data % ty_dtype_size(got->dtype), 0);
  if (want->bytes) assert_memory_equal(got->data, want->data, want->bytes);
}

/* Checks every tensor of `m` by lookup and the file's own invariants. */
static void st_expect_file(const ty_safetensors_file_t *f, const st_model_t *m,
                           bool expect_copies) {
  assert_int_equal(ty_safetensors_file_tensor_count(f), m->count);
  for (size_t i = 0; i < m->count; ++i) {
    const ty_safetensors_tensor_t *t = NULL;
    TY_EXPECT_OK(ty_safetensors_file_lookup(f, m->tensors[i].name, &t));
    st_expect_tensor(t, &m->tensors[i]);
    if (t->byte_size) assert_int_equal(t->data_is_copy, expect_copies);
    assert_ptr_equal(t->file, f);
  }
  uint64_t pos = 0;
  for (size_t i = 0; i < m->count; ++i) { /* file order tiles the data */
    const ty_safetensors_tensor_t *t = ty_safetensors_file_tensor_at(f, i);
    assert_int_equal(t->data_offset, pos);
    pos += t->byte_size;
  }
  assert_int_equal(pos, ty_safetensors_file_data_size(f));
  assert_null(ty_safetensors_file_tensor_at(f, m->count));
  assert_string_equal(ty_safetensors_file_metadata_get(f, "format"), "pt");
}

static void test_round_trip_every_dtype(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  char *dir = st_tmpdir_create();
  st_model_t m = st_model_random(&rng, 4);
  ty_safetensors_writer_t *w = st_writer_for(&m);
  TY_EXPECT_OK(ty_safetensors_writer_set_metadata(w, "step", "12"));
  const char *path = st_path(dir, "m.safetensors");
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, path));
  ty_safetensors_writer_destroy(w);

  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_OK(ty_safetensors_open(path, &f));
  st_expect_file(f, &m, false); /* the writer aligns everything: no copies */
  assert_int_equal(ty_safetensors_file_metadata_count(f), 2);
  const char *key, *value;
  ty_safetensors_file_metadata_at(f, 1, &key, &value);
  assert_string_equal(key, "step");
  assert_string_equal(value, "12");
  assert_null(ty_safetensors_file_metadata_get(f, "absent"));
  const ty_safetensors_tensor_t *t = (const ty_safetensors_tensor_t *)1;
  TY_EXPECT_STATUS(ty_safetensors_file_lookup(f, "no.such.tensor", &t), TY_CODE_NOT_FOUND,
                   "no tensor named 'no.such.tensor'");
  assert_null(t);
  ty_safetensors_close(f);

  TY_EXPECT_OK(ty_safetensors_open_flags(path, TY_SAFETENSORS_OPEN_COPY, &f));
  st_expect_file(f, &m, true);
  ty_safetensors_close(f);

  size_t size = 0;
  uint8_t *image = st_read_file(path, &size);
  TY_EXPECT_OK(ty_safetensors_open_memory(image, size, "image", 0, &f));
  st_expect_file(f, &m, false);
  assert_string_equal(ty_safetensors_file_path(f), "image");
  ty_safetensors_close(f);
  free(image);
  st_model_free(&m);
  st_tmpdir_remove(dir);
}

/* The layout of the reference implementation: length, header padded with
 * spaces to a multiple of 8, "__metadata__" first, then tensors in data
 * order (larger dtypes first, then by name; BF16 before F16, U8 before
 * BOOL). */
static void test_writer_layout(void **state) {
  (void)state;
  char *dir = st_tmpdir_create();
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  const int64_t two[] = {2};
  const uint8_t bytes[16] = {1, 0, 1, 0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  TY_EXPECT_OK(ty_safetensors_writer_add_bool(w, "flag", 1, two, bytes, 2));
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "u", TY_DTYPE_U8, 1, two, bytes, 2));
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "h", TY_DTYPE_F16, 1, two, bytes, 4));
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "b", TY_DTYPE_BF16, 1, two, bytes, 4));
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "z", TY_DTYPE_I64, 1, two, bytes, 16));
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "a", TY_DTYPE_I64, 0, NULL, bytes, 8));
  const char *path = st_path(dir, "layout.safetensors");
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, path));
  ty_safetensors_writer_destroy(w);
  size_t size = 0;
  uint8_t *img = st_read_file(path, &size);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | img[i];
  assert_int_equal(len % 8, 0);
  const char *want =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"z\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[8,24]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[24,28]},"
      "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[28,32]},"
      "\"u\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[32,34]},"
      "\"flag\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[34,36]}}";
  size_t want_len = strlen(want);
  assert_int_equal(len, (want_len + 7) / 8 * 8);
  assert_memory_equal(img + 8, want, want_len);
  for (size_t i = want_len; i < len; ++i) assert_int_equal(img[8 + i], ' ');
  assert_int_equal(size, 8 + len + 36);
  free(img);
  st_tmpdir_remove(dir);
}

static void test_unaligned_data_is_copied(void **state) {
  (void)state;
  /* "b" (f32) starts at data byte 1: misaligned in the map. */
  const char *header =
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1,9]}}";
  char padded[256];
  snprintf(padded, sizeof(padded), "%s", header);
  size_t n = strlen(padded);
  while (n % 8) padded[n++] = ' ';
  padded[n] = '\0';
  uint8_t data[9] = {42};
  float values[2] = {1.5f, -2.25f};
  memcpy(data + 1, values, sizeof(values));
  size_t size = 0;
  uint8_t *img = st_image(padded, UINT64_MAX, data, sizeof(data), &size);
  char *dir = st_tmpdir_create();
  const char *path = st_path(dir, "unaligned.safetensors");
  st_write_file(path, img, size);
  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_OK(ty_safetensors_open(path, &f));
  const ty_safetensors_tensor_t *a = ty_safetensors_file_find(f, "a");
  const ty_safetensors_tensor_t *b = ty_safetensors_file_find(f, "b");
  assert_non_null(a);
  assert_non_null(b);
  assert_false(a->data_is_copy);
  assert_int_equal(*(const uint8_t *)a->data, 42);
  assert_true(b->data_is_copy);
  assert_int_equal((uintptr_t)b->data % 64, 0);
  assert_memory_equal(b->data, values, sizeof(values));
  float out[2];
  TY_EXPECT_OK(ty_safetensors_tensor_read(b, TY_DTYPE_F32, out, sizeof(out)));
  assert_true(out[0] == 1.5f && out[1] == -2.25f);
  ty_tensor_desc_t desc;
  TY_EXPECT_OK(ty_safetensors_tensor_desc(b, &desc));
  assert_int_equal(desc.rank, 1);
  assert_int_equal(desc.dims[0], 2);
  assert_string_equal(desc.name, "b");
  ty_safetensors_close(f);
  free(img);
  st_tmpdir_remove(dir);
}

static void test_convert(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed() ^ 0x5a5a);
  enum { N = 257 };
  float src[N], back[N];
  uint16_t bf[N], h[N];
  double wide[N];
  for (int i = 0; i < N; ++i) {
    src[i] = (float)((double)(ty_test_rng_next(&rng) % 2000001) / 1000.0 - 1000.0);
  }
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_F32, src, TY_DTYPE_BF16, bf, N));
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_F32, src, TY_DTYPE_F16, h, N));
  for (int i = 0; i < N; ++i) {
    assert_int_equal(bf[i], ty_f32_to_bf16(src[i]));
    assert_int_equal(h[i], ty_f32_to_f16(src[i]));
  }
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_BF16, bf, TY_DTYPE_F32, back, N));
  for (int i = 0; i < N; ++i) assert_true(back[i] == ty_bf16_to_f32(bf[i]));
  /* Unaligned source and destination take the general path. */
  uint8_t raw[2 * N + 1], out[4 * N + 1];
  memcpy(raw + 1, h, sizeof(h));
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_F16, raw + 1, TY_DTYPE_F32, out + 1, N));
  memcpy(back, out + 1, sizeof(back));
  for (int i = 0; i < N; ++i) assert_true(back[i] == ty_f16_to_f32(h[i]));
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_F32, src, TY_DTYPE_F64, wide, N));
  for (int i = 0; i < N; ++i) assert_true(wide[i] == (double)src[i]);
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_F64, wide, TY_DTYPE_BF16, bf, N));
  for (int i = 0; i < N; ++i) assert_int_equal(bf[i], ty_f32_to_bf16(src[i]));
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_F64, wide, TY_DTYPE_F32, back, N));
  assert_memory_equal(back, src, sizeof(src));
  int32_t ints[N] = {0};
  TY_EXPECT_OK(ty_safetensors_convert(TY_DTYPE_I32, src, TY_DTYPE_I32, ints, N));
  TY_EXPECT_STATUS(ty_safetensors_convert(TY_DTYPE_I32, ints, TY_DTYPE_F32, back, N),
                   TY_CODE_INVALID_ARGUMENT, "cannot convert i32 to f32");

  /* Through a tensor: bf16 stored, f32 wanted; wrong sizes refused. */
  char *dir = st_tmpdir_create();
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  const int64_t dims[] = {N};
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "wte", TY_DTYPE_BF16, 1, dims, bf, sizeof(bf)));
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "ids", TY_DTYPE_I32, 1, dims, ints, sizeof(ints)));
  const char *path = st_path(dir, "c.safetensors");
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, path));
  ty_safetensors_writer_destroy(w);
  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_OK(ty_safetensors_open(path, &f));
  const ty_safetensors_tensor_t *t = ty_safetensors_file_find(f, "wte");
  TY_EXPECT_OK(ty_safetensors_tensor_read(t, TY_DTYPE_F32, back, sizeof(back)));
  for (int i = 0; i < N; ++i) assert_true(back[i] == ty_bf16_to_f32(bf[i]));
  TY_EXPECT_STATUS(ty_safetensors_tensor_read(t, TY_DTYPE_F32, back, sizeof(back) - 4),
                   TY_CODE_INVALID_ARGUMENT, "tensor 'wte'");
  TY_EXPECT_STATUS(ty_safetensors_tensor_read(ty_safetensors_file_find(f, "ids"), TY_DTYPE_F32,
                                              back, sizeof(back)),
                   TY_CODE_INVALID_ARGUMENT, "tensor 'ids': cannot convert i32 to f32");
  ty_safetensors_close(f);
  st_tmpdir_remove(dir);
}

static void test_writer_rejects_bad_arguments(void **state) {
  (void)state;
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  const int64_t dims[] = {2, 3};
  float data[6] = {1, 2, 3, 4, 5, 6};
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "x", TY_DTYPE_F32, 2, dims, data, sizeof(data)));
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "x", TY_DTYPE_F32, 2, dims, data, sizeof(data)),
                   TY_CODE_ALREADY_EXISTS, "'x' was already added");
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "y", TY_DTYPE_F32, 2, dims, data, 20),
                   TY_CODE_INVALID_ARGUMENT, "needs 24 bytes, but 20 were given");
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "__metadata__", TY_DTYPE_F32, 2, dims, data, 24),
                   TY_CODE_INVALID_ARGUMENT, "reserved");
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "", TY_DTYPE_F32, 2, dims, data, 24),
                   TY_CODE_INVALID_ARGUMENT, "empty");
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "bad\xff", TY_DTYPE_F32, 2, dims, data, 24),
                   TY_CODE_INVALID_ARGUMENT, "not valid UTF-8");
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "y", TY_DTYPE_INVALID, 2, dims, data, 24),
                   TY_CODE_INVALID_ARGUMENT, "invalid dtype");
  int64_t deep[TY_TENSOR_MAX_RANK + 1] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "y", TY_DTYPE_F32, TY_TENSOR_MAX_RANK + 1, deep,
                                             data, 4),
                   TY_CODE_INVALID_ARGUMENT, "rank 9");
  const int64_t neg[] = {-1};
  TY_EXPECT_STATUS(ty_safetensors_writer_add(w, "y", TY_DTYPE_F32, 1, neg, data, 4),
                   TY_CODE_INVALID_ARGUMENT, "negative");
  const uint8_t flags[2] = {1, 2};
  const int64_t two[] = {2};
  TY_EXPECT_STATUS(ty_safetensors_writer_add_bool(w, "m", 1, two, flags, 2),
                   TY_CODE_INVALID_ARGUMENT, "byte 1 is 2, not 0 or 1");
  TY_EXPECT_STATUS(ty_safetensors_writer_set_metadata(w, "k", "\xc3"),
                   TY_CODE_INVALID_ARGUMENT, "not UTF-8");
  TY_EXPECT_STATUS(ty_safetensors_writer_set_metadata(w, "\xc3", "v"),
                   TY_CODE_INVALID_ARGUMENT, "metadata key is NULL or not UTF-8");
  TY_EXPECT_STATUS(ty_safetensors_writer_set_metadata(w, NULL, "v"),
                   TY_CODE_INVALID_ARGUMENT, "metadata key");
  ty_safetensors_writer_destroy(w);
}

static size_t st_count_entries(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
  closedir(d);
  return n;
}

/* A failed save leaves the previous target and no temporary file behind;
 * a good one replaces the target. */
static void test_atomic_save(void **state) {
  (void)state;
  char *dir = st_tmpdir_create();
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  const int64_t dims[] = {3};
  float data[3] = {1, 2, 3};
  TY_EXPECT_OK(ty_safetensors_writer_add(w, "x", TY_DTYPE_F32, 1, dims, data, sizeof(data)));
  /* The error names the user's file and its missing folder, never the
   * temporary file (issue 12). */
  ty_status_t missing = ty_safetensors_writer_write_file(w, st_path(dir, "missing/m.safetensors"));
  assert_int_equal(ty_status_code(missing), TY_CODE_NOT_FOUND);
  TY_EXPECT_CONTAINS(ty_status_message(missing), "/missing does not exist");
  assert_null(strstr(ty_status_message(missing), ".tmp"));
  ty_status_free(missing);
  /* The target is a folder: the rename fails, the folder stays. */
  const char *target = st_path(dir, "taken");
  assert_int_equal(mkdir(target, 0755), 0);
  st_write_file(st_path(target, "keep"), "k", 1);
  ty_status_t status = ty_safetensors_writer_write_file(w, target);
  assert_int_equal(ty_status_code(status), TY_CODE_FAILED_PRECONDITION);
  TY_EXPECT_CONTAINS(ty_status_message(status), "a folder of that name is in the way");
  ty_status_free(status);
  assert_int_equal(st_count_entries(dir, ".tmp."), 0);
  struct stat st;
  assert_int_equal(stat(st_path(target, "keep"), &st), 0);
  /* Replacing an existing file. */
  const char *path = st_path(dir, "m.safetensors");
  st_write_file(path, "old", 3);
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, path));
  assert_int_equal(st_count_entries(dir, ".tmp."), 0);
  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_OK(ty_safetensors_open(path, &f));
  assert_memory_equal(ty_safetensors_file_find(f, "x")->data, data, sizeof(data));
  ty_safetensors_close(f);
  ty_safetensors_writer_destroy(w);
  st_tmpdir_remove(dir);
}

static void st_expect_set(const ty_safetensors_set_t *set, const st_model_t *m) {
  assert_int_equal(ty_safetensors_set_tensor_count(set), m->count);
  uint64_t total = 0;
  for (size_t i = 0; i < m->count; ++i) {
    const ty_safetensors_tensor_t *t = NULL;
    TY_EXPECT_OK(ty_safetensors_set_lookup(set, m->tensors[i].name, &t));
    st_expect_tensor(t, &m->tensors[i]);
    total += m->tensors[i].bytes;
  }
  size_t seen = 0;
  for (size_t s = 0; s < ty_safetensors_set_shard_count(set); ++s) {
    seen += ty_safetensors_file_tensor_count(ty_safetensors_set_shard(set, s));
  }
  assert_int_equal(seen, m->count);
  if (ty_safetensors_set_is_sharded(set)) {
    assert_int_equal(ty_safetensors_set_total_size(set), (int64_t)total);
  }
  const ty_safetensors_tensor_t *t = (const ty_safetensors_tensor_t *)1;
  TY_EXPECT_STATUS(ty_safetensors_set_lookup(set, "nope", &t), TY_CODE_NOT_FOUND, "'nope'");
  assert_null(t);
}

static void test_sharded_round_trip(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed() ^ 0x77);
  char *dir = st_tmpdir_create();
  st_model_t m = st_model_random(&rng, 6);
  ty_safetensors_writer_t *w = st_writer_for(&m);
  TY_EXPECT_OK(ty_safetensors_writer_write_dir(w, dir, 300));
  size_t shards = st_count_entries(dir, "model-0");
  assert_true(shards > 1);
  char first[64];
  snprintf(first, sizeof(first), "model-00001-of-%05zu.safetensors", shards);
  struct stat st;
  assert_int_equal(stat(st_path(dir, first), &st), 0);
  assert_int_equal(stat(st_path(dir, "model.safetensors.index.json"), &st), 0);
  ty_safetensors_set_t *set = NULL;
  TY_EXPECT_OK(ty_safetensors_open_dir(dir, &set));
  assert_true(ty_safetensors_set_is_sharded(set));
  assert_int_equal(ty_safetensors_set_shard_count(set), shards);
  st_expect_set(set, &m);
  ty_safetensors_set_close(set);
  TY_EXPECT_OK(ty_safetensors_open_dir_flags(dir, TY_SAFETENSORS_OPEN_COPY, &set));
  st_expect_set(set, &m);
  ty_safetensors_set_close(set);

  /* Saved again unsharded: the index and every shard go. */
  TY_EXPECT_OK(ty_safetensors_writer_write_dir(w, dir, 0));
  assert_int_equal(st_count_entries(dir, "model-0"), 0);
  assert_int_equal(st_count_entries(dir, "index"), 0);
  TY_EXPECT_OK(ty_safetensors_open_dir(dir, &set));
  assert_false(ty_safetensors_set_is_sharded(set));
  assert_int_equal(ty_safetensors_set_total_size(set), -1);
  st_expect_set(set, &m);
  ty_safetensors_set_close(set);

  /* And sharded again, with a different count: model.safetensors goes. */
  TY_EXPECT_OK(ty_safetensors_writer_write_dir(w, dir, 200));
  assert_int_equal(stat(st_path(dir, "model.safetensors"), &st), -1);
  TY_EXPECT_OK(ty_safetensors_open_dir(dir, &set));
  st_expect_set(set, &m);
  ty_safetensors_set_close(set);
  assert_int_equal(st_count_entries(dir, ".tmp."), 0);
  ty_safetensors_writer_destroy(w);
  st_model_free(&m);
  st_tmpdir_remove(dir);
}

/* huggingface_hub's rule: a tensor above the limit is a shard of its own,
 * numbered when met; the running shard closes when the next tensor would
 * overflow it. Sizes 100, 300, 50, 60 with a limit of 128 give
 * {big}, {t0}, {t2, t3}. */
static void test_shard_plan_matches_transformers(void **state) {
  (void)state;
  char *dir = st_tmpdir_create();
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  static uint8_t data[300];
  const char *names[] = {"t0", "big", "t2", "t3"};
  const int64_t sizes[] = {100, 300, 50, 60};
  const char *want[] = {"model-00002-of-00003.safetensors", "model-00001-of-00003.safetensors",
                        "model-00003-of-00003.safetensors", "model-00003-of-00003.safetensors"};
  for (int i = 0; i < 4; ++i) {
    TY_EXPECT_OK(ty_safetensors_writer_add(w, names[i], TY_DTYPE_U8, 1, &sizes[i], data,
                                           (uint64_t)sizes[i]));
  }
  /* A stale shard of another save and an unrelated file. */
  st_write_file(st_path(dir, "model-00001-of-00007.safetensors"), "x", 1);
  st_write_file(st_path(dir, "notes.txt"), "x", 1);
  TY_EXPECT_OK(ty_safetensors_writer_write_dir(w, dir, 128));
  struct stat st;
  assert_int_equal(stat(st_path(dir, "model-00001-of-00007.safetensors"), &st), -1);
  assert_int_equal(stat(st_path(dir, "notes.txt"), &st), 0);
  ty_safetensors_set_t *set = NULL;
  TY_EXPECT_OK(ty_safetensors_open_dir(dir, &set));
  for (int i = 0; i < 4; ++i) {
    const ty_safetensors_tensor_t *t = ty_safetensors_set_find(set, names[i]);
    assert_non_null(t);
    TY_EXPECT_CONTAINS(ty_safetensors_file_path(t->file), want[i]);
  }
  assert_int_equal(ty_safetensors_set_total_size(set), 510);
  ty_safetensors_set_close(set);
  size_t size = 0;
  char *index = (char *)st_read_file(st_path(dir, "model.safetensors.index.json"), &size);
  index[size] = '\0';
  const char *want_index =
      "{\n  \"metadata\": {\n    \"total_size\": 510\n  },\n  \"weight_map\": {\n"
      "    \"big\": \"model-00001-of-00003.safetensors\",\n"
      "    \"t0\": \"model-00002-of-00003.safetensors\",\n"
      "    \"t2\": \"model-00003-of-00003.safetensors\",\n"
      "    \"t3\": \"model-00003-of-00003.safetensors\"\n  }\n}\n";
  assert_string_equal(index, want_index);
  free(index);
  ty_safetensors_writer_destroy(w);
  st_tmpdir_remove(dir);
}

static void test_pickle_guard(void **state) {
  (void)state;
  char *dir = st_tmpdir_create();
  /* torch.save's legacy format starts with a pickle protocol-2 header. */
  const uint8_t pickle[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20,
                            0x6a, 0xa8, 0x50, 0x19, 0x2e, 0x80, 0x02, 0x4d, 0xe9, 0x03};
  const uint8_t zip[] = {'P', 'K', 3, 4, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const char *bin = st_path(dir, "pytorch_model.bin");
  st_write_file(bin, pickle, sizeof(pickle));
  TY_EXPECT_STATUS(ty_checkpoint_check_format(bin), TY_CODE_FAILED_PRECONDITION,
                   "safe_serialization=True");
  TY_EXPECT_STATUS(ty_checkpoint_check_format(bin), TY_CODE_FAILED_PRECONDITION,
                   "never unpickles");
  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_STATUS(ty_safetensors_open(bin, &f), TY_CODE_FAILED_PRECONDITION,
                   "pytorch_model.bin is a PyTorch pickle checkpoint");
  assert_null(f);
  const char *pt = st_path(dir, "weights.safetensors"); /* misnamed zip */
  st_write_file(pt, zip, sizeof(zip));
  TY_EXPECT_STATUS(ty_checkpoint_check_format(pt), TY_CODE_FAILED_PRECONDITION, "zip");
  TY_EXPECT_STATUS(ty_safetensors_open(pt, &f), TY_CODE_FAILED_PRECONDITION, "save_file");
  const char *ckpt = st_path(dir, "last.ckpt");
  st_write_file(ckpt, "not a pickle at all", 19);
  TY_EXPECT_STATUS(ty_checkpoint_check_format(ckpt), TY_CODE_FAILED_PRECONDITION,
                   "named like a pickle");
  const char *junk = st_path(dir, "junk.safetensors");
  st_write_file(junk, "hello, world", 12);
  TY_EXPECT_STATUS(ty_checkpoint_check_format(junk), TY_CODE_DATA_LOSS, "not a safetensors file");
  TY_EXPECT_STATUS(ty_checkpoint_check_format(st_path(dir, "absent")), TY_CODE_NOT_FOUND,
                   "absent");
  TY_EXPECT_STATUS(ty_checkpoint_check_format(dir), TY_CODE_FAILED_PRECONDITION,
                   "is a folder, not a file");
  /* A model folder with only a pickle checkpoint. */
  ty_safetensors_set_t *set = NULL;
  TY_EXPECT_STATUS(ty_safetensors_open_dir(dir, &set), TY_CODE_FAILED_PRECONDITION,
                   "from_pretrained");
  assert_null(set);
  /* A real safetensors file passes. */
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  const char *good = st_path(dir, "good.bin");
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, good));
  ty_safetensors_writer_destroy(w);
  TY_EXPECT_OK(ty_checkpoint_check_format(good));
  TY_EXPECT_OK(ty_safetensors_open(good, &f));
  assert_int_equal(ty_safetensors_file_tensor_count(f), 0);
  ty_safetensors_close(f);
  st_tmpdir_remove(dir);
}

static void test_open_dir_errors(void **state) {
  (void)state;
  char *dir = st_tmpdir_create();
  ty_safetensors_set_t *set = NULL;
  TY_EXPECT_STATUS(ty_safetensors_open_dir(dir, &set), TY_CODE_NOT_FOUND,
                   "neither model.safetensors nor model.safetensors.index.json");
  TY_EXPECT_STATUS(ty_safetensors_open_dir(st_path(dir, "nope"), &set), TY_CODE_NOT_FOUND,
                   "nope");
  const char *file = st_path(dir, "file");
  st_write_file(file, "x", 1);
  TY_EXPECT_STATUS(ty_safetensors_open_dir(file, &set), TY_CODE_FAILED_PRECONDITION,
                   "not a folder");
  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_STATUS(ty_safetensors_open(dir, &f), TY_CODE_FAILED_PRECONDITION,
                   "is a folder, not a file");
  TY_EXPECT_STATUS(ty_safetensors_open(st_path(dir, "absent.safetensors"), &f),
                   TY_CODE_NOT_FOUND, "absent.safetensors");
  st_tmpdir_remove(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip_every_dtype),
      cmocka_unit_test(test_writer_layout),
      cmocka_unit_test(test_unaligned_data_is_copied),
      cmocka_unit_test(test_convert),
      cmocka_unit_test(test_writer_rejects_bad_arguments),
      cmocka_unit_test(test_atomic_save),
      cmocka_unit_test(test_sharded_round_trip),
      cmocka_unit_test(test_shard_plan_matches_transformers),
      cmocka_unit_test(test_pickle_guard),
      cmocka_unit_test(test_open_dir_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
