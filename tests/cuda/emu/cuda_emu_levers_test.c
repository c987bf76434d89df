/* The memory levers of issue 13 through the cuda plugin's executor, on the
 * CPU emulator of tests/cuda/emu (TRAINYARD_CUDA_DRIVER/_BLASLT name it):
 * train steps of a small model built the way models/llm.c builds one — an
 * embedding, two residual MLP blocks tagged as checkpointing regions, a
 * final RMSNorm and an untied LM head with per-token loss weights — by
 * ty_graph_build_train_step with each lever alone and all together
 * (--recompute layer: recomputed copies of the blocks in the backward;
 * --loss-chunk: linear_cross_entropy; --fused-optimizer with clipping:
 * updates interleaved with the backward, global_norm_scale and a norm
 * pass; Adafactor with momentum; --offload optimizer on cuda: the states in
 * mapped pinned host memory), each run for STEPS steps on cuda:0 and on
 * cpu with the same initial weights and data. The losses and gradient
 * norms must agree across the backends (1e-5 relative: the same arithmetic
 * in another summation order) and each lever must leave the plain run's
 * loss curve (1e-5). Every run replays its captured CUDA graph after the
 * first step, so the levers' graphs are also checked under capture. The
 * model has no attention: the emulator does not run that kernel family
 * (its tensor-core and dynamic-shared-memory kernels), which the GPU runs of
 * tests/cuda/device_run.sh's `memory` phase cover. The ACCUMULATE mode
 * (gradient accumulation's graph) is checked too: its accumulators, summed
 * in place, against cpu and against RUNS x one run's gradient. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "graph/ir/train_step.h"
#include "hal/backend_abi.h"
#include "hal/device.h"
#include "hal/registry.h"

enum { B = 2, T = 7, C = 16, F = 32, V = 40, LAYERS = 2, STEPS = 4 };

typedef struct {
  const char *name;
  ty_recompute_t recompute;
  int64_t loss_chunk;
  bool fused;
  ty_optimizer_t optimizer;
  bool offload; /* cuda only: the cpu refuses it (its memory is host memory) */
  bool accumulate; /* the ACCUMULATE mode: gradients added into
                      "<param>.grad_accum", no optimizer */
} levers_t;

typedef struct {
  ty_value_id_t ids[16];
  char names[16][24];
  int64_t dims[16][2];
  uint32_t rank[16];
  uint32_t count;
} params_t;

static ty_value_id_t add_param(ty_graph_t *g, params_t *p, const char *name, uint32_t rank,
                               int64_t d0, int64_t d1) {
  uint32_t i = p->count++;
  snprintf(p->names[i], sizeof(p->names[i]), "%s", name);
  p->rank[i] = rank;
  p->dims[i][0] = d0;
  p->dims[i][1] = d1;
  TY_EXPECT_OK(ty_graph_add_state(g, name, TY_DTYPE_F32, rank, p->dims[i], &p->ids[i]));
  return p->ids[i];
}

static ty_value_id_t node1(ty_graph_t *g, const char *op, const ty_value_id_t *in, uint32_t n,
                           const ty_attrs_t *attrs) {
  ty_value_id_t out;
  TY_EXPECT_OK(ty_graph_add_node1(g, op, in, n, attrs, &out));
  return out;
}

static ty_value_id_t rmsnorm(ty_graph_t *g, ty_value_id_t x, ty_value_id_t gamma) {
  ty_value_id_t in[2] = {x, gamma}, out[2];
  TY_EXPECT_OK(ty_graph_add_node(g, "rmsnorm", in, 2, NULL, out, 2));
  return out[0];
}

