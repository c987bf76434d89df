/* Buffer entries for a device whose memory is ordinary host memory, ready to
 * put in a plugin's table as they are:
 *
 *   .buffer_alloc = ty_host_buffer_alloc,  .buffer_free = ty_host_buffer_free,
 *   .buffer_write = ty_host_buffer_write,  .buffer_read = ty_host_buffer_read,
 *   .buffer_copy  = ty_host_buffer_copy,
 *
 * and ty_host_buffer_view for ty_host_executor_run. With them a host-memory
 * plugin (an emulator, a new backend during bring-up) writes kernels, not
 * plumbing. They define the plugin's struct ty_abi_buffer_s, so a plugin
 * that uses them must not define its own. Allocations larger than the
 * host's physical memory fail with RESOURCE_EXHAUSTED up front (Linux
 * overcommit would otherwise let them succeed and kill the process on first
 * touch); pinned host buffers (ABI 1.3 TY_ABI_BUFFER_HOST, optimizer offload)
 * are refused as UNIMPLEMENTED, since they would move nothing. The bytes
 * are counted by the plugin's host meter (host_meter.h). Errors are made with ty_plugin_error: call ty_plugin_status_init
 * in backend_create. Buffer calls on different buffers are thread-safe.
 * Part of the backend support library; depends only on the SDK headers. */
#ifndef TY_BACKENDS_COMMON_HOST_BUFFERS_H_
#define TY_BACKENDS_COMMON_HOST_BUFFERS_H_

#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The host's physical memory in bytes (0 when unknown): what device_info
 * should report as memory_bytes for such a device. */
uint64_t ty_host_memory_bytes(void);

ty_abi_status_t ty_host_buffer_alloc(ty_abi_device_t *device,
                                     const ty_abi_buffer_alloc_args_t *args,
                                     ty_abi_buffer_t **out_buffer);
void ty_host_buffer_free(ty_abi_device_t *device, ty_abi_buffer_t *buffer);
ty_abi_status_t ty_host_buffer_write(ty_abi_device_t *device, ty_abi_buffer_t *buffer,
                                     uint64_t offset, const void *src, uint64_t size);
ty_abi_status_t ty_host_buffer_read(ty_abi_device_t *device, ty_abi_buffer_t *buffer,
                                    uint64_t offset, void *dst, uint64_t size);
ty_abi_status_t ty_host_buffer_copy(ty_abi_device_t *device, ty_abi_buffer_t *src,
                                    uint64_t src_offset, ty_abi_buffer_t *dst,
                                    uint64_t dst_offset, uint64_t size);
/* A buffer's bytes and size (the ty_host_buffer_view_t of host_executor.h). */
void ty_host_buffer_view(ty_abi_buffer_t *buffer, unsigned char **out_data,
                         uint64_t *out_size);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_HOST_BUFFERS_H_ */
