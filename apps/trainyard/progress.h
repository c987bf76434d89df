/* Progress display of long commands: on a terminal, one bar on stderr
 * redrawn at most ten times a second, with rate and ETA; elsewhere nothing
 * (callers print a plain line per step instead). Not thread-safe. */
#ifndef TY_APPS_TRAINYARD_PROGRESS_H_
#define TY_APPS_TRAINYARD_PROGRESS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ty_progress_t {
  bool active;       /* drawing a bar (stderr is a terminal) */
  bool bytes;        /* the unit is bytes (rate in MB/s), else items */
  const char *label; /* e.g. "prepare" */
  const char *unit;  /* item name when !bytes, e.g. "merges" */
  uint64_t total;
  double start, last_draw;
  bool drawn;
} ty_progress_t;

/* Monotonic seconds. */
double ty_progress_now(void);

/* Starts a bar for `total` units; draws only when `enabled` and stderr is
 * a terminal. */
void ty_progress_start(ty_progress_t *p, const char *label, bool bytes, const char *unit,
                       uint64_t total, bool enabled);
/* Redraws (rate limited) with `done` units and, when tokens != UINT64_MAX,
 * a token count and rate. */
void ty_progress_update(ty_progress_t *p, uint64_t done, uint64_t tokens);
/* Clears the bar line so that normal output follows. */
void ty_progress_finish(ty_progress_t *p);

/* "1.23 MB", "456 kB" into out. */
void ty_progress_format_bytes(double bytes, char *out, size_t capacity);
/* "1.2M", "34.5k", "999" into out. */
void ty_progress_format_count(double count, char *out, size_t capacity);

#endif /* TY_APPS_TRAINYARD_PROGRESS_H_ */
