/* Unit tests of the conformance kit: the case table covers the op registry
 * (and has a backward case exactly for ops with a gradient rule), every case
 * instantiates in each of its dtypes with inputs that respect the op's
 * constraints, NMSE and NaN detection, expected-failure lists, and whole case
 * runs on the reference, on a backend without graphs and on the faulty test
 * backend (a wrong kernel, a NaN, an out-of-bounds write, a written input). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/conform/conform.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"

static const ty_conform_case_t *find_case(const char *op, const char *name) {
  for (uint32_t i = 0; i < ty_conform_case_count(); ++i) {
    const ty_conform_case_t *c = ty_conform_case_at(i);
    if (strcmp(c->op, op) == 0 && strcmp(c->name, name) == 0) return c;
  }
  fail_msg("no conform case %s/%s", op, name);
  return NULL;
}

static void test_cases_cover_the_registry(void **state) {
  (void)state;
  for (uint32_t i = 0; i < ty_op_count(); ++i) {
    const ty_op_def_t *def = ty_op_at(i);
    uint32_t cases = 0, backward = 0;
    for (uint32_t k = 0; k < ty_conform_case_count(); ++k) {
      const ty_conform_case_t *c = ty_conform_case_at(k);
      if (strcmp(c->op, def->name) != 0) continue;
      cases++;
      backward += ty_conform_case_has_direction(c, TY_DTYPE_F32, TY_CONFORM_BACKWARD);
      if (!def->grad && c->bwd_bound) fail_msg("%s/%s: a backward bound for an op without gradient", c->op, c->name);
    }
    if (!cases) fail_msg("op %s has no conform case", def->name);
    if (def->grad && !backward) fail_msg("op %s has a gradient rule but no backward case", def->name);
  }
  for (uint32_t k = 0; k < ty_conform_case_count(); ++k) {
    const ty_conform_case_t *c = ty_conform_case_at(k);
    assert_non_null(ty_op_lookup(c->op));
    assert_non_null(c->bound);
    for (uint32_t j = 0; j < k; ++j) {
      const ty_conform_case_t *d = ty_conform_case_at(j);
      if (strcmp(c->op, d->op) == 0 && strcmp(c->name, d->name) == 0) {
        fail_msg("case %s/%s appears twice", c->op, c->name);
      }
    }
  }
  for (uint32_t b = 0; b < ty_conform_bound_count(); ++b) {
    const ty_conform_bound_t *bound = ty_conform_bound_at(b);
    assert_true(bound->why && strlen(bound->why) > 40); /* every bound says why */
  }
}

/* Every case builds both graphs in every dtype; inputs are rounded, never
 * all zero, and respect the generators' constraints. */
static void test_every_case_instantiates(void **state) {
  (void)state;
  const ty_dtype_t dtypes[] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16, TY_DTYPE_I32,
                               TY_DTYPE_I64};
  for (uint32_t k = 0; k < ty_conform_case_count(); ++k) {
    const ty_conform_case_t *c = ty_conform_case_at(k);
    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); ++d) {
      if (!(c->dtypes & TY_DTYPE_BIT(dtypes[d]))) continue;
      ty_conform_instance_t inst;
      TY_EXPECT_OK(ty_conform_instance_init(c, dtypes[d], 1234 + k, &inst));
      bool bwd = ty_conform_case_has_direction(c, dtypes[d], TY_CONFORM_BACKWARD);
      if (bwd != inst.has_backward) {
        fail_msg("%s/%s (%s): the table says backward=%d, the op's rule %d", c->op, c->name,
                 ty_dtype_name(dtypes[d]), bwd, inst.has_backward);
      }
      for (int dir = 0; dir < (bwd ? 2 : 1); ++dir) {
        for (int oracle = 0; oracle < 2; ++oracle) {
          ty_graph_t *g;
          TY_EXPECT_OK(ty_conform_instance_graph(&inst, (ty_conform_direction_t)dir, oracle, &g));
          ty_graph_destroy(g);
        }
      }
      for (uint32_t i = 0; i < inst.input_count; ++i) {
        const ty_conform_value_t *v = &inst.inputs[i];
        if (!v->present) continue;
        bool nonzero = v->count == 0;
        for (int64_t e = 0; e < v->count; ++e) {
          nonzero |= v->values[e] != 0.0;
          assert_true(isfinite(v->values[e]));
        }
        if (!nonzero && v->count > 1) fail_msg("%s/%s: input %u is all zeros", c->op, c->name, i);
      }
      ty_conform_instance_deinit(&inst);
    }
  }
}

