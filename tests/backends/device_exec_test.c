/* The device-executor core of the backend support library
 * (backends/common/device_exec.h) and ty_plugin_error, through a stand-in
 * for the host's status services: binding resolve and its errors, operand
 * locations, the data-error decoder, the op lookup, the device plugins'
 * backend base (device_backend.h), and messages longer than the 1 KiB the
 * support library used to cut them at. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/common/device_backend.h"
#include "backends/common/device_errors.h"
#include "backends/common/device_exec.h"
#include "backends/common/device_ops.h"
#include "backends/common/plugin_status.h"

/* ---- a host's status services ---- */

typedef struct fake_status_t {
  ty_code_t code;
  char *message;
} fake_status_t;

static ty_abi_status_t fake_make(ty_code_t code, const char *message) {
  fake_status_t *s = malloc(sizeof(*s));
  assert_non_null(s);
  s->code = code;
  s->message = strdup(message);
  assert_non_null(s->message);
  return (ty_abi_status_t)(void *)s;
}
static void fake_free(ty_abi_status_t s) {
  if (!s) return;
  free(((fake_status_t *)(void *)s)->message);
  free((void *)s);
}
static ty_code_t fake_code(ty_abi_status_t s) { return ((fake_status_t *)(void *)s)->code; }
static const char *fake_message(ty_abi_status_t s) {
  return ((fake_status_t *)(void *)s)->message;
}

static ty_host_api_t fake_host;

static int setup(void **state) {
  (void)state;
  fake_host.struct_size = sizeof(fake_host);
  fake_host.status_make = fake_make;
  fake_host.status_free = fake_free;
  fake_host.status_code = fake_code;
  fake_host.status_message = fake_message;
  ty_plugin_status_init(&fake_host);
  return 0;
}

/* Checks code and a substring of the message, and frees the status. */
static void expect_status(ty_abi_status_t s, ty_code_t code, const char *part) {
  assert_non_null(s);
  assert_int_equal(fake_code(s), code);
  if (!strstr(fake_message(s), part)) fail_msg("'%s' lacks '%s'", fake_message(s), part);
  fake_free(s);
}

/* ---- ty_plugin_error ---- */

static void test_long_message_is_whole(void **state) {
  (void)state;
  char name[3001];
  memset(name, 'n', sizeof(name) - 1);
  name[sizeof(name) - 1] = '\0';
  ty_abi_status_t s = ty_plugin_error(TY_CODE_NOT_FOUND, "no tensor '%s' here", name);
  assert_int_equal(strlen(fake_message(s)), strlen("no tensor '' here") + 3000);
  expect_status(s, TY_CODE_NOT_FOUND, "' here");
}

/* ---- a graph: y = add(x, c), state w <- y ---- */

struct ty_abi_buffer_s {
  uint64_t base, size;
};

static const int64_t dims4[] = {4};
static const float cdata[4] = {1, 2, 3, 4};
static const uint32_t add_in[] = {0, 1}, add_out[] = {2};
static const ty_abi_value_t values[] = {
    {"x", TY_DTYPE_F32, 1, dims4, TY_VALUE_INPUT, 0, NULL},
    {"", TY_DTYPE_F32, 1, dims4, TY_VALUE_CONSTANT, 0, cdata},
    {"y", TY_DTYPE_F32, 1, dims4, TY_VALUE_INTERMEDIATE, TY_VALUE_FLAG_OUTPUT, NULL},
};
static const ty_abi_node_t nodes[] = {{"add", 2, add_in, 1, add_out, 0, NULL}};

static ty_abi_graph_t make_graph(void) {
  ty_abi_graph_t g;
  memset(&g, 0, sizeof(g));
  g.struct_size = sizeof(g);
  g.value_count = 3;
  g.values = values;
  g.node_count = 1;
  g.nodes = nodes;
  g.hash_hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  return g;
}

static void hook_buffer(void *user, ty_abi_buffer_t *b, uint64_t *base, uint64_t *size) {
  (void)user;
  *base = b->base;
  *size = b->size;
}

static ty_abi_status_t hook_unbound(void *user, uint32_t v, ty_dev_loc_t *out) {
  ty_dev_exec_t *x = user;
  out->base = 0x9000;
  out->offset = x->fallback_offset[v];
  return NULL;
}

static void run(ty_dev_exec_t *x, const ty_abi_binding_t *b, uint32_t n, ty_code_t code,
                const char *part) {
  ty_abi_execute_args_t args;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.binding_count = n;
  args.bindings = b;
  const ty_dev_hooks_t hooks = {.user = x, .buffer = hook_buffer, .unbound_output = hook_unbound};
  ty_abi_status_t s = ty_dev_exec_resolve(x, &args, &hooks);
  if (code == TY_CODE_OK) {
    if (s) fail_msg("resolve failed: %s", fake_message(s));
  } else {
    expect_status(s, code, part);
  }
}

static void test_resolve(void **state) {
  (void)state;
  ty_abi_graph_t g = make_graph();
  ty_dev_exec_t x;
  assert_null(ty_dev_exec_init(&x, &g, 256, "dev:0"));
  assert_int_equal(ty_dev_exec_find(&x, "x"), 0);
  assert_int_equal(ty_dev_exec_find(&x, "y"), 2);
  assert_int_equal(ty_dev_exec_find(&x, "z"), UINT32_MAX);
  assert_int_equal(x.const_bytes, 256);
  x.constants = 0x7000;
  ty_abi_buffer_t big = {0x1000, 64}, small = {0x2000, 8};
  /* Bound input, own constant, unbound output in the fallback. */
  ty_abi_binding_t bx = {"x", &big, 16};
  run(&x, &bx, 1, TY_CODE_OK, NULL);
  assert_int_equal(x.loc[0].base, 0x1000);
  assert_int_equal(x.loc[0].offset, 16);
  assert_int_equal(x.loc[1].base, 0x7000);
  assert_int_equal(x.loc[2].base, 0x9000);
  ty_dev_loc_t at = ty_dev_ref_loc(&x, ty_dev_ref_at(ty_dev_value(0), 4));
  assert_int_equal(at.offset, 20);
  x.base[TY_DEV_REF_ERR] = 0x5000;
  at = ty_dev_ref_loc(&x, (ty_dev_ref_t){TY_DEV_REF_ERR, 0, 99});
  assert_int_equal(at.base, 0x5000);
  assert_int_equal(at.offset, 0);
  assert_int_equal(ty_dev_ref_loc(&x, ty_dev_none()).base, 0);
  /* The errors, each naming the device and the binding. */
  ty_abi_binding_t bad_name = {"nope", &big, 0};
  run(&x, &bad_name, 1, TY_CODE_INVALID_ARGUMENT,
      "dev:0: no input, state or output named 'nope' in graph 0123456789ab");
  ty_abi_binding_t too_small = {"x", &small, 0};
  run(&x, &too_small, 1, TY_CODE_INVALID_ARGUMENT,
      "dev:0: binding 'x' needs 16 bytes at offset 0 of a 8-byte buffer");
  run(&x, NULL, 0, TY_CODE_INVALID_ARGUMENT, "dev:0: input 'x' is not bound");
  ty_dev_exec_free(&x);
}

