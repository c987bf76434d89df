/* Device communicators (comm.h) over a plugin's ABI 1.4 comm_* entries. */
#include "hal/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/registry.h"

struct ty_comm_t {
  ty_backend_t *backend;
  ty_abi_comm_t *handle;
  char label[80];
};

static ty_status_t ty_comm_missing(const ty_device_t *device) {
  return ty_status_make(TY_CODE_UNIMPLEMENTED,
                        "backend '%s' has no collectives of its own (ABI 1.4 comm_* entries)",
                        ty_backend_name(ty_device_backend(device)));
}

ty_status_t ty_comm_unique_id(ty_device_t *device, ty_abi_comm_id_t *out_id) {
  ty_backend_t *b = ty_device_backend(device);
  if (!ty_backend_has_collectives(b)) return ty_comm_missing(device);
  memset(out_id, 0, sizeof(*out_id));
  out_id->struct_size = sizeof(*out_id);
  ty_status_t s = ty_status_from_abi(
      ty_backend_api(b)->comm_unique_id(ty_backend_instance(b), out_id));
  if (!s && out_id->size > TY_ABI_COMM_ID_MAX) {
    s = ty_status_make(TY_CODE_INTERNAL, "comm_unique_id gave %u bytes (at most %d)",
                       out_id->size, TY_ABI_COMM_ID_MAX);
  }
  return ty_status_annotate(s, "%s: comm_unique_id", ty_device_label(device));
}

ty_status_t ty_comm_create(ty_device_t *device, const ty_abi_comm_id_t *id, uint32_t rank,
                           uint32_t size, ty_comm_t **out_comm) {
  *out_comm = NULL;
  ty_backend_t *b = ty_device_backend(device);
  if (!ty_backend_has_collectives(b)) return ty_comm_missing(device);
  if (rank >= size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "rank %u of a communicator of %u", rank,
                          size);
  }
  ty_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  c->backend = b;
  snprintf(c->label, sizeof(c->label), "%s", ty_device_label(device));
  ty_abi_comm_create_args_t args = {.struct_size = sizeof(args), .id = id, .rank = rank,
                                    .size = size};
  ty_status_t s = ty_status_from_abi(
      ty_backend_api(b)->comm_create(ty_device_handle(device), &args, &c->handle));
  if (s) {
    free(c);
    return ty_status_annotate(s, "%s: comm_create (rank %u of %u)", ty_device_label(device),
                              rank, size);
  }
  *out_comm = c;
  return TY_OK;
}

void ty_comm_destroy(ty_comm_t *comm) {
  if (!comm) return;
  ty_backend_api(comm->backend)->comm_destroy(comm->handle);
  free(comm);
}

/* An in-place collective on `count` elements at `offset` of `buffer`. */
static ty_status_t ty_comm_in_place(ty_comm_t *comm, bool broadcast, ty_buffer_t *buffer,
                                    uint64_t offset, uint64_t count, ty_dtype_t dtype,
                                    uint32_t op_or_root, ty_abi_executable_t *executable,
                                    bool more) {
  const char *what = broadcast ? "broadcast" : "all-reduce";
  if (offset + count * ty_dtype_size(dtype) > ty_buffer_size(buffer)) {
    return ty_status_make(TY_CODE_OUT_OF_RANGE, "%s: %s of %llu elements at byte %llu "
                          "past the end of a %llu-byte buffer",
                          comm->label, what, (unsigned long long)count,
                          (unsigned long long)offset, (unsigned long long)ty_buffer_size(buffer));
  }
  ty_abi_collective_args_t args = {
      .struct_size = sizeof(args), .dtype = dtype, .count = count,
      .op = broadcast ? 0 : op_or_root, .root = broadcast ? op_or_root : 0,
      .send = ty_buffer_handle(buffer), .send_offset = offset,
      .recv = ty_buffer_handle(buffer), .recv_offset = offset, .executable = executable,
      .flags = more ? TY_ABI_COLLECTIVE_MORE : 0};
  const ty_backend_api_t *api = ty_backend_api(comm->backend);
  ty_status_t s = ty_status_from_abi(broadcast ? api->comm_broadcast(comm->handle, &args)
                                               : api->comm_all_reduce(comm->handle, &args));
  return ty_status_annotate(s, "%s: comm_%s", comm->label,
                            broadcast ? "broadcast" : "all_reduce");
}

ty_status_t ty_comm_all_reduce(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset,
                               uint64_t count, ty_dtype_t dtype, ty_abi_reduce_op_t op,
                               ty_abi_executable_t *executable, bool more) {
  return ty_comm_in_place(comm, false, buffer, offset, count, dtype, (uint32_t)op, executable,
                          more);
}

ty_status_t ty_comm_broadcast(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset,
                              uint64_t count, ty_dtype_t dtype, uint32_t root,
                              ty_abi_executable_t *executable, bool more) {
  return ty_comm_in_place(comm, true, buffer, offset, count, dtype, root, executable, more);
}
