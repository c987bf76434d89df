/* Autodiff of chunk-tagged pieces (graph.h ty_graph_set_chunk; the chunked
 * MLP of models/llm.c): x [1, 5, 3] cut along axis 1 into pieces of 2, 2
 * and 1 tokens, each piece's slice, matmul and gelu tagged with its chunk,
 * joined by an untagged concat, all inside one block region.
 *  - The gradient of x is one concat of the pieces' gradients: no
 *    slice_backward and no add is emitted for it; untagged slices that
 *    tile x likewise (GPT-2's c_attn weight cut into q, k and v).
 *  - Pieces that do not tile x (a token left out) keep slice_backward.
 *  - Under TY_RECOMPUTE_LAYER each piece is copied just before its own
 *    backward (gelu copy, gelu_backward, alternating, last piece first),
 *    and the forward's concat is not copied (nothing reads it).
 *  - Without chunk tags the same graph recomputes every piece at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "graph/ir/autodiff.h"
#include "graph/ir/graph.h"

typedef struct {
  ty_graph_t *g;
  ty_value_id_t x, w, loss;
  uint32_t forward_nodes;
  ty_value_id_t grads[2];
} built_t;

/* pieces of [starts[i], starts[i] + sizes[i]) of axis 1; tagged: chunk tags */
static void build(const int64_t *starts, const int64_t *sizes, int count, bool tagged,
                  ty_recompute_t recompute, built_t *out) {
  ty_graph_t *g;
  TY_EXPECT_OK(ty_graph_create(&g));
  int64_t xd[3] = {1, 5, 3}, wd[2] = {3, 4};
  ty_value_id_t x, w, ys[8], y, loss;
  TY_EXPECT_OK(ty_graph_add_input(g, "x", TY_DTYPE_F32, 3, xd, &x));
  TY_EXPECT_OK(ty_graph_add_state(g, "w", TY_DTYPE_F32, 2, wd, &w));
  ty_graph_set_region(g, TY_REGION(0, TY_REGION_MLP));
  for (int i = 0; i < count; ++i) {
    if (tagged) ty_graph_set_chunk(g, (uint32_t)i + 1);
    ty_attrs_t a = TY_ATTRS_EMPTY;
    int64_t st[3] = {0, starts[i], 0}, sz[3] = {1, sizes[i], 3};
    TY_EXPECT_OK(ty_attrs_set_ints(&a, "starts", st, 3));
    TY_EXPECT_OK(ty_attrs_set_ints(&a, "sizes", sz, 3));
    ty_value_id_t piece, h;
    TY_EXPECT_OK(ty_graph_add_node1(g, "slice", &x, 1, &a, &piece));
    ty_value_id_t in[2] = {piece, w};
    TY_EXPECT_OK(ty_graph_add_node1(g, "matmul", in, 2, NULL, &h));
    TY_EXPECT_OK(ty_graph_add_node1(g, "gelu", &h, 1, NULL, &ys[i]));
  }
  ty_graph_set_chunk(g, 0);
  ty_attrs_t ca = TY_ATTRS_EMPTY;
  TY_EXPECT_OK(ty_attrs_set_int(&ca, "axis", 1));
  TY_EXPECT_OK(ty_graph_add_node1(g, "concat", ys, (uint32_t)count, &ca, &y));
  ty_graph_set_region(g, 0);
  TY_EXPECT_OK(ty_graph_add_node1(g, "reduce_sum", &y, 1, NULL, &loss));
  out->g = g;
  out->x = x;
  out->w = w;
  out->loss = loss;
  out->forward_nodes = ty_graph_node_count(g);
  ty_value_id_t wrt[2] = {x, w};
  ty_autodiff_options_t opt = {.recompute = recompute};
  TY_EXPECT_OK(ty_graph_autodiff_ex(g, loss, TY_VALUE_NONE, wrt, 2, &opt, out->grads));
}

