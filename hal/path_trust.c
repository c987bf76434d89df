/* The StrictModes rule for plugins and caches (path_trust.h). */
#include "hal/path_trust.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One resolved component: false, with the reason, when it breaks the rule. */
static bool ty_path_trust_one(const char *path, char *out_reason, size_t capacity) {
  struct stat st;
  if (stat(path, &st) != 0) return true; /* gone meanwhile: nothing there to load */
  const char *what = S_ISDIR(st.st_mode) ? "folder" : "file";
  uid_t me = geteuid();
  if (st.st_uid != 0 && st.st_uid != me) {
    snprintf(out_reason, capacity, "%s %s belongs to uid %u, neither this user (uid %u) nor "
             "root", what, path, (unsigned)st.st_uid, (unsigned)me);
    return false;
  }
  bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir) {
    snprintf(out_reason, capacity, "%s %s is writable by its group or others (mode %04o)", what,
             path, (unsigned)(st.st_mode & 07777));
    return false;
  }
  return true;
}

bool ty_path_trusted(const char *path, char *out_reason, size_t capacity) {
  if (capacity) out_reason[0] = '\0';
  char part[PATH_MAX], real[PATH_MAX];
  if (!path || snprintf(part, sizeof(part), "%s", path) >= (int)sizeof(part)) return true;
  /* The longest prefix that exists: a cache folder may not be made yet. */
  while (!realpath(part, real)) {
    char *slash = strrchr(part, '/');
    if (errno != ENOENT) return true; /* unreadable: loading it fails on its own */
    if (!slash) {
      snprintf(part, sizeof(part), "."); /* a relative name: the working folder */
    } else if (slash == part) {
      part[1] = '\0';
    } else {
      *slash = '\0';
    }
  }
  /* "/", then each folder down to the path itself. */
  if (!ty_path_trust_one("/", out_reason, capacity)) return false;
  for (char *p = real + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    bool ok = ty_path_trust_one(real, out_reason, capacity);
    *p = '/';
    if (!ok) return false;
  }
  return strcmp(real, "/") == 0 || ty_path_trust_one(real, out_reason, capacity);
}
