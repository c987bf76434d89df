/* The SVG of `trainyard compare` (compare_plot.h), written by hand: two
 * panels sharing the step axis, nice tick values, a legend, and relative
 * differences of exactly zero drawn on the panel's floor and said so. */
#include "compare_plot.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/runtime/compile_cache.h"

#define W 960.0
#define H 700.0
#define LEFT 96.0
#define RIGHT 36.0
#define TOP1 104.0 /* loss panel */
#define BOT1 392.0
#define TOP2 462.0 /* relative difference panel */
#define BOT2 632.0
#define LOG2 604.0 /* the log scale ends here; below it, the row of exact zeros */

static const char *const ty_colors[] = {"#1f5fa8", "#e8741c", "#2a9d3f", "#c0392b", "#7d3c98"};

typedef struct {
  char *data;
  size_t len, cap;
  int failed;
} ty_svg_t;

static void ty_svg(ty_svg_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ty_svg(ty_svg_t *s, const char *fmt, ...) {
  if (s->failed) return;
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0) {
    s->failed = 1;
    va_end(args);
    return;
  }
  if (s->len + (size_t)n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16384;
    while (cap < s->len + (size_t)n + 1) cap *= 2;
    char *grown = realloc(s->data, cap);
    if (!grown) {
      s->failed = 1;
      va_end(args);
      return;
    }
    s->data = grown;
    s->cap = cap;
  }
  vsnprintf(s->data + s->len, s->cap - s->len, fmt, args);
  s->len += (size_t)n;
  va_end(args);
}

/* Text with &, < and > escaped (URIs carry & and ?). */
static void ty_svg_text(ty_svg_t *s, const char *text) {
  for (const char *p = text; *p; ++p) {
    if (*p == '&') ty_svg(s, "&amp;");
    else if (*p == '<') ty_svg(s, "&lt;");
    else if (*p == '>') ty_svg(s, "&gt;");
    else ty_svg(s, "%c", *p);
  }
}

/* A "nice" tick spacing (1, 2 or 5 x 10^k) giving about `target` ticks. */
static double ty_nice_step(double span, int target) {
  if (!(span > 0)) return 1.0;
  double raw = span / target, mag = pow(10.0, floor(log10(raw))), f = raw / mag;
  double nice = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
  return nice * mag;
}

static double ty_x(int64_t step, int64_t steps) {
  double span = steps > 1 ? (double)(steps - 1) : 1.0;
  return LEFT + (W - LEFT - RIGHT) * (double)(step - 1) / span;
}

static void ty_svg_x_axis(ty_svg_t *s, int64_t steps, double bottom, bool labels) {
  double step = ty_nice_step((double)(steps > 1 ? steps - 1 : 1), 10);
  if (step < 1) step = 1;
  for (double v = 1; v <= (double)steps + 1e-9; v += step) {
    double x = ty_x((int64_t)v, steps);
    ty_svg(s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='tick'/>\n", x, bottom, x,
           bottom + 5);
    if (labels) {
      ty_svg(s, "<text x='%.1f' y='%.1f' class='tl' text-anchor='middle'>%.0f</text>\n", x,
             bottom + 20, v);
    }
  }
}

