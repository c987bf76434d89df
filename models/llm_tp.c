/* The tensor-parallel split of the parameter set (llm.h "Tensor parallel"):
 * which axis of which tensor is cut over the tp ranks, and the copies
 * between a whole tensor and one rank's part, so every rank can load or
 * initialize the whole model and keep its part, and rank 0 can put the
 * parts back together for a Hugging Face checkpoint. The graph side of the
 * split is in llm.c (ty_b_* with tp_size > 1).
 *
 * The vocabulary (the embedding and LM head rows) is the one axis that need
 * not divide: each rank holds Vp = ceil(V / tp) rows, rank r the rows
 * [r Vp, (r + 1) Vp) that exist and zeros past V (ty_llm_tp_vocab_shard). */
#include <stdint.h>
#include <string.h>

#include "models/llm.h"

static bool ty_ends(const char *name, const char *suffix) {
  size_t n = strlen(name), k = strlen(suffix);
  return n >= k && strcmp(name + n - k, suffix) == 0;
}

ty_status_t ty_llm_tp_check(const ty_model_config_t *c, int tp) {
  if (tp < 1) return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--tp %d: must be 1 or more", tp);
  if (tp == 1) return TY_OK;
  if (c->num_heads % tp != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--tp %d does not divide the model's %lld attention heads "
                          "(config.json num_attention_heads / n_head)",
                          tp, (long long)c->num_heads);
  }
  if (c->num_kv_heads % tp != 0 && tp % c->num_kv_heads != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--tp %d neither divides nor is a multiple of the model's %lld "
                          "key/value heads (config.json num_key_value_heads): each rank's query "
                          "heads must share whole key/value heads",
                          tp, (long long)c->num_kv_heads);
  }
  const int64_t vp = (c->vocab_size + tp - 1) / tp;
  if (vp * (tp - 1) >= c->vocab_size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--tp %d leaves the last rank no row of the model's %lld-token "
                          "vocabulary (config.json vocab_size; each rank holds %lld)",
                          tp, (long long)c->vocab_size, (long long)vp);
  }
  if (c->intermediate_size % tp != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--tp %d does not divide the model's MLP width %lld (config.json "
                          "intermediate_size / n_inner)",
                          tp, (long long)c->intermediate_size);
  }
  return TY_OK;
}

/* The axis `name` is cut along (-1: replicated) and its segments. */
static int ty_llm_tp_axis(const ty_model_config_t *c, int tp, const char *name, int *segments) {
  *segments = 1;
  const bool weight = ty_ends(name, ".weight");
  if (ty_llm_is_word_embedding(name) || !strcmp(name, "lm_head.weight")) {
    return 0; /* vocabulary-parallel: [V, C] by rows, padded to tp x Vp */
  }
  if (c->arch == TY_ARCH_GPT2) {
    if (strstr(name, ".attn.c_attn.")) {
      *segments = 3; /* [C, 3C] columns q|k|v, each cut by heads */
      return weight ? 1 : 0;
    }
    if (strstr(name, ".mlp.c_fc.")) return weight ? 1 : 0; /* Conv1D [in, out]: columns */
    if (strstr(name, ".attn.c_proj.") || strstr(name, ".mlp.c_proj.")) {
      return weight ? 0 : -1; /* rows (the input); the bias is added after the reduce */
    }
    return -1;
  }
  const bool kv = strstr(name, ".self_attn.k_proj.") || strstr(name, ".self_attn.v_proj.");
  if (kv) return c->num_kv_heads % tp == 0 ? 0 : -1; /* replicated when tp > kv heads */
  if (strstr(name, ".self_attn.q_proj.") || strstr(name, ".mlp.gate_proj.") ||
      strstr(name, ".mlp.up_proj.")) {
    return 0; /* Linear [out, in]: output rows, and the bias with them */
  }
  if (strstr(name, ".self_attn.o_proj.") || strstr(name, ".mlp.down_proj.")) {
    return weight ? 1 : -1; /* input columns; the bias once, after the reduce */
  }
  return -1;
}

