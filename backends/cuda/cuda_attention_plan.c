/* The attention kernels' path rule and launch shapes (cuda_attention_plan.h);
 * tile sizes come from kernels/attention_shapes.h, which the kernels read
 * too. */
#include "cuda_attention_plan.h"

#include <stddef.h>

#include "kernels/attention_shapes.h"

/* Kernel names by [dtype: f32, bf16, f16][head-dim bucket: 64, 128, 256]. */
#define TY_ATT_NAMES3(kind, dt)                                               \
  {"ty_att_" kind "_simt_" dt "_d64", "ty_att_" kind "_simt_" dt "_d128",      \
   "ty_att_" kind "_simt_" dt "_d256"}
#define TY_ATT_NAMES(kind) \
  {TY_ATT_NAMES3(kind, "f32"), TY_ATT_NAMES3(kind, "bf16"), TY_ATT_NAMES3(kind, "f16")}
static const char *const ty_att_simt_names[3][3][3] = {
    TY_ATT_NAMES("fwd"), TY_ATT_NAMES("dq"), TY_ATT_NAMES("dkv")};
static const char *const ty_att_delta_names[3] = {"ty_att_delta_f32", "ty_att_delta_bf16",
                                                  "ty_att_delta_f16"};
/* [kernel: fwd, dq, dkv][dtype: bf16, f16][head dim: 64, 128] */
#define TY_ATT_TC_NAMES(kind)                                               \
  {{"ty_att_" kind "_tc_bf16_d64", "ty_att_" kind "_tc_bf16_d128"},           \
   {"ty_att_" kind "_tc_f16_d64", "ty_att_" kind "_tc_f16_d128"}}
static const char *const ty_att_tc_names[3][2][2] = {
    TY_ATT_TC_NAMES("fwd"), TY_ATT_TC_NAMES("dq"), TY_ATT_TC_NAMES("dkv")};
/* ... and their causal=0 instances (suffix _full). */
#define TY_ATT_TC_FULL_NAMES(kind)                                                    \
  {{"ty_att_" kind "_tc_bf16_d64_full", "ty_att_" kind "_tc_bf16_d128_full"},           \
   {"ty_att_" kind "_tc_f16_d64_full", "ty_att_" kind "_tc_f16_d128_full"}}
static const char *const ty_att_tc_full_names[3][2][2] = {
    TY_ATT_TC_FULL_NAMES("fwd"), TY_ATT_TC_FULL_NAMES("dq"), TY_ATT_TC_FULL_NAMES("dkv")};

/* [kernel: fwd, dq, dkv][dtype: bf16, f16], head dim 64 */
static const char *const ty_att_wg_names[3][2] = {
    {"ty_att_fwd_wg_bf16_d64", "ty_att_fwd_wg_f16_d64"},
    {"ty_att_dq_wg_bf16_d64", "ty_att_dq_wg_f16_d64"},
    {"ty_att_dkv_wg_bf16_d64", "ty_att_dkv_wg_f16_d64"}};

static uint32_t ty_att_ceil(int64_t a, int64_t b) { return (uint32_t)((a + b - 1) / b); }

static void ty_att_set(ty_cu_att_launch_t *l, const char *kernel, int64_t gx, int64_t gy,
                       int64_t gz, uint32_t threads, uint32_t smem) {
  l->kernel = kernel;
  l->sm90 = false;
  l->grid[0] = (uint32_t)gx;
  l->grid[1] = (uint32_t)gy;
  l->grid[2] = (uint32_t)gz;
  l->threads = threads;
  l->smem = smem;
}

