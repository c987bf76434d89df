/* The opencl executor's insides, shared by ocl_graph.c (compile, execute)
 * and the per-op launch builders (ocl_ops*.c).
 *
 * Compiling a graph turns every node into a few commands: kernel launches
 * (with a cl_kernel of their own, whose constant arguments are set once),
 * and fills and copies (kernels too, never the driver's: kernels/views.cl
 * says why; their arguments are all set at execute). The state updates not
 * done in place are copies after the last node. Tensor operands are
 * references — a graph value, the executable's scratch or aux buffer, or
 * the error buffer — plus
 * a byte offset; they are resolved to (cl_mem, offset) at every execute,
 * since bound buffers may change between runs, and a kernel argument is
 * only set again when its resolution changed. */
#ifndef TY_BACKENDS_OPENCL_OCL_EXEC_H_
#define TY_BACKENDS_OPENCL_OCL_EXEC_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/abi_graph.h"
#include "hal/memory_plan.h"
#include "backends/opencl/ocl_internal.h"

typedef enum ty_ocl_ref_kind_e {
  TY_OCL_REF_NONE = 0,  /* an absent optional operand: a NULL buffer */
  TY_OCL_REF_VALUE,     /* graph value `value` */
  TY_OCL_REF_SCRATCH,   /* the executable's scratch buffer */
  TY_OCL_REF_AUX,       /* the executable's read-only aux buffer (tables) */
  TY_OCL_REF_ERR,       /* the error buffer (a kernel's `err` argument) */
} ty_ocl_ref_kind_t;

typedef struct ty_ocl_ref_t {
  ty_ocl_ref_kind_t kind;
  uint32_t value;
  uint64_t offset; /* bytes, added to the value's own offset */
} ty_ocl_ref_t;

/* A buffer argument of a kernel: (cl_mem, ulong offset) at `arg`, arg + 1
 * (the error buffer takes one argument). */
typedef struct ty_ocl_bufarg_t {
  uint32_t arg;
  ty_ocl_ref_t ref;
  cl_mem set_mem; /* what the kernel holds now */
  uint64_t set_offset;
  bool set;
} ty_ocl_bufarg_t;

typedef enum ty_ocl_cmd_kind_e {
  TY_OCL_CMD_KERNEL = 0,
  TY_OCL_CMD_FILL,  /* zero `size` bytes at dst (kernel ty_fill_zero) */
  TY_OCL_CMD_COPY,  /* `size` bytes src -> dst (ty_copy_units); skipped when
                       they coincide */
} ty_ocl_cmd_kind_t;

typedef struct ty_ocl_cmd_t {
  ty_ocl_cmd_kind_t kind;
  uint32_t node;    /* UINT32_MAX: a state update's copy */
  const char *name; /* the kernel's (a state update's copy: the state's), for messages */
  cl_kernel kernel;
  uint32_t next_arg;
  uint32_t work_dim;
  size_t global[3], local[3];
  uint32_t bufarg_count;
  ty_ocl_bufarg_t bufargs[16];
  ty_ocl_ref_t dst, src; /* FILL, COPY */
  uint64_t size;
} ty_ocl_cmd_t;

typedef struct ty_abi_executable_s ty_ocl_exec_t;

/* What an op builder works with: the node, and a sticky status (the first
 * error wins; later calls are no-ops). */
typedef struct ty_ocl_build_t {
  ty_abi_device_t *device;
  ty_ocl_exec_t *exec;
  const ty_abi_graph_t *g;
  const ty_abi_node_t *node;
  uint32_t n;
  ty_abi_status_t status;
  uint64_t scratch_used; /* this node's scratch (nodes run one at a time) */
} ty_ocl_build_t;

/* ---- for op builders ---- */

const ty_abi_value_t *ty_ocl_vin(const ty_ocl_build_t *b, uint32_t i);  /* NULL when absent */
const ty_abi_value_t *ty_ocl_vout(const ty_ocl_build_t *b, uint32_t o);
ty_ocl_ref_t ty_ocl_in(const ty_ocl_build_t *b, uint32_t i); /* NONE when absent */
ty_ocl_ref_t ty_ocl_out(const ty_ocl_build_t *b, uint32_t o);
ty_ocl_ref_t ty_ocl_ref_at(ty_ocl_ref_t ref, uint64_t byte_offset);
/* `bytes` of this node's scratch (aligned to 256). */
ty_ocl_ref_t ty_ocl_scratch(ty_ocl_build_t *b, uint64_t bytes);
/* Read-only data uploaded with the executable (e.g. RoPE frequencies). */
ty_ocl_ref_t ty_ocl_aux(ty_ocl_build_t *b, const void *data, uint64_t bytes);
int ty_ocl_dt(const ty_abi_value_t *v); /* dtype code for kernels, 0 when absent */

