/* Pipeline chunks: their graphs and sessions, and the tensors that move
 * between a stage and rank 0's full model (pp_stage.h). */
#include "pp_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/runtime/preflight.h"
#include "graph/ir/train_step.h"
#include "hal/dtype.h"
#include "train/train_graph.h"
#include "train/train_plan.h"

/* The chunk's forward (with its loss on the last chunk) into a new graph. */
static ty_status_t ty_pp_forward(const ty_train_recipe_t *c, const ty_model_config_t *mc,
                                 int64_t B, int64_t T, ty_dtype_t dtype,
                                 const ty_pp_chunk_t *ch, ty_graph_t **out_g, ty_llm_t *out_m) {
  ty_dtype_t param_dtype, compute_dtype;
  TY_RETURN_IF_ERROR(ty_llm_precision_parse(c->precision, &param_dtype, &compute_dtype));
  ty_llm_options_t o = {.batch = B, .seq = T, .dtype = dtype, .compute_dtype = compute_dtype,
                        .dropout = c->dropout, .with_loss = ch->last,
                        .loss_chunk = ch->last ? c->loss_chunk : 0,
                        .mlp_chunk = c->mlp_chunk,
                        .unit_begin = ch->unit_begin, .unit_end = ch->unit_end,
                        .tp_size = (int)c->tp, .tp_rank = (int)c->tp_rank,
                        .cp_size = (int)c->cp, .cp_rank = (int)c->cp_rank};
  TY_RETURN_IF_ERROR(ty_graph_create(out_g));
  return ty_llm_build(*out_g, mc, &o, out_m);
}

/* The group the chunk's gradients are summed over: the replicas, or every
 * cp rank of each; NULL for one replica of one cp rank. */
static const char *ty_pp_sum_group(const ty_pp_reduce_layout_t *l) {
  return l->cp > 1 ? "dp_cp" : l->dp > 1 ? "dp" : NULL;
}

/* The chunk's gradient sums and norm share (ty_pp_reduce_layout_t). ZeRO-2:
 * the accumulators of this rank's share alone (descs packed to them), summed
 * already by the backward graph: only a tied embedding's two copies are
 * summed here, and the share's squares counted. */
static ty_status_t ty_pp_reduce_graph(const ty_pp_reduce_layout_t *l,
                                      const ty_tensor_desc_t *descs, ty_pp_chunk_t *ch) {
  const uint32_t all = ch->m_bwd.param_count;
  bool *tied = calloc(2 * (size_t)all + 1, sizeof(bool)), *counted = tied + all;
  if (!tied) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  uint32_t n = 0;
  for (uint32_t i = 0; i < all; ++i) {
    if (l->zero_grads && !ch->update[i]) continue;
    const ty_llm_param_t *q = &ch->m_bwd.params[i];
    tied[n] = l->tied && l->pp > 1 && (ch->first || ch->last) &&
              ty_llm_is_word_embedding(q->name);
    /* a tensor replicated over tp counts on tp rank 0, a tied copy on the
     * first stage: the global norm counts each gradient once */
    counted[n] = (q->tp_axis >= 0 || l->tp_rank == 0) && !(tied[n] && !ch->first);
    ++n;
  }
  ty_grad_reduce_params_t r = {.sum_group = l->zero_grads ? NULL : ty_pp_sum_group(l),
                               .tied_group = "embed", .tied = tied, .counted = counted};
  bool empty = true;
  ty_status_t s = ty_graph_create(&ch->g_red);
  if (!s) s = ty_graph_build_grad_reduce(ch->g_red, descs, n, &r, &empty, &ch->red_share);
  if (!s && empty) {
    ty_graph_destroy(ch->g_red);
    ch->g_red = NULL;
  }
  free(tied);
  return s;
}

ty_status_t ty_pp_zero_owners(const ty_model_config_t *mc, int32_t unit_begin,
                              int32_t unit_end, const ty_llm_param_t *params,
                              const int64_t *elements, uint32_t count, int dp, int *owner) {
  uint32_t *held = calloc(count + 1, sizeof(uint32_t));
  int64_t *size = calloc(count + 1, sizeof(int64_t));
  int *pinned = calloc(count + 1, sizeof(int)), *shares = calloc(count + 1, sizeof(int));
  ty_status_t s = held && size && pinned && shares
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  uint32_t n = 0;
  for (uint32_t i = 0; i < count && !s; ++i) {
    owner[i] = -1;
    if (!ty_llm_stage_has_param(mc, unit_begin, unit_end, params[i].name)) continue;
    held[n] = i;
    size[n] = elements[i];
    /* the first chunk's and the last chunk's copy: one owner for both */
    const bool tied = mc->tie_word_embeddings && ty_llm_is_word_embedding(params[i].name);
    pinned[n] = tied ? dp - 1 : -1;
    ++n;
  }
  if (!s) s = ty_train_plan_zero_owners(size, n, dp, pinned, -1, shares, NULL);
  for (uint32_t k = 0; k < n && !s; ++k) owner[held[k]] = shares[k];
  free(held);
  free(size);
  free(pinned);
  free(shares);
  return s;
}

