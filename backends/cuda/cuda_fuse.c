/* Finding the cuda executor's fusions (cuda_fuse.h). Every rule checks that
 * the values it stops materialising have no other reader (one use, not a
 * graph output or state update), that shapes match exactly (no
 * broadcasting), and that every extra operand already exists when the head
 * runs; anything else runs unfused. */
#include "cuda_fuse.h"

#include <stdlib.h>

#include "kernels/gemv_shapes.h"
#include <string.h>

typedef struct {
  const ty_abi_graph_t *g;
  const ty_owned_graph_t *og;
  const int64_t *row_stride;
  uint32_t *uses;     /* per value: node inputs reading it */
  uint32_t *consumer; /* per value: the first node reading it */
  bool *pinned;       /* per value: a graph output, bound, or a state update's value */
  ty_cu_fuse_t *fuse;
  uint32_t *run_at;
} ty_fz_t;

static const ty_abi_value_t *ty_fz_val(const ty_fz_t *z, uint32_t v) { return &z->g->values[v]; }

static bool ty_fz_dense(const ty_fz_t *z, uint32_t v) {
  return !z->row_stride || z->row_stride[v] == 0;
}

/* v is read by exactly one node and nothing else sees it: fusion may skip
 * writing it. */
static bool ty_fz_private(const ty_fz_t *z, uint32_t v) {
  return v != UINT32_MAX && z->uses[v] == 1 && !z->pinned[v] && ty_fz_dense(z, v);
}

static bool ty_fz_same_shape(const ty_abi_value_t *a, const ty_abi_value_t *b) {
  if (a->rank != b->rank) return false;
  for (uint32_t i = 0; i < a->rank; ++i) {
    if (a->dims[i] != b->dims[i]) return false;
  }
  return true;
}

static bool ty_fz_is(const ty_abi_node_t *node, const char *op) {
  return strcmp(node->op, op) == 0;
}

static bool ty_fz_free(const ty_fz_t *z, uint32_t node) {
  return z->run_at[node] == node && z->fuse[node].kind == TY_CU_FUSE_NONE;
}

static bool ty_fz_16bit(ty_dtype_t d) { return d == TY_DTYPE_BF16 || d == TY_DTYPE_F16; }

/* Value v exists when node n runs: an input, state or constant, or made
 * by a node before n. */
static bool ty_fz_exists_by(const ty_fz_t *z, uint32_t v, uint32_t n) {
  const uint32_t p = z->og->producer[v];
  return p == UINT32_MAX || p < n;
}

/* The node that reads private value v, when it is a free `op` node. */
static const ty_abi_node_t *ty_fz_next(const ty_fz_t *z, uint32_t v, const char *op,
                                       uint32_t *out_index) {
  if (!ty_fz_private(z, v)) return NULL;
  const uint32_t m = z->consumer[v];
  if (m == UINT32_MAX || !ty_fz_free(z, m) || !ty_fz_is(&z->g->nodes[m], op)) return NULL;
  *out_index = m;
  return &z->g->nodes[m];
}

/* An add node m = add(v, other) or add(other, v) of one shape and dtype,
 * whose other operand exists before node `head`: that operand, else
 * UINT32_MAX. */
static uint32_t ty_fz_addend(const ty_fz_t *z, const ty_abi_node_t *add, uint32_t v,
                             uint32_t head) {
  if (add->input_count != 2 || add->output_count != 1) return UINT32_MAX;
  const uint32_t other = add->inputs[0] == v ? add->inputs[1] : add->inputs[0];
  if (other == UINT32_MAX || other == v || (add->inputs[0] != v && add->inputs[1] != v)) {
    return UINT32_MAX;
  }
  const ty_abi_value_t *a = ty_fz_val(z, v), *o = ty_fz_val(z, other);
  const ty_abi_value_t *y = ty_fz_val(z, add->outputs[0]);
  const uint32_t p = z->og->producer[other];
  if (!ty_fz_same_shape(a, o) || !ty_fz_same_shape(a, y) || o->dtype != y->dtype ||
      !ty_fz_dense(z, other) || !ty_fz_dense(z, add->outputs[0]) ||
      (p != UINT32_MAX && p >= head)) {
    return UINT32_MAX;
  }
  return other;
}

static void ty_fz_member(ty_fz_t *z, uint32_t member, uint32_t head) { z->run_at[member] = head; }

static ty_cu_fuse_t ty_fz_none(ty_cu_fuse_kind_t kind) {
  return (ty_cu_fuse_t){.kind = kind,
                        .out = UINT32_MAX,
                        .addend = UINT32_MAX,
                        .bias = UINT32_MAX,
                        .dy = UINT32_MAX,
                        .out2 = UINT32_MAX,
                        .aux = UINT32_MAX,
                        .epilogue = TY_CU_EPI_NONE,
                        .bgrad = UINT32_MAX,
                        .bgrad_of = 0,
                        .swiglu = UINT32_MAX};
}

/* Node m's work done by node n's launch, as the second of a pair (KV_PAIR,
 * ROPE_PAIR). */
static void ty_fz_pair(ty_fz_t *z, ty_cu_fuse_kind_t kind, uint32_t n, uint32_t m) {
  ty_cu_fuse_t f = ty_fz_none(kind);
  f.slices[0] = m;
  f.slice_count = 1;
  z->fuse[n] = f;
  z->run_at[m] = n;
}

/* Whether reduce_sum node r sums operand x (or the tensor x is a reshape
 * of, to rows) over every axis but the last into a [N] of x's dtype. */
