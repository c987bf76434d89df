/* The cpu plugin's fast kernels: what the kernel families (cpu_kernels_*.c)
 * share — operand access, f32/bf16/f16 storage conversion, thread counts and
 * scratch — and each family's entry points, which cpu_kernels.c registers.
 *
 * Every kernel computes in f32 over f32, bf16 or f16 storage (loads widen,
 * stores round to nearest even as hal/half.h does), runs OpenMP-parallel with
 * at most ctx->threads threads, never touches memory outside its operands,
 * and reports data errors as INVALID_ARGUMENT naming the node. Kernels may be
 * called from one thread at a time per executable. */
#ifndef TY_BACKENDS_CPU_CPU_KERNELS_H_
#define TY_BACKENDS_CPU_CPU_KERNELS_H_

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trainyard/abi_graph.h"
#include "trainyard/plugin_status.h"
#include "cpu_internal.h"
#include "trainyard/half.h"

#ifdef _OPENMP
#include <omp.h>
static inline int cpu_thread_num(void) { return omp_get_thread_num(); }
#else
static inline int cpu_thread_num(void) { return 0; }
#endif

/* Elements a thread converts at a time into stack buffers. */
#define CPU_CHUNK 1024
/* Most ranks an op handles (hal/tensor.h allows 8). */
#define CPU_MAX_RANK 8
/* Most per-thread partial sums a deterministic reduction keeps. */
#define CPU_MAX_PARTS 256

/* ---- operands ----------------------------------------------------------- */

static inline const ty_abi_value_t *cpu_in(const cpu_node_ctx_t *c, uint32_t i) {
  if (i >= c->node->input_count || c->node->inputs[i] == UINT32_MAX) return NULL;
  return &c->graph->values[c->node->inputs[i]];
}

static inline const void *cpu_in_data(const cpu_node_ctx_t *c, uint32_t i) {
  if (i >= c->node->input_count || c->node->inputs[i] == UINT32_MAX) return NULL;
  return c->data[c->node->inputs[i]];
}

static inline const ty_abi_value_t *cpu_out(const cpu_node_ctx_t *c, uint32_t o) {
  return &c->graph->values[c->node->outputs[o]];
}

static inline void *cpu_out_data(const cpu_node_ctx_t *c, uint32_t o) {
  return c->data[c->node->outputs[o]];
}

static inline int64_t cpu_numel(const ty_abi_value_t *v) {
  int64_t n = 1;
  for (uint32_t i = 0; i < v->rank; ++i) n *= v->dims[i];
  return n;
}

/* Size of the last axis (1 for a scalar) and the rows of a [..., C] view. */
static inline int64_t cpu_last_dim(const ty_abi_value_t *v) {
  return v->rank ? v->dims[v->rank - 1] : 1;
}
static inline int64_t cpu_rows(const ty_abi_value_t *v) {
  int64_t c = cpu_last_dim(v);
  return c ? cpu_numel(v) / c : 0;
}

/* ---- storage ------------------------------------------------------------ */

