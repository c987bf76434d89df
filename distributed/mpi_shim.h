/* The table between the core and libty_mpi.so, the one library that links
 * MPI, and the Trainyard TCP transport (distributed/tcp_world.c, compiled into
 * ty_dist: the launch without MPI fills the same table). The core never
 * links MPI: it dlopens the shim only for a distributed run (distributed/dist.h),
 * so a single-process run needs no MPI installed. The
 * shim is built with the core, so this is a private interface, not a
 * plugin ABI; the version still guards against a stale shim on the path.
 *
 * Every timed call takes a deadline in seconds and returns TY_MPI_SHIM_OK,
 * TY_MPI_SHIM_TIMEOUT (with the fault's rank set to a rank that did not
 * arrive, or -1 when this rank cannot tell), TY_MPI_SHIM_MISMATCH (a rank
 * brought another collective or another byte count than rank 0: the fault
 * holds both, and no data moved) or TY_MPI_SHIM_ERROR, with text in err.
 * None of them prints. */
#ifndef TY_DIST_MPI_SHIM_H_
#define TY_DIST_MPI_SHIM_H_

#include <stddef.h>
#include <stdint.h>

#define TY_MPI_SHIM_VERSION 4
#define TY_MPI_SHIM_SYMBOL "ty_mpi_shim_query"

enum {
  TY_MPI_SHIM_OK = 0,
  TY_MPI_SHIM_TIMEOUT = 1,
  TY_MPI_SHIM_ERROR = 2,
  TY_MPI_SHIM_MISMATCH = 3, /* version 3 */
};
/* Element types of the reductions. */
enum { TY_MPI_SHIM_F32 = 0, TY_MPI_SHIM_F64 = 1, TY_MPI_SHIM_I64 = 2 };
/* Reductions (version 2). */
enum { TY_MPI_SHIM_SUM = 0, TY_MPI_SHIM_MAX = 1 };

/* A communicator of the shim (version 2): the world, or a group split from
 * it. NULL in every call means the world. */
typedef struct ty_mpi_shim_comm_s ty_mpi_shim_comm_t;

/* What a collective of a communicator found wrong (version 3). Before any
 * data moves, every rank tells rank 0 of the communicator which collective
 * it is at (its sequence number), which one (`kind`: TY_MPI_SHIM_KIND_*)
 * and how many bytes it brings; rank 0 compares them with its own and
 * tells every rank the verdict, so that every rank reports the same fault
 * instead of MPI moving buffers of different sizes (memory corruption). */
typedef struct ty_mpi_shim_fault_t {
  int rank;                     /* of the communicator: missing or differing; -1 */
  int64_t seq, root_seq;        /* its and rank 0's collective number */
  int64_t kind, root_kind;      /* its and rank 0's collective */
  int64_t bytes, root_bytes;    /* its and rank 0's payload */
  /* 1: every rank had passed the arrival check and `rank` stopped while the
   * data moved (named where the transport can tell: the other rank of a
   * pair, the peer that did not take rank 0's result). A shim older than
   * this field leaves the caller's 0. */
  int stalled;
} ty_mpi_shim_fault_t;

/* `kind` of a fault: an all-reduce is KIND_ALLREDUCE + type * 4 + op, a
 * broadcast KIND_BROADCAST + root. */
enum { TY_MPI_SHIM_KIND_ALLREDUCE = 1, TY_MPI_SHIM_KIND_BROADCAST = 1000 };

typedef struct ty_mpi_shim_t {
  size_t struct_size;
  uint32_t version;
  /* MPI_Init_thread (funneled: only the main thread calls MPI) and the
   * world's layout; local_rank is the rank among the processes of this
   * host (MPI_Comm_split_type shared). */
  int (*init)(int *out_rank, int *out_size, int *out_local_rank, char *err, size_t capacity);
  void (*finalize)(void);
  /* The MPI library's own version text (MPI_Get_library_version). */
  void (*library_version)(char *out, size_t capacity);
  /* Reduces (`op`: TY_MPI_SHIM_SUM or _MAX) over the ranks of `comm` in
   * place. Rank 0 of `comm` first waits for every other rank to arrive (a
   * small message each, with what it brings) and answers each with its
   * verdict, so a rank that never comes is named (its rank in `comm`) on
   * every rank that came, and a rank that brings another size or
   * collective is refused on every rank before any data moves. */
  int (*allreduce)(ty_mpi_shim_comm_t *comm, void *buf, size_t count, int type, int op,
                   double timeout_s, ty_mpi_shim_fault_t *out_fault, char *err,
                   size_t capacity);
  /* Rank `root`'s (of `comm`) bytes to every rank of `comm` (the same
   * arrival check: every rank must pass the same `bytes` and `root`). */
  int (*broadcast)(ty_mpi_shim_comm_t *comm, void *buf, size_t bytes, int root,
                   double timeout_s, ty_mpi_shim_fault_t *out_fault, char *err,
                   size_t capacity);
  /* MPI_Abort on the world: ends every rank. */
  void (*abort)(int code);
  /* Point to point between world ranks (pipeline parallel). send_start
   * copies nothing: `buf` must stay valid until send_wait returns, which
   * waits for the send under the deadline and frees the request (on every
   * outcome). recv waits for the message from `source` with `tag` under
   * the deadline; a message of another size is an error. On a timeout the
   * missing rank is the peer. */
  int (*send_start)(const void *buf, size_t bytes, int dest, int tag, void **out_request,
                    char *err, size_t capacity);
  int (*send_wait)(void *request, double timeout_s, char *err, size_t capacity);
  int (*recv)(void *buf, size_t bytes, int source, int tag, double timeout_s, char *err,
              size_t capacity);
  /* ---- version 2: groups ---- */
  /* MPI_Comm_split of the world: every rank of the world calls it; ranks of
   * one `color` form one new communicator, ordered by `key`. Blocking (a
   * set-up step; MPI has no deadline for it). The caller frees it. */
  int (*comm_split)(int color, int key, ty_mpi_shim_comm_t **out_comm, int *out_rank,
                    int *out_size, char *err, size_t capacity);
  void (*comm_free)(ty_mpi_shim_comm_t *comm);
  /* ---- version 4: hosts ---- */
  /* The host that world rank `world_rank` runs on, as errors name it
   * ("h2" under MPI: MPI_Get_processor_name gathered at init; "h2
   * (10.88.0.2)" over the TCP transport); "" when unknown. */
  void (*rank_host)(int world_rank, char *out, size_t capacity);
} ty_mpi_shim_t;

typedef const ty_mpi_shim_t *(*ty_mpi_shim_query_fn)(uint32_t version);

#endif /* TY_DIST_MPI_SHIM_H_ */
