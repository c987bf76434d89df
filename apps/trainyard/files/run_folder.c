/* The run folder: its lock, its names, clean-up and --overwrite (see
 * run_folder.h). */
#include "files/run_folder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "files/out_paths.h"
#include "metrics/io.h"

struct ty_run_folder_t {
  char *path;
  int lock_fd;
  bool locked;
};

/* The plain files a run writes at the top of its folder. */
static const char *const ty_rf_run_files[] = {"metrics.jsonl", "summary.txt",
                                               "train_config.json", "device_report.txt", NULL};
#define TY_RF_TENSORBOARD "tensorboard"
#define TY_RF_TB_PREFIX "events.out.tfevents."
/* What a checkpoint folder holds (besides model-<i>-of-<n>.safetensors). */
static const char *const ty_rf_checkpoint_files[] = {
    "config.json",           "model.safetensors",  "model.safetensors.index.json",
    "tokenizer.json",        "optimizer.safetensors", "trainer_state.json", NULL};

static ty_status_t ty_rf_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

/* "dir/name" in a new buffer; NULL when memory runs out. */
static char *ty_rf_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

/* Decimal digits only, no sign, fits int64; the end of them in *end. */
static bool ty_rf_parse_step(const char *text, int64_t *out, const char **end) {
  if (*text < '0' || *text > '9') return false;
  errno = 0;
  char *e = NULL;
  long long v = strtoll(text, &e, 10);
  if (errno) return false;
  *out = v;
  *end = e;
  return true;
}

static bool ty_rf_in_list(const char *name, const char *const *list) {
  for (size_t i = 0; list[i]; ++i) {
    if (!strcmp(name, list[i])) return true;
  }
  return false;
}

/* checkpoint-<step> */
static bool ty_rf_is_checkpoint_name(const char *name, int64_t *step) {
  const char *end = NULL;
  int64_t s = 0;
  if (strncmp(name, TY_RUN_CKPT_PREFIX, strlen(TY_RUN_CKPT_PREFIX)) != 0 ||
      !ty_rf_parse_step(name + strlen(TY_RUN_CKPT_PREFIX), &s, &end) || *end) {
    return false;
  }
  if (step) *step = s;
  return true;
}

/* A leftover of an interrupted save: .checkpoint-<step>.tmp-<pid> or
 * <run file>.tmp.<pid>; its writer's pid in *pid. */
static bool ty_rf_is_temp_name(const char *name, long *pid) {
  const char *end = NULL, *tail = NULL;
  int64_t n = 0;
  if (!strncmp(name, TY_RUN_CKPT_TMP_PREFIX, strlen(TY_RUN_CKPT_TMP_PREFIX)) &&
      ty_rf_parse_step(name + strlen(TY_RUN_CKPT_TMP_PREFIX), &n, &end) &&
      !strncmp(end, ".tmp-", 5)) {
    tail = end + 5;
  } else {
    for (size_t i = 0; ty_rf_run_files[i] && !tail; ++i) {
      size_t len = strlen(ty_rf_run_files[i]);
      if (!strncmp(name, ty_rf_run_files[i], len) && !strncmp(name + len, ".tmp.", 5)) {
        tail = name + len + 5;
      }
    }
  }
  if (!tail || !ty_rf_parse_step(tail, &n, &end) || *end) return false;
  *pid = (long)n;
  return true;
}

/* Whether another process of that pid runs on this host. */
static bool ty_rf_pid_alive(long pid) {
  return pid > 0 && pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* fsync of a folder, so that removals in it survive a crash. */
static ty_status_t ty_rf_sync_folder(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot open folder %s to sync it", path);
  int rc = fsync(fd), err = errno;
  close(fd);
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    return ty_status_from_errno(err, "cannot sync folder %s", path);
  }
  return TY_OK;
}

/* ---- removal ----------------------------------------------------------- */

static _Thread_local int ty_rf_remove_errno;

static int ty_rf_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  if (remove(path) != 0 && errno != ENOENT && !ty_rf_remove_errno) ty_rf_remove_errno = errno;
  return 0; /* go on: remove as much as possible */
}

ty_status_t ty_run_folder_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    return errno == ENOENT ? TY_OK : ty_status_from_errno(errno, "cannot remove %s", path);
  }
  ty_rf_remove_errno = 0;
  if (nftw(path, ty_rf_remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && !ty_rf_remove_errno) {
    ty_rf_remove_errno = errno;
  }
  if (ty_rf_remove_errno && ty_rf_remove_errno != ENOENT) {
    return ty_status_from_errno(ty_rf_remove_errno, "cannot remove %s", path);
  }
  return TY_OK;
}

