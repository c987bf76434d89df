/* Re-cast weights in the backward (graph/ir/autodiff.h, recast_states): the
 * gpt2-tiny and llama-tiny presets in bf16-mixed (f32 parameters, each
 * weight cast to bf16 where a matmul uses it), differentiated with and
 * without the option.
 *  - Structure: with it, every backward matmul that reads a cast of a
 *    parameter reads a cast emitted in the backward (after the forward's
 *    last node), every such cast has a reader, and the forward's casts are
 *    read by the forward alone; only casts of STATE values are copied (the
 *    casts of activations stay); without it, no cast is added.
 *  - Numbers: the loss and every gradient are bit-identical on the cpu
 *    backend (the copy computes the same bits).
 *  - An f32 model (no casts of parameters): the option adds no node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/autodiff.h"
#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/dtype.h"
#include "hal/registry.h"
#include "models/llm.h"
#include "models/presets.h"

#define B 2
#define T 16
#define VOCAB 300

typedef struct {
  ty_graph_t *g;
  ty_llm_t m;
  uint32_t forward_nodes; /* node count before autodiff */
  ty_value_id_t *grads;
} built_t;

static void build(const char *preset, ty_dtype_t compute, bool recast, built_t *out) {
  ty_model_config_t mc;
  TY_EXPECT_OK(ty_model_preset(preset, VOCAB, VOCAB - 1, VOCAB - 1, &mc));
  TY_EXPECT_OK(ty_graph_create(&out->g));
  ty_llm_options_t o = {.batch = B, .seq = T, .dtype = TY_DTYPE_F32, .compute_dtype = compute,
                        .with_loss = true};
  TY_EXPECT_OK(ty_llm_build(out->g, &mc, &o, &out->m));
  out->forward_nodes = ty_graph_node_count(out->g);
  ty_value_id_t *params = calloc(out->m.param_count, sizeof(ty_value_id_t));
  out->grads = calloc(out->m.param_count, sizeof(ty_value_id_t));
  assert_non_null(params);
  assert_non_null(out->grads);
  for (uint32_t i = 0; i < out->m.param_count; ++i) params[i] = out->m.params[i].value;
  const ty_autodiff_options_t ad = {.recast_states = recast};
  TY_EXPECT_OK(ty_graph_autodiff_ex(out->g, out->m.loss, TY_VALUE_NONE, params,
                                    out->m.param_count, &ad, out->grads));
  free(params);
}

static void built_free(built_t *b) {
  free(b->grads);
  ty_llm_deinit(&b->m);
  ty_graph_destroy(b->g);
}

/* Whether value v is the output of a cast of a STATE value. */
static bool is_state_cast(const ty_graph_t *g, ty_value_id_t v, uint32_t *node) {
  if (v == TY_VALUE_NONE) return false;
  const ty_graph_value_t *val = ty_graph_value(g, v);
  if (val->producer == UINT32_MAX) return false;
  const ty_graph_node_t *p = ty_graph_node(g, val->producer);
  if (strcmp(p->op, "cast") != 0) return false;
  *node = val->producer;
  return ty_graph_value(g, p->inputs[0])->role == TY_VALUE_STATE;
}

static uint32_t count_casts(const ty_graph_t *g, uint32_t from) {
  uint32_t n = 0;
  for (uint32_t i = from; i < ty_graph_node_count(g); ++i) {
    n += strcmp(ty_graph_node(g, i)->op, "cast") == 0;
  }
  return n;
}

static void check_structure(const char *preset) {
  built_t on, off;
  build(preset, TY_DTYPE_BF16, true, &on);
  build(preset, TY_DTYPE_BF16, false, &off);
  const ty_graph_t *g = on.g;
  const uint32_t nf = on.forward_nodes, nn = ty_graph_node_count(g);
  uint32_t backward_reads = 0, recasts = 0;
  for (uint32_t n = nf; n < nn; ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    if (strcmp(node->op, "matmul") == 0) {
      for (uint32_t i = 0; i < 2; ++i) {
        uint32_t producer;
        if (!is_state_cast(g, node->inputs[i], &producer)) continue;
        backward_reads++;
        if (producer < nf) {
          fail_msg("%s: backward matmul %u reads the forward's cast of %s (node %u)", preset, n,
                   ty_graph_value(g, ty_graph_node(g, producer)->inputs[0])->desc.name,
                   producer);
        }
      }
    }
    uint32_t producer;
    if (strcmp(node->op, "cast") == 0 && is_state_cast(g, node->outputs[0], &producer)) {
      recasts++;
      bool read = false;
      for (uint32_t m = n + 1; m < nn && !read; ++m) {
        const ty_graph_node_t *r = ty_graph_node(g, m);
        for (uint32_t i = 0; i < r->input_count; ++i) read = read || r->inputs[i] == node->outputs[0];
      }
      if (!read) fail_msg("%s: the backward's cast at node %u has no reader", preset, n);
    }
  }
  /* The forward's casts of parameters: no backward node reads them. */
  for (uint32_t n = 0; n < nf; ++n) {
    const ty_graph_node_t *node = ty_graph_node(g, n);
    uint32_t producer;
    if (strcmp(node->op, "cast") != 0 || !is_state_cast(g, node->outputs[0], &producer)) continue;
    for (uint32_t m = nf; m < nn; ++m) {
      const ty_graph_node_t *r = ty_graph_node(g, m);
      if (strcmp(r->op, "cast") == 0) continue; /* the cast's own gradient reads nothing */
      for (uint32_t i = 0; i < r->input_count; ++i) {
        if (r->inputs[i] == node->outputs[0]) {
          fail_msg("%s: backward node %u (%s) reads forward cast %u", preset, m, r->op, n);
        }
      }
    }
  }
  fprintf(stderr, "%s: %u casts re-made in the backward for %u matmul operands; casts %u -> %u\n",
          preset, recasts, backward_reads, count_casts(off.g, 0), count_casts(g, 0));
  assert_true(recasts > 0);
  assert_int_equal(backward_reads, recasts);
  assert_int_equal(count_casts(g, 0), count_casts(off.g, 0) + recasts);
  /* Without the option, the backward's matmuls read the forward's casts. */
  uint32_t forward_reads = 0;
  for (uint32_t n = off.forward_nodes; n < ty_graph_node_count(off.g); ++n) {
    const ty_graph_node_t *node = ty_graph_node(off.g, n);
    uint32_t producer;
    if (strcmp(node->op, "matmul") != 0) continue;
    for (uint32_t i = 0; i < 2; ++i) {
      if (is_state_cast(off.g, node->inputs[i], &producer)) forward_reads += producer < off.forward_nodes;
    }
  }
  assert_int_equal(forward_reads, recasts);
  built_free(&on);
  built_free(&off);
}

