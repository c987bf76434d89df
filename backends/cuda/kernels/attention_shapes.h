/* Tile shapes of the attention kernels (kernels/attention*.cu*), shared by
 * the kernels and their builder (cuda_attention.c) so launch geometry and
 * shared-memory sizes cannot drift apart. Plain C macros: nvcc and the C
 * compiler both read this file. Sizes are in bytes. */
#ifndef TY_CUDA_KERNELS_ATTENTION_SHAPES_H_
#define TY_CUDA_KERNELS_ATTENTION_SHAPES_H_

/* ---- the generic (SIMT, f32 math) kernels ----
 * 128 threads as 16 row groups x 8 column lanes. DC is the head-dim bucket
 * (64, 128 or 256; the head dim is zero-padded up to it in shared memory).
 * A thread owns RM rows and KC keys of a tile, so a block holds
 * BQ = 16 RM query rows (dK/dV kernel: 16 RM keys) and streams tiles of
 * BK = 8 KC keys (dK/dV kernel: 8 KC query rows). Shared rows are padded to
 * DC + 1 floats so the column lanes hit distinct banks. KC differs per
 * kernel so every kernel's shared memory stays under 99 KiB, the opt-in
 * limit of sm_86/sm_89 cards (which run the sm_80 code). */
#define TY_ATT_SIMT_THREADS 128
#define TY_ATT_MAX_HEAD_DIM 256
#define TY_ATT_SIMT_DC(d) ((d) <= 64 ? 64 : (d) <= 128 ? 128 : 256)
#define TY_ATT_SIMT_RM(dc) ((dc) <= 64 ? 4 : (dc) <= 128 ? 2 : 1)
#define TY_ATT_SIMT_BQ(dc) (16 * TY_ATT_SIMT_RM(dc))
#define TY_ATT_SIMT_KC_FWD(dc) ((dc) <= 128 ? 8 : 4)
#define TY_ATT_SIMT_KC_DQ(dc) ((dc) <= 64 ? 8 : (dc) <= 128 ? 4 : 2)
#define TY_ATT_SIMT_KC_DKV(dc) ((dc) <= 128 ? 4 : 2)
/* forward: Q [BQ][DC+1], K and V [BK][DC+1], P [BQ][BK+1] floats, then the
 * rows' positions (BQ ints). */
#define TY_ATT_SIMT_FWD_SMEM(dc)                                                        \
  (4 * (TY_ATT_SIMT_BQ(dc) * ((dc) + 1) + 16 * TY_ATT_SIMT_KC_FWD(dc) * ((dc) + 1) +     \
        TY_ATT_SIMT_BQ(dc) * (8 * TY_ATT_SIMT_KC_FWD(dc) + 1) + TY_ATT_SIMT_BQ(dc)))
/* dQ: Q and dO [BQ][DC+1], K and V [BK][DC+1], dS [BQ][BK+1], then per row
 * position, lse*log2(e) and delta. */
#define TY_ATT_SIMT_DQ_SMEM(dc)                                                         \
  (4 * (2 * TY_ATT_SIMT_BQ(dc) * ((dc) + 1) + 16 * TY_ATT_SIMT_KC_DQ(dc) * ((dc) + 1) +  \
        TY_ATT_SIMT_BQ(dc) * (8 * TY_ATT_SIMT_KC_DQ(dc) + 1) + 3 * TY_ATT_SIMT_BQ(dc)))
/* dK/dV: K and V [BQ][DC+1] (here BQ counts keys), Q and dO [BK][DC+1]
 * (BK counts query rows), P^T and dS^T [BQ][BK+1], then per query row
 * position, lse*log2(e) and delta. */
#define TY_ATT_SIMT_DKV_SMEM(dc)                                                        \
  (4 * (2 * TY_ATT_SIMT_BQ(dc) * ((dc) + 1) + 16 * TY_ATT_SIMT_KC_DKV(dc) * ((dc) + 1) + \
        2 * TY_ATT_SIMT_BQ(dc) * (8 * TY_ATT_SIMT_KC_DKV(dc) + 1) +                      \
        24 * TY_ATT_SIMT_KC_DKV(dc)))

