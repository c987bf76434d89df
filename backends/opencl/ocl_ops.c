/* The op table of the opencl executor and the launch builders of the
 * element-moving, elementwise, reduction, matmul, embedding and optimizer
 * ops. Each builder reads its node's shapes and attributes (as
 * ops/reference/ref_interp.c does), then appends the kernel launches, fills
 * and copies that compute it (ocl_exec.h); kernels are in the kernels/ folder. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainyard/op_shapes.h"
#include "ocl_exec.h"

/* The ops both GPU backends build (device_op_list.h), then opencl's own. */
#define TY_DEV_OP(op, builder, accept) {#op, ty_ocl_build_##builder, TY_DESC_ACCEPT_##accept},
#define TY_DEV_CORE_OP(op, function, accept) {#op, function, TY_DESC_ACCEPT_##accept},
const ty_dev_op_t ty_ocl_ops[] = {
#include "trainyard/device_op_list.h"
    {NULL, NULL, TY_DESC_ACCEPT_MOVE},
};

bool ty_ocl_op_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                     size_t capacity) {
  if (strcmp(node->op, "paged_attention") == 0) {
    const ty_abi_value_t *q = &g->values[node->inputs[0]];
    if (q->rank != 3 || q->dims[2] > TY_OCL_ATT_MAXD) {
      snprintf(reason, capacity, "paged_attention head_dim %lld is above the opencl kernel's %d",
               q->rank == 3 ? (long long)q->dims[2] : -1LL, TY_OCL_ATT_MAXD);
      return false;
    }
  }
  if (strcmp(node->op, "attention") == 0 || strcmp(node->op, "attention_backward") == 0) {
    if (ty_desc_node_attr_int(node, "causal", 1) != 1) {
      snprintf(reason, capacity,
               "attention with causal=0 (context parallel's blocks of earlier keys) is not "
               "implemented in the opencl kernels; the cpu backend runs it");
      return false;
    }
    const ty_abi_value_t *q = &g->values[node->inputs[strcmp(node->op, "attention") ? 1 : 0]];
    if (q->rank != 4 || q->dims[3] > TY_OCL_ATT_MAXD) {
      snprintf(reason, capacity, "attention head_dim %lld is above the opencl kernel's %d",
               q->rank == 4 ? (long long)q->dims[3] : -1LL, TY_OCL_ATT_MAXD);
      return false;
    }
  }
  return true;
}

static size_t ty_ocl_esize(const ty_abi_value_t *v) { return ty_desc_dtype_size(v->dtype); }

void ty_ocl_build_binary(ty_ocl_build_t *b) {
  const int op = ty_dev_binary_op(b);
  const ty_abi_value_t *ins[2] = {ty_dev_vin(b, 0), ty_dev_vin(b, 1)};
  const ty_abi_value_t *out = ty_dev_vout(b, 0);
  int64_t n = ty_dev_numel(out);
  if (n == 0) return;
  ty_op_bcast_t p;
  ty_op_bcast_plan(out, ins, 2, &p);
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ELEMENTWISE, "ty_binary");
  ty_dev_args_binary(b, c, op, n, &p);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

void ty_ocl_build_scale(ty_ocl_build_t *b) {
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  int64_t n = ty_dev_numel(y);
  if (n == 0) return;
  ty_dev_ref_t none = {TY_DEV_REF_NONE, 0, 0};
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_ELEMENTWISE, "ty_map");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_ref(b, c, none);
  ty_dev_arg_i32(b, c, 0);
  ty_dev_arg_ref(b, c, none);
  ty_dev_arg_i32(b, c, 0);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_ref(b, c, none);
  ty_dev_arg_i32(b, c, 0);
  ty_dev_arg_i32(b, c, 0); /* TY_MAP_SCALE */
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_f32(b, c, (float)ty_desc_node_attr_float(b->node, "alpha", 1.0));
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

