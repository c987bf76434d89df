/* The training loop. Everything a step depends on — which rows, dropout
 * masks, learning rate — is a function of (seed, step), and the optimizer
 * state is saved exactly, so a resumed run repeats an uninterrupted one bit
 * for bit. */
#include "trainer.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "distributed/dist.h"
#include "hal/comm.h"
#include "graph/runtime/preflight.h"
#include "graph/ir/train_step.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/presets.h"
#include "files/out_paths.h"
#include "files/run_folder.h"
#include "pipeline/trainer_pp.h"
#include "stop_signals.h"
#include "train_control.h"
#include "train_eval.h"
#include "train_graph.h"
#include "train_metrics.h"
#include "train_plan.h"
#include "train_sample.h"
#include "run_tokenizer.h"
#include "trainer_numerics.h"

/* Test hooks (docs/design-notes.md): TRAINYARD_DEBUG_STEP_SLEEP_MS slows
 * every step so that tests can signal a run mid-way deterministically. */
static void ty_debug_sleep(const char *variable) {
  const char *v = getenv(variable);
  long ms = v ? atol(v) : 0;
  if (ms > 0) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The row order of `epoch`: reshuffled every epoch (train_plan.h). */
static void ty_trainer_shuffle(ty_trainer_t *t, int64_t epoch) {
  ty_train_plan_row_order(t->cfg.seed, epoch, ty_dataset_row_count(t->feed.train_data),
                          t->feed.order);
}

/* Learning rate of update number `s` (0-based): linear warmup, then the
 * chosen decay from lr to min_lr over the remaining steps. */
static double ty_trainer_lr(const ty_trainer_t *t, int64_t s) {
  const ty_train_config_t *c = &t->cfg;
  if (s < c->warmup_steps) return c->lr * (double)(s + 1) / (double)c->warmup_steps;
  int64_t span = t->shape.total_steps - c->warmup_steps;
  double p = span > 1 ? (double)(s - c->warmup_steps) / (double)(span - 1) : 1.0;
  if (p > 1) p = 1;
  if (!strcmp(c->schedule, "cosine")) {
    return c->min_lr + (c->lr - c->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * p));
  }
  if (!strcmp(c->schedule, "linear")) return c->lr + (c->min_lr - c->lr) * p;
  return c->lr;
}

static ty_status_t ty_bind_scalar_f32(ty_session_t *s, const char *name, double v) {
  float f = (float)v;
  return ty_session_bind(s, name, TY_DTYPE_F32, 0, NULL, &f, sizeof(f));
}

/* Hyperparameters of update `s` on the session that runs the optimizer. */
ty_status_t ty_trainer_bind_hparams(ty_trainer_t *t, ty_session_t *s, int64_t step) {
  const ty_train_config_t *c = &t->cfg;
  TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "lr", ty_trainer_lr(t, step)));
  TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "weight_decay", c->weight_decay));
  TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "max_norm", c->clip));
  int64_t t1 = step + 1;
  if (!strcmp(c->optimizer, "adamw")) {
    TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "beta1", c->beta1));
    TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "beta2", c->beta2));
    TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "eps", c->eps));
    return ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &t1, sizeof(t1));
  }
  if (!strcmp(c->optimizer, "adafactor")) {
    if (ty_train_config_layer(c, "beta1") != TY_TRAIN_LAYER_DEFAULT) {
      TY_RETURN_IF_ERROR(ty_bind_scalar_f32(s, "beta1", c->beta1));
    }
    return ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &t1, sizeof(t1));
  }
  return ty_bind_scalar_f32(s, "momentum", c->momentum);
}

ty_status_t ty_trainer_read_scalar(ty_session_t *s, const char *name, ty_dtype_t dtype,
                                   double *out) {
  if (dtype == TY_DTYPE_F64) return ty_session_read(s, name, out, sizeof(double));
  float f = 0;
  ty_status_t st = ty_session_read(s, name, &f, sizeof(f));
  *out = f;
  return st;
}

/* Stages micro-batch rows into tokens/targets/weights (raw 0/1 weights);
 * returns the number of counted targets. Rows past `count` are padding.
 * Under context parallel a training row's Tl tokens are this rank's
 * chunks (ty_trainer_cp_position) and the count is of those; `whole` (the
 * evaluation, whose graph runs whole rows) stages all T. */
static ty_status_t ty_trainer_stage(ty_trainer_t *t, ty_dataset_t *data, const uint64_t *rows,
                                    int64_t count, bool whole, double *out_counted) {
  const int64_t T = t->shape.T, Tl = whole ? T : t->shape.Tl;
  double counted = 0;
  uint32_t eos = ty_dataset_eos_id(data);
  for (int64_t b = 0; b < t->shape.B; ++b) {
    if (b < count) {
      TY_RETURN_IF_ERROR(
          ty_dataset_read_row(data, rows[b], t->feed.row_tokens, t->feed.row_weights));
    } else {
      for (int64_t i = 0; i <= T; ++i) t->feed.row_tokens[i] = eos;
      memset(t->feed.row_weights, 0, (size_t)(T > 0 ? T : 0));
    }
    for (int64_t i = 0; i < Tl; ++i) {
      const int64_t at = whole ? i : ty_trainer_cp_position(t, i);
      t->feed.tokens[b * Tl + i] = t->feed.row_tokens[at];
      t->feed.targets[b * Tl + i] = t->feed.row_tokens[at + 1];
      double w = t->feed.row_weights[at] ? 1.0 : 0.0;
      counted += w;
      if (t->shape.loss_dtype == TY_DTYPE_F64) {
        ((double *)t->feed.weights)[b * Tl + i] = w;
      } else {
        ((float *)t->feed.weights)[b * Tl + i] = (float)w;
      }
    }
  }
  *out_counted = counted;
  return TY_OK;
}

void ty_trainer_scale_weights(ty_trainer_t *t, double factor) {
  int64_t n = t->shape.B * t->shape.Tl;
  for (int64_t i = 0; i < n; ++i) {
    if (t->shape.loss_dtype == TY_DTYPE_F64) {
      ((double *)t->feed.weights)[i] *= factor;
    } else {
      ((float *)t->feed.weights)[i] = (float)(((float *)t->feed.weights)[i] * factor);
    }
  }
}

