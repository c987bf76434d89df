/* The cuda executor's fusions (backends/cuda/cuda_fuse.h) on the CPU
 * emulator of tests/cuda/emu: a bf16-mixed train step built the way
 * models/llm.c builds one (f32 parameters and residual stream, norms in
 * f32, their outputs cast to bf16 for the matmuls, the products cast back
 * and added to the residual; GPT-2's layernorm with biases, Llama's
 * rmsnorm without) over 1024 rows, so every pattern occurs: matmul ->
 * cast -> add (forward residual), matmul -> add (bf16 gradient sums),
 * matmul -> cast (weight gradients), norm -> cast, and cast -> norm
 * backward -> add -> cast. Each model trains STEPS steps on cuda:0 with
 * fusion on and with TRAINYARD_CUDA_FUSE=0, and on cpu: the executor's
 * report must name the fusions (and none with fusion off), the fused run's
 * losses and gradient norms must follow the unfused run's within bf16
 * rounding (the products are no longer rounded to bf16 before the f32
 * adds), and the unfused run must follow the cpu. The loss gradient goes
 * into the logits' bytes (cuda_fuse.h ty_cu_xent_plan): the report names
 * it, the arena drops by the logits, and not where the logits are an
 * output; a target out of range is still the data error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "graph/ir/train_step.h"
#include "hal/device.h"
#include "hal/half.h"
#include "hal/registry.h"

enum { B = 4, T = 256, C = 16, F = 64, LAYERS = 2, STEPS = 3, MAX_PARAMS = 32 };

/* The model's variations: the vocabulary, bf16 logits straight from the
 * head's matmul into the loss (GPT-2 in llm.c's bf16-mixed graph; else
 * the head's product is cast to f32 first), and the logits also a graph
 * output (the caller reads them: they may not be overwritten). */
typedef struct {
  int64_t vocab;
  bool bf16_logits, logits_output;
} shape_t;

static const shape_t base = {.vocab = 48};

typedef struct {
  ty_value_id_t ids[MAX_PARAMS];
  char names[MAX_PARAMS][32];
  int64_t dims[MAX_PARAMS][2];
  uint32_t rank[MAX_PARAMS];
  uint32_t count;
} params_t;

static ty_value_id_t param(ty_graph_t *g, params_t *p, const char *name, uint32_t rank,
                           int64_t d0, int64_t d1) {
  const uint32_t i = p->count++;
  assert_true(i < MAX_PARAMS);
  snprintf(p->names[i], sizeof(p->names[i]), "%s", name);
  p->rank[i] = rank;
  p->dims[i][0] = d0;
  p->dims[i][1] = d1;
  TY_EXPECT_OK(ty_graph_add_state(g, name, TY_DTYPE_F32, rank, p->dims[i], &p->ids[i]));
  return p->ids[i];
}

static ty_value_id_t op(ty_graph_t *g, const char *name, const ty_value_id_t *in, uint32_t n,
                        const ty_attrs_t *attrs) {
  ty_value_id_t out;
  TY_EXPECT_OK(ty_graph_add_node1(g, name, in, n, attrs, &out));
  return out;
}

static ty_value_id_t cast(ty_graph_t *g, ty_value_id_t x, const char *dtype) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_string(&a, "dtype", dtype));
  return op(g, "cast", &x, 1, &a);
}

/* x16 @ cast_bf16(w) + cast_bf16(bias), x16 already bf16; with tb, w is
 * stored [out, in] (a Linear layer's weight: x16 @ w^T). */
static ty_value_id_t linear(ty_graph_t *g, ty_value_id_t x16, ty_value_id_t w, ty_value_id_t bias,
                            bool tb) {
  ty_value_id_t in[3] = {x16, cast(g, w, "bf16"),
                         bias == TY_VALUE_NONE ? TY_VALUE_NONE : cast(g, bias, "bf16")};
  ty_attrs_t a = TY_ATTRS_EMPTY;
  if (tb) TY_EXPECT_OK(ty_attrs_set_int(&a, "trans_b", 1));
  return op(g, "matmul", in, bias == TY_VALUE_NONE ? 2 : 3, tb ? &a : NULL);
}

static ty_value_id_t norm(ty_graph_t *g, params_t *p, ty_value_id_t x, const char *name,
                          bool rms) {
  char n[32];
  snprintf(n, sizeof(n), "%s.w", name);
  ty_value_id_t in[3] = {x, param(g, p, n, 1, C, 0), TY_VALUE_NONE}, out[3];
  if (!rms) {
    snprintf(n, sizeof(n), "%s.b", name);
    in[2] = param(g, p, n, 1, C, 0);
  }
  TY_EXPECT_OK(ty_graph_add_node(g, rms ? "rmsnorm" : "layernorm", in, rms ? 2 : 3, NULL, out,
                                 rms ? 2 : 3));
  return out[0];
}

static ty_graph_t *build_mode(bool rms, const shape_t *sh, params_t *p,
                              ty_train_step_mode_t mode) {
  const int64_t V = sh->vocab;
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  memset(p, 0, sizeof(*p));
  const int64_t bt[2] = {B, T};
  ty_value_id_t ids, targets, weights;
  TY_EXPECT_OK(ty_graph_add_input(g, "ids", TY_DTYPE_I64, 2, bt, &ids));
  TY_EXPECT_OK(ty_graph_add_input(g, "targets", TY_DTYPE_I64, 2, bt, &targets));
  ty_value_id_t x = op(g, "embedding", (ty_value_id_t[]){param(g, p, "emb", 2, V, C), ids}, 2,
                       NULL);
  for (int l = 0; l < LAYERS; ++l) {
    char name[32];
    ty_value_id_t w[4], bias[4] = {TY_VALUE_NONE, TY_VALUE_NONE, TY_VALUE_NONE, TY_VALUE_NONE};
    const int64_t shapes[4][2] = {{C, C}, {C, C}, {C, F}, {F, C}};
    for (int k = 0; k < 4; ++k) {
      snprintf(name, sizeof(name), "l%d.w%d", l, k);
      w[k] = param(g, p, name, 2, shapes[k][0], shapes[k][1]);
      if (!rms) {
        snprintf(name, sizeof(name), "l%d.b%d", l, k);
        bias[k] = param(g, p, name, 1, shapes[k][1], 0);
      }
    }
    /* A token mixer stand-in (two projections summed, so the input's
     * gradient is a sum of two matmuls), then an MLP, each residual. */
    snprintf(name, sizeof(name), "l%d.n1", l);
    const ty_value_id_t h = cast(g, norm(g, p, x, name, rms), "bf16");
    /* w1 as a Linear layer's weight: its bias gradient is the other
     * operand of the weight-gradient GEMM (BGRADB against w0's BGRADA). */
    ty_value_id_t a = linear(g, h, w[0], bias[0], false);
    a = op(g, "add", (ty_value_id_t[]){a, linear(g, h, w[1], bias[1], true)}, 2, NULL);
    x = op(g, "add", (ty_value_id_t[]){x, cast(g, a, "f32")}, 2, NULL);
    snprintf(name, sizeof(name), "l%d.n2", l);
    ty_value_id_t m = linear(g, cast(g, norm(g, p, x, name, rms), "bf16"), w[2], bias[2], false);
    m = op(g, rms ? "silu" : "gelu", &m, 1, NULL);
    m = cast(g, op(g, "matmul", (ty_value_id_t[]){m, cast(g, w[3], "bf16")}, 2, NULL), "f32");
    x = op(g, "add", (ty_value_id_t[]){x, m}, 2, NULL);
  }
  const ty_value_id_t hf = cast(g, norm(g, p, x, "final", rms), "bf16");
  ty_attrs_t tb = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&tb, "trans_b", 1));
  const ty_value_id_t head = cast(g, param(g, p, "head", 2, V, C), "bf16");
  ty_value_id_t logits = op(g, "matmul", (ty_value_id_t[]){hf, head}, 2, &tb);
  if (!sh->bf16_logits) logits = cast(g, logits, "f32");
  if (sh->logits_output) TY_EXPECT_OK(ty_graph_set_output(g, logits, "logits"));
  ty_value_id_t loss = op(g, "cross_entropy", (ty_value_id_t[]){logits, targets}, 2, NULL);
  TY_EXPECT_OK(ty_graph_add_input(g, "loss_weights", TY_DTYPE_F32, 2, bt, &weights));
  TY_EXPECT_OK(ty_graph_mark_loss_seed(g, weights));
  loss = op(g, "reduce_sum", (ty_value_id_t[]){op(g, "mul", (ty_value_id_t[]){loss, weights}, 2,
                                                  NULL)},
            1, NULL);
  TY_EXPECT_OK(ty_graph_set_output(g, loss, "loss"));
  ty_train_step_params_t tp = {.loss = loss,
                               .loss_seed = TY_VALUE_NONE,
                               .params = p->ids,
                               .param_count = p->count,
                               .optimizer = TY_OPTIMIZER_ADAMW,
                               .mode = mode};
  TY_EXPECT_OK(ty_graph_build_train_step(g, &tp));
  return g;
}

