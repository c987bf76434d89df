/* `train --deterministic`'s summation tree on the device (train_tree_dev.h).
 * Every graph declares every accumulator and every slot, so that each
 * session (sharing with the first, which shares with the train session)
 * sees the same buffers. No graph both reads and resets the accumulators:
 * state updates are copies done after the run, in the order they were
 * declared, and a reset beside a read would hang on that order. */
#include "train_tree_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "models/llm.h"
#include "train_tree.h"

typedef enum { TY_TDEV_STORE, TY_TDEV_MERGE_LEAF, TY_TDEV_MERGE, TY_TDEV_KINDS } ty_tdev_kind_t;

struct ty_train_tree_dev_t {
  ty_device_t *device;
  ty_session_t *train;
  uint32_t count;        /* parameters */
  char **names;          /* "<param>" each */
  ty_tensor_desc_t *descs; /* each accumulator's */
  int64_t rows;          /* leaves a step */
  int64_t pushed;        /* leaves pushed since the reset */
  int slots;             /* tree slots the rows reach */
  int final_depth;       /* partials left after `rows` leaves: popcount(rows) */
  uint64_t slot_bytes;   /* one slot over every parameter */
  uint32_t graphs;
  ty_train_tree_t levels; /* the levels and losses (no floats) */
  /* store_k: tree.k = acc; merge_leaf_k: tree.k = tree.k + acc; merge_k:
   * tree.k = tree.k + tree.(k+1); zero: acc = 0; finish: acc = ((tree.0 +
   * tree.1) + ...) over final_depth slots. NULL where never needed. */
  ty_session_t *kind[TY_TDEV_KINDS][TY_TRAIN_TREE_SLOTS];
  ty_session_t *zero, *finish;
  /* While planning (at create): the graphs a replay of the step's pushes
   * asked for, instead of running them. */
  bool planning;
  bool need[TY_TDEV_KINDS][TY_TRAIN_TREE_SLOTS];
};

static ty_status_t ty_tdev_state(ty_graph_t *g, const ty_tensor_desc_t *d, const char *name,
                                 ty_value_id_t *out) {
  TY_RETURN_IF_ERROR(ty_graph_add_state(g, name, TY_DTYPE_F32, d->rank, d->dims, out));
  return ty_graph_set_memory_class(g, *out, TY_MEMORY_GRADIENT);
}

/* Parameter i's accumulator and slots in graph g (acc, slot[0..slots)). */
static ty_status_t ty_tdev_states(const ty_train_tree_dev_t *t, ty_graph_t *g, uint32_t i,
                                  ty_value_id_t *acc, ty_value_id_t *slot) {
  char name[TY_LLM_NAME_MAX + 32];
  snprintf(name, sizeof(name), "%s.grad_accum", t->names[i]);
  TY_RETURN_IF_ERROR(ty_tdev_state(g, &t->descs[i], name, acc));
  for (int k = 0; k < t->slots; ++k) {
    snprintf(name, sizeof(name), "%s.tree.%d", t->names[i], k);
    TY_RETURN_IF_ERROR(ty_tdev_state(g, &t->descs[i], name, &slot[k]));
  }
  return TY_OK;
}

static ty_status_t ty_tdev_add(ty_graph_t *g, ty_value_id_t a, ty_value_id_t b,
                               ty_value_id_t *out) {
  const ty_value_id_t in[2] = {a, b};
  return ty_graph_add_node1(g, "add", in, 2, NULL, out);
}

/* The zeros of parameter i's shape: a STATE no graph updates (states start
 * as zeros, graph/runtime/session.h), one per shape, so the reset is one device
 * copy with no fill kernel and no arena. */
static ty_status_t ty_tdev_zeros(const ty_train_tree_dev_t *t, ty_graph_t *g, uint32_t i,
                                 ty_value_id_t *out) {
  char name[64 + 24 * TY_TENSOR_MAX_RANK];
  int at = snprintf(name, sizeof(name), "deterministic_tree.zeros.");
  for (uint32_t r = 0; r < t->descs[i].rank && at > 0 && (size_t)at < sizeof(name); ++r) {
    at += snprintf(name + at, sizeof(name) - (size_t)at, r ? "x%lld" : "%lld",
                   (long long)t->descs[i].dims[r]);
  }
  ty_status_t s = ty_graph_find(g, name, out);
  if (!s) return TY_OK; /* an earlier parameter of this shape */
  ty_status_free(s);
  return ty_tdev_state(g, &t->descs[i], name, out);
}

