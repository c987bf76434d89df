/* The reference node executor: widens a node's inputs to f64 (ints to
 * int64), calls the reference kernel for its op, and rounds the results back
 * into the outputs' storage dtypes. Slow and obviously correct. */
#include "ops/reference/ref_interp.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hal/half.h"
#include "ops/reference/reference.h"

#define TY_INTERP_MAX_IO 1100

typedef struct {
  const ty_abi_graph_t *g;
  const ty_abi_node_t *node;
  void *const *data;
  double **fin;   /* widened float inputs (lazily) */
  int64_t **iin;  /* widened int inputs (lazily) */
  double **fout;  /* f64 outputs, stored at the end */
} ty_interp_t;

static size_t ty_interp_dtype_size(ty_dtype_t d) {
  switch (d) {
    case TY_DTYPE_F32: case TY_DTYPE_I32: return 4;
    case TY_DTYPE_BF16: case TY_DTYPE_F16: return 2;
    case TY_DTYPE_F64: case TY_DTYPE_I64: return 8;
    case TY_DTYPE_U8: return 1;
    default: return 0;
  }
}

static const ty_abi_value_t *ty_in_value(const ty_interp_t *c, uint32_t i) {
  if (i >= c->node->input_count || c->node->inputs[i] == UINT32_MAX) return NULL;
  return &c->g->values[c->node->inputs[i]];
}

static const ty_abi_value_t *ty_out_value(const ty_interp_t *c, uint32_t o) {
  return &c->g->values[c->node->outputs[o]];
}

static int64_t ty_elems(const ty_abi_value_t *v) {
  int64_t n = 1;
  for (uint32_t i = 0; i < v->rank; ++i) n *= v->dims[i];
  return n;
}

static double ty_load1(const void *p, ty_dtype_t d, int64_t i) {
  switch (d) {
    case TY_DTYPE_F32: return ((const float *)p)[i];
    case TY_DTYPE_F64: return ((const double *)p)[i];
    case TY_DTYPE_BF16: return ty_bf16_to_f64(((const uint16_t *)p)[i]);
    case TY_DTYPE_F16: return ty_f16_to_f64(((const uint16_t *)p)[i]);
    case TY_DTYPE_I32: return ((const int32_t *)p)[i];
    case TY_DTYPE_I64: return (double)((const int64_t *)p)[i];
    case TY_DTYPE_U8: return ((const uint8_t *)p)[i];
    default: return NAN;
  }
}

static void ty_store1(void *p, ty_dtype_t d, int64_t i, double x) {
  switch (d) {
    case TY_DTYPE_F32: ((float *)p)[i] = (float)x; break;
    case TY_DTYPE_F64: ((double *)p)[i] = x; break;
    case TY_DTYPE_BF16: ((uint16_t *)p)[i] = ty_f64_to_bf16(x); break;
    case TY_DTYPE_F16: ((uint16_t *)p)[i] = ty_f64_to_f16(x); break;
    case TY_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)x; break;
    case TY_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)x; break;
    case TY_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)x; break;
    default: break;
  }
}

static ty_status_t ty_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "reference: out of memory");
}

/* Input i widened to f64, or NULL (absent). *out_status set on OOM. */
static ty_status_t ty_fin(ty_interp_t *c, uint32_t i, double **out) {
  *out = NULL;
  const ty_abi_value_t *v = ty_in_value(c, i);
  if (!v) return TY_OK;
  if (!c->fin[i]) {
    int64_t n = ty_elems(v);
    double *buf = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!buf) return ty_oom();
    const void *src = c->data[c->node->inputs[i]];
    for (int64_t k = 0; k < n; ++k) buf[k] = ty_load1(src, v->dtype, k);
    c->fin[i] = buf;
  }
  *out = c->fin[i];
  return TY_OK;
}

static ty_status_t ty_iin(ty_interp_t *c, uint32_t i, int64_t **out) {
  *out = NULL;
  const ty_abi_value_t *v = ty_in_value(c, i);
  if (!v) return TY_OK;
  if (!c->iin[i]) {
    int64_t n = ty_elems(v);
    int64_t *buf = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!buf) return ty_oom();
    const void *src = c->data[c->node->inputs[i]];
    for (int64_t k = 0; k < n; ++k) {
      buf[k] = v->dtype == TY_DTYPE_I32   ? ((const int32_t *)src)[k]
               : v->dtype == TY_DTYPE_I64 ? ((const int64_t *)src)[k]
                                          : (int64_t)ty_load1(src, v->dtype, k);
    }
    c->iin[i] = buf;
  }
  *out = c->iin[i];
  return TY_OK;
}

static double ty_fscalar(ty_interp_t *c, uint32_t i, ty_status_t *s) {
  double *p = NULL;
  if (!*s) *s = ty_fin(c, i, &p);
  return p ? p[0] : 0.0;
}

static ty_status_t ty_fout(ty_interp_t *c, uint32_t o, double **out) {
  const ty_abi_value_t *v = ty_out_value(c, o);
  int64_t n = ty_elems(v);
  double *buf = calloc((size_t)(n ? n : 1), sizeof(double));
  if (!buf) return ty_oom();
  free(c->fout[o]);
  c->fout[o] = buf;
  *out = buf;
  return TY_OK;
}

/* Output o as a copy of input i (for in-place updates). */
static ty_status_t ty_fout_copy(ty_interp_t *c, uint32_t o, uint32_t i, double **out) {
  double *src;
  TY_RETURN_IF_ERROR(ty_fin(c, i, &src));
  TY_RETURN_IF_ERROR(ty_fout(c, o, out));
  memcpy(*out, src, (size_t)ty_elems(ty_out_value(c, o)) * sizeof(double));
  return TY_OK;
}

static void *ty_raw_out(const ty_interp_t *c, uint32_t o) {
  return c->data[c->node->outputs[o]];
}

static const void *ty_raw_in(const ty_interp_t *c, uint32_t i) {
  return c->data[c->node->inputs[i]];
}

