/* hal/file.h: capped whole-file reads. Regular files, pipes and character
 * devices; the cap (exactly at it, one past it, raised by its variable, a
 * bad variable); NUL bytes in text kinds (with the offset) and not in binary
 * ones; folders and missing files. /dev/zero must fail at once for text and
 * at the cap for binary, never by exhausting memory. */
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

static char g_dir[64];

static const char *path_of(const char *name) {
  static char path[128];
  snprintf(path, sizeof(path), "%s/%s", g_dir, name);
  return path;
}

static void write_bytes(const char *name, const void *data, size_t size) {
  FILE *f = fopen(path_of(name), "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, size, f), size);
  assert_int_equal(fclose(f), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof(g_dir), "/tmp/ty_file_test_XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
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
                   "'mapped' holds a NUL byte at offset 2");
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
                   TY_CODE_RESOURCE_EXHAUSTED, "'the pipe' is larger than 1000 B");
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
  TY_EXPECT_STATUS(ty_file_read(g_dir, &k_text, &data, &size), TY_CODE_INVALID_ARGUMENT,
                   "is a folder");
  TY_EXPECT_STATUS(ty_file_read(path_of("absent"), &k_text, &data, &size), TY_CODE_NOT_FOUND,
                   "cannot open test config");
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
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
