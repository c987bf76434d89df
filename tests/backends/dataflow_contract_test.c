/* The dataflow plugin's contract, each rejection triggered and its message
 * read: device options, per-op execution, state carried between calls,
 * unknown slots, undeclared hyperparameters, dtype and shape changes,
 * compile-time dropout, missing inputs, an inference graph asked to train,
 * outputs bound as inputs; and what it does run: the seed left unbound
 * (ones, reported), a whole train step in one execute that matches the cpu
 * plugin bit for bit, and the placement report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "dataflow_test_util.h"
#include "graph/ir/lower.h"
#include "hal/buffer.h"

static int setup(void **state) {
  *state = df_test_registry();
  return 0;
}

static int teardown(void **state) {
  ty_registry_destroy(*state);
  return 0;
}

static void expect_open_fails(ty_registry_t *r, const char *uri, const char *message) {
  ty_device_t *d = NULL;
  TY_EXPECT_STATUS(ty_device_open(r, uri, &d), TY_CODE_INVALID_ARGUMENT, message);
  assert_null(d);
}

static void test_device_options(void **state) {
  ty_registry_t *r = *state;
  expect_open_fails(r, "dataflow?tiles=3", "dataflow: option tiles='3' must be 1, 2 or 4");
  expect_open_fails(r, "dataflow?tiles=", "option tiles='' must be 1, 2 or 4");
  expect_open_fails(r, "dataflow?mem_per_tile=12Q", "option mem_per_tile='12Q' must be a size");
  expect_open_fails(r, "dataflow?mem_per_tile=1K", "from 64K to 4G");
  expect_open_fails(r, "dataflow?clock_mhz=0", "option clock_mhz='0' must be an integer in 1..10000");
  expect_open_fails(r, "dataflow?bandwidth_gbs=-1", "option bandwidth_gbs='-1' must be a number");
  expect_open_fails(r, "dataflow?dram=1", "option dram='1' must be a size from 1M");
  expect_open_fails(r, "dataflow?tile=2",
                    "unknown device option 'tile' (known: tiles, mem_per_tile, clock_mhz, "
                    "bandwidth_gbs, dram)");
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(r, "dataflow?tiles=2&mem_per_tile=512K&clock_mhz=800&"
                                 "bandwidth_gbs=12.5&dram=64M",
                              &d));
  const ty_abi_device_info_t *info = ty_device_info(d);
  assert_true(info->emulated);
  assert_int_equal(info->kind, TY_DEVICE_KIND_ACCELERATOR);
  assert_true(info->whole_graphs_only);
  /* DRAM is the dram option: a larger buffer is refused, not attempted. */
  ty_buffer_t *b = NULL;
  TY_EXPECT_STATUS(ty_buffer_alloc(d, 65ull << 20, &b), TY_CODE_RESOURCE_EXHAUSTED,
                   "needs 65 MiB of device DRAM, more than is left of its 64 MiB");
  TY_EXPECT_OK(ty_buffer_alloc(d, 1 << 20, &b));
  ty_buffer_free(b);
  ty_device_close(d);
}

static ty_device_t *open_dataflow(ty_registry_t *r) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(r, "dataflow", &d));
  return d;
}

static void test_per_op_execution_is_refused(void **state) {
  ty_device_t *d = open_dataflow(*state);
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t dims[2] = {4, 8};
  ty_value_id_t x, y;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, dims, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &y));
  TY_EXPECT_OK(ty_graph_set_output(g, y, "y"));
  ty_session_t *s = NULL;
  TY_EXPECT_STATUS(ty_session_create(d, g, NULL, &s), TY_CODE_FAILED_PRECONDITION,
                   "per-op execution: graph");
  TY_EXPECT_STATUS(ty_session_create(d, g, NULL, &s), TY_CODE_FAILED_PRECONDITION,
                   "the dataflow device runs whole train steps or inference graphs; wrap the "
                   "op in a train step");
  assert_null(s);
  ty_graph_destroy(g);
  ty_device_close(d);
}