/* One graph over every parameter: `kind` at slot k, or the reset (kind ==
 * TY_TDEV_KINDS, k == -1) or the finish (k == -2). */
static ty_status_t ty_tdev_build(const ty_train_tree_dev_t *t, int kind, int k, ty_graph_t *g) {
  ty_value_id_t slot[TY_TRAIN_TREE_SLOTS];
  for (uint32_t i = 0; i < t->count; ++i) {
    ty_value_id_t acc, v;
    TY_RETURN_IF_ERROR(ty_tdev_states(t, g, i, &acc, slot));
    if (k == -1) {
      TY_RETURN_IF_ERROR(ty_tdev_zeros(t, g, i, &v));
      TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, acc, v));
    } else if (k == -2) {
      /* oldest first, as ty_train_tree_finish: ((S0 + S1) + S2) ... */
      v = slot[0];
      for (int j = 1; j < t->final_depth; ++j) TY_RETURN_IF_ERROR(ty_tdev_add(g, v, slot[j], &v));
      TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, acc, v));
    } else if (kind == TY_TDEV_STORE) {
      TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, slot[k], acc));
    } else {
      /* older + newer, as ty_train_tree_push */
      const ty_value_id_t newer = kind == TY_TDEV_MERGE_LEAF ? acc : slot[k + 1];
      TY_RETURN_IF_ERROR(ty_tdev_add(g, slot[k], newer, &v));
      TY_RETURN_IF_ERROR(ty_graph_set_state_update(g, slot[k], v));
    }
  }
  return TY_OK;
}

static ty_status_t ty_tdev_session(ty_train_tree_dev_t *t, const ty_session_options_t *options,
                                   int kind, int k, ty_session_t **out) {
  static const char *const what[] = {"store", "merge_leaf", "merge"};
  ty_graph_t *g = NULL;
  ty_status_t s = ty_graph_create(&g);
  if (!s) s = ty_tdev_build(t, kind, k, g);
  ty_session_options_t so = *options;
  so.fallback_device = NULL; /* a mixed run sums on the host (trainer_det.c) */
  /* the first session takes the accumulators from the train session and
   * makes the slots; the others take both from it */
  so.share_state_with = t->zero ? t->zero : t->train;
  if (!s) s = ty_session_create(t->device, g, &so, out);
  ty_graph_destroy(g);
  if (s) {
    return ty_status_annotate(s, "the deterministic tree's %s graph",
                              k == -1 ? "reset" : k == -2 ? "finish" : what[kind]);
  }
  t->graphs++;
  return TY_OK;
}

ty_status_t ty_train_tree_dev_create(ty_device_t *device, ty_session_t *train, const ty_session_options_t *options,
                                     const char *const *params, uint32_t count, int64_t rows,
                                     ty_train_tree_dev_t **out_tree) {
  *out_tree = NULL;
  if (rows < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "the deterministic tree needs rows >= 1");
  }
  ty_train_tree_dev_t *t = calloc(1, sizeof(*t));
  if (!t) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  t->device = device;
  t->train = train;
  t->count = count;
  t->rows = rows;
  ty_train_tree_init(&t->levels, 0);
  t->names = calloc(count ? count : 1, sizeof(char *));
  t->descs = calloc(count ? count : 1, sizeof(ty_tensor_desc_t));
  ty_status_t s = (!t->names || !t->descs)
                      ? ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory")
                      : TY_OK;
  for (uint32_t i = 0; i < count && !s; ++i) {
    char name[TY_LLM_NAME_MAX + 32];
    snprintf(name, sizeof(name), "%s.grad_accum", params[i]);
    s = ty_session_value_desc(train, name, &t->descs[i]);
    if (!s && t->descs[i].dtype != TY_DTYPE_F32) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s is %s; the deterministic tree sums f32",
                         name, ty_dtype_name(t->descs[i].dtype));
    }
    if (!s && !(t->names[i] = strdup(params[i]))) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (!s) t->slot_bytes += (uint64_t)ty_tensor_desc_element_count(&t->descs[i]) * 4;
  }
  /* The plan is a replay of the step's `rows` pushes through the very code
   * a step runs, with every graph it would run noted instead. */
  t->planning = true;
  for (int64_t r = 0; r < rows && !s; ++r) s = ty_train_tree_dev_push(t, 0.0);
  t->planning = false;
  t->final_depth = t->levels.depth;
  ty_train_tree_dev_reset(t);
  /* the slots the counter reaches (a store or a merge names each): at most
   * floor(log2(rows)) + 1, one fewer for a power of two */
  for (int kind = 0; kind < TY_TDEV_KINDS && !s; ++kind) {
    for (int k = 0; k < TY_TRAIN_TREE_SLOTS; ++k) {
      if (t->need[kind][k] && k + 1 > t->slots) t->slots = k + 1;
    }
  }
  /* one row: the leaf in the accumulators is the sum, nothing to build */
  if (!s && rows > 1) s = ty_tdev_session(t, options, TY_TDEV_KINDS, -1, &t->zero);
  for (int kind = 0; kind < TY_TDEV_KINDS && !s && rows > 1; ++kind) {
    for (int k = 0; k < t->slots && !s; ++k) {
      if (t->need[kind][k]) s = ty_tdev_session(t, options, kind, k, &t->kind[kind][k]);
    }
  }
  if (!s && rows > 1) s = ty_tdev_session(t, options, TY_TDEV_KINDS, -2, &t->finish);
  if (s) {
    ty_train_tree_dev_destroy(t);
    return s;
  }
  *out_tree = t;
  return TY_OK;
}

