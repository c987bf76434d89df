/* GPT-2 and Llama-family forward graphs. One builder walks the shared
 * transformer shape (embed -> blocks of attention + MLP with pre-norm
 * residuals -> final norm -> LM head); the family decides the norm, the
 * position encoding, the MLP and the weight layouts. */
#include "models/llm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"


typedef struct {
  ty_graph_t *g;
  ty_llm_t *m;
  const ty_model_config_t *c;
  const ty_llm_options_t *o;
  uint32_t next_param;      /* where the next parameter usually is in m->params */
  ty_value_id_t positions; /* i64 [T] */
  ty_value_id_t kv_slots, row_seq, block_table; /* paged (kv_blocks > 0) */
  ty_value_id_t rng;       /* i64 [2] or NONE */
  int64_t dropout_stream;
} ty_builder_t;

static ty_status_t ty_b_param(ty_builder_t *b, ty_value_id_t *out, const char *fmt, ...)
    TY_PRINTF_ATTR(3, 4);

/* Creates the STATE value of the parameter named by fmt. Its shape comes
 * from the parameter set (llm_params.c), which m->params already holds in
 * the order the builder asks, so the lookup is one comparison. */
static ty_status_t ty_b_param(ty_builder_t *b, ty_value_id_t *out, const char *fmt, ...) {
  char name[TY_LLM_NAME_MAX];
  va_list args;
  va_start(args, fmt);
  vsnprintf(name, sizeof(name), fmt, args);
  va_end(args);
  ty_llm_param_t *p = NULL;
  if (b->next_param < b->m->param_count && !strcmp(b->m->params[b->next_param].name, name)) {
    p = &b->m->params[b->next_param];
  } else {
    for (uint32_t i = 0; i < b->m->param_count && !p; ++i) {
      if (!strcmp(b->m->params[i].name, name)) p = &b->m->params[i];
    }
  }
  if (!p || p->value != TY_VALUE_NONE) {
    return ty_status_make(TY_CODE_INTERNAL, "parameter '%s' is %s the parameter set", name,
                          p ? "twice in" : "not in");
  }
  b->next_param = (uint32_t)(p - b->m->params) + 1;
  TY_RETURN_IF_ERROR(ty_graph_add_state(b->g, p->name, b->o->dtype, p->rank, p->dims, &p->value));
  *out = p->value;
  return TY_OK;
}

static ty_status_t ty_b_node(ty_builder_t *b, const char *op, const ty_value_id_t *in,
                             uint32_t n, const ty_attrs_t *attrs, ty_value_id_t *out) {
  return ty_graph_add_node1(b->g, op, in, n, attrs, out);
}

static ty_status_t ty_b_binary(ty_builder_t *b, const char *op, ty_value_id_t x,
                               ty_value_id_t y, ty_value_id_t *out) {
  ty_value_id_t in[2] = {x, y};
  return ty_b_node(b, op, in, 2, NULL, out);
}

static ty_status_t ty_b_reshape(ty_builder_t *b, ty_value_id_t x, uint32_t rank,
                                const int64_t *dims, ty_value_id_t *out) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&a, "shape", dims, rank));
  return ty_b_node(b, "reshape", &x, 1, &a, out);
}

/* The dtype matmuls and attention run in (== dtype unless mixed). */
static ty_dtype_t ty_b_compute(const ty_builder_t *b) {
  ty_dtype_t c = b->o->compute_dtype;
  return c == TY_DTYPE_INVALID ? b->o->dtype : c;
}

/* x in dtype `to` (a cast node when it is not already). */
static ty_status_t ty_b_cast(ty_builder_t *b, ty_value_id_t x, ty_dtype_t to,
                             ty_value_id_t *out) {
  if (x == TY_VALUE_NONE || ty_graph_value(b->g, x)->desc.dtype == to) {
    *out = x;
    return TY_OK;
  }
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_string(&a, "dtype", ty_dtype_name(to)));
  return ty_b_node(b, "cast", &x, 1, &a, out);
}

/* y = x @ W (+ bias) in the compute dtype. GPT-2 Conv1D stores W as
 * [in, out]; Linear as [out, in]. */
static ty_status_t ty_b_linear(ty_builder_t *b, ty_value_id_t x, ty_value_id_t w,
                               ty_value_id_t bias, bool w_is_out_in, ty_value_id_t *out) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  if (w_is_out_in) TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "trans_b", 1));
  const ty_dtype_t ct = ty_b_compute(b);
  TY_RETURN_IF_ERROR(ty_b_cast(b, x, ct, &x));
  TY_RETURN_IF_ERROR(ty_b_cast(b, w, ct, &w));
  TY_RETURN_IF_ERROR(ty_b_cast(b, bias, ct, &bias));
  ty_value_id_t in[3] = {x, w, bias};
  return ty_b_node(b, "matmul", in, bias == TY_VALUE_NONE ? 2 : 3, &a, out);
}

static int ty_b_cp(const ty_builder_t *b) { return b->o->cp_size > 1 ? b->o->cp_size : 1; }

/* ---- tensor parallel (llm.h "Tensor parallel"; docs/design-notes.md) ---- */

static int ty_b_tp(const ty_builder_t *b) { return b->o->tp_size > 1 ? b->o->tp_size : 1; }

/* Entering a column-parallel region: Megatron's f (the identity forward,
 * the gradient summed over the tp ranks), nothing without tp. */
static ty_status_t ty_b_tp_enter(ty_builder_t *b, ty_value_id_t x, ty_value_id_t *out) {
  if (ty_b_tp(b) == 1) {
    *out = x;
    return TY_OK;
  }
  return ty_b_node(b, "tp_copy", &x, 1, NULL, out);
}

/* A row-parallel linear: each rank's part of the product, summed over the
 * tp ranks by g (identity gradient), then the bias, added once. Without
 * tp, the plain linear. */
static ty_status_t ty_b_row_linear(ty_builder_t *b, ty_value_id_t x, ty_value_id_t w,
                                   ty_value_id_t bias, bool w_is_out_in, ty_value_id_t *out) {
  if (ty_b_tp(b) == 1) return ty_b_linear(b, x, w, bias, w_is_out_in, out);
  ty_value_id_t partial, sum;
  TY_RETURN_IF_ERROR(ty_b_linear(b, x, w, TY_VALUE_NONE, w_is_out_in, &partial));
  TY_RETURN_IF_ERROR(ty_b_node(b, "tp_reduce", &partial, 1, NULL, &sum));
  if (bias == TY_VALUE_NONE) {
    *out = sum;
    return TY_OK;
  }
  TY_RETURN_IF_ERROR(ty_b_cast(b, bias, ty_b_compute(b), &bias));
  return ty_b_binary(b, "add", sum, bias, out);
}

/* The vocabulary-parallel ops' attributes: this rank's rows of the
 * vocabulary (models/llm_tp.c). */
static ty_status_t ty_b_vocab_attrs(ty_builder_t *b, ty_attrs_t *a) {
  int64_t start, valid;
  ty_llm_tp_vocab_shard(b->c, ty_b_tp(b), b->o->tp_rank, &start, &valid);
  TY_RETURN_IF_ERROR(ty_attrs_set_int(a, "vocab_start", start));
  return ty_attrs_set_int(a, "vocab_valid", valid);
}

