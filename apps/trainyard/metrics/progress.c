/* Progress line formatting (see progress.h). Each formatter appends to a
 * bounded buffer through ty_pg_text_t, which keeps counting past the end so
 * that callers get snprintf's "length it would have had". */
#include "metrics/progress.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define TY_PG_BAR_MAX 40
#define TY_PG_BAR_MIN 5

typedef struct ty_pg_text_t {
  char *buf;
  size_t size; /* capacity of buf, NUL included */
  size_t len;  /* length of the whole text, also past `size` */
} ty_pg_text_t;

static ty_pg_text_t ty_pg_text(char *buf, size_t size) {
  if (size > 0) buf[0] = '\0';
  ty_pg_text_t t = {buf, size, 0};
  return t;
}

static void ty_pg_put(ty_pg_text_t *t, const char *s, size_t n) {
  if (t->len < t->size) {
    size_t room = t->size - 1 - t->len;
    size_t k = n < room ? n : room;
    memcpy(t->buf + t->len, s, k);
    t->buf[t->len + k] = '\0';
  }
  t->len += n;
}

static void ty_pg_puts(ty_pg_text_t *t, const char *s) { ty_pg_put(t, s, strlen(s)); }

static void ty_pg_printf(ty_pg_text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ty_pg_printf(ty_pg_text_t *t, const char *fmt, ...) {
  char tmp[128];
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(tmp, sizeof(tmp), fmt, args);
  va_end(args);
  if (n > 0) ty_pg_put(t, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* "nan", "inf", "-inf" for non-finite values; false for finite ones. */
static bool ty_pg_put_nonfinite(ty_pg_text_t *t, double v) {
  if (isnan(v)) ty_pg_puts(t, "nan");
  else if (isinf(v)) ty_pg_puts(t, v < 0 ? "-inf" : "inf");
  else return false;
  return true;
}

/* %.<sig>g with a compact exponent: 1.23e+03 -> 1.23e3, 2.4e-04 -> 2.4e-4. */
static void ty_pg_put_g(ty_pg_text_t *t, double v, int sig) {
  if (ty_pg_put_nonfinite(t, v)) return;
  char tmp[64];
  snprintf(tmp, sizeof(tmp), "%.*g", sig, v);
  char *e = strchr(tmp, 'e');
  if (e) {
    char *digits = e + 1;
    bool negative = *digits == '-';
    if (*digits == '-' || *digits == '+') ++digits;
    while (digits[0] == '0' && digits[1]) ++digits;
    char exponent[16];
    snprintf(exponent, sizeof(exponent), "e%s%s", negative ? "-" : "", digits);
    *e = '\0';
    ty_pg_puts(t, tmp);
    ty_pg_puts(t, exponent);
    return;
  }
  ty_pg_puts(t, tmp);
}

/* Scientific with up to three significant figures and no trailing zeros:
 * 2.4e-4, 6e-4, 1.25e-3; 0 as "0". */
static void ty_pg_put_sci(ty_pg_text_t *t, double v) {
  if (ty_pg_put_nonfinite(t, v)) return;
  if (v == 0.0) {
    ty_pg_puts(t, "0");
    return;
  }
  char tmp[64];
  snprintf(tmp, sizeof(tmp), "%.2e", v);
  char *e = strchr(tmp, 'e');
  char *end = e;
  while (end[-1] == '0') --end;
  if (end[-1] == '.') --end;
  char exponent[16];
  int x = atoi(e + 1);
  snprintf(exponent, sizeof(exponent), "e%d", x);
  ty_pg_put(t, tmp, (size_t)(end - tmp));
  ty_pg_puts(t, exponent);
}

/* Number and SI prefix: value scaled into [0, 999.5) with 3 figures. */
static void ty_pg_put_si(ty_pg_text_t *t, double value, const char *between) {
  static const char *const prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  if (ty_pg_put_nonfinite(t, value)) {
    ty_pg_puts(t, between);
    return;
  }
  double v = fabs(value);
  size_t i = 0;
  while (v >= 999.5 && i + 1 < sizeof(prefixes) / sizeof(prefixes[0])) {
    v /= 1000.0;
    ++i;
  }
  ty_pg_printf(t, v < 99.95 ? "%s%.1f%s%s" : "%s%.0f%s%s", value < 0 ? "-" : "", v, between,
               prefixes[i]);
}

size_t ty_progress_format_si(double value, char *buf, size_t size) {
  ty_pg_text_t t = ty_pg_text(buf, size);
  ty_pg_put_si(&t, value, "");
  return t.len;
}

size_t ty_progress_format_bytes(double bytes, char *buf, size_t size) {
  ty_pg_text_t t = ty_pg_text(buf, size);
  ty_pg_put_si(&t, bytes, " ");
  ty_pg_puts(&t, "B");
  return t.len;
}

static void ty_pg_put_duration(ty_pg_text_t *t, double seconds) {
  if (!(seconds >= 0) || seconds > 9.0e15) {
    ty_pg_puts(t, seconds > 9.0e15 ? "inf" : "?");
    return;
  }
  long long s = llround(seconds);
  if (s < 60) {
    ty_pg_printf(t, "%llds", s);
    return;
  }
  if (s < 600) {
    ty_pg_printf(t, "%lldm%02llds", s / 60, s % 60);
    return;
  }
  long long m = (s + 30) / 60;
  if (m < 60) {
    ty_pg_printf(t, "%lldm", m);
    return;
  }
  long long h = m / 60;
  m %= 60;
  if (h < 100) ty_pg_printf(t, "%lldh%02lldm", h, m);
  else ty_pg_printf(t, "%lldh", h);
}

size_t ty_progress_format_duration(double seconds, char *buf, size_t size) {
  ty_pg_text_t t = ty_pg_text(buf, size);
  ty_pg_put_duration(&t, seconds);
  return t.len;
}

/* ---- one training step -------------------------------------------------- */

size_t ty_progress_step_format(const ty_progress_step_t *s, char *buf, size_t size) {
  ty_pg_text_t t = ty_pg_text(buf, size);
  if (s->epoch_count > 0) {
    ty_pg_printf(&t, "Epoch [%lld/%lld], ", (long long)s->epoch, (long long)s->epoch_count);
  }
  if (s->step_count > 0) {
    ty_pg_printf(&t, "Step [%lld/%lld]", (long long)s->step, (long long)s->step_count);
  } else {
    ty_pg_printf(&t, "Step [%lld]", (long long)s->step);
  }
  if (s->fields & TY_PROGRESS_LOSS) {
    ty_pg_puts(&t, ", loss ");
    ty_pg_put_g(&t, s->loss, 4);
  }
  if (s->fields & TY_PROGRESS_LR) {
    ty_pg_puts(&t, ", lr ");
    ty_pg_put_sci(&t, s->lr);
  }
  if (s->fields & TY_PROGRESS_GRAD_NORM) {
    ty_pg_puts(&t, ", grad-norm ");
    ty_pg_put_g(&t, s->grad_norm, 3);
  }
  if (s->fields & TY_PROGRESS_TOKENS_PER_S) {
    ty_pg_puts(&t, ", ");
    ty_pg_put_si(&t, s->tokens_per_s, "");
    ty_pg_puts(&t, " tok/s");
  }
  if (s->fields & TY_PROGRESS_MFU) {
    double pct = s->mfu * 100.0;
    ty_pg_puts(&t, ", MFU ");
    if (!ty_pg_put_nonfinite(&t, pct)) ty_pg_printf(&t, fabs(pct) < 9.95 ? "%.1f" : "%.0f", pct);
    ty_pg_puts(&t, "%");
  }
  if (s->fields & TY_PROGRESS_ETA) {
    ty_pg_puts(&t, ", ETA ");
    ty_pg_put_duration(&t, s->eta_s);
  }
  return t.len;
}

/* ---- a progress bar ------------------------------------------------------- */

/* "12.3 MB/s", "14.2k tok/s", "14.2k/s". */
static void ty_pg_put_rate(ty_pg_text_t *t, double rate, const char *unit) {
  if (unit && strcmp(unit, "B") == 0) {
    ty_pg_put_si(t, rate, " ");
    ty_pg_puts(t, "B/s");
  } else {
    ty_pg_put_si(t, rate, "");
    if (unit && *unit) {
      ty_pg_puts(t, " ");
      ty_pg_puts(t, unit);
    }
    ty_pg_puts(t, "/s");
  }
}

static void ty_pg_put_amount(ty_pg_text_t *t, double amount, const char *unit) {
  if (unit && strcmp(unit, "B") == 0) {
    ty_pg_put_si(t, amount, " ");
    ty_pg_puts(t, "B");
  } else {
    ty_pg_put_si(t, amount, "");
    if (unit && *unit) {
      ty_pg_puts(t, " ");
      ty_pg_puts(t, unit);
    }
  }
}

/* Columns of UTF-8 text: one per character (lead byte). */
static size_t ty_pg_columns(const char *s, size_t n) {
  size_t cols = 0;
  for (size_t i = 0; i < n; ++i) cols += ((unsigned char)s[i] & 0xC0) != 0x80;
  return cols;
}

size_t ty_progress_bar_format(const ty_progress_bar_t *bar, size_t width, char *buf,
                              size_t size) {
  bool has_label = bar->label && *bar->label;
  bool has_rate = bar->rate >= 0;
  char suffix[128];
  ty_pg_text_t s = ty_pg_text(suffix, sizeof(suffix));
  double fraction = 0.0;
  if (bar->total > 0) {
    fraction = bar->done / bar->total;
    if (!(fraction >= 0)) fraction = 0; /* NaN or negative */
    if (fraction > 1) fraction = 1;
    ty_pg_printf(&s, "%d%%", (int)floor(fraction * 100.0));
    if (has_rate) {
      ty_pg_puts(&s, " ");
      ty_pg_put_rate(&s, bar->rate, bar->unit);
    }
    if (has_rate && bar->rate > 0 && bar->done < bar->total) {
      ty_pg_puts(&s, " ETA ");
      ty_pg_put_duration(&s, (bar->total - bar->done) / bar->rate);
    }
  } else {
    ty_pg_put_amount(&s, bar->done, bar->unit);
    if (has_rate) {
      ty_pg_puts(&s, " ");
      ty_pg_put_rate(&s, bar->rate, bar->unit);
    }
  }

  ty_pg_text_t t = ty_pg_text(buf, size);
  size_t used = 0;
  if (has_label) {
    ty_pg_puts(&t, bar->label);
    ty_pg_puts(&t, " ");
    used += ty_pg_columns(bar->label, strlen(bar->label)) + 1;
  }
  if (bar->total > 0) {
    /* "[" inner "] " before the suffix, and the last column left free as
     * ty_progress_line_render leaves it. */
    size_t other = used + 3 + ty_pg_columns(suffix, strlen(suffix)) + 1;
    size_t inner = width > other ? width - other : 0;
    if (inner > TY_PG_BAR_MAX) inner = TY_PG_BAR_MAX;
    if (inner >= TY_PG_BAR_MIN) {
      size_t filled = (size_t)floor(fraction * (double)inner);
      ty_pg_puts(&t, "[");
      for (size_t i = 0; i < inner; ++i) {
        ty_pg_puts(&t, i < filled ? "=" : i == filled ? ">" : " ");
      }
      ty_pg_puts(&t, "] ");
    }
  }
  ty_pg_puts(&t, suffix);
  return t.len;
}

/* ---- terminal or plain lines ---------------------------------------------- */

ty_progress_mode_t ty_progress_mode_for_fd(int fd) {
  if (!isatty(fd)) return TY_PROGRESS_PLAIN;
  const char *term = getenv("TERM");
  if (term && strcmp(term, "dumb") == 0) return TY_PROGRESS_PLAIN;
  return TY_PROGRESS_LIVE;
}

size_t ty_progress_terminal_width(int fd) {
  struct winsize ws;
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  const char *columns = getenv("COLUMNS");
  if (columns) {
    char *end;
    long n = strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n < 100000) return (size_t)n;
  }
  return 80;
}

size_t ty_progress_line_render(ty_progress_mode_t mode, const char *text, size_t width,
                               char *buf, size_t size) {
  ty_pg_text_t t = ty_pg_text(buf, size);
  size_t n = strlen(text);
  if (mode != TY_PROGRESS_LIVE) {
    ty_pg_put(&t, text, n);
    ty_pg_puts(&t, "\n");
    return t.len;
  }
  size_t max_cols = width > 1 ? width - 1 : 0;
  size_t cols = 0, cut = 0;
  while (cut < n) {
    /* Every byte up to the next character start belongs to this one. */
    size_t next = cut + 1;
    while (next < n && ((unsigned char)text[next] & 0xC0) == 0x80) ++next;
    if (cols + 1 > max_cols) break;
    ++cols;
    cut = next;
  }
  ty_pg_puts(&t, "\r");
  ty_pg_put(&t, text, cut);
  ty_pg_puts(&t, "\x1b[K");
  return t.len;
}

const char *ty_progress_line_clear(ty_progress_mode_t mode) {
  return mode == TY_PROGRESS_LIVE ? "\r\x1b[K" : "";
}

const char *ty_progress_line_finish(ty_progress_mode_t mode) {
  return mode == TY_PROGRESS_LIVE ? "\n" : "";
}
