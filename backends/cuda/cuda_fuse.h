/* Node fusion in the cuda executor: a few neighbour patterns of the
 * training graphs whose separate kernels would each read and write whole
 * activations, done by one command instead (cuda_fuse.c finds them; the
 * op builders of matmul and the norms emit them).
 *
 *   GEMM      matmul -> cast(f32) [-> add(r, .)]   cuBLASLt writes the f32
 *             result, adding r (beta = 1): the residual stream's adds of a
 *             bf16-mixed model; matmul -> add(r, .) in one dtype likewise
 *             (the input gradient of q, k and v summed as it is made);
 *             matmul -> gelu: cuBLASLt's GELU epilogue (the tanh form, the
 *             op's) writes gelu's output and the product as its aux output;
 *             matmul -> gelu_backward(., x): its DGELU epilogue.
 *             A weight gradient's GEMM (dW = op(a) op(b) summing over the
 *             rows) also writes the bias gradient, the reduce_sum of one
 *             operand over those rows [-> cast(f32)], as cuBLASLt's BGRADA/
 *             BGRADB epilogue (16-bit operands; a second read of the
 *             output gradient saved).
 *   NORM      layernorm/rmsnorm -> cast           the norm writes the cast's
 *             dtype (the bf16 input of the next matmul).
 *   NORM_BWD  [cast(f32)] -> norm backward -> [add(r, .) [-> cast]]  one
 *             pass reads the bf16 gradient, adds the residual gradient and
 *             writes the sum in f32 and in bf16.
 *   SLICES    slices of one input along its last axis (q, k and v of a fused
 *             projection: a serving step's three copies): the first slice's
 *             launch writes them all (views.cu, ty_slice_rows), an exact
 *             copy like the separate ones.
 *   KV_PAIR   paged_kv_write of a layer's keys, then of its values (the same
 *             slots, shapes and dtype): one launch writes both pools.
 *   GEMV_GROUP  two or three few-row matmuls of one input by [N, K] weights
 *             (a decode step's q, k and v projections; gate and up), when
 *             the GEMV path runs them (not deterministic): one gemv_group
 *             launch makes all the products; with gate and up followed by
 *             swiglu, it writes swiglu's output instead of theirs.
 *   ROPE_PAIR rope of a layer's queries, then of its keys (the same
 *             positions, frequencies, T and head size; forward or both
 *             backward): one launch rotates both.
 *   CLIP_ADAMW  clip_by_global_norm whose clipped gradients are read only by
 *             the adamw_update nodes right after it (one multi-tensor
 *             launch's worth): the clip leaves its sum of squares and the
 *             coefficient, and the optimizer's launch multiplies each
 *             gradient by the coefficient as it reads it, rounded as the
 *             clip would have stored it, so the clipped gradients are never
 *             written (the same bits as unfused; one read and one write of
 *             every gradient saved).
 *
 * A fused result is the unfused one up to rounding: the matmul's product
 * is no longer rounded to bf16 before the f32 add (it is more exact), the
 * rest is the same arithmetic. TRAINYARD_CUDA_FUSE=0 turns fusion off (to
 * compare, or to bisect a suspected fusion bug). The memory planner is told
 * where each fused node's work runs (ty_memory_plan_build_fused). */
#ifndef TY_BACKENDS_CUDA_CUDA_FUSE_H_
#define TY_BACKENDS_CUDA_CUDA_FUSE_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/abi_graph.h"

/* A GELU epilogue of a GEMM (cuda_gemm.c): GELU_AUX writes c = gelu(product
 * + bias) and the pre-activation into aux; DGELU writes c = product *
 * gelu'(aux). */
typedef enum ty_cu_gemm_epi_e {
  TY_CU_EPI_NONE = 0,
  TY_CU_EPI_GELU_AUX = 1,
  TY_CU_EPI_DGELU = 2,
} ty_cu_gemm_epi_t;

