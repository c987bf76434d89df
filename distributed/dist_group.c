/* The rank layout world = dp x pp x cp x tp and its groups (dist.h "Groups"):
 * communicators split from the world through the MPI shim, with the world
 * ranks of their members so that a rank that does not arrive is named as
 * the user knows it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/dist_internal.h"

ty_status_t ty_dist_layout_make_cp(int world, int rank, int tp, int pp, int cp,
                                   ty_dist_layout_t *out) {
  if (tp < 1) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--tp %d: must be 1 or more", tp);
  if (pp < 1) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--pp %d: must be 1 or more", pp);
  if (cp < 1) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--cp %d: must be 1 or more", cp);
  if (world < 1 || rank < 0 || rank >= world) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "rank %d of a world of %d", rank, world);
  }
  const int64_t ranks = (int64_t)tp * pp * cp;
  if (ranks > world || world % ranks != 0) {
    char cp_text[32] = "";
    if (cp > 1) snprintf(cp_text, sizeof(cp_text), " x --cp %d", cp);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--tp %d x --pp %d%s = %lld does not divide the world of %d rank%s: "
                          "run a multiple of %lld ranks",
                          tp, pp, cp_text, (long long)ranks, world, world == 1 ? "" : "s",
                          (long long)ranks);
  }
  const int inner = cp * tp; /* the ranks of one (dp_index, pp_index) */
  *out = (ty_dist_layout_t){.world = world, .rank = rank, .dp = world / (int)ranks, .pp = pp,
                            .tp = tp, .cp = cp, .dp_index = rank / (pp * inner),
                            .pp_index = rank / inner % pp, .cp_index = rank / tp % cp,
                            .tp_index = rank % tp};
  return TY_OK;
}

ty_status_t ty_dist_layout_make(int world, int rank, int tp, int pp, ty_dist_layout_t *out) {
  return ty_dist_layout_make_cp(world, rank, tp, pp, 1, out);
}

int ty_dist_layout_rank_cp(const ty_dist_layout_t *l, int dp_index, int pp_index, int cp_index,
                           int tp_index) {
  const int cp = l->cp > 0 ? l->cp : 1;
  return ((dp_index * l->pp + pp_index) * cp + cp_index) * l->tp + tp_index;
}

int ty_dist_layout_rank(const ty_dist_layout_t *l, int dp_index, int pp_index, int tp_index) {
  return ty_dist_layout_rank_cp(l, dp_index, pp_index, 0, tp_index);
}

static void ty_dist_group_free(ty_dist_group_t *g) {
  if (!g) return;
  if (g->comm) g->dist->shim->comm_free(g->comm);
  free(g->world_ranks);
  free(g);
}

void ty_dist_groups_free(ty_dist_t *d) {
  ty_dist_group_free(d->tp);
  ty_dist_group_free(d->pp);
  ty_dist_group_free(d->dp);
  ty_dist_group_free(d->embed);
  ty_dist_group_free(d->cp);
  ty_dist_group_free(d->dp_cp);
  d->tp = d->pp = d->dp = d->embed = d->cp = d->dp_cp = NULL;
}

/* One group of the world: the ranks of this `color`, ordered by world rank.
 * Collective over the world. */
static ty_status_t ty_dist_group_split(ty_dist_t *d, const char *name, int color,
                                       ty_dist_group_t **out) {
  *out = NULL;
  ty_dist_group_t *g = calloc(1, sizeof(*g));
  if (!g) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for group %s", name);
  g->dist = d;
  snprintf(g->name, sizeof(g->name), "%s", name);
  char err[512] = "";
  if (d->shim->comm_split(color, d->rank, &g->comm, &g->rank, &g->size, err, sizeof(err))) {
    free(g);
    return ty_status_make(TY_CODE_UNAVAILABLE, "making the %s group: %s", name, err);
  }
  /* Its members' world ranks: each puts its own in its slot of a sum. */
  int64_t *ranks = calloc((size_t)g->size, sizeof(int64_t));
  g->world_ranks = calloc((size_t)g->size, sizeof(int));
  ty_status_t s = TY_OK;
  if (!ranks || !g->world_ranks) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for group %s", name);
  } else {
    ranks[g->rank] = d->rank;
    s = ty_dist_group_all_reduce(g, TY_DIST_REDUCE_SUM, TY_DTYPE_I64, ranks, (size_t)g->size,
                                 "the rank exchange of a new group");
    for (int r = 0; !s && r < g->size; ++r) g->world_ranks[r] = (int)ranks[r];
  }
  free(ranks);
  if (s) {
    ty_dist_group_free(g);
    return s;
  }
  *out = g;
  return TY_OK;
}

