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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/common/abi_graph.h"
#include "backends/common/plugin_status.h"
#include "backends/cpu/cpu_internal.h"
#include "hal/half.h"

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
/* cpu_gemm_blocked.c: C[m,n] (+)= op(A) op(B), row-major f32 with leading
 * dimensions in elements, on up to `threads` threads (one inside a parallel
 * region). False when its packing buffers cannot be allocated. */
bool cpu_gemm_blocked(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                      bool accumulate, int threads);

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

/* cpu_kernels_loss.c */
ty_abi_status_t cpu_kernel_cross_entropy(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_cross_entropy_backward(const cpu_node_ctx_t *c);

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
ty_abi_status_t cpu_kernel_transpose(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_slice(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_slice_backward(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_concat(const cpu_node_ctx_t *c);

/* cpu_kernels_optim.c */
ty_abi_status_t cpu_kernel_adamw_update(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_sgd_update(const cpu_node_ctx_t *c);
ty_abi_status_t cpu_kernel_clip_by_global_norm(const cpu_node_ctx_t *c);

/* cpu_kernels_kv_cache.c */
ty_abi_status_t cpu_kernel_kv_cache_write(const cpu_node_ctx_t *c);

#endif /* TY_BACKENDS_CPU_CPU_KERNELS_H_ */
