/* The report of an evaluation (eval_report.c): JSON and a printed table,
 * shared by `trainyard eval` and the training run's metrics. */
#ifndef TY_APPS_TRAINYARD_EVAL_EVAL_REPORT_H_
#define TY_APPS_TRAINYARD_EVAL_EVAL_REPORT_H_

#include <jansson.h>
#include <stdio.h>

#include "eval.h"

typedef struct ty_eval_report_meta_t {
  const char *model, *backend, *dtype;
  const char *dataset; /* --dataset, or NULL */
} ty_eval_report_meta_t;

/* The summary's numbers as a JSON object (NaN: null). New reference. */
json_t *ty_eval_summary_json(const ty_eval_summary_t *summary);

/* The whole report: metadata, the set's metrics and items (set may be
 * NULL), the dataset's perplexity (may be NULL). New reference, or NULL
 * when out of memory. */
json_t *ty_eval_report_json(const ty_eval_report_meta_t *meta, const ty_eval_set_t *set,
                            const ty_eval_dataset_result_t *dataset);

void ty_eval_print_table(FILE *out, const ty_eval_report_meta_t *meta, const ty_eval_set_t *set,
                         const ty_eval_dataset_result_t *dataset);

#endif /* TY_APPS_TRAINYARD_EVAL_EVAL_REPORT_H_ */
