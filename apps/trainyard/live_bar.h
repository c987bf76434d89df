/* A rate-limited progress bar for long commands: redrawn on stderr at most
 * ten times a second when it is a terminal, silent otherwise (callers then
 * print a plain line per unit of work). Formatting comes from
 * metrics/progress.h. Not thread-safe. */
#ifndef TY_APPS_TRAINYARD_LIVE_BAR_H_
#define TY_APPS_TRAINYARD_LIVE_BAR_H_

#include <stdbool.h>
#include <stdint.h>

typedef struct ty_live_bar_t {
  bool active;       /* drawing (stderr is a terminal) */
  bool bytes;        /* the unit is bytes (rate in MB/s), else `unit` */
  const char *label; /* e.g. "data prepare" */
  const char *unit;  /* item name when !bytes, e.g. "merges" */
  uint64_t total;
  double start, last_draw;
  bool drawn;
} ty_live_bar_t;

/* Monotonic seconds. */
double ty_live_bar_now(void);

/* Starts a bar for `total` units; draws only when `enabled` and stderr is a
 * terminal. */
void ty_live_bar_start(ty_live_bar_t *bar, const char *label, bool bytes, const char *unit,
                       uint64_t total, bool enabled);
/* Redraws (rate limited) with `done` units and, when tokens != UINT64_MAX,
 * the token rate. */
void ty_live_bar_update(ty_live_bar_t *bar, uint64_t done, uint64_t tokens);
/* Clears the bar so that normal output follows. */
void ty_live_bar_finish(ty_live_bar_t *bar);

#endif /* TY_APPS_TRAINYARD_LIVE_BAR_H_ */
