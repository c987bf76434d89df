/* Shared pieces of the dataflow plugin's tests: a registry of the build's
 * plugins, the tiny GPT-2 fixture as a train step (or inference graph) with
 * weights and a batch bound, and reading a session's report. */
#ifndef TY_TESTS_BACKENDS_DATAFLOW_TEST_UTIL_H_
#define TY_TESTS_BACKENDS_DATAFLOW_TEST_UTIL_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/registry.h"
#include "models/llm.h"

#define DF_TEST_B 2
#define DF_TEST_T 8

typedef enum {
  DF_TEST_TRAIN = 0,     /* AdamW train step */
  DF_TEST_TRAIN_SGD = 1, /* SGD train step */
  DF_TEST_INFERENCE = 2, /* forward with the loss, no optimizer */
  DF_TEST_ACCUMULATE = 3 /* forward + backward into accumulators */
} df_test_kind_t;

typedef struct {
  ty_graph_t *graph;
  ty_llm_t model;
} df_test_graph_t;

ty_registry_t *df_test_registry(void);
/* The gpt2 fixture (tests/fixtures/models/gpt2) as `kind`, B x T, with
 * dropout `p` (0 for none). */
void df_test_graph_build(df_test_kind_t kind, double dropout, df_test_graph_t *out);
void df_test_graph_free(df_test_graph_t *g);
/* Fresh weights, a seeded batch, hyperparameters (train kinds) and, when
 * `seed_ones`, explicit ones for loss_weights (else it stays unbound). */
void df_test_bind_step(const df_test_graph_t *g, ty_session_t *s, df_test_kind_t kind,
                       bool seed_ones);
/* The session's report (the test frees it). */
char *df_test_report(const ty_session_t *s);
/* "loss" after a run. */
float df_test_loss(ty_session_t *s);
/* A fresh temporary folder (the test removes it with df_test_rmtree). */
void df_test_tmpdir(char *out, size_t capacity);
void df_test_rmtree(const char *dir);
/* How many entries of `dir` end with `suffix` ("hidden": start with '.',
 * as temporary files do). */
int df_test_count_files(const char *dir, const char *suffix);

#endif /* TY_TESTS_BACKENDS_DATAFLOW_TEST_UTIL_H_ */
