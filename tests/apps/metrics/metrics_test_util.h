/* Helpers of the metrics tests: scratch folders, whole-file reads, and an
 * independent reader of TFRecord files and of the Event messages the
 * TensorBoard writer produces (CRCs checked, every field decoded). */
#ifndef TY_TESTS_APPS_METRICS_TEST_UTIL_H_
#define TY_TESTS_APPS_METRICS_TEST_UTIL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A fresh folder under $TMPDIR (or /tmp); fails the test if it cannot. The
 * result is heap memory (free it after ty_mt_remove_tree). */
char *ty_mt_temp_dir(void);
/* rm -rf. */
void ty_mt_remove_tree(const char *path);
/* The whole file, NUL-terminated, in heap memory; NULL if it cannot be read
 * (out_size may be NULL). */
char *ty_mt_read_file(const char *path, size_t *out_size);
/* Writes `text` to `path` (replacing it); fails the test on error. */
void ty_mt_write_file(const char *path, const char *text);
/* The one entry of `dir` whose name starts with `prefix` (heap path); fails
 * the test unless there is exactly one. */
char *ty_mt_only_file(const char *dir, const char *prefix);

#define TY_MT_MAX_VALUES 8

/* One decoded Event. */
typedef struct ty_mt_event_t {
  bool has_wall_time;
  double wall_time;
  int64_t step;
  char file_version[32]; /* "" when absent */
  size_t value_count;
  char tags[TY_MT_MAX_VALUES][64];
  float values[TY_MT_MAX_VALUES];
} ty_mt_event_t;

/* Reads every record of the TFRecord file `data`, checking both masked CRCs
 * and that the file ends exactly after a record, and decodes each as an
 * Event. Returns the number of events (at most `max`), or -1 with a
 * message in `error` on the first problem. */
int ty_mt_read_events(const uint8_t *data, size_t size, ty_mt_event_t *events, size_t max,
                      char *error, size_t error_size);

#endif /* TY_TESTS_APPS_METRICS_TEST_UTIL_H_ */
