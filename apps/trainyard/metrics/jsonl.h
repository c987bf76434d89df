/* metrics.jsonl: one JSON object per training step (or evaluation), one per
 * line, fields chosen by the caller:
 *
 *   {"step": 120, "loss": 3.4119999408721924, "lr": 0.00024, "tokens_per_s": 14213.5}
 *
 * Reals are written in the fewest digits that read back as the same double
 * (or float, for TY_JSONL_REAL32 fields), so a reader gets exactly the value
 * the trainer had. Lists of integers (a sample's token ids) are written as
 * JSON arrays. JSON has no NaN or infinity: such values are written as
 * null. Each line is appended with one write(2), so `tail -f` and readers of
 * a running job see whole lines. On resume, ty_jsonl_truncate_to_step drops
 * the lines of steps past the checkpoint. Format: docs/formats.md.
 *
 * Threading: a writer is used by one thread at a time; writers and the
 * truncate function share no state. Errors are statuses naming the file;
 * nothing is printed. */
#ifndef TY_APPS_TRAINYARD_METRICS_JSONL_H_
#define TY_APPS_TRAINYARD_METRICS_JSONL_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/file.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_jsonl_kind_t {
  TY_JSONL_INT = 0,    /* int64 */
  TY_JSONL_REAL = 1,   /* double, shortest digits that round-trip a double */
  TY_JSONL_REAL32 = 2, /* double holding a float value (a float32 loss):
                          shortest digits that round-trip the float */
  TY_JSONL_STRING = 3, /* UTF-8 text */
  TY_JSONL_BOOL = 4,
  TY_JSONL_INTS = 5,   /* a list of int64 (token ids): [1, 2, 3] */
} ty_jsonl_kind_t;

/* One "key": value of a line. Strings are borrowed for the call. */
typedef struct ty_jsonl_field_t {
  const char *key;
  ty_jsonl_kind_t kind;
  union {
    int64_t i;     /* TY_JSONL_INT, TY_JSONL_BOOL (0 or not) */
    double d;      /* TY_JSONL_REAL, TY_JSONL_REAL32 */
    const char *s; /* TY_JSONL_STRING */
    struct {
      const int64_t *data;
      size_t count;
    } ints; /* TY_JSONL_INTS */
  } value;
} ty_jsonl_field_t;

static inline ty_jsonl_field_t ty_jsonl_int(const char *key, int64_t value) {
  ty_jsonl_field_t f = {.key = key, .kind = TY_JSONL_INT, .value.i = value};
  return f;
}
static inline ty_jsonl_field_t ty_jsonl_real(const char *key, double value) {
  ty_jsonl_field_t f = {.key = key, .kind = TY_JSONL_REAL, .value.d = value};
  return f;
}
static inline ty_jsonl_field_t ty_jsonl_real32(const char *key, float value) {
  ty_jsonl_field_t f = {.key = key, .kind = TY_JSONL_REAL32, .value.d = value};
  return f;
}
static inline ty_jsonl_field_t ty_jsonl_string(const char *key, const char *value) {
  ty_jsonl_field_t f = {.key = key, .kind = TY_JSONL_STRING, .value.s = value};
  return f;
}
static inline ty_jsonl_field_t ty_jsonl_ints(const char *key, const int64_t *data,
                                             size_t count) {
  ty_jsonl_field_t f = {.key = key, .kind = TY_JSONL_INTS,
                        .value.ints = {.data = data, .count = count}};
  return f;
}
static inline ty_jsonl_field_t ty_jsonl_bool(const char *key, int value) {
  ty_jsonl_field_t f = {.key = key, .kind = TY_JSONL_BOOL, .value.i = value != 0};
  return f;
}

/* metrics.jsonl as read on resume and by `trainyard compare` (hal/file.h):
 * text, capped at 2 GiB unless TRAINYARD_MAX_METRICS_BYTES says otherwise. */
extern const ty_file_kind_t ty_metrics_jsonl_kind;

typedef struct ty_jsonl_writer_t ty_jsonl_writer_t;

/* Opens `path` for appending, creating it (not its folder) when missing.
 * FAILED_PRECONDITION when the file ends in an incomplete line (a crash
 * mid-write): run ty_jsonl_truncate_to_step first, which removes it. On
 * success *out_writer is owned by the caller (ty_jsonl_writer_close). */
ty_status_t ty_jsonl_writer_open(const char *path, ty_jsonl_writer_t **out_writer) TY_MUST_USE;

const char *ty_jsonl_writer_path(const ty_jsonl_writer_t *writer);

/* Formats one line: {"key": value, ...} with the fields in the order given
 * and a final '\n', into a heap string owned by the caller (free()).
 * INVALID_ARGUMENT for a missing or repeated key or a string that is not
 * UTF-8. */
ty_status_t ty_jsonl_line_format(const ty_jsonl_field_t *fields, size_t count,
                                 char **out_line) TY_MUST_USE;

/* Appends the line of `fields` (ty_jsonl_line_format). On error nothing of
 * the line stays in the file. */
ty_status_t ty_jsonl_writer_write(ty_jsonl_writer_t *writer, const ty_jsonl_field_t *fields,
                                  size_t count) TY_MUST_USE;

/* Syncs and closes the file and frees the writer (also on error). NULL is a
 * no-op. */
ty_status_t ty_jsonl_writer_close(ty_jsonl_writer_t *writer);

/* For resuming from the checkpoint of step `step`: rewrites `path` without
 * the lines whose "step" is greater than `step` and without a final
 * incomplete line, atomically (temp file, fsync, rename, so a crash leaves
 * the old file or the new one). A missing file is OK (nothing to keep).
 * DATA_LOSS naming the line when a complete line is not a JSON object with
 * an integer "step", or naming the offset when the bytes after the last
 * newline cannot be a line cut off mid-write (binary data: not '{' and
 * printable text); the file is then left as it is. out_kept and
 * out_removed (each may be NULL) receive the counts of lines. The file is
 * only rewritten when a line goes. */
ty_status_t ty_jsonl_truncate_to_step(const char *path, int64_t step, size_t *out_kept,
                                      size_t *out_removed) TY_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TY_APPS_TRAINYARD_METRICS_JSONL_H_ */