void ty_train_tree_dev_destroy(ty_train_tree_dev_t *t) {
  if (!t) return;
  for (int kind = 0; kind < TY_TDEV_KINDS; ++kind) {
    for (int k = 0; k < TY_TRAIN_TREE_SLOTS; ++k) ty_session_destroy(t->kind[kind][k]);
  }
  ty_session_destroy(t->finish);
  ty_session_destroy(t->zero);
  for (uint32_t i = 0; t->names && i < t->count; ++i) free(t->names[i]);
  free(t->names);
  free(t->descs);
  ty_train_tree_deinit(&t->levels);
  free(t);
}

uint64_t ty_train_tree_dev_bytes(const ty_train_tree_dev_t *t) {
  return t->rows > 1 ? t->slot_bytes * (uint64_t)t->slots : 0;
}

uint32_t ty_train_tree_dev_graphs(const ty_train_tree_dev_t *t) { return t->graphs; }

void ty_train_tree_dev_reset(ty_train_tree_dev_t *t) {
  ty_train_tree_reset(&t->levels);
  t->pushed = 0;
}

/* Graph `kind` at slot k (what names it): run it, or while planning note
 * that the step needs it. */
static ty_status_t ty_tdev_run(ty_train_tree_dev_t *t, int kind, const char *what, int k) {
  if (t->planning) {
    t->need[kind][k] = true;
    return TY_OK;
  }
  ty_session_t *s = t->kind[kind][k];
  if (!s) {
    return ty_status_make(TY_CODE_INTERNAL,
                          "the deterministic tree has no %s graph for slot %d (it was planned "
                          "for another row count)", what, k);
  }
  return ty_session_run(s);
}

ty_status_t ty_train_tree_dev_push(ty_train_tree_dev_t *t, double loss) {
  const int d = t->levels.depth;
  if (t->pushed >= t->rows) {
    return ty_status_make(TY_CODE_OUT_OF_RANGE,
                          "the deterministic tree was built for %lld rows a step",
                          (long long)t->rows);
  }
  float *leaf = NULL;
  TY_RETURN_IF_ERROR(ty_train_tree_next(&t->levels, &leaf));
  ty_train_tree_push(&t->levels, 0, loss);
  t->pushed++;
  if (t->rows == 1 && !t->planning) return TY_OK;
  if (t->levels.depth == d + 1) {
    TY_RETURN_IF_ERROR(ty_tdev_run(t, TY_TDEV_STORE, "store", d));
  } else {
    TY_RETURN_IF_ERROR(ty_tdev_run(t, TY_TDEV_MERGE_LEAF, "merge_leaf", d - 1));
    for (int k = d - 2; k >= t->levels.depth - 1; --k) {
      TY_RETURN_IF_ERROR(ty_tdev_run(t, TY_TDEV_MERGE, "merge", k));
    }
  }
  /* the finish overwrites the accumulators after the last leaf */
  return t->pushed == t->rows || t->planning ? TY_OK : ty_session_run(t->zero);
}

ty_status_t ty_train_tree_dev_finish(ty_train_tree_dev_t *t, double *out_loss) {
  const int d = t->levels.depth;
  ty_train_tree_finish(&t->levels, out_loss);
  if (t->rows == 1 && d == 1) return TY_OK;
  if (d != t->final_depth) {
    return ty_status_make(TY_CODE_INTERNAL,
                          "the deterministic tree holds %d partials; its finish graph folds %d "
                          "(a step of another row count)", d, t->final_depth);
  }
  return ty_session_run(t->finish);
}
