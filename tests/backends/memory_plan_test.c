/* The liveness-based memory planner: on random chains and diamonds of
 * elementwise ops, no two arena values that are live at the same time share
 * bytes, everything lies inside the arena, reuse actually happens, reshapes
 * are views that keep their input's bytes live, and optimizer updates are
 * planned in place only when that is safe (also when the old state is read
 * through a reshape), as are a gradient accumulator's adds, and a backend's offer of an input's bytes to a node's
 * output (ty_memory_plan_opts_t) is taken only when safe, as is its extra
 * read's liveness. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "hal/abi_graph.h"
#include "hal/memory_plan.h"
#include "graph/ir/autodiff.h"
#include "graph/ir/graph.h"
#include "graph/ir/lower.h"

typedef struct {
  ty_lowered_graph_t *lowered;
  ty_owned_graph_t *owned;
  ty_memory_plan_t plan;
} planned_t;

static void plan_graph(const ty_graph_t *g, planned_t *p) {
  TY_EXPECT_OK(ty_graph_lower(g, &p->lowered));
  p->owned = ty_owned_graph_copy(ty_lowered_graph_abi(p->lowered));
  assert_non_null(p->owned);
  assert_int_equal(ty_memory_plan_build(p->owned, 64, &p->plan), TY_CODE_OK);
}

static void planned_free(planned_t *p) {
  ty_memory_plan_free(&p->plan);
  ty_owned_graph_free(p->owned);
  ty_lowered_graph_destroy(p->lowered);
}

/* Whether values a and b share arena bytes. */
static bool bytes_overlap(const planned_t *p, uint32_t a, uint32_t b) {
  const uint64_t a0 = p->plan.storage[a].offset, a1 = a0 + p->owned->value_bytes[a];
  const uint64_t b0 = p->plan.storage[b].offset, b1 = b0 + p->owned->value_bytes[b];
  return a0 < b1 && b0 < a1;
}

/* Checks that live arena values never overlap. */
static void check_no_overlap(const planned_t *p) {
  const ty_abi_graph_t *g = &p->owned->graph;
  uint32_t nv = g->value_count;
  uint32_t *last = malloc(nv * sizeof(uint32_t));
  for (uint32_t v = 0; v < nv; ++v) last[v] = p->owned->producer[v];
  for (uint32_t n = 0; n < g->node_count; ++n) {
    for (uint32_t i = 0; i < g->nodes[n].input_count; ++i) {
      uint32_t in = g->nodes[n].inputs[i];
      if (in != UINT32_MAX && last[in] < n) last[in] = n;
    }
  }
  for (uint32_t c = 0; c < p->plan.copy_count; ++c) last[p->plan.copies[c].value] = g->node_count;
  /* A view's readers read its root's bytes. */
  for (uint32_t v = 0; v < nv; ++v) {
    if (p->plan.storage[v].kind != TY_STORAGE_VIEW) continue;
    uint32_t root = p->plan.storage[v].alias;
    assert_true(p->plan.storage[root].kind != TY_STORAGE_VIEW);
    if (last[v] > last[root]) last[root] = last[v];
  }
  for (uint32_t a = 0; a < nv; ++a) {
    if (p->plan.storage[a].kind != TY_STORAGE_ARENA) continue;
    uint64_t a0 = p->plan.storage[a].offset, a1 = a0 + p->owned->value_bytes[a];
    assert_true(a1 <= p->plan.arena_bytes);
    for (uint32_t b = a + 1; b < nv; ++b) {
      if (p->plan.storage[b].kind != TY_STORAGE_ARENA) continue;
      uint64_t b0 = p->plan.storage[b].offset, b1 = b0 + p->owned->value_bytes[b];
      uint32_t pa = p->owned->producer[a], pb = p->owned->producer[b];
      bool live_together = !(last[a] < pb || last[b] < pa);
      bool share = a0 < b1 && b0 < a1;
      if (live_together && share) {
        fail_msg("values %u [%u,%u] and %u [%u,%u] overlap in the arena", a, pa, last[a], b,
                 pb, last[b]);
      }
    }
  }
  free(last);
}

static void test_random_graphs(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  for (int trial = 0; trial < 50; ++trial) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t d[1] = {(int64_t)(1 + ty_test_rng_next(&rng) % 300)};
    ty_value_id_t values[64];
    uint32_t count = 0;
    TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &values[count++]));
    int nodes = 5 + (int)(ty_test_rng_next(&rng) % 40);
    for (int n = 0; n < nodes && count < 64; ++n) {
      ty_value_id_t in[2] = {values[ty_test_rng_next(&rng) % count],
                             values[ty_test_rng_next(&rng) % count]};
      const char *op = ty_test_rng_next(&rng) % 2 ? "add" : "mul";
      TY_EXPECT_OK(ty_graph_add_node1(g, op, in, 2, NULL, &values[count++]));
    }
    TY_EXPECT_OK(ty_graph_set_output(g, values[count - 1], "y"));
    planned_t p;
    plan_graph(g, &p);
    check_no_overlap(&p);
    assert_true(p.plan.arena_bytes <= p.plan.naive_bytes);
    planned_free(&p);
    ty_graph_destroy(g);
  }
}

