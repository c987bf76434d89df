/* End-to-end training steps against PyTorch: a 2-layer MLP and a 1-layer
 * GPT-2-style block are built with the graph builder, the train step is
 * derived (autodiff + clip_by_global_norm + AdamW), and five steps on the cpu
 * plugin must reproduce the losses, gradient norms and final parameters in
 * tests/fixtures/train_*.json (made by tests/fixtures/make_train_fixtures.py,
 * float64 PyTorch). f64 runs on the reference kernels; f32 on the default. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/ir/lower.h"
#include "graph/runtime/session.h"
#include "graph/ir/train_step.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"

#define MAX_PARAMS 32

/* Fixture access. The fixtures are ours and small; a malformed one fails the
 * test at the first missing field. */
static json_t *fixture_load(const char *file) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", TY_TEST_FIXTURE_DIR, file);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fail_msg("cannot read %s: %s (line %d)", path, err.text, err.line);
  assert_string_equal(json_string_value(json_object_get(root, "format")),
                      "trainyard-train-fixture");
  assert_int_equal(json_integer_value(json_object_get(root, "version")), 1);
  /* The f64 bounds assume PyTorch kept the moments as adamw_update does. */
  assert_string_equal(json_string_value(json_object_get(root, "adamw_moments_dtype")),
                      "float32");
  return root;
}

static json_t *field(const json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  if (!v) fail_msg("fixture: missing field '%s'", key);
  return v;
}

static double number(const json_t *obj, const char *key) {
  json_t *v = field(obj, key);
  assert_true(json_is_number(v));
  return json_number_value(v);
}

static uint32_t shape_of(const json_t *obj, int64_t *dims) {
  json_t *shape = field(obj, "shape");
  uint32_t rank = (uint32_t)json_array_size(shape);
  assert_true(rank <= TY_TENSOR_MAX_RANK);
  for (uint32_t i = 0; i < rank; ++i) dims[i] = json_integer_value(json_array_get(shape, i));
  return rank;
}

static size_t elems_of(uint32_t rank, const int64_t *dims) {
  size_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= (size_t)dims[i];
  return n;
}

/* The numbers of array `arr` as f32 or f64 (or i64 for TY_DTYPE_I64), in a
 * malloc'ed buffer of exactly `n` elements. */
static void *array_as(const json_t *arr, size_t n, ty_dtype_t dtype) {
  assert_int_equal(json_array_size(arr), n);
  void *out = malloc((n ? n : 1) * ty_dtype_size(dtype));
  assert_non_null(out);
  for (size_t i = 0; i < n; ++i) {
    json_t *v = json_array_get(arr, i);
    if (dtype == TY_DTYPE_I64) ((int64_t *)out)[i] = json_integer_value(v);
    else if (dtype == TY_DTYPE_F32) ((float *)out)[i] = (float)json_number_value(v);
    else ((double *)out)[i] = json_number_value(v);
  }
  return out;
}

static double value_at(const void *data, ty_dtype_t dtype, size_t i) {
  return dtype == TY_DTYPE_F32 ? ((const float *)data)[i] : ((const double *)data)[i];
}

/* Graph-building shorthands: every step of a model must succeed. */
typedef struct model_t {
  ty_graph_t *g;
  ty_dtype_t dtype;
} model_t;

static ty_value_id_t find(model_t *m, const char *name) {
  ty_value_id_t v;
  TY_EXPECT_OK(ty_graph_find(m->g, name, &v));
  return v;
}

static ty_value_id_t input(model_t *m, const char *name, ty_dtype_t dtype, uint32_t rank,
                           const int64_t *dims) {
  ty_value_id_t v;
  TY_EXPECT_OK(ty_graph_add_input(m->g, name, dtype, rank, dims, &v));
  return v;
}

static ty_value_id_t op1(model_t *m, const char *op, const ty_value_id_t *in, uint32_t n,
                         const ty_attrs_t *attrs) {
  ty_value_id_t v;
  TY_EXPECT_OK(ty_graph_add_node1(m->g, op, in, n, attrs, &v));
  return v;
}

static ty_value_id_t unary(model_t *m, const char *op, ty_value_id_t x) {
  return op1(m, op, &x, 1, NULL);
}

static ty_value_id_t binary(model_t *m, const char *op, ty_value_id_t a, ty_value_id_t b) {
  ty_value_id_t in[2] = {a, b};
  return op1(m, op, in, 2, NULL);
}

/* x @ w + b, w stored [out, in] when trans_b (nn.Linear) or [in, out]. */
static ty_value_id_t linear(model_t *m, ty_value_id_t x, const char *w, const char *b,
                            int trans_b) {
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&attrs, "trans_b", trans_b));
  ty_value_id_t in[3] = {x, find(m, w), b ? find(m, b) : TY_VALUE_NONE};
  return op1(m, "matmul", in, 3, &attrs);
}

