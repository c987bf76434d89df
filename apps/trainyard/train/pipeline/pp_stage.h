/* One pipeline chunk on one rank (pp_stage.c): its forward graph (to send
 * activations on), its backward graph (forward again, then backward, adding
 * into "<param>.grad_accum" and giving the input's gradient) and its
 * optimizer graph, with their sessions sharing the chunk's state; and the
 * list of a chunk's tensors, by name, that moves between a stage and rank
 * 0's full model. */
#ifndef TY_APPS_TRAINYARD_PIPELINE_PP_STAGE_H_
#define TY_APPS_TRAINYARD_PIPELINE_PP_STAGE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/runtime/preflight.h"
#include "graph/runtime/session.h"
#include "models/llm.h"
#include "train/train_config.h"
#include "train/train_recipe.h"

typedef struct ty_pp_chunk_t {
  int global;                     /* its place in the model, 0 .. chunks - 1 */
  int32_t unit_begin, unit_end;   /* models/llm.h units */
  bool first, last;               /* holds the embedding / the head and loss */
  ty_graph_t *g_fwd, *g_bwd, *g_opt; /* no g_fwd on the last chunk: its
                                        backward graph does the forward */
  ty_graph_t *g_red;              /* its gradient sums and norm share, or
                                     NULL: none to make */
  bool red_share;                 /* g_red outputs "grad_norm_sq_share" */
  ty_llm_t m_fwd, m_bwd;          /* m_bwd.params: the chunk's parameters */
  ty_session_t *s_fwd, *s_bwd, *s_opt, *s_red; /* s_bwd owns the state */
  void *stash;                    /* each micro-batch's input activation, kept
                                     from its forward to its backward */
  size_t hidden_bytes;            /* B x T x C of the parameter dtype */
  ty_preflight_t plan;            /* the memory of its three graphs */
  bool planned;
  int *owner;                     /* ZeRO-1 (NULL without): the dp index that
                                     updates each of m_bwd.params */
  bool *update;                   /* owner[i] is this rank's dp index */
  /* ZeRO-2: g_opt (and s_opt) NULL where this rank owns none of the
   * chunk's parameters */
} ty_pp_chunk_t;

/* Where a chunk's gradients go before its optimizer step (its g_red):
 * summed over the dp replicas (and the cp ranks of each, whose gradients
 * cover their chunks of the rows only), a tied embedding (first and last chunk)
 * over the "embed" group, and the norm's share of this rank. */
typedef struct ty_pp_reduce_layout_t {
  int dp, pp, tp_rank;
  int cp;    /* context parallel: the sums run over dp x cp ("dp_cp") */
  bool tied; /* the model ties its embedding and head */
  bool zero; /* ZeRO-1: the optimizer updates this rank's share */
  bool zero_grads; /* ZeRO-2: the backward graph sums each gradient over
                      the shares, the owner alone keeps it */
  int dp_rank;
  /* ZeRO-1's shares: the dp replicas, or under --cp every cp rank of each
   * (dp x cp, index dp_rank x cp + cp_rank), and this rank's */
  int shares, share;
} ty_pp_reduce_layout_t;

/* ZeRO-1's shares of one chunk (units [unit_begin, unit_end)) over `dp`
 * shares (the replicas, or dp x cp): the parameters of `params` (count)
 * that the chunk holds, of elements[i] elements each (this tp rank's part),
 * by size (ty_train_plan_zero_owners); a tied embedding goes to the last
 * share on both its chunks, so its two copies get the same update. owner[i] -1
 * for a parameter the chunk does not hold. A stage (its m_bwd.params) and
 * rank 0's full model list a chunk in the same order: the same table. */
ty_status_t ty_pp_zero_owners(const ty_model_config_t *mc, int32_t unit_begin,
                              int32_t unit_end, const ty_llm_param_t *params,
                              const int64_t *elements, uint32_t count, int dp, int *owner);

/* Builds the chunk's graphs as `recipe` describes the step, and their
 * memory plan (ch->global and the unit range set by the caller), then
 * (after the plan is checked) its sessions on `device`. */
ty_status_t ty_pp_chunk_graphs(const ty_train_recipe_t *recipe, const ty_model_config_t *mc,
                               int64_t B, int64_t T, ty_dtype_t dtype, int64_t micro,
                               const ty_pp_reduce_layout_t *layout, ty_pp_chunk_t *ch);
/* `comm`: the host communicator the graphs' collective ops reduce through
 * (the tp ops of tensor parallel, the gradient sums), or NULL for a world
 * of one rank. */
ty_status_t ty_pp_chunk_sessions(const ty_train_config_t *c, ty_device_t *device,
                                 ty_host_comm_t *comm, ty_pp_chunk_t *ch);
void ty_pp_chunk_deinit(ty_pp_chunk_t *ch);

/* One tensor that moves: "<param>" or "<param>.<optimizer state>". */
typedef struct ty_pp_tensor_t {
  char name[TY_LLM_NAME_MAX + 32];
  ty_session_t *session; /* where it lives */
  ty_tensor_desc_t desc;
  size_t bytes;
  ty_llm_param_t param; /* the parameter it is (or is a state of): its tp split */
  uint32_t index;       /* the parameter's index in the list it came from */
  bool state;           /* an optimizer state (else the parameter) */
} ty_pp_tensor_t;

/* The tensors of the parameters of `params` (count) that the units
 * [unit_begin, unit_end) hold, each followed by those of its optimizer
 * states `opt_session` has (kinds: ty_optimizer_state_kinds; none without
 * `optimizer`), in the model's order, so a stage and the full model list
 * a chunk the same way. Parameters live in `param_session`. Caller frees
 * *out. */
ty_status_t ty_pp_tensors(const ty_model_config_t *mc, int32_t unit_begin, int32_t unit_end,
                          const ty_llm_param_t *params, uint32_t count,
                          ty_session_t *param_session, ty_session_t *opt_session,
                          const char *const *kinds, bool optimizer, ty_pp_tensor_t **out,
                          size_t *out_count, size_t *out_bytes);
/* Reads the tensors into `buffer` (their bytes in order), or binds them
 * from it. */
ty_status_t ty_pp_tensors_read(const ty_pp_tensor_t *tensors, size_t count, char *buffer);
ty_status_t ty_pp_tensors_bind(const ty_pp_tensor_t *tensors, size_t count, const char *buffer);

/* Between whole tensors (`whole`: the bytes of ty_pp_tensors_read of rank
 * 0's full model) and tp rank `tp_rank`'s parts of them (`part`: a stage's
 * bytes), each cut as its parameter is over `tp` ranks (llm.h "Tensor
 * parallel"): to_whole puts the parts in place, else takes them. With
 * `part` NULL only *out_part_bytes, the parts' size. Replicated tensors
 * (every one at tp 1) move whole, whatever their shape (Adafactor's
 * factored moments); INTERNAL for a split one not of its parameter's
 * shape. Call after ty_llm_tp_check accepted tp. */
ty_status_t ty_pp_tensors_split(const ty_model_config_t *mc, const ty_pp_tensor_t *tensors,
                                size_t count, int tp, int tp_rank, char *whole, char *part,
                                bool to_whole, size_t *out_part_bytes);

#endif /* TY_APPS_TRAINYARD_PIPELINE_PP_STAGE_H_ */
