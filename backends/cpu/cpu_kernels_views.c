/* Element movers and casts: reshape, transpose, slice, slice_backward,
 * concat (any dtype: they copy bytes) and cast.
 *
 *   reshape:        y = x (same bytes, new shape)
 *   transpose:      y[i_0..i_r] = x[i_{inv(0)}..]   i.e. y dims = x dims[perm]
 *   slice:          y[i] = x[starts + i]
 *   slice_backward: dx = 0; dx[starts + i] = dy[i]
 *   concat:         y along axis = x_1 | x_2 | ... | x_n
 *   all_reduce:     y = x (one process is world 1)
 *   cast:           float <-> float rounds to nearest even (f64 -> half goes
 *                   through f32); i32 <-> i64, refusing i64 values that do
 *                   not fit in i32.
 *
 * Axes of size 1 are dropped and axes that stay contiguous in both source
 * and destination are merged, so most transposes become row copies; a
 * transpose that swaps the two innermost remaining axes is copied in 32 x 32
 * tiles. All of these are exact: checked bit for bit against the reference. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define CPU_TILE 32

/* Parallel memcpy for big blocks. */
static void cpu_copy(const cpu_node_ctx_t *c, void *dst, const void *src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  const size_t block = (size_t)1 << 20;
  const int64_t blocks = (int64_t)((bytes + block - 1) / block);
  const int nt = cpu_threads(c, blocks, 2);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    size_t off = (size_t)b * block, len = bytes - off < block ? bytes - off : block;
    memcpy((unsigned char *)dst + off, (const unsigned char *)src + off, len);
  }
}

ty_abi_status_t cpu_kernel_reshape(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *y = cpu_out(c, 0);
  cpu_copy(c, cpu_out_data(c, 0), cpu_in_data(c, 0),
           (size_t)cpu_numel(y) * ty_desc_dtype_size(y->dtype));
  return NULL;
}

/* ---- all_reduce ---------------------------------------------------------- */

/* The executor runs one process, world 1, where the sum and the average over
 * the ranks are both the identity (ops/op_collective.c): y = x, bit for bit. */
ty_abi_status_t cpu_kernel_all_reduce(const cpu_node_ctx_t *c) {
  return cpu_kernel_reshape(c);
}

/* ---- all_gather, reduce_scatter ------------------------------------------ */

/* One part (world 1): the identity. Several parts never reach a kernel:
 * the executor's collective step (backends/common/host_executor.c) gathers
 * or scatters through the host's service instead. */
ty_abi_status_t cpu_kernel_gather_part(const cpu_node_ctx_t *c) {
  return cpu_kernel_reshape(c);
}

/* ---- transpose ----------------------------------------------------------- */

/* dst[i] = src[sum idx_a * stride_a] over a simplified shape, elements of
 * `es` bytes. */
static void cpu_gather(const cpu_node_ctx_t *c, int rank, const int64_t *dims,
                       const int64_t *stride, const unsigned char *src, unsigned char *dst,
                       size_t es) {
  const int64_t last = dims[rank - 1], ls = stride[rank - 1];
  int64_t rows = 1;
  for (int a = 0; a + 1 < rank; ++a) rows *= dims[a];
  /* Tiles when the innermost destination axis is strided in the source and
   * the next one is the source's innermost. */
  if (rank >= 2 && ls != 1 && stride[rank - 2] == 1 && last >= CPU_TILE &&
      dims[rank - 2] >= CPU_TILE) {
    const int64_t n2 = dims[rank - 2], outer = rows / n2;
    const int64_t ti = (n2 + CPU_TILE - 1) / CPU_TILE, tj = (last + CPU_TILE - 1) / CPU_TILE;
    const int nt = cpu_threads(c, outer * n2 * last, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t t = 0; t < outer * ti * tj; ++t) {
      int64_t o = t / (ti * tj), i0 = (t / tj) % ti * CPU_TILE, j0 = t % tj * CPU_TILE;
      int64_t base = 0, rem = o;
      for (int a = rank - 3; a >= 0; --a) {
        base += (rem % dims[a]) * stride[a];
        rem /= dims[a];
      }
      int64_t i1 = i0 + CPU_TILE < n2 ? i0 + CPU_TILE : n2;
      int64_t j1 = j0 + CPU_TILE < last ? j0 + CPU_TILE : last;
      for (int64_t i = i0; i < i1; ++i) {
        unsigned char *d = dst + (size_t)((o * n2 + i) * last) * es;
        for (int64_t j = j0; j < j1; ++j) {
          memcpy(d + (size_t)j * es, src + (size_t)(base + i + j * ls) * es, es);
        }
      }
    }
    return;
  }
  const int nt = cpu_threads(c, rows * last, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0, rem = r;
    for (int a = rank - 2; a >= 0; --a) {
      base += (rem % dims[a]) * stride[a];
      rem /= dims[a];
    }
    unsigned char *d = dst + (size_t)(r * last) * es;
    if (ls == 1) {
      memcpy(d, src + (size_t)base * es, (size_t)last * es);
    } else {
      for (int64_t j = 0; j < last; ++j) {
        memcpy(d + (size_t)j * es, src + (size_t)(base + j * ls) * es, es);
      }
    }
  }
}