static ty_graph_t *build(bool rms, const shape_t *sh, params_t *p) {
  return build_mode(rms, sh, p, TY_TRAIN_STEP_FUSED);
}

static void bind_f32(ty_session_t *s, const char *name, uint32_t rank, const int64_t *dims,
                     const float *data) {
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= dims[i];
  TY_EXPECT_OK(ty_session_bind(s, name, TY_DTYPE_F32, rank, dims, data, (size_t)n * 4));
}

/* STEPS steps on `uri` with `env` (NAME=VALUE or NULL) set while it
 * compiles; losses and gradient norms into loss[] and norm[], the
 * executor's report into report (cuda). A step whose targets include
 * bad_target (>= 0: its row 5 gets the vocabulary size) must fail, naming
 * the target. */
enum { BIAS_FLOATS = LAYERS * (C + C + F + C) };

/* The biases after the last step (l0.b0 .. l0.b3, l1.b0, ...), when
 * `biases` is not NULL (layernorm models only). */
static void read_biases(ty_session_t *s, float *biases) {
  const int64_t sizes[4] = {C, C, F, C};
  for (int l = 0, at = 0; l < LAYERS; ++l) {
    for (int k = 0; k < 4; ++k) {
      char name[32];
      snprintf(name, sizeof(name), "l%d.b%d", l, k);
      TY_EXPECT_OK(ty_session_read(s, name, biases + at, (size_t)sizes[k] * sizeof(float)));
      at += (int)sizes[k];
    }
  }
}

/* Sets `env` (NAME=VALUE, or NULL: nothing) for what compiles next; its
 * name goes into name[64] for env_unset. */
static void env_set(const char *env, char *name) {
  name[0] = '\0';
  if (!env) return;
  snprintf(name, 64, "%s", env);
  char *eq = strchr(name, '=');
  assert_non_null(eq);
  *eq = '\0';
  setenv(name, eq + 1, 1);
}

static void env_unset(const char *name) {
  if (name[0]) unsetenv(name);
}

static int64_t param_elements(const params_t *p, uint32_t i) {
  return p->rank[i] == 1 ? p->dims[i][0] : p->dims[i][0] * p->dims[i][1];
}

/* Random initial values of every parameter, bound in `s` (matrices 0.7 u,
 * biases 0.1 u, norm weights 1 + vec u, u uniform in [-0.5, 0.5) from
 * `seed`); with `moments`, AdamW's states bound to zeros too. `buf` holds
 * the largest parameter. */
static void bind_params(ty_session_t *s, const params_t *p, uint32_t seed, float vec,
                        bool moments, float *buf) {
  for (uint32_t i = 0; i < p->count; ++i) {
    const int64_t n = param_elements(p, i);
    const bool is_bias = strstr(p->names[i], ".b") != NULL;
    for (int64_t k = 0; k < n; ++k) {
      seed = seed * 1664525u + 1013904223u;
      const float u = (float)(seed >> 8) / 16777216.0f - 0.5f;
      buf[k] = p->rank[i] == 2 ? 0.7f * u : is_bias ? 0.1f * u : 1.0f + vec * u;
    }
    bind_f32(s, p->names[i], p->rank[i], p->dims[i], buf);
    for (const char *const *kind = ty_optimizer_state_kinds(TY_OPTIMIZER_ADAMW);
         moments && *kind; ++kind) {
      char name[64];
      snprintf(name, sizeof(name), "%s.%s", p->names[i], *kind);
      memset(buf, 0, (size_t)n * sizeof(float));
      bind_f32(s, name, p->rank[i], p->dims[i], buf);
    }
  }
}

/* Every parameter's values into out, in declaration order. */
static void read_params(ty_session_t *s, const params_t *p, float *out) {
  for (uint32_t i = 0, at = 0; i < p->count; ++i) {
    const int64_t n = param_elements(p, i);
    TY_EXPECT_OK(ty_session_read(s, p->names[i], out + at, (size_t)n * sizeof(float)));
    at += (uint32_t)n;
  }
}

/* For the weight-copy test: before step rebind_step (>= 0), the host writes
 * new values into two weights (a layer's and the LM head's), as a
 * checkpoint load would; after the last step every parameter is read into
 * all_params (when not NULL), in the order build() declared them. */
static int rebind_step = -1;
static float *all_params;

static void train_with(ty_registry_t *r, const char *uri, bool rms, const shape_t *sh,
                       const char *env, int bad_step, double *loss, double *norm, char *report,
                       size_t capacity, float *biases) {
  const int64_t V = sh->vocab;
  char env_name[64];
  env_set(env, env_name);
  ty_device_t *dev = NULL;
  ty_session_t *s = NULL;
  params_t p;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  ty_graph_t *g = build(rms, sh, &p);
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  env_unset(env_name);
  float *buf = malloc((size_t)(V > F ? V : F) * F * sizeof(float));
  assert_non_null(buf);
  bind_params(s, &p, 777, 0.2f, true, buf);
  const char *names[] = {"lr", "weight_decay", "max_norm", "beta1", "beta2", "eps"};
  const float values[] = {0.01f, 0.01f, 1.0f, 0.9f, 0.999f, 1e-8f};
  for (int i = 0; i < 6; ++i) {
    ty_tensor_desc_t d;
    ty_status_t st = ty_session_value_desc(s, names[i], &d);
    ty_status_free(st);
    if (st == TY_OK) bind_f32(s, names[i], 0, NULL, &values[i]);
  }
  for (int step = 0; step < STEPS; ++step) {
    static int64_t ids[B * T], targets[B * T];
    static float weights[B * T];
    for (int i = 0; i < B * T; ++i) {
      ids[i] = (i * 7 + step * 3) % V;
      targets[i] = (ids[i] * 5 + i / T) % V;
      weights[i] = 1.0f / (float)(B * T);
    }
    if (step == bad_step) targets[5] = V;
    const int64_t bt[2] = {B, T};
    TY_EXPECT_OK(ty_session_bind(s, "ids", TY_DTYPE_I64, 2, bt, ids, sizeof(ids)));
    TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
    bind_f32(s, "loss_weights", 2, bt, weights);
    const int64_t t = step + 1;
    TY_EXPECT_OK(ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &t, sizeof(t)));
    for (uint32_t i = 0; step == rebind_step && i < p.count; ++i) {
      if (strcmp(p.names[i], "l1.w2") != 0 && strcmp(p.names[i], "head") != 0) continue;
      const int64_t n = p.dims[i][0] * p.dims[i][1];
      for (int64_t k = 0; k < n; ++k) buf[k] = 0.3f * sinf((float)(k * 7 + (int64_t)i));
      bind_f32(s, p.names[i], p.rank[i], p.dims[i], buf);
    }
    if (step == bad_step) {
      char want[96];
      snprintf(want, sizeof(want), "targets[5] = %lld is outside the vocabulary [0, %lld)",
               (long long)V, (long long)V);
      TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_INVALID_ARGUMENT, want);
      loss[step] = norm[step] = NAN;
      continue;
    }
    TY_EXPECT_OK(ty_session_run(s));
    float l = 0, n = 0;
    TY_EXPECT_OK(ty_session_read(s, "loss", &l, sizeof(l)));
    TY_EXPECT_OK(ty_session_read(s, "grad_norm", &n, sizeof(n)));
    loss[step] = l;
    norm[step] = n;
  }
  if (biases) read_biases(s, biases);
  if (all_params) read_params(s, &p, all_params);
  report[0] = '\0';
  if (strcmp(uri, "cpu") != 0) {
    char *text = NULL;
    TY_EXPECT_OK(ty_session_report(s, &text));
    snprintf(report, capacity, "%s", text ? text : "");
    free(text);
  }
  free(buf);
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
}

