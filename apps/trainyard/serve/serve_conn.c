/* Open connections of `trainyard serve` and their read deadline (see
 * serve.h). libmicrohttpd's own connection timeout is an idle timeout: a
 * client that never finishes its head, or trickles a byte now and then,
 * would hold its connection for as long as it likes. The deadline here
 * counts from the moment a request is owed (accept, or the end of the
 * previous response on a kept-alive connection) to its last body byte. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/serve.h"

struct ty_srv_sock_t {
  int fd;
  /* Both ends, as at accept: the watchdog shuts fd down only while it is
   * still this connection (never a descriptor reused by something else). */
  struct sockaddr_storage peer, local;
  socklen_t peer_len, local_len;
  bool reading; /* the client owes a request head or body */
  bool cut;     /* the watchdog shut it down */
  double since; /* monotonic seconds: when the reading phase began */
  struct ty_srv_sock_t *prev, *next;
};

ty_srv_sock_t *ty_srv_conn_opened(ty_server_t *s, int fd) {
  ty_srv_sock_t *k = calloc(1, sizeof(*k));
  if (k) {
    k->peer_len = sizeof(k->peer);
    k->local_len = sizeof(k->local);
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&k->peer, &k->peer_len) != 0 ||
        getsockname(fd, (struct sockaddr *)&k->local, &k->local_len) != 0) {
      k->fd = -1; /* not a connected socket we can tell again: never cut */
    } else {
      k->fd = fd;
    }
  }
  pthread_mutex_lock(&s->lock);
  s->open_connections++;
  if (k) {
    k->reading = true;
    k->since = ty_srv_now();
    k->next = s->socks;
    if (s->socks) s->socks->prev = k;
    s->socks = k;
  }
  pthread_mutex_unlock(&s->lock);
  return k;
}

/* libmicrohttpd reports the close before it closes the socket, so the
 * watchdog never touches a descriptor that another connection reuses. */
void ty_srv_conn_closed(ty_server_t *s, ty_srv_sock_t *k) {
  pthread_mutex_lock(&s->lock);
  s->open_connections--;
  if (k) {
    if (k->prev) k->prev->next = k->next;
    else s->socks = k->next;
    if (k->next) k->next->prev = k->prev;
  }
  pthread_mutex_unlock(&s->lock);
  free(k);
}

void ty_srv_conn_reading(ty_server_t *s, ty_srv_sock_t *k, bool reading) {
  if (!k) return;
  pthread_mutex_lock(&s->lock);
  /* A new reading phase restarts the clock, also after an answer given
   * before the request was read (the next request gets a full term). */
  if (reading) k->since = ty_srv_now();
  k->reading = reading;
  pthread_mutex_unlock(&s->lock);
}

/* Whether fd is still the connection k recorded: a connected socket (not a
 * listening one) with the same two ends. */
static bool ty_srv_sock_same(const ty_srv_sock_t *k) {
  if (k->fd < 0) return false;
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (getsockopt(k->fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) {
    return false;
  }
  struct sockaddr_storage peer, local;
  socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
  return getpeername(k->fd, (struct sockaddr *)&peer, &peer_len) == 0 &&
         getsockname(k->fd, (struct sockaddr *)&local, &local_len) == 0 &&
         peer_len == k->peer_len && local_len == k->local_len &&
         !memcmp(&peer, &k->peer, peer_len) && !memcmp(&local, &k->local, local_len);
}

static void *ty_srv_watchdog_main(void *arg) {
  ty_server_t *s = arg;
  /* A tenth of the deadline, at most 100 ms: a cut comes at most 10 %
   * late. */
  double tick = s->options.read_timeout / 10 < 0.1 ? s->options.read_timeout / 10 : 0.1;
  struct timespec pause = {0, (long)(tick * 1e9)};
  pthread_mutex_lock(&s->lock);
  while (!s->watchdog_quit) {
    double now = ty_srv_now();
    for (ty_srv_sock_t *k = s->socks; k; k = k->next) {
      if (k->reading && !k->cut && now - k->since > s->options.read_timeout) {
        /* The connection's thread sees end-of-file and closes it. */
        if (ty_srv_sock_same(k)) {
          shutdown(k->fd, SHUT_RDWR);
          s->metrics.read_timeouts++;
        }
        k->cut = true;
      }
    }
    pthread_mutex_unlock(&s->lock);
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&s->lock);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

ty_status_t ty_srv_watchdog_start(ty_server_t *s) {
  if (pthread_create(&s->watchdog, NULL, ty_srv_watchdog_main, s) != 0) {
    return ty_status_make(TY_CODE_INTERNAL, "cannot start the read-deadline thread");
  }
  s->watchdog_running = true;
  return TY_OK;
}

void ty_srv_watchdog_stop(ty_server_t *s) {
  if (!s->watchdog_running) return;
  pthread_mutex_lock(&s->lock);
  s->watchdog_quit = true;
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->watchdog, NULL);
  s->watchdog_running = false;
}