/* Drops size-1 axes and merges axes contiguous in the source. */
static int cpu_simplify(int rank, const int64_t *dims, const int64_t *stride, int64_t *od,
                        int64_t *os) {
  int n = 0;
  for (int a = 0; a < rank; ++a) {
    if (dims[a] == 1) continue;
    if (n > 0 && os[n - 1] == stride[a] * dims[a]) {
      od[n - 1] *= dims[a];
      os[n - 1] = stride[a];
    } else {
      od[n] = dims[a];
      os[n] = stride[a];
      ++n;
    }
  }
  if (n == 0) {
    od[0] = 1;
    os[0] = 1;
    n = 1;
  }
  return n;
}

ty_abi_status_t cpu_kernel_transpose(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const ty_abi_attr_t *perm = ty_desc_node_attr(c->node, "perm");
  const int rank = (int)x->rank;
  if (cpu_numel(y) == 0) return NULL;
  int64_t xs[CPU_MAX_RANK], dims[CPU_MAX_RANK], stride[CPU_MAX_RANK];
  int64_t s = 1;
  for (int a = rank - 1; a >= 0; --a) {
    xs[a] = s;
    s *= x->dims[a];
  }
  for (int a = 0; a < rank; ++a) {
    int64_t p = perm && a < (int)perm->count ? perm->ints[a] : a;
    dims[a] = y->dims[a];
    stride[a] = xs[p];
  }
  int64_t od[CPU_MAX_RANK], os[CPU_MAX_RANK];
  int n = cpu_simplify(rank, dims, stride, od, os);
  cpu_gather(c, n, od, os, cpu_in_data(c, 0), cpu_out_data(c, 0),
             ty_desc_dtype_size(x->dtype));
  return NULL;
}

/* ---- slice --------------------------------------------------------------- */

/* Copies the block `sizes` at `starts` between a packed array and a full
 * array of shape `full`: packed -> full when scatter, else full -> packed. */
static void cpu_slice_copy(const cpu_node_ctx_t *c, int rank, const int64_t *full,
                           const int64_t *starts, const int64_t *sizes,
                           const unsigned char *src, unsigned char *dst, size_t es,
                           bool scatter) {
  int64_t fs[CPU_MAX_RANK], s = 1, base = 0;
  for (int a = rank - 1; a >= 0; --a) {
    fs[a] = s;
    base += starts[a] * s;
    s *= full[a];
  }
  int64_t count = 1;
  for (int a = 0; a < rank; ++a) count *= sizes[a];
  if (count == 0) return;
  const int64_t last = rank ? sizes[rank - 1] : 1, rows = count / last;
  const int nt = cpu_threads(c, count, 16384);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = base, rem = r;
    for (int a = rank - 2; a >= 0; --a) {
      off += (rem % sizes[a]) * fs[a];
      rem /= sizes[a];
    }
    size_t bytes = (size_t)last * es;
    if (scatter) {
      memcpy(dst + (size_t)off * es, src + (size_t)(r * last) * es, bytes);
    } else {
      memcpy(dst + (size_t)(r * last) * es, src + (size_t)off * es, bytes);
    }
  }
}

ty_abi_status_t cpu_kernel_slice(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const ty_abi_attr_t *starts = ty_desc_node_attr(c->node, "starts");
  int64_t st[CPU_MAX_RANK] = {0};
  for (uint32_t a = 0; a < x->rank && starts && a < starts->count; ++a) st[a] = starts->ints[a];
  cpu_slice_copy(c, (int)x->rank, x->dims, st, y->dims, cpu_in_data(c, 0),
                 cpu_out_data(c, 0), ty_desc_dtype_size(x->dtype), false);
  return NULL;
}