static const ty_abi_attr_t *ty_attr(const ty_interp_t *c, const char *name) {
  for (uint32_t a = 0; a < c->node->attr_count; ++a) {
    if (strcmp(c->node->attrs[a].name, name) == 0) return &c->node->attrs[a];
  }
  return NULL;
}

static int64_t ty_attr_int(const ty_interp_t *c, const char *name, int64_t dflt) {
  const ty_abi_attr_t *a = ty_attr(c, name);
  return a && a->kind == TY_ATTR_INT ? a->i : dflt;
}

static double ty_attr_float(const ty_interp_t *c, const char *name, double dflt) {
  const ty_abi_attr_t *a = ty_attr(c, name);
  if (!a) return dflt;
  return a->kind == TY_ATTR_FLOAT ? a->f : a->kind == TY_ATTR_INT ? (double)a->i : dflt;
}

static const char *ty_attr_string(const ty_interp_t *c, const char *name, const char *dflt) {
  const ty_abi_attr_t *a = ty_attr(c, name);
  return a && a->kind == TY_ATTR_STRING ? a->s : dflt;
}

static uint32_t ty_attr_ints(const ty_interp_t *c, const char *name, const int64_t **out) {
  const ty_abi_attr_t *a = ty_attr(c, name);
  *out = a && a->kind == TY_ATTR_INTS ? a->ints : NULL;
  return *out ? a->count : 0;
}

/* Rows of a [..., C] tensor. */
static int64_t ty_rows(const ty_abi_value_t *v) {
  int64_t c = v->rank ? v->dims[v->rank - 1] : 1;
  return c ? ty_elems(v) / c : 0;
}

static int64_t ty_last(const ty_abi_value_t *v) { return v->rank ? v->dims[v->rank - 1] : 1; }

/* ---- op families ---- */

static ty_status_t ty_run_unary(ty_interp_t *c, const char *op) {
  double *x, *y, *dy = NULL;
  int64_t n = ty_elems(ty_out_value(c, 0));
  bool backward = strstr(op, "_backward") != NULL;
  /* backward ops take (dy, x) */
  TY_RETURN_IF_ERROR(ty_fin(c, backward ? 1 : 0, &x));
  if (backward) TY_RETURN_IF_ERROR(ty_fin(c, 0, &dy));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
  if (strcmp(op, "gelu") == 0) ty_ref_gelu_forward(x, n, y);
  else if (strcmp(op, "gelu_backward") == 0) ty_ref_gelu_backward(x, dy, n, y);
  else if (strcmp(op, "silu") == 0) ty_ref_silu_forward(x, n, y);
  else ty_ref_silu_backward(x, dy, n, y);
  return TY_OK;
}

static ty_status_t ty_run_binary(ty_interp_t *c, ty_ref_binary_op_t op) {
  const ty_abi_value_t *a = ty_in_value(c, 0), *b = ty_in_value(c, 1);
  double *pa, *pb, *out;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &pa));
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &pb));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &out));
  return ty_ref_binary_forward(op, (int)a->rank, a->dims, pa, (int)b->rank, b->dims,
                               pb, out);
}

/* broadcast_to: left-pad x to the target rank; the stretched axes are the
 * "reduced" axes of a keepdims reduction, whose backward broadcasts. */
static ty_status_t ty_run_broadcast_to(ty_interp_t *c) {
  const ty_abi_value_t *x = ty_in_value(c, 0), *y = ty_out_value(c, 0);
  double *px, *py;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &px));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &py));
  int axes[TY_INTERP_MAX_IO];
  int count = 0;
  uint32_t pad = y->rank - x->rank;
  for (uint32_t d = 0; d < y->rank; ++d) {
    int64_t xd = d < pad ? 1 : x->dims[d - pad];
    if (xd == 1 && y->dims[d] != 1) axes[count++] = (int)d;
  }
  if (count == 0) {
    memcpy(py, px, (size_t)ty_elems(y) * sizeof(double));
    return TY_OK;
  }
  return ty_ref_reduce_sum_backward((int)y->rank, y->dims, count, axes, px, py);
}

static ty_status_t ty_run_reduce(ty_interp_t *c, const char *op) {
  const ty_abi_value_t *x = ty_in_value(c, 0);
  double *px, *py;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &px));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &py));
  const int64_t *axes_attr;
  uint32_t count = ty_attr_ints(c, "axes", &axes_attr);
  int axes[16];
  int64_t reduced = 1;
  if (count == 0) {
    for (uint32_t d = 0; d < x->rank; ++d) axes[d] = (int)d;
    count = x->rank;
  } else {
    for (uint32_t k = 0; k < count && k < 16; ++k) axes[k] = (int)axes_attr[k];
  }
  for (uint32_t k = 0; k < count; ++k) {
    int a = axes[k] < 0 ? axes[k] + (int)x->rank : axes[k];
    reduced *= x->dims[a];
  }
  int64_t n = ty_elems(x);
  double *src = px;
  double *squares = NULL;
  if (strcmp(op, "reduce_sumsq") == 0) {
    squares = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (!squares) return ty_oom();
    for (int64_t i = 0; i < n; ++i) squares[i] = px[i] * px[i];
    src = squares;
  }
  ty_status_t s = count ? ty_ref_reduce_sum_forward((int)x->rank, x->dims, src,
                                                    (int)count, axes, py)
                        : TY_OK;
  if (!count) py[0] = n ? src[0] : 0.0; /* rank 0: the value itself */
  free(squares);
  if (!s && strcmp(op, "reduce_mean") == 0 && reduced > 0) {
    int64_t m = ty_elems(ty_out_value(c, 0));
    for (int64_t i = 0; i < m; ++i) py[i] /= (double)reduced;
  }
  return s;
}

