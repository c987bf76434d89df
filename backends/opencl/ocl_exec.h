/* The opencl executor's insides, shared by ocl_graph.c (compile, execute)
 * and the per-op launch builders (ocl_ops*.c).
 *
 * Compiling a graph turns every node into a few commands: kernel launches
 * (with a cl_kernel of their own, whose constant arguments are set once),
 * and fills and copies (kernels too, never the driver's: kernels/views.cl
 * says why; their arguments are all set at execute). The state updates not
 * done in place are copies after the last node. Tensor operands are
 * references of the device-executor core (backends/common/device_exec.h:
 * a graph value, the executable's scratch or aux buffer, or the error
 * buffer, plus a byte offset); they are resolved to (cl_mem, offset) at
 * every execute, since bound buffers may change between runs, and a kernel
 * argument is only set again when its resolution changed. Builders use the
 * core's helpers (ty_dev_in, ty_dev_scratch, ty_dev_fail, ...) and the
 * OpenCL launch helpers below. */
#ifndef TY_BACKENDS_OPENCL_OCL_EXEC_H_
#define TY_BACKENDS_OPENCL_OCL_EXEC_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/device_ops.h"
#include "ocl_internal.h"

/* A buffer argument of a kernel: (cl_mem, ulong offset) at `arg`, arg + 1
 * (the error buffer takes one argument). */
typedef struct ty_ocl_bufarg_t {
  uint32_t arg;
  ty_dev_ref_t ref;
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
  ty_dev_ref_t dst, src; /* FILL, COPY */
  uint64_t size;
} ty_ocl_cmd_t;

typedef struct ty_abi_executable_s ty_ocl_exec_t;

typedef ty_dev_build_t ty_ocl_build_t; /* exec: the ty_ocl_exec_t */

/* ---- for op builders ---- */

/* A launch of `kernel` from `family`; arguments follow in order. NULL after
 * an error (the core's arg helpers accept NULL). */
ty_ocl_cmd_t *ty_ocl_launch(ty_ocl_build_t *b, ty_ocl_family_t family, const char *kernel);
/* Arguments: the core's ty_dev_arg_* (device_ops.h), which call this hook
 * (ty_dev_build_t.arg) to set each as its OpenCL C type. */
void ty_ocl_arg(ty_ocl_build_t *b, void *cmd, const ty_dev_arg_t *arg);
/* Work sizes: 1-D over n items in groups of `local`, or explicit. */
void ty_ocl_grid1(ty_ocl_cmd_t *c, uint64_t items, size_t local);
void ty_ocl_grid(ty_ocl_cmd_t *c, uint32_t dims, const size_t global[3], const size_t local[3]);
void ty_ocl_fill(ty_ocl_build_t *b, ty_dev_ref_t dst, uint64_t size);
void ty_ocl_copy(ty_ocl_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t size);

/* ---- the op table (ocl_ops.c, ocl_ops_nn.c) ---- */

/* Ended by an entry whose op is NULL; ty_dev_op_find looks an op up. */
extern const ty_dev_op_t ty_ocl_ops[];
/* The fills and copies the core's view builders use (ocl_ops.c). */
extern const ty_dev_movers_t ty_ocl_movers;
/* Op-specific limits beyond dtypes (attention head_dim, causal=0, ...):
 * writes a reason and returns false when the node cannot run. */
bool ty_ocl_op_check(const ty_abi_graph_t *g, const ty_abi_node_t *node, char *reason,
                     size_t capacity);

/* The builders of the ops in device_op_list.h (ocl_ops.c, ocl_ops_nn.c,
 * ocl_ops_sample.c):
 * ty_ocl_build_<builder>. */
#define TY_DEV_OP(op, builder, accept) void ty_ocl_build_##builder(ty_ocl_build_t *b);
#define TY_DEV_CORE_OP(op, function, accept)
#include "trainyard/device_op_list.h"

#endif /* TY_BACKENDS_OPENCL_OCL_EXEC_H_ */
