/* Moving a model's parameters between Hugging Face safetensors checkpoints
 * and a session's device-resident state, with names and layouts unchanged. */
#ifndef TY_MODELS_CHECKPOINT_H_
#define TY_MODELS_CHECKPOINT_H_

#include <stdint.h>

#include "graph/session.h"
#include "models/llm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks the checkpoint in `model_dir` (model.safetensors or a sharded
 * index) against the parameter set `config` implies, before any graph is
 * built: every parameter present with its shape and a float dtype, and no
 * tensor the model does not use. Accepts what transformers accepts: GPT-2
 * names without the "transformer." prefix, a tied lm_head that is absent
 * (or present, then ignored), and the non-parameter buffers attn.bias /
 * attn.masked_bias / rotary_emb.inv_freq. Stops at the first missing tensor,
 * so a config with far more layers than the checkpoint costs nothing.
 * Errors name the folder and tensor: NOT_FOUND for a missing parameter,
 * INVALID_ARGUMENT for a shape or dtype mismatch (both shapes) or a tensor
 * the model does not use, DATA_LOSS / FAILED_PRECONDITION from the reader
 * (corrupt file, pickle checkpoint). */
ty_status_t ty_llm_check_weights(const ty_model_config_t *config, const char *model_dir);

/* Loads every parameter of `model` from the model folder into `session`,
 * converting floats to the graph's dtype, after the checks of
 * ty_llm_check_weights against the model's config. */
ty_status_t ty_llm_load_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *model_dir);

/* Reads every parameter from `session` and writes them to `model_dir` (which
 * must exist) as safetensors in the graph's dtype, sharded like
 * save_pretrained when larger than `max_shard_bytes` (0: one file). Tied
 * lm_head weights are not written, as transformers does. Atomic per file. */
ty_status_t ty_llm_save_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *model_dir, uint64_t max_shard_bytes);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_CHECKPOINT_H_ */