typedef enum ty_cu_fuse_kind_e {
  TY_CU_FUSE_NONE = 0,
  TY_CU_FUSE_GEMM,
  TY_CU_FUSE_NORM,
  TY_CU_FUSE_NORM_BWD,
  TY_CU_FUSE_SLICES,
  TY_CU_FUSE_KV_PAIR,
  TY_CU_FUSE_GEMV_GROUP,
  TY_CU_FUSE_ROPE_PAIR,
  TY_CU_FUSE_CLIP_ADAMW,
  TY_CU_FUSE_KIND_COUNT
} ty_cu_fuse_kind_t;

/* The most slices one SLICES launch writes (the head's and 3 more). */
#define TY_CU_FUSE_MAX_SLICES 4

/* What the head node of a fusion writes and reads beyond its own operands
 * (values; UINT32_MAX = none / the node's own). */
typedef struct ty_cu_fuse_t {
  ty_cu_fuse_kind_t kind;
  uint32_t out;    /* written instead of the head's output 0 (GEMM: the cast's or the
                      add's output; NORM: the cast's; NORM_BWD: the add's) */
  uint32_t addend; /* GEMM: C of beta = 1; NORM_BWD: the residual gradient */
  uint32_t bias;   /* GEMM with a cast: the f32 bias (the bias cast's input) */
  uint32_t dy;     /* NORM_BWD: the gradient as stored before the cast */
  uint32_t out2;   /* NORM_BWD: the cast of the sum */
  uint32_t aux;    /* GEMM with gelu: the pre-activation (written: the head's own output;
                      read by gelu_backward: its x) */
  ty_cu_gemm_epi_t epilogue; /* GEMM */
  uint32_t bgrad;            /* GEMM: the bias gradient written by the epilogue (a
                                reduce_sum's output, or its cast's) */
  uint32_t bgrad_of;         /* GEMM with bgrad: the operand summed (0: a, 1: b) */
  uint32_t slices[TY_CU_FUSE_MAX_SLICES - 1]; /* SLICES: the other slice nodes;
                                                 KV_PAIR: [0] the values' write;
                                                 GEMV_GROUP: the other matmuls;
                                                 ROPE_PAIR: [0] the keys' rope;
                                                 CLIP_ADAMW: [0] the first adamw
                                                 node (the clip's next) */
  uint32_t slice_count;                       /* SLICES: how many (KV_PAIR: 1;
                                                 GEMV_GROUP: 1 or 2; CLIP_ADAMW:
                                                 the adamw nodes, consecutive) */
  uint32_t swiglu;                            /* GEMV_GROUP: the swiglu node folded
                                                 in (out: its output), or UINT32_MAX */
} ty_cu_fuse_t;

/* Finds the fusions of `g` (node order, each node in at most one): for the
 * head n of each, fuse[n]; for every node m, run_at[m] = the node whose
 * command does m's work (m itself when not fused). `row_stride` (per
 * value, 0 = dense; may be NULL) keeps padded values out. With `enabled`
 * false every node runs on its own; `gemv`: the few-row GEMV path runs
 * (cuda_gemm.h ty_cu_gemv_on), which GEMV_GROUP needs. */
void ty_cu_fuse_plan(const ty_owned_graph_t *og, const int64_t *row_stride, bool enabled,
                     bool gemv, ty_cu_fuse_t *fuse, uint32_t *run_at);

/* Whether TRAINYARD_CUDA_FUSE leaves fusion on (unset, or not "0"). */
bool ty_cu_fuse_enabled(void);

/* The loss gradient in place. cross_entropy_backward (dloss, logits,
 * targets -> dlogits) reads each logit once before writing its gradient,
 * so dlogits may take the logits' bytes when nothing reads the logits
 * afterwards (the memory planner decides that: ty_memory_plan_opts_t),
 * and when a cross_entropy forward on the same logits and targets wrote
 * its f32 per-row loss earlier, the backward takes each row's logsumexp
 * from it (lse = loss + z_t: one read of the row instead of two). For each
 * such node n: reuse_input[n] = 1 (the logits) when the logits and dlogits
 * share dtype and row stride (`row_stride` per value, 0 = dense; may be
 * NULL), and extra_read[n] = the forward's loss; every other entry is -1 /
 * UINT32_MAX, as all are with `enabled` false. run_at: the fusions'
 * (ty_cu_fuse_plan). */
