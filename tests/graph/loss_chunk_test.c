/* The chunked loss (`train --loss-chunk`, op linear_cross_entropy) against
 * the unfused LM head + cross_entropy: on the llama-tiny and gpt2-tiny
 * presets (random weights, per-token loss weights with zeros, some targets
 * ignored), the loss and every parameter's gradient agree within 1e-6
 * (normwise relative error) on the cpu backend's f32 kernels, for chunks
 * that leave a short last one, one row and all rows; and within 1e-12 in
 * f64 on the reference kernels. Also checks that no [B, T, V] value exists
 * in the chunked graph. */
#include <math.h>
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
#define T 33
#define VOCAB 300

typedef struct {
  double loss;
  uint32_t count;
  double **grads; /* per parameter, as f64 */
  int64_t *sizes;
} result_t;

/* Loss and gradients of one batch with the head fused in chunks of `chunk`
 * (0: the unfused matmul + cross_entropy). */
static void run_model(const char *preset, const char *uri, ty_dtype_t dtype, int64_t chunk,
                      result_t *out) {
  ty_model_config_t mc;
  TY_EXPECT_OK(ty_model_preset(preset, VOCAB, VOCAB - 1, VOCAB - 1, &mc));
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_llm_options_t o = {.batch = B, .seq = T, .dtype = dtype, .with_loss = true,
                        .loss_chunk = chunk};
  ty_llm_t m;
  TY_EXPECT_OK(ty_llm_build(g, &mc, &o, &m));
  /* The point of the op: no value holds [B, T, V] logits. */
  for (uint32_t v = 0; chunk > 0 && v < ty_graph_value_count(g); ++v) {
    const ty_tensor_desc_t *d = &ty_graph_value(g, v)->desc;
    assert_false(d->rank == 3 && d->dims[2] == VOCAB);
  }
  ty_value_id_t *params = calloc(m.param_count, sizeof(ty_value_id_t));
  ty_value_id_t *grads = calloc(m.param_count, sizeof(ty_value_id_t));
  for (uint32_t i = 0; i < m.param_count; ++i) params[i] = m.params[i].value;
  TY_EXPECT_OK(ty_graph_autodiff(g, m.loss, TY_VALUE_NONE, params, m.param_count, grads));
  for (uint32_t i = 0; i < m.param_count; ++i) {
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "d.%s", m.params[i].name);
    TY_EXPECT_OK(ty_graph_set_output(g, grads[i], name));
  }
  ty_registry_t *reg = ty_test_open_registry(TY_TEST_PLUGIN_DIR);
  ty_device_t *dev;
  TY_EXPECT_OK(ty_device_open(reg, uri, &dev));
  ty_session_t *s;
  TY_EXPECT_OK(ty_session_create(dev, g, NULL, &s));
  TY_EXPECT_OK(ty_llm_init_weights(&m, s, 7));
  /* Tokens, targets (some ignored) and weights (some zero), all seeded. */
  int64_t tokens[B * T], targets[B * T];
  double w64[B * T];
  float w32[B * T];
  uint64_t state = 12345;
  for (int i = 0; i < B * T; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    tokens[i] = (int64_t)((state >> 33) % VOCAB);
    targets[i] = i % 11 == 5 ? -1 : (int64_t)((state >> 17) % VOCAB);
    w64[i] = i % 7 == 3 ? 0.0 : 1.0 / (B * T);
    w32[i] = (float)w64[i];
  }
  int64_t bt[2] = {B, T};
  TY_EXPECT_OK(ty_session_bind(s, "tokens", TY_DTYPE_I64, 2, bt, tokens, sizeof(tokens)));
  TY_EXPECT_OK(ty_session_bind(s, "targets", TY_DTYPE_I64, 2, bt, targets, sizeof(targets)));
  ty_dtype_t wd = dtype == TY_DTYPE_F64 ? TY_DTYPE_F64 : TY_DTYPE_F32;
  TY_EXPECT_OK(ty_session_bind(s, "loss_weights", wd, 2, bt,
                               wd == TY_DTYPE_F64 ? (void *)w64 : (void *)w32,
                               wd == TY_DTYPE_F64 ? sizeof(w64) : sizeof(w32)));
  TY_EXPECT_OK(ty_session_run(s));
  if (wd == TY_DTYPE_F64) {
    TY_EXPECT_OK(ty_session_read(s, "loss", &out->loss, sizeof(double)));
  } else {
    float l;
    TY_EXPECT_OK(ty_session_read(s, "loss", &l, sizeof(l)));
    out->loss = l;
  }
  out->count = m.param_count;
  out->grads = calloc(m.param_count, sizeof(double *));
  out->sizes = calloc(m.param_count, sizeof(int64_t));
  size_t es = ty_dtype_size(dtype);
  for (uint32_t i = 0; i < m.param_count; ++i) {
    int64_t n = 1;
    for (uint32_t d = 0; d < m.params[i].rank; ++d) n *= m.params[i].dims[d];
    char name[TY_LLM_NAME_MAX + 8];
    snprintf(name, sizeof(name), "d.%s", m.params[i].name);
    void *raw = malloc((size_t)n * es);
    TY_EXPECT_OK(ty_session_read(s, name, raw, (size_t)n * es));
    out->grads[i] = malloc((size_t)n * sizeof(double));
    for (int64_t k = 0; k < n; ++k) {
      out->grads[i][k] = dtype == TY_DTYPE_F64 ? ((double *)raw)[k] : ((float *)raw)[k];
    }
    out->sizes[i] = n;
    free(raw);
  }
  free(params);
  free(grads);
  ty_session_destroy(s);
  ty_device_close(dev);
  ty_registry_destroy(reg);
  ty_llm_deinit(&m);
  ty_graph_destroy(g);
}

