/* The launch builders of the optimizers (adamw_update, multi-tensor when
 * several are in a row; sgd_update), clip_by_global_norm and the
 * all_reduce / tp_reduce commands, on kernels/optim.cu and reduce.cu. The
 * comment above every launch names the kernel and its parameter list: the
 * ty_dev_arg_* calls under it must follow that list exactly. */
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "trainyard/dtype.h"

/* ---- optimizers and clipping ---- */

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
 * (each keeps its weight decay, all of one dtype). Returns how many (>= 1). */
static uint32_t ty_cu_adamw_run(const ty_cu_build_t *b, int dt) {
  const ty_abi_graph_t *g = b->g;
  const ty_abi_node_t *first = b->node;
  uint32_t count = 1;
  for (uint32_t n = b->n + 1; n < g->node_count; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    int t;
    if (strcmp(node->op, "adamw_update") != 0 || !ty_cu_adamw_typed(g, node, &t) || t != dt ||
        g->values[node->inputs[8]].dtype != g->values[first->inputs[8]].dtype) {
      break;
    }
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
 * optim.cu, ty_adamw_multi): tables of their operands, chunk starts. With
 * `grads` (per node, the value read as its gradient instead of input 1)
 * and `coef` (not none), each gradient is scaled by coef as it is read: a
 * clip fused in (cuda_fuse.h CLIP_ADAMW). */
static void ty_cu_build_adamw_multi(ty_cu_build_t *b, int dt, uint32_t count,
                                    const uint32_t *grads, ty_dev_ref_t coef) {
  const ty_abi_graph_t *g = b->g;
  ty_dev_ref_t *refs = calloc((size_t)count, sizeof(ty_dev_ref_t));
  int64_t *starts = calloc((size_t)count + 1, sizeof(int64_t));
  int64_t *sizes = calloc((size_t)count, sizeof(int64_t));
  if (!refs || !starts || !sizes) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    free(refs);
    free(starts);
    free(sizes);
    return;
  }
  for (uint32_t k = 0; k < count; ++k) {
    sizes[k] = ty_desc_value_elements(&g->values[g->nodes[b->n + k].inputs[0]]);
    starts[k + 1] = starts[k] + (sizes[k] + TY_CU_MT_CHUNK - 1) / TY_CU_MT_CHUNK;
  }
  /* Tables: p, g, m, v (inputs 0-3), p', m', v' (outputs 0-2), wd (input
   * 8), and the bf16 copy of p' each keeps (none: 0; cuda_fuse.h
   * ty_cu_weight_copy_plan). */
  ty_dev_ref_t tables[9];
  for (int t = 0; t < 9; ++t) {
    for (uint32_t k = 0; k < count; ++k) {
      const ty_abi_node_t *node = &g->nodes[b->n + k];
      if (t == 8) {
        refs[k] = ty_cu_weight_copy(b, node->inputs[0]);
        continue;
      }
      const uint32_t v = t == 1 && grads ? grads[k]
                         : t < 4     ? node->inputs[t]
                         : t < 7     ? node->outputs[t - 4]
                                     : node->inputs[8];
      refs[k] = (ty_dev_ref_t){TY_DEV_REF_VALUE, v, 0};
    }
    tables[t] = ty_cu_ptr_table(b, refs, count);
  }
  const ty_dev_ref_t starts_ref = ty_dev_aux(b, starts, ((uint64_t)count + 1) * sizeof(int64_t));
  const ty_dev_ref_t sizes_ref = ty_dev_aux(b, sizes, (uint64_t)count * sizeof(int64_t));
  const int64_t chunks = starts[count];
  free(refs);
  free(starts);
  free(sizes);
  ty_dev_ref_t hp = ty_dev_scratch(b, 8 * sizeof(double));
  /* ty_adamw_multi_prep(lr, int dtlr, b1, int dtb1, b2, int dtb2, eps, int dteps,
   *                     step, int dtstep, f64 *hp, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adamw_multi_prep");
  for (uint32_t i = 4; i < 10; ++i) {
    if (i != 8) ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_ref(b, c, hp);
  ty_dev_arg_err(b, c);
  ty_cu_grid(b, c, 1, 1, 1, 1, 1, 1, 0);
  if (chunks == 0) return;
  /* ty_adamw_multi_<T>(p[], g[], m[], v[], po[], mo[], vo[], wd[], int dtwd,
   *                    u16 *copy[], i64 *starts, i64 *sizes, int count,
   *                    i64 chunk, f64 *hp, const f64 *coef) */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, ty_cu_typed(TY_CU_TYPED("ty_adamw_multi"), dt));
  for (int t = 0; t < 8; ++t) ty_dev_arg_ref(b, c, tables[t]);
  ty_dev_arg_i32(b, c, ty_dev_dt(ty_dev_vin(b, 8)));
  ty_dev_arg_ref(b, c, tables[8]);
  ty_dev_arg_ref(b, c, starts_ref);
  ty_dev_arg_ref(b, c, sizes_ref);
  ty_dev_arg_i32(b, c, (int32_t)count);
  ty_dev_arg_i64(b, c, TY_CU_MT_CHUNK);
  ty_dev_arg_ref(b, c, hp);
  ty_dev_arg_ref(b, c, coef);
  ty_cu_grid_blocks(b, c, (uint64_t)chunks, TY_CU_BLOCK);
  for (uint32_t k = 1; k < count; ++k) ty_cu_mark_fused(b, b->n + k);
}

