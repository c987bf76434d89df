/* The builders of the memory levers' ops (issue 13): the fused LM head and
 * loss (linear_cross_entropy and its backward, chunked so the [rows, V]
 * logits never exist whole), Adafactor (adafactor_update) and the norm pass
 * of the fused optimizer's clipping (global_norm_scale). The kernels are in
 * kernels/softmax.cu (the loss rows), kernels/optim.cu (Adafactor) and
 * kernels/reduce.cu (the norm); the comment above each launch names the
 * kernel and its parameter list, which the ty_dev_arg_* calls follow. */
#include <stdlib.h>
#include <string.h>

#include "cuda_gemm.h"
#include "cuda_ops.h"
#include "trainyard/dtype.h"

/* ---- linear_cross_entropy ----
 *
 * Per chunk of n rows: a cuBLASLt GEMM forms the f32 logits z = h_c W^T
 * (h and W in their own dtype, f32 accumulation and output) in scratch,
 * then the row kernel takes each row (softmax.cu's comment has the math).
 * The backward forms z again, turns it into dz (h's dtype for f32 and bf16,
 * in place for f32; f32 for f16), and two GEMMs give dh_c = dz W straight
 * into dh and dW += dz^T h_c with beta = 1 across chunks, into dW itself
 * for f32 or into an f32 accumulator (cast once at the end) for bf16/f16,
 * so the sum over chunks never rounds to 16 bits. Scratch per node: the
 * chunk's f32 logits, the bf16 dz, the f32 dW (and for f16 the f32 copies
 * of W and of a chunk of h and dh) — within what the host plans for the
 * node (ty_desc_node_workspace_bytes). */

/* At most this many chunks per node: each is a few commands, and a chunk
 * attribute of a handful of rows over a 128K-token batch would otherwise
 * make hundreds of thousands. The result does not depend on the chunk. */
#define TY_CU_LCE_MAX_CHUNKS 1024

/* h, w, targets and the shapes of either direction. */
typedef struct {
  uint32_t at; /* input index of h */
  const ty_abi_value_t *h, *w, *targets;
  int64_t C, V, rows, chunk, ldz;
  ty_dtype_t dt;
  size_t es;
} ty_cu_lce_t;

static void ty_cu_lce_shapes(ty_cu_build_t *b, uint32_t at, ty_cu_lce_t *s) {
  s->at = at;
  s->h = ty_dev_vin(b, at);
  s->w = ty_dev_vin(b, at + 1);
  s->targets = ty_dev_vin(b, at + 2);
  s->V = s->w->dims[0];
  s->C = s->w->dims[1];
  s->rows = ty_dev_numel(s->targets);
  int64_t chunk = ty_desc_node_attr_int(b->node, "chunk", 0);
  if (chunk <= 0 || chunk > s->rows) chunk = s->rows > 0 ? s->rows : 1;
  const int64_t least = (s->rows + TY_CU_LCE_MAX_CHUNKS - 1) / TY_CU_LCE_MAX_CHUNKS;
  s->chunk = chunk < least ? least : chunk;
  /* Rows of z (f32) and dz 16-byte aligned for cuBLASLt's fast kernels. */
  s->ldz = (s->V + 7) / 8 * 8;
  s->dt = s->h->dtype;
  s->es = ty_desc_dtype_size(s->dt);
}

/* z[n, ldz] (f32) = h[first .. first+n) W^T. */
static void ty_cu_lce_logits(ty_cu_build_t *b, const ty_cu_lce_t *s, ty_dev_ref_t z,
                             int64_t first, int64_t n) {
  const ty_cu_gemm_spec_t spec = {
      .a = ty_dev_ref_at(ty_dev_in(b, s->at), (uint64_t)(first * s->C) * s->es),
      .b = ty_dev_in(b, s->at + 1),
      .c = z,
      .bias = ty_dev_none(),
      .ab_dtype = s->dt,
      .c_dtype = TY_DTYPE_F32,
      .M = n,
      .N = s->V,
      .K = s->C,
      .tb = true,
      .lda = s->C,
      .ldb = s->C,
      .ldc = s->ldz,
      .count = 1,
  };
  ty_cu_gemm_emit(b, &spec);
}

