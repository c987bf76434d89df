/* One pipeline-parallel optimizer step (trainer_pp.h): the schedule's
 * forwards and backwards, then the gradients' sums (over the data-parallel
 * replicas, and between the two stages that hold a tied embedding) and
 * each rank's share of the global norm in each chunk's reduce graph, the
 * shares summed on the host, and each chunk's optimizer graph clipping by
 * the whole norm; and the bubble report at the end of the run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/dtype.h"
#include "hal/file.h"
#include "pp_internal.h"
#include "train/train_plan.h"

static double ty_pp_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Message tags: chunk c's activation (or gradient) of micro-batch m. */
static int ty_pp_tag(const ty_pp_runner_t *t, int c, int64_t m, bool gradient) {
  return 16 + (int)(((int64_t)c * t->shape->accum + m) * 2 + (gradient ? 1 : 0)) % 31000;
}

static ty_status_t ty_pp_send(ty_pp_runner_t *t, int c_to, int tag, size_t bytes,
                              const char *what) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  p->host_bytes += bytes;
  return ty_dist_send_start(t->par->dist, ty_pp_rank_of(t, c_to), tag, p->buffer, bytes, what,
                            &p->pending[p->pending_count++]);
}

static ty_status_t ty_pp_recv(ty_pp_runner_t *t, int c_from, int tag, void *into, size_t bytes,
                              const char *what) {
  double t0 = ty_pp_now();
  t->par->pipe->host_bytes += bytes;
  ty_status_t s = ty_dist_recv(t->par->dist, ty_pp_rank_of(t, c_from), tag, into, bytes, what);
  t->par->pipe->idle_seconds += ty_pp_now() - t0;
  return s;
}

/* The inputs of chunk `ch` for micro-batch m into `session`. */
static ty_status_t ty_pp_bind(ty_pp_runner_t *t, const ty_pp_chunk_t *ch, ty_session_t *session,
                              int64_t m, bool with_targets) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  const int64_t n = t->shape->B * t->shape->Tl; /* Tl: this rank's tokens of a row */
  int64_t bt[2] = {t->shape->B, t->shape->Tl},
          btc[3] = {t->shape->B, t->shape->Tl, t->model_config->hidden_size};
  if (ch->first) {
    TY_RETURN_IF_ERROR(ty_session_bind(session, "tokens", TY_DTYPE_I64, 2, bt, p->tokens + m * n,
                                       (size_t)n * 8));
  } else if (p->p2p) {
    TY_RETURN_IF_ERROR(ty_pp_p2p_bind(t, (int)(ch - p->chunk), m, false, session));
  } else {
    TY_RETURN_IF_ERROR(ty_session_bind(session, "hidden_in", t->shape->dtype, 3, btc,
                                       (char *)ch->stash + m * ch->hidden_bytes,
                                       ch->hidden_bytes));
  }
  if (with_targets) {
    size_t w = ty_dtype_size(t->shape->loss_dtype);
    TY_RETURN_IF_ERROR(ty_session_bind(session, "targets", TY_DTYPE_I64, 2, bt,
                                       p->targets + m * n, (size_t)n * 8));
    TY_RETURN_IF_ERROR(ty_session_bind(session, "loss_weights", t->shape->loss_dtype, 2, bt,
                                       (char *)p->weights + (size_t)(m * n) * w, (size_t)n * w));
  }
  if (t->cfg->dropout > 0) {
    /* the micro-batch's index in the global step, as in one process */
    int64_t rng[2] = {(int64_t)t->cfg->seed,
                      ty_train_plan_dropout_counter(t->progress->step, t->par->dp, t->par->dp_rank,
                                                    t->shape->accum, m)};
    int64_t two[1] = {2};
    TY_RETURN_IF_ERROR(ty_session_bind(session, "rng", TY_DTYPE_I64, 1, two, rng, sizeof(rng)));
  }
  return TY_OK;
}