static inline float cpu_load1(const void *p, ty_dtype_t dt, int64_t i) {
  switch (dt) {
    case TY_DTYPE_BF16: return ty_bf16_to_f32(((const uint16_t *)p)[i]);
    case TY_DTYPE_F16: return ty_f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

static inline void cpu_store1(void *p, ty_dtype_t dt, int64_t i, float x) {
  switch (dt) {
    case TY_DTYPE_BF16: ((uint16_t *)p)[i] = ty_f32_to_bf16(x); break;
    case TY_DTYPE_F16: ((uint16_t *)p)[i] = ty_f32_to_f16(x); break;
    default: ((float *)p)[i] = x; break;
  }
}

/* n elements from src[off..] (f32/bf16/f16) into dst as f32, and back. */
void cpu_load_f32(const void *src, ty_dtype_t dt, int64_t off, int64_t n, float *dst);
void cpu_store_f32(void *dst, ty_dtype_t dt, int64_t off, int64_t n, const float *src);

/* A read-only f32 view of src[off, off+n): the storage itself for f32,
 * else `scratch` (n floats) filled by conversion. */
static inline const float *cpu_span_in(const void *src, ty_dtype_t dt, int64_t off,
                                       int64_t n, float *scratch) {
  if (dt == TY_DTYPE_F32) return (const float *)src + off;
  cpu_load_f32(src, dt, off, n, scratch);
  return scratch;
}

/* Where to write f32 results for dst[off..]: the storage itself for f32,
 * else `scratch`; cpu_span_out_done() then rounds scratch into dst. */
static inline float *cpu_span_out(void *dst, ty_dtype_t dt, int64_t off, float *scratch) {
  return dt == TY_DTYPE_F32 ? (float *)dst + off : scratch;
}
static inline void cpu_span_out_done(void *dst, ty_dtype_t dt, int64_t off, int64_t n,
                                     const float *span) {
  if (dt != TY_DTYPE_F32) cpu_store_f32(dst, dt, off, n, span);
}

/* A whole tensor as f32. For f32 *out is the storage and *owned NULL; else
 * *owned is a malloc'ed converted copy (free it). False on out-of-memory. */
bool cpu_f32_whole(const void *src, ty_dtype_t dt, int64_t n, int threads,
                   const float **out, float **owned);

/* Element i of an i32/i64 tensor. */
static inline int64_t cpu_load_index(const void *p, ty_dtype_t dt, int64_t i) {
  return dt == TY_DTYPE_I32 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

/* ---- vectorisable row sums ----------------------------------------------- */
/* Always inlined, so that inside a CPU_MULTIVERSION copy they are compiled
 * for that copy's ISA. */
#define CPU_BODY static inline __attribute__((always_inline))

/* Eight (or sixteen) independent partial sums, added in a fixed order at the
 * end: the compiler can keep them in vector registers without reassociating
 * anything (no -ffast-math), and the result does not depend on threads. */

CPU_BODY double cpu_sum_f64(const float *x, int64_t n) {
  double p[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) p[l] += x[i + l];
  }
  for (; i < n; ++i) p[0] += x[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* sum (x - c)^2 */
CPU_BODY double cpu_sumsq_f64(const float *x, int64_t n, double c) {
  double p[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) p[l] += ((double)x[i + l] - c) * ((double)x[i + l] - c);
  }
  for (; i < n; ++i) p[0] += ((double)x[i] - c) * ((double)x[i] - c);
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

CPU_BODY double cpu_dot_f64(const float *a, const float *b, int64_t n) {
  double p[8] = {0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) p[l] += (double)a[i + l] * b[i + l];
  }
  for (; i < n; ++i) p[0] += (double)a[i] * b[i];
  return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

CPU_BODY float cpu_max_f32(const float *x, int64_t n) {
  float p[16];
  int64_t i = 0;
  for (int l = 0; l < 16; ++l) p[l] = x[0];
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) p[l] = x[i + l] > p[l] ? x[i + l] : p[l];
  }
  for (; i < n; ++i) p[0] = x[i] > p[0] ? x[i] : p[0];
  float m = p[0];
  for (int l = 1; l < 16; ++l) m = p[l] > m ? p[l] : m;
  return m;
}

/* c ? a : b as a bitwise blend: both sides are computed anyway, so the
 * loop stays branch-free and vectorises (a plain ?: on floats may not). */
CPU_BODY float cpu_select_f32(int c, float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, sizeof(ia));
  memcpy(&ib, &b, sizeof(ib));
  const int32_t m = -c, r = (ia & m) | (ib & ~m);
  float f;
  memcpy(&f, &r, sizeof(f));
  return f;
}

/* exp(x) in f32 that vectorises (libm's expf is a call per element): Cephes'
 * range reduction x = n ln2 + r, |r| <= ln2/2 (n capped at 127 so 2^n stays
 * finite; r then grows to ln2 at the very top), a degree-6 polynomial for
 * exp(r), times 2^n built in the exponent bits. Max relative error 2.4e-7
 * over [-87.3, 88.7] (measured against f64 exp on a 0.00037 grid); below
 * ln(FLT_MIN) it returns 0 (no subnormals), above ln(FLT_MAX) inf, and NaN
 * stays NaN. */
CPU_BODY float cpu_expf(float x) {
  const float hi = 88.72283935546875f, lo = -87.33654022216797f;
  float xc = cpu_select_f32(x < hi, x, hi);
  xc = cpu_select_f32(xc > lo, xc, lo);
  const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float n = (xc * 1.44269504088896341f + shift) - shift;
  n = cpu_select_f32(n < 127.0f, n, 127.0f);
  float r = xc - n * 0.693359375f; /* ln 2 in two parts (Cody-Waite) */
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = ((int32_t)n + 127) * (1 << 23);
  float scale;
  memcpy(&scale, &bits, sizeof(scale));
  float y = p * scale;
  y = cpu_select_f32(x > hi, INFINITY, y);
  y = cpu_select_f32(x < lo, 0.0f, y);
  return cpu_select_f32(x != x, x, y);
}

/* Hot row functions are compiled three times — for AVX-512, for AVX2+FMA
 * and for baseline x86-64 (what the rest of the plugin targets, so it loads
 * anywhere) — and the copy the CPU supports runs. Write the body once:
 *   CPU_BODY void name_body(params) { ... }
 *   CPU_MULTIVERSION(name, (params), (args))
 * which defines static void name(params). (GNU target_clones would do this
 * too, but clang 14 exports the resolvers of static clones.) */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CPU_TARGET_V4 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2,f16c")))
#define CPU_TARGET_V3 __attribute__((target("avx2,fma,bmi,bmi2,f16c")))
/* 4: AVX-512 (F, BW, DQ, VL), 3: AVX2 + FMA, 1: baseline. */
int cpu_isa_level(void);
#define CPU_MULTIVERSION(name, params, args)                  \
  CPU_TARGET_V4 static void name##_v4 params { name##_body args; } \
  CPU_TARGET_V3 static void name##_v3 params { name##_body args; } \
  static void name##_v1 params { name##_body args; }               \
  static void name params {                                        \
    switch (cpu_isa_level()) {                                     \
      case 4: name##_v4 args; break;                               \
      case 3: name##_v3 args; break;                               \
      default: name##_v1 args; break;                              \
    }                                                              \
  }
#else
#define CPU_MULTIVERSION(name, params, args) \
  static void name params { name##_body args; }
#endif

/* ---- threads and errors -------------------------------------------------- */

/* Threads worth starting for `work` units when one thread should get at
 * least `grain` of them: 1..ctx->threads. */
int cpu_threads(const cpu_node_ctx_t *c, int64_t work, int64_t grain);

/* RESOURCE_EXHAUSTED naming the node. */
ty_abi_status_t cpu_oom(const cpu_node_ctx_t *c);

/* The node, for messages: "node 3 (embedding)". */
#define CPU_NODE_FMT "node %u (%s)"
#define CPU_NODE_ARGS(c) (c)->node_index, (c)->node->op

/* ---- families ------------------------------------------------------------ */

/* cpu_kernels_matmul.c */
ty_abi_status_t cpu_kernel_matmul(const cpu_node_ctx_t *c);
/* C[m,n] (+)= op(A) op(B), row-major f32 with leading dimensions in
 * elements: oneDNN's sgemm, or cpu_gemm_blocked without oneDNN, when
 * `deterministic` (oneDNN picks kernels and K splits from M, N and the
 * threads, so a row's bits would depend on the batch; the blocked GEMM's do
 * not), or for decode's few rows where another path was the faster: on
 * AVX2 the streaming path for 2..CPU_GEMM_STREAM_MAX_M rows with trans_b
 * and 2..CPU_GEMM_STREAM_MAX_M_NT rows without it when K <= N; on AVX-512
 * for 2..CPU_GEMM_STREAM_MAX_M rows the streaming path without trans_b and
 * cpu_gemm_dot with it (trans_a unset).
 * `threads` threads outside a parallel region; the calling thread alone
 * inside one. False on out-of-memory or a oneDNN error. */
#define CPU_GEMM_STREAM_MAX_M 16
#define CPU_GEMM_STREAM_MAX_M_NT 8
bool cpu_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
              const float *b, int64_t ldb, float *c, int64_t ldc, bool accumulate, int threads,
              bool deterministic);
/* cpu_gemm_blocked.c: C[m,n] (+)= op(A) op(B), row-major f32 with leading
 * dimensions in elements, on up to `threads` threads (one inside a parallel
 * region). False when its packing buffers cannot be allocated.
 * Batch-invariant: each C element is f32 FMA over K in order, in slices of
 * CPU_KC anchored at k = 0 (each slice from 0, then added onto C), whatever
 * M, N, the element's tile and the thread count; zero-padded tile edges
 * never reach a stored element. */
#define CPU_KC 256

/* One query row of attention with the dense forward's arithmetic
 * (cpu_kernels_attention.c): S = q k^T over L gathered keys k, v [L, D]
 * (f32, rows of D), the softmax of the visible keys [lo, hi] (the others
 * weigh exactly 0), out = P v; P has room for L floats. With det, keys
 * gathered from a multiple of CPU_KC give the bits the same row has inside
 * a causal block of the attention op (paged_attention uses it, so a token
 * served from the paged KV cache and the same token in a forward pass agree
 * under deterministic=1). False when a GEMM fails (out of memory). */
bool cpu_att_row_gathered(const float *q, const float *k, const float *v, int64_t L, int64_t D,
                          int64_t lo, int64_t hi, float scale, bool det, float *P, float *out);
/* The attention's softmax of one row of raw scores sr[0, L): p = exp(scale s
 * - max) / sum over the visible keys [lo, hi] (the sum in f64), exactly 0
 * outside them; *out_lse = log sum exp(scale s). */
void cpu_att_softmax(float *sr, int64_t L, int64_t lo, int64_t hi, float scale,
                     float *out_lse);
bool cpu_gemm_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                      bool accumulate, int threads);
/* Which micro-kernel family the blocked GEMM runs (AUTO: the best the CPU
 * has) and which of its two paths (AUTO: streaming for M <= CPU_GEMM_SMALL_M,
 * else packed). Both paths give the same bits for every element on a given
 * family; cpu_gemm_blocked is cpu_gemm_blocked_with(AUTO, AUTO, ...). The
 * choices exist for the tests that hold that promise on each family. */
