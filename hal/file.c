/* File helpers (see file.h). */
#include "hal/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ty_status_t ty_file_open_read(const char *path, const char *what, int *out_fd,
                              uint64_t *out_size) {
  *out_fd = -1;
  if (out_size) *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot read %s %s", what, path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return ty_status_from_errno(err, "cannot read %s %s", what, path);
  }
  /* open(2) succeeds on a folder and reads fail later with EISDIR, which
   * callers used to report as damage; a device never ends. Say what it is. */
  if (S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    close(fd);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "%s %s is a %s, not a file", what, path,
                          S_ISDIR(st.st_mode) ? "folder" : "device");
  }
  *out_fd = fd;
  if (out_size && S_ISREG(st.st_mode)) *out_size = (uint64_t)st.st_size;
  return TY_OK;
}

ty_status_t ty_file_probe(const char *path, bool *out_exists) {
  struct stat st;
  *out_exists = false;
  if (lstat(path, &st) == 0) { /* a dangling link is there, and broken */
    *out_exists = true;
    return TY_OK;
  }
  if (errno == ENOENT) return TY_OK;
  return ty_status_from_errno(errno, "cannot look at %s", path);
}

ty_status_t ty_file_read_named(const char *path, const char *what, void **out_data,
                               size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = -1;
  uint64_t hint = 0;
  TY_RETURN_IF_ERROR(ty_file_open_read(path, what, &fd, &hint));
  size_t capacity = (size_t)hint + 1, size = 0;
  char *data = malloc(capacity);
  ty_status_t s = data ? TY_OK
                       : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                        "out of memory reading %s %s (%llu bytes)", what, path,
                                        (unsigned long long)hint);
  while (!s) {
    if (size + 1 == capacity) { /* a pipe, or a file that grew */
      char *grown = capacity < SIZE_MAX / 2 ? realloc(data, capacity * 2) : NULL;
      if (!grown) {
        s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s %s", what,
                           path);
        break;
      }
      data = grown;
      capacity *= 2;
    }
    ssize_t n = read(fd, data + size, capacity - 1 - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      s = ty_status_from_errno(errno, "cannot read %s %s", what, path);
    } else if (n == 0) {
      break;
    } else {
      size += (size_t)n;
    }
  }
  close(fd);
  if (s) {
    free(data);
    return s;
  }
  data[size] = '\0';
  *out_data = data;
  *out_size = size;
  return TY_OK;
}

ty_status_t ty_file_read_all(const char *path, void **out_data, size_t *out_size) {
  return ty_file_read_named(path, "file", out_data, out_size);
}

ty_status_t ty_file_create_error(int err, const char *path, const char *what) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "cannot write %s %s: a folder of that name is in the way", what, path);
  }
  const char *slash = strrchr(path, '/');
  char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                                   : strndup(path, (size_t)(slash - path));
  if (!dir) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s;
  if (stat(dir, &st) != 0) {
    int e = errno;
    s = e == ENOENT ? ty_status_make(TY_CODE_NOT_FOUND,
                                     "cannot write %s %s: its folder %s does not exist", what,
                                     path, dir)
                    : ty_status_from_errno(e, "cannot write %s %s: its folder %s", what, path,
                                           dir);
  } else if (!S_ISDIR(st.st_mode)) {
    s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                       "cannot write %s %s: %s is not a folder", what, path, dir);
  } else {
    s = ty_status_from_errno(err, "cannot write %s %s", what, path);
  }
  free(dir);
  return s;
}

ty_status_t ty_mkdir_parents(const char *dir) {
  char *path = strdup(dir);
  if (!path) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = TY_OK;
  for (char *p = path + 1;; ++p) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0777) != 0) {
      int err = errno;
      struct stat st;
      if (err != EEXIST) {
        s = ty_status_from_errno(err, "cannot create folder %s", path);
        break;
      }
      if (stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                           "cannot create folder %s: a file of that name is in the way", path);
        break;
      }
    }
    *p = saved;
    if (saved == '\0') break;
  }
  free(path);
  return s;
}

static ty_status_t ty_fsync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                                   : strndup(path, (size_t)(slash - path));
  if (!dir) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ty_status_t s = TY_OK;
  if (fd < 0) {
    s = ty_status_from_errno(errno, "cannot open folder %s to sync it", dir);
  } else if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    /* Some file systems cannot sync a folder; the rename itself is done. */
    s = ty_status_from_errno(errno, "cannot sync folder %s", dir);
  }
  if (fd >= 0) close(fd);
  free(dir);
  return s;
}

ty_status_t ty_file_write_atomic(const char *path, const void *data, size_t size) {
  static atomic_uint counter;
  const char *slash = strrchr(path, '/');
  if (slash && slash != path) {
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    ty_status_t s = ty_mkdir_parents(dir);
    free(dir);
    TY_RETURN_IF_ERROR(s);
  }
  size_t cap = strlen(path) + 64;
  char *tmp = malloc(cap);
  if (!tmp) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  /* A hidden name beside the target: same filesystem, so rename is atomic,
   * and unique per process and call, so racing writers never share one. */
  size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
  snprintf(tmp, cap, "%.*s.%s.tmp-%ld-%u", (int)dir_len, path, path + dir_len, (long)getpid(),
           atomic_fetch_add(&counter, 1u));
  ty_status_t s = TY_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    s = ty_file_create_error(errno, path, "file");
  } else {
    const unsigned char *p = data;
    size_t left = size;
    while (left && !s) {
      ssize_t n = write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        s = ty_status_from_errno(n < 0 ? errno : EIO, "cannot write %s", path);
        break;
      }
      p += n;
      left -= (size_t)n;
    }
    if (!s && fsync(fd) != 0) s = ty_status_from_errno(errno, "cannot write %s (fsync)", path);
    if (close(fd) != 0 && !s) s = ty_status_from_errno(errno, "cannot write %s (close)", path);
    if (!s && rename(tmp, path) != 0) s = ty_file_create_error(errno, path, "file");
    if (s) unlink(tmp);
  }
  if (!s) s = ty_fsync_dir_of(path);
  free(tmp);
  return s;
}
