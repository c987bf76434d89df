/* The distributed world (dist.h): finds and loads libty_mpi.so only when a
 * run is distributed (or starts the TCP transport of a launch without
 * MPI), and turns the shim's timed collectives into statuses
 * that name the rank at fault. */
#include "distributed/dist.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/dist_internal.h"
#include "distributed/launch_env.h"
#include "distributed/mpi_shim.h"
#include "distributed/tcp_internal.h"

extern char **environ;

#define TY_MPI_SHIM_FILE "libty_mpi.so"

ty_status_t ty_dist_mode_parse(const char *text, ty_dist_mode_t *out_mode) {
  if (!strcmp(text, "auto")) {
    *out_mode = TY_DIST_AUTO;
  } else if (!strcmp(text, "mpi")) {
    *out_mode = TY_DIST_MPI;
  } else if (!strcmp(text, "none")) {
    *out_mode = TY_DIST_NONE;
  } else if (!strcmp(text, "env")) {
    *out_mode = TY_DIST_ENV;
  } else {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--distributed '%s': expected auto, mpi, env or none", text);
  }
  return TY_OK;
}

bool ty_dist_launched(char *which, size_t capacity) {
  /* Open MPI's own, then PMIx (Open MPI 5, Slurm), then PMI-1/2 (MPICH,
   * Intel MPI, Slurm's srun). */
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                                     "PMI_RANK", NULL};
  for (int i = 0; vars[i]; ++i) {
    if (getenv(vars[i])) {
      if (which) snprintf(which, capacity, "%s", vars[i]);
      return true;
    }
  }
  if (which && capacity) which[0] = '\0';
  return false;
}

/* dlopens the shim: TRAINYARD_MPI_SHIM, else <shim_dir>/libty_mpi.so, else
 * the dynamic linker's search (an installed tree's lib folder). */
static ty_status_t ty_dist_load(ty_dist_t *d, const char *shim_dir) {
  const char *forced = getenv("TRAINYARD_MPI_SHIM");
  char path[4096];
  char tried[2 * sizeof(path) + 64] = "";
  if (forced && forced[0]) {
    snprintf(path, sizeof(path), "%s", forced);
    d->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!d->library) {
      return ty_status_make(TY_CODE_UNAVAILABLE,
                            "cannot load the MPI shim TRAINYARD_MPI_SHIM=%s: %s", forced,
                            dlerror());
    }
  } else {
    if (shim_dir && shim_dir[0]) {
      snprintf(path, sizeof(path), "%s/" TY_MPI_SHIM_FILE, shim_dir);
      d->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (!d->library) snprintf(tried, sizeof(tried), "%s", dlerror());
    }
    if (!d->library) {
      snprintf(path, sizeof(path), "%s", TY_MPI_SHIM_FILE);
      d->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!d->library) {
      return ty_status_make(
          TY_CODE_UNAVAILABLE,
          "cannot load the MPI shim %s (%s%s%s): this build has no MPI support or MPI is not "
          "installed; install Open MPI (scripts/install-deps.sh: libopenmpi-dev openmpi-bin) "
          "and build again",
          TY_MPI_SHIM_FILE, tried, tried[0] ? "; " : "", dlerror());
    }
  }
  ty_mpi_shim_query_fn query = (ty_mpi_shim_query_fn)dlsym(d->library, TY_MPI_SHIM_SYMBOL);
  d->shim = query ? query(TY_MPI_SHIM_VERSION) : NULL;
  if (!d->shim || d->shim->struct_size < sizeof(ty_mpi_shim_t)) {
    return ty_status_make(TY_CODE_UNAVAILABLE,
                          "%s is not an MPI shim of this build (version %d): rebuild it", path,
                          TY_MPI_SHIM_VERSION);
  }
  return TY_OK;
}

/* The TCP transport of a launch without MPI: the environment read and
 * checked first (a refusal names the variable), then the rendezvous. A
 * world of one rank: NULL. */
