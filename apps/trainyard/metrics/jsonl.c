/* metrics.jsonl writer and resume truncation (see jsonl.h). Values and keys
 * are escaped by jansson one at a time, so that each real gets its own
 * precision: the shortest that reads back as the same number (jansson's
 * JSON_REAL_PRECISION applies to a whole dump, and 17 digits everywhere
 * would write lr 0.00024 as 0.00024000000000000001). */
#include "metrics/jsonl.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics/io.h"

struct ty_jsonl_writer_t {
  int fd;
  char *path;
  off_t size; /* bytes of complete lines in the file */
};

/* ---- formatting ---------------------------------------------------------- */

typedef struct ty_jsonl_text_t {
  char *data;
  size_t size, capacity;
} ty_jsonl_text_t;

static bool ty_jsonl_text_append(ty_jsonl_text_t *t, const char *s, size_t n) {
  if (n + 1 > t->capacity - t->size) {
    size_t capacity = t->capacity ? t->capacity : 128;
    while (n + 1 > capacity - t->size) {
      if (capacity > SIZE_MAX / 2) return false;
      capacity *= 2;
    }
    char *grown = realloc(t->data, capacity);
    if (!grown) return false;
    t->data = grown;
    t->capacity = capacity;
  }
  memcpy(t->data + t->size, s, n);
  t->size += n;
  t->data[t->size] = '\0';
  return true;
}

/* The fewest significant digits (1..17) whose %g text reads back as
 * `value`; for `as_float`, back as the same float (1..9). */
static int ty_jsonl_shortest_precision(double value, bool as_float) {
  int max = as_float ? 9 : 17;
  char text[64];
  for (int p = 1; p < max; ++p) {
    snprintf(text, sizeof(text), "%.*g", p, value);
    double back = strtod(text, NULL);
    if (as_float ? (float)back == (float)value : back == value) return p;
  }
  return max;
}

/* Appends the JSON text of `json` (which it releases). */
static bool ty_jsonl_text_append_json(ty_jsonl_text_t *t, json_t *json, size_t flags) {
  if (!json) return false;
  char *text = json_dumps(json, JSON_ENCODE_ANY | flags);
  json_decref(json);
  if (!text) return false;
  bool ok = ty_jsonl_text_append(t, text, strlen(text));
  free(text);
  return ok;
}

static ty_status_t ty_jsonl_append_value(ty_jsonl_text_t *t, const ty_jsonl_field_t *f) {
  char number[32];
  switch (f->kind) {
    case TY_JSONL_INT:
      snprintf(number, sizeof(number), "%lld", (long long)f->value.i);
      if (!ty_jsonl_text_append(t, number, strlen(number))) break;
      return TY_OK;
    case TY_JSONL_BOOL: {
      const char *b = f->value.i ? "true" : "false";
      if (!ty_jsonl_text_append(t, b, strlen(b))) break;
      return TY_OK;
    }
    case TY_JSONL_REAL:
    case TY_JSONL_REAL32: {
      bool as_float = f->kind == TY_JSONL_REAL32;
      double v = as_float ? (double)(float)f->value.d : f->value.d;
      if (!isfinite(v)) {
        if (!ty_jsonl_text_append(t, "null", 4)) break;
        return TY_OK;
      }
      int p = ty_jsonl_shortest_precision(v, as_float);
      if (!ty_jsonl_text_append_json(t, json_real(v), JSON_REAL_PRECISION(p))) break;
      return TY_OK;
    }
    case TY_JSONL_STRING: {
      if (!f->value.s) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "metrics field '%s' has a NULL string",
                              f->key);
      }
      json_t *s = json_string(f->value.s);
      if (!s) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "metrics field '%s' is not valid UTF-8", f->key);
      }
      if (!ty_jsonl_text_append_json(t, s, 0)) break;
      return TY_OK;
    }
    case TY_JSONL_INTS: {
      if (!f->value.ints.data && f->value.ints.count) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "metrics field '%s' has a NULL list",
                              f->key);
      }
      bool ok = ty_jsonl_text_append(t, "[", 1);
      for (size_t i = 0; ok && i < f->value.ints.count; ++i) {
        snprintf(number, sizeof(number), "%s%lld", i ? ", " : "",
                 (long long)f->value.ints.data[i]);
        ok = ty_jsonl_text_append(t, number, strlen(number));
      }
      if (!ok || !ty_jsonl_text_append(t, "]", 1)) break;
      return TY_OK;
    }
    default:
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "metrics field '%s' has unknown kind %d",
                            f->key, (int)f->kind);
  }
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory formatting a metrics line");
}