static void result_free(result_t *r) {
  for (uint32_t i = 0; i < r->count; ++i) free(r->grads[i]);
  free(r->grads);
  free(r->sizes);
}

/* The worst normwise relative error of the gradients, and the loss's. */
static double compare(const result_t *a, const result_t *b, double *out_loss_rel) {
  assert_int_equal(a->count, b->count);
  double worst = 0;
  for (uint32_t i = 0; i < a->count; ++i) {
    double num = 0, den = 0;
    for (int64_t k = 0; k < a->sizes[i]; ++k) {
      double d = a->grads[i][k] - b->grads[i][k];
      num += d * d;
      den += b->grads[i][k] * b->grads[i][k];
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (rel > worst) worst = rel;
  }
  *out_loss_rel = fabs(a->loss - b->loss) / fabs(b->loss);
  return worst;
}

static void check(const char *preset, const char *uri, ty_dtype_t dtype, double bound) {
  result_t plain;
  run_model(preset, uri, dtype, 0, &plain);
  assert_true(plain.loss > 1.0); /* ~ln(300): a real loss, not zeros */
  static const int64_t chunks[] = {16, 1, B * T};
  for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); ++c) {
    result_t chunked;
    run_model(preset, uri, dtype, chunks[c], &chunked);
    double loss_rel, grad_rel = compare(&chunked, &plain, &loss_rel);
    printf("%s %s %s chunk %lld: loss rel %.2e, worst gradient rel %.2e\n", preset, uri,
           ty_dtype_name(dtype), (long long)chunks[c], loss_rel, grad_rel);
    assert_true(loss_rel <= bound);
    assert_true(grad_rel <= bound);
    result_free(&chunked);
  }
  result_free(&plain);
}

static void test_llama_f32(void **state) {
  (void)state;
  check("llama-tiny", "cpu", TY_DTYPE_F32, 1e-6);
}

static void test_gpt2_f32(void **state) {
  (void)state;
  check("gpt2-tiny", "cpu", TY_DTYPE_F32, 1e-6);
}

static void test_llama_f64_reference(void **state) {
  (void)state;
  check("llama-tiny", "cpu?kernels=reference", TY_DTYPE_F64, 1e-12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_llama_f32),
      cmocka_unit_test(test_gpt2_f32),
      cmocka_unit_test(test_llama_f64_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
