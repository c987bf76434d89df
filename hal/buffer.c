/* Buffers: host-side bookkeeping and the bounds checks every plugin relies
 * on (plugins may assume ranges are valid). */
#include "hal/buffer.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Atomic uint64_t ty_writes, ty_write_bytes, ty_reads, ty_read_bytes,
    ty_copies, ty_copy_bytes;

ty_transfer_stats_t ty_buffer_transfer_stats(void) {
  ty_transfer_stats_t s = {
      .writes = atomic_load(&ty_writes),
      .write_bytes = atomic_load(&ty_write_bytes),
      .reads = atomic_load(&ty_reads),
      .read_bytes = atomic_load(&ty_read_bytes),
      .copies = atomic_load(&ty_copies),
      .copy_bytes = atomic_load(&ty_copy_bytes),
  };
  return s;
}

struct ty_buffer_t {
  ty_device_t *device;
  ty_abi_buffer_t *handle;
  uint64_t size;
};

ty_status_t ty_buffer_alloc(ty_device_t *device, uint64_t size_bytes,
                            ty_buffer_t **out_buffer) {
  return ty_buffer_alloc_flags(device, size_bytes, 0, out_buffer);
}

ty_status_t ty_buffer_alloc_flags(ty_device_t *device, uint64_t size_bytes, uint32_t flags,
                                  ty_buffer_t **out_buffer) {
  *out_buffer = NULL;
  ty_backend_t *backend = ty_device_backend(device);
  ty_abi_status_t (*alloc)(ty_abi_device_t *, const ty_abi_buffer_alloc_args_t *,
                           ty_abi_buffer_t **) =
      TY_BACKEND_ENTRY(backend, buffer_alloc);
  if (!alloc || !TY_BACKEND_ENTRY(backend, buffer_free)) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' does not implement buffers "
                          "(buffer_alloc/buffer_free)",
                          ty_backend_name(backend));
  }
  ty_buffer_t *b = calloc(1, sizeof(*b));
  if (!b) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "out of host memory for a buffer record");
  }
  uint32_t major = 0, minor = 0;
  ty_backend_abi_version(backend, &major, &minor);
  if (flags && minor < 3) {
    free(b);
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' (ABI %u.%u) has no pinned host buffers (ABI 1.3)",
                          ty_backend_name(backend), major, minor);
  }
  ty_abi_buffer_alloc_args_t args = {
      .struct_size = sizeof(args),
      .size_bytes = size_bytes,
      .alignment = 0,
      .flags = flags,
  };
  ty_status_t s =
      ty_status_from_abi(alloc(ty_device_handle(device), &args, &b->handle));
  if (s) {
    free(b);
    return ty_status_annotate(s, "allocating %" PRIu64 " bytes on %s",
                              size_bytes, ty_device_label(device));
  }
  b->device = device;
  b->size = size_bytes;
  *out_buffer = b;
  return TY_OK;
}

void ty_buffer_free(ty_buffer_t *b) {
  if (!b) return;
  void (*free_fn)(ty_abi_device_t *, ty_abi_buffer_t *) =
      TY_BACKEND_ENTRY(ty_device_backend(b->device), buffer_free);
  free_fn(ty_device_handle(b->device), b->handle);
  free(b);
}

uint64_t ty_buffer_size(const ty_buffer_t *b) { return b->size; }
ty_abi_buffer_t *ty_buffer_handle(const ty_buffer_t *b) { return b->handle; }
ty_device_t *ty_buffer_device(const ty_buffer_t *b) { return b->device; }

static ty_status_t ty_buffer_check_range(const ty_buffer_t *b, const char *op,
                                         uint64_t offset, uint64_t size) {
  if (offset > b->size || size > b->size - offset) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s of %" PRIu64 " bytes at offset %" PRIu64
                          " is out of range for a %" PRIu64 "-byte buffer on %s",
                          op, size, offset, b->size, ty_device_label(b->device));
  }
  return TY_OK;
}

