/* The op table of the cuda executor and the launch builders of the
 * element-moving, elementwise, reduction, embedding and optimizer ops. Each
 * builder reads its node's shapes and attributes (as
 * ops/reference/ref_interp.c does), then appends the kernel launches, fills
 * and copies that compute it (cuda_exec.h). The comment above every launch
 * names the kernel and its parameter list: the ty_cu_arg_* calls under it
 * must follow that list exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/op_shapes.h"
#include "backends/cuda/cuda_ops.h"
#include "hal/dtype.h"

static const ty_cu_op_t ty_cu_ops[] = {
    {"embedding", ty_cu_build_embedding, TY_ABI_ACCEPT_COMPUTE},
    {"embedding_backward", ty_cu_build_embedding_backward, TY_ABI_ACCEPT_COMPUTE},
    {"matmul", ty_cu_build_matmul, TY_ABI_ACCEPT_COMPUTE},
    {"add", ty_cu_build_binary, TY_ABI_ACCEPT_COMPUTE},
    {"sub", ty_cu_build_binary, TY_ABI_ACCEPT_COMPUTE},
    {"mul", ty_cu_build_binary, TY_ABI_ACCEPT_COMPUTE},
    {"div", ty_cu_build_binary, TY_ABI_ACCEPT_COMPUTE},
    {"scale", ty_cu_build_scale, TY_ABI_ACCEPT_COMPUTE},
    {"broadcast_to", ty_cu_build_broadcast_to, TY_ABI_ACCEPT_MOVE},
    {"reduce_sum", ty_cu_build_reduce, TY_ABI_ACCEPT_COMPUTE},
    {"reduce_mean", ty_cu_build_reduce, TY_ABI_ACCEPT_COMPUTE},
    {"reduce_sumsq", ty_cu_build_reduce, TY_ABI_ACCEPT_COMPUTE},
    {"layernorm", ty_cu_build_norm, TY_ABI_ACCEPT_COMPUTE},
    {"layernorm_backward", ty_cu_build_norm_backward, TY_ABI_ACCEPT_COMPUTE},
    {"rmsnorm", ty_cu_build_norm, TY_ABI_ACCEPT_COMPUTE},
    {"rmsnorm_backward", ty_cu_build_norm_backward, TY_ABI_ACCEPT_COMPUTE},
    {"gelu", ty_cu_build_map, TY_ABI_ACCEPT_COMPUTE},
    {"gelu_backward", ty_cu_build_map, TY_ABI_ACCEPT_COMPUTE},
    {"silu", ty_cu_build_map, TY_ABI_ACCEPT_COMPUTE},
    {"silu_backward", ty_cu_build_map, TY_ABI_ACCEPT_COMPUTE},
    {"swiglu", ty_cu_build_map, TY_ABI_ACCEPT_COMPUTE},
    {"swiglu_backward", ty_cu_build_map, TY_ABI_ACCEPT_COMPUTE},
    {"softmax", ty_cu_build_softmax, TY_ABI_ACCEPT_COMPUTE},
    {"softmax_backward", ty_cu_build_softmax, TY_ABI_ACCEPT_COMPUTE},
    {"rope", ty_cu_build_rope, TY_ABI_ACCEPT_COMPUTE},
    {"rope_backward", ty_cu_build_rope, TY_ABI_ACCEPT_COMPUTE},
    {"attention", ty_cu_build_attention, TY_ABI_ACCEPT_COMPUTE},
    {"attention_backward", ty_cu_build_attention, TY_ABI_ACCEPT_COMPUTE},
    {"cross_entropy", ty_cu_build_cross_entropy, TY_ABI_ACCEPT_COMPUTE},
    {"cross_entropy_backward", ty_cu_build_cross_entropy, TY_ABI_ACCEPT_COMPUTE},
    {"dropout", ty_cu_build_dropout, TY_ABI_ACCEPT_COMPUTE},
    {"dropout_backward", ty_cu_build_dropout, TY_ABI_ACCEPT_COMPUTE},
    {"cast", ty_cu_build_cast, TY_ABI_ACCEPT_CAST},
    {"reshape", ty_cu_build_reshape, TY_ABI_ACCEPT_MOVE},
    {"transpose", ty_cu_build_transpose, TY_ABI_ACCEPT_MOVE},
    {"slice", ty_cu_build_slice, TY_ABI_ACCEPT_MOVE},
    {"slice_backward", ty_cu_build_slice_backward, TY_ABI_ACCEPT_MOVE},
    {"concat", ty_cu_build_concat, TY_ABI_ACCEPT_MOVE},
    {"adamw_update", ty_cu_build_adamw, TY_ABI_ACCEPT_COMPUTE},
    {"sgd_update", ty_cu_build_sgd, TY_ABI_ACCEPT_COMPUTE},
    {"clip_by_global_norm", ty_cu_build_clip, TY_ABI_ACCEPT_COMPUTE},
    {"linear_cross_entropy", ty_cu_build_linear_ce, TY_ABI_ACCEPT_COMPUTE},
    {"linear_cross_entropy_backward", ty_cu_build_linear_ce, TY_ABI_ACCEPT_COMPUTE},
    {"adafactor_update", ty_cu_build_adafactor, TY_ABI_ACCEPT_COMPUTE},
    {"global_norm_scale", ty_cu_build_global_norm_scale, TY_ABI_ACCEPT_COMPUTE},
    {"kv_cache_write", ty_cu_build_kv_cache_write, TY_ABI_ACCEPT_MOVE},
    {"all_reduce", ty_cu_build_all_reduce, TY_ABI_ACCEPT_COMPUTE},
    {"tp_reduce", ty_cu_build_all_reduce, TY_ABI_ACCEPT_COMPUTE},
    {"tp_copy", ty_cu_build_reshape, TY_ABI_ACCEPT_COMPUTE}, /* the identity: a copy */
    {"vocab_embedding", ty_cu_build_vocab_embedding, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_embedding_backward", ty_cu_build_vocab_embedding_backward, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_max", ty_cu_build_vocab_max, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_max_backward", ty_cu_build_vocab_max, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_ce_sums", ty_cu_build_vocab_ce_sums, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_ce_sums_backward", ty_cu_build_vocab_ce_sums, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_ce_loss", ty_cu_build_vocab_ce_loss, TY_ABI_ACCEPT_COMPUTE},
    {"vocab_ce_loss_backward", ty_cu_build_vocab_ce_loss, TY_ABI_ACCEPT_COMPUTE},
    {NULL, NULL, TY_ABI_ACCEPT_MOVE},
};

const ty_cu_op_t *ty_cu_op_find(const char *op) {
  for (const ty_cu_op_t *o = ty_cu_ops; o->op; ++o) {
    if (strcmp(o->op, op) == 0) return o;
  }
  return NULL;
}

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
    {"adafactor_update", true},
};

