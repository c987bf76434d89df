/* The op table of the cuda executor, the helpers the op builders share
 * (cuda_ops.h) and the launch builders of the elementwise ops. The other
 * builders are in cuda_ops_<family>.c, one file per kernel family. Each
 * builder reads its node's shapes and attributes (as
 * ops/reference/ref_interp.c does), then appends the kernel launches, fills
 * and copies that compute it (cuda_exec.h). The comment above every launch
 * names the kernel and its parameter list: the ty_dev_arg_* calls under it
 * must follow that list exactly. */
#include <stdio.h>
#include <string.h>

#include "trainyard/op_shapes.h"
#include "cuda_ops.h"
#include "kernels/paged_shapes.h"
#include "trainyard/dtype.h"

/* The ops both GPU backends build (device_op_list.h), then cuda's own. */
#define TY_DEV_OP(op, builder, accept) {#op, ty_cu_build_##builder, TY_DESC_ACCEPT_##accept},
#define TY_DEV_CORE_OP(op, function, accept) {#op, function, TY_DESC_ACCEPT_##accept},
const ty_dev_op_t ty_cu_ops[] = {
    /* Before the shared list, which names the core's slice builder: cuda's
     * also writes a SLICES fusion (first match wins, ty_dev_op_find). */
    {"slice", ty_cu_build_slice, TY_DESC_ACCEPT_MOVE},
#include "trainyard/device_op_list.h"
    {"linear_cross_entropy", ty_cu_build_linear_ce, TY_DESC_ACCEPT_COMPUTE},
    {"linear_cross_entropy_backward", ty_cu_build_linear_ce, TY_DESC_ACCEPT_COMPUTE},
    {"adafactor_update", ty_cu_build_adafactor, TY_DESC_ACCEPT_COMPUTE},
    {"global_norm_scale", ty_cu_build_global_norm_scale, TY_DESC_ACCEPT_COMPUTE},
    {"all_reduce", ty_cu_build_all_reduce, TY_DESC_ACCEPT_COMPUTE},
    {"tp_reduce", ty_cu_build_all_reduce, TY_DESC_ACCEPT_COMPUTE},
    {"attention_merge", ty_cu_build_attention_merge, TY_DESC_ACCEPT_COMPUTE},
    {"attention_merge_backward", ty_cu_build_attention_merge, TY_DESC_ACCEPT_COMPUTE},
    {"all_gather", ty_cu_build_gather, TY_DESC_ACCEPT_COMPUTE},
    {"reduce_scatter", ty_cu_build_gather, TY_DESC_ACCEPT_COMPUTE},
    {"tp_copy", ty_dev_build_reshape, TY_DESC_ACCEPT_COMPUTE}, /* the identity: a copy */
    {"vocab_embedding", ty_cu_build_vocab_embedding, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_embedding_backward", ty_cu_build_vocab_embedding_backward, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_max", ty_cu_build_vocab_max, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_max_backward", ty_cu_build_vocab_max, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_ce_sums", ty_cu_build_vocab_ce_sums, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_ce_sums_backward", ty_cu_build_vocab_ce_sums, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_ce_loss", ty_cu_build_vocab_ce_loss, TY_DESC_ACCEPT_COMPUTE},
    {"vocab_ce_loss_backward", ty_cu_build_vocab_ce_loss, TY_DESC_ACCEPT_COMPUTE},
    {NULL, NULL, TY_DESC_ACCEPT_MOVE},
};

/* Ops whose kernels exist for f32, bf16 and f16 only (templated), and the
 * value whose dtype picks the instance: an output, or input 0 when the
 * output is f32 whatever the input (cross_entropy's loss). ACCEPT_COMPUTE
 * also lets integers through, which these ops never take in op set v1;
 * saying so here keeps graph_supports honest. */
static const struct {
  const char *op;
  bool input;
} ty_cu_float_ops[] = {
    {"embedding_backward", false}, {"layernorm", false},     {"layernorm_backward", false},
    {"rmsnorm", false},            {"rmsnorm_backward", false}, {"softmax", false},
    {"softmax_backward", false},   {"cross_entropy", true},  {"cross_entropy_backward", false},
    {"rope", false},               {"rope_backward", false}, {"dropout", false},
    {"dropout_backward", false},   {"clip_by_global_norm", true},
    {"linear_cross_entropy", true}, {"linear_cross_entropy_backward", false},
    {"adafactor_update", true},    {"paged_attention", false}, {"sample", true},
    {"top_logprobs", true},        {"attention_merge", false},
    {"attention_merge_backward", false},
};