static bool ty_fz_sums_rows_of(const ty_fz_t *z, const ty_abi_node_t *r, uint32_t x) {
  if (r->input_count != 1 || r->output_count != 1 || r->inputs[0] == UINT32_MAX) return false;
  const uint32_t u = r->inputs[0];
  if (u != x) {
    const uint32_t p = z->og->producer[x];
    if (p == UINT32_MAX || !ty_fz_is(&z->g->nodes[p], "reshape") ||
        z->g->nodes[p].inputs[0] != u) {
      return false;
    }
  }
  const ty_abi_value_t *uv = ty_fz_val(z, u), *xv = ty_fz_val(z, x);
  const ty_abi_value_t *y = ty_fz_val(z, r->outputs[0]);
  if (uv->rank < 2 || xv->rank != 2 || y->rank != 1 || y->dtype != xv->dtype ||
      uv->dtype != xv->dtype || uv->dims[uv->rank - 1] != xv->dims[1] ||
      y->dims[0] != xv->dims[1] || !ty_fz_dense(z, u)) {
    return false;
  }
  if (ty_desc_node_attr_int(r, "keepdims", 0)) return false;
  const ty_abi_attr_t *a = ty_desc_node_attr(r, "axes");
  if (!a || a->kind != TY_ATTR_INTS || a->count != uv->rank - 1) return false;
  bool seen[8] = {false};
  for (uint32_t k = 0; k < a->count; ++k) {
    int64_t ax = a->ints[k] < 0 ? a->ints[k] + (int64_t)uv->rank : a->ints[k];
    if (ax < 0 || ax >= (int64_t)uv->rank - 1 || seen[ax]) return false;
    seen[ax] = true;
  }
  return true;
}

/* The bias gradient in the epilogue of weight-gradient GEMM n (fusion f so
 * far): c = a^T b over the rows (trans_a, 2-D, 16-bit), and a free
 * reduce_sum of a or b over its rows whose result [-> cast(f32)] has the
 * dtype the GEMM writes and is read only after n. */
static void ty_fz_bgrad(ty_fz_t *z, uint32_t n, ty_cu_fuse_t *f, uint32_t *members,
                        uint32_t *member_count) {
  const ty_abi_node_t *node = &z->g->nodes[n];
  if (f->epilogue != TY_CU_EPI_NONE || f->bias != UINT32_MAX) return;
  if (node->input_count > 2 && node->inputs[2] != UINT32_MAX) return;
  if (!ty_desc_node_attr_int(node, "trans_a", 0) || ty_desc_node_attr_int(node, "trans_b", 0)) {
    return;
  }
  const ty_abi_value_t *a = ty_fz_val(z, node->inputs[0]), *bm = ty_fz_val(z, node->inputs[1]);
  /* (an empty product skips its GEMM: nothing would write the sum) */
  if (a->rank != 2 || bm->rank != 2 || !ty_fz_16bit(a->dtype) || a->dims[1] <= 0 ||
      bm->dims[1] <= 0) {
    return;
  }
  const uint32_t written = f->out != UINT32_MAX ? f->out : node->outputs[0];
  const ty_dtype_t wdt = ty_fz_val(z, written)->dtype;
  for (uint32_t which = 0; which < 2; ++which) {
    const uint32_t x = node->inputs[which];
    /* The reduce_sum may read x itself or what x reshapes. */
    uint32_t srcs[2] = {x, UINT32_MAX};
    const uint32_t p = z->og->producer[x];
    if (p != UINT32_MAX && ty_fz_is(&z->g->nodes[p], "reshape")) srcs[1] = z->g->nodes[p].inputs[0];
    for (uint32_t s = 0; s < 2 && srcs[s] != UINT32_MAX; ++s) {
      for (uint32_t r = 0; r < z->g->node_count; ++r) {
        const ty_abi_node_t *rn = &z->g->nodes[r];
        if (r == n || !ty_fz_free(z, r) || !ty_fz_is(rn, "reduce_sum") ||
            rn->input_count != 1 || rn->inputs[0] != srcs[s] || !ty_fz_sums_rows_of(z, rn, x)) {
          continue;
        }
        const uint32_t y = rn->outputs[0];
        uint32_t target = UINT32_MAX, mc = UINT32_MAX;
        const ty_abi_node_t *cast = wdt == TY_DTYPE_F32 ? ty_fz_next(z, y, "cast", &mc) : NULL;
        if (cast && ty_fz_val(z, cast->outputs[0])->dtype == TY_DTYPE_F32 &&
            ty_fz_dense(z, cast->outputs[0])) {
          target = cast->outputs[0];
        } else if (ty_fz_val(z, y)->dtype == wdt && ty_fz_dense(z, y)) {
          target = y;
          mc = UINT32_MAX;
        }
        /* Written at n: nothing may read it before. */
        if (target == UINT32_MAX || (z->consumer[target] != UINT32_MAX &&
                                     z->consumer[target] <= n)) {
          continue;
        }
        f->bgrad = target;
        f->bgrad_of = which;
        members[(*member_count)++] = r;
        if (mc != UINT32_MAX) members[(*member_count)++] = mc;
        return;
      }
    }
  }
}

/* matmul -> cast(f32) [-> add] or matmul -> add, on the builder's one-GEMM
 * path (cuda_gemm.c: an unbatched product, or a linear layer). */
