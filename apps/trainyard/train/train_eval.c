/* Task accuracy during training (see train_eval.h). */
#include "train_eval.h"

#include <math.h>
#include <stdlib.h>

#include "eval/eval.h"
#include "metrics/jsonl.h"
#include "metrics/tensorboard.h"
#include "models/chat_template.h"
#include "train_metrics.h"
#include "trainer.h"

typedef struct ty_train_eval_t {
  ty_eval_set_t *set;
  ty_eval_scorer_t *scorer;
  ty_chat_template_t *chat;
  int64_t last_step; /* -1 before the first */
  ty_eval_summary_t last;
} ty_train_eval_t;

void ty_train_eval_close(ty_trainer_t *t) {
  ty_train_eval_t *e = t->report.task_eval;
  if (!e) return;
  ty_eval_scorer_destroy(e->scorer);
  ty_eval_set_destroy(e->set);
  ty_chat_template_destroy(e->chat);
  free(e);
  t->report.task_eval = NULL;
}

ty_status_t ty_train_eval_open(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  if (!c->eval_data[0]) return TY_OK;
  ty_train_eval_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  t->report.task_eval = e;
  e->last_step = -1;
  /* "messages" lines need the fine-tuned model's chat template. */
  if (c->model[0]) {
    ty_status_t s = ty_chat_template_load(c->model, NULL, &e->chat);
    if (s && ty_status_code(s) != TY_CODE_NOT_FOUND) return ty_status_annotate(s, "--model");
    ty_status_free(s);
  }
  ty_eval_set_options_t so = {.option = "--eval-data", .choices = c->eval_choices,
                              .tokenizer = t->tok.tokenizer, .chat_template = e->chat,
                              .model_dir = c->model[0] ? c->model : "the run"};
  TY_RETURN_IF_ERROR(ty_eval_set_load(c->eval_data, &t->model_config, &so, &e->set));
  ty_eval_scorer_options_t o = {.dtype = t->shape.dtype, .compute_dtype = t->shape.compute_dtype,
                                .batch = t->shape.B, .weights_from = t->graphs.s_train,
                                .cache_dir = c->cache_dir, .retry_failed = c->retry_failed,
                                .fallback_device = t->fallback,
                                .eos_id = t->model_config.eos_token_id,
                                .deterministic = c->deterministic};
  return ty_status_annotate(ty_eval_scorer_create(t->device, &t->model_config, e->set, &o,
                                                  &e->scorer),
                            "--eval-data %s", c->eval_data);
}

ty_status_t ty_train_eval_run(ty_trainer_t *t) {
  ty_train_eval_t *e = t->report.task_eval;
  if (!e || e->last_step == t->progress.step) return TY_OK;
  TY_RETURN_IF_ERROR(ty_eval_score(e->scorer, e->set, t->tok.tokenizer));
  e->last_step = t->progress.step;
  e->last = ty_eval_summarize(e->set);
  t->progress.last_eval_acc = e->last.accuracy;
  const ty_eval_summary_t *m = &e->last;
  ty_train_metrics_line_end(t);
  fprintf(stderr, "step %lld: eval accuracy %.4f (%s, %zu lines; first-token %.4f, "
          "log-likelihood %.4f per token)\n", (long long)t->progress.step, m->accuracy,
          e->set->choices ? "choices" : "exact match", m->lines, m->first_token_match,
          m->mean_logprob);
  ty_jsonl_field_t fields[] = {
      ty_jsonl_int("step", t->progress.step), ty_jsonl_real("eval_acc", m->accuracy),
      ty_jsonl_real(e->set->choices ? "eval_choice_acc" : "eval_exact_match", m->accuracy),
      ty_jsonl_real("eval_first_token", m->first_token_match),
      ty_jsonl_real("eval_logprob", m->mean_logprob)};
  /* Like every metrics record: a failed write of the log never stops training. */
  ty_status_free(
      ty_jsonl_writer_write(t->report.metrics, fields, sizeof(fields) / sizeof(fields[0])));
  double now = ty_tensorboard_now();
  ty_status_free(ty_tensorboard_writer_add_scalar(t->report.tensorboard, "eval/accuracy",
                                                  t->progress.step, m->accuracy, now));
  ty_status_free(ty_tensorboard_writer_add_scalar(t->report.tensorboard, "eval/first_token_match",
                                                  t->progress.step, m->first_token_match, now));
  ty_status_free(ty_tensorboard_writer_add_scalar(t->report.tensorboard, "eval/mean_logprob",
                                                  t->progress.step, m->mean_logprob, now));
  return TY_OK;
}

void ty_train_eval_summary(const ty_trainer_t *t, FILE *f) {
  const ty_train_eval_t *e = t->report.task_eval;
  if (!e) return;
  if (e->last_step < 0) {
    fprintf(f, "final eval accuracy: n/a (not scored: the run stopped before its end)\n");
    return;
  }
  const ty_eval_summary_t *m = &e->last;
  fprintf(f, "final eval accuracy: %.6f (%s, %zu lines of %s, at step %lld)\n", m->accuracy,
          e->set->choices ? "choices" : "exact match", m->lines, e->set->path,
          (long long)e->last_step);
  fprintf(f, "eval first-token match: %.6f; majority baseline %.6f; log-likelihood %.6f per "
          "token\n", m->first_token_match, m->majority_baseline, m->mean_logprob);
  if (t->cfg.min_eval_acc > 0) {
    fprintf(f, "min eval accuracy: %.6f: %s\n", t->cfg.min_eval_acc,
            m->accuracy >= t->cfg.min_eval_acc ? "passed" : "FAILED");
  }
}

ty_status_t ty_train_eval_check(const ty_trainer_t *t) {
  const ty_train_eval_t *e = t->report.task_eval;
  if (!e || !(t->cfg.min_eval_acc > 0) || e->last_step < 0) return TY_OK;
  if (e->last.accuracy >= t->cfg.min_eval_acc) return TY_OK;
  return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                        "the final eval accuracy %.4f on %s is below --min-eval-acc %.4f (step "
                        "%lld; the checkpoint is saved, see %s/summary.txt)",
                        e->last.accuracy, t->cfg.eval_data, t->cfg.min_eval_acc,
                        (long long)e->last_step, t->cfg.out);
}