void ty_cu_build_adamw(ty_cu_build_t *b) {
  /* param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step -> param', m', v' */
  int mt_dt;
  /* A weight whose bf16 copy the update keeps is always updated by the
   * multi-tensor kernel, which writes the copy (alone if need be). */
  const bool keeps_copy = ty_cu_weight_copy(b, b->node->inputs[0]).kind != TY_DEV_REF_NONE;
  if (ty_cu_adamw_typed(b->g, b->node, &mt_dt)) {
    const uint32_t run = ty_cu_adamw_run(b, mt_dt);
    if ((run > 1 || keeps_copy) && ty_dev_numel(ty_dev_vin(b, 0)) > 0) {
      ty_cu_build_adamw_multi(b, mt_dt, run, NULL, ty_dev_none());
      return;
    }
  }
  if (keeps_copy) {
    ty_dev_fail(b, TY_CODE_INTERNAL,
                "the weight copy of '%s' is planned, but its update is not a multi-tensor one",
                ty_dev_vin(b, 0)->name);
    return;
  }
  const int64_t n = ty_dev_numel(ty_dev_vin(b, 0));
  ty_dev_ref_t hp = ty_dev_scratch(b, 8 * sizeof(double));
  /* ty_adamw_prep(lr, int dtlr, b1, int dtb1, b2, int dtb2, eps, int dteps,
   *               wd, int dtwd, step, int dtstep, f64 *hp, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adamw_prep");
  for (uint32_t i = 4; i < 10; ++i) ty_dev_arg_in(b, c, i);
  ty_dev_arg_ref(b, c, hp);
  ty_dev_arg_err(b, c);
  ty_cu_grid(b, c, 1, 1, 1, 1, 1, 1, 0);
  if (n == 0) return;
  const ty_abi_value_t *pg[3] = {ty_dev_vin(b, 0), ty_dev_vin(b, 1), ty_dev_vout(b, 0)};
  const ty_abi_value_t *mv[4] = {ty_dev_vin(b, 2), ty_dev_vin(b, 3), ty_dev_vout(b, 1),
                                 ty_dev_vout(b, 2)};
  const char *typed = ty_cu_all_dtype(pg, 3, (int)pg[0]->dtype) &&
                              ty_cu_all_dtype(mv, 4, TY_DTYPE_F32)
                          ? ty_cu_typed(TY_CU_TYPED("ty_adamw_t"), (int)pg[0]->dtype)
                          : NULL;
  if (typed) {
    /* ty_adamw_t_<T>(p, g, f32 *m, f32 *v, po, f32 *mo, f32 *vo, i64 n,
     *                const f64 *hp) */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, typed);
    for (uint32_t i = 0; i < 4; ++i) ty_dev_arg_ref(b, c, ty_dev_in(b, i));
    for (uint32_t o = 0; o < 3; ++o) ty_dev_arg_ref(b, c, ty_dev_out(b, o));
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_ref(b, c, hp);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
    return;
  }
  /* ty_adamw(p, int dtp, g, int dtg, m, int dtm, v, int dtv, po, int dtpo,
   *          mo, int dtmo, vo, int dtvo, i64 n, const f64 *hp) */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adamw");
  for (uint32_t i = 0; i < 4; ++i) ty_dev_arg_in(b, c, i);
  for (uint32_t o = 0; o < 3; ++o) ty_dev_arg_out(b, c, o);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_ref(b, c, hp);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

