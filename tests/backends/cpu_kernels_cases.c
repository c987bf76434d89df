/* The cases of cpu_kernels_test.c (see cpu_kernels_cases.h): which ops,
 * shapes, attributes and kinds of random input each one-node graph gets. */
#include <stdio.h>
#include <string.h>

#include "common/test_util.h"

#include "cpu_kernels_cases.h"
#include "hal/dtype.h"

#define MAX_CASES 192
static tcase_t g_cases[MAX_CASES];
static int g_case_count;

static tcase_t *add_case(const char *op, const char *label, uint32_t n_out) {
  assert_true(g_case_count < MAX_CASES);
  tcase_t *c = &g_cases[g_case_count++];
  memset(c, 0, sizeof(*c));
  c->op = op;
  snprintf(c->label, sizeof(c->label), "%s", label);
  c->n_out = n_out;
  for (int o = 0; o < MAX_OUT; ++o) c->update[o] = -1;
  c->runs = 1;
  return c;
}

static tin_t *add_in(tcase_t *c, int kind, ty_dtype_t dtype, uint32_t rank,
                     const int64_t *dims, double a, double b) {
  assert_true(c->n_in < MAX_IN);
  tin_t *in = &c->in[c->n_in++];
  memset(in, 0, sizeof(*in));
  in->kind = kind;
  in->dtype = dtype;
  in->rank = rank;
  for (uint32_t i = 0; i < rank; ++i) in->dims[i] = dims[i];
  in->a = a;
  in->b = b;
  return in;
}

#define DIMS(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}
#define FLT(c, ...) add_in((c), K_FLOAT, TY_DTYPE_INVALID, DIMS(__VA_ARGS__), -1.0, 1.0)
#define SCALAR(c, v) add_in((c), K_SCALAR, TY_DTYPE_F32, 0, NULL, (v), 0)
#define ABSENT(c) add_in((c), K_ABSENT, TY_DTYPE_INVALID, 0, NULL, 0, 0)

static void set_int(tcase_t *c, const char *name, int64_t v) {
  TY_EXPECT_OK(ty_attrs_set_int(&c->attrs, name, v));
}
static void set_float(tcase_t *c, const char *name, double v) {
  TY_EXPECT_OK(ty_attrs_set_float(&c->attrs, name, v));
}
static void set_string(tcase_t *c, const char *name, const char *v) {
  TY_EXPECT_OK(ty_attrs_set_string(&c->attrs, name, v));
}
static void set_ints(tcase_t *c, const char *name, uint32_t n, const int64_t *v) {
  TY_EXPECT_OK(ty_attrs_set_ints(&c->attrs, name, v, n));
}

/* ---- the cases ------------------------------------------------------------ */

static void cases_embedding_matmul(void) {
  tcase_t *c = add_case("embedding", "i32 ids", 1);
  FLT(c, 50, 40);
  add_in(c, K_IDS, TY_DTYPE_I32, DIMS(3, 7), 50, 0);
  c->exact = true;
  c = add_case("embedding", "i64 ids, 64K outputs", 1);
  FLT(c, 100, 64);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(2, 500), 100, 0);
  c->exact = true;
  c = add_case("embedding_backward", "repeated ids", 1);
  FLT(c, 2, 500, 64);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(2, 500), 100, 0);
  set_int(c, "vocab_size", 100);
  c = add_case("embedding_backward", "sparse ids, unused rows", 1);
  FLT(c, 37, 24);
  add_in(c, K_IDS, TY_DTYPE_I32, DIMS(37), 2000, 0);
  set_int(c, "vocab_size", 2000);

  c = add_case("matmul", "[7,13]@[13,9]+bias", 1);
  FLT(c, 7, 13);
  FLT(c, 13, 9);
  FLT(c, 9);
  c = add_case("matmul", "trans_a", 1);
  FLT(c, 13, 7);
  FLT(c, 13, 9);
  set_int(c, "trans_a", 1);
  c = add_case("matmul", "trans_b+bias", 1);
  FLT(c, 7, 13);
  FLT(c, 9, 13);
  FLT(c, 9);
  set_int(c, "trans_b", 1);
  c = add_case("matmul", "trans_a+trans_b", 1);
  FLT(c, 13, 7);
  FLT(c, 9, 13);
  set_int(c, "trans_a", 1);
  set_int(c, "trans_b", 1);
  c = add_case("matmul", "linear [3,11,40]@[40,24]+bias", 1);
  FLT(c, 3, 11, 40);
  FLT(c, 40, 24);
  FLT(c, 24);
  c = add_case("matmul", "batched [4,33,65]@[4,65,47]", 1);
  FLT(c, 4, 33, 65);
  FLT(c, 4, 65, 47);
  c = add_case("matmul", "broadcast [2,1,9,10]@[3,10,8]", 1);
  FLT(c, 2, 1, 9, 10);
  FLT(c, 3, 10, 8);
  c = add_case("matmul", "batched trans_a [2,3,5]@[3,4]", 1);
  FLT(c, 2, 3, 5);
  FLT(c, 3, 4);
  set_int(c, "trans_a", 1);
  /* Past one cache block of the blocked GEMM in each direction (M > 120,
   * K > 256, N > 512), with and without transposes. */
  c = add_case("matmul", "M blocks [250,20]@[20,30]+bias", 1);
  FLT(c, 250, 20);
  FLT(c, 20, 30);
  FLT(c, 30);
  c = add_case("matmul", "K blocks trans_a [600,5]^T@[600,7]", 1);
  FLT(c, 600, 5);
  FLT(c, 600, 7);
  set_int(c, "trans_a", 1);
  c = add_case("matmul", "N blocks trans_b [9,10]@[1100,10]^T", 1);
  FLT(c, 9, 10);
  FLT(c, 1100, 10);
  set_int(c, "trans_b", 1);
  c = add_case("matmul", "[61,200]@[200,90]+bias", 1);
  FLT(c, 61, 200);
  FLT(c, 200, 90);
  FLT(c, 90);
  /* Decode's few rows, which cpu_gemm sends past oneDNN on AVX2 and
   * AVX-512 (the streaming path; cpu_gemm_dot with trans_b on AVX-512):
   * K past a KC slice and off 16, N off the tiles' widths. */
  c = add_case("matmul", "decode [8,300]@[300,200]+bias", 1);
  FLT(c, 8, 300);
  FLT(c, 300, 200);
  FLT(c, 200);
  c = add_case("matmul", "decode lm_head [1,8,100]@[301,100]^T", 1);
  FLT(c, 1, 8, 100);
  FLT(c, 301, 100);
  set_int(c, "trans_b", 1);
  c = add_case("matmul", "decode [16,70]@[97,70]^T+bias", 1);
  FLT(c, 16, 70);
  FLT(c, 97, 70);
  FLT(c, 97);
  set_int(c, "trans_b", 1);
}