static void test_chain_reuses_memory(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t v;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &v));
  for (int i = 0; i < 20; ++i) TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &v, 1, NULL, &v));
  TY_EXPECT_OK(ty_graph_set_output(g, v, "y"));
  planned_t p;
  plan_graph(g, &p);
  check_no_overlap(&p);
  /* 19 intermediates of 4 KiB in a chain need only two live at a time. */
  assert_int_equal(p.plan.naive_bytes, 19 * 4096);
  assert_int_equal(p.plan.arena_bytes, 2 * 4096);
  planned_free(&p);
  ty_graph_destroy(g);
}

/* g_i = gelu(x_i) then y_i = all_reduce(g_i) for i = 0..3, the all_reduce
 * nodes consecutive (a train step's gradients): a backend launches them as
 * one NCCL group, so every g_i must stay live until the last all_reduce
 * (else y_1 could take g_0's bytes while the group still reads g_0). */
/* A fused node's outputs are placed where its command runs: node 3 (gelu of
 * c) fused into node 1 must not share bytes with b, which is read by node 2
 * (between them) and dead by node 3, nor with anything live at node 1. The
 * same graph without fusion does reuse b's bytes for node 3's output (the
 * planner reuses what it may), so the test tells the two apart. */
static void test_fused_outputs_placed_where_they_run(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t x, a, b, c, y, z;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &b)); /* node 0 */
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &a)); /* node 1 */
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &b, 1, NULL, &c)); /* node 2: b's last use */
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &a, 1, NULL, &y)); /* node 3: fused into 1 */
  ty_value_id_t in[2] = {c, y};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &z)); /* node 4 */
  TY_EXPECT_OK(ty_graph_set_output(g, z, "z"));
  planned_t p;
  plan_graph(g, &p);
  const ty_abi_graph_t *ag = &p.owned->graph;
  assert_int_equal(ag->node_count, 5);
  const uint32_t vb = ag->nodes[0].outputs[0], vy = ag->nodes[3].outputs[0];
  const uint32_t va = ag->nodes[1].outputs[0];
  /* unfused: y may take b's bytes (b is dead after node 2) */
  assert_int_equal(p.plan.storage[vy].offset, p.plan.storage[vb].offset);
  ty_memory_plan_free(&p.plan);
  const uint32_t run_at[5] = {0, 1, 2, 1, 4};
  assert_int_equal(ty_memory_plan_build_fused(p.owned, 64, run_at, &p.plan), TY_CODE_OK);
  uint32_t vals[3] = {vb, va, ag->nodes[2].outputs[0]};
  for (int i = 0; i < 3; ++i) {
    if (bytes_overlap(&p, vy, vals[i])) fail_msg("fused output %u overlaps value %u", vy, vals[i]);
  }
  planned_free(&p);
  ty_graph_destroy(g);
}

/* A node deferred to a later command (run_at > n) keeps its inputs live
 * until then: d (node 2) may take b's bytes when node 1 runs on its own,
 * not when node 1's work (reading b) is done by node 3's command. */
static void test_deferred_node_keeps_its_inputs(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t x, b, c, dv, e, z;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &b));  /* node 0 */
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &b, 1, NULL, &c));  /* node 1: deferred to 3 */
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &dv)); /* node 2 */
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &c, 1, NULL, &e));  /* node 3 */
  ty_value_id_t in[2] = {dv, e};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &z)); /* node 4 */
  TY_EXPECT_OK(ty_graph_set_output(g, z, "z"));
  planned_t p;
  plan_graph(g, &p);
  const ty_abi_graph_t *ag = &p.owned->graph;
  assert_int_equal(ag->node_count, 5);
  const uint32_t vb = ag->nodes[0].outputs[0], vd = ag->nodes[2].outputs[0];
  assert_int_equal(p.plan.storage[vd].offset, p.plan.storage[vb].offset);
  ty_memory_plan_free(&p.plan);
  const uint32_t run_at[5] = {0, 3, 2, 3, 4};
  assert_int_equal(ty_memory_plan_build_fused(p.owned, 64, run_at, &p.plan), TY_CODE_OK);
  if (bytes_overlap(&p, vd, vb)) fail_msg("node 2's output overlaps the deferred node's input");
  planned_free(&p);
  ty_graph_destroy(g);
}

