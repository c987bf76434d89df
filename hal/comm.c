/* Device communicators (comm.h) over a plugin's ABI 1.4 comm_* entries. */
#include "hal/comm.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "hal/half.h"
#include "hal/registry.h"

struct ty_comm_t {
  ty_backend_t *backend;
  ty_abi_comm_t *handle;
  char label[80];
  char group[16];
  uint32_t rank, size;
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
  return ty_comm_create_group(device, id, rank, size, NULL, out_comm);
}

ty_status_t ty_comm_create_group(ty_device_t *device, const ty_abi_comm_id_t *id, uint32_t rank,
                                 uint32_t size, const char *group, ty_comm_t **out_comm) {
  *out_comm = NULL;
  ty_backend_t *b = ty_device_backend(device);
  if (!ty_backend_has_collectives(b)) return ty_comm_missing(device);
  if (rank >= size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "rank %u of a communicator of %u", rank,
                          size);
  }
  if (group && strcmp(group, "world") == 0) group = NULL;
  uint32_t major = 0, minor = 0;
  ty_backend_abi_version(b, &major, &minor);
  if (group && (major != TY_ABI_MAJOR || minor < 7)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s: a communicator of process group '%s' needs a backend of ABI 1.7 "
                          "(group communicators); backend '%s' speaks ABI %u.%u",
                          ty_device_label(device), group, ty_backend_name(b), major, minor);
  }
  ty_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  c->backend = b;
  snprintf(c->label, sizeof(c->label), "%s", ty_device_label(device));
  snprintf(c->group, sizeof(c->group), "%s", group ? group : "world");
  c->rank = rank;
  c->size = size;
  ty_abi_comm_create_args_t args = {.struct_size = sizeof(args), .id = id, .rank = rank,
                                    .size = size, .group = group};
  ty_status_t s = ty_status_from_abi(
      ty_backend_api(b)->comm_create(ty_device_handle(device), &args, &c->handle));
  if (s) {
    free(c);
    return ty_status_annotate(s, "%s: comm_create (rank %u of %u of group %s)",
                              ty_device_label(device), rank, size, group ? group : "world");
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

/* ---- point to point (ABI 1.8) ---- */

bool ty_comm_has_p2p(const ty_comm_t *comm) {
  return comm && ty_backend_has_p2p(comm->backend);
}

uint32_t ty_comm_rank(const ty_comm_t *comm) { return comm ? comm->rank : 0; }
uint32_t ty_comm_size(const ty_comm_t *comm) { return comm ? comm->size : 1; }

static ty_status_t ty_comm_p2p(ty_comm_t *comm, bool send, ty_buffer_t *buffer, uint64_t offset,
                               uint64_t count, ty_dtype_t dtype, uint32_t peer,
                               ty_abi_executable_t *executable, bool more) {
  const char *what = send ? "send" : "receive";
  const uint64_t bytes = count * ty_dtype_size(dtype);
  if (!comm) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "a point-to-point %s of %llu bytes with rank %u: no device "
                          "communicator of its group was made",
                          what, (unsigned long long)bytes, peer);
  }
  char head[192];
  snprintf(head, sizeof(head), "%s: %s of %llu bytes %s rank %u of group '%s' (rank %u of %u)",
           comm->label, what, (unsigned long long)bytes, send ? "to" : "from", peer,
           comm->group, comm->rank, comm->size);
  if (!ty_backend_has_p2p(comm->backend)) {
    uint32_t major = 0, minor = 0;
    ty_backend_abi_version(comm->backend, &major, &minor);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s: backend '%s' (ABI %u.%u) has no point to point (ABI 1.8 "
                          "comm_send/comm_recv); move the bytes through the host",
                          head, ty_backend_name(comm->backend), major, minor);
  }
  if (peer >= comm->size || peer == comm->rank) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: the peer must be another rank of the "
                          "group (0..%u, not %u)", head, comm->size - 1, comm->rank);
  }
  if (count == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: a count of 0 elements (%s)", head,
                          ty_dtype_name(dtype));
  }
  if (offset > ty_buffer_size(buffer) || bytes > ty_buffer_size(buffer) - offset) {
    return ty_status_make(TY_CODE_OUT_OF_RANGE, "%s: %llu bytes at byte %llu run past the end "
                          "of a %llu-byte buffer", head, (unsigned long long)bytes,
                          (unsigned long long)offset, (unsigned long long)ty_buffer_size(buffer));
  }
  ty_abi_collective_args_t args = {.struct_size = sizeof(args), .dtype = dtype, .count = count,
                                   .root = peer, .executable = executable,
                                   .flags = more ? TY_ABI_COLLECTIVE_MORE : 0};
  if (send) {
    args.send = ty_buffer_handle(buffer);
    args.send_offset = offset;
  } else {
    args.recv = ty_buffer_handle(buffer);
    args.recv_offset = offset;
  }
  const ty_backend_api_t *api = ty_backend_api(comm->backend);
  ty_status_t s = ty_status_from_abi(send ? api->comm_send(comm->handle, &args)
                                          : api->comm_recv(comm->handle, &args));
  return ty_status_annotate(s, "%s%s", head, more ? " (in a batch)" : "");
}

