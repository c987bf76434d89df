/* libty_mpi.so: the only code that links MPI (mpi_shim.h says why). Every
 * collective is non-blocking under a deadline: MPI's blocking calls wait
 * forever for a rank that hangs, and the run must end with an error that
 * names the rank instead (--dist-timeout). */
#include "distributed/mpi_shim.h"

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#define TY_ARRIVE_TAG 7101
#define TY_VERDICT_TAG 7102

/* A communicator and what its arrival checks need: this rank's place in
 * it and how many collectives it has run (what an arrival carries). */
struct ty_mpi_shim_comm_s {
  MPI_Comm comm;
  int rank, size;
  int64_t sequence;
};

static struct ty_mpi_shim_comm_s ty_world_comm = {MPI_COMM_NULL, 0, 1, 0};

/* Every world rank's processor name (its host), gathered at init so that
 * errors about a rank name its host (rank_host). */
static char (*ty_hosts)[MPI_MAX_PROCESSOR_NAME];

static struct ty_mpi_shim_comm_s *ty_comm_of(ty_mpi_shim_comm_t *c) {
  return c ? c : &ty_world_comm;
}

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void ty_mpi_error(int rc, const char *what, char *err, size_t capacity) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) snprintf(text, sizeof(text), "code %d", rc);
  snprintf(err, capacity, "%s failed: %s", what, text);
}

/* Transfers of at least this many bytes are polled without sleeping. */
#define TY_BIG_TRANSFER ((size_t)1 << 20)

/* Polls `req` (a transfer of `bytes`) until it completes or `deadline`:
 * without sleeping for the first 50 us (a collective whose ranks arrive
 * together completes in a few us, and a 20 us sleep would add more than
 * that per step), then backing off from 20 us to 1 ms so a waiting rank
 * leaves the cores to the ranks still computing. Open MPI moves a large
 * message only inside MPI calls (its shared-memory transport copies it in
 * fragments, each MPI_Test advancing a few), so a transfer of
 * TY_BIG_TRANSFER or more is polled back to back, yielding the core between
 * tests instead of sleeping: with 1 ms sleeps a 1B model's 9 GB pipeline
 * stage or 14 GB tensor-parallel checkpoint gather crawled for minutes. */
static int ty_wait_status(MPI_Request *req, size_t bytes, double deadline, const char *what,
                          MPI_Status *status, char *err, size_t capacity) {
  long sleep_ns = 20000;
  double spin_until = ty_now() + 50e-6;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(req, &done, status);
    if (rc != MPI_SUCCESS) {
      ty_mpi_error(rc, what, err, capacity);
      return TY_MPI_SHIM_ERROR;
    }
    if (done) return TY_MPI_SHIM_OK;
    double now = ty_now();
    if (now > deadline) return TY_MPI_SHIM_TIMEOUT;
    if (now < spin_until) continue;
    if (bytes >= TY_BIG_TRANSFER) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, NULL);
    if (sleep_ns < 1000000) sleep_ns *= 2;
  }
}

static int ty_wait(MPI_Request *req, size_t bytes, double deadline, const char *what,
                   char *err, size_t capacity) {
  return ty_wait_status(req, bytes, deadline, what, MPI_STATUS_IGNORE, err, capacity);
}

/* A non-blocking collective just issued (its return code `rc`), waited for
 * until the deadline. */
static int ty_issued(int rc, MPI_Request *req, size_t bytes, double deadline, const char *what,
                     char *err, size_t capacity) {
  if (rc != MPI_SUCCESS) {
    ty_mpi_error(rc, what, err, capacity);
    return TY_MPI_SHIM_ERROR;
  }
  return ty_wait(req, bytes, deadline, what, err, capacity);
}

/* Other ranks wait longer than rank 0, so that rank 0, which can tell who
 * is missing, reports first. */
static double ty_deadline(const struct ty_mpi_shim_comm_s *c, double timeout_s) {
  double grace = c->rank == 0 ? 0 : (timeout_s < 5 ? timeout_s : 5);
  return ty_now() + timeout_s + grace;
}

/* Rank 0's verdict on an arrival check, to every other rank. */
enum { TY_VERDICT_OK = 0, TY_VERDICT_MISSING = 1, TY_VERDICT_MISMATCH = 2 };
enum { TY_VERDICT_WORDS = 8 }; /* code, rank, seq, kind, bytes, and rank 0's seq, kind, bytes */

