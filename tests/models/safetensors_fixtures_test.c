/* Files written by the Python safetensors package (the reference
 * implementation), committed under tests/fixtures/safetensors by
 * tests/models/make_safetensors_fixtures.py: we read every tensor as the
 * sidecar .json describes it (dtype, shape, bytes, values), and our writer,
 * given the same tensors, reproduces the reference's file byte for byte. */
#include "common/test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/safetensors.h"
#include "st_test_util.h"

#ifndef TY_TEST_ST_FIXTURE_DIR
#error "TY_TEST_ST_FIXTURE_DIR must name tests/fixtures/safetensors"
#endif

static json_t *st_load_json(const char *name) {
  json_error_t err;
  json_t *root = json_load_file(st_path(TY_TEST_ST_FIXTURE_DIR, name), 0, &err);
  if (!root) print_error("%s: %s (line %d)\n", name, err.text, err.line);
  assert_non_null(root);
  return root;
}

static uint8_t *st_unhex(const char *hex, size_t *out_size) {
  size_t n = strlen(hex) / 2;
  uint8_t *out = malloc(n ? n : 1);
  assert_non_null(out);
  for (size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
    out[i] = (uint8_t)v;
  }
  *out_size = n;
  return out;
}

/* `t` matches the description `want` of the sidecar file. */
static void st_expect_described(const ty_safetensors_tensor_t *t, const char *name,
                                json_t *want) {
  if (!t) print_error("tensor '%s' missing\n", name);
  assert_non_null(t);
  assert_string_equal(ty_safetensors_dtype_string(t->dtype, t->is_bool),
                      json_string_value(json_object_get(want, "dtype")));
  json_t *shape = json_object_get(want, "shape");
  assert_int_equal(t->rank, json_array_size(shape));
  for (uint32_t k = 0; k < t->rank; ++k) {
    assert_int_equal(t->dims[k], json_integer_value(json_array_get(shape, k)));
  }
  size_t size = 0;
  uint8_t *bytes = st_unhex(json_string_value(json_object_get(want, "hex")), &size);
  assert_int_equal(t->byte_size, size);
  if (size) assert_memory_equal(t->data, bytes, size);
  free(bytes);
  json_t *values = json_object_get(want, "values");
  if (!values) return;
  /* Our conversions against numpy's (f16 -> f32, bf16 -> f32, f64). */
  size_t n = json_array_size(values);
  assert_int_equal(n, t->element_count);
  float *f = malloc((n ? n : 1) * sizeof(float));
  double *d = malloc((n ? n : 1) * sizeof(double));
  assert_true(f && d);
  TY_EXPECT_OK(ty_safetensors_tensor_read(t, TY_DTYPE_F32, f, n * sizeof(float)));
  TY_EXPECT_OK(ty_safetensors_tensor_read(t, TY_DTYPE_F64, d, n * sizeof(double)));
  for (size_t i = 0; i < n; ++i) {
    double v = json_number_value(json_array_get(values, i));
    assert_true(f[i] == (float)v);
    if (t->dtype != TY_DTYPE_F64) assert_true(d[i] == v);
    if (t->dtype == TY_DTYPE_F64) assert_memory_equal(&d[i], &v, sizeof(v));
  }
  free(f);
  free(d);
}

static void test_read_python_file(void **state) {
  (void)state;
  json_t *want = st_load_json("python_all_dtypes.json");
  json_t *tensors = json_object_get(want, "tensors");
  const uint32_t modes[] = {TY_SAFETENSORS_OPEN_DEFAULT, TY_SAFETENSORS_OPEN_COPY};
  for (int m = 0; m < 2; ++m) {
    ty_safetensors_file_t *f = NULL;
    TY_EXPECT_OK(ty_safetensors_open_flags(
        st_path(TY_TEST_ST_FIXTURE_DIR, "python_all_dtypes.safetensors"), modes[m], &f));
    assert_int_equal(ty_safetensors_file_tensor_count(f), json_object_size(tensors));
    const char *name;
    json_t *entry;
    json_object_foreach(tensors, name, entry) {
      const ty_safetensors_tensor_t *t = ty_safetensors_file_find(f, name);
      st_expect_described(t, name, entry);
      /* The reference aligns every tensor: nothing is copied in map mode. */
      if (t->byte_size) assert_int_equal(t->data_is_copy, m == 1);
    }
    json_t *meta = json_object_get(want, "metadata");
    assert_int_equal(ty_safetensors_file_metadata_count(f), json_object_size(meta));
    json_object_foreach(meta, name, entry) {
      assert_string_equal(ty_safetensors_file_metadata_get(f, name), json_string_value(entry));
    }
    ty_safetensors_close(f);
  }
  json_decref(want);
}

static void test_writer_reproduces_python_file(void **state) {
  (void)state;
  const char *src = st_path(TY_TEST_ST_FIXTURE_DIR, "python_all_dtypes.safetensors");
  ty_safetensors_file_t *f = NULL;
  TY_EXPECT_OK(ty_safetensors_open(src, &f));
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  /* Added in reverse file order: the writer must find the layout itself. */
  for (size_t i = ty_safetensors_file_tensor_count(f); i-- > 0;) {
    const ty_safetensors_tensor_t *t = ty_safetensors_file_tensor_at(f, i);
    if (t->is_bool) {
      TY_EXPECT_OK(ty_safetensors_writer_add_bool(w, t->name, t->rank, t->dims, t->data,
                                                  t->byte_size));
    } else {
      TY_EXPECT_OK(ty_safetensors_writer_add(w, t->name, t->dtype, t->rank, t->dims, t->data,
                                             t->byte_size));
    }
  }
  char *dir = st_tmpdir_create();
  const char *out = st_path(dir, "ours.safetensors");
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, out));
  ty_safetensors_writer_destroy(w);
  ty_safetensors_close(f);
  size_t a_size = 0, b_size = 0;
  uint8_t *a = st_read_file(src, &a_size);
  uint8_t *b = st_read_file(out, &b_size);
  assert_int_equal(a_size, b_size);
  assert_memory_equal(a, b, a_size);
  free(a);
  free(b);
  st_tmpdir_remove(dir);
}

static void test_read_python_shards(void **state) {
  (void)state;
  json_t *want = st_load_json("python_sharded.json");
  json_t *tensors = json_object_get(want, "tensors");
  ty_safetensors_set_t *set = NULL;
  TY_EXPECT_OK(ty_safetensors_open_dir(st_path(TY_TEST_ST_FIXTURE_DIR, "python_sharded"), &set));
  assert_true(ty_safetensors_set_is_sharded(set));
  assert_int_equal(ty_safetensors_set_shard_count(set), 2);
  assert_int_equal(ty_safetensors_set_total_size(set),
                   json_integer_value(json_object_get(want, "total_size")));
  assert_int_equal(ty_safetensors_set_tensor_count(set), json_object_size(tensors));
  const char *name;
  json_t *entry;
  json_object_foreach(tensors, name, entry) {
    st_expect_described(ty_safetensors_set_find(set, name), name, entry);
  }
  /* Shards come in index order, each in file order. */
  const ty_safetensors_tensor_t *first = ty_safetensors_set_tensor_at(set, 0);
  TY_EXPECT_CONTAINS(ty_safetensors_file_path(first->file), "model-00001-of-00002");
  ty_safetensors_set_close(set);
  json_decref(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_read_python_file),
      cmocka_unit_test(test_writer_reproduces_python_file),
      cmocka_unit_test(test_read_python_shards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
