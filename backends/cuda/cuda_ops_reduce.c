/* The launch builders of the reductions (reduce_sum, reduce_mean,
 * reduce_max, reduce_sumsq over any axes) and the column sums other
 * builders use (ty_cu_col_sum), on kernels/reduce.cu. The comment above
 * every launch names the kernel and its parameter list: the ty_dev_arg_*
 * calls under it must follow that list exactly. */
#include <string.h>

#include "trainyard/op_shapes.h"
#include "cuda_ops.h"
#include "trainyard/dtype.h"

/* ---- reductions ---- */

#define TY_CU_RED_CHUNK 16384 /* elements of a row one block sums (kernels/reduce.cu) */

/* Row sums: x as [O, R] reduced over R (kernels/reduce.cu, ty_reduce_rows_*),
 * into y (dtype dty) or, for dty f64, any f64 array. */
static void ty_cu_reduce_rows_into(ty_cu_build_t *b, const char *kernel, ty_dev_ref_t x,
                                   ty_dev_ref_t y, int dty, int kind, int64_t O, int64_t R,
                                   double scale) {
  const int64_t chunks = (R + TY_CU_RED_CHUNK - 1) / TY_CU_RED_CHUNK;
  const int64_t chunk = chunks > 1 ? TY_CU_RED_CHUNK : R;
  ty_dev_ref_t dst = y;
  if (chunks > 1) dst = ty_dev_scratch(b, (uint64_t)(O * chunks) * sizeof(double));
  /* ty_reduce_rows_<T>(x, y, int dty, int kind, i64 R, i64 chunks, i64 chunk,
   *                    i64 total, f64 scale) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, kernel);
  ty_dev_arg_ref(b, c, x);
  ty_dev_arg_ref(b, c, dst);
  ty_dev_arg_i32(b, c, chunks > 1 ? TY_DTYPE_F64 : dty);
  ty_dev_arg_i32(b, c, kind);
  ty_dev_arg_i64(b, c, R);
  ty_dev_arg_i64(b, c, chunks);
  ty_dev_arg_i64(b, c, chunk);
  ty_dev_arg_i64(b, c, O * chunks);
  ty_dev_arg_f64(b, c, chunks > 1 ? 1.0 : scale);
  ty_cu_grid_blocks(b, c, (uint64_t)(O * chunks), ty_cu_row_threads(chunk, TY_CU_BLOCK));
  if (chunks == 1) return;
  /* ty_reduce_partials(const f64 *part, y, int dty, i64 per_row, i64 rows,
   *                    f64 scale): each row's chunk sums, in order */
  c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_reduce_partials");
  ty_dev_arg_ref(b, c, dst);
  ty_dev_arg_ref(b, c, y);
  ty_dev_arg_i32(b, c, dty);
  ty_dev_arg_i64(b, c, chunks);
  ty_dev_arg_i64(b, c, O);
  ty_dev_arg_f64(b, c, scale);
  ty_cu_grid_blocks(b, c, (uint64_t)O, ty_cu_row_threads(chunks, TY_CU_BLOCK));
}

/* Column sums: x as [O, R, I] reduced over R (ty_reduce_cols_*). */
/* y[o, i] = scale * sum_r f(x[o, r, i]) for x [O, R, I] of dtype xdt (the
 * ty_reduce_cols kernels, with ty_reduce_cols_finish over chunk partials). */