ty_status_t ty_jsonl_line_format(const ty_jsonl_field_t *fields, size_t count,
                                 char **out_line) {
  if (!out_line) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "out_line is NULL");
  *out_line = NULL;
  if (count > 0 && !fields) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "metrics fields are NULL");
  }
  ty_jsonl_text_t t = {0};
  ty_status_t status = TY_OK;
  bool ok = ty_jsonl_text_append(&t, "{", 1);
  for (size_t i = 0; ok && !status && i < count; ++i) {
    const char *key = fields[i].key;
    if (!key) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "metrics field %zu has no key", i);
      break;
    }
    for (size_t j = 0; j < i && !status; ++j) {
      if (strcmp(fields[j].key, key) == 0) {
        status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                "metrics field '%s' appears twice in one line", key);
      }
    }
    if (status) break;
    json_t *json_key = json_string(key);
    if (!json_key) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "metrics key '%s' is not valid UTF-8",
                              key);
      break;
    }
    ok = (i == 0 || ty_jsonl_text_append(&t, ", ", 2)) &&
         ty_jsonl_text_append_json(&t, json_key, 0) && ty_jsonl_text_append(&t, ": ", 2);
    if (ok) status = ty_jsonl_append_value(&t, &fields[i]);
  }
  if (!status && ok) ok = ty_jsonl_text_append(&t, "}\n", 2);
  if (!status && !ok) {
    status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory formatting a metrics line");
  }
  if (status) {
    free(t.data);
    return status;
  }
  *out_line = t.data;
  return TY_OK;
}

/* ---- the writer -------------------------------------------------------- */

ty_status_t ty_jsonl_writer_open(const char *path, ty_jsonl_writer_t **out_writer) {
  if (!out_writer) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "out_writer is NULL");
  *out_writer = NULL;
  if (!path || !*path) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "empty metrics file name");
  ty_jsonl_writer_t *writer = calloc(1, sizeof(*writer));
  if (!writer || !(writer->path = strdup(path))) {
    free(writer);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  ty_status_t status = TY_OK;
  writer->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  struct stat st;
  if (writer->fd < 0) {
    status = ty_status_from_errno(errno, "cannot open metrics file %s", path);
  } else if (fstat(writer->fd, &st) != 0) {
    status = ty_status_from_errno(errno, "cannot stat %s", path);
  } else if (!S_ISREG(st.st_mode)) {
    writer->size = 0; /* a device or pipe (/dev/full in tests): nothing to check */
  } else if (st.st_size > 0) {
    writer->size = st.st_size;
    /* O_APPEND writes ignore the offset, so reading back needs another fd. */
    int rfd = open(path, O_RDONLY | O_CLOEXEC);
    char last = '\n';
    if (rfd < 0 || pread(rfd, &last, 1, st.st_size - 1) != 1) {
      status = ty_status_from_errno(errno, "cannot read %s", path);
    } else if (last != '\n') {
      status = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                              "%s ends in an incomplete line (a run stopped mid-write); "
                              "truncate it to the resumed step first", path);
    }
    if (rfd >= 0) close(rfd);
  }
  if (status) {
    if (writer->fd >= 0) close(writer->fd);
    free(writer->path);
    free(writer);
    return status;
  }
  *out_writer = writer;
  return TY_OK;
}

