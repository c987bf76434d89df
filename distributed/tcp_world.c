/* The Trainyard TCP transport's collectives and its ty_mpi_shim_t table
 * (mpi_shim.h), with the semantics of mpi_shim.c, over the authenticated
 * mesh of tcp_rdzv.c and the progress engine of tcp_engine.c. Collectives
 * go through the communicator's rank 0: it checks every rank's (sequence,
 * kind, bytes) before any data is used, sums in rank order 0, 1, 2, ...
 * (results never depend on arrival order) and sends the verdict, with the
 * result, to every rank. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>


#include "distributed/tcp_engine.h"
#include "hal/sha256.h"

void ty_tcp_configure(const ty_launch_env_t *env, double timeout_s) {
  ty_tcp_w.env = *env;
  ty_tcp_w.timeout_s = timeout_s;
}

static struct ty_mpi_shim_comm_s *ty_comm(ty_mpi_shim_comm_t *c) {
  return c ? c : &ty_tcp_w.world;
}

/* ---- collectives ---- */

/* Rank 0's verdict: code, rank, its seq, kind, bytes, rank 0's seq, kind,
 * bytes (as mpi_shim.c's). */
enum { TY_V_OK = 0, TY_V_MISSING = 1, TY_V_MISMATCH = 2, TY_V_CLOSED = 3 };
enum { TY_V_WORDS = 8 };

/* Other ranks wait longer than rank 0, which can tell who is missing. */
static double ty_deadline(const struct ty_mpi_shim_comm_s *c, double timeout_s) {
  double grace = c->rank == 0 ? 0 : (timeout_s < 5 ? timeout_s : 5);
  return ty_tcp_now() + timeout_s + grace;
}

static int64_t ty_declared(const ty_msg_t *m) {
  int64_t b = -1;
  if (m->hdr.bytes >= 8) memcpy(&b, m->data, 8);
  return b;
}

/* Rank 0 of `c`: every other rank's arrival frame (in msgs[r]) by the
 * deadline, each checked against `mine` in rank order; the verdict in v. */
static void ty_gather(struct ty_mpi_shim_comm_s *c, const int64_t mine[3], bool with_data,
                      double deadline, ty_msg_t **msgs, int64_t v[TY_V_WORDS]) {
  memset(v, 0, TY_V_WORDS * sizeof(int64_t));
  v[1] = -1;
  v[5] = mine[0];
  v[6] = mine[1];
  v[7] = mine[2];
  for (;;) {
    int arrived = 0;
    for (int r = 1; r < c->size; ++r) {
      if (!msgs[r]) msgs[r] = ty_tcp_take(c->world[r], TY_F_CONTRIB, c->id, -1);
      if (!msgs[r]) continue;
      ++arrived;
      int64_t got[3] = {msgs[r]->hdr.tag, msgs[r]->hdr.kind, ty_declared(msgs[r])};
      /* The same collective carries its data (an all-reduce) or none: what
       * came is what counts, so a short frame is never summed past. */
      const int64_t carried = msgs[r]->hdr.bytes >= 8 ? (int64_t)msgs[r]->hdr.bytes - 8 : -1;
      if (got[1] == mine[1] && carried != (with_data ? got[2] : 0)) got[2] = carried;
      if (got[0] != mine[0] || got[1] != mine[1] || got[2] != mine[2]) {
        v[0] = TY_V_MISMATCH;
        v[1] = r;
        memcpy(v + 2, got, sizeof(got));
        return;
      }
    }
    if (arrived == c->size - 1) return;
    for (int r = 1; r < c->size; ++r) {
      if (!msgs[r] && ty_tcp_w.peers[c->world[r]].closed) {
        v[0] = TY_V_CLOSED;
        v[1] = r;
        return;
      }
    }
    double left = deadline - ty_tcp_now();
    if (left <= 0) {
      for (int r = 1; r < c->size && v[1] < 0; ++r) {
        if (!msgs[r]) v[1] = r;
      }
      v[0] = TY_V_MISSING;
      return;
    }
    ty_tcp_progress(left);
  }
}

