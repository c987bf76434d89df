/* What the run and `trainyard control` share (control.h): the registry
 * folder, connecting with credentials checked both ways, one call. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "control_internal.h"

ty_status_t ty_control_registry_dir(const char *given, char *out, size_t capacity) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (given && given[0]) {
    snprintf(out, capacity, "%s", given);
  } else if (xdg && xdg[0] == '/') {
    snprintf(out, capacity, "%s/trainyard", xdg);
  } else {
    snprintf(out, capacity, "/tmp/trainyard-%u", (unsigned)geteuid());
  }
  if (mkdir(out, 0700) != 0 && errno != EEXIST) {
    return ty_status_from_errno(errno, "cannot create the control registry %s", out);
  }
  struct stat st;
  if (lstat(out, &st) != 0) {
    return ty_status_from_errno(errno, "cannot read the control registry %s", out);
  }
  if (!S_ISDIR(st.st_mode)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "the control registry %s is not a folder",
                          out);
  }
  /* Entries name sockets to connect to: a folder others can write could
   * point `control` at theirs. */
  if (st.st_uid != geteuid() || (st.st_mode & 077)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "the control registry %s is %s (mode %03o); it must be this user's "
                          "alone: chmod 700 it, or give another folder (--registry / "
                          "--control-registry)", out,
                          st.st_uid != geteuid() ? "owned by another user" : "open to others",
                          (unsigned)(st.st_mode & 0777));
  }
  return TY_OK;
}

ty_status_t ty_control_sockaddr(const char *path, struct sockaddr_un *addr, int *out_dirfd) {
  *out_dirfd = -1;
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (strlen(path) < sizeof(addr->sun_path)) {
    memcpy(addr->sun_path, path, strlen(path) + 1);
    return TY_OK;
  }
  /* sun_path holds 108 bytes; a deeper run folder is reached through a
   * descriptor of its folder (Linux's /proc/self/fd/N names it). */
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "socket name %s is too long", path);
  }
  *slash = '\0';
  int fd = open(dir[0] ? dir : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot open the run folder %s", dir);
  int n = snprintf(addr->sun_path, sizeof(addr->sun_path), "/proc/self/fd/%d/%s", fd, slash + 1);
  if (n < 0 || (size_t)n >= sizeof(addr->sun_path)) {
    close(fd);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "socket name %s is too long", slash + 1);
  }
  *out_dirfd = fd;
  return TY_OK;
}

ty_status_t ty_control_connect(const char *path, pid_t expect_pid, int *out_fd) {
  *out_fd = -1;
  struct stat st;
  if (lstat(path, &st) != 0) return ty_status_from_errno(errno, "no control socket %s", path);
  if (!S_ISSOCK(st.st_mode) || st.st_uid != geteuid()) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s is %s: not a run of this user's; refusing to talk to it", path,
                          S_ISSOCK(st.st_mode) ? "a socket owned by another user"
                                               : "not a socket");
  }
  struct sockaddr_un addr;
  int dirfd = -1;
  TY_RETURN_IF_ERROR(ty_control_sockaddr(path, &addr, &dirfd));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ty_status_t s = TY_OK;
  if (fd < 0) {
    s = ty_status_from_errno(errno, "cannot make a socket");
  } else if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
    s = ty_status_from_errno(errno, "cannot connect to %s", path);
  }
  if (dirfd >= 0) close(dirfd);
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (!s && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    s = ty_status_from_errno(errno, "cannot read the credentials of %s", path);
  }
  if (!s && (cred.uid != geteuid() || (expect_pid > 0 && cred.pid != expect_pid))) {
    s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                       "%s is served by pid %d of uid %u, not by run %d of this user (uid %u); "
                       "refusing to talk to it", path, (int)cred.pid, (unsigned)cred.uid,
                       (int)expect_pid, (unsigned)geteuid());
  }
  if (s) {
    if (fd >= 0) close(fd);
    return s;
  }
  *out_fd = fd;
  return TY_OK;
}

ty_status_t ty_control_send_line(int fd, const json_t *message) {
  char *text = json_dumps(message, JSON_COMPACT | JSON_ENSURE_ASCII);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = strlen(text);
  text[n] = '\n'; /* json_dumps' NUL becomes the line's end */
  size_t sent = 0;
  ty_status_t s = TY_OK;
  while (sent < n + 1) {
    ssize_t w = send(fd, text + sent, n + 1 - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      s = ty_status_from_errno(errno, "cannot send a control message");
      break;
    }
    sent += (size_t)w;
  }
  free(text);
  return s;
}

ty_status_t ty_control_read_line(int fd, int timeout_ms, size_t max_bytes, json_t **out) {
  *out = NULL;
  char *buf = malloc(max_bytes + 1);
  if (!buf) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  ty_status_t s = TY_OK;
  while (!s && (n == 0 || buf[n - 1] != '\n')) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      s = ty_status_make(TY_CODE_DEADLINE_EXCEEDED, "no control message within %d ms",
                         timeout_ms);
    } else if (r < 0) {
      s = ty_status_from_errno(errno, "cannot wait for a control message");
    } else if (n == max_bytes) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "a control message longer than %zu bytes",
                         max_bytes);
    } else {
      ssize_t got = recv(fd, buf + n, max_bytes - n, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) s = ty_status_from_errno(errno, "cannot read a control message");
      if (got == 0) {
        s = ty_status_make(TY_CODE_UNAVAILABLE, "the connection closed before a whole message "
                           "came (the run ended?)");
      }
      if (got > 0) n += (size_t)got;
    }
  }
  json_error_t error;
  json_t *root = s ? NULL : json_loadb(buf, n, 0, &error);
  if (!s && !json_is_object(root)) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "a control message that is not a JSON object%s%s",
                       root ? "" : ": ", root ? "" : error.text);
    json_decref(root);
    root = NULL;
  }
  free(buf);
  *out = root;
  return s;
}

ty_status_t ty_control_call(int fd, const json_t *request, int timeout_ms, json_t **out_reply) {
  TY_RETURN_IF_ERROR(ty_control_send_line(fd, request));
  /* A status carries the whole configuration: well under a MiB. */
  return ty_control_read_line(fd, timeout_ms, TY_CONTROL_MAX_REPLY, out_reply);
}

void ty_control_format_duration(double seconds, char *out, size_t capacity) {
  if (!isfinite(seconds) || seconds < 0) {
    snprintf(out, capacity, "-");
  } else if (seconds < 3600) {
    snprintf(out, capacity, "%dm%02ds", (int)seconds / 60, (int)seconds % 60);
  } else {
    snprintf(out, capacity, "%dh%02dm", (int)seconds / 3600, ((int)seconds % 3600) / 60);
  }
}