static void test_state_between_calls_is_refused(void **state) {
  ty_device_t *d = open_dataflow(*state);
  df_test_graph_t g;
  df_test_graph_build(DF_TEST_ACCUMULATE, 0, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_STATUS(ty_session_create(d, g.graph, NULL, &s), TY_CODE_FAILED_PRECONDITION,
                   "updates state 'transformer.ln_f.weight.grad_accum' with add outside an "
                   "optimizer update");
  df_test_graph_free(&g);
  ty_device_close(d);
}

static void test_binding_rejections(void **state) {
  ty_device_t *d = open_dataflow(*state);
  df_test_graph_t g;
  df_test_graph_build(DF_TEST_TRAIN, 0.1, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  int64_t bt[2] = {DF_TEST_B, DF_TEST_T}, short_bt[2] = {1, DF_TEST_T};
  int64_t ids[DF_TEST_B * DF_TEST_T] = {0};
  int32_t ids32[DF_TEST_B * DF_TEST_T] = {0};
  float f = 0.5f;
  TY_EXPECT_STATUS(ty_session_bind(s, "bogus", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_INVALID_ARGUMENT, "has no slot named 'bogus' (inputs: tokens, rng, "
                                             "targets; hyperparameters: lr");
  TY_EXPECT_STATUS(ty_session_bind(s, "momentum", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_INVALID_ARGUMENT,
                   "'momentum' is not a hyperparameter of artifact");
  TY_EXPECT_STATUS(ty_session_bind(s, "momentum", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_INVALID_ARGUMENT,
                   "(it declares: lr, weight_decay, max_norm, beta1, beta2, eps, step)");
  TY_EXPECT_STATUS(ty_session_bind(s, "tokens", TY_DTYPE_I32, 2, bt, ids32, sizeof(ids32)),
                   TY_CODE_INVALID_ARGUMENT,
                   "slot 'tokens' (input) is i64[2,8] in artifact");
  TY_EXPECT_STATUS(ty_session_bind(s, "tokens", TY_DTYPE_I32, 2, bt, ids32, sizeof(ids32)),
                   TY_CODE_INVALID_ARGUMENT, "got i32[2,8]: dtypes are fixed at compile time");
  TY_EXPECT_STATUS(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, short_bt, ids, 8 * 8),
                   TY_CODE_INVALID_ARGUMENT,
                   "no dynamic shapes: slot 'tokens' (input) is i64[2,8] in artifact");
  TY_EXPECT_STATUS(ty_session_bind(s, "lr", TY_DTYPE_F32, 1, bt, &f, 4), TY_CODE_INVALID_ARGUMENT,
                   "slot 'lr' (hyperparameter) is f32[] in artifact");
  TY_EXPECT_STATUS(ty_session_bind(s, "dropout", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_FAILED_PRECONDITION,
                   "is fixed at compile time (p = 0.1); changing it needs a recompile");
  TY_EXPECT_STATUS(ty_session_bind(s, "loss", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_INVALID_ARGUMENT, "slot 'loss' is an output of artifact");
  /* A missing input: the session names it; the plugin does too when asked
   * to execute without it. */
  df_test_bind_step(&g, s, DF_TEST_TRAIN, true);
  TY_EXPECT_OK(ty_session_run(s));
  ty_session_destroy(s);
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_FAILED_PRECONDITION,
                   "input 'tokens' was never bound");
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
}

static void test_execute_checks_bindings_itself(void **state) {
  /* What the session never lets through still meets the plugin's checks
   * when a host calls the ABI directly. */
  ty_device_t *d = open_dataflow(*state);
  df_test_graph_t g;
  df_test_graph_build(DF_TEST_INFERENCE, 0, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  ty_backend_t *backend = ty_device_backend(d);
  ty_abi_status_t (*compile)(ty_abi_device_t *, const ty_abi_compile_args_t *,
                             ty_abi_executable_t **) = TY_BACKEND_ENTRY(backend, graph_compile);
  ty_abi_status_t (*execute)(ty_abi_executable_t *, const ty_abi_execute_args_t *) =
      TY_BACKEND_ENTRY(backend, executable_execute);
  void (*destroy)(ty_abi_executable_t *) = TY_BACKEND_ENTRY(backend, executable_destroy);
  ty_abi_option_t option = {"fast", "1"};
  ty_abi_executable_t *e = NULL;
  ty_buffer_t *buf = NULL;
  TY_EXPECT_OK(ty_buffer_alloc(d, 4096, &buf));
  ty_abi_binding_t bogus = {.name = "bogus", .buffer = ty_buffer_handle(buf), .offset = 0};
  ty_abi_execute_args_t args = {.struct_size = sizeof(args), .binding_count = 1,
                                .bindings = &bogus};
  /* The compiled executable of the session's graph, through the ABI. */
  ty_lowered_graph_t *lowered = NULL;
  TY_EXPECT_OK(ty_graph_lower(g.graph, &lowered));
  ty_abi_compile_args_t cargs = {.struct_size = sizeof(cargs),
                                 .graph = ty_lowered_graph_abi(lowered), .option_count = 1,
                                 .options = &option};
  TY_EXPECT_STATUS(ty_status_from_abi(compile(ty_device_handle(d), &cargs, &e)),
                   TY_CODE_INVALID_ARGUMENT, "unknown compile option 'fast'");
  cargs.option_count = 0;
  TY_EXPECT_OK(ty_status_from_abi(compile(ty_device_handle(d), &cargs, &e)));
  TY_EXPECT_STATUS(ty_status_from_abi(execute(e, &args)), TY_CODE_INVALID_ARGUMENT,
                   "has no slot named 'bogus'");
  ty_abi_binding_t tokens = {.name = "tokens", .buffer = ty_buffer_handle(buf), .offset = 4000};
  args.bindings = &tokens;
  TY_EXPECT_STATUS(ty_status_from_abi(execute(e, &args)), TY_CODE_INVALID_ARGUMENT,
                   "slot 'tokens' is i64[2,8] (128 bytes) but its binding holds 4096 bytes "
                   "from offset 4000");
  tokens.offset = 0;
  TY_EXPECT_STATUS(ty_status_from_abi(execute(e, &args)), TY_CODE_FAILED_PRECONDITION,
                   "is not bound: every input, hyperparameter and state is bound at each execute");
  ty_abi_binding_t twice[2] = {tokens, tokens};
  args.bindings = twice;
  args.binding_count = 2;
  TY_EXPECT_STATUS(ty_status_from_abi(execute(e, &args)), TY_CODE_INVALID_ARGUMENT,
                   "slot 'tokens' is bound twice");
  destroy(e);
  ty_lowered_graph_destroy(lowered);
  ty_buffer_free(buf);
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
}

static void test_inference_graph_cannot_train(void **state) {
  ty_device_t *d = open_dataflow(*state);
  df_test_graph_t g;
  df_test_graph_build(DF_TEST_INFERENCE, 0, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  float lr = 1e-3f;
  TY_EXPECT_STATUS(ty_session_bind(s, "lr", TY_DTYPE_F32, 0, NULL, &lr, 4),
                   TY_CODE_FAILED_PRECONDITION,
                   "is an inference graph, so it cannot train ('lr' is a training "
                   "hyperparameter)");
  df_test_bind_step(&g, s, DF_TEST_INFERENCE, true);
  TY_EXPECT_OK(ty_session_run(s));
  char *report = df_test_report(s);
  TY_EXPECT_CONTAINS(report, "(inference graph)");
  TY_EXPECT_CONTAINS(report, "runtime hyperparameters (inputs, never recompiled): none");
  free(report);
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
}

/* Runs one train step on `uri` and returns the loss; *out_report gets the
 * report when the backend gives one. */
static float one_step(ty_registry_t *r, const char *uri, bool seed_ones, char **out_report) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(r, uri, &d));
  df_test_graph_t g;
  df_test_graph_build(DF_TEST_TRAIN, 0.1, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  df_test_bind_step(&g, s, DF_TEST_TRAIN, seed_ones);
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_run(s)); /* a second step: the optimizer moved */
  float loss = df_test_loss(s);
  if (out_report) {
    *out_report = NULL;
    ty_status_t rs = ty_session_report(s, out_report);
    ty_status_free(rs);
  }
  assert_int_equal(ty_session_stats(s).runs, 2);
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
  return loss;
}

static void test_seed_unbound_is_ones_and_reported(void **state) {
  char *unbound = NULL, *bound = NULL;
  float a = one_step(*state, "dataflow", false, &unbound);
  float b = one_step(*state, "dataflow", true, &bound);
  assert_true(a == b); /* ones bound or unbound: the same bits */
  TY_EXPECT_CONTAINS(unbound, "loss-gradient seed 'loss_weights' unbound in 2 of 2 runs: ones "
                              "were used");
  TY_EXPECT_CONTAINS(bound, "loss-gradient seed 'loss_weights' unbound in 0 of 2 runs");
  free(unbound);
  free(bound);
  /* The cpu plugin (ABI 1.2, host executor) also takes an unbound seed. */
  assert_true(one_step(*state, "cpu", false, NULL) == a);
}

static void test_matches_cpu_bit_for_bit(void **state) {
  char *report = NULL;
  float df = one_step(*state, "dataflow?tiles=2&mem_per_tile=256K", true, &report);
  float cpu = one_step(*state, "cpu", true, NULL);
  assert_memory_equal(&df, &cpu, sizeof(float));
  TY_EXPECT_CONTAINS(report, "EMULATED device");
  TY_EXPECT_CONTAINS(report, "target:      tiles=2 mem_per_tile=256 KiB clock_mhz=1000");
  TY_EXPECT_CONTAINS(report, "(train step)");
  TY_EXPECT_CONTAINS(report, "  FWD ");
  TY_EXPECT_CONTAINS(report, "  BWD ");
  TY_EXPECT_CONTAINS(report, "  GRADNORM ");
  TY_EXPECT_CONTAINS(report, "  OPT ");
  TY_EXPECT_CONTAINS(report, "estimated cycles per step: ");
  TY_EXPECT_CONTAINS(report, "fixed at compile time: dropout p = 0.1");
  TY_EXPECT_CONTAINS(report, "runtime hyperparameters (inputs, never recompiled): lr, "
                             "weight_decay, max_norm, beta1, beta2, eps, step");
  TY_EXPECT_CONTAINS(report, "transformer.wte.weight.exp_avg ");
  TY_EXPECT_CONTAINS(report, " optimizer state ");
  TY_EXPECT_CONTAINS(report, " loss-gradient seed ");
  TY_EXPECT_CONTAINS(report, "host wall time");
  free(report);
  /* A chip too small for the working set reports the spill. */
  one_step(*state, "dataflow?tiles=1&mem_per_tile=64K", true, &report);
  TY_EXPECT_CONTAINS(report, "the working set does not fit on chip");
  free(report);
}

static void test_sgd_train_step_declares_momentum(void **state) {
  ty_device_t *d = open_dataflow(*state);
  df_test_graph_t g;
  df_test_graph_build(DF_TEST_TRAIN_SGD, 0, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  df_test_bind_step(&g, s, DF_TEST_TRAIN_SGD, true);
  TY_EXPECT_OK(ty_session_run(s));
  float f = 0.9f;
  TY_EXPECT_STATUS(ty_session_bind(s, "beta1", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_INVALID_ARGUMENT,
                   "'beta1' is not a hyperparameter of artifact");
  TY_EXPECT_STATUS(ty_session_bind(s, "dropout", TY_DTYPE_F32, 0, NULL, &f, 4),
                   TY_CODE_FAILED_PRECONDITION, "was compiled without dropout");
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_device_options),
      cmocka_unit_test(test_per_op_execution_is_refused),
      cmocka_unit_test(test_state_between_calls_is_refused),
      cmocka_unit_test(test_binding_rejections),
      cmocka_unit_test(test_execute_checks_bindings_itself),
      cmocka_unit_test(test_inference_graph_cannot_train),
      cmocka_unit_test(test_seed_unbound_is_ones_and_reported),
      cmocka_unit_test(test_matches_cpu_bit_for_bit),
      cmocka_unit_test(test_sgd_train_step_declares_momentum),
  };
  return cmocka_run_group_tests_name("dataflow contract", tests, setup, teardown);
}
