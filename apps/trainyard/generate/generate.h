/* `trainyard generate`'s two modes: one prompt (cmd_generate.c), or a JSONL
 * file of prompts run through the batching engine with its results in
 * another (generate_batch.c), for evaluations. */
#ifndef TY_APPS_TRAINYARD_GENERATE_H_
#define TY_APPS_TRAINYARD_GENERATE_H_

#include <stdbool.h>
#include <stdint.h>

#include "app.h"
#include "hal/dtype.h"
#include "models/sampler.h"

typedef struct ty_generate_batch_args_t {
  const char *model_dir, *backend, *input, *output;
  ty_dtype_t dtype;         /* parameters */
  ty_dtype_t compute_dtype; /* matmuls and attention (== dtype unless mixed) */
  int64_t max_new;  /* --max-new-tokens, -1: every line gives its own */
  int64_t max_batch, ctx, chunk; /* ctx, chunk: 0 for the defaults */
  int64_t prefill_budget;         /* --prefill-budget, 0: one chunk a step */
  ty_sampling_t sampling; /* the defaults of every line */
  bool stop_at_eos;
  bool allow_nonfinite;   /* load NaN/Inf weights with a warning */
  bool check_numerics;    /* the first non-finite node of any run, named */
  bool deterministic;     /* batch-invariant kernels (ty_engine_options_t) */
  int64_t speculate;      /* drafted tokens per step (ty_engine_options_t), 0: off */
} ty_generate_batch_args_t;

/* Reads every line of a->input, checks them all, generates them with the
 * engine (up to max_batch at once) and writes a->output atomically, one
 * result line per input line, in order. Errors name the input line; an
 * --output that would overwrite --model or --input is refused first. */
ty_status_t ty_generate_batch(ty_app_t *app, const ty_generate_batch_args_t *a);

#endif /* TY_APPS_TRAINYARD_GENERATE_H_ */
