/* The launch builders of the vocabulary-parallel ops (ops/op_vocab.c, issue
 * 17: one tp rank's shard of the embedding and of the cross-entropy), on the
 * kernels of kernels/vocab.cu, whose comment has the math. The embedding's
 * backward reuses embedding.cu's deterministic scatter-add on the shard's
 * local ids. The comment above every launch names the kernel and its
 * parameter list: the ty_dev_arg_* calls under it follow that list exactly. */
#include <stdio.h>
#include <string.h>

#include "cuda_ops.h"
#include "trainyard/dtype.h"

static int64_t ty_cu_vocab_attr(const ty_cu_build_t *b, const char *name, int64_t fallback) {
  return ty_desc_node_attr_int(b->node, name, fallback);
}

/* The dtype instance of `names` for value v, or a failed build. */
static const char *ty_cu_vocab_kernel(ty_cu_build_t *b, const char *const names[3],
                                      const ty_abi_value_t *v) {
  const char *k = ty_cu_typed(names, (int)v->dtype);
  if (!k) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "%s: the cuda kernels take f32, bf16 or f16, not %s",
               b->node->op, ty_dtype_name(v->dtype));
  }
  return k;
}

void ty_cu_build_vocab_embedding(ty_cu_build_t *b) {
  const ty_abi_value_t *table = ty_dev_vin(b, 0), *ids = ty_dev_vin(b, 1);
  const int64_t N = ty_dev_numel(ids), D = table->dims[1];
  if (N * D == 0) return;
  const char *k = ty_cu_vocab_kernel(b, TY_CU_TYPED("ty_vocab_embedding"), table);
  if (!k) return;
  /* ty_vocab_embedding_<T>(table, ids, int dti, out, i64 N, i64 D, i64 start,
   *                        i64 valid) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VOCAB, k);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i64(b, c, N);
  ty_dev_arg_i64(b, c, D);
  ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_start", 0));
  ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_valid", table->dims[0]));
  ty_cu_grid1(b, c, (uint64_t)(N * D), TY_CU_BLOCK);
}

/* The kernels' code of i32 (the local ids). */
static int ty_cu_i32_code(void) {
  const ty_abi_value_t v = {.dtype = TY_DTYPE_I32};
  return ty_dev_dt(&v);
}

void ty_cu_build_vocab_embedding_backward(ty_cu_build_t *b) {
  ty_cu_emb_scatter_t sc;
  if (!ty_cu_emb_scatter_begin(b, &sc)) return;
  ty_dev_ref_t lids = ty_dev_scratch(b, (uint64_t)sc.N * 4);
  /* ty_vocab_local_ids(ids, int dti, i64 N, i64 start, i64 valid, int *lids,
   *                    int *counts): the shard's local ids (-1 outside it)
   * and their counts */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VOCAB, "ty_vocab_local_ids");
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_i64(b, c, sc.N);
  ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_start", 0));
  ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_valid", sc.V));
  ty_dev_arg_ref(b, c, lids);
  ty_dev_arg_ref(b, c, sc.counts);
  ty_cu_grid1(b, c, (uint64_t)sc.N, TY_CU_BLOCK);
  ty_cu_emb_scatter_end(b, &sc, lids, ty_cu_i32_code());
}

/* The shape of a row kernel's logits (input `at`): rows and the shard's
 * padded width Vp. */
static void ty_cu_vocab_rows(const ty_cu_build_t *b, uint32_t at, int64_t *rows, int64_t *vp) {
  const ty_abi_value_t *z = ty_dev_vin(b, at);
  *vp = z->dims[z->rank - 1];
  *rows = *vp ? ty_dev_numel(z) / *vp : 0;
}

void ty_cu_build_vocab_max(ty_cu_build_t *b) {
  const bool backward = strcmp(b->node->op, "vocab_max_backward") == 0;
  const uint32_t zi = backward ? 1 : 0;
  int64_t rows, vp;
  ty_cu_vocab_rows(b, zi, &rows, &vp);
  if (rows == 0) return;
  const int64_t valid = ty_cu_vocab_attr(b, "vocab_valid", vp);
  const char *k = ty_cu_vocab_kernel(
      b, backward ? TY_CU_TYPED("ty_vocab_max_backward") : TY_CU_TYPED("ty_vocab_max"),
      ty_dev_vin(b, zi));
  if (!k) return;
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VOCAB, k);
  if (backward) {
    /* ty_vocab_max_backward_<T>(const f32 *dy, z, const f32 *m, dz, i64 rows,
     *                           i64 vp, i64 valid) */
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  } else {
    /* ty_vocab_max_<T>(z, f32 *m, i64 rows, i64 vp, i64 valid) */
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  }
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, vp);
  ty_dev_arg_i64(b, c, valid);
  ty_cu_grid_blocks(b, c, (uint64_t)rows, ty_cu_row_threads(vp, 1024));
}

