/* `trainyard control`: list the running `trainyard train` jobs of this user,
 * show one's status, and ask it to save, stop or abort (control.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app.h"
#include "control.h"
#include "hal/file.h"

static const char *const ty_control_usage =
    "usage: trainyard control list [--json] [--registry DIR]\n"
    "       trainyard control status|save|stop|abort RUN [--json] [--registry DIR]\n"
    "\n"
    "Steers the running 'trainyard train' jobs of this user. A run listens on\n"
    "a socket in its output folder (owner only) and registers itself in the\n"
    "registry folder, where list finds it.\n"
    "\n"
    "  list      every live run: pid, step, loss, tokens/s, ETA, backend, output\n"
    "            folder (entries of runs that died are removed, not listed)\n"
    "  status    the run's latest metrics and its configuration\n"
    "  save      a checkpoint after the current step; the run goes on\n"
    "  stop      a checkpoint after the current step, then the run exits 0\n"
    "  abort     the run exits 1 after the current step without saving (its\n"
    "            earlier checkpoints stay as they were)\n"
    "\n"
    "  RUN             the run's pid or its output folder (--out)\n"
    "  --json          print the replies as JSON\n"
    "  --registry DIR  the registry folder (default $XDG_RUNTIME_DIR/trainyard,\n"
    "                  else /tmp/trainyard-<uid>; 'train --control-registry')\n"
    "  -h, --help      this help\n"
    "\n"
    "Exit codes: 0 done, 1 no such run or it refused, 2 usage error.\n";

typedef struct {
  int pid;
  char out[PATH_MAX], socket[PATH_MAX], path[PATH_MAX + 300];
} ty_control_entry_t;

/* Registry entries are small; anything larger is not one of ours. */
static const ty_file_kind_t ty_entry_kind = {.what = "control registry entry",
                                             .max_bytes = 64 * 1024, .text = true,
                                             .bad_code = TY_CODE_DATA_LOSS, .skip_bom = true};

/* What reading a registry entry gave. */
typedef enum {
  TY_ENTRY_OK,         /* *e holds a run's entry */
  TY_ENTRY_SKIP,       /* not an entry of ours (being written, other JSON) */
  TY_ENTRY_UNREADABLE, /* not a regular file, or a value out of range: *why */
} ty_entry_read_t;

/* Reads the entry at `path`. Only a regular file is read: a FIFO would
 * block open() and read() for ever, a device or a link could point
 * anywhere, so it is opened without following a link and without
 * blocking, and its type is checked on the open descriptor. The pid must
 * be a pid (1..INT_MAX, what pid_t holds): 4294967297 cast to int is 1,
 * and the entry would then be judged by init. */
static ty_entry_read_t ty_control_read_entry(const char *path, ty_control_entry_t *e, char *why,
                                             size_t why_capacity) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    /* ENOENT: removed since readdir (a run that ended). */
    if (errno == ENOENT) return TY_ENTRY_SKIP;
    snprintf(why, why_capacity, "cannot open it: %s", strerror(errno));
    return TY_ENTRY_UNREADABLE;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    snprintf(why, why_capacity, "cannot stat it: %s", strerror(errno));
    close(fd);
    return TY_ENTRY_UNREADABLE;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(why, why_capacity, "not a regular file (%s)",
             S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a folder"
             : S_ISSOCK(st.st_mode) ? "a socket" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)
                                                     ? "a device" : "of another type");
    close(fd);
    return TY_ENTRY_UNREADABLE;
  }
  char *text = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read_fd(fd, path, &ty_entry_kind, &text, &size);
  close(fd);
  json_t *root = s ? NULL : json_loadb(text, size, 0, NULL);
  free(text);
  ty_status_free(s);
  json_t *pid = json_object_get(root, "pid"), *out = json_object_get(root, "out");
  json_t *sock = json_object_get(root, "socket");
  ty_entry_read_t r = json_is_integer(pid) && json_is_string(out) && json_is_string(sock)
                          ? TY_ENTRY_OK : TY_ENTRY_SKIP;
  if (r == TY_ENTRY_OK && (json_integer_value(pid) <= 0 || json_integer_value(pid) > INT_MAX)) {
    snprintf(why, why_capacity, "its pid %lld is not a process id (1 to %d)",
             (long long)json_integer_value(pid), INT_MAX);
    r = TY_ENTRY_UNREADABLE;
  }
  if (r == TY_ENTRY_OK) {
    e->pid = (int)json_integer_value(pid);
    snprintf(e->out, sizeof(e->out), "%s", json_string_value(out));
    snprintf(e->socket, sizeof(e->socket), "%s", json_string_value(sock));
    snprintf(e->path, sizeof(e->path), "%s", path);
  }
  json_decref(root);
  return r;
}

/* A status reply from the entry's run, or NULL when it is stale (the
 * process is gone, or its pid now belongs to something that serves no
 * socket) — the entry is then removed — or does not answer (*out_error). */
