/* `train --check-numerics`: the checked step (trainer_numerics.h). */
#include "trainer_numerics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_numerics.h"
#include "graph/runtime/numerics.h"
#include "hal/dtype.h"
#include "train_graph.h"
#include "train_plan.h"

typedef struct ty_trainer_numerics_t {
  int64_t every;
  ty_graph_t *graph;
  ty_llm_t model;
  ty_session_t *session;
  uint32_t forward_nodes;
  /* the sampled mode's copy: every state of the step, and where the data was */
  uint32_t state_count;
  ty_tensor_desc_t *descs;
  void **data;
  bool have_copy;
  int64_t copy_step, copy_epoch, copy_cursor, copy_tokens;
  double plain_seconds, checked_seconds; /* the latest of each (0: none yet) */
  int64_t checked_steps;
  bool cost_said;
} ty_trainer_numerics_t;

ty_status_t ty_trainer_numerics_open(ty_trainer_t *t) {
  if (!t->cfg.check_numerics[0]) return TY_OK;
  int64_t every = 0;
  TY_RETURN_IF_ERROR(ty_check_numerics_parse(t->cfg.check_numerics, &every));
  /* --deterministic's optimizer graph is its own (the checked step is
   * its gradient graph, of batch 1, as the plain one) */
  if (t->par.world > 1 || t->shape.accum > 1 || (t->graphs.s_opt && !t->cfg.deterministic)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "--check-numerics checks the fused train step of one process: run it "
                          "without mpirun/--tp/--pp and with --grad-accum 1 (the batch of a "
                          "step as --batch-size) to find the first non-finite node");
  }
  ty_trainer_numerics_t *n = calloc(1, sizeof(*n));
  if (!n) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  t->checks.numerics = n;
  n->every = every;
  ty_train_recipe_t recipe;
  TY_RETURN_IF_ERROR(ty_train_config_recipe(&t->cfg, &recipe));
  TY_RETURN_IF_ERROR(ty_train_graph_build(&recipe, &t->model_config, ty_trainer_graph_batch(t),
                                          t->shape.T, t->shape.dtype, TY_TRAIN_GRAPH_STEP,
                                          &n->graph, &n->model));
  n->forward_nodes = ty_graph_value(n->graph, n->model.loss)->producer + 1;
  TY_RETURN_IF_ERROR(ty_graph_expose_all(n->graph));
  ty_session_options_t so = {.cache_dir = t->cfg.cache_dir, .retry_failed = t->cfg.retry_failed,
                             .fallback_device = t->fallback, .share_state_with = t->graphs.s_train,
                             .deterministic = t->cfg.deterministic};
  TY_RETURN_IF_ERROR(ty_session_create(t->device, n->graph, &so, &n->session));
  if (every > 1) {
    for (uint32_t v = 0; v < ty_graph_value_count(t->graphs.g_train); ++v) {
      if (ty_graph_value(t->graphs.g_train, v)->role == TY_VALUE_STATE) n->state_count++;
    }
    n->descs = calloc(n->state_count ? n->state_count : 1, sizeof(*n->descs));
    n->data = calloc(n->state_count ? n->state_count : 1, sizeof(*n->data));
    if (!n->descs || !n->data) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    uint32_t k = 0;
    for (uint32_t v = 0; v < ty_graph_value_count(t->graphs.g_train); ++v) {
      const ty_graph_value_t *val = ty_graph_value(t->graphs.g_train, v);
      if (val->role != TY_VALUE_STATE) continue;
      n->descs[k] = val->desc;
      size_t bytes = (size_t)ty_tensor_desc_element_count(&val->desc) *
                     ty_dtype_size(val->desc.dtype);
      n->data[k] = malloc(bytes ? bytes : 1);
      if (!n->data[k++]) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (t->par.rank == 0) {
    if (every == 1) {
      fprintf(stderr, "trainyard train: check-numerics: every step runs with its %u nodes' "
                      "outputs kept and read back\n",
              ty_graph_node_count(n->graph));
    } else {
      fprintf(stderr,
              "trainyard train: check-numerics: steps 1, %lld, %lld, ... (every %lld) run with "
              "their %u nodes' outputs kept and read back; a non-finite loss between them is "
              "replayed from the last checked step and checked\n",
              (long long)(every + 1), (long long)(2 * every + 1), (long long)every,
              ty_graph_node_count(n->graph));
    }
  }
  return TY_OK;
}

void ty_trainer_numerics_close(ty_trainer_t *t) {
  ty_trainer_numerics_t *n = t->checks.numerics;
  if (!n) return;
  ty_session_destroy(n->session);
  ty_llm_deinit(&n->model);
  ty_graph_destroy(n->graph);
  for (uint32_t k = 0; n->data && k < n->state_count; ++k) free(n->data[k]);
  free(n->data);
  free(n->descs);
  free(n);
  t->checks.numerics = NULL;
}

/* The one line on the cost, at the second checked step (the first one's
 * time holds its session's first run): that step, read-back included,
 * against the latest plain one. */
static void ty_numerics_say_cost(ty_trainer_t *t) {
  ty_trainer_numerics_t *n = t->checks.numerics;
  if (n->cost_said || t->par.rank != 0 || n->checked_steps < 2 || n->checked_seconds <= 0) return;
  if (n->every == 1) {
    fprintf(stderr, "trainyard train: check-numerics: cost: a checked step takes %.3f s (every "
                    "step is checked; =every:N runs plain steps between checked ones)\n",
            n->checked_seconds);
  } else if (n->plain_seconds > 0) {
    fprintf(stderr, "trainyard train: check-numerics: cost: a checked step takes %.3f s (its "
                    "read-back and its copy of the state included), a plain one %.3f s "
                    "(%.1fx)\n",
            n->checked_seconds, n->plain_seconds, n->checked_seconds / n->plain_seconds);
  } else {
    return;
  }
  n->cost_said = true;
}

static size_t ty_desc_bytes(const ty_tensor_desc_t *d) {
  return (size_t)ty_tensor_desc_element_count(d) * ty_dtype_size(d->dtype);
}

ty_status_t ty_trainer_numerics_begin(ty_trainer_t *t, bool *out_checked) {
  ty_trainer_numerics_t *n = t->checks.numerics;
  *out_checked = n && t->progress.step % n->every == 0;
  t->checks.check_session = *out_checked ? n->session : NULL;
  if (!*out_checked || n->every == 1) return TY_OK;
  for (uint32_t k = 0; k < n->state_count; ++k) {
    TY_RETURN_IF_ERROR(ty_session_read(t->graphs.s_train, n->descs[k].name, n->data[k],
                                       ty_desc_bytes(&n->descs[k])));
  }
  n->have_copy = true;
  n->copy_step = t->progress.step;
  n->copy_epoch = t->progress.epoch;
  n->copy_cursor = t->progress.cursor;
  n->copy_tokens = t->progress.tokens_seen;
  return TY_OK;
}

void ty_trainer_numerics_arm(ty_trainer_t *t, bool on) {
  t->checks.check_session = on && t->checks.numerics ? t->checks.numerics->session : NULL;
}

void ty_trainer_numerics_plain(ty_trainer_t *t, double seconds) {
  if (t->checks.numerics) t->checks.numerics->plain_seconds = seconds;
}

ty_status_t ty_trainer_numerics_after(ty_trainer_t *t, double seconds) {
  ty_trainer_numerics_t *n = t->checks.numerics;
  t->checks.check_session = NULL;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ty_numerics_finding_t f;
  TY_RETURN_IF_ERROR(ty_numerics_find(n->session, n->graph, n->forward_nodes, &f));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (seconds > 0) { /* a replay's step is not timed */
    n->checked_seconds = seconds + (double)(t1.tv_sec - t0.tv_sec) +
                         1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    n->checked_steps++;
    ty_numerics_say_cost(t);
  }
  char when[48];
  snprintf(when, sizeof(when), "step %lld", (long long)t->progress.step + 1);
  if (f.found) {
    ty_check_numerics_print(stderr, "train", &t->model_config, &f, ty_graph_node_count(n->graph),
                            when);
    return ty_check_numerics_status(&t->model_config, &f, when);
  }
  if (t->par.rank == 0 && n->every > 1) {
    fprintf(stderr, "trainyard train: check-numerics: %s checked: all %u nodes finite\n", when,
            ty_graph_node_count(n->graph));
  }
  return TY_OK;
}

ty_status_t ty_trainer_numerics_rewind(ty_trainer_t *t, int64_t *out_replay) {
  ty_trainer_numerics_t *n = t->checks.numerics;
  if (!n->have_copy) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "check-numerics: no checked step to replay from");
  }
  for (uint32_t k = 0; k < n->state_count; ++k) {
    const ty_tensor_desc_t *d = &n->descs[k];
    TY_RETURN_IF_ERROR(
        ty_session_bind(t->graphs.s_train, d->name, d->dtype, d->rank, d->dims, n->data[k],
                        ty_desc_bytes(d)));
  }
  t->progress.step = n->copy_step;
  t->progress.cursor = n->copy_cursor;
  t->progress.tokens_seen = n->copy_tokens;
  if (t->progress.epoch != n->copy_epoch) {
    t->progress.epoch = n->copy_epoch;
    ty_train_plan_row_order(t->cfg.seed, t->progress.epoch,
                            ty_dataset_row_count(t->feed.train_data), t->feed.order);
  }
  *out_replay = n->copy_step + 1;
  return TY_OK;
}
