/* TensorBoard event file writer (see tensorboard.h). The messages are
 * encoded by hand (metrics/protobuf.h); their sizes are computed first so
 * that each event is written in one pass with no nested buffers. */
#include "metrics/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "metrics/crc32c.h"
#include "metrics/io.h"

/* Field numbers of tensorflow/core/util/event.proto and
 * tensorflow/core/framework/summary.proto. */
enum {
  TY_TB_EVENT_WALL_TIME = 1,    /* double */
  TY_TB_EVENT_STEP = 2,         /* int64 */
  TY_TB_EVENT_FILE_VERSION = 3, /* string (oneof what) */
  TY_TB_EVENT_SUMMARY = 5,      /* Summary (oneof what) */
  TY_TB_SUMMARY_VALUE = 1,      /* repeated Summary.Value */
  TY_TB_VALUE_TAG = 1,          /* string */
  TY_TB_VALUE_SIMPLE_VALUE = 2, /* float (oneof value) */
};

#define TY_TB_FILE_VERSION "brain.Event:2"
/* Tries at a free file name before giving up (each bumps the counter). */
#define TY_TB_NAME_TRIES 100

struct ty_tensorboard_writer_t {
  int fd;
  char *path;
  uint64_t size;          /* bytes in the file: every complete record */
  ty_pb_buffer_t event;   /* scratch: the Event being written */
  ty_pb_buffer_t record;  /* scratch: its TFRecord framing */
};

/* Numbers the writers of this process, as TensorBoard's Python writer does,
 * so that two opened in the same second get different names. */
static atomic_uint ty_tb_file_counter;

double ty_tensorboard_now(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (double)time(NULL);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

float ty_tensorboard_value_to_float(double value) {
  /* IEEE 754 (C11 Annex F) conversion: rounds to nearest, values beyond the
   * float range become +-inf, NaN stays NaN. */
  return (float)value;
}

/* ---- encoding ---------------------------------------------------------- */

static size_t ty_tb_varint_size(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80u) {
    value >>= 7;
    ++n;
  }
  return n;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF): protobuf parsers refuse proto3 strings that are not. */
static bool ty_tb_is_utf8(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    size_t len;
    uint32_t min, cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, min = 0x80, cp = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, min = 0x800, cp = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, min = 0x10000, cp = c & 0x07u;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (s[i + k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

void ty_tensorboard_event_encode_version(ty_pb_buffer_t *out, double wall_time) {
  if (wall_time != 0.0) ty_pb_put_double_field(out, TY_TB_EVENT_WALL_TIME, wall_time);
  ty_pb_put_bytes_field(out, TY_TB_EVENT_FILE_VERSION, TY_TB_FILE_VERSION,
                        sizeof(TY_TB_FILE_VERSION) - 1);
}

/* Size of Summary.Value {tag, simple_value}. */
static size_t ty_tb_value_size(size_t tag_len) {
  return 1 + ty_tb_varint_size(tag_len) + tag_len + 1 + 4;
}

ty_status_t ty_tensorboard_event_encode_scalars(ty_pb_buffer_t *out, double wall_time,
                                                int64_t step,
                                                const ty_tensorboard_scalar_t *scalars,
                                                size_t count) {
  if (count == 0 || !scalars) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "a scalar event needs at least one value");
  }
  size_t summary_size = 0;
  for (size_t i = 0; i < count; ++i) {
    const char *tag = scalars[i].tag;
    if (!tag || !*tag) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "scalar %zu of step %lld has no tag", i,
                            (long long)step);
    }
    size_t len = strlen(tag);
    if (!ty_tb_is_utf8((const uint8_t *)tag, len)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "scalar tag '%s' is not valid UTF-8 (TensorBoard tags are "
                            "protobuf strings)", tag);
    }
    for (size_t j = 0; j < i; ++j) {
      if (strcmp(scalars[j].tag, tag) == 0) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "scalar tag '%s' appears twice in one event (step %lld)", tag,
                              (long long)step);
      }
    }
    size_t value_size = ty_tb_value_size(len);
    summary_size += 1 + ty_tb_varint_size(value_size) + value_size;
  }
  /* proto3: fields at their default value are not written. */
  if (wall_time != 0.0) ty_pb_put_double_field(out, TY_TB_EVENT_WALL_TIME, wall_time);
  if (step != 0) ty_pb_put_int64_field(out, TY_TB_EVENT_STEP, step);
  ty_pb_put_key(out, TY_TB_EVENT_SUMMARY, TY_PB_WIRE_LEN);
  ty_pb_put_varint(out, summary_size);
  for (size_t i = 0; i < count; ++i) {
    size_t len = strlen(scalars[i].tag);
    ty_pb_put_key(out, TY_TB_SUMMARY_VALUE, TY_PB_WIRE_LEN);
    ty_pb_put_varint(out, ty_tb_value_size(len));
    ty_pb_put_bytes_field(out, TY_TB_VALUE_TAG, scalars[i].tag, len);
    /* A oneof member: written even when 0. */
    ty_pb_put_float_field(out, TY_TB_VALUE_SIMPLE_VALUE,
                          ty_tensorboard_value_to_float(scalars[i].value));
  }
  return TY_OK;
}

