/* What trainer_pp.c (layout, build, weights in and out) and pp_step.c (the
 * step, the bubble report) share. */
#ifndef TY_APPS_TRAINYARD_PIPELINE_PP_INTERNAL_H_
#define TY_APPS_TRAINYARD_PIPELINE_PP_INTERNAL_H_

#include "dist/dist.h"
#include "graph/preflight.h"
#include "pp_schedule.h"
#include "pp_stage.h"
#include "trainer_pp.h"

struct ty_trainer_pp_t {
  ty_pp_kind_t kind;
  int v, chunks;
  int *first_unit;            /* chunks + 1: the partition, in units */
  ty_pp_chunk_t *chunk;       /* this rank's v chunks, local index j = global / pp */
  ty_pp_action_t *actions;    /* this rank's schedule */
  size_t action_count;
  void *buffer;               /* one activation or gradient on its way */
  ty_dist_send_t **pending;   /* this step's sends in flight */
  size_t pending_count;
  int64_t *tokens, *targets;  /* accum x B x T: the step's micro-batches */
  void *weights;              /* in the loss dtype, normalized */
  double idle_seconds, step_seconds; /* over the run: waiting for peers, all */
  uint64_t plan_bytes[TY_PLAN_ITEM_COUNT]; /* this rank's stages' memory plan */
};

/* The world rank that holds global chunk `c` in this rank's replica, at
 * this rank's tp index (activations go between the tp ranks of one index). */
static inline int ty_pp_rank_of(const ty_trainer_t *t, int c) {
  return ty_dist_layout_rank(ty_dist_layout(t->dist), t->dp_rank, c % t->pp, (int)t->cfg.tp_rank);
}

#endif /* TY_APPS_TRAINYARD_PIPELINE_PP_INTERNAL_H_ */