/* y[i] = x[...] over `rank` dims with strides in elements. */
static void ty_ocl_strided_copy(ty_ocl_build_t *b, ty_dev_ref_t x, ty_dev_ref_t y, size_t esize,
                                int rank, const int64_t *dims, const int64_t *xs,
                                const int64_t *ys) {
  int64_t n = 1, d8[8] = {0}, x8[8] = {0}, y8[8] = {0};
  for (int d = 0; d < rank; ++d) {
    n *= dims[d];
    d8[d] = dims[d];
    x8[d] = xs[d];
    y8[d] = ys[d];
  }
  if (n == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_strided_copy");
  /* ty_strided_copy(x, y, int esize, i64 n, int rank, long8 dims, long8 xs,
   *                 long8 ys): no vec in the OpenCL kernel */
  ty_dev_args_strided_copy(b, c, x, y, esize, 0, n, rank, d8, x8, y8);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

/* ---- reductions ---- */

void ty_ocl_build_reduce(ty_ocl_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  bool red[8];
  ty_dev_reduce_axes(b, red);
  ty_dev_reduce_plan_t plan;
  ty_dev_reduce_plan(b, red, 0, &plan);
  int64_t terms = 1;
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (red[d] && x->dims[d] != 1) terms *= x->dims[d];
  }
  int64_t outs = ty_dev_numel(y);
  if (outs == 0) return;
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (x->dims[d] == 0) terms = 0;
  }
  if (terms == 0) {
    ty_ocl_fill(b, ty_dev_out(b, 0), (uint64_t)outs * ty_ocl_esize(y));
    return;
  }
  const bool sumsq = strcmp(b->node->op, "reduce_sumsq") == 0;
  const bool mean = strcmp(b->node->op, "reduce_mean") == 0;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_REDUCE, "ty_reduce");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i32(b, c, sumsq ? 1 : 0);
  ty_dev_arg_i64(b, c, terms);
  ty_dev_arg_f32(b, c, mean ? (float)(1.0 / (double)terms) : 1.0f);
  ty_dev_args_reduce_plan(b, c, &plan);
  ty_ocl_grid1(c, (uint64_t)outs * TY_OCL_WG, TY_OCL_WG);
}

/* ---- matmul ---- */

void ty_ocl_build_matmul(ty_ocl_build_t *b) {
  const ty_abi_value_t *a = ty_dev_vin(b, 0), *bv = ty_dev_vin(b, 1), *bias = ty_dev_vin(b, 2);
  const ty_abi_value_t *out = ty_dev_vout(b, 0);
  const ty_dev_matmul_t mm = ty_dev_matmul_of(b);
  if (mm.M > INT32_MAX || mm.N > INT32_MAX || mm.K > INT32_MAX) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "matrix sizes beyond 2^31 are not supported");
    return;
  }
  const int brank = (int)out->rank - 2;
  int64_t bdims[8] = {0}, bsa[8] = {0}, bsb[8] = {0}, batches = 1;
  for (int d = 0; d < brank; ++d) {
    bdims[d] = out->dims[d];
    batches *= out->dims[d];
  }
  /* Per output batch axis, each operand's stride in matrices (0 where it
   * has size 1 or is missing: broadcast). */
  const ty_abi_value_t *ops[2] = {a, bv};
  int64_t *strides[2] = {bsa, bsb};
  for (int k = 0; k < 2; ++k) {
    int orank = (int)ops[k]->rank - 2, pad = brank - orank;
    int64_t s = 1;
    for (int d = brank - 1; d >= 0; --d) {
      int od = d - pad;
      if (od < 0) continue;
      strides[k][d] = ops[k]->dims[od] == 1 ? 0 : s;
      s *= ops[k]->dims[od];
    }
  }
  if (mm.M == 0 || mm.N == 0 || batches == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_MATMUL, "ty_matmul");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_in(b, c, 2);
  ty_dev_arg_i32(b, c, bias != NULL);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i32(b, c, (int32_t)mm.M);
  ty_dev_arg_i32(b, c, (int32_t)mm.N);
  ty_dev_arg_i32(b, c, (int32_t)mm.K);
  ty_dev_arg_i32(b, c, mm.ta);
  ty_dev_arg_i32(b, c, mm.tb);
  ty_dev_arg_i32(b, c, brank);
  ty_dev_arg_dims8(b, c, bdims);
  ty_dev_arg_dims8(b, c, bsa);
  ty_dev_arg_dims8(b, c, bsb);
  /* 64 x 64 tiles of c, 8 x 8 work-items each (kernels/matmul.cl). */
  const size_t global[3] = {(size_t)((mm.N + 63) / 64) * 8, (size_t)((mm.M + 63) / 64) * 8,
                            (size_t)batches};
  const size_t local[3] = {8, 8, 1};
  ty_ocl_grid(c, 3, global, local);
}

