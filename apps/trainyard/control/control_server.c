/* The run's side of `trainyard control` (control.h): a Unix socket in the
 * run folder, a registry entry, and one thread that answers status and
 * posts the other requests for the training loop. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "control_internal.h"
#include "hal/file.h"

#define TY_CONTROL_KINDS 3
#define TY_CONTROL_WAITERS 8

struct ty_control_server_t {
  int listen_fd, wake[2];
  pthread_t thread;
  bool started;
  pthread_mutex_t mu;
  ty_control_progress_t progress;
  unsigned pending;
  int waiting[TY_CONTROL_KINDS][TY_CONTROL_WAITERS];
  size_t waiting_count[TY_CONTROL_KINDS];
  char socket_path[PATH_MAX + 64], entry_path[PATH_MAX + 64], out_dir[PATH_MAX];
  char backend[256];
  json_t *config;
  time_t started_at;
};

static const char *const ty_control_names[TY_CONTROL_KINDS] = {"save", "stop", "abort"};

static json_t *ty_control_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The snapshot as a status reply (under mu). */
static json_t *ty_control_status_json(const ty_control_server_t *srv) {
  const ty_control_progress_t *p = &srv->progress;
  json_t *o = json_pack("{s:b, s:i, s:s, s:s, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:I}",
                        "ok", 1, "pid", (int)getpid(), "out", srv->out_dir, "backend",
                        srv->backend, "step", (json_int_t)p->step, "total_steps",
                        (json_int_t)p->total_steps, "epoch", (json_int_t)p->epoch, "loss",
                        ty_control_real(p->loss), "val_loss", ty_control_real(p->val_loss),
                        "eval_acc", ty_control_real(p->eval_acc), "tokens_per_s",
                        ty_control_real(p->tokens_per_s), "eta_s", ty_control_real(p->eta_s),
                        "started", (json_int_t)srv->started_at);
  if (o && srv->config) json_object_set(o, "config", srv->config);
  return o;
}

static void ty_control_answer(int fd, bool ok, const char *error) {
  json_t *r = json_pack("{s:b}", "ok", ok);
  if (r && error) json_object_set_new(r, "error", json_string(error));
  if (r) ty_status_free(ty_control_send_line(fd, r));
  json_decref(r);
}

/* One connection: one request, acted on only when the peer is the run's
 * own user. */
static void ty_control_serve(ty_control_server_t *srv, int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  char text[256];
  json_t *request = NULL;
  /* The request is read (and ignored) before a refusal, so that the client
   * reads the refusal instead of a broken pipe. A client that connects and
   * says nothing must not hold the server: 2 s. */
  ty_status_t s = ty_control_read_line(fd, 2000, TY_CONTROL_MAX_REQUEST, &request);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
    snprintf(text, sizeof(text), "refused: this run belongs to uid %u, and only its owner "
             "controls it", (unsigned)geteuid());
    ty_control_answer(fd, false, text);
    close(fd);
    json_decref(request);
    ty_status_free(s);
    return;
  }
  const char *command = s ? NULL : json_string_value(json_object_get(request, "command"));
  if (s || !command) {
    snprintf(text, sizeof(text), "bad request: %s",
             s ? ty_status_message(s) : "no \"command\" string");
    ty_control_answer(fd, false, text);
    close(fd);
  } else if (!strcmp(command, "status")) {
    pthread_mutex_lock(&srv->mu);
    json_t *reply = ty_control_status_json(srv);
    pthread_mutex_unlock(&srv->mu);
    if (reply) ty_status_free(ty_control_send_line(fd, reply));
    json_decref(reply);
    close(fd);
  } else {
    int kind = -1;
    for (int k = 0; k < TY_CONTROL_KINDS; ++k) {
      if (!strcmp(command, ty_control_names[k])) kind = k;
    }
    pthread_mutex_lock(&srv->mu);
    bool queued = kind >= 0 && srv->waiting_count[kind] < TY_CONTROL_WAITERS;
    if (queued) {
      /* The training loop answers once it has acted. */
      srv->waiting[kind][srv->waiting_count[kind]++] = fd;
      srv->pending |= 1u << kind;
    }
    pthread_mutex_unlock(&srv->mu);
    if (!queued) {
      snprintf(text, sizeof(text), kind < 0 ? "unknown command \"%.64s\" (status, save, stop, "
               "abort)" : "too many \"%.64s\" requests are waiting already", command);
      ty_control_answer(fd, false, text);
      close(fd);
    }
  }
  json_decref(request);
  ty_status_free(s);
}

