/* Elementwise and reduction kernels: add, sub, mul, div (numpy broadcasting),
 * scale, broadcast_to, reduce_sum / reduce_mean / reduce_sumsq.
 *
 *   c[o]  = a[bcast_a(o)] (op) b[bcast_b(o)]     op in + - * /
 *   y     = alpha * x
 *   y[o]  = x[bcast_x(o)]                         (broadcast_to, any dtype)
 *   y[k]  = sum_{i -> k} x[i]   (or x[i]^2; mean divides by the reduced count)
 *
 * The elementwise ops have no backward of their own (gradients are built from
 * these same ops). Broadcast shapes are simplified first: size-1 axes dropped
 * and neighbours merged when both operands walk them contiguously, so
 * [B,T,C] + [C] runs as rows of C, and equal shapes as one flat loop.
 *
 * Precision: + - * / on f32 are computed in f32, which rounds exactly as the
 * f64 reference does (double then f32 rounding of one operation is the
 * correctly rounded result), so f32 results are bit-identical; bf16/f16
 * storage rounds the same f32 value. Reductions accumulate in f64; checked at
 * normalised mean squared error < 1e-10 (f32) against the reference. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* Terms of a reduction per part (and per thread). */
#define CPU_REDUCE_GRAIN 32768

typedef enum { CPU_ADD, CPU_SUB, CPU_MUL, CPU_DIV } cpu_binop_t;

/* A broadcast of up to two inputs to an output shape, simplified. */
typedef struct {
  int rank;
  int64_t dims[CPU_MAX_RANK];
  int64_t stride[2][CPU_MAX_RANK]; /* element strides; 0 where repeated */
  int64_t rows;                    /* product of dims[0..rank-1) */
  int64_t last;                    /* dims[rank-1] (1 when rank 0) */
} cpu_bcast_t;

static void cpu_bcast_plan(const ty_abi_value_t *out, const ty_abi_value_t *const *ins,
                           int n_in, cpu_bcast_t *p) {
  int r = (int)out->rank;
  int64_t st[2][CPU_MAX_RANK];
  for (int k = 0; k < n_in; ++k) {
    const ty_abi_value_t *x = ins[k];
    int pad = r - (int)x->rank;
    int64_t s = 1;
    for (int d = r - 1; d >= 0; --d) {
      int xd = d - pad;
      int64_t size = xd >= 0 ? x->dims[xd] : 1;
      st[k][d] = size == 1 ? 0 : s;
      s *= size;
    }
  }
  /* Drop size-1 axes, then merge an axis into its left neighbour when every
   * input's stride lines up (stride[d-1] == stride[d] * dims[d]). */
  p->rank = 0;
  for (int d = 0; d < r; ++d) {
    if (out->dims[d] == 1) continue;
    int q = p->rank;
    bool merge = q > 0;
    for (int k = 0; k < n_in && merge; ++k) {
      merge = p->stride[k][q - 1] == st[k][d] * out->dims[d];
    }
    if (merge) {
      p->dims[q - 1] *= out->dims[d];
      for (int k = 0; k < n_in; ++k) p->stride[k][q - 1] = st[k][d];
    } else {
      p->dims[q] = out->dims[d];
      for (int k = 0; k < n_in; ++k) p->stride[k][q] = st[k][d];
      p->rank = q + 1;
    }
  }
  if (p->rank == 0) { /* scalar or all ones: one element */
    p->rank = 1;
    p->dims[0] = 1;
    for (int k = 0; k < n_in; ++k) p->stride[k][0] = 0;
  }
  p->last = p->dims[p->rank - 1];
  p->rows = 1;
  for (int d = 0; d + 1 < p->rank; ++d) p->rows *= p->dims[d];
}

/* Input offsets of the first element of output row `row`. */
static void cpu_bcast_row(const cpu_bcast_t *p, int n_in, int64_t row, int64_t *off) {
  for (int k = 0; k < n_in; ++k) off[k] = 0;
  for (int d = p->rank - 2; d >= 0; --d) {
    int64_t idx = row % p->dims[d];
    row /= p->dims[d];
    for (int k = 0; k < n_in; ++k) off[k] += idx * p->stride[k][d];
  }
}

/* A row segment of input k as f32: contiguous, or one repeated value. */
static const float *cpu_bcast_span(const void *src, ty_dtype_t dt, int64_t stride,
                                   int64_t off, int64_t j0, int64_t len, float *scratch) {
  if (stride == 0) {
    float v = cpu_load1(src, dt, off);
    for (int64_t j = 0; j < len; ++j) scratch[j] = v;
    return scratch;
  }
  return cpu_span_in(src, dt, off + j0, len, scratch);
}