void ty_cu_xent_plan(const ty_owned_graph_t *og, const int64_t *row_stride,
                     const uint32_t *run_at, bool enabled, int32_t *reuse_input,
                     uint32_t *extra_read);

/* Whether the loss gradient may go in place: fusion on, and
 * TRAINYARD_CUDA_LOSS_IN_PLACE unset or not "0" (to compare memory and
 * results with it off). */
bool ty_cu_loss_in_place_enabled(void);

/* Weight copies kept by the optimizer. A bf16-mixed train step casts each
 * f32 weight to bf16 where a matmul reads it, in the forward and again in
 * the backward (graph/ir/autodiff.h recast_states): every step reads the
 * f32 weights twice and writes their bf16 copies twice, though the weights
 * change only in the optimizer at the step's end. Instead the executor
 * keeps one bf16 copy of such a weight in memory of its own across runs,
 * every cast of the weight reads that copy (no kernel), and the AdamW
 * update writes the copy of the value it writes (kernels/optim.cu,
 * ty_adamw_multi: the same rounding as the cast, so the same bits). The
 * copy is made by the first cast's kernel whenever it may be stale: the
 * first run, and any run after something else wrote the weight's buffer
 * (a checkpoint load, a broadcast; cuda_weights.c tracks each buffer's
 * write generation).
 *
 * A parameter p qualifies when it is an f32 STATE (not host-resident)
 * whose one state update is output 0 of an adamw_update node A that reads
 * p itself and runs on the multi-tensor kernel's operands (f32 param,
 * gradient and moments), and every cast of p to bf16 is an unfused,
 * unpadded-or-equally-padded intermediate (not an output, not a state
 * update) made before A. A ZeRO-1 rank that updates a slice of p, or a
 * fused optimizer that updates p before its backward cast, keeps the
 * casts as they are. In a micro-step of gradient accumulation (a graph
 * that updates a state by an add reading it, acc + grad, and does not
 * update p; its optimizer runs in a graph of its own) the same holds with
 * no A: the copy lasts until something else (that optimizer graph's run)
 * writes p's buffer, and is then made again by the first cast's kernel:
 * one cast pass per optimizer step instead of two per micro-step. Evaluation and serving graphs keep their casts: a
 * copy in each of their executables (a serving engine has one per batch
 * bucket) would cost its memory for little.
 *
 * Fills, per value, copy_of[v] = the copy (0..count-1) a cast output v
 * reads (UINT32_MAX: none); per node, cast_role[n] = 1 for the cast whose
 * kernel makes copy (the first of its parameter), 2 for any other cast of
 * the same parameter (builds nothing), 0 otherwise; per copy k,
 * params[k] (the parameter) and values[k] (its first cast's output).
 * `fuse` and `run_at` are ty_cu_fuse_plan's. Returns the count (0 when
 * `enabled` is false). */
uint32_t ty_cu_weight_copy_plan(const ty_owned_graph_t *og, const ty_cu_fuse_t *fuse,
                                const uint32_t *run_at, bool enabled, uint32_t *copy_of,
                                uint8_t *cast_role, uint32_t *params, uint32_t *values);

/* Whether the weight copies are on for a graph with memory levers
 * `levers` (ty_abi_graph_t.levers): fusion on, TRAINYARD_CUDA_WEIGHT_COPIES
 * unset or "1", and no memory lever applied (recompute, loss or MLP
 * chunks, a fused optimizer, offload: the run asked to trade speed for
 * memory, and the copies cost 2 bytes per weight for the whole run). */
bool ty_cu_weight_copies_enabled(const char *levers);
/* The value of TRAINYARD_CUDA_WEIGHT_COPIES when it is neither unset, "",
 * "0" nor "1" (to refuse by name), else NULL. */
const char *ty_cu_weight_copies_bad_setting(void);

#endif /* TY_BACKENDS_CUDA_CUDA_FUSE_H_ */