static ty_status_t ty_trainer_bind_batch(ty_trainer_t *t, ty_session_t *s, int64_t T) {
  int64_t bt[2] = {t->shape.B, T};
  size_t n = (size_t)(t->shape.B * T);
  TY_RETURN_IF_ERROR(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, t->feed.tokens, n * 8));
  TY_RETURN_IF_ERROR(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, t->feed.targets, n * 8));
  return ty_session_bind(s, "loss_weights", t->shape.loss_dtype, 2, bt, t->feed.weights,
                         n * ty_dtype_size(t->shape.loss_dtype));
}

/* Bytes a mixed run has copied between its devices so far (0 otherwise). */
static uint64_t ty_trainer_transfer_bytes(const ty_trainer_t *t) {
  uint64_t n = ty_session_stats(t->graphs.s_train).transfer_bytes;
  if (t->graphs.s_opt) n += ty_session_stats(t->graphs.s_opt).transfer_bytes;
  return n;
}

ty_status_t ty_trainer_stage_micro(ty_trainer_t *t, int64_t base, int64_t m,
                                   double *out_counted) {
  int64_t rows_total = (int64_t)ty_dataset_row_count(t->feed.train_data),
          first = base + m * t->shape.B;
  int64_t count =
      first < rows_total ? (rows_total - first < t->shape.B ? rows_total - first : t->shape.B) : 0;
  return ty_trainer_stage(t, t->feed.train_data, t->feed.order + (first < rows_total ? first : 0),
                          count, false, out_counted);
}

/* The micro-batches of one step from row `base` of the epoch's order, then
 * the update (one process, or data parallel). */
static ty_status_t ty_trainer_micro_steps(ty_trainer_t *t, int64_t base, double *out_loss,
                                          double *out_norm) {
  double counted_total = 0;
  for (int64_t m = 0; m < t->shape.accum; ++m) {
    double counted = 0;
    TY_RETURN_IF_ERROR(ty_trainer_stage_micro(t, base, m, &counted));
    counted_total += counted;
  }
  TY_RETURN_IF_ERROR(ty_trainer_dist_sum(t, &counted_total, 1, "the target count"));
  counted_total /= t->par.tp; /* every tp rank of a replica counted the same rows */
  double loss = 0;
  /* --check-numerics: a checked step runs the session that keeps every
   * intermediate (the same state) */
  ty_session_t *train = t->checks.check_session ? t->checks.check_session : t->graphs.s_train;
  ty_session_t *opt = t->graphs.s_opt ? t->graphs.s_opt : train;
  for (int64_t m = 0; m < t->shape.accum; ++m) {
    double counted = 0;
    TY_RETURN_IF_ERROR(ty_trainer_stage_micro(t, base, m, &counted));
    ty_trainer_scale_weights(t, counted_total > 0 ? 1.0 / counted_total : 0.0);
    TY_RETURN_IF_ERROR(ty_trainer_bind_batch(t, train, t->shape.Tl));
    if (t->cfg.dropout > 0) {
      /* the micro-batch's index in the global step: masks follow the rows */
      int64_t rng[2] = {(int64_t)t->cfg.seed,
                        ty_train_plan_dropout_counter(t->progress.step, t->par.dp, t->par.dp_rank,
                                                      t->shape.accum, m)};
      int64_t two[1] = {2};
      TY_RETURN_IF_ERROR(ty_session_bind(train, "rng", TY_DTYPE_I64, 1, two, rng, sizeof(rng)));
    }
    if (!t->graphs.s_opt) TY_RETURN_IF_ERROR(ty_trainer_bind_hparams(t, train, t->progress.step));
    TY_RETURN_IF_ERROR(ty_session_run(train));
    double micro = 0;
    TY_RETURN_IF_ERROR(ty_trainer_read_scalar(train, "loss", t->shape.loss_dtype, &micro));
    loss += micro;
  }
  t->progress.tokens_seen += (int64_t)counted_total;
  if (t->graphs.s_opt) {
    TY_RETURN_IF_ERROR(ty_trainer_dist_reduce_grads(t));
    TY_RETURN_IF_ERROR(ty_trainer_bind_hparams(t, t->graphs.s_opt, t->progress.step));
    TY_RETURN_IF_ERROR(ty_session_run(t->graphs.s_opt));
    TY_RETURN_IF_ERROR(ty_trainer_dist_gather_params(t));
  } else if (t->par.owner) {
    /* ZeRO-1 in the fused step: each rank updated its share */
    TY_RETURN_IF_ERROR(ty_trainer_dist_gather_params(t));
  }
  *out_loss = loss;
  return ty_trainer_read_scalar(opt, "grad_norm", TY_DTYPE_F32, out_norm);
}

/* One optimizer step: grad_accum micro-batches, then the update. */
static ty_status_t ty_trainer_step(ty_trainer_t *t, double *out_loss, double *out_norm) {
  int64_t rows_total = (int64_t)ty_dataset_row_count(t->feed.train_data);
  if (t->progress.cursor >= rows_total) {
    t->progress.epoch++;
    t->progress.cursor = 0;
    ty_trainer_shuffle(t, t->progress.epoch);
  }
  /* The counted targets of the whole global step (every replica's)
   * normalize every micro-batch, so the summed gradient is that of the
   * step's mean loss. Replica d reads rows [d B accum, (d+1) B accum) of the
   * global batch of dp x B x accum rows (every pipeline stage of it the
   * same rows): the data order depends on the seed and the global batch
   * only, never on how it is split. */
  const int64_t base = t->progress.cursor + (int64_t)t->par.dp_rank * t->shape.B * t->shape.accum;
  double loss = 0, norm = 0;
  uint64_t transfer_before = t->graphs.s_train ? ty_trainer_transfer_bytes(t) : 0;
  if (t->par.pipe) {
    TY_RETURN_IF_ERROR(ty_trainer_pp_step(&t->pp_runner, base, &loss, &norm));
  } else if (t->cfg.deterministic) {
    TY_RETURN_IF_ERROR(ty_trainer_det_step(t, base, &loss, &norm));
  } else {
    TY_RETURN_IF_ERROR(ty_trainer_micro_steps(t, base, &loss, &norm));
  }
  t->graphs.step_transfer_bytes =
      t->graphs.s_train ? ty_trainer_transfer_bytes(t) - transfer_before : 0;
  t->progress.cursor += t->shape.rows_per_step;
  /* The step's loss over every rank, whether any rank was asked to stop,
   * and the `trainyard control` requests rank 0 took: every rank stops,
   * saves or aborts after the same step. */
  /* --deterministic: every rank holds the global loss already (the fixed
   * tree); rank 0's alone enters the sum, whose other terms are +0, so
   * any order of the all-reduce keeps its bits. */
  double sums[3] = {t->cfg.deterministic && t->par.dp_rank != 0 ? 0.0 : loss,
                    (double)ty_stop_signals_received(), (double)ty_train_control_take(t)};
  TY_RETURN_IF_ERROR(ty_trainer_dist_sum(t, sums, 3, "the loss"));
  loss = sums[0] / t->par.tp; /* the tp ranks of a replica hold the same loss */
  t->report.control_bits = (uint32_t)sums[2];
  if (t->par.world > 1 && sums[1] > 0) {
    int local = ty_stop_signals_received();
    t->report.stop_signal = local ? local : SIGTERM;
  }
  *out_loss = loss;
  *out_norm = norm;
  return TY_OK;
}