static ty_graph_t *build(const levers_t *lv, bool offload, params_t *p) {
  ty_graph_t *g = NULL;
  TY_EXPECT_OK(ty_graph_create(&g));
  memset(p, 0, sizeof(*p));
  const int64_t bt[2] = {B, T};
  ty_value_id_t ids, targets, weights;
  TY_EXPECT_OK(ty_graph_add_input(g, "ids", TY_DTYPE_I64, 2, bt, &ids));
  TY_EXPECT_OK(ty_graph_add_input(g, "targets", TY_DTYPE_I64, 2, bt, &targets));
  const ty_value_id_t emb = add_param(g, p, "emb", 2, V, C);
  ty_value_id_t x = node1(g, "embedding", (ty_value_id_t[]){emb, ids}, 2, NULL);
  for (int l = 0; l < LAYERS; ++l) {
    char name[24];
    snprintf(name, sizeof(name), "l%d.norm", l);
    const ty_value_id_t gamma = add_param(g, p, name, 1, C, 0);
    snprintf(name, sizeof(name), "l%d.up", l);
    const ty_value_id_t up = add_param(g, p, name, 2, C, F);
    snprintf(name, sizeof(name), "l%d.down", l);
    const ty_value_id_t down = add_param(g, p, name, 2, F, C);
    ty_graph_set_region(g, TY_REGION(l, TY_REGION_MLP));
    ty_value_id_t h = rmsnorm(g, x, gamma);
    h = node1(g, "matmul", (ty_value_id_t[]){h, up}, 2, NULL);
    h = node1(g, "silu", &h, 1, NULL);
    h = node1(g, "matmul", (ty_value_id_t[]){h, down}, 2, NULL);
    x = node1(g, "add", (ty_value_id_t[]){x, h}, 2, NULL);
    ty_graph_set_region(g, 0);
  }
  const ty_value_id_t final_norm = add_param(g, p, "norm", 1, C, 0);
  const ty_value_id_t head = add_param(g, p, "head", 2, V, C);
  const ty_value_id_t hf = rmsnorm(g, x, final_norm);
  ty_value_id_t per_token;
  if (lv->loss_chunk > 0) {
    ty_attrs_t a = TY_ATTRS_EMPTY;
    TY_EXPECT_OK(ty_attrs_set_int(&a, "chunk", lv->loss_chunk));
    ty_value_id_t outs[2];
    TY_EXPECT_OK(ty_graph_add_node(g, "linear_cross_entropy",
                                   (ty_value_id_t[]){hf, head, targets}, 3, &a, outs, 2));
    per_token = outs[0];
  } else {
    ty_attrs_t a = TY_ATTRS_EMPTY;
    TY_EXPECT_OK(ty_attrs_set_int(&a, "trans_b", 1));
    const ty_value_id_t logits = node1(g, "matmul", (ty_value_id_t[]){hf, head}, 2, &a);
    per_token = node1(g, "cross_entropy", (ty_value_id_t[]){logits, targets}, 2, NULL);
  }
  TY_EXPECT_OK(ty_graph_add_input(g, "loss_weights", TY_DTYPE_F32, 2, bt, &weights));
  TY_EXPECT_OK(ty_graph_mark_loss_seed(g, weights));
  ty_value_id_t loss = node1(g, "mul", (ty_value_id_t[]){per_token, weights}, 2, NULL);
  loss = node1(g, "reduce_sum", &loss, 1, NULL);
  TY_EXPECT_OK(ty_graph_set_output(g, loss, "loss"));
  ty_train_step_params_t tp = {
      .loss = loss,
      .loss_seed = TY_VALUE_NONE,
      .params = p->ids,
      .param_count = p->count,
      .optimizer = lv->optimizer,
      .recompute = lv->recompute,
      .fused_optimizer = lv->fused,
      .fused_clip = lv->fused,
      .offload_optimizer = offload,
      .mode = lv->accumulate ? TY_TRAIN_STEP_ACCUMULATE : TY_TRAIN_STEP_FUSED,
  };
  if (lv->optimizer == TY_OPTIMIZER_ADAFACTOR) {
    tp.adafactor = (ty_adafactor_config_t){.set = true, .eps1 = 1e-30, .eps2 = 1e-3,
                                           .clip_threshold = 1.0, .decay_rate = -0.8,
                                           .scale_parameter = true, .momentum = true};
  }
  TY_EXPECT_OK(ty_graph_build_train_step(g, &tp));
  return g;
}