static ty_value_id_t layernorm(model_t *m, ty_value_id_t x, const char *prefix) {
  char gname[64], bname[64];
  snprintf(gname, sizeof(gname), "%s.weight", prefix);
  snprintf(bname, sizeof(bname), "%s.bias", prefix);
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_float(&attrs, "eps", 1e-5));
  ty_value_id_t in[3] = {x, find(m, gname), find(m, bname)}, out[3];
  TY_EXPECT_OK(ty_graph_add_node(m->g, "layernorm", in, 3, &attrs, out, 3));
  return out[0];
}

static ty_value_id_t reshape(model_t *m, ty_value_id_t x, uint32_t rank, const int64_t *dims) {
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_ints(&attrs, "shape", dims, rank));
  return op1(m, "reshape", &x, 1, &attrs);
}

/* The MLP: inputs x [B, 8], targets [B] (negative = ignored) and mask [B]
 * (1 where the target counts); loss = Σ ce·mask / Σ mask, PyTorch's mean
 * with ignore_index. */
static ty_value_id_t build_mlp(model_t *m, const json_t *fx) {
  const json_t *inputs = field(fx, "inputs");
  int64_t xd[TY_TENSOR_MAX_RANK], td[TY_TENSOR_MAX_RANK];
  uint32_t xr = shape_of(field(inputs, "x"), xd), tr = shape_of(field(inputs, "targets"), td);
  ty_value_id_t x = input(m, "x", m->dtype, xr, xd);
  ty_value_id_t targets = input(m, "targets", TY_DTYPE_I64, tr, td);
  ty_value_id_t mask = input(m, "mask", m->dtype, tr, td);
  ty_value_id_t h = unary(m, "gelu", linear(m, x, "fc1.weight", "fc1.bias", 1));
  ty_value_id_t logits = linear(m, h, "fc2.weight", "fc2.bias", 1);
  ty_value_id_t ce = binary(m, "cross_entropy", logits, targets);
  ty_value_id_t total = unary(m, "reduce_sum", binary(m, "mul", ce, mask));
  return binary(m, "div", total, unary(m, "reduce_sum", mask));
}

static void bind_mlp(ty_session_t *s, ty_dtype_t dtype, const json_t *fx) {
  const json_t *inputs = field(fx, "inputs");
  int64_t xd[TY_TENSOR_MAX_RANK], td[TY_TENSOR_MAX_RANK];
  uint32_t xr = shape_of(field(inputs, "x"), xd), tr = shape_of(field(inputs, "targets"), td);
  size_t xn = elems_of(xr, xd), tn = elems_of(tr, td), es = ty_dtype_size(dtype);
  void *x = array_as(field(field(inputs, "x"), "data"), xn, dtype);
  int64_t *targets = array_as(field(field(inputs, "targets"), "data"), tn, TY_DTYPE_I64);
  double *mask64 = malloc(tn * sizeof(double));
  assert_non_null(mask64);
  for (size_t i = 0; i < tn; ++i) mask64[i] = targets[i] >= 0 ? 1.0 : 0.0;
  float mask32[16];
  assert_true(tn <= 16);
  for (size_t i = 0; i < tn; ++i) mask32[i] = (float)mask64[i];
  TY_EXPECT_OK(ty_session_bind(s, "x", dtype, xr, xd, x, xn * es));
  TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, tr, td, targets, tn * 8));
  TY_EXPECT_OK(ty_session_bind(s, "mask", dtype, tr, td,
                               dtype == TY_DTYPE_F32 ? (void *)mask32 : (void *)mask64,
                               tn * es));
  free(x);
  free(targets);
  free(mask64);
}

/* The block: GPT-2's layout (Conv1D weights [in, out]), lm head tied to wte,
 * positions a constant 0..T-1, loss the mean cross-entropy. */
