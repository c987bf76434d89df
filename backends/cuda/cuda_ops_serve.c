/* The launch builders of issue 29's serving ops on the kernels of
 * kernels/paged.cu (paged_kv_write, paged_attention) and kernels/sample.cu
 * (sample, top_logprobs). The comment above every launch names the kernel
 * and its parameter list: the ty_dev_arg_* calls under it follow it exactly.
 * The ops' shapes are checked by their infer functions before a builder
 * runs; what the kernels cannot take (a head dim over TY_PA_MAX_D) is
 * refused by name in ty_cu_op_check (cuda_ops.c). */
#include <math.h>

#include "cuda_ops.h"
#include "kernels/paged_shapes.h"
#include "kernels/sample_shapes.h"
#include "trainyard/dtype.h"

static const char *const ty_cu_paged_attn_names[3] = {"ty_paged_attn_f32", "ty_paged_attn_bf16",
                                                      "ty_paged_attn_f16"};
static const char *const ty_cu_paged_attn_d64_names[3] = {
    "ty_paged_attn_d64_f32", "ty_paged_attn_d64_bf16", "ty_paged_attn_d64_f16"};
static const char *const ty_cu_paged_attn_d128_names[3] = {
    "ty_paged_attn_d128_f32", "ty_paged_attn_d128_bf16", "ty_paged_attn_d128_f16"};

/* paged_kv_write(pool [NB, BS, Hkv, D], new [N, Hkv, D], slots [N]) -> pool' */
void ty_cu_build_paged_kv_write(ty_cu_build_t *b) {
  const ty_abi_value_t *pool = ty_dev_vin(b, 0), *fresh = ty_dev_vin(b, 1);
  const size_t es = ty_cu_esize(pool);
  /* Under a KV_PAIR fusion (cuda_fuse.h) this launch also does the partner
   * node's write (the layer's values): its operands by value id. */
  const ty_cu_fuse_t *f = ty_cu_fuse_of(b);
  const ty_abi_node_t *pair =
      f && f->kind == TY_CU_FUSE_KV_PAIR ? &b->g->nodes[f->slices[0]] : NULL;
  /* pool' = pool first, unless the plan put pool' in pool's storage (the
   * copy is skipped when the addresses coincide): the in-place state. */
  ty_cu_copy(b, ty_dev_in(b, 0), ty_dev_out(b, 0), (uint64_t)ty_dev_numel(pool) * es);
  const ty_dev_ref_t fresh2 = pair ? ty_dev_value(pair->inputs[1]) : ty_dev_in(b, 1);
  const ty_dev_ref_t pool2 = pair ? ty_dev_value(pair->outputs[0]) : ty_dev_out(b, 0);
  if (pair) ty_cu_copy(b, ty_dev_value(pair->inputs[0]), pool2, (uint64_t)ty_dev_numel(pool) * es);
  const int64_t N = fresh->dims[0], row = fresh->dims[1] * fresh->dims[2];
  if (N == 0 || row == 0) return;
  /* ty_paged_kv_write(fresh, pool, fresh2, pool2, slots, int esize, i64 row, i64 nslots,
   *   err, int node) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_PAGED, "ty_paged_kv_write");
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_ref(b, c, fresh2);
  ty_dev_arg_ref(b, c, pool2);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
  ty_dev_arg_i32(b, c, (int32_t)es);
  ty_dev_arg_i64(b, c, row);
  ty_dev_arg_i64(b, c, pool->dims[0] * pool->dims[1]);
  ty_dev_arg_err(b, c);
  ty_cu_grid(b, c, (uint32_t)N, pair ? 2u : 1u, 1, 128, 1, 1, 0);
}

/* paged_attention(q [N, Hq, D], k_pool, v_pool [NB, BS, Hkv, D],
 *                 block_table [S, MB], row_seq [N], row_pos [N]) -> out [N, Hq, D] */
void ty_cu_build_paged_attention(ty_cu_build_t *b) {
  const ty_abi_value_t *q = ty_dev_vin(b, 0), *kp = ty_dev_vin(b, 1), *tab = ty_dev_vin(b, 3);
  const int64_t N = q->dims[0], Hq = q->dims[1], D = q->dims[2];
  const int64_t NB = kp->dims[0], BS = kp->dims[1], Hkv = kp->dims[2];
  const int64_t S = tab->dims[0], MB = tab->dims[1];
  if (N * Hq * D == 0) return;
  const double scale = ty_desc_node_attr_float(b->node, "scale", 1.0 / sqrt((double)D));
  int64_t window = ty_desc_node_attr_int(b->node, "window", 0);
  int64_t span = MB * BS;
  if (window >= span) window = 0; /* no row sees that far back */
  if (window > 0) span = window;
  const int G = (int)(Hq / Hkv), gchunk = ty_pa_head_chunk(G, (int)D);
  const int chunks = (G + gchunk - 1) / gchunk, rgroup = ty_pa_run_rows(gchunk, (int)D);
  const int max_splits = (int)ty_pa_splits(span < 1 ? 1 : span);
  /* The splits' partials: (acc [D], max, sum) per (row, query head, split);
   * only rows of more than one split touch them. The counts of each (row,
   * block column)'s finished splits start at 0 and are put back to 0 by
   * the merging block: device memory of the executable's own (aux). */
  const ty_dev_ref_t part =
      ty_dev_scratch(b, (uint64_t)N * Hq * max_splits * (D + 2) * sizeof(float));
  const ty_dev_ref_t count =
      ty_dev_aux(b, NULL, (uint64_t)N * (uint64_t)(Hkv * chunks) * sizeof(int32_t));
  const int dt = q->dtype;
  /* ty_paged_attn[_d64|_d128]_<dt>(q, kp, vp, table, row_seq, row_pos, out, part, count,
   *   int N, int NB, int BS, int Hq, int Hkv, int D, int S, int MB, int gchunk, int rgroup,
   *   int max_splits, float scale, int window, err, int node) */
  const int hk = ty_pa_head_kernel((int)D);
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_PAGED,
                                ty_cu_typed(hk == 64    ? ty_cu_paged_attn_d64_names
                                            : hk == 128 ? ty_cu_paged_attn_d128_names
                                                        : ty_cu_paged_attn_names,
                                            dt));
  for (uint32_t i = 0; i < 6; ++i) ty_dev_arg_ref(b, c, ty_dev_in(b, i));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_ref(b, c, count);
  const int64_t ints[] = {N, NB, BS, Hq, Hkv, D, S, MB, gchunk, rgroup, max_splits};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); ++i) ty_dev_arg_i32(b, c, (int32_t)ints[i]);
  ty_dev_arg_f32(b, c, (float)scale);
  ty_dev_arg_i32(b, c, (int32_t)window);
  ty_dev_arg_err(b, c);
  ty_cu_grid(b, c, (uint32_t)N, (uint32_t)(Hkv * chunks), (uint32_t)max_splits, TY_PA_THREADS, 1,
             1, (uint32_t)ty_pa_smem_bytes(rgroup, gchunk, (int)D, (int)ty_cu_esize(q)));
}