/* A launch of `kernel` from `family`; arguments follow in order. NULL after
 * an error (the arg helpers accept NULL). */
ty_ocl_cmd_t *ty_ocl_launch(ty_ocl_build_t *b, ty_ocl_family_t family, const char *kernel);
void ty_ocl_arg_buf(ty_ocl_build_t *b, ty_ocl_cmd_t *c, ty_ocl_ref_t ref);
void ty_ocl_arg_err(ty_ocl_build_t *b, ty_ocl_cmd_t *c); /* err, node */
void ty_ocl_arg_i32(ty_ocl_build_t *b, ty_ocl_cmd_t *c, int32_t v);
void ty_ocl_arg_u32(ty_ocl_build_t *b, ty_ocl_cmd_t *c, uint32_t v);
void ty_ocl_arg_i64(ty_ocl_build_t *b, ty_ocl_cmd_t *c, int64_t v);
void ty_ocl_arg_u64(ty_ocl_build_t *b, ty_ocl_cmd_t *c, uint64_t v);
void ty_ocl_arg_f32(ty_ocl_build_t *b, ty_ocl_cmd_t *c, float v);
void ty_ocl_arg_l8(ty_ocl_build_t *b, ty_ocl_cmd_t *c, const int64_t v[8]);
/* Work sizes: 1-D over n items in groups of `local`, or explicit. */
void ty_ocl_grid1(ty_ocl_cmd_t *c, uint64_t items, size_t local);
void ty_ocl_grid(ty_ocl_cmd_t *c, uint32_t dims, const size_t global[3], const size_t local[3]);
void ty_ocl_fill(ty_ocl_build_t *b, ty_ocl_ref_t dst, uint64_t size);
void ty_ocl_copy(ty_ocl_build_t *b, ty_ocl_ref_t src, ty_ocl_ref_t dst, uint64_t size);
void ty_ocl_fail(ty_ocl_build_t *b, ty_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int64_t ty_ocl_numel(const ty_abi_value_t *v);

/* ---- the op table (ocl_ops.c, ocl_ops_nn.c) ---- */

typedef void (*ty_ocl_op_build_fn)(ty_ocl_build_t *b);

typedef ty_abi_accept_t ty_ocl_accept_t; /* backends/common/abi_graph.h */

typedef struct ty_ocl_op_t {
  const char *op;
  ty_ocl_op_build_fn build;
  ty_ocl_accept_t accept;
} ty_ocl_op_t;

const ty_ocl_op_t *ty_ocl_op_find(const char *op);
/* Op-specific limits beyond dtypes (attention head_dim, causal=0, ...):
 * writes a reason and returns false when the node cannot run. */
bool ty_ocl_op_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                     size_t capacity);

/* Builders, by file. */
void ty_ocl_build_binary(ty_ocl_build_t *b);
void ty_ocl_build_scale(ty_ocl_build_t *b);
void ty_ocl_build_broadcast_to(ty_ocl_build_t *b);
void ty_ocl_build_reduce(ty_ocl_build_t *b);
void ty_ocl_build_matmul(ty_ocl_build_t *b);
void ty_ocl_build_cast(ty_ocl_build_t *b);
void ty_ocl_build_reshape(ty_ocl_build_t *b);
void ty_ocl_build_transpose(ty_ocl_build_t *b);
void ty_ocl_build_slice(ty_ocl_build_t *b);
void ty_ocl_build_slice_backward(ty_ocl_build_t *b);
void ty_ocl_build_concat(ty_ocl_build_t *b);
void ty_ocl_build_kv_cache_write(ty_ocl_build_t *b);
void ty_ocl_build_embedding(ty_ocl_build_t *b);
void ty_ocl_build_embedding_backward(ty_ocl_build_t *b);
void ty_ocl_build_adamw(ty_ocl_build_t *b);
void ty_ocl_build_sgd(ty_ocl_build_t *b);
void ty_ocl_build_clip(ty_ocl_build_t *b);
/* ocl_ops_nn.c */
void ty_ocl_build_map(ty_ocl_build_t *b);
void ty_ocl_build_dropout(ty_ocl_build_t *b);
void ty_ocl_build_norm(ty_ocl_build_t *b);
void ty_ocl_build_norm_backward(ty_ocl_build_t *b);
void ty_ocl_build_softmax(ty_ocl_build_t *b);
void ty_ocl_build_cross_entropy(ty_ocl_build_t *b);
void ty_ocl_build_rope(ty_ocl_build_t *b);
void ty_ocl_build_attention(ty_ocl_build_t *b);

#endif /* TY_BACKENDS_OPENCL_OCL_EXEC_H_ */
