/* The fused LM head + cross-entropy (linear_cross_entropy), forward and
 * backward, `chunk` rows at a time so that the [rows, V] logits never
 * exist: per chunk one GEMM forms z = h W^T (n x V), then each row is the
 * cross-entropy kernel's row function (cpu_kernels_loss.c):
 *
 *   forward:  lse_n = m + log sum_v exp(z_nv - m),  loss_n = (m - z_nt) + log(sum)
 *   backward: dz = dloss_n (exp(z_n - lse_n) - onehot(t_n)) from the saved
 *             lse, dh_chunk = dz W, dW += dz^T h_chunk
 *
 * Rows of a chunk run in parallel; the GEMMs use every thread. The forward
 * rows are the unfused path's arithmetic (matmul, then cross_entropy), so
 * the loss matches it to the rounding of the GEMM's blocking; the backward
 * takes the saved lse instead of summing each row again, and dW is summed
 * over chunks instead of in one GEMM. The chunk's logits (and, for bf16/f16, f32
 * copies of h and W) are scratch counted by the host meter. Checked against
 * the f64 reference at NMSE < 1e-9 (f32). */
#include <math.h>
#include <string.h>

#include "trainyard/host_meter.h"
#include "cpu_kernels.h"

/* Rows per chunk: the attribute, or every row when it is 0 or larger. */
static int64_t cpu_lce_chunk(const cpu_node_ctx_t *c, int64_t rows) {
  int64_t chunk = ty_desc_node_attr_int(c->node, "chunk", 0);
  return chunk <= 0 || chunk > rows ? (rows > 0 ? rows : 1) : chunk;
}

/* f32 views of h and W (copies for bf16/f16, counted by the host meter). */
typedef struct {
  const float *h, *w;
  float *h_owned, *w_owned;
} cpu_lce_views_t;

static float *cpu_lce_convert(const void *src, ty_dtype_t dt, int64_t n) {
  float *buf = ty_host_mem_alloc((uint64_t)(n > 0 ? n : 1) * sizeof(float));
  if (buf) cpu_load_f32(src, dt, 0, n, buf);
  return buf;
}

static bool cpu_lce_views(const cpu_node_ctx_t *c, uint32_t at, cpu_lce_views_t *v) {
  memset(v, 0, sizeof(*v));
  const ty_abi_value_t *hv = cpu_in(c, at), *wv = cpu_in(c, at + 1);
  const void *ph = cpu_in_data(c, at), *pw = cpu_in_data(c, at + 1);
  if (hv->dtype == TY_DTYPE_F32) {
    v->h = ph;
  } else if (!(v->h = v->h_owned = cpu_lce_convert(ph, hv->dtype, cpu_numel(hv)))) {
    return false;
  }
  if (wv->dtype == TY_DTYPE_F32) {
    v->w = pw;
  } else if (!(v->w = v->w_owned = cpu_lce_convert(pw, wv->dtype, cpu_numel(wv)))) {
    return false;
  }
  return true;
}

static void cpu_lce_views_free(cpu_lce_views_t *v) {
  ty_host_mem_free(v->h_owned);
  ty_host_mem_free(v->w_owned);
}

ty_abi_status_t cpu_kernel_linear_cross_entropy(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *hv = cpu_in(c, 0), *wv = cpu_in(c, 1), *tv = cpu_in(c, 2);
  const void *pt = cpu_in_data(c, 2);
  float *loss = cpu_out_data(c, 0), *lse = cpu_out_data(c, 1);
  const int64_t channels = cpu_last_dim(hv), rows = cpu_rows(hv), vocab = wv->dims[0];
  ty_abi_status_t st = cpu_ce_check_targets(c, 2, rows, vocab);
  if (st || rows == 0) return st;
  const int64_t chunk = cpu_lce_chunk(c, rows);
  const int nt = cpu_threads(c, chunk * vocab, 16384);
  cpu_lce_views_t v;
  const size_t v1 = (size_t)(vocab > 0 ? vocab : 1);
  float *z = ty_host_mem_alloc((uint64_t)((size_t)chunk * v1 + (size_t)nt * v1) * sizeof(float));
  if (!z || !cpu_lce_views(c, 0, &v)) {
    ty_host_mem_free(z);
    cpu_lce_views_free(&v);
    return cpu_oom(c);
  }
  float *scratch = z + (size_t)chunk * v1;
  for (int64_t first = 0; first < rows && !st; first += chunk) {
    const int64_t n = rows - first < chunk ? rows - first : chunk;
    if (!cpu_gemm(false, true, n, vocab, channels, v.h + first * channels, channels, v.w,
                  channels, z, vocab, false, c->threads, c->deterministic)) {
      st = cpu_oom(c);
      break;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = cpu_load_index(pt, tv->dtype, first + r);
      if (t < 0 || vocab == 0) {
        loss[first + r] = lse[first + r] = 0.0f;
        continue;
      }
      const float *zr = z + (size_t)r * v1;
      float m;
      double sum;
      cpu_ce_row_exp(zr, vocab, scratch + (size_t)cpu_thread_num() * v1, &m, &sum);
      loss[first + r] = (float)((double)(m - zr[t]) + log(sum));
      lse[first + r] = (float)((double)m + log(sum));
    }
  }
  ty_host_mem_free(z);
  cpu_lce_views_free(&v);
  return st;
}

