/* Control of running `trainyard train` jobs from another terminal
 * (`trainyard control`), shared by the run (the server) and the command (the
 * client).
 *
 * A run listens on a Unix socket in its output folder (TY_CONTROL_SOCKET_NAME,
 * mode 0600) and registers itself with one file, <registry>/<pid>.json
 * ({"pid", "out", "socket", "backend", "uid", "started"}), in the registry
 * folder: $XDG_RUNTIME_DIR/trainyard, else /tmp/trainyard-<uid>, or the one
 * given (`train --control-registry`, `control --registry`). The folder is the
 * user's own (0700, owned by them) or refused. The run removes both at exit;
 * a run killed with SIGKILL leaves them, and `control` removes an entry
 * whose process is gone or whose socket no longer answers (stale), never
 * listing it as live.
 *
 * The protocol (docs/formats.md, "Control protocol"): one JSON request line
 * {"command": "status" | "save" | "stop" | "abort"}, one JSON reply line
 * {"ok": true, ...} or {"ok": false, "error": text}. Both ends check the other's
 * uid with SO_PEERCRED: the run answers only its own user, and the client
 * talks only to a socket its own user owns, served by the registered pid.
 *
 * The server thread never runs training code: it answers status from a
 * snapshot the training loop updates after each step, and posts save, stop
 * and abort for the loop to take at its next step boundary (the reply is sent
 * once the loop has acted). Errors: statuses naming the path or the run;
 * nothing is printed. */
#ifndef TY_APPS_TRAINYARD_CONTROL_CONTROL_H_
#define TY_APPS_TRAINYARD_CONTROL_CONTROL_H_

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hal/status.h"

#define TY_CONTROL_SOCKET_NAME ".trainyard.control.sock"

/* ---- shared ---- */

/* `seconds` as `control list` and `control status` show a time: "4m07s"
 * under an hour, "2h05m" from an hour on, "-" when unknown (NaN or
 * negative). Writes at most `capacity` bytes into out. */
void ty_control_format_duration(double seconds, char *out, size_t capacity);

/* The registry folder: `given` when not NULL/"", else the default above.
 * Creates it (0700) when missing; FAILED_PRECONDITION naming it when it is
 * not a folder, not owned by this user, or open to others (group/other
 * permissions): someone else could plant entries there. */
ty_status_t ty_control_registry_dir(const char *given, char *out, size_t capacity);

/* Connects to the Unix socket `path` (any length: a long path is reached
 * through its folder's descriptor). The socket must be owned by this user
 * (FAILED_PRECONDITION otherwise: not a run of ours), and the peer's
 * credentials (SO_PEERCRED) must be this user's and, when expect_pid > 0,
 * that pid's. *out_fd is the connected socket. */
ty_status_t ty_control_connect(const char *path, pid_t expect_pid, int *out_fd);

/* Sends one JSON line and reads one reply line (timeout_ms < 0: wait
 * without limit). *out_reply is a new reference. */
ty_status_t ty_control_call(int fd, const json_t *request, int timeout_ms, json_t **out_reply);

/* ---- the run's side ---- */

enum {
  TY_CONTROL_SAVE = 1u << 0,  /* checkpoint after the current step, keep going */
  TY_CONTROL_STOP = 1u << 1,  /* checkpoint and exit 0 */
  TY_CONTROL_ABORT = 1u << 2, /* exit non-zero at once, no checkpoint */
};

/* What `list` and `status` show, updated by the training loop. */
typedef struct ty_control_progress_t {
  int64_t step, total_steps, epoch;
  double loss, val_loss, eval_acc; /* NAN when none yet */
  double tokens_per_s, eta_s;
} ty_control_progress_t;

typedef struct ty_control_server_t ty_control_server_t;

typedef struct ty_control_server_options_t {
  const char *out_dir;      /* the run folder (locked by the caller) */
  const char *registry;     /* --control-registry, or NULL for the default */
  const char *backend;      /* the device, for list */
  json_t *config;           /* the resolved configuration (borrowed; copied) */
} ty_control_server_options_t;

/* Binds the socket (replacing one a killed run left: the caller holds the
 * run folder's lock, so no live run owns it), writes the registry entry and
 * starts the server thread. */
ty_status_t ty_control_server_start(const ty_control_server_options_t *options,
                                    ty_control_server_t **out_server);

/* Stops the thread, answers what is still pending ("the run ended"), and
 * removes the socket and the registry entry. NULL is a no-op. */
void ty_control_server_stop(ty_control_server_t *server);

/* From the training loop: the snapshot status and list answer. */
void ty_control_server_update(ty_control_server_t *server, const ty_control_progress_t *p);

/* From the training loop, at a step boundary: the posted requests
 * (TY_CONTROL_* bits), cleared. 0 for a NULL server. */
unsigned ty_control_server_take(ty_control_server_t *server);

/* Answers every client waiting on a request of `kind` (one TY_CONTROL_*
 * bit) with `reply` (borrowed; "ok" is set from ok). */
void ty_control_server_reply(ty_control_server_t *server, unsigned kind, bool ok, json_t *reply);

/* Where the socket and the registry entry are (for messages). */
const char *ty_control_server_socket(const ty_control_server_t *server);
const char *ty_control_server_entry(const ty_control_server_t *server);

#endif /* TY_APPS_TRAINYARD_CONTROL_CONTROL_H_ */
