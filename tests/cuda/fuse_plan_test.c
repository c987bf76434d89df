/* The cuda executor's fusion rules (backends/cuda/cuda_fuse.c) on small
 * graphs: what each pattern folds, and the cases that must stay unfused —
 * a value another node also reads, a broadcasting add, an addend made after
 * the head, GELU in f32, a norm backward below the one-pass kernel's rows,
 * and fusion turned off; clipping folded into the AdamW updates right
 * after it, and not past another reader or node; and the loss gradient in place (ty_cu_xent_plan
 * with the memory planner): offered and taken, the forward's loss read,
 * refused where the logits are a graph output or strides differ; and the
 * bf16 weight copies the AdamW update keeps (ty_cu_weight_copy_plan): which
 * casts read a copy, which one makes it, and the parameters left alone
 * (another optimizer, another rank's update, a cast that is an output,
 * bf16 parameters, the copies off), with the memory plan keeping the
 * copies out of the arena. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "hal/abi_graph.h"
#include "hal/memory_plan.h"
#include "backends/cuda/cuda_fuse.h"
#include "graph/ir/graph.h"
#include "graph/ir/lower.h"
#include "graph/ir/train_step.h"

typedef struct {
  ty_lowered_graph_t *lowered;
  ty_owned_graph_t *og;
  ty_cu_fuse_t fuse[64];
  uint32_t run_at[64];
} planned_t;

static void plan_with(ty_graph_t *g, bool enabled, bool gemv, planned_t *p) {
  TY_EXPECT_OK(ty_graph_lower(g, &p->lowered));
  p->og = ty_owned_graph_copy(ty_lowered_graph_abi(p->lowered));
  assert_non_null(p->og);
  assert_true(p->og->graph.node_count <= 64);
  ty_cu_fuse_plan(p->og, NULL, enabled, gemv, p->fuse, p->run_at);
}

static void plan(ty_graph_t *g, bool enabled, planned_t *p) { plan_with(g, enabled, false, p); }

static void planned_free(planned_t *p, ty_graph_t *g) {
  ty_owned_graph_free(p->og);
  ty_lowered_graph_destroy(p->lowered);
  ty_graph_destroy(g);
}

/* The index of the first node running `op` at or after `from`. */
static uint32_t node_of(const planned_t *p, const char *op, uint32_t from) {
  for (uint32_t n = from; n < p->og->graph.node_count; ++n) {
    if (strcmp(p->og->graph.nodes[n].op, op) == 0) return n;
  }
  fail_msg("no %s node", op);
  return UINT32_MAX;
}

static uint32_t out_of(const planned_t *p, uint32_t n) { return p->og->graph.nodes[n].outputs[0]; }

static ty_value_id_t node1(ty_graph_t *g, const char *op, const ty_value_id_t *in, uint32_t n,
                           const char *dtype) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  if (dtype) TY_EXPECT_OK(ty_attrs_set_string(&a, "dtype", dtype));
  ty_value_id_t out;
  TY_EXPECT_OK(ty_graph_add_node1(g, op, in, n, dtype ? &a : NULL, &out));
  return out;
}

/* x [rows, C] f32 and w [C, C] f32 inputs; h = cast_bf16(x) @ cast_bf16(w). */
static ty_value_id_t product(ty_graph_t *g, int64_t rows, int64_t C, ty_value_id_t *x) {
  int64_t dx[2] = {rows, C}, dw[2] = {C, C};
  ty_value_id_t w;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, dx, x));
  TY_EXPECT_OK(ty_graph_add_input(g, "w", TY_DTYPE_F32, 2, dw, &w));
  ty_value_id_t in[2] = {node1(g, "cast", x, 1, "bf16"), node1(g, "cast", &w, 1, "bf16")};
  return node1(g, "matmul", in, 2, NULL);
}

static void test_matmul_cast_add(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x;
  ty_value_id_t h = node1(g, "cast", (ty_value_id_t[]){product(g, 8, 16, &x)}, 1, "f32");
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "add", (ty_value_id_t[]){x, h}, 2, NULL), "y"));
  planned_t p;
  plan(g, true, &p);
  const uint32_t mm = node_of(&p, "matmul", 0), add = node_of(&p, "add", 0);
  const uint32_t cast = node_of(&p, "cast", mm);
  assert_int_equal(p.fuse[mm].kind, TY_CU_FUSE_GEMM);
  assert_int_equal(p.fuse[mm].out, out_of(&p, add));   /* writes the sum */
  assert_int_equal(p.fuse[mm].addend, p.og->graph.nodes[add].inputs[0]); /* x */
  assert_int_equal(p.run_at[cast], mm);
  assert_int_equal(p.run_at[add], mm);
  planned_free(&p, g);
  /* fusion off: every node on its own */
  TY_EXPECT_OK(ty_graph_create(&g));
  h = node1(g, "cast", (ty_value_id_t[]){product(g, 8, 16, &x)}, 1, "f32");
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "add", (ty_value_id_t[]){x, h}, 2, NULL), "y"));
  plan(g, false, &p);
  for (uint32_t n = 0; n < p.og->graph.node_count; ++n) {
    assert_int_equal(p.fuse[n].kind, TY_CU_FUSE_NONE);
    assert_int_equal(p.run_at[n], n);
  }
  planned_free(&p, g);
}