static ty_abi_status_t cpu_binary(const cpu_node_ctx_t *c, cpu_binop_t op) {
  const ty_abi_value_t *ins[2] = {cpu_in(c, 0), cpu_in(c, 1)};
  const ty_abi_value_t *out = cpu_out(c, 0);
  const void *pa = cpu_in_data(c, 0), *pb = cpu_in_data(c, 1);
  void *pc = cpu_out_data(c, 0);
  if (cpu_numel(out) == 0) return NULL;
  cpu_bcast_t p;
  cpu_bcast_plan(out, ins, 2, &p);
  const int64_t nch = (p.last + CPU_CHUNK - 1) / CPU_CHUNK;
  const int64_t tasks = p.rows * nch;
  const int nt = cpu_threads(c, tasks * (p.last < CPU_CHUNK ? p.last : CPU_CHUNK), 16384);
  const ty_dtype_t da = ins[0]->dtype, db = ins[1]->dtype, dc = out->dtype;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    float sa[CPU_CHUNK], sb[CPU_CHUNK], sc[CPU_CHUNK];
    int64_t row = t / nch, j0 = (t % nch) * CPU_CHUNK;
    int64_t len = p.last - j0 < CPU_CHUNK ? p.last - j0 : CPU_CHUNK;
    int64_t off[2];
    cpu_bcast_row(&p, 2, row, off);
    const float *a = cpu_bcast_span(pa, da, p.stride[0][p.rank - 1], off[0], j0, len, sa);
    const float *b = cpu_bcast_span(pb, db, p.stride[1][p.rank - 1], off[1], j0, len, sb);
    int64_t o = row * p.last + j0;
    float *y = cpu_span_out(pc, dc, o, sc);
    switch (op) {
      case CPU_ADD: for (int64_t j = 0; j < len; ++j) y[j] = a[j] + b[j]; break;
      case CPU_SUB: for (int64_t j = 0; j < len; ++j) y[j] = a[j] - b[j]; break;
      case CPU_MUL: for (int64_t j = 0; j < len; ++j) y[j] = a[j] * b[j]; break;
      case CPU_DIV: for (int64_t j = 0; j < len; ++j) y[j] = a[j] / b[j]; break;
    }
    cpu_span_out_done(pc, dc, o, len, y);
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_add(const cpu_node_ctx_t *c) { return cpu_binary(c, CPU_ADD); }
ty_abi_status_t cpu_kernel_sub(const cpu_node_ctx_t *c) { return cpu_binary(c, CPU_SUB); }
ty_abi_status_t cpu_kernel_mul(const cpu_node_ctx_t *c) { return cpu_binary(c, CPU_MUL); }
ty_abi_status_t cpu_kernel_div(const cpu_node_ctx_t *c) { return cpu_binary(c, CPU_DIV); }

ty_abi_status_t cpu_kernel_scale(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const void *px = cpu_in_data(c, 0);
  void *py = cpu_out_data(c, 0);
  /* alpha is rounded to f32 once; alpha * x is then one f32 multiply, which
   * matches the reference when alpha is exact in f32 and is within 1 ulp
   * otherwise. */
  const float alpha = (float)ty_desc_node_attr_float(c->node, "alpha", 1.0);
  const int64_t n = cpu_numel(x), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
  const int nt = cpu_threads(c, n, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float sx[CPU_CHUNK], sy[CPU_CHUNK];
    int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    const float *a = cpu_span_in(px, x->dtype, off, len, sx);
    float *b = cpu_span_out(py, y->dtype, off, sy);
    for (int64_t j = 0; j < len; ++j) b[j] = alpha * a[j];
    cpu_span_out_done(py, y->dtype, off, len, b);
  }
  return NULL;
}

/* broadcast_to moves elements, so it copies bytes and takes any dtype. */
ty_abi_status_t cpu_kernel_broadcast_to(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const unsigned char *px = cpu_in_data(c, 0);
  unsigned char *py = cpu_out_data(c, 0);
  const size_t es = ty_desc_dtype_size(y->dtype);
  if (cpu_numel(y) == 0) return NULL;
  cpu_bcast_t p;
  cpu_bcast_plan(y, &x, 1, &p);
  const int64_t inner = p.stride[0][p.rank - 1];
  const int nt = cpu_threads(c, p.rows * p.last, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t row = 0; row < p.rows; ++row) {
    int64_t off;
    cpu_bcast_row(&p, 1, row, &off);
    unsigned char *dst = py + (size_t)(row * p.last) * es;
    if (inner == 1) {
      memcpy(dst, px + (size_t)off * es, (size_t)p.last * es);
    } else if (es == 4) {
      /* one value repeated (a fill: the accumulators' reset): fixed-size
       * copies the compiler turns into plain stores */
      for (int64_t j = 0; j < p.last; ++j) memcpy(dst + (size_t)j * 4, px + (size_t)off * 4, 4);
    } else {
      for (int64_t j = 0; j < p.last; ++j) memcpy(dst + (size_t)j * es, px + (size_t)off * es, es);
    }
  }
  return NULL;
}

/* ---- reductions ---------------------------------------------------------- */

typedef enum { CPU_RSUM, CPU_RMEAN, CPU_RSUMSQ } cpu_reduce_t;

/* x viewed as groups of adjacent axes, alternately kept and reduced. */
typedef struct {
  int n;
  int64_t size[CPU_MAX_RANK];
  int64_t stride[CPU_MAX_RANK]; /* in x */
  bool reduced[CPU_MAX_RANK];
  int64_t kept_count, reduced_count; /* elements of y; terms per element */
} cpu_rplan_t;

static void cpu_rplan(const ty_abi_value_t *x, const ty_abi_node_t *node, cpu_rplan_t *p) {
  bool red[CPU_MAX_RANK] = {false};
  const ty_abi_attr_t *a = ty_desc_node_attr(node, "axes");
  uint32_t count = a && a->kind == TY_ATTR_INTS ? a->count : 0;
  if (count == 0) {
    for (uint32_t d = 0; d < x->rank; ++d) red[d] = true;
  } else {
    for (uint32_t k = 0; k < count; ++k) {
      int64_t ax = a->ints[k] < 0 ? a->ints[k] + (int64_t)x->rank : a->ints[k];
      if (ax >= 0 && ax < (int64_t)x->rank) red[ax] = true; /* inference checked */
    }
  }
  p->n = 0;
  p->kept_count = 1;
  p->reduced_count = 1;
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (red[d]) p->reduced_count *= x->dims[d];
    else p->kept_count *= x->dims[d];
    if (x->dims[d] == 1) continue;
    if (p->n > 0 && p->reduced[p->n - 1] == red[d]) {
      p->size[p->n - 1] *= x->dims[d];
    } else {
      p->size[p->n] = x->dims[d];
      p->reduced[p->n] = red[d];
      ++p->n;
    }
  }
  int64_t s = 1;
  for (int g = p->n - 1; g >= 0; --g) {
    p->stride[g] = s;
    s *= p->size[g];
  }
}