static void train(ty_registry_t *r, const char *uri, bool rms, bool fuse, double *loss,
                  double *norm, char *report, size_t capacity, float *biases) {
  train_with(r, uri, rms, &base, fuse ? NULL : "TRAINYARD_CUDA_FUSE=0", -1, loss, norm, report,
             capacity, biases);
}

/* The largest difference between two runs' biases. */
static double bias_gap(const float *a, const float *b) {
  double gap = 0.0;
  for (int i = 0; i < BIAS_FLOATS; ++i) gap = fmax(gap, fabs((double)a[i] - (double)b[i]));
  return gap;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* The counts of the report's "fused:" line. */
static void fused_counts(const char *report, unsigned *nodes, unsigned *gemm, unsigned *nrm,
                         unsigned *bwd, unsigned *bgrad) {
  const char *line = strstr(report, "fused: ");
  assert_non_null(line);
  assert_int_equal(sscanf(line,
                          "fused: %u nodes done by others' commands (%u matmul+cast/add, %u "
                          "norm+cast, %u norm-backward chains, %u bias gradients in matmuls",
                          nodes, gemm, nrm, bwd, bgrad),
                   5);
}

/* The number the report gives after `from` (a scanf format starting at
 * `from` with one %u). */
static unsigned report_count(const char *report, const char *from, const char *format) {
  const char *at = strstr(report, from);
  assert_non_null(at);
  unsigned n = 0;
  assert_int_equal(sscanf(at, format, &n), 1);
  return n;
}

/* A session of `g` on the emulated cuda:0, compiled with the executor's
 * fusions on or off (TRAINYARD_CUDA_FUSE=0 while it compiles). */
typedef struct {
  ty_device_t *dev;
  ty_session_t *s;
} emu_run_t;

static emu_run_t open_run(ty_registry_t *r, ty_graph_t *g, bool fuse) {
  emu_run_t run = {NULL, NULL};
  if (!fuse) setenv("TRAINYARD_CUDA_FUSE", "0", 1);
  TY_EXPECT_OK(ty_device_open(r, "cuda:0", &run.dev));
  TY_EXPECT_OK(ty_session_create(run.dev, g, NULL, &run.s));
  unsetenv("TRAINYARD_CUDA_FUSE");
  return run;
}

/* The run's report count (report_count(from, format)); then closes the run
 * and destroys `g`. */
static unsigned close_run(emu_run_t *run, ty_graph_t *g, const char *from, const char *format) {
  char *text = NULL;
  TY_EXPECT_OK(ty_session_report(run->s, &text));
  const unsigned n = report_count(text, from, format);
  free(text);
  ty_session_destroy(run->s);
  ty_device_close(run->dev);
  ty_graph_destroy(g);
  return n;
}

static unsigned kernel_commands(const char *report) {
  return report_count(report, "commands (", "commands (%u kernels");
}

static unsigned gemm_commands(const char *report) {
  return report_count(report, "kernels, ", "kernels, %u cuBLASLt matmuls");
}

/* The count on the "fused:" line's "N loss gradient(s) in place". */
static unsigned in_place_count(const char *report) {
  return report_count(report, "launches); ", "launches); %u loss gradient");
}

/* The report's activation arena and what the handle holds, in MiB. */
static void memory_mib(const char *report, double *arena, double *held) {
  const char *a = strstr(report, "activation arena "), *h = strstr(report, "this handle holds ");
  assert_non_null(a);
  assert_non_null(h);
  assert_int_equal(sscanf(a, "activation arena %lf", arena), 1);
  assert_int_equal(sscanf(h, "this handle holds %lf", held), 1);
}

static void check(bool rms) {
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  double fl[STEPS], fn[STEPS], ul[STEPS], un[STEPS], cl[STEPS], cn[STEPS];
  char fused_report[4096], plain_report[4096], none[8];
  float fb[BIAS_FLOATS], ub[BIAS_FLOATS];
  train(r, "cuda:0", rms, true, fl, fn, fused_report, sizeof(fused_report), rms ? NULL : fb);
  train(r, "cuda:0", rms, false, ul, un, plain_report, sizeof(plain_report), rms ? NULL : ub);
  train(r, "cpu", rms, true, cl, cn, none, sizeof(none), NULL);
  unsigned nodes, gemm, nrm, bwd, bgrad;
  fused_counts(fused_report, &nodes, &gemm, &nrm, &bwd, &bgrad);
  fprintf(stderr,
          "%s: %u nodes fused (%u matmul, %u norm, %u norm-backward heads, %u bias gradients)\n",
          rms ? "rmsnorm" : "layernorm", nodes, gemm, nrm, bwd, bgrad);
  /* Per layer: 2 norms -> cast; the forward's matmul -> cast -> add (2),
   * the bf16 gradient sum of the two projections (1); every weight
   * gradient's cast; both norm backwards' chains; with biases (layernorm),
   * the three biased projections' gradients in their weight GEMMs. */
  assert_true(nrm >= 2 * LAYERS + 1);
  assert_true(gemm >= 7 * LAYERS);
  assert_true(bwd >= 2 * LAYERS);
  assert_int_equal(bgrad, rms ? 0 : 3 * LAYERS);
  if (!rms) {
    /* AdamW moves each bias by about lr (0.01) a step, along its gradient's
     * sign at first: a wrong bias gradient moves them apart by several lr
     * (the other operand summed: 6.0e-2 on 2026-11-27), the other fusions'
     * rounding by less than one (3.3e-3, the same without the bias
     * gradients in the epilogues). */
    const double gap = bias_gap(fb, ub);
    fprintf(stderr, "layernorm: biases fused vs unfused after %d steps: %.2e\n", STEPS, gap);
    if (!(gap <= 1.5e-2)) fail_msg("biases fused vs unfused: %.3g (bound 1.5e-2)", gap);
  }
  unsigned n0, g0, r0, b0, d0;
  fused_counts(plain_report, &n0, &g0, &r0, &b0, &d0);
  assert_int_equal(g0 + r0 + b0 + d0, 0);
  /* dlogits in the logits' bytes, only with fusion on */
  assert_int_equal(in_place_count(fused_report), 1);
  assert_int_equal(in_place_count(plain_report), 0);
  double gap_fused = 0.0, gap_cpu = 0.0;
  for (int i = 0; i < STEPS; ++i) {
    gap_fused = fmax(gap_fused, fmax(rel(fl[i], ul[i]), rel(fn[i], un[i])));
    gap_cpu = fmax(gap_cpu, fmax(rel(ul[i], cl[i]), rel(un[i], cn[i])));
  }
  fprintf(stderr, "%s: fused vs unfused %.2e, unfused vs cpu %.2e (losses %.5f .. %.5f)\n",
          rms ? "rmsnorm" : "layernorm", gap_fused, gap_cpu, fl[0], fl[STEPS - 1]);
  /* bf16 products rounded or not before an f32 add: ~2^-9 per element,
   * averaged over the loss. */
  if (!(gap_fused <= 5e-3)) fail_msg("fused vs unfused: %.3g (bound 5e-3)", gap_fused);
  if (!(gap_cpu <= 1e-4)) fail_msg("unfused cuda vs cpu: %.3g (bound 1e-4)", gap_cpu);
  assert_true(fabs(fl[STEPS - 1] - fl[0]) > 1e-3); /* it trained */
  ty_registry_destroy(r);
}

static void test_fusion_layernorm(void **state) {
  (void)state;
  check(false);
}

static void test_fusion_rmsnorm(void **state) {
  (void)state;
  check(true);
}

static double max_gap(const double *a, const double *b, const double *c, const double *d) {
  double gap = 0.0;
  for (int i = 0; i < STEPS; ++i) gap = fmax(gap, fmax(rel(a[i], b[i]), rel(c[i], d[i])));
  return gap;
}

/* GPT-2's loss in llm.c's bf16-mixed graph: bf16 logits over an odd
 * vocabulary the executor pads (301 -> rows of 320), straight into the
 * loss. The loss gradient goes into the logits' bytes (the report says so)
 * and reads each row's logsumexp from the forward's loss. Against
 * TRAINYARD_CUDA_LOSS_IN_PLACE=0, whose peak is at the loss gradient (the
 * logits and their gradient both live), the arena and what the handle
 * holds drop by the logits' size less what the head's gradient matmuls
 * then add (dh and dW, ~5% of the logits here: C * 6 bytes per vocabulary
 * entry against the logits' rows * 2), where the peak moves. The steps
 * follow that run's within the lse's f32 rounding, and the cpu's within
 * the fused-vs-unfused bound of check(). */
static void test_loss_gradient_in_place(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const shape_t gpt = {.vocab = 301, .bf16_logits = true};
  double il[STEPS], in[STEPS], ol[STEPS], on[STEPS], cl[STEPS], cn[STEPS];
  char on_report[4096], off_report[4096], none[8];
  train_with(r, "cuda:0", false, &gpt, NULL, -1, il, in, on_report, sizeof(on_report), NULL);
  train_with(r, "cuda:0", false, &gpt, "TRAINYARD_CUDA_LOSS_IN_PLACE=0", -1, ol, on, off_report,
             sizeof(off_report), NULL);
  train_with(r, "cpu", false, &gpt, NULL, -1, cl, cn, none, sizeof(none), NULL);
  assert_int_equal(in_place_count(on_report), 1);
  assert_int_equal(in_place_count(off_report), 0);
  double arena_on, held_on, arena_off, held_off;
  memory_mib(on_report, &arena_on, &held_on);
  memory_mib(off_report, &arena_off, &held_off);
  const double logits_mib = (double)(B * T) * 320.0 * 2.0 / 1048576.0; /* padded bf16 rows */
  fprintf(stderr, "loss in place: arena %.1f -> %.1f MiB, held %.1f -> %.1f MiB (logits %.1f)\n",
          arena_off, arena_on, held_off, held_on, logits_mib);
  const double drop = arena_off - arena_on, held_drop = held_off - held_on;
  /* the report prints 0.1 MiB, so each drop is a difference of two
   * rounded numbers: up to 0.1 off, and the two drops up to 0.2 apart */
  if (!(drop >= 0.9 * logits_mib && drop <= logits_mib + 0.1 &&
        fabs(held_drop - drop) <= 0.2 + 1e-9)) {
    fail_msg("the arena dropped by %.2f MiB and the handle by %.2f MiB, not by the logits' "
             "%.2f MiB (less at most 10%%)",
             drop, held_drop, logits_mib);
  }
  const double gap_off = max_gap(il, ol, in, on), gap_cpu = max_gap(il, cl, in, cn);
  fprintf(stderr, "loss in place vs not %.2e, vs cpu %.2e (losses %.5f .. %.5f)\n", gap_off,
          gap_cpu, il[0], il[STEPS - 1]);
  if (!(gap_off <= 1e-4)) fail_msg("in place vs not: %.3g (bound 1e-4)", gap_off);
  if (!(gap_cpu <= 5e-3)) fail_msg("in place vs cpu: %.3g (bound 5e-3)", gap_cpu);
  assert_true(fabs(il[STEPS - 1] - il[0]) > 1e-3); /* it trained */
  ty_registry_destroy(r);
}

/* Where the loss gradient may not go in place, and its data error when it
 * does. Run A has the logits as a graph output too: the caller reads them
 * after the run, so the gradient may not overwrite them (the report says
 * none in place). Run B is the same model without that output, in place,
 * with a target == V in its middle step: that step fails with the
 * reference's data error (row, target, vocabulary) and the next one runs.
 * Their first steps agree (the gradient's bytes change nothing else). */
static void test_in_place_refused_and_data_error(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const shape_t shown = {.vocab = 48, .logits_output = true};
  double xl[STEPS], xn[STEPS], bl[STEPS], bn[STEPS];
  char report[4096], base_report[4096];
  train_with(r, "cuda:0", false, &shown, NULL, -1, xl, xn, report, sizeof(report), NULL);
  train_with(r, "cuda:0", false, &base, NULL, 1, bl, bn, base_report, sizeof(base_report), NULL);
  assert_int_equal(in_place_count(report), 0);
  assert_int_equal(in_place_count(base_report), 1);
  const double gap = fmax(rel(xl[0], bl[0]), rel(xn[0], bn[0]));
  fprintf(stderr, "logits output vs in place, step 1: %.2e\n", gap);
  if (!(gap <= 1e-4)) fail_msg("logits output vs in place: %.3g (bound 1e-4)", gap);
  assert_true(isfinite(bl[2]) && isfinite(bn[2]));
  ty_registry_destroy(r);
}

/* The bias gradient where cuBLASLt has no algorithm with its epilogue
 * (TY_EMU_BLASLT_NO_BGRAD=1 while compiling): the same fusion plan, each
 * weight-gradient GEMM run plain and the bias gradient as a column sum
 * after it, written in the same f32 value. Same matmul count, same steps
 * within the two sums' rounding (f32 in the emulated epilogue, f64 in the
 * column kernel). */
static void test_bias_gradient_fallback(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  double el[STEPS], en[STEPS], kl[STEPS], kn[STEPS];
  char epi_report[4096], kernel_report[4096];
  float eb[BIAS_FLOATS], kb[BIAS_FLOATS];
  train_with(r, "cuda:0", false, &base, NULL, -1, el, en, epi_report, sizeof(epi_report), eb);
  train_with(r, "cuda:0", false, &base, "TY_EMU_BLASLT_NO_BGRAD=1", -1, kl, kn, kernel_report,
             sizeof(kernel_report), kb);
  unsigned n, g, m, b, d1, d2;
  fused_counts(epi_report, &n, &g, &m, &b, &d1);
  fused_counts(kernel_report, &n, &g, &m, &b, &d2);
  assert_int_equal(d1, 3 * LAYERS);
  assert_int_equal(d2, 3 * LAYERS);
  assert_int_equal(gemm_commands(epi_report), gemm_commands(kernel_report));
  /* The column sums are kernels of their own (one or two each). */
  assert_true(kernel_commands(kernel_report) >= kernel_commands(epi_report) + 3 * LAYERS);
  const double gap = max_gap(el, kl, en, kn), bgap = bias_gap(eb, kb);
  fprintf(stderr, "bias gradient: epilogue vs column sum: steps %.2e, biases %.2e\n", gap, bgap);
  if (!(gap <= 1e-4)) fail_msg("epilogue vs column sum: %.3g (bound 1e-4)", gap);
  if (!(bgap <= 1e-5)) fail_msg("biases, epilogue vs column sum: %.3g (bound 1e-5)", bgap);
  ty_registry_destroy(r);
}

/* argv[1], when given, picks tests by name (a cmocka glob): ctest runs the
 * norm fusions and the loss cases as two entries, so they share the cores. */
/* SLICES (cuda_fuse.h): slices of one input along its last axis written by
 * one launch. x [3, 5, W] (f32, or bf16 bits) sliced into `n` pieces at
 * `starts` of `widths`, plus a slice of x along axis 1 (never joins) and
 * one of another input (never joins); every output against the expected
 * elements, with fusion on and off; returns the report's count of slice
 * launches for several. */
static unsigned run_slices(ty_registry_t *r, ty_dtype_t dt, int64_t W, int n,
                           const int64_t *starts, const int64_t *widths, bool fuse) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t xd[3] = {3, 5, W};
  ty_value_id_t x, x2, outs[8];
  TY_EXPECT_OK(ty_graph_add_input(g, "x", dt, 3, xd, &x));
  TY_EXPECT_OK(ty_graph_add_input(g, "x2", dt, 3, xd, &x2));
  for (int k = 0; k < n + 2; ++k) {
    const bool axis1 = k == n, other = k == n + 1;
    const int64_t st[3] = {0, axis1 ? 1 : 0, axis1 || other ? 0 : starts[k]};
    const int64_t yd[3] = {3, axis1 ? 3 : 5, axis1 || other ? W : widths[k]};
    ty_attrs_t attrs = TY_ATTRS_EMPTY;
    TY_EXPECT_OK(ty_attrs_set_ints(&attrs, "starts", st, 3));
    TY_EXPECT_OK(ty_attrs_set_ints(&attrs, "sizes", yd, 3));
    ty_value_id_t in = other ? x2 : x;
    TY_EXPECT_OK(ty_graph_add_node(g, "slice", &in, 1, &attrs, &outs[k], 1));
    char name[16];
    snprintf(name, sizeof(name), "y%d", k);
    TY_EXPECT_OK(ty_graph_set_output(g, outs[k], name));
  }
  emu_run_t run = open_run(r, g, fuse);
  ty_session_t *s = run.s;
  const size_t es = dt == TY_DTYPE_F32 ? 4 : 2, count = (size_t)(15 * W);
  unsigned char *xs = malloc(count * es), *x2s = malloc(count * es), *y = malloc(count * es);
  assert_true(xs && x2s && y);
  for (size_t i = 0; i < count * es; ++i) {
    xs[i] = (unsigned char)(i * 7 + 3);
    x2s[i] = (unsigned char)(i * 13 + 1);
  }
  TY_EXPECT_OK(ty_session_bind(s, "x", dt, 3, xd, xs, count * es));
  TY_EXPECT_OK(ty_session_bind(s, "x2", dt, 3, xd, x2s, count * es));
  TY_EXPECT_OK(ty_session_run(s));
  for (int k = 0; k < n + 2; ++k) {
    const bool axis1 = k == n, other = k == n + 1;
    const int64_t rows1 = axis1 ? 3 : 5, w = axis1 || other ? W : widths[k];
    const int64_t start = axis1 || other ? 0 : starts[k];
    char name[16];
    snprintf(name, sizeof(name), "y%d", k);
    const size_t bytes = (size_t)(3 * rows1 * w) * es;
    TY_EXPECT_OK(ty_session_read(s, name, y, bytes));
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t t = 0; t < rows1; ++t) {
        const int64_t src_row = a * 5 + t + (axis1 ? 1 : 0);
        const unsigned char *want = (other ? x2s : xs) + (size_t)(src_row * W + start) * es;
        const unsigned char *got = y + (size_t)((a * rows1 + t) * w) * es;
        if (memcmp(want, got, (size_t)w * es) != 0) {
          fail_msg("slice %d (fusion %s): row %lld differs", k, fuse ? "on" : "off",
                   (long long)(a * rows1 + t));
        }
      }
    }
  }
  const unsigned launches = close_run(&run, g, " in place; ", " in place; %u slice launch");
  free(xs);
  free(x2s);
  free(y);
  return launches;
}