static ty_status_t ty_run_matmul(ty_interp_t *c) {
  const ty_abi_value_t *a = ty_in_value(c, 0), *b = ty_in_value(c, 1);
  const ty_abi_value_t *out = ty_out_value(c, 0);
  double *pa, *pb, *pbias, *pc;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &pa));
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &pb));
  TY_RETURN_IF_ERROR(ty_fin(c, 2, &pbias));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &pc));
  bool ta = ty_attr_int(c, "trans_a", 0) != 0, tb = ty_attr_int(c, "trans_b", 0) != 0;
  ty_ref_matmul_shape_t shape = {
      .batch_a = 1, .batch_b = 1,
      .m = out->dims[out->rank - 2], .n = out->dims[out->rank - 1],
      .k = ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1],
      .trans_a = ta, .trans_b = tb,
  };
  /* Walk the broadcast batch index of the output; find a's and b's. */
  uint32_t batch_rank = out->rank - 2;
  int64_t batches = 1;
  for (uint32_t d = 0; d < batch_rank; ++d) batches *= out->dims[d];
  int64_t a_mat = shape.m * shape.k, b_mat = shape.k * shape.n, c_mat = shape.m * shape.n;
  for (int64_t bi = 0; bi < batches; ++bi) {
    int64_t rem = bi, a_off = 0, b_off = 0, a_stride = 1, b_stride = 1;
    for (uint32_t d = batch_rank; d-- > 0;) {
      int64_t idx = rem % out->dims[d];
      rem /= out->dims[d];
      int32_t ad = (int32_t)d - (int32_t)(batch_rank - (a->rank - 2));
      int32_t bd = (int32_t)d - (int32_t)(batch_rank - (b->rank - 2));
      if (ad >= 0) {
        if (a->dims[ad] != 1) a_off += idx * a_stride;
        a_stride *= a->dims[ad];
      }
      if (bd >= 0) {
        if (b->dims[bd] != 1) b_off += idx * b_stride;
        b_stride *= b->dims[bd];
      }
    }
    TY_RETURN_IF_ERROR(ty_ref_matmul_forward(&shape, pa + a_off * a_mat,
                                             pb + b_off * b_mat, pbias, pc + bi * c_mat));
  }
  return TY_OK;
}

static ty_status_t ty_run_norm(ty_interp_t *c, const char *op) {
  bool layer = strncmp(op, "layernorm", 9) == 0;
  bool backward = strstr(op, "_backward") != NULL;
  const ty_abi_value_t *x = ty_in_value(c, backward ? 1 : 0);
  int64_t rows = ty_rows(x), dim = ty_last(x);
  double eps = ty_attr_float(c, "eps", layer ? 1e-5 : 1e-6);
  double *px, *gamma, *beta = NULL, *o0, *o1, *o2 = NULL;
  if (!backward) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &px));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &gamma));
    if (layer) TY_RETURN_IF_ERROR(ty_fin(c, 2, &beta));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &o0));
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &o1));
    if (layer) {
      TY_RETURN_IF_ERROR(ty_fout(c, 2, &o2));
      ty_ref_layernorm_forward(px, gamma, beta, rows, dim, eps, o0, o1, o2);
    } else {
      ty_ref_rmsnorm_forward(px, gamma, rows, dim, eps, o0, o1);
    }
    return TY_OK;
  }
  double *dy, *mean = NULL, *rstd;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &dy));
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &px));
  TY_RETURN_IF_ERROR(ty_fin(c, 2, &gamma));
  if (layer) {
    TY_RETURN_IF_ERROR(ty_fin(c, 3, &mean));
    TY_RETURN_IF_ERROR(ty_fin(c, 4, &rstd));
  } else {
    TY_RETURN_IF_ERROR(ty_fin(c, 3, &rstd));
  }
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &o0));
  TY_RETURN_IF_ERROR(ty_fout(c, 1, &o1));
  if (layer) {
    TY_RETURN_IF_ERROR(ty_fout(c, 2, &o2));
    ty_ref_layernorm_backward(dy, px, gamma, mean, rstd, rows, dim, o0, o1, o2);
  } else {
    ty_ref_rmsnorm_backward(dy, px, gamma, rstd, rows, dim, o0, o1);
  }
  return TY_OK;
}

static ty_status_t ty_run_rope(ty_interp_t *c, bool backward) {
  const ty_abi_value_t *x = ty_in_value(c, 0);
  double *px, *py;
  int64_t *pos;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &px));
  TY_RETURN_IF_ERROR(ty_iin(c, 1, &pos));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &py));
  const char *kind = ty_attr_string(c, "scaling", "default");
  ty_ref_rope_scaling_t scaling = {
      .kind = strcmp(kind, "llama3") == 0 ? TY_REF_ROPE_LLAMA3 : TY_REF_ROPE_DEFAULT,
      .factor = ty_attr_float(c, "factor", 1.0),
      .low_freq_factor = ty_attr_float(c, "low_freq_factor", 1.0),
      .high_freq_factor = ty_attr_float(c, "high_freq_factor", 4.0),
      .original_max_position_embeddings = ty_attr_float(c, "original_max_position", 8192.0),
  };
  int64_t d = x->dims[3];
  double *inv_freq = malloc((size_t)(d / 2 ? d / 2 : 1) * sizeof(double));
  if (!inv_freq) return ty_oom();
  ty_status_t s = ty_ref_rope_inv_freq(d, ty_attr_float(c, "theta", 10000.0), &scaling, inv_freq);
  if (!s) {
    s = backward ? ty_ref_rope_backward(px, x->dims[0], x->dims[1], x->dims[2], d, pos,
                                        inv_freq, py)
                 : ty_ref_rope_forward(px, x->dims[0], x->dims[1], x->dims[2], d, pos,
                                       inv_freq, py);
  }
  free(inv_freq);
  return s;
}

