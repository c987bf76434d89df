/* Context parallel in `trainyard train` (--cp N, issue 31; README "Long
 * sequences"): each sequence of T tokens is cut into 2N chunks of T / 2N,
 * and cp rank r trains on chunks r and 2N-1-r (the same causal work on
 * every rank). The cp ranks of a replica read the same rows and take their
 * chunks; the graph (models/llm.c) gathers keys and values per layer. The
 * weights are replicated over cp, so their gradients are summed over the
 * "dp_cp" group as over data parallel (trainer_dist.c). */
#include <stdio.h>
#include <string.h>

#include "trainer.h"

ty_status_t ty_trainer_cp_shape(ty_trainer_t *t) {
  const int64_t cp = t->par.cp > 1 ? t->par.cp : 1, T = t->shape.T;
  t->shape.Tl = T;
  if (cp == 1) return TY_OK;
  if (T % (2 * cp) != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--cp %lld cuts each sequence into 2 x %lld = %lld chunks, and the "
                          "data's sequence length %lld is not a multiple of %lld: prepare the "
                          "data with a --seq-len that is, or choose another --cp",
                          (long long)cp, (long long)cp, (long long)(2 * cp), (long long)T,
                          (long long)(2 * cp));
  }
  t->shape.Tl = T / cp;
  return TY_OK;
}

int64_t ty_trainer_cp_position(const ty_trainer_t *t, int64_t i) {
  const int64_t cp = t->par.cp, r = t->par.cp_rank;
  if (cp <= 1) return i;
  const int64_t L = t->shape.Tl / 2;
  return i < L ? r * L + i : (2 * cp - 1 - r) * L + (i - L);
}