void ty_cu_build_sgd(ty_cu_build_t *b) {
  /* param, grad, buf, lr, momentum, weight_decay -> param', buf' */
  const int64_t n = ty_dev_numel(ty_dev_vin(b, 0));
  if (n == 0) return;
  /* ty_sgd(p, int dtp, g, int dtg, buf, int dtbuf, po, int dtpo, bo, int dtbo,
   *        i64 n, lr, int dtlr, mu, int dtmu, wd, int dtwd, int nesterov, err,
   *        int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_sgd");
  for (uint32_t i = 0; i < 3; ++i) ty_dev_arg_in(b, c, i);
  for (uint32_t o = 0; o < 2; ++o) ty_dev_arg_out(b, c, o);
  ty_dev_arg_i64(b, c, n);
  for (uint32_t i = 3; i < 6; ++i) ty_dev_arg_in(b, c, i);
  ty_dev_arg_i32(b, c, ty_desc_node_attr_int(b->node, "nesterov", 0) != 0);
  ty_dev_arg_err(b, c);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

#define TY_CU_CLIP_CHUNK 8192 /* elements per partial sum of squares */

int64_t ty_cu_emit_chunk_sumsq(ty_cu_build_t *b, ty_dev_ref_t x, int dt, int64_t n,
                               int64_t chunk, ty_dev_ref_t part) {
  const int64_t blocks = (n + chunk - 1) / chunk;
  /* ty_reduce_rows_<T>(x, y, int dty, int kind, i64 R, i64 chunks, i64 chunk,
   *                    i64 total, f64 scale): one row of n, one block per chunk */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_reduce_rows"), dt));
  ty_dev_arg_ref(b, c, x);
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i32(b, c, TY_DTYPE_F64);
  ty_dev_arg_i32(b, c, 1 /* sumsq */);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_i64(b, c, blocks);
  ty_dev_arg_i64(b, c, chunk);
  ty_dev_arg_i64(b, c, blocks);
  ty_dev_arg_f64(b, c, 1.0);
  ty_cu_grid_blocks(b, c, (uint64_t)blocks, TY_CU_BLOCK);
  return blocks;
}

/* The adamw_update nodes of a CLIP_ADAMW fusion (cuda_fuse.h) from the
 * clip's commands: one multi-tensor launch that reads the clip's own
 * gradients and scales them by `coef` (ty_clip_finish's). The commands
 * are the first adamw node's, so a data error (a step below 1) names it;
 * TRAINYARD_PROFILE counts their time in the clip's, whose build made them. */
static void ty_cu_build_clip_adamw(ty_cu_build_t *b, int dt, ty_dev_ref_t coef) {
  const ty_abi_node_t *clip = b->node;
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b);
  const uint32_t clip_n = b->n, first = f->slices[0], count = f->slice_count;
  uint32_t *grads = calloc(count, sizeof(uint32_t));
  if (!grads) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (uint32_t k = 0; k < count; ++k) {
    const uint32_t clipped = b->g->nodes[first + k].inputs[1];
    grads[k] = UINT32_MAX;
    for (uint32_t j = 1; j < clip->output_count; ++j) {
      if (clip->outputs[j] == clipped) grads[k] = clip->inputs[j];
    }
    if (grads[k] == UINT32_MAX) {
      ty_dev_fail(b, TY_CODE_INTERNAL, "node %u: fused adamw_update %u reads no clipped gradient",
                  clip_n, first + k);
      free(grads);
      return;
    }
  }
  b->n = first;
  b->node = &b->g->nodes[first];
  ty_cu_build_adamw_multi(b, dt, count, grads, coef);
  b->n = clip_n;
  b->node = clip;
  free(grads);
}

