/* The attention family on cuda: `attention` (out, lse) and
 * `attention_backward` (dq, dk, dv) as launches of kernels/attention.cu.
 * Which kernels run (tensor cores or the generic f32 ones) and their launch
 * shapes come from cuda_attention_plan.c, the same rule the CPU emulation
 * harness (tests/cuda/attention_emu.cc) checks. The backward is three
 * launches: delta = rowsum(dout * out) - dlse (the optional input 7, the
 * lse output's gradient) into this node's scratch, then dq,
 * then dk and dv; none uses atomics, so results are bit-identical run to
 * run.
 *
 * causal=0 (every key below kv_len visible to every query: context
 * parallel's blocks of earlier keys) runs on the mma.sync kernels' _full
 * instances or the generic kernels, never wgmma (cuda_attention_plan.c);
 * the generic kernels read it from window = -1, which the _full ones
 * ignore.
 *
 * TRAINYARD_CUDA_ATTENTION=generic forces the generic kernels and =mma the
 * mma.sync ones (to compare the paths or rule out a fast one); "auto" or
 * unset picks by the plan's rule, with the wgmma kernels on a compute
 * capability 9.0 card (their fatbin is sm_90a SASS, which runs nowhere
 * else). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention_plan.h"
#include "cuda_ops.h"

#define TY_CU_ATT_LOG2E 1.4426950408889634

static const char *ty_cu_att_dtype_name(ty_dtype_t d) {
  switch (d) {
    case TY_DTYPE_F32: return "f32";
    case TY_DTYPE_BF16: return "bf16";
    case TY_DTYPE_F16: return "f16";
    case TY_DTYPE_F64: return "f64";
    case TY_DTYPE_I32: return "i32";
    case TY_DTYPE_I64: return "i64";
    default: return "u8";
  }
}

bool ty_cu_attention_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                           size_t capacity) {
  const bool backward = strcmp(node->op, "attention_backward") == 0;
  const bool causal = ty_desc_node_attr_int(node, "causal", 1) != 0;
  const uint32_t qi = backward ? 1 : 0, kl = backward ? 6 : 3;
  const ty_abi_value_t *q = &g->values[node->inputs[qi]], *k = &g->values[node->inputs[qi + 1]];
  const ty_abi_value_t *lse =
      &g->values[backward ? node->inputs[5] : node->outputs[1]];
  if (q->rank != 4 || k->rank != 4) {
    snprintf(reason, capacity, "%s needs q [B, T, Hq, D] and k, v [B, S, Hkv, D] (rank 4)",
             node->op);
    return false;
  }
  if (lse->dtype != TY_DTYPE_F32) {
    snprintf(reason, capacity, "%s: lse is %s; the cuda kernels keep it in f32", node->op,
             ty_cu_att_dtype_name(lse->dtype));
    return false;
  }
  if (kl < node->input_count && node->inputs[kl] != UINT32_MAX &&
      g->values[node->inputs[kl]].dtype != TY_DTYPE_I64) {
    snprintf(reason, capacity, "%s: kv_len is %s; it must be an i64 scalar", node->op,
             ty_cu_att_dtype_name(g->values[node->inputs[kl]].dtype));
    return false;
  }
  const int64_t B = q->dims[0], T = q->dims[1], Hq = q->dims[2], D = q->dims[3];
  const int64_t S = k->dims[1], Hkv = k->dims[2];
  if (B * T * Hq * D == 0) return true; /* nothing to compute; the builder fills zeros */
  ty_cu_att_plan_t plan;
  const char *why =
      ty_cu_att_plan(q->dtype, B, T, S, Hq, Hkv, D, TY_CU_ATT_WGMMA, false, causal, &plan);
  if (why) {
    snprintf(reason, capacity, "%s with q [%lld, %lld, %lld, %lld] %s: %s", node->op,
             (long long)B, (long long)T, (long long)Hq, (long long)D,
             ty_cu_att_dtype_name(q->dtype), why);
    return false;
  }
  return true;
}

/* The parameters every forward, dq and dk/dv kernel ends with:
 * int Tq, int S, int Hq, int Hkv, int D, float scale, float sl2, int window,
 * int *err, int node. */
static void ty_cu_att_tail(ty_cu_build_t *b, ty_cu_cmd_t *c, const int64_t shape[5],
                           float scale, float sl2, int32_t window) {
  for (int i = 0; i < 5; ++i) ty_dev_arg_i32(b, c, (int32_t)shape[i]);
  ty_dev_arg_f32(b, c, scale);
  ty_dev_arg_f32(b, c, sl2);
  ty_dev_arg_i32(b, c, window);
  ty_dev_arg_err(b, c);
}