static ty_value_id_t build_block(model_t *m, const json_t *fx) {
  const json_t *inputs = field(fx, "inputs");
  int64_t td[TY_TENSOR_MAX_RANK];
  uint32_t tr = shape_of(field(inputs, "tokens"), td);
  assert_int_equal(tr, 2);
  const int64_t B = td[0], T = td[1];
  const ty_graph_value_t *wte = ty_graph_value(m->g, find(m, "wte"));
  const int64_t C = wte->desc.dims[1], H = 2, D = C / H;
  ty_value_id_t tokens = input(m, "tokens", TY_DTYPE_I64, 2, td);
  ty_value_id_t targets = input(m, "targets", TY_DTYPE_I64, 2, td);
  int64_t pos[16];
  assert_true(T <= 16);
  for (int64_t t = 0; t < T; ++t) pos[t] = t;
  ty_value_id_t positions;
  TY_EXPECT_OK(ty_graph_add_constant(m->g, "positions", TY_DTYPE_I64, 1, &T, pos, &positions));

  ty_value_id_t x = binary(m, "add", binary(m, "embedding", find(m, "wte"), tokens),
                           binary(m, "embedding", find(m, "wpe"), positions));
  /* Attention: qkv [B, T, 3C] split into q, k, v [B, T, H, D]. */
  ty_value_id_t qkv = linear(m, layernorm(m, x, "ln1"), "attn.qkv.weight", "attn.qkv.bias", 0);
  ty_value_id_t heads[3];
  const int64_t bthd[4] = {B, T, H, D}, btc[3] = {B, T, C};
  for (int i = 0; i < 3; ++i) {
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    const int64_t starts[3] = {0, 0, i * C};
    TY_EXPECT_OK(ty_attrs_set_ints(&attrs, "starts", starts, 3));
    TY_EXPECT_OK(ty_attrs_set_ints(&attrs, "sizes", btc, 3));
    heads[i] = reshape(m, op1(m, "slice", &qkv, 1, &attrs), 4, bthd);
  }
  ty_value_id_t att[2];
  TY_EXPECT_OK(ty_graph_add_node(m->g, "attention", heads, 3, NULL, att, 2));
  ty_value_id_t y = reshape(m, att[0], 3, btc);
  x = binary(m, "add", x, linear(m, y, "attn.proj.weight", "attn.proj.bias", 0));
  /* MLP */
  ty_value_id_t h = unary(m, "gelu", linear(m, layernorm(m, x, "ln2"), "mlp.fc.weight",
                                            "mlp.fc.bias", 0));
  x = binary(m, "add", x, linear(m, h, "mlp.proj.weight", "mlp.proj.bias", 0));
  /* Tied lm head: logits = lnf(x) @ wte^T. */
  ty_value_id_t logits = linear(m, layernorm(m, x, "lnf"), "wte", NULL, 1);
  return unary(m, "reduce_mean", binary(m, "cross_entropy", logits, targets));
}

static void bind_block(ty_session_t *s, ty_dtype_t dtype, const json_t *fx) {
  (void)dtype;
  const json_t *inputs = field(fx, "inputs");
  const char *names[2] = {"tokens", "targets"};
  for (int i = 0; i < 2; ++i) {
    int64_t d[TY_TENSOR_MAX_RANK];
    uint32_t r = shape_of(field(inputs, names[i]), d);
    size_t n = elems_of(r, d);
    int64_t *ids = array_as(field(field(inputs, names[i]), "data"), n, TY_DTYPE_I64);
    TY_EXPECT_OK(ty_session_bind(s, names[i], TY_DTYPE_I64, r, d, ids, n * 8));
    free(ids);
  }
}

typedef struct tolerance_t {
  double loss, grad_norm, params; /* relative */
} tolerance_t;

typedef struct case_t {
  const char *file;
  const char *uri;
  ty_dtype_t dtype;
  ty_value_id_t (*build)(model_t *m, const json_t *fx);
  void (*bind)(ty_session_t *s, ty_dtype_t dtype, const json_t *fx);
  tolerance_t tol;
  /* The tensor-parallel global norm (train_step.h tp_split, every other
   * parameter marked split): at world 1 its tp_reduce is the identity, so
   * the norm, the clipping and the updates must be the plain step's. */
  bool tp_split;
} case_t;

static void bind_scalar_f32(ty_session_t *s, const char *name, double value) {
  float v = (float)value;
  TY_EXPECT_OK(ty_session_bind(s, name, TY_DTYPE_F32, 0, NULL, &v, sizeof(v)));
}

static double rel_err(double got, double want) {
  return want == 0.0 ? fabs(got) : fabs(got - want) / fabs(want);
}