static void test_all_reduce_run_is_one_group(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t x, gs[4], ys[4];
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  for (int i = 0; i < 4; ++i) TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &gs[i]));
  for (int i = 0; i < 4; ++i) {
    TY_EXPECT_OK(ty_graph_add_node1(g, "all_reduce", &gs[i], 1, NULL, &ys[i]));
  }
  ty_value_id_t sum = ys[0];
  for (int i = 1; i < 4; ++i) {
    ty_value_id_t in[2] = {sum, ys[i]};
    TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &sum));
  }
  TY_EXPECT_OK(ty_graph_set_output(g, sum, "y"));
  planned_t p;
  plan_graph(g, &p);
  check_no_overlap(&p);
  const ty_abi_graph_t *ag = &p.owned->graph;
  uint32_t first = UINT32_MAX, last = 0;
  for (uint32_t n = 0; n < ag->node_count; ++n) {
    if (strcmp(ag->nodes[n].op, "all_reduce")) continue;
    first = n < first ? n : first;
    last = n;
  }
  assert_int_equal(last - first, 3);
  /* no output of the group shares bytes with any input of the group */
  for (uint32_t a = first; a <= last; ++a) {
    uint32_t out = ag->nodes[a].outputs[0];
    if (p.plan.storage[out].kind != TY_STORAGE_ARENA) continue;
    for (uint32_t b = first; b <= last; ++b) {
      uint32_t in = ag->nodes[b].inputs[0];
      if (p.plan.storage[in].kind != TY_STORAGE_ARENA) continue;
      if (bytes_overlap(&p, out, in)) {
        fail_msg("all_reduce output %u overlaps group input %u", out, in);
      }
    }
  }
  planned_free(&p);
  ty_graph_destroy(g);
}

static ty_value_id_t reshape(ty_graph_t *g, ty_value_id_t x, int64_t d0, int64_t d1) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  int64_t shape[2] = {d0, d1};
  TY_EXPECT_OK(ty_attrs_set_ints(&a, "shape", shape, 2));
  ty_value_id_t y;
  TY_EXPECT_OK(ty_graph_add_node1(g, "reshape", &x, 1, &a, &y));
  return y;
}

static ty_value_id_t cast(ty_graph_t *g, ty_value_id_t x, const char *dtype) {
  ty_attrs_t a = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_string(&a, "dtype", dtype));
  ty_value_id_t y;
  TY_EXPECT_OK(ty_graph_add_node1(g, "cast", &x, 1, &a, &y));
  return y;
}

/* a = gelu(x); b = reshape(a); c = reshape(b); while c waits, other values
 * come and go; d = c + f. a's bytes must outlive every reader of b and c. */
static void test_reshape_is_a_view(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t x, a, e, f, out;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &a));
  ty_value_id_t b = reshape(g, a, 32, 32);
  e = b;
  for (int i = 0; i < 4; ++i) TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &e, 1, NULL, &e));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &e, 1, NULL, &f));
  ty_value_id_t c = reshape(g, b, 64, 16);
  ty_value_id_t fr = reshape(g, f, 64, 16);
  ty_value_id_t in[2] = {c, fr};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &out));
  ty_value_id_t xr = reshape(g, x, 16, 64); /* a view of an input */
  TY_EXPECT_OK(ty_graph_set_output(g, out, "y"));
  TY_EXPECT_OK(ty_graph_set_output(g, reshape(g, xr, 64, 16), "x_again"));
  planned_t p;
  plan_graph(g, &p);
  check_no_overlap(&p);
  const ty_abi_graph_t *ag = &p.owned->graph;
  uint32_t views = 0, skipped = 0;
  for (uint32_t n = 0; n < ag->node_count; ++n) {
    const ty_abi_node_t *node = &ag->nodes[n];
    if (strcmp(node->op, "reshape") != 0) {
      assert_false(p.plan.skip[n]);
      continue;
    }
    const ty_value_storage_t *st = &p.plan.storage[node->outputs[0]];
    if (ag->values[node->outputs[0]].flags & TY_VALUE_FLAG_OUTPUT) {
      /* an output is written into the caller's buffer: a copy */
      assert_int_equal(st->kind, TY_STORAGE_BOUND);
      assert_false(p.plan.skip[n]);
      continue;
    }
    assert_int_equal(st->kind, TY_STORAGE_VIEW);
    assert_true(p.plan.skip[n]);
    ++views;
    skipped += p.plan.skip[n];
    /* the root: the gelu output, f, or the input x */
    uint32_t root = st->alias, producer = p.owned->producer[root];
    assert_true(producer == UINT32_MAX ? ag->values[root].role == TY_VALUE_INPUT
                                       : strcmp(ag->nodes[producer].op, "gelu") == 0);
  }
  assert_int_equal(views, 4); /* b, c, fr, xr */
  assert_int_equal(skipped, 4);
  planned_free(&p);
  ty_graph_destroy(g);
}

