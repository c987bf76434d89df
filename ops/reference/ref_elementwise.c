/* Reference broadcasting add / sub / mul and scale (see ref_elementwise.h).
 *
 *   out[o] = a[bcast_a(o)] (op) b[bcast_b(o)]
 *   da[i]  = sum over o with bcast_a(o) = i of dout[o] * d(op)/da
 */
#include "ops/reference/ref_elementwise.h"

#include <string.h>

#include "ops/reference/ref_shape.h"

/* Resolved broadcast: the output shape and, for each input, an element
 * stride per output axis that is 0 where the input repeats. */
typedef struct ty_ref_bcast_t {
  int rank;
  int64_t shape[TY_REF_MAX_RANK];
  int64_t count;
  int64_t stride_a[TY_REF_MAX_RANK];
  int64_t stride_b[TY_REF_MAX_RANK];
  int64_t count_a;
  int64_t count_b;
} ty_ref_bcast_t;

static void ty_ref_bcast_input_strides(int rank, int rank_x,
                                       const int64_t *shape_x,
                                       int64_t *out_strides) {
  int64_t own[TY_REF_MAX_RANK];
  ty_ref_shape_strides(rank_x, shape_x, own);
  for (int i = 0; i < rank; ++i) {
    int ix = i - (rank - rank_x);
    out_strides[i] = (ix < 0 || shape_x[ix] == 1) ? 0 : own[ix];
  }
}

static const char *ty_ref_binary_name(ty_ref_binary_op_t op) {
  return op == TY_REF_BINARY_ADD   ? "add"
         : op == TY_REF_BINARY_SUB ? "sub"
         : op == TY_REF_BINARY_MUL ? "mul"
                                   : "div";
}

static ty_status_t ty_ref_bcast_init(ty_ref_binary_op_t op, int rank_a,
                                     const int64_t *shape_a, int rank_b,
                                     const int64_t *shape_b,
                                     ty_ref_bcast_t *out) {
  ty_status_t status = ty_ref_shape_broadcast(rank_a, shape_a, rank_b, shape_b,
                                              &out->rank, out->shape);
  if (status) return ty_status_annotate(status, "%s", ty_ref_binary_name(op));
  TY_RETURN_IF_ERROR(ty_ref_shape_count(out->rank, out->shape, &out->count));
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank_a, shape_a, &out->count_a));
  TY_RETURN_IF_ERROR(ty_ref_shape_count(rank_b, shape_b, &out->count_b));
  ty_ref_bcast_input_strides(out->rank, rank_a, shape_a, out->stride_a);
  ty_ref_bcast_input_strides(out->rank, rank_b, shape_b, out->stride_b);
  return TY_OK;
}

/* Maps flat output index o to the flat indices of a and b. */
static void ty_ref_bcast_map(const ty_ref_bcast_t *bc, int64_t o,
                             int64_t *out_ia, int64_t *out_ib) {
  int64_t ia = 0, ib = 0;
  for (int i = bc->rank - 1; i >= 0; --i) {
    int64_t idx = o % bc->shape[i];
    o /= bc->shape[i];
    ia += idx * bc->stride_a[i];
    ib += idx * bc->stride_b[i];
  }
  *out_ia = ia;
  *out_ib = ib;
}

ty_status_t ty_ref_binary_forward(ty_ref_binary_op_t op, int rank_a,
                                  const int64_t *shape_a, const double *a,
                                  int rank_b, const int64_t *shape_b,
                                  const double *b, double *out) {
  if (op != TY_REF_BINARY_ADD && op != TY_REF_BINARY_SUB &&
      op != TY_REF_BINARY_MUL && op != TY_REF_BINARY_DIV) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "unknown binary op %d",
                          (int)op);
  }
  ty_ref_bcast_t bc;
  TY_RETURN_IF_ERROR(ty_ref_bcast_init(op, rank_a, shape_a, rank_b, shape_b, &bc));
  for (int64_t o = 0; o < bc.count; ++o) {
    int64_t ia, ib;
    ty_ref_bcast_map(&bc, o, &ia, &ib);
    double x = a[ia], y = b[ib];
    out[o] = op == TY_REF_BINARY_ADD   ? x + y
             : op == TY_REF_BINARY_SUB ? x - y
             : op == TY_REF_BINARY_MUL ? x * y
                                       : x / y;
  }
  return TY_OK;
}

ty_status_t ty_ref_binary_backward(ty_ref_binary_op_t op, int rank_a,
                                   const int64_t *shape_a, const double *a,
                                   int rank_b, const int64_t *shape_b,
                                   const double *b, const double *dout,
                                   double *da, double *db) {
  if (op != TY_REF_BINARY_ADD && op != TY_REF_BINARY_SUB &&
      op != TY_REF_BINARY_MUL && op != TY_REF_BINARY_DIV) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "unknown binary op %d",
                          (int)op);
  }
  ty_ref_bcast_t bc;
  TY_RETURN_IF_ERROR(ty_ref_bcast_init(op, rank_a, shape_a, rank_b, shape_b, &bc));
  if (da) memset(da, 0, (size_t)bc.count_a * sizeof(double));
  if (db) memset(db, 0, (size_t)bc.count_b * sizeof(double));
  for (int64_t o = 0; o < bc.count; ++o) {
    int64_t ia, ib;
    ty_ref_bcast_map(&bc, o, &ia, &ib);
    double g = dout[o];
    /* d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 */
    if (da) {
      da[ia] += op == TY_REF_BINARY_MUL   ? g * b[ib]
                : op == TY_REF_BINARY_DIV ? g / b[ib]
                                          : g;
    }
    if (db) {
      db[ib] += op == TY_REF_BINARY_MUL   ? g * a[ia]
                : op == TY_REF_BINARY_SUB ? -g
                : op == TY_REF_BINARY_DIV ? -g * a[ia] / (b[ib] * b[ib])
                                          : g;
    }
  }
  return TY_OK;
}

void ty_ref_scale_forward(const double *x, int64_t n, double alpha, double *y) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}

void ty_ref_scale_backward(const double *dy, int64_t n, double alpha,
                           double *dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = alpha * dy[i];
}
