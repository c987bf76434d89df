/* The cpu plugin's fast-kernel table: maps a node (op and operand dtypes) to
 * its oneDNN/OpenMP kernel. A node without one runs the reference kernel on
 * the same device (never another device); kernels=fast-only makes that a
 * compile error instead (cpu_graph.c).
 *
 * Arithmetic kernels take f32, bf16 and f16 storage and leave any node with
 * an f64 operand to the f64 reference (f64 exists for gradient checks, where
 * the reference is what is wanted). Element movers take every dtype. */
#include <string.h>

#include "cpu_kernels.h"

typedef enum {
  CPU_ACCEPT_FLOAT, /* f32/bf16/f16 floats, any ints: no f64 operand */
  CPU_ACCEPT_ANY,   /* moves bytes: every dtype */
  CPU_ACCEPT_CAST   /* the (from, to) pairs cpu_cast_supported() lists */
} cpu_accept_t;

typedef struct {
  const char *op;
  cpu_kernel_fn_t fn;
  cpu_accept_t accept;
} cpu_kernel_entry_t;

static const cpu_kernel_entry_t cpu_kernel_table[] = {
    /* cpu_kernels_embedding.c */
    {"embedding", cpu_kernel_embedding, CPU_ACCEPT_FLOAT},
    {"embedding_backward", cpu_kernel_embedding_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_matmul.c */
    {"matmul", cpu_kernel_matmul, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_elementwise.c */
    {"add", cpu_kernel_add, CPU_ACCEPT_FLOAT},
    {"sub", cpu_kernel_sub, CPU_ACCEPT_FLOAT},
    {"mul", cpu_kernel_mul, CPU_ACCEPT_FLOAT},
    {"div", cpu_kernel_div, CPU_ACCEPT_FLOAT},
    {"scale", cpu_kernel_scale, CPU_ACCEPT_FLOAT},
    {"broadcast_to", cpu_kernel_broadcast_to, CPU_ACCEPT_ANY},
    {"reduce_sum", cpu_kernel_reduce_sum, CPU_ACCEPT_FLOAT},
    {"reduce_mean", cpu_kernel_reduce_mean, CPU_ACCEPT_FLOAT},
    {"reduce_sumsq", cpu_kernel_reduce_sumsq, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_norm.c */
    {"layernorm", cpu_kernel_layernorm, CPU_ACCEPT_FLOAT},
    {"layernorm_backward", cpu_kernel_layernorm_backward, CPU_ACCEPT_FLOAT},
    {"rmsnorm", cpu_kernel_rmsnorm, CPU_ACCEPT_FLOAT},
    {"rmsnorm_backward", cpu_kernel_rmsnorm_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_activation.c */
    {"gelu", cpu_kernel_gelu, CPU_ACCEPT_FLOAT},
    {"gelu_backward", cpu_kernel_gelu_backward, CPU_ACCEPT_FLOAT},
    {"silu", cpu_kernel_silu, CPU_ACCEPT_FLOAT},
    {"silu_backward", cpu_kernel_silu_backward, CPU_ACCEPT_FLOAT},
    {"swiglu", cpu_kernel_swiglu, CPU_ACCEPT_FLOAT},
    {"swiglu_backward", cpu_kernel_swiglu_backward, CPU_ACCEPT_FLOAT},
    {"softmax", cpu_kernel_softmax, CPU_ACCEPT_FLOAT},
    {"softmax_backward", cpu_kernel_softmax_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_rope.c */
    {"rope", cpu_kernel_rope, CPU_ACCEPT_FLOAT},
    {"rope_backward", cpu_kernel_rope_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_attention.c */
    {"attention", cpu_kernel_attention, CPU_ACCEPT_FLOAT},
    {"attention_backward", cpu_kernel_attention_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_attention_merge.c */
    {"attention_merge", cpu_kernel_attention_merge, CPU_ACCEPT_FLOAT},
    {"attention_merge_backward", cpu_kernel_attention_merge_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_loss.c */
    {"cross_entropy", cpu_kernel_cross_entropy, CPU_ACCEPT_FLOAT},
    {"cross_entropy_backward", cpu_kernel_cross_entropy_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_linear_ce.c */
    {"linear_cross_entropy", cpu_kernel_linear_cross_entropy, CPU_ACCEPT_FLOAT},
    {"linear_cross_entropy_backward", cpu_kernel_linear_cross_entropy_backward,
     CPU_ACCEPT_FLOAT},
    /* cpu_kernels_vocab.c */
    {"vocab_embedding", cpu_kernel_vocab_embedding, CPU_ACCEPT_FLOAT},
    {"vocab_embedding_backward", cpu_kernel_vocab_embedding_backward, CPU_ACCEPT_FLOAT},
    {"vocab_max", cpu_kernel_vocab_max, CPU_ACCEPT_FLOAT},
    {"vocab_max_backward", cpu_kernel_vocab_max_backward, CPU_ACCEPT_FLOAT},
    {"vocab_ce_sums", cpu_kernel_vocab_ce_sums, CPU_ACCEPT_FLOAT},
    {"vocab_ce_sums_backward", cpu_kernel_vocab_ce_sums_backward, CPU_ACCEPT_FLOAT},
    {"vocab_ce_loss", cpu_kernel_vocab_ce_loss, CPU_ACCEPT_FLOAT},
    {"vocab_ce_loss_backward", cpu_kernel_vocab_ce_loss_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_dropout.c */
    {"dropout", cpu_kernel_dropout, CPU_ACCEPT_FLOAT},
    {"dropout_backward", cpu_kernel_dropout_backward, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_views.c */
    {"cast", cpu_kernel_cast, CPU_ACCEPT_CAST},
    {"reshape", cpu_kernel_reshape, CPU_ACCEPT_ANY},
    {"transpose", cpu_kernel_transpose, CPU_ACCEPT_ANY},
    {"slice", cpu_kernel_slice, CPU_ACCEPT_ANY},
    {"slice_backward", cpu_kernel_slice_backward, CPU_ACCEPT_ANY},
    {"concat", cpu_kernel_concat, CPU_ACCEPT_ANY},
    /* cpu_kernels_optim.c */
    {"adamw_update", cpu_kernel_adamw_update, CPU_ACCEPT_FLOAT},
    {"sgd_update", cpu_kernel_sgd_update, CPU_ACCEPT_FLOAT},
    {"adafactor_update", cpu_kernel_adafactor_update, CPU_ACCEPT_FLOAT},
    {"clip_by_global_norm", cpu_kernel_clip_by_global_norm, CPU_ACCEPT_FLOAT},
    {"global_norm_scale", cpu_kernel_global_norm_scale, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_kv_cache.c */
    {"kv_cache_write", cpu_kernel_kv_cache_write, CPU_ACCEPT_ANY},
    /* cpu_kernels_paged.c */
    {"paged_kv_write", cpu_kernel_paged_kv_write, CPU_ACCEPT_ANY},
    {"paged_attention", cpu_kernel_paged_attention, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_sample.c */
    {"sample", cpu_kernel_sample, CPU_ACCEPT_FLOAT},
    {"top_logprobs", cpu_kernel_top_logprobs, CPU_ACCEPT_FLOAT},
    /* cpu_kernels_views.c: world 1 (ops/op_collective.c) */
    {"all_reduce", cpu_kernel_all_reduce, CPU_ACCEPT_ANY},
    {"tp_copy", cpu_kernel_all_reduce, CPU_ACCEPT_ANY},
    {"tp_reduce", cpu_kernel_all_reduce, CPU_ACCEPT_ANY},
    {"all_gather", cpu_kernel_gather_part, CPU_ACCEPT_FLOAT},
    {"reduce_scatter", cpu_kernel_gather_part, CPU_ACCEPT_FLOAT},
    {NULL, NULL, CPU_ACCEPT_ANY},
};

static ty_dtype_t cpu_operand_dtype(const ty_abi_graph_t *g, const ty_abi_node_t *node,
                                    uint32_t i, bool *present) {
  uint32_t v = i < node->input_count ? node->inputs[i] : node->outputs[i - node->input_count];
  *present = v != UINT32_MAX && v < g->value_count;
  return *present ? g->values[v].dtype : TY_DTYPE_INVALID;
}

static bool cpu_no_f64(const ty_abi_graph_t *g, const ty_abi_node_t *node) {
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    bool present;
    ty_dtype_t d = cpu_operand_dtype(g, node, i, &present);
    if (present && (d == TY_DTYPE_F64 || ty_desc_dtype_size(d) == 0)) return false;
  }
  return true;
}

cpu_kernel_fn_t cpu_kernel_find(const ty_abi_graph_t *graph, const ty_abi_node_t *node) {
  for (const cpu_kernel_entry_t *e = cpu_kernel_table; e->op; ++e) {
    if (strcmp(e->op, node->op) != 0) continue;
    switch (e->accept) {
      case CPU_ACCEPT_ANY:
        return e->fn;
      case CPU_ACCEPT_FLOAT:
        return cpu_no_f64(graph, node) ? e->fn : NULL;
      case CPU_ACCEPT_CAST: {
        if (node->input_count != 1 || node->output_count != 1) return NULL;
        bool pi, po;
        ty_dtype_t from = cpu_operand_dtype(graph, node, 0, &pi);
        ty_dtype_t to = cpu_operand_dtype(graph, node, 1, &po);
        return pi && po && cpu_cast_supported(from, to) ? e->fn : NULL;
      }
    }
    return NULL;
  }
  return NULL;
}