const char *ty_jsonl_writer_path(const ty_jsonl_writer_t *writer) { return writer->path; }

ty_status_t ty_jsonl_writer_write(ty_jsonl_writer_t *writer, const ty_jsonl_field_t *fields,
                                  size_t count) {
  char *line;
  TY_RETURN_IF_ERROR(ty_status_annotate(ty_jsonl_line_format(fields, count, &line), "%s",
                                        writer->path));
  size_t left = strlen(line);
  const char *p = line;
  ty_status_t status = TY_OK;
  while (left > 0) {
    ssize_t n = write(writer->fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      status = ty_status_from_errno(errno, "cannot write %s", writer->path);
      /* A part of the line got out: cut it off so the file ends whole. */
      if (p != line && ftruncate(writer->fd, writer->size) != 0) {
        status = ty_status_annotate(status, "and cannot cut the partial line off again");
      }
      break;
    }
    p += n;
    left -= (size_t)n;
  }
  if (!status) writer->size += (off_t)(p - line);
  free(line);
  return status;
}

ty_status_t ty_jsonl_writer_close(ty_jsonl_writer_t *writer) {
  if (!writer) return TY_OK;
  ty_status_t status = TY_OK;
  if (fsync(writer->fd) != 0 && errno != EINVAL) {
    status = ty_status_from_errno(errno, "cannot sync %s", writer->path);
  }
  if (close(writer->fd) != 0 && !status) {
    status = ty_status_from_errno(errno, "cannot close %s", writer->path);
  }
  free(writer->path);
  free(writer);
  return status;
}

/* ---- truncation on resume ------------------------------------------------ */

const ty_file_kind_t ty_metrics_jsonl_kind = {
    .what = "metrics file",
    .max_bytes = 2 * TY_GIB,
    .limit_env = "TRAINYARD_MAX_METRICS_BYTES",
    .text = true,
    .bad_code = TY_CODE_DATA_LOSS,
    .skip_bom = true,
};

static ty_status_t ty_jsonl_read_file(const char *path, char **out_data, size_t *out_size,
                                      struct stat *out_st) {
  *out_data = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot open metrics file %s", path);
  ty_status_t status = TY_OK;
  if (fstat(fd, out_st) != 0) {
    status = ty_status_from_errno(errno, "cannot stat %s", path);
  } else if (!S_ISREG(out_st->st_mode)) {
    /* It is rewritten in place of itself on resume: only a file can be. */
    status = ty_status_make(TY_CODE_FAILED_PRECONDITION, "%s is not a regular file", path);
  } else {
    status = ty_file_read_fd(fd, path, &ty_metrics_jsonl_kind, out_data, out_size);
  }
  close(fd);
  return status;
}

/* The "step" of one line; DATA_LOSS naming the line when there is none. */
static ty_status_t ty_jsonl_line_step(const char *path, size_t line_no, const char *line,
                                      size_t len, int64_t *out_step) {
  json_error_t error;
  json_t *obj = json_loadb(line, len, 0, &error);
  if (!obj) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s:%zu: not JSON (%s at byte %d of the line)",
                          path, line_no, error.text, error.position);
  }
  json_t *step = json_object_get(obj, "step");
  ty_status_t status = TY_OK;
  if (!json_is_object(obj)) {
    status = ty_status_make(TY_CODE_DATA_LOSS, "%s:%zu: not a JSON object", path, line_no);
  } else if (!json_is_integer(step)) {
    status = ty_status_make(TY_CODE_DATA_LOSS, "%s:%zu: no integer \"step\" field", path,
                            line_no);
  } else {
    *out_step = (int64_t)json_integer_value(step);
  }
  json_decref(obj);
  return status;
}

