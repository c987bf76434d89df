/* Moving a model's parameters between Hugging Face safetensors checkpoints
 * and a session's device-resident state, with names and layouts unchanged. */
#ifndef TY_MODELS_CHECKPOINT_H_
#define TY_MODELS_CHECKPOINT_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/runtime/session.h"
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

/* INVALID_ARGUMENT when `count` elements of float `data` (in `dtype`) hold
 * a NaN or an infinity, naming `origin`, tensor `name`, the value and its
 * element index. With the tensor's original bytes (`source` in
 * *source_dtype; both may be NULL), an element that was finite there is
 * reported as an overflow of the conversion. `override_hint` (may be NULL)
 * ends the message, e.g. how to load such weights anyway. */
ty_status_t ty_llm_check_finite(const char *origin, const char *name, ty_dtype_t dtype,
                                const void *data, uint64_t count, const ty_dtype_t *source_dtype,
                                const void *source, const char *override_hint);

typedef struct ty_llm_load_options_t {
  bool allow_nonfinite;      /* load NaN/Inf weights, counting them in the report */
  const char *nonfinite_hint; /* ends the refusal's message (e.g. the option that allows it) */
} ty_llm_load_options_t;

typedef struct ty_llm_load_report_t {
  uint32_t nonfinite_tensors;  /* tensors holding NaN or Inf (with allow_nonfinite) */
  char first_nonfinite[512];   /* the refusal the first of them would have given */
} ty_llm_load_report_t;

/* Loads every parameter of `model` from the model folder into `session`,
 * converting floats to the graph's dtype, after the checks of
 * ty_llm_check_weights against the model's config. A tensor holding NaN or
 * an infinity (in the file, or after the conversion) is refused with
 * ty_llm_check_finite's error unless options->allow_nonfinite, when it is
 * loaded and counted in *out_report (may be NULL). `options` NULL: refuse. */
ty_status_t ty_llm_load_weights_with(const ty_llm_t *model, ty_session_t *session,
                                     const char *model_dir,
                                     const ty_llm_load_options_t *options,
                                     ty_llm_load_report_t *out_report);

/* ty_llm_load_weights_with, refusing non-finite weights. */
ty_status_t ty_llm_load_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *model_dir);

/* Reads every parameter from `session` and writes them to `model_dir` (which
 * must exist) as safetensors in the graph's dtype, sharded like
 * save_pretrained when larger than `max_shard_bytes` (0: one file). Tied
 * lm_head weights are not written, as transformers does. Atomic per file.
 * FAILED_PRECONDITION for a tensor-parallel model, whose session holds
 * parts: gather them and use ty_llm_write_weights. */
ty_status_t ty_llm_save_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *model_dir, uint64_t max_shard_bytes);
/* ty_llm_save_weights from host memory: full[i] is parameter i's whole
 * tensor (full_dims) in the model's dtype. */
ty_status_t ty_llm_write_weights(const ty_llm_t *model, void *const *full,
                                 const char *model_dir, uint64_t max_shard_bytes);
/* One "__metadata__" entry of a saved model's files. */
typedef struct ty_llm_weights_tag_t {
  const char *key;
  const char *value;
} ty_llm_weights_tag_t;

/* ty_llm_write_weights (`full` given) or ty_llm_save_weights (`full` NULL)
 * with `tags` in the metadata of every file written: what wrote them (a
 * training run's identity and step), so that a reader can tell whether
 * files of one folder belong together. */
ty_status_t ty_llm_save_weights_tagged(const ty_llm_t *model, ty_session_t *session,
                                       void *const *full, const char *model_dir,
                                       uint64_t max_shard_bytes,
                                       const ty_llm_weights_tag_t *tags, size_t tag_count);
/* Binds parameter `p` of `model` in `session` from its whole tensor `full`
 * (full_dims, in `dtype`): this rank's part of it under tensor parallel
 * (model->options.tp_size > 1), else all of it. How every rank loads or
 * initializes the whole model and keeps its part. */
ty_status_t ty_llm_bind_whole(const ty_llm_t *model, ty_session_t *session,
                              const ty_llm_param_t *p, ty_dtype_t dtype, const void *full);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_CHECKPOINT_H_ */