static void cases_elementwise(void) {
  const char *ops[4] = {"add", "sub", "mul", "div"};
  for (int i = 0; i < 4; ++i) {
    int kb = i == 3 ? K_NONZERO : K_FLOAT;
    double lo = i == 3 ? 0.5 : -1.0;
    tcase_t *c = add_case(ops[i], "same shape, 60K", 1);
    FLT(c, 60000);
    add_in(c, kb, TY_DTYPE_INVALID, DIMS(60000), lo, 1.5);
    c = add_case(ops[i], "[4,30,50] op [50]", 1);
    FLT(c, 4, 30, 50);
    add_in(c, kb, TY_DTYPE_INVALID, DIMS(50), lo, 1.5);
    c = add_case(ops[i], "[4,1,6] op [5,1]", 1);
    FLT(c, 4, 1, 6);
    add_in(c, kb, TY_DTYPE_INVALID, DIMS(5, 1), lo, 1.5);
    c = add_case(ops[i], "[] op [3,4]", 1);
    add_in(c, K_FLOAT, TY_DTYPE_INVALID, 0, NULL, -1, 1);
    add_in(c, kb, TY_DTYPE_INVALID, DIMS(3, 4), lo, 1.5);
    c = add_case(ops[i], "[300,1] op [1,200]", 1);
    FLT(c, 300, 1);
    add_in(c, kb, TY_DTYPE_INVALID, DIMS(1, 200), lo, 1.5);
  }
  tcase_t *c = add_case("scale", "alpha 0.37, 60K", 1);
  FLT(c, 300, 200);
  set_float(c, "alpha", 0.37);
  c = add_case("scale", "alpha -2", 1);
  FLT(c, 3, 5);
  set_float(c, "alpha", -2.0);

  c = add_case("broadcast_to", "[3,1,5] -> [2,3,4,5]", 1);
  FLT(c, 3, 1, 5);
  set_ints(c, "shape", 4, (int64_t[]){2, 3, 4, 5});
  c->exact = true;
  c = add_case("broadcast_to", "[5] -> [3000,5]", 1);
  FLT(c, 5);
  set_ints(c, "shape", 2, (int64_t[]){3000, 5});
  c->exact = true;
  c = add_case("broadcast_to", "i64 [4,1] -> [4,6]", 1);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(4, 1), 1000, 0);
  set_ints(c, "shape", 2, (int64_t[]){4, 6});
  c->exact = c->fixed = true;

  const char *red[3] = {"reduce_sum", "reduce_mean", "reduce_sumsq"};
  for (int i = 0; i < 3; ++i) {
    c = add_case(red[i], "all axes", 1);
    FLT(c, 4, 5, 6);
    c = add_case(red[i], "axes [1]", 1);
    FLT(c, 4, 5, 6);
    set_ints(c, "axes", 1, (int64_t[]){1});
    c = add_case(red[i], "axes [0,2] keepdims", 1);
    FLT(c, 4, 5, 6);
    set_ints(c, "axes", 2, (int64_t[]){0, 2});
    set_int(c, "keepdims", 1);
    c = add_case(red[i], "axes [-1], 100K", 1);
    FLT(c, 200, 500);
    set_ints(c, "axes", 1, (int64_t[]){-1});
    c = add_case(red[i], "axes [0] (dbias), 100K", 1);
    FLT(c, 500, 200);
    set_ints(c, "axes", 1, (int64_t[]){0});
    c = add_case(red[i], "all of 100K", 1);
    FLT(c, 500, 200);
  }
}

