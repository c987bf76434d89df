/* Gradient rules of every differentiable op, run against a mock graph
 * builder whose emit() infers each emitted node with ty_op_infer. For each
 * case: every wanted float input gets a gradient of exactly its shape and
 * dtype, unwanted or integer inputs get none, no output gradient means no
 * nodes at all, only ops of the set are emitted, and the companions the spec
 * names are the ones used. Numeric correctness is checked elsewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "hal/dtype.h"
#include "ops/op.h"
#include "ops_test_util.h"

/* ---- The mock builder ---- */

#define MOCK_MAX_VALUES 256
#define MOCK_MAX_NODES 64

typedef struct mock_builder_t {
  ty_tensor_desc_t values[MOCK_MAX_VALUES];
  uint32_t value_count;
  const char *nodes[MOCK_MAX_NODES]; /* op names, static storage */
  uint32_t node_count;
} mock_builder_t;

static ty_value_id_t mock_value(mock_builder_t *b, const ty_tensor_desc_t *d) {
  assert_true(b->value_count < MOCK_MAX_VALUES);
  b->values[b->value_count] = *d;
  return b->value_count++;
}

static const ty_tensor_desc_t *mock_desc(void *builder, ty_value_id_t value) {
  mock_builder_t *b = builder;
  assert_true(value < b->value_count);
  return &b->values[value];
}

static ty_status_t mock_emit(void *builder, const char *op,
                             const ty_value_id_t *inputs, uint32_t input_count,
                             const ty_attrs_t *attrs,
                             ty_value_id_t *out_outputs, uint32_t out_count) {
  mock_builder_t *b = builder;
  const ty_op_def_t *def = ty_op_lookup(op);
  if (!def) {
    return ty_status_make(TY_CODE_NOT_FOUND, "emitted op '%s' is not in the set", op);
  }
  assert_true(input_count <= TY_OP_MAX_INPUTS);
  const ty_tensor_desc_t *ins[TY_OP_MAX_INPUTS];
  for (uint32_t i = 0; i < input_count; ++i) {
    ins[i] = inputs[i] == TY_VALUE_NONE ? NULL : mock_desc(b, inputs[i]);
  }
  ty_tensor_desc_t outs[TY_OP_MAX_OUTPUTS];
  uint32_t count = 0;
  TY_RETURN_IF_ERROR(ty_op_infer(op, ins, input_count, attrs, outs, &count));
  if (count != out_count) {
    return ty_status_make(TY_CODE_INTERNAL, "%s makes %u outputs, %u asked for",
                          op, count, out_count);
  }
  assert_true(b->node_count < MOCK_MAX_NODES);
  b->nodes[b->node_count++] = def->name;
  for (uint32_t i = 0; i < count; ++i) out_outputs[i] = mock_value(b, &outs[i]);
  return TY_OK;
}

static bool mock_emitted(const mock_builder_t *b, const char *op) {
  for (uint32_t i = 0; i < b->node_count; ++i) {
    if (strcmp(b->nodes[i], op) == 0) return true;
  }
  return false;
}

/* ---- Running a gradient rule ---- */

typedef struct grad_case_t {
  const char *op;
  const char *inputs; /* "-" for an absent optional input */
  const char *attrs;
  const char *must_emit; /* space-separated ops the rule must use, or NULL */
} grad_case_t;

/* A forward node in a fresh builder, with a gradient seed on output 0 (or
 * on output `seed_output`). */
typedef struct grad_run_t {
  mock_builder_t b;
  ty_attrs_t attrs;
  uint32_t input_count, output_count;
  ty_value_id_t inputs[TY_OP_MAX_INPUTS];
  ty_value_id_t outputs[TY_OP_MAX_OUTPUTS];
  ty_value_id_t output_grads[TY_OP_MAX_OUTPUTS];
  bool wants[TY_OP_MAX_INPUTS];
  ty_value_id_t input_grads[TY_OP_MAX_INPUTS];
  uint32_t forward_nodes;
} grad_run_t;

