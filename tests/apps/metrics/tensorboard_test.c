/* The TensorBoard event file writer: the file name, the records read back
 * by an independent reader (CRCs checked, every field decoded), a folder
 * made when missing, and errors that name the path: a file in the way, no
 * permission (checked as user nobody when run as root), a full disk
 * (simulated with RLIMIT_FSIZE), after which the file must still be whole
 * and the writer usable. */
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/test_util.h"
#include "metrics/tensorboard.h"
#include "metrics_test_util.h"

enum { kMaxEvents = 64 };

/* Reads and decodes the whole file; fails the test on any format error. */
static int read_back(const char *path, ty_mt_event_t *events) {
  size_t size;
  char *data = ty_mt_read_file(path, &size);
  assert_non_null(data);
  char error[256];
  int n = ty_mt_read_events((const uint8_t *)data, size, events, kMaxEvents, error,
                            sizeof(error));
  free(data);
  if (n < 0) fail_msg("%s: %s", path, error);
  return n;
}

static void test_name_and_records(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  double before = ty_tensorboard_now();
  ty_tensorboard_writer_t *w = NULL;
  TY_EXPECT_OK(ty_tensorboard_writer_open(dir, &w));
  assert_non_null(w);
  const char *path = ty_tensorboard_writer_path(w);

  /* events.out.tfevents.<10-digit seconds>.<host>.<pid>.<counter> */
  char host[256] = "";
  gethostname(host, sizeof(host));
  char pattern[512];
  snprintf(pattern, sizeof(pattern), "^%s/events\\.out\\.tfevents\\.[0-9]{10}\\.%s\\.%ld\\.[0-9]+$",
           dir, host, (long)getpid());
  regex_t re;
  assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
  if (regexec(&re, path, 0, NULL, 0) != 0) fail_msg("file name %s does not match %s", path, pattern);
  regfree(&re);
  long long secs = atoll(strstr(path, "tfevents.") + 9);
  assert_true(secs >= (long long)before - 1 && secs <= (long long)ty_tensorboard_now() + 1);

  /* Random values, seeded; steps increasing from a random start. */
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  enum { kSteps = 20 };
  float losses[kSteps];
  int64_t first = (int64_t)(ty_test_rng_next(&rng) % 100000) + 1;
  for (int i = 0; i < kSteps; ++i) {
    losses[i] = (float)(ty_test_rng_next(&rng) % 100000) / 9999.0f;
    TY_EXPECT_OK(ty_tensorboard_writer_add_scalar(w, "train/loss", first + i, losses[i],
                                                  1.7e9 + i * 0.25));
  }
  ty_tensorboard_scalar_t several[] = {
      {"train/loss", 2.5}, {"train/lr", 2.4e-4}, {"train/grad_norm", NAN}, {"big", 1e300}};
  TY_EXPECT_OK(ty_tensorboard_writer_add_scalars(w, first + kSteps, several, 4, 1.7e9 + 100));
  TY_EXPECT_OK(ty_tensorboard_writer_flush(w));

  /* Everything is in the file before close (what a live reader sees). */
  ty_mt_event_t events[kMaxEvents];
  assert_int_equal(read_back(path, events), 1 + kSteps + 1);
  char *kept_path = strdup(path);
  assert_non_null(kept_path);
  TY_EXPECT_OK(ty_tensorboard_writer_close(w));

  int n = read_back(kept_path, events);
  assert_int_equal(n, 1 + kSteps + 1);
  assert_string_equal(events[0].file_version, "brain.Event:2");
  assert_true(events[0].has_wall_time);
  assert_true(events[0].wall_time >= before - 1 && events[0].wall_time <= ty_tensorboard_now());
  assert_int_equal(events[0].value_count, 0);
  for (int i = 0; i < kSteps; ++i) {
    const ty_mt_event_t *e = &events[1 + i];
    assert_int_equal(e->step, first + i);
    assert_true(e->wall_time == 1.7e9 + i * 0.25);
    assert_int_equal(e->value_count, 1);
    assert_string_equal(e->tags[0], "train/loss");
    assert_memory_equal(&e->values[0], &losses[i], sizeof(float));
    assert_string_equal(e->file_version, "");
  }
  const ty_mt_event_t *last = &events[kSteps + 1];
  assert_int_equal(last->step, first + kSteps);
  assert_int_equal(last->value_count, 4);
  assert_string_equal(last->tags[1], "train/lr");
  assert_true(last->values[0] == 2.5f && last->values[1] == 2.4e-4f);
  assert_true(isnan(last->values[2]));
  assert_true(isinf(last->values[3]));
  free(kept_path);
  ty_mt_remove_tree(dir);
  free(dir);
}