/* ---- data errors ---- */

static void put_error(unsigned char *buf, int32_t code, int32_t node, int64_t a, int64_t b,
                      int64_t c) {
  memset(buf, 0, TY_DEVICE_ERROR_BYTES);
  memcpy(buf, &code, 4);
  memcpy(buf + 4, &node, 4);
  int64_t d[3] = {a, b, c};
  memcpy(buf + 8, d, sizeof(d));
}

static void test_data_errors(void **state) {
  (void)state;
  ty_abi_graph_t g = make_graph();
  ty_dev_exec_t x;
  assert_null(ty_dev_exec_init(&x, &g, 64, "dev:1"));
  unsigned char buf[TY_DEVICE_ERROR_BYTES];
  put_error(buf, TY_ERR_EMBEDDING_ID, 0, 5, 39, 32);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "dev:1: node 0 (add): embedding: ids[5] = 39 is outside the vocabulary [0, 32)");
  put_error(buf, TY_ERR_KV_POSITION, 0, 7, 3, 8);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "3 new positions starting at position 7 do not fit in a cache of max_len 8");
  put_error(buf, TY_ERR_PAGED_SLOT, 0, 3, 40, 40);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "paged_kv_write: row 3 writes slot 40 outside the pool's 40 slots");
  put_error(buf, TY_ERR_PAGED_ROW, 0, 5 * 4 + TY_PAGED_BAD_SEQ, -2, 3);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "paged_attention: row 5 has row_seq -2 outside [-1, 3)");
  put_error(buf, TY_ERR_PAGED_ROW, 0, 1 * 4 + TY_PAGED_BAD_POS, 64, 64);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "paged_attention: row 1 has row_pos 64 outside [0, 64)");
  put_error(buf, TY_ERR_PAGED_ROW, 0, 0 * 4 + TY_PAGED_BAD_BLOCK, 9, 9);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "paged_attention: row 0 reads block 9 outside the pool's [0, 9)");
  float m = -0.5f;
  uint32_t bits;
  memcpy(&bits, &m, 4);
  put_error(buf, TY_ERR_SGD_NESTEROV, 0, bits, 0, 0);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "sgd: nesterov needs momentum > 0 (got -0.5)");
  /* sample's bad params and history ids (the cuda kernel's data error). */
  m = 1.5f;
  memcpy(&bits, &m, 4);
  put_error(buf, TY_ERR_SAMPLE_PARAM, 0, 3, 2, bits);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "sample: row 3: top_p (in (0, 1]) is 1.5");
  put_error(buf, TY_ERR_SAMPLE_PARAM, 0, 3, 7, 50257);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "sample: row 3: history id 50257 is outside [-1, V)");
  put_error(buf, 99, 7, 0, 0, 0);
  expect_status(ty_dev_data_error(&x, buf), TY_CODE_INVALID_ARGUMENT,
                "dev:1: node 7 (?): unknown device error code 99");
  ty_dev_exec_free(&x);
}


/* ---- the view builders over recorded movers ---- */

typedef struct moved_t {
  int calls;
  ty_dev_ref_t x, y;
  size_t esize;
  int rank;
  int64_t dims[8], xs[8], ys[8];
} moved_t;

static moved_t moved;

static void rec_fill(ty_dev_build_t *b, ty_dev_ref_t dst, uint64_t size) {
  (void)b, (void)dst, (void)size;
  moved.calls += 100;
}
static void rec_copy(ty_dev_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t size) {
  (void)b, (void)src, (void)dst, (void)size;
  moved.calls += 1000;
}
static void rec_strided(ty_dev_build_t *b, ty_dev_ref_t x, ty_dev_ref_t y, size_t esize, int rank,
                        const int64_t *dims, const int64_t *xs, const int64_t *ys) {
  (void)b;
  moved.calls++;
  moved.x = x;
  moved.y = y;
  moved.esize = esize;
  moved.rank = rank;
  for (int d = 0; d < rank; ++d) {
    moved.dims[d] = dims[d];
    moved.xs[d] = xs[d];
    moved.ys[d] = ys[d];
  }
}
static const ty_dev_movers_t recorder = {rec_fill, rec_copy, rec_strided};

/* Kernel arguments as the arg hook sees them (device_ops.h). */
static struct {
  int count;
  ty_dev_arg_t args[16];
  int64_t dims8[8];
} argued;
static void rec_arg(ty_dev_build_t *b, void *cmd, const ty_dev_arg_t *a) {
  (void)b;
  assert_ptr_equal(cmd, &argued);
  if (a->kind == TY_DEV_ARG_DIMS8) memcpy(argued.dims8, a->dims8, sizeof(argued.dims8));
  if (argued.count < 16) argued.args[argued.count] = *a;
  argued.count++;
}

