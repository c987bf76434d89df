/* Progress lines: SI units and their rounding edges, durations, the step
 * line of `trainyard train`, the progress bar at every width, LIVE and
 * PLAIN rendering (cutting at the width without splitting a UTF-8
 * character), snprintf-style truncation, and the mode of a pipe and of a
 * pseudo-terminal. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/test_util.h"
#include "metrics/progress.h"

typedef size_t (*format_fn)(double, char *, size_t);

static void expect_format(format_fn fn, double v, const char *want) {
  char buf[64];
  size_t n = fn(v, buf, sizeof(buf));
  if (strcmp(buf, want) != 0) fail_msg("%.17g: got '%s', want '%s'", v, buf, want);
  assert_int_equal(n, strlen(want));
}

static void test_si(void **state) {
  (void)state;
  expect_format(ty_progress_format_si, 0, "0.0");
  expect_format(ty_progress_format_si, 12.34, "12.3");
  expect_format(ty_progress_format_si, 99.94, "99.9");
  expect_format(ty_progress_format_si, 99.96, "100");
  expect_format(ty_progress_format_si, 950, "950");
  expect_format(ty_progress_format_si, 999.4, "999");
  expect_format(ty_progress_format_si, 999.6, "1.0k");
  expect_format(ty_progress_format_si, 14213, "14.2k");
  expect_format(ty_progress_format_si, 142300, "142k");
  expect_format(ty_progress_format_si, 1.4e6, "1.4M");
  expect_format(ty_progress_format_si, 3.2e9, "3.2G");
  expect_format(ty_progress_format_si, 5e12, "5.0T");
  expect_format(ty_progress_format_si, -1500, "-1.5k");
  expect_format(ty_progress_format_si, NAN, "nan");
  expect_format(ty_progress_format_si, INFINITY, "inf");
  expect_format(ty_progress_format_bytes, 950, "950 B");
  expect_format(ty_progress_format_bytes, 12.3e6, "12.3 MB");
  expect_format(ty_progress_format_bytes, 1.2e9, "1.2 GB");
}

static void test_duration(void **state) {
  (void)state;
  expect_format(ty_progress_format_duration, 0, "0s");
  expect_format(ty_progress_format_duration, 45, "45s");
  expect_format(ty_progress_format_duration, 59.4, "59s");
  expect_format(ty_progress_format_duration, 59.6, "1m00s");
  expect_format(ty_progress_format_duration, 65, "1m05s");
  expect_format(ty_progress_format_duration, 599, "9m59s");
  expect_format(ty_progress_format_duration, 600, "10m");
  expect_format(ty_progress_format_duration, 12 * 60 + 29, "12m");
  expect_format(ty_progress_format_duration, 12 * 60 + 30, "13m");
  expect_format(ty_progress_format_duration, 3569, "59m");
  expect_format(ty_progress_format_duration, 3599, "1h00m");
  expect_format(ty_progress_format_duration, 2 * 3600 + 5 * 60, "2h05m");
  expect_format(ty_progress_format_duration, 99 * 3600 + 59 * 60 + 40, "100h");
  expect_format(ty_progress_format_duration, 123 * 3600, "123h");
  expect_format(ty_progress_format_duration, -1, "?");
  expect_format(ty_progress_format_duration, NAN, "?");
  expect_format(ty_progress_format_duration, INFINITY, "inf");
}

static ty_progress_step_t full_step(void) {
  ty_progress_step_t s = {
      .epoch = 1, .epoch_count = 3, .step = 120, .step_count = 2622,
      .fields = TY_PROGRESS_LOSS | TY_PROGRESS_LR | TY_PROGRESS_GRAD_NORM |
                TY_PROGRESS_TOKENS_PER_S | TY_PROGRESS_MFU | TY_PROGRESS_ETA,
      .loss = 3.41217, .lr = 2.4e-4, .grad_norm = 0.9104, .tokens_per_s = 14213.0,
      .mfu = 0.3123, .eta_s = 12 * 60 + 5};
  return s;
}

static void expect_step(const ty_progress_step_t *s, const char *want) {
  char buf[256];
  size_t n = ty_progress_step_format(s, buf, sizeof(buf));
  if (strcmp(buf, want) != 0) fail_msg("got '%s'\nwant '%s'", buf, want);
  assert_int_equal(n, strlen(want));
}

static void test_step_line(void **state) {
  (void)state;
  ty_progress_step_t s = full_step();
  expect_step(&s, "Epoch [1/3], Step [120/2622], loss 3.412, lr 2.4e-4, grad-norm 0.91, "
                  "14.2k tok/s, MFU 31%, ETA 12m");
  /* Learning rates: three figures at most, no trailing zeros. */
  const struct { double lr; const char *text; } lrs[] = {
      {6e-4, "6e-4"}, {5.9973e-4, "6e-4"}, {1.25e-3, "1.25e-3"}, {3e-5, "3e-5"},
      {0.1, "1e-1"},  {0.0, "0"},          {1.0, "1e0"},         {2.456e-4, "2.46e-4"}};
  for (size_t i = 0; i < sizeof(lrs) / sizeof(lrs[0]); ++i) {
    ty_progress_step_t t = {.step = 1, .fields = TY_PROGRESS_LR, .lr = lrs[i].lr};
    char want[64];
    snprintf(want, sizeof(want), "Step [1], lr %s", lrs[i].text);
    expect_step(&t, want);
  }
  /* A diverged run shows it; small MFU keeps a decimal; big numbers stay
   * short. */
  ty_progress_step_t t = {.step = 7, .step_count = 10,
                          .fields = TY_PROGRESS_LOSS | TY_PROGRESS_GRAD_NORM | TY_PROGRESS_MFU,
                          .loss = NAN, .grad_norm = INFINITY, .mfu = 0.045};
  expect_step(&t, "Step [7/10], loss nan, grad-norm inf, MFU 4.5%");
  t.loss = 12345.6;
  t.grad_norm = 1234.5;
  t.mfu = 0.0;
  expect_step(&t, "Step [7/10], loss 1.235e4, grad-norm 1.23e3, MFU 0.0%");
  t.fields = 0;
  expect_step(&t, "Step [7/10]");
}