/* ---- the lock ---------------------------------------------------------- */

/* "pid 123 on host h since ..." from a holder's lock file. */
static void ty_rf_holder(int fd, char *out, size_t capacity) {
  char text[512];
  ssize_t n = pread(fd, text, sizeof(text) - 1, 0);
  text[n > 0 ? n : 0] = '\0';
  long pid = 0;
  char host[256] = "", since[64] = "";
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    if (!strncmp(line, "pid ", 4)) pid = strtol(line + 4, NULL, 10);
    if (!strncmp(line, "host ", 5)) snprintf(host, sizeof(host), "%s", line + 5);
    if (!strncmp(line, "since ", 6)) snprintf(since, sizeof(since), "%s", line + 6);
  }
  if (pid > 0) {
    snprintf(out, capacity, "pid %ld%s%s%s%s", pid, host[0] ? " on " : "", host,
             since[0] ? ", since " : "", since);
  } else {
    snprintf(out, capacity, "pid not yet written");
  }
}

static void ty_rf_write_holder(int fd) {
  char host[256] = "", since[64] = "", text[512];
  if (gethostname(host, sizeof(host)) != 0) host[0] = '\0';
  host[sizeof(host) - 1] = '\0';
  time_t now = time(NULL);
  struct tm tm;
  if (localtime_r(&now, &tm)) strftime(since, sizeof(since), "%Y-%m-%d %H:%M:%S", &tm);
  int n = snprintf(text, sizeof(text), "pid %ld\nhost %s\nsince %s\n", (long)getpid(), host,
                   since);
  /* Best effort: the lock is the flock, the text only names its holder. */
  if (ftruncate(fd, 0) == 0 && n > 0) {
    ssize_t w = pwrite(fd, text, (size_t)n, 0);
    (void)w;
  }
}

ty_status_t ty_run_folder_open(const char *path, ty_run_folder_t **out_folder) {
  *out_folder = NULL;
  if (!path || !*path) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "empty run folder name");
  TY_RETURN_IF_ERROR(ty_metrics_dir_create(path));
  ty_run_folder_t *f = calloc(1, sizeof(*f));
  char *lock = ty_rf_join(path, TY_RUN_LOCK_NAME);
  if (!f || !lock || !(f->path = strdup(path))) {
    free(f ? f->path : NULL);
    free(f);
    free(lock);
    return ty_rf_oom();
  }
  ty_status_t s = TY_OK;
  f->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (f->lock_fd < 0) {
    s = ty_status_from_errno(errno, "cannot open the lock file %s", lock);
  } else if (flock(f->lock_fd, LOCK_EX | LOCK_NB) == 0) {
    f->locked = true;
    ty_rf_write_holder(f->lock_fd);
  } else if (errno == EWOULDBLOCK) {
    char holder[400];
    ty_rf_holder(f->lock_fd, holder, sizeof(holder));
    s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                       "%s is in use by another trainyard run (%s; lock file %s): wait for it "
                       "to finish, stop it (SIGTERM saves a checkpoint), or choose another "
                       "output folder",
                       path, holder, lock);
  } else if (errno != ENOLCK && errno != EOPNOTSUPP && errno != ENOSYS && errno != EINVAL) {
    s = ty_status_from_errno(errno, "cannot lock %s", lock);
  } /* else a file system without flock(): open, unlocked */
  free(lock);
  if (s) {
    ty_run_folder_close(f);
    return s;
  }
  *out_folder = f;
  return TY_OK;
}

void ty_run_folder_close(ty_run_folder_t *f) {
  if (!f) return;
  if (f->lock_fd >= 0) close(f->lock_fd); /* releases the flock */
  free(f->path);
  free(f);
}

const char *ty_run_folder_path(const ty_run_folder_t *f) { return f->path; }

bool ty_run_folder_locked(const ty_run_folder_t *f) { return f->locked; }

/* ---- contents ---------------------------------------------------------- */

ty_status_t ty_run_folder_clean_partial(ty_run_folder_t *f) {
  DIR *d = opendir(f->path);
  if (!d) return ty_status_from_errno(errno, "cannot list %s", f->path);
  ty_status_t s = TY_OK;
  struct dirent *e;
  while (!s && (e = readdir(d)) != NULL) {
    long pid = 0;
    if (!ty_rf_is_temp_name(e->d_name, &pid)) continue;
    /* Unlocked (no flock on this file system), a live writer may own it. */
    if (!f->locked && ty_rf_pid_alive(pid)) continue;
    char *path = ty_rf_join(f->path, e->d_name);
    s = path ? ty_run_folder_remove_tree(path) : ty_rf_oom();
    free(path);
  }
  closedir(d);
  return s;
}