/* The vocabulary-parallel cross-entropy of this rank's logits [B, T, Vp]
 * (docs/design-notes.md "Tensor parallel"): the max over the whole
 * vocabulary (a shift, no gradient), then the sum of exp and the target's
 * logit, each a sum of the ranks' parts, then the per-token loss, the same
 * on every rank. Two small reductions of [B, T] and [B, T, 2]; the padded
 * columns count nowhere. */
static ty_status_t ty_b_vocab_loss(ty_builder_t *b, ty_value_id_t targets,
                                   ty_value_id_t *out) {
  ty_attrs_t a = TY_ATTRS_EMPTY, mx = TY_ATTRS_EMPTY, lv = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_b_vocab_attrs(b, &a));
  TY_RETURN_IF_ERROR(ty_attrs_set_string(&mx, "reduce", "max"));
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&lv, "vocab_size", b->c->vocab_size));
  ty_value_id_t m, sums;
  TY_RETURN_IF_ERROR(ty_b_node(b, "vocab_max", &b->m->logits, 1, &a, &m));
  TY_RETURN_IF_ERROR(ty_b_node(b, "tp_reduce", &m, 1, &mx, &m));
  ty_value_id_t in[3] = {b->m->logits, targets, m};
  TY_RETURN_IF_ERROR(ty_b_node(b, "vocab_ce_sums", in, 3, &a, &sums));
  TY_RETURN_IF_ERROR(ty_b_node(b, "tp_reduce", &sums, 1, NULL, &sums));
  ty_value_id_t lin[2] = {sums, targets};
  return ty_b_node(b, "vocab_ce_loss", lin, 2, &lv, out);
}

static ty_status_t ty_b_dropout(ty_builder_t *b, ty_value_id_t x, ty_value_id_t *out) {
  if (b->rng == TY_VALUE_NONE) {
    *out = x;
    return TY_OK;
  }
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "p", b->o->dropout));
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "stream", b->dropout_stream++));
  if (ty_b_cp(b) > 1) { /* each element draws its bit of the whole sequence */
    const int64_t L = b->o->seq / 2, N = ty_b_cp(b), r = b->o->cp_rank;
    const int64_t starts[2] = {r * L, (2 * N - 1 - r) * L};
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "seq_len", 2 * N * L));
    TY_RETURN_IF_ERROR(ty_attrs_set_ints(&a, "seq_starts", starts, 2));
  }
  ty_value_id_t in[2] = {x, b->rng};
  return ty_b_node(b, "dropout", in, 2, &a, out);
}

static ty_status_t ty_b_norm(ty_builder_t *b, ty_value_id_t x, const char *prefix,
                             ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "eps", c->norm_eps));
  ty_value_id_t w, bias, outs[3];
  TY_RETURN_IF_ERROR(ty_b_param(b, &w, "%s.weight", prefix));
  if (c->arch == TY_ARCH_GPT2) {
    TY_RETURN_IF_ERROR(ty_b_param(b, &bias, "%s.bias", prefix));
    ty_value_id_t in[3] = {x, w, bias};
    TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "layernorm", in, 3, &a, outs, 3));
  } else {
    ty_value_id_t in[2] = {x, w};
    TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "rmsnorm", in, 2, &a, outs, 2));
  }
  *out = outs[0];
  return TY_OK;
}

static ty_status_t ty_b_rope(ty_builder_t *b, ty_value_id_t x, ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "theta", c->rope_theta));
  if (c->rope_type == TY_ROPE_LLAMA3) {
    TY_RETURN_IF_ERROR(ty_attrs_set_string(&a, "scaling", "llama3"));
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "factor", c->rope_factor));
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "low_freq_factor", c->rope_low_freq_factor));
    TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "high_freq_factor", c->rope_high_freq_factor));
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "original_max_position",
                                        c->rope_original_max_positions));
  }
  ty_value_id_t in[2] = {x, b->positions};
  return ty_b_node(b, "rope", in, 2, &a, out);
}

/* One attention node over the batch's (q, k, v). */
static ty_status_t ty_b_attention_one(ty_builder_t *b, ty_value_id_t q, ty_value_id_t k,
                                      ty_value_id_t v, ty_value_id_t *out) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "scale", 1.0 / sqrt((double)b->c->head_dim)));
  /* Mistral's window: query i sees key j iff i - window < j <= i, exactly the
   * op's rule (transformers' sliding-window mask). */
  if (b->c->sliding_window > 0) {
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "window", b->c->sliding_window));
  }
  ty_value_id_t in[3] = {q, k, v}, outs[2];
  TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "attention", in, 3, &a, outs, 2));
  *out = outs[0];
  return TY_OK;
}

/* Paged: writes the step's keys and values into the layer's pools (in
 * place, as state updates), then every token attends to its own
 * sequence's blocks up to its own position. q [1, T, H, D] and k, v
 * [1, T, Hkv, D] travel as [T, ., D]. */
static ty_status_t ty_b_attention_paged(ty_builder_t *b, int layer, ty_value_id_t q,
                                        ty_value_id_t k, ty_value_id_t v, ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  int64_t T = b->o->seq, H = c->num_heads, K = c->num_kv_heads, D = c->head_dim;
  int64_t qd[3] = {T, H, D}, kd[3] = {T, K, D}, back[4] = {1, T, H, D};
  int64_t pool_dims[4] = {b->o->kv_blocks, b->o->kv_block_size, K, D};
  ty_value_id_t fresh[2] = {k, v}, pools[2];
  const char *which[2] = {"k", "v"};
  TY_RETURN_IF_ERROR(ty_b_reshape(b, q, 3, qd, &q));
  /* Both reshapes before both writes: a backend may do the two writes in
   * one launch (cuda's KV_PAIR fusion) when both rows exist by the first. */
  ty_value_id_t rows[2];
  for (int i = 0; i < 2; ++i) TY_RETURN_IF_ERROR(ty_b_reshape(b, fresh[i], 3, kd, &rows[i]));
  for (int i = 0; i < 2; ++i) {
    char name[TY_LLM_NAME_MAX];
    snprintf(name, sizeof(name), "kv.%d.%s", layer, which[i]);
    ty_value_id_t pool;
    TY_RETURN_IF_ERROR(ty_graph_add_state(b->g, name, ty_b_compute(b), 4, pool_dims, &pool));
    ty_value_id_t in[3] = {pool, rows[i], b->kv_slots};
    TY_RETURN_IF_ERROR(ty_b_node(b, "paged_kv_write", in, 3, NULL, &pools[i]));
    TY_RETURN_IF_ERROR(ty_graph_set_state_update(b->g, pool, pools[i]));
  }
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "scale", 1.0 / sqrt((double)D)));
  if (c->sliding_window > 0) {
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "window", c->sliding_window));
  }
  ty_value_id_t in[6] = {q, pools[0], pools[1], b->block_table, b->row_seq, b->positions}, y;
  TY_RETURN_IF_ERROR(ty_b_node(b, "paged_attention", in, 6, &a, &y));
  return ty_b_reshape(b, y, 4, back, out);
}

