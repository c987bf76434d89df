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
  /* Mixed precision ("bf16-mixed"): TY_DTYPE_INVALID (or == dtype) computes
   * everything in `dtype`. bf16 or f16 with f32 parameters runs matmuls,
   * attention and what lies between them (bias, GELU/SwiGLU, RoPE, the
   * head's logits) in that dtype with f32 accumulation, as PyTorch's
   * autocast does: each weight is cast from its f32 parameter where it is
   * used, norm outputs are cast on their way into a matmul, and each block's
   * output is cast back to f32 before it joins the residual stream, which
   * stays f32 with the norms, the loss and the gradients that reach the
   * parameters (the casts' gradients are casts back). */
  ty_dtype_t compute_dtype;
  bool with_loss;      /* inputs "targets" (i64 [B,T], negative = ignored) and
                          "loss_weights" ([B,T], f32 or f64 like the loss;
                          the graph's loss-gradient seed: ones if unbound);
                          outputs "loss" = sum(loss_per_token * loss_weights)
                          and "loss_per_token". Weights summing to 1 over the
                          counted targets make "loss" their mean. */
  bool logits_output;  /* output "logits" [B,T,V] */
  int64_t loss_chunk;  /* > 0 (with_loss, not logits_output): the LM head and
                          the loss are one linear_cross_entropy op that forms
                          the logits this many tokens at a time, so [B,T,V]
                          never exists (`train --loss-chunk`); the model's
                          `logits` is then TY_VALUE_NONE */
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
  /* Pipeline stages (0/0: the whole model). The model's units are the
   * embedding (unit 0), the layers (units 1..L) and the final norm + LM
   * head + loss (unit L + 1); a stage builds units [unit_begin, unit_end)
   * with their parameters only (m->params then lists those; a tied head
   * brings its embedding matrix into the last stage too). A stage without
   * the embedding takes input "hidden_in" [B, T, C] (dtype) instead of
   * tokens; one without the head has output "hidden_out" [B, T, C] instead
   * of logits and loss. Dropout streams are numbered by layer, so masks
   * do not depend on the split. Training graphs only (no KV cache). */
  int32_t unit_begin, unit_end;
} ty_llm_options_t;

typedef struct ty_llm_t {
  ty_model_config_t config;
  ty_llm_options_t options;
  ty_llm_param_t *params; /* owned; free with ty_llm_deinit */
  uint32_t param_count;
  ty_value_id_t tokens;        /* input "tokens" i64 [B,T] */
  ty_value_id_t logits;        /* [B,T,V]; TY_VALUE_NONE with loss_chunk */
  ty_value_id_t loss;          /* scalar, TY_VALUE_NONE without with_loss */
  ty_value_id_t loss_per_token;
  ty_value_id_t hidden_in, hidden_out; /* a pipeline stage's input and output
                                          ([B,T,C]), or TY_VALUE_NONE */
} ty_llm_t;

/* Adds the model to `graph` (inputs, parameters, forward, optional loss).
 * INVALID_ARGUMENT for options the model cannot take (seq longer than its
 * positions, a sliding window shorter than the sequence, ...). */
ty_status_t ty_llm_build(ty_graph_t *graph, const ty_model_config_t *config,
                         const ty_llm_options_t *options, ty_llm_t *out_model);
void ty_llm_deinit(ty_llm_t *model);

/* Parses a --dtype value: f32, bf16, f16, f64 (parameters and compute in
 * that dtype), or bf16-mixed / f16-mixed (f32 parameters, compute in bf16 /
 * f16; see ty_llm_options_t.compute_dtype). INVALID_ARGUMENT naming the
 * accepted values otherwise. */
ty_status_t ty_llm_precision_parse(const char *text, ty_dtype_t *out_param_dtype,
                                   ty_dtype_t *out_compute_dtype);

/* The parameter set `config` implies (models/llm_params.c), without building
 * anything: the number of tensors and of elements, computed with overflow
 * checks. INVALID_ARGUMENT naming the sizes when they exceed 64-bit
 * arithmetic (with room for f64 bytes) or Trainyard's 32-bit tensor index. */
ty_status_t ty_llm_param_count(const ty_model_config_t *config, uint32_t *out_tensors,
                               int64_t *out_elements);

/* Parameter `index` (< the count) in the order ty_llm_build creates them:
 * name, rank, dims and decay; value is TY_VALUE_NONE. Call only after
 * ty_llm_param_count succeeded for `config`. */
void ty_llm_param_spec(const ty_model_config_t *config, uint32_t index, ty_llm_param_t *out);

/* RESOURCE_EXHAUSTED naming `device` when the parameters of `config` in
 * `dtype`, plus `extra_bytes_per_param` for each (gradients and optimizer
 * state when training), cannot fit in its `memory_bytes` (0: unknown, no
 * check). A lower bound (activations come on top), checked before any graph
 * is built. */
ty_status_t ty_llm_check_memory(const ty_model_config_t *config, ty_dtype_t dtype,
                                uint64_t extra_bytes_per_param, uint64_t memory_bytes,
                                const char *device);

/* Pipeline units (models/llm_stage.c): num_layers + 2. */
int32_t ty_llm_unit_count(const ty_model_config_t *config);
/* The unit parameter `name` belongs to (the embedding 0, layer l is l + 1,
 * the final norm and head L + 1), or -1 for a name outside the model. */
int32_t ty_llm_param_unit(const ty_model_config_t *config, const char *name);
/* The cost of each unit for the stage partition (ty_llm_unit_count
 * entries): its parameter elements, the head counted as its V x C matrix
 * even when it is tied to the embedding (the head's matmul is the work). */
ty_status_t ty_llm_unit_costs(const ty_model_config_t *config, int64_t *out_costs);
/* Whether the stage of units [unit_begin, unit_end) holds parameter `name`
 * (a tied embedding is held by the first and the last unit). */
bool ty_llm_stage_has_param(const ty_model_config_t *config, int32_t unit_begin,
                            int32_t unit_end, const char *name);

/* The parameter named `name`, or NULL. */
const ty_llm_param_t *ty_llm_find_param(const ty_llm_t *model, const char *name);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_LLM_H_ */
