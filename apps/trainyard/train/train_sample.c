/* Samples of the weights being trained (see train_sample.h). */
#include "train_sample.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/jsonl.h"
#include "models/generator.h"
#include "models/tokenizer.h"
#include "train_metrics.h"
#include "trainer.h"

typedef struct ty_train_sample_t {
  ty_generator_t *generator;
  int64_t *prompt, prompt_len;
  int64_t *ids; /* sample_tokens */
  int64_t last_step; /* the step of the last sample; -1 before the first */
} ty_train_sample_t;

void ty_train_sample_close(ty_trainer_t *t) {
  ty_train_sample_t *smp = t->report.sample;
  if (!smp) return;
  ty_generator_destroy(smp->generator);
  free(smp->prompt);
  free(smp->ids);
  free(smp);
  t->report.sample = NULL;
}

/* The prompt's ids: --sample-prompt encoded, or the end-of-text token. */
static ty_status_t ty_sample_prompt(ty_trainer_t *t, ty_train_sample_t *smp) {
  const ty_train_config_t *c = &t->cfg;
  if (!c->sample_prompt[0]) {
    smp->prompt = malloc(sizeof(int64_t));
    if (!smp->prompt) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    smp->prompt[0] = ty_dataset_eos_id(t->feed.train_data); /* where documents start */
    smp->prompt_len = 1;
    return TY_OK;
  }
  if (!t->tok.tokenizer) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--sample-prompt needs a tokenizer to encode it: pass --tokenizer "
                          "FILE (the one the data was prepared with), or leave the prompt out "
                          "(the sample then starts at the end-of-text token)");
  }
  uint32_t *ids = NULL;
  size_t n = 0;
  TY_RETURN_IF_ERROR(ty_tokenizer_encode(t->tok.tokenizer, c->sample_prompt,
                                         strlen(c->sample_prompt), 0, &ids, &n));
  ty_status_t s = n ? TY_OK
                    : ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                     "--sample-prompt '%s' encodes to no tokens", c->sample_prompt);
  smp->prompt = s ? NULL : malloc(n * sizeof(int64_t));
  if (!s && !smp->prompt) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; !s && i < n; ++i) smp->prompt[i] = ids[i];
  smp->prompt_len = (int64_t)n;
  free(ids);
  return s;
}

ty_status_t ty_train_sample_open(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  if (c->sample_tokens <= 0) return TY_OK;
  ty_train_sample_t *smp = calloc(1, sizeof(*smp));
  if (!smp) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  t->report.sample = smp;
  smp->last_step = -1;
  smp->ids = malloc((size_t)c->sample_tokens * sizeof(int64_t));
  if (!smp->ids) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  TY_RETURN_IF_ERROR(ty_sample_prompt(t, smp));
  ty_generator_options_t o = {.dtype = t->shape.dtype, .compute_dtype = t->shape.compute_dtype,
                              .prompt_len = smp->prompt_len,
                              .max_new = c->sample_tokens, .weights_from = t->graphs.s_train,
                              .cache_dir = c->cache_dir, .retry_failed = c->retry_failed,
                              .fallback_device = t->fallback,
                              .deterministic = c->deterministic};
  ty_status_t s = ty_generator_create(t->device, &t->model_config, &o, &smp->generator);
  return ty_status_annotate(s, "--sample-tokens %lld", (long long)c->sample_tokens);
}

ty_status_t ty_train_sample_run(ty_trainer_t *t) {
  ty_train_sample_t *smp = t->report.sample;
  if (!smp || smp->last_step == t->progress.step) return TY_OK;
  smp->last_step = t->progress.step;
  ty_sampling_t greedy = {.greedy = true};
  ty_generation_t gen = {.ids = smp->ids};
  TY_RETURN_IF_ERROR(ty_generator_run(smp->generator, smp->prompt, &greedy, -1, &gen));
  /* The text, when there is a tokenizer and it can decode every id (a
   * model's vocabulary may be larger than its tokenizer's). */
  char *text = NULL, *prompt_text = NULL;
  size_t text_size = 0, prompt_size = 0;
  if (t->tok.tokenizer) {
    uint32_t *ids = malloc((size_t)(gen.count + smp->prompt_len) * sizeof(uint32_t));
    if (!ids) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    for (int64_t i = 0; i < smp->prompt_len; ++i) ids[i] = (uint32_t)smp->prompt[i];
    for (int64_t i = 0; i < gen.count; ++i) ids[smp->prompt_len + i] = (uint32_t)gen.ids[i];
    ty_status_t d = ty_tokenizer_decode(t->tok.tokenizer, ids, (size_t)smp->prompt_len, 0,
                                        &prompt_text, &prompt_size);
    if (!d) {
      d = ty_tokenizer_decode(t->tok.tokenizer, ids + smp->prompt_len, (size_t)gen.count, 0, &text,
                              &text_size);
    }
    if (d) {
      ty_train_metrics_line_end(t);
      fprintf(stderr, "step %lld: the sample does not decode (%s); logged as ids\n",
              (long long)t->progress.step, ty_status_message(d));
      ty_status_free(d);
    }
    free(ids);
  }
  /* stderr: the text as a JSON string, so that newlines stay on one line. */
  json_t *shown = text ? json_stringn(text, text_size) : NULL;
  json_t *shown_prompt = prompt_text ? json_stringn(prompt_text, prompt_size) : NULL;
  char *line = shown ? json_dumps(shown, JSON_ENCODE_ANY) : NULL;
  char *prompt_line = shown_prompt ? json_dumps(shown_prompt, JSON_ENCODE_ANY) : NULL;
  ty_train_metrics_line_end(t);
  if (line && prompt_line) {
    fprintf(stderr, "step %lld: sample %s -> %s\n", (long long)t->progress.step, prompt_line, line);
  } else {
    fprintf(stderr, "step %lld: sample ids", (long long)t->progress.step);
    for (int64_t i = 0; i < gen.count; ++i) fprintf(stderr, " %lld", (long long)gen.ids[i]);
    fputc('\n', stderr);
  }
  ty_jsonl_field_t fields[5];
  size_t n = 0;
  fields[n++] = ty_jsonl_int("step", t->progress.step);
  fields[n++] = ty_jsonl_ints("sample_prompt_ids", smp->prompt, (size_t)smp->prompt_len);
  fields[n++] = ty_jsonl_ints("sample_ids", gen.ids, (size_t)gen.count);
  /* Text that is not UTF-8 (a cut multi-byte character) stays out of the
   * JSON line; the ids are always there. */
  if (shown && shown_prompt) {
    fields[n++] = ty_jsonl_string("sample_prompt", json_string_value(shown_prompt));
    fields[n++] = ty_jsonl_string("sample", json_string_value(shown));
  }
  /* Like every metrics record: a failed write of the log never stops
   * training. */
  ty_status_free(ty_jsonl_writer_write(t->report.metrics, fields, n));
  free(line);
  free(prompt_line);
  json_decref(shown);
  json_decref(shown_prompt);
  free(text);
  free(prompt_text);
  return TY_OK;
}
