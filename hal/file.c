/* File helpers (hal/file.h): capped whole-file reads, opening files to map,
 * atomic writes and the errors of failed creates, in the user's terms. */
#include "hal/file.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* open(2) succeeds on a folder and reads fail later with EISDIR, which
 * callers used to report as damage. Say what it is. */
static ty_status_t ty_file_is_folder(const char *what, const char *path) {
  return ty_status_make(TY_CODE_FAILED_PRECONDITION, "%s %s is a folder, not a file", what, path);
}

static ty_code_t ty_file_bad_code(const ty_file_kind_t *kind) {
  return kind->bad_code != TY_CODE_OK ? kind->bad_code : TY_CODE_INVALID_ARGUMENT;
}

void ty_format_bytes(uint64_t bytes, char *out, size_t capacity) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0 || v == floor(v)) {
    snprintf(out, capacity, "%.0f %s", v, units[u]);
  } else {
    snprintf(out, capacity, "%.2f %s", v, units[u]);
  }
}

ty_status_t ty_file_kind_limit(const ty_file_kind_t *kind, uint64_t *out_limit) {
  *out_limit = kind->max_bytes;
  const char *text = kind->limit_env ? getenv(kind->limit_env) : NULL;
  if (!text || !*text) return TY_OK;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  uint64_t scale = 1;
  if (end && (*end == 'K' || *end == 'k')) scale = TY_KIB, ++end;
  else if (end && (*end == 'M' || *end == 'm')) scale = TY_MIB, ++end;
  else if (end && (*end == 'G' || *end == 'g')) scale = TY_GIB, ++end;
  if (errno || end == text || *end || text[0] == '-' || v == 0 || v > UINT64_MAX / scale) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s='%s' is not a size in bytes (e.g. 536870912 or 512M)",
                          kind->limit_env, text);
  }
  *out_limit = (uint64_t)v * scale;
  return TY_OK;
}

static ty_status_t ty_file_too_large(const char *name, const ty_file_kind_t *kind,
                                     uint64_t limit) {
  char cap[32];
  ty_format_bytes(limit, cap, sizeof(cap));
  if (kind->limit_env) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "%s %s is larger than %s, the limit for this kind of file; set %s "
                          "to a larger byte count (e.g. %s=2G) to read it",
                          kind->what, name, cap, kind->limit_env, kind->limit_env);
  }
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                        "%s %s is larger than %s, far more than any real one holds: is it "
                        "the right file?",
                        kind->what, name, cap);
}

static ty_status_t ty_file_nul(const char *name, const ty_file_kind_t *kind, uint64_t offset) {
  return ty_status_make(ty_file_bad_code(kind),
                        "%s %s holds a NUL byte at offset %llu: it is not a text file (is "
                        "it the right file?)",
                        kind->what, name, (unsigned long long)offset);
}

ty_status_t ty_file_check_text(const char *data, size_t size, const char *name,
                               const ty_file_kind_t *kind) {
  const char *nul = size ? memchr(data, '\0', size) : NULL;
  return nul ? ty_file_nul(name, kind, (uint64_t)(nul - data)) : TY_OK;
}

size_t ty_text_bom_size(const char *data, size_t size) {
  return size >= 3 && !memcmp(data, "\xEF\xBB\xBF", 3) ? 3 : 0;
}