/* Rank 0: the verdict (with `data` when not NULL) to every rank, written
 * before it returns (the caller's buffer, and an exit right after). */
static int ty_verdict_send(struct ty_mpi_shim_comm_s *c, int64_t seq, const int64_t v[TY_V_WORDS],
                           const void *data, size_t bytes, double deadline, int *out_peer,
                           char *err, size_t capacity) {
  ty_out_t **outs = calloc((size_t)c->size, sizeof(*outs));
  if (!outs) {
    snprintf(err, capacity, "out of memory for a collective");
    return TY_MPI_SHIM_ERROR;
  }
  int rc = TY_MPI_SHIM_OK;
  for (int r = 1; r < c->size && rc == TY_MPI_SHIM_OK; ++r) {
    if (ty_tcp_w.peers[c->world[r]].closed && v[0] != TY_V_OK) continue;
    outs[r] = ty_tcp_send(c->world[r], TY_F_VERDICT, c->id, seq, 0, v,
                          TY_V_WORDS * sizeof(int64_t), data, data ? bytes : 0);
    if (!outs[r]) {
      snprintf(err, capacity, "out of memory for a collective");
      rc = TY_MPI_SHIM_ERROR;
    }
  }
  if (rc == TY_MPI_SHIM_OK) rc = ty_tcp_flush(outs, c->size, deadline, out_peer, err, capacity);
  for (int r = 1; r < c->size; ++r) {
    if (!outs[r]) continue;
    ty_tcp_out_cancel(outs[r]);
    free(outs[r]);
  }
  free(outs);
  return rc;
}

/* The fault and the return code of a verdict that is not OK. */
static int ty_verdict_result(struct ty_mpi_shim_comm_s *c, const int64_t v[TY_V_WORDS],
                             ty_mpi_shim_fault_t *fault, char *err, size_t capacity) {
  fault->rank = (int)v[1];
  if (v[0] == TY_V_MISSING) return TY_MPI_SHIM_TIMEOUT;
  if (v[0] == TY_V_CLOSED) {
    const int r = (int)v[1];
    return ty_tcp_closed_error(r >= 0 && r < c->size ? c->world[r] : 0, err, capacity);
  }
  fault->seq = v[2];
  fault->kind = v[3];
  fault->bytes = v[4];
  fault->root_seq = v[5];
  fault->root_kind = v[6];
  fault->root_bytes = v[7];
  snprintf(err, capacity, "rank %d of the communicator differs from its rank 0", fault->rank);
  return TY_MPI_SHIM_MISMATCH;
}

static void ty_reduce(void *acc, const void *in, size_t count, int type, int op) {
  const bool max = op == TY_MPI_SHIM_MAX;
  if (type == TY_MPI_SHIM_F32) {
    float *a = acc, b;
    for (size_t i = 0; i < count; ++i) {
      memcpy(&b, (const char *)in + i * 4, 4);
      a[i] = max ? (b > a[i] ? b : a[i]) : a[i] + b;
    }
  } else if (type == TY_MPI_SHIM_F64) {
    double *a = acc, b;
    for (size_t i = 0; i < count; ++i) {
      memcpy(&b, (const char *)in + i * 8, 8);
      a[i] = max ? (b > a[i] ? b : a[i]) : a[i] + b;
    }
  } else {
    int64_t *a = acc, b;
    for (size_t i = 0; i < count; ++i) {
      memcpy(&b, (const char *)in + i * 8, 8);
      /* wrapping like MPI's int64 sum would: unsigned, no UB */
      a[i] = max ? (b > a[i] ? b : a[i]) : (int64_t)((uint64_t)a[i] + (uint64_t)b);
    }
  }
}

/* One collective of `c`: the arrival check and, for an all-reduce
 * (`reduce`), the data and the sum. `buf` gets rank 0's result. */
