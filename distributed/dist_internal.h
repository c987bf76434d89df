/* The world's and the groups' insides, shared by dist.c (the world) and
 * dist_group.c (the layout and its groups); private to distributed/. */
#ifndef TY_DIST_DIST_INTERNAL_H_
#define TY_DIST_DIST_INTERNAL_H_

#include "distributed/dist.h"
#include "distributed/mpi_shim.h"

struct ty_dist_group_t {
  ty_dist_t *dist;
  ty_mpi_shim_comm_t *comm; /* NULL: the world */
  char name[8];
  int rank, size;
  int *world_ranks; /* per group rank */
};

struct ty_dist_t {
  void *library;
  const ty_mpi_shim_t *shim;
  int rank, size, local_rank;
  double timeout_s;
  char library_version[256];
  char transport[320];
  char (*hosts)[160]; /* per world rank: rank_host */
  ty_dist_layout_t layout;
  ty_dist_group_t world;
  /* Split by ty_dist_set_layout; before it, NULL: tp and pp are this rank
   * alone and dp is the world. embed exists with pp > 1 only (with pp = 1
   * it is this rank alone). cp and dp_cp exist with cp > 1 only (without
   * it cp is this rank alone and dp_cp is dp). */
  ty_dist_group_t *tp, *pp, *dp, *embed, *cp, *dp_cp;
};

/* The status of a shim call on `g` (rc, and `fault`: a rank of `g` that
 * did not arrive or brought another collective, or NULL); `what` names the
 * collective. */
ty_status_t ty_dist_result(const ty_dist_group_t *g, int rc, const ty_mpi_shim_fault_t *fault,
                           const char *err, const char *what);
/* Frees the groups of the layout (dist_group.c). */
void ty_dist_groups_free(ty_dist_t *d);

#endif /* TY_DIST_DIST_INTERNAL_H_ */
