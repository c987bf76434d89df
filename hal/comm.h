/* A device communicator: the collectives of a backend that has its own
 * (ABI 1.4 comm_* entries, e.g. NCCL on cuda), on device buffers. The host
 * bootstraps it: rank 0 asks for a unique id, sends the bytes to every rank
 * (over MPI: distributed/dist.h) and every rank creates its communicator from
 * them. Backends without the entries get UNIMPLEMENTED here and their
 * data-parallel runs reduce through host memory instead.
 *
 * The caller owns a communicator and destroys it before closing its device.
 * Not thread-safe. */
#ifndef TY_HAL_COMM_H_
#define TY_HAL_COMM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "hal/buffer.h"
#include "hal/device.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_comm_t ty_comm_t;

/* A new unique id from `device`'s backend (rank 0 only). */
ty_status_t ty_comm_unique_id(ty_device_t *device, ty_abi_comm_id_t *out_id);

/* Joins `device` to the communicator of `id` as `rank` of `size`; blocks
 * until every rank has joined (or the backend fails). */
ty_status_t ty_comm_create(ty_device_t *device, const ty_abi_comm_id_t *id, uint32_t rank,
                           uint32_t size, ty_comm_t **out_comm);
/* The same for process group `group` ("tp", "dp", ...; NULL or "world":
 * ty_comm_create): `rank` and `size` are the group's, and `id` came from
 * the group's rank 0. The device's executables then run the collective ops
 * whose `group` attribute names it on this communicator (ABI 1.7): a
 * backend older than 1.7 cannot tell groups apart, so a group other than
 * the world is FAILED_PRECONDITION naming the backend's ABI. */
ty_status_t ty_comm_create_group(ty_device_t *device, const ty_abi_comm_id_t *id, uint32_t rank,
                                 uint32_t size, const char *group, ty_comm_t **out_comm);
void ty_comm_destroy(ty_comm_t *comm);

/* In place: `count` elements of `dtype` at `offset` of `buffer`, summed (or
 * averaged) over the ranks, queued after the work `executable` has queued
 * (NULL: after all work on the device). Synchronize the device before
 * reading the result through another executable or the host. `more`:
 * more collectives follow before anything else is asked of the device (the
 * backend may launch them as one batch when the last comes; a batch must
 * end with a call without `more`). */
ty_status_t ty_comm_all_reduce(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset,
                               uint64_t count, ty_dtype_t dtype, ty_abi_reduce_op_t op,
                               ty_abi_executable_t *executable, bool more);

/* In place: `count` elements of `dtype` at `offset` of `buffer` on rank
 * `root` copied to the same place on every rank, ordered as all_reduce. */
ty_status_t ty_comm_broadcast(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset,
                              uint64_t count, ty_dtype_t dtype, uint32_t root,
                              ty_abi_executable_t *executable, bool more);

/* ---- Point to point (ABI 1.8) ----
 *
 * `count` elements of `dtype` (any dtype: the bytes travel) at `offset` of
 * `buffer` sent to rank `peer` of the communicator, or received from it
 * into the same place, ordered as all_reduce on `executable`'s stream.
 * Between two ranks the n-th send matches the n-th receive (no tags): the
 * callers agree on order and sizes. A send completes only when the peer
 * has posted its receive (NCCL), so an unbatched send or receive waits
 * for its peer; `more` batches it with the sends, receives and collectives
 * that follow on this communicator until a call without `more`: the batch
 * progresses as one, and nothing else may be asked of the device before
 * it ends. Errors: FAILED_PRECONDITION on a backend without point to point
 * (ty_comm_has_p2p false: ABI < 1.8 or no comm_send/comm_recv) or a NULL
 * `comm` (its group has no device communicator); INVALID_ARGUMENT for a
 * peer that is not another rank of the communicator or a count of 0;
 * OUT_OF_RANGE for a range past the buffer's end. Each names the peer, the
 * bytes and the group. After an error inside a batch the batch is lost
 * (the plugin may have ended it): end the run. */
ty_status_t ty_comm_send(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset, uint64_t count,
                         ty_dtype_t dtype, uint32_t peer, ty_abi_executable_t *executable,
                         bool more);
ty_status_t ty_comm_recv(ty_comm_t *comm, ty_buffer_t *buffer, uint64_t offset, uint64_t count,
                         ty_dtype_t dtype, uint32_t peer, ty_abi_executable_t *executable,
                         bool more);
/* Whether `comm`'s backend has point to point (false for NULL). */
bool ty_comm_has_p2p(const ty_comm_t *comm);
/* This rank's rank and the size of the communicator. */
uint32_t ty_comm_rank(const ty_comm_t *comm);
uint32_t ty_comm_size(const ty_comm_t *comm);

/* ---- The host communicator (ABI 1.5 host collectives) ----
 *
 * What a run hands a plugin as ty_abi_execute_args_t.host_comm, so that a
 * plugin without a transport of its own executes collective ops (all_reduce)
 * inside its step through host->collective. The core fills it from the
 * run's world (distributed/dist.h: ty_dist_host_comm); the HAL stays free of MPI.
 * `all_reduce_sum` sums `count` elements of `dtype` (f32 or f64) in place
 * over the ranks; the HAL's service stages bf16/f16 through f32 and divides
 * for the average. */
typedef struct ty_host_comm_t {
  uint32_t rank;
  uint32_t size;
  void *user;
  ty_status_t (*all_reduce_sum)(void *user, ty_dtype_t dtype, void *data, size_t count);
  /* Optional (ABI 1.6, process groups): the size of the group `group`
   * ("world", "tp", "dp", "pp", "embed") this rank belongs to, 0 when
   * the run has no such group; and a sum (max false) or maximum of `count` f32 or f64
   * elements in place over it. NULL: the run has the world alone, reduced
   * by sums. */
  uint32_t (*group_size)(void *user, const char *group);
  ty_status_t (*group_reduce)(void *user, const char *group, bool max, ty_dtype_t dtype,
                              void *data, size_t count);
  /* Optional (the gathers of ABI 1.11): this rank's rank in `group`. NULL:
   * the run's gathers are refused (FAILED_PRECONDITION). */
  uint32_t (*group_rank)(void *user, const char *group);
} ty_host_comm_t;

/* host->collective (ABI 1.5; groups and max 1.6; all_gather and
 * reduce_scatter 1.11) over `comm` (a ty_host_comm_t*): validates the
 * arguments (INVALID_ARGUMENT naming the bad one, NOT_FOUND for a group the
 * run does not have) and reduces. The gathers run as sums of zero-filled
 * [outer, size, block] buffers (x + 0 is x: exact in any order), bf16 and
 * f16 staged through f32. */
ty_abi_status_t ty_host_comm_collective(void *comm, const ty_abi_host_collective_args_t *args);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_COMM_H_ */
