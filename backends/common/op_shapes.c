/* Shape arithmetic of the per-op executors (op_shapes.h). */
#include "backends/common/op_shapes.h"

#include <stdbool.h>
#include <string.h>

void ty_op_strides(uint32_t rank, const int64_t *dims, int64_t *out) {
  int64_t s = 1;
  for (uint32_t d = rank; d-- > 0;) {
    out[d] = s;
    s *= dims[d];
  }
}

void ty_op_bcast_plan(const ty_abi_value_t *out, const ty_abi_value_t *const *ins, int n_in,
                      ty_op_bcast_t *p) {
  int r = (int)out->rank;
  int64_t st[2][8];
  for (int k = 0; k < n_in; ++k) {
    const ty_abi_value_t *x = ins[k];
    int pad = r - (int)x->rank;
    int64_t s = 1;
    for (int d = r - 1; d >= 0; --d) {
      int xd = d - pad;
      int64_t size = xd >= 0 ? x->dims[xd] : 1;
      st[k][d] = size == 1 ? 0 : s;
      s *= size;
    }
  }
  memset(p, 0, sizeof(*p));
  for (int d = 0; d < r; ++d) {
    if (out->dims[d] == 1) continue;
    int q = p->rank;
    bool merge = q > 0;
    for (int k = 0; k < n_in && merge; ++k) merge = p->stride[k][q - 1] == st[k][d] * out->dims[d];
    if (merge) {
      p->dims[q - 1] *= out->dims[d];
      for (int k = 0; k < n_in; ++k) p->stride[k][q - 1] = st[k][d];
    } else {
      p->dims[q] = out->dims[d];
      for (int k = 0; k < n_in; ++k) p->stride[k][q] = st[k][d];
      p->rank = q + 1;
    }
  }
  if (p->rank == 0) {
    p->rank = 1;
    p->dims[0] = 1;
  }
}