static void ty_cu_reduce_cols_at(ty_cu_build_t *b, ty_dev_ref_t x, ty_dtype_t xdt, ty_dev_ref_t y,
                                 int dty, int kind, int64_t O, int64_t R, int64_t I,
                                 double scale) {
  /* 4 columns per thread when the rows allow (ty_reduce_cols4_*). */
  const bool vec4 = I % 4 == 0 && I >= 128;
  const char *kernel = ty_cu_typed(vec4 ? TY_CU_TYPED("ty_reduce_cols4")
                                        : TY_CU_TYPED("ty_reduce_cols"),
                                   (int)xdt);
  if (!kernel) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "no column-sum kernel for this dtype");
    return;
  }
  const int64_t cb = vec4 ? (I + 127) / 128 : (I + 31) / 32;
  int64_t rchunk;
  const uint32_t split = ty_cu_col_split(cb * O, R, &rchunk);
  ty_dev_ref_t part = ty_dev_none();
  if (split > 1) part = ty_dev_scratch(b, (uint64_t)split * (uint64_t)(O * I) * sizeof(double));
  /* ty_reduce_cols_<T>(x, y, int dty, f64 *part, int kind, i64 O, i64 R, i64 I,
   *                    i64 rchunk, f64 scale) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, kernel);
  ty_dev_arg_ref(b, c, x);
  ty_dev_arg_ref(b, c, y);
  ty_dev_arg_i32(b, c, dty);
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i32(b, c, kind);
  ty_dev_arg_i64(b, c, O);
  ty_dev_arg_i64(b, c, R);
  ty_dev_arg_i64(b, c, I);
  ty_dev_arg_i64(b, c, rchunk);
  ty_dev_arg_f64(b, c, scale);
  const uint64_t gx = (uint64_t)(cb * O) > 0x7fffffffu ? 0x7fffffffu : (uint64_t)(cb * O);
  ty_cu_grid(b, c, (uint32_t)gx, split, 1, 32, 8, 1, 0);
  if (split == 1) return;
  /* ty_reduce_cols_finish(const f64 *part, y, int dty, i64 chunks, i64 n,
   *                       f64 scale): the chunk partials [split, O*I], in order */
  c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_reduce_cols_finish");
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_ref(b, c, y);
  ty_dev_arg_i32(b, c, dty);
  ty_dev_arg_i64(b, c, split);
  ty_dev_arg_i64(b, c, O * I);
  ty_dev_arg_f64(b, c, scale);
  const uint64_t fx = ((uint64_t)(O * I) + 31) / 32; /* 32 columns x 32 chunk lanes */
  ty_cu_grid(b, c, (uint32_t)(fx > 0x7fffffffu ? 0x7fffffffu : fx), 1, 1, 32, 32, 1, 0);
}

static void ty_cu_reduce_cols(ty_cu_build_t *b, int dty, int kind, int64_t O, int64_t R,
                              int64_t I, double scale) {
  ty_cu_reduce_cols_at(b, ty_dev_in(b, 0), ty_dev_vin(b, 0)->dtype, ty_dev_out(b, 0), dty, kind, O,
                       R, I, scale);
}

void ty_cu_col_sum(ty_cu_build_t *b, ty_dev_ref_t x, ty_dtype_t xdt, ty_dev_ref_t y,
                   ty_dtype_t ydt, int64_t rows, int64_t cols) {
  ty_cu_reduce_cols_at(b, x, xdt, y, (int)ydt, 0, 1, rows, cols, 1.0);
}

void ty_cu_build_reduce(ty_cu_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  bool red[8];
  ty_dev_reduce_axes(b, red);
  const int64_t outs = ty_dev_numel(y);
  if (outs == 0) return;
  int64_t terms = 1;
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (red[d]) terms *= x->dims[d];
  }
  if (terms == 0) {
    ty_cu_fill(b, ty_dev_out(b, 0), (uint64_t)outs * ty_cu_esize(y));
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
  const int dty = ty_dev_dt(y);
  if (rows) {
    /* [R], [O, R]: rows; [], [I], [R, I], [O, R, I]: columns. */
    if (segs == 1 && seg_red[0]) {
      ty_cu_reduce_rows_into(b, rows, ty_dev_in(b, 0), ty_dev_out(b, 0), dty, kind, 1, seg[0],
                             scale);
      return;
    }
    if (segs == 2 && !seg_red[0] && seg_red[1]) {
      ty_cu_reduce_rows_into(b, rows, ty_dev_in(b, 0), ty_dev_out(b, 0), dty, kind, seg[0],
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
  ty_dev_reduce_plan_t plan;
  ty_dev_reduce_plan(b, red, 1, &plan);
  /* ty_reduce(x, int dtx, y, int dty, int kind, i64 outs, i64 terms, f64 scale,
   *           int krank, dims8 kdims, dims8 kstr, int rrank, dims8 rdims,
   *           dims8 rstr) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_reduce");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i32(b, c, dty);
  ty_dev_arg_i32(b, c, kind);
  ty_dev_arg_i64(b, c, outs);
  ty_dev_arg_i64(b, c, terms);
  ty_dev_arg_f64(b, c, scale);
  ty_dev_args_reduce_plan(b, c, &plan);
  ty_cu_grid_blocks(b, c, (uint64_t)outs, ty_cu_row_threads(terms, TY_CU_BLOCK));
}
