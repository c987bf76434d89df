/* Pipeline parallel training (trainer_pp.h; docs/design-notes.md "Pipeline
 * parallel"). World = dp x pp x tp in the layout of distributed/dist.h (rank =
 * dp (pp tp) + pp tp + tp index): a rank is stage pp_index of replica
 * dp_index, and with --tp holds its tp index's part of that stage.
 * Each rank holds v chunks of the model (global chunk j * pp + stage); the
 * schedule (pp_schedule.c) orders their forwards and backwards over the
 * micro-batches; activations go forward and their gradients back through
 * MPI point to point, from the session's outputs to the next session's
 * inputs. Sends never block (each is a copy in flight until the step's
 * end), receives do: the schedule test proves that order cannot deadlock. */
#include "trainer_pp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distributed/dist.h"
#include "graph/runtime/preflight.h"
#include "hal/file.h"
#include "models/presets.h"
#include "graph/ir/train_step.h"
#include "hal/dtype.h"
#include "pp_internal.h"
#include "train/train_graph.h"

ty_status_t ty_trainer_pp_layout(ty_pp_runner_t *t) {
  const ty_train_config_t *c = t->cfg;
  t->par->pp = (int)c->pp;
  t->par->pp_rank = 0;
  /* without --pp, dp and dp_rank are the layout's (ty_trainer_tp_open) */
  if (c->pp <= 1) return TY_OK;
  const int tp = c->tp > 1 ? (int)c->tp : 1, cp = c->cp > 1 ? (int)c->cp : 1;
  const int replica = (int)c->pp * tp * cp; /* the ranks of one replica */
  if (t->par->world == 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp %lld splits the model over %lld ranks and this run is one "
                          "process: start it with mpirun -np %d (or a multiple for data "
                          "parallel on top)",
                          (long long)c->pp, (long long)c->pp * tp, replica);
  }
  if (t->par->world % replica != 0) {
    if (cp > 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--tp %d x --pp %lld x --cp %d = %d ranks a replica, which does not "
                            "divide the world of %d ranks: world = data parallel x --pp x --cp x "
                            "--tp, so run %d x N ranks",
                            tp, (long long)c->pp, cp, replica, t->par->world, replica);
    }
    if (tp > 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--tp %d x --pp %lld = %lld ranks a replica, which does not divide "
                            "the world of %d ranks: world = data parallel x --pp x --tp, so run "
                            "%lld x N ranks",
                            tp, (long long)c->pp, (long long)c->pp * tp, t->par->world,
                            (long long)c->pp * tp);
    }
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp %lld does not divide the world of %d ranks: world = data "
                          "parallel x --pp, so run %lld x N ranks",
                          (long long)c->pp, t->par->world, (long long)c->pp);
  }
  /* The layout and its groups (distributed/dist.h): rank = ((dp pp + pp
   * index) cp + cp index) tp + tp index. The stages' tp ops reduce over
   * "tp", their attention gathers over "cp", the gradients over "dp" (with
   * --cp "dp_cp": every rank holding the same weights); a stage's peers are
   * the ranks of its "pp" group (one dp, cp and tp index). */
  TY_RETURN_IF_ERROR(ty_dist_set_layout_cp(t->par->dist, tp, (int)c->pp, cp));
  const ty_dist_layout_t *l = ty_dist_layout(t->par->dist);
  t->par->tp = l->tp;
  t->par->dp = l->dp;
  t->par->cp = l->cp;
  t->par->pp_rank = l->pp_index;
  t->par->dp_rank = l->dp_index;
  t->par->cp_rank = l->cp_index;
  t->cfg->tp_rank = l->tp_index;
  t->cfg->cp_rank = l->cp_index;
  if (c->zero && t->par->dp * t->par->cp == 1) {
    char more[48] = "";
    size_t used = 0;
    if (tp > 1) used += (size_t)snprintf(more + used, sizeof(more) - used, " x --tp %d", tp);
    if (cp > 1) snprintf(more + used, sizeof(more) - used, " x --cp %d", cp);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "--zero 1 shards the optimizer state over the data-parallel "
                          "replicas, and --pp %lld%s on %d ranks makes one replica (dp 1): "
                          "start it with mpirun -np %d (2 replicas) or more, or drop --zero",
                          (long long)c->pp, more, t->par->world, 2 * t->par->world);
  }
  return TY_OK;
}