bool ty_cu_op_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                    size_t capacity) {
  if (strcmp(node->op, "attention") == 0 || strcmp(node->op, "attention_backward") == 0) {
    return ty_cu_attention_check(g, node, reason, capacity);
  }
  if (strncmp(node->op, "vocab_", 6) == 0) return ty_cu_vocab_check(g, node, reason, capacity);
  if (strcmp(node->op, "paged_attention") == 0) {
    const ty_abi_value_t *q = &g->values[node->inputs[0]];
    if (q->rank == 3 && q->dims[2] > TY_PA_MAX_D) {
      snprintf(reason, capacity, "paged_attention head_dim %lld is above the cuda kernel's %d",
               (long long)q->dims[2], TY_PA_MAX_D);
      return false;
    }
  }
  for (size_t i = 0; i < sizeof(ty_cu_float_ops) / sizeof(ty_cu_float_ops[0]); ++i) {
    if (strcmp(node->op, ty_cu_float_ops[i].op) != 0) continue;
    /* clip_by_global_norm: every gradient (inputs 1..n). */
    const bool clip = strcmp(node->op, "clip_by_global_norm") == 0;
    for (uint32_t k = clip ? 1 : 0; k < (clip ? node->input_count : 1); ++k) {
      const uint32_t v = ty_cu_float_ops[i].input ? node->inputs[k] : node->outputs[k];
      const ty_dtype_t d = g->values[v].dtype;
      if (d != TY_DTYPE_F32 && d != TY_DTYPE_BF16 && d != TY_DTYPE_F16) {
        snprintf(reason, capacity, "the cuda kernels of %s take f32, bf16 or f16 data, not %s",
                 node->op, ty_dtype_name(d));
        return false;
      }
    }
  }
  if (strncmp(node->op, "linear_cross_entropy", 20) == 0) {
    /* w is [V, C] (input 1 forward, 2 backward): its GEMMs need both. */
    const ty_abi_value_t *w = &g->values[node->inputs[node->op[20] ? 2 : 1]];
    if (w->rank == 2 && (w->dims[0] == 0 || w->dims[1] == 0)) {
      snprintf(reason, capacity, "%s with an empty vocabulary or hidden size ([%lld, %lld])",
               node->op, (long long)w->dims[0], (long long)w->dims[1]);
      return false;
    }
  }
  if (strcmp(node->op, "embedding_backward") == 0) {
    /* The scatter-add sorts row numbers and counts as 32-bit integers. */
    const int64_t ids = ty_desc_value_elements(&g->values[node->inputs[1]]);
    const ty_abi_value_t *dt = &g->values[node->outputs[0]];
    if (ids > INT32_MAX || (dt->rank > 0 && dt->dims[0] > INT32_MAX)) {
      snprintf(reason, capacity,
               "embedding_backward with %lld ids and a vocabulary of %lld: the cuda kernel "
               "takes fewer than 2^31 of each",
               (long long)ids, dt->rank > 0 ? (long long)dt->dims[0] : 0LL);
      return false;
    }
  }
  return true;
}

/* ---- shared helpers (cuda_ops.h) ---- */

const char *ty_cu_typed(const char *const names[3], int dt) {
  switch (dt) {
    case TY_DTYPE_F32: return names[0];
    case TY_DTYPE_BF16: return names[1];
    case TY_DTYPE_F16: return names[2];
    default: return NULL;
  }
}

bool ty_cu_all_dtype(const ty_abi_value_t *const *values, int count, int dt) {
  for (int i = 0; i < count; ++i) {
    if (values[i] && (int)values[i]->dtype != dt) return false;
  }
  return true;
}

void ty_cu_grid_blocks(ty_cu_build_t *b, ty_cu_cmd_t *c, uint64_t blocks, uint32_t threads) {
  if (blocks > 0x7fffffffu) blocks = 0x7fffffffu;
  if (blocks == 0) blocks = 1;
  ty_cu_grid(b, c, (uint32_t)blocks, 1, 1, threads, 1, 1, 0);
}

uint32_t ty_cu_row_threads(int64_t n, uint32_t max) {
  uint32_t t = 32;
  while (t < max && (int64_t)t * 8 < n) t *= 2;
  return t;
}

uint32_t ty_cu_col_split(int64_t col_blocks, int64_t rows, int64_t *out_rchunk) {
  /* ~1024 blocks fill an H100 (132 SMs) several times over. */
  int64_t want = (1024 + col_blocks - 1) / (col_blocks > 0 ? col_blocks : 1);
  int64_t most = (rows + 63) / 64;
  int64_t split = want < most ? want : most;
  if (split > 65535) split = 65535;
  if (split < 1) split = 1;
  int64_t rchunk = rows > 0 ? (rows + split - 1) / split : 1;
  *out_rchunk = rchunk;
  return rows > 0 ? (uint32_t)((rows + rchunk - 1) / rchunk) : 1u;
}


/* ---- elementwise ---- */

void ty_cu_build_binary(ty_cu_build_t *b) {
  const int op = ty_dev_binary_op(b);
  const ty_abi_value_t *ins[2] = {ty_dev_vin(b, 0), ty_dev_vin(b, 1)};
  const ty_abi_value_t *out = ty_dev_vout(b, 0);
  const int64_t n = ty_dev_numel(out);
  if (n == 0) return;
  ty_op_bcast_t p;
  ty_op_bcast_plan(out, ins, 2, &p);
  const bool same_shape = p.rank == 1 && p.stride[0][0] == 1 && p.stride[1][0] == 1;
  const char *typed = same_shape && ty_cu_all_dtype(ins, 2, (int)out->dtype)
                          ? ty_cu_typed(TY_CU_TYPED("ty_binary_same"), (int)out->dtype)
                          : NULL;
  if (typed) {
    /* ty_binary_same_<T>(a, b, c, int op, i64 n) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, typed);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
    ty_dev_arg_i32(b, c, op);
    ty_dev_arg_i64(b, c, n);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
    return;
  }
  /* ty_binary(a, int dta, b, int dtb, c, int dtc, int op, i64 n, int rank,
   *           dims8 dims, dims8 sa, dims8 sb) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, "ty_binary");
  ty_dev_args_binary(b, c, op, n, &p);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_scale(ty_cu_build_t *b) {
  ty_cu_emit_map(b, 0 /* TY_MAP_SCALE */, (float)ty_desc_node_attr_float(b->node, "alpha", 1.0));
}