/* The lowered index of builder value v (lowering drops unread values, so
 * ids may shift). */
static uint32_t lv(const planned_t *p, ty_value_id_t v) {
  const uint32_t i = ty_lowered_graph_index(p->lowered, v);
  assert_int_not_equal(i, TY_VALUE_NONE);
  return i;
}

/* Plans p->owned again with reuse_input[node] = input and the given extra
 * reads (per node, UINT32_MAX = none; NULL: none). */
static void replan(planned_t *p, uint32_t node, int32_t input, const uint32_t *extra_read) {
  const uint32_t nn = p->owned->graph.node_count;
  int32_t *reuse = malloc(nn * sizeof(int32_t));
  assert_non_null(reuse);
  for (uint32_t n = 0; n < nn; ++n) reuse[n] = n == node ? input : -1;
  ty_memory_plan_free(&p->plan);
  const ty_memory_plan_opts_t opts = {.reuse_input = reuse, .extra_read = extra_read};
  assert_int_equal(ty_memory_plan_build_opts(p->owned, 64, &opts, &p->plan), TY_CODE_OK);
  free(reuse);
  check_no_overlap(p);
}

/* a = gelu(x); b = gelu(a) offered a's bytes; c = gelu(reshape(b)): a is
 * dead after b's node, so b takes its bytes as a view of a (the node still
 * runs), the reshape of b follows to a, and a lives until c reads it. */
static void test_reuse_taken_when_safe(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t x, a, b, c, e;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &a));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &a, 1, NULL, &b));
  ty_value_id_t br = reshape(g, b, 32, 32);
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &e)); /* wants fresh bytes */
  ty_value_id_t in[2] = {br, reshape(g, e, 32, 32)};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &c));
  TY_EXPECT_OK(ty_graph_set_output(g, c, "c"));
  planned_t p;
  plan_graph(g, &p);
  a = lv(&p, a), b = lv(&p, b), br = lv(&p, br), e = lv(&p, e);
  assert_int_equal(p.plan.storage[b].kind, TY_STORAGE_ARENA);
  const uint32_t nb = p.owned->producer[b];
  replan(&p, nb, 0, NULL);
  assert_true(p.plan.in_place[nb]);
  assert_false(p.plan.skip[nb]);
  assert_int_equal(p.plan.storage[b].kind, TY_STORAGE_VIEW);
  assert_int_equal(p.plan.storage[b].alias, a);
  assert_int_equal(p.plan.storage[br].kind, TY_STORAGE_VIEW);
  assert_int_equal(p.plan.storage[br].alias, a);
  /* e is placed while br (a's bytes) waits for the add */
  if (bytes_overlap(&p, e, a)) fail_msg("e overlaps a, which b and its view still hold");
  for (uint32_t n = 0; n < p.owned->graph.node_count; ++n) {
    if (n != nb) assert_false(p.plan.in_place[n]);
  }
  planned_free(&p);
  ty_graph_destroy(g);
}

/* The offer refused: a read after the node (directly or through a view),
 * an output of another size, an output the caller binds, a state update's
 * value. Each case also plans without the offer's effect: b stays ARENA. */
static void test_reuse_refused_when_unsafe(void **state) {
  (void)state;
  for (int kind = 0; kind < 5; ++kind) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t d[1] = {1024};
    ty_value_id_t x, a, b, c, s = TY_VALUE_NONE;
    TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
    if (kind == 4) TY_EXPECT_OK(ty_graph_add_state(g, "s", TY_DTYPE_F32, 1, d, &s));
    TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &a));
    const ty_value_id_t ar = reshape(g, a, 32, 32);
    if (kind == 2) {
      b = cast(g, a, "f16");
    } else {
      TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &a, 1, NULL, &b));
    }
    ty_value_id_t in[2] = {b, a};
    if (kind == 0) { /* a read after b's node */
      TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &c));
    } else if (kind == 1) { /* a read after it through a view */
      TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &ar, 1, NULL, &c));
      TY_EXPECT_OK(ty_graph_set_output(g, c, "c2"));
      TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &b, 1, NULL, &c));
    } else {
      TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &b, 1, NULL, &c));
    }
    TY_EXPECT_OK(ty_graph_set_output(g, c, "c"));
    if (kind == 3) TY_EXPECT_OK(ty_graph_set_output(g, b, "b")); /* bound by the caller */
    if (kind == 4) TY_EXPECT_OK(ty_graph_set_state_update(g, s, b));
    planned_t p;
    plan_graph(g, &p);
    b = lv(&p, b);
    const uint32_t nb = p.owned->producer[b];
    replan(&p, nb, 0, NULL);
    assert_string_equal(p.owned->graph.nodes[nb].op, kind == 2 ? "cast" : "gelu");
    if (p.plan.in_place[nb]) fail_msg("case %d: the offer was taken", kind);
    assert_int_not_equal(p.plan.storage[b].kind, TY_STORAGE_VIEW);
    planned_free(&p);
    ty_graph_destroy(g);
  }
}