static void test_slices_in_one_launch(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  /* q, k, v of a fused projection (bf16, 16-byte units). */
  const int64_t qkv_s[3] = {0, 16, 32}, qkv_w[3] = {16, 16, 16};
  assert_int_equal(run_slices(r, TY_DTYPE_BF16, 48, 3, qkv_s, qkv_w, true), 1);
  assert_int_equal(run_slices(r, TY_DTYPE_BF16, 48, 3, qkv_s, qkv_w, false), 0);
  /* Odd offsets and widths (element by element), out of order, f32. */
  const int64_t odd_s[3] = {20, 0, 7}, odd_w[3] = {19, 7, 13};
  assert_int_equal(run_slices(r, TY_DTYPE_F32, 39, 3, odd_s, odd_w, true), 1);
  /* Six slices: one launch takes four, another the last two. */
  const int64_t six_s[6] = {0, 4, 8, 12, 16, 20}, six_w[6] = {4, 4, 4, 4, 4, 4};
  assert_int_equal(run_slices(r, TY_DTYPE_F32, 24, 6, six_s, six_w, true), 2);
  ty_registry_destroy(r);
}

/* ROPE_PAIR (cuda_fuse.h): rope of q [1, 5, 4, 8] and k [1, 5, 2, 8] at
 * positions 3.., and rope_backward of both, each pair in one launch: the
 * four outputs the same bits as with fusion off (the same arithmetic per
 * element); returns the report's count of rope pairs. */