static int ty_collective(struct ty_mpi_shim_comm_s *c, int64_t kind, void *buf, size_t bytes,
                         bool reduce, size_t count, int type, int op, double timeout_s,
                         ty_mpi_shim_fault_t *fault, char *err, size_t capacity) {
  const int64_t mine[3] = {c->sequence++, kind, (int64_t)bytes};
  *fault = (ty_mpi_shim_fault_t){.rank = -1, .seq = mine[0], .root_seq = mine[0], .kind = kind,
                                 .root_kind = kind, .bytes = mine[2], .root_bytes = mine[2]};
  if (c->size == 1) return TY_MPI_SHIM_OK;
  const double deadline = ty_deadline(c, timeout_s);
  int64_t v[TY_V_WORDS];
  if (c->rank == 0) {
    ty_msg_t **msgs = calloc((size_t)c->size, sizeof(*msgs));
    if (!msgs) {
      snprintf(err, capacity, "out of memory for a collective");
      return TY_MPI_SHIM_ERROR;
    }
    ty_gather(c, mine, reduce, deadline, msgs, v);
    if (v[0] == TY_V_OK && reduce) {
      for (int r = 1; r < c->size; ++r) ty_reduce(buf, msgs[r]->data + 8, count, type, op);
    }
    for (int r = 1; r < c->size; ++r) ty_tcp_msg_free(msgs[r]);
    free(msgs);
    int peer = -1;
    int rc = ty_verdict_send(c, mine[0], v, v[0] == TY_V_OK && reduce ? buf : NULL, bytes,
                         ty_tcp_now() + timeout_s, &peer, err, capacity);
    if (v[0] != TY_V_OK) return ty_verdict_result(c, v, fault, err, capacity);
    for (int r = 0; rc == TY_MPI_SHIM_TIMEOUT && r < c->size; ++r) {
      if (c->world[r] == peer) { /* it did not take the result */
        fault->rank = r;
        fault->stalled = 1;
      }
    }
    return rc;
  }
  /* Every other rank: its arrival (and data) to rank 0, then the verdict. */
  ty_out_t *o = ty_tcp_send(c->world[0], TY_F_CONTRIB, c->id, mine[0], kind, &mine[2], 8,
                            reduce ? buf : NULL, reduce ? bytes : 0);
  if (!o) {
    snprintf(err, capacity, "out of memory for a collective");
    return TY_MPI_SHIM_ERROR;
  }
  ty_msg_t *m = NULL;
  int rc = ty_tcp_wait_msg(c->world[0], TY_F_VERDICT, c->id, -1, deadline, &m, err, capacity);
  ty_tcp_out_cancel(o);
  free(o);
  if (rc == TY_MPI_SHIM_TIMEOUT) fault->rank = 0; /* rank 0 answers once it has waited */
  if (rc != TY_MPI_SHIM_OK) return rc;
  const size_t words = TY_V_WORDS * sizeof(int64_t);
  if (m->hdr.bytes < words) {
    ty_tcp_msg_free(m);
    snprintf(err, capacity, "rank %d sent a verdict this build cannot read", c->world[0]);
    return TY_MPI_SHIM_ERROR;
  }
  memcpy(v, m->data, words);
  if (v[0] == TY_V_OK && reduce) {
    if (m->hdr.bytes - words != bytes) {
      snprintf(err, capacity, "rank %d sent a result of %llu bytes where %zu were expected",
               c->world[0], (unsigned long long)(m->hdr.bytes - words), bytes);
      ty_tcp_msg_free(m);
      return TY_MPI_SHIM_ERROR;
    }
    if (bytes) memcpy(buf, m->data + words, bytes);
  }
  ty_tcp_msg_free(m);
  if (v[0] != TY_V_OK) return ty_verdict_result(c, v, fault, err, capacity);
  return TY_MPI_SHIM_OK;
}

