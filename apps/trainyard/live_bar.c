/* The live progress bar (live_bar.h) on top of metrics/progress.h. */
#include "live_bar.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "metrics/progress.h"

double ty_live_bar_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ty_live_bar_start(ty_live_bar_t *p, const char *label, bool bytes, const char *unit,
                       uint64_t total, bool enabled) {
  p->active = enabled && ty_progress_mode_for_fd(STDERR_FILENO) == TY_PROGRESS_LIVE;
  p->bytes = bytes;
  p->label = label;
  p->unit = unit;
  p->total = total;
  p->start = ty_live_bar_now();
  p->last_draw = 0;
  p->drawn = false;
}

void ty_live_bar_update(ty_live_bar_t *p, uint64_t done, uint64_t tokens) {
  if (!p->active) return;
  double now = ty_live_bar_now();
  if (p->drawn && now - p->last_draw < 0.1 && done < p->total) return;
  p->last_draw = now;
  p->drawn = true;
  double elapsed = now - p->start;
  ty_progress_bar_t bar = {
      .label = p->label,
      .done = (double)done,
      .total = (double)p->total,
      .rate = elapsed > 0.05 ? (double)done / elapsed : -1,
      .unit = p->bytes ? "B" : p->unit,
  };
  size_t width = ty_progress_terminal_width(STDERR_FILENO);
  char text[256], extra[64] = "", line[512];
  ty_progress_bar_format(&bar, width > 24 ? width - 20 : width, text, sizeof(text));
  if (tokens != UINT64_MAX && elapsed > 0.05) {
    char n[24];
    ty_progress_format_si((double)tokens / elapsed, n, sizeof(n));
    snprintf(extra, sizeof(extra), " %s tok/s", n);
  }
  char joined[320];
  snprintf(joined, sizeof(joined), "%s%s", text, extra);
  ty_progress_line_render(TY_PROGRESS_LIVE, joined, width, line, sizeof(line));
  fputs(line, stderr);
  fflush(stderr);
}

void ty_live_bar_finish(ty_live_bar_t *p) {
  if (p->active && p->drawn) {
    fputs(ty_progress_line_clear(TY_PROGRESS_LIVE), stderr);
    fflush(stderr);
  }
  p->drawn = false;
}
