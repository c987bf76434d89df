/* One sequence at a time on the generation engine (models/engine.h): KV-cache
 * decoding of a GPT-2 or Llama-family model on one device, greedy or
 * sampled, for `trainyard generate --prompt` and the samples `trainyard
 * train --sample-tokens` prints.
 *
 * It is an engine of one slot whose prefill chunk is the whole prompt, so
 * the prompt runs in one graph and every new token in the decode graph. The
 * weights come from a model folder (ty_generator_load_weights) or from a
 * session that already holds them on the same device (options.weights_from:
 * a training session, whose parameters the generator then reads as they
 * are, without a copy).
 *
 * Ownership: the generator owns its engine; destroy it before the device
 * and before the weights_from session's device. Not thread-safe.
 * Errors: statuses naming the model, the device or the option at fault. */
#ifndef TY_MODELS_GENERATOR_H_
#define TY_MODELS_GENERATOR_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/runtime/numerics.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "models/checkpoint.h"
#include "models/config.h"
#include "models/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_generator_options_t {
  ty_dtype_t dtype;   /* parameters and activations */
  /* matmuls and attention: TY_DTYPE_INVALID or == dtype unless mixed
   * precision (ty_llm_options_t.compute_dtype) */
  ty_dtype_t compute_dtype;
  int64_t prompt_len; /* P >= 1 tokens, fixed: the prefill graph's length */
  int64_t max_new;    /* new tokens at most, >= 1; P + max_new <= max_positions */
  /* A session on the same device whose STATE values hold the parameters
   * under their Hugging Face names, dtype and shapes (the training step's):
   * the generator shares them. NULL: load them with
   * ty_generator_load_weights. */
  const ty_session_t *weights_from;
  const char *cache_dir; /* on-disk compile cache, or NULL */
  bool retry_failed;     /* compile again over a cached failure */
  /* The fallback device of a mixed run (ty_session_options_t), with which
   * weights_from was created; NULL: none. */
  ty_device_t *fallback_device;
  bool check_numerics; /* ty_engine_options_t.check_numerics */
  bool deterministic;  /* ty_engine_options_t.deterministic */
  int64_t speculate;   /* ty_engine_options_t.speculate (0: off) */
} ty_generator_options_t;

typedef struct ty_generator_t ty_generator_t;

/* Builds and compiles the engine's graphs. INVALID_ARGUMENT when
 * prompt_len + max_new exceeds the model's positions (naming both); the
 * session's errors when the device cannot run the graphs. */
ty_status_t ty_generator_create(ty_device_t *device, const ty_model_config_t *config,
                                const ty_generator_options_t *options,
                                ty_generator_t **out_generator);
void ty_generator_destroy(ty_generator_t *generator);

/* Loads the weights of the model folder `dir` (safetensors) as
 * ty_llm_load_weights_with does (models/checkpoint.h): NaN/Inf weights are
 * refused unless options->allow_nonfinite (options may be NULL: refuse),
 * and counted in *out_report (may be NULL). */
ty_status_t ty_generator_load_weights(ty_generator_t *generator, const char *dir,
                                      const ty_llm_load_options_t *options,
                                      ty_llm_load_report_t *out_report);

typedef struct ty_generation_t {
  int64_t *ids;           /* the new tokens (caller-owned buffer of max_new) */
  int64_t count;          /* how many were made */
  double prefill_seconds; /* host wall time until the first new token */
  double decode_seconds;  /* host wall time of the rest */
} ty_generation_t;

/* Continues `prompt` (prompt_len ids, each below the vocabulary size) by up
 * to max_new tokens into out->ids; with stop_eos >= 0 it stops after that
 * token. INVALID_ARGUMENT for an id outside the vocabulary. */
/* ty_engine_numerics_finding of the generator's engine. */
const ty_numerics_finding_t *ty_generator_numerics_finding(const ty_generator_t *generator,
                                                           uint32_t *out_node_count);

ty_status_t ty_generator_run(ty_generator_t *generator, const int64_t *prompt,
                             const ty_sampling_t *sampling, int64_t stop_eos,
                             ty_generation_t *out);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_GENERATOR_H_ */
