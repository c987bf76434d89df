/* The launch environment of torchrun and Slurm (launch_env.h). */
#include "distributed/launch_env.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *ty_env_get(char *const *envp, const char *name) {
  const size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; ++i) {
    if (!strncmp(envp[i], name, n) && envp[i][n] == '=') return envp[i] + n + 1;
  }
  return NULL;
}

/* A decimal integer >= 0 (and >= `min`) of variable `name`, or an error
 * that names it and says what it should hold. */
static ty_status_t ty_env_int(const char *name, const char *value, int min, const char *meaning,
                              int *out) {
  const char *p = value;
  if (*p == '+' || *p == '-') ++p;
  bool digits = *p != '\0';
  for (const char *q = p; *q; ++q) digits = digits && *q >= '0' && *q <= '9';
  errno = 0;
  long long v = digits ? strtoll(value, NULL, 10) : 0;
  if (!digits || errno == ERANGE || v > INT_MAX || v < INT_MIN) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s='%s' is not an integer: set it to %s", name, value, meaning);
  }
  if (v < min) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s=%lld: must be %d or more (%s)", name,
                          v, min, meaning);
  }
  *out = (int)v;
  return TY_OK;
}

static ty_status_t ty_env_need(char *const *envp, const char *name, const char *fix,
                               const char **out) {
  *out = ty_env_get(envp, name);
  if (!*out || !(*out)[0]) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s is not set: %s", name, fix);
  }
  return TY_OK;
}

typedef struct ty_form_t {
  const char *rank, *size, *local; /* variable names */
  const char *launcher;
} ty_form_t;

static const ty_form_t ty_torchrun = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"};
static const ty_form_t ty_slurm = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"};

/* rank, world size and local rank of one form; every variable required. */
static ty_status_t ty_form_read(char *const *envp, const ty_form_t *f, int out[3]) {
  char fix[160];
  const char *v = NULL;
  snprintf(fix, sizeof(fix), "set it to this rank's number, 0 to %s - 1 (%s sets it)", f->size,
           f->launcher);
  TY_RETURN_IF_ERROR(ty_env_need(envp, f->rank, fix, &v));
  TY_RETURN_IF_ERROR(ty_env_int(f->rank, v, 0, "this rank's number", &out[0]));
  snprintf(fix, sizeof(fix), "set it to the number of ranks of the job (%s sets it)",
           f->launcher);
  TY_RETURN_IF_ERROR(ty_env_need(envp, f->size, fix, &v));
  TY_RETURN_IF_ERROR(ty_env_int(f->size, v, 1, "the number of ranks of the job", &out[1]));
  snprintf(fix, sizeof(fix), "set it to this rank's index among the ranks of its host (%s sets "
           "it)", f->launcher);
  TY_RETURN_IF_ERROR(ty_env_need(envp, f->local, fix, &v));
  TY_RETURN_IF_ERROR(ty_env_int(f->local, v, 0, "this rank's index on its host", &out[2]));
  if (out[0] >= out[1]) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s=%d is not a rank of a job of %s=%d ranks: ranks are 0 to %d",
                          f->rank, out[0], f->size, out[1], out[1] - 1);
  }
  if (out[2] > out[0]) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s=%d is more than %s=%d: a rank's index on its host cannot pass its "
                          "number in the job (set %s to its index among this host's ranks)",
                          f->local, out[2], f->rank, out[0], f->local);
  }
  return TY_OK;
}

static ty_status_t ty_port(const char *name, const char *text, int *out) {
  TY_RETURN_IF_ERROR(ty_env_int(name, text, 0, "a TCP port, 1 to 65535", out));
  if (*out < 1 || *out > 65535) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s=%d: a TCP port is 1 to 65535 (pick a free port that every host "
                          "can reach on rank 0)",
                          name, *out);
  }
  return TY_OK;
}

/* TRAINYARD_RENDEZVOUS=host:port ([v6-address]:port for IPv6). */
static ty_status_t ty_rendezvous_split(const char *value, char *host, size_t capacity,
                                       int *port) {
  const char *colon = strrchr(value, ':');
  const char *h = value;
  size_t n = colon ? (size_t)(colon - value) : 0;
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
    ++h;
    n -= 2;
  }
  if (!colon || n == 0 || n >= capacity || !colon[1]) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "TRAINYARD_RENDEZVOUS='%s' is not host:port: set it to rank 0's "
                          "address and a free port, e.g. 10.0.0.1:29500",
                          value);
  }
  memcpy(host, h, n);
  host[n] = '\0';
  return ty_port("TRAINYARD_RENDEZVOUS's port", colon + 1, port);
}

/* TRAINYARD_RENDEZVOUS, when set, wins over MASTER_ADDR/MASTER_PORT: under
 * torchrun those name its own store, whose port rank 0 cannot take. */