/* `list=` spells structured index inputs out (the paged KV cache's block
 * tables); a list whose length is not the element count is refused. */
static void test_list_generator(void **state) {
  (void)state;
  ty_conform_instance_t inst;
  TY_EXPECT_OK(ty_conform_instance_init(find_case("paged_attention", "mixed-bs5-gqa"),
                                        TY_DTYPE_F32, ty_test_seed(), &inst));
  const double table[15] = {7, 2, 5, -1, -1, 0, -1, -1, -1, -1, 8, 3, 1, 6, -1};
  assert_int_equal(inst.inputs[3].count, 15);
  for (int e = 0; e < 15; ++e) assert_true(inst.inputs[3].values[e] == table[e]);
  ty_conform_instance_deinit(&inst);
  const ty_conform_case_t bad = {"paged_kv_write", "short-list",
                                 "F[2,4,1,2] F[3,1,2] i64[3]:list=1,2", "", NULL, NULL,
                                 TY_DTYPE_BIT(TY_DTYPE_F32), NULL, NULL};
  ty_status_t s = ty_conform_instance_init(&bad, TY_DTYPE_F32, 1, &inst);
  TY_EXPECT_STATUS(s, TY_CODE_INVALID_ARGUMENT, "lists 2 values for 3 elements");
  ty_conform_instance_deinit(&inst);
}

static void test_generators_respect_constraints(void **state) {
  (void)state;
  ty_conform_instance_t inst;
  TY_EXPECT_OK(ty_conform_instance_init(find_case("cross_entropy", "ignore-targets"),
                                        TY_DTYPE_BF16, ty_test_seed(), &inst));
  const ty_conform_value_t *t = &inst.inputs[1];
  int ignored = 0, counted = 0;
  for (int64_t e = 0; e < t->count; ++e) {
    assert_true(t->values[e] < 50);
    assert_true(t->values[e] >= 0 || t->values[e] == -1 || t->values[e] == -100);
    ignored += t->values[e] < 0;
    counted += t->values[e] >= 0;
  }
  assert_true(ignored > 0 && counted > 0);
  /* bf16 inputs are rounded to bf16. */
  const ty_conform_value_t *x = &inst.inputs[0];
  for (int64_t e = 0; e < x->count; ++e) {
    float f = (float)x->values[e];
    uint32_t bits;
    memcpy(&bits, &f, 4);
    assert_int_equal(bits & 0xFFFF, 0);
  }
  ty_conform_instance_deinit(&inst);

  TY_EXPECT_OK(ty_conform_instance_init(find_case("embedding", "gather"), TY_DTYPE_F32, 5,
                                        &inst));
  const ty_conform_value_t *ids = &inst.inputs[1];
  for (int64_t e = 0; e < ids->count; ++e) assert_true(ids->values[e] >= 0 && ids->values[e] < 50);
  assert_true(ids->values[0] == ids->values[ids->count - 1]); /* a repeat */
  ty_conform_instance_deinit(&inst);

  /* Derived inputs: softmax_backward's y is a softmax (rows sum to 1). */
  TY_EXPECT_OK(ty_conform_instance_init(find_case("softmax_backward", "rows"), TY_DTYPE_F32, 9,
                                        &inst));
  const ty_conform_value_t *y = &inst.inputs[1];
  for (int r = 0; r < 6; ++r) {
    double sum = 0;
    for (int e = 0; e < 50; ++e) sum += y->values[r * 50 + e];
    assert_true(fabs(sum - 1.0) < 1e-5);
  }
  ty_conform_instance_deinit(&inst);
}

static void test_seeds_replay(void **state) {
  (void)state;
  const ty_conform_case_t *c = find_case("matmul", "bias");
  ty_conform_instance_t a, b, other;
  TY_EXPECT_OK(ty_conform_instance_init(c, TY_DTYPE_F32, 77, &a));
  TY_EXPECT_OK(ty_conform_instance_init(c, TY_DTYPE_F32, 77, &b));
  TY_EXPECT_OK(ty_conform_instance_init(c, TY_DTYPE_F32, 78, &other));
  assert_memory_equal(a.inputs[0].values, b.inputs[0].values, a.inputs[0].count * sizeof(double));
  assert_memory_equal(a.seeds[0].values, b.seeds[0].values, a.seeds[0].count * sizeof(double));
  assert_memory_not_equal(a.inputs[0].values, other.inputs[0].values,
                          a.inputs[0].count * sizeof(double));
  ty_conform_instance_deinit(&a);
  ty_conform_instance_deinit(&b);
  ty_conform_instance_deinit(&other);
  assert_true(ty_conform_case_seed(1, c, TY_DTYPE_F32, TY_CONFORM_FORWARD) !=
              ty_conform_case_seed(1, c, TY_DTYPE_BF16, TY_CONFORM_FORWARD));
  assert_true(ty_conform_case_seed(1, c, TY_DTYPE_F32, TY_CONFORM_FORWARD) ==
              ty_conform_case_seed(1, c, TY_DTYPE_F32, TY_CONFORM_FORWARD));
}

