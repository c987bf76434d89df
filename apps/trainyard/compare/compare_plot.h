/* The plot of `trainyard compare`: a hand-written SVG with the loss curves
 * of every backend (top panel) and, against the first backend, the
 * relative loss difference per step on a log scale with the tolerance
 * (bottom panel). */
#ifndef TY_APPS_TRAINYARD_COMPARE_PLOT_H_
#define TY_APPS_TRAINYARD_COMPARE_PLOT_H_

#include <stdint.h>

#include "hal/status.h"

typedef struct ty_compare_series_t {
  const char *label;  /* the backend's device URI */
  const double *loss; /* per step (index 0 is step 1) */
} ty_compare_series_t;

/* Writes the SVG to `path` (atomically). series[0] is the reference. */
ty_status_t ty_compare_plot_write(const char *path, const char *title, const char *subtitle,
                                  int64_t steps,
                                  const ty_compare_series_t *series, uint32_t count,
                                  double tolerance);

#endif /* TY_APPS_TRAINYARD_COMPARE_PLOT_H_ */