/* b = gelu(x) is last read by node c = gelu(b), then d = gelu(x), then
 * z = d + c: unplanned, d may take b's bytes. With z's command reading b
 * as an extra value, b lives until z: d lands elsewhere, and an offer of
 * b's bytes to c is refused (b is read after c's node). */
static void test_extra_read_extends_liveness(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {1024};
  ty_value_id_t x, b, c, dv, z;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 1, d, &x));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &b));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &b, 1, NULL, &c));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &x, 1, NULL, &dv));
  ty_value_id_t in[2] = {dv, c};
  TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &z));
  TY_EXPECT_OK(ty_graph_set_output(g, z, "z"));
  planned_t p;
  plan_graph(g, &p);
  b = lv(&p, b), c = lv(&p, c), dv = lv(&p, dv), z = lv(&p, z);
  assert_true(bytes_overlap(&p, dv, b));
  const uint32_t nn = p.owned->graph.node_count, nc = p.owned->producer[c];
  uint32_t *extra = malloc(nn * sizeof(uint32_t));
  assert_non_null(extra);
  for (uint32_t n = 0; n < nn; ++n) extra[n] = UINT32_MAX;
  replan(&p, nc, 0, extra); /* no extra read: c takes b's bytes */
  assert_true(p.plan.in_place[nc]);
  extra[p.owned->producer[z]] = b;
  replan(&p, nc, 0, extra);
  assert_false(p.plan.in_place[nc]);
  if (bytes_overlap(&p, dv, b)) fail_msg("d took the bytes of b, which z's command still reads");
  free(extra);
  planned_free(&p);
  ty_graph_destroy(g);
}

static void build_sgd(ty_graph_t *g, bool read_param_after) {
  int64_t d[1] = {8};
  ty_value_id_t w, grad, buf, lr, mom, wd, out[2], extra;
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 1, d, &w));
  TY_EXPECT_OK(ty_graph_add_state(g, "buf", TY_DTYPE_F32, 1, d, &buf));
  TY_EXPECT_OK(ty_graph_add_input(g, "grad", TY_DTYPE_F32, 1, d, &grad));
  TY_EXPECT_OK(ty_graph_add_input(g, "lr", TY_DTYPE_F32, 0, NULL, &lr));
  TY_EXPECT_OK(ty_graph_add_input(g, "momentum", TY_DTYPE_F32, 0, NULL, &mom));
  TY_EXPECT_OK(ty_graph_add_input(g, "wd", TY_DTYPE_F32, 0, NULL, &wd));
  ty_value_id_t in[6] = {w, grad, buf, lr, mom, wd};
  TY_EXPECT_OK(ty_graph_add_node(g, "sgd_update", in, 6, NULL, out, 2));
  TY_EXPECT_OK(ty_graph_set_state_update(g, w, out[0]));
  TY_EXPECT_OK(ty_graph_set_state_update(g, buf, out[1]));
  if (read_param_after) {
    /* Reading the old weights after the update forbids writing in place. */
    TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &w, 1, NULL, &extra));
    TY_EXPECT_OK(ty_graph_set_output(g, extra, "old_w_gelu"));
  }
}

/* The old weights read through a reshape after the update: no in place. */
static void test_update_not_in_place_when_a_view_reads_later(void **state) {
  (void)state;
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t d[1] = {8};
  ty_value_id_t w, grad, lr, wd, mom, buf, out[2], later;
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 1, d, &w));
  TY_EXPECT_OK(ty_graph_add_state(g, "buf", TY_DTYPE_F32, 1, d, &buf));
  TY_EXPECT_OK(ty_graph_add_input(g, "grad", TY_DTYPE_F32, 1, d, &grad));
  TY_EXPECT_OK(ty_graph_add_input(g, "lr", TY_DTYPE_F32, 0, NULL, &lr));
  TY_EXPECT_OK(ty_graph_add_input(g, "momentum", TY_DTYPE_F32, 0, NULL, &mom));
  TY_EXPECT_OK(ty_graph_add_input(g, "wd", TY_DTYPE_F32, 0, NULL, &wd));
  ty_value_id_t wr = reshape(g, w, 2, 4); /* before the update ... */
  ty_value_id_t in[6] = {w, grad, buf, lr, mom, wd};
  TY_EXPECT_OK(ty_graph_add_node(g, "sgd_update", in, 6, NULL, out, 2));
  TY_EXPECT_OK(ty_graph_set_state_update(g, w, out[0]));
  TY_EXPECT_OK(ty_graph_set_state_update(g, buf, out[1]));
  TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &wr, 1, NULL, &later)); /* ... read after */
  TY_EXPECT_OK(ty_graph_set_output(g, later, "old_w_gelu"));
  planned_t p;
  plan_graph(g, &p);
  check_no_overlap(&p);
  /* the lowered graph keeps the builder's value ids */
  assert_string_equal(p.owned->graph.nodes[p.owned->producer[wr]].op, "reshape");
  assert_string_equal(p.owned->graph.nodes[p.owned->producer[out[0]]].op, "sgd_update");
  assert_int_equal(p.plan.storage[wr].kind, TY_STORAGE_VIEW);
  assert_int_equal(p.plan.storage[wr].alias, w);
  assert_int_equal(p.plan.storage[out[0]].kind, TY_STORAGE_ARENA);
  assert_int_equal(p.plan.storage[out[1]].kind, TY_STORAGE_STATE_ALIAS);
  assert_int_equal(p.plan.copy_count, 1);
  planned_free(&p);
  ty_graph_destroy(g);
}