static ty_status_t ty_dist_env(ty_dist_t *d, bool *out_single) {
  ty_launch_env_t env;
  *out_single = false;
  TY_RETURN_IF_ERROR(ty_launch_env_parse(environ, &env));
  if (env.world_size == 1) {
    *out_single = true;
    return TY_OK;
  }
  d->shim = ty_tcp_shim();
  ty_tcp_configure(&env, d->timeout_s);
  memset(env.token, 0, sizeof(env.token));
  snprintf(d->transport, sizeof(d->transport),
           "the Trainyard TCP transport (rendezvous %s:%d)", env.host, env.port);
  return TY_OK;
}

ty_status_t ty_dist_open(ty_dist_mode_t mode, const char *shim_dir, double timeout_s,
                         ty_dist_t **out_dist) {
  *out_dist = NULL;
  if (mode == TY_DIST_AUTO) {
    mode = ty_dist_launched(NULL, 0)                 ? TY_DIST_MPI
           : ty_launch_env_present(environ, NULL, 0) ? TY_DIST_ENV
                                                     : TY_DIST_NONE;
  }
  if (mode == TY_DIST_NONE) return TY_OK;
  if (!(timeout_s > 0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--dist-timeout %g: must be a positive number of seconds", timeout_s);
  }
  ty_dist_t *d = calloc(1, sizeof(*d));
  if (!d) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  d->timeout_s = timeout_s;
  bool single = false;
  ty_status_t s = TY_OK;
  if (mode == TY_DIST_ENV) {
    s = ty_dist_env(d, &single);
  } else {
    s = ty_dist_load(d, shim_dir);
    snprintf(d->transport, sizeof(d->transport), "MPI");
  }
  if (!s && single) {
    free(d);
    return TY_OK;
  }
  char err[512] = "";
  int rc = s ? TY_MPI_SHIM_OK : d->shim->init(&d->rank, &d->size, &d->local_rank, err,
                                              sizeof(err));
  if (!s && rc != TY_MPI_SHIM_OK) {
    s = mode == TY_DIST_ENV
            ? ty_status_make(rc == TY_MPI_SHIM_TIMEOUT ? TY_CODE_DEADLINE_EXCEEDED
                                                       : TY_CODE_UNAVAILABLE,
                             "the rendezvous failed: %s", err)
            : ty_status_make(TY_CODE_UNAVAILABLE, "cannot start MPI: %s", err);
  }
  if (s) {
    if (d->library) dlclose(d->library);
    free(d);
    return s;
  }
  d->shim->library_version(d->library_version, sizeof(d->library_version));
  /* "Open MPI v4.1.4, package: ..., repo rev: ...": the name and version */
  char *comma = strchr(d->library_version, ',');
  if (comma) *comma = '\0';
  d->world = (ty_dist_group_t){.dist = d, .name = "world", .rank = d->rank, .size = d->size};
  d->hosts = calloc((size_t)d->size, sizeof(*d->hosts));
  for (int r = 0; d->hosts && r < d->size; ++r) {
    d->shim->rank_host(r, d->hosts[r], sizeof(d->hosts[r]));
  }
  s = ty_dist_layout_make(d->size, d->rank, 1, 1, &d->layout);
  if (s) { /* cannot fail for tp = pp = 1 */
    ty_dist_close(d);
    return s;
  }
  *out_dist = d;
  return TY_OK;
}

void ty_dist_close(ty_dist_t *dist) {
  if (!dist) return;
  ty_dist_groups_free(dist);
  dist->shim->finalize();
  /* MPI libraries keep threads and handlers that outlive MPI_Finalize:
   * the shim stays loaded until the process exits. */
  free(dist->hosts);
  free(dist);
}

void ty_dist_abort(ty_dist_t *dist, int code) {
  if (dist) dist->shim->abort(code);
}

int ty_dist_rank(const ty_dist_t *dist) { return dist ? dist->rank : 0; }
int ty_dist_size(const ty_dist_t *dist) { return dist ? dist->size : 1; }
int ty_dist_local_rank(const ty_dist_t *dist) { return dist ? dist->local_rank : 0; }
double ty_dist_timeout(const ty_dist_t *dist) { return dist ? dist->timeout_s : 0; }
const char *ty_dist_library(const ty_dist_t *dist) { return dist ? dist->library_version : ""; }
const char *ty_dist_transport(const ty_dist_t *dist) { return dist ? dist->transport : ""; }

const char *ty_dist_rank_host(const ty_dist_t *dist, int rank) {
  if (!dist || !dist->hosts || rank < 0 || rank >= dist->size) return "";
  return dist->hosts[rank];
}

const char *ty_dist_rank_text(const ty_dist_t *dist, int rank, char *out, size_t capacity) {
  const char *host = ty_dist_rank_host(dist, rank);
  snprintf(out, capacity, "rank %d%s%s", rank, host[0] ? " on host " : "", host);
  return out;
}

/* A collective of the shim's `kind` as the user reads it: "all_reduce (sum
 * of f32)", "broadcast from rank 2". */
static void ty_dist_kind_text(const ty_dist_group_t *g, int64_t kind, char *out,
                              size_t capacity) {
  static const char *const types[] = {"f32", "f64", "i64"};
  if (kind >= TY_MPI_SHIM_KIND_BROADCAST) {
    const int root = (int)(kind - TY_MPI_SHIM_KIND_BROADCAST);
    snprintf(out, capacity, "broadcast from rank %d", ty_dist_group_world_rank(g, root));
    return;
  }
  const int64_t k = kind - TY_MPI_SHIM_KIND_ALLREDUCE;
  if (k >= 0 && k / 4 < 3) {
    snprintf(out, capacity, "all_reduce (%s of %s)", k % 4 == TY_MPI_SHIM_MAX ? "max" : "sum",
             types[k / 4]);
  } else {
    snprintf(out, capacity, "collective %lld", (long long)kind);
  }
}

/* Two ranks of `g` at different collectives, or the same one with
 * different byte counts: refused before any data moved. */
static ty_status_t ty_dist_mismatch(const ty_dist_group_t *g, const ty_mpi_shim_fault_t *f,
                                    const char *what) {
  const int other = ty_dist_group_world_rank(g, f->rank), root = ty_dist_group_world_rank(g, 0);
  char theirs[64], ours[64];
  ty_dist_kind_text(g, f->kind, theirs, sizeof(theirs));
  ty_dist_kind_text(g, f->root_kind, ours, sizeof(ours));
  static const char *const fix =
      "the ranks run different models, options or code paths (every rank of one job must be "
      "started with the same options)";
  if (f->seq != f->root_seq) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s: the ranks of group '%s' are out of step: rank %d is at its "
                          "collective #%lld (%s with %lld bytes), rank %d at #%lld (%s with "
                          "%lld bytes); %s",
                          what, g->name, other, (long long)f->seq, theirs, (long long)f->bytes,
                          root, (long long)f->root_seq, ours, (long long)f->root_bytes, fix);
  }
  if (f->kind != f->root_kind) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s: the ranks of group '%s' call different collectives: rank %d "
                          "calls %s with %lld bytes, rank %d calls %s with %lld bytes; %s",
                          what, g->name, other, theirs, (long long)f->bytes, root, ours,
                          (long long)f->root_bytes, fix);
  }
  return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                        "%s: %s on group '%s': rank %d sends %lld bytes, rank %d sends %lld; %s",
                        what, ours, g->name, other, (long long)f->bytes, root,
                        (long long)f->root_bytes, fix);
}