static void grad_run_setup(grad_run_t *r, const grad_case_t *c,
                           int seed_output) {
  memset(r, 0, sizeof(*r));
  ty_tensor_desc_t descs[TY_OP_MAX_INPUTS];
  const ty_tensor_desc_t *ptrs[TY_OP_MAX_INPUTS];
  r->input_count = tyt_descs_parse(c->inputs, descs, ptrs, TY_OP_MAX_INPUTS);
  tyt_attrs_parse(c->attrs, &r->attrs);
  for (uint32_t i = 0; i < r->input_count; ++i) {
    r->inputs[i] = ptrs[i] ? mock_value(&r->b, ptrs[i]) : TY_VALUE_NONE;
  }
  ty_tensor_desc_t outs[TY_OP_MAX_OUTPUTS];
  ty_status_t status =
      ty_op_infer(c->op, ptrs, r->input_count, &r->attrs, outs, &r->output_count);
  if (status) fail_msg("%s(%s): %s", c->op, c->inputs, ty_status_message(status));
  status = mock_emit(&r->b, c->op, r->inputs, r->input_count, &r->attrs,
                     r->outputs, r->output_count);
  if (status) fail_msg("%s(%s): %s", c->op, c->inputs, ty_status_message(status));
  for (uint32_t j = 0; j < r->output_count; ++j) {
    r->output_grads[j] = (int)j == seed_output
                             ? mock_value(&r->b, &r->b.values[r->outputs[j]])
                             : TY_VALUE_NONE;
  }
  for (uint32_t i = 0; i < TY_OP_MAX_INPUTS; ++i) r->input_grads[i] = 12345;
  r->forward_nodes = r->b.node_count;
}

static ty_status_t grad_run(grad_run_t *r, const char *op) {
  const ty_op_def_t *def = ty_op_lookup(op);
  assert_non_null(def);
  assert_non_null(def->grad);
  ty_grad_ctx_t ctx = {
      .op = def->name,
      .attrs = &r->attrs,
      .input_count = r->input_count,
      .inputs = r->inputs,
      .output_count = r->output_count,
      .outputs = r->outputs,
      .output_grads = r->output_grads,
      .wants_input_grad = r->wants,
      .input_grads = r->input_grads,
      .builder = &r->b,
      .emit = mock_emit,
      .desc = mock_desc,
  };
  return def->grad(&ctx);
}

/* Whether input i can have a gradient: present and float. */
static bool grad_input_differentiable(const grad_run_t *r, uint32_t i) {
  return r->inputs[i] != TY_VALUE_NONE &&
         ty_dtype_is_float(r->b.values[r->inputs[i]].dtype);
}

/* Checks gradients after a run where `wanted` (or every input, when
 * wanted < 0) was asked for. */
static void grad_check_results(const grad_case_t *c, const grad_run_t *r,
                               int wanted) {
  for (uint32_t i = 0; i < r->input_count; ++i) {
    bool expect = grad_input_differentiable(r, i) && (wanted < 0 || (int)i == wanted);
    ty_value_id_t g = r->input_grads[i];
    if (!expect) {
      if (g != TY_VALUE_NONE) {
        fail_msg("%s(%s | %s): input %u got a gradient it should not (wanted %d)",
                 c->op, c->inputs, c->attrs, i, wanted);
      }
      continue;
    }
    if (g == TY_VALUE_NONE || g >= r->b.value_count) {
      fail_msg("%s(%s | %s): input %u has no gradient", c->op, c->inputs,
               c->attrs, i);
    }
    const ty_tensor_desc_t *x = &r->b.values[r->inputs[i]];
    const ty_tensor_desc_t *dx = &r->b.values[g];
    if (!tyt_desc_equal(x, dx)) {
      char want[64];
      snprintf(want, sizeof(want), "%s", tyt_desc_str(x));
      fail_msg("%s(%s | %s): input %u is %s but its gradient is %s", c->op,
               c->inputs, c->attrs, i, want, tyt_desc_str(dx));
    }
  }
  for (uint32_t n = r->forward_nodes; n < r->b.node_count; ++n) {
    assert_non_null(ty_op_lookup(r->b.nodes[n]));
  }
}

static bool grad_lse_differentiable(const char *op) {
  return strcmp(op, "attention") == 0 || strcmp(op, "attention_merge") == 0;
}