/* The product read twice: nothing skips writing it. */
static void test_shared_value_stays(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x;
  const ty_value_id_t m = product(g, 8, 16, &x);
  const ty_value_id_t h = node1(g, "cast", &m, 1, "f32");
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "add", (ty_value_id_t[]){x, h}, 2, NULL), "y"));
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "gelu", &m, 1, NULL), "z"));
  planned_t p;
  plan(g, true, &p);
  const uint32_t mm = node_of(&p, "matmul", 0);
  assert_int_equal(p.fuse[mm].kind, TY_CU_FUSE_NONE);
  assert_int_equal(p.run_at[node_of(&p, "add", 0)], node_of(&p, "add", 0));
  planned_free(&p, g);
}

/* An add that broadcasts (a bias row) is left alone; the cast is still
 * folded (the f32 result is written). */
static void test_broadcast_add_stays(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x, r;
  int64_t dr[1] = {16};
  const ty_value_id_t h = node1(g, "cast", (ty_value_id_t[]){product(g, 8, 16, &x)}, 1, "f32");
  TY_EXPECT_OK(ty_graph_add_input(g, "r", TY_DTYPE_F32, 1, dr, &r));
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "add", (ty_value_id_t[]){h, r}, 2, NULL), "y"));
  planned_t p;
  plan(g, true, &p);
  const uint32_t mm = node_of(&p, "matmul", 0), add = node_of(&p, "add", 0);
  assert_int_equal(p.fuse[mm].kind, TY_CU_FUSE_GEMM);
  assert_int_equal(p.fuse[mm].addend, UINT32_MAX);
  assert_int_equal(p.fuse[mm].out, out_of(&p, node_of(&p, "cast", mm)));
  assert_int_equal(p.run_at[add], add);
  planned_free(&p, g);
}

/* The add's other operand is made after the matmul: no beta = 1 on it. */
static void test_late_addend_stays(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  ty_value_id_t x;
  const ty_value_id_t m = product(g, 8, 16, &x);
  const ty_value_id_t late = node1(g, "gelu", &x, 1, NULL);
  const ty_value_id_t h = node1(g, "cast", &m, 1, "f32");
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "add", (ty_value_id_t[]){late, h}, 2, NULL), "y"));
  planned_t p;
  plan(g, true, &p);
  const uint32_t mm = node_of(&p, "matmul", 0), add = node_of(&p, "add", 0);
  assert_true(node_of(&p, "gelu", 0) > mm);
  assert_int_equal(p.run_at[add], add);
  assert_int_equal(p.fuse[mm].addend, UINT32_MAX);
  planned_free(&p, g);
}

/* matmul -> gelu: the GELU epilogue in bf16, not in f32. */
static void test_gelu_epilogue_16bit_only(void **state) {
  (void)state;
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t dx[2] = {8, 16};
    ty_value_id_t x, w;
    const ty_dtype_t dt = bf16 ? TY_DTYPE_BF16 : TY_DTYPE_F32;
    TY_EXPECT_OK(ty_graph_add_input(g, "x", dt, 2, dx, &x));
    TY_EXPECT_OK(ty_graph_add_input(g, "w", dt, 2, (int64_t[]){16, 16}, &w));
    const ty_value_id_t m = node1(g, "matmul", (ty_value_id_t[]){x, w}, 2, NULL);
    TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "gelu", &m, 1, NULL), "y"));
    planned_t p;
    plan(g, true, &p);
    const uint32_t mm = node_of(&p, "matmul", 0), ge = node_of(&p, "gelu", 0);
    if (bf16) {
      assert_int_equal(p.fuse[mm].epilogue, TY_CU_EPI_GELU_AUX);
      assert_int_equal(p.fuse[mm].out, out_of(&p, ge));
      assert_int_equal(p.fuse[mm].aux, out_of(&p, mm));
      assert_int_equal(p.run_at[ge], mm);
    } else {
      assert_int_equal(p.fuse[mm].kind, TY_CU_FUSE_NONE);
      assert_int_equal(p.run_at[ge], ge);
    }
    planned_free(&p, g);
  }
}

