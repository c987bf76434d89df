/* The TCP transport's progress engine (tcp_engine.c), used by its
 * collectives and shim table (tcp_world.c); private to distributed/. Frames are a
 * fixed header (magic, version, type, communicator, tag or sequence,
 * collective kind, payload bytes) and the payload. */
#ifndef TY_DIST_TCP_ENGINE_H_
#define TY_DIST_TCP_ENGINE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "distributed/tcp_internal.h"

/* Frame types. */
enum { TY_F_P2P = 1, TY_F_CONTRIB, TY_F_VERDICT, TY_F_BCAST, TY_F_SPLIT, TY_F_SPLIT_ALL };

/* The frame format's version: a rank of another build is refused by name. */
#define TY_TCP_FRAME_VERSION 1

typedef struct {
  uint32_t magic;
  uint16_t version, type;
  uint64_t comm;
  int64_t tag;   /* the p2p tag, or the collective's sequence number */
  int64_t kind;  /* the collective (TY_MPI_SHIM_KIND_*) */
  uint64_t bytes;
} ty_hdr_t;

typedef struct ty_msg_s {
  struct ty_msg_s *next;
  ty_hdr_t hdr;
  uint8_t *data;
} ty_msg_t;

/* Pending output: a header, a small prefix (copied) and the caller's data
 * (kept valid until done). It belongs to its sender, who frees it after
 * ty_tcp_flush and ty_tcp_out_cancel. */
typedef struct ty_out_s {
  struct ty_out_s *next;
  ty_hdr_t hdr;
  uint8_t pre[64];
  size_t pre_bytes;
  const uint8_t *data;
  size_t total, done;
  int peer;
} ty_out_t;

typedef struct {
  int fd;
  bool closed;
  /* input: the frame being read */
  ty_hdr_t in_hdr;
  size_t in_hdr_got;
  ty_msg_t *in_msg;
  size_t in_got;
  ty_msg_t *head, *tail;
  ty_out_t *out_head, *out_tail;
} ty_peer_t;

struct ty_mpi_shim_comm_s {
  uint64_t id;
  int rank, size;
  int *world; /* world rank of each rank */
  int64_t sequence;
};

typedef struct ty_tcp_world_t {
  ty_launch_env_t env;
  double timeout_s;
  ty_tcp_mesh_t mesh;
  ty_peer_t *peers;
  struct ty_mpi_shim_comm_s world;
  int64_t splits;
  char broken[256]; /* a peer's stream that can no longer be trusted */
} ty_tcp_world_t;

extern ty_tcp_world_t ty_tcp_w;

/* "rank 1 (host h2, 10.88.0.2) closed its connection ..." into err; ERROR. */
int ty_tcp_closed_error(int r, char *err, size_t capacity);
/* "h2 (10.88.0.2)": where world rank r runs. */
void ty_tcp_host_of(int r, char *out, size_t capacity);
void ty_tcp_peer_close(ty_peer_t *p);
/* Moves bytes on every open peer socket; waits at most `wait_s` for any. */
void ty_tcp_progress(double wait_s);
/* Queues a frame to world rank `peer`: `pre` (copied, <= 64 bytes) then
 * `data` (not copied: valid until the frame is written or taken back by
 * ty_tcp_out_cancel). The caller frees the frame after that. NULL when out
 * of memory or `pre` is too long. */
ty_out_t *ty_tcp_send(int peer, uint32_t type, uint64_t comm, int64_t tag, int64_t kind,
                      const void *pre, size_t pre_bytes, const void *data, size_t bytes);
void ty_tcp_out_cancel(ty_out_t *o);
ty_msg_t *ty_tcp_take(int peer, uint32_t type, uint64_t comm, int64_t tag);
void ty_tcp_msg_free(ty_msg_t *m);
/* A frame from `peer` (ty_tcp_take's match) by `deadline`: OK, TIMEOUT,
 * or ERROR when the peer's connection ended first. */
int ty_tcp_wait_msg(int peer, uint32_t type, uint64_t comm, int64_t tag, double deadline,
                    ty_msg_t **out, char *err, size_t capacity);
/* Until the frames o[0..n) (NULL ones skipped) are written; the peer at fault in
 * *out_peer on TIMEOUT or ERROR. */
int ty_tcp_flush(ty_out_t **o, int n, double deadline, int *out_peer, char *err,
                 size_t capacity);

#endif /* TY_DIST_TCP_ENGINE_H_ */