/* Rows [start, start + len) of axis 1 of x. */
static ty_status_t ty_b_seq_slice(ty_builder_t *b, ty_value_id_t x, int64_t start, int64_t len,
                                  ty_value_id_t *out) {
  const ty_tensor_desc_t *d = &ty_graph_value(b->g, x)->desc;
  int64_t starts[TY_TENSOR_MAX_RANK] = {0}, sizes[TY_TENSOR_MAX_RANK];
  const uint32_t rank = d->rank;
  memcpy(sizes, d->dims, rank * sizeof(int64_t));
  starts[1] = start;
  sizes[1] = len;
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&a, "starts", starts, rank));
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&a, "sizes", sizes, rank));
  return ty_b_node(b, "slice", &x, 1, &a, out);
}

/* Context parallel's keys or values (docs/design-notes.md "Context
 * parallel"): this rank's [B, 2L, Hkv, D] all-gathered over the "cp"
 * group (rank s brings chunks s and 2N-1-s), then chunks 0 .. `last` put
 * back in sequence order. The gather's gradient is a reduce_scatter. */
static ty_status_t ty_b_cp_sorted(ty_builder_t *b, ty_value_id_t x, int64_t last,
                                  ty_value_id_t *out) {
  const int64_t N = ty_b_cp(b), L = b->o->seq / 2;
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_string(&a, "group", "cp"));
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "axis", 1));
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "parts", N));
  ty_value_id_t all, chunks[2 * TY_LLM_CP_MAX];
  TY_RETURN_IF_ERROR(ty_b_node(b, "all_gather", &x, 1, &a, &all));
  for (int64_t g = 0; g <= last; ++g) {
    const int64_t s = g < N ? g : 2 * N - 1 - g, slot = g < N ? 0 : 1;
    TY_RETURN_IF_ERROR(ty_b_seq_slice(b, all, (2 * s + slot) * L, L, &chunks[g]));
  }
  if (last == 0) {
    *out = chunks[0];
    return TY_OK;
  }
  ty_attrs_t ca = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&ca, "axis", 1));
  return ty_b_node(b, "concat", chunks, (uint32_t)(last + 1), &ca, out);
}

/* Global chunk g of the all-gathered [B, 2NL, Hkv, D] keys or values (rank
 * s brought chunks s and 2N-1-s, in that order). */
static ty_status_t ty_b_cp_chunk(ty_builder_t *b, ty_value_id_t all, int64_t g,
                                 ty_value_id_t *out) {
  const int64_t N = ty_b_cp(b), L = b->o->seq / 2;
  const int64_t s = g < N ? g : 2 * N - 1 - g, slot = g < N ? 0 : 1;
  return ty_b_seq_slice(b, all, (2 * s + slot) * L, L, out);
}

/* With a sliding window: local chunk c (global chunk g: r, then 2N-1-r)
 * attends causally to keys [0, (g + 1) L) of the gathered ones. The op's
 * causal mask is bottom-right aligned (query t at t + S - T), so query t
 * of the chunk sits at g L + t: exactly its mask in the whole sequence,
 * window included. */
static ty_status_t ty_b_attention_cp_prefix(ty_builder_t *b, ty_value_id_t q, ty_value_id_t k,
                                            ty_value_id_t v, const ty_attrs_t *a,
                                            ty_value_id_t y[2]) {
  const int64_t L = b->o->seq / 2, r = b->o->cp_rank, last = 2 * ty_b_cp(b) - 1 - r;
  ty_value_id_t ks, vs;
  TY_RETURN_IF_ERROR(ty_b_cp_sorted(b, k, last, &ks));
  TY_RETURN_IF_ERROR(ty_b_cp_sorted(b, v, last, &vs));
  for (int c = 0; c < 2; ++c) {
    const int64_t g = c == 0 ? r : last;
    ty_value_id_t qc, kc = ks, vc = vs, outs[2];
    TY_RETURN_IF_ERROR(ty_b_seq_slice(b, q, c * L, L, &qc));
    if (g < last) {
      TY_RETURN_IF_ERROR(ty_b_seq_slice(b, ks, 0, (g + 1) * L, &kc));
      TY_RETURN_IF_ERROR(ty_b_seq_slice(b, vs, 0, (g + 1) * L, &vc));
    }
    ty_value_id_t in[3] = {qc, kc, vc};
    TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "attention", in, 3, a, outs, 2));
    y[c] = outs[0];
  }
  return TY_OK;
}

/* Context parallel attention (docs/design-notes.md "Context parallel"):
 * local chunk c (global chunk g: r, then 2N-1-r) runs one attention per
 * visible chunk of keys: causal on its own diagonal chunk, causal=0 on
 * each earlier one, and merges the partials exactly (attention_merge, the
 * log-sum-exp of each). No key prefix is ever concatenated: this is the
 * form a ring schedule streams through, one chunk of K/V at a time. A
 * sliding window keeps the prefix form above (a chunk partly inside the
 * window would need a mask the op does not have). */
static ty_status_t ty_b_attention_cp(ty_builder_t *b, ty_value_id_t q, ty_value_id_t k,
                                     ty_value_id_t v, ty_value_id_t *out) {
  const int64_t N = ty_b_cp(b), L = b->o->seq / 2, r = b->o->cp_rank;
  ty_value_id_t y[2];
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_float(&a, "scale", 1.0 / sqrt((double)b->c->head_dim)));
  if (b->c->sliding_window > 0) {
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "window", b->c->sliding_window));
    TY_RETURN_IF_ERROR(ty_b_attention_cp_prefix(b, q, k, v, &a, y));
  } else {
    ty_attrs_t full = a;
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&full, "causal", 0));
    ty_attrs_t ga = TY_ATTRS_EMPTY;
    TY_RETURN_IF_ERROR(ty_attrs_set_string(&ga, "group", "cp"));
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&ga, "axis", 1));
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&ga, "parts", N));
    ty_value_id_t ka, va, kc[2 * TY_LLM_CP_MAX], vc[2 * TY_LLM_CP_MAX];
    TY_RETURN_IF_ERROR(ty_b_node(b, "all_gather", &k, 1, &ga, &ka));
    TY_RETURN_IF_ERROR(ty_b_node(b, "all_gather", &v, 1, &ga, &va));
    const int64_t last = 2 * N - 1 - r;
    for (int64_t g = 0; g <= last; ++g) {
      TY_RETURN_IF_ERROR(ty_b_cp_chunk(b, ka, g, &kc[g]));
      TY_RETURN_IF_ERROR(ty_b_cp_chunk(b, va, g, &vc[g]));
    }
    for (int c = 0; c < 2; ++c) {
      const int64_t g = c == 0 ? r : last;
      ty_value_id_t qc, acc[2];
      TY_RETURN_IF_ERROR(ty_b_seq_slice(b, q, c * L, L, &qc));
      ty_value_id_t in[3] = {qc, kc[g], vc[g]};
      TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "attention", in, 3, &a, acc, 2));
      for (int64_t j = 0; j < g; ++j) {
        ty_value_id_t part[2];
        ty_value_id_t pin[3] = {qc, kc[j], vc[j]};
        TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "attention", pin, 3, &full, part, 2));
        ty_value_id_t min[4] = {acc[0], acc[1], part[0], part[1]};
        TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "attention_merge", min, 4, NULL, acc, 2));
      }
      y[c] = acc[0];
    }
  }
  ty_attrs_t ca = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_int(&ca, "axis", 1));
  return ty_b_node(b, "concat", y, 2, &ca, out);
}