static void cases_norm_activation(void) {
  tcase_t *c = add_case("layernorm", "gamma, beta", 3);
  FLT(c, 4, 5, 32);
  FLT(c, 32);
  FLT(c, 32);
  c = add_case("layernorm", "[64,400] gamma only, offset rows", 3);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(64, 400), 2.0, 4.0);
  FLT(c, 400);
  ABSENT(c);
  c = add_case("layernorm", "no gamma/beta, eps 0.1", 3);
  FLT(c, 3, 17);
  set_float(c, "eps", 0.1);
  c = add_case("layernorm_backward", "[64,400]", 3);
  FLT(c, 64, 400);
  FLT(c, 64, 400);
  FLT(c, 400);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(64), -0.5, 0.5);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(64), 0.5, 2.0);
  c = add_case("layernorm_backward", "no gamma", 3);
  FLT(c, 3, 5, 16);
  FLT(c, 3, 5, 16);
  ABSENT(c);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 5), -0.5, 0.5);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 5), 0.5, 2.0);
  c = add_case("rmsnorm", "[64,400] gamma", 2);
  FLT(c, 64, 400);
  FLT(c, 400);
  c = add_case("rmsnorm", "no gamma", 2);
  FLT(c, 7, 9);
  c = add_case("rmsnorm_backward", "[64,400]", 2);
  FLT(c, 64, 400);
  FLT(c, 64, 400);
  FLT(c, 400);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(64), 0.5, 2.0);
  c = add_case("rmsnorm_backward", "no gamma", 2);
  FLT(c, 6, 10);
  FLT(c, 6, 10);
  ABSENT(c);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(6), 0.5, 2.0);

  const char *unary[2] = {"gelu", "silu"};
  for (int i = 0; i < 2; ++i) {
    c = add_case(unary[i], "70K in [-6,6)", 1);
    add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(70000), -6.0, 6.0);
    c = add_case(unary[i], "[3,5]", 1);
    FLT(c, 3, 5);
  }
  c = add_case("gelu_backward", "70K", 1);
  FLT(c, 70000);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(70000), -6.0, 6.0);
  c = add_case("silu_backward", "70K", 1);
  FLT(c, 70000);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(70000), -6.0, 6.0);
  c = add_case("swiglu", "[300,200]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 200), -6.0, 6.0);
  FLT(c, 300, 200);
  c = add_case("swiglu_backward", "[300,200]", 2);
  FLT(c, 300, 200);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 200), -6.0, 6.0);
  FLT(c, 300, 200);
  c = add_case("softmax", "[64,500] in [-5,5)", 1);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(64, 500), -5.0, 5.0);
  c = add_case("softmax", "[2,3,7]", 1);
  FLT(c, 2, 3, 7);
  c = add_case("softmax_backward", "[64,500]", 1);
  FLT(c, 64, 500);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(64, 500), 0.0, 0.01);
}

static void cases_rope_attention(void) {
  for (int back = 0; back < 2; ++back) {
    const char *op = back ? "rope_backward" : "rope";
    tcase_t *c = add_case(op, "positions < 5000", 1);
    FLT(c, 2, 9, 3, 16);
    add_in(c, K_IDS, TY_DTYPE_I64, DIMS(9), 5000, 0);
    c = add_case(op, "llama3 scaling, i32 positions", 1);
    FLT(c, 2, 9, 3, 16);
    add_in(c, K_IDS, TY_DTYPE_I32, DIMS(9), 300, 0);
    set_string(c, "scaling", "llama3");
    set_float(c, "factor", 8.0);
    set_float(c, "low_freq_factor", 1.0);
    set_float(c, "high_freq_factor", 4.0);
    set_int(c, "original_max_position", 64);
    set_float(c, "theta", 500000.0);
    c = add_case(op, "[4,64,4,32] theta 1e4", 1);
    FLT(c, 4, 64, 4, 32);
    add_in(c, K_IDS, TY_DTYPE_I64, DIMS(64), 2048, 0);
  }
  /* (B, T, S, Hq, Hkv, D, window) */
  static const int64_t shapes[][7] = {
      {2, 70, 80, 4, 2, 16, 0},  /* S > T (KV offset), GQA */
      {2, 70, 80, 4, 2, 16, 20}, /* sliding window */
      {1, 37, 37, 2, 2, 8, 0},   /* S = T */
      {2, 19, 150, 3, 1, 12, 0}, /* MQA, long KV */
      {1, 150, 150, 2, 2, 64, 0}, /* three query blocks of the GEMM kernels */
  };
  for (int i = 0; i < 5; ++i) {
    const int64_t *s = shapes[i];
    char label[64];
    snprintf(label, sizeof(label), "B%lld T%lld S%lld Hq%lld Hkv%lld D%lld w%lld",
             (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3],
             (long long)s[4], (long long)s[5], (long long)s[6]);
    for (int back = 0; back < 2; ++back) {
      tcase_t *c = add_case(back ? "attention_backward" : "attention", label, back ? 3 : 2);
      if (back) FLT(c, s[0], s[1], s[3], s[5]); /* dout */
      FLT(c, s[0], s[1], s[3], s[5]);
      FLT(c, s[0], s[2], s[4], s[5]);
      FLT(c, s[0], s[2], s[4], s[5]);
      if (back) {
        FLT(c, s[0], s[1], s[3], s[5]); /* out: unused by both kernels */
        add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(s[0], s[3], s[1]), 1.0, 3.0);
      }
      if (s[6]) set_int(c, "window", s[6]);
      if (i == 2) set_float(c, "scale", 0.3);
    }
  }
  /* A KV cache of 40 rows filled up to 23 (kv_len input), GQA, as the
   * decode graphs use it: rows 23..39 must not be attended. */
  for (int back = 0; back < 2; ++back) {
    tcase_t *c = add_case(back ? "attention_backward" : "attention", "cache kv_len 23 of 40",
                          back ? 3 : 2);
    if (back) FLT(c, 2, 3, 4, 8);
    FLT(c, 2, 3, 4, 8);
    FLT(c, 2, 40, 2, 8);
    FLT(c, 2, 40, 2, 8);
    if (back) {
      FLT(c, 2, 3, 4, 8);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 3), 1.0, 3.0);
    }
    add_in(c, K_SCALAR, TY_DTYPE_I64, DIMS(), 23, 0);
  }
  /* causal=0 (context parallel's earlier key blocks), S < T, with dlse
   * (the lse output's gradient) in the backward; and dlse under a causal
   * window with kv_len absent. */
  for (int back = 0; back < 2; ++back) {
    tcase_t *c = add_case(back ? "attention_backward" : "attention", "causal=0 T70 S50 GQA",
                          back ? 3 : 2);
    if (back) FLT(c, 2, 70, 4, 16);
    FLT(c, 2, 70, 4, 16);
    FLT(c, 2, 50, 2, 16);
    FLT(c, 2, 50, 2, 16);
    if (back) {
      FLT(c, 2, 70, 4, 16);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 70), 1.0, 3.0);
      ABSENT(c);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 70), -1.0, 1.0);
    }
    set_int(c, "causal", 0);
  }
  tcase_t *c = add_case("attention_backward", "dlse, window 20", 3);
  FLT(c, 1, 70, 4, 16);
  FLT(c, 1, 70, 4, 16);
  FLT(c, 1, 80, 2, 16);
  FLT(c, 1, 80, 2, 16);
  FLT(c, 1, 70, 4, 16);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(1, 4, 70), 1.0, 3.0);
  ABSENT(c);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(1, 4, 70), -1.0, 1.0);
  set_int(c, "window", 20);
  /* attention_merge: lse parts far apart in some rows, near in others. */
  c = add_case("attention_merge", "[2,33,4,24]", 2);
  FLT(c, 2, 33, 4, 24);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 33), -8.0, 8.0);
  FLT(c, 2, 33, 4, 24);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 33), -8.0, 8.0);
  for (int with_dout = 0; with_dout < 2; ++with_dout) {
    c = add_case("attention_merge_backward", with_dout ? "dout and dlse" : "dlse only", 4);
    /* (out_a, lse_a), (out_b, lse_b), (out, lse); the merged lse above
     * both parts' so that weights stay at most 1 as in a real merge. */
    for (int p = 0; p < 3; ++p) {
      FLT(c, 2, 33, 4, 24);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 33), p < 2 ? -4.0 : 4.0, p < 2 ? 4.0 : 5.0);
    }
    if (with_dout) {
      FLT(c, 2, 33, 4, 24);
    } else {
      ABSENT(c);
    }
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2, 4, 33), -1.0, 1.0);
  }
}