/* Backward nodes (after the forward) with op `op`. */
static int count_ops(const built_t *b, const char *op) {
  int n = 0;
  for (uint32_t i = b->forward_nodes; i < ty_graph_node_count(b->g); ++i) {
    n += strcmp(ty_graph_node(b->g, i)->op, op) == 0;
  }
  return n;
}

static const char *producer_op(const built_t *b, ty_value_id_t v) {
  uint32_t p = ty_graph_value(b->g, v)->producer;
  return p == UINT32_MAX ? "" : ty_graph_node(b->g, p)->op;
}

static const int64_t kStarts[3] = {0, 2, 4}, kSizes[3] = {2, 2, 1};

static void test_tiled_gradient_is_one_concat(void **state) {
  (void)state;
  built_t b;
  build(kStarts, kSizes, 3, true, TY_RECOMPUTE_NONE, &b);
  assert_string_equal(producer_op(&b, b.grads[0]), "concat");
  assert_int_equal(count_ops(&b, "slice_backward"), 0);
  assert_int_equal(count_ops(&b, "concat"), 1);
  const ty_graph_node_t *c = ty_graph_node(b.g, ty_graph_value(b.g, b.grads[0])->producer);
  assert_int_equal(c->input_count, 3);
  /* in order along the axis: the pieces' gradients are [1,2,3],[1,2,3],[1,1,3] */
  assert_int_equal(ty_graph_value(b.g, c->inputs[0])->desc.dims[1], 2);
  assert_int_equal(ty_graph_value(b.g, c->inputs[2])->desc.dims[1], 1);
  ty_graph_destroy(b.g);
  /* the same pieces untagged: one concat too */
  build(kStarts, kSizes, 3, false, TY_RECOMPUTE_NONE, &b);
  assert_int_equal(count_ops(&b, "slice_backward"), 0);
  assert_int_equal(count_ops(&b, "add"), 2); /* w's three pieces of gradient, summed */
  assert_string_equal(producer_op(&b, b.grads[0]), "concat");
  ty_graph_destroy(b.g);
}

static void test_pieces_that_do_not_tile_keep_slice_backward(void **state) {
  (void)state;
  const int64_t starts[2] = {0, 2}, sizes[2] = {2, 2}; /* token 4 left out */
  built_t b;
  build(starts, sizes, 2, true, TY_RECOMPUTE_NONE, &b);
  assert_int_equal(count_ops(&b, "slice_backward"), 2);
  assert_int_equal(count_ops(&b, "concat"), 0);
  ty_graph_destroy(b.g);
}

/* The gelu copies and gelu_backward nodes of the backward, in order, as a
 * string of 'f' (forward copy) and 'b'. */
static void gelu_order(const built_t *b, char *out) {
  int k = 0;
  for (uint32_t i = b->forward_nodes; i < ty_graph_node_count(b->g); ++i) {
    const char *op = ty_graph_node(b->g, i)->op;
    if (!strcmp(op, "gelu")) out[k++] = 'f';
    if (!strcmp(op, "gelu_backward")) out[k++] = 'b';
  }
  out[k] = '\0';
}

static void test_recompute_copies_each_piece_before_its_backward(void **state) {
  (void)state;
  built_t b;
  char order[32];
  build(kStarts, kSizes, 3, true, TY_RECOMPUTE_LAYER, &b);
  gelu_order(&b, order);
  assert_string_equal(order, "fbfbfb");
  /* only the gradient's concat: the forward's is not copied */
  assert_int_equal(count_ops(&b, "concat"), 1);
  ty_graph_destroy(b.g);
  build(kStarts, kSizes, 3, false, TY_RECOMPUTE_LAYER, &b);
  gelu_order(&b, order);
  assert_string_equal(order, "fffbbb");
  ty_graph_destroy(b.g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tiled_gradient_is_one_concat),
      cmocka_unit_test(test_pieces_that_do_not_tile_keep_slice_backward),
      cmocka_unit_test(test_recompute_copies_each_piece_before_its_backward),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
