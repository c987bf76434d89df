/* Launch builders of the neural-network ops: activations, dropout, norms,
 * softmax, cross-entropy, RoPE, attention and paged attention (kernels in
 * kernels/elementwise.cl, norm.cl, softmax.cl, rope.cl, attention.cl). */
#include <math.h>
#include <string.h>

#include "ocl_exec.h"
#include "trainyard/philox.h"

#define TY_OCL_PI 3.14159265358979323846

void ty_ocl_build_map(ty_ocl_build_t *b) {
  static const char *const names[] = {"scale", "gelu", "gelu_backward", "silu", "silu_backward",
                                      "swiglu", "swiglu_backward"};
  int op = 0;
  while (op < 6 && strcmp(names[op], b->node->op) != 0) ++op;
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  const int64_t n = ty_dev_numel(y);
  if (n == 0) return;
  ty_dev_ref_t none = {TY_DEV_REF_NONE, 0, 0};
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ELEMENTWISE, "ty_map");
  for (uint32_t i = 0; i < 3; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  for (uint32_t o = 0; o < 2; ++o) {
    bool present = o < b->node->output_count;
    ty_dev_arg_ref(b, c, present ? ty_dev_out(b, o) : none);
    ty_dev_arg_i32(b, c, present ? ty_dev_dt(ty_dev_vout(b, o)) : 0);
  }
  ty_dev_arg_i32(b, c, op);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_f32(b, c, 1.0f);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

void ty_ocl_build_dropout(ty_ocl_build_t *b) {
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  const int64_t n = ty_dev_numel(y);
  double p;
  if (!ty_dev_dropout_p(b, &p) || n == 0) return;
  const double keep = 1.0 - p;
  uint64_t keep_bits;
  memcpy(&keep_bits, &keep, sizeof(keep_bits));
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ELEMENTWISE, "ty_dropout");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_u32(b, c, ty_dropout_threshold(p));
  ty_dev_arg_u32(b, c, (uint32_t)ty_desc_node_attr_int(b->node, "stream", 0));
  ty_dev_arg_u64(b, c, keep_bits);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

void ty_ocl_build_norm(ty_ocl_build_t *b) {
  const bool rms = strcmp(b->node->op, "rmsnorm") == 0;
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *g = ty_dev_vin(b, 1);
  const ty_abi_value_t *beta = rms ? NULL : ty_dev_vin(b, 2);
  int64_t C = 1, rows = ty_dev_rows(x, &C);
  if (rows == 0) return;
  ty_dev_ref_t none = {TY_DEV_REF_NONE, 0, 0};
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_NORM, "ty_layernorm");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_i32(b, c, g != NULL);
  ty_dev_arg_ref(b, c, rms ? none : ty_dev_in(b, 2));
  ty_dev_arg_i32(b, c, ty_dev_dt(beta));
  ty_dev_arg_i32(b, c, beta != NULL);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_ref(b, c, rms ? none : ty_dev_out(b, 1));
  ty_dev_arg_i32(b, c, rms ? 0 : ty_dev_dt(ty_dev_vout(b, 1)));
  ty_dev_arg_ref(b, c, ty_dev_out(b, rms ? 1 : 2));
  ty_dev_arg_i32(b, c, ty_dev_dt(ty_dev_vout(b, rms ? 1 : 2)));
  ty_dev_arg_i64(b, c, C);
  ty_dev_arg_f32(b, c, (float)ty_desc_node_attr_float(b->node, "eps", rms ? 1e-6 : 1e-5));
  ty_dev_arg_i32(b, c, rms);
  ty_ocl_grid1(c, (uint64_t)rows * TY_OCL_WG, TY_OCL_WG);
}

void ty_ocl_build_norm_backward(ty_ocl_build_t *b) {
  /* layernorm_backward: dy, x, gamma?, mean, rstd -> dx, dgamma, dbeta
   * rmsnorm_backward:   dy, x, gamma?, rstd       -> dx, dgamma */
  const ty_dev_norm_bwd_t nb = ty_dev_norm_bwd_of(b);
  const ty_abi_value_t *x = ty_dev_vin(b, 1), *g = ty_dev_vin(b, 2);
  int64_t C = 1, rows = ty_dev_rows(x, &C);
  if (rows > 0) {
    ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_NORM, "ty_norm_bwd_dx");
    ty_dev_arg_in(b, c, 0);
    ty_dev_arg_in(b, c, 1);
    ty_dev_arg_in(b, c, 2);
    ty_dev_arg_i32(b, c, g != NULL);
    ty_dev_args_norm_stats(b, c, &nb);
    ty_dev_arg_out(b, c, 0);
    ty_dev_arg_i64(b, c, C);
    ty_dev_arg_i32(b, c, nb.rms);
    ty_ocl_grid1(c, (uint64_t)rows * TY_OCL_WG, TY_OCL_WG);
  }
  if (C == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_NORM, "ty_norm_bwd_params");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_in(b, c, 1);
  ty_dev_args_norm_stats(b, c, &nb);
  ty_dev_arg_out(b, c, 1);
  ty_dev_args_norm_dbeta(b, c, &nb);
  ty_dev_arg_i32(b, c, nb.has_dbeta);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, C);
  ty_dev_arg_i32(b, c, nb.rms);
  const size_t global[3] = {(size_t)((C + 15) / 16 * 16), 16, 1};
  const size_t local[3] = {16, 16, 1};
  ty_ocl_grid(c, 2, global, local);
}