static unsigned run_ropes(ty_registry_t *r, ty_dtype_t dt, bool fuse, unsigned char **outs) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t qd[4] = {1, 5, 4, 8}, kd[4] = {1, 5, 2, 8}, pd[1] = {5};
  ty_value_id_t q, k, pos, y[4];
  TY_EXPECT_OK(ty_graph_add_input(g, "q", dt, 4, qd, &q));
  TY_EXPECT_OK(ty_graph_add_input(g, "k", dt, 4, kd, &k));
  TY_EXPECT_OK(ty_graph_add_input(g, "pos", TY_DTYPE_I64, 1, pd, &pos));
  const char *ops[4] = {"rope", "rope", "rope_backward", "rope_backward"};
  for (int i = 0; i < 4; ++i) {
    ty_value_id_t in[2] = {i % 2 ? k : q, pos};
    TY_EXPECT_OK(ty_graph_add_node(g, ops[i], in, 2, NULL, &y[i], 1));
    char name[8];
    snprintf(name, sizeof(name), "y%d", i);
    TY_EXPECT_OK(ty_graph_set_output(g, y[i], name));
  }
  emu_run_t run = open_run(r, g, fuse);
  ty_session_t *s = run.s;
  const size_t es = dt == TY_DTYPE_F32 ? 4 : 2, nq = 160, nk = 80;
  unsigned char *qs = malloc(nq * es), *ks = malloc(nk * es);
  assert_true(qs && ks);
  for (size_t i = 0; i < nq * es; ++i) qs[i] = (unsigned char)(i * 7 + 3);
  for (size_t i = 0; i < nk * es; ++i) ks[i] = (unsigned char)(i * 13 + 1);
  if (dt == TY_DTYPE_F32) { /* finite f32 values: clear each word's top exponent bit */
    for (size_t i = 3; i < nq * es; i += 4) qs[i] &= 0x3f;
    for (size_t i = 3; i < nk * es; i += 4) ks[i] &= 0x3f;
  } else {
    for (size_t i = 1; i < nq * es; i += 2) qs[i] &= 0x3f;
    for (size_t i = 1; i < nk * es; i += 2) ks[i] &= 0x3f;
  }
  const int64_t positions[5] = {3, 4, 5, 6, 7};
  TY_EXPECT_OK(ty_session_bind(s, "q", dt, 4, qd, qs, nq * es));
  TY_EXPECT_OK(ty_session_bind(s, "k", dt, 4, kd, ks, nk * es));
  TY_EXPECT_OK(ty_session_bind(s, "pos", TY_DTYPE_I64, 1, pd, positions, sizeof(positions)));
  TY_EXPECT_OK(ty_session_run(s));
  for (int i = 0; i < 4; ++i) {
    char name[8];
    snprintf(name, sizeof(name), "y%d", i);
    const size_t bytes = (i % 2 ? nk : nq) * es;
    outs[i] = malloc(bytes);
    assert_non_null(outs[i]);
    TY_EXPECT_OK(ty_session_read(s, name, outs[i], bytes));
  }
  /* "... 0 matmul groups in one launch; N rope pairs in one launch" */
  const unsigned pairs = close_run(&run, g, " matmul groups in one launch; ",
                                   " matmul groups in one launch; %u rope pair");
  free(qs);
  free(ks);
  return pairs;
}