bool ty_cu_op_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                    size_t capacity) {
  if (strncmp(node->op, "attention", 9) == 0) {
    return ty_cu_attention_check(g, node, reason, capacity);
  }
  if (strncmp(node->op, "vocab_", 6) == 0) return ty_cu_vocab_check(g, node, reason, capacity);
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
    const int64_t ids = ty_abi_value_elements(&g->values[node->inputs[1]]);
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

static size_t ty_cu_esize(const ty_abi_value_t *v) { return ty_abi_dtype_size(v->dtype); }

/* ---- elementwise ---- */

void ty_cu_build_binary(ty_cu_build_t *b) {
  static const char *const names[] = {"add", "sub", "mul", "div"};
  int op = 0;
  while (op < 3 && strcmp(names[op], b->node->op) != 0) ++op;
  const ty_abi_value_t *ins[2] = {ty_cu_vin(b, 0), ty_cu_vin(b, 1)};
  const ty_abi_value_t *out = ty_cu_vout(b, 0);
  const int64_t n = ty_cu_numel(out);
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
    ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
    ty_cu_arg_ptr(b, c, ty_cu_in(b, 1));
    ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
    ty_cu_arg_i32(b, c, op);
    ty_cu_arg_i64(b, c, n);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
    return;
  }
  /* ty_binary(a, int dta, b, int dtb, c, int dtc, int op, i64 n, int rank,
   *           dims8 dims, dims8 sa, dims8 sb) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_ELEMENTWISE, "ty_binary");
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(ins[0]));
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 1));
  ty_cu_arg_i32(b, c, ty_cu_dt(ins[1]));
  ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(out));
  ty_cu_arg_i32(b, c, op);
  ty_cu_arg_i64(b, c, n);
  ty_cu_arg_i32(b, c, p.rank);
  ty_cu_arg_dims8(b, c, p.dims);
  ty_cu_arg_dims8(b, c, p.stride[0]);
  ty_cu_arg_dims8(b, c, p.stride[1]);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_scale(ty_cu_build_t *b) {
  ty_cu_emit_map(b, 0 /* TY_MAP_SCALE */, (float)ty_abi_node_attr_float(b->node, "alpha", 1.0));
}

/* ---- element movers ---- */

/* y[i] = x[...] over `rank` dims with strides in elements: size-1 axes
 * dropped, axes both sides walk contiguously merged, and a contiguous
 * innermost axis moved in units of up to 16 bytes. A plain contiguous copy
 * becomes a device copy. */
static void ty_cu_strided_copy(ty_cu_build_t *b, ty_cu_ref_t x, ty_cu_ref_t y, size_t esize,
                               int rank, const int64_t *dims, const int64_t *xs,
                               const int64_t *ys) {
  int64_t n = 1, d8[8], x8[8], y8[8];
  int r = 0;
  for (int d = 0; d < rank; ++d) n *= dims[d];
  if (n == 0) return;
  for (int d = 0; d < rank; ++d) {
    if (dims[d] == 1) continue;
    if (r > 0 && x8[r - 1] == xs[d] * dims[d] && y8[r - 1] == ys[d] * dims[d]) {
      d8[r - 1] *= dims[d];
      x8[r - 1] = xs[d];
      y8[r - 1] = ys[d];
    } else {
      d8[r] = dims[d];
      x8[r] = xs[d];
      y8[r] = ys[d];
      r++;
    }
  }
  if (r == 0) { /* one element */
    d8[0] = 1;
    x8[0] = y8[0] = 1;
    r = 1;
  }
  if (r == 1 && x8[0] == 1 && y8[0] == 1) {
    ty_cu_copy(b, x, y, (uint64_t)n * esize);
    return;
  }
  int vec = 1;
  if (x8[r - 1] == 1 && y8[r - 1] == 1) {
    for (int v = (int)(16 / esize); v > 1 && vec == 1; v /= 2) {
      bool ok = d8[r - 1] % v == 0 && (x.offset | y.offset) % ((uint64_t)v * esize) == 0;
      for (int d = 0; d < r - 1 && ok; ++d) ok = x8[d] % v == 0 && y8[d] % v == 0;
      if (ok) vec = v;
    }
  }
  for (int d = r; d < 8; ++d) {
    d8[d] = 1;
    x8[d] = y8[d] = 0;
  }
  /* ty_strided_copy(x, y, int esize, int vec, i64 n, int rank, dims8 dims,
   *                 dims8 xs, dims8 ys) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, "ty_strided_copy");
  ty_cu_arg_ptr(b, c, x);
  ty_cu_arg_ptr(b, c, y);
  ty_cu_arg_i32(b, c, (int32_t)esize);
  ty_cu_arg_i32(b, c, vec);
  ty_cu_arg_i64(b, c, n);
  ty_cu_arg_i32(b, c, r);
  ty_cu_arg_dims8(b, c, d8);
  ty_cu_arg_dims8(b, c, x8);
  ty_cu_arg_dims8(b, c, y8);
  ty_cu_grid1(b, c, (uint64_t)(n / vec), TY_CU_BLOCK);
}

void ty_cu_build_broadcast_to(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_cu_vin(b, 0), *y = ty_cu_vout(b, 0);
  if (ty_cu_numel(y) == 0) return;
  ty_op_bcast_t p;
  ty_op_bcast_plan(y, &x, 1, &p);
  int64_t ys[8];
  ty_op_strides((uint32_t)p.rank, p.dims, ys);
  ty_cu_strided_copy(b, ty_cu_in(b, 0), ty_cu_out(b, 0), ty_cu_esize(y), p.rank, p.dims,
                     p.stride[0], ys);
}

void ty_cu_build_cast(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_cu_vin(b, 0), *y = ty_cu_vout(b, 0);
  const int64_t n = ty_cu_numel(y);
  if (n == 0) return;
  if (x->dtype == y->dtype) {
    ty_cu_copy(b, ty_cu_in(b, 0), ty_cu_out(b, 0), (uint64_t)n * ty_cu_esize(y));
    return;
  }
  /* The casts of mixed precision, 4 elements a thread:
   * ty_cast_<from>_<to>(x, y, i64 n) */
  static const struct {
    ty_dtype_t from, to;
    const char *kernel;
  } fast[] = {
      {TY_DTYPE_F32, TY_DTYPE_BF16, "ty_cast_f32_bf16"},
      {TY_DTYPE_F32, TY_DTYPE_F16, "ty_cast_f32_f16"},
      {TY_DTYPE_BF16, TY_DTYPE_F32, "ty_cast_bf16_f32"},
      {TY_DTYPE_F16, TY_DTYPE_F32, "ty_cast_f16_f32"},
  };
  for (size_t i = 0; i < sizeof(fast) / sizeof(fast[0]); ++i) {
    if (fast[i].from == x->dtype && fast[i].to == y->dtype) {
      ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, fast[i].kernel);
      ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
      ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
      ty_cu_arg_i64(b, c, n);
      ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
      return;
    }
  }
  /* ty_cast(x, int dtx, y, int dty, i64 n, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, "ty_cast");
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(x));
  ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(y));
  ty_cu_arg_i64(b, c, n);
  ty_cu_arg_err(b, c);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_reshape(ty_cu_build_t *b) {
  const ty_abi_value_t *y = ty_cu_vout(b, 0);
  ty_cu_copy(b, ty_cu_in(b, 0), ty_cu_out(b, 0), (uint64_t)ty_cu_numel(y) * ty_cu_esize(y));
}

void ty_cu_build_transpose(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_cu_vin(b, 0), *y = ty_cu_vout(b, 0);
  const ty_abi_attr_t *perm = ty_abi_node_attr(b->node, "perm");
  int64_t xs[8], ys[8], ps[8];
  if (!perm || perm->kind != TY_ATTR_INTS || perm->count != y->rank) {
    ty_cu_fail(b, TY_CODE_INVALID_ARGUMENT, "attribute 'perm' must list %u axes", y->rank);
    return;
  }
  ty_op_strides(x->rank, x->dims, xs);
  ty_op_strides(y->rank, y->dims, ys);
  for (uint32_t d = 0; d < y->rank; ++d) ps[d] = xs[perm->ints[d]];
  ty_cu_strided_copy(b, ty_cu_in(b, 0), ty_cu_out(b, 0), ty_cu_esize(y), (int)y->rank, y->dims,
                     ps, ys);
}

/* The element offset of `starts` (attribute) in a row-major shape. */
static int64_t ty_cu_start_offset(ty_cu_build_t *b, const ty_abi_value_t *v) {
  const ty_abi_attr_t *starts = ty_abi_node_attr(b->node, "starts");
  if (!starts || starts->kind != TY_ATTR_INTS || starts->count != v->rank) {
    ty_cu_fail(b, TY_CODE_INVALID_ARGUMENT, "attribute 'starts' must list %u axes", v->rank);
    return 0;
  }
  int64_t s[8], at = 0;
  ty_op_strides(v->rank, v->dims, s);
  for (uint32_t d = 0; d < v->rank; ++d) at += starts->ints[d] * s[d];
  return at;
}