static int ty_allreduce(ty_mpi_shim_comm_t *comm, void *buf, size_t count, int type, int op,
                        double timeout_s, ty_mpi_shim_fault_t *out_fault, char *err,
                        size_t capacity) {
  const size_t elem = type == TY_MPI_SHIM_F32 ? 4 : 8;
  return ty_collective(ty_comm(comm), TY_MPI_SHIM_KIND_ALLREDUCE + type * 4 + op, buf,
                       count * elem, true, count, type, op, timeout_s, out_fault, err, capacity);
}

static int ty_broadcast(ty_mpi_shim_comm_t *comm, void *buf, size_t bytes, int root,
                        double timeout_s, ty_mpi_shim_fault_t *out_fault, char *err,
                        size_t capacity) {
  struct ty_mpi_shim_comm_s *c = ty_comm(comm);
  const int64_t seq = c->sequence;
  int rc = ty_collective(c, TY_MPI_SHIM_KIND_BROADCAST + root, buf, bytes, false, 0, 0, 0,
                         timeout_s, out_fault, err, capacity);
  if (rc != TY_MPI_SHIM_OK || c->size == 1) return rc;
  if (root < 0 || root >= c->size) {
    snprintf(err, capacity, "broadcast from rank %d of a group of %d", root, c->size);
    return TY_MPI_SHIM_ERROR;
  }
  const double deadline = ty_deadline(c, timeout_s);
  if (c->rank != root) {
    ty_msg_t *m = NULL;
    rc = ty_tcp_wait_msg(c->world[root], TY_F_BCAST, c->id, seq, deadline, &m, err, capacity);
    if (rc == TY_MPI_SHIM_TIMEOUT) out_fault->rank = root;
    if (rc != TY_MPI_SHIM_OK) return rc;
    if (m->hdr.bytes != bytes) {
      snprintf(err, capacity, "rank %d broadcast %llu bytes where %zu were expected",
               c->world[root], (unsigned long long)m->hdr.bytes, bytes);
      rc = TY_MPI_SHIM_ERROR;
    } else {
      if (bytes) memcpy(buf, m->data, bytes);
    }
    ty_tcp_msg_free(m);
    return rc;
  }
  ty_out_t **outs = calloc((size_t)c->size, sizeof(*outs));
  if (!outs) {
    snprintf(err, capacity, "out of memory for a broadcast");
    return TY_MPI_SHIM_ERROR;
  }
  for (int r = 0; r < c->size && rc == TY_MPI_SHIM_OK; ++r) {
    if (r == root) continue;
    outs[r] = ty_tcp_send(c->world[r], TY_F_BCAST, c->id, seq, 0, NULL, 0, buf, bytes);
    if (!outs[r]) {
      snprintf(err, capacity, "out of memory for a broadcast");
      rc = TY_MPI_SHIM_ERROR;
    }
  }
  int peer = -1;
  if (rc == TY_MPI_SHIM_OK) rc = ty_tcp_flush(outs, c->size, deadline, &peer, err, capacity);
  for (int r = 0; r < c->size; ++r) {
    if (c->world[r] == peer && rc == TY_MPI_SHIM_TIMEOUT) out_fault->rank = r;
    if (!outs[r]) continue;
    ty_tcp_out_cancel(outs[r]);
    free(outs[r]);
  }
  free(outs);
  return rc;
}

static int ty_send_start(const void *buf, size_t bytes, int dest, int tag, void **out_request,
                         char *err, size_t capacity) {
  *out_request = ty_tcp_send(dest, TY_F_P2P, 0, tag, 0, NULL, 0, buf, bytes);
  if (!*out_request) {
    snprintf(err, capacity, "out of memory");
    return TY_MPI_SHIM_ERROR;
  }
  return TY_MPI_SHIM_OK;
}

static int ty_send_wait(void *request, double timeout_s, char *err, size_t capacity) {
  ty_out_t *o = request;
  int peer = -1;
  int rc = ty_tcp_flush(&o, 1, ty_tcp_now() + timeout_s, &peer, err, capacity);
  ty_tcp_out_cancel(o);
  free(o);
  return rc;
}