/* Mean validation loss over up to eval_batches batches. */
static ty_status_t ty_trainer_eval(ty_trainer_t *t, double *out) {
  *out = NAN;
  if (!t->feed.val_data || ty_dataset_row_count(t->feed.val_data) == 0) return TY_OK;
  int64_t rows = (int64_t)ty_dataset_row_count(t->feed.val_data);
  int64_t batches = (rows + t->shape.B - 1) / t->shape.B;
  if (t->cfg.eval_batches > 0 && batches > t->cfg.eval_batches) batches = t->cfg.eval_batches;
  uint64_t *idx = malloc((size_t)t->shape.B * sizeof(uint64_t));
  if (!idx) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  double total = 0, counted_all = 0;
  ty_status_t s = TY_OK;
  for (int64_t b = 0; b < batches && !s; ++b) {
    int64_t first = b * t->shape.B, count = rows - first < t->shape.B ? rows - first : t->shape.B;
    for (int64_t i = 0; i < count; ++i) idx[i] = (uint64_t)(first + i);
    double counted = 0, sum = 0;
    s = ty_trainer_stage(t, t->feed.val_data, idx, count, true, &counted);
    if (!s) s = ty_trainer_bind_batch(t, t->graphs.s_eval, t->shape.T);
    if (!s) s = ty_session_run(t->graphs.s_eval);
    if (!s) s = ty_trainer_read_scalar(t->graphs.s_eval, "loss", t->shape.loss_dtype, &sum);
    total += sum; /* raw 0/1 weights: the sum of counted losses */
    counted_all += counted;
  }
  free(idx);
  if (!s && counted_all > 0) *out = total / counted_all;
  return s;
}

static ty_status_t ty_trainer_open_data(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  TY_RETURN_IF_ERROR(ty_dataset_open(c->data, "train", 0, &t->feed.train_data));
  if (ty_dataset_row_count(t->feed.train_data) == 0) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "%s: the train split has no rows", c->data);
  }
  /* No val split only where dataset.json declares none; a declared split
   * whose shard is missing is an error, never "no validation". */
  TY_RETURN_IF_ERROR(
      ty_dataset_open(c->data, "val", TY_DATASET_OPEN_IF_DECLARED, &t->feed.val_data));
  if (!t->feed.val_data || ty_dataset_row_count(t->feed.val_data) == 0) {
    /* Without validation rows the evaluation options would do nothing. */
    const char *given = c->eval_data[0]                           ? NULL
                        : ty_train_config_layer(c, "eval_every") ? "--eval-every"
                        : ty_train_config_layer(c, "eval_batches") ? "--eval-batches"
                                                                   : NULL;
    if (given) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s has no effect: the data in %s has no validation rows (prepare "
                            "it with --val-fraction > 0)",
                            given, c->data);
    }
  }
  t->shape.T = ty_dataset_seq_len(t->feed.train_data);
  if (c->seq_len && c->seq_len != t->shape.T) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--seq-len %lld differs from the dataset's %lld tokens per row; prepare "
                          "the data again with --seq-len %lld",
                          (long long)c->seq_len, (long long)t->shape.T, (long long)c->seq_len);
  }
  return ty_trainer_cp_shape(t);
}

static ty_status_t ty_trainer_model_config(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  uint32_t vocab = ty_dataset_vocab_size(t->feed.train_data),
           eos = ty_dataset_eos_id(t->feed.train_data);
  if (c->model[0]) {
    TY_RETURN_IF_ERROR(ty_model_config_load(c->model, &t->model_config));
    if (vocab > t->model_config.vocab_size) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "the data's vocabulary (%u) is larger than the model's (%lld): was "
                            "it prepared with this model's tokenizer?",
                            vocab, (long long)t->model_config.vocab_size);
    }
    return TY_OK;
  }
  /* bos = eos = the document separator, as GPT-2 does with <|endoftext|>. */
  TY_RETURN_IF_ERROR(ty_model_preset(c->preset, vocab, eos, eos, &t->model_config));
  if (c->max_positions > 0) t->model_config.max_positions = c->max_positions;
  return TY_OK;
}

/* The pre-flight memory plan of every graph the run compiles, printed and
 * checked against --memory-limit (or the device's memory) before any
 * session allocates a byte on the device. */
static ty_status_t ty_trainer_preflight(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  t->graphs.plan = calloc(1, sizeof(*t->graphs.plan));
  if (!t->graphs.plan) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_preflight_init(t->graphs.plan);
  TY_RETURN_IF_ERROR(ty_preflight_add(t->graphs.plan, t->graphs.g_train, "train step"));
  if (t->graphs.g_opt)
    TY_RETURN_IF_ERROR(ty_preflight_add(t->graphs.plan, t->graphs.g_opt, "optimizer step"));
  if (t->graphs.g_eval)
    TY_RETURN_IF_ERROR(ty_preflight_add(t->graphs.plan, t->graphs.g_eval, "evaluation"));
  uint64_t device_bytes = ty_device_info(t->device)->memory_bytes;
  TY_RETURN_IF_ERROR(ty_train_config_memory_limit(c, &t->graphs.memory_limit));
  char size[32];
  if (t->graphs.memory_limit) {
    snprintf(t->graphs.memory_limit_what, sizeof(t->graphs.memory_limit_what), "--memory-limit %s",
             c->memory_limit);
  } else if (device_bytes) {
    t->graphs.memory_limit = device_bytes;
    ty_format_bytes(device_bytes, size, sizeof(size));
    snprintf(t->graphs.memory_limit_what, sizeof(t->graphs.memory_limit_what), "the memory of %s",
             ty_device_label(t->device));
  }
  char *text = NULL;
  TY_RETURN_IF_ERROR(ty_preflight_format(t->graphs.plan, "  ", &text));
  ty_format_bytes(t->graphs.memory_limit, size, sizeof(size));
  if (t->par.rank == 0) {
    fprintf(stderr, "memory plan (device bytes, before step 0; limit %s%s%s):\n%s",
            t->graphs.memory_limit ? size : "none", t->graphs.memory_limit ? ", " : "",
            t->graphs.memory_limit_what, text);
    ty_trainer_dist_plan(t, stderr);
  }
  free(text);
  return ty_preflight_check(t->graphs.plan, t->graphs.memory_limit, t->graphs.memory_limit_what);
}

