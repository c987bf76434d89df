/* Tensor parallel in `trainyard train` (--tp N, issue 17; README "Tensor
 * parallel"): the rank layout world = dp x tp and its groups, this rank's
 * part of the model (train_graph.c builds it with cfg.tp_rank), the host
 * communicator the step's tp_copy / tp_reduce ops reduce through, and the
 * gathers that put every rank's parts back into whole tensors for rank 0's
 * Hugging Face checkpoint and single-process optimizer file (under ZeRO-1,
 * each replica's shard of whole states). Every rank
 * loads or initializes the whole model and keeps its part
 * (models/checkpoint.h ty_llm_bind_whole), so the same seed gives the same
 * model for any layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distributed/dist.h"
#include "hal/dtype.h"
#include "models/checkpoint.h"
#include "trainer.h"

ty_status_t ty_trainer_tp_open(ty_trainer_t *t) {
  const int tp = (int)t->cfg.tp;
  if (tp > 1 && t->par.world == 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--tp %d splits the model over %d ranks, and this run is one "
                          "process: start it with mpirun -np %d (or a multiple)",
                          tp, tp, tp);
  }
  const int cp = (int)t->cfg.cp;
  if (cp > 1 && t->par.world == 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--cp %d splits each sequence over %d ranks, and this run is one "
                          "process: start it with mpirun -np %d (or a multiple)",
                          cp, cp, cp * tp * (t->cfg.pp > 1 ? (int)t->cfg.pp : 1));
  }
  /* with --pp the pipeline makes the composed layout (ty_trainer_pp_layout) */
  if (t->cfg.pp > 1) return TY_OK;
  TY_RETURN_IF_ERROR(ty_dist_set_layout_cp(t->par.dist, tp, 1, cp));
  const ty_dist_layout_t *l = ty_dist_layout(t->par.dist);
  t->par.tp = l->tp;
  t->par.dp = l->dp;
  t->par.dp_rank = l->dp_index;
  t->par.cp = l->cp;
  t->par.cp_rank = l->cp_index;
  t->cfg.tp_rank = l->tp_index;
  t->cfg.cp_rank = l->cp_index;
  return TY_OK;
}

void ty_trainer_tp_close(ty_trainer_t *t) {
  free(t->par.tp_split);
  t->par.tp_split = NULL;
}

/* With --pp, rank 0's mirror is the whole model (ty_trainer_pp_build):
 * it alone evaluates and saves. */
bool ty_trainer_saves(const ty_trainer_t *t) {
  return t->par.rank == 0 || t->par.owner || (t->par.tp > 1 && !t->par.pipe && t->par.dp_rank == 0);
}

bool ty_trainer_evaluates(const ty_trainer_t *t) {
  return t->par.rank == 0 || (t->par.tp > 1 && !t->par.pipe && t->par.dp_rank == 0);
}

ty_status_t ty_trainer_tp_sessions(ty_trainer_t *t) {
  if (t->par.tp == 1) return TY_OK;
  const uint32_t n = t->graphs.m_train.param_count;
  t->par.tp_split = calloc(n ? n : 1, sizeof(bool));
  if (!t->par.tp_split) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n; ++i) t->par.tp_split[i] = t->graphs.m_train.params[i].tp_axis >= 0;
  return TY_OK;
}

ty_status_t ty_trainer_tp_comm(ty_trainer_t *t) {
  if (t->par.tp == 1 && t->par.cp <= 1 && !ty_trainer_zero2(t)) return TY_OK;
  /* The step's tp ops reduce over the tp group, its gradient sum over dp
   * goes through the host between the graphs (under ZeRO-2 the gradient
   * graph's and the optimizer graph's own ops sum over the zero group):
   * every session of the run reaches the groups through the world's host
   * communicator. */
  ty_dist_host_comm(t->par.dist, &t->par.host_comm);
  ty_session_t *sessions[3] = {t->graphs.s_train, t->graphs.s_opt, t->graphs.s_eval};
  for (int k = 0; k < 3; ++k) {
    if (sessions[k]) TY_RETURN_IF_ERROR(ty_session_set_host_comm(sessions[k], &t->par.host_comm));
  }
  return TY_OK;
}