static void ty_cu_build_lce_forward(ty_cu_build_t *b) {
  /* h, w, targets -> loss, lse */
  ty_cu_lce_t s;
  ty_cu_lce_shapes(b, 0, &s);
  if (s.rows == 0) return;
  const ty_dev_ref_t z = ty_dev_scratch(b, (uint64_t)(s.chunk * s.ldz) * sizeof(float));
  for (int64_t first = 0; first < s.rows && !b->status; first += s.chunk) {
    const int64_t n = s.rows - first < s.chunk ? s.rows - first : s.chunk;
    ty_cu_lce_logits(b, &s, z, first, n);
    /* ty_lce_rows(const f32 *z, i64 ldz, targets, int dtt, f32 *loss, f32 *lse,
     *             i64 first, i64 n, i64 V, err, int node) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_SOFTMAX, "ty_lce_rows");
    ty_dev_arg_ref(b, c, z);
    ty_dev_arg_i64(b, c, s.ldz);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_arg_i32(b, c, ty_dev_dt(s.targets));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
    ty_dev_arg_ref(b, c, ty_dev_out(b, 1));
    ty_dev_arg_i64(b, c, first);
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_i64(b, c, s.V);
    ty_dev_arg_err(b, c);
    ty_cu_grid_blocks(b, c, (uint64_t)n, ty_cu_row_threads(s.V, 1024));
  }
}

/* ty_cast_<from>_<to>(x, y, i64 n) of views.cu: n elements, 4 a thread. */
static void ty_cu_lce_cast(ty_cu_build_t *b, const char *kernel, ty_dev_ref_t x, ty_dev_ref_t y,
                           int64_t n) {
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_VIEWS, kernel);
  ty_dev_arg_ref(b, c, x);
  ty_dev_arg_ref(b, c, y);
  ty_dev_arg_i64(b, c, n);
  ty_cu_grid1(b, c, ((uint64_t)n + 3) / 4, TY_CU_BLOCK);
}

static void ty_cu_build_lce_backward(ty_cu_build_t *b) {
  /* dloss, h, w, targets, lse -> dh, dw */
  ty_cu_lce_t s;
  ty_cu_lce_shapes(b, 1, &s);
  const uint64_t dw_bytes = (uint64_t)(s.V * s.C) * s.es;
  if (s.rows == 0) {
    ty_cu_fill(b, ty_dev_out(b, 1), dw_bytes);
    return;
  }
  /* dz's dtype and the GEMMs': h's for f32 and bf16 (bf16 has f32's range,
   * and its rounding of dz is what a bf16 LM head's gradient is anyway);
   * f32 for f16, whose range would flush the small probabilities of a large
   * vocabulary times a 1/tokens loss weight to zero: W and each chunk of h
   * are then staged in f32 and dh rounds once, as on the cpu. */
  const bool f16 = s.dt == TY_DTYPE_F16;
  const ty_dtype_t gt = f16 ? TY_DTYPE_F32 : s.dt;
  const size_t ges = ty_desc_dtype_size(gt);
  const char *rows_kernel = ty_cu_typed(TY_CU_TYPED("ty_lce_bwd_rows"), (int)gt);
  if (!rows_kernel) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "h of dtype %s (f32, bf16 or f16 only)",
               ty_dtype_name(s.dt));
    return;
  }
  const ty_dev_ref_t z = ty_dev_scratch(b, (uint64_t)(s.chunk * s.ldz) * sizeof(float));
  const ty_dev_ref_t dz =
      gt == TY_DTYPE_F32 ? z : ty_dev_scratch(b, (uint64_t)(s.chunk * s.ldz) * ges);
  const ty_dev_ref_t dw = s.dt == TY_DTYPE_F32
                             ? ty_dev_out(b, 1)
                             : ty_dev_scratch(b, (uint64_t)(s.V * s.C) * sizeof(float));
  ty_dev_ref_t w = ty_dev_in(b, 2), h32 = ty_dev_none(), dh32 = ty_dev_none();
  if (f16) {
    w = ty_dev_scratch(b, (uint64_t)(s.V * s.C) * sizeof(float));
    h32 = ty_dev_scratch(b, (uint64_t)(s.chunk * s.C) * sizeof(float));
    dh32 = ty_dev_scratch(b, (uint64_t)(s.chunk * s.C) * sizeof(float));
    ty_cu_lce_cast(b, "ty_cast_f16_f32", ty_dev_in(b, 2), w, s.V * s.C);
  }
  for (int64_t first = 0; first < s.rows && !b->status; first += s.chunk) {
    const int64_t n = s.rows - first < s.chunk ? s.rows - first : s.chunk;
    ty_dev_ref_t hc = ty_dev_ref_at(ty_dev_in(b, 1), (uint64_t)(first * s.C) * s.es);
    ty_dev_ref_t dhc = ty_dev_ref_at(ty_dev_out(b, 0), (uint64_t)(first * s.C) * s.es);
    ty_cu_lce_logits(b, &s, z, first, n);
    if (f16) {
      ty_cu_lce_cast(b, "ty_cast_f16_f32", hc, h32, n * s.C);
      hc = h32;
    }
    /* ty_lce_bwd_rows_<T>(const f32 *dloss, const f32 *z, i64 ldz, targets, int dtt,
     *                     const f32 *lse, dz, i64 first, i64 n, i64 V, err, int node) */
    ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_SOFTMAX, rows_kernel);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
    ty_dev_arg_ref(b, c, z);
    ty_dev_arg_i64(b, c, s.ldz);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 3));
    ty_dev_arg_i32(b, c, ty_dev_dt(s.targets));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 4));
    ty_dev_arg_ref(b, c, dz);
    ty_dev_arg_i64(b, c, first);
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_i64(b, c, s.V);
    ty_dev_arg_err(b, c);
    ty_cu_grid_blocks(b, c, (uint64_t)n, ty_cu_row_threads(s.V, 1024));
    /* dh[first .. first+n) = dz W */
    const ty_cu_gemm_spec_t dh = {
        .a = dz, .b = w, .c = f16 ? dh32 : dhc, .bias = ty_dev_none(), .ab_dtype = gt,
        .c_dtype = gt, .M = n, .N = s.C, .K = s.V, .lda = s.ldz, .ldb = s.C, .ldc = s.C,
        .count = 1,
    };
    ty_cu_gemm_emit(b, &dh);
    if (f16) ty_cu_lce_cast(b, "ty_cast_f32_f16", dh32, dhc, n * s.C);
    /* dW (+)= dz^T h_c */
    const ty_cu_gemm_spec_t dwg = {
        .a = dz, .b = hc, .c = dw, .bias = ty_dev_none(), .ab_dtype = gt,
        .c_dtype = TY_DTYPE_F32, .M = s.V, .N = s.C, .K = n, .ta = true,
        .accumulate = first > 0, .lda = s.ldz, .ldb = s.C, .ldc = s.C, .count = 1,
    };
    ty_cu_gemm_emit(b, &dwg);
  }
  /* The f32 accumulator into dW. */
  if (s.dt != TY_DTYPE_F32) {
    ty_cu_lce_cast(b, f16 ? "ty_cast_f32_f16" : "ty_cast_f32_bf16", dw, ty_dev_out(b, 1),
                   s.V * s.C);
  }
}

