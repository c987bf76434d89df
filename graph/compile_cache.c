/* On-disk compile cache paths, failure records and atomic file writes (see
 * compile_cache.h). */
#include "graph/compile_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/lower.h"

#define TY_CACHE_LAYOUT "compile-v1"
#define TY_FAILURE_MAGIC "trainyard-compile-failure 1\n"

static ty_status_t ty_file_errno(const char *what, const char *path) {
  int e = errno;
  ty_code_t code = e == ENOENT    ? TY_CODE_NOT_FOUND
                   : e == ENOSPC || e == EDQUOT ? TY_CODE_RESOURCE_EXHAUSTED
                   : e == EACCES || e == EPERM || e == EROFS ? TY_CODE_PERMISSION_DENIED
                                                             : TY_CODE_DATA_LOSS;
  return ty_status_make(code, "%s %s: %s", what, path, strerror(e));
}

void ty_compile_cache_default_dir(char *out, size_t capacity) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0] == '/') {
    snprintf(out, capacity, "%s/trainyard", xdg);
  } else if (home && home[0]) {
    snprintf(out, capacity, "%s/.cache/trainyard", home);
  } else if (capacity) {
    out[0] = '\0';
  }
}

ty_status_t ty_file_read_all(const char *path, void **out_data, size_t *out_size) {
  *out_data = NULL;
  *out_size = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return ty_file_errno("cannot open", path);
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s is not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  char *data = malloc(size + 1);
  if (!data) {
    fclose(f);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s (%zu bytes)",
                          path, size);
  }
  size_t got = size ? fread(data, 1, size, f) : 0;
  bool bad = got != size || ferror(f);
  fclose(f);
  if (bad) {
    free(data);
    return ty_status_make(TY_CODE_DATA_LOSS, "cannot read %s: short read (%zu of %zu bytes)",
                          path, got, size);
  }
  data[size] = '\0';
  *out_data = data;
  *out_size = size;
  return TY_OK;
}

ty_status_t ty_mkdir_parents(const char *dir) {
  char *path = strdup(dir);
  if (!path) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = TY_OK;
  for (char *p = path + 1;; ++p) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
      s = ty_file_errno("cannot create folder", path);
      break;
    }
    *p = saved;
    if (saved == '\0') break;
  }
  free(path);
  return s;
}

static ty_status_t ty_fsync_dir_of(const char *path) {
  char *dir = strdup(path);
  if (!dir) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  char *slash = strrchr(dir, '/');
  if (slash == dir) {
    slash[1] = '\0';
  } else if (slash) {
    *slash = '\0';
  } else {
    dir[0] = '.';
    dir[1] = '\0';
  }
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  ty_status_t s = TY_OK;
  if (fd < 0 || fsync(fd) != 0) s = ty_file_errno("cannot fsync folder", dir);
  if (fd >= 0) close(fd);
  free(dir);
  return s;
}

ty_status_t ty_file_write_atomic(const char *path, const void *data, size_t size) {
  static unsigned counter = 0;
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
           counter++);
  ty_status_t s = TY_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
  if (fd < 0) {
    s = ty_status_from_errno(errno, "cannot write %s (creating %s)", path, tmp);
  } else {
    const unsigned char *p = data;
    size_t left = size;
    while (left && !s) {
      ssize_t n = write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        s = ty_file_errno("cannot write", tmp);
        break;
      }
      p += n;
      left -= (size_t)n;
    }
    if (!s && fsync(fd) != 0) s = ty_file_errno("cannot fsync", tmp);
    if (close(fd) != 0 && !s) s = ty_file_errno("cannot close", tmp);
    if (!s && rename(tmp, path) != 0) s = ty_file_errno("cannot rename into", path);
    if (s) unlink(tmp);
  }
  if (!s) s = ty_fsync_dir_of(path);
  free(tmp);
  return s;
}

ty_status_t ty_compile_cache_path(const char *dir, const char *backend, const char *key,
                                  const char *suffix, char **out_path) {
  *out_path = NULL;
  char hex[65];
  ty_sha256_hex(key, strlen(key), hex);
  size_t cap = strlen(dir) + strlen(backend) + strlen(suffix) + sizeof(TY_CACHE_LAYOUT) + 72;
  char *path = malloc(cap);
  if (!path) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(path, cap, "%s/" TY_CACHE_LAYOUT "/%s/%s%s", dir, backend, hex, suffix);
  *out_path = path;
  return TY_OK;
}

void ty_compile_cache_write_failure(const char *path, const char *key, ty_status_t failure) {
  const char *message = ty_status_message(failure);
  size_t cap = strlen(key) + strlen(message) + 128;
  char *text = malloc(cap);
  if (!text) return;
  int n = snprintf(text, cap, TY_FAILURE_MAGIC "code %s\nkey %s\nmessage %s\n",
                   ty_code_name(ty_status_code(failure)), key, message);
  /* One line per field: a message's own line breaks become spaces. */
  char *msg_at = n > 0 ? strstr(text, "\nmessage ") : NULL;
  for (char *p = msg_at ? msg_at + 9 : NULL; p && *p && p < text + n - 1; ++p) {
    if (*p == '\n') *p = ' ';
  }
  if (n > 0) ty_status_free(ty_file_write_atomic(path, text, (size_t)n));
  free(text);
}

ty_status_t ty_compile_cache_read_failure(const char *path) {
  void *data = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read_all(path, &data, &size);
  if (s) {
    ty_status_free(s); /* no record (or an unreadable one): compile */
    return TY_OK;
  }
  char *text = data;
  ty_status_t cached = TY_OK;
  if (strncmp(text, TY_FAILURE_MAGIC, strlen(TY_FAILURE_MAGIC)) == 0) {
    char *code_line = strstr(text, "\ncode "), *msg = strstr(text, "\nmessage ");
    ty_code_t code = TY_CODE_UNKNOWN;
    if (code_line) {
      code_line += 6;
      for (int c = 1; c <= TY_CODE_DATA_LOSS; ++c) {
        const char *name = ty_code_name((ty_code_t)c);
        size_t len = strlen(name);
        if (strncmp(code_line, name, len) == 0 && code_line[len] == '\n') code = (ty_code_t)c;
      }
    }
    if (msg) {
      msg += 9;
      msg[strcspn(msg, "\n")] = '\0';
      cached = ty_status_make(code,
                              "%s [a cached compile failure (%s); pass --retry-failed to "
                              "compile again]",
                              msg, path);
    }
  }
  free(data);
  return cached;
}