/* ---- views and casts ---- */

void ty_ocl_build_cast(ty_ocl_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  int64_t n = ty_dev_numel(y);
  if (n == 0) return;
  if (x->dtype == y->dtype) {
    ty_ocl_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)n * ty_ocl_esize(y));
    return;
  }
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_cast");
  ty_dev_args_cast(b, c);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

/* The view ops' builders are the core's (backends/common/device_views.c). */
const ty_dev_movers_t ty_ocl_movers = {ty_ocl_fill, ty_ocl_copy, ty_ocl_strided_copy};

void ty_ocl_build_kv_cache_write(ty_ocl_build_t *b) {
  const ty_abi_value_t *cache = ty_dev_vin(b, 0), *fresh = ty_dev_vin(b, 1);
  const ty_abi_value_t *out = ty_dev_vout(b, 0);
  size_t es = ty_ocl_esize(out);
  /* cache' = cache first, unless the plan put cache' in cache's storage. */
  ty_ocl_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(cache) * es);
  int64_t n = ty_dev_numel(fresh);
  if (n == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_kv_write");
  ty_dev_args_kv_write(b, c);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

/* pool' = pool with the rows of new at their slots (issue 29). */
void ty_ocl_build_paged_kv_write(ty_ocl_build_t *b) {
  const ty_abi_value_t *pool = ty_dev_vin(b, 0), *fresh = ty_dev_vin(b, 1);
  const size_t es = ty_ocl_esize(pool);
  /* pool' = pool first, unless the plan put pool' in pool's storage. */
  ty_ocl_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(pool) * es);
  const int64_t n = ty_dev_numel(fresh);
  if (n == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_VIEWS, "ty_paged_kv_write");
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_in(b, c, 2);
  ty_dev_arg_i32(b, c, (int32_t)es);
  ty_dev_arg_i64(b, c, pool->dims[0] * pool->dims[1]);
  ty_dev_arg_i64(b, c, fresh->dims[1] * fresh->dims[2]);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

/* ---- embeddings ---- */

void ty_ocl_build_embedding(ty_ocl_build_t *b) {
  const ty_dev_embedding_t e = ty_dev_embedding_of(b);
  if (e.N * e.D == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_EMBEDDING, "ty_embedding");
  ty_dev_args_embedding(b, c);
  ty_ocl_grid1(c, (uint64_t)(e.N * e.D), TY_OCL_WG);
}

void ty_ocl_build_embedding_backward(ty_ocl_build_t *b) {
  const ty_abi_value_t *ids = ty_dev_vin(b, 1);
  const ty_abi_value_t *dt = ty_dev_vout(b, 0);
  const int64_t N = ty_dev_numel(ids), V = dt->dims[0], D = dt->dims[1];
  if (V * D == 0) return;
  if (N == 0) {
    ty_ocl_fill(b, ty_dev_out(b, 0), (uint64_t)(V * D) * ty_ocl_esize(dt));
    return;
  }
  if (N > INT32_MAX) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "more than 2^31 ids");
    return;
  }
  ty_dev_ref_t counts = ty_dev_scratch(b, (uint64_t)V * 4);
  ty_dev_ref_t offsets = ty_dev_scratch(b, (uint64_t)V * 4);
  ty_dev_ref_t list = ty_dev_scratch(b, (uint64_t)N * 4);
  ty_ocl_fill(b, counts, (uint64_t)V * 4);
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_EMBEDDING, "ty_emb_count");
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_i64(b, c, N);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_ref(b, c, counts);
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, (uint64_t)N, TY_OCL_WG);
  c = ty_ocl_launch(b, TY_OCL_FAM_EMBEDDING, "ty_emb_scan");
  ty_dev_arg_ref(b, c, counts);
  ty_dev_arg_ref(b, c, offsets);
  ty_dev_arg_i64(b, c, V);
  ty_ocl_grid1(c, TY_OCL_WG, TY_OCL_WG);
  c = ty_ocl_launch(b, TY_OCL_FAM_EMBEDDING, "ty_emb_place");
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_i64(b, c, N);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_ref(b, c, offsets);
  ty_dev_arg_ref(b, c, list);
  ty_ocl_grid1(c, (uint64_t)N, TY_OCL_WG);
  c = ty_ocl_launch(b, TY_OCL_FAM_EMBEDDING, "ty_emb_sum");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_ref(b, c, counts);
  ty_dev_arg_ref(b, c, offsets);
  ty_dev_arg_ref(b, c, list);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_i64(b, c, D);
  ty_ocl_grid1(c, (uint64_t)(V * D), TY_OCL_WG);
}

