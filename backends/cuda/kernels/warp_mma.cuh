/* Warp-level tensor-core and asynchronous-copy primitives (PTX, sm_80+) for
 * the fast kernels: ldmatrix, mma.sync m16n8k16 with f32 accumulation, and
 * cp.async into shared memory. The asm follows CUTLASS's wrappers.
 *
 * With TY_CU_EMULATE defined (the CPU harness in tests/cuda/ compiles the
 * kernels as host C++), each primitive calls an emulated twin declared by the
 * harness before it includes the kernels; the emulation implements the
 * fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16",
 * "ldmatrix") so index mistakes in the kernels show up without a GPU.
 *
 * Fragment layouts used by the kernels (lane = 4 g + t):
 *   A 16x16 (row-major): reg0 = (row g,   cols 2t, 2t+1), reg1 = (row g+8, ...),
 *                        reg2 = (row g, cols 2t+8, 2t+9), reg3 = (row g+8, ...)
 *   B 16x8  (k x n):     reg0 = (k 2t, 2t+1; n g),  reg1 = (k 2t+8, 2t+9; n g)
 *   C/D 16x8 (f32):      c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = row g+8
 * In every 32-bit register the lower 16 bits hold the lower column (k). So
 * two adjacent C tiles (cols 16j..16j+15) rounded to 16 bits are exactly the
 * A fragment of k-chunk j: FlashAttention-2's register-resident P. */
#ifndef TY_CUDA_KERNELS_WARP_MMA_CUH_
#define TY_CUDA_KERNELS_WARP_MMA_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#ifndef TY_CU_EMULATE
__device__ __forceinline__ uint32_t ty_smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
#endif

/* Four 8x8 b16 matrices; lane l gives the address of row (l & 7) of matrix
 * l >> 3 (16-byte aligned). r[i] receives (row l/4, cols 2(l%4), +1) of
 * matrix i, or with .trans (rows 2(l%4), +1; col l/4). */
__device__ __forceinline__ void ty_ldsm_x4(uint32_t r[4], const void *row_addr) {
#ifdef TY_CU_EMULATE
  ty_emu_ldsm_x4(r, row_addr, false);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(ty_smem_u32(row_addr)));
#endif
}

__device__ __forceinline__ void ty_ldsm_x4_trans(uint32_t r[4], const void *row_addr) {
#ifdef TY_CU_EMULATE
  ty_emu_ldsm_x4(r, row_addr, true);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(ty_smem_u32(row_addr)));
#endif
}

/* d += a b: m16n8k16, 16-bit inputs of type T, f32 accumulators. */
template <typename T>
__device__ __forceinline__ void ty_mma16816(float d[4], const uint32_t a[4], uint32_t b0,
                                            uint32_t b1);

template <>
__device__ __forceinline__ void ty_mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                           uint32_t b0, uint32_t b1) {
#ifdef TY_CU_EMULATE
  ty_emu_mma16816(d, a, b0, b1, true);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

template <>
__device__ __forceinline__ void ty_mma16816<__half>(float d[4], const uint32_t a[4], uint32_t b0,
                                                    uint32_t b1) {
#ifdef TY_CU_EMULATE
  ty_emu_mma16816(d, a, b0, b1, false);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* Two floats rounded to nearest even into one register of T pairs (lo in
 * the lower half). */
template <typename T> __device__ __forceinline__ uint32_t ty_pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t ty_pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

template <> __device__ __forceinline__ uint32_t ty_pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

/* 16 bytes global -> shared, asynchronously; the bytes past src_bytes (0 or
 * 16) are zero-filled. Both addresses 16-byte aligned. */
__device__ __forceinline__ void ty_cp_async16(void *smem, const void *gmem, int src_bytes) {
#ifdef TY_CU_EMULATE
  ty_emu_cp_async(smem, gmem, 16, src_bytes);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(ty_smem_u32(smem)),
               "l"(gmem), "r"(src_bytes));
#endif
}

/* 4 bytes, the same way (src_bytes 0 or 4). */
__device__ __forceinline__ void ty_cp_async4(void *smem, const void *gmem, int src_bytes) {
#ifdef TY_CU_EMULATE
  ty_emu_cp_async(smem, gmem, 4, src_bytes);
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(ty_smem_u32(smem)),
               "l"(gmem), "r"(src_bytes));
#endif
}

/* Closes the group of this thread's copies issued since the last commit. */
__device__ __forceinline__ void ty_cp_commit() {
#ifdef TY_CU_EMULATE
  ty_emu_cp_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/* Waits until at most N of this thread's committed groups are pending. The
 * data is visible to the other threads only after a following barrier. */
template <int N> __device__ __forceinline__ void ty_cp_wait() {
#ifdef TY_CU_EMULATE
  ty_emu_cp_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* 2^x on the MUFU with subnormal results flushed to zero (plain exp2f adds
 * range fixes around every MUFU op); softmax probabilities below 2^-126
 * are zero at any output precision. 2^-inf = 0. */
__device__ __forceinline__ float ty_exp2_ftz(float x) {
#ifdef TY_CU_EMULATE
  const float r = exp2f(x);
  return r < 1.17549435e-38f ? 0.0f : r;
#else
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
  return r;
#endif
}

/* A plain shared-memory load, visible to the emulation's race checker. */
__device__ __forceinline__ float ty_lds_f32(const float *p) {
#ifdef TY_CU_EMULATE
  ty_emu_note_read(p, 4);
#endif
  return *p;
}

#endif /* TY_CUDA_KERNELS_WARP_MMA_CUH_ */