static int ty_recv(void *buf, size_t bytes, int source, int tag, double timeout_s, char *err,
                   size_t capacity) {
  ty_msg_t *m = NULL;
  int rc = ty_tcp_wait_msg(source, TY_F_P2P, 0, tag, ty_tcp_now() + timeout_s, &m, err, capacity);
  if (rc != TY_MPI_SHIM_OK) return rc;
  if (m->hdr.bytes != bytes) {
    snprintf(err, capacity, "rank %d sent %llu bytes (tag %d) where %zu were expected", source,
             (unsigned long long)m->hdr.bytes, tag, bytes);
    rc = TY_MPI_SHIM_ERROR;
  } else {
    if (bytes) memcpy(buf, m->data, bytes);
  }
  ty_tcp_msg_free(m);
  return rc;
}

/* A communicator's id: the same on every rank of it, from what they share
 * (its parent, the world; the split's number; its color). */
static uint64_t ty_comm_id(int64_t split, int64_t color) {
  const int64_t in[3] = {0, split, color};
  uint8_t d[32];
  /* SHA-256 fails only without memory; its zero digest gives id 1 below. */
  (void)!ty_sha256(in, sizeof(in), d);
  uint64_t id = 0;
  memcpy(&id, d, 8);
  return id ? id : 1; /* 0 is the world's */
}

static int ty_comm_split(int color, int key, ty_mpi_shim_comm_t **out_comm, int *out_rank,
                         int *out_size, char *err, size_t capacity) {
  *out_comm = NULL;
  const int size = ty_tcp_w.world.size, me = ty_tcp_w.world.rank;
  const int64_t split = ty_tcp_w.splits++;
  int64_t *all = calloc((size_t)size * 2, sizeof(int64_t));
  struct ty_mpi_shim_comm_s *c = calloc(1, sizeof(*c));
  int *world = calloc((size_t)size, sizeof(int));
  if (!all || !c || !world) {
    free(all);
    free(c);
    free(world);
    snprintf(err, capacity, "out of memory for a communicator");
    return TY_MPI_SHIM_ERROR;
  }
  all[2 * me] = color;
  all[2 * me + 1] = key;
  /* An all-gather of (color, key) through world rank 0. */
  const double deadline = ty_deadline(&ty_tcp_w.world, ty_tcp_w.timeout_s);
  int rc = TY_MPI_SHIM_OK, peer = -1;
  ty_msg_t *m = NULL;
  if (me != 0) {
    ty_out_t *o = ty_tcp_send(0, TY_F_SPLIT, 0, split, 0, NULL, 0, &all[2 * me], 16);
    rc = o ? ty_tcp_wait_msg(0, TY_F_SPLIT_ALL, 0, split, deadline, &m, err, capacity)
           : TY_MPI_SHIM_ERROR;
    if (o) {
      ty_tcp_out_cancel(o);
      free(o);
    }
    if (rc == TY_MPI_SHIM_OK && m->hdr.bytes == (size_t)size * 16) {
      memcpy(all, m->data, (size_t)size * 16);
    } else if (rc == TY_MPI_SHIM_OK) {
      rc = TY_MPI_SHIM_ERROR;
    }
    ty_tcp_msg_free(m);
  } else {
    for (int r = 1; r < size && rc == TY_MPI_SHIM_OK; ++r) {
      rc = ty_tcp_wait_msg(r, TY_F_SPLIT, 0, split, deadline, &m, err, capacity);
      if (rc == TY_MPI_SHIM_TIMEOUT) peer = r;
      if (rc == TY_MPI_SHIM_OK && m->hdr.bytes == 16) memcpy(&all[2 * r], m->data, 16);
      ty_tcp_msg_free(m);
      m = NULL;
    }
    ty_out_t **outs = calloc((size_t)size, sizeof(*outs));
    for (int r = 1; outs && r < size && rc == TY_MPI_SHIM_OK; ++r) {
      outs[r] = ty_tcp_send(r, TY_F_SPLIT_ALL, 0, split, 0, NULL, 0, all, (size_t)size * 16);
    }
    if (!outs) rc = TY_MPI_SHIM_ERROR;
    if (rc == TY_MPI_SHIM_OK) rc = ty_tcp_flush(outs, size, deadline, &peer, err, capacity);
    for (int r = 1; outs && r < size; ++r) {
      if (!outs[r]) continue;
      ty_tcp_out_cancel(outs[r]);
      free(outs[r]);
    }
    free(outs);
  }
  if (rc == TY_MPI_SHIM_TIMEOUT) {
    snprintf(err, capacity, "rank %d did not reach the group split within %g s (--dist-timeout)",
             peer >= 0 ? peer : 0, ty_tcp_w.timeout_s);
  } else if (rc != TY_MPI_SHIM_OK && !err[0]) {
    snprintf(err, capacity, "the group split failed (out of memory or a bad answer)");
  }
  if (rc == TY_MPI_SHIM_OK) {
    /* Members of this color, ordered by (key, world rank) as MPI orders them. */
    for (int r = 0; r < size; ++r) {
      if (all[2 * r] != color) continue;
      int at = c->size++;
      while (at > 0 && (all[2 * world[at - 1] + 1] > all[2 * r + 1])) {
        world[at] = world[at - 1];
        --at;
      }
      world[at] = r;
    }
    for (int i = 0; i < c->size; ++i) {
      if (world[i] == me) c->rank = i;
    }
    c->id = ty_comm_id(split, color);
    c->world = world;
    *out_comm = c;
    *out_rank = c->rank;
    *out_size = c->size;
  } else {
    free(world);
    free(c);
  }
  free(all);
  return rc == TY_MPI_SHIM_OK ? rc : TY_MPI_SHIM_ERROR;
}

