/* Launch builders of the neural-network ops: activations, dropout, norms,
 * softmax, cross-entropy and RoPE (kernels in kernels/elementwise.cu,
 * norm.cu, softmax.cu, rope.cu). As in cuda_ops.c, the comment above every
 * launch names the kernel and its parameter list, which the ty_dev_arg_*
 * calls under it follow exactly. These ops take float operands of one
 * dtype (inference checks it), so they launch the kernel instance of that
 * dtype. */
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "trainyard/dtype.h"
#include "trainyard/philox.h"
#include "trainyard/ref_rope.h"

#define TY_CU_NORM_THREADS 128u /* 4 warps: 4 rows per block (kernels/norm.cu) */
#define TY_CU_NORM_ROW_K 2         /* kernels/norm.cu TY_NORM_ROW_K */
#define TY_CU_NORM_ROW_MAX_ROWS 64 /* rows up to which a norm takes a block per row */
#define TY_CU_NORM_K 8          /* kernels/norm.cu's TY_NORM_K: rows <= 1024 cached */

/* The instance of a templated kernel for value v's dtype; fails the build
 * when v is not f32, bf16 or f16. */
static const char *ty_cu_typed_for(ty_cu_build_t *b, const char *const names[3],
                                   const ty_abi_value_t *v) {
  const char *k = ty_cu_typed(names, (int)v->dtype);
  if (!k) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "%s runs on f32, bf16 or f16 operands, not %s",
               b->node->op, ty_dtype_name(v->dtype));
  }
  return k;
}

/* ---- activations ---- */

