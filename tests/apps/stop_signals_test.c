/* apps/trainyard/stop_signals.c: the waiter thread, its pause around fork()
 * and the graceful stop it records. */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "apps/trainyard/stop_signals.h"

static int ty_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Threads end asynchronously in the kernel's view of /proc: wait a little. */
static int ty_thread_count_settled(int want) {
  int n = ty_thread_count();
  for (int i = 0; i < 200 && n != want; ++i) {
    struct timespec t = {0, 5 * 1000 * 1000};
    nanosleep(&t, NULL);
    n = ty_thread_count();
  }
  return n;
}

static int ty_wait_received(void) {
  for (int i = 0; i < 400; ++i) {
    int sig = ty_stop_signals_received();
    if (sig) return sig;
    struct timespec t = {0, 5 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  return 0;
}

static void test_pause_leaves_one_thread_and_keeps_signals(void **state) {
  (void)state;
  assert_int_equal(ty_thread_count_settled(2), 2); /* main + waiter */
  ty_stop_signals_arm();
  ty_stop_signals_clear();
  ty_stop_signals_pause();
  assert_int_equal(ty_thread_count_settled(1), 1);
  /* A signal that comes while paused waits, blocked and pending... */
  kill(getpid(), SIGTERM);
  struct timespec t = {0, 50 * 1000 * 1000};
  nanosleep(&t, NULL);
  assert_int_equal(ty_stop_signals_received(), 0);
  /* ...for the next waiter. */
  assert_true(ty_stop_signals_resume());
  assert_int_equal(ty_thread_count_settled(2), 2);
  assert_int_equal(ty_wait_received(), SIGTERM);
  ty_stop_signals_clear();
  /* pause and resume twice are harmless. */
  ty_stop_signals_pause();
  ty_stop_signals_pause();
  assert_true(ty_stop_signals_resume());
  assert_true(ty_stop_signals_resume());
  assert_int_equal(ty_thread_count_settled(2), 2);
}

static void test_child_of_fork_gets_its_own_waiter(void **state) {
  (void)state;
  ty_stop_signals_pause();
  pid_t pid = fork();
  assert_true(pid >= 0);
  assert_true(ty_stop_signals_resume());
  if (pid == 0) {
    /* The child: armed, a SIGINT is recorded by its own waiter. */
    ty_stop_signals_clear();
    ty_stop_signals_arm();
    int ok = ty_thread_count_settled(2) == 2;
    kill(getpid(), SIGINT);
    ok = ok && ty_wait_received() == SIGINT;
    _exit(ok ? 0 : 3);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* SIGHUP (a dropped SSH session) is taken like SIGTERM: recorded while
 * armed, not the default death with exit 129. */
static void test_sighup_is_recorded_like_sigterm(void **state) {
  (void)state;
  ty_stop_signals_arm();
  ty_stop_signals_clear();
  kill(getpid(), SIGHUP);
  assert_int_equal(ty_wait_received(), SIGHUP);
  assert_string_equal(ty_stop_signals_name(SIGHUP), "SIGHUP");
  assert_string_equal(ty_stop_signals_name(SIGTERM), "SIGTERM");
  ty_stop_signals_clear();
}

/* Runs first: nothing is armed yet. */
static void test_unarmed_signal_ends_the_process_the_default_way(void **state) {
  (void)state;
  ty_stop_signals_pause();
  pid_t pid = fork();
  assert_true(pid >= 0);
  assert_true(ty_stop_signals_resume());
  if (pid == 0) {
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 400; ++i) {
      struct timespec t = {0, 5 * 1000 * 1000};
      nanosleep(&t, NULL);
    }
    _exit(5); /* not reached: the waiter ended the process */
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGTERM);
}

int main(void) {
  if (!ty_stop_signals_start()) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unarmed_signal_ends_the_process_the_default_way),
      cmocka_unit_test(test_pause_leaves_one_thread_and_keeps_signals),
      cmocka_unit_test(test_child_of_fork_gets_its_own_waiter),
      cmocka_unit_test(test_sighup_is_recorded_like_sigterm),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