static const int64_t dims23[] = {2, 3}, dims32[] = {3, 2};
static const ty_abi_value_t tvalues[] = {
    {"a", TY_DTYPE_F32, 2, dims23, TY_VALUE_INPUT, 0, NULL},
    {"t", TY_DTYPE_F32, 2, dims32, TY_VALUE_INTERMEDIATE, TY_VALUE_FLAG_OUTPUT, NULL},
};
static const uint32_t t_in[] = {0}, t_out[] = {1};
/* The two values build_view's graph has (tvalues unless a test swaps them). */
static const ty_abi_value_t *view_values = tvalues;

/* Builds node `node` of a two-value graph with the recorder. */
static ty_abi_status_t build_view(const ty_abi_node_t *node, void (*build)(ty_dev_build_t *)) {
  ty_abi_graph_t g;
  memset(&g, 0, sizeof(g));
  g.struct_size = sizeof(g);
  g.value_count = 2;
  g.values = view_values;
  g.node_count = 1;
  g.nodes = node;
  g.hash_hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  ty_dev_exec_t x;
  assert_null(ty_dev_exec_init(&x, &g, 256, "dev:2"));
  ty_dev_build_t b = {
      .core = &x, .g = ty_dev_exec_graph(&x), .move = &recorder, .arg = rec_arg};
  b.node = &b.g->nodes[0];
  memset(&moved, 0, sizeof(moved));
  memset(&argued, 0, sizeof(argued));
  build(&b);
  ty_dev_exec_free(&x);
  return b.status;
}

static void test_view_builders(void **state) {
  (void)state;
  const int64_t perm10[] = {1, 0};
  ty_abi_attr_t perm = {"perm", TY_ATTR_INTS, 2, 0, 0, NULL, perm10, NULL};
  ty_abi_node_t node = {"transpose", 1, t_in, 1, t_out, 1, &perm};
  assert_null(build_view(&node, ty_dev_build_transpose));
  /* y[i][j] = a[j][i]: y's dims, a's strides permuted, y's strides. */
  assert_int_equal(moved.calls, 1);
  assert_int_equal(moved.esize, 4);
  assert_int_equal(moved.rank, 2);
  assert_int_equal(moved.dims[0], 3);
  assert_int_equal(moved.xs[0], 1);
  assert_int_equal(moved.xs[1], 3);
  assert_int_equal(moved.ys[0], 2);
  /* A perm of the wrong length is refused with its reason. */
  perm.count = 1;
  expect_status(build_view(&node, ty_dev_build_transpose), TY_CODE_INVALID_ARGUMENT,
                "dev:2: node 0 (transpose): attribute 'perm' must list 2 axes");
  perm.kind = TY_ATTR_INT;
  perm.count = 2;
  expect_status(build_view(&node, ty_dev_build_transpose), TY_CODE_INVALID_ARGUMENT,
                "attribute 'perm' must list 2 axes");
  /* slice without 'starts'; slice_backward fills, then copies. */
  ty_abi_node_t slice = {"slice", 1, t_in, 1, t_out, 0, NULL};
  expect_status(build_view(&slice, ty_dev_build_slice), TY_CODE_INVALID_ARGUMENT,
                "dev:2: node 0 (slice): attribute 'starts' must list 2 axes");
  const int64_t starts0[] = {0, 0};
  ty_abi_attr_t starts = {"starts", TY_ATTR_INTS, 2, 0, 0, NULL, starts0, NULL};
  ty_abi_node_t back = {"slice_backward", 1, t_in, 1, t_out, 1, &starts};
  assert_null(build_view(&back, ty_dev_build_slice_backward));
  assert_int_equal(moved.calls, 101);
  ty_abi_node_t reshape = {"reshape", 1, t_in, 1, t_out, 0, NULL};
  assert_null(build_view(&reshape, ty_dev_build_reshape));
  assert_int_equal(moved.calls, 1000);
}

static void test_broadcast_to(void **state) {
  (void)state;
  /* b [2, 3] from a [1, 3]: one strided copy over b's dims, a's row read
   * again (stride 0 on the broadcast axis), b's own strides. */
  static const int64_t dims13[] = {1, 3};
  const ty_abi_value_t bvalues[] = {
      {"a", TY_DTYPE_F32, 2, dims13, TY_VALUE_INPUT, 0, NULL},
      {"b", TY_DTYPE_F32, 2, dims23, TY_VALUE_INTERMEDIATE, TY_VALUE_FLAG_OUTPUT, NULL},
  };
  view_values = bvalues;
  ty_abi_node_t node = {"broadcast_to", 1, t_in, 1, t_out, 0, NULL};
  assert_null(build_view(&node, ty_dev_build_broadcast_to));
  view_values = tvalues;
  assert_int_equal(moved.calls, 1);
  assert_int_equal(moved.x.value, 0);
  assert_int_equal(moved.y.value, 1);
  assert_int_equal(moved.esize, 4);
  assert_int_equal(moved.rank, 2);
  assert_int_equal(moved.dims[0], 2);
  assert_int_equal(moved.dims[1], 3);
  assert_int_equal(moved.xs[0], 0);
  assert_int_equal(moved.xs[1], 1);
  assert_int_equal(moved.ys[0], 3);
  assert_int_equal(moved.ys[1], 1);
}

/* ---- kernel arguments and op decoders (device_ops.h) ---- */

static void build_args(ty_dev_build_t *b) {
  static const int64_t d8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ty_dev_arg_in(b, &argued, 0);
  ty_dev_arg_err(b, &argued);
  ty_dev_arg_f32(b, &argued, 0.1f);
  ty_dev_arg_u64(b, &argued, UINT64_MAX);
  ty_dev_arg_dims8(b, &argued, d8);
  ty_dev_arg_i32(b, NULL, 7); /* a failed launch: nothing reaches the hook */
}

static void test_args_through_hook(void **state) {
  (void)state;
  ty_abi_node_t node = {"scale", 1, t_in, 1, t_out, 0, NULL};
  assert_null(build_view(&node, build_args));
  assert_int_equal(argued.count, 6);
  assert_int_equal(argued.args[0].kind, TY_DEV_ARG_REF);
  assert_int_equal(argued.args[0].ref.kind, TY_DEV_REF_VALUE);
  assert_int_equal(argued.args[0].ref.value, 0);
  assert_int_equal(argued.args[1].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[1].i, ty_dev_dt(&tvalues[0]));
  assert_int_equal(argued.args[2].kind, TY_DEV_ARG_ERR);
  assert_int_equal(argued.args[2].i, 0); /* the node's index */
  assert_true((float)argued.args[3].f == 0.1f);
  assert_true((uint64_t)argued.args[4].i == UINT64_MAX);
  assert_int_equal(argued.dims8[7], 8);
}