/* Attention of the whole batch: over the paged pools (the engine's
 * steps), over the context-parallel gathers, or one node. */
static ty_status_t ty_b_attention_core(ty_builder_t *b, int layer, ty_value_id_t q,
                                       ty_value_id_t k, ty_value_id_t v, ty_value_id_t *out) {
  if (b->o->kv_blocks > 0) return ty_b_attention_paged(b, layer, q, k, v, out);
  if (ty_b_cp(b) > 1) return ty_b_attention_cp(b, q, k, v, out);
  return ty_b_attention_one(b, q, k, v, out);
}

/* GPT-2 attention: fused c_attn, split into q, k, v. */
static ty_status_t ty_b_attention_gpt2(ty_builder_t *b, int layer, ty_value_id_t x,
                                       ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  /* Tensor parallel: this rank's heads (its part of each of q, k, v). */
  int64_t B = b->o->batch, T = b->o->seq, H = c->num_heads / ty_b_tp(b), D = c->head_dim,
          C = H * D, Cin = c->hidden_size;
  ty_value_id_t w, bias, parts[3], y;
  TY_RETURN_IF_ERROR(ty_b_tp_enter(b, x, &x));
  TY_RETURN_IF_ERROR(ty_b_param(b, &w, "transformer.h.%d.attn.c_attn.weight", layer));
  TY_RETURN_IF_ERROR(ty_b_param(b, &bias, "transformer.h.%d.attn.c_attn.bias", layer));
  /* c_attn's [Cin, 3C] weight (this rank's heads under --tp) holds q|k|v
   * side by side. Slicing the weight (Cin x C each) rather than the
   * activation (B x T x 3C) gives three matmuls of the same FLOPs whose
   * outputs are q, k and v already contiguous: no copy of the activation
   * in the forward, and in the backward two adds of [B, T, Cin] for dx
   * instead of three zero-padded [B, T, 3C] slice gradients and two adds of
   * that size (4.5% of a GPT-2 124M step on an H100, docs/performance.md).
   * The slices' gradients land on the small weight. */
  const ty_dtype_t ct = ty_b_compute(b);
  TY_RETURN_IF_ERROR(ty_b_cast(b, x, ct, &x));
  TY_RETURN_IF_ERROR(ty_b_cast(b, w, ct, &w));
  TY_RETURN_IF_ERROR(ty_b_cast(b, bias, ct, &bias));
  int64_t four[4] = {B, T, H, D};
  /* A paged inference step has no backward: one matmul on the whole
   * weight, then three slices of its small output, instead of slicing the
   * [Cin, 3C] weight every step. */
  if (b->o->kv_blocks > 0) {
    ty_value_id_t all;
    TY_RETURN_IF_ERROR(ty_b_linear(b, x, w, bias, false, &all));
    for (int i = 0; i < 3; ++i) {
      ty_attrs_t sa = TY_ATTRS_EMPTY;
      int64_t starts[3] = {0, 0, i * C}, sizes[3] = {B, T, C};
      TY_RETURN_IF_ERROR(ty_attrs_set_ints(&sa, "starts", starts, 3));
      TY_RETURN_IF_ERROR(ty_attrs_set_ints(&sa, "sizes", sizes, 3));
      ty_value_id_t yi;
      TY_RETURN_IF_ERROR(ty_b_node(b, "slice", &all, 1, &sa, &yi));
      TY_RETURN_IF_ERROR(ty_b_reshape(b, yi, 4, four, &parts[i]));
    }
  }
  for (int i = 0; i < 3 && b->o->kv_blocks <= 0; ++i) {
    ty_attrs_t wa = TY_ATTRS_EMPTY, ba = TY_ATTRS_EMPTY;
    int64_t wstarts[2] = {0, i * C}, wsizes[2] = {Cin, C}, bstart[1] = {i * C}, bsize[1] = {C};
    TY_RETURN_IF_ERROR(ty_attrs_set_ints(&wa, "starts", wstarts, 2));
    TY_RETURN_IF_ERROR(ty_attrs_set_ints(&wa, "sizes", wsizes, 2));
    TY_RETURN_IF_ERROR(ty_attrs_set_ints(&ba, "starts", bstart, 1));
    TY_RETURN_IF_ERROR(ty_attrs_set_ints(&ba, "sizes", bsize, 1));
    ty_value_id_t wi, bi, yi;
    TY_RETURN_IF_ERROR(ty_b_node(b, "slice", &w, 1, &wa, &wi));
    TY_RETURN_IF_ERROR(ty_b_node(b, "slice", &bias, 1, &ba, &bi));
    TY_RETURN_IF_ERROR(ty_b_linear(b, x, wi, bi, false, &yi));
    TY_RETURN_IF_ERROR(ty_b_reshape(b, yi, 4, four, &parts[i]));
  }
  TY_RETURN_IF_ERROR(ty_b_attention_core(b, layer, parts[0], parts[1], parts[2], &y));
  int64_t three[3] = {B, T, C};
  TY_RETURN_IF_ERROR(ty_b_reshape(b, y, 3, three, &y));
  ty_value_id_t pw, pb;
  TY_RETURN_IF_ERROR(ty_b_param(b, &pw, "transformer.h.%d.attn.c_proj.weight", layer));
  TY_RETURN_IF_ERROR(ty_b_param(b, &pb, "transformer.h.%d.attn.c_proj.bias", layer));
  return ty_b_row_linear(b, y, pw, pb, false, out);
}

/* A Linear of layer `layer`; `rows`: row-parallel under tp (o_proj,
 * down_proj), else column-parallel or whole. */
static ty_status_t ty_b_proj(ty_builder_t *b, int layer, const char *name, bool bias, bool rows,
                             ty_value_id_t x, ty_value_id_t *out) {
  ty_value_id_t w, bv = TY_VALUE_NONE;
  TY_RETURN_IF_ERROR(ty_b_param(b, &w, "model.layers.%d.%s.weight", layer, name));
  if (bias) TY_RETURN_IF_ERROR(ty_b_param(b, &bv, "model.layers.%d.%s.bias", layer, name));
  return rows ? ty_b_row_linear(b, x, w, bv, true, out) : ty_b_linear(b, x, w, bv, true, out);
}

/* Rows [first, first + count) of `x` (a weight [out, in] or a bias [out]). */
static ty_status_t ty_b_rows(ty_builder_t *b, ty_value_id_t x, int64_t first, int64_t count,
                             ty_value_id_t *out) {
  const ty_tensor_desc_t *d = &ty_graph_value(b->g, x)->desc;
  int64_t starts[2] = {first, 0}, sizes[2] = {count, d->rank == 2 ? d->dims[1] : 0};
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&a, "starts", starts, d->rank));
  TY_RETURN_IF_ERROR(ty_attrs_set_ints(&a, "sizes", sizes, d->rank));
  return ty_b_node(b, "slice", &x, 1, &a, out);
}

/* k_proj or v_proj when tp exceeds the key/value heads: every rank holds
 * them all (replicated) and uses the one head its query heads share. Its
 * gradient on a rank covers that rank's query heads alone, so the weight
 * enters through f: the sum over the tp ranks is the whole gradient, the
 * same on every rank, as a replicated parameter's must be. */