void ty_cu_build_linear_ce(ty_cu_build_t *b) {
  if (strcmp(b->node->op, "linear_cross_entropy_backward") == 0) {
    ty_cu_build_lce_backward(b);
  } else {
    ty_cu_build_lce_forward(b);
  }
}

/* ---- adafactor_update ---- */

#define TY_CU_ADAF_CHUNK 16384 /* elements per partial sum of squares */

void ty_cu_build_adafactor(ty_cu_build_t *b) {
  /* param, grad, row, col, v, m, lr, weight_decay, step, beta1 ->
   * param', then row', col' or v', then m' */
  const ty_abi_value_t *p = ty_dev_vin(b, 0);
  const int dt = (int)p->dtype;
  const int64_t n = ty_dev_numel(p);
  const bool factored = ty_dev_vin(b, 2) != NULL, momentum = ty_dev_vin(b, 5) != NULL;
  const int64_t cols = factored ? p->dims[p->rank - 1] : n;
  const int64_t rows = factored ? p->dims[p->rank - 2] : 1;
  const int64_t batches = rows * cols > 0 ? n / (rows * cols) : 0;
  const char *rows_k = ty_cu_typed(TY_CU_TYPED("ty_adaf_rows"), dt);
  if (!rows_k) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "param of dtype %s (f32, bf16 or f16 only)",
               ty_dtype_name(p->dtype));
    return;
  }
  if (factored && batches > 65535) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "%lld matrices in one factored parameter (at most "
               "65535)", (long long)batches);
    return;
  }
  uint32_t o = 1;
  const ty_dev_ref_t row_o = factored ? ty_dev_out(b, o++) : ty_dev_none();
  const ty_dev_ref_t col_o = factored ? ty_dev_out(b, o++) : ty_dev_none();
  const ty_dev_ref_t v_o = factored ? ty_dev_none() : ty_dev_out(b, o++);
  const ty_dev_ref_t m_o = momentum ? ty_dev_out(b, o++) : ty_dev_none();
  const double eps1 = ty_desc_node_attr_float(b->node, "eps1", 1e-30);
  const ty_dev_ref_t hp = ty_dev_scratch(b, 8 * sizeof(double));
  /* ty_adaf_prep(lr, int dtlr, wd, int dtwd, step, int dtstep, b1, int dtb1,
   *              int relative, int warmup, f64 decay, f64 *hp, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adaf_prep");
  for (uint32_t i = 6; i < 10; ++i) {
    ty_dev_arg_in(b, c, i);
  }
  ty_dev_arg_i32(b, c, ty_desc_node_attr_int(b->node, "relative_step", 0) != 0);
  ty_dev_arg_i32(b, c, ty_desc_node_attr_int(b->node, "warmup_init", 0) != 0);
  ty_dev_arg_f64(b, c, ty_desc_node_attr_float(b->node, "decay_rate", -0.8));
  ty_dev_arg_ref(b, c, hp);
  ty_dev_arg_err(b, c);
  ty_cu_grid(b, c, 1, 1, 1, 1, 1, 1, 0);
  if (n == 0) return;
  /* rms(p): sums of p^2 over fixed chunks (reduce.cu), then alpha. */
  const int64_t chunks = (n + TY_CU_ADAF_CHUNK - 1) / TY_CU_ADAF_CHUNK;
  const ty_dev_ref_t part = ty_dev_scratch(b, (uint64_t)chunks * sizeof(double));
  ty_cu_emit_chunk_sumsq(b, ty_dev_in(b, 0), dt, n, TY_CU_ADAF_CHUNK, part);
  /* ty_adaf_alpha(const f64 *part, i64 count, i64 n, f64 eps2, int scale_parameter,
   *               f64 *hp): one block */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adaf_alpha");
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i64(b, c, chunks);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_f64(b, c, ty_desc_node_attr_float(b->node, "eps2", 1e-3));
  ty_dev_arg_i32(b, c, ty_desc_node_attr_int(b->node, "scale_parameter", 1) != 0);
  ty_dev_arg_ref(b, c, hp);
  ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
  /* The second-moment states. */
  ty_dev_ref_t rmean = ty_dev_none();
  if (factored) {
    rmean = ty_dev_scratch(b, (uint64_t)batches * sizeof(double));
    /* ty_adaf_rows_<T>(g, const f32 *row, f32 *row_o, i64 R, i64 cols, f64 eps1,
     *                  const f64 *hp): one block per row */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, rows_k);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
    ty_dev_arg_ref(b, c, row_o);
    ty_dev_arg_i64(b, c, batches * rows);
    ty_dev_arg_i64(b, c, cols);
    ty_dev_arg_f64(b, c, eps1);
    ty_dev_arg_ref(b, c, hp);
    ty_cu_grid_blocks(b, c, (uint64_t)(batches * rows), ty_cu_row_threads(cols, TY_CU_BLOCK));
    /* Column sums in row splits that fill the card (a function of the shape). */
    const int64_t col_blocks = (cols + 31) / 32;
    int64_t rchunk;
    const uint32_t splits = ty_cu_col_split(col_blocks * batches, rows, &rchunk);
    const ty_dev_ref_t col_part =
        ty_dev_scratch(b, (uint64_t)splits * (uint64_t)(batches * cols) * sizeof(double));
    /* ty_adaf_cols_<T>(g, i64 rows, i64 cols, i64 rchunk, f64 eps1, f64 *part):
     * 32 x 8 threads; grid (column groups, splits, matrices) */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, ty_cu_typed(TY_CU_TYPED("ty_adaf_cols"), dt));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_i64(b, c, rows);
    ty_dev_arg_i64(b, c, cols);
    ty_dev_arg_i64(b, c, rchunk);
    ty_dev_arg_f64(b, c, eps1);
    ty_dev_arg_ref(b, c, col_part);
    ty_cu_grid(b, c, (uint32_t)col_blocks, splits, (uint32_t)batches, 32, 8, 1, 0);
    /* ty_adaf_cols_finish(const f64 *part, i64 splits, i64 n, i64 rows,
     *                     const f32 *col, f32 *col_o, const f64 *hp) */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adaf_cols_finish");
    ty_dev_arg_ref(b, c, col_part);
    ty_dev_arg_i64(b, c, splits);
    ty_dev_arg_i64(b, c, batches * cols);
    ty_dev_arg_i64(b, c, rows);
    ty_dev_arg_ref(b, c, ty_dev_in(b, 3));
    ty_dev_arg_ref(b, c, col_o);
    ty_dev_arg_ref(b, c, hp);
    ty_cu_grid1(b, c, (uint64_t)(batches * cols), TY_CU_BLOCK);
    /* ty_adaf_rowmean(const f32 *row_o, i64 B, i64 rows, f64 *rmean) */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adaf_rowmean");
    ty_dev_arg_ref(b, c, row_o);
    ty_dev_arg_i64(b, c, batches);
    ty_dev_arg_i64(b, c, rows);
    ty_dev_arg_ref(b, c, rmean);
    ty_cu_grid_blocks(b, c, (uint64_t)batches, ty_cu_row_threads(rows, TY_CU_BLOCK));
  } else {
    /* ty_adaf_v_<T>(g, const f32 *v, f32 *v_o, i64 n, f64 eps1, const f64 *hp) */
    c = ty_cu_launch(b, TY_CU_FAM_OPTIM, ty_cu_typed(TY_CU_TYPED("ty_adaf_v"), dt));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
    ty_dev_arg_ref(b, c, ty_dev_in(b, 4));
    ty_dev_arg_ref(b, c, v_o);
    ty_dev_arg_i64(b, c, n);
    ty_dev_arg_f64(b, c, eps1);
    ty_dev_arg_ref(b, c, hp);
    ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
  }
  /* rms(u): ty_adaf_usq_<T>(g, row_o, col_o, const f64 *rmean, v_o, i64 n, i64 rows,
   *                         i64 cols, i64 chunk, f64 *part): one block per chunk */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, ty_cu_typed(TY_CU_TYPED("ty_adaf_usq"), dt));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, c, row_o);
  ty_dev_arg_ref(b, c, col_o);
  ty_dev_arg_ref(b, c, rmean);
  ty_dev_arg_ref(b, c, v_o);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, cols);
  ty_dev_arg_i64(b, c, TY_CU_ADAF_CHUNK);
  ty_dev_arg_ref(b, c, part);
  ty_cu_grid_blocks(b, c, (uint64_t)chunks, TY_CU_BLOCK);
  /* ty_adaf_scale(const f64 *part, i64 count, i64 n, f64 clip, f64 *hp): one block */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, "ty_adaf_scale");
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i64(b, c, chunks);
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_f64(b, c, ty_desc_node_attr_float(b->node, "clip_threshold", 1.0));
  ty_dev_arg_ref(b, c, hp);
  ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
  /* ty_adaf_apply_<T>(p, g, row_o, col_o, const f64 *rmean, v_o, const f32 *m,
   *                   f32 *m_o, po, i64 n, i64 rows, i64 cols, const f64 *hp) */
  c = ty_cu_launch(b, TY_CU_FAM_OPTIM, ty_cu_typed(TY_CU_TYPED("ty_adaf_apply"), dt));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, c, row_o);
  ty_dev_arg_ref(b, c, col_o);
  ty_dev_arg_ref(b, c, rmean);
  ty_dev_arg_ref(b, c, v_o);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 5));
  ty_dev_arg_ref(b, c, m_o);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i64(b, c, n);
  ty_dev_arg_i64(b, c, rows);
  ty_dev_arg_i64(b, c, cols);
  ty_dev_arg_ref(b, c, hp);
  ty_cu_grid1(b, c, (uint64_t)n, TY_CU_BLOCK);
}

