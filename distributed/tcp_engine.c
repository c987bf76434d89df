/* The Trainyard TCP transport's progress engine (tcp_engine.h): one
 * function, ty_tcp_progress, polls every peer socket, reads whole frames
 * into a queue per peer and writes what is pending, so two ranks sending
 * each other large messages at once never deadlock (pipeline parallel
 * does). */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "distributed/tcp_engine.h"

ty_tcp_world_t ty_tcp_w;

void ty_tcp_host_of(int r, char *out, size_t capacity) {
  const ty_tcp_rank_info_t *i = &ty_tcp_w.mesh.info[r];
  snprintf(out, capacity, "%s (%s)", i->host, i->addr);
}

int ty_tcp_closed_error(int r, char *err, size_t capacity) {
  const ty_tcp_rank_info_t *i = &ty_tcp_w.mesh.info[r];
  snprintf(err, capacity, "rank %d (host %s, %s) closed its connection: it died or stopped",
           r, i->host, i->addr);
  return TY_MPI_SHIM_ERROR;
}

void ty_tcp_peer_close(ty_peer_t *p) {
  if (p->fd >= 0) close(p->fd);
  p->fd = -1;
  p->closed = true;
  ty_out_t *o = p->out_head;
  while (o) { /* nothing more can be written */
    ty_out_t *next = o->next;
    o->next = NULL;
    o = next;
  }
  p->out_head = p->out_tail = NULL;
}

/* Reads what `p` has: whole frames go to its queue. */
static void ty_read_peer(int r, ty_peer_t *p) {
  for (;;) {
    void *dst;
    size_t want;
    if (p->in_hdr_got < sizeof(ty_hdr_t)) {
      dst = (uint8_t *)&p->in_hdr + p->in_hdr_got;
      want = sizeof(ty_hdr_t) - p->in_hdr_got;
    } else {
      dst = p->in_msg->data + p->in_got;
      want = p->in_msg->hdr.bytes - p->in_got;
    }
    ssize_t n = want ? recv(p->fd, dst, want, 0) : 0;
    if (want && n == 0) {
      ty_tcp_peer_close(p);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) ty_tcp_peer_close(p);
      return;
    }
    if (p->in_hdr_got < sizeof(ty_hdr_t)) {
      p->in_hdr_got += (size_t)n;
      if (p->in_hdr_got < sizeof(ty_hdr_t)) continue;
      if (p->in_hdr.magic != TY_TCP_MAGIC || p->in_hdr.version != TY_TCP_FRAME_VERSION) {
        snprintf(ty_tcp_w.broken, sizeof(ty_tcp_w.broken),
                 "rank %d sent a frame this build cannot read (frame version %u, this build's "
                 "%u): run one trainyard build on every rank",
                 r, (unsigned)p->in_hdr.version, (unsigned)TY_TCP_FRAME_VERSION);
        ty_tcp_peer_close(p);
        return;
      }
      p->in_msg = calloc(1, sizeof(ty_msg_t));
      if (p->in_msg) p->in_msg->data = malloc(p->in_hdr.bytes ? p->in_hdr.bytes : 1);
      if (!p->in_msg || !p->in_msg->data) {
        if (p->in_msg) free(p->in_msg);
        p->in_msg = NULL;
        snprintf(ty_tcp_w.broken, sizeof(ty_tcp_w.broken),
                 "out of memory for a message of %llu bytes from rank %d",
                 (unsigned long long)p->in_hdr.bytes, r);
        ty_tcp_peer_close(p);
        return;
      }
      p->in_msg->hdr = p->in_hdr;
      p->in_got = 0;
    } else {
      p->in_got += (size_t)n;
    }
    if (p->in_got == p->in_msg->hdr.bytes) {
      if (p->tail) p->tail->next = p->in_msg;
      else p->head = p->in_msg;
      p->tail = p->in_msg;
      p->in_msg = NULL;
      p->in_hdr_got = 0;
    }
  }
}

static void ty_write_peer(ty_peer_t *p) {
  while (p->out_head) {
    ty_out_t *o = p->out_head;
    struct iovec iov[3];
    int n = 0;
    size_t at = o->done;
    const size_t seg[3] = {sizeof(ty_hdr_t), o->pre_bytes, o->hdr.bytes - o->pre_bytes};
    const uint8_t *base[3] = {(const uint8_t *)&o->hdr, o->pre, o->data};
    for (int i = 0; i < 3; ++i) {
      if (at >= seg[i]) {
        at -= seg[i];
        continue;
      }
      iov[n].iov_base = (void *)(base[i] + at);
      iov[n].iov_len = seg[i] - at;
      ++n;
      at = 0;
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(p->fd, &mh, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) ty_tcp_peer_close(p);
      return;
    }
    o->done += (size_t)w;
    if (o->done < o->total) return;
    p->out_head = o->next;
    if (!p->out_head) p->out_tail = NULL;
    o->next = NULL;
  }
}