ty_status_t ty_comm_send(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset, uint64_t count,
                         ty_dtype_t dtype, uint32_t peer, ty_abi_executable_t *executable,
                         bool more) {
  return ty_comm_p2p(comm, true, buffer, offset, count, dtype, peer, executable, more);
}

ty_status_t ty_comm_recv(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset, uint64_t count,
                         ty_dtype_t dtype, uint32_t peer, ty_abi_executable_t *executable,
                         bool more) {
  return ty_comm_p2p(comm, false, buffer, offset, count, dtype, peer, executable, more);
}

/* ---- host collectives (ABI 1.5) ---- */

/* One reduction of f32/f64 elements over `group` (NULL: the world). */
static ty_status_t ty_host_comm_reduce(const ty_host_comm_t *c, const char *group, bool max,
                                       ty_dtype_t dtype, void *data, size_t count) {
  const bool world = !group || !strcmp(group, "world");
  if (world && !max) return c->all_reduce_sum(c->user, dtype, data, count);
  if (!c->group_reduce) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "host collective: %s over %s, but the run's communicator has sums "
                          "over the world only",
                          max ? "a maximum" : "a sum", world ? "the world" : group);
  }
  return c->group_reduce(c->user, world ? "world" : group, max, dtype, data, count);
}

/* bf16/f16 travel as f32: MPI has no half types, and reducing in f32 then
 * rounding once is what a device reduction in half storage does too (and
 * a maximum is exact either way). */
static ty_status_t ty_host_comm_staged(const ty_host_comm_t *c, const char *group, uint32_t op,
                                       uint32_t size, ty_dtype_t dtype, void *data,
                                       size_t count) {
  float *wide = malloc((count ? count : 1) * sizeof(float));
  if (!wide) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "host collective: no memory to stage %zu %s elements as f32", count,
                          ty_dtype_name(dtype));
  }
  uint16_t *h = data;
  for (size_t i = 0; i < count; ++i) {
    wide[i] = dtype == TY_DTYPE_BF16 ? ty_bf16_to_f32(h[i]) : ty_f16_to_f32(h[i]);
  }
  ty_status_t s =
      ty_host_comm_reduce(c, group, op == TY_ABI_REDUCE_MAX, TY_DTYPE_F32, wide, count);
  if (!s) {
    const float scale = op == TY_ABI_REDUCE_AVG ? 1.0f / (float)size : 1.0f;
    for (size_t i = 0; i < count; ++i) {
      float v = wide[i] * scale;
      h[i] = dtype == TY_DTYPE_BF16 ? ty_f32_to_bf16(v) : ty_f32_to_f16(v);
    }
  }
  free(wide);
  return s;
}