static ty_status_t ty_run_attention(ty_interp_t *c, bool backward) {
  const ty_abi_value_t *q = ty_in_value(c, backward ? 1 : 0);
  const ty_abi_value_t *k = ty_in_value(c, backward ? 2 : 1);
  ty_ref_attention_shape_t shape = {
      .non_causal = ty_attr_int(c, "causal", 1) == 0,
      .batch = q->dims[0], .q_len = q->dims[1], .kv_len = k->dims[1],
      .q_heads = q->dims[2], .kv_heads = k->dims[2], .head_dim = q->dims[3],
      .scale = ty_attr_float(c, "scale", 1.0 / sqrt((double)q->dims[3])),
      .window = ty_attr_int(c, "window", 0),
  };
  /* Optional kv_len input: the forward's 4th, the backward's 7th operand. */
  int64_t *kv_len = NULL;
  TY_RETURN_IF_ERROR(ty_iin(c, backward ? 6 : 3, &kv_len));
  if (kv_len) {
    if (kv_len[0] < 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "attention: kv_len input %lld < 1",
                            (long long)kv_len[0]);
    }
    shape.valid_len = kv_len[0];
  }
  if (!backward) {
    double *pq, *pk, *pv, *out, *lse;
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &pq));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &pk));
    TY_RETURN_IF_ERROR(ty_fin(c, 2, &pv));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &out));
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &lse));
    return ty_ref_attention_forward(&shape, pq, pk, pv, out, lse);
  }
  double *dout, *pq, *pk, *pv, *lse, *dlse, *dq, *dk, *dv;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &dout));
  TY_RETURN_IF_ERROR(ty_fin(c, 7, &dlse)); /* optional: NULL when absent */
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &pq));
  TY_RETURN_IF_ERROR(ty_fin(c, 2, &pk));
  TY_RETURN_IF_ERROR(ty_fin(c, 3, &pv));
  TY_RETURN_IF_ERROR(ty_fin(c, 5, &lse)); /* input 4 (out) is not needed */
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &dq));
  TY_RETURN_IF_ERROR(ty_fout(c, 1, &dk));
  TY_RETURN_IF_ERROR(ty_fout(c, 2, &dv));
  return ty_ref_attention_backward_dlse(&shape, pq, pk, pv, lse, dout, dlse, dq, dk, dv);
}

/* attention_merge(out_a, lse_a, out_b, lse_b) and its backward (inputs
 * ..., out, lse, dout?, dlse?; outputs dout_a, dlse_a, dout_b, dlse_b). */
static ty_status_t ty_run_attention_merge(ty_interp_t *c, bool backward) {
  const ty_abi_value_t *oa = ty_in_value(c, 0);
  const int64_t B = oa->dims[0], T = oa->dims[1], H = oa->dims[2], D = oa->dims[3];
  double *in[8] = {NULL};
  for (uint32_t i = 0; i < (backward ? 8u : 4u); ++i) TY_RETURN_IF_ERROR(ty_fin(c, i, &in[i]));
  double *y[4] = {NULL};
  for (uint32_t o = 0; o < (backward ? 4u : 2u); ++o) TY_RETURN_IF_ERROR(ty_fout(c, o, &y[o]));
  if (!backward) {
    ty_ref_attention_merge(B, H, T, D, in[0], in[1], in[2], in[3], y[0], y[1]);
  } else {
    ty_ref_attention_merge_backward(B, H, T, D, in[0], in[1], in[2], in[3], in[4], in[5],
                                    in[6], in[7], y[0], y[1], y[2], y[3]);
  }
  return TY_OK;
}

/* paged_attention(q, k_pool, v_pool, block_table, row_seq, row_pos) */
static ty_status_t ty_run_paged_attention(ty_interp_t *c) {
  const ty_abi_value_t *q = ty_in_value(c, 0), *k = ty_in_value(c, 1);
  const ty_abi_value_t *table = ty_in_value(c, 3);
  const ty_ref_paged_shape_t shape = {
      .rows = q->dims[0], .q_heads = q->dims[1], .kv_heads = k->dims[2],
      .head_dim = q->dims[2], .blocks = k->dims[0], .block_size = k->dims[1],
      .seqs = table->dims[0], .max_blocks = table->dims[1],
      .scale = ty_attr_float(c, "scale", 1.0 / sqrt((double)q->dims[2])),
      .window = ty_attr_int(c, "window", 0),
  };
  double *pq, *pk, *pv, *out;
  int64_t *pt, *seq, *pos;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &pq));
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &pk));
  TY_RETURN_IF_ERROR(ty_fin(c, 2, &pv));
  TY_RETURN_IF_ERROR(ty_iin(c, 3, &pt));
  TY_RETURN_IF_ERROR(ty_iin(c, 4, &seq));
  TY_RETURN_IF_ERROR(ty_iin(c, 5, &pos));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &out));
  return ty_ref_paged_attention(&shape, pq, pk, pv, pt, seq, pos, out);
}

static ty_status_t ty_run_views(ty_interp_t *c, const char *op) {
  const ty_abi_value_t *x = ty_in_value(c, 0), *y = ty_out_value(c, 0);
  size_t elem = ty_interp_dtype_size(x->dtype);
  if (strcmp(op, "reshape") == 0) {
    memcpy(ty_raw_out(c, 0), ty_raw_in(c, 0), (size_t)ty_elems(y) * elem);
    return TY_OK;
  }
  if (strcmp(op, "cast") == 0) {
    return ty_ref_cast_forward(ty_raw_in(c, 0), x->dtype, ty_raw_out(c, 0), y->dtype,
                               ty_elems(x));
  }
  if (strcmp(op, "transpose") == 0) {
    const int64_t *perm64;
    uint32_t n = ty_attr_ints(c, "perm", &perm64);
    int perm[16];
    for (uint32_t i = 0; i < n && i < 16; ++i) perm[i] = (int)perm64[i];
    return ty_ref_permute_forward(ty_raw_in(c, 0), elem, (int)x->rank, x->dims, perm,
                                  ty_raw_out(c, 0));
  }
  if (strcmp(op, "slice") == 0) {
    const int64_t *starts, *sizes;
    ty_attr_ints(c, "starts", &starts);
    ty_attr_ints(c, "sizes", &sizes);
    return ty_ref_slice_forward(ty_raw_in(c, 0), elem, (int)x->rank, x->dims, starts,
                                y->dims, ty_raw_out(c, 0));
  }
  if (strcmp(op, "slice_backward") == 0) {
    const int64_t *starts;
    ty_attr_ints(c, "starts", &starts);
    return ty_ref_slice_backward(ty_raw_in(c, 0), elem, (int)y->rank, y->dims, starts,
                                 x->dims, ty_raw_out(c, 0));
  }
  /* concat */
  int count = (int)c->node->input_count;
  int64_t axis = ty_attr_int(c, "axis", 0);
  if (axis < 0) axis += y->rank;
  const void *srcs[TY_INTERP_MAX_IO];
  int64_t lens[TY_INTERP_MAX_IO];
  for (int i = 0; i < count; ++i) {
    srcs[i] = ty_raw_in(c, (uint32_t)i);
    lens[i] = ty_in_value(c, (uint32_t)i)->dims[axis];
  }
  return ty_ref_concat_forward(count, srcs, elem, (int)y->rank, y->dims, lens, (int)axis,
                               ty_raw_out(c, 0));
}

