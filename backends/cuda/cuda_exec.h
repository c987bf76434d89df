/* The emit API: what the op builders (cuda_ops*.c, cuda_attention.c,
 * cuda_gemm.c; the op table is cuda_ops.h) call while compile walks the
 * graph, implemented by cuda_emit.c. The executable itself is opaque here
 * (cuda_executable.h is private to cuda_emit.c, cuda_compile.c,
 * cuda_execute.c and cuda_errors.c).
 *
 * Compiling a graph turns every node into a few commands: kernel launches
 * (a CUfunction, its grid, and its parameters packed once into a byte
 * block), memsets, device copies and cuBLASLt matmuls. Tensor operands are
 * references — a graph value, the executable's scratch or aux memory, or
 * the error flag — plus a byte offset; they are resolved to device
 * addresses at every execute (bound buffers may change between runs) and
 * patched into the parameter blocks. When nothing changed since the last
 * run, the CUDA graph captured then is replayed as it is.
 *
 * Kernel parameters follow the CUDA ABI: each at its natural alignment
 * (pointers and 64-bit values 8, 32-bit values 4, ty_dims8 8) in
 * declaration order; the core's ty_dev_arg_* (device_ops.h, through
 * ty_cu_arg) append in that order, so a
 * builder's calls must list the kernel's parameters exactly. */
#ifndef TY_BACKENDS_CUDA_CUDA_EXEC_H_
#define TY_BACKENDS_CUDA_CUDA_EXEC_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/device_ops.h"
#include "cuda_fuse.h"
#include "cuda_internal.h"

/* Threads per block of 1-D kernels and row reductions. */
#define TY_CU_BLOCK 256u
/* Bytes of one command's packed parameters, and pointer parameters. */
#define TY_CU_MAX_PARAM_BYTES 512u
#define TY_CU_MAX_PTRS 24u

/* A pointer parameter: where it sits in the parameter block, and what it
 * points at. */
typedef struct ty_cu_ptrarg_t {
  uint32_t at;
  ty_dev_ref_t ref;
} ty_cu_ptrarg_t;

typedef enum ty_cu_cmd_kind_e {
  TY_CU_CMD_KERNEL = 0,
  TY_CU_CMD_FILL, /* zero `size` bytes at dst */
  TY_CU_CMD_COPY, /* `size` bytes src -> dst; skipped when they coincide */
  TY_CU_CMD_GEMM, /* a cuBLASLt matmul (cuda_gemm.c) */
  /* A collective (`coll`) over the ranks of process group `group` by the
   * device's NCCL communicator of that group. All_reduce / tp_reduce:
   * `size` elements of `dtype` src -> dst, summed, averaged or maxed
   * (`reduce`); at world 1 a copy (none when they coincide); consecutive
   * ones on one communicator form one NCCL group. All_gather /
   * reduce_scatter (`parts` > 1 ranks): `size` elements per rank (what
   * each sends / keeps), each in an NCCL group of its own; refused at
   * world 1. */
  TY_CU_CMD_ALL_REDUCE,
} ty_cu_cmd_kind_t;

/* The collective of a TY_CU_CMD_ALL_REDUCE command. */
enum { TY_CU_COLL_ALL_REDUCE = 0, TY_CU_COLL_ALL_GATHER, TY_CU_COLL_REDUCE_SCATTER };

typedef struct ty_cu_gemm_t ty_cu_gemm_t;

