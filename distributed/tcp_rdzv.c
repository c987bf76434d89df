/* The rendezvous and the mesh of the TCP transport (tcp_internal.h): rank 0
 * listens at the rendezvous, every other rank connects (retrying until the
 * deadline), both prove they hold TRAINYARD_JOB_TOKEN (HMAC-SHA256 of the
 * other's random nonce), rank 0 checks the claims (one RANK each, one world
 * size) and sends the table or a refusal; then rank i connects to every
 * rank 0 < j < i and accepts from every j > i, authenticated the same way.
 * The link to rank 0 is the rendezvous connection itself. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "distributed/tcp_internal.h"
#include "hal/sha256.h"

enum { TY_NONCE = 32, TY_MAC = 32 };
/* Message kinds of the rendezvous and the mesh handshake. */
enum { TY_RZ_HELLO = 1, TY_RZ_REGISTER, TY_RZ_ACK, TY_RZ_REFUSE, TY_RZ_TABLE,
       TY_MESH_HELLO = 10, TY_MESH_PROOF, TY_MESH_CONFIRM };

double ty_tcp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ty_wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - ty_tcp_now();
    if (left <= 0) return 1;
    struct pollfd p = {fd, events, 0};
    int n = poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
    if (n < 0 && errno != EINTR) return 2;
    if (n > 0) return 0;
  }
}

int ty_tcp_read_full(int fd, void *buf, size_t n, double deadline) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
    if (r > 0) {
      got += (size_t)r;
    } else if (r == 0) {
      return 2;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      int w = ty_wait_fd(fd, POLLIN, deadline);
      if (w) return w;
    } else {
      return 2;
    }
  }
  return 0;
}

int ty_tcp_write_full(int fd, const void *buf, size_t n, double deadline) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
    if (r >= 0) {
      done += (size_t)r;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      int w = ty_wait_fd(fd, POLLOUT, deadline);
      if (w) return w;
    } else {
      return 2;
    }
  }
  return 0;
}

static void ty_mac(const char *token, const char *label, const void *a, size_t an,
                   const void *b, size_t bn, uint8_t out[TY_MAC]) {
  uint8_t msg[512];
  size_t ln = strlen(label);
  memcpy(msg, label, ln);
  memcpy(msg + ln, a, an);
  memcpy(msg + ln + an, b, bn);
  unsigned int len = TY_MAC;
  HMAC(EVP_sha256(), token, (int)strlen(token), msg, ln + an + bn, out, &len);
}

static bool ty_mac_ok(const uint8_t *a, const uint8_t *b) { return !CRYPTO_memcmp(a, b, TY_MAC); }

static int ty_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return flags < 0 ? -1 : fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static void ty_addr_text(const struct sockaddr_storage *ss, char *out, size_t capacity) {
  const void *a = ss->ss_family == AF_INET6
                      ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                      : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
  if (!inet_ntop(ss->ss_family, a, out, (socklen_t)capacity)) snprintf(out, capacity, "?");
}

static void ty_self_host(char *out, size_t capacity) {
  if (gethostname(out, capacity) != 0) snprintf(out, capacity, "?");
  out[capacity - 1] = '\0';
}

/* A reply of rank 0 on a rendezvous link: kind, payload length, MAC. */
typedef struct {
  uint32_t magic, kind, len;
  uint8_t mac[TY_MAC];
} ty_reply_t;

typedef struct {
  const char *token;
  uint8_t nonce_s[TY_NONCE], nonce_c[TY_NONCE];
} ty_session_t;

static void ty_reply_mac(const ty_session_t *s, uint32_t kind, const void *payload, size_t n,
                         uint8_t out[TY_MAC]) {
  uint8_t head[2 * TY_NONCE + 4];
  memcpy(head, s->nonce_c, TY_NONCE);
  memcpy(head + TY_NONCE, s->nonce_s, TY_NONCE);
  memcpy(head + 2 * TY_NONCE, &kind, 4);
  /* The payload (a table of up to thousands of ranks) is digested first. */
  uint8_t digest[32];
  /* SHA-256 fails only without memory; its zero digest makes a MAC the
   * client rejects, never one it accepts. */
  (void)!ty_sha256(payload, n, digest);
  ty_mac(s->token, "ty-rdzv-reply", head, sizeof(head), digest, sizeof(digest), out);
}

