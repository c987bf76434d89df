/* Pipeline parallel's pure parts: the balanced partition of a model's
 * units (embedding, layers, head) into stages, and the order in which one
 * rank runs the forwards and backwards of its micro-batches (1F1B and
 * Megatron's interleaved 1F1B). No I/O, no state: unit-tested alone
 * (tests/apps/pp_schedule_test.c). */
#ifndef TY_APPS_TRAINYARD_PIPELINE_PP_SCHEDULE_H_
#define TY_APPS_TRAINYARD_PIPELINE_PP_SCHEDULE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

typedef enum ty_pp_kind_e {
  TY_PP_1F1B = 0,        /* one model chunk per rank */
  TY_PP_INTERLEAVED = 1, /* v chunks per rank, chunk c on rank c % pp */
} ty_pp_kind_t;

/* "1f1b" or "interleaved"; INVALID_ARGUMENT naming the choices otherwise. */
ty_status_t ty_pp_kind_parse(const char *text, ty_pp_kind_t *out);

/* One entry of a rank's schedule: the forward or backward of micro-batch
 * `micro` through the rank's local chunk `chunk` (0..v-1; its global chunk,
 * the position in the model, is chunk * pp + rank). */
typedef struct ty_pp_action_t {
  bool backward;
  int32_t micro;
  int32_t chunk;
} ty_pp_action_t;

/* The ordered actions of `rank` of `pp` for `micro` micro-batches, v chunks
 * per rank (v is 1 for 1F1B). 1F1B: pp - rank - 1 warm-up forwards, then
 * one forward and one backward in turn, then the remaining backwards.
 * Interleaved (Megatron-LM's schedule): forwards go round the chunks in
 * groups of pp micro-batches, backwards the chunks in reverse; warm-up
 * (pp - rank - 1) * 2 + (v - 1) * pp forwards (all of them when micro ==
 * pp). INVALID_ARGUMENT for micro % pp != 0 with interleaving, or sizes
 * < 1. The caller frees *out (2 * micro * v entries). */
ty_status_t ty_pp_schedule(ty_pp_kind_t kind, int rank, int pp, int v, int micro,
                           ty_pp_action_t **out, size_t *out_count);

/* Activations and gradients on a device communicator (ABI 1.8 point to
 * point, NCCL's semantics: a send completes only once its peer's receive
 * is posted; between two ranks the n-th send matches the n-th receive; a
 * batch's ops progress together), docs/design-notes.md "Pipeline
 * activations on the device". One message: the activation (gradient
 * false) or the gradient that global chunk `chunk` sends for micro-batch
 * `micro`. */
typedef struct ty_pp_message_t {
  bool gradient;
  int32_t chunk;
  int32_t micro;
} ty_pp_message_t;

typedef struct ty_pp_p2p_op_t {
  bool send;
  int32_t peer;        /* the other stage (rank of the pp group) */
  ty_pp_message_t msg;
  uint32_t batch;      /* ops of one batch are consecutive */
} ty_pp_p2p_op_t;

/* "the activations (gradient) of micro-batch m out of chunk c", for
 * messages. */
void ty_pp_message_text(const ty_pp_message_t *m, char *out, size_t capacity);

/* The message global chunk c's action x sends (needs false), or the one it
 * must receive first (needs true), in *out: a forward gets chunk c - 1's
 * activations and sends its own to c + 1, a backward gets chunk c + 1's
 * gradient and sends its own to c - 1. False when there is none (the
 * first chunk receives no activations and sends no gradient, the last the
 * reverse); `chunks` = pp x v. */
bool ty_pp_p2p_message(ty_pp_action_t x, int c, int chunks, bool needs, ty_pp_message_t *out);

/* When a rank issues its sends. */
typedef enum ty_pp_p2p_rule_e {
  /* The trainer's: every rank's schedule run at once as on the host path
   * (sends never wait), each message's receive an event of one global
   * order; each rank issues its sends and receives in that order, the
   * sends before a receive in one batch with it, the sends after its last
   * receive in one batch at the end. */
  TY_PP_P2P_GLOBAL = 0,
  /* Each send deferred into one batch with the rank's next receive, the
   * rest at the end: deadlock-free for 1F1B, not for interleaved (tests). */
  TY_PP_P2P_NEXT_RECV = 1,
  /* Each send alone right after its action: deadlocks at pp 2 (tests). */
  TY_PP_P2P_NAIVE = 2,
} ty_pp_p2p_rule_t;

/* The sends and receives of `rank` in the order it issues them under
 * `rule`, for its schedule (ty_pp_schedule's arguments and errors); every
 * receive ends its batch. Caller frees *out. */
ty_status_t ty_pp_p2p_plan(ty_pp_kind_t kind, int rank, int pp, int v, int micro,
                           ty_pp_p2p_rule_t rule, ty_pp_p2p_op_t **out, size_t *out_count);

/* Every rank's plan run at once under NCCL's semantics: OK when every
 * batch completes and each pair of ranks agrees on the order of their
 * messages (both sides name the same message at each position);
 * FAILED_PRECONDITION naming the first rank that would wait forever (and
 * for what), or the first message out of order. */
ty_status_t ty_pp_p2p_check(ty_pp_kind_t kind, int pp, int v, int micro,
                            ty_pp_p2p_rule_t rule);

/* The schedule's ideal bubble: the fraction of a step a stage idles when
 * every forward and backward takes the same time, (pp - 1) / (v * micro +
 * pp - 1). */
double ty_pp_ideal_bubble(int pp, int v, int micro);

/* Splits `units` consecutive costs into `parts` non-empty contiguous
 * ranges whose largest total is the smallest possible (ties: the earliest
 * boundaries). out_first[p] is the first unit of part p; out_first[parts]
 * = units. INVALID_ARGUMENT when parts > units or parts < 1. */
ty_status_t ty_pp_partition(const int64_t *costs, int units, int parts, int *out_first);

#endif /* TY_APPS_TRAINYARD_PIPELINE_PP_SCHEDULE_H_ */