void ty_cu_build_slice(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_cu_vin(b, 0), *y = ty_cu_vout(b, 0);
  int64_t xs[8], ys[8];
  const int64_t start = ty_cu_start_offset(b, x);
  ty_op_strides(x->rank, x->dims, xs);
  ty_op_strides(y->rank, y->dims, ys);
  ty_cu_strided_copy(b, ty_cu_ref_at(ty_cu_in(b, 0), (uint64_t)start * ty_cu_esize(y)),
                     ty_cu_out(b, 0), ty_cu_esize(y), (int)y->rank, y->dims, xs, ys);
}

void ty_cu_build_slice_backward(ty_cu_build_t *b) {
  const ty_abi_value_t *dy = ty_cu_vin(b, 0), *dx = ty_cu_vout(b, 0);
  const size_t es = ty_cu_esize(dx);
  int64_t ds[8], xs[8];
  const int64_t start = ty_cu_start_offset(b, dx);
  ty_op_strides(dy->rank, dy->dims, ds);
  ty_op_strides(dx->rank, dx->dims, xs);
  ty_cu_fill(b, ty_cu_out(b, 0), (uint64_t)ty_cu_numel(dx) * es);
  ty_cu_strided_copy(b, ty_cu_in(b, 0), ty_cu_ref_at(ty_cu_out(b, 0), (uint64_t)start * es), es,
                     (int)dy->rank, dy->dims, ds, xs);
}

void ty_cu_build_concat(ty_cu_build_t *b) {
  const ty_abi_value_t *y = ty_cu_vout(b, 0);
  int64_t axis = ty_abi_node_attr_int(b->node, "axis", 0);
  if (axis < 0) axis += y->rank;
  const size_t es = ty_cu_esize(y);
  int64_t ys[8], at = 0;
  ty_op_strides(y->rank, y->dims, ys);
  for (uint32_t i = 0; i < b->node->input_count; ++i) {
    const ty_abi_value_t *x = ty_cu_vin(b, i);
    int64_t xs[8];
    ty_op_strides(x->rank, x->dims, xs);
    ty_cu_strided_copy(b, ty_cu_in(b, i),
                       ty_cu_ref_at(ty_cu_out(b, 0), (uint64_t)(at * ys[axis]) * es), es,
                       (int)x->rank, x->dims, xs, ys);
    at += x->dims[axis];
  }
}