static void ty_cu_att_grid(ty_cu_build_t *b, ty_cu_cmd_t *c, const ty_cu_att_launch_t *l) {
  ty_cu_grid(b, c, l->grid[0], l->grid[1], l->grid[2], l->threads, 1, 1, l->smem);
}

/* The fastest path TRAINYARD_CUDA_ATTENTION and the card allow. */
static ty_cu_att_path_t ty_cu_att_best(ty_cu_build_t *b) {
  const ty_cu_slot_t *slot = b->device->slot;
  const ty_cu_att_path_t card =
      slot->cc_major == 9 && slot->cc_minor == 0 ? TY_CU_ATT_WGMMA : TY_CU_ATT_MMA;
  const char *mode = getenv("TRAINYARD_CUDA_ATTENTION");
  if (!mode || !mode[0] || strcmp(mode, "auto") == 0) return card;
  if (strcmp(mode, "mma") == 0) return TY_CU_ATT_MMA;
  if (strcmp(mode, "generic") == 0) return TY_CU_ATT_GENERIC;
  ty_dev_fail(b, TY_CODE_INVALID_ARGUMENT,
             "TRAINYARD_CUDA_ATTENTION='%s' is not 'auto', 'mma' or 'generic'", mode);
  return TY_CU_ATT_GENERIC;
}

static ty_cu_family_t ty_cu_att_family(const ty_cu_att_launch_t *l) {
  return l->sm90 ? TY_CU_FAM_ATTENTION_SM90 : TY_CU_FAM_ATTENTION;
}

void ty_cu_build_attention(ty_cu_build_t *b) {
  const bool backward = strcmp(b->node->op, "attention_backward") == 0;
  /* forward: q, k, v, kv_len? -> out, lse
   * backward: dout, q, k, v, out, lse, kv_len?, dlse? -> dq, dk, dv */
  const uint32_t qi = backward ? 1 : 0, kl = backward ? 6 : 3;
  const ty_abi_value_t *q = ty_dev_vin(b, qi), *k = ty_dev_vin(b, qi + 1);
  const int64_t B = q->dims[0], T = q->dims[1], Hq = q->dims[2], D = q->dims[3];
  const int64_t S = k->dims[1], Hkv = k->dims[2];
  if (B * T * Hq * D == 0) {
    if (backward) { /* no query sees any key: dk = dv = 0 */
      const uint64_t bytes = (uint64_t)ty_dev_numel(ty_dev_vout(b, 1)) * ty_desc_dtype_size(k->dtype);
      ty_cu_fill(b, ty_dev_out(b, 1), bytes);
      ty_cu_fill(b, ty_dev_out(b, 2), bytes);
    }
    return;
  }
  const ty_cu_att_path_t best = ty_cu_att_best(b);
  if (b->status) return;
  /* causal=0 (context parallel's blocks of earlier keys): the plan picks the
   * mma.sync _full or the generic kernels; the generic ones take it as
   * window -1 (attention_simt.cuh). */
  const bool causal = ty_desc_node_attr_int(b->node, "causal", 1) != 0;
  ty_cu_att_plan_t plan;
  const char *why =
      ty_cu_att_plan(q->dtype, B, T, S, Hq, Hkv, D, best, b->deterministic, causal, &plan);
  if (why) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "%s", why);
    return;
  }
  const double scale = ty_desc_node_attr_float(b->node, "scale", 1.0 / sqrt((double)D));
  int64_t window = ty_desc_node_attr_int(b->node, "window", 0);
  if (window >= S) window = 0; /* no position is that far from key 0 */
  if (!causal) window = -1;     /* the op refuses a window without causal */
  const int64_t shape[5] = {T, S, Hq, Hkv, D};
  const float scale_f = (float)scale, sl2 = (float)(scale * TY_CU_ATT_LOG2E);
  if (!backward) {
    const ty_cu_att_launch_t *l = &plan.launch[TY_CU_ATT_FWD];
    ty_cu_cmd_t *c = ty_cu_launch(b, ty_cu_att_family(l), l->kernel);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));  /* q */
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));  /* k */
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));  /* v */
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0)); /* out */
    ty_dev_arg_ref(b, c, ty_dev_out(b, 1)); /* lse */
    ty_dev_arg_ref(b, c, ty_dev_in(b, kl)); /* kvlen: NULL when absent */
    ty_cu_att_tail(b, c, shape, scale_f, sl2, (int32_t)window);
    ty_cu_att_grid(b, c, l);
    return;
  }
  const int64_t rows = B * Hq * T;
  const ty_dev_ref_t delta = ty_dev_scratch(b, (uint64_t)rows * sizeof(float));
  /* delta(dout, out, dlse, delta, long long rows, int Tq, int Hq, int D) */
  const ty_cu_att_launch_t *l = &plan.launch[TY_CU_ATT_DELTA];
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ATTENTION, l->kernel);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0)); /* dout */
  ty_dev_arg_ref(b, c, ty_dev_in(b, 4)); /* out */
  ty_dev_arg_ref(b, c, ty_dev_in(b, 7)); /* dlse: NULL when absent */
  ty_dev_arg_ref(b, c, delta);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i32(b, c, (int32_t)T);
  ty_dev_arg_i32(b, c, (int32_t)Hq);
  ty_dev_arg_i32(b, c, (int32_t)D);
  ty_cu_att_grid(b, c, l);
  /* dq(dout, q, k, v, lse, delta, kvlen, dq, <tail>) and
   * dkv(dout, q, k, v, lse, delta, kvlen, dk, dv, <tail>) */
  for (int kernel = TY_CU_ATT_DQ; kernel <= TY_CU_ATT_DKV; ++kernel) {
    l = &plan.launch[kernel];
    c = ty_cu_launch(b, ty_cu_att_family(l), l->kernel);
    for (uint32_t i = 0; i < 4; ++i) ty_dev_arg_ref(b, c, ty_dev_in(b, i)); /* dout q k v */
    ty_dev_arg_ref(b, c, ty_dev_in(b, 5));                                /* lse */
    ty_dev_arg_ref(b, c, delta);
    ty_dev_arg_ref(b, c, ty_dev_in(b, kl)); /* kvlen */
    if (kernel == TY_CU_ATT_DQ) {
      ty_dev_arg_ref(b, c, ty_dev_out(b, 0)); /* dq */
    } else {
      ty_dev_arg_ref(b, c, ty_dev_out(b, 1)); /* dk */
      ty_dev_arg_ref(b, c, ty_dev_out(b, 2)); /* dv */
    }
    ty_cu_att_tail(b, c, shape, scale_f, sl2, (int32_t)window);
    ty_cu_att_grid(b, c, l);
  }
}