static json_t *ty_control_probe(const ty_control_entry_t *e, ty_status_t *out_error) {
  *out_error = TY_OK;
  bool gone = kill(e->pid, 0) != 0 && errno == ESRCH;
  int fd = -1;
  ty_status_t s = gone ? TY_OK : ty_control_connect(e->socket, e->pid, &fd);
  if (!gone && s && (ty_status_code(s) == TY_CODE_NOT_FOUND ||
                     strstr(ty_status_message(s), "refused"))) {
    gone = true; /* no socket there any more, or nobody listening on it */
  }
  if (gone) {
    ty_status_free(s);
    unlink(e->path);
    fprintf(stderr, "trainyard control: removed the stale entry of run %d (%s): the process "
            "is gone\n", e->pid, e->out);
    return NULL;
  }
  json_t *reply = NULL;
  if (!s) {
    json_t *request = json_pack("{s:s}", "command", "status");
    s = ty_control_call(fd, request, 5000, &reply);
    json_decref(request);
    close(fd);
  }
  *out_error = s;
  return reply;
}

static double ty_num(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static void ty_control_row(const json_t *r) {
  char eta[32], step[48];
  ty_control_format_duration(ty_num(r, "eta_s"), eta, sizeof(eta));
  snprintf(step, sizeof(step), "%.0f/%.0f", ty_num(r, "step"), ty_num(r, "total_steps"));
  printf("%-8.0f %-13s %-9.4f %-9.1f %-8s %-12s %s\n", ty_num(r, "pid"), step, ty_num(r, "loss"),
         ty_num(r, "tokens_per_s"), eta, json_string_value(json_object_get(r, "backend")),
         json_string_value(json_object_get(r, "out")));
}

static int ty_control_list(const char *registry, bool as_json) {
  DIR *d = opendir(registry);
  if (!d) {
    return ty_app_fail("control", ty_status_from_errno(errno, "cannot read the control registry "
                                                       "%s", registry));
  }
  json_t *runs = json_array(), *unreadable = json_array();
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t n = strlen(de->d_name);
    if (n < 6 || strcmp(de->d_name + n - 5, ".json")) continue;
    ty_control_entry_t e;
    char path[PATH_MAX + 300], why[256];
    snprintf(path, sizeof(path), "%s/%s", registry, de->d_name);
    ty_entry_read_t got = ty_control_read_entry(path, &e, why, sizeof(why));
    if (got == TY_ENTRY_SKIP) continue; /* being written, or not ours */
    if (got == TY_ENTRY_UNREADABLE) {
      /* Reported and kept: nothing says its run is gone. */
      fprintf(stderr, "trainyard control: skipped the unreadable registry entry %s: %s\n", path,
              why);
      json_array_append_new(unreadable, json_pack("{s:s, s:s}", "entry", path, "why", why));
      continue;
    }
    ty_status_t err = TY_OK;
    json_t *reply = ty_control_probe(&e, &err);
    if (err) {
      fprintf(stderr, "trainyard control: run %d (%s) does not answer: %s\n", e.pid, e.out,
              ty_status_message(err));
      ty_status_free(err);
    }
    if (reply) json_array_append_new(runs, reply);
  }
  closedir(d);
  if (as_json) {
    json_t *root = json_pack("{s:s, s:O, s:O}", "registry", registry, "runs", runs,
                             "unreadable", unreadable);
    char *text = json_dumps(root, JSON_INDENT(1));
    if (text) puts(text);
    free(text);
    json_decref(root);
  } else {
    printf("%-8s %-13s %-9s %-9s %-8s %-12s %s\n", "PID", "STEP", "LOSS", "TOK/S", "ETA",
           "BACKEND", "OUT");
    for (size_t i = 0; i < json_array_size(runs); ++i) ty_control_row(json_array_get(runs, i));
    if (!json_array_size(runs)) printf("(no running trainyard train in %s)\n", registry);
  }
  json_decref(runs);
  json_decref(unreadable);
  return TY_EXIT_OK;
}

/* The entry of RUN: a pid or an output folder. */
static ty_status_t ty_control_find(const char *registry, const char *run, ty_control_entry_t *out) {
  char *end = NULL;
  long pid = strtol(run, &end, 10);
  bool by_pid = end != run && !*end && pid > 0;
  char real[PATH_MAX] = "";
  if (!by_pid && !realpath(run, real)) {
    return ty_status_from_errno(errno, "RUN '%s' is neither a pid nor a run folder", run);
  }
  DIR *d = opendir(registry);
  if (!d) return ty_status_from_errno(errno, "cannot read the control registry %s", registry);
  struct dirent *de;
  bool found = false;
  while (!found && (de = readdir(d))) {
    char path[PATH_MAX + 300], why[256];
    snprintf(path, sizeof(path), "%s/%s", registry, de->d_name);
    size_t n = strlen(de->d_name);
    if (n < 6 || strcmp(de->d_name + n - 5, ".json") ||
        ty_control_read_entry(path, out, why, sizeof(why)) != TY_ENTRY_OK) {
      continue; /* `control list` names the unreadable ones */
    }
    if (kill(out->pid, 0) != 0 && errno == ESRCH) {
      /* A killed run's entry: a live run may have taken its folder since. */
      unlink(path);
      continue;
    }
    found = by_pid ? out->pid == pid : !strcmp(out->out, real);
  }
  closedir(d);
  if (!found) {
    return ty_status_make(TY_CODE_NOT_FOUND, "no running trainyard train %s %s in %s ('trainyard "
                          "control list' shows the live ones)", by_pid ? "with pid" : "in",
                          by_pid ? run : real, registry);
  }
  return TY_OK;
}

