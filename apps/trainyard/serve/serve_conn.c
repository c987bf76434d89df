/* Open connections of `trainyard serve` and their read deadline (see
 * serve.h). libmicrohttpd's own connection timeout is an idle timeout: a
 * client that never finishes its head, or trickles a byte now and then,
 * would hold its connection for as long as it likes. The deadline here
 * counts from the moment a request is owed (accept, or the end of the
 * previous response on a kept-alive connection) to its last body byte. */
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "serve/serve.h"

struct ty_srv_sock_t {
  int fd;
  bool reading; /* the client owes a request head or body */
  bool cut;     /* the watchdog shut it down */
  double since; /* monotonic seconds: when the reading phase began */
  struct ty_srv_sock_t *prev, *next;
};

ty_srv_sock_t *ty_srv_conn_opened(ty_server_t *s, int fd) {
  ty_srv_sock_t *k = calloc(1, sizeof(*k));
  pthread_mutex_lock(&s->lock);
  s->open_connections++;
  if (k) {
    *k = (ty_srv_sock_t){.fd = fd, .reading = true, .since = ty_srv_now(), .next = s->socks};
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
        shutdown(k->fd, SHUT_RDWR);
        k->cut = true;
        s->metrics.read_timeouts++;
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