/* attention_merge(out_a, lse_a, out_b, lse_b) -> out, lse and
 * attention_merge_backward(out_a, lse_a, out_b, lse_b, out, lse, dout?,
 * dlse?) -> dout_a, dlse_a, dout_b, dlse_b on kernels/merge.cu: one warp
 * per (b, h, t) row. The op checks make every out* one float dtype and lse*
 * its statistics dtype; ty_cu_op_check keeps f64 (f64 lse) off cuda. */
void ty_cu_build_attention_merge(ty_cu_build_t *b) {
  const bool backward = strcmp(b->node->op, "attention_merge_backward") == 0;
  const ty_abi_value_t *oa = ty_dev_vin(b, 0), *la = ty_dev_vin(b, 1);
  const int64_t B = oa->dims[0], T = oa->dims[1], H = oa->dims[2], D = oa->dims[3];
  const int64_t rows = B * H * T;
  if (rows == 0) return;
  if (la->dtype != TY_DTYPE_F32) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "lse_a is %s; the cuda merge kernels take f32 lse",
                ty_cu_att_dtype_name(la->dtype));
    return;
  }
  if (T > INT32_MAX || H > INT32_MAX || D > INT32_MAX) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED,
                "out_a [%lld, %lld, %lld, %lld]: T, H and D must be below 2^31",
                (long long)B, (long long)T, (long long)H, (long long)D);
    return;
  }
  const char *kernel = ty_cu_typed(backward ? TY_CU_TYPED("ty_attention_merge_backward")
                                            : TY_CU_TYPED("ty_attention_merge"),
                                   (int)oa->dtype);
  if (!kernel) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "%s runs on f32, bf16 or f16 operands, not %s",
                b->node->op, ty_cu_att_dtype_name(oa->dtype));
    return;
  }
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_MERGE, kernel);
  /* forward: (out_a, lse_a, out_b, lse_b, out, lse, <rows>);
   * backward: (out_a, lse_a, out_b, lse_b, out, lse, dout, dlse, dout_a,
   * dlse_a, dout_b, dlse_b, <rows>); <rows> = i64 rows, int T, int H, int D */
  const uint32_t ins = backward ? 8 : 4;
  for (uint32_t i = 0; i < ins; ++i) ty_dev_arg_ref(b, c, ty_dev_in(b, i)); /* NULL: absent */
  for (uint32_t i = 0; i < (backward ? 4u : 2u); ++i) ty_dev_arg_ref(b, c, ty_dev_out(b, i));
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i32(b, c, (int32_t)T);
  ty_dev_arg_i32(b, c, (int32_t)H);
  ty_dev_arg_i32(b, c, (int32_t)D);
  ty_cu_grid_blocks(b, c, ((uint64_t)rows + 7) / 8, 32 * 8);
}