static void cases_loss_dropout_views(void) {
  tcase_t *c = add_case("cross_entropy", "[3,50,300], some ignored", 1);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 300), -4.0, 4.0);
  add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(3, 50), 300, 0);
  c = add_case("cross_entropy", "i32 targets", 1);
  FLT(c, 5, 11);
  add_in(c, K_TARGETS, TY_DTYPE_I32, DIMS(5), 11, 0);
  c = add_case("cross_entropy_backward", "[3,50,300]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 300), -4.0, 4.0);
  add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(3, 50), 300, 0);
  c = add_case("cross_entropy_backward", "i32 targets", 1);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(5), -1.0, 1.0);
  FLT(c, 5, 11);
  add_in(c, K_TARGETS, TY_DTYPE_I32, DIMS(5), 11, 0);

  /* Chunks that leave a short last one; bf16 goes through f32 copies. */
  c = add_case("linear_cross_entropy", "[3,50,64] x [300,64], chunk 16", 2);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 64), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 64), -0.5, 0.5);
  add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(3, 50), 300, 0);
  set_int(c, "chunk", 16);
  c = add_case("linear_cross_entropy_backward", "[3,50,64] x [300,64], chunk 16", 2);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 64), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 64), -0.5, 0.5);
  add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(3, 50), 300, 0);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), 5.0, 6.0); /* lse */
  set_int(c, "chunk", 16);

  c = add_case("dropout", "p 0.3, 50K", 1);
  FLT(c, 50000);
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(2), 0, 0);
  set_float(c, "p", 0.3);
  set_int(c, "stream", 7);
  c->exact = true;
  c = add_case("dropout", "p 0.5, 21 elements", 1);
  FLT(c, 3, 7);
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(2), 0, 0);
  set_float(c, "p", 0.5);
  set_int(c, "stream", 0);
  c->exact = true;
  /* Context parallel's numbering (issue 31): the two slices [2, 8) and
   * [18, 24) of a [3, 24, 5] tensor draw the whole tensor's bits. */
  {
    const int64_t starts[2] = {2, 18};
    for (int backward = 0; backward < 2; ++backward) {
      c = add_case(backward ? "dropout_backward" : "dropout", "p 0.3, slices of a sequence of 24",
                   1);
      FLT(c, 3, 12, 5);
      add_in(c, K_RNG, TY_DTYPE_I64, DIMS(2), 0, 0);
      set_float(c, "p", 0.3);
      set_int(c, "stream", 5);
      set_int(c, "seq_len", 24);
      set_ints(c, "seq_starts", 2, starts);
      c->exact = true;
      c->refused_on = "opencl"; /* it refuses seq_len by name; cuda runs it */
    }
  }
  c = add_case("dropout_backward", "p 0.1, 1001 elements", 1);
  FLT(c, 1001);
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(2), 0, 0);
  set_float(c, "p", 0.1);
  set_int(c, "stream", 3);
  c->exact = true;

  static const ty_dtype_t casts[][2] = {
      {TY_DTYPE_F32, TY_DTYPE_BF16}, {TY_DTYPE_BF16, TY_DTYPE_F32},
      {TY_DTYPE_F32, TY_DTYPE_F16},  {TY_DTYPE_F16, TY_DTYPE_BF16},
      {TY_DTYPE_BF16, TY_DTYPE_F16}, {TY_DTYPE_F32, TY_DTYPE_F64},
      {TY_DTYPE_F64, TY_DTYPE_BF16}, {TY_DTYPE_I32, TY_DTYPE_I64},
      {TY_DTYPE_I64, TY_DTYPE_I32},  {TY_DTYPE_F32, TY_DTYPE_F32},
  };
  for (size_t i = 0; i < sizeof(casts) / sizeof(casts[0]); ++i) {
    char label[64];
    snprintf(label, sizeof(label), "%s -> %s", ty_dtype_name(casts[i][0]),
             ty_dtype_name(casts[i][1]));
    c = add_case("cast", label, 1);
    bool is_int = casts[i][0] == TY_DTYPE_I32 || casts[i][0] == TY_DTYPE_I64;
    add_in(c, is_int ? K_IDS : K_FLOAT, casts[i][0], DIMS(40, 700), is_int ? 1e9 : -100.0,
           100.0);
    set_string(c, "dtype", ty_dtype_name(casts[i][1]));
    c->exact = c->fixed = true;
  }

  c = add_case("reshape", "[3,4,5] -> [-1,6]", 1);
  FLT(c, 3, 4, 5);
  set_ints(c, "shape", 2, (int64_t[]){-1, 6});
  c->exact = true;
  c = add_case("transpose", "[2,3,4,5] perm [0,2,1,3]", 1);
  FLT(c, 2, 3, 4, 5);
  set_ints(c, "perm", 4, (int64_t[]){0, 2, 1, 3});
  c->exact = true;
  c = add_case("transpose", "[40,70] perm [1,0] (tiles)", 1);
  FLT(c, 40, 70);
  set_ints(c, "perm", 2, (int64_t[]){1, 0});
  c->exact = true;
  c = add_case("transpose", "[3,4,5] perm [2,0,1]", 1);
  FLT(c, 3, 4, 5);
  set_ints(c, "perm", 3, (int64_t[]){2, 0, 1});
  c->exact = true;
  c = add_case("transpose", "[2,64,48,1] perm [0,2,3,1]", 1);
  FLT(c, 2, 64, 48, 1);
  set_ints(c, "perm", 4, (int64_t[]){0, 2, 3, 1});
  c->exact = true;
  c = add_case("transpose", "i64 [5,6] perm [1,0]", 1);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(5, 6), 1e12, 0);
  set_ints(c, "perm", 2, (int64_t[]){1, 0});
  c->exact = c->fixed = true;
  c = add_case("slice", "[5,6,7]", 1);
  FLT(c, 5, 6, 7);
  set_ints(c, "starts", 3, (int64_t[]){1, 0, 2});
  set_ints(c, "sizes", 3, (int64_t[]){3, 6, 4});
  c->exact = true;
  c = add_case("slice", "[100,300]", 1);
  FLT(c, 100, 300);
  set_ints(c, "starts", 2, (int64_t[]){10, 5});
  set_ints(c, "sizes", 2, (int64_t[]){50, 200});
  c->exact = true;
  c = add_case("slice_backward", "[3,6,4] in [5,6,7]", 1);
  FLT(c, 3, 6, 4);
  set_ints(c, "shape", 3, (int64_t[]){5, 6, 7});
  set_ints(c, "starts", 3, (int64_t[]){1, 0, 2});
  c->exact = true;
  c = add_case("concat", "axis 1, three inputs", 1);
  FLT(c, 2, 3, 4);
  FLT(c, 2, 5, 4);
  FLT(c, 2, 1, 4);
  set_int(c, "axis", 1);
  c->exact = true;
  c = add_case("concat", "axis -1", 1);
  FLT(c, 3, 2);
  FLT(c, 3, 5);
  set_int(c, "axis", -1);
  c->exact = true;
  c = add_case("concat", "axis 0, 100K", 1);
  FLT(c, 200, 300);
  FLT(c, 150, 300);
  set_int(c, "axis", 0);
  c->exact = true;
}