ty_status_t ty_dist_result(const ty_dist_group_t *g, int rc, const ty_mpi_shim_fault_t *fault,
                           const char *err, const char *what) {
  const ty_dist_t *d = g->dist;
  if (rc == TY_MPI_SHIM_OK) return TY_OK;
  if (rc == TY_MPI_SHIM_MISMATCH && fault) return ty_dist_mismatch(g, fault, what);
  int missing = fault ? fault->rank : -1;
  if (missing >= 0) missing = ty_dist_group_world_rank(g, missing);
  if (rc == TY_MPI_SHIM_TIMEOUT && missing >= 0 && fault->stalled) {
    char who[200];
    return ty_status_make(TY_CODE_DEADLINE_EXCEEDED,
                          "%s stopped answering during %s (every rank had reached it), which "
                          "did not complete within %g s (--dist-timeout): it died or hangs",
                          ty_dist_rank_text(d, missing, who, sizeof(who)), what, d->timeout_s);
  }
  if (rc == TY_MPI_SHIM_TIMEOUT && missing >= 0) {
    char who[200];
    return ty_status_make(TY_CODE_DEADLINE_EXCEEDED,
                          "%s did not reach %s within %g s (--dist-timeout): it died or hangs",
                          ty_dist_rank_text(d, missing, who, sizeof(who)), what, d->timeout_s);
  }
  if (rc == TY_MPI_SHIM_TIMEOUT) {
    return ty_status_make(TY_CODE_DEADLINE_EXCEEDED,
                          "%s did not complete within %g s (--dist-timeout): another rank died "
                          "or hangs",
                          what, d->timeout_s);
  }
  return ty_status_make(TY_CODE_UNAVAILABLE, "%s: %s", what, err);
}