static void test_rope_pairs(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const ty_dtype_t dts[2] = {TY_DTYPE_BF16, TY_DTYPE_F32};
  for (int d = 0; d < 2; ++d) {
    unsigned char *on[4], *off[4];
    assert_int_equal(run_ropes(r, dts[d], true, on), 2);
    assert_int_equal(run_ropes(r, dts[d], false, off), 0);
    const size_t es = dts[d] == TY_DTYPE_F32 ? 4 : 2;
    for (int i = 0; i < 4; ++i) {
      assert_memory_equal(on[i], off[i], (i % 2 ? 80 : 160) * es);
      free(on[i]);
      free(off[i]);
    }
  }
  ty_registry_destroy(r);
}

/* CLIP_ADAMW (cuda_fuse.h): a two-layer model, parameters in `dt`, trained
 * 4 steps by AdamW with max_norm 0.05 (every step clips: the norms are
 * ~1); `skip` >= 0 leaves that parameter to another rank (ZeRO-1: its
 * clipped gradient has no reader). Writes the parameters' bytes after the
 * last step and each step's norm; returns the report's count of clips
 * folded into the optimizer. */
enum { CLIP_PARAMS = 3, CLIP_STEPS = 4, CLIP_ROWS = 32, CLIP_IN = 24, CLIP_MID = 40 };

static unsigned run_clip(ty_registry_t *r, ty_dtype_t dt, bool fuse, int skip,
                         unsigned char *params_out, float *norms) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t xd[2] = {CLIP_ROWS, CLIP_IN};
  const int64_t pd[CLIP_PARAMS][2] = {{CLIP_IN, CLIP_MID}, {CLIP_MID, 1}, {CLIP_MID, 0}};
  const uint32_t pr[CLIP_PARAMS] = {2, 2, 1};
  const char *names[CLIP_PARAMS] = {"w1", "w2", "b1"};
  ty_value_id_t x, w[CLIP_PARAMS];
  TY_EXPECT_OK(ty_graph_add_input(g, "x", dt, 2, xd, &x));
  for (int i = 0; i < CLIP_PARAMS; ++i) {
    TY_EXPECT_OK(ty_graph_add_state(g, names[i], dt, pr[i], pd[i], &w[i]));
  }
  /* silu, and the bias after it: no other fusion applies (GELU would go
   * into the GEMM's epilogue, a bias gradient into a weight GEMM's), so
   * fusion on and off differ by the clip alone. */
  ty_value_id_t h = op(g, "matmul", (ty_value_id_t[]){x, w[0]}, 2, NULL);
  h = op(g, "add", (ty_value_id_t[]){op(g, "silu", &h, 1, NULL), w[2]}, 2, NULL);
  ty_value_id_t y = op(g, "matmul", (ty_value_id_t[]){h, w[1]}, 2, NULL);
  y = op(g, "reduce_sum", (ty_value_id_t[]){op(g, "mul", (ty_value_id_t[]){y, y}, 2, NULL)}, 1,
         NULL);
  ty_value_id_t loss = cast(g, y, "f32");
  TY_EXPECT_OK(ty_graph_set_output(g, loss, "loss"));
  bool update[CLIP_PARAMS] = {true, true, true};
  if (skip >= 0) update[skip] = false;
  ty_train_step_params_t tp = {.loss = loss,
                               .loss_seed = TY_VALUE_NONE,
                               .params = w,
                               .param_count = CLIP_PARAMS,
                               .optimizer = TY_OPTIMIZER_ADAMW,
                               .update = update};
  TY_EXPECT_OK(ty_graph_build_train_step(g, &tp));
  emu_run_t run = open_run(r, g, fuse);
  ty_session_t *s = run.s;
  const size_t es = dt == TY_DTYPE_F32 ? 4 : 2;
  uint32_t seed = 99;
  float *buf = malloc(CLIP_IN * CLIP_MID * sizeof(float));
  unsigned char *typed = malloc(CLIP_IN * CLIP_MID * 4);
  assert_true(buf && typed);
  size_t at = 0;
  for (int i = 0; i < CLIP_PARAMS + 1; ++i) {
    const int64_t *dims = i < CLIP_PARAMS ? pd[i] : xd;
    const uint32_t rank = i < CLIP_PARAMS ? pr[i] : 2;
    const int64_t n = rank == 1 ? dims[0] : dims[0] * dims[1];
    for (int64_t k = 0; k < n; ++k) {
      seed = seed * 1664525u + 1013904223u;
      buf[k] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    for (int64_t k = 0; k < n; ++k) {
      if (dt == TY_DTYPE_F32) memcpy(typed + 4 * k, &buf[k], 4);
      else ((uint16_t *)typed)[k] = ty_f32_to_bf16(buf[k]);
    }
    TY_EXPECT_OK(ty_session_bind(s, i < CLIP_PARAMS ? names[i] : "x", dt, rank, dims, typed,
                                 (size_t)n * es));
    if (i == CLIP_PARAMS) break;
    for (const char *const *kind = ty_optimizer_state_kinds(TY_OPTIMIZER_ADAMW);
         i != skip && *kind; ++kind) {
      char name[32];
      snprintf(name, sizeof(name), "%s.%s", names[i], *kind);
      memset(buf, 0, (size_t)n * sizeof(float));
      bind_f32(s, name, rank, dims, buf);
    }
    at += (size_t)n;
  }
  const char *hp[] = {"lr", "weight_decay", "max_norm", "beta1", "beta2", "eps"};
  const float hv[] = {0.01f, 0.1f, 0.05f, 0.9f, 0.999f, 1e-8f};
  for (int i = 0; i < 6; ++i) bind_f32(s, hp[i], 0, NULL, &hv[i]);
  for (int step = 0; step < CLIP_STEPS; ++step) {
    const int64_t t = step + 1;
    TY_EXPECT_OK(ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &t, sizeof(t)));
    TY_EXPECT_OK(ty_session_run(s));
    TY_EXPECT_OK(ty_session_read(s, "grad_norm", &norms[step], sizeof(float)));
  }
  size_t off = 0;
  for (int i = 0; i < CLIP_PARAMS; ++i) {
    const size_t bytes = (size_t)(pr[i] == 1 ? pd[i][0] : pd[i][0] * pd[i][1]) * es;
    TY_EXPECT_OK(ty_session_read(s, names[i], params_out + off, bytes));
    off += bytes;
  }
  assert_int_equal(off, at * es);
  /* The updates' data error still comes out of the folded launch. */
  const int64_t zero = 0;
  TY_EXPECT_OK(ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &zero, sizeof(zero)));
  TY_EXPECT_STATUS(ty_session_run(s), TY_CODE_INVALID_ARGUMENT, "adamw: step 0 must be >= 1");
  const unsigned folded =
      close_run(&run, g, " rope pairs in one launch; ", " rope pairs in one launch; %u clip");
  free(buf);
  free(typed);
  return folded;
}