#define TY_BUFFER_ENTRY_OR_RETURN(var, b, field)                              \
  do {                                                                        \
    (var) = TY_BACKEND_ENTRY(ty_device_backend((b)->device), field);          \
    if (!(var)) {                                                             \
      return ty_status_make(TY_CODE_UNIMPLEMENTED,                            \
                            "backend '%s' does not implement " #field,        \
                            ty_backend_name(ty_device_backend((b)->device))); \
    }                                                                         \
  } while (0)

ty_status_t ty_buffer_write(ty_buffer_t *b, uint64_t offset, const void *src,
                            uint64_t size) {
  TY_RETURN_IF_ERROR(ty_buffer_check_range(b, "write", offset, size));
  if (size == 0) return TY_OK;
  if (!src) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "write from a NULL pointer");
  }
  ty_abi_status_t (*write)(ty_abi_device_t *, ty_abi_buffer_t *, uint64_t,
                           const void *, uint64_t);
  TY_BUFFER_ENTRY_OR_RETURN(write, b, buffer_write);
  atomic_fetch_add(&ty_writes, 1);
  atomic_fetch_add(&ty_write_bytes, size);
  return ty_status_annotate(
      ty_status_from_abi(write(ty_device_handle(b->device), b->handle, offset,
                               src, size)),
      "writing %" PRIu64 " bytes to a buffer on %s", size,
      ty_device_label(b->device));
}

ty_status_t ty_buffer_read(ty_buffer_t *b, uint64_t offset, void *dst,
                           uint64_t size) {
  TY_RETURN_IF_ERROR(ty_buffer_check_range(b, "read", offset, size));
  if (size == 0) return TY_OK;
  if (!dst) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "read into a NULL pointer");
  }
  ty_abi_status_t (*read)(ty_abi_device_t *, ty_abi_buffer_t *, uint64_t, void *,
                          uint64_t);
  TY_BUFFER_ENTRY_OR_RETURN(read, b, buffer_read);
  atomic_fetch_add(&ty_reads, 1);
  atomic_fetch_add(&ty_read_bytes, size);
  return ty_status_annotate(
      ty_status_from_abi(read(ty_device_handle(b->device), b->handle, offset,
                              dst, size)),
      "reading %" PRIu64 " bytes from a buffer on %s", size,
      ty_device_label(b->device));
}

ty_status_t ty_buffer_copy(ty_buffer_t *src, uint64_t src_offset,
                           ty_buffer_t *dst, uint64_t dst_offset,
                           uint64_t size) {
  if (src->device != dst->device) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "copy between buffers of different devices (%s and "
                          "%s); read to the host and write instead",
                          ty_device_label(src->device),
                          ty_device_label(dst->device));
  }
  TY_RETURN_IF_ERROR(ty_buffer_check_range(src, "copy source", src_offset, size));
  TY_RETURN_IF_ERROR(
      ty_buffer_check_range(dst, "copy destination", dst_offset, size));
  if (src == dst && size > 0 && src_offset < dst_offset + size &&
      dst_offset < src_offset + size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "copy ranges overlap within one buffer (source "
                          "offset %" PRIu64 ", destination offset %" PRIu64
                          ", %" PRIu64 " bytes)",
                          src_offset, dst_offset, size);
  }
  if (size == 0) return TY_OK;
  ty_abi_status_t (*copy)(ty_abi_device_t *, ty_abi_buffer_t *, uint64_t,
                          ty_abi_buffer_t *, uint64_t, uint64_t);
  TY_BUFFER_ENTRY_OR_RETURN(copy, src, buffer_copy);
  atomic_fetch_add(&ty_copies, 1);
  atomic_fetch_add(&ty_copy_bytes, size);
  return ty_status_annotate(
      ty_status_from_abi(copy(ty_device_handle(src->device), src->handle,
                              src_offset, dst->handle, dst_offset, size)),
      "copying %" PRIu64 " bytes on %s", size, ty_device_label(src->device));
}