/* Rank 0 prints each stage's memory plan (replica 0's ranks). */
static ty_status_t ty_pp_print_memory(ty_pp_runner_t *t) {
  const size_t items = TY_PLAN_ITEM_COUNT;
  uint64_t *all = malloc((size_t)t->par->pp * items * sizeof(uint64_t));
  if (!all) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  memcpy(all, t->par->pipe->plan_bytes, items * sizeof(uint64_t));
  ty_status_t s = TY_OK;
  const ty_dist_layout_t *l = ty_dist_layout(t->par->dist);
  for (int r = 1; r < t->par->pp && !s; ++r) {
    s = ty_dist_recv(t->par->dist, ty_dist_layout_rank(l, 0, r, 0), 3, all + (size_t)r * items,
                     items * sizeof(uint64_t), "its memory plan");
  }
  for (int r = 0; r < t->par->pp && !s; ++r) {
    char line[512];
    size_t used = 0;
    uint64_t peak = 0;
    for (size_t i = 0; i < items; ++i) peak += all[(size_t)r * items + i];
    char size[32];
    ty_format_bytes(peak, size, sizeof(size));
    used += (size_t)snprintf(line, sizeof(line), "  stage %d memory plan: peak %s (", r, size);
    static const ty_plan_item_t shown[] = {TY_PLAN_PARAMETERS, TY_PLAN_GRADIENTS,
                                           TY_PLAN_OPTIMIZER, TY_PLAN_ACTIVATIONS};
    for (size_t k = 0; k < 4 && used < sizeof(line); ++k) {
      ty_format_bytes(all[(size_t)r * items + shown[k]], size, sizeof(size));
      used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s %s", k ? ", " : "",
                               ty_plan_item_name(shown[k]), size);
    }
    fprintf(stderr, "%s)%s%s\n", line, t->par->tp > 1 ? " (tp rank 0's part)" : "",
            r == 0 ? "; rank 0 also holds the whole model" : "");
  }
  free(all);
  return s;
}

