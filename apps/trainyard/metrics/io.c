/* File helpers of the metrics writers (see io.h). */
#include "metrics/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


static ty_status_t ty_metrics_dir_make_one(const char *dir) {
  if (mkdir(dir, 0777) == 0) return TY_OK;
  int err = errno;
  struct stat st;
  if (err == EEXIST) {
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) return TY_OK;
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "cannot create folder %s: a file of that name is in the way", dir);
  }
  return ty_status_from_errno(err, "cannot create folder %s", dir);
}

ty_status_t ty_metrics_dir_create(const char *dir) {
  if (!dir || !*dir) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "empty folder name");
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return TY_OK;
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s is not a folder (wanted a log folder there)", dir);
  }
  char *copy = strdup(dir);
  if (!copy) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t status = TY_OK;
  /* Each prefix that ends before a '/' (skipping the root and runs of '/'),
   * then the whole path. */
  for (char *p = copy + 1; *p && !status; ++p) {
    if (*p != '/' || p[-1] == '/') continue;
    *p = '\0';
    status = ty_metrics_dir_make_one(copy);
    *p = '/';
  }
  if (!status) status = ty_metrics_dir_make_one(copy);
  free(copy);
  return status;
}

ty_status_t ty_metrics_dir_sync_of(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir;
  if (!slash) {
    dir = strdup(".");
  } else if (slash == path) {
    dir = strdup("/");
  } else {
    dir = strndup(path, (size_t)(slash - path));
  }
  if (!dir) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t status = TY_OK;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    status = ty_status_from_errno(errno, "cannot open folder %s to sync it", dir);
  } else {
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    /* Some file systems cannot sync a folder; the rename itself is done. */
    if (rc != 0 && err != EINVAL && err != ENOTSUP) {
      status = ty_status_from_errno(err, "cannot sync folder %s", dir);
    }
  }
  free(dir);
  return status;
}