void ty_ocl_build_softmax(ty_ocl_build_t *b) {
  const bool backward = strcmp(b->node->op, "softmax_backward") == 0;
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  int64_t C = 1, rows = ty_dev_rows(y, &C);
  if (rows == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_SOFTMAX, backward ? "ty_softmax_bwd" : "ty_softmax");
  for (uint32_t i = 0; i < (backward ? 2u : 1u); ++i) {
    ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i64(b, c, C);
  ty_ocl_grid1(c, (uint64_t)rows * TY_OCL_WG, TY_OCL_WG);
}

void ty_ocl_build_cross_entropy(ty_ocl_build_t *b) {
  /* forward: logits, targets -> loss; backward: dloss, logits, targets -> dlogits */
  const bool backward = strcmp(b->node->op, "cross_entropy_backward") == 0;
  const ty_abi_value_t *logits = ty_dev_vin(b, backward ? 1 : 0);
  const int64_t V = logits->rank ? logits->dims[logits->rank - 1] : 1;
  const int64_t rows = ty_dev_numel(ty_dev_vin(b, backward ? 2 : 1));
  if (rows == 0) return;
  ty_ocl_cmd_t *c =
      ty_ocl_launch(b, TY_OCL_FAM_SOFTMAX, backward ? "ty_xent_bwd" : "ty_xent");
  for (uint32_t i = 0; i < (backward ? 3u : 2u); ++i) {
    ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, (uint64_t)rows * TY_OCL_WG, TY_OCL_WG);
}

/* inv_freq exactly as ops/reference/ref_rope.c computes it, in f64. */
static void ty_ocl_rope_inv_freq(const ty_abi_node_t *node, int64_t dim, double *inv_freq) {
  const double theta = ty_desc_node_attr_float(node, "theta", 10000.0);
  const bool llama3 = strcmp(ty_desc_node_attr_string(node, "scaling", "default"), "llama3") == 0;
  const double factor = ty_desc_node_attr_float(node, "factor", 1.0);
  const double low = ty_desc_node_attr_float(node, "low_freq_factor", 1.0);
  const double high = ty_desc_node_attr_float(node, "high_freq_factor", 4.0);
  const double old_len = ty_desc_node_attr_float(node, "original_max_position", 8192.0);
  for (int64_t j = 0; j < dim / 2; ++j) {
    double inv = 1.0 / pow(theta, (double)(2 * j) / (double)dim);
    if (llama3) {
      double low_wavelen = old_len / low, high_wavelen = old_len / high;
      double wavelen = 2.0 * TY_OCL_PI / inv;
      if (wavelen > low_wavelen) inv = inv / factor;
      double smooth = (old_len / wavelen - low) / (high - low);
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        inv = (1.0 - smooth) * inv / factor + smooth * inv;
      }
    }
    inv_freq[j] = inv;
  }
}

void ty_ocl_build_rope(ty_ocl_build_t *b) {
  const ty_dev_rope_t rope = ty_dev_rope_of(b);
  const int64_t D = rope.D;
  if (rope.pairs == 0) return;
  double inv[512];
  if (D / 2 > 512) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "head_dim %lld above 1024", (long long)D);
    return;
  }
  ty_ocl_rope_inv_freq(b->node, D, inv);
  ty_dev_ref_t freq = ty_dev_rope_freq_table(b, inv, D / 2);
  if (b->status) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ROPE, "ty_rope");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_out(b, c, 0);
  ty_dev_args_rope_tail(b, c, freq, &rope);
  ty_ocl_grid1(c, (uint64_t)rope.pairs, TY_OCL_WG);
}

/* The shape arguments every attention kernel ends with. */
static void ty_ocl_att_tail(ty_ocl_build_t *b, ty_ocl_cmd_t *c, const ty_abi_value_t *q,
                            const ty_abi_value_t *k) {
  ty_dev_arg_i64(b, c, q->dims[0]);
  ty_dev_arg_i64(b, c, q->dims[1]);
  ty_dev_arg_i64(b, c, k->dims[1]);
  ty_dev_arg_i64(b, c, q->dims[2]);
  ty_dev_arg_i64(b, c, k->dims[2]);
  ty_dev_arg_i64(b, c, q->dims[3]);
  ty_dev_arg_f32(b, c, (float)ty_desc_node_attr_float(b->node, "scale",
                                                      1.0 / sqrt((double)q->dims[3])));
  ty_dev_arg_i64(b, c, ty_desc_node_attr_int(b->node, "window", 0));
  ty_dev_arg_err(b, c);
}