ty_status_t ty_trainer_pp_describe(ty_pp_runner_t *t) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  char label[128];
  snprintf(label, sizeof(label), "%s", ty_device_label(*t->device));
  if (t->par->rank != 0) {
    ty_dist_send_t *send = NULL, *plan = NULL;
    TY_RETURN_IF_ERROR(ty_dist_send_start(t->par->dist, 0, 1, label, sizeof(label),
                                          "its device name", &send));
    ty_status_t s = TY_OK;
    /* replica 0's tp and cp rank 0 of each stage */
    if (t->par->dp_rank == 0 && t->cfg->tp_rank == 0 && t->par->cp_rank == 0) {
      s = ty_dist_send_start(t->par->dist, 0, 3, t->par->pipe->plan_bytes,
                             sizeof(t->par->pipe->plan_bytes), "its memory plan", &plan);
    }
    ty_status_t w = ty_dist_send_wait(t->par->dist, send);
    if (!s) s = w;
    else ty_status_free(w);
    w = ty_dist_send_wait(t->par->dist, plan);
    if (!s) s = w;
    else ty_status_free(w);
    return s;
  }
  const int units = ty_llm_unit_count(t->model_config);
  int64_t *costs = calloc((size_t)units, sizeof(int64_t));
  if (!costs) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = ty_llm_unit_costs(t->model_config, costs);
  fprintf(stderr, "pipeline parallel: %d stages x %d chunk%s (%s), %lld micro-batches "
                  "(--grad-accum); partition by parameters (units: embedding, layers 0..%d, "
                  "norm + head + loss):\n",
          t->par->pp, p->v, p->v > 1 ? "s" : "", p->kind == TY_PP_1F1B ? "1f1b" : "interleaved",
          (long long)t->shape->accum, units - 3);
  for (int c = 0; !s && c < p->chunks; ++c) {
    int64_t cost = 0;
    for (int u = p->first_unit[c]; u < p->first_unit[c + 1]; ++u) cost += costs[u];
    int a = p->first_unit[c], b = p->first_unit[c + 1]; /* units [a, b) */
    int l0 = a > 0 ? a - 1 : 0, l1 = b - 1 < units - 2 ? b - 1 : units - 2;
    char what[128] = "";
    size_t used = 0;
    if (a == 0) used += (size_t)snprintf(what + used, sizeof(what) - used, "embedding");
    if (l1 - l0 == 1) {
      used += (size_t)snprintf(what + used, sizeof(what) - used, "%slayer %d", used ? ", " : "",
                               l0);
    } else if (l1 - l0 > 1) {
      used += (size_t)snprintf(what + used, sizeof(what) - used, "%slayers %d..%d",
                               used ? ", " : "", l0, l1 - 1);
    }
    if (b == units) {
      snprintf(what + used, sizeof(what) - used, "%snorm + head + loss", used ? ", " : "");
    }
    fprintf(stderr, "  chunk %d on stage %d: %s (cost %lld)\n", c, c % t->par->pp, what,
            (long long)cost);
  }
  free(costs);
  fprintf(stderr, "rank layout (world %d = dp %d x pp %d x tp %d x cp %d):\n", t->par->world,
          t->par->dp, t->par->pp, t->par->tp, t->par->cp);
  for (int r = 0; r < t->par->world && !s; ++r) {
    char other[128];
    if (r) s = ty_dist_recv(t->par->dist, r, 1, other, sizeof(other), "its device name");
    ty_dist_layout_t l;
    if (!s) s = ty_dist_layout_make_cp(t->par->world, r, t->par->tp, t->par->pp, t->par->cp, &l);
    if (!s) {
      other[sizeof(other) - 1] = '\0';
      char cp_text[24] = "";
      if (t->par->cp > 1) snprintf(cp_text, sizeof(cp_text), ", cp %d", l.cp_index);
      fprintf(stderr, "  rank %d: dp %d, pp %d, tp %d%s, device %s\n", r, l.dp_index,
              l.pp_index, l.tp_index, cp_text, r ? other : label);
    }
  }
  if (!s) s = ty_pp_print_memory(t);
  if (!s && p->p2p) {
    fprintf(stderr, "  activations and gradients between stages: on the devices' pp "
                    "communicator (%s's point to point, ABI 1.8), device to device with no "
                    "host copy, tp rank i of a stage to tp rank i of the next; each rank's "
                    "sends batched with its receives by the plan of every stage's schedule "
                    "(TRAINYARD_PP_P2P=host: through host memory)\n",
            ty_backend_name(ty_device_backend(*t->device)));
  }
  if (!s) {
    if (!p->p2p) {
      /* "MPI point to point", or "point to point over the Trainyard TCP
       * transport (...)" for a launch without MPI. */
      const char *over = ty_dist_transport(t->par->dist);
      const bool mpi = !strcmp(over, "MPI");
      fprintf(stderr, "  activations and gradients between stages: %spoint to point%s%s "
                    "through host memory, tp rank i of a stage to tp rank i of the next (%s; "
                    "--dist-timeout %g s)\n",
              mpi ? "MPI " : "", mpi ? "" : " over ", mpi ? "" : over,
              ty_dist_library(t->par->dist), ty_dist_timeout(t->par->dist));
    }
    const bool tied = t->model_config->tie_word_embeddings;
    fprintf(stderr, "  gradient sums before each optimizer step: %s%s, by all_reduce ops in "
                    "each chunk's %s %s; the global norm from every rank's share\n",
            t->par->cp > 1   ? "over the dp replicas x their cp ranks (dp_cp)"
            : t->par->dp > 1 ? "over the dp replicas"
                             : "none over replicas (dp 1)",
            tied ? ", the tied embedding over its first and last stage" : "",
            t->cfg->zero != 2 ? "reduce graph"
            : tied ? "backward graph as each gradient completes (ZeRO-2; the tied embedding's "
                     "two copies in its reduce graph)"
                   : "backward graph as each gradient completes (ZeRO-2)",
            t->par->comm || t->par->grad_comm || t->par->embed_comm
                ? "on the devices' dp/dp_cp/embed communicators (ABI 1.7)"
                : "through the host's collectives");
    if (t->cfg->zero && t->par->cp > 1) {
      fprintf(stderr, "  ZeRO-%d over the %d shares of dp %d x cp %d (every rank of a stage "
                      "that holds the same weights): each chunk's parameters shared among "
                      "them by size (a tied embedding's two copies in one share), each share's "
                      "optimizer updating and keeping state%s for it, the updated parameters "
                      "broadcast from their owners over dp x cp after each chunk's optimizer "
                      "step %s\n",
              (int)t->cfg->zero, ty_par_zero_shares(t->par), t->par->dp, t->par->cp,
              t->cfg->zero == 2 ? " and gradient sums" : "",
              t->par->grad_comm ? "on the devices' dp_cp communicators"
                                : "through the host's collectives");
    } else if (t->cfg->zero) {
      fprintf(stderr, "  ZeRO-%d over the %d dp replicas: each chunk's parameters shared among "
                      "them by size (a tied embedding's two copies on one replica), each "
                      "replica's optimizer updating and keeping state%s for its share, the "
                      "updated parameters broadcast from their owners after each chunk's "
                      "optimizer step %s\n",
              (int)t->cfg->zero, t->par->dp, t->cfg->zero == 2 ? " and gradient sums" : "",
              t->par->comm ? "on the devices' dp communicators" : "through the host's "
                                                                    "collectives");
    }
    if (t->par->cp > 1) {
      fprintf(stderr, "  context parallel inside each stage: each sequence in %d chunks over "
                      "its %d cp ranks (rank r: chunks r and %d-r), keys and values gathered "
                      "over their group per layer %s\n",
              2 * t->par->cp, t->par->cp, 2 * t->par->cp - 1,
              t->par->cp_comm ? "on the devices' cp communicators (ABI 1.11)"
                              : "through host memory");
    }
    if (t->par->tp > 1) {
      fprintf(stderr, "  tensor parallel inside each stage: attention heads and MLP columns "
                      "split over its %d tp ranks, reduced over their group %s\n",
              t->par->tp, t->par->tp_comm ? "on the devices' tp communicators (ABI 1.7)"
                                : "through host memory");
    }
  }
  return s;
}

