/* The conformance kit's whole-graph tier: each case's op wrapped in the
 * smallest graph a whole-graph device (the dataflow accelerator) runs.
 *
 *  - forward: a one-node inference graph whose operands are resident
 *    parameters (STATE values) instead of per-run inputs;
 *  - backward: a one-node train step: the differentiated operands are
 *    parameters, autodiff from the seeds dy<j> gives their gradients (read
 *    as dx<i>), and an SGD update (lr 0.5, no momentum or decay) writes
 *    them back (read as x<i>); the forward outputs y<j> are read too;
 *  - optimizer updates and clipping, which consume gradients: the gradient
 *    operands come from a forward product p = t * c with c the case's values,
 *    whose gradient with respect to t is exactly c.
 * Inputs, seeds and compared results keep the per-op tier's names, so one
 * case instance feeds both tiers. */
#include <stdio.h>
#include <string.h>

#include "graph/ir/autodiff.h"
#include "graph/conform/conform_internal.h"

#define TY_WHOLE_LR 0.5

static bool ty_whole_is_optimizer(const char *op) {
  return strcmp(op, "adamw_update") == 0 || strcmp(op, "sgd_update") == 0 ||
         strcmp(op, "adafactor_update") == 0;
}

/* Outputs y<j>, or the state updates of in-place cases. */
static ty_status_t ty_whole_outputs(const ty_conform_instance_t *inst, ty_graph_t *g,
                                    const ty_value_id_t *in_ids, const ty_value_id_t *out_ids) {
  char name[TY_CONFORM_NAME_MAX];
  for (uint32_t j = 0; j < inst->output_count; ++j) {
    uint32_t k = inst->update_of[j];
    if (k != UINT32_MAX) {
      TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, in_ids[k], out_ids[j]));
    } else {
      snprintf(name, sizeof(name), "y%u", j);
      TY_RETURN_IF_ERROR(ty_graph_set_output(g, out_ids[j], name));
    }
  }
  return TY_OK;
}

static ty_status_t ty_whole_inference(const ty_conform_instance_t *inst, ty_graph_t *g,
                                      bool oracle) {
  ty_value_id_t in_ids[TY_CONFORM_MAX_INPUTS], out_ids[TY_CONFORM_MAX_OUTPUTS];
  uint32_t mask = 0;
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    if (inst->inputs[i].present) mask |= 1u << i;
  }
  TY_RETURN_IF_ERROR(ty_conform_add_op_states(inst, g, oracle, mask, in_ids, out_ids));
  return ty_whole_outputs(inst, g, in_ids, out_ids);
}

static ty_status_t ty_whole_train(const ty_conform_instance_t *inst, ty_graph_t *g, bool oracle) {
  ty_value_id_t in_ids[TY_CONFORM_MAX_INPUTS], out_ids[TY_CONFORM_MAX_OUTPUTS];
  ty_value_id_t grads[TY_CONFORM_MAX_INPUTS];
  uint32_t mask = 0;
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    if (ty_conform_wrt(inst, i)) mask |= 1u << i;
  }
  TY_RETURN_IF_ERROR(ty_conform_add_op_states(inst, g, oracle, mask, in_ids, out_ids));
  TY_RETURN_IF_ERROR(ty_conform_add_backward(inst, g, oracle, in_ids, out_ids,
                                             inst->diff_outputs, inst->diff_count, true, grads));
  /* The forward outputs are read too, as a train step reports its loss;
   * that also keeps the forward node when the gradient does not need it
   * (an embedding's gradient reads only the ids). */
  char yname[TY_CONFORM_NAME_MAX];
  for (uint32_t j = 0; j < inst->output_count; ++j) {
    snprintf(yname, sizeof(yname), "y%u", j);
    TY_RETURN_IF_ERROR(ty_graph_set_output(g, out_ids[j], yname));
  }
  ty_value_id_t lr, momentum, decay;
  TY_RETURN_IF_ERROR(ty_graph_add_scalar(g, TY_DTYPE_F32, TY_WHOLE_LR, &lr));
  TY_RETURN_IF_ERROR(ty_graph_add_scalar(g, TY_DTYPE_F32, 0.0, &momentum));
  TY_RETURN_IF_ERROR(ty_graph_add_scalar(g, TY_DTYPE_F32, 0.0, &decay));
  char name[TY_CONFORM_NAME_MAX];
  for (uint32_t i = 0, k = 0; i < inst->input_count; ++i) {
    if (!ty_conform_wrt(inst, i)) continue;
    ty_value_id_t grad = grads[k++];
    const ty_graph_value_t *gv = ty_graph_value(g, grad);
    if (gv->role != TY_VALUE_INTERMEDIATE || gv->desc.name[0]) {
      ty_attrs_t shape = TY_ATTRS_EMPTY;
      TY_RETURN_IF_ERROR(ty_attrs_set_ints(&shape, "shape", gv->desc.dims, gv->desc.rank));
      TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "reshape", &grad, 1, &shape, &grad));
    }
    snprintf(name, sizeof(name), "dx%u", i);
    TY_RETURN_IF_ERROR(ty_graph_set_output(g, grad, name));
    /* The optimizer section: SGD on the parameter, its buffer a state. */
    const ty_conform_value_t *v = &inst->inputs[i];
    ty_value_id_t buf, upd[2];
    snprintf(name, sizeof(name), "m%u", i);
    TY_RETURN_IF_ERROR(ty_graph_add_state(g, name, TY_DTYPE_F32, v->rank, v->dims, &buf));
    ty_value_id_t sgd_in[6] = {in_ids[i], grad, buf, lr, momentum, decay};
    TY_RETURN_IF_ERROR(ty_graph_add_node(g, "sgd_update", sgd_in, 6, NULL, upd, 2));
    TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, in_ids[i], upd[0]));
    TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, buf, upd[1]));
  }
  return TY_OK;
}