/* One entry of the schedule. */
static ty_status_t ty_pp_act(ty_pp_runner_t *t, ty_pp_action_t a, double *loss) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  ty_pp_chunk_t *ch = &p->chunk[a.chunk];
  const int c = ch->global;
  const int64_t m = a.micro;
  char what[96];
  if (p->p2p) { /* the device path (pp_p2p.c) */
    const int j = a.chunk;
    const bool receives = a.backward ? !ch->last : !ch->first;
    if (receives) TY_RETURN_IF_ERROR(ty_pp_p2p_recv(t, j, m, a.backward));
    if (!a.backward && ch->last) return TY_OK; /* its backward runs the forward */
    ty_session_t *session = a.backward ? ch->s_bwd : ch->s_fwd;
    if (a.backward && !ch->last) TY_RETURN_IF_ERROR(ty_pp_p2p_bind(t, j, m, true, session));
    TY_RETURN_IF_ERROR(ty_pp_bind(t, ch, session, m, a.backward && ch->last));
    TY_RETURN_IF_ERROR(ty_pp_p2p_protect(t, session));
    TY_RETURN_IF_ERROR(ty_session_run(session));
    if (a.backward && ch->last) {
      double micro = 0;
      TY_RETURN_IF_ERROR(ty_trainer_read_scalar(session, "loss", t->shape->loss_dtype, &micro));
      *loss += micro;
    }
    const bool sends = a.backward ? !ch->first : !ch->last;
    if (!sends) return TY_OK;
    return ty_pp_p2p_send(t, j, m, a.backward, session,
                          a.backward ? "hidden_in.grad" : "hidden_out");
  }
  if (!a.backward) {
    snprintf(what, sizeof(what), "the activations of micro-batch %lld into chunk %d",
             (long long)m, c);
    if (!ch->first) {
      TY_RETURN_IF_ERROR(ty_pp_recv(t, c - 1, ty_pp_tag(t, c - 1, m, false),
                                    (char *)ch->stash + m * ch->hidden_bytes, ch->hidden_bytes,
                                    what));
    }
    if (ch->last) return TY_OK; /* its backward runs the forward with the loss */
    TY_RETURN_IF_ERROR(ty_pp_bind(t, ch, ch->s_fwd, m, false));
    TY_RETURN_IF_ERROR(ty_session_run(ch->s_fwd));
    TY_RETURN_IF_ERROR(ty_session_read(ch->s_fwd, "hidden_out", p->buffer, ch->hidden_bytes));
    snprintf(what, sizeof(what), "the activations of micro-batch %lld into chunk %d",
             (long long)m, c + 1);
    return ty_pp_send(t, c + 1, ty_pp_tag(t, c, m, false), ch->hidden_bytes, what);
  }
  int64_t btc[3] = {t->shape->B, t->shape->Tl, t->model_config->hidden_size};
  if (!ch->last) {
    snprintf(what, sizeof(what), "the gradient of micro-batch %lld out of chunk %d",
             (long long)m, c);
    TY_RETURN_IF_ERROR(ty_pp_recv(t, c + 1, ty_pp_tag(t, c + 1, m, true), p->buffer,
                                  ch->hidden_bytes, what));
    TY_RETURN_IF_ERROR(ty_session_bind(ch->s_bwd, "hidden_out.grad", t->shape->dtype, 3, btc,
                                       p->buffer, ch->hidden_bytes));
  }
  TY_RETURN_IF_ERROR(ty_pp_bind(t, ch, ch->s_bwd, m, ch->last));
  TY_RETURN_IF_ERROR(ty_session_run(ch->s_bwd));
  if (ch->last) {
    double micro = 0;
    TY_RETURN_IF_ERROR(ty_trainer_read_scalar(ch->s_bwd, "loss", t->shape->loss_dtype, &micro));
    *loss += micro;
  }
  if (ch->first) return TY_OK;
  TY_RETURN_IF_ERROR(ty_session_read(ch->s_bwd, "hidden_in.grad", p->buffer, ch->hidden_bytes));
  snprintf(what, sizeof(what), "the gradient of micro-batch %lld out of chunk %d", (long long)m,
           c - 1);
  return ty_pp_send(t, c - 1, ty_pp_tag(t, c, m, true), ch->hidden_bytes, what);
}

/* The step's gradient sums and global norm, on the device: each chunk's
 * reduce graph sums its accumulators over the replicas (and a tied
 * embedding over its two stages) in place and gives this rank's share of
 * the squared norm; the shares are summed over the world on the host (one
 * f64 per rank). *out_norm_sq the whole model's squared norm. */