/* ---- global_norm_scale ---- */

void ty_cu_build_global_norm_scale(ty_cu_build_t *b) {
  /* max_norm, s_1..s_n -> norm, scale */
  const uint32_t count = b->node->input_count - 1;
  ty_dev_ref_t *table_refs = calloc(count ? count : 1, sizeof(ty_dev_ref_t));
  if (!table_refs) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  int dts = 0;
  for (uint32_t i = 0; i < count; ++i) {
    table_refs[i] = ty_dev_in(b, i + 1);
    const int d = ty_dev_dt(ty_dev_vin(b, i + 1));
    if (i > 0 && d != dts) {
      ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "sums of squares of different dtypes");
    }
    dts = d;
  }
  const ty_dev_ref_t table = ty_cu_ptr_table(b, table_refs, count);
  free(table_refs);
  /* ty_global_norm_scale(max_norm, int dtm, const void *const *sums, int dts, int count,
   *                      norm, int dtn, scale, int dtsc): one thread */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_REDUCE, "ty_global_norm_scale");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_ref(b, c, table);
  ty_dev_arg_i32(b, c, dts);
  ty_dev_arg_i32(b, c, (int32_t)count);
  ty_dev_arg_out(b, c, 0);
  ty_dev_arg_out(b, c, 1);
  ty_cu_grid(b, c, 1, 1, 1, 1, 1, 1, 0);
}