/* The graphs first (host memory only), then the plan, then the sessions. */
ty_status_t ty_trainer_build(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  ty_train_recipe_t recipe;
  TY_RETURN_IF_ERROR(ty_train_config_recipe(c, &recipe));
  if (ty_trainer_zero2(t)) { /* ZeRO-2: the gradient graph sums each gradient over the shares */
    recipe.zero_shares = ty_trainer_zero_shares(t);
    recipe.zero_index = ty_trainer_zero_index(t);
    snprintf(recipe.zero_group, sizeof(recipe.zero_group), "%s", ty_trainer_zero_group(t));
  }
  TY_RETURN_IF_ERROR(ty_train_graph_build(&recipe, &t->model_config, ty_trainer_graph_batch(t),
                                          t->shape.Tl, t->shape.dtype, TY_TRAIN_GRAPH_STEP,
                                          &t->graphs.g_train, &t->graphs.m_train));
  t->shape.loss_dtype = ty_graph_value(t->graphs.g_train, t->graphs.m_train.loss)->desc.dtype;
  TY_RETURN_IF_ERROR(ty_trainer_tp_sessions(t));
  if (c->dump_graph[0])
    TY_RETURN_IF_ERROR(ty_app_write_graph_dump(t->graphs.g_train, c->dump_graph));
  ty_status_t s = TY_OK;
  /* --deterministic: the host tree sits between the two graphs */
  if (t->shape.accum > 1 || (t->par.world > 1 && !c->world_in_graph) || c->deterministic) {
    ty_tensor_desc_t *descs = NULL;
    bool *decay = NULL;
    ty_train_step_params_t step;
    s = ty_train_graph_step_options(&recipe, &step);
    /* ZeRO-1: this rank's optimizer graph updates its share alone */
    if (!s && c->zero) s = ty_trainer_dist_owners(t);
    step.update = t->par.updates;
    step.tp_split = t->par.tp_split; /* the whole model's norm (tensor parallel) */
    uint32_t n = t->graphs.m_train.param_count;
    if (!s)
      s = ty_train_graph_param_descs(&recipe, t->graphs.g_train, &t->graphs.m_train, &descs,
                                     &decay);
    bool *split = NULL;
    if (!s && recipe.zero_shares) {
      /* ZeRO-2: the graph of the share alone (the others' accumulators are
       * not on this rank), its norm summed over the shares in the graph */
      s = ty_trainer_zero2_share(t, descs, decay, &n, &split);
      step.update = NULL;
      step.tp_split = split;
      step.norm_group = recipe.zero_group;
    }
    if (!s) s = ty_graph_create(&t->graphs.g_opt);
    if (!s) s = ty_graph_build_optimizer_step_ex(t->graphs.g_opt, descs, decay, n, &step);
    free(split);
    free(descs);
    free(decay);
  }
  /* ZeRO-1 in the fused step: the shares its graph was built with */
  if (!s && c->zero && c->world_in_graph && t->par.world > 1) s = ty_trainer_dist_owners(t);
  /* no evaluation graph (nor its arena) where there is nothing to evaluate */
  if (!s && t->feed.val_data && ty_dataset_row_count(t->feed.val_data) > 0) {
    s = ty_train_graph_build(&recipe, &t->model_config, t->shape.B, t->shape.T, t->shape.dtype,
                             TY_TRAIN_GRAPH_EVAL, &t->graphs.g_eval, &t->graphs.m_eval);
  }
  if (!s) s = ty_trainer_preflight(t);
  if (s || c->plan_only) return s; /* --plan-only: no session */
  ty_session_options_t so = {.cache_dir = c->cache_dir, .retry_failed = c->retry_failed,
                             .fallback_device = t->fallback,
                             .deterministic = c->deterministic};
  if (t->par.rank == 0 && !c->artifact[0]) ty_app_warn_cache_dir("train", c->cache_dir);
  if (c->artifact[0]) {
    s = ty_session_create_from_artifact(t->device, t->graphs.g_train, c->artifact, &so,
                                        &t->graphs.s_train);
  } else {
    s = ty_session_create(t->device, t->graphs.g_train, &so, &t->graphs.s_train);
  }
  if (!s && c->world_in_graph) {
    ty_dist_host_comm(t->par.dist, &t->par.host_comm);
    s = ty_session_set_host_comm(t->graphs.s_train, &t->par.host_comm);
  }
  if (s && t->par.world > 1 && !c->world_in_graph) {
    /* The device may refuse the split step (the dataflow device runs whole
     * steps only): say why the step was split. */
    s = ty_trainer_zero2(t)
            ? ty_status_annotate(s, "--zero 2 on %d ranks sums each gradient inside the gradient "
                                    "graph with all_reduce ops (--zero 1 sums them between the "
                                    "graphs)",
                                 t->par.world)
            : ty_status_annotate(s, "data parallel on %d ranks runs the step as a gradient graph "
                                    "and an optimizer graph with the gradient all-reduce between "
                                    "them",
                                 t->par.world);
  }
  ty_session_options_t share = so;
  share.share_state_with = t->graphs.s_train;
  if (!s && t->graphs.g_opt)
    s = ty_session_create(t->device, t->graphs.g_opt, &share, &t->graphs.s_opt);
  if (!s && t->graphs.g_eval)
    s = ty_session_create(t->device, t->graphs.g_eval, &share, &t->graphs.s_eval);
  if (!s) s = ty_trainer_tp_comm(t);
  if (!s) s = ty_trainer_numerics_open(t);
  return s;
}