ty_status_t ty_dist_set_layout_cp(ty_dist_t *dist, int tp, int pp, int cp) {
  ty_dist_layout_t l;
  TY_RETURN_IF_ERROR(
      ty_dist_layout_make_cp(ty_dist_size(dist), ty_dist_rank(dist), tp, pp, cp, &l));
  if (!dist) return TY_OK;
  ty_dist_groups_free(dist);
  dist->layout = l;
  /* tp = pp = cp = 1: the tp, pp and cp groups are each rank alone (NULL)
   * and dp is the world itself; nothing to split. */
  if (tp == 1 && pp == 1 && cp == 1) return TY_OK;
  /* Colors: the indices the group's members share, as one number. */
  ty_status_t s = ty_dist_group_split(
      dist, "tp", (l.dp_index * l.pp + l.pp_index) * l.cp + l.cp_index, &dist->tp);
  if (!s) {
    s = ty_dist_group_split(dist, "pp", (l.dp_index * l.cp + l.cp_index) * l.tp + l.tp_index,
                            &dist->pp);
  }
  if (!s) {
    s = ty_dist_group_split(dist, "dp", (l.pp_index * l.cp + l.cp_index) * l.tp + l.tp_index,
                            &dist->dp);
  }
  if (!s && cp > 1) {
    s = ty_dist_group_split(dist, "cp", (l.dp_index * l.pp + l.pp_index) * l.tp + l.tp_index,
                            &dist->cp);
    if (!s) s = ty_dist_group_split(dist, "dp_cp", l.pp_index * l.tp + l.tp_index, &dist->dp_cp);
  }
  if (!s && pp > 1) {
    /* The first and the last stage of one (dp_index, cp_index, tp_index);
     * a middle stage's rank is a group of its own (a color past theirs). */
    const bool end = l.pp_index == 0 || l.pp_index == pp - 1;
    const int fixed = (l.dp_index * l.cp + l.cp_index) * l.tp + l.tp_index;
    const int color = end ? fixed : l.dp * l.cp * l.tp + dist->rank;
    s = ty_dist_group_split(dist, "embed", color, &dist->embed);
  }
  if (s) {
    ty_dist_groups_free(dist);
    ty_status_free(ty_dist_layout_make(dist->size, dist->rank, 1, 1, &dist->layout));
  }
  return s;
}

ty_status_t ty_dist_set_layout(ty_dist_t *dist, int tp, int pp) {
  return ty_dist_set_layout_cp(dist, tp, pp, 1);
}

const ty_dist_layout_t *ty_dist_layout(const ty_dist_t *dist) {
  static const ty_dist_layout_t one = {.world = 1, .dp = 1, .pp = 1, .tp = 1, .cp = 1};
  return dist ? &dist->layout : &one;
}

ty_status_t ty_dist_group(ty_dist_t *dist, const char *name, ty_dist_group_t **out_group) {
  *out_group = NULL;
  const bool world = !strcmp(name, "world"), tp = !strcmp(name, "tp"),
             pp = !strcmp(name, "pp"), dp = !strcmp(name, "dp"), embed = !strcmp(name, "embed"),
             cp = !strcmp(name, "cp"), dp_cp = !strcmp(name, "dp_cp");
  if (!world && !tp && !pp && !dp && !embed && !cp && !dp_cp) {
    return ty_status_make(TY_CODE_NOT_FOUND,
                          "no process group '%s' (world, tp, cp, pp, dp, dp_cp and embed are)",
                          name);
  }
  if (!dist) return TY_OK;
  if (world) *out_group = &dist->world;
  if (tp) *out_group = dist->tp;
  if (pp) *out_group = dist->pp;
  if (dp) *out_group = dist->dp ? dist->dp : &dist->world;
  if (embed) *out_group = dist->embed; /* pp = 1: this rank alone */
  if (cp) *out_group = dist->cp;       /* cp = 1: this rank alone */
  if (dp_cp) { /* cp = 1: the dp group */
    *out_group = dist->dp_cp ? dist->dp_cp : dist->dp ? dist->dp : &dist->world;
  }
  return TY_OK;
}

