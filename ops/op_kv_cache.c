/* kv_cache_write: writes T new key/value rows into a [B, Smax, H, D] cache at
 * a runtime position. The position is data, so the bound pos + T <= Smax is
 * checked at execution; inference checks what shapes alone can. */
#include "ops/op_internal.h"

static ty_status_t ty_kv_cache_write_infer(const ty_op_infer_ctx_t *ctx) {
  const ty_tensor_desc_t *cache, *fresh, *pos;
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 0, "cache", &cache));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 1, "new", &fresh));
  TY_RETURN_IF_ERROR(ty_op_need(ctx, 2, "pos", &pos));
  TY_RETURN_IF_ERROR(ty_op_check_float(ctx->op, "cache", cache));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "cache", cache, 4));
  TY_RETURN_IF_ERROR(ty_op_check_same_dtype(ctx->op, "new", fresh, "cache", cache));
  TY_RETURN_IF_ERROR(ty_op_check_rank(ctx->op, "new", fresh, 4));
  if (fresh->dims[0] != cache->dims[0] || fresh->dims[2] != cache->dims[2] ||
      fresh->dims[3] != cache->dims[3] || fresh->dims[1] > cache->dims[1]) {
    return ty_op_error(ctx->op,
                       "new is %s but cache is %s: expected [B, T, H, D] with "
                       "the cache's B, H, D and T <= Smax",
                       TY_DESC(fresh), TY_DESC(cache));
  }
  TY_RETURN_IF_ERROR(ty_op_check_scalar(ctx->op, "pos", pos, TY_DTYPE_I64));
  return ty_op_output_like(ctx, cache);
}

const ty_op_def_t ty_op_def_kv_cache_write = {
    .name = "kv_cache_write", .min_inputs = 3, .max_inputs = 3,
    .attr_names = ty_op_no_attrs, .infer = ty_kv_cache_write_infer,
    .grad = NULL, .summary = "cache' = cache with cache'[:, pos:pos+T] = new"};