static void test_optimizer_updates_in_place_only_when_safe(void **state) {
  (void)state;
  for (int read_after = 0; read_after < 2; ++read_after) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    build_sgd(g, read_after);
    planned_t p;
    plan_graph(g, &p);
    check_no_overlap(&p);
    const ty_abi_graph_t *ag = &p.owned->graph;
    uint32_t sgd = 0;
    while (strcmp(ag->nodes[sgd].op, "sgd_update") != 0) ++sgd;
    uint32_t new_w = ag->nodes[sgd].outputs[0], new_buf = ag->nodes[sgd].outputs[1];
    assert_int_equal(p.plan.storage[new_buf].kind, TY_STORAGE_STATE_ALIAS);
    if (read_after) {
      assert_int_equal(p.plan.storage[new_w].kind, TY_STORAGE_ARENA);
      assert_int_equal(p.plan.copy_count, 1);
    } else {
      assert_int_equal(p.plan.storage[new_w].kind, TY_STORAGE_STATE_ALIAS);
      assert_int_equal(p.plan.copy_count, 0);
    }
    planned_free(&p);
    ty_graph_destroy(g);
  }
}

/* A KV-cache write whose new cache is read afterwards (attention reads it
 * right after the write): still in place, with no copy of the cache. */
static void test_cache_write_in_place_when_the_new_cache_is_read(void **state) {
  (void)state;
  int64_t cache_dims[4] = {1, 16, 2, 4}, new_dims[4] = {1, 1, 2, 4};
  ty_value_id_t cache, fresh, pos, written, read, old_read;
  for (int old_read_after = 0; old_read_after < 2; ++old_read_after) {
    ty_graph_t *h;
    TY_EXPECT_OK(ty_graph_create(&h));
    TY_EXPECT_OK(ty_graph_add_state(h, "cache", TY_DTYPE_F32, 4, cache_dims, &cache));
    TY_EXPECT_OK(ty_graph_add_input(h, "new", TY_DTYPE_F32, 4, new_dims, &fresh));
    TY_EXPECT_OK(ty_graph_add_input(h, "pos", TY_DTYPE_I64, 0, NULL, &pos));
    ty_value_id_t in[3] = {cache, fresh, pos};
    TY_EXPECT_OK(ty_graph_add_node1(h, "kv_cache_write", in, 3, NULL, &written));
    TY_EXPECT_OK(ty_graph_set_state_update(h, cache, written));
    ty_value_id_t wr = reshape(h, written, 8, 16); /* read through a view too */
    TY_EXPECT_OK(ty_graph_add_node1(h, "gelu", &wr, 1, NULL, &read));
    TY_EXPECT_OK(ty_graph_set_output(h, read, "after"));
    if (old_read_after) {
      TY_EXPECT_OK(ty_graph_add_node1(h, "gelu", &cache, 1, NULL, &old_read));
      TY_EXPECT_OK(ty_graph_set_output(h, old_read, "before"));
    }
    planned_t p;
    plan_graph(h, &p);
    check_no_overlap(&p);
    assert_int_equal(p.plan.storage[written].kind,
                     old_read_after ? TY_STORAGE_ARENA : TY_STORAGE_STATE_ALIAS);
    assert_int_equal(p.plan.copy_count, old_read_after ? 1 : 0);
    planned_free(&p);
    ty_graph_destroy(h);
  }
}

/* A paged pool write is an in-place state update too (issue 29): the pool
 * is big and a step writes a few rows of it, so pool' lives in pool's
 * storage, with no copy, while paged_attention reads it right after. */