/* layernorm -> cast; the backward chain only from 1024 rows. */
static void test_norms(void **state) {
  (void)state;
  for (int big = 0; big < 2; ++big) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    const int64_t rows = big ? 1024 : 64, C = 16;
    int64_t dx[2] = {rows, C}, dc[1] = {C};
    ty_value_id_t x, gam, bet, dy, r, outs[3], gouts[3];
    TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, dx, &x));
    TY_EXPECT_OK(ty_graph_add_input(g, "g", TY_DTYPE_F32, 1, dc, &gam));
    TY_EXPECT_OK(ty_graph_add_input(g, "b", TY_DTYPE_F32, 1, dc, &bet));
    TY_EXPECT_OK(ty_graph_add_input(g, "dy", TY_DTYPE_BF16, 2, dx, &dy));
    TY_EXPECT_OK(ty_graph_add_input(g, "r", TY_DTYPE_F32, 2, dx, &r));
    TY_EXPECT_OK(ty_graph_add_node(g, "layernorm", (ty_value_id_t[]){x, gam, bet}, 3, NULL, outs,
                                   3));
    TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "cast", outs, 1, "bf16"), "y"));
    const ty_value_id_t dy32 = node1(g, "cast", &dy, 1, "f32");
    TY_EXPECT_OK(ty_graph_add_node(g, "layernorm_backward",
                                   (ty_value_id_t[]){dy32, x, gam, outs[1], outs[2]}, 5, NULL,
                                   gouts, 3));
    const ty_value_id_t sum = node1(g, "add", (ty_value_id_t[]){r, gouts[0]}, 2, NULL);
    TY_EXPECT_OK(ty_graph_set_output(g, sum, "dx"));
    TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "cast", &sum, 1, "bf16"), "dx16"));
    TY_EXPECT_OK(ty_graph_set_output(g, gouts[1], "dg"));
    TY_EXPECT_OK(ty_graph_set_output(g, gouts[2], "db"));
    planned_t p;
    plan(g, true, &p);
    const uint32_t ln = node_of(&p, "layernorm", 0), lb = node_of(&p, "layernorm_backward", 0);
    assert_int_equal(p.fuse[ln].kind, TY_CU_FUSE_NORM);
    if (big) {
      const uint32_t ci = p.og->producer[p.og->graph.nodes[lb].inputs[0]]; /* cast(dy) */
      assert_int_equal(p.fuse[lb].kind, TY_CU_FUSE_NORM_BWD);
      assert_int_equal(p.fuse[lb].dy, p.og->graph.nodes[ci].inputs[0]);
      assert_int_equal(p.fuse[lb].out, out_of(&p, node_of(&p, "add", 0)));
      assert_int_equal(p.fuse[lb].out2, out_of(&p, node_of(&p, "cast", lb)));
      /* the cast before it is deferred to it: run_at > its index */
      assert_true(ci < lb);
      assert_int_equal(p.run_at[ci], lb);
    } else {
      assert_int_equal(p.fuse[lb].kind, TY_CU_FUSE_NONE);
    }
    planned_free(&p, g);
  }
}

/* logits = gelu(x) [rows, V] f32 (an intermediate); loss =
 * cross_entropy(logits, targets) (a graph output when with_forward);
 * dlogits = cross_entropy_backward(dloss, logits, targets_b) read by a
 * gelu; the logits a graph output too when shown. */
static void build_loss(ty_graph_t *g, bool with_forward, bool same_targets, bool shown) {
  int64_t dz[2] = {64, 300}, dr[1] = {64};
  ty_value_id_t x, targets, other, dloss;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, dz, &x));
  TY_EXPECT_OK(ty_graph_add_input(g, "targets", TY_DTYPE_I64, 1, dr, &targets));
  TY_EXPECT_OK(ty_graph_add_input(g, "targets2", TY_DTYPE_I64, 1, dr, &other));
  TY_EXPECT_OK(ty_graph_add_input(g, "dloss", TY_DTYPE_F32, 1, dr, &dloss));
  const ty_value_id_t logits = node1(g, "gelu", &x, 1, NULL);
  if (with_forward) {
    TY_EXPECT_OK(ty_graph_set_output(
        g, node1(g, "cross_entropy", (ty_value_id_t[]){logits, targets}, 2, NULL), "loss"));
  }
  const ty_value_id_t dlogits = node1(
      g, "cross_entropy_backward",
      (ty_value_id_t[]){dloss, logits, same_targets ? targets : other}, 3, NULL);
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "gelu", &dlogits, 1, NULL), "y"));
  if (shown) TY_EXPECT_OK(ty_graph_set_output(g, logits, "logits"));
}

/* x [rows, 64] bf16 @ w_i^T, w_i [N_i, 64] bf16 (trans_b): decode-step
 * projections. */