static int ty_reply_send(int fd, const ty_session_t *s, uint32_t kind, const void *payload,
                         size_t n, double deadline) {
  ty_reply_t r = {TY_TCP_MAGIC, kind, (uint32_t)n, {0}};
  ty_reply_mac(s, kind, payload, n, r.mac);
  int w = ty_tcp_write_full(fd, &r, sizeof(r), deadline);
  return w ? w : ty_tcp_write_full(fd, payload, n, deadline);
}

/* ---- rank 0 ---- */

typedef struct {
  int fd;
  ty_session_t session;
  int32_t rank, world;
  ty_tcp_rank_info_t info;
} ty_arrival_t;

/* One connection at the rendezvous: the handshake, its claim. 0: a rank
 * that proved the token (in *a); 1: refused or broken (closed here). */
static int ty_rz_accept_one(int fd, const ty_launch_env_t *env, double deadline,
                            ty_arrival_t *a) {
  a->fd = fd;
  a->session.token = env->token;
  uint32_t hello[2] = {TY_TCP_MAGIC, TY_RZ_HELLO};
  uint8_t reg[8 + TY_NONCE + 8 + sizeof(ty_tcp_rank_info_t) + TY_MAC] = {0};
  RAND_bytes(a->session.nonce_s, TY_NONCE);
  int w = ty_tcp_write_full(fd, hello, sizeof(hello), deadline);
  if (!w) w = ty_tcp_write_full(fd, a->session.nonce_s, TY_NONCE, deadline);
  if (!w) w = ty_tcp_read_full(fd, reg, sizeof(reg), deadline);
  uint32_t magic = 0, kind = 0;
  memcpy(&magic, reg, 4);
  memcpy(&kind, reg + 4, 4);
  if (w || magic != TY_TCP_MAGIC || kind != TY_RZ_REGISTER) {
    close(fd);
    return 1;
  }
  memcpy(a->session.nonce_c, reg + 8, TY_NONCE);
  const size_t body = sizeof(reg) - TY_MAC;
  uint8_t mac[TY_MAC];
  ty_mac(env->token, "ty-rdzv-register", a->session.nonce_s, TY_NONCE, reg, body, mac);
  if (!ty_mac_ok(mac, reg + body)) {
    char text[512];
    snprintf(text, sizeof(text),
             "rank 0 at %s:%d refused this rank: its TRAINYARD_JOB_TOKEN differs (every rank "
             "of the job needs the same token)",
             env->host, env->port);
    ty_reply_send(fd, &a->session, TY_RZ_REFUSE, text, strlen(text), deadline);
    close(fd);
    return 1;
  }
  memcpy(&a->rank, reg + 8 + TY_NONCE, 4);
  memcpy(&a->world, reg + 12 + TY_NONCE, 4);
  memcpy(&a->info, reg + 16 + TY_NONCE, sizeof(a->info));
  a->info.host[TY_TCP_NAME_MAX - 1] = a->info.addr[TY_TCP_NAME_MAX - 1] = '\0';
  if (ty_reply_send(fd, &a->session, TY_RZ_ACK, "", 0, deadline)) {
    close(fd);
    return 1;
  }
  return 0;
}

/* The job is refused: every rank that came learns why. */
static void ty_rz_refuse_all(ty_arrival_t *arr, int size, const char *text, double deadline) {
  for (int r = 1; r < size; ++r) {
    if (arr[r].fd < 0) continue;
    ty_reply_send(arr[r].fd, &arr[r].session, TY_RZ_REFUSE, text, strlen(text), deadline);
    close(arr[r].fd);
    arr[r].fd = -1;
  }
}