static void test_creates_folder_and_distinct_names(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  char logdir[512];
  snprintf(logdir, sizeof(logdir), "%s/runs//exp1/", dir);
  ty_tensorboard_writer_t *a = NULL, *b = NULL;
  TY_EXPECT_OK(ty_tensorboard_writer_open(logdir, &a));
  TY_EXPECT_OK(ty_tensorboard_writer_open(logdir, &b));
  struct stat st;
  snprintf(logdir, sizeof(logdir), "%s/runs/exp1", dir);
  assert_int_equal(stat(logdir, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  /* Opened in the same second by the same process: the counter differs. */
  assert_string_not_equal(ty_tensorboard_writer_path(a), ty_tensorboard_writer_path(b));
  TY_EXPECT_OK(ty_tensorboard_writer_add_scalar(a, "x", 1, 1.0, 1.0));
  TY_EXPECT_OK(ty_tensorboard_writer_add_scalar(b, "x", 1, 2.0, 1.0));
  TY_EXPECT_OK(ty_tensorboard_writer_close(a));
  TY_EXPECT_OK(ty_tensorboard_writer_close(b));
  TY_EXPECT_OK(ty_tensorboard_writer_close(NULL));
  ty_mt_remove_tree(dir);
  free(dir);
}

static void test_open_errors(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  char path[512];
  snprintf(path, sizeof(path), "%s/not-a-folder", dir);
  ty_mt_write_file(path, "x");
  ty_tensorboard_writer_t *w = (ty_tensorboard_writer_t *)&w; /* must be reset */
  TY_EXPECT_STATUS(ty_tensorboard_writer_open(path, &w), TY_CODE_FAILED_PRECONDITION, path);
  assert_null(w);
  /* A parent that is a file. */
  char below[600];
  snprintf(below, sizeof(below), "%s/runs", path);
  TY_EXPECT_STATUS(ty_tensorboard_writer_open(below, &w), TY_CODE_FAILED_PRECONDITION, path);
  TY_EXPECT_STATUS(ty_tensorboard_writer_open("", &w), TY_CODE_INVALID_ARGUMENT, NULL);
  TY_EXPECT_STATUS(ty_tensorboard_writer_open(dir, NULL), TY_CODE_INVALID_ARGUMENT, NULL);
  ty_mt_remove_tree(dir);
  free(dir);
}

/* 0 when opening a writer in `logdir` fails with PERMISSION_DENIED and a
 * message naming `logdir`; else 1 (a different code or message) or 2 (the
 * open succeeded). No cmocka calls: it also runs in a forked child. */
static int permission_check(const char *logdir) {
  ty_tensorboard_writer_t *w = NULL;
  ty_status_t status = ty_tensorboard_writer_open(logdir, &w);
  if (!status) {
    ty_status_free(ty_tensorboard_writer_close(w));
    return 2;
  }
  int bad = ty_status_code(status) != TY_CODE_PERMISSION_DENIED ||
            !strstr(ty_status_message(status), logdir) || w != NULL;
  if (bad) fprintf(stderr, "%s: %s\n", logdir, ty_status_message(status));
  ty_status_free(status);
  return bad;
}

static void test_permission_denied(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  char logdir[512], nested[600];
  snprintf(logdir, sizeof(logdir), "%s/locked", dir);
  snprintf(nested, sizeof(nested), "%s/sub", logdir);
  assert_int_equal(mkdir(logdir, 0555), 0);
  assert_int_equal(chmod(logdir, 0555), 0); /* whatever the umask */
  if (geteuid() != 0) {
    assert_int_equal(permission_check(logdir), 0);
    assert_int_equal(permission_check(nested), 0);
  } else {
    /* Root may write anywhere: check as user nobody, in a child. */
    assert_int_equal(chmod(dir, 0755), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      int rc = 3;
      if (setgid(65534) == 0 && setuid(65534) == 0) {
        rc = permission_check(logdir) | permission_check(nested) << 2;
      }
      _exit(rc);
    }
    int wstatus = 0;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    if (WEXITSTATUS(wstatus) != 0) {
      /* Two bits per path: 1 wrong code or message, 2 the open succeeded. */
      fail_msg("as user nobody: %s %d, %s %d (3: could not become nobody)", logdir,
               WEXITSTATUS(wstatus) & 3, nested, WEXITSTATUS(wstatus) >> 2);
    }
  }
  chmod(logdir, 0700);
  ty_mt_remove_tree(dir);
  free(dir);
}

/* A full disk, simulated: RLIMIT_FSIZE makes writes past the limit fail
 * with EFBIG (SIGXFSZ ignored), as ENOSPC would. */
static void test_disk_full(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  ty_tensorboard_writer_t *w = NULL;
  TY_EXPECT_OK(ty_tensorboard_writer_open(dir, &w));
  char *path = strdup(ty_tensorboard_writer_path(w));
  assert_non_null(path);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);

  struct rlimit old;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  /* Room for three events of 48 bytes, the fourth torn. */
  struct rlimit limited = {(rlim_t)st.st_size + 180, old.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &limited), 0);
  ty_status_t status = TY_OK;
  int written = 0;
  for (int i = 1; i <= 10 && !status; ++i) {
    status = ty_tensorboard_writer_add_scalar(w, "train/loss", i, 1.0 / i, 1.7e9 + i);
    if (!status) ++written;
  }
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, old_handler);
  assert_int_equal(written, 3);
  TY_EXPECT_STATUS(status, TY_CODE_RESOURCE_EXHAUSTED, path);

  /* The torn record was cut off: the file reads whole. */
  ty_mt_event_t events[kMaxEvents];
  assert_int_equal(read_back(path, events), 1 + written);
  /* With room again, the writer goes on. */
  TY_EXPECT_OK(ty_tensorboard_writer_add_scalar(w, "train/loss", 99, 0.5, 1.7e9 + 99));
  TY_EXPECT_OK(ty_tensorboard_writer_close(w));
  assert_int_equal(read_back(path, events), 2 + written);
  assert_int_equal(events[1 + written].step, 99);
  free(path);
  ty_mt_remove_tree(dir);
  free(dir);
}

static void test_add_errors_name_the_file(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  ty_tensorboard_writer_t *w = NULL;
  TY_EXPECT_OK(ty_tensorboard_writer_open(dir, &w));
  TY_EXPECT_STATUS(ty_tensorboard_writer_add_scalar(w, "", 1, 1.0, 1.0),
                   TY_CODE_INVALID_ARGUMENT, ty_tensorboard_writer_path(w));
  ty_mt_event_t events[kMaxEvents];
  assert_int_equal(read_back(ty_tensorboard_writer_path(w), events), 1);
  TY_EXPECT_OK(ty_tensorboard_writer_close(w));
  ty_mt_remove_tree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_name_and_records),
      cmocka_unit_test(test_creates_folder_and_distinct_names),
      cmocka_unit_test(test_open_errors),
      cmocka_unit_test(test_permission_denied),
      cmocka_unit_test(test_disk_full),
      cmocka_unit_test(test_add_errors_name_the_file),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
