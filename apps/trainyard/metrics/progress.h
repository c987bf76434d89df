/* Progress output of long-running commands, formatted into caller buffers
 * (the library prints nothing; the app chooses the stream):
 *
 *   training step:  Epoch [1/3], Step [120/2622], loss 3.412, lr 2.4e-4,
 *                   grad-norm 0.91, 14.2k tok/s, MFU 31%, ETA 12m
 *   bar (data prep): tokenizing [=====>    ] 45% 12.3 MB/s ETA 1m05s
 *
 * On a terminal a line is redrawn in place ("\r", the text cut to the
 * terminal width, then "erase to end of line"); elsewhere (logs, pipes)
 * each update is a plain line ending in '\n'. ty_progress_mode_for_fd picks.
 *
 * In the app, per update:
 *
 *   ty_progress_mode_t mode = ty_progress_mode_for_fd(STDERR_FILENO);
 *   size_t width = ty_progress_terminal_width(STDERR_FILENO);
 *   char text[256], line[320];
 *   ty_progress_step_format(&step, text, sizeof(text));
 *   ty_progress_line_render(mode, text, width, line, sizeof(line));
 *   fputs(line, stderr);
 *
 * and fputs(ty_progress_line_finish(mode), stderr) at the end.
 *
 * Every formatter works like snprintf: it writes at most `size` bytes,
 * always NUL-terminated when size > 0, and returns the length the whole
 * text has (so a result >= size means it was cut). All functions are
 * thread-safe (no shared state) and cannot fail. */
#ifndef TY_APPS_TRAINYARD_METRICS_PROGRESS_H_
#define TY_APPS_TRAINYARD_METRICS_PROGRESS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- numbers -------------------------------------------------------------- */

/* A count with a decimal SI prefix and three significant figures at most:
 * 950, 12.3, 14.2k, 142k, 1.4M, 3.2G ("nan", "inf" as such). */
size_t ty_progress_format_si(double value, char *buf, size_t size);
/* Bytes in decimal units: "950 B", "12.3 MB", "1.2 GB". */
size_t ty_progress_format_bytes(double bytes, char *buf, size_t size);
/* A duration rounded to whole seconds: "45s", "1m05s" (under 10 minutes),
 * "12m", "2h05m", "123h" (from 100 hours); "?" when negative or NaN. */
size_t ty_progress_format_duration(double seconds, char *buf, size_t size);

/* ---- one training step -------------------------------------------------- */

/* Which optional parts of a step line are present. */
enum {
  TY_PROGRESS_LOSS = 1u << 0,
  TY_PROGRESS_LR = 1u << 1,
  TY_PROGRESS_GRAD_NORM = 1u << 2,
  TY_PROGRESS_TOKENS_PER_S = 1u << 3,
  TY_PROGRESS_MFU = 1u << 4,
  TY_PROGRESS_ETA = 1u << 5,
};

typedef struct ty_progress_step_t {
  int64_t epoch, epoch_count; /* 1-based; epoch_count 0: no "Epoch [..]" part */
  int64_t step, step_count;   /* 1-based; step_count 0: "Step [120]" */
  unsigned fields;            /* TY_PROGRESS_* bits of the values below to show */
  double loss;                /* 4 significant figures; NaN shows as "nan" */
  double lr;                  /* "2.4e-4" */
  double grad_norm;           /* 3 significant figures */
  double tokens_per_s;        /* "14.2k tok/s" */
  double mfu;                 /* a fraction of peak: 0.31 shows as "MFU 31%" */
  double eta_s;               /* seconds left: "ETA 12m" */
} ty_progress_step_t;

/* "Epoch [1/3], Step [120/2622], loss 3.412, ..." (no newline). */
size_t ty_progress_step_format(const ty_progress_step_t *step, char *buf, size_t size);

/* ---- a progress bar ------------------------------------------------------- */

typedef struct ty_progress_bar_t {
  const char *label; /* shown first; NULL or "" for none */
  double done;       /* units done so far */
  double total;      /* units in all; <= 0 when unknown (then no bar, no ETA) */
  double rate;       /* units per second; < 0 or NaN when unknown */
  /* "B": sizes in bytes ("12.3 MB/s"); any other text names the unit
   * ("14.2k tok/s"); NULL: plain counts ("14.2k/s"). */
  const char *unit;
} ty_progress_bar_t;

/* "label [=====>    ] 45% 12.3 MB/s ETA 1m05s" for a terminal `width`
 * columns wide: the bar takes what the other parts leave of width - 1
 * columns (the last one stays free, as in ty_progress_line_render), at most
 * 40, and is left out below 5. With an unknown total (no bar, no percent):
 * "label 1.2 GB 12.3 MB/s". */
size_t ty_progress_bar_format(const ty_progress_bar_t *bar, size_t width, char *buf,
                              size_t size);

/* ---- terminal or plain lines ---------------------------------------------- */

typedef enum ty_progress_mode_t {
  TY_PROGRESS_PLAIN = 0, /* one line per update, '\n'-terminated */
  TY_PROGRESS_LIVE = 1,  /* one line redrawn in place */
} ty_progress_mode_t;

/* LIVE when `fd` is a terminal (and TERM is not "dumb"), else PLAIN. */
ty_progress_mode_t ty_progress_mode_for_fd(int fd);

/* Columns of the terminal on `fd`; else $COLUMNS; else 80. */
size_t ty_progress_terminal_width(int fd);

/* The bytes to write for one update showing `text`:
 *   LIVE:  "\r" + text cut to width - 1 columns + "\x1b[K" (the last column
 *          stays free: writing there makes some terminals wrap);
 *   PLAIN: text + "\n", never cut.
 * Columns are counted as UTF-8 characters; a cut never splits one. */
size_t ty_progress_line_render(ty_progress_mode_t mode, const char *text, size_t width,
                               char *buf, size_t size);

/* What to write before other output while a LIVE line is shown: "\r\x1b[K"
 * clears it (redraw it afterwards). "" for PLAIN. Static storage. */
const char *ty_progress_line_clear(ty_progress_mode_t mode);
/* What to write when the work is done, so that later output starts on a
 * new line below the last LIVE update: "\n"; "" for PLAIN. Static storage. */
const char *ty_progress_line_finish(ty_progress_mode_t mode);

#ifdef __cplusplus
}
#endif

#endif /* TY_APPS_TRAINYARD_METRICS_PROGRESS_H_ */