static ty_value_id_t projection(ty_graph_t *g, ty_value_id_t x, const char *name, int64_t N) {
  int64_t dw[2] = {N, 64};
  ty_value_id_t w, out;
  TY_EXPECT_OK(ty_graph_add_input(g, name, TY_DTYPE_BF16, 2, dw, &w));
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&a, "trans_b", 1));
  TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", (ty_value_id_t[]){x, w}, 2, &a, &out));
  return out;
}

static ty_graph_t *projections(int64_t rows, ty_value_id_t *x) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t dx[2] = {rows, 64};
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_BF16, 2, dx, x));
  return g;
}

static void test_gemv_group(void **state) {
  (void)state;
  /* q, k, v of one input: one launch for the three */
  ty_value_id_t x;
  ty_graph_t *g = projections(2, &x);
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wq", 64), "q"));
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wk", 16), "k"));
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wv", 16), "v"));
  planned_t p;
  plan_with(g, true, true, &p);
  uint32_t q = node_of(&p, "matmul", 0), k = node_of(&p, "matmul", q + 1),
           v = node_of(&p, "matmul", k + 1);
  assert_int_equal(p.fuse[q].kind, TY_CU_FUSE_GEMV_GROUP);
  assert_int_equal(p.fuse[q].slice_count, 2);
  assert_int_equal(p.fuse[q].slices[0], k);
  assert_int_equal(p.fuse[q].slices[1], v);
  assert_int_equal(p.fuse[q].swiglu, UINT32_MAX);
  assert_int_equal(p.run_at[k], q);
  assert_int_equal(p.run_at[v], q);
  planned_free(&p, g);
  /* not where the GEMV path is off (deterministic, TRAINYARD_CUDA_GEMV=0) */
  g = projections(2, &x);
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wq", 64), "q"));
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wk", 16), "k"));
  plan_with(g, true, false, &p);
  q = node_of(&p, "matmul", 0);
  assert_int_equal(p.fuse[q].kind, TY_CU_FUSE_NONE);
  planned_free(&p, g);
  /* nor with more rows than the GEMV kernels take */
  g = projections(5, &x);
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wq", 64), "q"));
  TY_EXPECT_OK(ty_graph_set_output(g, projection(g, x, "wk", 16), "k"));
  plan_with(g, true, true, &p);
  assert_int_equal(p.fuse[node_of(&p, "matmul", 0)].kind, TY_CU_FUSE_NONE);
  planned_free(&p, g);
}

static void test_gemv_group_swiglu(void **state) {
  (void)state;
  /* gate and up read only by swiglu: the group writes swiglu's output */
  ty_value_id_t x;
  ty_graph_t *g = projections(1, &x);
  ty_value_id_t gate = projection(g, x, "wg", 128), up = projection(g, x, "wu", 128);
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "swiglu", (ty_value_id_t[]){gate, up}, 2, NULL),
                                   "h"));
  planned_t p;
  plan_with(g, true, true, &p);
  const uint32_t gn = node_of(&p, "matmul", 0), un = node_of(&p, "matmul", gn + 1),
                 sn = node_of(&p, "swiglu", 0);
  assert_int_equal(p.fuse[gn].kind, TY_CU_FUSE_GEMV_GROUP);
  assert_int_equal(p.fuse[gn].slice_count, 1);
  assert_int_equal(p.fuse[gn].swiglu, sn);
  assert_int_equal(p.fuse[gn].out, out_of(&p, sn));
  assert_int_equal(p.run_at[un], gn);
  assert_int_equal(p.run_at[sn], gn);
  planned_free(&p, g);
  /* up also read elsewhere: the pair stays a group, swiglu runs on its own */
  g = projections(1, &x);
  gate = projection(g, x, "wg", 128);
  up = projection(g, x, "wu", 128);
  TY_EXPECT_OK(ty_graph_set_output(g, node1(g, "swiglu", (ty_value_id_t[]){gate, up}, 2, NULL),
                                   "h"));
  TY_EXPECT_OK(ty_graph_set_output(g, up, "up"));
  plan_with(g, true, true, &p);
  const uint32_t g2 = node_of(&p, "matmul", 0), s2 = node_of(&p, "swiglu", 0);
  assert_int_equal(p.fuse[g2].kind, TY_CU_FUSE_GEMV_GROUP);
  assert_int_equal(p.fuse[g2].swiglu, UINT32_MAX);
  assert_int_equal(p.run_at[s2], s2);
  planned_free(&p, g);
}

/* rope of q [1, 4, 4, 8] and k [1, 4, 2, 8] at the same positions: one
 * launch; with other frequencies (theta) each its own. */