static void build_decode(ty_dev_build_t *b) {
  bool red[8];
  ty_dev_reduce_axes(b, red);
  argued.args[0].i = red[0] + 2 * red[1] + 4 * red[2];
  argued.args[1].i = ty_dev_binary_op(b);
  const ty_dev_matmul_t m = ty_dev_matmul_of(b);
  argued.args[2].i = m.M * 10000 + m.N * 1000 + m.K * 100 + m.ta * 10 + m.tb;
  const ty_dev_embedding_t e = ty_dev_embedding_of(b);
  argued.args[3].i = e.N * 100 + e.V * 10 + e.D;
}

static void test_decoders(void **state) {
  (void)state;
  static const uint32_t two_in[] = {0, 0};
  /* No axes: every axis; a negative axis counts from the end. */
  ty_abi_node_t all = {"reduce_sum", 2, two_in, 1, t_out, 0, NULL};
  assert_null(build_view(&all, build_decode));
  assert_int_equal(argued.args[0].i, 3);
  const int64_t last[] = {-1};
  ty_abi_attr_t attrs[] = {
      {"axes", TY_ATTR_INTS, 1, 0, 0, NULL, last, NULL},
      {"trans_a", TY_ATTR_INT, 0, 1, 0, NULL, NULL, NULL},
  };
  ty_abi_node_t mul = {"mul", 2, two_in, 1, t_out, 2, attrs};
  assert_null(build_view(&mul, build_decode));
  assert_int_equal(argued.args[0].i, 2);
  assert_int_equal(argued.args[1].i, 2); /* add, sub, mul, div */
  /* c [3, 2] = a^T: M 3, N 2, K = a's rows (2). */
  assert_int_equal(argued.args[2].i, 3 * 10000 + 2 * 1000 + 2 * 100 + 10);
  /* embedding: N = input 1's elements (6), the table [2, 3] is input 0... */
  ty_abi_node_t emb = {"embedding", 2, two_in, 1, t_out, 0, NULL};
  assert_null(build_view(&emb, build_decode));
  assert_int_equal(argued.args[3].i, 6 * 100 + 2 * 10 + 3);
  /* ... and output 0 ([3, 2]) for embedding_backward. */
  emb.op = "embedding_backward";
  assert_null(build_view(&emb, build_decode));
  assert_int_equal(argued.args[3].i, 6 * 100 + 3 * 10 + 2);
}

/* x [2, 3] (input 0): which axes a plan keeps and reduces, merged where
 * contiguous, padded past the ranks; and the arguments it makes. */
static ty_dev_reduce_plan_t planned[2];
static uint64_t chunked;
static void build_reduce_plan(ty_dev_build_t *b) {
  const bool last[8] = {false, true}, both[8] = {true, true};
  ty_dev_reduce_plan(b, last, 1, &planned[0]);
  ty_dev_reduce_plan(b, both, 0, &planned[1]);
  ty_dev_args_reduce_plan(b, &argued, &planned[0]);
  chunked = ty_dev_chunk_count(b, 0, 1, 4);
}

static void test_reduce_plan(void **state) {
  (void)state;
  ty_abi_node_t node = {"reduce_sum", 1, t_in, 1, t_out, 0, NULL};
  assert_null(build_view(&node, build_reduce_plan));
  const ty_dev_reduce_plan_t *p = &planned[0];
  assert_int_equal(p->krank, 1);
  assert_int_equal(p->kdims[0], 2);
  assert_int_equal(p->kstr[0], 3);
  assert_int_equal(p->kdims[1], 1); /* padded with pad_dim */
  assert_int_equal(p->kstr[1], 0);
  assert_int_equal(p->rrank, 1);
  assert_int_equal(p->rdims[0], 3);
  assert_int_equal(p->rstr[0], 1);
  /* Both axes reduced: one contiguous run of 6. */
  p = &planned[1];
  assert_int_equal(p->krank, 0);
  assert_int_equal(p->kdims[0], 0);
  assert_int_equal(p->rrank, 1);
  assert_int_equal(p->rdims[0], 6);
  assert_int_equal(p->rstr[0], 1);
  assert_int_equal(p->rdims[1], 0);
  /* int krank, dims8, dims8, int rrank, dims8, dims8 (the last: rstr). */
  assert_int_equal(argued.count, 6);
  assert_int_equal(argued.args[0].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[0].i, 1);
  assert_int_equal(argued.args[1].kind, TY_DEV_ARG_DIMS8);
  assert_int_equal(argued.args[3].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[5].kind, TY_DEV_ARG_DIMS8);
  assert_int_equal(argued.dims8[0], 1);
  /* 6 elements in chunks of 4: 2. */
  assert_int_equal(chunked, 2);
}

static void build_dropout_p(ty_dev_build_t *b) {
  double p = -1.0;
  argued.args[0].i = ty_dev_dropout_p(b, &p);
  argued.args[0].f = p;
}

static void test_dropout_p(void **state) {
  (void)state;
  ty_abi_attr_t p = {"p", TY_ATTR_FLOAT, 0, 0, 0.25, NULL, NULL, NULL};
  ty_abi_node_t node = {"dropout", 1, t_in, 1, t_out, 1, &p};
  assert_null(build_view(&node, build_dropout_p));
  assert_int_equal(argued.args[0].i, 1);
  assert_true(argued.args[0].f == 0.25);
  p.f = 1.0;
  expect_status(build_view(&node, build_dropout_p), TY_CODE_INVALID_ARGUMENT,
                "dev:2: node 0 (dropout): probability 1 is outside [0, 1)");
  assert_int_equal(argued.args[0].i, 0);
}

/* ---- the op table ---- */