static int ty_rz_listen(const ty_launch_env_t *env, char *addr, size_t addr_cap, char *err,
                        size_t capacity) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE}, *res = NULL;
  char port[16];
  snprintf(port, sizeof(port), "%d", env->port);
  int rc = getaddrinfo(env->host, port, &hints, &res);
  if (rc) {
    snprintf(err, capacity, "rank 0 cannot resolve the rendezvous address %s: %s", env->host,
             gai_strerror(rc));
    return -1;
  }
  int fd = -1, e = 0;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128) || ty_nonblocking(fd)) {
      e = errno;
      close(fd);
      fd = -1;
    } else {
      ty_addr_text((const struct sockaddr_storage *)ai->ai_addr, addr, addr_cap);
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    snprintf(err, capacity,
             "rank 0 cannot listen at the rendezvous %s:%d: %s (pick a free port on this host "
             "for MASTER_PORT, and MASTER_ADDR one of its addresses)",
             env->host, env->port, strerror(e));
  }
  return fd;
}

static int ty_rz_rank0(const ty_launch_env_t *env, double timeout_s, ty_tcp_mesh_t *m,
                       char *err, size_t capacity) {
  const double deadline = ty_tcp_now() + timeout_s;
  ty_self_host(m->info[0].host, sizeof(m->info[0].host));
  int lfd = ty_rz_listen(env, m->info[0].addr, sizeof(m->info[0].addr), err, capacity);
  if (lfd < 0) return TY_MPI_SHIM_ERROR;
  m->info[0].port = env->port;
  ty_arrival_t *arr = calloc((size_t)m->size, sizeof(*arr));
  if (!arr) {
    close(lfd);
    snprintf(err, capacity, "out of memory for the rendezvous");
    return TY_MPI_SHIM_ERROR;
  }
  for (int r = 0; r < m->size; ++r) arr[r].fd = -1;
  arr[0].info = m->info[0];
  int arrived = 1, rc = TY_MPI_SHIM_OK;
  while (arrived < m->size && rc == TY_MPI_SHIM_OK) {
    if (ty_wait_fd(lfd, POLLIN, deadline) == 1) {
      char missing[256] = "", came[256] = "";
      for (int r = 0; r < m->size; ++r) {
        char *list = r == 0 || arr[r].fd >= 0 ? came : missing;
        size_t len = strlen(list);
        if (len < 200) snprintf(list + len, 256 - len, "%s%d", len ? "," : "", r);
        else if (len < 204) snprintf(list + len, 256 - len, ",...");
      }
      snprintf(err, capacity,
               "rank%s %s never arrived at the rendezvous %s:%d within %g s (rank%s %s did): "
               "start every rank with the same MASTER_ADDR/MASTER_PORT, or raise "
               "--dist-timeout",
               strchr(missing, ',') ? "s" : "", missing, env->host, env->port, timeout_s,
               strchr(came, ',') ? "s" : "", came);
      ty_rz_refuse_all(arr, m->size, err, ty_tcp_now() + 5);
      rc = TY_MPI_SHIM_TIMEOUT;
      break;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    ty_arrival_t a;
    double hs = ty_tcp_now() + 5 < deadline ? ty_tcp_now() + 5 : deadline;
    if (ty_rz_accept_one(fd, env, hs, &a)) continue; /* a stranger: keep waiting */
    if (a.world != m->size) {
      snprintf(err, capacity,
               "WORLD_SIZE differs between ranks: rank 0 on host %s (%s) has %d, rank %d on "
               "host %s (%s) has %d; every rank of one job needs the same WORLD_SIZE",
               m->info[0].host, m->info[0].addr, m->size, a.rank, a.info.host, a.info.addr,
               a.world);
    } else if (a.rank <= 0 || a.rank >= m->size || arr[a.rank].fd >= 0) {
      const ty_tcp_rank_info_t *first = &arr[a.rank > 0 && a.rank < m->size ? a.rank : 0].info;
      snprintf(err, capacity,
               "rank %d is claimed twice: by host %s (%s) and by host %s (%s); every rank of "
               "one job needs its own RANK",
               a.rank, first->host, first->addr, a.info.host, a.info.addr);
    } else {
      arr[a.rank] = a;
      ++arrived;
      continue;
    }
    ty_reply_send(a.fd, &a.session, TY_RZ_REFUSE, err, strlen(err), ty_tcp_now() + 5);
    close(a.fd);
    ty_rz_refuse_all(arr, m->size, err, ty_tcp_now() + 5);
    rc = TY_MPI_SHIM_ERROR;
  }
  close(lfd);
  if (rc == TY_MPI_SHIM_OK) {
    for (int r = 1; r < m->size; ++r) m->info[r] = arr[r].info;
    const size_t n = (size_t)m->size * sizeof(ty_tcp_rank_info_t);
    for (int r = 1; r < m->size && rc == TY_MPI_SHIM_OK; ++r) {
      m->fds[r] = arr[r].fd;
      arr[r].fd = -1;
      if (ty_reply_send(m->fds[r], &arr[r].session, TY_RZ_TABLE, m->info, n, deadline + 5)) {
        snprintf(err, capacity, "rank %d (host %s, %s) closed its connection at the rendezvous",
                 r, m->info[r].host, m->info[r].addr);
        rc = TY_MPI_SHIM_ERROR;
      }
    }
  }
  for (int r = 1; r < m->size; ++r) {
    if (arr[r].fd >= 0) close(arr[r].fd);
  }
  free(arr);
  return rc;
}

/* ---- the other ranks ---- */

/* Connects to host:port, retrying until `deadline` (the peer may not
 * listen yet). The socket, or -1 with err set. */
static int ty_connect(const char *host, int port, double deadline, const char *who, char *err,
                      size_t capacity) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  int e = 0;
  for (;;) {
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc == 0) {
      for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0 || ty_nonblocking(fd)) {
          if (fd >= 0) close(fd);
          continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
          e = errno;
          close(fd);
          continue;
        }
        int soerr = 0;
        socklen_t len = sizeof(soerr);
        double until = ty_tcp_now() + 1 < deadline ? ty_tcp_now() + 1 : deadline;
        if (ty_wait_fd(fd, POLLOUT, until) == 0 &&
            !getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) && soerr == 0) {
          freeaddrinfo(res);
          return fd;
        }
        e = soerr ? soerr : ETIMEDOUT;
        close(fd);
      }
      freeaddrinfo(res);
      res = NULL;
    }
    if (ty_tcp_now() >= deadline) {
      snprintf(err, capacity, "cannot reach %s at %s:%d: %s", who, host, port,
               rc ? gai_strerror(rc) : strerror(e));
      return -1;
    }
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

