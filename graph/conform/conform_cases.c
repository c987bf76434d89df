/* The conformance case table: every op of op set v1 with one or more cases
 * (shapes, attributes, dtype variants and input generators that respect the
 * op's constraints) and the NMSE bound classes they are checked against.
 * The spec language is described in graph/conform/conform.h. */
#include "graph/conform/conform.h"

/* ---- bound classes ----
 *
 * NMSE compares against the oracle's f64 result, which is never rounded to
 * the storage dtype, so even a perfect backend shows the rounding of its own
 * outputs: an output rounded once to bf16 (8 significant bits) has NMSE
 * about 3e-6, to f16 (11 bits) about 4e-8, to f32 about 1e-15. A single
 * element that is wrong by its own size in a tensor of n elements adds about
 * 1/n, and cases keep n small enough (at most a few thousand) that such a
 * slip fails every bound but the looser reduction ones. */
static const ty_conform_bound_t ty_bound_exact = {
    "exact", 0.0, 0.0, 0.0,
    "moves, gathers, selects or converts values by a documented rounding "
    "(views, embedding gathers, casts, kv-cache writes): every element must "
    "be bit-identical to the oracle's"};

static const ty_conform_bound_t ty_bound_elementwise = {
    "elementwise", 1e-10, 1e-4, 1e-6,
    "a few flops per element, computed in f32: f32 math and library "
    "transcendentals err by a few ulp (NMSE <= 1e-13); 1e-10 leaves 1000x "
    "room. bf16/f16: rounding the output alone gives ~3e-6 / ~4e-8; the "
    "bound allows a few rounded intermediates (~30x), not a wrong element"};

static const ty_conform_bound_t ty_bound_reduction = {
    "reduction", 1e-9, 1e-4, 1e-6,
    "sums over up to ~1000 terms (matmul, norms, softmax, attention, "
    "scatter-adds, losses) accumulated in f32: the error of a plain f32 sum "
    "grows with the number of terms (up to n*2^-24 relative to the sum of "
    "magnitudes, ~1e-4 for n = 1000 in the worst case, far less for random "
    "signs), so f32 gets 10x the elementwise bound; in bf16/f16 the output "
    "rounding still dominates when the accumulator is f32 (an accumulator "
    "in the storage dtype fails)"};

static const ty_conform_bound_t ty_bound_rope = {
    "rope", 1e-8, 1e-4, 1e-6,
    "rotation angles pos*inv_freq reach ~4e3 rad at the positions used; an "
    "angle formed in f32 there is off by up to ~2e-4 rad (NMSE ~1e-9), "
    "which real kernels do (they form the angle in f32 as Hugging Face "
    "does), so f32 gets 1e-8; a wrong frequency band is off by O(1)"};

static const ty_conform_bound_t ty_bound_chain = {
    "chain", 1e-9, 3e-4, 3e-6,
    "backward graphs of several ops whose intermediates are rounded to the "
    "storage dtype between nodes (the oracle keeps them in f64): each "
    "rounding adds ~3e-6 (bf16) / ~4e-8 (f16) and quotients or "
    "normalizations amplify it a few times, so bf16/f16 get 3x the single-op "
    "bound; f32 as for reductions"};

static const ty_conform_bound_t ty_bound_select = {
    "select", 1e-10, 1e-10, 1e-10,
    "token selection (sample, top_logprobs): the ids must be the oracle's "
    "(on logits spelled as a permuted grid, perm=, every cut and draw has "
    "a margin far above f32 rounding; one wrong id among ids of ~30 adds "
    "~1e-3), and the log-probabilities are f32 outputs computed in f32 "
    "from the stored logits (~1e-14), whatever the logits' dtype, so every "
    "dtype gets the f32 elementwise bound"};

static const ty_conform_bound_t *const ty_bounds[] = {
    &ty_bound_exact, &ty_bound_elementwise, &ty_bound_reduction, &ty_bound_rope,
    &ty_bound_chain, &ty_bound_select,
};

uint32_t ty_conform_bound_count(void) {
  return (uint32_t)(sizeof(ty_bounds) / sizeof(ty_bounds[0]));
}

const ty_conform_bound_t *ty_conform_bound_at(uint32_t i) {
  return i < ty_conform_bound_count() ? ty_bounds[i] : NULL;
}

/* ---- the cases ---- */

#define FLOATS (TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) | \
                TY_DTYPE_BIT(TY_DTYPE_F16))
#define ONLY(d) TY_DTYPE_BIT(TY_DTYPE_##d)
#define EXACT &ty_bound_exact
#define ELEM &ty_bound_elementwise
#define RED &ty_bound_reduction
#define ROPE &ty_bound_rope
#define CHAIN &ty_bound_chain
#define SEL &ty_bound_select

/* op, name, inputs, attrs, derive, updates, dtypes, bound, backward bound */
#define C(op, name, in, at, fwd, bwd) {op, name, in, at, NULL, NULL, FLOATS, fwd, bwd}
#define CD(op, name, in, at, dtypes, fwd, bwd) {op, name, in, at, NULL, NULL, dtypes, fwd, bwd}
#define CX(op, name, in, at, derive, updates, fwd) \
  {op, name, in, at, derive, updates, FLOATS, fwd, NULL}