static void build_nothing(ty_dev_build_t *b) { (void)b; }

static void test_op_find(void **state) {
  (void)state;
  static const ty_dev_op_t table[] = {
      {"add", build_nothing, TY_DESC_ACCEPT_COMPUTE},
      {"cast", build_nothing, TY_DESC_ACCEPT_CAST},
      {NULL, NULL, TY_DESC_ACCEPT_MOVE},
  };
  assert_ptr_equal(ty_dev_op_find(table, "cast"), &table[1]);
  assert_null(ty_dev_op_find(table, "matmul"));
}

/* ---- the per-node build walk ---- */

static int walked_built, walked_visits, walked_done;
static bool walk_keep = true;

static void build_count(ty_dev_build_t *b) {
  (void)b;
  walked_built++;
}
static bool walk_visit(ty_dev_build_t *b, uint32_t n) {
  assert_int_equal(n, 0);
  b->hint = &walked_visits;
  walked_visits++;
  return walk_keep;
}
static void walk_built(ty_dev_build_t *b) {
  assert_ptr_equal(b->hint, &walked_visits);
  assert_string_equal(b->node->op, "scale");
  walked_done++;
}
static const ty_dev_node_hooks_t walk_hooks = {walk_visit, walk_built};

static void walk_with(const ty_dev_op_t *table, const ty_dev_node_hooks_t *hooks,
                      ty_dev_build_t *b) {
  walked_built = walked_visits = walked_done = 0;
  ty_dev_build_nodes(b, table, hooks);
}
static void walk_table(ty_dev_build_t *b) {
  static const ty_dev_op_t table[] = {
      {"scale", build_count, TY_DESC_ACCEPT_COMPUTE},
      {NULL, NULL, TY_DESC_ACCEPT_MOVE},
  };
  walk_with(table, &walk_hooks, b);
}
static void walk_no_hooks(ty_dev_build_t *b) {
  static const ty_dev_op_t table[] = {
      {"scale", build_count, TY_DESC_ACCEPT_COMPUTE},
      {NULL, NULL, TY_DESC_ACCEPT_MOVE},
  };
  walk_with(table, NULL, b);
}
static void walk_empty(ty_dev_build_t *b) {
  static const ty_dev_op_t table[] = {{NULL, NULL, TY_DESC_ACCEPT_MOVE}};
  walk_with(table, &walk_hooks, b);
}

static void test_build_nodes(void **state) {
  (void)state;
  ty_abi_node_t node = {"scale", 1, t_in, 1, t_out, 0, NULL};
  /* Visit, build, built, in that order, once for the one node. */
  walk_keep = true;
  assert_null(build_view(&node, walk_table));
  assert_int_equal(walked_visits, 1);
  assert_int_equal(walked_built, 1);
  assert_int_equal(walked_done, 1);
  /* A node the backend builds elsewhere (visit says no) is not built. */
  walk_keep = false;
  assert_null(build_view(&node, walk_table));
  assert_int_equal(walked_visits, 1);
  assert_int_equal(walked_built, 0);
  assert_int_equal(walked_done, 0);
  walk_keep = true;
  /* No hooks: every node the plan keeps is built. */
  assert_null(build_view(&node, walk_no_hooks));
  assert_int_equal(walked_built, 1);
  /* An op the table lacks is refused, naming the node. */
  expect_status(build_view(&node, walk_empty), TY_CODE_UNIMPLEMENTED,
                "dev:2: node 0 (scale): no kernel for this op");
  assert_int_equal(walked_visits, 1);
  assert_int_equal(walked_done, 0);
}

/* The shared op list expands into a table with every entry (device_op_list.h). */
static void build_listed(ty_dev_build_t *b) { (void)b; }
#define TY_DEV_OP(op, builder, accept) {#op, build_listed, TY_DESC_ACCEPT_##accept},
#define TY_DEV_CORE_OP(op, function, accept) {#op, function, TY_DESC_ACCEPT_##accept},
static const ty_dev_op_t listed_ops[] = {
#include "backends/common/device_op_list.h"
    {NULL, NULL, TY_DESC_ACCEPT_MOVE},
};

static void test_op_list(void **state) {
  (void)state;
  assert_ptr_equal(ty_dev_op_find(listed_ops, "div")->build, build_listed);
  assert_int_equal(ty_dev_op_find(listed_ops, "cast")->accept, TY_DESC_ACCEPT_CAST);
  assert_ptr_equal(ty_dev_op_find(listed_ops, "broadcast_to")->build, ty_dev_build_broadcast_to);
  assert_int_equal(ty_dev_op_find(listed_ops, "concat")->accept, TY_DESC_ACCEPT_MOVE);
  assert_null(ty_dev_op_find(listed_ops, "vocab_max")); /* cuda's own */
  assert_ptr_equal(ty_dev_op_find(listed_ops, "sample")->build, build_listed);
  size_t count = 0;
  while (listed_ops[count].op) ++count;
  assert_int_equal(count, 46); /* 44 + sample, top_logprobs (issue 29) */
}

/* ---- unbound outputs placed by the core through the alloc hook ---- */

static int allocs;
static ty_abi_status_t alloc_result; /* what hook_alloc returns */
static ty_abi_status_t hook_alloc(void *user, uint64_t bytes, uint64_t *out_base) {
  ty_dev_exec_t *x = user;
  assert_int_equal(bytes, x->fallback_bytes);
  allocs++;
  if (alloc_result) return alloc_result;
  *out_base = 0xA000;
  return NULL;
}

static ty_abi_status_t resolve_with(ty_dev_exec_t *x, const ty_dev_hooks_t *hooks) {
  static ty_abi_buffer_t big = {0x1000, 64};
  static const ty_abi_binding_t bx = {"x", &big, 0};
  ty_abi_execute_args_t args;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.binding_count = 1;
  args.bindings = &bx;
  return ty_dev_exec_resolve(x, &args, hooks);
}