/* Reads a reply of rank 0; REFUSE puts its text into err. */
static int ty_reply_read(int fd, const ty_session_t *s, uint32_t want, void *payload, size_t n,
                         double deadline, const char *where, char *err, size_t capacity) {
  ty_reply_t r;
  int w = ty_tcp_read_full(fd, &r, sizeof(r), deadline);
  if (w == 1) {
    snprintf(err, capacity, "rank 0 at %s did not answer within the deadline (--dist-timeout)",
             where);
    return TY_MPI_SHIM_TIMEOUT;
  }
  if (w || r.magic != TY_TCP_MAGIC) {
    snprintf(err, capacity, "rank 0 at %s closed the rendezvous connection", where);
    return TY_MPI_SHIM_ERROR;
  }
  if (r.kind == TY_RZ_REFUSE) {
    size_t len = r.len < capacity ? r.len : capacity - 1;
    if (ty_tcp_read_full(fd, err, len, deadline)) len = 0;
    err[len] = '\0';
    if (!len) snprintf(err, capacity, "rank 0 at %s refused this rank", where);
    return TY_MPI_SHIM_ERROR;
  }
  uint8_t mac[TY_MAC];
  if (r.kind != want || r.len != n || ty_tcp_read_full(fd, payload, n, deadline)) {
    snprintf(err, capacity, "rank 0 at %s sent a rendezvous answer this build cannot read",
             where);
    return TY_MPI_SHIM_ERROR;
  }
  ty_reply_mac(s, r.kind, payload, n, mac);
  if (!ty_mac_ok(mac, r.mac)) {
    snprintf(err, capacity,
             "the rendezvous at %s does not hold this rank's TRAINYARD_JOB_TOKEN (its proof "
             "differs): is it another job's rank 0?",
             where);
    return TY_MPI_SHIM_ERROR;
  }
  return TY_MPI_SHIM_OK;
}