/* clip_by_global_norm over gradients of one typed dtype: three launches
 * (kernels/reduce.cu: ty_sumsq_multi, ty_clip_finish, ty_scale_multi), or
 * two and the optimizer's when the updates are fused in (CLIP_ADAMW). */
static bool ty_cu_build_clip_multi(ty_cu_build_t *b) {
  const uint32_t count = b->node->input_count - 1;
  const int dt = (int)ty_dev_vin(b, 1)->dtype;
  if (count < 2 || !ty_cu_typed(TY_CU_TYPED("ty_sumsq_multi"), dt)) return false;
  for (uint32_t i = 0; i < count; ++i) {
    if ((int)ty_dev_vin(b, i + 1)->dtype != dt || (int)ty_dev_vout(b, i + 1)->dtype != dt) {
      return false;
    }
  }
  ty_dev_ref_t *in = calloc(count, sizeof(ty_dev_ref_t)), *out = calloc(count, sizeof(ty_dev_ref_t));
  int64_t *starts = calloc((size_t)count + 1, sizeof(int64_t));
  int64_t *sizes = calloc(count, sizeof(int64_t));
  bool ok = in && out && starts && sizes;
  for (uint32_t i = 0; ok && i < count; ++i) {
    in[i] = ty_dev_in(b, i + 1);
    out[i] = ty_dev_out(b, i + 1);
    sizes[i] = ty_dev_numel(ty_dev_vin(b, i + 1));
    starts[i + 1] = starts[i] + (sizes[i] + TY_CU_MT_CHUNK - 1) / TY_CU_MT_CHUNK;
  }
  if (!ok) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  } else {
    const int64_t chunks = starts[count];
    const ty_dev_ref_t xt = ty_cu_ptr_table(b, in, count), yt = ty_cu_ptr_table(b, out, count);
    const ty_dev_ref_t st = ty_dev_aux(b, starts, ((uint64_t)count + 1) * sizeof(int64_t));
    const ty_dev_ref_t sz = ty_dev_aux(b, sizes, (uint64_t)count * sizeof(int64_t));
    const ty_dev_ref_t part = ty_dev_scratch(b, (uint64_t)(chunks ? chunks : 1) * sizeof(double));
    const ty_dev_ref_t coef = ty_dev_scratch(b, sizeof(double));
    /* ty_sumsq_multi_<T>(x[], i64 *starts, i64 *sizes, int count, i64 chunk, f64 *part) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_sumsq_multi"), dt));
    ty_dev_arg_ref(b, c, xt);
    ty_dev_arg_ref(b, c, st);
    ty_dev_arg_ref(b, c, sz);
    ty_dev_arg_i32(b, c, (int32_t)count);
    ty_dev_arg_i64(b, c, TY_CU_MT_CHUNK);
    ty_dev_arg_ref(b, c, part);
    ty_cu_grid_blocks(b, c, (uint64_t)(chunks ? chunks : 1), TY_CU_BLOCK);
    /* ty_clip_finish(const f64 *part, i64 count, max_norm, int dtm, norm, int dtn,
     *                f64 *coef): one block */
    c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_clip_finish");
    ty_dev_arg_ref(b, c, part);
    ty_dev_arg_i64(b, c, chunks);
    ty_dev_arg_in(b, c, 0);
    ty_dev_arg_out(b, c, 0);
    ty_dev_arg_ref(b, c, coef);
    ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
    const ty_cu_fuse_t *f = ty_cu_fuse_of(b);
    if (f && f->kind == TY_CU_FUSE_CLIP_ADAMW) {
      ty_cu_build_clip_adamw(b, dt, coef);
      goto done;
    }
    /* ty_scale_multi_<T>(x[], y[], i64 *starts, i64 *sizes, int count, i64 chunk,
     *                    const f64 *coef) */
    c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_scale_multi"), dt));
    ty_dev_arg_ref(b, c, xt);
    ty_dev_arg_ref(b, c, yt);
    ty_dev_arg_ref(b, c, st);
    ty_dev_arg_ref(b, c, sz);
    ty_dev_arg_i32(b, c, (int32_t)count);
    ty_dev_arg_i64(b, c, TY_CU_MT_CHUNK);
    ty_dev_arg_ref(b, c, coef);
    ty_cu_grid_blocks(b, c, (uint64_t)(chunks ? chunks : 1), TY_CU_BLOCK);
  }
