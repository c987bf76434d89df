/* File helpers shared by the metrics writers: errno -> status with the path
 * in the message, `mkdir -p`, and syncing a folder after a rename.
 * Internal to ty_app_metrics (not part of its public headers' API).
 *
 * All functions are thread-safe (no shared state). Errors are statuses whose
 * message names the path; nothing is printed. */
#ifndef TY_APPS_TRAINYARD_METRICS_IO_H_
#define TY_APPS_TRAINYARD_METRICS_IO_H_

#include "hal/status.h"


/* Creates `dir` and any missing parents (mode 0777 less the umask). OK when
 * it already exists as a folder; FAILED_PRECONDITION when it or a parent is
 * something else. */
ty_status_t ty_metrics_dir_create(const char *dir) TY_MUST_USE;

/* fsync of the folder that holds `path`, so that a rename into it survives
 * a crash. File systems that cannot sync a folder are not an error. */
ty_status_t ty_metrics_dir_sync_of(const char *path) TY_MUST_USE;

#endif /* TY_APPS_TRAINYARD_METRICS_IO_H_ */
