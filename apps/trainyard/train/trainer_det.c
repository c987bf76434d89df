/* `train --deterministic` (docs/design-notes.md "Reduction orders"): every
 * row of the global batch runs alone through the gradient graph (batch 1)
 * and the rows' gradient sets and losses are summed in one fixed tree
 * (train_tree.h): over this rank's rows in global order, then over the
 * ranks' partials in rank order. The rows' tree runs on the device through
 * small graphs sharing the train session's state (train_tree_dev.h); the
 * host tree (each row's gradients read to the host) is the fallback. The
 * bits of the update are then a function of the global batch only,
 * whatever --batch-size, --grad-accum, the world size or the path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/dist.h"
#include "hal/dtype.h"
#include "train_plan.h"
#include "train_tree.h"
#include "train_tree_dev.h"
#include "trainer.h"

typedef struct ty_trainer_det_t {
  ty_train_tree_dev_t *dev;    /* the rows' tree on the device, or NULL: */
  char host_why[384];          /* ... the host tree, and why */
  ty_train_tree_t rows, ranks; /* this rank's rows (host path); the ranks' partials */
  float *zeros;                /* the largest accumulator's zeros (host path) */
  char *own, *gather;          /* this rank's (partial + its loss); dp of them */
  size_t gather_bytes;         /* one rank's share */
} ty_trainer_det_t;

static bool ty_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

ty_status_t ty_trainer_det_check(const ty_trainer_t *t) {
  if (!t->cfg.deterministic || t->par.dp <= 1) return TY_OK;
  const int64_t n = t->shape.B * t->shape.accum;
  if (ty_power_of_two(n)) return TY_OK;
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "--deterministic on %d ranks: --batch-size %lld x --grad-accum %lld = "
                        "%lld rows per rank, not a power of two; each rank's rows must make a "
                        "whole subtree of the one fixed summation tree (1, 2, 4, 8, ... rows) "
                        "for its partial sum to combine into the one-process bits: choose "
                        "--batch-size and --grad-accum whose product is 1, 2, 4, 8, ...",
                        t->par.dp, (long long)t->shape.B, (long long)t->shape.accum, (long long)n);
}

/* The accumulators' f32 element count and the largest one's. */
static ty_status_t ty_det_layout(const ty_trainer_t *t, size_t *out_total, size_t *out_largest) {
  return ty_trainer_grad_sizes(t, "the deterministic tree", out_total, out_largest);
}

/* The rows' tree on the device, or the reason for the host tree in
 * d->host_why. A device that cannot build the small graphs is no error: the
 * host tree gives the same bits, slower. */
static ty_status_t ty_det_open_device(ty_trainer_t *t, ty_trainer_det_t *d) {
  /* test hook: the host tree, to compare the two paths' bits */
  const char *force = getenv("TRAINYARD_DEBUG_DET_HOST_TREE");
  if (force && force[0] && strcmp(force, "0") != 0) {
    snprintf(d->host_why, sizeof(d->host_why), "TRAINYARD_DEBUG_DET_HOST_TREE is set");
    return TY_OK;
  }
  if (t->fallback) {
    snprintf(d->host_why, sizeof(d->host_why), "a mixed run (fallback=) keeps it on the host");
    return TY_OK;
  }
  const uint32_t n = t->graphs.m_train.param_count;
  const char **names = calloc(n ? n : 1, sizeof(char *));
  if (!names) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n; ++i) names[i] = t->graphs.m_train.params[i].name;
  const ty_train_config_t *c = &t->cfg;
  ty_session_options_t so = {.cache_dir = c->cache_dir, .retry_failed = c->retry_failed,
                             .deterministic = c->deterministic};
  ty_status_t s = ty_train_tree_dev_create(t->device, t->graphs.s_train, &so, names, n,
                                           t->shape.B * t->shape.accum, &d->dev);
  free(names);
  if (s && ty_status_code(s) == TY_CODE_RESOURCE_EXHAUSTED) return s;
  if (s) snprintf(d->host_why, sizeof(d->host_why), "%s", ty_status_message(s));
  ty_status_free(s);
  return TY_OK;
}

static ty_status_t ty_det_open(ty_trainer_t *t) {
  if (t->checks.det) return TY_OK;
  size_t total = 0, largest = 0;
  TY_RETURN_IF_ERROR(ty_det_layout(t, &total, &largest));
  ty_trainer_det_t *d = calloc(1, sizeof(*d));
  if (!d) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  t->checks.det = d;
  ty_train_tree_init(&d->rows, total);
  ty_train_tree_init(&d->ranks, total);
  TY_RETURN_IF_ERROR(ty_det_open_device(t, d));
  if (!d->dev) d->zeros = calloc(largest ? largest : 1, sizeof(float));
  d->gather_bytes = total * sizeof(float) + sizeof(double);
  if (t->par.dp > 1) {
    d->own = malloc(d->gather_bytes);
    d->gather = malloc(d->gather_bytes * (size_t)t->par.dp);
  }
  if ((!d->dev && !d->zeros) || (t->par.dp > 1 && (!d->own || !d->gather))) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "out of host memory for the deterministic gradient sum (%zu floats "
                          "per rank)", total);
  }
  return TY_OK;
}