/* Offset in x of reduced combination `r` (all reduced groups, or all but
 * the last when skip_last) and of kept combination `k` (likewise). */
static int64_t cpu_rplan_offset(const cpu_rplan_t *p, bool want_reduced, int64_t idx,
                                bool skip_last) {
  int64_t off = 0;
  for (int g = p->n - 1 - (skip_last ? 1 : 0); g >= 0; --g) {
    if (p->reduced[g] != want_reduced) continue;
    off += (idx % p->size[g]) * p->stride[g];
    idx /= p->size[g];
  }
  return off;
}

static void cpu_reduce_store(void *py, ty_dtype_t dt, int64_t i, double acc,
                             cpu_reduce_t kind, int64_t terms) {
  if (kind == CPU_RMEAN && terms > 0) acc /= (double)terms;
  cpu_store1(py, dt, i, (float)acc);
}

static ty_abi_status_t cpu_reduce(const cpu_node_ctx_t *c, cpu_reduce_t kind) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const void *px = cpu_in_data(c, 0);
  void *py = cpu_out_data(c, 0);
  const bool sq = kind == CPU_RSUMSQ;
  cpu_rplan_t p;
  cpu_rplan(x, c->node, &p);
  const int64_t outs = cpu_numel(y), terms = p.reduced_count;
  if (outs == 0) return NULL;
  if (terms == 0 || p.n == 0) { /* nothing to add up, or one term each */
    for (int64_t i = 0; i < outs; ++i) {
      double v = terms == 0 ? 0.0 : (double)cpu_load1(px, x->dtype, i);
      cpu_reduce_store(py, y->dtype, i, sq ? v * v : v, kind, terms);
    }
    return NULL;
  }
  const int64_t last = p.size[p.n - 1];
  const int64_t nch = (last + CPU_CHUNK - 1) / CPU_CHUNK;
  if (!p.reduced[p.n - 1]) {
    /* Innermost axes kept: accumulate whole row segments (dbias-like). Few
     * rows of output are split into narrower column blocks so every thread
     * gets one. */
    const int64_t outer = outs / last, combos = terms;
    int64_t width = CPU_CHUNK;
    while (width > 64 && outer * ((last + width - 1) / width) < (int64_t)c->threads) width /= 2;
    const int64_t nblk = (last + width - 1) / width, tasks = outer * nblk;
    const int nt = cpu_threads(c, outs * combos, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      double acc[CPU_CHUNK];
      float buf[CPU_CHUNK];
      int64_t o = t / nblk, j0 = (t % nblk) * width;
      int64_t len = last - j0 < width ? last - j0 : width;
      int64_t base = cpu_rplan_offset(&p, false, o, true) + j0;
      for (int64_t j = 0; j < len; ++j) acc[j] = 0.0;
      for (int64_t r = 0; r < combos; ++r) {
        const float *v = cpu_span_in(px, x->dtype, base + cpu_rplan_offset(&p, true, r, true),
                                     len, buf);
        if (sq) {
          for (int64_t j = 0; j < len; ++j) acc[j] += (double)v[j] * v[j];
        } else {
          for (int64_t j = 0; j < len; ++j) acc[j] += v[j];
        }
      }
      for (int64_t j = 0; j < len; ++j) {
        cpu_reduce_store(py, y->dtype, o * last + j0 + j, acc[j], kind, terms);
      }
    }
    return NULL;
  }
  /* Innermost axes reduced: each output sums contiguous runs of `last`,
   * its items (runs cut into CPU_CHUNK pieces) split into `parts` ranges
   * fixed by the problem alone, each summed in order, then the parts added
   * in order. Threads take (output, part) tasks, so the bits never depend on
   * the thread count (deterministic=1 asks for that; it costs nothing, so
   * it is done always). */
  const int64_t combos = terms / last, items = combos * nch;
  int64_t parts = terms / CPU_REDUCE_GRAIN;
  if (parts > CPU_MAX_PARTS) parts = CPU_MAX_PARTS;
  if (parts > items) parts = items;
  if (parts < 1) parts = 1;
  const int64_t tasks = outs * parts;
  const int nt = cpu_threads(c, outs * terms, CPU_REDUCE_GRAIN);
  double *partial = parts > 1 ? malloc((size_t)tasks * sizeof(double)) : NULL;
  if (parts > 1 && !partial) return cpu_oom(c);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / parts, q = t % parts;
    const int64_t i0 = items * q / parts, i1 = items * (q + 1) / parts;
    float buf[CPU_CHUNK];
    const int64_t base = cpu_rplan_offset(&p, false, o, false);
    double acc = 0.0;
    for (int64_t it = i0; it < i1; ++it) {
      int64_t j0 = (it % nch) * CPU_CHUNK;
      int64_t len = last - j0 < CPU_CHUNK ? last - j0 : CPU_CHUNK;
      const float *v = cpu_span_in(
          px, x->dtype, base + cpu_rplan_offset(&p, true, it / nch, true) + j0, len, buf);
      acc += sq ? cpu_sumsq_f64(v, len, 0.0) : cpu_sum_f64(v, len);
    }
    if (partial) partial[t] = acc;
    else cpu_reduce_store(py, y->dtype, o, acc, kind, terms);
  }
  if (partial) {
    for (int64_t o = 0; o < outs; ++o) {
      double acc = 0.0;
      for (int64_t q = 0; q < parts; ++q) acc += partial[o * parts + q];
      cpu_reduce_store(py, y->dtype, o, acc, kind, terms);
    }
    free(partial);
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_reduce_sum(const cpu_node_ctx_t *c) {
  return cpu_reduce(c, CPU_RSUM);
}
ty_abi_status_t cpu_kernel_reduce_mean(const cpu_node_ctx_t *c) {
  return cpu_reduce(c, CPU_RMEAN);
}
ty_abi_status_t cpu_kernel_reduce_sumsq(const cpu_node_ctx_t *c) {
  return cpu_reduce(c, CPU_RSUMSQ);
}