static ty_status_t ty_rendezvous_read(char *const *envp, ty_launch_env_t *out) {
  const char *rdzv = ty_env_get(envp, "TRAINYARD_RENDEZVOUS");
  if (rdzv && rdzv[0]) {
    return ty_rendezvous_split(rdzv, out->host, sizeof(out->host), &out->port);
  }
  const char *addr = ty_env_get(envp, "MASTER_ADDR"), *port = ty_env_get(envp, "MASTER_PORT");
  if (!addr && !port) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "no rendezvous: set MASTER_ADDR and MASTER_PORT (rank 0's address "
                          "and a free port there) or TRAINYARD_RENDEZVOUS=host:port");
  }
  TY_RETURN_IF_ERROR(ty_env_need(envp, "MASTER_ADDR",
                                 "set it to rank 0's host name or address", &addr));
  TY_RETURN_IF_ERROR(ty_env_need(envp, "MASTER_PORT",
                                 "set it to a free port on rank 0's host", &port));
  if (strlen(addr) >= sizeof(out->host)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "MASTER_ADDR is longer than %zu bytes",
                          sizeof(out->host) - 1);
  }
  snprintf(out->host, sizeof(out->host), "%s", addr);
  return ty_port("MASTER_PORT", port, &out->port);
}

ty_status_t ty_launch_env_parse(char *const *envp, ty_launch_env_t *out) {
  memset(out, 0, sizeof(*out));
  const bool torchrun = ty_env_get(envp, "RANK") || ty_env_get(envp, "WORLD_SIZE");
  const bool slurm = ty_env_get(envp, "SLURM_PROCID") != NULL;
  if (!torchrun && !slurm) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "RANK is not set: --distributed env needs RANK, WORLD_SIZE and "
                          "LOCAL_RANK (as torchrun sets them) or SLURM_PROCID, SLURM_NTASKS and "
                          "SLURM_LOCALID (srun)");
  }
  int t[3] = {0, 0, 0}, s[3] = {0, 0, 0};
  if (torchrun) TY_RETURN_IF_ERROR(ty_form_read(envp, &ty_torchrun, t));
  if (slurm) TY_RETURN_IF_ERROR(ty_form_read(envp, &ty_slurm, s));
  if (torchrun && slurm) {
    const char *const names[3][2] = {{"RANK", "SLURM_PROCID"},
                                     {"WORLD_SIZE", "SLURM_NTASKS"},
                                     {"LOCAL_RANK", "SLURM_LOCALID"}};
    for (int i = 0; i < 3; ++i) {
      if (t[i] != s[i]) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "%s=%d and %s=%d disagree: the torchrun and the Slurm variables "
                              "both describe this rank; unset one form or make them agree",
                              names[i][0], t[i], names[i][1], s[i]);
      }
    }
  }
  const int *v = torchrun ? t : s;
  out->rank = v[0];
  out->world_size = v[1];
  out->local_rank = v[2];
  out->form = torchrun ? ty_torchrun.launcher : ty_slurm.launcher;
  if (out->world_size == 1) return TY_OK; /* one process: nothing to meet */
  TY_RETURN_IF_ERROR(ty_rendezvous_read(envp, out));
  const char *token = ty_env_get(envp, "TRAINYARD_JOB_TOKEN");
  if (!token || !token[0]) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "TRAINYARD_JOB_TOKEN is not set: every rank of the job needs the same "
                          "secret of %d characters or more (e.g. from `openssl rand -hex 16`)",
                          TY_LAUNCH_TOKEN_MIN);
  }
  const size_t n = strlen(token);
  if (n < TY_LAUNCH_TOKEN_MIN || n >= sizeof(out->token)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "TRAINYARD_JOB_TOKEN has %zu characters: it needs %d to %zu (e.g. "
                          "from `openssl rand -hex 16`)",
                          n, TY_LAUNCH_TOKEN_MIN, sizeof(out->token) - 1);
  }
  memcpy(out->token, token, n + 1);
  return TY_OK;
}

bool ty_launch_env_present(char *const *envp, char *which, size_t capacity) {
  const char *found = NULL;
  if (ty_env_get(envp, "RANK") && ty_env_get(envp, "WORLD_SIZE")) {
    found = "RANK";
  } else if (ty_env_get(envp, "SLURM_PROCID") && ty_env_get(envp, "SLURM_NTASKS")) {
    const char *n = ty_env_get(envp, "SLURM_NTASKS");
    if (strtol(n, NULL, 10) > 1) found = "SLURM_PROCID";
  }
  if (which && capacity) snprintf(which, capacity, "%s", found ? found : "");
  return found != NULL;
}