static void ty_tb_put_u32le(ty_pb_buffer_t *out, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  ty_pb_put_raw(out, b, sizeof(b));
}

void ty_tensorboard_record_frame(ty_pb_buffer_t *out, const void *data, size_t size) {
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = (uint8_t)((uint64_t)size >> (8 * i));
  ty_pb_put_raw(out, length, sizeof(length));
  ty_tb_put_u32le(out, ty_crc32c_mask(ty_crc32c_compute(length, sizeof(length))));
  ty_pb_put_raw(out, data, size);
  ty_tb_put_u32le(out, ty_crc32c_mask(ty_crc32c_compute(data, size)));
}

/* ---- the writer -------------------------------------------------------- */

/* Writes writer->record at the end of the file. On failure cuts the file
 * back to its last complete record, so readers never meet a torn one. */
static ty_status_t ty_tb_write_record(ty_tensorboard_writer_t *writer) {
  TY_RETURN_IF_ERROR(ty_pb_buffer_status(&writer->event, "a TensorBoard event"));
  TY_RETURN_IF_ERROR(ty_pb_buffer_status(&writer->record, "a TensorBoard event"));
  const uint8_t *p = writer->record.data;
  size_t left = writer->record.size;
  uint64_t offset = writer->size;
  while (left > 0) {
    ssize_t n = pwrite(writer->fd, p, left, (off_t)offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ty_status_t status = ty_status_from_errno(err, "cannot write %s", writer->path);
      if (offset != writer->size && ftruncate(writer->fd, (off_t)writer->size) != 0) {
        status = ty_status_annotate(
            status, "and cannot cut the partial event off again (the file ends torn)");
      }
      return status;
    }
    p += n;
    left -= (size_t)n;
    offset += (uint64_t)n;
  }
  writer->size = offset;
  return TY_OK;
}

static ty_status_t ty_tb_write_event(ty_tensorboard_writer_t *writer) {
  ty_pb_buffer_reset(&writer->record);
  ty_tensorboard_record_frame(&writer->record, writer->event.data, writer->event.size);
  return ty_tb_write_record(writer);
}

/* Creates the event file with a name no one else has: O_EXCL, and the next
 * counter value when a file of that name exists. */
