/* The launch builders of issue 29's token selection: sample and
 * top_logprobs, one work-group of TY_OCL_WG per row of logits
 * (kernels/sample.cl). The comment above every launch names the kernel and
 * its parameter list: the ty_dev_arg_* calls under it must follow it. */
#include "ocl_exec.h"

/* sample(logits [N, V], params [N, 7], seeds [N, 2], history? [N, L]) -> ids [N], logprob [N] */
void ty_ocl_build_sample(ty_ocl_build_t *b) {
  const ty_abi_value_t *logits = ty_dev_vin(b, 0), *hist = ty_dev_vin(b, 3);
  const int64_t N = logits->dims[0], V = logits->dims[1];
  const int64_t L = hist ? hist->dims[1] : 0;
  if (N == 0) return;
  /* The penalised logits, then the weights, per row; the history's counts. */
  const ty_dev_ref_t work = ty_dev_scratch(b, (uint64_t)(N * V) * sizeof(float));
  const ty_dev_ref_t counts =
      L > 0 ? ty_dev_scratch(b, (uint64_t)(N * V) * sizeof(int32_t)) : ty_dev_none();
  /* ty_sample(logits, int dtl, params, seeds, hist, i64 L, i64 V, work, counts, ids,
   *           logprob, err, int node) */
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_SAMPLE, "ty_sample");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_ref(b, c, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, c, ty_dev_in(b, 2));
  ty_dev_arg_ref(b, c, L > 0 ? ty_dev_in(b, 3) : ty_dev_none());
  ty_dev_arg_i64(b, c, L);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_ref(b, c, work);
  ty_dev_arg_ref(b, c, counts);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 1));
  ty_dev_arg_err(b, c);
  ty_ocl_grid1(c, (uint64_t)N * TY_OCL_WG, TY_OCL_WG);
}

/* top_logprobs(logits [N, V]) attr k -> ids [N, k], logprobs [N, k] */
void ty_ocl_build_top_logprobs(ty_ocl_build_t *b) {
  const ty_abi_value_t *logits = ty_dev_vin(b, 0), *ids = ty_dev_vout(b, 0);
  const int64_t N = logits->dims[0], V = logits->dims[1], k = ids->dims[1];
  if (N == 0 || k == 0) return;
  /* ty_top_logprobs(logits, int dtl, i64 V, int k, ids, logprobs) */
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_SAMPLE, "ty_top_logprobs");
  ty_dev_arg_in(b, c, 0);
  ty_dev_arg_i64(b, c, V);
  ty_dev_arg_i32(b, c, (int32_t)k);
  ty_dev_arg_ref(b, c, ty_dev_out(b, 0));
  ty_dev_arg_ref(b, c, ty_dev_out(b, 1));
  ty_ocl_grid1(c, (uint64_t)N * TY_OCL_WG, TY_OCL_WG);
}