ty_status_t ty_dist_all_reduce_sum(ty_dist_t *dist, ty_dtype_t dtype, void *buf, size_t count,
                                   const char *what) {
  return ty_dist_group_all_reduce(dist ? &dist->world : NULL, TY_DIST_REDUCE_SUM, dtype, buf,
                                  count, what);
}

ty_status_t ty_dist_broadcast(ty_dist_t *dist, int root, void *buf, size_t bytes,
                              const char *what) {
  return ty_dist_group_broadcast(dist ? &dist->world : NULL, root, buf, bytes, what);
}

static ty_status_t ty_dist_host_sum(void *user, ty_dtype_t dtype, void *data, size_t count) {
  return ty_dist_all_reduce_sum(user, dtype, data, count, "an all_reduce op of the step");
}

static uint32_t ty_dist_host_group_size(void *user, const char *name) {
  ty_dist_group_t *g = NULL;
  ty_status_t s = ty_dist_group(user, name, &g);
  if (s) {
    ty_status_free(s);
    return 0;
  }
  return (uint32_t)ty_dist_group_size(g);
}

static uint32_t ty_dist_host_group_rank(void *user, const char *name) {
  ty_dist_group_t *g = NULL;
  ty_status_t s = ty_dist_group(user, name, &g);
  if (s) {
    ty_status_free(s);
    return UINT32_MAX; /* refused by the caller as a rank outside the group */
  }
  return (uint32_t)ty_dist_group_rank(g);
}

static ty_status_t ty_dist_host_group_reduce(void *user, const char *name, bool max,
                                             ty_dtype_t dtype, void *data, size_t count) {
  ty_dist_group_t *g = NULL;
  TY_RETURN_IF_ERROR(ty_dist_group(user, name, &g));
  char what[64];
  snprintf(what, sizeof(what), "an all_reduce op (%s) over the %s group", max ? "max" : "sum",
           name);
  return ty_dist_group_all_reduce(g, max ? TY_DIST_REDUCE_MAX : TY_DIST_REDUCE_SUM, dtype, data,
                                  count, what);
}

void ty_dist_host_comm(ty_dist_t *dist, ty_host_comm_t *out) {
  *out = (ty_host_comm_t){.rank = (uint32_t)ty_dist_rank(dist),
                          .size = (uint32_t)ty_dist_size(dist),
                          .user = dist,
                          .all_reduce_sum = ty_dist_host_sum,
                          .group_size = ty_dist_host_group_size,
                          .group_reduce = ty_dist_host_group_reduce,
                          .group_rank = ty_dist_host_group_rank};
}