static void cases_optim_kv(void) {
  for (int inplace = 0; inplace < 2; ++inplace) {
    tcase_t *c = add_case("adamw_update", inplace ? "in place, 3 steps" : "60K", 3);
    FLT(c, 300, 200)->state = inplace;
    add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 200), -0.1, 0.1);
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300, 200), -0.01, 0.01)->state = inplace;
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300, 200), 0.0, 1e-3)->state = inplace;
    SCALAR(c, 1e-2);  /* lr */
    SCALAR(c, 0.9);   /* beta1 */
    SCALAR(c, 0.999); /* beta2 */
    SCALAR(c, 1e-8);  /* eps */
    SCALAR(c, 0.1);   /* weight_decay */
    add_in(c, K_SCALAR, TY_DTYPE_I64, 0, NULL, inplace ? 1 : 7, 0);
    if (inplace) {
      c->update[0] = 0;
      c->update[1] = 2;
      c->update[2] = 3;
      c->runs = 3;
    }
  }
  for (int v = 0; v < 4; ++v) {
    static const char *labels[4] = {"momentum", "nesterov", "no momentum",
                                    "in place nesterov, 3 steps"};
    tcase_t *c = add_case("sgd_update", labels[v], 2);
    FLT(c, 300, 200)->state = v == 3;
    add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 200), -0.1, 0.1);
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300, 200), -0.1, 0.1)->state = v == 3;
    SCALAR(c, 0.05);
    SCALAR(c, v == 2 ? 0.0 : 0.9);
    SCALAR(c, 0.01);
    if (v == 1 || v == 3) set_int(c, "nesterov", 1);
    if (v == 3) {
      c->update[0] = 0;
      c->update[1] = 2;
      c->runs = 3;
    }
  }
  /* Adafactor: factored with momentum in place, and an unfactored vector. */
  for (int v = 0; v < 2; ++v) {
    tcase_t *c = add_case("adafactor_update", v ? "vector, relative step" :
                                                  "factored + momentum in place, 3 steps", v ? 2 : 4);
    if (v == 0) {
      FLT(c, 300, 200)->state = true;
      add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(300, 200), -0.1, 0.1);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300), 1e-4, 1e-3)->state = true;
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(200), 1e-4, 1e-3)->state = true;
      add_in(c, K_ABSENT, TY_DTYPE_F32, 0, NULL, 0, 0);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300, 200), -0.01, 0.01)->state = true;
      SCALAR(c, 1e-2); /* lr */
      SCALAR(c, 0.1);  /* weight_decay */
      add_in(c, K_SCALAR, TY_DTYPE_I64, 0, NULL, 4, 0);
      SCALAR(c, 0.9);  /* beta1 */
      c->update[0] = 0;
      c->update[1] = 2;
      c->update[2] = 3;
      c->update[3] = 5;
      c->runs = 3;
    } else {
      FLT(c, 5001);
      add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(5001), -1.0, 1.0);
      add_in(c, K_ABSENT, TY_DTYPE_F32, 0, NULL, 0, 0);
      add_in(c, K_ABSENT, TY_DTYPE_F32, 0, NULL, 0, 0);
      add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(5001), 1e-4, 1e-3);
      add_in(c, K_ABSENT, TY_DTYPE_F32, 0, NULL, 0, 0);
      SCALAR(c, 0.0);
      SCALAR(c, 0.0);
      add_in(c, K_SCALAR, TY_DTYPE_I64, 0, NULL, 2, 0);
      set_int(c, "relative_step", 1);
    }
  }
  {
    tcase_t *c = add_case("global_norm_scale", "3 sums", 2);
    SCALAR(c, 0.5);
    SCALAR(c, 0.25);
    SCALAR(c, 1.5);
    SCALAR(c, 0.125);
  }
  for (int v = 0; v < 2; ++v) {
    tcase_t *c = add_case("clip_by_global_norm",
                          v ? "max_norm 0 (norm only)" : "clips, mixed dtypes", 4);
    SCALAR(c, v ? 0.0 : 0.5);
    FLT(c, 300, 200);
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(17), -1.0, 1.0);
    FLT(c, 5, 5);
  }
  for (int inplace = 0; inplace < 2; ++inplace) {
    tcase_t *c = add_case("kv_cache_write", inplace ? "in place" : "copy", 1);
    FLT(c, 2, 10, 3, 8)->state = inplace;
    FLT(c, 2, 4, 3, 8);
    add_in(c, K_SCALAR, TY_DTYPE_I64, 0, NULL, 3, 0);
    c->exact = true;
    if (inplace) c->update[0] = 0;
  }
  tcase_t *c = add_case("kv_cache_write", "fills the cache to the end", 1);
  FLT(c, 1, 6, 2, 4);
  FLT(c, 1, 2, 2, 4);
  add_in(c, K_SCALAR, TY_DTYPE_I64, 0, NULL, 4, 0);
  c->exact = true;
  /* The paged KV cache (issue 29): slots in three blocks and a padding
   * row (-1), written into a copy and in place. */
  static const int64_t slots[4] = {13, -1, 0, 29};
  for (int inplace = 0; inplace < 2; ++inplace) {
    c = add_case("paged_kv_write", inplace ? "in place" : "copy", 1);
    FLT(c, 6, 5, 2, 8)->state = inplace;
    FLT(c, 4, 2, 8);
    add_in(c, K_LIST, TY_DTYPE_I64, DIMS(4), 0, 0)->list = slots;
    c->exact = true;
    if (inplace) c->update[0] = 0;
  }
  /* Attention over shuffled blocks (BS 5, GQA 4:2): a prefill chunk of
   * sequence 0 (positions 9..12) mixed with decode rows of sequences 1 and
   * 2, an early position of 2 and a padding row; -1 marks unused table
   * entries, which no row reads. */
  static const int64_t table5[3 * 5] = {7, 2, 5, -1, -1, 0, -1, -1, -1, -1, 8, 3, 1, 6, -1};
  static const int64_t seq5[8] = {0, 2, -1, 0, 1, 0, 2, 0};
  static const int64_t pos5[8] = {9, 15, 0, 10, 4, 11, 1, 12};
  c = add_case("paged_attention", "mixed step, BS 5, GQA", 1);
  FLT(c, 8, 4, 8);
  FLT(c, 9, 5, 2, 8);
  FLT(c, 9, 5, 2, 8);
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(3, 5), 0, 0)->list = table5;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(8), 0, 0)->list = seq5;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(8), 0, 0)->list = pos5;
  /* BS 16, heads 2:2, a window of 3 that crosses a block boundary (15..17),
   * and an explicit scale. */
  static const int64_t table16[2 * 3] = {3, 1, -1, 0, -1, -1};
  static const int64_t seq16[4] = {1, 0, 0, -1};
  static const int64_t pos16[4] = {6, 17, 19, 0};
  c = add_case("paged_attention", "window 3, BS 16, MHA", 1);
  FLT(c, 4, 2, 16);
  FLT(c, 4, 16, 2, 16);
  FLT(c, 4, 16, 2, 16);
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(2, 3), 0, 0)->list = table16;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(4), 0, 0)->list = seq16;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(4), 0, 0)->list = pos16;
  set_int(c, "window", 3);
  set_float(c, "scale", 0.3);
  /* Serving's shapes for the f32 path (cpu_kernels_paged.c): BS 16, heads
   * of 40 (two 16-lane chunks and a tail), GQA 8:2, rows across up to three
   * blocks; then 5 kv heads of 64 under a window of 20 (3 rows on 3 threads
   * split a row's heads 3 + 2). */
  static const int64_t table_g[3 * 3] = {4, 0, 6, 2, 5, -1, 1, -1, -1};
  static const int64_t seq_g[6] = {0, 0, 1, 1, -1, 2};
  static const int64_t pos_g[6] = {40, 47, 20, 31, 0, 9};
  c = add_case("paged_attention", "BS 16, D 40, GQA 8:2, 3 blocks", 1);
  FLT(c, 6, 8, 40);
  FLT(c, 7, 16, 2, 40);
  FLT(c, 7, 16, 2, 40);
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(3, 3), 0, 0)->list = table_g;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(6), 0, 0)->list = seq_g;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(6), 0, 0)->list = pos_g;
  static const int64_t table_w[1 * 4] = {3, 1, 0, 2};
  static const int64_t seq_w[3] = {0, 0, 0};
  static const int64_t pos_w[3] = {63, 30, 5};
  c = add_case("paged_attention", "BS 16, 5 heads of 64, window 20", 1);
  FLT(c, 3, 5, 64);
  FLT(c, 4, 16, 5, 64);
  FLT(c, 4, 16, 5, 64);
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(1, 4), 0, 0)->list = table_w;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(3), 0, 0)->list = seq_w;
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(3), 0, 0)->list = pos_w;
  set_int(c, "window", 20);
  /* One process is world 1: all_reduce is the identity for both reductions. */
  for (int avg = 0; avg < 2; ++avg) {
    c = add_case("all_reduce", avg ? "avg, world 1" : "sum, world 1", 1);
    FLT(c, 7, 33);
    set_string(c, "reduce", avg ? "avg" : "sum");
    c->exact = true;
  }
  /* Context parallel's gathers (issue 31): one part is the identity. */
  c = add_case("all_gather", "one part, axis 1", 1);
  FLT(c, 2, 6, 3);
  set_int(c, "axis", 1);
  c->exact = true;
  c = add_case("reduce_scatter", "one part, axis 1", 1);
  FLT(c, 2, 6, 3);
  set_int(c, "axis", 1);
  c->exact = true;
  /* The tensor-parallel region ops (issue 17): the identity at world 1. */
  c = add_case("tp_copy", "world 1", 1);
  FLT(c, 5, 17);
  c->exact = true;
  for (int max = 0; max < 2; ++max) {
    c = add_case("tp_reduce", max ? "max, world 1" : "sum, world 1", 1);
    FLT(c, 3, 40);
    set_string(c, "reduce", max ? "max" : "sum");
    c->exact = true;
  }
}

