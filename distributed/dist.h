/* The distributed world of a run: whether this process is one rank of an
 * MPI job (or of a launch without MPI over the Trainyard TCP transport,
 * distributed/launch_env.h), its rank, the world size, its local rank (which
 * device it takes), and the host collectives that backends without their
 * own communicator use (the host path, docs/design-notes.md "Many
 * devices").
 *
 * MPI is never linked: ty_dist_open dlopens libty_mpi.so (distributed/mpi_shim.h)
 * only when the process was started by an MPI launcher or the caller asks
 * for MPI, so a single-process run needs no MPI at all. A NULL ty_dist_t*
 * is the single-process world (rank 0 of 1): every function takes it and
 * its collectives are no-ops, so callers need no special case.
 *
 * Every collective is bounded by the world's timeout; on expiry it returns
 * DEADLINE_EXCEEDED naming the rank that did not arrive, when this rank can
 * tell. After any collective error the world is unusable: call
 * ty_dist_abort. Not thread-safe: one thread calls these. */
#ifndef TY_DIST_DIST_H_
#define TY_DIST_DIST_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/comm.h"
#include "hal/dtype.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_dist_t ty_dist_t;

typedef enum ty_dist_mode_e {
  TY_DIST_AUTO = 0, /* MPI when an MPI launcher started the process */
  TY_DIST_MPI = 1,  /* MPI, or an error saying why it cannot start */
  TY_DIST_NONE = 2, /* one process, even under a launcher */
  /* The launch without MPI (issue 36): ranks started by torchrun, srun or
   * by hand with RANK/WORLD_SIZE/... (distributed/launch_env.h) meet at a TCP
   * rendezvous and talk over the Trainyard TCP transport. */
  TY_DIST_ENV = 3,
} ty_dist_mode_t;

/* "auto", "mpi", "env" or "none"; INVALID_ARGUMENT otherwise. AUTO is MPI
 * when an MPI launcher started the process, else ENV when the environment
 * holds a launch of several ranks (ty_launch_env_present), else one
 * process. */
ty_status_t ty_dist_mode_parse(const char *text, ty_dist_mode_t *out_mode);

/* Whether the environment says an MPI launcher started this process
 * (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE or PMI_RANK); into `which`
 * (may be NULL) the variable that said so. */
bool ty_dist_launched(char *which, size_t capacity);

/* Opens the world: NULL in *out_dist for a single process (mode NONE, AUTO
 * without a launcher, or a launch environment of WORLD_SIZE=1). ENV reads
 * the launch environment (INVALID_ARGUMENT naming the variable) and meets
 * the other ranks by `timeout_s` (DEADLINE_EXCEEDED, or UNAVAILABLE for a
 * refusal, with rank 0's message). `shim_dir` is where libty_mpi.so is
 * looked for first (the folder beside the executable; TRAINYARD_MPI_SHIM,
 * a file path, overrides it). UNAVAILABLE saying why when MPI cannot start (shim
 * not built or not loadable, MPI_Init failed); INVALID_ARGUMENT for a
 * timeout <= 0. The caller owns the world: ty_dist_close. */
ty_status_t ty_dist_open(ty_dist_mode_t mode, const char *shim_dir, double timeout_s,
                         ty_dist_t **out_dist);
/* MPI_Finalize (or the TCP transport's goodbye). NULL is a no-op. */
void ty_dist_close(ty_dist_t *dist);
/* Ends every rank now (MPI_Abort; over TCP: this rank exits with its
 * links closed, which the others see at once); for a rank that knows
 * another failed. */
void ty_dist_abort(ty_dist_t *dist, int code);

int ty_dist_rank(const ty_dist_t *dist);
int ty_dist_size(const ty_dist_t *dist);
int ty_dist_local_rank(const ty_dist_t *dist);
double ty_dist_timeout(const ty_dist_t *dist);
/* The MPI library's name and version, e.g. "Open MPI v4.1.4", or "Trainyard
 * TCP transport (rendezvous ADDR:PORT)" ("" for a single process). */
const char *ty_dist_library(const ty_dist_t *dist);
/* What the host collectives run over, as a sentence ends: "MPI" or "the
 * Trainyard TCP transport (rendezvous ADDR:PORT)" ("" for one process). */
const char *ty_dist_transport(const ty_dist_t *dist);
/* The host world rank `rank` runs on ("h2" under MPI, "h2 (10.88.0.2)"
 * over TCP), "" when unknown or for a single process. */
const char *ty_dist_rank_host(const ty_dist_t *dist, int rank);
/* "rank 1 on host h2 (10.88.0.2)", or "rank 1" when its host is unknown:
 * how errors name a rank. Returns `out`. */
const char *ty_dist_rank_text(const ty_dist_t *dist, int rank, char *out, size_t capacity);