/* ZeRO-1: this chunk's shares (ch->owner) and the optimizer's update mask
 * (ch->update), from the parameters' descriptors. */
static ty_status_t ty_pp_chunk_owners(const ty_model_config_t *mc,
                                      const ty_pp_reduce_layout_t *l,
                                      const ty_tensor_desc_t *descs, ty_pp_chunk_t *ch) {
  const uint32_t n = ch->m_bwd.param_count;
  int64_t *elements = calloc(n + 1, sizeof(int64_t));
  ch->owner = calloc(n + 1, sizeof(int));
  ch->update = calloc(n + 1, sizeof(bool));
  if (!elements || !ch->owner || !ch->update) {
    free(elements);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  for (uint32_t i = 0; i < n; ++i) elements[i] = ty_tensor_desc_element_count(&descs[i]);
  ty_status_t s = ty_pp_zero_owners(mc, ch->unit_begin, ch->unit_end, ch->m_bwd.params,
                                    elements, n, l->shares, ch->owner);
  for (uint32_t i = 0; i < n && !s; ++i) {
    if (ch->owner[i] < 0) { /* every parameter a stage builds is the chunk's */
      s = ty_status_make(TY_CODE_INTERNAL, "parameter %s is not in its chunk",
                         ch->m_bwd.params[i].name);
    }
    ch->update[i] = ch->owner[i] == l->share;
  }
  free(elements);
  return s;
}

ty_status_t ty_pp_chunk_graphs(const ty_train_recipe_t *c, const ty_model_config_t *mc,
                               int64_t B, int64_t T, ty_dtype_t dtype, int64_t micro,
                               const ty_pp_reduce_layout_t *layout, ty_pp_chunk_t *ch) {
  ch->hidden_bytes = (size_t)(B * T * mc->hidden_size) * ty_dtype_size(dtype);
  ch->stash = calloc((size_t)micro, ch->hidden_bytes ? ch->hidden_bytes : 1);
  if (!ch->stash) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  /* The backward graph: the forward again from the stashed input (so no
   * activation outlives a session run), then autodiff seeded by the next
   * chunk's gradient, or by the loss on the last chunk. */
  TY_RETURN_IF_ERROR(ty_pp_forward(c, mc, B, T, dtype, ch, &ch->g_bwd, &ch->m_bwd));
  ty_train_step_params_t step;
  TY_RETURN_IF_ERROR(ty_train_graph_step_options(c, &step));
  step.mode = TY_TRAIN_STEP_ACCUMULATE;
  step.all_reduce_grads = false;
  step.fused_optimizer = step.fused_clip = false;
  uint32_t n = ch->m_bwd.param_count;
  ty_value_id_t *params = calloc(n, sizeof(ty_value_id_t));
  if (!params) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n; ++i) params[i] = ch->m_bwd.params[i].value;
  step.params = params;
  step.param_count = n;
  step.loss_seed = TY_VALUE_NONE;
  ty_status_t s = TY_OK;
  /* ZeRO-2: the shares first (the backward graph accumulates its own) */
  ty_tensor_desc_t *descs = NULL;
  bool *decay = NULL;
  if (layout->zero_grads) {
    s = ty_train_graph_param_descs(c, ch->g_bwd, &ch->m_bwd, &descs, &decay);
    if (!s) s = ty_pp_chunk_owners(mc, layout, descs, ch);
    step.accumulate = ch->update;
    step.grad_group = ty_pp_sum_group(layout);
  }
  if (ch->last) {
    step.loss = ch->m_bwd.loss;
  } else {
    step.loss = ch->m_bwd.hidden_out;
    int64_t btc[3] = {B, T, mc->hidden_size};
    if (!s) s = ty_graph_add_input(ch->g_bwd, "hidden_out.grad", dtype, 3, btc, &step.loss_seed);
  }
  const char *input_grad = "hidden_in.grad";
  if (!ch->first) {
    step.wrt_inputs = &ch->m_bwd.hidden_in;
    step.wrt_input_names = &input_grad;
    step.wrt_input_count = 1;
  }
  if (!s) s = ty_graph_build_train_step(ch->g_bwd, &step);
  free(params);
  step.accumulate = NULL;
  step.grad_group = NULL;
  if (!s && !ch->last) s = ty_pp_forward(c, mc, B, T, dtype, ch, &ch->g_fwd, &ch->m_fwd);
  if (!s && !descs) s = ty_train_graph_param_descs(c, ch->g_bwd, &ch->m_bwd, &descs, &decay);
  step.norm_sq_input = true; /* the whole model's norm, from every stage */
  /* ZeRO-1: the optimizer updates this replica's share alone, and keeps
   * state for it alone */
  if (!s && layout->zero && !ch->owner) s = ty_pp_chunk_owners(mc, layout, descs, ch);
  step.update = ch->update;
  uint32_t owned = n;
  if (!s && layout->zero_grads) {
    /* ZeRO-2: the graphs of the share alone (no other accumulator is on
     * this rank), in parameter order */
    owned = ty_train_graph_keep_params(ch->update, n, descs, decay, NULL);
    step.update = NULL;
  }
  if (!s && owned) s = ty_graph_create(&ch->g_opt);
  if (!s && owned) s = ty_graph_build_optimizer_step_ex(ch->g_opt, descs, decay, owned, &step);
  if (!s) s = ty_pp_reduce_graph(layout, descs, ch);
  free(descs);
  free(decay);
  if (!s) {
    ty_preflight_init(&ch->plan);
    ch->planned = true;
    s = ty_preflight_add(&ch->plan, ch->g_bwd, "stage backward");
    if (!s && ch->g_fwd) s = ty_preflight_add(&ch->plan, ch->g_fwd, "stage forward");
    if (!s && ch->g_opt) s = ty_preflight_add(&ch->plan, ch->g_opt, "stage optimizer");
    if (!s && ch->g_red) s = ty_preflight_add(&ch->plan, ch->g_red, "stage gradient sums");
  }
  return s ? ty_status_annotate(s, "pipeline chunk %d (units %d..%d)", ch->global,
                                (int)ch->unit_begin, (int)ch->unit_end - 1)
           : TY_OK;
}