static void test_unbound_alloc(void **state) {
  (void)state;
  ty_abi_graph_t g = make_graph();
  ty_dev_exec_t x;
  assert_null(ty_dev_exec_init(&x, &g, 256, "dev:0"));
  const ty_dev_hooks_t hooks = {.user = &x, .buffer = hook_buffer, .alloc = hook_alloc};
  /* A failed allocation is the run's error and is asked again next run. */
  allocs = 0;
  alloc_result = fake_make(TY_CODE_RESOURCE_EXHAUSTED, "dev:0: out of device memory");
  expect_status(resolve_with(&x, &hooks), TY_CODE_RESOURCE_EXHAUSTED, "out of device memory");
  assert_int_equal(x.fallback, 0);
  alloc_result = NULL;
  /* Allocated at the first run that needs it, kept for later runs. */
  assert_null(resolve_with(&x, &hooks));
  assert_null(resolve_with(&x, &hooks));
  assert_int_equal(allocs, 2);
  assert_int_equal(x.fallback, 0xA000);
  assert_int_equal(x.loc[2].base, 0xA000);
  assert_int_equal(x.loc[2].offset, x.fallback_offset[2]);
  /* Neither hook: refused, naming the output and the fix. */
  x.fallback = 0;
  const ty_dev_hooks_t bare = {.user = &x, .buffer = hook_buffer};
  expect_status(resolve_with(&x, &bare), TY_CODE_INTERNAL,
                "dev:0: output 'y' is not bound and the backend gives no hook to allocate it "
                "(ty_dev_hooks_t.alloc or .unbound_output)");
  ty_dev_exec_free(&x);
}

/* ---- rows, strided copies and clipping (device_ops.h) ---- */

static void test_rows(void **state) {
  (void)state;
  int64_t C = 0;
  assert_int_equal(ty_dev_rows(&tvalues[0], &C), 2); /* [2, 3] */
  assert_int_equal(C, 3);
  const ty_abi_value_t scalar = {"s", TY_DTYPE_F32, 0, NULL, TY_VALUE_INPUT, 0, NULL};
  assert_int_equal(ty_dev_rows(&scalar, &C), 1);
  assert_int_equal(C, 1);
  static const int64_t empty_rows[] = {0, 3}, empty_cols[] = {2, 0};
  const ty_abi_value_t e1 = {"e", TY_DTYPE_F32, 2, empty_rows, TY_VALUE_INPUT, 0, NULL};
  const ty_abi_value_t e2 = {"e", TY_DTYPE_F32, 2, empty_cols, TY_VALUE_INPUT, 0, NULL};
  assert_int_equal(ty_dev_rows(&e1, &C), 0);
  assert_int_equal(ty_dev_rows(&e2, &C), 0);
  assert_int_equal(C, 0);
}

static int strided_vec;
static void build_strided_args(ty_dev_build_t *b) {
  static const int64_t d8[8] = {2, 3, 1, 1, 1, 1, 1, 1}, s8[8] = {3, 1};
  ty_dev_args_strided_copy(b, &argued, ty_dev_in(b, 0), ty_dev_out(b, 0), 2, strided_vec, 6, 2,
                           d8, s8, s8);
}

static void test_strided_copy_args(void **state) {
  (void)state;
  ty_abi_node_t node = {"transpose", 1, t_in, 1, t_out, 0, NULL};
  /* CUDA's kernel takes vec after esize ... */
  strided_vec = 2;
  assert_null(build_view(&node, build_strided_args));
  assert_int_equal(argued.count, 9);
  assert_int_equal(argued.args[2].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[2].i, 2);
  assert_int_equal(argued.args[3].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[3].i, 2);
  assert_int_equal(argued.args[4].kind, TY_DEV_ARG_I64);
  assert_int_equal(argued.args[4].i, 6);
  assert_int_equal(argued.args[8].kind, TY_DEV_ARG_DIMS8);
  /* ... OpenCL's has none. */
  strided_vec = 0;
  assert_null(build_view(&node, build_strided_args));
  assert_int_equal(argued.count, 8);
  assert_int_equal(argued.args[3].kind, TY_DEV_ARG_I64);
  assert_int_equal(argued.args[3].i, 6);
  assert_int_equal(argued.args[4].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[4].i, 2);
}

static struct {
  int calls;
  uint32_t input[4];
  int64_t n[4];
  uint64_t slot[4];
} summed;
static uint64_t rec_sumsq(ty_dev_build_t *b, uint32_t input, int64_t n, ty_dev_ref_t partial,
                          uint64_t slot) {
  (void)b;
  assert_int_equal(partial.kind, TY_DEV_REF_SCRATCH);
  if (summed.calls < 4) {
    summed.input[summed.calls] = input;
    summed.n[summed.calls] = n;
    summed.slot[summed.calls] = slot;
  }
  summed.calls++;
  return ((uint64_t)n + 3) / 4;
}
static ty_dev_clip_t clipped;
static void build_clip(ty_dev_build_t *b) {
  clipped = ty_dev_clip_partials(b, 4, sizeof(double), rec_sumsq);
  ty_dev_args_clip_finish(b, &argued, &clipped);
}

static void test_clip_partials(void **state) {
  (void)state;
  /* max_norm, g1 [2, 3], g2 [3, 2]: two chunks of 4 each. */
  static const uint32_t clip_in[] = {0, 0, 1}, clip_out[] = {1, 0, 1};
  ty_abi_node_t node = {"clip_by_global_norm", 3, clip_in, 3, clip_out, 0, NULL};
  memset(&summed, 0, sizeof(summed));
  assert_null(build_view(&node, build_clip));
  assert_int_equal(summed.calls, 2);
  assert_int_equal(summed.input[0], 1);
  assert_int_equal(summed.n[0], 6);
  assert_int_equal(summed.slot[0], 0);
  assert_int_equal(summed.input[1], 2);
  assert_int_equal(summed.slot[1], 2);
  assert_int_equal(clipped.slots, 4);
  assert_int_equal(clipped.partial.kind, TY_DEV_REF_SCRATCH);
  assert_int_equal(clipped.coef.kind, TY_DEV_REF_SCRATCH);
  assert_true(clipped.coef.offset >= clipped.partial.offset + 4 * sizeof(double));
  /* ty_clip_finish(part, count, max_norm, dtm, norm, dtn, coef) */
  assert_int_equal(argued.count, 7);
  assert_int_equal(argued.args[0].ref.offset, clipped.partial.offset);
  assert_int_equal(argued.args[1].kind, TY_DEV_ARG_I64);
  assert_int_equal(argued.args[1].i, 4);
  assert_int_equal(argued.args[2].ref.kind, TY_DEV_REF_VALUE);
  assert_int_equal(argued.args[4].ref.value, 1); /* output 0 */
  assert_int_equal(argued.args[6].ref.offset, clipped.coef.offset);
}