ty_status_t ty_file_read_fd(int fd, const char *name, const ty_file_kind_t *kind,
                            char **out_data, size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  uint64_t limit = 0;
  TY_RETURN_IF_ERROR(ty_file_kind_limit(kind, &limit));
  if (limit > SIZE_MAX / 4) limit = SIZE_MAX / 4; /* capacity arithmetic below stays exact */
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return ty_status_from_errno(errno, "cannot read %s %s", kind->what, name);
  }
  if (S_ISDIR(st.st_mode)) return ty_file_is_folder(kind->what, name);
  /* st_size is a hint for regular files only; pipes and devices say 0. The
   * read goes one byte past the cap so that "exactly the cap" still fits. */
  size_t capacity = 1 << 16;
  if (S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size <= limit) {
    capacity = (size_t)st.st_size + 1;
  }
  if (capacity > limit + 1) capacity = (size_t)limit + 1;
  char *data = malloc(capacity + 1);
  if (!data) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s %s",
                          kind->what, name);
  }
  size_t size = 0;
  ty_status_t status = TY_OK;
  for (;;) {
    if (size == capacity) {
      if ((uint64_t)size > limit) {
        status = ty_file_too_large(name, kind, limit);
        break;
      }
      size_t grown_capacity = capacity < ((size_t)limit + 1) / 2 ? capacity * 2 : (size_t)limit + 1;
      char *grown = realloc(data, grown_capacity + 1);
      if (!grown) {
        status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s %s",
                                kind->what, name);
        break;
      }
      data = grown;
      capacity = grown_capacity;
    }
    ssize_t n = read(fd, data + size, capacity - size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = errno == EISDIR ? ty_file_is_folder(kind->what, name)
                               : ty_status_from_errno(errno, "cannot read %s %s", kind->what, name);
      break;
    }
    if (n == 0) break;
    /* Checked as it comes, so /dev/zero fails on its first byte. */
    const char *nul = kind->text ? memchr(data + size, '\0', (size_t)n) : NULL;
    if (nul) {
      status = ty_file_nul(name, kind, (uint64_t)(nul - data));
      break;
    }
    size += (size_t)n;
    if ((uint64_t)size > limit) {
      status = ty_file_too_large(name, kind, limit);
      break;
    }
  }
  if (status) {
    free(data);
    return status;
  }
  size_t bom = kind->skip_bom ? ty_text_bom_size(data, size) : 0;
  if (bom) {
    size -= bom;
    memmove(data, data + bom, size);
  }
  data[size] = '\0';
  *out_data = data;
  *out_size = size;
  return TY_OK;
}

ty_status_t ty_file_read(const char *path, const ty_file_kind_t *kind, char **out_data,
                         size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EISDIR) return ty_file_is_folder(kind->what, path);
    return ty_status_from_errno(errno, "cannot read %s %s", kind->what, path);
  }
  ty_status_t status = ty_file_read_fd(fd, path, kind, out_data, out_size);
  close(fd);
  return status;
}

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
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return ty_file_is_folder(what, path);
  }
  /* A device cannot be mapped and may never end (ty_file_read, which copies
   * under a cap, reads them). */
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    close(fd);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "%s %s is a device, not a file", what,
                          path);
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

/* Writes all of data to fd; errors name `path`. */
static ty_status_t ty_fd_write_all(int fd, const char *path, const void *data, size_t size) {
  const unsigned char *p = data;
  size_t left = size;
  while (left) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ty_status_from_errno(n < 0 ? errno : EIO, "cannot write %s", path);
    p += n;
    left -= (size_t)n;
  }
  return TY_OK;
}

ty_status_t ty_file_write_atomic(const char *path, const void *data, size_t size) {
  static atomic_uint counter;
  /* A device or a pipe (`--output /dev/null`, `/dev/stdout`, a FIFO) is
   * written where it is: a rename over it would replace the node itself
   * with a regular file (run as root, /dev/null for every process). */
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return ty_status_from_errno(errno, "cannot open %s for writing", path);
    ty_status_t s = ty_fd_write_all(fd, path, data, size);
    if (close(fd) != 0 && !s) s = ty_status_from_errno(errno, "cannot write %s (close)", path);
    return s;
  }
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
    s = ty_fd_write_all(fd, path, data, size);
    if (!s && fsync(fd) != 0) s = ty_status_from_errno(errno, "cannot write %s (fsync)", path);
    if (close(fd) != 0 && !s) s = ty_status_from_errno(errno, "cannot write %s (close)", path);
    if (!s && rename(tmp, path) != 0) s = ty_file_create_error(errno, path, "file");
    if (s) unlink(tmp);
  }
  if (!s) s = ty_fsync_dir_of(path);
  free(tmp);
  return s;
}