ty_status_t ty_compare_plot_write(const char *path, const char *title, const char *subtitle,
                                  int64_t steps,
                                  const ty_compare_series_t *series, uint32_t count,
                                  double tolerance) {
  ty_svg_t s = {0};
  ty_svg(&s,
         "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' "
         "viewBox='0 0 %.0f %.0f' font-family='DejaVu Sans, Helvetica, Arial, sans-serif'>\n"
         "<style>.tick{stroke:#555;stroke-width:1}.grid{stroke:#e3e3e3;stroke-width:1}"
         ".tl{font-size:13px;fill:#333}.axis{font-size:14px;fill:#222}"
         ".frame{fill:none;stroke:#888;stroke-width:1}</style>\n"
         "<rect width='100%%' height='100%%' fill='white'/>\n",
         W, H, W, H);
  ty_svg(&s, "<text x='%.1f' y='32' font-size='20' font-weight='bold' fill='#111'>", LEFT);
  ty_svg_text(&s, title);
  ty_svg(&s, "</text>\n<text x='%.1f' y='56' font-size='14' fill='#444'>", LEFT);
  ty_svg_text(&s, subtitle);
  ty_svg(&s, "</text>\n");
  /* ---- the loss panel ---- */
  double lo = INFINITY, hi = -INFINITY;
  for (uint32_t k = 0; k < count; ++k) {
    for (int64_t i = 0; i < steps; ++i) {
      double v = series[k].loss[i];
      if (isfinite(v)) {
        lo = fmin(lo, v);
        hi = fmax(hi, v);
      }
    }
  }
  if (!isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  double tick = ty_nice_step(hi - lo, 6);
  lo = floor(lo / tick) * tick;
  hi = ceil(hi / tick) * tick;
  ty_svg(&s, "<text x='%.1f' y='%.1f' class='axis' font-weight='bold'>training loss per "
             "step</text>\n",
         LEFT, TOP1 - 12);
  for (double v = lo; v <= hi + tick * 1e-6; v += tick) {
    double y = BOT1 - (BOT1 - TOP1) * (v - lo) / (hi - lo);
    ty_svg(&s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='grid'/>\n", LEFT, y,
           W - RIGHT, y);
    ty_svg(&s, "<text x='%.1f' y='%.1f' class='tl' text-anchor='end'>%.*f</text>\n", LEFT - 8,
           y + 4, tick >= 1 ? 0 : tick >= 0.1 ? 1 : tick >= 0.01 ? 2 : 3, v);
  }
  ty_svg(&s, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='frame'/>\n", LEFT, TOP1,
         W - LEFT - RIGHT, BOT1 - TOP1);
  ty_svg_x_axis(&s, steps, BOT1, true);
  ty_svg(&s,
         "<text transform='translate(30 %.1f) rotate(-90)' class='axis' "
         "text-anchor='middle'>loss</text>\n",
         (TOP1 + BOT1) / 2);
  for (uint32_t k = 0; k < count; ++k) {
    const char *color = ty_colors[k % 5];
    /* The reference solid and wide, the others dashed on top of it, so
     * curves that coincide still show both. */
    ty_svg(&s, "<polyline fill='none' stroke='%s' stroke-width='%s'%s points='", color,
           k == 0 ? "4" : "2", k == 0 ? " stroke-opacity='0.55'" : " stroke-dasharray='7 5'");
    for (int64_t i = 0; i < steps; ++i) {
      double v = series[k].loss[i];
      if (!isfinite(v)) continue;
      ty_svg(&s, "%.1f,%.1f ", ty_x(i + 1, steps), BOT1 - (BOT1 - TOP1) * (v - lo) / (hi - lo));
    }
    ty_svg(&s, "'/>\n");
    for (int64_t i = 0; i < steps; ++i) {
      double v = series[k].loss[i];
      if (!isfinite(v)) continue;
      double x = ty_x(i + 1, steps), y = BOT1 - (BOT1 - TOP1) * (v - lo) / (hi - lo);
      if (k == 0) {
        ty_svg(&s, "<circle cx='%.1f' cy='%.1f' r='4.5' fill='%s' fill-opacity='0.55'/>\n", x, y,
               color);
      } else {
        ty_svg(&s, "<rect x='%.1f' y='%.1f' width='6' height='6' fill='none' stroke='%s' "
                   "stroke-width='1.5'/>\n",
               x - 3, y - 3, color);
      }
    }
  }
  /* legend, top right inside the panel */
  double lx = W - RIGHT - 300, ly = TOP1 + 14;
  ty_svg(&s, "<rect x='%.1f' y='%.1f' width='288' height='%.1f' fill='white' fill-opacity='0.9' "
             "stroke='#bbb'/>\n",
         lx - 8, ly - 10, 24.0 * count + 4);
  for (uint32_t k = 0; k < count; ++k) {
    double y = ly + 24.0 * k + 6;
    ty_svg(&s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='%s'%s/>\n",
           lx, y, lx + 34, y, ty_colors[k % 5], k == 0 ? "4" : "2",
           k == 0 ? " stroke-opacity='0.55'" : " stroke-dasharray='7 5'");
    ty_svg(&s, "<text x='%.1f' y='%.1f' class='tl'>", lx + 44, y + 5);
    ty_svg_text(&s, series[k].label);
    ty_svg(&s, "%s</text>\n", k == 0 ? " (reference)" : "");
  }
  /* ---- the relative difference panel (log scale) ---- */
  double min_nz = INFINITY, max_d = 0;
  bool any_zero = false;
  for (uint32_t k = 1; k < count; ++k) {
    for (int64_t i = 0; i < steps; ++i) {
      double a = series[0].loss[i], b = series[k].loss[i];
      if (!isfinite(a) || !isfinite(b)) continue;
      double d = fabs(b - a) / fmax(fabs(a), 1e-30);
      if (d == 0) any_zero = true;
      else min_nz = fmin(min_nz, d), max_d = fmax(max_d, d);
    }
  }
  double top_exp = ceil(log10(fmax(fmax(max_d, tolerance), 1e-300))) + 1;
  double bot_exp = isfinite(min_nz) ? floor(log10(min_nz)) - 1 : top_exp - 8;
  if (top_exp - bot_exp < 4) bot_exp = top_exp - 4;
  if (bot_exp < -18) bot_exp = -18;
  ty_svg(&s, "<text x='%.1f' y='%.1f' class='axis' font-weight='bold'>relative loss difference "
             "|loss - loss(",
         LEFT, TOP2 - 12);
  ty_svg_text(&s, series[0].label);
  ty_svg(&s, ")| / |loss(");
  ty_svg_text(&s, series[0].label);
  ty_svg(&s, ")|, log scale</text>\n");
  double decade = top_exp - bot_exp > 10 ? 2 : 1;
  for (double e = bot_exp; e <= top_exp + 1e-9; e += decade) {
    double y = LOG2 - (LOG2 - TOP2) * (e - bot_exp) / (top_exp - bot_exp);
    ty_svg(&s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' class='grid'/>\n", LEFT, y,
           W - RIGHT, y);
    ty_svg(&s, "<text x='%.1f' y='%.1f' class='tl' text-anchor='end'>1e%.0f</text>\n", LEFT - 8,
           y + 4, e);
  }
  /* Exact zeros have no logarithm: they get a row of their own. */
  ty_svg(&s, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='#f4f8f4'/>\n", LEFT,
         LOG2 + 6, W - LEFT - RIGHT, BOT2 - LOG2 - 6);
  ty_svg(&s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#999' "
             "stroke-dasharray='2 3'/>\n",
         LEFT, LOG2 + 6, W - RIGHT, LOG2 + 6);
  ty_svg(&s, "<text x='%.1f' y='%.1f' class='tl' text-anchor='end'>0</text>\n", LEFT - 8,
         (LOG2 + 6 + BOT2) / 2 + 4);
  ty_svg(&s, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' class='frame'/>\n", LEFT, TOP2,
         W - LEFT - RIGHT, BOT2 - TOP2);
  ty_svg_x_axis(&s, steps, BOT2, true);
  ty_svg(&s, "<text x='%.1f' y='%.1f' class='axis' text-anchor='middle'>step</text>\n",
         (LEFT + W - RIGHT) / 2, BOT2 + 44);
  ty_svg(&s,
         "<text transform='translate(30 %.1f) rotate(-90)' class='axis' "
         "text-anchor='middle'>relative difference</text>\n",
         (TOP2 + BOT2) / 2);
  if (tolerance > 0) {
    double y = LOG2 - (LOG2 - TOP2) * (log10(tolerance) - bot_exp) / (top_exp - bot_exp);
    ty_svg(&s, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#c0392b' "
               "stroke-width='1.5' stroke-dasharray='4 4'/>\n",
           LEFT, y, W - RIGHT, y);
    ty_svg(&s, "<text x='%.1f' y='%.1f' class='tl' text-anchor='end' fill='#c0392b'>tolerance "
               "%g</text>\n",
           W - RIGHT - 6, y - 6, tolerance);
  }
  for (uint32_t k = 1; k < count; ++k) {
    const char *color = ty_colors[k % 5];
    /* A thin line through the nonzero points guides the eye. */
    ty_svg(&s, "<polyline fill='none' stroke='%s' stroke-width='1' stroke-opacity='0.5' points='",
           color);
    for (int64_t i = 0; i < steps; ++i) {
      double a = series[0].loss[i], b = series[k].loss[i];
      double d = fabs(b - a) / fmax(fabs(a), 1e-30);
      if (!isfinite(a) || !isfinite(b) || d == 0) continue;
      ty_svg(&s, "%.1f,%.1f ", ty_x(i + 1, steps),
             LOG2 - (LOG2 - TOP2) * (log10(d) - bot_exp) / (top_exp - bot_exp));
    }
    ty_svg(&s, "'/>\n");
    for (int64_t i = 0; i < steps; ++i) {
      double a = series[0].loss[i], b = series[k].loss[i];
      if (!isfinite(a) || !isfinite(b)) continue;
      double d = fabs(b - a) / fmax(fabs(a), 1e-30);
      double x = ty_x(i + 1, steps);
      if (d == 0) { /* exactly equal: in the zero row */
        ty_svg(&s, "<circle cx='%.1f' cy='%.1f' r='4.5' fill='%s'/>\n", x,
               (LOG2 + 6 + BOT2) / 2, color);
      } else {
        double y = LOG2 - (LOG2 - TOP2) * (log10(d) - bot_exp) / (top_exp - bot_exp);
        ty_svg(&s, "<circle cx='%.1f' cy='%.1f' r='4.5' fill='%s'/>\n", x, y, color);
      }
    }
  }
  if (any_zero) {
    ty_svg(&s, "<text x='%.1f' y='%.1f' class='tl' fill='#2a6e35'>markers in the bottom row: "
               "difference exactly 0 (bit-identical losses)</text>\n",
           LEFT + 10, LOG2 - 4);
  }
  ty_svg(&s, "</svg>\n");
  if (s.failed) {
    free(s.data);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory drawing %s", path);
  }
  ty_status_t st = ty_file_write_atomic(path, s.data, s.len);
  free(s.data);
  return st;
}