void ty_cu_build_kv_cache_write(ty_cu_build_t *b) {
  const ty_abi_value_t *cache = ty_cu_vin(b, 0), *fresh = ty_cu_vin(b, 1);
  const ty_abi_value_t *pos = ty_cu_vin(b, 2), *out = ty_cu_vout(b, 0);
  const size_t es = ty_cu_esize(out);
  /* cache' = cache first, unless the plan put cache' in cache's storage
   * (the copy is skipped when the addresses coincide). */
  ty_cu_copy(b, ty_cu_in(b, 0), ty_cu_out(b, 0), (uint64_t)ty_cu_numel(cache) * es);
  const int64_t n = ty_cu_numel(fresh);
  if (n == 0) return;
  /* ty_kv_write(fresh, cache, pos, int dtpos, int esize, i64 Smax, i64 T,
   *             i64 row, i64 n, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, "ty_kv_write");
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 1));
  ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 2));
  ty_cu_arg_i32(b, c, ty_cu_dt(pos));
  ty_cu_arg_i32(b, c, (int32_t)es);
  ty_cu_arg_i64(b, c, cache->dims[1]);
  ty_cu_arg_i64(b, c, fresh->dims[1]);
  ty_cu_arg_i64(b, c, fresh->dims[2] * fresh->dims[3]);
  ty_cu_arg_i64(b, c, n);
  ty_cu_arg_err(b, c);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

/* ---- reductions ---- */

#define TY_CU_RED_CHUNK 16384 /* elements of a row one block sums (kernels/reduce.cu) */

/* Row sums: x as [O, R] reduced over R (kernels/reduce.cu, ty_reduce_rows_*),
 * into y (dtype dty) or, for dty f64, any f64 array. */
static void ty_cu_reduce_rows_into(ty_cu_build_t *b, const char *kernel, ty_cu_ref_t x,
                                   ty_cu_ref_t y, int dty, int kind, int64_t O, int64_t R,
                                   double scale) {
  const int64_t chunks = (R + TY_CU_RED_CHUNK - 1) / TY_CU_RED_CHUNK;
  const int64_t chunk = chunks > 1 ? TY_CU_RED_CHUNK : R;
  ty_cu_ref_t dst = y;
  if (chunks > 1) dst = ty_cu_scratch(b, (uint64_t)(O * chunks) * sizeof(double));
  /* ty_reduce_rows_<T>(x, y, int dty, int kind, i64 R, i64 chunks, i64 chunk,
   *                    i64 total, f64 scale) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, kernel);
  ty_cu_arg_ptr(b, c, x);
  ty_cu_arg_ptr(b, c, dst);
  ty_cu_arg_i32(b, c, chunks > 1 ? TY_DTYPE_F64 : dty);
  ty_cu_arg_i32(b, c, kind);
  ty_cu_arg_i64(b, c, R);
  ty_cu_arg_i64(b, c, chunks);
  ty_cu_arg_i64(b, c, chunk);
  ty_cu_arg_i64(b, c, O * chunks);
  ty_cu_arg_f64(b, c, chunks > 1 ? 1.0 : scale);
  ty_cu_grid_blocks(b, c, (uint64_t)(O * chunks), ty_cu_row_threads(chunk, TY_CU_BLOCK));
  if (chunks == 1) return;
  /* ty_reduce_partials(const f64 *part, y, int dty, i64 per_row, i64 rows,
   *                    f64 scale): each row's chunk sums, in order */
  c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_reduce_partials");
  ty_cu_arg_ptr(b, c, dst);
  ty_cu_arg_ptr(b, c, y);
  ty_cu_arg_i32(b, c, dty);
  ty_cu_arg_i64(b, c, chunks);
  ty_cu_arg_i64(b, c, O);
  ty_cu_arg_f64(b, c, scale);
  ty_cu_grid_blocks(b, c, (uint64_t)O, ty_cu_row_threads(chunks, TY_CU_BLOCK));
}

/* Column sums: x as [O, R, I] reduced over R (ty_reduce_cols_*). */
/* y[o, i] = scale * sum_r f(x[o, r, i]) for x [O, R, I] of dtype xdt (the
 * ty_reduce_cols kernels, with ty_reduce_cols_finish over chunk partials). */
static void ty_cu_reduce_cols_at(ty_cu_build_t *b, ty_cu_ref_t x, ty_dtype_t xdt, ty_cu_ref_t y,
                                 int dty, int kind, int64_t O, int64_t R, int64_t I,
                                 double scale) {
  /* 4 columns per thread when the rows allow (ty_reduce_cols4_*). */
  const bool vec4 = I % 4 == 0 && I >= 128;
  const char *kernel = ty_cu_typed(vec4 ? TY_CU_TYPED("ty_reduce_cols4")
                                        : TY_CU_TYPED("ty_reduce_cols"),
                                   (int)xdt);
  if (!kernel) {
    ty_cu_fail(b, TY_CODE_UNIMPLEMENTED, "no column-sum kernel for this dtype");
    return;
  }
  const int64_t cb = vec4 ? (I + 127) / 128 : (I + 31) / 32;
  int64_t rchunk;
  const uint32_t split = ty_cu_col_split(cb * O, R, &rchunk);
  ty_cu_ref_t part = ty_cu_none();
  if (split > 1) part = ty_cu_scratch(b, (uint64_t)split * (uint64_t)(O * I) * sizeof(double));
  /* ty_reduce_cols_<T>(x, y, int dty, f64 *part, int kind, i64 O, i64 R, i64 I,
   *                    i64 rchunk, f64 scale) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, kernel);
  ty_cu_arg_ptr(b, c, x);
  ty_cu_arg_ptr(b, c, y);
  ty_cu_arg_i32(b, c, dty);
  ty_cu_arg_ptr(b, c, part);
  ty_cu_arg_i32(b, c, kind);
  ty_cu_arg_i64(b, c, O);
  ty_cu_arg_i64(b, c, R);
  ty_cu_arg_i64(b, c, I);
  ty_cu_arg_i64(b, c, rchunk);
  ty_cu_arg_f64(b, c, scale);
  const uint64_t gx = (uint64_t)(cb * O) > 0x7fffffffu ? 0x7fffffffu : (uint64_t)(cb * O);
  ty_cu_grid(b, c, (uint32_t)gx, split, 1, 32, 8, 1, 0);
  if (split == 1) return;
  /* ty_reduce_cols_finish(const f64 *part, y, int dty, i64 chunks, i64 n,
   *                       f64 scale): the chunk partials [split, O*I], in order */
  c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_reduce_cols_finish");
  ty_cu_arg_ptr(b, c, part);
  ty_cu_arg_ptr(b, c, y);
  ty_cu_arg_i32(b, c, dty);
  ty_cu_arg_i64(b, c, split);
  ty_cu_arg_i64(b, c, O * I);
  ty_cu_arg_f64(b, c, scale);
  const uint64_t fx = ((uint64_t)(O * I) + 31) / 32; /* 32 columns x 32 chunk lanes */
  ty_cu_grid(b, c, (uint32_t)(fx > 0x7fffffffu ? 0x7fffffffu : fx), 1, 1, 32, 32, 1, 0);
}

static void ty_cu_reduce_cols(ty_cu_build_t *b, int dty, int kind, int64_t O, int64_t R,
                              int64_t I, double scale) {
  ty_cu_reduce_cols_at(b, ty_cu_in(b, 0), ty_cu_vin(b, 0)->dtype, ty_cu_out(b, 0), dty, kind, O,
                       R, I, scale);
}

void ty_cu_col_sum(ty_cu_build_t *b, ty_cu_ref_t x, ty_dtype_t xdt, ty_cu_ref_t y,
                   ty_dtype_t ydt, int64_t rows, int64_t cols) {
  ty_cu_reduce_cols_at(b, x, xdt, y, (int)ydt, 0, 1, rows, cols, 1.0);
}

void ty_cu_build_reduce(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_cu_vin(b, 0), *y = ty_cu_vout(b, 0);
  bool red[8] = {false};
  const ty_abi_attr_t *a = ty_abi_node_attr(b->node, "axes");
  const uint32_t count = a && a->kind == TY_ATTR_INTS ? a->count : 0;
  if (count == 0) {
    for (uint32_t d = 0; d < x->rank; ++d) red[d] = true;
  } else {
    for (uint32_t k = 0; k < count; ++k) {
      int64_t ax = a->ints[k] < 0 ? a->ints[k] + (int64_t)x->rank : a->ints[k];
      if (ax >= 0 && ax < (int64_t)x->rank) red[ax] = true;
    }
  }
  const int64_t outs = ty_cu_numel(y);
  if (outs == 0) return;
  int64_t terms = 1;
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (red[d]) terms *= x->dims[d];
  }
  if (terms == 0) {
    ty_cu_fill(b, ty_cu_out(b, 0), (uint64_t)outs * ty_cu_esize(y));
    return;
  }
  const int kind = strcmp(b->node->op, "reduce_sumsq") == 0 ? 1 : 0;
  const double scale = strcmp(b->node->op, "reduce_mean") == 0 ? 1.0 / (double)terms : 1.0;
  /* Runs of kept and reduced axes in x's order (size-1 axes dropped; axes
   * of one kind next to each other are contiguous, so they merge). */
  int64_t seg[8];
  bool seg_red[8];
  int segs = 0;
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (x->dims[d] == 1) continue;
    if (segs > 0 && seg_red[segs - 1] == red[d]) {
      seg[segs - 1] *= x->dims[d];
    } else {
      seg[segs] = x->dims[d];
      seg_red[segs++] = red[d];
    }
  }
  const char *const *names_rows = TY_CU_TYPED("ty_reduce_rows");
  const char *rows = ty_cu_typed(names_rows, (int)x->dtype);
  const int dty = ty_cu_dt(y);
  if (rows) {
    /* [R], [O, R]: rows; [], [I], [R, I], [O, R, I]: columns. */
    if (segs == 1 && seg_red[0]) {
      ty_cu_reduce_rows_into(b, rows, ty_cu_in(b, 0), ty_cu_out(b, 0), dty, kind, 1, seg[0],
                             scale);
      return;
    }
    if (segs == 2 && !seg_red[0] && seg_red[1]) {
      ty_cu_reduce_rows_into(b, rows, ty_cu_in(b, 0), ty_cu_out(b, 0), dty, kind, seg[0],
                             seg[1], scale);
      return;
    }
    if (segs == 0 || (segs == 1 && !seg_red[0])) {
      ty_cu_reduce_cols(b, dty, kind, 1, 1, segs ? seg[0] : 1, scale);
      return;
    }
    if (segs == 2 && seg_red[0]) {
      ty_cu_reduce_cols(b, dty, kind, 1, seg[0], seg[1], scale);
      return;
    }
    if (segs == 3 && seg_red[1]) {
      ty_cu_reduce_cols(b, dty, kind, seg[0], seg[1], seg[2], scale);
      return;
    }
  }
  /* The general case (as the opencl backend): kept and reduced axes with
   * their strides in x. */
  int64_t xs[8];
  ty_op_strides(x->rank, x->dims, xs);
  int64_t kd[8], ks[8], rd[8], rs[8];
  int kr = 0, rr = 0;
  for (int d = 0; d < 8; ++d) {
    kd[d] = rd[d] = 1;
    ks[d] = rs[d] = 0;
  }
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (x->dims[d] == 1) continue;
    int64_t *dims = red[d] ? rd : kd, *str = red[d] ? rs : ks;
    int *r = red[d] ? &rr : &kr;
    if (*r > 0 && str[*r - 1] == xs[d] * x->dims[d]) {
      dims[*r - 1] *= x->dims[d];
      str[*r - 1] = xs[d];
    } else {
      dims[*r] = x->dims[d];
      str[(*r)++] = xs[d];
    }
  }
  /* ty_reduce(x, int dtx, y, int dty, int kind, i64 outs, i64 terms, f64 scale,
   *           int krank, dims8 kdims, dims8 kstr, int rrank, dims8 rdims,
   *           dims8 rstr) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_reduce");
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(x));
  ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
  ty_cu_arg_i32(b, c, dty);
  ty_cu_arg_i32(b, c, kind);
  ty_cu_arg_i64(b, c, outs);
  ty_cu_arg_i64(b, c, terms);
  ty_cu_arg_f64(b, c, scale);
  ty_cu_arg_i32(b, c, kr);
  ty_cu_arg_dims8(b, c, kd);
  ty_cu_arg_dims8(b, c, ks);
  ty_cu_arg_i32(b, c, rr);
  ty_cu_arg_dims8(b, c, rd);
  ty_cu_arg_dims8(b, c, rs);
  ty_cu_grid_blocks(b, c, (uint64_t)outs, ty_cu_row_threads(terms, TY_CU_BLOCK));
}

/* ---- embeddings ---- */