/* ---- optimizers and clipping ---- */

void ty_ocl_build_adamw(ty_ocl_build_t *b) {
  const int64_t n = ty_dev_numel(ty_dev_vin(b, 0));
  ty_dev_ref_t hp = ty_dev_scratch(b, 8 * sizeof(float));
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_OPTIM, "ty_adamw_prep");
  for (uint32_t i = 4; i < 10; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_ref(b, c, hp);
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, 1, 1);
  if (n == 0) return;
  c = ty_ocl_launch(b, TY_OCL_FAM_OPTIM, "ty_adamw");
  for (uint32_t i = 0; i < 4; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  for (uint32_t o = 0; o < 3; ++o) {
    ty_dev_arg_out(b, c, o);
  }
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_ref(b, c, hp);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

void ty_ocl_build_sgd(ty_ocl_build_t *b) {
  const int64_t n = ty_dev_numel(ty_dev_vin(b, 0));
  if (n == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_OPTIM, "ty_sgd");
  for (uint32_t i = 0; i < 3; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  for (uint32_t o = 0; o < 2; ++o) {
    ty_dev_arg_out(b, c, o);
  }
  ty_dev_arg_i64(b, c, n);
  for (uint32_t i = 3; i < 6; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_i32(b, c, ty_desc_node_attr_int(b->node, "nesterov", 0) != 0);
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
}

/* ty_sumsq_blocks' elements per work-group: 16 per work-item. */
#define TY_OCL_CLIP_BLOCK ((uint64_t)TY_OCL_WG * 16)

/* One gradient's partial sums in f32 (ty_dev_clip_partials' hook). */
static uint64_t ty_ocl_clip_sumsq(ty_dev_build_t *b, uint32_t input, int64_t n,
                                  ty_dev_ref_t partial, uint64_t slot) {
  const uint64_t blocks = ((uint64_t)n + TY_OCL_CLIP_BLOCK - 1) / TY_OCL_CLIP_BLOCK;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_REDUCE, "ty_sumsq_blocks");
  ty_dev_arg_in(b, c, input);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_ref(b, c, partial);
  ty_dev_arg_i64(b, c, (int64_t)slot);
  ty_ocl_grid1(c, blocks * TY_OCL_WG, TY_OCL_WG);
  return blocks;
}

void ty_ocl_build_clip(ty_ocl_build_t *b) {
  const uint32_t count = b->node->input_count - 1;
  const ty_dev_clip_t clip =
      ty_dev_clip_partials(b, TY_OCL_CLIP_BLOCK, sizeof(float), ty_ocl_clip_sumsq);
  const ty_dev_ref_t coef = clip.coef;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_REDUCE, "ty_clip_finish");
  ty_dev_args_clip_finish(b, c, &clip);
  ty_ocl_grid1(c, TY_OCL_WG, TY_OCL_WG);
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *g = ty_dev_vin(b, i + 1);
    const int64_t n = ty_dev_numel(g);
    if (n == 0) continue;
    c = ty_ocl_launch(b, TY_OCL_FAM_REDUCE, "ty_scale_by");
    ty_dev_arg_in(b, c, i + 1);
    ty_dev_arg_out(b, c, i + 1);
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_ref(b, c, coef);
    ty_ocl_grid1(c, (uint64_t)n, TY_OCL_WG);
  }
}