static void run_case(const case_t *c) {
  json_t *fx = fixture_load(c->file);
  const json_t *params = field(fx, "params"), *steps = field(fx, "steps");
  const json_t *hyper = field(fx, "hyperparameters");
  const uint32_t np = (uint32_t)json_array_size(params);
  assert_true(np > 0 && np <= MAX_PARAMS);

  model_t m = {.dtype = c->dtype};
  TY_EXPECT_OK(ty_graph_create(&m.g));
  ty_value_id_t ids[MAX_PARAMS];
  bool decay[MAX_PARAMS], split[MAX_PARAMS];
  for (uint32_t i = 0; i < np; ++i) {
    const json_t *p = json_array_get(params, i);
    int64_t d[TY_TENSOR_MAX_RANK];
    uint32_t r = shape_of(p, d);
    TY_EXPECT_OK(ty_graph_add_state(m.g, json_string_value(field(p, "name")), c->dtype, r, d,
                                    &ids[i]));
    decay[i] = json_is_true(field(p, "decay"));
    split[i] = i % 2 == 0;
  }
  ty_train_step_params_t tp = {
      .loss = c->build(&m, fx),
      .loss_seed = TY_VALUE_NONE,
      .params = ids,
      .decay = decay,
      .param_count = np,
      .optimizer = TY_OPTIMIZER_ADAMW,
      .tp_split = c->tp_split ? split : NULL,
  };
  TY_EXPECT_OK(ty_graph_build_train_step(m.g, &tp));

  ty_registry_t *reg = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(reg, c->uri, &dev));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, m.g, NULL, &s));
  const size_t es = ty_dtype_size(c->dtype);
  for (uint32_t i = 0; i < np; ++i) {
    const json_t *p = json_array_get(params, i);
    int64_t d[TY_TENSOR_MAX_RANK];
    uint32_t r = shape_of(p, d);
    size_t n = elems_of(r, d);
    void *init = array_as(field(p, "initial"), n, c->dtype);
    TY_EXPECT_OK(ty_session_bind(s, json_string_value(field(p, "name")), c->dtype, r, d, init,
                                 n * es));
    free(init);
  }
  c->bind(s, c->dtype, fx);
  const char *hyper_names[6] = {"lr", "weight_decay", "max_norm", "beta1", "beta2", "eps"};
  for (int i = 0; i < 6; ++i) {
    double v = number(hyper, hyper_names[i]);
    assert_true((double)(float)v == v); /* the fixture used the f32 values */
    bind_scalar_f32(s, hyper_names[i], v);
  }

  /* Five steps: loss (before the update) and pre-clip norm per step. */
  double worst_loss = 0, worst_norm = 0;
  int clipped = 0;
  const size_t nsteps = json_array_size(steps);
  assert_true(nsteps >= 1);
  for (size_t k = 0; k < nsteps; ++k) {
    const json_t *st = json_array_get(steps, k);
    int64_t step = json_integer_value(field(st, "step"));
    assert_int_equal(step, (int64_t)k + 1);
    TY_EXPECT_OK(ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &step, sizeof(step)));
    TY_EXPECT_OK(ty_session_run(s));
    union {
      float f32;
      double f64;
    } loss_raw;
    float norm = 0;
    TY_EXPECT_OK(ty_session_read(s, "loss", &loss_raw, es));
    double loss = c->dtype == TY_DTYPE_F32 ? (double)loss_raw.f32 : loss_raw.f64;
    TY_EXPECT_OK(ty_session_read(s, "grad_norm", &norm, sizeof(norm)));
    double el = rel_err(loss, number(st, "loss"));
    double en = rel_err(norm, number(st, "grad_norm"));
    clipped += json_is_true(field(st, "clipped"));
    print_message("  %s %s step %lld: loss %.17g (rel err %.2e), grad norm %.9g (rel err %.2e)\n",
                  c->file, c->uri, (long long)step, loss, el, (double)norm, en);
    if (!(el <= c->tol.loss) || !(en <= c->tol.grad_norm)) {
      fail_msg("%s on %s step %lld: loss %.17g vs %.17g (rel %.3e, tol %.1e), grad norm "
               "%.9g vs %.17g (rel %.3e, tol %.1e)",
               c->file, c->uri, (long long)step, loss, number(st, "loss"), el, c->tol.loss,
               (double)norm, number(st, "grad_norm"), en, c->tol.grad_norm);
    }
    worst_loss = fmax(worst_loss, el);
    worst_norm = fmax(worst_norm, en);
  }
  /* A fixture whose norms never exceed max_norm would not test clipping, and
   * one that always clips would not test the unclipped path. */
  assert_true(clipped >= 1 && clipped < (int)nsteps);

  /* Final parameters. The error of a tensor is max|got - want| / max|want|:
   * Adam moves every element by about lr whatever its size, so elements
   * near zero carry absolute, not relative, error. Elements whose exact
   * gradient is zero ("zero_grad": the attention key bias) follow rounding
   * noise, which Adam scales up to steps of about lr: outside f64 they are
   * only held to that, |got - want| <= 2·lr·steps (f64 holds them to the
   * tensor bound as well). */
  const double zero_grad_bound = 2.0 * number(hyper, "lr") * (double)nsteps;
  double worst_param = 0, worst_elem = 0, worst_zero_grad = 0;
  const char *worst_name = "";
  for (uint32_t i = 0; i < np; ++i) {
    const json_t *p = json_array_get(params, i);
    const char *name = json_string_value(field(p, "name"));
    int64_t d[TY_TENSOR_MAX_RANK];
    size_t n = elems_of(shape_of(p, d), d);
    double *want = array_as(field(p, "final"), n, TY_DTYPE_F64);
    double *init = array_as(field(p, "initial"), n, TY_DTYPE_F64);
    bool *noise = calloc(n, sizeof(bool));
    void *got = malloc(n * es);
    assert_non_null(got);
    assert_non_null(noise);
    const json_t *zero_grad = field(p, "zero_grad");
    for (size_t z = 0; z < json_array_size(zero_grad); ++z) {
      json_int_t j = json_integer_value(json_array_get(zero_grad, z));
      assert_true(j >= 0 && (size_t)j < n);
      noise[j] = true;
    }
    TY_EXPECT_OK(ty_session_read(s, name, got, n * es));
    double max_diff = 0, max_want = 0, max_moved = 0;
    for (size_t j = 0; j < n; ++j) {
      double g = value_at(got, c->dtype, j);
      if (!isfinite(g)) fail_msg("%s: %s[%zu] is %g", c->uri, name, j, g);
      max_want = fmax(max_want, fabs(want[j]));
      max_moved = fmax(max_moved, fabs(want[j] - init[j]));
      if (noise[j]) {
        worst_zero_grad = fmax(worst_zero_grad, fabs(g - want[j]));
        if (!(fabs(g - want[j]) <= zero_grad_bound)) {
          fail_msg("%s on %s: final %s[%zu] (zero gradient) moved %.3e, more than Adam's "
                   "%.3e",
                   c->file, c->uri, name, j, fabs(g - want[j]), zero_grad_bound);
        }
        if (c->dtype != TY_DTYPE_F64) continue;
      }
      max_diff = fmax(max_diff, fabs(g - want[j]));
      if (fabs(want[j]) > 1e-3) worst_elem = fmax(worst_elem, rel_err(g, want[j]));
    }
    assert_true(max_moved > 0); /* every parameter trained */
    double e = max_diff / max_want;
    if (e > worst_param) {
      worst_param = e;
      worst_name = name;
    }
    if (!(e <= c->tol.params)) {
      fail_msg("%s on %s: final %s differs by %.3e (relative to its max |value| %.3g; tol "
               "%.1e)",
               c->file, c->uri, name, e, max_want, c->tol.params);
    }
    free(want);
    free(init);
    free(noise);
    free(got);
  }
  print_message("%s on %s (%s): max rel err loss %.2e, grad norm %.2e, final params %.2e "
                "(%s; elementwise where |p| > 1e-3: %.2e; zero-gradient elements off by "
                "%.2e absolute); clipped on %d of %zu steps\n",
                c->file, c->uri, ty_dtype_name(c->dtype), worst_loss, worst_norm, worst_param,
                worst_name, worst_elem, worst_zero_grad, clipped, nsteps);

  ty_session_destroy(s);
  ty_device_close(dev);
  ty_registry_destroy(reg);
  ty_graph_destroy(m.g);
  json_decref(fx);
}