/* Element i of `data` (f32, f64, bf16 or f16) as a double, and back. */
static double ty_host_comm_load(ty_dtype_t dtype, const void *data, size_t i) {
  switch (dtype) {
    case TY_DTYPE_F64: return ((const double *)data)[i];
    case TY_DTYPE_BF16: return ty_bf16_to_f32(((const uint16_t *)data)[i]);
    case TY_DTYPE_F16: return ty_f16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
  }
}

static void ty_host_comm_store(ty_dtype_t dtype, void *data, size_t i, double v) {
  switch (dtype) {
    case TY_DTYPE_F64: ((double *)data)[i] = v; break;
    case TY_DTYPE_BF16: ((uint16_t *)data)[i] = ty_f32_to_bf16((float)v); break;
    case TY_DTYPE_F16: ((uint16_t *)data)[i] = ty_f32_to_f16((float)v); break;
    default: ((float *)data)[i] = (float)v; break;
  }
}

/* ABI 1.11's all_gather and reduce_scatter over `group` (`size` > 1
 * ranks): one sum of an [outer, size, block] buffer in f32 (f64 for f64)
 * in which an all-gather's rank fills its own slots and leaves the others
 * zero, so every transport that sums runs them. */
static ty_status_t ty_host_comm_gather(const ty_host_comm_t *c,
                                       const ty_abi_host_collective_args_t *a,
                                       const char *group, uint32_t size) {
  const bool gather = a->kind == TY_ABI_HOST_ALL_GATHER;
  const char *name = group ? group : "world";
  if (a->dtype != TY_DTYPE_F32 && a->dtype != TY_DTYPE_F64 && a->dtype != TY_DTYPE_BF16 &&
      a->dtype != TY_DTYPE_F16) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: %s of %s (f32, bf16, f16, f64 only)",
                          gather ? "all_gather" : "reduce_scatter", ty_dtype_name(a->dtype));
  }
  if (!c->group_rank && strcmp(name, "world") != 0) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "host collective: %s over group %s, but the run's communicator "
                          "cannot tell this rank's place in it",
                          gather ? "all_gather" : "reduce_scatter", name);
  }
  const uint32_t rank = strcmp(name, "world") == 0 ? c->rank : c->group_rank(c->user, name);
  const uint64_t outer = a->outer, count = a->count;
  if (outer == 0 || count % (outer * size) != 0 || (count && !a->part) || rank >= size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: %s of %llu elements is not [outer %llu, %u ranks, "
                          "block] with this rank's part (rank %u)",
                          gather ? "all_gather" : "reduce_scatter", (unsigned long long)count,
                          (unsigned long long)outer, size, rank);
  }
  const size_t block = (size_t)(count / (outer * size));
  const ty_dtype_t wide = a->dtype == TY_DTYPE_F64 ? TY_DTYPE_F64 : TY_DTYPE_F32;
  void *buf = calloc(count ? (size_t)count : 1, ty_dtype_size(wide));
  if (!buf) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "host collective: no memory for %llu elements of a %s",
                          (unsigned long long)count, gather ? "all_gather" : "reduce_scatter");
  }
  for (size_t o = 0; o < (size_t)outer; ++o) {
    for (size_t i = 0; i < block; ++i) {
      const size_t mine = (o * size + rank) * block + i;
      if (gather) {
        ty_host_comm_store(wide, buf, mine, ty_host_comm_load(a->dtype, a->part, o * block + i));
      }
    }
  }
  for (size_t i = 0; !gather && i < (size_t)count; ++i) {
    ty_host_comm_store(wide, buf, i, ty_host_comm_load(a->dtype, a->data, i));
  }
  ty_status_t s = ty_host_comm_reduce(c, group, false, wide, buf, (size_t)count);
  for (size_t i = 0; !s && gather && i < (size_t)count; ++i) {
    ty_host_comm_store(a->dtype, a->data, i, ty_host_comm_load(wide, buf, i));
  }
  for (size_t o = 0; !s && !gather && o < (size_t)outer; ++o) {
    for (size_t i = 0; i < block; ++i) {
      const double v = ty_host_comm_load(wide, buf, (o * size + rank) * block + i);
      ty_host_comm_store(a->dtype, a->part, o * block + i, v);
    }
  }
  free(buf);
  return s;
}

