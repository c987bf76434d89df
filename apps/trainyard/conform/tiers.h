/* The conformance tiers beyond single ops (`trainyard conform --tier model`,
 * `--tier step`, `--bisect`): whole models on a backend against another
 * device or the f64 reference, so a plugin author sees whether the ops that
 * pass alone also make a model, a training run, and which kernel breaks one.
 *
 *  - model: each fixture model's forward (logits, loss) and every
 *    parameter's gradient, compared tensor by tensor (NMSE, largest absolute
 *    error and where) against the f64 reference (or --against URI);
 *  - step:  N training steps (AdamW, clipping) from the same weights and
 *    batches, comparing the loss (and gradient norm) of every step against
 *    --against (default cpu);
 *  - bisect: the model's forward and backward graph run on both sides with
 *    every intermediate value read; names the first node (in execution
 *    order) whose output diverges beyond tolerance, with its inputs' errors.
 *
 * Fixture models are built in (tiny configs of each family: gpt2, llama with
 * GQA, llama3 RoPE scaling, mistral with a sliding window, qwen2 with qkv
 * biases) or read from --model DIR's config.json; weights, tokens and
 * targets are drawn from the run's seed and rounded to the storage dtype, so
 * both sides see the same values. */
#ifndef TY_APPS_TRAINYARD_CONFORM_TIERS_H_
#define TY_APPS_TRAINYARD_CONFORM_TIERS_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/device.h"

#define TY_TIER_MAX_MODELS 16
/* The model tiers' seed when --seed is not given: fixed, so that a kernel
 * error near a tier's bound fails every run or none (a clock seed made a
 * 1e-3 error pass most runs and fail some); printed in the header. */
#define TY_TIER_DEFAULT_SEED 1234u

typedef struct ty_tier_args_t {
  const char *models[TY_TIER_MAX_MODELS]; /* built-in names or folders; none: all built-in */
  uint32_t model_count;
  ty_dtype_t dtype;  /* parameter and compute dtype (f32, bf16, f16) */
  uint64_t seed;
  int64_t steps;     /* step tier */
  double tolerance;  /* 0: the documented default of the tier and dtype */
  bool json, only_failures;
} ty_tier_args_t;

/* The built-in fixture names, comma-separated (for help and errors). */
const char *ty_tier_fixture_names(void);

/* Each runs the tier on `device` against `against` (NULL: the f64
 * reference, in process), prints a table (or JSON) and a summary line, and
 * returns the exit code: 0 when everything is within tolerance, 1 on a
 * failure or runtime error, 2 for a bad --model. */
int ty_conform_tier_model(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a);
int ty_conform_tier_step(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a);
int ty_conform_bisect(ty_device_t *device, ty_device_t *against, const ty_tier_args_t *a);

#endif /* TY_APPS_TRAINYARD_CONFORM_TIERS_H_ */