static ty_status_t ty_b_kv_replicated(ty_builder_t *b, int layer, const char *name,
                                      ty_value_id_t x, ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  const int tp = ty_b_tp(b);
  const int64_t D = c->head_dim, head = b->o->tp_rank / (tp / c->num_kv_heads);
  ty_value_id_t w, bv = TY_VALUE_NONE;
  TY_RETURN_IF_ERROR(ty_b_param(b, &w, "model.layers.%d.%s.weight", layer, name));
  TY_RETURN_IF_ERROR(ty_b_tp_enter(b, w, &w));
  TY_RETURN_IF_ERROR(ty_b_rows(b, w, head * D, D, &w));
  if (c->qkv_bias) {
    TY_RETURN_IF_ERROR(ty_b_param(b, &bv, "model.layers.%d.%s.bias", layer, name));
    TY_RETURN_IF_ERROR(ty_b_tp_enter(b, bv, &bv));
    TY_RETURN_IF_ERROR(ty_b_rows(b, bv, head * D, D, &bv));
  }
  return ty_b_linear(b, x, w, bv, true, out);
}

static ty_status_t ty_b_attention_llama(ty_builder_t *b, int layer, ty_value_id_t x,
                                        ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  /* Tensor parallel: this rank's query heads and the key/value heads they
   * use (its part of them, or the one they share). */
  const int tp = ty_b_tp(b);
  const bool kv_split = c->num_kv_heads % tp == 0;
  int64_t B = b->o->batch, T = b->o->seq, H = c->num_heads / tp,
          K = kv_split ? c->num_kv_heads / tp : 1, D = c->head_dim;
  ty_value_id_t q, k, v, y;
  TY_RETURN_IF_ERROR(ty_b_tp_enter(b, x, &x));
  TY_RETURN_IF_ERROR(ty_b_proj(b, layer, "self_attn.q_proj", c->qkv_bias, false, x, &q));
  if (kv_split) {
    TY_RETURN_IF_ERROR(ty_b_proj(b, layer, "self_attn.k_proj", c->qkv_bias, false, x, &k));
    TY_RETURN_IF_ERROR(ty_b_proj(b, layer, "self_attn.v_proj", c->qkv_bias, false, x, &v));
  } else {
    TY_RETURN_IF_ERROR(ty_b_kv_replicated(b, layer, "self_attn.k_proj", x, &k));
    TY_RETURN_IF_ERROR(ty_b_kv_replicated(b, layer, "self_attn.v_proj", x, &v));
  }
  int64_t qd[4] = {B, T, H, D}, kd[4] = {B, T, K, D};
  TY_RETURN_IF_ERROR(ty_b_reshape(b, q, 4, qd, &q));
  TY_RETURN_IF_ERROR(ty_b_reshape(b, k, 4, kd, &k));
  TY_RETURN_IF_ERROR(ty_b_reshape(b, v, 4, kd, &v));
  TY_RETURN_IF_ERROR(ty_b_rope(b, q, &q));
  TY_RETURN_IF_ERROR(ty_b_rope(b, k, &k));
  TY_RETURN_IF_ERROR(ty_b_attention_core(b, layer, q, k, v, &y));
  int64_t yd[3] = {B, T, H * D};
  TY_RETURN_IF_ERROR(ty_b_reshape(b, y, 3, yd, &y));
  return ty_b_proj(b, layer, "self_attn.o_proj", c->o_bias, true, y, out);
}

/* The chunked MLP (llm.h mlp_chunk; docs/design-notes.md "Chunked MLP"):
 * x in the compute dtype and the weights cast once, then per piece of N
 * tokens a slice, the MLP on it and its output, joined by one concat.
 * Each piece's nodes carry their chunk number (graph.h), so autodiff
 * recomputes a piece just before its backward (under --recompute layer)
 * and gives x its gradient as the concat of the pieces', and since the
 * sweep runs the pieces' backwards one after another, one piece's
 * intermediates ([B, N, I]) are live at a time. */
static ty_status_t ty_b_mlp_chunked(ty_builder_t *b, int layer, ty_value_id_t x,
                                    ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  const bool gpt2 = c->arch == TY_ARCH_GPT2, bias = gpt2 || c->mlp_bias;
  const char *const llama[3] = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
  const char *const gpt[2] = {"mlp.c_fc", "mlp.c_proj"};
  const ty_dtype_t ct = ty_b_compute(b);
  ty_value_id_t w[3], bv[3] = {TY_VALUE_NONE, TY_VALUE_NONE, TY_VALUE_NONE};
  const int count = gpt2 ? 2 : 3;
  for (int i = 0; i < count; ++i) {
    const char *name = gpt2 ? gpt[i] : llama[i];
    TY_RETURN_IF_ERROR(ty_b_param(b, &w[i], gpt2 ? "transformer.h.%d.%s.weight"
                                                 : "model.layers.%d.%s.weight", layer, name));
    if (bias) {
      TY_RETURN_IF_ERROR(ty_b_param(b, &bv[i], gpt2 ? "transformer.h.%d.%s.bias"
                                                     : "model.layers.%d.%s.bias", layer, name));
    }
    TY_RETURN_IF_ERROR(ty_b_cast(b, w[i], ct, &w[i]));
    TY_RETURN_IF_ERROR(ty_b_cast(b, bv[i], ct, &bv[i]));
  }
  TY_RETURN_IF_ERROR(ty_b_cast(b, x, ct, &x));
  const int64_t T = b->o->seq, N = b->o->mlp_chunk, pieces = (T + N - 1) / N;
  ty_value_id_t *ys = malloc((size_t)pieces * sizeof(ty_value_id_t));
  if (!ys) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = TY_OK;
  for (int64_t p = 0; p < pieces && !s; ++p) {
    ty_graph_set_chunk(b->g, (uint32_t)p + 1);
    ty_value_id_t xp, h, gate, up;
    s = ty_b_seq_slice(b, x, p * N, p + 1 < pieces ? N : T - p * N, &xp);
    if (!s && gpt2) {
      s = ty_b_linear(b, xp, w[0], bv[0], false, &h);
      if (!s) s = ty_b_node(b, "gelu", &h, 1, NULL, &h);
      if (!s) s = ty_b_row_linear(b, h, w[1], bv[1], false, &ys[p]);
    } else if (!s) {
      s = ty_b_linear(b, xp, w[0], bv[0], true, &gate);
      if (!s) s = ty_b_linear(b, xp, w[1], bv[1], true, &up);
      if (!s) s = ty_b_binary(b, "swiglu", gate, up, &h);
      if (!s) s = ty_b_row_linear(b, h, w[2], bv[2], true, &ys[p]);
    }
  }
  ty_graph_set_chunk(b->g, 0);
  ty_attrs_t a = TY_ATTRS_EMPTY;
  if (!s) s = ty_attrs_set_int(&a, "axis", 1);
  if (!s) s = ty_b_node(b, "concat", ys, (uint32_t)pieces, &a, out);
  free(ys);
  return s;
}