int ty_dist_group_rank(const ty_dist_group_t *g) { return g ? g->rank : 0; }
int ty_dist_group_size(const ty_dist_group_t *g) { return g ? g->size : 1; }
const char *ty_dist_group_name(const ty_dist_group_t *g) { return g ? g->name : "self"; }

int ty_dist_group_world_rank(const ty_dist_group_t *g, int group_rank) {
  if (!g) return 0;
  if (!g->comm) return group_rank; /* the world */
  return g->world_ranks && group_rank >= 0 && group_rank < g->size ? g->world_ranks[group_rank]
                                                                  : -1;
}

ty_status_t ty_dist_group_all_reduce(ty_dist_group_t *g, ty_dist_reduce_t op, ty_dtype_t dtype,
                                     void *buf, size_t count, const char *what) {
  if (!g || g->size == 1) return TY_OK;
  int type = dtype == TY_DTYPE_F32   ? TY_MPI_SHIM_F32
             : dtype == TY_DTYPE_F64 ? TY_MPI_SHIM_F64
             : dtype == TY_DTYPE_I64 ? TY_MPI_SHIM_I64
                                     : -1;
  if (type < 0) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "%s: host all-reduce of %s (f32, f64, i64 only)",
                          what, ty_dtype_name(dtype));
  }
  char err[512] = "";
  ty_mpi_shim_fault_t fault = {.rank = -1};
  int rc = g->dist->shim->allreduce(g->comm, buf, count, type,
                                    op == TY_DIST_REDUCE_MAX ? TY_MPI_SHIM_MAX : TY_MPI_SHIM_SUM,
                                    g->dist->timeout_s, &fault, err, sizeof(err));
  return ty_dist_result(g, rc, &fault, err, what);
}

ty_status_t ty_dist_group_broadcast(ty_dist_group_t *g, int root, void *buf, size_t bytes,
                                    const char *what) {
  if (!g || g->size == 1) return TY_OK;
  char err[512] = "";
  ty_mpi_shim_fault_t fault = {.rank = -1};
  int rc = g->dist->shim->broadcast(g->comm, buf, bytes, root, g->dist->timeout_s, &fault, err,
                                    sizeof(err));
  return ty_dist_result(g, rc, &fault, err, what);
}

ty_status_t ty_dist_group_all_gather(ty_dist_group_t *g, const void *mine, size_t bytes,
                                     void *out, const char *what) {
  const int size = ty_dist_group_size(g), rank = ty_dist_group_rank(g);
  if (size == 1) {
    if (bytes) memcpy(out, mine, bytes);
    return TY_OK;
  }
  /* An all-reduce with the others' slots zero: the same sizes and the same
   * checks (a rank that brings another size or does not arrive is named)
   * as every collective, on whichever transport the world uses. */
  const size_t words = (bytes + 7) / 8;
  if (words > SIZE_MAX / 8 / (size_t)size) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "%s: %zu bytes from each of %d ranks",
                          what, bytes, size);
  }
  const size_t all = words * (size_t)size;
  int64_t *slots = calloc(all > 0 ? all : 1, sizeof(int64_t));
  if (!slots) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "%s: out of host memory for %zu bytes from each of %d ranks", what,
                          bytes, size);
  }
  if (bytes) memcpy(slots + words * (size_t)rank, mine, bytes);
  ty_status_t s = ty_dist_group_all_reduce(g, TY_DIST_REDUCE_SUM, TY_DTYPE_I64, slots,
                                           all, what);
  for (int r = 0; !s && bytes && r < size; ++r) {
    memcpy((char *)out + (size_t)r * bytes, slots + words * (size_t)r, bytes);
  }
  free(slots);
  return s;
}