/* In place, over every rank: f32, f64 or i64 elements. `what` names the
 * collective in errors ("the gradient all-reduce of step 5"). */
ty_status_t ty_dist_all_reduce_sum(ty_dist_t *dist, ty_dtype_t dtype, void *buf, size_t count,
                                   const char *what);
/* Rank `root`'s `bytes` to every rank. */
ty_status_t ty_dist_broadcast(ty_dist_t *dist, int root, void *buf, size_t bytes,
                              const char *what);
/* The world as a host communicator (hal/comm.h) for sessions whose graphs
 * hold collective ops (ty_session_set_host_comm): its sums are
 * ty_dist_all_reduce_sum, bounded by the world's timeout, and its named
 * groups are ty_dist_group's. NULL: rank 0 of 1. `dist` must outlive the
 * sessions that use it. */
void ty_dist_host_comm(ty_dist_t *dist, ty_host_comm_t *out);

/* Point to point between world ranks (pipeline parallel's activations and
 * gradients). A send copies `bytes` of `buf` and starts; the caller may
 * reuse `buf` at once and must finish every send with ty_dist_send_wait
 * (which frees it, on every outcome). A receive waits for rank `source`'s
 * message of exactly `bytes` with `tag`. Both are bounded by the world's
 * timeout: DEADLINE_EXCEEDED naming the peer rank ("rank 1 did not send
 * <what> within 30 s"). Tags are < 32000. A single-process world has no
 * peer: FAILED_PRECONDITION. */
typedef struct ty_dist_send_t ty_dist_send_t;
ty_status_t ty_dist_send_start(ty_dist_t *dist, int dest, int tag, const void *buf, size_t bytes,
                               const char *what, ty_dist_send_t **out_send);
ty_status_t ty_dist_send_wait(ty_dist_t *dist, ty_dist_send_t *send);
ty_status_t ty_dist_recv(ty_dist_t *dist, int source, int tag, void *buf, size_t bytes,
                         const char *what);
/* ---- Groups and the rank layout (issues 17 and 31) ----
 *
 * A run of world = dp x pp x cp x tp ranks places rank r at
 *   r = ((dp_index * pp + pp_index) * cp + cp_index) * tp + tp_index
 * (tp fastest, then cp: the ranks that talk most sit closest) and splits
 * the world into groups (MPI_Comm_split): "tp" holds the ranks of one
 * (dp_index, pp_index, cp_index), "cp" those of one (dp_index, pp_index,
 * tp_index) (context parallel: each holds its part of every sequence),
 * "pp" those of one (dp_index, cp_index, tp_index), "dp" those of one
 * (pp_index, cp_index, tp_index), and "dp_cp" those of one (pp_index,
 * tp_index): every rank that holds the same parameters, over which their
 * gradients are summed (the "dp" group when cp = 1). "world" is every
 * rank. With pp > 1, "embed" holds the first and the last stage of one
 * (dp_index, cp_index, tp_index), which both hold a tied embedding
 * (Megatron's embedding group); a middle stage's "embed" is that rank
 * alone, as every rank's with pp = 1. A group's rank is its ranks' order
 * in the world. A NULL group is one rank alone: its collectives are
 * no-ops, as for a NULL world. */
typedef struct ty_dist_group_t ty_dist_group_t;

typedef enum ty_dist_reduce_e {
  TY_DIST_REDUCE_SUM = 0,
  TY_DIST_REDUCE_MAX = 1,
} ty_dist_reduce_t;

typedef struct ty_dist_layout_t {
  int world, rank;
  int dp, pp, tp;                   /* sizes: world = dp * pp * cp * tp */
  int dp_index, pp_index, tp_index; /* this rank's place */
  int cp, cp_index;                 /* context parallel (1 and 0 without) */
} ty_dist_layout_t;

/* The layout of rank `rank` of `world` for `tp`, `pp` and `cp` (pure: no
 * MPI). INVALID_ARGUMENT naming --tp/--pp/--cp when one is < 1, or naming
 * each of them and the world when the world is not a multiple of their
 * product. ty_dist_layout_make is cp 1. */
ty_status_t ty_dist_layout_make_cp(int world, int rank, int tp, int pp, int cp,
                                   ty_dist_layout_t *out);
ty_status_t ty_dist_layout_make(int world, int rank, int tp, int pp, ty_dist_layout_t *out);
/* The world rank at (dp_index, pp_index, cp_index, tp_index) of `layout`;
 * ty_dist_layout_rank is cp_index 0. */
int ty_dist_layout_rank_cp(const ty_dist_layout_t *layout, int dp_index, int pp_index,
                           int cp_index, int tp_index);
int ty_dist_layout_rank(const ty_dist_layout_t *layout, int dp_index, int pp_index,
                        int tp_index);

