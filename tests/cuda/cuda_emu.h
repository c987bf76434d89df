/* A CPU emulation of the CUDA execution model, enough to run the cuda
 * plugin's kernel sources (compiled as host C++ with TY_CU_EMULATE) and check
 * their index arithmetic without a GPU.
 *
 * Every thread of a block is a fiber on one OS thread; a block's
 * fibers run until they reach a barrier (__syncthreads, a warp collective)
 * and the scheduler picks the next one in a seeded random order, so orders
 * a GPU could produce get exercised. Warp collectives (shuffles, ldmatrix,
 * mma.sync) gather the 32 lanes' operands and compute what the PTX ISA
 * specifies for each lane. cp.async copies are queued per thread and land
 * only at the cp.async.wait_group that retires them; shared-memory words
 * touched by cp.async and ldmatrix are shadowed to report races (a read
 * without a barrier after the writer's wait, an overwrite issued while
 * another thread may still read the old data). Dynamic shared memory is a
 * heap block of exactly the launch's size, so AddressSanitizer catches
 * overruns.
 *
 * Not emulated: memory ordering of plain loads and stores (they are
 * immediate), timing, and anything the kernels here do not use. */
#ifndef TY_TESTS_CUDA_CUDA_EMU_H_
#define TY_TESTS_CUDA_CUDA_EMU_H_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define TY_CU_EMULATE 1

#undef __device__
#undef __global__
#undef __shared__
#undef __forceinline__
#define __device__
#define __global__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct ty_emu_dim3 {
  unsigned x, y, z;
};
extern ty_emu_dim3 ty_emu_thread_idx, ty_emu_block_idx, ty_emu_block_dim, ty_emu_grid_dim;
#define threadIdx ty_emu_thread_idx
#define blockIdx ty_emu_block_idx
#define blockDim ty_emu_block_dim
#define gridDim ty_emu_grid_dim

/* The running block's dynamic shared memory (the kernels' extern
 * __shared__ array). */
unsigned char *ty_emu_dyn_smem();
#define ty_att_smem (ty_emu_dyn_smem())

void __syncthreads();
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; }
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
inline int atomicCAS(int *p, int compare, int value) {
  const int old = *p; /* fibers never run concurrently */
  if (old == compare) *p = value;
  return old;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline float __double2float_rn(double d) { return (float)d; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

/* The twins of kernels/warp_mma.cuh. */
void ty_emu_ldsm_x4(uint32_t r[4], const void *row_addr, bool trans);
void ty_emu_mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool bf16);
void ty_emu_cp_async(void *smem, const void *gmem, int bytes, int src_bytes);
void ty_emu_cp_commit();
void ty_emu_cp_wait(int n);
/* A plain shared-memory read the race checker should see. */
void ty_emu_note_read(const void *p, int bytes);

/* ---- for the harness ---- */

struct ty_emu_stats_t {
  long long blocks, barriers, collectives, ldmatrix, ldmatrix_conflicted, cp_async;
  long long races; /* reported on stderr as they are found */
};

/* Runs `kernel` (a call of the kernel with its arguments) on a grid of
 * blocks of `threads` threads with `smem_bytes` of dynamic shared memory.
 * `seed` drives the scheduling order. Aborts on a deadlock. */
void ty_emu_launch(ty_emu_dim3 grid, unsigned threads, size_t smem_bytes, unsigned seed,
                   const std::function<void()> &kernel);
ty_emu_stats_t ty_emu_stats();
void ty_emu_reset_stats();

#endif /* TY_TESTS_CUDA_CUDA_EMU_H_ */