/* f64 on the reference kernels, where only rounding order differs from
 * PyTorch (measured: loss 1e-15, params 4e-16, or 6e-11 counting the
 * zero-gradient key bias, whose noise Adam divides by eps). The gradient
 * norm is an f32 output of clip_by_global_norm (ops.md), so it is held to
 * f32 rounding, 2^-24 relative; the clipping itself runs in f64. The
 * fixture stores AdamW's moments rounded to f32 as adamw_update does. */
static const tolerance_t kF64 = {.loss = 1e-12, .grad_norm = 6e-8, .params = 1e-9};
/* f32 storage between ops; the bound leaves room for fast kernels that sum
 * in another order (measured with the reference kernels: about 2e-7). */
static const tolerance_t kF32 = {.loss = 1e-4, .grad_norm = 1e-4, .params = 1e-4};

static void test_mlp_f64_reference(void **state) {
  (void)state;
  case_t c = {"train_mlp.json", "cpu?kernels=reference", TY_DTYPE_F64, build_mlp, bind_mlp, kF64,
              false};
  run_case(&c);
}

static void test_mlp_f32_cpu(void **state) {
  (void)state;
  case_t c = {"train_mlp.json", "cpu", TY_DTYPE_F32, build_mlp, bind_mlp, kF32, false};
  run_case(&c);
}

static void test_block_f64_reference(void **state) {
  (void)state;
  case_t c = {"train_block.json", "cpu?kernels=reference", TY_DTYPE_F64, build_block,
              bind_block, kF64, false};
  run_case(&c);
}

static void test_block_f32_cpu(void **state) {
  (void)state;
  case_t c = {"train_block.json", "cpu", TY_DTYPE_F32, build_block, bind_block, kF32, false};
  run_case(&c);
}

static void test_block_f32_cpu_tp_norm(void **state) {
  (void)state;
  case_t c = {"train_block.json", "cpu", TY_DTYPE_F32, build_block, bind_block, kF32, true};
  run_case(&c);
}

/* A cpu session of `first`, and one of `second` sharing its state (a
 * gradient graph and its optimizer graph). */
typedef struct {
  ty_registry_t *reg;
  ty_device_t *dev;
  ty_session_t *first, *second;
} session_pair_t;

