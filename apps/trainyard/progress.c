/* Progress bars on stderr for long commands (progress.h). */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double ty_progress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ty_progress_format_bytes(double bytes, char *out, size_t capacity) {
  if (bytes >= 1e9) {
    snprintf(out, capacity, "%.2f GB", bytes / 1e9);
  } else if (bytes >= 1e6) {
    snprintf(out, capacity, "%.2f MB", bytes / 1e6);
  } else if (bytes >= 1e3) {
    snprintf(out, capacity, "%.1f kB", bytes / 1e3);
  } else {
    snprintf(out, capacity, "%.0f B", bytes);
  }
}

void ty_progress_format_count(double count, char *out, size_t capacity) {
  if (count >= 1e9) {
    snprintf(out, capacity, "%.2fG", count / 1e9);
  } else if (count >= 1e6) {
    snprintf(out, capacity, "%.2fM", count / 1e6);
  } else if (count >= 1e4) {
    snprintf(out, capacity, "%.1fk", count / 1e3);
  } else {
    snprintf(out, capacity, "%.0f", count);
  }
}

void ty_progress_start(ty_progress_t *p, const char *label, bool bytes, const char *unit,
                       uint64_t total, bool enabled) {
  p->active = enabled && isatty(STDERR_FILENO);
  p->bytes = bytes;
  p->label = label;
  p->unit = unit;
  p->total = total;
  p->start = ty_progress_now();
  p->last_draw = 0;
  p->drawn = false;
}

void ty_progress_update(ty_progress_t *p, uint64_t done, uint64_t tokens) {
  if (!p->active) return;
  double now = ty_progress_now();
  if (p->drawn && now - p->last_draw < 0.1 && done < p->total) return;
  p->last_draw = now;
  p->drawn = true;
  double elapsed = now - p->start, fraction = p->total ? (double)done / (double)p->total : 1.0;
  if (fraction > 1.0) fraction = 1.0;
  enum { kWidth = 24 };
  char bar[kWidth + 1];
  int filled = (int)(fraction * kWidth);
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = '\0';
  char rate[48] = "", tokens_rate[48] = "", eta[32] = "ETA --:--";
  if (elapsed > 0.05) {
    double r = (double)done / elapsed;
    char n[24];
    if (p->bytes) {
      ty_progress_format_bytes(r, n, sizeof(n));
      snprintf(rate, sizeof(rate), "  %s/s", n);
    } else {
      ty_progress_format_count(r, n, sizeof(n));
      snprintf(rate, sizeof(rate), "  %s %s/s", n, p->unit ? p->unit : "");
    }
    if (tokens != UINT64_MAX) {
      ty_progress_format_count((double)tokens / elapsed, n, sizeof(n));
      snprintf(tokens_rate, sizeof(tokens_rate), "  %s tokens/s", n);
    }
    if (done >= p->total) {
      snprintf(eta, sizeof(eta), "%.1f s", elapsed);
    } else if (r > 0) {
      double left = (double)(p->total - done) / r;
      snprintf(eta, sizeof(eta), "ETA %d:%02d", (int)(left / 60), (int)left % 60);
    }
  }
  fprintf(stderr, "\r%s [%s] %3d%%%s%s  %s\033[K", p->label, bar, (int)(fraction * 100), rate,
          tokens_rate, eta);
  fflush(stderr);
}

void ty_progress_finish(ty_progress_t *p) {
  if (p->active && p->drawn) {
    fputs("\r\033[K", stderr);
    fflush(stderr);
  }
  p->drawn = false;
}