/* This rank's stages against --memory-limit (or the device's memory)
 * before any session allocates: the chunks' plans added (their states are
 * disjoint; the largest node scratch counts once). */
static ty_status_t ty_pp_check_memory(ty_pp_runner_t *t) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  ty_preflight_t all;
  ty_preflight_init(&all);
  for (int j = 0; j < p->v; ++j) {
    const ty_preflight_t *one = &p->chunk[j].plan;
    for (int i = 0; i < TY_PLAN_ITEM_COUNT; ++i) {
      if (i == TY_PLAN_WORKSPACE) {
        if (one->bytes[i] > all.bytes[i]) all.bytes[i] = one->bytes[i];
      } else {
        all.bytes[i] += one->bytes[i];
      }
    }
  }
  for (int i = 0; i < TY_PLAN_ITEM_COUNT; ++i) all.peak += all.bytes[i];
  memcpy(p->plan_bytes, all.bytes, sizeof(p->plan_bytes));
  uint64_t limit = 0;
  ty_status_t s = ty_train_config_memory_limit(t->cfg, &limit);
  char what[160];
  if (limit) {
    snprintf(what, sizeof(what), "--memory-limit %s (pipeline stage %d)", t->cfg->memory_limit,
             t->par->pp_rank);
  } else {
    limit = ty_device_info(*t->device)->memory_bytes;
    snprintf(what, sizeof(what), "the memory of %s (pipeline stage %d)",
             ty_device_label(*t->device), t->par->pp_rank);
  }
  if (!s) s = ty_preflight_check(&all, limit, what);
  ty_preflight_deinit(&all);
  return s;
}