static ty_status_t ty_host_comm_run(const ty_host_comm_t *c,
                                    const ty_abi_host_collective_args_t *a) {
  if (!c || !c->all_reduce_sum || c->size == 0 || c->rank >= c->size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: the communicator is not set up (rank %u of %u)",
                          c ? c->rank : 0, c ? c->size : 0);
  }
  if (!a || a->struct_size < offsetof(ty_abi_host_collective_args_t, group)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: arguments missing or shorter than ABI 1.5's");
  }
  if (a->op != TY_ABI_REDUCE_SUM && a->op != TY_ABI_REDUCE_AVG && a->op != TY_ABI_REDUCE_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: reduce op %u is not sum (0), avg (1) or max (2)",
                          a->op);
  }
  if (a->count && !a->data) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: %llu elements but no data",
                          (unsigned long long)a->count);
  }
  /* A 1.5 plugin's args end before `group`: its collectives are the world's. */
  const char *group = TY_ABI_HAS_FIELD(a, ty_abi_host_collective_args_t, group) ? a->group : NULL;
  uint32_t size = c->size;
  if (group && strcmp(group, "world") != 0) {
    size = c->group_size ? c->group_size(c->user, group) : 0;
    if (size == 0) {
      return ty_status_make(TY_CODE_NOT_FOUND,
                            "host collective: the run has no process group '%s' (its layout "
                            "makes world, tp, cp, pp and dp)",
                            group);
    }
  }
  const uint32_t kind =
      TY_ABI_HAS_FIELD(a, ty_abi_host_collective_args_t, part) ? a->kind : TY_ABI_HOST_REDUCE;
  if (kind == TY_ABI_HOST_ALL_GATHER || kind == TY_ABI_HOST_REDUCE_SCATTER) {
    /* One rank: the plugin's kernel has copied its part already. */
    return size == 1 ? TY_OK : ty_host_comm_gather(c, a, group, size);
  }
  if (kind != TY_ABI_HOST_REDUCE) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "host collective: kind %u is not a reduction (0), all_gather (1) or "
                          "reduce_scatter (2)",
                          kind);
  }
  if (size == 1) return TY_OK; /* this rank alone: every reduction is the identity */
  const size_t count = (size_t)a->count;
  switch (a->dtype) {
    case TY_DTYPE_BF16:
    case TY_DTYPE_F16:
      return ty_host_comm_staged(c, group, a->op, size, a->dtype, a->data, count);
    case TY_DTYPE_F32:
    case TY_DTYPE_F64: {
      TY_RETURN_IF_ERROR(
          ty_host_comm_reduce(c, group, a->op == TY_ABI_REDUCE_MAX, a->dtype, a->data, count));
      if (a->op != TY_ABI_REDUCE_AVG) return TY_OK;
      for (size_t i = 0; i < count; ++i) {
        if (a->dtype == TY_DTYPE_F32) {
          ((float *)a->data)[i] /= (float)size;
        } else {
          ((double *)a->data)[i] /= (double)size;
        }
      }
      return TY_OK;
    }
    default:
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "host collective: dtype %s is not reduced (f32, bf16, f16, f64)",
                            ty_dtype_name(a->dtype));
  }
}

ty_abi_status_t ty_host_comm_collective(void *comm, const ty_abi_host_collective_args_t *args) {
  return (ty_abi_status_t)(void *)ty_host_comm_run(comm, args);
}
