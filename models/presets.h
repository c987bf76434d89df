/* Model presets for training from scratch, the config.json writer, and
 * parameter initialization as transformers initializes these families. */
#ifndef TY_MODELS_PRESETS_H_
#define TY_MODELS_PRESETS_H_

#include <stdint.h>

#include "graph/runtime/session.h"
#include "models/config.h"
#include "models/llm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills `out` for preset `name` (see ty_model_preset_names(): gpt2-tiny up
 * to llama-7b) with the vocabulary size taken from the data. NOT_FOUND
 * listing the presets for an unknown name. */
ty_status_t ty_model_preset(const char *name, int64_t vocab_size, int64_t bos_id,
                            int64_t eos_id, ty_model_config_t *out_config);

/* Comma-separated preset names, for help texts. Static storage. */
const char *ty_model_preset_names(void);

/* Writes a Hugging Face config.json for `config` (loadable by transformers'
 * AutoModelForCausalLM and by ty_model_config_load) to `path`, atomically
 * (temporary file, fsync, rename). */
ty_status_t ty_model_config_write(const ty_model_config_t *config, const char *path);

/* The text ty_model_config_write writes, as a heap string the caller frees;
 * NULL when memory runs out. ty_model_config_parse of it gives `config`
 * back, field for field. */
char *ty_model_config_dumps(const ty_model_config_t *config);

/* Binds freshly initialized weights to every parameter of `model` in
 * `session`, as transformers initializes the family: normal(0, 0.02) for
 * matrices and embeddings (GPT-2's residual projections scaled by
 * 1/sqrt(2 n_layer)), ones for norm weights, zeros for biases. Deterministic
 * for a seed, whatever the parameter order. */
ty_status_t ty_llm_init_weights(const ty_llm_t *model, ty_session_t *session, uint64_t seed);

/* Number of trained parameters (tied embeddings counted once). */
int64_t ty_llm_parameter_count(const ty_llm_t *model);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_PRESETS_H_ */