ty_status_t ty_pp_chunk_sessions(const ty_train_config_t *c, ty_device_t *device,
                                 ty_host_comm_t *comm, ty_pp_chunk_t *ch) {
  ty_session_options_t so = {.cache_dir = c->cache_dir, .retry_failed = c->retry_failed};
  ty_status_t s = ty_session_create(device, ch->g_bwd, &so, &ch->s_bwd);
  so.share_state_with = ch->s_bwd;
  if (!s && ch->g_fwd) s = ty_session_create(device, ch->g_fwd, &so, &ch->s_fwd);
  if (!s && ch->g_opt) s = ty_session_create(device, ch->g_opt, &so, &ch->s_opt);
  if (!s && ch->g_red) s = ty_session_create(device, ch->g_red, &so, &ch->s_red);
  /* the gradient sums, and with tensor or context parallel (or ZeRO-2's
   * sums in the backward graph) the forward and backward graphs' tp ops,
   * cp gathers and all_reduce ops */
  const bool split = c->tp > 1 || c->cp > 1 || c->zero == 2;
  ty_session_t *with_ops[3] = {ch->s_red, split ? ch->s_bwd : NULL, split ? ch->s_fwd : NULL};
  for (int i = 0; i < 3 && !s && comm; ++i) {
    if (with_ops[i]) s = ty_session_set_host_comm(with_ops[i], comm);
  }
  return s ? ty_status_annotate(s, "pipeline chunk %d", ch->global) : TY_OK;
}

void ty_pp_chunk_deinit(ty_pp_chunk_t *ch) {
  ty_session_destroy(ch->s_red);
  ty_session_destroy(ch->s_opt);
  ty_session_destroy(ch->s_fwd);
  ty_session_destroy(ch->s_bwd);
  ty_graph_destroy(ch->g_red);
  ty_graph_destroy(ch->g_opt);
  ty_graph_destroy(ch->g_fwd);
  ty_graph_destroy(ch->g_bwd);
  ty_llm_deinit(&ch->m_fwd);
  ty_llm_deinit(&ch->m_bwd);
  if (ch->planned) ty_preflight_deinit(&ch->plan);
  free(ch->stash);
  free(ch->owner);
  free(ch->update);
  memset(ch, 0, sizeof(*ch));
}

/* Appends `name` as it lives in `session`; *out_present false when the
 * session has no such value (an optimizer state the shape does not get). */
static ty_status_t ty_pp_tensor_add(ty_pp_tensor_t *list, size_t *n, ty_session_t *session,
                                    const ty_llm_param_t *param, uint32_t index,
                                    const char *name, bool *out_present) {
  ty_pp_tensor_t *x = &list[*n];
  snprintf(x->name, sizeof(x->name), "%s", name);
  ty_status_t s = ty_session_value_desc(session, x->name, &x->desc);
  *out_present = !s;
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
    ty_status_free(s);
    return TY_OK;
  }
  TY_RETURN_IF_ERROR(s);
  x->session = session;
  x->param = *param;
  x->index = index;
  x->state = strcmp(name, param->name) != 0;
  x->bytes = (size_t)ty_tensor_desc_element_count(&x->desc) * ty_dtype_size(x->desc.dtype);
  ++*n;
  return TY_OK;
}