static void *ty_control_thread(void *arg) {
  ty_control_server_t *srv = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = srv->listen_fd, .events = POLLIN},
                          {.fd = srv->wake[0], .events = POLLIN}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || p[1].revents) break;
    if (p[0].revents & POLLIN) {
      int fd = accept4(srv->listen_fd, NULL, NULL, SOCK_CLOEXEC);
      if (fd >= 0) ty_control_serve(srv, fd);
    }
  }
  return NULL;
}

static ty_status_t ty_control_write_entry(ty_control_server_t *srv, const char *registry) {
  snprintf(srv->entry_path, sizeof(srv->entry_path), "%s/%d.json", registry, (int)getpid());
  json_t *entry = json_pack("{s:i, s:s, s:s, s:s, s:I, s:I}", "pid", (int)getpid(), "out",
                            srv->out_dir, "socket", srv->socket_path, "backend", srv->backend,
                            "uid", (json_int_t)geteuid(), "started", (json_int_t)srv->started_at);
  char *text = entry ? json_dumps(entry, JSON_COMPACT) : NULL;
  json_decref(entry);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = ty_file_write_atomic(srv->entry_path, text, strlen(text));
  free(text);
  if (s) srv->entry_path[0] = '\0';
  return s;
}

ty_status_t ty_control_server_start(const ty_control_server_options_t *o,
                                    ty_control_server_t **out) {
  *out = NULL;
  char registry[PATH_MAX];
  TY_RETURN_IF_ERROR(ty_control_registry_dir(o->registry, registry, sizeof(registry)));
  ty_control_server_t *srv = calloc(1, sizeof(*srv));
  if (!srv) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  srv->listen_fd = srv->wake[0] = srv->wake[1] = -1;
  pthread_mutex_init(&srv->mu, NULL);
  srv->progress = (ty_control_progress_t){.loss = NAN, .val_loss = NAN, .eval_acc = NAN,
                                          .tokens_per_s = NAN, .eta_s = NAN};
  srv->started_at = time(NULL);
  snprintf(srv->backend, sizeof(srv->backend), "%s", o->backend);
  srv->config = o->config ? json_deep_copy(o->config) : NULL;
  ty_status_t s = TY_OK;
  if (!realpath(o->out_dir, srv->out_dir)) {
    s = ty_status_from_errno(errno, "cannot resolve the run folder %s", o->out_dir);
  }
  snprintf(srv->socket_path, sizeof(srv->socket_path), "%s/%s", srv->out_dir,
           TY_CONTROL_SOCKET_NAME);
  /* What a killed run left: the caller holds the folder's lock, so no live
   * run serves it. Only a socket is removed, never a file of the user's. */
  struct stat st;
  if (!s && lstat(srv->socket_path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION, "%s is in the way of the control socket "
                         "(not a socket): move it away", srv->socket_path);
    } else if (unlink(srv->socket_path) != 0) {
      s = ty_status_from_errno(errno, "cannot remove the old control socket %s",
                               srv->socket_path);
    }
  }
  struct sockaddr_un addr;
  int dirfd = -1;
  if (!s) s = ty_control_sockaddr(srv->socket_path, &addr, &dirfd);
  if (!s) {
    srv->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv->listen_fd < 0) s = ty_status_from_errno(errno, "cannot make a socket");
  }
  if (!s && bind(srv->listen_fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
    s = ty_status_from_errno(errno, "cannot make the control socket %s", srv->socket_path);
    close(srv->listen_fd);
    srv->listen_fd = -1;
  }
  if (dirfd >= 0) close(dirfd);
  /* Owner only. Between bind and chmod the umask's mode applies; the
   * SO_PEERCRED check of every connection is what refuses other users. */
  if (!s && chmod(srv->socket_path, 0600) != 0) {
    s = ty_status_from_errno(errno, "cannot chmod the control socket %s", srv->socket_path);
  }
  if (!s && listen(srv->listen_fd, 16) != 0) {
    s = ty_status_from_errno(errno, "cannot listen on %s", srv->socket_path);
  }
  if (!s && pipe2(srv->wake, O_CLOEXEC) != 0) s = ty_status_from_errno(errno, "cannot make a pipe");
  if (!s) s = ty_control_write_entry(srv, registry);
  if (!s && pthread_create(&srv->thread, NULL, ty_control_thread, srv) != 0) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "cannot start the control thread");
  }
  if (!s) srv->started = true;
  if (s) {
    ty_control_server_stop(srv);
    return s;
  }
  *out = srv;
  return TY_OK;
}