/* ---- a norm backward's statistics and dbeta (device_ops.h) ---- */

static void build_norm_bwd(ty_dev_build_t *b) {
  const ty_dev_norm_bwd_t nb = ty_dev_norm_bwd_of(b);
  ty_dev_args_norm_stats(b, &argued, &nb);
  ty_dev_args_norm_dbeta(b, &argued, &nb);
  ty_dev_arg_i32(b, &argued, nb.rms);
}

static void test_norm_bwd_args(void **state) {
  (void)state;
  const int dt = ty_dev_dt(&tvalues[0]);
  /* layernorm_backward: dy, x, gamma (absent), mean = 0, rstd = 1 -> dx,
   * dgamma, dbeta = 1. */
  static const uint32_t ln_in[] = {0, 0, UINT32_MAX, 0, 1}, ln_out[] = {1, 1, 1};
  ty_abi_node_t ln = {"layernorm_backward", 5, ln_in, 3, ln_out, 0, NULL};
  assert_null(build_view(&ln, build_norm_bwd));
  assert_int_equal(argued.count, 7);
  assert_int_equal(argued.args[0].kind, TY_DEV_ARG_REF);
  assert_int_equal(argued.args[0].ref.kind, TY_DEV_REF_VALUE);
  assert_int_equal(argued.args[0].ref.value, 0);
  assert_int_equal(argued.args[1].kind, TY_DEV_ARG_I32);
  assert_int_equal(argued.args[1].i, dt);
  assert_int_equal(argued.args[2].ref.kind, TY_DEV_REF_VALUE);
  assert_int_equal(argued.args[2].ref.value, 1);
  assert_int_equal(argued.args[3].i, dt);
  assert_int_equal(argued.args[4].ref.kind, TY_DEV_REF_VALUE); /* dbeta */
  assert_int_equal(argued.args[4].ref.value, 1);
  assert_int_equal(argued.args[5].i, dt);
  assert_int_equal(argued.args[6].i, 0); /* not rms */
  /* Without dbeta asked for: NONE and dtype 0. */
  ty_abi_node_t ln2 = {"layernorm_backward", 5, ln_in, 2, ln_out, 0, NULL};
  assert_null(build_view(&ln2, build_norm_bwd));
  assert_int_equal(argued.args[4].ref.kind, TY_DEV_REF_NONE);
  assert_int_equal(argued.args[5].i, 0);
  /* rmsnorm_backward: dy, x, gamma, rstd = 1 -> dx, dgamma: no mean. */
  static const uint32_t rms_in[] = {0, 0, 0, 1};
  ty_abi_node_t rms = {"rmsnorm_backward", 4, rms_in, 2, ln_out, 0, NULL};
  assert_null(build_view(&rms, build_norm_bwd));
  assert_int_equal(argued.args[0].ref.kind, TY_DEV_REF_NONE);
  assert_int_equal(argued.args[1].i, 0);
  assert_int_equal(argued.args[2].ref.kind, TY_DEV_REF_VALUE);
  assert_int_equal(argued.args[2].ref.value, 1);
  assert_int_equal(argued.args[3].i, dt);
  assert_int_equal(argued.args[4].ref.kind, TY_DEV_REF_NONE);
  assert_int_equal(argued.args[5].i, 0);
  assert_int_equal(argued.args[6].i, 1);
}

/* rope_backward over x [2, 3, 4, 8] (f32) and pos [2, 3] (i32). */
static const int64_t rope_x_dims[] = {2, 3, 4, 8}, rope_pos_dims[] = {2, 3};
static const ty_abi_value_t rope_values[] = {
    {"x", TY_DTYPE_F32, 4, rope_x_dims, TY_VALUE_INPUT, 0, NULL},
    {"pos", TY_DTYPE_I32, 2, rope_pos_dims, TY_VALUE_INPUT, 0, NULL},
};
static float rope_table[8];

static void build_rope(ty_dev_build_t *b) {
  const ty_dev_rope_t r = ty_dev_rope_of(b);
  const double inv[4] = {1.0, 0.1, 1.0 / 3.0, 1e-3};
  const ty_dev_ref_t freq = ty_dev_rope_freq_table(b, inv, r.D / 2);
  assert_int_equal(freq.kind, TY_DEV_REF_AUX);
  memcpy(rope_table, (const char *)b->core->aux_host + freq.offset, sizeof(rope_table));
  ty_dev_args_rope_tail(b, &argued, freq, &r);
}

static void test_rope_args(void **state) {
  (void)state;
  static const uint32_t in[] = {0, 1}, out[] = {0};
  ty_abi_node_t node = {"rope_backward", 2, in, 1, out, 0, NULL};
  view_values = rope_values;
  assert_null(build_view(&node, build_rope));
  view_values = tvalues;
  /* pos, its dtype, freq, T, H, D, the sign of rope_backward, the pairs */
  assert_int_equal(argued.count, 8);
  assert_int_equal(argued.args[0].kind, TY_DEV_ARG_REF);
  assert_int_equal(argued.args[0].ref.kind, TY_DEV_REF_VALUE);
  assert_int_equal(argued.args[0].ref.value, 1);
  assert_int_equal(argued.args[1].i, ty_dev_dt(&rope_values[1]));
  assert_int_equal(argued.args[2].ref.kind, TY_DEV_REF_AUX);
  assert_int_equal(argued.args[3].i, 3);
  assert_int_equal(argued.args[4].i, 4);
  assert_int_equal(argued.args[5].i, 8);
  assert_int_equal(argued.args[6].kind, TY_DEV_ARG_F32);
  assert_true(argued.args[6].f == -1.0);
  assert_int_equal(argued.args[7].i, 2 * 3 * 4 * 8 / 2);
  /* (hi, lo) pairs: hi is the f32 rounding, hi + lo recovers the f64. */
  const double inv[4] = {1.0, 0.1, 1.0 / 3.0, 1e-3};
  for (int j = 0; j < 4; ++j) {
    assert_true(rope_table[2 * j] == (float)inv[j]);
    assert_true(rope_table[2 * j + 1] == (float)(inv[j] - (double)(float)inv[j]));
    assert_true(fabs((double)rope_table[2 * j] + (double)rope_table[2 * j + 1] - inv[j]) <
                1e-12 * inv[j]);
  }
  assert_true(rope_table[3] != 0.0f); /* 0.1 is not an f32: a real low part */
}