static void ty_trainer_destroy(ty_trainer_t *t) {
  ty_train_control_close(t); /* first: no request is taken from here on */
  ty_train_sample_close(t); /* its sessions share s_train's parameters */
  ty_train_eval_close(t);   /* so do these */
  ty_trainer_numerics_close(t); /* its session shares s_train's state */
  ty_trainer_det_close(t);
  ty_session_destroy(t->graphs.s_eval);
  ty_session_destroy(t->graphs.s_opt);
  ty_session_destroy(t->graphs.s_train);
  ty_trainer_pp_destroy(&t->pp_runner);
  /* After the executables (a CUDA graph that captured NCCL collectives
   * holds a reference that ncclCommDestroy waits for), before its device
   * closes. */
  ty_comm_destroy(t->par.comm);
  t->par.comm = NULL;
  ty_comm_destroy(t->par.tp_comm);
  t->par.tp_comm = NULL;
  ty_comm_destroy(t->par.embed_comm);
  t->par.embed_comm = NULL;
  ty_comm_destroy(t->par.cp_comm);
  t->par.cp_comm = NULL;
  ty_comm_destroy(t->par.grad_comm);
  t->par.grad_comm = NULL;
  ty_comm_destroy(t->par.pp_comm);
  t->par.pp_comm = NULL;
  ty_llm_deinit(&t->graphs.m_eval);
  ty_llm_deinit(&t->graphs.m_train);
  ty_graph_destroy(t->graphs.g_eval);
  ty_graph_destroy(t->graphs.g_opt);
  ty_graph_destroy(t->graphs.g_train);
  ty_device_close(t->fallback);
  ty_device_close(t->device);
  ty_registry_destroy(t->registry);
  ty_dataset_close(t->feed.train_data);
  ty_dataset_close(t->feed.val_data);
  ty_train_metrics_close(t);
  ty_run_tokenizer_close(t);
  if (t->graphs.plan) ty_preflight_deinit(t->graphs.plan);
  free(t->graphs.plan);
  free(t->feed.order);
  free(t->feed.tokens);
  free(t->feed.targets);
  free(t->feed.weights);
  free(t->feed.row_tokens);
  free(t->feed.row_weights);
  ty_run_folder_close(t->folder.run); /* the lock lasts as long as the run */
  ty_trainer_dist_close(t);     /* last: MPI_Finalize */
}

/* The run folder and the --dump-graph files may not be, or lie inside,
 * what the run reads. */
static ty_status_t ty_trainer_check_out(const ty_train_config_t *c) {
  bool resume_path = c->resume[0] && strcmp(c->resume, "latest") && strcmp(c->resume, "auto");
  const ty_path_arg_t inputs[] = {{"--data", c->data},
                                  {"--model", c->model},
                                  {"--tokenizer", c->tokenizer},
                                  {"--artifact", c->artifact},
                                  {"--eval-data", c->eval_data},
                                  {"--resume", resume_path ? c->resume : NULL}};
  const size_t n = sizeof(inputs) / sizeof(inputs[0]);
  ty_out_path_t out = {.option = "--out", .path = c->out, .creates_parents = true};
  TY_RETURN_IF_ERROR(ty_out_path_check(&out, inputs, n));
  for (int k = 0; c->dump_graph[0] && k < 2; ++k) {
    char path[TY_CFG_PATH_MAX + 8];
    snprintf(path, sizeof(path), "%s%s", c->dump_graph, k ? ".dot" : ".txt");
    ty_out_path_t dump = {.option = "--dump-graph", .path = path, .what = "graph dump",
                          .creates_parents = true};
    TY_RETURN_IF_ERROR(ty_out_path_check(&dump, inputs, n));
  }
  return TY_OK;
}

/* Initial weights: a resumed checkpoint, the model to fine-tune, or fresh. */
static ty_status_t ty_trainer_weights(ty_trainer_t *t, const char *resume_dir) {
  bool allow = t->cfg.allow_nonfinite;
  if (resume_dir[0]) {
    TY_RETURN_IF_ERROR(
        ty_app_load_weights(&t->graphs.m_train, t->graphs.s_train, resume_dir, allow, "train"));
    return ty_trainer_load_optimizer(t, resume_dir);
  }
  if (t->cfg.model[0]) {
    return ty_app_load_weights(&t->graphs.m_train, t->graphs.s_train, t->cfg.model, allow, "train");
  }
  return ty_llm_init_weights(&t->graphs.m_train, t->graphs.s_train, t->cfg.seed);
}

/* The parts of the checkpoint in `dir` against its trainer_state.json; the
 * resumed run keeps the state's run id, or, for a checkpoint from before
 * run ids, goes on under the fresh one (said once). */
static ty_status_t ty_trainer_check_identity(ty_trainer_t *t, const ty_trainer_saved_t *saved,
                                             const char *dir) {
  ty_ckpt_identity_t want = {.step = t->progress.step};
  snprintf(want.run_id, sizeof(want.run_id), "%s", saved->run_id);
  snprintf(want.source, sizeof(want.source), "%s/trainer_state.json", dir);
  TY_RETURN_IF_ERROR(ty_ckpt_identity_check(dir, &want));
  if (saved->run_id[0]) {
    snprintf(t->folder.run_id, sizeof(t->folder.run_id), "%s", saved->run_id);
  } else if (t->par.rank == 0) {
    fprintf(stderr, "trainyard train: note: %s has no run id (saved before run ids); this "
            "run's checkpoints carry run id %s\n", dir, t->folder.run_id);
  }
  return TY_OK;
}

/* A resumed checkpoint at or past the run's last step. --resume auto (make
 * the run complete: scripts/run.sh runs again only for a sample) and
 * --allow-done say so and end the run with nothing done (exit 0): CANCELLED
 * with t->folder.done_already set, so that every rank leaves the set-up the way a
 * failed one does (the same agreements in the same order) and the caller
 * turns it into OK. --resume latest or a folder asked to train on:
 * FAILED_PRECONDITION (exit 1). */
static ty_status_t ty_trainer_check_done(ty_trainer_t *t, const char *resume_dir) {
  const ty_train_config_t *c = &t->cfg;
  char target[160];
  if (c->max_steps > 0) {
    snprintf(target, sizeof(target), "--max-steps is %lld", (long long)c->max_steps);
  } else {
    snprintf(target, sizeof(target), "--epochs %lld makes %lld steps (%lld per epoch)",
             (long long)c->epochs, (long long)t->shape.total_steps,
             (long long)t->shape.steps_per_epoch);
  }
  if (!strcmp(c->resume, "auto") || c->allow_done) {
    if (t->par.rank == 0) {
      fprintf(stderr, "trainyard train: %s is at step %lld and %s: the run is complete, "
              "nothing to train (raise --max-steps or --epochs to train on)\n", resume_dir,
              (long long)t->progress.step, target);
    }
    t->folder.done_already = true;
    return ty_status_make(TY_CODE_CANCELLED, "the run is complete: nothing to train");
  }
  return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                        "--resume %s: %s is at step %lld and %s: nothing to train; raise "
                        "--max-steps or --epochs to train on, or pass --allow-done to accept a "
                        "finished run (exit 0)",
                        c->resume, resume_dir, (long long)t->progress.step, target);
}