void ty_cu_emit_map(ty_cu_build_t *b, int op, float alpha) {
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  const int64_t n = ty_dev_numel(y);
  if (n == 0) return;
  const bool two = b->node->output_count > 1;
  const ty_abi_value_t *vals[5] = {ty_dev_vin(b, 0), ty_dev_vin(b, 1), ty_dev_vin(b, 2), y,
                                   two ? ty_dev_vout(b, 1) : NULL};
  const char *typed = ty_cu_all_dtype(vals, 5, (int)y->dtype)
                          ? ty_cu_typed(TY_CU_TYPED("ty_map_t"), (int)y->dtype)
                          : NULL;
  if (typed) {
    /* ty_map_t_<T>(a, b, c, y, z, int op, i64 n, f32 alpha) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, typed);
    for (uint32_t i = 0; i < 3; ++i) ty_dev_arg_ref(b, c, ty_dev_in(b, i));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
    ty_dev_arg_ref(b, c, two ? ty_dev_out(b, 1) : ty_dev_none());
    ty_dev_arg_i32(b, c, op);
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_f32(b, c, alpha);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
    return;
  }
  /* ty_map(a, int dta, b, int dtb, c, int dtc, y, int dty, z, int dtz, int op,
   *        i64 n, f32 alpha) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, "ty_map");
  for (uint32_t i = 0; i < 3; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_ref(b, c, two ? ty_dev_out(b, 1) : ty_dev_none());
  ty_dev_arg_i32(b, c, two ? ty_dev_dt(ty_dev_vout(b, 1)) : 0);
  ty_dev_arg_i32(b, c, op);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_f32(b, c, alpha);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_map(ty_cu_build_t *b) {
  /* TY_MAP_* of kernels/elementwise.cu, in order. */
  static const char *const names[] = {"scale", "gelu", "gelu_backward", "silu", "silu_backward",
                                      "swiglu", "swiglu_backward"};
  int op = 0;
  while (op < 6 && strcmp(names[op], b->node->op) != 0) ++op;
  ty_cu_emit_map(b, op, 1.0f);
}

/* Dropout numbered as in the whole sequence (seq_len > 0: context
 * parallel; docs/ops.md "Dropout"), bit for bit the cpu kernel's mask. The
 * op checks made seq_starts split axis 1 of x (rank >= 2) into equal
 * slices inside [0, seq_len).
 * ty_dropout_seq_<T>(x, rng, int dtrng, y, i64 n, i64 inner, i64 local,
 *                    i64 m, i64 seq_len, dims8 starts, u32 threshold,
 *                    u32 stream, f64 keep): a thread per element */
static void ty_cu_build_dropout_seq(ty_cu_build_t *b, int64_t seq_len, const char *kernel) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  const int64_t n = ty_dev_numel(x);
  const double p = ty_desc_node_attr_float(b->node, "p", 0.0);
  if (!(p >= 0.0 && p < 1.0)) {
    ty_dev_fail(b, TY_CODE_INVALID_ARGUMENT, "probability %g is outside [0, 1)", p);
    return;
  }
  const ty_abi_attr_t *st = ty_desc_node_attr(b->node, "seq_starts");
  if (!st || st->kind != TY_ATTR_INTS || st->count == 0 || x->rank < 2 ||
      x->dims[1] % (int64_t)st->count != 0) {
    ty_dev_fail(b, TY_CODE_INVALID_ARGUMENT,
                "seq_len needs seq_starts splitting axis 1 of x (rank >= 2) into equal slices");
    return;
  }
  if (st->count > 8) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED,
                "%u seq_starts: the cuda dropout kernel takes at most 8 slices of the sequence "
                "(context parallel gives each rank 2)",
                st->count);
    return;
  }
  if (n == 0) return;
  int64_t inner = 1, starts[8] = {0};
  for (uint32_t d = 2; d < x->rank; ++d) inner *= x->dims[d];
  for (uint32_t j = 0; j < st->count; ++j) starts[j] = st->ints[j];
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, kernel);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_i64(b, c, inner);
  ty_dev_arg_i64(b, c, x->dims[1]);
  ty_dev_arg_i64(b, c, x->dims[1] / (int64_t)st->count);
  ty_dev_arg_i64(b, c, seq_len);
  ty_dev_arg_dims8(b, c, starts);
  ty_dev_arg_u32(b, c, ty_dropout_threshold(p));
  ty_dev_arg_u32(b, c, (uint32_t)ty_desc_node_attr_int(b->node, "stream", 0));
  ty_dev_arg_f64(b, c, 1.0 - p);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_dropout(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  const int64_t n = ty_dev_numel(y);
  const int64_t seq_len = ty_desc_node_attr_int(b->node, "seq_len", 0);
  if (seq_len > 0) {
    const char *kernel = ty_cu_typed_for(b, TY_CU_TYPED("ty_dropout_seq"), y);
    if (!kernel) return;
    if (x->dtype != y->dtype) {
      ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "x and y of different dtypes");
      return;
    }
    ty_cu_build_dropout_seq(b, seq_len, kernel);
    return;
  }
  double p;
  if (!ty_dev_dropout_p(b, &p) || n == 0) return;
  const char *kernel = ty_cu_typed_for(b, TY_CU_TYPED("ty_dropout"), y);
  if (kernel && x->dtype != y->dtype) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "x and y of different dtypes");
    return;
  }
  /* ty_dropout_<T>(x, rng, int dtrng, y, i64 n, u32 threshold, u32 stream,
   *                f64 keep): a thread per group of 4 (one Philox call) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, kernel);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_u32(b, c, ty_dropout_threshold(p));
  ty_dev_arg_u32(b, c, (uint32_t)ty_desc_node_attr_int(b->node, "stream", 0));
  ty_dev_arg_f64(b, c, 1.0 - p);
  ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
}

/* ---- norms ---- */