static ty_status_t ty_run_optim(ty_interp_t *c, const char *op) {
  ty_status_t s = TY_OK;
  double *param, *grad, *m, *v = NULL;
  int64_t n = ty_elems(ty_in_value(c, 0));
  TY_RETURN_IF_ERROR(ty_fout_copy(c, 0, 0, &param));
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &grad));
  TY_RETURN_IF_ERROR(ty_fout_copy(c, 1, 2, &m));
  if (strcmp(op, "adamw_update") == 0) {
    TY_RETURN_IF_ERROR(ty_fout_copy(c, 2, 3, &v));
    int64_t *step;
    TY_RETURN_IF_ERROR(ty_iin(c, 9, &step));
    ty_ref_adamw_params_t p = {
        .lr = ty_fscalar(c, 4, &s), .beta1 = ty_fscalar(c, 5, &s),
        .beta2 = ty_fscalar(c, 6, &s), .eps = ty_fscalar(c, 7, &s),
        .weight_decay = ty_fscalar(c, 8, &s), .step = step[0],
    };
    TY_RETURN_IF_ERROR(s);
    return ty_ref_adamw_step(&p, param, grad, m, v, n);
  }
  ty_ref_sgd_params_t p = {
      .lr = ty_fscalar(c, 3, &s), .momentum = ty_fscalar(c, 4, &s),
      .weight_decay = ty_fscalar(c, 5, &s), .nesterov = ty_attr_int(c, "nesterov", 0) != 0,
  };
  TY_RETURN_IF_ERROR(s);
  return ty_ref_sgd_step(&p, param, grad, m, n);
}

/* adafactor_update: outputs follow the present states (see op_optim.c). */
static ty_status_t ty_run_adafactor(ty_interp_t *c) {
  ty_status_t s = TY_OK;
  const ty_abi_value_t *pv = ty_in_value(c, 0);
  double *param, *grad, *state[4] = {NULL, NULL, NULL, NULL};
  TY_RETURN_IF_ERROR(ty_fout_copy(c, 0, 0, &param));
  TY_RETURN_IF_ERROR(ty_fin(c, 1, &grad));
  uint32_t o = 1;
  for (uint32_t k = 0; k < 4; ++k) {
    if (ty_in_value(c, 2 + k)) TY_RETURN_IF_ERROR(ty_fout_copy(c, o++, 2 + k, &state[k]));
  }
  int64_t *step;
  TY_RETURN_IF_ERROR(ty_iin(c, 8, &step));
  ty_ref_adafactor_params_t p = {
      .lr = ty_fscalar(c, 6, &s), .weight_decay = ty_fscalar(c, 7, &s),
      .beta1 = state[3] ? ty_fscalar(c, 9, &s) : 0.0, .step = step[0],
      .eps1 = ty_attr_float(c, "eps1", 1e-30), .eps2 = ty_attr_float(c, "eps2", 1e-3),
      .clip_threshold = ty_attr_float(c, "clip_threshold", 1.0),
      .decay_rate = ty_attr_float(c, "decay_rate", -0.8),
      .relative_step = ty_attr_int(c, "relative_step", 0) != 0,
      .scale_parameter = ty_attr_int(c, "scale_parameter", 1) != 0,
      .warmup_init = ty_attr_int(c, "warmup_init", 0) != 0,
  };
  TY_RETURN_IF_ERROR(s);
  int64_t rows = 1, cols = 1, batches = 1;
  if (pv->rank >= 2) {
    rows = pv->dims[pv->rank - 2];
    cols = pv->dims[pv->rank - 1];
    batches = rows > 0 && cols > 0 ? ty_elems(pv) / (rows * cols) : 0;
  } else {
    cols = ty_elems(pv);
  }
  return ty_ref_adafactor_step(&p, param, grad, state[0], state[1], state[2], state[3], batches,
                               rows, cols);
}

/* linear_cross_entropy and its backward: h [..., C], w [V, C]. */
static ty_status_t ty_run_linear_cross_entropy(ty_interp_t *c, bool backward) {
  uint32_t at = backward ? 1 : 0;
  const ty_abi_value_t *hv = ty_in_value(c, at), *wv = ty_in_value(c, at + 1);
  double *h, *w;
  int64_t *targets;
  TY_RETURN_IF_ERROR(ty_fin(c, at, &h));
  TY_RETURN_IF_ERROR(ty_fin(c, at + 1, &w));
  TY_RETURN_IF_ERROR(ty_iin(c, at + 2, &targets));
  int64_t rows = ty_rows(hv), channels = ty_last(hv), vocab = wv->dims[0];
  int64_t chunk = ty_attr_int(c, "chunk", 0);
  double *o0, *o1;
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &o0));
  TY_RETURN_IF_ERROR(ty_fout(c, 1, &o1));
  if (!backward) {
    return ty_ref_linear_cross_entropy_forward(h, w, targets, rows, channels, vocab, chunk, o0,
                                               o1);
  }
  double *dloss, *lse;
  TY_RETURN_IF_ERROR(ty_fin(c, 0, &dloss));
  TY_RETURN_IF_ERROR(ty_fin(c, 4, &lse));
  return ty_ref_linear_cross_entropy_backward(h, w, targets, lse, dloss, rows, channels, vocab,
                                              chunk, o0, o1);
}