ty_status_t ty_pp_tensors(const ty_model_config_t *mc, int32_t unit_begin, int32_t unit_end,
                          const ty_llm_param_t *params, uint32_t count,
                          ty_session_t *param_session, ty_session_t *opt_session,
                          const char *const *kinds, bool optimizer, ty_pp_tensor_t **out,
                          size_t *out_count, size_t *out_bytes) {
  size_t kind_count = 0;
  while (optimizer && kinds[kind_count]) ++kind_count;
  ty_pp_tensor_t *list = calloc((size_t)count * (kind_count + 1) + 1, sizeof(*list));
  if (!list) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0, bytes = 0;
  ty_status_t s = TY_OK;
  for (uint32_t i = 0; i < count && !s; ++i) {
    if (!ty_llm_stage_has_param(mc, unit_begin, unit_end, params[i].name)) continue;
    bool present = false;
    s = ty_pp_tensor_add(list, &n, param_session, &params[i], i, params[i].name, &present);
    if (!s && !present) {
      s = ty_status_make(TY_CODE_INTERNAL, "parameter %s is not in its session", params[i].name);
    }
    /* (ZeRO-2: no optimizer session where this rank owns none of them) */
    for (size_t k = 0; k < kind_count && !s && opt_session; ++k) {
      char name[TY_LLM_NAME_MAX + 32];
      snprintf(name, sizeof(name), "%s.%s", params[i].name, kinds[k]);
      s = ty_pp_tensor_add(list, &n, opt_session, &params[i], i, name, &present);
    }
  }
  for (size_t i = 0; i < n; ++i) bytes += list[i].bytes;
  if (s) {
    free(list);
    return s;
  }
  *out = list;
  *out_count = n;
  *out_bytes = bytes;
  return TY_OK;
}

ty_status_t ty_pp_tensors_read(const ty_pp_tensor_t *tensors, size_t count, char *buffer) {
  for (size_t i = 0; i < count; ++i) {
    TY_RETURN_IF_ERROR(ty_session_read(tensors[i].session, tensors[i].name, buffer,
                                       tensors[i].bytes));
    buffer += tensors[i].bytes;
  }
  return TY_OK;
}

ty_status_t ty_pp_tensors_bind(const ty_pp_tensor_t *tensors, size_t count, const char *buffer) {
  for (size_t i = 0; i < count; ++i) {
    const ty_tensor_desc_t *d = &tensors[i].desc;
    TY_RETURN_IF_ERROR(ty_session_bind(tensors[i].session, tensors[i].name, d->dtype, d->rank,
                                       d->dims, buffer, tensors[i].bytes));
    buffer += tensors[i].bytes;
  }
  return TY_OK;
}

ty_status_t ty_pp_tensors_split(const ty_model_config_t *mc, const ty_pp_tensor_t *tensors,
                                size_t count, int tp, int tp_rank, char *whole, char *part,
                                bool to_whole, size_t *out_part_bytes) {
  size_t w = 0, q = 0;
  for (size_t i = 0; i < count; ++i) {
    const ty_pp_tensor_t *x = &tensors[i];
    ty_llm_param_t split = x->param;
    ty_llm_tp_shard(mc, tp, &split);
    if (split.tp_axis < 0) { /* replicated (all of them at tp 1): whole, any shape */
      if (part && to_whole) {
        memcpy(whole + w, part + q, x->bytes);
      } else if (part) {
        memcpy(part + q, whole + w, x->bytes);
      }
      w += x->bytes;
      q += x->bytes;
      continue;
    }
    /* split: only states of the parameter's shape (Adafactor's factored
     * moments are refused with --tp) */
    const size_t elem = ty_dtype_size(x->desc.dtype);
    if ((size_t)ty_llm_param_full_count(&split) * elem != x->bytes) {
      return ty_status_make(TY_CODE_INTERNAL,
                            "%s: %zu bytes, and its parameter %s has %lld elements", x->name,
                            x->bytes, split.name, (long long)ty_llm_param_full_count(&split));
    }
    if (part && to_whole) {
      ty_llm_tp_put_part(&split, tp, tp_rank, elem, part + q, whole + w);
    } else if (part) {
      ty_llm_tp_take_part(&split, tp, tp_rank, elem, whole + w, part + q);
    }
    w += x->bytes;
    q += (size_t)ty_llm_param_part_count(&split) * elem;
  }
  *out_part_bytes = q;
  return TY_OK;
}