void ty_cu_build_norm(ty_cu_build_t *b) {
  /* layernorm: x, gamma?, beta? -> y, mean, rstd;  rmsnorm: x, gamma? -> y, rstd */
  const bool rms = strcmp(b->node->op, "rmsnorm") == 0;
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  int64_t C = 1, rows = ty_dev_rows(x, &C);
  if (rows == 0) return;
  /* Few rows (a decode step) outside deterministic mode: a block per row
   * (kernels/norm.cu ty_layernorm_row), its elements in registers. */
  const uint32_t row_threads =
      rows <= TY_CU_NORM_ROW_MAX_ROWS && !b->deterministic && C <= 1024 * 4 * TY_CU_NORM_ROW_K
          ? (uint32_t)((C + 4 * TY_CU_NORM_ROW_K * 32 - 1) / (4 * TY_CU_NORM_ROW_K * 32) * 32)
          : 0;
  const char *kernel = row_threads ? ty_cu_typed_for(b, TY_CU_TYPED("ty_layernorm_row"), x)
                                   : ty_cu_typed_for(b, TY_CU_TYPED("ty_layernorm"), x);
  const ty_dev_ref_t none = ty_dev_none();
  const uint32_t r = rms ? 1 : 2; /* rstd's output */
  /* Fused with the cast after it (cuda_fuse.h): y is the cast's output. */
  const uint32_t y = ty_cu_fuse_of(b) && ty_cu_fuse_of(b)->kind == TY_CU_FUSE_NORM ? ty_cu_fuse_of(b)->out : UINT32_MAX;
  /* ty_layernorm_<T>(x, gamma, beta, y, int dty, mean, int dtm, rstd, int dtr,
   *                  i64 rows, i64 C, f32 eps, int rms): a warp per row */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_NORM, kernel);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, c, rms ? none : ty_dev_in(b, 2));
  ty_dev_arg_ref(b, c, y != UINT32_MAX ? ty_dev_value(y) : ty_dev_out(b, 0));
  ty_dev_arg_i32(b, c, y != UINT32_MAX ? (int)b->g->values[y].dtype : 0);
  ty_dev_arg_ref(b, c, rms ? none : ty_dev_out(b, 1));
  ty_dev_arg_i32(b, c, rms ? 0 : ty_dev_dt(ty_dev_vout(b, 1)));
  ty_dev_arg_out(b, c, r);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, C);
  ty_dev_arg_f32(b, c, (float)ty_desc_node_attr_float(b->node, "eps", rms ? 1e-6 : 1e-5));
  ty_dev_arg_i32(b, c, rms);
  if (row_threads) {
    ty_cu_grid(b, c, (uint32_t)rows, 1, 1, row_threads < 64 ? 64 : row_threads, 1, 1, 0);
  } else {
    ty_cu_grid_blocks(b, c, ((uint64_t)rows + 3) / 4, TY_CU_NORM_THREADS);
  }
}