static ty_status_t ty_run_clip(ty_interp_t *c) {
  ty_status_t s = TY_OK;
  double max_norm = ty_fscalar(c, 0, &s);
  TY_RETURN_IF_ERROR(s);
  int count = (int)c->node->input_count - 1;
  double *grads[TY_INTERP_MAX_IO];
  int64_t sizes[TY_INTERP_MAX_IO];
  for (int i = 0; i < count; ++i) {
    TY_RETURN_IF_ERROR(ty_fout_copy(c, (uint32_t)i + 1, (uint32_t)i + 1, &grads[i]));
    sizes[i] = ty_elems(ty_in_value(c, (uint32_t)i + 1));
  }
  double *norm;
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &norm));
  norm[0] = ty_ref_clip_grad_norm(count, grads, sizes, max_norm);
  return TY_OK;
}

/* The vocabulary-parallel ops (ops/op_vocab.c): a shard of `rows` rows
 * (a table's first axis, a logits' last) of which `valid` are real. */
static ty_status_t ty_run_vocab(ty_interp_t *c, const char *op) {
  const bool bwd = strstr(op, "_backward") != NULL;
  double *a, *y, *d = NULL, *m = NULL;
  int64_t *ids;
  if (!strcmp(op, "vocab_embedding_backward")) { /* (dout, ids) -> dtable */
    const int64_t rows = ty_out_value(c, 0)->dims[0];
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &d));
    TY_RETURN_IF_ERROR(ty_iin(c, 1, &ids));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    ty_ref_vocab_embedding_backward(d, ids, ty_elems(ty_in_value(c, 1)),
                                    ty_attr_int(c, "vocab_start", 0),
                                    ty_attr_int(c, "vocab_valid", rows),
                                    ty_last(ty_in_value(c, 0)), y);
    return TY_OK;
  }
  /* the rest: (d,) x (a table or logits or sums), ids (, m) */
  const uint32_t at = bwd ? 1 : 0;
  const ty_abi_value_t *x = ty_in_value(c, at);
  const bool embed = !strcmp(op, "vocab_embedding");
  const int64_t rows = embed ? x->dims[0] : ty_last(x), count = ty_rows(x);
  const int64_t start = ty_attr_int(c, "vocab_start", 0), valid = ty_attr_int(c, "vocab_valid", rows);
  ids = NULL;
  TY_RETURN_IF_ERROR(ty_fin(c, at, &a));
  const bool with_ids = strcmp(op, "vocab_max_backward") != 0;
  if (with_ids && c->node->input_count > at + 1) TY_RETURN_IF_ERROR(ty_iin(c, at + 1, &ids));
  if (bwd) TY_RETURN_IF_ERROR(ty_fin(c, 0, &d));
  if (!strncmp(op, "vocab_ce_sums", 13)) TY_RETURN_IF_ERROR(ty_fin(c, at + 2, &m));
  TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
  if (embed) {
    ty_ref_vocab_embedding_forward(a, x->dims[1], start, valid, ids,
                                   ty_elems(ty_in_value(c, 1)), y);
  } else if (!strcmp(op, "vocab_max")) {
    ty_ref_vocab_max(a, count, rows, valid, y);
  } else if (!strcmp(op, "vocab_ce_sums")) {
    ty_ref_vocab_ce_sums_forward(a, ids, m, count, rows, start, valid, y);
  } else if (!strcmp(op, "vocab_max_backward")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 2, &m));
    ty_ref_vocab_max_backward(d, a, m, count, rows, valid, y);
  } else if (!strcmp(op, "vocab_ce_sums_backward")) {
    double *dm;
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &dm));
    ty_ref_vocab_ce_sums_backward(d, a, ids, m, count, rows, start, valid, y, dm);
  } else if (!bwd) {
    return ty_ref_vocab_ce_loss_forward(a, ids, count, ty_attr_int(c, "vocab_size", 0), y);
  } else {
    ty_ref_vocab_ce_loss_backward(d, a, ids, count, y);
  }
  return TY_OK;
}