static void rope_graph(double theta_k, planned_t *p, ty_graph_t **out_g) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t dq[4] = {1, 4, 4, 8}, dk[4] = {1, 4, 2, 8}, dp[1] = {4};
  ty_value_id_t q, k, pos, yq, yk;
  TY_EXPECT_OK(ty_graph_add_input(g, "q", TY_DTYPE_BF16, 4, dq, &q));
  TY_EXPECT_OK(ty_graph_add_input(g, "k", TY_DTYPE_BF16, 4, dk, &k));
  TY_EXPECT_OK(ty_graph_add_input(g, "pos", TY_DTYPE_I64, 1, dp, &pos));
  ty_attrs_t a = TY_ATTRS_EMPTY, b = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_float(&a, "theta", 10000.0));
  TY_EXPECT_OK(ty_attrs_set_float(&b, "theta", theta_k));
  TY_EXPECT_OK(ty_graph_add_node1(g, "rope", (ty_value_id_t[]){q, pos}, 2, &a, &yq));
  TY_EXPECT_OK(ty_graph_add_node1(g, "rope", (ty_value_id_t[]){k, pos}, 2, &b, &yk));
  TY_EXPECT_OK(ty_graph_set_output(g, yq, "yq"));
  TY_EXPECT_OK(ty_graph_set_output(g, yk, "yk"));
  plan(g, true, p);
  *out_g = g;
}

static void test_rope_pair(void **state) {
  (void)state;
  planned_t p;
  ty_graph_t *g;
  rope_graph(10000.0, &p, &g);
  const uint32_t rq = node_of(&p, "rope", 0), rk = node_of(&p, "rope", rq + 1);
  assert_int_equal(p.fuse[rq].kind, TY_CU_FUSE_ROPE_PAIR);
  assert_int_equal(p.fuse[rq].slices[0], rk);
  assert_int_equal(p.run_at[rk], rq);
  planned_free(&p, g);
  rope_graph(500000.0, &p, &g);
  assert_int_equal(p.fuse[node_of(&p, "rope", 0)].kind, TY_CU_FUSE_NONE);
  planned_free(&p, g);
}

/* clip_by_global_norm of three gradients, then their AdamW updates.
 * variant 0: as the train step builds it (fused: CLIP_ADAMW); 1: a clipped
 * gradient also a graph output; 2: a node between the clip and the
 * updates; 3: the last update with its own lr; 4: fusion off. */
static void clip_graph(int variant, planned_t *p, ty_graph_t **out_g) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t d[1] = {40};
  ty_value_id_t hp[6], lr2, clip_in[4], clip_out[4];
  const char *hp_names[6] = {"lr", "beta1", "beta2", "eps", "wd", "step"};
  for (int i = 0; i < 6; ++i) {
    TY_EXPECT_OK(ty_graph_add_input(g, hp_names[i], i == 5 ? TY_DTYPE_I64 : TY_DTYPE_F32, 0,
                                    NULL, &hp[i]));
  }
  TY_EXPECT_OK(ty_graph_add_input(g, "lr2", TY_DTYPE_F32, 0, NULL, &lr2));
  TY_EXPECT_OK(ty_graph_add_input(g, "max_norm", TY_DTYPE_F32, 0, NULL, &clip_in[0]));
  for (int i = 1; i < 4; ++i) {
    char name[8];
    snprintf(name, sizeof(name), "g%d", i);
    TY_EXPECT_OK(ty_graph_add_input(g, name, TY_DTYPE_F32, 1, d, &clip_in[i]));
  }
  TY_EXPECT_OK(ty_graph_add_node(g, "clip_by_global_norm", clip_in, 4, NULL, clip_out, 4));
  TY_EXPECT_OK(ty_graph_set_output(g, clip_out[0], "norm"));
  if (variant == 1) TY_EXPECT_OK(ty_graph_set_output(g, clip_out[2], "clipped"));
  if (variant == 2) {
    ty_value_id_t twice = node1(g, "add", (ty_value_id_t[]){hp[0], hp[0]}, 2, NULL);
    TY_EXPECT_OK(ty_graph_set_output(g, twice, "twice"));
  }
  for (int i = 1; i < 4; ++i) {
    char name[16];
    ty_value_id_t st[3], out[3];
    const char *kinds[3] = {"p", "m", "v"};
    for (int k = 0; k < 3; ++k) {
      snprintf(name, sizeof(name), "%s%d", kinds[k], i);
      TY_EXPECT_OK(ty_graph_add_state(g, name, TY_DTYPE_F32, 1, d, &st[k]));
    }
    const ty_value_id_t lr = variant == 3 && i == 3 ? lr2 : hp[0];
    ty_value_id_t in[10] = {st[0], clip_out[i], st[1], st[2], lr, hp[1], hp[2], hp[3], hp[4],
                            hp[5]};
    TY_EXPECT_OK(ty_graph_add_node(g, "adamw_update", in, 10, NULL, out, 3));
    for (int k = 0; k < 3; ++k) TY_EXPECT_OK(ty_graph_set_state_update(g, st[k], out[k]));
  }
  plan(g, variant != 4, p);
  *out_g = g;
}