ty_abi_status_t cpu_kernel_slice_backward(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *dy = cpu_in(c, 0), *dx = cpu_out(c, 0);
  const ty_abi_attr_t *starts = ty_desc_node_attr(c->node, "starts");
  int64_t st[CPU_MAX_RANK] = {0};
  for (uint32_t a = 0; a < dx->rank && starts && a < starts->count; ++a) {
    st[a] = starts->ints[a];
  }
  const size_t es = ty_desc_dtype_size(dx->dtype);
  unsigned char *pdx = cpu_out_data(c, 0);
  const size_t bytes = (size_t)cpu_numel(dx) * es, block = (size_t)1 << 20;
  const int64_t blocks = (int64_t)((bytes + block - 1) / block);
  const int nt = cpu_threads(c, blocks, 2);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    size_t off = (size_t)b * block;
    memset(pdx + off, 0, bytes - off < block ? bytes - off : block);
  }
  cpu_slice_copy(c, (int)dx->rank, dx->dims, st, dy->dims, cpu_in_data(c, 0), pdx, es, true);
  return NULL;
}

/* ---- concat -------------------------------------------------------------- */

ty_abi_status_t cpu_kernel_concat(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *y = cpu_out(c, 0);
  const int rank = (int)y->rank;
  int64_t axis = ty_desc_node_attr_int(c->node, "axis", 0);
  if (axis < 0) axis += rank;
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < axis; ++a) outer *= y->dims[a];
  for (int a = (int)axis + 1; a < rank; ++a) inner *= y->dims[a];
  const size_t es = ty_desc_dtype_size(y->dtype);
  const int64_t inputs = c->node->input_count, total = y->dims[axis];
  unsigned char *py = cpu_out_data(c, 0);
  const int nt = cpu_threads(c, cpu_numel(y), 16384);
  /* at[k]: where input k starts along the axis. Inputs are few (a handful
   * of heads or layers); the op allows up to TY_OP_MAX_INPUTS. */
  int64_t *at = malloc((size_t)(inputs + 1) * sizeof(int64_t));
  if (!at) return cpu_oom(c);
  at[0] = 0;
  for (int64_t k = 0; k < inputs; ++k) at[k + 1] = at[k] + cpu_in(c, (uint32_t)k)->dims[axis];
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t t = 0; t < outer * inputs; ++t) {
    const int64_t o = t / inputs, k = t % inputs, len = at[k + 1] - at[k];
    const size_t block = (size_t)(len * inner) * es;
    const unsigned char *src = cpu_in_data(c, (uint32_t)k);
    if (block) {
      memcpy(py + (size_t)((o * total + at[k]) * inner) * es, src + (size_t)o * block, block);
    }
  }
  free(at);
  return NULL;
}

/* ---- cast ---------------------------------------------------------------- */

static bool cpu_is_float(ty_dtype_t d) {
  return d == TY_DTYPE_F32 || d == TY_DTYPE_BF16 || d == TY_DTYPE_F16 || d == TY_DTYPE_F64;
}

bool cpu_cast_supported(ty_dtype_t from, ty_dtype_t to) {
  if (from == to) return ty_desc_dtype_size(from) != 0;
  if (cpu_is_float(from) && cpu_is_float(to)) return true;
  return (from == TY_DTYPE_I32 && to == TY_DTYPE_I64) ||
         (from == TY_DTYPE_I64 && to == TY_DTYPE_I32);
}

ty_abi_status_t cpu_kernel_cast(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const void *px = cpu_in_data(c, 0);
  void *py = cpu_out_data(c, 0);
  const int64_t n = cpu_numel(x);
  if (x->dtype == y->dtype) {
    cpu_copy(c, py, px, (size_t)n * ty_desc_dtype_size(x->dtype));
    return NULL;
  }
  const int nt = cpu_threads(c, n, 16384);
  if (x->dtype == TY_DTYPE_I32) {
    const int32_t *s = px;
    int64_t *d = py;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
    return NULL;
  }
  if (x->dtype == TY_DTYPE_I64) {
    const int64_t *s = px;
    for (int64_t i = 0; i < n; ++i) { /* check all before writing any */
      if (s[i] < INT32_MIN || s[i] > INT32_MAX) {
        return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                               "cpu: " CPU_NODE_FMT ": cast i64 -> i32: element %lld = "
                               "%lld does not fit in i32",
                               CPU_NODE_ARGS(c), (long long)i, (long long)s[i]);
      }
    }
    int32_t *d = py;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = (int32_t)s[i];
    return NULL;
  }
  if (x->dtype == TY_DTYPE_F64 || y->dtype == TY_DTYPE_F64) {
    const bool from64 = x->dtype == TY_DTYPE_F64;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      if (from64) {
        cpu_store1(py, y->dtype, i, (float)((const double *)px)[i]);
      } else {
        ((double *)py)[i] = (double)cpu_load1(px, x->dtype, i);
      }
    }
    return NULL;
  }
  /* Between f32, bf16 and f16: widening to f32 is exact, so one rounding. */
  const int64_t chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float buf[CPU_CHUNK];
    const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    const float *v = cpu_span_in(px, x->dtype, off, len, buf);
    cpu_store_f32(py, y->dtype, off, len, v);
  }
  return NULL;
}