static void open_pair(const ty_graph_t *first, const ty_graph_t *second, session_pair_t *p) {
  p->reg = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  TY_EXPECT_OK(ty_device_open(p->reg, "cpu", &p->dev));
  TY_EXPECT_OK(ty_session_create(p->dev, first, NULL, &p->first));
  ty_session_options_t so = {.share_state_with = p->first};
  TY_EXPECT_OK(ty_session_create(p->dev, second, &so, &p->second));
}

static void close_pair(session_pair_t *p) {
  ty_session_destroy(p->second);
  ty_session_destroy(p->first);
  ty_device_close(p->dev);
  ty_registry_destroy(p->reg);
}

/* SGD's hyperparameters: lr 0.5, no decay or momentum, clipped to norm 1. */
static void bind_sgd(ty_session_t *s) {
  bind_scalar_f32(s, "lr", 0.5);
  bind_scalar_f32(s, "weight_decay", 0.0);
  bind_scalar_f32(s, "momentum", 0.0);
  bind_scalar_f32(s, "max_norm", 1.0);
}

/* A pipeline stage's reduce graph (train_step.h ty_graph_build_grad_reduce)
 * at world 1, where its all_reduce ops are the identity: the share is the
 * counted accumulators' squares, and the optimizer graph fed that squared
 * norm (norm_sq_input) clips by it: norm 5 (3-4-5 over two tensors, the
 * uncounted third left out), max_norm 1, so SGD without momentum moves each
 * weight by lr x g / 5. */
static void test_pipeline_reduce_and_clip(void **state) {
  (void)state;
  int64_t two[1] = {2}, one[1] = {1};
  ty_tensor_desc_t d[3] = {{.name = "a", .dtype = TY_DTYPE_F32, .rank = 1},
                           {.name = "b", .dtype = TY_DTYPE_F32, .rank = 1},
                           {.name = "c", .dtype = TY_DTYPE_F32, .rank = 1}};
  d[0].dims[0] = two[0];
  d[1].dims[0] = one[0];
  d[2].dims[0] = one[0];
  const bool tied[3] = {false, true, false}, counted[3] = {true, true, false};
  ty_grad_reduce_params_t r = {.sum_group = "dp", .tied_group = "embed", .tied = tied,
                               .counted = counted};
  ty_graph_t *red, *opt;
  bool empty = true, share = false;
  TY_EXPECT_OK(ty_graph_create(&red));
  TY_EXPECT_OK(ty_graph_build_grad_reduce(red, d, 3, &r, &empty, &share));
  assert_false(empty);
  assert_true(share);
  uint32_t sums = 0, embed = 0;
  for (uint32_t i = 0; i < ty_graph_node_count(red); ++i) {
    const ty_graph_node_t *n = ty_graph_node(red, i);
    if (strcmp(n->op, "all_reduce") != 0) continue;
    const char *group = "";
    TY_EXPECT_OK(ty_attrs_get_string(&n->attrs, "group", "", &group));
    sums += !strcmp(group, "dp");
    embed += !strcmp(group, "embed");
  }
  assert_int_equal(sums, 3);  /* every accumulator over the replicas */
  assert_int_equal(embed, 1); /* the tied one over its two stages too */
  assert_int_equal(ty_graph_update_count(red), 3);
  /* nothing to sum or count: an empty graph, no share */
  const bool none[3] = {false, false, false};
  ty_grad_reduce_params_t idle = {.tied_group = "embed", .tied = none, .counted = none};
  ty_graph_t *nothing;
  TY_EXPECT_OK(ty_graph_create(&nothing));
  TY_EXPECT_OK(ty_graph_build_grad_reduce(nothing, d, 3, &idle, &empty, &share));
  assert_true(empty);
  assert_false(share);
  assert_int_equal(ty_graph_node_count(nothing), 0);
  ty_graph_destroy(nothing);

  ty_train_step_params_t step = {.optimizer = TY_OPTIMIZER_SGD, .norm_sq_input = true};
  TY_EXPECT_OK(ty_graph_create(&opt));
  TY_EXPECT_OK(ty_graph_build_optimizer_step_ex(opt, d, NULL, 3, &step));
  session_pair_t pair;
  open_pair(red, opt, &pair);
  ty_session_t *s_red = pair.first, *s_opt = pair.second;
  const float ga[2] = {3.0f, 0.0f}, gb[1] = {4.0f}, gc[1] = {100.0f};
  TY_EXPECT_OK(ty_session_bind(s_red, "a.grad_accum", TY_DTYPE_F32, 1, two, ga, sizeof(ga)));
  TY_EXPECT_OK(ty_session_bind(s_red, "b.grad_accum", TY_DTYPE_F32, 1, one, gb, sizeof(gb)));
  TY_EXPECT_OK(ty_session_bind(s_red, "c.grad_accum", TY_DTYPE_F32, 1, one, gc, sizeof(gc)));
  TY_EXPECT_OK(ty_session_run(s_red));
  float sq = 0;
  TY_EXPECT_OK(ty_session_read(s_red, "grad_norm_sq_share", &sq, sizeof(sq)));
  assert_float_equal(sq, 25.0f, 1e-5f);
  const float wa[2] = {1.0f, 1.0f}, wb[1] = {1.0f}, wc[1] = {1.0f};
  TY_EXPECT_OK(ty_session_bind(s_opt, "a", TY_DTYPE_F32, 1, two, wa, sizeof(wa)));
  TY_EXPECT_OK(ty_session_bind(s_opt, "b", TY_DTYPE_F32, 1, one, wb, sizeof(wb)));
  TY_EXPECT_OK(ty_session_bind(s_opt, "c", TY_DTYPE_F32, 1, one, wc, sizeof(wc)));
  bind_sgd(s_opt);
  bind_scalar_f32(s_opt, "grad_norm_sq", sq);
  TY_EXPECT_OK(ty_session_run(s_opt));
  float norm = 0, a[2], b[1], c[1];
  TY_EXPECT_OK(ty_session_read(s_opt, "grad_norm", &norm, sizeof(norm)));
  TY_EXPECT_OK(ty_session_read(s_opt, "a", a, sizeof(a)));
  TY_EXPECT_OK(ty_session_read(s_opt, "b", b, sizeof(b)));
  TY_EXPECT_OK(ty_session_read(s_opt, "c", c, sizeof(c)));
  const float k = 1.0f / (5.0f + 1e-6f); /* min(1, max_norm / (norm + 1e-6)) */
  assert_float_equal(norm, 5.0f, 1e-5f);
  assert_float_equal(a[0], 1.0f - 0.5f * 3.0f * k, 1e-5f);
  assert_float_equal(a[1], 1.0f, 1e-6f);
  assert_float_equal(b[0], 1.0f - 0.5f * 4.0f * k, 1e-5f);
  assert_float_equal(c[0], 1.0f - 0.5f * 100.0f * k, 1e-4f);
  close_pair(&pair);
  ty_graph_destroy(opt);
  ty_graph_destroy(red);
}