static void grad_check_case(const grad_case_t *c) {
  grad_run_t *r = test_malloc(sizeof(*r));

  /* Every input wanted. */
  grad_run_setup(r, c, 0);
  for (uint32_t i = 0; i < r->input_count; ++i) r->wants[i] = true;
  ty_status_t status = grad_run(r, c->op);
  if (status) fail_msg("%s(%s | %s): %s", c->op, c->inputs, c->attrs,
                       ty_status_message(status));
  grad_check_results(c, r, -1);
  if (c->must_emit) {
    char names[128];
    snprintf(names, sizeof(names), "%s", c->must_emit);
    for (char *save = NULL, *t = strtok_r(names, " ", &save); t;
         t = strtok_r(NULL, " ", &save)) {
      if (!mock_emitted(&r->b, t)) {
        fail_msg("%s(%s | %s): the gradient rule did not use %s", c->op,
                 c->inputs, c->attrs, t);
      }
    }
  }

  /* One input at a time: the others stay none. */
  for (uint32_t w = 0; w < r->input_count; ++w) {
    grad_run_setup(r, c, 0);
    r->wants[w] = true;
    status = grad_run(r, c->op);
    if (status) fail_msg("%s: %s", c->op, ty_status_message(status));
    grad_check_results(c, r, (int)w);
  }

  /* No input wanted, or no gradient flowing in: nothing is emitted. */
  grad_run_setup(r, c, 0);
  assert_null(grad_run(r, c->op));
  grad_check_results(c, r, (int)r->input_count);
  assert_int_equal(r->b.node_count, r->forward_nodes);
  grad_run_setup(r, c, -1);
  for (uint32_t i = 0; i < r->input_count; ++i) r->wants[i] = true;
  assert_null(grad_run(r, c->op));
  grad_check_results(c, r, (int)r->input_count);
  assert_int_equal(r->b.node_count, r->forward_nodes);

  /* A gradient into a saved output (norm statistics) is refused; the lse
   * of attention and attention_merge is differentiable (a merge consumes
   * it), so a gradient into it alone reaches every input. */
  for (uint32_t j = 1; j < r->output_count; ++j) {
    grad_run_setup(r, c, (int)j);
    for (uint32_t i = 0; i < r->input_count; ++i) r->wants[i] = true;
    status = grad_run(r, c->op);
    if (grad_lse_differentiable(c->op)) {
      if (status) fail_msg("%s: seed on output %u: %s", c->op, j, ty_status_message(status));
      grad_check_results(c, r, -1);
      continue;
    }
    assert_int_equal(ty_status_code(status), TY_CODE_INVALID_ARGUMENT);
    assert_non_null(strstr(ty_status_message(status), "not differentiable"));
    ty_status_free(status);
  }
  test_free(r);
}

/* ---- The cases ---- */

