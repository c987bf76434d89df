/* The few pieces of the protobuf wire format the TensorBoard writer needs,
 * encoded by hand into a growable byte buffer: varints, field keys, fixed64
 * doubles, fixed32 floats, length-delimited bytes. protobuf-c would be a
 * heavy dependency for three message types (docs/design-notes.md).
 *
 * Ownership: a buffer owns its bytes; ty_pb_buffer_deinit frees them.
 * Threading: a buffer is used by one thread at a time.
 * Errors: the put functions never fail visibly; running out of memory marks
 * the buffer failed (later puts are no-ops) and ty_pb_buffer_status reports
 * it once, at the end of an encoding. */
#ifndef TY_APPS_TRAINYARD_METRICS_PROTOBUF_H_
#define TY_APPS_TRAINYARD_METRICS_PROTOBUF_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

/* Wire types of a field key. */
enum {
  TY_PB_WIRE_VARINT = 0,
  TY_PB_WIRE_FIXED64 = 1,
  TY_PB_WIRE_LEN = 2,
  TY_PB_WIRE_FIXED32 = 5,
};

/* The most bytes a varint takes (a 64-bit value, negative int64 included). */
#define TY_PB_VARINT_MAX_BYTES 10

typedef struct ty_pb_buffer_t {
  uint8_t *data;
  size_t size;
  size_t capacity;
  bool failed; /* an allocation failed; the contents are incomplete */
} ty_pb_buffer_t;

/* An empty buffer (no allocation until the first put). */
void ty_pb_buffer_init(ty_pb_buffer_t *buffer);
/* Frees the bytes; the buffer is empty and usable again. */
void ty_pb_buffer_deinit(ty_pb_buffer_t *buffer);
/* Empties the buffer, keeping its memory and clearing a failure. */
void ty_pb_buffer_reset(ty_pb_buffer_t *buffer);
/* OK, or RESOURCE_EXHAUSTED naming `what` when a put ran out of memory. */
ty_status_t ty_pb_buffer_status(const ty_pb_buffer_t *buffer, const char *what) TY_MUST_USE;

/* Writes the varint of `value` into out[0..] and returns its length (1 to
 * TY_PB_VARINT_MAX_BYTES). */
size_t ty_pb_varint_encode(uint64_t value, uint8_t out[TY_PB_VARINT_MAX_BYTES]);

void ty_pb_put_raw(ty_pb_buffer_t *buffer, const void *data, size_t size);
void ty_pb_put_varint(ty_pb_buffer_t *buffer, uint64_t value);
/* The key of field `field` with `wire_type`: varint(field << 3 | wire_type). */
void ty_pb_put_key(ty_pb_buffer_t *buffer, uint32_t field, uint32_t wire_type);

/* Whole fields (key + value). int64 is two's complement in a varint (ten
 * bytes when negative), as protobuf's int64 type; double and float are
 * little-endian IEEE 754; bytes (and strings) are a varint length and the
 * bytes. */
void ty_pb_put_int64_field(ty_pb_buffer_t *buffer, uint32_t field, int64_t value);
void ty_pb_put_double_field(ty_pb_buffer_t *buffer, uint32_t field, double value);
void ty_pb_put_float_field(ty_pb_buffer_t *buffer, uint32_t field, float value);
void ty_pb_put_bytes_field(ty_pb_buffer_t *buffer, uint32_t field, const void *data,
                           size_t size);

#endif /* TY_APPS_TRAINYARD_METRICS_PROTOBUF_H_ */
