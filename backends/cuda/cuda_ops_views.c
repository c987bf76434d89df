/* The element movers (fills, copies, strided copies) that the core's view
 * builders use (broadcast_to, reshape, transpose, slice (+ backward),
 * concat: backends/common/device_views.c), and the launch builders of cast
 * and kv_cache_write, on the kernels of kernels/views.cu. The comment above every
 * launch names the kernel and its parameter list: the ty_dev_arg_* calls
 * under it must follow that list exactly. */
#include "trainyard/op_shapes.h"
#include "cuda_ops.h"
#include "trainyard/dtype.h"

/* ---- element movers ---- */

/* y[i] = x[...] over `rank` dims with strides in elements: size-1 axes
 * dropped, axes both sides walk contiguously merged, and a contiguous
 * innermost axis moved in units of up to 16 bytes. A plain contiguous copy
 * becomes a device copy. */
static void ty_cu_strided_copy(ty_cu_build_t *b, ty_dev_ref_t x, ty_dev_ref_t y, size_t esize,
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
  ty_dev_args_strided_copy(b, c, x, y, esize, vec, n, r, d8, x8, y8);
  ty_cu_grid1(b, c, (uint64_t)(n / vec), TY_CU_BLOCK);
}

void ty_cu_build_cast(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  const int64_t n = ty_dev_numel(y);
  if (n == 0) return;
  if (x->dtype == y->dtype) {
    ty_cu_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)n * ty_cu_esize(y));
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
      ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
      ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
      ty_dev_arg_i64(b, c, n);
      ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
      return;
    }
  }
  /* ty_cast(x, int dtx, y, int dty, i64 n, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, "ty_cast");
  ty_dev_args_cast(b, c);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

/* slice: the core's builder, or under a SLICES fusion (cuda_fuse.h) one
 * launch writing this node's slice and the other slice nodes' of the same
 * input along its last axis:
 * ty_slice_rows(x, y0, y1, y2, y3, int esize, int vec, i64 rows, i64 xrow,
 *               int parts, dims8 offsets_then_widths) */
void ty_cu_build_slice(ty_cu_build_t *b) {
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b);
  if (!f || f->kind != TY_CU_FUSE_SLICES) {
    ty_dev_build_slice(b);
    return;
  }
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  const size_t es = ty_cu_esize(x);
  const int64_t xrow = x->dims[x->rank - 1];
  const int64_t rows = xrow ? ty_dev_numel(x) / xrow : 0;
  ty_dev_ref_t ys[TY_CU_FUSE_MAX_SLICES];
  int64_t ow[8] = {0};
  const int parts = 1 + (int)f->slice_count;
  int64_t width = 0;
  for (int p = 0; p < TY_CU_FUSE_MAX_SLICES; ++p) {
    const ty_abi_node_t *node = p == 0 ? b->node : p < parts ? &b->g->nodes[f->slices[p - 1]] : NULL;
    if (!node) {
      ys[p] = ys[0];
      continue;
    }
    const ty_abi_attr_t *starts = ty_desc_node_attr(node, "starts");
    const ty_abi_value_t *y = &b->g->values[node->outputs[0]];
    ys[p] = p == 0 ? ty_dev_out(b, 0) : ty_dev_value(node->outputs[0]);
    ow[p] = starts->ints[x->rank - 1];
    ow[4 + p] = y->dims[y->rank - 1];
    width += ow[4 + p];
  }
  if (rows == 0 || width == 0) return;
  /* The widest unit dividing the row, every offset and width, and the
   * references' byte offsets (the kernel checks the addresses too). */
  int vec = 1;
  for (int v = (int)(16 / es); v > 1 && vec == 1; v /= 2) {
    bool ok = xrow % v == 0 && ty_dev_in(b, 0).offset % ((uint64_t)v * es) == 0;
    for (int p = 0; p < parts && ok; ++p) {
      ok = ow[p] % v == 0 && ow[4 + p] % v == 0 && ys[p].offset % ((uint64_t)v * es) == 0;
    }
    if (ok) vec = v;
  }
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, "ty_slice_rows");
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  for (int p = 0; p < TY_CU_FUSE_MAX_SLICES; ++p) ty_dev_arg_ref(b, c, ys[p]);
  ty_dev_arg_i32(b, c, (int32_t)es);
  ty_dev_arg_i32(b, c, vec);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, xrow);
  ty_dev_arg_i32(b, c, parts);
  ty_dev_arg_dims8(b, c, ow);
  ty_cu_grid1(b, c, (uint64_t)(rows * (width / vec)), TY_CU_BLOCK);
}

/* The other view ops' builders are the core's (backends/common/device_views.c). */
const ty_dev_movers_t ty_cu_movers = {ty_cu_fill, ty_cu_copy, ty_cu_strided_copy};

void ty_cu_build_kv_cache_write(ty_cu_build_t *b) {
  const ty_abi_value_t *cache = ty_dev_vin(b, 0), *fresh = ty_dev_vin(b, 1);
  const ty_abi_value_t *out = ty_dev_vout(b, 0);
  const size_t es = ty_cu_esize(out);
  /* cache' = cache first, unless the plan put cache' in cache's storage
   * (the copy is skipped when the addresses coincide). */
  ty_cu_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(cache) * es);
  const int64_t n = ty_dev_numel(fresh);
  if (n == 0) return;
  /* ty_kv_write(fresh, cache, pos, int dtpos, int esize, i64 Smax, i64 T,
   *             i64 row, i64 n, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, "ty_kv_write");
  ty_dev_args_kv_write(b, c);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}