#define BINARY(op, b, bwd)                                                   \
  C(op, "same-shape", "F[4,33] F[4,33]" b, "", ELEM, bwd),                   \
  C(op, "bcast-row", "F[2,3,8] F[8]" b, "", ELEM, bwd),                      \
  C(op, "bcast-both", "F[4,1,6] F[3,1]" b, "", ELEM, bwd),                   \
  C(op, "scalar-b", "F[5,7] F[]" b, "", ELEM, bwd)

static const ty_conform_case_t ty_cases[] = {
    /* ---- embeddings ---- */
    C("embedding", "gather", "F[50,16] i64[3,7]:ids=50", "", EXACT, RED),
    C("embedding", "i32-ids", "F[64,8] i32[21]:ids=64", "", EXACT, RED),
    C("embedding", "odd-rows", "F[1001,33] i64[2,9]:ids=1001", "", EXACT, RED),
    C("embedding_backward", "scatter-add", "F[3,7,16] i64[3,7]:ids=10", "vocab_size=10",
      RED, NULL),
    C("embedding_backward", "unused-rows", "F[12,8] i32[12]:ids=40", "vocab_size=40", RED,
      NULL),

    /* ---- linear algebra and elementwise ---- */
    C("matmul", "plain", "F[8,32] F[32,16]", "", RED, RED),
    C("matmul", "bias", "F[8,32] F[32,16] F[16]", "", RED, RED),
    C("matmul", "trans-a", "F[32,8] F[32,16]", "trans_a=1", RED, RED),
    C("matmul", "trans-b-bias", "F[8,32] F[16,32] F[16]", "trans_b=1", RED, RED),
    C("matmul", "trans-ab", "F[32,8] F[16,32]", "trans_a=1 trans_b=1", RED, RED),
    C("matmul", "batched", "F[3,8,32] F[3,32,16]", "", RED, RED),
    C("matmul", "linear", "F[2,5,32] F[32,16] F[16]", "", RED, RED),
    C("matmul", "bcast-batch", "F[2,1,4,16] F[3,16,8]", "", RED, RED),
    C("matmul", "batched-trans-b", "F[2,3,4,16] F[2,3,8,16]", "trans_b=1", RED, RED),
    C("matmul", "long-k", "F[4,256] F[256,8]", "", RED, RED),
    /* Sizes off every power of two reach the remainder paths of tiled and
     * vectorized kernels; the large one spans several tiles. */
    C("matmul", "odd-sizes", "F[37,67] F[67,29] F[29]", "", RED, RED),
    C("matmul", "large", "F[2,64,192] F[192,160]", "", RED, RED),
    BINARY("add", "", RED),
    BINARY("sub", "", RED),
    BINARY("mul", "", CHAIN),
    BINARY("div", ":away", CHAIN),
    C("scale", "negative", "F[6,40]", "alpha=-1.75", ELEM, ELEM),
    C("scale", "scalar", "F[]", "alpha=3.0", ELEM, ELEM),
    C("broadcast_to", "lead-and-inner", "F[3,1]", "shape=[2,3,5]", EXACT, RED),
    C("broadcast_to", "rows", "F[5]", "shape=[4,5]", EXACT, RED),
    CD("broadcast_to", "i64", "i64[2,1]", "shape=[4,2,3]", ONLY(I64), EXACT, NULL),

    /* ---- reductions (whole-tensor sums of positive values, so the sum is
     * never near zero and its relative error stays meaningful) ---- */
    C("reduce_sum", "all", "F[6,50]:u=0.1,1", "", RED, EXACT),
    C("reduce_sum", "middle", "F[4,64,3]", "axes=[1]", RED, EXACT),
    C("reduce_sum", "outer-keepdims", "F[5,6,7]", "axes=[0,2] keepdims=1", RED, EXACT),
    C("reduce_sum", "long-rows", "F[8,300]", "axes=[-1]", RED, EXACT),
    C("reduce_sum", "odd-rows", "F[3,1001]", "axes=[-1]", RED, EXACT),
    C("reduce_mean", "all", "F[5,40]:u=0.1,1", "", RED, ELEM),
    C("reduce_mean", "first", "F[64,5]", "axes=[0]", RED, ELEM),
    C("reduce_mean", "last-keepdims", "F[3,4,50]", "axes=[-1] keepdims=1", RED, ELEM),
    C("reduce_sumsq", "all", "F[7,40]", "", RED, ELEM),
    C("reduce_sumsq", "rows", "F[6,128]", "axes=[1]", RED, ELEM),

    /* ---- normalization ---- */
    C("layernorm", "affine", "F[4,3,64] F[64] F[64]", "", RED, CHAIN),
    C("layernorm", "plain", "F[6,48]", "", RED, CHAIN),
    C("layernorm", "gamma-eps", "F[2,5,32] F[32]", "eps=1e-3", RED, CHAIN),
    C("layernorm", "odd-c", "F[5,1001] F[1001] F[1001]", "", RED, CHAIN),
    /* A large mean over a small spread: one-pass E[x^2] - E[x]^2 in f32
     * cancels here; two-pass or Welford does not. */
    C("layernorm", "offset-mean", "F[4,96]:u=8,9 F[96] F[96]", "", RED, CHAIN),
    CX("layernorm_backward", "affine", "F[4,3,64] F[4,3,64] F[64] S[4,3] S[4,3]", "",
       "layernorm 1 | 1>3 2>4", NULL, RED),
    CX("layernorm_backward", "no-gamma", "F[6,48] F[6,48] - S[6] S[6]", "",
       "layernorm 1 | 1>3 2>4", NULL, RED),
    C("rmsnorm", "gamma", "F[4,3,64] F[64]", "", RED, CHAIN),
    C("rmsnorm", "plain-eps", "F[8,40]", "eps=1e-5", RED, CHAIN),
    C("rmsnorm", "odd-c", "F[7,769] F[769]", "", RED, CHAIN),
    CX("rmsnorm_backward", "gamma", "F[4,3,64] F[4,3,64] F[64] S[4,3]", "",
       "rmsnorm 1 | 1>3", NULL, RED),
    CX("rmsnorm_backward", "no-gamma", "F[8,40] F[8,40] - S[8]", "", "rmsnorm 1 | 1>3", NULL,
       RED),

    /* ---- activations ---- */
    C("gelu", "wide", "F[8,128]:u=-4,4", "", ELEM, ELEM),
    /* Not beyond |x| = 4: further left 1 + tanh(u) cancels in f64 itself,
     * so even the oracle's gelu (and any finite difference of it) loses the
     * digits an NMSE or a gradient check would need. */
    C("gelu", "odd-length", "F[1003]:u=-4,4", "", ELEM, ELEM),
    C("gelu_backward", "wide", "F[8,128] F[8,128]:u=-4,4", "", ELEM, NULL),
    C("silu", "wide", "F[8,128]:u=-6,6", "", ELEM, ELEM),
    C("silu", "odd-length", "F[1003]:u=-9,9", "", ELEM, ELEM),
    C("silu_backward", "wide", "F[8,128] F[8,128]:u=-6,6", "", ELEM, NULL),
    C("swiglu", "wide", "F[6,96]:u=-4,4 F[6,96]", "", ELEM, ELEM),
    C("swiglu_backward", "wide", "F[6,96] F[6,96]:u=-4,4 F[6,96]", "", ELEM, NULL),
    C("softmax", "rows", "F[6,50]:u=-4,4", "", RED, RED),
    C("softmax", "long-row", "F[2,1000]:u=-8,8", "", RED, RED),
    C("softmax", "3d", "F[2,3,17]", "", RED, RED),
    CX("softmax_backward", "rows", "F[6,50] F[6,50]:u=-4,4", "", "softmax 1 | 0>1", NULL, RED),
    CX("softmax_backward", "long-row", "F[2,1000] F[2,1000]:u=-8,8", "", "softmax 1 | 0>1",
       NULL, RED),

    /* ---- rotary embeddings ---- */
    C("rope", "default", "F[2,6,4,16] i64[6]:seq=0", "", ROPE, ROPE),
    C("rope", "offset-i32", "F[1,5,2,8] i32[5]:seq=100", "theta=10000.0", ROPE, ROPE),
    C("rope", "llama3", "F[1,4,2,32] i64[4]:u=0,4000",
      "scaling='llama3' factor=8.0 low_freq_factor=1.0 high_freq_factor=4.0 "
      "original_max_position=8192 theta=500000.0",
      ROPE, ROPE),
    C("rope_backward", "default", "F[2,6,4,16] i64[6]:seq=0", "", ROPE, NULL),
    C("rope_backward", "llama3", "F[1,4,2,32] i64[4]:u=0,4000",
      "scaling='llama3' factor=8.0 low_freq_factor=1.0 high_freq_factor=4.0 "
      "original_max_position=8192 theta=500000.0",
      ROPE, NULL),

    /* ---- attention ---- */
    C("attention", "causal-mha", "F[2,8,4,16]:u=-2,2 F[2,8,4,16] F[2,8,4,16]", "", RED, CHAIN),
    C("attention", "gqa", "F[1,8,8,16]:u=-2,2 F[1,8,2,16] F[1,8,2,16]", "", RED, CHAIN),
    C("attention", "kv-offset-gqa", "F[2,3,4,8]:u=-2,2 F[2,11,2,8] F[2,11,2,8]", "", RED,
      CHAIN),
    C("attention", "window", "F[1,12,2,16]:u=-2,2 F[1,12,2,16] F[1,12,2,16]", "window=4",
      RED, CHAIN),
    /* causal=0: every key visible (context parallel's earlier blocks),
     * also with fewer keys than queries. */
    C("attention", "full-gqa", "F[1,6,4,8]:u=-2,2 F[1,9,2,8] F[1,9,2,8]", "causal=0", RED,
      CHAIN),
    C("attention", "full-short", "F[2,7,2,8]:u=-2,2 F[2,3,2,8] F[2,3,2,8]", "causal=0", RED,
      CHAIN),
    C("attention", "scale", "F[1,5,2,8]:u=-2,2 F[1,7,2,8] F[1,7,2,8]", "scale=0.2", RED,
      CHAIN),
    C("attention", "decode-mqa", "F[2,1,4,16]:u=-2,2 F[2,9,1,16] F[2,9,1,16]", "", RED, CHAIN),
    /* A KV cache of 12 rows filled up to 7: rows 7..11 must be ignored. */
    C("attention", "cache-kv-len", "F[1,2,4,8]:u=-2,2 F[1,12,2,8] F[1,12,2,8] i64[]:val=7", "",
      RED, CHAIN),
    C("attention", "longer-gqa", "F[1,33,4,32]:u=-2,2 F[1,33,2,32] F[1,33,2,32]", "", RED,
      CHAIN),
    CX("attention_backward", "causal-mha",
       "F[2,8,4,16] F[2,8,4,16]:u=-2,2 F[2,8,4,16] F[2,8,4,16] F[2,8,4,16] S[2,4,8]", "",
       "attention 1,2,3 | 0>4 1>5", NULL, RED),
    CX("attention_backward", "kv-offset-gqa",
       "F[1,3,4,8] F[1,3,4,8]:u=-2,2 F[1,7,2,8] F[1,7,2,8] F[1,3,4,8] S[1,4,3]", "",
       "attention 1,2,3 | 0>4 1>5", NULL, RED),
    CX("attention_backward", "window",
       "F[1,10,2,8] F[1,10,2,8]:u=-2,2 F[1,10,2,8] F[1,10,2,8] F[1,10,2,8] S[1,2,10]",
       "window=3", "attention 1,2,3 | 0>4 1>5", NULL, RED),
    /* With dlse (the lse output's gradient, input 7; kv_len absent). */
    CX("attention_backward", "dlse-gqa",
       "F[1,5,4,8] F[1,5,4,8]:u=-2,2 F[1,5,2,8] F[1,5,2,8] F[1,5,4,8] S[1,4,5] - S[1,4,5]", "",
       "attention 1,2,3 | 0>4 1>5", NULL, RED),
    CX("attention_backward", "dlse-kv-len",
       "F[1,3,2,8] F[1,3,2,8]:u=-2,2 F[1,8,2,8] F[1,8,2,8] F[1,3,2,8] S[1,2,3] i64[]:val=6 "
       "S[1,2,3]",
       "window=4", "attention 1,2,3,6 | 0>4 1>5", NULL, RED),
    CX("attention_backward", "dlse-full",
       "F[1,6,2,8] F[1,6,2,8]:u=-2,2 F[1,4,2,8] F[1,4,2,8] F[1,6,2,8] S[1,2,6] - S[1,2,6]",
       "causal=0", "attention 1,2,3 | 0>4 1>5", NULL, RED),
    /* attention_merge: the backward direction seeds out and lse. */
    C("attention_merge", "gqa-rows", "F[2,5,4,8] S[2,4,5]:u=-3,3 F[2,5,4,8] S[2,4,5]:u=-3,3",
      "", RED, CHAIN),
    C("attention_merge", "far-apart", "F[1,9,2,16] S[1,2,9]:u=-20,0 F[1,9,2,16] S[1,2,9]:u=0,20",
      "", RED, CHAIN),
    CX("attention_merge_backward", "dlse-only",
       "F[1,4,2,8] S[1,2,4]:u=-3,3 F[1,4,2,8] S[1,2,4]:u=-3,3 F[1,4,2,8] S[1,2,4] - S[1,2,4]",
       "", "attention_merge 0,1,2,3 | 0>4 1>5", NULL, RED),

    /* ---- loss ---- */
    C("cross_entropy", "ignore-targets", "F[4,6,50]:u=-3,3 i64[4,6]:tgt=50", "", RED, RED),
    C("cross_entropy", "i32-wide-vocab", "F[8,300]:u=-3,3 i32[8]:tgt=300", "", RED, RED),
    C("cross_entropy", "odd-vocab", "F[4,5003]:u=-3,3 i64[4]:tgt=5003", "", RED, RED),
    C("cross_entropy_backward", "ignore-targets",
      "S[4,6] F[4,6,50]:u=-3,3 i64[4,6]:tgt=50", "", RED, NULL),
    C("cross_entropy_backward", "i32-wide-vocab", "S[8] F[8,300]:u=-3,3 i32[8]:tgt=300", "",
      RED, NULL),
    /* Chunks that do not divide the rows (the last one is short), one
     * chunk for all, and a vocabulary off every power of two. */
    C("linear_cross_entropy", "chunked", "F[3,5,16] F[40,16] i64[3,5]:tgt=40", "chunk=4", RED,
      CHAIN),
    C("linear_cross_entropy", "one-chunk", "F[6,24]:u=-2,2 F[33,24] i32[6]:tgt=33", "chunk=0",
      RED, CHAIN),
    C("linear_cross_entropy", "odd-vocab", "F[2,7,32] F[1001,32]:u=-0.3,0.3 i64[2,7]:tgt=1001",
      "chunk=5", RED, CHAIN),
    CX("linear_cross_entropy_backward", "chunked",
       "S[3,5] F[3,5,16] F[40,16] i64[3,5]:tgt=40 S[3,5]", "chunk=4",
       "linear_cross_entropy 1,2,3 | 1>4", NULL, RED),

    /* ---- dropout (masks are Philox, bit for bit) ---- */
    C("dropout", "p0.1", "F[16,64] i64[2]:rng", "p=0.1 stream=3", ELEM, ELEM),
    C("dropout", "p0.5-last-stream", "F[3,5,7] i64[2]:rng", "p=0.5 stream=65535", ELEM, ELEM),
    C("dropout", "p0-identity", "F[40] i64[2]:rng", "p=0.0 stream=0", ELEM, ELEM),
    C("dropout_backward", "p0.1", "F[16,64] i64[2]:rng", "p=0.1 stream=3", ELEM, NULL),
    C("dropout_backward", "p0.5", "F[3,5,7] i64[2]:rng", "p=0.5 stream=12", ELEM, NULL),
    /* context parallel's numbering: two slices of 4 rows of a sequence of
     * 16 (rows 4-7 and 8-11: a rank's chunks 1 and 2), each element the bit
     * of its index in the whole [2, 16, 6] tensor; 6 per row so rows start
     * mid-group of Philox's four */
    C("dropout", "seq-numbered", "F[2,8,6] i64[2]:rng",
      "p=0.5 stream=7 seq_len=16 seq_starts=[4,8]", ELEM, ELEM),
    C("dropout_backward", "seq-numbered", "F[2,8,6] i64[2]:rng",
      "p=0.3 stream=2 seq_len=16 seq_starts=[0,12]", ELEM, NULL),

    /* ---- types and views ---- */
    CD("cast", "f32-to-bf16", "f32[8,33]:u=-100,100", "dtype='bf16'", ONLY(F32), EXACT, EXACT),
    CD("cast", "f32-to-f16", "f32[8,33]:u=-1000,1000", "dtype='f16'", ONLY(F32), EXACT, EXACT),
    /* To f64 and back: the one cast the finite-difference checks can
     * differentiate (in f64 it is the identity; rounding casts are
     * piecewise constant). A widening cast's gradient is a narrowing one:
     * rounded, not exact. */
    C("cast", "to-f64", "F[8,33]", "dtype='f64'", EXACT, ELEM),
    CD("cast", "bf16-to-f32", "bf16[8,33]:u=-100,100", "dtype='f32'", ONLY(BF16), EXACT, ELEM),
    CD("cast", "f16-to-f32", "f16[8,33]:u=-100,100", "dtype='f32'", ONLY(F16), EXACT, ELEM),
    CD("cast", "bf16-to-f16", "bf16[8,33]:u=-100,100", "dtype='f16'", ONLY(BF16), EXACT,
       ELEM),
    /* Integer casts: the reference implements i32 <-> i64 only (it answers
     * UNIMPLEMENTED for int <-> float, which inference accepts). */
    CD("cast", "i64-to-i32", "i64[6,7]:u=-100000,100000", "dtype='i32'", ONLY(I64), EXACT,
       NULL),
    CD("cast", "i32-to-i64", "i32[6,7]", "dtype='i64'", ONLY(I32), EXACT, NULL),
    C("reshape", "merge", "F[2,3,8]", "shape=[6,-1]", EXACT, EXACT),
    CD("reshape", "i32-split", "i32[4,6]", "shape=[2,2,6]", ONLY(I32), EXACT, NULL),
    C("transpose", "heads", "F[2,3,4,5]", "perm=[0,2,1,3]", EXACT, EXACT),
    C("transpose", "matrix", "F[6,10]", "perm=[1,0]", EXACT, EXACT),
    CD("transpose", "i64-rotate", "i64[2,3,4]", "perm=[2,0,1]", ONLY(I64), EXACT, NULL),
    C("slice", "window-2d", "F[6,10]", "starts=[1,2] sizes=[3,5]", EXACT, EXACT),
    C("slice", "3d", "F[2,5,8]", "starts=[0,1,4] sizes=[2,3,4]", EXACT, EXACT),
    CD("slice", "i64", "i64[9]", "starts=[2] sizes=[5]", ONLY(I64), EXACT, NULL),
    C("slice_backward", "window-2d", "F[3,5]", "shape=[6,10] starts=[1,2]", EXACT, NULL),
    C("slice_backward", "3d", "F[2,3,4]", "shape=[2,5,8] starts=[0,1,4]", EXACT, NULL),
    C("concat", "three-inner", "F[2,3] F[2,5] F[2,1]", "axis=1", EXACT, EXACT),
    C("concat", "outer-negative-axis", "F[2,4,3] F[1,4,3]", "axis=-3", EXACT, EXACT),
    CD("concat", "i32-last", "i32[3,2] i32[3,4]", "axis=-1", ONLY(I32), EXACT, NULL),

    /* ---- optimizers and clipping ---- */
    CX("adamw_update", "step1",
       "F[8,16] F[8,16] P[8,16] P[8,16]:u=0.001,0.1 P[]:val=0.001 P[]:val=0.9 "
       "P[]:val=0.999 P[]:val=1e-8 P[]:val=0.01 i64[]:val=1",
       "", NULL, NULL, ELEM),
    CX("adamw_update", "odd-length",
       "F[1003] F[1003] P[1003] P[1003]:u=0,0.1 P[]:val=0.003 P[]:val=0.9 "
       "P[]:val=0.999 P[]:val=1e-8 P[]:val=0.0 i64[]:val=1000",
       "", NULL, NULL, ELEM),
    CX("adamw_update", "step7-in-place",
       "F[8,16] F[8,16] P[8,16] P[8,16]:u=0.001,0.1 P[]:val=0.01 P[]:val=0.8 "
       "P[]:val=0.95 P[]:val=1e-6 P[]:val=0.1 i64[]:val=7",
       "", NULL, "0>0 1>2 2>3", ELEM),
    CX("sgd_update", "momentum",
       "F[8,16] F[8,16] P[8,16] P[]:val=0.01 P[]:val=0.9 P[]:val=0.01", "", NULL, NULL, ELEM),
    CX("sgd_update", "nesterov-in-place",
       "F[8,16] F[8,16] P[8,16] P[]:val=0.05 P[]:val=0.8 P[]:val=0.0", "nesterov=1", NULL,
       "0>0 1>2", ELEM),
    /* Adafactor (transformers semantics): factored matrices with and without
     * a first moment, relative step with warmup, a clipped update (a large
     * gradient against a small state), and an unfactored vector. */
    CX("adafactor_update", "factored-lr",
       "F[8,16] F[8,16] P[8]:u=0.001,0.1 P[16]:u=0.001,0.1 - - P[]:val=0.01 P[]:val=0.0 "
       "i64[]:val=3",
       "relative_step=0 scale_parameter=0", NULL, NULL, ELEM),
    CX("adafactor_update", "factored-momentum-in-place",
       "F[2,6,10] F[2,6,10] P[2,6]:u=0.001,0.1 P[2,10]:u=0.001,0.1 - P[2,6,10]:u=-0.01,0.01 "
       "P[]:val=0.003 P[]:val=0.1 i64[]:val=5 P[]:val=0.9",
       "relative_step=0", NULL, "0>0 1>2 2>3 3>5", ELEM),
    CX("adafactor_update", "relative-warmup",
       "F[12,7] F[12,7] P[12] P[7] - - P[]:val=0.0 P[]:val=0.0 i64[]:val=1", 
       "relative_step=1 warmup_init=1", NULL, NULL, ELEM),
    CX("adafactor_update", "vector-clipped",
       "F[1003] F[1003]:u=-50,50 - - P[1003]:u=0.001,0.01 - P[]:val=0.0 P[]:val=0.0 "
       "i64[]:val=2",
       "relative_step=1 clip_threshold=0.5", NULL, "0>0 1>4", ELEM),
    CX("clip_by_global_norm", "clips", "P[]:val=0.5 F[4,8] F[16]", "", NULL, NULL, RED),
    CX("clip_by_global_norm", "mixed-no-clip", "P[]:val=1000 F[4,8] f32[16] F[3]", "", NULL,
       NULL, RED),
    CX("clip_by_global_norm", "max-norm-0", "P[]:val=0 F[10]", "", NULL, NULL, RED),

    CX("global_norm_scale", "clips", "P[]:val=0.5 P[]:u=0,2 P[]:u=0,2 P[]:u=0,2", "", NULL, NULL,
       RED),
    CX("global_norm_scale", "no-clip", "P[]:val=1000 P[]:u=0,2", "", NULL, NULL, RED),
    CX("global_norm_scale", "max-norm-0", "P[]:val=0 P[]:u=0,2 P[]:u=0,2", "", NULL, NULL, RED),

    /* ---- KV cache ---- */
    CX("kv_cache_write", "prefill", "F[2,16,2,8] F[2,5,2,8] i64[]:val=0", "", NULL, NULL,
       EXACT),
    CX("kv_cache_write", "decode-in-place", "F[1,12,4,8] F[1,1,4,8] i64[]:val=7", "", NULL,
       "0>0", EXACT),
    CX("kv_cache_write", "tail", "F[2,8,1,4] F[2,3,1,4] i64[]:val=5", "", NULL, NULL, EXACT),

    /* ---- paged KV cache (issue 29): slots and block tables spelled out;
     * blocks shuffled and not contiguous, -1 for padding rows and for table
     * entries no row reads ---- */
    CX("paged_kv_write", "slots-bs5", "F[6,5,2,8] F[4,2,8] i64[4]:list=13,-1,0,29", "", NULL,
       NULL, EXACT),
    CX("paged_kv_write", "in-place-bs16", "F[4,16,2,8] F[5,2,8] i64[5]:list=17,-1,63,0,40", "",
       NULL, "0>0", EXACT),
    /* a prefill chunk of sequence 0 (positions 9..12) mixed with decode rows
     * of sequences 1 and 2, an early position of 2 and a padding row */
    CX("paged_attention", "mixed-bs5-gqa",
       "F[8,4,8] F[9,5,2,8] F[9,5,2,8] i64[3,5]:list=7,2,5,-1,-1,0,-1,-1,-1,-1,8,3,1,6,-1 "
       "i64[8]:list=0,2,-1,0,1,0,2,0 i64[8]:list=9,15,0,10,4,11,1,12",
       "", NULL, NULL, RED),
    /* decode rows only, one of them 31 keys long across two blocks */
    CX("paged_attention", "decode-bs16-gqa",
       "F[3,4,16] F[6,16,2,16] F[6,16,2,16] i64[3,2]:list=5,0,2,-1,4,3 i64[3]:list=2,0,1 "
       "i64[3]:list=30,20,9",
       "", NULL, NULL, RED),
    /* a whole 7-token prompt (positions 0..6) and a decode row, Hq 2 : Hkv 1 */
    CX("paged_attention", "prefill-bs5",
       "F[8,2,8] F[5,5,1,8] F[5,5,1,8] i64[2,3]:list=3,0,-1,1,4,-1 "
       "i64[8]:list=0,0,0,0,0,0,0,1 i64[8]:list=0,1,2,3,4,5,6,8",
       "", NULL, NULL, RED),
    /* heads 2 : 2, a window of 3 that crosses a block boundary (15..17) */
    CX("paged_attention", "window-bs16-mha",
       "F[4,2,16] F[4,16,2,16] F[4,16,2,16] i64[2,3]:list=3,1,-1,0,-1,-1 i64[4]:list=1,0,0,-1 "
       "i64[4]:list=6,17,19,0",
       "window=3 scale=0.3", NULL, NULL, RED),

    /* ---- token selection (issue 29): logits a permuted grid per row
     * (perm=, exact in bf16 and f16), params rows spelled out (P: f32
     * columns of sample_params.h: temperature, top_k, top_p, min_p,
     * repetition, presence, frequency), random {seed, counter} pairs.
     * Every top_p / min_p cut sits >= 4e-4 of the mass away from a
     * candidate in each dtype (checked when the cases were written), so
     * f32 devices agree with the f64 oracle ---- */
    CX("sample", "greedy",
       "F[4,32]:perm=0.25 P[4,7]:list=0,0,1,0,1,0,0,0,0,1,0,1,0,0,0,0,1,0,1,0,0,0,0,1,0,1,0,0 "
       "i64[4,2]:rng", "", NULL, NULL, SEL),
    CX("sample", "temperature",
       "F[4,32]:perm=0.25 P[4,7]:list=1,0,1,0,1,0,0,0.5,0,1,0,1,0,0,2,0,1,0,1,0,0,0.8,0,1,0,1,0,0 "
       "i64[4,2]:rng", "", NULL, NULL, SEL),
    CX("sample", "top-k",
       "F[4,32]:perm=0.25 P[4,7]:list=1,1,1,0,1,0,0,0.7,3,1,0,1,0,0,1.5,8,1,0,1,0,0,1,31,1,0,1,0,0 "
       "i64[4,2]:rng", "", NULL, NULL, SEL),
    CX("sample", "top-p",
       "F[4,32]:perm=0.25 P[4,7]:list=1,0,0.9,0,1,0,0,0.7,0,0.5,0,1,0,0,2,0,0.3,0,1,0,0,1,0,0.05,0,"
       "1,0,0 i64[4,2]:rng", "", NULL, NULL, SEL),
    CX("sample", "min-p",
       "F[4,32]:perm=0.25 P[4,7]:list=1,0,1,0.1,1,0,0,0.8,0,1,0.3,1,0,0,2,0,1,0.5,1,0,0,1,0,1,0.95,"
       "1,0,0 i64[4,2]:rng", "", NULL, NULL, SEL),
    /* repetition 2 (and 1.5 in a greedy row), presence 0.5, frequency
     * 0.25: exact in f32 on the grid; a history with repeats and -1
     * padding, one row all padding */
    CX("sample", "penalties",
       "F[4,16]:perm=0.25 P[4,7]:list=0,0,1,0,2,0.5,0.25,1,0,1,0,2,0.5,0.25,0.8,3,1,0,2,0.5,0.25,"
       "0,0,1,0,1.5,0.5,0.25 i64[4,2]:rng "
       "i64[4,6]:list=3,3,7,-1,-1,-1,0,1,2,3,4,5,-1,-1,-1,-1,-1,-1,15,15,15,8,9,-1",
       "", NULL, NULL, SEL),
    /* one step's rows, each with its own params: greedy, temperature,
     * top_k, top_p, min_p, and all three cuts at once */
    CX("sample", "mixed-rows",
       "F[6,64]:perm=0.25 P[6,7]:list=0,0,1,0,1,0,0,1,0,1,0,1,0,0,0.7,5,1,0,1,0,0,1.2,0,0.6,0,1,0,0,"
       "1,0,1,0.2,1,0,0,0.9,10,0.8,0.05,1,0,0 i64[6,2]:rng", "", NULL, NULL, SEL),
    /* a vocabulary wider than a work-group (ties in bf16: the lower id) */
    CX("sample", "wide",
       "F[3,1000]:perm=0.0078125 P[3,7]:list=0.8,50,0.9,0,1,0,0,1,0,0.6,0,1,0,0,0,0,1,0,1,0,0 "
       "i64[3,2]:rng", "", NULL, NULL, SEL),
    CX("top_logprobs", "k1", "F[4,32]:perm=0.25", "k=1", NULL, NULL, SEL),
    CX("top_logprobs", "k5", "F[4,64]:perm=0.125", "k=5", NULL, NULL, SEL),
    CX("top_logprobs", "k20-wide", "F[2,1000]:perm=0.0078125", "k=20", NULL, NULL, SEL),

    /* ---- collectives: one process is world 1, where both are the identity
     * (ops/op_collective.c); the multi-rank results are checked by the
     * distributed tests ---- */
    C("all_reduce", "sum", "F[4,33]", "", EXACT, EXACT),
    C("all_reduce", "avg", "F[3,2,16]", "reduce='avg'", EXACT, EXACT),
    C("all_reduce", "scalar", "F[]", "reduce='sum'", EXACT, EXACT),
    C("all_reduce", "group-dp", "F[5,9]", "group='dp' reduce='avg'", EXACT, EXACT),
    /* the tensor-parallel region ops (issue 17): at world 1 f and g are the
     * identity both ways; max's gradient is zero by definition (a constant
     * shift) */
    C("tp_copy", "tp", "F[4,33]", "", EXACT, EXACT),
    C("tp_copy", "group-world", "F[2,3,8]", "group='world'", EXACT, EXACT),
    C("tp_reduce", "sum", "F[4,33]", "", EXACT, EXACT),
    C("tp_reduce", "max", "F[3,17]", "reduce='max'", EXACT, EXACT),
    /* context parallel's gathers (issue 31): one part at world 1, the
     * identity both ways (each the other's gradient) */
    C("all_gather", "cp-axis1", "F[2,4,3,5]", "group='cp' axis=1 parts=1", EXACT, EXACT),
    C("reduce_scatter", "cp-axis1", "F[2,4,3,5]", "group='cp' axis=1 parts=1", EXACT, EXACT),

    /* ---- vocabulary-parallel embedding and loss: a shard of rows [start,
     * start + valid) of a vocabulary of 40 held in more rows (the rest
     * padding), and the one shard that is the whole vocabulary (with
     * tp_reduce the identity at world 1, the loss ops then compose to
     * cross_entropy) ---- */
    C("vocab_embedding", "shard", "F[14,8] i64[3,7]:ids=40", "vocab_start=14 vocab_valid=13",
      EXACT, RED),
    C("vocab_embedding", "whole", "F[40,8] i32[21]:ids=40", "vocab_start=0", EXACT, RED),
    C("vocab_embedding_backward", "shard", "F[3,7,8] i64[3,7]:ids=40",
      "vocab_start=14 vocab_valid=13 vocab_size=14", RED, NULL),
    C("vocab_max", "shard", "F[4,6,14]:u=-3,3", "vocab_valid=13", EXACT, EXACT),
    CX("vocab_max_backward", "shard", "S[4,6] F[4,6,14]:u=-3,3 S[4,6]", "vocab_valid=13",
       "vocab_max 1 | 0>2", NULL, EXACT),
    /* m from the logits as the model forms it (the shard's max) */
    {"vocab_ce_sums", "shard", "F[4,6,14]:u=-3,3 i64[4,6]:tgt=40 S[4,6]",
     "vocab_start=14 vocab_valid=13", "vocab_max 0 | 0>2", NULL, FLOATS, RED, RED},
    {"vocab_ce_sums", "whole", "F[8,40]:u=-3,3 i32[8]:tgt=40 S[8]", "vocab_start=0",
     "vocab_max 0 | 0>2", NULL, FLOATS, RED, RED},
    CX("vocab_ce_sums_backward", "shard", "S[4,6,2] F[4,6,14]:u=-3,3 i64[4,6]:tgt=40 S[4,6]",
       "vocab_start=14 vocab_valid=13", "vocab_max 1 | 0>3", NULL, RED),
    C("vocab_ce_loss", "ignore-targets", "S[4,6,2]:u=0.5,3 i64[4,6]:tgt=40", "vocab_size=40",
      ELEM, ELEM),
    C("vocab_ce_loss_backward", "ignore-targets", "S[4,6] S[4,6,2]:u=0.5,3 i64[4,6]:tgt=40",
      "vocab_size=40", ELEM, NULL),
};

uint32_t ty_conform_case_count(void) {
  return (uint32_t)(sizeof(ty_cases) / sizeof(ty_cases[0]));
}

const ty_conform_case_t *ty_conform_case_at(uint32_t i) {
  return i < ty_conform_case_count() ? &ty_cases[i] : NULL;
}