static void bind_f32(ty_session_t *s, const char *name, uint32_t rank, const int64_t *dims,
                     const float *data) {
  int64_t n = 1;
  for (uint32_t i = 0; i < rank; ++i) n *= dims[i];
  TY_EXPECT_OK(ty_session_bind(s, name, TY_DTYPE_F32, rank, dims, data, (size_t)n * 4));
}

/* Whether the graph has a value `name` (its descriptor into *d). */
static bool has_value(ty_session_t *s, const char *name, ty_tensor_desc_t *d) {
  ty_status_t st = ty_session_value_desc(s, name, d);
  ty_status_free(st);
  return st == TY_OK;
}

static void bind_scalar(ty_session_t *s, const char *name, float v) {
  ty_tensor_desc_t d;
  if (!has_value(s, name, &d)) return; /* this optimizer's inputs only */
  bind_f32(s, name, 0, NULL, &v);
}

static int64_t param_elements(const params_t *p, uint32_t i) {
  return p->rank[i] == 1 ? p->dims[i][0] : p->dims[i][0] * p->dims[i][1];
}

/* Initial weights from `seed`: the same pseudo-random values on every
 * backend (norm gains near 1, matrices in [-0.3, 0.3]). */
static void bind_weights(ty_session_t *s, const params_t *p, uint32_t seed) {
  float *buf = calloc(V * F, sizeof(float));
  assert_non_null(buf);
  for (uint32_t i = 0; i < p->count; ++i) {
    const int64_t n = param_elements(p, i);
    for (int64_t k = 0; k < n; ++k) {
      seed = seed * 1664525u + 1013904223u;
      const float u = (float)(seed >> 8) / 16777216.0f - 0.5f;
      buf[k] = p->rank[i] == 1 ? 1.0f + 0.2f * u : 0.6f * u;
    }
    bind_f32(s, p->names[i], p->rank[i], p->dims[i], buf);
  }
  free(buf);
}

/* Zeros into "<param>.<kind>" for each of `kinds` (NULL-terminated) the
 * session has: optimizer states, accumulators. */
static void bind_zero_states(ty_session_t *s, const params_t *p, const char *const *kinds) {
  float *zeros = calloc(V * F, sizeof(float));
  assert_non_null(zeros);
  for (uint32_t i = 0; i < p->count; ++i) {
    for (const char *const *kind = kinds; *kind; ++kind) {
      char name[64];
      ty_tensor_desc_t d;
      snprintf(name, sizeof(name), "%s.%s", p->names[i], *kind);
      if (has_value(s, name, &d)) bind_f32(s, name, d.rank, d.dims, zeros);
    }
  }
  free(zeros);
}

