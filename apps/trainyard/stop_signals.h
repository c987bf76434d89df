/* SIGINT, SIGTERM and SIGHUP for the whole `trainyard` process, without a
 * signal handler on any thread. SIGHUP (a dropped SSH session, a closed
 * terminal) is taken exactly like SIGTERM.
 *
 * Why no handler: a handler runs on whichever thread the kernel picks, and
 * the kernel pushes its frame below that thread's stack pointer. oneDNN up
 * to 3.11.1 (Debian 12 ships 2.6.3) points the stack pointer of its JIT
 * f32 GEMM kernels at a heap workspace while they run (the cpu backend's
 * matmuls with K > ~84); a signal frame pushed there overwrites the heap
 * (uxlfoundation/oneDNN#4845). `trainyard train` died that way with
 * "corrupted size vs. prev_size while consolidating" when SIGTERM came
 * mid-step, before its promised save. Any JIT or hand-written kernel may
 * play such tricks, so no thread of ours ever runs a handler for them:
 * ty_stop_signals_start() blocks them before any other thread exists
 * (threads inherit the mask, so OpenMP, oneDNN and plugin threads block
 * them too) and one waiter thread takes them with sigwait().
 *
 * Once a command has armed a graceful stop (the training loop, data
 * preparation), the waiter only records the signal; the command polls
 * ty_stop_signals_received() at safe points. Before that the signal ends
 * the process the default way, as if nothing had caught it. A signal that was
 * ignored when the process started (nohup, `cmd &` in sh) stays ignored.
 *
 * Threading: every function may be called from any thread. */
#ifndef TY_APPS_TRAINYARD_STOP_SIGNALS_H_
#define TY_APPS_TRAINYARD_STOP_SIGNALS_H_

#include <stdbool.h>

/* Call first in main(), before anything that may start a thread. Returns
 * false (and leaves the default handling) when the waiter thread cannot be
 * started; the process then runs without graceful stops. */
bool ty_stop_signals_start(void);

/* Around fork(): POSIX lets the child of a multi-threaded process call only
 * async-signal-safe functions, and a child that runs a whole command (as
 * `compare` does) must come from a single-threaded parent. pause() ends the
 * waiter thread (the signals stay blocked: one that comes meanwhile waits,
 * pending, for the next waiter); resume() starts a waiter again, in the
 * parent and in the child (fork keeps only the calling thread). resume()
 * returns false when the thread cannot be started (no graceful stop then).
 * Call both from the thread that called ty_stop_signals_start(). */
void ty_stop_signals_pause(void);
bool ty_stop_signals_resume(void);

/* Graceful stop from now until the process exits: a signal is recorded
 * instead of ending the process. */
void ty_stop_signals_arm(void);

/* The signal received while armed (SIGINT, SIGTERM or SIGHUP), or 0. */
int ty_stop_signals_received(void);

/* "SIGINT", "SIGTERM", "SIGHUP" (a static string) for a message. */
const char *ty_stop_signals_name(int sig);

/* Forgets a recorded signal (a command that arms again starts clean). */
void ty_stop_signals_clear(void);

/* A console that went away (a closed pipe) must not end a command that has
 * something to save: writes to it then fail with EPIPE, which the command
 * ignores, instead of raising SIGPIPE. */
void ty_stop_signals_ignore_sigpipe(void);

#endif /* TY_APPS_TRAINYARD_STOP_SIGNALS_H_ */