static void test_clip_adamw(void **state) {
  (void)state;
  for (int variant = 0; variant < 5; ++variant) {
    planned_t p;
    ty_graph_t *g;
    clip_graph(variant, &p, &g);
    const uint32_t clip = node_of(&p, "clip_by_global_norm", 0);
    const uint32_t a1 = node_of(&p, "adamw_update", clip + 1);
    if (variant == 0) {
      assert_int_equal(p.fuse[clip].kind, TY_CU_FUSE_CLIP_ADAMW);
      assert_int_equal(p.fuse[clip].slices[0], clip + 1);
      assert_int_equal(p.fuse[clip].slice_count, 3);
      for (uint32_t k = 0; k < 3; ++k) assert_int_equal(p.run_at[a1 + k], clip);
    } else {
      if (p.fuse[clip].kind != TY_CU_FUSE_NONE) fail_msg("variant %d fused", variant);
      assert_int_equal(p.run_at[a1], a1);
    }
    planned_free(&p, g);
  }
}

static void test_loss_gradient_in_place(void **state) {
  (void)state;
  for (int k = 0; k < 6; ++k) {
    /* 0: all; 1: no forward; 2: the forward on other targets; 3: the
     * logits shown; 4: dlogits' rows padded, the logits' not; 5: off */
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    build_loss(g, k != 1, k != 2, k == 3);
    planned_t p;
    plan(g, k != 5, &p);
    const uint32_t nn = p.og->graph.node_count, nv = p.og->graph.value_count;
    const uint32_t bwd = node_of(&p, "cross_entropy_backward", 0);
    const uint32_t logits = p.og->graph.nodes[bwd].inputs[1], dlogits = out_of(&p, bwd);
    int64_t stride[64] = {0};
    assert_true(nv <= 64);
    if (k == 4) stride[dlogits] = 320;
    int32_t reuse[64];
    uint32_t extra[64];
    ty_cu_xent_plan(p.og, stride, p.run_at, k != 5, reuse, extra);
    for (uint32_t n = 0; n < nn; ++n) {
      if (n == bwd) continue;
      assert_int_equal(reuse[n], -1);
      assert_int_equal(extra[n], UINT32_MAX);
    }
    assert_int_equal(reuse[bwd], k == 4 || k == 5 ? -1 : 1);
    if (k == 0 || k == 3 || k == 4) {
      assert_int_equal(extra[bwd], out_of(&p, node_of(&p, "cross_entropy", 0)));
    } else {
      assert_int_equal(extra[bwd], UINT32_MAX);
    }
    ty_memory_plan_t mp;
    const ty_memory_plan_opts_t opts = {
        .run_at = p.run_at, .reuse_input = reuse, .extra_read = extra};
    assert_int_equal(ty_memory_plan_build_opts(p.og, 256, &opts, &mp), TY_CODE_OK);
    const bool taken = k == 0 || k == 1 || k == 2;
    if (mp.in_place[bwd] != taken) fail_msg("case %d: in place %d", k, mp.in_place[bwd]);
    if (taken) {
      assert_int_equal(mp.storage[dlogits].kind, TY_STORAGE_VIEW);
      assert_int_equal(mp.storage[dlogits].alias, logits);
    } else {
      assert_int_equal(mp.storage[dlogits].kind, TY_STORAGE_ARENA);
    }
    ty_memory_plan_free(&mp);
    planned_free(&p, g);
  }
}

/* A two-layer bf16-mixed step trained by ty_graph_build_train_step:
 * y = (cast(x) @ cast(w1)) @ cast(w2), loss = sum(cast_f32(y * y)).
 * Variants: 0 AdamW; 1 the copies off; 2 SGD; 3 w2 left to another rank
 * (ZeRO-1); 4 w2's cast also a graph output; 5 the fused optimizer (each
 * update right after its gradient); 6 bf16 parameters (no casts); 7 a
 * micro-step of gradient accumulation (the weights read only, the
 * accumulators updated); 8 no training at all, a state updated beside the
 * forward by an op that does not accumulate into it; 9 AdamW, and w1 cast
 * once more after its update (its copy would already hold the new value). */