static void ty_comm_free(ty_mpi_shim_comm_t *c) {
  if (!c || c == &ty_tcp_w.world) return;
  free(c->world);
  free(c);
}

static int ty_init(int *out_rank, int *out_size, int *out_local_rank, char *err,
                   size_t capacity) {
  if (ty_tcp_w.env.world_size < 1 || !(ty_tcp_w.timeout_s > 0)) {
    snprintf(err, capacity, "the TCP transport was not configured (a bug)");
    return TY_MPI_SHIM_ERROR;
  }
  ty_tcp_w.broken[0] = '\0';
  ty_tcp_w.splits = 0;
  int rc = ty_tcp_rendezvous(&ty_tcp_w.env, ty_tcp_w.timeout_s, &ty_tcp_w.mesh, err, capacity);
  /* The token proved every link: no copy of it stays in memory. */
  memset(ty_tcp_w.env.token, 0, sizeof(ty_tcp_w.env.token));
  if (rc != TY_MPI_SHIM_OK) return rc;
  const int n = ty_tcp_w.mesh.size;
  ty_tcp_w.peers = calloc((size_t)n, sizeof(*ty_tcp_w.peers));
  ty_tcp_w.world = (struct ty_mpi_shim_comm_s){.id = 0, .rank = ty_tcp_w.mesh.rank, .size = n};
  ty_tcp_w.world.world = calloc((size_t)n, sizeof(int));
  if (!ty_tcp_w.peers || !ty_tcp_w.world.world) {
    free(ty_tcp_w.peers);
    free(ty_tcp_w.world.world);
    ty_tcp_w.peers = NULL;
    ty_tcp_w.world.world = NULL;
    ty_tcp_mesh_free(&ty_tcp_w.mesh);
    snprintf(err, capacity, "out of memory for a world of %d ranks", n);
    return TY_MPI_SHIM_ERROR;
  }
  for (int r = 0; r < n; ++r) {
    ty_tcp_w.world.world[r] = r;
    ty_tcp_w.peers[r].fd = ty_tcp_w.mesh.fds[r];
    ty_tcp_w.peers[r].closed = r != ty_tcp_w.mesh.rank && ty_tcp_w.mesh.fds[r] < 0;
    ty_tcp_w.mesh.fds[r] = -1; /* the peers own them now */
  }
  *out_rank = ty_tcp_w.mesh.rank;
  *out_size = n;
  *out_local_rank = ty_tcp_w.env.local_rank;
  return TY_MPI_SHIM_OK;
}

