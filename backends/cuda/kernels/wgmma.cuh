/* Warpgroup tensor-core primitives of Hopper (PTX wgmma, sm_90a only): one
 * m64n64k16 product per call, f32 accumulators, 16-bit inputs, the B operand
 * (and optionally A) read by the tensor cores straight from shared memory
 * through a matrix descriptor. Compiled only into kernels/attention_sm90.cu's
 * fatbin (code=sm_90a); nothing here exists for other chips.
 *
 * Shared tiles: [rows][64] 16-bit elements, rows 128 bytes apart, the tile
 * base 1024-byte aligned, the 16-byte chunk c of row r stored at chunk
 * c ^ (r & 7) — exactly the 128-byte swizzle of the wgmma descriptors
 * (address bits 4-6 XOR bits 7-9), and the layout the mma.sync kernels
 * already use (attention_tc.cuh, ty_tc_at), so one loader serves both.
 * Such a tile is read two ways:
 *  - K-major (the product's K runs along a row): an A tile [m][k] or a B
 *    tile [n][k]. A descriptor covers 16 k (32 bytes of each row); the next
 *    k16 step starts 32 bytes later. Stride byte offset (8-row groups along
 *    M/N) = 1024.
 *  - MN-major (imm-trans-b = 1; K runs down the rows): a B tile [k][n] with
 *    n = 64 along the row. A k16 step covers rows 16 kc .. 16 kc + 15, so it
 *    starts 2048 bytes later; stride byte offset (8-row groups along K) =
 *    1024; the leading byte offset (the next 64 n) is unused at n = 64.
 *
 * Accumulators: float d[32] per thread; element (row, col) of the 64 x 64
 * result lives in warp w = row / 16 of the warpgroup, lane 4 g + t with
 * g = row % 8, at d[4 j + e] for col = 8 j + 2 t + (e & 1) and row =
 * 16 w + g + 8 (e >> 1): per warp exactly mma.sync's C layout of eight n8
 * tiles, so the FlashAttention-2 register code (P as the next A operand)
 * carries over. A from registers: four 32-bit registers per 16 k, mma.sync
 * m16n8k16's A layout for the warp's 16 rows.
 *
 * Ordering: wgmma runs asynchronously in the async proxy. Shared memory
 * written by ordinary stores or cp.async must be fenced to it
 * (ty_wg_fence_smem) before the barrier that precedes the products;
 * registers written by ordinary instructions (accumulators, A fragments)
 * need ty_wg_fence() before the products read them; results are readable
 * after ty_wg_commit() and ty_wg_wait<0>(). ty_wg_keep() pins accumulator
 * registers so the compiler cannot move their uses across the wait. */
#ifndef TY_CUDA_KERNELS_WGMMA_CUH_
#define TY_CUDA_KERNELS_WGMMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "warp_mma.cuh"

/* The descriptor of a swizzled tile at `p` (128-byte swizzle, base offset
 * 0: the tile's 1024-byte atoms must be aligned). Offsets in bytes. */
__device__ __forceinline__ uint64_t ty_wg_desc(const void *p, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = ty_smem_u32(p);
  return (uint64_t)((a & 0x3ffffu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3fffu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3fffu) << 32) | (1ull << 62);
}

/* K-major operand of k16 step kc of a [rows][64] tile. */
__device__ __forceinline__ uint64_t ty_wg_desc_k(const uint16_t *tile, int kc) {
  return ty_wg_desc(tile + kc * 16, 16, 1024);
}

/* MN-major B operand of k16 step kc of a [k rows][64 n] tile. */
__device__ __forceinline__ uint64_t ty_wg_desc_mn(const uint16_t *tile, int kc) {
  return ty_wg_desc(tile + kc * 16 * 64, 8192, 1024);
}

__device__ __forceinline__ void ty_wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void ty_wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void ty_wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Makes this thread's generic-proxy shared-memory writes (stores, completed
 * cp.async) visible to the async proxy (wgmma's operand reads). */
__device__ __forceinline__ void ty_wg_fence_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void ty_wg_keep(float d[32]) {
#pragma unroll
  for (int i = 0; i < 32; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define TY_WG_D32                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, " \
  "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define TY_WG_OUT32(d)                                                                     \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
      "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),           \
      "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),        \
      "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),        \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),        \
      "+f"(d[31])

template <typename T> struct ty_wg_type;
template <> struct ty_wg_type<__nv_bfloat16> {
  static constexpr bool bf16 = true;
};
template <> struct ty_wg_type<__half> {
  static constexpr bool bf16 = false;
};

/* d = (accumulate ? d : 0) + A B, A and B both from shared memory. TB: B is
 * MN-major. */
template <typename T, int TB>
__device__ __forceinline__ void ty_wg_ss(float d[32], uint64_t da, uint64_t db, int accumulate) {
  if (ty_wg_type<T>::bf16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TY_WG_D32
        ", %32, %33, p, 1, 1, 0, %35;\n}\n"
        : TY_WG_OUT32(d)
        : "l"(da), "l"(db), "r"(accumulate), "n"(TB));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " TY_WG_D32
        ", %32, %33, p, 1, 1, 0, %35;\n}\n"
        : TY_WG_OUT32(d)
        : "l"(da), "l"(db), "r"(accumulate), "n"(TB));
  }
}

/* d += A B with A from registers (mma.sync's A layout per warp). */
template <typename T, int TB>
__device__ __forceinline__ void ty_wg_rs(float d[32], const uint32_t a[4], uint64_t db) {
  if (ty_wg_type<T>::bf16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " TY_WG_D32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : TY_WG_OUT32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " TY_WG_D32
        ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : TY_WG_OUT32(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
  }
}

/* d = A B^T over K = 64, the products of the attention kernels' score
 * tiles: A a [64][64] tile (64 rows of 64 k) and B a [64][64] tile (64
 * columns of 64 k), both read K-major; d's previous values are ignored. */
template <typename T>
__device__ __forceinline__ void ty_wg_mm_kk(float d[32], const uint16_t *a, const uint16_t *b) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) ty_wg_ss<T, 0>(d, ty_wg_desc_k(a, kc), ty_wg_desc_k(b, kc), kc);
}

/* d += A B over K = 64: A four k16 fragments in registers, B a [64 k][64]
 * tile read MN-major (the attention kernels' P V, dS K, P^T dO, dS^T Q). */
template <typename T>
__device__ __forceinline__ void ty_wg_mm_rn(float d[32], const uint32_t a[4][4],
                                            const uint16_t *b) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) ty_wg_rs<T, 1>(d, a[kc], ty_wg_desc_mn(b, kc));
}

#endif /* TY_CUDA_KERNELS_WGMMA_CUH_ */