void ty_cu_build_embedding(ty_cu_build_t *b) {
  const ty_abi_value_t *table = ty_cu_vin(b, 0), *ids = ty_cu_vin(b, 1);
  const ty_abi_value_t *out = ty_cu_vout(b, 0);
  const int64_t N = ty_cu_numel(ids), V = table->dims[0], D = table->dims[1];
  if (N * D == 0) return;
  /* ty_embedding(table, int dtt, ids, int dti, out, int dto, i64 N, i64 V,
   *              i64 D, err, int node): one warp per row */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_embedding");
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(table));
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 1));
  ty_cu_arg_i32(b, c, ty_cu_dt(ids));
  ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
  ty_cu_arg_i32(b, c, ty_cu_dt(out));
  ty_cu_arg_i64(b, c, N);
  ty_cu_arg_i64(b, c, V);
  ty_cu_arg_i64(b, c, D);
  ty_cu_arg_err(b, c);
  ty_cu_grid_blocks(b, c, ((uint64_t)N + 7) / 8, TY_CU_BLOCK);
}

bool ty_cu_emb_scatter_begin(ty_cu_build_t *b, ty_cu_emb_scatter_t *sc) {
  const ty_abi_value_t *dout = ty_cu_vin(b, 0), *ids = ty_cu_vin(b, 1);
  const ty_abi_value_t *dt = ty_cu_vout(b, 0);
  sc->N = ty_cu_numel(ids);
  sc->V = dt->dims[0];
  sc->D = dt->dims[1];
  if (sc->V * sc->D == 0) return false;
  if (sc->N == 0) {
    ty_cu_fill(b, ty_cu_out(b, 0), (uint64_t)(sc->V * sc->D) * ty_cu_esize(dt));
    return false;
  }
  sc->sum = dout->dtype == dt->dtype ? ty_cu_typed(TY_CU_TYPED("ty_emb_sum"), (int)dt->dtype)
                                     : NULL;
  if (!sc->sum) {
    ty_cu_fail(b, TY_CODE_UNIMPLEMENTED,
               "the scatter-add takes dout and dtable of one float dtype (f32, bf16, f16)");
    return false;
  }
  if (sc->N > INT32_MAX || sc->V > INT32_MAX) {
    ty_cu_fail(b, TY_CODE_UNIMPLEMENTED, "more than 2^31 ids or vocabulary rows");
    return false;
  }
  sc->counts = ty_cu_scratch(b, (uint64_t)sc->V * 4);
  sc->offsets = ty_cu_scratch(b, (uint64_t)sc->V * 4);
  sc->cursor = ty_cu_scratch(b, (uint64_t)sc->V * 4);
  sc->list = ty_cu_scratch(b, (uint64_t)sc->N * 4);
  ty_cu_fill(b, sc->counts, (uint64_t)sc->V * 4);
  return b->status == NULL;
}

void ty_cu_emb_scatter_end(ty_cu_build_t *b, const ty_cu_emb_scatter_t *sc, ty_cu_ref_t ids,
                           int dti) {
  /* ty_emb_scan(const int *counts, int *offsets, int *cursor, i64 V): one block */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_emb_scan");
  ty_cu_arg_ptr(b, c, sc->counts);
  ty_cu_arg_ptr(b, c, sc->offsets);
  ty_cu_arg_ptr(b, c, sc->cursor);
  ty_cu_arg_i64(b, c, sc->V);
  ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
  /* ty_emb_place(ids, int dti, i64 N, i64 V, int *cursor, int *list): skips
   * ids outside [0, V) (a shard's -1) */
  c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_emb_place");
  ty_cu_arg_ptr(b, c, ids);
  ty_cu_arg_i32(b, c, dti);
  ty_cu_arg_i64(b, c, sc->N);
  ty_cu_arg_i64(b, c, sc->V);
  ty_cu_arg_ptr(b, c, sc->cursor);
  ty_cu_arg_ptr(b, c, sc->list);
  ty_cu_grid1(b, c, (uint64_t)sc->N, TY_CU_BLOCK);
  /* ty_emb_sum_<T>(dout, ids, int dti, const int *counts, const int *offsets,
   *                const int *list, dtable, i64 N, i64 V, i64 D): one block
   * per vocabulary row; 256 threads (they must divide TY_EMB_CAP = 2048) */
  c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, sc->sum);
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 0));
  ty_cu_arg_ptr(b, c, ids);
  ty_cu_arg_i32(b, c, dti);
  ty_cu_arg_ptr(b, c, sc->counts);
  ty_cu_arg_ptr(b, c, sc->offsets);
  ty_cu_arg_ptr(b, c, sc->list);
  ty_cu_arg_ptr(b, c, ty_cu_out(b, 0));
  ty_cu_arg_i64(b, c, sc->N);
  ty_cu_arg_i64(b, c, sc->V);
  ty_cu_arg_i64(b, c, sc->D);
  ty_cu_grid_blocks(b, c, (uint64_t)sc->V, 256);
}