/* ---- the tensor-core kernels (bf16/f16, head dim 64 or 128) ----
 * Warps of 16 rows each; tiles of 64 keys; every shared tile is [rows][D]
 * 16-bit elements, 16-byte chunks XOR-swizzled by row. At most 96 KiB of
 * shared memory (under sm_86/sm_89's 99 KiB). */
#define TY_ATT_TC_BK 64
/* forward: 8 warps = 128 query rows; Q, then K and V double-buffered. */
#define TY_ATT_TC_FWD_WARPS 8
#define TY_ATT_TC_FWD_BQ (16 * TY_ATT_TC_FWD_WARPS)
#define TY_ATT_TC_FWD_SMEM(d) (2 * ((d) * TY_ATT_TC_FWD_BQ + 4 * (d) * TY_ATT_TC_BK))
/* Blocks per SM the forward is register-limited to (__launch_bounds__). */
#define TY_ATT_TC_FWD_BLOCKS(d) ((d) <= 64 ? 2 : 1)
/* dQ: 4 warps = 64 query rows; Q and dO, then K and V double-buffered in
 * tiles of 64 keys (32 at D = 128, where the dQ accumulators take 64
 * registers and S and dP of 64 keys would push the kernel to 255). */
#define TY_ATT_TC_DQ_WARPS 4
#define TY_ATT_TC_DQ_BQ (16 * TY_ATT_TC_DQ_WARPS)
#define TY_ATT_TC_DQ_BK(d) ((d) <= 64 ? 64 : 32)
#define TY_ATT_TC_DQ_SMEM(d) (2 * (2 * (d) * TY_ATT_TC_DQ_BQ + 4 * (d) * TY_ATT_TC_DQ_BK(d)))
/* dK/dV: 4 warps = 64 keys; K and V, then query tiles of BQ2 rows (Q, dO
 * and their lse and delta) double-buffered. BQ2 is smaller at D = 128 so
 * the dK and dV accumulators (2 x 16 x D f32 per warp) fit in registers. */
#define TY_ATT_TC_DKV_WARPS 4
#define TY_ATT_TC_DKV_BKV (16 * TY_ATT_TC_DKV_WARPS)
#define TY_ATT_TC_DKV_BQ(d) ((d) <= 64 ? 64 : 32)
#define TY_ATT_TC_DKV_SMEM(d)                                                       \
  (2 * (2 * (d) * TY_ATT_TC_DKV_BKV + 4 * (d) * TY_ATT_TC_DKV_BQ(d)) +              \
   4 * 4 * TY_ATT_TC_DKV_BQ(d))

/* ---- the warpgroup kernels (kernels/attention_sm90.cu: sm_90a wgmma,
 * bf16/f16, head dim 64) ----
 * A warpgroup (4 warps, 128 threads) owns 64 rows (dK/dV: 64 keys); every
 * product is one m64n64k16 wgmma per 16 of K. Shared tiles are [64][64]
 * 16-bit elements (8 KiB) in the tensor-core kernels' swizzled layout, at
 * 1024-byte aligned addresses (the dynamic shared memory is padded by 1 KiB
 * to align its base). forward: 2 warpgroups = 128 query rows; Q, then K and
 * V double-buffered. dQ: one warpgroup; Q and dO, K and V double-buffered.
 * dK/dV: one warpgroup; K and V, then Q and dO (and the tile's lse and
 * delta) double-buffered. */
#define TY_ATT_WG_BK 64
#define TY_ATT_WG_FWD_WGS 2
#define TY_ATT_WG_FWD_BQ (64 * TY_ATT_WG_FWD_WGS)
#define TY_ATT_WG_TILE (64 * 64 * 2)
#define TY_ATT_WG_FWD_SMEM (1024 + TY_ATT_WG_TILE * (TY_ATT_WG_FWD_WGS + 4))
#define TY_ATT_WG_DQ_SMEM (1024 + TY_ATT_WG_TILE * 6)
#define TY_ATT_WG_DKV_SMEM (1024 + TY_ATT_WG_TILE * 6 + 4 * 4 * 64)

/* Rows of the delta = rowsum(dout * out) kernel per 256-thread block (one
 * warp per row). */
#define TY_ATT_DELTA_ROWS 8

#endif /* TY_CUDA_KERNELS_ATTENTION_SHAPES_H_ */