/* ---- the backend base (device_backend.h) ---- */

typedef struct fake_slot_t {
  ty_dev_slot_t base;
  int id;
} fake_slot_t;

struct ty_abi_backend_s {
  ty_dev_backend_t base;
  int loaded;
};

static struct {
  int fail_load, devices, fail_enumerate;
  int unloads, releases;
} fakeb;

static int fake_load(ty_dev_backend_t *b, char *why, size_t capacity) {
  if (fakeb.fail_load) {
    snprintf(why, capacity, "fake: no driver (install one)");
    return -1;
  }
  ((ty_abi_backend_t *)(void *)b)->loaded = 1;
  return 0;
}
static ty_abi_status_t fake_enumerate(ty_dev_backend_t *b) {
  for (int i = 0; i < fakeb.devices; ++i) {
    ty_dev_slot_t *slot = NULL;
    ty_abi_status_t st = ty_dev_backend_slot_add(b, &slot);
    if (st) return st;
    fake_slot_t *s = (fake_slot_t *)(void *)slot;
    s->id = 100 + i;
    s->base.info.struct_size = sizeof(s->base.info);
    s->base.info.compute_units = (uint32_t)i + 1;
    snprintf(s->base.info.name, sizeof(s->base.info.name), "fake device %d", i);
  }
  if (fakeb.fail_enumerate) return ty_plugin_error(TY_CODE_UNAVAILABLE, "fake: no device");
  return NULL;
}
static void fake_slot_release(ty_dev_backend_t *b, ty_dev_slot_t *slot) {
  (void)b;
  assert_int_equal(((fake_slot_t *)(void *)slot)->id, 100 + fakeb.releases);
  fakeb.releases++;
}
static void fake_unload(ty_dev_backend_t *b) {
  assert_int_equal(((ty_abi_backend_t *)(void *)b)->loaded, 1);
  fakeb.unloads++;
}
static const ty_dev_backend_class_t fake_class = {
    "fake", sizeof(ty_abi_backend_t), sizeof(fake_slot_t),
    fake_load, fake_enumerate, fake_slot_release, fake_unload};

static void test_backend_base(void **state) {
  (void)state;
  ty_abi_backend_create_args_t args;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.host = &fake_host;
  ty_abi_backend_t *b = (ty_abi_backend_t *)(void *)&args; /* must be reset */
  /* A driver that does not load: UNAVAILABLE with the hook's reason, and
   * nothing unloaded. */
  memset(&fakeb, 0, sizeof(fakeb));
  fakeb.fail_load = 1;
  expect_status(ty_dev_backend_create(&fake_class, &args, &b), TY_CODE_UNAVAILABLE,
                "fake: no driver (install one)");
  assert_null(b);
  assert_int_equal(fakeb.unloads, 0);
  /* An enumeration that fails: its status, and what it added released. */
  memset(&fakeb, 0, sizeof(fakeb));
  fakeb.devices = 2;
  fakeb.fail_enumerate = 1;
  expect_status(ty_dev_backend_create(&fake_class, &args, &b), TY_CODE_UNAVAILABLE,
                "fake: no device");
  assert_null(b);
  assert_int_equal(fakeb.releases, 2);
  assert_int_equal(fakeb.unloads, 1);
  /* Ten devices (the slots grow past their first 8), counted and listed. */
  memset(&fakeb, 0, sizeof(fakeb));
  fakeb.devices = 10;
  assert_null(ty_dev_backend_create(&fake_class, &args, &b));
  assert_non_null(b);
  assert_ptr_equal(b->base.host, &fake_host);
  uint32_t count = 0;
  assert_null(ty_dev_backend_device_count(b, &count));
  assert_int_equal(count, 10);
  assert_int_equal(((fake_slot_t *)(void *)ty_dev_backend_slot(&b->base, 9))->id, 109);
  ty_abi_device_info_t info;
  memset(&info, 0, sizeof(info));
  info.struct_size = sizeof(info);
  assert_null(ty_dev_backend_device_info(b, 9, &info));
  assert_string_equal(info.name, "fake device 9");
  assert_int_equal(info.compute_units, 10);
  ty_dev_backend_destroy(b);
  assert_int_equal(fakeb.releases, 10);
  assert_int_equal(fakeb.unloads, 1);
  ty_dev_backend_destroy(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_long_message_is_whole),
      cmocka_unit_test(test_resolve),
      cmocka_unit_test(test_data_errors),
      cmocka_unit_test(test_view_builders),
      cmocka_unit_test(test_op_find),
      cmocka_unit_test(test_args_through_hook),
      cmocka_unit_test(test_decoders),
      cmocka_unit_test(test_dropout_p),
      cmocka_unit_test(test_broadcast_to),
      cmocka_unit_test(test_build_nodes),
      cmocka_unit_test(test_op_list),
      cmocka_unit_test(test_reduce_plan),
      cmocka_unit_test(test_unbound_alloc),
      cmocka_unit_test(test_rows),
      cmocka_unit_test(test_strided_copy_args),
      cmocka_unit_test(test_clip_partials),
      cmocka_unit_test(test_norm_bwd_args),
      cmocka_unit_test(test_rope_args),
      cmocka_unit_test(test_backend_base),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