static const grad_case_t grad_cases[] = {
    {"embedding", "f32[10,4] i64[2,3]", "", "embedding_backward"},
    {"embedding", "bf16[10,4] i32[]", "", "embedding_backward"},

    {"add", "f32[2,3] f32[3]", "", "reduce_sum"},
    {"add", "f32[2,3] f32[2,3]", "", NULL},
    {"add", "f32[] f32[2,3]", "", "reduce_sum"},
    {"sub", "f32[2,1,3] f32[4,3]", "", "reduce_sum scale"},
    {"sub", "f32[4,1,3] f32[2,1]", "", "reduce_sum reshape scale"},
    {"mul", "bf16[2,3] bf16[2,1]", "", "mul reduce_sum"},
    {"div", "f32[2,3] f32[3]", "", "div mul reduce_sum scale"},
    {"div", "f64[1,3] f64[4,1]", "", "div mul reduce_sum"},
    {"scale", "f32[2,3]", "alpha=0.5", "scale"},
    {"broadcast_to", "f32[3,1]", "shape=[2,3,4]", "reduce_sum"},
    {"broadcast_to", "f32[3]", "shape=[3]", NULL},
    /* all_reduce's gradient is the same all_reduce of dy (ops/op_collective.c) */
    {"all_reduce", "f32[2,3]", "", "all_reduce"},
    {"all_reduce", "bf16[4]", "reduce='avg'", "all_reduce"},
    {"all_reduce", "f32[4]", "group='dp'", "all_reduce"},
    /* Megatron's f and g (tensor parallel, loss replicated): f's gradient
     * is an all_reduce over its group, g's the identity (no node), and g's
     * max a zero (a constant shift) */
    {"tp_copy", "f32[2,3]", "", "all_reduce"},
    {"tp_reduce", "f32[2,3]", "", NULL},
    {"tp_reduce", "f32[2,3]", "reduce='max'", "scale"},
    /* context parallel (the loss summed over the ranks): all_gather's
     * gradient is reduce_scatter of dy over the same group and axis, and
     * the reverse (ops/op_gather.c) */
    {"all_gather", "f32[2,4,3]", "group='cp' axis=1 parts=2", "reduce_scatter"},
    {"reduce_scatter", "f32[2,8,3]", "group='cp' axis=1 parts=2", "all_gather"},

    {"reduce_sum", "f32[2,3,4]", "axes=[1]", "reshape broadcast_to"},
    {"reduce_sum", "f32[2,3,4]", "axes=[0,2] keepdims=1", "broadcast_to"},
    {"reduce_sum", "f32[2,3,4]", "", "broadcast_to"},
    {"reduce_sum", "f32[]", "", NULL},
    {"reduce_mean", "f32[2,3,4]", "axes=[-1]", "scale broadcast_to"},
    {"reduce_mean", "bf16[5]", "", "scale broadcast_to"},
    {"reduce_sumsq", "f32[2,3]", "", "scale broadcast_to mul"},
    {"reduce_sumsq", "f32[2,3]", "axes=[0] keepdims=1", "mul"},

    {"layernorm", "f32[2,3,4] f32[4] f32[4]", "", "layernorm_backward"},
    {"layernorm", "f32[2,4] - f32[4]", "eps=1e-6", "layernorm_backward"},
    {"layernorm", "bf16[2,4]", "", "layernorm_backward"},
    {"rmsnorm", "f32[2,3,4] f32[4]", "", "rmsnorm_backward"},
    {"rmsnorm", "f64[4]", "", "rmsnorm_backward"},

    {"gelu", "f32[2,3]", "", "gelu_backward"},
    {"silu", "bf16[7]", "", "silu_backward"},
    {"swiglu", "f32[2,8] f32[2,8]", "", "swiglu_backward"},
    {"softmax", "f32[2,5]", "", "softmax_backward"},

    {"rope", "f32[2,5,4,8] i64[5]",
     "scaling='llama3' factor=8.0 theta=500000.0", "rope_backward"},
    {"attention", "f32[2,5,8,16] f32[2,5,2,16] f32[2,5,2,16]", "",
     "attention_backward"},
    {"attention", "bf16[1,2,4,8] bf16[1,9,4,8] bf16[1,9,4,8]", "window=3 scale=0.25",
     "attention_backward"},
    {"attention", "f32[1,6,4,8] f32[1,3,2,8] f32[1,3,2,8]", "causal=0", "attention_backward"},
    {"attention_merge", "f32[2,5,4,8] f32[2,4,5] f32[2,5,4,8] f32[2,4,5]", "",
     "attention_merge_backward"},
    {"attention_merge", "bf16[1,3,2,8] f32[1,2,3] bf16[1,3,2,8] f32[1,2,3]", "",
     "attention_merge_backward"},
    {"cross_entropy", "f32[2,3,50] i64[2,3]", "", "cross_entropy_backward"},
    {"cross_entropy", "f64[4,7] i32[4]", "", "cross_entropy_backward"},
    {"vocab_embedding", "f32[10,4] i64[2,3]", "vocab_start=10 vocab_valid=7",
     "vocab_embedding_backward"},
    {"vocab_max", "f32[2,3,13]", "vocab_valid=12", "vocab_max_backward"},
    {"vocab_ce_sums", "f32[2,3,13] i64[2,3] f32[2,3]", "vocab_start=13 vocab_valid=12",
     "vocab_ce_sums_backward"},
    {"vocab_ce_loss", "f32[2,3,2] i64[2,3]", "vocab_size=26", "vocab_ce_loss_backward"},
    {"linear_cross_entropy", "f32[2,3,8] f32[20,8] i64[2,3]", "chunk=4",
     "linear_cross_entropy_backward"},
    {"dropout", "f32[2,3] i64[2]", "p=0.1 stream=1", "dropout_backward"},

    {"cast", "f32[2,3]", "dtype='bf16'", "cast"},
    {"cast", "bf16[2]", "dtype='f32'", "cast"},
    {"cast", "f32[2]", "dtype='f32'", NULL},
    {"cast", "i64[3]", "dtype='f32'", NULL},
    {"reshape", "f32[2,3,4]", "shape=[6,-1]", "reshape"},
    {"transpose", "f32[2,3,4]", "perm=[2,0,1]", "transpose"},
    {"slice", "f32[4,6]", "starts=[1,2] sizes=[2,3]", "slice_backward"},
    {"concat", "f32[2,3] f32[2,5] f32[2,1]", "axis=-1", "slice"},
};

static void test_grad_cases(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(grad_cases) / sizeof(grad_cases[0]); ++i) {
    grad_check_case(&grad_cases[i]);
  }
}

/* matmul in every transpose combination over four batch layouts: plain,
 * broadcast batch on both sides, a batched a under a shared b (the folded
 * linear-layer path, with bias), and a shared a under a batched b. */