static ty_status_t ty_b_mlp(ty_builder_t *b, int layer, ty_value_id_t x, ty_value_id_t *out) {
  const ty_model_config_t *c = b->c;
  TY_RETURN_IF_ERROR(ty_b_tp_enter(b, x, &x)); /* columns split, then rows */
  if (b->o->mlp_chunk > 0 && b->o->mlp_chunk < b->o->seq) {
    return ty_b_mlp_chunked(b, layer, x, out);
  }
  if (c->arch == TY_ARCH_GPT2) {
    ty_value_id_t w1, b1, w2, b2, h;
    TY_RETURN_IF_ERROR(ty_b_param(b, &w1, "transformer.h.%d.mlp.c_fc.weight", layer));
    TY_RETURN_IF_ERROR(ty_b_param(b, &b1, "transformer.h.%d.mlp.c_fc.bias", layer));
    TY_RETURN_IF_ERROR(ty_b_linear(b, x, w1, b1, false, &h));
    TY_RETURN_IF_ERROR(ty_b_node(b, "gelu", &h, 1, NULL, &h));
    TY_RETURN_IF_ERROR(ty_b_param(b, &w2, "transformer.h.%d.mlp.c_proj.weight", layer));
    TY_RETURN_IF_ERROR(ty_b_param(b, &b2, "transformer.h.%d.mlp.c_proj.bias", layer));
    return ty_b_row_linear(b, h, w2, b2, false, out);
  }
  ty_value_id_t gate, up, h;
  TY_RETURN_IF_ERROR(ty_b_proj(b, layer, "mlp.gate_proj", c->mlp_bias, false, x, &gate));
  TY_RETURN_IF_ERROR(ty_b_proj(b, layer, "mlp.up_proj", c->mlp_bias, false, x, &up));
  TY_RETURN_IF_ERROR(ty_b_binary(b, "swiglu", gate, up, &h));
  return ty_b_proj(b, layer, "mlp.down_proj", c->mlp_bias, true, h, out);
}

static ty_status_t ty_b_embed(ty_builder_t *b, ty_value_id_t *out_h, ty_value_id_t *out_wte) {
  const ty_model_config_t *c = b->c;
  ty_value_id_t wte, h;
  bool gpt2 = c->arch == TY_ARCH_GPT2;
  TY_RETURN_IF_ERROR(
      ty_b_param(b, &wte, gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight"));
  ty_value_id_t in[2] = {wte, b->m->tokens};
  if (ty_b_tp(b) == 1) {
    TY_RETURN_IF_ERROR(ty_b_node(b, "embedding", in, 2, NULL, &h));
  } else { /* this rank's rows of the vocabulary (0 for the others'), summed over tp */
    ty_attrs_t a = TY_ATTRS_EMPTY;
    TY_RETURN_IF_ERROR(ty_b_vocab_attrs(b, &a));
    TY_RETURN_IF_ERROR(ty_b_node(b, "vocab_embedding", in, 2, &a, &h));
    TY_RETURN_IF_ERROR(ty_b_node(b, "tp_reduce", &h, 1, NULL, &h));
  }
  if (gpt2) {
    ty_value_id_t wpe, pos;
    TY_RETURN_IF_ERROR(ty_b_param(b, &wpe, "transformer.wpe.weight"));
    ty_value_id_t pin[2] = {wpe, b->positions};
    TY_RETURN_IF_ERROR(ty_b_node(b, "embedding", pin, 2, NULL, &pos));
    TY_RETURN_IF_ERROR(ty_b_binary(b, "add", h, pos, &h));
  }
  TY_RETURN_IF_ERROR(ty_b_dropout(b, h, &h));
  *out_h = h;
  *out_wte = wte;
  return TY_OK;
}

/* loss = sum(loss_per_token * loss_weights). The caller normalizes the
 * weights (1/N over the N counted targets for a mean; split over the
 * micro-batches of one optimizer step with gradient accumulation), so the
 * weights are exactly the per-token loss-gradient seed. */
static ty_status_t ty_b_loss(ty_builder_t *b, ty_value_id_t h, ty_value_id_t head) {
  int64_t bt[2] = {b->o->batch, b->o->seq};
  ty_value_id_t targets, weights, per_token, weighted;
  TY_RETURN_IF_ERROR(ty_graph_add_input(b->g, "targets", TY_DTYPE_I64, 2, bt, &targets));
  if (b->o->loss_chunk > 0) {
    /* The head's weight is [V, C] in both families (GPT-2's tied wte too).
     * Mixed precision: the head runs in the compute dtype as ty_b_linear
     * would run it (the per-token loss and logsumexp stay f32). */
    const ty_dtype_t ct = ty_b_compute(b);
    TY_RETURN_IF_ERROR(ty_b_cast(b, h, ct, &h));
    TY_RETURN_IF_ERROR(ty_b_cast(b, head, ct, &head));
    ty_attrs_t a = TY_ATTRS_EMPTY;
    TY_RETURN_IF_ERROR(ty_attrs_set_int(&a, "chunk", b->o->loss_chunk));
    ty_value_id_t in[3] = {h, head, targets}, outs[2];
    TY_RETURN_IF_ERROR(ty_graph_add_node(b->g, "linear_cross_entropy", in, 3, &a, outs, 2));
    per_token = outs[0];
  } else if (ty_b_tp(b) > 1) {
    TY_RETURN_IF_ERROR(ty_b_vocab_loss(b, targets, &per_token));
  } else {
    ty_value_id_t in[2] = {b->m->logits, targets};
    TY_RETURN_IF_ERROR(ty_b_node(b, "cross_entropy", in, 2, NULL, &per_token));
  }
  ty_dtype_t loss_dtype = ty_graph_value(b->g, per_token)->desc.dtype;
  TY_RETURN_IF_ERROR(ty_graph_add_input(b->g, "loss_weights", loss_dtype, 2, bt, &weights));
  /* Unbound, it is ones: the loss is then the sum over every target. */
  TY_RETURN_IF_ERROR(ty_graph_mark_loss_seed(b->g, weights));
  TY_RETURN_IF_ERROR(ty_b_binary(b, "mul", per_token, weights, &weighted));
  TY_RETURN_IF_ERROR(ty_b_node(b, "reduce_sum", &weighted, 1, NULL, &b->m->loss));
  TY_RETURN_IF_ERROR(ty_graph_set_output(b->g, b->m->loss, "loss"));
  b->m->loss_per_token = per_token;
  return ty_graph_set_output(b->g, per_token, "loss_per_token");
}

/* The paged inputs: positions, kv_slots and row_seq [T], block_table. */
static ty_status_t ty_b_paged_inputs(ty_builder_t *b) {
  ty_graph_t *g = b->g;
  int64_t T[1] = {b->o->seq}, table[2] = {b->o->table_rows, b->o->table_blocks};
  TY_RETURN_IF_ERROR(ty_graph_add_input(g, "positions", TY_DTYPE_I64, 1, T, &b->positions));
  TY_RETURN_IF_ERROR(ty_graph_add_input(g, "kv_slots", TY_DTYPE_I64, 1, T, &b->kv_slots));
  TY_RETURN_IF_ERROR(ty_graph_add_input(g, "row_seq", TY_DTYPE_I64, 1, T, &b->row_seq));
  return ty_graph_add_input(g, "block_table", TY_DTYPE_I64, 2, table, &b->block_table);
}

/* logits_at_index: h [B, T, C] -> the rows logits_index picks, [B, C]
 * (embedding is a gather of table rows). */
static ty_status_t ty_b_pick_rows(ty_builder_t *b, ty_value_id_t h, ty_value_id_t *out) {
  int64_t B = b->o->batch, flat[2] = {B * b->o->seq, b->c->hidden_size},
          rows[1] = {b->o->logit_rows > 0 ? b->o->logit_rows : B};
  ty_value_id_t index, table;
  TY_RETURN_IF_ERROR(ty_graph_add_input(b->g, "logits_index", TY_DTYPE_I64, 1, rows, &index));
  TY_RETURN_IF_ERROR(ty_b_reshape(b, h, 2, flat, &table));
  ty_value_id_t in[2] = {table, index};
  return ty_b_node(b, "embedding", in, 2, NULL, out);
}

static ty_status_t ty_llm_check_options(const ty_model_config_t *c, const ty_llm_options_t *o) {
  if (o->batch < 1 || o->seq < 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "batch and sequence length must be >= 1");
  }
  /* A paged step packs tokens of many sequences: each one's position is
   * below the positions (the engine's context), not their count. */
  if (o->seq > c->max_positions && o->kv_blocks <= 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sequence length %lld exceeds the model's %lld positions "
                          "(config.json n_positions / max_position_embeddings)",
                          (long long)o->seq, (long long)c->max_positions);
  }
  if (o->compute_dtype != TY_DTYPE_INVALID && o->compute_dtype != o->dtype &&
      !(o->dtype == TY_DTYPE_F32 &&
        (o->compute_dtype == TY_DTYPE_BF16 || o->compute_dtype == TY_DTYPE_F16))) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "mixed precision computes in bf16 or f16 over f32 parameters; "
                          "%s compute over %s parameters is not a mode",
                          ty_dtype_name(o->compute_dtype), ty_dtype_name(o->dtype));
  }
  if (o->dropout < 0 || o->dropout >= 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "dropout %g must be in [0, 1)", o->dropout);
  }
  if (o->loss_chunk < 0 || (o->loss_chunk > 0 && (!o->with_loss || o->logits_output))) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "loss chunk %lld: the fused LM head and loss needs a loss and no "
                          "logits output (the logits never exist whole)",
                          (long long)o->loss_chunk);
  }
  if (o->mlp_chunk < 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "MLP chunk %lld: a number of tokens >= 1 (0: the whole sequence)",
                          (long long)o->mlp_chunk);
  }
  if (o->unit_end > 0 &&
      (o->unit_begin < 0 || o->unit_begin >= o->unit_end ||
       o->unit_end > ty_llm_unit_count(c) || o->kv_blocks > 0 || o->logits_at_index)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "pipeline stage of units [%d, %d) of %d: a non-empty range of a "
                          "training graph",
                          (int)o->unit_begin, (int)o->unit_end, (int)ty_llm_unit_count(c));
  }
  if (o->tp_size > 1 && o->kv_blocks > 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor parallel builds training graphs; KV-cache decoding runs the "
                          "whole model");
  }
  if (o->tp_size > 1 && (o->loss_chunk > 0 || o->logits_output || o->logits_at_index)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor parallel splits the vocabulary: %s",
                          o->loss_chunk > 0 ? "the fused chunked LM head and loss "
                                              "(loss chunk) runs on a whole vocabulary"
                                            : "no rank holds whole logits to output");
  }
  if (o->tp_size > 1 && (o->tp_rank < 0 || o->tp_rank >= o->tp_size)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "tensor-parallel rank %d is not in 0..%d",
                          o->tp_rank, o->tp_size - 1);
  }
  if (o->tp_size > 1) TY_RETURN_IF_ERROR(ty_llm_tp_check(c, o->tp_size));
  if (o->cp_size > 1 &&
      (o->cp_size > TY_LLM_CP_MAX || o->cp_rank < 0 || o->cp_rank >= o->cp_size ||
       o->seq % 2 != 0 || o->kv_blocks > 0 || o->logits_at_index)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "context parallel rank %d of %d (at most %d) builds a training graph "
                          "of two equal chunks (an even %lld tokens), without KV caches or "
                          "picked rows",
                          o->cp_rank, o->cp_size, TY_LLM_CP_MAX, (long long)o->seq);
  }
  if (o->cp_size > 1 && o->seq * o->cp_size > c->max_positions) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "sequence length %lld (--cp %d x %lld tokens per rank) exceeds the "
                          "model's %lld positions",
                          (long long)(o->seq * o->cp_size), o->cp_size, (long long)o->seq,
                          (long long)c->max_positions);
  }
  if (o->kv_blocks > 0 &&
      (o->batch != 1 || o->kv_block_size < 1 || o->table_rows < 1 || o->table_blocks < 1 ||
       o->with_loss || o->tp_size > 1 ||
       o->unit_end > 0 || o->dropout > 0)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "a paged KV-cache graph is one packed inference step (batch 1, "
                          "block size %lld >= 1, a block table of %lld x %lld): no loss, "
                          "dropout, other cache, tensor parallel or pipeline stage",
                          (long long)o->kv_block_size, (long long)o->table_rows,
                          (long long)o->table_blocks);
  }
  if (o->logit_rows < 0 || (o->logit_rows > 0 && !o->logits_at_index)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "logit rows %lld need logits at an index", (long long)o->logit_rows);
  }
  if (o->logits_at_index && o->with_loss) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "logits at one index per row leave no logits for a loss");
  }
  return TY_OK;
}