/* Runs STEPS steps on `uri`; fills loss[] and norm[]. */
static void train(ty_registry_t *r, const char *uri, const levers_t *lv, double *loss,
                  double *norm) {
  ty_device_t *dev = NULL;
  ty_session_t *s = NULL;
  params_t p;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  const bool offload = lv->offload && strcmp(uri, "cpu") != 0;
  ty_graph_t *g = build(lv, offload, &p);
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  bind_weights(s, &p, 12345);
  bind_zero_states(s, &p, ty_optimizer_state_kinds(lv->optimizer)); /* they start at zero */
  ty_abi_device_memory_t mem;
  TY_EXPECT_OK(ty_device_memory(dev, false, &mem));
  if (offload) { /* the optimizer states live in pinned host memory */
    assert_true(mem.host_in_use_bytes > 0);
  } else if (strcmp(uri, "cpu") != 0) {
    assert_int_equal(mem.host_in_use_bytes, 0);
  }
  bind_scalar(s, "lr", 0.02f);
  bind_scalar(s, "weight_decay", 0.01f);
  bind_scalar(s, "max_norm", 0.5f); /* clips: the norms are near 1 */
  bind_scalar(s, "beta1", 0.9f);
  bind_scalar(s, "beta2", 0.999f);
  bind_scalar(s, "eps", 1e-8f);
  for (int step = 0; step < STEPS; ++step) {
    int64_t ids[B * T], targets[B * T];
    float weights[B * T];
    for (int i = 0; i < B * T; ++i) {
      ids[i] = (i * 7 + step * 3) % V;
      targets[i] = i % 5 == 4 ? -1 : (ids[i] * 3 + 1) % V; /* some ignored */
      weights[i] = targets[i] < 0 ? 0.0f : 1.0f / (float)(B * T);
    }
    const int64_t bt[2] = {B, T};
    TY_EXPECT_OK(ty_session_bind(s, "ids", TY_DTYPE_I64, 2, bt, ids, sizeof(ids)));
    TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
    bind_f32(s, "loss_weights", 2, bt, weights);
    const int64_t t = step + 1;
    TY_EXPECT_OK(ty_session_bind(s, "step", TY_DTYPE_I64, 0, NULL, &t, sizeof(t)));
    TY_EXPECT_OK(ty_session_run(s));
    float l = 0, n = 0;
    TY_EXPECT_OK(ty_session_read(s, "loss", &l, sizeof(l)));
    TY_EXPECT_OK(ty_session_read(s, "grad_norm", &n, sizeof(n)));
    loss[step] = l;
    norm[step] = n;
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

static void check_levers(ty_optimizer_t optimizer) {
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const levers_t runs[] = {
      {"plain", TY_RECOMPUTE_NONE, 0, false, optimizer, false, false},
      {"recompute-layer", TY_RECOMPUTE_LAYER, 0, false, optimizer, false, false},
      {"loss-chunk", TY_RECOMPUTE_NONE, 5, false, optimizer, false, false},
      {"fused-optimizer", TY_RECOMPUTE_NONE, 0, true, optimizer, false, false},
      {"offload", TY_RECOMPUTE_NONE, 0, false, optimizer, true, false},
      {"all", TY_RECOMPUTE_LAYER, 5, true, optimizer, true, false},
  };
  double plain[STEPS] = {0};
  for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); ++k) {
    double cl[STEPS], cn[STEPS], gl[STEPS], gn[STEPS];
    train(r, "cpu", &runs[k], cl, cn);
    train(r, "cuda:0", &runs[k], gl, gn);
    if (k == 0) memcpy(plain, cl, sizeof(plain));
    double worst = 0.0, worst_plain = 0.0;
    for (int i = 0; i < STEPS; ++i) {
      worst = fmax(worst, fmax(rel(gl[i], cl[i]), rel(gn[i], cn[i])));
      worst_plain = fmax(worst_plain, rel(gl[i], plain[i]));
    }
    fprintf(stderr, "%s %s: cuda vs cpu %.2e, vs the plain run %.2e (losses %.6f .. %.6f)\n",
            optimizer == TY_OPTIMIZER_ADAFACTOR ? "adafactor" : "adamw", runs[k].name, worst,
            worst_plain, gl[0], gl[STEPS - 1]);
    if (!(worst <= 1e-5) || !(worst_plain <= 1e-5)) {
      fail_msg("%s: cuda:0 vs cpu %.3g, vs the plain run %.3g (bound 1e-5)", runs[k].name, worst,
               worst_plain);
    }
    /* The model trained: the loss moved. */
    assert_true(fabs(gl[STEPS - 1] - gl[0]) > 1e-3);
  }
  ty_registry_destroy(r);
}

/* The ACCUMULATE mode (gradient accumulation, data parallel's split step):
 * each parameter's acc += grad is emitted where its gradient is complete
 * and the planner writes the sum straight into the accumulator's buffer
 * (hal/memory_plan.c). RUNS runs of one batch on `uri` from zeroed
 * accumulators; the accumulators read back into acc (every parameter's, in
 * order), and after the first run into first. Then the optimizer step's
 * graph (ty_graph_build_optimizer_step_ex, sharing the states: its clipped
 * gradients in the accumulators' buffers, the reset written into them):
 * the updated parameters into updated, and every accumulator must read
 * zero after it. */