/* The fused updates give the unfused bits, in f32 and in bf16 (the clipped
 * gradient rounded to bf16 as the clip stores it), with every parameter
 * updated here and with one left to another rank. */
static void test_clip_folded_into_adamw(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const ty_dtype_t dts[2] = {TY_DTYPE_F32, TY_DTYPE_BF16};
  const size_t total = CLIP_IN * CLIP_MID + CLIP_MID + CLIP_MID;
  for (int d = 0; d < 2; ++d) {
    for (int skip = -1; skip < 1; ++skip) {
      unsigned char on[total * 4], off[total * 4];
      float non[CLIP_STEPS], noff[CLIP_STEPS];
      assert_int_equal(run_clip(r, dts[d], true, skip, on, non), 1);
      assert_int_equal(run_clip(r, dts[d], false, skip, off, noff), 0);
      const size_t es = dts[d] == TY_DTYPE_F32 ? 4 : 2;
      assert_memory_equal(on, off, total * es);
      for (int i = 0; i < CLIP_STEPS; ++i) {
        assert_true(non[i] == noff[i]);
        assert_true(non[i] > 0.5f); /* max_norm 0.05: every step clipped */
      }
      fprintf(stderr, "clip+adamw %s skip %d: norms %.4f .. %.4f, same bits fused and not\n",
              d ? "bf16" : "f32", skip, non[0], non[CLIP_STEPS - 1]);
    }
  }
  ty_registry_destroy(r);
}

/* The bf16 weight copies (cuda_fuse.h ty_cu_weight_copy_plan): with them
 * and with TRAINYARD_CUDA_WEIGHT_COPIES=0 the same losses, gradient norms
 * and parameters bit for bit, GPT-2's padded LM head included (vocabulary
 * 301); the report counts the copies (every matmul weight and bias, and the
 * head: the norms' weights and the embedding are read in f32) and how often
 * they were made: once, and once more when the host wrote two weights
 * between steps (the copies of those weights were stale: a run on them
 * would not follow the copies-off run). Copies that do not fit
 * (TRAINYARD_CUDA_FAULT=copies-oom) leave an executable compiled without
 * them, which says so and trains the same. */
static unsigned copies_made(const char *report, unsigned *count) {
  const char *line = strstr(report, "weights kept in bf16 by the optimizer: ");
  assert_non_null(line);
  double mib = 0;
  unsigned long long made = 0;
  assert_int_equal(sscanf(line, "weights kept in bf16 by the optimizer: %u (%lf MiB; made %llu",
                          count, &mib, &made),
                   3);
  return (unsigned)made;
}

static void test_weight_copies(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const shape_t shapes[2] = {base, {.vocab = 301, .bf16_logits = true}};
  /* the embedding and the head (301 x C each), the layers, the final norm */
  enum { MAX_FLOATS = 2 * 301 * C + LAYERS * (2 * C * C + 2 * C * F + 7 * C + F) + 2 * C };
  static float on_params[MAX_FLOATS], off_params[MAX_FLOATS];
  for (int k = 0; k < 4; ++k) {
    const shape_t *sh = &shapes[k % 2];
    const bool rms = k < 2; /* rmsnorm (Llama) or layernorm with biases (GPT-2) */
    for (int rebind = 0; rebind < 2; ++rebind) {
      double l_on[STEPS], n_on[STEPS], l_off[STEPS], n_off[STEPS];
      char rep_on[4096], rep_off[4096];
      rebind_step = rebind ? 2 : -1;
      memset(on_params, 0, sizeof(on_params));
      memset(off_params, 0, sizeof(off_params));
      /* one case runs eagerly (no CUDA graph): the copies are made before
       * the run's commands either way */
      const char *uri = k == 1 && rebind ? "cuda:0?graphs=0" : "cuda:0";
      all_params = on_params;
      train_with(r, uri, rms, sh, NULL, -1, l_on, n_on, rep_on, sizeof(rep_on), NULL);
      all_params = off_params;
      train_with(r, uri, rms, sh, "TRAINYARD_CUDA_WEIGHT_COPIES=0", -1, l_off, n_off, rep_off,
                 sizeof(rep_off), NULL);
      all_params = NULL;
      rebind_step = -1;
      for (int i = 0; i < STEPS; ++i) {
        if (memcmp(&l_on[i], &l_off[i], sizeof(double)) || memcmp(&n_on[i], &n_off[i], sizeof(double))) {
          fail_msg("%s, vocabulary %lld, rebind %d: step %d loss %.9g / %.9g, norm %.9g / %.9g",
                   rms ? "rmsnorm" : "layernorm", (long long)sh->vocab, rebind, i, l_on[i],
                   l_off[i], n_on[i], n_off[i]);
        }
      }
      assert_memory_equal(on_params, off_params, sizeof(on_params));
      unsigned on_count = 0, off_count = 0;
      const unsigned made = copies_made(rep_on, &on_count);
      const unsigned made_off = copies_made(rep_off, &off_count);
      /* 4 weights a layer, the 3 biases its linear layers add under
       * layernorm (build() declares a fourth that nothing reads), and the
       * head */
      assert_int_equal(on_count, LAYERS * (rms ? 4 : 7) + 1);
      assert_int_equal(off_count, 0);
      assert_int_equal(made_off, 0);
      assert_int_equal(made, rebind ? 2 : 1);
      if (k == 3 && !rebind) {
        /* copies that do not fit: compiled again without them */
        static float oom_params[MAX_FLOATS];
        double l_oom[STEPS], n_oom[STEPS];
        char rep_oom[4096];
        memset(oom_params, 0, sizeof(oom_params));
        all_params = oom_params;
        train_with(r, "cuda:0", rms, sh, "TRAINYARD_CUDA_FAULT=copies-oom", -1, l_oom, n_oom,
                   rep_oom, sizeof(rep_oom), NULL);
        all_params = NULL;
        unsigned oom_count = 0;
        assert_int_equal(copies_made(rep_oom, &oom_count), 0);
        assert_int_equal(oom_count, 0);
        assert_non_null(strstr(rep_oom, "left out: the executable did not fit with them"));
        assert_memory_equal(l_oom, l_off, sizeof(l_off));
        assert_memory_equal(oom_params, off_params, sizeof(off_params));
      }
      fprintf(stderr, "weight copies: %s, vocabulary %lld, rebind %d, %s: %u copies made %u "
              "time(s), losses %.6f .. %.6f the same bits as without\n",
              rms ? "rmsnorm" : "layernorm", (long long)sh->vocab, rebind, uri, on_count, made,
              l_on[0], l_on[STEPS - 1]);
    }
  }
  ty_registry_destroy(r);
}

