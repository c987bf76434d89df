/* Protobuf wire-format encoding (see protobuf.h). Byte order is written out
 * explicitly so that the output is the same on any host. */
#include "metrics/protobuf.h"

#include <stdlib.h>
#include <string.h>

void ty_pb_buffer_init(ty_pb_buffer_t *buffer) {
  buffer->data = NULL;
  buffer->size = 0;
  buffer->capacity = 0;
  buffer->failed = false;
}

void ty_pb_buffer_deinit(ty_pb_buffer_t *buffer) {
  free(buffer->data);
  ty_pb_buffer_init(buffer);
}

void ty_pb_buffer_reset(ty_pb_buffer_t *buffer) {
  buffer->size = 0;
  buffer->failed = false;
}

ty_status_t ty_pb_buffer_status(const ty_pb_buffer_t *buffer, const char *what) {
  if (!buffer->failed) return TY_OK;
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory encoding %s", what);
}

/* Makes room for `extra` more bytes; false (and the buffer failed) if not. */
static bool ty_pb_buffer_reserve(ty_pb_buffer_t *buffer, size_t extra) {
  if (buffer->failed) return false;
  if (extra <= buffer->capacity - buffer->size) return true;
  if (extra > SIZE_MAX / 2 - buffer->size) {
    buffer->failed = true;
    return false;
  }
  size_t capacity = buffer->capacity ? buffer->capacity : 64;
  while (capacity - buffer->size < extra) capacity *= 2;
  uint8_t *grown = realloc(buffer->data, capacity);
  if (!grown) {
    buffer->failed = true;
    return false;
  }
  buffer->data = grown;
  buffer->capacity = capacity;
  return true;
}

size_t ty_pb_varint_encode(uint64_t value, uint8_t out[TY_PB_VARINT_MAX_BYTES]) {
  size_t n = 0;
  while (value >= 0x80u) {
    out[n++] = (uint8_t)(value | 0x80u);
    value >>= 7;
  }
  out[n++] = (uint8_t)value;
  return n;
}

void ty_pb_put_raw(ty_pb_buffer_t *buffer, const void *data, size_t size) {
  if (size == 0 || !ty_pb_buffer_reserve(buffer, size)) return;
  memcpy(buffer->data + buffer->size, data, size);
  buffer->size += size;
}

void ty_pb_put_varint(ty_pb_buffer_t *buffer, uint64_t value) {
  uint8_t bytes[TY_PB_VARINT_MAX_BYTES];
  ty_pb_put_raw(buffer, bytes, ty_pb_varint_encode(value, bytes));
}

void ty_pb_put_key(ty_pb_buffer_t *buffer, uint32_t field, uint32_t wire_type) {
  ty_pb_put_varint(buffer, (uint64_t)field << 3 | wire_type);
}

void ty_pb_put_int64_field(ty_pb_buffer_t *buffer, uint32_t field, int64_t value) {
  ty_pb_put_key(buffer, field, TY_PB_WIRE_VARINT);
  ty_pb_put_varint(buffer, (uint64_t)value);
}

void ty_pb_put_double_field(ty_pb_buffer_t *buffer, uint32_t field, double value) {
  uint64_t bits;
  memcpy(&bits, &value, sizeof(bits));
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = (uint8_t)(bits >> (8 * i));
  ty_pb_put_key(buffer, field, TY_PB_WIRE_FIXED64);
  ty_pb_put_raw(buffer, bytes, sizeof(bytes));
}

void ty_pb_put_float_field(ty_pb_buffer_t *buffer, uint32_t field, float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof(bits));
  uint8_t bytes[4];
  for (int i = 0; i < 4; ++i) bytes[i] = (uint8_t)(bits >> (8 * i));
  ty_pb_put_key(buffer, field, TY_PB_WIRE_FIXED32);
  ty_pb_put_raw(buffer, bytes, sizeof(bytes));
}

void ty_pb_put_bytes_field(ty_pb_buffer_t *buffer, uint32_t field, const void *data,
                           size_t size) {
  ty_pb_put_key(buffer, field, TY_PB_WIRE_LEN);
  ty_pb_put_varint(buffer, (uint64_t)size);
  ty_pb_put_raw(buffer, data, size);
}
