/* Dropout, forward and backward (the same mask applied to dy).
 *
 *   keep_i = philox_u24(seed, step * 2^16 + stream, i) >= floor(p 2^24)
 *   y_i    = keep_i ? x_i / (1 - p) : 0
 *
 * The mask is hal/philox.h's stream bit for bit; one Philox4x32-10 call
 * decides four consecutive elements, and chunks of whole groups of four are
 * spread over threads. The kept value is x / (1 - p) divided in f64 and
 * rounded once, exactly as the reference rounds it, so outputs are
 * bit-identical to the reference for every storage dtype (checked exactly). */
#include <stdint.h>

#include "cpu_kernels.h"
#include "trainyard/philox.h"

/* Context parallel's numbering (attributes seq_len, seq_starts; docs/ops.md
 * "Dropout"): x [A, n, inner...] is `count` equal slices of rows of a
 * [A, seq_len, inner] tensor, and element (a, t, r) draws the bit of its
 * index there. One row of `inner` elements is contiguous in both, so each
 * row walks its Philox groups once (a row may start mid-group). */
static ty_abi_status_t cpu_dropout_numbered(const cpu_node_ctx_t *c, const ty_abi_attr_t *st,
                                           int64_t seq_len, uint64_t seed, uint64_t offset,
                                           uint32_t threshold, double keep_scale) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  if (!st || st->kind != TY_ATTR_INTS || st->count == 0 || x->rank < 2 ||
      x->dims[1] % (int64_t)st->count != 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: " CPU_NODE_FMT ": seq_len needs seq_starts splitting axis 1 "
                           "of x (rank >= 2) into equal slices",
                           CPU_NODE_ARGS(c));
  }
  const void *px = cpu_in_data(c, 0);
  void *py = cpu_out_data(c, 0);
  const int64_t A = x->dims[0], local = x->dims[1], m = local / (int64_t)st->count;
  int64_t inner = 1;
  for (uint32_t d = 2; d < x->rank; ++d) inner *= x->dims[d];
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const int64_t rows = A * local;
  const int nt = cpu_threads(c, rows * inner, 4096);
  const int64_t span = inner < CPU_CHUNK ? inner : CPU_CHUNK;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t a = row / local, t = row % local;
    const uint64_t first =
        (uint64_t)((a * seq_len + st->ints[t / m] + t % m) * inner); /* its global index */
    for (int64_t off = 0; off < inner; off += span) {
      float sx[CPU_CHUNK], sy[CPU_CHUNK];
      const int64_t len = inner - off < span ? inner - off : span, at = row * inner + off;
      const float *in = cpu_span_in(px, x->dtype, at, len, sx);
      float *out = cpu_span_out(py, y->dtype, at, sy);
      uint64_t group = UINT64_MAX;
      uint32_t r[4] = {0, 0, 0, 0};
      for (int64_t j = 0; j < len; ++j) {
        const uint64_t i = first + (uint64_t)(off + j);
        if (i / 4u != group) {
          group = i / 4u;
          const uint32_t ctr[4] = {(uint32_t)group, (uint32_t)(group >> 32), (uint32_t)offset,
                                   (uint32_t)(offset >> 32)};
          ty_philox4x32_10(ctr, key, r);
        }
        out[j] = (r[i % 4u] >> 8) >= threshold ? (float)((double)in[j] / keep_scale) : 0.0f;
      }
      cpu_span_out_done(py, y->dtype, at, len, out);
    }
  }
  return NULL;
}

static ty_abi_status_t cpu_dropout(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *x = cpu_in(c, 0), *y = cpu_out(c, 0);
  const void *px = cpu_in_data(c, 0);
  const int64_t *rng = cpu_in_data(c, 1);
  void *py = cpu_out_data(c, 0);
  const double p = ty_desc_node_attr_float(c->node, "p", 0.0);
  if (!(p >= 0.0 && p < 1.0)) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                           "cpu: " CPU_NODE_FMT ": probability %g is outside [0, 1)",
                           CPU_NODE_ARGS(c), p);
  }
  const uint64_t seed = (uint64_t)rng[0];
  const uint64_t offset =
      (uint64_t)rng[1] * 65536u + (uint64_t)ty_desc_node_attr_int(c->node, "stream", 0);
  const uint32_t threshold = ty_dropout_threshold(p);
  const double keep_scale = 1.0 - p;
  const int64_t seq_len = ty_desc_node_attr_int(c->node, "seq_len", 0);
  if (seq_len > 0) {
    return cpu_dropout_numbered(c, ty_desc_node_attr(c->node, "seq_starts"), seq_len, seed,
                                offset, threshold, keep_scale);
  }
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  const int64_t n = cpu_numel(x), chunks = (n + CPU_CHUNK - 1) / CPU_CHUNK;
  const int nt = cpu_threads(c, n, 4096);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    float sx[CPU_CHUNK], sy[CPU_CHUNK];
    const int64_t off = ch * CPU_CHUNK, len = n - off < CPU_CHUNK ? n - off : CPU_CHUNK;
    const float *a = cpu_span_in(px, x->dtype, off, len, sx);
    float *b = cpu_span_out(py, y->dtype, off, sy);
    /* CPU_CHUNK is a multiple of 4, so groups never straddle chunks. */
    for (int64_t j = 0; j < len; j += 4) {
      const uint64_t g = (uint64_t)(off + j) / 4u;
      const uint32_t ctr[4] = {(uint32_t)g, (uint32_t)(g >> 32), (uint32_t)offset,
                               (uint32_t)(offset >> 32)};
      uint32_t r[4];
      ty_philox4x32_10(ctr, key, r);
      for (int64_t l = 0; l < 4 && j + l < len; ++l) {
        b[j + l] = (r[l] >> 8) >= threshold ? (float)((double)a[j + l] / keep_scale) : 0.0f;
      }
    }
    cpu_span_out_done(py, y->dtype, off, len, b);
  }
  return NULL;
}

ty_abi_status_t cpu_kernel_dropout(const cpu_node_ctx_t *c) { return cpu_dropout(c); }
ty_abi_status_t cpu_kernel_dropout_backward(const cpu_node_ctx_t *c) {
  return cpu_dropout(c);
}