static void test_paged_pool_write_in_place(void **state) {
  (void)state;
  int64_t pool_dims[4] = {8, 4, 2, 4}, new_dims[3] = {3, 2, 4}, slot_dims[1] = {3};
  int64_t q_dims[3] = {3, 2, 4}, table_dims[2] = {2, 4};
  ty_value_id_t pool, fresh, slots, written, q, table, seq, pos, out;
  ty_graph_t *h;
  TY_EXPECT_OK(ty_graph_create(&h));
  TY_EXPECT_OK(ty_graph_add_state(h, "pool", TY_DTYPE_F32, 4, pool_dims, &pool));
  TY_EXPECT_OK(ty_graph_add_input(h, "new", TY_DTYPE_F32, 3, new_dims, &fresh));
  TY_EXPECT_OK(ty_graph_add_input(h, "slots", TY_DTYPE_I64, 1, slot_dims, &slots));
  TY_EXPECT_OK(ty_graph_add_input(h, "q", TY_DTYPE_F32, 3, q_dims, &q));
  TY_EXPECT_OK(ty_graph_add_input(h, "table", TY_DTYPE_I64, 2, table_dims, &table));
  TY_EXPECT_OK(ty_graph_add_input(h, "seq", TY_DTYPE_I64, 1, slot_dims, &seq));
  TY_EXPECT_OK(ty_graph_add_input(h, "pos", TY_DTYPE_I64, 1, slot_dims, &pos));
  ty_value_id_t in[3] = {pool, fresh, slots};
  TY_EXPECT_OK(ty_graph_add_node1(h, "paged_kv_write", in, 3, NULL, &written));
  TY_EXPECT_OK(ty_graph_set_state_update(h, pool, written));
  ty_value_id_t att[6] = {q, written, written, table, seq, pos};
  TY_EXPECT_OK(ty_graph_add_node1(h, "paged_attention", att, 6, NULL, &out));
  TY_EXPECT_OK(ty_graph_set_output(h, out, "out"));
  planned_t p;
  plan_graph(h, &p);
  check_no_overlap(&p);
  assert_int_equal(p.plan.storage[written].kind, TY_STORAGE_STATE_ALIAS);
  assert_int_equal(p.plan.copy_count, 0);
  planned_free(&p);
  ty_graph_destroy(h);
}

/* A gradient accumulator's acc + grad (the train step's ACCUMULATE mode):
 * the sum goes into the state's buffer when the add has no broadcast and
 * nothing reads the old accumulator after it; a broadcast add, a later
 * reader of the old value or the state as both operands keep the copy. */
static void test_accumulator_add_in_place_only_when_safe(void **state) {
  (void)state;
  /* c == 0: the old value read after the add; 1: a broadcast row; 2:
   * grad + acc; 3: acc + acc; 4: acc + grad with nothing else */
  for (int c = 0; c < 5; ++c) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t d[2] = {4, 8}, row[2] = {1, 8};
    ty_value_id_t acc, grad, sum, later;
    TY_EXPECT_OK(ty_graph_add_state(g, "acc", TY_DTYPE_F32, 2, d, &acc));
    TY_EXPECT_OK(ty_graph_add_input(g, "grad", TY_DTYPE_F32, 2, c == 1 ? row : d, &grad));
    ty_value_id_t in[2] = {c == 2 ? grad : acc, c == 3 || c == 2 ? acc : grad};
    TY_EXPECT_OK(ty_graph_add_node1(g, "add", in, 2, NULL, &sum));
    TY_EXPECT_OK(ty_graph_set_state_update(g, acc, sum));
    if (c == 0) { /* the old value read after the add: not in place */
      TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &acc, 1, NULL, &later));
      TY_EXPECT_OK(ty_graph_set_output(g, later, "old_acc_gelu"));
    }
    planned_t p;
    plan_graph(g, &p);
    check_no_overlap(&p);
    /* in place with the state as either operand and nothing else */
    const bool in_place = c == 2 || c == 4;
    assert_int_equal(p.plan.storage[sum].kind,
                     in_place ? TY_STORAGE_STATE_ALIAS : TY_STORAGE_ARENA);
    if (in_place) assert_int_equal(p.plan.storage[sum].alias, acc);
    assert_int_equal(p.plan.copy_count, in_place ? 0 : 1);
    planned_free(&p);
    ty_graph_destroy(g);
  }
}

/* The optimizer step's graph (ty_graph_build_optimizer_step_ex): the
 * accumulators are clipped, the updates read the clipped copies, and the
 * accumulators are reset to a broadcast zero. The clipped copies live in
 * their accumulators' buffers (scratch: the old value's last reader made
 * them, the reset comes after their last reader) and the zeros are written
 * straight into them: no arena at all, no end-of-graph copy. With a reader
 * of an old accumulator after the reset, that accumulator's clipped copy
 * and zeros stay in the arena, and the zeros are copied at the end. */