enum { RUNS = 3 };

static size_t accumulate(ty_registry_t *r, const char *uri, const levers_t *lv, float *acc,
                         float *first, float *updated) {
  ty_device_t *dev = NULL;
  ty_session_t *s = NULL;
  params_t p;
  TY_EXPECT_OK(ty_device_open(r, uri, &dev));
  ty_graph_t *g = build(lv, false, &p);
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  static const char *const accumulators[] = {"grad_accum", NULL};
  bind_weights(s, &p, 777);
  bind_zero_states(s, &p, accumulators);
  int64_t ids[B * T], targets[B * T];
  float weights[B * T];
  for (int i = 0; i < B * T; ++i) {
    ids[i] = (i * 5 + 2) % V;
    targets[i] = i % 6 == 5 ? -1 : (ids[i] * 7 + 3) % V;
    weights[i] = targets[i] < 0 ? 0.0f : 1.0f / (float)(B * T);
  }
  const int64_t bt[2] = {B, T};
  size_t total = 0;
  for (int run = 0; run < RUNS; ++run) {
    TY_EXPECT_OK(ty_session_bind(s, "ids", TY_DTYPE_I64, 2, bt, ids, sizeof(ids)));
    TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
    bind_f32(s, "loss_weights", 2, bt, weights);
    TY_EXPECT_OK(ty_session_run(s));
    float *into = run == 0 ? first : run == RUNS - 1 ? acc : NULL;
    if (!into) continue;
    total = 0;
    for (uint32_t i = 0; i < p.count; ++i) {
      const int64_t n = param_elements(&p, i);
      char name[64];
      snprintf(name, sizeof(name), "%s.grad_accum", p.names[i]);
      TY_EXPECT_OK(ty_session_read(s, name, into + total, (size_t)n * sizeof(float)));
      total += (size_t)n;
    }
  }
  /* the optimizer step over the accumulators */
  ty_tensor_desc_t descs[16];
  for (uint32_t i = 0; i < p.count; ++i) {
    memset(&descs[i], 0, sizeof(descs[i]));
    snprintf(descs[i].name, sizeof(descs[i].name), "%s", p.names[i]);
    descs[i].dtype = TY_DTYPE_F32;
    descs[i].rank = p.rank[i];
    for (uint32_t k = 0; k < p.rank[i]; ++k) descs[i].dims[k] = p.dims[i][k];
  }
  ty_graph_t *go = NULL;
  ty_session_t *so = NULL;
  TY_EXPECT_OK(ty_graph_create(&go));
  /* SGD: its update is the clipped gradient times lr, so a clip applied
   * twice or not at all shows (Adam's first step would hide the scale) */
  ty_train_step_params_t step = {.optimizer = TY_OPTIMIZER_SGD};
  TY_EXPECT_OK(ty_graph_build_optimizer_step_ex(go, descs, NULL, p.count, &step));
  ty_session_options_t sopt = {.share_state_with = s};
  TY_EXPECT_OK(ty_session_create(dev, go, &sopt, &so));
  bind_zero_states(so, &p, ty_optimizer_state_kinds(TY_OPTIMIZER_SGD));
  bind_scalar(so, "lr", 0.5f);
  bind_scalar(so, "momentum", 0.9f);
  bind_scalar(so, "weight_decay", 0.01f);
  bind_scalar(so, "max_norm", 0.5f); /* clips */
  bind_scalar(so, "beta1", 0.9f);
  bind_scalar(so, "beta2", 0.999f);
  bind_scalar(so, "eps", 1e-8f);
  TY_EXPECT_OK(ty_session_run(so));
  size_t at = 0;
  for (uint32_t i = 0; i < p.count; ++i) {
    const int64_t n = param_elements(&p, i);
    TY_EXPECT_OK(ty_session_read(so, p.names[i], updated + at, (size_t)n * sizeof(float)));
    char name[64];
    snprintf(name, sizeof(name), "%s.grad_accum", p.names[i]);
    float *back = calloc((size_t)n, sizeof(float));
    assert_non_null(back);
    TY_EXPECT_OK(ty_session_read(so, name, back, (size_t)n * sizeof(float)));
    for (int64_t k = 0; k < n; ++k) {
      if (back[k] != 0.0f) {
        fail_msg("%s: %s[%lld] = %g after the step", uri, name, (long long)k, back[k]);
      }
    }
    free(back);
    at += (size_t)n;
  }
  ty_session_destroy(so);
  ty_graph_destroy(go);
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(dev);
  return total;
}