/* Gradient accumulation: the micro-step graph (forward, backward, the
 * accumulators) and the optimizer's graph sharing their states on cuda:0,
 * ACC_MICRO micro-steps per optimizer step, ACC_STEPS optimizer steps, with
 * `env` set while both compile. The micro-step's weights are read only, so
 * its copies last from the optimizer's run (which writes the weights'
 * buffers) to the next: the report's "made" count is one per optimizer
 * step. Losses, norms and the final parameters into the arrays; returns
 * the micro-step executable's copy count. */
enum { ACC_MICRO = 2, ACC_STEPS = 3 };

static unsigned run_accum(ty_registry_t *r, bool rms, const char *env, double *losses,
                          double *norms, float *params_out, unsigned *made) {
  char env_name[64];
  env_set(env, env_name);
  ty_device_t *dev = NULL;
  TY_EXPECT_OK(ty_device_open(r, "cuda:0", &dev));
  params_t p;
  ty_graph_t *micro = build_mode(rms, &base, &p, TY_TRAIN_STEP_ACCUMULATE);
  ty_tensor_desc_t descs[MAX_PARAMS];
  for (uint32_t i = 0; i < p.count; ++i) {
    TY_EXPECT_OK(ty_tensor_desc_init(TY_DTYPE_F32, p.rank[i], p.dims[i], p.names[i], &descs[i]));
  }
  ty_graph_t *opt = NULL;
  TY_EXPECT_OK(ty_graph_create(&opt));
  TY_EXPECT_OK(ty_graph_build_optimizer_step(opt, descs, NULL, p.count, TY_OPTIMIZER_ADAMW, false));
  ty_session_t *sm = NULL, *so = NULL;
  TY_EXPECT_OK(ty_session_create(dev, micro, NULL, &sm));
  const ty_session_options_t share = {.share_state_with = sm};
  TY_EXPECT_OK(ty_session_create(dev, opt, &share, &so));
  env_unset(env_name);
  const int64_t V = base.vocab;
  float *buf = malloc((size_t)(V > F ? V : F) * F * sizeof(float));
  assert_non_null(buf);
  /* the optimizer's session makes its moments, zeros as new states are */
  bind_params(sm, &p, 4242, 0.1f, false, buf);
  const char *hp[] = {"lr", "weight_decay", "max_norm", "beta1", "beta2", "eps"};
  const float hv[] = {0.02f, 0.01f, 1.0f, 0.9f, 0.999f, 1e-8f};
  for (int i = 0; i < 6; ++i) bind_f32(so, hp[i], 0, NULL, &hv[i]);
  static int64_t ids[B * T], targets[B * T];
  static float weights[B * T];
  const int64_t bt[2] = {B, T};
  for (int o = 0; o < ACC_STEPS; ++o) {
    for (int m = 0; m < ACC_MICRO; ++m) {
      for (int i = 0; i < B * T; ++i) {
        ids[i] = (i * 7 + o * 5 + m * 3) % V;
        targets[i] = (ids[i] * 5 + i / T + m) % V;
        weights[i] = 1.0f / (float)(ACC_MICRO * B * T);
      }
      TY_EXPECT_OK(ty_session_bind(sm, "ids", TY_DTYPE_I64, 2, bt, ids, sizeof(ids)));
      TY_EXPECT_OK(ty_session_bind(sm, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
      bind_f32(sm, "loss_weights", 2, bt, weights);
      TY_EXPECT_OK(ty_session_run(sm));
      float l = 0;
      TY_EXPECT_OK(ty_session_read(sm, "loss", &l, sizeof(l)));
      losses[o * ACC_MICRO + m] = l;
    }
    const int64_t t = o + 1;
    TY_EXPECT_OK(ty_session_bind(so, "step", TY_DTYPE_I64, 0, NULL, &t, sizeof(t)));
    TY_EXPECT_OK(ty_session_run(so));
    float nrm = 0;
    TY_EXPECT_OK(ty_session_read(so, "grad_norm", &nrm, sizeof(nrm)));
    norms[o] = nrm;
  }
  read_params(sm, &p, params_out);
  char *text = NULL;
  TY_EXPECT_OK(ty_session_report(sm, &text));
  unsigned count = 0;
  *made = copies_made(text, &count);
  free(text);
  free(buf);
  ty_session_destroy(so);
  ty_session_destroy(sm);
  ty_graph_destroy(opt);
  ty_graph_destroy(micro);
  ty_device_close(dev);
  return count;
}

/* The micro-step's copies against none, bit for bit, rmsnorm and
 * layernorm models. */
static void test_weight_copies_accumulation(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  enum { FLOATS = 2 * 48 * C + LAYERS * (2 * C * C + 2 * C * F + 7 * C + F) + 2 * C };
  static float on[FLOATS], off[FLOATS];
  for (int k = 0; k < 2; ++k) {
    const bool rms = k == 0;
    double l_on[ACC_STEPS * ACC_MICRO], l_off[ACC_STEPS * ACC_MICRO];
    double n_on[ACC_STEPS], n_off[ACC_STEPS];
    unsigned made_on = 0, made_off = 0;
    memset(on, 0, sizeof(on));
    memset(off, 0, sizeof(off));
    const unsigned count = run_accum(r, rms, NULL, l_on, n_on, on, &made_on);
    const unsigned none = run_accum(r, rms, "TRAINYARD_CUDA_WEIGHT_COPIES=0", l_off, n_off, off,
                                    &made_off);
    assert_memory_equal(l_on, l_off, sizeof(l_on));
    assert_memory_equal(n_on, n_off, sizeof(n_on));
    assert_memory_equal(on, off, sizeof(on));
    assert_int_equal(count, LAYERS * (rms ? 4 : 7) + 1);
    assert_int_equal(none, 0);
    assert_int_equal(made_on, ACC_STEPS);
    assert_int_equal(made_off, 0);
    fprintf(stderr, "accumulation, %s: %u copies made %u times over %d optimizer steps of %d "
            "micro-steps; losses %.6f .. %.6f the same bits as without\n",
            rms ? "rmsnorm" : "layernorm", count, made_on, ACC_STEPS, ACC_MICRO, l_on[0],
            l_on[ACC_STEPS * ACC_MICRO - 1]);
  }
  ty_registry_destroy(r);
}

int main(int argc, char **argv) {
  if (argc > 1) cmocka_set_test_filter(argv[1]);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fusion_layernorm),
      cmocka_unit_test(test_fusion_rmsnorm),
      cmocka_unit_test(test_loss_gradient_in_place),
      cmocka_unit_test(test_in_place_refused_and_data_error),
      cmocka_unit_test(test_bias_gradient_fallback),
      cmocka_unit_test(test_slices_in_one_launch),
      cmocka_unit_test(test_rope_pairs),
      cmocka_unit_test(test_clip_folded_into_adamw),
      cmocka_unit_test(test_weight_copies),
      cmocka_unit_test(test_weight_copies_accumulation),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
