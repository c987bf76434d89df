/* hal/file.h. Capped whole-file reads: regular files, pipes and character
 * devices; the cap (exactly at it, one past it, raised by its variable, a
 * bad variable); NUL bytes in text kinds (with the offset) and not in binary
 * ones; folders and missing files. /dev/zero must fail at once for text and
 * at the cap for binary, never by exhausting memory. And errors that name
 * the user's path and the cause in the user's terms (issue 12: a folder read
 * as a file surfaced as DATA_LOSS or "No such device", a missing folder
 * under a temporary file's name). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/test_util.h"
#include "hal/file.h"

static const ty_file_kind_t k_text = {.what = "test config", .max_bytes = 1000, .text = true};
static const ty_file_kind_t k_binary = {.what = "test blob",
                                        .max_bytes = 1000,
                                        .limit_env = "TY_TEST_MAX_BLOB_BYTES",
                                        .bad_code = TY_CODE_DATA_LOSS};
static const ty_file_kind_t k_ours = {.what = "test state", .max_bytes = 1000, .text = true,
                                      .bad_code = TY_CODE_DATA_LOSS};
static const ty_file_kind_t k_large = {.what = "file", .max_bytes = TY_MIB};

static char g_dir[256];

static void path_in(char *out, size_t cap, const char *name) {
  snprintf(out, cap, "%s/%s", g_dir, name);
}

static const char *path_of(const char *name) {
  static char path[300];
  path_in(path, sizeof(path), name);
  return path;
}

static void write_file(const char *path, const void *data, size_t size) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

/* `name` in the test's folder. */
static void write_bytes(const char *name, const void *data, size_t size) {
  write_file(path_of(name), data, size);
}

static void write_text(const char *path, const char *text) {
  write_file(path, text, strlen(text));
}

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

static void test_regular_file_up_to_the_cap(void **state) {
  (void)state;
  char buf[1001];
  memset(buf, 'x', sizeof(buf));
  write_bytes("exact", buf, 1000);
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_file_read(path_of("exact"), &k_text, &data, &size));
  assert_int_equal(size, 1000);
  assert_int_equal(data[1000], '\0');
  free(data);
  write_bytes("over", buf, 1001);
  TY_EXPECT_STATUS(ty_file_read(path_of("over"), &k_text, &data, &size),
                   TY_CODE_RESOURCE_EXHAUSTED, "test config");
  assert_null(data);
  TY_EXPECT_STATUS(ty_file_read(path_of("over"), &k_text, &data, &size),
                   TY_CODE_RESOURCE_EXHAUSTED, "larger than 1000 B");
  write_bytes("empty", "", 0);
  TY_EXPECT_OK(ty_file_read(path_of("empty"), &k_text, &data, &size));
  assert_int_equal(size, 0);
  assert_string_equal(data, "");
  free(data);
}

static void test_cap_variable(void **state) {
  (void)state;
  char buf[3000];
  memset(buf, 7, sizeof(buf));
  write_bytes("blob", buf, sizeof(buf));
  char *data = NULL;
  size_t size = 0;
  unsetenv("TY_TEST_MAX_BLOB_BYTES");
  /* The message says how to raise the cap. */
  TY_EXPECT_STATUS(ty_file_read(path_of("blob"), &k_binary, &data, &size),
                   TY_CODE_RESOURCE_EXHAUSTED, "set TY_TEST_MAX_BLOB_BYTES");
  setenv("TY_TEST_MAX_BLOB_BYTES", "3K", 1);
  TY_EXPECT_OK(ty_file_read(path_of("blob"), &k_binary, &data, &size));
  assert_int_equal(size, 3000);
  assert_memory_equal(data, buf, 3000);
  free(data);
  setenv("TY_TEST_MAX_BLOB_BYTES", "2999", 1);
  TY_EXPECT_STATUS(ty_file_read(path_of("blob"), &k_binary, &data, &size),
                   TY_CODE_RESOURCE_EXHAUSTED, "2.93 KiB");
  static const char *const bad_values[] = {"12Q", "-5", "0", "zero", "99999999999999999999999"};
  for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); ++i) {
    setenv("TY_TEST_MAX_BLOB_BYTES", bad_values[i], 1);
    TY_EXPECT_STATUS(ty_file_read(path_of("blob"), &k_binary, &data, &size),
                     TY_CODE_INVALID_ARGUMENT, "TY_TEST_MAX_BLOB_BYTES=");
  }
  unsetenv("TY_TEST_MAX_BLOB_BYTES");
}

static void test_nul_bytes(void **state) {
  (void)state;
  write_bytes("nul", "{\"a\": 1}\n\0tail", 15);
  char *data = NULL;
  size_t size = 0;
  /* Not the end of a line or of the file: an error naming the offset. */
  TY_EXPECT_STATUS(ty_file_read(path_of("nul"), &k_text, &data, &size),
                   TY_CODE_INVALID_ARGUMENT, "NUL byte at offset 9");
  TY_EXPECT_STATUS(ty_file_read(path_of("nul"), &k_ours, &data, &size), TY_CODE_DATA_LOSS,
                   "test state");
  TY_EXPECT_OK(ty_file_read(path_of("nul"), &k_binary, &data, &size));
  assert_int_equal(size, 15);
  free(data);
  TY_EXPECT_STATUS(ty_file_check_text("ab\0", 3, "mapped", &k_text), TY_CODE_INVALID_ARGUMENT,
                   "mapped holds a NUL byte at offset 2");
  TY_EXPECT_OK(ty_file_check_text("abc", 3, "mapped", &k_text));
}