void ty_cu_build_norm_backward(ty_cu_build_t *b) {
  /* layernorm_backward: dy, x, gamma?, mean, rstd -> dx, dgamma, dbeta
   * rmsnorm_backward:   dy, x, gamma?, rstd       -> dx, dgamma */
  const ty_dev_norm_bwd_t nb = ty_dev_norm_bwd_of(b);
  const bool rms = nb.rms;
  const ty_abi_value_t *x = ty_dev_vin(b, 1);
  int64_t C = 1, rows = ty_dev_rows(x, &C);
  const ty_dev_ref_t none = ty_dev_none();
  /* Fused with the cast before it, the add after it and the cast of the
   * sum (cuda_fuse.h): what the one-pass kernel reads and writes instead. */
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b) && ty_cu_fuse_of(b)->kind == TY_CU_FUSE_NORM_BWD ? ty_cu_fuse_of(b) : NULL;
  const uint32_t dy = f && f->dy != UINT32_MAX ? f->dy : b->node->inputs[0];
  const bool one_pass = rows >= 1024 && C % 4 == 0 && C <= 128 * TY_CU_NORM_K &&
                        ty_cu_typed(TY_CU_TYPED("ty_norm_bwd_fused"), (int)x->dtype) &&
                        (f || ty_dev_vin(b, 0)->dtype == x->dtype) &&
                        ty_dev_vout(b, 0)->dtype == x->dtype &&
                        (!ty_dev_vin(b, 2) || ty_dev_vin(b, 2)->dtype == x->dtype);
  if (f && !one_pass) {
    ty_dev_fail(b, TY_CODE_INTERNAL, "a fused norm backward outside the one-pass kernel's shapes");
    return;
  }
  if (one_pass) {
    /* One pass (kernels/norm.cu, ty_norm_bwd_fused): 3 blocks per SM (166 registers) of 4
     * warps, each leaving f64 partials of dgamma and dbeta. */
    const uint32_t blocks = 3 * ty_cu_sm_count(b);
    ty_dev_ref_t part = ty_dev_scratch(b, 2 * (uint64_t)blocks * (uint64_t)C * sizeof(double));
    /* ty_norm_bwd_fused_<T>(dy, int dtdy, x, gamma, mean, int dtm, rstd, int dtr, resid,
     *                       dx, dx2, int dtdx2, f64 *part, i64 rows, i64 C, int rms) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_NORM,
                                  ty_cu_typed(TY_CU_TYPED("ty_norm_bwd_fused"), (int)x->dtype));
    const bool has_out2 = f && f->out2 != UINT32_MAX;
    ty_dev_arg_ref(b, c, ty_dev_value(dy));
    ty_dev_arg_i32(b, c, (int)b->g->values[dy].dtype);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_args_norm_stats(b, c, &nb);
    ty_dev_arg_ref(b, c, f && f->addend != UINT32_MAX ? ty_dev_value(f->addend) : none);
    ty_dev_arg_ref(b, c, f && f->out != UINT32_MAX ? ty_dev_value(f->out) : ty_dev_out(b, 0));
    ty_dev_arg_ref(b, c, has_out2 ? ty_dev_value(f->out2) : none);
    ty_dev_arg_i32(b, c, has_out2 ? (int)b->g->values[f->out2].dtype : 0);
    ty_dev_arg_ref(b, c, part);
    ty_dev_arg_i64(b, c, rows);
    ty_dev_arg_i64(b, c, C);
    ty_dev_arg_i32(b, c, rms);
    ty_cu_grid(b, c, blocks, 1, 1, TY_CU_NORM_THREADS, 1, 1, 0);
    /* ty_norm_params_finish(const f64 *part, i64 chunks, i64 C, dgamma, int dtdg,
     *                       dbeta, int dtdb) */
    c = ty_cu_launch(b, TY_CU_FAM_NORM, "ty_norm_params_finish");
    ty_dev_arg_ref(b, c, part);
    ty_dev_arg_i64(b, c, blocks);
    ty_dev_arg_i64(b, c, C);
    ty_dev_arg_out(b, c, 1);
    ty_dev_args_norm_dbeta(b, c, &nb);
    ty_cu_grid(b, c, (uint32_t)((C + 31) / 32), 1, 1, 32, 32, 1, 0); /* 32 columns x 32 */
    return;
  }
  if (rows > 0) {
    /* ty_norm_bwd_dx_<T>(dy, x, gamma, mean, int dtm, rstd, int dtr, dx, i64 rows,
     *                    i64 C, int rms): a warp per row */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_NORM,
                                  ty_cu_typed_for(b, TY_CU_TYPED("ty_norm_bwd_dx"), x));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_args_norm_stats(b, c, &nb);
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
    ty_dev_arg_i64(b, c, rows);
    ty_dev_arg_i64(b, c, C);
    ty_dev_arg_i32(b, c, rms);
    ty_cu_grid_blocks(b, c, ((uint64_t)rows + 3) / 4, TY_CU_NORM_THREADS);
  }
  if (C == 0) return;
  const int64_t cb = (C + 31) / 32;
  int64_t rchunk;
  const uint32_t split = ty_cu_col_split(cb, rows, &rchunk);
  ty_dev_ref_t part = none;
  if (split > 1) part = ty_dev_scratch(b, 2 * (uint64_t)split * (uint64_t)C * sizeof(double));
  /* ty_norm_params_<T>(dy, x, mean, int dtm, rstd, int dtr, dgamma, int dtdg,
   *                    dbeta, int dtdb, f64 *part, i64 rows, i64 C, i64 rchunk,
   *                    int rms): 32 columns x 8 row lanes per block, `split`
   * row chunks */
  ty_cu_cmd_t *c =
      ty_cu_launch(b, TY_CU_FAM_NORM, ty_cu_typed_for(b, TY_CU_TYPED("ty_norm_params"), x));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_args_norm_stats(b, c, &nb);
  ty_dev_arg_out(b, c, 1);
  ty_dev_args_norm_dbeta(b, c, &nb);
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, C);
  ty_dev_arg_i64(b, c, rchunk);
  ty_dev_arg_i32(b, c, rms);
  ty_cu_grid(b, c, (uint32_t)(cb > 0x7fffffff ? 0x7fffffff : cb), split, 1, 32, 8, 1, 0);
  if (split == 1) return;
  /* ty_norm_params_finish(const f64 *part, i64 chunks, i64 C, dgamma, int dtdg,
   *                       dbeta, int dtdb) */
  c = ty_cu_launch(b, TY_CU_FAM_NORM, "ty_norm_params_finish");
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i64(b, c, split);
  ty_dev_arg_i64(b, c, C);
  ty_dev_arg_out(b, c, 1);
  ty_dev_args_norm_dbeta(b, c, &nb);
  ty_cu_grid(b, c, (uint32_t)((C + 31) / 32), 1, 1, 32, 32, 1, 0); /* 32 columns x 32 */
}