/* The vocabulary-parallel ops: rank 1's shard of a vocabulary of 300 over
 * 2 ranks (rows [150, 300) of 150), and a padded one (rows [140, 279) held
 * in 140, the last padding). Positive sums for the loss; m near the
 * logits' scale. */
static void cases_vocab(void) {
  tcase_t *c = add_case("vocab_embedding", "padded shard of 279", 1);
  FLT(c, 140, 40);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(3, 50), 279, 0);
  set_int(c, "vocab_start", 140);
  set_int(c, "vocab_valid", 139);
  c->exact = true;
  c = add_case("vocab_embedding_backward", "padded shard of 279", 1);
  FLT(c, 3, 50, 40);
  add_in(c, K_IDS, TY_DTYPE_I32, DIMS(3, 50), 279, 0);
  set_int(c, "vocab_start", 140);
  set_int(c, "vocab_valid", 139);
  set_int(c, "vocab_size", 140);
  c = add_case("vocab_max", "[3,50,140], 139 real", 1);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 140), -4.0, 4.0);
  set_int(c, "vocab_valid", 139);
  c->exact = true;
  c = add_case("vocab_max_backward", "[3,50,140]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 140), -4.0, 4.0);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), 3.9, 4.0);
  set_int(c, "vocab_valid", 139);
  for (int back = 0; back < 2; ++back) {
    c = add_case(back ? "vocab_ce_sums_backward" : "vocab_ce_sums", "[3,50,150] of 300",
                 back ? 2 : 1);
    if (back) add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50, 2), -1.0, 1.0);
    add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(3, 50, 150), -4.0, 4.0);
    add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(3, 50), 300, 0);
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), 3.0, 4.0);
    set_int(c, "vocab_start", 150);
  }
  c = add_case("vocab_ce_loss", "[3,50]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50, 2), 0.5, 3.0);
  add_in(c, K_TARGETS, TY_DTYPE_I32, DIMS(3, 50), 300, 0);
  set_int(c, "vocab_size", 300);
  c = add_case("vocab_ce_loss_backward", "[3,50]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(3, 50, 2), 0.5, 3.0);
  add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(3, 50), 300, 0);
  set_int(c, "vocab_size", 300);
}