done:
  free(in);
  free(out);
  free(starts);
  free(sizes);
  return true;
}

/* One gradient's partial sums in f64 (ty_dev_clip_partials' hook). */
static uint64_t ty_cu_clip_sumsq(ty_dev_build_t *b, uint32_t input, int64_t n,
                                 ty_dev_ref_t partial, uint64_t slot) {
  return (uint64_t)ty_cu_emit_chunk_sumsq(b, ty_dev_in(b, input), (int)ty_dev_vin(b, input)->dtype,
                                          n, TY_CU_CLIP_CHUNK,
                                          ty_dev_ref_at(partial, slot * sizeof(double)));
}

void ty_cu_build_clip(ty_cu_build_t *b) {
  /* max_norm, g_1..g_n -> norm, g_1'..g_n' */
  const uint32_t count = b->node->input_count - 1;
  if (ty_cu_build_clip_multi(b)) return;
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b);
  if (f && f->kind == TY_CU_FUSE_CLIP_ADAMW) {
    /* The fusion's conditions are the multi-tensor path's; without it the
     * folded updates would never run. */
    ty_dev_fail(b, TY_CODE_INTERNAL, "node %u: clip_by_global_norm with its AdamW updates "
                "folded in but not on the multi-tensor path", b->n);
    return;
  }
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *g = ty_dev_vin(b, i + 1), *o = ty_dev_vout(b, i + 1);
    if (g->dtype != o->dtype || !ty_cu_typed(TY_CU_TYPED("ty_scale_by"), (int)g->dtype)) {
      ty_dev_fail(b, TY_CODE_UNIMPLEMENTED,
                 "gradient %u: clipping takes f32, bf16 or f16 gradients of one dtype in and "
                 "out", i + 1);
      return;
    }
  }
  const ty_dev_clip_t clip =
      ty_dev_clip_partials(b, TY_CU_CLIP_CHUNK, sizeof(double), ty_cu_clip_sumsq);
  const ty_dev_ref_t coef = clip.coef;
  /* ty_clip_finish(const f64 *part, i64 count, max_norm, int dtm, norm, int dtn,
   *                f64 *coef): one block */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_clip_finish");
  ty_dev_args_clip_finish(b, c, &clip);
  ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_value_t *g = ty_dev_vin(b, i + 1);
    const int64_t n = ty_dev_numel(g);
    if (n == 0) continue;
    /* ty_scale_by_<T>(x, y, i64 n, const f64 *coef) */
    c = ty_cu_launch(b, TY_CU_FAM_REDUCE, ty_cu_typed(TY_CU_TYPED("ty_scale_by"), (int)g->dtype));
    ty_dev_arg_ref(b, c, ty_dev_in(b, i + 1));
    ty_dev_arg_ref(b, c, ty_dev_out(b, i + 1));
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_ref(b, c, coef);
    ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
  }
}

