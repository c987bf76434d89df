/* Compiles the cuda plugin's kernels (backends/cuda/kernels/<family>.cu) as
 * host C++ for the CPU emulator of tests/cuda/emu: forced in front of a
 * kernel file (-include), it maps CUDA C++'s keywords, built-in indices and
 * device intrinsics onto the emulator's scheduler (emu_sched.cpp), which
 * runs a block's threads as coroutines with real barriers and warp
 * shuffles. Semantics, not speed: the kernels' results, data errors and
 * out-of-bounds accesses (under AddressSanitizer) can be checked on a
 * machine without a GPU. Device math (expf, sincosf, ...) is the host
 * libm's, which differs from the GPU's by a few ulp. */
#ifndef TY_TESTS_CUDA_EMU_EMU_KERNEL_H_
#define TY_TESTS_CUDA_EMU_EMU_KERNEL_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_functions.h>
#include <vector_types.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "emu_runtime.h"

/* kernels/warp_mma.cuh's emulated twins (emu_sched.cpp). cp.async
 * (kernels/paged.cu's and the attention kernels' staging): a copy lands at
 * the cp.async.wait_group that retires its group, not when it is issued,
 * so a read of staged data before the wait sees the old bytes. ldmatrix
 * and mma.sync gather the warp's 32 lanes' operands and give each lane
 * what the PTX ISA's fragment layouts say (tests/cuda/attention_emu.cc's
 * harness checks the attention kernels' fragments in more depth: races,
 * bank conflicts). The running block's dynamic shared memory is the
 * launch's `shared` bytes. */
#define TY_CU_EMULATE 1
void ty_emu_cp_async(void *smem, const void *gmem, int bytes, int src_bytes);
void ty_emu_cp_commit();
void ty_emu_cp_wait(int n);
void ty_emu_ldsm_x4(uint32_t r[4], const void *row_addr, bool trans);
void ty_emu_mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool bf16);
inline void ty_emu_note_read(const void *p, int bytes) {
  (void)p;
  (void)bytes;
}
unsigned char *ty_emu_dyn_smem();
#define ty_pa_smem (ty_emu_dyn_smem())
#define ty_att_smem (ty_emu_dyn_smem())

/* A vector access (kernels/vec.cuh's ty_vload / ty_vstore) must be aligned
 * to its size on a GPU; the host would forgive it, the emulator does not. */
#define TY_CHECK_ALIGNED(p, bytes) ty_emu_check_aligned((const void *)(p), (bytes))

/* The CUDA headers define these for the host compiler as attributes it
 * does not know; kernels are plain functions here. */
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* A block's threads run one after another on one OS thread and blocks run
 * one at a time, so a function-local static is the block's shared memory. */
#define __shared__ static
#define __launch_bounds__(...)

#define threadIdx (ty_emu_current()->tid)
#define blockIdx (ty_emu_block()->bid)
#define blockDim (ty_emu_block()->bdim)
#define gridDim (ty_emu_block()->gdim)

inline void __syncthreads() { ty_emu_sync_block(); }

template <typename T> inline T ty_emu_shfl(T v, int (*pick)(int lane, int arg), int arg) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  bits = ty_emu_shuffle(bits, pick, arg);
  memcpy(&v, &bits, sizeof(T));
  return v;
}

inline int ty_emu_pick_xor(int lane, int arg) { return lane ^ arg; }
inline int ty_emu_pick_up(int lane, int arg) { return lane >= arg ? lane - arg : lane; }
inline int ty_emu_pick_down(int lane, int arg) { return lane + arg < 32 ? lane + arg : lane; }
inline int ty_emu_pick_idx(int lane, int arg) { (void)lane; return arg & 31; }

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  (void)mask;
  (void)width;
  return ty_emu_shfl(v, ty_emu_pick_xor, lane_mask);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  (void)width;
  return ty_emu_shfl(v, ty_emu_pick_up, (int)delta);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  (void)mask;
  (void)width;
  return ty_emu_shfl(v, ty_emu_pick_down, (int)delta);
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int lane, int width = 32) {
  (void)mask;
  (void)width;
  return ty_emu_shfl(v, ty_emu_pick_idx, lane);
}

/* Atomics: threads switch only at barriers and shuffles, so a plain
 * read-modify-write is atomic here. */
inline int atomicCAS(int *p, int compare, int value) {
  int old = *p;
  if (old == compare) *p = value;
  return old;
}
inline unsigned atomicCAS(unsigned *p, unsigned compare, unsigned value) {
  unsigned old = *p;
  if (old == compare) *p = value;
  return old;
}
inline int atomicAdd(int *p, int v) {
  int old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicAdd(unsigned *p, unsigned v) {
  unsigned old = *p;
  *p = old + v;
  return old;
}
inline float atomicAdd(float *p, float v) {
  float old = *p;
  *p = old + v;
  return old;
}

/* CUDA's integer min and max (the attention kernels' tile bounds). */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
/* The emulator runs one thread at a time: memory is always coherent. */
inline void __threadfence() {}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
inline float __int_as_float(int u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) {
  int u;
  memcpy(&u, &f, 4);
  return u;
}
/* Host doubles and floats round to nearest even, as these intrinsics do;
 * the emulator is built with -ffp-contract=off so no product fuses. */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __double2float_rn(double d) { return (float)d; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
[[noreturn]] inline void __trap() { ty_emu_trap(); }

#endif /* TY_TESTS_CUDA_EMU_EMU_KERNEL_H_ */
