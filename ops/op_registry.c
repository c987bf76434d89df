/* The registry of op set v1: every op, in the order of docs/ops.md, and
 * ty_op_infer, which checks what is common to all ops (the op exists, arity,
 * attribute names, descriptor sanity) before the op's own inference. */
#include <string.h>

#include "ops/op_internal.h"

static const ty_op_def_t *const ty_op_table[] = {
    /* Embeddings */
    &ty_op_def_embedding, &ty_op_def_embedding_backward,
    /* Linear algebra and elementwise */
    &ty_op_def_matmul, &ty_op_def_add, &ty_op_def_sub, &ty_op_def_mul,
    &ty_op_def_div, &ty_op_def_scale, &ty_op_def_broadcast_to,
    /* Reductions */
    &ty_op_def_reduce_sum, &ty_op_def_reduce_mean, &ty_op_def_reduce_sumsq,
    /* Normalization */
    &ty_op_def_layernorm, &ty_op_def_layernorm_backward, &ty_op_def_rmsnorm,
    &ty_op_def_rmsnorm_backward,
    /* Activations */
    &ty_op_def_gelu, &ty_op_def_gelu_backward, &ty_op_def_silu,
    &ty_op_def_silu_backward, &ty_op_def_swiglu, &ty_op_def_swiglu_backward,
    &ty_op_def_softmax, &ty_op_def_softmax_backward,
    /* Rotary embeddings */
    &ty_op_def_rope, &ty_op_def_rope_backward,
    /* Attention */
    &ty_op_def_attention, &ty_op_def_attention_backward, &ty_op_def_attention_merge,
    &ty_op_def_attention_merge_backward,
    /* Loss */
    &ty_op_def_cross_entropy, &ty_op_def_cross_entropy_backward,
    &ty_op_def_linear_cross_entropy, &ty_op_def_linear_cross_entropy_backward,
    /* Dropout */
    &ty_op_def_dropout, &ty_op_def_dropout_backward,
    /* Types and views */
    &ty_op_def_cast, &ty_op_def_reshape, &ty_op_def_transpose,
    &ty_op_def_slice, &ty_op_def_slice_backward, &ty_op_def_concat,
    /* Optimizers and clipping */
    &ty_op_def_adamw_update, &ty_op_def_sgd_update, &ty_op_def_adafactor_update,
    &ty_op_def_clip_by_global_norm, &ty_op_def_global_norm_scale,
    /* KV cache */
    &ty_op_def_kv_cache_write,
    /* Paged KV cache (serving) */
    &ty_op_def_paged_kv_write, &ty_op_def_paged_attention,
    /* Sampling (inference only) */
    &ty_op_def_sample, &ty_op_def_top_logprobs,
    /* Collectives */
    &ty_op_def_all_reduce, &ty_op_def_tp_copy, &ty_op_def_tp_reduce,
    &ty_op_def_all_gather, &ty_op_def_reduce_scatter,
    /* Vocabulary-parallel embedding and loss (the shard's parts; no communication) */
    &ty_op_def_vocab_embedding, &ty_op_def_vocab_embedding_backward, &ty_op_def_vocab_max,
    &ty_op_def_vocab_max_backward,
    &ty_op_def_vocab_ce_sums, &ty_op_def_vocab_ce_sums_backward, &ty_op_def_vocab_ce_loss,
    &ty_op_def_vocab_ce_loss_backward,
};

#define TY_OP_TABLE_SIZE ((uint32_t)(sizeof(ty_op_table) / sizeof(ty_op_table[0])))

const ty_op_def_t *ty_op_lookup(const char *name) {
  if (!name) return NULL;
  for (uint32_t i = 0; i < TY_OP_TABLE_SIZE; ++i) {
    if (strcmp(ty_op_table[i]->name, name) == 0) return ty_op_table[i];
  }
  return NULL;
}

uint32_t ty_op_count(void) { return TY_OP_TABLE_SIZE; }

const ty_op_def_t *ty_op_at(uint32_t index) {
  return index < TY_OP_TABLE_SIZE ? ty_op_table[index] : NULL;
}

static ty_status_t ty_op_check_arity(const ty_op_def_t *def, uint32_t count) {
  uint32_t max = def->max_inputs == TY_OP_VARIADIC ? TY_OP_MAX_INPUTS
                                                   : def->max_inputs;
  if (count >= def->min_inputs && count <= max) return TY_OK;
  if (def->max_inputs == TY_OP_VARIADIC) {
    return ty_op_error(def->name, "takes %u to %u inputs, got %u",
                       def->min_inputs, max, count);
  }
  if (def->min_inputs == def->max_inputs) {
    return ty_op_error(def->name, "takes %u input%s, got %u", def->min_inputs,
                       def->min_inputs == 1 ? "" : "s", count);
  }
  return ty_op_error(def->name, "takes %u to %u inputs, got %u",
                     def->min_inputs, def->max_inputs, count);
}

/* Descriptors come from callers; a corrupt one must not reach shape code. */
static ty_status_t ty_op_check_input_desc(const char *op, uint32_t index,
                                          const ty_tensor_desc_t *d) {
  if (!d) return TY_OK;
  if (!ty_dtype_is_valid(d->dtype) || d->rank > TY_TENSOR_MAX_RANK) {
    return ty_op_error(op, "input %u has an invalid descriptor (dtype %d, rank %u)",
                       index, (int)d->dtype, d->rank);
  }
  for (uint32_t i = 0; i < d->rank; ++i) {
    if (d->dims[i] < 0) {
      return ty_op_error(op, "input %u has a negative dimension (%s)", index,
                         TY_DESC(d));
    }
  }
  return TY_OK;
}

ty_status_t ty_op_infer(const char *op, const ty_tensor_desc_t *const *inputs,
                        uint32_t input_count, const ty_attrs_t *attrs,
                        ty_tensor_desc_t *outputs, uint32_t *out_count) {
  if (!outputs || !out_count || (input_count && !inputs)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "ty_op_infer: outputs, out_count and inputs must "
                          "not be NULL");
  }
  *out_count = 0;
  const ty_op_def_t *def = ty_op_lookup(op);
  if (!def) {
    return ty_status_make(TY_CODE_NOT_FOUND,
                          "unknown op '%s' (not in op set v1, see docs/ops.md)",
                          op ? op : "(null)");
  }
  /* The infer contract (ops/op.h) promises zeroed output descriptors. */
  memset(outputs, 0, TY_OP_MAX_OUTPUTS * sizeof(*outputs));
  TY_RETURN_IF_ERROR(ty_op_check_arity(def, input_count));
  TY_RETURN_IF_ERROR(ty_attrs_check_known(attrs, def->name, def->attr_names));
  for (uint32_t i = 0; i < input_count; ++i) {
    TY_RETURN_IF_ERROR(ty_op_check_input_desc(def->name, i, inputs[i]));
  }
  ty_op_infer_ctx_t ctx = {
      .op = def->name,
      .input_count = input_count,
      .inputs = inputs,
      .attrs = attrs,
      .outputs = outputs,
      .out_count = out_count,
  };
  ty_status_t status = def->infer(&ctx);
  if (status) *out_count = 0;
  return status;
}
