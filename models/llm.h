/* GPT-2 and Llama-family graphs (llama, mistral, qwen2) built from op set v1.
 * Parameters are STATE values named and shaped exactly as in the model's
 * Hugging Face safetensors (GPT-2's Conv1D weights stay [in, out]; Llama's
 * Linear weights stay [out, in]), so checkpoints load and save without any
 * renaming or transposing. */
#ifndef TY_MODELS_LLM_H_
#define TY_MODELS_LLM_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "models/config.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_LLM_NAME_MAX 128
#define TY_LLM_CP_MAX 64 /* context-parallel ranks a graph is built for */

typedef struct ty_llm_param_t {
  char name[TY_LLM_NAME_MAX]; /* Hugging Face name, e.g. "model.norm.weight" */
  ty_value_id_t value;        /* the STATE value */
  uint32_t rank;
  int64_t dims[2];
  bool decay;                 /* weight decay applies (matrices, not norms/biases/embeddings) */
  /* Tensor parallel (issue 17, models/llm_tp.c): this rank's tensor is
   * the part of the whole one (full_dims) that tp_axis cuts; dims are the
   * part's. tp_axis -1: replicated (dims == full_dims). tp_segments > 1:
   * the axis holds that many equal segments (GPT-2's c_attn q|k|v), each
   * cut into tp_size parts, and the rank's part is its part of every
   * segment, in order. */
  int8_t tp_axis;
  uint8_t tp_segments;
  int64_t full_dims[2];
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
  int64_t mlp_chunk;   /* > 0 and < seq: each block's MLP runs over this many
                          tokens of the sequence at a time (the last piece
                          takes the rest, T mod N, when N does not divide
                          T), so only [B, N, I] intermediates exist at once
                          (`train --mlp-chunk`; docs/design-notes.md
                          "Chunked MLP"); >= seq or 0: one piece */
  double dropout;      /* > 0: dropout on embeddings and residual branches,
                          input "rng" (i64 [2] = seed, step) */
  int tp_size;         /* tensor parallel (issue 17): > 1 builds this rank's
                          part of the model split over tp_size ranks of the
                          "tp" group (models/llm_tp.c has the split rule;
                          training graphs only, not with KV caches); 0 or 1:
                          the whole model */
  int tp_rank;         /* 0 <= tp_rank < tp_size */
  /* Context parallel (issue 31; docs/design-notes.md "Context
   * parallel"): cp_size > 1 builds rank cp_rank's part of every sequence
   * of cp_size x seq tokens, cut into 2 cp_size chunks of seq / 2: this
   * graph's seq tokens are chunks cp_rank and 2 cp_size - 1 - cp_rank, at
   * their global positions. Each layer all-gathers the keys and values
   * over the "cp" group; dropout numbers elements as in the whole
   * sequence. Training graphs only (no KV cache, no picked rows); a
   * pipeline stage (unit_begin/unit_end) splits its rows the same way. */
  int cp_size;
  int cp_rank;
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
  /* Paged KV cache (the generation engine's, models/engine.h, issue 29):
   * kv_blocks > 0 builds one packed step of `seq` tokens (batch 1) drawn
   * from any sequences, each token at a position of its own. States
   * "kv.<layer>.k" / ".v" [kv_blocks, kv_block_size, Hkv, D] (compute
   * dtype) hold every sequence's keys and values in blocks; inputs
   * "positions" (i64 [T]), "kv_slots" (i64 [T]: the pool slot block *
   * kv_block_size + offset each token's keys go to, -1 for padding),
   * "row_seq" (i64 [T]: the block-table row of each token's sequence, -1
   * for padding) and "block_table" (i64 [table_rows, table_blocks]). Each
   * token attends to its own sequence's positions up to its own
   * (paged_kv_write, then paged_attention; docs/ops.md). With
   * logits_at_index, logit_rows (default batch) rows of logits. */
  int64_t kv_blocks, kv_block_size, table_rows, table_blocks;
  int64_t logit_rows;
} ty_llm_options_t;

typedef struct ty_llm_t {
  ty_model_config_t config;
  ty_llm_options_t options;
  ty_llm_param_t *params; /* owned; free with ty_llm_deinit */
  uint32_t param_count;
  ty_value_id_t tokens;        /* input "tokens" i64 [B,T] */
  ty_value_id_t logits;        /* [B,T,V]; TY_VALUE_NONE with loss_chunk;
                                  tensor parallel: this rank's [B,T,Vp] */
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
/* Whether `name` is the word embedding matrix (GPT-2's wte, Llama's
 * embed_tokens), which a tied head shares. */
bool ty_llm_is_word_embedding(const char *name);
/* Whether the stage of units [unit_begin, unit_end) holds parameter `name`
 * (a tied embedding is held by the first and the last unit). */
bool ty_llm_stage_has_param(const ty_model_config_t *config, int32_t unit_begin,
                            int32_t unit_end, const char *name);

/* The parameter named `name`, or NULL. */
const ty_llm_param_t *ty_llm_find_param(const ty_llm_t *model, const char *name);

/* ---- Tensor parallel (issue 17; models/llm_tp.c) ----
 * Megatron's split: attention heads and MLP columns over the tp ranks
 * (column-parallel q/k/v, gate/up, c_attn, c_fc; row-parallel o_proj,
 * down_proj, c_proj with one all-reduce each, their biases added once after
 * it), GQA key/value heads split when num_kv_heads % tp == 0 and
 * replicated (every rank holding them all) when tp is a multiple of
 * num_kv_heads; the embedding and the LM head vocabulary-parallel (rank r
 * holds rows [r Vp, (r + 1) Vp) of the [V, C] matrix, Vp = ceil(V / tp),
 * the last part padded with zero rows that no lookup or logit uses, so the
 * [B, T, V] logits never exist on one rank); norms replicated. */

/* INVALID_ARGUMENT naming --tp and the config's sizes when `tp` does not
 * split the model (heads, kv heads, MLP width). tp 1 always does. */
ty_status_t ty_llm_tp_check(const ty_model_config_t *config, int tp);
/* Sets p's tp_axis, tp_segments and full_dims from its name (a whole
 * tensor as ty_llm_param_spec gives it), and its dims to one of `tp` parts.
 * Call only after ty_llm_tp_check accepted `tp`. */
void ty_llm_tp_shard(const ty_model_config_t *config, int tp, ty_llm_param_t *p);
/* The vocabulary rows rank `tp_rank` of `tp` holds: the first id and how
 * many of its Vp rows are real (the rest padding). tp 1: all of them. */
void ty_llm_tp_vocab_shard(const ty_model_config_t *config, int tp, int tp_rank,
                           int64_t *out_start, int64_t *out_valid);
/* Copies rank `tp_rank`'s part of the whole tensor `full` (full_dims, row
 * major, `elem` bytes an element) to `part` (dims), zeros in the padding
 * rows of a vocabulary part. A replicated tensor is copied whole. */
void ty_llm_tp_take_part(const ty_llm_param_t *p, int tp, int tp_rank, size_t elem,
                         const void *full, void *part);
/* The reverse: `part` written into its place in `full` (without its
 * padding), the rest of `full` untouched (rank 0 gathering a checkpoint
 * puts every rank's part). */
void ty_llm_tp_put_part(const ty_llm_param_t *p, int tp, int tp_rank, size_t elem,
                        const void *part, void *full);
/* Elements of p's whole tensor (full_dims) and of this rank's part (dims). */
int64_t ty_llm_param_full_count(const ty_llm_param_t *p);
int64_t ty_llm_param_part_count(const ty_llm_param_t *p);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_LLM_H_ */