static ty_status_t ty_pp_reduce(ty_pp_runner_t *t, double *out_norm_sq) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  double share = 0;
  for (int j = 0; j < p->v; ++j) {
    ty_pp_chunk_t *ch = &p->chunk[j];
    if (!ch->s_red) continue;
    TY_RETURN_IF_ERROR(ty_session_run(ch->s_red));
    double part = 0;
    if (ch->red_share) {
      TY_RETURN_IF_ERROR(
          ty_trainer_read_scalar(ch->s_red, "grad_norm_sq_share", TY_DTYPE_F32, &part));
    }
    share += part;
  }
  double *sums = calloc((size_t)t->par->world, sizeof(double));
  if (!sums) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  sums[t->par->rank] = share;
  char what[96];
  snprintf(what, sizeof(what), "the gradient norm of step %lld", (long long)t->progress->step + 1);
  ty_status_t s =
      ty_dist_all_reduce_sum(t->par->dist, TY_DTYPE_F64, sums, (size_t)t->par->world, what);
  if (!s && t->cfg->zero == 2) {
    /* ZeRO-2: each rank's share of the sums, disjoint: every rank, in rank
     * order (the same bits on every rank) */
    double total = 0;
    for (int r = 0; r < t->par->world; ++r) total += sums[r];
    *out_norm_sq = total;
  } else if (!s) {
    /* replica 0's ranks at cp index 0 (its cp ranks hold the same summed
     * gradients), stage then tp index: the same bits on every rank */
    const ty_dist_layout_t *l = ty_dist_layout(t->par->dist);
    double total = 0;
    for (int r = 0; r < t->par->pp; ++r) {
      for (int i = 0; i < t->par->tp; ++i) total += sums[ty_dist_layout_rank(l, 0, r, i)];
    }
    *out_norm_sq = total;
  }
  free(sums);
  return s;
}

ty_status_t ty_trainer_pp_step(ty_pp_runner_t *t, int64_t base, double *out_loss,
                               double *out_norm) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  const double started = ty_pp_now();
  const int64_t n = t->shape->B * t->shape->Tl;
  const size_t w = ty_dtype_size(t->shape->loss_dtype);
  double counted_total = 0;
  /* Every stage of a replica reads the same rows (the first needs the
   * tokens, the last the targets): the rows of one process's step; under
   * --cp each rank its chunks of them (ty_trainer_cp_position), whose
   * targets it alone counts. */
  for (int64_t m = 0; m < t->shape->accum; ++m) {
    double counted = 0;
    TY_RETURN_IF_ERROR(t->stage_micro(t->run, base, m, &counted));
    counted_total += counted;
    memcpy(p->tokens + m * n, t->feed->tokens, (size_t)n * 8);
    memcpy(p->targets + m * n, t->feed->targets, (size_t)n * 8);
    memcpy((char *)p->weights + (size_t)(m * n) * w, t->feed->weights, (size_t)n * w);
  }
  TY_RETURN_IF_ERROR(t->dist_sum(t->run, &counted_total, 1, "the target count"));
  counted_total /= t->par->pp * t->par->tp; /* every rank of a replica counted the same rows */
  const double scale = counted_total > 0 ? 1.0 / counted_total : 0.0;
  for (int64_t i = 0; i < t->shape->accum * n; ++i) {
    if (t->shape->loss_dtype == TY_DTYPE_F64) {
      ((double *)p->weights)[i] *= scale;
    } else {
      ((float *)p->weights)[i] = (float)(((float *)p->weights)[i] * scale);
    }
  }
  t->progress->tokens_seen += (int64_t)counted_total;
  double loss = 0;
  ty_status_t s = TY_OK;
  p->pending_count = 0;
  for (size_t i = 0; i < p->action_count && !s; ++i) s = ty_pp_act(t, p->actions[i], &loss);
  if (!s && p->p2p) s = ty_pp_p2p_flush(t);
  /* After a failure the run ends (MPI_Abort): sends in flight stay so. */
  double t0 = ty_pp_now();
  for (size_t i = 0; i < p->pending_count && !s; ++i) {
    s = ty_dist_send_wait(t->par->dist, p->pending[i]);
    p->pending[i] = NULL;
  }
  if (!s) p->pending_count = 0;
  p->idle_seconds += ty_pp_now() - t0;
  double norm_sq = 0;
  if (!s) s = ty_pp_reduce(t, &norm_sq);
  const float sq = (float)norm_sq;
  for (int j = 0; j < p->v && !s; ++j) {
    ty_pp_chunk_t *ch = &p->chunk[j];
    /* ZeRO-2: no optimizer graph where this rank owns none of the chunk */
    if (ch->s_opt) s = t->bind_hparams(t->run, ch->s_opt, t->progress->step);
    /* clipped by the norm over every stage */
    if (!s && ch->s_opt) {
      s = ty_session_bind(ch->s_opt, "grad_norm_sq", TY_DTYPE_F32, 0, NULL, &sq, sizeof(sq));
    }
    if (!s && ch->s_opt) s = ty_session_run(ch->s_opt);
    /* ZeRO-1: each replica updated its share; the others get it from it */
    if (!s && ch->owner) {
      s = t->zero_broadcast(t->run, ch->s_bwd, ch->g_bwd, &ch->m_bwd, ch->owner);
    }
  }
  const double norm = sqrt(norm_sq);
  p->step_seconds += ty_pp_now() - started;
  *out_loss = loss;
  *out_norm = norm;
  return s;
}