typedef enum {
  CPU_GEMM_ISA_AUTO = 0,
  CPU_GEMM_ISA_PLAIN,  /* plain C 4x8, mul then add */
  CPU_GEMM_ISA_AVX2,   /* AVX2+FMA 6x16 */
  CPU_GEMM_ISA_AVX512, /* AVX-512F 8x32 */
} cpu_gemm_isa_t;
typedef enum {
  CPU_GEMM_PATH_AUTO = 0,
  CPU_GEMM_PATH_PACKED, /* packs op(A) and op(B) blocks (Goto/BLIS) */
  CPU_GEMM_PATH_STREAM, /* small M: reads op(B) in place, no A packing */
} cpu_gemm_path_t;
#define CPU_GEMM_SMALL_M 64
/* Whether this CPU can run `isa` (AUTO: always). */
bool cpu_gemm_isa_supported(cpu_gemm_isa_t isa);
/* The family AUTO resolves to on this CPU. */
cpu_gemm_isa_t cpu_gemm_isa_best(void);
/* cpu_gemm_blocked on a chosen family and path; false as cpu_gemm_blocked,
 * or when `isa` is not supported here (the caller asks first). */
bool cpu_gemm_blocked_with(cpu_gemm_isa_t isa, cpu_gemm_path_t path, bool ta, bool tb,
                           int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *b, int64_t ldb, float *c, int64_t ldc, bool accumulate,
                           int threads);
