/* What an evaluation reports (eval.h): the JSON report of `eval --out`
 * (docs/formats.md, "Evaluation reports") and the printed table. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "eval.h"
#include "eval_report.h"

static json_t *ty_eval_ids(const int64_t *ids, int64_t n) {
  json_t *a = json_array();
  for (int64_t i = 0; a && i < n; ++i) json_array_append_new(a, json_integer(ids[i]));
  return a;
}

/* NaN (a metric that does not apply) is null in JSON. */
static json_t *ty_eval_real(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *ty_eval_item_json(const ty_eval_set_t *set, const ty_eval_item_t *it) {
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "line", json_integer((json_int_t)it->line));
  if (it->id) json_object_set(o, "id", it->id);
  json_object_set_new(o, "prompt_tokens", json_integer(it->prompt_len));
  size_t a = it->answer;
  if (it->cont_text[a]) {
    json_object_set_new(o, "expected", json_string(it->cont_text[a]));
  } else {
    json_object_set_new(o, "expected_ids", ty_eval_ids(it->cont[a], it->cont_len[a]));
  }
  json_object_set_new(o, "expected_tokens", json_integer(it->cont_len[a]));
  json_object_set_new(o, "logprob", json_real(it->logprob[a]));
  json_object_set_new(o, "mean_logprob", json_real(it->logprob[a] / (double)it->cont_len[a]));
  json_object_set_new(o, "first_token", json_integer(it->first_token));
  json_object_set_new(o, "first_token_match", json_boolean(it->first_token_match));
  if (set->generate) {
    json_object_set_new(o, "generated_ids", ty_eval_ids(it->generated, it->generated_len));
    if (it->generated_text) json_object_set_new(o, "generated", json_string(it->generated_text));
    json_object_set_new(o, "exact_match", json_boolean(it->exact_match));
  }
  if (set->choices) {
    json_t *lps = json_array();
    for (size_t k = 0; lps && k < it->cont_count; ++k) {
      json_array_append_new(lps, json_real(it->logprob[k]));
    }
    json_object_set_new(o, "choice_logprobs", lps);
    json_object_set_new(o, "answer", json_integer((json_int_t)it->answer));
    json_object_set_new(o, "chosen", json_integer((json_int_t)it->chosen));
    json_object_set_new(o, "correct", json_boolean(it->chosen == it->answer));
  }
  return o;
}

json_t *ty_eval_summary_json(const ty_eval_summary_t *m) {
  return json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                   "lines", (json_int_t)m->lines, "tokens", (json_int_t)m->tokens,
                   "accuracy", ty_eval_real(m->accuracy),
                   "exact_match", ty_eval_real(m->exact_match),
                   "first_token_match", ty_eval_real(m->first_token_match),
                   "choice_accuracy", ty_eval_real(m->choice_accuracy),
                   "majority_baseline", ty_eval_real(m->majority_baseline),
                   "mean_logprob", ty_eval_real(m->mean_logprob),
                   "perplexity", ty_eval_real(m->perplexity));
}

json_t *ty_eval_report_json(const ty_eval_report_meta_t *meta, const ty_eval_set_t *set,
                            const ty_eval_dataset_result_t *dataset) {
  json_t *root = json_pack("{s:s, s:s, s:s, s:i}", "model", meta->model, "backend",
                           meta->backend, "dtype", meta->dtype, "format_version", 1);
  if (!root) return NULL;
  if (set) {
    ty_eval_summary_t m = ty_eval_summarize(set);
    json_t *items = json_array();
    for (size_t i = 0; items && i < set->count; ++i) {
      json_array_append_new(items, ty_eval_item_json(set, &set->items[i]));
    }
    json_object_set_new(root, "data", json_string(set->path));
    json_object_set_new(root, "mode", json_string(set->choices ? "choices" : "completion"));
    json_object_set_new(root, "metrics", ty_eval_summary_json(&m));
    json_object_set_new(root, "items", items);
  }
  if (dataset) {
    json_object_set_new(root, "dataset",
                        json_pack("{s:s, s:s, s:I, s:f, s:f, s:f}", "path", meta->dataset,
                                  "split", dataset->split, "rows", (json_int_t)dataset->rows,
                                  "tokens", dataset->tokens, "mean_nll", dataset->mean_nll,
                                  "perplexity", dataset->perplexity));
  }
  return root;
}

void ty_eval_print_table(FILE *out, const ty_eval_report_meta_t *meta, const ty_eval_set_t *set,
                         const ty_eval_dataset_result_t *dataset) {
  fprintf(out, "eval of %s on %s (%s)\n", meta->model, meta->backend, meta->dtype);
  if (set) {
    ty_eval_summary_t m = ty_eval_summarize(set);
    size_t n = m.lines;
    fprintf(out, "  %s: %zu lines, %s\n", set->path, n,
            set->choices ? "multiple choice" : "prompt -> completion");
    fprintf(out, "  %-22s %s\n", "metric", "value");
    if (set->generate) {
      fprintf(out, "  %-22s %.4f (%.0f/%zu)\n", "exact match", m.exact_match,
              m.exact_match * (double)n, n);
    }
    if (set->choices) {
      fprintf(out, "  %-22s %.4f (%.0f/%zu)\n", "choice accuracy", m.choice_accuracy,
              m.choice_accuracy * (double)n, n);
    }
    fprintf(out, "  %-22s %.4f (%.0f/%zu)\n", "first-token match", m.first_token_match,
            m.first_token_match * (double)n, n);
    fprintf(out, "  %-22s %.4f\n", "majority baseline", m.majority_baseline);
    fprintf(out, "  %-22s %.6f per token (%lld tokens)\n", "mean log-likelihood",
            m.mean_logprob, (long long)m.tokens);
    fprintf(out, "  %-22s %.4f\n", "perplexity", m.perplexity);
  }
  if (dataset) {
    fprintf(out, "  %s (%s split): %llu rows, %.0f tokens, mean NLL %.6f, perplexity %.4f\n",
            meta->dataset, dataset->split, (unsigned long long)dataset->rows, dataset->tokens,
            dataset->mean_nll, dataset->perplexity);
  }
}