void ty_cu_build_embedding_backward(ty_cu_build_t *b) {
  const ty_abi_value_t *ids = ty_cu_vin(b, 1);
  ty_cu_emb_scatter_t sc;
  if (!ty_cu_emb_scatter_begin(b, &sc)) return;
  /* ty_emb_count(ids, int dti, i64 N, i64 V, int *counts, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_emb_count");
  ty_cu_arg_ptr(b, c, ty_cu_in(b, 1));
  ty_cu_arg_i32(b, c, ty_cu_dt(ids));
  ty_cu_arg_i64(b, c, sc.N);
  ty_cu_arg_i64(b, c, sc.V);
  ty_cu_arg_ptr(b, c, sc.counts);
  ty_cu_arg_err(b, c);
  ty_cu_grid1(b, c, (uint64_t)sc.N, TY_CU_BLOCK);
  ty_cu_emb_scatter_end(b, &sc, ty_cu_in(b, 1), ty_cu_dt(ids));
}

/* ---- optimizers and clipping ---- */

static void ty_cu_arg_in(ty_cu_build_t *b, ty_cu_cmd_t *c, uint32_t i) {
  ty_cu_arg_ptr(b, c, ty_cu_in(b, i));
  ty_cu_arg_i32(b, c, ty_cu_dt(ty_cu_vin(b, i)));
}

static void ty_cu_arg_out(ty_cu_build_t *b, ty_cu_cmd_t *c, uint32_t o) {
  ty_cu_arg_ptr(b, c, ty_cu_out(b, o));
  ty_cu_arg_i32(b, c, ty_cu_dt(ty_cu_vout(b, o)));
}

/* Elements per chunk of the multi-tensor kernels (a multiple of 4). */
#define TY_CU_MT_CHUNK 16384

/* Whether adamw node `n` has typed operands of one float dtype T (param,
 * grad, param') and f32 moments: the multi-tensor kernel's case. */
static bool ty_cu_adamw_typed(const ty_abi_graph_t *g, const ty_abi_node_t *node, int *dt) {
  const ty_abi_value_t *p = &g->values[node->inputs[0]];
  const int t = (int)p->dtype;
  if (!ty_cu_typed(TY_CU_TYPED("ty_adamw_multi"), t)) return false;
  if ((int)g->values[node->inputs[1]].dtype != t || (int)g->values[node->outputs[0]].dtype != t) {
    return false;
  }
  for (uint32_t i = 2; i < 4; ++i) {
    if (g->values[node->inputs[i]].dtype != TY_DTYPE_F32) return false;
  }
  for (uint32_t o = 1; o < 3; ++o) {
    if (g->values[node->outputs[o]].dtype != TY_DTYPE_F32) return false;
  }
  *dt = t;
  return true;
}

/* The run of adamw_update nodes from the current one that one multi-tensor
 * launch can do: consecutive, typed alike, sharing lr, betas, eps and step
 * (each keeps its weight decay). Returns how many (>= 1). */
static uint32_t ty_cu_adamw_run(const ty_cu_build_t *b, int dt) {
  const ty_abi_graph_t *g = b->g;
  const ty_abi_node_t *first = b->node;
  uint32_t count = 1;
  for (uint32_t n = b->n + 1; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    int t;
    if (strcmp(node->op, "adamw_update") != 0 || !ty_cu_adamw_typed(g, node, &t) || t != dt) break;
    bool same = true;
    for (uint32_t i = 4; i < 10 && same; ++i) {
      if (i != 8) same = node->inputs[i] == first->inputs[i];
    }
    if (!same) break;
    count++;
  }
  return count;
}

/* One launch for `count` adamw_update nodes from the current one (kernels/
 * optim.cu, ty_adamw_multi): tables of their operands, chunk starts. */
static void ty_cu_build_adamw_multi(ty_cu_build_t *b, int dt, uint32_t count) {
  const ty_abi_graph_t *g = b->g;
  ty_cu_ref_t *refs = calloc((size_t)count, sizeof(ty_cu_ref_t));
  int64_t *starts = calloc((size_t)count + 1, sizeof(int64_t));
  int64_t *sizes = calloc((size_t)count, sizeof(int64_t));
  if (!refs || !starts || !sizes) {
    ty_cu_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    free(refs);
    free(starts);
    free(sizes);
    return;
  }
  for (uint32_t k = 0; k < count; ++k) {
    sizes[k] = ty_abi_value_elements(&g->values[g->nodes[b->n + k].inputs[0]]);
    starts[k + 1] = starts[k] + (sizes[k] + TY_CU_MT_CHUNK - 1) / TY_CU_MT_CHUNK;
  }
  /* Tables: p, g, m, v (inputs 0-3), p', m', v' (outputs 0-2), wd (input 8). */
  ty_cu_ref_t tables[8];
  for (int t = 0; t < 8; ++t) {
    for (uint32_t k = 0; k < count; ++k) {
      const ty_abi_node_t *node = &g->nodes[b->n + k];
      const uint32_t v = t < 4 ? node->inputs[t] : t < 7 ? node->outputs[t - 4] : node->inputs[8];
      refs[k] = (ty_cu_ref_t){TY_CU_REF_VALUE, v, 0};
    }
    tables[t] = ty_cu_ptr_table(b, refs, count);
  }
  const ty_cu_ref_t starts_ref = ty_cu_aux(b, starts, ((uint64_t)count + 1) * sizeof(int64_t));
  const ty_cu_ref_t sizes_ref = ty_cu_aux(b, sizes, (uint64_t)count * sizeof(int64_t));
  const int64_t chunks = starts[count];
  free(refs);
  free(starts);
  free(sizes);
  ty_cu_ref_t hp = ty_cu_scratch(b, 8 * sizeof(double));
  /* ty_adamw_multi_prep(lr, int dtlr, b1, int dtb1, b2, int dtb2, eps, int dteps,
   *                     step, int dtstep, f64 *hp, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adamw_multi_prep");
  for (uint32_t i = 4; i < 10; ++i) {
    if (i != 8) ty_cu_arg_in(b, c, i);
  }
  ty_cu_arg_ptr(b, c, hp);
  ty_cu_arg_err(b, c);
  ty_cu_grid(b, c, 1, 1, 1, 1, 1, 1, 0);
  if (chunks == 0) return;
  /* ty_adamw_multi_<T>(p[], g[], m[], v[], po[], mo[], vo[], wd[], int dtwd,
   *                    i64 *starts, i64 *sizes, int count, i64 chunk, f64 *hp) */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, ty_cu_typed(TY_CU_TYPED("ty_adamw_multi"), dt));
  for (int t = 0; t < 8; ++t) ty_cu_arg_ptr(b, c, tables[t]);
  ty_cu_arg_i32(b, c, ty_cu_dt(ty_cu_vin(b, 8)));
  ty_cu_arg_ptr(b, c, starts_ref);
  ty_cu_arg_ptr(b, c, sizes_ref);
  ty_cu_arg_i32(b, c, (int32_t)count);
  ty_cu_arg_i64(b, c, TY_CU_MT_CHUNK);
  ty_cu_arg_ptr(b, c, hp);
  ty_cu_grid_blocks(b, c, (uint64_t)chunks, TY_CU_BLOCK);
  for (uint32_t k = 1; k < count; ++k) ty_cu_mark_fused(b, b->n + k);
}