ty_status_t ty_trainer_pp_build(ty_pp_runner_t *t) {
  const ty_train_config_t *c = t->cfg;
  const ty_model_config_t *mc = t->model_config;
  struct ty_trainer_pp_t *p = calloc(1, sizeof(*p));
  if (!p) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  t->par->pipe = p;
  TY_RETURN_IF_ERROR(ty_pp_kind_parse(c->pp_schedule, &p->kind));
  p->v = p->kind == TY_PP_1F1B ? 1 : (c->pp_virtual > 0 ? (int)c->pp_virtual : 2);
  p->chunks = t->par->pp * p->v;
  const int units = ty_llm_unit_count(mc);
  if (ty_device_info(*t->device)->whole_graphs_only) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp %d: --backend %s runs whole train steps only, and pipeline "
                          "parallel runs each stage's forward, backward and optimizer as graphs "
                          "of their own; use a backend that runs any graph (cpu)",
                          t->par->pp, c->backend);
  }
  if (t->par->pp > mc->num_layers) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp %d: the model has %lld layers, fewer than the stages (each stage "
                          "needs a layer); use --pp %lld or less",
                          t->par->pp, (long long)mc->num_layers, (long long)mc->num_layers);
  }
  if (p->chunks > units) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp %d x --pp-virtual %d = %d chunks, and the model has %d units "
                          "to give them (the embedding, %lld layers, the head): lower "
                          "--pp-virtual",
                          t->par->pp, p->v, p->chunks, units, (long long)mc->num_layers);
  }
  if (p->kind == TY_PP_INTERLEAVED && t->shape->accum % t->par->pp != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp-schedule interleaved runs the micro-batches in groups of --pp: "
                          "--grad-accum %lld is not a multiple of --pp %d",
                          (long long)t->shape->accum, t->par->pp);
  }
  int64_t *costs = calloc((size_t)units, sizeof(int64_t));
  p->first_unit = calloc((size_t)p->chunks + 1, sizeof(int));
  p->chunk = calloc((size_t)p->v, sizeof(ty_pp_chunk_t));
  /* a micro-batch's rows hold this rank's Tl tokens each (T / cp) */
  size_t bt = (size_t)(t->shape->accum * t->shape->B * t->shape->Tl);
  p->tokens = malloc(bt * sizeof(int64_t));
  p->targets = malloc(bt * sizeof(int64_t));
  p->weights = malloc(bt * sizeof(double));
  p->pending = calloc((size_t)(2 * p->v * t->shape->accum + 1), sizeof(*p->pending));
  p->buffer = malloc((size_t)(t->shape->B * t->shape->Tl * mc->hidden_size) *
                     ty_dtype_size(t->shape->dtype));
  if (!costs || !p->first_unit || !p->chunk || !p->tokens || !p->targets || !p->weights ||
      !p->pending || !p->buffer) {
    free(costs);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  ty_status_t s = ty_llm_unit_costs(mc, costs);
  if (!s) s = ty_pp_partition(costs, units, p->chunks, p->first_unit);
  free(costs);
  if (!s) {
    s = ty_pp_schedule(p->kind, t->par->pp_rank, t->par->pp, p->v, (int)t->shape->accum,
                       &p->actions, &p->action_count);
  }
  const ty_pp_reduce_layout_t reduce = {.dp = t->par->dp,
                                        .pp = t->par->pp,
                                        .cp = t->par->cp,
                                        .tp_rank = (int)c->tp_rank,
                                        .tied = mc->tie_word_embeddings,
                                        .zero = c->zero != 0,
                                        .zero_grads = c->zero == 2,
                                        .dp_rank = t->par->dp_rank,
                                        .shares = ty_par_zero_shares(t->par),
                                        .share = ty_par_zero_share(t->par)};
  ty_train_recipe_t recipe;
  if (!s) s = ty_train_config_recipe(c, &recipe);
  for (int j = 0; j < p->v && !s; ++j) {
    ty_pp_chunk_t *ch = &p->chunk[j];
    ch->global = j * t->par->pp + t->par->pp_rank;
    ch->unit_begin = p->first_unit[ch->global];
    ch->unit_end = p->first_unit[ch->global + 1];
    ch->first = ch->global == 0;
    ch->last = ch->global == p->chunks - 1;
    s = ty_pp_chunk_graphs(&recipe, mc, t->shape->B, t->shape->Tl, t->shape->dtype,
                           t->shape->accum, &reduce, ch);
    if (!s && ch->last)
      t->shape->loss_dtype = ty_graph_value(ch->g_bwd, ch->m_bwd.loss)->desc.dtype;
  }
  if (!s) s = ty_pp_check_memory(t);
  if (s || t->cfg->plan_only) return s; /* --plan-only: no session */
  /* each chunk's gradient sums, and with tensor parallel each stage's tp
   * ops, reduce over their groups */
  ty_host_comm_t *comm = NULL;
  if (t->par->world > 1) {
    ty_dist_host_comm(t->par->dist, &t->par->host_comm);
    comm = &t->par->host_comm;
  }
  for (int j = 0; j < p->v && !s; ++j) {
    s = ty_pp_chunk_sessions(c, *t->device, comm, &p->chunk[j]);
  }
  if (!s) s = ty_pp_p2p_open(t);
  /* The full model on rank 0: evaluation, samples and checkpoints run on
   * it as in a run of one process, after ty_trainer_pp_gather. It is whole
   * under --tp too (built as tp 1): the stages' parts are cut from it and
   * put back into it (ty_pp_move); under --cp (built as cp 1) its rows
   * are whole, as the evaluation runs them; and under --zero 1 (built
   * without): it holds every optimizer state, each from its owner replica. */
  if (!s && t->par->rank == 0) {
    const int tp = t->par->tp;
    const int64_t cfg_tp = t->cfg->tp, cfg_tp_rank = t->cfg->tp_rank, zero = t->cfg->zero,
                  cfg_cp = t->cfg->cp, cfg_cp_rank = t->cfg->cp_rank, Tl = t->shape->Tl;
    t->par->tp = 1;
    t->cfg->tp = 1;
    t->cfg->tp_rank = 0;
    t->cfg->cp = 1;
    t->cfg->cp_rank = 0;
    t->shape->Tl = t->shape->T;
    t->cfg->zero = 0;
    s = t->build_mirror(t->run);
    t->par->tp = tp;
    t->cfg->tp = cfg_tp;
    t->cfg->tp_rank = cfg_tp_rank;
    t->cfg->cp = cfg_cp;
    t->cfg->cp_rank = cfg_cp_rank;
    t->shape->Tl = Tl;
    t->cfg->zero = zero;
  }
  return s;
}