static void test_dev_zero(void **state) {
  (void)state;
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_STATUS(ty_file_read("/dev/zero", &k_text, &data, &size), TY_CODE_INVALID_ARGUMENT,
                   "NUL byte at offset 0");
  TY_EXPECT_STATUS(ty_file_read("/dev/zero", &k_binary, &data, &size),
                   TY_CODE_RESOURCE_EXHAUSTED, "/dev/zero");
  assert_null(data);
}

/* A writer that never stops: the read ends at the cap, not at memory's end. */
static void test_endless_pipe(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    char chunk[512];
    memset(chunk, 'y', sizeof(chunk));
    for (;;) {
      if (write(fds[1], chunk, sizeof(chunk)) < 0) _exit(0);
    }
  }
  close(fds[1]);
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_STATUS(ty_file_read_fd(fds[0], "the pipe", &k_text, &data, &size),
                   TY_CODE_RESOURCE_EXHAUSTED, "the pipe is larger than 1000 B");
  close(fds[0]);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* A pipe that ends: read whole, though its st_size says 0. */
static void test_finite_pipe_and_fifo(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  assert_int_equal(write(fds[1], "key = value\n", 12), 12);
  close(fds[1]);
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_file_read_fd(fds[0], "stdin", &k_text, &data, &size));
  assert_int_equal(size, 12);
  assert_string_equal(data, "key = value\n");
  free(data);
  close(fds[0]);
  assert_int_equal(mkfifo(path_of("fifo"), 0600), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(path_of("fifo"), O_WRONLY);
    ssize_t n = fd >= 0 ? write(fd, "through a fifo", 14) : -1;
    _exit(n == 14 ? 0 : 1);
  }
  TY_EXPECT_OK(ty_file_read(path_of("fifo"), &k_text, &data, &size));
  assert_string_equal(data, "through a fifo");
  free(data);
  int status = 0;
  waitpid(pid, &status, 0);
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_folder_and_missing(void **state) {
  (void)state;
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_STATUS(ty_file_read(g_dir, &k_text, &data, &size), TY_CODE_FAILED_PRECONDITION,
                   "is a folder, not a file");
  TY_EXPECT_STATUS(ty_file_read(path_of("absent"), &k_text, &data, &size), TY_CODE_NOT_FOUND,
                   "cannot read test config");
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

static void test_read_grows_past_the_first_buffer(void **state) {
  (void)state;
  char file[300];
  path_in(file, sizeof(file), "text.txt");
  write_text(file, "abc\n");
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_file_read(file, &k_large, &data, &size));
  assert_int_equal(size, 4);
  assert_string_equal(data, "abc\n");
  free(data);
  /* a pipe has no size: the reader grows its buffer past its first 64 KiB */
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
  TY_EXPECT_OK(ty_file_read(pipe_path, &k_large, &data, &size));
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
  char *data = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_file_read(made, &k_large, &data, &size));
  assert_int_equal(size, 4);
  free(data);
}

/* A FIFO (like /dev/null or /dev/stdout: not a regular file) is written in
 * place: a rename over it would replace the node with a regular file (as
 * root, `generate --output /dev/null` did that to /dev/null). */
static void test_write_atomic_into_a_pipe(void **state) {
  (void)state;
  char fifo[300];
  path_in(fifo, sizeof(fifo), "pipe");
  assert_int_equal(mkfifo(fifo, 0600), 0);
  int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* a reader, so the writer's open succeeds */
  assert_true(rd >= 0);
  TY_EXPECT_OK(ty_file_write_atomic(fifo, "through the pipe", 16));
  char got[32] = {0};
  assert_int_equal(read(rd, got, sizeof(got)), 16);
  assert_string_equal(got, "through the pipe");
  close(rd);
  struct stat st;
  assert_int_equal(stat(fifo, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_regular_file_up_to_the_cap),
      cmocka_unit_test(test_cap_variable),
      cmocka_unit_test(test_nul_bytes),
      cmocka_unit_test(test_dev_zero),
      cmocka_unit_test(test_endless_pipe),
      cmocka_unit_test(test_finite_pipe_and_fifo),
      cmocka_unit_test(test_folder_and_missing),
      cmocka_unit_test(test_open_read_names_folder_device_and_missing),
      cmocka_unit_test(test_probe_absent_only_for_enoent),
      cmocka_unit_test(test_read_grows_past_the_first_buffer),
      cmocka_unit_test(test_create_error_names_the_target_not_the_temp),
      cmocka_unit_test(test_write_atomic_errors_name_the_target),
      cmocka_unit_test(test_write_atomic_into_a_pipe),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
