/* The op set: each op's schema (inputs, attributes, outputs), shape and dtype
 * inference, and gradient rule written as other ops. The semantics of every
 * op are specified in docs/ops.md and executed by the reference kernels in
 * ops/reference/. This layer knows nothing of graphs: gradient rules emit
 * ops through the ty_grad_ctx_t callbacks, which graph/ implements. */
#ifndef TY_OPS_OP_H_
#define TY_OPS_OP_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"
#include "hal/tensor.h"
#include "ops/attrs.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint32_t ty_value_id_t;
#define TY_VALUE_NONE UINT32_MAX

#define TY_OP_MAX_INPUTS 1024 /* clip_by_global_norm takes every gradient */
#define TY_OP_MAX_OUTPUTS 1024
#define TY_OP_VARIADIC UINT32_MAX

/* Shape/dtype inference. inputs[i] is NULL for an absent optional input.
 * Fill outputs[0..*out_count) (capacity TY_OP_MAX_OUTPUTS; descriptors come
 * in zeroed). Errors are INVALID_ARGUMENT naming the op, the input and the
 * rule, e.g. "matmul: a is f32[2,3] but b is f32[4,5]: inner dimensions 3
 * and 4 differ". */
typedef struct ty_op_infer_ctx_t {
  const char *op;
  uint32_t input_count;
  const ty_tensor_desc_t *const *inputs;
  const ty_attrs_t *attrs;
  ty_tensor_desc_t *outputs;
  uint32_t *out_count;
} ty_op_infer_ctx_t;

/* Gradient rule context. For a forward node with inputs x_i and outputs y_j,
 * given dL/dy_j (output_grads[j], TY_VALUE_NONE when no gradient flows into
 * y_j), the rule sets input_grads[i] to a value holding dL/dx_i, for every
 * i with wants_input_grad[i]; it may leave others TY_VALUE_NONE. It builds
 * those values only by calling emit(). */
typedef struct ty_grad_ctx_t {
  const char *op;
  const ty_attrs_t *attrs;
  uint32_t input_count;
  const ty_value_id_t *inputs;
  uint32_t output_count;
  const ty_value_id_t *outputs;
  const ty_value_id_t *output_grads;
  const bool *wants_input_grad;
  ty_value_id_t *input_grads;

  /* Emits node `op` with inputs and attrs (NULL = none) into the graph and
   * returns its outputs (out_count of them; must match what the op makes). */
  void *builder;
  ty_status_t (*emit)(void *builder, const char *op, const ty_value_id_t *inputs,
                      uint32_t input_count, const ty_attrs_t *attrs,
                      ty_value_id_t *out_outputs, uint32_t out_count);
  /* The descriptor of an existing value. The pointer is valid only until
   * the next emit(), which may move the builder's storage: a rule copies
   * what it still needs after emitting. */
  const ty_tensor_desc_t *(*desc)(void *builder, ty_value_id_t value);
} ty_grad_ctx_t;

typedef struct ty_op_def_t {
  const char *name;
  uint32_t min_inputs;
  uint32_t max_inputs; /* TY_OP_VARIADIC for no limit (up to TY_OP_MAX_INPUTS) */
  const char *const *attr_names; /* NULL-terminated; every allowed attribute */
  ty_status_t (*infer)(const ty_op_infer_ctx_t *ctx);
  /* NULL for ops with no gradient (integer ops, optimizer updates). */
  ty_status_t (*grad)(const ty_grad_ctx_t *ctx);
  const char *summary; /* one line, for docs and `trainyard conform` */
  /* A collective: a rendezvous with the other ranks of its group. Lowering
   * keeps it even where nothing on this rank reads its result (ZeRO-2: a
   * rank that does not own a gradient still takes part in its sum), since a
   * rank whose graph dropped it would leave the others waiting. */
  bool communicates;
} ty_op_def_t;

/* The op named `name`, or NULL. Thread-safe (the table is static). */
const ty_op_def_t *ty_op_lookup(const char *name);

/* Every op of the set, in a stable order. */
uint32_t ty_op_count(void);
const ty_op_def_t *ty_op_at(uint32_t index);

/* Checks arity, attribute names and the input descriptors, then runs the
 * op's inference into `outputs` (capacity TY_OP_MAX_OUTPUTS). NOT_FOUND for
 * an unknown op, INVALID_ARGUMENT for any other error; *out_count is 0 on
 * error. Thread-safe. */
ty_status_t ty_op_infer(const char *op, const ty_tensor_desc_t *const *inputs,
                        uint32_t input_count, const ty_attrs_t *attrs,
                        ty_tensor_desc_t *outputs, uint32_t *out_count);

#ifdef __cplusplus
}
#endif

#endif /* TY_OPS_OP_H_ */