/* all_reduce(x) -> y and tp_reduce(x) -> y over the ranks of the node's
 * process group (ops/op_collective.c): NCCL on the device's communicator of
 * that group, a copy at world 1 (cuda_execute.c). The group string is the
 * graph's, which the executable owns. */
void ty_cu_build_all_reduce(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  const bool tp = strcmp(b->node->op, "tp_reduce") == 0;
  const char *reduce = ty_desc_node_attr_string(b->node, "reduce", "sum");
  const char *group = ty_desc_node_attr_string(b->node, "group", tp ? "tp" : "world");
  const uint32_t op = strcmp(reduce, "avg") == 0   ? TY_ABI_REDUCE_AVG
                      : strcmp(reduce, "max") == 0 ? TY_ABI_REDUCE_MAX
                                                   : TY_ABI_REDUCE_SUM;
  ty_cu_all_reduce(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(x), x->dtype, op,
                   group);
}

/* all_gather(x) -> y and reduce_scatter(x) -> y over the node's process
 * group (default "cp"; ops/op_gather.c, docs/ops.md "Collectives").
 * parts = 1 is the identity: a copy, whatever the run's size. Else NCCL's
 * AllGather / ReduceScatter on the device's communicator of the group
 * (cuda_execute.c), which concatenate / split the flat buffer rank by rank.
 * With `outer` = the elements before `axis` > 1, the parts are interleaved
 * along axis in y (gather) or x (scatter), so a strided copy moves them
 * between that layout and a rank-major scratch: [outer][parts][inner] <->
 * [parts][outer][inner], after the gather and before the reduce-scatter. */
void ty_cu_build_gather(ty_cu_build_t *b) {
  const bool gather = strcmp(b->node->op, "all_gather") == 0;
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  const size_t es = ty_desc_dtype_size(x->dtype);
  const int64_t parts = ty_desc_node_attr_int(b->node, "parts", 1);
  int64_t axis = ty_desc_node_attr_int(b->node, "axis", 0);
  if (axis < 0) axis += x->rank;
  const char *group = ty_desc_node_attr_string(b->node, "group", "cp");
  if (parts <= 1) {
    ty_cu_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(y) * es);
    return;
  }
  /* One rank's part: x for the gather, y for the reduce-scatter. */
  const int64_t part = ty_dev_numel(gather ? x : y);
  if (part == 0) return;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis && d < (int64_t)x->rank; ++d) outer *= x->dims[d];
  if (outer == 1) {
    ty_cu_gather(b, gather, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)part, x->dtype,
                 (uint32_t)parts, group);
    return;
  }
  const int64_t inner = part / outer;
  const ty_dev_ref_t scratch = ty_dev_scratch(b, (uint64_t)(parts * part) * es);
  const int64_t dims[3] = {parts, outer, inner};
  const int64_t rank_major[3] = {outer * inner, inner, 1};
  const int64_t interleaved[3] = {inner, parts * inner, 1};
  if (gather) {
    ty_cu_gather(b, true, ty_dev_in(b, 0), scratch, (uint64_t)part, x->dtype, (uint32_t)parts,
                 group);
    ty_cu_movers.strided_copy(b, scratch, ty_dev_out(b, 0), es, 3, dims, rank_major,
                              interleaved);
  } else {
    ty_cu_movers.strided_copy(b, ty_dev_in(b, 0), scratch, es, 3, dims, interleaved,
                              rank_major);
    ty_cu_gather(b, false, scratch, ty_dev_out(b, 0), (uint64_t)part, x->dtype,
                 (uint32_t)parts, group);
  }
}