static void weights_graph(int variant, planned_t *p, ty_graph_t **out_g, ty_value_id_t *w) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  const int64_t dx[2] = {8, 16}, dw[2] = {16, 16};
  const ty_dtype_t pdt = variant == 6 ? TY_DTYPE_BF16 : TY_DTYPE_F32;
  ty_value_id_t x;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 2, dx, &x));
  TY_EXPECT_OK(ty_graph_add_state(g, "w1", pdt, 2, dw, &w[0]));
  TY_EXPECT_OK(ty_graph_add_state(g, "w2", pdt, 2, dw, &w[1]));
  ty_value_id_t w16[2];
  for (int i = 0; i < 2; ++i) w16[i] = pdt == TY_DTYPE_F32 ? node1(g, "cast", &w[i], 1, "bf16") : w[i];
  if (variant == 4) TY_EXPECT_OK(ty_graph_set_output(g, w16[1], "w2_bf16"));
  ty_value_id_t h = node1(g, "matmul", (ty_value_id_t[]){node1(g, "cast", &x, 1, "bf16"), w16[0]},
                          2, NULL);
  ty_value_id_t y = node1(g, "matmul", (ty_value_id_t[]){h, w16[1]}, 2, NULL);
  ty_value_id_t sq = node1(g, "cast", (ty_value_id_t[]){node1(g, "mul", (ty_value_id_t[]){y, y}, 2,
                                                              NULL)},
                           1, "f32");
  ty_value_id_t loss = node1(g, "reduce_sum", &sq, 1, NULL);
  TY_EXPECT_OK(ty_graph_set_output(g, loss, "loss"));
  if (variant == 8) {
    ty_value_id_t seen;
    const int64_t one = 1;
    TY_EXPECT_OK(ty_graph_add_state(g, "seen", TY_DTYPE_F32, 1, &one, &seen));
    ty_value_id_t twice = node1(g, "mul", (ty_value_id_t[]){seen, seen}, 2, NULL);
    TY_EXPECT_OK(ty_graph_set_state_update(g, seen, twice));
  }
  const bool update[2] = {true, variant != 3};
  ty_train_step_params_t tp = {.loss = loss,
                               .loss_seed = TY_VALUE_NONE,
                               .params = w,
                               .param_count = 2,
                               .optimizer = variant == 2 ? TY_OPTIMIZER_SGD : TY_OPTIMIZER_ADAMW,
                               .fused_optimizer = variant == 5,
                               .mode = variant == 7 ? TY_TRAIN_STEP_ACCUMULATE
                                                    : TY_TRAIN_STEP_FUSED,
                               .update = variant == 7 ? NULL : update};
  if (variant != 8) TY_EXPECT_OK(ty_graph_build_train_step(g, &tp));
  if (variant == 9) {
    ty_value_id_t late = node1(g, "cast", &w[0], 1, "bf16");
    late = node1(g, "cast", (ty_value_id_t[]){node1(g, "reduce_sum", &late, 1, NULL)}, 1, "f32");
    TY_EXPECT_OK(ty_graph_set_output(g, late, "late"));
  }
  TY_EXPECT_OK(ty_graph_lower(g, &p->lowered));
  p->og = ty_owned_graph_copy(ty_lowered_graph_abi(p->lowered));
  assert_non_null(p->og);
  assert_true(p->og->graph.node_count <= 64);
  ty_cu_fuse_plan(p->og, NULL, true, false, p->fuse, p->run_at);
  *out_g = g;
}

/* The parameter value named `name` in the lowered graph. */
static uint32_t value_named(const planned_t *p, const char *name) {
  for (uint32_t v = 0; v < p->og->graph.value_count; ++v) {
    if (!strcmp(p->og->graph.values[v].name, name)) return v;
  }
  fail_msg("no value %s", name);
  return UINT32_MAX;
}

