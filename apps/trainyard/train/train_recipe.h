/* What the graph recipe (train_graph.h) builds from: the model's precision
 * and the training step's optimizer, memory levers and rank layout. The
 * command line fills it from its options (ty_train_config_recipe); the
 * recipe never sees the CLI's structure, so a caller with no command line
 * (the conformance tier, a test) describes a step directly. */
#ifndef TY_APPS_TRAINYARD_TRAIN_TRAIN_RECIPE_H_
#define TY_APPS_TRAINYARD_TRAIN_TRAIN_RECIPE_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/ir/train_step.h"

typedef struct ty_train_recipe_t {
  /* the model */
  char precision[16];     /* --dtype: f32, bf16 or bf16-mixed */
  double dropout;         /* the train step's (validation has none) */
  /* the step */
  char optimizer[16];     /* adamw, sgd or adafactor */
  ty_adafactor_config_t adafactor; /* its arguments (optimizer adafactor) */
  bool decay_all;         /* weight decay on every parameter, not matrices alone */
  double clip;            /* gradient clipping's max norm (0: none) */
  int64_t grad_accum;     /* micro-batches a step */
  bool deterministic;     /* one row at a time, summed outside the graph */
  /* the memory levers */
  char recompute[16];     /* none, attention or layer */
  int64_t loss_chunk;     /* > 0: fused LM head + loss, N tokens at a time */
  int64_t mlp_chunk;      /* > 0: each block's MLP over N tokens at a time */
  bool fused_optimizer;   /* updates in the backward pass */
  char offload[16];       /* none or optimizer */
  char memory_limit[32];  /* the limit as the user wrote it ("" none), for messages */
  uint64_t memory_limit_bytes; /* 0: the device's memory */
  /* the rank layout */
  int64_t world, rank;    /* the run's processes and this one */
  bool world_in_graph;    /* a whole-step device: all_reduce ops in the step */
  int zero;               /* 1: ZeRO-1, each replica updates its share;
                             2: ZeRO-2, and keeps its share's accumulators */
  /* ZeRO-2's shares (the trainer's layout; 0 where the caller has none):
   * their count, this rank's, and the group whose ranks they are */
  int64_t zero_shares, zero_index;
  char zero_group[8];
  int64_t tp, tp_rank;    /* tensor parallel: this rank's part of the model */
  int64_t cp, cp_rank;    /* context parallel: this rank's chunks of each sequence */
} ty_train_recipe_t;

#endif /* TY_APPS_TRAINYARD_TRAIN_TRAIN_RECIPE_H_ */
