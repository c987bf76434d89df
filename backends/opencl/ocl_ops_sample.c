/* The launch builders of issue 29's token selection: sample and
 * top_logprobs, one work-group of TY_OCL_WG per row of logits
 * (kernels/sample.cl); the argument lists are the CUDA kernels' too
 * (ty_dev_args_sample / _top_logprobs, backends/common/device_ops.h). */
#include "ocl_exec.h"

/* sample(logits [N, V], params [N, 7], seeds [N, 2], history? [N, L]) -> ids [N], logprob [N] */
void ty_ocl_build_sample(ty_ocl_build_t *b) {
  const int64_t N = ty_dev_vin(b, 0)->dims[0];
  if (N == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_SAMPLE, "ty_sample");
  ty_dev_args_sample(b, c);
  ty_ocl_grid1(c, (uint64_t)N * TY_OCL_WG, TY_OCL_WG);
}

/* top_logprobs(logits [N, V]) attr k -> ids [N, k], logprobs [N, k] */
void ty_ocl_build_top_logprobs(ty_ocl_build_t *b) {
  const int64_t N = ty_dev_vin(b, 0)->dims[0], k = ty_dev_vout(b, 0)->dims[1];
  if (N == 0 || k == 0) return;
  ty_ocl_cmd_t *c = ty_ocl_launch(b, TY_OCL_FAM_SAMPLE, "ty_top_logprobs");
  ty_dev_args_top_logprobs(b, c);
  ty_ocl_grid1(c, (uint64_t)N * TY_OCL_WG, TY_OCL_WG);
}