static void test_optimizer_step_uses_the_accumulators(void **state) {
  (void)state;
  for (int read_after = 0; read_after < 2; ++read_after) {
    ty_graph_t *g;
    TY_EXPECT_OK(ty_graph_create(&g));
    int64_t d[2][2] = {{4, 8}, {8, 2}};
    ty_value_id_t w[2], acc[2], lr, wd, mom, max_norm, buf[2];
    TY_EXPECT_OK(ty_graph_add_input(g, "lr", TY_DTYPE_F32, 0, NULL, &lr));
    TY_EXPECT_OK(ty_graph_add_input(g, "momentum", TY_DTYPE_F32, 0, NULL, &mom));
    TY_EXPECT_OK(ty_graph_add_input(g, "wd", TY_DTYPE_F32, 0, NULL, &wd));
    TY_EXPECT_OK(ty_graph_add_input(g, "max_norm", TY_DTYPE_F32, 0, NULL, &max_norm));
    for (int i = 0; i < 2; ++i) {
      char name[16];
      snprintf(name, sizeof(name), "w%d", i);
      TY_EXPECT_OK(ty_graph_add_state(g, name, TY_DTYPE_F32, 2, d[i], &w[i]));
      snprintf(name, sizeof(name), "acc%d", i);
      TY_EXPECT_OK(ty_graph_add_state(g, name, TY_DTYPE_F32, 2, d[i], &acc[i]));
      snprintf(name, sizeof(name), "buf%d", i);
      TY_EXPECT_OK(ty_graph_add_state(g, name, TY_DTYPE_F32, 2, d[i], &buf[i]));
    }
    ty_value_id_t clip_in[3] = {max_norm, acc[0], acc[1]}, clip_out[3];
    TY_EXPECT_OK(ty_graph_add_node(g, "clip_by_global_norm", clip_in, 3, NULL, clip_out, 3));
    TY_EXPECT_OK(ty_graph_set_output(g, clip_out[0], "grad_norm"));
    for (int i = 0; i < 2; ++i) {
      ty_value_id_t in[6] = {w[i], clip_out[1 + i], buf[i], lr, mom, wd}, out[2];
      TY_EXPECT_OK(ty_graph_add_node(g, "sgd_update", in, 6, NULL, out, 2));
      TY_EXPECT_OK(ty_graph_set_state_update(g, w[i], out[0]));
      TY_EXPECT_OK(ty_graph_set_state_update(g, buf[i], out[1]));
    }
    ty_value_id_t zeros[2];
    for (int i = 0; i < 2; ++i) {
      TY_EXPECT_OK(ty_graph_add_filled(g, TY_DTYPE_F32, 2, d[i], 0.0, &zeros[i]));
      TY_EXPECT_OK(ty_graph_set_state_update(g, acc[i], zeros[i]));
    }
    if (read_after) { /* the old acc1 read after the updates and the reset */
      ty_value_id_t later;
      TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &acc[1], 1, NULL, &later));
      TY_EXPECT_OK(ty_graph_set_output(g, later, "old_acc1_gelu"));
    }
    planned_t p;
    plan_graph(g, &p);
    check_no_overlap(&p);
    for (int i = 0; i < 2; ++i) {
      const bool kept = read_after && i == 1;
      assert_int_equal(p.plan.storage[clip_out[1 + i]].kind,
                       kept ? TY_STORAGE_ARENA : TY_STORAGE_STATE_ALIAS);
      /* the reset: in place unless the old value is read after it */
      assert_int_equal(p.plan.storage[zeros[i]].kind,
                       kept ? TY_STORAGE_ARENA : TY_STORAGE_STATE_ALIAS);
      if (!kept) assert_int_equal(p.plan.storage[zeros[i]].alias, acc[i]);
    }
    assert_int_equal(p.plan.copy_count, read_after ? 1 : 0);
    if (!read_after) assert_int_equal(p.plan.arena_bytes, 0);
    planned_free(&p);
    ty_graph_destroy(g);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_optimizer_step_uses_the_accumulators),
      cmocka_unit_test(test_accumulator_add_in_place_only_when_safe),
      cmocka_unit_test(test_cache_write_in_place_when_the_new_cache_is_read),
      cmocka_unit_test(test_paged_pool_write_in_place),
      cmocka_unit_test(test_random_graphs),
      cmocka_unit_test(test_chain_reuses_memory),
      cmocka_unit_test(test_all_reduce_run_is_one_group),
      cmocka_unit_test(test_fused_outputs_placed_where_they_run),
      cmocka_unit_test(test_deferred_node_keeps_its_inputs),
      cmocka_unit_test(test_optimizer_updates_in_place_only_when_safe),
      cmocka_unit_test(test_reshape_is_a_view),
      cmocka_unit_test(test_update_not_in_place_when_a_view_reads_later),
      cmocka_unit_test(test_reuse_taken_when_safe),
      cmocka_unit_test(test_reuse_refused_when_unsafe),
      cmocka_unit_test(test_extra_read_extends_liveness),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
