/* Host-memory buffers for plugins (see host_buffers.h). The host has checked
 * every offset and size against the buffer before a call, so these only move
 * bytes. */
#include "backends/common/host_buffers.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/common/host_meter.h"
#include "backends/common/plugin_status.h"

struct ty_abi_buffer_s {
  uint64_t size;
  unsigned char *data; /* NULL for a zero-size buffer */
};

uint64_t ty_host_memory_bytes(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? (uint64_t)pages * (uint64_t)page_size : 0;
}

ty_abi_status_t ty_host_buffer_alloc(ty_abi_device_t *device,
                                     const ty_abi_buffer_alloc_args_t *args,
                                     ty_abi_buffer_t **out_buffer) {
  (void)device;
  *out_buffer = NULL;
  if (TY_ABI_HAS_FIELD(args, ty_abi_buffer_alloc_args_t, flags) &&
      (args->flags & TY_ABI_BUFFER_HOST)) {
    return ty_plugin_error(TY_CODE_UNIMPLEMENTED,
                           "no pinned host buffers: this device's memory is host memory "
                           "already, so an offload (--offload optimizer) would move nothing");
  }
  uint64_t limit = ty_host_memory_bytes();
  if ((limit && args->size_bytes > limit) || args->size_bytes > SIZE_MAX) {
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED,
                           "cannot allocate %llu bytes of host memory; the host has %llu",
                           (unsigned long long)args->size_bytes, (unsigned long long)limit);
  }
  ty_abi_buffer_t *b = calloc(1, sizeof(*b));
  if (!b) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a buffer record");
  b->size = args->size_bytes;
  /* Counted by the plugin's host meter (host_meter.h): buffers are device
   * memory, for ABI 1.3 device_memory. */
  if (b->size && !(b->data = ty_host_mem_alloc(b->size))) {
    free(b);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory allocating %llu bytes",
                           (unsigned long long)args->size_bytes);
  }
  *out_buffer = b;
  return NULL;
}

void ty_host_buffer_free(ty_abi_device_t *device, ty_abi_buffer_t *buffer) {
  (void)device;
  if (!buffer) return;
  ty_host_mem_free(buffer->data);
  free(buffer);
}

ty_abi_status_t ty_host_buffer_write(ty_abi_device_t *device, ty_abi_buffer_t *buffer,
                                     uint64_t offset, const void *src, uint64_t size) {
  (void)device;
  memcpy(buffer->data + offset, src, (size_t)size);
  return NULL;
}

ty_abi_status_t ty_host_buffer_read(ty_abi_device_t *device, ty_abi_buffer_t *buffer,
                                    uint64_t offset, void *dst, uint64_t size) {
  (void)device;
  memcpy(dst, buffer->data + offset, (size_t)size);
  return NULL;
}

ty_abi_status_t ty_host_buffer_copy(ty_abi_device_t *device, ty_abi_buffer_t *src,
                                    uint64_t src_offset, ty_abi_buffer_t *dst,
                                    uint64_t dst_offset, uint64_t size) {
  (void)device;
  memcpy(dst->data + dst_offset, src->data + src_offset, (size_t)size);
  return NULL;
}

void ty_host_buffer_view(ty_abi_buffer_t *buffer, unsigned char **out_data,
                         uint64_t *out_size) {
  *out_data = buffer->data;
  *out_size = buffer->size;
}