static int ty_listen_on(const struct sockaddr_storage *local, socklen_t len, int *out_port) {
  struct sockaddr_storage a = *local;
  if (a.ss_family == AF_INET6) ((struct sockaddr_in6 *)&a)->sin6_port = 0;
  else ((struct sockaddr_in *)&a)->sin_port = 0;
  int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&a, len) || listen(fd, 128) || ty_nonblocking(fd) ||
      getsockname(fd, (struct sockaddr *)&a, &len)) {
    close(fd);
    return -1;
  }
  *out_port = ntohs(a.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&a)->sin6_port
                                            : ((struct sockaddr_in *)&a)->sin_port);
  return fd;
}

/* The mesh handshake between ranks `low` (accepts) and `high` (connects). */
typedef struct {
  uint32_t magic, kind;
  int32_t from, to;
  uint8_t nonce[TY_NONCE];
  uint8_t mac[TY_MAC];
} ty_mesh_msg_t;

static void ty_mesh_mac(const char *token, const char *label, const ty_mesh_msg_t *a,
                        const uint8_t *other_nonce, uint8_t out[TY_MAC]) {
  ty_mac(token, label, a, offsetof(ty_mesh_msg_t, mac), other_nonce, TY_NONCE, out);
}

static int ty_mesh_connect(const ty_launch_env_t *env, ty_tcp_mesh_t *m, int j, double deadline,
                           char *err, size_t capacity) {
  char who[128];
  snprintf(who, sizeof(who), "rank %d (host %s)", j, m->info[j].host);
  int fd = ty_connect(m->info[j].addr, m->info[j].port, deadline, who, err, capacity);
  if (fd < 0) return TY_MPI_SHIM_ERROR;
  ty_mesh_msg_t hi = {TY_TCP_MAGIC, TY_MESH_HELLO, m->rank, j, {0}, {0}}, proof, confirm;
  RAND_bytes(hi.nonce, TY_NONCE);
  uint8_t mac[TY_MAC];
  int w = ty_tcp_write_full(fd, &hi, sizeof(hi), deadline);
  if (!w) w = ty_tcp_read_full(fd, &proof, sizeof(proof), deadline);
  if (!w) ty_mesh_mac(env->token, "ty-mesh-proof", &proof, hi.nonce, mac);
  if (w || proof.magic != TY_TCP_MAGIC || proof.kind != TY_MESH_PROOF || proof.from != j ||
      proof.to != m->rank || !ty_mac_ok(mac, proof.mac)) {
    close(fd);
    snprintf(err, capacity, "rank %d (host %s, %s:%d) did not prove the job token on the mesh",
             j, m->info[j].host, m->info[j].addr, m->info[j].port);
    return TY_MPI_SHIM_ERROR;
  }
  confirm = (ty_mesh_msg_t){TY_TCP_MAGIC, TY_MESH_CONFIRM, m->rank, j, {0}, {0}};
  memcpy(confirm.nonce, hi.nonce, TY_NONCE);
  ty_mesh_mac(env->token, "ty-mesh-confirm", &confirm, proof.nonce, confirm.mac);
  if (ty_tcp_write_full(fd, &confirm, sizeof(confirm), deadline)) {
    close(fd);
    snprintf(err, capacity, "rank %d (host %s) closed its mesh connection", j, m->info[j].host);
    return TY_MPI_SHIM_ERROR;
  }
  m->fds[j] = fd;
  return TY_MPI_SHIM_OK;
}