static ty_status_t ty_run_node(ty_interp_t *c) {
  const char *op = c->node->op;
  if (!strncmp(op, "vocab_", 6)) return ty_run_vocab(c, op);
  if (!strcmp(op, "gelu") || !strcmp(op, "gelu_backward") || !strcmp(op, "silu") ||
      !strcmp(op, "silu_backward")) {
    return ty_run_unary(c, op);
  }
  if (!strcmp(op, "add")) return ty_run_binary(c, TY_REF_BINARY_ADD);
  if (!strcmp(op, "sub")) return ty_run_binary(c, TY_REF_BINARY_SUB);
  if (!strcmp(op, "mul")) return ty_run_binary(c, TY_REF_BINARY_MUL);
  if (!strcmp(op, "div")) return ty_run_binary(c, TY_REF_BINARY_DIV);
  if (!strcmp(op, "broadcast_to")) return ty_run_broadcast_to(c);
  if (!strncmp(op, "reduce_", 7) && strcmp(op, "reduce_scatter") != 0) return ty_run_reduce(c, op);
  if (!strcmp(op, "matmul")) return ty_run_matmul(c);
  if (!strncmp(op, "layernorm", 9) || !strncmp(op, "rmsnorm", 7)) return ty_run_norm(c, op);
  if (!strcmp(op, "rope")) return ty_run_rope(c, false);
  if (!strcmp(op, "rope_backward")) return ty_run_rope(c, true);
  if (!strcmp(op, "attention")) return ty_run_attention(c, false);
  if (!strcmp(op, "attention_backward")) return ty_run_attention(c, true);
  if (!strcmp(op, "attention_merge")) return ty_run_attention_merge(c, false);
  if (!strcmp(op, "attention_merge_backward")) return ty_run_attention_merge(c, true);
  if (!strcmp(op, "reshape") || !strcmp(op, "cast") || !strcmp(op, "transpose") ||
      !strcmp(op, "slice") || !strcmp(op, "slice_backward") || !strcmp(op, "concat")) {
    return ty_run_views(c, op);
  }
  if (!strcmp(op, "adamw_update") || !strcmp(op, "sgd_update")) return ty_run_optim(c, op);
  if (!strcmp(op, "clip_by_global_norm")) return ty_run_clip(c);
  if (!strcmp(op, "adafactor_update")) return ty_run_adafactor(c);
  if (!strcmp(op, "global_norm_scale")) {
    ty_status_t s = TY_OK;
    int count = (int)c->node->input_count - 1;
    double sums[TY_INTERP_MAX_IO], *norm, *scale;
    for (int i = 0; i < count; ++i) sums[i] = ty_fscalar(c, (uint32_t)i + 1, &s);
    TY_RETURN_IF_ERROR(s);
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &norm));
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &scale));
    scale[0] = ty_ref_global_norm_scale(count, sums, ty_fscalar(c, 0, &s), norm);
    return s;
  }
  if (!strcmp(op, "linear_cross_entropy")) return ty_run_linear_cross_entropy(c, false);
  if (!strcmp(op, "linear_cross_entropy_backward")) return ty_run_linear_cross_entropy(c, true);

  const ty_abi_value_t *out = ty_out_value(c, 0);
  int64_t n = ty_elems(out);
  double *a, *b, *d, *y, *y2;
  int64_t *ids;
  if (!strcmp(op, "scale")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    ty_ref_scale_forward(a, n, ty_attr_float(c, "alpha", 1.0), y);
    return TY_OK;
  }
  if (!strcmp(op, "swiglu")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &b));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    ty_ref_swiglu_forward(a, b, n, y);
    return TY_OK;
  }
  if (!strcmp(op, "swiglu_backward")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &d));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &a));
    TY_RETURN_IF_ERROR(ty_fin(c, 2, &b));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &y2));
    ty_ref_swiglu_backward(a, b, d, n, y, y2);
    return TY_OK;
  }
  if (!strcmp(op, "softmax")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    ty_ref_softmax_forward(a, ty_rows(out), ty_last(out), y);
    return TY_OK;
  }
  if (!strcmp(op, "softmax_backward")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &d));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &a));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    ty_ref_softmax_backward(a, d, ty_rows(out), ty_last(out), y);
    return TY_OK;
  }
  if (!strcmp(op, "embedding")) {
    const ty_abi_value_t *table = ty_in_value(c, 0);
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_iin(c, 1, &ids));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    return ty_ref_embedding_forward(a, table->dims[0], table->dims[1], ids,
                                    ty_elems(ty_in_value(c, 1)), y);
  }
  if (!strcmp(op, "embedding_backward")) {
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &d));
    TY_RETURN_IF_ERROR(ty_iin(c, 1, &ids));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    return ty_ref_embedding_backward(d, ids, ty_elems(ty_in_value(c, 1)), out->dims[0],
                                     out->dims[1], y);
  }
  if (!strcmp(op, "cross_entropy")) {
    const ty_abi_value_t *logits = ty_in_value(c, 0);
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_iin(c, 1, &ids));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    return ty_ref_cross_entropy_forward(a, ids, ty_rows(logits), ty_last(logits), y);
  }
  if (!strcmp(op, "cross_entropy_backward")) {
    const ty_abi_value_t *logits = ty_in_value(c, 1);
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &d));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &a));
    TY_RETURN_IF_ERROR(ty_iin(c, 2, &ids));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    return ty_ref_cross_entropy_backward(a, ids, d, ty_rows(logits), ty_last(logits), y);
  }
  if (!strcmp(op, "dropout") || !strcmp(op, "dropout_backward")) {
    int64_t *rng;
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_iin(c, 1, &rng));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    uint64_t offset = (uint64_t)rng[1] * 65536u + (uint64_t)ty_attr_int(c, "stream", 0);
    double p = ty_attr_float(c, "p", 0.0);
    const int64_t seq_len = ty_attr_int(c, "seq_len", 0);
    if (seq_len > 0) { /* numbered as in the whole sequence (context parallel) */
      const ty_abi_value_t *xv = ty_in_value(c, 0);
      const ty_abi_attr_t *st = ty_attr(c, "seq_starts");
      if (!st || st->kind != TY_ATTR_INTS || xv->rank < 2) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "%s: seq_len needs seq_starts and x of rank >= 2", op);
      }
      int64_t inner = 1;
      for (uint32_t ax = 2; ax < xv->rank; ++ax) inner *= xv->dims[ax];
      ty_ref_dropout_rows_t rows = {.outer = xv->dims[0], .local = xv->dims[1], .inner = inner,
                                    .seq_len = seq_len, .starts = st->ints,
                                    .count = (uint32_t)st->count};
      return ty_ref_dropout_numbered(a, n, p, (uint64_t)rng[0], offset, &rows, y);
    }
    return !strcmp(op, "dropout")
               ? ty_ref_dropout_forward(a, n, p, (uint64_t)rng[0], offset, y)
               : ty_ref_dropout_backward(a, n, p, (uint64_t)rng[0], offset, y);
  }
  if (!strcmp(op, "all_reduce") || !strcmp(op, "tp_copy") || !strcmp(op, "tp_reduce")) {
    /* One process is world 1, where every reduction over the ranks is the
     * identity (ops/op_collective.c); executors of a bigger world reduce
     * the result through their communicator afterwards. */
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    memcpy(y, a, (size_t)n * sizeof(double));
    return TY_OK;
  }
  if (!strcmp(op, "all_gather") || !strcmp(op, "reduce_scatter")) {
    /* World 1: one part, the identity (ops/op_gather.c). An executor of a
     * bigger world gathers through its communicator; the reference has
     * none, so a node of several parts is refused rather than guessed. */
    const int64_t parts = ty_attr_int(c, "parts", 1);
    if (parts != 1) {
      return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                            "%s of %lld parts needs a run whose group has %lld ranks; the "
                            "reference runs one process",
                            op, (long long)parts, (long long)parts);
    }
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    memcpy(y, a, (size_t)n * sizeof(double));
    return TY_OK;
  }
  if (!strcmp(op, "kv_cache_write")) {
    const ty_abi_value_t *cache = ty_in_value(c, 0), *fresh = ty_in_value(c, 1);
    int64_t *pos;
    TY_RETURN_IF_ERROR(ty_fout_copy(c, 0, 0, &y));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &a));
    TY_RETURN_IF_ERROR(ty_iin(c, 2, &pos));
    return ty_ref_kv_cache_write(y, cache->dims[0], cache->dims[1], cache->dims[2],
                                 cache->dims[3], a, fresh->dims[1], pos[0]);
  }
  if (!strcmp(op, "paged_kv_write")) {
    const ty_abi_value_t *pool = ty_in_value(c, 0), *fresh = ty_in_value(c, 1);
    int64_t *slots;
    TY_RETURN_IF_ERROR(ty_fout_copy(c, 0, 0, &y));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &a));
    TY_RETURN_IF_ERROR(ty_iin(c, 2, &slots));
    return ty_ref_paged_kv_write(y, pool->dims[0], pool->dims[1], pool->dims[2],
                                 pool->dims[3], a, fresh->dims[0], slots);
  }
  if (!strcmp(op, "paged_attention")) return ty_run_paged_attention(c);
  if (!strcmp(op, "sample")) {
    const ty_abi_value_t *logits = ty_in_value(c, 0), *history = ty_in_value(c, 3);
    int64_t *seeds, *hist;
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fin(c, 1, &b));
    TY_RETURN_IF_ERROR(ty_iin(c, 2, &seeds));
    TY_RETURN_IF_ERROR(ty_iin(c, 3, &hist));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &y2));
    return ty_ref_sample(a, logits->dims[0], logits->dims[1], b, seeds, hist,
                         history ? history->dims[1] : 0, y, y2);
  }
  if (!strcmp(op, "top_logprobs")) {
    const ty_abi_value_t *logits = ty_in_value(c, 0);
    TY_RETURN_IF_ERROR(ty_fin(c, 0, &a));
    TY_RETURN_IF_ERROR(ty_fout(c, 0, &y));
    TY_RETURN_IF_ERROR(ty_fout(c, 1, &y2));
    return ty_ref_top_logprobs(a, logits->dims[0], logits->dims[1], ty_attr_int(c, "k", 1), y,
                               y2);
  }
  return ty_status_make(TY_CODE_UNIMPLEMENTED, "the reference has no kernel for op %s", op);
}