/* The ops of `op` over `group` in a graph (lowered: the ones that run). */
static uint32_t count_group_ops(const ty_graph_t *g, const char *op, const char *group,
                                bool lowered) {
  uint32_t count = 0;
  if (lowered) {
    ty_lowered_graph_t *l;
    TY_EXPECT_OK(ty_graph_lower(g, &l));
    const ty_abi_graph_t *abi = ty_lowered_graph_abi(l);
    for (uint32_t i = 0; i < abi->node_count; ++i) {
      if (strcmp(abi->nodes[i].op, op) != 0) continue;
      for (uint32_t a = 0; a < abi->nodes[i].attr_count; ++a) {
        const ty_abi_attr_t *at = &abi->nodes[i].attrs[a];
        if (!strcmp(at->name, "group") && at->s && !strcmp(at->s, group)) ++count;
      }
    }
    ty_lowered_graph_destroy(l);
    return count;
  }
  for (uint32_t i = 0; i < ty_graph_node_count(g); ++i) {
    const ty_graph_node_t *n = ty_graph_node(g, i);
    const char *on = "";
    if (strcmp(n->op, op) != 0) continue;
    TY_EXPECT_OK(ty_attrs_get_string(&n->attrs, "group", "", &on));
    count += !strcmp(on, group);
  }
  return count;
}

/* ZeRO-2 (train_step.h grad_group, accumulate, norm_group) at world 1,
 * where all_reduce is the identity. The gradient graph of loss =
 * sum(a^2) + sum(b^2) sums both gradients over "dp" and keeps a's alone
 * (this rank's share): b's all_reduce has no reader here and still runs
 * (another rank would wait for it), and b gets no accumulator. The
 * optimizer graph of the share {a} sums its squares over "dp" once and
 * clips by that norm: g = 2a = (6, 8), norm 10, max_norm 1, SGD lr 0.5. */
