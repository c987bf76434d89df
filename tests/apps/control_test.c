/* The control library (apps/trainyard/control): the registry folder's
 * checks, and a server and a client in one process — status from the
 * snapshot, a save posted for the loop and answered by it, an unknown
 * command, a request still waiting when the server stops, and the socket
 * and registry entry gone afterwards. */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/test_util.h"
#include "control/control.h"
#include "control/control_internal.h"

static char g_root[64];

static int setup(void **state) {
  (void)state;
  snprintf(g_root, sizeof(g_root), "/tmp/ty_control_test_XXXXXX");
  return mkdtemp(g_root) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char command[PATH_MAX + 16];
  snprintf(command, sizeof(command), "rm -rf '%s'", g_root);
  return system(command) == 0 ? 0 : -1;
}

static void test_registry_dir(void **state) {
  (void)state;
  char given[128], out[PATH_MAX];
  snprintf(given, sizeof(given), "%s/reg", g_root);
  TY_EXPECT_OK(ty_control_registry_dir(given, out, sizeof(out)));
  struct stat st;
  assert_int_equal(stat(given, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  assert_string_equal(out, given);
  /* open to others: someone else could plant entries */
  assert_int_equal(chmod(given, 0755), 0);
  TY_EXPECT_STATUS(ty_control_registry_dir(given, out, sizeof(out)), TY_CODE_FAILED_PRECONDITION,
                   "open to others");
  snprintf(given, sizeof(given), "%s/file", g_root);
  FILE *f = fopen(given, "w");
  assert_non_null(f);
  fclose(f);
  TY_EXPECT_STATUS(ty_control_registry_dir(given, out, sizeof(out)), TY_CODE_FAILED_PRECONDITION,
                   "not a folder");
  /* the default: $XDG_RUNTIME_DIR/trainyard */
  char xdg[128], want[160];
  snprintf(xdg, sizeof(xdg), "%s/xdg", g_root);
  assert_int_equal(mkdir(xdg, 0700), 0);
  setenv("XDG_RUNTIME_DIR", xdg, 1);
  TY_EXPECT_OK(ty_control_registry_dir(NULL, out, sizeof(out)));
  snprintf(want, sizeof(want), "%s/trainyard", xdg);
  assert_string_equal(out, want);
}

static json_t *call(const char *socket_path, const char *command) {
  int fd = -1;
  TY_EXPECT_OK(ty_control_connect(socket_path, getpid(), &fd));
  json_t *request = json_pack("{s:s}", "command", command), *reply = NULL;
  TY_EXPECT_OK(ty_control_call(fd, request, 5000, &reply));
  json_decref(request);
  close(fd);
  return reply;
}

static void sleep_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_server_and_client(void **state) {
  (void)state;
  char out[128], registry[128];
  snprintf(out, sizeof(out), "%s/run", g_root);
  snprintf(registry, sizeof(registry), "%s/reg2", g_root);
  assert_int_equal(mkdir(out, 0755), 0);
  json_t *config = json_pack("{s:i}", "max_steps", 7);
  ty_control_server_options_t o = {.out_dir = out, .registry = registry, .backend = "cpu:0",
                                   .config = config};
  ty_control_server_t *srv = NULL;
  TY_EXPECT_OK(ty_control_server_start(&o, &srv));
  json_decref(config);
  char sock[PATH_MAX]; /* a copy: the server's own goes with it */
  snprintf(sock, sizeof(sock), "%s", ty_control_server_socket(srv));
  struct stat st;
  assert_int_equal(stat(sock, &st), 0);
  assert_true(S_ISSOCK(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0600);
  char entry[192];
  snprintf(entry, sizeof(entry), "%s/%d.json", registry, (int)getpid());
  assert_string_equal(ty_control_server_entry(srv), entry);
  json_t *saved = json_load_file(entry, 0, NULL);
  assert_int_equal(json_integer_value(json_object_get(saved, "pid")), getpid());
  assert_string_equal(json_string_value(json_object_get(saved, "socket")), sock);
  json_decref(saved);

  ty_control_progress_t p = {.step = 3, .total_steps = 7, .loss = 2.5, .val_loss = NAN,
                             .eval_acc = 0.75, .tokens_per_s = 100, .eta_s = 4};
  ty_control_server_update(srv, &p);
  json_t *status = call(sock, "status");
  assert_true(json_is_true(json_object_get(status, "ok")));
  assert_int_equal(json_integer_value(json_object_get(status, "step")), 3);
  assert_true(json_is_null(json_object_get(status, "val_loss")));
  assert_int_equal(json_integer_value(json_object_get(json_object_get(status, "config"),
                                                      "max_steps")), 7);
  json_decref(status);

  json_t *bad = call(sock, "reboot");
  assert_false(json_is_true(json_object_get(bad, "ok")));
  TY_EXPECT_CONTAINS(json_string_value(json_object_get(bad, "error")), "unknown command");
  json_decref(bad);
  assert_int_equal(ty_control_server_take(srv), 0);

  /* save: posted for the loop, answered by it */
  int fd = -1;
  TY_EXPECT_OK(ty_control_connect(sock, getpid(), &fd));
  json_t *request = json_pack("{s:s}", "command", "save");
  TY_EXPECT_OK(ty_control_send_line(fd, request));
  unsigned bits = 0;
  for (int i = 0; i < 500 && !bits; ++i) {
    bits = ty_control_server_take(srv);
    if (!bits) sleep_ms(10);
  }
  assert_int_equal(bits, TY_CONTROL_SAVE);
  json_t *answer = json_pack("{s:i}", "step", 3), *reply = NULL;
  ty_control_server_reply(srv, TY_CONTROL_SAVE, true, answer);
  json_decref(answer);
  TY_EXPECT_OK(ty_control_read_line(fd, 5000, 1 << 16, &reply));
  assert_true(json_is_true(json_object_get(reply, "ok")));
  assert_int_equal(json_integer_value(json_object_get(reply, "step")), 3);
  json_decref(reply);
  close(fd);

  /* a stop still waiting when the run ends gets told so */
  TY_EXPECT_OK(ty_control_connect(sock, getpid(), &fd));
  json_object_set_new(request, "command", json_string("stop"));
  TY_EXPECT_OK(ty_control_send_line(fd, request));
  json_decref(request);
  sleep_ms(200); /* let the server thread queue it */
  ty_control_server_stop(srv);
  TY_EXPECT_OK(ty_control_read_line(fd, 5000, 1 << 16, &reply));
  assert_false(json_is_true(json_object_get(reply, "ok")));
  TY_EXPECT_CONTAINS(json_string_value(json_object_get(reply, "error")), "the run ended");
  json_decref(reply);
  close(fd);
  assert_int_equal(access(sock, F_OK), -1);
  assert_int_equal(access(entry, F_OK), -1);
  /* and a client finds nothing there */
  TY_EXPECT_STATUS(ty_control_connect(sock, getpid(), &fd), TY_CODE_NOT_FOUND, sock);
}

static void test_format_duration(void **state) {
  (void)state;
  static const struct {
    double seconds;
    const char *want;
  } cases[] = {{0, "0m00s"},     {7.9, "0m07s"},     {59, "0m59s"},   {61, "1m01s"},
               {247, "4m07s"},   {3599, "59m59s"},   {3600, "1h00m"}, {7530, "2h05m"},
               {-1, "-"},        {NAN, "-"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    char out[32];
    ty_control_format_duration(cases[i].seconds, out, sizeof(out));
    assert_string_equal(out, cases[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_dir),
      cmocka_unit_test(test_format_duration),
      cmocka_unit_test(test_server_and_client),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