static void ty_control_print_status(const json_t *r) {
  char eta[32];
  ty_control_format_duration(ty_num(r, "eta_s"), eta, sizeof(eta));
  printf("run %.0f: %s on %s\n", ty_num(r, "pid"), json_string_value(json_object_get(r, "out")),
         json_string_value(json_object_get(r, "backend")));
  printf("  step %.0f of %.0f (epoch %.0f), loss %.6f, val loss %.6f, eval accuracy %.4f\n",
         ty_num(r, "step"), ty_num(r, "total_steps"), ty_num(r, "epoch") + 1, ty_num(r, "loss"),
         ty_num(r, "val_loss"), ty_num(r, "eval_acc"));
  printf("  %.1f tokens/s, ETA %s\nconfiguration:\n", ty_num(r, "tokens_per_s"), eta);
  const char *key;
  json_t *v;
  json_object_foreach(json_object_get(r, "config"), key, v) {
    char *text = json_dumps(v, JSON_ENCODE_ANY);
    printf("  %-20s %s\n", key, text ? text : "?");
    free(text);
  }
}

static int ty_control_command(const char *registry, const char *command, const char *run,
                              bool as_json) {
  ty_control_entry_t e;
  ty_status_t s = ty_control_find(registry, run, &e);
  json_t *reply = NULL;
  if (!s && !strcmp(command, "status")) {
    reply = ty_control_probe(&e, &s);
    if (!reply && !s) {
      s = ty_status_make(TY_CODE_NOT_FOUND, "run %d (%s) is no longer running", e.pid, e.out);
    }
  } else if (!s) {
    int fd = -1;
    s = ty_control_connect(e.socket, e.pid, &fd);
    json_t *request = json_pack("{s:s}", "command", command);
    /* The run answers at its next step boundary, after a save: no limit. */
    if (!s) s = ty_control_call(fd, request, -1, &reply);
    json_decref(request);
    if (fd >= 0) close(fd);
  }
  if (!s && !json_is_true(json_object_get(reply, "ok"))) {
    const char *why = json_string_value(json_object_get(reply, "error"));
    s = ty_status_make(TY_CODE_FAILED_PRECONDITION, "run %d refused '%s': %s", e.pid, command,
                       why ? why : "no reason given");
  }
  if (s) {
    json_decref(reply);
    return ty_app_fail("control", ty_status_annotate(s, "%s %s", command, run));
  }
  if (as_json) {
    char *text = json_dumps(reply, JSON_INDENT(1));
    if (text) puts(text);
    free(text);
  } else if (!strcmp(command, "status")) {
    ty_control_print_status(reply);
  } else {
    printf("run %d: %s after step %.0f%s%s\n", e.pid,
           json_string_value(json_object_get(reply, "message")), ty_num(reply, "step"),
           strcmp(command, "abort") ? ": " : "",
           strcmp(command, "abort") ? json_string_value(json_object_get(reply, "checkpoint"))
                                    : "");
  }
  json_decref(reply);
  return TY_EXIT_OK;
}

int ty_cmd_control(ty_app_t *app, int argc, char **argv) {
  (void)app;
  static const struct option long_options[] = {
      {"json", no_argument, NULL, 'j'},
      {"registry", required_argument, NULL, 'r'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  bool as_json = false;
  const char *given = NULL;
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values("control", argc, argv, "h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  /* Options may come before or after the subcommand and RUN. */
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    switch (c) {
      case 'j': as_json = true; break;
      case 'r': given = optarg; break;
      case 'h': fputs(ty_control_usage, stdout); return TY_EXIT_OK;
      default:
        return ty_app_usage_error("control", "unknown option or missing value '%s'",
                                  argv[optind - 1]);
    }
  }
  int rest = argc - optind;
  const char *command = rest > 0 ? argv[optind] : NULL;
  if (!command) return ty_app_usage_error("control", "give list, status, save, stop or abort");
  bool is_list = !strcmp(command, "list");
  bool known = is_list || !strcmp(command, "status") || !strcmp(command, "save") ||
               !strcmp(command, "stop") || !strcmp(command, "abort");
  if (!known) {
    return ty_app_usage_error("control", "unknown command '%s' (list, status, save, stop, "
                              "abort)", command);
  }
  if (is_list && rest != 1) {
    return ty_app_usage_error("control", "list takes no RUN ('%s')", argv[optind + 1]);
  }
  if (!is_list && rest != 2) {
    return ty_app_usage_error("control", "%s takes one RUN: the run's pid or output folder",
                              command);
  }
  char registry[PATH_MAX];
  ty_status_t s = ty_control_registry_dir(given, registry, sizeof(registry));
  if (s) return ty_app_fail("control", s);
  return is_list ? ty_control_list(registry, as_json)
                 : ty_control_command(registry, command, argv[optind + 1], as_json);
}