static void test_weight_copies(void **state) {
  (void)state;
  /* copies per variant (see weights_graph); 5: whatever precedes its update */
  const int want[10] = {2, 0, 0, 1, 1, -1, 0, 2, 0, 1};
  for (int variant = 0; variant < 10; ++variant) {
    planned_t p;
    ty_graph_t *g;
    ty_value_id_t w[2];
    weights_graph(variant, &p, &g, w);
    const ty_abi_graph_t *ag = &p.og->graph;
    uint32_t *copy_of = malloc(ag->value_count * sizeof(uint32_t));
    uint8_t *role = malloc(ag->node_count);
    uint32_t params[4], values[4];
    assert_true(copy_of && role);
    const uint32_t count = ty_cu_weight_copy_plan(p.og, p.fuse, p.run_at, variant != 1, copy_of,
                                                  role, params, values);
    if (want[variant] >= 0 && count != (uint32_t)want[variant]) {
      fail_msg("variant %d: %u copies, want %d", variant, count, want[variant]);
    }
    uint32_t readers = 0;
    for (uint32_t k = 0; k < count; ++k) {
      /* the copy's casts: one maker (the first), the others read it, all
       * before the parameter's update */
      uint32_t makers = 0, first = UINT32_MAX, update = UINT32_MAX;
      for (uint32_t n = 0; n < ag->node_count; ++n) {
        const ty_abi_node_t *node = &ag->nodes[n];
        if (!strcmp(node->op, "adamw_update") && node->inputs[0] == params[k]) update = n;
        if (strcmp(node->op, "cast") || node->inputs[0] != params[k]) continue;
        assert_int_equal(copy_of[node->outputs[0]], k);
        if (first == UINT32_MAX) first = n;
        makers += role[n] == 1;
        readers += role[n] == 2;
        if (role[n] == 1) assert_int_equal(n, first);
        assert_int_equal(values[k] == node->outputs[0], n == first);
      }
      assert_int_equal(makers, 1);
      /* an update writes the copy, except in the micro-step (none) */
      assert_int_equal(update == UINT32_MAX, variant == 7);
      for (uint32_t n = 0; n < ag->node_count; ++n) {
        if (role[n]) assert_true(n < update);
      }
    }
    /* w2's cast in the backward (recast_states: the input gradient of h
     * reads it; x's is not wanted, so w1 has none) reads the copy too */
    if (variant == 0 || variant == 7) assert_int_equal(readers, 1);
    if (variant == 3 || variant == 4) {
      assert_int_equal(params[0], value_named(&p, "w1"));
    }
    if (variant == 9) assert_int_equal(params[0], value_named(&p, "w2"));
    /* the memory plan leaves the copies out of the arena */
    bool *external = calloc(ag->value_count, sizeof(bool));
    assert_non_null(external);
    for (uint32_t v = 0; v < ag->value_count; ++v) external[v] = copy_of[v] != UINT32_MAX;
    ty_memory_plan_t mp;
    const ty_memory_plan_opts_t opts = {.run_at = p.run_at, .external = external};
    assert_int_equal(ty_memory_plan_build_opts(p.og, 256, &opts, &mp), TY_CODE_OK);
    for (uint32_t v = 0; v < ag->value_count; ++v) {
      if (external[v]) assert_int_equal(mp.storage[v].kind, TY_STORAGE_EXTERNAL);
      else assert_int_not_equal(mp.storage[v].kind, TY_STORAGE_EXTERNAL);
    }
    ty_memory_plan_free(&mp);
    free(external);
    free(copy_of);
    free(role);
    planned_free(&p, g);
  }
}

/* When the copies are on: the memory levers and the switches turn them off. */
static void test_weight_copies_switch(void **state) {
  (void)state;
  unsetenv("TRAINYARD_CUDA_WEIGHT_COPIES");
  unsetenv("TRAINYARD_CUDA_FUSE");
  assert_true(ty_cu_weight_copies_enabled(""));
  assert_true(ty_cu_weight_copies_enabled("dtype=bf16 data_parallel=2"));
  const char *levers[] = {"recompute=layer", "loss_chunk=1024", "mlp_chunk=2048",
                          "optimizer=adafactor fused_optimizer=1", "offload=optimizer"};
  for (size_t i = 0; i < sizeof(levers) / sizeof(levers[0]); ++i) {
    if (ty_cu_weight_copies_enabled(levers[i])) fail_msg("on with %s", levers[i]);
  }
  setenv("TRAINYARD_CUDA_WEIGHT_COPIES", "0", 1);
  assert_false(ty_cu_weight_copies_enabled(""));
  assert_null(ty_cu_weight_copies_bad_setting());
  setenv("TRAINYARD_CUDA_WEIGHT_COPIES", "yes", 1);
  assert_string_equal(ty_cu_weight_copies_bad_setting(), "yes");
  setenv("TRAINYARD_CUDA_WEIGHT_COPIES", "1", 1);
  assert_true(ty_cu_weight_copies_enabled(""));
  setenv("TRAINYARD_CUDA_FUSE", "0", 1);
  assert_false(ty_cu_weight_copies_enabled(""));
  unsetenv("TRAINYARD_CUDA_FUSE");
  unsetenv("TRAINYARD_CUDA_WEIGHT_COPIES");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matmul_cast_add),
      cmocka_unit_test(test_shared_value_stays),
      cmocka_unit_test(test_broadcast_add_stays),
      cmocka_unit_test(test_late_addend_stays),
      cmocka_unit_test(test_gelu_epilogue_16bit_only),
      cmocka_unit_test(test_norms),
      cmocka_unit_test(test_gemv_group),
      cmocka_unit_test(test_gemv_group_swiglu),
      cmocka_unit_test(test_rope_pair),
      cmocka_unit_test(test_clip_adamw),
      cmocka_unit_test(test_loss_gradient_in_place),
      cmocka_unit_test(test_weight_copies),
      cmocka_unit_test(test_weight_copies_switch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