/* Collective over the world (every rank calls it with the same tp, pp and
 * cp): makes the layout and its groups (above), replacing any made before.
 * Until it is called the layout is tp = pp = cp = 1 (dp = world). A NULL
 * world accepts tp = pp = cp = 1 only (INVALID_ARGUMENT otherwise).
 * ty_dist_set_layout is cp 1. */
ty_status_t ty_dist_set_layout_cp(ty_dist_t *dist, int tp, int pp, int cp);
ty_status_t ty_dist_set_layout(ty_dist_t *dist, int tp, int pp);
/* The run's layout; for a NULL world, rank 0 of 1. Owned by `dist`. */
const ty_dist_layout_t *ty_dist_layout(const ty_dist_t *dist);

/* The group named "world", "tp", "cp", "pp", "dp", "dp_cp" or "embed" into
 * *out_group (owned by `dist`, valid until the next ty_dist_set_layout or
 * ty_dist_close); NULL there for a NULL world. NOT_FOUND for any other
 * name. */
ty_status_t ty_dist_group(ty_dist_t *dist, const char *name, ty_dist_group_t **out_group);
int ty_dist_group_rank(const ty_dist_group_t *group);
int ty_dist_group_size(const ty_dist_group_t *group);
/* The world rank of `group`'s rank `group_rank`. */
int ty_dist_group_world_rank(const ty_dist_group_t *group, int group_rank);
const char *ty_dist_group_name(const ty_dist_group_t *group);
/* In place over the ranks of `group`: f32, f64 or i64 elements, summed or
 * maxed. Errors (a rank that does not arrive is named by world rank) as
 * the world's collectives. */
ty_status_t ty_dist_group_all_reduce(ty_dist_group_t *group, ty_dist_reduce_t op,
                                     ty_dtype_t dtype, void *buf, size_t count,
                                     const char *what);
/* Every rank's `bytes` of `mine` into out[r * bytes ...] for each group
 * rank r, bit for bit (any bytes: f32 partial sums with their signed
 * zeros and NaN payloads, whatever the world size). `out` holds size x
 * bytes. Over the group's all-reduce (i64 slots, every rank's own filled,
 * the others zero: integer sums of zeros are exact in any order), so it
 * runs on MPI and the TCP transport alike, at the all-reduce's cost of
 * size x bytes per rank. NULL group or one rank: a copy. */
ty_status_t ty_dist_group_all_gather(ty_dist_group_t *group, const void *mine, size_t bytes,
                                     void *out, const char *what);
/* Group rank `root`'s `bytes` to every rank of `group`. */
ty_status_t ty_dist_group_broadcast(ty_dist_group_t *group, int root, void *buf, size_t bytes,
                                    const char *what);

/* Every rank learns whether every rank succeeded: returns `local` when it
 * failed here (taking it), else FAILED_PRECONDITION naming the first rank
 * that failed ("rank 1 failed <what>; its error is above"). For the setup
 * phases, where one rank alone failing would leave the others waiting. */
ty_status_t ty_dist_agree(ty_dist_t *dist, ty_status_t local, const char *what);

/* ---- Rank agreement (issue 33) ----
 *
 * Ranks of one job started with different models or options would run
 * collectives of different sizes (heap corruption inside MPI) or quietly
 * train different things. Before its first collective a distributed
 * command describes everything that must agree as named fields, and
 * ty_dist_agree_fields stops every rank with one message naming the first
 * field and the rank that differs. A field holds the SHA-256 of its full
 * value and a short form for the message. */
typedef struct ty_dist_field_t {
  char name[32];      /* what the message names: "model", "--lr" */
  char about[80];     /* what it is, or "": "the model's config.json and weights" */
  char shown[112];    /* the value as the user reads it (cut at 111 bytes) */
  uint8_t digest[32]; /* SHA-256 of the whole value */
} ty_dist_field_t;

/* Fills `field`: the digest of `size` bytes of `value`, and `shown` (NULL:
 * the value itself, as text). Names and texts longer than their arrays are
 * cut. */
void ty_dist_field_set(ty_dist_field_t *field, const char *name, const char *about,
                       const void *value, size_t size, const char *shown);

/* Collective over the world, before any other collective of the command:
 * every rank passes its `count` fields in the same order. OK when every
 * rank holds the same digests; otherwise, on every rank, the same
 * FAILED_PRECONDITION naming the first field (in order) on which a rank
 * differs from rank 0, that rank and both values: "ranks disagree on
 * '--lr': rank 1 has 0.001, rank 0 has 0.002; every rank of one job must
 * be started with the same options". Ranks that pass different field
 * lists (different builds) get a message saying so. A rank that does not
 * arrive is named as by every collective (DEADLINE_EXCEEDED). NULL world:
 * OK. */
ty_status_t ty_dist_agree_fields(ty_dist_t *dist, const ty_dist_field_t *fields, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* TY_DIST_DIST_H_ */