ty_status_t ty_trainer_tp_print_layout(ty_trainer_t *t) {
  if (t->par.tp == 1 && t->par.cp <= 1) return TY_OK;
  /* Each rank's device, so rank 0 can print one line per rank. */
  char label[96];
  for (int r = 0; r < t->par.world; ++r) {
    if (r == t->par.rank) snprintf(label, sizeof(label), "%s", ty_device_label(t->device));
    TY_RETURN_IF_ERROR(ty_dist_broadcast(t->par.dist, r, label, sizeof(label), "the rank layout"));
    label[sizeof(label) - 1] = '\0';
    if (t->par.rank != 0) continue;
    if (r == 0) {
      const char *backend = ty_backend_name(ty_device_backend(t->device));
      fprintf(stderr, "%s: %d ranks = dp %d x pp 1 x tp %d x cp %d (%s; --dist-timeout %g s); ",
              t->par.tp > 1 ? "tensor parallel" : "context parallel", t->par.world, t->par.dp,
              t->par.tp, t->par.cp, ty_dist_library(t->par.dist), ty_dist_timeout(t->par.dist));
      if (t->par.tp > 1) {
        fprintf(stderr, "attention heads, MLP columns and the vocabulary split over tp, ");
      }
      if (t->par.cp > 1) {
        fprintf(stderr, "each sequence in %d chunks over cp (rank r: chunks r and %d-r; keys "
                        "and values all-gathered per layer), ",
                2 * t->par.cp, 2 * t->par.cp - 1);
      }
      if (t->par.tp_comm && !t->par.cp_comm) {
        fprintf(stderr, "the tp ops on %s's communicator of the tp group and the gradients "
                        "summed over dp %s (device communicators per group, ABI 1.7)",
                backend, t->par.comm ? "on its dp group's" : "(one replica: none)");
      } else if (t->par.cp_comm) {
        fprintf(stderr, "%s%s%s on %s's communicators of their groups and the gradients "
                        "summed over dp%s %s (device communicators per group, ABI 1.7)",
                t->par.tp_comm ? "the tp ops" : "", t->par.tp_comm && t->par.cp_comm ? " and " : "",
                t->par.cp_comm ? "the cp gathers" : "", backend, t->par.cp > 1 ? " x cp" : "",
                t->par.grad_comm ? "on the dp_cp group's"
                : t->par.comm    ? "on its dp group's"
                                 : "(one replica: none)");
      } else {
        fprintf(stderr, "gradients summed over dp%s through host memory",
                t->par.cp > 1 ? " x cp" : "");
      }
      /* ty_trainer_dist_owners: the shares are the replicas' */
      if (!t->par.owner) {
        fprintf(stderr, "\n");
      } else if (t->par.cp > 1) {
        fprintf(stderr, "; ZeRO-%d over dp x cp: each cp rank of each replica keeps the optimizer "
                        "state%s of its share of the parameters (%d shares%s) and broadcasts "
                        "their update over dp x cp\n",
                ty_trainer_zero2(t) ? 2 : 1, ty_trainer_zero2(t) ? " and gradient sums" : "",
                ty_trainer_zero_shares(t), t->par.tp > 1 ? ", each tp rank its parts" : "");
      } else {
        fprintf(stderr, "; ZeRO-%d over dp: each replica keeps the optimizer state%s of its "
                        "share of the parameters (each tp rank its parts) and broadcasts their "
                        "update over dp\n",
                ty_trainer_zero2(t) ? 2 : 1, ty_trainer_zero2(t) ? " and gradient sums" : "");
      }
    }
    ty_dist_layout_t l;
    TY_RETURN_IF_ERROR(ty_dist_layout_make_cp(t->par.world, r, t->par.tp, 1, t->par.cp, &l));
    char cp_text[24] = "";
    if (t->par.cp > 1) snprintf(cp_text, sizeof(cp_text), ", cp %d", l.cp_index);
    fprintf(stderr, "rank %d: dp %d, pp %d, tp %d%s, device %s\n", r, l.dp_index, l.pp_index,
            l.tp_index, cp_text, label);
  }
  return TY_OK;
}

ty_status_t ty_trainer_tp_gather(ty_trainer_t *t, ty_session_t *session,
                                 const ty_llm_param_t *p, const char *name, size_t elem,
                                 void **out_full) {
  *out_full = NULL;
  ty_dist_group_t *group = NULL;
  TY_RETURN_IF_ERROR(ty_dist_group(t->par.dist, "tp", &group));
  const int me = ty_dist_group_rank(group);
  const size_t part_bytes = (size_t)ty_llm_param_part_count(p) * elem,
               full_bytes = (size_t)ty_llm_param_full_count(p) * elem;
  void *part = malloc(part_bytes ? part_bytes : 1);
  void *full = me == 0 ? malloc(full_bytes ? full_bytes : 1) : NULL;
  ty_status_t s = part && (me != 0 || full)
                      ? ty_session_read(session, name, part, part_bytes)
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory gathering %s",
                                       name);
  if (!s && p->tp_axis < 0) { /* replicated: rank 0's own copy is the whole */
    if (me == 0) memcpy(full, part, full_bytes);
  } else if (!s) {
    /* Each rank's part in turn to the group; rank 0 puts it in place. */
    void *mine = malloc(part_bytes ? part_bytes : 1);
    if (!mine) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory gathering %s", name);
    for (int r = 0; !s && r < t->par.tp; ++r) {
      if (r == me) memcpy(mine, part, part_bytes);
      char what[TY_LLM_NAME_MAX + 48];
      snprintf(what, sizeof(what), "the tensor-parallel gather of %s", name);
      s = ty_dist_group_broadcast(group, r, mine, part_bytes, what);
      if (!s && me == 0) ty_llm_tp_put_part(p, t->par.tp, r, elem, mine, full);
    }
    free(mine);
  }
  free(part);
  if (s) {
    free(full);
    return s;
  }
  *out_full = full;
  return TY_OK;
}