int ty_ref_supports_op(const char *op) {
  static const char *const ops[] = {
      "embedding", "embedding_backward", "matmul", "add", "sub", "mul", "div", "scale",
      "broadcast_to", "reduce_sum", "reduce_mean", "reduce_sumsq", "layernorm",
      "layernorm_backward", "rmsnorm", "rmsnorm_backward", "gelu", "gelu_backward",
      "silu", "silu_backward", "swiglu", "swiglu_backward", "softmax",
      "softmax_backward", "rope", "rope_backward", "attention", "attention_backward",
      "attention_merge", "attention_merge_backward",
      "cross_entropy", "cross_entropy_backward", "linear_cross_entropy",
      "linear_cross_entropy_backward", "dropout", "dropout_backward", "cast",
      "reshape", "transpose", "slice", "slice_backward", "concat", "adamw_update",
      "sgd_update", "adafactor_update", "clip_by_global_norm", "global_norm_scale",
      "kv_cache_write", "paged_kv_write", "paged_attention", "all_reduce", "tp_copy", "tp_reduce", "all_gather", "reduce_scatter", "vocab_embedding",
      "vocab_embedding_backward", "vocab_max", "vocab_max_backward", "vocab_ce_sums", "vocab_ce_sums_backward",
      "vocab_ce_loss", "vocab_ce_loss_backward", "sample", "top_logprobs", NULL,
  };
  for (const char *const *p = ops; *p; ++p) {
    if (strcmp(*p, op) == 0) return 1;
  }
  return 0;
}

ty_status_t ty_ref_execute_node(const ty_abi_graph_t *graph, uint32_t node,
                                void *const *data) {
  const ty_abi_node_t *n = &graph->nodes[node];
  if (n->input_count > TY_INTERP_MAX_IO || n->output_count > TY_INTERP_MAX_IO) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "node %u (%s) has too many operands",
                          node, n->op);
  }
  ty_interp_t c = {.g = graph, .node = n, .data = data};
  c.fin = calloc(n->input_count + 1, sizeof(double *));
  c.iin = calloc(n->input_count + 1, sizeof(int64_t *));
  c.fout = calloc(n->output_count + 1, sizeof(double *));
  ty_status_t s = (!c.fin || !c.iin || !c.fout) ? ty_oom() : ty_run_node(&c);
  /* Round f64 results into the outputs' storage. */
  for (uint32_t o = 0; o < n->output_count && !s && c.fout; ++o) {
    if (!c.fout[o]) continue;
    const ty_abi_value_t *v = ty_out_value(&c, o);
    int64_t count = ty_elems(v);
    void *dst = c.data[n->outputs[o]];
    for (int64_t i = 0; i < count; ++i) ty_store1(dst, v->dtype, i, c.fout[o][i]);
  }
  for (uint32_t i = 0; i < n->input_count && c.fin; ++i) free(c.fin[i]);
  for (uint32_t i = 0; i < n->input_count && c.iin; ++i) free(c.iin[i]);
  for (uint32_t o = 0; o < n->output_count && c.fout; ++o) free(c.fout[o]);
  free(c.fin);
  free(c.iin);
  free(c.fout);
  return ty_status_annotate(s, "reference: node %u (%s)", node, n->op);
}