/* The tensors of global chunk `c`, in rank 0's mirror (all of them) or in
 * this rank's own chunk. */
static ty_status_t ty_pp_chunk_tensors(ty_pp_runner_t *t, int c, bool mirror, bool optimizer,
                                       ty_pp_tensor_t **out, size_t *n, size_t *bytes) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  ty_train_step_params_t step;
  ty_train_recipe_t recipe;
  TY_RETURN_IF_ERROR(ty_train_config_recipe(t->cfg, &recipe));
  TY_RETURN_IF_ERROR(ty_train_graph_step_options(&recipe, &step));
  const char *const *kinds = ty_optimizer_state_kinds(step.optimizer);
  if (mirror) {
    return ty_pp_tensors(t->model_config, p->first_unit[c], p->first_unit[c + 1],
                         t->graphs->m_train.params, t->graphs->m_train.param_count,
                         t->graphs->s_train, t->graphs->s_opt, kinds, optimizer, out, n, bytes);
  }
  const ty_pp_chunk_t *ch = &p->chunk[c / t->par->pp];
  return ty_pp_tensors(t->model_config, ch->unit_begin, ch->unit_end, ch->m_bwd.params,
                       ch->m_bwd.param_count, ch->s_bwd, ch->s_opt, kinds, optimizer, out, n,
                       bytes);
}

/* ZeRO-1's table of chunk `c` over the mirror's parameters (-1: not in
 * the chunk), as the chunk's stages computed theirs: sizes of a tp part. */
