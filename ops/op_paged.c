/* The paged KV cache's two ops (issue 29): paged_kv_write puts a step's new
 * keys or values into pool blocks by slot number, paged_attention reads each
 * row's sequence back through a block table. Slots, block numbers, sequences
 * and positions are data, so their ranges are checked at execution (device
 * data errors); inference checks what shapes alone can. Inference only: no
 * gradient. */
#include "ops/op_internal.h"

/* paged_kv_write(pool [NB, BS, Hkv, D], new [N, Hkv, D], slots [N] i64) */
static ty_status_t ty_paged_kv_write_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *pool, *fresh, *slots;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "pool", &pool));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "new", &fresh));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "slots", &slots));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "pool", pool));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "pool", pool, 4));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(ctx->op, "new", fresh, "pool", pool));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "new", fresh, 3));
  if (fresh->dims[1] != pool->dims[2] || fresh->dims[2] != pool->dims[3]) {
    return ty_op_error(ctx->op,
                       "new is %s but pool is %s: expected [N, Hkv, D] with the "
                       "pool's Hkv and D ([NB, BS, Hkv, D])",
                       TY_DESC(fresh), TY_DESC(pool));
  }
  TY_RETURN_IF_ERROR(ty_op_check_dtype(ctx->op, "slots", slots, TY_DTYPE_I64));
  const int64_t n = fresh->dims[0];
  TY_RETURN_IF_ERROR(ty_op_check_shape(ctx->op, "slots", slots, 1, &n,
                                       "[N], one slot per row of new"));
  return ty_op_output_like(ctx, pool);
}

static const char *const ty_paged_attention_attrs[] = {"scale", "window", NULL};

/* An index input: i64 of `rank` with the given dims. */
static ty_status_t ty_paged_index(const char *op, const char *role,
                                  const ty_tensor_desc_t *d, uint32_t rank,
                                  const int64_t *dims, const char *why) {
  TY_RETURN_IF_ERROR(ty_op_check_dtype(op, role, d, TY_DTYPE_I64));
  return ty_op_check_shape(op, role, d, rank, dims, why);
}

/* paged_attention(q [N, Hq, D], k_pool [NB, BS, Hkv, D], v_pool (like
 * k_pool), block_table [S, MB] i64, row_seq [N] i64, row_pos [N] i64) */
static ty_status_t ty_paged_attention_infer(const ty_op_infer_ctx_t *ctx) {
  const char *op = ctx->op;
  const ty_tensor_desc_t *q, *k, *v, *table, *seq, *pos;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "q", &q));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "k_pool", &k));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "v_pool", &v));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 3, "block_table", &table));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 4, "row_seq", &seq));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 5, "row_pos", &pos));
  TY_RETURN_IF_ERROR(ty_op_check_float(op, "q", q));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "q", q, 3));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(op, "k_pool", k, "q", q));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "k_pool", k, 4));
  TY_RETURN_IF_ERROR(ty_op_check_like(op, "v_pool", v, "k_pool", k));
  if (k->dims[3] != q->dims[2]) {
    return ty_op_error(op,
                       "k_pool is %s but q is %s: head dimension D must match "
                       "([NB, BS, Hkv, D] vs [N, Hq, D])",
                       TY_DESC(k), TY_DESC(q));
  }
  const int64_t hq = q->dims[1], hkv = k->dims[2];
  if (hkv == 0 || hq % hkv != 0) {
    return ty_op_error(op,
                       "k_pool is %s but q is %s: Hq = %lld must be a multiple "
                       "of Hkv = %lld (grouped-query attention)",
                       TY_DESC(k), TY_DESC(q), (long long)hq, (long long)hkv);
  }
  TY_RETURN_IF_ERROR(ty_op_check_dtype(op, "block_table", table, TY_DTYPE_I64));
  TY_RETURN_IF_ERROR(ty_op_check_rank(op, "block_table", table, 2));
  const int64_t n = q->dims[0];
  TY_RETURN_IF_ERROR(ty_paged_index(op, "row_seq", seq, 1, &n, "[N], one per row of q"));
  TY_RETURN_IF_ERROR(ty_paged_index(op, "row_pos", pos, 1, &n, "[N], one per row of q"));
  int64_t window;
  TY_RETURN_IF_ERROR(ty_op_attr_int(op, ctx->attrs, "window", 0, &window));
  if (window < 0) {
    return ty_op_error(op, "attribute 'window' = %lld must be >= 0 (0: no window)",
                       (long long)window);
  }
  if (ty_attrs_find(ctx->attrs, "scale")) {
    double scale;
    TY_RETURN_IF_ERROR(ty_op_attr_float(op, ctx->attrs, "scale", 1.0, &scale));
    if (!(scale > 0)) {
      return ty_op_error(op, "attribute 'scale' = %g must be > 0", scale);
    }
  }
  return ty_op_output_like(ctx, q);
}

const ty_op_def_t ty_op_def_paged_kv_write = {
    .name = "paged_kv_write", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_op_no_attrs, .infer = ty_paged_kv_write_infer,
    .grad = NULL,
    .summary = "pool' = pool with pool'[slot / BS, slot % BS] = new[i] (slot -1 skips)"};
const ty_op_def_t ty_op_def_paged_attention = {
    .name = "paged_attention", .min_inputs = 6, .max_inputs = 6,
    .attr_names = ty_paged_attention_attrs, .infer = ty_paged_attention_infer,
    .grad = NULL,
    .summary = "causal/window attention of each row over its sequence's pool blocks"};