static void test_grad_matmul(void **state) {
  (void)state;
  static const struct {
    const char *a_lead, *b_lead; /* batch prefixes */
    bool bias;
    const char *must_emit;
  } layouts[] = {
      {"", "", false, "matmul"},
      {"2,1,", "5,", false, "matmul reduce_sum"},
      {"2,3,", "", true, "matmul reshape reduce_sum"},
      {"", "2,3,", false, "matmul reduce_sum"},
  };
  const int64_t m = 3, k = 4, n = 6;
  for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); ++l) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        char inputs[128], attrs[64];
        snprintf(inputs, sizeof(inputs), "f32[%s%lld,%lld] f32[%s%lld,%lld]%s",
                 layouts[l].a_lead, (long long)(ta ? k : m),
                 (long long)(ta ? m : k), layouts[l].b_lead,
                 (long long)(tb ? n : k), (long long)(tb ? k : n),
                 layouts[l].bias ? " f32[6]" : "");
        snprintf(attrs, sizeof(attrs), "trans_a=%d trans_b=%d", ta, tb);
        /* The fold applies only when a is untransposed. */
        const char *must = layouts[l].must_emit;
        if (l == 2 && ta) must = "matmul reduce_sum";
        const grad_case_t c = {"matmul", inputs, attrs, must};
        grad_check_case(&c);
      }
    }
  }
}

/* The linear-layer fold emits no reduction for db: one [K, N] matmul. */
static void test_grad_matmul_fold_avoids_batched_weight_gradient(void **state) {
  (void)state;
  const grad_case_t c = {"matmul", "f32[2,3,4,5] f32[5,6]", "", NULL};
  grad_run_t *r = test_malloc(sizeof(*r));
  grad_run_setup(r, &c, 0);
  r->wants[1] = true;
  assert_null(grad_run(r, c.op));
  grad_check_results(&c, r, 1);
  assert_false(mock_emitted(&r->b, "reduce_sum"));
  test_free(r);
}

/* Every op with a gradient rule has a case above. */
static void test_grad_cases_cover_every_differentiable_op(void **state) {
  (void)state;
  unsigned missing = 0;
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    const ty_op_def_t *def = ty_op_at(i);
    if (!def->grad || strcmp(def->name, "matmul") == 0) continue;
    bool found = false;
    for (size_t j = 0; j < sizeof(grad_cases) / sizeof(grad_cases[0]); ++j) {
      found = found || strcmp(grad_cases[j].op, def->name) == 0;
    }
    if (!found) {
      print_error("op %s has a gradient rule but no gradient case\n", def->name);
      ++missing;
    }
  }
  assert_int_equal(missing, 0);
}

/* Errors from emitted nodes carry the op whose gradient was being built. */
static ty_status_t failing_emit(void *builder, const char *op,
                                const ty_value_id_t *inputs,
                                uint32_t input_count, const ty_attrs_t *attrs,
                                ty_value_id_t *out_outputs, uint32_t out_count) {
  (void)builder, (void)inputs, (void)input_count, (void)attrs;
  (void)out_outputs, (void)out_count;
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "no room for %s", op);
}

static void test_grad_emit_errors_propagate(void **state) {
  (void)state;
  const grad_case_t c = {"gelu", "f32[2]", "", NULL};
  grad_run_t *r = test_malloc(sizeof(*r));
  grad_run_setup(r, &c, 0);
  r->wants[0] = true;
  const ty_op_def_t *def = ty_op_lookup("gelu");
  ty_grad_ctx_t ctx = {
      .op = def->name, .attrs = &r->attrs, .input_count = r->input_count,
      .inputs = r->inputs, .output_count = r->output_count,
      .outputs = r->outputs, .output_grads = r->output_grads,
      .wants_input_grad = r->wants, .input_grads = r->input_grads,
      .builder = &r->b, .emit = failing_emit, .desc = mock_desc,
  };
  ty_status_t status = def->grad(&ctx);
  assert_int_equal(ty_status_code(status), TY_CODE_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(ty_status_message(status),
                         "gradient of gelu: no room for gelu_backward"));
  ty_status_free(status);
  test_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grad_cases),
      cmocka_unit_test(test_grad_matmul),
      cmocka_unit_test(test_grad_matmul_fold_avoids_batched_weight_gradient),
      cmocka_unit_test(test_grad_cases_cover_every_differentiable_op),
      cmocka_unit_test(test_grad_emit_errors_propagate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
