/* Bad safetensors inputs: every malformed file and index gets its own error,
 * read here word for word (code, file, tensor, what is wrong), in every open
 * mode (mapped, copied, from memory). None may crash. */
#include "common/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/safetensors.h"
#include "st_test_util.h"

static char *st_dir;

static int st_setup(void **state) {
  (void)state;
  st_dir = st_tmpdir_create();
  return 0;
}

static int st_teardown(void **state) {
  (void)state;
  st_tmpdir_remove(st_dir);
  st_dir = NULL;
  return 0;
}

/* Opens `img` as a file (mapped and copied) and from memory; each must
 * fail with `code` and a message holding `want` (and the file's name). */
static void st_expect_image_fails(const uint8_t *img, size_t size, ty_code_t code,
                                  const char *want, int line) {
  static int counter = 0;
  char name[64];
  snprintf(name, sizeof(name), "bad%d_line%d.safetensors", counter++, line);
  const char *path = st_path(st_dir, name);
  st_write_file(path, img, size);
  const uint32_t modes[] = {TY_SAFETENSORS_OPEN_DEFAULT, TY_SAFETENSORS_OPEN_COPY};
  for (int m = 0; m < 2; ++m) {
    ty_safetensors_file_t *f = (ty_safetensors_file_t *)1;
    ty_status_t status = ty_safetensors_open_flags(path, modes[m], &f);
    if (ty_status_code(status) != code || !strstr(ty_status_message(status), want) ||
        !strstr(ty_status_message(status), name)) {
      print_error("line %d, mode %u: expected %s with '%s' and '%s'\n  got %s: %s\n", line,
                  modes[m], ty_code_name(code), want, name,
                  ty_code_name(ty_status_code(status)), ty_status_message(status));
      ty_status_free(status);
      fail();
    }
    ty_status_free(status);
    assert_null(f);
    /* A copy of exactly `size` bytes, so ASan sees any overread. */
    uint8_t *copy = malloc(size ? size : 1);
    assert_non_null(copy);
    memcpy(copy, img, size);
    status = ty_safetensors_open_memory(copy, size, name, modes[m], &f);
    if (ty_status_code(status) != code || !strstr(ty_status_message(status), want)) {
      print_error("line %d, memory mode %u: expected %s with '%s'\n  got %s: %s\n", line,
                  modes[m], ty_code_name(code), want, ty_code_name(ty_status_code(status)),
                  ty_status_message(status));
      ty_status_free(status);
      fail();
    }
    ty_status_free(status);
    free(copy);
  }
}

/* A header (its length taken from the text) and `data_size` data bytes. */
static void st_expect_header_fails(const char *header, size_t data_size, ty_code_t code,
                                   const char *want, int line) {
  size_t size = 0;
  uint8_t *img = st_image(header, UINT64_MAX, NULL, data_size, &size);
  st_expect_image_fails(img, size, code, want, line);
  free(img);
}

#define EXPECT_HEADER_FAILS(header, data_size, code, want) \
  st_expect_header_fails((header), (data_size), (code), (want), __LINE__)

#define T(name, rest) "\"" name "\":{" rest "}"
#define F32(shape, b, e) "\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]"

static void test_truncated(void **state) {
  (void)state;
  const char *header = "{" T("a", F32("[2]", 0, 8)) "," T("b", F32("[3]", 8, 20)) "}";
  size_t size = 0;
  uint8_t *img = st_image(header, UINT64_MAX, NULL, 20, &size);
  /* Cut inside the data: the last tensor runs past the end. */
  st_expect_image_fails(img, size - 4, TY_CODE_DATA_LOSS,
                        "tensor 'b': data_offsets [8, 20] run past the end of the data "
                        "region (16 bytes): the file is truncated", __LINE__);
  /* Cut inside the header. */
  st_expect_image_fails(img, 8 + 10, TY_CODE_DATA_LOSS,
                        "runs past the end of the file (10 bytes follow the length): the "
                        "file is truncated", __LINE__);
  /* Cut inside the length. */
  st_expect_image_fails(img, 5, TY_CODE_DATA_LOSS, "truncated: 5 bytes", __LINE__);
  st_expect_image_fails(img, 0, TY_CODE_DATA_LOSS, "truncated: 0 bytes", __LINE__);
  free(img);
}