ty_status_t ty_dist_agree(ty_dist_t *dist, ty_status_t local, const char *what) {
  if (!dist || dist->size == 1) return local;
  /* One flag per rank: gathered, so every rank can name the first failure. */
  int64_t *flags = calloc((size_t)dist->size, sizeof(int64_t));
  if (!flags) {
    ty_status_free(local);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  flags[dist->rank] = local ? 1 : 0;
  ty_status_t s = ty_dist_all_reduce_sum(dist, TY_DTYPE_I64, flags, (size_t)dist->size, what);
  if (s || local) {
    free(flags);
    if (local) {
      ty_status_free(s);
      return local;
    }
    return s;
  }
  int failed = -1;
  for (int r = 0; r < dist->size && failed < 0; ++r) {
    if (flags[r]) failed = r;
  }
  free(flags);
  if (failed < 0) return TY_OK;
  return ty_status_make(TY_CODE_FAILED_PRECONDITION, "rank %d failed %s (its error is above)",
                        failed, what);
}

struct ty_dist_send_t {
  void *request;
  void *data;
  int dest;
  char what[128];
};

static ty_status_t ty_dist_p2p_check(const ty_dist_t *dist, int peer, int tag) {
  if (!dist || dist->size == 1) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "point-to-point messages need a distributed run of several ranks");
  }
  if (peer < 0 || peer >= dist->size || peer == dist->rank || tag < 0 || tag >= 32000) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "a message between rank %d and rank %d (tag %d) of a world of %d",
                          dist->rank, peer, tag, dist->size);
  }
  return TY_OK;
}

/* A point-to-point status: a timeout names the peer. */
static ty_status_t ty_dist_p2p_result(const ty_dist_t *d, int rc, int peer, bool sending,
                                      const char *err, const char *what) {
  if (rc == TY_MPI_SHIM_TIMEOUT) {
    char who[200];
    return ty_status_make(TY_CODE_DEADLINE_EXCEEDED,
                          "%s did not %s %s within %g s (--dist-timeout): it died or hangs",
                          ty_dist_rank_text(d, peer, who, sizeof(who)), sending ? "take" : "send",
                          what, d->timeout_s);
  }
  ty_mpi_shim_fault_t fault = {.rank = peer};
  return ty_dist_result(&d->world, rc, &fault, err, what);
}

ty_status_t ty_dist_send_start(ty_dist_t *dist, int dest, int tag, const void *buf, size_t bytes,
                               const char *what, ty_dist_send_t **out_send) {
  *out_send = NULL;
  TY_RETURN_IF_ERROR(ty_dist_p2p_check(dist, dest, tag));
  ty_dist_send_t *send = calloc(1, sizeof(*send));
  void *data = malloc(bytes ? bytes : 1);
  if (!send || !data) {
    free(send);
    free(data);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory sending %s", what);
  }
  memcpy(data, buf, bytes);
  send->data = data;
  send->dest = dest;
  snprintf(send->what, sizeof(send->what), "%s", what);
  char err[512] = "";
  int rc = dist->shim->send_start(data, bytes, dest, tag, &send->request, err, sizeof(err));
  if (rc != TY_MPI_SHIM_OK) {
    free(data);
    free(send);
    return ty_dist_p2p_result(dist, rc, dest, true, err, what);
  }
  *out_send = send;
  return TY_OK;
}

ty_status_t ty_dist_send_wait(ty_dist_t *dist, ty_dist_send_t *send) {
  if (!send) return TY_OK;
  char err[512] = "";
  int rc = dist->shim->send_wait(send->request, dist->timeout_s, err, sizeof(err));
  ty_status_t s = ty_dist_p2p_result(dist, rc, send->dest, true, err, send->what);
  free(send->data);
  free(send);
  return s;
}

ty_status_t ty_dist_recv(ty_dist_t *dist, int source, int tag, void *buf, size_t bytes,
                         const char *what) {
  TY_RETURN_IF_ERROR(ty_dist_p2p_check(dist, source, tag));
  char err[512] = "";
  int rc = dist->shim->recv(buf, bytes, source, tag, dist->timeout_s, err, sizeof(err));
  return ty_dist_p2p_result(dist, rc, source, false, err, what);
}