void ty_ocl_build_attention(ty_ocl_build_t *b) {
  const bool backward = strcmp(b->node->op, "attention_backward") == 0;
  /* forward: q, k, v, kv_len? -> out, lse
   * backward: dout, q, k, v, out, lse, kv_len?, dlse? -> dq, dk, dv */
  const uint32_t qi = backward ? 1 : 0, kl = backward ? 6 : 3;
  const ty_abi_value_t *q = ty_dev_vin(b, qi), *k = ty_dev_vin(b, qi + 1);
  const int64_t B = q->dims[0], T = q->dims[1], Hq = q->dims[2], S = k->dims[1];
  const int64_t Hkv = k->dims[2];
  const bool has_kvlen = ty_dev_vin(b, kl) != NULL;
  if (B * T * Hq == 0) return;
  if (!backward) {
    ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ATTENTION, "ty_attention");
    for (uint32_t i = 0; i < 3; ++i) ty_dev_arg_in(b, c, i);
    ty_dev_arg_out(b, c, 0);
    ty_dev_arg_out(b, c, 1);
    ty_dev_arg_in(b, c, kl);
    ty_dev_arg_i32(b, c, has_kvlen);
    ty_ocl_att_tail(b, c, q, k);
    ty_ocl_grid1(c, (uint64_t)(B * Hq * T) * TY_OCL_ATT_WG, TY_OCL_ATT_WG);
    return;
  }
  ty_dev_ref_t delta = ty_dev_scratch(b, (uint64_t)(B * Hq * T) * sizeof(float));
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ATTENTION, "ty_attention_bwd_dq");
  for (uint32_t i = 0; i < 6; ++i) ty_dev_arg_in(b, c, i);
  ty_dev_arg_in(b, c, kl);
  ty_dev_arg_i32(b, c, has_kvlen);
  ty_dev_arg_in(b, c, 7);
  ty_dev_arg_i32(b, c, ty_dev_vin(b, 7) != NULL);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_ref(b, c, delta);
  ty_ocl_att_tail(b, c, q, k);
  ty_ocl_grid1(c, (uint64_t)(B * Hq * T) * TY_OCL_ATT_WG, TY_OCL_ATT_WG);
  if (B * S * Hkv == 0) return;
  c = ty_ocl_launch(b, TY_OCL_FAM_ATTENTION, "ty_attention_bwd_dkv");
  for (uint32_t i = 0; i < 4; ++i) ty_dev_arg_in(b, c, i);
  ty_dev_arg_in(b, c, 5); /* lse */
  ty_dev_arg_ref(b, c, delta);
  ty_dev_arg_in(b, c, kl);
  ty_dev_arg_i32(b, c, has_kvlen);
  ty_dev_arg_out(b, c, 1);
  ty_dev_arg_out(b, c, 2);
  ty_ocl_att_tail(b, c, q, k);
  ty_ocl_grid1(c, (uint64_t)(B * S * Hkv) * TY_OCL_ATT_WG, TY_OCL_ATT_WG);
}

/* paged_attention(q, k_pool, v_pool, block_table, row_seq, row_pos) -> out:
 * one work-group per (row, query head), kernels/attention.cl. */
void ty_ocl_build_paged_attention(ty_ocl_build_t *b) {
  const ty_abi_value_t *q = ty_dev_vin(b, 0), *k = ty_dev_vin(b, 1), *table = ty_dev_vin(b, 3);
  const int64_t N = q->dims[0], Hq = q->dims[1], D = q->dims[2];
  if (N * Hq * D == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ATTENTION, "ty_paged_attention");
  for (uint32_t i = 0; i < 6; ++i) ty_dev_arg_in(b, c, i);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i64(b, c, Hq);
  ty_dev_arg_i64(b, c, k->dims[2]);
  ty_dev_arg_i64(b, c, D);
  ty_dev_arg_i64(b, c, k->dims[0]);
  ty_dev_arg_i64(b, c, k->dims[1]);
  ty_dev_arg_i64(b, c, table->dims[0]);
  ty_dev_arg_i64(b, c, table->dims[1]);
  ty_dev_arg_f32(b, c, (float)ty_desc_node_attr_float(b->node, "scale", 1.0 / sqrt((double)D)));
  ty_dev_arg_i64(b, c, ty_desc_node_attr_int(b->node, "window", 0));
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, (uint64_t)(N * Hq) * TY_OCL_ATT_WG, TY_OCL_ATT_WG);
}