static void test_header_length_bounds(void **state) {
  (void)state;
  size_t size = 0;
  uint8_t *img = st_image("{}", 1000, NULL, 0, &size);
  st_expect_image_fails(img, size, TY_CODE_DATA_LOSS,
                        "header length 1000 runs past the end of the file", __LINE__);
  free(img);
  img = st_image("{}", 1ull << 40, NULL, 0, &size);
  st_expect_image_fails(img, size, TY_CODE_DATA_LOSS,
                        "header length 1099511627776 is above the 100000000-byte limit",
                        __LINE__);
  free(img);
  img = st_image("{}", UINT64_MAX - 1, NULL, 0, &size);
  st_expect_image_fails(img, size, TY_CODE_DATA_LOSS, "above the 100000000-byte limit",
                        __LINE__);
  free(img);
  img = st_image("{}", 1, NULL, 0, &size);
  st_expect_image_fails(img, size, TY_CODE_DATA_LOSS, "header length 1 is too small",
                        __LINE__);
  free(img);
  img = st_image("{}", 0, NULL, 0, &size);
  st_expect_image_fails(img, size, TY_CODE_DATA_LOSS, "header length 0 is too small",
                        __LINE__);
  free(img);
}

static void test_layout_errors(void **state) {
  (void)state;
  EXPECT_HEADER_FAILS("{" T("a", F32("[2]", 0, 8)) "," T("b", F32("[2]", 4, 12)) "}", 12,
                      TY_CODE_DATA_LOSS,
                      "tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  EXPECT_HEADER_FAILS("{" T("a", F32("[1]", 0, 4)) "," T("b", F32("[1]", 8, 12)) "}", 12,
                      TY_CODE_DATA_LOSS,
                      "tensor 'b': a gap of 4 bytes: it begins at 8, but tensor 'a' "
                      "before it ends at 4");
  EXPECT_HEADER_FAILS("{" T("a", F32("[1]", 4, 8)) "}", 8, TY_CODE_DATA_LOSS,
                      "tensor 'a': a gap: the first tensor begins at byte 4");
  EXPECT_HEADER_FAILS("{" T("a", F32("[1]", 0, 4)) "}", 8, TY_CODE_DATA_LOSS,
                      "4 trailing bytes belong to no tensor");
  EXPECT_HEADER_FAILS("{}", 3, TY_CODE_DATA_LOSS, "3 trailing bytes");
  EXPECT_HEADER_FAILS("{" T("a", F32("[2]", 0, 8)) "}", 4, TY_CODE_DATA_LOSS,
                      "tensor 'a': data_offsets [0, 8] run past the end of the data region");
  EXPECT_HEADER_FAILS("{" T("a", F32("[1]", 8, 4)) "}", 8, TY_CODE_DATA_LOSS,
                      "tensor 'a': data_offsets [8, 4] end before they begin");
  /* One shared byte is an overlap (not only a whole element). */
  EXPECT_HEADER_FAILS("{" T("a", F32("[2]", 0, 8)) "," T("b", F32("[1]", 7, 11)) "}", 11,
                      TY_CODE_DATA_LOSS,
                      "tensor 'b': data_offsets [7, 11] overlap tensor 'a' [0, 8]");
  /* An empty tensor inside another one's bytes is an overlap too. */
  EXPECT_HEADER_FAILS("{" T("a", F32("[2]", 0, 8)) "," T("e", F32("[0]", 4, 4)) "}", 8,
                      TY_CODE_DATA_LOSS, "overlap");
}

static void test_entry_errors(void **state) {
  (void)state;
  EXPECT_HEADER_FAILS("{" T("w", "\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]") "}",
                      4, TY_CODE_DATA_LOSS, "tensor 'w': unknown dtype 'F33'");
  EXPECT_HEADER_FAILS("{" T("w", "\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]") "}",
                      4, TY_CODE_DATA_LOSS, "unknown dtype 'f32'");
  EXPECT_HEADER_FAILS(
      "{" T("w8", "\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]") "}", 4,
      TY_CODE_UNIMPLEMENTED, "tensor 'w8': dtype F8_E4M3 is valid safetensors but Trainyard");
  EXPECT_HEADER_FAILS("{" T("w", "\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]") "}", 4,
                      TY_CODE_DATA_LOSS, "dtype is not a string");
  EXPECT_HEADER_FAILS("{" T("w", F32("[3]", 0, 8)) "}", 8, TY_CODE_DATA_LOSS,
                      "tensor 'w': shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] "
                      "hold 8");
  /* Too many bytes is the same error (not a trailing gap found later). */
  EXPECT_HEADER_FAILS("{" T("w", F32("[1]", 0, 8)) "}", 8, TY_CODE_DATA_LOSS,
                      "tensor 'w': shape [1] of F32 needs 4 bytes, but data_offsets [0, 8] "
                      "hold 8");
  EXPECT_HEADER_FAILS("{" T("w", F32("[-2]", 0, 8)) "}", 8, TY_CODE_DATA_LOSS,
                      "shape entry 0 is not an integer >= 0");
  EXPECT_HEADER_FAILS("{" T("w", F32("[2.0]", 0, 8)) "}", 8, TY_CODE_DATA_LOSS,
                      "shape entry 0 is not an integer >= 0");
  EXPECT_HEADER_FAILS("{" T("w", F32("2", 0, 8)) "}", 8, TY_CODE_DATA_LOSS,
                      "shape is not an array");
  EXPECT_HEADER_FAILS("{" T("w", F32("[1,1,1,1,1,1,1,1,1]", 0, 4)) "}", 4,
                      TY_CODE_UNIMPLEMENTED, "tensor 'w': rank 9");
  EXPECT_HEADER_FAILS("{" T("w", F32("[4294967296,4294967296,16]", 0, 4)) "}", 4,
                      TY_CODE_DATA_LOSS, "more bytes than 64 bits can count");
  EXPECT_HEADER_FAILS(
      "{" T("w", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"extra\":1") "}", 4,
      TY_CODE_DATA_LOSS, "tensor 'w': unknown field 'extra'");
  EXPECT_HEADER_FAILS("{" T("w", "\"dtype\":\"F32\",\"data_offsets\":[0,4]") "}", 4,
                      TY_CODE_DATA_LOSS, "tensor 'w': missing field 'shape'");
  EXPECT_HEADER_FAILS("{" T("w", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]") "}",
                      4, TY_CODE_DATA_LOSS, "data_offsets must be [begin, end]");
  EXPECT_HEADER_FAILS("{" T("w", "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]") "}",
                      4, TY_CODE_DATA_LOSS, "data_offsets must be [begin, end]");
  EXPECT_HEADER_FAILS("{\"w\":[1,2]}", 0, TY_CODE_DATA_LOSS,
                      "tensor 'w': entry is not a JSON object");
}