static void test_snprintf_semantics(void **state) {
  (void)state;
  ty_progress_step_t s = full_step();
  char full[256], small[20];
  size_t n = ty_progress_step_format(&s, full, sizeof(full));
  assert_int_equal(ty_progress_step_format(&s, small, sizeof(small)), n);
  assert_int_equal(strlen(small), sizeof(small) - 1);
  assert_memory_equal(small, full, sizeof(small) - 1);
  assert_int_equal(ty_progress_step_format(&s, NULL, 0), n);
  char one[1] = {'x'};
  assert_int_equal(ty_progress_step_format(&s, one, 1), n);
  assert_int_equal(one[0], '\0');
}

static size_t columns(const char *s) {
  size_t n = 0;
  for (; *s; ++s) n += ((unsigned char)*s & 0xC0) != 0x80;
  return n;
}

static void test_bar(void **state) {
  (void)state;
  ty_progress_bar_t bar = {.done = 0.45e9, .total = 1e9, .rate = 12.3e6, .unit = "B"};
  char buf[256];
  /* 41 columns: 40 usable; "[" 16 "] " and the 21 of the suffix. */
  ty_progress_bar_format(&bar, 41, buf, sizeof(buf));
  assert_string_equal(buf, "[=======>        ] 45% 12.3 MB/s ETA 45s");
  /* Wide terminals: the bar stops at 40 columns. */
  ty_progress_bar_format(&bar, 200, buf, sizeof(buf));
  assert_string_equal(buf, "[==================>                     ] 45% 12.3 MB/s ETA 45s");
  /* Every width: within width - 1 columns whenever the suffix fits; the
   * bar appears exactly when it gets 5 columns. */
  const char *suffix = "45% 12.3 MB/s ETA 45s";
  for (size_t width = 1; width < 120; ++width) {
    ty_progress_bar_format(&bar, width, buf, sizeof(buf));
    size_t cols = columns(buf);
    bool has_bar = buf[0] == '[';
    assert_int_equal(has_bar, width >= strlen(suffix) + 3 + 5 + 1);
    if (has_bar) {
      assert_true(cols <= width - 1);
      assert_true(cols <= strlen(suffix) + 3 + 40);
    } else {
      assert_string_equal(buf, suffix);
    }
  }
  /* Start, end, counts with a unit, a label in UTF-8, an unknown total. */
  ty_progress_bar_t start = {.label = "données", .done = 0, .total = 10, .rate = -1};
  ty_progress_bar_format(&start, 27, buf, sizeof(buf));
  assert_string_equal(buf, "données [>            ] 0%");
  ty_progress_bar_t done = {.done = 10, .total = 10, .rate = 2.0e4, .unit = "tok"};
  ty_progress_bar_format(&done, 40, buf, sizeof(buf));
  assert_string_equal(buf, "[====================] 100% 20.0k tok/s");
  ty_progress_bar_t unknown = {.label = "reading", .done = 1.2e9, .total = 0, .rate = 12.3e6,
                               .unit = "B"};
  ty_progress_bar_format(&unknown, 80, buf, sizeof(buf));
  assert_string_equal(buf, "reading 1.2 GB 12.3 MB/s");
  ty_progress_bar_t plain = {.done = 999.0, .total = 1000.0, .rate = 3.0};
  ty_progress_bar_format(&plain, 30, buf, sizeof(buf));
  assert_string_equal(buf, "[=========>] 99% 3.0/s ETA 0s");
}