void ty_trainer_det_close(ty_trainer_t *t) {
  ty_trainer_det_t *d = t->checks.det;
  if (!d) return;
  ty_train_tree_dev_destroy(d->dev);
  ty_train_tree_deinit(&d->rows);
  ty_train_tree_deinit(&d->ranks);
  free(d->zeros);
  free(d->own);
  free(d->gather);
  free(d);
  t->checks.det = NULL;
}

ty_status_t ty_trainer_det_banner(ty_trainer_t *t) {
  TY_RETURN_IF_ERROR(ty_det_open(t)); /* every rank: which tree */
  if (t->par.rank != 0) return TY_OK;
  const ty_trainer_det_t *d = t->checks.det;
  size_t total = 0, largest = 0;
  TY_RETURN_IF_ERROR(ty_det_layout(t, &total, &largest));
  const int64_t per_rank = t->shape.B * t->shape.accum;
  char bytes[32], tree[32], path[640];
  ty_format_bytes((uint64_t)total * 4, bytes, sizeof(bytes));
  if (d->dev) {
    ty_format_bytes(ty_train_tree_dev_bytes(d->dev), tree, sizeof(tree));
    snprintf(path, sizeof(path),
             "gradients (%s a row) summed on the device in one fixed binary-counter tree over "
             "the rows in global order (%s of tree slots, %u small graphs sharing the train "
             "session's state)",
             bytes, tree, ty_train_tree_dev_graphs(d->dev));
  } else {
    snprintf(path, sizeof(path),
             "gradients (%s a row) read to the host after every row and summed in one fixed "
             "binary-counter tree over the rows in global order (the host tree: %s)",
             bytes, d->host_why);
  }
  fprintf(stderr,
          "deterministic: on; %lld rows per step (%lld per rank x %d rank%s), each run alone "
          "(graph batch 1); %s%s, then the optimizer graph; deterministic=1 asks %s for "
          "batch-invariant kernels\n",
          (long long)t->shape.rows_per_step, (long long)per_rank, t->par.dp,
          t->par.dp == 1 ? "" : "s", path,
          t->par.dp > 1 ? ", the ranks' partials gathered over the host transport and folded in "
                          "rank order on every rank (never the backend's or MPI's all-reduce)"
                        : "",
          ty_backend_name(ty_device_backend(t->device)));
  return TY_OK;
}

/* Row `b` of the staged micro-batch as a batch of one. */
static ty_status_t ty_det_bind_row(ty_trainer_t *t, ty_session_t *s, int64_t b) {
  const int64_t T = t->shape.T, dims[2] = {1, T};
  const size_t w = ty_dtype_size(t->shape.loss_dtype);
  TY_RETURN_IF_ERROR(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, dims, t->feed.tokens + b * T,
                                     (size_t)T * 8));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, dims, t->feed.targets + b * T,
                                     (size_t)T * 8));
  return ty_session_bind(s, "loss_weights", t->shape.loss_dtype, 2, dims,
                         (char *)t->feed.weights + (size_t)(b * T) * w, (size_t)T * w);
}

/* The ranks' partials, gathered, folded in rank order (the same bits on
 * every rank). */
static ty_status_t ty_det_over_ranks(ty_trainer_t *t, const float *mine, double mine_loss,
                                     const float **out_sum, double *out_loss) {
  ty_trainer_det_t *d = t->checks.det;
  const size_t floats = d->rows.count * sizeof(float);
  if (mine != (const float *)d->own) memcpy(d->own, mine, floats);
  memcpy(d->own + floats, &mine_loss, sizeof(double));
  char what[96];
  snprintf(what, sizeof(what), "the deterministic gradient gather of step %lld",
           (long long)t->progress.step + 1);
  ty_dist_group_t *dp = NULL;
  TY_RETURN_IF_ERROR(ty_dist_group(t->par.dist, "dp", &dp));
  TY_RETURN_IF_ERROR(ty_dist_group_all_gather(dp, d->own, d->gather_bytes, d->gather, what));
  ty_train_tree_reset(&d->ranks);
  for (int r = 0; r < t->par.dp; ++r) {
    float *slot = NULL;
    double loss = 0;
    const char *from = d->gather + (size_t)r * d->gather_bytes;
    TY_RETURN_IF_ERROR(ty_train_tree_next(&d->ranks, &slot));
    memcpy(slot, from, floats);
    memcpy(&loss, from + floats, sizeof(double));
    ty_train_tree_push(&d->ranks, 0, loss);
  }
  *out_sum = ty_train_tree_finish(&d->ranks, out_loss);
  return TY_OK;
}