static ty_status_t ty_pp_mirror_owners(ty_pp_runner_t *t, int c, int **out) {
  const uint32_t n = t->graphs->m_train.param_count;
  int64_t *elements = calloc(n + 1, sizeof(int64_t));
  *out = calloc(n + 1, sizeof(int));
  if (!elements || !*out) {
    free(elements);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < n; ++i) {
    ty_llm_param_t part = t->graphs->m_train.params[i];
    ty_llm_tp_shard(t->model_config, t->par->tp, &part);
    elements[i] = ty_llm_param_part_count(&part);
  }
  ty_status_t s = ty_pp_zero_owners(t->model_config, t->par->pipe->first_unit[c],
                                    t->par->pipe->first_unit[c + 1], t->graphs->m_train.params,
                                    elements, n, ty_par_zero_shares(t->par), *out);
  free(elements);
  return s;
}

/* Keeps the optimizer states in `list` whose parameter replica `replica`
 * owns (owner: by the tensors' index). */
static void ty_pp_keep_states_of(ty_pp_tensor_t *list, size_t *n, size_t *bytes,
                                 const int *owner, int replica) {
  size_t kept = 0;
  *bytes = 0;
  for (size_t i = 0; i < *n; ++i) {
    if (!list[i].state || owner[list[i].index] != replica) continue;
    list[kept++] = list[i];
    *bytes += list[i].bytes;
  }
  *n = kept;
}

/* Moves chunk `c` of replica `replica` between rank 0's mirror (whole
 * tensors) and its owners, the tp ranks of the stage at cp index `cpi`
 * (each its part): to_stage (scatter) or back (gather). `states_of` >= 0
 * (ZeRO-1, with `optimizer`): only the optimizer states that replica owns
 * (it has no others); -1: the parameters, and with `optimizer` all their
 * states. The cp ranks of a replica hold the same weights and states: a
 * scatter goes to each, a gather takes cp index 0's. */
