/* Helpers of the safetensors tests: scratch folders, files from bytes, and
 * hand-built safetensors images (any header, any length field). */
#ifndef TY_TESTS_MODELS_ST_TEST_UTIL_H_
#define TY_TESTS_MODELS_ST_TEST_UTIL_H_

#include <stddef.h>
#include <stdint.h>

/* A fresh folder under $TMPDIR (or /tmp); fails the test if it cannot. */
char *st_tmpdir_create(void);
/* Removes the folder and everything in it, then frees `dir`. */
void st_tmpdir_remove(char *dir);

/* "<dir>/<name>" in a static buffer of 4096 bytes (one of four, rotating). */
const char *st_path(const char *dir, const char *name);

/* Writes `size` bytes to `path` (replacing it); fails the test on error. */
void st_write_file(const char *path, const void *data, size_t size);
/* Reads a whole file (malloc'd, *out_size set); fails the test on error. */
uint8_t *st_read_file(const char *path, size_t *out_size);

/* An image: 8-byte length `header_len` (strlen(header) when UINT64_MAX),
 * the header text, then `data_size` bytes of a counting pattern (or `data`
 * when not NULL). malloc'd; *out_size set. */
uint8_t *st_image(const char *header, uint64_t header_len, const void *data,
                  size_t data_size, size_t *out_size);

#endif /* TY_TESTS_MODELS_ST_TEST_UTIL_H_ */
