/* What trainer_pp.c (layout, build, weights in and out) and pp_step.c (the
 * step, the bubble report) share. */
#ifndef TY_APPS_TRAINYARD_PIPELINE_PP_INTERNAL_H_
#define TY_APPS_TRAINYARD_PIPELINE_PP_INTERNAL_H_

#include "distributed/dist.h"
#include "graph/runtime/preflight.h"
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
  /* The device path (pp_p2p.c): activations and gradients on the "pp"
   * device communicator, or NULL (the host path, MPI through p->buffer). */
  struct ty_pp_p2p_t *p2p;
  uint64_t device_bytes, host_bytes; /* sent and received over the run */
};

/* pp_p2p.c: the device path, when the trainer made a "pp" communicator of
 * a backend with point to point (ABI 1.8). Opens it after the chunks'
 * sessions exist (no-op without the communicator). */
ty_status_t ty_pp_p2p_open(ty_pp_runner_t *t);
void ty_pp_p2p_close(ty_pp_runner_t *t);
/* Chunk j's micro-batch m arrives into its device stash (a forward) or the
 * gradient buffer (a backward), in one batch with the sends the plan puts
 * before it; the time waiting counts as idle. */
ty_status_t ty_pp_p2p_recv(ty_pp_runner_t *t, int j, int64_t m, bool backward);
/* Binds chunk j's stashed activation of micro-batch m to `session`'s
 * "hidden_in", or the received gradient to its "hidden_out.grad". */
ty_status_t ty_pp_p2p_bind(ty_pp_runner_t *t, int j, int64_t m, bool gradient,
                           ty_session_t *session);
/* Queues the send of `session`'s output `name` (chunk j's message of
 * micro-batch m) until the plan's batch for it. */
ty_status_t ty_pp_p2p_send(ty_pp_runner_t *t, int j, int64_t m, bool backward,
                           ty_session_t *session, const char *name);
/* Before `session` runs: queued sends of its outputs move to a device
 * outbox first (the run would overwrite them). */
ty_status_t ty_pp_p2p_protect(ty_pp_runner_t *t, ty_session_t *session);
/* The step's end: the sends left, in one batch. */
ty_status_t ty_pp_p2p_flush(ty_pp_runner_t *t);

/* The world rank that holds global chunk `c` in this rank's replica, at
 * this rank's cp and tp index (activations go between the ranks of one
 * index: the same chunks of the rows, the same part of each layer). */
static inline int ty_pp_rank_of(const ty_pp_runner_t *t, int c) {
  return ty_dist_layout_rank_cp(ty_dist_layout(t->par->dist), t->par->dp_rank, c % t->par->pp,
                                t->par->cp_rank, (int)t->cfg->tp_rank);
}

#endif /* TY_APPS_TRAINYARD_PIPELINE_PP_INTERNAL_H_ */