/* A stage keeps the parameters it built, in the model's order. */
static ty_status_t ty_llm_stage_params(ty_llm_t *m) {
  uint32_t kept = 0;
  for (uint32_t i = 0; i < m->param_count; ++i) {
    if (m->params[i].value != TY_VALUE_NONE) m->params[kept++] = m->params[i];
  }
  m->param_count = kept;
  if (kept == 0) return ty_status_make(TY_CODE_INTERNAL, "a pipeline stage without parameters");
  return TY_OK;
}

ty_status_t ty_llm_build(ty_graph_t *g, const ty_model_config_t *c,
                         const ty_llm_options_t *o, ty_llm_t *m) {
  memset(m, 0, sizeof(*m));
  m->config = *c;
  m->options = *o;
  m->loss = m->loss_per_token = m->hidden_in = m->hidden_out = TY_VALUE_NONE;
  TY_RETURN_IF_ERROR(ty_llm_check_options(c, o));
  /* The parameter set first: its count is checked arithmetically before a
   * single node is built, and it holds every shape the builder uses. */
  uint32_t count = 0;
  TY_RETURN_IF_ERROR(ty_llm_param_count(c, &count, NULL));
  m->params = calloc(count ? count : 1, sizeof(*m->params));
  if (!m->params) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for %u parameters", count);
  }
  m->param_count = count;
  for (uint32_t i = 0; i < count; ++i) {
    ty_llm_param_spec(c, i, &m->params[i]);
    ty_llm_tp_shard(c, o->tp_size, &m->params[i]); /* whole (tp_axis -1) without tp */
  }
  ty_builder_t b = {.g = g, .m = m, .c = c, .o = o, .rng = TY_VALUE_NONE};
  const int32_t units = ty_llm_unit_count(c);
  const bool staged = o->unit_end > 0;
  const bool has_embed = !staged || o->unit_begin == 0, has_head = !staged || o->unit_end == units;
  const int layer_begin = staged && o->unit_begin > 0 ? o->unit_begin - 1 : 0;
  const int layer_end = staged && o->unit_end - 1 < c->num_layers ? o->unit_end - 1 : c->num_layers;
  int64_t bt[2] = {o->batch, o->seq};
  m->tokens = TY_VALUE_NONE;
  ty_status_t s = has_embed ? ty_graph_add_input(g, "tokens", TY_DTYPE_I64, 2, bt, &m->tokens)
                            : TY_OK;
  int64_t tdim[1] = {o->seq};
  if (!s && o->kv_blocks > 0) {
    s = ty_b_paged_inputs(&b);
  } else if (!s) {
    int64_t *pos = malloc((size_t)o->seq * sizeof(int64_t));
    /* Context parallel: the global positions of this rank's two chunks. */
    const int64_t L = o->seq / 2, N = o->cp_size, r = o->cp_rank;
    for (int64_t t = 0; pos && t < o->seq; ++t) {
      pos[t] = N <= 1 ? t : t < L ? r * L + t : (2 * N - 1 - r) * L + (t - L);
    }
    s = pos ? ty_graph_add_constant(g, "positions", TY_DTYPE_I64, 1, tdim, pos, &b.positions)
            : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    free(pos);
  }
  if (!s && o->dropout > 0) {
    int64_t two[1] = {2};
    s = ty_graph_add_input(g, "rng", TY_DTYPE_I64, 1, two, &b.rng);
  }
  ty_value_id_t h = TY_VALUE_NONE, wte = TY_VALUE_NONE;
  bool gpt2 = c->arch == TY_ARCH_GPT2;
  if (!s && has_embed) {
    s = ty_b_embed(&b, &h, &wte);
  } else if (!s) {
    /* a later stage: the residual stream of the one before; dropout
     * streams as the whole model numbers them (1 + 2 x layer) */
    int64_t btc[3] = {o->batch, o->seq, c->hidden_size};
    s = ty_graph_add_input(g, "hidden_in", o->dtype, 3, btc, &h);
    m->hidden_in = h;
    b.dropout_stream = 1 + 2 * (int64_t)layer_begin;
  }
  for (int layer = layer_begin; layer < layer_end && !s; ++layer) {
    char prefix[TY_LLM_NAME_MAX];
    ty_value_id_t a, y;
    /* Each half of the block is a checkpointing region (graph.h): from the
     * residual stream in to the residual add out. */
    ty_graph_set_region(g, TY_REGION(layer, TY_REGION_ATTENTION));
    snprintf(prefix, sizeof(prefix), gpt2 ? "transformer.h.%d.ln_1" : "model.layers.%d.input_layernorm", layer);
    s = ty_b_norm(&b, h, prefix, &a);
    if (!s) s = gpt2 ? ty_b_attention_gpt2(&b, layer, a, &y) : ty_b_attention_llama(&b, layer, a, &y);
    if (!s) s = ty_b_dropout(&b, y, &y);
    if (!s) s = ty_b_cast(&b, y, o->dtype, &y);
    if (!s) s = ty_b_binary(&b, "add", h, y, &h);
    ty_graph_set_region(g, TY_REGION(layer, TY_REGION_MLP));
    snprintf(prefix, sizeof(prefix), gpt2 ? "transformer.h.%d.ln_2" : "model.layers.%d.post_attention_layernorm", layer);
    if (!s) s = ty_b_norm(&b, h, prefix, &a);
    if (!s) s = ty_b_mlp(&b, layer, a, &y);
    if (!s) s = ty_b_dropout(&b, y, &y);
    if (!s) s = ty_b_cast(&b, y, o->dtype, &y);
    if (!s) s = ty_b_binary(&b, "add", h, y, &h);
  }
  ty_graph_set_region(g, 0);
  if (!has_head) {
    if (!s) s = ty_graph_set_output(g, h, "hidden_out");
    m->hidden_out = h;
    if (!s) s = ty_llm_stage_params(m);
    if (s) ty_llm_deinit(m);
    return s ? ty_status_annotate(s, "building the %s graph", c->model_type) : TY_OK;
  }
  if (!s && wte == TY_VALUE_NONE && c->tie_word_embeddings) {
    s = ty_b_param(&b, &wte,
                   gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
  }
  /* The norm is per token, so picking rows before it gives the same logits. */
  if (!s && o->logits_at_index) s = ty_b_pick_rows(&b, h, &h);
  if (!s) s = ty_b_norm(&b, h, gpt2 ? "transformer.ln_f" : "model.norm", &h);
  ty_value_id_t head = wte;
  if (!s && !c->tie_word_embeddings) s = ty_b_param(&b, &head, "lm_head.weight");
  m->logits = TY_VALUE_NONE;
  /* Tensor parallel: this rank's columns of the logits, h entering through
   * f (its gradient, a part from each rank's columns, summed). */
  if (!s && o->loss_chunk <= 0) s = ty_b_tp_enter(&b, h, &h);
  if (!s && o->loss_chunk <= 0) s = ty_b_linear(&b, h, head, TY_VALUE_NONE, true, &m->logits);
  if (!s && staged) s = ty_llm_stage_params(m);
  for (uint32_t i = 0; i < m->param_count && !s; ++i) {
    if (m->params[i].value == TY_VALUE_NONE) {
      s = ty_status_make(TY_CODE_INTERNAL, "parameter '%s' was never built", m->params[i].name);
    }
  }
  if (!s && o->logits_output) s = ty_graph_set_output(g, m->logits, "logits");
  if (!s && o->with_loss) s = ty_b_loss(&b, h, head);
  if (s) {
    ty_llm_deinit(m);
    return ty_status_annotate(s, "building the %s graph", c->model_type);
  }
  return TY_OK;
}

