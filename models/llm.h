/* GPT-2 and Llama-family graphs (llama, mistral, qwen2) built from op set v1.
 * Parameters are STATE values named and shaped exactly as in the model's
 * Hugging Face safetensors (GPT-2's Conv1D weights stay [in, out]; Llama's
 * Linear weights stay [out, in]), so checkpoints load and save without any
 * renaming or transposing. */
#ifndef TY_MODELS_LLM_H_
#define TY_MODELS_LLM_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/graph.h"
#include "models/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_LLM_NAME_MAX 128

typedef struct ty_llm_param_t {
  char name[TY_LLM_NAME_MAX]; /* Hugging Face name, e.g. "model.norm.weight" */
  ty_value_id_t value;        /* the STATE value */
  uint32_t rank;
  int64_t dims[2];
  bool decay;                 /* weight decay applies (matrices, not norms/biases/embeddings) */
} ty_llm_param_t;

typedef struct ty_llm_options_t {
  int64_t batch;       /* B */
  int64_t seq;         /* T: tokens per row in this graph */
  ty_dtype_t dtype;    /* parameters and activations: f32, bf16, f16 or f64 */
  bool with_loss;      /* inputs "targets" (i64 [B,T], negative = ignored) and
                          "loss_weights" ([B,T], f32 or f64 like the loss;
                          the graph's loss-gradient seed: ones if unbound);
                          outputs "loss" = sum(loss_per_token * loss_weights)
                          and "loss_per_token". Weights summing to 1 over the
                          counted targets make "loss" their mean. */
  bool logits_output;  /* output "logits" [B,T,V] */
  double dropout;      /* > 0: dropout on embeddings and residual branches,
                          input "rng" (i64 [2] = seed, step) */
  int64_t cache_len;   /* > 0: KV-cache decoding graph. States
                          "cache.<layer>.k" / ".v" [B, cache_len, Hkv, D] keep
                          every layer's keys and values across runs; inputs
                          "positions" (i64 [T], absolute positions of the
                          tokens), "cache_position" (i64 [], first row to
                          write = positions[0]) and "kv_len" (i64 [], rows
                          filled after the write = cache_position + T). A
                          prefill graph (T = prompt) and a decode graph
                          (T = 1) share the caches through
                          ty_session_options_t.share_state_with. */
  bool slot_caches;    /* with cache_len > 0: every row keeps KV caches and
                          positions of its own, so that sequences of
                          different lengths share one step (the generation
                          engine's continuous batching, models/engine.h).
                          Row b reads and writes the states
                          "slot.<first_slot + b>.cache.<layer>.k" / ".v"
                          [1, cache_len, Hkv, D]; the inputs are
                          "positions" (i64 [B, T]), "cache_position" and
                          "kv_len" (i64 [B], one per row, with the meanings
                          above). Rows are left-aligned: a row with fewer
                          than T real tokens is padded after them, and the
                          padding's keys, written past the real ones, stay
                          invisible to them (causal) until real tokens
                          overwrite them. So cache_len may exceed the
                          model's positions by the rows of such scratch
                          a padded chunk needs (up to positions - 1). Attention and the cache write run per row
                          (one node each per row and layer); the matmuls,
                          norms and MLPs run on the whole batch. */
  int64_t first_slot;  /* slot of row 0 (slot_caches) */
  bool logits_at_index; /* output "logits" is [B, V]: for each row b, the
                           logits of token logits_index[b] only (input
                           "logits_index", i64 [B], an index into the flat
                           [B * T] tokens). The LM head then runs on B rows
                           instead of B * T: a chunked prefill needs the last
                           real token's logits only. */
} ty_llm_options_t;

typedef struct ty_llm_t {
  ty_model_config_t config;
  ty_llm_options_t options;
  ty_llm_param_t *params; /* owned; free with ty_llm_deinit */
  uint32_t param_count;
  ty_value_id_t tokens;        /* input "tokens" i64 [B,T] */
  ty_value_id_t logits;        /* [B,T,V] */
  ty_value_id_t loss;          /* scalar, TY_VALUE_NONE without with_loss */
  ty_value_id_t loss_per_token;
} ty_llm_t;

/* Adds the model to `graph` (inputs, parameters, forward, optional loss).
 * INVALID_ARGUMENT for options the model cannot take (seq longer than its
 * positions, a sliding window shorter than the sequence, ...). */
ty_status_t ty_llm_build(ty_graph_t *graph, const ty_model_config_t *config,
                         const ty_llm_options_t *options, ty_llm_t *out_model);
void ty_llm_deinit(ty_llm_t *model);

/* The parameter named `name`, or NULL. */
const ty_llm_param_t *ty_llm_find_param(const ty_llm_t *model, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_LLM_H_ */
