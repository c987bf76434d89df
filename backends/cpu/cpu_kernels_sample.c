/* Token selection (issue 29): sample and top_logprobs.
 *
 *   sample(logits [N,V], params [N,7] f32, seeds [N,2] i64, history? [N,L])
 *     -> ids [N] i64, logprob [N] f32
 *   top_logprobs(logits [N,V]) attr k -> ids [N,k] i64, logprobs [N,k] f32
 *
 * Each row is widened to f64 and handed to the reference's row functions
 * (trainyard/ref_sample.h), which are the definition: penalties, greedy or
 * the temperature/top-k/top-p/min-p draw from the row's splitmix64 counter
 * stream, and log softmax over the raw logits. So the cpu plugin picks the
 * same token as the reference and the host sampler (models/sampler.c) bit
 * for bit, and a row's result depends on its own logits, params and seeds
 * only (batch invariance). Rows run in parallel, one OpenMP work item each.
 * Every row's params and history are checked before any output is written
 * (INVALID_ARGUMENT naming the node, with the reference's words). */
#include <stdlib.h>

#include "cpu_kernels.h"
#include "trainyard/ref_sample.h"
#include "trainyard/sample_params.h"

/* Row `i` of a [rows, n] float tensor in storage dtype `dt`, widened to f64
 * (exactly: every storage dtype is a subset of f64). */
static void cpu_row_f64(const void *src, ty_dtype_t dt, int64_t i, int64_t n, double *out) {
  const int64_t base = i * n;
  switch (dt) {
    case TY_DTYPE_BF16:
      for (int64_t v = 0; v < n; ++v) out[v] = ty_bf16_to_f32(((const uint16_t *)src)[base + v]);
      break;
    case TY_DTYPE_F16:
      for (int64_t v = 0; v < n; ++v) out[v] = ty_f16_to_f32(((const uint16_t *)src)[base + v]);
      break;
    default:
      for (int64_t v = 0; v < n; ++v) out[v] = ((const float *)src)[base + v];
      break;
  }
}

/* The reference's verdict on a row, as an error naming the node. */
static ty_abi_status_t cpu_sample_bad(const cpu_node_ctx_t *c, ty_status_t s) {
  const char *msg = ty_status_message(s);
  /* The reference's message starts with the op's name; the node says it. */
  if (strncmp(msg, "sample: ", 8) == 0) msg += 8;
  ty_abi_status_t e = ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "cpu: " CPU_NODE_FMT ": %s",
                                      CPU_NODE_ARGS(c), msg);
  ty_status_free(s);
  return e;
}

ty_abi_status_t cpu_kernel_sample(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *logits = cpu_in(c, 0), *hist = cpu_in(c, 3);
  const int64_t rows = logits->dims[0], vocab = logits->dims[1];
  const int64_t len = hist ? hist->dims[1] : 0;
  const float *params = cpu_in_data(c, 1);
  const int64_t *seeds = cpu_in_data(c, 2), *history = hist ? cpu_in_data(c, 3) : NULL;
  int64_t *ids = cpu_out_data(c, 0);
  float *logprob = cpu_out_data(c, 1);
  for (int64_t i = 0; i < rows; ++i) {
    double p[TY_SAMPLE_P_COUNT];
    for (int k = 0; k < TY_SAMPLE_P_COUNT; ++k) p[k] = params[i * TY_SAMPLE_P_COUNT + k];
    ty_status_t s = ty_ref_sample_check(p, vocab, history ? history + i * len : NULL, len, i,
                                        NULL);
    if (s) return cpu_sample_bad(c, s);
  }
  if (rows == 0) return NULL;
  /* Per thread: the widened row, then the reference's scratch, each
   * thread's part rounded up to a cache line (so every part starts aligned
   * for double whatever the scratch's size, and threads share no line). */
  const size_t per =
      ((size_t)vocab * sizeof(double) + ty_ref_sample_scratch_bytes(vocab) + 63) & ~(size_t)63;
  const int nt = cpu_threads(c, rows * vocab * 8, (int64_t)1 << 15);
  unsigned char *scratch = malloc((size_t)nt * per);
  if (!scratch) return cpu_oom(c);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t i = 0; i < rows; ++i) {
    unsigned char *mine = scratch + (size_t)cpu_thread_num() * per;
    double *x = (double *)(void *)mine, p[TY_SAMPLE_P_COUNT], lp;
    for (int k = 0; k < TY_SAMPLE_P_COUNT; ++k) p[k] = params[i * TY_SAMPLE_P_COUNT + k];
    cpu_row_f64(cpu_in_data(c, 0), logits->dtype, i, vocab, x);
    ids[i] = ty_ref_sample_row(x, vocab, p, (uint64_t)seeds[2 * i], seeds[2 * i + 1],
                               history ? history + i * len : NULL, len, x + vocab, &lp);
    logprob[i] = (float)lp;
  }
  free(scratch);
  return NULL;
}

ty_abi_status_t cpu_kernel_top_logprobs(const cpu_node_ctx_t *c) {
  const ty_abi_value_t *logits = cpu_in(c, 0), *out = cpu_out(c, 0);
  const int64_t rows = logits->dims[0], vocab = logits->dims[1], k = out->dims[1];
  int64_t *ids = cpu_out_data(c, 0);
  float *logprobs = cpu_out_data(c, 1);
  if (rows == 0) return NULL;
  /* Per thread: the widened row and the k results of the reference. */
  const size_t per = (size_t)(vocab + 2 * k);
  const int nt = cpu_threads(c, rows * vocab * 4, (int64_t)1 << 15);
  double *scratch = malloc((size_t)nt * per * sizeof(double));
  if (!scratch) return cpu_oom(c);
  int failed = 0; /* written atomically: no reduction clause (cpu_kernels_paged.c) */
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
  for (int64_t i = 0; i < rows; ++i) {
    double *x = scratch + (size_t)cpu_thread_num() * per, *top = x + vocab, *lp = top + k;
    cpu_row_f64(cpu_in_data(c, 0), logits->dtype, i, vocab, x);
    ty_status_t s = ty_ref_top_logprobs(x, 1, vocab, k, top, lp);
    if (s) { /* only out of memory: k was checked when the graph was built */
      ty_status_free(s);
#pragma omp atomic write
      failed = 1;
      continue;
    }
    for (int64_t j = 0; j < k; ++j) {
      ids[i * k + j] = (int64_t)top[j];
      logprobs[i * k + j] = (float)lp[j];
    }
  }
  free(scratch);
  return failed ? cpu_oom(c) : NULL;
}