/* Loss and gradient bytes of one step on the cpu. */
static void run(const char *preset, bool recast, float *loss, unsigned char ***bytes,
                size_t **sizes, uint32_t *count) {
  built_t b;
  build(preset, TY_DTYPE_BF16, recast, &b);
  for (uint32_t i = 0; i < b.m.param_count; ++i) {
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "d.%s", b.m.params[i].name);
    TY_EXPECT_OK(ty_graph_set_output(b.g, b.grads[i], name));
  }
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *reg = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &reg));
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(reg, "cpu", &dev));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, b.g, NULL, &s));
  TY_EXPECT_OK(ty_llm_init_weights(&b.m, s, 11));
  int64_t tokens[B * T], targets[B * T];
  float w[B * T];
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 37 + 5) % VOCAB;
    targets[i] = (i * 53 + 1) % VOCAB;
    w[i] = 1.0f / (B * T);
  }
  const int64_t bt[2] = {B, T};
  TY_EXPECT_OK(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, tokens, sizeof(tokens)));
  TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
  TY_EXPECT_OK(ty_session_bind(s, "loss_weights", TY_DTYPE_F32, 2, bt, w, sizeof(w)));
  TY_EXPECT_OK(ty_session_run(s));
  TY_EXPECT_OK(ty_session_read(s, "loss", loss, sizeof(*loss)));
  *count = b.m.param_count;
  *bytes = calloc(b.m.param_count, sizeof(unsigned char *));
  *sizes = calloc(b.m.param_count, sizeof(size_t));
  for (uint32_t i = 0; i < b.m.param_count; ++i) {
    size_t n = 4;
    for (uint32_t d = 0; d < b.m.params[i].rank; ++d) n *= (size_t)b.m.params[i].dims[d];
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "d.%s", b.m.params[i].name);
    (*bytes)[i] = malloc(n);
    (*sizes)[i] = n;
    TY_EXPECT_OK(ty_session_read(s, name, (*bytes)[i], n));
  }
  ty_session_destroy(s);
  ty_device_close(dev);
  ty_registry_destroy(reg);
  built_free(&b);
}

static void check_bits(const char *preset) {
  float la, lb;
  unsigned char **ga, **gb;
  size_t *sa, *sb;
  uint32_t na, nb;
  run(preset, true, &la, &ga, &sa, &na);
  run(preset, false, &lb, &gb, &sb, &nb);
  assert_int_equal(na, nb);
  assert_true(memcmp(&la, &lb, sizeof(la)) == 0);
  for (uint32_t i = 0; i < na; ++i) {
    assert_int_equal(sa[i], sb[i]);
    if (memcmp(ga[i], gb[i], sa[i]) != 0) fail_msg("%s: gradient %u differs", preset, i);
    free(ga[i]);
    free(gb[i]);
  }
  fprintf(stderr, "%s: loss %.6f and %u gradients bit-identical with and without\n", preset, la,
          na);
  free(ga);
  free(gb);
  free(sa);
  free(sb);
}

static void test_structure_gpt2(void **state) {
  (void)state;
  check_structure("gpt2-tiny");
}

static void test_structure_llama(void **state) {
  (void)state;
  check_structure("llama-tiny");
}

static void test_bits_gpt2(void **state) {
  (void)state;
  check_bits("gpt2-tiny");
}

static void test_bits_llama(void **state) {
  (void)state;
  check_bits("llama-tiny");
}

/* f32 models have no casts of parameters: the option adds nothing. */
static void test_f32_unchanged(void **state) {
  (void)state;
  built_t on, off;
  build("gpt2-tiny", TY_DTYPE_INVALID, true, &on);
  build("gpt2-tiny", TY_DTYPE_INVALID, false, &off);
  assert_int_equal(ty_graph_node_count(on.g), ty_graph_node_count(off.g));
  built_free(&on);
  built_free(&off);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_structure_gpt2), cmocka_unit_test(test_structure_llama),
      cmocka_unit_test(test_bits_gpt2),      cmocka_unit_test(test_bits_llama),
      cmocka_unit_test(test_f32_unchanged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