static void ty_fz_gemm(ty_fz_t *z, uint32_t n) {
  const ty_abi_node_t *node = &z->g->nodes[n];
  if (node->input_count < 2 || node->output_count != 1) return;
  const uint32_t pv = node->outputs[0];
  const ty_abi_value_t *a = ty_fz_val(z, node->inputs[0]), *bm = ty_fz_val(z, node->inputs[1]);
  const ty_abi_value_t *c = ty_fz_val(z, pv);
  const bool ta = ty_desc_node_attr_int(node, "trans_a", 0) != 0;
  if (c->rank < 2 || a->rank < 2 || !ty_fz_dense(z, node->inputs[0]) ||
      !ty_fz_dense(z, node->inputs[1]) || !ty_fz_dense(z, pv)) {
    return;
  }
  const int64_t K = ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  if (K <= 0) return;
  if (c->rank > 2) { /* a linear layer: b a plain matrix, a untransposed with c's batch */
    if (bm->rank != 2 || ta || a->rank != c->rank) return;
    for (uint32_t i = 0; i + 2 < c->rank; ++i) {
      if (a->dims[i] != c->dims[i]) return;
    }
  } else if (bm->rank != 2 || a->rank != 2) {
    return;
  }
  const uint32_t bias = node->input_count > 2 ? node->inputs[2] : UINT32_MAX;
  ty_cu_fuse_t f = ty_fz_none(TY_CU_FUSE_GEMM);
  uint32_t m1 = UINT32_MAX, m2 = UINT32_MAX;
  /* GELU epilogues, 16-bit only (cuBLASLt's tanh need not match the cpu's
   * to f32's bounds; bf16's rounding is coarser than any difference); its
   * aux matrices need rows of a multiple of 8. */
  const int64_t N = c->dims[c->rank - 1];
  const bool gelu_ok = N % 8 == 0 && ty_fz_16bit(c->dtype);
  const uint32_t first = z->consumer[pv];
  if (gelu_ok && first != UINT32_MAX && ty_fz_free(z, first) &&
      ty_fz_is(&z->g->nodes[first], "gelu") && ty_fz_dense(z, z->g->nodes[first].outputs[0])) {
    /* The product stays (gelu_backward reads it): written as the aux. */
    f.out = z->g->nodes[first].outputs[0];
    f.aux = pv;
    f.epilogue = TY_CU_EPI_GELU_AUX;
    z->fuse[n] = f;
    ty_fz_member(z, first, n);
    return;
  }
  const ty_abi_node_t *gb = gelu_ok && bias == UINT32_MAX
                                ? ty_fz_next(z, pv, "gelu_backward", &m1)
                                : NULL;
  if (gb && gb->input_count == 2 && gb->inputs[0] == pv && gb->inputs[1] != UINT32_MAX) {
    const uint32_t x = gb->inputs[1];
    const uint32_t xp = z->og->producer[x];
    if (ty_fz_same_shape(ty_fz_val(z, x), c) && ty_fz_val(z, x)->dtype == c->dtype &&
        ty_fz_dense(z, x) && ty_fz_dense(z, gb->outputs[0]) && (xp == UINT32_MAX || xp < n)) {
      f.out = gb->outputs[0];
      f.aux = x;
      f.epilogue = TY_CU_EPI_DGELU;
      z->fuse[n] = f;
      ty_fz_member(z, m1, n);
      return;
    }
  }
  m1 = UINT32_MAX;
  uint32_t extra[2], extra_count = 0;
  const ty_abi_node_t *next = ty_fz_next(z, pv, "cast", &m1);
  if (next && ty_fz_16bit(c->dtype) && ty_fz_val(z, next->outputs[0])->dtype == TY_DTYPE_F32 &&
      ty_fz_dense(z, next->outputs[0])) {
    /* The bias joins an f32 result: the f32 bias the model cast to bf16. */
    if (bias != UINT32_MAX) {
      const uint32_t bp = z->og->producer[bias];
      if (bp == UINT32_MAX || !ty_fz_is(&z->g->nodes[bp], "cast")) return;
      const uint32_t src = z->g->nodes[bp].inputs[0];
      if (src == UINT32_MAX || ty_fz_val(z, src)->dtype != TY_DTYPE_F32 ||
          !ty_fz_same_shape(ty_fz_val(z, src), ty_fz_val(z, bias))) {
        return;
      }
      f.bias = src;
    }
    const uint32_t q = next->outputs[0];
    f.out = q;
    const ty_abi_node_t *add = ty_fz_next(z, q, "add", &m2);
    const uint32_t other = add ? ty_fz_addend(z, add, q, n) : UINT32_MAX;
    if (other != UINT32_MAX) {
      f.out = add->outputs[0];
      f.addend = other;
    } else {
      m2 = UINT32_MAX;
    }
  } else {
    const ty_abi_node_t *add = ty_fz_next(z, pv, "add", &m1);
    const uint32_t other = add ? ty_fz_addend(z, add, pv, n) : UINT32_MAX;
    if (other != UINT32_MAX) {
      f.out = add->outputs[0];
      f.addend = other;
    } else {
      m1 = UINT32_MAX;
    }
  }
  ty_fz_bgrad(z, n, &f, extra, &extra_count);
  if (f.out == UINT32_MAX && f.bgrad == UINT32_MAX) return;
  z->fuse[n] = f;
  if (m1 != UINT32_MAX) ty_fz_member(z, m1, n);
  if (m2 != UINT32_MAX) ty_fz_member(z, m2, n);
  for (uint32_t i = 0; i < extra_count; ++i) ty_fz_member(z, extra[i], n);
}

/* layernorm/rmsnorm -> cast */
static void ty_fz_norm(ty_fz_t *z, uint32_t n) {
  const ty_abi_node_t *node = &z->g->nodes[n];
  if (node->output_count < 1) return;
  uint32_t m = UINT32_MAX;
  const ty_abi_node_t *cast = ty_fz_next(z, node->outputs[0], "cast", &m);
  if (!cast) return;
  const ty_dtype_t to = ty_fz_val(z, cast->outputs[0])->dtype;
  if ((to != TY_DTYPE_F32 && !ty_fz_16bit(to)) || !ty_fz_dense(z, cast->outputs[0])) return;
  z->fuse[n] = ty_fz_none(TY_CU_FUSE_NORM);
  z->fuse[n].out = cast->outputs[0];
  ty_fz_member(z, m, n);
}

/* [cast] -> layernorm/rmsnorm backward -> [add [-> cast]], on the builder's
 * one-pass kernel (cuda_ops_nn.c: rows >= 1024, C % 4 == 0, C <= 1024). */