void ty_cu_build_vocab_ce_sums(ty_cu_build_t *b) {
  const bool backward = strcmp(b->node->op, "vocab_ce_sums_backward") == 0;
  const uint32_t zi = backward ? 1 : 0;
  int64_t rows, vp;
  ty_cu_vocab_rows(b, zi, &rows, &vp);
  if (rows == 0) return;
  const char *k = ty_cu_vocab_kernel(
      b, backward ? TY_CU_TYPED("ty_vocab_ce_sums_backward") : TY_CU_TYPED("ty_vocab_ce_sums"),
      ty_dev_vin(b, zi));
  if (!k) return;
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VOCAB, k);
  /* ty_vocab_ce_sums_<T>(z, targets, int dtt, const f32 *m, f32 *sums, i64 rows,
   *                      i64 vp, i64 start, i64 valid);
   * ty_vocab_ce_sums_backward_<T>(const f32 *dsums, z, targets, int dtt,
   *                      const f32 *m, dz, f32 *dm, i64 rows, i64 vp, i64 start,
   *                      i64 valid) */
  if (backward) ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_in(b, zi));
  ty_dev_arg_in(b, c, zi + 1);
  ty_dev_arg_ref(b, c, ty_dev_in(b, zi + 2));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  if (backward) ty_dev_arg_ref(b, c, ty_dev_out(b, 1));
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, vp);
  ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_start", 0));
  ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_valid", vp));
  ty_cu_grid_blocks(b, c, (uint64_t)rows, ty_cu_row_threads(vp, 1024));
}

void ty_cu_build_vocab_ce_loss(ty_cu_build_t *b) {
  const bool backward = strcmp(b->node->op, "vocab_ce_loss_backward") == 0;
  const ty_abi_value_t *targets = ty_dev_vin(b, backward ? 2 : 1);
  const int64_t N = ty_dev_numel(targets);
  if (N == 0) return;
  ty_cu_cmd_t *c;
  if (backward) {
    /* ty_vocab_ce_loss_backward(const f32 *dloss, const f32 *sums, targets,
     *                           int dtt, f32 *dsums, i64 N) */
    c = ty_cu_launch(b, TY_CU_FAM_VOCAB, "ty_vocab_ce_loss_backward");
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_arg_i32(b, c, ty_dev_dt(targets));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
    ty_dev_arg_i64(b, c, N);
  } else {
    /* ty_vocab_ce_loss(const f32 *sums, targets, int dtt, f32 *loss, i64 N,
     *                  i64 V, err, int node) */
    c = ty_cu_launch(b, TY_CU_FAM_VOCAB, "ty_vocab_ce_loss");
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_i32(b, c, ty_dev_dt(targets));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
    ty_dev_arg_i64(b, c, N);
    ty_dev_arg_i64(b, c, ty_cu_vocab_attr(b, "vocab_size", 0));
    ty_dev_arg_err(b, c);
  }
  ty_cu_grid1(b, c, (uint64_t)N, TY_CU_BLOCK);
}

/* The statistics (m, sums, dm, loss) must be f32: the kernels' type. */
bool ty_cu_vocab_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                       size_t capacity) {
  for (uint32_t i = 0; i < node->input_count + node->output_count; ++i) {
    const bool in = i < node->input_count;
    const uint32_t v = in ? node->inputs[i] : node->outputs[i - node->input_count];
    if (v == UINT32_MAX) continue;
    const ty_dtype_t d = g->values[v].dtype;
    if (d != TY_DTYPE_F32 && d != TY_DTYPE_BF16 && d != TY_DTYPE_F16 && d != TY_DTYPE_I32 &&
        d != TY_DTYPE_I64) {
      snprintf(reason, capacity, "the cuda kernels of %s take f32, bf16 or f16 data, not %s",
               node->op, ty_dtype_name(d));
      return false;
    }
  }
  return true;
}
