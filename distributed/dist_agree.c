/* Rank agreement (dist.h "Rank agreement"): the ranks compare SHA-256
 * digests of named fields before the first collective of a command, so
 * that ranks started differently stop with one message on every rank
 * instead of corrupting memory inside MPI or training different things. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "distributed/dist_internal.h"
#include "hal/sha256.h"

void ty_dist_field_set(ty_dist_field_t *f, const char *name, const char *about,
                       const void *value, size_t size, const char *shown) {
  memset(f, 0, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "%s", name);
  snprintf(f->about, sizeof(f->about), "%s", about ? about : "");
  if (shown) {
    snprintf(f->shown, sizeof(f->shown), "%s", shown);
  } else {
    const size_t n = size < sizeof(f->shown) - 1 ? size : sizeof(f->shown) - 1;
    memcpy(f->shown, value, n);
  }
  /* SHA-256 fails only without memory, leaving a zero digest that differs
   * from every real one, so the ranks disagree rather than agree by accident. */
  (void)!ty_sha256(value, size, f->digest);
}

/* Every rank's value of one i64 (a slot each, summed): the cheapest
 * "all-gather" over the host collectives. */
static ty_status_t ty_dist_gather_i64(ty_dist_t *d, int64_t mine, int64_t *all,
                                      const char *what) {
  memset(all, 0, (size_t)d->size * sizeof(int64_t));
  all[d->rank] = mine;
  return ty_dist_all_reduce_sum(d, TY_DTYPE_I64, all, (size_t)d->size, what);
}

ty_status_t ty_dist_agree_fields(ty_dist_t *dist, const ty_dist_field_t *fields, size_t count) {
  if (!dist || dist->size == 1) return TY_OK;
  static const char *const fix = "every rank of one job must be started with the same options";
  const size_t n = count;
  int64_t *all = calloc((size_t)dist->size, sizeof(int64_t));
  ty_dist_field_t *root = calloc(n ? n : 1, sizeof(*root));
  if (!all || !root) {
    free(all);
    free(root);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for the rank agreement");
  }
  /* 1. The same list of fields everywhere (ranks of different builds may
   * check different things): every rank learns every rank's count. */
  ty_status_t s = ty_dist_gather_i64(dist, (int64_t)n, all, "the rank agreement (field count)");
  for (int r = 1; !s && r < dist->size; ++r) {
    if (all[r] != all[0]) {
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                         "ranks disagree on what must agree: rank %d checks %lld fields, rank 0 "
                         "%lld; the ranks run different trainyard builds (install one build "
                         "on every host)",
                         r, (long long)all[r], (long long)all[0]);
    }
  }
  /* 2. Rank 0's fields to every rank; each compares them with its own. */
  if (!s) {
    if (dist->rank == 0 && n) memcpy(root, fields, n * sizeof(*root));
    s = ty_dist_broadcast(dist, 0, root, n * sizeof(*root), "the rank agreement (rank 0's fields)");
  }
  int64_t first = 0; /* 1 + the first field that differs from rank 0's, 0 when none */
  for (size_t i = 0; !s && i < n && !first; ++i) {
    if (strncmp(fields[i].name, root[i].name, sizeof(root[i].name)) ||
        memcmp(fields[i].digest, root[i].digest, sizeof(root[i].digest))) {
      first = (int64_t)i + 1;
    }
  }
  if (!s) s = ty_dist_gather_i64(dist, first, all, "the rank agreement (the verdicts)");
  /* 3. The first field that any rank differs on, and the lowest rank that
   * differs on it, whose value every rank then learns for the message. */
  int who = -1, differ = 0;
  for (int r = 1; !s && r < dist->size; ++r) {
    if (!all[r]) continue;
    differ++;
    if (who < 0 || all[r] < all[who]) who = r;
  }
  if (!s && who > 0) {
    const size_t i = (size_t)(all[who] - 1);
    ty_dist_field_t theirs;
    if (dist->rank == who) theirs = fields[i];
    s = ty_dist_broadcast(dist, who, &theirs, sizeof(theirs), "the rank agreement (a value)");
    if (!s) {
      theirs.shown[sizeof(theirs.shown) - 1] = '\0';
      root[i].shown[sizeof(root[i].shown) - 1] = '\0';
      root[i].name[sizeof(root[i].name) - 1] = '\0';
      root[i].about[sizeof(root[i].about) - 1] = '\0';
      /* values cut to the same text (or hashed files): their digests tell */
      char dt[32] = "", dr[32] = "";
      if (!strcmp(theirs.shown, root[i].shown)) {
        snprintf(dt, sizeof(dt), " (sha256 %02x%02x%02x%02x...)", theirs.digest[0],
                 theirs.digest[1], theirs.digest[2], theirs.digest[3]);
        snprintf(dr, sizeof(dr), " (sha256 %02x%02x%02x%02x...)", root[i].digest[0],
                 root[i].digest[1], root[i].digest[2], root[i].digest[3]);
      }
      char others[64] = "";
      if (differ > 1) {
        snprintf(others, sizeof(others), " (%d ranks differ from rank 0)", differ);
      }
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                         "ranks disagree on '%s'%s%s%s: rank %d has %s%s, rank 0 has %s%s%s; %s",
                         root[i].name, root[i].about[0] ? " (" : "", root[i].about,
                         root[i].about[0] ? ")" : "", who, theirs.shown, dt, root[i].shown, dr,
                         others, fix);
    }
  }
  free(all);
  free(root);
  return s;
}
