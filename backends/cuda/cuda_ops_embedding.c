/* The launch builders of embedding (a gather) and its backward (the
 * deterministic scatter-add the vocabulary-parallel embedding shares), on
 * kernels/embedding.cu. The comment above every launch names the kernel and
 * its parameter list: the ty_dev_arg_* calls under it must follow that list
 * exactly. */
#include "cuda_ops.h"

/* ---- embeddings ---- */

void ty_cu_build_embedding(ty_cu_build_t *b) {
  const ty_dev_embedding_t e = ty_dev_embedding_of(b);
  if (e.N * e.D == 0) return;
  /* ty_embedding(table, int dtt, ids, int dti, out, int dto, i64 N, i64 V,
   *              i64 D, err, int node): one warp per row */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_embedding");
  ty_dev_args_embedding(b, c);
  ty_cu_grid_blocks(b, c, ((uint64_t)e.N + 7) / 8, TY_CU_BLOCK);
}

bool ty_cu_emb_scatter_begin(ty_cu_build_t *b, ty_cu_emb_scatter_t *sc) {
  const ty_abi_value_t *dout = ty_dev_vin(b, 0), *ids = ty_dev_vin(b, 1);
  const ty_abi_value_t *dt = ty_dev_vout(b, 0);
  sc->N = ty_dev_numel(ids);
  sc->V = dt->dims[0];
  sc->D = dt->dims[1];
  if (sc->V * sc->D == 0) return false;
  if (sc->N == 0) {
    ty_cu_fill(b, ty_dev_out(b, 0), (uint64_t)(sc->V * sc->D) * ty_cu_esize(dt));
    return false;
  }
  sc->sum = dout->dtype == dt->dtype ? ty_cu_typed(TY_CU_TYPED("ty_emb_sum"), (int)dt->dtype)
                                     : NULL;
  if (!sc->sum) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED,
               "the scatter-add takes dout and dtable of one float dtype (f32, bf16, f16)");
    return false;
  }
  if (sc->N > INT32_MAX || sc->V > INT32_MAX) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED, "more than 2^31 ids or vocabulary rows");
    return false;
  }
  sc->counts = ty_dev_scratch(b, (uint64_t)sc->V * 4);
  sc->offsets = ty_dev_scratch(b, (uint64_t)sc->V * 4);
  sc->cursor = ty_dev_scratch(b, (uint64_t)sc->V * 4);
  sc->list = ty_dev_scratch(b, (uint64_t)sc->N * 4);
  ty_cu_fill(b, sc->counts, (uint64_t)sc->V * 4);
  return b->status == NULL;
}

void ty_cu_emb_scatter_end(ty_cu_build_t *b, const ty_cu_emb_scatter_t *sc, ty_dev_ref_t ids,
                           int dti) {
  /* ty_emb_scan(const int *counts, int *offsets, int *cursor, i64 V): one block */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_emb_scan");
  ty_dev_arg_ref(b, c, sc->counts);
  ty_dev_arg_ref(b, c, sc->offsets);
  ty_dev_arg_ref(b, c, sc->cursor);
  ty_dev_arg_i64(b, c, sc->V);
  ty_cu_grid(b, c, 1, 1, 1, 1024, 1, 1, 0);
  /* ty_emb_place(ids, int dti, i64 N, i64 V, int *cursor, int *list): skips
   * ids outside [0, V) (a shard's -1) */
  c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_emb_place");
  ty_dev_arg_ref(b, c, ids);
  ty_dev_arg_i32(b, c, dti);
  ty_dev_arg_i64(b, c, sc->N);
  ty_dev_arg_i64(b, c, sc->V);
  ty_dev_arg_ref(b, c, sc->cursor);
  ty_dev_arg_ref(b, c, sc->list);
  ty_cu_grid1(b, c, (uint64_t)sc->N, TY_CU_BLOCK);
  /* ty_emb_sum_<T>(dout, ids, int dti, const int *counts, const int *offsets,
   *                const int *list, dtable, i64 N, i64 V, i64 D): one block
   * per vocabulary row; 256 threads (they must divide TY_EMB_CAP = 2048) */
  c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, sc->sum);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 0));
  ty_dev_arg_ref(b, c, ids);
  ty_dev_arg_i32(b, c, dti);
  ty_dev_arg_ref(b, c, sc->counts);
  ty_dev_arg_ref(b, c, sc->offsets);
  ty_dev_arg_ref(b, c, sc->list);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_i64(b, c, sc->N);
  ty_dev_arg_i64(b, c, sc->V);
  ty_dev_arg_i64(b, c, sc->D);
  ty_cu_grid_blocks(b, c, (uint64_t)sc->V, 256);
}

void ty_cu_build_embedding_backward(ty_cu_build_t *b) {
  const ty_abi_value_t *ids = ty_dev_vin(b, 1);
  ty_cu_emb_scatter_t sc;
  if (!ty_cu_emb_scatter_begin(b, &sc)) return;
  /* ty_emb_count(ids, int dti, i64 N, i64 V, int *counts, err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_EMBEDDING, "ty_emb_count");
  ty_dev_arg_in(b, c, 1);
  ty_dev_arg_i64(b, c, sc.N);
  ty_dev_arg_i64(b, c, sc.V);
  ty_dev_arg_ref(b, c, sc.counts);
  ty_dev_arg_err(b, c);
  ty_cu_grid1(b, c, (uint64_t)sc.N, TY_CU_BLOCK);
  ty_cu_emb_scatter_end(b, &sc, ty_dev_in(b, 1), ty_dev_dt(ids));
}