void ty_llm_tp_shard(const ty_model_config_t *c, int tp, ty_llm_param_t *p) {
  p->full_dims[0] = p->dims[0];
  p->full_dims[1] = p->rank == 2 ? p->dims[1] : 0;
  int segments = 1;
  p->tp_axis = (int8_t)(tp > 1 ? ty_llm_tp_axis(c, tp, p->name, &segments) : -1);
  p->tp_segments = (uint8_t)segments;
  /* ceil: only the vocabulary does not divide (ty_llm_tp_check) */
  if (p->tp_axis >= 0) p->dims[p->tp_axis] = (p->dims[p->tp_axis] + tp - 1) / tp;
}

void ty_llm_tp_vocab_shard(const ty_model_config_t *c, int tp, int tp_rank,
                           int64_t *out_start, int64_t *out_valid) {
  const int64_t vp = tp > 1 ? (c->vocab_size + tp - 1) / tp : c->vocab_size;
  *out_start = vp * tp_rank;
  const int64_t left = c->vocab_size - *out_start;
  *out_valid = left < vp ? left : vp;
}

/* Moves the part between `whole` and `mine`: into mine (take) or into whole
 * (put). */
static void ty_llm_tp_move(const ty_llm_param_t *p, int tp_rank, size_t elem,
                           unsigned char *whole, unsigned char *mine, bool to_full) {
  const int64_t rows = p->full_dims[0], cols = p->rank == 2 ? p->full_dims[1] : 1;
  if (p->tp_axis < 0) {
    if (to_full) {
      memcpy(whole, mine, (size_t)(rows * cols) * elem);
    } else {
      memcpy(mine, whole, (size_t)(rows * cols) * elem);
    }
    return;
  }
  /* One axis of `segments` segments, each cut in tp parts: the rank's part
   * of segment s starts at s * seg + tp_rank * piece along the axis. */
  const int64_t along = p->tp_axis == 0 ? rows : cols, seg = along / p->tp_segments,
                piece = p->dims[p->tp_axis] / p->tp_segments;
  if (p->tp_axis == 0) { /* rows: contiguous blocks */
    /* The vocabulary's last part may run past the whole tensor: the rows
     * that exist move, the padding stays zero in the part and is never
     * written to the whole. */
    int64_t have = seg - tp_rank * piece;
    have = have < 0 ? 0 : have > piece ? piece : have;
    for (int s = 0; s < p->tp_segments; ++s) {
      unsigned char *w = whole + (size_t)((s * seg + tp_rank * piece) * cols) * elem;
      unsigned char *m = mine + (size_t)(s * piece * cols) * elem;
      const size_t bytes = (size_t)(have * cols) * elem;
      if (to_full) {
        memcpy(w, m, bytes);
      } else {
        memcpy(m, w, bytes);
        memset(m + bytes, 0, (size_t)((piece - have) * cols) * elem);
      }
    }
    return;
  }
  const int64_t mine_cols = piece * p->tp_segments;
  for (int64_t r = 0; r < rows; ++r) { /* columns: a run per row and segment */
    for (int s = 0; s < p->tp_segments; ++s) {
      unsigned char *w = whole + (size_t)(r * cols + s * seg + tp_rank * piece) * elem;
      unsigned char *m = mine + (size_t)(r * mine_cols + s * piece) * elem;
      if (to_full) {
        memcpy(w, m, (size_t)piece * elem);
      } else {
        memcpy(m, w, (size_t)piece * elem);
      }
    }
  }
}

void ty_llm_tp_take_part(const ty_llm_param_t *p, int tp, int tp_rank, size_t elem,
                         const void *full, void *part) {
  (void)tp; /* the part's size (p->dims) already says it */
  /* take only reads `full`: the one mover serves both directions */
  ty_llm_tp_move(p, tp_rank, elem, (unsigned char *)(uintptr_t)full, part, false);
}

void ty_llm_tp_put_part(const ty_llm_param_t *p, int tp, int tp_rank, size_t elem,
                        const void *part, void *full) {
  (void)tp;
  ty_llm_tp_move(p, tp_rank, elem, full, (unsigned char *)(uintptr_t)part, true);
}

int64_t ty_llm_param_full_count(const ty_llm_param_t *p) {
  return p->full_dims[0] * (p->rank == 2 ? p->full_dims[1] : 1);
}

int64_t ty_llm_param_part_count(const ty_llm_param_t *p) {
  return p->dims[0] * (p->rank == 2 ? p->dims[1] : 1);
}