/* One connection on the mesh listener: a higher rank that proves the
 * token, or a stranger (closed, not counted). */
static void ty_mesh_accept_one(const ty_launch_env_t *env, ty_tcp_mesh_t *m, int fd,
                               double deadline) {
  ty_mesh_msg_t hi, proof, confirm;
  uint8_t mac[TY_MAC];
  if (ty_tcp_read_full(fd, &hi, sizeof(hi), deadline) || hi.magic != TY_TCP_MAGIC ||
      hi.kind != TY_MESH_HELLO || hi.to != m->rank || hi.from <= m->rank ||
      hi.from >= m->size || m->fds[hi.from] >= 0) {
    close(fd);
    return;
  }
  proof = (ty_mesh_msg_t){TY_TCP_MAGIC, TY_MESH_PROOF, m->rank, hi.from, {0}, {0}};
  RAND_bytes(proof.nonce, TY_NONCE);
  ty_mesh_mac(env->token, "ty-mesh-proof", &proof, hi.nonce, proof.mac);
  if (ty_tcp_write_full(fd, &proof, sizeof(proof), deadline) ||
      ty_tcp_read_full(fd, &confirm, sizeof(confirm), deadline)) {
    close(fd);
    return;
  }
  ty_mesh_mac(env->token, "ty-mesh-confirm", &confirm, proof.nonce, mac);
  if (confirm.magic != TY_TCP_MAGIC || confirm.kind != TY_MESH_CONFIRM ||
      confirm.from != hi.from || !ty_mac_ok(mac, confirm.mac) ||
      memcmp(confirm.nonce, hi.nonce, TY_NONCE)) {
    close(fd);
    return;
  }
  m->fds[hi.from] = fd;
}