ty_status_t ty_trainer_det_step(ty_trainer_t *t, int64_t base, double *out_loss,
                                double *out_norm) {
  TY_RETURN_IF_ERROR(ty_det_open(t));
  ty_trainer_det_t *d = t->checks.det;
  double counted_total = 0;
  for (int64_t m = 0; m < t->shape.accum; ++m) {
    double counted = 0;
    TY_RETURN_IF_ERROR(ty_trainer_stage_micro(t, base, m, &counted));
    counted_total += counted;
  }
  /* integral counts: their sum is exact in any order */
  TY_RETURN_IF_ERROR(ty_trainer_dist_sum(t, &counted_total, 1, "the target count"));
  /* --check-numerics: a checked step runs the session that keeps every
   * intermediate (the same graph, the same state) */
  ty_session_t *train = t->checks.check_session ? t->checks.check_session : t->graphs.s_train;
  if (d->dev) ty_train_tree_dev_reset(d->dev);
  ty_train_tree_reset(&d->rows);
  for (int64_t m = 0; m < t->shape.accum; ++m) {
    double counted = 0;
    TY_RETURN_IF_ERROR(ty_trainer_stage_micro(t, base, m, &counted));
    ty_trainer_scale_weights(t, counted_total > 0 ? 1.0 / counted_total : 0.0);
    for (int64_t b = 0; b < t->shape.B; ++b) {
      TY_RETURN_IF_ERROR(ty_det_bind_row(t, train, b));
      if (t->cfg.dropout > 0) {
        /* the row's index in the global batch: its mask follows the row */
        const int64_t row =
            (int64_t)t->par.dp_rank * t->shape.B * t->shape.accum + m * t->shape.B + b;
        int64_t rng[2] = {(int64_t)t->cfg.seed, ty_train_plan_row_dropout_counter(
                                                    t->progress.step, t->shape.rows_per_step, row)};
        int64_t two[1] = {2};
        TY_RETURN_IF_ERROR(ty_session_bind(train, "rng", TY_DTYPE_I64, 1, two, rng, sizeof(rng)));
      }
      TY_RETURN_IF_ERROR(ty_session_run(train));
      double loss = 0;
      TY_RETURN_IF_ERROR(ty_trainer_read_scalar(train, "loss", t->shape.loss_dtype, &loss));
      if (d->dev) {
        TY_RETURN_IF_ERROR(ty_train_tree_dev_push(d->dev, loss));
        continue;
      }
      float *leaf = NULL;
      TY_RETURN_IF_ERROR(ty_train_tree_next(&d->rows, &leaf));
      /* every row's leaf is its own gradient: the graph adds into the
       * accumulators, so they go back to zero */
      TY_RETURN_IF_ERROR(ty_trainer_read_grads(t, leaf));
      TY_RETURN_IF_ERROR(ty_trainer_zero_grads(t, d->zeros));
      ty_train_tree_push(&d->rows, 0, loss);
    }
  }
  t->progress.tokens_seen += (int64_t)counted_total;
  double loss = 0;
  if (d->dev) {
    /* the rank's sum is in the accumulators: one round trip a step when
     * the ranks' partials meet on the host, none for one process */
    TY_RETURN_IF_ERROR(ty_train_tree_dev_finish(d->dev, &loss));
    if (t->par.dp > 1) {
      const float *sum = (const float *)d->own;
      TY_RETURN_IF_ERROR(ty_trainer_read_grads(t, (float *)d->own));
      TY_RETURN_IF_ERROR(ty_det_over_ranks(t, sum, loss, &sum, &loss));
      TY_RETURN_IF_ERROR(ty_trainer_write_grads(t, sum));
    }
  } else {
    const float *sum = ty_train_tree_finish(&d->rows, &loss);
    if (t->par.dp > 1) TY_RETURN_IF_ERROR(ty_det_over_ranks(t, sum, loss, &sum, &loss));
    TY_RETURN_IF_ERROR(ty_trainer_write_grads(t, sum));
  }
  TY_RETURN_IF_ERROR(ty_trainer_bind_hparams(t, t->graphs.s_opt, t->progress.step));
  TY_RETURN_IF_ERROR(ty_session_run(t->graphs.s_opt));
  *out_loss = loss;
  return ty_trainer_read_scalar(t->graphs.s_opt, "grad_norm", TY_DTYPE_F32, out_norm);
}