void ty_cu_build_adamw(ty_cu_build_t *b) {
  /* param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step -> param', m', v' */
  int mt_dt;
  if (ty_cu_adamw_typed(b->g, b->node, &mt_dt)) {
    /* Weight decays must all be of one dtype (the kernel takes one code). */
    const uint32_t run = ty_cu_adamw_run(b, mt_dt);
    bool one_wd_dtype = true;
    for (uint32_t k = 1; k < run; ++k) {
      one_wd_dtype &= b->g->values[b->g->nodes[b->n + k].inputs[8]].dtype ==
                      b->g->values[b->node->inputs[8]].dtype;
    }
    if (run > 1 && one_wd_dtype && ty_cu_numel(ty_cu_vin(b, 0)) > 0) {
      ty_cu_build_adamw_multi(b, mt_dt, run);
      return;
    }
  }
  const int64_t n = ty_cu_numel(ty_cu_vin(b, 0));
  ty_cu_ref_t hp = ty_cu_scratch(b, 8 * sizeof(double));
  /* ty_adamw_prep(lr, int dtlr, b1, int dtb1, b2, int dtb2, eps, int dteps,
   *               wd, int dtwd, step, int dtstep, f64 *hp, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adamw_prep");
  for (uint32_t i = 4; i < 10; ++i) ty_cu_arg_in(b, c, i);
  ty_cu_arg_ptr(b, c, hp);
  ty_cu_arg_err(b, c);
  ty_cu_grid(b, c, 1, 1, 1, 1, 1, 1, 0);
  if (n == 0) return;
  const ty_abi_value_t *pg[3] = {ty_cu_vin(b, 0), ty_cu_vin(b, 1), ty_cu_vout(b, 0)};
  const ty_abi_value_t *mv[4] = {ty_cu_vin(b, 2), ty_cu_vin(b, 3), ty_cu_vout(b, 1),
                                 ty_cu_vout(b, 2)};
  const char *typed = ty_cu_all_dtype(pg, 3, (int)pg[0]->dtype) &&
                              ty_cu_all_dtype(mv, 4, TY_DTYPE_F32)
                          ? ty_cu_typed(TY_CU_TYPED("ty_adamw_t"), (int)pg[0]->dtype)
                          : NULL;
  if (typed) {
    /* ty_adamw_t_<T>(p, g, f32 *m, f32 *v, po, f32 *mo, f32 *vo, i64 n,
     *                const f64 *hp) */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, typed);
    for (uint32_t i = 0; i < 4; ++i) ty_cu_arg_ptr(b, c, ty_cu_in(b, i));
    for (uint32_t o = 0; o < 3; ++o) ty_cu_arg_ptr(b, c, ty_cu_out(b, o));
    ty_cu_arg_i64(b, c, n);
    ty_cu_arg_ptr(b, c, hp);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
    return;
  }
  /* ty_adamw(p, int dtp, g, int dtg, m, int dtm, v, int dtv, po, int dtpo,
   *          mo, int dtmo, vo, int dtvo, i64 n, const f64 *hp) */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adamw");
  for (uint32_t i = 0; i < 4; ++i) ty_cu_arg_in(b, c, i);
  for (uint32_t o = 0; o < 3; ++o) ty_cu_arg_out(b, c, o);
  ty_cu_arg_i64(b, c, n);
  ty_cu_arg_ptr(b, c, hp);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_sgd(ty_cu_build_t *b) {
  /* param, grad, buf, lr, momentum, weight_decay -> param', buf' */
  const int64_t n = ty_cu_numel(ty_cu_vin(b, 0));
  if (n == 0) return;
  /* ty_sgd(p, int dtp, g, int dtg, buf, int dtbuf, po, int dtpo, bo, int dtbo,
   *        i64 n, lr, int dtlr, mu, int dtmu, wd, int dtwd, int nesterov, err,
   *        int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_sgd");
  for (uint32_t i = 0; i < 3; ++i) ty_cu_arg_in(b, c, i);
  for (uint32_t o = 0; o < 2; ++o) ty_cu_arg_out(b, c, o);
  ty_cu_arg_i64(b, c, n);
  for (uint32_t i = 3; i < 6; ++i) ty_cu_arg_in(b, c, i);
  ty_cu_arg_i32(b, c, ty_abi_node_attr_int(b->node, "nesterov", 0) != 0);
  ty_cu_arg_err(b, c);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

#define TY_CU_CLIP_CHUNK 8192 /* elements per partial sum of squares */

int64_t ty_cu_emit_chunk_sumsq(ty_cu_build_t *b, ty_cu_ref_t x, int dt, int64_t n,
                               int64_t chunk, ty_cu_ref_t part) {
  const int64_t blocks = (n + chunk - 1) / chunk;
  /* ty_reduce_rows_<T>(x, y, int dty, int kind, i64 R, i64 chunks, i64 chunk,
   *                    i64 total, f64 scale): one row of n, one block per chunk */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_reduce_rows"), dt));
  ty_cu_arg_ptr(b, c, x);
  ty_cu_arg_ptr(b, c, part);
  ty_cu_arg_i32(b, c, TY_DTYPE_F64);
  ty_cu_arg_i32(b, c, 1 /* sumsq */);
  ty_cu_arg_i64(b, c, n);
  ty_cu_arg_i64(b, c, blocks);
  ty_cu_arg_i64(b, c, chunk);
  ty_cu_arg_i64(b, c, blocks);
  ty_cu_arg_f64(b, c, 1.0);
  ty_cu_grid_blocks(b, c, (uint64_t)blocks, TY_CU_BLOCK);
  return blocks;
}

/* clip_by_global_norm over gradients of one typed dtype: three launches
 * (kernels/reduce.cu: ty_sumsq_multi, ty_clip_finish, ty_scale_multi). */
static bool ty_cu_build_clip_multi(ty_cu_build_t *b) {
  const uint32_t count = b->node->input_count - 1;
  const int dt = (int)ty_cu_vin(b, 1)->dtype;
  if (count < 2 || !ty_cu_typed(TY_CU_TYPED("ty_sumsq_multi"), dt)) return false;
  for (uint32_t i = 0; i < count; ++i) {
    if ((int)ty_cu_vin(b, i + 1)->dtype != dt || (int)ty_cu_vout(b, i + 1)->dtype != dt) {
      return false;
    }
  }
  ty_cu_ref_t *in = calloc(count, sizeof(ty_cu_ref_t)), *out = calloc(count, sizeof(ty_cu_ref_t));
  int64_t *starts = calloc((size_t)count + 1, sizeof(int64_t));
  int64_t *sizes = calloc(count, sizeof(int64_t));
  bool ok = in && out && starts && sizes;
  for (uint32_t i = 0; ok && i < count; ++i) {
    in[i] = ty_cu_in(b, i + 1);
    out[i] = ty_cu_out(b, i + 1);
    sizes[i] = ty_cu_numel(ty_cu_vin(b, i + 1));
    starts[i + 1] = starts[i] + (sizes[i] + TY_CU_MT_CHUNK - 1) / TY_CU_MT_CHUNK;
  }
  if (!ok) {
    ty_cu_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    const int64_t chunks = starts[count];
    const ty_cu_ref_t xt = ty_cu_ptr_table(b, in, count), yt = ty_cu_ptr_table(b, out, count);
    const ty_cu_ref_t st = ty_cu_aux(b, starts, ((uint64_t)count + 1) * sizeof(int64_t));
    const ty_cu_ref_t sz = ty_cu_aux(b, sizes, (uint64_t)count * sizeof(int64_t));
    const ty_cu_ref_t part = ty_cu_scratch(b, (uint64_t)(chunks ? chunks : 1) * sizeof(double));
    const ty_cu_ref_t coef = ty_cu_scratch(b, sizeof(double));
    /* ty_sumsq_multi_<T>(x[], i64 *starts, i64 *sizes, int count, i64 chunk, f64 *part) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_sumsq_multi"), dt));
    ty_cu_arg_ptr(b, c, xt);
    ty_cu_arg_ptr(b, c, st);
    ty_cu_arg_ptr(b, c, sz);
    ty_cu_arg_i32(b, c, (int32_t)count);
    ty_cu_arg_i64(b, c, TY_CU_MT_CHUNK);
    ty_cu_arg_ptr(b, c, part);
    ty_cu_grid_blocks(b, c, (uint64_t)(chunks ? chunks : 1), TY_CU_BLOCK);
    /* ty_clip_finish(const f64 *part, i64 count, max_norm, int dtm, norm, int dtn,
     *                f64 *coef): one block */
    c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_clip_finish");
    ty_cu_arg_ptr(b, c, part);
    ty_cu_arg_i64(b, c, chunks);
    ty_cu_arg_in(b, c, 0);
    ty_cu_arg_out(b, c, 0);
    ty_cu_arg_ptr(b, c, coef);
    ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
    /* ty_scale_multi_<T>(x[], y[], i64 *starts, i64 *sizes, int count, i64 chunk,
     *                    const f64 *coef) */
    c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_scale_multi"), dt));
    ty_cu_arg_ptr(b, c, xt);
    ty_cu_arg_ptr(b, c, yt);
    ty_cu_arg_ptr(b, c, st);
    ty_cu_arg_ptr(b, c, sz);
    ty_cu_arg_i32(b, c, (int32_t)count);
    ty_cu_arg_i64(b, c, TY_CU_MT_CHUNK);
    ty_cu_arg_ptr(b, c, coef);
    ty_cu_grid_blocks(b, c, (uint64_t)(chunks ? chunks : 1), TY_CU_BLOCK);
  }
  free(in);
  free(out);
  free(starts);
  free(sizes);
  return true;
}

void ty_cu_build_clip(ty_cu_build_t *b) {
  /* max_norm, g_1..g_n -> norm, g_1'..g_n' */
  const uint32_t count = b->node->input_count - 1;
  if (ty_cu_build_clip_multi(b)) return;
  uint64_t slots = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *g = ty_cu_vin(b, i + 1), *o = ty_cu_vout(b, i + 1);
    if (g->dtype != o->dtype || !ty_cu_typed(TY_CU_TYPED("ty_scale_by"), (int)g->dtype)) {
      ty_cu_fail(b, TY_CODE_UNIMPLEMENTED,
                 "gradient %u: clipping takes f32, bf16 or f16 gradients of one dtype in and "
                 "out", i + 1);
      return;
    }
    slots += ((uint64_t)ty_cu_numel(g) + TY_CU_CLIP_CHUNK - 1) / TY_CU_CLIP_CHUNK;
  }
  ty_cu_ref_t partial = ty_cu_scratch(b, (slots ? slots : 1) * sizeof(double));
  ty_cu_ref_t coef = ty_cu_scratch(b, sizeof(double));
  uint64_t slot = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *g = ty_cu_vin(b, i + 1);
    const int64_t n = ty_cu_numel(g);
    if (n == 0) continue;
    slot += (uint64_t)ty_cu_emit_chunk_sumsq(b, ty_cu_in(b, i + 1), (int)g->dtype, n,
                                             TY_CU_CLIP_CHUNK,
                                             ty_cu_ref_at(partial, slot * sizeof(double)));
  }
  /* ty_clip_finish(const f64 *part, i64 count, max_norm, int dtm, norm, int dtn,
   *                f64 *coef): one block */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_clip_finish");
  ty_cu_arg_ptr(b, c, partial);
  ty_cu_arg_i64(b, c, (int64_t)slots);
  ty_cu_arg_in(b, c, 0);
  ty_cu_arg_out(b, c, 0);
  ty_cu_arg_ptr(b, c, coef);
  ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *g = ty_cu_vin(b, i + 1);
    const int64_t n = ty_cu_numel(g);
    if (n == 0) continue;
    /* ty_scale_by_<T>(x, y, i64 n, const f64 *coef) */
    c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_scale_by"), (int)g->dtype));
    ty_cu_arg_ptr(b, c, ty_cu_in(b, i + 1));
    ty_cu_arg_ptr(b, c, ty_cu_out(b, i + 1));
    ty_cu_arg_i64(b, c, n);
    ty_cu_arg_ptr(b, c, coef);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
  }
}

/* all_reduce(x) -> y and tp_reduce(x) -> y over the ranks of the node's
 * process group (ops/op_collective.c): NCCL on the device's communicator of
 * that group, a copy at world 1 (cuda_graph.c). The group string is the
 * graph's, which the executable owns. */
void ty_cu_build_all_reduce(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_cu_vin(b, 0);
  const bool tp = strcmp(b->node->op, "tp_reduce") == 0;
  const char *reduce = ty_abi_node_attr_string(b->node, "reduce", "sum");
  const char *group = ty_abi_node_attr_string(b->node, "group", tp ? "tp" : "world");
  const uint32_t op = strcmp(reduce, "avg") == 0   ? TY_ABI_REDUCE_AVG
                      : strcmp(reduce, "max") == 0 ? TY_ABI_REDUCE_MAX
                                                   : TY_ABI_REDUCE_SUM;
  ty_cu_all_reduce(b, ty_cu_in(b, 0), ty_cu_out(b, 0), (uint64_t)ty_cu_numel(x), x->dtype, op,
                   group);
}
