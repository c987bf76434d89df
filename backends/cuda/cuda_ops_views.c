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

/* The view ops' builders are the core's (backends/common/device_views.c). */
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