static void test_accumulate_mode(void **state) {
  (void)state;
  ty_registry_t *r = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  const levers_t runs[] = {
      {"accumulate", TY_RECOMPUTE_NONE, 0, false, TY_OPTIMIZER_ADAMW, false, true},
      {"accumulate-recompute-chunk", TY_RECOMPUTE_LAYER, 5, false, TY_OPTIMIZER_ADAMW, false,
       true},
  };
  const size_t most = (size_t)(V * C * 2 + LAYERS * (C + 2 * C * F) + C);
  float *acc[2], *first[2], *updated[2];
  for (int k = 0; k < 2; ++k) {
    acc[k] = calloc(most, sizeof(float));
    first[k] = calloc(most, sizeof(float));
    updated[k] = calloc(most, sizeof(float));
    assert_non_null(acc[k]);
    assert_non_null(first[k]);
    assert_non_null(updated[k]);
  }
  for (size_t k = 0; k < sizeof(runs) / sizeof(runs[0]); ++k) {
    const size_t n = accumulate(r, "cpu", &runs[k], acc[0], first[0], updated[0]);
    assert_int_equal(accumulate(r, "cuda:0", &runs[k], acc[1], first[1], updated[1]), n);
    assert_true(n > 0 && n <= most);
    double worst = 0.0, worst_runs = 0.0, largest = 0.0, worst_update = 0.0;
    for (size_t i = 0; i < n; ++i) {
      worst_update = fmax(worst_update, fabs(updated[1][i] - updated[0][i]));
      largest = fmax(largest, fabs(acc[0][i]));
      worst = fmax(worst, fabs(acc[1][i] - acc[0][i]));
      /* the same batch RUNS times: RUNS x the first run's gradient */
      for (int d = 0; d < 2; ++d) {
        worst_runs = fmax(worst_runs, fabs(acc[d][i] - RUNS * first[d][i]));
      }
    }
    fprintf(stderr, "%s: accumulators cuda vs cpu %.2e, vs %d x one run %.2e (largest %.3g); "
            "the clipped update's weights cuda vs cpu %.2e\n",
            runs[k].name, worst, RUNS, worst_runs, largest, worst_update);
    assert_true(largest > 1e-3); /* the gradients are not all zero */
    /* lr x the clipped gradient: its rounding, 1e-6 of the weights */
    if (!(worst_update <= 1e-6)) {
      fail_msg("%s: updated weights differ by %.3g", runs[k].name, worst_update);
    }
    if (!(worst <= 1e-5 * largest) || !(worst_runs <= 1e-5 * largest)) {
      fail_msg("%s: cuda:0 vs cpu %.3g, vs %d x one run %.3g (bound 1e-5 x %.3g)",
               runs[k].name, worst, RUNS, worst_runs, largest);
    }
  }
  for (int k = 0; k < 2; ++k) {
    free(acc[k]);
    free(first[k]);
    free(updated[k]);
  }
  ty_registry_destroy(r);
}

static void test_levers_adamw(void **state) {
  (void)state;
  check_levers(TY_OPTIMIZER_ADAMW);
}

static void test_levers_adafactor(void **state) {
  (void)state;
  check_levers(TY_OPTIMIZER_ADAFACTOR);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_levers_adamw),
      cmocka_unit_test(test_levers_adafactor),
      cmocka_unit_test(test_accumulate_mode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