/* Writes what is pending, says goodbye (FIN) and reads until every peer
 * has said it too (bounded), so that closing never resets a connection
 * whose last data a peer has not read yet. */
static void ty_finalize(void) {
  if (!ty_tcp_w.peers) return;
  const int n = ty_tcp_w.mesh.size;
  double deadline = ty_tcp_now() + (ty_tcp_w.timeout_s < 10 ? ty_tcp_w.timeout_s : 10);
  for (bool pending = true; pending && ty_tcp_now() < deadline;) {
    pending = false;
    for (int r = 0; r < n; ++r) pending = pending || ty_tcp_w.peers[r].out_head;
    if (pending) ty_tcp_progress(deadline - ty_tcp_now());
  }
  for (int r = 0; r < n; ++r) {
    if (ty_tcp_w.peers[r].fd >= 0) shutdown(ty_tcp_w.peers[r].fd, SHUT_WR);
  }
  deadline = ty_tcp_now() + 2;
  for (bool open = true; open && ty_tcp_now() < deadline;) {
    open = false;
    for (int r = 0; r < n; ++r) {
      ty_peer_t *p = &ty_tcp_w.peers[r];
      if (p->fd < 0) continue;
      open = true;
      char sink[4096];
      ssize_t got = recv(p->fd, sink, sizeof(sink), 0);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        close(p->fd);
        p->fd = -1;
      }
    }
    if (open) {
      struct pollfd fds[n > 0 ? n : 1];
      int k = 0;
      for (int r = 0; r < n; ++r) {
        if (ty_tcp_w.peers[r].fd >= 0) fds[k++] = (struct pollfd){ty_tcp_w.peers[r].fd, POLLIN, 0};
      }
      if (k) poll(fds, (nfds_t)k, 100);
    }
  }
  for (int r = 0; r < n; ++r) {
    ty_peer_t *p = &ty_tcp_w.peers[r];
    ty_tcp_peer_close(p);
    while (p->head) {
      ty_msg_t *m = p->head;
      p->head = m->next;
      ty_tcp_msg_free(m);
    }
    ty_tcp_msg_free(p->in_msg);
  }
  free(ty_tcp_w.peers);
  ty_tcp_w.peers = NULL;
  free(ty_tcp_w.world.world);
  ty_tcp_w.world.world = NULL;
  ty_tcp_mesh_free(&ty_tcp_w.mesh);
}

static void ty_abort(int code) {
  /* Peers see the connections end and name this rank at once. */
  for (int r = 0; ty_tcp_w.peers && r < ty_tcp_w.mesh.size; ++r) {
    if (ty_tcp_w.peers[r].fd >= 0) close(ty_tcp_w.peers[r].fd);
  }
  _exit(code);
}

static void ty_library_version(char *out, size_t capacity) {
  snprintf(out, capacity, "Trainyard TCP transport (rendezvous %s:%d)", ty_tcp_w.env.host,
           ty_tcp_w.env.port);
}

static void ty_rank_host(int world_rank, char *out, size_t capacity) {
  if (!capacity) return;
  out[0] = '\0';
  if (ty_tcp_w.mesh.info && world_rank >= 0 && world_rank < ty_tcp_w.mesh.size) {
    ty_tcp_host_of(world_rank, out, capacity);
  }
}

static const ty_mpi_shim_t ty_tcp_table = {
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

const ty_mpi_shim_t *ty_tcp_shim(void) { return &ty_tcp_table; }