static void ty_fz_norm_bwd(ty_fz_t *z, uint32_t n) {
  const ty_abi_node_t *node = &z->g->nodes[n];
  if (node->input_count < 2 || node->output_count < 1) return;
  const uint32_t dy = node->inputs[0], dx = node->outputs[0];
  const ty_abi_value_t *x = ty_fz_val(z, node->inputs[1]);
  const int64_t C = x->rank ? x->dims[x->rank - 1] : 1;
  int64_t rows = 1;
  for (uint32_t i = 0; i + 1 < x->rank; ++i) rows *= x->dims[i];
  const uint32_t gamma = node->inputs[2];
  if (rows < 1024 || C % 4 || C > 1024 || ty_fz_val(z, dx)->dtype != x->dtype ||
      (gamma != UINT32_MAX && ty_fz_val(z, gamma)->dtype != x->dtype) || !ty_fz_dense(z, dy) ||
      !ty_fz_dense(z, node->inputs[1])) {
    return;
  }
  ty_cu_fuse_t f = ty_fz_none(TY_CU_FUSE_NORM_BWD);
  uint32_t ci = UINT32_MAX, ai = UINT32_MAX, co = UINT32_MAX;
  /* the cast that made dy, read through */
  const uint32_t p = z->og->producer[dy];
  if (p != UINT32_MAX && ty_fz_free(z, p) && ty_fz_is(&z->g->nodes[p], "cast") &&
      ty_fz_private(z, dy) && ty_fz_val(z, dy)->dtype == x->dtype) {
    const uint32_t src = z->g->nodes[p].inputs[0];
    const ty_dtype_t sd = src != UINT32_MAX ? ty_fz_val(z, src)->dtype : TY_DTYPE_INVALID;
    if ((ty_fz_16bit(sd) || sd == TY_DTYPE_F32) && ty_fz_dense(z, src)) {
      f.dy = src;
      ci = p;
    }
  }
  /* the add of dx to the residual gradient, and a cast of the sum */
  const ty_abi_node_t *add = ty_fz_next(z, dx, "add", &ai);
  const uint32_t other = add ? ty_fz_addend(z, add, dx, n) : UINT32_MAX;
  if (other != UINT32_MAX) {
    f.out = add->outputs[0];
    f.addend = other;
    const uint32_t s = add->outputs[0];
    for (uint32_t m = ai + 1; m < z->g->node_count && z->uses[s]; ++m) {
      const ty_abi_node_t *c = &z->g->nodes[m];
      if (!ty_fz_free(z, m) || !ty_fz_is(c, "cast") || c->inputs[0] != s) continue;
      const ty_dtype_t to = ty_fz_val(z, c->outputs[0])->dtype;
      if (ty_fz_16bit(to) && ty_fz_dense(z, c->outputs[0])) {
        f.out2 = c->outputs[0];
        co = m;
      }
      break;
    }
  } else {
    ai = UINT32_MAX;
  }
  if (ci == UINT32_MAX && ai == UINT32_MAX) return;
  z->fuse[n] = f;
  if (ci != UINT32_MAX) ty_fz_member(z, ci, n);
  if (ai != UINT32_MAX) ty_fz_member(z, ai, n);
  if (co != UINT32_MAX) ty_fz_member(z, co, n);
}

bool ty_cu_fuse_enabled(void) {
  const char *env = getenv("TRAINYARD_CUDA_FUSE");
  return !env || strcmp(env, "0") != 0;
}

bool ty_cu_loss_in_place_enabled(void) {
  const char *env = getenv("TRAINYARD_CUDA_LOSS_IN_PLACE");
  return ty_cu_fuse_enabled() && (!env || strcmp(env, "0") != 0);
}

const char *ty_cu_weight_copies_bad_setting(void) {
  const char *env = getenv("TRAINYARD_CUDA_WEIGHT_COPIES");
  if (!env || !env[0] || !strcmp(env, "0") || !strcmp(env, "1")) return NULL;
  return env;
}

bool ty_cu_weight_copies_enabled(const char *levers) {
  const char *env = getenv("TRAINYARD_CUDA_WEIGHT_COPIES");
  if (!ty_cu_fuse_enabled() || (env && !strcmp(env, "0"))) return false;
  static const char *const memory_levers[] = {"recompute=", "loss_chunk=", "mlp_chunk=",
                                              "fused_optimizer=", "offload="};
  for (size_t i = 0; levers && i < sizeof(memory_levers) / sizeof(memory_levers[0]); ++i) {
    if (strstr(levers, memory_levers[i])) return false;
  }
  return true;
}

static bool ty_fz_adamw_typed(const ty_fz_t *z, const ty_abi_node_t *a, ty_dtype_t dt);