static void test_json_errors(void **state) {
  (void)state;
  EXPECT_HEADER_FAILS("{" T("w", F32("[1]", 0, 4)) "," T("w", F32("[1]", 4, 8)) "}", 8,
                      TY_CODE_DATA_LOSS, "header is not valid JSON: duplicate object key");
  /* The same name spelled with an escape is still a duplicate. */
  EXPECT_HEADER_FAILS("{" T("w", F32("[1]", 0, 4)) "," T("\\u0077", F32("[1]", 4, 8)) "}", 8,
                      TY_CODE_DATA_LOSS, "duplicate object key");
  EXPECT_HEADER_FAILS("[1, 2, 3]", 0, TY_CODE_DATA_LOSS, "header is not a JSON object");
  EXPECT_HEADER_FAILS("\"text\"", 0, TY_CODE_DATA_LOSS, "header is not valid JSON");
  EXPECT_HEADER_FAILS("{\"a\": ", 0, TY_CODE_DATA_LOSS, "header is not valid JSON");
  EXPECT_HEADER_FAILS("{\"\xff\xfe\": 1}", 0, TY_CODE_DATA_LOSS, "header is not valid JSON");
  EXPECT_HEADER_FAILS("{" T("w", F32("[1]", 0, 99999999999999999999)) "}", 4,
                      TY_CODE_DATA_LOSS, "header is not valid JSON");
  EXPECT_HEADER_FAILS("{} trailing", 0, TY_CODE_DATA_LOSS, "header is not valid JSON");
  EXPECT_HEADER_FAILS("{\"__metadata__\":{\"format\":1}}", 0, TY_CODE_DATA_LOSS,
                      "__metadata__ entry 'format' is not a string");
  EXPECT_HEADER_FAILS("{\"__metadata__\":[]}", 0, TY_CODE_DATA_LOSS,
                      "__metadata__ is not a JSON object");
  /* A NUL inside the header. */
  size_t size = 0;
  uint8_t *img = st_image("{ }", UINT64_MAX, NULL, 0, &size);
  img[9] = 0;
  st_expect_image_fails(img, size, TY_CODE_DATA_LOSS, "header is not valid JSON", __LINE__);
  free(img);
}

/* ---- sharded folders --------------------------------------------------------- */

/* A shard with tensors of one f32 element each, written by the writer. */
static void st_write_shard(const char *dir, const char *file, const char *const *names,
                           size_t n) {
  ty_safetensors_writer_t *w = NULL;
  TY_EXPECT_OK(ty_safetensors_writer_create(&w));
  static const float one = 1.0f;
  const int64_t dims[] = {1};
  for (size_t i = 0; i < n; ++i) {
    TY_EXPECT_OK(ty_safetensors_writer_add(w, names[i], TY_DTYPE_F32, 1, dims, &one, 4));
  }
  TY_EXPECT_OK(ty_safetensors_writer_write_file(w, st_path(dir, file)));
  ty_safetensors_writer_destroy(w);
}

