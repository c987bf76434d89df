/* Outputs against inputs, by device and inode (see out_paths.h). */
#include "files/out_paths.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hal/file.h"

/* Cuts the last component off `path` in place ("a/b/" -> "a", "a" -> ".",
 * "/a" -> "/"); false when there is nothing left to cut. */
static bool ty_path_cut_last(char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') path[--n] = '\0';
  if (!strcmp(path, "/") || !strcmp(path, ".")) return false;
  char *slash = strrchr(path, '/');
  if (!slash) {
    strcpy(path, "."); /* fits: path held at least one character */
  } else if (slash == path) {
    path[1] = '\0';
  } else {
    *slash = '\0';
  }
  return true;
}

/* realpath() of `path`, or of its nearest existing parent when it does not
 * exist yet; NULL when nothing resolves. The caller frees it. */
static char *ty_path_existing_real(const char *path) {
  char *copy = strdup(path);
  if (!copy) return NULL;
  for (;;) {
    char *real = realpath(copy, NULL);
    if (real || (errno != ENOENT && errno != ENOTDIR) || !ty_path_cut_last(copy)) {
      free(copy);
      return real;
    }
  }
}

bool ty_path_within(const char *path, const char *folder) {
  struct stat f;
  if (!path || !folder || stat(folder, &f) != 0 || !S_ISDIR(f.st_mode)) return false;
  char *real = ty_path_existing_real(path);
  if (!real) return false;
  bool within = false;
  do {
    struct stat st;
    if (stat(real, &st) == 0 && st.st_dev == f.st_dev && st.st_ino == f.st_ino) {
      within = true;
      break;
    }
  } while (ty_path_cut_last(real));
  free(real);
  return within;
}

bool ty_path_same(const char *a, const char *b) {
  struct stat x, y;
  return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev &&
         x.st_ino == y.st_ino;
}

/* A regular file under `folder` (down to `depth` more levels, not through
 * symbolic links) that is the file `out` (device and inode), its path into
 * found[capacity]. An output outside an input folder can still be one of
 * its files through a hard link: `forward --out x.safetensors` where x is a
 * second name of the model's model.safetensors. */
static bool ty_folder_holds_inode(const char *folder, const struct stat *out, int depth,
                                  char *found, size_t capacity) {
  DIR *d = opendir(folder);
  if (!d) return false;
  bool hit = false;
  struct dirent *de;
  while (!hit && (de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", folder, de->d_name);
    struct stat st;
    if (n < 0 || (size_t)n >= sizeof(path) || lstat(path, &st) != 0) continue;
    if (S_ISREG(st.st_mode) && st.st_dev == out->st_dev && st.st_ino == out->st_ino) {
      snprintf(found, capacity, "%s", path);
      hit = true;
    } else if (S_ISDIR(st.st_mode) && depth > 0) {
      hit = ty_folder_holds_inode(path, out, depth - 1, found, capacity);
    }
  }
  closedir(d);
  return hit;
}

/* The folder `path` goes into must exist (unless the command creates it);
 * hal/file.h words the error as every write does, and the option is named. */
static ty_status_t ty_out_parent_check(const ty_out_path_t *out) {
  struct stat st;
  if (out->creates_parents || stat(out->path, &st) == 0) return TY_OK;
  char *parent = strdup(out->path);
  if (!parent) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  bool missing = ty_path_cut_last(parent) && (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode));
  int err = errno;
  free(parent);
  if (!missing) return TY_OK;
  return ty_status_annotate(ty_file_create_error(err, out->path, out->what ? out->what : "file"),
                            "%s", out->option);
}

ty_status_t ty_out_path_check(const ty_out_path_t *out, const ty_path_arg_t *inputs,
                              size_t input_count) {
  if (!out || !out->path || !*out->path) return TY_OK;
  TY_RETURN_IF_ERROR(ty_out_parent_check(out));
  /* An existing file with more than one name may be a file of an input
   * folder under another name (a hard link). */
  struct stat o;
  const bool linked = stat(out->path, &o) == 0 && S_ISREG(o.st_mode) && o.st_nlink > 1;
  for (size_t i = 0; i < input_count; ++i) {
    const ty_path_arg_t *in = &inputs[i];
    struct stat st;
    if (!in->path || !*in->path || stat(in->path, &st) != 0) continue;
    if (ty_path_same(out->path, in->path)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s %s is the %s %s itself: writing it would destroy that input; "
                            "choose another %s",
                            out->option, out->path, in->option, in->path, out->option);
    }
    char found[PATH_MAX];
    /* Two levels: a model or data folder and its sub-folders (val/, ...). */
    if (linked && S_ISDIR(st.st_mode) &&
        ty_folder_holds_inode(in->path, &o, 2, found, sizeof(found))) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s %s is %s of the %s folder %s (a hard link: the same device "
                            "and inode): writing it would replace that input; choose another %s",
                            out->option, out->path, found, in->option, in->path, out->option);
    }
    if (S_ISDIR(st.st_mode) && ty_path_within(out->path, in->path)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s %s lies inside the %s folder %s, which this command reads; "
                            "write it outside that folder",
                            out->option, out->path, in->option, in->path);
    }
    if (out->replaces_folder && ty_path_within(in->path, out->path)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s %s lies inside %s %s, which this command replaces whole; "
                            "choose another %s",
                            in->option, in->path, out->option, out->path, out->option);
    }
  }
  return TY_OK;
}
