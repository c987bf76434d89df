/* Buffers: device memory with bounds-checked host transfers and copies. */
#ifndef TY_HAL_BUFFER_H_
#define TY_HAL_BUFFER_H_

#include <stdint.h>

#include "hal/device.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_buffer_t ty_buffer_t;

/* Allocates `size_bytes` on `device` (0 is allowed: an empty buffer).
 * RESOURCE_EXHAUSTED when the device cannot hold it; UNIMPLEMENTED when the
 * backend has no buffers. The caller owns the buffer (ty_buffer_free) and
 * frees it before closing the device. */
ty_status_t ty_buffer_alloc(ty_device_t *device, uint64_t size_bytes,
                            ty_buffer_t **out_buffer);
/* The same with TY_ABI_BUFFER_* flags (ABI 1.3; TY_ABI_BUFFER_HOST: pinned
 * host memory the device reaches). UNIMPLEMENTED for a plugin older than
 * 1.3 or one without such memory. */
ty_status_t ty_buffer_alloc_flags(ty_device_t *device, uint64_t size_bytes, uint32_t flags,
                                  ty_buffer_t **out_buffer);
void ty_buffer_free(ty_buffer_t *buffer);

uint64_t ty_buffer_size(const ty_buffer_t *buffer);
/* The plugin's handle, for passing buffers to plugin entries (bindings). */
ty_abi_buffer_t *ty_buffer_handle(const ty_buffer_t *buffer);
ty_device_t *ty_buffer_device(const ty_buffer_t *buffer);

/* Host -> device. INVALID_ARGUMENT when [offset, offset+size) is not inside
 * the buffer or src is NULL with size > 0; nothing is written then.
 * Different buffers may be used from different threads at once. */
ty_status_t ty_buffer_write(ty_buffer_t *buffer, uint64_t offset,
                            const void *src, uint64_t size);
/* Device -> host. Same checks as ty_buffer_write; nothing is read on error. */
ty_status_t ty_buffer_read(ty_buffer_t *buffer, uint64_t offset, void *dst,
                           uint64_t size);
/* Device-side copy between buffers of the same device. INVALID_ARGUMENT for
 * ranges out of bounds, buffers of different devices, or overlapping ranges
 * within one buffer. */
ty_status_t ty_buffer_copy(ty_buffer_t *src, uint64_t src_offset,
                           ty_buffer_t *dst, uint64_t dst_offset,
                           uint64_t size);

/* Process-wide counts of host<->device transfers made through this API
 * (every write, read and device copy of every buffer). Tests use them to
 * prove that running a session moves nothing but bound inputs and reads.
 * Thread-safe (atomic). */
typedef struct ty_transfer_stats_t {
  uint64_t writes, write_bytes; /* host -> device */
  uint64_t reads, read_bytes;   /* device -> host */
  uint64_t copies, copy_bytes;  /* device -> device */
} ty_transfer_stats_t;

ty_transfer_stats_t ty_buffer_transfer_stats(void);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_BUFFER_H_ */
