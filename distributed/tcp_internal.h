/* The Trainyard TCP transport's insides, shared by tcp_rdzv.c (the
 * rendezvous, the authenticated mesh) and tcp_world.c (the progress engine
 * and the collectives); private to distributed/. docs/design-notes.md "Launch
 * without MPI" describes the protocol. Integers travel in host byte order:
 * every rank of one job runs the same build on the same architecture (the
 * rank agreement checks the build), and the magic catches anything else. */
#ifndef TY_DIST_TCP_INTERNAL_H_
#define TY_DIST_TCP_INTERNAL_H_

#include <stddef.h>
#include <stdint.h>

#include "distributed/launch_env.h"
#include "distributed/mpi_shim.h"

#define TY_TCP_MAGIC 0x31545954u /* "TYT1" */
#define TY_TCP_NAME_MAX 64

/* What every rank learns of every other: where it runs and where its mesh
 * listener is (fixed size on the wire). */
typedef struct ty_tcp_rank_info_t {
  char host[TY_TCP_NAME_MAX]; /* gethostname */
  char addr[TY_TCP_NAME_MAX]; /* numeric address of its link to rank 0 */
  int32_t port;               /* its mesh listener's */
  int32_t reserved;
} ty_tcp_rank_info_t;

/* The result of the rendezvous: one connected, authenticated, nonblocking
 * socket per other rank (fds[rank] == -1 for this rank), and the table. */
typedef struct ty_tcp_mesh_t {
  int rank, size;
  int *fds;
  ty_tcp_rank_info_t *info;
} ty_tcp_mesh_t;

/* Meets every rank of `env` at the rendezvous, checks tokens both ways and
 * builds the mesh, all by `timeout_s` (rank 0) or a little later (the
 * others wait for rank 0's verdict). TY_MPI_SHIM_OK, or TY_MPI_SHIM_ERROR /
 * TY_MPI_SHIM_TIMEOUT with the message for the user in err. On failure
 * nothing stays open. */
int ty_tcp_rendezvous(const ty_launch_env_t *env, double timeout_s, ty_tcp_mesh_t *out,
                      char *err, size_t capacity);
void ty_tcp_mesh_free(ty_tcp_mesh_t *mesh);

double ty_tcp_now(void);
/* Whole buffers on a nonblocking socket by `deadline`: 0, 1 (timed out)
 * or 2 (the connection ended or failed). */
int ty_tcp_read_full(int fd, void *buf, size_t n, double deadline);
int ty_tcp_write_full(int fd, const void *buf, size_t n, double deadline);

/* The shim table of the transport (tcp_world.c); ty_tcp_configure must
 * come before its init. `env` is copied. */
const ty_mpi_shim_t *ty_tcp_shim(void);
void ty_tcp_configure(const ty_launch_env_t *env, double timeout_s);

#endif /* TY_DIST_TCP_INTERNAL_H_ */