/* sample(logits [N, V], params [N, 7], seeds [N, 2], history? [N, L]) -> ids [N], logprob [N]
 * Without a history, ty_sample_scan first walks each row in chunks of
 * TY_SAMPLE_CHUNK ids over N x P blocks (max, argmax, sum of exponentials)
 * and ty_sample merges them; with one, ty_sample walks the row itself (the
 * penalties need the history's counts first). */
void ty_cu_build_sample(ty_cu_build_t *b) {
  const ty_abi_value_t *logits = ty_dev_vin(b, 0), *hist = ty_dev_vin(b, 3);
  const int64_t N = logits->dims[0], V = logits->dims[1];
  if (N == 0) return;
  const int64_t L = hist ? hist->dims[1] : 0;
  const ty_dev_ref_t work = ty_dev_sample_work(b);
  const int64_t P = L > 0 || V == 0 ? 0 : (V + TY_SAMPLE_CHUNK - 1) / TY_SAMPLE_CHUNK;
  const ty_dev_ref_t part =
      P > 0 ? ty_dev_scratch(b, (uint64_t)(N * P) * 4u * sizeof(float)) : ty_dev_none();
  if (P > 0) {
    /* ty_sample_scan(logits, int dtl, i64 V, work, part) */
    ty_cu_cmd_t *s = ty_cu_launch(b, TY_CU_FAM_SAMPLE, "ty_sample_scan");
    ty_dev_arg_in(b, s, 0);
    ty_dev_arg_i64(b, s, V);
    ty_dev_arg_ref(b, s, work);
    ty_dev_arg_ref(b, s, part);
    ty_cu_grid(b, s, (uint32_t)N, (uint32_t)P, 1, TY_SAMPLE_SCAN_THREADS, 1, 1, 0);
  }
  /* ty_sample(<ty_dev_args_sample's list>, part, int P) */
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_SAMPLE, "ty_sample");
  ty_dev_args_sample_with(b, c, work);
  ty_dev_arg_ref(b, c, part);
  ty_dev_arg_i32(b, c, (int32_t)P);
  ty_cu_grid(b, c, (uint32_t)N, 1, 1, TY_SAMPLE_THREADS, 1, 1, 0);
}

/* top_logprobs(logits [N, V]) attr k -> ids [N, k], logprobs [N, k] */
void ty_cu_build_top_logprobs(ty_cu_build_t *b) {
  const int64_t N = ty_dev_vin(b, 0)->dims[0], k = ty_dev_vout(b, 0)->dims[1];
  if (N == 0 || k == 0) return;
  ty_cu_cmd_t *c = ty_cu_launch(b, TY_CU_FAM_SAMPLE, "ty_top_logprobs");
  ty_dev_args_top_logprobs(b, c);
  ty_cu_grid(b, c, (uint32_t)N, 1, 1, TY_SAMPLE_THREADS, 1, 1, 0);
}