/* z <- g (exp(z - lse) - onehot(t)), in place. */
CPU_BODY void cpu_lce_row_backward_body(float *z, int64_t vocab, int64_t t, float g, float lse) {
  const float zt = z[t];
  for (int64_t j = 0; j < vocab; ++j) z[j] = g * cpu_expf(z[j] - lse);
  z[t] = (float)((double)g * ((double)cpu_expf(zt - lse) - 1.0));
}
CPU_MULTIVERSION(cpu_lce_row_backward, (float *z, int64_t vocab, int64_t t, float g, float lse),
                 (z, vocab, t, g, lse))

ty_abi_status_t cpu_kernel_linear_cross_entropy_backward(const cpu_node_ctx_t *c) {
  /* dloss, h, w, targets, lse -> dh, dw */
  const float *dloss = cpu_in_data(c, 0);
  const ty_abi_value_t *hv = cpu_in(c, 1), *wv = cpu_in(c, 2), *tv = cpu_in(c, 3);
  const ty_abi_value_t *dhv = cpu_out(c, 0), *dwv = cpu_out(c, 1);
  const void *pt = cpu_in_data(c, 3);
  const int64_t channels = cpu_last_dim(hv), rows = cpu_rows(hv), vocab = wv->dims[0];
  ty_abi_status_t st = cpu_ce_check_targets(c, 3, rows, vocab);
  if (st) return st;
  const int64_t chunk = cpu_lce_chunk(c, rows);
  const size_t v1 = (size_t)(vocab > 0 ? vocab : 1), c1 = (size_t)(channels > 0 ? channels : 1);
  const bool dh_f32 = dhv->dtype == TY_DTYPE_F32, dw_f32 = dwv->dtype == TY_DTYPE_F32;
  /* The chunk's logits (then their gradient), and f32 staging for a dh
   * chunk and the whole dW when those are stored in bf16/f16. */
  uint64_t floats = (uint64_t)chunk * v1 + (dh_f32 ? 0 : (uint64_t)chunk * c1) +
                    (dw_f32 ? 0 : (uint64_t)v1 * c1);
  const int nt = cpu_threads(c, chunk * vocab, 16384);
  float *z = ty_host_mem_alloc(floats * sizeof(float));
  cpu_lce_views_t v;
  if (!z || !cpu_lce_views(c, 1, &v)) {
    ty_host_mem_free(z);
    cpu_lce_views_free(&v);
    return cpu_oom(c);
  }
  float *dh_stage = dh_f32 ? NULL : z + (size_t)chunk * v1;
  float *dw = dw_f32 ? cpu_out_data(c, 1) : z + (size_t)chunk * v1 + (dh_f32 ? 0 : chunk * c1);
  const float *lse = cpu_in_data(c, 4);
  if (rows == 0) memset(dw, 0, v1 * c1 * sizeof(float));
  for (int64_t first = 0; first < rows && !st; first += chunk) {
    const int64_t n = rows - first < chunk ? rows - first : chunk;
    const float *hc = v.h + first * channels;
    if (!cpu_gemm(false, true, n, vocab, channels, hc, channels, v.w, channels, z, vocab, false,
                  c->threads, c->deterministic)) {
      st = cpu_oom(c);
      break;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      float *zr = z + (size_t)r * v1;
      const int64_t t = cpu_load_index(pt, tv->dtype, first + r);
      if (t < 0) {
        memset(zr, 0, v1 * sizeof(float));
      } else {
        cpu_lce_row_backward(zr, vocab, t, dloss[first + r], lse[first + r]);
      }
    }
    float *dh = dh_f32 ? (float *)cpu_out_data(c, 0) + first * channels : dh_stage;
    if (!cpu_gemm(false, false, n, channels, vocab, z, vocab, v.w, channels, dh, channels, false,
                  c->threads, c->deterministic) ||
        !cpu_gemm(true, false, vocab, channels, n, z, vocab, hc, channels, dw, channels,
                  first > 0, c->threads, c->deterministic)) {
      st = cpu_oom(c);
      break;
    }
    if (!dh_f32) cpu_store_f32(cpu_out_data(c, 0), dhv->dtype, first * channels, n * channels, dh);
  }
  if (!st && !dw_f32) cpu_store_f32(cpu_out_data(c, 1), dwv->dtype, 0, vocab * channels, dw);
  ty_host_mem_free(z);
  cpu_lce_views_free(&v);
  return st;
}