/* Shapes that reach the long paths of device kernels (the cuda backend's,
 * run here through its CPU emulator): norm parameter gradients summed in
 * row chunks, rows too wide to stay in registers, a token frequent enough
 * that its gradient rows are found by scanning the ids, 50257-wide rows. */
static void cases_long_paths(void) {
  for (int rms = 0; rms < 2; ++rms) {
    tcase_t *c = add_case(rms ? "rmsnorm_backward" : "layernorm_backward", "[300,48]",
                          rms ? 2 : 3);
    FLT(c, 300, 48);
    FLT(c, 300, 48);
    FLT(c, 48);
    if (!rms) add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300), -0.5, 0.5);
    add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(300), 0.5, 2.0);
  }
  tcase_t *c = add_case("layernorm", "[6,2052]", 3);
  FLT(c, 6, 2052);
  FLT(c, 2052);
  FLT(c, 2052);
  c = add_case("embedding_backward", "6000 ids of 2 tokens", 1);
  FLT(c, 6000, 40);
  add_in(c, K_IDS, TY_DTYPE_I32, DIMS(6000), 2, 0);
  set_int(c, "vocab_size", 3);
  c = add_case("cross_entropy", "[2,50257]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(2, 50257), -4.0, 4.0);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(2), 50257, 0);
  c = add_case("cross_entropy_backward", "[2,50257]", 1);
  add_in(c, K_FLOAT, TY_DTYPE_F32, DIMS(2), -1.0, 1.0);
  add_in(c, K_FLOAT, TY_DTYPE_INVALID, DIMS(2, 50257), -4.0, 4.0);
  add_in(c, K_IDS, TY_DTYPE_I64, DIMS(2), 50257, 0);
}