void ty_llm_deinit(ty_llm_t *m) {
  free(m->params);
  m->params = NULL;
  m->param_count = 0;
}

const ty_llm_param_t *ty_llm_find_param(const ty_llm_t *m, const char *name) {
  for (uint32_t i = 0; i < m->param_count; ++i) {
    if (strcmp(m->params[i].name, name) == 0) return &m->params[i];
  }
  return NULL;
}

ty_status_t ty_llm_precision_parse(const char *text, ty_dtype_t *out_param_dtype,
                                   ty_dtype_t *out_compute_dtype) {
  *out_param_dtype = *out_compute_dtype = TY_DTYPE_INVALID;
  if (!strcmp(text, "bf16-mixed") || !strcmp(text, "f16-mixed")) {
    *out_param_dtype = TY_DTYPE_F32;
    *out_compute_dtype = text[0] == 'b' ? TY_DTYPE_BF16 : TY_DTYPE_F16;
    return TY_OK;
  }
  ty_dtype_t d = TY_DTYPE_INVALID;
  ty_status_t parsed = ty_dtype_parse(text, &d);
  bool bad = parsed != TY_OK || !ty_dtype_is_float(d);
  ty_status_free(parsed); /* replaced by the message below, which names the choices */
  if (bad) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dtype '%s': expected f32, bf16, f16, f64, bf16-mixed or f16-mixed",
                          text);
  }
  *out_param_dtype = *out_compute_dtype = d;
  return TY_OK;
}
