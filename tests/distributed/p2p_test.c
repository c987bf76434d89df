/* ABI 1.8 point to point through hal/comm.h under a real MPI world, run by
 * run_mpi.py as `mpirun -np 2` on the commfake plugin (NCCL's blocking
 * semantics over MPI) and its ABI 1.7 build:
 * - the host's argument checks, each with its status and a message naming
 *   the peer, the bytes and the group: no communicator of the group (NULL),
 *   a peer that is this rank or past the group, a count of 0, a range past
 *   the buffer's end; a 1.7 backend refused by its ABI;
 * - an exchange of both ranks' bytes in one batch (send then receive with
 *   TY_ABI_COLLECTIVE_MORE: unbatched it would deadlock), i64 elements moved
 *   as bytes, and an unbatched send matched by its peer's receive.
 * A plain program: exit 0, or 1 with the first failure on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/dist.h"
#include "hal/buffer.h"
#include "hal/comm.h"
#include "hal/device.h"
#include "hal/registry.h"

#include "rank_check.h"

static void ok(ty_status_t s, const char *what) {
  CHECK(!s, "%s: %s", what, s ? ty_status_message(s) : "");
}

static void refused(ty_status_t s, ty_code_t code, const char *want) {
  CHECK(s && ty_status_code(s) == code && strstr(ty_status_message(s), want),
        "want code %d with '%s', got %s", (int)code, want, s ? ty_status_message(s) : "OK");
  ty_status_free(s);
}

/* A "pp" communicator of both ranks on the plugin of `dir`. */
static void open_comm(ty_dist_t *dist, const char *dir, ty_registry_t **r, ty_device_t **dev,
                      ty_comm_t **comm) {
  const char *paths[1] = {dir};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ok(ty_registry_create(&options, r), "registry");
  ok(ty_device_open(*r, "commfake", dev), "device");
  ty_abi_comm_id_t id;
  memset(&id, 0, sizeof(id));
  if (g_rank == 0) ok(ty_comm_unique_id(*dev, &id), "unique id");
  ty_dist_group_t *world;
  ok(ty_dist_group(dist, "world", &world), "world");
  ok(ty_dist_group_broadcast(world, 0, &id, sizeof(id), "the id"), "broadcast id");
  ok(ty_comm_create_group(*dev, &id, (uint32_t)g_rank, 2, "pp", comm), "comm");
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s <commfake dir> <commfake17 dir> <mpi shim dir>\n", argv[0]);
    return 2;
  }
  ty_dist_t *dist;
  ok(ty_dist_open(TY_DIST_MPI, argv[3], 60.0, &dist), "MPI");
  g_rank = ty_dist_rank(dist);
  CHECK(ty_dist_size(dist) == 2, "run with 2 ranks");
  const uint32_t peer = (uint32_t)(1 - g_rank);
  ty_registry_t *r;
  ty_device_t *dev;
  ty_comm_t *comm;
  open_comm(dist, argv[1], &r, &dev, &comm);
  CHECK(ty_comm_has_p2p(comm) && !ty_comm_has_p2p(NULL), "has_p2p");
  ty_buffer_t *buf;
  ok(ty_buffer_alloc(dev, 64, &buf), "buffer");
  refused(ty_comm_send(NULL, buf, 0, 4, TY_DTYPE_F32, peer, NULL, false),
          TY_CODE_FAILED_PRECONDITION, "no device communicator of its group");
  refused(ty_comm_send(comm, buf, 0, 4, TY_DTYPE_F32, (uint32_t)g_rank, NULL, false),
          TY_CODE_INVALID_ARGUMENT, "the peer must be another rank of the group");
  refused(ty_comm_recv(comm, buf, 0, 4, TY_DTYPE_F32, 2, NULL, false),
          TY_CODE_INVALID_ARGUMENT, "receive of 16 bytes from rank 2 of group 'pp'");
  refused(ty_comm_send(comm, buf, 0, 0, TY_DTYPE_F32, peer, NULL, false),
          TY_CODE_INVALID_ARGUMENT, "a count of 0 elements");
  refused(ty_comm_send(comm, buf, 32, 5, TY_DTYPE_I64, peer, NULL, false),
          TY_CODE_OUT_OF_RANGE, "40 bytes at byte 32 run past the end of a 64-byte buffer");
  /* the exchange: each sends bytes 0..31 and receives into 32..63, in one
   * batch on both sides (two unbatched blocking sends would deadlock) */
  int64_t mine[4], theirs[4];
  for (int i = 0; i < 4; ++i) mine[i] = 1000 * (g_rank + 1) + i;
  ok(ty_buffer_write(buf, 0, mine, sizeof(mine)), "write");
  ok(ty_comm_send(comm, buf, 0, 4, TY_DTYPE_I64, peer, NULL, true), "batched send");
  ok(ty_comm_recv(comm, buf, 32, 4, TY_DTYPE_I64, peer, NULL, false), "batch's receive");
  ok(ty_buffer_read(buf, 32, theirs, sizeof(theirs)), "read");
  for (int i = 0; i < 4; ++i) CHECK(theirs[i] == 1000 * (2 - g_rank) + i, "exchanged %d", i);
  /* unbatched: rank 0 sends, rank 1 receives (a blocking pair) */
  if (g_rank == 0) {
    ok(ty_comm_send(comm, buf, 0, 8, TY_DTYPE_BF16, 1, NULL, false), "send");
  } else {
    ok(ty_comm_recv(comm, buf, 48, 8, TY_DTYPE_BF16, 0, NULL, false), "recv");
    ok(ty_buffer_read(buf, 48, theirs, 16), "read");
    CHECK(theirs[0] == 1000 && theirs[1] == 1001, "bf16 bytes");
  }
  ty_buffer_free(buf);
  ty_comm_destroy(comm);
  ty_device_close(dev);
  ty_registry_destroy(r);
  /* the same device of ABI 1.7: no point to point */
  open_comm(dist, argv[2], &r, &dev, &comm);
  CHECK(!ty_comm_has_p2p(comm), "1.7 has no p2p");
  ok(ty_buffer_alloc(dev, 64, &buf), "buffer");
  refused(ty_comm_send(comm, buf, 0, 4, TY_DTYPE_F32, peer, NULL, false),
          TY_CODE_FAILED_PRECONDITION, "(ABI 1.7) has no point to point");
  ty_buffer_free(buf);
  ty_comm_destroy(comm);
  ty_device_close(dev);
  ty_registry_destroy(r);
  if (g_rank == 0) printf("p2p_test: point-to-point checks and exchanges OK\n");
  ty_dist_close(dist);
  return 0;
}