static ty_status_t ty_tb_create_file(const char *logdir, ty_tensorboard_writer_t *writer) {
  char host[256];
  if (gethostname(host, sizeof(host)) != 0 || !host[0]) {
    snprintf(host, sizeof(host), "localhost");
  }
  host[sizeof(host) - 1] = '\0';
  for (char *c = host; *c; ++c) {
    if (*c == '/') *c = '_';
  }
  size_t dir_len = strlen(logdir);
  while (dir_len > 1 && logdir[dir_len - 1] == '/') --dir_len;
  size_t cap = dir_len + strlen(host) + 96;
  writer->path = malloc(cap);
  if (!writer->path) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (int attempt = 0; attempt < TY_TB_NAME_TRIES; ++attempt) {
    unsigned counter = atomic_fetch_add(&ty_tb_file_counter, 1u);
    snprintf(writer->path, cap, "%.*s/events.out.tfevents.%010lld.%s.%ld.%u", (int)dir_len,
             logdir, (long long)time(NULL), host, (long)getpid(), counter);
    writer->fd = open(writer->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (writer->fd >= 0) return TY_OK;
    if (errno != EEXIST) {
      return ty_status_from_errno(errno, "cannot create TensorBoard event file %s",
                                     writer->path);
    }
  }
  return ty_status_make(TY_CODE_ALREADY_EXISTS,
                        "cannot find a free event file name in %s (last tried %s)", logdir,
                        writer->path);
}

static void ty_tb_writer_free(ty_tensorboard_writer_t *writer) {
  ty_pb_buffer_deinit(&writer->event);
  ty_pb_buffer_deinit(&writer->record);
  free(writer->path);
  free(writer);
}

ty_status_t ty_tensorboard_writer_open(const char *logdir,
                                       ty_tensorboard_writer_t **out_writer) {
  if (!out_writer) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "out_writer is NULL");
  *out_writer = NULL;
  if (!logdir || !*logdir) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "empty TensorBoard log folder name");
  }
  TY_RETURN_IF_ERROR(ty_metrics_dir_create(logdir));
  ty_tensorboard_writer_t *writer = calloc(1, sizeof(*writer));
  if (!writer) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  writer->fd = -1;
  ty_pb_buffer_init(&writer->event);
  ty_pb_buffer_init(&writer->record);
  ty_status_t status = ty_tb_create_file(logdir, writer);
  if (!status) {
    ty_tensorboard_event_encode_version(&writer->event, ty_tensorboard_now());
    status = ty_tb_write_event(writer);
    if (status) {
      close(writer->fd);
      writer->fd = -1;
      unlink(writer->path);
    }
  }
  if (status) {
    if (writer->fd >= 0) close(writer->fd);
    ty_tb_writer_free(writer);
    return status;
  }
  *out_writer = writer;
  return TY_OK;
}

const char *ty_tensorboard_writer_path(const ty_tensorboard_writer_t *writer) {
  return writer->path;
}

ty_status_t ty_tensorboard_writer_add_scalars(ty_tensorboard_writer_t *writer, int64_t step,
                                              const ty_tensorboard_scalar_t *scalars,
                                              size_t count, double wall_time) {
  ty_pb_buffer_reset(&writer->event);
  ty_status_t status =
      ty_tensorboard_event_encode_scalars(&writer->event, wall_time, step, scalars, count);
  if (status) return ty_status_annotate(status, "%s", writer->path);
  return ty_tb_write_event(writer);
}

ty_status_t ty_tensorboard_writer_add_scalar(ty_tensorboard_writer_t *writer, const char *tag,
                                             int64_t step, double value, double wall_time) {
  ty_tensorboard_scalar_t scalar = {.tag = tag, .value = value};
  return ty_tensorboard_writer_add_scalars(writer, step, &scalar, 1, wall_time);
}

ty_status_t ty_tensorboard_writer_flush(ty_tensorboard_writer_t *writer) {
  if (fsync(writer->fd) != 0 && errno != EINVAL) {
    return ty_status_from_errno(errno, "cannot sync %s", writer->path);
  }
  return TY_OK;
}

ty_status_t ty_tensorboard_writer_close(ty_tensorboard_writer_t *writer) {
  if (!writer) return TY_OK;
  ty_status_t status = ty_tensorboard_writer_flush(writer);
  if (close(writer->fd) != 0 && !status) {
    status = ty_status_from_errno(errno, "cannot close %s", writer->path);
  }
  ty_tb_writer_free(writer);
  return status;
}