/* Moves bytes on every open peer socket; waits at most `wait_s` for any. */
void ty_tcp_progress(double wait_s) {
  const int n = ty_tcp_w.mesh.size;
  struct pollfd fds[n > 0 ? n : 1];
  int idx[n > 0 ? n : 1], k = 0;
  for (int r = 0; r < n; ++r) {
    ty_peer_t *p = &ty_tcp_w.peers[r];
    if (p->fd < 0) continue;
    fds[k] = (struct pollfd){p->fd, (short)(POLLIN | (p->out_head ? POLLOUT : 0)), 0};
    idx[k++] = r;
  }
  if (!k) return;
  int ms = wait_s <= 0 ? 0 : wait_s > 0.1 ? 100 : (int)(wait_s * 1000) + 1;
  if (poll(fds, (nfds_t)k, ms) <= 0) return;
  for (int i = 0; i < k; ++i) {
    ty_peer_t *p = &ty_tcp_w.peers[idx[i]];
    if (p->fd >= 0 && (fds[i].revents & POLLOUT)) ty_write_peer(p);
    if (p->fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) ty_read_peer(idx[i], p);
  }
}

ty_out_t *ty_tcp_send(int peer, uint32_t type, uint64_t comm, int64_t tag, int64_t kind,
                      const void *pre, size_t pre_bytes, const void *data, size_t bytes) {
  ty_out_t *o = pre_bytes <= sizeof(o->pre) ? calloc(1, sizeof(*o)) : NULL;
  if (!o) return NULL;
  o->hdr = (ty_hdr_t){TY_TCP_MAGIC, TY_TCP_FRAME_VERSION, (uint16_t)type, comm, tag, kind,
                      pre_bytes + bytes};
  if (pre_bytes) memcpy(o->pre, pre, pre_bytes);
  o->pre_bytes = pre_bytes;
  o->data = data;
  o->total = sizeof(ty_hdr_t) + pre_bytes + bytes;
  o->peer = peer;
  ty_peer_t *p = &ty_tcp_w.peers[peer];
  if (p->closed) { /* kept so its owner sees it never completes */
    return o;
  }
  if (p->out_tail) p->out_tail->next = o;
  else p->out_head = o;
  p->out_tail = o;
  ty_write_peer(p); /* most messages fit the socket's buffer at once */
  return o;
}

static bool ty_out_queued(const ty_out_t *o) {
  for (const ty_out_t *q = ty_tcp_w.peers[o->peer].out_head; q; q = q->next) {
    if (q == o) return true;
  }
  return false;
}

/* Takes `o` back from its queue: a part written already leaves
 * the peer's stream unreadable, so that peer is then cut. */
void ty_tcp_out_cancel(ty_out_t *o) {
  ty_peer_t *p = &ty_tcp_w.peers[o->peer];
  if (ty_out_queued(o)) {
    if (o->done) {
      ty_tcp_peer_close(p);
      return;
    }
    ty_out_t **at = &p->out_head;
    while (*at != o) at = &(*at)->next;
    *at = o->next;
    if (p->out_tail == o) {
      p->out_tail = NULL;
      for (ty_out_t *q = p->out_head; q; q = q->next) p->out_tail = q;
    }
  }
}

/* The first queued frame of `type` on `comm` from `peer` (with `tag`, when
 * tag >= 0), taken off the queue; NULL when none. */
ty_msg_t *ty_tcp_take(int peer, uint32_t type, uint64_t comm, int64_t tag) {
  ty_peer_t *p = &ty_tcp_w.peers[peer];
  ty_msg_t *prev = NULL;
  for (ty_msg_t *m = p->head; m; prev = m, m = m->next) {
    if (m->hdr.type != type || m->hdr.comm != comm || (tag >= 0 && m->hdr.tag != tag)) continue;
    if (prev) prev->next = m->next;
    else p->head = m->next;
    if (p->tail == m) p->tail = prev;
    m->next = NULL;
    return m;
  }
  return NULL;
}

void ty_tcp_msg_free(ty_msg_t *m) {
  if (!m) return;
  free(m->data);
  free(m);
}

/* Waits for a frame (ty_tcp_take) until `deadline`: OK, TIMEOUT, or ERROR when
 * the peer's connection ended first. */
int ty_tcp_wait_msg(int peer, uint32_t type, uint64_t comm, int64_t tag, double deadline,
                    ty_msg_t **out, char *err, size_t capacity) {
  for (;;) {
    *out = ty_tcp_take(peer, type, comm, tag);
    if (*out) return TY_MPI_SHIM_OK;
    if (ty_tcp_w.peers[peer].closed) {
      if (ty_tcp_w.broken[0]) {
        snprintf(err, capacity, "%s", ty_tcp_w.broken);
        return TY_MPI_SHIM_ERROR;
      }
      return ty_tcp_closed_error(peer, err, capacity);
    }
    double left = deadline - ty_tcp_now();
    if (left <= 0) return TY_MPI_SHIM_TIMEOUT;
    ty_tcp_progress(left);
  }
}

/* Waits until the frames `o[0..n)` are written (into the kernel:
 * MPI's eager sends complete so too). */
int ty_tcp_flush(ty_out_t **o, int n, double deadline, int *out_peer, char *err,
                 size_t capacity) {
  for (;;) {
    int pending = -1;
    for (int i = 0; i < n && pending < 0; ++i) {
      if (o[i] && o[i]->done < o[i]->total) pending = i;
    }
    if (pending < 0) return TY_MPI_SHIM_OK;
    const int peer = o[pending]->peer;
    if (ty_tcp_w.peers[peer].closed) {
      *out_peer = peer;
      return ty_tcp_closed_error(peer, err, capacity);
    }
    double left = deadline - ty_tcp_now();
    if (left <= 0) {
      *out_peer = peer;
      return TY_MPI_SHIM_TIMEOUT;
    }
    ty_tcp_progress(left);
  }
}

