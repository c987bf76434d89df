/* hal/file.h: errors name the user's path and the cause in the user's
 * terms (issue 12: a folder read as a file surfaced as DATA_LOSS or
 * "No such device", a missing folder under a temporary file's name). */
#include "common/test_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/file.h"

static char g_dir[256];

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof(g_dir), "/tmp/ty_file_test_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void path_in(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_open_read_names_folder_device_and_missing(void **state) {
  (void)state;
  char folder[300], missing[300], file[300], under_file[320];
  path_in(folder, sizeof(folder), "sub");
  path_in(missing, sizeof(missing), "missing.json");
  path_in(file, sizeof(file), "plain.txt");
  snprintf(under_file, sizeof(under_file), "%s/x.json", file);
  assert_int_equal(mkdir(folder, 0777), 0);
  write_text(file, "hello");
  int fd = -1;
  TY_EXPECT_STATUS(ty_file_open_read(folder, "shard", &fd, NULL), TY_CODE_FAILED_PRECONDITION,
                   "is a folder, not a file");
  assert_int_equal(fd, -1);
  TY_EXPECT_STATUS(ty_file_open_read("/dev/null", "tokenizer", &fd, NULL),
                   TY_CODE_FAILED_PRECONDITION, "tokenizer /dev/null is a device, not a file");
  TY_EXPECT_STATUS(ty_file_open_read(missing, "--tokens file", &fd, NULL), TY_CODE_NOT_FOUND,
                   "cannot read --tokens file");
  /* a file used as a folder: the wrong kind of thing, not damage */
  TY_EXPECT_STATUS(ty_file_open_read(under_file, "config", &fd, NULL),
                   TY_CODE_FAILED_PRECONDITION, "Not a directory");
  uint64_t size = 0;
  TY_EXPECT_OK(ty_file_open_read(file, "file", &fd, &size));
  assert_true(fd >= 0);
  assert_int_equal(size, 5);
  close(fd);
}

static void test_probe_absent_only_for_enoent(void **state) {
  (void)state;
  char file[300], link[300], missing[300], under_file[320];
  path_in(file, sizeof(file), "probe.txt");
  path_in(link, sizeof(link), "dangling");
  path_in(missing, sizeof(missing), "nothing");
  snprintf(under_file, sizeof(under_file), "%s/x", file);
  write_text(file, "x");
  assert_int_equal(symlink("/nonexistent/target", link), 0);
  bool exists = true;
  TY_EXPECT_OK(ty_file_probe(missing, &exists));
  assert_false(exists);
  TY_EXPECT_OK(ty_file_probe(file, &exists));
  assert_true(exists);
  exists = false;
  TY_EXPECT_OK(ty_file_probe(link, &exists)); /* there, and broken: read it and fail */
  assert_true(exists);
  TY_EXPECT_STATUS(ty_file_probe(under_file, &exists), TY_CODE_FAILED_PRECONDITION,
                   "cannot look at");
}

static void test_read_named_reads_files_and_pipes(void **state) {
  (void)state;
  char file[300];
  path_in(file, sizeof(file), "text.txt");
  write_text(file, "abc\n");
  void *data = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_file_read_named(file, "file", &data, &size));
  assert_int_equal(size, 4);
  assert_string_equal((char *)data, "abc\n");
  free(data);
  /* a pipe has no size: the reader grows its buffer */
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  char big[100000];
  memset(big, 'x', sizeof(big));
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    size_t done = 0;
    while (done < sizeof(big)) {
      ssize_t n = write(fds[1], big + done, sizeof(big) - done);
      if (n <= 0) _exit(1);
      done += (size_t)n;
    }
    _exit(0);
  }
  close(fds[1]);
  char pipe_path[64];
  snprintf(pipe_path, sizeof(pipe_path), "/proc/self/fd/%d", fds[0]);
  TY_EXPECT_OK(ty_file_read_named(pipe_path, "file", &data, &size));
  close(fds[0]);
  assert_int_equal(size, sizeof(big));
  assert_memory_equal(data, big, sizeof(big));
  free(data);
}

static void test_create_error_names_the_target_not_the_temp(void **state) {
  (void)state;
  char target[300], file[300], under_file[320], folder[300];
  path_in(target, sizeof(target), "nodir/sub/out.json");
  path_in(file, sizeof(file), "afile");
  snprintf(under_file, sizeof(under_file), "%s/out.json", file);
  path_in(folder, sizeof(folder), "afolder");
  write_text(file, "x");
  assert_int_equal(mkdir(folder, 0777), 0);
  ty_status_t s = ty_file_create_error(ENOENT, target, "tokenizer");
  assert_int_equal(ty_status_code(s), TY_CODE_NOT_FOUND);
  TY_EXPECT_CONTAINS(ty_status_message(s), "cannot write tokenizer ");
  TY_EXPECT_CONTAINS(ty_status_message(s), "nodir/sub does not exist");
  assert_null(strstr(ty_status_message(s), ".tmp"));
  ty_status_free(s);
  TY_EXPECT_STATUS(ty_file_create_error(ENOTDIR, under_file, "output"),
                   TY_CODE_FAILED_PRECONDITION, "afile is not a folder");
  TY_EXPECT_STATUS(ty_file_create_error(EISDIR, folder, "output"), TY_CODE_FAILED_PRECONDITION,
                   "a folder of that name is in the way");
  char ok_target[300];
  path_in(ok_target, sizeof(ok_target), "fine.json");
  TY_EXPECT_STATUS(ty_file_create_error(EACCES, ok_target, "output"),
                   TY_CODE_PERMISSION_DENIED, "cannot write output");
}

static void test_write_atomic_errors_name_the_target(void **state) {
  (void)state;
  char file[300], under_file[320], folder[300];
  path_in(file, sizeof(file), "blocker");
  snprintf(under_file, sizeof(under_file), "%s/deeper/out.bin", file);
  path_in(folder, sizeof(folder), "target_is_folder");
  write_text(file, "x");
  assert_int_equal(mkdir(folder, 0777), 0);
  ty_status_t s = ty_file_write_atomic(under_file, "data", 4);
  assert_int_equal(ty_status_code(s), TY_CODE_FAILED_PRECONDITION);
  assert_null(strstr(ty_status_message(s), ".tmp"));
  ty_status_free(s);
  s = ty_file_write_atomic(folder, "data", 4);
  assert_int_equal(ty_status_code(s), TY_CODE_FAILED_PRECONDITION);
  TY_EXPECT_CONTAINS(ty_status_message(s), "a folder of that name is in the way");
  assert_null(strstr(ty_status_message(s), ".tmp"));
  ty_status_free(s);
  char made[300];
  path_in(made, sizeof(made), "new/deep/out.bin");
  TY_EXPECT_OK(ty_file_write_atomic(made, "data", 4));
  void *data = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_file_read_all(made, &data, &size));
  assert_int_equal(size, 4);
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_open_read_names_folder_device_and_missing),
      cmocka_unit_test(test_probe_absent_only_for_enoent),
      cmocka_unit_test(test_read_named_reads_files_and_pipes),
      cmocka_unit_test(test_create_error_names_the_target_not_the_temp),
      cmocka_unit_test(test_write_atomic_errors_name_the_target),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