const char *ty_cu_att_plan(ty_dtype_t dtype, int64_t B, int64_t T, int64_t S, int64_t Hq,
                           int64_t Hkv, int64_t D, ty_cu_att_path_t best, bool deterministic,
                           bool causal, ty_cu_att_plan_t *out) {
  const int dt = dtype == TY_DTYPE_F32    ? 0
                 : dtype == TY_DTYPE_BF16 ? 1
                 : dtype == TY_DTYPE_F16  ? 2
                                          : -1;
  if (dt < 0) return "the cuda attention kernels take f32, bf16 or f16 q, k and v";
  if (D > TY_ATT_MAX_HEAD_DIM) return "head_dim is above the cuda attention kernels' 256";
  if (T > INT32_MAX || S > INT32_MAX || Hq * D > INT32_MAX) {
    return "T, S or Hq x head_dim is above 2^31 - 1 (the kernels index rows in 32 bits)";
  }
  if (B > 65535 || Hq > 65535) return "batch or heads above 65535 (the CUDA grid's y/z limit)";
  const int64_t G = Hq / Hkv;
  const bool tc = dt > 0 && (D == 64 || D == 128);
  /* wgmma tiles are 64 query rows per warpgroup: below 64 rows (decoding)
   * the mma.sync forward's 16-row warps waste less (H100: 0.084 against
   * 0.094 ms for a GQA decode step). Deterministic mode takes mma.sync for
   * every T: one kernel for a row whatever T it comes with. */
  if (deterministic && best == TY_CU_ATT_WGMMA) best = TY_CU_ATT_MMA;
  /* causal=0: the mma.sync kernels' _full instances or the generic ones;
   * the wgmma kernels are causal-only. */
  if (!causal && best == TY_CU_ATT_WGMMA) best = TY_CU_ATT_MMA;
  out->path = !tc || best == TY_CU_ATT_GENERIC                 ? TY_CU_ATT_GENERIC
              : D == 64 && T >= 64 && best == TY_CU_ATT_WGMMA ? TY_CU_ATT_WGMMA
                                                             : TY_CU_ATT_MMA;
  ty_att_set(&out->launch[TY_CU_ATT_DELTA], ty_att_delta_names[dt],
             ty_att_ceil(B * Hq * T, TY_ATT_DELTA_ROWS), 1, 1, 32 * TY_ATT_DELTA_ROWS, 0);
  if (out->path == TY_CU_ATT_WGMMA) {
    ty_att_set(&out->launch[TY_CU_ATT_FWD], ty_att_wg_names[0][dt - 1],
               ty_att_ceil(T, TY_ATT_WG_FWD_BQ), Hq, B, 128 * TY_ATT_WG_FWD_WGS,
               TY_ATT_WG_FWD_SMEM);
    ty_att_set(&out->launch[TY_CU_ATT_DQ], ty_att_wg_names[1][dt - 1], ty_att_ceil(T, 64), Hq,
               B, 128, TY_ATT_WG_DQ_SMEM);
    ty_att_set(&out->launch[TY_CU_ATT_DKV], ty_att_wg_names[2][dt - 1], ty_att_ceil(S, 64), Hkv,
               B, 128, TY_ATT_WG_DKV_SMEM);
    for (int i = 0; i < TY_CU_ATT_KERNELS_; ++i) out->launch[i].sm90 = i != TY_CU_ATT_DELTA;
    return NULL;
  }
  if (out->path == TY_CU_ATT_MMA) {
    const int d = D == 64 ? 0 : 1;
    const char *const(*names)[2][2] = causal ? ty_att_tc_names : ty_att_tc_full_names;
    ty_att_set(&out->launch[TY_CU_ATT_FWD], names[0][dt - 1][d],
               ty_att_ceil(T, TY_ATT_TC_FWD_BQ), Hq, B, 32 * TY_ATT_TC_FWD_WARPS,
               (uint32_t)TY_ATT_TC_FWD_SMEM(D));
    ty_att_set(&out->launch[TY_CU_ATT_DQ], names[1][dt - 1][d],
               ty_att_ceil(T, TY_ATT_TC_DQ_BQ), Hq, B, 32 * TY_ATT_TC_DQ_WARPS,
               (uint32_t)TY_ATT_TC_DQ_SMEM(D));
    ty_att_set(&out->launch[TY_CU_ATT_DKV], names[2][dt - 1][d],
               ty_att_ceil(S, TY_ATT_TC_DKV_BKV), Hkv, B, 32 * TY_ATT_TC_DKV_WARPS,
               (uint32_t)TY_ATT_TC_DKV_SMEM(D));
    return NULL;
  }
  const int dc = TY_ATT_SIMT_DC(D), bucket = dc == 64 ? 0 : dc == 128 ? 1 : 2;
  const int64_t rows = T * G;
  ty_att_set(&out->launch[TY_CU_ATT_FWD], ty_att_simt_names[0][dt][bucket],
             ty_att_ceil(rows, TY_ATT_SIMT_BQ(dc)), Hkv, B, TY_ATT_SIMT_THREADS,
             (uint32_t)TY_ATT_SIMT_FWD_SMEM(dc));
  ty_att_set(&out->launch[TY_CU_ATT_DQ], ty_att_simt_names[1][dt][bucket],
             ty_att_ceil(rows, TY_ATT_SIMT_BQ(dc)), Hkv, B, TY_ATT_SIMT_THREADS,
             (uint32_t)TY_ATT_SIMT_DQ_SMEM(dc));
  /* dK/dV blocks own BQ keys (16 RM) and stream BK query rows. */
  ty_att_set(&out->launch[TY_CU_ATT_DKV], ty_att_simt_names[2][dt][bucket],
             ty_att_ceil(S, TY_ATT_SIMT_BQ(dc)), Hkv, B, TY_ATT_SIMT_THREADS,
             (uint32_t)TY_ATT_SIMT_DKV_SMEM(dc));
  return NULL;
}