/* ---- softmax and cross-entropy: a block per row ---- */

void ty_cu_build_softmax(ty_cu_build_t *b) {
  const bool backward = strcmp(b->node->op, "softmax_backward") == 0;
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  int64_t C = 1, rows = ty_dev_rows(y, &C);
  if (rows == 0) return;
  const char *kernel =
      ty_cu_typed_for(b, backward ? TY_CU_TYPED("ty_softmax_bwd") : TY_CU_TYPED("ty_softmax"), y);
  /* ty_softmax_<T>(x, y, i64 rows, i64 C)
   * ty_softmax_bwd_<T>(dy, y, dx, i64 rows, i64 C) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_SOFTMAX, kernel);
  for (uint32_t i = 0; i < (backward ? 2u : 1u); ++i) ty_dev_arg_ref(b, c, ty_dev_in(b, i));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, C);
  ty_cu_grid_blocks(b, c, (uint64_t)rows, ty_cu_row_threads(C, 1024));
}

void ty_cu_build_cross_entropy(ty_cu_build_t *b) {
  /* forward: logits, targets -> loss;  backward: dloss, logits, targets -> dlogits */
  const bool backward = strcmp(b->node->op, "cross_entropy_backward") == 0;
  const uint32_t zi = backward ? 1 : 0;
  const ty_abi_value_t *logits = ty_dev_vin(b, zi), *targets = ty_dev_vin(b, zi + 1);
  const int64_t V = logits->rank ? logits->dims[logits->rank - 1] : 1;
  const int64_t rows = ty_dev_numel(targets);
  if (rows == 0) return;
  /* After a forward on the same logits and targets the backward takes
   * each row's logsumexp from its f32 loss (ty_xent_bwd_lse; the memory
   * plan keeps the loss until then). dlogits may be the logits' own bytes
   * (the plan's in-place output): both kernels read each element before
   * writing it. */
  const uint32_t loss = backward ? ty_cu_extra_read(b) : UINT32_MAX;
  const char *kernel = ty_cu_typed_for(b,
                                       !backward              ? TY_CU_TYPED("ty_xent")
                                       : loss != UINT32_MAX ? TY_CU_TYPED("ty_xent_bwd_lse")
                                                            : TY_CU_TYPED("ty_xent_bwd"),
                                       logits);
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_SOFTMAX, kernel);
  if (backward) {
    /* ty_xent_bwd_<T>(dloss, int dtdl, logits, targets, int dtt, dz, i64 rows,
     *                 i64 V, i64 ld, i64 ldz, err, int node)
     * ty_xent_bwd_lse_<T>(dloss, int dtdl, logits, targets, int dtt, f32 *loss, dz,
     *                     i64 rows, i64 V, i64 ld, i64 ldz, err, int node) */
    ty_dev_arg_in(b, c, 0);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_arg_i32(b, c, ty_dev_dt(targets));
    if (loss != UINT32_MAX) ty_dev_arg_ref(b, c, ty_dev_value(loss));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  } else {
    /* ty_xent_<T>(logits, targets, int dtt, loss, int dtl, i64 rows, i64 V, i64 ld,
     *             err, int node) */
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_i32(b, c, ty_dev_dt(targets));
    ty_dev_arg_out(b, c, 0);
  }
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_i64(b, c, ty_cu_row_stride(b, b->node->inputs[zi]));
  if (backward) ty_dev_arg_i64(b, c, ty_cu_row_stride(b, b->node->outputs[0]));
  ty_dev_arg_err(b, c);
  ty_cu_grid_blocks(b, c, (uint64_t)rows, ty_cu_row_threads(V, 1024));
}

