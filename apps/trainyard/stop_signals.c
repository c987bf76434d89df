/* SIGINT/SIGTERM/SIGHUP taken by one waiter thread with sigwait() (see
 * stop_signals.h for why no thread ever runs a handler). */
#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

static sigset_t ty_stop_set; /* the signals the waiter takes */
static bool ty_stop_any;     /* false: both were ignored at start, no waiter */
static atomic_int ty_stop_armed;
static atomic_int ty_stop_received;
static pthread_t ty_stop_thread;
static bool ty_stop_running; /* ty_stop_thread is alive (main thread's view) */

/* The default action of `sig` (SIGINT, SIGTERM, SIGHUP: end the process), taken on
 * this thread, the one thread that unblocks it for the moment. */
static void ty_stop_default_action(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, NULL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  pthread_kill(pthread_self(), sig);
  /* Not reached for SIGINT, SIGTERM and SIGHUP; block it again for the next wait. */
  pthread_sigmask(SIG_BLOCK, &one, NULL);
}

static void *ty_stop_waiter(void *unused) {
  (void)unused;
  /* Cancelled only in sigwait (ty_stop_signals_pause), a cancellation
   * point: never while it acts on a signal. */
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  for (;;) {
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    int sig = 0;
    int rc = sigwait(&ty_stop_set, &sig);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    if (rc != 0) continue;
    if (atomic_load(&ty_stop_armed)) {
      atomic_store(&ty_stop_received, sig);
    } else {
      ty_stop_default_action(sig);
    }
  }
  return NULL;
}

static bool ty_stop_spawn(void) {
  ty_stop_running = pthread_create(&ty_stop_thread, NULL, ty_stop_waiter, NULL) == 0;
  return ty_stop_running;
}

bool ty_stop_signals_start(void) {
  sigemptyset(&ty_stop_set);
  /* SIGHUP is what a dropped SSH session or a closed terminal sends: a
   * run must not lose its work to it any more than to SIGTERM. */
  const int signals[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); ++i) {
    struct sigaction old;
    if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaddset(&ty_stop_set, signals[i]);
    ty_stop_any = true;
  }
  if (!ty_stop_any) return true;
  sigset_t old_mask;
  if (pthread_sigmask(SIG_BLOCK, &ty_stop_set, &old_mask) != 0) return false;
  if (!ty_stop_spawn()) {
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    return false;
  }
  return true;
}

void ty_stop_signals_pause(void) {
  if (!ty_stop_running) return;
  pthread_cancel(ty_stop_thread);
  pthread_join(ty_stop_thread, NULL);
  ty_stop_running = false;
}

bool ty_stop_signals_resume(void) {
  return !ty_stop_any || ty_stop_running || ty_stop_spawn();
}

void ty_stop_signals_arm(void) { atomic_store(&ty_stop_armed, 1); }

int ty_stop_signals_received(void) { return atomic_load(&ty_stop_received); }

const char *ty_stop_signals_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a stop signal";
  }
}

void ty_stop_signals_clear(void) { atomic_store(&ty_stop_received, 0); }

void ty_stop_signals_ignore_sigpipe(void) {
  struct sigaction ign;
  memset(&ign, 0, sizeof(ign));
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  sigaction(SIGPIPE, &ign, NULL);
}