static void test_render(void **state) {
  (void)state;
  char buf[256];
  size_t n = ty_progress_line_render(TY_PROGRESS_LIVE, "Step [1]", 80, buf, sizeof(buf));
  assert_string_equal(buf, "\rStep [1]\x1b[K");
  assert_int_equal(n, strlen(buf));
  ty_progress_line_render(TY_PROGRESS_PLAIN, "Step [1]", 80, buf, sizeof(buf));
  assert_string_equal(buf, "Step [1]\n");
  /* Cut to width - 1 columns on a terminal, never in plain lines. */
  char long_text[101];
  memset(long_text, 'x', 100);
  long_text[100] = '\0';
  ty_progress_line_render(TY_PROGRESS_LIVE, long_text, 50, buf, sizeof(buf));
  assert_int_equal(strlen(buf), 1 + 49 + 3);
  ty_progress_line_render(TY_PROGRESS_PLAIN, long_text, 50, buf, sizeof(buf));
  assert_int_equal(strlen(buf), 101);
  /* A cut never splits a character: four "é" (two bytes each) in 5 columns. */
  ty_progress_line_render(TY_PROGRESS_LIVE, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 5,
                          buf, sizeof(buf));
  assert_string_equal(buf, "\r\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\x1b[K");
  ty_progress_line_render(TY_PROGRESS_LIVE, "abc", 0, buf, sizeof(buf));
  assert_string_equal(buf, "\r\x1b[K");
  assert_string_equal(ty_progress_line_clear(TY_PROGRESS_LIVE), "\r\x1b[K");
  assert_string_equal(ty_progress_line_clear(TY_PROGRESS_PLAIN), "");
  assert_string_equal(ty_progress_line_finish(TY_PROGRESS_LIVE), "\n");
  assert_string_equal(ty_progress_line_finish(TY_PROGRESS_PLAIN), "");
}

static void test_mode_and_width(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  assert_int_equal(ty_progress_mode_for_fd(fds[1]), TY_PROGRESS_PLAIN);
  setenv("COLUMNS", "77", 1);
  assert_int_equal(ty_progress_terminal_width(fds[1]), 77);
  setenv("COLUMNS", "wide", 1);
  assert_int_equal(ty_progress_terminal_width(fds[1]), 80);
  unsetenv("COLUMNS");
  assert_int_equal(ty_progress_terminal_width(fds[1]), 80);
  close(fds[0]);
  close(fds[1]);

  /* A pseudo-terminal is a terminal: LIVE, with its own width. */
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0) {
    print_message("pseudo-terminal part skipped: posix_openpt failed (no /dev/ptmx)\n");
    return;
  }
  assert_int_equal(grantpt(master), 0);
  assert_int_equal(unlockpt(master), 0);
  int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
  assert_true(slave >= 0);
  struct winsize ws = {.ws_row = 24, .ws_col = 123};
  assert_int_equal(ioctl(slave, TIOCSWINSZ, &ws), 0);
  setenv("TERM", "xterm", 1);
  assert_int_equal(ty_progress_mode_for_fd(slave), TY_PROGRESS_LIVE);
  assert_int_equal(ty_progress_terminal_width(slave), 123);
  setenv("TERM", "dumb", 1);
  assert_int_equal(ty_progress_mode_for_fd(slave), TY_PROGRESS_PLAIN);
  close(slave);
  close(master);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_si),
      cmocka_unit_test(test_duration),
      cmocka_unit_test(test_step_line),
      cmocka_unit_test(test_snprintf_semantics),
      cmocka_unit_test(test_bar),
      cmocka_unit_test(test_render),
      cmocka_unit_test(test_mode_and_width),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