/* cpu_gemm_dot.c: C[m,n] (+)= A[m,k] B[n,k]^T (B transposed, A not) as dot
 * products on AVX-512F, for cpu_gemm's few rows without deterministic=1:
 * a C element is 16 lane-wise FMA chains over k then their sum, not the
 * blocked GEMM's bits. `threads` threads outside a parallel region, the
 * calling thread inside one. False (C untouched) when the CPU lacks
 * AVX-512F: ask cpu_gemm_dot_supported first. */
bool cpu_gemm_dot_supported(void);
bool cpu_gemm_dot(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                  int64_t ldb, float *c, int64_t ldc, bool accumulate, int threads);

/* cpu_kernels_elementwise.c */
ty_abi_status_t cpu_kernel_add(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_sub(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_mul(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_div(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_scale(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_broadcast_to(const cpu_node_ctx_t *c); /* any dtype */
ty_abi_status_t cpu_kernel_reduce_sum(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_reduce_mean(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_reduce_sumsq(const cpu_node_ctx_t *c);

/* cpu_kernels_norm.c */
ty_abi_status_t cpu_kernel_layernorm(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_layernorm_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_rmsnorm(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_rmsnorm_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_activation.c */
ty_abi_status_t cpu_kernel_gelu(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_gelu_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_silu(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_silu_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_swiglu(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_swiglu_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_softmax(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_softmax_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_rope.c */
ty_abi_status_t cpu_kernel_rope(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_rope_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_attention.c */
ty_abi_status_t cpu_kernel_attention(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_attention_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_attention_merge.c */
ty_abi_status_t cpu_kernel_attention_merge(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_attention_merge_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_loss.c */
ty_abi_status_t cpu_kernel_cross_entropy(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_cross_entropy_backward(const cpu_node_ctx_t *c);
/* One row of logits: e = exp(z - max) (e must not be z), *out_sum = sum(e)
 * in f64. */
void cpu_ce_row_exp(const float *z, int64_t vocab, float *e, float *out_max, double *out_sum);
/* INVALID_ARGUMENT naming the node unless each of the `rows` targets of
 * input `targets_in` is below `vocab` (a negative target is ignored). */
ty_abi_status_t cpu_ce_check_targets(const cpu_node_ctx_t *c, uint32_t targets_in, int64_t rows,
                                     int64_t vocab);

/* cpu_kernels_linear_ce.c */
ty_abi_status_t cpu_kernel_linear_cross_entropy(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_linear_cross_entropy_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_vocab.c: the vocabulary-parallel embedding and loss */
ty_abi_status_t cpu_kernel_vocab_embedding(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_embedding_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_max(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_max_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_ce_sums(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_ce_sums_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_ce_loss(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_vocab_ce_loss_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_embedding.c */
ty_abi_status_t cpu_kernel_embedding(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_embedding_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_dropout.c */
ty_abi_status_t cpu_kernel_dropout(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_dropout_backward(const cpu_node_ctx_t *c);

/* cpu_kernels_views.c (element movers: any dtype) and cast */
ty_abi_status_t cpu_kernel_cast(const cpu_node_ctx_t *c);
bool cpu_cast_supported(ty_dtype_t from, ty_dtype_t to);
ty_abi_status_t cpu_kernel_reshape(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_all_reduce(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_gather_part(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_transpose(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_slice(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_slice_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_concat(const cpu_node_ctx_t *c);

/* cpu_kernels_optim.c */
ty_abi_status_t cpu_kernel_adamw_update(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_sgd_update(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_clip_by_global_norm(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_adafactor_update(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_global_norm_scale(const cpu_node_ctx_t *c);

/* cpu_kernels_kv_cache.c */
ty_abi_status_t cpu_kernel_kv_cache_write(const cpu_node_ctx_t *c);

/* cpu_kernels_paged.c */
ty_abi_status_t cpu_kernel_paged_kv_write(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_paged_attention(const cpu_node_ctx_t *c);

/* cpu_kernels_sample.c */
ty_abi_status_t cpu_kernel_sample(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_top_logprobs(const cpu_node_ctx_t *c);

#endif /* TY_BACKENDS_CPU_CPU_KERNELS_H_ */