void ty_control_server_stop(ty_control_server_t *srv) {
  if (!srv) return;
  if (srv->started) {
    ssize_t ignored = write(srv->wake[1], "x", 1);
    (void)ignored;
    pthread_join(srv->thread, NULL);
  }
  char text[128];
  snprintf(text, sizeof(text), "the run ended at step %lld before it could act on this",
           (long long)srv->progress.step);
  for (int k = 0; k < TY_CONTROL_KINDS; ++k) {
    for (size_t i = 0; i < srv->waiting_count[k]; ++i) {
      ty_control_answer(srv->waiting[k][i], false, text);
      close(srv->waiting[k][i]);
    }
  }
  if (srv->entry_path[0]) unlink(srv->entry_path);
  if (srv->listen_fd >= 0) {
    close(srv->listen_fd);
    unlink(srv->socket_path);
  }
  if (srv->wake[0] >= 0) close(srv->wake[0]);
  if (srv->wake[1] >= 0) close(srv->wake[1]);
  json_decref(srv->config);
  pthread_mutex_destroy(&srv->mu);
  free(srv);
}

void ty_control_server_update(ty_control_server_t *srv, const ty_control_progress_t *p) {
  if (!srv) return;
  pthread_mutex_lock(&srv->mu);
  srv->progress = *p;
  pthread_mutex_unlock(&srv->mu);
}

unsigned ty_control_server_take(ty_control_server_t *srv) {
  if (!srv) return 0;
  pthread_mutex_lock(&srv->mu);
  unsigned bits = srv->pending;
  srv->pending = 0;
  pthread_mutex_unlock(&srv->mu);
  return bits;
}

void ty_control_server_reply(ty_control_server_t *srv, unsigned kind, bool ok, json_t *reply) {
  if (!srv) return;
  int k = kind == TY_CONTROL_SAVE ? 0 : kind == TY_CONTROL_STOP ? 1 : 2;
  int fds[TY_CONTROL_WAITERS];
  pthread_mutex_lock(&srv->mu);
  size_t n = srv->waiting_count[k];
  memcpy(fds, srv->waiting[k], n * sizeof(int));
  srv->waiting_count[k] = 0;
  pthread_mutex_unlock(&srv->mu);
  json_object_set_new(reply, "ok", json_boolean(ok));
  for (size_t i = 0; i < n; ++i) {
    ty_status_free(ty_control_send_line(fds[i], reply));
    close(fds[i]);
  }
}

const char *ty_control_server_socket(const ty_control_server_t *srv) { return srv->socket_path; }
const char *ty_control_server_entry(const ty_control_server_t *srv) { return srv->entry_path; }