static int ty_verdict_send(struct ty_mpi_shim_comm_s *c, const int64_t *v, char *err,
                           size_t capacity) {
  /* Tiny messages: sent eagerly, so a rank that never takes its verdict
   * (it hangs) does not hold rank 0 here. */
  for (int r = 1; r < c->size; ++r) {
    int rc = MPI_Send(v, TY_VERDICT_WORDS, MPI_INT64_T, r, TY_VERDICT_TAG, c->comm);
    if (rc != MPI_SUCCESS) {
      ty_mpi_error(rc, "MPI_Send", err, capacity);
      return TY_MPI_SHIM_ERROR;
    }
  }
  return TY_MPI_SHIM_OK;
}

/* Every rank of `c` learns, before any data moves, that every rank reached
 * this collective with the same collective (`kind`) and the same `bytes`,
 * or which rank did not arrive within the deadline or brought something
 * else (mpi_shim.h, ty_mpi_shim_fault_t). Rank 0 gathers the arrivals and
 * answers each rank with its verdict. */
static int ty_arrive(struct ty_mpi_shim_comm_s *c, int64_t kind, size_t bytes, double timeout_s,
                     ty_mpi_shim_fault_t *fault, char *err, size_t capacity) {
  const int64_t mine[3] = {c->sequence++, kind, (int64_t)bytes};
  *fault = (ty_mpi_shim_fault_t){.rank = -1, .seq = mine[0], .root_seq = mine[0],
                                 .kind = kind, .root_kind = kind, .bytes = mine[2],
                                 .root_bytes = mine[2]};
  if (c->size == 1) return TY_MPI_SHIM_OK;
  int64_t v[TY_VERDICT_WORDS] = {TY_VERDICT_OK, -1, 0, 0, 0, 0, 0, 0};
  if (c->rank != 0) {
    int rc = MPI_Send(mine, 3, MPI_INT64_T, 0, TY_ARRIVE_TAG, c->comm);
    if (rc != MPI_SUCCESS) {
      ty_mpi_error(rc, "MPI_Send", err, capacity);
      return TY_MPI_SHIM_ERROR;
    }
    MPI_Request req;
    rc = MPI_Irecv(v, TY_VERDICT_WORDS, MPI_INT64_T, 0, TY_VERDICT_TAG, c->comm, &req);
    if (rc != MPI_SUCCESS) {
      ty_mpi_error(rc, "MPI_Irecv", err, capacity);
      return TY_MPI_SHIM_ERROR;
    }
    int w = ty_wait(&req, sizeof(v), ty_deadline(c, timeout_s), "MPI_Irecv", err, capacity);
    if (w == TY_MPI_SHIM_TIMEOUT) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
      fault->rank = 0; /* rank 0 answers as soon as it has waited: it never came */
    }
    if (w != TY_MPI_SHIM_OK) return w;
  } else {
    double deadline = ty_now() + timeout_s;
    int64_t got[3] = {0, 0, 0};
    for (int r = 1; r < c->size && v[0] == TY_VERDICT_OK; ++r) {
      MPI_Request req;
      int rc = MPI_Irecv(got, 3, MPI_INT64_T, r, TY_ARRIVE_TAG, c->comm, &req);
      if (rc != MPI_SUCCESS) {
        ty_mpi_error(rc, "MPI_Irecv", err, capacity);
        return TY_MPI_SHIM_ERROR;
      }
      int w = ty_wait(&req, sizeof(got), deadline, "MPI_Irecv", err, capacity);
      if (w == TY_MPI_SHIM_TIMEOUT) {
        MPI_Cancel(&req);
        MPI_Request_free(&req);
        v[0] = TY_VERDICT_MISSING;
        v[1] = r;
      } else if (w != TY_MPI_SHIM_OK) {
        return w;
      } else if (got[0] != mine[0] || got[1] != mine[1] || got[2] != mine[2]) {
        v[0] = TY_VERDICT_MISMATCH;
        v[1] = r;
        v[2] = got[0];
        v[3] = got[1];
        v[4] = got[2];
      }
    }
    v[5] = mine[0];
    v[6] = mine[1];
    v[7] = mine[2];
    int s = ty_verdict_send(c, v, err, capacity);
    if (s != TY_MPI_SHIM_OK) return s;
  }
  if (v[0] == TY_VERDICT_OK) return TY_MPI_SHIM_OK;
  fault->rank = (int)v[1];
  if (v[0] == TY_VERDICT_MISSING) return TY_MPI_SHIM_TIMEOUT;
  fault->seq = v[2];
  fault->kind = v[3];
  fault->bytes = v[4];
  fault->root_seq = v[5];
  fault->root_kind = v[6];
  fault->root_bytes = v[7];
  snprintf(err, capacity, "rank %d of the communicator differs from its rank 0", fault->rank);
  return TY_MPI_SHIM_MISMATCH;
}