/* ---- rotary embeddings ---- */

/* inv_freq[D/2] in f64 by the reference itself (ops/reference/ref_rope.c,
 * llama3 scaling included), so the table is the oracle's to the bit. */
static bool ty_cu_rope_inv_freq(ty_cu_build_t *b, int64_t dim, double *inv_freq) {
  const ty_abi_node_t *node = b->node;
  const char *kind = ty_desc_node_attr_string(node, "scaling", "default");
  const ty_ref_rope_scaling_t scaling = {
      .kind = strcmp(kind, "llama3") == 0 ? TY_REF_ROPE_LLAMA3 : TY_REF_ROPE_DEFAULT,
      .factor = ty_desc_node_attr_float(node, "factor", 1.0),
      .low_freq_factor = ty_desc_node_attr_float(node, "low_freq_factor", 1.0),
      .high_freq_factor = ty_desc_node_attr_float(node, "high_freq_factor", 4.0),
      .original_max_position_embeddings =
          ty_desc_node_attr_float(node, "original_max_position", 8192.0),
  };
  ty_status_t s = ty_ref_rope_inv_freq(dim, ty_desc_node_attr_float(node, "theta", 10000.0),
                                       &scaling, inv_freq);
  if (s) {
    ty_dev_fail(b, ty_status_code(s), "%s", ty_status_message(s));
    ty_status_free(s);
    return false;
  }
  return true;
}

void ty_cu_build_rope(ty_cu_build_t *b) {
  const ty_dev_rope_t rope = ty_dev_rope_of(b);
  const int64_t D = rope.D;
  if (rope.pairs == 0) return;
  const char *kernel = ty_cu_typed_for(b, TY_CU_TYPED("ty_rope"), ty_dev_vin(b, 0));
  if (!kernel) return;
  double *inv = malloc((size_t)(D / 2 + 1) * sizeof(double));
  if (!inv) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  if (!ty_cu_rope_inv_freq(b, D, inv)) {
    free(inv);
    return;
  }
  ty_dev_ref_t freq = ty_dev_rope_freq_table(b, inv, D / 2);
  free(inv);
  if (b->status) return;
  /* ty_rope_<T>(x, y, pos, int dtpos, const f32 *freq, i64 T, i64 H, i64 D,
   *             f32 sign, i64 pairs, x2, y2, i64 H2, i64 pairs2): a thread per
   * rotated pair; x2 -> y2 the keys of a ROPE_PAIR (cuda_fuse.h) */
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b);
  const ty_abi_node_t *second =
      f && f->kind == TY_CU_FUSE_ROPE_PAIR ? &b->g->nodes[f->slices[0]] : NULL;
  const ty_abi_value_t *x2 = second ? &b->g->values[second->inputs[0]] : NULL;
  const int64_t pairs2 = x2 ? ty_dev_numel(x2) / 2 : 0;
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ROPE, kernel);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_args_rope_tail(b, c, freq, &rope);
  ty_dev_arg_ref(b, c, second ? ty_dev_value(second->inputs[0]) : ty_dev_none());
  ty_dev_arg_ref(b, c, second ? ty_dev_value(second->outputs[0]) : ty_dev_none());
  ty_dev_arg_i64(b, c, x2 ? x2->dims[2] : 0);
  ty_dev_arg_i64(b, c, pairs2);
  ty_cu_grid1(b, c, (uint64_t)(rope.pairs + pairs2), TY_CU_BLOCK);
}
