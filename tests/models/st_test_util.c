/* Helpers of the safetensors tests; see st_test_util.h. */
#include "st_test_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

char *st_tmpdir_create(void) {
  const char *base = getenv("TMPDIR");
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s/ty-st-XXXXXX", base && *base ? base : "/tmp");
  char *dir = mkdtemp(buf);
  assert_non_null(dir);
  char *copy = strdup(dir);
  assert_non_null(copy);
  return copy;
}

static int st_remove_one(const char *path, const struct stat *st, int flag,
                         struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

void st_tmpdir_remove(char *dir) {
  if (!dir) return;
  nftw(dir, st_remove_one, 16, FTW_DEPTH | FTW_PHYS);
  free(dir);
}

const char *st_path(const char *dir, const char *name) {
  static char bufs[4][4096];
  static int next = 0;
  char *buf = bufs[next];
  next = (next + 1) % 4;
  snprintf(buf, sizeof(bufs[0]), "%s/%s", dir, name);
  return buf;
}

void st_write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  if (size) assert_int_equal(fwrite(data, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

uint8_t *st_read_file(const char *path, size_t *out_size) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  assert_true(n >= 0);
  assert_int_equal(fseek(f, 0, SEEK_SET), 0);
  uint8_t *data = malloc((size_t)n + 1);
  assert_non_null(data);
  if (n) assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *out_size = (size_t)n;
  return data;
}

uint8_t *st_image(const char *header, uint64_t header_len, const void *data,
                  size_t data_size, size_t *out_size) {
  size_t text = strlen(header);
  uint64_t len = header_len == UINT64_MAX ? text : header_len;
  size_t size = 8 + text + data_size;
  uint8_t *img = malloc(size ? size : 1);
  assert_non_null(img);
  for (int i = 0; i < 8; ++i) img[i] = (uint8_t)(len >> (8 * i));
  memcpy(img + 8, header, text);
  for (size_t i = 0; i < data_size; ++i) {
    img[8 + text + i] = data ? ((const uint8_t *)data)[i] : (uint8_t)(i * 7 + 1);
  }
  *out_size = size;
  return img;
}