static int ty_init(int *out_rank, int *out_size, int *out_local_rank, char *err,
                   size_t capacity) {
  int provided = 0, rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) {
    ty_mpi_error(rc, "MPI_Init_thread", err, capacity);
    return TY_MPI_SHIM_ERROR;
  }
  rc = MPI_Comm_dup(MPI_COMM_WORLD, &ty_world_comm.comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(ty_world_comm.comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(ty_world_comm.comm, &ty_world_comm.rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(ty_world_comm.comm, &ty_world_comm.size);
  MPI_Comm local = MPI_COMM_NULL;
  int local_rank = 0;
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_split_type(ty_world_comm.comm, MPI_COMM_TYPE_SHARED, ty_world_comm.rank,
                             MPI_INFO_NULL, &local);
  }
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(local, &local_rank);
  if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
  if (rc == MPI_SUCCESS) {
    /* Host names: best effort (an allocation failure leaves them unknown). */
    char mine[MPI_MAX_PROCESSOR_NAME] = "";
    int n = 0;
    if (MPI_Get_processor_name(mine, &n) != MPI_SUCCESS) mine[0] = '\0';
    mine[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    ty_hosts = calloc((size_t)ty_world_comm.size, sizeof(*ty_hosts));
    if (ty_hosts) {
      rc = MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, ty_hosts,
                         MPI_MAX_PROCESSOR_NAME, MPI_CHAR, ty_world_comm.comm);
    }
  }
  if (rc != MPI_SUCCESS) {
    ty_mpi_error(rc, "setting up the MPI world", err, capacity);
    return TY_MPI_SHIM_ERROR;
  }
  *out_rank = ty_world_comm.rank;
  *out_size = ty_world_comm.size;
  *out_local_rank = local_rank;
  return TY_MPI_SHIM_OK;
}

static void ty_rank_host(int world_rank, char *out, size_t capacity) {
  if (!capacity) return;
  out[0] = '\0';
  if (ty_hosts && world_rank >= 0 && world_rank < ty_world_comm.size) {
    ty_hosts[world_rank][MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    snprintf(out, capacity, "%s", ty_hosts[world_rank]);
  }
}

static void ty_finalize(void) {
  free(ty_hosts);
  ty_hosts = NULL;
  if (ty_world_comm.comm != MPI_COMM_NULL) MPI_Comm_free(&ty_world_comm.comm);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

static void ty_library_version(char *out, size_t capacity) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  if (MPI_Get_library_version(text, &n) != MPI_SUCCESS) n = 0;
  text[n < (int)sizeof(text) ? n : (int)sizeof(text) - 1] = '\0';
  char *nl = strchr(text, '\n');
  if (nl) *nl = '\0';
  snprintf(out, capacity, "%s", text);
}

static MPI_Datatype ty_type(int type, size_t *elem) {
  switch (type) {
    case TY_MPI_SHIM_F32: *elem = 4; return MPI_FLOAT;
    case TY_MPI_SHIM_F64: *elem = 8; return MPI_DOUBLE;
    default: *elem = 8; return MPI_INT64_T;
  }
}

static int ty_allreduce(ty_mpi_shim_comm_t *comm, void *buf, size_t count, int type, int op,
                        double timeout_s, ty_mpi_shim_fault_t *out_fault, char *err,
                        size_t capacity) {
  struct ty_mpi_shim_comm_s *c = ty_comm_of(comm);
  size_t elem = 0;
  MPI_Datatype dt = ty_type(type, &elem);
  int a = ty_arrive(c, TY_MPI_SHIM_KIND_ALLREDUCE + type * 4 + op, count * elem, timeout_s,
                    out_fault, err, capacity);
  if (a != TY_MPI_SHIM_OK) return a;
  MPI_Op mop = op == TY_MPI_SHIM_MAX ? MPI_MAX : MPI_SUM;
  double deadline = ty_deadline(c, timeout_s);
  /* MPI counts are int: large buffers go in chunks. */
  for (size_t done = 0; done < count;) {
    size_t n = count - done < (size_t)INT_MAX ? count - done : (size_t)INT_MAX;
    MPI_Request req;
    int w = ty_issued(MPI_Iallreduce(MPI_IN_PLACE, (char *)buf + done * elem, (int)n, dt,
                                     mop, c->comm, &req),
                      &req, n * elem, deadline, "MPI_Iallreduce", err, capacity);
    if (w == TY_MPI_SHIM_TIMEOUT && c->size == 2) {
      /* Both had arrived; of a pair, the one that stopped is the other. */
      out_fault->rank = 1 - c->rank;
      out_fault->stalled = 1;
    }
    if (w != TY_MPI_SHIM_OK) return w;
    done += n;
  }
  return TY_MPI_SHIM_OK;
}

static int ty_broadcast(ty_mpi_shim_comm_t *comm, void *buf, size_t bytes, int root,
                        double timeout_s, ty_mpi_shim_fault_t *out_fault, char *err,
                        size_t capacity) {
  struct ty_mpi_shim_comm_s *c = ty_comm_of(comm);
  int a = ty_arrive(c, TY_MPI_SHIM_KIND_BROADCAST + root, bytes, timeout_s, out_fault, err,
                    capacity);
  if (a != TY_MPI_SHIM_OK) return a;
  double deadline = ty_deadline(c, timeout_s);
  for (size_t done = 0; done < bytes;) {
    size_t n = bytes - done < (size_t)INT_MAX ? bytes - done : (size_t)INT_MAX;
    MPI_Request req;
    int w = ty_issued(MPI_Ibcast((char *)buf + done, (int)n, MPI_BYTE, root, c->comm, &req),
                      &req, n, deadline, "MPI_Ibcast", err, capacity);
    if (w == TY_MPI_SHIM_TIMEOUT && c->size == 2) {
      out_fault->rank = 1 - c->rank;
      out_fault->stalled = 1;
    }
    if (w != TY_MPI_SHIM_OK) return w;
    done += n;
  }
  return TY_MPI_SHIM_OK;
}

/* Point-to-point messages larger than MPI's int count (a pipeline stage's
 * state of a 1B model is 9 GB) go as consecutive pieces of at most
 * ty_piece_bytes() under the same tag: MPI keeps messages between two
 * ranks on one tag in order, so piece i meets receive i. The piece size is
 * 1 GiB; TRAINYARD_DEBUG_MPI_PIECE=BYTES makes it smaller, so tests can
 * send pieces without gigabytes of memory. */
static size_t ty_piece_bytes(void) {
  static size_t piece; /* read once: the shim is used from one thread */
  if (piece) return piece;
  piece = (size_t)1 << 30;
  const char *env = getenv("TRAINYARD_DEBUG_MPI_PIECE");
  if (env && env[0]) {
    char *end = NULL;
    unsigned long long v = strtoull(env, &end, 10);
    if (end && *end == '\0' && v > 0 && v <= (unsigned long long)INT_MAX) piece = (size_t)v;
  }
  return piece;
}

typedef struct {
  size_t count;
  size_t bytes;       /* the whole message */
  MPI_Request reqs[]; /* one per piece */
} ty_send_t;

static int ty_send_start(const void *buf, size_t bytes, int dest, int tag, void **out_request,
                         char *err, size_t capacity) {
  *out_request = NULL;
  const size_t piece = ty_piece_bytes();
  const size_t count = bytes ? (bytes + piece - 1) / piece : 1;
  ty_send_t *send = malloc(sizeof(*send) + count * sizeof(MPI_Request));
  if (!send) {
    snprintf(err, capacity, "out of memory");
    return TY_MPI_SHIM_ERROR;
  }
  send->count = 0;
  send->bytes = bytes;
  for (size_t i = 0; i < count; ++i) {
    const size_t off = i * piece, n = bytes - off < piece ? bytes - off : piece;
    int rc = MPI_Isend((const char *)buf + off, (int)n, MPI_BYTE, dest, tag, ty_world_comm.comm,
                       &send->reqs[i]);
    if (rc != MPI_SUCCESS) {
      for (size_t k = 0; k < send->count; ++k) {
        MPI_Cancel(&send->reqs[k]);
        MPI_Request_free(&send->reqs[k]);
      }
      free(send);
      ty_mpi_error(rc, "MPI_Isend", err, capacity);
      return TY_MPI_SHIM_ERROR;
    }
    send->count++;
  }
  *out_request = send;
  return TY_MPI_SHIM_OK;
}

static int ty_send_wait(void *request, double timeout_s, char *err, size_t capacity) {
  ty_send_t *send = request;
  const double deadline = ty_now() + timeout_s;
  int w = TY_MPI_SHIM_OK;
  size_t i = 0;
  while (i < send->count) {
    w = ty_wait(&send->reqs[i], send->bytes, deadline, "MPI_Isend", err, capacity);
    if (w != TY_MPI_SHIM_OK) break;
    ++i;
  }
  /* The peer never took the rest: those requests cannot complete; the run ends. */
  for (; w != TY_MPI_SHIM_OK && i < send->count; ++i) {
    MPI_Cancel(&send->reqs[i]);
    MPI_Request_free(&send->reqs[i]);
  }
  free(send);
  return w;
}

static int ty_recv(void *buf, size_t bytes, int source, int tag, double timeout_s, char *err,
                   size_t capacity) {
  const size_t piece = ty_piece_bytes();
  const double deadline = ty_now() + timeout_s;
  size_t done = 0;
  do {
    const size_t n = bytes - done < piece ? bytes - done : piece;
    MPI_Request req;
    MPI_Status status;
    memset(&status, 0, sizeof(status));
    int rc = MPI_Irecv((char *)buf + done, (int)n, MPI_BYTE, source, tag, ty_world_comm.comm,
                       &req);
    if (rc != MPI_SUCCESS) {
      ty_mpi_error(rc, "MPI_Irecv", err, capacity);
      return TY_MPI_SHIM_ERROR;
    }
    int w = ty_wait_status(&req, n, deadline, "MPI_Irecv", &status, err, capacity);
    if (w == TY_MPI_SHIM_TIMEOUT) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
    }
    if (w != TY_MPI_SHIM_OK) return w;
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if ((size_t)got != n) {
      snprintf(err, capacity,
               "rank %d sent %d bytes (tag %d) where %zu were expected (bytes %zu..%zu of "
               "%zu)",
               source, got, tag, n, done, done + n, bytes);
      return TY_MPI_SHIM_ERROR;
    }
    done += n;
  } while (done < bytes);
  return TY_MPI_SHIM_OK;
}

static void ty_abort(int code) {
  MPI_Abort(ty_world_comm.comm != MPI_COMM_NULL ? ty_world_comm.comm : MPI_COMM_WORLD, code);
}

static int ty_comm_split(int color, int key, ty_mpi_shim_comm_t **out_comm, int *out_rank,
                         int *out_size, char *err, size_t capacity) {
  *out_comm = NULL;
  struct ty_mpi_shim_comm_s *c = calloc(1, sizeof(*c));
  if (!c) {
    snprintf(err, capacity, "out of memory for a communicator");
    return TY_MPI_SHIM_ERROR;
  }
  c->comm = MPI_COMM_NULL;
  int rc = MPI_Comm_split(ty_world_comm.comm, color, key, &c->comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(c->comm, &c->rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(c->comm, &c->size);
  if (rc != MPI_SUCCESS) {
    ty_mpi_error(rc, "MPI_Comm_split", err, capacity);
    if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    free(c);
    return TY_MPI_SHIM_ERROR;
  }
  *out_comm = c;
  *out_rank = c->rank;
  *out_size = c->size;
  return TY_MPI_SHIM_OK;
}

static void ty_comm_free(ty_mpi_shim_comm_t *c) {
  if (!c || c == &ty_world_comm) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  free(c);
}

static const ty_mpi_shim_t ty_shim = {
    .struct_size = sizeof(ty_mpi_shim_t),
    .version = TY_MPI_SHIM_VERSION,
    .init = ty_init,
    .finalize = ty_finalize,
    .library_version = ty_library_version,
    .allreduce = ty_allreduce,
    .broadcast = ty_broadcast,
    .abort = ty_abort,
    .send_start = ty_send_start,
    .send_wait = ty_send_wait,
    .recv = ty_recv,
    .comm_split = ty_comm_split,
    .comm_free = ty_comm_free,
    .rank_host = ty_rank_host,
};

__attribute__((visibility("default"))) const ty_mpi_shim_t *ty_mpi_shim_query(uint32_t version);
const ty_mpi_shim_t *ty_mpi_shim_query(uint32_t version) {
  return version == TY_MPI_SHIM_VERSION ? &ty_shim : NULL;
}