static int ty_rz_rank(const ty_launch_env_t *env, double timeout_s, ty_tcp_mesh_t *m, char *err,
                      size_t capacity) {
  const double start = ty_tcp_now();
  /* Rank 0 tells who is missing at its deadline: wait a little longer. */
  const double deadline = start + timeout_s + (timeout_s < 5 ? timeout_s : 5);
  char where[300];
  snprintf(where, sizeof(where), "%s:%d", env->host, env->port);
  int fd = ty_connect(env->host, env->port, start + timeout_s, "rank 0's rendezvous", err,
                      capacity);
  if (fd < 0) {
    const size_t n = strlen(err);
    snprintf(err + n, capacity - n,
             " within %g s: start rank 0 with the same MASTER_ADDR/MASTER_PORT (or "
             "TRAINYARD_RENDEZVOUS), open that port, or raise --dist-timeout",
             timeout_s);
    return TY_MPI_SHIM_TIMEOUT;
  }
  m->fds[0] = fd;
  struct sockaddr_storage local;
  socklen_t len = sizeof(local);
  int lfd = -1, port = 0;
  if (!getsockname(fd, (struct sockaddr *)&local, &len)) lfd = ty_listen_on(&local, len, &port);
  if (lfd < 0) {
    snprintf(err, capacity, "cannot open this rank's mesh listener: %s", strerror(errno));
    return TY_MPI_SHIM_ERROR;
  }
  ty_tcp_rank_info_t *me = &m->info[m->rank];
  ty_self_host(me->host, sizeof(me->host));
  ty_addr_text(&local, me->addr, sizeof(me->addr));
  me->port = port;
  ty_session_t s = {.token = env->token};
  uint32_t hello[2];
  uint8_t reg[8 + TY_NONCE + 8 + sizeof(ty_tcp_rank_info_t) + TY_MAC];
  int rc = TY_MPI_SHIM_ERROR;
  if (ty_tcp_read_full(fd, hello, sizeof(hello), deadline) || hello[0] != TY_TCP_MAGIC ||
      hello[1] != TY_RZ_HELLO || ty_tcp_read_full(fd, s.nonce_s, TY_NONCE, deadline)) {
    snprintf(err, capacity, "%s is not a Trainyard rendezvous (no greeting)", where);
    goto out;
  }
  RAND_bytes(s.nonce_c, TY_NONCE);
  const uint32_t head[2] = {TY_TCP_MAGIC, TY_RZ_REGISTER};
  const int32_t claim[2] = {m->rank, m->size};
  memcpy(reg, head, 8);
  memcpy(reg + 8, s.nonce_c, TY_NONCE);
  memcpy(reg + 8 + TY_NONCE, claim, 8);
  memcpy(reg + 16 + TY_NONCE, me, sizeof(*me));
  ty_mac(env->token, "ty-rdzv-register", s.nonce_s, TY_NONCE, reg, sizeof(reg) - TY_MAC,
         reg + sizeof(reg) - TY_MAC);
  if (ty_tcp_write_full(fd, reg, sizeof(reg), deadline)) {
    snprintf(err, capacity, "rank 0 at %s closed the rendezvous connection", where);
    goto out;
  }
  rc = ty_reply_read(fd, &s, TY_RZ_ACK, NULL, 0, deadline, where, err, capacity);
  if (rc == TY_MPI_SHIM_OK) {
    rc = ty_reply_read(fd, &s, TY_RZ_TABLE, m->info, (size_t)m->size * sizeof(*m->info),
                       deadline, where, err, capacity);
  }
  for (int j = 1; rc == TY_MPI_SHIM_OK && j < m->rank; ++j) {
    rc = ty_mesh_connect(env, m, j, deadline, err, capacity);
  }
  for (int need = m->size - 1 - m->rank; rc == TY_MPI_SHIM_OK && need > 0;) {
    if (ty_wait_fd(lfd, POLLIN, deadline) == 1) {
      int j = m->rank + 1;
      while (j < m->size && m->fds[j] >= 0) ++j;
      snprintf(err, capacity,
               "rank %d (host %s, %s) did not connect to this rank's mesh within the deadline "
               "(--dist-timeout)",
               j, m->info[j].host, m->info[j].addr);
      rc = TY_MPI_SHIM_TIMEOUT;
      break;
    }
    int afd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (afd < 0) continue;
    int one = 1;
    setsockopt(afd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int before = 0;
    for (int j = 0; j < m->size; ++j) before += m->fds[j] >= 0;
    ty_mesh_accept_one(env, m, afd, deadline);
    int after = 0;
    for (int j = 0; j < m->size; ++j) after += m->fds[j] >= 0;
    need -= after - before;
  }
out:
  close(lfd);
  return rc;
}

int ty_tcp_rendezvous(const ty_launch_env_t *env, double timeout_s, ty_tcp_mesh_t *out,
                      char *err, size_t capacity) {
  *out = (ty_tcp_mesh_t){.rank = env->rank, .size = env->world_size};
  out->fds = malloc((size_t)out->size * sizeof(int));
  out->info = calloc((size_t)out->size, sizeof(*out->info));
  if (!out->fds || !out->info) {
    ty_tcp_mesh_free(out);
    snprintf(err, capacity, "out of memory for a world of %d ranks", env->world_size);
    return TY_MPI_SHIM_ERROR;
  }
  for (int r = 0; r < out->size; ++r) out->fds[r] = -1;
  int rc = env->rank == 0 ? ty_rz_rank0(env, timeout_s, out, err, capacity)
                          : ty_rz_rank(env, timeout_s, out, err, capacity);
  if (rc != TY_MPI_SHIM_OK) ty_tcp_mesh_free(out);
  return rc;
}

void ty_tcp_mesh_free(ty_tcp_mesh_t *m) {
  for (int r = 0; m->fds && r < m->size; ++r) {
    if (m->fds[r] >= 0) close(m->fds[r]);
  }
  free(m->fds);
  free(m->info);
  m->fds = NULL;
  m->info = NULL;
}
