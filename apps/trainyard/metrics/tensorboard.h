/* TensorBoard event files: scalars (loss, learning rate, ...) that
 * `tensorboard --logdir DIR` plots while training runs.
 *
 * A writer creates `events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>`
 * in its log folder (n counts the writers of this process) and appends
 * TFRecord-framed `Event` protobufs: first one with file_version
 * "brain.Event:2", then one per call of add_scalar / add_scalars. The
 * encoding is byte for byte what TensorBoard's own Python writer produces
 * for the same events (proto3: zero step and wall time are left out). Each
 * event goes to the file in one write(2), so a reader sees every step as
 * soon as the call returns. The layout is in docs/formats.md.
 *
 * Threading: a writer is used by one thread at a time; different writers
 * are independent (creating them from several threads at once is safe).
 * Errors: statuses that name the file or folder (NOT_FOUND,
 * PERMISSION_DENIED, RESOURCE_EXHAUSTED for a full disk, ...); nothing is
 * printed. A failed add leaves the file as it was before the call (the
 * partial record is cut off again), so the file stays readable and the
 * writer usable. */
#ifndef TY_APPS_TRAINYARD_METRICS_TENSORBOARD_H_
#define TY_APPS_TRAINYARD_METRICS_TENSORBOARD_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "metrics/protobuf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_tensorboard_writer_t ty_tensorboard_writer_t;

/* One value of add_scalars. `tag` is borrowed for the call. */
typedef struct ty_tensorboard_scalar_t {
  const char *tag;
  double value;
} ty_tensorboard_scalar_t;

/* The current time as TensorBoard's wall_time: seconds since the Unix
 * epoch, with the fraction. Thread-safe. */
double ty_tensorboard_now(void);

/* Creates `logdir` (and its parents) when missing, creates a new event file
 * in it and writes the file_version event. On success *out_writer is owned
 * by the caller (release with ty_tensorboard_writer_close). On error
 * *out_writer is NULL and no file is left behind. */
ty_status_t ty_tensorboard_writer_open(const char *logdir,
                                       ty_tensorboard_writer_t **out_writer) TY_MUST_USE;

/* The event file's path. Owned by the writer, valid until it is closed. */
const char *ty_tensorboard_writer_path(const ty_tensorboard_writer_t *writer);

/* Appends one event with one scalar. `value` is stored as a 32-bit float
 * (TensorBoard's simple_value); finite doubles beyond the float range
 * become +-inf, NaN stays NaN. `wall_time` is seconds since the epoch (see
 * ty_tensorboard_now). INVALID_ARGUMENT for an empty tag or one that is
 * not UTF-8. */
ty_status_t ty_tensorboard_writer_add_scalar(ty_tensorboard_writer_t *writer, const char *tag,
                                             int64_t step, double value,
                                             double wall_time) TY_MUST_USE;

/* Appends one event with `count` (>= 1) scalars at the same step, e.g. loss,
 * lr and grad_norm together. Tags must be distinct (INVALID_ARGUMENT). */
ty_status_t ty_tensorboard_writer_add_scalars(ty_tensorboard_writer_t *writer, int64_t step,
                                              const ty_tensorboard_scalar_t *scalars,
                                              size_t count, double wall_time) TY_MUST_USE;

/* Makes what was written durable (fsync). Every add is already visible to
 * readers without it. */
ty_status_t ty_tensorboard_writer_flush(ty_tensorboard_writer_t *writer) TY_MUST_USE;

/* Syncs and closes the file and frees the writer, also when the sync
 * fails (the status says so). NULL is a no-op. */
ty_status_t ty_tensorboard_writer_close(ty_tensorboard_writer_t *writer);

/* ---- Encoding, exposed for tests and for writers of other streams -------- */

/* Appends to `out` the Event {wall_time, file_version: "brain.Event:2"}. */
void ty_tensorboard_event_encode_version(ty_pb_buffer_t *out, double wall_time);

/* Appends to `out` the Event {wall_time, step, summary {value {tag,
 * simple_value}}...}. Checks the tags as add_scalars does; on error `out`
 * is unchanged. */
ty_status_t ty_tensorboard_event_encode_scalars(ty_pb_buffer_t *out, double wall_time,
                                                int64_t step,
                                                const ty_tensorboard_scalar_t *scalars,
                                                size_t count) TY_MUST_USE;

/* Appends one TFRecord: uint64 little-endian length, uint32 masked CRC-32C
 * of those 8 bytes, the data, uint32 masked CRC-32C of the data. */
void ty_tensorboard_record_frame(ty_pb_buffer_t *out, const void *data, size_t size);

/* The float that `value` is stored as (see add_scalar). */
float ty_tensorboard_value_to_float(double value);

#ifdef __cplusplus
}
#endif

#endif /* TY_APPS_TRAINYARD_METRICS_TENSORBOARD_H_ */