static ty_status_t ty_pp_move(ty_pp_runner_t *t, int c, int replica, int cpi, bool to_stage,
                              bool optimizer, int states_of) {
  const ty_dist_layout_t *l = ty_dist_layout(t->par->dist);
  int my_index = -1;
  for (int i = 0; i < t->par->tp; ++i) {
    if (ty_dist_layout_rank_cp(l, replica, c % t->par->pp, cpi, i) == t->par->rank) my_index = i;
  }
  if (t->par->rank != 0 && my_index < 0) return TY_OK;
  ty_pp_tensor_t *mine = NULL, *theirs = NULL;
  size_t n = 0, bytes = 0, n0 = 0, bytes0 = 0, part_bytes = 0;
  char *whole = NULL, *part = NULL;
  ty_status_t s = TY_OK;
  if (my_index >= 0) s = ty_pp_chunk_tensors(t, c, false, optimizer, &mine, &n, &bytes);
  if (!s && t->par->rank == 0)
    s = ty_pp_chunk_tensors(t, c, true, optimizer, &theirs, &n0, &bytes0);
  if (!s && states_of >= 0) {
    int *owner = NULL;
    if (my_index >= 0) {
      ty_pp_keep_states_of(mine, &n, &bytes, t->par->pipe->chunk[c / t->par->pp].owner, states_of);
    }
    if (t->par->rank == 0) s = ty_pp_mirror_owners(t, c, &owner);
    if (!s && t->par->rank == 0) ty_pp_keep_states_of(theirs, &n0, &bytes0, owner, states_of);
    free(owner);
  }
  if (!s && t->par->rank == 0) {
    s = ty_pp_tensors_split(t->model_config, theirs, n0, t->par->tp, 0, NULL, NULL, false,
                            &part_bytes);
  }
  if (!s && t->par->rank == 0 && my_index >= 0 && bytes != part_bytes) {
    s = ty_status_make(TY_CODE_INTERNAL, "pipeline chunk %d: %zu bytes here, %zu in the model",
                       c, bytes, part_bytes);
  }
  const size_t size = t->par->rank == 0 ? part_bytes : bytes;
  if (!s) {
    part = malloc(size ? size : 1);
    if (t->par->rank == 0) whole = malloc(bytes0 ? bytes0 : 1);
    if (!part || (t->par->rank == 0 && !whole)) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  char what[128];
  const int tag = 2;
  if (!s && to_stage && t->par->rank == 0) s = ty_pp_tensors_read(theirs, n0, whole);
  /* Gathered from the last tp index down: a replicated tensor (the same on
   * every tp rank) keeps tp rank 0's copy. */
  for (int k = 0; k < t->par->tp && !s; ++k) {
    const int i = to_stage ? k : t->par->tp - 1 - k;
    const int owner = ty_dist_layout_rank_cp(l, replica, c % t->par->pp, cpi, i);
    if (t->par->rank != 0 && t->par->rank != owner) continue;
    snprintf(what, sizeof(what), "the %s of pipeline chunk %d (tp rank %d, cp rank %d)",
             optimizer ? "state" : "weights", c, i, cpi);
    if (to_stage) {
      if (t->par->rank == 0) {
        s = ty_pp_tensors_split(t->model_config, theirs, n0, t->par->tp, i, whole, part, false,
                                &part_bytes);
      }
      if (!s && owner != 0) {
        if (t->par->rank == 0) {
          ty_dist_send_t *send = NULL;
          s = ty_dist_send_start(t->par->dist, owner, tag, part, size, what, &send);
          if (!s) s = ty_dist_send_wait(t->par->dist, send);
        } else {
          s = ty_dist_recv(t->par->dist, 0, tag, part, size, what);
        }
      }
      if (!s && t->par->rank == owner) s = ty_pp_tensors_bind(mine, n, part);
    } else {
      if (t->par->rank == owner) s = ty_pp_tensors_read(mine, n, part);
      if (!s && owner != 0) {
        if (t->par->rank == owner) {
          ty_dist_send_t *send = NULL;
          s = ty_dist_send_start(t->par->dist, 0, tag, part, size, what, &send);
          if (!s) s = ty_dist_send_wait(t->par->dist, send);
        } else {
          s = ty_dist_recv(t->par->dist, owner, tag, part, size, what);
        }
      }
      if (!s && t->par->rank == 0) {
        s = ty_pp_tensors_split(t->model_config, theirs, n0, t->par->tp, i, whole, part, true,
                                &part_bytes);
      }
    }
  }
  if (!s && !to_stage && t->par->rank == 0) s = ty_pp_tensors_bind(theirs, n0, whole);
  free(part);
  free(whole);
  free(mine);
  free(theirs);
  return s;
}

/* ZeRO-1 (pp_stage.h ty_pp_zero_owners): the parameters move with replica
 * 0 (every replica holds them all, the same), each optimizer state with the
 * replica that owns it (the others have none). */
ty_status_t ty_trainer_pp_scatter(ty_pp_runner_t *t, bool optimizer) {
  if (t->par->pp <= 1) return TY_OK;
  const bool shares = t->cfg->zero && optimizer;
  ty_status_t s = TY_OK;
  for (int d = 0; d < t->par->dp && !s; ++d) {
    for (int k = 0; k < t->par->cp && !s; ++k) {
      for (int c = 0; c < t->par->pipe->chunks && !s; ++c) {
        s = ty_pp_move(t, c, d, k, true, optimizer && !shares, -1);
        /* the states of the share of (d, k) (ty_par_zero_share) */
        if (!s && shares) s = ty_pp_move(t, c, d, k, true, true, d * t->par->cp + k);
      }
    }
  }
  return s;
}

ty_status_t ty_trainer_pp_init(ty_pp_runner_t *t) {
  if (t->par->pp <= 1) return TY_OK;
  for (int j = 0; j < t->par->pipe->v; ++j) {
    ty_pp_chunk_t *ch = &t->par->pipe->chunk[j];
    TY_RETURN_IF_ERROR(ty_llm_init_weights(&ch->m_bwd, ch->s_bwd, t->cfg->seed));
  }
  return TY_OK;
}

ty_status_t ty_trainer_pp_gather(ty_pp_runner_t *t, bool optimizer) {
  if (t->par->pp <= 1) return TY_OK;
  const bool shares = t->cfg->zero && optimizer;
  ty_status_t s = TY_OK;
  for (int c = 0; c < t->par->pipe->chunks && !s; ++c) {
    s = ty_pp_move(t, c, 0, 0, false, optimizer && !shares, -1);
    for (int r = 0; shares && r < ty_par_zero_shares(t->par) && !s; ++r) {
      s = ty_pp_move(t, c, r / t->par->cp, r % t->par->cp, false, true, r);
    }
  }
  return s;
}
