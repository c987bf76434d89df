/* The trainer's side of pipeline/pp_runner.h: what a pipeline stage sees
 * of the run, and the calls it makes back into it. */
#include "trainer.h"

static ty_status_t ty_runner_stage_micro(void *run, int64_t base, int64_t m,
                                         double *out_counted) {
  return ty_trainer_stage_micro(run, base, m, out_counted);
}

static ty_status_t ty_runner_bind_hparams(void *run, ty_session_t *session, int64_t step) {
  return ty_trainer_bind_hparams(run, session, step);
}

static ty_status_t ty_runner_dist_sum(void *run, double *values, size_t count,
                                      const char *what) {
  return ty_trainer_dist_sum(run, values, count, what);
}

static ty_status_t ty_runner_zero_broadcast(void *run, ty_session_t *session,
                                            const ty_graph_t *graph, const ty_llm_t *model,
                                            const int *owner) {
  return ty_trainer_zero_broadcast(run, session, graph, model, owner);
}

static ty_status_t ty_runner_build_mirror(void *run) { return ty_trainer_build(run); }

void ty_trainer_runner_init(ty_trainer_t *t) {
  t->pp_runner = (ty_pp_runner_t){.cfg = &t->cfg,
                                  .model_config = &t->model_config,
                                  .device = &t->device,
                                  .shape = &t->shape,
                                  .graphs = &t->graphs,
                                  .progress = &t->progress,
                                  .par = &t->par,
                                  .feed = &t->feed,
                                  .run = t,
                                  .stage_micro = ty_runner_stage_micro,
                                  .bind_hparams = ty_runner_bind_hparams,
                                  .dist_sum = ty_runner_dist_sum,
                                  .zero_broadcast = ty_runner_zero_broadcast,
                                  .build_mirror = ty_runner_build_mirror};
}