/* Whether a stop signal ends the run after this step: this process's own
 * for one process; in a distributed run, any rank's (agreed in the step's
 * loss all-reduce), so that every rank stops after the same step. */
static int ty_trainer_stopping(const ty_trainer_t *t) {
  return t->par.world > 1 ? t->report.stop_signal : ty_stop_signals_received();
}

/* Everything before the first step. In a distributed run rank 0 alone owns
 * the run folder (lock, clean-up, which checkpoint to resume), metrics and
 * TensorBoard; the other ranks learn the checkpoint from it, and every
 * phase ends with the ranks agreeing that it succeeded everywhere, so a
 * rank that fails alone never leaves the others waiting. */
static ty_status_t ty_trainer_setup(ty_trainer_t *t, char *resume_dir, size_t capacity) {
  const ty_train_config_t *config = &t->cfg;
  ty_status_t s = ty_llm_precision_parse(config->dtype, &t->shape.dtype, &t->shape.compute_dtype);
  if (!s) s = ty_trainer_check_out(config);
  /* Every check that can refuse the run comes before anything is written
   * into --out (metrics, TensorBoard, train_config.json, an --overwrite's
   * deletion): a refused run leaves the folder as it was, and its retry is
   * not refused as "already holds a training run". */
  /* --plan-only writes nothing: no run folder, no control socket */
  if (!s && t->par.rank == 0 && !config->plan_only) s = ty_train_control_check(t);
  if (!s && t->par.rank == 0 && !config->plan_only) {
    s = ty_trainer_open_run(t, resume_dir, capacity);
  }
  /* A fresh run's identity (a resumed one keeps its own, below). */
  if (!s && t->par.rank == 0) s = ty_ckpt_run_id_new(t->folder.run_id);
  TY_RETURN_IF_ERROR(ty_dist_agree(t->par.dist, s, "opening the run folder"));
  TY_RETURN_IF_ERROR(
      ty_dist_broadcast(t->par.dist, 0, resume_dir, capacity, "the resume checkpoint"));
  TY_RETURN_IF_ERROR(
      ty_dist_broadcast(t->par.dist, 0, t->folder.run_id, sizeof(t->folder.run_id), "the run id"));
  ty_trainer_saved_t saved;
  if (resume_dir[0]) s = ty_trainer_read_state(resume_dir, t, &saved);
  if (!s) s = ty_trainer_open_data(t);
  if (!s && resume_dir[0]) s = ty_trainer_check_resume(t, &saved, resume_dir);
  /* Every part of the checkpoint from the run and the save its (checked)
   * state names, before any of it is loaded. */
  if (!s && resume_dir[0]) s = ty_trainer_check_identity(t, &saved, resume_dir);
  if (!s) s = ty_trainer_model_config(t);
  if (!s) s = ty_run_tokenizer_open(t); /* before anything is written */
  /* The weights against config.json before any graph is built. */
  if (!s && (resume_dir[0] || config->model[0])) {
    s = ty_llm_check_weights(&t->model_config, resume_dir[0] ? resume_dir : config->model);
  }
  /* a distributed run made it for the rank agreement (trainer_agree.c) */
  if (!s && !t->registry) s = ty_app_registry_create(t->app, &t->registry);
  if (!s) s = ty_trainer_dist_device_open(t);
  /* Weights no lever could fit are refused before any graph is built; the
   * memory plan checks the rest (ty_trainer_preflight). */
  ty_train_recipe_t recipe;
  if (!s) s = ty_train_config_recipe(config, &recipe);
  if (!s) s = ty_train_graph_check_memory(&recipe, &t->model_config, t->device);
  if (!s) {
    uint64_t rows = ty_dataset_row_count(t->feed.train_data);
    t->shape.rows_per_step = (int64_t)t->par.dp * t->shape.B * t->shape.accum;
    const uint64_t rps = (uint64_t)t->shape.rows_per_step;
    t->shape.steps_per_epoch = (int64_t)((rows + rps - 1) / rps);
    t->shape.total_steps =
        config->max_steps > 0 ? config->max_steps : config->epochs * t->shape.steps_per_epoch;
    /* A resume with nothing left to train (a finished run, or a smaller
     * target than its step): said, before anything is built or written. */
    if (resume_dir[0] && t->progress.step >= t->shape.total_steps)
      s = ty_trainer_check_done(t, resume_dir);
  }
  if (!s) {
    const uint64_t rows = ty_dataset_row_count(t->feed.train_data);
    t->feed.order = malloc((size_t)rows * sizeof(uint64_t));
    t->feed.tokens = malloc((size_t)(t->shape.B * t->shape.T) * sizeof(int64_t));
    t->feed.targets = malloc((size_t)(t->shape.B * t->shape.T) * sizeof(int64_t));
    t->feed.weights = malloc((size_t)(t->shape.B * t->shape.T) * sizeof(double));
    t->feed.row_tokens = malloc((size_t)(t->shape.T + 1) * sizeof(uint32_t));
    t->feed.row_weights = malloc((size_t)t->shape.T);
    if (!t->feed.order || !t->feed.tokens || !t->feed.targets || !t->feed.weights ||
        !t->feed.row_tokens || !t->feed.row_weights) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  /* --pp: the stages; rank 0 also builds the full model (its mirror) */
  if (!s) s = t->par.pp > 1 ? ty_trainer_pp_build(&t->pp_runner) : ty_trainer_build(t);
  if (!s && t->graphs.s_train) s = ty_trainer_weights(t, resume_dir);
  if (config->plan_only) { /* the plans are printed and checked: stop here */
    s = ty_dist_agree(t->par.dist, s, "planning the memory of every rank's graphs");
    if (!s && t->par.pp > 1) s = ty_trainer_pp_describe(&t->pp_runner);
    return s;
  }
  if (t->par.pp > 1) {
    s = ty_dist_agree(t->par.dist, s, "building the pipeline stages and loading the weights");
    if (!s) s = ty_trainer_pp_describe(&t->pp_runner);
    /* Loaded weights are split again, whatever layout saved them (a
     * fresh run's optimizer state: zeros everywhere already); a model
     * trained from scratch is initialized by each stage itself. */
    if (!s && !resume_dir[0] && !config->model[0]) {
      s = ty_trainer_pp_init(&t->pp_runner);
    } else if (!s) {
      s = ty_trainer_pp_scatter(&t->pp_runner, resume_dir[0] != '\0');
    }
  }
  if (!s && t->par.rank == 0) s = ty_train_sample_open(t);
  if (!s && t->par.rank == 0) s = ty_train_eval_open(t);
  if (!s) {
    ty_trainer_shuffle(t, t->progress.epoch);
    snprintf(t->model_source, sizeof(t->model_source), "%s", config->model);
  }
  s = ty_dist_agree(t->par.dist, s, "setting up the run");
  /* Only once every rank is ready: creating a communicator blocks until
   * all ranks have joined. */
  if (!s) s = ty_dist_agree(t->par.dist, ty_trainer_dist_comm_open(t), "creating the communicator");
  /* `trainyard control`: rank 0 serves it; ty_train_control_poll passes
   * its requests to every rank. Started before the first write below: it
   * is the last thing that can refuse the run. */
  if (!s && t->par.rank == 0) s = ty_train_control_open(t);
  /* From here on the run writes into --out. */
  if (!s && t->par.rank == 0) s = ty_trainer_clear_pending(t, resume_dir);
  if (!s && t->par.rank == 0) s = ty_train_metrics_open(t, resume_dir[0] != '\0');
  if (t->par.world > 1)
    s = ty_dist_agree(t->par.dist, s, "starting the control socket and the metrics");
  if (!s && t->par.rank == 0) ty_train_metrics_banner(t, resume_dir);
  return s;
}

/* After a step: evaluation, checkpoint and sample on rank 0 (the others
 * hold the same weights), then every rank learns whether they worked. */
static ty_status_t ty_trainer_after_step(ty_trainer_t *t, int64_t *saved_step) {
  const ty_train_config_t *config = &t->cfg;
  bool last = t->progress.step == t->shape.total_steps, evaluated = false, checkpointed = false;
  ty_status_t s = TY_OK;
  bool evaluate = (t->feed.val_data || t->report.task_eval) &&
                  ((config->eval_every && t->progress.step % config->eval_every == 0) || last);
  bool save = (config->save_every && t->progress.step % config->save_every == 0) || last;
  /* --pp: every stage's weights (and for a save their state) to rank 0 */
  if (t->par.pp > 1 && (evaluate || save)) s = ty_trainer_pp_gather(&t->pp_runner, save);
  if (!s && evaluate) {
    if (ty_trainer_evaluates(t)) s = ty_trainer_eval(t, &t->progress.last_val_loss);
    if (!s && t->par.rank == 0) ty_train_metrics_eval(t);
    if (!s && t->par.rank == 0) s = ty_train_eval_run(t); /* --eval-data: task accuracy */
    /* the save that follows is collective (ZeRO-1 shards, tensor-parallel gathers) */
    if (t->par.owner || t->par.tp > 1) s = ty_dist_agree(t->par.dist, s, "the evaluation");
    evaluated = true;
  }
  if (!s && save) {
    /* ZeRO-1: every rank writes its share of the optimizer state */
    if (ty_trainer_saves(t)) s = ty_trainer_save(t);
    if (!s) *saved_step = t->progress.step;
    checkpointed = true;
  }
  /* --sample-tokens: one sample at every evaluation and checkpoint. */
  if (!s && (evaluated || checkpointed) && t->par.rank == 0) s = ty_train_sample_run(t);
  if (t->par.world == 1 || !(evaluated || checkpointed)) return s;
  char what[64];
  snprintf(what, sizeof(what), "the evaluation and checkpoint of step %lld",
           (long long)t->progress.step);
  return ty_dist_agree(t->par.dist, s, what);
}

/* --check-numerics=every:N: step `bad` turned the loss non-finite between
 * two checked steps. The steps from the last checked one run again from
 * its copy of the state (the same batches, learning rates and dropout
 * masks), step `bad` checked, so the report names the first bad node. */
static ty_status_t ty_trainer_replay_checked(ty_trainer_t *t, int64_t bad) {
  int64_t from = 0;
  TY_RETURN_IF_ERROR(ty_trainer_numerics_rewind(t, &from));
  fprintf(stderr,
          "trainyard train: check-numerics: step %lld was not checked; running steps %lld to "
          "%lld again from the copy of step %lld's start, step %lld checked\n",
          (long long)bad, (long long)from, (long long)bad, (long long)from, (long long)bad);
  for (int64_t k = from; k <= bad; ++k) {
    double loss = 0, norm = 0;
    ty_trainer_numerics_arm(t, k == bad);
    ty_status_t s = ty_trainer_step(t, &loss, &norm);
    if (!s && k == bad) s = ty_trainer_numerics_after(t, 0);
    ty_trainer_numerics_arm(t, false);
    TY_RETURN_IF_ERROR(s);
    t->progress.step++;
  }
  fprintf(stderr, "trainyard train: check-numerics: the checked replay of step %lld found every "
                  "value finite (a fault that does not repeat?)\n",
          (long long)bad);
  return TY_OK;
}

ty_status_t ty_trainer_run(ty_app_t *app, const ty_train_config_t *config) {
  ty_trainer_t t;
  memset(&t, 0, sizeof(t));
  t.cfg = *config;
  ty_trainer_runner_init(&t);
  t.app = app;
  t.progress.last_val_loss = NAN;
  t.progress.last_eval_acc = NAN;
  t.shape.B = config->batch_size;
  t.shape.accum = config->grad_accum;
  t.par.world = 1;
  t.par.tp = t.par.dp = t.par.cp = 1; /* until the world's layout says otherwise */
  t.report.live_line = isatty(fileno(stderr));
  /* A console that went away (`train | tee log`, tee killed) must not stop
   * the run or its final save: console writes just fail from then on. */
  ty_stop_signals_ignore_sigpipe();
  char resume_dir[TY_CFG_PATH_MAX] = "";
  ty_status_t s = ty_trainer_dist_open(&t);
  if (!s) s = ty_trainer_pp_layout(&t.pp_runner);
  if (!s) s = ty_trainer_det_check(&t); /* before --out is touched */
  if (t.par.world > 1) {
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "rank %d: ", t.par.rank);
    ty_app_set_error_prefix(prefix);
    /* Several ranks on one terminal: plain lines, from rank 0 only. */
    t.report.live_line = false;
  }
  t.shape.rows_per_step = (int64_t)t.par.dp * t.shape.B * t.shape.accum; /* the global batch */
  if (!s) s = ty_trainer_setup(&t, resume_dir, sizeof(resume_dir));
  /* Refused at start-up (or nothing to train): nothing of this run stays
   * in --out. */
  if (s) ty_trainer_discard_fresh(&t);
  if (s && t.folder.done_already && ty_status_code(s) == TY_CODE_CANCELLED) {
    ty_status_free(s); /* a finished run: nothing built, trained or written */
    ty_trainer_destroy(&t);
    return TY_OK;
  }
  if (!s && config->plan_only) {
    if (t.par.rank == 0) {
      char limit[64] = "the device's memory";
      if (config->memory_limit[0]) snprintf(limit, sizeof(limit), "--memory-limit %s",
                                            config->memory_limit);
      fprintf(stderr, "trainyard train: --plan-only: the plan of %s fits %s; nothing was "
                      "allocated or written\n",
              t.par.world > 1 ? "every rank" : "the run", limit);
    }
    ty_trainer_destroy(&t);
    return TY_OK;
  }

  /* From here to the exit SIGINT/SIGTERM/SIGHUP finish the step and save
   * (stop_signals.h: recorded by the waiter thread, never by a handler). */
  ty_stop_signals_clear();
  ty_stop_signals_arm();
  double started = ty_now();
  int64_t steps_this_run = 0, saved_step = -1;
  bool in_loop = !s, control_stop = false;
  while (!s && !control_stop && t.progress.step < t.shape.total_steps && !ty_trainer_stopping(&t)) {
    ty_trainer_dist_fault(&t);
    double t0 = ty_now(), loss = 0, norm = 0;
    int64_t tokens_before = t.progress.tokens_seen;
    bool checked = false;
    s = ty_trainer_numerics_begin(&t, &checked);
    if (!s) s = ty_trainer_step(&t, &loss, &norm);
    if (s) break;
    ty_debug_sleep("TRAINYARD_DEBUG_STEP_SLEEP_MS");
    double dt = ty_now() - t0;
    if (checked) {
      /* the first non-finite node: stop before anything saves this state */
      s = ty_trainer_numerics_after(&t, dt);
      if (s) {
        s = ty_status_annotate(s, "stopping without saving a checkpoint (the last one is kept)");
        in_loop = false;
        break;
      }
    } else if (t.checks.numerics) {
      ty_trainer_numerics_plain(&t, dt);
    }
    t.progress.train_seconds += dt;
    t.progress.step++;
    steps_this_run++;
    if (!isfinite(loss) || !isfinite(norm)) {
      if (t.checks.numerics && !checked) {
        const int64_t bad = t.progress.step;
        s = ty_trainer_replay_checked(&t, bad);
        if (s) {
          s = ty_status_annotate(s, "step %lld: the loss is %g and the gradient norm %g; "
                                    "stopping without saving a checkpoint (the last one is kept)",
                                 (long long)bad, loss, norm);
          in_loop = false;
          break;
        }
      }
      s = ty_status_make(TY_CODE_ABORTED,
                         "step %lld: the loss is %g and the gradient norm %g; stopping without "
                         "saving a checkpoint (lower --lr, raise --warmup-steps, or check the "
                         "data); the last good checkpoint is kept",
                         (long long)t.progress.step, loss, norm);
      in_loop = false; /* every rank saw the same summed loss and norm */
      break;
    }
    t.progress.last_loss = loss;
    t.progress.last_grad_norm = norm;
    double tok_s = dt > 0 ? (double)(t.progress.tokens_seen - tokens_before) / dt : 0;
    double per_step = (ty_now() - started) / (double)steps_this_run;
    if (t.par.rank == 0) {
      ty_train_metrics_step(&t, loss, norm, ty_trainer_lr(&t, t.progress.step - 1), tok_s,
                            per_step);
    }
    s = ty_trainer_after_step(&t, &saved_step);
    ty_train_control_update(&t, tok_s, per_step);
    /* `trainyard control` requests, taken between steps (on every rank). */
    if (!s) s = ty_train_control_poll(&t, &saved_step, &control_stop);
  }
  /* A stop asked by `trainyard control` or by SIGINT/SIGTERM/SIGHUP (on any
   * rank): the checkpoint of this step, then the exit. */
  int stop = ty_trainer_stopping(&t);
  if (!s && (control_stop || stop)) {
    if (t.par.rank == 0) {
      ty_train_metrics_line_end(&t);
      fprintf(stderr, "trainyard train: %s%s after step %lld: %s\n",
              control_stop ? "stop requested by 'trainyard control'" : ty_stop_signals_name(stop),
              control_stop ? "" : " received", (long long)t.progress.step,
              saved_step == t.progress.step ? "saved, stopping" : "saving and stopping");
    }
    if (saved_step != t.progress.step) s = ty_trainer_save_all(&t, "the checkpoint of the stop");
    if (!s) saved_step = t.progress.step;
    if (control_stop) ty_train_control_stopped(&t, s);
  }
  if (!s && t.par.pp > 1) s = ty_trainer_pp_report(&t.pp_runner);
  if (t.report.metrics || t.report.tensorboard) {
    ty_train_metrics_line_end(&t);
    if (!s) s = ty_train_metrics_summary(&t, ty_now() - started);
  }
  /* A rank that did not arrive at a collective (start-up included) hangs
   * or died: MPI_Finalize would wait for it forever. */
  const bool missing = s && ty_status_code(s) == TY_CODE_DEADLINE_EXCEEDED;
  if (s && (in_loop || missing) && t.par.world > 1 && !t.report.control_abort) {
    /* A rank that failed mid-run (or learned that another did) cannot leave
     * the others in a collective: say why, then end every rank. */
    fprintf(stderr, "%strainyard train: %s: %s\n", ty_app_error_prefix(),
            ty_code_name(ty_status_code(s)), ty_status_message(s));
    ty_dist_abort(t.par.dist, 1);
  }
  /* --min-eval-acc: judged after the checkpoint and the summary are written
   * (on rank 0, which evaluates). */
  if (!s && t.par.rank == 0) s = ty_train_eval_check(&t);
  ty_trainer_destroy(&t);
  /* Still armed: more signals during the save, the summary and the exit
   * that follows must not cut the wrap-up short or turn a clean stop into
   * a death by SIGTERM (SIGKILL still ends it at once). */
  return s;
}
