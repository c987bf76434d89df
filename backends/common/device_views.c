/* The view ops' builders (device_exec.h), the same on every device: they
 * work out shapes and strides and leave the moving to the backend's
 * movers (b->move). */
#include <string.h>

#include "backends/common/device_exec.h"
#include "backends/common/op_shapes.h"

static size_t ty_dev_esize(const ty_abi_value_t *v) { return ty_desc_dtype_size(v->dtype); }

void ty_dev_build_reshape(ty_dev_build_t *b) {
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  b->move->copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(y) * ty_dev_esize(y));
}

void ty_dev_build_broadcast_to(ty_dev_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  if (ty_dev_numel(y) == 0) return;
  ty_op_bcast_t p;
  ty_op_bcast_plan(y, &x, 1, &p);
  int64_t ys[8];
  ty_op_strides((uint32_t)p.rank, p.dims, ys);
  b->move->strided_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), ty_dev_esize(y), p.rank, p.dims,
                        p.stride[0], ys);
}

void ty_dev_build_transpose(ty_dev_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  const ty_abi_attr_t *perm = ty_desc_node_attr(b->node, "perm");
  int64_t xs[8], ys[8], ps[8];
  if (!perm || perm->kind != TY_ATTR_INTS || perm->count != y->rank) {
    ty_dev_fail(b, TY_CODE_INVALID_ARGUMENT, "attribute 'perm' must list %u axes", y->rank);
    return;
  }
  ty_op_strides(x->rank, x->dims, xs);
  ty_op_strides(y->rank, y->dims, ys);
  for (uint32_t d = 0; d < y->rank; ++d) ps[d] = xs[perm->ints[d]];
  b->move->strided_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), ty_dev_esize(y), (int)y->rank,
                        y->dims, ps, ys);
}

/* The element offset of `starts` (attribute) in a row-major shape. */
static int64_t ty_dev_start_offset(ty_dev_build_t *b, const ty_abi_value_t *v) {
  const ty_abi_attr_t *starts = ty_desc_node_attr(b->node, "starts");
  if (!starts || starts->kind != TY_ATTR_INTS || starts->count != v->rank) {
    ty_dev_fail(b, TY_CODE_INVALID_ARGUMENT, "attribute 'starts' must list %u axes", v->rank);
    return 0;
  }
  int64_t s[8], at = 0;
  ty_op_strides(v->rank, v->dims, s);
  for (uint32_t d = 0; d < v->rank; ++d) at += starts->ints[d] * s[d];
  return at;
}

void ty_dev_build_slice(ty_dev_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0), *y = ty_dev_vout(b, 0);
  const size_t es = ty_dev_esize(y);
  int64_t xs[8], ys[8];
  const int64_t start = ty_dev_start_offset(b, x);
  ty_op_strides(x->rank, x->dims, xs);
  ty_op_strides(y->rank, y->dims, ys);
  b->move->strided_copy(b, ty_dev_ref_at(ty_dev_in(b, 0), (uint64_t)start * es),
                        ty_dev_out(b, 0), es, (int)y->rank, y->dims, xs, ys);
}

void ty_dev_build_slice_backward(ty_dev_build_t *b) {
  const ty_abi_value_t *dy = ty_dev_vin(b, 0), *dx = ty_dev_vout(b, 0);
  const size_t es = ty_dev_esize(dx);
  int64_t ds[8], xs[8];
  const int64_t start = ty_dev_start_offset(b, dx);
  ty_op_strides(dy->rank, dy->dims, ds);
  ty_op_strides(dx->rank, dx->dims, xs);
  b->move->fill(b, ty_dev_out(b, 0), (uint64_t)ty_dev_numel(dx) * es);
  b->move->strided_copy(b, ty_dev_in(b, 0), ty_dev_ref_at(ty_dev_out(b, 0), (uint64_t)start * es),
                        es, (int)dy->rank, dy->dims, ds, xs);
}

void ty_dev_build_concat(ty_dev_build_t *b) {
  const ty_abi_value_t *y = ty_dev_vout(b, 0);
  int64_t axis = ty_desc_node_attr_int(b->node, "axis", 0);
  if (axis < 0) axis += y->rank;
  const size_t es = ty_dev_esize(y);
  int64_t ys[8], at = 0;
  ty_op_strides(y->rank, y->dims, ys);
  for (uint32_t i = 0; i < b->node->input_count; ++i) {
    const ty_abi_value_t *x = ty_dev_vin(b, i);
    int64_t xs[8];
    ty_op_strides(x->rank, x->dims, xs);
    b->move->strided_copy(b, ty_dev_in(b, i),
                          ty_dev_ref_at(ty_dev_out(b, 0), (uint64_t)(at * ys[axis]) * es), es,
                          (int)x->rank, x->dims, xs, ys);
    at += x->dims[axis];
  }
}