static void st_expect_dir_fails(const char *index_json, ty_code_t code, const char *want,
                                int line) {
  char *dir = st_tmpdir_create();
  const char *a[] = {"a", "b"};
  const char *c[] = {"c", "b"};
  st_write_shard(dir, "s1.safetensors", a, 2);
  st_write_shard(dir, "s2.safetensors", c, 1);
  st_write_shard(dir, "s3.safetensors", c, 2); /* "b" again */
  st_write_file(st_path(dir, "broken.safetensors"), "\x02\0\0\0\0\0\0\0[]", 10);
  st_write_file(st_path(dir, "model.safetensors.index.json"), index_json, strlen(index_json));
  ty_safetensors_set_t *set = (ty_safetensors_set_t *)1;
  ty_status_t status = ty_safetensors_open_dir(dir, &set);
  if (ty_status_code(status) != code || !strstr(ty_status_message(status), want)) {
    print_error("line %d: expected %s with '%s'\n  got %s: %s\n", line, ty_code_name(code), want,
                ty_code_name(ty_status_code(status)), ty_status_message(status));
    ty_status_free(status);
    fail();
  }
  ty_status_free(status);
  assert_null(set);
  st_tmpdir_remove(dir);
}

#define EXPECT_DIR_FAILS(index, code, want) st_expect_dir_fails((index), (code), (want), __LINE__)
#define MAP(body) "{\"metadata\":{\"total_size\":12},\"weight_map\":{" body "}}"

static void test_index_errors(void **state) {
  (void)state;
  /* The good case first, so the failures below are the index's fault. */
  char *dir = st_tmpdir_create();
  const char *a[] = {"a", "b"};
  const char *c[] = {"c"};
  st_write_shard(dir, "s1.safetensors", a, 2);
  st_write_shard(dir, "s2.safetensors", c, 1);
  const char *good = MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"");
  st_write_file(st_path(dir, "model.safetensors.index.json"), good, strlen(good));
  ty_safetensors_set_t *set = NULL;
  TY_EXPECT_OK(ty_safetensors_open_dir(dir, &set));
  assert_int_equal(ty_safetensors_set_tensor_count(set), 3);
  assert_int_equal(ty_safetensors_set_total_size(set), 12);
  ty_safetensors_set_close(set);
  st_tmpdir_remove(dir);

  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                       "\"c\":\"model-00002-of-00002.safetensors\""),
                   TY_CODE_DATA_LOSS,
                   "names shard 'model-00002-of-00002.safetensors', but");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                       "\"c\":\"s2.safetensors\",\"d\":\"s2.safetensors\""),
                   TY_CODE_DATA_LOSS,
                   "maps tensor 'd' to shard 's2.safetensors', which does not contain it");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                       "\"c\":\"../s2.safetensors\""),
                   TY_CODE_DATA_LOSS,
                   "tensor 'c' maps to '../s2.safetensors', which is not a plain file name");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                       "\"c\":\"/etc/s2.safetensors\""),
                   TY_CODE_DATA_LOSS, "not a plain file name");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\",\"c\":7"),
                   TY_CODE_DATA_LOSS, "tensor 'c' maps to a non-string");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s3.safetensors\","
                       "\"c\":\"s3.safetensors\""),
                   TY_CODE_DATA_LOSS, "tensor 'b' is in two shards, 's1.safetensors' and "
                                      "'s3.safetensors'");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"c\":\"s2.safetensors\""), TY_CODE_DATA_LOSS,
                   "shard 's1.safetensors' holds tensor 'b', which");
  EXPECT_DIR_FAILS(MAP("\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
                       "\"x\":\"broken.safetensors\""),
                   TY_CODE_DATA_LOSS, "shard 'broken.safetensors' of");
  EXPECT_DIR_FAILS("{\"weight_map\": ", TY_CODE_DATA_LOSS, "not valid JSON");
  EXPECT_DIR_FAILS("{\"weight_map\":{}}", TY_CODE_DATA_LOSS, "not a safetensors index");
  EXPECT_DIR_FAILS("{\"metadata\":{}}", TY_CODE_DATA_LOSS, "not a safetensors index");
  EXPECT_DIR_FAILS("[]", TY_CODE_DATA_LOSS, "not a safetensors index");
  EXPECT_DIR_FAILS("{\"metadata\":{\"total_size\":-1},\"weight_map\":{\"a\":\"s1.safetensors\"}}",
                   TY_CODE_DATA_LOSS, "total_size is not an integer >= 0");
  EXPECT_DIR_FAILS("{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}",
                   TY_CODE_DATA_LOSS, "duplicate object key");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncated),
      cmocka_unit_test(test_header_length_bounds),
      cmocka_unit_test(test_layout_errors),
      cmocka_unit_test(test_entry_errors),
      cmocka_unit_test(test_json_errors),
      cmocka_unit_test(test_index_errors),
  };
  return cmocka_run_group_tests(tests, st_setup, st_teardown);
}