static void test_nmse(void **state) {
  (void)state;
  double b[4] = {1, -2, 3, 0}, a[4] = {1, -2, 3, 0.1};
  int64_t bad;
  assert_true(fabs(ty_conform_nmse(a, b, 4, &bad) - 0.01 / 14.0) < 1e-15);
  assert_int_equal(bad, -1);
  a[2] = NAN;
  ty_conform_nmse(a, b, 4, &bad);
  assert_int_equal(bad, 2);
  a[2] = INFINITY;
  ty_conform_nmse(a, b, 4, &bad);
  assert_int_equal(bad, 2);
  double zeros[2] = {0, 0}, small[2] = {1e-30, 0};
  assert_true(ty_conform_nmse(zeros, zeros, 2, &bad) == 0.0);
  assert_true(ty_conform_nmse(small, zeros, 2, &bad) > 1.0); /* oracle zero, backend not */
}

static void test_xfail_lists(void **state) {
  (void)state;
  ty_conform_xfail_t *list;
  uint32_t n;
  TY_EXPECT_OK(ty_conform_xfails_parse("# known gaps\n\n"
                                       "rope* bf16 backward angle formed in bf16  \n"
                                       "attention/window * * windowed softmax off by one\n",
                                       &list, &n));
  assert_int_equal(n, 2);
  assert_string_equal(list[0].reason, "angle formed in bf16");
  assert_non_null(ty_conform_xfail_find(list, n, "rope_backward", "default", TY_DTYPE_BF16,
                                        TY_CONFORM_BACKWARD));
  assert_null(ty_conform_xfail_find(list, n, "rope", "default", TY_DTYPE_F32,
                                    TY_CONFORM_BACKWARD));
  assert_null(ty_conform_xfail_find(list, n, "rope", "default", TY_DTYPE_BF16,
                                    TY_CONFORM_FORWARD));
  assert_non_null(ty_conform_xfail_find(list, n, "attention", "window", TY_DTYPE_F16,
                                        TY_CONFORM_FORWARD));
  assert_null(ty_conform_xfail_find(list, n, "attention", "gqa", TY_DTYPE_F16,
                                    TY_CONFORM_FORWARD));
  free(list);
  TY_EXPECT_STATUS(ty_conform_xfails_parse("gelu f32 forward\n", &list, &n),
                   TY_CODE_INVALID_ARGUMENT, "line 1: expected 'PATTERN DTYPE DIRECTION REASON'");
  TY_EXPECT_STATUS(ty_conform_xfails_parse("\ngelu f8 forward why\n", &list, &n),
                   TY_CODE_INVALID_ARGUMENT, "line 2");
  TY_EXPECT_STATUS(ty_conform_xfails_parse("gelu f32 sideways why\n", &list, &n),
                   TY_CODE_INVALID_ARGUMENT, "direction 'sideways'");
}

/* ---- whole runs ---- */

typedef struct {
  ty_registry_t *registry;
} fixture_t;

static int setup(void **state) {
  /* The ABI 1.0 build of the template comes first: the "template" of these
   * tests is a backend that cannot run graphs. */
  const char *paths[] = {TY_TEST_TEMPLATE_ABI10_DIR, TY_TEST_PLUGIN_DIR,
                         TY_TEST_CONFORM_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths,
                                   .explicit_path_count = sizeof(paths) / sizeof(paths[0])};
  fixture_t *f = calloc(1, sizeof(*f));
  TY_EXPECT_OK(ty_registry_create(&options, &f->registry));
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  ty_registry_destroy(f->registry);
  free(f);
  return 0;
}