static void test_zero2_share(void **state) {
  (void)state;
  int64_t two[1] = {2}, one[1] = {1};
  ty_graph_t *g, *opt;
  ty_value_id_t params[2], sq[2], loss;
  TY_EXPECT_OK(ty_graph_create(&g));
  TY_EXPECT_OK(ty_graph_add_state(g, "a", TY_DTYPE_F32, 1, two, &params[0]));
  TY_EXPECT_OK(ty_graph_add_state(g, "b", TY_DTYPE_F32, 1, one, &params[1]));
  for (int i = 0; i < 2; ++i) {
    TY_EXPECT_OK(ty_graph_add_node1(g, "reduce_sumsq", &params[i], 1, NULL, &sq[i]));
  }
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", sq, 2, NULL, &loss));
  const bool mine[2] = {true, false};
  ty_train_step_params_t p = {.loss = loss, .loss_seed = TY_VALUE_NONE, .params = params,
                              .param_count = 2, .optimizer = TY_OPTIMIZER_SGD,
                              .mode = TY_TRAIN_STEP_ACCUMULATE, .accumulate = mine,
                              .grad_group = "dp"};
  TY_EXPECT_OK(ty_graph_build_train_step(g, &p));
  assert_int_equal(count_group_ops(g, "all_reduce", "dp", false), 2);
  assert_int_equal(count_group_ops(g, "all_reduce", "dp", true), 2); /* b's kept unread */
  assert_int_equal(ty_graph_update_count(g), 1);                       /* a.grad_accum only */

  /* a share without the group, or outside the ACCUMULATE mode: refused */
  ty_graph_t *bad;
  ty_train_step_params_t q = p;
  q.grad_group = NULL;
  TY_EXPECT_OK(ty_graph_create(&bad));
  TY_EXPECT_STATUS(ty_graph_build_train_step(bad, &q), TY_CODE_INVALID_ARGUMENT, "grad_group");
  ty_graph_destroy(bad);
  q = p;
  q.mode = TY_TRAIN_STEP_FUSED;
  TY_EXPECT_OK(ty_graph_create(&bad));
  TY_EXPECT_STATUS(ty_graph_build_train_step(bad, &q), TY_CODE_INVALID_ARGUMENT, "ZeRO-2");
  ty_graph_destroy(bad);

  ty_tensor_desc_t share = {.name = "a", .dtype = TY_DTYPE_F32, .rank = 1, .dims = {2}};
  ty_train_step_params_t step = {.optimizer = TY_OPTIMIZER_SGD, .norm_group = "dp"};
  TY_EXPECT_OK(ty_graph_create(&opt));
  TY_EXPECT_OK(ty_graph_build_optimizer_step_ex(opt, &share, NULL, 1, &step));
  assert_int_equal(count_group_ops(opt, "all_reduce", "dp", true), 1);
  const bool update[1] = {true};
  ty_train_step_params_t masked = step;
  masked.update = update;
  TY_EXPECT_OK(ty_graph_create(&bad));
  TY_EXPECT_STATUS(ty_graph_build_optimizer_step_ex(bad, &share, NULL, 1, &masked),
                   TY_CODE_INVALID_ARGUMENT, "norm_group");
  ty_graph_destroy(bad);

  session_pair_t pair;
  open_pair(g, opt, &pair);
  ty_session_t *s_train = pair.first, *s_opt = pair.second;
  const float wa[2] = {3.0f, 4.0f}, wb[1] = {5.0f}, zero[2] = {0.0f, 0.0f};
  TY_EXPECT_OK(ty_session_bind(s_train, "a", TY_DTYPE_F32, 1, two, wa, sizeof(wa)));
  TY_EXPECT_OK(ty_session_bind(s_train, "b", TY_DTYPE_F32, 1, one, wb, sizeof(wb)));
  TY_EXPECT_OK(ty_session_bind(s_train, "a.grad_accum", TY_DTYPE_F32, 1, two, zero, sizeof(zero)));
  ty_tensor_desc_t none;
  TY_EXPECT_STATUS(ty_session_value_desc(s_train, "b.grad_accum", &none), TY_CODE_NOT_FOUND,
                   NULL);
  TY_EXPECT_OK(ty_session_run(s_train));
  float acc[2];
  TY_EXPECT_OK(ty_session_read(s_train, "a.grad_accum", acc, sizeof(acc)));
  assert_float_equal(acc[0], 6.0f, 1e-6f);
  assert_float_equal(acc[1], 8.0f, 1e-6f);
  bind_sgd(s_opt);
  TY_EXPECT_OK(ty_session_run(s_opt));
  float norm = 0, a[2];
  TY_EXPECT_OK(ty_session_read(s_opt, "grad_norm", &norm, sizeof(norm)));
  TY_EXPECT_OK(ty_session_read(s_opt, "a", a, sizeof(a)));
  TY_EXPECT_OK(ty_session_read(s_opt, "a.grad_accum", acc, sizeof(acc)));
  const float k = 1.0f / (10.0f + 1e-6f);
  assert_float_equal(norm, 10.0f, 1e-5f);
  assert_float_equal(a[0], 3.0f - 0.5f * 6.0f * k, 1e-5f);
  assert_float_equal(a[1], 4.0f - 0.5f * 8.0f * k, 1e-5f);
  assert_float_equal(acc[0], 0.0f, 0.0f); /* reset for the next step */
  close_pair(&pair);
  ty_graph_destroy(opt);
  ty_graph_destroy(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_f64_reference),
      cmocka_unit_test(test_mlp_f32_cpu),
      cmocka_unit_test(test_block_f64_reference),
      cmocka_unit_test(test_block_f32_cpu),
      cmocka_unit_test(test_block_f32_cpu_tp_norm),
      cmocka_unit_test(test_pipeline_reduce_and_clip),
      cmocka_unit_test(test_zero2_share),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
