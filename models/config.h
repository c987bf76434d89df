/* Model configuration from a Hugging Face config.json: GPT-2 and the Llama
 * family (llama, mistral, qwen2). Every setting the graphs depend on is read
 * or defaulted as transformers does; a setting Trainyard cannot honour is an
 * error naming the field, never silently ignored, and so is an enum-like
 * field (model_type, activations, RoPE type, dtype, architectures,
 * layer_types) that is unknown or of the wrong type. */
#ifndef TY_MODELS_CONFIG_H_
#define TY_MODELS_CONFIG_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/file.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ty_model_arch_e {
  TY_ARCH_GPT2 = 0,  /* learned positions, layernorm, gelu MLP, Conv1D [in,out] */
  TY_ARCH_LLAMA = 1, /* rope, rmsnorm, swiglu MLP, Linear [out,in]; also mistral, qwen2 */
} ty_model_arch_t;

typedef enum ty_rope_type_e {
  TY_ROPE_DEFAULT = 0,
  TY_ROPE_LLAMA3 = 1,
} ty_rope_type_t;

typedef struct ty_model_config_t {
  char model_type[32]; /* "gpt2", "llama", "mistral", "qwen2" */
  ty_model_arch_t arch;
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t num_layers;
  int64_t num_heads;
  int64_t num_kv_heads;      /* == num_heads without GQA */
  int64_t head_dim;
  int64_t intermediate_size; /* MLP inner width */
  int64_t max_positions;     /* n_positions / max_position_embeddings */
  double norm_eps;           /* layer_norm_epsilon / rms_norm_eps */
  bool tie_word_embeddings;
  bool qkv_bias;             /* bias on q, k, v projections */
  bool o_bias;               /* bias on the attention output projection */
  bool mlp_bias;
  char activation[32];       /* "gelu_new" (gpt2) or "silu" */
  /* RoPE (llama family) */
  double rope_theta;
  ty_rope_type_t rope_type;
  double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int64_t rope_original_max_positions;
  int64_t sliding_window;    /* 0: none */
  int64_t bos_token_id;      /* -1 when absent; else inside the vocabulary */
  int64_t eos_token_id;      /* -1 when absent (first of a list); else inside it */
} ty_model_config_t;

/* config.json files (hal/file.h): text of at most 16 MiB. */
extern const ty_file_kind_t ty_model_config_file_kind;

/* Parses config.json text (`size` bytes; a NUL byte is an error). `origin`
 * names the file in messages. Errors: INVALID_ARGUMENT naming the field
 * (missing, wrong type, out of range, an enum-like value transformers does
 * not know, bos/eos ids outside the vocabulary, rope_scaling and
 * rope_parameters that disagree, sizes past 64-bit arithmetic),
 * UNIMPLEMENTED naming an unsupported model_type or setting (e.g. rope type
 * "yarn", a mix of sliding-window and full-attention layers). */
ty_status_t ty_model_config_parse_text(const char *text, size_t size, const char *origin,
                                       ty_model_config_t *out_config);

/* The same for NUL-terminated text. */
ty_status_t ty_model_config_parse(const char *json_text, const char *origin,
                                  ty_model_config_t *out_config);

/* Reads <dir>/config.json (capped, see ty_model_config_file_kind). NOT_FOUND
 * when it is missing. */
ty_status_t ty_model_config_load(const char *dir, ty_model_config_t *out_config);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_CONFIG_H_ */