/* Token selection (issue 29): logits that are a random permutation of a
 * grid per row (K_PERM: distinct, 0.25 apart, exact in bf16 and f16), so
 * f32 devices (the emulated cuda) and the f64 reference agree on every cut
 * and draw. One row per mode: greedy, plain temperature, top_k, top_p,
 * min_p, all three; penalties with a history (-1 pads) that are exact in
 * f32 (repetition 2 and 1.5, presence 0.5, frequency 0.25); a vocabulary
 * wider than a device's block of threads. */
static void cases_sample(void) {
  /* params rows (sample_params.h): temperature, top_k, top_p, min_p,
   * repetition, presence, frequency */
  static const double modes[6 * 7] = {
      0, 0, 1, 0, 1, 0, 0,      /* greedy */
      1, 0, 1, 0, 1, 0, 0,      /* temperature only */
      0.7, 5, 1, 0, 1, 0, 0,    /* top_k */
      1.2, 0, 0.6, 0, 1, 0, 0,  /* top_p */
      1, 0, 1, 0.2, 1, 0, 0,    /* min_p */
      0.9, 10, 0.8, 0.05, 1, 0, 0};
  static const double penalties[4 * 7] = {
      0, 0, 1, 0, 2, 0.5, 0.25,   1, 0, 1, 0, 2, 0.5, 0.25,
      0.8, 3, 1, 0, 2, 0.5, 0.25, 0, 0, 1, 0, 1.5, 0.5, 0.25};
  /* A random history gives random counts: greedy rows whose penalized
   * logits stay exact in f32 (multiples of 1/8 on the 0.25 grid), so a
   * device's f32 and the reference's f64 break ties alike. */
  static const double greedy_penalties[4 * 7] = {
      0, 0, 1, 0, 2, 0.5, 0.25,   0, 0, 1, 0, 1, 0.5, 0,
      0, 0, 1, 0, 2, 0, 0.25,     0, 0, 1, 0, 0.5, 0.25, 0.5};
  static const double wide[3 * 7] = {
      0.8, 50, 0.9, 0, 1, 0, 0,   1, 0, 0.6, 0, 1, 0, 0,   0, 0, 1, 0, 1, 0, 0};
  static const int64_t history[4 * 6] = {3, 3, 7, -1, -1, -1,  0, 1, 2, 3, 4, 5,
                                         -1, -1, -1, -1, -1, -1,  15, 15, 15, 8, 9, -1};
  tcase_t *c = add_case("sample", "one row per mode, V 64", 2);
  add_in(c, K_PERM, TY_DTYPE_INVALID, DIMS(6, 64), 0.25, 0);
  add_in(c, K_VALUES, TY_DTYPE_F32, DIMS(6, 7), 0, 0)->values = modes;
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(6, 2), 0, 0);
  c = add_case("sample", "penalties, history with -1", 2);
  add_in(c, K_PERM, TY_DTYPE_INVALID, DIMS(4, 16), 0.25, 0);
  add_in(c, K_VALUES, TY_DTYPE_F32, DIMS(4, 7), 0, 0)->values = penalties;
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(4, 2), 0, 0);
  add_in(c, K_LIST, TY_DTYPE_I64, DIMS(4, 6), 0, 0)->list = history;
  c = add_case("sample", "penalties, long random history", 2);
  add_in(c, K_PERM, TY_DTYPE_INVALID, DIMS(4, 16), 0.25, 0);
  add_in(c, K_VALUES, TY_DTYPE_F32, DIMS(4, 7), 0, 0)->values = greedy_penalties;
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(4, 2), 0, 0);
  add_in(c, K_TARGETS, TY_DTYPE_I64, DIMS(4, 40), 16, 0);
  c = add_case("sample", "V 3000", 2);
  add_in(c, K_PERM, TY_DTYPE_INVALID, DIMS(3, 3000), 0.003, 0);
  add_in(c, K_VALUES, TY_DTYPE_F32, DIMS(3, 7), 0, 0)->values = wide;
  add_in(c, K_RNG, TY_DTYPE_I64, DIMS(3, 2), 0, 0);
  static const int64_t ks[3] = {1, 5, 20};
  for (int i = 0; i < 3; ++i) {
    char label[32];
    snprintf(label, sizeof(label), "k %lld", (long long)ks[i]);
    c = add_case("top_logprobs", label, 2);
    add_in(c, K_PERM, TY_DTYPE_INVALID, DIMS(4, i == 2 ? 3000 : 64), i == 2 ? 0.003 : 0.25, 0);
    set_int(c, "k", ks[i]);
  }
}

const tcase_t *cpu_test_cases(int *out_count) {
  if (g_case_count) {
    *out_count = g_case_count;
    return g_cases;
  }
  cases_embedding_matmul();
  cases_vocab();
  cases_elementwise();
  cases_norm_activation();
  cases_rope_attention();
  cases_loss_dropout_views();
  cases_optim_kv();
  cases_sample();
  cases_long_paths();
  *out_count = g_case_count;
  return g_cases;
}