uint32_t ty_cu_weight_copy_plan(const ty_owned_graph_t *og, const ty_cu_fuse_t *fuse,
                                const uint32_t *run_at, bool enabled, uint32_t *copy_of,
                                uint8_t *cast_role, uint32_t *params, uint32_t *values) {
  const ty_abi_graph_t *g = &og->graph;
  for (uint32_t v = 0; v < g->value_count; ++v) copy_of[v] = UINT32_MAX;
  for (uint32_t n = 0; n < g->node_count; ++n) cast_role[n] = 0;
  uint32_t count = 0;
  /* A micro-step of gradient accumulation: a state updated by an add that
   * reads it (acc + grad). Serving graphs (their caches are written by
   * kv writes) and evaluation graphs have none; their executables (one per
   * batch bucket) would each hold copies. */
  bool accumulates = false;
  for (uint32_t u = 0; u < g->update_count && !accumulates; ++u) {
    const uint32_t a = og->producer[g->updates[u].value];
    if (a == UINT32_MAX || !ty_fz_is(&g->nodes[a], "add")) continue;
    for (uint32_t i = 0; i < g->nodes[a].input_count; ++i) {
      accumulates |= g->nodes[a].inputs[i] == g->updates[u].state;
    }
  }
  for (uint32_t p = 0; enabled && p < g->value_count; ++p) {
    const ty_abi_value_t *pv = &g->values[p];
    if (pv->role != TY_VALUE_STATE || pv->dtype != TY_DTYPE_F32 ||
        (pv->flags & TY_VALUE_FLAG_HOST_RESIDENT) || ty_desc_value_elements(pv) == 0) {
      continue;
    }
    /* Its updates: none in a graph that updates other states (a micro-step
     * of gradient accumulation: the copies last until the optimizer's own
     * graph writes the weights), or one AdamW update that writes the copy. */
    uint32_t updates = 0, updated = UINT32_MAX;
    for (uint32_t u = 0; u < g->update_count; ++u) {
      if (g->updates[u].state == p) {
        updates++;
        updated = g->updates[u].value;
      }
    }
    uint32_t a = g->node_count; /* the casts must come before it */
    if (updates == 1) {
      /* output 0 of an AdamW update of p itself on the multi-tensor kernel's
       * f32 operands (parameters are never padded: no row strides) */
      a = og->producer[updated];
      const ty_fz_t z = {.g = g, .og = og};
      if (a == UINT32_MAX || !ty_fz_is(&g->nodes[a], "adamw_update") ||
          g->nodes[a].inputs[0] != p || g->nodes[a].outputs[0] != updated ||
          !ty_fz_adamw_typed(&z, &g->nodes[a], TY_DTYPE_F32)) {
        continue;
      }
    } else if (updates != 0 || !accumulates) {
      continue;
    }
    /* Every cast of p to bf16: before the update, unfused, a private
     * intermediate, all of one size (an LM head's casts are padded alike). */
    bool ok = true;
    uint32_t first = UINT32_MAX;
    for (uint32_t n = 0; n < g->node_count && ok; ++n) {
      const ty_abi_node_t *c = &g->nodes[n];
      if (!ty_fz_is(c, "cast") || c->input_count < 1 || c->inputs[0] != p ||
          c->output_count != 1) {
        continue;
      }
      const uint32_t y = c->outputs[0];
      const ty_abi_value_t *yv = &g->values[y];
      if (yv->dtype != TY_DTYPE_BF16) continue; /* another cast: left alone */
      bool updated_value = false;
      for (uint32_t w = 0; w < g->update_count; ++w) updated_value |= g->updates[w].value == y;
      ok = n < a && run_at[n] == n && fuse[n].kind == TY_CU_FUSE_NONE &&
           yv->role == TY_VALUE_INTERMEDIATE && !(yv->flags & TY_VALUE_FLAG_OUTPUT) &&
           !updated_value &&
           (first == UINT32_MAX || og->value_bytes[y] == og->value_bytes[values[count]]);
      if (ok && first == UINT32_MAX) {
        first = n;
        params[count] = p;
        values[count] = y;
      }
    }
    if (!ok || first == UINT32_MAX) continue;
    for (uint32_t n = first; n < a; ++n) {
      const ty_abi_node_t *c = &g->nodes[n];
      if (ty_fz_is(c, "cast") && c->inputs[0] == p && g->values[c->outputs[0]].dtype == TY_DTYPE_BF16) {
        cast_role[n] = n == first ? 1 : 2;
        copy_of[c->outputs[0]] = count;
      }
    }
    count++;
  }
  return count;
}

static int64_t ty_fz_row_stride(const ty_abi_graph_t *g, const int64_t *row_stride, uint32_t v) {
  const ty_abi_value_t *val = &g->values[v];
  if (row_stride && row_stride[v]) return row_stride[v];
  return val->rank ? val->dims[val->rank - 1] : 1;
}

void ty_cu_xent_plan(const ty_owned_graph_t *og, const int64_t *row_stride,
                     const uint32_t *run_at, bool enabled, int32_t *reuse_input,
                     uint32_t *extra_read) {
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nn = g->node_count;
  for (uint32_t n = 0; n < nn; ++n) {
    reuse_input[n] = -1;
    extra_read[n] = UINT32_MAX;
  }
  for (uint32_t n = 0; enabled && n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    if (!ty_fz_is(node, "cross_entropy_backward") || node->input_count < 3 ||
        node->output_count < 1 || node->inputs[1] == UINT32_MAX) {
      continue;
    }
    const uint32_t z = node->inputs[1], targets = node->inputs[2], dz = node->outputs[0];
    if (g->values[z].dtype == g->values[dz].dtype &&
        ty_fz_row_stride(g, row_stride, z) == ty_fz_row_stride(g, row_stride, dz)) {
      reuse_input[n] = 1;
    }
    /* The forward: before n, its command run by itself (a loss written by
     * then), on the very same logits and targets. */
    for (uint32_t f = 0; f < n; ++f) {
      const ty_abi_node_t *fw = &g->nodes[f];
      if (ty_fz_is(fw, "cross_entropy") && fw->input_count >= 2 && fw->output_count >= 1 &&
          fw->inputs[0] == z && fw->inputs[1] == targets && run_at[f] == f &&
          g->values[fw->outputs[0]].dtype == TY_DTYPE_F32) {
        extra_read[n] = fw->outputs[0];
        break;
      }
    }
  }
}

/* Node n is a slice of its input along the last axis only (starts 0 on
 * the others, the same sizes there), dense in and out, one dtype: its
 * start on the last axis, else -1. */
static int64_t ty_fz_row_slice(const ty_fz_t *z, const ty_abi_node_t *node) {
  if (!ty_fz_is(node, "slice") || node->input_count != 1 || node->output_count != 1) return -1;
  const uint32_t x = node->inputs[0], y = node->outputs[0];
  if (x == UINT32_MAX || y == UINT32_MAX || !ty_fz_dense(z, x) || !ty_fz_dense(z, y)) return -1;
  const ty_abi_value_t *xv = ty_fz_val(z, x), *yv = ty_fz_val(z, y);
  if (xv->rank < 1 || xv->rank != yv->rank || xv->dtype != yv->dtype) return -1;
  const ty_abi_attr_t *starts = ty_desc_node_attr(node, "starts");
  if (!starts || starts->kind != TY_ATTR_INTS || starts->count != xv->rank) return -1;
  const uint32_t last = xv->rank - 1;
  for (uint32_t d = 0; d < last; ++d) {
    if (starts->ints[d] != 0 || xv->dims[d] != yv->dims[d]) return -1;
  }
  if (starts->ints[last] < 0 || starts->ints[last] + yv->dims[last] > xv->dims[last]) return -1;
  return starts->ints[last];
}