/* Optimizer updates and clipping: gradient operands from p = t * c. */
static ty_status_t ty_whole_gradients(const ty_conform_instance_t *inst, ty_graph_t *g,
                                      bool oracle) {
  bool optimizer = ty_whole_is_optimizer(inst->test_case->op);
  ty_value_id_t in_ids[TY_CONFORM_MAX_INPUTS], out_ids[TY_CONFORM_MAX_OUTPUTS];
  char name[TY_CONFORM_NAME_MAX];
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    const ty_conform_value_t *v = &inst->inputs[i];
    in_ids[i] = TY_VALUE_NONE;
    if (!v->present) continue;
    ty_dtype_t dtype = oracle ? v->oracle_dtype : v->dtype;
    bool state = v->state || (optimizer && i == 0);
    TY_RETURN_IF_ERROR(state ? ty_graph_add_state(g, v->name, dtype, v->rank, v->dims, &in_ids[i])
                             : ty_graph_add_input(g, v->name, dtype, v->rank, v->dims, &in_ids[i]));
  }
  ty_value_id_t node_in[TY_CONFORM_MAX_INPUTS];
  memcpy(node_in, in_ids, sizeof(node_in));
  /* adamw/sgd/adafactor: the gradient is input 1, the parameter input 0; clipping:
   * every input after max_norm is a gradient, with a parameter t<i> of its
   * own (its values do not matter: d(t * c)/dt = c exactly). */
  for (uint32_t i = 1; i < inst->input_count; ++i) {
    if (optimizer && i != 1) break;
    const ty_conform_value_t *v = &inst->inputs[i];
    if (!v->present) continue;
    ty_value_id_t t = in_ids[0];
    if (!optimizer) {
      snprintf(name, sizeof(name), "t%u", i);
      TY_RETURN_IF_ERROR(ty_graph_add_state(g, name, oracle ? v->oracle_dtype : v->dtype, v->rank,
                                            v->dims, &t));
    }
    ty_value_id_t mul_in[2] = {t, in_ids[i]}, p, grad;
    TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "mul", mul_in, 2, NULL, &p));
    snprintf(name, sizeof(name), "p%u", i);
    TY_RETURN_IF_ERROR(ty_graph_set_output(g, p, name)); /* keeps the forward live */
    TY_RETURN_IF_ERROR(ty_graph_autodiff(g, p, TY_VALUE_NONE, &t, 1, &grad));
    node_in[i] = grad;
  }
  TY_RETURN_IF_ERROR(ty_graph_add_node(g, inst->test_case->op, node_in, inst->input_count,
                                       &inst->attrs, out_ids, inst->output_count));
  return ty_whole_outputs(inst, g, in_ids, out_ids);
}

ty_status_t ty_conform_instance_graph_whole(const ty_conform_instance_t *inst,
                                            ty_conform_direction_t direction, bool oracle,
                                            ty_graph_t **out_graph) {
  *out_graph = NULL;
  if (direction == TY_CONFORM_BACKWARD && !inst->has_backward) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "conform case %s/%s has no backward direction",
                          inst->test_case->op, inst->test_case->name);
  }
  ty_graph_t *g;
  TY_RETURN_IF_ERROR(ty_graph_create(&g));
  const char *op = inst->test_case->op;
  ty_status_t s;
  if (direction == TY_CONFORM_BACKWARD) {
    s = ty_whole_train(inst, g, oracle);
  } else if (ty_whole_is_optimizer(op) || strcmp(op, "clip_by_global_norm") == 0) {
    s = ty_whole_gradients(inst, g, oracle);
  } else {
    s = ty_whole_inference(inst, g, oracle);
  }
  if (s) {
    ty_graph_destroy(g);
    return ty_status_annotate(s, "building the whole-graph case %s/%s", op, inst->test_case->name);
  }
  *out_graph = g;
  return TY_OK;
}

uint32_t ty_conform_instance_results_whole(const ty_conform_instance_t *inst,
                                           ty_conform_direction_t direction,
                                           char names[][TY_CONFORM_NAME_MAX]) {
  uint32_t n = ty_conform_instance_results(inst, direction, names);
  if (direction != TY_CONFORM_BACKWARD) return n;
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    if (ty_conform_wrt(inst, i)) snprintf(names[n++], TY_CONFORM_NAME_MAX, "x%u", i);
  }
  for (uint32_t j = 0; j < inst->output_count; ++j) {
    snprintf(names[n++], TY_CONFORM_NAME_MAX, "y%u", j);
  }
  return n;
}