ty_status_t ty_run_folder_checkpoints(const ty_run_folder_t *f, int64_t **out_steps,
                                      size_t *out_count) {
  *out_steps = NULL;
  *out_count = 0;
  DIR *d = opendir(f->path);
  if (!d) return ty_status_from_errno(errno, "cannot list %s", f->path);
  int64_t *steps = NULL;
  size_t count = 0, cap = 0;
  ty_status_t s = TY_OK;
  struct dirent *e;
  while (!s && (e = readdir(d)) != NULL) {
    int64_t step = 0;
    if (!ty_rf_is_checkpoint_name(e->d_name, &step)) continue;
    char state[64 + sizeof(e->d_name)];
    snprintf(state, sizeof(state), "%s/trainer_state.json", e->d_name);
    struct stat st;
    if (fstatat(dirfd(d), state, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    if (count == cap) {
      cap = cap ? cap * 2 : 16;
      int64_t *grown = realloc(steps, cap * sizeof(int64_t));
      if (!grown) {
        s = ty_rf_oom();
        break;
      }
      steps = grown;
    }
    steps[count++] = step;
  }
  closedir(d);
  if (s) {
    free(steps);
    return s;
  }
  /* Insertion sort: a run keeps few checkpoints. */
  for (size_t i = 1; i < count; ++i) {
    for (size_t j = i; j > 0 && steps[j - 1] > steps[j]; --j) {
      int64_t t = steps[j];
      steps[j] = steps[j - 1];
      steps[j - 1] = t;
    }
  }
  *out_steps = steps;
  *out_count = count;
  return TY_OK;
}

/* The run's entries at the top of the folder, sorted by name, each with
 * "/" appended for folders. FAILED_PRECONDITION when a run's name is taken
 * by something of another kind. */
typedef struct ty_rf_list_t {
  char **names;
  size_t count, cap;
} ty_rf_list_t;

static void ty_rf_list_free(ty_rf_list_t *l) {
  for (size_t i = 0; i < l->count; ++i) free(l->names[i]);
  free(l->names);
}

static int ty_rf_name_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static ty_status_t ty_rf_run_entries(const ty_run_folder_t *f, ty_rf_list_t *out) {
  memset(out, 0, sizeof(*out));
  DIR *d = opendir(f->path);
  if (!d) return ty_status_from_errno(errno, "cannot list %s", f->path);
  ty_status_t s = TY_OK;
  struct dirent *e;
  while (!s && (e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    long pid = 0;
    bool folder = ty_rf_is_checkpoint_name(name, NULL) || !strcmp(name, TY_RF_TENSORBOARD);
    bool file = ty_rf_in_list(name, ty_rf_run_files);
    bool temp = ty_rf_is_temp_name(name, &pid);
    if (!folder && !file && !temp) continue;
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* just went */
    bool is_dir = S_ISDIR(st.st_mode);
    if ((folder && !is_dir) || (file && !S_ISREG(st.st_mode))) {
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                         "%s/%s is %s, not the %s a training run writes there; move it away",
                         f->path, name,
                         S_ISLNK(st.st_mode) ? "a symbolic link" : is_dir ? "a folder" : "a file",
                         folder ? "folder" : "file");
      break;
    }
    if (out->count == out->cap) {
      out->cap = out->cap ? out->cap * 2 : 16;
      char **grown = realloc(out->names, out->cap * sizeof(char *));
      if (!grown) {
        s = ty_rf_oom();
        break;
      }
      out->names = grown;
    }
    size_t n = strlen(name) + 2;
    char *copy = malloc(n);
    if (!copy) {
      s = ty_rf_oom();
      break;
    }
    snprintf(copy, n, "%s%s", name, is_dir ? "/" : "");
    out->names[out->count++] = copy;
  }
  closedir(d);
  if (s) {
    ty_rf_list_free(out);
    return s;
  }
  if (out->count) qsort(out->names, out->count, sizeof(char *), ty_rf_name_cmp);
  return TY_OK;
}

ty_status_t ty_run_folder_describe(const ty_run_folder_t *f, char *out_text, size_t capacity) {
  if (capacity) out_text[0] = '\0';
  ty_rf_list_t l;
  TY_RETURN_IF_ERROR(ty_rf_run_entries(f, &l));
  size_t used = 0, shown = 0;
  const size_t most = 6; /* a long list says how many more */
  for (; shown < l.count && shown < most; ++shown) {
    int n = snprintf(out_text + used, capacity > used ? capacity - used : 0, "%s%s",
                     shown ? ", " : "", l.names[shown]);
    if (n > 0) used += (size_t)n;
  }
  if (shown < l.count) {
    snprintf(out_text + (used < capacity ? used : capacity ? capacity - 1 : 0),
             capacity > used ? capacity - used : 0, " and %zu more", l.count - shown);
  }
  ty_rf_list_free(&l);
  return TY_OK;
}

/* model-<i>-of-<n>.safetensors */
static bool ty_rf_is_shard_name(const char *name) {
  const char *end = NULL;
  int64_t v = 0;
  if (strncmp(name, "model-", 6) || !ty_rf_parse_step(name + 6, &v, &end)) return false;
  if (strncmp(end, "-of-", 4) || !ty_rf_parse_step(end + 4, &v, &end)) return false;
  return !strcmp(end, ".safetensors");
}

/* Everything inside a run's folder entry must be what a run writes there. */
static ty_status_t ty_rf_check_contents(const ty_run_folder_t *f, const char *entry) {
  bool tensorboard = !strcmp(entry, TY_RF_TENSORBOARD "/");
  char *path = ty_rf_join(f->path, entry);
  if (!path) return ty_rf_oom();
  DIR *d = opendir(path);
  ty_status_t s = d ? TY_OK : ty_status_from_errno(errno, "cannot list %s", path);
  struct dirent *e;
  while (!s && (e = readdir(d)) != NULL) {
    const char *name = e->d_name;
    if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
    struct stat st;
    bool regular = fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                   S_ISREG(st.st_mode);
    bool ours = tensorboard ? !strncmp(name, TY_RF_TB_PREFIX, strlen(TY_RF_TB_PREFIX))
                            : ty_rf_in_list(name, ty_rf_checkpoint_files) ||
                                  ty_rf_is_shard_name(name);
    if (!regular || !ours) {
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                         "--overwrite: %s%s is not a file a training run writes; nothing was "
                         "deleted (move it out of the run folder first)",
                         path, name);
    }
  }
  if (d) closedir(d);
  free(path);
  return s;
}

ty_status_t ty_run_folder_clear(ty_run_folder_t *f, const ty_run_folder_input_t *inputs,
                                size_t input_count) {
  ty_rf_list_t l;
  TY_RETURN_IF_ERROR(ty_rf_run_entries(f, &l));
  ty_status_t s = TY_OK;
  /* Everything is checked before anything goes. */
  for (size_t i = 0; i < l.count && !s; ++i) {
    size_t n = strlen(l.names[i]);
    bool folder = n && l.names[i][n - 1] == '/';
    char bare[300];
    snprintf(bare, sizeof(bare), "%.*s", (int)(folder ? n - 1 : n), l.names[i]);
    char *path = ty_rf_join(f->path, bare);
    if (!path) {
      s = ty_rf_oom();
      break;
    }
    long pid = 0;
    if (ty_rf_is_temp_name(bare, &pid)) {
      /* Only left when unlocked (clean_partial removed the rest). */
      if (ty_rf_pid_alive(pid)) {
        s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                           "--overwrite: process %ld is saving into %s; nothing was deleted",
                           pid, path);
      }
    } else if (folder) {
      s = ty_rf_check_contents(f, l.names[i]);
    }
    for (size_t k = 0; k < input_count && !s; ++k) {
      const char *in = inputs[k].path;
      if (!in || !*in || access(in, F_OK) != 0) continue;
      if (ty_path_same(in, path) || (folder && ty_path_within(in, path))) {
        s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                           "--overwrite would delete %s, which holds %s %s of this run; "
                           "nothing was deleted",
                           path, inputs[k].option, in);
      }
    }
    free(path);
  }
  for (size_t i = 0; i < l.count && !s; ++i) {
    char *path = ty_rf_join(f->path, l.names[i]);
    s = path ? ty_run_folder_remove_tree(path) : ty_rf_oom();
    free(path);
  }
  ty_rf_list_free(&l);
  if (!s) s = ty_rf_sync_folder(f->path);
  return s;
}

ty_status_t ty_run_folder_remove_checkpoint(ty_run_folder_t *f, int64_t step) {
  char name[64];
  snprintf(name, sizeof(name), TY_RUN_CKPT_PREFIX "%lld", (long long)step);
  char *path = ty_rf_join(f->path, name);
  if (!path) return ty_rf_oom();
  ty_status_t s = ty_run_folder_remove_tree(path);
  free(path);
  return s;
}