/* SLICES: slice n and up to TY_CU_FUSE_MAX_SLICES - 1 later slices of the
 * same input along its last axis, all written by n's launch. The input
 * exists when n runs, so the later slices' outputs can be made then. */
static void ty_fz_slices(ty_fz_t *z, uint32_t n) {
  const ty_abi_node_t *node = &z->g->nodes[n];
  if (ty_fz_row_slice(z, node) < 0) return;
  ty_cu_fuse_t f = ty_fz_none(TY_CU_FUSE_SLICES);
  for (uint32_t m = n + 1; m < z->g->node_count && f.slice_count < TY_CU_FUSE_MAX_SLICES - 1;
       ++m) {
    const ty_abi_node_t *other = &z->g->nodes[m];
    if (ty_fz_free(z, m) && ty_fz_row_slice(z, other) >= 0 &&
        other->inputs[0] == node->inputs[0]) {
      f.slices[f.slice_count++] = m;
    }
  }
  if (f.slice_count == 0) return;
  z->fuse[n] = f;
  for (uint32_t k = 0; k < f.slice_count; ++k) z->run_at[f.slices[k]] = n;
}

/* KV_PAIR: paged_kv_write n (a layer's keys) and the next free
 * paged_kv_write m with the same slots, pool and row shapes and dtype (its
 * values), whose operands all exist when n runs and whose pool only m
 * reads: n's launch writes both. */
static void ty_fz_kv_pair(ty_fz_t *z, uint32_t n) {
  const ty_abi_node_t *a = &z->g->nodes[n];
  if (a->input_count != 3 || a->output_count != 1) return;
  for (uint32_t m = n + 1; m < z->g->node_count; ++m) {
    const ty_abi_node_t *b = &z->g->nodes[m];
    if (!ty_fz_is(b, "paged_kv_write") || !ty_fz_free(z, m)) continue;
    if (b->input_count != 3 || b->output_count != 1 || b->inputs[2] != a->inputs[2]) return;
    for (uint32_t i = 0; i < 2; ++i) {
      const ty_abi_value_t *x = ty_fz_val(z, a->inputs[i]), *y = ty_fz_val(z, b->inputs[i]);
      if (!ty_fz_same_shape(x, y) || x->dtype != y->dtype || !ty_fz_dense(z, b->inputs[i]) ||
          !ty_fz_exists_by(z, b->inputs[i], n)) {
        return;
      }
    }
    if (z->uses[b->inputs[0]] != 1 || !ty_fz_dense(z, b->outputs[0])) return;
    ty_fz_pair(z, TY_CU_FUSE_KV_PAIR, n, m);
    return;
  }
}

/* A matmul gemv_group can take: x [.., K] (at most TY_GEMV_MAX_M rows) @
 * w^T, w [N, K] (trans_b, not trans_a), an optional bias [N], every operand
 * dense and of one float dtype with 16-byte rows, the output [.., N] dense.
 * Its a, w and bias in *a, *w, *bias. */
static bool ty_fz_group_matmul(const ty_fz_t *z, const ty_abi_node_t *node, uint32_t *a,
                               uint32_t *w, uint32_t *bias) {
  if (!ty_fz_is(node, "matmul") || node->input_count < 2 || node->input_count > 3 ||
      node->output_count != 1 || ty_desc_node_attr_int(node, "trans_a", 0) != 0 ||
      ty_desc_node_attr_int(node, "trans_b", 0) == 0) {
    return false;
  }
  const uint32_t x = node->inputs[0], wv = node->inputs[1], y = node->outputs[0];
  const uint32_t bv = node->input_count > 2 ? node->inputs[2] : UINT32_MAX;
  if (x == UINT32_MAX || wv == UINT32_MAX || y == UINT32_MAX) return false;
  const ty_abi_value_t *xa = ty_fz_val(z, x), *wa = ty_fz_val(z, wv), *ya = ty_fz_val(z, y);
  const ty_dtype_t dt = xa->dtype;
  if (dt != TY_DTYPE_BF16 && dt != TY_DTYPE_F16 && dt != TY_DTYPE_F32) return false;
  if (wa->dtype != dt || ya->dtype != dt || wa->rank != 2 || xa->rank < 2 ||
      ya->rank != xa->rank || !ty_fz_dense(z, x) || !ty_fz_dense(z, wv) || !ty_fz_dense(z, y)) {
    return false;
  }
  const int64_t K = xa->dims[xa->rank - 1], N = wa->dims[0];
  const int64_t vec = dt == TY_DTYPE_F32 ? 4 : 8;
  int64_t rows = 1;
  for (uint32_t i = 0; i + 1 < xa->rank; ++i) {
    rows *= xa->dims[i];
    if (ya->dims[i] != xa->dims[i]) return false;
  }
  if (wa->dims[1] != K || ya->dims[ya->rank - 1] != N || K <= 0 || K % vec != 0 || N <= 0 ||
      rows < 1 || rows > TY_GEMV_MAX_M) {
    return false;
  }
  if (bv != UINT32_MAX) {
    const ty_abi_value_t *ba = ty_fz_val(z, bv);
    if (ba->dtype != dt || ba->rank != 1 || ba->dims[0] != N || !ty_fz_dense(z, bv)) return false;
  }
  *a = x;
  *w = wv;
  *bias = bv;
  return true;
}

/* GEMV_GROUP: matmul n and the next free matmuls (up to TY_GEMV_GROUP_MAX
 * in all, among the 8 nodes after it) of the same input, K and rows, whose
 * weights and biases exist when n runs; then, for exactly two of equal N
 * read by one swiglu(first, second) and nothing else, that swiglu too. */