typedef struct ty_cu_cmd_t {
  ty_cu_cmd_kind_t kind;
  uint32_t node;
  const char *name; /* the kernel's (static storage), for messages and profiles */
  CUfunction function;
  uint32_t grid[3], block[3], shared_bytes;
  uint32_t param_bytes;
  unsigned char params[TY_CU_MAX_PARAM_BYTES] __attribute__((aligned(8)));
  uint32_t ptr_count;
  ty_cu_ptrarg_t ptrs[TY_CU_MAX_PTRS];
  ty_dev_ref_t dst, src; /* FILL, COPY, ALL_REDUCE */
  uint64_t size;        /* bytes (FILL, COPY); elements (ALL_REDUCE) */
  ty_dtype_t dtype;     /* ALL_REDUCE */
  uint32_t reduce;      /* ALL_REDUCE: ty_abi_reduce_op_t */
  const char *group;    /* ALL_REDUCE: the node's `group` (the graph's storage) */
  uint32_t coll;        /* ALL_REDUCE: TY_CU_COLL_* */
  uint32_t parts;       /* ALL_REDUCE of ALL_GATHER / REDUCE_SCATTER: the group's size */
  ty_cu_gemm_t *gemm; /* GEMM: owned */
  bool pdl;           /* KERNEL: launched as a programmatic dependent of the kernel
                         command before it (cuda_execute.c, TRAINYARD_CUDA_PDL) */
  bool refresh;       /* makes a weight copy (cuda_fuse.h ty_cu_weight_copy_plan): run
                         before the others, and only when a copy may be stale */
} ty_cu_cmd_t;

typedef struct ty_abi_executable_s ty_cu_exec_t;

/* What an op builder works with: the core's (backends/common/device_exec.h),
 * whose `hint` is the fusion this node heads (cuda_fuse.h), NULL when
 * none: its builder then also does the work of the nodes folded into it.
 * `deterministic`: compiled with deterministic=1 (see below). */
typedef ty_dev_build_t ty_cu_build_t;

static inline const ty_cu_fuse_t *ty_cu_fuse_of(const ty_cu_build_t *b) {
  return (const ty_cu_fuse_t *)b->hint;
}

/* Deterministic mode (compile option deterministic=1, ABI 1.10;
 * docs/plugin-abi.md "Deterministic mode"): every row of a serve step's
 * result is the same bits whatever else shares the batch. What it changes
 * and what holds without change:
 * - matmul (cuda_gemm.c): the cuBLASLt algorithm is chosen once per
 *   (N, K, layouts, dtypes, epilogue) from a canonical row count, never
 *   from M, without split-K and without workspace (so no stream-K or
 *   split-K partials), and checked for the real shape;
 * - attention (cuda_attention_plan.h): the mma.sync kernels for every T
 *   (never the wgmma ones, chosen by T >= 64). Their key loop visits tiles
 *   of TY_ATT_TC_BK keys anchored at absolute key positions, one online-
 *   softmax rescale per tile; tiles a row does not see are exact no-ops
 *   for it (scale 1 or 0, products of 0), so a decode row over a cache
 *   equals the same row in a causal block. No split-KV: one block owns a
 *   row's whole key range. The generic (f32, other head dims) kernels
 *   have the same structure;
 * - per-row ops, unchanged: layernorm/rmsnorm forward (a warp per row),
 *   softmax, cross_entropy / the vocab ops and logit masking (a block per
 *   row, its threads chosen from the row length: ty_cu_row_threads), row
 *   reductions (chunks from the reduced length), rope, embedding gather,
 *   casts and elementwise ops (no reduction): a row's reduction order
 *   depends on the row's own length only;
 * - reductions across rows, training only (norm backward's dgamma/dbeta,
 *   bias gradients, column sums, embedding backward, attention dK/dV):
 *   fixed splits from the shape and ordered partial sums, no float
 *   atomics (embedding backward's counting sort uses integer atomics and
 *   then sums each id's rows in row order), so a run repeats bit for bit;
 *   cuBLASLt's BGRAD epilogues with a fixed algorithm repeat bit for bit
 *   on one card, one stream and our own workspace (cuBLAS "Results
 *   reproducibility"). */

/* ---- for op builders ---- */

/* Operands, scratch, aux data, ty_dev_fail: the core's helpers
 * (ty_dev_in, ty_dev_out, ty_dev_value, ty_dev_scratch, ty_dev_aux, ...). */
/* A device array of `count` u64 addresses, those of `refs`, kept current:
 * execute rewrites it (before capturing) whenever a binding moved one. For
 * multi-tensor kernels, which take one pointer per tensor. */