ty_status_t ty_trainer_pp_report(ty_pp_runner_t *t) {
  if (t->par->pp <= 1) return TY_OK;
  struct ty_trainer_pp_t *p = t->par->pipe;
  double *v = calloc((size_t)(2 * t->par->world + 2), sizeof(double));
  if (!v) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  v[2 * t->par->rank] = p->idle_seconds;
  v[2 * t->par->rank + 1] = p->step_seconds;
  v[2 * t->par->world] = (double)p->device_bytes;
  v[2 * t->par->world + 1] = (double)p->host_bytes;
  ty_status_t s = ty_dist_all_reduce_sum(
      t->par->dist, TY_DTYPE_F64, v, (size_t)(2 * t->par->world + 2), "the pipeline's idle times");
  if (!s && t->par->rank == 0) {
    /* sends and receives of every rank: each byte counted at both ends */
    char device[32], host[32];
    ty_format_bytes((uint64_t)(v[2 * t->par->world] / 2), device, sizeof(device));
    ty_format_bytes((uint64_t)(v[2 * t->par->world + 1] / 2), host, sizeof(host));
    fprintf(stderr, "pipeline activations and gradients: %s between the devices on the pp "
                    "communicator, %s through host memory\n", device, host);
  }
  if (!s && t->par->rank == 0) {
    fprintf(stderr, "pipeline bubble: ideal %.1f%% ((pp - 1) / (v x micro-batches + pp - 1) = "
                    "%d / %lld); measured idle (waiting for other stages) per stage:",
            100.0 * ty_pp_ideal_bubble(t->par->pp, p->v, (int)t->shape->accum), t->par->pp - 1,
            (long long)(p->v * t->shape->accum + t->par->pp - 1));
    const ty_dist_layout_t *l = ty_dist_layout(t->par->dist);
    for (int stage = 0; stage < t->par->pp; ++stage) {
      double idle = 0, all = 0; /* over the stage's replicas, cp and tp ranks */
      for (int d = 0; d < t->par->dp; ++d) {
        for (int k = 0; k < t->par->cp; ++k) {
          for (int i = 0; i < t->par->tp; ++i) {
            const int r = ty_dist_layout_rank_cp(l, d, stage, k, i);
            idle += v[2 * r];
            all += v[2 * r + 1];
          }
        }
      }
      fprintf(stderr, " stage %d %.1f%%", stage, all > 0 ? 100.0 * idle / all : 0.0);
    }
    fprintf(stderr, "\n");
  }
  free(v);
  return s;
}

void ty_trainer_pp_destroy(ty_pp_runner_t *t) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  if (!p) return;
  ty_pp_p2p_close(t);
  for (int j = 0; p->chunk && j < p->v; ++j) ty_pp_chunk_deinit(&p->chunk[j]);
  free(p->chunk);
  free(p->first_unit);
  free(p->actions);
  free(p->buffer);
  free(p->pending);
  free(p->tokens);
  free(p->targets);
  free(p->weights);
  free(p);
  t->par->pipe = NULL;
}