static void ty_fz_gemv_group(ty_fz_t *z, uint32_t n) {
  const ty_abi_graph_t *g = z->g;
  uint32_t a, w, bias;
  if (!ty_fz_group_matmul(z, &g->nodes[n], &a, &w, &bias)) return;
  ty_cu_fuse_t f = ty_fz_none(TY_CU_FUSE_GEMV_GROUP);
  for (uint32_t m = n + 1; m < g->node_count && m <= n + 8 &&
                           f.slice_count < TY_GEMV_GROUP_MAX - 1;
       ++m) {
    uint32_t am, wm, bm;
    if (!ty_fz_free(z, m) || !ty_fz_group_matmul(z, &g->nodes[m], &am, &wm, &bm) || am != a ||
        ty_fz_val(z, wm)->dtype != ty_fz_val(z, w)->dtype) {
      continue;
    }
    if (!ty_fz_exists_by(z, wm, n) || (bm != UINT32_MAX && !ty_fz_exists_by(z, bm, n))) continue;
    f.slices[f.slice_count++] = m;
  }
  if (f.slice_count == 0) return;
  if (f.slice_count == 1) {
    const uint32_t g0 = g->nodes[n].outputs[0], u0 = g->nodes[f.slices[0]].outputs[0];
    const uint32_t s = z->consumer[g0];
    if (s != UINT32_MAX && ty_fz_free(z, s) && ty_fz_is(&g->nodes[s], "swiglu") &&
        g->nodes[s].input_count == 2 && g->nodes[s].output_count == 1 &&
        g->nodes[s].inputs[0] == g0 && g->nodes[s].inputs[1] == u0 && ty_fz_private(z, g0) &&
        ty_fz_private(z, u0) && ty_fz_same_shape(ty_fz_val(z, g0), ty_fz_val(z, u0)) &&
        ty_fz_same_shape(ty_fz_val(z, g0), ty_fz_val(z, g->nodes[s].outputs[0])) &&
        ty_fz_val(z, g->nodes[s].outputs[0])->dtype == ty_fz_val(z, g0)->dtype &&
        ty_fz_dense(z, g->nodes[s].outputs[0])) {
      f.swiglu = s;
      f.out = g->nodes[s].outputs[0];
    }
  }
  z->fuse[n] = f;
  for (uint32_t k = 0; k < f.slice_count; ++k) z->run_at[f.slices[k]] = n;
  if (f.swiglu != UINT32_MAX) z->run_at[f.swiglu] = n;
}

/* Two rope nodes agree on everything but x and H: op, positions, dtype, T,
 * D and the frequency attributes. */
static bool ty_fz_rope_alike(const ty_fz_t *z, const ty_abi_node_t *a, const ty_abi_node_t *b) {
  if (strcmp(a->op, b->op) != 0 || a->input_count != 2 || b->input_count != 2 ||
      a->output_count != 1 || b->output_count != 1 || a->inputs[1] != b->inputs[1]) {
    return false;
  }
  const ty_abi_value_t *xa = ty_fz_val(z, a->inputs[0]), *xb = ty_fz_val(z, b->inputs[0]);
  if (xa->rank != 4 || xb->rank != 4 || xa->dtype != xb->dtype || xa->dims[0] != xb->dims[0] ||
      xa->dims[1] != xb->dims[1] || xa->dims[3] != xb->dims[3]) {
    return false;
  }
  static const char *const floats[] = {"theta", "factor", "low_freq_factor", "high_freq_factor",
                                       "original_max_position"};
  for (size_t i = 0; i < sizeof(floats) / sizeof(floats[0]); ++i) {
    if (ty_desc_node_attr_float(a, floats[i], -1.0) != ty_desc_node_attr_float(b, floats[i], -1.0))
      return false;
  }
  return strcmp(ty_desc_node_attr_string(a, "scaling", "default"),
                ty_desc_node_attr_string(b, "scaling", "default")) == 0;
}

/* ROPE_PAIR: rope (or rope_backward) n and the next free one like it among
 * the 8 nodes after it, whose x exists when n runs, both dense. */
static void ty_fz_rope_pair(ty_fz_t *z, uint32_t n) {
  const ty_abi_node_t *a = &z->g->nodes[n];
  if (a->input_count != 2 || a->output_count != 1 || !ty_fz_dense(z, a->inputs[0]) ||
      !ty_fz_dense(z, a->outputs[0])) {
    return;
  }
  for (uint32_t m = n + 1; m < z->g->node_count && m <= n + 8; ++m) {
    const ty_abi_node_t *b = &z->g->nodes[m];
    if (!ty_fz_free(z, m) || !ty_fz_rope_alike(z, a, b) || !ty_fz_exists_by(z, b->inputs[0], n) ||
        !ty_fz_dense(z, b->inputs[0]) || !ty_fz_dense(z, b->outputs[0])) {
      continue;
    }
    ty_fz_pair(z, TY_CU_FUSE_ROPE_PAIR, n, m);
    return;
  }
}

/* p, g and p' of adamw node `a` of one dtype `dt`, the moments f32: the
 * multi-tensor kernel's operands (cuda_ops_optim.c ty_cu_adamw_typed). */
static bool ty_fz_adamw_typed(const ty_fz_t *z, const ty_abi_node_t *a, ty_dtype_t dt) {
  if (a->input_count != 10 || a->output_count != 3) return false;
  for (uint32_t i = 0; i < 4; ++i) {
    if (a->inputs[i] == UINT32_MAX || !ty_fz_dense(z, a->inputs[i])) return false;
  }
  for (uint32_t o = 0; o < 3; ++o) {
    if (a->outputs[o] == UINT32_MAX || !ty_fz_dense(z, a->outputs[o])) return false;
  }
  return ty_fz_val(z, a->inputs[0])->dtype == dt && ty_fz_val(z, a->inputs[1])->dtype == dt &&
         ty_fz_val(z, a->outputs[0])->dtype == dt &&
         ty_fz_val(z, a->inputs[2])->dtype == TY_DTYPE_F32 &&
         ty_fz_val(z, a->inputs[3])->dtype == TY_DTYPE_F32 &&
         ty_fz_val(z, a->outputs[1])->dtype == TY_DTYPE_F32 &&
         ty_fz_val(z, a->outputs[2])->dtype == TY_DTYPE_F32;
}