ty_dev_ref_t ty_cu_ptr_table(ty_cu_build_t *b, const ty_dev_ref_t *refs, uint32_t count);
/* Marks node `node` (after the current one) as done by the current node's
 * commands (a multi-tensor launch over several nodes): compile builds
 * nothing for it. */
void ty_cu_mark_fused(ty_cu_build_t *b, uint32_t node);
/* A value the current node's command reads beyond its inputs, which the
 * memory plan keeps live until then (cuda_fuse.h ty_cu_xent_plan: the
 * forward's per-row loss for cross_entropy_backward), or UINT32_MAX. */
uint32_t ty_cu_extra_read(const ty_cu_build_t *b);
/* The streaming multiprocessors of the device (for grid sizing). */
uint32_t ty_cu_sm_count(const ty_cu_build_t *b);
/* Elements between the starts of two rows (last-dimension slices) of
 * value v: its last dimension, or more when the executor padded the rows
 * (logits over an odd vocabulary: rows of 50257 bf16 are not 16-byte
 * aligned, which keeps cuBLASLt off its fast kernels; see cuda_compile.c).
 * Only matmul, cross_entropy and cross_entropy_backward (and reshapes that
 * keep the last dimension) ever see a padded value. */
int64_t ty_cu_row_stride(const ty_cu_build_t *b, uint32_t value);
/* For the padded LM head (cuda_compile.c, ty_cu_plan_padded_head): rows of
 * value v that exist, zero beyond its first dimension (0: none), and
 * whether the padding of its rows holds zeros. */
int64_t ty_cu_zero_rows(const ty_cu_build_t *b, uint32_t value);
bool ty_cu_zero_cols(const ty_cu_build_t *b, uint32_t value);
/* The bf16 copy of parameter `param` that its AdamW update writes
 * (cuda_fuse.h ty_cu_weight_copy_plan), or none. */
ty_dev_ref_t ty_cu_weight_copy(const ty_cu_build_t *b, uint32_t param);

/* A launch of `kernel` (static storage) from `family`; parameters follow in
 * order. NULL after an error (the helpers below accept NULL). */
ty_cu_cmd_t *ty_cu_launch(ty_cu_build_t *b, ty_cu_family_t family, const char *kernel);
/* Arguments: the core's ty_dev_arg_* (device_ops.h), which call this hook
 * (ty_dev_build_t.arg) to pack each at its CUDA ABI alignment. */
void ty_cu_arg(ty_cu_build_t *b, void *cmd, const ty_dev_arg_t *arg);
/* 1-D grid-stride launch over `items` with `block` threads per block (the
 * grid is capped; kernels loop with TY_FOR_EACH). */
void ty_cu_grid1(ty_cu_build_t *b, ty_cu_cmd_t *c, uint64_t items, uint32_t block);
/* Explicit grid; shared_bytes of dynamic shared memory (above 48 KiB the
 * kernel's limit is raised, up to the card's opt-in maximum). */
void ty_cu_grid(ty_cu_build_t *b, ty_cu_cmd_t *c, uint32_t gx, uint32_t gy, uint32_t gz,
                uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared_bytes);
void ty_cu_fill(ty_cu_build_t *b, ty_dev_ref_t dst, uint64_t size);
void ty_cu_copy(ty_cu_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t size);
/* An all-reduce of `count` elements of `dtype` from src into dst over
 * process group `group` (a string of the graph: it outlives the command). */
/* An all_gather (`gather`) or reduce_scatter over the `parts` ranks of
 * `group`: `count` elements per rank (sent by each / kept by each). */
void ty_cu_gather(ty_cu_build_t *b, bool gather, ty_dev_ref_t src, ty_dev_ref_t dst,
                  uint64_t count, ty_dtype_t dtype, uint32_t parts, const char *group);
void ty_cu_all_reduce(ty_cu_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t count,
                      ty_dtype_t dtype, uint32_t reduce, const char *group);
/* A cuBLASLt command (cuda_gemm.c adds these). */
ty_cu_cmd_t *ty_cu_gemm_cmd(ty_cu_build_t *b, const char *name);

#endif /* TY_BACKENDS_CUDA_CUDA_EXEC_H_ */