static ty_conform_result_t run_on(fixture_t *f, const char *uri, const char *op,
                                  const char *name, ty_dtype_t dtype,
                                  ty_conform_direction_t dir, const ty_conform_xfail_t *xfails,
                                  uint32_t xfail_count) {
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(f->registry, uri, &dev));
  ty_conform_options_t o = {.seed = ty_test_seed(), .xfails = xfails, .xfail_count = xfail_count};
  ty_conform_result_t r;
  TY_EXPECT_OK(ty_conform_run_case(dev, find_case(op, name), dtype, dir, &o, &r));
  ty_device_close(dev);
  return r;
}

static void test_reference_passes(void **state) {
  fixture_t *f = *state;
  ty_conform_result_t r = run_on(f, "cpu?kernels=reference", "attention", "kv-offset-gqa",
                                 TY_DTYPE_BF16, TY_CONFORM_BACKWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_PASS);
  assert_true(r.nmse <= r.bound && r.nmse > 0); /* bf16 rounding shows */
  r = run_on(f, "cpu?kernels=reference", "adamw_update", "step7-in-place", TY_DTYPE_F32,
             TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_PASS);
  ty_conform_xfail_t listed = {"adamw_update", "*", "*", "test entry"};
  r = run_on(f, "cpu?kernels=reference", "adamw_update", "step1", TY_DTYPE_F32,
             TY_CONFORM_FORWARD, &listed, 1);
  assert_int_equal(r.status, TY_CONFORM_XPASS);
  TY_EXPECT_CONTAINS(r.reason, "test entry");
}

static void test_backend_without_graphs_is_unsupported(void **state) {
  fixture_t *f = *state;
  ty_conform_result_t r = run_on(f, "template", "gelu", "wide", TY_DTYPE_F32,
                                 TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_UNSUPPORTED);
  TY_EXPECT_CONTAINS(r.reason, "cannot run graphs");
}

static void test_faults_are_caught(void **state) {
  fixture_t *f = *state;
  ty_conform_result_t r = run_on(f, "faulty", "gelu", "wide", TY_DTYPE_BF16,
                                 TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_PASS); /* no fault: the reference */
  r = run_on(f, "faulty?fault=perturb:gelu", "gelu", "wide", TY_DTYPE_BF16, TY_CONFORM_FORWARD,
             NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_FAIL);
  TY_EXPECT_CONTAINS(r.reason, "y0: NMSE");
  r = run_on(f, "faulty?fault=perturb:matmul", "matmul", "linear", TY_DTYPE_F32,
             TY_CONFORM_BACKWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_FAIL);
  r = run_on(f, "faulty?fault=nan:silu", "silu", "wide", TY_DTYPE_F16, TY_CONFORM_FORWARD,
             NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_FAIL);
  TY_EXPECT_CONTAINS(r.reason, "y0[0] is NaN");
  r = run_on(f, "faulty?fault=overflow:add", "add", "same-shape", TY_DTYPE_F32,
             TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_FAIL);
  TY_EXPECT_CONTAINS(r.reason, "guard bytes after it changed");
  r = run_on(f, "faulty?fault=skip:scale", "scale", "negative", TY_DTYPE_F32,
             TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_FAIL);
  TY_EXPECT_CONTAINS(r.reason, "is NaN");
  r = run_on(f, "faulty?fault=input:mul", "mul", "same-shape", TY_DTYPE_BF16,
             TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_FAIL);
  TY_EXPECT_CONTAINS(r.reason, "wrote into input 'x0'");
  r = run_on(f, "faulty?fault=unsupported:rope", "rope", "llama3", TY_DTYPE_F32,
             TY_CONFORM_FORWARD, NULL, 0);
  assert_int_equal(r.status, TY_CONFORM_UNSUPPORTED);
  TY_EXPECT_CONTAINS(r.reason, "faulty: rope is switched off");
  ty_conform_xfail_t known = {"gelu/wide", "bf16", "forward", "known slip"};
  r = run_on(f, "faulty?fault=perturb:gelu", "gelu", "wide", TY_DTYPE_BF16, TY_CONFORM_FORWARD,
             &known, 1);
  assert_int_equal(r.status, TY_CONFORM_XFAIL);
  TY_EXPECT_CONTAINS(r.reason, "expected failure (known slip)");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cases_cover_the_registry),
      cmocka_unit_test(test_every_case_instantiates),
      cmocka_unit_test(test_generators_respect_constraints),
      cmocka_unit_test(test_list_generator),
      cmocka_unit_test(test_seeds_replay),
      cmocka_unit_test(test_nmse),
      cmocka_unit_test(test_xfail_lists),
      cmocka_unit_test_setup_teardown(test_reference_passes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_backend_without_graphs_is_unsupported, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_faults_are_caught, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