/* CLIP_ADAMW: clip_by_global_norm n over two or more dense gradients of one
 * 16- or 32-bit float dtype, followed right away by adamw_update nodes that
 * one multi-tensor launch takes (lr, betas, eps and step shared, weight
 * decays of one dtype), each reading a different clipped gradient as its
 * gradient and nothing else reading any clipped gradient. Only nodes
 * right after the clip qualify: between the clip and a later update
 * another node could read a parameter the fused launch has already
 * updated. */
static void ty_fz_clip_adamw(ty_fz_t *z, uint32_t n) {
  const ty_abi_graph_t *g = z->g;
  const ty_abi_node_t *clip = &g->nodes[n];
  const uint32_t count = clip->input_count - 1;
  if (clip->input_count < 3 || clip->output_count != clip->input_count) return;
  const ty_dtype_t dt = ty_fz_val(z, clip->inputs[1])->dtype;
  if (dt != TY_DTYPE_F32 && !ty_fz_16bit(dt)) return;
  uint32_t readers = 0; /* clipped gradients with a reader */
  for (uint32_t i = 1; i <= count; ++i) {
    const uint32_t x = clip->inputs[i], y = clip->outputs[i];
    if (x == UINT32_MAX || y == UINT32_MAX || ty_fz_val(z, x)->dtype != dt ||
        ty_fz_val(z, y)->dtype != dt || !ty_fz_dense(z, x) || z->pinned[y]) {
      return;
    }
    if (z->uses[y] > 1) return;
    readers += z->uses[y];
  }
  if (readers == 0) return;
  const ty_abi_node_t *first = n + 1 < g->node_count ? &g->nodes[n + 1] : NULL;
  uint32_t m = n + 1;
  for (; m < g->node_count && m - n - 1 < readers; ++m) {
    const ty_abi_node_t *a = &g->nodes[m];
    if (!ty_fz_free(z, m) || !ty_fz_is(a, "adamw_update") || !ty_fz_adamw_typed(z, a, dt)) return;
    for (uint32_t i = 4; i < 10; ++i) {
      if (i != 8 && a->inputs[i] != first->inputs[i]) return;
    }
    if (a->inputs[8] == UINT32_MAX ||
        ty_fz_val(z, a->inputs[8])->dtype != ty_fz_val(z, first->inputs[8])->dtype) {
      return;
    }
    for (uint32_t i = 0; i < 10; ++i) {
      if (i != 1 && (a->inputs[i] == UINT32_MAX || !ty_fz_exists_by(z, a->inputs[i], n))) return;
    }
    /* its gradient is a clipped one, read by it alone */
    const uint32_t gv = a->inputs[1];
    if (z->og->producer[gv] != n || z->consumer[gv] != m) return;
  }
  if (m - n - 1 != readers) return;
  ty_cu_fuse_t f = ty_fz_none(TY_CU_FUSE_CLIP_ADAMW);
  f.slices[0] = n + 1;
  f.slice_count = readers;
  z->fuse[n] = f;
  for (uint32_t k = n + 1; k < m; ++k) z->run_at[k] = n;
}

void ty_cu_fuse_plan(const ty_owned_graph_t *og, const int64_t *row_stride, bool enabled,
                     bool gemv, ty_cu_fuse_t *fuse, uint32_t *run_at) {
  const ty_abi_graph_t *g = &og->graph;
  const uint32_t nn = g->node_count, nv = g->value_count;
  for (uint32_t n = 0; n < nn; ++n) {
    run_at[n] = n;
    fuse[n] = ty_fz_none(TY_CU_FUSE_NONE);
  }
  if (!enabled || nv == 0) return;
  ty_fz_t z = {g, og, row_stride, calloc(nv, sizeof(uint32_t)), malloc(nv * sizeof(uint32_t)),
               calloc(nv, sizeof(bool)), fuse, run_at};
  if (!z.uses || !z.consumer || !z.pinned) goto done; /* out of memory: no fusion */
  for (uint32_t v = 0; v < nv; ++v) {
    z.consumer[v] = UINT32_MAX;
    const ty_abi_value_t *val = &g->values[v];
    z.pinned[v] = val->role != TY_VALUE_INTERMEDIATE || (val->flags & TY_VALUE_FLAG_OUTPUT);
  }
  for (uint32_t u = 0; u < g->update_count; ++u) z.pinned[g->updates[u].value] = true;
  for (uint32_t n = 0; n < nn; ++n) {
    const ty_abi_node_t *node = &g->nodes[n];
    for (uint32_t i = 0; i < node->input_count; ++i) {
      const uint32_t v = node->inputs[i];
      if (v == UINT32_MAX) continue;
      if (z.uses[v]++ == 0) z.consumer[v] = n;
    }
  }
  for (uint32_t n = 0; n < nn; ++n) {
    if (!ty_fz_free(&z, n)) continue;
    const ty_abi_node_t *node = &g->nodes[n];
    if (ty_fz_is(node, "matmul")) {
      ty_fz_gemm(&z, n);
      if (gemv && ty_fz_free(&z, n)) ty_fz_gemv_group(&z, n);
    } else if (ty_fz_is(node, "layernorm") || ty_fz_is(node, "rmsnorm")) {
      ty_fz_norm(&z, n);
    } else if (ty_fz_is(node, "layernorm_backward") || ty_fz_is(node, "rmsnorm_backward")) {
      ty_fz_norm_bwd(&z, n);
    } else if (ty_fz_is(node, "slice")) {
      ty_fz_slices(&z, n);
    } else if (ty_fz_is(node, "paged_kv_write")) {
      ty_fz_kv_pair(&z, n);
    } else if (ty_fz_is(node, "rope") || ty_fz_is(node, "rope_backward")) {
      ty_fz_rope_pair(&z, n);
    } else if (ty_fz_is(node, "clip_by_global_norm")) {
      ty_fz_clip_adamw(&z, n);
    }
  }
done:
  free(z.uses);
  free(z.consumer);
  free(z.pinned);
}