static ty_status_t ty_jsonl_write_atomic(const char *path, const char *data, size_t size,
                                         mode_t mode) {
  size_t n = strlen(path) + 32;
  char *tmp = malloc(n);
  if (!tmp) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
  ty_status_t status = TY_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    status = ty_status_from_errno(errno, "cannot rewrite %s (creating %s)", path, tmp);
    free(tmp);
    return status;
  }
  for (size_t done = 0; done < size && !status;) {
    ssize_t w = write(fd, data + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) status = ty_status_from_errno(errno, "cannot write %s", tmp);
    else done += (size_t)w;
  }
  /* The new file keeps the old one's permissions. */
  if (!status && fchmod(fd, mode & 07777) != 0) {
    status = ty_status_from_errno(errno, "cannot set the mode of %s", tmp);
  }
  if (!status && fsync(fd) != 0) status = ty_status_from_errno(errno, "cannot sync %s", tmp);
  if (close(fd) != 0 && !status) status = ty_status_from_errno(errno, "cannot close %s", tmp);
  if (!status && rename(tmp, path) != 0) {
    status = ty_status_from_errno(errno, "cannot rename %s to %s", tmp, path);
  }
  if (status) {
    unlink(tmp);
  } else {
    status = ty_metrics_dir_sync_of(path);
  }
  free(tmp);
  return status;
}

/* Longest line the writer makes (a few fields; strings are short). */
#define TY_JSONL_TORN_MAX 65536

/* Whether `n` bytes after the last newline can be the start of a line the
 * writer was cutting off mid-write: '{' then text (JSON escapes control
 * characters, so none appear), short. Anything else (binary data, another
 * file's bytes) is not ours to drop. */
static bool ty_jsonl_is_torn_line(const char *p, size_t n) {
  if (n == 0 || n > TY_JSONL_TORN_MAX || p[0] != '{') return false;
  for (size_t i = 0; i < n; ++i) {
    if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f) return false;
  }
  return true;
}

ty_status_t ty_jsonl_truncate_to_step(const char *path, int64_t step, size_t *out_kept,
                                      size_t *out_removed) {
  if (out_kept) *out_kept = 0;
  if (out_removed) *out_removed = 0;
  if (!path || !*path) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "empty metrics file name");
  char *data;
  size_t size;
  struct stat st;
  ty_status_t status = ty_jsonl_read_file(path, &data, &size, &st);
  if (status && ty_status_code(status) == TY_CODE_NOT_FOUND) {
    ty_status_free(status);
    return TY_OK;
  }
  TY_RETURN_IF_ERROR(status);
  /* Kept lines are moved down in place; `out` trails `in`. */
  size_t out = 0, kept = 0, removed = 0, line_no = 0;
  for (size_t in = 0; in < size;) {
    const char *nl = memchr(data + in, '\n', size - in);
    ++line_no;
    if (!nl) { /* incomplete last line: a run stopped mid-write? */
      if (!ty_jsonl_is_torn_line(data + in, size - in)) {
        status = ty_status_make(TY_CODE_DATA_LOSS,
                                "%s:%zu: the %zu bytes at offset %zu after the last "
                                "complete line are not a metrics line cut off mid-write "
                                "(binary data?); move the file away to resume",
                                path, line_no, size - in, in);
        break;
      }
      ++removed;
      break;
    }
    size_t len = (size_t)(nl - (data + in)) + 1;
    int64_t line_step = 0;
    status = ty_jsonl_line_step(path, line_no, data + in, len - 1, &line_step);
    if (status) break;
    if (line_step <= step) {
      memmove(data + out, data + in, len);
      out += len;
      ++kept;
    } else {
      ++removed;
    }
    in += len;
  }
  if (!status && removed > 0) status = ty_jsonl_write_atomic(path, data, out, st.st_mode);
  free(data);
  if (status) return status;
  if (out_kept) *out_kept = kept;
  if (out_removed) *out_removed = removed;
  return TY_OK;
}
